//! The `ObjectStore` API that every backend implements.
//!
//! A store holds *collections* (the unit a placement group maps onto), each holding named
//! *objects*. An object has byte data, a modification time, extended attributes (small named
//! values) and an *omap*: an ordered map of byte keys to byte values.
//!
//! All mutations go through [`Transaction`]s, which are atomic: after any crash either every
//! operation of a committed transaction is visible, or none is. Each commit names its
//! [`Durability`], which states exactly what is on the medium when the call returns.

use std::sync::Arc;

use bytes::Bytes;
use serde::Serialize;
use shoal_util::AlignedBuf;

use crate::error::Result;

/// The bytes of a write. Callers that already hold data in a block-aligned buffer (network
/// receive paths, benchmarks) pass it as `Aligned`, and block-aligned writes of such data reach
/// the device without being copied. Other data is shared (`Bytes`), so a write that also goes
/// elsewhere (an OSD's replicas) is not copied for the store. `Summed` is shared data whose
/// every 4 KiB block's crc32c the caller already knows (a receiver computed them as the bytes
/// arrived): a block-aligned write of it stores those checksums instead of computing them again,
/// so the caller vouches for them (a wrong one fails later reads of its block as corrupt).
#[derive(Clone)]
pub enum Data {
    Shared(Bytes),
    Aligned(Arc<AlignedBuf>),
    Summed(Bytes, shoal_util::BlockCrcs),
}

impl std::ops::Deref for Data {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Data::Shared(v) | Data::Summed(v, _) => v,
            Data::Aligned(b) => b,
        }
    }
}

impl PartialEq for Data {
    fn eq(&self, other: &Self) -> bool {
        self[..] == other[..]
    }
}
impl Eq for Data {}

impl std::fmt::Debug for Data {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Data({} bytes)", self.len())
    }
}

impl From<Vec<u8>> for Data {
    fn from(v: Vec<u8>) -> Self {
        Data::Shared(Bytes::from(v))
    }
}

impl From<Bytes> for Data {
    fn from(v: Bytes) -> Self {
        Data::Shared(v)
    }
}

/// Summed when every block's checksum is known, else shared.
impl From<shoal_util::SummedBytes> for Data {
    fn from(v: shoal_util::SummedBytes) -> Self {
        match v.block_crcs().cloned() {
            Some(crcs) => Data::Summed(v.into_bytes(), crcs),
            None => Data::Shared(v.into_bytes()),
        }
    }
}

/// How durable a transaction is when [`ObjectStore::commit`] returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Durability {
    /// On stable storage: the transaction survives a power failure.
    Sync,
    /// Visible to readers and, on the `block` and `posix` backends, survives a crash of the
    /// process (it is in the operating system's buffers); it reaches stable storage with the next
    /// `Sync` commit or [`ObjectStore::sync`], whichever comes first.
    Batch,
    /// Visible to readers of this store when the commit returns, but possibly only in memory:
    /// the `block` engine stages such transactions and writes them as a group (one device
    /// submission, one KV batch) at the next [`ObjectStore::sync`] (then durable, as `Sync`),
    /// [`ObjectStore::settle`] (then as `Batch`), commit of another kind, or when the group is
    /// full. A crash of the process before then loses them — in commit order, never one without
    /// every later one — and never anything committed before them. Other backends treat it as
    /// `Batch`. For callers that acknowledge nothing before their next `sync` (an OSD).
    Deferred,
}

/// One mutation inside a [`Transaction`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    /// Creates an empty collection. Fails if it exists.
    CreateCollection { coll: String },
    /// Removes an empty collection. Fails if it is missing or holds objects.
    RemoveCollection { coll: String },
    /// Creates an empty object if it does not exist; otherwise only updates its mtime.
    Touch { coll: String, obj: String },
    /// Writes `data` at `offset`, creating the object if needed and extending its size if the
    /// write ends past it (a gap reads as zeros).
    Write { coll: String, obj: String, offset: u64, data: Data },
    /// Sets the object's size, dropping data past it or extending with zeros.
    Truncate { coll: String, obj: String, size_bytes: u64 },
    /// Removes the object with its data, xattrs and omap.
    Remove { coll: String, obj: String },
    /// Sets one xattr.
    SetXattr { coll: String, obj: String, name: String, value: Vec<u8> },
    /// Removes one xattr (no error if it is absent).
    RemoveXattr { coll: String, obj: String, name: String },
    /// Sets omap entries.
    OmapSet { coll: String, obj: String, entries: Vec<(Vec<u8>, Vec<u8>)> },
    /// Removes omap keys (absent keys are ignored).
    OmapRemove { coll: String, obj: String, keys: Vec<Vec<u8>> },
    /// Removes every omap entry of the object.
    OmapClear { coll: String, obj: String },
    /// Sets the object's version: a value the caller keeps with the object, opaque to the store,
    /// `(0, 0)` meaning none; removed with the object, and read by [`ObjectStore::version`].
    /// Fails if the object does not exist.
    SetVersion { coll: String, obj: String, version: (u64, u64) },
}

impl Op {
    /// The collection the operation is about.
    #[must_use]
    pub fn collection(&self) -> &str {
        match self {
            Op::CreateCollection { coll }
            | Op::RemoveCollection { coll }
            | Op::Touch { coll, .. }
            | Op::Write { coll, .. }
            | Op::Truncate { coll, .. }
            | Op::Remove { coll, .. }
            | Op::SetXattr { coll, .. }
            | Op::RemoveXattr { coll, .. }
            | Op::OmapSet { coll, .. }
            | Op::OmapRemove { coll, .. }
            | Op::OmapClear { coll, .. }
            | Op::SetVersion { coll, .. } => coll,
        }
    }
}

/// An ordered list of operations applied atomically. Later operations see the effects of
/// earlier ones; if any operation fails, none is applied and the store is unchanged.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Transaction {
    pub ops: Vec<Op>,
}

impl Transaction {
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Number of bytes of object data the transaction writes.
    #[must_use]
    pub fn data_bytes(&self) -> u64 {
        self.ops
            .iter()
            .map(|op| match op {
                Op::Write { data, .. } => data.len() as u64,
                _ => 0,
            })
            .sum()
    }

    pub fn create_collection(&mut self, coll: &str) -> &mut Self {
        self.ops.push(Op::CreateCollection { coll: coll.into() });
        self
    }
    pub fn remove_collection(&mut self, coll: &str) -> &mut Self {
        self.ops.push(Op::RemoveCollection { coll: coll.into() });
        self
    }
    pub fn touch(&mut self, coll: &str, obj: &str) -> &mut Self {
        self.ops.push(Op::Touch { coll: coll.into(), obj: obj.into() });
        self
    }
    pub fn write(&mut self, coll: &str, obj: &str, offset: u64, data: impl Into<Data>) -> &mut Self {
        self.ops.push(Op::Write { coll: coll.into(), obj: obj.into(), offset, data: data.into() });
        self
    }
    /// Like [`Transaction::write`], with data already in an aligned buffer.
    pub fn write_aligned(&mut self, coll: &str, obj: &str, offset: u64, data: Arc<AlignedBuf>) -> &mut Self {
        self.ops.push(Op::Write { coll: coll.into(), obj: obj.into(), offset, data: Data::Aligned(data) });
        self
    }
    pub fn truncate(&mut self, coll: &str, obj: &str, size_bytes: u64) -> &mut Self {
        self.ops.push(Op::Truncate { coll: coll.into(), obj: obj.into(), size_bytes });
        self
    }
    pub fn remove(&mut self, coll: &str, obj: &str) -> &mut Self {
        self.ops.push(Op::Remove { coll: coll.into(), obj: obj.into() });
        self
    }
    pub fn set_xattr(&mut self, coll: &str, obj: &str, name: &str, value: Vec<u8>) -> &mut Self {
        self.ops.push(Op::SetXattr { coll: coll.into(), obj: obj.into(), name: name.into(), value });
        self
    }
    pub fn set_version(&mut self, coll: &str, obj: &str, version: (u64, u64)) -> &mut Self {
        self.ops.push(Op::SetVersion { coll: coll.into(), obj: obj.into(), version });
        self
    }
    pub fn remove_xattr(&mut self, coll: &str, obj: &str, name: &str) -> &mut Self {
        self.ops.push(Op::RemoveXattr { coll: coll.into(), obj: obj.into(), name: name.into() });
        self
    }
    pub fn omap_set(&mut self, coll: &str, obj: &str, entries: Vec<(Vec<u8>, Vec<u8>)>) -> &mut Self {
        self.ops.push(Op::OmapSet { coll: coll.into(), obj: obj.into(), entries });
        self
    }
    pub fn omap_remove(&mut self, coll: &str, obj: &str, keys: Vec<Vec<u8>>) -> &mut Self {
        self.ops.push(Op::OmapRemove { coll: coll.into(), obj: obj.into(), keys });
        self
    }
    pub fn omap_clear(&mut self, coll: &str, obj: &str) -> &mut Self {
        self.ops.push(Op::OmapClear { coll: coll.into(), obj: obj.into() });
        self
    }
}

/// Size and modification time of an object.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct ObjectStat {
    pub size_bytes: u64,
    /// Nanoseconds since the Unix epoch of the last mutation.
    pub mtime_ns: i64,
}

/// One page of an object listing.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ListPage {
    /// Object names in byte order.
    pub objects: Vec<String>,
    /// Pass this as `after` to get the next page; `None` when the listing is complete.
    pub next: Option<String>,
}

/// Space accounting of a store.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Usage {
    /// Capacity for object data.
    pub size_bytes: u64,
    /// Capacity in use by object data (whole allocation units).
    pub used_bytes: u64,
    pub collections: u64,
    pub objects: u64,
}

/// Result of a consistency check.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct FsckReport {
    pub collections: u64,
    pub objects: u64,
    /// Bytes of object data read back and verified against their checksums.
    pub bytes_verified: u64,
    /// One line per problem found, each naming the object or region concerned.
    pub errors: Vec<String>,
}

impl FsckReport {
    #[must_use]
    pub fn is_clean(&self) -> bool {
        self.errors.is_empty()
    }
}

/// The backends a store can run on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum BackendKind {
    /// Raw block device or preallocated file, data with direct I/O, metadata in fjall.
    Block,
    /// RAM only: the block engine over an in-memory device and key-value map.
    Mem,
    /// One file per object in a directory (the FileStore baseline).
    Posix,
}

impl BackendKind {
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::Block => "block",
            Self::Mem => "mem",
            Self::Posix => "posix",
        }
    }
}

impl std::str::FromStr for BackendKind {
    type Err = crate::error::StoreError;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "block" => Ok(Self::Block),
            "mem" => Ok(Self::Mem),
            "posix" => Ok(Self::Posix),
            other => Err(crate::error::StoreError::UnknownBackend(other.to_string())),
        }
    }
}

/// The local object store. Implementations are safe to share between threads: reads run
/// concurrently, commits are serialised.
pub trait ObjectStore: Send + Sync {
    /// Which backend this is.
    fn backend(&self) -> BackendKind;

    /// Applies `txn` atomically with the given durability (see [`Durability`] for exactly what
    /// is on the medium when this returns). On error nothing of `txn` is applied.
    fn commit(&self, txn: Transaction, durability: Durability) -> Result<()>;

    /// Makes every transaction committed so far durable, as if it had been committed `Sync`.
    fn sync(&self) -> Result<()>;

    /// Makes every transaction committed so far at least as durable as [`Durability::Batch`]
    /// promises (writes out [`Durability::Deferred`] ones, without a device flush). A no-op
    /// for backends that stage nothing.
    fn settle(&self) -> Result<()> {
        Ok(())
    }

    /// Like [`ObjectStore::sync`], and also moves data still held in a log to its final place
    /// (the engine's deferred writes), so that nothing is left to replay at the next mount.
    fn flush(&self) -> Result<()> {
        self.sync()
    }

    /// Lists collection names in byte order.
    fn list_collections(&self) -> Result<Vec<String>>;

    /// Whether the collection exists.
    fn collection_exists(&self, coll: &str) -> Result<bool>;

    /// Reads up to `len` bytes at `offset`. Returns fewer bytes only when the object ends
    /// first; an `offset` past the end is an error (`ReadPastEnd`), an `offset` equal to the
    /// size returns no bytes. Data that fails its checksum is never returned: the read fails
    /// with `Checksum`, naming the object.
    fn read(&self, coll: &str, obj: &str, offset: u64, len: u64) -> Result<Vec<u8>>;

    /// Size and mtime of an object.
    fn stat(&self, coll: &str, obj: &str) -> Result<ObjectStat>;

    /// One xattr, or `None` if the object has no xattr of that name.
    fn get_xattr(&self, coll: &str, obj: &str, name: &str) -> Result<Option<Vec<u8>>>;

    /// All xattrs of an object, in name order.
    fn list_xattrs(&self, coll: &str, obj: &str) -> Result<Vec<(String, Vec<u8>)>>;

    /// One omap value.
    fn omap_get(&self, coll: &str, obj: &str, key: &[u8]) -> Result<Option<Vec<u8>>>;

    /// Up to `max` omap entries with keys strictly after `after` (from the start if `None`),
    /// in key order.
    fn omap_list(&self, coll: &str, obj: &str, after: Option<&[u8]>, max: usize) -> Result<Vec<(Vec<u8>, Vec<u8>)>>;

    /// Up to `max` object names of `coll` that start with `prefix` and sort strictly after
    /// `after`, in byte order, with a cursor for the next page.
    fn list_objects(&self, coll: &str, prefix: &str, after: Option<&str>, max: usize) -> Result<ListPage>;

    /// How many objects collection `coll` holds after every transaction committed so far;
    /// `NoSuchCollection` if it does not exist. Engine stores keep the count by every commit, so
    /// this costs a lookup, never a listing; the plain-file store counts its directory.
    fn collection_objects(&self, coll: &str) -> Result<u64>;

    /// Space in use and object counts.
    fn usage(&self) -> Result<Usage>;

    /// Checks every object's metadata and data (reading every byte and verifying checksums)
    /// and the space accounting. Problems are reported, not repaired.
    fn fsck(&self) -> Result<FsckReport>;

    /// Whether the object exists.
    fn exists(&self, coll: &str, obj: &str) -> Result<bool> {
        match self.stat(coll, obj) {
            Ok(_) => Ok(true),
            Err(crate::error::StoreError::NoSuchObject { .. }) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// [`ObjectStore::read`] into a shared buffer, with the same contract. A backend that
    /// reads into buffers of its own returns one of them (no copy into a new `Vec`); the buffer
    /// is released when the last clone of the returned `Bytes` is dropped.
    fn read_bytes(&self, coll: &str, obj: &str, offset: u64, len: u64) -> Result<bytes::Bytes> {
        self.read(coll, obj, offset, len).map(bytes::Bytes::from)
    }

    /// [`ObjectStore::read_bytes`], with the crc32c of the returned bytes when the backend knows
    /// it without another pass over them (the engine joins the checksums of the blocks it
    /// verified); `None` otherwise. A caller that sends the bytes on passes it to the frame, whose
    /// checksum then need not read the data again.
    fn read_bytes_crc(&self, coll: &str, obj: &str, offset: u64, len: u64) -> Result<(bytes::Bytes, Option<u32>)> {
        self.read_bytes(coll, obj, offset, len).map(|b| (b, None))
    }

    /// [`ObjectStore::read_bytes_crc`] as pieces that together are the bytes read, in order: a
    /// backend whose data is in memory returns views of that memory (no copy at all); others
    /// return one piece. A caller that sends the bytes on sends the pieces as they are.
    fn read_parts_crc(&self, coll: &str, obj: &str, offset: u64, len: u64) -> Result<(Vec<bytes::Bytes>, Option<u32>)> {
        self.read_bytes_crc(coll, obj, offset, len).map(|(b, crc)| (vec![b], crc))
    }

    /// The object's version ([`Op::SetVersion`]), `(0, 0)` if none was set. Durable as the
    /// transaction that set it; kept in the object's record on engine stores, so reading it never
    /// touches the object's data.
    fn version(&self, coll: &str, obj: &str) -> Result<(u64, u64)>;

    /// [`ObjectStore::read`] from the medium itself, never from a cache of recently read data:
    /// for deep scrub, whose job is to find what the device has damaged since it was written.
    /// The same as `read` for backends without such a cache.
    fn read_media(&self, coll: &str, obj: &str, offset: u64, len: u64) -> Result<Vec<u8>> {
        self.read(coll, obj, offset, len)
    }

    /// Reads a whole object.
    fn read_all(&self, coll: &str, obj: &str) -> Result<Vec<u8>> {
        let size = self.stat(coll, obj)?.size_bytes;
        self.read(coll, obj, 0, size)
    }
}
