//! Peering's decisions as pure functions: which member's log is authoritative, and what each
//! member lacks compared with it. No I/O, so every case is unit-tested directly.

use std::collections::{BTreeMap, HashMap};

use shoal_map::{OsdId, PgActivation};
use shoal_proto::osd::{Eversion, PeerState, PgLogEntry};

/// What a member must do to hold the authoritative contents.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MemberPlan {
    /// Its log shares history with the authoritative one: it lacks exactly these objects (the
    /// version needed; `0'0`: whatever the authority holds, for objects of divergent entries).
    Log { missing: BTreeMap<String, Eversion> },
    /// Its log does not overlap the authoritative one (new, emptied, or away too long): every
    /// object is compared by a walk over both listings.
    Backfill,
}

/// Plans how `member` catches up with the authoritative log `auth`.
///
/// The common point is the newest entry of the member's log that the authoritative log holds
/// too (same version and request). Everything before it is shared history (a member applies a
/// primary's writes in order and refuses a gap, and an activation copies a log whole); entries
/// after it on the member are **divergent** — writes an old primary applied that were never
/// acknowledged — and their objects are rolled back to the authority's state; entries after it
/// on the authority are writes the member lacks.
#[must_use]
pub fn plan_member(auth: &[PgLogEntry], member: &PeerState) -> MemberPlan {
    if member.backfill.is_some() {
        return MemberPlan::Backfill;
    }
    let by_version: HashMap<Eversion, &PgLogEntry> = auth.iter().map(|e| (e.version, e)).collect();
    let common = member.log.iter().rposition(|e| by_version.get(&e.version).is_some_and(|a| a.reqid == e.reqid));
    let mut missing: BTreeMap<String, Eversion> = member.missing.iter().cloned().collect();
    let (member_after, auth_after): (&[PgLogEntry], &[PgLogEntry]) = match common {
        Some(i) => {
            let v = member.log[i].version;
            let start = auth.partition_point(|e| e.version <= v);
            (&member.log[i + 1..], &auth[start..])
        }
        // Nothing in common: only a PG never written on the authority can be caught up from the
        // log (every entry of the member is then divergent).
        None if auth.is_empty() => (&member.log[..], &[][..]),
        None => return MemberPlan::Backfill,
    };
    for e in member_after {
        missing.entry(e.object.clone()).or_default();
    }
    for e in auth_after {
        missing.insert(e.object.clone(), e.version);
    }
    MemberPlan::Log { missing }
}

/// Whether `state` may serve as the authority given the PG's last activation record: it holds
/// the PG whole (not backfilling), and when a record exists it is one of the record's members and
/// took part in that activation (a member whose store was replaced has `les` 0).
#[must_use]
pub fn eligible(osd: OsdId, state: &PeerState, record: Option<&PgActivation>) -> bool {
    if state.backfill.is_some() {
        return false;
    }
    match record {
        None => true,
        Some(r) => r.members.contains(&osd) && state.les >= r.activated_at,
    }
}

/// The authority among `answers`: the eligible member with the newest log (ties: `prefer`, then
/// the lowest id). `None` if none is eligible.
#[must_use]
pub fn choose_authority(
    answers: &BTreeMap<OsdId, PeerState>,
    record: Option<&PgActivation>,
    prefer: OsdId,
) -> Option<OsdId> {
    let last = |s: &PeerState| s.log.last().map(|e| e.version).unwrap_or_default();
    answers
        .iter()
        .filter(|(osd, s)| eligible(**osd, s, record))
        .max_by(|(a, sa), (b, sb)| {
            last(sa).cmp(&last(sb)).then_with(|| (**a == prefer).cmp(&(**b == prefer))).then_with(|| b.cmp(a))
        })
        .map(|(osd, _)| *osd)
}

#[cfg(test)]
mod tests {
    use super::*;
    use shoal_proto::osd::ReqId;

    fn e(epoch: u64, seq: u64, tid: u64, obj: &str) -> PgLogEntry {
        PgLogEntry {
            version: Eversion { epoch, seq },
            reqid: ReqId { client: 1, tid },
            object: obj.into(),
            op_count: 1,
        }
    }
    fn state(log: Vec<PgLogEntry>) -> PeerState {
        PeerState { les: 10, backfill: None, log, missing: Vec::new() }
    }
    fn v(epoch: u64, seq: u64) -> Eversion {
        Eversion { epoch, seq }
    }

    #[test]
    fn a_member_behind_misses_the_newer_entries_objects() {
        let auth = vec![e(2, 1, 1, "a"), e(2, 2, 2, "b"), e(3, 3, 3, "a"), e(3, 4, 4, "c")];
        let plan = plan_member(&auth, &state(auth[..2].to_vec()));
        let want: BTreeMap<String, Eversion> = [("a".to_string(), v(3, 3)), ("c".to_string(), v(3, 4))].into();
        assert_eq!(plan, MemberPlan::Log { missing: want });
        assert_eq!(plan_member(&auth, &state(auth.clone())), MemberPlan::Log { missing: BTreeMap::new() });
    }

    #[test]
    fn divergent_entries_are_rolled_back() {
        let auth = vec![e(2, 1, 1, "a"), e(4, 2, 9, "c")];
        // The member applied a write of an old primary (3'2 on "b") that the authority never got.
        let member = state(vec![e(2, 1, 1, "a"), e(3, 2, 7, "b")]);
        let want: BTreeMap<String, Eversion> = [("b".to_string(), v(0, 0)), ("c".to_string(), v(4, 2))].into();
        assert_eq!(plan_member(&auth, &member), MemberPlan::Log { missing: want });
        // Same version, other request: not common history.
        let member = state(vec![e(2, 1, 1, "a"), e(4, 2, 8, "d")]);
        let MemberPlan::Log { missing } = plan_member(&auth, &member) else { panic!("log plan") };
        assert_eq!(missing.keys().cloned().collect::<Vec<_>>(), vec!["c".to_string(), "d".to_string()]);
    }

    #[test]
    fn no_common_entry_means_backfill_unless_the_pg_was_never_written() {
        let auth = vec![e(5, 1, 1, "a")];
        assert_eq!(plan_member(&auth, &state(Vec::new())), MemberPlan::Backfill);
        assert_eq!(plan_member(&auth, &state(vec![e(2, 1, 3, "x")])), MemberPlan::Backfill);
        let MemberPlan::Log { missing } = plan_member(&[], &state(vec![e(2, 1, 3, "x")])) else { panic!("log") };
        assert_eq!(missing.get("x"), Some(&Eversion::default()));
        let mut backfilling = state(auth.clone());
        backfilling.backfill = Some("k".into());
        assert_eq!(plan_member(&auth, &backfilling), MemberPlan::Backfill);
    }

    #[test]
    fn persisted_missing_objects_stay_missing() {
        let auth = vec![e(2, 1, 1, "a")];
        let mut member = state(auth.clone());
        member.missing = vec![("z".into(), v(1, 9))];
        let MemberPlan::Log { missing } = plan_member(&auth, &member) else { panic!("log") };
        assert_eq!(missing.get("z"), Some(&v(1, 9)));
    }

    #[test]
    fn the_authority_is_an_eligible_member_of_the_last_activation() {
        let record = PgActivation { epoch: 9, activated_at: 8, members: vec![OsdId(1), OsdId(2)] };
        let mut answers = BTreeMap::new();
        answers.insert(OsdId(1), state(vec![e(8, 1, 1, "a")]));
        answers.insert(OsdId(2), state(vec![e(8, 1, 1, "a"), e(8, 2, 2, "b")]));
        // Not in the record: never an authority, even with a newer-looking log.
        answers.insert(OsdId(3), state(vec![e(8, 1, 1, "a"), e(8, 2, 2, "b"), e(8, 3, 3, "c")]));
        assert_eq!(choose_authority(&answers, Some(&record), OsdId(1)), Some(OsdId(2)));
        assert_eq!(choose_authority(&answers, None, OsdId(1)), Some(OsdId(3)));
        // A member whose store was replaced (les 0) is not eligible.
        answers.get_mut(&OsdId(2)).expect("osd.2").les = 0;
        assert_eq!(choose_authority(&answers, Some(&record), OsdId(1)), Some(OsdId(1)));
        answers.get_mut(&OsdId(1)).expect("osd.1").backfill = Some(String::new());
        assert_eq!(choose_authority(&answers, Some(&record), OsdId(1)), None);
        // Ties go to the preferred OSD (the primary: no log to fetch).
        let mut tie = BTreeMap::new();
        tie.insert(OsdId(1), state(vec![e(8, 1, 1, "a")]));
        tie.insert(OsdId(2), state(vec![e(8, 1, 1, "a")]));
        assert_eq!(choose_authority(&tie, None, OsdId(2)), Some(OsdId(2)));
        assert_eq!(choose_authority(&tie, None, OsdId(7)), Some(OsdId(1)));
    }
}
