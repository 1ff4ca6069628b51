//! The read path: turning an object's extent records into verified bytes.

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};

use shoal_util::{AlignedBuf, BufPool, crc32c, crc32c_append};

use super::device::{BLOCK_BYTES, BlockSource};
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
        // The record past the range is only looked at to stop: its start is enough, without
        // decoding its checksums (up to 256 of them).
        let record = layout::extent_start(k, v).and_then(|start| {
            if start >= hi { Ok(None) } else { layout::decode_extent_record(v).map(|e| Some((start, e))) }
        });
        match record {
            Ok(Some((start, e))) => {
                map.insert(start, e);
                true
            }
            Ok(None) => {
                stop = Some(k.to_vec());
                false
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

/// Most candidate keys [`covering_extent`] reads before giving up.
const COVERING_GUESSES: usize = 3;

/// The one extent record (under `prefix`) that covers all of `[lo, hi)`, found by point reads
/// (`get`) of the keys such a record most often has, or `None` when none of them covers the
/// range; the caller then scans ([`scan_extents`]). Records end at or before `end_bound`.
///
/// Why: records are keyed by their logical end, so the record under an offset is found by a
/// range scan, and a range scan of an LSM tree merges an iterator over every memtable and table
/// (a fifth of a `block` OSD's worker under 4 KiB random overwrites), where a point read asks
/// one bloom filter per table. The guesses are the ends a record most often has: the next
/// multiple of [`MAX_EXTENT_BYTES`] (records cut from a write that started on such a boundary:
/// a sequentially written object, an imported image), the object's end (its last record, or an
/// object written whole, as most small objects are), and `hi` itself (a record made by a write
/// of this very range).
///
/// Sound whatever the guesses: records of one object never overlap in a consistent view, so a
/// record that covers `[lo, hi)` is the only record overlapping it, exactly what a scan of the
/// same view returns. `lo` and `hi` are block-aligned, `lo < hi`.
pub fn covering_extent(
    mut get: impl FnMut(&[u8]) -> Result<Option<Vec<u8>>>,
    prefix: &[u8],
    lo: u64,
    hi: u64,
    end_bound: u64,
) -> Result<Option<ExtentMap>> {
    debug_assert!(lo < hi && lo.is_multiple_of(BLOCK_BYTES) && hi.is_multiple_of(BLOCK_BYTES));
    // A record covering the range ends in [hi, lo + MAX_EXTENT_BYTES] and within the object.
    let last_end = end_bound.min(lo.saturating_add(MAX_EXTENT_BYTES));
    let mut tried = [u64::MAX; COVERING_GUESSES];
    for (i, end) in [hi.next_multiple_of(MAX_EXTENT_BYTES), end_bound, hi].into_iter().enumerate() {
        if end < hi || end > last_end || tried.contains(&end) {
            continue;
        }
        tried[i] = end;
        let key = layout::extent_key(prefix, end);
        let Some(value) = get(&key)? else { continue };
        // A record that does not cover the range is passed over without decoding its checksums.
        let start = layout::extent_start(&key, &value)?;
        if start <= lo {
            return Ok(Some(ExtentMap::from([(start, layout::decode_extent_record(&value)?)])));
        }
    }
    Ok(None)
}

/// The crc32c of a block of zeros: what a hole reads as.
fn zero_block_crc() -> u32 {
    static CRC: OnceLock<u32> = OnceLock::new();
    *CRC.get_or_init(|| crc32c(&[0u8; BLOCK_BYTES as usize]))
}

/// Reads the block-aligned logical range `[lo, hi)` of an object. Holes read as zeros. Blocks
/// not on the device yet (planned earlier in the same transaction, or staged) come from
/// `pending` (device offset → block); all others from the device. Every block is verified
/// against its checksum before any byte is returned. With `block_crcs`, it is filled with the
/// crc32c of every block of the range in order (the verified ones, and a zero block's for
/// holes), so that a caller can checksum the bytes it returns without reading them again.
pub fn read_blocks<D: BlockSource>(
    dev: &D,
    (coll, obj): (&str, &str),
    extents: &ExtentMap,
    (lo, hi): (u64, u64),
    pending: &dyn Fn(u64) -> Option<Arc<Vec<u8>>>,
    pool: &BufPool,
    mut block_crcs: Option<&mut Vec<u32>>,
) -> Result<AlignedBuf> {
    assert!(lo.is_multiple_of(BLOCK_BYTES) && hi.is_multiple_of(BLOCK_BYTES) && lo <= hi, "unaligned read {lo}..{hi}");
    let mut out = pool.take((hi - lo) as usize);
    let pieces = device_pieces(extents, lo, hi);
    // Holes read as zeros: clear whatever the pieces do not cover (pooled buffers hold old data).
    let mut covered = lo;
    for &(a, _, len) in &pieces {
        out[(covered - lo) as usize..(a - lo) as usize].fill(0);
        covered = a + len;
    }
    out[(covered - lo) as usize..].fill(0);
    if let Some(crcs) = block_crcs.as_deref_mut() {
        crcs.clear();
        crcs.resize(((hi - lo) / BLOCK_BYTES) as usize, zero_block_crc());
    }
    // Each piece is read in parts of the device's preferred size (a RAM device's copies), each
    // part verified right after it is read, while it is in cache.
    let part_bytes =
        dev.read_piece_bytes().map_or(u64::MAX, |n| (n as u64).max(BLOCK_BYTES) / BLOCK_BYTES * BLOCK_BYTES);
    for &(a, phys, len) in &pieces {
        let mut done = 0;
        while done < len {
            let n = (len - done).min(part_bytes);
            let (a, phys) = (a + done, phys + done);
            read_part(dev, (coll, obj), &mut out[(a - lo) as usize..(a - lo + n) as usize], phys, pending)?;
            verify(
                (coll, obj),
                extents,
                (a, a + n),
                &out[(a - lo) as usize..(a - lo + n) as usize],
                block_crcs.as_deref_mut().map(|c| &mut c[((a - lo) / BLOCK_BYTES) as usize..]),
            )?;
            done += n;
        }
    }
    Ok(out)
}

/// Pieces of the range `[lo, hi)` that come from the device, in logical order: (logical start,
/// device offset, length). Extents that continue each other both logically and on the device
/// form one piece, read with one I/O: a 4 MiB object written at once is four records but one
/// read.
fn device_pieces(extents: &ExtentMap, lo: u64, hi: u64) -> Vec<(u64, u64, u64)> {
    let mut pieces: Vec<(u64, u64, u64)> = Vec::new();
    for (&off, e) in extents {
        let (a, b) = (lo.max(off), hi.min(off + e.len_bytes));
        if a < b {
            let phys = e.phys + (a - off);
            match pieces.last_mut() {
                Some(last) if last.0 + last.2 == a && last.1 + last.2 == phys => last.2 += b - a,
                _ => pieces.push((a, phys, b - a)),
            }
        }
    }
    pieces
}

/// Like [`read_blocks`], for a device that shares its memory ([`BlockSource::read_shared`]):
/// the range as pieces that are views of the device's memory (and of `pending`'s blocks, and
/// of shared zeros for holes), in order, each a whole number of blocks, verified the same way,
/// with no copy of the data. `None` when the device does not share; the caller then reads with
/// [`read_blocks`].
pub fn read_blocks_shared<D: BlockSource>(
    dev: &D,
    (coll, obj): (&str, &str),
    extents: &ExtentMap,
    (lo, hi): (u64, u64),
    pending: &dyn Fn(u64) -> Option<Arc<Vec<u8>>>,
    block_crcs: &mut Vec<u32>,
) -> Result<Option<Vec<bytes::Bytes>>> {
    assert!(lo.is_multiple_of(BLOCK_BYTES) && hi.is_multiple_of(BLOCK_BYTES) && lo <= hi, "unaligned read {lo}..{hi}");
    // A range the device would not share as a whole is read the copying way without trying:
    // most reads of a disk (small ones, which it never shares) skip the attempt entirely.
    // (Runs of a longer range that it would share are then copied: a loss of nothing but speed.)
    if !dev.shares((hi - lo) as usize) {
        return Ok(None);
    }
    let block = BLOCK_BYTES as usize;
    block_crcs.clear();
    block_crcs.resize(((hi - lo) / BLOCK_BYTES) as usize, zero_block_crc());
    let mut out: Vec<bytes::Bytes> = Vec::new();
    let mut covered = lo;
    for (a, phys, len) in device_pieces(extents, lo, hi) {
        push_zeros(&mut out, (a - covered) as usize);
        // Blocks `pending` has come from it, never from the device (see `read_part`).
        let staged: Vec<Option<Arc<Vec<u8>>>> =
            (0..len / BLOCK_BYTES).map(|i| pending(phys + i * BLOCK_BYTES)).collect();
        let mut i = 0;
        while i < staged.len() {
            let at = a + (i * block) as u64;
            let first = out.len();
            if let Some(data) = &staged[i] {
                assert_eq!(data.len(), block, "a pending block of {} bytes", data.len());
                out.push(bytes::Bytes::from_owner(PendingBlock(data.clone())));
                i += 1;
            } else {
                let run = staged[i..].iter().take_while(|b| b.is_none()).count();
                let dev_at = phys + (i * block) as u64;
                let Some(views) = dev.read_shared(dev_at, run * block) else {
                    return Ok(None);
                };
                let views = views.map_err(unreadable((coll, obj), dev_at))?;
                debug_assert_eq!(views.iter().map(bytes::Bytes::len).sum::<usize>(), run * block);
                out.extend(views);
                i += run;
            }
            // Each view is verified while it is the one in hand.
            let mut x = at;
            for view in &out[first..] {
                assert!(view.len().is_multiple_of(block), "a device view of {} bytes", view.len());
                let idx = ((x - lo) / BLOCK_BYTES) as usize;
                verify((coll, obj), extents, (x, x + view.len() as u64), view, Some(&mut block_crcs[idx..]))?;
                x += view.len() as u64;
            }
        }
        covered = a + len;
    }
    push_zeros(&mut out, (hi - covered) as usize);
    Ok(Some(out))
}

/// The error of a device read of an object's blocks at `device_offset` that failed.
fn unreadable((coll, obj): (&str, &str), device_offset: u64) -> impl FnOnce(std::io::Error) -> StoreError {
    move |source| StoreError::Unreadable { coll: coll.to_string(), obj: obj.to_string(), device_offset, source }
}

/// A pending block (see [`read_blocks`]) as the owner of a shared read's piece.
struct PendingBlock(Arc<Vec<u8>>);

impl AsRef<[u8]> for PendingBlock {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

/// Appends `len` bytes of zeros (a hole) to `out`, as views of one static buffer.
fn push_zeros(out: &mut Vec<bytes::Bytes>, mut len: usize) {
    let zeros = &super::device::ZERO_CHUNK;
    while len > 0 {
        let n = len.min(zeros.len());
        out.push(bytes::Bytes::from_static(&zeros[..n]));
        len -= n;
    }
}

/// `parts` (together whole blocks whose crc32cs are `block_crcs`, each part whole blocks)
/// narrowed to `[at, at + len)`, and the crc32c of those bytes: joined from the blocks'
/// checksums, with only the partial first and last blocks read again.
pub fn slice_parts(parts: Vec<bytes::Bytes>, block_crcs: &[u32], at: usize, len: usize) -> (Vec<bytes::Bytes>, u32) {
    let block = BLOCK_BYTES as usize;
    let total: usize = parts.iter().map(bytes::Bytes::len).sum();
    assert!(at + len <= total && total == block_crcs.len() * block, "range outside the read blocks");
    let (mut kept, mut pos) = (Vec::with_capacity(parts.len()), 0usize);
    for p in parts {
        let (start, end) = (pos, pos + p.len());
        pos = end;
        let (a, b) = (start.max(at), end.min(at + len));
        if a < b {
            kept.push(p.slice(a - start..b - start));
        }
    }
    // The narrowed parts start at `at`; the partial first and last blocks' bytes are found by
    // offset among them.
    let append = |crc: u32, from: usize, to: usize| -> u32 {
        let (mut pos, mut crc) = (at, crc);
        for p in &kept {
            let (a, b) = (from.max(pos), to.min(pos + p.len()));
            if a < b {
                crc = crc32c_append(crc, &p[a - pos..b - pos]);
            }
            pos += p.len();
        }
        crc
    };
    let crc = crc_joined(block_crcs, at, len, &append);
    (kept, crc)
}

/// The crc32c of bytes `[at, at + len)` of whole blocks whose crc32cs are `block_crcs`: whole
/// blocks joined from their checksums, the partial first and last ones by `append(crc, from,
/// to)`, which extends `crc` over bytes `[from, to)`.
fn crc_joined(block_crcs: &[u32], at: usize, len: usize, append: &dyn Fn(u32, usize, usize) -> u32) -> u32 {
    let shift = shoal_util::block_shift();
    let block = BLOCK_BYTES as usize;
    let end = at + len;
    let mut crc = 0;
    let mut pos = at;
    while pos < end {
        let i = pos / block;
        let block_end = ((i + 1) * block).min(end);
        crc = if pos == i * block && block_end == (i + 1) * block {
            shift.concat(crc, block_crcs[i])
        } else {
            append(crc, pos, block_end)
        };
        pos = block_end;
    }
    crc
}

/// Fills `dst` with the blocks at device offset `phys`: from `pending` where it has them (data
/// not on the device yet), else from the device. Blocks `pending` has are never read from the
/// device, not even as part of a larger read: one written in place may be in flight to the
/// device right now (decision 0040), and a read over it could return, and leave in the device's
/// cache, half of it.
fn read_part<D: BlockSource>(
    dev: &D,
    (coll, obj): (&str, &str),
    dst: &mut [u8],
    phys: u64,
    pending: &dyn Fn(u64) -> Option<Arc<Vec<u8>>>,
) -> Result<()> {
    let block = BLOCK_BYTES as usize;
    let staged: Vec<Option<Arc<Vec<u8>>>> =
        (0..dst.len() / block).map(|i| pending(phys + (i * block) as u64)).collect();
    // Runs of blocks the device holds, each read at once.
    let mut i = 0;
    while i < staged.len() {
        if staged[i].is_some() {
            i += 1;
            continue;
        }
        let run = staged[i..].iter().take_while(|b| b.is_none()).count();
        let at = phys + (i * block) as u64;
        dev.read_at(&mut dst[i * block..(i + run) * block], at).map_err(unreadable((coll, obj), at))?;
        i += run;
    }
    for (i, data) in staged.iter().enumerate() {
        if let Some(data) = data {
            dst[i * block..(i + 1) * block].copy_from_slice(data);
        }
    }
    Ok(())
}

/// Verifies the blocks of the logical range `[x, y)`, read into `data`, against the checksums
/// of the extents that cover them; with `crcs`, records each block's crc32c (index 0 is the
/// block at `x`).
fn verify(
    (coll, obj): (&str, &str),
    extents: &ExtentMap,
    (x, y): (u64, u64),
    data: &[u8],
    mut crcs: Option<&mut [u32]>,
) -> Result<()> {
    let block = BLOCK_BYTES as usize;
    // The extent that starts at or before `x` (it may cover it), then those starting inside.
    let covering = extents.range(..=x).next_back().into_iter().chain(extents.range(x + 1..y));
    for (&off, e) in covering {
        let (a, b) = (x.max(off), y.min(off + e.len_bytes));
        if a >= b {
            continue;
        }
        let first_block = ((a - off) / BLOCK_BYTES) as usize;
        let region = &data[(a - x) as usize..(b - x) as usize];
        for (i, chunk) in region.chunks_exact(block).enumerate() {
            let crc = crc32c(chunk);
            if e.csums.get(first_block + i).copied() != Some(crc) {
                return Err(StoreError::Checksum {
                    coll: coll.to_string(),
                    obj: obj.to_string(),
                    offset: a + (i * block) as u64,
                    device_offset: e.phys + (a - off) + (i * block) as u64,
                });
            }
            if let Some(crcs) = crcs.as_deref_mut() {
                crcs[((a - x) / BLOCK_BYTES) as usize + i] = crc;
            }
        }
    }
    Ok(())
}

/// The crc32c of `buf[at..at + len]`, where `buf` holds whole blocks whose crc32cs are
/// `block_crcs` (from [`read_blocks`]): whole blocks inside the range are joined from their
/// checksums, and only the partial first and last blocks are read again.
pub fn range_crc(buf: &[u8], block_crcs: &[u32], at: usize, len: usize) -> u32 {
    let block = BLOCK_BYTES as usize;
    assert!(at + len <= buf.len() && buf.len() == block_crcs.len() * block, "range outside the read blocks");
    crc_joined(block_crcs, at, len, &|crc, from, to| crc32c_append(crc, &buf[from..to]))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One keyspace's entries, as a scan and a point read see them.
    struct Map(BTreeMap<Vec<u8>, Vec<u8>>);

    impl KvRead for Map {
        fn get(&self, _ks: Ks, key: &[u8]) -> Result<Option<Vec<u8>>> {
            Ok(self.0.get(key).cloned())
        }
        fn scan(
            &self,
            _ks: Ks,
            lo: &[u8],
            hi: Option<&[u8]>,
            visit: &mut dyn FnMut(&[u8], &[u8]) -> bool,
        ) -> Result<()> {
            for (k, v) in self.0.range(lo.to_vec()..) {
                if hi.is_some_and(|hi| k.as_slice() >= hi) || !visit(k, v) {
                    break;
                }
            }
            Ok(())
        }
    }

    /// Cuts `[0, size)` of an object into records (and holes) of random block counts up to
    /// [`MAX_EXTENT_BYTES`], some starting on its boundaries as a sequential writer's do.
    fn records(prefix: &[u8], size: u64, cuts: &[(u8, bool, bool)], map: &mut BTreeMap<Vec<u8>, Vec<u8>>) {
        let max_blocks = MAX_EXTENT_BYTES / BLOCK_BYTES;
        let mut at = 0;
        for &(blocks, hole, to_boundary) in cuts.iter().cycle() {
            if at >= size {
                break;
            }
            let mut len = (u64::from(blocks) % max_blocks + 1) * BLOCK_BYTES;
            if to_boundary {
                len = (at + 1).next_multiple_of(MAX_EXTENT_BYTES) - at;
            }
            len = len.min(size - at);
            if !hole {
                let e = Extent { phys: at * 7, len_bytes: len, csums: vec![at as u32; (len / BLOCK_BYTES) as usize] };
                map.insert(layout::extent_key(prefix, at + len), layout::encode(&e));
            }
            at += len;
        }
    }

    proptest::proptest! {
        /// Whenever the point reads find a record, it is exactly what a scan of the same view
        /// returns for the range; and they find it whenever one record covers the range and ends
        /// on a guessed key.
        #[test]
        fn a_covering_record_found_by_point_reads_is_what_the_scan_finds(
            size_blocks in 1u64..1200,
            cuts in proptest::collection::vec((proptest::num::u8::ANY, proptest::bool::weighted(0.2), proptest::bool::weighted(0.3)), 1..40),
            ranges in proptest::collection::vec((0u64..1200, 1u64..300), 1..40),
        ) {
            let size = size_blocks * BLOCK_BYTES;
            let prefix = layout::child_prefix("c", "obj");
            let mut map = BTreeMap::new();
            // Neighbours under prefixes sorting on either side, which neither read may return.
            records(&layout::child_prefix("c", "ob"), 4 * MAX_EXTENT_BYTES, &[(255, false, true)], &mut map);
            records(&layout::child_prefix("c", "obk"), 4 * MAX_EXTENT_BYTES, &[(3, false, false)], &mut map);
            records(&prefix, size, &cuts, &mut map);
            let view = Map(map);
            for (first, blocks) in ranges {
                let lo = (first % size_blocks) * BLOCK_BYTES;
                let hi = (lo + blocks * BLOCK_BYTES).min(size);
                let scanned = scan_extents(&view, &prefix, lo, hi, size, &|_| false).unwrap().map(|s| s.map).unwrap_or_default();
                let found = covering_extent(|k: &[u8]| view.get(Ks::Extents, k), &prefix, lo, hi, size).unwrap();
                if let Some(found) = &found {
                    proptest::prop_assert_eq!(found, &scanned, "[{}, {})", lo, hi);
                }
                let single = match scanned.iter().next() {
                    Some((&start, e)) if scanned.len() == 1 && start <= lo && start + e.len_bytes >= hi => Some(start + e.len_bytes),
                    _ => None,
                };
                if let Some(end) = single {
                    let guessed = end == hi || end == size || end == hi.next_multiple_of(MAX_EXTENT_BYTES);
                    proptest::prop_assert_eq!(found.is_some(), guessed, "[{}, {}) in a record ending at {}", lo, hi, end);
                } else {
                    proptest::prop_assert!(found.is_none(), "[{}, {}) is not inside one record", lo, hi);
                }
            }
        }
    }
}
