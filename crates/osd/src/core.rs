//! The OSD's logic without I/O: events in, actions out.
//!
//! [`OsdCore`] owns the OSD's store and its view of the cluster map. The daemon feeds it
//! messages, replication replies, map updates and ticks, and carries out the [`Action`]s it
//! returns (sending frames, reporting stats); the deterministic simulation feeds it the same
//! events from a seeded event queue. Store calls are made directly (they are synchronous and,
//! on the `mem` backend, deterministic); durability is batched: writes are committed with
//! [`Durability::Batch`] and every action marked `after_sync` must be held back until the
//! driver has called [`ObjectStore::sync`] — one sync covers every write handled in the same
//! batch of events (group commit).
//!
//! Writes: the primary validates the request against its map (it must be the PG's primary),
//! resolves it ([`crate::exec::resolve_writes`]), commits it locally, forwards it to every
//! other acting OSD as a [`RepOp`], and answers the client once every replica acknowledged.
//! Writes to one PG are therefore ordered by the primary (one event at a time), and replicas
//! apply them in the order they arrive on the primary's single connection to them.
//!
//! Every applied write is recorded in its PG's log ([`crate::pglog`]) in the same transaction,
//! on the primary and on each replica, with the version the primary gave it. A resend whose
//! request id is in the log is answered from it, whichever member of the PG receives it and
//! whether or not the OSD restarted in between — unless it is idempotent and this OSD did not see
//! it complete, in which case it is applied again (see `answer_from_log`).

use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};
use std::sync::Arc;

use shoal_map::{ClusterMap, OsdId, PgId};
use shoal_proto::mon::OsdStats;
use shoal_proto::osd::{
    Eversion, OsdOp, OsdOpReply, PG_INFO_MAX_OBJECTS, PgInfo, PgList, PgListReply, PgQuery, PgQueryReply, RepOp,
    RepOpReply, ReqId,
};
use shoal_proto::{ErrorCode, Frame, Message, RemoteError, encode};
use shoal_store::{Durability, ObjectStore, StoreError};

use crate::exec::{
    build_transaction, check_precondition, execute_reads, is_read_only, pg_collection, resolve_writes, store_error,
};
use crate::pglog::{LogEntry, PgLog};

mod purge;
pub use purge::PURGE_OBJECTS_PER_TICK;

/// Who a reply goes to: an opaque handle the driver maps to a connection.
pub type Token = u64;

/// Writes this OSD saw complete on every acting member, remembered (per OSD, oldest forgotten
/// first) so that their resends are answered from the PG log even when they are idempotent.
pub const COMPLETED_ENTRIES: usize = 4096;
/// Requests held while waiting for a newer map before they are refused.
pub const MAX_WAITING_FOR_MAP: usize = 1024;
/// Writes in flight to replicas at once; beyond it a write is refused with `Timeout`-free
/// backpressure (`Other`, "busy"), which clients retry.
pub const MAX_PENDING_WRITES: usize = 4096;

/// Something that happened to the OSD.
#[derive(Debug)]
pub enum Event {
    /// A client's request (frame type `OsdOp`).
    ClientOp { from: Token, request_id: u64, op: OsdOp, data: Vec<u8> },
    /// A primary's replicated write.
    RepOp { from: Token, request_id: u64, op: RepOp, data: Vec<u8> },
    /// A replica's answer to a [`RepOp`] we sent (or the driver's report that sending failed).
    RepReply { from: OsdId, reqid: ReqId, result: Result<RepOpReply, RemoteError> },
    /// A listing request.
    PgList { from: Token, request_id: u64, req: PgList },
    /// A question about what this OSD holds of a PG.
    PgQuery { from: Token, request_id: u64, req: PgQuery },
    /// A newer map.
    Map(Arc<ClusterMap>),
    /// Time passes; the core reports its statistics.
    Tick { now_ms: u64 },
}

impl Event {
    /// Bytes of object data the event carries.
    pub fn data_len(&self) -> usize {
        match self {
            Event::ClientOp { data, .. } | Event::RepOp { data, .. } => data.len(),
            _ => 0,
        }
    }
}

/// Something the driver must do.
#[derive(Debug)]
pub enum Action {
    /// Send `frame` on the connection `to` (a reply carries its request's id). If `after_sync`,
    /// only once the store has been synced.
    Reply { to: Token, frame: Frame, after_sync: bool },
    /// Send a replicated write to `osd` (at once: the replica's commit overlaps the primary's
    /// sync; the client is answered only after both), and feed its reply, or the failure to
    /// deliver it, back as [`Event::RepReply`].
    Replicate { osd: OsdId, op: RepOp, data: Vec<u8> },
    /// Report statistics to the monitors.
    Stats(OsdStats),
}

struct PendingWrite {
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
    /// Writes this primary saw acknowledged by every acting member, in this process's lifetime
    /// (at most [`COMPLETED_ENTRIES`]). See [`answer_from_log`].
    completed: HashSet<ReqId>,
    completed_order: VecDeque<ReqId>,
    /// Collections of deleted pools still to be emptied and removed, a bounded batch per tick.
    purge: VecDeque<String>,
    counters: Counters,
    last_tick: Option<(u64, Counters)>,
}

/// Whether a resent write found in the PG log is answered from it (`true`) or applied again.
///
/// Answering from the log never applies a write twice, but without peering (decision 0008) this
/// OSD cannot know whether every replica got the write when it did not see that happen itself:
/// after a restart, or when it received the write as a replica of a primary that has since been
/// replaced. So: a write it saw complete is answered from the log; otherwise an idempotent request
/// (whole or positioned writes, truncates, xattr and omap changes, non-exclusive creates) is
/// applied again, which also brings replicas that missed it up to date, and a request that must
/// not be applied twice (append, exclusive create, remove) is answered from the log.
fn answer_from_log(known_complete: bool, ops: &[shoal_proto::osd::ObjOp]) -> bool {
    use shoal_proto::osd::ObjOp;
    let idempotent = ops.iter().all(|o| {
        matches!(
            o,
            ObjOp::WriteFull { .. }
                | ObjOp::Write { .. }
                | ObjOp::Truncate { .. }
                | ObjOp::SetXattr { .. }
                | ObjOp::RemoveXattr { .. }
                | ObjOp::OmapSet { .. }
                | ObjOp::OmapRemove { .. }
                | ObjOp::Create { exclusive: false }
        )
    });
    known_complete || !idempotent
}

/// Whether a write request only gives space back (removals), and so is served even when a
/// member of the PG is full: that is how users get out of a full cluster.
fn frees_space(ops: &[shoal_proto::osd::ObjOp]) -> bool {
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
            completed: HashSet::new(),
            completed_order: VecDeque::new(),
            counters: Counters::default(),
            last_tick: None,
            purge: VecDeque::new(),
        };
        // Pools deleted while this OSD was down (or before a purge finished) are purged now.
        core.queue_orphans();
        Ok(core)
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
            Event::ClientOp { from, request_id, op, data } => {
                if op.epoch > self.map.epoch {
                    self.wait_for_map(Event::ClientOp { from, request_id, op, data }, out);
                } else {
                    self.client_op(from, request_id, op, data, out);
                }
            }
            Event::RepOp { from, request_id, op, data } => self.rep_op(from, request_id, op, data, out),
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
            Event::Map(map) => {
                if map.epoch > self.map.epoch {
                    let pool_removed = self.map.pools.keys().any(|id| !map.pools.contains_key(id));
                    self.map = map;
                    if pool_removed {
                        self.queue_orphans();
                    }
                    let waiting: Vec<Event> = self.waiting_for_map.drain(..).collect();
                    for ev in waiting {
                        self.handle(ev, out);
                    }
                }
            }
            Event::Tick { now_ms } => {
                self.purge_step(PURGE_OBJECTS_PER_TICK);
                out.push(Action::Stats(self.stats(now_ms)));
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

    fn client_op(&mut self, from: Token, request_id: u64, op: OsdOp, data: Vec<u8>, out: &mut Vec<Action>) {
        let epoch = self.map.epoch;
        let fail = |e: RemoteError| Action::Reply {
            to: from,
            frame: reply_frame(request_id, &OsdOpReply { epoch, result: Err(e) }, Vec::new()),
            after_sync: false,
        };
        let (pg, acting, max_object_bytes) = match self.check_primary(op.pool, op.pg, Some(&op.object)) {
            Ok(v) => v,
            Err(e) => return out.push(fail(e)),
        };
        let read_only = match is_read_only(&op.ops) {
            Ok(r) => r,
            Err(e) => return out.push(fail(e)),
        };
        let coll = pg_collection(pg);
        if read_only {
            let result = execute_reads(&*self.store, &coll, &op.object, &op.ops);
            let (result, bytes) = match result {
                Ok((outputs, bytes)) => (Ok(outputs), bytes),
                Err(e) => (Err(e), Vec::new()),
            };
            self.counters.read_ops += 1;
            self.counters.read_bytes += bytes.len() as u64;
            let frame = reply_frame(request_id, &OsdOpReply { epoch, result }, bytes);
            return out.push(Action::Reply { to: from, frame, after_sync: false });
        }
        // A resend of a write still in flight: answer the new connection when it completes.
        if let Some(p) = self.pending.get_mut(&op.reqid) {
            p.client = from;
            p.request_id = request_id;
            return;
        }
        // A resend of a write applied here before (possibly by the previous primary, when this
        // OSD was its replica, or before a restart): answered from the PG log when that is safe.
        let known_complete = self.completed.contains(&op.reqid);
        let last_update = match self.log_mut(pg) {
            Ok(log) => match log.lookup(&op.reqid) {
                Some(op_count) if answer_from_log(known_complete, &op.ops) => {
                    let outputs = vec![shoal_proto::osd::OpOutput::Done; op_count as usize];
                    let frame = reply_frame(request_id, &OsdOpReply { epoch, result: Ok(outputs) }, Vec::new());
                    return out.push(Action::Reply { to: from, frame, after_sync: true });
                }
                _ => log.last_update(),
            },
            Err(e) => return out.push(fail(e)),
        };
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
            && !frees_space(&op.ops)
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
        let (resolved, precondition) =
            match resolve_writes(&*self.store, &coll, &op.object, &op.ops, data.len(), max_object_bytes) {
                Ok(r) => r,
                Err(e) => return out.push(fail(e)),
            };
        let replicas: Vec<OsdId> = acting[1..].to_vec();
        // Replicas need their own copy of the data; the local commit consumes the original.
        let copies: Vec<Vec<u8>> = replicas.iter().map(|_| data.clone()).collect();
        let data_len = data.len() as u64;
        let entry = LogEntry { version, reqid: op.reqid, object: op.object.clone(), op_count: op.ops.len() as u32 };
        if let Err(e) = self.commit(pg, &coll, &resolved, data, &entry) {
            return out.push(fail(e));
        }
        self.counters.write_ops += 1;
        self.counters.write_bytes += data_len;
        let outputs = vec![shoal_proto::osd::OpOutput::Done; op.ops.len()];
        if replicas.is_empty() {
            let frame = reply_frame(request_id, &OsdOpReply { epoch, result: Ok(outputs) }, Vec::new());
            self.remember_completed(op.reqid);
            return out.push(Action::Reply { to: from, frame, after_sync: true });
        }
        for (osd, copy) in replicas.iter().zip(copies) {
            let rep = RepOp {
                reqid: op.reqid,
                epoch,
                pool: op.pool,
                pg: pg.seed,
                object: op.object.clone(),
                version,
                precondition,
                ops: resolved.clone(),
            };
            out.push(Action::Replicate { osd: *osd, op: rep, data: copy });
        }
        let pending = PendingWrite {
            client: from,
            request_id,
            epoch_sent: epoch,
            waiting: replicas.into_iter().collect(),
            outputs,
            error: None,
        };
        self.pending.insert(op.reqid, pending);
    }

    /// PG `pg`'s log, read from the store on first use.
    fn log_mut(&mut self, pg: PgId) -> Result<&mut PgLog, RemoteError> {
        if !self.logs.contains_key(&pg) {
            let log = PgLog::load(&*self.store, pg).map_err(|e| store_error(&e))?;
            self.logs.insert(pg, log);
        }
        self.logs.get_mut(&pg).ok_or_else(|| RemoteError::new(ErrorCode::Other, "PG log vanished"))
    }

    /// Applies a resolved write and its PG log entry in one transaction (loading the log if needed).
    fn commit(
        &mut self,
        pg: PgId,
        coll: &str,
        resolved: &[shoal_proto::osd::ObjOp],
        data: Vec<u8>,
        entry: &LogEntry,
    ) -> Result<(), RemoteError> {
        let create = !self.collections.contains(coll);
        let mut txn = build_transaction(coll, &entry.object, resolved, data, create);
        let log = self.log_mut(pg)?;
        log.record(&mut txn, pg, entry);
        self.store.commit(txn, Durability::Batch).map_err(|e| store_error(&e))?;
        if let Some(log) = self.logs.get_mut(&pg) {
            log.applied(entry);
        }
        if create {
            self.collections.insert(coll.to_string());
        }
        Ok(())
    }

    fn remember_completed(&mut self, reqid: ReqId) {
        if !self.completed.insert(reqid) {
            return;
        }
        if self.completed_order.len() >= COMPLETED_ENTRIES
            && let Some(old) = self.completed_order.pop_front()
        {
            self.completed.remove(&old);
        }
        self.completed_order.push_back(reqid);
    }

    fn rep_op(&mut self, from: Token, request_id: u64, op: RepOp, data: Vec<u8>, out: &mut Vec<Action>) {
        let pg = PgId { pool: op.pool, seed: op.pg };
        let coll = pg_collection(pg);
        let result = self.apply_rep_op(pg, &coll, &op, data);
        if result.is_ok() {
            self.counters.write_ops += 1;
        }
        let reply = RepOpReply { epoch: self.map.epoch, version: op.version, result };
        out.push(Action::Reply { to: from, frame: reply_frame(request_id, &reply, Vec::new()), after_sync: true });
    }

    /// A replica's side of a replicated write: applied once (a second delivery of the same
    /// replicated write, same request and same version, is acknowledged without applying it),
    /// only if newer than everything this replica applied to the PG (an older version comes from a
    /// primary that has been replaced), and only on the state the primary resolved it against.
    /// A request the primary applied again (an idempotent resend, under a newer version) is
    /// applied again here too, so that both hold the same state.
    fn apply_rep_op(&mut self, pg: PgId, coll: &str, op: &RepOp, data: Vec<u8>) -> Result<(), RemoteError> {
        if pg.pool < self.map.next_pool_id && !self.map.pools.contains_key(&pg.pool) {
            return Err(RemoteError::new(ErrorCode::NotFound, format!("pool id {} has been deleted", pg.pool)));
        }
        let log = self.log_mut(pg)?;
        if log.version_of(&op.reqid) == Some(op.version) {
            return Ok(());
        }
        let last = log.last_update();
        if op.version <= last {
            return Err(RemoteError::new(
                ErrorCode::WrongPrimary,
                format!(
                    "replicated write {} to PG {pg} is not newer than this replica's last update {last}: its primary \
                     has been replaced",
                    op.version
                ),
            ));
        }
        check_precondition(&*self.store, coll, &op.object, op.precondition)?;
        // The primary resolves each operation into exactly one, so the count is the client's.
        let entry =
            LogEntry { version: op.version, reqid: op.reqid, object: op.object.clone(), op_count: op.ops.len() as u32 };
        self.commit(pg, coll, &op.ops, data, &entry)
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
        }
        if !p.waiting.is_empty() {
            return;
        }
        let Some(p) = self.pending.remove(&reqid) else { return };
        let epoch = self.map.epoch.max(p.epoch_sent);
        let result = match p.error {
            None => Ok(p.outputs),
            Some(e) => Err(e),
        };
        if result.is_ok() {
            self.remember_completed(reqid);
        }
        let frame = reply_frame(p.request_id, &OsdOpReply { epoch, result }, Vec::new());
        out.push(Action::Reply { to: p.client, frame, after_sync: true });
    }

    fn pg_list(&mut self, from: Token, request_id: u64, req: PgList, out: &mut Vec<Action>) {
        let result = self.check_primary(req.pool, req.pg, None).and_then(|(pg, _, _)| {
            let coll = pg_collection(pg);
            if !self.collections.contains(&coll) {
                return Ok((Vec::new(), None));
            }
            let max = req.max.clamp(1, 10_000) as usize;
            self.store
                .list_objects(&coll, "", req.cursor.as_deref(), max)
                .map(|page| (page.objects, page.next))
                .map_err(|e| store_error(&e))
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
        let mut objects = 0u64;
        if self.collections.contains(&coll) {
            let mut after: Option<String> = None;
            // Bounded by PG_INFO_MAX_OBJECTS, a page at a time.
            while objects < PG_INFO_MAX_OBJECTS {
                let page = self.store.list_objects(&coll, "", after.as_deref(), 4096).map_err(|e| store_error(&e))?;
                objects += page.objects.len() as u64;
                match page.next {
                    Some(n) => after = Some(n),
                    None => break,
                }
            }
        }
        Ok(PgInfo { last_update, log_entries, objects: objects.min(PG_INFO_MAX_OBJECTS) })
    }

    /// PGs this OSD is primary of, by state name.
    pub fn pg_states(&self) -> Vec<(String, u32)> {
        let mut states: std::collections::BTreeMap<String, u32> = std::collections::BTreeMap::new();
        for pool in self.map.pools.values() {
            for seed in 0..pool.pg_num {
                let Ok(acting) = self.map.pg_osds(PgId { pool: pool.id, seed }) else { continue };
                if acting.first() != Some(&self.id) {
                    continue;
                }
                *states.entry(pool.acting_state(acting.len()).to_string()).or_default() += 1;
            }
        }
        states.into_iter().collect()
    }

    fn stats(&mut self, now_ms: u64) -> OsdStats {
        let usage = self.store.usage().unwrap_or_default();
        let (r_ops, w_ops, r_b, w_b) = match &self.last_tick {
            Some((then, c)) if now_ms > *then => {
                let secs = (now_ms - then) as f64 / 1000.0;
                (
                    (self.counters.read_ops - c.read_ops) as f64 / secs,
                    (self.counters.write_ops - c.write_ops) as f64 / secs,
                    (self.counters.read_bytes - c.read_bytes) as f64 / secs,
                    (self.counters.write_bytes - c.write_bytes) as f64 / secs,
                )
            }
            _ => (0.0, 0.0, 0.0, 0.0),
        };
        let snapshot = Counters {
            read_ops: self.counters.read_ops,
            write_ops: self.counters.write_ops,
            read_bytes: self.counters.read_bytes,
            write_bytes: self.counters.write_bytes,
        };
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
        }
    }
}
