//! Peering's decisions as pure functions: which member's log is authoritative, and what each
//! member lacks compared with it. No I/O, so every case is unit-tested directly.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use shoal_map::{OsdId, PgActivation};
use shoal_proto::osd::{Eversion, PeerState, PgLogEntry};

/// What a member must do to hold the authoritative contents.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MemberPlan {
    /// Its log shares history with the authoritative one: it lacks exactly the objects of
    /// `missing` (the version needed: the authority's newest entry for the object; `0'0`:
    /// whatever the authority holds, for a divergent object the authoritative log no longer
    /// names), and holds the objects of `remove` although the authoritative history never wrote
    /// them (they are removed with the activation, needing no source).
    Log { missing: BTreeMap<String, Eversion>, remove: BTreeSet<String> },
    /// It was being backfilled and holds the objects up to its cursor `after`, and its log shares
    /// history with the authoritative one (decision 0048): the backfill goes on past `after`, and
    /// of the objects up to it, it lacks those of `missing` and holds those of `remove` that the
    /// history never wrote, as in `Log`. Objects past `after` are not named: backfill sends them.
    Resume { after: String, missing: BTreeMap<String, Eversion>, remove: BTreeSet<String> },
    /// Its log does not overlap the authoritative one (new, emptied, or away too long), or it was
    /// being backfilled and had been sent nothing yet: every object is sent to it again, in name
    /// order, from the first.
    Backfill,
}

impl MemberPlan {
    /// Whether the member is to be backfilled (from the start or from its cursor).
    #[must_use]
    pub fn backfills(&self) -> bool {
        !matches!(self, MemberPlan::Log { .. })
    }
}

/// The objects that some plan of `plans` needs at `0'0` (whatever the authority holds: a
/// divergent write's object that the authoritative log no longer names), at most `limit`.
#[must_use]
pub fn unnamed_needs<'a>(plans: impl IntoIterator<Item = &'a MemberPlan>, limit: usize) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for plan in plans {
        let (MemberPlan::Log { missing, .. } | MemberPlan::Resume { missing, .. }) = plan else { continue };
        for (object, need) in missing {
            if *need == Eversion::default() && names.len() < limit {
                names.insert(object.clone());
            }
        }
    }
    names
}

/// Names the version behind each need of `0'0` in `plans` that the authority can name: the
/// version the authority itself needs when it lacks the object too, else the version stored with
/// its copy (`auth_versions`, the stored versions of the authority's copies; a copy without one
/// leaves the need unnamed). A named need is what a later peering can match a member's copy
/// against (`held_at_needed_version`) once the authority that held the object is gone or is
/// itself to be backfilled; "whatever the authority holds" can never be matched. Returns how
/// many needs (over all members) it named.
pub fn name_unnamed_needs(
    plans: &mut BTreeMap<OsdId, MemberPlan>,
    auth: &PeerState,
    auth_versions: &BTreeMap<String, Eversion>,
) -> u64 {
    let mut named_count = 0;
    let auth_missing: HashMap<&str, Eversion> = auth.missing.iter().map(|(o, v)| (o.as_str(), *v)).collect();
    for plan in plans.values_mut() {
        let (MemberPlan::Log { missing, .. } | MemberPlan::Resume { missing, .. }) = plan else { continue };
        for (object, need) in missing.iter_mut().filter(|(_, need)| **need == Eversion::default()) {
            // The authority's own copy is stale when it lacks the object: its need is the one.
            let named = match auth_missing.get(object.as_str()) {
                Some(v) => *v,
                None => auth_versions.get(object).copied().unwrap_or_default(),
            };
            *need = named;
            named_count += u64::from(named != Eversion::default());
        }
    }
    named_count
}

/// Plans how `member` catches up with the authoritative log `auth`.
///
/// The common point is the newest entry of the member's log that the authoritative log holds
/// too (same version and request), or whose version is the authoritative log's tail (its newest
/// trimmed entry: a version names one write everywhere). Everything before it is shared history (a member applies a
/// primary's writes in order and refuses a gap, and an activation copies a log whole); entries
/// after it on the member are **divergent** — writes an old primary applied that were never
/// acknowledged — and their objects are rolled back to the authority's state; entries after it
/// on the authority are writes the member lacks.
///
/// An object the member lacks or must roll back is **absent** on the authority when the
/// authoritative log reaches back to the PG's first write (it is empty, or its oldest entry has
/// sequence 1: versions of one history number its writes 1, 2, 3, … and only trimming removes
/// the oldest) and never names the object. Such an object goes to `remove`, not `missing`: a
/// missing object needs a member to copy it from, and once the authority that rolled it back is
/// gone, none may be left that "holds" an object nobody wrote (an authority that itself carries
/// such a need, from an earlier rollback, would keep it unfound forever). So does an object whose
/// newest write in the authoritative log left nothing of its name (`PgLogEntry::empties`,
/// decision 0077): the member removes what it holds of it, as a copy would have it do, and no
/// source is needed — a removal leaves no copy whose version could show who holds it.
///
/// A member being backfilled (cursor `c`) is planned the same way with two differences: only
/// objects up to `c` are named, and its missing objects need not have a source among the
/// authority's — a member's store reflects every entry of its log for the objects up to its
/// cursor (a backfill push is applied with the cursor it carries, and from then on every write to
/// an object up to the cursor reaches it in full), so up to `c` it is like a complete member.
/// Without a shared entry, or with nothing sent yet (`c` empty), it starts over.
#[must_use]
pub fn plan_member(auth: &[PgLogEntry], auth_tail: Eversion, member: &PeerState) -> MemberPlan {
    match member.backfill.as_deref() {
        None => plan_from_log(auth, auth_tail, member),
        Some("") => MemberPlan::Backfill,
        Some(after) => match plan_from_log(auth, auth_tail, member) {
            MemberPlan::Log { mut missing, mut remove } => {
                missing.retain(|object, _| object.as_str() <= after);
                remove.retain(|object| object.as_str() <= after);
                MemberPlan::Resume { after: after.to_string(), missing, remove }
            }
            other => other,
        },
    }
}

/// `plan_member` for what the member's log shows, its backfill cursor aside.
fn plan_from_log(auth: &[PgLogEntry], auth_tail: Eversion, member: &PeerState) -> MemberPlan {
    let by_version: HashMap<Eversion, &PgLogEntry> = auth.iter().map(|e| (e.version, e)).collect();
    let at_tail = |e: &PgLogEntry| auth_tail != Eversion::default() && e.version == auth_tail;
    let common =
        member.log.iter().rposition(|e| by_version.get(&e.version).is_some_and(|a| a.reqid == e.reqid) || at_tail(e));
    let mut missing: BTreeMap<String, Eversion> = member.missing.iter().cloned().collect();
    let (member_after, auth_after): (&[PgLogEntry], &[PgLogEntry]) = match common {
        Some(i) => {
            let v = member.log[i].version;
            let start = auth.partition_point(|e| e.version <= v);
            (&member.log[i + 1..], &auth[start..])
        }
        // Nothing in common: only a PG never written on the authority can be caught up from the
        // log (every entry of the member is then divergent), and only if the member's log holds
        // every write it applied: entries it trimmed are divergent too, and no log names their
        // objects any more (nor may their request ids, kept beyond the log, answer resends).
        None if auth.is_empty() && auth_tail == Eversion::default() && whole_log(member) => (&member.log[..], &[][..]),
        None => return MemberPlan::Backfill,
    };
    // The authority's newest entry per object (entries are oldest first).
    let newest: HashMap<&str, Eversion> = auth.iter().map(|e| (e.object.as_str(), e.version)).collect();
    let emptied: BTreeSet<&str> = auth
        .iter()
        .filter(|e| e.empties && newest.get(e.object.as_str()) == Some(&e.version))
        .map(|e| e.object.as_str())
        .collect();
    for e in member_after {
        let need = newest.get(e.object.as_str()).copied().unwrap_or_default();
        missing.insert(e.object.clone(), need);
    }
    for e in auth_after {
        missing.insert(e.object.clone(), e.version);
    }
    // (Logs written before tails were kept read a tail of 0'0: the sequence check stands alone.)
    let whole_history = auth_tail == Eversion::default() && auth.first().is_none_or(|e| e.version.seq == 1);
    // Objects with nothing of their name left on the authority are removed, not copied: emptied
    // by its newest write, or never written in a history that reaches back to the first write.
    let mut remove = BTreeSet::new();
    missing.retain(|object, _| {
        let absent = emptied.contains(object.as_str()) || (whole_history && !newest.contains_key(object.as_str()));
        if absent {
            remove.insert(object.clone());
        }
        !absent
    });
    MemberPlan::Log { missing, remove }
}

/// Whether `member`'s log holds every write the member applied since the PG's first: nothing
/// was trimmed from it (its tail is `0'0` and its oldest entry, if any, is the history's first).
fn whole_log(member: &PeerState) -> bool {
    member.tail == Eversion::default() && member.log.first().is_none_or(|e| e.version.seq == 1)
}

/// The objects of `needs` (object → version needed, from the authoritative log: a write of that
/// object) that `member` holds at exactly that version although its log shares no entry with the
/// authority's (a member away while the PG's log was trimmed past it): those whose newest entry
/// in the member's log *is* the needed version, or that its log does not name when its tail is
/// the needed version — a version names one write everywhere, a log holds every write after its
/// tail, and a member not being backfilled applied every write up to its tail but the objects it
/// records missing — and those whose version stored with the member's copy (`objver`, reported
/// in [`PeerState::versions`] when the query asked) is the needed one, whatever its log says.
/// Needs of `0'0` (whatever the authority holds) name no version and are never matched.
#[must_use]
pub fn held_at_needed_version(member: &PeerState, needs: &BTreeMap<String, Eversion>) -> BTreeSet<String> {
    if needs.is_empty() {
        return BTreeSet::new();
    }
    let newest: HashMap<&str, &PgLogEntry> = member.log.iter().map(|e| (e.object.as_str(), e)).collect();
    let missing: BTreeSet<&str> = member.missing.iter().map(|(o, _)| o.as_str()).collect();
    let stored: HashMap<&str, Eversion> = member.versions.iter().map(|(o, v)| (o.as_str(), *v)).collect();
    // The log shows what a member holds only if it is not being backfilled (objects past its
    // cursor may be stale); a stored version is written with the object's data in one
    // transaction, and copies carry it, so it shows what the member's copy is in any case.
    let by_log = |object: &str, need: Eversion| {
        member.backfill.is_none() && newest.get(object).map_or(member.tail == need, |e| e.version == need)
    };
    needs
        .iter()
        .filter(|(object, need)| {
            **need != Eversion::default()
                && !missing.contains(object.as_str())
                && (stored.get(object.as_str()) == Some(*need) || by_log(object, **need))
        })
        .map(|(object, _)| object.clone())
        .collect()
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
            empties: false,
        }
    }
    fn state(log: Vec<PgLogEntry>) -> PeerState {
        PeerState { les: 10, backfill: None, log, tail: Eversion::default(), missing: Vec::new(), versions: Vec::new() }
    }
    fn v(epoch: u64, seq: u64) -> Eversion {
        Eversion { epoch, seq }
    }

    fn names(list: &[&str]) -> BTreeSet<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_member_behind_misses_the_newer_entries_objects() {
        let auth = vec![e(2, 1, 1, "a"), e(2, 2, 2, "b"), e(3, 3, 3, "a"), e(3, 4, 4, "c")];
        let plan = plan_member(&auth, Eversion::default(), &state(auth[..2].to_vec()));
        let want: BTreeMap<String, Eversion> = [("a".to_string(), v(3, 3)), ("c".to_string(), v(3, 4))].into();
        assert_eq!(plan, MemberPlan::Log { missing: want, remove: BTreeSet::new() });
        let same = plan_member(&auth, Eversion::default(), &state(auth.clone()));
        assert_eq!(same, MemberPlan::Log { missing: BTreeMap::new(), remove: BTreeSet::new() });
    }

    #[test]
    fn divergent_entries_are_rolled_back() {
        // A trimmed authoritative log (it starts at 10): what it does not name may exist.
        let auth = vec![e(2, 10, 1, "a"), e(4, 11, 9, "c"), e(4, 12, 10, "e")];
        // The member applied writes of an old primary (3'11 on "b", 3'12 on "e") that the
        // authority never got: "b" back to whatever the authority holds, "e" to its 4'12.
        let member = state(vec![e(2, 10, 1, "a"), e(3, 11, 7, "b"), e(3, 12, 8, "e")]);
        let want: BTreeMap<String, Eversion> =
            [("b".to_string(), v(0, 0)), ("c".to_string(), v(4, 11)), ("e".to_string(), v(4, 12))].into();
        assert_eq!(
            plan_member(&auth, Eversion::default(), &member),
            MemberPlan::Log { missing: want, remove: BTreeSet::new() }
        );
        // Same version, other request: not common history.
        let member = state(vec![e(2, 10, 1, "a"), e(4, 11, 8, "d")]);
        let MemberPlan::Log { missing, .. } = plan_member(&auth, Eversion::default(), &member) else {
            panic!("log plan")
        };
        assert_eq!(missing.keys().cloned().collect::<Vec<_>>(), vec!["c", "d", "e"]);
    }

    #[test]
    fn objects_the_whole_authoritative_history_never_wrote_are_removed_not_missing() {
        // The authoritative log reaches back to the PG's first write (sequence 1).
        let auth = vec![e(2, 1, 1, "a"), e(4, 2, 9, "c")];
        let member = state(vec![e(2, 1, 1, "a"), e(3, 2, 7, "b")]);
        let want: BTreeMap<String, Eversion> = [("c".to_string(), v(4, 2))].into();
        assert_eq!(
            plan_member(&auth, Eversion::default(), &member),
            MemberPlan::Log { missing: want, remove: names(&["b"]) }
        );
        // A need left by an earlier rollback ("z", whatever that authority held) is settled the
        // same way, even when the member is up to date: nothing else could ever settle it.
        let mut member = state(auth.clone());
        member.missing = vec![("z".into(), v(0, 0)), ("c".into(), v(0, 0))];
        let want: BTreeMap<String, Eversion> = [("c".to_string(), v(0, 0))].into();
        assert_eq!(
            plan_member(&auth, Eversion::default(), &member),
            MemberPlan::Log { missing: want, remove: names(&["z"]) }
        );
        // The authority itself is planned like any member: its own stale need goes too.
        let mut own = state(vec![e(28, 1, 3, "q")]);
        own.missing = vec![("c2-o5".into(), v(0, 0))];
        let plan = plan_member(&own.log.clone(), Eversion::default(), &own);
        assert_eq!(plan, MemberPlan::Log { missing: BTreeMap::new(), remove: names(&["c2-o5"]) });
    }

    #[test]
    fn no_common_entry_means_backfill_unless_the_pg_was_never_written() {
        let auth = vec![e(5, 1, 1, "a")];
        assert_eq!(plan_member(&auth, Eversion::default(), &state(Vec::new())), MemberPlan::Backfill);
        assert_eq!(plan_member(&auth, Eversion::default(), &state(vec![e(2, 1, 3, "x")])), MemberPlan::Backfill);
        // Never written on the authority: everything the member wrote is removed.
        let plan = plan_member(&[], Eversion::default(), &state(vec![e(2, 1, 3, "x")]));
        assert_eq!(plan, MemberPlan::Log { missing: BTreeMap::new(), remove: names(&["x"]) });
        // Unless the member trimmed some of what it wrote: those entries' objects are unknown
        // (and their request ids, kept beyond its log, must not answer resends), so it starts
        // over, whether its tail says so or its oldest entry is not the history's first.
        let mut trimmed = state(vec![e(2, 3, 3, "x"), e(2, 4, 4, "y")]);
        trimmed.tail = v(2, 2);
        assert_eq!(plan_member(&[], Eversion::default(), &trimmed), MemberPlan::Backfill);
        trimmed.tail = Eversion::default();
        assert_eq!(plan_member(&[], Eversion::default(), &trimmed), MemberPlan::Backfill);
        // Nor does an authority whose whole log was trimmed (tail 2'2) share anything with a
        // member whose entries it does not hold.
        assert_eq!(plan_member(&[], v(2, 2), &state(vec![e(2, 1, 3, "x")])), MemberPlan::Backfill);
        // Being backfilled with no shared entry, or with nothing sent yet: from the start again.
        let mut backfilling = state(vec![e(2, 1, 3, "x")]);
        backfilling.backfill = Some("k".into());
        assert_eq!(plan_member(&auth, Eversion::default(), &backfilling), MemberPlan::Backfill);
        let mut unsent = state(auth.clone());
        unsent.backfill = Some(String::new());
        assert_eq!(plan_member(&auth, Eversion::default(), &unsent), MemberPlan::Backfill);
    }

    #[test]
    fn needs_of_whatever_the_authority_holds_get_the_version_of_its_copy() {
        // The authority's trimmed log no longer names "c", which both members wrote divergently;
        // it lacks "d" itself (at 3'2) and holds "e" with no stored version.
        let mut auth = state(vec![e(5, 9, 9, "a")]);
        auth.missing = vec![("d".into(), v(3, 2))];
        let need = |o: &str| (o.to_string(), Eversion::default());
        let mut plans = BTreeMap::from([
            (OsdId(1), MemberPlan::Log { missing: BTreeMap::from([need("c"), need("d")]), remove: BTreeSet::new() }),
            (
                OsdId(2),
                MemberPlan::Resume {
                    after: "z".into(),
                    missing: BTreeMap::from([need("c"), need("e")]),
                    remove: BTreeSet::new(),
                },
            ),
            (OsdId(3), MemberPlan::Backfill),
        ]);
        assert_eq!(unnamed_needs(plans.values(), 10), names(&["c", "d", "e"]));
        assert_eq!(unnamed_needs(plans.values(), 2).len(), 2, "bounded");
        let stored = BTreeMap::from([("c".to_string(), v(4, 7)), ("d".to_string(), v(2, 1))]);
        assert_eq!(name_unnamed_needs(&mut plans, &auth, &stored), 3, "c twice, d once");
        // "c" is the authority's copy's version; "d" the authority's own need (its copy is
        // stale); "e" stays unnamed.
        let missing = |o: u32| match &plans[&OsdId(o)] {
            MemberPlan::Log { missing, .. } | MemberPlan::Resume { missing, .. } => missing.clone(),
            MemberPlan::Backfill => BTreeMap::new(),
        };
        assert_eq!(missing(1), BTreeMap::from([("c".to_string(), v(4, 7)), ("d".to_string(), v(3, 2))]));
        assert_eq!(missing(2), BTreeMap::from([("c".to_string(), v(4, 7)), need("e")]));
        assert!(unnamed_needs(plans.values(), 10) == names(&["e"]));
    }

    #[test]
    fn a_backfilling_member_sharing_the_history_resumes_past_its_cursor() {
        // The member (cursor "k") saw the writes up to 3'3; the authority went on with writes to
        // "b" (up to the cursor) and "x" (past it), and a divergent write of "c" (up to the cursor)
        // and of "y" (past it) on the member was never acknowledged.
        let auth = vec![e(2, 1, 1, "a"), e(2, 2, 2, "b"), e(3, 3, 3, "x"), e(4, 4, 4, "b"), e(4, 5, 5, "x")];
        let mut member =
            state(vec![e(2, 1, 1, "a"), e(2, 2, 2, "b"), e(3, 3, 3, "x"), e(3, 4, 9, "c"), e(3, 5, 8, "y")]);
        member.backfill = Some("k".into());
        // Persisted missing objects past the cursor are not named either (backfill sends them).
        member.missing = vec![("a".into(), v(2, 1)), ("z".into(), v(1, 1))];
        let plan = plan_member(&auth, Eversion::default(), &member);
        let missing: BTreeMap<String, Eversion> = [("a".to_string(), v(2, 1)), ("b".to_string(), v(4, 4))].into();
        // "c" was never written by the authoritative history, which reaches back to its start.
        assert_eq!(plan, MemberPlan::Resume { after: "k".into(), missing, remove: names(&["c"]) });
        assert!(plan.backfills());
        // With the history trimmed (no longer from its start) "c" is rolled back by a copy of
        // whatever the authority holds instead.
        let tail = v(1, 9);
        let plan = plan_member(&auth, tail, &member);
        let missing: BTreeMap<String, Eversion> =
            [("a".to_string(), v(2, 1)), ("b".to_string(), v(4, 4)), ("c".to_string(), Eversion::default())].into();
        assert_eq!(plan, MemberPlan::Resume { after: "k".into(), missing, remove: BTreeSet::new() });
    }

    #[test]
    fn a_member_whose_newest_entry_is_the_authoritys_tail_catches_up_from_the_log() {
        // The authority trimmed through 3'4; the member stopped exactly there.
        let auth = vec![e(3, 5, 5, "a"), e(4, 6, 6, "b")];
        let member = state(vec![e(3, 3, 3, "c"), e(3, 4, 4, "d")]);
        let want: BTreeMap<String, Eversion> = [("a".to_string(), v(3, 5)), ("b".to_string(), v(4, 6))].into();
        assert_eq!(plan_member(&auth, v(3, 4), &member), MemberPlan::Log { missing: want, remove: BTreeSet::new() });
        // Without the tail (or with another one) nothing is shared: backfill.
        assert_eq!(plan_member(&auth, Eversion::default(), &member), MemberPlan::Backfill);
        assert_eq!(plan_member(&auth, v(2, 4), &member), MemberPlan::Backfill);
        // Past the tail, its own later entries are divergent: rolled back, not "absent" (the
        // trimmed history may have written them).
        let member = state(vec![e(3, 4, 4, "d"), e(2, 5, 9, "x")]);
        let MemberPlan::Log { missing, remove } = plan_member(&auth, v(3, 4), &member) else { panic!("log") };
        assert_eq!((missing.get("x"), remove.len()), (Some(&v(0, 0)), 0));
    }

    #[test]
    fn persisted_missing_objects_stay_missing() {
        let auth = vec![e(2, 5, 1, "a")];
        let mut member = state(auth.clone());
        member.missing = vec![("z".into(), v(1, 4))];
        let MemberPlan::Log { missing, remove } = plan_member(&auth, Eversion::default(), &member) else {
            panic!("log")
        };
        assert_eq!((missing.get("z"), remove.len()), (Some(&v(1, 4)), 0));
    }

    #[test]
    fn a_member_without_shared_entries_holds_what_its_newest_entry_for_it_wrote() {
        // The member stopped at 3'7; the authority's log has since been trimmed past it.
        let member = state(vec![e(3, 5, 5, "a"), e(3, 6, 6, "b"), e(3, 7, 7, "a")]);
        let needs: BTreeMap<String, Eversion> = [
            ("a".to_string(), v(3, 7)), // its newest write of "a": held
            ("b".to_string(), v(3, 6)), // likewise
            ("c".to_string(), v(3, 4)), // not in its log: unknown
            ("z".to_string(), v(0, 0)), // no version named
        ]
        .into();
        assert_eq!(held_at_needed_version(&member, &needs), names(&["a", "b"]));
        // "a" needed at an older version than the member's newest write of it: not that version.
        let older: BTreeMap<String, Eversion> = [("a".to_string(), v(3, 5))].into();
        assert!(held_at_needed_version(&member, &older).is_empty());
        // Its log's tail is the write "c" needs, and no later entry names "c": held. A need older
        // than the tail may have been overwritten by a trimmed write: not held.
        let mut trimmed = member.clone();
        trimmed.tail = v(3, 4);
        assert_eq!(held_at_needed_version(&trimmed, &needs), names(&["a", "b", "c"]));
        let before_tail: BTreeMap<String, Eversion> = [("c".to_string(), v(3, 2))].into();
        assert!(held_at_needed_version(&trimmed, &before_tail).is_empty());
        // Recorded missing, or being backfilled: nothing is vouched for.
        let mut lacking = member.clone();
        lacking.missing = vec![("b".into(), v(0, 0))];
        assert_eq!(held_at_needed_version(&lacking, &needs), names(&["a"]));
        let mut backfilling = member;
        backfilling.backfill = Some(String::new());
        assert!(held_at_needed_version(&backfilling, &needs).is_empty());
        // The versions stored with its copies, when the query asked for them, settle it: "c" is
        // held at the needed version although neither log nor tail shows it, "a" stored at an
        // older version is not held, and being backfilled does not matter (a copy and its stored
        // version are written together); a copy recorded missing is still not vouched for.
        let mut reported = backfilling.clone();
        reported.versions = vec![("c".into(), v(3, 4)), ("a".into(), v(3, 5))];
        assert_eq!(held_at_needed_version(&reported, &needs), names(&["c"]));
        reported.missing = vec![("c".into(), v(0, 0))];
        assert!(held_at_needed_version(&reported, &needs).is_empty());
    }

    #[test]
    fn the_authority_is_an_eligible_member_of_the_last_activation() {
        let record = PgActivation { epoch: 9, activated_at: 8, members: vec![OsdId(1), OsdId(2)], holders: Vec::new() };
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

    #[test]
    fn an_object_whose_newest_write_emptied_its_name_is_removed_not_missing() {
        // The member stopped at 1'2; the authority went on: 1'3 writes x, 1'4 removes y (nothing
        // of its name left), 1'5 removes x but keeps clones of it (its name not empty).
        let emptying = |mut entry: PgLogEntry| {
            entry.empties = true;
            entry
        };
        let auth = vec![e(1, 1, 1, "y"), e(1, 2, 2, "x"), e(1, 3, 3, "x"), emptying(e(1, 4, 4, "y")), e(1, 5, 5, "x")];
        let member = PeerState {
            tail: Eversion::default(),
            les: 1,
            backfill: None,
            log: auth[..2].to_vec(),
            missing: Vec::new(),
            versions: Vec::new(),
        };
        let MemberPlan::Log { missing, remove } = plan_member(&auth, v(1, 0), &member) else { panic!("log") };
        assert_eq!(missing, BTreeMap::from([("x".to_string(), v(1, 5))]));
        assert_eq!(remove, BTreeSet::from(["y".to_string()]));
        // A write of y after its removal makes it missing again; the emptying entry no longer
        // decides, being no longer the newest.
        let mut again = auth.clone();
        again.push(e(1, 6, 6, "y"));
        let MemberPlan::Log { missing, remove } = plan_member(&again, v(1, 0), &member) else { panic!("log") };
        assert_eq!(missing.get("y"), Some(&v(1, 6)));
        assert!(remove.is_empty());
        // A member that recorded y missing before, at an older version, removes it too.
        let recorded = PeerState { missing: vec![("y".to_string(), v(1, 1))], log: auth.clone(), ..member.clone() };
        let MemberPlan::Log { missing, remove } = plan_member(&auth, v(1, 0), &recorded) else { panic!("log") };
        assert!(missing.is_empty());
        assert_eq!(remove, BTreeSet::from(["y".to_string()]));
    }
}
