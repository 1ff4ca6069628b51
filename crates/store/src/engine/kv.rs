//! The metadata key-value store behind the engine: fjall on disk, ordered maps in RAM
//! (`memkv.rs`).
//!
//! The engine needs very little from a KV store: point reads, ordered range scans over a
//! consistent snapshot, and atomic multi-keyspace batches that are either synced to stable
//! storage or only handed to the operating system. [`Kv`] captures exactly that, so that the
//! `block` backend (fjall) and the `mem` backend (an in-memory map) share every line of engine
//! logic above it.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::path::Path;

use fjall::{Database, Keyspace, KeyspaceCreateOptions, PersistMode, Readable};

use crate::error::Result;

pub use super::memkv::{MemKv, MemSnapshot};

/// The keyspaces (column families) of the engine's metadata. See `layout.rs` for their keys.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Ks {
    Meta = 0,
    Colls = 1,
    Onodes = 2,
    Extents = 3,
    Xattrs = 4,
    Omap = 5,
    Free = 6,
}

/// Every keyspace, in index order.
pub const ALL_KEYSPACES: [Ks; 7] = [Ks::Meta, Ks::Colls, Ks::Onodes, Ks::Extents, Ks::Xattrs, Ks::Omap, Ks::Free];

impl Ks {
    fn name(self) -> &'static str {
        match self {
            Ks::Meta => "meta",
            Ks::Colls => "colls",
            Ks::Onodes => "onodes",
            Ks::Extents => "extents",
            Ks::Xattrs => "xattrs",
            Ks::Omap => "omap",
            Ks::Free => "free",
        }
    }
}

/// An atomic set of puts (`Some`) and deletes (`None`). A later change of the same key replaces
/// an earlier one, so a batch never holds two entries for one key (whose order a KV store with
/// one sequence number per batch could not tell apart).
#[derive(Default, Debug, Clone)]
pub struct Batch {
    pub ops: BTreeMap<(Ks, Vec<u8>), Option<Vec<u8>>>,
}

impl Batch {
    pub fn put(&mut self, ks: Ks, key: Vec<u8>, value: Vec<u8>) {
        self.ops.insert((ks, key), Some(value));
    }
    pub fn delete(&mut self, ks: Ks, key: Vec<u8>) {
        self.ops.insert((ks, key), None);
    }
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }
}

/// Read access to a consistent view of the keyspaces.
pub trait KvRead {
    /// The value of `key`, if present.
    fn get(&self, ks: Ks, key: &[u8]) -> Result<Option<Vec<u8>>>;
    /// Visits the entries with `lo <= key < hi` (no upper bound if `hi` is `None`) in key order
    /// until `visit` returns `false`.
    fn scan(&self, ks: Ks, lo: &[u8], hi: Option<&[u8]>, visit: &mut dyn FnMut(&[u8], &[u8]) -> bool) -> Result<()>;
    /// Whether a point read of a guessed key costs less than a short scan, so that a reader who
    /// can guess a key should read it first: true for an LSM tree (a bloom filter per table,
    /// where a scan merges an iterator over every memtable and table), false for an ordered map
    /// in memory (a scan is one lookup, and visits values without copying them).
    fn prefers_point_reads(&self) -> bool {
        false
    }
}

/// A metadata store.
pub trait Kv: KvRead + Send + Sync + 'static {
    /// A view that does not change while it is held.
    type Snapshot<'a>: KvRead
    where
        Self: 'a;

    fn snapshot(&self) -> Self::Snapshot<'_>;

    /// Applies `batch` atomically and makes it visible. With `sync` the batch and every batch
    /// before it are on stable storage when this returns; without, they may be lost by any
    /// crash (fjall keeps them in its journal buffer): the engine's commit log, written before
    /// the batch, is what makes a transaction durable and brings lost batches back.
    fn commit(&self, batch: Batch, sync: bool) -> Result<()>;

    /// Puts every committed batch on stable storage.
    fn sync(&self) -> Result<()>;
}

fn upper(hi: Option<&[u8]>) -> Bound<&[u8]> {
    hi.map_or(Bound::Unbounded, Bound::Excluded)
}

// ---------------------------------------------------------------------------------------------
// fjall

/// Bytes of fjall's block cache. Metadata reads beyond it go to the page cache and the disk.
pub const FJALL_CACHE_BYTES: u64 = 16 << 20;
/// Largest memtable of one keyspace before it is flushed to a table.
pub const FJALL_MEMTABLE_BYTES: u64 = 8 << 20;
/// Journal bytes after which fjall flushes memtables so that old journals can be dropped.
pub const FJALL_MAX_JOURNAL_BYTES: u64 = 64 << 20;

/// fjall-backed metadata: one `Database` with one keyspace per [`Ks`].
pub struct FjallKv {
    db: Database,
    keyspaces: Vec<Keyspace>,
}

impl FjallKv {
    /// Opens (creating if needed) the database in `dir`.
    pub fn open(dir: &Path) -> Result<Self> {
        // The engine's own commit log makes every batch durable (and replays it after a crash),
        // so fjall need not hand each batch to the operating system as it commits: batches stay
        // in fjall's journal buffer until a checkpoint persists them. That saves a system call
        // per commit on the write path.
        let db = Database::builder(dir)
            .manual_journal_persist(true)
            .cache_size(FJALL_CACHE_BYTES)
            .max_journaling_size(FJALL_MAX_JOURNAL_BYTES)
            .worker_threads(1)
            .open()?;
        let mut keyspaces = Vec::with_capacity(ALL_KEYSPACES.len());
        for ks in ALL_KEYSPACES {
            let handle =
                db.keyspace(ks.name(), || KeyspaceCreateOptions::default().max_memtable_size(FJALL_MEMTABLE_BYTES))?;
            keyspaces.push(handle);
        }
        Ok(Self { db, keyspaces })
    }

    fn ks(&self, ks: Ks) -> &Keyspace {
        &self.keyspaces[ks as usize]
    }
}

fn fjall_scan<R: Readable>(
    reader: &R,
    handle: &Keyspace,
    lo: &[u8],
    hi: Option<&[u8]>,
    visit: &mut dyn FnMut(&[u8], &[u8]) -> bool,
) -> Result<()> {
    for guard in reader.range::<&[u8], _>(handle, (Bound::Included(lo), upper(hi))) {
        let (k, v) = guard.into_inner()?;
        if !visit(&k, &v) {
            break;
        }
    }
    Ok(())
}

impl KvRead for FjallKv {
    fn get(&self, ks: Ks, key: &[u8]) -> Result<Option<Vec<u8>>> {
        Ok(self.ks(ks).get(key)?.map(|v| v.to_vec()))
    }
    fn scan(&self, ks: Ks, lo: &[u8], hi: Option<&[u8]>, visit: &mut dyn FnMut(&[u8], &[u8]) -> bool) -> Result<()> {
        fjall_scan(&self.db.snapshot(), self.ks(ks), lo, hi, visit)
    }
    fn prefers_point_reads(&self) -> bool {
        true
    }
}

/// A point-in-time view of a [`FjallKv`].
pub struct FjallSnapshot<'a> {
    kv: &'a FjallKv,
    snap: fjall::Snapshot,
}

impl KvRead for FjallSnapshot<'_> {
    fn get(&self, ks: Ks, key: &[u8]) -> Result<Option<Vec<u8>>> {
        Ok(self.snap.get(self.kv.ks(ks), key)?.map(|v| v.to_vec()))
    }
    fn scan(&self, ks: Ks, lo: &[u8], hi: Option<&[u8]>, visit: &mut dyn FnMut(&[u8], &[u8]) -> bool) -> Result<()> {
        fjall_scan(&self.snap, self.kv.ks(ks), lo, hi, visit)
    }
    fn prefers_point_reads(&self) -> bool {
        true
    }
}

impl Kv for FjallKv {
    type Snapshot<'a> = FjallSnapshot<'a>;

    fn snapshot(&self) -> FjallSnapshot<'_> {
        FjallSnapshot { kv: self, snap: self.db.snapshot() }
    }

    fn commit(&self, batch: Batch, sync: bool) -> Result<()> {
        let mut b = self.db.batch();
        if sync {
            b = b.durability(Some(PersistMode::SyncData));
        }
        for ((ks, key), value) in batch.ops {
            match value {
                Some(v) => b.insert(self.ks(ks), key, v),
                None => b.remove(self.ks(ks), key),
            }
        }
        b.commit()?;
        Ok(())
    }

    fn sync(&self) -> Result<()> {
        self.db.persist(PersistMode::SyncData)?;
        Ok(())
    }
}
