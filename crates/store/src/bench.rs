//! `shoal store bench`: the evaluation of the JULEA/BlueStore paper (`000_…`) done on this
//! engine, side by side with the `posix` baseline, the `mem` backend and the raw device.
//!
//! For each backend, durability mode and block size, a *cell* writes blocks sequentially into
//! 4 MiB objects (one object per operation for 4 MiB blocks, as `rados bench` does), then reads
//! them back sequentially and checks every byte; then overwrites as many blocks at random places
//! among those written (what a database or a file system on an image does) and reads everything
//! back sequentially again, checking every byte (what those overwrites did to the layout). The raw limit does the same with `O_DIRECT`
//! `pwrite`/`pread` on the very file or device the `block` store then uses.
//!
//! Measured, not computed: throughput and latency per operation from the clock, device bytes
//! from the process's own I/O counters (`/proc/self/io`, which include fjall's background
//! threads), and peak memory from `VmHWM` (reset between phases through `clear_refs`).

use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::Serialize;
use shoal_util::AlignedBuf;

use crate::api::{BackendKind, Durability, ObjectStore, Transaction};
use crate::engine::MemEngine;
use crate::error::{Result, StoreError};
use crate::open::{MkfsOptions, mkfs};

/// The phases of a cell, in order (`RawResult::op`, `CellResult::op`).
pub const OPS: [&str; 4] = ["write", "read", "overwrite", "reread"];

/// The earlier operation whose place the `k`-th overwrite of a cell of `done` operations takes:
/// spread over all of them, the same in every cell and round.
fn overwrite_target(k: u64, done: u64) -> u64 {
    let mut x = k.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0xD1B5_4A32_D192_ED03;
    x ^= x >> 31;
    x = x.wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x ^= x >> 29;
    x % done.max(1)
}

/// Size of the objects that small blocks are written into.
pub const OBJECT_BYTES: u64 = 4 << 20;
const COLL: &str = "bench";

/// How often a write is made durable.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Every operation is durable when it returns.
    Sync,
    /// Operations are lazy; every `batch_ops`-th is followed by a sync.
    Batch,
    /// No sync at all while timing.
    Nosync,
}

impl Mode {
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Mode::Sync => "sync",
            Mode::Batch => "batch",
            Mode::Nosync => "nosync",
        }
    }
}

impl std::str::FromStr for Mode {
    type Err = StoreError;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "sync" => Ok(Mode::Sync),
            "batch" => Ok(Mode::Batch),
            "nosync" => Ok(Mode::Nosync),
            other => {
                Err(StoreError::InvalidArgument(format!("unknown mode {other:?} (expected sync, batch or nosync)")))
            }
        }
    }
}

/// What to run.
#[derive(Clone, Debug, Serialize)]
pub struct BenchConfig {
    /// Scratch directory: holds the `block` and `posix` stores and, unless `device` is set, the
    /// file the `block` store and the raw measurement use.
    pub dir: PathBuf,
    /// Raw block device or file for the raw measurement and the `block` store (overwritten).
    pub device: Option<PathBuf>,
    /// Size of the `block` store and of the raw measurement's region; the bench file (or
    /// `device`) holds both, so it is twice this size.
    pub device_bytes: u64,
    pub block_sizes: Vec<u64>,
    pub modes: Vec<Mode>,
    pub backends: Vec<BackendKind>,
    /// Bytes written per cell (fewer if `max_ops` or `max_cell_ms` stop it first).
    pub cell_bytes: u64,
    pub max_ops: u64,
    pub max_cell_ms: u64,
    /// In `batch` mode, a sync follows every this many operations.
    pub batch_ops: u64,
    /// Times each cell is measured; the median is reported.
    pub rounds: u32,
}

impl BenchConfig {
    /// The full matrix of the paper: 4 KiB to 4 MiB, three modes, three backends.
    #[must_use]
    pub fn full(dir: PathBuf) -> Self {
        Self {
            dir,
            device: None,
            device_bytes: 1 << 30,
            block_sizes: vec![4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20],
            modes: vec![Mode::Sync, Mode::Batch, Mode::Nosync],
            backends: vec![BackendKind::Block, BackendKind::Posix, BackendKind::Mem],
            cell_bytes: 384 << 20,
            max_ops: 2048,
            max_cell_ms: 3000,
            batch_ops: 100,
            rounds: 5,
        }
    }

    /// A reduced matrix that finishes in well under a minute.
    #[must_use]
    pub fn quick(dir: PathBuf) -> Self {
        Self {
            device_bytes: 256 << 20,
            block_sizes: vec![4 << 10, 64 << 10, 4 << 20],
            modes: vec![Mode::Sync, Mode::Nosync],
            cell_bytes: 32 << 20,
            max_ops: 256,
            max_cell_ms: 700,
            rounds: 1,
            ..Self::full(dir)
        }
    }
}

/// One raw device measurement.
#[derive(Clone, Debug, Serialize)]
pub struct RawResult {
    pub op: &'static str,
    pub mode: &'static str,
    pub block_size: u64,
    pub ops: u64,
    pub mb_per_s: f64,
    pub ops_per_s: f64,
    pub lat_us_p50: f64,
    pub lat_us_p99: f64,
}

/// One engine measurement.
#[derive(Clone, Debug, Serialize)]
pub struct CellResult {
    pub backend: &'static str,
    pub mode: &'static str,
    pub op: &'static str,
    pub block_size: u64,
    pub ops: u64,
    pub mb_per_s: f64,
    pub ops_per_s: f64,
    pub lat_us_p50: f64,
    pub lat_us_p99: f64,
    /// Bytes the process wrote (writes) or read (reads) to storage per byte of user data,
    /// including metadata and logs.
    pub device_bytes_per_user_byte: f64,
}

impl RawResult {
    fn new(op: &'static str, mode: Mode, bs: u64, timing: Timing) -> Self {
        let (ops, mb_per_s, ops_per_s, lat_us_p50, lat_us_p99) = timing.stats();
        Self { op, mode: mode.name(), block_size: bs, ops, mb_per_s, ops_per_s, lat_us_p50, lat_us_p99 }
    }
}

impl CellResult {
    fn new(backend: &'static str, mode: Mode, op: &'static str, bs: u64, timing: Timing, device_ratio: f64) -> Self {
        let (ops, mb_per_s, ops_per_s, lat_us_p50, lat_us_p99) = timing.stats();
        Self {
            backend,
            mode: mode.name(),
            op,
            block_size: bs,
            ops,
            mb_per_s,
            ops_per_s,
            lat_us_p50,
            lat_us_p99,
            device_bytes_per_user_byte: device_ratio,
        }
    }
}

/// Peak resident memory of one phase.
#[derive(Clone, Debug, Serialize)]
pub struct MemoryResult {
    /// The backends that ran in the phase, joined with `+`.
    pub backend: String,
    pub peak_rss_bytes: u64,
}

/// Ratios of throughput measured back to back in the same round, the median over rounds. On a
/// noisy machine these paired ratios are steadier than ratios of separately taken medians.
#[derive(Clone, Debug, Serialize)]
pub struct PairedRatio {
    pub mode: &'static str,
    pub op: &'static str,
    pub block_size: u64,
    pub block_vs_raw: Option<f64>,
    pub block_vs_posix: Option<f64>,
    /// The per-round ratios the medians above are taken of, in round order (empty when the
    /// other side did not run), so that a reader can see how much they spread.
    pub block_vs_raw_rounds: Vec<f64>,
    pub block_vs_posix_rounds: Vec<f64>,
}

/// The whole run.
#[derive(Clone, Debug, Serialize)]
pub struct BenchReport {
    pub machine: Machine,
    pub config: BenchConfig,
    pub raw: Vec<RawResult>,
    pub results: Vec<CellResult>,
    pub paired: Vec<PairedRatio>,
    pub memory: Vec<MemoryResult>,
}

fn median(mut v: Vec<f64>) -> Option<f64> {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied()
}

#[derive(Clone, Debug, Serialize)]
pub struct Machine {
    pub cpu: String,
    pub cpus: usize,
    pub kernel: String,
    pub target: String,
    pub direct_io: bool,
}

/// Process I/O counters from `/proc/self/io`.
#[derive(Clone, Copy, Default, Debug)]
struct IoCounters {
    read_bytes: u64,
    write_bytes: u64,
}

fn io_counters() -> IoCounters {
    let text = std::fs::read_to_string("/proc/self/io").unwrap_or_default();
    let field =
        |name: &str| text.lines().find_map(|l| l.strip_prefix(name)).and_then(|v| v.trim().parse().ok()).unwrap_or(0);
    IoCounters { read_bytes: field("read_bytes:"), write_bytes: field("write_bytes:") }
}

/// Peak resident set size of this process, in bytes.
#[must_use]
pub fn peak_rss_bytes() -> u64 {
    let text = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    text.lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

fn reset_peak_rss() {
    // Writing 5 to clear_refs resets VmHWM to the current RSS (Linux 4.0 and later).
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

fn machine(direct_io: bool) -> Machine {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let cpu = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .map(|v| v.trim_start_matches([' ', '\t', ':']).to_string())
        .unwrap_or_default();
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default().trim().to_string();
    Machine {
        cpu,
        cpus: std::thread::available_parallelism().map_or(1, std::num::NonZero::get),
        kernel,
        target: format!("{}-{}", std::env::consts::ARCH, std::env::consts::OS),
        direct_io,
    }
}

/// Deterministic incompressible data: the cell's operations take windows of it.
fn pattern(len: usize) -> Vec<u8> {
    shoal_util::pattern::xorshift_bytes(0x9E37_79B9_7F4A_7C15, len)
}

/// The bytes operation `i` of a cell writes.
fn op_data(pat: &[u8], bs: u64, i: u64) -> &[u8] {
    let shift = ((i * 4099) % (pat.len() as u64 - bs)) as usize;
    &pat[shift..shift + bs as usize]
}

fn percentile(sorted_us: &[f64], p: f64) -> f64 {
    if sorted_us.is_empty() {
        return 0.0;
    }
    let idx = ((sorted_us.len() as f64 - 1.0) * p).round() as usize;
    sorted_us[idx.min(sorted_us.len() - 1)]
}

/// Operations timed one by one. Throughput is bytes over the sum of the timed operations, so the
/// harness's own work between operations (filling buffers) counts for no one.
struct Timing {
    ops: u64,
    bytes: u64,
    elapsed: Duration,
    lat_us: Vec<f64>,
}

impl Timing {
    fn new(cap: u64) -> Self {
        Self { ops: 0, bytes: 0, elapsed: Duration::ZERO, lat_us: Vec::with_capacity(cap as usize) }
    }
    fn record(&mut self, bytes: u64, took: Duration) {
        self.ops += 1;
        self.bytes += bytes;
        self.elapsed += took;
        self.lat_us.push(took.as_secs_f64() * 1e6);
    }
    fn stats(mut self) -> (u64, f64, f64, f64, f64) {
        self.lat_us.sort_by(f64::total_cmp);
        let secs = self.elapsed.as_secs_f64().max(1e-9);
        (
            self.ops,
            self.bytes as f64 / 1e6 / secs,
            self.ops as f64 / secs,
            percentile(&self.lat_us, 0.50),
            percentile(&self.lat_us, 0.99),
        )
    }
}

/// Number of operations a cell may do.
fn cell_ops(cfg: &BenchConfig, bs: u64, capacity_bytes: u64) -> u64 {
    let by_bytes = (cfg.cell_bytes.min(capacity_bytes / 2) / bs).max(1);
    by_bytes.min(cfg.max_ops).max(1)
}

fn open_direct(path: &Path) -> Result<File> {
    let direct = rustix::fs::OFlags::DIRECT.bits() as i32;
    OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(direct)
        .open(path)
        .map_err(|e| StoreError::io(format!("opening {} for direct I/O", path.display()), e))
}

/// One raw measurement: `O_DIRECT` writes then reads of `bs` blocks, sequentially through the
/// region `[region_offset, region_offset + region_bytes)` of the target, starting where the
/// previous raw cell stopped (`cursor`), so that raw writes move through the region the way
/// the engine's copy-on-write allocations move through its own, instead of rewriting blocks
/// the host may still cache.
/// Whether operation `i` of `n` ends a `batch` mode group (a sync follows it).
fn batch_ends(cfg: &BenchConfig, i: u64, n: u64) -> bool {
    (i + 1).is_multiple_of(cfg.batch_ops) || i + 1 == n
}

/// Times `n` writes of `bs` bytes to the raw file: write `i` goes to device offset `place(i)` and
/// holds operation `content(i)`'s bytes; synced as `mode` says. Stops early past the cell's time.
#[allow(clippy::too_many_arguments)]
fn raw_writes(
    cfg: &BenchConfig,
    file: &File,
    mode: Mode,
    (bs, n): (u64, u64),
    buf: &mut AlignedBuf,
    place: &dyn Fn(u64) -> u64,
    content: &dyn Fn(u64) -> u64,
    pat: &[u8],
) -> Result<Timing> {
    let mut w = Timing::new(n);
    let start = Instant::now();
    for i in 0..n {
        buf.copy_from_slice(op_data(pat, bs, content(i)));
        let t = Instant::now();
        file.write_all_at(buf, place(i)).map_err(|e| StoreError::io("raw write", e))?;
        if mode == Mode::Sync || (mode == Mode::Batch && batch_ends(cfg, i, n)) {
            file.sync_data().map_err(|e| StoreError::io("raw fdatasync", e))?;
        }
        w.record(bs, t.elapsed());
        if start.elapsed().as_millis() as u64 > cfg.max_cell_ms {
            break;
        }
    }
    Ok(w)
}

/// Times `n` reads of `buf.len()` bytes from the raw file, read `i` at device offset `place(i)`.
fn raw_reads(file: &File, buf: &mut AlignedBuf, n: u64, place: &dyn Fn(u64) -> u64) -> Result<Timing> {
    let mut r = Timing::new(n);
    for i in 0..n {
        let t = Instant::now();
        file.read_exact_at(buf, place(i)).map_err(|e| StoreError::io("raw read", e))?;
        r.record(buf.len() as u64, t.elapsed());
    }
    Ok(r)
}

/// Times `n` writes of `bs` bytes to the store: write `i` goes to the place of operation
/// `target(i)` (see [`object_name`]) and holds operation `content(i)`'s bytes, durable as `mode`
/// says. Stops early past the cell's time.
#[allow(clippy::too_many_arguments)]
fn store_writes(
    cfg: &BenchConfig,
    store: &dyn ObjectStore,
    mode: Mode,
    (bs, n): (u64, u64),
    spare: &mut Option<AlignedBuf>,
    target: &dyn Fn(u64) -> u64,
    content: &dyn Fn(u64) -> u64,
    pat: &[u8],
) -> Result<Timing> {
    let durability = if mode == Mode::Sync { Durability::Sync } else { Durability::Batch };
    let mut w = Timing::new(n);
    let start = Instant::now();
    for i in 0..n {
        let (obj, off) = object_name(bs, target(i));
        // Data arrives in an aligned buffer, as it does from a network receive path; every
        // backend gets the same buffer.
        let mut data = spare.take().unwrap_or_else(|| AlignedBuf::zeroed(bs as usize));
        data.copy_from_slice(op_data(pat, bs, content(i)));
        let data = std::sync::Arc::new(data);
        let mut txn = Transaction::new();
        txn.write_aligned(COLL, &obj, off, std::sync::Arc::clone(&data));
        let t = Instant::now();
        store.commit(txn, durability)?;
        if mode == Mode::Batch && batch_ends(cfg, i, n) {
            store.sync()?;
        }
        w.record(bs, t.elapsed());
        // The store keeps no reference once the commit returns: reuse the buffer.
        *spare = std::sync::Arc::try_unwrap(data).ok();
        if start.elapsed().as_millis() as u64 > cfg.max_cell_ms {
            break;
        }
    }
    Ok(w)
}

/// Reads the `n` blocks of `bs` bytes the write phases left, in order, timing each, and checks
/// that block `j` holds what operation `written_by(j)` wrote (`phase` names the phase in the
/// error).
fn store_reads(
    store: &dyn ObjectStore,
    bs: u64,
    n: u64,
    pat: &[u8],
    phase: &str,
    written_by: &dyn Fn(u64) -> u64,
) -> Result<Timing> {
    let mut t = Timing::new(n);
    for j in 0..n {
        let (obj, off) = object_name(bs, j);
        let start = Instant::now();
        let data = store.read(COLL, &obj, off, bs)?;
        t.record(bs, start.elapsed());
        if data != op_data(pat, bs, written_by(j)) {
            return Err(StoreError::Corrupt(format!("bench {phase} of {COLL}/{obj} at {off} returned wrong data")));
        }
    }
    Ok(t)
}

#[allow(clippy::too_many_arguments)]
fn raw_cell(
    cfg: &BenchConfig,
    file: &File,
    region_offset: u64,
    region_bytes: u64,
    cursor: &mut u64,
    mode: Mode,
    bs: u64,
    pat: &[u8],
) -> Result<[RawResult; 4]> {
    let n = cell_ops(cfg, bs, region_bytes);
    let slots = region_bytes / bs;
    let first = cursor.div_ceil(bs);
    let mut buf = AlignedBuf::zeroed(bs as usize);
    let place = |i: u64| region_offset + ((first + i) % slots) * bs;
    let w = raw_writes(cfg, file, mode, (bs, n), &mut buf, &place, &|i| i, pat)?;
    let done = w.ops;
    let write = RawResult::new("write", mode, bs, w);
    *cursor = ((first + done) % slots) * bs;
    let read = RawResult::new("read", mode, bs, raw_reads(file, &mut buf, done, &place)?);

    let o =
        raw_writes(cfg, file, mode, (bs, done), &mut buf, &|k| place(overwrite_target(k, done)), &|k| done + k, pat)?;
    let overwrite = RawResult::new("overwrite", mode, bs, o);
    let reread = RawResult::new("reread", mode, bs, raw_reads(file, &mut buf, done, &place)?);
    Ok([write, read, overwrite, reread])
}

/// Writes the whole file once. A freshly preallocated file has *unwritten* extents
/// that the file system converts, with a journal commit, on the first write to each of them; a
/// real block device has no such state. Preconditioning gives the raw measurement and the
/// `block` store the same, device-like starting point.
fn precondition(path: &Path, len: u64, pat: &[u8]) -> Result<()> {
    let file = open_direct(path)?;
    // Incompressible data, not zeros: a virtual disk may turn written zeros back into holes
    // (zero detection), and the first real write to a hole then pays for allocation on the
    // host, which would charge whoever writes a region first.
    let mut chunk = AlignedBuf::zeroed(4 << 20);
    chunk.copy_from_slice(&pat[..4 << 20]);
    let mut off = 0;
    while off < len {
        let n = (chunk.len() as u64).min(len - off) as usize;
        file.write_all_at(&chunk[..n], off).map_err(|e| StoreError::io("preconditioning the bench file", e))?;
        off += n as u64;
    }
    file.sync_all().map_err(|e| StoreError::io("preconditioning the bench file", e))
}

/// Drops the page cache of every file under `dir`, so that reads of the posix baseline come
/// from the device like the engine's direct reads do.
fn drop_file_cache(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            drop_file_cache(&path);
        } else if let Ok(f) = File::open(&path) {
            let _ = f.sync_data();
            let _ = rustix::fs::fadvise(&f, 0, None, rustix::fs::Advice::DontNeed);
        }
    }
}

fn object_name(bs: u64, i: u64) -> (String, u64) {
    let per_obj = (OBJECT_BYTES / bs).max(1);
    (format!("obj{:06}", i / per_obj), (i % per_obj) * bs)
}

#[allow(clippy::too_many_arguments)]
fn store_cell(
    cfg: &BenchConfig,
    store: &dyn ObjectStore,
    posix_dir: Option<&Path>,
    capacity: u64,
    mode: Mode,
    bs: u64,
    pat: &[u8],
) -> Result<[CellResult; 4]> {
    let backend = store.backend().name();
    let n = cell_ops(cfg, bs, capacity);
    let mut setup = Transaction::new();
    setup.create_collection(COLL);
    store.commit(setup, Durability::Sync)?;
    store.flush()?;

    let io0 = io_counters();
    let mut spare: Option<AlignedBuf> = None;
    let w = store_writes(cfg, store, mode, (bs, n), &mut spare, &|i| i, &|i| i, pat)?;
    // Everything the writes caused, including log checkpoints and metadata flushes that happen
    // after the timed loop, counts towards the device bytes.
    store.flush()?;
    let io1 = io_counters();
    let done = w.ops;
    let user = (done * bs) as f64;
    let wamp = (io1.write_bytes - io0.write_bytes) as f64 / user.max(1.0);
    let write = CellResult::new(backend, mode, "write", bs, w, wamp);

    if let Some(dir) = posix_dir {
        drop_file_cache(dir);
    }
    let io0 = io_counters();
    let r = store_reads(store, bs, done, pat, "read", &|i| i)?;
    let io1 = io_counters();
    let ramp = (io1.read_bytes - io0.read_bytes) as f64 / (done * bs) as f64;
    let read = CellResult::new(backend, mode, "read", bs, r, ramp);

    // Overwrites at random places among the blocks written; `src[j]` is the operation whose
    // bytes block `j` holds now.
    let io0 = io_counters();
    let o = store_writes(cfg, store, mode, (bs, done), &mut spare, &|k| overwrite_target(k, done), &|k| done + k, pat)?;
    let mut src: Vec<u64> = (0..done).collect();
    for k in 0..o.ops {
        src[overwrite_target(k, done) as usize] = done + k;
    }
    store.flush()?;
    let io1 = io_counters();
    let over_bytes = (o.ops * bs) as f64;
    let oamp = (io1.write_bytes - io0.write_bytes) as f64 / over_bytes.max(1.0);
    let overwrite = CellResult::new(backend, mode, "overwrite", bs, o, oamp);

    if let Some(dir) = posix_dir {
        drop_file_cache(dir);
    }
    let io0 = io_counters();
    let rr = store_reads(store, bs, done, pat, "reread", &|j| src[j as usize])?;
    let io1 = io_counters();
    let rramp = (io1.read_bytes - io0.read_bytes) as f64 / (done * bs) as f64;
    let reread = CellResult::new(backend, mode, "reread", bs, rr, rramp);

    // Clean up so the next cell starts from an empty store.
    let mut after = None;
    loop {
        let page = store.list_objects(COLL, "", after.as_deref(), 1000)?;
        let mut txn = Transaction::new();
        for o in &page.objects {
            txn.remove(COLL, o);
        }
        store.commit(txn, Durability::Batch)?;
        match page.next {
            Some(next) => after = Some(next),
            None => break,
        }
    }
    let mut txn = Transaction::new();
    txn.remove_collection(COLL);
    store.commit(txn, Durability::Sync)?;
    store.flush()?;
    Ok([write, read, overwrite, reread])
}

/// `4096` → `4 KiB`.
#[must_use]
pub fn human(bytes: u64) -> String {
    if bytes >= 1 << 20 && bytes.is_multiple_of(1 << 20) {
        format!("{} MiB", bytes >> 20)
    } else if bytes >= 1 << 10 && bytes.is_multiple_of(1 << 10) {
        format!("{} KiB", bytes >> 10)
    } else {
        format!("{bytes} B")
    }
}

/// Number of progress messages a run emits, for progress bars.
#[must_use]
pub fn total_steps(cfg: &BenchConfig) -> u64 {
    let cells = (cfg.modes.len() * cfg.block_sizes.len()) as u64;
    cells * cfg.rounds as u64 * (cfg.backends.len() as u64 + 1)
}

/// The median of `rounds` by write (or read) throughput.
fn median_by_mbps<T: Clone>(mut rounds: Vec<T>, mbps: impl Fn(&T) -> f64) -> Option<T> {
    rounds.sort_by(|a, b| mbps(a).total_cmp(&mbps(b)));
    rounds.get(rounds.len() / 2).cloned()
}

struct Target {
    store: Box<dyn ObjectStore>,
    posix_dir: Option<PathBuf>,
}

fn make_store(cfg: &BenchConfig, backend: BackendKind, device: &Path) -> Result<Target> {
    Ok(match backend {
        BackendKind::Block => {
            let opts =
                MkfsOptions { backend, size_bytes: cfg.device_bytes, device: Some(device.to_path_buf()), force: true };
            Target { store: mkfs(&cfg.dir.join("block"), &opts)?, posix_dir: None }
        }
        BackendKind::Posix => {
            let opts = MkfsOptions { backend, size_bytes: cfg.device_bytes, device: None, force: true };
            let dir = cfg.dir.join("posix");
            Target { store: mkfs(&dir, &opts)?, posix_dir: Some(dir) }
        }
        BackendKind::Mem => Target { store: Box::new(MemEngine::new_mem(cfg.device_bytes)?), posix_dir: None },
    })
}

/// Runs the benchmark. `progress` is called once per finished measurement.
///
/// The data file (or `device`) is twice `device_bytes`: the `block` store lives in the first
/// half and the raw measurement uses the second, so that raw, `block` and `posix` cells can run
/// interleaved, round after round, and each reported figure is the median of its rounds. On a
/// shared, noisy machine that keeps the ratios between them honest. The `mem` backend runs
/// last, on its own, because its data lives in this process's memory and would hide the
/// engine's own memory use.
pub fn run(cfg: &BenchConfig, progress: &mut dyn FnMut(&str)) -> Result<BenchReport> {
    for &bs in &cfg.block_sizes {
        if bs == 0 || bs % 4096 != 0 || bs > OBJECT_BYTES {
            return Err(StoreError::InvalidArgument(format!(
                "block size {bs} must be a multiple of 4096 up to {OBJECT_BYTES}"
            )));
        }
    }
    if cfg.rounds == 0 {
        return Err(StoreError::InvalidArgument("rounds must be at least 1".into()));
    }
    std::fs::create_dir_all(&cfg.dir).map_err(|e| StoreError::io(format!("creating {}", cfg.dir.display()), e))?;
    let pat = pattern((OBJECT_BYTES * 2) as usize);
    let file_bytes = cfg.device_bytes * 2;
    let target = match &cfg.device {
        Some(d) => d.clone(),
        None => {
            let path = cfg.dir.join("block.img");
            let f = File::create(&path).map_err(|e| StoreError::io(format!("creating {}", path.display()), e))?;
            rustix::fs::fallocate(&f, rustix::fs::FallocateFlags::empty(), 0, file_bytes)
                .map_err(|e| StoreError::io(format!("preallocating {}", path.display()), e.into()))?;
            drop(f);
            precondition(&path, file_bytes, &pat)?;
            path
        }
    };
    let raw_file = open_direct(&target)?;
    let target_bytes = rustix::fs::seek(&raw_file, rustix::fs::SeekFrom::End(0))
        .map_err(|e| StoreError::io("sizing the bench target", e.into()))?;
    if target_bytes < file_bytes {
        return Err(StoreError::DeviceTooSmall {
            path: target.clone(),
            size_bytes: target_bytes,
            min_bytes: file_bytes,
        });
    }

    let disk_backends: Vec<BackendKind> = cfg.backends.iter().copied().filter(|b| *b != BackendKind::Mem).collect();
    let mut raw_rounds: Vec<Vec<[RawResult; 4]>> = Vec::new();
    let mut cell_rounds: Vec<(BackendKind, Vec<[CellResult; 4]>)> = Vec::new();
    let mut memory = Vec::new();
    let mut raw_cursor = 0u64;
    let mut paired = Vec::new();

    reset_peak_rss();
    let targets: Vec<Target> = disk_backends.iter().map(|b| make_store(cfg, *b, &target)).collect::<Result<_>>()?;
    for &mode in &cfg.modes {
        for &bs in &cfg.block_sizes {
            let mut raws = Vec::new();
            let mut cells: Vec<Vec<[CellResult; 4]>> = vec![Vec::new(); targets.len()];
            for round in 0..cfg.rounds as usize {
                // Rotate who goes first each round, so that no target always runs right after
                // another one's clean-up.
                let n_targets = targets.len() + 1;
                for k in 0..n_targets {
                    let slot = (round + k) % n_targets;
                    if slot == targets.len() {
                        let r = raw_cell(
                            cfg,
                            &raw_file,
                            cfg.device_bytes,
                            cfg.device_bytes,
                            &mut raw_cursor,
                            mode,
                            bs,
                            &pat,
                        )?;
                        progress(&format!("raw {} {}: write {:.1} MB/s", mode.name(), human(bs), r[0].mb_per_s));
                        raws.push(r);
                    } else {
                        let t = &targets[slot];
                        let c = store_cell(
                            cfg,
                            t.store.as_ref(),
                            t.posix_dir.as_deref(),
                            cfg.device_bytes,
                            mode,
                            bs,
                            &pat,
                        )?;
                        progress(&format!(
                            "{} {} {}: write {:.1} MB/s",
                            c[0].backend,
                            mode.name(),
                            human(bs),
                            c[0].mb_per_s
                        ));
                        cells[slot].push(c);
                    }
                }
            }
            let find = |b: BackendKind| disk_backends.iter().position(|x| *x == b);
            for (op, name) in OPS.into_iter().enumerate() {
                let ratios_to = |other: &dyn Fn(usize) -> f64| -> Vec<f64> {
                    let Some(bi) = find(BackendKind::Block) else { return Vec::new() };
                    (0..cfg.rounds as usize).map(|r| cells[bi][r][op].mb_per_s / other(r).max(1e-9)).collect()
                };
                let vs_raw = ratios_to(&|r| raws[r][op].mb_per_s);
                let vs_posix = find(BackendKind::Posix).map(|pi| ratios_to(&|r| cells[pi][r][op].mb_per_s));
                let vs_posix = vs_posix.unwrap_or_default();
                paired.push(PairedRatio {
                    mode: mode.name(),
                    op: name,
                    block_size: bs,
                    block_vs_raw: median(vs_raw.clone()),
                    block_vs_posix: median(vs_posix.clone()),
                    block_vs_raw_rounds: vs_raw,
                    block_vs_posix_rounds: vs_posix,
                });
            }
            raw_rounds.push(raws);
            for (b, c) in disk_backends.iter().zip(cells) {
                cell_rounds.push((*b, c));
            }
        }
    }
    drop(targets);
    if !disk_backends.is_empty() {
        let names: Vec<&str> = disk_backends.iter().map(|b| b.name()).collect();
        memory.push(MemoryResult { backend: names.join("+"), peak_rss_bytes: peak_rss_bytes() });
    }
    if cfg.backends.contains(&BackendKind::Mem) {
        reset_peak_rss();
        let t = make_store(cfg, BackendKind::Mem, &target)?;
        for &mode in &cfg.modes {
            for &bs in &cfg.block_sizes {
                let mut rounds = Vec::new();
                for _ in 0..cfg.rounds {
                    let c = store_cell(cfg, t.store.as_ref(), None, cfg.device_bytes, mode, bs, &pat)?;
                    progress(&format!("mem {} {}: write {:.1} MB/s", mode.name(), human(bs), c[0].mb_per_s));
                    rounds.push(c);
                }
                cell_rounds.push((BackendKind::Mem, rounds));
            }
        }
        drop(t);
        memory.push(MemoryResult { backend: "mem".into(), peak_rss_bytes: peak_rss_bytes() });
    }

    let mut raw = Vec::new();
    for rounds in raw_rounds {
        for op in 0..OPS.len() {
            let picked = median_by_mbps(rounds.iter().map(|r| r[op].clone()).collect(), |r| r.mb_per_s);
            raw.extend(picked);
        }
    }
    let mut results = Vec::new();
    for (_, rounds) in cell_rounds {
        for op in 0..OPS.len() {
            let picked = median_by_mbps(rounds.iter().map(|r| r[op].clone()).collect(), |r| r.mb_per_s);
            results.extend(picked);
        }
    }
    Ok(BenchReport { machine: machine(true), config: cfg.clone(), raw, results, paired, memory })
}
