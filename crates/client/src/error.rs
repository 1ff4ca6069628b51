//! The client's errors: one variant per condition a caller may act on.

use std::path::PathBuf;

use shoal_proto::{ErrorCode, RemoteError};

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("config {}: {reason}", path.display())]
    Config { path: PathBuf, reason: String },
    #[error(transparent)]
    Net(#[from] shoal_net::NetError),
    /// The cluster answered with an error (the code says which kind).
    #[error("{0}")]
    Remote(RemoteError),
    #[error("no monitor reachable at {addrs}: {last}")]
    NoMonitor { addrs: String, last: String },
    #[error("pool {0:?} does not exist")]
    UnknownPool(String),
    #[error("invalid object name {name:?}: {reason}")]
    InvalidName { name: String, reason: &'static str },
    #[error("object of {size_bytes} bytes exceeds the pool's limit of {max_bytes} bytes")]
    TooLarge { size_bytes: u64, max_bytes: u64 },
    #[error("PG {pg} of pool {pool} has no acting OSD")]
    NoActing { pool: String, pg: String },
    #[error("operation timed out after {0} ms")]
    Timeout(u64),
    /// A request given an expiry was not answered before it: it was not applied and never
    /// will be, or was applied before the expiry and its answer was lost.
    #[error("the request expired before the cluster answered it: it never takes effect after its expiry")]
    Expired,
    /// The request's operations (their keys, values and names) do not fit one message.
    #[error("request of {header_bytes} bytes of operations exceeds the limit of {max_bytes} bytes")]
    RequestTooLarge { header_bytes: usize, max_bytes: usize },
    /// The request's data and operations together do not fit one message.
    #[error("request of {request_bytes} bytes (data and operations) exceeds the {max_bytes} bytes one message carries")]
    MessageTooLarge { request_bytes: u64, max_bytes: u64 },
    #[error("malformed reply: {0}")]
    BadReply(String),
}

impl ClientError {
    /// The remote error code, if the cluster reported one.
    pub fn code(&self) -> Option<ErrorCode> {
        match self {
            ClientError::Remote(e) => Some(e.code),
            ClientError::UnknownPool(_) => Some(ErrorCode::NotFound),
            _ => None,
        }
    }

    /// Whether the object (or pool) does not exist.
    pub fn is_not_found(&self) -> bool {
        self.code() == Some(ErrorCode::NotFound)
    }
}

impl From<shoal_proto::MsgError> for ClientError {
    fn from(e: shoal_proto::MsgError) -> Self {
        ClientError::BadReply(e.to_string())
    }
}
