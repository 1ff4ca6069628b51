//! The engine behind the `block` and `mem` backends, in the manner of BlueStore.
//!
//! Data lives on a [`Device`] in extents handed out by an [`alloc::Allocator`]; all metadata
//! (collections, object records, extent maps with per-block crc32c, xattrs, omap, free space)
//! lives in a [`Kv`] store. See `docs/ENGINE.md` for the design, the assumptions about the
//! medium and the exact durability of each call.
//!
//! A commit works in three steps under one writer lock:
//! 1. plan the transaction against an overlay of the metadata (nothing is written yet);
//! 2. write the new data to freshly allocated blocks and the metadata batch to the commit log
//!    ([`wal`]), both with direct I/O on the same device, and flush the device once if the
//!    transaction is `Sync`;
//! 3. hand the batch to the KV store without a sync of its own; the log makes it durable.
//!
//! Data is never written twice: blocks are copy-on-write, so an overwrite goes to new blocks
//! and the old ones are freed once the transaction that freed them is durable.

pub mod alloc;
mod cache;
pub mod device;
mod fsck;
pub mod kv;
pub mod layout;
mod memkv;
mod read;
mod staged;
mod txn;
pub mod wal;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};

use shoal_util::{AlignedBuf, BufPool};

use self::alloc::Allocator;
use self::device::{BLOCK_BYTES, Device};
use self::kv::{Batch, Ks, Kv, KvRead};
use self::layout::{LABEL_BYTES, Onode, Superblock};
use self::read::{ExtentMap, range_crc, read_blocks, read_blocks_shared};
use self::staged::{Overlaid, STAGE_TXN_MAX_BYTES, Staged};
use self::txn::Plan;
use self::wal::{APPLIED_SEQ_KEY, LAP_START_KEY, Log};
use crate::api::{BackendKind, Durability, FsckReport, ListPage, ObjectStat, ObjectStore, Transaction, Usage};
use crate::error::{Result, StoreError};
use crate::names;

/// Data written between checkpoints at most: bounds what recovery reads to verify the data of
/// the transactions it replays.
pub const CHECKPOINT_DATA_BYTES: u64 = 256 << 20;

/// Whether two operations name the same object (or the same collection, for collection ops).
fn same_object(a: &crate::api::Op, b: &crate::api::Op) -> bool {
    use crate::api::Op;
    fn obj(op: &Op) -> Option<&str> {
        match op {
            Op::CreateCollection { .. } | Op::RemoveCollection { .. } => None,
            Op::Touch { obj, .. }
            | Op::Write { obj, .. }
            | Op::Truncate { obj, .. }
            | Op::Remove { obj, .. }
            | Op::SetXattr { obj, .. }
            | Op::RemoveXattr { obj, .. }
            | Op::OmapSet { obj, .. }
            | Op::OmapRemove { obj, .. }
            | Op::OmapClear { obj, .. }
            | Op::SetVersion { obj, .. } => Some(obj.as_str()),
        }
    }
    a.collection() == b.collection() && obj(a) == obj(b)
}

/// Whether the data a recovered transaction wrote matches the checksums its batch records.
fn data_is_intact<D: Device>(dev: &D, rec: &wal::Recovered) -> Result<bool> {
    for ((ks, key), value) in &rec.batch.ops {
        let (Ks::Extents, Some(value)) = (ks, value) else { continue };
        let (_, e) = layout::decode_extent(key, value)?;
        let fresh = rec.written.iter().any(|(at, len)| e.phys >= *at && e.phys + e.len_bytes <= at + len);
        if !fresh {
            continue; // a remainder of older data, verified when it was written
        }
        let mut buf = AlignedBuf::zeroed(e.len_bytes as usize);
        dev.read_at(&mut buf, e.phys).map_err(dev_err("verifying recovered data"))?;
        let sums = shoal_util::crc32c_blocks(&buf, BLOCK_BYTES as usize);
        if sums != e.csums {
            return Ok(false);
        }
    }
    Ok(true)
}

/// In-place blocks (decision 0040) written to their place at once outside a staged group's
/// submission: when this many are ready (their records known durable), the next commit writes
/// them. Each such write holds readers and the writer for one device submission: groups of 256
/// raised the p99 of NBD 4 KiB random writes on block3 from ~7.5 to ~12 ms, groups of 32 left it
/// as it was.
pub const INPLACE_APPLY_BLOCKS: usize = 32;
/// In-place blocks a staged group's submission takes along at most (see `drain_staged`).
pub const INPLACE_DRAIN_BLOCKS: usize = 64;
/// In-place blocks held in memory at most: past this, a checkpoint writes them all (only stores
/// that commit without ever syncing get there).
pub const INPLACE_MAX_BLOCKS: usize = 4096;

/// Writes recovered in-place data to its place (not flushed). Every write must lie in whole
/// blocks of the data region `data`: a record that says otherwise is refused as corrupt before
/// anything is written.
fn write_inplace<D: Device>(dev: &D, data_region: std::ops::Range<u64>, writes: &[(u64, Vec<u8>)]) -> Result<()> {
    for (at, data) in writes {
        let end = at.checked_add(data.len() as u64);
        let inside = end.is_some_and(|end| *at >= data_region.start && end <= data_region.end);
        if !inside || !at.is_multiple_of(BLOCK_BYTES) || !(data.len() as u64).is_multiple_of(BLOCK_BYTES) {
            return Err(StoreError::Corrupt(format!(
                "a log record writes {} bytes in place at device offset {at}, outside the data region's whole blocks",
                data.len()
            )));
        }
    }
    for (at, data) in writes {
        // The device may need block-aligned memory.
        let buf = AlignedBuf::copy_padded(data, BLOCK_BYTES as usize);
        dev.write_at(&buf, *at).map_err(dev_err("writing recovered in-place data"))?;
    }
    Ok(())
}

/// Whether a transaction's record stays well within the log's largest record (`max_record_bytes`)
/// whatever its writes do, so that it may write in place (an in-place write needs the log). Ops
/// whose metadata grows with what the object holds (removal, truncation, clearing an omap) make a
/// transaction ineligible; the others are bounded by their own bytes, plus, per write, the
/// records it may change (its blocks' worth, and two remainders with up to 256 checksums each).
fn inplace_fits(txn: &Transaction, max_record_bytes: u64) -> bool {
    use crate::api::Op;
    const PER_OP_BYTES: u64 = 4096;
    let mut bound = 0u64;
    for op in &txn.ops {
        bound += PER_OP_BYTES
            + match op {
                Op::Write { obj, data, .. } => {
                    let len = data.len() as u64;
                    len + (len / BLOCK_BYTES + 4) * (obj.len() as u64 + 64 + 5 * 256)
                }
                Op::SetXattr { name, value, .. } => (name.len() + value.len()) as u64,
                Op::OmapSet { entries, .. } => entries.iter().map(|(k, v)| (k.len() + v.len() + 512) as u64).sum(),
                Op::OmapRemove { keys, .. } => keys.iter().map(|k| (k.len() + 512) as u64).sum(),
                Op::Touch { .. } | Op::RemoveXattr { .. } | Op::CreateCollection { .. } | Op::SetVersion { .. } => 0,
                Op::Remove { .. } | Op::Truncate { .. } | Op::OmapClear { .. } | Op::RemoveCollection { .. } => {
                    return false;
                }
            };
    }
    bound <= max_record_bytes / 2
}

/// Commit log size of a `mem` store.
pub const MEM_LOG_BYTES: u64 = 4 << 20;

/// Smallest device the engine formats: label, commit log and room for some data.
pub const MIN_DEVICE_BYTES: u64 = 16 << 20;

/// Idle I/O buffers the engine keeps for reuse, in bytes.
pub const POOL_BYTES: usize = 32 << 20;
/// Largest buffer the pool keeps.
pub const POOL_MAX_BUF_BYTES: usize = 8 << 20;

/// State only the writer touches.
struct Writer {
    alloc: Allocator,
    log: Log,
    /// Sequence number of the last committed transaction.
    seq: u64,
    /// Space freed by committed transactions, with the sequence number of the freeing
    /// transaction. Reusable only once a *durable log record* states that the freeing
    /// transaction was flushed (`proven_seq`), or after a checkpoint: then no crash can bring
    /// back metadata pointing at reused blocks, and recovery never checks a record's data
    /// against blocks that were reused (see `wal.rs`).
    pending_free: Vec<(u64, u64, u64)>,
    /// Every transaction up to this one is on stable storage (a device flush completed).
    flushed_seq: u64,
    /// The `flushed_through` of the last log record written.
    last_claim: u64,
    /// A durable log record states that every transaction up to this one was flushed.
    proven_seq: u64,
    pending_free_bytes: u64,
    /// Whether anything was written to the device since the last flush.
    dirty: bool,
    /// Bytes of data written since the last checkpoint (what recovery may have to verify).
    data_since_checkpoint: u64,
    /// Device blocks written in place by the records of the current lap (since the last
    /// checkpoint). Recovery writes their in-place data again, so none of these blocks may be
    /// reused before the lap ends: space freed over them is released only at a checkpoint.
    inplace_lap: std::collections::BTreeSet<u64>,
    /// Objects and collections in the store, counted at mount and kept by every commit (so that
    /// `usage`, which every OSD reports each second, reads two numbers instead of scanning every
    /// object: that scan held a disk-backed OSD's worker ~100 ms with 100,000 objects).
    objects: u64,
    collections: u64,
    /// Objects per collection, counted and kept the same way (absent: none), so that an OSD can
    /// say how many objects a PG holds once a second without listing them. Bounded by the
    /// number of collections.
    coll_objects: HashMap<String, u64>,
    /// Set when a write or commit failed half-way: the log or the KV store may now disagree
    /// with memory, so the engine refuses further writes until it is remounted (and
    /// recovery sorts out what reached the medium).
    failed: Option<String>,
}

/// The engine over a metadata store `K` and a data device `D`.
pub struct Engine<K: Kv, D: Device> {
    kind: BackendKind,
    kv: K,
    dev: D,
    superblock: Superblock,
    writer: Mutex<Writer>,
    /// Reused buffers for data I/O (shared: reads lend theirs to the caller, see `read_bytes`).
    pool: Arc<BufPool>,
    /// Readers hold this shared while they read; the writer holds it exclusively while it makes
    /// freed space reusable, so a read never sees a block reused under it.
    reuse: RwLock<()>,
    /// Kept open for the lifetime of the engine: holds the exclusive mount lock, if any.
    _lock: Option<std::fs::File>,
    /// Set by [`Engine::simulate_crash`]: drop without a checkpoint.
    crashed: std::sync::atomic::AtomicBool,
    /// Nothing of this store outlives the process ([`MemEngine::new_mem`]): no crash can be
    /// recovered from, so commits skip the commit log (see `commit_once`).
    volatile: bool,
    /// `Deferred` transactions not written yet (see `staged.rs`). Only the writer changes it,
    /// holding `writer`; readers take it shared, before their KV snapshot (so that they see a
    /// staged change either above the snapshot or in it). Lock order: `writer`, then `reuse` or
    /// `staged`, never both of the last two.
    staged: RwLock<Staged>,
}

fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
}

/// `count` changed by a committed transaction's `delta`. The count cannot go below zero: a
/// transaction only removes what exists (its plan checked), so a negative result is a bug.
fn apply_delta(count: u64, delta: i64, what: &str) -> u64 {
    let next = i128::from(count) + i128::from(delta);
    assert!(next >= 0, "{what} count {count} changed by {delta}: below zero");
    u64::try_from(next).unwrap_or(u64::MAX)
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic in the writer leaves nothing half-done in memory that the next commit relies on
    // (plans are built aside and applied only when complete), so the state stays usable.
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn read_lock<T>(l: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    l.read().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn write_lock<T>(l: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    l.write().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn dev_err(what: &'static str) -> impl FnOnce(std::io::Error) -> StoreError {
    move |e| StoreError::io(what, e)
}

impl<K: Kv, D: Device> Engine<K, D> {
    /// Formats a new store: writes the device label, zeroes the commit log region, and records
    /// the superblock and one free extent covering the rest of the device, durably.
    pub fn format(kind: BackendKind, kv: K, dev: D, lock_file: Option<std::fs::File>) -> Result<Self> {
        let device_bytes = dev.size_bytes();
        if device_bytes < MIN_DEVICE_BYTES {
            return Err(StoreError::DeviceTooSmall {
                path: "device".into(),
                size_bytes: device_bytes,
                min_bytes: MIN_DEVICE_BYTES,
            });
        }
        let uuid: [u8; 16] = random_uuid();
        let log_offset = LABEL_BYTES;
        // A RAM store never recovers, so its log only needs room for single records; a small
        // one keeps the RAM it pins small.
        let log_bytes = match kind {
            BackendKind::Mem => layout::log_bytes_for(device_bytes).min(MEM_LOG_BYTES),
            _ => layout::log_bytes_for(device_bytes),
        };
        // Zeroing the log region means no stale record can ever be read as a valid one, and on
        // a file it turns the region's extents into written ones, so log writes never wait for
        // the file system to convert them. A fresh RAM device already reads as zeros.
        let zeros = AlignedBuf::zeroed((1 << 20).min(log_bytes) as usize);
        let mut at = if kind == BackendKind::Mem { log_bytes } else { 0 };
        while at < log_bytes {
            let n = (zeros.len() as u64).min(log_bytes - at) as usize;
            dev.write_at(&zeros[..n], log_offset + at).map_err(dev_err("zeroing the commit log"))?;
            at += n as u64;
        }
        let label = AlignedBuf::copy_padded(&layout::label_block(&uuid), BLOCK_BYTES as usize);
        dev.write_at(&label, 0).map_err(dev_err("writing the device label"))?;
        dev.sync().map_err(dev_err("flushing the device label"))?;
        let sb = Superblock { version: layout::FORMAT_VERSION, uuid, device_bytes, log_offset, log_bytes };
        let data_start = log_offset + log_bytes;
        let mut batch = Batch::default();
        batch.put(Ks::Meta, layout::SUPERBLOCK_KEY.to_vec(), layout::encode(&sb));
        batch.put(Ks::Meta, APPLIED_SEQ_KEY.to_vec(), layout::u64_key(0));
        batch.put(Ks::Free, layout::u64_key(data_start), layout::u64_key(device_bytes - data_start));
        kv.commit(batch, true)?;
        Self::load(kind, kv, dev, lock_file)
    }

    /// Mounts an existing store: checks the superblock against the device label, replays the
    /// commit log into the KV store, checkpoints, and loads the free space.
    pub fn load(kind: BackendKind, kv: K, dev: D, lock_file: Option<std::fs::File>) -> Result<Self> {
        let sb_bytes = kv
            .get(Ks::Meta, layout::SUPERBLOCK_KEY)?
            .ok_or_else(|| StoreError::Corrupt("the metadata has no superblock".into()))?;
        let sb: Superblock = layout::decode("superblock", &sb_bytes)?;
        if sb.version != layout::FORMAT_VERSION {
            return Err(StoreError::Corrupt(format!(
                "format version {} is not supported (this build reads version {})",
                sb.version,
                layout::FORMAT_VERSION
            )));
        }
        if sb.device_bytes > dev.size_bytes() {
            return Err(StoreError::Corrupt(format!(
                "the store was formatted for {} bytes but the device has {}",
                sb.device_bytes,
                dev.size_bytes()
            )));
        }
        let mut label = AlignedBuf::zeroed(BLOCK_BYTES as usize);
        dev.read_at(&mut label, 0).map_err(dev_err("reading the device label"))?;
        layout::check_label(&label, &sb.uuid).map_err(StoreError::Corrupt)?;

        // Replay: batches the log holds beyond what the KV store has.
        let applied = match kv.get(Ks::Meta, APPLIED_SEQ_KEY)? {
            Some(v) => layout::decode_u64("applied sequence number", &v)?,
            None => return Err(StoreError::Corrupt("the metadata has no applied sequence number".into())),
        };
        let lap_start = match kv.get(Ks::Meta, LAP_START_KEY)? {
            Some(v) => layout::decode_u64("lap start", &v)?,
            None => 0, // formatted before in-place writes existed: every record is of this lap
        };
        let mut log = Log::new(sb.log_offset, sb.log_bytes);
        let mut seq = applied;
        let recovered = log.recover(&dev, applied, lap_start)?;
        let data_region = sb.log_offset + sb.log_bytes..sb.device_bytes;
        // In-place data of transactions the KV store holds goes to its place again: the device
        // may not have it although the KV store already has its checksums.
        let mut rewrote = !recovered.inplace_applied.is_empty();
        write_inplace(&dev, data_region.clone(), &recovered.inplace_applied)?;
        // Records up to the newest claim are known durable; only later ones can be torn.
        let known_durable = recovered.records.iter().map(|r| r.flushed_through).max().unwrap_or(applied);
        for rec in recovered.records {
            if rec.seq > known_durable && !data_is_intact(&dev, &rec)? {
                break;
            }
            rewrote |= !rec.inplace.is_empty();
            write_inplace(&dev, data_region.clone(), &rec.inplace)?;
            kv.commit(rec.batch, false)?;
            seq = rec.seq;
        }
        if rewrote {
            dev.sync().map_err(dev_err("flushing recovered in-place writes"))?;
        }
        // The log starts a new lap; its records from here on are the only ones recovery reads.
        let mut lap = Batch::default();
        lap.put(Ks::Meta, LAP_START_KEY.to_vec(), layout::u64_key(seq + 1));
        kv.commit(lap, true)?;
        log.reset();

        let data_start = sb.log_offset + sb.log_bytes;
        let mut alloc = if dev.compact_allocation() { Allocator::compact() } else { Allocator::default() };
        let mut bad: Option<String> = None;
        kv.scan(Ks::Free, &[], None, &mut |k, v| match (
            layout::decode_u64("free key", k),
            layout::decode_u64("free length", v),
        ) {
            (Ok(off), Ok(len)) if len > 0 && off >= data_start && off + len <= sb.device_bytes => {
                alloc.release(off, len);
                true
            }
            _ => {
                bad = Some(format!("bad free-space record {k:?}"));
                false
            }
        })?;
        if let Some(msg) = bad {
            return Err(StoreError::Corrupt(msg));
        }
        let mut collections = 0u64;
        kv.scan(Ks::Colls, &[], None, &mut |_, _| {
            collections += 1;
            true
        })?;
        let mut objects = 0u64;
        let mut coll_objects: HashMap<String, u64> = HashMap::new();
        let mut bad_key = None;
        kv.scan(Ks::Onodes, &[], None, &mut |k, _| {
            objects += 1;
            // Keys are `collection NUL object`, and collection names are UTF-8 without NUL.
            let coll = k.iter().position(|b| *b == 0).and_then(|at| std::str::from_utf8(&k[..at]).ok());
            match coll {
                Some(coll) => match coll_objects.get_mut(coll) {
                    Some(n) => *n += 1,
                    None => {
                        coll_objects.insert(coll.to_string(), 1);
                    }
                },
                None => {
                    bad_key = Some(format!("object record with a malformed key {k:?}"));
                    return false;
                }
            }
            true
        })?;
        if let Some(msg) = bad_key {
            return Err(StoreError::Corrupt(msg));
        }
        let writer = Writer {
            objects,
            collections,
            coll_objects,
            alloc,
            log,
            seq,
            pending_free: Vec::new(),
            pending_free_bytes: 0,
            flushed_seq: seq,
            last_claim: seq,
            proven_seq: seq,
            dirty: false,
            data_since_checkpoint: 0,
            inplace_lap: std::collections::BTreeSet::new(),
            failed: None,
        };
        Ok(Self {
            kind,
            kv,
            dev,
            superblock: sb,
            writer: Mutex::new(writer),
            pool: Arc::new(BufPool::new(POOL_BYTES, POOL_MAX_BUF_BYTES)),
            reuse: RwLock::new(()),
            _lock: lock_file,
            crashed: std::sync::atomic::AtomicBool::new(false),
            volatile: false,
            staged: RwLock::new(Staged::default()),
        })
    }

    /// Flushes the device: every log record and data block written so far becomes durable
    /// (staged transactions are written first).
    fn flush_device(&self, w: &mut Writer) -> Result<()> {
        if !read_lock(&self.staged).is_empty() {
            return self.drain_staged(w, true);
        }
        if w.dirty {
            self.dev.sync().map_err(dev_err("flushing the device"))?;
            w.dirty = false;
            self.flushed(w);
        }
        Ok(())
    }

    /// Reserves log space for a record of `batch` with `written` and `inplace`, as
    /// [`wal::encode_record`] will make it (checksums still to be computed make it grow by at
    /// most `growth` bytes).
    fn record_estimate(batch: &Batch, written: &[(u64, u64)], inplace: &wal::Inplace<'_>, growth: u64) -> u64 {
        wal::record_bytes(batch, written, inplace, u64::MAX) + growth.div_ceil(BLOCK_BYTES) * BLOCK_BYTES
    }

    /// Reads `[offset, offset + len)` of an object through `dev` (the engine's device, or a
    /// view of it that reads around its cache), with the crc32c of the bytes returned: pieces
    /// that together are the bytes, in order (one, from a pooled buffer, unless the device
    /// shares its memory).
    fn read_from<R: device::BlockSource>(
        &self,
        dev: &R,
        coll: &str,
        obj: &str,
        offset: u64,
        len: u64,
    ) -> Result<(Vec<bytes::Bytes>, Option<u32>)> {
        let _no_reuse = self.reuse.read().unwrap_or_else(std::sync::PoisonError::into_inner);
        let staged = self.staged_view();
        let snap = self.kv.snapshot();
        let snap = Overlaid::new(&snap, staged.as_deref().map(Staged::changes));
        let onode = self.onode(&snap, coll, obj)?;
        if offset > onode.size_bytes {
            return Err(StoreError::ReadPastEnd {
                coll: coll.to_string(),
                obj: obj.to_string(),
                offset,
                size_bytes: onode.size_bytes,
            });
        }
        let end = onode.size_bytes.min(offset.saturating_add(len));
        if end == offset {
            return Ok((Vec::new(), Some(0)));
        }
        let lo = offset / BLOCK_BYTES * BLOCK_BYTES;
        let hi = end.div_ceil(BLOCK_BYTES) * BLOCK_BYTES;
        let extents = Self::extents(&snap, coll, obj, lo, hi, onode.size_bytes)?;
        let mut block_crcs = Vec::with_capacity(((hi - lo) / BLOCK_BYTES) as usize);
        let pending = |phys| staged.as_ref().and_then(|s| s.block(phys));
        let at = (offset - lo) as usize;
        let len = (end - offset) as usize;
        // A device that shares its memory (RAM) is read without a copy (decision 0041).
        if let Some(parts) = read_blocks_shared(dev, (coll, obj), &extents, (lo, hi), &pending, &mut block_crcs)? {
            let (parts, crc) = read::slice_parts(parts, &block_crcs, at, len);
            return Ok((parts, Some(crc)));
        }
        let buf = read_blocks(dev, (coll, obj), &extents, (lo, hi), &pending, &self.pool, Some(&mut block_crcs))?;
        let crc = range_crc(&buf, &block_crcs, at, len);
        // The reply is sent from the pool buffer itself, which returns to the pool once dropped.
        Ok((vec![bytes::Bytes::from_owner(self.pool.lend(buf)).slice(at..at + len)], Some(crc)))
    }

    /// The staged group, for a reader (to be taken before its KV snapshot); `None` for a
    /// volatile store, which never stages anything (and whose reads then skip the lock).
    fn staged_view(&self) -> Option<RwLockReadGuard<'_, Staged>> {
        (!self.volatile).then(|| read_lock(&self.staged))
    }

    /// Writes the staged group (see `staged.rs`): its data and log records in one device
    /// submission (with `flush`, followed by a device flush), then, once all of it is on the
    /// device, its merged metadata batch to the KV store. On return the group is as durable as
    /// `Batch` transactions are (as `Sync` ones with `flush`). A device error leaves the group
    /// staged (readers keep seeing it); a KV error loses it from memory, as it loses any
    /// commit's batch; either way the caller fails the engine.
    fn drain_staged(&self, w: &mut Writer, flush: bool) -> Result<()> {
        let ready = {
            let staged = read_lock(&self.staged);
            if staged.is_empty() {
                return Ok(());
            }
            // In-place blocks whose records are proven durable go to their place in the same
            // submission: readers take them from memory until the group's lock is taken below,
            // and never read them from the device meanwhile (see `read::read_part`).
            let ready = staged.inplace_ready(w.proven_seq, INPLACE_DRAIN_BLOCKS);
            let mut writes = staged.writes();
            writes.extend(ready.iter().map(|(at, data)| (*at, &data[..])));
            self.dev.write_all(&writes, flush).map_err(dev_err("writing deferred transactions"))?;
            ready
        };
        // Readers wait while the batch moves from the group to the KV store, so that they see
        // it in one place or the other.
        let mut staged = write_lock(&self.staged);
        let (batch, data) = staged.take();
        self.kv.commit(batch, false)?;
        staged.inplace_applied(&ready);
        drop(staged);
        for buf in data {
            if let txn::DirectData::Owned(buf) = buf {
                self.pool.give(buf);
            }
        }
        if flush {
            w.dirty = false;
            self.flushed(w);
        } else {
            w.dirty = true;
        }
        Ok(())
    }

    /// Bookkeeping after a completed flush: the last record (and its claim) is now durable.
    fn flushed(&self, w: &mut Writer) {
        w.flushed_seq = w.seq;
        w.proven_seq = w.proven_seq.max(w.last_claim);
        self.release_pending(w, w.proven_seq);
    }

    /// Makes the KV store hold every committed transaction durably, so the log can start over.
    fn checkpoint(&self, w: &mut Writer) -> Result<()> {
        self.flush_device(w)?;
        self.kv.sync()?;
        self.finish_lap(w)
    }

    /// Ends the log's lap once the KV store holds every committed transaction durably: writes
    /// every in-place block to its place and flushes them (the log, which holds their data, is
    /// about to be overwritten), records where the next lap starts, and starts it.
    fn finish_lap(&self, w: &mut Writer) -> Result<()> {
        if !w.inplace_lap.is_empty() {
            // Every record is in the durable KV store, so recovery verifies none of them and
            // the blocks may take their new contents whatever the claims say.
            self.apply_inplace(w, u64::MAX, usize::MAX)?;
            self.dev.sync().map_err(dev_err("flushing in-place writes"))?;
            let mut lap = Batch::default();
            lap.put(Ks::Meta, LAP_START_KEY.to_vec(), layout::u64_key(w.seq + 1));
            self.kv.commit(lap, true)?;
            w.inplace_lap.clear();
        }
        w.log.reset();
        w.data_since_checkpoint = 0;
        // Recovery will not look at any record written so far.
        w.flushed_seq = w.seq;
        w.proven_seq = w.seq;
        w.last_claim = w.seq;
        self.release_pending(w, u64::MAX);
        Ok(())
    }

    /// Writes in-place blocks of transactions up to `upto_seq` to their place (at most `limit`
    /// blocks; all of them with `usize::MAX`), without a flush. Callers pass a `upto_seq` whose
    /// records recovery will not verify (`proven_seq`, or anything once the KV store is synced):
    /// a block written in place may hold data a record after the claims wrote, and recovery
    /// must not judge that record torn by it. Readers are held off while the blocks change
    /// (they take the group's lock for a whole read), so none reads a block half-written or
    /// against a checksum older than its contents.
    fn apply_inplace(&self, w: &mut Writer, upto_seq: u64, limit: usize) -> Result<()> {
        let mut staged = write_lock(&self.staged);
        let mut left = limit;
        loop {
            // Bounded submissions: the ring takes RING_ENTRIES writes at once.
            let ready = staged.inplace_ready(upto_seq, left.min(128));
            if ready.is_empty() {
                return Ok(());
            }
            let writes: Vec<(u64, &[u8])> = ready.iter().map(|(at, data)| (*at, &data[..])).collect();
            self.dev.write_all(&writes, false).map_err(dev_err("writing blocks in place"))?;
            w.dirty = true;
            staged.inplace_applied(&ready);
            left -= ready.len();
            if left == 0 {
                return Ok(());
            }
        }
    }

    /// Writes the in-place blocks whose records are proven durable once there are enough of
    /// them, and checkpoints if too many are waiting.
    fn settle_inplace(&self, w: &mut Writer) -> Result<()> {
        let (waiting, ready, staging) = {
            let staged = read_lock(&self.staged);
            let (waiting, ready) = staged.inplace_counts(w.proven_seq);
            (waiting, ready, !staged.is_empty())
        };
        if waiting > INPLACE_MAX_BLOCKS {
            return self.checkpoint(w);
        }
        // A staged group takes ready blocks along when it is written, at no extra cost; only if
        // they pile up beyond what a few groups take are they written here.
        let threshold = if staging { 4 * INPLACE_DRAIN_BLOCKS } else { INPLACE_APPLY_BLOCKS };
        if ready >= threshold {
            self.apply_inplace(w, w.proven_seq, usize::MAX)?;
        }
        Ok(())
    }

    /// Makes space freed by transactions up to `upto_seq` reusable.
    fn release_pending(&self, w: &mut Writer, upto_seq: u64) {
        if !w.pending_free.iter().any(|f| f.0 <= upto_seq) {
            return;
        }
        let _exclusive = self.reuse.write().unwrap_or_else(std::sync::PoisonError::into_inner);
        let (ready, keep): (Vec<_>, Vec<_>) =
            std::mem::take(&mut w.pending_free).into_iter().partition(|f| f.0 <= upto_seq);
        w.pending_free = keep;
        for (_, off, len) in ready {
            w.alloc.release(off, len);
            w.pending_free_bytes -= len;
            self.dev.discard(off, len);
        }
    }

    fn commit_locked(&self, w: &mut Writer, txn: &Transaction, durability: Durability) -> Result<()> {
        match self.commit_once(w, txn, durability) {
            // Space freed by recent transactions may still be held back: a checkpoint releases
            // it, then the transaction gets one more try. (Running out of space is found while
            // planning, before anything is written.)
            Err(StoreError::NoSpace { .. }) if !w.pending_free.is_empty() => {
                self.checkpoint(w)?;
                self.commit_once(w, txn, durability)
            }
            other => other,
        }
    }

    fn commit_once(&self, w: &mut Writer, txn: &Transaction, durability: Durability) -> Result<()> {
        let deferred = durability == Durability::Deferred;
        if !deferred {
            // Staged transactions reach the KV store before this one does.
            self.drain_staged(w, false)?;
        }
        let planned = {
            let staged = read_lock(&self.staged);
            let view = Overlaid::new(&self.kv, Some(staged.changes()));
            let staged_block = |phys| staged.block(phys);
            // A volatile store writes in place without a log (see below), so no record bounds it.
            let inplace_ok = self.volatile || inplace_fits(txn, w.log.max_record_bytes());
            let mut plan =
                Plan::new(&view, &self.dev, &staged_block, &self.pool, &mut w.alloc, now_ns()).with_inplace(inplace_ok);
            for (i, op) in txn.ops.iter().enumerate() {
                let last_for_object = !txn.ops[i + 1..].iter().any(|later| same_object(op, later));
                if let Err(e) = plan.apply(op, last_for_object) {
                    plan.abandon();
                    return Err(e);
                }
            }
            plan.into_batch()
        };
        let txn::Planned { mut batch, frees, direct, pending_csums, objects_delta, collections_delta, inplace } =
            planned;
        let inplace_refs: Vec<(u64, &[u8])> = inplace.iter().map(|(at, d)| (*at, &d[..])).collect();
        let seq = w.seq + 1;
        batch.put(Ks::Meta, APPLIED_SEQ_KEY.to_vec(), layout::u64_key(seq));
        let written: Vec<(u64, u64)> = direct.iter().map(|(phys, buf)| (*phys, buf.len() as u64)).collect();
        let written_bytes: u64 = written.iter().map(|w| w.1).sum();
        // An upper bound of the record's size, to reserve log space before the checksums of
        // large writes exist: encoded with the largest possible claim, plus at most 5 bytes per
        // checksum (postcard varints) and 16 bytes per record whose length prefixes grow, in
        // whole blocks.
        let pending_blocks: u64 = pending_csums.iter().map(|p| p.len_bytes / BLOCK_BYTES).sum();
        let growth = pending_blocks * 5 + pending_csums.len() as u64 * 16;
        // A volatile store has nothing to recover after a crash, so the log would only cost: its
        // transactions take the path of those too big for it, whose flush and synchronous KV
        // commit cost nothing in RAM (measured: 12% of a RAM OSD's CPU per 4 KiB write went to
        // encoding and copying log records).
        let estimate = if self.volatile {
            0 // never read: the log is not used
        } else {
            Self::record_estimate(&batch, &written, &inplace_refs, growth)
        };
        let use_log = !self.volatile && estimate <= w.log.max_record_bytes();
        if !use_log && !self.volatile && !inplace.is_empty() {
            // `inplace_fits` bounds the record of any transaction allowed to write in place well
            // below the largest record; written in place without the log, a torn write would
            // destroy the old contents.
            let why =
                std::io::Error::other(format!("a record of {estimate} bytes with in-place writes outgrew the log"));
            return Err(StoreError::io("committing in-place writes", why));
        }
        // Small transactions with nothing to compute while their data travels are staged; the
        // others are written now, after the group.
        let stage = deferred && use_log && pending_csums.is_empty() && written_bytes <= STAGE_TXN_MAX_BYTES;
        if !stage || !read_lock(&self.staged).has_room(written_bytes) {
            self.drain_staged(w, false)?;
        }
        // Checkpoint when the log is full, and when recovery would otherwise have to verify
        // more than CHECKPOINT_DATA_BYTES of data.
        if use_log && (!w.log.fits(estimate) || w.data_since_checkpoint > CHECKPOINT_DATA_BYTES) {
            self.checkpoint(w)?;
        }
        let claim = w.flushed_seq;
        w.data_since_checkpoint += written_bytes;
        if stage {
            let record = wal::encode_record(seq, &batch, &written, &inplace_refs, claim);
            if record.len() as u64 > estimate {
                let why = std::io::Error::other("log record outgrew its reservation");
                return Err(StoreError::io("staging a transaction", why));
            }
            let at = w.log.reserve(record.len() as u64);
            {
                let mut staged = write_lock(&self.staged);
                staged.push(batch, direct, (at, record));
                staged.add_inplace(seq, &inplace_refs);
            }
            self.note_inplace(w, &inplace);
            self.committed(w, seq, objects_delta, collections_delta, frees);
            w.last_claim = claim;
            return self.settle_inplace(w);
        }
        let writes: Vec<(u64, &[u8])> = direct.iter().map(|(phys, buf)| (*phys, &buf[..])).collect();
        let fill_csums = |batch: &mut Batch| {
            for p in &pending_csums {
                let data = &direct[p.direct_index].1[p.from..p.from + p.len_bytes as usize];
                let csums = shoal_util::crc32c_blocks(data, BLOCK_BYTES as usize);
                let e = layout::Extent { phys: p.phys, len_bytes: p.len_bytes, csums };
                batch.put(Ks::Extents, p.key.clone(), layout::encode_extent_record(&e));
            }
        };
        let flush = durability == Durability::Sync || !use_log;
        if use_log {
            // Data goes out first; checksums and the log record are computed while it travels,
            // then the record follows, and one flush makes both durable.
            let log = &mut w.log;
            let mut produce = || -> std::io::Result<Option<(u64, AlignedBuf)>> {
                fill_csums(&mut batch);
                let record = wal::encode_record(seq, &batch, &written, &inplace_refs, claim);
                if record.len() as u64 > estimate {
                    return Err(std::io::Error::other("log record outgrew its reservation"));
                }
                Ok(Some((log.reserve(record.len() as u64), record)))
            };
            self.dev.write_then(&writes, &mut produce, flush).map_err(dev_err("writing data and commit log"))?;
        } else {
            // Too big for the log (e.g. removing a huge object): flush the data and commit the
            // batch to the KV store synchronously instead.
            fill_csums(&mut batch);
            self.dev.write_all(&writes, true).map_err(dev_err("writing data"))?;
        }
        drop(writes);
        w.dirty = !flush;
        for (_, buf) in direct {
            if let txn::DirectData::Owned(buf) = buf {
                self.pool.give(buf);
            }
        }
        if use_log && !inplace.is_empty() {
            // Readers see the new checksums and the blocks' new contents at once.
            let mut staged = write_lock(&self.staged);
            staged.add_inplace(seq, &inplace_refs);
            self.kv.commit(batch, false)?;
            drop(staged);
            self.note_inplace(w, &inplace);
        } else if use_log {
            self.kv.commit(batch, false)?;
        } else if !inplace.is_empty() {
            // A volatile store writes its small overwrites in place at once: nothing of it
            // outlives the process, so no log must hold the data first and a torn write loses
            // nothing recoverable. The blocks and their checksums change while readers are held
            // off (every read holds `reuse` shared from its KV snapshot to its last device read),
            // so none sees one without the other; a view a reader already holds keeps its bytes
            // (the device copies a chunk before changing it under a view).
            debug_assert!(self.volatile, "only a volatile store writes in place without the log");
            let _exclusive = self.reuse.write().unwrap_or_else(std::sync::PoisonError::into_inner);
            self.dev.write_all(&inplace_refs, false).map_err(dev_err("writing blocks in place"))?;
            self.kv.commit(batch, true)?;
        } else {
            // Recovery must never expect this transaction's record: a new lap starts below.
            self.kv.commit(batch, true)?;
        }
        self.committed(w, seq, objects_delta, collections_delta, frees);
        if use_log {
            w.last_claim = claim;
        }
        if !use_log {
            // The batch went to the KV store with a sync, which also made every earlier batch
            // durable there, and the log starts a new lap: like a checkpoint.
            self.finish_lap(w)?;
        } else if flush {
            self.flushed(w);
        }
        drop(inplace_refs);
        for (_, buf) in inplace {
            self.pool.give(buf);
        }
        self.settle_inplace(w)
    }

    /// The writer's bookkeeping for blocks a committed transaction wrote in place.
    fn note_inplace(&self, w: &mut Writer, inplace: &[(u64, AlignedBuf)]) {
        for (at, data) in inplace {
            w.inplace_lap.extend((0..data.len() as u64 / BLOCK_BYTES).map(|i| at + i * BLOCK_BYTES));
        }
    }

    /// The writer's bookkeeping for committed transaction `seq`.
    fn committed(
        &self,
        w: &mut Writer,
        seq: u64,
        objects_delta: BTreeMap<String, i64>,
        collections_delta: i64,
        frees: Vec<(u64, u64)>,
    ) {
        w.seq = seq;
        for (coll, delta) in objects_delta {
            w.objects = apply_delta(w.objects, delta, "objects");
            let n = w.coll_objects.get(&coll).copied().unwrap_or(0);
            match apply_delta(n, delta, "collection objects") {
                0 => w.coll_objects.remove(&coll),
                n => w.coll_objects.insert(coll, n),
            };
        }
        w.collections = apply_delta(w.collections, collections_delta, "collections");
        w.pending_free_bytes += frees.iter().map(|f| f.1).sum::<u64>();
        // Space over blocks written in place this lap waits for the lap's end (u64::MAX: only a
        // checkpoint releases it), since recovery would write their old in-place data again.
        let lap = &w.inplace_lap;
        let held = |off: u64, len: u64| lap.range(off..off + len).next().is_some();
        w.pending_free
            .extend(frees.into_iter().map(|(off, len)| (if held(off, len) { u64::MAX } else { seq }, off, len)));
    }

    /// Checkpoints: after this the KV store durably holds every committed transaction and the
    /// log is empty. Used before unmount and by `fsck`.
    pub fn quiesce(&self) -> Result<()> {
        let mut w = lock(&self.writer);
        self.checkpoint(&mut w)
    }

    fn onode<R: KvRead>(&self, view: &R, coll: &str, obj: &str) -> Result<Onode> {
        check_names(coll, obj)?;
        match view.get(Ks::Onodes, &layout::object_key(coll, obj))? {
            Some(bytes) => Onode::decode(&bytes),
            None => {
                if view.get(Ks::Colls, coll.as_bytes())?.is_none() {
                    return Err(StoreError::NoSuchCollection(coll.to_string()));
                }
                Err(StoreError::NoSuchObject { coll: coll.to_string(), obj: obj.to_string() })
            }
        }
    }

    /// Extent records overlapping `[lo, hi)`, by logical start: the one record covering the
    /// range when a point read of a likely key finds it (`read::covering_extent`, on stores that
    /// prefer point reads), else a scan (`read::scan_extents`).
    fn extents<R: KvRead>(view: &R, coll: &str, obj: &str, lo: u64, hi: u64, size_bytes: u64) -> Result<ExtentMap> {
        let prefix = layout::child_prefix(coll, obj);
        let end_bound = size_bytes.div_ceil(BLOCK_BYTES) * BLOCK_BYTES;
        if lo < hi && view.prefers_point_reads() {
            let get = |k: &[u8]| view.get(Ks::Extents, k);
            if let Some(map) = read::covering_extent(get, &prefix, lo, hi, end_bound)? {
                return Ok(map);
            }
        }
        Ok(read::scan_extents(view, &prefix, lo, hi, end_bound, &|_| false)?.map(|s| s.map).unwrap_or_default())
    }

    fn require_collection<R: KvRead>(view: &R, coll: &str) -> Result<()> {
        names::check_collection(coll)?;
        match view.get(Ks::Colls, coll.as_bytes())? {
            Some(_) => Ok(()),
            None => Err(StoreError::NoSuchCollection(coll.to_string())),
        }
    }

    /// Superblock of the mounted store.
    pub fn superblock(&self) -> &Superblock {
        &self.superblock
    }

    /// Whether data I/O bypasses the page cache.
    pub fn direct_io(&self) -> bool {
        self.dev.direct_io()
    }

    /// The data device.
    pub fn device(&self) -> &D {
        &self.dev
    }

    /// Damages object `coll/obj` on the medium behind the engine's back, as bit rot would: one
    /// bit of its first data block is flipped where the block is stored, so the next read of that
    /// block fails its checksum. For tests of scrub and read repair only. Returns `false` if the
    /// object holds no data.
    #[doc(hidden)]
    pub fn inject_bit_rot(&self, coll: &str, obj: &str) -> Result<bool> {
        let mut writer = lock(&self.writer);
        // The block to damage must be on the device, neither staged nor waiting to be written
        // in place.
        self.checkpoint(&mut writer)?;
        let Some(phys) = self.first_block(coll, obj)? else { return Ok(false) };
        let mut buf = shoal_util::aligned::AlignedBuf::zeroed(BLOCK_BYTES as usize);
        let io = |e: std::io::Error| StoreError::Io { context: format!("damaging {coll}/{obj}"), source: e };
        self.dev.read_uncached(&mut buf, phys).map_err(io)?;
        buf[0] ^= 0x01;
        self.dev.write_at(&buf, phys).map_err(io)?;
        self.dev.sync().map_err(io)?;
        Ok(true)
    }

    /// Where object `coll/obj`'s first data block is on the device; `None` if it holds no data.
    /// For the damage-injecting test hooks (the caller holds the writer lock).
    fn first_block(&self, coll: &str, obj: &str) -> Result<Option<u64>> {
        let staged = self.staged_view();
        let snap = self.kv.snapshot();
        let snap = Overlaid::new(&snap, staged.as_deref().map(Staged::changes));
        let onode = self.onode(&snap, coll, obj)?;
        if onode.size_bytes == 0 {
            return Ok(None);
        }
        let extents = Self::extents(&snap, coll, obj, 0, BLOCK_BYTES, onode.size_bytes)?;
        Ok(extents.values().next().map(|e| e.phys))
    }

    /// Number of free-space fragments the allocator holds in memory.
    pub fn free_fragments(&self) -> usize {
        lock(&self.writer).alloc.fragments()
    }
}

fn random_uuid() -> [u8; 16] {
    // Uniqueness, not secrecy, is what matters: mixing the time, the pid and a stack address is
    // enough to tell stores apart, without a dependency on a random number generator.
    let mut seed = now_ns() as u128 ^ (u128::from(std::process::id()) << 64);
    let local = 0u8;
    seed ^= (&raw const local as usize as u128) << 32;
    let a = shoal_util::crc32c(&seed.to_le_bytes());
    let b = shoal_util::crc32c(&(seed.rotate_left(17) ^ u128::from(a)).to_le_bytes());
    let mut out = seed.to_le_bytes();
    out[..4].copy_from_slice(&a.to_le_bytes());
    out[4..8].copy_from_slice(&b.to_le_bytes());
    out
}

impl<K: Kv, D: Device> ObjectStore for Engine<K, D> {
    fn backend(&self) -> BackendKind {
        self.kind
    }

    fn commit(&self, txn: Transaction, durability: Durability) -> Result<()> {
        if txn.ops.is_empty() {
            return if durability == Durability::Sync { self.sync() } else { Ok(()) };
        }
        let mut w = lock(&self.writer);
        if let Some(why) = &w.failed {
            return Err(StoreError::Failed(why.clone()));
        }
        match self.commit_locked(&mut w, &txn, durability) {
            Ok(()) => Ok(()),
            // Invalid input, a full store and damaged data met while planning (a partial write
            // reads the blocks it keeps) change nothing: the store stays writable.
            Err(
                e @ (StoreError::InvalidName { .. }
                | StoreError::InvalidArgument(_)
                | StoreError::NoSuchCollection(_)
                | StoreError::CollectionExists(_)
                | StoreError::CollectionNotEmpty(_)
                | StoreError::NoSuchObject { .. }
                | StoreError::ObjectTooLarge { .. }
                | StoreError::NoSpace { .. }
                | StoreError::Checksum { .. }
                | StoreError::Unreadable { .. }),
            ) => Err(e),
            Err(e) => {
                w.failed = Some(e.to_string());
                Err(e)
            }
        }
    }

    fn sync(&self) -> Result<()> {
        let mut w = lock(&self.writer);
        if let Some(why) = &w.failed {
            return Err(StoreError::Failed(why.clone()));
        }
        // A failed flush may have dropped the data it was flushing (the kernel does not retry):
        // stop accepting writes rather than pretend a later flush covers it.
        self.flush_device(&mut w).inspect_err(|e| w.failed = Some(e.to_string()))
    }

    fn settle(&self) -> Result<()> {
        // Every transaction committed before this call is staged by now, if at all (an OSD calls
        // this after every batch of events, most of which staged nothing).
        if self.staged_view().is_none_or(|s| s.is_empty()) {
            return Ok(());
        }
        let mut w = lock(&self.writer);
        if let Some(why) = &w.failed {
            return Err(StoreError::Failed(why.clone()));
        }
        self.drain_staged(&mut w, false).inspect_err(|e| w.failed = Some(e.to_string()))
    }

    fn flush(&self) -> Result<()> {
        self.quiesce()
    }

    fn list_collections(&self) -> Result<Vec<String>> {
        let mut out = Vec::new();
        let staged = self.staged_view();
        Overlaid::new(&self.kv, staged.as_deref().map(Staged::changes)).scan(Ks::Colls, &[], None, &mut |k, _| {
            out.push(String::from_utf8_lossy(k).into_owned());
            true
        })?;
        Ok(out)
    }

    fn collection_exists(&self, coll: &str) -> Result<bool> {
        let staged = self.staged_view();
        Ok(Overlaid::new(&self.kv, staged.as_deref().map(Staged::changes)).get(Ks::Colls, coll.as_bytes())?.is_some())
    }

    fn read(&self, coll: &str, obj: &str, offset: u64, len: u64) -> Result<Vec<u8>> {
        // One copy into the new buffer, whether the read is one pooled buffer (which goes back
        // when its `Bytes` is dropped, right after) or a RAM device's pieces.
        let (parts, _) = self.read_from(&self.dev, coll, obj, offset, len)?;
        Ok(parts.concat())
    }

    fn read_bytes(&self, coll: &str, obj: &str, offset: u64, len: u64) -> Result<bytes::Bytes> {
        self.read_bytes_crc(coll, obj, offset, len).map(|(bytes, _)| bytes)
    }

    fn read_bytes_crc(&self, coll: &str, obj: &str, offset: u64, len: u64) -> Result<(bytes::Bytes, Option<u32>)> {
        let (parts, crc) = self.read_from(&self.dev, coll, obj, offset, len)?;
        Ok((join_parts(parts), crc))
    }

    fn read_parts_crc(&self, coll: &str, obj: &str, offset: u64, len: u64) -> Result<(Vec<bytes::Bytes>, Option<u32>)> {
        self.read_from(&self.dev, coll, obj, offset, len)
    }

    fn read_media(&self, coll: &str, obj: &str, offset: u64, len: u64) -> Result<Vec<u8>> {
        let (parts, _) = self.read_from(&device::Uncached(&self.dev), coll, obj, offset, len)?;
        Ok(parts.concat())
    }

    fn version(&self, coll: &str, obj: &str) -> Result<(u64, u64)> {
        let staged = self.staged_view();
        Ok(self.onode(&Overlaid::new(&self.kv, staged.as_deref().map(Staged::changes)), coll, obj)?.version)
    }

    fn stat(&self, coll: &str, obj: &str) -> Result<ObjectStat> {
        let staged = self.staged_view();
        let onode = self.onode(&Overlaid::new(&self.kv, staged.as_deref().map(Staged::changes)), coll, obj)?;
        Ok(ObjectStat { size_bytes: onode.size_bytes, mtime_ns: onode.mtime_ns })
    }

    fn get_xattr(&self, coll: &str, obj: &str, name: &str) -> Result<Option<Vec<u8>>> {
        let staged = self.staged_view();
        let snap = self.kv.snapshot();
        let snap = Overlaid::new(&snap, staged.as_deref().map(Staged::changes));
        self.onode(&snap, coll, obj)?;
        snap.get(Ks::Xattrs, &layout::child_key(&layout::child_prefix(coll, obj), name.as_bytes()))
    }

    fn list_xattrs(&self, coll: &str, obj: &str) -> Result<Vec<(String, Vec<u8>)>> {
        let staged = self.staged_view();
        let snap = self.kv.snapshot();
        let snap = Overlaid::new(&snap, staged.as_deref().map(Staged::changes));
        self.onode(&snap, coll, obj)?;
        let prefix = layout::child_prefix(coll, obj);
        let end = layout::prefix_end(&prefix);
        let mut out = Vec::new();
        snap.scan(Ks::Xattrs, &prefix, end.as_deref(), &mut |k, v| {
            out.push((String::from_utf8_lossy(&k[prefix.len()..]).into_owned(), v.to_vec()));
            true
        })?;
        Ok(out)
    }

    fn omap_get(&self, coll: &str, obj: &str, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let staged = self.staged_view();
        let snap = self.kv.snapshot();
        let snap = Overlaid::new(&snap, staged.as_deref().map(Staged::changes));
        self.onode(&snap, coll, obj)?;
        snap.get(Ks::Omap, &layout::child_key(&layout::child_prefix(coll, obj), key))
    }

    fn omap_list(&self, coll: &str, obj: &str, after: Option<&[u8]>, max: usize) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let staged = self.staged_view();
        let snap = self.kv.snapshot();
        let snap = Overlaid::new(&snap, staged.as_deref().map(Staged::changes));
        self.onode(&snap, coll, obj)?;
        let prefix = layout::child_prefix(coll, obj);
        let end = layout::prefix_end(&prefix);
        let start = after.map_or_else(|| prefix.clone(), |a| layout::child_key(&prefix, a));
        let mut out = Vec::new();
        if max == 0 {
            return Ok(out);
        }
        snap.scan(Ks::Omap, &start, end.as_deref(), &mut |k, v| {
            let key = &k[prefix.len()..];
            if after.is_some_and(|a| key <= a) {
                return true;
            }
            out.push((key.to_vec(), v.to_vec()));
            out.len() < max
        })?;
        Ok(out)
    }

    fn list_objects(&self, coll: &str, prefix: &str, after: Option<&str>, max: usize) -> Result<ListPage> {
        let staged = self.staged_view();
        let snap = self.kv.snapshot();
        let snap = Overlaid::new(&snap, staged.as_deref().map(Staged::changes));
        Self::require_collection(&snap, coll)?;
        let coll_prefix = layout::collection_prefix(coll);
        let key_prefix = layout::object_key(coll, prefix);
        let end = layout::prefix_end(&key_prefix);
        let start = match after {
            Some(a) if a.as_bytes() > prefix.as_bytes() => layout::object_key(coll, a),
            _ => key_prefix.clone(),
        };
        let mut names = Vec::new();
        let mut more = false;
        snap.scan(Ks::Onodes, &start, end.as_deref(), &mut |k, _| {
            let name = &k[coll_prefix.len()..];
            if after.is_some_and(|a| name <= a.as_bytes()) {
                return true;
            }
            if names.len() == max {
                more = true;
                return false;
            }
            names.push(String::from_utf8_lossy(name).into_owned());
            true
        })?;
        let next = if more { names.last().cloned() } else { None };
        Ok(ListPage { objects: names, next })
    }

    fn collection_objects(&self, coll: &str) -> Result<u64> {
        let counted = lock(&self.writer).coll_objects.get(coll).copied();
        match counted {
            Some(n) => Ok(n),
            None if self.collection_exists(coll)? => Ok(0),
            None => Err(StoreError::NoSuchCollection(coll.to_string())),
        }
    }

    fn usage(&self) -> Result<Usage> {
        let (free, pending, objects, collections) = {
            let w = lock(&self.writer);
            (w.alloc.free_bytes(), w.pending_free_bytes, w.objects, w.collections)
        };
        let capacity = self.superblock.device_bytes - self.superblock.log_offset - self.superblock.log_bytes;
        Ok(Usage { size_bytes: capacity, used_bytes: capacity - free - pending, collections, objects })
    }

    fn fsck(&self) -> Result<FsckReport> {
        // Checkpointed under the same lock as the check: a commit in between could leave blocks
        // written in place only in memory, and the device's older contents would fail their
        // new checksums.
        let mut w = lock(&self.writer);
        self.checkpoint(&mut w)?;
        fsck::check(&self.kv, &self.dev, &self.superblock, &w.coll_objects)
    }
}

/// The `block` backend: fjall metadata and a file or block device.
pub type BlockEngine = Engine<kv::FjallKv, device::FileDevice>;
/// The `mem` backend: in-memory metadata and a sparse RAM device.
pub type MemEngine = Engine<kv::MemKv, device::MemDevice>;

impl MemEngine {
    /// A new, empty RAM store with `size_bytes` of capacity. Volatile: nothing of it outlives
    /// the process, so its commits write no commit log; a commit is complete (and visible to
    /// every later read) when it returns, and "durable" means no more than that.
    pub fn new_mem(size_bytes: u64) -> Result<Self> {
        Self::on_mem_device(device::MemDevice::new(size_bytes))
    }

    /// [`Self::new_mem`] on a device without a reserve of chunks faulted in ahead
    /// ([`device::MemDevice::without_reserve`]): no background thread, each new chunk allocated
    /// by its writer. For short-lived stores holding little data, such as the simulation's.
    pub fn new_mem_without_reserve(size_bytes: u64) -> Result<Self> {
        Self::on_mem_device(device::MemDevice::without_reserve(size_bytes))
    }

    fn on_mem_device(dev: device::MemDevice) -> Result<Self> {
        let mut engine = Self::format(BackendKind::Mem, kv::MemKv::default(), dev, None)?;
        engine.volatile = true;
        Ok(engine)
    }
}

impl MemEngine {
    /// Gives object `coll/obj`'s first data block a medium error: reads of it fail with EIO
    /// until the block is written again. For tests of read repair only. Returns `false` if the
    /// object holds no data.
    #[doc(hidden)]
    pub fn inject_read_error(&self, coll: &str, obj: &str) -> Result<bool> {
        let mut writer = lock(&self.writer);
        // The block to damage must be on the device, neither staged nor waiting to be written
        // in place (which would write it again).
        self.checkpoint(&mut writer)?;
        let Some(phys) = self.first_block(coll, obj)? else { return Ok(false) };
        self.dev.make_unreadable(phys);
        Ok(true)
    }
}

impl<K: Kv, D: Device> Engine<K, D> {
    /// Drops the engine without the checkpoint an unmount does, leaving the device and the KV
    /// store as a crash of the process would. For tests of recovery.
    #[doc(hidden)]
    pub fn simulate_crash(self) {
        self.crashed.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

impl<K: Kv, D: Device> Drop for Engine<K, D> {
    fn drop(&mut self) {
        if self.crashed.load(std::sync::atomic::Ordering::SeqCst) {
            return;
        }
        // Leave the log empty, so the next mount has nothing to replay. Errors cannot be
        // returned from drop; replay at the next mount covers a failure here.
        let _ = self.quiesce();
    }
}

/// Checks a name pair before it is used as a key prefix in a read.
pub(crate) fn check_names(coll: &str, obj: &str) -> Result<()> {
    names::check_collection(coll)?;
    names::check_object(obj)
}

/// The pieces of a read as one buffer: the piece itself when there is one, else a copy.
fn join_parts(mut parts: Vec<bytes::Bytes>) -> bytes::Bytes {
    match parts.len() {
        0 => bytes::Bytes::new(),
        1 => parts.swap_remove(0),
        _ => bytes::Bytes::from(parts.concat()),
    }
}

#[cfg(test)]
mod recovery_tests;
