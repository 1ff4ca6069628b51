//! Deferred commits: transactions committed with [`Durability::Deferred`] that readers already
//! see but that are neither on the device nor in the KV store yet.
//!
//! Why: on a disk-backed OSD every small replicated write was its own commit — one io_uring
//! submission for its data, another for its log record, a wait for both (each submission a
//! virtio notification, each wait a sleep and a wake-up), then one KV batch — although the OSD
//! acknowledges none of them before the `sync` that ends its batch of events. Staged, a group of
//! them costs one submission, one wait and one KV batch at that flush point.
//!
//! The group is written at the next flush point: [`ObjectStore::sync`] (then durable),
//! [`ObjectStore::settle`] (then as durable as [`Durability::Batch`]), any other commit, a
//! checkpoint, or when it reaches its bounds ([`STAGED_MAX_TXNS`], [`STAGED_MAX_BYTES`]). Its
//! data and log records go to the device first, all in one submission; only once every write
//! has completed does the merged metadata batch go to the KV store, so the KV store never
//! refers to data that is not on the device, whatever moment the process dies at. A crash
//! before then loses the staged transactions, never an earlier one: recovery replays log
//! records in order and stops at the first that is missing or whose data did not arrive.
//!
//! [`Durability::Deferred`]: crate::Durability::Deferred
//! [`Durability::Batch`]: crate::Durability::Batch
//! [`ObjectStore::sync`]: crate::ObjectStore::sync
//! [`ObjectStore::settle`]: crate::ObjectStore::settle

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::Arc;

use shoal_util::AlignedBuf;

use super::device::BLOCK_BYTES;
use super::kv::{ALL_KEYSPACES, Batch, Ks, KvRead};
use super::txn::DirectData;
use crate::error::Result;

/// Transactions staged at most before the group is written: bounds the device submission (each
/// transaction is a log record plus its data pieces, and the ring takes 256 entries at once).
pub const STAGED_MAX_TXNS: usize = 64;
/// Data staged at most, in bytes: bounds the memory held by staged buffers.
pub const STAGED_MAX_BYTES: u64 = 8 << 20;
/// Transactions writing more data than this are not staged but committed at once: for them the
/// per-commit costs staging saves are small next to the data, and their checksums are computed
/// while their data is already on its way to the device.
pub const STAGE_TXN_MAX_BYTES: u64 = 256 << 10;

/// Metadata changes by keyspace (indexed by `Ks as usize`, as a plan's overlay), so that
/// lookups borrow the caller's key; `None` is a deletion.
pub type Changes = [BTreeMap<Vec<u8>, Option<Vec<u8>>>; ALL_KEYSPACES.len()];

/// The staged group.
#[derive(Default)]
pub struct Staged {
    /// Metadata of every staged transaction merged in commit order (a later change to a key
    /// replaces an earlier one), ending with the last one's `applied_seq`: what the KV store gets
    /// when the group is written, and what readers see above it until then.
    changes: Changes,
    /// Data bound for newly allocated blocks, by device offset. Staged regions never overlap: a
    /// block freed by a staged transaction becomes reusable only after a flush, which writes the
    /// group first.
    data: BTreeMap<u64, DirectData>,
    /// The log record of each staged transaction, with its offset in the log region.
    records: Vec<(u64, AlignedBuf)>,
    data_bytes: u64,
    /// Blocks written in place (decision 0040) whose new contents are not on the device yet, by
    /// device offset, with the sequence number of the transaction that wrote them: the newest
    /// contents of each block, newer than the device and than any staged `data` there. Unlike
    /// the rest of the group, these outlive [`Staged::take`]: they are written to their place
    /// only once their log record is known durable (see `Engine::apply_inplace`). Kept here so
    /// that readers, who hold this group's lock from before their KV snapshot to the end of
    /// their read, see a block's new contents exactly when they see its new checksum.
    inplace: BTreeMap<u64, (u64, Arc<AlignedBuf>)>,
}

impl Staged {
    /// Whether nothing is staged.
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// Whether one more transaction writing `data_bytes` stays within the bounds.
    pub fn has_room(&self, data_bytes: u64) -> bool {
        self.records.len() < STAGED_MAX_TXNS && self.data_bytes + data_bytes <= STAGED_MAX_BYTES
    }

    /// Adds a committed transaction: its metadata batch, its new data and its log record.
    pub fn push(&mut self, batch: Batch, direct: Vec<(u64, DirectData)>, record: (u64, AlignedBuf)) {
        debug_assert!(self.has_room(direct.iter().map(|(_, d)| d.len() as u64).sum()), "staged past the bounds");
        for ((ks, key), value) in batch.ops {
            self.changes[ks as usize].insert(key, value);
        }
        for (phys, data) in direct {
            debug_assert!(
                self.data
                    .range(..phys + data.len() as u64)
                    .next_back()
                    .is_none_or(|(at, d)| at + d.len() as u64 <= phys),
                "staged data at {phys} overlaps earlier staged data"
            );
            self.data_bytes += data.len() as u64;
            self.data.insert(phys, data);
        }
        self.records.push(record);
    }

    /// The metadata readers see above the KV store.
    pub fn changes(&self) -> &Changes {
        &self.changes
    }

    /// A copy of the block at device offset `phys` if it is not on the device yet: written in
    /// place and not applied, or staged.
    pub fn block(&self, phys: u64) -> Option<Arc<Vec<u8>>> {
        if let Some((_, data)) = self.inplace.get(&phys) {
            return Some(Arc::new(data.to_vec()));
        }
        let (at, data) = self.data.range(..=phys).next_back()?;
        let from = usize::try_from(phys - at).ok()?;
        let to = from + BLOCK_BYTES as usize;
        (to <= data.len()).then(|| Arc::new(data[from..to].to_vec()))
    }

    /// Records the in-place writes of committed transaction `seq`: `(device offset, whole
    /// blocks)` in the order written. A block written again replaces its earlier contents.
    pub fn add_inplace(&mut self, seq: u64, writes: &[(u64, &[u8])]) {
        let block = BLOCK_BYTES as usize;
        for (at, data) in writes {
            debug_assert!(at.is_multiple_of(BLOCK_BYTES) && data.len().is_multiple_of(block));
            for (i, chunk) in data.chunks_exact(block).enumerate() {
                let copy = Arc::new(AlignedBuf::copy_padded(chunk, block));
                self.inplace.insert(at + (i * block) as u64, (seq, copy));
            }
        }
    }

    /// Number of in-place blocks not applied yet, and how many of them were written by
    /// transactions up to `upto_seq`.
    pub fn inplace_counts(&self, upto_seq: u64) -> (usize, usize) {
        (self.inplace.len(), self.inplace.values().filter(|(seq, _)| *seq <= upto_seq).count())
    }

    /// The in-place blocks written by transactions up to `upto_seq`, at most `limit`, by
    /// device offset.
    pub fn inplace_ready(&self, upto_seq: u64, limit: usize) -> Vec<(u64, Arc<AlignedBuf>)> {
        self.inplace
            .iter()
            .filter(|(_, (seq, _))| *seq <= upto_seq)
            .take(limit)
            .map(|(at, (_, data))| (*at, Arc::clone(data)))
            .collect()
    }

    /// Forgets in-place blocks once their contents are on the device.
    pub fn inplace_applied(&mut self, applied: &[(u64, Arc<AlignedBuf>)]) {
        for (at, data) in applied {
            // Only the contents that were written: a newer write of the block stays.
            if self.inplace.get(at).is_some_and(|(_, d)| Arc::ptr_eq(d, data)) {
                self.inplace.remove(at);
            }
        }
    }

    /// Every device write of the group: data first, then the log records.
    pub fn writes(&self) -> Vec<(u64, &[u8])> {
        let data = self.data.iter().map(|(phys, d)| (*phys, &d[..]));
        data.chain(self.records.iter().map(|(at, r)| (*at, &r[..]))).collect()
    }

    /// Empties the group (but for the in-place blocks), returning its merged metadata batch and
    /// its data buffers (for reuse).
    pub fn take(&mut self) -> (Batch, std::collections::btree_map::IntoValues<u64, DirectData>) {
        let mut batch = Batch::default();
        for (ks, changes) in ALL_KEYSPACES.into_iter().zip(std::mem::take(&mut self.changes)) {
            batch.ops.extend(changes.into_iter().map(|(key, value)| ((ks, key), value)));
        }
        let data = std::mem::take(&mut self.data);
        self.records.clear();
        self.data_bytes = 0;
        (batch, data.into_values())
    }
}

/// A KV view with staged metadata above it: what a reader or a new transaction's plan sees.
pub struct Overlaid<'a, R: KvRead> {
    inner: &'a R,
    above: Option<&'a Changes>,
}

impl<'a, R: KvRead> Overlaid<'a, R> {
    /// `inner` with `above` over it (nothing over it when `None`).
    pub fn new(inner: &'a R, above: Option<&'a Changes>) -> Self {
        Self { inner, above }
    }

    /// The changes above keyspace `ks`, if any.
    fn above(&self, ks: Ks) -> Option<&'a BTreeMap<Vec<u8>, Option<Vec<u8>>>> {
        self.above.map(|a| &a[ks as usize]).filter(|m| !m.is_empty())
    }
}

impl<R: KvRead> KvRead for Overlaid<'_, R> {
    fn prefers_point_reads(&self) -> bool {
        self.inner.prefers_point_reads()
    }

    fn get(&self, ks: Ks, key: &[u8]) -> Result<Option<Vec<u8>>> {
        match self.above(ks).and_then(|m| m.get(key)) {
            Some(v) => Ok(v.clone()),
            None => self.inner.get(ks, key),
        }
    }

    /// Merges the two ordered streams: an entry above replaces (or, when `None`, hides) the
    /// entry below with the same key.
    fn scan(&self, ks: Ks, lo: &[u8], hi: Option<&[u8]>, visit: &mut dyn FnMut(&[u8], &[u8]) -> bool) -> Result<()> {
        let Some(above) = self.above(ks) else { return self.inner.scan(ks, lo, hi, visit) };
        if hi.is_some_and(|h| h <= lo) {
            return Ok(()); // empty (and `range` refuses an inverted range)
        }
        let upper = hi.map_or(Bound::Unbounded, Bound::Excluded);
        let mut above = above.range::<[u8], _>((Bound::Included(lo), upper)).peekable();
        let mut stopped = false;
        self.inner.scan(ks, lo, hi, &mut |k, v| {
            while let Some((ak, av)) = above.peek() {
                if ak.as_slice() > k {
                    break;
                }
                let same = ak.as_slice() == k;
                if let Some(av) = av
                    && !visit(ak, av)
                {
                    stopped = true;
                    return false;
                }
                above.next();
                if same {
                    return true; // the entry above decided about this key
                }
            }
            if !visit(k, v) {
                stopped = true;
                return false;
            }
            true
        })?;
        if !stopped {
            for (ak, av) in above {
                if let Some(av) = av
                    && !visit(ak, av)
                {
                    break;
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::kv::{Kv, MemKv};

    fn collect<R: KvRead>(view: &R, ks: Ks, lo: &[u8], hi: Option<&[u8]>, limit: usize) -> Vec<(Vec<u8>, Vec<u8>)> {
        let mut out = Vec::new();
        view.scan(ks, lo, hi, &mut |k, v| {
            out.push((k.to_vec(), v.to_vec()));
            out.len() < limit
        })
        .unwrap();
        out
    }

    proptest::proptest! {
        /// A scan through the overlay returns exactly what a scan of the KV store returns after
        /// the staged batch was committed to it, for any range and any early stop.
        #[test]
        fn overlaid_scans_and_gets_match_the_committed_store(
            below in proptest::collection::vec((0u8..3, 0u8..24, proptest::num::u8::ANY), 0..30),
            above in proptest::collection::vec((0u8..3, 0u8..24, proptest::option::of(proptest::num::u8::ANY)), 0..30),
            lo in 0u8..26,
            hi in proptest::option::of(0u8..26),
            limit in 1usize..40,
        ) {
            let ks_of = |i: u8| super::super::kv::ALL_KEYSPACES[i as usize];
            let base = MemKv::default();
            let mut b = Batch::default();
            for (ks, k, v) in &below {
                b.put(ks_of(*ks), vec![*k], vec![*v]);
            }
            base.commit(b, false).unwrap();
            let merged = MemKv::default();
            let mut b = Batch::default();
            for (ks, k, v) in &below {
                b.put(ks_of(*ks), vec![*k], vec![*v]);
            }
            merged.commit(b, false).unwrap();
            let mut staged = Staged::default();
            let mut b = Batch::default();
            for (ks, k, v) in &above {
                match v {
                    Some(v) => b.put(ks_of(*ks), vec![*k], vec![*v]),
                    None => b.delete(ks_of(*ks), vec![*k]),
                }
            }
            merged.commit(b.clone(), false).unwrap();
            staged.push(b, Vec::new(), (0, AlignedBuf::zeroed(4096)));
            let view = Overlaid::new(&base, Some(staged.changes()));
            for ks in 0..3u8 {
                let hi_key = hi.map(|h| vec![h]);
                proptest::prop_assert_eq!(
                    collect(&view, ks_of(ks), &[lo], hi_key.as_deref(), limit),
                    collect(&merged, ks_of(ks), &[lo], hi_key.as_deref(), limit)
                );
                for k in 0..24u8 {
                    proptest::prop_assert_eq!(view.get(ks_of(ks), &[k]).unwrap(), merged.get(ks_of(ks), &[k]).unwrap());
                }
            }
        }
    }

    #[test]
    fn staged_blocks_are_found_by_any_offset_inside_them() {
        let mut staged = Staged::default();
        let mut buf = AlignedBuf::zeroed(3 * BLOCK_BYTES as usize);
        for (i, x) in buf.iter_mut().enumerate() {
            *x = (i / BLOCK_BYTES as usize) as u8 + 1;
        }
        staged.push(Batch::default(), vec![(8192, DirectData::Owned(buf))], (0, AlignedBuf::zeroed(4096)));
        assert!(staged.block(4096).is_none());
        assert_eq!(staged.block(8192).unwrap()[0], 1);
        assert_eq!(staged.block(8192 + 2 * 4096).unwrap()[4095], 3);
        assert!(staged.block(8192 + 3 * 4096).is_none());
        assert_eq!(staged.writes().len(), 2);
        let (_, data) = staged.take();
        assert_eq!(data.count(), 1);
        assert!(staged.is_empty() && staged.block(8192).is_none());
    }
}
