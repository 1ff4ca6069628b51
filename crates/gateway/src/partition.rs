//! Routing index requests to the partition responsible for a key, and following splits
//! (decision 0014).
//!
//! A writer finds a key's partition in its bucket record's table, which may be older than a
//! split. Every request routed here therefore carries the partition's range as the writer's
//! table gives it: writes assert it (the `bounds` xattr), reads fetch it in the same request.
//! A request that finds other bounds reads the bucket record again and goes where the new
//! table says; while a split is fenced but not published, writes above its cut wait (reads are
//! still served by the partition being split, whose copy of the range is frozen and whole).
//! The request is sent again unchanged: a split copies a key's records exactly, so guards built
//! from reading the old partition hold or fail on the new one as they would have there.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use shoal_client::Client;
use shoal_proto::osd::{ObjOp, OpOutput};

use crate::error::GatewayError;
use crate::layout::{
    self, BOUNDS_XATTR, BucketRecord, INDEX_POOL, MERGE_XATTR, Merge, PartitionBounds, RESHARD_XATTR, Reshard,
    ReshardState, partition_object,
};
use crate::rados;
use crate::{merge, reshard};

/// Most times one request follows a split or waits for one (each wait at most
/// [`WAIT_MAX_MS`]); a fenced split finishes, or is given up by whoever finds it past its
/// deadline, well within this.
const FOLLOW_ATTEMPTS: usize = 400;
const WAIT_MAX_MS: u64 = 100;

/// Where a key's index requests go.
pub(crate) enum Part<'a> {
    /// The partition a bucket's table gives for a key, followed across splits.
    Routed { bucket: &'a BucketRecord, key: String, route: Mutex<RouteState> },
    /// One partition object as the collector found it: writes assert the bounds it read
    /// (`None`: no bounds, a partition of a deleted bucket), and nothing is followed.
    Pinned { object: String, bounds: Option<Vec<u8>> },
}

/// What a routed part learned since it was made.
#[derive(Default)]
pub(crate) struct RouteState {
    /// A bucket record newer than the one the request started with.
    fresh: Option<Arc<BucketRecord>>,
    /// The cut-down range of a fenced partition, for a key below its cut.
    below_cut: Option<(u32, PartitionBounds)>,
}

/// A route: the partition object and the bounds its table gives it.
struct Route {
    id: u32,
    object: String,
    bounds: PartitionBounds,
}

/// What following a refused request found.
enum Follow {
    /// The partition's bounds are the expected ones: the refusal was another guard's.
    Same,
    /// The route changed: send again.
    Retry,
    /// A split is fenced above this key: wait, then send again.
    Wait,
}

impl<'a> Part<'a> {
    /// `key`'s partition in `bucket`'s table (followed to newer tables as needed).
    pub(crate) fn routed(bucket: &'a BucketRecord, key: &str) -> Part<'a> {
        Part::Routed { bucket, key: key.to_string(), route: Mutex::new(RouteState::default()) }
    }

    /// Partition object `object` as found, its writes guarded by `bounds` (encoded) if given.
    pub(crate) fn pinned(object: &str, bounds: Option<Vec<u8>>) -> Part<'static> {
        Part::Pinned { object: object.to_string(), bounds }
    }

    /// The partition object requests go to now (for messages and pinned work).
    pub(crate) fn object(&self) -> String {
        match self {
            Part::Routed { .. } => self.route().object,
            Part::Pinned { object, .. } => object.clone(),
        }
    }

    /// The id of the partition requests go to now: after a request followed a split or merge,
    /// the one it followed to (`None` for pinned parts).
    pub(crate) fn partition_id(&self) -> Option<u32> {
        match self {
            Part::Routed { .. } => Some(self.route().id),
            Part::Pinned { .. } => None,
        }
    }

    fn route(&self) -> Route {
        let Part::Routed { bucket, key, route } = self else { unreachable!("only routed parts have routes") };
        let state = route.lock().unwrap_or_else(|p| p.into_inner());
        let table: &BucketRecord = state.fresh.as_deref().unwrap_or(bucket);
        let at = table.partition_index(key);
        let id = table.partitions[at].id;
        let bounds = match &state.below_cut {
            Some((p, b)) if *p == id => b.clone(),
            _ => table.bounds_at(at),
        };
        Route { id, object: partition_object(table.id, id), bounds }
    }

    /// Runs write operations `ops` on the key's partition, guarded by its bounds. A refusal by
    /// another guard is returned as the cluster's conflict, as for an unrouted request.
    pub(crate) async fn write(&self, client: &Client, ops: Vec<ObjOp>) -> Result<(), GatewayError> {
        self.write_answered(client, ops).await.map(drop)
    }

    /// [`Part::write`], returning the outputs of `ops` (see [`rados::write_ops_answered`]): reads
    /// among them see the partition that took the writes, just before it took them.
    pub(crate) async fn write_answered(&self, client: &Client, ops: Vec<ObjOp>) -> Result<Vec<OpOutput>, GatewayError> {
        // The outputs of `ops`, after those of the guard put before them (write_ops_answered
        // checked that there is one output per operation sent).
        let count = ops.len();
        let answered = move |mut outputs: Vec<OpOutput>| {
            let first = outputs.len() - count;
            outputs.split_off(first)
        };
        if let Part::Pinned { object, bounds } = self {
            let mut guarded = Vec::with_capacity(ops.len() + 1);
            if let Some(b) = bounds {
                guarded.push(ObjOp::AssertXattr { name: BOUNDS_XATTR.into(), value: Some(b.clone()) });
            }
            guarded.extend(ops);
            return rados::write_ops_answered(client, INDEX_POOL, object, guarded).await.map(answered);
        }
        let mut waits = 0u64;
        for _ in 0..FOLLOW_ATTEMPTS {
            let route = self.route();
            let mut guarded = Vec::with_capacity(ops.len() + 1);
            guarded.push(ObjOp::AssertXattr { name: BOUNDS_XATTR.into(), value: Some(layout::encode(&route.bounds)) });
            guarded.extend(ops.iter().cloned());
            let err = match rados::write_ops_answered(client, INDEX_POOL, &route.object, guarded).await {
                Ok(outputs) => return Ok(answered(outputs)),
                Err(e) if e.is_conflict() || e.is_not_found() => e,
                Err(e) => return Err(e),
            };
            match self.follow(client, &route, true).await? {
                Follow::Same => return Err(err),
                Follow::Retry => {}
                Follow::Wait => {
                    waits += 1;
                    tokio::time::sleep(Duration::from_millis((waits * 5).min(WAIT_MAX_MS))).await;
                }
            }
        }
        Err(self.stuck())
    }

    /// Runs read operations `ops` on the key's partition and returns their outputs (`None`: no
    /// such partition object).
    pub(crate) async fn read(&self, client: &Client, ops: Vec<ObjOp>) -> Result<Option<Vec<OpOutput>>, GatewayError> {
        if let Part::Pinned { object, .. } = self {
            return match client.op(INDEX_POOL, object, ops, Vec::new()).await {
                Ok(r) => Ok(Some(r.outputs)),
                Err(e) if e.is_not_found() => Ok(None),
                Err(e) => Err(e.into()),
            };
        }
        let mut waits = 0u64;
        for _ in 0..FOLLOW_ATTEMPTS {
            let route = self.route();
            let (state, outputs) = read_with_state(client, &route.object, ops.clone()).await?;
            if state.serves(&route.bounds) {
                return Ok(outputs);
            }
            match self.follow(client, &route, false).await? {
                // Missing partitions (a deleted bucket's) read as empty, as unrouted reads do.
                Follow::Same => return Ok(outputs),
                Follow::Retry => {}
                Follow::Wait => {
                    waits += 1;
                    tokio::time::sleep(Duration::from_millis((waits * 5).min(WAIT_MAX_MS))).await;
                }
            }
        }
        Err(self.stuck())
    }

    fn stuck(&self) -> GatewayError {
        GatewayError::Conflict(format!("the index partition {} stayed in the middle of a split", self.object()))
    }

    /// After a refused request: reads the partition's state and the bucket record, and decides
    /// where the request goes now. Finishes or gives up a split found stuck past its deadline.
    async fn follow(&self, client: &Client, route: &Route, writing: bool) -> Result<Follow, GatewayError> {
        let Part::Routed { bucket, key, route: state } = self else {
            return Ok(Follow::Same);
        };
        // The partition first, then the record: a split published before the partition showed
        // it (Published) is in the record read after.
        let found = PartitionState::read(client, &route.object).await?;
        if found.bounds.as_ref() == Some(&route.bounds) && (writing || found.serves(&route.bounds)) {
            return Ok(Follow::Same);
        }
        let fresh = match rados::read_all(client, layout::META_POOL, &layout::bucket_object(&bucket.name)).await? {
            Some(bytes) => layout::decode::<BucketRecord>(&bytes, "bucket record")?,
            None => return Err(GatewayError::NoSuchBucket(bucket.name.clone())),
        };
        if fresh.id != bucket.id {
            return Err(GatewayError::NoSuchBucket(bucket.name.clone()));
        }
        let at = fresh.partition_index(key);
        let changed = fresh.partitions[at].id != route.id || fresh.bounds_at(at) != route.bounds;
        let fresh_bounds = fresh.bounds_at(at);
        {
            let mut s = state.lock().unwrap_or_else(|p| p.into_inner());
            s.fresh = Some(Arc::new(fresh.clone()));
            if changed {
                s.below_cut = None;
            }
        }
        if changed {
            return Ok(Follow::Retry);
        }
        if found.bounds.is_none() {
            // No partition object under a current table: a deleted bucket's (answered by the
            // request's own guards), never a split's.
            return Ok(Follow::Same);
        }
        if let Some(m) = &found.merge {
            return Ok(match merge::tend(client, &fresh.name, fresh.id, route.id, m).await? {
                true => Follow::Retry,
                false => Follow::Wait,
            });
        }
        match found.reshard {
            Some(r) if r.was == fresh_bounds => match r.state {
                ReshardState::Fenced | ReshardState::Committed if key.as_str() < r.cut.as_str() && writing => {
                    let below = PartitionBounds { start: r.was.start.clone(), end: Some(r.cut.clone()) };
                    state.lock().unwrap_or_else(|p| p.into_inner()).below_cut = Some((route.id, below));
                    Ok(Follow::Retry)
                }
                ReshardState::Committed => {
                    if let Some(published) = reshard::publish(client, &fresh.name, fresh.id, route.id, &r).await? {
                        // The copies left behind are removed beside the request, not in its way.
                        let (client, bucket_id, part_id) = (client.clone(), fresh.id, route.id);
                        tokio::spawn(async move {
                            if let Err(e) = reshard::clean_up(&client, bucket_id, part_id, &published).await {
                                tracing::warn!(partition = part_id, error = %e, "cleaning up after a split failed");
                            }
                        });
                    }
                    Ok(Follow::Retry)
                }
                ReshardState::Fenced if reshard::overdue(&r) => {
                    reshard::give_up(client, fresh.id, route.id, &r).await?;
                    Ok(Follow::Retry)
                }
                _ => Ok(Follow::Wait),
            },
            // Published, with the record read before the publication was visible to it: the
            // next read sees it. (Or a state no split makes: wait, bounded.)
            _ => Ok(Follow::Wait),
        }
    }
}

/// A partition's bounds, split and merge, as one read found them.
#[derive(Debug, Default)]
pub(crate) struct PartitionState {
    pub bounds: Option<PartitionBounds>,
    pub reshard: Option<Reshard>,
    pub merge: Option<Merge>,
}

impl PartitionState {
    /// Whether the partition serves reads of `expected` (the range a table gives it): its
    /// range is that, or it is that range's split not yet published (its copy is then whole),
    /// or it is the partition absorbing a neighbour in a merge and `expected` its own former
    /// range (whose records a merge never moves). The absorbed side of a merge, once fenced,
    /// serves nothing: after the commit its frozen copy may be older than the merged partition.
    pub(crate) fn serves(&self, expected: &PartitionBounds) -> bool {
        if self.bounds.as_ref() == Some(expected) {
            return true;
        }
        if self.merge.as_ref().is_some_and(|m| m.into_was == *expected) {
            return true;
        }
        matches!(&self.reshard, Some(r) if r.was == *expected
            && matches!(r.state, ReshardState::Copying | ReshardState::Fenced | ReshardState::Committed))
    }

    pub(crate) async fn read(client: &Client, object: &str) -> Result<PartitionState, GatewayError> {
        Ok(read_with_state(client, object, Vec::new()).await?.0)
    }

    /// The state from the first three outputs of a request that began with [`state_ops`].
    pub(crate) fn from_outputs(out: &mut impl Iterator<Item = OpOutput>) -> Result<PartitionState, GatewayError> {
        let bounds = match out.next() {
            Some(OpOutput::Xattr(Some(v))) => Some(layout::decode(&v, "partition bounds")?),
            _ => None,
        };
        let reshard = match out.next() {
            Some(OpOutput::Xattr(Some(v))) => Some(layout::decode(&v, "partition split")?),
            _ => None,
        };
        let merge = match out.next() {
            Some(OpOutput::Xattr(Some(v))) => Some(layout::decode(&v, "partition merge")?),
            _ => None,
        };
        Ok(PartitionState { bounds, reshard, merge })
    }
}

/// The reads that fetch a partition's state, first in a request.
pub(crate) fn state_ops() -> Vec<ObjOp> {
    vec![
        ObjOp::GetXattr { name: BOUNDS_XATTR.into() },
        ObjOp::GetXattr { name: RESHARD_XATTR.into() },
        ObjOp::GetXattr { name: MERGE_XATTR.into() },
    ]
}

/// Runs `ops` on `object` after reading its state in the same request (so both are of one
/// moment); `None` outputs when the object does not exist.
async fn read_with_state(
    client: &Client,
    object: &str,
    ops: Vec<ObjOp>,
) -> Result<(PartitionState, Option<Vec<OpOutput>>), GatewayError> {
    let mut all = state_ops();
    all.extend(ops);
    match client.op(INDEX_POOL, object, all, Vec::new()).await {
        Ok(r) => {
            let mut out = r.outputs.into_iter();
            let state = PartitionState::from_outputs(&mut out)?;
            Ok((state, Some(out.collect())))
        }
        Err(e) if e.is_not_found() => Ok((PartitionState::default(), None)),
        Err(e) => Err(e.into()),
    }
}

impl Part<'_> {
    /// The value of omap key `key` (`None`: no such key or partition).
    pub(crate) async fn omap_get(&self, client: &Client, key: &[u8]) -> Result<Option<Vec<u8>>, GatewayError> {
        Ok(self.omap_get_many(client, vec![key.to_vec()]).await?.pop().flatten())
    }

    /// The values of omap keys `keys`, in the order asked.
    pub(crate) async fn omap_get_many(
        &self,
        client: &Client,
        keys: Vec<Vec<u8>>,
    ) -> Result<Vec<Option<Vec<u8>>>, GatewayError> {
        match self.read(client, vec![ObjOp::OmapGet { keys: keys.clone() }]).await? {
            Some(outputs) => rados::omap_values(&keys, outputs.into_iter().next()),
            None => Ok(vec![None; keys.len()]),
        }
    }

    /// Up to `max` omap entries after `after` (exclusive), in key order.
    pub(crate) async fn omap_list(
        &self,
        client: &Client,
        after: Option<Vec<u8>>,
        max: u32,
    ) -> Result<Vec<(Vec<u8>, Vec<u8>)>, GatewayError> {
        match self.read(client, vec![ObjOp::OmapList { after, max }]).await? {
            Some(outputs) => rados::omap_entries(outputs.into_iter().next()),
            None => Ok(Vec::new()),
        }
    }

    /// Every omap entry whose key starts with `prefix`, up to `limit` of them.
    pub(crate) async fn omap_prefix(
        &self,
        client: &Client,
        prefix: &[u8],
        limit: usize,
    ) -> Result<Vec<(Vec<u8>, Vec<u8>)>, GatewayError> {
        rados::collect_prefix(prefix, limit, |after, max| self.omap_list(client, Some(after), max)).await
    }
}

/// Reads one kind of key-ordered records (entries, versions, uploads: omap prefix `prefix`)
/// across a bucket's partitions in key order, batch by batch, each partition only within its
/// range and each batch checked against the partition's state, following splits.
pub(crate) struct RangeReader<'a> {
    bucket: &'a BucketRecord,
    fresh: Option<Arc<BucketRecord>>,
    prefix: u8,
    /// The exclusive omap cursor: records above it are read next.
    cursor: Vec<u8>,
    /// The next key is at least this one (set when a partition is exhausted: the cursor alone
    /// cannot say so, since no key sorts between `just_below(end)` and `end`).
    floor: Option<String>,
    done: bool,
}

impl<'a> RangeReader<'a> {
    /// Reads records of kind `prefix` above omap cursor `after` (which starts with `prefix`).
    pub(crate) fn new(bucket: &'a BucketRecord, prefix: u8, after: Vec<u8>) -> RangeReader<'a> {
        RangeReader { bucket, fresh: None, prefix, cursor: after, floor: None, done: false }
    }

    /// Moves the cursor to `after`: the next batch starts above it (the rest of the last batch
    /// is not read again when `after` is past it, and is when it is before).
    pub(crate) fn set_cursor(&mut self, after: Vec<u8>) {
        self.cursor = after;
        self.floor = None;
        self.done = false;
    }

    /// The next records (at most `max`, at least one unless the range is exhausted: `None`).
    pub(crate) async fn next_batch(
        &mut self,
        client: &Client,
        max: u32,
    ) -> Result<Option<Vec<(Vec<u8>, Vec<u8>)>>, GatewayError> {
        let mut waits = 0u64;
        let mut follows = 0usize;
        while !self.done {
            let table: &BucketRecord = self.fresh.as_deref().unwrap_or(self.bucket);
            // The partition holding the first key above the cursor.
            let at = match &self.floor {
                Some(f) => table.partition_index(f),
                None if self.cursor.first().is_none_or(|b| *b < self.prefix) => 0,
                None => {
                    let probe = self.cursor.get(1..).unwrap_or_default();
                    table.partitions.partition_point(|p| p.start.as_bytes() <= probe).saturating_sub(1)
                }
            };
            let bounds = table.bounds_at(at);
            let object = partition_object(table.id, table.partitions[at].id);
            let floor = crate::index::just_below(&prefixed(self.prefix, &bounds.start));
            if floor > self.cursor {
                self.cursor = floor;
            }
            let ops = vec![ObjOp::OmapList { after: Some(self.cursor.clone()), max }];
            let (state, outputs) = read_with_state(client, &object, ops).await?;
            // A partition missing under this table was merged away since the table was read:
            // look again, as for one that does not serve this range.
            if outputs.is_none() || !state.serves(&bounds) {
                follows += 1;
                if follows > FOLLOW_ATTEMPTS {
                    return Err(GatewayError::Conflict(format!("the index partition {object} stayed mid-split")));
                }
                let fresh =
                    match rados::read_all(client, layout::META_POOL, &layout::bucket_object(&table.name)).await? {
                        Some(bytes) => layout::decode::<BucketRecord>(&bytes, "bucket record")?,
                        None => return Err(GatewayError::NoSuchBucket(table.name.clone())),
                    };
                if fresh.id != table.id {
                    return Err(GatewayError::NoSuchBucket(table.name.clone()));
                }
                let unchanged = fresh.partitions == table.partitions;
                if unchanged && outputs.is_none() {
                    // Named by the current table and missing: nothing to read (never seen; a
                    // table names only partitions that exist until its bucket is deleted).
                    tracing::warn!(partition = %object, "an index partition the bucket's table names is missing");
                    self.fresh = Some(Arc::new(fresh));
                } else {
                    if unchanged {
                        // A merge fenced here by a merger that died is given up (or finished)
                        // by whoever finds it past its deadline; readers too, not only writers.
                        if let Some(m) = &state.merge {
                            merge::tend(client, &fresh.name, fresh.id, table.partitions[at].id, m).await?;
                        }
                        waits += 1;
                        tokio::time::sleep(Duration::from_millis((waits * 5).min(WAIT_MAX_MS))).await;
                    }
                    self.fresh = Some(Arc::new(fresh));
                    continue;
                }
            }
            let batch = match outputs {
                Some(o) => rados::omap_entries(o.into_iter().next())?,
                None => Vec::new(),
            };
            let whole = batch.len() == max as usize;
            let end = bounds.end.as_ref().map(|e| prefixed(self.prefix, e));
            let mut out = Vec::with_capacity(batch.len());
            let mut exhausted = !whole;
            for (k, v) in batch {
                if k.first() != Some(&self.prefix) || end.as_ref().is_some_and(|e| k >= *e) {
                    exhausted = true;
                    break;
                }
                self.cursor = k.clone();
                out.push((k, v));
            }
            if exhausted {
                match &bounds.end {
                    Some(e) => {
                        self.cursor = crate::index::just_below(&prefixed(self.prefix, e));
                        self.floor = Some(e.clone());
                    }
                    None => self.done = true,
                }
            } else if !out.is_empty() {
                self.floor = None;
            }
            if !out.is_empty() {
                return Ok(Some(out));
            }
        }
        Ok(None)
    }
}

/// `prefix` then `key`'s bytes: an omap key.
fn prefixed(prefix: u8, key: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(1 + key.len());
    k.push(prefix);
    k.extend_from_slice(key.as_bytes());
    k
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bounds(start: &str, end: Option<&str>) -> PartitionBounds {
        PartitionBounds { start: start.into(), end: end.map(str::to_string) }
    }

    #[test]
    fn a_partition_mid_split_serves_reads_of_its_former_range_until_published() {
        let was = bounds("", None);
        let cut = bounds("", Some("m"));
        let mut state = PartitionState { bounds: Some(cut.clone()), reshard: None, merge: None };
        assert!(state.serves(&cut));
        assert!(!state.serves(&was), "a cut partition without a split record serves only its new range");
        for (s, serves) in [
            (ReshardState::Copying, true),
            (ReshardState::Fenced, true),
            (ReshardState::Committed, true),
            (ReshardState::Published, false),
        ] {
            state.reshard = Some(Reshard { cut: "m".into(), new_id: 7, was: was.clone(), state: s, since_ns: 0 });
            assert_eq!(state.serves(&was), serves, "{s:?}");
            assert!(state.serves(&cut));
        }
        assert!(!state.serves(&bounds("a", None)), "another range is never served");
    }
}
