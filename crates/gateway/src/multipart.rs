//! Multipart uploads (decision 0014): upload and part records in the key's index partition,
//! parts written as chunks of their own tag and never copied, and a completion that commits a
//! head naming a manifest of the parts.
//!
//! Who may change an upload is settled by its record: a part is recorded only while the upload
//! record is unchanged (a guard in the same request), and a completion or an abort first
//! *claims* the upload by removing that record in the same request as writing its pending
//! record. After a claim no part can be recorded, so the parts a claimant lists are all there
//! will ever be; a claimant that dies is finished by the collector from its pending record.

use bytes::Bytes;
use futures::Stream;
use md5::{Digest, Md5};
use shoal_client::Client;
use shoal_proto::osd::ObjOp;

use crate::error::GatewayError;
use crate::index::{self, Completed, Completion};
use crate::layout::{
    self, BucketRecord, Checksums, ContentHeaders, DATA_POOL, GcRecord, Manifest, ManifestPart, ObjectMeta,
    PART_PREFIX, PartRecord, PendingKind, UploadRecord,
};
use crate::objects::{self, BodyCheck, BodyShape, MemoryBudget, PendingWrite, WriteCondition, WriteError, Written};
use crate::partition::{Part, RangeReader};
use crate::partsums::{self, SumKind};
use crate::{rados, versions};

/// Part numbers are 1 to 10,000 (S3's limits), and every part but the last is at least 5 MiB.
pub const MAX_PARTS: u32 = 10_000;
pub const MIN_PART_BYTES: u64 = 5 << 20;
/// Largest part (S3's limit).
pub const MAX_PART_BYTES: u64 = 5 << 30;

/// Attempts at recording a part while other parts of the same upload are recorded.
const RECORD_ATTEMPTS: usize = 64;

/// What a new upload will store with its object.
pub struct NewUpload {
    pub owner_id: String,
    pub owner_display: String,
    pub grants: Vec<layout::Grant>,
    pub tags: Vec<(String, String)>,
    pub content: ContentHeaders,
    pub user_meta: Vec<(String, String)>,
    pub checksum_algorithm: Option<String>,
    /// The object's checksum is to be of the `FULL_OBJECT` type.
    pub full_object_checksum: bool,
    pub lock: layout::Lock,
}

/// Starts an upload of `key`; returns its id.
pub async fn create(client: &Client, bucket: &BucketRecord, key: &str, new: NewUpload) -> Result<u128, GatewayError> {
    let upload = layout::random_tag()?;
    let rec = UploadRecord {
        key: key.to_string(),
        upload,
        initiated_ns: layout::now_ns(),
        owner_id: new.owner_id,
        owner_display: new.owner_display,
        grants: new.grants,
        tags: new.tags,
        content: new.content,
        user_meta: new.user_meta,
        checksum_algorithm: new.checksum_algorithm,
        lock: new.lock,
        full_object_checksum: new.full_object_checksum,
    };
    let ops = vec![
        ObjOp::AssertXattr { name: layout::LIVE_XATTR.into(), value: Some(layout::LIVE_VALUE.to_vec()) },
        ObjOp::OmapSet { entries: vec![(layout::upload_key(key, upload), layout::encode(&rec))] },
    ];
    match index::partition(bucket, key).write(client, ops).await {
        Err(e) if e.is_conflict() => Err(GatewayError::NoSuchBucket(bucket.name.clone())),
        other => other.map(|()| upload),
    }
}

/// The key's current object, if upload `upload`'s completion made it.
async fn completed_by(
    client: &Client,
    bucket: &BucketRecord,
    key: &str,
    upload: u128,
) -> Result<Option<Written>, GatewayError> {
    let versions::Found::Object { head, version_id } = versions::find(client, bucket, key, None).await? else {
        return Ok(None);
    };
    let Some(meta) = objects::head_meta_at(client, &head, key).await? else { return Ok(None) };
    let made_it = objects::manifest_of(client, bucket.id, &meta).await?.is_some_and(|m| m.upload == upload);
    Ok(made_it.then_some(Written { meta, version_id }))
}

/// The upload's record, raw (the token of guards) and decoded.
pub async fn read_upload(
    client: &Client,
    bucket: &BucketRecord,
    key: &str,
    upload: u128,
) -> Result<(Vec<u8>, UploadRecord), GatewayError> {
    let part = index::partition(bucket, key);
    match part.omap_get(client, &layout::upload_key(key, upload)).await? {
        Some(raw) => {
            let rec = layout::decode(&raw, "upload record")?;
            Ok((raw, rec))
        }
        None => Err(GatewayError::NoSuchUpload(layout::upload_id_text(upload))),
    }
}

/// Every part record of `upload` in `part`, in number order.
pub(crate) async fn parts_of(
    client: &Client,
    part: &Part<'_>,
    upload: u128,
) -> Result<Vec<(u32, PartRecord)>, GatewayError> {
    let mut prefix = vec![PART_PREFIX];
    prefix.extend_from_slice(&upload.to_be_bytes());
    let raw = part.omap_prefix(client, &prefix, MAX_PARTS as usize).await?;
    let mut out = Vec::with_capacity(raw.len());
    for (k, v) in raw {
        let number = k.get(17..21).and_then(|b| b.try_into().ok()).map(u32::from_be_bytes);
        let Some(number) = number else {
            return Err(GatewayError::Corrupt(format!("part record key of {} bytes", k.len())));
        };
        out.push((number, layout::decode(&v, "part record")?));
    }
    Ok(out)
}

/// Operations that drop every part record in `parts` and send their chunks to GC at `due_ns`,
/// except the parts whose tags `keep` holds.
pub(crate) fn drop_parts(upload: u128, parts: &[(u32, PartRecord)], keep: &[u128], due_ns: u64) -> Vec<ObjOp> {
    let mut ops = Vec::with_capacity(2);
    if !parts.is_empty() {
        ops.push(ObjOp::OmapRemove { keys: parts.iter().map(|(n, _)| layout::part_key(upload, *n)).collect() });
    }
    let garbage: Vec<GcRecord> = parts
        .iter()
        .filter(|(_, p)| !keep.contains(&p.tag) && p.chunks > 0)
        .map(|(_, p)| GcRecord::Chunks { tag: p.tag, first: 0, count: Some(p.chunks) })
        .collect();
    if !garbage.is_empty() {
        ops.push(index::gc_set(due_ns, garbage));
    }
    ops
}

/// Settings of a part's or a completion's write.
pub struct WriteSettings {
    pub lease: std::time::Duration,
    pub gc_delay_ns: u64,
    /// The bucket's versioning when the request began (a completion in a versioning-enabled
    /// bucket makes a new version).
    pub versioning: layout::Versioning,
}

/// Uploads part `number` of `upload` from `body`, replacing an earlier upload of that number
/// (whose chunks go to GC). Returns the part's record.
#[allow(clippy::too_many_arguments)]
pub async fn upload_part<S, E>(
    client: &Client,
    budget: &MemoryBudget,
    bucket: &BucketRecord,
    key: &str,
    upload: u128,
    number: u32,
    body: S,
    check: Box<dyn BodyCheck>,
    shape: BodyShape,
    settings: &WriteSettings,
) -> Result<PartRecord, WriteError>
where
    S: Stream<Item = Result<Bytes, E>> + Unpin,
    E: std::fmt::Display,
{
    if !(1..=MAX_PARTS).contains(&number) {
        return Err(GatewayError::InvalidArgument(format!("part numbers are 1 to {MAX_PARTS}, not {number}")).into());
    }
    if shape.size_hint.is_some_and(|n| n > MAX_PART_BYTES) {
        return Err(GatewayError::TooLarge(format!("a part is at most {MAX_PART_BYTES} bytes")).into());
    }
    let (raw, _) = read_upload(client, bucket, key, upload).await?;
    let upload_key = layout::upload_key(key, upload);
    let tag = layout::random_tag()?;
    let w = PendingWrite {
        bucket,
        key,
        tag,
        kind: PendingKind::Part { upload, part: number },
        lease: settings.lease,
        gc_delay_ns: settings.gc_delay_ns,
        prepared_at: std::time::Instant::now(),
    };
    let guard = ObjOp::AssertOmap { key: upload_key.clone(), value: Some(raw.clone()) };
    match index::prepare_with(client, bucket, key, tag, w.kind.clone(), vec![guard.clone()]).await {
        Err(e) if e.is_conflict() => return Err(GatewayError::NoSuchUpload(layout::upload_id_text(upload)).into()),
        other => other?,
    }
    let streamed = objects::stream_chunks(client, budget, &w, body, check, shape, false).await?;
    let record = PartRecord {
        tag,
        size_bytes: streamed.size_bytes,
        etag: streamed.md5_hex.clone(),
        mtime_ns: layout::now_ns(),
        chunks: streamed.written,
        checksums: streamed.checksums.clone(),
    };
    drop(streamed);
    let part_obj = index::partition(bucket, key);
    let pkey = layout::part_key(upload, number);
    for _ in 0..RECORD_ATTEMPTS {
        let old = part_obj.omap_get(client, &pkey).await?;
        let mut ops = vec![
            guard.clone(),
            ObjOp::AssertOmap { key: pkey.clone(), value: old.clone() },
            ObjOp::OmapSet { entries: vec![(pkey.clone(), layout::encode(&record))] },
            ObjOp::OmapRemove { keys: vec![layout::pending_key(tag)] },
        ];
        if let Some(old) = &old {
            // The part this one replaces: its chunks go to GC.
            let old: PartRecord = layout::decode(old, "part record")?;
            if old.chunks > 0 {
                let gc = GcRecord::Chunks { tag: old.tag, first: 0, count: Some(old.chunks) };
                ops.push(index::gc_set(layout::now_ns() + settings.gc_delay_ns, vec![gc]));
            }
        }
        match part_obj.write(client, ops).await {
            Ok(()) => return Ok(record),
            Err(e) if e.is_conflict() => {
                if read_upload(client, bucket, key, upload).await.map(|(r, _)| r != raw).unwrap_or(true) {
                    // Completed or aborted meanwhile: this part is not wanted.
                    w.abandon(client, false, record.chunks).await?;
                    return Err(GatewayError::NoSuchUpload(layout::upload_id_text(upload)).into());
                }
            }
            Err(e) => return Err(e.into()),
        }
    }
    Err(GatewayError::Internal(format!("part {number} kept changing over {RECORD_ATTEMPTS} attempts")).into())
}

/// Claims `upload` for a completion or abort tagged `tag`: removes its record and writes the
/// pending record `kind` in one request.
async fn claim(
    client: &Client,
    bucket: &BucketRecord,
    key: &str,
    upload: u128,
    raw: &[u8],
    tag: u128,
    kind: PendingKind,
) -> Result<(), GatewayError> {
    let upload_key = layout::upload_key(key, upload);
    let more = vec![
        ObjOp::AssertOmap { key: upload_key.clone(), value: Some(raw.to_vec()) },
        ObjOp::OmapRemove { keys: vec![upload_key] },
    ];
    match index::prepare_with(client, bucket, key, tag, kind, more).await {
        Err(e) if e.is_conflict() => Err(GatewayError::NoSuchUpload(layout::upload_id_text(upload))),
        other => other,
    }
}

/// Aborts `upload`: its parts are removed and collected.
pub async fn abort(
    client: &Client,
    bucket: &BucketRecord,
    key: &str,
    upload: u128,
    gc_delay_ns: u64,
) -> Result<(), GatewayError> {
    let (raw, _) = read_upload(client, bucket, key, upload).await?;
    let tag = layout::random_tag()?;
    claim(client, bucket, key, upload, &raw, tag, PendingKind::Abort { upload }).await?;
    finish_abort(client, &index::partition(bucket, key), upload, tag, gc_delay_ns).await
}

/// The rest of an abort once claimed (also run by the collector for a dead claimant).
pub(crate) async fn finish_abort(
    client: &Client,
    part_obj: &Part<'_>,
    upload: u128,
    tag: u128,
    gc_delay_ns: u64,
) -> Result<(), GatewayError> {
    let parts = parts_of(client, part_obj, upload).await?;
    let mut ops = drop_parts(upload, &parts, &[], layout::now_ns() + gc_delay_ns);
    ops.push(ObjOp::OmapRemove { keys: vec![layout::pending_key(tag)] });
    part_obj.write(client, ops).await
}

/// A part as a completion lists it.
#[derive(Debug, Clone)]
pub struct RequestedPart {
    pub number: u32,
    /// Without quotes.
    pub etag: String,
    pub checksums: Checksums,
}

/// Completes `upload` from the parts the client lists: claims it, writes the manifest, commits
/// the head (guarded by `condition`), then completes the index entry, dropping every part
/// record and collecting the parts not used. An upload created with a checksum algorithm gets
/// the object checksum its parts make, which must match `claimed` if that holds one.
#[allow(clippy::too_many_arguments)]
pub async fn complete(
    client: &Client,
    bucket: &BucketRecord,
    key: &str,
    upload: u128,
    requested: &[RequestedPart],
    claimed: &Checksums,
    condition: &WriteCondition,
    settings: &WriteSettings,
) -> Result<Written, GatewayError> {
    if requested.is_empty() {
        return Err(GatewayError::MalformedXml("a completion lists at least one part".into()));
    }
    let (raw, rec) = match read_upload(client, bucket, key, upload).await {
        Err(GatewayError::NoSuchUpload(id)) => {
            // Completing an upload twice answers with the object the first completion made,
            // as long as the key still holds it (clients retry completions whose answer they
            // lost).
            return match completed_by(client, bucket, key, upload).await? {
                Some(meta) => Ok(meta),
                None => Err(GatewayError::NoSuchUpload(id)),
            };
        }
        other => other?,
    };
    let versioned = settings.versioning == layout::Versioning::Enabled;
    if versioned && key.contains('\0') {
        return Err(GatewayError::InvalidArgument("keys of versioned objects cannot hold a zero byte".into()));
    }
    let tag = layout::random_tag()?;
    let kind = if versioned {
        PendingKind::CompleteVersion { upload: Box::new(rec.clone()) }
    } else {
        PendingKind::Complete { upload: Box::new(rec.clone()) }
    };
    let prepared_at = std::time::Instant::now();
    claim(client, bucket, key, upload, &raw, tag, kind.clone()).await?;
    let part_obj = index::partition(bucket, key);
    let w =
        PendingWrite { bucket, key, tag, kind, lease: settings.lease, gc_delay_ns: settings.gc_delay_ns, prepared_at };
    // The manifest and the head take effect before this or never (see `PendingWrite::expiry`).
    let expiry = w.expiry(prepared_at);
    // Gives the upload back, as it was, when the completion does not commit (a version object
    // it wrote goes to GC with its manifest).
    let unclaim = || {
        let ops = vec![ObjOp::OmapSet { entries: vec![(layout::upload_key(key, upload), raw.clone())] }];
        let manifest_only = GcRecord::ManifestOnly { tag };
        let gc = if versioned { GcRecord::Version { tag, then: Some(Box::new(manifest_only)) } } else { manifest_only };
        index::abandon(client, bucket, key, tag, Some(gc), settings.gc_delay_ns, ops)
    };
    let parts = parts_of(client, &part_obj, upload).await?;
    let chosen = choose_parts(&parts, requested)
        .and_then(|m| Ok((object_checksums(&rec, &m, requested, claimed)?, Manifest { upload, ..m })));
    let (checksums, manifest) = match chosen {
        Ok(c) => c,
        Err(e) => {
            unclaim().await?;
            return Err(e);
        }
    };
    let mut md5 = Md5::new();
    for p in &manifest.parts {
        let digest = crate::text::hex_decode(&p.etag)
            .ok_or_else(|| GatewayError::Corrupt(format!("part {} has ETag {:?}", p.number, p.etag)))?;
        md5.update(&digest);
    }
    let meta = ObjectMeta {
        key: key.to_string(),
        size_bytes: manifest.parts.iter().map(|p| p.size_bytes).sum(),
        etag: format!("{}-{}", crate::text::hex(&md5.finalize()), manifest.parts.len()),
        mtime_ns: layout::now_ns(),
        tag,
        chunk_bytes: layout::CHUNK_BYTES,
        tails: 0,
        content: rec.content.clone(),
        user_meta: rec.user_meta.clone(),
        checksums,
        owner_id: rec.owner_id.clone(),
        owner_display: rec.owner_display.clone(),
        grants: rec.grants.clone(),
        tags: rec.tags.clone(),
        parts: manifest.parts.len() as u32,
        lock: rec.lock,
    };
    let used: Vec<u128> = manifest.parts.iter().map(|p| p.tag).collect();
    let manifest_object = layout::manifest_object(bucket.id, tag);
    rados::write_record_before(client, DATA_POOL, &manifest_object, layout::encode(&manifest), false, Some(expiry))
        .await?;
    let due = layout::now_ns() + w.gc_delay_ns;
    if versioned {
        objects::commit_version_head(client, bucket.id, &meta, &[], expiry).await?;
        crate::crashpoint::reached(crate::crashpoint::AFTER_HEAD, key);
        let extra = drop_parts(upload, &parts, &used, due);
        return match objects::record_version(client, &w, &meta, condition, extra).await? {
            Some(slot) => Ok(Written { meta, version_id: Some(slot.text()) }),
            None => {
                unclaim().await?;
                Err(objects::refused(client, bucket, key, condition).await)
            }
        };
    }
    if !objects::commit_head(client, &w, &meta, &[], condition, expiry).await? {
        unclaim().await?;
        return Err(objects::refused(client, bucket, key, condition).await);
    }
    crate::crashpoint::reached(crate::crashpoint::AFTER_HEAD, key);
    let how =
        Completion { bucket_id: bucket.id, part: &part_obj, live: true, pending: None, gc_delay_ns: w.gc_delay_ns };
    let extra = |_| drop_parts(upload, &parts, &used, due);
    match index::complete_at(client, &how, key, tag, Some(GcRecord::Manifest { tag }), None, &extra).await? {
        // A completion into the null version reports no version id (as a PUT's).
        Completed::Head(_) | Completed::PendingGone => Ok(Written { meta, version_id: None }),
        Completed::Dead => Err(GatewayError::NoSuchBucket(bucket.name.clone())),
    }
}

/// The checksum of the object `manifest` makes of upload `rec`, from its parts' checksums,
/// checked against those the completion lists and the one it claims (`BadDigest`).
fn object_checksums(
    rec: &UploadRecord,
    manifest: &Manifest,
    requested: &[RequestedPart],
    claimed: &Checksums,
) -> Result<Checksums, GatewayError> {
    let Some(algorithm) = rec.checksum_algorithm.as_deref() else { return Ok(Checksums::default()) };
    let kind = if rec.full_object_checksum { SumKind::FullObject } else { SumKind::Composite };
    let mut listed = Vec::with_capacity(manifest.parts.len());
    for (part, asked) in manifest.parts.iter().zip(requested) {
        debug_assert_eq!(part.number, asked.number, "the manifest follows the request");
        let stored = part.checksums.get(algorithm).ok_or_else(|| {
            GatewayError::Corrupt(format!("part {} of a {algorithm} upload has no {algorithm} checksum", part.number))
        })?;
        match asked.checksums.get(algorithm) {
            Some(sent) if sent != stored => {
                return Err(GatewayError::InvalidPart(format!(
                    "part {}'s {algorithm} checksum is {stored}, not {sent}",
                    part.number
                )));
            }
            // A part listed without its checksum is taken as uploaded (its checksum was
            // verified then).
            _ => {}
        }
        listed.push((stored, part.size_bytes));
    }
    let sum = partsums::combine(algorithm, kind, &listed)
        .ok_or_else(|| GatewayError::Corrupt(format!("the parts' {algorithm} checksums do not combine")))?;
    if let Some(c) = claimed.get(algorithm)
        && c != sum
    {
        return Err(GatewayError::BadDigest(format!("the object's {algorithm} checksum is {sum}, not {c}")));
    }
    let mut out = Checksums { composite: kind == SumKind::Composite, ..Checksums::default() };
    out.set(algorithm, sum);
    Ok(out)
}

/// The manifest of the parts `requested` names, checked against what was uploaded.
fn choose_parts(parts: &[(u32, PartRecord)], requested: &[RequestedPart]) -> Result<Manifest, GatewayError> {
    // The order first, then each part's identity, then sizes: the first error a client can fix
    // without re-uploading is named first.
    for pair in requested.windows(2) {
        if pair[1].number <= pair[0].number {
            return Err(GatewayError::InvalidPartOrder(format!(
                "part {} follows part {}",
                pair[1].number, pair[0].number
            )));
        }
    }
    let mut out = Vec::with_capacity(requested.len());
    for RequestedPart { number, etag, .. } in requested {
        let Some((_, p)) = parts.iter().find(|(n, _)| n == number) else {
            return Err(GatewayError::InvalidPart(format!("part {number} was not uploaded")));
        };
        if p.etag != etag.trim_matches('"') {
            return Err(GatewayError::InvalidPart(format!("part {number}'s ETag is {:?}, not {etag:?}", p.etag)));
        }
        out.push(ManifestPart {
            number: *number,
            tag: p.tag,
            size_bytes: p.size_bytes,
            chunks: p.chunks,
            etag: p.etag.clone(),
            checksums: p.checksums.clone(),
        });
    }
    if let Some(small) = out.iter().rev().skip(1).find(|p| p.size_bytes < MIN_PART_BYTES) {
        return Err(GatewayError::EntityTooSmall(format!(
            "part {} has {} bytes; every part but the last needs at least {MIN_PART_BYTES}",
            small.number, small.size_bytes
        )));
    }
    Ok(Manifest { parts: out, upload: 0 })
}

/// What finishing a dead completion does to the upload's records: when it committed, the part
/// records go (parts its manifest does not use, to GC); when it did not, the upload is given
/// back, or in a deleted bucket (no upload comes back) every part goes.
async fn dead_completion_ops(
    client: &Client,
    how: &Completion<'_>,
    rec: &UploadRecord,
    tag: u128,
) -> Result<(Vec<ObjOp>, Vec<ObjOp>), GatewayError> {
    let parts = parts_of(client, how.part, rec.upload).await?;
    let manifest: Option<Manifest> =
        match rados::read_all(client, DATA_POOL, &layout::manifest_object(how.bucket_id, tag)).await? {
            Some(bytes) => Some(layout::decode(&bytes, "manifest")?),
            None => None,
        };
    let used: Vec<u128> = manifest.iter().flat_map(|m| m.parts.iter().map(|p| p.tag)).collect();
    let due = layout::now_ns() + how.gc_delay_ns;
    let committed = drop_parts(rec.upload, &parts, &used, due);
    let abandoned = if how.live {
        vec![ObjOp::OmapSet { entries: vec![(layout::upload_key(&rec.key, rec.upload), layout::encode(rec))] }]
    } else {
        drop_parts(rec.upload, &parts, &[], due)
    };
    Ok((committed, abandoned))
}

/// The rest of a completion whose gateway died (the collector, after the lease): the head
/// decides. If it carries the completion's tag, the object is complete: the part records go,
/// unused parts to GC. If not, the completion never committed (or was at once replaced, which
/// cannot be told apart): the upload is given back and only the manifest object is collected.
pub(crate) async fn finish_complete(
    client: &Client,
    how: &Completion<'_>,
    rec: &UploadRecord,
    tag: u128,
) -> Result<Completed, GatewayError> {
    let (committed, abandoned) = dead_completion_ops(client, how, rec, tag).await?;
    let extra = |done: bool| if done { committed.clone() } else { abandoned.clone() };
    index::complete_at(client, how, &rec.key, tag, Some(GcRecord::ManifestOnly { tag }), None, &extra).await
}

/// [`finish_complete`] for a completion into a new version: its version object decides.
pub(crate) async fn finish_complete_version(
    client: &Client,
    how: &Completion<'_>,
    rec: &UploadRecord,
    tag: u128,
) -> Result<Completed, GatewayError> {
    let (committed, abandoned) = dead_completion_ops(client, how, rec, tag).await?;
    let garbage = GcRecord::Version { tag, then: Some(Box::new(GcRecord::ManifestOnly { tag })) };
    versions::finish(client, how, &rec.key, tag, committed, abandoned, garbage).await
}

/// One page of an upload's parts, after part `marker`, up to `max`; and whether more follow.
pub async fn list_parts(
    client: &Client,
    bucket: &BucketRecord,
    key: &str,
    upload: u128,
    marker: u32,
    max: usize,
) -> Result<(UploadRecord, Vec<(u32, PartRecord)>, bool), GatewayError> {
    let (_, rec) = read_upload(client, bucket, key, upload).await?;
    let all = parts_of(client, &index::partition(bucket, key), upload).await?;
    let mut after: Vec<(u32, PartRecord)> = all.into_iter().filter(|(n, _)| *n > marker).collect();
    let truncated = after.len() > max;
    after.truncate(max);
    Ok((rec, after, truncated))
}

/// One page of the uploads in progress.
#[derive(Debug, Default)]
pub struct UploadPage {
    pub uploads: Vec<UploadRecord>,
    pub common_prefixes: Vec<String>,
    pub truncated: bool,
}

/// Uploads of keys starting with `prefix`, in key then initiation order (by id within a key),
/// after (`key_marker`, `upload_marker`), rolled up to `delimiter`, up to `max`.
pub async fn list_uploads(
    client: &Client,
    bucket: &BucketRecord,
    prefix: &str,
    delimiter: Option<&str>,
    key_marker: Option<&str>,
    upload_marker: Option<u128>,
    max: usize,
) -> Result<UploadPage, GatewayError> {
    const BATCH: u32 = 1000;
    let delimiter = delimiter.filter(|d| !d.is_empty());
    let mut page = UploadPage::default();
    let mut cursor = match key_marker {
        // After every upload of the marker key, or after the given one.
        Some(k) => match upload_marker {
            Some(u) => layout::upload_key(k, u),
            None => layout::upload_key(k, u128::MAX),
        },
        None => vec![layout::UPLOAD_PREFIX],
    };
    if cursor.as_slice() < [layout::UPLOAD_PREFIX].as_slice() {
        cursor = vec![layout::UPLOAD_PREFIX];
    }
    let mut reader = RangeReader::new(bucket, layout::UPLOAD_PREFIX, cursor);
    while let Some(batch) = reader.next_batch(client, BATCH).await? {
        for (_, v) in batch {
            let rec: UploadRecord = layout::decode(&v, "upload record")?;
            if !rec.key.starts_with(prefix) {
                if rec.key.as_str() > prefix {
                    return Ok(page);
                }
                continue;
            }
            if page.uploads.len() + page.common_prefixes.len() >= max {
                page.truncated = true;
                return Ok(page);
            }
            if let Some(d) = delimiter
                && let Some(pos) = rec.key[prefix.len()..].find(d)
            {
                let cp = rec.key[..prefix.len() + pos + d.len()].to_string();
                if !page.common_prefixes.contains(&cp) {
                    page.common_prefixes.push(cp);
                }
                continue;
            }
            page.uploads.push(rec);
        }
    }
    Ok(page)
}
