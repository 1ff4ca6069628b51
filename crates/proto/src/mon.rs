//! Messages between monitors, daemons and clients about the cluster map (types 16..=31).

use serde::{Deserialize, Serialize};
use shoal_map::{ClusterMap, Command, CommandSession, Incremental, OsdId};

use crate::error::RemoteError;
use crate::msg::Message;

/// Asks a monitor to change the map. Any monitor accepts it and forwards it to the leader.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MonCommand {
    pub command: Command,
    /// Set by clients on commands that are not [`Command::repeatable`], so that a resend after a
    /// lost answer is applied at most once (decision 0072).
    pub session: Option<CommandSession>,
}
impl Message for MonCommand {
    const TYPE: u16 = 16;
}

/// The outcome of a [`MonCommand`]: the epoch at which the change is in the map (the current
/// epoch if the command needed no change).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MonCommandReply {
    pub result: Result<u64, RemoteError>,
}
impl Message for MonCommandReply {
    const TYPE: u16 = 17;
}

/// Asks for the map newer than `have_epoch` (0: none). With `subscribe`, the monitor also pushes
/// a [`MapUpdate`] (request id 0) on this connection after every new epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct GetMap {
    pub have_epoch: u64,
    pub subscribe: bool,
}
impl Message for GetMap {
    const TYPE: u16 = 18;
}

/// A map update: either the whole map (when the receiver has none or is too far behind) or
/// the incrementals that lead from the receiver's epoch to the newest, in order.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct MapUpdate {
    pub full: Option<ClusterMap>,
    pub incrementals: Vec<Incremental>,
}
impl Message for MapUpdate {
    const TYPE: u16 = 19;
}

impl MapUpdate {
    /// The map after this update, starting from `current` (the receiver's map, if any): the full
    /// map if it is newer, then every incremental past the epoch reached. `None` if the update
    /// does not lead on from `current` (a gap): the receiver then asks for the full map.
    #[must_use]
    pub fn apply_to(&self, current: Option<&ClusterMap>) -> Option<ClusterMap> {
        let mut map = match (&self.full, current) {
            (Some(full), Some(cur)) if full.epoch <= cur.epoch => cur.clone(),
            (Some(full), _) => full.clone(),
            (None, Some(cur)) => cur.clone(),
            (None, None) => return None,
        };
        for inc in &self.incrementals {
            if inc.epoch > map.epoch {
                map.apply_incremental(inc).ok()?;
            }
        }
        Some(map)
    }
}

/// Asks for the cluster's health and activity (`shoal status`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct GetStatus;
impl Message for GetStatus {
    const TYPE: u16 = 20;
}

/// What `shoal status` shows.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StatusReply {
    pub epoch: u64,
    /// Rank of the Raft leader, if one is known.
    pub leader: Option<u32>,
    /// Monitors the leader currently hears from (itself included).
    pub quorum: Vec<u32>,
    /// The latest report of every OSD that sent one.
    pub osd_stats: Vec<OsdStats>,
}
impl Message for StatusReply {
    const TYPE: u16 = 21;
}

/// An OSD's periodic report to the monitors: its PGs by state, space and I/O rates. Kept in
/// the monitors' memory only (it is soft state, rebuilt from the next reports).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OsdStats {
    pub osd: OsdId,
    pub map_epoch: u64,
    /// PG state name → count, e.g. `active+clean`.
    pub pg_states: Vec<(String, u32)>,
    pub objects: u64,
    pub used_bytes: u64,
    pub capacity_bytes: u64,
    pub read_ops_per_s: f64,
    pub write_ops_per_s: f64,
    pub read_bytes_per_s: f64,
    pub write_bytes_per_s: f64,
    /// Over the PGs this OSD leads: object copies missing on a member (log recovery to do).
    pub degraded_objects: u64,
    /// Over the PGs this OSD leads: object copies still to be backfilled (an estimate: the
    /// primary's objects when backfill started, less those sent since).
    pub misplaced_objects: u64,
    /// Objects no OSD that is up can provide.
    pub unfound_objects: u64,
    /// Object copies recovered or backfilled per second since the last report.
    pub recovery_objects_per_s: f64,
    /// PGs this OSD holds a copy of without acting for them, kept until the PG is clean without
    /// it and then removed, plus collections whose removal is still under way.
    pub stray_pgs: u64,
    /// Peers this OSD pings that have not answered for the peer grace (decision 0062). The
    /// leading monitor marks an OSD down once OSDs on enough distinct hosts name it here.
    pub unreachable_peers: Vec<OsdId>,
}
impl Message for OsdStats {
    const TYPE: u16 = 22;
}

/// Message types 24..=31 carry the monitors' Raft traffic; their payloads belong to the monitor
/// crate, which owns the Raft library's types.
pub const RAFT_TYPES: std::ops::RangeInclusive<u16> = 24..=31;
