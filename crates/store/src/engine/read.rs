//! The read path: turning an object's extent records into verified bytes.

use std::collections::BTreeMap;
use std::sync::Arc;

use shoal_util::{AlignedBuf, crc32c};

use super::device::{BLOCK_BYTES, Device};
use super::layout::Extent;
use crate::error::{Result, StoreError};

/// An object's extents by logical offset.
pub type ExtentMap = BTreeMap<u64, Extent>;

/// Reads the block-aligned logical range `[lo, hi)` of an object. Holes read as zeros. Blocks
/// not on the device yet (planned earlier in the same transaction) come from `pending`
/// (device offset → block); all others from the device. Every block is verified against its checksum before any byte is returned.
pub fn read_blocks<D: Device>(
    dev: &D,
    coll: &str,
    obj: &str,
    extents: &ExtentMap,
    lo: u64,
    hi: u64,
    pending: &dyn Fn(u64) -> Option<Arc<Vec<u8>>>,
) -> Result<AlignedBuf> {
    assert!(lo % BLOCK_BYTES == 0 && hi % BLOCK_BYTES == 0 && lo <= hi, "unaligned read {lo}..{hi}");
    let mut out = AlignedBuf::zeroed((hi - lo) as usize);
    let block = BLOCK_BYTES as usize;
    for (&off, e) in extents {
        let end = off + e.len_bytes;
        let (a, b) = (lo.max(off), hi.min(end));
        if a >= b {
            continue;
        }
        let dst = &mut out[(a - lo) as usize..(b - lo) as usize];
        let phys = e.phys + (a - off);
        let first_block = ((a - off) / BLOCK_BYTES) as usize;
        let n_blocks = dst.len() / block;
        let staged: Vec<Option<Arc<Vec<u8>>>> =
            (0..n_blocks).map(|i| pending(phys + (i * block) as u64)).collect();
        if staged.iter().any(Option::is_none) {
            dev.read_at(dst, phys)
                .map_err(|err| StoreError::io(format!("reading {coll}/{obj} at device offset {phys}"), err))?;
        }
        for (i, chunk) in dst.chunks_exact_mut(block).enumerate() {
            if let Some(data) = &staged[i] {
                chunk.copy_from_slice(data);
            }
            let want = e.csums.get(first_block + i).copied();
            if want != Some(crc32c(chunk)) {
                return Err(StoreError::Checksum {
                    coll: coll.to_string(),
                    obj: obj.to_string(),
                    offset: a + (i * block) as u64,
                    device_offset: phys + (i * block) as u64,
                });
            }
        }
    }
    Ok(out)
}
