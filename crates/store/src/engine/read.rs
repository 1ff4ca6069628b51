//! The read path: turning an object's extent records into verified bytes.

use std::collections::BTreeMap;
use std::sync::Arc;

use shoal_util::{AlignedBuf, BufPool, crc32c};

use super::device::{BLOCK_BYTES, Device};
use super::kv::{Ks, KvRead};
use super::layout::{self, Extent, MAX_EXTENT_BYTES};
use crate::error::{Result, StoreError};

/// An object's extents by logical offset.
pub type ExtentMap = BTreeMap<u64, Extent>;

/// What [`scan_extents`] found, and the key range it covered: `[from, upper)`.
pub struct ExtentScan {
    pub map: ExtentMap,
    pub from: Vec<u8>,
    pub upper: Vec<u8>,
}

/// The extent records (under object key prefix `prefix`) overlapping `[lo, hi)`, by logical
/// start, given that no record of the object ends past `end_bound`. Records are keyed by their
/// logical end, so the scan starts at the first record ending after `lo` and stops at the first
/// one starting at or after `hi`: an append looks at no record at all, and the tombstones of
/// deleted records outside the window are never walked. Keys for which `skip` is true are
/// ignored (a transaction's overlay decides about those). `None` when the window is empty.
pub fn scan_extents<R: KvRead>(
    view: &R,
    prefix: &[u8],
    lo: u64,
    hi: u64,
    end_bound: u64,
    skip: &dyn Fn(&[u8]) -> bool,
) -> Result<Option<ExtentScan>> {
    // Records overlapping [lo, hi) end in (lo, hi + MAX_EXTENT_BYTES).
    let end_max = (hi + MAX_EXTENT_BYTES).min(end_bound);
    if end_max <= lo {
        return Ok(None);
    }
    let from = layout::extent_key(prefix, lo + 1);
    let mut upper = layout::extent_key(prefix, end_max + 1);
    let mut map = ExtentMap::new();
    let mut stop: Option<Vec<u8>> = None;
    let mut err = None;
    view.scan(Ks::Extents, &from, Some(&upper), &mut |k, v| {
        if skip(k) {
            return true;
        }
        match layout::decode_extent(k, v) {
            Ok((start, _)) if start >= hi => {
                stop = Some(k.to_vec());
                false
            }
            Ok((start, e)) => {
                map.insert(start, e);
                true
            }
            Err(e) => {
                err = Some(e);
                false
            }
        }
    })?;
    if let Some(e) = err {
        return Err(e);
    }
    if let Some(k) = stop {
        upper = k;
    }
    Ok(Some(ExtentScan { map, from, upper }))
}

/// Reads the block-aligned logical range `[lo, hi)` of an object. Holes read as zeros. Blocks
/// not on the device yet (planned earlier in the same transaction, or staged) come from
/// `pending` (device offset → block); all others from the device. Every block is verified against its checksum before any byte is returned.
pub fn read_blocks<D: Device>(
    dev: &D,
    (coll, obj): (&str, &str),
    extents: &ExtentMap,
    lo: u64,
    hi: u64,
    pending: &dyn Fn(u64) -> Option<Arc<Vec<u8>>>,
    pool: &BufPool,
) -> Result<AlignedBuf> {
    assert!(lo.is_multiple_of(BLOCK_BYTES) && hi.is_multiple_of(BLOCK_BYTES) && lo <= hi, "unaligned read {lo}..{hi}");
    let mut out = pool.take((hi - lo) as usize);
    let block = BLOCK_BYTES as usize;
    // Pieces of the range that come from the device: (logical start, device offset, length).
    let mut pieces: Vec<(u64, u64, u64)> = Vec::new();
    for (&off, e) in extents {
        let (a, b) = (lo.max(off), hi.min(off + e.len_bytes));
        if a < b {
            let phys = e.phys + (a - off);
            // Extents that continue each other both logically and on the device are read with
            // one I/O: a 4 MiB object written at once is four records but one read.
            match pieces.last_mut() {
                Some(last) if last.0 + last.2 == a && last.1 + last.2 == phys => last.2 += b - a,
                _ => pieces.push((a, phys, b - a)),
            }
        }
    }
    // Holes read as zeros: clear whatever the pieces do not cover (pooled buffers hold old data).
    let mut covered = lo;
    for &(a, _, len) in &pieces {
        out[(covered - lo) as usize..(a - lo) as usize].fill(0);
        covered = a + len;
    }
    out[(covered - lo) as usize..].fill(0);
    for &(a, phys, len) in &pieces {
        let dst = &mut out[(a - lo) as usize..(a - lo + len) as usize];
        let n_blocks = dst.len() / block;
        let staged: Vec<Option<Arc<Vec<u8>>>> = (0..n_blocks).map(|i| pending(phys + (i * block) as u64)).collect();
        if staged.iter().any(Option::is_none) {
            dev.read_at(dst, phys).map_err(|source| StoreError::Unreadable {
                coll: coll.to_string(),
                obj: obj.to_string(),
                device_offset: phys,
                source,
            })?;
        }
        for (i, data) in staged.iter().enumerate() {
            if let Some(data) = data {
                dst[i * block..(i + 1) * block].copy_from_slice(data);
            }
        }
    }
    // Verify every block against its extent's checksum before returning anything.
    for (&off, e) in extents {
        let (a, b) = (lo.max(off), hi.min(off + e.len_bytes));
        if a >= b {
            continue;
        }
        let first_block = ((a - off) / BLOCK_BYTES) as usize;
        let region = &out[(a - lo) as usize..(b - lo) as usize];
        for (i, chunk) in region.chunks_exact(block).enumerate() {
            if e.csums.get(first_block + i).copied() != Some(crc32c(chunk)) {
                return Err(StoreError::Checksum {
                    coll: coll.to_string(),
                    obj: obj.to_string(),
                    offset: a + (i * block) as u64,
                    device_offset: e.phys + (a - off) + (i * block) as u64,
                });
            }
        }
    }
    Ok(out)
}
