//! Errors that cross the wire: a code a program can act on and a message a person can read.

use serde::{Deserialize, Serialize};

/// What went wrong on the remote side, by kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ErrorCode {
    /// The object, pool, key or attribute does not exist.
    NotFound,
    /// It already exists (an exclusive create, a duplicate pool).
    Exists,
    /// The request is malformed or a name or value breaks a limit.
    Invalid,
    /// The object would exceed the pool's size limit.
    TooLarge,
    /// The receiver is not the primary of the PG at the sender's epoch, or the sender's map is
    /// older than the receiver's: refresh the map and resend.
    WrongPrimary,
    /// Fewer than `min_size` replicas are acting: the PG refuses writes until recovery.
    Degraded,
    /// The OSD's store is full.
    NoSpace,
    /// A checksum did not match: the stored copy is damaged.
    Corrupt,
    /// The monitor has no leader yet, or is not the leader and could not forward.
    NoQuorum,
    /// A store or device error.
    Io,
    /// A timeout waiting for a peer.
    Timeout,
    /// Anything else (the message says what).
    Other,
    /// A guard of the request ([`crate::osd::ObjOp::AssertXattr`], `AssertOmap`) did not hold:
    /// the object changed since the caller looked; nothing was applied.
    Conflict,
    /// The receiver waits for answers it has just asked other daemons for: the same request,
    /// repeated shortly, goes ahead (an operator's decision on unfound objects; nothing was
    /// changed).
    TryAgain,
    /// The sender's client instance is on the map's blocklist (decision 0092): it was fenced
    /// off, typically because another server took over its image lock. Nothing was applied, and
    /// nothing it sends will be; it must not retry.
    Blocklisted,
}

/// An error reported by a peer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("{message}")]
pub struct RemoteError {
    pub code: ErrorCode,
    pub message: String,
}

impl RemoteError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> RemoteError {
        RemoteError { code, message: message.into() }
    }
}
