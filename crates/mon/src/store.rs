//! The monitor's data directory: identity, Raft log, vote and snapshot, in plain fsynced files.
//!
//! ```text
//! mon.meta     identity written by mkfs: fsid, rank, the initial monitors (never changes)
//! raft.state   vote, last committed log id, last purged log id (replaced atomically)
//! raft.log     Raft entries, appended; a torn tail record is cut off on open
//! snapshot     the latest snapshot: its Raft metadata and the postcard-encoded ClusterMap with
//!              the session table (`raft::SnapshotState`)
//! ```
//!
//! Every file is a sequence of records `len (u32 LE) | crc32c(bytes) (u32 LE) | bytes`, where
//! `bytes` is postcard. Whole-file replacements go through a temporary file, `fsync`, `rename`
//! and an `fsync` of the directory, so a crash leaves the old or the new file, never a mix.
//!
//! Why files and not fjall: the monitor's log is tiny (a few hundred small entries between
//! snapshots), it is written only by Raft in log order, and Raft's durability contract ("the entry
//! is on disk before I acknowledge it") maps directly onto "append, then fdatasync". A plain file
//! keeps that contract visible in forty lines, with no background journal to reason about.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::fs::{File, OpenOptions};
use std::io::{Cursor, Read, Write};
use std::net::SocketAddr;
use std::ops::RangeBounds;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use openraft::storage::{LogFlushed, RaftLogStorage};
use openraft::{
    AnyError, BasicNode, Entry, LogId, LogState, OptionalSend, RaftLogId, RaftLogReader, SnapshotMeta, StorageError,
    StorageIOError, Vote,
};
use serde::{Deserialize, Serialize};

use crate::error::MonError;
use crate::raft::TypeConfig;

pub(crate) const META_FILE: &str = "mon.meta";
const STATE_FILE: &str = "raft.state";
const LOG_FILE: &str = "raft.log";
const SNAPSHOT_FILE: &str = "snapshot";
/// Largest record accepted when reading: a whole map in a snapshot stays far below it, and a
/// corrupted length cannot make the monitor allocate more.
const MAX_RECORD_BYTES: usize = 256 << 20;

/// Version of everything a monitor stores: the identity, the Raft log's entries and the
/// snapshot. Records are postcard, which is not self-describing, so any change to the shape of
/// [`Meta`], the cluster map or its changes must bump this; a monitor then refuses a directory of
/// another format by name instead of misreading it. 0: before the number existed. 1: OSDs carry
/// a full flag. 2: the map holds temporary acting sets and PG activation records. 3: cluster settings
/// and flags in the map. 4: log entries carry the command's session and snapshots the session table
/// (decision 0072). 5: the map holds the epoch each PG's interval began (decision 0090). 6: the map
/// holds the blocklist of fenced client instances (decision 0092).
pub const MON_STORE_FORMAT: u32 = 6;

/// The identity mkfs writes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Meta {
    pub fsid: String,
    pub rank: u32,
    /// The monitors the cluster was created with, by rank.
    pub mons: BTreeMap<u32, SocketAddr>,
    /// [`MON_STORE_FORMAT`] of the build that ran mkfs (last, so that an older build's identity
    /// file, which lacks it, still decodes as [`MetaV0`] and is recognised).
    pub format: u32,
}

impl Meta {
    /// The identity of a new monitor, in this build's format.
    #[must_use]
    pub fn new(fsid: String, rank: u32, mons: BTreeMap<u32, SocketAddr>) -> Meta {
        Meta { fsid, rank, mons, format: MON_STORE_FORMAT }
    }
}

/// The identity file as builds before [`MON_STORE_FORMAT`] wrote it.
#[derive(Deserialize)]
struct MetaV0 {
    #[allow(dead_code)]
    fsid: String,
    #[allow(dead_code)]
    rank: u32,
    #[allow(dead_code)]
    mons: BTreeMap<u32, SocketAddr>,
}

/// Raft's small persistent state besides the log.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct HardState {
    vote: Option<Vote<u64>>,
    committed: Option<LogId<u64>>,
    last_purged: Option<LogId<u64>>,
}

/// The snapshot as stored: Raft's metadata and the encoded map and session table.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct SnapshotFile {
    pub meta: SnapshotMeta<u64, BasicNode>,
    pub data: Vec<u8>,
}

fn frame_record(bytes: &[u8], out: &mut Vec<u8>) {
    out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
    out.extend_from_slice(&shoal_util::checksum::crc32c(bytes).to_le_bytes());
    out.extend_from_slice(bytes);
}

/// The end of the record starting at `pos`, if a complete record with a valid checksum is there.
fn record_at(buf: &[u8], pos: usize) -> Option<usize> {
    let header = buf.get(pos..pos.checked_add(8)?)?;
    let len = u32::from_le_bytes([header[0], header[1], header[2], header[3]]) as usize;
    let crc = u32::from_le_bytes([header[4], header[5], header[6], header[7]]);
    if len > MAX_RECORD_BYTES {
        return None;
    }
    let body = buf.get(pos + 8..pos + 8 + len)?;
    (shoal_util::checksum::crc32c(body) == crc).then_some(pos + 8 + len)
}

/// Splits `buf` into records. Returns them with their offsets and the length of the valid
/// prefix: a record cut short or failing its checksum ends the sequence.
fn split_records(buf: &[u8]) -> (Vec<(u64, &[u8])>, usize) {
    let mut out = Vec::new();
    let mut pos = 0usize;
    while let Some(end) = record_at(buf, pos) {
        out.push((pos as u64, &buf[pos + 8..end]));
        pos = end;
    }
    (out, pos)
}

/// Whether the bytes after an invalid record at `pos` hold another valid record: then the bad
/// record is damage in the middle of the file, not the tail of an append cut short by a crash.
fn valid_record_follows(buf: &[u8], pos: usize) -> bool {
    let Some(header) = buf.get(pos..pos + 8) else { return false };
    let len = u32::from_le_bytes([header[0], header[1], header[2], header[3]]) as usize;
    len <= MAX_RECORD_BYTES && record_at(buf, pos + 8 + len).is_some()
}

fn fsync_dir(dir: &Path) -> Result<(), MonError> {
    File::open(dir).and_then(|d| d.sync_all()).map_err(|e| MonError::io(dir, e))
}

/// Replaces `dir/name` with one record holding `value`. Durable when it returns.
fn write_atomic<T: Serialize>(dir: &Path, name: &str, value: &T) -> Result<(), MonError> {
    let path = dir.join(name);
    let bytes = postcard::to_allocvec(value).map_err(|e| MonError::corrupt(&path, format!("encode: {e}")))?;
    let mut buf = Vec::with_capacity(bytes.len() + 8);
    frame_record(&bytes, &mut buf);
    let tmp = dir.join(format!("{name}.tmp"));
    let write = || -> std::io::Result<()> {
        let mut f = File::create(&tmp)?;
        f.write_all(&buf)?;
        f.sync_all()?;
        std::fs::rename(&tmp, &path)
    };
    write().map_err(|e| MonError::io(&path, e))?;
    fsync_dir(dir)
}

/// Reads a file written by [`write_atomic`]; `None` if it does not exist. A damaged file is an
/// error: atomic replacement means it cannot be torn.
fn read_atomic<T: for<'de> Deserialize<'de>>(dir: &Path, name: &str) -> Result<Option<T>, MonError> {
    let path = dir.join(name);
    let Some(body) = read_atomic_bytes(dir, name)? else { return Ok(None) };
    postcard::from_bytes(&body).map(Some).map_err(|e| MonError::corrupt(&path, format!("undecodable contents: {e}")))
}

/// The one record of a file written by [`write_atomic`], undecoded.
fn read_atomic_bytes(dir: &Path, name: &str) -> Result<Option<Vec<u8>>, MonError> {
    let path = dir.join(name);
    let buf = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(MonError::io(&path, e)),
    };
    let (records, end) = split_records(&buf);
    match records.as_slice() {
        [(_, body)] if end == buf.len() => Ok(Some(body.to_vec())),
        _ => Err(MonError::corrupt(&path, "checksum mismatch or trailing bytes")),
    }
}

/// Creates `dir` with the identity file. Durable when it returns.
pub(crate) fn write_meta(dir: &Path, meta: &Meta) -> Result<(), MonError> {
    std::fs::create_dir_all(dir).map_err(|e| MonError::io(dir, e))?;
    if let Some(old) = read_meta(dir)? {
        return Err(MonError::AlreadyInitialized { path: dir.to_path_buf(), rank: old.rank, fsid: old.fsid });
    }
    write_atomic(dir, META_FILE, meta)
}

/// The identity, if `dir` holds a monitor of this build's format; a directory of another format
/// is refused with [`MonError::Format`], before anything else in it is read.
pub(crate) fn read_meta(dir: &Path) -> Result<Option<Meta>, MonError> {
    let path = dir.join(META_FILE);
    let Some(body) = read_atomic_bytes(dir, META_FILE)? else { return Ok(None) };
    let format_error = |found| MonError::Format { path: path.clone(), found, want: MON_STORE_FORMAT };
    match postcard::from_bytes::<Meta>(&body) {
        Ok(meta) if meta.format == MON_STORE_FORMAT => Ok(Some(meta)),
        Ok(meta) => Err(format_error(meta.format)),
        Err(e) => match postcard::from_bytes::<MetaV0>(&body) {
            Ok(_) => Err(format_error(0)),
            Err(_) => Err(MonError::corrupt(&path, format!("undecodable contents: {e}"))),
        },
    }
}

pub(crate) fn read_snapshot(dir: &Path) -> Result<Option<SnapshotFile>, MonError> {
    read_atomic(dir, SNAPSHOT_FILE)
}

/// Replaces the snapshot file. Durable when it returns.
pub(crate) fn write_snapshot(dir: &Path, snap: &SnapshotFile) -> Result<(), MonError> {
    write_atomic(dir, SNAPSHOT_FILE, snap)
}

fn io_err(e: &MonError) -> AnyError {
    AnyError::new(e)
}

struct LogInner {
    dir: PathBuf,
    file: File,
    /// Length of the valid log file: where the next record goes.
    end: u64,
    /// Entries not yet purged, with the file offset of each one's record.
    entries: BTreeMap<u64, (u64, Entry<TypeConfig>)>,
    hard: HardState,
}

impl LogInner {
    fn path(&self) -> PathBuf {
        self.dir.join(LOG_FILE)
    }

    fn save_hard(&self) -> Result<(), MonError> {
        write_atomic(&self.dir, STATE_FILE, &self.hard)
    }

    fn append(&mut self, entries: Vec<Entry<TypeConfig>>) -> Result<(), MonError> {
        let path = self.path();
        let mut buf = Vec::new();
        let mut placed = Vec::with_capacity(entries.len());
        for entry in entries {
            let bytes = postcard::to_allocvec(&entry).map_err(|e| MonError::corrupt(&path, format!("encode: {e}")))?;
            placed.push((self.end + buf.len() as u64, entry));
            frame_record(&bytes, &mut buf);
        }
        self.file.write_all(&buf).map_err(|e| MonError::io(&path, e))?;
        // The acknowledgement Raft is waiting for means "on disk": sync before returning.
        self.file.sync_data().map_err(|e| MonError::io(&path, e))?;
        self.end += buf.len() as u64;
        for (offset, entry) in placed {
            self.entries.insert(entry.log_id.index, (offset, entry));
        }
        Ok(())
    }

    /// Removes entries at `index` and after, from memory and from the file.
    fn truncate(&mut self, index: u64) -> Result<(), MonError> {
        let Some((&first, &(offset, _))) = self.entries.range(index..).next() else { return Ok(()) };
        let path = self.path();
        self.file.set_len(offset).map_err(|e| MonError::io(&path, e))?;
        self.file.sync_all().map_err(|e| MonError::io(&path, e))?;
        self.end = offset;
        self.entries.split_off(&first);
        Ok(())
    }

    /// Forgets entries up to `log_id` (they are in a snapshot). The purge point is recorded first;
    /// the file is then rewritten without those entries (atomically), so it does not grow forever.
    fn purge(&mut self, log_id: LogId<u64>) -> Result<(), MonError> {
        self.hard.last_purged = Some(log_id);
        self.save_hard()?;
        let keep = self.entries.split_off(&(log_id.index + 1));
        self.entries = BTreeMap::new();
        let path = self.path();
        let tmp = self.dir.join(format!("{LOG_FILE}.tmp"));
        let mut buf = Vec::new();
        for (_, (_, entry)) in keep {
            let bytes = postcard::to_allocvec(&entry).map_err(|e| MonError::corrupt(&path, format!("encode: {e}")))?;
            self.entries.insert(entry.log_id.index, (buf.len() as u64, entry));
            frame_record(&bytes, &mut buf);
        }
        let write = || -> std::io::Result<File> {
            let mut f = File::create(&tmp)?;
            f.write_all(&buf)?;
            f.sync_all()?;
            std::fs::rename(&tmp, &path)?;
            OpenOptions::new().append(true).open(&path)
        };
        self.file = write().map_err(|e| MonError::io(&path, e))?;
        self.end = buf.len() as u64;
        fsync_dir(&self.dir)
    }
}

/// The Raft log and vote, durable in the data directory. Clones share the same files.
///
/// Durability: [`RaftLogStorage::append`] reports completion only after the entries are written
/// and `fdatasync`ed; `save_vote` and `save_committed` return after the state file is replaced
/// and synced; `truncate` returns after the file is cut and synced.
#[derive(Clone)]
pub struct LogStore {
    inner: Arc<Mutex<LogInner>>,
}

impl LogStore {
    /// Opens (creating if needed) the log in `dir`, cutting off a torn tail.
    pub(crate) fn open(dir: &Path) -> Result<LogStore, MonError> {
        let path = dir.join(LOG_FILE);
        let hard: HardState = read_atomic(dir, STATE_FILE)?.unwrap_or_default();
        let mut file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .append(true)
            .open(&path)
            .map_err(|e| MonError::io(&path, e))?;
        let mut buf = Vec::new();
        file.read_to_end(&mut buf).map_err(|e| MonError::io(&path, e))?;
        let (records, valid) = split_records(&buf);
        let mut entries = BTreeMap::new();
        let mut prev: Option<u64> = None;
        for (offset, body) in records {
            let entry: Entry<TypeConfig> = postcard::from_bytes(body)
                .map_err(|e| MonError::corrupt(&path, format!("entry at byte {offset} does not decode: {e}")))?;
            let index = entry.log_id.index;
            if prev.is_some_and(|p| p + 1 != index) {
                return Err(MonError::corrupt(&path, format!("entry {index} follows entry {prev:?}")));
            }
            prev = Some(index);
            if hard.last_purged.is_some_and(|p| index <= p.index) {
                continue; // purged, but the rewrite did not happen before a crash
            }
            entries.insert(index, (offset, entry));
        }
        if valid < buf.len() && valid_record_follows(&buf, valid) {
            // Dropping it and what follows would lose entries this monitor acknowledged, which
            // Raft's safety relies on: refuse to start instead (rebuild this monitor from peers).
            return Err(MonError::corrupt(&path, format!("damaged record at byte {valid} before valid ones")));
        }
        if valid < buf.len() {
            // Never acknowledged: the append that wrote it did not finish its sync.
            tracing::warn!(path = %path.display(), valid, len = buf.len(), "cutting off a torn log tail");
            file.set_len(valid as u64).map_err(|e| MonError::io(&path, e))?;
            file.sync_all().map_err(|e| MonError::io(&path, e))?;
        }
        let inner = LogInner { dir: dir.to_path_buf(), file, end: valid as u64, entries, hard };
        Ok(LogStore { inner: Arc::new(Mutex::new(inner)) })
    }

    fn lock(&self) -> MutexGuard<'_, LogInner> {
        // A panic while holding the lock would leave files and memory possibly out of step;
        // there is no panic path inside, so a poisoned lock still holds consistent data.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether nothing was ever written: no vote, no entry, nothing purged.
    pub(crate) fn is_pristine(&self) -> bool {
        let g = self.lock();
        g.hard.vote.is_none() && g.entries.is_empty() && g.hard.last_purged.is_none()
    }

    /// Runs `f` on the inner state on a blocking thread (it writes and syncs files).
    async fn blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut LogInner) -> Result<T, MonError> + Send + 'static,
    ) -> Result<T, MonError> {
        let inner = self.inner.clone();
        tokio::task::spawn_blocking(move || f(&mut inner.lock().unwrap_or_else(|p| p.into_inner())))
            .await
            .unwrap_or_else(|e| Err(MonError::Config(format!("log task failed: {e}"))))
    }
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry<TypeConfig>>, StorageError<u64>> {
        Ok(self.lock().entries.range(range).map(|(_, (_, e))| e.clone()).collect())
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogStore;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, StorageError<u64>> {
        let g = self.lock();
        let last_purged_log_id = g.hard.last_purged;
        let last_log_id = g.entries.values().next_back().map(|(_, e)| *e.get_log_id()).or(last_purged_log_id);
        Ok(LogState { last_purged_log_id, last_log_id })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<u64>) -> Result<(), StorageError<u64>> {
        let vote = *vote;
        self.blocking(move |g| {
            g.hard.vote = Some(vote);
            g.save_hard()
        })
        .await
        .map_err(|e| StorageIOError::write_vote(io_err(&e)).into())
    }

    async fn read_vote(&mut self) -> Result<Option<Vote<u64>>, StorageError<u64>> {
        Ok(self.lock().hard.vote)
    }

    async fn save_committed(&mut self, committed: Option<LogId<u64>>) -> Result<(), StorageError<u64>> {
        self.blocking(move |g| {
            if g.hard.committed == committed {
                return Ok(());
            }
            g.hard.committed = committed;
            g.save_hard()
        })
        .await
        .map_err(|e| StorageIOError::write(io_err(&e)).into())
    }

    async fn read_committed(&mut self) -> Result<Option<LogId<u64>>, StorageError<u64>> {
        Ok(self.lock().hard.committed)
    }

    async fn append<I>(&mut self, entries: I, callback: LogFlushed<TypeConfig>) -> Result<(), StorageError<u64>>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let entries: Vec<_> = entries.into_iter().collect();
        let r = self.blocking(move |g| g.append(entries)).await;
        match r {
            Ok(()) => {
                callback.log_io_completed(Ok(()));
                Ok(())
            }
            Err(e) => {
                callback.log_io_completed(Err(std::io::Error::other(e.to_string())));
                Err(StorageIOError::write_logs(io_err(&e)).into())
            }
        }
    }

    async fn truncate(&mut self, log_id: LogId<u64>) -> Result<(), StorageError<u64>> {
        self.blocking(move |g| g.truncate(log_id.index))
            .await
            .map_err(|e| StorageIOError::write_logs(io_err(&e)).into())
    }

    async fn purge(&mut self, log_id: LogId<u64>) -> Result<(), StorageError<u64>> {
        self.blocking(move |g| g.purge(log_id)).await.map_err(|e| StorageIOError::write_logs(io_err(&e)).into())
    }
}

/// The snapshot's map bytes as openraft wants them.
pub(crate) fn snapshot_data(data: Vec<u8>) -> Box<Cursor<Vec<u8>>> {
    Box::new(Cursor::new(data))
}

#[cfg(test)]
mod tests {
    use openraft::{CommittedLeaderId, EntryPayload};
    use shoal_map::{Change, OsdId};

    use super::*;

    fn entry(index: u64) -> Entry<TypeConfig> {
        Entry {
            log_id: LogId::new(CommittedLeaderId::new(1, 0), index),
            payload: EntryPayload::Normal(crate::raft::Proposal {
                change: Change::OsdDown { id: OsdId(index as u32) },
                session: Some(shoal_map::CommandSession { client: 9, seq: index }),
            }),
        }
    }

    fn indexes(s: &LogStore) -> Vec<u64> {
        s.lock().entries.keys().copied().collect()
    }

    #[test]
    fn torn_tail_is_cut_and_truncate_purge_survive_reopen() {
        let tmp = tempfile::tempdir().unwrap();
        let s = LogStore::open(tmp.path()).unwrap();
        assert!(s.is_pristine());
        s.lock().append((1..=10).map(entry).collect()).unwrap();
        drop(s);

        // A torn append: half a record at the end.
        let path = tmp.path().join(LOG_FILE);
        let good = std::fs::metadata(&path).unwrap().len();
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(&[40, 0, 0, 0, 1, 2, 3, 4, 5]).unwrap();
        drop(f);
        let s = LogStore::open(tmp.path()).unwrap();
        assert_eq!(indexes(&s), (1..=10).collect::<Vec<_>>());
        assert_eq!(std::fs::metadata(&path).unwrap().len(), good);

        s.lock().truncate(8).unwrap();
        s.lock().append(vec![entry(8)]).unwrap();
        s.lock().purge(LogId::new(CommittedLeaderId::new(1, 0), 4)).unwrap();
        drop(s);
        let s = LogStore::open(tmp.path()).unwrap();
        assert_eq!(indexes(&s), vec![5, 6, 7, 8]);
        assert_eq!(s.lock().hard.last_purged.map(|l| l.index), Some(4));
        assert!(!s.is_pristine());

        // A flipped bit inside a record followed by valid ones is damage, not a torn tail.
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[10] ^= 1;
        std::fs::write(&path, &bytes).unwrap();
        assert!(matches!(LogStore::open(tmp.path()), Err(MonError::Corrupt { .. })));
    }

    #[test]
    fn meta_is_written_once() {
        let tmp = tempfile::tempdir().unwrap();
        let meta = Meta::new("f".into(), 1, BTreeMap::new());
        write_meta(tmp.path(), &meta).unwrap();
        assert_eq!(read_meta(tmp.path()).unwrap(), Some(meta.clone()));
        assert!(matches!(write_meta(tmp.path(), &meta), Err(MonError::AlreadyInitialized { rank: 1, .. })));
        std::fs::write(tmp.path().join(META_FILE), b"garbage").unwrap();
        assert!(matches!(read_meta(tmp.path()), Err(MonError::Corrupt { .. })));
    }

    #[test]
    fn another_format_is_refused_by_name() {
        // An identity file as builds before the format number wrote it.
        #[derive(Serialize)]
        struct OldMeta {
            fsid: String,
            rank: u32,
            mons: BTreeMap<u32, SocketAddr>,
        }
        let tmp = tempfile::tempdir().unwrap();
        write_atomic(tmp.path(), META_FILE, &OldMeta { fsid: "f".into(), rank: 0, mons: BTreeMap::new() }).unwrap();
        let err = read_meta(tmp.path()).unwrap_err();
        assert!(matches!(err, MonError::Format { found: 0, want: MON_STORE_FORMAT, .. }), "{err}");
        assert!(err.to_string().contains("store format 0"), "{err}");
        // A newer build's directory.
        let newer = Meta { format: MON_STORE_FORMAT + 1, ..Meta::new("f".into(), 0, BTreeMap::new()) };
        write_atomic(tmp.path(), META_FILE, &newer).unwrap();
        let err = read_meta(tmp.path()).unwrap_err();
        assert!(matches!(err, MonError::Format { found, .. } if found == MON_STORE_FORMAT + 1), "{err}");
    }
}
