//! The map itself and the questions every daemon and client asks of it.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;

use serde::{Deserialize, Serialize};
use shoal_placement::{BucketKind, OsdId, PgId, PlacementMap, pg_for_object, pg_to_osds};

use crate::error::MapError;

/// Largest object a pool accepts unless configured otherwise: 64 MiB, what one frame carries.
pub const DEFAULT_MAX_OBJECT_BYTES: u64 = 64 << 20;

/// A monitor: its rank and where it listens.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MonInfo {
    pub addr: SocketAddr,
}

/// An OSD as the map knows it. `up` says whether it is running (it booted and has not been
/// reported gone); `in_cluster` whether it should hold data. Placement uses OSDs that are both.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OsdInfo {
    /// The host bucket it sits in (its failure domain with the default rule).
    pub host: String,
    /// Where it listens; `None` until it first boots.
    pub addr: Option<SocketAddr>,
    pub up: bool,
    pub in_cluster: bool,
    /// Epoch of its latest boot: a peer holding an older incarnation's connection reconnects.
    pub up_from: u64,
    /// Set by the monitors when the OSD's store reports at least [`FULL_PERMILLE`] of its
    /// capacity used, cleared below [`FULL_CLEAR_PERMILLE`]. Primaries refuse writes that need
    /// space in a PG with a full member, so that no replica runs out mid-write and diverges;
    /// removals are still served, so space can be freed.
    pub full: bool,
}

/// Share of an OSD's capacity, in thousandths, from which the monitors flag it full (as Ceph's
/// `mon_osd_full_ratio` of 0.95).
pub const FULL_PERMILLE: u64 = 950;
/// A full OSD is cleared only once its usage drops below this, so that an OSD hovering around
/// [`FULL_PERMILLE`] does not flip the flag (and the map's epoch) on every report.
pub const FULL_CLEAR_PERMILLE: u64 = 930;
/// Share of its store's capacity, in thousandths, from which a primary refuses even the writes
/// made to free space that it serves past [`FULL_PERMILLE`] if they write data (decision 0045;
/// removals and metadata-only writes are still served): what is left above it is kept for writes
/// already on their way (Ceph's `osd_failsafe_full_ratio` of 0.97).
pub const FULL_FAILSAFE_PERMILLE: u64 = 975;
/// Share of capacity from which `shoal status` warns that an OSD is nearly full (Ceph's
/// `mon_osd_nearfull_ratio` of 0.85).
pub const NEARFULL_PERMILLE: u64 = 850;
/// Share of its store's capacity, in thousandths, from which an OSD refuses backfill pushes that
/// bring data (counting the push's own bytes), so that moving data onto it never takes it to
/// [`FULL_PERMILLE`] and stops client writes to every PG it holds: the primaries wait and try
/// again (the PG is `backfill_toofull`). Ceph's `mon_osd_backfillfull_ratio` of 0.90.
pub const BACKFILLFULL_PERMILLE: u64 = 900;

/// Used share of a store in thousandths, rounded down; a store of no capacity counts as empty.
#[must_use]
pub fn used_permille(used_bytes: u64, capacity_bytes: u64) -> u64 {
    if capacity_bytes == 0 {
        return 0;
    }
    // u128: used_bytes * 1000 overflows u64 above 18 PB.
    (u128::from(used_bytes) * 1000 / u128::from(capacity_bytes)).min(u128::from(u64::MAX)) as u64
}

/// A replicated pool.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pool {
    pub id: u32,
    pub name: String,
    /// Replicas of every object.
    pub size: u32,
    /// Fewest acting replicas with which the pool still accepts writes.
    pub min_size: u32,
    /// Placement groups, fixed at creation: objects map to them by a stable mod, and OSDs do
    /// not split PGs yet.
    pub pg_num: u32,
    /// Largest object the pool accepts, in bytes.
    pub max_object_bytes: u64,
}

/// Where an object lives: its PG and the PG's acting OSDs, primary first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Locator {
    pub pg: PgId,
    pub osds: Vec<OsdId>,
}

/// The cluster map at one epoch. Build it with [`ClusterMap::new`] and change it only through
/// [`ClusterMap::prepare`] + [`ClusterMap::apply`] (or [`ClusterMap::apply_incremental`]), so
/// that every copy that saw the same changes is identical.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ClusterMap {
    /// Names the cluster; a daemon refuses a map with another fsid.
    pub fsid: String,
    /// Grows by one with every change.
    pub epoch: u64,
    pub mons: BTreeMap<u32, MonInfo>,
    pub osds: BTreeMap<OsdId, OsdInfo>,
    pub placement: PlacementMap,
    pub pools: BTreeMap<u32, Pool>,
    pub next_pool_id: u32,
    /// Replicas of a PG go to distinct buckets of this kind when the map has enough of them.
    pub failure_domain: BucketKind,
    /// Secret keys of the entities added with `shoal auth add` (entity → 32-byte key). Daemons
    /// accept these entities in addition to their bootstrap keyring file. Monitors send this
    /// table only to daemons and the admin; other clients get the map [`ClusterMap::redacted`].
    #[serde(default)]
    pub auth: BTreeMap<String, [u8; 32]>,
    /// Temporary acting sets, set by a PG's primary while the OSDs placement names cannot serve
    /// it yet (a new primary without the PG's data): the listed OSDs that are up act instead,
    /// the first of them primary, until the placement's members are complete (decision 0009).
    #[serde(default)]
    pub pg_temp: BTreeMap<PgId, Vec<OsdId>>,
    /// Each PG's last activation: the interval whose members hold every acknowledged write.
    /// Peering must hear from one of them, or the PG stays down (decision 0009).
    #[serde(default)]
    pub pg_active: BTreeMap<PgId, PgActivation>,
    /// The epoch each PG's current interval ([`ClusterMap::pg_interval`]) began at, kept by
    /// [`ClusterMap::apply`] for the changes that can move intervals. The monitors record an
    /// activation only if its PG's interval has not changed since it was made, even when the
    /// interval came back to the same OSDs meanwhile (decision 0090). Absent (maps written
    /// before it was kept): no change seen since.
    #[serde(default)]
    pub pg_interval_since: BTreeMap<PgId, u64>,
    /// Cluster-wide settings changed from their defaults (see [`crate::config::SETTINGS`]).
    #[serde(default)]
    pub config: BTreeMap<String, u64>,
    /// Cluster flags that are set (see [`crate::config::FLAGS`]).
    #[serde(default)]
    pub flags: BTreeSet<String>,
    /// Client instances fenced off the cluster (decision 0092): client instance id (the
    /// `client` of every request id it sends) → when the entry lapses, in Unix milliseconds by
    /// the clock of whoever added it. A primary refuses every request of a listed instance,
    /// whatever the time: the entry leaves the map only by a removal, or as expired when a later
    /// entry is added. At most [`crate::command::MAX_BLOCKLIST_ENTRIES`].
    #[serde(default)]
    pub blocklist: BTreeMap<u64, u64>,
}

/// The record of a PG's last activation, committed by the monitors after every member of the
/// acting set durably recorded it and before the primary serves any I/O.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PgActivation {
    /// The epoch the record was committed at; the next activation must name it (a
    /// compare-and-set, so two primaries never both build on the same history).
    pub epoch: u64,
    /// The map epoch at which the primary activated the members (`last_epoch_started` on each).
    pub activated_at: u64,
    /// The members holding every write of the PG in full (the acting set minus members still
    /// being backfilled), primary first.
    pub members: Vec<OsdId>,
    /// OSDs outside `members` that may hold objects some member still lacks (decision 0060):
    /// earlier members, and strays whose copies the activation was to recover from. Empty once
    /// every member holds every object. A primary asks them for objects it finds unfound and
    /// refuses an operator's decision on those objects until each one that is up has answered.
    #[serde(default)]
    pub holders: Vec<OsdId>,
}

impl Pool {
    /// The state a PG of this pool is in with `acting` OSDs, as far as the map tells:
    /// `active+clean` with every replica, `active+undersized` with at least `min_size` (writes are
    /// still taken), `inactive` below. One naming for `shoal status`, `shoal pg ls` and OSD reports.
    #[must_use]
    pub fn acting_state(&self, acting: usize) -> &'static str {
        let n = u32::try_from(acting).unwrap_or(u32::MAX);
        if n >= self.size {
            "active+clean"
        } else if n >= self.min_size {
            "active+undersized"
        } else {
            "inactive"
        }
    }
}

impl ClusterMap {
    /// An empty map at epoch 1 with the given monitors.
    pub fn new(fsid: impl Into<String>, mons: BTreeMap<u32, MonInfo>) -> ClusterMap {
        ClusterMap {
            fsid: fsid.into(),
            epoch: 1,
            mons,
            osds: BTreeMap::new(),
            placement: PlacementMap::new(),
            pools: BTreeMap::new(),
            next_pool_id: 1,
            failure_domain: BucketKind::Host,
            auth: BTreeMap::new(),
            pg_temp: BTreeMap::new(),
            pg_active: BTreeMap::new(),
            pg_interval_since: BTreeMap::new(),
            config: BTreeMap::new(),
            flags: BTreeSet::new(),
            blocklist: BTreeMap::new(),
        }
    }

    /// Whether client instance `client` is fenced off ([`ClusterMap::blocklist`]): every
    /// request it sends is refused.
    #[must_use]
    pub fn is_blocklisted(&self, client: u64) -> bool {
        self.blocklist.contains_key(&client)
    }

    /// The value of setting `name`: the map's if set, else its default (0 for a name that is
    /// not a setting; callers pass the constants of [`crate::config`]).
    #[must_use]
    pub fn setting(&self, name: &str) -> u64 {
        self.config.get(name).copied().unwrap_or_else(|| crate::config::setting(name).map_or(0, |s| s.default))
    }

    /// Whether cluster flag `flag` is set.
    #[must_use]
    pub fn flag(&self, flag: &str) -> bool {
        self.flags.contains(flag)
    }

    /// The map without secrets, for clients that must not learn other entities' keys.
    pub fn redacted(&self) -> ClusterMap {
        let mut map = self.clone();
        map.auth.clear();
        map
    }

    /// The pool named `name`.
    pub fn pool_by_name(&self, name: &str) -> Result<&Pool, MapError> {
        self.pools.values().find(|p| p.name == name).ok_or_else(|| MapError::UnknownPool(name.to_string()))
    }

    /// Whether `osd` takes part in placement: booted, not reported down, and in.
    pub fn is_usable(&self, osd: OsdId) -> bool {
        self.osds.get(&osd).is_some_and(|o| o.up && o.in_cluster)
    }

    /// The acting OSDs of PG `pg`, primary first: its temporary acting set's members that are up
    /// if it has one with any (see [`ClusterMap::pg_temp`]), else the OSDs placement names
    /// ([`ClusterMap::pg_up_osds`]). The list is shorter than the pool's size when fewer usable
    /// OSDs exist, and empty when none does.
    pub fn pg_osds(&self, pg: PgId) -> Result<Vec<OsdId>, MapError> {
        if let Some(temp) = self.pg_temp.get(&pg) {
            let up: Vec<OsdId> = temp.iter().copied().filter(|o| self.osds.get(o).is_some_and(|i| i.up)).collect();
            if !up.is_empty() && self.pools.contains_key(&pg.pool) {
                return Ok(up);
            }
        }
        self.pg_up_osds(pg)
    }

    /// PG `pg`'s interval: its acting OSDs, primary first, each with the epoch it last came up
    /// (`up_from`). It changes when the acting set does or a member restarts; an activation
    /// belongs to the interval it was made in.
    pub fn pg_interval(&self, pg: PgId) -> Result<Vec<(OsdId, u64)>, MapError> {
        Ok(self.pg_osds(pg)?.into_iter().map(|o| (o, self.osds.get(&o).map_or(0, |i| i.up_from))).collect())
    }

    /// Every PG's interval ([`ClusterMap::pg_interval`]; empty where it cannot be computed).
    /// Computes the placement of every PG: for changes that can move intervals, not per I/O.
    pub(crate) fn pg_intervals(&self) -> BTreeMap<PgId, Vec<(OsdId, u64)>> {
        let mut out = BTreeMap::new();
        for pool in self.pools.values() {
            for seed in 0..pool.pg_num {
                let pg = PgId { pool: pool.id, seed };
                out.insert(pg, self.pg_interval(pg).unwrap_or_default());
            }
        }
        out
    }

    /// The OSDs placement names for PG `pg` that are up, primary first, ignoring any temporary
    /// acting set.
    ///
    /// Placement chooses among the OSDs that are *in*; an OSD that is down but still in keeps its
    /// place and is left out of the list, which is then shorter than the pool's size (the PG is
    /// undersized and degraded, not remapped). Data moves only when an OSD goes out — by the
    /// operator, or by the monitors after `mon_osd_down_out_interval_secs` — so a restart or a
    /// reboot under `noout` moves nothing, and the OSD catches up from the PG log (or a backfill
    /// comparing versions) when it is back (decision 0050; Ceph's up set works the same way).
    pub fn pg_up_osds(&self, pg: PgId) -> Result<Vec<OsdId>, MapError> {
        let pool = self.pools.get(&pg.pool).ok_or_else(|| MapError::UnknownPool(format!("id {}", pg.pool)))?;
        if !self.placement.has_kind(self.failure_domain) {
            return Ok(Vec::new());
        }
        match pg_to_osds(&self.placement, pg.pool, pg.seed, pool.size as usize, self.failure_domain, |o| {
            self.osds.get(&o).is_some_and(|i| i.in_cluster)
        }) {
            Ok(mut osds) => {
                osds.retain(|o| self.osds.get(o).is_some_and(|i| i.up));
                Ok(osds)
            }
            Err(shoal_placement::PlacementError::NoUsableOsd(_)) => Ok(Vec::new()),
            Err(e) => Err(e.into()),
        }
    }

    /// Where object `name` of pool `pool_id` lives.
    pub fn locate(&self, pool_id: u32, name: &str) -> Result<Locator, MapError> {
        let pool = self.pools.get(&pool_id).ok_or_else(|| MapError::UnknownPool(format!("id {pool_id}")))?;
        let pg = pg_for_object(pool.id, pool.pg_num, name)?;
        Ok(Locator { pg, osds: self.pg_osds(pg)? })
    }

    /// OSDs that are up, and OSDs that are in.
    pub fn osd_counts(&self) -> (usize, usize) {
        (self.osds.values().filter(|o| o.up).count(), self.osds.values().filter(|o| o.in_cluster).count())
    }
}
