//! Messages to and between OSDs (types 32..=63): client operations on objects, replication
//! from a primary to its replicas, and PG listings.

use serde::{Deserialize, Serialize};

use crate::error::RemoteError;
use crate::msg::Message;

/// Identifies a client request across resends: the client's unique id (random per client
/// instance) and its request counter. A primary applies a write with a given id once, and answers
/// a resend with the first outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ReqId {
    pub client: u64,
    pub tid: u64,
}

/// A write's place in its PG's history: the map epoch of the primary that ordered it and a
/// per-PG sequence number that only grows. Versions order by epoch first, so a later primary's
/// writes sort after anything an earlier primary ordered, even one still writing on a stale map.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Eversion {
    pub epoch: u64,
    pub seq: u64,
}

impl Eversion {
    /// Bytes of [`Eversion::to_key`].
    pub const KEY_BYTES: usize = 16;

    /// Big-endian epoch then sequence: byte order equals version order, so a store's key order
    /// is the PG's history order.
    #[must_use]
    pub fn to_key(self) -> [u8; 16] {
        let mut k = [0u8; 16];
        k[..8].copy_from_slice(&self.epoch.to_be_bytes());
        k[8..].copy_from_slice(&self.seq.to_be_bytes());
        k
    }

    /// The version a key made by [`Eversion::to_key`] holds; `None` if it is not 16 bytes.
    #[must_use]
    pub fn from_key(key: &[u8]) -> Option<Eversion> {
        let k: &[u8; 16] = key.try_into().ok()?;
        let (e, s) = k.split_at(8);
        Some(Eversion { epoch: u64::from_be_bytes(e.try_into().ok()?), seq: u64::from_be_bytes(s.try_into().ok()?) })
    }
}

impl std::fmt::Display for Eversion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}'{}", self.epoch, self.seq)
    }
}

/// One operation of a request. Data-carrying operations name a length; their bytes are the
/// request's bulk data, concatenated in operation order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ObjOp {
    /// Creates the object; `exclusive` fails with `Exists` if it is there.
    Create {
        exclusive: bool,
    },
    /// Replaces the object's data (the object is truncated to `len_bytes`).
    WriteFull {
        len_bytes: u64,
    },
    /// Writes at an offset, extending the object if needed.
    Write {
        offset: u64,
        len_bytes: u64,
    },
    /// Writes at the object's current end.
    Append {
        len_bytes: u64,
    },
    Truncate {
        size_bytes: u64,
    },
    Remove,
    /// Reads up to `len_bytes` at `offset` (`u64::MAX`: to the end). The reply's data holds
    /// the bytes of every read, concatenated in operation order.
    Read {
        offset: u64,
        len_bytes: u64,
    },
    Stat,
    SetXattr {
        name: String,
        value: Vec<u8>,
    },
    GetXattr {
        name: String,
    },
    RemoveXattr {
        name: String,
    },
    ListXattrs,
    OmapSet {
        entries: Vec<(Vec<u8>, Vec<u8>)>,
    },
    OmapGet {
        keys: Vec<Vec<u8>>,
    },
    /// Up to `max` entries after `after` (exclusive), in key order.
    OmapList {
        after: Option<Vec<u8>>,
        max: u32,
    },
    OmapRemove {
        keys: Vec<Vec<u8>>,
    },
    /// A guard: the whole request fails with [`crate::ErrorCode::Conflict`], changing nothing,
    /// unless xattr `name` holds `value` (`None`: the xattr or the object is absent). Checked by
    /// the primary against the object's state before the request, at the point the write is
    /// ordered, so a guarded write is a compare-and-swap. Allowed only in writing requests; it
    /// replicates nothing.
    AssertXattr {
        name: String,
        value: Option<Vec<u8>>,
    },
    /// A guard on omap key `key`, as [`ObjOp::AssertXattr`] is on an xattr.
    AssertOmap {
        key: Vec<u8>,
        value: Option<Vec<u8>>,
    },
    /// Makes `len_bytes` at `offset` read as zeros without sending any: nothing happens to a
    /// missing object or past its end, a range reaching the end truncates the object to
    /// `offset`, and a range inside it is overwritten with zeros at the OSD. (Block images'
    /// discard and write-zeroes; the object keeps its xattrs and omap.)
    Zero {
        offset: u64,
        len_bytes: u64,
    },
    /// The snapshot context of a writing request (self-managed snapshots, as block images use
    /// them): `seq` is the newest snapshot id the writer knows, `snaps` the live snapshot ids,
    /// newest first, each at most `seq`. The first write after a snapshot newer than the object's
    /// last one clones the object (data, xattrs, omap) before changing it, in the same
    /// transaction, so reads at that snapshot keep seeing the old state. A modifier: it changes
    /// nothing by itself and may appear once, in writing requests only.
    SnapContext {
        seq: u64,
        snaps: Vec<u64>,
    },
    /// Reads the object as it was at snapshot `snap` (a modifier of a reading request: every
    /// other operation of the request applies to that state). An object that did not exist then
    /// is `NotFound`.
    ReadSnap {
        snap: u64,
    },
    /// Makes the object's state at snapshot `snap` its current state (a head that did not exist
    /// then is removed). With a [`ObjOp::SnapContext`], the current state is cloned first as any
    /// write would.
    SnapRollback {
        snap: u64,
    },
    /// Forgets snapshots no longer live: needs the request's [`ObjOp::SnapContext`], whose `snaps`
    /// are the live ones; every snapshot id at most its `seq` and not among them is dropped from
    /// the object's clones, and clones left serving no snapshot are removed. Never clones. An
    /// object with no snapshot state is left alone.
    SnapTrim,
    /// Lists the object's snapshot state ([`OpOutput::Snaps`]); read-only.
    ListSnaps,
    /// Internal, made by a primary and replicated, refused from clients: copies the head (data,
    /// xattrs, omap) to its clone `id`.
    SnapCloneHead {
        id: u64,
    },
    /// Internal: replaces the head's data, xattrs and omap by those of its clone `id`.
    SnapRestore {
        id: u64,
    },
    /// Internal: removes the head's clone `id`.
    SnapRemoveClone {
        id: u64,
    },
    /// Internal: stores the object's snapshot state (`None`: it has none left) on the head when
    /// `on_head`, else on the snap directory object that keeps it while the head does not exist;
    /// `snapdir_exists` says whether that object exists before this operation.
    SnapsetWrite {
        value: Option<Vec<u8>>,
        on_head: bool,
        snapdir_exists: bool,
    },
}

impl ObjOp {
    /// Whether the operation changes the object (and so must be ordered and replicated).
    #[must_use]
    pub fn is_write(&self) -> bool {
        !matches!(
            self,
            ObjOp::Read { .. }
                | ObjOp::Stat
                | ObjOp::GetXattr { .. }
                | ObjOp::ListXattrs
                | ObjOp::OmapGet { .. }
                | ObjOp::OmapList { .. }
                | ObjOp::ReadSnap { .. }
                | ObjOp::ListSnaps
        )
    }

    /// Whether the operation may ride in a write request: a read of the object's metadata whose
    /// output the write's reply carries (what the object held just before the request's writes).
    /// A resend of a write that was already applied is answered from the PG log, which keeps no
    /// outputs: its reads then answer [`OpOutput::Done`], and the caller must read again.
    #[must_use]
    pub fn reads_beside_writes(&self) -> bool {
        matches!(self, ObjOp::GetXattr { .. } | ObjOp::OmapGet { .. })
    }

    /// Whether clients may not send the operation: it is made by a primary for its replicas.
    #[must_use]
    pub fn is_internal(&self) -> bool {
        matches!(
            self,
            ObjOp::SnapCloneHead { .. }
                | ObjOp::SnapRestore { .. }
                | ObjOp::SnapRemoveClone { .. }
                | ObjOp::SnapsetWrite { .. }
        )
    }

    /// Whether the operation is a guard ([`ObjOp::AssertXattr`], [`ObjOp::AssertOmap`]): it
    /// checks state and changes nothing.
    #[must_use]
    pub fn is_guard(&self) -> bool {
        matches!(self, ObjOp::AssertXattr { .. } | ObjOp::AssertOmap { .. })
    }

    /// Bytes of bulk data the operation consumes from the request.
    #[must_use]
    pub fn data_len(&self) -> u64 {
        match self {
            ObjOp::WriteFull { len_bytes } | ObjOp::Write { len_bytes, .. } | ObjOp::Append { len_bytes } => *len_bytes,
            _ => 0,
        }
    }

    /// Bytes this operation stores if it is a write: its data, or the names and values of the
    /// xattrs and omap entries it sets (what [`FULL_RESERVE_REQUEST_BYTES`] bounds).
    #[must_use]
    pub fn written_bytes(&self) -> u64 {
        match self {
            ObjOp::SetXattr { name, value } => (name.len() + value.len()) as u64,
            ObjOp::OmapSet { entries } => entries.iter().map(|(k, v)| (k.len() + v.len()) as u64).sum(),
            other => other.data_len(),
        }
    }
}

/// The result of one operation, in the order of the request's operations.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum OpOutput {
    Done,
    /// Bytes returned by a read (its data is in the reply's bulk data).
    Read {
        len_bytes: u64,
    },
    Stat {
        size_bytes: u64,
        mtime_ns: i64,
    },
    Xattr(Option<Vec<u8>>),
    Xattrs(Vec<(String, Vec<u8>)>),
    Omap(Vec<(Vec<u8>, Option<Vec<u8>>)>),
    OmapList(Vec<(Vec<u8>, Vec<u8>)>),
    /// The object's snapshot state: the newest snapshot id its writes have seen, whether the
    /// head exists, and its clones (oldest first).
    Snaps {
        seq: u64,
        head_exists: bool,
        clones: Vec<CloneInfo>,
    },
}

/// One clone of an object: its id (the snapshot context `seq` of the write that made it), the
/// snapshots it serves (newest first) and its size.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CloneInfo {
    pub id: u64,
    pub snaps: Vec<u64>,
    pub size_bytes: u64,
}

/// A client's request for one object. Sent to the PG's primary as computed from the client's
/// map at `epoch`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OsdOp {
    pub reqid: ReqId,
    pub epoch: u64,
    pub pool: u32,
    /// The PG seed the client computed; the OSD recomputes it and refuses a mismatch.
    pub pg: u32,
    pub object: String,
    pub ops: Vec<ObjOp>,
    /// The longest the OSD may hold the request before executing it, counted from its arrival
    /// (`None`: no limit). A request that waited longer — queued while its PG peered, held
    /// behind an object's recovery or a newer map — is refused with `Timeout` and changes
    /// nothing, so a caller that gave up on it knows it can never take effect later. Measured on
    /// the OSD's own clock as of the batch of work that would execute it (late by at most that
    /// batch's time, never early); a caller with a hard deadline keeps a margin for that. A write
    /// already applied (a resend answered from the PG log) is answered as applied, whatever its
    /// age.
    pub expires_in_ms: Option<u64>,
    /// Whether this is a resend (the client sent the request before and had no answer): only
    /// then does a primary whose PG log does not know the request id look among the ids of
    /// entries trimmed from the log (decision 0039), so new requests never pay for that lookup.
    pub resend: bool,
    /// Whether the request is part of freeing space (a delete's bookkeeping, a discard, garbage
    /// collection): a primary serves it even while a member of the PG is flagged full, as long as
    /// it writes at most [`FULL_RESERVE_REQUEST_BYTES`] and, if it writes data, the primary's own
    /// store is below the failsafe share of `shoal_map` (decision 0045). Requests that only remove are served
    /// anyway; this is for the small writes that go with removals.
    pub frees_space: bool,
}
impl Message for OsdOp {
    const TYPE: u16 = 32;
}

/// Most bytes (data, xattr and omap names and values) an [`OsdOp::frees_space`] request may write
/// and still be served by a PG with a full member: far more than a delete's bookkeeping needs,
/// far less than the headroom between the full flag and a store that is out of space.
pub const FULL_RESERVE_REQUEST_BYTES: u64 = 64 << 10;

/// The reply to an [`OsdOp`]. On `WrongPrimary` the client refreshes its map to at least
/// `epoch` and resends.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OsdOpReply {
    pub epoch: u64,
    pub result: Result<Vec<OpOutput>, RemoteError>,
}
impl Message for OsdOpReply {
    const TYPE: u16 = 33;
}

/// A write forwarded by a primary to a replica: the same operations, already validated and
/// ordered; the replica applies them durably and acknowledges.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RepOp {
    pub reqid: ReqId,
    pub epoch: u64,
    pub pool: u32,
    pub pg: u32,
    pub object: String,
    /// The write's version, ordered by the primary; replicas apply in this order and record it
    /// in their PG log.
    pub version: Eversion,
    /// The object's state on the primary before `ops`, for writes whose result depends on it.
    pub precondition: Precondition,
    pub ops: Vec<ObjOp>,
    /// Operations in the client's request (the resolved `ops` may be more or fewer: snapshot
    /// clones added, modifiers and no-op zeroing dropped). Recorded in the log, so that any member
    /// that becomes primary answers a resend with one result per operation the client sent.
    pub op_count: u32,
    /// The PG's newest version on the primary before this write: a replica whose log does not end
    /// there missed a write and refuses this one (its primary then peers again).
    pub prev: Eversion,
    /// Record the log entry only: the replica is being backfilled and has not been given this
    /// object yet (backfill will copy it), or the primary pushed the object whole just before.
    pub log_only: bool,
    /// The logged write of an operator's decision on an unfound object: the member's missing
    /// record of it goes with this entry (see [`PgPush::decided`]).
    pub decided: bool,
    /// The write leaves nothing of the object's name on the primary ([`PgLogEntry::empties`]),
    /// recorded with the replica's log entry.
    pub empties: bool,
}

/// What a replica must find before applying a replicated write: the primary resolved the
/// write (an append's offset, a partial overwrite) against this state, so applying it to any
/// other state would make the replica diverge silently. A mismatch is refused instead.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Precondition {
    /// The write replaces the object whole: any state will do.
    Any,
    /// The object did not exist on the primary.
    Absent,
    /// The object existed with this size.
    Size(u64),
}
impl Message for RepOp {
    const TYPE: u16 = 34;
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RepOpReply {
    pub epoch: u64,
    pub version: Eversion,
    pub result: Result<(), RemoteError>,
}
impl Message for RepOpReply {
    const TYPE: u16 = 35;
}

/// Lists objects of one PG, in name order, after `cursor` (exclusive), only those whose names
/// start with `prefix` ("" for all). The reply's cursor is where the next page starts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PgList {
    pub epoch: u64,
    pub pool: u32,
    pub pg: u32,
    pub cursor: Option<String>,
    pub max: u32,
    pub prefix: String,
    /// Also name the objects that exist only as snapshot clones (their head was removed after a
    /// snapshot), once each: what an operation on every snapshot state of an object must visit.
    /// Without it only heads are listed.
    pub with_clones: bool,
}
impl Message for PgList {
    const TYPE: u16 = 36;
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PgListReply {
    pub epoch: u64,
    pub result: Result<(Vec<String>, Option<String>), RemoteError>,
}
impl Message for PgListReply {
    const TYPE: u16 = 37;
}

/// Asks one OSD what it holds of a PG, whether or not it is the PG's primary: for `shoal pg ls`,
/// and the first step of peering (decision 0008).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PgQuery {
    pub epoch: u64,
    pub pool: u32,
    pub pg: u32,
}
impl Message for PgQuery {
    const TYPE: u16 = 38;
}

/// What an OSD holds of a PG.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PgInfo {
    /// The newest write in its PG log (`0'0` if none).
    pub last_update: Eversion,
    /// Entries its PG log keeps.
    pub log_entries: u32,
    /// Objects it holds in the PG (its store's count: no listing).
    pub objects: u64,
    /// The PG's state (`active+clean`, `peering`, `down`, ...) if this OSD is its primary.
    pub state: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PgQueryReply {
    pub epoch: u64,
    pub result: Result<PgInfo, RemoteError>,
}
impl Message for PgQueryReply {
    const TYPE: u16 = 39;
}

/// A PG log entry as peers exchange it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PgLogEntry {
    pub version: Eversion,
    pub reqid: ReqId,
    pub object: String,
    pub op_count: u32,
    /// The write left nothing of the object's name: no head, no snapshot directory, so no
    /// clones either. A member that lacks it needs no copy: it removes what it holds of the name
    /// (decision 0077).
    pub empties: bool,
}

/// Peering's first step: a PG's primary asks a peer what it holds of the PG (its info, log and
/// missing set). Answered once the peer's map reaches `epoch`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeerQuery {
    pub epoch: u64,
    pub pool: u32,
    pub pg: u32,
    /// Objects whose stored versions the primary wants to know ([`PeerState::versions`]): those
    /// it needs at a known version (its own copies found damaged), at most
    /// [`PEER_QUERY_VERSIONS_MAX`].
    pub versions_of: Vec<String>,
}

/// Objects a [`PeerQuery`] asks the stored versions of, at most.
pub const PEER_QUERY_VERSIONS_MAX: usize = 256;
impl Message for PeerQuery {
    const TYPE: u16 = 40;
}

/// What a peer holds of a PG.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct PeerState {
    /// The epoch at which a primary last activated this OSD for the PG (0: never).
    pub les: u64,
    /// `Some(cursor)` while the OSD is being backfilled: objects named after `cursor` may be
    /// missing or stale. `None`: every object in the log's history is here or in `missing`.
    pub backfill: Option<String>,
    /// The PG log, oldest first.
    pub log: Vec<PgLogEntry>,
    /// The version of the newest entry trimmed from that log (`0'0`: none known).
    pub tail: Eversion,
    /// Objects known to be missing or stale here, with the version needed (`0'0`: whatever the
    /// authoritative copy holds).
    pub missing: Vec<(String, Eversion)>,
    /// The stored version (the last write that changed it) of each object the query asked about
    /// that this OSD holds with a recorded version: what a member whose log no longer reaches
    /// that write can still prove it holds.
    pub versions: Vec<(String, Eversion)>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeerInfo {
    pub epoch: u64,
    pub result: Result<PeerState, RemoteError>,
}
impl Message for PeerInfo {
    const TYPE: u16 = 41;
}

/// The primary activates a member for the PG: the member replaces its log with the
/// authoritative one, records its missing set (or that it is to be backfilled) and
/// `last_epoch_started = activated_at`, durably, before answering with a [`PeerAck`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PgActivate {
    pub epoch: u64,
    pub pool: u32,
    pub pg: u32,
    pub activated_at: u64,
    /// The interval the activation is for, as the primary's map has it: each acting OSD (in
    /// order, the primary first) with the epoch it came up at. A member whose map shows another
    /// interval refuses the activation (its sender is a primary of the past).
    pub interval: Vec<(u32, u64)>,
    pub log: Vec<PgLogEntry>,
    /// The authoritative log's tail (the version of its newest trimmed entry).
    pub tail: Eversion,
    pub missing: Vec<(String, Eversion)>,
    /// Objects this member holds that the authoritative history never wrote (divergent writes
    /// rolled back to "absent"): removed, with their clones, in the activation's transaction.
    pub remove: Vec<String>,
    pub backfill: bool,
    /// For a member to be backfilled: the name its backfill goes on after ("": from the first
    /// object, every object sent again). Not empty only for a member that was being backfilled,
    /// whose log shares the authoritative history, and whose own cursor is at least this far
    /// (decision 0048): it keeps what it holds up to there, `missing` and `remove` name only
    /// objects up to there, and it keeps its own dups objects (`dups` is empty).
    pub backfill_after: String,
    /// For a member to be backfilled from the first object: the request ids the primary keeps beyond its log (its
    /// dups objects, decision 0039), which replace the member's, so that a resend older than the
    /// log is still recognised once the member serves. Empty otherwise (a member whose log
    /// overlaps the authority's keeps its own).
    pub dups: Vec<DupsObject>,
}
impl Message for PgActivate {
    const TYPE: u16 = 42;
}

/// One of a PG's dups objects (decision 0039): the request ids of writes trimmed from its log
/// whose versions fall in one numbered range, each key `client be64 | tid be64` with the value
/// `version (16 bytes) | op_count be32`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DupsObject {
    pub number: u64,
    pub entries: Vec<(Vec<u8>, Vec<u8>)>,
}

/// The answer to a [`PgActivate`], a [`PgPush`] or a [`PgStray`] removal.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeerAck {
    pub epoch: u64,
    pub result: Result<(), RemoteError>,
}
impl Message for PeerAck {
    const TYPE: u16 = 43;
}

/// The leading fields shared by the PG messages whose header starts with them ([`PgPull`],
/// [`PgPush`]): read with [`crate::peek`] to route a message before decoding it whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub struct PgHead {
    pub epoch: u64,
    pub pool: u32,
    pub pg: u32,
}

/// The primary asks a peer for one object whole (recovery of an object the primary lacks).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PgPull {
    pub epoch: u64,
    pub pool: u32,
    pub pg: u32,
    pub object: String,
    /// The primary knows, from the peer's log before it activated the peer for backfill, that
    /// the peer holds the object at the version needed: the peer answers from its store although
    /// its backfill has not reached the object (nothing changes an object the primary lacks).
    pub vouched: bool,
    /// Set to pull one part of an object too large for one message, starting there (the
    /// answer's `part` says where it ended); unset, the object is pulled whole.
    pub part: Option<PartCursor>,
    /// Snapshot clones of a head pulled whole that the primary holds, read back whole, at these
    /// versions: the source leaves out each one it holds at the same version (a clone never
    /// changes once made, and carries the version of the write that made it, so an equal
    /// version is an equal clone) and names it in the answer's `kept`. Empty for a part or a
    /// companion pulled alone.
    pub kept: Vec<(String, Eversion)>,
    /// For an operator's revert (decision 0066): the source sends its copy of the head if it
    /// stores exactly this version, even though it records the object missing (an older version
    /// than the PG's log needs, which the primary keeps as the object). Never with `part`.
    pub stale_at: Option<Eversion>,
}
impl Message for PgPull {
    const TYPE: u16 = 44;
}

/// An object whole: its data is the message's bulk data at this copy's place.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObjectCopy {
    pub name: String,
    /// `false`: the object does not exist (the copy removes it).
    pub exists: bool,
    pub size_bytes: u64,
    pub xattrs: Vec<(String, Vec<u8>)>,
    pub omap: Vec<(Vec<u8>, Vec<u8>)>,
    /// The version stored with the object (the last write that changed it; `0'0`: none), which
    /// the copy keeps once it is whole.
    pub version: Eversion,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PgPullReply {
    pub epoch: u64,
    /// The object's copy, then its companions' (snapshot clones move with their head).
    pub result: Result<Vec<ObjectCopy>, RemoteError>,
    /// For a pull of a part: the part the first copy is (the companions after it travel whole
    /// beside the parts, as [`PartCursor`] says).
    pub part: Option<PushPart>,
    /// Clones of the pull's `kept` that the source holds at exactly those versions, left out of
    /// `result`: the primary keeps its own copies. A clone of `kept` the source does not name
    /// here is stale on the primary unless it is among the copies.
    pub kept: Vec<(String, Eversion)>,
}
impl Message for PgPullReply {
    const TYPE: u16 = 45;
}

/// Objects the primary copies to a member (recovery or backfill), their data concatenated in
/// order in the bulk data. With `backfill`, the member also removes its objects in the range
/// that are neither among `objects` nor among `kept`, and records the range's end as its
/// backfill cursor.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PgPush {
    pub epoch: u64,
    pub pool: u32,
    pub pg: u32,
    pub objects: Vec<ObjectCopy>,
    pub backfill: Option<BackfillRange>,
    /// Set when the push is one part of an object too large for one message: see [`PushPart`].
    pub part: Option<PushPart>,
    /// Never with `part`. A backfill chunk: objects in the range the member keeps as it holds
    /// them, each with the version its copy must have (a [`PgScanVersions`] answer said it holds
    /// that version, and the primary's copy still has it; decision 0049). A recovery push of a
    /// head: snapshot clones of it the member keeps (made by writes it applied; decision 0065).
    /// A member whose copy of one is missing or at another version refuses the push whole.
    pub kept: Vec<(String, Eversion)>,
    /// The copy an operator's decision on an unfound object keeps (`mark-unfound-lost`), sent
    /// ahead of the decision's logged write: the member installs it and keeps its missing
    /// record until that write ([`RepOp::decided`]) removes it, so that a decision that is never
    /// logged leaves the object unfound here too, not "held" at a version its copy is not.
    pub decided: bool,
}

/// Where a part of an object sent in parts starts: its data first, from `offset`, then its
/// omap entries in key order, after `omap_after` (`None`: none sent yet). A head recovered in
/// parts also brings its companions (snapshot clones and directory), each whole, in name order
/// beside its own parts, as many to a part as one message carries: those named up to
/// `clones_after` are sent (`None`: none yet).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartCursor {
    pub offset: u64,
    pub omap_after: Option<Vec<u8>>,
    pub clones_after: Option<String>,
}

impl PartCursor {
    /// Whether a part starting here is the object's first.
    #[must_use]
    pub fn is_start(&self) -> bool {
        self.offset == 0 && self.omap_after.is_none() && self.clones_after.is_none()
    }
}

/// One part of an object too large for one message (its data over the backfill chunk, or its
/// xattrs and omap over what one copy carries), sent in order on one link. The part's copy names
/// the whole object's size; the bulk data is its bytes from `at.offset`, and the copy's omap the
/// entries after `at.omap_after` (the data comes first: omap entries only once it is all sent).
/// The first part (`at` the start) replaces the member's copy, with the object's xattrs; later
/// parts extend it. In a backfill push the part's object is the range's last (`upto`): the first
/// part removes the member's other objects in the range, and only the last one moves its backfill
/// cursor to the object, so that a partly sent object stays above the cursor, where nothing
/// trusts it. In a recovery push (or pull), the object stays missing until its last part, and
/// a head's companions travel whole beside its parts (after the part's own bytes), the last part
/// coming only once every one of them is sent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PushPart {
    pub at: PartCursor,
    pub last: bool,
}
impl Message for PgPush {
    const TYPE: u16 = 46;
}

/// The leading fields of a [`PgPush`] header, read in place for routing a push before it is
/// handled (its PG and the names it covers, `peek`): object names and the range borrow from the
/// payload, and the objects' xattrs and omap are read past without being kept, so a push of an
/// object with a large omap is not decoded twice over.
#[derive(Debug, Deserialize)]
pub struct PgPushScope<'a> {
    pub epoch: u64,
    pub pool: u32,
    pub pg: u32,
    #[serde(borrow)]
    pub objects: Vec<ObjectCopyName<'a>>,
    #[serde(borrow)]
    pub backfill: Option<BackfillRangeRef<'a>>,
}

/// An [`ObjectCopy`] as [`PgPushScope`] reads it: the name, the rest read past.
#[derive(Debug, Deserialize)]
pub struct ObjectCopyName<'a> {
    pub name: &'a str,
    _exists: bool,
    _size_bytes: u64,
    #[serde(borrow)]
    _xattrs: Skipped<(&'a str, &'a [u8])>,
    #[serde(borrow)]
    _omap: Skipped<(&'a [u8], &'a [u8])>,
    _version: Eversion,
}

/// A [`BackfillRange`] borrowed from a payload.
#[derive(Debug, Deserialize)]
pub struct BackfillRangeRef<'a> {
    pub after: Option<&'a str>,
    pub upto: Option<&'a str>,
}

/// A sequence read element by element and dropped: nothing is kept or allocated.
#[derive(Debug)]
struct Skipped<T>(std::marker::PhantomData<T>);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Skipped<T> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Each<T>(std::marker::PhantomData<T>);
        impl<'de, T: Deserialize<'de>> serde::de::Visitor<'de> for Each<T> {
            type Value = Skipped<T>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a sequence")
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Skipped<T>, A::Error> {
                while seq.next_element::<T>()?.is_some() {}
                Ok(Skipped(std::marker::PhantomData))
            }
        }
        d.deserialize_seq(Each(std::marker::PhantomData))
    }
}

/// Names in `(after, upto]` (`after: None`: from the first; `upto: None`: to the last).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BackfillRange {
    pub after: Option<String>,
    pub upto: Option<String>,
}

/// An OSD holding a PG it is not acting for asks the PG's primary whether it may remove its copy
/// (yes once the PG is clean without it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PgStray {
    pub epoch: u64,
    pub pool: u32,
    pub pg: u32,
    /// The asking OSD.
    pub osd: shoal_map::OsdId,
}
impl Message for PgStray {
    const TYPE: u16 = 47;
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PgStrayReply {
    pub epoch: u64,
    /// `Ok(true)`: the PG is clean on its acting set; remove the copy.
    pub result: Result<bool, RemoteError>,
}
impl Message for PgStrayReply {
    const TYPE: u16 = 48;
}

/// Whether a PG state a primary reports is `active+clean`, a scrub running on it or not (an
/// inconsistent PG is not clean).
#[must_use]
pub fn state_is_clean(state: &str) -> bool {
    let mut rest = state.strip_prefix("active+clean").unwrap_or("-");
    for suffix in ["+scrubbing", "+deep", "+repair"] {
        rest = rest.strip_prefix(suffix).unwrap_or(rest);
    }
    rest.is_empty()
}

/// What one member holds of one object, as scrub compares it across the PG's members.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScrubObject {
    pub name: String,
    pub size_bytes: u64,
    /// crc32c over the object's xattrs (names and values, in name order).
    pub xattr_digest: u32,
    /// crc32c over the object's omap (keys and values, in key order).
    pub omap_digest: u32,
    /// crc32c of the object's data: deep scrub only (`None` in a light scrub).
    pub data_digest: Option<u32>,
    /// The object could not be read whole here (the store's checksum caught damaged data, or
    /// another store error): what the store said.
    pub read_error: Option<String>,
    /// The version stored with the object (the last write that changed it; `0'0`: none, as
    /// after a copy in parts until its next write).
    pub version: Eversion,
}

/// A PG's primary asks a member for its scrub map of the objects named in `(after, upto]`, as of
/// the PG version `at` (the member refuses, to be asked again, if its log is elsewhere: writes
/// travel the same ordered link, so an active member is normally exactly there).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PgScrub {
    pub epoch: u64,
    pub pool: u32,
    pub pg: u32,
    pub after: Option<String>,
    pub upto: Option<String>,
    pub deep: bool,
    pub at: Eversion,
}
impl Message for PgScrub {
    const TYPE: u16 = 49;
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PgScrubReply {
    pub epoch: u64,
    pub result: Result<Vec<ScrubObject>, RemoteError>,
}
impl Message for PgScrubReply {
    const TYPE: u16 = 50;
}

/// An operator's command to a PG's primary (`shoal pg scrub|deep-scrub|repair|list-inconsistent`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum PgCmd {
    /// Queues a scrub (light, or deep; `repair`: deep, and fix what it finds).
    Scrub { deep: bool, repair: bool },
    /// The PG's scrub state and the inconsistencies its last scrubs found.
    Report,
    /// The objects the primary lacks and no member it knows of can provide (`shoal pg
    /// list-unfound`).
    ListUnfound,
    /// Gives every unfound object up as lost: removed on every member, the removal recorded in
    /// the PG log like a client's (`shoal pg mark-unfound-lost PGID delete`).
    MarkUnfoundLost,
    /// Gives up the newest writes of every unfound object the primary holds an older copy of:
    /// that copy becomes the object on every member, through a logged write (`shoal pg
    /// mark-unfound-lost PGID revert`, decision 0052). Objects it holds no readable copy of stay
    /// unfound.
    RevertUnfound,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PgCommand {
    pub epoch: u64,
    pub pool: u32,
    pub pg: u32,
    pub cmd: PgCmd,
}
impl Message for PgCommand {
    const TYPE: u16 = 51;
}

/// One object whose copies differ, or cannot be read, on the PG's members.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InconsistentObject {
    pub name: String,
    /// The member whose copy is taken as right (`None`: no member has a readable copy).
    pub auth: Option<shoal_map::OsdId>,
    /// Each member whose copy is wrong, with what is wrong (`missing`, `extra`, `size_mismatch`,
    /// `data_digest_mismatch`, `omap_digest_mismatch`, `attr_mismatch`, `version_mismatch`,
    /// `read_error`).
    pub errors: Vec<(shoal_map::OsdId, Vec<String>)>,
}

/// A finished scrub.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScrubSummary {
    pub deep: bool,
    pub repair: bool,
    pub objects: u64,
    /// Objects found inconsistent.
    pub inconsistent: u64,
    /// Objects whose bad copies were queued for repair.
    pub repaired: u64,
}

/// A PG's scrub state on its primary.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScrubReport {
    /// `scrub`, `deep-scrub` or `repair` while one runs.
    pub running: Option<String>,
    /// Requested and waiting for the PG to be clean or for this OSD's scrub slot.
    pub queued: Option<String>,
    /// Scrubs finished since this OSD became the PG's primary.
    pub completed: u64,
    pub last: Option<ScrubSummary>,
    /// Objects found inconsistent and not repaired since.
    pub inconsistent: Vec<InconsistentObject>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum PgCmdOutput {
    /// The scrub is queued on the primary.
    Queued,
    Report(ScrubReport),
    Unfound(UnfoundReport),
    /// The objects given up (their removal is under way through the PG's replicated writes).
    Lost(Vec<String>),
    Reverted(RevertReport),
}

/// What a revert of a PG's unfound objects did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct RevertReport {
    /// Objects reverted, each with the version of the copy kept (its content is now the
    /// object's on every member, under a new version: the rewrite is under way through the PG's
    /// replicated writes).
    pub reverted: Vec<(String, Eversion)>,
    /// Objects left unfound, each with the reason (the primary holds no readable copy).
    pub unfound: Vec<(String, String)>,
}

/// How a PG's primary ends the message of a refusal of an operator's decision on unfound objects
/// that only waits for answers from other OSDs (strays asked whether they hold the objects, OSDs
/// asked which copies they store); its code is [`crate::ErrorCode::TryAgain`]: the same command,
/// repeated shortly, goes ahead.
pub const DECIDE_AGAIN: &str = "decide again in a moment";

/// A PG's unfound objects, as its primary sees them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct UnfoundReport {
    /// Each unfound object with the version the primary needs (`0'0`: whatever the authoritative
    /// copy holds, for a rollback or a damaged copy written before versions were stored).
    pub objects: Vec<(String, Eversion)>,
    /// OSDs outside the acting set that hold or may hold a copy of the PG: strays that said so,
    /// and the holders its activation record names (decision 0060), all asked for the objects;
    /// and those asked and not answered yet.
    pub strays: Vec<shoal_map::OsdId>,
    pub probing: Vec<shoal_map::OsdId>,
    /// For each object of `objects`, in order, what `mark-unfound-lost revert` would do now: keep
    /// a copy at this version (the primary's, or a newer one another OSD reported to an earlier
    /// revert; if it then reads back whole), or why it cannot.
    pub revert: Vec<Result<Eversion, String>>,
    /// Objects an operator gave up or reverted whose decision is not logged yet: the decision
    /// takes effect with its log entry, and is dropped, leaving them unfound again, if the PG
    /// peers before that (decision 0070). Not among `objects`.
    pub deciding: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PgCommandReply {
    pub epoch: u64,
    pub result: Result<PgCmdOutput, RemoteError>,
}
impl Message for PgCommandReply {
    const TYPE: u16 = 52;
}

/// Most objects one [`PgScanVersions`] names.
pub const SCAN_VERSIONS_MAX: usize = 1024;

/// The primary asks a member it backfills which of these objects (the next names past the
/// member's cursor, with the primary's stored versions) it holds at exactly those versions, so
/// that a backfill push can keep them instead of sending them again (decision 0049). Read only:
/// the member changes nothing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PgScanVersions {
    pub epoch: u64,
    pub pool: u32,
    pub pg: u32,
    /// At most [`SCAN_VERSIONS_MAX`], in name order.
    pub objects: Vec<(String, Eversion)>,
}
impl Message for PgScanVersions {
    const TYPE: u16 = 53;
}

/// The answer to a [`PgScanVersions`]: the objects asked about that the member holds at the
/// versions asked, with those versions.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PgScanVersionsReply {
    pub epoch: u64,
    pub result: Result<Vec<(String, Eversion)>, RemoteError>,
}
impl Message for PgScanVersionsReply {
    const TYPE: u16 = 54;
}

/// A liveness probe between OSDs that share PGs (decision 0062), sent on the same ordered link
/// as replicated writes and answered by the peer's worker, so that an answer proves the peer
/// both reachable and handling its work. Answered with a [`PeerAck`], whatever either map says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeerPing {
    /// The sender's map epoch (informational: a ping never waits for a map).
    pub epoch: u64,
}
impl Message for PeerPing {
    const TYPE: u16 = 55;
}

#[cfg(test)]
mod state_tests {
    use super::state_is_clean;

    #[test]
    fn a_scrub_running_keeps_a_pg_clean_and_inconsistency_does_not() {
        for clean in ["active+clean", "active+clean+scrubbing", "active+clean+scrubbing+deep+repair"] {
            assert!(state_is_clean(clean), "{clean}");
        }
        for not in
            ["active+clean+inconsistent", "active+recovering", "peering", "active+clean+scrubbing+inconsistent", ""]
        {
            assert!(!state_is_clean(not), "{not}");
        }
    }
}

#[cfg(test)]
mod push_scope_tests {
    use super::*;

    fn copy(name: &str, xattr_bytes: usize, omap_entries: usize) -> ObjectCopy {
        ObjectCopy {
            name: name.to_string(),
            exists: true,
            size_bytes: 3,
            xattrs: vec![("user.a".into(), vec![7; xattr_bytes]), ("\u{1}snapset".into(), vec![])],
            omap: (0..omap_entries).map(|i| (format!("key{i:05}").into_bytes(), vec![i as u8; 200])).collect(),
            version: Eversion::default(),
        }
    }

    #[test]
    fn a_push_scope_reads_the_names_and_range_of_the_push_as_encoded() {
        let backfill = Some(BackfillRange { after: Some("b".into()), upto: Some("e\u{1}dir".into()) });
        let objects = vec![copy("c", 300, 0), copy("d", 0, 1000), copy("e\u{1}dir", 1, 1)];
        let push =
            PgPush { epoch: 9, pool: 2, pg: 31, objects, backfill, part: None, kept: Vec::new(), decided: false };
        let payload = crate::encode(&push, vec![1, 2, 3, 4, 5, 6, 7, 8, 9]);
        let scope: PgPushScope<'_> = crate::peek(&payload).expect("peek");
        assert_eq!((scope.epoch, scope.pool, scope.pg), (9, 2, 31));
        let names: Vec<&str> = scope.objects.iter().map(|o| o.name).collect();
        assert_eq!(names, ["c", "d", "e\u{1}dir"]);
        let range = scope.backfill.expect("a backfill range");
        assert_eq!((range.after, range.upto), (Some("b"), Some("e\u{1}dir")));

        // A recovery push: no range; an open-ended range reads as such.
        let push = PgPush {
            epoch: 1,
            pool: 1,
            pg: 0,
            objects: vec![copy("x", 1, 2)],
            backfill: None,
            part: None,
            kept: Vec::new(),
            decided: false,
        };
        let payload = crate::encode(&push, Vec::new());
        let scope: PgPushScope<'_> = crate::peek(&payload).expect("peek");
        assert_eq!(scope.objects.iter().map(|o| o.name).collect::<Vec<_>>(), ["x"]);
        assert!(scope.backfill.is_none());
        let open = Some(BackfillRange { after: None, upto: None });
        let push = PgPush {
            epoch: 1,
            pool: 1,
            pg: 0,
            objects: vec![],
            backfill: open,
            part: None,
            kept: Vec::new(),
            decided: false,
        };
        let payload = crate::encode(&push, Vec::new());
        let range = crate::peek::<PgPushScope<'_>>(&payload).expect("peek").backfill.expect("range");
        assert_eq!((range.after, range.upto), (None, None));
    }
}
