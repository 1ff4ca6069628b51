//! Object snapshots (self-managed, as RADOS has them for block images): an object's snapshot
//! state ([`SnapSet`]), where it lives, how a read at a snapshot finds its data, and what a write
//! under a snapshot context must clone first.
//!
//! Layout in a PG's collection: the head object `NAME` holds its snapshot state in the reserved
//! xattr [`SNAPSET_XATTR`]; clone `ID` of it is the object `NAME\u{1}` + 16 hex digits of `ID`;
//! while the head does not exist but clones do, the state lives on the snap directory object
//! `NAME\u{1}dir`. `\u{1}` is refused in clients' object names and xattr names, so these names
//! cannot collide with anything a client makes; they sort right after their head, and they move
//! with it in recovery (see [`companions`]).
//!
//! Clone rule: a write carrying a context whose `seq` is newer than the state's `seq` first
//! copies the existing head to clone `seq`, which then serves the context's snapshots newer
//! than the state's old `seq` (if none of them is still live, nothing is copied); the state's
//! `seq` becomes the context's. Read rule at snapshot `s`: the first clone with id ≥ `s` serves
//! `s` if it lists `s`; if no clone has id ≥ `s` and `s` is newer than the state's `seq`, the
//! head serves it (nothing changed since); otherwise the object did not exist at `s`.

use shoal_proto::osd::CloneInfo;
use shoal_proto::{ErrorCode, RemoteError};
use shoal_store::{ObjectStore, StoreError};

use crate::exec::store_error;

/// The reserved xattr holding an object's snapshot state.
pub const SNAPSET_XATTR: &str = "\u{1}snapset";
/// What separates a head's name from its companions' suffixes.
pub const COMPANION_SEP: char = '\u{1}';
/// Snapshot ids a context may name at most (and so clones an object may have).
pub const MAX_SNAPS: usize = 256;
/// Longest head name that can have companions (the store's 255 bytes less a clone's suffix).
pub const MAX_HEAD_NAME_BYTES: usize = 255 - 17;
const FORMAT_VERSION: u8 = 1;

/// An object's snapshot state.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SnapSet {
    /// The newest snapshot context `seq` a write to the object carried.
    pub seq: u64,
    /// Clones, oldest (smallest id) first.
    pub clones: Vec<CloneInfo>,
}

impl SnapSet {
    /// The stored form: version byte, then little-endian `seq`, clone count, and per clone its
    /// id, size, snapshot count and snapshot ids.
    #[must_use]
    pub fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(13 + self.clones.len() * 28);
        v.push(FORMAT_VERSION);
        v.extend_from_slice(&self.seq.to_le_bytes());
        v.extend_from_slice(&(self.clones.len() as u32).to_le_bytes());
        for c in &self.clones {
            v.extend_from_slice(&c.id.to_le_bytes());
            v.extend_from_slice(&c.size_bytes.to_le_bytes());
            v.extend_from_slice(&(c.snaps.len() as u32).to_le_bytes());
            for s in &c.snaps {
                v.extend_from_slice(&s.to_le_bytes());
            }
        }
        v
    }

    /// Parses [`SnapSet::encode`]'s form; damage is `Corrupt`, naming the object.
    pub fn decode(obj: &str, bytes: &[u8]) -> Result<SnapSet, RemoteError> {
        let bad = |what: &str| RemoteError::new(ErrorCode::Corrupt, format!("snapshot state of {obj}: {what}"));
        let mut at = 0usize;
        let mut take = |n: usize| -> Result<&[u8], RemoteError> {
            let s = bytes.get(at..at + n).ok_or_else(|| bad("truncated"))?;
            at += n;
            Ok(s)
        };
        if take(1)?[0] != FORMAT_VERSION {
            return Err(bad("unknown format version"));
        }
        let u64_of = |b: &[u8]| u64::from_le_bytes(b.try_into().unwrap_or([0; 8]));
        let u32_of = |b: &[u8]| u32::from_le_bytes(b.try_into().unwrap_or([0; 4]));
        let seq = u64_of(take(8)?);
        let count = u32_of(take(4)?) as usize;
        if count > MAX_SNAPS {
            return Err(bad("too many clones"));
        }
        let mut clones = Vec::with_capacity(count);
        for _ in 0..count {
            let id = u64_of(take(8)?);
            let size_bytes = u64_of(take(8)?);
            let n = u32_of(take(4)?) as usize;
            if n > MAX_SNAPS {
                return Err(bad("a clone serves too many snapshots"));
            }
            let mut snaps = Vec::with_capacity(n);
            for _ in 0..n {
                snaps.push(u64_of(take(8)?));
            }
            clones.push(CloneInfo { id, snaps, size_bytes });
        }
        if at != bytes.len() {
            return Err(bad("trailing bytes"));
        }
        Ok(SnapSet { seq, clones })
    }

    /// Whether the state says nothing a read or write needs (no clone; `seq` alone only makes
    /// the next write skip cloning for snapshots the object did not exist at, which an absent
    /// head also gives).
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.clones.is_empty()
    }
}

/// Where a read at a snapshot finds its object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SnapTarget {
    Head,
    Clone(u64),
    /// The object did not exist at that snapshot.
    Absent,
}

/// The read rule (see the module documentation).
#[must_use]
pub fn resolve_read(set: &SnapSet, head_exists: bool, snap: u64) -> SnapTarget {
    match set.clones.iter().find(|c| c.id >= snap) {
        Some(c) if c.snaps.contains(&snap) => SnapTarget::Clone(c.id),
        Some(_) => SnapTarget::Absent,
        None if snap > set.seq && head_exists => SnapTarget::Head,
        None => SnapTarget::Absent,
    }
}

/// The clone a write under context (`seq`, `snaps`) must make first, if any, and the state after
/// it. `head_size` is `None` when the head does not exist.
#[must_use]
pub fn plan_clone(set: &SnapSet, seq: u64, snaps: &[u64], head_size: Option<u64>) -> (Option<u64>, SnapSet) {
    let mut next = set.clone();
    if seq <= set.seq {
        return (None, next);
    }
    next.seq = seq;
    let Some(size_bytes) = head_size else { return (None, next) };
    let served: Vec<u64> = snaps.iter().copied().filter(|s| *s > set.seq && *s <= seq).collect();
    if served.is_empty() {
        return (None, next);
    }
    next.clones.push(CloneInfo { id: seq, snaps: served, size_bytes });
    (Some(seq), next)
}

/// Drops snapshots that are no longer live (at most `seq` and not in `live`) from the clones;
/// returns the clones left serving nothing (to remove) and the state after.
#[must_use]
pub fn plan_trim(set: &SnapSet, seq: u64, live: &[u64]) -> (Vec<u64>, SnapSet) {
    let mut next = set.clone();
    let mut removed = Vec::new();
    for c in &mut next.clones {
        c.snaps.retain(|s| *s > seq || live.contains(s));
        if c.snaps.is_empty() {
            removed.push(c.id);
        }
    }
    next.clones.retain(|c| !c.snaps.is_empty());
    (removed, next)
}

/// Checks a snapshot context: ids newest first, none above `seq`, at most [`MAX_SNAPS`].
pub fn check_context(seq: u64, snaps: &[u64]) -> Result<(), RemoteError> {
    let invalid = |m: String| Err(RemoteError::new(ErrorCode::Invalid, m));
    if snaps.len() > MAX_SNAPS {
        return invalid(format!("a snapshot context names {} snapshots, over the limit of {MAX_SNAPS}", snaps.len()));
    }
    if snaps.first().is_some_and(|s| *s > seq) {
        return invalid(format!("a snapshot context names snapshot {} newer than its seq {seq}", snaps[0]));
    }
    if snaps.windows(2).any(|w| w[0] <= w[1]) {
        return invalid("a snapshot context's snapshots must be distinct and newest first".to_string());
    }
    Ok(())
}

/// The name of clone `id` of `head`.
#[must_use]
pub fn clone_name(head: &str, id: u64) -> String {
    format!("{head}{COMPANION_SEP}{id:016x}")
}

/// The name of `head`'s snap directory object.
#[must_use]
pub fn snapdir_name(head: &str) -> String {
    format!("{head}{COMPANION_SEP}dir")
}

/// The prefix every companion (clone or snap directory) of `head` starts with.
#[must_use]
pub fn companion_prefix(head: &str) -> String {
    format!("{head}{COMPANION_SEP}")
}

/// Whether a backfill cursor `cursor` stands between `head` and its last companion: the head
/// was sent (it sorts before its companions) while some of its clones may not have been yet, so
/// the member's head and companions together are not a copy of the object.
#[must_use]
pub fn cursor_splits(cursor: &str, head: &str) -> bool {
    cursor.starts_with(head) && (cursor.len() == head.len() || cursor[head.len()..].starts_with(COMPANION_SEP))
}

/// The head a stored name belongs to: the name itself for a head, the part before the separator
/// for a companion.
#[must_use]
pub fn head_of(name: &str) -> &str {
    name.split(COMPANION_SEP).next().unwrap_or(name)
}

/// Whether a stored name is a companion rather than a head (clients never see these).
#[must_use]
pub fn is_companion(name: &str) -> bool {
    name.contains(COMPANION_SEP)
}

/// Refuses a client's object name that is reserved for companions.
pub fn check_client_object(name: &str) -> Result<(), RemoteError> {
    if is_companion(name) {
        return Err(RemoteError::new(
            ErrorCode::Invalid,
            format!("object name {name:?} contains the reserved character U+0001"),
        ));
    }
    Ok(())
}

/// Refuses a client's xattr name that is reserved.
pub fn check_client_xattr(name: &str) -> Result<(), RemoteError> {
    if name.starts_with(COMPANION_SEP) {
        return Err(RemoteError::new(
            ErrorCode::Invalid,
            format!("xattr name {name:?} starts with the reserved character U+0001"),
        ));
    }
    Ok(())
}

/// The snapshot state of `head` as stored: on the head, or on its snap directory object when
/// the head does not exist. Returns the state and whether the snap directory object exists.
pub fn load(
    store: &dyn ObjectStore,
    coll: &str,
    head: &str,
    head_exists: bool,
) -> Result<(SnapSet, bool), RemoteError> {
    let absent = |e: &StoreError| matches!(e, StoreError::NoSuchObject { .. } | StoreError::NoSuchCollection(_));
    let snapdir = snapdir_name(head);
    let (holder, snapdir_exists) = if head_exists {
        (head.to_string(), false)
    } else {
        match store.exists(coll, &snapdir) {
            Ok(true) => (snapdir.clone(), true),
            Ok(false) => return Ok((SnapSet::default(), false)),
            Err(e) if absent(&e) => return Ok((SnapSet::default(), false)),
            Err(e) => return Err(store_error(&e)),
        }
    };
    // A head with companions never has a snap directory too (writes move the state), but a head
    // does not look for one: its own xattr is the truth.
    let set = match store.get_xattr(coll, &holder, SNAPSET_XATTR) {
        Ok(Some(v)) => SnapSet::decode(head, &v)?,
        Ok(None) => SnapSet::default(),
        Err(e) if absent(&e) => SnapSet::default(),
        Err(e) => return Err(store_error(&e)),
    };
    Ok((set, snapdir_exists))
}

/// The first clone `set` (the snapshot state of `head`) names that this store does not hold: a
/// head without one of its clones is not a copy of the object, whatever version it carries
/// (decision 0099). Read by a pull's answer and by scrub.
pub fn first_absent_clone(
    store: &dyn ObjectStore,
    coll: &str,
    head: &str,
    set: &SnapSet,
) -> Result<Option<u64>, StoreError> {
    for clone in &set.clones {
        if !store.exists(coll, &clone_name(head, clone.id))? {
            return Ok(Some(clone.id));
        }
    }
    Ok(None)
}

/// Adds to `txn` the removal of the local head `head` alone, leaving what a client's removal
/// leaves: its clones stay, and its snapshot state moves to the snap directory while clones need
/// it. The directory gets no version: while the head does not exist, the directory carries the
/// version of the head's last write (`objver::stamp`), and this removal is no write of the PG's
/// history — the decision's logged write that follows stamps it. (With the head's version, a
/// decision dropped before it was logged left a copy that passed for the head's newest write as
/// a removal of it: simulation seed 1210974 of `--rot-unacked --snaps`.) Nothing when the head is
/// not here (its clones and directory, if any, stay as they are).
///
/// For an operator's decision to give an unfound head up (`mark-unfound-lost delete`): the head's
/// newest write is lost, but its clones hold snapshots that were acknowledged, and removing them
/// too would lose those on every member the primary's copy is then pushed to.
pub fn remove_head_keeping_clones(
    txn: &mut shoal_store::Transaction,
    store: &dyn ObjectStore,
    coll: &str,
    head: &str,
) -> Result<(), RemoteError> {
    let absent = |e: &StoreError| matches!(e, StoreError::NoSuchObject { .. } | StoreError::NoSuchCollection(_));
    match store.exists(coll, head) {
        Ok(true) => {}
        Ok(false) => return Ok(()),
        Err(e) if absent(&e) => return Ok(()),
        Err(e) => return Err(store_error(&e)),
    }
    if head.len() > MAX_HEAD_NAME_BYTES {
        txn.remove(coll, head);
        return Ok(());
    }
    let (set, _) = load(store, coll, head, true)?;
    txn.remove(coll, head);
    let dir = snapdir_name(head);
    match store.exists(coll, &dir) {
        Ok(true) => {
            txn.remove(coll, &dir);
        }
        Ok(false) => {}
        Err(e) if absent(&e) => {}
        Err(e) => return Err(store_error(&e)),
    }
    if !set.is_empty() {
        txn.touch(coll, &dir).set_xattr(coll, &dir, SNAPSET_XATTR, set.encode());
    }
    Ok(())
}

/// Names of `head`'s companions in the store, in name order (bounded by [`MAX_SNAPS`] + 1).
pub fn companions(store: &dyn ObjectStore, coll: &str, head: &str) -> Result<Vec<String>, RemoteError> {
    let prefix = companion_prefix(head);
    match store.list_objects(coll, &prefix, None, MAX_SNAPS + 2) {
        Ok(page) => Ok(page.objects),
        Err(StoreError::NoSuchCollection(_)) => Ok(Vec::new()),
        Err(e) => Err(store_error(&e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shoal_store::engine::MemEngine;
    use shoal_store::{Durability, Transaction};

    #[test]
    fn a_head_removed_alone_leaves_its_clones_read_through_the_snap_directory() {
        let store = MemEngine::new_mem(64 << 20).expect("store");
        let set = SnapSet { seq: 4, clones: vec![CloneInfo { id: 2, snaps: vec![1, 2], size_bytes: 3 }] };
        let mut txn = Transaction::new();
        txn.create_collection("c");
        txn.touch("c", "o").write("c", "o", 0, b"new".to_vec());
        txn.set_xattr("c", "o", SNAPSET_XATTR, set.encode());
        txn.set_version("c", "o", (7, 9));
        txn.touch("c", &clone_name("o", 2)).write("c", &clone_name("o", 2), 0, b"old".to_vec());
        store.commit(txn, Durability::Batch).expect("commit");

        let mut txn = Transaction::new();
        remove_head_keeping_clones(&mut txn, &store, "c", "o").expect("plan");
        store.commit(txn, Durability::Batch).expect("commit");
        assert!(!store.exists("c", "o").expect("exists"), "the head is gone");
        let (held, dir) = load(&store, "c", "o", false).expect("load");
        assert!(dir, "the state moved to the snap directory");
        assert_eq!(held, set, "the same state");
        assert_eq!(resolve_read(&held, false, 1), SnapTarget::Clone(2));
        assert_eq!(store.read_all("c", &clone_name("o", 2)).expect("clone"), b"old");
        assert_eq!(crate::objver::stored(&store, "c", &snapdir_name("o")), None, "no write of the history made it");

        // Again, with the head gone: nothing changes.
        let mut txn = Transaction::new();
        remove_head_keeping_clones(&mut txn, &store, "c", "o").expect("plan");
        store.commit(txn, Durability::Batch).expect("commit");
        assert_eq!(load(&store, "c", "o", false).expect("load"), (set, true));

        // A head without clones leaves no directory.
        let mut txn = Transaction::new();
        txn.touch("c", "p").write("c", "p", 0, b"x".to_vec());
        store.commit(txn, Durability::Batch).expect("commit");
        let mut txn = Transaction::new();
        remove_head_keeping_clones(&mut txn, &store, "c", "p").expect("plan");
        store.commit(txn, Durability::Batch).expect("commit");
        assert!(companions(&store, "c", "p").expect("companions").is_empty());
        assert!(!store.exists("c", "p").expect("exists"));
    }

    #[test]
    fn a_cursor_splits_a_head_from_its_companions_only_between_them() {
        assert!(cursor_splits("obj", "obj"), "the head sent, its clones not yet");
        assert!(cursor_splits(&clone_name("obj", 3), "obj"));
        assert!(cursor_splits(&snapdir_name("obj"), "obj"), "conservative: the directory is last");
        assert!(!cursor_splits("obj2", "obj"), "another head that merely shares the prefix");
        assert!(!cursor_splits("oba", "obj") && !cursor_splits("obk", "obj"));
    }

    #[test]
    fn the_stored_form_round_trips_and_damage_is_refused() {
        let set = SnapSet {
            seq: 9,
            clones: vec![
                CloneInfo { id: 3, snaps: vec![3, 2], size_bytes: 4096 },
                CloneInfo { id: 9, snaps: vec![9], size_bytes: 0 },
            ],
        };
        let bytes = set.encode();
        assert_eq!(SnapSet::decode("o", &bytes).expect("decodes"), set);
        for cut in 0..bytes.len() {
            assert!(SnapSet::decode("o", &bytes[..cut]).is_err(), "a state cut at {cut} bytes is refused");
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(SnapSet::decode("o", &longer).is_err());
    }

    #[test]
    fn writes_clone_once_per_new_snapshot_and_reads_find_the_right_state() {
        // Written at no snapshot, snapshot 1 taken, written (clone 1), snapshots 2 and 3 taken,
        // written (clone 3 serves both), written again under the same context (no clone).
        let empty = SnapSet::default();
        let (c, s) = plan_clone(&empty, 0, &[], Some(10));
        assert_eq!((c, &s), (None, &empty));
        let (c, s) = plan_clone(&s, 1, &[1], Some(10));
        assert_eq!(c, Some(1));
        let (c, s) = plan_clone(&s, 3, &[3, 2, 1], Some(20));
        assert_eq!(c, Some(3));
        assert_eq!(s.clones[1].snaps, vec![3, 2]);
        let (c, s) = plan_clone(&s, 3, &[3, 2, 1], Some(30));
        assert_eq!(c, None);
        assert_eq!(resolve_read(&s, true, 1), SnapTarget::Clone(1));
        assert_eq!(resolve_read(&s, true, 2), SnapTarget::Clone(3));
        assert_eq!(resolve_read(&s, true, 3), SnapTarget::Clone(3));
        assert_eq!(resolve_read(&s, true, 4), SnapTarget::Head);
        assert_eq!(resolve_read(&s, false, 4), SnapTarget::Absent);
    }

    #[test]
    fn an_object_made_after_a_snapshot_did_not_exist_at_it() {
        let (c, s) = plan_clone(&SnapSet::default(), 5, &[5, 4], None);
        assert_eq!(c, None);
        assert_eq!(resolve_read(&s, true, 5), SnapTarget::Absent);
        assert_eq!(resolve_read(&s, true, 4), SnapTarget::Absent);
        assert_eq!(resolve_read(&s, true, 6), SnapTarget::Head);
        // A snapshot removed before the write serves nothing, so no clone is made for it.
        let (c, s) = plan_clone(&s, 7, &[5], Some(1));
        assert_eq!((c, s.seq), (None, 7));
    }

    #[test]
    fn trimming_keeps_live_and_unknown_snapshots_and_removes_empty_clones() {
        let set = SnapSet {
            seq: 9,
            clones: vec![
                CloneInfo { id: 3, snaps: vec![3, 2], size_bytes: 1 },
                CloneInfo { id: 9, snaps: vec![9, 8], size_bytes: 1 },
            ],
        };
        let (removed, next) = plan_trim(&set, 8, &[8, 2]);
        assert!(removed.is_empty());
        assert_eq!(next.clones[0].snaps, vec![2]);
        assert_eq!(next.clones[1].snaps, vec![9, 8], "9 is newer than the trimmer's context: kept");
        let (removed, next) = plan_trim(&next, 9, &[]);
        assert_eq!(removed, vec![3, 9]);
        assert!(next.is_empty());
    }

    #[test]
    fn contexts_are_checked() {
        assert!(check_context(5, &[5, 3, 1]).is_ok());
        assert!(check_context(5, &[6]).is_err());
        assert!(check_context(5, &[1, 3]).is_err());
        assert!(check_context(5, &[3, 3]).is_err());
        assert!(check_client_object("a\u{1}b").is_err());
        assert!(check_client_xattr("\u{1}snapset").is_err());
    }
}
