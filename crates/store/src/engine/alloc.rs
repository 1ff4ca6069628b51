//! The extent allocator: which device blocks are free.
//!
//! Free space is a set of coalesced extents kept in two ordered maps (by offset and by length),
//! so memory is proportional to the number of free *fragments*, not to the device size: a fresh
//! device of any size costs one entry. Each entry costs about 100 bytes across both maps; the
//! pathological worst case (every other block free) is one entry per 8 KiB of device, i.e.
//! about 12 GiB per TB, while sequential object workloads stay at a few thousand entries.
//!
//! The allocator is the in-memory copy of the `free` keyspace. It records which offsets it
//! changed (`touched`), and the engine writes exactly those keys in the same metadata batch as
//! the transaction that caused the change, so memory and disk never diverge.

use std::collections::{BTreeMap, BTreeSet};

use super::device::BLOCK_BYTES;
use crate::error::{Result, StoreError};

/// How many free extents after the cursor the next-fit search looks at before it falls back to
/// a best-fit search. Bounds the cost of one allocation.
const NEXT_FIT_PROBES: usize = 16;

#[derive(Default, Debug)]
pub struct Allocator {
    by_offset: BTreeMap<u64, u64>,
    by_size: BTreeSet<(u64, u64)>,
    free_bytes: u64,
    /// Where the last allocation ended: new allocations continue there when they can, so that
    /// sequential writes land in sequential device blocks.
    cursor: u64,
    /// Best fit always, never next fit (see [`Allocator::compact`]).
    compact: bool,
    touched: BTreeSet<u64>,
}

impl Allocator {
    #[must_use]
    pub fn free_bytes(&self) -> u64 {
        self.free_bytes
    }

    /// An allocator that reuses freed space before it touches space never used: every
    /// allocation takes the smallest free extent that holds it. For RAM devices, where space
    /// never used costs fresh memory (and, on a VM, slow page faults) while freed space is
    /// already backed; sequential layout, what next fit buys on disks, is worth nothing there.
    #[must_use]
    pub fn compact() -> Self {
        Allocator { compact: true, ..Allocator::default() }
    }

    /// Number of free fragments (the allocator's memory is proportional to it).
    #[must_use]
    pub fn fragments(&self) -> usize {
        self.by_offset.len()
    }

    fn remove_entry(&mut self, off: u64, len: u64) {
        self.by_offset.remove(&off);
        self.by_size.remove(&(len, off));
        self.free_bytes -= len;
        self.touched.insert(off);
    }

    fn add_entry(&mut self, off: u64, len: u64) {
        debug_assert!(len > 0);
        self.by_offset.insert(off, len);
        self.by_size.insert((len, off));
        self.free_bytes += len;
        self.touched.insert(off);
    }

    /// Marks `[off, off + len)` free, merging it with free neighbours.
    ///
    /// # Panics
    /// Panics if the range overlaps space that is already free: that would mean two owners of
    /// the same blocks, and continuing could hand them out twice.
    pub fn release(&mut self, off: u64, len: u64) {
        assert!(
            len > 0 && off.is_multiple_of(BLOCK_BYTES) && len.is_multiple_of(BLOCK_BYTES),
            "bad free extent {off}+{len}"
        );
        // The on-disk free list may hold an entry starting at `off` (written when the space was
        // freed); if it merges into a neighbour below, that entry must be deleted.
        self.touched.insert(off);
        let (mut start, mut end) = (off, off + len);
        if let Some((&p_off, &p_len)) = self.by_offset.range(..=off).next_back() {
            assert!(p_off + p_len <= off, "double free: {off}+{len} overlaps free {p_off}+{p_len}");
            if p_off + p_len == off {
                self.remove_entry(p_off, p_len);
                start = p_off;
            }
        }
        if let Some((&n_off, &n_len)) = self.by_offset.range(off..).next() {
            assert!(n_off >= end, "double free: {off}+{len} overlaps free {n_off}+{n_len}");
            if n_off == end {
                self.remove_entry(n_off, n_len);
                end = n_off + n_len;
            }
        }
        self.add_entry(start, end - start);
    }

    /// Takes `want` bytes from the front of the free extent at `off`.
    fn take(&mut self, off: u64, len: u64, want: u64) -> (u64, u64) {
        let n = want.min(len);
        self.remove_entry(off, len);
        if len > n {
            self.add_entry(off + n, len - n);
        }
        self.cursor = off + n;
        (off, n)
    }

    /// Allocates `len_bytes` (a multiple of the block size), contiguous when possible, as a list
    /// of `(offset, length)` extents in the order the data should be laid out.
    pub fn allocate(&mut self, len_bytes: u64) -> Result<Vec<(u64, u64)>> {
        assert!(len_bytes > 0 && len_bytes.is_multiple_of(BLOCK_BYTES), "bad allocation size {len_bytes}");
        if len_bytes > self.free_bytes {
            return Err(StoreError::NoSpace { needed_bytes: len_bytes, free_bytes: self.free_bytes });
        }
        // Next fit: continue right after the previous allocation if a big enough extent is near.
        let near = if self.compact {
            None
        } else {
            self.by_offset
                .range(self.cursor..)
                .take(NEXT_FIT_PROBES)
                .find(|(_, len)| **len >= len_bytes)
                .map(|(o, l)| (*o, *l))
        };
        if let Some((off, len)) = near {
            return Ok(vec![self.take(off, len, len_bytes)]);
        }
        // Best fit: the smallest extent that holds everything.
        if let Some(&(len, off)) = self.by_size.range((len_bytes, 0)..).next() {
            return Ok(vec![self.take(off, len, len_bytes)]);
        }
        // Fragmented: largest extents first, so that the data is split as little as possible.
        let mut out = Vec::new();
        let mut left = len_bytes;
        while left > 0 {
            let Some(&(len, off)) = self.by_size.iter().next_back() else {
                unreachable!("free_bytes said {len_bytes} bytes were free");
            };
            let piece = self.take(off, len, left);
            left -= piece.1;
            out.push(piece);
        }
        out.sort_unstable();
        Ok(out)
    }

    /// The free extents, in offset order.
    pub fn extents(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.by_offset.iter().map(|(o, l)| (*o, *l))
    }

    /// Offsets whose entry changed since the last call, with the entry's current length
    /// (`None`: no free extent starts there any more).
    pub fn drain_changes(&mut self) -> Vec<(u64, Option<u64>)> {
        let touched = std::mem::take(&mut self.touched);
        touched.into_iter().map(|off| (off, self.by_offset.get(&off).copied())).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    const B: u64 = BLOCK_BYTES;

    #[test]
    fn coalesces_and_allocates_sequentially() {
        let mut a = Allocator::default();
        a.release(0, 100 * B);
        assert_eq!(a.allocate(10 * B).unwrap(), vec![(0, 10 * B)]);
        assert_eq!(a.allocate(10 * B).unwrap(), vec![(10 * B, 10 * B)]);
        a.release(0, 10 * B);
        a.release(10 * B, 10 * B);
        assert_eq!(a.fragments(), 1);
        assert_eq!(a.free_bytes(), 100 * B);
    }

    #[test]
    fn fragmented_allocation_and_no_space() {
        let mut a = Allocator::default();
        a.release(0, 2 * B);
        a.release(4 * B, 2 * B);
        let got = a.allocate(3 * B).unwrap();
        assert_eq!(got.iter().map(|e| e.1).sum::<u64>(), 3 * B);
        assert!(matches!(a.allocate(2 * B), Err(StoreError::NoSpace { .. })));
    }

    #[test]
    fn compact_allocation_reuses_freed_space_first() {
        let mut a = Allocator::compact();
        a.release(0, 100 * B);
        assert_eq!(a.allocate(10 * B).unwrap(), vec![(0, 10 * B)]);
        assert_eq!(a.allocate(10 * B).unwrap(), vec![(10 * B, 10 * B)]);
        // A hole below the cursor is reused rather than the untouched space above it.
        a.release(2 * B, B);
        assert_eq!(a.allocate(B).unwrap(), vec![(2 * B, B)]);
        a.release(4 * B, 2 * B);
        assert_eq!(a.allocate(B).unwrap(), vec![(4 * B, B)]);
        // Too big for any hole: from the untouched space.
        assert_eq!(a.allocate(5 * B).unwrap(), vec![(20 * B, 5 * B)]);
        // The next-fit allocator continues after its last allocation instead.
        let mut n = Allocator::default();
        n.release(0, 100 * B);
        n.allocate(10 * B).unwrap();
        n.release(2 * B, B);
        assert_eq!(n.allocate(B).unwrap(), vec![(10 * B, B)]);
    }

    #[test]
    #[should_panic(expected = "double free")]
    fn double_free_is_caught() {
        let mut a = Allocator::default();
        a.release(0, 2 * B);
        a.release(B, B);
    }
}
