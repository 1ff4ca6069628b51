//! Scrub's pure part: what one member holds of an object (its scrub map entry), and the
//! comparison of the members' maps that names inconsistent objects and the copy to trust.
//!
//! A light scrub compares object lists, sizes and digests of xattrs and omap; a deep scrub also
//! reads every byte (the store checks each block's crc32c on the way) and compares data digests.
//! Objects carry no version of their own (only the PG log does, and every member of an active
//! PG holds the same log), so versions are not compared object by object.

use std::collections::{BTreeMap, BTreeSet};

use shoal_map::OsdId;
use shoal_proto::osd::{Eversion, InconsistentObject, ScrubObject};
use shoal_proto::{ErrorCode, RemoteError};
use shoal_store::{ObjectStore, StoreError};
use shoal_util::checksum::crc32c_append;

use crate::exec::store_error;

/// Bytes read per store call while a deep scrub digests an object's data.
const READ_PIECE_BYTES: u64 = 4 << 20;
/// Omap entries read per store call while digesting.
const OMAP_PAGE: usize = 4096;

/// The digests are over length-prefixed fields, so that moving a byte from a name to its value
/// changes the digest.
fn digest_field(crc: u32, field: &[u8]) -> u32 {
    crc32c_append(crc32c_append(crc, &(field.len() as u64).to_le_bytes()), field)
}

/// What this store holds of object `name` of collection `coll`; `None` if it does not exist.
/// With `deep`, every byte is read and digested. A read that fails (a checksum error: damaged
/// data) is reported in the entry, not as an error: that is what scrub is looking for.
pub fn scrub_object(
    store: &dyn ObjectStore,
    coll: &str,
    name: &str,
    deep: bool,
) -> Result<Option<ScrubObject>, RemoteError> {
    let stat = match store.stat(coll, name) {
        Ok(s) => s,
        Err(StoreError::NoSuchObject { .. } | StoreError::NoSuchCollection(_)) => return Ok(None),
        Err(e) => return Err(store_error(&e)),
    };
    let mut entry = ScrubObject {
        name: name.to_string(),
        size_bytes: stat.size_bytes,
        xattr_digest: 0,
        omap_digest: 0,
        data_digest: None,
        read_error: None,
        version: crate::objver::stored(store, coll, name).unwrap_or_default(),
    };
    let mut damaged = |e: StoreError| -> Result<(), RemoteError> {
        match e {
            StoreError::Checksum { .. }
            | StoreError::Corrupt(_)
            | StoreError::Unreadable { .. }
            | StoreError::Io { .. } => {
                entry.read_error.get_or_insert_with(|| e.to_string());
                Ok(())
            }
            other => Err(store_error(&other)),
        }
    };
    let mut xattr_digest = 0u32;
    let mut snapset = None;
    match store.list_xattrs(coll, name) {
        Ok(xattrs) => {
            for (k, v) in xattrs {
                xattr_digest = digest_field(digest_field(xattr_digest, k.as_bytes()), &v);
                if k == crate::snaps::SNAPSET_XATTR {
                    snapset = Some(v);
                }
            }
        }
        Err(e) => damaged(e)?,
    }
    // A snapshot state (on a head, or on the snapshot directory of a head removed with clones
    // kept) must name only clones this member holds: a head without one of them is not a copy
    // of the object, even when every member's copy agrees (decision 0099). Such a copy cannot be
    // the authority; if no member's can, the object is reported and nothing is repaired.
    if let Some(value) = snapset {
        let head = crate::snaps::head_of(name);
        match crate::snaps::SnapSet::decode(head, &value) {
            Ok(set) => match crate::snaps::first_absent_clone(store, coll, head, &set) {
                Ok(None) => {}
                Ok(Some(id)) => damaged(StoreError::Corrupt(format!(
                    "{name}: its snapshot state names clone {id} of {head}, which is not here"
                )))?,
                Err(e) => damaged(e)?,
            },
            Err(e) => damaged(StoreError::Corrupt(e.message))?,
        }
    }
    let mut omap_digest = 0u32;
    let mut after: Option<Vec<u8>> = None;
    loop {
        let page = match store.omap_list(coll, name, after.as_deref(), OMAP_PAGE) {
            Ok(p) => p,
            Err(e) => {
                damaged(e)?;
                break;
            }
        };
        let Some((last, _)) = page.last() else { break };
        after = Some(last.clone());
        let short = page.len() < OMAP_PAGE;
        for (k, v) in &page {
            omap_digest = digest_field(digest_field(omap_digest, k), v);
        }
        if short {
            break;
        }
    }
    let mut data_digest = None;
    if deep {
        let mut crc = 0u32;
        let mut offset = 0u64;
        while offset < stat.size_bytes {
            let len = READ_PIECE_BYTES.min(stat.size_bytes - offset);
            match store.read_media(coll, name, offset, len) {
                Ok(bytes) if bytes.len() as u64 == len => crc = crc32c_append(crc, &bytes),
                Ok(bytes) => {
                    let context = format!("short read of {name}: {} of {len} bytes at {offset}", bytes.len());
                    damaged(StoreError::Io { context, source: std::io::Error::other("short read") })?;
                    break;
                }
                Err(e) => {
                    damaged(e)?;
                    break;
                }
            }
            offset += len;
        }
        data_digest = Some(crc);
    }
    entry.xattr_digest = xattr_digest;
    entry.omap_digest = omap_digest;
    entry.data_digest = data_digest;
    if entry.read_error.is_some() {
        entry.data_digest = None;
    }
    Ok(Some(entry))
}

/// Scrub map entries of `names` (those that exist), in order.
pub fn scrub_map(
    store: &dyn ObjectStore,
    coll: &str,
    names: &[String],
    deep: bool,
) -> Result<Vec<ScrubObject>, RemoteError> {
    let mut out = Vec::with_capacity(names.len());
    for name in names {
        if let Some(entry) = scrub_object(store, coll, name, deep)? {
            out.push(entry);
        }
    }
    Ok(out)
}

/// What a member's copy says, for voting: absent, or its size and digests.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Vote {
    Absent,
    Present { size_bytes: u64, xattr: u32, omap: u32, data: Option<u32> },
}

fn vote_of(entry: Option<&ScrubObject>) -> Option<Vote> {
    match entry {
        None => Some(Vote::Absent),
        Some(e) if e.read_error.is_some() => None,
        Some(e) => Some(Vote::Present {
            size_bytes: e.size_bytes,
            xattr: e.xattr_digest,
            omap: e.omap_digest,
            data: e.data_digest,
        }),
    }
}

/// Compares the scrub maps of one chunk (`maps`: each member's entries for the same name range)
/// and returns the inconsistent objects in name order.
///
/// The copy to trust is chosen by vote among the readable copies (a missing object votes
/// "absent"): the most common one wins, a tie goes to the primary's copy if it is among the tied,
/// else to the lowest-numbered member's. A copy that could not be read never wins; an object no
/// member can read has no authority and cannot be repaired.
#[must_use]
pub fn compare(primary: OsdId, maps: &BTreeMap<OsdId, Vec<ScrubObject>>) -> Vec<InconsistentObject> {
    let by_member: BTreeMap<OsdId, BTreeMap<&str, &ScrubObject>> =
        maps.iter().map(|(o, entries)| (*o, entries.iter().map(|e| (e.name.as_str(), e)).collect())).collect();
    let names: BTreeSet<&str> = by_member.values().flat_map(|m| m.keys().copied()).collect();
    let mut out = Vec::new();
    for name in names {
        let copies: BTreeMap<OsdId, Option<&ScrubObject>> =
            by_member.iter().map(|(o, m)| (*o, m.get(name).copied())).collect();
        let votes: BTreeMap<OsdId, Option<Vote>> = copies.iter().map(|(o, e)| (*o, vote_of(*e))).collect();
        let all_same = {
            let mut distinct = votes.values();
            let first = distinct.next().cloned().flatten();
            first.is_some() && votes.values().all(|v| v.as_ref() == first.as_ref())
        };
        // Stored versions are compared where both copies have one (see below): copies that vote
        // alike are still inconsistent if two of their known versions differ.
        let known: BTreeSet<Eversion> = copies
            .values()
            .flatten()
            .filter(|e| e.read_error.is_none() && e.version != Eversion::default())
            .map(|e| e.version)
            .collect();
        if all_same && known.len() <= 1 {
            continue;
        }
        let mut tally: BTreeMap<&Vote, usize> = BTreeMap::new();
        for v in votes.values().flatten() {
            *tally.entry(v).or_default() += 1;
        }
        let best = tally.values().copied().max().unwrap_or(0);
        let tied: Vec<&Vote> = tally.iter().filter(|(_, n)| **n == best).map(|(v, _)| *v).collect();
        let winner: Option<&Vote> = match votes.get(&primary).and_then(Option::as_ref) {
            Some(pv) if tied.contains(&pv) => Some(pv),
            _ => votes.values().flatten().find(|v| tied.contains(v)),
        };
        let auth = winner.and_then(|w| votes.iter().find(|(_, v)| v.as_ref() == Some(w)).map(|(o, _)| *o));
        let auth_entry = auth.and_then(|a| copies.get(&a).copied().flatten());
        let mut errors = Vec::new();
        for (osd, entry) in &copies {
            let mut what: Vec<String> = Vec::new();
            match (entry, winner) {
                (Some(e), _) if e.read_error.is_some() => what.push("read_error".into()),
                (None, Some(Vote::Present { .. })) => what.push("missing".into()),
                (Some(_), Some(Vote::Absent)) => what.push("extra".into()),
                (Some(e), Some(Vote::Present { .. })) => {
                    if let Some(a) = auth_entry {
                        if e.size_bytes != a.size_bytes {
                            what.push("size_mismatch".into());
                        }
                        if e.data_digest != a.data_digest {
                            what.push("data_digest_mismatch".into());
                        }
                        if e.omap_digest != a.omap_digest {
                            what.push("omap_digest_mismatch".into());
                        }
                        if e.xattr_digest != a.xattr_digest {
                            what.push("attr_mismatch".into());
                        }
                        // Members apply the same writes at the same versions, so two stored
                        // versions that differ mean one is wrong (peering trusts them: decision
                        // 0039). A copy without one (installed in parts) is not compared.
                        let known = |v: Eversion| v != Eversion::default();
                        if known(e.version) && known(a.version) && e.version != a.version {
                            what.push("version_mismatch".into());
                        }
                    }
                }
                _ => {}
            }
            if !what.is_empty() {
                errors.push((*osd, what));
            }
        }
        if errors.is_empty() && auth.is_some() {
            // Versions differ only among copies the authority's (unknown) version does not
            // judge: nothing to repair against it.
            continue;
        }
        out.push(InconsistentObject { name: name.to_string(), auth, errors });
    }
    out
}

/// The error a member answers a scrub request with when it is not at the version asked for (the
/// primary asks again later).
#[must_use]
pub fn not_there_yet(detail: String) -> RemoteError {
    RemoteError::new(ErrorCode::Timeout, detail)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj(name: &str, size: u64, data: u32) -> ScrubObject {
        ScrubObject {
            name: name.into(),
            size_bytes: size,
            xattr_digest: 1,
            omap_digest: 2,
            data_digest: Some(data),
            read_error: None,
            version: Eversion { epoch: 3, seq: 10 },
        }
    }

    #[test]
    fn known_stored_versions_that_differ_are_inconsistent_and_unknown_ones_are_not_judged() {
        let at = |seq: u64| {
            let mut o = obj("a", 1, 7);
            o.version = Eversion { epoch: 3, seq };
            o
        };
        let maps = BTreeMap::from([(OsdId(0), vec![at(10)]), (OsdId(1), vec![at(10)]), (OsdId(2), vec![at(9)])]);
        let found = compare(OsdId(0), &maps);
        assert_eq!(found.len(), 1, "same data, a stale version: {found:?}");
        assert_eq!(found[0].auth, Some(OsdId(0)));
        assert_eq!(found[0].errors, vec![(OsdId(2), vec!["version_mismatch".to_string()])]);
        // A copy installed in parts has no version yet: not a mismatch.
        let none = || {
            let mut o = obj("a", 1, 7);
            o.version = Eversion::default();
            o
        };
        let unknown = BTreeMap::from([(OsdId(0), vec![at(10)]), (OsdId(1), vec![none()])]);
        assert!(compare(OsdId(0), &unknown).is_empty());
        // Nor are two known versions judged by an authority that has none.
        let auth_unknown =
            BTreeMap::from([(OsdId(0), vec![none()]), (OsdId(1), vec![at(12)]), (OsdId(2), vec![at(11)])]);
        assert!(compare(OsdId(0), &auth_unknown).is_empty(), "nothing judges them");
    }

    #[test]
    fn agreeing_members_are_consistent() {
        let maps = BTreeMap::from([
            (OsdId(0), vec![obj("a", 1, 7), obj("b", 2, 8)]),
            (OsdId(1), vec![obj("a", 1, 7), obj("b", 2, 8)]),
        ]);
        assert!(compare(OsdId(0), &maps).is_empty());
    }

    #[test]
    fn the_majority_wins_and_a_tie_goes_to_the_primary() {
        let maps = BTreeMap::from([
            (OsdId(0), vec![obj("a", 1, 9)]),
            (OsdId(1), vec![obj("a", 1, 7)]),
            (OsdId(2), vec![obj("a", 1, 7)]),
        ]);
        let found = compare(OsdId(0), &maps);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].auth, Some(OsdId(1)));
        assert_eq!(found[0].errors, vec![(OsdId(0), vec!["data_digest_mismatch".to_string()])]);

        let two = BTreeMap::from([(OsdId(3), vec![obj("a", 1, 9)]), (OsdId(1), vec![obj("a", 1, 7)])]);
        let found = compare(OsdId(3), &two);
        assert_eq!(found[0].auth, Some(OsdId(3)), "a tie goes to the primary");
    }

    #[test]
    fn unreadable_copies_never_win_and_missing_or_extra_objects_are_named() {
        let mut bad = obj("a", 1, 7);
        bad.read_error = Some("checksum".into());
        bad.data_digest = None;
        let maps = BTreeMap::from([
            (OsdId(0), vec![bad.clone(), obj("x", 5, 5)]),
            (OsdId(1), vec![obj("a", 1, 7)]),
            (OsdId(2), vec![obj("a", 1, 7)]),
        ]);
        let found = compare(OsdId(0), &maps);
        assert_eq!(found.len(), 2);
        assert_eq!(found[0].name, "a");
        assert_eq!(found[0].auth, Some(OsdId(1)));
        assert_eq!(found[0].errors, vec![(OsdId(0), vec!["read_error".to_string()])]);
        assert_eq!(found[1].name, "x");
        assert_eq!(found[1].errors, vec![(OsdId(0), vec!["extra".to_string()])]);

        let lone = BTreeMap::from([(OsdId(0), vec![bad.clone()]), (OsdId(1), vec![bad])]);
        let found = compare(OsdId(0), &lone);
        assert_eq!(found[0].auth, None, "no readable copy: no authority");
    }

    #[test]
    fn a_snapshot_state_naming_a_clone_not_held_is_a_bad_copy() {
        use crate::snaps::{SNAPSET_XATTR, SnapSet, clone_name, snapdir_name};
        use shoal_proto::osd::CloneInfo;
        use shoal_store::engine::MemEngine;
        use shoal_store::{Durability, Transaction};

        let store = MemEngine::new_mem(64 << 20).expect("store");
        let set = SnapSet { seq: 4, clones: vec![CloneInfo { id: 2, snaps: vec![1, 2], size_bytes: 3 }] };
        let mut txn = Transaction::new();
        txn.create_collection("c");
        txn.touch("c", "o").write("c", "o", 0, b"new".to_vec());
        txn.set_xattr("c", "o", SNAPSET_XATTR, set.encode());
        // A removed head's state on its snapshot directory, naming the same absent clone.
        txn.touch("c", &snapdir_name("p")).set_xattr("c", &snapdir_name("p"), SNAPSET_XATTR, set.encode());
        store.commit(txn, Durability::Batch).expect("commit");
        for (name, head) in [("o".to_string(), "o"), (snapdir_name("p"), "p")] {
            let entry = scrub_object(&store, "c", &name, false).expect("scrub").expect("exists");
            let why = entry.read_error.expect("a clone named and not held is an error");
            assert!(why.contains(&format!("clone 2 of {head}")), "{why}");
        }

        let mut txn = Transaction::new();
        for head in ["o", "p"] {
            txn.touch("c", &clone_name(head, 2)).write("c", &clone_name(head, 2), 0, b"old".to_vec());
        }
        store.commit(txn, Durability::Batch).expect("commit");
        for name in ["o".to_string(), snapdir_name("p")] {
            let entry = scrub_object(&store, "c", &name, true).expect("scrub").expect("exists");
            assert_eq!(entry.read_error, None, "{name}: every clone named is here");
            assert!(entry.data_digest.is_some());
        }
    }

    #[test]
    fn digests_cover_field_boundaries() {
        let a = digest_field(digest_field(0, b"ab"), b"c");
        let b = digest_field(digest_field(0, b"a"), b"bc");
        assert_ne!(a, b);
    }
}
