//! Block image errors: one variant per condition a caller (the CLI, the NBD server) acts on.

use shoal_client::ClientError;

#[derive(Debug, thiserror::Error)]
pub enum RbdError {
    #[error("image {0:?} does not exist")]
    NoSuchImage(String),
    #[error("image {0:?} already exists")]
    Exists(String),
    /// A snapshot of that name (`IMAGE@SNAP`) is already taken.
    #[error("snapshot {0:?} already exists")]
    SnapExists(String),
    #[error("invalid argument: {0}")]
    Invalid(String),
    #[error("range {offset}+{len_bytes} is past the end of the image ({size_bytes} bytes)")]
    OutOfRange { offset: u64, len_bytes: u64, size_bytes: u64 },
    #[error(
        "image {name:?} is locked by {holder} ({id}); only one writer at a time (`shoal rbd lock break` if it is dead)"
    )]
    Locked { name: String, holder: String, id: String },
    #[error("image {0:?}: this server lost its exclusive lock; writes are refused")]
    Fenced(String),
    #[error(
        "image {name:?}: this server's exclusive lock has not been renewed for {waited_ms} ms (the cluster cannot \
         serve the image's header); the write is refused"
    )]
    LockUnrenewed { name: String, waited_ms: u64 },
    #[error("{0}")]
    Busy(String),
    #[error("{0}")]
    Io(String),
    #[error("image {0:?} changed while being updated; try again")]
    Conflict(String),
    #[error("image {name:?}: damaged metadata: {reason}")]
    Corrupt { name: String, reason: String },
    #[error(transparent)]
    Client(#[from] ClientError),
}

impl RbdError {
    /// The errno an NBD reply (or a block layer) reports for this error.
    pub fn errno(&self) -> u32 {
        const EIO: u32 = 5;
        const EINVAL: u32 = 22;
        const ENOSPC: u32 = 28;
        const EOVERFLOW: u32 = 75;
        match self {
            RbdError::Invalid(_) => EINVAL,
            RbdError::Locked { .. } | RbdError::Fenced(_) => 1, // EPERM
            // Fenced off by the cluster (another server took the lock over): as a lost lock.
            e if e.is_blocklisted() => 1,
            RbdError::OutOfRange { .. } => EOVERFLOW,
            RbdError::Client(ClientError::TooLarge { .. }) => ENOSPC,
            // A full cluster (or a store out of space) refuses the write and changes nothing:
            // the block layer above reports "no space left", not a failed device.
            RbdError::Client(ClientError::Remote(e)) if e.code == shoal_proto::ErrorCode::NoSpace => ENOSPC,
            _ => EIO,
        }
    }

    /// Whether the cluster refused the request because this client instance is fenced off
    /// (decision 0092): another server broke or took over the image lock, and nothing this
    /// instance sends will ever be applied again.
    pub fn is_blocklisted(&self) -> bool {
        matches!(self, RbdError::Client(e) if e.code() == Some(shoal_proto::ErrorCode::Blocklisted))
    }
}
