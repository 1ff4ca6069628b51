//! A bounded cache of a disk device's recently read small blocks, keyed by device offset.
//!
//! A `block` store reads with direct I/O, so without this every small read is a device request:
//! on a virtual disk a VM exit to submit it and an interrupt and a context switch to finish it,
//! 80 µs of an OSD's CPU per 4 KiB S3 GET (docs/BENCHMARKS.md). BlueStore keeps a buffer cache
//! for the same reason. This one sits in the device ([`super::device::FileDevice`]) because the
//! engine never overwrites a block in place while it is allocated (copy-on-write), and every write
//! to the device passes through that type: invalidating a range before it is written keeps the
//! cache exactly coherent with the medium without knowing anything of objects.
//!
//! Small reads (at most [`CACHED_IO_BYTES`]) are cached block by block. Large reads (up to
//! [`LARGE_IO_BYTES`], an S3 object's 4 MiB chunk) are cached whole, as one buffer per read, in a
//! budget of their own, so that a stream of large reads never pushes small hot blocks out, and a
//! hit costs one lookup and one copy rather than one per block. A large read hits only a cached
//! read of exactly its range (a chunk is read the same way every time). BlueStore caches what it
//! reads too; without this, repeated large reads of a hot object went to a disk that this VM caps
//! near 1.5 GB/s (docs/BENCHMARKS.md). Writes never fill either part, they invalidate. Eviction
//! is FIFO with a second chance for entries read since they entered. Deep scrub, fsck and
//! recovery checks read around it ([`super::device::Device::read_uncached`]): they exist to look
//! at the medium.
//!
//! Freed blocks are discarded ([`super::device::Device::discard`]), which invalidates them too:
//! a block is forgotten when the engine frees it and again when it is next written, so either
//! alone keeps a reused block from being served with its old bytes (the store's corruption
//! tests check that with both removed they are).
//!
//! A read that missed fills the cache after its device read only if no write or discard of an
//! overlapping range began in between (the read may hold the old bytes); the last
//! [`RECENT_INVALIDATIONS`] invalidations are remembered to decide that, and a read older than
//! all of them does not fill.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Mutex;

use super::device::BLOCK_BYTES;

/// Reads of at most this many bytes are served from and fill the cache block by block.
pub const CACHED_IO_BYTES: usize = 64 << 10;

/// Reads larger than [`CACHED_IO_BYTES`] and at most this many bytes are cached whole, in the
/// large-read budget.
pub const LARGE_IO_BYTES: usize = 4 << 20;

/// Invalidations remembered for deciding whether a missed read may fill.
const RECENT_INVALIDATIONS: usize = 256;

/// The cache of one device: small reads' blocks and whole large reads, each part within its own
/// byte budget.
pub struct BlockCache {
    /// The budgets, outside the lock: a read the cache does not serve never takes it.
    small_capacity_bytes: usize,
    large_capacity_bytes: usize,
    state: Mutex<State>,
}

struct State {
    /// Cached blocks of small reads by block number (device offset / BLOCK_BYTES).
    small: Fifo,
    /// Whole large reads by first block number.
    large: Fifo,
    /// Invalidations so far.
    epoch: u64,
    /// The latest invalidations: (epoch after it, first block, end block).
    recent: VecDeque<(u64, u64, u64)>,
}

struct Cached {
    /// Shared: a large read hands it out by reference ([`BlockCache::read_large`]).
    data: bytes::Bytes,
    /// Read since it entered or since its last second chance.
    referenced: bool,
}

/// Buffers by first block number, evicted first in, first out with a second chance for those
/// read since they entered. Invariants: `bytes` is the sum of the buffers' lengths, and at most
/// the budget after every insertion; `order` names every entry (and maybe entries since removed,
/// skipped when popped).
#[derive(Default)]
struct Fifo {
    entries: BTreeMap<u64, Cached>,
    order: VecDeque<u64>,
    bytes: usize,
}

impl Fifo {
    /// Caches `data` at block `at` (replacing what was there), then evicts down to
    /// `capacity_bytes`.
    fn insert(&mut self, at: u64, data: bytes::Bytes, capacity_bytes: usize) {
        self.bytes += data.len();
        match self.entries.insert(at, Cached { data, referenced: false }) {
            Some(old) => self.bytes -= old.data.len(),
            None => self.order.push_back(at),
        }
        self.evict(capacity_bytes);
    }

    fn remove(&mut self, at: u64) {
        if let Some(c) = self.entries.remove(&at) {
            self.bytes -= c.data.len();
        }
    }

    /// Evicts down to `capacity_bytes`: the oldest entry not read since it entered (or since its
    /// last second chance) goes first.
    fn evict(&mut self, capacity_bytes: usize) {
        // Each entry popped is dropped, skipped (already gone) or given its one second chance,
        // so two passes over the queue always bring the bytes down.
        let mut passes = 2 * self.order.len() + 1;
        while self.bytes > capacity_bytes && passes > 0 {
            passes -= 1;
            let Some(at) = self.order.pop_front() else { break };
            match self.entries.get_mut(&at) {
                Some(c) if c.referenced => {
                    c.referenced = false;
                    self.order.push_back(at);
                }
                Some(_) => self.remove(at),
                None => {}
            }
        }
        // Invalidations leave stale names behind: compacted once they are most of the queue.
        if self.order.len() > 2 * self.entries.len() + 16 {
            let Fifo { entries, order, .. } = self;
            order.retain(|at| entries.contains_key(at));
        }
        // (That `bytes` is the buffers' sum is checked by the tests: summing here would make every
        // insertion cost the whole part in debug builds.)
        debug_assert!(self.bytes <= capacity_bytes, "the cache holds more than its budget");
    }
}

/// What a read that missed must hand back to [`BlockCache::fill`]: the epoch it began at.
#[derive(Clone, Copy, Debug)]
pub struct FillTicket(u64);

impl BlockCache {
    /// A cache of at most `capacity_bytes` of small reads' blocks (rounded down to whole blocks)
    /// and `large_capacity_bytes` of large reads; 0 leaves that kind of read uncached.
    pub fn new(capacity_bytes: u64, large_capacity_bytes: u64) -> BlockCache {
        let bytes = |n: u64| usize::try_from(n).unwrap_or(usize::MAX);
        let recent = VecDeque::with_capacity(RECENT_INVALIDATIONS);
        BlockCache {
            // Whole blocks only (a partial one could never be filled).
            small_capacity_bytes: bytes(capacity_bytes / BLOCK_BYTES * BLOCK_BYTES),
            large_capacity_bytes: bytes(large_capacity_bytes),
            state: Mutex::new(State { small: Fifo::default(), large: Fifo::default(), epoch: 0, recent }),
        }
    }

    /// Whether a read of `len_bytes` goes through the cache at all.
    #[must_use]
    pub fn serves(&self, len_bytes: usize) -> bool {
        if len_bytes <= CACHED_IO_BYTES {
            self.small_capacity_bytes > 0
        } else {
            len_bytes <= LARGE_IO_BYTES && self.large_capacity_bytes > 0
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // The state is consistent between statements that can panic, so a poisoned lock's data
        // is still usable.
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Fills `buf` (whole blocks at block-aligned `offset`) if every block is cached: returns
    /// `Ok(())`; otherwise returns the ticket to fill with once the caller has read the device.
    pub fn read(&self, buf: &mut [u8], offset: u64) -> Result<(), FillTicket> {
        let (first, n) = blocks_of(offset, buf.len());
        let mut st = self.lock();
        if buf.len() > CACHED_IO_BYTES {
            return match st.large.entries.get_mut(&first) {
                Some(cached) if cached.data.len() == buf.len() => {
                    buf.copy_from_slice(&cached.data);
                    cached.referenced = true;
                    Ok(())
                }
                _ => Err(FillTicket(st.epoch)),
            };
        }
        if (first..first + n).any(|b| !st.small.entries.contains_key(&b)) {
            return Err(FillTicket(st.epoch));
        }
        let block = BLOCK_BYTES as usize;
        for (i, dst) in buf.chunks_exact_mut(block).enumerate() {
            let cached =
                st.small.entries.get_mut(&(first + i as u64)).expect("checked present above, under the same lock");
            dst.copy_from_slice(&cached.data);
            cached.referenced = true;
        }
        Ok(())
    }

    /// The cached large read of exactly `[offset, offset + len_bytes)`, shared, not copied;
    /// otherwise the ticket to fill with ([`BlockCache::fill_large`]) once the caller has read the
    /// device. For reads longer than [`CACHED_IO_BYTES`] that the cache serves.
    pub fn read_large(&self, offset: u64, len_bytes: usize) -> Result<bytes::Bytes, FillTicket> {
        debug_assert!(len_bytes > CACHED_IO_BYTES && self.serves(len_bytes), "not a large read the cache serves");
        let (first, _) = blocks_of(offset, len_bytes);
        let mut st = self.lock();
        match st.large.entries.get_mut(&first) {
            Some(cached) if cached.data.len() == len_bytes => {
                cached.referenced = true;
                Ok(cached.data.clone())
            }
            _ => Err(FillTicket(st.epoch)),
        }
    }

    /// Caches `buf`, just read from the device at `offset`, unless a write or discard that
    /// overlaps it began after `ticket` was taken (or too long ago to tell).
    pub fn fill(&self, ticket: FillTicket, buf: &[u8], offset: u64) {
        if !self.serves(buf.len()) {
            return;
        }
        let (first, n) = blocks_of(offset, buf.len());
        let mut st = self.lock();
        if !may_fill(&st, ticket, first, first + n) {
            return;
        }
        if buf.len() > CACHED_IO_BYTES {
            // A read of another length at the same place replaces the one cached there; a read
            // overlapping another at a different place is cached beside it (invalidation finds
            // both).
            st.large.insert(first, bytes::Bytes::copy_from_slice(buf), self.large_capacity_bytes);
            return;
        }
        for (i, src) in buf.chunks_exact(BLOCK_BYTES as usize).enumerate() {
            st.small.insert(first + i as u64, bytes::Bytes::copy_from_slice(src), self.small_capacity_bytes);
        }
    }

    /// [`BlockCache::fill`] for a large read whose buffer is shared with its reader: cached by
    /// reference, without a copy.
    pub fn fill_large(&self, ticket: FillTicket, data: bytes::Bytes, offset: u64) {
        debug_assert!(data.len() > CACHED_IO_BYTES, "not a large read");
        if !self.serves(data.len()) {
            return;
        }
        let (first, n) = blocks_of(offset, data.len());
        let mut st = self.lock();
        if may_fill(&st, ticket, first, first + n) {
            st.large.insert(first, data, self.large_capacity_bytes);
        }
    }

    /// Forgets every cached block in `[offset, offset + len)`: called before the range is
    /// written or discarded.
    pub fn invalidate(&self, offset: u64, len: u64) {
        let first = offset / BLOCK_BYTES;
        let end = (offset + len).div_ceil(BLOCK_BYTES);
        let mut st = self.lock();
        st.epoch += 1;
        if st.recent.len() == RECENT_INVALIDATIONS {
            st.recent.pop_front();
        }
        let epoch = st.epoch;
        st.recent.push_back((epoch, first, end));
        // Large reads that overlap the range: they start before its end and, being at most
        // LARGE_IO_BYTES long, after its first block less that many.
        let reach = (LARGE_IO_BYTES as u64) / BLOCK_BYTES;
        let large_gone: Vec<u64> = st
            .large
            .entries
            .range(first.saturating_sub(reach)..end)
            .filter(|(b, c)| **b + (c.data.len() as u64) / BLOCK_BYTES > first)
            .map(|(&b, _)| b)
            .collect();
        let small_gone: Vec<u64> = st.small.entries.range(first..end).map(|(&b, _)| b).collect();
        for b in large_gone {
            st.large.remove(b);
        }
        for b in small_gone {
            st.small.remove(b);
        }
    }

    /// Blocks cached now.
    #[cfg(test)]
    fn cached_blocks(&self) -> usize {
        self.lock().small.entries.len()
    }
}

/// Whether a read of blocks `[first, end)` that began at `ticket` may fill the cache: no write
/// or discard overlapping it began since, as far as the remembered invalidations tell.
fn may_fill(st: &State, ticket: FillTicket, first: u64, end: u64) -> bool {
    if st.epoch == ticket.0 {
        return true;
    }
    let oldest_known = st.recent.front().map_or(u64::MAX, |&(epoch, _, _)| epoch);
    let lost = oldest_known > ticket.0 + 1;
    let overlapped = st.recent.iter().any(|&(epoch, lo, hi)| epoch > ticket.0 && lo < end && first < hi);
    !(lost || overlapped)
}

/// The first block number and the number of blocks of a block-aligned I/O.
fn blocks_of(offset: u64, len: usize) -> (u64, u64) {
    debug_assert!(offset.is_multiple_of(BLOCK_BYTES) && (len as u64).is_multiple_of(BLOCK_BYTES));
    (offset / BLOCK_BYTES, len as u64 / BLOCK_BYTES)
}

#[cfg(test)]
mod tests {
    use super::*;

    const B: usize = BLOCK_BYTES as usize;

    fn block(v: u8) -> Vec<u8> {
        vec![v; B]
    }

    #[test]
    fn a_read_is_served_only_when_every_block_is_cached() {
        let c = BlockCache::new(16 * BLOCK_BYTES, 0);
        let mut buf = vec![0u8; 2 * B];
        let t = c.read(&mut buf, 0).expect_err("empty cache");
        c.fill(t, &block(1), 0);
        assert!(c.read(&mut buf, 0).is_err(), "block 1 is missing");
        let t = c.read(&mut buf, 0).expect_err("still missing");
        c.fill(t, &[block(1), block(2)].concat(), 0);
        c.read(&mut buf, 0).expect("both cached");
        assert_eq!(buf, [block(1), block(2)].concat());
    }

    #[test]
    fn a_write_between_a_miss_and_its_fill_keeps_the_old_bytes_out() {
        let c = BlockCache::new(16 * BLOCK_BYTES, 0);
        let mut buf = vec![0u8; B];
        let t = c.read(&mut buf, 4 * BLOCK_BYTES).expect_err("empty");
        // The device read returns old bytes; a write of the block begins before the fill.
        c.invalidate(4 * BLOCK_BYTES, BLOCK_BYTES);
        c.fill(t, &block(9), 4 * BLOCK_BYTES);
        assert!(c.read(&mut buf, 4 * BLOCK_BYTES).is_err(), "stale bytes were cached");
        // A write elsewhere does not stop the fill.
        let t = c.read(&mut buf, 4 * BLOCK_BYTES).expect_err("empty");
        c.invalidate(100 * BLOCK_BYTES, 8 * BLOCK_BYTES);
        c.fill(t, &block(7), 4 * BLOCK_BYTES);
        c.read(&mut buf, 4 * BLOCK_BYTES).expect("filled");
        assert_eq!(buf, block(7));
    }

    #[test]
    fn a_fill_older_than_every_remembered_invalidation_is_dropped() {
        let c = BlockCache::new(16 * BLOCK_BYTES, 0);
        let mut buf = vec![0u8; B];
        let t = c.read(&mut buf, 0).expect_err("empty");
        for i in 0..=RECENT_INVALIDATIONS as u64 {
            c.invalidate((1000 + i) * BLOCK_BYTES, BLOCK_BYTES);
        }
        c.fill(t, &block(3), 0);
        assert!(c.read(&mut buf, 0).is_err(), "cannot tell whether block 0 was written");
    }

    #[test]
    fn invalidation_removes_exactly_the_range() {
        let c = BlockCache::new(64 * BLOCK_BYTES, 0);
        for b in 0..10u64 {
            let t = c.read(&mut vec![0u8; B], b * BLOCK_BYTES).expect_err("empty");
            c.fill(t, &block(b as u8), b * BLOCK_BYTES);
        }
        c.invalidate(3 * BLOCK_BYTES, 4 * BLOCK_BYTES);
        let mut buf = vec![0u8; B];
        for b in 0..10u64 {
            let hit = c.read(&mut buf, b * BLOCK_BYTES).is_ok();
            assert_eq!(hit, !(3..7).contains(&b), "block {b}");
        }
    }

    #[test]
    fn the_cache_stays_within_its_capacity_and_keeps_blocks_that_are_read() {
        let c = BlockCache::new(8 * BLOCK_BYTES, 0);
        let mut buf = vec![0u8; B];
        let t = c.read(&mut buf, 0).expect_err("empty");
        c.fill(t, &block(0), 0);
        for b in 1..100u64 {
            // Block 0 is read before every new fill: its second chances keep it.
            c.read(&mut buf, 0).expect("block 0 stays");
            let t = c.read(&mut buf, b * BLOCK_BYTES).expect_err("new block");
            c.fill(t, &block(b as u8), b * BLOCK_BYTES);
            assert!(c.cached_blocks() <= 8);
            let st = c.lock();
            assert_eq!(st.small.bytes, st.small.entries.len() * B, "the small part's bytes are its blocks'");
        }
        assert_eq!(buf, block(0));
        assert!(c.read(&mut buf, 50 * BLOCK_BYTES).is_err(), "old unread blocks were evicted");
    }

    #[test]
    fn large_reads_neither_hit_nor_fill_without_their_budget() {
        let c = BlockCache::new(1024 * BLOCK_BYTES, 0);
        let big = CACHED_IO_BYTES + B;
        assert!(!c.serves(big));
        let mut buf = vec![0u8; big];
        let t = c.read(&mut buf, 0).expect_err("empty");
        c.fill(t, &vec![5u8; big], 0);
        assert_eq!(c.cached_blocks(), 0);
        assert!(c.read(&mut buf, 0).is_err());
    }

    #[test]
    fn a_shared_large_read_is_the_cached_buffer_itself_and_outlives_its_invalidation() {
        let big = 2 * CACHED_IO_BYTES;
        let c = BlockCache::new(16 * BLOCK_BYTES, (2 * big) as u64);
        let t = c.read_large(0, big).expect_err("empty");
        let data = bytes::Bytes::from(vec![4u8; big]);
        c.fill_large(t, data.clone(), 0);
        let hit = c.read_large(0, big).expect("cached");
        assert_eq!(hit.as_ptr(), data.as_ptr(), "shared, not copied");
        // The copying reader sees the same bytes.
        let mut buf = vec![0u8; big];
        c.read(&mut buf, 0).expect("cached");
        assert_eq!(buf, vec![4u8; big]);
        // A write forgets it; the reader keeps what it holds.
        c.invalidate(BLOCK_BYTES, BLOCK_BYTES);
        assert!(c.read_large(0, big).is_err());
        assert_eq!(&hit[..], &vec![4u8; big][..]);
        // A write between a miss and its fill keeps the old bytes out.
        let t = c.read_large(0, big).expect_err("forgotten");
        c.invalidate(0, BLOCK_BYTES);
        c.fill_large(t, bytes::Bytes::from(vec![5u8; big]), 0);
        assert!(c.read_large(0, big).is_err(), "stale bytes were cached");
    }

    #[test]
    fn large_reads_are_cached_whole_apart_from_small_blocks_and_forgotten_on_any_overlap() {
        let big = 4 * CACHED_IO_BYTES;
        let blocks = (big / B) as u64;
        let c = BlockCache::new(16 * BLOCK_BYTES, (3 * big) as u64);
        assert!(c.serves(big) && c.serves(LARGE_IO_BYTES) && !c.serves(LARGE_IO_BYTES + B));
        let at = |i: u64| i * blocks * BLOCK_BYTES;
        let mut buf = vec![0u8; big];
        for i in 0..3u64 {
            let t = c.read(&mut buf, at(i)).expect_err("empty");
            c.fill(t, &vec![i as u8 + 1; big], at(i));
        }
        assert_eq!(c.cached_blocks(), 0, "large reads do not enter the small blocks' part");
        c.read(&mut buf, at(1)).expect("cached whole");
        assert_eq!(buf, vec![2u8; big]);
        // Only the exact range hits: a shorter read at the same place, or one inside, misses.
        assert!(c.read(&mut vec![0u8; big - B], at(1)).is_err());
        assert!(c.read(&mut vec![0u8; big], at(1) + BLOCK_BYTES).is_err());
        // A one-block write at the last block of read 0 forgets read 0 only; one in the
        // middle of read 2 forgets read 2.
        c.invalidate(at(1) - BLOCK_BYTES, BLOCK_BYTES);
        c.invalidate(at(2) + 7 * BLOCK_BYTES, BLOCK_BYTES);
        assert!(c.read(&mut buf, at(0)).is_err(), "overlapped at its end");
        assert!(c.read(&mut buf, at(2)).is_err(), "overlapped in its middle");
        c.read(&mut buf, at(1)).expect("untouched");
        // A write between a large miss and its fill keeps the old bytes out.
        let t = c.read(&mut buf, at(5)).expect_err("empty");
        c.invalidate(at(5) + BLOCK_BYTES, BLOCK_BYTES);
        c.fill(t, &vec![9u8; big], at(5));
        assert!(c.read(&mut buf, at(5)).is_err(), "stale bytes were cached");
    }

    #[test]
    fn large_reads_stay_within_their_budget_and_keep_those_read_again() {
        let big = 2 * CACHED_IO_BYTES;
        let blocks = (big / B) as u64;
        let c = BlockCache::new(16 * BLOCK_BYTES, (4 * big) as u64);
        let mut buf = vec![0u8; big];
        let t = c.read(&mut buf, 0).expect_err("empty");
        c.fill(t, &vec![1u8; big], 0);
        for i in 1..50u64 {
            c.read(&mut buf, 0).expect("read 0 stays: it is read before every new fill");
            let off = i * blocks * BLOCK_BYTES;
            let t = c.read(&mut buf, off).expect_err("new");
            c.fill(t, &vec![i as u8; big], off);
            let st = c.lock();
            assert!(st.large.bytes <= 4 * big);
            assert_eq!(st.large.bytes, st.large.entries.values().map(|e| e.data.len()).sum::<usize>());
        }
        assert!(c.read(&mut buf, 10 * blocks * BLOCK_BYTES).is_err(), "old unread reads were evicted");
        c.read(&mut buf, 49 * blocks * BLOCK_BYTES).expect("the newest stays");
    }
}
