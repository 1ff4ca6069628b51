//! Purging deleted pools and stray PG copies: an OSD removes the local collections of pools the
//! map no longer has (and of PGs clean elsewhere), a bounded number of objects per tick (fewer
//! while clients are busy), so that deleting a large pool never holds the worker (and the client
//! operations queued behind it) for long. Run when a map removes a pool and when the OSD starts
//! (for pools deleted while it was down).

use shoal_store::{Durability, StoreError};

use shoal_map::PgId;

use super::OsdCore;

/// Objects removed per tick from the collections of deleted pools, so that purging a large pool
/// never holds the worker (and the client operations queued behind it) for long.
pub const PURGE_OBJECTS_PER_TICK: usize = 2048;
/// The same while clients wrote to this OSD since the last tick: removing 2048 objects held a
/// disk-backed OSD's worker for 100-300 ms, a stall every client operation queued behind it
/// paid (measured while an `osd out` drained the OSD's stray copies under client load).
pub const PURGE_OBJECTS_PER_TICK_BUSY: usize = 128;

impl OsdCore {
    /// Queues every local collection of a pool the map says was deleted: its id was handed out
    /// (below `next_pool_id`) and the pool is gone. A collection of a pool newer than this OSD's
    /// map is left alone: the map is merely behind.
    pub(super) fn queue_orphans(&mut self) {
        let colls = match self.store.list_collections() {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(error = %e, "listing collections to purge deleted pools failed; retried at the next pool removal or OSD start");
                return;
            }
        };
        for coll in colls {
            let Some(pool) = collection_pool(&coll) else { continue };
            if pool < self.map.next_pool_id && !self.map.pools.contains_key(&pool) && !self.purge.contains(&coll) {
                self.purge.push_back(coll);
            }
        }
        let map = &self.map;
        self.logs.retain(|pg, _| map.pools.contains_key(&pg.pool) || pg.pool >= map.next_pool_id);
    }

    /// Removes up to `budget` objects of deleted pools, then each emptied collection.
    pub(super) fn purge_step(&mut self, budget: usize) {
        let mut left = budget;
        while left > 0 {
            let Some(coll) = self.purge.front().cloned() else { return };
            let page = match self.store.list_objects(&coll, "", None, left) {
                Ok(p) => p,
                Err(StoreError::NoSuchCollection(_)) => {
                    self.purge.pop_front();
                    self.collections.remove(&coll);
                    continue;
                }
                Err(e) => {
                    tracing::warn!(collection = %coll, error = %e, "purging a deleted pool failed; retried at the next pool removal or OSD start");
                    self.purge.pop_front();
                    return;
                }
            };
            let mut txn = shoal_store::Transaction::new();
            for obj in &page.objects {
                txn.remove(&coll, obj);
            }
            let emptied = page.next.is_none();
            if emptied {
                txn.remove_collection(&coll);
            }
            if let Err(e) = self.store.commit(txn, Durability::Batch) {
                tracing::warn!(collection = %coll, error = %e, "purging a deleted pool failed; retried at the next pool removal or OSD start");
                self.purge.pop_front();
                return;
            }
            left = left.saturating_sub(page.objects.len().max(1));
            if emptied {
                self.purge.pop_front();
                self.collections.remove(&coll);
            }
        }
    }

    /// Collections of deleted pools still queued for purging.
    #[must_use]
    pub fn purge_backlog(&self) -> usize {
        self.purge.len()
    }
}

/// The pool id of a PG collection (`pg.POOL.SEED`) or PG log collection (`pglog.POOL.SEED`).
fn collection_pool(coll: &str) -> Option<u32> {
    let rest = coll.strip_prefix("pg.").or_else(|| coll.strip_prefix("pglog."))?;
    rest.parse::<PgId>().ok().map(|pg| pg.pool)
}
