//! Message payloads: how a typed message and its bulk data travel in one frame's payload.
//!
//! ```text
//! payload = data bytes | postcard(header) | header length (u32 LE) | version (u8)
//! ```
//!
//! The bulk data (object bytes of a write or a read reply) comes *first* and the small header
//! last, so that a receiver gets the data as the payload `Vec` truncated to its length, without
//! copying megabytes, and a sender builds the payload by appending the header to the data it
//! already owns. The version byte lets a later release refuse (or translate) an older peer's
//! messages with a clear error instead of misreading them.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

/// Version of every message layout in this crate. Bump it when any message changes shape
/// (2: replicated writes carry a precondition; the auth table joined the map. 3: OSDs carry a
/// full flag. 4: replicated writes carry an epoch-and-sequence version. 5: peering and recovery
/// messages; the map's temporary acting sets and activation records).
pub const MSG_VERSION: u8 = 7;
/// Largest encoded header (everything but the bulk data). Object copies carry an object's
/// xattrs and whole omap in their header (recovery and backfill pushes, pull answers), and a
/// bucket index partition of 50,000 keys holds several MiB of omap, so the bound is 32 MiB; a
/// header is read only from a payload already received whole, itself bounded by
/// [`crate::MAX_PAYLOAD_BYTES`], so the bound costs no allocation of its own.
pub const MAX_HEADER_BYTES: usize = 32 << 20;

/// Largest header of a client's request or of the answer to one: their operations and outputs
/// (keys, values, names) are kept to 1 MiB, far above any legitimate use (the largest is an omap
/// batch or a page of a listing); callers ask for less per request.
pub const CLIENT_HEADER_MAX_BYTES: usize = 1 << 20;

/// Why a payload is not the message it claims to be.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MsgError {
    #[error("message payload of {0} bytes is too short for its trailer")]
    Truncated(usize),
    #[error("message version {got} is not supported (this build speaks version {MSG_VERSION})")]
    Version { got: u8 },
    #[error("message header of {0} bytes exceeds the limit or the payload")]
    BadHeaderLength(usize),
    #[error("message header does not decode: {0}")]
    Decode(String),
    #[error("unexpected message type {got} (wanted {want})")]
    UnexpectedType { got: u16, want: u16 },
}

/// A message with its frame type.
pub trait Message: Serialize + DeserializeOwned {
    const TYPE: u16;
}

/// Room [`encode`] adds behind bulk data that has none for the header: far above a
/// data-carrying message's header (an object name and a few small ops).
pub const HEADER_ROOM_BYTES: usize = 4096;

/// Encodes `msg` behind `data` (which may be empty) into one frame payload.
///
/// A `data` without room for the header behind it grows by exactly that room, not by the
/// doubling a `Vec` does on its own: a 4 MiB write would otherwise hold an 8 MiB buffer.
///
/// # Panics
/// Panics if the header does not serialize (only possible for types that refuse serialization,
/// which no message here does) or exceeds [`MAX_HEADER_BYTES`], a bug in the sender.
#[must_use]
pub fn encode<M: Serialize>(msg: &M, mut data: Vec<u8>) -> Vec<u8> {
    let start = data.len();
    if start > 0 && data.capacity() - start < HEADER_ROOM_BYTES {
        data.reserve_exact(HEADER_ROOM_BYTES);
    }
    data = postcard::to_extend(msg, data).unwrap_or_else(|e| panic!("message does not serialize: {e}"));
    let header_len = data.len() - start;
    assert!(header_len <= MAX_HEADER_BYTES, "message header of {header_len} bytes is over the limit");
    data.extend_from_slice(&(header_len as u32).to_le_bytes());
    data.push(MSG_VERSION);
    data
}

/// Bytes `msg` takes encoded as a header ([`encode`] refuses one over [`MAX_HEADER_BYTES`]):
/// senders whose headers grow with their callers' input check it before they encode.
#[must_use]
pub fn encoded_len<M: Serialize>(msg: &M) -> usize {
    postcard::serialize_with_flavor(msg, postcard::ser_flavors::Size::default()).unwrap_or(usize::MAX)
}

/// Splits a payload made by [`encode`] into the bulk data's length and the encoded header, after
/// checking its version and header length.
fn split(payload: &[u8]) -> Result<(usize, &[u8]), MsgError> {
    let n = payload.len();
    if n < 5 {
        return Err(MsgError::Truncated(n));
    }
    let version = payload[n - 1];
    if version != MSG_VERSION {
        return Err(MsgError::Version { got: version });
    }
    let mut len_bytes = [0u8; 4];
    len_bytes.copy_from_slice(&payload[n - 5..n - 1]);
    let header_len = u32::from_le_bytes(len_bytes) as usize;
    if header_len > MAX_HEADER_BYTES || header_len > n - 5 {
        return Err(MsgError::BadHeaderLength(header_len));
    }
    let data_len = n - 5 - header_len;
    Ok((data_len, &payload[data_len..n - 5]))
}

/// The length of the encoded header of a payload made by [`encode`], or `None` when the payload
/// is not one.
#[must_use]
pub fn header_len(payload: &[u8]) -> Option<usize> {
    split(payload).ok().map(|(_, header)| header.len())
}

/// The length of the bulk data at the front of a payload made by [`encode`], or `None` when the
/// payload is not one (a receiver asks before it knows the message type; decoding reports why).
#[must_use]
pub fn bulk_len(payload: &[u8]) -> Option<usize> {
    split(payload).ok().map(|(data_len, _)| data_len)
}

/// Decodes a payload made by [`encode`]: the header and the bulk data (the payload truncated to
/// the data, so no copy).
pub fn decode<M: DeserializeOwned>(mut payload: Vec<u8>) -> Result<(M, Vec<u8>), MsgError> {
    let (data_len, header) = split(&payload)?;
    let header = postcard::from_bytes(header).map_err(|e| MsgError::Decode(e.to_string()))?;
    payload.truncate(data_len);
    Ok((header, payload))
}

/// [`decode`] of shared bytes: the bulk data is a slice of `payload`, so it keeps the payload's
/// memory (and its alignment: the data starts where the payload starts).
pub fn decode_bytes<M: DeserializeOwned>(payload: bytes::Bytes) -> Result<(M, bytes::Bytes), MsgError> {
    let (data_len, header) = split(&payload)?;
    let header = postcard::from_bytes(header).map_err(|e| MsgError::Decode(e.to_string()))?;
    Ok((header, payload.slice(..data_len)))
}

/// Decodes only the leading fields of a payload's header, as type `P` (whose fields must be the
/// message's first fields, in order), without touching the rest or the bulk data: for routing a
/// message before it is handled. `P` may borrow strings and bytes from `payload`.
pub fn peek<'a, P: Deserialize<'a>>(payload: &'a [u8]) -> Result<P, MsgError> {
    let (_, header) = split(payload)?;
    postcard::take_from_bytes(header).map(|(p, _)| p).map_err(|e| MsgError::Decode(e.to_string()))
}

/// [`decode`] after checking that the frame carries message type `M::TYPE`.
pub fn decode_frame<M: Message>(frame: crate::Frame) -> Result<(M, Vec<u8>), MsgError> {
    if frame.msg_type != M::TYPE {
        return Err(MsgError::UnexpectedType { got: frame.msg_type, want: M::TYPE });
    }
    decode(frame.into_payload())
}

/// [`decode_bytes`] after checking that the frame carries message type `M::TYPE`: the bulk data
/// is never copied, whichever part of the frame holds it.
pub fn decode_frame_bytes<M: Message>(frame: crate::Frame) -> Result<(M, bytes::Bytes), MsgError> {
    if frame.msg_type != M::TYPE {
        return Err(MsgError::UnexpectedType { got: frame.msg_type, want: M::TYPE });
    }
    decode_bytes(frame.into_bytes())
}

/// A frame carrying `msg` and `data`.
#[must_use]
pub fn frame<M: Message>(request_id: u64, msg: &M, data: Vec<u8>) -> crate::Frame {
    crate::Frame::new(M::TYPE, request_id, encode(msg, data))
}

/// A frame carrying `msg` and shared `data`: the same bytes on the wire as [`frame`], but the
/// data is sent from where it is (a store read, a buffer a caller keeps for a resend) instead of
/// being copied into the frame.
#[must_use]
pub fn frame_with_data<M: Message>(request_id: u64, msg: &M, data: bytes::Bytes) -> crate::Frame {
    crate::Frame::with_data(M::TYPE, request_id, data, encode(msg, Vec::new()))
}

/// [`frame_with_data`] for `data` whose crc32c is already known (`data_crc`): the header then
/// checksums only the message after it. A wrong `data_crc` makes the receiver refuse the frame
/// (and fails a debug assertion before it is sent).
#[must_use]
pub fn frame_with_checked_data<M: Message>(
    request_id: u64,
    msg: &M,
    data: bytes::Bytes,
    data_crc: Option<u32>,
) -> crate::Frame {
    crate::Frame::with_checked_data(M::TYPE, request_id, data, data_crc, encode(msg, Vec::new()))
}

/// [`frame_with_checked_data`] for data in pieces (`parts`, in order) whose crc32c together is
/// `data_crc` when known: the pieces are sent as they are, never joined.
#[must_use]
pub fn frame_with_checked_parts<M: Message>(
    request_id: u64,
    msg: &M,
    parts: Vec<bytes::Bytes>,
    data_crc: Option<u32>,
) -> crate::Frame {
    crate::Frame::with_checked_parts(M::TYPE, request_id, parts, data_crc, encode(msg, Vec::new()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Serialize, serde::Deserialize, Debug, PartialEq)]
    struct Header {
        object: String,
        offset: u64,
    }

    #[test]
    fn bulk_data_never_doubles_its_buffer_when_the_header_is_appended() {
        let data = vec![7u8; 4 << 20];
        let header = Header { object: "o".repeat(200), offset: u64::MAX };
        // A buffer with room keeps its allocation; an exactly-sized one grows by the room only.
        let mut made = Vec::with_capacity(data.len() + HEADER_ROOM_BYTES);
        made.extend_from_slice(&data);
        let cap = made.capacity();
        let encoded = encode(&header, made);
        assert_eq!(encoded.capacity(), cap);
        let exact = encode(&header, data.clone());
        assert!(exact.capacity() <= data.len() + HEADER_ROOM_BYTES + 64, "capacity {}", exact.capacity());
        let (back, bytes): (Header, Vec<u8>) = decode(exact).unwrap();
        assert_eq!((back, bytes), (header, data));
    }

    #[test]
    fn decoding_shared_bytes_returns_the_data_where_it_lies() {
        let header = Header { object: "obj".into(), offset: 4096 };
        let payload = bytes::Bytes::from(encode(&header, vec![3u8; 10_000]));
        let (back, data): (Header, bytes::Bytes) = decode_bytes(payload.clone()).unwrap();
        assert_eq!(back, header);
        assert_eq!(data.as_ptr(), payload.as_ptr(), "the data is a slice of the payload, not a copy");
        assert_eq!(data, vec![3u8; 10_000]);
        // Both decoders refuse the same malformed payloads.
        assert_eq!(decode_bytes::<Header>(bytes::Bytes::from_static(&[1, 2])).unwrap_err(), MsgError::Truncated(2));
        let mut bad = encode(&header, Vec::new());
        *bad.last_mut().unwrap() = 99;
        assert_eq!(decode_bytes::<Header>(bad.into()).unwrap_err(), MsgError::Version { got: 99 });
    }
}
