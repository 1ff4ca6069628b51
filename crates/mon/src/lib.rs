//! Shoal's monitor: keeps the cluster map, replicates its changes with Raft, and serves and
//! pushes it to daemons and clients.
//!
//! # Design
//!
//! * **What is replicated.** The Raft log is the sequence of map [`shoal_map::Change`]s (not
//!   commands): the leader validates a [`shoal_map::Command`] with `ClusterMap::prepare` against
//!   its applied map, and every monitor applies the resulting change with `ClusterMap::apply`, so
//!   all of them hold bit-identical maps. One proposal is in flight at a time (see [`core`]), so
//!   a change is always prepared against the map it will be applied to. An entry also carries the
//!   client's session of the command it came from, if any ([`sessions`], decision 0072): applying
//!   it records the session, so a resent command is answered instead of applied twice. A snapshot
//!   is the postcard-encoded `ClusterMap` with the session table.
//! * **What is soft state.** OSD reports (`OsdStats`), the time each OSD was last heard from,
//!   subscriptions and queued commands live in memory only. A new leader gives every OSD a fresh
//!   grace period, and reports are rebuilt from the next round of them.
//! * **Why openraft.** It implements elections, log replication, membership and snapshot
//!   transfer, and leaves storage and transport to the application: here the log is a plain
//!   fsynced file ([`store`]) and the transport is shoal-net (message types 24..=31, peers
//!   authenticated as `mon.N`), so the monitors need no second network stack or key scheme.
//!   Timings are short (heartbeat 50 ms, election 150-300 ms); a lone monitor triggers its own
//!   election at start instead of waiting for a timeout.
//! * **Sans-I/O core.** All monitor decisions (validation, replies, subscriptions, heartbeat
//!   grace, forwarding) are in [`core::MonCore`], which takes events and returns actions with no
//!   I/O and no clock, so a whole-cluster simulation can drive it without Raft.
//! * **Followers** forward client commands to the leader (one hop; a forwarded command is never
//!   forwarded again) and OSD reports too (the leader runs the heartbeat check), and serve maps
//!   and subscriptions from their own applied state.
//!
//! # Bootstrap
//!
//! [`mkfs`] writes each monitor's identity (fsid, rank, the initial monitors). The initial map is
//! `ClusterMap::new(fsid, mons)` at epoch 1, the same on every monitor. On a fresh cluster, rank
//! 0 calls openraft's `initialize` with every monitor as a voter; the others start empty and are
//! brought in by its first election. Restarted monitors recover from their snapshot and log.
//!
//! # Wire
//!
//! Clients and daemons send `MonCommand` (answered after the change is committed and applied on
//! the leader, with the new epoch), `GetMap` (optionally subscribing: every applied change is then
//! pushed as a `MapUpdate` with request id 0; a subscriber whose queue is full loses the
//! subscription), `GetStatus`, and `OsdStats` (answered with an empty frame of the same type).
//! A malformed request gets an error frame; it never affects other connections.

pub mod core;
mod daemon;
mod error;
pub mod failures;
pub mod raft;
pub mod sessions;
pub mod store;

pub use crate::core::{Action, CoreConfig, Event, MonCore, Reply, ReplyTo};
pub use daemon::{MonConfig, mkfs, run, run_with_listener};
pub use error::MonError;
