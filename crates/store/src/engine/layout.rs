//! The engine's on-medium formats: metadata keys and records, the superblock and the device
//! label. Everything that is written to disk is defined here and nowhere else.
//!
//! Keys (names never contain NUL, so NUL separates components and keeps prefixes unique):
//!
//! | keyspace   | key                                  | value                          |
//! |------------|--------------------------------------|--------------------------------|
//! | `meta`     | `superblock`                         | [`Superblock`] (postcard)      |
//! | `colls`    | collection                           | empty                          |
//! | `onodes`   | collection NUL object                | [`Onode`]                      |
//! | `extents`  | collection NUL object NUL be64(end)  | [`Extent`] ending at logical `end` |
//! | `xattrs`   | collection NUL object NUL name       | value bytes                    |
//! | `omap`     | collection NUL object NUL key        | value bytes                    |
//! | `free`     | be64(device offset)                  | be64(length)                   |

use serde::{Deserialize, Serialize};

use crate::error::{Result, StoreError};

/// Format version written by this code; mount refuses other versions.
pub const FORMAT_VERSION: u32 = 1;
/// Largest logical length of one extent record, so that records (and their checksum lists) stay
/// small and a write only rewrites the records it touches.
pub const MAX_EXTENT_BYTES: u64 = 1 << 20;
/// Bytes at the start of the device holding the label.
pub const LABEL_BYTES: u64 = 4096;
/// Largest commit log region.
pub const MAX_LOG_BYTES: u64 = 64 << 20;

/// Size of the commit log for a device: 1/16 of it, at most [`MAX_LOG_BYTES`], in whole blocks.
#[must_use]
pub fn log_bytes_for(device_bytes: u64) -> u64 {
    (device_bytes / 16).min(MAX_LOG_BYTES) / 4096 * 4096
}
/// Magic bytes at the start of the device label.
pub const LABEL_MAGIC: &[u8; 8] = b"SHOALDEV";

/// Identity and geometry of a store, in the `meta` keyspace.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Superblock {
    pub version: u32,
    pub uuid: [u8; 16],
    pub device_bytes: u64,
    /// Device offset and length of the commit log region (see `wal.rs`).
    pub log_offset: u64,
    pub log_bytes: u64,
}

/// An object's record.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Onode {
    pub size_bytes: u64,
    pub mtime_ns: i64,
    /// The caller's version of the object (`Op::SetVersion`; `(0, 0)`: none), kept in the record
    /// every write rewrites anyway, so that it costs no key of its own.
    pub version: (u64, u64),
}

/// An object's record as stores before object versions wrote it.
#[derive(Deserialize)]
struct OnodeV1 {
    size_bytes: u64,
    mtime_ns: i64,
}

impl Onode {
    /// A new object's record: empty, no version.
    #[must_use]
    pub fn empty() -> Onode {
        Onode { size_bytes: 0, mtime_ns: 0, version: (0, 0) }
    }

    /// Decodes a record of either format. A record without a version (written before versions
    /// were kept) ends right after its time, so decoding it as the current format runs out of
    /// bytes, and only then is it read as the old one.
    pub fn decode(bytes: &[u8]) -> Result<Onode> {
        match postcard::from_bytes::<Onode>(bytes) {
            Ok(o) => Ok(o),
            Err(postcard::Error::DeserializeUnexpectedEnd) => {
                let old: OnodeV1 = decode("onode", bytes)?;
                Ok(Onode { size_bytes: old.size_bytes, mtime_ns: old.mtime_ns, version: (0, 0) })
            }
            Err(e) => Err(StoreError::Corrupt(format!("undecodable onode record: {e}"))),
        }
    }
}

/// A run of object data at logical offset `key` stored at device offset `phys`, with one
/// crc32c per block.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Extent {
    pub phys: u64,
    pub len_bytes: u64,
    pub csums: Vec<u32>,
}

pub fn encode<T: Serialize>(value: &T) -> Vec<u8> {
    match postcard::to_stdvec(value) {
        Ok(v) => v,
        // Serialising plain structs into a Vec cannot fail.
        Err(e) => unreachable!("postcard encoding failed: {e}"),
    }
}

pub fn decode<'a, T: Deserialize<'a>>(what: &str, bytes: &'a [u8]) -> Result<T> {
    postcard::from_bytes(bytes).map_err(|e| StoreError::Corrupt(format!("undecodable {what} record: {e}")))
}

pub const SUPERBLOCK_KEY: &[u8] = b"superblock";

/// `collection NUL object`.
#[must_use]
pub fn object_key(coll: &str, obj: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(coll.len() + obj.len() + 1);
    k.extend_from_slice(coll.as_bytes());
    k.push(0);
    k.extend_from_slice(obj.as_bytes());
    k
}

/// `collection NUL`: the prefix of every object key of the collection.
#[must_use]
pub fn collection_prefix(coll: &str) -> Vec<u8> {
    let mut k = coll.as_bytes().to_vec();
    k.push(0);
    k
}

/// `collection NUL object NUL`: the prefix of every extent, xattr and omap key of the object.
#[must_use]
pub fn child_prefix(coll: &str, obj: &str) -> Vec<u8> {
    // Room for the NUL and for an extent key's 8-byte end, which callers append to a copy.
    let mut k = Vec::with_capacity(coll.len() + obj.len() + 2 + 8);
    k.extend_from_slice(coll.as_bytes());
    k.push(0);
    k.extend_from_slice(obj.as_bytes());
    k.push(0);
    k
}

/// Key of the extent record whose logical range ends at `end` (exclusive). Keying by the end
/// lets a scan for `[lo, hi)` start exactly at the first record that can overlap it.
#[must_use]
pub fn extent_key(prefix: &[u8], end: u64) -> Vec<u8> {
    let mut k = Vec::with_capacity(prefix.len() + 8);
    k.extend_from_slice(prefix);
    k.extend_from_slice(&end.to_be_bytes());
    k
}

/// Logical end encoded in an extent key.
pub fn extent_key_end(key: &[u8]) -> Result<u64> {
    let tail = key.len().checked_sub(8).map(|at| &key[at..]);
    tail.and_then(|t| t.try_into().ok())
        .map(u64::from_be_bytes)
        .ok_or_else(|| StoreError::Corrupt("extent key too short".into()))
}

/// Decodes an extent record into its logical start and contents.
pub fn decode_extent(key: &[u8], value: &[u8]) -> Result<(u64, Extent)> {
    let start = extent_start(key, value)?;
    Ok((start, decode_extent_record(value)?))
}

/// The logical start of the extent record under `key` with value `value`, from the record's
/// length alone (its checksums are not decoded): what a scan needs to know whether a record
/// lies past the range it wants. Refuses what [`decode_extent`] refuses for the key and the
/// length; the rest of the record is checked when it is decoded.
pub fn extent_start(key: &[u8], value: &[u8]) -> Result<u64> {
    let end = extent_key_end(key)?;
    let corrupt = || StoreError::Corrupt("undecodable extent record".into());
    let mut at = 0;
    take_varint(value, &mut at, 10).ok_or_else(corrupt)?;
    let len_bytes = take_varint(value, &mut at, 10).ok_or_else(corrupt)?;
    end.checked_sub(len_bytes)
        .ok_or_else(|| StoreError::Corrupt(format!("extent ending at {end} is {len_bytes} bytes long")))
}

/// Decodes an [`Extent`] record: exactly what `decode("extent", value)` decodes (postcard:
/// varint `phys`, varint `len_bytes`, varint count, then a varint per checksum), accepting and
/// refusing the same bytes, without serde's per-element machinery. Every read decodes each
/// extent record it touches, and a 1 MiB record carries 256 checksums: through serde that was
/// the largest cost of a 4 KiB read at the OSD after the copy itself.
pub fn decode_extent_record(value: &[u8]) -> Result<Extent> {
    let corrupt = || StoreError::Corrupt("undecodable extent record".into());
    let mut at = 0;
    let phys = take_varint(value, &mut at, 10).ok_or_else(corrupt)?;
    let len_bytes = take_varint(value, &mut at, 10).ok_or_else(corrupt)?;
    let count = take_varint(value, &mut at, 10).ok_or_else(corrupt)?;
    // Each checksum takes at least one byte: a count beyond what is left is corrupt, and
    // checking it first bounds the allocation by the record's size.
    let count = usize::try_from(count).ok().filter(|&n| n <= value.len() - at).ok_or_else(corrupt)?;
    let mut csums = Vec::with_capacity(count);
    for _ in 0..count {
        // A checksum of five bytes (15 in 16 of them) is read at once; any other goes the long
        // way, which refuses what postcard refuses.
        if let Some(&[b0, b1, b2, b3, b4]) = value.get(at..at + 5)
            && b0 & b1 & b2 & b3 & 0x80 != 0
            && b4 < 0x10
        {
            csums.push(
                u32::from(b0 & 0x7f)
                    | u32::from(b1 & 0x7f) << 7
                    | u32::from(b2 & 0x7f) << 14
                    | u32::from(b3 & 0x7f) << 21
                    | u32::from(b4) << 28,
            );
            at += 5;
            continue;
        }
        let v = take_varint(value, &mut at, 5).ok_or_else(corrupt)?;
        csums.push(u32::try_from(v).map_err(|_| corrupt())?);
    }
    Ok(Extent { phys, len_bytes, csums })
}

/// Encodes an [`Extent`] record: exactly the bytes `encode(extent)` makes (postcard: varint
/// `phys`, varint `len_bytes`, varint count, then a varint per checksum), into one allocation of
/// the largest size they can take. A 4 KiB overwrite in place re-encodes its whole extent
/// record, and a 1 MiB record carries 256 checksums: through serde, which grows its vector a
/// varint at a time, that was a tenth of a RAM OSD's CPU under 4 KiB random writes.
#[must_use]
pub fn encode_extent_record(e: &Extent) -> Vec<u8> {
    let mut out = Vec::with_capacity(2 * 10 + 5 + 5 * e.csums.len());
    put_varint(&mut out, e.phys);
    put_varint(&mut out, e.len_bytes);
    put_varint(&mut out, e.csums.len() as u64);
    for &csum in &e.csums {
        // A checksum is a random 32-bit value: 15 in 16 take all five bytes, written at once.
        if csum >= 1 << 28 {
            out.extend_from_slice(&[
                csum as u8 | 0x80,
                (csum >> 7) as u8 | 0x80,
                (csum >> 14) as u8 | 0x80,
                (csum >> 21) as u8 | 0x80,
                (csum >> 28) as u8,
            ]);
        } else {
            put_varint(&mut out, u64::from(csum));
        }
    }
    out
}

/// Appends `value` as one LEB128 varint (postcard's encoding of unsigned integers).
fn put_varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

/// One LEB128 varint of at most `max_bytes` bytes at `*at` (postcard's encoding of unsigned
/// integers: 10 bytes for a u64, 5 for a u32), advancing `*at`. `None` if the bytes end first,
/// the varint runs longer, or its value does not fit in 64 bits.
fn take_varint(bytes: &[u8], at: &mut usize, max_bytes: usize) -> Option<u64> {
    let mut value: u64 = 0;
    for i in 0..max_bytes {
        let b = *bytes.get(*at)?;
        *at += 1;
        let bits = u64::from(b & 0x7f);
        // The tenth byte of a u64 holds its top bit only.
        if i == 9 && bits > 1 {
            return None;
        }
        value |= bits << (7 * i);
        if b & 0x80 == 0 {
            return Some(value);
        }
    }
    None
}

/// Key under a prefix with a byte-string suffix (xattr names, omap keys).
#[must_use]
pub fn child_key(prefix: &[u8], suffix: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(prefix.len() + suffix.len());
    k.extend_from_slice(prefix);
    k.extend_from_slice(suffix);
    k
}

/// The smallest key greater than every key starting with `prefix`, if any.
#[must_use]
pub fn prefix_end(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return Some(end);
        }
    }
    None
}

#[must_use]
pub fn u64_key(v: u64) -> Vec<u8> {
    v.to_be_bytes().to_vec()
}

pub fn decode_u64(what: &str, bytes: &[u8]) -> Result<u64> {
    bytes
        .try_into()
        .map(u64::from_be_bytes)
        .map_err(|_| StoreError::Corrupt(format!("{what} is {} bytes, expected 8", bytes.len())))
}

/// The device label: magic, format version and the store's uuid, padded to one block.
#[must_use]
pub fn label_block(uuid: &[u8; 16]) -> Vec<u8> {
    let mut b = vec![0u8; LABEL_BYTES as usize];
    b[..8].copy_from_slice(LABEL_MAGIC);
    b[8..12].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
    b[12..28].copy_from_slice(uuid);
    let crc = shoal_util::crc32c(&b[..28]);
    b[28..32].copy_from_slice(&crc.to_le_bytes());
    b
}

/// Checks that `block` is the label of the store with `uuid`.
pub fn check_label(block: &[u8], uuid: &[u8; 16]) -> std::result::Result<(), String> {
    if block.len() < 32 || &block[..8] != LABEL_MAGIC {
        return Err("the device has no Shoal label".into());
    }
    let crc = u32::from_le_bytes([block[28], block[29], block[30], block[31]]);
    if crc != shoal_util::crc32c(&block[..28]) {
        return Err("the device label is corrupt".into());
    }
    if &block[12..28] != uuid {
        return Err("the device belongs to a different store".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {

    #[test]
    fn onodes_of_both_formats_decode_and_garbage_does_not() {
        #[derive(Serialize)]
        struct V1 {
            size_bytes: u64,
            mtime_ns: i64,
        }
        let old = encode(&V1 { size_bytes: 4096, mtime_ns: -7 });
        assert_eq!(Onode::decode(&old).unwrap(), Onode { size_bytes: 4096, mtime_ns: -7, version: (0, 0) });
        let new = Onode { size_bytes: 1, mtime_ns: 2, version: (3, u64::MAX) };
        assert_eq!(Onode::decode(&encode(&new)).unwrap(), new);
        assert!(Onode::decode(&[]).is_err());
        assert!(Onode::decode(&[0xff; 3]).is_err());
    }

    use super::*;
    use proptest::prelude::*;

    /// Integers across every varint length, edges included.
    fn wide_u64() -> impl Strategy<Value = u64> {
        prop_oneof![
            any::<u64>(),
            (0u32..64).prop_map(|b| 1u64 << b),
            (0u32..64).prop_map(|b| (1u64 << b) - 1),
            Just(u64::MAX)
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 2048, ..ProptestConfig::default() })]

        /// The hand-written encoder makes exactly postcard's bytes (the records on disk).
        #[test]
        fn extent_records_encode_as_postcard_encodes_them(
            phys in wide_u64(),
            len_bytes in wide_u64(),
            csums in proptest::collection::vec(prop_oneof![any::<u32>(), Just(0u32), Just(u32::MAX), Just(0x7f), Just(0x80)], 0..300),
        ) {
            let e = Extent { phys, len_bytes, csums };
            prop_assert_eq!(encode_extent_record(&e), encode(&e));
        }

        /// Every encoded record decodes to itself, as postcard decodes it.
        #[test]
        fn extent_records_decode_as_postcard_decodes_them(
            phys in wide_u64(),
            len_bytes in wide_u64(),
            csums in proptest::collection::vec(any::<u32>(), 0..300),
            trailing in proptest::collection::vec(any::<u8>(), 0..4),
        ) {
            let e = Extent { phys, len_bytes, csums };
            let mut bytes = encode(&e);
            bytes.extend_from_slice(&trailing);
            prop_assert_eq!(decode_extent_record(&bytes).ok(), Some(e));
        }

        /// Any bytes at all (damaged records, cut records, overlong varints): the hand-written
        /// decoder accepts exactly what postcard accepts, with the same result.
        #[test]
        fn any_bytes_are_accepted_or_refused_as_postcard_does(
            // Varints of the longest lengths (nine or four continuation bytes, then any last
            // byte), which random bytes rarely make, before random bytes.
            long in proptest::option::of((prop_oneof![Just(4usize), Just(9usize)], any::<u8>(), any::<u8>())),
            tail in proptest::collection::vec(prop_oneof![any::<u8>(), Just(0xffu8), Just(0x80u8), Just(0x01u8), Just(0x0fu8), Just(0x10u8)], 0..40),
        ) {
            let mut bytes = Vec::new();
            if let Some((continued, fill, last)) = long {
                bytes.extend(std::iter::repeat_n(fill | 0x80, continued));
                bytes.push(last);
            }
            bytes.extend_from_slice(&tail);
            let ours = decode_extent_record(&bytes).ok();
            let theirs: Option<Extent> = decode("extent", &bytes).ok();
            prop_assert_eq!(ours, theirs);
        }
    }
}
