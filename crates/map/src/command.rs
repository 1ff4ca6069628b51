//! Commands (what an operator or a daemon asks for), changes (what the monitors replicate) and
//! incrementals (a change with the epoch it produces, what subscribers receive).

use std::net::SocketAddr;

use serde::{Deserialize, Serialize};
use shoal_placement::{OsdId, PgId, Weight, pg::MAX_PG_NUM};

use crate::cluster::{ClusterMap, DEFAULT_MAX_OBJECT_BYTES, MonInfo, OsdInfo, PgActivation, Pool};
use crate::error::MapError;

/// Longest pool name, in bytes.
pub const MAX_POOL_NAME_BYTES: usize = 64;
/// Largest `pg_num` a pool may have here: PGs cost memory on every OSD.
pub const MAX_POOL_PG_NUM: u32 = 1 << 16;
/// Most replicas a pool may ask for.
pub const MAX_POOL_SIZE: u32 = 16;
/// Most client instances the blocklist holds at once: every OSD checks every request against
/// it, and every map carries it. One entry is added per broken or taken-over image lock, and
/// entries lapse after an hour by default, so this is far above what a cluster needs.
pub const MAX_BLOCKLIST_ENTRIES: usize = 4096;

/// A request to change the map. Validated by [`ClusterMap::prepare`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Command {
    /// Registers an OSD in a host (the host bucket is created if missing). `id: None` takes the
    /// lowest free id.
    CreateOsd {
        id: Option<OsdId>,
        host: String,
        weight: Weight,
    },
    /// An OSD started and listens at `addr`: marks it up.
    OsdBoot {
        id: OsdId,
        addr: SocketAddr,
    },
    /// An OSD stopped or was reported unreachable.
    OsdDown {
        id: OsdId,
    },
    /// Stop placing data on an OSD / place data on it again.
    OsdOut {
        id: OsdId,
    },
    OsdIn {
        id: OsdId,
    },
    /// Flags an OSD full or clears the flag. The monitors issue it themselves from OSD reports
    /// ([`crate::FULL_PERMILLE`]); an administrator's setting lasts until the next report.
    OsdFull {
        id: OsdId,
        full: bool,
    },
    /// Creates a replicated pool. `min_size: None` takes `size - size / 2`, as Ceph does.
    CreatePool {
        name: String,
        size: u32,
        min_size: Option<u32>,
        pg_num: u32,
        max_object_bytes: Option<u64>,
    },
    RemovePool {
        name: String,
    },
    SetPool {
        name: String,
        setting: PoolSetting,
    },
    /// Adds (or replaces) the key of `entity` (`client.NAME`, or `osd.N` for an OSD added to a
    /// running cluster; monitors and the admin use their bootstrap keys).
    AuthAdd {
        entity: String,
        key: [u8; 32],
    },
    AuthRemove {
        entity: String,
    },
    /// A PG primary's requests for temporary acting sets (an empty list removes the PG's). Entries
    /// from an OSD that is not the PG's acting or placement primary are dropped.
    PgTemp {
        by: OsdId,
        entries: Vec<(PgId, Vec<OsdId>)>,
    },
    /// A PG primary records activations (see [`crate::PgActivation`]). Entries whose `prior_epoch`
    /// is not the PG's current record's epoch (0: none), whose interval is not the PG's current
    /// one or changed after `activated_at` (decision 0090), or whose members are not the PG's
    /// acting set led by `by`, are dropped: another primary got there first, or the interval
    /// changed (and so are entries naming a member among their holders).
    PgActivated {
        by: OsdId,
        records: Vec<ActivationRequest>,
    },
    /// Removes an OSD from the map for good (`shoal osd rm`): refused unless it is down and
    /// out. Whether its data is safe elsewhere is the caller's check (the map cannot know).
    RemoveOsd {
        id: OsdId,
    },
    /// An operator gives up the history PG `pg`'s activation record vouches for (`shoal pg
    /// force-complete`, decision 0078): the record is removed, so that the PG's next peering
    /// takes the newest copy among its acting members that answer, and the writes only the
    /// record's members held are lost. Refused unless the PG's record is the one of epoch
    /// `record_epoch` (the one the operator decided on, not a newer one).
    PgForgetHistory {
        pg: PgId,
        record_epoch: u64,
    },
    /// Sets a cluster-wide setting (`None`: back to its default).
    ConfigSet {
        key: String,
        value: Option<u64>,
    },
    /// Sets or clears a cluster flag.
    SetFlag {
        flag: String,
        on: bool,
    },
    /// Fences client instance `client` off the cluster until `until_unix_ms` (decision 0092):
    /// from the epoch this produces, every primary refuses its requests. Entries that lapsed
    /// before `now_unix_ms` (both times by the caller's clock) leave the list in the same change.
    /// Adding a listed instance again moves its lapse time.
    Blocklist {
        client: u64,
        until_unix_ms: u64,
        now_unix_ms: u64,
    },
    /// Lets client instance `client` back in (`shoal osd blocklist rm`).
    Unblocklist {
        client: u64,
    },
}

impl Command {
    /// Whether sending the command again after it may already have been applied is safe: the
    /// second application finds the map as the first left it and succeeds without a change
    /// (it sets a state rather than creating or removing something). A client that lost the
    /// answer to such a command — the monitor it spoke to lost the leadership, or could not
    /// reach the leader — may simply retry it; for any other command the outcome is unknown and
    /// the caller must look at the map before retrying (a repeated `RemovePool` would report an
    /// unknown pool that the first attempt removed).
    pub fn repeatable(&self) -> bool {
        match self {
            Command::OsdBoot { .. }
            | Command::OsdDown { .. }
            | Command::OsdOut { .. }
            | Command::OsdIn { .. }
            | Command::OsdFull { .. }
            | Command::SetPool { .. }
            | Command::AuthAdd { .. }
            | Command::PgTemp { .. }
            | Command::ConfigSet { .. }
            | Command::SetFlag { .. }
            | Command::Blocklist { .. } => true,
            // An activation carries the epoch of the record it replaces: a repeat after it was
            // applied is dropped as stale, which is what the proposer wants.
            Command::PgActivated { .. } => true,
            Command::CreateOsd { .. }
            | Command::CreatePool { .. }
            | Command::RemovePool { .. }
            | Command::AuthRemove { .. }
            | Command::RemoveOsd { .. }
            | Command::PgForgetHistory { .. }
            | Command::Unblocklist { .. } => false,
        }
    }
}

/// Names one command of one client so that the monitors apply it at most once however often it
/// is sent (decision 0072). A client picks `client` at random when it starts and numbers its
/// commands with `seq`; a resend carries the same pair. The monitors remember, in their replicated
/// state, which pairs they applied and at which epoch, and answer a resend of an applied command
/// with that epoch instead of preparing it again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct CommandSession {
    pub client: u64,
    pub seq: u64,
}

/// One PG's activation, as its primary proposes it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ActivationProposal {
    pub pg: PgId,
    pub prior_epoch: u64,
    pub activated_at: u64,
    pub members: Vec<OsdId>,
    /// See [`crate::PgActivation::holders`]; never one of `members`.
    pub holders: Vec<OsdId>,
}

/// An activation as a primary sends it to the monitors: the record it proposes and the interval
/// it was made in ([`crate::ClusterMap::pg_interval`] in the primary's map). The monitors record
/// it only while the PG is still in that interval (decision 0079): its members may since have
/// been activated by another primary, in an interval whose record never reached the map, and a
/// record of the earlier activation would name members that no longer hold what it says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ActivationRequest {
    pub proposal: ActivationProposal,
    pub interval: Vec<(OsdId, u64)>,
}

/// A pool property `shoal pool set` can change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum PoolSetting {
    Size(u32),
    MinSize(u32),
    /// Refused unless unchanged: OSDs do not split (or merge) PGs, so a new count would map
    /// objects to PGs that do not hold them.
    PgNum(u32),
    MaxObjectBytes(u64),
}

/// A validated command with every value resolved: applying it cannot fail on a map that it was
/// prepared against, and gives the same result on every monitor.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Change {
    AddOsd {
        id: OsdId,
        host: String,
        weight: Weight,
    },
    OsdUp {
        id: OsdId,
        addr: SocketAddr,
    },
    OsdDown {
        id: OsdId,
    },
    OsdIn {
        id: OsdId,
        in_cluster: bool,
    },
    OsdFull {
        id: OsdId,
        full: bool,
    },
    PutPool(Pool),
    RemovePool {
        id: u32,
    },
    AddMon {
        rank: u32,
        info: MonInfo,
    },
    AuthSet {
        entity: String,
        key: [u8; 32],
    },
    AuthRemove {
        entity: String,
    },
    /// Temporary acting sets set (non-empty) or removed (empty).
    PgTemp {
        entries: Vec<(PgId, Vec<OsdId>)>,
    },
    /// Activations recorded; each record's epoch is the epoch this change produces.
    PgActivated {
        records: Vec<ActivationProposal>,
    },
    /// A PG's activation record removed by an operator ([`Command::PgForgetHistory`]).
    PgHistoryForgotten {
        pg: PgId,
    },
    RemoveOsd {
        id: OsdId,
    },
    Config {
        key: String,
        value: Option<u64>,
    },
    Flag {
        flag: String,
        on: bool,
    },
    /// Client instance `client` fenced off until `until_unix_ms`; the instances in `expired`
    /// leave the list first.
    Blocklist {
        client: u64,
        until_unix_ms: u64,
        expired: Vec<u64>,
    },
    Unblocklist {
        client: u64,
    },
    /// A change whose content the receiver may not see (a key): it only advances the epoch.
    Redacted,
}

impl Change {
    /// Whether the change can move a PG's interval (its acting set, or a member's `up_from`):
    /// [`ClusterMap::apply`] then looks at every PG's (listed exhaustively, so that a new kind of
    /// change must be placed on one side).
    #[must_use]
    pub fn moves_intervals(&self) -> bool {
        match self {
            Change::AddOsd { .. }
            | Change::OsdUp { .. }
            | Change::OsdDown { .. }
            | Change::OsdIn { .. }
            | Change::PutPool(_)
            | Change::RemovePool { .. }
            | Change::PgTemp { .. }
            | Change::RemoveOsd { .. } => true,
            Change::OsdFull { .. }
            | Change::AddMon { .. }
            | Change::AuthSet { .. }
            | Change::AuthRemove { .. }
            | Change::PgActivated { .. }
            | Change::PgHistoryForgotten { .. }
            | Change::Config { .. }
            | Change::Flag { .. }
            | Change::Blocklist { .. }
            | Change::Unblocklist { .. }
            | Change::Redacted => false,
        }
    }

    /// The change as a client without access to keys may see it.
    pub fn redacted(&self) -> Change {
        match self {
            Change::AuthSet { .. } | Change::AuthRemove { .. } => Change::Redacted,
            other => other.clone(),
        }
    }
}

/// One change and the epoch the map has after it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Incremental {
    pub epoch: u64,
    pub change: Change,
}

fn validate_pool_name(name: &str) -> Result<(), MapError> {
    let bad = |reason| Err(MapError::InvalidPoolName { name: name.to_string(), reason });
    if name.is_empty() {
        return bad("empty");
    }
    if name.len() > MAX_POOL_NAME_BYTES {
        return bad("longer than 64 bytes");
    }
    if !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.') {
        return bad("only ASCII letters, digits, '-', '_' and '.' are allowed");
    }
    Ok(())
}

/// Longest entity name, in bytes.
pub const MAX_ENTITY_BYTES: usize = 64;

/// Entities whose keys the map may hold: clients (`client.NAME`) and OSDs added to a running
/// cluster (`osd.N`). Monitors and `client.admin` keep their bootstrap keys.
fn validate_auth_entity(entity: &str) -> Result<(), MapError> {
    let bad = |reason: &'static str| Err(MapError::InvalidEntity { entity: entity.to_string(), reason });
    if let Some(n) = entity.strip_prefix("osd.") {
        return match n.parse::<u32>() {
            Ok(id) if id.to_string() == n => Ok(()),
            _ => bad("an OSD entity is `osd.` followed by its number"),
        };
    }
    let Some(name) = entity.strip_prefix("client.") else {
        return bad("keys can be managed for `client.NAME` and `osd.N` entities only");
    };
    if name.is_empty() || entity.len() > MAX_ENTITY_BYTES {
        return bad("the name after `client.` must be 1 to 57 bytes");
    }
    if !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.') {
        return bad("only ASCII letters, digits, '-', '_' and '.' are allowed");
    }
    if entity == "client.admin" {
        return bad("client.admin's key lives in the bootstrap keyring");
    }
    Ok(())
}

fn validate_pool(map: &ClusterMap, pool: &Pool) -> Result<(), MapError> {
    let invalid = |s: String| Err(MapError::InvalidPoolSetting(s));
    if pool.size == 0 || pool.size > MAX_POOL_SIZE {
        return invalid(format!("size must be between 1 and {MAX_POOL_SIZE}, got {}", pool.size));
    }
    if pool.size as usize > map.osds.len() {
        return Err(MapError::SizeTooLarge { size: pool.size, osds: map.osds.len() });
    }
    if pool.min_size == 0 || pool.min_size > pool.size {
        return invalid(format!("min_size must be between 1 and size ({}), got {}", pool.size, pool.min_size));
    }
    if pool.pg_num == 0 || pool.pg_num > MAX_POOL_PG_NUM.min(MAX_PG_NUM) {
        return invalid(format!("pg_num must be between 1 and {MAX_POOL_PG_NUM}, got {}", pool.pg_num));
    }
    if pool.max_object_bytes == 0 || pool.max_object_bytes > DEFAULT_MAX_OBJECT_BYTES {
        return invalid(format!(
            "max_object_bytes must be between 1 and {DEFAULT_MAX_OBJECT_BYTES}, got {}",
            pool.max_object_bytes
        ));
    }
    Ok(())
}

impl ClusterMap {
    fn osd(&self, id: OsdId) -> Result<&OsdInfo, MapError> {
        self.osds.get(&id).ok_or(MapError::UnknownOsd(id))
    }

    /// Validates `cmd` against this map and resolves it into the change to replicate. `Ok(None)`
    /// means the command is already satisfied (marking an up OSD up with the same address, an in
    /// OSD in): no new epoch is needed.
    pub fn prepare(&self, cmd: &Command) -> Result<Option<Change>, MapError> {
        Ok(Some(match cmd {
            Command::CreateOsd { id, host, weight } => {
                let id = match id {
                    Some(id) if self.osds.contains_key(id) => return Err(MapError::DuplicateOsd(*id)),
                    Some(id) => *id,
                    None => OsdId((0..).find(|n| !self.osds.contains_key(&OsdId(*n))).unwrap_or(0)),
                };
                if host.is_empty() || host.len() > MAX_POOL_NAME_BYTES {
                    return Err(MapError::InvalidPoolSetting(format!("host name {host:?} must be 1 to 64 bytes")));
                }
                Change::AddOsd { id, host: host.clone(), weight: *weight }
            }
            Command::OsdBoot { id, addr } => {
                let osd = self.osd(*id)?;
                if osd.up && osd.addr == Some(*addr) {
                    return Ok(None);
                }
                Change::OsdUp { id: *id, addr: *addr }
            }
            Command::OsdDown { id } => {
                if !self.osd(*id)?.up {
                    return Ok(None);
                }
                Change::OsdDown { id: *id }
            }
            Command::OsdOut { id } | Command::OsdIn { id } => {
                let want = matches!(cmd, Command::OsdIn { .. });
                if self.osd(*id)?.in_cluster == want {
                    return Ok(None);
                }
                Change::OsdIn { id: *id, in_cluster: want }
            }
            Command::RemoveOsd { id } => {
                let osd = self.osd(*id)?;
                if osd.up || osd.in_cluster {
                    return Err(MapError::OsdNotRemovable {
                        id: *id,
                        reason: format!(
                            "it must be down and out first (it is {} and {})",
                            if osd.up { "up" } else { "down" },
                            if osd.in_cluster { "in" } else { "out" }
                        ),
                    });
                }
                Change::RemoveOsd { id: *id }
            }
            Command::ConfigSet { key, value } => {
                crate::config::setting(key)?;
                if let Some(v) = value {
                    crate::config::check_value(key, *v)?;
                }
                if self.config.get(key) == value.as_ref() {
                    return Ok(None);
                }
                Change::Config { key: key.clone(), value: *value }
            }
            Command::SetFlag { flag, on } => {
                crate::config::check_flag(flag)?;
                if self.flags.contains(flag) == *on {
                    return Ok(None);
                }
                Change::Flag { flag: flag.clone(), on: *on }
            }
            Command::Blocklist { client, until_unix_ms, now_unix_ms } => {
                if self.blocklist.get(client) == Some(until_unix_ms) {
                    return Ok(None);
                }
                let expired: Vec<u64> = self
                    .blocklist
                    .iter()
                    .filter(|(c, until)| **until < *now_unix_ms && *c != client)
                    .map(|(c, _)| *c)
                    .collect();
                let entries = self.blocklist.len() - expired.len();
                if !self.blocklist.contains_key(client) && entries >= MAX_BLOCKLIST_ENTRIES {
                    return Err(MapError::BlocklistFull { entries, max: MAX_BLOCKLIST_ENTRIES });
                }
                Change::Blocklist { client: *client, until_unix_ms: *until_unix_ms, expired }
            }
            Command::Unblocklist { client } => {
                if !self.blocklist.contains_key(client) {
                    return Err(MapError::NotBlocklisted { client: *client });
                }
                Change::Unblocklist { client: *client }
            }
            Command::OsdFull { id, full } => {
                if self.osd(*id)?.full == *full {
                    return Ok(None);
                }
                Change::OsdFull { id: *id, full: *full }
            }
            Command::CreatePool { name, size, min_size, pg_num, max_object_bytes } => {
                validate_pool_name(name)?;
                if self.pool_by_name(name).is_ok() {
                    return Err(MapError::DuplicatePool(name.clone()));
                }
                let pool = Pool {
                    id: self.next_pool_id,
                    name: name.clone(),
                    size: *size,
                    min_size: min_size.unwrap_or(size - size / 2),
                    pg_num: *pg_num,
                    max_object_bytes: max_object_bytes.unwrap_or(DEFAULT_MAX_OBJECT_BYTES),
                };
                validate_pool(self, &pool)?;
                Change::PutPool(pool)
            }
            Command::RemovePool { name } => Change::RemovePool { id: self.pool_by_name(name)?.id },
            Command::SetPool { name, setting } => {
                let current = self.pool_by_name(name)?;
                let mut pool = current.clone();
                match *setting {
                    PoolSetting::Size(size) => {
                        pool.size = size;
                        pool.min_size = pool.min_size.min(size);
                    }
                    PoolSetting::MinSize(min) => pool.min_size = min,
                    PoolSetting::PgNum(pg_num) => {
                        // Placement is a stable mod of pg_num: a new count moves objects to PGs
                        // whose collections do not hold them, and they would read as absent (and
                        // a write would fork them) until OSDs can split PGs.
                        if pg_num != pool.pg_num {
                            return Err(MapError::InvalidPoolSetting(format!(
                                "pg_num of pool '{}' cannot change ({} -> {pg_num}): PG splitting and merging are \
                                 not supported yet, and a new count would hide the pool's objects; create a new \
                                 pool with the pg_num you need and copy the objects into it",
                                pool.name, pool.pg_num
                            )));
                        }
                    }
                    PoolSetting::MaxObjectBytes(max) => pool.max_object_bytes = max,
                }
                validate_pool(self, &pool)?;
                if pool == *current {
                    return Ok(None);
                }
                Change::PutPool(pool)
            }
            Command::AuthAdd { entity, key } => {
                validate_auth_entity(entity)?;
                if self.auth.get(entity) == Some(key) {
                    return Ok(None);
                }
                Change::AuthSet { entity: entity.clone(), key: *key }
            }
            Command::AuthRemove { entity } => {
                if !self.auth.contains_key(entity) {
                    return Err(MapError::UnknownEntity(entity.clone()));
                }
                Change::AuthRemove { entity: entity.clone() }
            }
            Command::PgTemp { by, entries } => {
                let mut keep = Vec::new();
                for (pg, osds) in entries {
                    if !self.pg_exists(*pg) || osds.iter().any(|o| !self.osds.contains_key(o)) {
                        continue;
                    }
                    let primary = |v: Result<Vec<OsdId>, MapError>| v.ok().and_then(|v| v.first().copied());
                    if primary(self.pg_osds(*pg)) != Some(*by) && primary(self.pg_up_osds(*pg)) != Some(*by) {
                        continue;
                    }
                    let current = self.pg_temp.get(pg).cloned().unwrap_or_default();
                    if current != *osds {
                        keep.push((*pg, osds.clone()));
                    }
                }
                if keep.is_empty() {
                    return Ok(None);
                }
                Change::PgTemp { entries: keep }
            }
            Command::PgActivated { by, records } => {
                let mut keep = Vec::new();
                for ActivationRequest { proposal: r, interval } in records {
                    if !self.pg_exists(r.pg) {
                        continue;
                    }
                    let prior = self.pg_active.get(&r.pg).map_or(0, |a| a.epoch);
                    let Ok(acting) = self.pg_osds(r.pg) else { continue };
                    let valid = prior == r.prior_epoch
                        && acting.first() == Some(by)
                        && r.members.first() == Some(by)
                        && r.members.iter().all(|m| acting.contains(m))
                        && r.holders.iter().all(|h| !r.members.contains(h))
                        && r.activated_at <= self.epoch
                        && self.pg_interval(r.pg).is_ok_and(|now| now == *interval)
                        && self.pg_interval_since.get(&r.pg).is_none_or(|since| *since <= r.activated_at);
                    if valid {
                        keep.push(r.clone());
                    }
                }
                if keep.is_empty() {
                    return Ok(None);
                }
                Change::PgActivated { records: keep }
            }
            Command::PgForgetHistory { pg, record_epoch } => {
                let refuse = |reason: String| Err(MapError::PgHistory { pg: *pg, reason });
                if !self.pg_exists(*pg) {
                    return refuse("no such PG in the map".into());
                }
                match self.pg_active.get(pg) {
                    None => return refuse("it has no activation record: no history to give up".into()),
                    Some(r) if r.epoch != *record_epoch => {
                        return refuse(format!(
                            "its activation record is of epoch {}, not {record_epoch}: it peered since; look again",
                            r.epoch
                        ));
                    }
                    Some(_) => {}
                }
                Change::PgHistoryForgotten { pg: *pg }
            }
        }))
    }

    /// Whether PG `pg` exists in this map.
    fn pg_exists(&self, pg: PgId) -> bool {
        self.pools.get(&pg.pool).is_some_and(|p| pg.seed < p.pg_num)
    }

    /// Applies a change prepared against this map (or received as an incremental) and bumps
    /// the epoch. Errors only if the change does not fit this map, in which case the map is
    /// unchanged.
    pub fn apply(&mut self, change: &Change) -> Result<(), MapError> {
        // Intervals before a change that can move them, to see which ones it moves.
        let intervals_before = change.moves_intervals().then(|| self.pg_intervals());
        match change {
            Change::AddOsd { id, host, weight } => {
                if self.osds.contains_key(id) {
                    return Err(MapError::DuplicateOsd(*id));
                }
                if self.placement.bucket_id(host).is_none() {
                    self.placement.add_host(host)?;
                }
                self.placement.add_osd(*id, host, *weight)?;
                let info =
                    OsdInfo { host: host.clone(), addr: None, up: false, in_cluster: true, up_from: 0, full: false };
                self.osds.insert(*id, info);
            }
            Change::OsdUp { id, addr } => {
                let epoch = self.epoch + 1;
                let osd = self.osds.get_mut(id).ok_or(MapError::UnknownOsd(*id))?;
                osd.up = true;
                osd.addr = Some(*addr);
                osd.up_from = epoch;
            }
            Change::OsdDown { id } => self.osds.get_mut(id).ok_or(MapError::UnknownOsd(*id))?.up = false,
            Change::OsdIn { id, in_cluster } => {
                self.osds.get_mut(id).ok_or(MapError::UnknownOsd(*id))?.in_cluster = *in_cluster;
            }
            Change::OsdFull { id, full } => self.osds.get_mut(id).ok_or(MapError::UnknownOsd(*id))?.full = *full,
            Change::RemoveOsd { id } => {
                self.osds.remove(id).ok_or(MapError::UnknownOsd(*id))?;
                self.placement.remove_osd(*id)?;
                // Temporary acting sets naming it are dropped; activation records keep it as a
                // member (a PG whose only complete member it was stays down, as it must) but not
                // as a holder: removing it declares what it held lost.
                self.pg_temp.retain(|_, osds| !osds.contains(id));
                for record in self.pg_active.values_mut() {
                    record.holders.retain(|h| h != id);
                }
            }
            Change::Config { key, value } => match value {
                Some(v) => {
                    self.config.insert(key.clone(), *v);
                }
                None => {
                    self.config.remove(key);
                }
            },
            Change::Flag { flag, on } => {
                if *on {
                    self.flags.insert(flag.clone());
                } else {
                    self.flags.remove(flag);
                }
            }
            Change::Blocklist { client, until_unix_ms, expired } => {
                for c in expired {
                    self.blocklist.remove(c);
                }
                self.blocklist.insert(*client, *until_unix_ms);
            }
            Change::Unblocklist { client } => {
                self.blocklist.remove(client);
            }
            Change::PutPool(pool) => {
                self.next_pool_id = self.next_pool_id.max(pool.id + 1);
                self.pools.insert(pool.id, pool.clone());
            }
            Change::RemovePool { id } => {
                self.pools.remove(id).ok_or_else(|| MapError::UnknownPool(format!("id {id}")))?;
                self.pg_temp.retain(|pg, _| pg.pool != *id);
                self.pg_active.retain(|pg, _| pg.pool != *id);
            }
            Change::PgTemp { entries } => {
                for (pg, osds) in entries {
                    if osds.is_empty() {
                        self.pg_temp.remove(pg);
                    } else {
                        self.pg_temp.insert(*pg, osds.clone());
                    }
                }
            }
            Change::PgHistoryForgotten { pg } => {
                self.pg_active.remove(pg);
            }
            Change::PgActivated { records } => {
                let epoch = self.epoch + 1;
                for r in records {
                    let record = PgActivation {
                        epoch,
                        activated_at: r.activated_at,
                        members: r.members.clone(),
                        holders: r.holders.clone(),
                    };
                    self.pg_active.insert(r.pg, record);
                }
            }
            Change::AddMon { rank, info } => {
                self.mons.insert(*rank, info.clone());
            }
            Change::AuthSet { entity, key } => {
                self.auth.insert(entity.clone(), *key);
            }
            Change::AuthRemove { entity } => {
                self.auth.remove(entity);
            }
            Change::Redacted => {}
        }
        self.epoch += 1;
        if let Some(before) = intervals_before {
            let after = self.pg_intervals();
            for (pg, interval) in &after {
                if before.get(pg) != Some(interval) {
                    self.pg_interval_since.insert(*pg, self.epoch);
                }
            }
            self.pg_interval_since.retain(|pg, _| after.contains_key(pg));
        }
        Ok(())
    }

    /// Applies an incremental received from a monitor; it must produce exactly the next epoch.
    pub fn apply_incremental(&mut self, inc: &Incremental) -> Result<(), MapError> {
        if inc.epoch != self.epoch + 1 {
            return Err(MapError::EpochGap { have: self.epoch, got: inc.epoch });
        }
        self.apply(&inc.change)
    }

    /// Prepares and applies `cmd`, returning the incremental (for tests and the simulation;
    /// the monitor replicates the change between the two steps).
    pub fn execute(&mut self, cmd: &Command) -> Result<Option<Incremental>, MapError> {
        let Some(change) = self.prepare(cmd)? else { return Ok(None) };
        self.apply(&change)?;
        Ok(Some(Incremental { epoch: self.epoch, change }))
    }
}
