//! The `posix` backend: one file per object in a directory tree, like Ceph's FileStore without
//! its journal or JULEA's POSIX object store. It is the baseline the engine is measured against.
//!
//! Layout under the store directory:
//! `colls/ENC(coll)/data/ENC(obj)` holds the object's bytes; `colls/ENC(coll)/meta/ENC(obj)`
//! holds its xattrs and omap (postcard), present only when it has any. `ENC` keeps
//! `[A-Za-z0-9_.-]` and writes every other byte (and a leading `.`) as `%XX`.
//!
//! Durability: a `Sync` commit fdatasyncs every file written and fsyncs every directory whose
//! entries changed, by it and by every `Batch` commit before it, before returning. Transactions are validated as a whole before anything is
//! applied, so an invalid transaction changes nothing; but there is no journal, so a crash in the
//! middle of applying a multi-operation transaction can leave part of it applied. That is the
//! FileStore-without-journal trade-off this baseline exists to show; the `block` engine does not
//! have it.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fs::{self, File, OpenOptions};
use std::io::{ErrorKind, Write};
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

use crate::api::{BackendKind, Durability, FsckReport, ListPage, ObjectStat, ObjectStore, Op, Transaction, Usage};
use crate::error::{NAME_TOO_LONG, Result, StoreError};
use crate::names;

/// Longest file name most Linux file systems accept.
const NAME_MAX_BYTES: usize = 255;

#[derive(Default, Serialize, Deserialize)]
struct Meta {
    xattrs: BTreeMap<String, Vec<u8>>,
    omap: BTreeMap<Vec<u8>, Vec<u8>>,
    /// `Op::SetVersion`'s value (`(0, 0)`: none).
    version: (u64, u64),
}

/// [`Meta`] as stores before object versions wrote it.
#[derive(Deserialize)]
struct MetaV1 {
    xattrs: BTreeMap<String, Vec<u8>>,
    omap: BTreeMap<Vec<u8>, Vec<u8>>,
}

impl Meta {
    /// Decodes a metadata file of either format: one without a version ends right after its
    /// omap, so decoding it as the current format runs out of bytes, and only then is it read as
    /// the old one.
    fn decode(bytes: &[u8]) -> std::result::Result<Meta, postcard::Error> {
        match postcard::from_bytes::<Meta>(bytes) {
            Err(postcard::Error::DeserializeUnexpectedEnd) => postcard::from_bytes::<MetaV1>(bytes).map(|old| Meta {
                xattrs: old.xattrs,
                omap: old.omap,
                version: (0, 0),
            }),
            other => other,
        }
    }
}

/// A store of plain files.
pub struct PosixStore {
    root: PathBuf,
    size_bytes: u64,
    /// Files and directories changed by `Batch` commits and not flushed yet: the next `Sync`
    /// commit flushes them too, as [`Durability::Batch`] promises.
    unsynced: Mutex<Touched>,
    _lock: Option<File>,
}

fn encode(name: &str, what: &'static str) -> Result<String> {
    let mut out = String::with_capacity(name.len());
    for (i, b) in name.bytes().enumerate() {
        let plain = b.is_ascii_alphanumeric() || b == b'_' || b == b'-' || (b == b'.' && i > 0);
        if plain {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    if out.len() > NAME_MAX_BYTES {
        return Err(StoreError::InvalidName { what, name: name.to_string(), reason: NAME_TOO_LONG });
    }
    Ok(out)
}

fn decode(file_name: &str) -> Option<String> {
    let bytes = file_name.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = file_name.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

fn io_err(what: String) -> impl FnOnce(std::io::Error) -> StoreError {
    move |e| StoreError::io(what, e)
}

fn mtime_ns(meta: &fs::Metadata) -> i64 {
    meta.mtime().saturating_mul(1_000_000_000).saturating_add(meta.mtime_nsec())
}

/// What transactions have touched and a `Sync` must flush.
#[derive(Default)]
struct Touched {
    files: BTreeSet<PathBuf>,
    dirs: BTreeSet<PathBuf>,
}

/// Unflushed paths tracked one by one; past this, a `Sync` commit flushes the whole file
/// system instead, which bounds the memory the set takes.
const MAX_TRACKED_PATHS: usize = 4096;

impl Touched {
    fn len(&self) -> usize {
        self.files.len() + self.dirs.len()
    }
    fn merge(&mut self, other: Touched) {
        self.files.extend(other.files);
        self.dirs.extend(other.dirs);
    }
}

impl PosixStore {
    /// Creates the directory layout of a new store in `root` (which exists and is empty).
    pub fn format(root: &Path, size_bytes: u64, lock: Option<File>) -> Result<Self> {
        fs::create_dir_all(root.join("colls")).map_err(io_err(format!("creating {}", root.display())))?;
        Self::load(root, size_bytes, lock)
    }

    /// Opens an existing store in `root`.
    pub fn load(root: &Path, size_bytes: u64, lock: Option<File>) -> Result<Self> {
        if !root.join("colls").is_dir() {
            return Err(StoreError::NotAStore { path: root.to_path_buf(), reason: "no colls directory".into() });
        }
        Ok(Self { root: root.to_path_buf(), size_bytes, unsynced: Mutex::new(Touched::default()), _lock: lock })
    }

    fn coll_dir(&self, coll: &str) -> Result<PathBuf> {
        names::check_collection(coll)?;
        Ok(self.root.join("colls").join(encode(coll, "collection name")?))
    }

    fn data_path(&self, coll: &str, obj: &str) -> Result<PathBuf> {
        names::check_object(obj)?;
        Ok(self.coll_dir(coll)?.join("data").join(encode(obj, "object name")?))
    }

    fn meta_path(&self, coll: &str, obj: &str) -> Result<PathBuf> {
        Ok(self.coll_dir(coll)?.join("meta").join(encode(obj, "object name")?))
    }

    fn require_collection(&self, coll: &str) -> Result<()> {
        if self.coll_dir(coll)?.is_dir() { Ok(()) } else { Err(StoreError::NoSuchCollection(coll.to_string())) }
    }

    fn object_meta(&self, coll: &str, obj: &str) -> Result<fs::Metadata> {
        let path = self.data_path(coll, obj)?;
        match fs::metadata(&path) {
            Ok(m) => Ok(m),
            Err(e) if e.kind() == ErrorKind::NotFound => {
                self.require_collection(coll)?;
                Err(StoreError::NoSuchObject { coll: coll.to_string(), obj: obj.to_string() })
            }
            Err(e) => Err(StoreError::io(format!("stat {}", path.display()), e)),
        }
    }

    fn load_meta(&self, coll: &str, obj: &str) -> Result<Meta> {
        let path = self.meta_path(coll, obj)?;
        match fs::read(&path) {
            Ok(bytes) => Meta::decode(&bytes)
                .map_err(|e| StoreError::Corrupt(format!("{}: undecodable metadata: {e}", path.display()))),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(Meta::default()),
            Err(e) => Err(StoreError::io(format!("reading {}", path.display()), e)),
        }
    }

    fn save_meta(&self, coll: &str, obj: &str, meta: &Meta, touched: &mut Touched) -> Result<()> {
        let path = self.meta_path(coll, obj)?;
        if meta.xattrs.is_empty() && meta.omap.is_empty() && meta.version == (0, 0) {
            return remove_if_exists(&path, touched);
        }
        let bytes = postcard::to_stdvec(meta).map_err(|e| StoreError::Corrupt(e.to_string()))?;
        let tmp = path.with_extension("tmp~");
        let mut f = File::create(&tmp).map_err(io_err(format!("creating {}", tmp.display())))?;
        f.write_all(&bytes).map_err(io_err(format!("writing {}", tmp.display())))?;
        f.sync_data().map_err(io_err(format!("syncing {}", tmp.display())))?;
        fs::rename(&tmp, &path).map_err(io_err(format!("renaming {}", tmp.display())))?;
        if let Some(parent) = path.parent() {
            touched.dirs.insert(parent.to_path_buf());
        }
        Ok(())
    }

    fn object_names(&self, coll: &str) -> Result<Vec<String>> {
        let dir = self.coll_dir(coll)?.join("data");
        let mut out = Vec::new();
        let entries = fs::read_dir(&dir).map_err(io_err(format!("listing {}", dir.display())))?;
        for entry in entries {
            let entry = entry.map_err(io_err(format!("listing {}", dir.display())))?;
            if let Some(name) = entry.file_name().to_str().and_then(decode) {
                out.push(name);
            }
        }
        out.sort_unstable();
        Ok(out)
    }

    /// Checks every operation against the store as it will be when the operations before it
    /// have been applied, without changing anything.
    fn validate(&self, txn: &Transaction) -> Result<()> {
        let mut colls: HashMap<&str, bool> = HashMap::new();
        let mut objs: HashMap<(&str, &str), bool> = HashMap::new();
        let coll_exists = |colls: &HashMap<&str, bool>, c: &str| -> Result<bool> {
            match colls.get(c) {
                Some(v) => Ok(*v),
                None => Ok(self.coll_dir(c)?.is_dir()),
            }
        };
        let obj_exists = |objs: &HashMap<(&str, &str), bool>, c: &str, o: &str| -> Result<bool> {
            match objs.get(&(c, o)) {
                Some(v) => Ok(*v),
                None => Ok(self.data_path(c, o)?.exists()),
            }
        };
        for op in &txn.ops {
            let coll = op.collection();
            match op {
                Op::CreateCollection { .. } => {
                    names::check_collection(coll)?;
                    encode(coll, "collection name")?;
                    if coll_exists(&colls, coll)? {
                        return Err(StoreError::CollectionExists(coll.to_string()));
                    }
                    colls.insert(coll, true);
                }
                Op::RemoveCollection { .. } => {
                    if !coll_exists(&colls, coll)? {
                        return Err(StoreError::NoSuchCollection(coll.to_string()));
                    }
                    let on_disk = if self.coll_dir(coll)?.is_dir() { self.object_names(coll)? } else { Vec::new() };
                    let live = on_disk.iter().any(|o| objs.get(&(coll, o.as_str())).copied().unwrap_or(true))
                        || objs.iter().any(|((c, _), live)| *c == coll && *live);
                    if live {
                        return Err(StoreError::CollectionNotEmpty(coll.to_string()));
                    }
                    colls.insert(coll, false);
                }
                Op::Touch { obj, .. } | Op::Write { obj, .. } => {
                    names::check_object(obj)?;
                    encode(obj, "object name")?;
                    if let Op::Write { offset, data, .. } = op {
                        names::check_extent(coll, obj, *offset, data.len() as u64)?;
                    }
                    if !coll_exists(&colls, coll)? {
                        return Err(StoreError::NoSuchCollection(coll.to_string()));
                    }
                    objs.insert((coll, obj), true);
                }
                Op::Truncate { obj, .. }
                | Op::Remove { obj, .. }
                | Op::SetXattr { obj, .. }
                | Op::RemoveXattr { obj, .. }
                | Op::OmapSet { obj, .. }
                | Op::OmapRemove { obj, .. }
                | Op::OmapClear { obj, .. }
                | Op::SetVersion { obj, .. } => {
                    names::check_object(obj)?;
                    if !coll_exists(&colls, coll)? {
                        return Err(StoreError::NoSuchCollection(coll.to_string()));
                    }
                    if !obj_exists(&objs, coll, obj)? {
                        return Err(StoreError::NoSuchObject { coll: coll.to_string(), obj: obj.to_string() });
                    }
                    match op {
                        Op::Truncate { size_bytes, .. } => names::check_extent(coll, obj, *size_bytes, 0)?,
                        Op::Remove { .. } => {
                            objs.insert((coll, obj), false);
                        }
                        Op::SetXattr { name, value, .. } => {
                            names::check_xattr(name)?;
                            names::check_value("xattr", value)?;
                        }
                        Op::RemoveXattr { name, .. } => names::check_xattr(name)?,
                        Op::OmapSet { entries, .. } => {
                            for (k, v) in entries {
                                names::check_omap_key(k)?;
                                names::check_value("omap", v)?;
                            }
                        }
                        Op::OmapRemove { keys, .. } => {
                            for k in keys {
                                names::check_omap_key(k)?;
                            }
                        }
                        _ => {}
                    }
                }
            }
        }
        Ok(())
    }

    fn apply(&self, op: &Op, touched: &mut Touched) -> Result<()> {
        match op {
            Op::CreateCollection { coll } => {
                let dir = self.coll_dir(coll)?;
                for sub in ["data", "meta"] {
                    fs::create_dir_all(dir.join(sub)).map_err(io_err(format!("creating {}", dir.display())))?;
                }
                touched.dirs.insert(self.root.join("colls"));
                touched.dirs.insert(dir);
            }
            Op::RemoveCollection { coll } => {
                let dir = self.coll_dir(coll)?;
                fs::remove_dir_all(&dir).map_err(io_err(format!("removing {}", dir.display())))?;
                touched.dirs.insert(self.root.join("colls"));
            }
            Op::Touch { coll, obj } => {
                let path = self.data_path(coll, obj)?;
                let f = open_data(&path, touched)?;
                f.set_modified(std::time::SystemTime::now()).map_err(io_err(format!("touching {}", path.display())))?;
            }
            Op::Write { coll, obj, offset, data } => {
                let path = self.data_path(coll, obj)?;
                let f = open_data(&path, touched)?;
                f.write_all_at(data, *offset).map_err(io_err(format!("writing {}", path.display())))?;
                touched.files.insert(path);
            }
            Op::Truncate { coll, obj, size_bytes } => {
                let path = self.data_path(coll, obj)?;
                let f = OpenOptions::new()
                    .write(true)
                    .open(&path)
                    .map_err(io_err(format!("opening {}", path.display())))?;
                f.set_len(*size_bytes).map_err(io_err(format!("truncating {}", path.display())))?;
                touched.files.insert(path);
            }
            Op::Remove { coll, obj } => {
                remove_if_exists(&self.data_path(coll, obj)?, touched)?;
                remove_if_exists(&self.meta_path(coll, obj)?, touched)?;
            }
            Op::SetXattr { coll, obj, name, value } => {
                let mut meta = self.load_meta(coll, obj)?;
                meta.xattrs.insert(name.clone(), value.clone());
                self.save_meta(coll, obj, &meta, touched)?;
            }
            Op::SetVersion { coll, obj, version } => {
                let mut meta = self.load_meta(coll, obj)?;
                meta.version = *version;
                self.save_meta(coll, obj, &meta, touched)?;
            }
            Op::RemoveXattr { coll, obj, name } => {
                let mut meta = self.load_meta(coll, obj)?;
                if meta.xattrs.remove(name).is_some() {
                    self.save_meta(coll, obj, &meta, touched)?;
                }
            }
            Op::OmapSet { coll, obj, entries } => {
                let mut meta = self.load_meta(coll, obj)?;
                meta.omap.extend(entries.iter().cloned());
                self.save_meta(coll, obj, &meta, touched)?;
            }
            Op::OmapRemove { coll, obj, keys } => {
                let mut meta = self.load_meta(coll, obj)?;
                for k in keys {
                    meta.omap.remove(k);
                }
                self.save_meta(coll, obj, &meta, touched)?;
            }
            Op::OmapClear { coll, obj } => {
                let mut meta = self.load_meta(coll, obj)?;
                meta.omap.clear();
                self.save_meta(coll, obj, &meta, touched)?;
            }
        }
        Ok(())
    }
}

fn open_data(path: &Path, touched: &mut Touched) -> Result<File> {
    let existed = path.exists();
    let f = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .map_err(io_err(format!("opening {}", path.display())))?;
    if !existed && let Some(parent) = path.parent() {
        touched.dirs.insert(parent.to_path_buf());
    }
    Ok(f)
}

fn remove_if_exists(path: &Path, touched: &mut Touched) -> Result<()> {
    match fs::remove_file(path) {
        Ok(()) => {
            if let Some(parent) = path.parent() {
                touched.dirs.insert(parent.to_path_buf());
            }
            touched.files.remove(path);
            Ok(())
        }
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
        Err(e) => Err(StoreError::io(format!("removing {}", path.display()), e)),
    }
}

impl PosixStore {
    /// Flushes every file and directory changed since the last flush.
    fn flush_locked(&self, unsynced: &mut Touched) -> Result<()> {
        if unsynced.len() > MAX_TRACKED_PATHS {
            let f = File::open(&self.root).map_err(io_err(format!("opening {}", self.root.display())))?;
            rustix::fs::syncfs(&f).map_err(|e| StoreError::io("syncfs", e.into()))?;
        } else {
            for f in &unsynced.files {
                if f.exists() {
                    fsync_path(f, true)?;
                }
            }
            for d in &unsynced.dirs {
                if d.exists() {
                    fsync_path(d, false)?;
                }
            }
        }
        *unsynced = Touched::default();
        Ok(())
    }
}

fn fsync_path(path: &Path, data_only: bool) -> Result<()> {
    let f = File::open(path).map_err(io_err(format!("opening {} to sync it", path.display())))?;
    let r = if data_only { f.sync_data() } else { f.sync_all() };
    r.map_err(io_err(format!("syncing {}", path.display())))
}

impl ObjectStore for PosixStore {
    fn backend(&self) -> BackendKind {
        BackendKind::Posix
    }

    fn commit(&self, txn: Transaction, durability: Durability) -> Result<()> {
        let mut unsynced = self.unsynced.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        self.validate(&txn)?;
        let mut touched = Touched::default();
        for op in &txn.ops {
            self.apply(op, &mut touched)?;
        }
        unsynced.merge(touched);
        if durability == Durability::Sync {
            self.flush_locked(&mut unsynced)?;
        }
        Ok(())
    }

    fn sync(&self) -> Result<()> {
        let mut unsynced = self.unsynced.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        self.flush_locked(&mut unsynced)
    }

    fn list_collections(&self) -> Result<Vec<String>> {
        let dir = self.root.join("colls");
        let mut out = Vec::new();
        for entry in fs::read_dir(&dir).map_err(io_err(format!("listing {}", dir.display())))? {
            let entry = entry.map_err(io_err(format!("listing {}", dir.display())))?;
            if let Some(name) = entry.file_name().to_str().and_then(decode) {
                out.push(name);
            }
        }
        out.sort_unstable();
        Ok(out)
    }

    fn collection_exists(&self, coll: &str) -> Result<bool> {
        Ok(self.coll_dir(coll)?.is_dir())
    }

    fn read(&self, coll: &str, obj: &str, offset: u64, len: u64) -> Result<Vec<u8>> {
        let path = self.data_path(coll, obj)?;
        let size = self.object_meta(coll, obj)?.len();
        if offset > size {
            return Err(StoreError::ReadPastEnd { coll: coll.into(), obj: obj.into(), offset, size_bytes: size });
        }
        let n = (size - offset).min(len) as usize;
        let mut buf = vec![0u8; n];
        let f = File::open(&path).map_err(io_err(format!("opening {}", path.display())))?;
        f.read_exact_at(&mut buf, offset).map_err(io_err(format!("reading {}", path.display())))?;
        Ok(buf)
    }

    fn stat(&self, coll: &str, obj: &str) -> Result<ObjectStat> {
        let meta = self.object_meta(coll, obj)?;
        Ok(ObjectStat { size_bytes: meta.len(), mtime_ns: mtime_ns(&meta) })
    }

    fn version(&self, coll: &str, obj: &str) -> Result<(u64, u64)> {
        self.object_meta(coll, obj)?;
        Ok(self.load_meta(coll, obj)?.version)
    }

    fn get_xattr(&self, coll: &str, obj: &str, name: &str) -> Result<Option<Vec<u8>>> {
        self.object_meta(coll, obj)?;
        Ok(self.load_meta(coll, obj)?.xattrs.remove(name))
    }

    fn list_xattrs(&self, coll: &str, obj: &str) -> Result<Vec<(String, Vec<u8>)>> {
        self.object_meta(coll, obj)?;
        Ok(self.load_meta(coll, obj)?.xattrs.into_iter().collect())
    }

    fn omap_get(&self, coll: &str, obj: &str, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.object_meta(coll, obj)?;
        Ok(self.load_meta(coll, obj)?.omap.remove(key))
    }

    fn omap_list(&self, coll: &str, obj: &str, after: Option<&[u8]>, max: usize) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        self.object_meta(coll, obj)?;
        let omap = self.load_meta(coll, obj)?.omap;
        Ok(omap.into_iter().filter(|(k, _)| after.is_none_or(|a| k.as_slice() > a)).take(max).collect())
    }

    fn list_objects(&self, coll: &str, prefix: &str, after: Option<&str>, max: usize) -> Result<ListPage> {
        self.require_collection(coll)?;
        let mut matching = self
            .object_names(coll)?
            .into_iter()
            .filter(|n| n.starts_with(prefix) && after.is_none_or(|a| n.as_str() > a));
        let objects: Vec<String> = matching.by_ref().take(max).collect();
        let next = if matching.next().is_some() { objects.last().cloned() } else { None };
        Ok(ListPage { objects, next })
    }

    fn collection_objects(&self, coll: &str) -> Result<u64> {
        if !self.collection_exists(coll)? {
            return Err(StoreError::NoSuchCollection(coll.to_string()));
        }
        Ok(self.object_names(coll)?.len() as u64)
    }

    fn usage(&self) -> Result<Usage> {
        let mut usage = Usage { size_bytes: self.size_bytes, ..Usage::default() };
        for coll in self.list_collections()? {
            usage.collections += 1;
            for obj in self.object_names(&coll)? {
                usage.objects += 1;
                usage.used_bytes += self.object_meta(&coll, &obj)?.blocks() * 512;
            }
        }
        Ok(usage)
    }

    fn fsck(&self) -> Result<FsckReport> {
        let mut report = FsckReport::default();
        for coll in self.list_collections()? {
            report.collections += 1;
            for obj in self.object_names(&coll)? {
                report.objects += 1;
                // Plain files carry no checksums: all fsck can do is read every byte.
                match self.read_all(&coll, &obj) {
                    Ok(data) => report.bytes_verified += data.len() as u64,
                    Err(e) => report.errors.push(format!("{coll}/{obj}: {e}")),
                }
                if let Err(e) = self.load_meta(&coll, &obj) {
                    report.errors.push(format!("{coll}/{obj}: {e}"));
                }
            }
        }
        Ok(report)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_files_of_both_formats_decode() {
        #[derive(Serialize)]
        struct V1 {
            xattrs: BTreeMap<String, Vec<u8>>,
            omap: BTreeMap<Vec<u8>, Vec<u8>>,
        }
        let old = V1 { xattrs: [("a".to_string(), vec![1])].into(), omap: [(vec![2], vec![3])].into() };
        let got = Meta::decode(&postcard::to_stdvec(&old).unwrap()).unwrap();
        assert_eq!((got.xattrs, got.omap, got.version), (old.xattrs, old.omap, (0, 0)));
        let new = Meta { xattrs: BTreeMap::new(), omap: BTreeMap::new(), version: (5, 6) };
        assert_eq!(Meta::decode(&postcard::to_stdvec(&new).unwrap()).unwrap().version, (5, 6));
    }
}
