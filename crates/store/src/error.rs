//! Errors of the object store, one variant per condition a caller may need to tell apart.

use std::path::PathBuf;

/// Result type of every store call.
pub type Result<T> = std::result::Result<T, StoreError>;

/// Everything that can go wrong in the store. Each message names the thing it is about.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("{path}: no such file or directory")]
    PathNotFound { path: PathBuf },
    #[error("{path}: not a Shoal store ({reason})")]
    NotAStore { path: PathBuf, reason: String },
    #[error("{path}: a store already exists here; pass --force to overwrite it")]
    AlreadyExists { path: PathBuf },
    #[error("{path}: store is in use by another process (it is mounted elsewhere)")]
    Busy { path: PathBuf },
    #[error("{path}: device too small: {size_bytes} bytes, at least {min_bytes} needed")]
    DeviceTooSmall { path: PathBuf, size_bytes: u64, min_bytes: u64 },
    #[error("unknown backend {0:?} (expected block, posix or mem)")]
    UnknownBackend(String),
    #[error("invalid {what} {name:?}: {reason}")]
    InvalidName { what: &'static str, name: String, reason: &'static str },
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    #[error("collection {0:?} does not exist")]
    NoSuchCollection(String),
    #[error("collection {0:?} already exists")]
    CollectionExists(String),
    #[error("collection {0:?} is not empty")]
    CollectionNotEmpty(String),
    #[error("object {coll}/{obj} does not exist")]
    NoSuchObject { coll: String, obj: String },
    #[error("read of {coll}/{obj} at offset {offset} is past its end ({size_bytes} bytes)")]
    ReadPastEnd { coll: String, obj: String, offset: u64, size_bytes: u64 },
    #[error("object {coll}/{obj} would exceed the maximum object size of {max_bytes} bytes")]
    ObjectTooLarge { coll: String, obj: String, max_bytes: u64 },
    #[error("no space left on the store: {needed_bytes} bytes needed, {free_bytes} free")]
    NoSpace { needed_bytes: u64, free_bytes: u64 },
    #[error(
        "checksum mismatch reading {coll}/{obj} at object offset {offset} \
         (device offset {device_offset}): stored data is corrupt"
    )]
    Checksum { coll: String, obj: String, offset: u64, device_offset: u64 },
    /// The device failed to read an object's data (a medium error, EIO): that copy cannot be
    /// read, just as a copy that fails its checksum; other copies may be good.
    #[error("medium error reading {coll}/{obj} at device offset {device_offset}: {source}")]
    Unreadable {
        coll: String,
        obj: String,
        device_offset: u64,
        #[source]
        source: std::io::Error,
    },
    #[error("store metadata is corrupt: {0}")]
    Corrupt(String),
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
    #[error("metadata store: {0}")]
    Kv(String),
    #[error("the store stopped accepting writes after a failure ({0}); remount it to recover")]
    Failed(String),
}

impl StoreError {
    /// Wraps an I/O error with what was being done.
    pub fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        Self::Io { context: context.into(), source }
    }

    /// The POSIX errno that best describes this error, for the C API.
    #[must_use]
    pub fn errno(&self) -> i32 {
        match self {
            Self::PathNotFound { .. } | Self::NoSuchCollection(_) | Self::NoSuchObject { .. } => 2, // ENOENT
            Self::NotAStore { .. } | Self::Corrupt(_) => 117,                                       // EUCLEAN
            Self::AlreadyExists { .. } | Self::CollectionExists(_) => 17,                           // EEXIST
            Self::Busy { .. } => 16,                                                                // EBUSY
            Self::DeviceTooSmall { .. } | Self::NoSpace { .. } => 28,                               // ENOSPC
            Self::UnknownBackend(_) | Self::InvalidArgument(_) | Self::ReadPastEnd { .. } => 22,    // EINVAL
            Self::InvalidName { reason, .. } if *reason == NAME_TOO_LONG => 36,                     // ENAMETOOLONG
            Self::InvalidName { .. } => 22,
            Self::CollectionNotEmpty(_) => 39, // ENOTEMPTY
            Self::ObjectTooLarge { .. } => 27, // EFBIG
            Self::Checksum { .. } => 74,       // EBADMSG
            Self::Io { source, .. } | Self::Unreadable { source, .. } => source.raw_os_error().unwrap_or(5),
            Self::Kv(_) | Self::Failed(_) => 5, // EIO
        }
    }
}

/// The reason text used for names over their length limit (also maps to `ENAMETOOLONG`).
pub const NAME_TOO_LONG: &str = "too long";

impl From<fjall::Error> for StoreError {
    fn from(e: fjall::Error) -> Self {
        Self::Kv(e.to_string())
    }
}
