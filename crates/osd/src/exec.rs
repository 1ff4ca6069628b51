//! Executing object operations on the local store: resolving a request's writes into a
//! deterministic transaction (the same on the primary and every replica), and serving reads.

use shoal_map::PgId;
use shoal_proto::osd::{ObjOp, OpOutput, Precondition};
use shoal_proto::{ErrorCode, RemoteError};
use shoal_store::{ObjectStore, StoreError, Transaction};

use crate::snaps;

/// The store collection that holds PG `pg`.
pub fn pg_collection(pg: PgId) -> String {
    format!("pg.{pg}")
}

/// Maps a store error onto the wire's error codes, keeping its text (which names the object).
pub fn store_error(e: &StoreError) -> RemoteError {
    let code = match e {
        StoreError::NoSuchObject { .. } | StoreError::NoSuchCollection(_) => ErrorCode::NotFound,
        StoreError::InvalidName { .. } | StoreError::InvalidArgument(_) | StoreError::ReadPastEnd { .. } => {
            ErrorCode::Invalid
        }
        StoreError::ObjectTooLarge { .. } => ErrorCode::TooLarge,
        StoreError::NoSpace { .. } => ErrorCode::NoSpace,
        // A copy that cannot be read (a medium error) is as damaged as one that reads wrong: the
        // caller repairs it from another member instead of failing the reader.
        StoreError::Checksum { .. } | StoreError::Corrupt(_) | StoreError::Unreadable { .. } => ErrorCode::Corrupt,
        _ => ErrorCode::Io,
    };
    RemoteError::new(code, e.to_string())
}

fn invalid(msg: impl Into<String>) -> RemoteError {
    RemoteError::new(ErrorCode::Invalid, msg)
}

/// Whether a request only reads. A write request may also read the object's xattrs and omap
/// values ([`ObjOp::reads_beside_writes`]): those reads see the object just before the request's
/// writes, at the request's place in the object's order (see [`reads_before_writes`]). Any other
/// read in a write request makes it invalid.
pub fn is_read_only(ops: &[ObjOp]) -> Result<bool, RemoteError> {
    if ops.is_empty() {
        return Err(invalid("a request needs at least one operation"));
    }
    let writes = ops.iter().filter(|o| o.is_write()).count();
    if writes != 0
        && let Some(read) = ops.iter().find(|o| !o.is_write() && !o.reads_beside_writes())
    {
        return Err(invalid(format!("a write request may read only xattrs and omap values, not {read:?}")));
    }
    Ok(writes == 0)
}

/// Most bytes a request's outputs may take: they travel in the reply's header, which for a client
/// is bounded ([`shoal_proto::msg::CLIENT_HEADER_MAX_BYTES`]), less room for its other fields.
pub const ANSWER_MAX_BYTES: usize = shoal_proto::msg::CLIENT_HEADER_MAX_BYTES - 4096;

/// Refuses outputs that would not fit a reply (many large omap values or xattrs in one answer):
/// the caller asks for fewer per request. Checked before a write request's writes are resolved,
/// so a refused write changes nothing.
fn answer_fits(obj: &str, outputs: &[OpOutput]) -> Result<(), RemoteError> {
    let size_bytes = shoal_proto::encoded_len(&outputs);
    if size_bytes > ANSWER_MAX_BYTES {
        return Err(invalid(format!(
            "the answer for object {obj} would take {size_bytes} bytes, over the limit of {ANSWER_MAX_BYTES}: \
             ask for fewer keys, values or xattrs per request"
        )));
    }
    Ok(())
}

/// The outputs of a write request (one per operation, in order): for each read the request
/// carries, what it reads of the object just before the request's writes; `Done` for each write.
/// An object that does not exist yet has no xattrs and no omap values.
///
/// Sound without waiting for earlier writes of the object to replicate: the reply goes out only
/// once this request's writes are committed on every member, and they are ordered after those
/// earlier writes, so what the reads saw is committed by then too (or the request fails with them).
pub fn reads_before_writes(
    store: &dyn ObjectStore,
    coll: &str,
    obj: &str,
    ops: &[ObjOp],
) -> Result<Vec<OpOutput>, RemoteError> {
    let absent = |e: &StoreError| matches!(e, StoreError::NoSuchCollection(_) | StoreError::NoSuchObject { .. });
    let mut outputs = Vec::with_capacity(ops.len());
    for op in ops {
        outputs.push(match op {
            ObjOp::GetXattr { name } => OpOutput::Xattr(match store.get_xattr(coll, obj, name) {
                Ok(v) => v,
                Err(e) if absent(&e) => None,
                Err(e) => return Err(store_error(&e)),
            }),
            ObjOp::OmapGet { keys } => {
                let mut found = Vec::with_capacity(keys.len());
                for key in keys {
                    let value = match store.omap_get(coll, obj, key) {
                        Ok(v) => v,
                        Err(e) if absent(&e) => None,
                        Err(e) => return Err(store_error(&e)),
                    };
                    found.push((key.clone(), value));
                }
                OpOutput::Omap(found)
            }
            op if op.is_write() => OpOutput::Done,
            op => return Err(invalid(format!("a write request may read only xattrs and omap values, not {op:?}"))),
        });
    }
    answer_fits(obj, &outputs)?;
    Ok(outputs)
}

/// Resolves write operations against the object's current state on the primary: appends get
/// their offset, exclusive creates are checked, removes of missing objects fail. The result
/// applies identically on any replica holding the same state. Also checks that the data length
/// matches and that the object stays under `max_object_bytes`.
pub fn resolve_writes(
    store: &dyn ObjectStore,
    coll: &str,
    obj: &str,
    ops: &[ObjOp],
    data_len: usize,
    max_object_bytes: u64,
) -> Result<(Vec<ObjOp>, Precondition), RemoteError> {
    let want: u64 = ops.iter().map(ObjOp::data_len).sum();
    if want != data_len as u64 {
        return Err(invalid(format!("operations name {want} bytes of data but {data_len} were sent")));
    }
    check_client_ops(ops)?;
    let snapc = snap_context(ops)?;
    if snapc.is_none() && ops.iter().any(|o| matches!(o, ObjOp::SnapTrim)) {
        return Err(invalid("SnapTrim needs the request's snapshot context (the live snapshots)"));
    }
    // Requests that may clone, roll back, trim or remove the head work on its snapshot state.
    let snap_ops = snapc.is_some() || ops.iter().any(|o| matches!(o, ObjOp::SnapRollback { .. } | ObjOp::SnapTrim));
    if snap_ops && obj.len() > snaps::MAX_HEAD_NAME_BYTES {
        return Err(invalid(format!(
            "object {obj} is longer than {} bytes, the most an object with snapshots may have",
            snaps::MAX_HEAD_NAME_BYTES
        )));
    }
    // A removal keeps the head's clones (if it can have any: a longer name never has).
    let snap_work =
        snap_ops || (obj.len() <= snaps::MAX_HEAD_NAME_BYTES && ops.iter().any(|o| matches!(o, ObjOp::Remove)));
    // A request that starts by replacing the object whole does not depend on its current
    // state, and skips the metadata lookup (the common case: `write_full`). Any other write is
    // resolved against the current state, which replicas must also have (the precondition).
    // (A size limit check needs no current size: the stored object is already within the
    // limit, so a write's end is what can cross it.)
    check_guards(store, coll, obj, ops)?;
    let replaces = !snap_work && matches!(ops.iter().find(|o| !o.is_guard()), Some(ObjOp::WriteFull { .. }));
    let (mut exists, mut size, precondition) = if replaces {
        (true, 0, Precondition::Any)
    } else {
        match store.stat(coll, obj) {
            Ok(st) => (true, st.size_bytes, Precondition::Size(st.size_bytes)),
            Err(StoreError::NoSuchObject { .. } | StoreError::NoSuchCollection(_)) => (false, 0, Precondition::Absent),
            Err(e) => return Err(store_error(&e)),
        }
    };
    let too_large = |end: u64| {
        RemoteError::new(
            ErrorCode::TooLarge,
            format!("object {obj} would grow to {end} bytes, over the pool's limit of {max_object_bytes}"),
        )
    };
    let mut out = Vec::with_capacity(ops.len() + 2);
    let head_existed = exists;
    let mut snap = None;
    let mut before = snaps::SnapSet::default();
    if snap_work {
        let (mut set, snapdir_exists) = snaps::load(store, coll, obj, exists)?;
        // Rollbacks look at the stored state: a clone this request makes is the head as it is.
        before = set.clone();
        let mut dirty = false;
        let only_trims = ops.iter().all(|o| o.is_guard() || matches!(o, ObjOp::SnapContext { .. } | ObjOp::SnapTrim));
        if let Some((seq, live)) = &snapc
            && !only_trims
        {
            let (clone, next) = snaps::plan_clone(&set, *seq, live, exists.then_some(size));
            if let Some(id) = clone {
                out.push(ObjOp::SnapCloneHead { id });
            }
            dirty = next != set;
            set = next;
        }
        snap = Some((set, snapdir_exists, dirty));
    }
    for op in ops.iter().filter(|o| !o.is_guard()) {
        let resolved = match op {
            ObjOp::SnapContext { .. } => continue,
            ObjOp::SnapTrim => {
                let (Some((seq, live)), Some((set, _, dirty))) = (&snapc, &mut snap) else { continue };
                let (removed, next) = snaps::plan_trim(set, *seq, live);
                out.extend(removed.into_iter().map(|id| ObjOp::SnapRemoveClone { id }));
                *dirty |= next != *set;
                *set = next;
                continue;
            }
            ObjOp::SnapRollback { snap: at } => {
                let Some((set, _, dirty)) = &mut snap else { continue };
                match snaps::resolve_read(&before, exists, *at) {
                    snaps::SnapTarget::Head => {}
                    snaps::SnapTarget::Clone(id) => {
                        size = set.clones.iter().find(|c| c.id == id).map_or(0, |c| c.size_bytes);
                        exists = true;
                        // The restored head lost its state xattr: it is written again below.
                        *dirty = true;
                        out.push(ObjOp::SnapRestore { id });
                    }
                    snaps::SnapTarget::Absent if exists => {
                        exists = false;
                        size = 0;
                        out.push(ObjOp::Remove);
                    }
                    snaps::SnapTarget::Absent => {}
                }
                continue;
            }
            ObjOp::Create { exclusive } => {
                if *exclusive && exists {
                    return Err(RemoteError::new(ErrorCode::Exists, format!("object {obj} already exists")));
                }
                ObjOp::Create { exclusive: false }
            }
            ObjOp::WriteFull { len_bytes } => {
                size = *len_bytes;
                op.clone()
            }
            ObjOp::Write { offset, len_bytes } => {
                size = size.max(offset.checked_add(*len_bytes).ok_or_else(|| too_large(u64::MAX))?);
                op.clone()
            }
            ObjOp::Append { len_bytes } => {
                let offset = size;
                size += len_bytes;
                ObjOp::Write { offset, len_bytes: *len_bytes }
            }
            ObjOp::Truncate { size_bytes } => {
                size = *size_bytes;
                op.clone()
            }
            ObjOp::Zero { offset, len_bytes } => {
                // Resolved against the current size, so replicas apply exactly what the primary
                // did: nothing, a truncation, or zeros inside the object.
                let end = offset.saturating_add(*len_bytes);
                if !exists || *offset >= size || *len_bytes == 0 {
                    continue;
                }
                if end >= size {
                    size = *offset;
                    ObjOp::Truncate { size_bytes: *offset }
                } else {
                    op.clone()
                }
            }
            ObjOp::Remove => {
                if !exists {
                    return Err(RemoteError::new(ErrorCode::NotFound, format!("object {obj} does not exist")));
                }
                exists = false;
                size = 0;
                out.push(ObjOp::Remove);
                continue;
            }
            ObjOp::SetXattr { .. } | ObjOp::RemoveXattr { .. } | ObjOp::OmapSet { .. } | ObjOp::OmapRemove { .. } => {
                op.clone()
            }
            _ => return Err(invalid(format!("{op:?} is not a write"))),
        };
        if size > max_object_bytes {
            return Err(too_large(size));
        }
        exists = true;
        out.push(resolved);
    }
    // A request that writes an absent head and removes it again (an operator's decision
    // logged as a create and a removal) rewrites a directory that stays: while the head does
    // not exist, the directory carries the version of the head's last write (`objver::stamp`).
    let rewrites_dir = snap.as_ref().is_some_and(|(_, snapdir_exists, _)| *snapdir_exists) && !out.is_empty();
    if let Some((set, snapdir_exists, dirty)) = snap
        && (dirty || exists != head_existed || (exists && snapdir_exists) || rewrites_dir)
    {
        // The state goes where the next request looks for it: on the head if it exists, else on
        // the snap directory while clones need it, else nowhere.
        let keep = exists || !set.is_empty();
        if keep || snapdir_exists {
            let value = keep.then(|| set.encode());
            out.push(ObjOp::SnapsetWrite { value, on_head: exists, snapdir_exists });
        }
    }
    Ok((out, precondition))
}

/// Refuses what clients may not send: internal operations, reserved xattr names, and read or
/// write modifiers out of place.
fn check_client_ops(ops: &[ObjOp]) -> Result<(), RemoteError> {
    for op in ops {
        if op.is_internal() {
            return Err(invalid(format!("{op:?} is internal to OSDs")));
        }
        match op {
            ObjOp::SetXattr { name, .. }
            | ObjOp::RemoveXattr { name }
            | ObjOp::GetXattr { name }
            | ObjOp::AssertXattr { name, .. } => snaps::check_client_xattr(name)?,
            _ => {}
        }
    }
    Ok(())
}

/// The request's snapshot context, checked; at most one.
fn snap_context(ops: &[ObjOp]) -> Result<Option<(u64, Vec<u64>)>, RemoteError> {
    let mut found = None;
    for op in ops {
        if let ObjOp::SnapContext { seq, snaps: live } = op {
            if found.is_some() {
                return Err(invalid("a request carries at most one snapshot context"));
            }
            snaps::check_context(*seq, live)?;
            found = Some((*seq, live.clone()));
        }
    }
    Ok(found)
}

/// Checks a request's guards against the object's current state; the first that does not hold
/// fails the request with `Conflict`, naming what it expected and found. A missing object (or
/// collection) holds no xattr and no omap key.
fn check_guards(store: &dyn ObjectStore, coll: &str, obj: &str, ops: &[ObjOp]) -> Result<(), RemoteError> {
    let absent = |e: &StoreError| matches!(e, StoreError::NoSuchObject { .. } | StoreError::NoSuchCollection(_));
    for op in ops {
        let (what, want, have) = match op {
            ObjOp::AssertXattr { name, value } => {
                let have = match store.get_xattr(coll, obj, name) {
                    Ok(v) => v,
                    Err(e) if absent(&e) => None,
                    Err(e) => return Err(store_error(&e)),
                };
                (format!("xattr {name:?}"), value, have)
            }
            ObjOp::AssertOmap { key, value } => {
                let have = match store.omap_get(coll, obj, key) {
                    Ok(v) => v,
                    Err(e) if absent(&e) => None,
                    Err(e) => return Err(store_error(&e)),
                };
                (format!("omap key of {} bytes", key.len()), value, have)
            }
            _ => continue,
        };
        if *want != have {
            let state = |v: &Option<Vec<u8>>| match v {
                None => "absent".to_string(),
                Some(v) => format!("{} bytes", v.len()),
            };
            return Err(RemoteError::new(
                ErrorCode::Conflict,
                format!("object {obj}: {what} expected {}, found {}", state(want), state(&have)),
            ));
        }
    }
    Ok(())
}

/// Checks a replicated write's precondition against this replica's copy of the object.
pub fn check_precondition(
    store: &dyn ObjectStore,
    coll: &str,
    obj: &str,
    want: Precondition,
) -> Result<(), RemoteError> {
    if want == Precondition::Any {
        return Ok(());
    }
    let have = match store.stat(coll, obj) {
        Ok(st) => Precondition::Size(st.size_bytes),
        Err(StoreError::NoSuchObject { .. } | StoreError::NoSuchCollection(_)) => Precondition::Absent,
        Err(e) => return Err(store_error(&e)),
    };
    if have == want {
        return Ok(());
    }
    Err(RemoteError::new(
        ErrorCode::Corrupt,
        format!("replica of {obj} diverges from the primary (primary: {want:?}, replica: {have:?}); write refused"),
    ))
}

/// The store transaction for resolved writes (see [`resolve_writes`]), creating the PG's
/// collection first if `create_collection`. Snapshot operations read the objects they copy
/// from `store` (its state before the transaction, which the request's precondition pins).
/// Each write's data is its piece of `data`, with the block checksums that came with it (those
/// of a piece that starts on a block boundary), which the store keeps instead of computing.
pub fn build_transaction(
    store: &dyn ObjectStore,
    coll: &str,
    obj: &str,
    ops: &[ObjOp],
    mut data: shoal_util::SummedBytes,
    create_collection: bool,
) -> Result<Transaction, RemoteError> {
    let mut txn = Transaction::new();
    if create_collection {
        txn.create_collection(coll);
    }
    // Data of the operations in order: pieces of the shared buffer (never copied).
    let mut pieces: Vec<shoal_util::SummedBytes> = Vec::new();
    for op in ops.iter().rev() {
        let len = op.data_len() as usize;
        if len > 0 {
            let at = data.len() - len;
            pieces.push(if at == 0 { std::mem::take(&mut data) } else { data.split_off(at) });
        }
    }
    for op in ops {
        match op {
            ObjOp::Create { .. } => {
                txn.touch(coll, obj);
            }
            ObjOp::WriteFull { .. } => {
                txn.touch(coll, obj).truncate(coll, obj, 0);
                let piece = pieces.pop().unwrap_or_default();
                if !piece.is_empty() {
                    txn.write(coll, obj, 0, piece);
                }
            }
            ObjOp::Write { offset, .. } => {
                txn.touch(coll, obj);
                let piece = pieces.pop().unwrap_or_default();
                if !piece.is_empty() {
                    txn.write(coll, obj, *offset, piece);
                }
            }
            ObjOp::Truncate { size_bytes } => {
                txn.touch(coll, obj).truncate(coll, obj, *size_bytes);
            }
            ObjOp::Zero { offset, len_bytes } => {
                // Resolved to a range inside the object (bounded by the pool's object size).
                txn.touch(coll, obj).write(coll, obj, *offset, vec![0u8; *len_bytes as usize]);
            }
            ObjOp::Remove => {
                txn.remove(coll, obj);
            }
            ObjOp::SetXattr { name, value } => {
                txn.touch(coll, obj).set_xattr(coll, obj, name, value.clone());
            }
            ObjOp::RemoveXattr { name } => {
                txn.touch(coll, obj).remove_xattr(coll, obj, name);
            }
            ObjOp::OmapSet { entries } => {
                txn.touch(coll, obj).omap_set(coll, obj, entries.clone());
            }
            ObjOp::OmapRemove { keys } => {
                txn.touch(coll, obj).omap_remove(coll, obj, keys.clone());
            }
            ObjOp::SnapCloneHead { id } => {
                copy_object(store, &mut txn, coll, obj, &snaps::clone_name(obj, *id))?;
            }
            ObjOp::SnapRestore { id } => {
                // (Touched first so that the removal holds whether or not the head exists.)
                txn.touch(coll, obj).remove(coll, obj);
                copy_object(store, &mut txn, coll, &snaps::clone_name(obj, *id), obj)?;
            }
            ObjOp::SnapRemoveClone { id } => {
                txn.remove(coll, &snaps::clone_name(obj, *id));
            }
            ObjOp::SnapsetWrite { value, on_head, snapdir_exists } => {
                let dir = snaps::snapdir_name(obj);
                if *snapdir_exists {
                    txn.remove(coll, &dir);
                }
                match (value, on_head) {
                    (Some(v), true) => {
                        txn.set_xattr(coll, obj, snaps::SNAPSET_XATTR, v.clone());
                    }
                    (Some(v), false) => {
                        txn.touch(coll, &dir).set_xattr(coll, &dir, snaps::SNAPSET_XATTR, v.clone());
                    }
                    (None, _) => {}
                }
            }
            // Resolved writes contain nothing else (appends became writes, modifiers vanished).
            _ => {}
        }
    }
    Ok(txn)
}

/// Adds to `txn` a copy of object `from` (data, xattrs but the snapshot state, omap) as the new
/// object `to`, read from the store's current state.
fn copy_object(
    store: &dyn ObjectStore,
    txn: &mut Transaction,
    coll: &str,
    from: &str,
    to: &str,
) -> Result<(), RemoteError> {
    let mut data = Vec::new();
    let copy = crate::copy::read_copy(store, coll, from, &mut data)?;
    if !copy.exists {
        return Err(RemoteError::new(ErrorCode::Corrupt, format!("object {from} to copy to {to} is missing")));
    }
    txn.touch(coll, to);
    if !data.is_empty() {
        txn.write(coll, to, 0, data);
    }
    for (k, v) in copy.xattrs.into_iter().filter(|(k, _)| k != snaps::SNAPSET_XATTR) {
        txn.set_xattr(coll, to, &k, v);
    }
    if !copy.omap.is_empty() {
        txn.omap_set(coll, to, copy.omap);
    }
    Ok(())
}

/// The bytes a read request returns, as the store's pieces in order (sent as they are), with
/// their crc32c when the store knew it without reading them again (the reply frame's checksum
/// then starts from it).
#[derive(Debug, Default)]
pub struct ReadData {
    pub parts: Vec<bytes::Bytes>,
    pub crc: Option<u32>,
}

impl ReadData {
    /// Bytes in all the pieces.
    #[must_use]
    pub fn len_bytes(&self) -> usize {
        self.parts.iter().map(bytes::Bytes::len).sum()
    }
}

/// Runs read operations; returns one output per operation and the read bytes of all of them,
/// in order, as the store's own pieces (never copied here).
pub fn execute_reads(
    store: &dyn ObjectStore,
    coll: &str,
    obj: &str,
    ops: &[ObjOp],
) -> Result<(Vec<OpOutput>, ReadData), RemoteError> {
    let not_found = |e: StoreError| match e {
        StoreError::NoSuchCollection(_) => {
            RemoteError::new(ErrorCode::NotFound, format!("object {obj} does not exist"))
        }
        e => store_error(&e),
    };
    check_client_ops(ops)?;
    if ops.iter().skip(1).any(|o| matches!(o, ObjOp::ReadSnap { .. })) {
        return Err(invalid("ReadSnap must be a request's first operation"));
    }
    // A read at a snapshot reads the clone (or head) that holds the object's state then.
    let mut target = std::borrow::Cow::Borrowed(obj);
    let mut rest = ops;
    if let Some(ObjOp::ReadSnap { snap }) = ops.first() {
        let head_exists = store.exists(coll, obj).or_else(|e| match e {
            StoreError::NoSuchCollection(_) => Ok(false),
            e => Err(store_error(&e)),
        })?;
        let (set, _) = snaps::load(store, coll, obj, head_exists)?;
        match snaps::resolve_read(&set, head_exists, *snap) {
            snaps::SnapTarget::Head => {}
            snaps::SnapTarget::Clone(id) => target = std::borrow::Cow::Owned(snaps::clone_name(obj, id)),
            snaps::SnapTarget::Absent => {
                return Err(RemoteError::new(
                    ErrorCode::NotFound,
                    format!("object {obj} did not exist at snapshot {snap}"),
                ));
            }
        }
        rest = &ops[1..];
    }
    let obj: &str = &target;
    let stat = if rest.iter().all(|o| matches!(o, ObjOp::ListSnaps)) {
        None
    } else {
        Some(store.stat(coll, obj).map_err(not_found)?)
    };
    let mut outputs = Vec::with_capacity(rest.len());
    // Bytes of the reads so far; a request with several reads has no single known checksum.
    let mut data = ReadData::default();
    for op in rest {
        if let ObjOp::ListSnaps = op {
            outputs.push(list_snaps(store, coll, obj)?);
            continue;
        }
        let Some(stat) = &stat else { continue };
        outputs.push(match op {
            ObjOp::Read { offset, len_bytes } => {
                let start = (*offset).min(stat.size_bytes);
                let len = (*len_bytes).min(stat.size_bytes - start);
                if len > 0 {
                    let (parts, crc) = store.read_parts_crc(coll, obj, start, len).map_err(|e| store_error(&e))?;
                    if data.parts.is_empty() {
                        data = ReadData { parts, crc };
                    } else {
                        // Rare (several reads in one request): the frame checksums them all.
                        data.parts.extend(parts);
                        data.crc = None;
                    }
                }
                OpOutput::Read { len_bytes: len }
            }
            ObjOp::Stat => OpOutput::Stat { size_bytes: stat.size_bytes, mtime_ns: stat.mtime_ns },
            ObjOp::GetXattr { name } => OpOutput::Xattr(store.get_xattr(coll, obj, name).map_err(|e| store_error(&e))?),
            ObjOp::ListXattrs => {
                let mut all = store.list_xattrs(coll, obj).map_err(|e| store_error(&e))?;
                all.retain(|(k, _)| !k.starts_with(snaps::COMPANION_SEP));
                OpOutput::Xattrs(all)
            }
            ObjOp::OmapGet { keys } => {
                let mut found = Vec::with_capacity(keys.len());
                for key in keys {
                    found.push((key.clone(), store.omap_get(coll, obj, key).map_err(|e| store_error(&e))?));
                }
                OpOutput::Omap(found)
            }
            ObjOp::OmapList { after, max } => {
                let max = (*max).min(10_000) as usize;
                OpOutput::OmapList(store.omap_list(coll, obj, after.as_deref(), max).map_err(|e| store_error(&e))?)
            }
            _ => return Err(invalid(format!("{op:?} is not a read"))),
        });
    }
    answer_fits(obj, &outputs)?;
    Ok((outputs, data))
}

/// The object's snapshot state as [`OpOutput::Snaps`] (of the head; `obj` is never a clone here
/// since a request reading at a snapshot has no snapshot state of its own to list).
fn list_snaps(store: &dyn ObjectStore, coll: &str, obj: &str) -> Result<OpOutput, RemoteError> {
    let head = obj.split(snaps::COMPANION_SEP).next().unwrap_or(obj);
    let head_exists = store.exists(coll, head).or_else(|e| match e {
        StoreError::NoSuchCollection(_) => Ok(false),
        e => Err(store_error(&e)),
    })?;
    let (set, _) = snaps::load(store, coll, head, head_exists)?;
    Ok(OpOutput::Snaps { seq: set.seq, head_exists, clones: set.clones })
}
