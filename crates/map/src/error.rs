//! Why a command cannot be applied to the map: one variant per condition a caller (the CLI,
//! a test, an operator script) may need to tell apart.

use shoal_placement::{OsdId, PlacementError};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MapError {
    #[error("pool {0:?} does not exist")]
    UnknownPool(String),
    #[error("pool {0:?} already exists")]
    DuplicatePool(String),
    #[error("invalid pool name {name:?}: {reason}")]
    InvalidPoolName { name: String, reason: &'static str },
    #[error("pool size {size} is larger than the {osds} OSDs in the cluster")]
    SizeTooLarge { size: u32, osds: usize },
    #[error("invalid pool setting: {0}")]
    InvalidPoolSetting(String),
    #[error("{0} does not exist")]
    UnknownOsd(OsdId),
    #[error("{0} already exists")]
    DuplicateOsd(OsdId),
    #[error("invalid entity {entity:?}: {reason}")]
    InvalidEntity { entity: String, reason: &'static str },
    #[error("no key for {0} in the cluster's auth table")]
    UnknownEntity(String),
    #[error("monitor mon.{0} does not exist")]
    UnknownMon(u32),
    #[error("incremental for epoch {got} cannot follow epoch {have}")]
    EpochGap { have: u64, got: u64 },
    #[error("{id} cannot be removed: {reason}")]
    OsdNotRemovable { id: OsdId, reason: String },
    #[error("PG {pg}: {reason}")]
    PgHistory { pg: crate::PgId, reason: String },
    #[error("invalid setting: {0}")]
    InvalidConfig(String),
    #[error("client instance {client:016x} is not blocklisted")]
    NotBlocklisted { client: u64 },
    #[error(
        "the blocklist holds {entries} entries, its most ({max}); remove some with `shoal osd blocklist rm`, or wait \
         for entries to expire (expired ones are dropped as new ones are added)"
    )]
    BlocklistFull { entries: usize, max: usize },
    #[error(transparent)]
    Placement(#[from] PlacementError),
}
