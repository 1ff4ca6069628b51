//! Shared bytes that carry the crc32c of each 4 KiB block they start with.
//!
//! A receiver that checksums a large payload while it arrives can compute those checksums block
//! by block and join them into the payload's checksum ([`Crc32cShift::concat`]), so the frame
//! check proves them. A store that checksums what it writes per 4 KiB block then takes them
//! instead of reading the bytes again (decision 0094). The checksums only travel with the bytes
//! they were computed from: every way of cutting a [`SummedBytes`] keeps exactly the checksums of
//! the whole blocks the piece starts with, and drops them when the piece starts off a block
//! boundary.

use std::ops::Range;
use std::sync::{Arc, OnceLock};

use bytes::Bytes;

use crate::checksum::Crc32cShift;

/// The length of the blocks whose checksums [`SummedBytes`] carries: the store's checksum block.
pub const SUM_BLOCK_BYTES: usize = 4096;

/// The shift that joins checksums of [`SUM_BLOCK_BYTES`] blocks, built once per process.
#[must_use]
pub fn block_shift() -> &'static Crc32cShift {
    static SHIFT: OnceLock<Crc32cShift> = OnceLock::new();
    SHIFT.get_or_init(|| Crc32cShift::new(SUM_BLOCK_BYTES))
}

/// The crc32cs of consecutive [`SUM_BLOCK_BYTES`] blocks: a window into one shared list, so
/// cutting it copies nothing.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct BlockCrcs {
    all: Arc<[u32]>,
    window: Range<usize>,
}

impl BlockCrcs {
    /// The checksums `crcs`, block 0 first.
    #[must_use]
    pub fn new(crcs: Vec<u32>) -> Self {
        let n = crcs.len();
        Self { all: crcs.into(), window: 0..n }
    }

    /// How many blocks the checksums cover.
    #[must_use]
    pub fn len(&self) -> usize {
        self.window.len()
    }

    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.window.is_empty()
    }

    #[must_use]
    pub fn as_slice(&self) -> &[u32] {
        &self.all[self.window.clone()]
    }

    /// The checksums of blocks `blocks` (numbered from this window's first).
    ///
    /// # Panics
    /// Panics if `blocks` reaches past the window.
    #[must_use]
    pub fn slice(&self, blocks: Range<usize>) -> Self {
        assert!(
            blocks.start <= blocks.end && blocks.end <= self.len(),
            "block checksums {blocks:?} past {}",
            self.len()
        );
        let first = self.window.start;
        Self { all: Arc::clone(&self.all), window: first + blocks.start..first + blocks.end }
    }
}

impl std::fmt::Debug for BlockCrcs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "BlockCrcs({} blocks)", self.len())
    }
}

/// Shared bytes with the crc32cs of the whole [`SUM_BLOCK_BYTES`] blocks they start with, when
/// they are known.
///
/// Invariant: the checksums cover at most the bytes' whole blocks, block 0 starting at the first
/// byte, and each is the crc32c of exactly its block. Whoever makes one with checksums vouches
/// for them ([`SummedBytes::new`]); a store writes them as the data's checksums, so a wrong one
/// makes later reads of that block fail their check instead of returning the block.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct SummedBytes {
    bytes: Bytes,
    crcs: BlockCrcs,
}

impl SummedBytes {
    /// `bytes` with `crcs`, the crc32cs of its leading blocks (computed by the caller from these
    /// very bytes). Checksums of blocks past the bytes' last whole block are left out.
    #[must_use]
    pub fn new(bytes: Bytes, crcs: Option<BlockCrcs>) -> Self {
        let crcs = crcs.unwrap_or_default();
        let whole = bytes.len() / SUM_BLOCK_BYTES;
        let crcs = if crcs.len() > whole { crcs.slice(0..whole) } else { crcs };
        debug_assert!(
            crcs.as_slice()
                .iter()
                .enumerate()
                .all(|(i, &c)| { c == crate::crc32c(&bytes[i * SUM_BLOCK_BYTES..(i + 1) * SUM_BLOCK_BYTES]) }),
            "block checksums that do not match their bytes"
        );
        Self { bytes, crcs }
    }

    /// `bytes` with the checksums of its whole blocks computed now, as a receiver computes them
    /// while the bytes arrive (for tests and simulations that stand in for one).
    #[must_use]
    pub fn summing(bytes: Bytes) -> Self {
        let whole = bytes.len() / SUM_BLOCK_BYTES * SUM_BLOCK_BYTES;
        let crcs = crate::crc32c_blocks(&bytes[..whole], SUM_BLOCK_BYTES);
        Self { bytes, crcs: BlockCrcs::new(crcs) }
    }

    /// The bytes, with no checksums.
    #[must_use]
    pub fn bytes(&self) -> &Bytes {
        &self.bytes
    }

    #[must_use]
    pub fn into_bytes(self) -> Bytes {
        self.bytes
    }

    /// The checksums of every block, if the bytes are whole blocks and each one's checksum is
    /// known; `None` otherwise (the caller computes them).
    #[must_use]
    pub fn block_crcs(&self) -> Option<&BlockCrcs> {
        let whole = self.bytes.len().is_multiple_of(SUM_BLOCK_BYTES);
        (whole && !self.bytes.is_empty() && self.crcs.len() == self.bytes.len() / SUM_BLOCK_BYTES).then_some(&self.crcs)
    }

    /// Bytes `range`, with the checksums of the whole blocks it starts with when it starts on a
    /// block boundary.
    ///
    /// # Panics
    /// Panics if `range` is out of bounds, as [`Bytes::slice`] does.
    #[must_use]
    pub fn slice(&self, range: Range<usize>) -> Self {
        let bytes = self.bytes.slice(range.clone());
        if !range.start.is_multiple_of(SUM_BLOCK_BYTES) {
            return Self { bytes, crcs: BlockCrcs::default() };
        }
        let first = range.start / SUM_BLOCK_BYTES;
        let last = (range.end / SUM_BLOCK_BYTES).min(self.crcs.len());
        let crcs = if first < last { self.crcs.slice(first..last) } else { BlockCrcs::default() };
        Self { bytes, crcs }
    }

    /// Splits off bytes `[at, len)` (as [`Bytes::split_off`]), each part keeping its checksums
    /// by the rule of [`SummedBytes::slice`].
    ///
    /// # Panics
    /// Panics if `at > len`.
    #[must_use]
    pub fn split_off(&mut self, at: usize) -> Self {
        let tail = self.slice(at..self.bytes.len());
        *self = self.slice(0..at);
        tail
    }
}

impl From<Bytes> for SummedBytes {
    fn from(bytes: Bytes) -> Self {
        Self { bytes, crcs: BlockCrcs::default() }
    }
}

impl From<Vec<u8>> for SummedBytes {
    fn from(v: Vec<u8>) -> Self {
        Bytes::from(v).into()
    }
}

impl std::ops::Deref for SummedBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.bytes
    }
}

impl std::fmt::Debug for SummedBytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SummedBytes({} bytes, {} block checksums)", self.bytes.len(), self.crcs.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crc32c;

    const B: usize = SUM_BLOCK_BYTES;

    fn summed(len: usize) -> SummedBytes {
        let data: Vec<u8> = (0..len).map(|i| (i * 31 % 251) as u8).collect();
        SummedBytes::summing(Bytes::from(data))
    }

    /// Every piece's checksums, if any, are its own blocks' checksums.
    fn check(piece: &SummedBytes) {
        for (i, &c) in piece.crcs.as_slice().iter().enumerate() {
            assert_eq!(c, crc32c(&piece[i * B..(i + 1) * B]), "block {i} of {piece:?}");
        }
        if let Some(all) = piece.block_crcs() {
            assert_eq!(all.len() * B, piece.len());
        }
    }

    #[test]
    fn slices_keep_the_checksums_of_their_own_blocks_and_only_on_block_boundaries() {
        let whole = summed(5 * B + 100);
        assert_eq!(whole.crcs.len(), 5);
        assert!(whole.block_crcs().is_none(), "a partial last block is not covered");
        for (from, to) in [(0, B), (B, 3 * B), (B, 3 * B + 7), (2 * B, 5 * B + 100), (5, 2 * B), (0, 0), (3 * B, 3 * B)]
        {
            let piece = whole.slice(from..to);
            check(&piece);
            let expect = if from % B == 0 { (to / B).min(5).saturating_sub(from / B) } else { 0 };
            assert_eq!(piece.crcs.len(), expect, "{from}..{to}");
        }
        assert_eq!(whole.slice(B..3 * B).block_crcs().map(BlockCrcs::len), Some(2));
        assert!(whole.slice(5..B + 5).block_crcs().is_none());
    }

    #[test]
    fn split_off_hands_each_part_its_checksums() {
        let mut head = summed(4 * B);
        let tail = head.split_off(3 * B);
        check(&head);
        check(&tail);
        assert_eq!(head.block_crcs().map(BlockCrcs::len), Some(3));
        assert_eq!(tail.block_crcs().map(BlockCrcs::len), Some(1));
        let mut odd = summed(4 * B);
        let rest = odd.split_off(B + 1);
        assert_eq!(odd.crcs.len(), 1);
        assert!(rest.block_crcs().is_none());
        check(&odd);
        check(&rest);
    }

    #[test]
    fn checksums_past_the_last_whole_block_are_left_out() {
        let data = Bytes::from(vec![7u8; 2 * B + 3]);
        let crcs = BlockCrcs::new(vec![crc32c(&data[..B]), crc32c(&data[B..2 * B]), 0xdead]);
        let s = SummedBytes::new(data, Some(crcs));
        assert_eq!(s.crcs.len(), 2);
        check(&s);
    }

    #[test]
    fn the_block_shift_joins_block_checksums_into_the_whole_one() {
        let s = summed(3 * B);
        let joined = s.crcs.as_slice().iter().fold(0, |acc, &c| block_shift().concat(acc, c));
        assert_eq!(joined, crc32c(&s));
    }
}
