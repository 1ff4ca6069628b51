//! Frames: a fixed header followed by a payload, both checksummed.
//!
//! ```text
//! offset  size  field
//!      0     4  magic "SHF1"
//!      4     2  message type (meaning defined by the layer above)
//!      6     2  flags (reserved, must be zero)
//!      8     8  request id (pairs a reply with its request; pipelined requests differ)
//!     16     4  payload length in bytes
//!     20     4  crc32c of the payload
//!     24     4  crc32c of bytes 0..24 of the header
//! ```
//!
//! All integers are little-endian. The header checksum is verified before the length is
//! trusted, so a corrupted length can never make a peer wait for, or allocate, a huge payload;
//! the length is also checked against a limit before any payload byte is buffered. A frame that
//! fails any check is an error for the whole connection: after it, the byte stream can no longer
//! be trusted to be aligned on frame boundaries, so the caller closes that connection (and only
//! that one).

use bytes::Bytes;
use shoal_util::checksum::crc32c_append;
use shoal_util::crc32c;

/// Bytes of a frame header.
pub const HEADER_BYTES: usize = 28;
/// Default and largest payload a decoder accepts: a 64 MiB object write plus room for its
/// metadata.
pub const MAX_PAYLOAD_BYTES: u32 = (64 << 20) + (64 << 10);
/// The first four bytes of every frame. A reader may compare them as soon as they arrive, to
/// refuse a peer that is not speaking this protocol without waiting for a whole header.
pub const MAGIC: &[u8; 4] = b"SHF1";

/// One message on the wire.
///
/// Its payload on the wire is `data` followed by `payload`. A sender with bulk bytes it already
/// holds in shared memory (a store read, a client's write buffer) puts them in `data`, so the
/// frame refers to them instead of copying them; the writer sends both parts with one vectored
/// write. A frame read from a socket has its whole payload in one of the two: in `payload`, or,
/// when a server read a large payload into block-aligned memory (so that a store writing it with
/// direct I/O needs no copy), in `data` with `payload` empty. Code reading a received frame takes
/// the payload whole with [`Frame::into_bytes`] (never a copy for a received frame) or
/// [`Frame::into_payload`] (a copy when the payload is in `data`).
#[derive(Clone, Debug)]
pub struct Frame {
    pub msg_type: u16,
    pub request_id: u64,
    /// The crc32c of the payload's first `n` bytes, `(n, crc)`, when it is already known: a
    /// receiver that verified a payload records its bulk data's checksum here, and a frame that
    /// forwards those bytes passes it on, so that its header checksums only the bytes after
    /// them. `n` never exceeds the bulk bytes' length (`data`, then `data_more`); a wrong value
    /// makes the peer refuse the frame.
    pub prefix_crc: Option<(usize, u32)>,
    /// The crc32c of each whole 4 KiB block of the payload, block 0 at its first byte, when the
    /// reader computed them while the payload arrived (a large received payload, decision 0094);
    /// the frame's checksum was checked as these joined, so they are the received bytes'.
    /// Ignored when sending.
    pub block_crcs: Option<shoal_util::BlockCrcs>,
    /// Leading bulk bytes of the payload, sent by reference; in a received frame, the whole
    /// payload when it was read into aligned memory, else empty.
    pub data: Bytes,
    /// Further bulk bytes sent by reference after `data`, in order: bulk data that exists in
    /// pieces (a request body as it arrived) goes out without being gathered into one buffer.
    /// Empty in received frames.
    pub data_more: Vec<Bytes>,
    /// The payload after the bulk parts (in a received frame, all of it unless `data` holds it).
    pub payload: Vec<u8>,
}

/// Why a byte stream is not a valid sequence of frames.
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
pub enum FrameError {
    #[error("not a Shoal frame (bad magic {0:02x?})")]
    BadMagic([u8; 4]),
    #[error("frame header checksum mismatch")]
    HeaderChecksum,
    #[error("frame flags {0:#06x} are not supported")]
    UnsupportedFlags(u16),
    #[error("frame payload of {len} bytes exceeds the limit of {max} bytes")]
    TooLarge { len: u32, max: u32 },
    #[error("frame payload checksum mismatch (request {request_id})")]
    PayloadChecksum { request_id: u64 },
}

/// Frames are equal when they carry the same message: a known checksum is a cache, not content.
impl PartialEq for Frame {
    fn eq(&self, other: &Self) -> bool {
        (self.msg_type, self.request_id, &self.data, &self.data_more, &self.payload)
            == (other.msg_type, other.request_id, &other.data, &other.data_more, &other.payload)
    }
}
impl Eq for Frame {}

impl Frame {
    #[must_use]
    pub fn new(msg_type: u16, request_id: u64, payload: Vec<u8>) -> Self {
        Self {
            msg_type,
            request_id,
            prefix_crc: None,
            block_crcs: None,
            data: Bytes::new(),
            data_more: Vec::new(),
            payload,
        }
    }

    /// A frame whose payload is `data` (sent by reference, never copied) followed by `payload`.
    #[must_use]
    pub fn with_data(msg_type: u16, request_id: u64, data: Bytes, payload: Vec<u8>) -> Self {
        Self { msg_type, request_id, prefix_crc: None, block_crcs: None, data, data_more: Vec::new(), payload }
    }

    /// A frame whose payload is the bulk `parts` in order (each sent by reference, never copied
    /// or gathered) followed by `payload`.
    #[must_use]
    pub fn with_data_parts(msg_type: u16, request_id: u64, parts: Vec<Bytes>, payload: Vec<u8>) -> Self {
        let mut parts = parts.into_iter();
        let data = parts.next().unwrap_or_default();
        Self { msg_type, request_id, prefix_crc: None, block_crcs: None, data, data_more: parts.collect(), payload }
    }

    /// [`Frame::with_data`] for `data` whose crc32c is already known (`data_crc`, for example
    /// from [`Frame::prefix_crc`] of the frame it arrived in): the header then reads only
    /// `payload`.
    ///
    /// In debug builds [`Frame::header`] checks `data_crc` against `data` (a wrong one would make
    /// the peer refuse the frame).
    #[must_use]
    pub fn with_checked_data(
        msg_type: u16,
        request_id: u64,
        data: Bytes,
        data_crc: Option<u32>,
        payload: Vec<u8>,
    ) -> Self {
        Self {
            msg_type,
            request_id,
            prefix_crc: data_crc.map(|c| (data.len(), c)),
            block_crcs: None,
            data,
            data_more: Vec::new(),
            payload,
        }
    }

    /// A frame whose data is `parts` (in order) with the crc32c of all of them known
    /// (`data_crc`), as [`Frame::with_checked_data`] for one part.
    #[must_use]
    pub fn with_checked_parts(
        msg_type: u16,
        request_id: u64,
        parts: Vec<Bytes>,
        data_crc: Option<u32>,
        payload: Vec<u8>,
    ) -> Self {
        let data_len = parts.iter().map(Bytes::len).sum();
        let mut frame = Self::with_data_parts(msg_type, request_id, parts, payload);
        frame.prefix_crc = data_crc.map(|c| (data_len, c));
        frame
    }

    /// Payload bytes on the wire: the bulk parts and `payload` together.
    #[must_use]
    pub fn payload_len(&self) -> usize {
        self.data.len() + self.data_more.iter().map(Bytes::len).sum::<usize>() + self.payload.len()
    }

    /// The payload's parts in order, as they go on the wire (empty ones included).
    pub fn parts(&self) -> impl Iterator<Item = &[u8]> {
        std::iter::once(&self.data[..])
            .chain(self.data_more.iter().map(|b| &b[..]))
            .chain(std::iter::once(&self.payload[..]))
    }

    /// The whole payload as one buffer. Free when `data` is empty; a payload held in `data` is
    /// copied out (see [`Frame::into_bytes`], which never copies a received frame).
    #[must_use]
    pub fn into_payload(self) -> Vec<u8> {
        if self.data_more.is_empty() {
            if self.data.is_empty() {
                return self.payload;
            }
            if self.payload.is_empty() {
                return Vec::from(self.data);
            }
        }
        let mut whole = Vec::with_capacity(self.payload_len());
        for part in self.parts() {
            whole.extend_from_slice(part);
        }
        whole
    }

    /// The whole payload as shared bytes, without a copy when either part is empty (every
    /// received frame); a frame with both parts is joined by one copy. Aligned received data stays
    /// where it was read, so its alignment is kept.
    #[must_use]
    pub fn into_bytes(self) -> Bytes {
        if self.data_more.is_empty() {
            if self.payload.is_empty() {
                return self.data;
            }
            if self.data.is_empty() {
                return Bytes::from(self.payload);
            }
        }
        Bytes::from(self.into_payload())
    }

    /// The frame's 28-byte header (checksum over `data` then `payload`).
    ///
    /// # Panics
    /// Panics if the payload is longer than `u32::MAX` bytes; senders split data long before.
    #[must_use]
    pub fn header(&self) -> [u8; HEADER_BYTES] {
        let data_len = self.payload_len() - self.payload.len();
        match self.prefix_crc {
            Some((n, crc)) if n <= data_len => {
                debug_assert_eq!(
                    self.parts().fold((0u32, n), |(c, left), p| {
                        let k = left.min(p.len());
                        (crc32c_append(c, &p[..k]), left - k)
                    }),
                    (crc, 0),
                    "a known prefix checksum that does not match"
                );
                // The bytes after the first `n`, across the data's parts, then the payload.
                let mut skip = n;
                let rest = self.parts().map(move |p| {
                    let k = skip.min(p.len());
                    skip -= k;
                    &p[k..]
                });
                header_with(self.msg_type, self.request_id, crc, rest, self.payload_len())
            }
            _ => header_with(self.msg_type, self.request_id, 0, self.parts(), self.payload_len()),
        }
    }

    /// The frame's bytes: its header followed by the payload.
    ///
    /// # Panics
    /// Panics if the payload is longer than `u32::MAX` bytes; senders split data long before.
    #[must_use]
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(HEADER_BYTES + self.payload_len());
        out.extend_from_slice(&self.header());
        for part in self.parts() {
            out.extend_from_slice(part);
        }
        out
    }
}

/// The 28-byte header of the frame `(msg_type, request_id, payload)`, without the payload.
///
/// A sender writes this header and then the payload itself (for example with one vectored
/// write), so a large payload is never copied into a new buffer. The bytes are exactly the first
/// [`HEADER_BYTES`] bytes of [`Frame::encode`].
///
/// # Panics
/// Panics if the payload is longer than `u32::MAX` bytes; senders split data long before.
#[must_use]
pub fn encode_header(msg_type: u16, request_id: u64, payload: &[u8]) -> [u8; HEADER_BYTES] {
    header_with(msg_type, request_id, 0, std::iter::once(payload), payload.len())
}

/// The header of a frame of `total` payload bytes whose leading bytes have the crc32c `prefix`
/// (0 for none) and are followed by `rest`.
fn header_with<'a>(
    msg_type: u16,
    request_id: u64,
    prefix: u32,
    rest: impl Iterator<Item = &'a [u8]>,
    total: usize,
) -> [u8; HEADER_BYTES] {
    let len = u32::try_from(total).unwrap_or_else(|_| panic!("frame payload over 4 GiB"));
    let crc = rest.fold(prefix, crc32c_append);
    let mut h = [0u8; HEADER_BYTES];
    h[..4].copy_from_slice(MAGIC);
    h[4..6].copy_from_slice(&msg_type.to_le_bytes());
    // Bytes 6..8 are the flags, which stay zero.
    h[8..16].copy_from_slice(&request_id.to_le_bytes());
    h[16..20].copy_from_slice(&len.to_le_bytes());
    h[20..24].copy_from_slice(&crc.to_le_bytes());
    let hcrc = crc32c(&h[..24]);
    h[24..28].copy_from_slice(&hcrc.to_le_bytes());
    h
}

/// A frame header that passed every check that can be made without the payload.
///
/// Readers that read the header and then the payload straight into its own buffer use
/// [`decode_header`], allocate `len` bytes, read them, and call [`FrameHeader::check_payload`]
/// (or [`FrameHeader::check_crc`] with a checksum they kept while reading).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameHeader {
    pub msg_type: u16,
    pub request_id: u64,
    /// Payload length in bytes, already checked against the decoder's limit.
    pub len: u32,
    pub payload_crc: u32,
}

impl FrameHeader {
    /// Checks a received payload against the header's length and checksum.
    pub fn check_payload(&self, payload: &[u8]) -> Result<(), FrameError> {
        self.check_crc(payload.len(), crc32c(payload))
    }

    /// Checks a received payload of `len_bytes` by its crc32c `crc`, computed by a reader that
    /// checksummed the bytes as they arrived.
    pub fn check_crc(&self, len_bytes: usize, crc: u32) -> Result<(), FrameError> {
        if len_bytes != self.len as usize || crc != self.payload_crc {
            return Err(FrameError::PayloadChecksum { request_id: self.request_id });
        }
        Ok(())
    }
}

/// Parses and checks a header (magic, header checksum, flags, and `len <= max_payload`).
/// The length is only trusted after the header checksum matched.
pub fn decode_header(b: &[u8; HEADER_BYTES], max_payload: u32) -> Result<FrameHeader, FrameError> {
    parse_header(b, max_payload)
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn parse_header(b: &[u8], max_payload: u32) -> Result<FrameHeader, FrameError> {
    debug_assert!(b.len() >= HEADER_BYTES);
    if &b[..4] != MAGIC {
        return Err(FrameError::BadMagic([b[0], b[1], b[2], b[3]]));
    }
    if u32_at(b, 24) != crc32c(&b[..24]) {
        return Err(FrameError::HeaderChecksum);
    }
    let flags = u16::from_le_bytes([b[6], b[7]]);
    if flags != 0 {
        return Err(FrameError::UnsupportedFlags(flags));
    }
    let len = u32_at(b, 16);
    if len > max_payload {
        return Err(FrameError::TooLarge { len, max: max_payload });
    }
    let mut id = [0u8; 8];
    id.copy_from_slice(&b[8..16]);
    Ok(FrameHeader {
        msg_type: u16::from_le_bytes([b[4], b[5]]),
        request_id: u64::from_le_bytes(id),
        len,
        payload_crc: u32_at(b, 20),
    })
}

/// Turns a byte stream into frames. Feed it whatever arrived with [`FrameDecoder::push`] and
/// take complete frames with [`FrameDecoder::next_frame`]. It buffers at most one header plus
/// one payload of at most `max_payload` bytes beyond what the caller has not yet taken.
pub struct FrameDecoder {
    buf: Vec<u8>,
    max_payload: u32,
    failed: Option<FrameError>,
}

impl Default for FrameDecoder {
    fn default() -> Self {
        Self::new(MAX_PAYLOAD_BYTES)
    }
}

impl FrameDecoder {
    /// A decoder refusing payloads over `max_payload` bytes.
    #[must_use]
    pub fn new(max_payload: u32) -> Self {
        Self { buf: Vec::new(), max_payload, failed: None }
    }

    /// Appends received bytes.
    pub fn push(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// Bytes buffered and not yet returned as frames.
    #[must_use]
    pub fn buffered_bytes(&self) -> usize {
        self.buf.len()
    }

    /// The next complete frame, `Ok(None)` if more bytes are needed, or the error that makes the
    /// stream unusable. After an error every later call returns the same error.
    pub fn next_frame(&mut self) -> Result<Option<Frame>, FrameError> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        // Refuse a peer that is not speaking this protocol as soon as its first bytes arrive,
        // instead of waiting for a whole header that may never come.
        if self.buf.len() >= MAGIC.len() && &self.buf[..MAGIC.len()] != MAGIC {
            let m = [self.buf[0], self.buf[1], self.buf[2], self.buf[3]];
            return Err(self.fail(FrameError::BadMagic(m)));
        }
        if self.buf.len() < HEADER_BYTES {
            return Ok(None);
        }
        let header = match parse_header(&self.buf, self.max_payload) {
            Ok(h) => h,
            Err(e) => return Err(self.fail(e)),
        };
        let total = HEADER_BYTES + header.len as usize;
        if self.buf.len() < total {
            return Ok(None);
        }
        let payload = self.buf[HEADER_BYTES..total].to_vec();
        if crc32c(&payload) != header.payload_crc {
            return Err(self.fail(FrameError::PayloadChecksum { request_id: header.request_id }));
        }
        self.buf.drain(..total);
        Ok(Some(Frame::new(header.msg_type, header.request_id, payload)))
    }

    fn fail(&mut self, e: FrameError) -> FrameError {
        self.buf = Vec::new();
        self.failed = Some(e.clone());
        e
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn header_then_payload_is_encode(t in any::<u16>(), id in any::<u64>(), payload in prop::collection::vec(any::<u8>(), 0..3000)) {
            let frame = Frame::new(t, id, payload);
            let mut split = encode_header(t, id, &frame.payload).to_vec();
            split.extend_from_slice(&frame.payload);
            prop_assert_eq!(&split, &frame.encode());

            // And the split reader's path accepts exactly what the sender wrote.
            let h = decode_header(&encode_header(t, id, &frame.payload), MAX_PAYLOAD_BYTES).unwrap();
            prop_assert_eq!((h.msg_type, h.request_id, h.len as usize), (t, id, frame.payload.len()));
            prop_assert!(h.check_payload(&frame.payload).is_ok());
        }

        #[test]
        fn a_frame_with_data_is_the_frame_of_its_joined_payload(
            t in any::<u16>(),
            id in any::<u64>(),
            payload in prop::collection::vec(any::<u8>(), 0..3000),
            cut in any::<prop::sample::Index>(),
        ) {
            // However the payload is split between shared data and the owned tail, the bytes on
            // the wire are the same, and a decoder gets the whole payload back in one buffer.
            let at = cut.index(payload.len() + 1);
            let joined = Frame::new(t, id, payload.clone());
            let split = Frame::with_data(t, id, Bytes::copy_from_slice(&payload[..at]), payload[at..].to_vec());
            prop_assert_eq!(split.payload_len(), payload.len());
            prop_assert_eq!(split.header(), joined.header());
            prop_assert_eq!(split.encode(), joined.encode());
            let mut d = FrameDecoder::default();
            d.push(&split.encode());
            prop_assert_eq!(d.next_frame().unwrap(), Some(joined.clone()));
            prop_assert_eq!(&split.clone().into_bytes()[..], &payload[..]);
            prop_assert_eq!(split.into_payload(), payload.clone());
            // Bulk data in several parts: the same bytes on the wire again.
            let third = at / 2;
            let parts = vec![
                Bytes::copy_from_slice(&payload[..third]),
                Bytes::copy_from_slice(&payload[third..at]),
                Bytes::new(),
            ];
            let pieces = Frame::with_data_parts(t, id, parts, payload[at..].to_vec());
            prop_assert_eq!(pieces.payload_len(), payload.len());
            prop_assert_eq!(pieces.header(), joined.header());
            prop_assert_eq!(pieces.encode(), joined.encode());
            prop_assert_eq!(&pieces.clone().into_bytes()[..], &payload[..]);
            // The same parts with their checksum known: the header starts from it and checksums
            // only the tail, and comes out the same.
            let parts = pieces.parts().take(3).map(Bytes::copy_from_slice).collect::<Vec<_>>();
            let checked = Frame::with_checked_parts(t, id, parts, Some(shoal_util::crc32c(&payload[..at])), payload[at..].to_vec());
            prop_assert_eq!(checked.prefix_crc, Some((at, shoal_util::crc32c(&payload[..at]))));
            prop_assert_eq!(checked.header(), joined.header());
            // A received frame whose payload was read into `data` gives the same bytes either way.
            let received = Frame::with_data(t, id, Bytes::from(payload.clone()), Vec::new());
            prop_assert_eq!(received.header(), joined.header());
            prop_assert_eq!(&received.clone().into_bytes()[..], &payload[..]);
            prop_assert_eq!(received.into_payload(), payload);
        }
    }

    #[test]
    fn split_reader_refuses_a_corrupt_payload_or_oversized_length() {
        let h = decode_header(&encode_header(16, 7, b"hello"), MAX_PAYLOAD_BYTES).unwrap();
        assert_eq!(h.check_payload(b"hellp"), Err(FrameError::PayloadChecksum { request_id: 7 }));
        assert!(h.check_payload(b"hell").is_err());
        assert_eq!(decode_header(&encode_header(16, 7, b"hello"), 4), Err(FrameError::TooLarge { len: 5, max: 4 }));
    }
}
