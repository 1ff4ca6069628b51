//! Scrub and repair on an active, clean PG's primary, and the members' side of them
//! (decision 0011).
//!
//! A scrub walks the PG in name order, a chunk at a time (at most [`SCRUB_CHUNK_OBJECTS`]
//! objects, and about [`SCRUB_CHUNK_BYTES`] of data in a deep scrub). For each chunk the primary
//! builds its own scrub map and, in the same event, asks every replica for theirs as of the PG's
//! current version; the request travels behind every replicated write already sent on the same
//! ordered link, so an active replica answers from exactly the state the primary digested, and
//! one that is elsewhere refuses and the chunk is asked again. The maps are compared
//! ([`crate::scrub::compare`]); inconsistent objects are kept for `shoal pg list-inconsistent`
//! and make the PG `+inconsistent`. A repair marks every bad copy missing, so log recovery
//! copies the authoritative one over it (a pull when the primary's copy is the bad one).
//!
//! Bounds: one scrub at a time per OSD, one chunk in flight per scrub, and the chunk's bounds;
//! client operations are handled between chunks. Scheduled scrubs follow the map's
//! `osd_scrub_interval_secs` and `osd_deep_scrub_interval_secs` (each PG's first one at a
//! pseudo-random point of the interval, so they spread out); requested ones run as soon as the PG
//! is clean and the OSD's slot is free.
//!
//! A client read that meets damaged data on the primary does not fail: the object is marked
//! missing on the primary, pulled from a member with a good copy, and the read served then.

use std::collections::{BTreeMap, BTreeSet};

use shoal_map::{OsdId, PgId};
use shoal_proto::osd::{
    Eversion, InconsistentObject, PgCmd, PgCmdOutput, PgCommand, PgCommandReply, PgScrub, PgScrubReply, ScrubObject,
    ScrubReport, ScrubSummary,
};
use shoal_proto::{ErrorCode, Message, RemoteError, encode};
use shoal_store::{Durability, Transaction};

use super::peering::{PgState, Phase, Role};
use super::{Action, OsdCore, PeerCall, Token, reply_frame};
use crate::copy::list_range;
use crate::exec::{pg_collection, store_error};
use crate::pgmeta::PgMeta;
use crate::scrub::{compare, not_there_yet, scrub_object};

/// Objects in one scrub chunk at most.
pub const SCRUB_CHUNK_OBJECTS: usize = 64;
/// Data a deep scrub reads per chunk, about (a chunk holds at least one object).
pub const SCRUB_CHUNK_BYTES: u64 = 16 << 20;
/// Objects a member puts in one scrub map at most: the primary's chunk plus this many extra
/// objects the member may hold in the range; beyond it the scrub stops with an error.
pub const SCRUB_MAP_MAX_OBJECTS: usize = 4 * SCRUB_CHUNK_OBJECTS;
/// Scrubs running at once on one OSD (Ceph's `osd_max_scrubs`).
pub const MAX_SCRUBS_PER_OSD: usize = 1;
/// Chunks a scrub of a PG without replicas does per tick (with replicas, each member's answer
/// starts the next chunk).
const SOLO_CHUNKS_PER_TICK: usize = 16;
/// Times a scrub asks for a chunk again (members elsewhere, lost messages) before it gives up.
const MAX_CHUNK_RETRIES: u32 = 64;
/// Inconsistent objects remembered per PG; beyond it the oldest are forgotten (the PG stays
/// `+inconsistent` and a repair finds them again).
const MAX_INCONSISTENT_KEPT: usize = 10_000;

/// What kind of scrub.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ScrubKind {
    pub deep: bool,
    pub repair: bool,
}

impl ScrubKind {
    fn name(self) -> &'static str {
        match (self.deep, self.repair) {
            (_, true) => "repair",
            (true, false) => "deep-scrub",
            (false, false) => "scrub",
        }
    }
}

/// One chunk being compared.
struct Chunk {
    upto: Option<String>,
    maps: BTreeMap<OsdId, Vec<ScrubObject>>,
    waiting: BTreeSet<OsdId>,
    ticks: u32,
}

/// A scrub in progress.
struct Run {
    kind: ScrubKind,
    /// The primary's peering attempt it started in; a new one stops it.
    attempt: u64,
    /// Objects up to here are done (`None`: none yet).
    after: Option<String>,
    chunk: Option<Chunk>,
    retries: u32,
    objects: u64,
    inconsistent: u64,
    repaired: u64,
}

/// One PG's scrub state on its primary.
#[derive(Default)]
pub(crate) struct PgScrubState {
    /// When the next scheduled scrubs are due (the OSD's tick clock, ms).
    next_light_ms: u64,
    next_deep_ms: u64,
    requested: Option<ScrubKind>,
    run: Option<Run>,
    completed: u64,
    last: Option<ScrubSummary>,
    inconsistent: BTreeMap<String, InconsistentObject>,
    /// Objects whose bad copies were marked for recovery, with the peering attempt that marks
    /// them (a replica's mark lives in the primary's memory only: if the PG peers again before
    /// the copy is replaced, the repair is asked for again).
    repairing: BTreeMap<String, u64>,
}

/// A point in `[0, interval_ms)` that depends only on the PG: where its first scheduled scrub
/// falls, so the PGs of an OSD do not all scrub at once after it starts.
fn spread(pg: PgId, interval_ms: u64) -> u64 {
    if interval_ms == 0 {
        return 0;
    }
    let h = (u64::from(pg.pool) << 32 | u64::from(pg.seed)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    h % interval_ms
}

impl OsdCore {
    /// `pg`'s scrub state, created with its first scheduled scrubs spread over their intervals
    /// from now.
    fn scrub_state(&mut self, pg: PgId) -> &mut PgScrubState {
        let light_ms = self.map.setting(shoal_map::config::SCRUB_INTERVAL_SECS).saturating_mul(1000);
        let deep_ms = self.map.setting(shoal_map::config::DEEP_SCRUB_INTERVAL_SECS).saturating_mul(1000);
        let now_ms = self.now_ms;
        self.scrubs.entry(pg).or_insert_with(|| PgScrubState {
            next_light_ms: now_ms + spread(pg, light_ms),
            next_deep_ms: now_ms + spread(pg, deep_ms),
            ..PgScrubState::default()
        })
    }

    /// Whether `pg` is led here, active for I/O and clean (so a scrub may start).
    fn scrub_ready(&self, pg: PgId) -> bool {
        let empty = PgMeta::default();
        let own = self.metas.get(&pg).unwrap_or(&empty);
        self.primary(pg).is_some_and(|p| {
            !p.recovery_only
                && p.is_clean(own)
                && p.recovering.is_empty()
                && p.backfilling.is_empty()
                && p.unfound.is_empty()
        })
    }

    /// Whether a running scrub of `pg` may go on: still active in the same attempt, nothing
    /// backfilling or unfound; objects being recovered only if this scrub repairs (they are its
    /// own repairs, of chunks already done).
    fn scrub_may_continue(&self, pg: PgId, attempt: u64, repair: bool) -> bool {
        let empty = PgMeta::default();
        let own = self.metas.get(&pg).unwrap_or(&empty);
        self.primary(pg).is_some_and(|p| {
            p.attempt == attempt
                && p.phase == Phase::Active
                && !p.recovery_only
                && p.unfound.is_empty()
                && p.peers.values().all(|pp| pp.backfill.is_none())
                && (repair || p.is_clean(own))
        })
    }

    /// `+scrubbing`, `+scrubbing+deep`, `+repair` and `+inconsistent` as they apply to `pg`.
    pub(super) fn scrub_state_suffix(&self, pg: PgId) -> String {
        let Some(st) = self.scrubs.get(&pg) else { return String::new() };
        let mut s = String::new();
        if let Some(run) = &st.run {
            s.push_str("+scrubbing");
            if run.kind.deep {
                s.push_str("+deep");
            }
            if run.kind.repair {
                s.push_str("+repair");
            }
        }
        if !st.inconsistent.is_empty() {
            s.push_str("+inconsistent");
        }
        s
    }

    /// Ticks: stops scrubs whose PG changed, asks again for chunks that waited too long, starts
    /// requested and due scrubs within the OSD's bound, and sends the next chunks.
    pub(super) fn scrub_tick(&mut self, out: &mut Vec<Action>) {
        let now_ms = self.now_ms;
        let light_ms = self.map.setting(shoal_map::config::SCRUB_INTERVAL_SECS).saturating_mul(1000);
        let deep_ms = self.map.setting(shoal_map::config::DEEP_SCRUB_INTERVAL_SECS).saturating_mul(1000);
        // What scrub knows of a PG lasts while this OSD leads it, across re-peering.
        let leads: BTreeSet<PgId> =
            self.pgs.iter().filter(|(_, s)| matches!(&s.role, Role::Primary(_))).map(|(pg, _)| *pg).collect();
        self.scrubs.retain(|pg, _| leads.contains(pg));
        let led = self.active_pgs();
        for pg in &led {
            self.scrub_state(*pg);
        }
        self.scrub_check_repairs();
        // Runs that must stop, and chunks to ask again.
        let mut running = 0usize;
        for pg in &led {
            let Some((attempt, kind)) = self.scrubs.get(pg).and_then(|s| s.run.as_ref()).map(|r| (r.attempt, r.kind))
            else {
                continue;
            };
            if !self.scrub_may_continue(*pg, attempt, kind.repair) {
                tracing::info!(%pg, kind = kind.name(), "scrub stopped: the PG changed; it will start again");
                if let Some(st) = self.scrubs.get_mut(pg) {
                    st.run = None;
                    st.requested.get_or_insert(kind);
                }
                continue;
            }
            running += 1;
            if let Some(run) = self.scrubs.get_mut(pg).and_then(|s| s.run.as_mut())
                && let Some(chunk) = &mut run.chunk
            {
                chunk.ticks += 1;
                if chunk.ticks > super::PEERING_RETRY_TICKS {
                    run.chunk = None;
                    run.retries += 1;
                }
            }
        }
        for pg in &led {
            if running >= MAX_SCRUBS_PER_OSD {
                break;
            }
            let Some(st) = self.scrubs.get(pg) else { continue };
            if st.run.is_some() || !self.scrub_ready(*pg) {
                continue;
            }
            let due = if deep_ms > 0 && now_ms >= st.next_deep_ms {
                Some(ScrubKind { deep: true, repair: false })
            } else if light_ms > 0 && now_ms >= st.next_light_ms {
                Some(ScrubKind { deep: false, repair: false })
            } else {
                None
            };
            let kind = st.requested.or(due);
            let Some(kind) = kind else { continue };
            let Some(attempt) = self.primary(*pg).map(|p| p.attempt) else { continue };
            tracing::info!(%pg, kind = kind.name(), "scrub starting");
            if let Some(st) = self.scrubs.get_mut(pg) {
                st.requested = None;
                st.run = Some(Run {
                    kind,
                    attempt,
                    after: None,
                    chunk: None,
                    retries: 0,
                    objects: 0,
                    inconsistent: 0,
                    repaired: 0,
                });
            }
            running += 1;
        }
        for pg in led {
            // A PG without replicas finishes each chunk at once: a few per tick.
            for _ in 0..SOLO_CHUNKS_PER_TICK {
                let idle = self.scrubs.get(&pg).and_then(|s| s.run.as_ref()).is_some_and(|r| r.chunk.is_none());
                if !idle {
                    break;
                }
                self.scrub_chunk(pg, out);
            }
        }
    }

    /// Digests the next chunk here and asks every replica for its map of the same names.
    fn scrub_chunk(&mut self, pg: PgId, out: &mut Vec<Action>) {
        let Some(run) = self.scrubs.get(&pg).and_then(|s| s.run.as_ref()) else { return };
        if run.retries > MAX_CHUNK_RETRIES {
            tracing::warn!(%pg, retries = run.retries, "scrub gave up: members did not answer at the PG's version");
            if let Some(st) = self.scrubs.get_mut(&pg) {
                st.run = None;
            }
            // Members that keep refusing may have left this interval without this primary
            // seeing it (its map jumped over an interval and back): peering settles it.
            if self.primary(pg).is_some() {
                self.start_peering(pg, out);
            }
            return;
        }
        let (kind, attempt, after) = (run.kind, run.attempt, run.after.clone());
        let coll = pg_collection(pg);
        let page = match self.store.list_objects(&coll, "", after.as_deref(), SCRUB_CHUNK_OBJECTS) {
            Ok(page) => page,
            Err(shoal_store::StoreError::NoSuchCollection(_)) => shoal_store::ListPage::default(),
            Err(e) => {
                tracing::error!(%pg, error = %e, "listing for scrub failed; scrub stopped");
                if let Some(st) = self.scrubs.get_mut(&pg) {
                    st.run = None;
                }
                return;
            }
        };
        let mut local = Vec::new();
        let mut bytes = 0u64;
        let mut upto: Option<String> = None;
        let total = page.objects.len();
        for (i, name) in page.objects.into_iter().enumerate() {
            match scrub_object(&*self.store, &coll, &name, kind.deep) {
                Ok(Some(entry)) => {
                    bytes += entry.size_bytes;
                    local.push(entry);
                }
                Ok(None) => {}
                Err(e) => {
                    tracing::error!(%pg, object = %name, error = %e, "scrub could not read an object; scrub stopped");
                    if let Some(st) = self.scrubs.get_mut(&pg) {
                        st.run = None;
                    }
                    return;
                }
            }
            let last = i + 1 == total;
            if (kind.deep && bytes >= SCRUB_CHUNK_BYTES && !last) || (last && page.next.is_some()) {
                upto = Some(name);
                break;
            }
        }
        let at = match self.log_mut(pg) {
            Ok(log) => log.last_update(),
            Err(e) => return tracing::error!(%pg, error = %e, "cannot read the PG log to scrub"),
        };
        let replicas: Vec<OsdId> =
            self.primary(pg).and_then(|p| p.acting.get(1..)).map(<[OsdId]>::to_vec).unwrap_or_default();
        let me = self.id;
        let epoch = self.map.epoch;
        for osd in &replicas {
            let req = PgScrub {
                epoch,
                pool: pg.pool,
                pg: pg.seed,
                after: after.clone(),
                upto: upto.clone(),
                deep: kind.deep,
                at,
            };
            out.push(Action::Peer {
                osd: *osd,
                msg_type: PgScrub::TYPE,
                payload: encode(&req, Vec::new()),
                call: PeerCall::Scrub { pg, attempt },
            });
        }
        if let Some(run) = self.scrubs.get_mut(&pg).and_then(|s| s.run.as_mut()) {
            run.chunk = Some(Chunk {
                upto,
                maps: BTreeMap::from([(me, local)]),
                waiting: replicas.into_iter().collect(),
                ticks: 0,
            });
        }
        self.scrub_chunk_maybe_done(pg, false, out);
    }

    /// A replica's scrub map (or refusal).
    pub(super) fn scrub_answered(
        &mut self,
        pg: PgId,
        attempt: u64,
        from: OsdId,
        result: Result<Vec<ScrubObject>, RemoteError>,
        out: &mut Vec<Action>,
    ) {
        let lost = result.as_ref().err().is_some_and(|e| self.activation_lost(pg, from, e));
        let Some(run) = self.scrubs.get_mut(&pg).and_then(|s| s.run.as_mut()) else { return };
        if run.attempt != attempt {
            return;
        }
        let Some(chunk) = run.chunk.as_mut() else { return };
        if !chunk.waiting.remove(&from) {
            return;
        }
        match result {
            Err(e) if lost => {
                // The member took an interval this primary did not see: peering again
                // activates it, and the chunk is asked again once the PG is active (decision
                // 0080).
                tracing::info!(%pg, member = %from, error = %e, "a member no longer holds this primary's activation: peering again");
                run.chunk = None;
                run.retries += 1;
                self.start_peering(pg, out);
            }
            Ok(map) => {
                chunk.maps.insert(from, map);
                self.scrub_chunk_maybe_done(pg, true, out);
            }
            Err(e) if e.code == ErrorCode::Timeout || e.code == ErrorCode::WrongPrimary => {
                // Elsewhere in the PG's history for a moment (not activated yet), or lost: the
                // chunk is asked again at the next tick.
                tracing::debug!(%pg, member = %from, error = %e, "scrub chunk to be asked again");
                run.chunk = None;
                run.retries += 1;
            }
            Err(e) => {
                tracing::warn!(%pg, member = %from, error = %e, "scrub stopped: a member refused it");
                if let Some(st) = self.scrubs.get_mut(&pg) {
                    st.run = None;
                }
            }
        }
    }

    /// Compares a chunk once every member's map is in; then the next chunk (at once if
    /// `continue_now`, else at the next tick) or the end.
    fn scrub_chunk_maybe_done(&mut self, pg: PgId, continue_now: bool, out: &mut Vec<Action>) {
        let me = self.id;
        let Some(st) = self.scrubs.get_mut(&pg) else { return };
        let Some(run) = st.run.as_mut() else { return };
        if run.chunk.as_ref().is_none_or(|c| !c.waiting.is_empty()) {
            return;
        }
        let Some(chunk) = run.chunk.take() else { return };
        let found = if self.mutations.blind_scrub { Vec::new() } else { compare(me, &chunk.maps) };
        let scanned = chunk.maps.get(&me).map_or(0, Vec::len) as u64;
        run.objects += scanned;
        run.inconsistent += found.len() as u64;
        // What this chunk's range held before is replaced by what it holds now.
        let after = run.after.clone();
        let in_range =
            |name: &str| after.as_deref().is_none_or(|a| name > a) && chunk.upto.as_deref().is_none_or(|u| name <= u);
        st.inconsistent.retain(|name, _| !in_range(name));
        let repair = run.kind.repair;
        run.after.clone_from(&chunk.upto);
        let finished = chunk.upto.is_none();
        let mut to_repair = Vec::new();
        for obj in found {
            tracing::warn!(%pg, object = %obj.name, auth = ?obj.auth, errors = ?obj.errors, "scrub: inconsistent object");
            if repair && obj.auth.is_some() {
                to_repair.push(obj);
            } else if st.inconsistent.len() < MAX_INCONSISTENT_KEPT {
                st.inconsistent.insert(obj.name.clone(), obj);
            }
        }
        let attempt = run.attempt;
        for obj in &to_repair {
            self.scrub_repair(pg, obj);
        }
        if let Some(st) = self.scrubs.get_mut(&pg) {
            // Tracked by the name recovery works on: a bad companion is recovered with its head.
            st.repairing.extend(to_repair.iter().map(|o| (crate::snaps::head_of(&o.name).to_string(), attempt)));
        }
        let Some(st) = self.scrubs.get_mut(&pg) else { return };
        let Some(run) = st.run.as_mut() else { return };
        run.repaired += to_repair.len() as u64;
        if !finished {
            if continue_now {
                self.scrub_chunk(pg, out);
            }
            return;
        }
        let summary = ScrubSummary {
            deep: run.kind.deep,
            repair: run.kind.repair,
            objects: run.objects,
            inconsistent: run.inconsistent,
            repaired: run.repaired,
        };
        tracing::info!(
            %pg,
            kind = run.kind.name(),
            objects = summary.objects,
            inconsistent = summary.inconsistent,
            repaired = summary.repaired,
            "scrub finished"
        );
        let now = self.now_ms;
        let light_ms = self.map.setting(shoal_map::config::SCRUB_INTERVAL_SECS).saturating_mul(1000);
        let deep_ms = self.map.setting(shoal_map::config::DEEP_SCRUB_INTERVAL_SECS).saturating_mul(1000);
        st.next_light_ms = now + light_ms;
        if summary.deep {
            st.next_deep_ms = now + deep_ms;
        }
        st.run = None;
        st.completed += 1;
        st.last = Some(summary);
        if !to_repair.is_empty() {
            self.recover(pg, out);
        }
    }

    /// Forgets repairs that are done (the object is missing nowhere any more, in the same peering
    /// attempt), and asks for a new repair scrub of PGs that peered again before theirs were.
    fn scrub_check_repairs(&mut self) {
        let mut again = Vec::new();
        let mut done: Vec<(PgId, String)> = Vec::new();
        for (pg, st) in &self.scrubs {
            let Some(p) = self.primary(*pg) else { continue };
            let own = self.metas.get(pg);
            for (name, attempt) in &st.repairing {
                if *attempt != p.attempt {
                    again.push(*pg);
                    break;
                }
                let missing = own.is_some_and(|m| m.missing.contains_key(name))
                    || p.peers.values().any(|pp| pp.missing.contains_key(name))
                    || p.recovering.contains_key(name);
                if !missing {
                    done.push((*pg, name.clone()));
                }
            }
        }
        for (pg, name) in done {
            if let Some(st) = self.scrubs.get_mut(&pg) {
                st.repairing.remove(&name);
            }
        }
        for pg in again {
            if let Some(st) = self.scrubs.get_mut(&pg) {
                tracing::info!(%pg, objects = st.repairing.len(), "PG peered again before its repair ended: repairing again");
                st.repairing.clear();
                st.requested = Some(ScrubKind { deep: true, repair: true });
            }
        }
    }

    /// Marks every bad copy of `obj` missing where it is, so that log recovery replaces it with
    /// the authoritative copy (pulled first if the primary's own copy is bad).
    fn scrub_repair(&mut self, pg: PgId, obj: &InconsistentObject) {
        let Some(auth) = obj.auth else { return };
        let me = self.id;
        let bad: Vec<OsdId> = obj.errors.iter().map(|(o, _)| *o).collect();
        if bad.contains(&me)
            && let Err(e) = self.mark_own_missing(pg, &obj.name)
        {
            return tracing::error!(%pg, object = %obj.name, error = %e, "cannot mark a bad copy for repair");
        }
        let Some(PgState { role: Role::Primary(p), .. }) = self.pgs.get_mut(&pg) else { return };
        for osd in &bad {
            if *osd == me {
                continue;
            }
            // (As for the primary's own copy: a companion is recovered with its head, and a
            // member with a bad companion is no source for the head either, since a pull brings
            // both.)
            let head = crate::snaps::head_of(&obj.name).to_string();
            if let Some(pp) = p.peers.get_mut(osd) {
                pp.missing.insert(head.clone(), Eversion::default());
            }
            if let Some(lacks) = p.sources.get_mut(osd) {
                lacks.insert(head);
            }
        }
        if auth != me {
            p.sources.entry(auth).or_default().remove(crate::snaps::head_of(&obj.name));
        }
        tracing::info!(%pg, object = %obj.name, %auth, ?bad, "repairing: bad copies marked for recovery");
    }

    /// Marks the primary's own copy of `object` missing, durably (its record says so in the same
    /// way peering's missing sets do), so that it is pulled from a member with a good copy. The
    /// version needed is the one stored with the damaged copy (its metadata outlives damage to
    /// its data), so that a member whose log no longer reaches that write can still be shown to
    /// hold it (`merge::held_at_needed_version`); `0'0` for a copy without one.
    pub(super) fn mark_own_missing(&mut self, pg: PgId, object: &str) -> Result<(), RemoteError> {
        // Recovery moves a head together with its clones and snapshot directory, and the PG log
        // names heads only: a damaged companion is repaired by recovering its head. Its own name
        // in a missing set would read, at the next peering, as an object the PG's history never
        // wrote, and be removed (decision 0037) — a snapshot's data lost.
        let object = crate::snaps::head_of(object);
        let meta = self.meta_mut(pg)?;
        if meta.missing.contains_key(object) {
            return Ok(());
        }
        // A head that does not exist but has clones keeps its state, and the version of its last
        // write, on its snapshot directory.
        let coll = crate::exec::pg_collection(pg);
        let need = crate::objver::stored_of_name(&*self.store, &coll, object).unwrap_or_default();
        let mut txn = Transaction::new();
        PgMeta::write_missing(&mut txn, pg, object, need);
        self.store.commit(txn, Durability::Batch).map_err(|e| store_error(&e))?;
        self.meta_mut(pg)?.missing.insert(object.to_string(), need);
        let me = self.id;
        if let Some(PgState { role: Role::Primary(p), .. }) = self.pgs.get_mut(&pg)
            && let Some(lacks) = p.sources.get_mut(&me)
        {
            lacks.insert(object.to_string());
        }
        Ok(())
    }

    /// A member's side of a scrub chunk: its map of the names in the range, if it is an active
    /// replica of the PG at the version the primary digested.
    pub(super) fn on_scrub(&mut self, from: Token, request_id: u64, req: PgScrub, out: &mut Vec<Action>) {
        let pg = PgId { pool: req.pool, seed: req.pg };
        let result = self.scrub_map_here(pg, &req);
        let reply = PgScrubReply { epoch: self.map.epoch, result };
        out.push(Action::Reply { to: from, frame: reply_frame(request_id, &reply, Vec::new()), after_sync: false });
    }

    fn scrub_map_here(&mut self, pg: PgId, req: &PgScrub) -> Result<Vec<ScrubObject>, RemoteError> {
        if !matches!(self.pgs.get(&pg), Some(PgState { role: Role::Replica { activated_at: Some(_) }, .. })) {
            return Err(self.lost_activation(pg));
        }
        let meta = self.meta_mut(pg)?;
        if !meta.missing.is_empty() || meta.backfill.is_some() {
            return Err(not_there_yet(format!("{} is still recovering PG {pg}", self.id)));
        }
        let here = self.log_mut(pg)?.last_update();
        if here != req.at {
            return Err(not_there_yet(format!("{} holds PG {pg} at {here}, not {}", self.id, req.at)));
        }
        let coll = pg_collection(pg);
        let names = list_range(&*self.store, &coll, req.after.as_deref(), req.upto.as_deref(), SCRUB_MAP_MAX_OBJECTS)?;
        crate::scrub::scrub_map(&*self.store, &coll, &names, req.deep)
    }

    /// An operator's command: queue a scrub, report the PG's scrub state, or list, give up or revert
    /// its unfound objects (`core/unfound.rs`).
    pub(super) fn pg_command(&mut self, from: Token, request_id: u64, req: PgCommand, out: &mut Vec<Action>) {
        let result = self.check_primary(req.pool, req.pg, None).and_then(|(pg, _, _)| {
            if self.primary(pg).is_none_or(|p| p.phase != Phase::Active) {
                return Err(RemoteError::new(
                    ErrorCode::Degraded,
                    format!("PG {pg} is not active on {}: {}", self.id, self.pg_state(pg).unwrap_or_default()),
                ));
            }
            match req.cmd {
                PgCmd::ListUnfound => Ok(PgCmdOutput::Unfound(self.unfound_report(pg))),
                PgCmd::MarkUnfoundLost => self.mark_unfound_lost(pg, out).map(PgCmdOutput::Lost),
                PgCmd::RevertUnfound => self.revert_unfound(pg, out).map(PgCmdOutput::Reverted),
                PgCmd::Scrub { deep, repair } => {
                    let st = self.scrub_state(pg);
                    let kind = ScrubKind { deep: deep || repair, repair };
                    // A stronger request replaces a weaker one waiting.
                    let merged = match st.requested {
                        Some(k) => ScrubKind { deep: k.deep || kind.deep, repair: k.repair || kind.repair },
                        None => kind,
                    };
                    st.requested = Some(merged);
                    tracing::info!(%pg, kind = merged.name(), "scrub requested");
                    Ok(PgCmdOutput::Queued)
                }
                PgCmd::Report => {
                    let st = self.scrub_state(pg);
                    Ok(PgCmdOutput::Report(ScrubReport {
                        running: st.run.as_ref().map(|r| r.kind.name().to_string()),
                        queued: st.requested.map(|k| k.name().to_string()),
                        completed: st.completed,
                        last: st.last.clone(),
                        inconsistent: st.inconsistent.values().cloned().collect(),
                    }))
                }
            }
        });
        let reply = PgCommandReply { epoch: self.map.epoch, result };
        // Objects given up or reverted are answered once the primary's own record is durable.
        let after_sync = matches!(req.cmd, PgCmd::MarkUnfoundLost | PgCmd::RevertUnfound);
        out.push(Action::Reply { to: from, frame: reply_frame(request_id, &reply, Vec::new()), after_sync });
    }

    /// The last scrub this OSD finished of `pg` since it leads it, and whether another is
    /// running, requested or repairing now (for tests and tools).
    #[must_use]
    pub fn last_scrub(&self, pg: PgId) -> (Option<ScrubSummary>, bool) {
        match self.scrubs.get(&pg) {
            Some(st) => (st.last.clone(), st.run.is_some() || st.requested.is_some() || !st.repairing.is_empty()),
            None => (None, false),
        }
    }

    /// Scrubs (and repairs) running here, and scrubs requested and waiting.
    pub(super) fn scrub_counts(&self) -> (usize, usize) {
        let running = self.scrubs.values().filter(|s| s.run.is_some() || !s.repairing.is_empty()).count();
        let queued = self.scrubs.values().filter(|s| s.requested.is_some()).count();
        (running, queued)
    }
}
