//! The messenger's one error type.

use std::path::PathBuf;

use shoal_proto::FrameError;

/// Why a messenger operation failed.
#[derive(Debug, thiserror::Error)]
pub enum NetError {
    /// A socket operation failed (connect refused, reset, ...).
    #[error("network I/O: {0}")]
    Io(#[from] std::io::Error),
    /// Connecting (including the handshake) did not finish in time.
    #[error("timed out")]
    Timeout,
    /// The connection is gone: closed by either side, lost, or shut down after a protocol error.
    /// Calls in flight when it closed fail with this.
    #[error("connection closed")]
    Closed,
    /// The server refused the handshake; `reason` is the server's own words, for example
    /// "unknown entity client.x" or "bad key for client.x".
    #[error("authentication refused: {reason}")]
    AuthRefused { reason: String },
    /// The server could not prove it knows this client's key (or answered the handshake with
    /// something else than the protocol allows).
    #[error("server failed authentication: {reason}")]
    AuthFailed { reason: String },
    /// The peer sent bytes that are not a valid frame.
    #[error("malformed frame: {0}")]
    Frame(#[from] FrameError),
    /// The peer sent valid frames that break the messenger's protocol (a reply to a request that
    /// was never sent, a reserved message type, ...).
    #[error("protocol violation: {reason}")]
    Protocol { reason: String },
    /// The server answered this call with an error frame ([`crate::MSG_ERROR`]); `reason` is
    /// its text. The connection stays usable.
    #[error("remote error: {reason}")]
    Remote { reason: String },
    /// A key is not 64 hexadecimal digits.
    #[error("bad key: {reason}")]
    BadKey { reason: String },
    /// A keyring file cannot be read, parsed or written. `line` is 1-based when the problem is
    /// on one line.
    #[error("keyring {}{}: {reason}", path.display(), line.map(|l| format!(" line {l}")).unwrap_or_default())]
    BadKeyring { path: PathBuf, line: Option<usize>, reason: String },
}
