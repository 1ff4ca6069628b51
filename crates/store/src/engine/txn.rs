//! Planning a transaction: every operation is applied to an in-memory overlay of the metadata,
//! so that later operations see earlier ones and nothing reaches the KV store or the device
//! unless the whole transaction succeeds.
//!
//! The result of planning is a [`Plan`]: the metadata batch, the device writes of large data,
//! the space freed and the space allocated. The engine then performs it (see `mod.rs`).

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::Arc;

use shoal_util::{AlignedBuf, BlockCrcs, BufPool, crc32c_blocks};

use super::alloc::Allocator;
use super::device::{BLOCK_BYTES, Device};
use super::kv::{ALL_KEYSPACES, Batch, Ks, KvRead};
use super::layout::{self, Extent, MAX_EXTENT_BYTES, Onode};
use super::read::{ExtentMap, covering_extent, read_blocks, scan_extents};
use crate::api::Op;
use crate::error::{Result, StoreError};
use crate::names;

/// Data bound for the device: a buffer of the engine's own, a block-aligned window of a
/// caller's aligned buffer, or (for a device that does not need aligned memory) whole blocks of
/// a caller's shared buffer; the last two are written without a copy.
pub enum DirectData {
    Owned(AlignedBuf),
    Shared(Arc<AlignedBuf>, std::ops::Range<usize>),
    Bytes(bytes::Bytes),
}

impl std::ops::Deref for DirectData {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            DirectData::Owned(b) => b,
            DirectData::Shared(b, range) => &b[range.clone()],
            DirectData::Bytes(b) => b,
        }
    }
}

/// Writes at least this large have their checksums computed while their data is already on
/// its way to the device (see `Device::write_then`).
pub const OVERLAP_MIN_BYTES: u64 = 1 << 20;

/// Largest write that may overwrite an object's blocks in place (decision 0040); larger writes
/// go to new blocks, where their data is written once instead of twice. Measured with `shoal
/// store bench` (sync overwrites at random places): at 64 KiB in place ran at 180–191 MB/s, copy
/// on write at 306–309 (and its re-read was as fast: records of 64 KiB fragment little); at
/// 4 KiB in place is what keeps a rewritten image readable (see the decision).
pub const INPLACE_MAX_BYTES: u64 = 16 << 10;

/// An extent record whose checksums are still to be computed, from `direct[direct_index]`.
pub struct PendingCsums {
    pub key: Vec<u8>,
    pub phys: u64,
    pub len_bytes: u64,
    pub direct_index: usize,
    /// Offset of the extent's bytes in that buffer.
    pub from: usize,
}

/// What a finished plan asks the engine to do.
pub struct Planned {
    /// Extent records in `batch` whose checksums must be filled in before it is committed.
    pub pending_csums: Vec<PendingCsums>,
    /// Objects the transaction creates minus those it removes, per collection (only collections
    /// whose count changes), and collections created minus removed.
    pub objects_delta: BTreeMap<String, i64>,
    pub collections_delta: i64,
    /// The metadata batch, free-space records included.
    pub batch: Batch,
    /// Space to make reusable once the commit is durable.
    pub frees: Vec<(u64, u64)>,
    /// Data to write to newly allocated blocks.
    pub direct: Vec<(u64, DirectData)>,
    /// Data to write in place, over blocks the metadata already points at (decision 0040):
    /// `(device offset, whole blocks)`, in the order the transaction wrote them.
    pub inplace: Vec<(u64, AlignedBuf)>,
}

/// A block (by device offset) written by a transaction staged earlier, not on the device yet.
pub type StagedBlock<'a> = dyn Fn(u64) -> Option<Arc<Vec<u8>>> + 'a;

pub struct Plan<'a, R: KvRead, D: Device> {
    kv: &'a R,
    dev: &'a D,
    staged: &'a StagedBlock<'a>,
    pool: &'a BufPool,
    alloc: &'a mut Allocator,
    now_ns: i64,
    /// Changes planned so far, one map per keyspace (indexed by `Ks as usize`) so that lookups
    /// borrow the caller's key instead of building a `(Ks, Vec<u8>)` for every probe.
    overlay: [BTreeMap<Vec<u8>, Option<Vec<u8>>>; ALL_KEYSPACES.len()],
    /// Extents allocated by this plan, returned to the allocator if the plan is abandoned.
    pub allocated: Vec<(u64, u64)>,
    /// Extents this plan stops using; they become reusable once the plan's commit is durable.
    pub frees: Vec<(u64, u64)>,
    /// Data to write to newly allocated blocks before the metadata commit.
    pub direct: Vec<(u64, DirectData)>,
    /// No extent of the object the current operation works on ends past this (its size at the
    /// start of the operation, in whole blocks). Bounds extent scans, which matters in an LSM
    /// store: a scan also walks the tombstones of deleted records in its range.
    extent_end_bound: u64,
    /// Whether the current operation's large writes may leave their checksums for later: only
    /// when no later operation of the transaction touches the same object (nothing will read
    /// or split those records before the commit).
    defer_csums: bool,
    pending_csums: Vec<PendingCsums>,
    /// Objects and collections created minus removed so far (the engine keeps counts, so that
    /// its usage never scans every object), objects per collection.
    objects_delta: BTreeMap<String, i64>,
    collections_delta: i64,
    /// Whether small overwrites may go in place (see [`INPLACE_MAX_BYTES`]).
    inplace_ok: bool,
    inplace: Vec<(u64, AlignedBuf)>,
}

impl<'a, R: KvRead, D: Device> Plan<'a, R, D> {
    pub fn new(
        kv: &'a R,
        dev: &'a D,
        staged: &'a StagedBlock<'a>,
        pool: &'a BufPool,
        alloc: &'a mut Allocator,
        now_ns: i64,
    ) -> Self {
        Self {
            kv,
            dev,
            staged,
            pool,
            alloc,
            now_ns,
            overlay: Default::default(),
            allocated: Vec::new(),
            frees: Vec::new(),
            direct: Vec::new(),
            extent_end_bound: 0,
            defer_csums: false,
            pending_csums: Vec::new(),
            objects_delta: BTreeMap::new(),
            collections_delta: 0,
            inplace_ok: false,
            inplace: Vec::new(),
        }
    }

    /// Lets small overwrites of blocks the object already has go in place.
    #[must_use]
    pub fn with_inplace(mut self, allowed: bool) -> Self {
        self.inplace_ok = allowed;
        self
    }

    /// Returns everything allocated by an abandoned plan to the allocator.
    pub fn abandon(self) {
        for (off, len) in self.allocated {
            self.alloc.release(off, len);
        }
    }

    /// Turns the plan into the metadata batch: the overlay, the pending frees (recorded as free
    /// on disk now; reused in memory only after the batch is durable) and the allocator's
    /// changed entries.
    pub fn into_batch(self) -> Planned {
        debug_assert!(
            self.direct.iter().all(|(p, b)| p % BLOCK_BYTES == 0 && (b.len() as u64).is_multiple_of(BLOCK_BYTES))
        );
        let mut batch = Batch::default();
        for (off, len) in self.alloc.drain_changes() {
            match len {
                Some(len) => batch.put(Ks::Free, layout::u64_key(off), layout::u64_key(len)),
                None => batch.delete(Ks::Free, layout::u64_key(off)),
            }
        }
        for &(off, len) in &self.frees {
            batch.put(Ks::Free, layout::u64_key(off), layout::u64_key(len));
        }
        for (ks, changes) in ALL_KEYSPACES.into_iter().zip(self.overlay) {
            for (key, value) in changes {
                match value {
                    Some(v) => batch.put(ks, key, v),
                    None => batch.delete(ks, key),
                }
            }
        }
        Planned {
            batch,
            frees: self.frees,
            direct: self.direct,
            pending_csums: self.pending_csums,
            objects_delta: self.objects_delta,
            collections_delta: self.collections_delta,
            inplace: self.inplace,
        }
    }

    /// Notes that the transaction creates (`1`) or removes (`-1`) an object of `coll`.
    fn count_object(&mut self, coll: &str, delta: i64) {
        match self.objects_delta.get_mut(coll) {
            Some(d) => *d += delta,
            None => {
                self.objects_delta.insert(coll.to_string(), delta);
            }
        }
    }

    // -- overlay access -----------------------------------------------------------------------

    fn get(&self, ks: Ks, key: &[u8]) -> Result<Option<Vec<u8>>> {
        match self.overlay[ks as usize].get(key) {
            Some(v) => Ok(v.clone()),
            None => self.kv.get(ks, key),
        }
    }

    fn put(&mut self, ks: Ks, key: Vec<u8>, value: Vec<u8>) {
        self.overlay[ks as usize].insert(key, Some(value));
    }

    fn delete(&mut self, ks: Ks, key: Vec<u8>) {
        self.overlay[ks as usize].insert(key, None);
    }

    /// Entries with `lo <= key < hi` as the transaction sees them, up to `limit`.
    fn scan(&self, ks: Ks, lo: &[u8], hi: Option<&[u8]>, limit: usize) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let mut merged: BTreeMap<Vec<u8>, Option<Vec<u8>>> = BTreeMap::new();
        // Over-read by the number of overlay deletes in range so that `limit` live entries remain.
        // (`range` panics on an inverted range; an inverted request is simply empty.)
        let overlay: Vec<_> = if hi.is_some_and(|h| h < lo) {
            Vec::new()
        } else {
            let upper = hi.map_or(Bound::Unbounded, Bound::Excluded);
            let changes = self.overlay[ks as usize].range::<[u8], _>((Bound::Included(lo), upper));
            changes.map(|(k, v)| (k.clone(), v.clone())).collect()
        };
        let want = limit.saturating_add(overlay.len());
        self.kv.scan(ks, lo, hi, &mut |k, v| {
            merged.insert(k.to_vec(), Some(v.to_vec()));
            merged.len() < want
        })?;
        // If the KV scan stopped early, entries past its last key are not complete: only keep
        // overlay entries up to that point.
        let kv_complete = merged.len() < want;
        let kv_last = merged.keys().next_back().cloned();
        for (k, v) in overlay {
            if kv_complete || kv_last.as_ref().is_some_and(|last| &k <= last) {
                merged.insert(k, v);
            }
        }
        Ok(merged.into_iter().filter_map(|(k, v)| v.map(|v| (k, v))).take(limit).collect())
    }

    fn scan_prefix_keys(&self, ks: Ks, prefix: &[u8]) -> Result<Vec<Vec<u8>>> {
        let end = layout::prefix_end(prefix);
        Ok(self.scan(ks, prefix, end.as_deref(), usize::MAX)?.into_iter().map(|(k, _)| k).collect())
    }

    fn require_collection(&self, coll: &str) -> Result<()> {
        match self.get(Ks::Colls, coll.as_bytes())? {
            Some(_) => Ok(()),
            None => Err(StoreError::NoSuchCollection(coll.to_string())),
        }
    }

    fn onode(&self, coll: &str, obj: &str) -> Result<Option<Onode>> {
        match self.get(Ks::Onodes, &layout::object_key(coll, obj))? {
            Some(bytes) => Ok(Some(Onode::decode(&bytes)?)),
            None => Ok(None),
        }
    }

    fn require_onode(&self, coll: &str, obj: &str) -> Result<Onode> {
        self.require_collection(coll)?;
        self.onode(coll, obj)?.ok_or_else(|| StoreError::NoSuchObject { coll: coll.to_string(), obj: obj.to_string() })
    }

    fn put_onode(&mut self, coll: &str, obj: &str, onode: Onode) {
        self.put(Ks::Onodes, layout::object_key(coll, obj), layout::encode(&onode));
    }

    /// Extent records overlapping `[lo, hi)` of an object, as the transaction sees them, by
    /// logical start: the one record covering the range when a point read of a likely key finds
    /// it ([`covering_extent`], on stores that prefer point reads), else a scan
    /// ([`scan_extents`]).
    fn extents(&self, prefix: &[u8], lo: u64, hi: u64) -> Result<ExtentMap> {
        if lo < hi && self.kv.prefers_point_reads() {
            let get = |k: &[u8]| self.get(Ks::Extents, k);
            if let Some(map) = covering_extent(get, prefix, lo, hi, self.extent_end_bound)? {
                return Ok(map);
            }
        }
        let skip = |k: &[u8]| self.overlay[Ks::Extents as usize].contains_key(k);
        let Some(scan) = scan_extents(self.kv, prefix, lo, hi, self.extent_end_bound, &skip)? else {
            return Ok(ExtentMap::new());
        };
        let mut map = scan.map;
        // Merge the overlay's records in the range the scan covered. In a consistent view
        // records never overlap, so none at or past the point where the scan stopped can start
        // before `hi`.
        let staged = self.overlay[Ks::Extents as usize]
            .range::<[u8], _>((Bound::Included(scan.from.as_slice()), Bound::Unbounded))
            .take_while(|(k, _)| **k < scan.upper);
        for (k, v) in staged {
            if let Some(v) = v {
                let (start, e) = layout::decode_extent(k, v)?;
                if start < hi {
                    map.insert(start, e);
                }
            }
        }
        Ok(map)
    }

    // -- space --------------------------------------------------------------------------------

    fn allocate(&mut self, len: u64) -> Result<Vec<(u64, u64)>> {
        let pieces = self.alloc.allocate(len)?;
        self.allocated.extend_from_slice(&pieces);
        Ok(pieces)
    }

    /// Stops using `[off, off + len)`.
    fn free(&mut self, off: u64, len: u64) {
        self.frees.push((off, len));
    }

    /// Removes the block-aligned logical range `[lo, hi)` from the object's extent map and
    /// frees the device space it used.
    fn punch(&mut self, prefix: &[u8], lo: u64, hi: u64) -> Result<()> {
        let extents = self.extents(prefix, lo, hi)?;
        self.punch_extents(prefix, lo, hi, extents);
        Ok(())
    }

    /// [`Self::punch`] given `extents`, the records overlapping `[lo, hi)` as the plan sees them
    /// now (read by the caller, with nothing changed since).
    fn punch_extents(&mut self, prefix: &[u8], lo: u64, hi: u64, extents: ExtentMap) {
        debug_assert!(lo.is_multiple_of(BLOCK_BYTES) && hi.is_multiple_of(BLOCK_BYTES) && lo <= hi);
        for (off, e) in extents {
            let end = off + e.len_bytes;
            if off >= hi || end <= lo {
                continue;
            }
            self.delete(Ks::Extents, layout::extent_key(prefix, end));
            let cut_lo = lo.max(off);
            let cut_hi = hi.min(end);
            if off < cut_lo {
                let keep = sub_extent(&e, 0, cut_lo - off);
                self.put(Ks::Extents, layout::extent_key(prefix, cut_lo), layout::encode_extent_record(&keep));
            }
            if end > cut_hi {
                let keep = sub_extent(&e, cut_hi - off, end - cut_hi);
                self.put(Ks::Extents, layout::extent_key(prefix, end), layout::encode_extent_record(&keep));
            }
            self.free(e.phys + (cut_lo - off), cut_hi - cut_lo);
        }
    }

    /// Reads the block-aligned logical range `[lo, hi)` as the transaction sees it.
    fn read_aligned(&self, coll: &str, obj: &str, lo: u64, hi: u64) -> Result<AlignedBuf> {
        let prefix = layout::child_prefix(coll, obj);
        let extents = self.extents(&prefix, lo, hi)?;
        read_blocks(
            self.dev,
            (coll, obj),
            &extents,
            (lo, hi),
            &|phys| {
                // Data planned earlier in this transaction is not on the device yet; the newest
                // in-place write of a block is its newest contents.
                for (at, buf) in self.inplace.iter().rev() {
                    if phys >= *at && phys < *at + buf.len() as u64 {
                        let from = (phys - at) as usize;
                        return Some(Arc::new(buf[from..from + BLOCK_BYTES as usize].to_vec()));
                    }
                }
                for (at, buf) in &self.direct {
                    if phys >= *at && phys < *at + buf.len() as u64 {
                        let from = (phys - at) as usize;
                        return Some(Arc::new(buf[from..from + BLOCK_BYTES as usize].to_vec()));
                    }
                }
                // So is data of transactions staged before this one.
                (self.staged)(phys)
            },
            self.pool,
            None,
        )
    }

    /// Writes `data` at logical offset `off` into fresh blocks (copy-on-write at block
    /// granularity), merging partially covered edge blocks with their current content.
    fn write_data(&mut self, coll: &str, obj: &str, size: u64, off: u64, data: &[u8]) -> Result<()> {
        let end = off + data.len() as u64;
        let lo = off / BLOCK_BYTES * BLOCK_BYTES;
        let hi = end.div_ceil(BLOCK_BYTES) * BLOCK_BYTES;
        let mut buf = self.pool.take((hi - lo) as usize);
        // The data below overwrites everything but the edge blocks, which may hold old bytes
        // from the pool: clear them first.
        let edge = BLOCK_BYTES as usize;
        buf[..edge].fill(0);
        let n = buf.len();
        buf[n - edge..].fill(0);
        // Edge blocks that the write only partly covers keep their other bytes. Blocks at or
        // past the old end hold nothing yet and stay zero.
        if off > lo && lo < size {
            let old = self.read_aligned(coll, obj, lo, lo + BLOCK_BYTES)?;
            buf[..BLOCK_BYTES as usize].copy_from_slice(&old);
        }
        let last = hi - BLOCK_BYTES;
        if end < hi && last < size && (last > lo || off == lo) {
            let old = self.read_aligned(coll, obj, last, hi)?;
            let at = (last - lo) as usize;
            buf[at..].copy_from_slice(&old);
        }
        let at = (off - lo) as usize;
        buf[at..at + data.len()].copy_from_slice(data);
        self.store_blocks(coll, obj, lo, DirectData::Owned(buf), None)
    }

    /// Replaces the block-aligned logical range starting at `lo` with the blocks in `src`.
    /// `known`, when given, holds the crc32c of every block of `src` (the caller vouches for
    /// them, see [`crate::Data::Summed`]): they are stored instead of computed.
    fn store_blocks(
        &mut self,
        coll: &str,
        obj: &str,
        lo: u64,
        src: DirectData,
        known: Option<&BlockCrcs>,
    ) -> Result<()> {
        let prefix = layout::child_prefix(coll, obj);
        let len = src.len() as u64;
        assert!(
            known.is_none_or(|k| k.len() as u64 * BLOCK_BYTES == len),
            "{} known block checksums for {len} bytes",
            known.map_or(0, BlockCrcs::len)
        );
        let known = known.map(BlockCrcs::as_slice);
        // The checksums of the whole blocks of `data`, which are the bytes of `src` from offset
        // `from` on.
        let csums_of = |data: &[u8], from: u64| -> Vec<u32> {
            match known {
                Some(k) => {
                    let first = (from / BLOCK_BYTES) as usize;
                    k[first..first + data.len() / BLOCK_BYTES as usize].to_vec()
                }
                None => crc32c_blocks(data, BLOCK_BYTES as usize),
            }
        };
        // The records a declined in-place overwrite read are the ones the punch removes: nothing
        // changed in between, so they are not looked up twice.
        let extents = if self.inplace_ok && len <= INPLACE_MAX_BYTES {
            match self.overwrite_in_place(&prefix, lo, &src, &csums_of)? {
                None => return Ok(()),
                Some(extents) => extents,
            }
        } else {
            self.extents(&prefix, lo, lo + len)?
        };
        self.punch_extents(&prefix, lo, lo + len, extents);
        let pieces = self.allocate(len)?;
        // Several pieces share one buffer: turn an owned buffer into a shared one.
        let src = match src {
            DirectData::Owned(b) if pieces.len() > 1 => {
                let n = b.len();
                DirectData::Shared(Arc::new(b), 0..n)
            }
            other => other,
        };
        let mut src = Some(src);
        let mut logical = lo;
        let n_pieces = pieces.len();
        for (i, (phys, plen)) in pieces.into_iter().enumerate() {
            let start = (logical - lo) as usize;
            let Some(whole) = &src else { unreachable!("buffer moved before the last piece") };
            let bytes = &whole[start..start + plen as usize];
            // Records are at most MAX_EXTENT_BYTES long so that each stays small. Checksums the
            // caller knows need no pass to defer.
            let defer = self.defer_csums && len >= OVERLAP_MIN_BYTES && known.is_none();
            let direct_index = self.direct.len();
            let mut done = 0u64;
            while done < plen {
                let n = (plen - done).min(MAX_EXTENT_BYTES);
                let key = layout::extent_key(&prefix, logical + done + n);
                if defer {
                    self.pending_csums.push(PendingCsums {
                        key: key.clone(),
                        phys: phys + done,
                        len_bytes: n,
                        direct_index,
                        from: done as usize,
                    });
                    // A placeholder; the commit replaces it before anything can read it.
                    let e = Extent { phys: phys + done, len_bytes: n, csums: Vec::new() };
                    self.put(Ks::Extents, key, layout::encode_extent_record(&e));
                } else {
                    let slice = &bytes[done as usize..(done + n) as usize];
                    let e = Extent { phys: phys + done, len_bytes: n, csums: csums_of(slice, start as u64 + done) };
                    self.put(Ks::Extents, key, layout::encode_extent_record(&e));
                }
                done += n;
            }
            let data = match &src {
                Some(DirectData::Shared(b, range)) if n_pieces > 1 || i > 0 => {
                    let from = range.start + start;
                    DirectData::Shared(Arc::clone(b), from..from + plen as usize)
                }
                Some(DirectData::Bytes(b)) if n_pieces > 1 || i > 0 => {
                    DirectData::Bytes(b.slice(start..start + plen as usize))
                }
                _ => src.take().unwrap_or_else(|| unreachable!("a single piece takes the buffer once")),
            };
            self.direct.push((phys, data));
            logical += plen;
        }
        Ok(())
    }

    /// Overwrites the block-aligned range `[lo, lo + src.len())` in place if every block of it
    /// is already stored, in blocks this plan did not allocate (their data is still in `direct`):
    /// the extent records keep their device blocks and get the new checksums, and the data joins
    /// `inplace`. Returns `None` if it did; if not, nothing changed, and it returns the records
    /// overlapping the range (for the caller's copy-on-write, which replaces them).
    ///
    /// Why: copy-on-write splits the record a small overwrite lands in into up to three, frees
    /// and allocates space, and scatters an object's blocks over the device. Under random 4 KiB
    /// writes an image's 4 MiB objects fragmented into hundreds of records each, which every
    /// later write scans and every read walks (a sequential read of such an image fell from 883
    /// to 180 MB/s). In place, the record stays whole and one put replaces it.
    /// `csums_of(data, from)` returns the checksums of `data`, the bytes of `src` from `from`.
    fn overwrite_in_place(
        &mut self,
        prefix: &[u8],
        lo: u64,
        src: &[u8],
        csums_of: &dyn Fn(&[u8], u64) -> Vec<u32>,
    ) -> Result<Option<ExtentMap>> {
        let hi = lo + src.len() as u64;
        let extents = self.extents(prefix, lo, hi)?;
        let mut covered = lo;
        let mut whole = true;
        for (&off, e) in &extents {
            let (a, b) = (lo.max(off), hi.min(off + e.len_bytes));
            if a >= b {
                continue;
            }
            let phys = e.phys + (a - off);
            let fresh = self.allocated.iter().any(|&(at, n)| phys < at + n && at < phys + (b - a));
            if a != covered || fresh || e.csums.len() as u64 != e.len_bytes / BLOCK_BYTES {
                whole = false;
                break;
            }
            covered = b;
        }
        if !whole || covered != hi {
            return Ok(Some(extents)); // a hole, or blocks new in this plan: copy-on-write
        }
        for (off, mut e) in extents {
            let (a, b) = (lo.max(off), hi.min(off + e.len_bytes));
            if a >= b {
                continue;
            }
            let data = &src[(a - lo) as usize..(b - lo) as usize];
            let first = ((a - off) / BLOCK_BYTES) as usize;
            for (i, crc) in csums_of(data, a - lo).into_iter().enumerate() {
                e.csums[first + i] = crc;
            }
            let mut copy = self.pool.take(data.len());
            copy.copy_from_slice(data);
            self.inplace.push((e.phys + (a - off), copy));
            let end = off + e.len_bytes;
            self.put(Ks::Extents, layout::extent_key(prefix, end), layout::encode_extent_record(&e));
        }
        Ok(None)
    }

    fn truncate(&mut self, coll: &str, obj: &str, onode: &mut Onode, new_size: u64) -> Result<()> {
        let old = onode.size_bytes;
        if new_size < old {
            let prefix = layout::child_prefix(coll, obj);
            let keep_hi = new_size.div_ceil(BLOCK_BYTES) * BLOCK_BYTES;
            self.punch(&prefix, keep_hi, old.div_ceil(BLOCK_BYTES) * BLOCK_BYTES)?;
            // Bytes past the new end inside its last block must read as zeros if the object
            // grows again, so that block is rewritten with its tail cleared.
            let tail = new_size % BLOCK_BYTES;
            if tail != 0 {
                let lo = keep_hi - BLOCK_BYTES;
                let has_data = !self.extents(&prefix, lo, keep_hi)?.is_empty();
                if has_data {
                    let mut block = AlignedBuf::zeroed(BLOCK_BYTES as usize);
                    let old_block = self.read_aligned(coll, obj, lo, keep_hi)?;
                    block[..tail as usize].copy_from_slice(&old_block[..tail as usize]);
                    self.store_blocks(coll, obj, lo, DirectData::Owned(block), None)?;
                }
            }
        }
        onode.size_bytes = new_size;
        Ok(())
    }

    fn remove_children(&mut self, ks: Ks, coll: &str, obj: &str) -> Result<()> {
        for k in self.scan_prefix_keys(ks, &layout::child_prefix(coll, obj))? {
            self.delete(ks, k);
        }
        Ok(())
    }

    // -- operations ---------------------------------------------------------------------------

    /// Sets the extent scan bound for an object whose size is `size_bytes`.
    fn bound_extents(&mut self, size_bytes: u64) {
        self.extent_end_bound = size_bytes.div_ceil(BLOCK_BYTES) * BLOCK_BYTES;
    }

    /// Applies one operation to the plan. `last_for_object` says that no later operation of
    /// the transaction names the same object.
    pub fn apply(&mut self, op: &Op, last_for_object: bool) -> Result<()> {
        self.defer_csums = last_for_object;
        match op {
            Op::CreateCollection { coll } => {
                names::check_collection(coll)?;
                if self.get(Ks::Colls, coll.as_bytes())?.is_some() {
                    return Err(StoreError::CollectionExists(coll.clone()));
                }
                self.put(Ks::Colls, coll.as_bytes().to_vec(), Vec::new());
                self.collections_delta += 1;
            }
            Op::RemoveCollection { coll } => {
                self.require_collection(coll)?;
                let prefix = layout::collection_prefix(coll);
                let end = layout::prefix_end(&prefix);
                if !self.scan(Ks::Onodes, &prefix, end.as_deref(), 1)?.is_empty() {
                    return Err(StoreError::CollectionNotEmpty(coll.clone()));
                }
                self.delete(Ks::Colls, coll.as_bytes().to_vec());
                self.collections_delta -= 1;
            }
            Op::Touch { coll, obj } => {
                names::check_object(obj)?;
                self.require_collection(coll)?;
                let found = self.onode(coll, obj)?;
                if found.is_none() {
                    self.count_object(coll, 1);
                }
                let mut onode = found.unwrap_or_else(Onode::empty);
                onode.mtime_ns = self.now_ns;
                self.put_onode(coll, obj, onode);
            }
            Op::Write { coll, obj, offset, data } => {
                names::check_object(obj)?;
                names::check_extent(coll, obj, *offset, data.len() as u64)?;
                self.require_collection(coll)?;
                let found = self.onode(coll, obj)?;
                if found.is_none() {
                    self.count_object(coll, 1);
                }
                let mut onode = found.unwrap_or_else(Onode::empty);
                self.bound_extents(onode.size_bytes);
                let aligned = offset % BLOCK_BYTES == 0 && (data.len() as u64).is_multiple_of(BLOCK_BYTES);
                // Whole blocks go to the device as they are, from an aligned buffer, from shared
                // bytes that happen to start on a block boundary (a large payload the messenger
                // read into aligned memory), or from any buffer when the device does not need
                // aligned memory (no direct I/O).
                let as_they_are = match data {
                    _ if !aligned || data.is_empty() => None,
                    crate::api::Data::Aligned(buf) => Some((DirectData::Shared(Arc::clone(buf), 0..buf.len()), None)),
                    crate::api::Data::Shared(bytes) | crate::api::Data::Summed(bytes, _)
                        if !self.dev.direct_io() || bytes.as_ptr().addr().is_multiple_of(BLOCK_BYTES as usize) =>
                    {
                        let known = match data {
                            crate::api::Data::Summed(_, crcs) => Some(crcs),
                            _ => None,
                        };
                        Some((DirectData::Bytes(bytes.clone()), known))
                    }
                    crate::api::Data::Shared(_) | crate::api::Data::Summed(..) => None,
                };
                if let Some((window, known)) = as_they_are {
                    self.store_blocks(coll, obj, *offset, window, known)?;
                    onode.size_bytes = onode.size_bytes.max(offset + data.len() as u64);
                } else if !data.is_empty() {
                    self.write_data(coll, obj, onode.size_bytes, *offset, data)?;
                    onode.size_bytes = onode.size_bytes.max(offset + data.len() as u64);
                }
                onode.mtime_ns = self.now_ns;
                self.put_onode(coll, obj, onode);
            }
            Op::Truncate { coll, obj, size_bytes } => {
                names::check_extent(coll, obj, *size_bytes, 0)?;
                let mut onode = self.require_onode(coll, obj)?;
                self.bound_extents(onode.size_bytes);
                self.truncate(coll, obj, &mut onode, *size_bytes)?;
                onode.mtime_ns = self.now_ns;
                self.put_onode(coll, obj, onode);
            }
            Op::Remove { coll, obj } => {
                let onode = self.require_onode(coll, obj)?;
                self.bound_extents(onode.size_bytes);
                let prefix = layout::child_prefix(coll, obj);
                self.punch(&prefix, 0, onode.size_bytes.div_ceil(BLOCK_BYTES) * BLOCK_BYTES)?;
                self.remove_children(Ks::Xattrs, coll, obj)?;
                self.remove_children(Ks::Omap, coll, obj)?;
                self.delete(Ks::Onodes, layout::object_key(coll, obj));
                self.count_object(coll, -1);
            }
            Op::SetVersion { coll, obj, version } => {
                let mut onode = self.require_onode(coll, obj)?;
                onode.version = *version;
                self.put_onode(coll, obj, onode);
            }
            Op::SetXattr { coll, obj, name, value } => {
                names::check_xattr(name)?;
                names::check_value("xattr", value)?;
                self.require_onode(coll, obj)?;
                let key = layout::child_key(&layout::child_prefix(coll, obj), name.as_bytes());
                self.put(Ks::Xattrs, key, value.clone());
            }
            Op::RemoveXattr { coll, obj, name } => {
                names::check_xattr(name)?;
                self.require_onode(coll, obj)?;
                self.delete(Ks::Xattrs, layout::child_key(&layout::child_prefix(coll, obj), name.as_bytes()));
            }
            Op::OmapSet { coll, obj, entries } => {
                self.require_onode(coll, obj)?;
                let prefix = layout::child_prefix(coll, obj);
                for (k, v) in entries {
                    names::check_omap_key(k)?;
                    names::check_value("omap", v)?;
                    self.put(Ks::Omap, layout::child_key(&prefix, k), v.clone());
                }
            }
            Op::OmapRemove { coll, obj, keys } => {
                self.require_onode(coll, obj)?;
                let prefix = layout::child_prefix(coll, obj);
                for k in keys {
                    names::check_omap_key(k)?;
                    self.delete(Ks::Omap, layout::child_key(&prefix, k));
                }
            }
            Op::OmapClear { coll, obj } => {
                self.require_onode(coll, obj)?;
                self.remove_children(Ks::Omap, coll, obj)?;
            }
        }
        Ok(())
    }
}

/// The part `[from, from + len)` (relative to the extent's start, block-aligned) of an extent.
fn sub_extent(e: &Extent, from: u64, len: u64) -> Extent {
    let first = (from / BLOCK_BYTES) as usize;
    let n = (len / BLOCK_BYTES) as usize;
    Extent { phys: e.phys + from, len_bytes: len, csums: e.csums[first..first + n].to_vec() }
}
