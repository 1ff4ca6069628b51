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
/// `exec::build_transaction`), when the write leaves the object present; a write that removes
/// it, or that changes only its snapshot companions, records nothing.
pub fn stamp(txn: &mut Transaction, coll: &str, obj: &str, resolved: &[ObjOp], version: Eversion) {
    if leaves_present(resolved) {
        txn.set_version(coll, obj, (version.epoch, version.seq));
    }
}

/// Records `version` (a copy's) on `obj`, which `txn` creates; nothing for `0'0`.
pub fn install(txn: &mut Transaction, coll: &str, obj: &str, version: Eversion) {
    if version != Eversion::default() {
        txn.set_version(coll, obj, (version.epoch, version.seq));
    }
}

/// Whether the transaction of `resolved` ends with the head object present: its last operation
/// that creates, changes or removes the head is not a removal.
fn leaves_present(resolved: &[ObjOp]) -> bool {
    let mut present = false;
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
            | ObjOp::SnapRestore { .. } => present = true,
            ObjOp::Remove => present = false,
            // Clones, the snapshot directory, and the snapshot state on a head some earlier
            // operation (or an earlier write) made: none creates or removes the head.
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_writes_that_leave_the_head_present_are_stamped() {
        let write = ObjOp::Write { offset: 0, len_bytes: 1 };
        assert!(leaves_present(std::slice::from_ref(&write)));
        assert!(!leaves_present(&[write.clone(), ObjOp::Remove]));
        assert!(leaves_present(&[ObjOp::Remove, ObjOp::Create { exclusive: false }]));
        assert!(!leaves_present(&[ObjOp::SnapRemoveClone { id: 3 }]));
        assert!(!leaves_present(&[]));
    }
}
