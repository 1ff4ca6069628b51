//! An object's version: the PG log version of the last write that changed it, kept in the
//! object's record in the store (`Op::SetVersion`; decision 0039, part 2).
//!
//! The PG log says which write of an object is current only while that write is in the log. A
//! primary whose own copy turns out damaged needs a copy at exactly that write; a member whose
//! log was trimmed past it (planned for backfill) may hold it, but its log cannot show it. The
//! version stored with the object can: it is set in the same transaction as every write, travels
//! with every whole copy the OSDs make of the object (recovery, backfill and repair), and lives
//! in the store's metadata (the engine's object record, which every write rewrites anyway, so it
//! costs no key of its own), so damage to the object's data leaves it readable.

use shoal_proto::osd::{Eversion, ObjOp};
use shoal_store::{ObjectStore, Transaction};

/// Records `version` on `obj` in `txn`, a write's transaction built from `resolved` (see
/// `exec::build_transaction`), when the write leaves the object present — every write that
/// changes it, snapshot-state changes included, so that the stored version always names the
/// newest write the copy reflects. Nothing for a write that removes it, and nothing for an empty
/// `resolved`: a log-only write (a member being backfilled records the entry without touching its
/// copy, which stays what its stored version says) or one that changed nothing, which the caller
/// stamps with [`stamp_unchanged`] unless it is log-only.
///
/// With `base_vouched` false — a member being backfilled applying a write in full to an object
/// past its own recorded cursor, which happens only when the backfill push that covered the
/// object never landed (lost, or refused as too full) while the writes after it did — the copy
/// is left with no version instead: the write went onto a base nobody vouches for, so the result
/// is not the write's object, and a backfill comparing versions must send it (decision 0049).
///
/// A snapshot clone the write makes gets the same version (or none, as the head), and so does the
/// snapshot directory when the write leaves one (the head's snapshot state while the head does
/// not exist): every write of a directory is a logged write of its head's name.
pub fn stamp(
    txn: &mut Transaction,
    store: &dyn ObjectStore,
    coll: &str,
    obj: &str,
    resolved: &[ObjOp],
    version: Eversion,
    base_vouched: bool,
) {
    if resolved.is_empty() {
        return;
    }
    let stored = if base_vouched { (version.epoch, version.seq) } else { (0, 0) };
    // Writes that change only the snapshot state or the clones leave the head as it was.
    let present = presence_after(resolved).unwrap_or_else(|| matches!(store.exists(coll, obj), Ok(true)));
    if present {
        txn.set_version(coll, obj, stored);
    }
    // A clone this write makes is the head as it was before the write, and never changes after
    // (a clone id is a snapshot sequence, which only grows, so a trimmed clone is never made
    // again): the write's version names its content as well as the head's, on every member that
    // applied the write onto the same head, so a backfill comparing versions keeps it instead of
    // sending it again (decision 0049). (A clone the same write also trims is not there to stamp.)
    for op in resolved {
        if let ObjOp::SnapCloneHead { id } = op
            && !resolved.iter().any(|o| matches!(o, ObjOp::SnapRemoveClone { id: gone } if gone == id))
        {
            txn.set_version(coll, &crate::snaps::clone_name(obj, *id), stored);
        }
    }
    // The directory is rewritten whole by every write of the state it holds (removed, then made
    // again: see `exec::build_transaction`), so its content is what the write's version names on
    // every member that applied the write, as a clone's is. Its last write decides whether it is
    // there.
    if dir_presence_after(resolved) == Some(true) {
        txn.set_version(coll, &crate::snaps::snapdir_name(obj), stored);
    }
}

/// Whether the transaction of `resolved` leaves the head's snapshot directory present, as decided
/// by its last write of the snapshot state (on the directory, or moved to the head or removed);
/// `None` when no operation writes it.
fn dir_presence_after(resolved: &[ObjOp]) -> Option<bool> {
    resolved.iter().rev().find_map(|op| match op {
        ObjOp::SnapsetWrite { value, on_head, .. } => Some(value.is_some() && !on_head),
        _ => None,
    })
}

/// Records `version` on what `head`'s name holds after a write that changed nothing (its
/// resolved operations are none: a trim with nothing to trim): the head if it exists, else its
/// snapshot directory if that does; nothing for an empty name. The copy is the same, but it now
/// reflects that write too, so it is what a member needing exactly that version needs.
pub fn stamp_unchanged(txn: &mut Transaction, store: &dyn ObjectStore, coll: &str, head: &str, version: Eversion) {
    let dir = crate::snaps::snapdir_name(head);
    let target = if matches!(store.exists(coll, head), Ok(true)) {
        head
    } else if matches!(store.exists(coll, &dir), Ok(true)) {
        dir.as_str()
    } else {
        return;
    };
    txn.set_version(coll, target, (version.epoch, version.seq));
}

/// Records `version` (a copy's) on `obj`, which `txn` creates; nothing for `0'0`.
pub fn install(txn: &mut Transaction, coll: &str, obj: &str, version: Eversion) {
    if version != Eversion::default() {
        txn.set_version(coll, obj, (version.epoch, version.seq));
    }
}

/// Whether the transaction of `resolved` leaves the head object present, as decided by its last
/// operation that creates, changes or removes the head; `None` when no operation does.
fn presence_after(resolved: &[ObjOp]) -> Option<bool> {
    let mut present = None;
    for op in resolved {
        match op {
            ObjOp::Create { .. }
            | ObjOp::WriteFull { .. }
            | ObjOp::Write { .. }
            | ObjOp::Truncate { .. }
            | ObjOp::Zero { .. }
            | ObjOp::SetXattr { .. }
            | ObjOp::RemoveXattr { .. }
            | ObjOp::OmapSet { .. }
            | ObjOp::OmapRemove { .. }
            | ObjOp::SnapRestore { .. } => present = Some(true),
            ObjOp::Remove => present = Some(false),
            // Clones, the snapshot directory, and the snapshot state on a head that exists or not
            // as before: none creates or removes the head.
            _ => {}
        }
    }
    present
}

/// The version stored with `obj`, if it has one (objects written before versions were kept,
/// copies installed in parts, and absent objects have none; a store error counts as none too: it
/// can only make the caller ask for a copy it would have asked for anyway).
#[must_use]
pub fn stored(store: &dyn ObjectStore, coll: &str, obj: &str) -> Option<Eversion> {
    match store.version(coll, obj) {
        Ok((0, 0)) | Err(_) => None,
        Ok((epoch, seq)) => Some(Eversion { epoch, seq }),
    }
}

/// The version of the last write of `head`'s name that this member's copy reflects: the head's
/// stored version, or, while the head does not exist, its snapshot directory's (a write that
/// removes a head with clones leaves its state, stamped with the write's version, on the
/// directory; see [`stamp`]). `None` when neither holds one — no copy, or one nobody vouches for.
/// A directory exists only while its head does not, so the two never disagree.
#[must_use]
pub fn stored_of_name(store: &dyn ObjectStore, coll: &str, head: &str) -> Option<Eversion> {
    stored(store, coll, head).or_else(|| stored(store, coll, &crate::snaps::snapdir_name(head)))
}

/// Whether the write of `resolved` (see `exec::build_transaction`) leaves nothing of `head`'s
/// name in `store`: no head and no snapshot directory — a head that does not exist keeps its
/// clones' state on its directory, so no clones either (decision 0077). Decided as [`stamp`]
/// does: the write's last operation on the head or on the directory, else what the store holds
/// now. A write that makes a clone leaves something; a store error counts as "something" too,
/// since a caller treats an empty name as needing no copy.
#[must_use]
pub fn leaves_name_empty(store: &dyn ObjectStore, coll: &str, head: &str, resolved: &[ObjOp]) -> bool {
    if resolved.iter().any(|op| matches!(op, ObjOp::SnapCloneHead { .. })) {
        return false;
    }
    let head_after = match presence_after(resolved) {
        Some(present) => present,
        None => !matches!(store.exists(coll, head), Ok(false)),
    };
    // Most writes leave the head there: no lookup of the directory on their path.
    if head_after {
        return false;
    }
    let dir_after = match dir_presence_after(resolved) {
        Some(present) => present,
        None => !matches!(store.exists(coll, &crate::snaps::snapdir_name(head)), Ok(false)),
    };
    !dir_after
}

#[cfg(test)]
mod tests {
    use super::*;
    use shoal_store::Durability;
    use shoal_store::engine::MemEngine;

    #[test]
    fn a_removed_head_is_known_by_its_snapshot_directory_or_not_at_all() {
        let store = MemEngine::new_mem(64 << 20).expect("store");
        let dir = crate::snaps::snapdir_name("removed");
        let mut txn = Transaction::new();
        txn.create_collection("c");
        txn.touch("c", "head").set_version("c", "head", (4, 2));
        txn.touch("c", &dir).set_version("c", &dir, (5, 7));
        txn.touch("c", "unvouched");
        store.commit(txn, Durability::Sync).expect("commit");
        let at = |epoch, seq| Some(Eversion { epoch, seq });
        assert_eq!(stored_of_name(&store, "c", "head"), at(4, 2));
        assert_eq!(stored_of_name(&store, "c", "removed"), at(5, 7), "the directory's version");
        assert_eq!(stored_of_name(&store, "c", "unvouched"), None);
        assert_eq!(stored_of_name(&store, "c", "never"), None);

        // A write that changes nothing stamps what the name holds.
        let mut txn = Transaction::new();
        stamp_unchanged(&mut txn, &store, "c", "head", Eversion { epoch: 6, seq: 1 });
        stamp_unchanged(&mut txn, &store, "c", "removed", Eversion { epoch: 6, seq: 2 });
        stamp_unchanged(&mut txn, &store, "c", "never", Eversion { epoch: 6, seq: 3 });
        store.commit(txn, Durability::Sync).expect("commit");
        assert_eq!(stored_of_name(&store, "c", "head"), at(6, 1));
        assert_eq!(stored_of_name(&store, "c", "removed"), at(6, 2));
        assert_eq!(stored_of_name(&store, "c", "never"), None, "nothing made for an empty name");

        // Whether a write leaves the name empty: by its last operation on the head or directory,
        // else by what is there.
        let remove = [ObjOp::Remove];
        assert!(leaves_name_empty(&store, "c", "head", &remove), "a head without clones removed");
        assert!(!leaves_name_empty(&store, "c", "head", &[]), "nothing changes a present head");
        assert!(!leaves_name_empty(&store, "c", "removed", &remove), "its directory stays");
        assert!(leaves_name_empty(&store, "c", "never", &[]));
        assert!(!leaves_name_empty(&store, "c", "head", &[ObjOp::SnapCloneHead { id: 3 }, ObjOp::Remove]));
        assert!(!leaves_name_empty(&store, "no-such-collection", "never", &[]), "an error is not an absence");
    }

    #[test]
    fn the_last_operation_on_the_head_decides_whether_it_is_there() {
        let write = ObjOp::Write { offset: 0, len_bytes: 1 };
        assert_eq!(presence_after(std::slice::from_ref(&write)), Some(true));
        assert_eq!(presence_after(&[write.clone(), ObjOp::Remove]), Some(false));
        assert_eq!(presence_after(&[ObjOp::Remove, ObjOp::Create { exclusive: false }]), Some(true));
        assert_eq!(presence_after(&[ObjOp::SnapRemoveClone { id: 3 }]), None);
        assert_eq!(presence_after(&[]), None);
    }
}
