//! Repair of a primary's damaged snapshot clones one at a time, from any member holding them.
//!
//! Recovery moves a head together with its clones and snapshot directory, at the version the
//! head needs. When the primary's own copy is marked missing because one of its *clones* is
//! damaged, and no member holds the head at that version — the head's newest write may be on
//! this OSD alone (written and not yet acknowledged when an interval ended) — the object would
//! stay unfound although every byte of it exists: the head here, each clone on every member that
//! held the object when the clone was made. A clone never changes once made (trims only remove
//! it; its id is a snapshot sequence, never reused), and it carries the version of the write
//! that made it (decision 0049), so a member's clone at the same version *is* this clone. The
//! primary then pulls each damaged clone by its own name from a member sharing the PG's history
//! — or, when none has it, from a member being backfilled or a stray, whose copies past the PG's
//! history are as good once their version matches — checks that the copy exists at that version,
//! and once every clone reads back the head's copy is whole again and leaves the missing set.

use std::collections::BTreeSet;

use shoal_map::{OsdId, PgId};
use shoal_proto::osd::Eversion;
use shoal_store::{Durability, Transaction};

use super::peering::{PgState, Role};
use super::{Action, OsdCore};
use crate::exec::{pg_collection, store_error};
use crate::pgmeta::PgMeta;
use crate::{objver, snaps};

impl OsdCore {
    /// For head `head`, missing here with no source at its needed version: if this OSD's own
    /// head (or, while the head does not exist, its snapshot directory) is at exactly that version
    /// and reads back whole, pulls its first damaged clone from
    /// a member that shares the PG's history and has not failed to provide it, or, with no
    /// clone damaged any more, takes the copy as whole. Returns whether it did either (or a pull
    /// of one of the head's clones is still on its way); `false` leaves the head unfound.
    pub(super) fn repair_clones_alone(&mut self, pg: PgId, head: &str, out: &mut Vec<Action>) -> bool {
        if snaps::is_companion(head) {
            return false;
        }
        let coll = pg_collection(pg);
        let prefix = snaps::companion_prefix(head);
        if self
            .primary(pg)
            .is_some_and(|p| p.recovering.range(prefix.clone()..).next().is_some_and(|(n, _)| n.starts_with(&prefix)))
        {
            return true;
        }
        // Only a copy marked missing for damage carries the version stored with it; one missing
        // because this OSD lacks writes needs the head's newer version, which it does not have.
        let need = self.metas.get(&pg).and_then(|m| m.missing.get(head).copied());
        let Some(need) = need.filter(|v| *v != Eversion::default()) else { return false };
        // The head, or while it does not exist its snapshot directory, carries the version of
        // the head's last write (see `mark_own_missing`).
        let Ok(head_exists) = self.store.exists(&coll, head) else { return false };
        let holder = if head_exists { head.to_string() } else { snaps::snapdir_name(head) };
        if objver::stored(&*self.store, &coll, &holder) != Some(need)
            || (head_exists && self.store.read_all(&coll, head).is_err())
        {
            return false;
        }
        let Ok(companions) = snaps::companions(&*self.store, &coll, head) else { return false };
        // Bounded by `snaps::MAX_SNAPS` + 1 objects, and only while the head has no source.
        let damaged = companions.into_iter().find(|c| self.store.read_all(&coll, c).is_err());
        let Some(clone) = damaged else {
            return self.own_copy_whole(pg, head, out);
        };
        // A clone without a version cannot be matched with another member's (clones made before
        // versions were kept): it waits, unfound, for a source of the whole head.
        let Some(version) = objver::stored(&*self.store, &coll, &clone) else { return false };
        let me = self.id;
        let up = |o: &OsdId| self.map.osds.get(o).is_some_and(|i| i.up);
        let Some(PgState { role: Role::Primary(p), .. }) = self.pgs.get_mut(&pg) else { return false };
        let candidates = || p.sources.iter().filter(|(o, lacks)| **o != me && up(o) && !lacks.contains(&clone));
        let source = candidates().find(|(o, _)| p.acting.contains(o)).or_else(|| candidates().next()).map(|(o, _)| *o);
        // Then any other OSD that may hold the clone: an acting member being backfilled (its
        // copy past its cursor is from before, and a clone never changes) or a known stray. Its
        // copy is taken only at the clone's version (`pulled`), so asking costs a round trip at
        // most; each is asked once per attempt.
        let missed = p.clone_misses.get(&clone);
        let others = || {
            p.acting
                .iter()
                .chain(p.known_strays.iter())
                .copied()
                .find(|o| *o != me && up(o) && !p.sources.contains_key(o) && !missed.is_some_and(|m| m.contains(o)))
        };
        let Some(source) = source.or_else(others) else { return false };
        tracing::info!(%pg, head, %clone, %source, %version, "head unfound at its version: pulling its damaged clone alone");
        p.recovering.insert(clone.clone(), BTreeSet::from([source]));
        let attempt = p.attempt;
        self.send_pull(pg, attempt, source, &clone, None, None, out);
        true
    }

    /// For head `head`, missing here with no member holding it whole and no clone-by-clone
    /// repair possible (this OSD's head is older than the version needed): pulls it from an
    /// acting member that records it missing too, in case that member's copy is missing only
    /// for damage to clones this OSD holds whole (decision 0064). The pull leaves out those
    /// clones (`PgPull::kept`); the member answers only if its head is at the version its own
    /// record needs and everything else reads back whole, and the copy is taken only at the
    /// version this OSD needs. Each member is asked once per head and attempt. Returns whether
    /// a pull went out; `false` leaves the head unfound.
    ///
    /// The simulation's seed 9704 (`--snaps`): the member that led the PG wrote a head on alone
    /// while its copy of the head's oldest clone rotted; the new primary held that clone whole
    /// under an older head. Every byte of the newest version existed, split over two members.
    pub(super) fn pull_around_damaged_clones(&mut self, pg: PgId, head: &str, out: &mut Vec<Action>) -> bool {
        if snaps::is_companion(head) || self.mutations.no_pull_around_damage {
            return false;
        }
        let need = self.metas.get(&pg).and_then(|m| m.missing.get(head).copied());
        let Some(need) = need.filter(|v| *v != Eversion::default()) else { return false };
        if self.clones_held_whole(pg, head).is_empty() {
            return false;
        }
        let me = self.id;
        let up = |o: &OsdId| self.map.osds.get(o).is_some_and(|i| i.up);
        let Some(PgState { role: Role::Primary(p), .. }) = self.pgs.get_mut(&pg) else { return false };
        let missed = p.around_damage_misses.get(head);
        let lacking = |o: &OsdId| p.sources.get(o).is_some_and(|lacks| lacks.contains(head));
        let source = p
            .acting
            .iter()
            .copied()
            .find(|o| *o != me && up(o) && lacking(o) && !missed.is_some_and(|m| m.contains(o)));
        let Some(source) = source else { return false };
        tracing::info!(%pg, head, %source, %need, "no member holds the head whole: pulling it around the clones held here");
        // Found, unless the member cannot send it (then unfound again, by `recover_object`).
        p.unfound.remove(head);
        p.recovering.insert(head.to_string(), BTreeSet::from([source]));
        p.around_damage.insert(head.to_string(), need);
        let attempt = p.attempt;
        self.send_pull(pg, attempt, source, head, None, None, out);
        true
    }

    /// The version a pulled clone must carry to replace this OSD's copy: the one stored with
    /// the local copy (its metadata outlives damage to its data). `None` for heads, which are
    /// pulled at the version their missing record names.
    pub(super) fn clone_version_needed(&self, pg: PgId, object: &str) -> Option<Option<Eversion>> {
        snaps::is_companion(object).then(|| objver::stored(&*self.store, &pg_collection(pg), object))
    }

    /// Every clone of `head` reads back and the head is at its needed version: the copy here is
    /// whole. Its missing record is removed (durably) and whatever waited for it goes on.
    fn own_copy_whole(&mut self, pg: PgId, head: &str, out: &mut Vec<Action>) -> bool {
        let mut txn = Transaction::new();
        PgMeta::write_recovered(&mut txn, pg, head);
        if let Err(e) = self.store.commit(txn, Durability::Batch) {
            self.report_stuck(pg, head, &store_error(&e), "recording a repaired copy failed");
            return false;
        }
        if let Some(meta) = self.metas.get_mut(&pg) {
            meta.recovered(head);
        }
        let me = self.id;
        if let Some(PgState { role: Role::Primary(p), .. }) = self.pgs.get_mut(&pg) {
            p.unfound.remove(head);
            if let Some(lacks) = p.sources.get_mut(&me) {
                lacks.remove(head);
            }
        }
        tracing::info!(%pg, head, "own copy whole again: its damaged clones were pulled alone");
        self.counters.recovered_objects += 1;
        // Now the members that lack it, then whoever waited.
        self.recover_object(pg, head, out);
        true
    }
}
