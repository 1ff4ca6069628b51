//! The data device: a raw block device or preallocated file accessed with direct I/O, or RAM.
//!
//! Every offset and length the engine passes here is a multiple of [`BLOCK_BYTES`], and every
//! buffer is an `AlignedBuf`, which is what `O_DIRECT` requires.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, FileTypeExt, OpenOptionsExt};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, RwLock};

use io_uring::{IoUring, opcode, squeue, types};
use shoal_util::AlignedBuf;

use super::cache::BlockCache;

/// Produces the last buffer of [`Device::write_then`] (or nothing), while the first ones are
/// being written.
pub type TailFn<'a> = dyn FnMut() -> io::Result<Option<(u64, AlignedBuf)>> + 'a;

/// Allocation and checksum unit of the engine, in bytes.
pub const BLOCK_BYTES: u64 = 4096;
// Checksums that arrive with the data (`Data::Summed`) are per block of this size.
const _: () = assert!(BLOCK_BYTES as usize == shoal_util::SUM_BLOCK_BYTES);

/// Where object data lives.
pub trait Device: Send + Sync + 'static {
    /// Capacity in bytes.
    fn size_bytes(&self) -> u64;
    /// Fills `buf` from `offset` (from a cache of recently read blocks, where the device has
    /// one).
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()>;
    /// Fills `buf` from `offset` on the medium itself, never from a cache: for deep scrub, fsck
    /// and checks of recovered data, which are there to look at what the device holds.
    fn read_uncached(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.read_at(buf, offset)
    }
    /// Writes `buf` at `offset`. Not durable until [`Device::sync`] returns.
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()>;
    /// Puts every completed write on stable storage.
    fn sync(&self) -> io::Result<()>;
    /// Writes every `(offset, buffer)` pair, possibly at the same time, and returns when all
    /// have completed; with `flush`, they (and every earlier write) are also on stable storage.
    fn write_all(&self, writes: &[(u64, &[u8])], flush: bool) -> io::Result<()> {
        for (offset, buf) in writes {
            self.write_at(buf, *offset)?;
        }
        if flush { self.sync() } else { Ok(()) }
    }
    /// Like [`Device::write_all`] with one more buffer that `last` produces while `first` is
    /// already being written (the engine computes checksums and encodes its log record there,
    /// overlapping CPU work with device I/O).
    fn write_then(&self, first: &[(u64, &[u8])], last: &mut TailFn<'_>, flush: bool) -> io::Result<()> {
        self.write_all(first, false)?;
        match last()? {
            Some((offset, buf)) => self.write_all(&[(offset, &buf[..])], flush),
            None if flush => self.sync(),
            None => Ok(()),
        }
    }
    /// Tells the device that `[offset, offset + len)` holds nothing of value any more.
    fn discard(&self, offset: u64, len: u64);
    /// Whether writes bypass the page cache.
    fn direct_io(&self) -> bool;
    /// Whether space should be reused before untouched space is used (RAM, where untouched
    /// space costs fresh memory), rather than laid out sequentially (disks).
    fn compact_allocation(&self) -> bool {
        false
    }
    /// For a device whose reads are memory copies, the size of the pieces to read and verify
    /// one after another, so that each piece's checksums are computed while it is still in the
    /// CPU's cache instead of in a second pass over a buffer that has left it. `None` (disks):
    /// read each contiguous run with one I/O, which matters far more there.
    fn read_piece_bytes(&self) -> Option<usize> {
        None
    }
    /// For a device whose data lives in memory: the bytes of `[offset, offset + len)` as shared,
    /// immutable views of that memory instead of a copy, in order, each a whole number of
    /// blocks, together `len` bytes. A view keeps showing what the range held when it was taken,
    /// even if the range is written or discarded afterwards (the device copies a piece before
    /// changing it while a view holds it). `None`: the device cannot (disks); read with
    /// [`Device::read_at`].
    fn read_shared(&self, offset: u64, len: usize) -> Option<io::Result<Vec<bytes::Bytes>>> {
        let _ = (offset, len);
        None
    }
    /// Whether [`Device::read_shared`] may share a read of `len` bytes: a cheap test that spares
    /// a read that cannot be shared the attempt.
    fn shares(&self, len: usize) -> bool {
        let _ = len;
        false
    }
}

fn check_aligned(offset: u64, len: usize) {
    assert_eq!(offset % BLOCK_BYTES, 0, "device offset {offset} is not block-aligned");
    assert_eq!(len as u64 % BLOCK_BYTES, 0, "device I/O of {len} bytes is not whole blocks");
}

/// A block device or regular file opened with `O_DIRECT` (falling back to buffered I/O only on
/// file systems that refuse `O_DIRECT`, such as tmpfs).
pub struct FileDevice {
    file: File,
    size_bytes: u64,
    direct: bool,
    /// Submission ring for concurrent writes; `None` where io_uring is unavailable, in which
    /// case writes are issued one after another.
    ring: Option<Mutex<IoUring>>,
    /// Recently read blocks and large reads; every write and discard invalidates its range first.
    cache: Option<BlockCache>,
    /// Buffers of large reads that missed the cache: read into, shared with the cache and the
    /// reader, and back here once both let go (a fresh 4 MiB buffer costs its pages faulted in
    /// and zeroed).
    large_bufs: Arc<shoal_util::BufPool>,
}

/// Idle buffers a disk device keeps for its large reads: four 4 MiB reads.
const LARGE_READ_POOL_BYTES: usize = 16 << 20;

/// Bytes of recently read small blocks a disk device keeps in memory by default (see
/// [`super::cache`]).
pub const DEFAULT_CACHE_BYTES: u64 = 64 << 20;

/// Bytes of recent large reads (whole, up to 4 MiB each) a disk device keeps in memory by default.
pub const DEFAULT_LARGE_CACHE_BYTES: u64 = 256 << 20;

/// How much a disk device caches (decision 0030): small reads' blocks and whole large reads, each
/// in its own budget; 0 leaves that kind of read uncached.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CacheSizes {
    pub small_bytes: u64,
    pub large_bytes: u64,
}

impl Default for CacheSizes {
    fn default() -> Self {
        CacheSizes { small_bytes: DEFAULT_CACHE_BYTES, large_bytes: DEFAULT_LARGE_CACHE_BYTES }
    }
}

impl CacheSizes {
    /// The defaults, or what the environment's `SHOAL_BLOCK_CACHE_BYTES` and
    /// `SHOAL_BLOCK_CACHE_LARGE_BYTES` say (a number of bytes, or a size such as `64M`); an
    /// unreadable value is refused with its name.
    pub fn from_env() -> io::Result<CacheSizes> {
        let d = CacheSizes::default();
        Ok(CacheSizes {
            small_bytes: cache_bytes_from_env("SHOAL_BLOCK_CACHE_BYTES", d.small_bytes)?,
            large_bytes: cache_bytes_from_env("SHOAL_BLOCK_CACHE_LARGE_BYTES", d.large_bytes)?,
        })
    }
}

/// The cache size `var` gives, `default` when it is not set.
fn cache_bytes_from_env(var: &str, default: u64) -> io::Result<u64> {
    match std::env::var(var) {
        Err(std::env::VarError::NotPresent) => Ok(default),
        Ok(v) => crate::open::parse_size(v.trim()).map_err(|_| {
            io::Error::new(io::ErrorKind::InvalidInput, format!("{var}={v:?} is not a number of bytes or a size"))
        }),
        Err(e) => Err(io::Error::new(io::ErrorKind::InvalidInput, format!("{var}: {e}"))),
    }
}

/// Entries in the submission ring: the most write requests in flight at once.
const RING_ENTRIES: u32 = 256;
/// Largest single request handed to the ring. A bigger direct write needs more segments than
/// a virtio disk takes in one request (254 here), so the block layer would have to split it,
/// which it refuses to do for a non-blocking submission; io_uring then punts the whole write to
/// a kernel worker thread, costing a wake-up and a CPU on the critical path. Requests of at most
/// 128 pages are issued directly from the submitting thread.
pub const RING_CHUNK_BYTES: usize = 512 << 10;

impl FileDevice {
    /// Opens `path` for direct I/O with the cache sizes of [`CacheSizes::from_env`].
    pub fn open(path: &Path) -> io::Result<Self> {
        Self::open_with(path, CacheSizes::from_env()?)
    }

    /// Opens `path` for direct I/O, caching as `cache` says. A block device is opened exclusively
    /// (`O_EXCL`), so that a device mounted or in use elsewhere is refused by the kernel.
    pub fn open_with(path: &Path, cache: CacheSizes) -> io::Result<Self> {
        let meta = std::fs::metadata(path)?;
        let is_blockdev = meta.file_type().is_block_device();
        let mut flags = libc_o_direct();
        if is_blockdev {
            flags |= rustix::fs::OFlags::EXCL.bits() as i32;
        }
        let open = |flags: i32| OpenOptions::new().read(true).write(true).custom_flags(flags).open(path);
        let (file, direct) = match open(flags) {
            Ok(f) => (f, true),
            Err(e) if e.raw_os_error() == Some(rustix::io::Errno::INVAL.raw_os_error()) => {
                (open(flags & !libc_o_direct())?, false)
            }
            Err(e) => return Err(e),
        };
        let size_bytes = if is_blockdev {
            rustix::fs::seek(&file, rustix::fs::SeekFrom::End(0)).map_err(io::Error::from)?
        } else {
            meta.len()
        };
        let ring = if std::env::var_os("SHOAL_NO_URING").is_some() {
            None
        } else {
            IoUring::new(RING_ENTRIES).ok().map(Mutex::new)
        };
        let cache = match cache {
            CacheSizes { small_bytes: 0, large_bytes: 0 } => None,
            c => Some(BlockCache::new(c.small_bytes, c.large_bytes)),
        };
        let large_bufs = Arc::new(shoal_util::BufPool::new(LARGE_READ_POOL_BYTES, super::cache::LARGE_IO_BYTES));
        Ok(Self { file, size_bytes: size_bytes / BLOCK_BYTES * BLOCK_BYTES, direct, ring, cache, large_bufs })
    }

    /// Forgets cached blocks of `[offset, offset + len)` before they are written or discarded.
    fn invalidate(&self, offset: u64, len: u64) {
        if let Some(cache) = &self.cache {
            cache.invalidate(offset, len);
        }
    }
}

impl FileDevice {
    /// Uses only the first `size_bytes` of the device (rounded down to whole blocks).
    pub fn limit(&mut self, size_bytes: u64) {
        self.size_bytes = self.size_bytes.min(size_bytes / BLOCK_BYTES * BLOCK_BYTES);
    }
}

fn libc_o_direct() -> i32 {
    rustix::fs::OFlags::DIRECT.bits() as i32
}

impl Device for FileDevice {
    fn size_bytes(&self) -> u64 {
        self.size_bytes
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        // Reads the cache does not keep go past it without taking its lock.
        let Some(cache) = self.cache.as_ref().filter(|c| c.serves(buf.len())) else {
            return self.read_uncached(buf, offset);
        };
        check_aligned(offset, buf.len());
        assert!(offset + buf.len() as u64 <= self.size_bytes, "read past the device end");
        match cache.read(buf, offset) {
            Ok(()) => Ok(()),
            Err(ticket) => {
                self.read_uncached(buf, offset)?;
                cache.fill(ticket, buf, offset);
                Ok(())
            }
        }
    }
    fn read_uncached(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        check_aligned(offset, buf.len());
        assert!(offset + buf.len() as u64 <= self.size_bytes, "read past the device end");
        self.file.read_exact_at(buf, offset)
    }
    /// Large reads the cache keeps are shared with it: a hit is the cached buffer itself, and a
    /// miss reads into a buffer that the cache then keeps by reference (no copy either way).
    /// Other reads are not shared.
    fn read_shared(&self, offset: u64, len: usize) -> Option<io::Result<Vec<bytes::Bytes>>> {
        let cache = self.cache.as_ref().filter(|_| Device::shares(self, len))?;
        check_aligned(offset, len);
        assert!(offset + len as u64 <= self.size_bytes, "read past the device end");
        match cache.read_large(offset, len) {
            Ok(hit) => Some(Ok(vec![hit])),
            Err(ticket) => {
                let mut buf = self.large_bufs.take(len);
                if let Err(e) = self.read_uncached(&mut buf, offset) {
                    return Some(Err(e));
                }
                let data = bytes::Bytes::from_owner(self.large_bufs.lend(buf));
                cache.fill_large(ticket, data.clone(), offset);
                Some(Ok(vec![data]))
            }
        }
    }
    fn shares(&self, len: usize) -> bool {
        self.cache.as_ref().is_some_and(|c| len > super::cache::CACHED_IO_BYTES && c.serves(len))
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        check_aligned(offset, buf.len());
        assert!(offset + buf.len() as u64 <= self.size_bytes, "write past the device end");
        self.invalidate(offset, buf.len() as u64);
        self.file.write_all_at(buf, offset)
    }
    fn sync(&self) -> io::Result<()> {
        self.file.sync_data()
    }
    fn write_all(&self, writes: &[(u64, &[u8])], flush: bool) -> io::Result<()> {
        self.write_then(writes, &mut || Ok(None), flush)
    }
    /// With a ring, every write is submitted at once (large ones in [`RING_CHUNK_BYTES`]
    /// pieces), the tail joins them as soon as it is produced, and the flush is one
    /// `fdatasync` issued by this thread once every write has completed. Without a ring, the
    /// writes are issued one after another.
    fn write_then(&self, first: &[(u64, &[u8])], last: &mut TailFn<'_>, flush: bool) -> io::Result<()> {
        for (offset, buf) in first {
            check_aligned(*offset, buf.len());
            assert!(offset + buf.len() as u64 <= self.size_bytes, "write past the device end");
            // Direct I/O from memory off a block boundary fails (EINVAL) after the plan was made.
            assert!(
                !self.direct || buf.as_ptr().addr().is_multiple_of(BLOCK_BYTES as usize),
                "direct write of {} bytes from memory that is not block-aligned",
                buf.len()
            );
            self.invalidate(*offset, buf.len() as u64);
        }
        let pieces: Vec<(u64, &[u8])> = first
            .iter()
            .flat_map(|&(offset, buf)| {
                buf.chunks(RING_CHUNK_BYTES).enumerate().map(move |(i, c)| (offset + (i * RING_CHUNK_BYTES) as u64, c))
            })
            .collect();
        // Room for every piece and the tail; otherwise (transactions of more than ~127 MiB)
        // the writes go one after another.
        let fits_ring = pieces.len() < RING_ENTRIES as usize;
        let Some(ring) = self.ring.as_ref().filter(|_| fits_ring) else {
            for (offset, buf) in first {
                self.file.write_all_at(buf, *offset)?;
            }
            if let Some((offset, buf)) = last()? {
                check_aligned(offset, buf.len());
                assert!(offset + buf.len() as u64 <= self.size_bytes, "write past the device end");
                self.invalidate(offset, buf.len() as u64);
                self.file.write_all_at(&buf, offset)?;
            }
            return if flush { self.file.sync_data() } else { Ok(()) };
        };
        let mut ring = ring.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let fd = types::Fd(self.file.as_raw_fd());
        let push = |ring: &mut IoUring, entry: &squeue::Entry| {
            // SAFETY: every buffer referenced by an entry outlives this call, which waits for
            // all completions before returning (including on the error paths below).
            if unsafe { ring.submission().push(entry) }.is_err() {
                unreachable!("the ring has room: fewer writes than RING_ENTRIES were pushed");
            }
        };
        for (i, (offset, buf)) in pieces.iter().enumerate() {
            // A piece is at most RING_CHUNK_BYTES, which fits in a u32.
            let len = buf.len() as u32;
            push(&mut ring, &opcode::Write::new(fd, buf.as_ptr(), len).offset(*offset).build().user_data(i as u64));
        }
        // Start the data writes now; the caller's work below overlaps with them.
        let mut in_flight = pieces.len();
        let mut first_err: Option<io::Error> = None;
        if in_flight > 0
            && let Err(e) = ring.submit()
        {
            first_err = Some(e);
        }
        let produced = last();
        let tail = match &produced {
            Ok(Some((offset, buf))) => {
                check_aligned(*offset, buf.len());
                assert!(offset + buf.len() as u64 <= self.size_bytes, "write past the device end");
                self.invalidate(*offset, buf.len() as u64);
                match u32::try_from(buf.len()) {
                    Ok(len) => {
                        push(
                            &mut ring,
                            &opcode::Write::new(fd, buf.as_ptr(), len)
                                .offset(*offset)
                                .build()
                                .user_data(pieces.len() as u64),
                        );
                        in_flight += 1;
                        Some((*offset, &buf[..]))
                    }
                    // Too big for one request: written directly below, once the ring is idle.
                    Err(_) => None,
                }
            }
            Ok(None) | Err(_) => None,
        };
        let mut done = 0;
        while done < in_flight {
            match ring.submit_and_wait(in_flight - done) {
                Ok(_) => {}
                Err(e) if matches!(e.kind(), io::ErrorKind::Interrupted | io::ErrorKind::WouldBlock) => continue,
                Err(e) if e.raw_os_error() == Some(rustix::io::Errno::BUSY.raw_os_error()) => continue,
                Err(e) => {
                    eprintln!("shoal: fatal: io_uring wait failed with requests in flight: {e}");
                    std::process::abort();
                }
            }
            for cqe in ring.completion() {
                done += 1;
                let (res, tag) = (cqe.result(), cqe.user_data());
                if res < 0 {
                    first_err.get_or_insert(io::Error::from_raw_os_error(-res));
                    continue;
                }
                let target = match tag {
                    t if (t as usize) < pieces.len() => Some(pieces[t as usize]),
                    _ => tail,
                };
                if let Some((offset, buf)) = target
                    && (res as usize) < buf.len()
                    && let Err(e) = self.file.write_all_at(&buf[res as usize..], offset + res as u64)
                {
                    first_err.get_or_insert(e);
                }
            }
        }
        drop(ring);
        let tail_written = tail.is_some();
        let produced = produced?;
        if let Some(e) = first_err {
            return Err(e);
        }
        if let Some((offset, buf)) = &produced
            && !tail_written
        {
            self.file.write_all_at(buf, *offset)?;
        }
        // Every write above has completed (the ring's, and any finished here), so one flush
        // covers them all.
        if flush { self.file.sync_data() } else { Ok(()) }
    }
    fn discard(&self, offset: u64, len: u64) {
        // Punching holes in a file would turn its extents back into unwritten ones and make the
        // next write to them pay for a metadata update, so discard leaves the file as it is; the
        // range holds nothing of value any more, so the cache forgets it.
        self.invalidate(offset, len);
    }
    fn direct_io(&self) -> bool {
        self.direct
    }
}

/// Granularity at which [`MemDevice`] allocates and releases RAM.
pub const MEM_CHUNK_BYTES: u64 = 64 * 1024;

/// A sparse RAM device: chunks are allocated when first written and released when discarded
/// (kept for reuse, up to [`MEM_RESERVE_CHUNKS`]), so memory use follows the data stored, up to
/// the device size. Blocks not written since their discard read as zeros or as old bytes.
///
/// Reads can take the chunks themselves rather than a copy ([`Device::read_shared`]): a chunk is
/// shared (`Arc`), and a write to a chunk a reader still holds replaces it with a changed copy
/// (copy-on-write), so what a reader holds never changes under it. Without that, serving a read
/// from a RAM OSD cost one copy of every byte into a buffer before the copy into the socket
/// (docs/BENCHMARKS.md, decision 0041).
pub struct MemDevice {
    size_bytes: u64,
    chunks: RwLock<HashMap<u64, Arc<Box<[u8]>>>>,
    reserve: Arc<ChunkReserve>,
    warmer: Mutex<Option<std::thread::JoinHandle<()>>>,
    /// Whether the first chunk needed starts the warmer ([`MemDevice::without_reserve`]).
    reserve_wanted: bool,
    /// Blocks (device offsets) that fail to read with EIO until written again, as a disk's
    /// pending sectors do; set only by tests ([`MemDevice::make_unreadable`]). `any_unreadable`
    /// keeps the common case to one atomic load.
    unreadable: RwLock<std::collections::BTreeSet<u64>>,
    any_unreadable: AtomicBool,
}

/// Chunks allocated and faulted in ahead of need, by a background thread.
///
/// The first write to a fresh page of RAM costs a page fault and the kernel zeroing the page,
/// and on a virtual machine the host backing it too: measured here at about 2 GB/s, slower than
/// everything else a RAM store does with the data. A writer that allocates its own chunks pays
/// that on its critical path; with the reserve, a helper thread pays it in parallel (on another
/// core) and the writer only copies. The reserve is filled only after the device first needs a
/// chunk, so an idle device holds none; once active it holds at most
/// [`MEM_RESERVE_CHUNKS`] chunks (16 MiB) beyond the data.
struct ChunkReserve {
    spare: Mutex<Vec<Box<[u8]>>>,
    wanted: Condvar,
    stop: AtomicBool,
}

/// Chunks the reserve keeps ready: 16 MiB, four 4 MiB writes.
pub const MEM_RESERVE_CHUNKS: usize = 256;
/// Below this many chunks in the reserve, taking one wakes the warmer to refill it.
const MEM_RESERVE_LOW_CHUNKS: usize = MEM_RESERVE_CHUNKS / 2;

/// A zeroed chunk whose pages are already mapped.
fn faulted_chunk() -> Box<[u8]> {
    let mut c = vec![0u8; MEM_CHUNK_BYTES as usize].into_boxed_slice();
    // Fresh zeroed memory is not mapped until written; write one byte per page (volatile, so
    // the compiler keeps the stores of zeros to memory it knows is zero).
    for page in c.chunks_mut(4096) {
        // SAFETY: `page` is a valid, exclusive, non-empty slice.
        unsafe { std::ptr::write_volatile(page.as_mut_ptr(), 0) };
    }
    c
}

fn warm(reserve: &ChunkReserve) {
    // Faulting memory in is background work: at the lowest priority (on Linux, `setpriority` with
    // pid 0 applies to the calling thread only) it takes CPU time the writers and the network
    // threads leave over instead of competing with them, which matters on small machines. If
    // it cannot be lowered, the warmer runs at normal priority.
    let _ = rustix::process::setpriority_process(None, 19);
    loop {
        let need = {
            let mut spare = reserve.spare.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            while spare.len() >= MEM_RESERVE_CHUNKS && !reserve.stop.load(Ordering::Acquire) {
                spare = reserve.wanted.wait(spare).unwrap_or_else(std::sync::PoisonError::into_inner);
            }
            if reserve.stop.load(Ordering::Acquire) {
                return;
            }
            (MEM_RESERVE_CHUNKS - spare.len()).min(16)
        };
        let fresh: Vec<Box<[u8]>> = (0..need).map(|_| faulted_chunk()).collect();
        reserve.spare.lock().unwrap_or_else(std::sync::PoisonError::into_inner).extend(fresh);
    }
}

impl Drop for MemDevice {
    fn drop(&mut self) {
        {
            // Set under the lock the warmer checks it under: set between its check and its wait,
            // the notification would be lost and the join below would wait forever.
            let _spare = self.reserve.spare.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            self.reserve.stop.store(true, Ordering::Release);
        }
        self.reserve.wanted.notify_all();
        if let Some(t) = self.warmer.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take() {
            let _ = t.join();
        }
    }
}

impl MemDevice {
    #[must_use]
    pub fn new(size_bytes: u64) -> Self {
        Self {
            size_bytes: size_bytes / BLOCK_BYTES * BLOCK_BYTES,
            chunks: RwLock::new(HashMap::new()),
            reserve: Arc::new(ChunkReserve {
                spare: Mutex::new(Vec::new()),
                wanted: Condvar::new(),
                stop: AtomicBool::new(false),
            }),
            warmer: Mutex::new(None),
            reserve_wanted: true,
            unreadable: RwLock::new(std::collections::BTreeSet::new()),
            any_unreadable: AtomicBool::new(false),
        }
    }

    /// A device that never starts the reserve's thread: every new chunk is allocated by the
    /// writer that needs it, and discarded chunks are still kept for reuse. For short-lived
    /// devices holding little data (the cluster simulation opens thousands of them), where a
    /// thread faulting 16 MiB in per device costs far more than the writes it would speed up.
    #[must_use]
    pub fn without_reserve(size_bytes: u64) -> Self {
        let mut dev = Self::new(size_bytes);
        dev.reserve_wanted = false;
        dev
    }

    /// Makes the block at `offset` fail every read with EIO until it is written again (a medium
    /// error). For tests of read repair.
    #[doc(hidden)]
    pub fn make_unreadable(&self, offset: u64) {
        check_aligned(offset, BLOCK_BYTES as usize);
        self.unreadable.write().unwrap_or_else(std::sync::PoisonError::into_inner).insert(offset);
        self.any_unreadable.store(true, Ordering::Release);
    }

    /// Whether `[offset, offset + len)` touches a block made unreadable.
    fn touches_unreadable(&self, offset: u64, len: usize) -> bool {
        if !self.any_unreadable.load(Ordering::Acquire) {
            return false;
        }
        let bad = self.unreadable.read().unwrap_or_else(std::sync::PoisonError::into_inner);
        bad.range(offset..offset + len as u64).next().is_some()
    }

    /// A chunk for new data: from the reserve if it has one, else allocated here. A chunk from
    /// the reserve may be one discarded earlier and keeps its old bytes: like a disk, the device
    /// promises nothing about blocks not written since they were discarded, and the engine
    /// reads only blocks it wrote. Starts the
    /// reserve's thread at the first call and wakes it to refill once the reserve is below
    /// [`MEM_RESERVE_LOW_CHUNKS`].
    fn new_chunk(&self) -> Box<[u8]> {
        let (taken, low) = {
            let mut spare = self.reserve.spare.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            let taken = spare.pop();
            (taken, spare.len() < MEM_RESERVE_LOW_CHUNKS)
        };
        // Waking the warmer costs a system call and, on a VM, an interrupt to another CPU: do it
        // when the reserve runs low rather than for every chunk taken; it then refills in bulk.
        if low {
            self.reserve.wanted.notify_one();
        }
        if let Some(c) = taken {
            return c;
        }
        if !self.reserve_wanted {
            return vec![0u8; MEM_CHUNK_BYTES as usize].into_boxed_slice();
        }
        let mut warmer = self.warmer.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if warmer.is_none() {
            let reserve = self.reserve.clone();
            // If the thread cannot start, writers simply allocate their own chunks.
            *warmer = std::thread::Builder::new().name("mem-chunks".into()).spawn(move || warm(&reserve)).ok();
        }
        drop(warmer);
        vec![0u8; MEM_CHUNK_BYTES as usize].into_boxed_slice()
    }

    /// Bytes of RAM currently held by data chunks.
    #[must_use]
    pub fn resident_bytes(&self) -> u64 {
        let chunks = self.chunks.read().unwrap_or_else(std::sync::PoisonError::into_inner);
        chunks.len() as u64 * MEM_CHUNK_BYTES
    }
}

/// A chunk as the owner of the bytes a shared read returns.
struct SharedChunk(Arc<Box<[u8]>>);

impl AsRef<[u8]> for SharedChunk {
    fn as_ref(&self) -> &[u8] {
        &self.0[..]
    }
}

/// What a chunk never written reads as, shared by every such read (and by holes in shared
/// reads, `read::read_blocks_shared`).
pub(crate) static ZERO_CHUNK: [u8; MEM_CHUNK_BYTES as usize] = [0; MEM_CHUNK_BYTES as usize];

/// Copies `src` into `dst` (of the same length) around the CPU's caches where it can.
///
/// Data written to a RAM device is seldom read again soon, and where it lands is cold: an
/// ordinary copy first reads every destination cache line in (to own it), then writes it, and
/// evicts useful lines to make room. Non-temporal stores write whole lines to memory without
/// reading them. They are weakly ordered, so a fence ends the copy: every store is visible to
/// any thread that later acquires what the writer releases (the chunk map's lock).
fn copy_streaming(dst: &mut [u8], src: &[u8]) {
    assert_eq!(dst.len(), src.len(), "copy between slices of different lengths");
    #[cfg(target_arch = "x86_64")]
    if dst.as_ptr().addr().is_multiple_of(16) && dst.len().is_multiple_of(64) {
        use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_sfence, _mm_stream_si128};
        for (d, s) in dst.chunks_exact_mut(16).zip(src.chunks_exact(16)) {
            // SAFETY: `s` and `d` are 16 bytes each (`chunks_exact`), `d` is 16-byte aligned (the
            // start is, and every piece is 16 bytes further), and SSE2 is part of x86_64. The
            // load takes any alignment.
            unsafe {
                let v = _mm_loadu_si128(s.as_ptr().cast::<__m128i>());
                _mm_stream_si128(d.as_mut_ptr().cast::<__m128i>(), v);
            }
        }
        // SAFETY: SSE (the fence's feature) is part of x86_64.
        unsafe { _mm_sfence() };
        return;
    }
    dst.copy_from_slice(src);
}

/// Splits `[offset, offset + len)` into pieces that each stay inside one chunk:
/// `(chunk index, offset in chunk, offset in the caller's buffer, length)`.
fn chunk_pieces(offset: u64, len: usize) -> impl Iterator<Item = (u64, usize, usize, usize)> {
    let mut done = 0usize;
    std::iter::from_fn(move || {
        if done >= len {
            return None;
        }
        let pos = offset + done as u64;
        let in_chunk = (pos % MEM_CHUNK_BYTES) as usize;
        let n = (MEM_CHUNK_BYTES as usize - in_chunk).min(len - done);
        let piece = (pos / MEM_CHUNK_BYTES, in_chunk, done, n);
        done += n;
        Some(piece)
    })
}

impl Device for MemDevice {
    fn size_bytes(&self) -> u64 {
        self.size_bytes
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        check_aligned(offset, buf.len());
        assert!(offset + buf.len() as u64 <= self.size_bytes, "read past the device end");
        if self.touches_unreadable(offset, buf.len()) {
            return Err(io::Error::from_raw_os_error(5));
        }
        let chunks = self.chunks.read().unwrap_or_else(std::sync::PoisonError::into_inner);
        for (idx, at, pos, n) in chunk_pieces(offset, buf.len()) {
            match chunks.get(&idx) {
                Some(c) => buf[pos..pos + n].copy_from_slice(&c[at..at + n]),
                None => buf[pos..pos + n].fill(0),
            }
        }
        Ok(())
    }
    fn read_shared(&self, offset: u64, len: usize) -> Option<io::Result<Vec<bytes::Bytes>>> {
        check_aligned(offset, len);
        assert!(offset + len as u64 <= self.size_bytes, "read past the device end");
        if self.touches_unreadable(offset, len) {
            return Some(Err(io::Error::from_raw_os_error(5)));
        }
        let chunks = self.chunks.read().unwrap_or_else(std::sync::PoisonError::into_inner);
        let pieces = chunk_pieces(offset, len)
            .map(|(idx, at, _, n)| match chunks.get(&idx) {
                Some(c) => bytes::Bytes::from_owner(SharedChunk(c.clone())).slice(at..at + n),
                None => bytes::Bytes::from_static(&ZERO_CHUNK[..n]),
            })
            .collect();
        Some(Ok(pieces))
    }
    fn shares(&self, _len: usize) -> bool {
        true
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        check_aligned(offset, buf.len());
        assert!(offset + buf.len() as u64 <= self.size_bytes, "write past the device end");
        if self.any_unreadable.load(Ordering::Acquire) {
            // A written block reads again (the disk remaps a pending sector on write).
            let mut bad = self.unreadable.write().unwrap_or_else(std::sync::PoisonError::into_inner);
            let written = offset..offset + buf.len() as u64;
            bad.retain(|b| !written.contains(b));
        }
        let mut chunks = self.chunks.write().unwrap_or_else(std::sync::PoisonError::into_inner);
        for (idx, at, pos, n) in chunk_pieces(offset, buf.len()) {
            let c = chunks.entry(idx).or_insert_with(|| Arc::new(self.new_chunk()));
            if Arc::get_mut(c).is_none() {
                // A reader holds this chunk (`read_shared`): it keeps the bytes it took, and the
                // device goes on with a copy. Readers clone a chunk only under the map's read
                // lock, so none can start holding it while this write holds the write lock.
                let mut copy = self.new_chunk();
                if n < copy.len() {
                    copy.copy_from_slice(&c[..]);
                }
                *c = Arc::new(copy);
            }
            let c = Arc::get_mut(c).expect("a chunk no reader holds, under the write lock");
            copy_streaming(&mut c[at..at + n], &buf[pos..pos + n]);
        }
        Ok(())
    }
    fn sync(&self) -> io::Result<()> {
        Ok(())
    }
    fn discard(&self, offset: u64, len: u64) {
        let first = offset.div_ceil(MEM_CHUNK_BYTES);
        let end = (offset + len) / MEM_CHUNK_BYTES;
        if first >= end {
            return;
        }
        let mut freed = Vec::new();
        {
            let mut chunks = self.chunks.write().unwrap_or_else(std::sync::PoisonError::into_inner);
            for idx in first..end {
                freed.extend(chunks.remove(&idx));
            }
        }
        // A discarded chunk goes back to the reserve while it has room: an overwrite frees as
        // much as it allocates (writes never go in place), so in a steady state the device
        // recycles its own chunks instead of returning RAM to the kernel and faulting fresh,
        // zeroed pages back in (a third of a mem OSD's CPU time under 512 KiB writes). Beyond
        // the reserve's bound the RAM is released, so memory still follows the data stored. A
        // chunk a reader still holds is not reused: it is released when the reader drops it.
        let mut spare = self.reserve.spare.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let room = MEM_RESERVE_CHUNKS.saturating_sub(spare.len());
        spare.extend(freed.into_iter().filter_map(|c| Arc::try_unwrap(c).ok()).take(room));
    }
    fn direct_io(&self) -> bool {
        false
    }
    fn compact_allocation(&self) -> bool {
        true
    }
    fn read_piece_bytes(&self) -> Option<usize> {
        Some(MEM_READ_PIECE_BYTES)
    }
}

/// Pieces a RAM device's reads are verified in: well inside a core's L2 cache with room for the
/// checksum tables and the rest of the working set.
const MEM_READ_PIECE_BYTES: usize = 64 << 10;

/// What reading an object's blocks needs of a device: its reads, and the size of the parts to
/// read and verify one after another.
pub trait BlockSource {
    /// Fills `buf` from `offset` (see [`Device::read_at`]).
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()>;
    /// See [`Device::read_piece_bytes`].
    fn read_piece_bytes(&self) -> Option<usize>;
    /// See [`Device::read_shared`].
    fn read_shared(&self, offset: u64, len: usize) -> Option<io::Result<Vec<bytes::Bytes>>>;
    /// See [`Device::shares`].
    fn shares(&self, len: usize) -> bool;
}

impl<D: Device> BlockSource for D {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        Device::read_at(self, buf, offset)
    }
    fn read_piece_bytes(&self) -> Option<usize> {
        Device::read_piece_bytes(self)
    }
    fn read_shared(&self, offset: u64, len: usize) -> Option<io::Result<Vec<bytes::Bytes>>> {
        Device::read_shared(self, offset, len)
    }
    fn shares(&self, len: usize) -> bool {
        Device::shares(self, len)
    }
}

/// A device whose reads all go to the medium ([`Device::read_uncached`]): what deep scrub reads
/// an object through.
pub struct Uncached<'a, D>(pub &'a D);

impl<D: Device> BlockSource for Uncached<'_, D> {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.0.read_uncached(buf, offset)
    }
    fn read_piece_bytes(&self) -> Option<usize> {
        self.0.read_piece_bytes()
    }
    fn read_shared(&self, _offset: u64, _len: usize) -> Option<io::Result<Vec<bytes::Bytes>>> {
        // Deep scrub and fsck are rare and read through the plain path, which never shares.
        None
    }
    fn shares(&self, _len: usize) -> bool {
        false
    }
}

/// A shared device is a device: lets tests keep a device across engine instances.
impl<D: Device> Device for std::sync::Arc<D> {
    fn size_bytes(&self) -> u64 {
        (**self).size_bytes()
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        (**self).read_at(buf, offset)
    }
    fn read_uncached(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        (**self).read_uncached(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        (**self).write_at(buf, offset)
    }
    fn sync(&self) -> io::Result<()> {
        (**self).sync()
    }
    fn write_all(&self, writes: &[(u64, &[u8])], flush: bool) -> io::Result<()> {
        (**self).write_all(writes, flush)
    }
    fn write_then(&self, first: &[(u64, &[u8])], last: &mut TailFn<'_>, flush: bool) -> io::Result<()> {
        (**self).write_then(first, last, flush)
    }
    fn discard(&self, offset: u64, len: u64) {
        (**self).discard(offset, len);
    }
    fn direct_io(&self) -> bool {
        (**self).direct_io()
    }
    fn compact_allocation(&self) -> bool {
        (**self).compact_allocation()
    }
    fn read_piece_bytes(&self) -> Option<usize> {
        (**self).read_piece_bytes()
    }
    fn read_shared(&self, offset: u64, len: usize) -> Option<io::Result<Vec<bytes::Bytes>>> {
        (**self).read_shared(offset, len)
    }
    fn shares(&self, len: usize) -> bool {
        (**self).shares(len)
    }
}

#[cfg(test)]
mod tests {
    use super::{BLOCK_BYTES, Device, MEM_CHUNK_BYTES, MemDevice, copy_streaming};

    fn joined(parts: &[bytes::Bytes]) -> Vec<u8> {
        parts.iter().flat_map(|p| p.iter().copied()).collect()
    }

    #[test]
    fn a_shared_read_keeps_what_it_took_while_the_range_is_written_and_discarded() {
        let dev = MemDevice::new(1 << 20);
        let chunk = MEM_CHUNK_BYTES as usize;
        let block = BLOCK_BYTES as usize;
        // Chunk 1 written whole, chunk 2 only in its second block; chunk 0 never.
        dev.write_at(&vec![1u8; chunk], MEM_CHUNK_BYTES).unwrap();
        dev.write_at(&vec![2u8; block], 2 * MEM_CHUNK_BYTES + BLOCK_BYTES).unwrap();
        let (offset, len) = (MEM_CHUNK_BYTES - BLOCK_BYTES, chunk + 3 * block);
        let parts = dev.read_shared(offset, len).expect("a RAM device shares").unwrap();
        assert!(parts.iter().all(|p| p.len() % block == 0), "pieces are whole blocks");
        let before = joined(&parts);
        let mut want = vec![0u8; block];
        want.extend(vec![1u8; chunk]);
        want.extend(vec![0u8; block]);
        want.extend(vec![2u8; block]);
        assert_eq!(before, want);
        // A partial and a whole-chunk overwrite, then a discard: the views do not change, and the
        // device reads the new bytes.
        dev.write_at(&vec![9u8; block], MEM_CHUNK_BYTES + BLOCK_BYTES).unwrap();
        dev.write_at(&vec![8u8; chunk], 2 * MEM_CHUNK_BYTES).unwrap();
        let mut now = vec![0u8; len];
        dev.read_at(&mut now, offset).unwrap();
        assert_eq!(&now[2 * block..3 * block], &vec![9u8; block][..]);
        assert_eq!(&now[block + chunk..], &vec![8u8; 2 * block][..]);
        assert_eq!(&now[block..2 * block], &vec![1u8; block][..], "the copy kept the chunk's other blocks");
        dev.discard(0, 4 * MEM_CHUNK_BYTES);
        dev.write_at(&vec![7u8; 4 * chunk], 0).unwrap();
        assert_eq!(joined(&parts), before);
        drop(parts);
        // Once no reader holds a chunk, writes go to it in place again.
        let again = dev.read_shared(0, chunk).unwrap().unwrap();
        assert_eq!(joined(&again), vec![7u8; chunk]);
    }

    #[test]
    fn a_shared_read_of_an_unreadable_block_fails_like_a_copied_one() {
        let dev = MemDevice::new(1 << 20);
        dev.write_at(&vec![1u8; 4 * BLOCK_BYTES as usize], 0).unwrap();
        dev.make_unreadable(2 * BLOCK_BYTES);
        let err = dev.read_shared(0, 4 * BLOCK_BYTES as usize).unwrap().unwrap_err();
        assert_eq!(err.raw_os_error(), Some(5));
        assert!(dev.read_shared(0, 2 * BLOCK_BYTES as usize).unwrap().is_ok());
    }

    #[test]
    fn streaming_copy_equals_a_plain_copy_at_any_alignment_and_length() {
        let src: Vec<u8> = (0..8192u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
        for dst_at in [0usize, 1, 8, 16, 48, 64] {
            for len in [0usize, 1, 15, 16, 63, 64, 128, 4096, 4096 + 16, 8192 - 64] {
                for src_at in [0usize, 3, 16] {
                    let len = len.min(8192 - src_at);
                    let mut dst = vec![0xAAu8; 8192 + 64];
                    let mut want = dst.clone();
                    copy_streaming(&mut dst[dst_at..dst_at + len], &src[src_at..src_at + len]);
                    want[dst_at..dst_at + len].copy_from_slice(&src[src_at..src_at + len]);
                    assert_eq!(dst, want, "dst_at {dst_at} src_at {src_at} len {len}");
                }
            }
        }
    }
}
