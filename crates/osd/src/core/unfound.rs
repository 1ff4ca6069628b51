//! Objects no member that is up can provide (`+unfound`), and the operator's ways out of them on
//! the PG's primary: name them (`shoal pg list-unfound`), give them up (`mark-unfound-lost
//! delete`), or keep the copy the primary still holds, older than the version its log names
//! (`mark-unfound-lost revert`, decision 0052).
//!
//! Both ways out end with a write that goes through the PG's replicated write path ahead of
//! every operation waiting for the object, with a request id no client uses, so that the PG log
//! records the operator's decision on every member like any client write (a member that comes
//! back later rolls forward to it like any write it missed).

use shoal_map::{OsdId, PgId};
use std::collections::BTreeSet;

use shoal_proto::osd::{DECIDE_AGAIN, Eversion, ObjOp, OsdOp, ReqId, RevertReport, UnfoundReport};
use shoal_proto::{ErrorCode, Message, RemoteError};
use shoal_store::{Durability, Transaction};

use super::peering::{PgState, Primary, Role};
use super::{Action, Event, OsdCore, Token};
use crate::exec::{pg_collection, store_error};

use crate::pglog::{LOST_CLIENT, REVERT_CLIENT};
/// Where the answers to those writes go: nowhere (no connection has this token).
const NOBODY: Token = u64::MAX;

/// Whether a write from `from` is an operator's decision logged by this primary (never a resend:
/// it is issued once, so it is applied even when its request id is already in the log — a
/// revert's id may repeat, and a rolled-back write logged again may be there already).
pub(super) fn is_decision(from: Token) -> bool {
    from == NOBODY
}

/// `events` without the operator's decisions among them, each dropped with a warning: a
/// decision is made for one peering attempt of its PG (see `Primary::decided`), and its object
/// stays unfound until the operator decides again.
pub(super) fn drop_decisions(events: Vec<Event>) -> Vec<Event> {
    events
        .into_iter()
        .filter(|ev| match ev {
            Event::ClientOp { from, op, .. } if is_decision(*from) => {
                tracing::warn!(
                    pg = %PgId { pool: op.pool, seed: op.pg },
                    object = %op.object,
                    "an operator's decision was not logged before its PG peered again: the object stays unfound; decide again"
                );
                false
            }
            _ => true,
        })
        .collect()
}

/// Counts one of the decision writes on `object` answered (see `Primary::unacked_decisions`).
fn answered(p: &mut Primary, object: &str) {
    if let Some(left) = p.unacked_decisions.get_mut(object) {
        *left = left.saturating_sub(1);
        if *left == 0 {
            p.unacked_decisions.remove(object);
        }
    }
}

impl OsdCore {
    /// Gives `pg`'s unfound objects up as lost (an operator's decision: no member that holds
    /// them will come back). For each: the primary's own head is removed, its snapshot clones
    /// kept (they hold acknowledged snapshots; the state moves to the snap directory, as a
    /// client's removal moves it); then a removal of the object is logged and replicated (see
    /// the module's comment): members that lack the object are pushed the primary's copy first
    /// (no head, the same clones), and the replicas drop their heads. Missing records, here and
    /// on the members pushed to, go with the removal's log entry (`Primary::decided`, decision
    /// 0070): a removal that is never logged leaves the object unfound. The operations waiting
    /// for the object run after it and see it absent. Returns the objects given up.
    ///
    /// A resend of a write the removal gave up is applied again, on the absent object (see
    /// [`OsdCore::given_up_by_decision`]): answered from the log, its client would take a write
    /// for stored that is gone.
    pub(super) fn mark_unfound_lost(&mut self, pg: PgId, out: &mut Vec<Action>) -> Result<Vec<String>, RemoteError> {
        self.check_every_holder_asked(pg, out)?;
        let objects = self.unfound_objects(pg);
        let coll = pg_collection(pg);
        for object in &objects {
            let mut txn = Transaction::new();
            if self.mutations.lose_clones_with_lost_head {
                crate::copy::remove_whole(&mut txn, &*self.store, &coll, std::slice::from_ref(object))?;
            } else {
                crate::snaps::remove_head_keeping_clones(&mut txn, &*self.store, &coll, object)?;
            }
            // The missing record stays until the logged removal commits (`Primary::decided`):
            // should that never happen, the object is still unfound here, its head gone.
            self.store.commit(txn, Durability::Batch).map_err(|e| store_error(&e))?;
            tracing::warn!(
                %pg,
                object,
                "unfound object given up as lost by an operator: its head removed on every member, its snapshots kept"
            );
            // A request id no client uses, unique in the PG's history: the epoch and a count of
            // such removals issued here (one OSD alone leads a PG at an epoch, and an OSD that
            // restarts comes back at a later one). Not the sequence the PG's log has reached: a
            // removal waiting for members to be recovered first leaves the log where it was, and
            // the next object's removal took the same id, was answered as a resend of the
            // first, and was never logged.
            let reqid = ReqId { client: LOST_CLIENT, tid: (self.map.epoch << 32) | u64::from(self.lost_removals) };
            self.lost_removals = self.lost_removals.wrapping_add(1);
            // Whatever the members hold (a stale copy, nothing): created if absent, then removed.
            let ops = vec![ObjOp::Create { exclusive: false }, ObjOp::Remove];
            if !self.log_decisions(pg, object, vec![(reqid, ops)], out)? {
                break;
            }
        }
        Ok(objects)
    }

    /// Reverts `pg`'s unfound objects to the copies this primary holds (an operator's decision:
    /// the newest writes of each, which no member that is up holds, are given up). For each
    /// object whose copy here reads back whole (with its clones): a write that changes nothing is
    /// logged and replicated (see the module's comment), and its log entry removes the object's
    /// missing record, here and on every member the copy was pushed to, in the same transaction
    /// (decision 0070; a revert that is never logged leaves the object unfound). Members that lack the object are pushed
    /// this copy before the write applies, as for any write of an object a member lacks, so every
    /// copy ends as this one, stored at the new write's version, and the PG's log and its stores
    /// agree again. Objects with no readable copy here stay unfound, with the reason.
    ///
    /// A resend of a write that was given up is applied again, on the kept copy (see
    /// [`OsdCore::given_up_by_decision`]).
    ///
    /// A copy at a version the PG's log does not name, though the log reaches back that far,
    /// holds writes the history rolled back (decision 0063): their clients were never answered
    /// and resend them. It is kept only if this OSD recorded those writes when its log rolled
    /// them back; then each is logged again after the revert, under its own request id, with
    /// writes that change nothing, so that a resend is answered as done (the copy holds it)
    /// instead of applied a second time. Without a record it stays unfound, with the reason.
    pub(super) fn revert_unfound(&mut self, pg: PgId, out: &mut Vec<Action>) -> Result<RevertReport, RemoteError> {
        self.check_every_holder_asked(pg, out)?;
        self.check_copies_elsewhere_known(pg, out)?;
        let mut report = RevertReport::default();
        let coll = pg_collection(pg);
        let unfound = self.unfound_objects(pg);
        // Read once: the reverts below add entries only at new versions, never at a kept
        // copy's older one.
        let entries = if unfound.is_empty() {
            Vec::new()
        } else {
            crate::pglog::read_entries(&*self.store, pg).map_err(|e| store_error(&e))?
        };
        let log_tail = entries.first().map(|e| e.version);
        for object in unfound {
            let local = self.kept_copy_version(&coll, &object, true);
            // A newer copy of the object's history on another OSD is kept instead: pulled here
            // first, and kept by the operator's next revert (decision 0066).
            let newer = self
                .newest_copy_elsewhere(pg, &object, &entries, log_tail)
                .filter(|(_, v)| local.as_ref().is_err() || local.as_ref().is_ok_and(|held| v > held));
            if let Some((osd, version)) = newer {
                let vouched = self.version_of_history(pg, &object, version, &entries, log_tail)?;
                let why = self.pull_to_revert(pg, &object, (osd, version, vouched), &local, out);
                report.unfound.push((object, why));
                continue;
            }
            let held = match local {
                Ok(held) => held,
                Err(why) => {
                    report.unfound.push((object, why));
                    continue;
                }
            };
            let decisions = match self.revert_decisions(pg, &object, held, &entries, log_tail) {
                Ok(decisions) => decisions,
                Err(why) => {
                    report.unfound.push((object, why));
                    continue;
                }
            };
            tracing::warn!(%pg, object, version = %held, rolled_back_writes = decisions.len() - 1, "unfound object reverted by an operator to the copy its primary holds");
            if !self.log_decisions(pg, &object, decisions, out)? {
                break;
            }
            report.reverted.push((object, held));
        }
        Ok(report)
    }

    /// Refuses a revert until every other OSD that is up and acts for `pg`, or is a known stray
    /// of it, has said which versions of the unfound objects it stores (asked once per attempt
    /// about each unfound object; decisions 0066 and 0087): a revert keeps the newest copy of
    /// each object's history, wherever it is.
    fn check_copies_elsewhere_known(&mut self, pg: PgId, out: &mut Vec<Action>) -> Result<(), RemoteError> {
        if self.mutations.revert_primary_copy_only {
            return Ok(());
        }
        let epoch = self.map.epoch;
        let me = self.id;
        let once_per_attempt = self.mutations.ask_copies_once_per_attempt;
        let up = |o: &OsdId| self.map.osds.get(o).is_some_and(|i| i.up);
        let Some(PgState { role: Role::Primary(p), .. }) = self.pgs.get_mut(&pg) else { return Ok(()) };
        if p.unfound.is_empty() {
            return Ok(());
        }
        let candidates: BTreeSet<OsdId> = p
            .acting
            .iter()
            .chain(p.known_strays.iter())
            .copied()
            .filter(|o| *o != me && up(o) && !p.elsewhere_waiting.contains(o))
            .collect();
        for osd in candidates {
            // The unfound objects this OSD was not asked about yet: an object found unfound
            // after the OSD answered is asked about too, or the revert would report it with no
            // copy anywhere and invite deleting its acknowledged writes (decision 0087).
            let asked = p.elsewhere_asked.entry(osd).or_default();
            if once_per_attempt && !asked.is_empty() {
                continue;
            }
            let versions_of: Vec<String> = p
                .unfound
                .iter()
                .filter(|o| !asked.contains(*o))
                .take(shoal_proto::osd::PEER_QUERY_VERSIONS_MAX)
                .cloned()
                .collect();
            if versions_of.is_empty() {
                continue;
            }
            asked.extend(versions_of.iter().cloned());
            p.elsewhere_waiting.insert(osd);
            let q = shoal_proto::osd::PeerQuery { epoch, pool: pg.pool, pg: pg.seed, versions_of };
            out.push(Action::Peer {
                osd,
                msg_type: shoal_proto::osd::PeerQuery::TYPE,
                payload: shoal_proto::encode(&q, Vec::new()),
                call: super::PeerCall::CopiesElsewhere { pg, attempt: p.attempt },
            });
        }
        if p.elsewhere_waiting.is_empty() {
            return Ok(());
        }
        let waiting: Vec<String> = p.elsewhere_waiting.iter().map(ToString::to_string).collect();
        Err(RemoteError::new(
            ErrorCode::TryAgain,
            format!(
                "PG {pg}'s primary is asking {} which copies of its unfound objects they hold (a revert keeps the newest): \
                 {DECIDE_AGAIN}",
                waiting.join(", ")
            ),
        ))
    }

    /// An OSD's answer to [`OsdCore::check_copies_elsewhere_known`]: the versions it stores of
    /// the unfound objects. An answer lost on the way (no answer, a broken connection) is asked
    /// for again by the next revert, which refuses until then: the OSD is up and may hold the
    /// only copy of acknowledged writes, and a revert that counted it as holding nothing would
    /// report the object lost and lead the operator to delete it (decision 0081). An OSD that
    /// refuses the question (it does not know the PG) counts as holding none of them; one that
    /// is down is not asked (a revert waits for down OSDs to come back or be removed first).
    pub(super) fn copies_reported(
        &mut self,
        pg: PgId,
        attempt: u64,
        from: OsdId,
        result: Result<shoal_proto::osd::PeerState, RemoteError>,
    ) {
        let forget_lost = !self.mutations.unanswered_copies_count_as_none;
        let Some(p) = self.primary_at(pg, attempt) else { return };
        p.elsewhere_waiting.remove(&from);
        match result {
            Ok(state) => {
                for (object, version) in state.versions {
                    if p.unfound.contains(&object) {
                        p.elsewhere.entry(object).or_default().insert(from, version);
                    }
                }
            }
            Err(e) if e.code == ErrorCode::Timeout && forget_lost => {
                tracing::info!(%pg, osd = %from, error = %e, "no answer about copies of unfound objects: asked again by the next revert");
                p.elsewhere_asked.remove(&from);
            }
            Err(e) => {
                tracing::info!(%pg, osd = %from, error = %e, "an OSD refused to say which copies of unfound objects it holds: counted as none")
            }
        }
    }

    /// The OSD (other than this one, up) storing the newest copy of `object` that is a version
    /// of its history — one the PG's log names for it, or older than the log reaches — and that
    /// version. A copy at a version the log does not name holds writes the history rolled back,
    /// whose records are on that OSD: never pulled to be kept here.
    fn newest_copy_elsewhere(
        &self,
        pg: PgId,
        object: &str,
        entries: &[crate::pglog::LogEntry],
        log_tail: Option<Eversion>,
    ) -> Option<(OsdId, Eversion)> {
        let p = self.primary(pg)?;
        let up = |o: &OsdId| self.map.osds.get(o).is_some_and(|i| i.up);
        let of_history = |v: &Eversion| {
            log_tail.is_none_or(|oldest| *v < oldest) || entries.iter().any(|e| e.version == *v && e.object == object)
        };
        p.elsewhere
            .get(object)?
            .iter()
            .filter(|(o, v)| **o != self.id && up(o) && of_history(v))
            .max_by_key(|(_, v)| **v)
            .map(|(o, v)| (*o, *v))
    }

    /// Whether `version`, chosen for `object` by [`Self::newest_copy_elsewhere`], is certainly
    /// a write of `pg`'s history: named for the object by the log (`entries`), or older than the
    /// log's tail and trimmed into its dups. A copy stored at such a version is that write's
    /// object on any OSD, one being backfilled included: versions are unique in a PG's history,
    /// and a copy gets its version only once it holds all of it. A version older than the log
    /// that the dups do not name may be a write some history rolled back whose record was
    /// trimmed (decision 0053): its copy is taken only from within a backfill cursor, as before
    /// (decision 0082).
    fn version_of_history(
        &self,
        pg: PgId,
        object: &str,
        version: Eversion,
        entries: &[crate::pglog::LogEntry],
        log_tail: Option<Eversion>,
    ) -> Result<bool, RemoteError> {
        if self.mutations.revert_pulls_within_cursor_only {
            return Ok(false);
        }
        if entries.iter().any(|e| e.version == version && e.object == object) {
            return Ok(true);
        }
        if log_tail.is_some_and(|tail| version >= tail) {
            return Ok(false);
        }
        let Some(log) = self.logs.get(&pg) else { return Ok(false) };
        log.dups_hold_version(&*self.store, pg, version).map_err(|e| store_error(&e))
    }

    /// Pulls `osd`'s copy of `object` at `version` to be kept by the next revert (unless a pull
    /// of it is on its way already), and says so for the report (`local`: why this primary's own
    /// copy is not kept, or its version).
    fn pull_to_revert(
        &mut self,
        pg: PgId,
        object: &str,
        (osd, version, vouched): (OsdId, Eversion, bool),
        local: &Result<Eversion, String>,
        out: &mut Vec<Action>,
    ) -> String {
        let own = match local {
            Ok(held) => format!("newer than {}'s, at {held}", self.id),
            Err(why) => format!("and {why}"),
        };
        let kept = self.clones_held_whole(pg, object);
        let epoch = self.map.epoch;
        let Some(PgState { role: Role::Primary(p), .. }) = self.pgs.get_mut(&pg) else {
            return format!("{osd} holds it at {version}, {own}: this OSD no longer leads the PG");
        };
        if p.revert_pulls.contains_key(object) || p.recovering.contains_key(object) {
            return format!(
                "{osd} holds it at {version}, {own}: its copy is on its way here; decide again once it has arrived"
            );
        }
        // In parts whenever it does not fit one message (see `RevertPull`), unless undone.
        let in_parts = local.is_err() || !self.mutations.revert_in_parts_only_without_a_copy;
        p.revert_pulls.insert(object.to_string(), super::RevertPull { source: osd, version, in_parts, vouched });
        p.recovering.insert(object.to_string(), BTreeSet::from([osd]));
        let pull = shoal_proto::osd::PgPull {
            epoch,
            pool: pg.pool,
            pg: pg.seed,
            object: object.to_string(),
            vouched,
            part: None,
            kept,
            stale_at: Some(version),
        };
        out.push(Action::Peer {
            osd,
            msg_type: shoal_proto::osd::PgPull::TYPE,
            payload: shoal_proto::encode(&pull, Vec::new()),
            call: super::PeerCall::Pull { pg, attempt: p.attempt, object: object.to_string() },
        });
        tracing::warn!(%pg, object, source = %osd, %version, "revert: pulling the newest copy of the object's history to keep it");
        format!("{osd} holds it at {version}, {own}: pulling that copy here; decide again once it has arrived")
    }

    /// The writes that record the revert of `object` to this OSD's copy at version `held`, in
    /// order (see [`OsdCore::revert_unfound`]; `entries`: the PG's log, `log_tail`: its oldest
    /// entry's version): the revert itself, then for a copy holding writes the PG's history rolled
    /// back, each of those writes again. Or why the copy cannot be kept.
    fn revert_decisions(
        &self,
        pg: PgId,
        object: &str,
        held: Eversion,
        entries: &[crate::pglog::LogEntry],
        log_tail: Option<Eversion>,
    ) -> Result<Vec<(ReqId, Vec<ObjOp>)>, String> {
        let create = ObjOp::Create { exclusive: false };
        let in_log = entries.iter().any(|e| e.version == held && e.object == object);
        // A copy older than the log's oldest entry is taken as history (the log no longer shows
        // which writes it held; a rolled-back one that old would have to outlive a whole log).
        let below_log = log_tail.is_none_or(|oldest| held < oldest);
        if in_log || below_log || self.mutations.keep_rolled_back {
            return Ok(vec![(ReqId { client: REVERT_CLIENT, tid: held.seq }, vec![create])]);
        }
        let meta = self.metas.get(&pg);
        let Some(copy) =
            meta.and_then(|m| m.held_divergent.get(object)).filter(|c| c.writes.iter().any(|w| w.version == held))
        else {
            let need = meta.and_then(|m| m.missing.get(object)).copied().unwrap_or_default();
            return Err(format!(
                "{}'s copy is at version {held}, a write the PG's history rolled back, and which such writes it holds is \
                 not recorded: keeping it could apply a client's resend of one twice (delete it, or bring back an OSD \
                 that holds version {need})",
                self.id
            ));
        };
        let mut decisions = vec![(ReqId { client: REVERT_CLIENT, tid: copy.common.seq }, vec![create.clone()])];
        for w in copy.writes.iter().filter(|w| w.version <= held) {
            // As many operations as the write had (bounded when recorded): its resend is
            // answered with one result per operation.
            decisions.push((w.reqid, vec![create.clone(); w.op_count as usize]));
        }
        Ok(decisions)
    }

    /// Refuses an operator's decision on `pg`'s unfound objects while an OSD that may hold them
    /// has not been asked (Ceph refuses `mark_unfound_lost` the same way until every location
    /// that might have them is probed or declared lost): any OSD that is down — it may hold the
    /// newest copies, and starting it again finds them; one whose disk is gone is removed first
    /// (`shoal osd rm`), which declares its data lost — and any stray that is up and has not
    /// answered a probe since this primary leads the PG (it is asked now). The check is made
    /// before anything is changed; the operator repeats the command once it passes.
    fn check_every_holder_asked(&mut self, pg: PgId, out: &mut Vec<Action>) -> Result<(), RemoteError> {
        let Some(PgState { role: Role::Primary(p), .. }) = self.pgs.get(&pg) else { return Ok(()) };
        if p.unfound.is_empty() || self.mutations.skip_holder_check {
            return Ok(());
        }
        let down: Vec<String> =
            self.map.osds.iter().filter(|(_, info)| !info.up).map(|(osd, _)| osd.to_string()).collect();
        if !down.is_empty() {
            return Err(RemoteError::new(
                ErrorCode::Other,
                format!(
                    "PG {pg} has {} unfound object(s), and {} is down and may hold them: start it again (the objects \
                     are then found), or if its disk is lost remove it for good (`shoal osd rm ID \
                     --yes-i-really-mean-it`); then decide again",
                    p.unfound.len(),
                    down.join(", ")
                ),
            ));
        }
        let unasked: Vec<OsdId> = p.probe_targets(&self.map).filter(|o| !p.probe_answered.contains(o)).collect();
        if unasked.is_empty() && p.probing.is_empty() {
            return Ok(());
        }
        let asking: Vec<String> = unasked.iter().chain(&p.probing).map(ToString::to_string).collect();
        let message = format!(
            "PG {pg}'s primary is still asking {} (strays holding copies of the PG, or members being backfilled) whether they \
             hold its unfound objects: {DECIDE_AGAIN}",
            asking.join(", ")
        );
        self.probe_strays(pg, out);
        Err(RemoteError::new(ErrorCode::TryAgain, message))
    }

    /// `pg`'s unfound objects with the versions needed, the strays known and being asked, and
    /// what a revert would do with each (`revert_preview`).
    pub(super) fn unfound_report(&self, pg: PgId) -> UnfoundReport {
        let needs = self.metas.get(&pg).map(|m| &m.missing);
        let Some(PgState { role: Role::Primary(p), .. }) = self.pgs.get(&pg) else { return UnfoundReport::default() };
        let objects: Vec<(String, Eversion)> =
            p.unfound.iter().map(|o| (o.clone(), needs.and_then(|n| n.get(o)).copied().unwrap_or_default())).collect();
        let strays = p.known_strays.iter().copied().collect();
        let probing = p.probing.iter().copied().collect();
        let entries = if objects.is_empty() { Ok(Vec::new()) } else { crate::pglog::read_entries(&*self.store, pg) };
        let revert = match entries {
            Ok(entries) => objects.iter().map(|(o, _)| self.revert_preview(pg, o, &entries)).collect(),
            Err(e) => objects.iter().map(|_| Err(format!("{} cannot read the PG's log: {e}", self.id))).collect(),
        };
        let deciding: BTreeSet<&String> = p.decided.iter().chain(p.unacked_decisions.keys()).collect();
        let deciding = deciding.into_iter().cloned().collect();
        UnfoundReport { objects, strays, probing, revert, deciding }
    }

    /// What a revert of unfound `object` would keep now — the version of this primary's copy, or
    /// of a newer one another OSD reported to an earlier revert — or why it would keep nothing,
    /// without reading the copy's data (the revert itself checks that it reads back whole).
    /// `entries`: the PG's log.
    fn revert_preview(&self, pg: PgId, object: &str, entries: &[crate::pglog::LogEntry]) -> Result<Eversion, String> {
        let log_tail = entries.first().map(|e| e.version);
        let own = self
            .kept_copy_version(&pg_collection(pg), object, false)
            .and_then(|held| self.revert_decisions(pg, object, held, entries, log_tail).map(|_| held));
        // A newer copy another OSD reported (decision 0066; known once a revert asked).
        match (own, self.newest_copy_elsewhere(pg, object, entries, log_tail)) {
            (Ok(held), Some((_, v))) if v > held => Ok(v),
            (Err(_), Some((_, v))) => Ok(v),
            (own, _) => own,
        }
    }

    fn unfound_objects(&self, pg: PgId) -> Vec<String> {
        match self.pgs.get(&pg) {
            Some(PgState { role: Role::Primary(p), .. }) => p.unfound.iter().cloned().collect(),
            _ => Vec::new(),
        }
    }

    /// The version stored with this OSD's copy of `object`, if the copy exists and carries one
    /// and, with `check_data`, it and its clones read back whole; else why it cannot be kept.
    /// Reads the data a piece at a time: nothing is kept in memory.
    fn kept_copy_version(&self, coll: &str, object: &str, check_data: bool) -> Result<Eversion, String> {
        let me = self.id;
        if crate::snaps::is_companion(object) {
            return Err(format!("{object} is a clone or a snapshot directory: its head is reverted with it"));
        }
        match self.store.exists(coll, object) {
            Ok(true) => {}
            Ok(false) => return Err(format!("{me} holds no copy of it (delete it, or bring back an OSD that does)")),
            Err(e) => return Err(format!("{me} cannot tell whether it holds a copy: {e}")),
        }
        if check_data {
            let companions = crate::snaps::companions(&*self.store, coll, object)
                .map_err(|e| format!("{me} cannot read its snapshot state: {}", e.message))?;
            for name in std::iter::once(object).chain(companions.iter().map(String::as_str)) {
                crate::copy::check_reads_whole(&*self.store, coll, name)
                    .map_err(|e| format!("{me}'s copy of {name} is damaged: {e}"))?;
                self.store.list_xattrs(coll, name).map_err(|e| format!("{me} cannot read {name}'s xattrs: {e}"))?;
            }
        }
        // The version names the copy in the revert's request id (see `REVERT_CLIENT`).
        crate::objver::stored(&*self.store, coll, object).ok_or_else(|| {
            format!("{me}'s copy carries no version (written before versions were stored): it cannot be named")
        })
    }

    /// Whether a resent write on `object` that `pg`'s log (or its dups, once trimmed) knows at
    /// `version` is one an operator's decision gave up: a revert of the same object logged after
    /// it that kept a copy older than it, or a removal of the object as lost (`mark-unfound-lost
    /// delete`) logged after it. Such a write is not in the object any more, and its client
    /// never heard that it was applied (or it would not resend it): it is applied again instead
    /// of answered from the log. Reads the log's entries from the store only when such a
    /// decision is logged after the write (the log in memory keeps no object names; the resend
    /// names the write's object).
    pub(super) fn given_up_by_decision(&self, pg: PgId, version: Eversion, object: &str) -> Result<bool, RemoteError> {
        let Some(log) = self.logs.get(&pg) else { return Ok(false) };
        let gives_up = |(v, r): &(Eversion, ReqId)| {
            *v > version && ((r.client == REVERT_CLIENT && r.tid < version.seq) || r.client == LOST_CLIENT)
        };
        let decisions: Vec<Eversion> = log.entries_after(version).filter(|e| gives_up(e)).map(|(v, _)| *v).collect();
        if !decisions.is_empty() {
            let entries = crate::pglog::read_entries(&*self.store, pg).map_err(|e| store_error(&e))?;
            if entries.iter().any(|e| e.object == object && decisions.contains(&e.version)) {
                return Ok(true);
            }
        }
        // A write still in the log has every later decision in the log too (the oldest entries
        // are trimmed first). One trimmed itself may have been given up by a decision trimmed
        // since: the dups keep decisions with their object's name (decision 0084).
        if log.reaches(version) || self.mutations.forget_trimmed_decisions {
            return Ok(false);
        }
        let trimmed = log.trimmed_decisions_on(&*self.store, pg, object).map_err(|e| store_error(&e))?;
        Ok(trimmed.iter().any(gives_up))
    }

    /// After the operator's decision `reqid` on `object` went through the primary's front door:
    /// if it neither committed (which ends `Primary::decided` for the object) nor waits (for
    /// the PG or the object), it was refused, and the object is unfound again, as its missing
    /// record still says.
    ///
    /// A decision write that is neither waiting nor replicating was answered: it counts as such
    /// for [`Primary::unacked_decisions`] (one replicating is counted by
    /// [`OsdCore::decision_answered`] when its members have answered).
    pub(super) fn decision_settled(&mut self, pg: PgId, object: &str, reqid: ReqId) {
        if self.pending.contains_key(&reqid) {
            return;
        }
        let Some(PgState { role: Role::Primary(p), .. }) = self.pgs.get_mut(&pg) else { return };
        let this =
            |ev: &Event| matches!(ev, Event::ClientOp { from, op, .. } if is_decision(*from) && op.reqid == reqid);
        if p.queued.iter().any(this) || p.blocked.get(object).is_some_and(|evs| evs.iter().any(this)) {
            return;
        }
        answered(p, object);
        if !p.decided.contains(object) {
            return;
        }
        p.decided.remove(object);
        tracing::warn!(%pg, object, "an operator's decision was refused before it was logged: the object stays unfound; decide again");
    }

    /// One of the operator's decision writes on `object` was answered once every member had
    /// answered it (see [`Primary::unacked_decisions`]).
    pub(super) fn decision_answered(&mut self, pg: PgId, object: &str) {
        if let Some(PgState { role: Role::Primary(p), .. }) = self.pgs.get_mut(&pg) {
            answered(p, object);
        }
    }

    /// The operator's decision on `object` committed here with its log entry, which removed its
    /// missing record in the same transaction: this copy is the object's now.
    pub(super) fn decision_committed(&mut self, pg: PgId, object: &str) {
        let me = self.id;
        if let Some(PgState { role: Role::Primary(p), .. }) = self.pgs.get_mut(&pg) {
            p.decided.remove(object);
            p.unfound.remove(object);
            if let Some(lacks) = p.sources.get_mut(&me) {
                lacks.remove(object);
            }
        }
    }

    /// Records an operator's decision on unfound `object` of `pg`: it is no longer unfound, it
    /// is decided on until the first of `writes` commits here with its log entry (which removes
    /// its missing record), and each of `writes` (request id, operations) goes through the PG's
    /// replicated write path, in order, ahead of every operation waiting for it. Returns `false`
    /// if this OSD no longer leads the PG.
    fn log_decisions(
        &mut self,
        pg: PgId,
        object: &str,
        writes: Vec<(ReqId, Vec<ObjOp>)>,
        out: &mut Vec<Action>,
    ) -> Result<bool, RemoteError> {
        let epoch = self.map.epoch;
        let now_ms = self.now_ms;
        let Some(PgState { role: Role::Primary(p), .. }) = self.pgs.get_mut(&pg) else { return Ok(false) };
        p.unfound.remove(object);
        p.decided.insert(object.to_string());
        *p.unacked_decisions.entry(object.to_string()).or_default() += writes.len() as u32;
        let waiting = p.blocked.entry(object.to_string()).or_default();
        for (at, (reqid, ops)) in writes.into_iter().enumerate() {
            let op = OsdOp {
                reqid,
                epoch,
                pool: pg.pool,
                pg: pg.seed,
                object: object.to_string(),
                ops,
                expires_in_ms: None,
                resend: false,
                frees_space: false,
            };
            let event = Event::ClientOp {
                from: NOBODY,
                request_id: 0,
                op,
                data: shoal_util::SummedBytes::default(),
                data_crc: None,
                arrived_ms: now_ms,
            };
            waiting.insert(at, event);
            p.blocked_ops += 1;
        }
        self.unblock(pg, object, out);
        Ok(true)
    }
}
