//! Online splits of bucket index partitions (decision 0014): a partition that grows past a
//! threshold of entries is cut at its median key while writes go on.
//!
//! The steps, each recorded in the partition's `reshard` xattr ([`Reshard`]) so that anyone who
//! finds a split stuck can finish or undo it:
//!
//! 1. **Claim** (`Copying`): only while the partition's range is what the table says and no
//!    other split is recorded. The new partition is created live, labelled `split_from`, with
//!    the upper range as its bounds; no table names it, so nothing but the split writes to it.
//! 2. **Copy**: every record of a key at or above the cut (entries, versions, key states,
//!    uploads and their parts, pending writes) is copied in bounded batches while clients keep
//!    writing to the old partition.
//! 3. **Fence** (`Fenced`): the old partition's bounds become the lower range, in one request
//!    with the state change. From here every request with the old table is refused; writes
//!    below the cut go on at once with the cut-down bounds, writes above it wait.
//! 4. **Copy again**: the frozen upper range is made identical in the new partition (changed
//!    records set, vanished ones removed).
//! 5. **Commit** (`Committed`), then **publish**: the bucket record gains the new partition
//!    (compare-and-swap), then the state becomes `Published`; waiting writers go to the new
//!    partition. A committed split is published by whoever finds it.
//! 6. **Clean up**: the copied records are removed from the old partition, then the xattr.
//!
//! A split whose splitter died is given up when found past its deadline in `Copying` or
//! `Fenced` (bounds restored, the new partition removed: no table ever named it) and finished
//! when found `Committed` or `Published`.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use shoal_client::Client;
use shoal_proto::osd::ObjOp;

use crate::crashpoint;
use crate::error::GatewayError;
use crate::layout::{
    self, BOUNDS_XATTR, BucketRecord, ENTRY_PREFIX, GC_PREFIX, INDEX_POOL, KEY_STATE_PREFIX, LABEL_XATTR, LIVE_VALUE,
    LIVE_XATTR, MERGE_XATTR, PENDING_PREFIX, Partition, PartitionBounds, PartitionLabel, PendingRecord, RESHARD_XATTR,
    Reshard, ReshardState, TOMB_PREFIX, UPLOAD_PREFIX, VERSION_PREFIX, partition_object,
};
use crate::partition::PartitionState;
use crate::rados;

/// How long a split may stay fenced (writes above its cut waiting) before anyone may give it
/// up. The fenced steps copy only what changed during the first copy. (Shorter when the
/// gateway's lease is: tests shorten both.)
const FENCE_DEADLINE: Duration = Duration::from_secs(30);
/// How long the first copy may take before the collector gives the split up.
const COPY_DEADLINE: Duration = Duration::from_secs(600);
/// The lease of this process's gateway, in milliseconds, capping both deadlines.
static LEASE_MS: AtomicU64 = AtomicU64::new(u64::MAX);
/// Records per copy or removal request.
pub(crate) const BATCH: u32 = 1000;

/// Bytes of an index record that count as one entry toward the split and merge thresholds. An
/// ordinary record (a key of a few dozen bytes and its entry) counts once; a record with a long
/// key counts as several, so a partition's omap stays under ~12.5 MiB at the default threshold
/// whatever its keys' length, which OSDs copy whole in one message (decision 0043: up to 16 MiB).
pub(crate) const RECORD_UNIT_BYTES: usize = 256;

/// What a record counts toward the split and merge thresholds (see [`RECORD_UNIT_BYTES`]).
pub(crate) fn record_weight(key: &[u8], value: &[u8]) -> u64 {
    1 + ((key.len() + value.len()) / RECORD_UNIT_BYTES) as u64
}

/// Entries a partition may hold before it is split (default 50,000; set once per process by
/// the gateway's configuration), each counted by its [`record_weight`].
static SPLIT_ENTRIES: AtomicU64 = AtomicU64::new(50_000);

/// Entries and versions below which two neighbouring partitions are merged (0: never).
static MERGE_ENTRIES: AtomicU64 = AtomicU64::new(12_500);

/// Sets the count below which neighbouring partitions are merged (0: never).
pub fn set_merge_entries(entries: u64) {
    MERGE_ENTRIES.store(entries, Ordering::Relaxed);
}

/// Sets the entry count past which partitions are split.
pub fn set_split_entries(entries: u64) {
    SPLIT_ENTRIES.store(entries.max(4), Ordering::Relaxed);
}

/// Caps the split deadlines at the gateway's lease (after which dead writers are decided too).
pub fn set_lease(lease: Duration) {
    LEASE_MS.store(lease.as_millis().max(1) as u64, Ordering::Relaxed);
}

pub(crate) fn split_entries() -> u64 {
    SPLIT_ENTRIES.load(Ordering::Relaxed)
}

/// Whether split `r` has been in its state past its deadline.
pub(crate) fn overdue(r: &Reshard) -> bool {
    past_deadline(r.since_ns, r.state == ReshardState::Copying)
}

/// Whether a split or merge step that began at `since_ns` is past its deadline: the first
/// copy's (`copying`) or the fenced window's.
pub(crate) fn past_deadline(since_ns: u64, copying: bool) -> bool {
    let deadline = if copying { COPY_DEADLINE } else { FENCE_DEADLINE };
    let deadline = deadline.min(Duration::from_millis(LEASE_MS.load(Ordering::Relaxed)));
    layout::now_ns().saturating_sub(since_ns) > deadline.as_nanos() as u64
}

fn reshard_value(r: &Reshard) -> Vec<u8> {
    layout::encode(r)
}

fn assert_reshard(r: Option<&Reshard>) -> ObjOp {
    ObjOp::AssertXattr { name: RESHARD_XATTR.into(), value: r.map(reshard_value) }
}

/// Asserts that a partition is in no merge.
pub(crate) fn assert_no_merge() -> ObjOp {
    ObjOp::AssertXattr { name: MERGE_XATTR.into(), value: None }
}

pub(crate) fn assert_bounds(b: &PartitionBounds) -> ObjOp {
    ObjOp::AssertXattr { name: BOUNDS_XATTR.into(), value: Some(layout::encode(b)) }
}

/// Writes since the last size check, per partition (this gateway's count; bounded).
fn write_counts() -> &'static Mutex<HashMap<(u64, u32), u64>> {
    static COUNTS: OnceLock<Mutex<HashMap<(u64, u32), u64>>> = OnceLock::new();
    COUNTS.get_or_init(|| Mutex::new(HashMap::new()))
}

/// Most partitions whose writes are counted; the map is emptied when full (a check is then
/// only later, never wrong).
const COUNTED_PARTITIONS: usize = 10_000;

/// Notes a completed write to partition `part` of `bucket`; every so many writes, checks the
/// partition's size in the background and splits it if it is too large, or merges it with a
/// neighbour if both are small.
pub(crate) fn note_write(client: &Client, bucket: &BucketRecord, part: u32) {
    let every = (split_entries() / 8).max(1);
    let due = {
        let mut counts = write_counts().lock().unwrap_or_else(|p| p.into_inner());
        if counts.len() >= COUNTED_PARTITIONS {
            counts.clear();
        }
        let n = counts.entry((bucket.id, part)).or_insert(0);
        *n += 1;
        (*n).is_multiple_of(every)
    };
    if due {
        let client = client.clone();
        let name = bucket.name.clone();
        tokio::spawn(async move {
            if let Err(e) = split_if_large(&client, &name, part).await {
                tracing::warn!(bucket = %name, partition = part, error = %e, "index partition reshape (split or merge) failed");
            }
        });
    }
}

/// Splits partition `part` of bucket `name` at its median key if it holds more than the
/// threshold of entries, or merges it with a neighbour if both together hold fewer than the
/// merge threshold (at most half the split threshold, so that a merged partition is far from
/// its next split). Returns whether it did either.
pub async fn split_if_large(client: &Client, name: &str, part: u32) -> Result<bool, GatewayError> {
    let bucket = match crate::meta::get_bucket(client, name).await {
        Ok(b) => b,
        // Deleted since the write that asked for the check: nothing to reshape.
        Err(GatewayError::NoSuchBucket(_)) => return Ok(false),
        Err(e) => return Err(e),
    };
    let Some(at) = bucket.partitions.iter().position(|p| p.id == part) else { return Ok(false) };
    let limit = split_entries();
    match median_if_over(client, &bucket, at, limit).await? {
        Survey::Over(Some(cut)) => split(client, &bucket, at, &cut).await,
        Survey::Over(None) => Ok(false),
        Survey::Under(entries) => {
            let merge_below = MERGE_ENTRIES.load(Ordering::Relaxed);
            crate::merge::merge_if_small(client, &bucket, at, entries, merge_below).await
        }
    }
}

/// What counting a partition's entries found.
enum Survey {
    /// More than the limit; the first key past half of it (by weight) when it can be a cut.
    Over(Option<String>),
    /// At most the limit: this many.
    Under(u64),
}

/// Counts the partition's entries and version records by weight up to `limit`, in key order (a
/// key's versions count with it), noting the first key past half of it: a versioned bucket whose
/// few keys hold many versions grows its partitions as surely as one of many keys.
async fn median_if_over(client: &Client, bucket: &BucketRecord, at: usize, limit: u64) -> Result<Survey, GatewayError> {
    let bounds = bucket.bounds_at(at);
    let object = partition_object(bucket.id, bucket.partitions[at].id);
    let mut entries = KeyedRecords::new(&object, ENTRY_PREFIX, &bounds);
    let mut versions = KeyedRecords::new(&object, VERSION_PREFIX, &bounds);
    let mut seen = 0u64;
    let mut median: Option<String> = None;
    loop {
        // The record with the smaller key next (an entry before its key's versions).
        let from_entries = match (entries.peek_key(client).await?, versions.peek_key(client).await?) {
            (None, None) => return Ok(Survey::Under(seen)),
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (Some(e), Some(v)) => e <= v,
        };
        let (key, weight) = if from_entries { entries.pop() } else { versions.pop() }
            .ok_or_else(|| GatewayError::Internal("an index record peeked vanished".into()))?;
        seen += weight;
        if median.is_none() && seen > limit / 2 {
            median = Some(key);
        }
        if seen > limit {
            // A cut at the range's start would leave the lower partition empty.
            return Ok(Survey::Over(median.filter(|c| *c > bounds.start)));
        }
    }
}

/// The records of one kind (entries or versions) of a partition's range, in key order, read a
/// page at a time: each as its S3 key and weight.
struct KeyedRecords<'a> {
    object: &'a str,
    prefix: u8,
    lo: Vec<u8>,
    hi: Option<Vec<u8>>,
    after: Vec<u8>,
    page: std::collections::VecDeque<(String, u64)>,
    done: bool,
}

impl<'a> KeyedRecords<'a> {
    fn new(object: &'a str, prefix: u8, bounds: &PartitionBounds) -> KeyedRecords<'a> {
        let (lo, hi) = prefix_range(prefix, bounds);
        let after = crate::index::just_below(&lo);
        KeyedRecords { object, prefix, lo, hi, after, page: Default::default(), done: false }
    }

    /// The key of the next record, reading a page if none is buffered.
    async fn peek_key(&mut self, client: &Client) -> Result<Option<&str>, GatewayError> {
        if self.page.is_empty() && !self.done {
            let page = rados::omap_list(client, INDEX_POOL, self.object, Some(self.after.clone()), BATCH).await?;
            self.done = page.len() < BATCH as usize;
            for (k, v) in page {
                if !in_range(&k, &self.lo, self.hi.as_deref()) {
                    self.done = true;
                    break;
                }
                let key = if self.prefix == VERSION_PREFIX {
                    layout::parse_version_key(&k).map(|(key, _)| key.to_string())
                } else {
                    String::from_utf8(k[1..].to_vec()).ok()
                };
                let key = key.ok_or_else(|| GatewayError::Internal(format!("index record {k:?} names no key")))?;
                self.page.push_back((key, record_weight(&k, &v)));
                self.after = k;
            }
        }
        Ok(self.page.front().map(|(k, _)| k.as_str()))
    }

    fn pop(&mut self) -> Option<(String, u64)> {
        self.page.pop_front()
    }
}

/// Splits partition `at` of `bucket`'s table at key `cut` (inside its range, above its start).
/// Returns false when the split could not be claimed (another one, or a table that is not
/// current) or was given up by someone else meanwhile.
pub async fn split(client: &Client, bucket: &BucketRecord, at: usize, cut: &str) -> Result<bool, GatewayError> {
    let was = bucket.bounds_at(at);
    if !was.contains(cut) || cut == was.start {
        return Err(GatewayError::InvalidArgument(format!("split key {cut:?} is not inside the partition's range")));
    }
    let old_id = bucket.partitions[at].id;
    let old = partition_object(bucket.id, old_id);
    let new_id = loop {
        let mut b = [0u8; 4];
        getrandom::fill(&mut b).map_err(|e| GatewayError::Internal(format!("no randomness: {e}")))?;
        let id = u32::from_le_bytes(b);
        if !bucket.partitions.iter().any(|p| p.id == id) {
            break id;
        }
    };
    let upper = PartitionBounds { start: cut.to_string(), end: was.end.clone() };
    let lower = PartitionBounds { start: was.start.clone(), end: Some(cut.to_string()) };
    let mut rec = Reshard {
        cut: cut.to_string(),
        new_id,
        was: was.clone(),
        state: ReshardState::Copying,
        since_ns: layout::now_ns(),
    };

    // 1. Claim, then create the new partition.
    let claim = vec![
        ObjOp::AssertXattr { name: LIVE_XATTR.into(), value: Some(LIVE_VALUE.to_vec()) },
        assert_bounds(&was),
        assert_reshard(None),
        assert_no_merge(),
        ObjOp::SetXattr { name: RESHARD_XATTR.into(), value: reshard_value(&rec) },
    ];
    if !rados::guarded_ops(client, INDEX_POOL, &old, claim).await? {
        return Ok(false);
    }
    let new = partition_object(bucket.id, new_id);
    let label = PartitionLabel { bucket: bucket.name.clone(), created_ns: layout::now_ns(), split_from: Some(old_id) };
    let create = vec![
        ObjOp::Create { exclusive: true },
        ObjOp::SetXattr { name: LABEL_XATTR.into(), value: layout::encode(&label) },
        ObjOp::SetXattr { name: LIVE_XATTR.into(), value: LIVE_VALUE.to_vec() },
        ObjOp::SetXattr { name: BOUNDS_XATTR.into(), value: layout::encode(&upper) },
        // A generation of its own: a completion that read the key in the partition being split
        // and is sent here once the split is published must not find its generation here.
        ObjOp::SetXattr { name: layout::TOMBS_XATTR.into(), value: layout::fresh_tombs_generation()? },
    ];
    if let Err(e) = rados::write_ops(client, INDEX_POOL, &new, create).await {
        give_up(client, bucket.id, old_id, &rec).await?;
        return Err(e);
    }

    // 2. The first copy, while writes go on.
    let started = std::time::Instant::now();
    let copied = copy_range(client, &old, &new, &upper, &assert_bounds(&upper), false).await;
    if let Err(e) = copied {
        give_up(client, bucket.id, old_id, &rec).await?;
        return Err(e);
    }

    crashpoint::reached(crashpoint::SPLIT_COPIED, &bucket.name);
    // 3. Fence.
    let fenced = Reshard { state: ReshardState::Fenced, since_ns: layout::now_ns(), ..rec.clone() };
    let fence = vec![
        assert_reshard(Some(&rec)),
        assert_bounds(&was),
        ObjOp::SetXattr { name: BOUNDS_XATTR.into(), value: layout::encode(&lower) },
        ObjOp::SetXattr { name: RESHARD_XATTR.into(), value: reshard_value(&fenced) },
    ];
    let fenced_at = std::time::Instant::now();
    match rados::write_ops(client, INDEX_POOL, &old, fence).await {
        Ok(()) => rec = fenced,
        // Given up by someone who found the first copy overdue.
        Err(e) if e.is_conflict() => return Ok(false),
        Err(e) => return Err(e),
    }

    crashpoint::reached(crashpoint::SPLIT_FENCED, &bucket.name);
    // 4. The last copy, of a range no one can change now; 5. commit.
    if let Err(e) = copy_range(client, &old, &new, &upper, &assert_bounds(&upper), false).await {
        give_up(client, bucket.id, old_id, &rec).await?;
        return Err(e);
    }
    let committed = Reshard { state: ReshardState::Committed, since_ns: layout::now_ns(), ..rec.clone() };
    let commit = vec![
        assert_reshard(Some(&rec)),
        ObjOp::SetXattr { name: RESHARD_XATTR.into(), value: reshard_value(&committed) },
    ];
    if !rados::guarded_ops(client, INDEX_POOL, &old, commit).await? {
        return Ok(false);
    }
    crashpoint::reached(crashpoint::SPLIT_COMMITTED, &bucket.name);
    let published = publish(client, &bucket.name, bucket.id, old_id, &committed).await?;
    let fenced_ms = fenced_at.elapsed().as_millis() as u64;
    let cleaning = std::time::Instant::now();
    if let Some(p) = &published {
        clean_up(client, bucket.id, old_id, p).await?;
    }
    tracing::info!(
        bucket = %bucket.name,
        from = old_id,
        to = new_id,
        cut,
        copy_ms = fenced_at.duration_since(started).as_millis() as u64,
        fenced_ms,
        clean_up_ms = cleaning.elapsed().as_millis() as u64,
        "index partition split"
    );
    Ok(true)
}

/// Publishes committed split `r` of partition `old_id` (idempotent: anyone who finds it
/// committed may). Returns the published record when this call recorded the publication; its
/// caller then cleans up ([`clean_up`]).
pub(crate) async fn publish(
    client: &Client,
    name: &str,
    bucket_id: u64,
    old_id: u32,
    r: &Reshard,
) -> Result<Option<Reshard>, GatewayError> {
    debug_assert_eq!(r.state, ReshardState::Committed);
    crate::meta::update_bucket(client, name, bucket_id, |b| {
        if b.partitions.iter().any(|p| p.id == r.new_id) {
            return Ok(());
        }
        let Some(at) = b.partitions.iter().position(|p| p.id == old_id) else {
            return Err(GatewayError::Internal(format!("split partition {old_id} is not in the bucket's table")));
        };
        if b.bounds_at(at) != r.was {
            return Err(GatewayError::Internal(format!("split partition {old_id}'s range changed under its split")));
        }
        b.partitions.insert(at + 1, Partition { start: r.cut.clone(), id: r.new_id });
        Ok(())
    })
    .await?;
    let new = partition_object(bucket_id, r.new_id);
    let label = match rados::get_xattr(client, INDEX_POOL, &new, LABEL_XATTR).await? {
        Some(v) => layout::decode::<PartitionLabel>(&v, "partition label")?,
        None => return Err(GatewayError::Internal(format!("split partition {new} has no label"))),
    };
    mark_published(client, &new, &label).await?;
    let published = Reshard { state: ReshardState::Published, since_ns: layout::now_ns(), ..r.clone() };
    let ops =
        vec![assert_reshard(Some(r)), ObjOp::SetXattr { name: RESHARD_XATTR.into(), value: reshard_value(&published) }];
    // Refused: someone else published it; they clean up.
    let recorded = rados::guarded_ops(client, INDEX_POOL, &partition_object(bucket_id, old_id), ops).await?;
    Ok(recorded.then_some(published))
}

/// Rewrites the label of published split partition `object` without its parent, so that the
/// collector treats it as any other partition from now on.
pub(crate) async fn mark_published(client: &Client, object: &str, label: &PartitionLabel) -> Result<(), GatewayError> {
    let plain = PartitionLabel { split_from: None, ..label.clone() };
    let ops = vec![
        ObjOp::AssertXattr { name: LABEL_XATTR.into(), value: Some(layout::encode(label)) },
        ObjOp::SetXattr { name: LABEL_XATTR.into(), value: layout::encode(&plain) },
    ];
    rados::guarded_ops(client, INDEX_POOL, object, ops).await?;
    Ok(())
}

/// Removes published split `r`'s copied records from the old partition, then its record.
pub(crate) async fn clean_up(client: &Client, bucket_id: u64, old_id: u32, r: &Reshard) -> Result<(), GatewayError> {
    let old = partition_object(bucket_id, old_id);
    let lower = PartitionBounds { start: r.was.start.clone(), end: Some(r.cut.clone()) };
    let upper = PartitionBounds { start: r.cut.clone(), end: r.was.end.clone() };
    remove_copies(client, &old, &upper, &assert_bounds(&lower)).await?;
    let done = vec![assert_reshard(Some(r)), ObjOp::RemoveXattr { name: RESHARD_XATTR.into() }];
    rados::guarded_ops(client, INDEX_POOL, &old, done).await?;
    Ok(())
}

/// Removes from partition `object` every record of keys in `range` (entries, key states,
/// versions, uploads and their parts, pending records about such keys), each request guarded by
/// `guard`: copies a split or a merge left where they no longer belong.
pub(crate) async fn remove_copies(
    client: &Client,
    object: &str,
    range: &PartitionBounds,
    guard: &ObjOp,
) -> Result<(), GatewayError> {
    for records in record_ranges(client, object, range, false).await? {
        let mut after = crate::index::just_below(&records.lo);
        loop {
            let page = rados::omap_list(client, INDEX_POOL, object, Some(after.clone()), BATCH).await?;
            let whole = page.len() == BATCH as usize;
            let mut keys = Vec::new();
            let mut ended = !whole;
            for (k, v) in page {
                if !in_range(&k, &records.lo, records.hi.as_deref()) {
                    ended = true;
                    break;
                }
                after = k.clone();
                if records.keep(&v, range) {
                    keys.push(k);
                }
            }
            if !keys.is_empty() {
                let ops = vec![guard.clone(), ObjOp::OmapRemove { keys }];
                rados::write_ops(client, INDEX_POOL, object, ops).await?;
            }
            if ended {
                break;
            }
        }
    }
    Ok(())
}

/// Gives up split `r` of partition `old_id` (not yet committed): its bounds back, its record
/// gone, its new partition (which no table named) removed.
pub(crate) async fn give_up(client: &Client, bucket_id: u64, old_id: u32, r: &Reshard) -> Result<(), GatewayError> {
    debug_assert!(matches!(r.state, ReshardState::Copying | ReshardState::Fenced));
    let ops = vec![
        assert_reshard(Some(r)),
        ObjOp::SetXattr { name: BOUNDS_XATTR.into(), value: layout::encode(&r.was) },
        ObjOp::RemoveXattr { name: RESHARD_XATTR.into() },
    ];
    if !rados::guarded_ops(client, INDEX_POOL, &partition_object(bucket_id, old_id), ops).await? {
        return Ok(());
    }
    tracing::warn!(partition = old_id, to = r.new_id, "an index partition split was given up");
    rados::remove(client, INDEX_POOL, &partition_object(bucket_id, r.new_id)).await
}

/// Finishes or gives up split work found on a partition by the collector: `state` as read.
/// Returns whether anything was done.
pub(crate) async fn tend(
    client: &Client,
    name: &str,
    bucket_id: u64,
    part_id: u32,
    state: &PartitionState,
) -> Result<bool, GatewayError> {
    let Some(r) = &state.reshard else { return Ok(false) };
    match r.state {
        ReshardState::Committed => {
            if let Some(p) = publish(client, name, bucket_id, part_id, r).await? {
                clean_up(client, bucket_id, part_id, &p).await?;
            }
        }
        ReshardState::Published => clean_up(client, bucket_id, part_id, r).await?,
        _ if overdue(r) => give_up(client, bucket_id, part_id, r).await?,
        _ => return Ok(false),
    }
    Ok(true)
}

/// One kind of record to copy: omap keys from `lo` (inclusive) to `hi` (exclusive; `None`:
/// to the end of the prefix), and for pending records a filter on the key they are about.
struct RecordRange {
    lo: Vec<u8>,
    hi: Option<Vec<u8>>,
    pending: bool,
    /// Records only ever added to the target, never removed from it: GC records, which are not
    /// about keys, so that the target's own cannot be told from copies (a copy left behind is
    /// collected twice, which deleting what is already deleted makes harmless).
    add_only: bool,
}

impl RecordRange {
    /// Whether a record of this range belongs to keys in `upper`.
    fn keep(&self, value: &[u8], upper: &PartitionBounds) -> bool {
        !self.pending || layout::decode::<PendingRecord>(value, "pending record").is_ok_and(|p| upper.contains(&p.key))
    }
}

/// The omap range of records of kind `prefix` for keys in `b`.
pub(crate) fn prefix_range(prefix: u8, b: &PartitionBounds) -> (Vec<u8>, Option<Vec<u8>>) {
    let mut lo = vec![prefix];
    lo.extend_from_slice(b.start.as_bytes());
    let hi = match &b.end {
        Some(e) => {
            let mut hi = vec![prefix];
            hi.extend_from_slice(e.as_bytes());
            hi
        }
        None => vec![prefix + 1],
    };
    (lo, Some(hi))
}

pub(crate) fn in_range(k: &[u8], lo: &[u8], hi: Option<&[u8]>) -> bool {
    k >= lo && hi.is_none_or(|h| k < h)
}

/// Every record range of keys in `upper` in partition `object`: entries, key states, tombstones,
/// versions, uploads, the parts of those uploads, and the pending records about such keys; with
/// `gc`, its GC records too (a merge moves them: the partition they are in goes away).
async fn record_ranges(
    client: &Client,
    object: &str,
    upper: &PartitionBounds,
    gc: bool,
) -> Result<Vec<RecordRange>, GatewayError> {
    let mut ranges = Vec::new();
    for prefix in [ENTRY_PREFIX, KEY_STATE_PREFIX, TOMB_PREFIX, VERSION_PREFIX, UPLOAD_PREFIX] {
        let (lo, hi) = prefix_range(prefix, upper);
        ranges.push(RecordRange { lo, hi, pending: false, add_only: false });
    }
    ranges.push(RecordRange {
        lo: vec![PENDING_PREFIX],
        hi: Some(vec![PENDING_PREFIX + 1]),
        pending: true,
        add_only: false,
    });
    if gc {
        ranges.push(RecordRange { lo: vec![GC_PREFIX], hi: Some(vec![GC_PREFIX + 1]), pending: false, add_only: true });
    }
    for upload in uploads_in(client, object, upper).await? {
        ranges.push(RecordRange {
            lo: layout::part_key(upload, 0),
            hi: Some(layout::part_key(upload, u32::MAX)),
            pending: false,
            add_only: false,
        });
    }
    Ok(ranges)
}

/// The ids of the uploads of keys in `upper` recorded in partition `object`.
async fn uploads_in(client: &Client, object: &str, upper: &PartitionBounds) -> Result<BTreeSet<u128>, GatewayError> {
    let (lo, hi) = prefix_range(UPLOAD_PREFIX, upper);
    let mut out = BTreeSet::new();
    let mut after = crate::index::just_below(&lo);
    loop {
        let page = rados::omap_list(client, INDEX_POOL, object, Some(after.clone()), BATCH).await?;
        let whole = page.len() == BATCH as usize;
        for (k, _) in page {
            if !in_range(&k, &lo, hi.as_deref()) {
                return Ok(out);
            }
            if let Some(tail) = k.len().checked_sub(16).and_then(|at| k.get(at..))
                && let Ok(id) = <[u8; 16]>::try_from(tail)
            {
                out.insert(u128::from_be_bytes(id));
            }
            after = k;
        }
        if !whole {
            return Ok(out);
        }
    }
}

/// Makes the records of keys in `upper` in partition `to` identical to those in `from`:
/// changed and new ones set, vanished ones removed (with `gc`, `from`'s GC records added too).
/// Every write to `to` carries `guard` (a split asserts the new partition's bounds, a merge its
/// record on the absorbing partition), so a split or merge given up meanwhile stops here
/// instead of writing on.
pub(crate) async fn copy_range(
    client: &Client,
    from: &str,
    to: &str,
    upper: &PartitionBounds,
    guard: &ObjOp,
    gc: bool,
) -> Result<(), GatewayError> {
    let mut ranges = record_ranges(client, from, upper, gc).await?;
    // Parts of uploads that are in the new partition but gone from the old one go too.
    let known: BTreeSet<Vec<u8>> = ranges.iter().map(|r| r.lo.clone()).collect();
    for upload in uploads_in(client, to, upper).await? {
        let lo = layout::part_key(upload, 0);
        if !known.contains(&lo) {
            ranges.push(RecordRange {
                lo,
                hi: Some(layout::part_key(upload, u32::MAX)),
                pending: false,
                add_only: false,
            });
        }
    }
    for range in &ranges {
        copy_one(client, from, to, upper, range, guard).await?;
    }
    Ok(())
}

async fn copy_one(
    client: &Client,
    from: &str,
    to: &str,
    upper: &PartitionBounds,
    range: &RecordRange,
    guard: &ObjOp,
) -> Result<(), GatewayError> {
    let hi = range.hi.as_deref();
    let mut after = crate::index::just_below(&range.lo);
    loop {
        // A page of the source, then the target's records up to the same key.
        let page = rados::omap_list(client, INDEX_POOL, from, Some(after.clone()), BATCH).await?;
        let whole = page.len() == BATCH as usize;
        let mut src: Vec<(Vec<u8>, Vec<u8>)> = Vec::with_capacity(page.len());
        let mut ended = !whole;
        for (k, v) in page {
            if !in_range(&k, &range.lo, hi) {
                ended = true;
                break;
            }
            src.push((k, v));
        }
        let upto: Option<Vec<u8>> = if ended { None } else { src.last().map(|(k, _)| k.clone()) };
        let mut dst: HashMap<Vec<u8>, Vec<u8>> = HashMap::new();
        let mut t_after = after.clone();
        'target: loop {
            let tpage = rados::omap_list(client, INDEX_POOL, to, Some(t_after.clone()), BATCH).await?;
            let twhole = tpage.len() == BATCH as usize;
            for (k, v) in tpage {
                let past = match &upto {
                    Some(u) => k > *u,
                    None => !in_range(&k, &range.lo, hi),
                };
                if past {
                    break 'target;
                }
                t_after = k.clone();
                // The target's own records (a merge's absorbing partition has pending records
                // of its own keys) are not copies, and stay.
                if range.keep(&v, upper) {
                    dst.insert(k, v);
                }
            }
            if !twhole {
                break;
            }
        }
        let mut set = Vec::new();
        for (k, v) in src {
            if !range.keep(&v, upper) {
                continue;
            }
            match dst.remove(&k) {
                Some(old) if old == v => {}
                _ => set.push((k, v)),
            }
        }
        let remove: Vec<Vec<u8>> = if range.add_only { Vec::new() } else { dst.into_keys().collect() };
        if !set.is_empty() || !remove.is_empty() {
            let mut ops = vec![guard.clone()];
            if !set.is_empty() {
                ops.push(ObjOp::OmapSet { entries: set });
            }
            if !remove.is_empty() {
                ops.push(ObjOp::OmapRemove { keys: remove });
            }
            rados::write_ops(client, INDEX_POOL, to, ops).await?;
        }
        match upto {
            Some(u) => after = u,
            None => return Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ordinary_records_count_once_and_long_keys_keep_a_partition_within_what_osds_copy() {
        let entry = layout::IndexEntry {
            size_bytes: 4096,
            etag: format!("\"{}\"", "a".repeat(32)),
            mtime_ns: layout::now_ns(),
            tag: u128::MAX,
            tails: 0,
            owner_id: "f".repeat(64),
            owner_display: "admin".into(),
            multipart: false,
            version: None,
            null: false,
            delete_marker: false,
        };
        let value = layout::encode(&entry);
        let ordinary = layout::entry_key(&format!("obj/{}/{}", 15, 123_456));
        assert_eq!(record_weight(&ordinary, &value), 1, "{} bytes", ordinary.len() + value.len());
        let longest = layout::entry_key(&"k".repeat(1024));
        let weight = record_weight(&longest, &value);
        assert!(weight >= 4, "{weight}");
        // A partition at the default threshold, whatever its keys, holds fewer bytes than the
        // 16 MiB of omap an OSD copies of one object (decision 0043).
        let per_unit = (longest.len() + value.len()) as u64 / weight;
        assert!(per_unit * 50_000 < 16 << 20, "{per_unit}");
    }

    #[test]
    fn record_ranges_cover_exactly_the_keys_of_a_range() {
        let upper = PartitionBounds { start: "m".into(), end: Some("t".into()) };
        let (lo, hi) = prefix_range(ENTRY_PREFIX, &upper);
        let hi = hi.unwrap();
        for (key, inside) in [("l", false), ("m", true), ("m\u{0}", true), ("szz", true), ("t", false), ("ta", false)] {
            assert_eq!(in_range(&layout::entry_key(key), &lo, Some(&hi)), inside, "{key:?}");
        }
        // A key's versions sort with the key, so a version range matches its keys.
        let (vlo, vhi) = prefix_range(VERSION_PREFIX, &upper);
        let slot = layout::Slot::from_bytes(&[0xFF; layout::Slot::BYTES]).unwrap();
        assert!(in_range(&layout::version_key("s", slot), &vlo, vhi.as_deref()));
        assert!(!in_range(&layout::version_key("t", slot), &vlo, vhi.as_deref()));
        // The last partition's range runs to the end of its prefix.
        let last = PartitionBounds { start: "m".into(), end: None };
        let (lo, hi) = prefix_range(ENTRY_PREFIX, &last);
        assert!(in_range(&layout::entry_key("\u{10FFFF}"), &lo, hi.as_deref()));
        assert!(!in_range(&layout::pending_key(1), &lo, hi.as_deref()));
    }
}
