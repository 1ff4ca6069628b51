//! The object storage daemon (`shoal osd`): serves the PGs the map gives it from one local
//! engine store, with primary-copy replication.
//!
//! - [`exec`]: object operations on the store (resolving writes into deterministic
//!   transactions, serving reads); each PG is one store collection named `pg.POOL.SEED`.
//! - [`pglog`]: each PG's durable log of applied writes (versions, request ids), written in the
//!   same transaction as each write on every member.
//! - [`core`]: the OSD's logic as a state machine (events in, actions out), shared by the
//!   daemon and the deterministic simulation.
//! - [`objver`]: each object's version (its last write), stored with it.
//! - [`snaps`]: object snapshots (clones made on the first write after a snapshot, reads at a
//!   snapshot, trimming), kept beside each head object in its PG.
//! - [`scrub`]: scrub maps of objects and their comparison across a PG's members.
//! - [`daemon`]: the I/O around the core: messenger server, worker (a thread, or a task for
//!   the `mem` store), monitor client, replication connections; [`lanes`] and [`pacing`]
//!   decide when the worker takes client I/O and recovery work (client I/O first, and recovery
//!   held to a share of the time while clients are busy).

pub mod copy;
pub mod core;
pub mod daemon;
pub mod exec;
pub mod lanes;
pub mod merge;
pub mod objver;
pub mod pacing;
pub mod pglog;
pub mod pgmeta;
pub mod scrub;
pub mod snaps;

pub use core::{
    Action, Event, HeartbeatConfig, MAX_BLOCKED_OPS_PER_PG, MAX_NEIGHBOUR_PINGS, Mutations, OsdCore, PeerCall, ReadJob,
    Token,
};
pub use daemon::{OsdConfig, run};
