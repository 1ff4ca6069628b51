//! The OSD's logic without I/O: events in, actions out.
//!
//! [`OsdCore`] owns the OSD's store and its view of the cluster map. The daemon feeds it
//! messages, replication replies, map updates and ticks, and carries out the [`Action`]s it
//! returns (sending frames, reporting stats); the deterministic simulation feeds it the same
//! events from a seeded event queue. Store calls are made directly (they are synchronous and,
//! on the `mem` backend, deterministic); durability is batched: writes are committed with
//! [`Durability::Batch`] (client and replicated writes with [`Durability::Deferred`]) and every
//! action marked `after_sync` must be held back until the driver has called
//! [`ObjectStore::sync`] — one sync covers every write handled in the same batch of events
//! (group commit). A batch that needs no sync ends with [`ObjectStore::settle`], before its
//! actions are carried out, so that nothing leaves the OSD before its writes are in the
//! operating system's hands.
//!
//! Writes: the primary validates the request against its map (it must be the PG's primary),
//! resolves it ([`crate::exec::resolve_writes`]), commits it locally, forwards it to every
//! other acting OSD as a [`RepOp`], and answers the client once every replica acknowledged.
//! Writes to one PG are therefore ordered by the primary (one event at a time), and replicas
//! apply them in the order they arrive on the primary's single connection to them.
//!
//! Every applied write is recorded in its PG's log ([`crate::pglog`]) in the same transaction,
//! on the primary and on each replica, with the version the primary gave it. A PG serves nothing
//! until its primary has peered ([`peering`]): every acting member then holds the authoritative
//! log, so a resend whose request id is in the log is answered from it (once the object is on
//! every acting member), whichever member is primary and whether or not OSDs restarted.
//! Objects a member lacks are recovered and backfilled in the background ([`recovery`]).

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::Arc;

use shoal_map::{ActivationRequest, ClusterMap, Command, OsdId, PgId};
use shoal_proto::mon::OsdStats;
use shoal_proto::osd::{
    Eversion, OsdOp, OsdOpReply, PgInfo, PgList, PgListReply, PgQuery, PgQueryReply, RepOp, RepOpReply, ReqId,
};
use shoal_proto::{ErrorCode, Frame, Message, RemoteError, encode};
use shoal_store::{Durability, ObjectStore, StoreError};
use shoal_util::SummedBytes;

use crate::exec::{
    build_transaction, check_precondition, execute_reads, is_read_only, pg_collection, reads_before_writes,
    resolve_writes, store_error,
};
use crate::pglog::{LogEntry, PgLog};
use crate::pgmeta::PgMeta;

mod clones;
mod heartbeat;
mod peering;
mod purge;
mod recovery;
mod scrub;
mod unfound;
pub use heartbeat::{HeartbeatConfig, MAX_NEIGHBOUR_PINGS};
pub use peering::{MAX_BLOCKED_OPS_PER_PG, MAX_QUEUED_OPS_PER_PG, PEERING_RETRY_TICKS};
use peering::{PgState, Phase, Primary, RevertPull, Role};
pub use purge::{PURGE_OBJECTS_PER_TICK, PURGE_OBJECTS_PER_TICK_BUSY};
pub use recovery::MAX_PART_RESTARTS;
use recovery::Need;
pub use scrub::{MAX_SCRUBS_PER_OSD, SCRUB_CHUNK_BYTES, SCRUB_CHUNK_OBJECTS, SCRUB_MAP_MAX_OBJECTS};

/// Who a reply goes to: an opaque handle the driver maps to a connection.
pub type Token = u64;

/// Requests held while waiting for a newer map before they are refused.
pub const MAX_WAITING_FOR_MAP: usize = 1024;
/// Client reads a primary runs beside its worker at once ([`OsdCore::set_read_offload`]); beyond
/// it a read runs on the worker, as without offloading.
pub const MAX_READS_IN_FLIGHT: usize = 64;
/// Writes in flight to replicas at once; beyond it a write is refused with `Timeout`-free
/// backpressure (`Other`, "busy"), which clients retry.
pub const MAX_PENDING_WRITES: usize = 4096;

/// Something that happened to the OSD.
#[derive(Debug)]
pub enum Event {
    /// A client's request (frame type `OsdOp`). `arrived_ms` is when it arrived, on the clock
    /// of the ticks ([`Event::Tick`]): the request's expiry is counted from it.
    ClientOp { from: Token, request_id: u64, op: OsdOp, data: SummedBytes, data_crc: Option<u32>, arrived_ms: u64 },
    /// A primary's replicated write.
    RepOp { from: Token, request_id: u64, op: RepOp, data: SummedBytes },
    /// A replica's answer to a [`RepOp`] we sent (or the driver's report that sending failed).
    RepReply { from: OsdId, reqid: ReqId, result: Result<RepOpReply, RemoteError> },
    /// A listing request.
    PgList { from: Token, request_id: u64, req: PgList },
    /// A question about what this OSD holds of a PG.
    PgQuery { from: Token, request_id: u64, req: PgQuery },
    /// An operator's command to a PG's primary (scrub, repair, report).
    PgCommand { from: Token, request_id: u64, req: shoal_proto::osd::PgCommand },
    /// A newer map.
    Map(Arc<ClusterMap>),
    /// Time passes; the core reports its statistics.
    Tick { now_ms: u64 },
    /// Time for the peer heartbeats (decision 0062): pings go out to the peers due. Separate
    /// from [`Event::Tick`], which does far more work and comes once a second, so that a ping's
    /// interval and grace can be shorter than a tick.
    Heartbeat { now_ms: u64 },
    /// A request from a peer OSD about a PG (peering, recovery, strays, scrub: message types
    /// 40..=49; backfill scans: 53), decoded by the core.
    PeerMsg { from: Token, request_id: u64, msg_type: u16, payload: bytes::Bytes },
    /// The answer to an [`Action::Peer`] (or the driver's report that it could not be delivered).
    PeerReply { from: OsdId, call: PeerCall, result: Result<Frame, RemoteError> },
    /// The monitors answered an [`Action::MonCommand`]; `epoch`: the map epoch the change is in
    /// (the driver may feed this only once its map reached it).
    MonCommandDone { epoch: Option<u64> },
    /// A read the driver ran beside the worker ([`Action::Read`]) has finished.
    ReadDone { id: u64, result: Result<(Vec<shoal_proto::osd::OpOutput>, crate::exec::ReadData), RemoteError> },
}

/// What a call to a peer was for, so its answer reaches the step that waits for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PeerCall {
    Query {
        pg: PgId,
        attempt: u64,
    },
    Activate {
        pg: PgId,
        attempt: u64,
    },
    Pull {
        pg: PgId,
        attempt: u64,
        object: String,
    },
    Push {
        pg: PgId,
        attempt: u64,
        objects: Vec<String>,
        backfill: bool,
        /// A part of a recovery push (not its last): the object, and where its next part starts.
        next: Option<(String, shoal_proto::osd::PartCursor)>,
    },
    Stray {
        pg: PgId,
    },
    /// A query to a stray that may hold objects the primary cannot find among the members.
    Probe {
        pg: PgId,
        attempt: u64,
    },
    /// A query for the versions of the unfound objects an OSD stores, for an operator's revert
    /// (decision 0066).
    CopiesElsewhere {
        pg: PgId,
        attempt: u64,
    },
    /// A member's scrub map of one chunk.
    Scrub {
        pg: PgId,
        attempt: u64,
    },
    /// A liveness probe (decision 0062, [`heartbeat`]).
    Ping,
    /// A backfill target's answer to which objects it holds at the primary's versions.
    ScanVersions {
        pg: PgId,
        attempt: u64,
        /// The last name the scan covered ([`crate::core::recovery::LAST_NAME`]: the PG's end).
        upto: String,
    },
}

impl Event {
    /// Bytes of object data the event carries.
    pub fn data_len(&self) -> usize {
        match self {
            Event::ClientOp { data, .. } | Event::RepOp { data, .. } => data.len(),
            Event::PeerMsg { payload, .. } => payload.len(),
            _ => 0,
        }
    }

    /// Bytes of object data handling the event moves: what it carries, plus what a client's
    /// reads will return. The worker bounds a batch by this, because the replies of a batch go
    /// out only once the whole batch is handled: bounded by carried data alone, a batch of 64
    /// reads of 4 MiB held 256 MiB of replies and answered the first read only after the last
    /// (a 4 MiB read's p99 at 64 in flight was 4x its mean). A read's length is counted up to
    /// [`READ_COST_MAX_BYTES`]; a read of a whole object of unknown size (`u64::MAX`, which
    /// clients send for small metadata objects, large data being read in ranges) as
    /// [`READ_COST_UNKNOWN_BYTES`].
    pub fn batch_bytes(&self) -> usize {
        let reads = match self {
            Event::ClientOp { op, .. } => op
                .ops
                .iter()
                .map(|o| match o {
                    shoal_proto::osd::ObjOp::Read { len_bytes: u64::MAX, .. } => READ_COST_UNKNOWN_BYTES,
                    shoal_proto::osd::ObjOp::Read { len_bytes, .. } => {
                        usize::try_from(*len_bytes).unwrap_or(usize::MAX).min(READ_COST_MAX_BYTES)
                    }
                    _ => 0,
                })
                .fold(0usize, usize::saturating_add),
            _ => 0,
        };
        self.data_len().saturating_add(reads)
    }
}

/// The most bytes one read counts for in [`Event::batch_bytes`].
pub const READ_COST_MAX_BYTES: usize = 4 << 20;
/// What a read of a whole object of unknown size counts for in [`Event::batch_bytes`].
pub const READ_COST_UNKNOWN_BYTES: usize = 64 << 10;

/// Something the driver must do.
#[derive(Debug)]
pub enum Action {
    /// Send `frame` on the connection `to` (a reply carries its request's id). If `after_sync`,
    /// only once the store has been synced.
    Reply { to: Token, frame: Frame, after_sync: bool },
    /// Send a replicated write to `osd` (at once: the replica's commit overlaps the primary's
    /// sync; the client is answered only after both), and feed its reply, or the failure to
    /// deliver it, back as [`Event::RepReply`].
    Replicate { osd: OsdId, op: RepOp, data: bytes::Bytes, data_crc: Option<u32> },
    /// Send a peering or recovery request to `osd`, on the same ordered link as its replicated
    /// writes, and feed the answer back as [`Event::PeerReply`] with `call`.
    Peer { osd: OsdId, msg_type: u16, payload: Vec<u8>, call: PeerCall },
    /// Ask the monitors to run a command; feed the outcome back as [`Event::MonCommandDone`].
    MonCommand(Command),
    /// Report statistics to the monitors.
    Stats(OsdStats),
    /// Run a client's read on the store beside the worker ([`crate::exec::execute_reads`] with
    /// these arguments) and feed its outcome back as [`Event::ReadDone`]. Only while reads are
    /// offloaded ([`OsdCore::set_read_offload`]).
    Read(ReadJob),
}

/// A client read run beside the worker (see [`Action::Read`]).
#[derive(Debug, Clone)]
pub struct ReadJob {
    pub id: u64,
    pub coll: String,
    pub object: String,
    pub ops: Vec<shoal_proto::osd::ObjOp>,
}

/// A read running beside the worker: what its answer needs.
struct ReadInFlight {
    pg: PgId,
    from: Token,
    request_id: u64,
    op: OsdOp,
    arrived_ms: u64,
    /// The term of the primary role that handed the read off ([`Primary::term`]): a read that
    /// finishes under another term is not answered from what it read (see `read_done`).
    term: u64,
}

struct PendingWrite {
    pg: PgId,
    object: String,
    client: Token,
    request_id: u64,
    epoch_sent: u64,
    waiting: BTreeSet<OsdId>,
    outputs: Vec<shoal_proto::osd::OpOutput>,
    error: Option<RemoteError>,
}

#[derive(Default)]
struct Counters {
    read_ops: u64,
    write_ops: u64,
    read_bytes: u64,
    write_bytes: u64,
    /// Object copies recovered (pulled, pushed) or backfilled.
    recovered_objects: u64,
    /// Needs of `0'0` that peering named with the version of the authority's copy (decision
    /// 0053), since this core started.
    needs_named: u64,
}

/// Safety mechanisms the deterministic simulation can switch off, one at a time, to show that
/// its invariants catch their absence (mutation testing). All `false` in every real OSD: nothing
/// outside tests sets them.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Mutations {
    /// Replicas apply a replicated write even when its `prev` is not their last update.
    pub skip_prev_check: bool,
    /// The primary serves once its members are activated, without the record in the map.
    pub skip_activation_record: bool,
    /// Peering takes the primary's own log as the authority, whatever the others hold.
    pub primary_is_authority: bool,
    /// A PG none of whose record's members is up peers with whoever answers instead of going down.
    pub ignore_down: bool,
    /// Client operations that meet damaged data on the primary fail instead of repairing it first.
    pub no_repair_on_access: bool,
    /// Scrub compares nothing (finds no inconsistency, so repairs nothing).
    pub blind_scrub: bool,
    /// Members accept an activation for an interval their map has left (from a primary cut off
    /// from the monitors) or older than the one they recorded.
    pub accept_stale_activation: bool,
    /// A write to an object being backfilled in parts (or before it in the same range) does not
    /// make the primary start the object over.
    pub keep_stale_parts: bool,
    /// A member its primary has not activated since it (re)started answers pulls from what its
    /// store holds (after a disk replacement: nothing, so "absent").
    pub answer_unactivated_pulls: bool,
    /// A member whose backfill resumes past its cursor is told it lacks nothing up to there
    /// (the writes it missed while away are not compared).
    pub resume_blind: bool,
    /// Backfill sends every object, even to members that held the PG before.
    pub no_backfill_compare: bool,
    /// Backfill keeps objects the member held at the version a scan found, even when the
    /// primary's copy was written since.
    pub keep_rewritten: bool,
    /// A member being backfilled stamps a write's version on a copy past its cursor (one a lost
    /// or refused push never replaced) as on any other.
    pub vouch_past_cursor: bool,
    /// Recovery pushes and pull answers carry an object without its snapshot clones and
    /// directory (and the member applying one removes the companions it holds).
    pub recover_heads_only: bool,
    /// A resend of a write an operator's revert gave up is answered from the PG log as done
    /// (decision 0052), though the revert threw its data away.
    pub answer_given_up_resends: bool,
    /// Peering leaves needs of `0'0` ("whatever the authority holds") as they are instead of
    /// naming the version of the authority's copy.
    pub keep_unnamed_needs: bool,
    /// An operator's revert or delete of unfound objects goes ahead while an OSD that may hold
    /// them is down or a stray has not answered a probe (decision 0052's guard is skipped).
    pub skip_holder_check: bool,
    /// Members backfilled since the PG's activation are never named in its activation record,
    /// and the PG counts as clean without them (decision 0055 undone).
    pub skip_record_extension: bool,
    /// Activation records never name holders (decision 0060 undone): an OSD that held objects a
    /// member lacks is not asked for them unless it makes itself known as a stray.
    pub forget_holders: bool,
    /// An operator's revert keeps a copy holding writes the PG's history rolled back as it keeps
    /// any older copy (decision 0063 undone): a resend of one of those writes is applied to it a
    /// second time.
    pub keep_rolled_back: bool,
    /// A primary lacking a head with no member holding it whole never pulls it from a member
    /// that lacks it only for damage to clones the primary holds (decision 0064 undone).
    pub no_pull_around_damage: bool,
    /// Recovery pushes carry every clone of the head, as before decision 0065.
    pub push_every_clone: bool,
    /// An operator's revert keeps only the primary's own copy, never a newer one another OSD
    /// holds (decision 0066 undone).
    pub revert_primary_copy_only: bool,
    /// An operator's decision to give an unfound head up removes the primary's clones and snap
    /// directory with it, as before decision 0069: members then pushed that copy lose them too.
    pub lose_clones_with_lost_head: bool,
    /// A member pushed the copy an operator's decision keeps removes its missing record at once,
    /// before the decision is logged (decision 0070 undone on the member's side).
    pub decided_push_clears_missing: bool,
    /// The first part of a recovery in parts removes every companion the member holds that it
    /// does not carry, as before the parts covered ranges of them.
    pub first_part_clears_companions: bool,
    /// Members apply pushes sent before their activation in the current interval (from a primary
    /// of an earlier one, cut off from the maps that ended it), as before decision 0073.
    pub accept_stale_pushes: bool,
    /// A primary shares the request ids kept beyond its log with a member it backfills only if
    /// it has the log loaded already (after a restart it may not), as before decision 0074.
    pub share_loaded_dups_only: bool,
    /// A primary shares its dups with a member it backfills as they were before its own log
    /// replacement moved its entries up to the authority's tail into them, as before decision
    /// 0089.
    pub share_dups_before_own_replacement: bool,
    /// An OSD compares only the acting OSDs and their boot epochs to tell a new interval, not
    /// the epoch the interval began at, as before decision 0091.
    pub ignore_interval_since: bool,
    /// A member reports the stored versions of heads only, not of the snapshot directory of a
    /// head removed with clones, as before decision 0075.
    pub head_versions_only: bool,
    /// Writes of a head wait for a backfill cursor that splits it from its clones only as the
    /// primary moved it when sending, not while the push that moved it is unanswered, as before
    /// decision 0076.
    pub split_by_sent_cursor_only: bool,
    /// Peering plans a member that lacks a write which left nothing of its object's name as
    /// missing the object (to be copied from a member that holds it), as before decision 0077.
    pub removals_need_copies: bool,
    /// A write that changes nothing leaves the copy's stored version as it was, as before
    /// decision 0077.
    pub no_stamp_unchanged: bool,
    /// A primary keeps retrying pulls and scrub chunks that a member refuses because it no
    /// longer holds the primary's activation, as before decision 0080.
    pub ignore_lost_activation: bool,
    /// A revert counts an OSD whose answer about copies of unfound objects was lost as
    /// holding none of them, as before decision 0081.
    pub unanswered_copies_count_as_none: bool,
    /// A revert pulls a copy only from within its source's backfill cursor, whatever its
    /// version, as before decision 0082.
    pub revert_pulls_within_cursor_only: bool,
    /// A primary believes a stray's probe about a copy the stray already failed to provide, as
    /// before decision 0083.
    pub believe_failed_holders: bool,
    /// A resend of a trimmed write is answered from the dups although a decision trimmed since
    /// gave it up, as before decision 0084.
    pub forget_trimmed_decisions: bool,
    /// A primary with unfound objects peers again on every new map, as before decision 0085.
    pub repeer_unfound_on_every_map: bool,
    /// An operator's decision waits, like any write, for backfill cursors to pass its head's
    /// clones, as before decision 0086.
    pub decisions_wait_for_split: bool,
    /// A revert asks each OSD about copies of unfound objects once per attempt, not about
    /// objects found unfound after it answered, as before decision 0087.
    pub ask_copies_once_per_attempt: bool,
    /// A backfill chunk's range may reach over an object whose removal is on its way, as
    /// before decision 0088.
    pub backfill_over_removals_in_flight: bool,
    /// A stray whose probe failed is asked again only when something else probes, as before
    /// the amendment of decision 0085.
    pub no_probe_retries: bool,
    /// A member being backfilled answers a vouched pull of a head past its cursor even when the
    /// head's snapshot state names clones it does not hold, as before decision 0099.
    pub pull_heads_without_their_clones: bool,
    /// A copy to revert to that does not fit one message is pulled in parts only when the
    /// primary holds no copy it could keep, as before decision 0066's second amendment: over an
    /// older copy it could keep, the newer copy stays where it is and the revert keeps the older.
    pub revert_in_parts_only_without_a_copy: bool,
    /// A PG clean on a temporary acting set keeps it when placement names the same OSDs in the
    /// same order, as before the forty-second session's fix: the entry stays in the map of a
    /// clean cluster.
    pub keep_temp_equal_to_placement: bool,
}

/// PG `pg`'s log in `logs`, loaded from `store` first if this OSD has not read it since it
/// started (logs are loaded on first use). Takes the fields it needs rather than the core, so
/// that a caller holding a PG's state can still reach the log.
pub(crate) fn loaded_log<'a>(
    logs: &'a mut HashMap<PgId, PgLog>,
    store: &dyn ObjectStore,
    pg: PgId,
    bounds: crate::pglog::LogBounds,
) -> Result<&'a mut PgLog, StoreError> {
    match logs.entry(pg) {
        std::collections::hash_map::Entry::Occupied(e) => Ok(e.into_mut()),
        std::collections::hash_map::Entry::Vacant(e) => PgLog::load(store, pg, bounds).map(|log| e.insert(log)),
    }
}

/// One OSD's state. See the module docs.
pub struct OsdCore {
    id: OsdId,
    store: Arc<dyn ObjectStore>,
    map: Arc<ClusterMap>,
    /// Collections known to exist (cached so a write does not probe the store).
    collections: BTreeSet<String>,
    pending: HashMap<ReqId, PendingWrite>,
    waiting_for_map: VecDeque<Event>,
    /// PG logs, loaded from the store the first time a PG is written here.
    logs: HashMap<PgId, PgLog>,
    /// How long those logs are kept (the same on every OSD).
    log_bounds: crate::pglog::LogBounds,
    /// PG peering records (les, backfill cursor, missing set), loaded on first use.
    metas: HashMap<PgId, PgMeta>,
    /// Every PG this OSD acts for or holds data of, with its peering state.
    pgs: BTreeMap<PgId, PgState>,
    /// Activation records and temporary acting sets waiting to be sent to the monitors.
    pending_records: BTreeMap<PgId, ActivationRequest>,
    pending_temp: BTreeMap<PgId, Vec<OsdId>>,
    /// A command to the monitors is in flight.
    mon_busy: bool,
    /// Strays waiting for their primary's answer.
    strays_asking: BTreeSet<PgId>,
    /// Writes recording an operator's decision on an unfound object this process has issued:
    /// with the map epoch, a request id unique in every PG's history (see `core/unfound.rs`).
    lost_removals: u32,
    /// Whether PG intervals were evaluated against a map yet (the core starts with the map it
    /// booted with; the first map or tick evaluates it, even at the same epoch).
    intervals_known: bool,
    /// Collections of deleted pools still to be emptied and removed, a bounded batch per tick.
    purge: VecDeque<String>,
    /// Client and replicated writes handled since the last tick: purging goes slower while
    /// clients are busy.
    client_ops_since_tick: u64,
    counters: Counters,
    last_tick: Option<(u64, Counters)>,
    mutations: Mutations,
    /// Scrub state of the PGs this OSD leads.
    scrubs: BTreeMap<PgId, scrub::PgScrubState>,
    /// The tick clock at the last tick (scrub schedules, request expiry).
    now_ms: u64,
    /// When each object whose recovery keeps failing was last reported (bounded; see
    /// `recovery::report_stuck`), so that a stuck object is logged once a minute, not each tick.
    stuck_reported: HashMap<(PgId, String), u64>,
    /// Whether client reads run beside the worker ([`OsdCore::set_read_offload`]).
    read_offload: bool,
    next_read_id: u64,
    /// Reads running beside the worker, by id.
    reads: HashMap<u64, ReadInFlight>,
    /// How many of them read each object: a write of the object waits until none does (it
    /// must not change what a read before it in the object's order returns).
    reads_of: HashMap<(PgId, String), u32>,
    /// How many writes of each object this primary applied and its replicas have not all
    /// acknowledged yet: a read of the object waits until none is left, so that no reader sees
    /// a write that may still be lost (decision 0035).
    writes_of: HashMap<(PgId, String), u32>,
    /// The last primary term handed out ([`Primary::term`]).
    last_term: u64,
    /// Pings to peers and their answers (decision 0062).
    heartbeats: heartbeat::Heartbeats,
}

/// Whether a write request only gives space back (removals), and so is served even when a
/// member of the PG is full: that is how users get out of a full cluster.
fn only_removes(ops: &[shoal_proto::osd::ObjOp]) -> bool {
    use shoal_proto::osd::ObjOp;
    ops.iter().all(|o| matches!(o, ObjOp::Remove | ObjOp::RemoveXattr { .. } | ObjOp::OmapRemove { .. }))
}

fn reply_frame<M: Message>(request_id: u64, msg: &M, data: Vec<u8>) -> Frame {
    Frame::new(M::TYPE, request_id, encode(msg, data))
}

impl OsdCore {
    /// A core for OSD `id` on `store`, with the map it booted with.
    pub fn new(id: OsdId, store: Arc<dyn ObjectStore>, map: Arc<ClusterMap>) -> Result<OsdCore, StoreError> {
        let collections = store.list_collections()?.into_iter().collect();
        let mut core = OsdCore {
            id,
            store,
            map,
            collections,
            pending: HashMap::new(),
            waiting_for_map: VecDeque::new(),
            logs: HashMap::new(),
            log_bounds: crate::pglog::LogBounds::default(),
            metas: HashMap::new(),
            pgs: BTreeMap::new(),
            pending_records: BTreeMap::new(),
            pending_temp: BTreeMap::new(),
            mon_busy: false,
            strays_asking: BTreeSet::new(),
            lost_removals: 0,
            intervals_known: false,
            counters: Counters::default(),
            last_tick: None,
            mutations: Mutations::default(),
            purge: VecDeque::new(),
            client_ops_since_tick: 0,
            scrubs: BTreeMap::new(),
            now_ms: 0,
            stuck_reported: HashMap::new(),
            read_offload: false,
            next_read_id: 0,
            reads: HashMap::new(),
            reads_of: HashMap::new(),
            writes_of: HashMap::new(),
            last_term: 0,
            heartbeats: heartbeat::Heartbeats::default(),
        };
        // Pools deleted while this OSD was down (or before a purge finished) are purged now.
        core.queue_orphans();
        Ok(core)
    }

    /// Runs client reads beside the worker: the core asks the driver to run them
    /// ([`Action::Read`]) and answers when it reports back ([`Event::ReadDone`]). For stores
    /// whose reads wait on a device (`block`): one slow read then holds no other request of the
    /// OSD. Order on an object is kept: a write (and everything after it) waits until the reads
    /// of its object that came before it have finished.
    pub fn set_read_offload(&mut self, on: bool) {
        self.read_offload = on;
    }

    /// Keeps PG logs within `bounds` instead of the default (the simulation keeps a few entries,
    /// so that peering meets trimmed logs). Every OSD of a cluster must use the same bounds; set
    /// before the core handles its first event.
    #[doc(hidden)]
    pub fn set_log_bounds(&mut self, bounds: crate::pglog::LogBounds) {
        assert!(self.logs.is_empty(), "log bounds set after logs were loaded");
        self.log_bounds = bounds;
    }

    /// Switches safety mechanisms off (simulation mutation tests only; see [`Mutations`]).
    #[doc(hidden)]
    pub fn set_mutations(&mut self, mutations: Mutations) {
        self.mutations = mutations;
    }

    pub fn id(&self) -> OsdId {
        self.id
    }

    pub fn map(&self) -> &Arc<ClusterMap> {
        &self.map
    }

    pub fn store(&self) -> &Arc<dyn ObjectStore> {
        &self.store
    }

    /// Handles one event, appending the actions it causes to `out`.
    pub fn handle(&mut self, event: Event, out: &mut Vec<Action>) {
        match event {
            event @ Event::ClientOp { .. } => {
                self.client_ops_since_tick += 1;
                let newer_map = matches!(&event, Event::ClientOp { op, .. } if op.epoch > self.map.epoch);
                if newer_map {
                    self.wait_for_map(event, out);
                } else {
                    self.client_op(event, out);
                }
            }
            Event::RepOp { from, request_id, op, data } => {
                self.client_ops_since_tick += 1;
                self.rep_op(from, request_id, op, data, out);
            }
            Event::RepReply { from, reqid, result } => self.rep_reply(from, reqid, result, out),
            Event::PgList { from, request_id, req } => {
                if req.epoch > self.map.epoch {
                    self.wait_for_map(Event::PgList { from, request_id, req }, out);
                } else {
                    self.pg_list(from, request_id, req, out);
                }
            }
            Event::PgQuery { from, request_id, req } => {
                if req.epoch > self.map.epoch {
                    self.wait_for_map(Event::PgQuery { from, request_id, req }, out);
                } else {
                    self.pg_query(from, request_id, &req, out);
                }
            }
            Event::PgCommand { from, request_id, req } => {
                if req.epoch > self.map.epoch {
                    self.wait_for_map(Event::PgCommand { from, request_id, req }, out);
                } else {
                    self.pg_command(from, request_id, req, out);
                }
            }
            Event::Map(map) => {
                if map.epoch > self.map.epoch || !self.intervals_known {
                    let pool_removed = self.map.pools.keys().any(|id| !map.pools.contains_key(id));
                    if map.epoch >= self.map.epoch {
                        self.map = map;
                    }
                    if pool_removed {
                        self.queue_orphans();
                    }
                    self.update_intervals(out);
                    self.check_records(out);
                    self.fail_writes_to_down_replicas(out);
                    let waiting: Vec<Event> = self.waiting_for_map.drain(..).collect();
                    for ev in waiting {
                        self.handle(ev, out);
                    }
                }
            }
            Event::Tick { now_ms } => {
                // The tick clock never runs backwards here (a driver restarted with an older
                // clock would otherwise make waiting requests look younger).
                self.now_ms = self.now_ms.max(now_ms);
                let now_ms = self.now_ms;
                if !self.intervals_known {
                    self.update_intervals(out);
                }
                let busy = std::mem::take(&mut self.client_ops_since_tick) > 0;
                self.purge_step(if busy { PURGE_OBJECTS_PER_TICK_BUSY } else { PURGE_OBJECTS_PER_TICK });
                self.peering_tick(out);
                for pg in self.active_pgs() {
                    self.recover(pg, out);
                }
                self.scrub_tick(out);
                self.ask_strays(out);
                self.flush_mon(out);
                out.push(Action::Stats(self.stats(now_ms)));
            }
            Event::Heartbeat { now_ms } => {
                self.now_ms = self.now_ms.max(now_ms);
                self.heartbeat_tick(out);
            }
            Event::PeerMsg { from, request_id, msg_type, payload } => {
                if Self::peer_msg_epoch(msg_type, &payload) > self.map.epoch {
                    self.wait_for_map(Event::PeerMsg { from, request_id, msg_type, payload }, out);
                } else {
                    self.on_peer_msg(from, request_id, msg_type, payload, out);
                }
            }
            Event::PeerReply { from, call, result } => self.on_peer_reply(from, call, result, out),
            Event::ReadDone { id, result } => self.read_done(id, result, out),
            Event::MonCommandDone { epoch } => {
                if epoch.is_some_and(|e| e > self.map.epoch) {
                    self.wait_for_map(Event::MonCommandDone { epoch }, out);
                } else {
                    self.mon_command_done(out);
                }
            }
        }
    }

    fn wait_for_map(&mut self, event: Event, out: &mut Vec<Action>) {
        if self.waiting_for_map.len() < MAX_WAITING_FOR_MAP {
            self.waiting_for_map.push_back(event);
            return;
        }
        let busy = RemoteError::new(ErrorCode::WrongPrimary, "OSD is behind on the map and its queue is full");
        let epoch = self.map.epoch;
        let (to, frame) = match event {
            Event::ClientOp { from, request_id, .. } => {
                (from, reply_frame(request_id, &OsdOpReply { epoch, result: Err(busy) }, Vec::new()))
            }
            Event::PgList { from, request_id, .. } => {
                (from, reply_frame(request_id, &PgListReply { epoch, result: Err(busy) }, Vec::new()))
            }
            Event::PgQuery { from, request_id, .. } => {
                (from, reply_frame(request_id, &PgQueryReply { epoch, result: Err(busy) }, Vec::new()))
            }
            Event::PgCommand { from, request_id, .. } => {
                let reply = shoal_proto::osd::PgCommandReply { epoch, result: Err(busy) };
                (from, reply_frame(request_id, &reply, Vec::new()))
            }
            Event::PeerMsg { from, request_id, .. } => {
                let ack = shoal_proto::osd::PeerAck { epoch, result: Err(busy) };
                (from, reply_frame(request_id, &ack, Vec::new()))
            }
            // The driver must not lose this one: it unblocks the next command to the monitors.
            Event::MonCommandDone { .. } => return self.mon_command_done(out),
            _ => return,
        };
        out.push(Action::Reply { to, frame, after_sync: false });
    }

    /// Checks that this OSD is the primary of `pg` in its map; returns the acting set.
    fn check_primary(
        &self,
        pool: u32,
        pg_seed: u32,
        object: Option<&str>,
    ) -> Result<(PgId, Vec<OsdId>, u64), RemoteError> {
        let Some(p) = self.map.pools.get(&pool) else {
            return Err(RemoteError::new(ErrorCode::NotFound, format!("pool id {pool} does not exist")));
        };
        let pg = match object {
            Some(name) => {
                let computed = shoal_map::pg_for_object(p.id, p.pg_num, name)
                    .map_err(|e| RemoteError::new(ErrorCode::Invalid, e.to_string()))?;
                if computed.seed != pg_seed {
                    return Err(RemoteError::new(
                        ErrorCode::WrongPrimary,
                        format!("object {name} is in PG {computed}, not {pool}.{pg_seed:x}"),
                    ));
                }
                computed
            }
            None => PgId { pool, seed: pg_seed },
        };
        let acting = self.map.pg_osds(pg).map_err(|e| RemoteError::new(ErrorCode::Other, e.to_string()))?;
        if acting.first() != Some(&self.id) {
            return Err(RemoteError::new(
                ErrorCode::WrongPrimary,
                format!("{} is not the primary of PG {pg} at epoch {}", self.id, self.map.epoch),
            ));
        }
        Ok((pg, acting, p.max_object_bytes))
    }

    /// Where a PG stands for a client operation on this primary: `Ok(())` to serve it now;
    /// otherwise the operation was queued (peering) or refused.
    fn pg_gate(&mut self, pg: PgId, event: Event, out: &mut Vec<Action>) -> Result<Event, ()> {
        let epoch = self.map.epoch;
        let Some(PgState { role: Role::Primary(p), .. }) = self.pgs.get_mut(&pg) else {
            // Not peered here yet (the map that makes this OSD primary is still being handled).
            let Event::ClientOp { from, request_id, .. } = event else { return Err(()) };
            let e = RemoteError::new(ErrorCode::WrongPrimary, format!("PG {pg} is not peered on this OSD yet"));
            let frame = reply_frame(request_id, &OsdOpReply { epoch, result: Err(e) }, Vec::new());
            out.push(Action::Reply { to: from, frame, after_sync: false });
            return Err(());
        };
        let refuse = |why: String| {
            let Event::ClientOp { from, request_id, .. } = &event else { return None };
            let e = RemoteError::new(ErrorCode::Degraded, why);
            Some(Action::Reply {
                to: *from,
                frame: reply_frame(*request_id, &OsdOpReply { epoch, result: Err(e) }, Vec::new()),
                after_sync: false,
            })
        };
        // An operator's decision on unfound objects goes through while backfill runs below
        // min_size: that backfill may be stopped at the very object decided on, and the
        // decision's logged write is what tells a later resend of a write given up from one
        // stored (`given_up_by_decision`). Refused here, it was lost without a word while the
        // object was already removed (simulation seed 169 of `--rot-unacked`).
        let decision = matches!(&event, Event::ClientOp { from, .. } if unfound::is_decision(*from));
        match &p.phase {
            Phase::Active if p.recovery_only && !decision => {
                out.extend(refuse(format!(
                    "PG {pg} is undersized+degraded+peered: backfilling members to reach min_size"
                )));
                Err(())
            }
            Phase::Active => Ok(event),
            Phase::Down => {
                out.extend(refuse(format!("PG {pg} is down: no OSD of its last active interval is up")));
                Err(())
            }
            Phase::Incomplete => {
                out.extend(refuse(format!("PG {pg} is incomplete: no OSD up holds it whole")));
                Err(())
            }
            Phase::Undersized => {
                out.extend(refuse(format!(
                    "PG {pg} is undersized+degraded+peered: fewer complete replicas than min_size"
                )));
                Err(())
            }
            _ if p.queued.len() >= MAX_QUEUED_OPS_PER_PG => {
                out.extend(refuse(format!("PG {pg} is peering and its queue is full")));
                Err(())
            }
            _ => {
                p.queued.push_back(event);
                Err(())
            }
        }
    }

    /// Moves the clock requests' expiries are judged on to `now_ms` (the ticks' clock), if that
    /// is later: the driver calls it before each batch of events, so an expiry is judged as of
    /// the batch that executes the request, not as of the last tick.
    pub fn advance_clock(&mut self, now_ms: u64) {
        self.now_ms = self.now_ms.max(now_ms);
    }

    /// Why `op`, which arrived at `arrived_ms`, may no longer be executed: it was held past
    /// its expiry (see [`OsdOp::expires_in_ms`]). Judged on the clock as the driver last
    /// advanced it (before each batch, and at each tick), so late by at most the batch's own
    /// time, never early.
    fn expired(&self, op: &OsdOp, arrived_ms: u64) -> Option<RemoteError> {
        let limit_ms = op.expires_in_ms?;
        let held_ms = self.now_ms.saturating_sub(arrived_ms);
        (held_ms > limit_ms).then(|| {
            tracing::warn!(object = %op.object, held_ms, limit_ms, "refusing a request held past its expiry");
            RemoteError::new(
                ErrorCode::Timeout,
                format!(
                    "request {} on {:?} waited {held_ms} ms on this OSD, past its expiry of {limit_ms} ms: not applied",
                    op.reqid.tid, op.object
                ),
            )
        })
    }

    /// Whether a client request on `object` must wait behind others of it: something already
    /// waits for the object (order); it writes and reads of the object run beside the worker (a
    /// read that came first must not see it); or it reads and writes of the object are not yet
    /// acknowledged by every replica (it must not see what may still be lost: decision 0035).
    fn must_wait_for_object(&self, pg: PgId, object: &str, read_only: bool) -> bool {
        let queued =
            matches!(self.pgs.get(&pg), Some(PgState { role: Role::Primary(p), .. }) if p.blocked.contains_key(object));
        let running = if read_only { &self.writes_of } else { &self.reads_of };
        queued || (!running.is_empty() && running.contains_key(&(pg, object.to_string())))
    }

    /// Answers a client's read with `result` (run on the worker or beside it). A copy found
    /// damaged is repaired from a member first when the PG has one, and the read runs again.
    fn answer_read(
        &mut self,
        read: ReadInFlight,
        result: Result<(Vec<shoal_proto::osd::OpOutput>, crate::exec::ReadData), RemoteError>,
        out: &mut Vec<Action>,
    ) {
        let ReadInFlight { pg, from, request_id, op, arrived_ms, .. } = read;
        // (A pool of one copy has no other: the error goes to the reader.)
        if let Err(e) = &result
            && e.code == ErrorCode::Corrupt
            && self.copies_elsewhere(pg)
            && !self.mutations.no_repair_on_access
        {
            let event =
                Event::ClientOp { from, request_id, op, data: SummedBytes::default(), data_crc: None, arrived_ms };
            return self.repair_then_retry(pg, event, e, out);
        }
        let (result, read) = match result {
            Ok((outputs, read)) => (Ok(outputs), read),
            Err(e) => (Err(e), crate::exec::ReadData::default()),
        };
        self.counters.read_ops += 1;
        self.counters.read_bytes += read.len_bytes() as u64;
        // The read bytes go out from the store's buffer, by reference, and with the checksum
        // the store joined from the blocks it verified, so nothing reads them again here.
        let reply = OsdOpReply { epoch: self.map.epoch, result };
        let frame = shoal_proto::frame_with_checked_parts(request_id, &reply, read.parts, read.crc);
        out.push(Action::Reply { to: from, frame, after_sync: false });
    }

    /// A read run beside the worker finished: its answer, then what waited for its object.
    fn read_done(
        &mut self,
        id: u64,
        result: Result<(Vec<shoal_proto::osd::OpOutput>, crate::exec::ReadData), RemoteError>,
        out: &mut Vec<Action>,
    ) {
        let Some(read) = self.reads.remove(&id) else {
            debug_assert!(false, "the driver reported read {id}, which is not running");
            return;
        };
        let (pg, object) = (read.pg, read.op.object.clone());
        let key = (pg, object);
        let drained = match self.reads_of.get_mut(&key) {
            Some(n) if *n > 1 => {
                *n -= 1;
                false
            }
            _ => {
                self.reads_of.remove(&key);
                true
            }
        };
        // Answered from what it read only under the primary term that handed it off: after
        // that, this OSD may have applied writes as a replica of another primary (not yet
        // acknowledged, so not to be seen) or re-peered. The request goes back through the front
        // door instead: served again if this OSD still leads the PG, else refused with the
        // primary to ask.
        let term = match self.pgs.get(&pg) {
            Some(PgState { role: Role::Primary(p), .. }) if p.phase == Phase::Active => Some(p.term),
            _ => None,
        };
        if term != Some(read.term) {
            tracing::debug!(%pg, object = %key.1, "a read finished after its PG changed primary term: handled again");
            let ReadInFlight { from, request_id, op, arrived_ms, .. } = read;
            self.handle(
                Event::ClientOp { from, request_id, op, data: SummedBytes::default(), data_crc: None, arrived_ms },
                out,
            );
        } else {
            // Repairs run only where this OSD still leads the PG.
            self.answer_read(read, result, out);
        }
        if drained {
            self.unblock(pg, &key.1, out);
        }
    }

    /// Serves a client's request (an [`Event::ClientOp`]; any other event is ignored), or an
    /// operator's decision on an unfound object, which is then checked for having been refused.
    fn client_op(&mut self, event: Event, out: &mut Vec<Action>) {
        let decision = match &event {
            Event::ClientOp { from, op, .. } if unfound::is_decision(*from) => {
                Some((PgId { pool: op.pool, seed: op.pg }, op.object.clone(), op.reqid))
            }
            _ => None,
        };
        self.serve_client_op(event, out);
        if let Some((pg, object, reqid)) = decision {
            self.decision_settled(pg, &object, reqid);
        }
    }

    fn serve_client_op(&mut self, event: Event, out: &mut Vec<Action>) {
        let Event::ClientOp { from, request_id, op, data, data_crc, arrived_ms } = event else {
            debug_assert!(false, "client_op takes client requests only");
            return;
        };
        let epoch = self.map.epoch;
        let fail = |e: RemoteError| Action::Reply {
            to: from,
            frame: reply_frame(request_id, &OsdOpReply { epoch, result: Err(e) }, Vec::new()),
            after_sync: false,
        };
        // A fenced client instance is refused whatever it asks, as of this OSD's map when the
        // request is served (decision 0092): a request that waited (for peering, an object's
        // recovery, a newer map) passes here again when it is served, so one queued before the
        // fence was known is refused too if it is still waiting when the map arrives. A write
        // already applied before the fence has its effect; its resend is refused like the rest.
        if self.map.is_blocklisted(op.reqid.client) {
            tracing::warn!(client = format_args!("{:016x}", op.reqid.client), object = %op.object, "refusing a request of a blocklisted client");
            return out.push(fail(RemoteError::new(
                ErrorCode::Blocklisted,
                format!(
                    "client instance {:016x} is blocklisted (epoch {epoch}): it was fenced off the cluster, \
                     typically because another server took over its image lock; nothing was applied",
                    op.reqid.client
                ),
            )));
        }
        let (pg, acting, max_object_bytes) = match crate::snaps::check_client_object(&op.object)
            .and_then(|()| self.check_primary(op.pool, op.pg, Some(&op.object)))
        {
            Ok(v) => v,
            Err(e) => return out.push(fail(e)),
        };
        let read_only = match is_read_only(&op.ops) {
            Ok(r) => r,
            Err(e) => return out.push(fail(e)),
        };
        // Served only by an active PG, and only on objects present where the operation needs them.
        let event = Event::ClientOp { from, request_id, op, data, data_crc, arrived_ms };
        let Ok(event) = self.pg_gate(pg, event, out) else { return };
        let Event::ClientOp { op, data, data_crc, arrived_ms, .. } = event else { return };
        if self.pending.contains_key(&op.reqid) && !read_only {
            // A resend of a write still in flight: answer the new connection when it completes.
            if let Some(p) = self.pending.get_mut(&op.reqid) {
                p.client = from;
                p.request_id = request_id;
            }
            return;
        }
        let decision = unfound::is_decision(from);
        let need = match (read_only, decision) {
            (true, _) => Need::Primary,
            (false, true) => Need::Decision,
            (false, false) => Need::All,
        };
        // In the object's order: behind what already waits for the object, and a write behind
        // the reads of it still running beside the worker.
        // An operator's decision does not wait for a cursor to pass its head's clones: backfill
        // waits for the primary's missing objects, the decided one among them, so each would
        // wait for the other for ever. A decision changes no clone: a revert changes nothing,
        // and a removal as lost keeps the clones, which backfill then brings as it would have
        // (decision 0086).
        let waits_for_split = !decision || self.mutations.decisions_wait_for_split;
        let split = !read_only && waits_for_split && self.backfill_splits(pg, &op.object);
        if split
            || !self.object_ready(pg, &op.object, need, out)
            || self.must_wait_for_object(pg, &op.object, read_only)
        {
            let object = op.object.clone();
            if split && let Some(PgState { role: Role::Primary(p), .. }) = self.pgs.get_mut(&pg) {
                p.split_waits.insert(object.clone());
            }
            let event = Event::ClientOp { from, request_id, op, data, data_crc, arrived_ms };
            return self.block_on(pg, &object, event, out);
        }
        let coll = pg_collection(pg);
        if read_only {
            if let Some(e) = self.expired(&op, arrived_ms) {
                return out.push(fail(e));
            }
            let term = self.primary(pg).map_or(0, |p| p.term);
            let read = ReadInFlight { pg, from, request_id, op, arrived_ms, term };
            if self.read_offload && self.reads.len() < MAX_READS_IN_FLIGHT {
                let id = self.next_read_id;
                self.next_read_id += 1;
                let job = ReadJob { id, coll, object: read.op.object.clone(), ops: read.op.ops.clone() };
                *self.reads_of.entry((pg, read.op.object.clone())).or_insert(0) += 1;
                self.reads.insert(id, read);
                return out.push(Action::Read(job));
            }
            let result = execute_reads(&*self.store, &coll, &read.op.object, &read.op.ops);
            return self.answer_read(read, result, out);
        }
        // A resend of a write applied before (by this primary or one before it; peering made the
        // log the same on every acting member, and the object is on all of them): answered from
        // the PG log, never applied twice.
        // A marked resend the log does not know may be older than the log: its request id is
        // then among those of trimmed entries (a few point lookups; new requests skip them).
        let (known, last_update) = match self.log_mut(pg) {
            Ok(log) => (log.lookup(&op.reqid).filter(|_| !unfound::is_decision(from)), log.last_update()),
            Err(e) => return out.push(fail(e)),
        };
        let applied = match (known, self.logs.get(&pg)) {
            (None, Some(log)) if op.resend => match log.lookup_trimmed(&*self.store, pg, &op.reqid) {
                Ok(n) => n,
                Err(e) => return out.push(fail(store_error(&e))),
            },
            (known, _) => known,
        };
        // (A write an operator's revert or deletion gave up is applied again: see
        // `given_up_by_decision`.)
        let given_up = match applied {
            Some(_) if self.mutations.answer_given_up_resends => false,
            Some((version, _)) => match self.given_up_by_decision(pg, version, &op.object) {
                Ok(given_up) => {
                    if given_up {
                        tracing::info!(%pg, object = %op.object, reqid = ?op.reqid, ?version, "a write an operator's revert or deletion gave up is sent again: applying it again");
                    }
                    given_up
                }
                Err(e) => return out.push(fail(e)),
            },
            None => false,
        };
        if let Some((_, op_count)) = applied.filter(|_| !given_up) {
            let outputs = vec![shoal_proto::osd::OpOutput::Done; op_count as usize];
            let frame = reply_frame(request_id, &OsdOpReply { epoch, result: Ok(outputs) }, Vec::new());
            return out.push(Action::Reply { to: from, frame, after_sync: true });
        }
        // Not applied before: past its expiry it never will be (the caller has given up on it).
        if let Some(e) = self.expired(&op, arrived_ms) {
            return out.push(fail(e));
        }
        if last_update.epoch > epoch {
            return out.push(fail(RemoteError::new(
                ErrorCode::WrongPrimary,
                format!("PG {pg} holds a write of epoch {}, newer than this OSD's map ({epoch})", last_update.epoch),
            )));
        }
        let version = Eversion { epoch, seq: last_update.seq + 1 };
        let pool = &self.map.pools[&op.pool];
        if (acting.len() as u32) < pool.min_size {
            return out.push(fail(RemoteError::new(
                ErrorCode::Degraded,
                format!("PG {pg} has {} acting OSDs, below min_size {}", acting.len(), pool.min_size),
            )));
        }
        if let Some(full) = acting.iter().find(|o| self.map.osds.get(o).is_some_and(|i| i.full))
            && !only_removes(&op.ops)
            && !self.within_full_reserve(&op)
        {
            return out.push(fail(RemoteError::new(
                ErrorCode::NoSpace,
                format!(
                    "PG {pg} takes no writes: {full} is full (flagged by the monitors at {}% used); remove objects \
                     or add OSDs",
                    shoal_map::FULL_PERMILLE / 10
                ),
            )));
        }
        if self.pending.len() >= MAX_PENDING_WRITES {
            return out.push(fail(RemoteError::new(ErrorCode::Other, "OSD busy: too many writes in flight")));
        }
        // The reads a write request carries see the object before its writes (exec.rs says why
        // that needs no wait); the writes are resolved without them.
        let has_reads = op.ops.iter().any(|o| !o.is_write());
        let prepared = (|| {
            let read_outputs =
                has_reads.then(|| reads_before_writes(&*self.store, &coll, &op.object, &op.ops)).transpose()?;
            let writes: std::borrow::Cow<'_, [shoal_proto::osd::ObjOp]> = if has_reads {
                std::borrow::Cow::Owned(op.ops.iter().filter(|o| o.is_write()).cloned().collect())
            } else {
                std::borrow::Cow::Borrowed(&op.ops)
            };
            let resolved = resolve_writes(&*self.store, &coll, &op.object, &writes, data.len(), max_object_bytes)?;
            Ok::<_, RemoteError>((read_outputs, resolved))
        })();
        let (read_outputs, (resolved, precondition)) = match prepared {
            Ok(r) => r,
            Err(e)
                if e.code == ErrorCode::Corrupt && self.copies_elsewhere(pg) && !self.mutations.no_repair_on_access =>
            {
                return self.repair_then_retry(
                    pg,
                    Event::ClientOp { from, request_id, op, data, data_crc, arrived_ms },
                    &e,
                    out,
                );
            }
            Err(e) => return out.push(fail(e)),
        };
        let replicas: Vec<OsdId> = acting[1..].to_vec();
        // Backfill targets that have not been sent this object yet get the log entry only.
        let keep_stale_parts = self.mutations.keep_stale_parts;
        let log_only: Vec<bool> = match self.pgs.get_mut(&pg) {
            Some(PgState { role: Role::Primary(p), .. }) => replicas
                .iter()
                .map(|r| p.peers.get_mut(r).is_some_and(|pp| pp.log_only(&op.object, keep_stale_parts)))
                .collect(),
            _ => vec![false; replicas.len()],
        };
        // The replicas' sends and the local commit share one buffer (no copies).
        let copies: Vec<bytes::Bytes> =
            log_only.iter().map(|only| if *only { bytes::Bytes::new() } else { data.bytes().clone() }).collect();
        let data_len = data.len() as u64;
        // Whether the write leaves nothing of the name: a member that lacks it then needs no copy.
        let empties = crate::objver::leaves_name_empty(&*self.store, &coll, &op.object, &resolved);
        let entry =
            LogEntry { version, reqid: op.reqid, object: op.object.clone(), op_count: op.ops.len() as u32, empties };
        // An operator's decision removes its object's missing record with its log entry.
        let decided = decision && self.primary(pg).is_some_and(|p| p.decided.contains(&op.object));
        if let Err(e) = self.commit(pg, &coll, Some(&resolved), data, &entry, decided) {
            if e.code == ErrorCode::Corrupt && self.copies_elsewhere(pg) && !self.mutations.no_repair_on_access {
                // A partial write met damaged data here (nothing was applied, and the commit
                // consumed the data, which is not copied for this rare case): the copy is
                // repaired from a member, and the client, told to retry, resends the write with
                // the same request id, which waits for the repair.
                tracing::warn!(%pg, object = %op.object, error = %e, "write met damaged data: repairing from a member");
                if self.mark_own_missing(pg, &op.object).is_ok() {
                    self.object_ready(pg, &op.object, Need::Primary, out);
                    let why = format!("{}'s copy of {} is being repaired: retry", self.id, op.object);
                    return out.push(fail(RemoteError::new(ErrorCode::Timeout, why)));
                }
            }
            return out.push(fail(e));
        }
        if decided {
            self.decision_committed(pg, &op.object);
        }
        self.counters.write_ops += 1;
        self.counters.write_bytes += data_len;
        self.sources_outside_missed(pg, &op.object);
        let outputs = read_outputs.unwrap_or_else(|| vec![shoal_proto::osd::OpOutput::Done; op.ops.len()]);
        debug_assert_eq!(outputs.len(), op.ops.len(), "one output per operation");
        if replicas.is_empty() {
            let frame = reply_frame(request_id, &OsdOpReply { epoch, result: Ok(outputs) }, Vec::new());
            return out.push(Action::Reply { to: from, frame, after_sync: true });
        }
        for ((osd, copy), only) in replicas.iter().zip(copies).zip(log_only) {
            let rep = RepOp {
                reqid: op.reqid,
                epoch,
                pool: op.pool,
                pg: pg.seed,
                object: op.object.clone(),
                version,
                precondition,
                ops: resolved.clone(),
                op_count: op.ops.len() as u32,
                prev: last_update,
                log_only: only,
                decided,
                empties,
            };
            // A copy with data carries the checksum the data arrived with, when known.
            let crc = if copy.is_empty() { None } else { data_crc };
            out.push(Action::Replicate { osd: *osd, op: rep, data: copy, data_crc: crc });
        }
        *self.writes_of.entry((pg, op.object.clone())).or_insert(0) += 1;
        let pending = PendingWrite {
            pg,
            object: op.object.clone(),
            client: from,
            request_id,
            epoch_sent: epoch,
            waiting: replicas.into_iter().collect(),
            outputs,
            error: None,
        };
        self.pending.insert(op.reqid, pending);
    }

    /// Whether `pg`'s pool keeps copies other than this OSD's. A damaged copy here is then marked
    /// missing and repaired from another, and the request that met it waits for the repair —
    /// for a member to come back when none that is up holds the object (it is unfound until
    /// then) — rather than failing: a client on a PG that lost its other members for a while
    /// (an undersized PG of a pool with `min_size` 1) sees a delay, not an I/O error. A pool of
    /// one copy has nothing to repair from: the error goes to the client.
    fn copies_elsewhere(&self, pg: PgId) -> bool {
        self.map.pools.get(&pg.pool).is_some_and(|pool| pool.size > 1)
    }

    /// A client operation met damaged data in the primary's copy of its object (the store's
    /// checksum caught it): the copy is marked missing and pulled from a member with a good one,
    /// and the operation runs again after that, so the client never sees the error while a good
    /// copy exists.
    fn repair_then_retry(&mut self, pg: PgId, event: Event, error: &RemoteError, out: &mut Vec<Action>) {
        let Event::ClientOp { op, .. } = &event else { return };
        let object = op.object.clone();
        tracing::warn!(%pg, %object, %error, "damaged data in this OSD's copy: repairing it from a member first");
        if let Err(e) = self.mark_own_missing(pg, &object) {
            tracing::error!(%pg, %object, error = %e, "cannot mark a damaged copy for repair");
            let Event::ClientOp { from, request_id, .. } = event else { return };
            let reply = OsdOpReply { epoch: self.map.epoch, result: Err(error.clone()) };
            return out.push(Action::Reply {
                to: from,
                frame: reply_frame(request_id, &reply, Vec::new()),
                after_sync: false,
            });
        }
        if self.object_ready(pg, &object, Need::Primary, out) {
            return self.handle(event, out);
        }
        self.block_on(pg, &object, event, out);
    }

    /// PGs this OSD leads that are active.
    fn active_pgs(&self) -> Vec<PgId> {
        self.pgs
            .iter()
            .filter(|(_, s)| matches!(&s.role, Role::Primary(p) if p.phase == Phase::Active))
            .map(|(pg, _)| *pg)
            .collect()
    }

    /// PG `pg`'s peering record, read from the store on first use.
    fn meta_mut(&mut self, pg: PgId) -> Result<&mut PgMeta, RemoteError> {
        if !self.metas.contains_key(&pg) {
            let meta = PgMeta::load(&*self.store, pg).map_err(|e| store_error(&e))?;
            self.metas.insert(pg, meta);
        }
        self.metas.get_mut(&pg).ok_or_else(|| RemoteError::new(ErrorCode::Other, "PG record vanished"))
    }

    /// PG `pg`'s log, read from the store on first use.
    fn log_mut(&mut self, pg: PgId) -> Result<&mut PgLog, RemoteError> {
        loaded_log(&mut self.logs, &*self.store, pg, self.log_bounds).map_err(|e| store_error(&e))
    }

    /// Applies a resolved write and its PG log entry in one transaction (loading the log if needed).
    /// `resolved` is `None` for a log-only write (the entry without touching the object: a member
    /// being backfilled that has not been sent it yet), and may be empty for a write that changes
    /// nothing (a trim with nothing to trim), which still stamps the copy with its version.
    fn commit(
        &mut self,
        pg: PgId,
        coll: &str,
        resolved: Option<&[shoal_proto::osd::ObjOp]>,
        data: SummedBytes,
        entry: &LogEntry,
        recovered: bool,
    ) -> Result<(), RemoteError> {
        let log_only = resolved.is_none();
        let resolved = resolved.unwrap_or_default();
        let create = !self.collections.contains(coll);
        let mut txn = build_transaction(&*self.store, coll, &entry.object, resolved, data, create)?;
        if recovered {
            PgMeta::write_recovered(&mut txn, pg, &entry.object);
        }
        // A member being backfilled vouches only for its copies up to its cursor (see `stamp`).
        let past_cursor = self
            .metas
            .get(&pg)
            .and_then(|m| m.backfill.as_deref())
            .is_some_and(|cursor| entry.object.as_str() > cursor && !self.mutations.vouch_past_cursor);
        crate::objver::stamp(&mut txn, &*self.store, coll, &entry.object, resolved, entry.version, !past_cursor);
        // A write that changed nothing still makes the copy the write's: without its version, a
        // member holding exactly the content it needs could not be recognised (decision 0077).
        if resolved.is_empty() && !log_only && !past_cursor && !self.mutations.no_stamp_unchanged {
            crate::objver::stamp_unchanged(&mut txn, &*self.store, coll, &entry.object, entry.version);
        }
        let log = self.log_mut(pg)?;
        log.record(&mut txn, pg, entry);
        // Deferred: on a disk-backed store the batch's writes then reach the device together at
        // the sync (or settle) that ends the driver's batch, before any reply leaves.
        self.store.commit(txn, Durability::Deferred).map_err(|e| store_error(&e))?;
        if let Some(log) = self.logs.get_mut(&pg) {
            log.applied(entry);
        }
        if recovered && let Some(meta) = self.metas.get_mut(&pg) {
            meta.recovered(&entry.object);
        }
        if create {
            self.collections.insert(coll.to_string());
        }
        Ok(())
    }

    fn rep_op(&mut self, from: Token, request_id: u64, op: RepOp, data: SummedBytes, out: &mut Vec<Action>) {
        let pg = PgId { pool: op.pool, seed: op.pg };
        let coll = pg_collection(pg);
        let result = self.apply_rep_op(pg, &coll, &op, data);
        if result.is_ok() {
            self.counters.write_ops += 1;
        }
        let reply = RepOpReply { epoch: self.map.epoch, version: op.version, result };
        out.push(Action::Reply { to: from, frame: reply_frame(request_id, &reply, Vec::new()), after_sync: true });
    }

    /// A replica's side of a replicated write. Applied only when this OSD was activated for the
    /// PG in the current interval at or before the write's epoch (a replaced primary's writes are
    /// refused), and only right after the version the primary applied before it (a replica that
    /// missed a write refuses the next, and its primary peers again); a second delivery of the same
    /// write is acknowledged without applying it. A log-only write (this OSD is being backfilled
    /// and has not been sent the object yet) records the entry without touching the object.
    fn apply_rep_op(&mut self, pg: PgId, coll: &str, op: &RepOp, data: SummedBytes) -> Result<(), RemoteError> {
        if pg.pool < self.map.next_pool_id && !self.map.pools.contains_key(&pg.pool) {
            return Err(RemoteError::new(ErrorCode::NotFound, format!("pool id {} has been deleted", pg.pool)));
        }
        let activated_at = match self.pgs.get(&pg) {
            Some(PgState { role: Role::Replica { activated_at: Some(a) }, .. }) => *a,
            _ => {
                return Err(RemoteError::new(
                    ErrorCode::WrongPrimary,
                    format!("{} is not an activated replica of PG {pg} at epoch {}", self.id, self.map.epoch),
                ));
            }
        };
        if op.epoch < activated_at {
            return Err(RemoteError::new(
                ErrorCode::WrongPrimary,
                format!("replicated write of epoch {} to PG {pg} predates its activation at {activated_at}", op.epoch),
            ));
        }
        let log = self.log_mut(pg)?;
        if log.version_of(&op.reqid) == Some(op.version) {
            // Already in the log. That proves the write is here only if the object is not in the
            // missing set: an activation that ran while this write was in flight put its entry
            // in the log and the object in the missing set, and acknowledging now would let the
            // primary acknowledge a write whose data it alone holds. Refused instead: the client
            // resends, and the resend is answered once recovery copied the object here.
            if self.meta_mut(pg)?.missing.contains_key(&op.object) {
                return Err(RemoteError::new(
                    ErrorCode::Degraded,
                    format!("{} of PG {pg} is still being recovered on {}", op.object, self.id),
                ));
            }
            return Ok(());
        }
        let last = log.last_update();
        if op.prev != last && !self.mutations.skip_prev_check {
            return Err(RemoteError::new(
                ErrorCode::WrongPrimary,
                format!(
                    "replicated write {} to PG {pg} follows {}, but this replica's last update is {last}",
                    op.version, op.prev
                ),
            ));
        }
        let entry = LogEntry {
            version: op.version,
            reqid: op.reqid,
            object: op.object.clone(),
            op_count: op.op_count,
            empties: op.empties,
        };
        // An operator's decision removes the missing record of a copy it pushed here before.
        let recovered = op.decided && self.meta_mut(pg)?.missing.contains_key(&op.object);
        if op.log_only {
            return self.commit(pg, coll, None, SummedBytes::default(), &entry, recovered);
        }
        check_precondition(&*self.store, coll, &op.object, op.precondition)?;
        self.commit(pg, coll, Some(&op.ops), data, &entry, recovered)
    }

    /// Fails the replicated writes still waiting for a replica the map now says is down, as a
    /// lost connection to it would. A replica that stops answering without closing its
    /// connection (cut off, stopped, its worker stuck) would otherwise hold them, and every
    /// resend of them, for ever, even once its peers' reports had it marked down (decision
    /// 0062). Failed writes are answered `Timeout`; the clients resend them, and a resend is
    /// answered from the PG log once peering made every member of the new interval hold it.
    fn fail_writes_to_down_replicas(&mut self, out: &mut Vec<Action>) {
        let down = |o: &OsdId| !self.map.osds.get(o).is_some_and(|i| i.up);
        let gone: Vec<(ReqId, OsdId)> = self
            .pending
            .iter()
            .flat_map(|(reqid, p)| p.waiting.iter().filter(|o| down(o)).map(move |o| (*reqid, *o)))
            .collect();
        for (reqid, osd) in gone {
            let why = RemoteError::new(ErrorCode::Timeout, format!("{osd} is down at epoch {}", self.map.epoch));
            self.rep_reply(osd, reqid, Err(why), out);
        }
    }

    fn rep_reply(&mut self, from: OsdId, reqid: ReqId, result: Result<RepOpReply, RemoteError>, out: &mut Vec<Action>) {
        let Some(p) = self.pending.get_mut(&reqid) else { return };
        if !p.waiting.remove(&from) {
            return;
        }
        let err = match result {
            Ok(r) => r.result.err(),
            Err(e) => Some(e),
        };
        if let Some(e) = err {
            p.error.get_or_insert(RemoteError::new(e.code, format!("replica {from}: {}", e.message)));
            // A replica that missed or refused a write no longer mirrors the primary: peer again,
            // which finds what it lacks, before serving more.
            let pg = p.pg;
            if let Some(PgState { role: Role::Primary(pr), .. }) = self.pgs.get(&pg)
                && pr.phase == Phase::Active
            {
                tracing::info!(%pg, replica = %from, error = %e, "replicated write failed: peering again");
                self.start_peering(pg, out);
            }
        }
        let Some(p) = self.pending.get(&reqid) else { return };
        if !p.waiting.is_empty() {
            return;
        }
        let Some(p) = self.pending.remove(&reqid) else { return };
        if unfound::is_decision(p.client) {
            self.decision_answered(p.pg, &p.object);
        }
        let epoch = self.map.epoch.max(p.epoch_sent);
        let result = match p.error {
            // A failed write is reported as a timeout: the client resends it, and the resend is
            // answered from the log once peering made every member hold it.
            None => Ok(p.outputs),
            Some(e) => Err(RemoteError::new(ErrorCode::Timeout, e.message)),
        };
        let frame = reply_frame(p.request_id, &OsdOpReply { epoch, result }, Vec::new());
        out.push(Action::Reply { to: p.client, frame, after_sync: true });
        // The reads of the object that waited for its writes run once none is left. (After a
        // failed write the PG is peering again: they wait for it to become active, where peering
        // decided what the object holds.)
        let key = (p.pg, p.object);
        match self.writes_of.get_mut(&key) {
            Some(n) if *n > 1 => *n -= 1,
            Some(_) => {
                self.writes_of.remove(&key);
                self.unblock(key.0, &key.1, out);
                self.backfill_after_writes(key.0, &key.1, out);
            }
            None => debug_assert!(false, "a pending write of {} was not counted", key.1),
        }
    }

    fn pg_list(&mut self, from: Token, request_id: u64, req: PgList, out: &mut Vec<Action>) {
        let result = self.check_primary(req.pool, req.pg, None).and_then(|(pg, _, _)| {
            let coll = pg_collection(pg);
            if !self.collections.contains(&coll) {
                return Ok((Vec::new(), None));
            }
            let max = req.max.clamp(1, 10_000) as usize;
            let page =
                self.store.list_objects(&coll, &req.prefix, req.cursor.as_deref(), max).map_err(|e| store_error(&e))?;
            // Clones and snap directories are the OSDs' own: listings show heads only (a page may
            // come back shorter than asked; its cursor still moves on). With clones, each
            // companion stands for its head, once (companions sort right after their head).
            let mut names: Vec<String> = Vec::with_capacity(page.objects.len());
            for name in &page.objects {
                if req.with_clones {
                    let head = crate::snaps::head_of(name);
                    if names.last().is_none_or(|last| last != head) {
                        names.push(head.to_string());
                    }
                } else if !crate::snaps::is_companion(name) {
                    names.push(name.clone());
                }
            }
            Ok((names, page.next))
        });
        let reply = PgListReply { epoch: self.map.epoch, result };
        out.push(Action::Reply { to: from, frame: reply_frame(request_id, &reply, Vec::new()), after_sync: false });
    }

    /// What this OSD holds of a PG: its log's newest version and length, and its objects. Any
    /// OSD answers, whether or not the PG maps to it (a former member may still hold data).
    fn pg_query(&mut self, from: Token, request_id: u64, req: &PgQuery, out: &mut Vec<Action>) {
        let pg = PgId { pool: req.pool, seed: req.pg };
        let result = self.pg_info(pg);
        let reply = PgQueryReply { epoch: self.map.epoch, result };
        out.push(Action::Reply { to: from, frame: reply_frame(request_id, &reply, Vec::new()), after_sync: false });
    }

    fn pg_info(&mut self, pg: PgId) -> Result<PgInfo, RemoteError> {
        if self.map.pools.get(&pg.pool).is_none_or(|p| pg.seed >= p.pg_num) {
            return Err(RemoteError::new(
                ErrorCode::NotFound,
                format!("PG {pg} does not exist at epoch {}", self.map.epoch),
            ));
        }
        let (last_update, log_entries) = {
            let log = self.log_mut(pg)?;
            (log.last_update(), log.len() as u32)
        };
        let coll = pg_collection(pg);
        let objects = if self.collections.contains(&coll) {
            self.store.collection_objects(&coll).map_err(|e| store_error(&e))?
        } else {
            0
        };
        Ok(PgInfo { last_update, log_entries, objects, state: self.pg_state(pg) })
    }

    /// Objects this OSD holds of PG `pg` (clones and snapshot directories included, as Ceph
    /// counts them); 0 if it holds none or its store cannot say (the count is for reports only).
    fn pg_objects(&self, pg: PgId) -> u64 {
        let coll = pg_collection(pg);
        if !self.collections.contains(&coll) {
            return 0;
        }
        self.store.collection_objects(&coll).unwrap_or(0)
    }

    /// A write of `object` was applied here and goes to the acting members only: every copy of it
    /// outside the acting set is older from now on (decision 0056). A source that is not acting
    /// (a stray that shared the PG's history at peering) lacks the object from now on, and no
    /// holder holds it at the version needed any more (a backfill target past its cursor gets the
    /// write as a log entry only) — else a copy of this primary's marked missing for damage
    /// later would be pulled from them, rolling this write back.
    fn sources_outside_missed(&mut self, pg: PgId, object: &str) {
        let Some(PgState { role: Role::Primary(p), .. }) = self.pgs.get_mut(&pg) else { return };
        let Primary { acting, sources, holders, .. } = &mut **p;
        let head = crate::snaps::head_of(object);
        for (osd, lacks) in sources.iter_mut() {
            if !acting.contains(osd) && !lacks.contains(head) {
                lacks.insert(head.to_string());
            }
        }
        for holds in holders.values_mut() {
            holds.remove(head);
        }
    }

    /// The state of PG `pg` as this OSD sees it, if it is the PG's primary: `peering`, `down`,
    /// `incomplete`, `undersized+degraded+peered` (`+backfilling`, and `+unfound` when it
    /// lacks objects no member can provide, while backfilling below `min_size`), or `active`
    /// with `+recovering`,
    /// `+backfilling`, `+backfill_toofull` and `+recovery_toofull` (a target refused backfill or
    /// recovery as too full: it waits),
    /// `+undersized+degraded` and `+clean` as they apply.
    #[must_use]
    pub fn pg_state(&self, pg: PgId) -> Option<String> {
        let Some(PgState { role: Role::Primary(p), .. }) = self.pgs.get(&pg) else { return None };
        let size = self.map.pools.get(&pg.pool).map_or(0, |pool| pool.size as usize);
        Some(match &p.phase {
            Phase::Querying | Phase::WaitingTemp | Phase::Activating { .. } | Phase::Recording => "peering".into(),
            Phase::Down => "down".into(),
            Phase::Incomplete => "incomplete".into(),
            Phase::Undersized => "undersized+degraded+peered".into(),
            Phase::Active if p.recovery_only => {
                let mut state = String::from("undersized+degraded+peered+backfilling");
                if p.peers.values().any(|pp| pp.toofull_until_ms.is_some()) {
                    state.push_str("+backfill_toofull");
                }
                // Backfill stops at an object the primary cannot provide: only the operator's
                // decision moves it on, so it must show here too.
                if !p.unfound.is_empty() {
                    state.push_str("+unfound");
                }
                state
            }
            Phase::Active => {
                let own_missing = self.metas.get(&pg).is_some_and(|m| !m.missing.is_empty());
                let recovering = own_missing || p.peers.values().any(|pp| !pp.missing.is_empty());
                let backfilling = p.peers.values().any(|pp| pp.backfill.is_some());
                let mut state = String::from("active");
                if recovering {
                    state.push_str("+recovering");
                }
                if backfilling {
                    state.push_str("+backfilling");
                }
                if p.peers.values().any(|pp| pp.backfill.is_some() && pp.toofull_until_ms.is_some()) {
                    state.push_str("+backfill_toofull");
                }
                if p.peers.values().any(|pp| !pp.missing.is_empty() && pp.toofull_until_ms.is_some()) {
                    state.push_str("+recovery_toofull");
                }
                let complete = 1 + p.peers.values().filter(|pp| pp.backfill.is_none()).count();
                if complete < size {
                    state.push_str("+undersized+degraded");
                } else if !recovering && !backfilling && p.unfound.is_empty() && p.recorded_whole() {
                    // (Not yet recorded whole: a member backfilled since the activation is being
                    // named in the record, decision 0055.)
                    state.push_str("+clean");
                }
                if !p.unfound.is_empty() {
                    state.push_str("+unfound");
                }
                state.push_str(&self.scrub_state_suffix(pg));
                state
            }
        })
    }

    /// PGs this OSD is primary of, by state name.
    pub fn pg_states(&self) -> Vec<(String, u32)> {
        let mut states: BTreeMap<String, u32> = BTreeMap::new();
        for pg in self.pgs.keys() {
            if let Some(state) = self.pg_state(*pg) {
                *states.entry(state).or_default() += 1;
            }
        }
        // PGs mapped here that no OSD can act for are not counted by anyone: count them here on
        // the lowest-numbered OSD that is up, so `shoal status` shows them.
        if self.map.osds.iter().find(|(_, i)| i.up).map(|(o, _)| *o) == Some(self.id) {
            for pool in self.map.pools.values() {
                for seed in 0..pool.pg_num {
                    if self.map.pg_osds(PgId { pool: pool.id, seed }).is_ok_and(|a| a.is_empty()) {
                        *states.entry("inactive".into()).or_default() += 1;
                    }
                }
            }
        }
        states.into_iter().collect()
    }

    /// Needs of "whatever the authority holds" that this core's peering named with the version
    /// of the authority's copy (decision 0053), for tests: shows the simulation reaches them.
    #[must_use]
    pub fn needs_named(&self) -> u64 {
        self.counters.needs_named
    }

    /// PGs this OSD holds data of without acting for them (removed once clean elsewhere).
    #[must_use]
    pub fn strays(&self) -> usize {
        self.pgs.values().filter(|s| matches!(s.role, Role::Stray)).count()
    }

    /// Whether every PG this OSD is primary of is active and clean, and none is inconsistent (a
    /// scrub may be running), for tests and tools.
    #[must_use]
    pub fn all_clean(&self) -> bool {
        self.pgs.keys().all(|pg| self.pg_state(*pg).is_none_or(|s| shoal_proto::osd::state_is_clean(&s)))
    }

    /// Scrubs running or requested and waiting on this OSD (for tests and tools).
    #[must_use]
    pub fn scrubs_pending(&self) -> usize {
        let (running, queued) = self.scrub_counts();
        running + queued
    }

    /// Whether a write to a PG with a full member is one made to free space that the reserve
    /// above the full flag is kept for (decision 0045): marked so by its client, small, and, if
    /// it writes data, this OSD's own store below the failsafe. A request that writes only
    /// xattrs and omap entries needs none of the capacity the flag measures (a store keeps them
    /// in its key-value store, beside the device), so it is taken even from a store that is out
    /// of data space: that is when removals are needed most. A replica checks nothing: what its
    /// primary took, it must apply, and the monitors flag it full at the same threshold.
    fn within_full_reserve(&self, op: &OsdOp) -> bool {
        let written_bytes: u64 = op.ops.iter().map(shoal_proto::osd::ObjOp::written_bytes).sum();
        if !op.frees_space || written_bytes > shoal_proto::osd::FULL_RESERVE_REQUEST_BYTES {
            return false;
        }
        if op.ops.iter().all(|o| o.data_len() == 0) {
            return true;
        }
        // A store that cannot say how full it is counts as past the failsafe.
        self.store
            .usage()
            .is_ok_and(|u| shoal_map::used_permille(u.used_bytes, u.size_bytes) < shoal_map::FULL_FAILSAFE_PERMILLE)
    }

    fn stats(&mut self, now_ms: u64) -> OsdStats {
        let usage = self.store.usage().unwrap_or_default();
        let (r_ops, w_ops, r_b, w_b, rec) = match &self.last_tick {
            Some((then, c)) if now_ms > *then => {
                let secs = (now_ms - then) as f64 / 1000.0;
                (
                    (self.counters.read_ops - c.read_ops) as f64 / secs,
                    (self.counters.write_ops - c.write_ops) as f64 / secs,
                    (self.counters.read_bytes - c.read_bytes) as f64 / secs,
                    (self.counters.write_bytes - c.write_bytes) as f64 / secs,
                    (self.counters.recovered_objects - c.recovered_objects) as f64 / secs,
                )
            }
            _ => (0.0, 0.0, 0.0, 0.0, 0.0),
        };
        let snapshot = Counters {
            read_ops: self.counters.read_ops,
            write_ops: self.counters.write_ops,
            read_bytes: self.counters.read_bytes,
            write_bytes: self.counters.write_bytes,
            recovered_objects: self.counters.recovered_objects,
            needs_named: self.counters.needs_named,
        };
        let (mut degraded, mut misplaced, mut unfound) = (0u64, 0u64, 0u64);
        for (pg, s) in &self.pgs {
            if let Role::Primary(p) = &s.role
                && p.phase == Phase::Active
            {
                let own = self.metas.get(pg).map_or(0, |m| m.missing.len());
                degraded += (own + p.peers.values().map(|pp| pp.missing.len()).sum::<usize>()) as u64;
                // An acting set short of the pool's size (a member down and not replaced,
                // decision 0050) lacks a copy of every object: counted as Ceph counts them.
                let size = self.map.pools.get(&pg.pool).map_or(0, |pool| u64::from(pool.size));
                let shortfall = size.saturating_sub(p.acting.len() as u64);
                if shortfall > 0 {
                    degraded += shortfall * self.pg_objects(*pg);
                }
                misplaced += p.backfill_remaining.values().sum::<u64>();
                unfound += p.unfound.len() as u64;
            }
        }
        self.last_tick = Some((now_ms, snapshot));
        OsdStats {
            osd: self.id,
            map_epoch: self.map.epoch,
            pg_states: self.pg_states(),
            objects: usage.objects,
            used_bytes: usage.used_bytes,
            capacity_bytes: usage.size_bytes,
            read_ops_per_s: r_ops,
            write_ops_per_s: w_ops,
            read_bytes_per_s: r_b,
            write_bytes_per_s: w_b,
            degraded_objects: degraded,
            misplaced_objects: misplaced,
            unfound_objects: unfound,
            recovery_objects_per_s: rec,
            stray_pgs: (self.strays() + self.purge_backlog()) as u64,
            unreachable_peers: self.unreachable_peers(),
        }
    }
}
