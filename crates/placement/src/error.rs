//! Errors of placement, one variant per condition a caller may need to tell apart.

use crate::map::{BucketKind, OsdId};
use crate::pg::PgId;

/// Everything that can go wrong when building a map or placing a PG.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlacementError {
    /// A pool's `pg_num` must be in `1..=max`.
    #[error("pg_num must be between 1 and {max}, got {got}")]
    InvalidPgNum { got: u32, max: u32 },
    /// A bucket name that does not exist in the map.
    #[error("no bucket named {0:?}")]
    UnknownBucket(String),
    /// `add_osd` named a host that does not exist.
    #[error("no host named {0:?}")]
    UnknownHost(String),
    /// The named bucket exists but is not a host, so it cannot hold OSDs.
    #[error("bucket {0:?} is not a host; OSDs live in hosts")]
    NotAHost(String),
    /// Bucket names are unique in a map.
    #[error("a bucket named {0:?} already exists")]
    DuplicateBucket(String),
    /// A bucket of kind `child` cannot sit under a bucket of kind `parent` (a root sits at the
    /// top, racks under the root, hosts under the root or a rack).
    #[error("a {child:?} bucket cannot be placed under a {parent:?} bucket")]
    InvalidNesting { child: BucketKind, parent: BucketKind },
    /// OSD ids are unique in a map.
    #[error("{0} already exists")]
    DuplicateOsd(OsdId),
    /// An OSD id that is not in the map.
    #[error("{0} is not in the map")]
    UnknownOsd(OsdId),
    /// The requested failure domain kind has no bucket in the map, so replicas could not be
    /// separated as asked.
    #[error("the map has no {0:?} bucket to use as a failure domain")]
    NoFailureDomain(BucketKind),
    /// No OSD with a positive weight passed `is_usable`: the PG has nowhere to go.
    #[error("no usable OSD for PG {0}")]
    NoUsableOsd(PgId),
    /// A parameter out of its documented range (the message says which).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// A serialized map broke one of the map's invariants.
    #[error("invalid placement map: {0}")]
    InvalidMap(String),
}
