//! Creating and mounting stores by path.
//!
//! Every store lives in a *store directory* holding `SHOAL_STORE` (a JSON description written
//! last by mkfs, so a half-made store is never mistaken for a store) and `lock` (held with an
//! exclusive `flock` for as long as the store is mounted). A `block` store keeps its fjall
//! metadata in `meta/` and its data on `block`: a preallocated file, or a symlink to a raw
//! block device or file given to mkfs with `device`, the way a Ceph OSD directory links
//! `block` to its disk. A `posix` store keeps its files in `colls/`.

use std::fs::{self, File, OpenOptions};
use std::io::{ErrorKind, Write};
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::api::{BackendKind, ObjectStore};
use crate::engine::device::{CacheSizes, Device, FileDevice};
use crate::engine::kv::FjallKv;
use crate::engine::{BlockEngine, MIN_DEVICE_BYTES};
use crate::error::{Result, StoreError};
use crate::posix::PosixStore;

/// Name of the description file in a store directory.
pub const DESCRIPTOR: &str = "SHOAL_STORE";
const FORMAT_NAME: &str = "shoal-store";

/// The contents of `SHOAL_STORE`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Descriptor {
    pub format: String,
    pub version: u32,
    pub backend: String,
    pub size_bytes: u64,
}

/// Options of [`mkfs`].
#[derive(Clone, Debug)]
pub struct MkfsOptions {
    pub backend: BackendKind,
    /// Capacity. For a `block` store on a file, the file's size; with `device`, at most the
    /// device's size (0: all of it).
    pub size_bytes: u64,
    /// Raw block device or existing file to hold a `block` store's data.
    pub device: Option<PathBuf>,
    /// Overwrite an existing store or non-empty directory.
    pub force: bool,
}

/// A mounted store of any backend.
pub type Store = Box<dyn ObjectStore>;

fn io_err(what: String) -> impl FnOnce(std::io::Error) -> StoreError {
    move |e| StoreError::io(what, e)
}

/// Takes the exclusive mount lock of the store directory.
fn take_lock(dir: &Path) -> Result<File> {
    let path = dir.join("lock");
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(io_err(format!("opening {}", path.display())))?;
    match rustix::fs::flock(f.as_fd(), rustix::fs::FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => Ok(f),
        Err(rustix::io::Errno::WOULDBLOCK) => Err(StoreError::Busy { path: dir.to_path_buf() }),
        Err(e) => Err(StoreError::io(format!("locking {}", path.display()), e.into())),
    }
}

fn read_descriptor(dir: &Path) -> Result<Descriptor> {
    let path = dir.join(DESCRIPTOR);
    let bytes = match fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == ErrorKind::NotFound => {
            return Err(StoreError::NotAStore { path: dir.to_path_buf(), reason: format!("no {DESCRIPTOR} file") });
        }
        Err(e) => return Err(StoreError::io(format!("reading {}", path.display()), e)),
    };
    let d: Descriptor = serde_json::from_slice(&bytes).map_err(|e| StoreError::NotAStore {
        path: dir.to_path_buf(),
        reason: format!("{DESCRIPTOR} is unreadable: {e}"),
    })?;
    if d.format != FORMAT_NAME {
        return Err(StoreError::NotAStore {
            path: dir.to_path_buf(),
            reason: format!("unknown format {:?}", d.format),
        });
    }
    Ok(d)
}

/// Reads a store's description without mounting it.
pub fn describe(dir: &Path) -> Result<Descriptor> {
    check_dir(dir)?;
    read_descriptor(dir)
}

fn check_dir(dir: &Path) -> Result<()> {
    match fs::metadata(dir) {
        Ok(m) if m.is_dir() => Ok(()),
        Ok(_) => Err(StoreError::NotAStore { path: dir.to_path_buf(), reason: "not a directory".into() }),
        Err(e) if e.kind() == ErrorKind::NotFound => Err(StoreError::PathNotFound { path: dir.to_path_buf() }),
        Err(e) => Err(StoreError::io(format!("stat {}", dir.display()), e)),
    }
}

fn write_descriptor(dir: &Path, d: &Descriptor) -> Result<()> {
    let path = dir.join(DESCRIPTOR);
    let tmp = dir.join(format!("{DESCRIPTOR}.tmp"));
    let mut f = File::create(&tmp).map_err(io_err(format!("creating {}", tmp.display())))?;
    let json = serde_json::to_vec_pretty(d).map_err(|e| StoreError::InvalidArgument(e.to_string()))?;
    f.write_all(&json).map_err(io_err(format!("writing {}", tmp.display())))?;
    f.sync_all().map_err(io_err(format!("syncing {}", tmp.display())))?;
    fs::rename(&tmp, &path).map_err(io_err(format!("renaming {}", tmp.display())))?;
    File::open(dir).and_then(|d| d.sync_all()).map_err(io_err(format!("syncing {}", dir.display())))
}

/// Creates a new store in directory `dir` (created if missing) and returns it mounted.
///
/// Refuses to touch an existing store or a non-empty directory unless `force` is set, and
/// refuses even then if the existing store is mounted by someone else. When this returns, the
/// empty store is durable.
pub fn mkfs(dir: &Path, opts: &MkfsOptions) -> Result<Store> {
    if opts.backend == BackendKind::Mem {
        return Err(StoreError::InvalidArgument(
            "the mem backend lives in RAM and has no path; use it through `shoal store bench` or a cluster".into(),
        ));
    }
    match fs::metadata(dir) {
        Ok(m) if !m.is_dir() => {
            return Err(StoreError::InvalidArgument(format!(
                "{} is not a directory; a store is a directory (use --device to put block data on a device or file)",
                dir.display()
            )));
        }
        Ok(_) => {
            let non_empty = fs::read_dir(dir).map_err(io_err(format!("listing {}", dir.display())))?.next().is_some();
            if non_empty && !opts.force {
                return Err(StoreError::AlreadyExists { path: dir.to_path_buf() });
            }
        }
        Err(e) if e.kind() == ErrorKind::NotFound => {
            fs::create_dir_all(dir).map_err(io_err(format!("creating {}", dir.display())))?;
        }
        Err(e) => return Err(StoreError::io(format!("stat {}", dir.display()), e)),
    }
    let lock = take_lock(dir)?;
    match format_locked(dir, opts, lock) {
        Ok(store) => Ok(store),
        Err(e) => {
            // Leave no half-made store behind (it would make the next mkfs refuse the
            // directory as non-empty): everything in it was created by this call.
            clear_dir(dir, false);
            Err(e)
        }
    }
}

/// Removes the contents of `dir` (keeping the lock file if `keep_lock`), ignoring errors.
fn clear_dir(dir: &Path, keep_lock: bool) {
    let Ok(entries) = fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        if keep_lock && entry.file_name() == "lock" {
            continue;
        }
        let p = entry.path();
        let is_dir = entry.file_type().map(|t| t.is_dir()).unwrap_or(false);
        let _ = if is_dir { fs::remove_dir_all(&p) } else { fs::remove_file(&p) };
    }
}

fn format_locked(dir: &Path, opts: &MkfsOptions, lock: File) -> Result<Store> {
    // With the lock held nobody else has the store mounted; clear out the old contents.
    for entry in fs::read_dir(dir).map_err(io_err(format!("listing {}", dir.display())))? {
        let entry = entry.map_err(io_err(format!("listing {}", dir.display())))?;
        if entry.file_name() == "lock" {
            continue;
        }
        let p = entry.path();
        let is_dir = entry.file_type().map(|t| t.is_dir()).unwrap_or(false);
        let r = if is_dir { fs::remove_dir_all(&p) } else { fs::remove_file(&p) };
        r.map_err(io_err(format!("removing {}", p.display())))?;
    }
    let (store, size_bytes): (Store, u64) = match opts.backend {
        BackendKind::Block => {
            let block = dir.join("block");
            match &opts.device {
                Some(dev) => {
                    let dev = fs::canonicalize(dev).map_err(io_err(format!("resolving {}", dev.display())))?;
                    std::os::unix::fs::symlink(&dev, &block).map_err(io_err(format!("linking {}", block.display())))?;
                }
                None => create_data_file(&block, opts.size_bytes)?,
            }
            let mut device = FileDevice::open(&block).map_err(io_err(format!("opening {}", block.display())))?;
            if opts.device.is_some() && opts.size_bytes > 0 {
                if opts.size_bytes > device.size_bytes() {
                    return Err(StoreError::DeviceTooSmall {
                        path: block,
                        size_bytes: device.size_bytes(),
                        min_bytes: opts.size_bytes,
                    });
                }
                device.limit(opts.size_bytes);
            }
            if device.size_bytes() < MIN_DEVICE_BYTES {
                return Err(StoreError::DeviceTooSmall {
                    path: block,
                    size_bytes: device.size_bytes(),
                    min_bytes: MIN_DEVICE_BYTES,
                });
            }
            let size = device.size_bytes();
            let kv = FjallKv::open(&dir.join("meta"))?;
            (Box::new(BlockEngine::format(BackendKind::Block, kv, device, Some(lock))?), size)
        }
        BackendKind::Posix => (Box::new(PosixStore::format(dir, opts.size_bytes, Some(lock))?), opts.size_bytes),
        BackendKind::Mem => unreachable!("refused above"),
    };
    let d = Descriptor { format: FORMAT_NAME.into(), version: 1, backend: opts.backend.name().into(), size_bytes };
    write_descriptor(dir, &d)?;
    Ok(store)
}

fn create_data_file(path: &Path, size_bytes: u64) -> Result<()> {
    if size_bytes < MIN_DEVICE_BYTES {
        return Err(StoreError::DeviceTooSmall { path: path.to_path_buf(), size_bytes, min_bytes: MIN_DEVICE_BYTES });
    }
    let f = File::create(path).map_err(io_err(format!("creating {}", path.display())))?;
    // Reserve the space now so that a full file system is reported by mkfs, not by a write.
    match rustix::fs::fallocate(&f, rustix::fs::FallocateFlags::empty(), 0, size_bytes) {
        Ok(()) => {}
        Err(rustix::io::Errno::NOSPC) => {
            let _ = fs::remove_file(path);
            return Err(StoreError::NoSpace { needed_bytes: size_bytes, free_bytes: 0 });
        }
        Err(rustix::io::Errno::OPNOTSUPP) => {
            f.set_len(size_bytes).map_err(io_err(format!("sizing {}", path.display())))?;
        }
        Err(e) => return Err(StoreError::io(format!("preallocating {}", path.display()), e.into())),
    }
    f.sync_all().map_err(io_err(format!("syncing {}", path.display())))
}

/// Mounts the store in directory `dir`, exclusively: a second mount, in this process or any
/// other, fails with `Busy` until this one is dropped. A disk device caches as
/// [`CacheSizes::from_env`] says.
pub fn open(dir: &Path) -> Result<Store> {
    let cache = CacheSizes::from_env().map_err(io_err("reading the block cache's sizes".to_string()))?;
    open_with(dir, cache)
}

/// [`open`], a disk device caching as `cache` says.
pub fn open_with(dir: &Path, cache: CacheSizes) -> Result<Store> {
    check_dir(dir)?;
    let d = read_descriptor(dir)?;
    let lock = take_lock(dir)?;
    let backend: BackendKind = d.backend.parse()?;
    match backend {
        BackendKind::Block => {
            let block = dir.join("block");
            let mut device =
                FileDevice::open_with(&block, cache).map_err(io_err(format!("opening {}", block.display())))?;
            device.limit(d.size_bytes);
            let kv = FjallKv::open(&dir.join("meta"))?;
            Ok(Box::new(BlockEngine::load(BackendKind::Block, kv, device, Some(lock))?))
        }
        BackendKind::Posix => Ok(Box::new(PosixStore::load(dir, d.size_bytes, Some(lock))?)),
        BackendKind::Mem => {
            Err(StoreError::NotAStore { path: dir.to_path_buf(), reason: "mem stores have no directory".into() })
        }
    }
}

/// Parses a size such as `4096`, `64K`, `512M`, `4G`, `1T`, `2P` or `1E` (powers of 1024, an
/// optional `i` and `B` after the unit).
pub fn parse_size(s: &str) -> Result<u64> {
    let t = s.trim();
    let (num, mult) = match t.char_indices().find(|(_, c)| !c.is_ascii_digit()) {
        None => (t, 1u64),
        Some((i, _)) => {
            let unit = t[i..].trim_end_matches(['B', 'b']).trim_end_matches(['i']);
            let mult = match unit.to_ascii_uppercase().as_str() {
                "" => 1,
                "K" => 1 << 10,
                "M" => 1 << 20,
                "G" => 1 << 30,
                "T" => 1 << 40,
                "P" => 1 << 50,
                "E" => 1 << 60,
                _ => {
                    return Err(StoreError::InvalidArgument(format!(
                        "bad size {s:?}: unknown unit (the units are K, M, G, T, P and E, powers of 1024)"
                    )));
                }
            };
            (&t[..i], mult)
        }
    };
    let n: u64 = num.parse().map_err(|_| StoreError::InvalidArgument(format!("bad size {s:?}")))?;
    n.checked_mul(mult).ok_or_else(|| StoreError::InvalidArgument(format!("size {s:?} is too large")))
}

#[cfg(test)]
mod tests {
    use super::parse_size;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert_eq!(parse_size("4K").unwrap(), 4096);
        assert_eq!(parse_size("4KiB").unwrap(), 4096);
        assert_eq!(parse_size("2G").unwrap(), 2 << 30);
        assert!(parse_size("4X").is_err());
        assert_eq!(parse_size("1P").unwrap(), 1 << 50);
        assert_eq!(parse_size("2PiB").unwrap(), 2 << 50);
        assert_eq!(parse_size("15E").unwrap(), 15 << 60);
        assert!(parse_size("16E").is_err(), "past u64");
        assert!(parse_size("").is_err());
    }
}
