//! Objects copied whole between members of a PG (recovery and backfill): reading an object's
//! data, xattrs and omap from the store, and turning received copies into store transactions.

use shoal_proto::osd::{Eversion, ObjectCopy, PartCursor, PushPart};
use shoal_proto::{ErrorCode, RemoteError};
use shoal_store::{ObjectStore, StoreError, Transaction};

use crate::exec::store_error;
use crate::snaps;

/// Omap entries read per store call while copying an object.
const OMAP_PAGE: usize = 4096;
/// Omap entries read per store call while reading a part: small, since a part stops at its
/// budget and values may be large (up to a client request's bound each), so that a page never
/// holds much more than the part takes.
const OMAP_PART_PAGE: usize = 64;

/// Reads object `name` of collection `coll` whole. A missing object (or collection) gives a copy
/// with `exists: false`, which removes the object where it is applied. The object's bytes are
/// appended to `data`.
pub fn read_copy(
    store: &dyn ObjectStore,
    coll: &str,
    name: &str,
    data: &mut Vec<u8>,
) -> Result<ObjectCopy, RemoteError> {
    read_sized(store, coll, name, COPY_METADATA_MAX_BYTES, data)
}

/// Adds to `txn` the removal of the local `objects` with their snapshot clones, exactly as
/// installing pulled copies of absent objects does (nothing for one that is not here).
pub fn remove_whole(
    txn: &mut Transaction,
    store: &dyn ObjectStore,
    coll: &str,
    objects: &[String],
) -> Result<(), RemoteError> {
    let absent: Vec<ObjectCopy> = objects.iter().map(|o| absent_copy(o)).collect();
    remove_stale_companions(txn, store, coll, &absent, &[])?;
    for copy in &absent {
        apply_copy(txn, store, coll, copy, bytes::Bytes::new())?;
    }
    Ok(())
}

/// The copy of an object that does not exist: installing it removes the local object.
#[must_use]
fn absent_copy(name: &str) -> ObjectCopy {
    ObjectCopy {
        name: name.to_string(),
        exists: false,
        size_bytes: 0,
        xattrs: Vec::new(),
        omap: Vec::new(),
        version: Default::default(),
    }
}

/// [`read_copy`] for a caller that has just looked up the object's size (`None`: it does not
/// exist), so that it is not looked up twice, and that copies whole only objects whose xattrs and
/// omap take at most `max_metadata_bytes` (capped at [`COPY_METADATA_MAX_BYTES`]; a larger one
/// is refused with `TooLarge`, to be sent in parts).
pub fn read_copy_sized(
    store: &dyn ObjectStore,
    coll: &str,
    name: &str,
    size_bytes: Option<u64>,
    max_metadata_bytes: usize,
    data: &mut Vec<u8>,
) -> Result<ObjectCopy, RemoteError> {
    let Some(size_bytes) = size_bytes else {
        return Ok(absent_copy(name));
    };
    if size_bytes > 0 {
        let bytes = store.read(coll, name, 0, size_bytes).map_err(|e| store_error(&e))?;
        if bytes.len() as u64 != size_bytes {
            return Err(RemoteError::new(ErrorCode::Io, format!("short read of {name} while copying it")));
        }
        data.extend_from_slice(&bytes);
    }
    let (xattrs, omap) = read_metadata(store, coll, name, max_metadata_bytes.min(COPY_METADATA_MAX_BYTES))?;
    let version = crate::objver::stored(store, coll, name).unwrap_or_default();
    Ok(ObjectCopy { name: name.to_string(), exists: true, size_bytes, xattrs, omap, version })
}

/// Most bytes of xattrs and omap one object's copy may carry: a copy travels in a message header
/// ([`shoal_proto::msg::MAX_HEADER_BYTES`]), with its snapshot companions' copies and, in a
/// backfill chunk, other objects' copies; half the header leaves them room.
pub const COPY_METADATA_MAX_BYTES: usize = shoal_proto::msg::MAX_HEADER_BYTES / 2;

/// Most bytes the copies of one message may take encoded: the header's bound less room for the
/// message's other fields.
pub const COPIES_MAX_BYTES: usize = shoal_proto::msg::MAX_HEADER_BYTES - (64 << 10);

/// Most bytes of object data one message of copies carries: what a frame holds beside the
/// largest header. A head whose copies (with its companions) hold more goes in parts, its
/// companions spread over them ([`read_part_copies`]).
pub const COPIES_DATA_MAX_BYTES: u64 =
    shoal_proto::MAX_PAYLOAD_BYTES as u64 - shoal_proto::msg::MAX_HEADER_BYTES as u64;

/// Refuses, before reading any of it, a copy of objects `names` holding `size_bytes` of data
/// together: more than one message carries, to be sent in parts.
fn check_data_fits(names: &[&str], size_bytes: u64) -> Result<(), RemoteError> {
    if size_bytes > COPIES_DATA_MAX_BYTES {
        return Err(RemoteError::new(
            ErrorCode::TooLarge,
            format!(
                "copies of {names:?} hold {size_bytes} bytes of data, over the {COPIES_DATA_MAX_BYTES} one message carries"
            ),
        ));
    }
    Ok(())
}

/// Refuses copies that would not fit one message: the object cannot be copied whole, which is
/// reported (and its recovery or backfill stalls, naming it) rather than failing the sender.
pub fn check_copies_fit(copies: &[ObjectCopy]) -> Result<usize, RemoteError> {
    let size_bytes = shoal_proto::encoded_len(&copies);
    if size_bytes > COPIES_MAX_BYTES {
        let names: Vec<&str> = copies.iter().map(|c| c.name.as_str()).collect();
        return Err(RemoteError::new(
            ErrorCode::TooLarge,
            format!(
                "copies of {names:?} take {size_bytes} bytes of xattrs and omap, over the {COPIES_MAX_BYTES} one message carries"
            ),
        ));
    }
    Ok(size_bytes)
}

/// Bytes an xattr or omap entry counts for in a copy: its key and value plus the most framing
/// an entry takes encoded.
fn entry_bytes(k: &[u8], v: &[u8]) -> usize {
    k.len() + v.len() + 10
}

/// Object `name`'s xattrs, refused past [`COPY_METADATA_MAX_BYTES`] (even an object sent in
/// parts carries all of them in its first part).
fn read_xattrs(store: &dyn ObjectStore, coll: &str, name: &str) -> Result<Vec<(String, Vec<u8>)>, RemoteError> {
    let xattrs = store.list_xattrs(coll, name).map_err(|e| store_error(&e))?;
    let size_bytes: usize = xattrs.iter().map(|(k, v)| entry_bytes(k.as_bytes(), v)).sum();
    if size_bytes > COPY_METADATA_MAX_BYTES {
        return Err(RemoteError::new(
            ErrorCode::TooLarge,
            format!("{name} holds {size_bytes} bytes of xattrs, over the {COPY_METADATA_MAX_BYTES} a copy carries"),
        ));
    }
    Ok(xattrs)
}

/// Object `name`'s xattrs and whole omap, refused with `TooLarge` past `max_bytes`.
#[allow(clippy::type_complexity)]
fn read_metadata(
    store: &dyn ObjectStore,
    coll: &str,
    name: &str,
    max_bytes: usize,
) -> Result<(Vec<(String, Vec<u8>)>, Vec<(Vec<u8>, Vec<u8>)>), RemoteError> {
    let xattrs = read_xattrs(store, coll, name)?;
    // Counted as read, so an object far over the bound is refused without being read whole
    // into memory.
    let over = |size_bytes: usize| {
        RemoteError::new(
            ErrorCode::TooLarge,
            format!(
                "{name} holds over {max_bytes} bytes of xattrs and omap ({size_bytes} read), more than one copy carries"
            ),
        )
    };
    let mut size_bytes: usize = xattrs.iter().map(|(k, v)| entry_bytes(k.as_bytes(), v)).sum();
    if size_bytes > max_bytes {
        return Err(over(size_bytes));
    }
    let mut omap = Vec::new();
    let mut after: Option<Vec<u8>> = None;
    loop {
        let page = store.omap_list(coll, name, after.as_deref(), OMAP_PAGE).map_err(|e| store_error(&e))?;
        let Some((last, _)) = page.last() else { break };
        after = Some(last.clone());
        let short = page.len() < OMAP_PAGE;
        size_bytes += page.iter().map(|(k, v)| entry_bytes(k, v)).sum::<usize>();
        if size_bytes > max_bytes {
            return Err(over(size_bytes));
        }
        omap.extend(page);
        if short {
            break;
        }
    }
    Ok((xattrs, omap))
}

/// One part of an object sent in parts (see [`PushPart`]), as read by [`read_part`].
#[derive(Debug, Clone)]
pub struct Part {
    /// The part's copy: the whole object's size, the part's omap entries, the object's xattrs
    /// on its first part, its version on its last (see `replace_object`).
    pub copy: ObjectCopy,
    pub part: PushPart,
    /// Where the next part starts (after the last part: its end).
    pub next: PartCursor,
}

/// Reads the part of object `name` that starts at `at`, of about `budget_bytes` (its data first,
/// then its omap entries, counted as [`entry_bytes`]; a part without data carries at least one
/// entry, so that parts always advance), appending its bytes to `data`. The first part carries
/// the object's xattrs too. `None`: the object does not exist (any more).
pub fn read_part(
    store: &dyn ObjectStore,
    coll: &str,
    name: &str,
    at: &PartCursor,
    budget_bytes: u64,
    data: &mut Vec<u8>,
) -> Result<Option<Part>, RemoteError> {
    let Some(size) = stored_size(store, coll, name)? else { return Ok(None) };
    if at.offset > size || (at.omap_after.is_some() && at.offset != size) {
        return Err(RemoteError::new(
            ErrorCode::Invalid,
            format!("a part of {name} at {} (omap after {:?}) does not fit its {size} bytes", at.offset, at.omap_after),
        ));
    }
    let budget = budget_bytes.max(1);
    let len = budget.min(size - at.offset);
    if len > 0 {
        let bytes = store.read(coll, name, at.offset, len).map_err(|e| store_error(&e))?;
        if bytes.len() as u64 != len {
            return Err(RemoteError::new(ErrorCode::Io, format!("short read of {name} while copying a part of it")));
        }
        data.extend_from_slice(&bytes);
    }
    let end = at.offset + len;
    let mut omap = Vec::new();
    let mut omap_after = at.omap_after.clone();
    // Whether entries may remain after this part's (unknown when the budget ran out at a page's
    // end: then the next part finds out, possibly empty and last).
    let mut more = true;
    if end == size {
        let mut left = usize::try_from(budget - len).unwrap_or(usize::MAX);
        'pages: loop {
            let page =
                store.omap_list(coll, name, omap_after.as_deref(), OMAP_PART_PAGE).map_err(|e| store_error(&e))?;
            let short = page.len() < OMAP_PART_PAGE;
            for (k, v) in page {
                let b = entry_bytes(&k, &v);
                if b > left && (len > 0 || !omap.is_empty()) {
                    break 'pages;
                }
                left = left.saturating_sub(b);
                omap_after = Some(k.clone());
                omap.push((k, v));
            }
            if short {
                more = false;
                break;
            }
            if left == 0 {
                break;
            }
        }
    }
    let xattrs = if at.is_start() { read_xattrs(store, coll, name)? } else { Vec::new() };
    let last = end == size && !more;
    // The version goes with the last part only: it vouches for the whole copy, which the
    // receiver holds once that part is in. No write changes the object between its parts (a
    // recovered object's writes wait; a write to an object being backfilled starts it over).
    let version = if last { crate::objver::stored(store, coll, name).unwrap_or_default() } else { Default::default() };
    let copy = ObjectCopy { name: name.to_string(), exists: true, size_bytes: size, xattrs, omap, version };
    let next = PartCursor { offset: end, omap_after, clones_after: at.clones_after.clone() };
    Ok(Some(Part { copy, part: PushPart { at: at.clone(), last }, next }))
}

/// Reads object `name` whole and, when it is a head, its companions (snapshot clones and snap
/// directory, which move with it): the head's copy first. All bytes are appended to `data`.
/// A head whose xattrs and omap take more than `max_metadata_bytes` is refused with `TooLarge`
/// (to be sent in parts: [`read_part_copies`]); companions are bounded by
/// [`COPY_METADATA_MAX_BYTES`] only, as in a first part.
pub fn read_copies(
    store: &dyn ObjectStore,
    coll: &str,
    name: &str,
    max_metadata_bytes: usize,
    data: &mut Vec<u8>,
) -> Result<Vec<ObjectCopy>, RemoteError> {
    read_copies_keeping(store, coll, name, max_metadata_bytes, &[], data).map(|(copies, _)| copies)
}

/// Clones a copy leaves out, by name, at the versions both sides hold them.
pub type KeptClones = Vec<(String, Eversion)>;

/// Checks that object `name` of `coll` reads back whole here (every checksum holds), a piece of
/// at most 4 MiB at a time so that nothing the size of the object is held in memory.
pub fn check_reads_whole(store: &dyn ObjectStore, coll: &str, name: &str) -> Result<(), StoreError> {
    const PIECE_BYTES: u64 = 4 << 20;
    let size = store.stat(coll, name)?.size_bytes;
    let mut at = 0;
    // Bounded by the object's size, a piece at a time.
    while at < size {
        let len = PIECE_BYTES.min(size - at);
        store.read(coll, name, at, len)?;
        at += len;
    }
    Ok(())
}

/// [`read_copies`] for a pull whose primary holds (or a recovery push whose
/// targets hold) clones `kept` at those versions: each
/// companion held here at the same version is left out (not even read: a copy here with a
/// damaged block does not stand in the way of one the primary holds whole) and returned in the
/// second list instead.
pub fn read_copies_keeping(
    store: &dyn ObjectStore,
    coll: &str,
    name: &str,
    max_metadata_bytes: usize,
    kept: &[(String, Eversion)],
    data: &mut Vec<u8>,
) -> Result<(Vec<ObjectCopy>, KeptClones), RemoteError> {
    let head_bytes = stored_size(store, coll, name)?;
    let companions = if snaps::is_companion(name) { Vec::new() } else { snaps::companions(store, coll, name)? };
    // Each companion held here at the version the other side holds is left out (not even read:
    // a copy here with a damaged block does not stand in the way of one held whole there).
    let mut left_out = KeptClones::new();
    let mut sent = Vec::new();
    for companion in companions {
        match kept.iter().find(|(k, v)| *k == companion && crate::objver::stored(store, coll, k) == Some(*v)) {
            Some(entry) => left_out.push(entry.clone()),
            None => sent.push(companion),
        }
    }
    // Sized before anything is read: a head and the clones it takes along may hold far more
    // than one message, and reading them whole first would hold it all in memory.
    let mut sizes = Vec::with_capacity(sent.len());
    for companion in &sent {
        sizes.push(stored_size(store, coll, companion)?);
    }
    let mut names = vec![name];
    names.extend(sent.iter().map(String::as_str));
    check_data_fits(&names, head_bytes.unwrap_or(0) + sizes.iter().flatten().sum::<u64>())?;
    let mut copies = vec![read_copy_sized(store, coll, name, head_bytes, max_metadata_bytes, data)?];
    // Companions travel whole, here as beside the parts of an object sent in parts: the metadata
    // bound is the head's. (A snapshot directory's state larger than a backfill chunk does not
    // turn its head's recovery into one in parts.)
    for (companion, size_bytes) in sent.iter().zip(sizes) {
        copies.push(read_copy_sized(store, coll, companion, size_bytes, COPY_METADATA_MAX_BYTES, data)?);
    }
    check_copies_fit(&copies)?;
    Ok((copies, left_out))
}

/// [`read_copy_sized`] after looking the size up.
fn read_sized(
    store: &dyn ObjectStore,
    coll: &str,
    name: &str,
    max_metadata_bytes: usize,
    data: &mut Vec<u8>,
) -> Result<ObjectCopy, RemoteError> {
    read_copy_sized(store, coll, name, stored_size(store, coll, name)?, max_metadata_bytes, data)
}

/// The size of object `name` of `coll` here; `None` if it (or its collection) does not exist.
fn stored_size(store: &dyn ObjectStore, coll: &str, name: &str) -> Result<Option<u64>, RemoteError> {
    match store.stat(coll, name) {
        Ok(s) => Ok(Some(s.size_bytes)),
        Err(StoreError::NoSuchObject { .. } | StoreError::NoSuchCollection(_)) => Ok(None),
        Err(e) => Err(store_error(&e)),
    }
}

/// The part of object `name` at `at` ([`read_part`]) for a recovery push or pull, with the
/// copies of the head's companions (snapshot clones move with their head) not sent yet that fit
/// beside it within `budget_bytes`, each whole, after it (their bytes after the part's in
/// `data`). The head's last part comes only after its last companion. `None`: the object does
/// not exist, and neither do companions of it.
pub fn read_part_copies(
    store: &dyn ObjectStore,
    coll: &str,
    name: &str,
    at: &PartCursor,
    budget_bytes: u64,
    data: &mut Vec<u8>,
) -> Result<Option<(Vec<ObjectCopy>, PushPart, PartCursor)>, RemoteError> {
    let base = data.len();
    let companions = if snaps::is_companion(name) { Vec::new() } else { snaps::companions(store, coll, name)? };
    let (mut copy, mut part, mut next) = match read_part(store, coll, name, at, budget_bytes, data)? {
        Some(Part { copy, part, next }) => (copy, part, next),
        // A head that no longer exists, with clones kept for snapshots: its parts carry only
        // them (the first also removes the receiver's head).
        None if !companions.is_empty() && at.offset == 0 && at.omap_after.is_none() => {
            (absent_copy(name), PushPart { at: at.clone(), last: true }, at.clone())
        }
        None => return Ok(None),
    };
    let mut copies = Vec::new();
    {
        // The companions not sent yet, in name order, each whole, as many as fit beside this
        // part's bytes within its budget; a part with no data of its own takes at least one,
        // up to what one message carries, so that parts advance. Those left go with later parts.
        let left: Vec<String> =
            companions.into_iter().filter(|c| at.clones_after.as_ref().is_none_or(|after| c > after)).collect();
        let mut sent = 0;
        for companion in &left {
            let size_bytes = stored_size(store, coll, companion)?.unwrap_or(0);
            let part_bytes = (data.len() - base) as u64;
            if part_bytes == 0 && size_bytes > COPIES_DATA_MAX_BYTES {
                // A clone of an object over half a message (a pool's objects may hold up to 64
                // MiB) goes alone, beside a header that is small in fact, not at its bound. A part
                // carrying omap entries of the head leaves it to a later one, which carries fewer
                // and in the end none.
                if !copy.omap.is_empty() {
                    break;
                }
                copies.push(read_alone(store, coll, companion, size_bytes, (&copy, &part), (base, data))?);
                next.clones_after = Some(companion.clone());
                sent += 1;
                break;
            }
            if part_bytes == 0 {
                check_data_fits(&[companion.as_str()], size_bytes)?;
            } else if part_bytes + size_bytes > budget_bytes.min(COPIES_DATA_MAX_BYTES) {
                break;
            }
            copies.push(read_copy_sized(store, coll, companion, Some(size_bytes), COPY_METADATA_MAX_BYTES, data)?);
            next.clones_after = Some(companion.clone());
            sent += 1;
        }
        if sent < left.len() && part.last {
            // The head's bytes are all sent but some companions are not: the part that ends the
            // copy (and vouches for it with the head's version) is a later one.
            part.last = false;
            copy.version = Eversion::default();
        }
    }
    copies.insert(0, copy);
    check_copies_fit(&copies)?;
    Ok(Some((copies, part, next)))
}

/// Room in a frame for the fields of a push or pull answer other than its copies and part
/// cursor (epoch, PG, flags, an empty list of kept clones) and the message's own framing.
const FRAME_FIELDS_BYTES: usize = 4 << 10;

/// Most bytes of xattrs and omap a copy of an object holding `size_bytes` of data may take to
/// go alone in one message (no other copy beside it): what a frame holds past its data and the
/// message's other fields, and never more than [`COPY_METADATA_MAX_BYTES`].
#[must_use]
pub fn metadata_room_alone(size_bytes: u64) -> usize {
    let data_bytes = usize::try_from(size_bytes).unwrap_or(usize::MAX);
    (shoal_proto::MAX_PAYLOAD_BYTES as usize)
        .saturating_sub(data_bytes.saturating_add(FRAME_FIELDS_BYTES))
        .min(COPY_METADATA_MAX_BYTES)
}

/// Reads companion `name` (`size_bytes` of data, more than [`COPIES_DATA_MAX_BYTES`]) whole to
/// go alone beside the part `head` of its head at `part` (the message's data starts at `base` in
/// `data`, and the companion's bytes are appended), and checks that they fit one frame
/// together with their actual header; refused with `TooLarge` by name otherwise (its metadata is
/// too large to go beside that much data), before its data is read when its metadata alone says
/// so.
fn read_alone(
    store: &dyn ObjectStore,
    coll: &str,
    name: &str,
    size_bytes: u64,
    (head, part): (&ObjectCopy, &PushPart),
    (base, data): (usize, &mut Vec<u8>),
) -> Result<ObjectCopy, RemoteError> {
    let frame_bytes = shoal_proto::MAX_PAYLOAD_BYTES as usize;
    let around = shoal_proto::encoded_len(head) + shoal_proto::encoded_len(part) + FRAME_FIELDS_BYTES;
    let data_bytes = (data.len() - base).saturating_add(usize::try_from(size_bytes).unwrap_or(usize::MAX));
    let too_large = |header_bytes: usize| {
        RemoteError::new(
            ErrorCode::TooLarge,
            format!(
                "{name} holds {size_bytes} bytes of data and {header_bytes} of header, over the {frame_bytes} one \
                 message carries"
            ),
        )
    };
    let room = frame_bytes.checked_sub(data_bytes.saturating_add(around)).ok_or_else(|| too_large(around))?;
    let copy = read_copy_sized(store, coll, name, Some(size_bytes), room, data)?;
    let header_bytes = around + shoal_proto::encoded_len(&copy);
    if data.len() - base + header_bytes > frame_bytes {
        return Err(too_large(header_bytes));
    }
    Ok(copy)
}

/// Where the part after the received part `part` starts: past its data (`data_bytes`, the
/// companions' included) and omap entries, and past the companions it carried (`copies` after
/// the first). The receiver of a pull in parts asks for the next part from here.
#[must_use]
pub fn cursor_after(part: &PushPart, copies: &[ObjectCopy], data_bytes: usize) -> PartCursor {
    let companion_bytes: u64 = copies.iter().skip(1).map(|c| c.size_bytes).sum();
    PartCursor {
        offset: part.at.offset + (data_bytes as u64).saturating_sub(companion_bytes),
        omap_after: copies
            .first()
            .and_then(|c| c.omap.last())
            .map(|(k, _)| k.clone())
            .or_else(|| part.at.omap_after.clone()),
        clones_after: copies
            .last()
            .filter(|_| copies.len() > 1)
            .map(|c| c.name.clone())
            .or_else(|| part.at.clones_after.clone()),
    }
}

/// Adds to `txn` the removal of the local companions of each head among `copies` that the
/// copies do not carry (clones trimmed where the copies come from), so that a head recovered
/// whole arrives with exactly its source's companions.
pub fn remove_stale_companions(
    txn: &mut Transaction,
    store: &dyn ObjectStore,
    coll: &str,
    copies: &[ObjectCopy],
    kept: &[(String, Eversion)],
) -> Result<(), RemoteError> {
    let names: std::collections::BTreeSet<&str> =
        copies.iter().map(|c| c.name.as_str()).chain(kept.iter().map(|(k, _)| k.as_str())).collect();
    for head in copies.iter().map(|c| c.name.as_str()).filter(|n| !snaps::is_companion(n)) {
        for local in snaps::companions(store, coll, head)? {
            if !names.contains(local.as_str()) {
                txn.remove(coll, &local);
            }
        }
    }
    Ok(())
}

/// Adds to `txn` the replacement of the local object by `copy` (its bytes are `data`): removed,
/// then recreated with exactly the copy's data, xattrs and omap.
pub fn apply_copy(
    txn: &mut Transaction,
    store: &dyn ObjectStore,
    coll: &str,
    copy: &ObjectCopy,
    data: bytes::Bytes,
) -> Result<(), RemoteError> {
    if data.len() as u64 != copy.size_bytes {
        return Err(RemoteError::new(
            ErrorCode::Invalid,
            format!("copy of {} names {} bytes but carries {}", copy.name, copy.size_bytes, data.len()),
        ));
    }
    replace_object(txn, store, coll, copy, data, true)
}

/// Adds to `txn` the replacement of the local object by `copy` with `data` (its bytes, or the
/// first part of them): removed, then recreated with that data and the copy's xattrs and omap;
/// `whole`: the copy is the whole object (not a first part).
fn replace_object(
    txn: &mut Transaction,
    store: &dyn ObjectStore,
    coll: &str,
    copy: &ObjectCopy,
    data: bytes::Bytes,
    whole: bool,
) -> Result<(), RemoteError> {
    // The collection may be created by this same transaction (the PG is new here).
    let present = match store.exists(coll, &copy.name) {
        Ok(p) => p,
        Err(shoal_store::StoreError::NoSuchCollection(_)) => false,
        Err(e) => return Err(store_error(&e)),
    };
    if present {
        txn.remove(coll, &copy.name);
    }
    if !copy.exists {
        return Ok(());
    }
    txn.touch(coll, &copy.name);
    if !data.is_empty() {
        txn.write(coll, &copy.name, 0, data);
    }
    for (k, v) in &copy.xattrs {
        txn.set_xattr(coll, &copy.name, k, v.clone());
    }
    if !copy.omap.is_empty() {
        txn.omap_set(coll, &copy.name, copy.omap.clone());
    }
    // The version says which write the copy's data is: kept only for a copy installed whole.
    // The first part of a copy in parts leaves the object partial until its last part, and a
    // version on it would vouch for data it does not hold yet (`merge::held_at_needed_version`
    // trusts stored versions even on members being backfilled); such a copy gets its version
    // with its last part.
    if whole {
        crate::objver::install(txn, coll, &copy.name, copy.version);
    }
    Ok(())
}

/// Adds to `txn` one part of an object sent in parts (see [`PushPart`]): the first replaces the
/// local object (data and xattrs); a later one must continue exactly where the local copy
/// stands — its data where the local data ends, its omap entries (only once the data is all
/// there) in key order after every key the local copy holds — since parts arrive in order on one
/// link (anything else is refused, and the primary then peers again and starts the object over);
/// the last must end at the copy's size.
pub fn apply_part(
    txn: &mut Transaction,
    store: &dyn ObjectStore,
    coll: &str,
    copy: &ObjectCopy,
    part: &PushPart,
    data: bytes::Bytes,
    with_companions: bool,
) -> Result<(), RemoteError> {
    let invalid = |why: String| Err(RemoteError::new(ErrorCode::Invalid, format!("part of {}: {why}", copy.name)));
    let at = &part.at;
    if !copy.exists {
        // A head that no longer exists, sent in parts for its companions: the first part
        // removes the local head, and no part carries anything of it.
        if !data.is_empty()
            || !copy.omap.is_empty()
            || !copy.xattrs.is_empty()
            || at.offset != 0
            || at.omap_after.is_some()
        {
            return invalid("a part of an absent object carries data, xattrs or omap".to_string());
        }
        if !with_companions && !part.last {
            return invalid("a part of an absent object carries nothing".to_string());
        }
        return if at.is_start() { replace_object(txn, store, coll, copy, data, part.last) } else { Ok(()) };
    }
    let end = at.offset + data.len() as u64;
    if !copy.exists || end > copy.size_bytes || (part.last && end != copy.size_bytes) {
        return invalid(format!(
            "at {} with {} bytes does not fit its size of {} (last: {})",
            at.offset,
            data.len(),
            copy.size_bytes,
            part.last
        ));
    }
    if (!copy.omap.is_empty() || at.omap_after.is_some()) && end != copy.size_bytes {
        return invalid(format!("omap entries before the end of its data (at {}, ending at {end})", at.offset));
    }
    // A later part advances the object, or ends it, or brings companions of a head.
    let empty = data.is_empty() && copy.omap.is_empty() && !part.last && !with_companions;
    if !at.is_start() && (!copy.xattrs.is_empty() || empty) {
        return invalid(format!("a later part at {} carries xattrs or nothing", at.offset));
    }
    if !part.last && copy.version != Default::default() {
        return invalid(format!("a part at {} that is not the last carries a version", at.offset));
    }
    let mut after = at.omap_after.as_deref();
    for (k, _) in &copy.omap {
        if after.is_some_and(|a| k.as_slice() <= a) {
            return invalid("omap entries out of key order".to_string());
        }
        after = Some(k);
    }
    if at.is_start() {
        return replace_object(txn, store, coll, copy, data, part.last);
    }
    let Some(held) = stored_size(store, coll, &copy.name)? else {
        return invalid("a later part, but this copy holds none of it".to_string());
    };
    if held != at.offset {
        return invalid(format!("at {} but this copy holds {held} bytes", at.offset));
    }
    if !copy.omap.is_empty() {
        let past = store.omap_list(coll, &copy.name, at.omap_after.as_deref(), 1).map_err(|e| store_error(&e))?;
        if !past.is_empty() {
            return invalid(format!(
                "omap entries after {:?}, but this copy already holds some past it",
                at.omap_after
            ));
        }
        txn.omap_set(coll, &copy.name, copy.omap.clone());
    }
    if !data.is_empty() {
        txn.write(coll, &copy.name, at.offset, data);
    }
    if part.last {
        crate::objver::install(txn, coll, &copy.name, copy.version);
    }
    Ok(())
}

/// Splits a message's bulk data into the data of each copy, in order (slices of it, no copies).
pub fn split_data(copies: &[ObjectCopy], data: bytes::Bytes) -> Result<Vec<bytes::Bytes>, RemoteError> {
    let want: u64 = copies.iter().map(|c| c.size_bytes).sum();
    if want != data.len() as u64 {
        return Err(RemoteError::new(
            ErrorCode::Invalid,
            format!("copies name {want} bytes of data but {} were sent", data.len()),
        ));
    }
    let mut at = 0;
    let out = copies
        .iter()
        .map(|c| {
            let piece = data.slice(at..at + c.size_bytes as usize);
            at += c.size_bytes as usize;
            piece
        })
        .collect();
    Ok(out)
}

/// Names of the local objects of `coll` in `(after, upto]` (all of them to the end when `upto` is
/// `None`), a page at a time; more than `max` of them is an error.
pub fn list_range(
    store: &dyn ObjectStore,
    coll: &str,
    after: Option<&str>,
    upto: Option<&str>,
    max: usize,
) -> Result<Vec<String>, RemoteError> {
    let mut out = Vec::new();
    let mut cursor = after.map(str::to_string);
    loop {
        let page = match store.list_objects(coll, "", cursor.as_deref(), 1024) {
            Ok(p) => p,
            Err(StoreError::NoSuchCollection(_)) => return Ok(out),
            Err(e) => return Err(store_error(&e)),
        };
        for name in page.objects {
            if upto.is_some_and(|u| name.as_str() > u) {
                return Ok(out);
            }
            if out.len() >= max {
                return Err(RemoteError::new(
                    ErrorCode::Invalid,
                    format!("more than {max} objects of {coll} in the range after {after:?} up to {upto:?}"),
                ));
            }
            out.push(name);
        }
        match page.next {
            Some(n) => cursor = Some(n),
            None => return Ok(out),
        }
    }
}

/// Objects in `coll` (0 if it does not exist) named after `after` (all of them for ""), counted a
/// page at a time up to `COUNT_LIMIT`: an estimate for progress reports, bounded so that a huge
/// PG cannot stall its OSD.
pub fn count_objects_after(store: &dyn ObjectStore, coll: &str, after: &str) -> u64 {
    const PAGE: usize = 4096;
    const COUNT_LIMIT: u64 = 4_000_000;
    let mut count = 0u64;
    let mut after: Option<String> = (!after.is_empty()).then(|| after.to_string());
    while count < COUNT_LIMIT {
        let Ok(page) = store.list_objects(coll, "", after.as_deref(), PAGE) else { break };
        count += page.objects.len() as u64;
        match page.next {
            Some(next) => after = Some(next),
            None => break,
        }
    }
    count
}

#[cfg(test)]
mod tests {
    use super::*;
    use shoal_store::Durability;

    /// Builds object `name` in `coll` of `store`: `size` bytes of data, two xattrs, `entries` omap
    /// entries with values of varied length.
    fn build(store: &dyn ObjectStore, coll: &str, name: &str, size: usize, entries: u32) {
        let mut txn = Transaction::new();
        if !store.collection_exists(coll).unwrap() {
            txn.create_collection(coll);
        }
        txn.touch(coll, name);
        if size > 0 {
            txn.write(coll, name, 0, bytes::Bytes::from((0..size).map(|i| (i % 251) as u8).collect::<Vec<_>>()));
        }
        txn.set_xattr(coll, name, "a", b"1".to_vec());
        txn.set_version(coll, name, (7, u64::from(entries) + size as u64 + 1));
        txn.set_xattr(coll, name, "b", vec![2; 300]);
        let omap = (0..entries).map(|i| (i.to_be_bytes().to_vec(), vec![i as u8; (i % 97) as usize + 1])).collect();
        txn.omap_set(coll, name, omap);
        store.commit(txn, Durability::Batch).expect("commit");
    }

    #[allow(clippy::type_complexity)]
    fn state(
        store: &dyn ObjectStore,
        name: &str,
    ) -> (Vec<u8>, Vec<(String, Vec<u8>)>, Vec<(Vec<u8>, Vec<u8>)>, (u64, u64)) {
        let data = store.read_all("c", name).expect("data");
        let xattrs = store.list_xattrs("c", name).expect("xattrs");
        (
            data,
            xattrs,
            store.omap_list("c", name, None, 1 << 20).expect("omap"),
            store.version("c", name).expect("version"),
        )
    }

    /// Reads `name` from `from` part by part and applies each part to `to`, as a sender and a
    /// receiver do; returns the number of parts.
    fn send_in_parts(from: &dyn ObjectStore, to: &dyn ObjectStore, name: &str, budget: u64) -> usize {
        let mut at = PartCursor::default();
        for n in 1..100_000 {
            let mut data = Vec::new();
            let Part { copy, part, next } =
                read_part(from, "c", name, &at, budget, &mut data).expect("read").expect("there");
            assert_eq!(copy.version != Default::default(), part.last, "the version goes with the last part only");
            let mut txn = Transaction::new();
            apply_part(&mut txn, to, "c", &copy, &part, bytes::Bytes::from(data), false).expect("apply");
            to.commit(txn, Durability::Batch).expect("commit");
            if part.last {
                return n;
            }
            assert_eq!(to.version("c", name).expect("version"), (0, 0), "no version before the last part");
            assert!(next != at, "parts advance");
            at = next;
        }
        panic!("never a last part");
    }

    /// Objects sent in parts of any size arrive exactly as they are, data, xattrs and omap,
    /// replacing whatever the receiver held.
    #[test]
    fn objects_sent_in_parts_arrive_whole() {
        let from = shoal_store::engine::MemEngine::new_mem(64 << 20).expect("store");
        let to = shoal_store::engine::MemEngine::new_mem(64 << 20).expect("store");
        let cases: [(usize, u32); 5] = [(0, 0), (0, 300), (10_000, 0), (10_000, 300), (100, 1500)];
        for (i, (size, entries)) in cases.into_iter().enumerate() {
            let name = format!("o{i}");
            build(&from, "c", &name, size, entries);
            // The receiver holds something else under that name, replaced by the first part.
            build(&to, "c", &name, 77, 3);
            for budget in [7, 100, 4096, 1 << 20] {
                let parts = send_in_parts(&from, &to, &name, budget);
                assert!(
                    state(&to, &name) == state(&from, &name),
                    "{name} ({size} B, {entries} entries) in parts of {budget}"
                );
                if budget == 100 && size + entries as usize > 100 {
                    assert!(parts > 1, "{name} in parts of 100 took {parts}");
                }
            }
        }
    }

    /// A part that does not continue the receiver's copy exactly is refused by name.
    #[test]
    fn parts_out_of_place_are_refused() {
        let from = shoal_store::engine::MemEngine::new_mem(64 << 20).expect("store");
        let to = shoal_store::engine::MemEngine::new_mem(64 << 20).expect("store");
        build(&from, "c", "o", 1000, 50);
        build(&to, "c", "o", 10, 1);
        let read = |at: &PartCursor, data: &mut Vec<u8>| read_part(&from, "c", "o", at, 400, data).unwrap().unwrap();
        let try_apply = |p: &Part, data: Vec<u8>| {
            let mut txn = Transaction::new();
            apply_part(&mut txn, &to, "c", &p.copy, &p.part, bytes::Bytes::from(data), false).map(|()| txn)
        };
        let (mut d0, mut d1, mut d2) = (Vec::new(), Vec::new(), Vec::new());
        let first = read(&PartCursor::default(), &mut d0);
        let second = read(&first.next, &mut d1);
        // The second before the first: the receiver's copy does not end where it starts.
        let e = try_apply(&second, d1.clone()).unwrap_err();
        assert!(e.message.contains("holds 10 bytes"), "{e}");
        to.commit(try_apply(&first, d0).unwrap(), Durability::Batch).unwrap();
        // Omap entries in a part whose data does not reach the end.
        let early =
            Part { copy: ObjectCopy { omap: vec![(vec![9], vec![9])], ..second.copy.clone() }, ..second.clone() };
        assert!(try_apply(&early, d1.clone()).unwrap_err().message.contains("before the end of its data"));
        to.commit(try_apply(&second, d1).unwrap(), Durability::Batch).unwrap();
        let mut at = second.next.clone();
        let third = read(&at, &mut d2);
        // A part that is not the last with a version.
        let vouching = Part {
            copy: ObjectCopy { version: shoal_proto::osd::Eversion { epoch: 1, seq: 1 }, ..third.copy.clone() },
            ..third.clone()
        };
        assert!(try_apply(&vouching, d2.clone()).unwrap_err().message.contains("carries a version"));
        // A later part with xattrs, or out of key order.
        let xattrs =
            Part { copy: ObjectCopy { xattrs: vec![("x".into(), vec![1])], ..third.copy.clone() }, ..third.clone() };
        assert!(try_apply(&xattrs, d2.clone()).unwrap_err().message.contains("xattrs"));
        to.commit(try_apply(&third, d2).unwrap(), Durability::Batch).unwrap();
        // Now into the omap: once entries arrived, an entry at or before them is refused.
        let mut parts_left = Vec::new();
        loop {
            at = parts_left.last().map_or(third.next.clone(), |p: &Part| p.next.clone());
            let mut d = Vec::new();
            let p = read(&at, &mut d);
            let last = p.part.last;
            parts_left.push(p);
            if last {
                break;
            }
        }
        let omap_part = parts_left.iter().position(|p| !p.copy.omap.is_empty()).expect("an omap part");
        for p in &parts_left[..omap_part] {
            to.commit(try_apply(p, Vec::new()).unwrap(), Durability::Batch).unwrap();
        }
        let p = &parts_left[omap_part];
        to.commit(try_apply(p, Vec::new()).unwrap(), Durability::Batch).unwrap();
        let again = try_apply(p, Vec::new()).unwrap_err();
        assert!(again.message.contains("already holds some past it"), "{again}");
        let mut reversed = p.copy.clone();
        reversed.omap.reverse();
        let backwards = Part { copy: reversed, ..parts_left[omap_part + 1].clone() };
        if backwards.copy.omap.len() > 1 {
            assert!(try_apply(&backwards, Vec::new()).unwrap_err().message.contains("key order"));
        }
    }

    /// A head whose clones hold more data together than one message carries is refused whole
    /// (before anything is read) and goes in parts instead: each part within one message, its
    /// clones spread over them whole, the head's version only on the last, which comes after
    /// every clone. Applied in order, as a recovery target does, they rebuild the head and every
    /// clone, and remove the receiver's stale ones. A head that no longer exists goes the same
    /// way, its parts carrying only its clones.
    #[test]
    fn a_head_with_clones_over_one_message_goes_in_parts_that_carry_them() {
        const CLONE_BYTES: usize = 14 << 20;
        let from = shoal_store::engine::MemEngine::new_mem(512 << 20).expect("store");
        let to = shoal_store::engine::MemEngine::new_mem(512 << 20).expect("store");
        let fill = |store: &dyn ObjectStore, name: &str, tag: u8, size: usize| {
            let mut txn = Transaction::new();
            if !store.collection_exists("c").unwrap() {
                txn.create_collection("c");
            }
            txn.touch("c", name);
            txn.write("c", name, 0, bytes::Bytes::from(vec![tag; size]));
            txn.set_version("c", name, (3, u64::from(tag)));
            store.commit(txn, Durability::Batch).expect("commit");
        };
        for (head, exists) in [("big", true), ("gone", false)] {
            let clones: Vec<String> = (1..=3).map(|id| snaps::clone_name(head, id)).collect();
            if exists {
                fill(&from, head, 9, 5 << 20);
            }
            for (i, clone) in clones.iter().enumerate() {
                fill(&from, clone, i as u8 + 1, CLONE_BYTES);
            }
            // The receiver holds an older head and a clone the sender no longer has.
            fill(&to, head, 1, 1000);
            let stale = snaps::clone_name(head, 7);
            fill(&to, &stale, 7, 1000);

            let mut data = Vec::new();
            let e = read_copies(&from, "c", head, COPY_METADATA_MAX_BYTES, &mut data).expect_err("over one message");
            assert_eq!(e.code, ErrorCode::TooLarge, "{e}");
            assert!(data.is_empty(), "refused before reading");
            // Leaving out two clones the other side holds, the rest goes whole.
            let kept: KeptClones = clones[..2]
                .iter()
                .map(|c| (c.clone(), crate::objver::stored(&from, "c", c).expect("a version")))
                .collect();
            let (copies, left_out) =
                read_copies_keeping(&from, "c", head, COPY_METADATA_MAX_BYTES, &kept, &mut data).expect("fits");
            assert_eq!((copies.len(), left_out), (2, kept));

            let parts = send_head_in_parts(&from, &to, head, 4 << 20, exists);
            assert!(parts >= 2, "{head}: {parts} parts");
            assert_eq!(to.exists("c", head).unwrap(), exists, "{head}");
            if exists {
                assert!(state(&to, head) == state(&from, head), "{head}");
            }
            for clone in &clones {
                assert!(state(&to, clone) == state(&from, clone), "{clone}");
            }
            assert!(!to.exists("c", &stale).unwrap(), "{stale} removed");
        }
    }

    /// [`send_in_parts`] for a head with its companions: sends `head` from `from` to `to` in parts of `budget_bytes` as a
    /// recovery does, the receiver applying each as `OsdCore::install_part` does, and checks
    /// that each part's message fits one frame; returns the number of parts.
    fn send_head_in_parts(
        from: &dyn ObjectStore,
        to: &dyn ObjectStore,
        head: &str,
        budget_bytes: u64,
        exists: bool,
    ) -> usize {
        let mut at = PartCursor::default();
        let mut parts = 0;
        loop {
            parts += 1;
            assert!(parts < 1000, "parts advance");
            let mut data = Vec::new();
            let (copies, part, next) =
                read_part_copies(from, "c", head, &at, budget_bytes, &mut data).expect("read").expect("there");
            let push = shoal_proto::osd::PgPush {
                epoch: u64::MAX,
                pool: u32::MAX,
                pg: u32::MAX,
                objects: copies.clone(),
                backfill: None,
                part: Some(part.clone()),
                kept: Vec::new(),
                decided: false,
            };
            let frame_bytes = shoal_proto::encode(&push, data.clone()).len();
            assert!(frame_bytes <= shoal_proto::MAX_PAYLOAD_BYTES as usize, "part {parts}: a {frame_bytes}-byte frame");
            assert_eq!(copies[0].version != Default::default(), part.last && exists, "the head's version last");
            // As `OsdCore::install_part` splits them: the head's part, then the clones.
            let data = bytes::Bytes::from(data);
            let part_bytes = data.len() - copies[1..].iter().map(|c| c.size_bytes as usize).sum::<usize>();
            let datas = split_data(&copies[1..], data.slice(part_bytes..)).expect("split");
            let mut txn = Transaction::new();
            if part.at.is_start() {
                remove_stale_companions(&mut txn, to, "c", &copies, &[]).expect("stale");
            }
            let head_data = data.slice(..part_bytes);
            apply_part(&mut txn, to, "c", &copies[0], &part, head_data, copies.len() > 1).expect("apply");
            for (c, d) in copies[1..].iter().zip(datas) {
                apply_copy(&mut txn, to, "c", c, d).expect("apply a clone");
            }
            to.commit(txn, Durability::Batch).expect("commit");
            if part.last {
                return parts;
            }
            at = next;
        }
    }

    /// Clones as large as a pool's objects may be (64 MiB: more than a message carries beside
    /// the largest header) each go alone in a part beside a small header, after the parts that
    /// carry the head's omap entries; one whose metadata leaves no room beside its data is
    /// refused by name.
    #[test]
    fn clones_of_the_largest_objects_go_alone_in_parts_and_one_too_large_is_refused() {
        const LARGEST: usize = 64 << 20;
        let from = shoal_store::engine::MemEngine::new_mem(512 << 20).expect("store");
        let to = shoal_store::engine::MemEngine::new_mem(512 << 20).expect("store");
        let mut txn = Transaction::new();
        txn.create_collection("c");
        txn.touch("c", "big");
        txn.write("c", "big", 0, bytes::Bytes::from(vec![9u8; 3 << 20]));
        // Omap entries over two parts of the budget below.
        txn.omap_set("c", "big", (0..40u32).map(|i| (i.to_be_bytes().to_vec(), vec![5u8; 60 << 10])).collect());
        txn.set_version("c", "big", (3, 9));
        for (id, size) in [(1, LARGEST), (2, 1000), (3, LARGEST)] {
            let clone = snaps::clone_name("big", id);
            txn.touch("c", &clone);
            txn.write("c", &clone, 0, bytes::Bytes::from(vec![id as u8; size]));
            txn.set_xattr("c", &clone, "user.a", vec![id as u8; 100]);
            txn.set_version("c", &clone, (3, id));
        }
        from.commit(txn, Durability::Batch).expect("commit");
        let mut txn = Transaction::new();
        txn.create_collection("c");
        to.commit(txn, Durability::Batch).expect("commit");

        let parts = send_head_in_parts(&from, &to, "big", 1 << 20, true);
        assert!(parts >= 6, "{parts} parts");
        for name in
            ["big".to_string(), snaps::clone_name("big", 1), snaps::clone_name("big", 2), snaps::clone_name("big", 3)]
        {
            assert!(state(&to, &name) == state(&from, &name), "{name}");
        }

        // A largest clone with more xattrs than leave room beside its data in one frame.
        let mut txn = Transaction::new();
        for i in 0..4 {
            txn.set_xattr("c", &snaps::clone_name("big", 3), &format!("user.wide{i}"), vec![7u8; 60 << 10]);
        }
        from.commit(txn, Durability::Batch).expect("commit");
        let mut at = PartCursor::default();
        let refused = loop {
            let mut data = Vec::new();
            match read_part_copies(&from, "c", "big", &at, 1 << 20, &mut data) {
                Ok(Some((_, part, next))) => {
                    assert!(!part.last, "the last part comes only after every clone");
                    at = next;
                }
                Ok(None) => panic!("the head is there"),
                Err(e) => break e,
            }
        };
        assert_eq!(refused.code, ErrorCode::TooLarge, "{refused}");
        assert!(refused.message.contains(&snaps::clone_name("big", 3)), "{refused}");
    }

    /// An object with more xattrs and omap than one message carries is refused by name when it
    /// is copied (its recovery stalls, reported), never sent; one under the bound is copied whole.
    #[test]
    fn copies_over_what_a_message_carries_are_refused_and_smaller_ones_copied_whole() {
        let store = shoal_store::engine::MemEngine::new_mem(256 << 20).expect("store");
        let mut txn = Transaction::new();
        txn.create_collection("c");
        txn.touch("c", "small");
        txn.omap_set("c", "small", (0..100u32).map(|i| (i.to_be_bytes().to_vec(), vec![1u8; 60 << 10])).collect());
        store.commit(txn, Durability::Batch).expect("commit");
        // Over the bound, written in batches the store takes.
        let per_batch = 64u32;
        let batches = (COPY_METADATA_MAX_BYTES / (60 << 10)) as u32 / per_batch + 1;
        for b in 0..batches {
            let mut txn = Transaction::new();
            txn.touch("c", "wide");
            let entries = (0..per_batch).map(|i| ((b * per_batch + i).to_be_bytes().to_vec(), vec![2u8; 60 << 10]));
            txn.omap_set("c", "wide", entries.collect());
            store.commit(txn, Durability::Batch).expect("commit");
        }
        let mut data = Vec::new();
        let copies =
            read_copies(&store, "c", "small", COPY_METADATA_MAX_BYTES, &mut data).expect("a copy under the bound");
        assert_eq!(copies[0].omap.len(), 100);
        let e = read_copies(&store, "c", "wide", COPY_METADATA_MAX_BYTES, &mut data).expect_err("over the bound");
        assert_eq!(e.code, ErrorCode::TooLarge);
        assert!(e.message.contains("wide"), "{e}");
        // Copies that fit one by one but not together are refused together.
        let big = ObjectCopy { omap: vec![(vec![0], vec![0; 60 << 10]); 300], ..copies[0].clone() };
        assert!(check_copies_fit(std::slice::from_ref(&big)).is_ok());
        assert!(check_copies_fit(&[big.clone(), big]).is_err());
    }
}
