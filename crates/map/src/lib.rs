//! The cluster map: the authoritative description of a Shoal cluster that the monitors keep
//! and every daemon and client follows.
//!
//! The map is pure data plus a pure transition function, with no I/O: [`ClusterMap::prepare`]
//! validates a [`Command`] against the current map and turns it into a [`Change`] (every value
//! resolved, for example the id of a new pool), and [`ClusterMap::apply`] applies a change and
//! bumps the epoch. The monitor replicates changes (not commands) through Raft, so every monitor
//! and every subscriber that applies the same changes in order holds a bit-identical map; an
//! [`Incremental`] is one such change with the epoch it produces.
//!
//! Placement of an object ([`ClusterMap::locate`]) is computed from the map alone, which is how
//! clients reach OSDs without asking anyone.

mod cluster;
mod command;
pub mod config;
mod error;

pub use cluster::{
    BACKFILLFULL_PERMILLE, ClusterMap, DEFAULT_MAX_OBJECT_BYTES, FULL_CLEAR_PERMILLE, FULL_FAILSAFE_PERMILLE,
    FULL_PERMILLE, Locator, MonInfo, NEARFULL_PERMILLE, OsdInfo, PgActivation, Pool, used_permille,
};
pub use command::{
    ActivationProposal, ActivationRequest, Change, Command, CommandSession, Incremental, MAX_BLOCKLIST_ENTRIES,
    PoolSetting,
};
pub use error::MapError;
pub use shoal_placement::{BucketKind, OsdId, PgId, Weight, pg_for_object};
