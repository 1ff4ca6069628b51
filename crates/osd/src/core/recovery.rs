//! Recovery and backfill on an active PG's primary, and the members' side of them.
//!
//! - **Log recovery**: objects the peering plan found missing are copied whole — pulled from a
//!   member that has them when the primary lacks them, pushed to each acting replica that lacks
//!   them; one with more xattrs and omap than a backfill chunk in parts of that size, one after
//!   another (decision 0044) — in the background within the map's `osd_recovery_max_ops` objects and
//!   `osd_recovery_max_inflight_bytes` bytes of pushes in flight per OSD (`shoal config set`; a
//!   change applies with the next map). A
//!   client operation on an object that is still missing somewhere it is needed recovers that
//!   object first, outside the bound, and only that operation waits.
//! - **Backfill**: a replica whose log does not overlap is sent the primary's objects in name
//!   order, a chunk at a time (at most `osd_backfill_chunk_objects` objects and about
//!   `osd_backfill_chunk_bytes`, a larger object — data, or xattrs and omap — alone in parts of
//!   that size); each chunk also
//!   removes the replica's objects in its range that the primary does not have, and moves its
//!   cursor in the same transaction. Writes to names up to the last chunk sent are replicated as
//!   usual (the link is ordered, so the chunk lands first); writes beyond it reach the replica's
//!   log only.
//! - **Strays**: an OSD holding a PG it no longer acts for asks the primary, now and then,
//!   whether the PG is clean without it; then it purges its copy.

use std::collections::BTreeSet;

use shoal_map::{ActivationProposal, OsdId, PgId};
use shoal_proto::osd::{
    BackfillRange, Eversion, ObjectCopy, OsdOpReply, PartCursor, PgPull, PgPullReply, PgPush, PgScanVersions, PgStray,
    PgStrayReply, PushPart, SCAN_VERSIONS_MAX,
};
use shoal_proto::{ErrorCode, Message, RemoteError, encode};
use shoal_store::{Durability, Transaction};

use super::peering::{MAX_BLOCKED_OPS_PER_PG, PartPush, PgState, Phase, Role};
use super::{Action, Event, OsdCore, PeerCall, reply_frame};
use crate::copy::{
    COPY_METADATA_MAX_BYTES, KeptClones, Part, apply_copy, apply_part, check_reads_whole, list_range,
    read_copies_keeping, read_copy_sized, read_part, read_part_copies, remove_stale_companions, split_data,
};
use crate::exec::{pg_collection, store_error};
use crate::pglog::log_collection;
use crate::pgmeta::PgMeta;
use crate::snaps;

/// Times an object being backfilled in parts is started over because of writes to it before
/// it is sent whole in one chunk (which no write can interrupt), so that a busy object cannot
/// hold its backfill back forever.
pub const MAX_PART_RESTARTS: u32 = 3;

/// Names one backfill scan covers (decision 0049): at most 256 × (255 + 16) bytes asked, well
/// inside a message header, and a page a chunk of kept objects can move the cursor over.
const SCAN_NAMES: usize = 256;
const _: () = assert!(SCAN_NAMES <= SCAN_VERSIONS_MAX);

// A backfill chunk of whole objects stops once it holds a chunk's worth, so its last object (at
// most a chunk itself) can take it to twice the setting: that must still go in one message.
const _: () = assert!(2 * shoal_map::config::BACKFILL_CHUNK_BYTES_MAX <= crate::copy::COPIES_DATA_MAX_BYTES);

/// A member's answer to a pull: the copies, their bytes, and which part of the object the first
/// copy is (for a pull in parts).
#[derive(Debug)]
pub(crate) struct PulledCopies {
    pub copies: Vec<ObjectCopy>,
    pub data: Vec<u8>,
    pub part: Option<PushPart>,
    /// Clones left out because this OSD holds them at the source's versions (`PgPullReply::kept`).
    pub kept: KeptClones,
}

/// What a client operation needs before it can run on an object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Need {
    /// The primary's copy (reads).
    Primary,
    /// Every acting member's copy (writes, and answers from the log that confirm a write).
    All,
    /// An operator's decision on an unfound object: every acting member's copy, the primary's
    /// standing as the object's while the decision waits (`Primary::decided`).
    Decision,
}

impl OsdCore {
    /// Whether `object` of the active PG `pg` is ready for an operation needing `need`; if not,
    /// starts recovering it at once (whatever the background bound) and returns `false`.
    pub(super) fn object_ready(&mut self, pg: PgId, object: &str, need: Need, out: &mut Vec<Action>) -> bool {
        let own_missing = self.metas.get(&pg).is_some_and(|m| m.missing.contains_key(object));
        let Some(PgState { role: Role::Primary(p), .. }) = self.pgs.get(&pg) else { return true };
        let own_missing = own_missing && !(need == Need::Decision && p.decided.contains(object));
        let peers_missing = need != Need::Primary && p.peers.values().any(|pp| pp.missing.contains_key(object));
        if !own_missing && !peers_missing && !p.recovering.contains_key(object) {
            return true;
        }
        if !p.recovering.contains_key(object) {
            self.recover_object(pg, object, out);
        }
        false
    }

    /// Holds a client operation until `object` is ready for it (recovered, its reads or
    /// unacknowledged writes done). At most [`MAX_BLOCKED_OPS_PER_PG`] wait per PG; beyond that
    /// the operation is refused with `Timeout`, which clients retry after a pause.
    pub(super) fn block_on(&mut self, pg: PgId, object: &str, event: Event, out: &mut Vec<Action>) {
        let epoch = self.map.epoch;
        let Some(PgState { role: Role::Primary(p), .. }) = self.pgs.get_mut(&pg) else { return };
        if p.blocked_ops >= MAX_BLOCKED_OPS_PER_PG {
            if let Event::ClientOp { from, request_id, .. } = event {
                let why = format!("PG {pg} has {} operations waiting for their objects: retry", p.blocked_ops);
                let reply = OsdOpReply { epoch, result: Err(RemoteError::new(ErrorCode::Timeout, why)) };
                let frame = reply_frame(request_id, &reply, Vec::new());
                out.push(Action::Reply { to: from, frame, after_sync: false });
            }
            return;
        }
        p.blocked_ops += 1;
        p.blocked.entry(object.to_string()).or_default().push(event);
    }

    /// Bytes of one push or pull part (the backfill chunk setting). A map written before the
    /// setting's bound came down to [`shoal_map::config::BACKFILL_CHUNK_BYTES_MAX`] may hold more:
    /// it is held to the bound, so that a chunk always fits one message.
    fn chunk_bytes(&self) -> u64 {
        self.map.setting(shoal_map::config::BACKFILL_CHUNK_BYTES).clamp(1, shoal_map::config::BACKFILL_CHUNK_BYTES_MAX)
    }

    /// Most bytes of xattrs and omap an object may have to be copied whole in recovery or
    /// backfill: one chunk, as for data, and never past what one message carries. A larger one
    /// goes in parts.
    fn whole_metadata_bytes(&self) -> usize {
        usize::try_from(self.chunk_bytes()).unwrap_or(usize::MAX).min(COPY_METADATA_MAX_BYTES)
    }

    /// Starts recovering one object: a pull if the primary lacks it, else pushes to the replicas
    /// that do.
    pub(super) fn recover_object(&mut self, pg: PgId, object: &str, out: &mut Vec<Action>) {
        // A copy an operator's decision keeps is pushed as the object's (`Primary::decided`).
        let decided = self.primary(pg).is_some_and(|p| p.decided.contains(object));
        let own_missing = !decided && self.metas.get(&pg).is_some_and(|m| m.missing.contains_key(object));
        // A copy marked missing here for damage while a write of it is on its way to the members
        // waits for that write: the members' copies are older than the version this one needs
        // until it lands (or fails, and peering decides), and a pull now would install an older
        // copy over a write that may yet be acknowledged. Background recovery comes back.
        if own_missing && self.writes_of.contains_key(&(pg, object.to_string())) {
            return;
        }
        let me = self.id;
        let epoch = self.map.epoch;
        let now_ms = self.now_ms;
        let up = |o: &OsdId| self.map.osds.get(o).is_some_and(|i| i.up);
        let Some(PgState { role: Role::Primary(p), .. }) = self.pgs.get_mut(&pg) else { return };
        if p.recovering.contains_key(object) {
            return;
        }
        if own_missing {
            // Acting members first: a stray may be removing its copy.
            let candidates = || p.sources.iter().filter(|(o, lacks)| **o != me && up(o) && !lacks.contains(object));
            let holder = || p.holders.iter().find(|(o, holds)| **o != me && up(o) && holds.contains(object));
            let from_sources = candidates().find(|(o, _)| p.acting.contains(o)).or_else(|| candidates().next());
            let source = from_sources.or_else(holder).map(|(o, _)| *o);
            let Some(source) = source else {
                // A copy missing only for damage to its clones is repaired clone by clone.
                if self.repair_clones_alone(pg, object, out) || self.pull_around_damaged_clones(pg, object, out) {
                    return;
                }
                if let Some(PgState { role: Role::Primary(p), .. }) = self.pgs.get_mut(&pg)
                    && p.unfound.insert(object.to_string())
                {
                    tracing::warn!(%pg, object, "object unfound: no member that is up holds it");
                }
                self.probe_strays(pg, out);
                return;
            };
            let Some(PgState { role: Role::Primary(p), .. }) = self.pgs.get_mut(&pg) else { return };
            p.unfound.remove(object);
            p.recovering.insert(object.to_string(), BTreeSet::from([source]));
            let attempt = p.attempt;
            self.send_pull(pg, attempt, source, object, None, None, out);
            return;
        }
        let missing_on: Vec<(OsdId, bool)> = p
            .peers
            .iter()
            .filter(|(_, pp)| pp.missing.contains_key(object))
            .map(|(o, pp)| (*o, pp.waits_as_toofull(now_ms)))
            .collect();
        if missing_on.is_empty() {
            self.unblock(pg, object, out);
            return;
        }
        // A member that refused recovery as too full gets nothing before its retry time; what
        // waits for the object keeps waiting (background recovery tries again then).
        let targets: BTreeSet<OsdId> = missing_on.iter().filter(|(_, toofull)| !toofull).map(|(o, _)| *o).collect();
        if targets.is_empty() {
            return;
        }
        let attempt = p.attempt;
        let mut data = Vec::new();
        let max_metadata = self.whole_metadata_bytes();
        // Clones every target holds already stay out of the push (decision 0065).
        let held = self.clones_targets_hold(pg, object, &targets);
        let read = read_copies_keeping(&*self.store, &pg_collection(pg), object, max_metadata, &held, &mut data);
        let mut kept = Vec::new();
        let copies = match read.map(|(copies, left_out)| {
            kept = left_out;
            copies
        }) {
            Ok(c) if self.mutations.recover_heads_only => head_only(c, &mut data),
            Ok(c) => c,
            Err(e) if e.code == ErrorCode::TooLarge => {
                // Too much for one message (metadata, or data with the clones that go along):
                // each target gets it in parts, one after another (the object stays
                // `recovering`, so no write reaches it meanwhile).
                if let Some(PgState { role: Role::Primary(p), .. }) = self.pgs.get_mut(&pg) {
                    p.recovering.insert(object.to_string(), targets.clone());
                }
                for osd in targets {
                    let at = self.recovery_resume_at(pg, osd, object);
                    self.send_recovery_part(pg, attempt, osd, object, at, out);
                }
                return;
            }
            Err(e) if e.code == ErrorCode::Corrupt => {
                // The primary's own copy is damaged: it is recovered first, from a member.
                tracing::warn!(%pg, object, error = %e, "own copy damaged: pulling it before pushing it");
                if self.mark_own_missing(pg, object).is_ok() {
                    self.recover_object(pg, object, out);
                }
                return;
            }
            Err(e) => {
                self.report_stuck(pg, object, &e, "cannot read an object to recover it");
                return;
            }
        };
        if let Some(PgState { role: Role::Primary(p), .. }) = self.pgs.get_mut(&pg) {
            p.recovering.insert(object.to_string(), targets.clone());
            p.push_bytes.insert(object.to_string(), data.len() as u64 * targets.len() as u64);
        }
        for osd in targets {
            let push = PgPush {
                epoch,
                pool: pg.pool,
                pg: pg.seed,
                objects: copies.clone(),
                backfill: None,
                part: None,
                kept: kept.clone(),
                decided,
            };
            out.push(Action::Peer {
                osd,
                msg_type: PgPush::TYPE,
                payload: encode(&push, data.clone()),
                call: PeerCall::Push { pg, attempt, objects: vec![object.to_string()], backfill: false, next: None },
            });
        }
    }

    /// The snapshot clones of head `object` that every one of `targets` (members lacking it)
    /// holds already, as far as this primary can tell (decision 0065): those made by writes up
    /// to the newest log entry each target had when it answered this attempt's query — it
    /// applied those writes, and a clone never changes once made — with the version this OSD's
    /// copy stores. A recovery push leaves them out; the target checks each and refuses the push
    /// if it holds one at another version, and the object is then pushed whole
    /// (`PeerPlan::push_whole`). Empty when a target has no such entry, or was refused before.
    fn clones_targets_hold(&self, pg: PgId, object: &str, targets: &BTreeSet<OsdId>) -> KeptClones {
        if snaps::is_companion(object) || self.mutations.recover_heads_only || self.mutations.push_every_clone {
            return Vec::new();
        }
        let Some(p) = self.primary(pg) else { return Vec::new() };
        let mut upto: Option<Eversion> = None;
        for target in targets {
            let Some(pp) = p.peers.get(target) else { return Vec::new() };
            let Some(last) = pp.last_update.filter(|_| !pp.push_whole.contains(object)) else { return Vec::new() };
            upto = Some(upto.map_or(last, |u| u.min(last)));
        }
        let Some(upto) = upto else { return Vec::new() };
        self.versioned_clones(pg, object, |_, version| version <= upto)
    }

    /// The snapshot clones of head `object` here (its snapshot directory aside) that carry a
    /// stored version, with it, and for which `keep(name, version)` holds.
    fn versioned_clones(&self, pg: PgId, object: &str, keep: impl Fn(&str, Eversion) -> bool) -> KeptClones {
        let coll = pg_collection(pg);
        let Ok(companions) = snaps::companions(&*self.store, &coll, object) else { return Vec::new() };
        let snapdir = snaps::snapdir_name(object);
        companions
            .into_iter()
            .filter(|c| *c != snapdir)
            .filter_map(|c| {
                let version = crate::objver::stored(&*self.store, &coll, &c)?;
                keep(&c, version).then_some((c, version))
            })
            .collect()
    }

    /// Where a recovery of `object` in parts to `osd` starts: where its last refused part started,
    /// if that push was refused as too full in this interval and the primary's copy is still at
    /// the version it had then (the target holds the parts before it); else the object's start.
    fn recovery_resume_at(&mut self, pg: PgId, osd: OsdId, object: &str) -> PartCursor {
        let Some(PgState { role: Role::Primary(p), .. }) = self.pgs.get_mut(&pg) else {
            return PartCursor::default();
        };
        let saved = p.peers.get_mut(&osd).and_then(|pp| pp.recovery_part.take());
        match saved {
            Some((name, at, v))
                if name == object && v == crate::objver::stored(&*self.store, &pg_collection(pg), object) =>
            {
                if !at.is_start() {
                    tracing::info!(%pg, peer = %osd, object, "recovery in parts resumes past the parts the target holds");
                }
                at
            }
            _ => PartCursor::default(),
        }
    }

    /// Pushes `osd` the part of `object` (being recovered) at `at`; the acknowledgement of a part
    /// that is not the last sends the next ([`OsdCore::pushed`]). A damaged copy is recovered
    /// first, from a member; another failure to read it (it cannot be copied: reported) gives up
    /// on `osd` for this round, and background recovery starts the object over later, as after
    /// a failed whole read.
    fn send_recovery_part(
        &mut self,
        pg: PgId,
        attempt: u64,
        osd: OsdId,
        object: &str,
        at: PartCursor,
        out: &mut Vec<Action>,
    ) {
        let epoch = self.map.epoch;
        let mut data = Vec::new();
        let read = read_part_copies(&*self.store, &pg_collection(pg), object, &at, self.chunk_bytes(), &mut data);
        let (copies, part, next) = match read {
            Ok(Some(p)) => p,
            other => {
                let error = other.err().unwrap_or_else(|| RemoteError::new(ErrorCode::NotFound, "gone"));
                self.report_stuck(pg, object, &error, "reading a part of an object to recover it failed");
                if error.code == ErrorCode::Corrupt && self.mark_own_missing(pg, object).is_ok() {
                    // Pulled first, then pushed again from the start.
                    return self.start_peering(pg, out);
                }
                // Not unblocked here: the operations waiting for it wait for the next attempt.
                if let Some(p) = self.primary_at(pg, attempt)
                    && let Some(waiting) = p.recovering.get_mut(object)
                {
                    waiting.remove(&osd);
                    if waiting.is_empty() {
                        p.recovering.remove(object);
                        p.push_bytes.remove(object);
                    }
                }
                return;
            }
        };
        let version = crate::objver::stored(&*self.store, &pg_collection(pg), object);
        if let Some(p) = self.primary_at(pg, attempt) {
            p.push_bytes.insert(object.to_string(), data.len() as u64);
            if let Some(pp) = p.peers.get_mut(&osd) {
                pp.recovery_part = Some((object.to_string(), at.clone(), version));
            }
        }
        let last = part.last;
        let decided = self.primary(pg).is_some_and(|p| p.decided.contains(object));
        let push = PgPush {
            epoch,
            pool: pg.pool,
            pg: pg.seed,
            objects: copies,
            backfill: None,
            part: Some(part),
            kept: Vec::new(),
            decided,
        };
        let (objects, next) =
            if last { (vec![object.to_string()], None) } else { (Vec::new(), Some((object.to_string(), next))) };
        out.push(Action::Peer {
            osd,
            msg_type: PgPush::TYPE,
            payload: encode(&push, data),
            call: PeerCall::Push { pg, attempt, objects, backfill: false, next },
        });
    }

    /// Whether a backfill target's cursor stands between head `object` and its clones
    /// (`snaps::cursor_splits`): the target holds the head but maybe not all the clones, so a
    /// write of the head — which may restore, trim or copy a clone — waits until the next chunk
    /// has passed them, as Ceph holds writes to objects in its backfill window. The cursor of a
    /// push not yet answered counts too (decision 0076): the cursor moves when the push is sent,
    /// and if the target refuses it as too full, it goes back; a write let through meanwhile
    /// would have restored the head, on the target, from a clone it never got.
    pub(super) fn backfill_splits(&self, pg: PgId, object: &str) -> bool {
        let Some(p) = self.primary(pg) else { return false };
        let acked_too = !self.mutations.split_by_sent_cursor_only;
        let cursors: Vec<&str> = p
            .peers
            .values()
            .flat_map(|pp| {
                let unacked = pp.unacked_from.as_deref().filter(|_| acked_too);
                pp.backfill.as_deref().into_iter().chain(unacked)
            })
            .filter(|c| crate::snaps::cursor_splits(c, object))
            .collect();
        if cursors.is_empty() {
            return false;
        }
        // Only when this OSD holds a companion the cursor has not passed: an object without
        // clones is whole on the member once the cursor reaches it (and a write of it must not
        // wait on a backfill that may itself be waiting, as too full, for that write to free room).
        let held = crate::snaps::companions(&*self.store, &pg_collection(pg), object).unwrap_or_default();
        cursors.iter().any(|c| held.iter().any(|name| name.as_str() > *c))
    }

    /// Runs the writes that waited for a backfill cursor to pass their object's clones, for
    /// those no cursor splits any more.
    fn wake_unsplit(&mut self, pg: PgId, out: &mut Vec<Action>) {
        let Some(p) = self.primary(pg) else { return };
        let ready: Vec<String> = p.split_waits.iter().filter(|o| !self.backfill_splits(pg, o)).cloned().collect();
        for object in ready {
            if let Some(PgState { role: Role::Primary(p), .. }) = self.pgs.get_mut(&pg) {
                p.split_waits.remove(&object);
            }
            self.unblock(pg, &object, out);
        }
    }

    /// Runs the operations that waited for `object`.
    pub(super) fn unblock(&mut self, pg: PgId, object: &str, out: &mut Vec<Action>) {
        let events = match self.pgs.get_mut(&pg) {
            Some(PgState { role: Role::Primary(p), .. }) => {
                let events = p.blocked.remove(object).unwrap_or_default();
                p.blocked_ops -= events.len();
                events
            }
            _ => Vec::new(),
        };
        for ev in events {
            self.handle(ev, out);
        }
    }

    /// Bytes of pushes (recovery and backfill) this OSD has in flight, across its PGs.
    fn push_bytes_in_flight(&self) -> u64 {
        self.pgs
            .values()
            .map(|s| match &s.role {
                Role::Primary(p) => p.push_bytes.values().sum::<u64>() + p.backfill_bytes.values().sum::<u64>(),
                _ => 0,
            })
            .sum()
    }

    /// Whether the bytes bound leaves room for another push (one always goes when none is in
    /// flight, whatever its size).
    fn push_bytes_allowed(&self) -> bool {
        let in_flight = self.push_bytes_in_flight();
        in_flight == 0 || in_flight < self.map.setting(shoal_map::config::RECOVERY_MAX_BYTES)
    }

    /// Objects and backfill chunks being recovered by this OSD, across its PGs.
    fn recovery_in_flight(&self) -> usize {
        self.pgs
            .values()
            .map(|s| match &s.role {
                Role::Primary(p) => p.recovering.len() + p.backfilling.len(),
                _ => 0,
            })
            .sum()
    }

    /// Starts background recovery of `pg` up to the OSD's bound: the primary's own missing
    /// objects first, then the replicas', then backfill chunks. A PG with nothing left is clean;
    /// if it runs on a temporary acting set, the primary asks for it to be removed.
    pub(super) fn recover(&mut self, pg: PgId, out: &mut Vec<Action>) {
        let own: Vec<String> = self.metas.get(&pg).map(|m| m.missing.keys().cloned().collect()).unwrap_or_default();
        let now_ms = self.now_ms;
        let min_size = self.map.pools.get(&pg.pool).map_or(1, |pool| pool.min_size) as usize;
        let Some(p) = self.primary(pg) else { return };
        if p.phase != Phase::Active {
            return;
        }
        if p.recovery_only && 1 + p.peers.values().filter(|pp| pp.backfill.is_none()).count() >= min_size {
            tracing::info!(%pg, "enough members backfilled to serve: peering again to activate for I/O");
            return self.start_peering(pg, out);
        }
        // Counted once: each start below takes one slot (a start that finds the object unfound
        // takes one too, which only makes this round more conservative).
        let max_ops = self.map.setting(shoal_map::config::RECOVERY_MAX_OPS).max(1);
        let mut budget = usize::try_from(max_ops).unwrap_or(usize::MAX).saturating_sub(self.recovery_in_flight());
        if !own.is_empty() {
            let idle: Vec<String> = own
                .into_iter()
                .filter(|n| !p.recovering.contains_key(n) && !p.unfound.contains(n))
                .take(budget)
                .collect();
            for name in idle {
                self.recover_object(pg, &name, out);
            }
            return;
        }
        let mut theirs: BTreeSet<String> = BTreeSet::new();
        for pp in p.peers.values().filter(|pp| !pp.waits_as_toofull(now_ms)) {
            theirs.extend(pp.missing.keys().filter(|n| !p.recovering.contains_key(*n)).take(256).cloned());
        }
        let backfill: Vec<OsdId> = p
            .peers
            .iter()
            .filter(|(o, pp)| pp.backfill.is_some() && !p.backfilling.contains(o))
            .filter(|(_, pp)| !pp.waits_as_toofull(now_ms))
            .map(|(o, _)| *o)
            .collect();
        for name in theirs {
            if budget == 0 || !self.push_bytes_allowed() {
                return;
            }
            budget -= 1;
            self.recover_object(pg, &name, out);
        }
        for osd in backfill {
            if budget == 0 || !self.push_bytes_allowed() {
                return;
            }
            budget -= 1;
            self.send_backfill_chunk(pg, osd, out);
        }
        self.maybe_clean(pg, out);
    }

    /// A clean PG on a temporary acting set hands back to the OSDs placement names. It does so
    /// also when placement has come to name the same OSDs in the same order meanwhile (an OSD
    /// out and in again): the acting set and the interval stay as they are, and the map no longer
    /// keeps an entry that would hold the PG on those OSDs after placement moves on.
    fn maybe_clean(&mut self, pg: PgId, out: &mut Vec<Action>) {
        let empty = PgMeta::default();
        let own = self.metas.get(&pg).unwrap_or(&empty);
        let Some(p) = self.primary(pg) else { return };
        if p.recovery_only || !p.is_complete(own) || !p.recovering.is_empty() || !p.backfilling.is_empty() {
            return;
        }
        if !p.recorded_whole() {
            return self.extend_record(pg, out);
        }
        if self.map.pg_temp.contains_key(&pg) && !self.pending_temp.contains_key(&pg) {
            let up = self.map.pg_up_osds(pg).unwrap_or_default();
            let keep_same = self.mutations.keep_temp_equal_to_placement && up == p.acting;
            if !up.is_empty() && !keep_same {
                tracing::info!(%pg, ?up, "PG clean on its temporary acting set: handing back");
                self.pending_temp.insert(pg, Vec::new());
                self.flush_mon(out);
            }
        }
    }

    /// Asks the monitors to name every acting member of `pg` in its activation record, once
    /// every one of them holds the PG whole (decision 0055): members backfilled since the
    /// activation were left out of it, and a record that never names them would leave the PG
    /// incomplete if its other members were lost, although a backfilled member holds it all. The
    /// record keeps its activation epoch (the members took part in that activation) and is
    /// swapped on its epoch, as every record is; sent again while it is not in the map and no
    /// command of this OSD is in flight.
    fn extend_record(&mut self, pg: PgId, out: &mut Vec<Action>) {
        let me = self.id;
        let busy = self.mon_busy || self.pending_records.contains_key(&pg);
        let Some(PgState { role: Role::Primary(p), .. }) = self.pgs.get_mut(&pg) else { return };
        let Some(record) = &p.record else { return };
        if p.acting.first() != Some(&me) || busy {
            return;
        }
        let ext = ActivationProposal {
            pg,
            prior_epoch: record.epoch,
            activated_at: record.activated_at,
            members: p.acting.clone(),
            // Every acting member holds every object: nothing is left to look for elsewhere.
            holders: Vec::new(),
        };
        debug_assert!(record.members.iter().all(|m| ext.members.contains(m)), "an extension keeps every member");
        if p.extension.as_ref() != Some(&ext) {
            tracing::debug!(%pg, members = ?ext.members, "every acting member is whole: recording them");
        }
        p.extension = Some(ext.clone());
        self.queue_record(pg, ext);
        self.flush_mon(out);
    }

    /// Logs that recovering `object` of `pg` failed with `error`, at most once a minute per
    /// object: recovery retries every tick, and an object that cannot be copied (over the bound of
    /// decision 0043) or read fails the same way each time.
    pub(super) fn report_stuck(&mut self, pg: PgId, object: &str, error: &RemoteError, what: &str) {
        const EVERY_MS: u64 = 60_000;
        const REMEMBERED: usize = 1024;
        let now = self.now_ms;
        let key = (pg, object.to_string());
        if self.stuck_reported.get(&key).is_some_and(|last| now.saturating_sub(*last) < EVERY_MS) {
            return;
        }
        if self.stuck_reported.len() >= REMEMBERED {
            self.stuck_reported.clear();
        }
        self.stuck_reported.insert(key, now);
        tracing::error!(%pg, object, %error, "{what} (retried every tick; reported once a minute)");
    }

    /// Sends `osd` the next backfill chunk: the objects after its cursor, up to
    /// `osd_backfill_chunk_objects` of them and about `osd_backfill_chunk_bytes` of data, stopping
    /// before an object larger than that, which goes alone in parts (or whole, after
    /// [`MAX_PART_RESTARTS`] restarts).
    fn send_backfill_chunk(&mut self, pg: PgId, osd: OsdId, out: &mut Vec<Action>) {
        let epoch = self.map.epoch;
        let chunk_bytes = self.chunk_bytes();
        let coll = pg_collection(pg);
        let Some(p) = self.primary(pg) else { return };
        let Some(pp) = p.peers.get(&osd) else { return };
        let Some(cursor) = pp.backfill.clone() else { return };
        let attempt = p.attempt;
        let resume = pp.part.clone();
        if let Some(part) = resume.as_ref().filter(|r| !r.dirty) {
            return self.send_backfill_part(pg, osd, part.clone(), out);
        }
        // Comparing (decision 0049): names the scans covered, and what the member holds of them.
        let scanned = pp.compare.then(|| (pp.scanned_upto.clone(), pp.held.clone()));
        let after = (!cursor.is_empty()).then_some(cursor.clone());
        let max_objects = self.map.setting(shoal_map::config::BACKFILL_CHUNK_OBJECTS).clamp(1, 1024) as usize;
        // Kept objects cost the chunk nothing: when comparing, a page reaches over as many names
        // as one scan covers.
        let listed = if scanned.is_some() { SCAN_NAMES } else { max_objects };
        let page = match self.store.list_objects(&coll, "", after.as_deref(), listed) {
            Ok(page) => page,
            Err(shoal_store::StoreError::NoSuchCollection(_)) => shoal_store::ListPage::default(),
            Err(e) => {
                tracing::error!(%pg, error = %e, "listing for backfill failed");
                return;
            }
        };
        // A name past what the scans covered is scanned before anything is sent for it.
        let covered = |name: &str| match &scanned {
            None => true,
            Some((upto, _)) => upto.as_deref().is_some_and(|u| name <= u),
        };
        if page.objects.first().is_some_and(|first| !covered(first)) {
            return self.send_scan(pg, osd, &cursor, out);
        }
        let mut objects: Vec<ObjectCopy> = Vec::new();
        let mut kept: Vec<(String, Eversion)> = Vec::new();
        // The last name the chunk covers (sent or kept).
        let mut last_name: Option<String> = None;
        let mut data = Vec::new();
        // Bytes the copies take in the push's header (xattrs and omap): they count toward the
        // chunk's size like data, and never past what one message carries.
        let mut header_bytes = 0usize;
        let mut stopped = false;
        // Objects with writes on their way that the store no longer lists (a write removed
        // them): the chunk's range must not reach over one, or the target, which gets the
        // removal only as a log entry (or not at all, if that message is lost), would lose the
        // object while its log says it holds it (decision 0088).
        // Collected once per chunk, in name order (usually none: writes in flight are few).
        let in_flight: BTreeSet<&str> = if self.mutations.backfill_over_removals_in_flight {
            BTreeSet::new()
        } else {
            self.writes_of.keys().filter(|(g, _)| *g == pg).map(|(_, head)| head.as_str()).collect()
        };
        let removed_in_flight = |lo: Option<&str>, hi: Option<&str>| -> Option<String> {
            in_flight
                .iter()
                .find(|head| lo.is_none_or(|lo| **head > lo) && hi.is_none_or(|hi| **head < hi))
                .map(|head| (*head).to_string())
        };
        for name in page.objects {
            if !covered(&name) || objects.len() >= max_objects {
                stopped = true;
                break;
            }
            if let Some(head) = removed_in_flight(last_name.as_deref().or(after.as_deref()), Some(&name)) {
                if objects.is_empty() && kept.is_empty() {
                    return self.wait_for_writes(pg, osd, &head);
                }
                stopped = true;
                break;
            }
            // A copy read while a write of its object (or, for a clone, of its head) is on its
            // way would carry that write's data to the target, which gets the write itself only
            // as a log entry, or not at all if that message is lost: a write never acknowledged
            // would then sit in the target's copy with no entry to roll it back. The chunk ends
            // before it; with nothing before it, the target waits for that write's answers.
            if self.write_in_flight(pg, &name) {
                if objects.is_empty() && kept.is_empty() {
                    return self.wait_for_writes(pg, osd, &name);
                }
                stopped = true;
                break;
            }
            if !objects.is_empty() && data.len() as u64 + header_bytes as u64 >= chunk_bytes {
                stopped = true;
                break;
            }
            // Held by the member at the version this OSD's copy has now: kept, not sent. (A copy
            // written since the scan has another version, and goes.)
            if let Some((_, held)) = &scanned
                && let Some(version) = held.get(&name)
                && (crate::objver::stored(&*self.store, &coll, &name) == Some(*version)
                    || self.mutations.keep_rewritten)
            {
                kept.push((name.clone(), *version));
                last_name = Some(name);
                continue;
            }
            // A listed object exists; its size decides whether it goes in parts, and is reused
            // for the read.
            let size_bytes = match self.store.stat(&coll, &name) {
                Ok(stat) => stat.size_bytes,
                Err(e) => {
                    tracing::error!(%pg, object = %name, error = %e, "reading an object for backfill failed");
                    return;
                }
            };
            // Restarts count only while the same object stays first in line.
            let restarts = resume.as_ref().filter(|r| r.object == name).map_or(0, |r| r.restarts + 1);
            if size_bytes > chunk_bytes {
                if restarts <= MAX_PART_RESTARTS || !objects.is_empty() || !kept.is_empty() {
                    if objects.is_empty() && kept.is_empty() {
                        let part = PartPush { object: name, at: PartCursor::default(), dirty: false, restarts };
                        return self.send_backfill_part(pg, osd, part, out);
                    }
                    stopped = true;
                    break;
                }
                tracing::info!(%pg, object = %name, restarts, "written to while sent in parts: sending it whole");
            }
            let data_before = data.len();
            // After the restarts, whole if one message can carry it at all: alone, its metadata
            // within what the frame leaves beside its data (else in parts again).
            let max_metadata = if restarts > MAX_PART_RESTARTS {
                crate::copy::metadata_room_alone(size_bytes)
            } else {
                self.whole_metadata_bytes()
            };
            match read_copy_sized(&*self.store, &coll, &name, Some(size_bytes), max_metadata, &mut data) {
                Err(e) if e.code == ErrorCode::TooLarge => {
                    // Metadata over a chunk (or over a message): alone, in parts, like a large
                    // object.
                    data.truncate(data_before);
                    if objects.is_empty() && kept.is_empty() {
                        let part = PartPush { object: name, at: PartCursor::default(), dirty: false, restarts };
                        return self.send_backfill_part(pg, osd, part, out);
                    }
                    stopped = true;
                    break;
                }
                Ok(c) => {
                    let c_bytes = shoal_proto::encoded_len(&c);
                    if !objects.is_empty() && header_bytes + c_bytes > crate::copy::COPIES_MAX_BYTES {
                        // It goes first in the next chunk, alone if need be.
                        data.truncate(data_before);
                        stopped = true;
                        break;
                    }
                    header_bytes += c_bytes;
                    last_name = Some(c.name.clone());
                    objects.push(c);
                }
                Err(e) => {
                    self.report_stuck(pg, &name, &e, "reading an object for backfill failed");
                    if e.code == ErrorCode::Corrupt {
                        // Recovered from a member first (own missing objects go before backfill).
                        let _ = self.mark_own_missing(pg, &name);
                    }
                    return;
                }
            }
        }
        // A range to the PG's end must not reach over a removal on its way either.
        if !stopped
            && page.next.is_none()
            && let Some(head) = removed_in_flight(last_name.as_deref().or(after.as_deref()), None)
        {
            if last_name.is_none() {
                return self.wait_for_writes(pg, osd, &head);
            }
            stopped = true;
        }
        // The range ends at the last object sent or kept, unless that was the PG's last. (A range
        // without an end removes everything past `after` on the member: never for a chunk that
        // stopped short.)
        if (stopped || page.next.is_some()) && last_name.is_none() {
            return;
        }
        let upto = if stopped || page.next.is_some() { last_name } else { None };
        let range = BackfillRange { after, upto: upto.clone() };
        let names: Vec<String> = objects.iter().map(|c| c.name.clone()).collect();
        let kept_count = kept.len() as u64;
        let push = PgPush {
            epoch,
            pool: pg.pool,
            pg: pg.seed,
            objects,
            backfill: Some(range),
            part: None,
            kept,
            decided: false,
        };
        if let Some(PgState { role: Role::Primary(p), .. }) = self.pgs.get_mut(&pg) {
            p.backfilling.insert(osd);
            p.backfill_bytes.insert(osd, data.len() as u64);
            if let Some(left) = p.backfill_remaining.get_mut(&osd) {
                *left = left.saturating_sub(kept_count);
            }
            // Writes to names up to here now go to the replica in full: the chunk precedes them
            // on the ordered link.
            if let Some(pp) = p.peers.get_mut(&osd) {
                pp.unacked_from = Some(cursor);
                pp.unacked_part = None;
                pp.backfill = Some(upto.clone().unwrap_or_else(|| LAST_NAME.to_string()));
                pp.part = None;
                pp.backfill_sent += names.len() as u64;
                pp.backfill_kept += kept_count;
            }
        }
        // Kept objects are brought up to date by this push as much as sent ones: they count in
        // the recovery rate as they leave the misplaced count (now), so that the time left
        // `shoal status` shows holds for a backfill that keeps most objects.
        self.counters.recovered_objects += kept_count;
        out.push(Action::Peer {
            osd,
            msg_type: PgPush::TYPE,
            payload: encode(&push, data),
            call: PeerCall::Push { pg, attempt, objects: names, backfill: true, next: None },
        });
    }

    /// Whether a write of `name`'s object (its head, for a clone or snapshot directory) is on its
    /// way to the members of `pg`: applied here, not yet answered by every member.
    fn write_in_flight(&self, pg: PgId, name: &str) -> bool {
        !self.writes_of.is_empty() && self.writes_of.contains_key(&(pg, crate::snaps::head_of(name).to_string()))
    }

    /// Backfill target `osd` of `pg` waits for the writes of `name`'s object on their way: its
    /// next chunk goes when the last of them is answered (`backfill_after_writes`), or with the
    /// next round of background recovery.
    fn wait_for_writes(&mut self, pg: PgId, osd: OsdId, name: &str) {
        if let Some(PgState { role: Role::Primary(p), .. }) = self.pgs.get_mut(&pg) {
            let head = crate::snaps::head_of(name).to_string();
            tracing::debug!(%pg, peer = %osd, object = %head, "backfill waits for writes on their way");
            p.backfill_waits.entry(head).or_default().insert(osd);
        }
    }

    /// The last write of `object` on its way to the members of `pg` was answered: the backfill
    /// targets that waited for it get their next chunk.
    pub(super) fn backfill_after_writes(&mut self, pg: PgId, object: &str, out: &mut Vec<Action>) {
        let Some(PgState { role: Role::Primary(p), .. }) = self.pgs.get_mut(&pg) else { return };
        let Some(waiting) = p.backfill_waits.remove(object) else { return };
        for osd in waiting {
            let ready = self.primary(pg).is_some_and(|p| {
                !p.backfilling.contains(&osd) && p.peers.get(&osd).is_some_and(|pp| pp.backfill.is_some())
            });
            if ready && self.push_bytes_allowed() {
                self.send_backfill_chunk(pg, osd, out);
            }
        }
    }

    /// Asks backfill target `osd` which of the next names past `cursor` it holds at this OSD's
    /// versions (decision 0049). Names without a stored version are covered but not asked about
    /// (they are always sent); with none to ask, the chunk is built at once.
    fn send_scan(&mut self, pg: PgId, osd: OsdId, cursor: &str, out: &mut Vec<Action>) {
        let epoch = self.map.epoch;
        let coll = pg_collection(pg);
        let after = (!cursor.is_empty()).then_some(cursor);
        let page = match self.store.list_objects(&coll, "", after, SCAN_NAMES) {
            Ok(page) => page,
            Err(e) => return tracing::error!(%pg, error = %e, "listing for a backfill scan failed"),
        };
        let Some(last) = page.objects.last().cloned() else { return };
        let upto = if page.next.is_some() { last } else { LAST_NAME.to_string() };
        let objects: Vec<(String, Eversion)> = page
            .objects
            .into_iter()
            .filter_map(|name| crate::objver::stored(&*self.store, &coll, &name).map(|v| (name, v)))
            .collect();
        let Some(attempt) = self.primary(pg).map(|p| p.attempt) else { return };
        let Some(p) = self.primary_at(pg, attempt) else { return };
        if objects.is_empty() {
            if let Some(pp) = p.peers.get_mut(&osd) {
                pp.scanned_upto = Some(upto);
            }
            return self.send_backfill_chunk(pg, osd, out);
        }
        p.backfilling.insert(osd);
        let scan = PgScanVersions { epoch, pool: pg.pool, pg: pg.seed, objects };
        out.push(Action::Peer {
            osd,
            msg_type: PgScanVersions::TYPE,
            payload: encode(&scan, Vec::new()),
            call: PeerCall::ScanVersions { pg, attempt, upto },
        });
    }

    /// A backfill target's answer to a scan: what it holds is remembered up to `upto`, and
    /// backfill goes on. A failed scan turns comparing off for that target (everything is sent,
    /// as to a new disk): never wrong, only slower.
    pub(super) fn scanned(
        &mut self,
        pg: PgId,
        attempt: u64,
        from: OsdId,
        upto: String,
        result: Result<Vec<(String, Eversion)>, RemoteError>,
        out: &mut Vec<Action>,
    ) {
        let Some(p) = self.primary_at(pg, attempt) else { return };
        p.backfilling.remove(&from);
        let Some(pp) = p.peers.get_mut(&from) else { return };
        match result {
            Ok(held) => {
                let cursor = pp.backfill.clone().unwrap_or_default();
                // Only names the scan covered: past the cursor, up to its end.
                pp.held.extend(held.into_iter().filter(|(name, _)| *name > cursor && *name <= upto));
                pp.scanned_upto = Some(upto);
            }
            Err(e) => {
                tracing::info!(%pg, peer = %from, error = %e, "backfill scan failed: sending every object to it");
                pp.compare = false;
                pp.held.clear();
                pp.scanned_upto = None;
            }
        }
        self.recover(pg, out);
    }

    /// Sends `osd` the next part of the large object `part` names, the first object after its
    /// backfill cursor. The cursor passes the object only with its last part; a write in
    /// `(cursor, object]` meanwhile marks the object to start over (`PeerPlan::log_only`), since
    /// the target, which gets such writes as log entries only, would otherwise keep stale parts
    /// or miss a new object below its new cursor.
    fn send_backfill_part(&mut self, pg: PgId, osd: OsdId, part: PartPush, out: &mut Vec<Action>) {
        let epoch = self.map.epoch;
        let chunk_bytes = self.chunk_bytes();
        let coll = pg_collection(pg);
        let Some(p) = self.primary(pg) else { return };
        let Some(cursor) = p.peers.get(&osd).and_then(|pp| pp.backfill.clone()) else { return };
        let attempt = p.attempt;
        // As for a chunk: no part is read while a write of the object is on its way.
        if self.write_in_flight(pg, &part.object) {
            return self.wait_for_writes(pg, osd, &part.object);
        }
        // A part goes only while its object is the first after the cursor (as when it began:
        // parts start only at the head of a chunk). Each part's range reaches back to the cursor,
        // and the member removes what else it holds there; an object made since — a clone that a
        // write of a head below the cursor made, which the member made too — would be removed
        // there and then passed by the cursor, never sent. Such a part starts over behind it.
        let after = (!cursor.is_empty()).then_some(cursor.as_str());
        match self.store.list_objects(&coll, "", after, 1) {
            Ok(page) if page.objects.first() == Some(&part.object) => {}
            Ok(_) => {
                if let Some(pp) = self.primary_at(pg, attempt).and_then(|p| p.peers.get_mut(&osd)) {
                    pp.part = None;
                }
                return self.send_backfill_chunk(pg, osd, out);
            }
            Err(e) => {
                tracing::error!(%pg, error = %e, "listing for backfill failed");
                return;
            }
        }
        let mut data = Vec::new();
        let Part { copy, part: header, next } =
            match read_part(&*self.store, &coll, &part.object, &part.at, chunk_bytes, &mut data) {
                Ok(Some(read)) => read,
                other => {
                    // Gone or shrunk without a write marking it (which cannot happen: every write
                    // passes `log_only`), or unreadable: started over from the cursor next round.
                    let error = other.err().unwrap_or_else(|| RemoteError::new(ErrorCode::NotFound, "gone"));
                    self.report_stuck(pg, &part.object, &error, "reading a part for backfill failed");
                    if error.code == ErrorCode::Corrupt {
                        let _ = self.mark_own_missing(pg, &part.object);
                    }
                    if let Some(pp) = self.primary_at(pg, attempt).and_then(|p| p.peers.get_mut(&osd)) {
                        pp.part = None;
                    }
                    return;
                }
            };
        let last = header.last;
        let after = (!cursor.is_empty()).then_some(cursor.clone());
        let range = BackfillRange { after, upto: Some(part.object.clone()) };
        let names = if last { vec![part.object.clone()] } else { Vec::new() };
        let push = PgPush {
            epoch,
            pool: pg.pool,
            pg: pg.seed,
            objects: vec![copy],
            backfill: Some(range),
            part: Some(header),
            kept: Vec::new(),
            decided: false,
        };
        if let Some(PgState { role: Role::Primary(p), .. }) = self.pgs.get_mut(&pg) {
            p.backfilling.insert(osd);
            p.backfill_bytes.insert(osd, data.len() as u64);
            if let Some(pp) = p.peers.get_mut(&osd) {
                pp.unacked_from = Some(cursor);
                pp.unacked_part = (!last).then(|| part.clone());
                if last {
                    // As for a chunk: the last part precedes later writes to the object.
                    pp.backfill = Some(part.object.clone());
                    pp.part = None;
                    pp.backfill_sent += 1;
                } else {
                    pp.part = Some(PartPush { at: next, ..part });
                }
            }
        }
        out.push(Action::Peer {
            osd,
            msg_type: PgPush::TYPE,
            payload: encode(&push, data),
            call: PeerCall::Push { pg, attempt, objects: names, backfill: true, next: None },
        });
    }

    /// A member's answer to a pull.
    pub(super) fn pulled(
        &mut self,
        pg: PgId,
        attempt: u64,
        from: OsdId,
        object: String,
        result: Result<PulledCopies, RemoteError>,
        out: &mut Vec<Action>,
    ) {
        // A clone pulled alone replaces this OSD's copy only at the same version (see `clones`).
        // (A head's copy is not checked so: a copy stored before decision 0077 names the head's
        // last write that changed it, while a later logged write that changed nothing — a trim
        // with nothing to trim — left the log's newest version of the object ahead of it.)
        let clone_version = self.clone_version_needed(pg, &object);
        let remember_failed_holders = !self.mutations.believe_failed_holders;
        if let Err(e) = &result
            && self.primary_at(pg, attempt).is_some()
            && self.activation_lost(pg, from, e)
        {
            // The source took an interval this primary did not see: only peering again
            // activates it, and then the object is pulled again (decision 0080).
            tracing::info!(%pg, object, source = %from, error = %e, "a member no longer holds this primary's activation: peering again");
            self.start_peering(pg, out);
            return;
        }
        let Some(p) = self.primary_at(pg, attempt) else { return };
        p.recovering.remove(&object);
        // A head pulled around a member's damaged clones must be at the version needed (the
        // member's own record is all that said it might be).
        let around = p.around_damage.remove(&object);
        // A copy pulled for an operator's revert must be at the version asked (decision 0066).
        let revert = p.revert_pulls.remove(&object).filter(|r| r.source == from);
        // The head's version comes with its last part only (a revert's source checks it at
        // every part).
        let matches = |c: &ObjectCopy, part: Option<&PushPart>| {
            let whole = part.is_none_or(|part| part.last);
            c.name == object
                && clone_version.is_none_or(|want| c.exists && want == Some(c.version))
                && around.is_none_or(|need| c.exists && c.version == need)
                && revert.is_none_or(|r| c.exists && (c.version == r.version || !whole))
        };
        let pulled = match result {
            Ok(v) if v.copies.first().is_some_and(|c| matches(c, v.part.as_ref())) => v,
            Err(e) if e.code == ErrorCode::TooLarge && revert.is_some_and(|r| r.in_parts) => {
                // A copy to revert to that does not fit one message, over a copy here that could
                // not be kept anyway: pulled in parts, each asking for that version.
                tracing::info!(%pg, object, source = %from, "pulling a copy to revert to in parts");
                let stale_at = revert.map(|r| r.version);
                p.revert_pulls.extend(revert.map(|r| (object.clone(), r)));
                p.recovering.insert(object.clone(), BTreeSet::from([from]));
                self.send_pull(pg, attempt, from, &object, Some(PartCursor::default()), stale_at, out);
                return;
            }
            Err(e) if revert.is_some() && e.code != ErrorCode::NotFound && e.code != ErrorCode::Corrupt => {
                // Lost on the way, or (with `revert_in_parts_only_without_a_copy`) too large for
                // one message over a copy here that a part would replace early: the operator's
                // next revert asks again (a copy too large then stays where it is).
                tracing::info!(%pg, object, source = %from, error = %e, "pull of a copy to revert to failed");
                if e.code == ErrorCode::TooLarge
                    && let Some(copies) = p.elsewhere.get_mut(&object)
                {
                    copies.remove(&from);
                }
                return;
            }
            Err(e) if e.code == ErrorCode::TooLarge => {
                // Too much for one message (metadata, or data with the clones that go along):
                // pulled in parts from the same source.
                tracing::info!(%pg, object, source = %from, "pulling an object in parts");
                p.recovering.insert(object.clone(), BTreeSet::from([from]));
                self.send_pull(pg, attempt, from, &object, Some(PartCursor::default()), None, out);
                return;
            }
            Err(e) if e.code != ErrorCode::NotFound && e.code != ErrorCode::Corrupt => {
                // Lost on the way (a timeout, a broken connection): the object stays missing and
                // the next round of background recovery asks again (from its first part).
                tracing::info!(%pg, object, source = %from, error = %e, "pull failed; retried later");
                return;
            }
            other => {
                // That source does not have it after all (or its copy is damaged): try another.
                if let Some(lacks) = p.sources.get_mut(&from) {
                    lacks.insert(object.clone());
                }
                if let Some(holds) = p.holders.get_mut(&from)
                    && holds.remove(&object)
                    && remember_failed_holders
                {
                    p.holders_failed.insert((from, object.clone()));
                }
                if clone_version.is_some() {
                    p.clone_misses.entry(object.clone()).or_default().insert(from);
                }
                if around.is_some() {
                    p.around_damage_misses.entry(object.clone()).or_default().insert(from);
                }
                if revert.is_some()
                    && let Some(copies) = p.elsewhere.get_mut(&object)
                {
                    copies.remove(&from);
                }
                let error = other.err().map_or_else(|| "a copy of another object".to_string(), |e| e.to_string());
                tracing::info!(%pg, object, source = %from, %error, "pull failed; trying another source");
                self.recover_object(pg, &object, out);
                return;
            }
        };
        let PulledCopies { copies, data, part, kept } = pulled;
        if let Some(part) = part {
            // The next part starts after this one's data, omap entries and companions.
            let next = crate::copy::cursor_after(&part, &copies, data.len());
            let last = part.last;
            // A revert's copy stays missing (and unfound) once in, as a whole one does.
            let keep_missing = revert.is_some();
            if let Err(e) = self.install_part(pg, copies, bytes::Bytes::from(data), None, part, keep_missing) {
                // Retried by background recovery every tick (a store out of space fails the same
                // way each time): reported once a minute. (A revert's: by the operator's next.)
                self.report_stuck(pg, &object, &e, "storing a part of a pulled object failed");
                return;
            }
            if !last {
                if let Some(p) = self.primary_at(pg, attempt) {
                    p.recovering.insert(object.clone(), BTreeSet::from([from]));
                    p.revert_pulls.extend(revert.map(|r| (object.clone(), r)));
                }
                let stale_at = revert.map(|r| r.version);
                return self.send_pull(pg, attempt, from, &object, Some(next), stale_at, out);
            }
        } else if let Err(e) = self.install_copies(pg, copies, bytes::Bytes::from(data), None, &kept, revert.is_some())
        {
            self.report_stuck(pg, &object, &e, "storing a pulled object failed");
            return;
        }
        if let Some(super::RevertPull { version, .. }) = revert {
            // Still missing (older than the log needs) and unfound: the next revert keeps it.
            tracing::warn!(%pg, object, source = %from, %version, "pulled a copy for an operator's revert: the next revert keeps it");
            return;
        }
        self.counters.recovered_objects += 1;
        tracing::debug!(%pg, object, source = %from, "pulled");
        // Now the replicas that lack it, then whoever waited.
        self.recover_object(pg, &object, out);
        self.recover(pg, out);
    }

    /// Asks `source` for `object`, which the primary lacks: whole, or (`part`) the part at that
    /// cursor of an object too large for one message; `stale_at`: for an operator's revert, the
    /// version the source must store (see `PgPull::stale_at`).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn send_pull(
        &mut self,
        pg: PgId,
        attempt: u64,
        source: OsdId,
        object: &str,
        part: Option<PartCursor>,
        stale_at: Option<Eversion>,
        out: &mut Vec<Action>,
    ) {
        let epoch = self.map.epoch;
        let Some(p) = self.primary_at(pg, attempt) else { return };
        // A source that is not a complete member holding the object (a holder from before its
        // backfill) answers for an object the primary knows it holds (see `PgPull::vouched`).
        // A revert's pull is vouched for only when its version is certainly of the PG's history
        // (decision 0082).
        let vouched = match stale_at {
            Some(_) => p.revert_pulls.get(object).is_some_and(|r| r.vouched),
            None => p.sources.get(&source).is_none_or(|lacks| lacks.contains(object)),
        };
        let kept = if part.is_none() { self.clones_held_whole(pg, object) } else { Vec::new() };
        let pull =
            PgPull { epoch, pool: pg.pool, pg: pg.seed, object: object.to_string(), vouched, part, kept, stale_at };
        out.push(Action::Peer {
            osd: source,
            msg_type: PgPull::TYPE,
            payload: encode(&pull, Vec::new()),
            call: PeerCall::Pull { pg, attempt, object: object.to_string() },
        });
    }

    /// The snapshot clones of head `object` this OSD holds with a version and reads back whole,
    /// for a pull to leave out (`PgPull::kept`): a clone never changes once made, so one the
    /// source holds at the same version is already here, and a source whose own copy of it is
    /// damaged can still send the head (the copy it could not read is then repaired by scrub).
    /// Empty for a companion pulled alone. Reading each clone back costs a local read per clone
    /// instead of a transfer of it.
    pub(super) fn clones_held_whole(&self, pg: PgId, object: &str) -> KeptClones {
        if snaps::is_companion(object) || self.mutations.recover_heads_only {
            return Vec::new();
        }
        let coll = pg_collection(pg);
        self.versioned_clones(pg, object, |name, _| check_reads_whole(&*self.store, &coll, name).is_ok())
    }

    /// After `from` refused a recovery push of `objects` (one object) that left clones out:
    /// marks it to be sent whole and no longer waited for by this push. `false` if it was sent
    /// whole (it left no clone out, or was sent whole already): the refusal is then for another
    /// reason, and the PG peers again.
    fn push_whole_next(&mut self, pg: PgId, attempt: u64, from: OsdId, objects: &[String]) -> bool {
        let left_out = objects.iter().all(|o| !self.clones_targets_hold(pg, o, &BTreeSet::from([from])).is_empty());
        let Some(p) = self.primary_at(pg, attempt) else { return false };
        if !left_out {
            return false;
        }
        let Some(pp) = p.peers.get_mut(&from) else { return false };
        if objects.len() != 1 || objects.iter().any(|o| pp.push_whole.contains(o) || !pp.missing.contains_key(o)) {
            return false;
        }
        pp.push_whole.extend(objects.iter().cloned());
        for object in objects {
            if let Some(waiting) = p.recovering.get_mut(object) {
                waiting.remove(&from);
                if waiting.is_empty() {
                    p.recovering.remove(object);
                    p.push_bytes.remove(object);
                }
            }
        }
        true
    }

    /// A member's answer to a push (recovery or backfill).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn pushed(
        &mut self,
        pg: PgId,
        attempt: u64,
        from: OsdId,
        (objects, next): (Vec<String>, Option<(String, PartCursor)>),
        backfill: bool,
        result: Result<(), RemoteError>,
        out: &mut Vec<Action>,
    ) {
        if self.primary_at(pg, attempt).is_none() {
            return;
        }
        if let Err(e) = result {
            if e.code == ErrorCode::NoSpace {
                if backfill {
                    return self.backfill_toofull(pg, attempt, from, &e);
                }
                let names = objects.into_iter().chain(next.map(|(name, _)| name)).collect();
                return self.recovery_toofull(pg, attempt, from, names, &e);
            }
            if !backfill
                && next.is_none()
                && e.code == ErrorCode::Invalid
                && self.push_whole_next(pg, attempt, from, &objects)
            {
                tracing::info!(%pg, peer = %from, ?objects, error = %e, "push leaving clones out refused: sending it whole");
                for object in &objects {
                    self.recover_object(pg, object, out);
                }
                return;
            }
            tracing::info!(%pg, peer = %from, error = %e, "push refused: peering again");
            self.start_peering(pg, out);
            return;
        }
        self.counters.recovered_objects += objects.len() as u64;
        let Some(p) = self.primary_at(pg, attempt) else { return };
        if backfill {
            p.backfilling.remove(&from);
            p.backfill_bytes.remove(&from);
            if let Some(pp) = p.peers.get_mut(&from) {
                pp.unacked_from = None;
                pp.unacked_part = None;
                // What scans found up to the cursor is the member's now, as sent or kept.
                if let Some(cursor) = pp.backfill.as_deref() {
                    let rest = pp.held.split_off(&format!("{cursor}\0"));
                    pp.held = rest;
                }
                if pp.toofull_until_ms.take().is_some() {
                    tracing::info!(%pg, peer = %from, "backfill target has room again: backfill goes on");
                }
            }
            if let Some(left) = p.backfill_remaining.get_mut(&from) {
                *left = left.saturating_sub(objects.len() as u64);
            }
            if let Some(pp) = p.peers.get_mut(&from)
                && pp.backfill.as_deref() == Some(LAST_NAME)
            {
                pp.backfill = None;
                p.backfill_remaining.remove(&from);
                tracing::info!(%pg, peer = %from, sent = pp.backfill_sent, kept = pp.backfill_kept, "backfill finished");
                // Backfilled whole: from now on a source like any complete member (read repair
                // of the primary's own copy may pull from it).
                let lacks: BTreeSet<String> = pp.missing.keys().cloned().collect();
                p.sources.insert(from, lacks);
            }
            self.wake_unsplit(pg, out);
        } else if let Some((name, at)) = next {
            // A part of a recovery push landed: the next one.
            return self.send_recovery_part(pg, attempt, from, &name, at, out);
        } else {
            if let Some(pp) = p.peers.get_mut(&from) {
                // Whole now (a whole push, or the last part): nothing to resume.
                if pp.recovery_part.as_ref().is_some_and(|(name, _, _)| objects.contains(name)) {
                    pp.recovery_part = None;
                }
                if pp.toofull_until_ms.take().is_some() {
                    tracing::info!(%pg, peer = %from, "recovery target has room again: recovery goes on");
                }
            }
            let mut done = Vec::new();
            for name in objects {
                if let Some(pp) = p.peers.get_mut(&from) {
                    pp.missing.remove(&name);
                }
                if let Some(lacks) = p.sources.get_mut(&from) {
                    lacks.remove(&name);
                }
                if let Some(waiting) = p.recovering.get_mut(&name) {
                    waiting.remove(&from);
                    if waiting.is_empty() {
                        p.recovering.remove(&name);
                        p.push_bytes.remove(&name);
                        done.push(name);
                    }
                }
            }
            for name in done {
                self.unblock(pg, &name, out);
            }
        }
        self.recover(pg, out);
    }

    /// How long a member that refused a push as too full is left alone, and the tick time until
    /// which that is (`osd_backfill_retry_interval_ms` from now).
    fn toofull_retry(&self) -> (u64, u64) {
        let retry_ms = self.map.setting(shoal_map::config::BACKFILL_RETRY_INTERVAL_MS);
        (retry_ms, self.now_ms.saturating_add(retry_ms))
    }

    /// Backfill target `from` refused a push of `pg` as too full (`check_backfill_room`, or its
    /// store ran out of space): the PG stays active, the target's cursor goes back to where it was
    /// before the push, and no backfill goes to it for the retry interval. Going back is safe:
    /// writes to names in the refused range that reached the target in full meanwhile are
    /// overwritten when the range is sent again, and from now on they reach it as log entries
    /// only, as for any name past its cursor. A large object being sent in parts resumes at the
    /// refused part (the target holds the earlier ones), still marked for a restart if a write
    /// reached it meanwhile; one whose last part was refused starts over (a write may have
    /// reached the target in full behind that part).
    fn backfill_toofull(&mut self, pg: PgId, attempt: u64, from: OsdId, error: &RemoteError) {
        let (retry_ms, until_ms) = self.toofull_retry();
        let Some(p) = self.primary_at(pg, attempt) else { return };
        p.backfilling.remove(&from);
        p.backfill_bytes.remove(&from);
        let Some(pp) = p.peers.get_mut(&from) else { return };
        if let Some(cursor) = pp.unacked_from.take() {
            pp.backfill = Some(cursor);
        }
        let written_meanwhile = pp.part.as_ref().is_some_and(|p| p.dirty);
        pp.part = pp.unacked_part.take().map(|p| PartPush { dirty: p.dirty || written_meanwhile, ..p });
        if pp.toofull_until_ms.replace(until_ms).is_none() {
            tracing::warn!(%pg, peer = %from, %error, retry_ms, "backfill target too full: backfill to it waits");
        }
    }

    /// Recovery target `from` refused a push of `names` of `pg` as too full (`check_push_room`,
    /// or its store ran out of space): the PG stays active, the objects stay missing on the
    /// target, and no recovery goes to it for the retry interval. Operations waiting for these
    /// objects keep waiting (a write needs every member's copy); background recovery pushes them
    /// again after the interval and lets them run. An object being pushed in parts starts over.
    fn recovery_toofull(&mut self, pg: PgId, attempt: u64, from: OsdId, names: Vec<String>, error: &RemoteError) {
        let (retry_ms, until_ms) = self.toofull_retry();
        let Some(p) = self.primary_at(pg, attempt) else { return };
        for name in &names {
            if let Some(waiting) = p.recovering.get_mut(name) {
                waiting.remove(&from);
                if waiting.is_empty() {
                    p.recovering.remove(name);
                    p.push_bytes.remove(name);
                }
            }
        }
        let Some(pp) = p.peers.get_mut(&from) else { return };
        if pp.toofull_until_ms.replace(until_ms).is_none() {
            tracing::warn!(%pg, peer = %from, %error, retry_ms, "recovery target too full: recovery to it waits");
        }
    }

    /// Stores received copies (and a backfill range's removals and cursor) in one transaction.
    /// The copies' missing records go with it, unless `keep_missing` (a copy older than the one
    /// needed, pulled for an operator's revert: decision 0066).
    #[allow(clippy::too_many_arguments)]
    fn install_copies(
        &mut self,
        pg: PgId,
        copies: Vec<ObjectCopy>,
        data: bytes::Bytes,
        backfill: Option<BackfillRange>,
        kept: &[(String, Eversion)],
        keep_missing: bool,
    ) -> Result<(), RemoteError> {
        let datas = split_data(&copies, data)?;
        let (coll, lcoll, mut txn) = self.install_txn(pg);
        let mut names: BTreeSet<&str> = copies.iter().map(|c| c.name.as_str()).collect();
        self.check_kept(&coll, backfill.as_ref(), &names, kept)?;
        names.extend(kept.iter().map(|(name, _)| name.as_str()));
        // A member that never held the PG has no collection to clean up in the range.
        if let Some(range) = backfill.as_ref().filter(|_| self.collections.contains(&coll)) {
            for local in list_range(&*self.store, &coll, range.after.as_deref(), range.upto.as_deref(), usize::MAX)? {
                if !names.contains(local.as_str()) {
                    txn.remove(&coll, &local);
                }
            }
        }
        if backfill.is_none() && self.collections.contains(&coll) {
            // Clones a pull left out (`PgPull::kept`, checked above) stay. (A backfill chunk's
            // range removal above already covers companions.)
            remove_stale_companions(&mut txn, &*self.store, &coll, &copies, kept)?;
        }
        // Only objects recorded missing have a record to remove: a removal of an absent key is
        // not free (a tombstone in the KV store), and backfill copies objects nobody recorded.
        let recorded: Vec<bool> = {
            let meta = self.meta_mut(pg)?;
            copies.iter().map(|c| !keep_missing && meta.missing.contains_key(&c.name)).collect()
        };
        for ((copy, bytes), recorded) in copies.iter().zip(datas).zip(recorded) {
            apply_copy(&mut txn, &*self.store, &coll, copy, bytes)?;
            if recorded {
                PgMeta::write_recovered(&mut txn, pg, &copy.name);
            }
        }
        if let Some(range) = &backfill {
            PgMeta::write_backfill(&mut txn, pg, range.upto.as_deref());
        }
        self.store.commit(txn, Durability::Batch).map_err(|e| store_error(&e))?;
        self.collections.insert(coll);
        self.collections.insert(lcoll);
        let meta = self.meta_mut(pg)?;
        for c in copies.iter().filter(|_| !keep_missing) {
            meta.recovered(&c.name);
        }
        if let Some(range) = backfill {
            meta.backfill = range.upto;
        }
        Ok(())
    }

    /// A backfill scan from the primary (decision 0049): which of the objects named this member
    /// holds at exactly the versions named. Read only; answered only by an activated member (its
    /// primary's activation says what it holds and where its cursor is).
    pub(super) fn on_scan_versions(&mut self, scan: &PgScanVersions) -> Result<Vec<(String, Eversion)>, RemoteError> {
        let pg = PgId { pool: scan.pool, seed: scan.pg };
        if !matches!(self.pgs.get(&pg), Some(PgState { role: Role::Replica { activated_at: Some(_) }, .. })) {
            return Err(RemoteError::new(
                ErrorCode::WrongPrimary,
                format!("{} is not an activated replica of PG {pg}", self.id),
            ));
        }
        if scan.objects.len() > SCAN_VERSIONS_MAX {
            return Err(RemoteError::new(
                ErrorCode::Invalid,
                format!("backfill scan of {} objects (at most {SCAN_VERSIONS_MAX})", scan.objects.len()),
            ));
        }
        let coll = pg_collection(pg);
        Ok(scan
            .objects
            .iter()
            .filter(|(name, version)| crate::objver::stored(&*self.store, &coll, name) == Some(*version))
            .cloned()
            .collect())
    }

    /// A pull from the primary: this OSD's copy of the object, if it holds it.
    pub(super) fn on_pull(&mut self, from: u64, request_id: u64, pull: PgPull, out: &mut Vec<Action>) {
        let pg = PgId { pool: pull.pool, seed: pull.pg };
        let mut data = Vec::new();
        let mut part = None;
        let mut kept = Vec::new();
        // Not (or no longer: a purged stray) holding the PG at all.
        let held = self.pgs.contains_key(&pg);
        // A member the primary has not activated in this OSD's current life may hold nothing
        // the primary believes it holds: restarted on an empty store, it answers "absent" for
        // everything, and the primary would install that absence over its own (damaged) copy.
        // Its answer waits for its activation, when the primary knows what it holds. (Strays
        // are sources only once a probe compared their logs; a stray that lost its store holds
        // no PG and says so above.)
        let unactivated = matches!(self.pgs.get(&pg), Some(PgState { role: Role::Replica { activated_at: None }, .. }))
            && !self.mutations.answer_unactivated_pulls;
        // A head this member's backfill has reached but whose clones it may not all hold yet.
        let cursor = if held { self.meta_mut(pg).ok().and_then(|m| m.backfill.clone()) } else { None };
        let split = cursor.as_deref().is_some_and(|c| crate::snaps::cursor_splits(c, &pull.object))
            && clones_may_be_past_cursor(&*self.store, &pg_collection(pg), &pull.object);
        // A head past this member's cursor is answered for only when the primary vouches for it
        // (its stored version is the one needed). That vouches for the head, not for its clones:
        // a backfill cut off between a head and its clones (the head sorts first) leaves the head
        // alone, and the next backfill's cursor, starting over, no longer splits them. Sent, such
        // a head would name on the puller clones nobody sent it (decision 0099).
        let head_alone = !self.mutations.pull_heads_without_their_clones
            && cursor.as_deref().is_some_and(|c| pull.object.as_str() > c)
            && !crate::snaps::is_companion(&pull.object)
            && names_absent_clone(&*self.store, &pg_collection(pg), &pull.object);
        // A head missing here only for damage may still be sent around it (decision 0064).
        let around = held && may_send_around_damage(&pull) && !self.mutations.no_pull_around_damage;
        // Asked again at every part of a copy sent in parts, so that all come from that version.
        let stale = held && pull.stale_at.is_some() && !crate::snaps::is_companion(&pull.object);
        let head_version =
            (around || stale).then(|| crate::objver::stored(&*self.store, &pg_collection(pg), &pull.object)).flatten();
        // An operator's revert asks for the copy at exactly the version it stores (decision 0066).
        let stale_ok = stale && head_version.is_some() && head_version == pull.stale_at;
        let result = match self.meta_mut(pg) {
            _ if !held => Err(RemoteError::new(ErrorCode::NotFound, format!("{} does not hold PG {pg}", self.id))),
            _ if unactivated => Err(self.lost_activation(pg)),
            // A vouched pull overrides only the backfill cursor, never a recorded missing object.
            Ok(_) if split => Err(RemoteError::new(
                ErrorCode::NotFound,
                format!("{}'s backfill of PG {pg} has not passed all clones of {} yet", self.id, pull.object),
            )),
            Ok(_) if head_alone => Err(RemoteError::new(
                ErrorCode::NotFound,
                format!("{} holds {} of PG {pg} without all the clones its snapshot state names", self.id, pull.object),
            )),
            Ok(meta)
                if !meta.has(&pull.object)
                    && !vouched_past_cursor(meta, &pull)
                    && !missing_only_for_damage(meta, &pull.object, head_version)
                    && !stale_copy_asked(meta, &pull.object, stale_ok) =>
            {
                Err(RemoteError::new(ErrorCode::NotFound, format!("{} lacks {} of PG {pg} too", self.id, pull.object)))
            }
            Ok(_) => match &pull.part {
                None => {
                    let max_metadata = self.whole_metadata_bytes();
                    let coll = pg_collection(pg);
                    let read =
                        read_copies_keeping(&*self.store, &coll, &pull.object, max_metadata, &pull.kept, &mut data);
                    let copies = read.map(|(copies, left_out)| {
                        kept = left_out;
                        copies
                    });
                    if self.mutations.recover_heads_only { copies.map(|c| head_only(c, &mut data)) } else { copies }
                }
                Some(at) => {
                    let coll = pg_collection(pg);
                    match read_part_copies(&*self.store, &coll, &pull.object, at, self.chunk_bytes(), &mut data) {
                        Ok(Some((copies, header, _))) => {
                            part = Some(header);
                            Ok(copies)
                        }
                        Ok(None) => Err(RemoteError::new(
                            ErrorCode::NotFound,
                            format!("{} no longer holds {} of PG {pg}", self.id, pull.object),
                        )),
                        Err(e) => Err(e),
                    }
                }
            },
            Err(e) => Err(e),
        };
        if result.is_err() {
            data.clear();
            part = None;
            kept.clear();
        }
        let reply = PgPullReply { epoch: self.map.epoch, result, part, kept };
        out.push(Action::Reply { to: from, frame: reply_frame(request_id, &reply, data), after_sync: false });
    }

    /// A push from the primary: refused unless this OSD is an activated replica of the PG, and
    /// the push was sent with a map at or past its activation (decision 0073). A push sent
    /// before then comes from a primary of an earlier interval, one cut off from the maps that
    /// ended it: applied, its backfill chunk would move this member's cursor over objects the
    /// current primary then never sends, and it may carry copies older than the current ones.
    pub(super) fn on_push(&mut self, push: PgPush, data: bytes::Bytes) -> Result<(), RemoteError> {
        let pg = PgId { pool: push.pool, seed: push.pg };
        let activated_at = match self.pgs.get(&pg) {
            Some(PgState { role: Role::Replica { activated_at: Some(a) }, .. }) => *a,
            _ => {
                return Err(RemoteError::new(
                    ErrorCode::WrongPrimary,
                    format!("{} is not an activated replica of PG {pg}", self.id),
                ));
            }
        };
        if push.epoch < activated_at && !self.mutations.accept_stale_pushes {
            return Err(RemoteError::new(
                ErrorCode::WrongPrimary,
                format!("push of epoch {} to PG {pg} predates its activation at {activated_at}", push.epoch),
            ));
        }
        // A backfill chunk keeps objects of its range; a whole recovery push keeps clones of the
        // head it carries (decision 0065). Parts keep nothing.
        let head = push.objects.first().map(|c| c.name.as_str()).filter(|h| !crate::snaps::is_companion(h));
        let clones_of_head = |name: &str| {
            head.is_some_and(|h| crate::snaps::is_companion(name) && crate::snaps::head_of(name) == h)
                && head.is_some_and(|h| name != crate::snaps::snapdir_name(h))
        };
        let keeps_ok =
            push.part.is_none() && (push.backfill.is_some() || push.kept.iter().all(|(name, _)| clones_of_head(name)));
        if !push.kept.is_empty() && !keeps_ok {
            return Err(RemoteError::new(
                ErrorCode::Invalid,
                format!(
                    "push for PG {pg} keeps objects but is neither a whole backfill chunk nor a whole head keeping its \
                     clones"
                ),
            ));
        }
        // A clone kept in recovery must read back whole here: the primary only guessed that this
        // member holds it, and a whole push is what repairs a damaged one (a member recovering a
        // head missing for damage holds the damaged clone at the right version). Bounded by the
        // head's clones, read a piece at a time by the store.
        if push.backfill.is_none() {
            let coll = pg_collection(pg);
            if let Some((name, e)) = push
                .kept
                .iter()
                .find_map(|(name, _)| check_reads_whole(&*self.store, &coll, name).err().map(|e| (name, e)))
            {
                return Err(RemoteError::new(
                    ErrorCode::Invalid,
                    format!("recovered copy keeps {name}, which does not read back whole here ({e}); nothing applied"),
                ));
            }
        }
        self.check_push_room(push.backfill.is_some(), data.len() as u64)?;
        if push.backfill.is_none() && !push.kept.is_empty() {
            tracing::debug!(%pg, head = ?head, kept = push.kept.len(), "recovered copy keeps clones held here");
        }
        // A decided copy's missing records go with the decision's logged write (`RepOp::decided`).
        let keep_missing = push.decided && !self.mutations.decided_push_clears_missing;
        match push.part {
            Some(part) => self.install_part(pg, push.objects, data, push.backfill, part, keep_missing),
            None => self.install_copies(pg, push.objects, data, push.backfill, &push.kept, keep_missing),
        }
    }

    /// Checks that every object of `kept` lies in the backfill chunk's `range` (if the copies are
    /// one), is not also sent, and is held here at the version named: what a backfill chunk
    /// leaves as it is must be what its primary believes it is (decision 0049), and the clones a
    /// pull left out must be the ones the source holds (decision 0059).
    fn check_kept(
        &self,
        coll: &str,
        range: Option<&BackfillRange>,
        sent: &BTreeSet<&str>,
        kept: &[(String, Eversion)],
    ) -> Result<(), RemoteError> {
        for (name, version) in kept {
            let inside = range.is_none_or(|range| {
                range.after.as_deref().is_none_or(|a| name.as_str() > a)
                    && range.upto.as_deref().is_none_or(|u| name.as_str() <= u)
            });
            let why = if !inside {
                "outside the chunk's range".to_string()
            } else if sent.contains(name.as_str()) {
                "also sent".to_string()
            } else {
                match crate::objver::stored(&*self.store, coll, name) {
                    Some(v) if v == *version => continue,
                    held => format!("held here at {held:?}, not {version:?}"),
                }
            };
            return Err(RemoteError::new(
                ErrorCode::Invalid,
                format!(
                    "{} keeps {name} ({why}); nothing applied",
                    if range.is_some() { "backfill chunk" } else { "recovered copy" }
                ),
            ));
        }
        Ok(())
    }

    /// Refuses a push bringing `data_bytes` of data if they would take this OSD's store to its
    /// limit for such pushes or past it, with `NoSpace`, which the primary takes as "too full,
    /// try again later" (decision 0046). A backfill push stops at
    /// [`shoal_map::BACKFILLFULL_PERMILLE`]: moving data onto an OSD must never fill it to the
    /// monitors' full flag, which would stop client writes to every PG it holds. A recovery push
    /// (an object a member missed) stops only at [`shoal_map::FULL_FAILSAFE_PERMILLE`]: it
    /// restores writes the PG already acknowledged, and the rest is kept for writes on their way.
    /// A store that cannot say how full it is counts as past the limit; a push without data
    /// (removals, metadata) is always taken.
    fn check_push_room(&self, backfill: bool, data_bytes: u64) -> Result<(), RemoteError> {
        if data_bytes == 0 {
            return Ok(());
        }
        let usage = self.store.usage().map_err(|e| store_error(&e))?;
        let permille = shoal_map::used_permille(usage.used_bytes.saturating_add(data_bytes), usage.size_bytes);
        let (limit, state) = if backfill {
            (shoal_map::BACKFILLFULL_PERMILLE, "backfill_toofull")
        } else {
            (shoal_map::FULL_FAILSAFE_PERMILLE, "recovery_toofull")
        };
        if permille < limit {
            return Ok(());
        }
        Err(RemoteError::new(
            ErrorCode::NoSpace,
            format!(
                "{state}: {} would be {}.{}% used with this push's {data_bytes} bytes, at or past the {}.{}% \
                 from which it takes no such push",
                self.id,
                permille / 10,
                permille % 10,
                limit / 10,
                limit % 10
            ),
        ))
    }

    /// The start of a transaction that installs copies of `pg`'s objects here: the PG's
    /// collection and log collection created if this OSD lacks them (a new member), and a purge
    /// of a stray copy of the PG stopped. Returns both collections' names with it.
    fn install_txn(&mut self, pg: PgId) -> (String, String, Transaction) {
        self.cancel_purge(pg);
        let coll = pg_collection(pg);
        let lcoll = log_collection(pg);
        let mut txn = Transaction::new();
        if !self.collections.contains(&coll) {
            txn.create_collection(&coll);
        }
        if !self.collections.contains(&lcoll) {
            txn.create_collection(&lcoll);
        }
        (coll, lcoll, txn)
    }

    /// Stores one part of an object sent in parts (see `PushPart`). In a backfill push it is
    /// the push's only object: the first part also removes this member's other objects in the
    /// range, the last also moves the backfill cursor to the object. In a recovery push (or this
    /// primary's own pull) the first part may bring the object's companions whole, after it, and
    /// removes the local ones it does not bring; the object stays missing until its last part
    /// (`keep_missing`: after it too — a copy an operator's revert pulls stays unfound until
    /// the next revert keeps it). Each part in one transaction.
    /// Adds to `txn` the removal of `head`'s local companions that a recovery part covers and
    /// does not carry. Parts carry the companions in name order, each whole, from the one after
    /// the part's cursor (`PartCursor::clones_after`) on; a part covers that range up to the last
    /// companion it carries, and the last part to the end. A member's companion outside what the
    /// parts so far covered stays: the primary may not be able to send it (its own copy may turn
    /// out unreadable at a later part), and this one may be the one good copy left (simulation
    /// seed 1012007 of `--parts --snaps --host-crashes`: a first part removed every clone a
    /// member held, the primary's copy of one was unreadable, and no member held it any more).
    fn remove_companions_a_part_covers(
        &self,
        txn: &mut Transaction,
        coll: &str,
        head: &ObjectCopy,
        carried: &[ObjectCopy],
        part: &PushPart,
    ) -> Result<(), RemoteError> {
        let after = part.at.clones_after.as_deref();
        let upto = if part.last { None } else { carried.last().map(|c| c.name.as_str()) };
        if !part.last && upto.is_none() {
            return Ok(());
        }
        let sent: BTreeSet<&str> = carried.iter().map(|c| c.name.as_str()).collect();
        for local in snaps::companions(&*self.store, coll, &head.name)? {
            let covered = after.is_none_or(|a| local.as_str() > a) && upto.is_none_or(|u| local.as_str() <= u);
            if covered && !sent.contains(local.as_str()) {
                txn.remove(coll, &local);
            }
        }
        Ok(())
    }

    pub(super) fn install_part(
        &mut self,
        pg: PgId,
        copies: Vec<ObjectCopy>,
        data: bytes::Bytes,
        backfill: Option<BackfillRange>,
        part: PushPart,
        keep_missing: bool,
    ) -> Result<(), RemoteError> {
        let invalid = |why: &str| Err(RemoteError::new(ErrorCode::Invalid, format!("part push for PG {pg}: {why}")));
        let Some((copy, companions)) = copies.split_first() else {
            return invalid("it must carry an object");
        };
        if !companions.is_empty() && backfill.is_some() {
            return invalid("only a recovery's parts carry other objects (the companions)");
        }
        let prefix = crate::snaps::companion_prefix(&copy.name);
        if companions.iter().any(|c| !c.name.starts_with(&prefix)) {
            return invalid("it carries objects that are not its object's companions");
        }
        if let Some(range) = &backfill
            && range.upto.as_deref() != Some(copy.name.as_str())
        {
            return invalid("its range must end at its object");
        }
        let companion_bytes: u64 = companions.iter().map(|c| c.size_bytes).sum();
        let Some(part_bytes) = (data.len() as u64).checked_sub(companion_bytes) else {
            return invalid("its companions name more bytes than it carries");
        };
        let part_data = data.slice(..part_bytes as usize);
        let companion_datas = split_data(companions, data.slice(part_bytes as usize..))?;
        let (coll, lcoll, mut txn) = self.install_txn(pg);
        if let Some(range) = backfill.as_ref().filter(|_| part.at.is_start() && self.collections.contains(&coll)) {
            for local in list_range(&*self.store, &coll, range.after.as_deref(), Some(&copy.name), usize::MAX)? {
                if local != copy.name {
                    txn.remove(&coll, &local);
                }
            }
        } else if backfill.is_none() && self.collections.contains(&coll) {
            if self.mutations.first_part_clears_companions {
                if part.at.is_start() {
                    remove_stale_companions(&mut txn, &*self.store, &coll, &copies, &[])?;
                }
            } else {
                self.remove_companions_a_part_covers(&mut txn, &coll, copy, companions, &part)?;
            }
        }
        apply_part(&mut txn, &*self.store, &coll, copy, &part, part_data, !companions.is_empty())?;
        for (c, bytes) in companions.iter().zip(companion_datas) {
            apply_copy(&mut txn, &*self.store, &coll, c, bytes)?;
        }
        // Recovered: the companions (whole) now, the object with its last part.
        let recovered: Vec<String> = {
            let meta = self.meta_mut(pg)?;
            let done = companions.iter().chain(part.last.then_some(copy));
            done.filter(|c| !keep_missing && meta.missing.contains_key(&c.name)).map(|c| c.name.clone()).collect()
        };
        for name in &recovered {
            PgMeta::write_recovered(&mut txn, pg, name);
        }
        if part.last && backfill.is_some() {
            PgMeta::write_backfill(&mut txn, pg, Some(&copy.name));
        }
        self.store.commit(txn, Durability::Batch).map_err(|e| store_error(&e))?;
        self.collections.insert(coll);
        self.collections.insert(lcoll);
        let meta = self.meta_mut(pg)?;
        for name in &recovered {
            meta.recovered(name);
        }
        if part.last && backfill.is_some() {
            meta.backfill = Some(copy.name.clone());
        }
        Ok(())
    }

    /// Strays ask the primaries of the PGs they hold whether they may remove them.
    pub(super) fn ask_strays(&mut self, out: &mut Vec<Action>) {
        let strays: Vec<PgId> = self
            .pgs
            .iter()
            .filter(|(pg, s)| matches!(s.role, Role::Stray) && !self.strays_asking.contains(pg))
            .map(|(pg, _)| *pg)
            .collect();
        for pg in strays {
            let Some(&primary) = self.map.pg_osds(pg).unwrap_or_default().first() else { continue };
            self.strays_asking.insert(pg);
            let q = PgStray { epoch: self.map.epoch, pool: pg.pool, pg: pg.seed, osd: self.id };
            out.push(Action::Peer {
                osd: primary,
                msg_type: PgStray::TYPE,
                payload: encode(&q, Vec::new()),
                call: PeerCall::Stray { pg },
            });
        }
    }

    /// The primary's answer to a stray: purge the copy if the PG is clean without this OSD.
    pub(super) fn stray_answered(&mut self, pg: PgId, result: Result<bool, RemoteError>) {
        self.strays_asking.remove(&pg);
        let still_stray = matches!(self.pgs.get(&pg), Some(PgState { role: Role::Stray, .. }))
            && !self.map.pg_osds(pg).unwrap_or_default().contains(&self.id);
        if result == Ok(true) && still_stray {
            tracing::info!(%pg, "PG clean elsewhere: removing this OSD's stray copy");
            // The objects go a few at a time, so first the copy is marked untrustworthy in one
            // transaction: its log goes and its record says "backfill from the start". If the PG
            // comes back here before the purge ends, peering backfills it instead of trusting a
            // half-removed copy.
            let lcoll = log_collection(pg);
            if self.collections.contains(&lcoll) {
                let mut txn = Transaction::new();
                if self.store.exists(&lcoll, crate::pglog::LOG_OBJECT).unwrap_or(true) {
                    txn.remove(&lcoll, crate::pglog::LOG_OBJECT);
                }
                PgMeta { les: 0, backfill: Some(String::new()), ..PgMeta::default() }.write_whole(&mut txn, pg);
                if let Err(e) = self.store.commit(txn, Durability::Batch) {
                    tracing::error!(%pg, error = %e, "marking a stray copy for removal failed; kept");
                    return;
                }
            }
            self.pgs.remove(&pg);
            self.logs.remove(&pg);
            self.metas.remove(&pg);
            // The data before the log collection (which holds the mark).
            for coll in [pg_collection(pg), lcoll] {
                if self.collections.contains(&coll) && !self.purge.contains(&coll) {
                    self.purge.push_back(coll);
                }
            }
        }
    }

    /// The primary's side of a stray's question.
    pub(super) fn on_stray_question(&mut self, from: u64, request_id: u64, q: PgStray, out: &mut Vec<Action>) {
        let pg = PgId { pool: q.pool, seed: q.pg };
        let empty = PgMeta::default();
        let own = self.metas.get(&pg).unwrap_or(&empty);
        let mut probe = false;
        let size = self.map.pools.get(&pg.pool).map_or(usize::MAX, |pool| pool.size as usize);
        let clean = match self.pgs.get_mut(&pg) {
            Some(PgState { role: Role::Primary(p), .. }) => {
                if !p.acting.contains(&q.osd) && p.known_strays.insert(q.osd) {
                    probe = !p.unfound.is_empty();
                }
                // Only a recorded activation is the PG's history: a recovery-only one (below
                // min_size) may have rolled back entries that a later peering restores. And only
                // a PG with as many members as the pool's size lets a stray go: while it is
                // undersized the stray's copy is one of the few left (an OSD that restarts asks
                // as a stray until the monitors mark it up, and its copy, which a comparing
                // backfill would mostly keep, would be thrown away and sent again in full).
                !p.recovery_only
                    && p.acting.len() >= size
                    && p.is_clean(own)
                    && p.recovering.is_empty()
                    && !p.acting.contains(&q.osd)
            }
            _ => false,
        };
        if clean {
            tracing::debug!(%pg, stray = %q.osd, "told a stray the PG is clean without it");
        }
        let reply = PgStrayReply { epoch: self.map.epoch, result: Ok(clean) };
        out.push(Action::Reply { to: from, frame: reply_frame(request_id, &reply, Vec::new()), after_sync: false });
        if probe {
            self.probe_strays(pg, out);
        }
    }

    /// Queries the strays of `pg` not yet asked for their state: one whose log shares the PG's
    /// history becomes a source for the objects it holds (an unfound object may be on an OSD
    /// of an earlier interval that no longer acts for the PG).
    pub(super) fn probe_strays(&mut self, pg: PgId, out: &mut Vec<Action>) {
        let epoch = self.map.epoch;
        let versions_of = self.versions_wanted(pg);
        let Some(PgState { role: Role::Primary(p), .. }) = self.pgs.get_mut(&pg) else { return };
        let ask: Vec<OsdId> = p.probe_targets(&self.map).collect();
        for osd in ask {
            p.probing.insert(osd);
            let q = shoal_proto::osd::PeerQuery { epoch, pool: pg.pool, pg: pg.seed, versions_of: versions_of.clone() };
            out.push(Action::Peer {
                osd,
                msg_type: shoal_proto::osd::PeerQuery::TYPE,
                payload: encode(&q, Vec::new()),
                call: PeerCall::Probe { pg, attempt: p.attempt },
            });
        }
    }

    /// A stray's state: compared with this primary's log (the authority's since activation), it
    /// becomes a source of every object it holds current; unfound objects are tried again.
    pub(super) fn probed(
        &mut self,
        pg: PgId,
        attempt: u64,
        from: OsdId,
        result: Result<shoal_proto::osd::PeerState, RemoteError>,
        out: &mut Vec<Action>,
    ) {
        let Some(p) = self.primary_at(pg, attempt) else { return };
        p.probing.remove(&from);
        let state = match result {
            Ok(s) => {
                p.probe_failed.remove(&from);
                p.probe_answered.insert(from);
                s
            }
            Err(e) => {
                if p.probe_failed.insert(from) {
                    tracing::info!(%pg, stray = %from, error = %e, "stray did not answer a probe (retried quietly)");
                } else {
                    tracing::debug!(%pg, stray = %from, error = %e, "stray did not answer a probe again");
                }
                return;
            }
        };
        let own = match self.local_peer_state(pg, &[]) {
            Ok(s) => s,
            Err(e) => return tracing::error!(%pg, error = %e, "cannot read own PG log to compare a stray's"),
        };
        let needs = self.metas.get(&pg).map(|m| m.missing.clone()).unwrap_or_default();
        let Some(p) = self.primary_at(pg, attempt) else { return };
        match crate::merge::plan_member(&own.log, own.tail, &state) {
            crate::merge::MemberPlan::Log { missing, remove } => {
                tracing::info!(%pg, stray = %from, "stray shares the PG's history: a source for unfound objects");
                // It holds the objects it would remove, but not as the PG's history wrote them.
                p.sources.insert(from, missing.into_keys().chain(remove).collect());
            }
            crate::merge::MemberPlan::Resume { .. } | crate::merge::MemberPlan::Backfill => {
                // Its log no longer meets this one (trimmed past it while it was away), or it was
                // being backfilled; yet it may still hold some missing objects at exactly the
                // version needed.
                let mut holds = crate::merge::held_at_needed_version(&state, &needs);
                // A copy it could not provide when pulled is named again by every probe (its
                // stored version is intact, its data damaged): believed, it is pulled and fails
                // again for ever, the object never settles as unfound, and an operator's
                // decision waits on the probes for ever (decision 0083).
                holds.retain(|object| !p.holders_failed.contains(&(from, object.clone())));
                if holds.is_empty() {
                    return;
                }
                tracing::info!(%pg, stray = %from, objects = ?holds, "stray holds missing objects at the versions needed");
                p.holders.insert(from, holds);
            }
        }
        let unfound: Vec<String> = std::mem::take(&mut p.unfound).into_iter().collect();
        for object in unfound {
            self.recover_object(pg, &object, out);
        }
    }

    /// Stops purging `pg`'s collections: the PG is in use here again.
    pub(super) fn cancel_purge(&mut self, pg: PgId) {
        let names = [pg_collection(pg), log_collection(pg)];
        self.purge.retain(|c| !names.contains(c));
    }
}

/// Whether `pull` may be answered although this member records its object missing, if the record
/// is for damage only (decision 0064): a whole head (not a part; a part pull never leaves clones
/// out) for a puller that holds clones whole, whose left-out clones may be the damaged ones here.
fn may_send_around_damage(pull: &PgPull) -> bool {
    pull.part.is_none() && !pull.kept.is_empty() && !crate::snaps::is_companion(&pull.object)
}

/// Whether `object`, recorded missing here, is so only because a copy here was found damaged
/// (`OsdCore::mark_own_missing` records the version stored with the copy as the one needed, so
/// the head here is at it; a member lacking writes needs a newer version than the one it stores),
/// and not past a backfill cursor. The copy is sent only if every part of it the pull does not
/// leave out reads back whole: the damaged clones must be among those the puller holds.
fn missing_only_for_damage(meta: &PgMeta, object: &str, head_version: Option<Eversion>) -> bool {
    let recorded = meta.missing.get(object).copied();
    let within_cursor = meta.backfill.as_deref().is_none_or(|c| object <= c);
    within_cursor && recorded.is_some_and(|need| need != Eversion::default() && Some(need) == head_version)
}

/// Whether an operator's revert asks for this member's copy of `object` at exactly the version
/// it stores (`stale_ok`, decision 0066), and the copy is within any backfill cursor (past it,
/// the copy may be from before writes the member never got).
fn stale_copy_asked(meta: &PgMeta, object: &str, stale_ok: bool) -> bool {
    stale_ok && meta.backfill.as_deref().is_none_or(|c| object <= c)
}

/// Whether `pull` is vouched for by the primary and only this member's backfill cursor (not a
/// recorded missing object) stands in its way.
fn vouched_past_cursor(meta: &PgMeta, pull: &PgPull) -> bool {
    pull.vouched && meta.backfill.is_some() && !meta.missing.contains_key(&pull.object)
}

/// Whether head `head`, which a backfill cursor here has reached but maybe not passed with all
/// its companions (`snaps::cursor_splits`), may have clones this member does not hold yet: its
/// snapshot state (on the head, which backfill sent whole with the state as the primary had it,
/// and every write since reached in full) names clones, or the head is absent (its state is then
/// on a snapshot directory that sorts after the cursor). A store error counts as "may".
fn clones_may_be_past_cursor(store: &dyn shoal_store::ObjectStore, coll: &str, head: &str) -> bool {
    match store.exists(coll, head) {
        Ok(true) => crate::snaps::load(store, coll, head, true).map_or(true, |(set, _)| !set.is_empty()),
        _ => true,
    }
}

/// Whether the snapshot state of `head` (on the head, or on its snapshot directory when the head
/// is absent) names a clone this store does not hold. A store error counts as "names one".
fn names_absent_clone(store: &dyn shoal_store::ObjectStore, coll: &str, head: &str) -> bool {
    let Ok(exists) = store.exists(coll, head) else { return true };
    let Ok((set, _)) = crate::snaps::load(store, coll, head, exists) else { return true };
    !matches!(crate::snaps::first_absent_clone(store, coll, head, &set), Ok(None))
}

/// A backfill cursor past every object name (names are UTF-8 of at most 255 bytes, and U+10FFFF
/// is the largest scalar value).
pub(crate) const LAST_NAME: &str = "\u{10ffff}";

/// The `recover_heads_only` mutation: the first copy (the head, whose bytes come first in
/// `data`) without its companions.
fn head_only(mut copies: Vec<ObjectCopy>, data: &mut Vec<u8>) -> Vec<ObjectCopy> {
    copies.truncate(1);
    if let Some(head) = copies.first() {
        data.truncate(usize::try_from(head.size_bytes).unwrap_or(usize::MAX));
    }
    copies
}
