//! The NBD protocol's numbers (the NBD project's `doc/proto.md`) and its fixed-size frames.

pub const NBDMAGIC: u64 = 0x4e42_444d_4147_4943;
pub const IHAVEOPT: u64 = 0x4948_4156_454f_5054;
pub const OPTION_REPLY_MAGIC: u64 = 0x0003_e889_0455_65a9;
pub const REQUEST_MAGIC: u32 = 0x2560_9513;
pub const SIMPLE_REPLY_MAGIC: u32 = 0x6744_6698;
pub const STRUCTURED_REPLY_MAGIC: u32 = 0x668e_33ef;

// Handshake flags (server) and client flags.
pub const FLAG_FIXED_NEWSTYLE: u16 = 1 << 0;
pub const FLAG_NO_ZEROES: u16 = 1 << 1;
pub const FLAG_C_FIXED_NEWSTYLE: u32 = 1 << 0;
pub const FLAG_C_NO_ZEROES: u32 = 1 << 1;

// Options.
pub const OPT_EXPORT_NAME: u32 = 1;
pub const OPT_ABORT: u32 = 2;
pub const OPT_LIST: u32 = 3;
pub const OPT_STARTTLS: u32 = 5;
pub const OPT_INFO: u32 = 6;
pub const OPT_GO: u32 = 7;
pub const OPT_STRUCTURED_REPLY: u32 = 8;
pub const OPT_LIST_META_CONTEXT: u32 = 9;
pub const OPT_SET_META_CONTEXT: u32 = 10;

// Option replies.
pub const REP_ACK: u32 = 1;
pub const REP_SERVER: u32 = 2;
pub const REP_INFO: u32 = 3;
pub const REP_META_CONTEXT: u32 = 4;
const REP_ERR: u32 = 1 << 31;
pub const REP_ERR_UNSUP: u32 = REP_ERR | 1;
pub const REP_ERR_POLICY: u32 = REP_ERR | 2;
pub const REP_ERR_TLS_REQD: u32 = REP_ERR | 5;
pub const REP_ERR_INVALID: u32 = REP_ERR | 3;
pub const REP_ERR_UNKNOWN: u32 = REP_ERR | 6;
pub const REP_ERR_TOO_BIG: u32 = REP_ERR | 9;

// Info items.
pub const INFO_EXPORT: u16 = 0;
pub const INFO_NAME: u16 = 1;
pub const INFO_DESCRIPTION: u16 = 2;
pub const INFO_BLOCK_SIZE: u16 = 3;

// Transmission flags.
pub const TF_HAS_FLAGS: u16 = 1 << 0;
pub const TF_READ_ONLY: u16 = 1 << 1;
pub const TF_SEND_FLUSH: u16 = 1 << 2;
pub const TF_SEND_FUA: u16 = 1 << 3;
pub const TF_SEND_TRIM: u16 = 1 << 5;
pub const TF_SEND_WRITE_ZEROES: u16 = 1 << 6;
pub const TF_SEND_DF: u16 = 1 << 7;
pub const TF_CAN_MULTI_CONN: u16 = 1 << 8;
pub const TF_SEND_CACHE: u16 = 1 << 10;
pub const TF_SEND_FAST_ZERO: u16 = 1 << 11;

// Command flags.
pub const CMD_FLAG_FUA: u16 = 1 << 0;
pub const CMD_FLAG_NO_HOLE: u16 = 1 << 1;
pub const CMD_FLAG_DF: u16 = 1 << 2;
pub const CMD_FLAG_REQ_ONE: u16 = 1 << 3;
pub const CMD_FLAG_FAST_ZERO: u16 = 1 << 4;

// Commands.
pub const CMD_READ: u16 = 0;
pub const CMD_WRITE: u16 = 1;
pub const CMD_DISC: u16 = 2;
pub const CMD_FLUSH: u16 = 3;
pub const CMD_TRIM: u16 = 4;
pub const CMD_CACHE: u16 = 5;
pub const CMD_WRITE_ZEROES: u16 = 6;
pub const CMD_BLOCK_STATUS: u16 = 7;

// Structured reply chunks.
pub const REPLY_FLAG_DONE: u16 = 1 << 0;
pub const REPLY_TYPE_NONE: u16 = 0;
pub const REPLY_TYPE_OFFSET_DATA: u16 = 1;
pub const REPLY_TYPE_BLOCK_STATUS: u16 = 5;
pub const REPLY_TYPE_ERROR: u16 = (1 << 15) | 1;

// base:allocation status flags.
pub const STATE_HOLE: u32 = 1 << 0;
pub const STATE_ZERO: u32 = 1 << 1;

/// The one metadata context served, and its id on every connection.
pub const BASE_ALLOCATION: &str = "base:allocation";
pub const BASE_ALLOCATION_ID: u32 = 1;

// Errors (Linux errno values, as the protocol uses them).
pub const EPERM: u32 = 1;
pub const EIO: u32 = 5;
pub const EINVAL: u32 = 22;
pub const ENOSPC: u32 = 28;
pub const EOVERFLOW: u32 = 75;
pub const ENOTSUP: u32 = 95;
pub const ESHUTDOWN: u32 = 108;

/// A request header (28 bytes on the wire).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request {
    pub flags: u16,
    pub kind: u16,
    pub cookie: u64,
    pub offset: u64,
    pub length: u32,
}

pub const REQUEST_BYTES: usize = 28;

impl Request {
    /// Parses a request header; `None` if its magic is wrong (the connection is then unusable).
    pub fn parse(b: &[u8; REQUEST_BYTES]) -> Option<Request> {
        let magic = u32::from_be_bytes(b[0..4].try_into().ok()?);
        if magic != REQUEST_MAGIC {
            return None;
        }
        Some(Request {
            flags: u16::from_be_bytes(b[4..6].try_into().ok()?),
            kind: u16::from_be_bytes(b[6..8].try_into().ok()?),
            cookie: u64::from_be_bytes(b[8..16].try_into().ok()?),
            offset: u64::from_be_bytes(b[16..24].try_into().ok()?),
            length: u32::from_be_bytes(b[24..28].try_into().ok()?),
        })
    }

    pub fn encode(&self) -> [u8; REQUEST_BYTES] {
        let mut b = [0u8; REQUEST_BYTES];
        b[0..4].copy_from_slice(&REQUEST_MAGIC.to_be_bytes());
        b[4..6].copy_from_slice(&self.flags.to_be_bytes());
        b[6..8].copy_from_slice(&self.kind.to_be_bytes());
        b[8..16].copy_from_slice(&self.cookie.to_be_bytes());
        b[16..24].copy_from_slice(&self.offset.to_be_bytes());
        b[24..28].copy_from_slice(&self.length.to_be_bytes());
        b
    }
}

/// A simple reply header, followed by `data` (a read's bytes, or nothing).
pub fn simple_reply(cookie: u64, error: u32, data: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(16 + data.len());
    out.extend_from_slice(&SIMPLE_REPLY_MAGIC.to_be_bytes());
    out.extend_from_slice(&error.to_be_bytes());
    out.extend_from_slice(&cookie.to_be_bytes());
    out.extend_from_slice(data);
    out
}

/// Appends one structured reply chunk to `out`.
pub fn chunk(out: &mut Vec<u8>, cookie: u64, flags: u16, kind: u16, payload: &[&[u8]]) {
    let len: usize = payload.iter().map(|p| p.len()).sum();
    chunk_header(out, cookie, flags, kind, len);
    for p in payload {
        out.extend_from_slice(p);
    }
}

/// Appends the header of a structured reply chunk whose payload, `payload_bytes` long, the caller
/// sends right after it.
pub fn chunk_header(out: &mut Vec<u8>, cookie: u64, flags: u16, kind: u16, payload_bytes: usize) {
    assert!(payload_bytes <= u32::MAX as usize, "a chunk payload of {payload_bytes} bytes");
    out.extend_from_slice(&STRUCTURED_REPLY_MAGIC.to_be_bytes());
    out.extend_from_slice(&flags.to_be_bytes());
    out.extend_from_slice(&kind.to_be_bytes());
    out.extend_from_slice(&cookie.to_be_bytes());
    out.extend_from_slice(&(payload_bytes as u32).to_be_bytes());
}

/// A structured error chunk (the final one) with a human-readable message.
pub fn error_chunk(cookie: u64, error: u32, message: &str) -> Vec<u8> {
    let msg = &message.as_bytes()[..message.len().min(4096)];
    let mut out = Vec::new();
    chunk(
        &mut out,
        cookie,
        REPLY_FLAG_DONE,
        REPLY_TYPE_ERROR,
        &[&error.to_be_bytes(), &(msg.len() as u16).to_be_bytes(), msg],
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_round_trips_and_a_bad_magic_is_refused() {
        let r = Request { flags: CMD_FLAG_FUA, kind: CMD_WRITE, cookie: 7, offset: 4096, length: 512 };
        assert_eq!(Request::parse(&r.encode()), Some(r));
        let mut bad = r.encode();
        bad[0] ^= 1;
        assert_eq!(Request::parse(&bad), None);
    }

    #[test]
    fn the_magics_are_the_protocols() {
        assert_eq!(&NBDMAGIC.to_be_bytes(), b"NBDMAGIC");
        assert_eq!(&IHAVEOPT.to_be_bytes(), b"IHAVEOPT");
    }
}
