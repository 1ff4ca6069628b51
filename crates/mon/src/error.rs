//! The monitor's library errors.

use std::path::PathBuf;

/// Why a monitor's data directory cannot be created, read or written.
#[derive(Debug, thiserror::Error)]
pub enum MonError {
    #[error("{}: {source}", path.display())]
    Io { path: PathBuf, source: std::io::Error },
    /// A file exists but its contents are not what this monitor wrote (bad checksum in the middle
    /// of the log, undecodable record, entries out of order).
    #[error("{}: corrupt: {reason}", path.display())]
    Corrupt { path: PathBuf, reason: String },
    #[error("{} already holds a monitor (mon.{rank} of cluster {fsid}); refusing to overwrite it", path.display())]
    AlreadyInitialized { path: PathBuf, rank: u32, fsid: String },
    #[error("{} holds no monitor: run mkfs first", path.display())]
    NotInitialized { path: PathBuf },
    /// The directory was written by a build with another on-disk format (see
    /// [`crate::store::MON_STORE_FORMAT`]); nothing in it was changed.
    #[error(
        "{} holds monitor data in store format {found}, but this build reads format {want}: run the Shoal \
         build that created it, or recreate the cluster",
        path.display()
    )]
    Format { path: PathBuf, found: u32, want: u32 },
    #[error("invalid monitor configuration: {0}")]
    Config(String),
}

impl MonError {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> MonError {
        MonError::Io { path: path.into(), source }
    }

    pub(crate) fn corrupt(path: impl Into<PathBuf>, reason: impl Into<String>) -> MonError {
        MonError::Corrupt { path: path.into(), reason: reason.into() }
    }
}
