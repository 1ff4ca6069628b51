//! Online merges of neighbouring bucket index partitions (decision 0014): when a partition and
//! its neighbour together hold less than a quarter of the split threshold, the right one
//! (`from`) is absorbed by the left one (`into`) while writes go on.
//!
//! The same [`Merge`] record is kept on both partitions. The one on `into` *decides*: the
//! commit and a give-up both assert it, so exactly one of them happens. The one on `from`
//! *fences*. The steps:
//!
//! 1. **Claim** (`Copying`): `into` first, then `from`, each only while its range is what the
//!    table says, it is live, and no split or merge is recorded on it.
//! 2. **Copy** `from`'s records (entries, key states, versions, uploads and their parts, pending
//!    records, GC records) into `into` in bounded batches while clients keep writing to both.
//!    The copies in `into` lie outside its range, so nothing reads or acts on them there.
//! 3. **Fence** (`from` `Fenced`): `from`'s bounds become an empty range, in the request that
//!    records the state. Every request to `from` is refused from now on and waits.
//! 4. **Copy again**: `from` is frozen; `into` is made identical to it over `from`'s range.
//! 5. **Commit** (`into` `Committed`): `into`'s bounds become both ranges, in the request that
//!    records the state.
//! 6. **Publish**: the bucket record drops `from` (compare-and-swap), then `into` becomes
//!    `Published`, `from` is removed, and the record on `into` goes.
//!
//! A merge whose merger died is finished by whoever finds it `Committed` or `Published`, and
//! given up by whoever finds it past its deadline before the commit: `into` becomes `Abandoned`
//! (asserting `Copying`), `from` gets its range back and loses its record, the copies in `into`
//! are removed, then `into`'s record.

use shoal_client::Client;
use shoal_proto::osd::ObjOp;

use crate::crashpoint;
use crate::error::GatewayError;
use crate::layout::{
    self, BOUNDS_XATTR, BucketRecord, ENTRY_PREFIX, INDEX_POOL, LIVE_VALUE, LIVE_XATTR, MERGE_XATTR, Merge, MergeState,
    PartitionBounds, VERSION_PREFIX, partition_object,
};
use crate::partition::PartitionState;
use crate::rados;
use crate::reshard::{self, BATCH, assert_bounds, copy_range, in_range, prefix_range};

fn assert_merge(m: Option<&Merge>) -> ObjOp {
    ObjOp::AssertXattr { name: MERGE_XATTR.into(), value: m.map(layout::encode) }
}

fn set_merge(m: &Merge) -> ObjOp {
    ObjOp::SetXattr { name: MERGE_XATTR.into(), value: layout::encode(m) }
}

fn assert_live() -> ObjOp {
    ObjOp::AssertXattr { name: LIVE_XATTR.into(), value: Some(LIVE_VALUE.to_vec()) }
}

/// The bounds a fenced `from` holds: an empty range no table ever gives, so that every request
/// routed to it is refused.
fn fenced_bounds(m: &Merge) -> PartitionBounds {
    PartitionBounds { start: m.from_was.start.clone(), end: Some(m.from_was.start.clone()) }
}

/// The same merge, in state `state` since now.
fn step(m: &Merge, state: MergeState) -> Merge {
    Merge { state, since_ns: layout::now_ns(), ..m.clone() }
}

/// Whether `a` and `b` are records of the same merge (in any state).
fn same_merge(a: &Merge, b: &Merge) -> bool {
    a.into == b.into && a.from == b.from && a.into_was == b.into_was && a.from_was == b.from_was
}

/// Merges partition `at` of `bucket`'s table with a neighbour if the two together hold fewer
/// than `limit` entries and versions; `entries` is what partition `at` was found to hold.
/// Returns whether a merge happened.
pub(crate) async fn merge_if_small(
    client: &Client,
    bucket: &BucketRecord,
    at: usize,
    entries: u64,
    limit: u64,
) -> Result<bool, GatewayError> {
    if bucket.partitions.len() < 2 || entries >= limit {
        return Ok(false);
    }
    let own = records_up_to(client, bucket, at, limit).await?;
    // The right neighbour first: a bucket emptied from its start then merges leftwards too.
    for into in [Some(at), at.checked_sub(1)].into_iter().flatten() {
        if into + 1 >= bucket.partitions.len() {
            continue;
        }
        let other = if into == at { into + 1 } else { into };
        if own >= limit {
            return Ok(false);
        }
        let theirs = records_up_to(client, bucket, other, limit - own).await?;
        if own + theirs < limit {
            return merge(client, bucket, into).await;
        }
    }
    Ok(false)
}

/// Entries and versions of the partition at `at`, each by its weight
/// ([`crate::reshard::record_weight`]), counted up to `cap`.
async fn records_up_to(client: &Client, bucket: &BucketRecord, at: usize, cap: u64) -> Result<u64, GatewayError> {
    let bounds = bucket.bounds_at(at);
    let object = partition_object(bucket.id, bucket.partitions[at].id);
    let mut seen = 0u64;
    for prefix in [ENTRY_PREFIX, VERSION_PREFIX] {
        let (lo, hi) = prefix_range(prefix, &bounds);
        let mut after = crate::index::just_below(&lo);
        'pages: loop {
            let max = BATCH.min((cap - seen + 1).min(u64::from(u32::MAX)) as u32);
            let page = rados::omap_list(client, INDEX_POOL, &object, Some(after.clone()), max).await?;
            let whole = page.len() == max as usize;
            for (k, v) in page {
                if !in_range(&k, &lo, hi.as_deref()) {
                    break 'pages;
                }
                seen += crate::reshard::record_weight(&k, &v);
                if seen >= cap {
                    return Ok(seen);
                }
                after = k;
            }
            if !whole {
                break;
            }
        }
    }
    Ok(seen)
}

/// Merges partition `at + 1` of `bucket`'s table into partition `at`. Returns false when the
/// merge could not be claimed (another split or merge, or a table that is not current) or was
/// given up meanwhile.
pub async fn merge(client: &Client, bucket: &BucketRecord, at: usize) -> Result<bool, GatewayError> {
    if at + 1 >= bucket.partitions.len() {
        return Err(GatewayError::InvalidArgument(format!("partition {at} has no right neighbour to merge")));
    }
    let rec = Merge {
        into: bucket.partitions[at].id,
        into_was: bucket.bounds_at(at),
        from: bucket.partitions[at + 1].id,
        from_was: bucket.bounds_at(at + 1),
        state: MergeState::Copying,
        since_ns: layout::now_ns(),
    };
    debug_assert_eq!(rec.into_was.end.as_ref(), Some(&rec.from_was.start), "merged partitions are neighbours");
    let into = partition_object(bucket.id, rec.into);
    let from = partition_object(bucket.id, rec.from);

    // 1. Claim both, the deciding side first.
    let claim = |was: &PartitionBounds| {
        vec![
            assert_live(),
            assert_bounds(was),
            ObjOp::AssertXattr { name: layout::RESHARD_XATTR.into(), value: None },
            assert_merge(None),
            set_merge(&rec),
        ]
    };
    if !rados::guarded_ops(client, INDEX_POOL, &into, claim(&rec.into_was)).await? {
        return Ok(false);
    }
    match rados::write_ops(client, INDEX_POOL, &from, claim(&rec.from_was)).await {
        Ok(()) => {}
        Err(e) => {
            // Nothing was copied: the claim on `into` is simply taken back.
            let release = vec![assert_merge(Some(&rec)), ObjOp::RemoveXattr { name: MERGE_XATTR.into() }];
            rados::guarded_ops(client, INDEX_POOL, &into, release).await?;
            return if e.is_conflict() { Ok(false) } else { Err(e) };
        }
    }

    // 2. The first copy, while writes go on. Every copy asserts the deciding record, so a merge
    // given up meanwhile stops copying.
    let started = std::time::Instant::now();
    let guard = assert_merge(Some(&rec));
    if let Err(e) = copy_range(client, &from, &into, &rec.from_was, &guard, true).await {
        give_up(client, bucket.id, &rec, Why::Failed).await?;
        return Err(e);
    }
    crashpoint::reached(crashpoint::MERGE_COPIED, &bucket.name);

    // 3. Fence `from`.
    let fenced = step(&rec, MergeState::Fenced);
    let fence = vec![
        assert_merge(Some(&rec)),
        assert_bounds(&rec.from_was),
        ObjOp::SetXattr { name: BOUNDS_XATTR.into(), value: layout::encode(&fenced_bounds(&rec)) },
        set_merge(&fenced),
    ];
    let fenced_at = std::time::Instant::now();
    if !rados::guarded_ops(client, INDEX_POOL, &from, fence).await? {
        // Given up by someone who found the first copy overdue.
        return Ok(false);
    }
    crashpoint::reached(crashpoint::MERGE_FENCED, &bucket.name);

    // 4. The last copy, of a range no one can change now; 5. commit.
    if let Err(e) = copy_range(client, &from, &into, &rec.from_was, &guard, true).await {
        give_up(client, bucket.id, &rec, Why::Failed).await?;
        return Err(e);
    }
    let committed = step(&rec, MergeState::Committed);
    let commit = vec![
        assert_merge(Some(&rec)),
        assert_live(),
        assert_bounds(&rec.into_was),
        ObjOp::SetXattr { name: BOUNDS_XATTR.into(), value: layout::encode(&rec.merged()) },
        // A new generation: a completion that read a key in `from` and is sent here once the
        // merge is published must not find its generation here (`from`'s tombstones removed
        // before the copy would otherwise bring its view of nothing back).
        ObjOp::SetXattr { name: layout::TOMBS_XATTR.into(), value: layout::fresh_tombs_generation()? },
        set_merge(&committed),
    ];
    if !rados::guarded_ops(client, INDEX_POOL, &into, commit).await? {
        // Refused: given up by someone else (then giving up is a no-op), or the bucket's
        // partitions died under a deletion. A deletion only goes ahead on an empty bucket, so
        // the merge has nothing left to do then; it is undone like any other.
        let live = rados::get_xattr(client, INDEX_POOL, &into, LIVE_XATTR).await?;
        let why = if live.as_deref() == Some(LIVE_VALUE) { Why::Refused } else { Why::BucketDeleted };
        give_up(client, bucket.id, &rec, why).await?;
        return Ok(false);
    }
    crashpoint::reached(crashpoint::MERGE_COMMITTED, &bucket.name);
    let fenced_ms = fenced_at.elapsed().as_millis() as u64;
    if let Some(published) = publish(client, &bucket.name, bucket.id, &committed).await? {
        clean_up(client, bucket.id, &published).await?;
    }
    tracing::info!(
        bucket = %bucket.name,
        into = rec.into,
        from = rec.from,
        copy_ms = fenced_at.duration_since(started).as_millis() as u64,
        fenced_ms,
        "index partition merge"
    );
    Ok(true)
}

/// Publishes committed merge `m` (as recorded on `into`; idempotent: anyone who finds it
/// committed may). Returns the published record when this call recorded the publication; its
/// caller then cleans up ([`clean_up`]).
pub(crate) async fn publish(
    client: &Client,
    name: &str,
    bucket_id: u64,
    m: &Merge,
) -> Result<Option<Merge>, GatewayError> {
    debug_assert_eq!(m.state, MergeState::Committed);
    crate::meta::update_bucket(client, name, bucket_id, |b| {
        let Some(at) = b.partitions.iter().position(|p| p.id == m.from) else { return Ok(()) };
        if at == 0
            || b.partitions[at - 1].id != m.into
            || b.bounds_at(at - 1) != m.into_was
            || b.bounds_at(at) != m.from_was
        {
            return Err(GatewayError::Internal(format!(
                "merged partitions {} and {} changed in the bucket's table under their merge",
                m.into, m.from
            )));
        }
        b.partitions.remove(at);
        Ok(())
    })
    .await?;
    let published = step(m, MergeState::Published);
    let ops = vec![assert_merge(Some(m)), set_merge(&published)];
    // Refused: someone else published it; they clean up.
    let recorded = rados::guarded_ops(client, INDEX_POOL, &partition_object(bucket_id, m.into), ops).await?;
    Ok(recorded.then_some(published))
}

/// Removes published merge `m`'s absorbed partition (no table names it: its records are all
/// copies now), then the record on `into`.
pub(crate) async fn clean_up(client: &Client, bucket_id: u64, m: &Merge) -> Result<(), GatewayError> {
    debug_assert_eq!(m.state, MergeState::Published);
    rados::remove(client, INDEX_POOL, &partition_object(bucket_id, m.from)).await?;
    let done = vec![assert_merge(Some(m)), ObjOp::RemoveXattr { name: MERGE_XATTR.into() }];
    rados::guarded_ops(client, INDEX_POOL, &partition_object(bucket_id, m.into), done).await?;
    Ok(())
}

/// Why a merge is given up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Why {
    /// A copy failed.
    Failed,
    /// Its commit was refused with its bucket's partitions live.
    Refused,
    /// Found past its deadline (its merger died or is too slow to be trusted).
    Overdue,
    /// Its bucket's partitions died under a deletion of the (then empty) bucket: expected, not
    /// a fault.
    BucketDeleted,
}

/// Gives up merge `m` (as recorded on `into`, not committed): decided by marking `into`
/// abandoned, which fails if it was committed (or given up) first; then undone.
pub(crate) async fn give_up(client: &Client, bucket_id: u64, m: &Merge, why: Why) -> Result<(), GatewayError> {
    debug_assert_eq!(m.state, MergeState::Copying);
    let abandoned = step(m, MergeState::Abandoned);
    let ops = vec![assert_merge(Some(m)), set_merge(&abandoned)];
    if !rados::guarded_ops(client, INDEX_POOL, &partition_object(bucket_id, m.into), ops).await? {
        return Ok(());
    }
    if why == Why::BucketDeleted {
        tracing::info!(into = m.into, from = m.from, "an index partition merge stopped: its bucket is being deleted");
    } else {
        tracing::warn!(into = m.into, from = m.from, ?why, "an index partition merge was given up");
    }
    finish_abandoned(client, bucket_id, &abandoned).await
}

/// Undoes abandoned merge `m` (idempotent): `from` restored, the copies in `into` removed, then
/// `into`'s record.
pub(crate) async fn finish_abandoned(client: &Client, bucket_id: u64, m: &Merge) -> Result<(), GatewayError> {
    debug_assert_eq!(m.state, MergeState::Abandoned);
    let from = partition_object(bucket_id, m.from);
    // `from` is changed only by this merge while it holds the merge's record; the loop is
    // bounded in case of a record that is not this merge's.
    for _ in 0..8 {
        let state = PartitionState::read(client, &from).await?;
        let Some(found) = state.merge.filter(|f| same_merge(f, m)) else { break };
        let restore = vec![
            assert_merge(Some(&found)),
            ObjOp::SetXattr { name: BOUNDS_XATTR.into(), value: layout::encode(&m.from_was) },
            ObjOp::RemoveXattr { name: MERGE_XATTR.into() },
        ];
        if rados::guarded_ops(client, INDEX_POOL, &from, restore).await? {
            break;
        }
    }
    let into = partition_object(bucket_id, m.into);
    reshard::remove_copies(client, &into, &m.from_was, &assert_merge(Some(m))).await?;
    let done = vec![assert_merge(Some(m)), ObjOp::RemoveXattr { name: MERGE_XATTR.into() }];
    rados::guarded_ops(client, INDEX_POOL, &into, done).await?;
    Ok(())
}

/// Finishes or gives up merge work `found` on partition `part` when it is due (committed or
/// published: now; before the commit: past its deadline). Returns whether anything was done
/// (a request refused by the partition then sends again at once, else it waits first).
pub(crate) async fn tend(
    client: &Client,
    name: &str,
    bucket_id: u64,
    part: u32,
    found: &Merge,
) -> Result<bool, GatewayError> {
    // The record on `into` decides; found on `from`, it is read there.
    let decider = if part == found.into {
        Some(found.clone())
    } else {
        let state = PartitionState::read(client, &partition_object(bucket_id, found.into)).await?;
        state.merge.filter(|m| same_merge(m, found))
    };
    let Some(m) = decider else {
        // `from` names a merge `into` does not: `into`'s record goes only after `from` was
        // restored or removed, so this is a merge `into` never recorded (a bucket deleted and
        // its partitions removed under it). Its range goes back to it once it is overdue.
        if reshard::past_deadline(found.since_ns, false) {
            let from = partition_object(bucket_id, found.from);
            let restore = vec![
                assert_merge(Some(found)),
                ObjOp::SetXattr { name: BOUNDS_XATTR.into(), value: layout::encode(&found.from_was) },
                ObjOp::RemoveXattr { name: MERGE_XATTR.into() },
            ];
            rados::guarded_ops(client, INDEX_POOL, &from, restore).await?;
            return Ok(true);
        }
        return Ok(false);
    };
    match m.state {
        MergeState::Committed => match publish(client, name, bucket_id, &m).await {
            Ok(Some(p)) => clean_up(client, bucket_id, &p).await?,
            Ok(None) => {}
            // A deleted bucket's partitions go as they are (the collector removes them).
            Err(GatewayError::NoSuchBucket(_)) => return Ok(false),
            Err(e) => return Err(e),
        },
        MergeState::Published => clean_up(client, bucket_id, &m).await?,
        MergeState::Abandoned => finish_abandoned(client, bucket_id, &m).await?,
        // Before the commit: given up past the first copy's deadline, or past the fenced
        // window's once `from` is fenced (requests wait for it meanwhile).
        MergeState::Copying => {
            let fenced_since = (found.state == MergeState::Fenced).then_some(found.since_ns);
            let overdue = reshard::past_deadline(m.since_ns, true)
                || fenced_since.is_some_and(|since| reshard::past_deadline(since, false));
            if !overdue {
                return Ok(false);
            }
            give_up(client, bucket_id, &m, Why::Overdue).await?;
        }
        // Only `from` is ever fenced.
        MergeState::Fenced => return Ok(false),
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bounds(start: &str, end: Option<&str>) -> PartitionBounds {
        PartitionBounds { start: start.into(), end: end.map(str::to_string) }
    }

    fn merge_of(state: MergeState) -> Merge {
        Merge { into: 1, into_was: bounds("", Some("m")), from: 2, from_was: bounds("m", None), state, since_ns: 0 }
    }

    #[test]
    fn a_fenced_partition_takes_no_key_and_the_merged_one_every_key_of_both() {
        let m = merge_of(MergeState::Fenced);
        let fenced = fenced_bounds(&m);
        for key in ["", "a", "l", "m", "m0", "z"] {
            assert!(!fenced.contains(key), "{key:?}");
            assert!(m.merged().contains(key), "{key:?}");
            assert_eq!(m.into_was.contains(key), key < "m", "{key:?}");
        }
        assert!(same_merge(&m, &merge_of(MergeState::Copying)));
        assert!(!same_merge(&m, &Merge { from: 3, ..merge_of(MergeState::Fenced) }));
    }

    #[test]
    fn the_absorbing_partition_serves_its_own_range_and_the_fenced_one_nothing() {
        let m = merge_of(MergeState::Committed);
        let into = PartitionState { bounds: Some(m.merged()), reshard: None, merge: Some(m.clone()) };
        assert!(into.serves(&m.into_was), "a reader with the old table still reads its own range");
        assert!(into.serves(&m.merged()));
        assert!(!into.serves(&m.from_was), "the absorbed range is read through the new table only");
        let from = PartitionState {
            bounds: Some(fenced_bounds(&m)),
            reshard: None,
            merge: Some(merge_of(MergeState::Fenced)),
        };
        assert!(!from.serves(&m.from_was), "a fenced partition may be older than the merged one");
        let copying = PartitionState {
            bounds: Some(m.from_was.clone()),
            reshard: None,
            merge: Some(merge_of(MergeState::Copying)),
        };
        assert!(copying.serves(&m.from_was), "before its fence it is still the authority");
    }
}
