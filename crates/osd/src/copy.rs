//! Objects copied whole between members of a PG (recovery and backfill): reading an object's
//! data, xattrs and omap from the store, and turning received copies into store transactions.

use shoal_proto::osd::ObjectCopy;
use shoal_proto::{ErrorCode, RemoteError};
use shoal_store::{ObjectStore, StoreError, Transaction};

use crate::exec::store_error;
use crate::snaps;

/// Omap entries read per store call while copying an object.
const OMAP_PAGE: usize = 4096;

/// Reads object `name` of collection `coll` whole. A missing object (or collection) gives a copy
/// with `exists: false`, which removes the object where it is applied. The object's bytes are
/// appended to `data`.
pub fn read_copy(
    store: &dyn ObjectStore,
    coll: &str,
    name: &str,
    data: &mut Vec<u8>,
) -> Result<ObjectCopy, RemoteError> {
    let size_bytes = match store.stat(coll, name) {
        Ok(s) => Some(s.size_bytes),
        Err(StoreError::NoSuchObject { .. } | StoreError::NoSuchCollection(_)) => None,
        Err(e) => return Err(store_error(&e)),
    };
    read_copy_sized(store, coll, name, size_bytes, data)
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
    remove_stale_companions(txn, store, coll, &absent)?;
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
/// exist), so that it is not looked up twice.
pub fn read_copy_sized(
    store: &dyn ObjectStore,
    coll: &str,
    name: &str,
    size_bytes: Option<u64>,
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
    let (xattrs, omap) = read_metadata(store, coll, name)?;
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

/// Object `name`'s xattrs and whole omap, refused past [`COPY_METADATA_MAX_BYTES`].
#[allow(clippy::type_complexity)]
fn read_metadata(
    store: &dyn ObjectStore,
    coll: &str,
    name: &str,
) -> Result<(Vec<(String, Vec<u8>)>, Vec<(Vec<u8>, Vec<u8>)>), RemoteError> {
    let xattrs = store.list_xattrs(coll, name).map_err(|e| store_error(&e))?;
    // Counted as read (bytes plus the most framing an entry takes encoded), so an object far
    // over the bound is refused without being read whole into memory.
    let entry_bytes = |k: &[u8], v: &[u8]| k.len() + v.len() + 10;
    let over = |size_bytes: usize| {
        RemoteError::new(
            ErrorCode::TooLarge,
            format!(
                "{name} holds over {COPY_METADATA_MAX_BYTES} bytes of xattrs and omap ({size_bytes} read), more than a copy carries"
            ),
        )
    };
    let mut size_bytes: usize = xattrs.iter().map(|(k, v)| entry_bytes(k.as_bytes(), v)).sum();
    if size_bytes > COPY_METADATA_MAX_BYTES {
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
        if size_bytes > COPY_METADATA_MAX_BYTES {
            return Err(over(size_bytes));
        }
        omap.extend(page);
        if short {
            break;
        }
    }
    Ok((xattrs, omap))
}

/// Reads the part of object `name` that starts at `offset`, at most `len_bytes` long, appending
/// its bytes to `data`. The copy names the object's whole size; the first part (`offset` 0)
/// carries the xattrs and omap too. `None`: the object does not exist (any more).
pub fn read_part(
    store: &dyn ObjectStore,
    coll: &str,
    name: &str,
    offset: u64,
    len_bytes: u64,
    data: &mut Vec<u8>,
) -> Result<Option<ObjectCopy>, RemoteError> {
    let stat = match store.stat(coll, name) {
        Ok(s) => s,
        Err(StoreError::NoSuchObject { .. } | StoreError::NoSuchCollection(_)) => return Ok(None),
        Err(e) => return Err(store_error(&e)),
    };
    if offset >= stat.size_bytes {
        return Err(RemoteError::new(
            ErrorCode::Invalid,
            format!("a part at {offset} of {name} is past its end ({} bytes)", stat.size_bytes),
        ));
    }
    let len = len_bytes.min(stat.size_bytes - offset);
    let bytes = store.read(coll, name, offset, len).map_err(|e| store_error(&e))?;
    if bytes.len() as u64 != len {
        return Err(RemoteError::new(ErrorCode::Io, format!("short read of {name} while copying a part of it")));
    }
    data.extend_from_slice(&bytes);
    let (xattrs, omap) = if offset == 0 { read_metadata(store, coll, name)? } else { (Vec::new(), Vec::new()) };
    // (A copy in parts keeps no version: see `replace_object`.)
    let version = Default::default();
    Ok(Some(ObjectCopy { name: name.to_string(), exists: true, size_bytes: stat.size_bytes, xattrs, omap, version }))
}

/// Reads object `name` whole and, when it is a head, its companions (snapshot clones and snap
/// directory, which move with it): the head's copy first. All bytes are appended to `data`.
pub fn read_copies(
    store: &dyn ObjectStore,
    coll: &str,
    name: &str,
    data: &mut Vec<u8>,
) -> Result<Vec<ObjectCopy>, RemoteError> {
    let mut copies = vec![read_copy(store, coll, name, data)?];
    if !snaps::is_companion(name) {
        for companion in snaps::companions(store, coll, name)? {
            copies.push(read_copy(store, coll, &companion, data)?);
        }
    }
    check_copies_fit(&copies)?;
    Ok(copies)
}

/// Adds to `txn` the removal of the local companions of each head among `copies` that the
/// copies do not carry (clones trimmed where the copies come from), so that a head recovered
/// whole arrives with exactly its source's companions.
pub fn remove_stale_companions(
    txn: &mut Transaction,
    store: &dyn ObjectStore,
    coll: &str,
    copies: &[ObjectCopy],
) -> Result<(), RemoteError> {
    let names: std::collections::BTreeSet<&str> = copies.iter().map(|c| c.name.as_str()).collect();
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
    replace_object(txn, store, coll, copy, data)
}

/// Adds to `txn` the replacement of the local object by `copy` with `data` (its bytes, or the
/// first part of them): removed, then recreated with that data and the copy's xattrs and omap.
fn replace_object(
    txn: &mut Transaction,
    store: &dyn ObjectStore,
    coll: &str,
    copy: &ObjectCopy,
    data: bytes::Bytes,
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
    let whole = data.len() as u64 == copy.size_bytes;
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
    // trusts stored versions even on members being backfilled); such a copy gets its version at
    // its next write.
    if whole {
        crate::objver::install(txn, coll, &copy.name, copy.version);
    }
    Ok(())
}

/// Adds to `txn` one part of a large object sent in parts (see `PushPart`): the first replaces
/// the local object (data, xattrs and omap), a later one must start where the local copy ends
/// (parts arrive in order on one link; anything else is refused, and the primary then peers
/// again and starts the object over), and the last must end at the copy's size.
pub fn apply_part(
    txn: &mut Transaction,
    store: &dyn ObjectStore,
    coll: &str,
    copy: &ObjectCopy,
    part: shoal_proto::osd::PushPart,
    data: bytes::Bytes,
) -> Result<(), RemoteError> {
    let invalid = |why: String| Err(RemoteError::new(ErrorCode::Invalid, why));
    let end = part.offset + data.len() as u64;
    if !copy.exists || data.is_empty() || end > copy.size_bytes || (part.last && end != copy.size_bytes) {
        return invalid(format!(
            "part of {} at {} with {} bytes does not fit its size of {} (last: {})",
            copy.name,
            part.offset,
            data.len(),
            copy.size_bytes,
            part.last
        ));
    }
    if part.offset == 0 {
        return replace_object(txn, store, coll, copy, data);
    }
    let held = match store.stat(coll, &copy.name) {
        Ok(s) => s.size_bytes,
        Err(StoreError::NoSuchObject { .. } | StoreError::NoSuchCollection(_)) => 0,
        Err(e) => return Err(store_error(&e)),
    };
    if held != part.offset {
        return invalid(format!("part of {} at {} but this copy holds {held} bytes", copy.name, part.offset));
    }
    txn.write(coll, &copy.name, part.offset, data);
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

/// Objects in `coll` (0 if it does not exist), counted a page at a time up to `COUNT_LIMIT`: an
/// estimate for progress reports, bounded so that a huge PG cannot stall its OSD.
pub fn count_objects(store: &dyn ObjectStore, coll: &str) -> u64 {
    const PAGE: usize = 4096;
    const COUNT_LIMIT: u64 = 4_000_000;
    let mut count = 0u64;
    let mut after: Option<String> = None;
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
        let copies = read_copies(&store, "c", "small", &mut data).expect("a copy under the bound");
        assert_eq!(copies[0].omap.len(), 100);
        let e = read_copies(&store, "c", "wide", &mut data).expect_err("over the bound");
        assert_eq!(e.code, ErrorCode::TooLarge);
        assert!(e.message.contains("wide"), "{e}");
        // Copies that fit one by one but not together are refused together.
        let big = ObjectCopy { omap: vec![(vec![0], vec![0; 60 << 10]); 300], ..copies[0].clone() };
        assert!(check_copies_fit(std::slice::from_ref(&big)).is_ok());
        assert!(check_copies_fit(&[big.clone(), big]).is_err());
    }
}
