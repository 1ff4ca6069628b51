//! The PG log: every member's durable record of the writes it applied to a PG, in version order.
//!
//! Each write a primary orders gets an [`Eversion`]; the primary and every replica add one entry
//! (version → request id, object, operation count) **in the same store transaction as the write
//! itself**, so an entry exists exactly when its write was applied. The entries live in the omap
//! of one object ([`LOG_OBJECT`]) in a collection of their own (`pglog.POOL.SEED`, next to the
//! PG's `pg.POOL.SEED`, so listings of the PG never see it), keyed by [`Eversion::to_key`] so the
//! store's key order is the PG's history. At least the newest [`LOG_ENTRIES`] are kept: the write
//! that would make the log [`LOG_ENTRIES`] + [`TRIM_BATCH`] long removes the oldest
//! [`TRIM_BATCH`] entries in its own transaction (one removal per batch of writes rather than one
//! per write), so every member holding the same history holds the same log.
//!
//! What the log answers today: whether a request id was already applied to the PG on this OSD —
//! across reconnects, OSD restarts and a change of primary (a replica that becomes primary has
//! the entries of the writes it received) — so that a resent write is applied once; and the
//! newest version, so that versions keep growing across primaries. Peering and recovery (decision
//! 0008) will compare members' logs.
//!
//! Beyond the log (decision 0039): the request ids of trimmed entries move, in the trim's own
//! transaction, into *dups objects* of the same collection (`dups.N`, keyed by request id, `N`
//! the entry's `seq / keep`), of which the newest [`LogBounds::dups_objects`] (by default
//! [`DUPS_OBJECTS`]) are kept, so that a resend of a write trimmed from the log is still
//! recognised for about that many times the log's length. Nothing of them is kept in memory but which objects exist: only a request the client
//! marks as a resend (`OsdOp::resend`) and that the log does not know looks there.
//!
//! Entry value layout (all integers big-endian): `client u64 | tid u64 | op_count u32 | object`;
//! the top bit of `op_count` is set for a write that left nothing of the object's name
//! (`LogEntry::empties`; entries written before decision 0077 have it clear, as if they had not).
//! Dups entry: key `client u64 | tid u64`, value `version (16 bytes) | op_count u32`.

use std::collections::{HashMap, VecDeque};

use shoal_map::PgId;
use shoal_proto::osd::{DupsObject, Eversion, ReqId};
use shoal_store::{ObjectStore, StoreError, Transaction};

/// Entries a PG log keeps at least (per PG, on every member): a resend older than this many
/// writes to the same PG may not be recognised.
pub const LOG_ENTRIES: usize = 512;
/// Entries trimmed at once; the log never holds more than [`LOG_ENTRIES`] + [`TRIM_BATCH`] − 1,
/// which bounds the store's log object and the in-memory index.
pub const TRIM_BATCH: usize = 64;
/// Longest a log gets.
pub const MAX_LOG_ENTRIES: usize = LOG_ENTRIES + TRIM_BATCH - 1;

/// How long a PG log is kept: at least `keep` entries, `trim_batch` of them trimmed at once.
/// Every OSD of a cluster must use the same bounds (members compare logs entry by entry). The
/// default is [`LOG_ENTRIES`] and [`TRIM_BATCH`], with [`DUPS_OBJECTS`] dups objects; the
/// simulation uses a few entries so that peering meets trimmed logs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogBounds {
    pub keep: usize,
    pub trim_batch: usize,
    /// Dups objects kept beyond the log (each holds the request ids of `keep` versions): a
    /// resend is recognised for about `dups_objects × keep` versions after its write.
    pub dups_objects: u64,
}

impl Default for LogBounds {
    fn default() -> Self {
        LogBounds { keep: LOG_ENTRIES, trim_batch: TRIM_BATCH, dups_objects: DUPS_OBJECTS }
    }
}

impl LogBounds {
    /// Bounds of at least one entry kept and one trimmed at a time.
    ///
    /// # Panics
    /// If either is 0, or if the longest log would exceed [`MAX_LOG_ENTRIES`] (stored logs are
    /// read up to a bound derived from it).
    #[must_use]
    pub fn new(keep: usize, trim_batch: usize) -> LogBounds {
        assert!(keep >= 1 && trim_batch >= 1, "a PG log keeps and trims at least one entry");
        assert!(keep + trim_batch - 1 <= MAX_LOG_ENTRIES, "PG log bounds beyond {MAX_LOG_ENTRIES} entries");
        LogBounds { keep, trim_batch, dups_objects: DUPS_OBJECTS }
    }

    /// The same bounds keeping `dups_objects` dups objects instead of [`DUPS_OBJECTS`]: a
    /// simulation with logs of one entry keeps more, so that a resend that comes a few dozen
    /// writes late is still recognised, as the default log's length would.
    ///
    /// # Panics
    /// If `dups_objects` is 0 or over [`MAX_DUPS_OBJECTS`] (a log's load lists them in bounded
    /// pages), or if they would hold more request ids than the default bounds' (a backfill
    /// sends them all in one message).
    #[must_use]
    pub fn with_dups_objects(self, dups_objects: u64) -> LogBounds {
        assert!((1..=MAX_DUPS_OBJECTS).contains(&dups_objects), "dups objects must be 1..={MAX_DUPS_OBJECTS}");
        let most_ids = DUPS_OBJECTS * LOG_ENTRIES as u64;
        assert!(dups_objects * self.keep as u64 <= most_ids, "dups objects holding over {most_ids} request ids");
        LogBounds { dups_objects, ..self }
    }

    /// Longest the log gets.
    #[must_use]
    pub fn max_entries(&self) -> usize {
        self.keep + self.trim_batch - 1
    }
}
/// The object holding a PG's log entries in its omap.
pub const LOG_OBJECT: &str = "log";
/// Prefix of the dups objects' names (`dups.N`).
const DUPS_PREFIX: &str = "dups.";
/// Dups objects kept by default: starting object `N` removes object `N − DUPS_OBJECTS`.
pub const DUPS_OBJECTS: u64 = 8;
/// Most dups objects a log may be set to keep ([`LogBounds::with_dups_objects`]).
pub const MAX_DUPS_OBJECTS: u64 = 1024;

fn dups_object(n: u64) -> String {
    format!("{DUPS_PREFIX}{n}")
}

fn dups_key(reqid: &ReqId) -> Vec<u8> {
    let mut k = Vec::with_capacity(16);
    k.extend_from_slice(&reqid.client.to_be_bytes());
    k.extend_from_slice(&reqid.tid.to_be_bytes());
    k
}

/// Bytes of a dups entry's key (`client | tid`) and value (`version | op_count`). An
/// operator's decision's value goes on with its object's name (decision 0084).
const DUPS_KEY_BYTES: usize = 16;
const DUPS_VALUE_BYTES: usize = 20;

/// The client id of the removals that record an unfound object given up (no client has it:
/// client ids are random, and one of these two values comes up once in 2^63 clients).
pub const LOST_CLIENT: u64 = u64::MAX - 1;
/// The client id of the writes that revert an unfound object; their request's `tid` is the
/// sequence of the newest write of the PG's history the kept copy holds (its own version's,
/// or for a copy holding writes the history rolled back, that of the common point before them),
/// so that a later resend of a write given up can be told from one the kept copy holds. Two
/// reverts may share a request id: decisions skip the check for resends.
pub const REVERT_CLIENT: u64 = u64::MAX - 2;

/// Whether request ids of `client` are an operator's decisions on unfound objects.
#[must_use]
pub fn is_decision_client(client: u64) -> bool {
    client == LOST_CLIENT || client == REVERT_CLIENT
}

/// What a replacement of the log did to this member's dups objects (see
/// [`PgLog::write_replacement`]); pass it to [`PgLog::replaced`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DupsAfter {
    /// The member's own stayed.
    Kept,
    /// They were replaced by these (none: removed).
    Now(std::collections::BTreeSet<u64>),
}

/// Checks dups objects received from a primary: at most `bounds.dups_objects` of them, each with
/// at most `bounds.keep` entries (an object covers `keep` versions) of the stored layout.
pub fn check_dups(dups: &[DupsObject], bounds: LogBounds) -> Result<(), String> {
    if dups.len() as u64 > bounds.dups_objects {
        return Err(format!("{} dups objects, over the {} a PG keeps", dups.len(), bounds.dups_objects));
    }
    for d in dups {
        if d.entries.len() > bounds.keep.max(1) {
            return Err(format!("dups object {} has {} entries, over {}", d.number, d.entries.len(), bounds.keep));
        }
        let malformed = |(k, v): &&(Vec<u8>, Vec<u8>)| {
            // A decision's value may go on with its object's name.
            let decision =
                k.get(..8).and_then(|c| c.try_into().ok()).is_some_and(|c| is_decision_client(u64::from_be_bytes(c)));
            let named = decision
                && v.len() > DUPS_VALUE_BYTES
                && v.len() <= DUPS_VALUE_BYTES + shoal_store::names::MAX_NAME_BYTES;
            k.len() != DUPS_KEY_BYTES || (v.len() != DUPS_VALUE_BYTES && !named)
        };
        if let Some((k, v)) = d.entries.iter().find(malformed) {
            return Err(format!("dups object {} has an entry of {} + {} bytes", d.number, k.len(), v.len()));
        }
    }
    Ok(())
}
/// The log object's xattr holding the log's *tail*: the version of the newest entry trimmed
/// away (absent, read as `0'0`: nothing was ever trimmed, or the log was written before tails
/// were kept).
const TAIL_XATTR: &str = "tail";
/// Fixed bytes of an entry's value before the object name.
const ENTRY_FIXED_BYTES: usize = 20;
/// The bit of a stored entry's operation count that says the write emptied the object's name. A
/// request's operations arrive in one frame of at most `shoal_proto::frame::MAX_PAYLOAD_BYTES`, a few
/// bytes each, so a real count never reaches it.
const EMPTIES_BIT: u32 = 1 << 31;

/// The store collection holding PG `pg`'s log.
pub fn log_collection(pg: PgId) -> String {
    format!("pglog.{pg}")
}

/// One applied write, as recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogEntry {
    pub version: Eversion,
    pub reqid: ReqId,
    pub object: String,
    /// Operations of the request, so that a resend can be answered with one result per operation.
    pub op_count: u32,
    /// The write left nothing of the object's name (see `PgLogEntry::empties`).
    pub empties: bool,
}

impl From<&shoal_proto::osd::PgLogEntry> for LogEntry {
    fn from(e: &shoal_proto::osd::PgLogEntry) -> LogEntry {
        LogEntry {
            version: e.version,
            reqid: e.reqid,
            object: e.object.clone(),
            op_count: e.op_count,
            empties: e.empties,
        }
    }
}

impl From<LogEntry> for shoal_proto::osd::PgLogEntry {
    fn from(e: LogEntry) -> shoal_proto::osd::PgLogEntry {
        shoal_proto::osd::PgLogEntry {
            version: e.version,
            reqid: e.reqid,
            object: e.object,
            op_count: e.op_count,
            empties: e.empties,
        }
    }
}

impl LogEntry {
    fn encode_value(&self) -> Vec<u8> {
        assert!(
            self.op_count < EMPTIES_BIT,
            "PG log entry {}: operation count {} out of range",
            self.version,
            self.op_count
        );
        let mut v = Vec::with_capacity(ENTRY_FIXED_BYTES + self.object.len());
        v.extend_from_slice(&self.reqid.client.to_be_bytes());
        v.extend_from_slice(&self.reqid.tid.to_be_bytes());
        let flagged = if self.empties { self.op_count | EMPTIES_BIT } else { self.op_count };
        v.extend_from_slice(&flagged.to_be_bytes());
        v.extend_from_slice(self.object.as_bytes());
        v
    }

    fn decode(key: &[u8], value: &[u8]) -> Result<LogEntry, StoreError> {
        let bad = |what: &str| StoreError::Corrupt(format!("PG log entry: {what}"));
        let version = Eversion::from_key(key).ok_or_else(|| bad("key is not a version"))?;
        if value.len() < ENTRY_FIXED_BYTES {
            return Err(bad("value too short"));
        }
        let u64_at = |at: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&value[at..at + 8]);
            u64::from_be_bytes(b)
        };
        let mut count = [0u8; 4];
        count.copy_from_slice(&value[16..20]);
        let object = std::str::from_utf8(&value[ENTRY_FIXED_BYTES..]).map_err(|_| bad("object name is not UTF-8"))?;
        let flagged = u32::from_be_bytes(count);
        Ok(LogEntry {
            version,
            reqid: ReqId { client: u64_at(0), tid: u64_at(8) },
            object: object.to_string(),
            op_count: flagged & !EMPTIES_BIT,
            empties: flagged & EMPTIES_BIT != 0,
        })
    }
}

/// One PG's log on this OSD: the stored entries' versions in order and an index by request id.
#[derive(Debug, Default)]
pub struct PgLog {
    /// Versions and request ids of the kept entries, oldest first.
    entries: VecDeque<(Eversion, ReqId)>,
    /// Version and operation count of every kept entry, by request id (the newest entry when a
    /// request was applied again: an idempotent resend whose completion this OSD had not seen).
    by_reqid: HashMap<ReqId, (Eversion, u32)>,
    /// Whether the log collection exists in the store.
    has_collection: bool,
    /// Whether the log object exists in the store.
    created: bool,
    /// Whether the store holds exactly these entries (false when loading dropped extra stored
    /// ones: a damaged store, or one written with a larger bound), so that a replacement may
    /// write only the differences.
    exact: bool,
    bounds: LogBounds,
    /// The stored log's tail (see [`read_tail`]).
    tail: Eversion,
    /// Numbers of the dups objects the store holds.
    dups: std::collections::BTreeSet<u64>,
    /// The object names of the kept entries that are an operator's decisions
    /// ([`is_decision_client`]), by version: a trim keeps them in the dups with the request id
    /// (decision 0084). Decisions are rare, so this is small.
    decision_objects: std::collections::BTreeMap<Eversion, String>,
}

/// One omap entry: key, value.
type OmapEntry = (Vec<u8>, Vec<u8>);
/// Omap entries to add, by dups object number.
type DupsAdds = std::collections::BTreeMap<u64, Vec<OmapEntry>>;

/// What a trim does to the dups objects: entries to add per object, objects to remove.
struct DupsTrim {
    add: DupsAdds,
    remove: Vec<u64>,
}

impl PgLog {
    /// An empty log kept within `bounds`, for a PG this OSD has no log of yet.
    #[must_use]
    pub fn empty(bounds: LogBounds) -> PgLog {
        PgLog { bounds, ..PgLog::default() }
    }

    /// Reads PG `pg`'s log from the store (empty if it has none), kept within `bounds`.
    pub fn load(store: &dyn ObjectStore, pg: PgId, bounds: LogBounds) -> Result<PgLog, StoreError> {
        let mut log = PgLog { has_collection: store.collection_exists(&log_collection(pg))?, ..PgLog::empty(bounds) };
        log.exact = true;
        // Dups objects are listed even without a log object (a stray copy's log goes before
        // its collection is purged): a whole-log replacement must know them to remove them.
        if log.has_collection {
            let coll = log_collection(pg);
            let mut after: Option<String> = None;
            // Bounded: at most `dups_objects` exist (up to MAX_DUPS_OBJECTS, 16 pages), plus
            // what a crash between trims could leave.
            for _ in 0..64 {
                let page = store.list_objects(&coll, DUPS_PREFIX, after.as_deref(), 64)?;
                for name in &page.objects {
                    let n = name.strip_prefix(DUPS_PREFIX).and_then(|n| n.parse::<u64>().ok());
                    let n = n.ok_or_else(|| StoreError::Corrupt(format!("PG log collection holds {name:?}")))?;
                    log.dups.insert(n);
                }
                match page.next {
                    Some(next) => after = Some(next),
                    None => break,
                }
            }
        }
        let Some(entries) = scan(store, pg)? else { return Ok(log) };
        log.tail = read_tail(store, pg)?;
        log.created = true;
        for e in entries {
            log.push(e.version, e.reqid, e.op_count, &e.object);
        }
        while log.entries.len() > bounds.max_entries() {
            log.pop_oldest();
            log.exact = false;
        }
        Ok(log)
    }

    /// The newest version applied (the default, `0'0`, if none).
    #[must_use]
    pub fn last_update(&self) -> Eversion {
        self.entries.back().map(|(v, _)| *v).unwrap_or_default()
    }

    /// The version (of its newest entry) and operation count of request `reqid` if it was
    /// applied to this PG (within the log).
    #[must_use]
    pub fn lookup(&self, reqid: &ReqId) -> Option<(Eversion, u32)> {
        self.by_reqid.get(reqid).copied()
    }

    /// The version and operation count of request `reqid` if it was trimmed from the log and is
    /// still in a dups object: for a marked resend the log does not know (a few point lookups).
    pub fn lookup_trimmed(
        &self,
        store: &dyn ObjectStore,
        pg: PgId,
        reqid: &ReqId,
    ) -> Result<Option<(Eversion, u32)>, StoreError> {
        let coll = log_collection(pg);
        let key = dups_key(reqid);
        for n in self.dups.iter().rev() {
            if let Some(v) = store.omap_get(&coll, &dups_object(*n), &key)? {
                let malformed = || StoreError::Corrupt(format!("dups entry of PG {pg} is {} bytes", v.len()));
                let version = v.get(..16).and_then(Eversion::from_key).ok_or_else(malformed)?;
                let count: [u8; 4] = v.get(16..20).and_then(|c| c.try_into().ok()).ok_or_else(malformed)?;
                return Ok(Some((version, u32::from_be_bytes(count))));
            }
        }
        Ok(None)
    }

    /// This member's dups objects (the newest [`LogBounds::dups_objects`]), for a member being backfilled,
    /// or none when a replacement of this log would drop them ([`PgLog::write_replacement`]: its
    /// stored log is not exactly the one in memory), since only then may they name writes the
    /// PG's history rolled back. Call it on the primary, whose log overlaps the authority's.
    pub fn dups_to_share(&self, store: &dyn ObjectStore, pg: PgId) -> Result<Vec<DupsObject>, StoreError> {
        if !self.exact || !self.created {
            return Ok(Vec::new());
        }
        let mut out = Vec::new();
        for n in self.dups.iter().rev().take(self.bounds.dups_objects as usize).rev() {
            let entries = self.read_dups_object(store, pg, *n)?;
            out.push(DupsObject { number: *n, entries });
        }
        Ok(out)
    }

    /// Whether a dups object of this log holds a request trimmed at `version`: a write of the
    /// PG's history at that version, when this log is the PG's (its primary's). Always `false`
    /// while the dups may name writes the history rolled back (see [`PgLog::dups_to_share`]).
    /// Reads every dups object: for an operator's revert, not for the I/O path.
    pub fn dups_hold_version(&self, store: &dyn ObjectStore, pg: PgId, version: Eversion) -> Result<bool, StoreError> {
        if !self.exact || !self.created {
            return Ok(false);
        }
        for n in self.dups.iter().rev() {
            let entries = self.read_dups_object(store, pg, *n)?;
            if entries.iter().any(|(_, v)| v.get(..16).and_then(Eversion::from_key) == Some(version)) {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// The operator's decisions on `object` that this log trimmed into dups objects it still
    /// holds: their versions and request ids (decision 0084). Reads every dups object: for a
    /// resend of a write that was itself trimmed, which the log's own decisions do not cover.
    pub fn trimmed_decisions_on(
        &self,
        store: &dyn ObjectStore,
        pg: PgId,
        object: &str,
    ) -> Result<Vec<(Eversion, ReqId)>, StoreError> {
        let mut out = Vec::new();
        for n in &self.dups {
            let entries = self.read_dups_object(store, pg, *n)?;
            for (k, v) in entries {
                let id = |at: usize| k.get(at..at + 8).and_then(|b| b.try_into().ok()).map(u64::from_be_bytes);
                let (Some(client), Some(tid)) = (id(0), id(8)) else { continue };
                if !is_decision_client(client) || v.get(DUPS_VALUE_BYTES..) != Some(object.as_bytes()) {
                    continue;
                }
                let version = v
                    .get(..16)
                    .and_then(Eversion::from_key)
                    .ok_or_else(|| StoreError::Corrupt(format!("dups entry of PG {pg} is {} bytes", v.len())))?;
                out.push((version, ReqId { client, tid }));
            }
        }
        Ok(out)
    }

    /// The entries of dups object `n` of PG `pg`. Read one page past the bound: an object holds
    /// at most `keep` ids (one per version of its range), so more means damage, refused.
    fn read_dups_object(&self, store: &dyn ObjectStore, pg: PgId, n: u64) -> Result<Vec<OmapEntry>, StoreError> {
        let most = self.bounds.keep.max(1);
        let entries = store.omap_list(&log_collection(pg), &dups_object(n), None, most + 1)?;
        if entries.len() > most {
            return Err(StoreError::Corrupt(format!("dups object {n} of PG {pg} holds over {most} entries")));
        }
        Ok(entries)
    }

    /// What trimming the oldest `trim_batch` entries does to the dups objects.
    fn dups_trim(&self) -> DupsTrim {
        self.dups_adding(self.entries.iter().take(self.bounds.trim_batch).map(|(v, r)| (*v, *r, self.op_count(r))))
    }

    /// The operation count of request `reqid` (the index holds its newest entry: same request).
    fn op_count(&self, reqid: &ReqId) -> u32 {
        self.by_reqid.get(reqid).map_or(0, |(_, n)| *n)
    }

    /// What keeping the request ids of `entries` (version, request, operation count) beyond the
    /// log does to the dups objects: entries to add per object, and the objects that the newest
    /// one then pushes past [`LogBounds::dups_objects`].
    fn dups_adding(&self, entries: impl Iterator<Item = (Eversion, ReqId, u32)>) -> DupsTrim {
        let per_object = self.bounds.keep.max(1) as u64;
        let mut add = DupsAdds::new();
        for (version, reqid, count) in entries {
            let mut value = version.to_key().to_vec();
            value.extend_from_slice(&count.to_be_bytes());
            if let Some(object) = self.decision_objects.get(&version).filter(|_| is_decision_client(reqid.client)) {
                value.extend_from_slice(object.as_bytes());
            }
            add.entry(version.seq / per_object).or_default().push((dups_key(&reqid), value));
        }
        let newest = add.keys().next_back().copied().into_iter().chain(self.dups.iter().next_back().copied()).max();
        let remove = match newest {
            Some(n) => {
                // Objects that old are not kept, whether held or to be added.
                let kept = self.bounds.dups_objects;
                add.retain(|d, _| d + kept > n);
                self.dups.iter().copied().filter(|d| d + kept <= n).collect()
            }
            None => Vec::new(),
        };
        DupsTrim { add, remove }
    }

    /// The version of the newest entry of request `reqid`, if it is in the log.
    #[must_use]
    pub fn version_of(&self, reqid: &ReqId) -> Option<Eversion> {
        self.by_reqid.get(reqid).map(|(v, _)| *v)
    }

    /// Whether the kept entries reach back to `version`: an entry at it, if there was one, is
    /// still in the log, and so is every entry after it.
    #[must_use]
    pub fn reaches(&self, version: Eversion) -> bool {
        self.entries.front().is_some_and(|(oldest, _)| *oldest <= version)
    }

    /// The kept entries newer than `version` (versions and request ids), oldest first.
    pub fn entries_after(&self, version: Eversion) -> impl Iterator<Item = &(Eversion, ReqId)> {
        let from = self.entries.partition_point(|(v, _)| *v <= version);
        self.entries.range(from..)
    }

    #[must_use]
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Adds `entry` to `txn` (creating the log on first use and trimming the oldest entry when the
    /// log is full), to be committed with the write it records. Call [`PgLog::applied`] once the
    /// transaction committed.
    ///
    /// # Panics
    /// If `entry.version` is not newer than [`PgLog::last_update`]: callers order writes first.
    pub fn record(&self, txn: &mut Transaction, pg: PgId, entry: &LogEntry) {
        assert!(entry.version > self.last_update(), "PG log versions must grow");
        let coll = log_collection(pg);
        if !self.has_collection {
            txn.create_collection(&coll);
        }
        if !self.created {
            txn.touch(&coll, LOG_OBJECT);
        }
        if self.entries.len() >= self.bounds.max_entries() {
            let dups = self.dups_trim();
            for (n, entries) in dups.add {
                txn.touch(&coll, &dups_object(n));
                txn.omap_set(&coll, &dups_object(n), entries);
            }
            for n in dups.remove {
                txn.remove(&coll, &dups_object(n));
            }
            let oldest: Vec<Vec<u8>> =
                self.entries.iter().take(self.bounds.trim_batch).map(|(v, _)| v.to_key().to_vec()).collect();
            if let Some((newest_trimmed, _)) = self.entries.get(self.bounds.trim_batch - 1) {
                txn.set_xattr(&coll, LOG_OBJECT, TAIL_XATTR, newest_trimmed.to_key().to_vec());
            }
            txn.omap_remove(&coll, LOG_OBJECT, oldest);
        }
        txn.omap_set(&coll, LOG_OBJECT, vec![(entry.version.to_key().to_vec(), entry.encode_value())]);
    }

    /// Updates the in-memory log after the transaction built by [`PgLog::record`] committed.
    pub fn applied(&mut self, entry: &LogEntry) {
        self.has_collection = true;
        self.created = true;
        if self.entries.len() >= self.bounds.max_entries() {
            let dups = self.dups_trim();
            self.dups.extend(dups.add.keys());
            for n in dups.remove {
                self.dups.remove(&n);
            }
            if let Some((newest_trimmed, _)) = self.entries.get(self.bounds.trim_batch - 1) {
                self.tail = *newest_trimmed;
            }
            for _ in 0..self.bounds.trim_batch {
                self.pop_oldest();
            }
        }
        self.push(entry.version, entry.reqid, entry.op_count, &entry.object);
    }

    /// Adds to `txn` the replacement of this log, as stored for PG `pg`, by `entries` (oldest
    /// first; at most the newest [`MAX_LOG_ENTRIES`] are kept), like [`write_whole`] but writing
    /// only the differences: entries both hold (same version and request) stay, the others are
    /// removed or added. A member that already holds the authority's log, as every member of a
    /// PG that merely lost another one does, then writes nothing but the touch (the whole log was
    /// rewritten before: ~1,150 KV updates per member and PG for every re-peering, and as many
    /// tombstones that later scans of the log walk). The log collection must exist or be created
    /// earlier in `txn`; update the in-memory log with [`PgLog::replaced`] once it committed.
    ///
    /// Sound because a version names one entry everywhere: versions carry the epoch of the
    /// primary that ordered them, and a PG has one primary per epoch.
    ///
    /// Dups objects: with `dups` (a member being backfilled, sent the primary's by
    /// [`PgLog::dups_to_share`], already checked by [`check_dups`]) this member's are replaced by
    /// them. Otherwise its own stay when only differences are written: the caller replaces a log
    /// that overlaps the authority's, and the dups hold only entries older than its tail, so
    /// shared history. The entries this log drops that are up to the authority's `tail` are
    /// shared history too (the authority trimmed them meanwhile), and so are the oldest of `entries`
    /// past the bound: their request ids join the dups as a trim would add them, or a client's
    /// resend of one (a removal, an append) would be applied a second time. Dropped entries past
    /// the tail are the member's divergent writes: never kept. When the whole log is rewritten
    /// the dups are removed: they may name writes the PG's history rolled back, and a resend of
    /// such a write answered as done would be lost. Pass the answer to [`PgLog::replaced`].
    #[must_use]
    pub fn write_replacement(
        &self,
        txn: &mut Transaction,
        pg: PgId,
        entries: &[shoal_proto::osd::PgLogEntry],
        tail: Eversion,
        dups: Option<&[DupsObject]>,
    ) -> DupsAfter {
        let coll = log_collection(pg);
        let whole = !self.exact || !self.created;
        let skip = entries.len().saturating_sub(self.bounds.max_entries());
        let new_tail = tail_of(entries, tail, self.bounds);
        let after = if whole || dups.is_some() {
            for n in &self.dups {
                txn.remove(&coll, &dups_object(*n));
            }
            let mut now = std::collections::BTreeSet::new();
            for d in dups.unwrap_or_default() {
                txn.touch(&coll, &dups_object(d.number));
                if !d.entries.is_empty() {
                    txn.omap_set(&coll, &dups_object(d.number), d.entries.clone());
                }
                now.insert(d.number);
            }
            DupsAfter::Now(now)
        } else {
            let in_new: std::collections::HashSet<(Eversion, ReqId)> =
                entries[skip..].iter().map(|e| (e.version, e.reqid)).collect();
            let dropped = self
                .entries
                .iter()
                .filter(|(v, r)| *v <= tail && !in_new.contains(&(*v, *r)))
                .map(|(v, r)| (*v, *r, self.op_count(r)));
            let passed = entries[..skip].iter().map(|e| (e.version, e.reqid, e.op_count));
            let kept = self.dups_adding(dropped.chain(passed));
            if kept.add.is_empty() {
                DupsAfter::Kept
            } else {
                let mut now = self.dups.clone();
                for (n, adds) in kept.add {
                    txn.touch(&coll, &dups_object(n));
                    txn.omap_set(&coll, &dups_object(n), adds);
                    now.insert(n);
                }
                for n in kept.remove {
                    txn.remove(&coll, &dups_object(n));
                    now.remove(&n);
                }
                DupsAfter::Now(now)
            }
        };
        if whole {
            write_whole(txn, pg, entries, tail, self.bounds);
            return after;
        }
        let new = &entries[skip..];
        txn.touch(&coll, LOG_OBJECT);
        if new_tail != self.tail {
            write_tail(txn, &coll, entries, tail, self.bounds);
        }
        let keep: std::collections::HashSet<(Eversion, ReqId)> = new.iter().map(|e| (e.version, e.reqid)).collect();
        let held: std::collections::HashSet<(Eversion, ReqId)> = self.entries.iter().copied().collect();
        let remove: Vec<Vec<u8>> =
            self.entries.iter().filter(|e| !keep.contains(e)).map(|(v, _)| v.to_key().to_vec()).collect();
        let add: Vec<(Vec<u8>, Vec<u8>)> = new
            .iter()
            .filter(|e| !held.contains(&(e.version, e.reqid)))
            .map(|e| (e.version.to_key().to_vec(), LogEntry::from(e).encode_value()))
            .collect();
        if !remove.is_empty() {
            txn.omap_remove(&coll, LOG_OBJECT, remove);
        }
        if !add.is_empty() {
            txn.omap_set(&coll, LOG_OBJECT, add);
        }
        after
    }

    /// The entries of this log, as stored for PG `pg`, that a replacement by the authoritative
    /// `entries` past `tail` rolls back (divergent: past the tail, and not in `entries` with the
    /// same version and request), oldest first, with the common point: the newest version of
    /// this log that the replacement keeps (its tail if it keeps none). Reads only those entries
    /// from the store (the log in memory keeps no object names); at most the log's bound.
    pub fn rolled_back(
        &self,
        store: &dyn ObjectStore,
        pg: PgId,
        entries: &[shoal_proto::osd::PgLogEntry],
        tail: Eversion,
    ) -> Result<(Eversion, Vec<LogEntry>), StoreError> {
        if !self.created {
            return Ok((self.tail, Vec::new()));
        }
        let keep: std::collections::HashSet<(Eversion, ReqId)> = entries.iter().map(|e| (e.version, e.reqid)).collect();
        let divergent = |(v, r): &&(Eversion, ReqId)| *v > tail && !keep.contains(&(*v, *r));
        let common = self.entries.iter().filter(|e| !divergent(e)).map(|(v, _)| *v).max().unwrap_or(self.tail);
        let coll = log_collection(pg);
        let mut out = Vec::new();
        for (version, _) in self.entries.iter().filter(divergent) {
            let key = version.to_key();
            let value = store
                .omap_get(&coll, LOG_OBJECT, &key)?
                .ok_or_else(|| StoreError::Corrupt(format!("PG {pg}: log entry {version} is in memory, not stored")))?;
            out.push(LogEntry::decode(&key, &value)?);
        }
        // Past the common point only: anything else is a log out of order, which no primary writes.
        if let Some(e) = out.iter().find(|e| e.version <= common) {
            return Err(StoreError::Corrupt(format!(
                "PG {pg}: log entry {} would be rolled back but is not past the common point {common}",
                e.version
            )));
        }
        Ok((common, out))
    }

    /// Updates the in-memory log after the transaction built by [`write_whole`] or
    /// [`PgLog::write_replacement`] committed; `dups` is what the latter returned
    /// (`DupsAfter::Now` of none after [`write_whole`] on a log without dups objects).
    pub fn replaced(&mut self, entries: &[shoal_proto::osd::PgLogEntry], tail: Eversion, dups: DupsAfter) {
        if let DupsAfter::Now(now) = dups {
            self.dups = now;
        }
        self.tail = tail_of(entries, tail, self.bounds);
        self.entries.clear();
        self.by_reqid.clear();
        self.decision_objects.clear();
        self.has_collection = true;
        self.created = true;
        self.exact = true;
        for e in &entries[entries.len().saturating_sub(self.bounds.max_entries())..] {
            self.push(e.version, e.reqid, e.op_count, &e.object);
        }
    }

    fn push(&mut self, version: Eversion, reqid: ReqId, op_count: u32, object: &str) {
        self.entries.push_back((version, reqid));
        self.by_reqid.insert(reqid, (version, op_count));
        if is_decision_client(reqid.client) {
            self.decision_objects.insert(version, object.to_string());
        }
    }

    fn pop_oldest(&mut self) {
        if let Some((version, _)) = self.entries.front() {
            self.decision_objects.remove(version);
        }
        if let Some((version, reqid)) = self.entries.pop_front()
            && self.by_reqid.get(&reqid).is_some_and(|(v, _)| *v == version)
        {
            // Only if this was the request's newest entry: a request applied again (an idempotent
            // resend) keeps the index of its later entry.
            self.by_reqid.remove(&reqid);
        }
    }
}

/// Adds to `txn` the replacement of PG `pg`'s whole log by `entries` (oldest first; at most the
/// newest `bounds.max_entries()` are kept): what a member does when peering activates it with the
/// authoritative log. The log collection must exist or be created earlier in `txn`; update the
/// in-memory log with [`PgLog::replaced`] once the transaction committed.
pub fn write_whole(
    txn: &mut Transaction,
    pg: PgId,
    entries: &[shoal_proto::osd::PgLogEntry],
    tail: Eversion,
    bounds: LogBounds,
) {
    let coll = log_collection(pg);
    txn.touch(&coll, LOG_OBJECT).omap_clear(&coll, LOG_OBJECT);
    write_tail(txn, &coll, entries, tail, bounds);
    let skip = entries.len().saturating_sub(bounds.max_entries());
    let kv: Vec<(Vec<u8>, Vec<u8>)> =
        entries[skip..].iter().map(|e| (e.version.to_key().to_vec(), LogEntry::from(e).encode_value())).collect();
    if !kv.is_empty() {
        txn.omap_set(&coll, LOG_OBJECT, kv);
    }
}

/// The tail a log replaced by `entries` (whose own tail is `tail`) has within `bounds`: the
/// newest entry the bounds leave out, if any, else `tail`.
fn tail_of(entries: &[shoal_proto::osd::PgLogEntry], tail: Eversion, bounds: LogBounds) -> Eversion {
    let skip = entries.len().saturating_sub(bounds.max_entries());
    if skip > 0 { entries[skip - 1].version } else { tail }
}

/// Adds to `txn` the tail of a log replaced by `entries` whose own tail is `tail`.
fn write_tail(
    txn: &mut Transaction,
    coll: &str,
    entries: &[shoal_proto::osd::PgLogEntry],
    tail: Eversion,
    bounds: LogBounds,
) {
    let tail = tail_of(entries, tail, bounds);
    if tail == Eversion::default() {
        txn.remove_xattr(coll, LOG_OBJECT, TAIL_XATTR);
    } else {
        txn.set_xattr(coll, LOG_OBJECT, TAIL_XATTR, tail.to_key().to_vec());
    }
}

/// The tail of PG `pg`'s stored log: the version of the newest entry trimmed from it (`0'0` if
/// none was, or if the log predates kept tails).
pub fn read_tail(store: &dyn ObjectStore, pg: PgId) -> Result<Eversion, StoreError> {
    let coll = log_collection(pg);
    if !store.collection_exists(&coll)? || !store.exists(&coll, LOG_OBJECT)? {
        return Ok(Eversion::default());
    }
    match store.get_xattr(&coll, LOG_OBJECT, TAIL_XATTR)? {
        None => Ok(Eversion::default()),
        Some(v) => {
            Eversion::from_key(&v).ok_or_else(|| StoreError::Corrupt(format!("PG {pg}: log tail is not 16 bytes")))
        }
    }
}

/// Reads every kept entry of PG `pg`'s log on `store`, oldest first (for tests and tools).
pub fn read_entries(store: &dyn ObjectStore, pg: PgId) -> Result<Vec<LogEntry>, StoreError> {
    Ok(scan(store, pg)?.unwrap_or_default())
}

/// The stored entries of PG `pg`'s log, oldest first; `None` if the PG has no log yet. Bounded:
/// the log never holds more than [`MAX_LOG_ENTRIES`], and a store holding more (damaged, or written
/// by a build with a larger bound) is read only up to four times that.
fn scan(store: &dyn ObjectStore, pg: PgId) -> Result<Option<Vec<LogEntry>>, StoreError> {
    const PAGE: usize = 256;
    let coll = log_collection(pg);
    if !store.collection_exists(&coll)? || !store.exists(&coll, LOG_OBJECT)? {
        return Ok(None);
    }
    let mut out = Vec::new();
    let mut after: Option<Vec<u8>> = None;
    for _ in 0..=(4 * LOG_ENTRIES / PAGE) {
        let page = store.omap_list(&coll, LOG_OBJECT, after.as_deref(), PAGE)?;
        let Some((last, _)) = page.last() else { break };
        after = Some(last.clone());
        for (k, v) in &page {
            out.push(LogEntry::decode(k, v)?);
        }
    }
    Ok(Some(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_round_trip_and_refuse_damage() {
        let e = LogEntry {
            version: Eversion { epoch: 7, seq: 42 },
            reqid: ReqId { client: u64::MAX, tid: 3 },
            object: "obj/ü".into(),
            op_count: 2,
            empties: false,
        };
        let back = LogEntry::decode(&e.version.to_key(), &e.encode_value()).expect("decode");
        assert_eq!(back, e);
        // The flag of a write that emptied the name rides on the operation count's top bit, and
        // an entry stored before it existed reads as not emptying.
        let emptying = LogEntry { empties: true, ..e.clone() };
        let value = emptying.encode_value();
        assert_eq!(value[16] & 0x80, 0x80);
        assert_eq!(LogEntry::decode(&e.version.to_key(), &value).expect("decode"), emptying);
        assert_eq!(&value[..16], &e.encode_value()[..16]);
        assert!(LogEntry::decode(&[1, 2, 3], &e.encode_value()).is_err(), "short key");
        assert!(LogEntry::decode(&e.version.to_key(), &e.encode_value()[..19]).is_err(), "short value");
        let mut bad = e.encode_value();
        bad.push(0xff);
        assert!(LogEntry::decode(&e.version.to_key(), &bad).is_err(), "object name not UTF-8");
    }

    #[test]
    fn a_replaced_log_in_memory_matches_the_stored_one() {
        use shoal_proto::osd::PgLogEntry;
        let store = shoal_store::engine::MemEngine::new_mem(64 << 20).expect("store");
        let pg = PgId { pool: 1, seed: 2 };
        let entries: Vec<PgLogEntry> = (1..=(MAX_LOG_ENTRIES as u64 + 10))
            .map(|i| PgLogEntry {
                version: Eversion { epoch: 3, seq: i },
                reqid: ReqId { client: 9, tid: i },
                object: format!("o{i}"),
                op_count: 1,
                empties: false,
            })
            .collect();
        let mut txn = Transaction::new();
        txn.create_collection(&log_collection(pg));
        write_whole(&mut txn, pg, &entries, Eversion::default(), LogBounds::default());
        store.commit(txn, shoal_store::Durability::Sync).expect("commit");
        let mut memory = PgLog::empty(LogBounds::default());
        memory.replaced(&entries, Eversion::default(), DupsAfter::Now(Default::default()));
        let loaded = PgLog::load(&store, pg, LogBounds::default()).expect("load");
        assert_eq!(memory.len(), MAX_LOG_ENTRIES);
        assert_eq!((memory.len(), memory.last_update()), (loaded.len(), loaded.last_update()));
        let (oldest_kept, trimmed) = (ReqId { client: 9, tid: 11 }, ReqId { client: 9, tid: 10 });
        assert_eq!((memory.lookup(&oldest_kept).map(|(_, n)| n), memory.lookup(&trimmed)), (Some(1), None));
        assert_eq!((loaded.lookup(&oldest_kept).map(|(_, n)| n), loaded.lookup(&trimmed)), (Some(1), None));
    }

    #[test]
    fn a_replacement_writes_only_the_differences_and_stores_the_new_log() {
        use shoal_proto::osd::PgLogEntry;
        let entry = |epoch: u64, seq: u64, client: u64| PgLogEntry {
            version: Eversion { epoch, seq },
            reqid: ReqId { client, tid: seq },
            object: format!("o{seq}"),
            op_count: 1,
            empties: false,
        };
        let store = shoal_store::engine::MemEngine::new_mem(64 << 20).expect("store");
        let pg = PgId { pool: 1, seed: 2 };
        // Held: 1..=20 of epoch 3, then two divergent entries (epoch 3, 21 and 22) that an old
        // primary applied alone.
        let held: Vec<PgLogEntry> = (1..=22).map(|i| entry(3, i, 9)).collect();
        let mut txn = Transaction::new();
        txn.create_collection(&log_collection(pg));
        write_whole(&mut txn, pg, &held, Eversion::default(), LogBounds::default());
        store.commit(txn, shoal_store::Durability::Sync).expect("commit");
        let log = PgLog::load(&store, pg, LogBounds::default()).expect("load");

        // The same log again: nothing but the touch.
        let mut txn = Transaction::new();
        assert_eq!(
            log.write_replacement(&mut txn, pg, &held, Eversion::default(), None),
            DupsAfter::Kept,
            "history kept"
        );
        assert_eq!(txn.ops.len(), 1, "{:?}", txn.ops);

        // The authority: 1..=20, then its own 21..=25 of epoch 5.
        let auth: Vec<PgLogEntry> = (1..=20).map(|i| entry(3, i, 9)).chain((21..=25).map(|i| entry(5, i, 8))).collect();
        // What replacing the log by it rolls back: the two divergent entries, read with their
        // objects, past the common point 3'20; the same log, or one trimmed past them, none.
        let (common, rolled) = log.rolled_back(&store, pg, &auth, Eversion::default()).expect("rolled back");
        assert_eq!(common, Eversion { epoch: 3, seq: 20 });
        let named: Vec<(u64, &str)> = rolled.iter().map(|e| (e.version.seq, e.object.as_str())).collect();
        assert_eq!(named, vec![(21, "o21"), (22, "o22")]);
        assert!(log.rolled_back(&store, pg, &held, Eversion::default()).expect("same").1.is_empty());
        let past = Eversion { epoch: 3, seq: 22 };
        assert!(log.rolled_back(&store, pg, &[], past).expect("trimmed").1.is_empty(), "up to the tail: shared");
        let mut txn = Transaction::new();
        assert_eq!(log.write_replacement(&mut txn, pg, &auth, Eversion::default(), None), DupsAfter::Kept);
        let (removed, added) = txn.ops.iter().fold((0, 0), |(r, a), op| match op {
            shoal_store::Op::OmapRemove { keys, .. } => (r + keys.len(), a),
            shoal_store::Op::OmapSet { entries, .. } => (r, a + entries.len()),
            _ => (r, a),
        });
        assert_eq!((removed, added), (2, 5), "the divergent two go, the authority's five come");
        store.commit(txn, shoal_store::Durability::Sync).expect("commit");
        let stored: Vec<(Eversion, ReqId)> =
            read_entries(&store, pg).expect("read").into_iter().map(|e| (e.version, e.reqid)).collect();
        assert_eq!(stored, auth.iter().map(|e| (e.version, e.reqid)).collect::<Vec<_>>());

        // A log whose in-memory copy may not match the store is rewritten whole.
        let mut txn = Transaction::new();
        assert_eq!(
            PgLog::empty(LogBounds::default()).write_replacement(&mut txn, pg, &auth, Eversion::default(), None),
            DupsAfter::Now(Default::default())
        );
        assert!(txn.ops.iter().any(|op| matches!(op, shoal_store::Op::OmapClear { .. })));
    }

    /// Writes `n` entries (seq 1..=n, request ids `(7, seq)`) through `record` and `applied`, as
    /// an OSD does, each in its own transaction.
    fn write_entries(store: &dyn ObjectStore, log: &mut PgLog, pg: PgId, seqs: std::ops::RangeInclusive<u64>) {
        for seq in seqs {
            let entry = LogEntry {
                version: Eversion { epoch: 1, seq },
                reqid: ReqId { client: 7, tid: seq },
                object: format!("o{}", seq % 5),
                op_count: (seq % 3 + 1) as u32,
                empties: seq % 4 == 0,
            };
            let mut txn = Transaction::new();
            log.record(&mut txn, pg, &entry);
            store.commit(txn, shoal_store::Durability::Batch).expect("commit");
            log.applied(&entry);
        }
    }

    #[test]
    fn a_log_set_to_keep_more_dups_objects_recognises_older_resends() {
        let pg = PgId { pool: 1, seed: 4 };
        let id = |seq| ReqId { client: 7, tid: seq };
        // Logs of one entry: with the default eight dups objects, a request 20 writes old is
        // forgotten; with 32 kept it is found, and a backfill may send all 32.
        for (dups_objects, found) in [(DUPS_OBJECTS, false), (32, true)] {
            let store = shoal_store::engine::MemEngine::new_mem(64 << 20).expect("store");
            let bounds = LogBounds::new(1, 1).with_dups_objects(dups_objects);
            let mut log = PgLog::empty(bounds);
            write_entries(&store, &mut log, pg, 1..=30);
            assert_eq!(log.lookup_trimmed(&store, pg, &id(10)).unwrap().is_some(), found, "{dups_objects} kept");
            assert!(log.dups.len() as u64 <= dups_objects, "{:?}", log.dups);
            // (As an OSD holds it: loaded from the store, so known to match it.)
            let loaded = PgLog::load(&store, pg, bounds).expect("load");
            assert_eq!(loaded.dups, log.dups);
            let shared = loaded.dups_to_share(&store, pg).expect("read");
            assert_eq!(shared.len(), log.dups.len());
            check_dups(&shared, bounds).expect("within the bounds");
            assert_eq!(check_dups(&shared, LogBounds::new(1, 1)).is_err(), found, "over the default's count");
        }
    }

    #[test]
    fn trimmed_decisions_keep_their_object_names_in_the_dups() {
        let store = shoal_store::engine::MemEngine::new_mem(64 << 20).expect("store");
        let pg = PgId { pool: 1, seed: 6 };
        let bounds = LogBounds::new(2, 1);
        let mut log = PgLog::empty(bounds);
        write_entries(&store, &mut log, pg, 1..=3);
        // An operator's removal of "lost-one" as lost, then enough writes to trim it.
        let decision = LogEntry {
            version: Eversion { epoch: 1, seq: 4 },
            reqid: ReqId { client: LOST_CLIENT, tid: 77 },
            object: "lost-one".into(),
            op_count: 2,
            empties: true,
        };
        let mut txn = Transaction::new();
        log.record(&mut txn, pg, &decision);
        store.commit(txn, shoal_store::Durability::Batch).expect("commit");
        log.applied(&decision);
        write_entries(&store, &mut log, pg, 5..=8);
        assert!(!log.reaches(decision.version), "trimmed");
        let found = log.trimmed_decisions_on(&store, pg, "lost-one").unwrap();
        assert_eq!(found, vec![(decision.version, decision.reqid)]);
        assert!(log.trimmed_decisions_on(&store, pg, "o1").unwrap().is_empty(), "plain writes are not decisions");
        // And after a restart (the name comes from the stored entry) the same.
        let loaded = PgLog::load(&store, pg, bounds).expect("load");
        assert_eq!(loaded.trimmed_decisions_on(&store, pg, "lost-one").unwrap(), found);
        // Shared with a member being backfilled, the named value passes the check; a name on a
        // plain request's value, or one longer than any object name, does not.
        let shared = loaded.dups_to_share(&store, pg).expect("read");
        check_dups(&shared, bounds).expect("a decision's name is allowed");
        let mut plain = shared.clone();
        let (_, v) =
            plain.iter_mut().flat_map(|d| d.entries.iter_mut()).find(|(k, _)| k[..8] == 7u64.to_be_bytes()).unwrap();
        v.extend_from_slice(b"x");
        assert!(check_dups(&plain, bounds).is_err());
        let mut long = shared;
        let (_, v) = long
            .iter_mut()
            .flat_map(|d| d.entries.iter_mut())
            .find(|(k, _)| k[..8] == LOST_CLIENT.to_be_bytes())
            .unwrap();
        v.extend_from_slice(&[b'n'; shoal_store::names::MAX_NAME_BYTES]);
        assert!(check_dups(&long, bounds).is_err());
    }

    #[test]
    fn dups_name_the_versions_of_trimmed_writes_only_while_the_log_is_exact() {
        let store = shoal_store::engine::MemEngine::new_mem(64 << 20).expect("store");
        let pg = PgId { pool: 1, seed: 5 };
        let bounds = LogBounds::new(4, 2);
        let mut log = PgLog::empty(bounds);
        write_entries(&store, &mut log, pg, 1..=20);
        let v = |seq| Eversion { epoch: 1, seq };
        let mut log = PgLog::load(&store, pg, bounds).expect("load");
        // Trimmed into the dups: named; still in the log, or never written: not in the dups.
        assert!(log.dups_hold_version(&store, pg, v(3)).unwrap());
        assert!(!log.dups_hold_version(&store, pg, v(20)).unwrap(), "in the log, not the dups");
        assert!(!log.dups_hold_version(&store, pg, Eversion { epoch: 2, seq: 3 }).unwrap());
        // A log whose dups may name rolled-back writes vouches for none.
        log.exact = false;
        assert!(!log.dups_hold_version(&store, pg, v(3)).unwrap());
    }

    #[test]
    #[should_panic(expected = "request ids")]
    fn dups_objects_may_not_hold_more_request_ids_than_the_defaults() {
        let _ = LogBounds::default().with_dups_objects(DUPS_OBJECTS + 1);
    }

    #[test]
    fn trimmed_request_ids_are_found_in_dups_objects_until_those_are_rotated_out() {
        let store = shoal_store::engine::MemEngine::new_mem(64 << 20).expect("store");
        let pg = PgId { pool: 1, seed: 3 };
        // Logs of 4 entries trimmed 2 at a time: dups objects of 4 ids each, 8 of them kept.
        let bounds = LogBounds::new(4, 2);
        let mut log = PgLog::empty(bounds);
        write_entries(&store, &mut log, pg, 1..=20);
        let id = |seq| ReqId { client: 7, tid: seq };
        // Trimmed from the log, found among the dups, with the request's operation count.
        assert_eq!(log.lookup(&id(3)), None);
        assert_eq!(log.lookup_trimmed(&store, pg, &id(3)).unwrap().map(|(_, n)| n), Some(1));
        assert_eq!(log.lookup_trimmed(&store, pg, &id(14)).unwrap().map(|(_, n)| n), Some(3));
        // And with the trimmed entry's version (a revert logged later is compared with it).
        assert_eq!(log.lookup_trimmed(&store, pg, &id(14)).unwrap(), Some((Eversion { epoch: 1, seq: 14 }, 3)));
        assert_eq!(log.lookup_trimmed(&store, pg, &id(99)).unwrap(), None);
        // A reloaded log knows the same dups objects.
        let loaded = PgLog::load(&store, pg, bounds).expect("load");
        assert_eq!(loaded.dups, log.dups);
        assert_eq!(loaded.lookup_trimmed(&store, pg, &id(3)).unwrap().map(|(_, n)| n), Some(1));
        // Far more writes: the oldest dups objects go, at most DUPS_OBJECTS stay.
        write_entries(&store, &mut log, pg, 21..=200);
        assert_eq!(log.lookup_trimmed(&store, pg, &id(3)).unwrap(), None, "rotated out");
        assert!(log.lookup_trimmed(&store, pg, &id(180)).unwrap().is_some());
        assert!(log.dups.len() as u64 <= DUPS_OBJECTS, "{:?}", log.dups);
        let stored = store.list_objects(&log_collection(pg), DUPS_PREFIX, None, 100).unwrap().objects;
        assert_eq!(stored.len(), log.dups.len(), "memory mirrors the store: {stored:?}");
        // A whole-log replacement (no shared history) removes them all.
        let auth: Vec<shoal_proto::osd::PgLogEntry> = (300..=302)
            .map(|seq| shoal_proto::osd::PgLogEntry {
                version: Eversion { epoch: 9, seq },
                reqid: id(seq),
                object: "x".into(),
                op_count: 1,
                empties: false,
            })
            .collect();
        // (As an OSD holds it: loaded from the store, so known to match it.)
        let shared = PgLog::load(&store, pg, bounds).expect("load").dups_to_share(&store, pg).expect("read");
        assert_eq!(shared.iter().map(|d| d.number).collect::<std::collections::BTreeSet<_>>(), log.dups);
        check_dups(&shared, bounds).expect("well formed");
        let mut stale = PgLog::load(&store, pg, bounds).expect("load");
        stale.exact = false;
        assert!(stale.dups_to_share(&store, pg).expect("read").is_empty(), "an inexact log shares none");
        let mut txn = Transaction::new();
        let after = stale.write_replacement(&mut txn, pg, &auth, Eversion::default(), None);
        assert_eq!(after, DupsAfter::Now(Default::default()));
        store.commit(txn, shoal_store::Durability::Batch).expect("commit");
        stale.replaced(&auth, Eversion::default(), after);
        assert!(stale.dups.is_empty());
        assert!(store.list_objects(&log_collection(pg), DUPS_PREFIX, None, 100).unwrap().objects.is_empty());
        assert_eq!(stale.lookup_trimmed(&store, pg, &id(180)).unwrap(), None);

        // A member being backfilled gets the primary's dups objects with the authority's log,
        // whatever it held: it then recognises the same trimmed ids.
        let mut txn = Transaction::new();
        let after = stale.write_replacement(&mut txn, pg, &auth, Eversion::default(), Some(&shared));
        assert_eq!(after, DupsAfter::Now(log.dups.clone()));
        store.commit(txn, shoal_store::Durability::Batch).expect("commit");
        stale.replaced(&auth, Eversion::default(), after);
        assert_eq!(
            stale.lookup_trimmed(&store, pg, &id(180)).unwrap(),
            log.lookup_trimmed(&store, pg, &id(180)).unwrap()
        );
        assert!(stale.lookup_trimmed(&store, pg, &id(180)).unwrap().is_some());
        assert_eq!(PgLog::load(&store, pg, bounds).expect("load").dups, log.dups, "stored as sent");

        // Malformed or oversized dups are refused by name.
        let mut bad = shared.clone();
        bad[0].entries[0].0 = vec![1; 3];
        assert!(check_dups(&bad, bounds).unwrap_err().contains("entry of 3 + 20 bytes"));
        let mut long = shared.clone();
        long[0].entries.push((vec![1; DUPS_KEY_BYTES], vec![0; DUPS_VALUE_BYTES]));
        assert!(check_dups(&long, bounds).unwrap_err().contains("entries, over 4"));
        let many: Vec<DupsObject> =
            (0..=DUPS_OBJECTS).map(|number| DupsObject { number, entries: Vec::new() }).collect();
        assert!(check_dups(&many, bounds).unwrap_err().contains("dups objects"));
    }

    #[test]
    fn a_replacement_keeps_the_request_ids_of_the_shared_entries_it_drops() {
        // The simulation's seed 130488 `--snaps --short-logs 2`: a member caught up from an
        // authority that had trimmed past the member's newest entries; replacing its log dropped
        // them without keeping their ids, and a client's resend of one of them (a removal) was
        // applied again. Shared entries dropped, and the authority's entries past the bound,
        // join the dups; the member's divergent entries do not.
        use shoal_proto::osd::PgLogEntry;
        let store = shoal_store::engine::MemEngine::new_mem(64 << 20).expect("store");
        let pg = PgId { pool: 1, seed: 4 };
        let bounds = LogBounds::new(4, 2);
        let mut log = PgLog::empty(bounds);
        // Held: 1..=4 of epoch 1 (request ids (7, seq)).
        write_entries(&store, &mut log, pg, 1..=4);
        // (As an OSD holds it: loaded from the store, so known to match it.)
        let mut log = PgLog::load(&store, pg, bounds).expect("load");
        let id = |seq| ReqId { client: 7, tid: seq };
        let entry = |epoch: u64, seq: u64| PgLogEntry {
            version: Eversion { epoch, seq },
            reqid: ReqId { client: if epoch == 1 { 7 } else { 8 }, tid: seq },
            object: format!("o{seq}"),
            op_count: 2,
            empties: false,
        };
        // The authority's log: it trimmed to 1'3 and went on with 2'5..=2'10, six entries (one
        // past the bound of five, dropped here too); the member's 1'4 is divergent.
        let auth: Vec<PgLogEntry> = (5..=10).map(|seq| entry(2, seq)).collect();
        let tail = Eversion { epoch: 1, seq: 3 };
        let mut txn = Transaction::new();
        let after = log.write_replacement(&mut txn, pg, &auth, tail, None);
        assert!(matches!(after, DupsAfter::Now(_)), "{after:?}");
        store.commit(txn, shoal_store::Durability::Batch).expect("commit");
        log.replaced(&auth, tail, after);
        for seq in 1..=3 {
            assert_eq!(
                log.lookup_trimmed(&store, pg, &id(seq)).unwrap(),
                Some((Eversion { epoch: 1, seq }, (seq % 3 + 1) as u32)),
                "shared 1'{seq}"
            );
        }
        assert_eq!(log.lookup_trimmed(&store, pg, &id(4)).unwrap(), None, "divergent 1'4 is not kept");
        let passed = ReqId { client: 8, tid: 5 };
        assert_eq!(log.lookup(&passed), None, "past the bound");
        assert_eq!(log.lookup_trimmed(&store, pg, &passed).unwrap(), Some((Eversion { epoch: 2, seq: 5 }, 2)));
        assert_eq!(log.lookup(&ReqId { client: 8, tid: 6 }).map(|(v, _)| v), Some(Eversion { epoch: 2, seq: 6 }));
        assert_eq!(PgLog::load(&store, pg, bounds).expect("load").dups, log.dups, "stored as in memory");
    }

    #[test]
    fn version_keys_sort_like_versions() {
        let vs = [
            Eversion { epoch: 1, seq: 9 },
            Eversion { epoch: 2, seq: 1 },
            Eversion { epoch: 2, seq: 256 },
            Eversion { epoch: 300, seq: 0 },
        ];
        for w in vs.windows(2) {
            assert!(w[0] < w[1]);
            assert!(w[0].to_key() < w[1].to_key());
            assert_eq!(Eversion::from_key(&w[1].to_key()), Some(w[1]));
        }
    }
}
