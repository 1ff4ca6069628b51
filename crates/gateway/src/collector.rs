//! The background reconciler and garbage collector every gateway runs (decision 0014): it walks
//! the index partitions, completes writes whose gateway died (pending records older than the
//! lease), deletes the tails of GC records that are due, and finishes bucket deletions and
//! creations that a crash interrupted. Any number of gateways may run it at once: every step is
//! guarded or idempotent.

use std::time::Duration;

use futures::StreamExt;
use shoal_client::Client;
use shoal_proto::osd::{ObjOp, OpOutput};

use crate::error::GatewayError;
use crate::index::{self, Completed, Completion};
use crate::layout::{
    self, BucketRecord, DATA_POOL, DEAD_XATTR, ENTRY_PREFIX, GC_PREFIX, GcRecord, INDEX_POOL, KEY_STATE_PREFIX,
    LABEL_XATTR, LIVE_VALUE, LIVE_XATTR, META_POOL, PART_PREFIX, PENDING_PREFIX, PartitionLabel, PendingKind,
    PendingRecord, TOMB_PREFIX, TOMBS_XATTR, Tombstone, UPLOAD_PREFIX, VERSION_PREFIX,
};
use crate::objects::TAILS_IN_FLIGHT;
use crate::partition::{self, Part, PartitionState};
use crate::{merge, multipart, rados, reshard, versions};

/// Partition objects listed per request.
const PARTITIONS_PER_PAGE: u32 = 256;
/// Records (pending and GC) handled per partition per pass; the rest wait for the next pass.
const RECORDS_PER_PASS: u32 = 256;
/// Tombstones read per partition per pass (those old enough are removed in one request).
const TOMBS_PER_PASS: u32 = 256;
/// Tail removals in flight at once, per GC record.
const REMOVALS_IN_FLIGHT: usize = 8;

/// How the collector runs.
#[derive(Debug, Clone)]
pub struct CollectorSettings {
    /// A pending record older than this belongs to a dead writer (writers refresh theirs every
    /// quarter lease and never commit past half of one).
    pub lease: Duration,
    /// How long replaced tails stay readable before they are deleted.
    pub gc_delay: Duration,
    /// Time between passes.
    pub period: Duration,
}

impl CollectorSettings {
    /// Passes often enough that nothing waits much longer than its lease or delay.
    pub fn new(lease: Duration, gc_delay: Duration) -> CollectorSettings {
        let period = (lease.min(gc_delay) / 4).clamp(Duration::from_millis(250), Duration::from_secs(60));
        CollectorSettings { lease, gc_delay, period }
    }
}

/// What one pass did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct PassStats {
    pub partitions: u64,
    /// Pending records of dead writers completed.
    pub completed: u64,
    /// GC records whose tails were deleted.
    pub collected: u64,
    pub tails_removed: u64,
    /// Tombstones removed (each request that removes some also renews the partition's
    /// tombstone generation), and generations given to partitions made without one.
    pub tombstones_removed: u64,
    pub generations_set: u64,
    /// Orphan heads removed from deleted buckets.
    pub heads_removed: u64,
    /// Bucket deletions finished, and partitions retired (a crashed create) or removed.
    pub buckets_finished: u64,
    pub partitions_retired: u64,
    pub partitions_removed: u64,
    /// Index partition splits finished or given up for a splitter that died.
    pub splits_tended: u64,
    /// Index partition merges finished or given up for a merger that died.
    pub merges_tended: u64,
    pub partitions_revived: u64,
    /// Uploads left in deleted buckets, aborted.
    pub uploads_aborted: u64,
    pub errors: u64,
}

/// Runs passes forever, one every `settings.period`.
pub async fn run(client: Client, settings: CollectorSettings) {
    loop {
        tokio::time::sleep(settings.period).await;
        // Collecting frees space, so a full cluster takes its requests (decision 0045).
        match shoal_client::freeing_space(pass(&client, &settings)).await {
            Ok(s) if s != PassStats { partitions: s.partitions, ..PassStats::default() } => {
                tracing::info!(?s, "collector pass");
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "collector pass failed"),
        }
    }
}

/// One pass over every index partition.
pub async fn pass(client: &Client, settings: &CollectorSettings) -> Result<PassStats, GatewayError> {
    let mut stats = PassStats::default();
    let mut cursor = None;
    loop {
        let (names, next) = client.list(INDEX_POOL, cursor, PARTITIONS_PER_PAGE).await?;
        for name in names {
            let Some((bucket_id, _)) = layout::parse_partition_object(&name) else { continue };
            stats.partitions += 1;
            if let Err(e) = partition(client, settings, bucket_id, &name, &mut stats).await {
                stats.errors += 1;
                tracing::warn!(partition = %name, error = %e, "collector: partition skipped this pass");
            }
        }
        match next {
            Some(c) => cursor = Some(c),
            None => return Ok(stats),
        }
    }
}

/// What a partition holds, read in one request.
struct PartitionView {
    /// Its range and any split of it in progress.
    state: PartitionState,
    live: bool,
    label: Option<PartitionLabel>,
    /// When it died (its [`DEAD_XATTR`]), if it is dead and says.
    dead_ns: Option<u64>,
    /// Entries or version records: what a bucket deletion must not leave in a dead partition.
    has_entries: bool,
    records: Vec<(Vec<u8>, Vec<u8>)>,
    /// The first tombstones, and the partition's tombstone generation.
    tombs: Vec<(Vec<u8>, Vec<u8>)>,
    tombs_generation: Option<Vec<u8>>,
}

async fn view(client: &Client, part: &str) -> Result<Option<PartitionView>, GatewayError> {
    let mut ops = partition::state_ops();
    ops.extend([
        ObjOp::GetXattr { name: LIVE_XATTR.into() },
        ObjOp::GetXattr { name: LABEL_XATTR.into() },
        ObjOp::GetXattr { name: DEAD_XATTR.into() },
        ObjOp::OmapList { after: None, max: 1 },
        ObjOp::OmapList { after: Some(layout::records_cursor()), max: RECORDS_PER_PASS },
        ObjOp::OmapList { after: Some(layout::versions_cursor()), max: 1 },
        ObjOp::OmapList { after: Some(layout::tombs_cursor()), max: TOMBS_PER_PASS },
        ObjOp::GetXattr { name: TOMBS_XATTR.into() },
    ]);
    let r = match client.op(INDEX_POOL, part, ops, Vec::new()).await {
        Ok(r) => r,
        Err(e) if e.is_not_found() => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let mut out = r.outputs.into_iter();
    let state = PartitionState::from_outputs(&mut out)?;
    let live = matches!(out.next(), Some(OpOutput::Xattr(Some(v))) if v == LIVE_VALUE);
    let label = match out.next() {
        Some(OpOutput::Xattr(Some(v))) => Some(layout::decode(&v, "partition label")?),
        _ => None,
    };
    let dead_ns = match out.next() {
        Some(OpOutput::Xattr(Some(v))) => Some(u64::from_le_bytes(
            v.as_slice()
                .try_into()
                .map_err(|_| GatewayError::Corrupt(format!("{part}: a dead time of {} bytes", v.len())))?,
        )),
        _ => None,
    };
    let has_entries = matches!(out.next(), Some(OpOutput::OmapList(first)) if first.first().is_some_and(|(k, _)| k.first() == Some(&ENTRY_PREFIX)));
    let records = match out.next() {
        Some(OpOutput::OmapList(records)) => records,
        other => return Err(GatewayError::Internal(format!("omap list answered {other:?}"))),
    };
    // Version records (delete markers among them) keep a bucket as entries do.
    let has_versions = matches!(out.next(), Some(OpOutput::OmapList(first)) if first.first().is_some_and(|(k, _)| k.first() == Some(&layout::VERSION_PREFIX)));
    let has_entries = has_entries || has_versions;
    let mut tombs = match out.next() {
        Some(OpOutput::OmapList(tombs)) => tombs,
        other => return Err(GatewayError::Internal(format!("omap list answered {other:?}"))),
    };
    tombs.retain(|(k, _)| k.first() == Some(&TOMB_PREFIX));
    let tombs_generation = match out.next() {
        Some(OpOutput::Xattr(v)) => v,
        other => return Err(GatewayError::Internal(format!("xattr get answered {other:?}"))),
    };
    Ok(Some(PartitionView { state, live, label, dead_ns, has_entries, records, tombs, tombs_generation }))
}

/// The bucket record the label names, if it is still this partition's bucket.
async fn labelled_bucket(
    client: &Client,
    label: &PartitionLabel,
    bucket_id: u64,
) -> Result<Option<BucketRecord>, GatewayError> {
    match rados::read_all(client, META_POOL, &layout::bucket_object(&label.bucket)).await? {
        Some(bytes) => {
            let b: BucketRecord = layout::decode(&bytes, "bucket record")?;
            Ok((b.id == bucket_id).then_some(b))
        }
        None => Ok(None),
    }
}

fn tag_at(key: &[u8], at: usize) -> Option<u128> {
    Some(u128::from_be_bytes(key.get(at..at + 16)?.try_into().ok()?))
}

async fn partition(
    client: &Client,
    settings: &CollectorSettings,
    bucket_id: u64,
    part: &str,
    stats: &mut PassStats,
) -> Result<(), GatewayError> {
    let Some(v) = view(client, part).await? else { return Ok(()) };
    let now = layout::now_ns();
    let lease_ns = settings.lease.as_nanos() as u64;
    // Merge work found here is finished or given up, in dead partitions too (a deletion's
    // emptiness check waits for a fenced merge); the pass goes on with the new state next time.
    if let Some(m) = &v.state.merge
        && let Some(label) = &v.label
        && let Some((_, part_id)) = layout::parse_partition_object(part)
        && merge::tend(client, &label.bucket, bucket_id, part_id, m).await?
    {
        stats.merges_tended += 1;
        return Ok(());
    }
    if !v.live {
        // A partition that its bucket's record still names is dead because a deletion is under
        // way, or died midway. A lease after it died (no deleter takes that long), the deletion
        // is finished or undone for the whole table at once; until then it is left alone, and
        // so are its records: the bucket may yet live again.
        if let Some(label) = &v.label
            && let Some((_, part_id)) = layout::parse_partition_object(part)
            && let Some(bucket) = labelled_bucket(client, label, bucket_id).await?
            && bucket.partitions.iter().any(|p| p.id == part_id)
        {
            if now.saturating_sub(v.dead_ns.unwrap_or(0)) >= lease_ns {
                if crate::meta::finish_deletion(client, &bucket).await? {
                    stats.buckets_finished += 1;
                } else {
                    stats.partitions_revived += bucket.partitions.len() as u64;
                }
            }
            return Ok(());
        }
        if v.has_entries {
            tracing::error!(partition = part, "a dead index partition holds entries but its bucket is gone");
            return Ok(());
        }
    }
    if v.live
        && let Some(label) = &v.label
    {
        // Split work found here is finished or given up; the pass goes on with the new state
        // next time.
        if let Some((_, part_id)) = layout::parse_partition_object(part)
            && reshard::tend(client, &label.bucket, bucket_id, part_id, &v.state).await?
        {
            stats.splits_tended += 1;
            return Ok(());
        }
        if label.split_from.is_some() {
            match split_status(client, bucket_id, part, label).await? {
                // Copies no table ever named: nothing in them is anyone's but the split's, and
                // no record here may be acted on (the partition split holds the originals).
                SplitStatus::InProgress => return Ok(()),
                SplitStatus::Abandoned => {
                    rados::remove(client, INDEX_POOL, part).await?;
                    stats.partitions_removed += 1;
                    return Ok(());
                }
                SplitStatus::Published => reshard::mark_published(client, part, label).await?,
            }
        }
    }
    // Writes here assert the range read above, so none lands after a split moved it.
    let pinned = Part::pinned(part, v.state.bounds.as_ref().map(layout::encode));
    let how = Completion {
        bucket_id,
        part: &pinned,
        live: v.live,
        pending: None,
        gc_delay_ns: settings.gc_delay.as_nanos() as u64,
    };
    let mut waiting = 0usize;
    // Whether the records read reached past the last pending, GC, upload and part record.
    let mut seen_all = (v.records.len() as u32) < RECORDS_PER_PASS;
    for (key, value) in &v.records {
        match key.first() {
            Some(&PENDING_PREFIX) => {
                let rec: PendingRecord = layout::decode(value, "pending record")?;
                let Some(tag) = tag_at(key, 1) else { continue };
                if v.state.bounds.as_ref().is_some_and(|b| !b.contains(&rec.key)) {
                    // A split moved this key: the record here is a copy the split removes.
                    continue;
                }
                if now.saturating_sub(rec.started_ns) < lease_ns {
                    waiting += 1;
                    continue;
                }
                let how = Completion { pending: Some(value.clone()), ..how };
                let done = match &rec.kind {
                    PendingKind::Write => {
                        if !v.live {
                            // The bucket is deleted and held no entry when it died, so any head
                            // under it is an orphan of a write that never completed.
                            rados::remove(client, DATA_POOL, &layout::head_object(bucket_id, &rec.key)).await?;
                            stats.heads_removed += 1;
                        }
                        let own = Some(GcRecord::Chunks { tag, first: 1, count: None });
                        index::complete_at(client, &how, &rec.key, tag, own, None, &|_| Vec::new()).await?
                    }
                    PendingKind::Part { .. } => {
                        // A part is recorded in the request that removes its pending record, so
                        // this one never was: its chunks go.
                        let ops = vec![
                            ObjOp::AssertOmap { key: key.clone(), value: Some(value.clone()) },
                            ObjOp::OmapRemove { keys: vec![key.clone()] },
                            index::gc_set(now + how.gc_delay_ns, vec![GcRecord::Chunks { tag, first: 0, count: None }]),
                        ];
                        match pinned.write(client, ops).await {
                            Err(e) if e.is_conflict() => Completed::PendingGone,
                            other => other.map(|()| Completed::Head(None))?,
                        }
                    }
                    PendingKind::Abort { upload } => {
                        multipart::finish_abort(client, &pinned, *upload, tag, how.gc_delay_ns).await?;
                        Completed::Head(None)
                    }
                    PendingKind::Complete { upload } => {
                        if !v.live {
                            rados::remove(client, DATA_POOL, &layout::head_object(bucket_id, &rec.key)).await?;
                            stats.heads_removed += 1;
                        }
                        multipart::finish_complete(client, &how, upload, tag).await?
                    }
                    PendingKind::Version => {
                        if !v.live {
                            rados::remove(client, DATA_POOL, &layout::version_object(bucket_id, tag)).await?;
                            stats.heads_removed += 1;
                        }
                        let chunks = GcRecord::Chunks { tag, first: 1, count: None };
                        let garbage = GcRecord::Version { tag, then: Some(Box::new(chunks)) };
                        versions::finish(client, &how, &rec.key, tag, Vec::new(), Vec::new(), garbage).await?
                    }
                    PendingKind::CompleteVersion { upload } => {
                        if !v.live {
                            rados::remove(client, DATA_POOL, &layout::version_object(bucket_id, tag)).await?;
                            stats.heads_removed += 1;
                        }
                        multipart::finish_complete_version(client, &how, upload, tag).await?
                    }
                };
                match done {
                    Completed::Head(_) | Completed::PendingGone => stats.completed += 1,
                    // The bucket's state changed under us; the next pass sees the new one.
                    Completed::Dead => return Ok(()),
                }
            }
            Some(&GC_PREFIX) => {
                let due = key.get(1..9).and_then(|b| b.try_into().ok()).map(u64::from_be_bytes).unwrap_or(0);
                if due > now {
                    // Sorted by due time: the rest are later still.
                    waiting += 1;
                    break;
                }
                let rec: GcRecord = layout::decode(value, "GC record")?;
                stats.tails_removed += collect(client, bucket_id, &rec).await?;
                rados::write_ops(client, INDEX_POOL, part, vec![ObjOp::OmapRemove { keys: vec![key.clone()] }]).await?;
                stats.collected += 1;
            }
            Some(&UPLOAD_PREFIX | &PART_PREFIX) => {
                // Uploads and parts follow the records: this partition's records are done. In a
                // deleted bucket, its uploads are aborted (each claimed like a client's abort).
                if !v.live {
                    stats.uploads_aborted += abort_uploads(client, part, settings).await?;
                    waiting += 1;
                }
                break;
            }
            // Versions, key states and tombstones come after uploads and parts (a partition with
            // none of those reaches them here): versions and key states are not the collector's,
            // a dead partition holding versions was left alone above, and tombstones are below.
            Some(&VERSION_PREFIX | &KEY_STATE_PREFIX | &TOMB_PREFIX) => {
                seen_all = true;
                break;
            }
            _ => {
                tracing::warn!(partition = part, "unknown index record skipped");
                waiting += 1;
            }
        }
    }
    if v.live {
        tend_tombstones(client, settings, &v, &pinned, now, stats).await?;
    }
    let label_age_ns = v.label.as_ref().map(|l| now.saturating_sub(l.created_ns)).unwrap_or(u64::MAX);
    if v.live {
        // A create that crashed between its partitions and its record leaves live partitions no
        // record names; once a lease has passed (no create takes that long) they are retired.
        if let Some(label) = &v.label
            && label_age_ns > lease_ns
            && labelled_bucket(client, label, bucket_id).await?.is_none()
        {
            let ops = vec![
                ObjOp::AssertXattr { name: LIVE_XATTR.into(), value: Some(LIVE_VALUE.to_vec()) },
                ObjOp::RemoveXattr { name: LIVE_XATTR.into() },
            ];
            rados::write_ops(client, INDEX_POOL, part, ops).await?;
            stats.partitions_retired += 1;
        }
        return Ok(());
    }
    // Dead, its bucket deleted: the partition goes once no record is left in it.
    if waiting == 0 && seen_all {
        let ops = vec![ObjOp::AssertXattr { name: LIVE_XATTR.into(), value: None }, ObjOp::Remove];
        match client.op(INDEX_POOL, part, ops, Vec::new()).await {
            Ok(_) => stats.partitions_removed += 1,
            Err(e) if e.is_not_found() || e.code() == Some(shoal_proto::ErrorCode::Conflict) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// Removes the partition's tombstones that have lived a pass, renewing its tombstone generation
/// in the same request (and gives a generation to a partition made without one).
///
/// Why this is safe at any age: a completion compares against a key's tombstone, or, when it
/// saw nothing at all for the key, against the generation. Removing a tombstone turns "this
/// tombstone" into "nothing", which the first comparison notices; and the "nothing" it leaves is
/// not the "nothing" of any earlier view, because the generation those views hold is replaced
/// in the same request. Waiting a pass only keeps that from happening more than once a pass: a
/// completion that saw nothing in this partition meanwhile reads its key again (decision 0014).
async fn tend_tombstones(
    client: &Client,
    settings: &CollectorSettings,
    v: &PartitionView,
    pinned: &Part<'_>,
    now: u64,
    stats: &mut PassStats,
) -> Result<(), GatewayError> {
    let min_age_ns = settings.period.as_nanos() as u64;
    let mut old = Vec::new();
    for (key, value) in &v.tombs {
        let tomb: Tombstone = layout::decode(value, "tombstone")?;
        let in_range = match (&v.state.bounds, std::str::from_utf8(&key[1..])) {
            (Some(b), Ok(k)) => b.contains(k),
            (None, _) => true,
            (Some(_), Err(_)) => {
                return Err(GatewayError::Corrupt(format!("a tombstone key of {} bytes is not UTF-8", key.len() - 1)));
            }
        };
        // A tombstone of a key a split moved is a copy the split removes.
        if in_range && now.saturating_sub(tomb.made_ns) >= min_age_ns {
            old.push(key.clone());
        }
    }
    if old.is_empty() && v.tombs_generation.is_some() {
        return Ok(());
    }
    let removed = old.len() as u64;
    // Live partitions only: a dead one takes no new writes, so its tombstones protect nothing
    // that changes, and it goes whole once its records are done.
    let mut ops = vec![ObjOp::AssertXattr { name: LIVE_XATTR.into(), value: Some(LIVE_VALUE.to_vec()) }];
    if !old.is_empty() {
        ops.push(ObjOp::OmapRemove { keys: old });
    }
    ops.push(ObjOp::SetXattr { name: TOMBS_XATTR.into(), value: layout::fresh_tombs_generation()? });
    match pinned.write(client, ops).await {
        // Its bucket is being deleted, or a split moved its range: the next pass sees that.
        Err(e) if e.is_conflict() => return Ok(()),
        other => other?,
    }
    stats.tombstones_removed += removed;
    stats.generations_set += u64::from(v.tombs_generation.is_none());
    Ok(())
}

/// Where the split that made `part` (`label`) stands.
enum SplitStatus {
    /// A split in progress names it.
    InProgress,
    /// Neither a split in progress nor the bucket's table names it (or the bucket is gone):
    /// its split was given up.
    Abandoned,
    /// The bucket's table names it.
    Published,
}

async fn split_status(
    client: &Client,
    bucket_id: u64,
    part: &str,
    label: &PartitionLabel,
) -> Result<SplitStatus, GatewayError> {
    let (Some(from), Some((_, id))) = (label.split_from, layout::parse_partition_object(part)) else {
        return Ok(SplitStatus::Published);
    };
    // A split names its new partition before creating it and keeps naming it until it is
    // published. Reading the parent first and the table second, a partition named by neither
    // was never published (tables only gain partitions).
    let parent = PartitionState::read(client, &layout::partition_object(bucket_id, from)).await?;
    let bucket = labelled_bucket(client, label, bucket_id).await?;
    let Some(bucket) = bucket else {
        // A deletion makes every partition of the table dead before removing the record, so a
        // live one without a record was never published (its split died with the bucket).
        return Ok(SplitStatus::Abandoned);
    };
    if parent.reshard.as_ref().is_some_and(|r| r.new_id == id) {
        return Ok(SplitStatus::InProgress);
    }
    if bucket.partitions.iter().any(|p| p.id == id) { Ok(SplitStatus::Published) } else { Ok(SplitStatus::Abandoned) }
}

/// Aborts every upload left in dead partition `part` (bounded per pass); returns how many.
async fn abort_uploads(client: &Client, part: &str, settings: &CollectorSettings) -> Result<u64, GatewayError> {
    let uploads = rados::omap_prefix(client, INDEX_POOL, part, &[UPLOAD_PREFIX], RECORDS_PER_PASS as usize).await?;
    let mut n = 0;
    for (key, value) in uploads {
        let rec: layout::UploadRecord = layout::decode(&value, "upload record")?;
        let tag = layout::random_tag()?;
        let pending = layout::PendingRecord {
            key: rec.key.clone(),
            started_ns: layout::now_ns(),
            kind: PendingKind::Abort { upload: rec.upload },
        };
        // Claimed as a client's abort is (no liveness guard: the partition is dead).
        let ops = vec![
            ObjOp::AssertOmap { key: key.clone(), value: Some(value.clone()) },
            ObjOp::OmapRemove { keys: vec![key] },
            ObjOp::OmapSet { entries: vec![(layout::pending_key(tag), layout::encode(&pending))] },
        ];
        match rados::write_ops(client, INDEX_POOL, part, ops).await {
            Err(e) if e.is_conflict() => continue,
            other => other?,
        }
        let pinned = Part::pinned(part, None);
        multipart::finish_abort(client, &pinned, rec.upload, tag, settings.gc_delay.as_nanos() as u64).await?;
        n += 1;
    }
    Ok(n)
}

/// Deletes what a GC record names; returns how many objects existed.
async fn collect(client: &Client, bucket_id: u64, rec: &GcRecord) -> Result<u64, GatewayError> {
    let GcRecord::Version { tag, then } = rec else { return collect_data(client, bucket_id, rec).await };
    let mut removed = match then.as_deref() {
        Some(GcRecord::Version { .. }) => {
            return Err(GatewayError::Corrupt("a version's GC record nests another version".into()));
        }
        Some(data) => collect_data(client, bucket_id, data).await?,
        None => 0,
    };
    // The version object goes last, so a collection cut short is repeated whole.
    match client.op(DATA_POOL, &layout::version_object(bucket_id, *tag), vec![ObjOp::Remove], Vec::new()).await {
        Ok(_) => removed += 1,
        Err(e) if e.is_not_found() => {}
        Err(e) => return Err(e.into()),
    }
    Ok(removed)
}

/// Deletes the data (chunks, parts and manifest) a GC record names; returns how many objects
/// existed.
async fn collect_data(client: &Client, bucket_id: u64, rec: &GcRecord) -> Result<u64, GatewayError> {
    match rec {
        GcRecord::Chunks { tag, first, count } => remove_chunks(client, bucket_id, *tag, *first, *count).await,
        GcRecord::Manifest { tag } | GcRecord::ManifestOnly { tag } => {
            let name = layout::manifest_object(bucket_id, *tag);
            let Some(bytes) = rados::read_all(client, DATA_POOL, &name).await? else { return Ok(0) };
            let mut removed = 0;
            if matches!(rec, GcRecord::Manifest { .. }) {
                let manifest: layout::Manifest = layout::decode(&bytes, "manifest")?;
                for p in &manifest.parts {
                    removed += remove_chunks(client, bucket_id, p.tag, 0, Some(p.chunks)).await?;
                }
            }
            // The manifest goes last, so a collection cut short is repeated whole.
            rados::remove(client, DATA_POOL, &name).await?;
            Ok(removed + 1)
        }
        GcRecord::Version { .. } => Err(GatewayError::Internal("collect_data given a version's record".into())),
    }
}

/// Deletes chunks `first..first+count` of `tag` (all found from `first` when `count` is
/// unknown); returns how many existed.
async fn remove_chunks(
    client: &Client,
    bucket_id: u64,
    tag: u128,
    first: u32,
    count: Option<u32>,
) -> Result<u64, GatewayError> {
    let remove = |n: u32| async move {
        match client.op(DATA_POOL, &layout::tail_object(bucket_id, tag, n), vec![ObjOp::Remove], Vec::new()).await {
            Ok(_) => Ok(true),
            Err(e) if e.is_not_found() => Ok(false),
            Err(e) => Err(GatewayError::from(e)),
        }
    };
    let mut removed = 0u64;
    match count {
        Some(count) => {
            let end = first.saturating_add(count);
            let mut s = futures::stream::iter(first..end).map(remove).buffer_unordered(REMOVALS_IN_FLIGHT);
            while let Some(r) = s.next().await {
                removed += u64::from(r?);
            }
        }
        None => {
            // A writer that died before recording its chunks wrote them in order with at most
            // TAILS_IN_FLIGHT in flight, so a run that long of missing chunks ends them.
            let mut missing = 0usize;
            let mut n = first;
            while missing < TAILS_IN_FLIGHT && n < u32::MAX {
                if remove(n).await? {
                    removed += 1;
                    missing = 0;
                } else {
                    missing += 1;
                }
                n += 1;
            }
        }
    }
    Ok(removed)
}
