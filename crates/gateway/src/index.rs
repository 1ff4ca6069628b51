//! The bucket index (decision 0014): entries, pending records and GC records in partitions
//! keyed by range, and the completion step that brings an entry to its head's state.

use shoal_client::Client;
use shoal_proto::osd::{ObjOp, OpOutput};

use crate::error::GatewayError;
use crate::layout::{
    self, BOUNDS_XATTR, BucketRecord, DEAD_XATTR, ENTRY_PREFIX, GcRecord, INDEX_POOL, IndexEntry, LABEL_XATTR,
    LIVE_VALUE, LIVE_XATTR, ObjectMeta, PartitionLabel, PendingKind, PendingRecord, entry_key, partition_object,
};
use crate::objects::{self, WriteCondition};
use crate::partition::{Part, RangeReader};
use crate::rados;
use crate::versions;

/// Most completion attempts before giving up (each lost one means another completion changed
/// the entry in between, which only a storm of writes to one key can make repeat).
const COMPLETE_ATTEMPTS: usize = 64;

/// `key`'s partition in `bucket`, followed across splits.
pub(crate) fn partition<'a>(bucket: &'a BucketRecord, key: &str) -> Part<'a> {
    Part::routed(bucket, key)
}

/// The guard every write to a live bucket's index carries: the partition is live.
fn live_guard() -> ObjOp {
    ObjOp::AssertXattr { name: LIVE_XATTR.into(), value: Some(LIVE_VALUE.to_vec()) }
}

/// Creates `bucket`'s partition objects, live and labelled. Runs before the bucket record is
/// written, so a record never names a partition that is not there.
pub async fn create_partitions(client: &Client, bucket: &BucketRecord) -> Result<(), GatewayError> {
    let label = PartitionLabel { bucket: bucket.name.clone(), created_ns: bucket.created_ns, split_from: None };
    let label = layout::encode(&label);
    for (at, p) in bucket.partitions.iter().enumerate() {
        let ops = vec![
            ObjOp::Create { exclusive: true },
            ObjOp::SetXattr { name: LABEL_XATTR.into(), value: label.clone() },
            ObjOp::SetXattr { name: LIVE_XATTR.into(), value: LIVE_VALUE.to_vec() },
            ObjOp::SetXattr { name: BOUNDS_XATTR.into(), value: layout::encode(&bucket.bounds_at(at)) },
            ObjOp::SetXattr { name: layout::TOMBS_XATTR.into(), value: layout::fresh_tombs_generation()? },
        ];
        rados::write_ops(client, INDEX_POOL, &partition_object(bucket.id, p.id), ops).await?;
    }
    Ok(())
}

/// Makes `bucket`'s partitions refuse every index write from now on (the first step of
/// deleting it), or (`live`) take them again.
pub async fn set_live(client: &Client, bucket: &BucketRecord, live: bool) -> Result<(), GatewayError> {
    for p in &bucket.partitions {
        // A partition merged away since the table was read is not made again by the write
        // below (writes create objects): it is gone, and the table that named it is too.
        let object = partition_object(bucket.id, p.id);
        if rados::get_xattr(client, INDEX_POOL, &object, LABEL_XATTR).await?.is_none() {
            continue;
        }
        let ops = if live {
            vec![
                ObjOp::SetXattr { name: LIVE_XATTR.into(), value: LIVE_VALUE.to_vec() },
                ObjOp::RemoveXattr { name: DEAD_XATTR.into() },
            ]
        } else {
            vec![
                ObjOp::RemoveXattr { name: LIVE_XATTR.into() },
                ObjOp::SetXattr { name: DEAD_XATTR.into(), value: layout::now_ns().to_le_bytes().to_vec() },
            ]
        };
        rados::write_ops(client, INDEX_POOL, &object, ops).await?;
        if !live {
            crate::crashpoint::reached(crate::crashpoint::DELETE_PARTLY, &bucket.name);
        }
    }
    Ok(())
}

/// Whether `part` is live, and the value of pending record `tag` in it.
async fn partition_state(client: &Client, part: &Part<'_>, tag: u128) -> Result<(bool, Option<Vec<u8>>), GatewayError> {
    let ops =
        vec![ObjOp::GetXattr { name: LIVE_XATTR.into() }, ObjOp::OmapGet { keys: vec![layout::pending_key(tag)] }];
    match part.read(client, ops).await? {
        Some(outputs) => {
            let mut out = outputs.into_iter();
            let live = matches!(out.next(), Some(OpOutput::Xattr(Some(v))) if v == LIVE_VALUE);
            let pending = match out.next() {
                Some(OpOutput::Omap(mut found)) => found.pop().and_then(|(_, v)| v),
                other => return Err(GatewayError::Internal(format!("omap get answered {other:?}"))),
            };
            Ok((live, pending))
        }
        None => Ok((false, None)),
    }
}

/// Step 1 of a write or delete of `key`: records it as pending under `tag`. Also refreshes the
/// record of a long write (same tag, a later start time).
pub async fn prepare(
    client: &Client,
    bucket: &BucketRecord,
    key: &str,
    tag: u128,
    kind: PendingKind,
) -> Result<(), GatewayError> {
    match prepare_with(client, bucket, key, tag, kind, Vec::new()).await {
        Err(e) if e.is_conflict() => Err(GatewayError::NoSuchBucket(bucket.name.clone())),
        other => other,
    }
}

/// [`prepare`] with more operations (guards among them) in the same request; a guard that fails
/// (the partition's liveness among them) answers `is_conflict`.
pub async fn prepare_with(
    client: &Client,
    bucket: &BucketRecord,
    key: &str,
    tag: u128,
    kind: PendingKind,
    more: Vec<ObjOp>,
) -> Result<(), GatewayError> {
    partition(bucket, key).write(client, prepare_ops(key, tag, kind, more)).await
}

/// The operations of a prepare: the partition is live, `more`, and the pending record set.
fn prepare_ops(key: &str, tag: u128, kind: PendingKind, more: Vec<ObjOp>) -> Vec<ObjOp> {
    let record = PendingRecord { key: key.to_string(), started_ns: layout::now_ns(), kind };
    let mut ops = vec![live_guard()];
    ops.extend(more);
    ops.push(ObjOp::OmapSet { entries: vec![(layout::pending_key(tag), layout::encode(&record))] });
    ops
}

/// [`prepare`], and `key`'s index view read in the same request, just before the pending record
/// is set: a writer that writes its head after this returns knows the view *before* its head,
/// which lets its completion skip reading both again (see [`Known`]). One request instead of two
/// (decision 0014). A resend answered from the PG log carries no reads; the view is then read in
/// a request of its own, still before the head.
pub(crate) async fn prepare_reading(
    client: &Client,
    bucket: &BucketRecord,
    key: &str,
    tag: u128,
    kind: PendingKind,
) -> Result<versions::KeyView, GatewayError> {
    let part = partition(bucket, key);
    let reads = versions::view_ops(key);
    let count = reads.len();
    let mut ops = prepare_ops(key, tag, kind, Vec::new());
    ops.extend(reads);
    let mut outputs = match part.write_answered(client, ops).await {
        Err(e) if e.is_conflict() => return Err(GatewayError::NoSuchBucket(bucket.name.clone())),
        other => other?,
    };
    let view_outputs = outputs.split_off(outputs.len() - count);
    if view_outputs.iter().any(|o| matches!(o, OpOutput::Done)) {
        return versions::read_view(client, &part, key).await;
    }
    versions::view_from_outputs(key, view_outputs)
}

/// Drops the pending record of a write that never wrote its head (refused before it: a failed
/// condition, a bad digest), with a GC record for what it wrote, and `more` operations.
pub async fn abandon(
    client: &Client,
    bucket: &BucketRecord,
    key: &str,
    tag: u128,
    garbage: Option<GcRecord>,
    gc_delay_ns: u64,
    more: Vec<ObjOp>,
) -> Result<(), GatewayError> {
    let mut ops = vec![live_guard(), ObjOp::OmapRemove { keys: vec![layout::pending_key(tag)] }];
    ops.extend(more);
    if let Some(gc) = garbage {
        ops.push(gc_set(layout::now_ns() + gc_delay_ns, vec![gc]));
    }
    match partition(bucket, key).write(client, ops).await {
        // The bucket is being deleted: its collector completes the pending record instead.
        Err(e) if e.is_conflict() => Err(GatewayError::NoSuchBucket(bucket.name.clone())),
        other => other,
    }
}

/// Step 3 of a write or delete of `key` tagged `tag` (which wrote `own_tails` tails, `None`:
/// unknown): makes `key`'s entry what its head is now, removes the pending record, and records
/// for GC the tails no head can reference any more (those of the entry replaced, and this
/// write's own when its head was replaced or removed since). Returns the head's state.
///
/// Correct under any interleaving of completions, from any gateways, because each one reads the
/// entry, then the head, then swaps the entry only if it is still what it read (decision 0014).
///
/// `known`, when given, is what the writer observed itself, used by the first attempt instead of
/// reading: see [`Known`] for the order it must have been observed in.
pub(crate) async fn complete(
    client: &Client,
    bucket: &BucketRecord,
    key: &str,
    tag: u128,
    own_tails: Option<u32>,
    gc_delay_ns: u64,
    known: Option<Known>,
) -> Result<Option<ObjectMeta>, GatewayError> {
    let part = partition(bucket, key);
    let how = Completion { bucket_id: bucket.id, part: &part, live: true, pending: None, gc_delay_ns };
    let own = match own_tails {
        Some(0) => None,
        count => Some(GcRecord::Chunks { tag, first: 1, count }),
    };
    match complete_at(client, &how, key, tag, own, known, &|_| Vec::new()).await? {
        Completed::Head(head) => {
            // Counted against the partition the completion reached, which a table cached from
            // before a split or merge would not give.
            if let Some(id) = part.partition_id() {
                crate::reshard::note_write(client, bucket, id);
            }
            Ok(head.map(|h| *h))
        }
        Completed::PendingGone => Err(GatewayError::Internal("a completion without a pending record".into())),
        Completed::Dead => Err(GatewayError::NoSuchBucket(bucket.name.clone())),
    }
}

/// What a writer observed that a completion would otherwise read: `key`'s index view, read
/// **before** the writer's head write (or removal) was sent — in its prepare's request, say
/// — and the state that head operation left (`None`: no head). A completion may swap the entry on
/// these as if it had read them itself, because the order the proof needs holds: the view was
/// read before the head was observed (the head operation is itself that observation), and the
/// swap is guarded on the view being unchanged. A view read *after* the head operation must never
/// be passed: it could be newer than the head state and let the swap regress the entry.
pub(crate) struct Known {
    pub view: versions::KeyView,
    pub head: Option<ObjectMeta>,
}

/// Where and how a completion runs.
pub(crate) struct Completion<'a> {
    pub bucket_id: u64,
    pub part: &'a Part<'a>,
    /// The partition is live (a writer, or the collector in a live bucket) or not (the collector
    /// in a deleted bucket, where no entry may be made).
    pub live: bool,
    /// The collector's completion asserts that the pending record is still the one it read, so
    /// that several collectors do not each add a GC record for it.
    pub pending: Option<Vec<u8>>,
    pub gc_delay_ns: u64,
}

pub(crate) enum Completed {
    /// The entry now matches this head state.
    Head(Option<Box<ObjectMeta>>),
    /// Another completion removed the pending record first (collector completions only).
    PendingGone,
    /// The partition's liveness is not what the completion expected.
    Dead,
}

/// The completion step (see [`complete`]) wherever it runs. `own` is what GC deletes when the
/// head does not carry `tag`; `extra(head carries tag)` adds operations to the same request.
pub(crate) async fn complete_at(
    client: &Client,
    how: &Completion<'_>,
    key: &str,
    tag: u128,
    own: Option<GcRecord>,
    mut known: Option<Known>,
    extra: &(dyn Fn(bool) -> Vec<ObjOp> + Sync),
) -> Result<Completed, GatewayError> {
    let ekey = entry_key(key);
    // A key with version records completes through a plan that reads those records, which must
    // not be read after the head operation: such completions read everything again.
    known = known.filter(|k| k.view.state_raw.is_none());
    for attempt in 0..COMPLETE_ATTEMPTS {
        let (view, head) = match known.take() {
            Some(k) => (k.view, k.head),
            None => {
                // The entry is read before the head, never concurrently: a head read that
                // overtook the entry read could return a head older than a completion that
                // swapped the entry in between, and the guarded write (which only checks the
                // entry) would then regress the entry to that older head.
                let view = versions::read_view(client, how.part, key).await?;
                crate::crashpoint::jitter().await;
                let head = objects::head_meta(client, how.bucket_id, key).await?;
                crate::crashpoint::jitter().await;
                (view, head)
            }
        };
        if attempt == 0 {
            crate::crashpoint::pause(crate::crashpoint::COMPLETE_SWAP, key).await;
        }
        let head_tag = head.as_ref().map(|m| m.tag);
        let live_value = how.live.then(|| LIVE_VALUE.to_vec());
        let mut ops = vec![ObjOp::AssertXattr { name: LIVE_XATTR.into(), value: live_value }];
        if let Some(p) = &how.pending {
            ops.push(ObjOp::AssertOmap { key: layout::pending_key(tag), value: Some(p.clone()) });
        }
        let mut gc = Vec::new();
        if view.state.is_some() {
            // The key has version records: its head is the null version among them.
            let change = versions::Change::NullHead(head.as_ref().map(IndexEntry::of));
            match versions::plan(client, how.part, key, &view, change, &WriteCondition::None).await? {
                Ok(plan) => {
                    ops.extend(plan.ops);
                    gc.extend(plan.gc);
                }
                Err(other) => {
                    return Err(GatewayError::Internal(format!("a head's completion was refused: {other:?}")));
                }
            }
        } else {
            ops.extend(view.guards(key));
            match head.as_ref().map(IndexEntry::of) {
                Some(e) => ops.push(ObjOp::OmapSet { entries: vec![(ekey.clone(), layout::encode(&e))] }),
                None if view.entry_raw.is_some() => ops.push(ObjOp::OmapRemove { keys: vec![ekey.clone()] }),
                None => {}
            }
            ops.extend(view.tomb_ops(key, head.is_some())?);
            if let Some(o) = &view.entry
                && Some(o.tag) != head_tag
                && o.tag != tag
                && let Some(g) = o.garbage()
            {
                gc.push(g);
            }
        }
        ops.push(ObjOp::OmapRemove { keys: vec![layout::pending_key(tag)] });
        if Some(tag) != head_tag
            && let Some(g) = &own
        {
            gc.push(g.clone());
        }
        if !gc.is_empty() {
            ops.push(gc_set(layout::now_ns() + how.gc_delay_ns, gc));
        }
        ops.extend(extra(Some(tag) == head_tag));
        match how.part.write(client, ops).await {
            Ok(()) => return Ok(Completed::Head(head.map(Box::new))),
            Err(e) if e.is_conflict() => {
                if let Some(reason) = conflict_reason(client, how, Some(tag)).await? {
                    return Ok(reason);
                }
            }
            Err(e) => return Err(e),
        }
    }
    Err(GatewayError::Internal(format!("the index entry of {key:?} kept changing over {COMPLETE_ATTEMPTS} attempts")))
}

/// Why a guarded index change of `how` failed, when it was not another change to the same key
/// (which the caller retries): the partition's liveness changed, or (with `pending` set) another
/// completion removed the pending record `tag`.
pub(crate) async fn conflict_reason(
    client: &Client,
    how: &Completion<'_>,
    tag: Option<u128>,
) -> Result<Option<Completed>, GatewayError> {
    let (live, pending) = partition_state(client, how.part, tag.unwrap_or(0)).await?;
    if live != how.live {
        return Ok(Some(Completed::Dead));
    }
    if how.pending.is_some() && tag.is_some() && pending != how.pending {
        return Ok(Some(Completed::PendingGone));
    }
    Ok(None)
}

/// The tag a GC record is about (part of its omap key).
fn gc_tag(g: &GcRecord) -> u128 {
    match g {
        GcRecord::Chunks { tag, .. }
        | GcRecord::Manifest { tag }
        | GcRecord::ManifestOnly { tag }
        | GcRecord::Version { tag, .. } => *tag,
    }
}

/// An operation recording `records` for GC at `due_ns`.
pub(crate) fn gc_set(due_ns: u64, records: Vec<GcRecord>) -> ObjOp {
    ObjOp::OmapSet { entries: records.iter().map(|g| (layout::gc_key(due_ns, gc_tag(g)), layout::encode(g))).collect() }
}

/// One page of a listing.
#[derive(Debug, Default)]
pub struct ListPage {
    pub entries: Vec<(String, IndexEntry)>,
    pub common_prefixes: Vec<String>,
    /// More keys follow; the next page starts after `last_key`.
    pub truncated: bool,
    /// The last key or common prefix of this page (the next page's marker).
    pub last_key: Option<String>,
}

/// Lists up to `max` keys and common prefixes of `bucket` in key order, starting after
/// `after` (exclusive), of keys starting with `prefix`, rolling keys up to `delimiter`. Reads
/// only the partitions the page covers, in pages of omap entries.
pub async fn list(
    client: &Client,
    bucket: &BucketRecord,
    prefix: &str,
    delimiter: Option<&str>,
    after: Option<&str>,
    max: usize,
) -> Result<ListPage, GatewayError> {
    const BATCH: u32 = 1000;
    let mut page = ListPage::default();
    if max == 0 {
        // S3 answers max-keys=0 with an empty page that is not truncated.
        return Ok(page);
    }
    let delimiter = delimiter.filter(|d| !d.is_empty());
    // The exclusive omap cursor: keys above it are listed.
    let cursor = match after {
        Some(a) if a >= prefix => {
            let mut cursor = entry_key(a);
            // A marker inside a common prefix (a page ended on it) resumes after every key the
            // prefix rolled up, not inside it.
            if let Some(d) = delimiter
                && let Some(rest) = a.strip_prefix(prefix)
                && let Some(pos) = rest.find(d)
            {
                cursor = entry_key(&a[..prefix.len() + pos + d.len()]);
                cursor.push(0xFF);
            }
            cursor
        }
        _ => just_below(&entry_key(prefix)),
    };
    let mut reader = RangeReader::new(bucket, ENTRY_PREFIX, cursor);
    'batch: while let Some(batch) = reader.next_batch(client, BATCH).await? {
        for (k, v) in batch {
            let key = std::str::from_utf8(&k[1..])
                .map_err(|_| GatewayError::Corrupt(format!("index key of {} bytes is not UTF-8", k.len() - 1)))?;
            if !key.starts_with(prefix) {
                return Ok(page);
            }
            if page.entries.len() + page.common_prefixes.len() >= max {
                page.truncated = true;
                return Ok(page);
            }
            if let Some(d) = delimiter
                && let Some(pos) = key[prefix.len()..].find(d)
            {
                let cp = key[..prefix.len() + pos + d.len()].to_string();
                // Skip every key under the common prefix (0xFF never occurs in UTF-8) and
                // read on from there.
                let mut past = entry_key(&cp);
                past.push(0xFF);
                reader.set_cursor(past);
                page.last_key = Some(cp.clone());
                page.common_prefixes.push(cp);
                continue 'batch;
            }
            let entry: IndexEntry = layout::decode(&v, "index entry")?;
            page.last_key = Some(key.to_string());
            page.entries.push((key.to_string(), entry));
        }
    }
    Ok(page)
}

/// An exclusive omap cursor that lists `key` first: no UTF-8 key sorts strictly between them
/// (the last byte decremented, then 0xFF, which UTF-8 never contains).
pub(crate) fn just_below(key: &[u8]) -> Vec<u8> {
    let mut k = key.to_vec();
    match k.pop() {
        Some(0) | None => k,
        Some(last) => {
            k.push(last - 1);
            k.push(0xFF);
            k
        }
    }
}

/// Whether the bucket holds no entry and no version (a delete marker is one).
pub async fn is_empty(client: &Client, bucket: &BucketRecord) -> Result<bool, GatewayError> {
    if !list(client, bucket, "", None, None, 1).await?.entries.is_empty() {
        return Ok(false);
    }
    let mut versions = RangeReader::new(bucket, layout::VERSION_PREFIX, vec![layout::VERSION_PREFIX]);
    Ok(versions.next_batch(client, 1).await?.is_none())
}
