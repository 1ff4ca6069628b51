//! Validation of user-supplied names and sizes, shared by every backend so that all of them
//! accept and refuse exactly the same input.

use crate::error::{NAME_TOO_LONG, Result, StoreError};

/// Longest collection, object or xattr name, in bytes.
pub const MAX_NAME_BYTES: usize = 255;
/// Longest omap key, in bytes.
pub const MAX_OMAP_KEY_BYTES: usize = 4096;
/// Largest xattr or omap value, in bytes.
pub const MAX_VALUE_BYTES: usize = 64 * 1024;
/// Largest object, in bytes. Objects are the unit of placement; large data is striped over many.
pub const MAX_OBJECT_BYTES: u64 = 4 << 30;

fn check(what: &'static str, name: &str, max: usize) -> Result<()> {
    let bad = |reason| Err(StoreError::InvalidName { what, name: name.to_string(), reason });
    if name.is_empty() {
        return bad("empty");
    }
    if name.len() > max {
        return bad(NAME_TOO_LONG);
    }
    if name.contains('\0') {
        return bad("contains NUL");
    }
    Ok(())
}

/// Checks a collection name: 1..=255 bytes, no NUL, and no `/` (it separates collection and
/// object in `COLLECTION/OBJECT` paths).
pub fn check_collection(name: &str) -> Result<()> {
    check("collection name", name, MAX_NAME_BYTES)?;
    if name.contains('/') {
        return Err(StoreError::InvalidName {
            what: "collection name",
            name: name.to_string(),
            reason: "contains '/'",
        });
    }
    Ok(())
}

/// Checks an object name: 1..=255 bytes, no NUL.
pub fn check_object(name: &str) -> Result<()> {
    check("object name", name, MAX_NAME_BYTES)
}

/// Checks an xattr name: 1..=255 bytes, no NUL.
pub fn check_xattr(name: &str) -> Result<()> {
    check("xattr name", name, MAX_NAME_BYTES)
}

/// Checks an omap key: 1..=4096 bytes (any bytes).
pub fn check_omap_key(key: &[u8]) -> Result<()> {
    if key.is_empty() || key.len() > MAX_OMAP_KEY_BYTES {
        return Err(StoreError::InvalidName {
            what: "omap key",
            name: String::from_utf8_lossy(&key[..key.len().min(64)]).into_owned(),
            reason: if key.is_empty() { "empty" } else { NAME_TOO_LONG },
        });
    }
    Ok(())
}

/// Checks an xattr or omap value size.
pub fn check_value(what: &str, value: &[u8]) -> Result<()> {
    if value.len() > MAX_VALUE_BYTES {
        return Err(StoreError::InvalidArgument(format!(
            "{what} value of {} bytes exceeds the limit of {MAX_VALUE_BYTES} bytes",
            value.len()
        )));
    }
    Ok(())
}

/// Checks that an object's extent `[offset, offset + len)` stays under [`MAX_OBJECT_BYTES`].
pub fn check_extent(coll: &str, obj: &str, offset: u64, len: u64) -> Result<()> {
    match offset.checked_add(len) {
        Some(end) if end <= MAX_OBJECT_BYTES => Ok(()),
        _ => Err(StoreError::ObjectTooLarge {
            coll: coll.to_string(),
            obj: obj.to_string(),
            max_bytes: MAX_OBJECT_BYTES,
        }),
    }
}
