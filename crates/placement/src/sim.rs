//! Simulation of a cluster's placement: balance, and data movement when OSDs come and go.
//!
//! [`simulate`] builds a synthetic map (OSDs spread over hosts, hosts optionally grouped in
//! racks, weights from a fixed pattern), maps every PG of one pool, and reports:
//! - how closely each OSD's share of PG copies follows its share of weight ([`BalanceReport`]),
//!   with the statistics needed to judge it (the expected sampling noise, chi-square);
//! - how many copies move when one OSD is added (to an existing host, and in a new host), when
//!   one is marked out (`is_usable` false, map unchanged) and when one is removed from the map
//!   ([`MovementReport`]), compared with the minimum: only the copies that must land on the new
//!   OSD, or leave the old one.
//!
//! Everything is deterministic: the same configuration gives the same report. The pieces
//! ([`build_map`], [`map_pgs`], [`balance`], [`movement`]) are public for tests and tools.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::error::PlacementError;
use crate::map::{BucketKind, OsdId, PlacementMap, Weight};
use crate::pg::PgId;
use crate::select::select;

/// Weights of the simulated OSDs: OSD `i` gets `WEIGHT_PATTERN[i % 4]` (1, 2, 3, 4 TiB), a mix
/// of disk sizes in every host.
pub const WEIGHT_PATTERN: [Weight; 4] =
    [Weight::from_units(1), Weight::from_units(2), Weight::from_units(3), Weight::from_units(4)];

/// What to simulate. [`SimulateConfig::new`] fills in the usual shape.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SimulateConfig {
    /// Number of OSDs, at least 1.
    pub osds: usize,
    /// Number of PGs in the pool, at least 1.
    pub pgs: u32,
    /// Copies per PG, at least 1.
    pub replicas: usize,
    /// OSDs per host, at least 1 (the last host may have fewer).
    pub osds_per_host: usize,
    /// Hosts per rack; 0 puts hosts directly under the root.
    pub hosts_per_rack: usize,
    /// Failure domain of the pool.
    pub failure_domain: BucketKind,
    /// Weight of the OSD added in the movement experiments.
    pub added_weight: Weight,
    /// Pool id (it seeds placement).
    pub pool: u32,
}

impl SimulateConfig {
    /// `osds` OSDs, 10 per host, 32 hosts per rack, host failure domain, an added OSD of weight
    /// 2 (the pattern's mean is 2.5), pool 1.
    pub fn new(osds: usize, pgs: u32, replicas: usize) -> SimulateConfig {
        SimulateConfig {
            osds,
            pgs,
            replicas,
            osds_per_host: 10,
            hosts_per_rack: 32,
            failure_domain: BucketKind::Host,
            added_weight: Weight::from_units(2),
            pool: 1,
        }
    }

    fn check(&self) -> Result<(), PlacementError> {
        let bad = |what: &str| Err(PlacementError::InvalidArgument(what.to_string()));
        if self.osds == 0 || u32::try_from(self.osds).is_err() {
            return bad("osds must be between 1 and 2^32 - 1");
        }
        if self.pgs == 0 {
            return bad("pgs must be at least 1");
        }
        if self.replicas == 0 {
            return bad("replicas must be at least 1");
        }
        if self.osds_per_host == 0 {
            return bad("osds_per_host must be at least 1");
        }
        Ok(())
    }
}

/// How the PG copies are spread over OSDs, compared with their weights.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BalanceReport {
    /// PG copies placed (PGs times replicas, less any short PGs).
    pub copies: u64,
    /// PGs that got fewer OSDs than replicas.
    pub short_pgs: u64,
    /// PGs with two copies in one failure domain.
    pub repeated_domain_pgs: u64,
    /// Largest `|count - expected| / expected` over OSDs of positive weight, where `expected =
    /// copies * weight / total weight`.
    pub max_rel_deviation: f64,
    /// The OSD where it occurs.
    pub max_rel_deviation_osd: Option<OsdId>,
    /// Mean of `|count - expected| / expected`.
    pub mean_abs_rel_deviation: f64,
    /// Relative standard deviation expected from sampling alone for an OSD of mean weight:
    /// `1 / sqrt(expected count)` (binomial noise). A perfect placement function cannot do
    /// better than this; the maximum over many OSDs is typically 3 to 4 times larger.
    pub expected_rel_stddev: f64,
    /// Largest `|count - expected| / sqrt(expected * (1 - p))`, the deviation in standard
    /// deviations of binomial noise.
    pub max_abs_z: f64,
    /// `sum((count - expected)^2 / expected)`; for independent placement it is near its
    /// degrees of freedom (with standard deviation `sqrt(2 * df)`).
    pub chi_square: f64,
    /// Number of OSDs of positive weight minus one.
    pub degrees_of_freedom: u64,
    /// Largest relative deviation of a host's total count from its weight share.
    pub host_max_rel_deviation: f64,
}

/// Data movement between two mappings of the same PGs, around one OSD (the target): added in
/// the second mapping, or made unusable or removed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MovementReport {
    /// The OSD added or taken away.
    pub osd: OsdId,
    /// Its weight, in units.
    pub weight: f64,
    /// Its weight over the total weight of the map that contains it: the share of copies it
    /// should hold, so the minimum fraction of copies that must move.
    pub ideal_fraction: f64,
    /// PGs whose OSD list changed in any way (membership or order).
    pub pgs_changed: u64,
    /// New copies to create: for every PG, OSDs in the new list that were not in the old one.
    pub copies_moved: u64,
    /// `copies_moved` over the copies of the first mapping.
    pub moved_fraction: f64,
    /// Copies that had to move: onto the added OSD, or off the removed one.
    pub target_copies: u64,
    /// `target_copies` over the copies of the first mapping.
    pub target_fraction: f64,
    /// Copies moved beyond those: between OSDs that were there all along.
    pub extra_copies: u64,
    /// PGs that changed without involving the target OSD at all.
    pub untouched_pgs_changed: u64,
    /// PGs involving the target where some slot other than the target's also changed (the
    /// "only that slot changes" property, measured).
    pub collateral_pgs: u64,
    /// PGs whose primary (first OSD) changed.
    pub primaries_changed: u64,
    /// True when nothing moved but the target's copies.
    pub minimal: bool,
}

/// Whether the target OSD of a [`movement`] comparison was added or taken away.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// The target is new in the second mapping.
    Added,
    /// The target was removed, or made unusable, in the second mapping.
    Removed,
}

/// The full result of [`simulate`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SimulationReport {
    /// What was simulated.
    pub config: SimulateConfig,
    /// Number of hosts built.
    pub hosts: usize,
    /// Number of racks built (0 when hosts sit under the root).
    pub racks: usize,
    /// Total weight in units.
    pub total_weight: f64,
    /// Balance of the initial map.
    pub balance: BalanceReport,
    /// One OSD of `added_weight` added to the first host.
    pub add_to_existing_host: MovementReport,
    /// One OSD of `added_weight` added in a new host (in the last rack, if there are racks).
    pub add_in_new_host: MovementReport,
    /// OSD 0 marked out: `is_usable` refuses it, the map is unchanged.
    pub mark_out: MovementReport,
    /// OSD 0 removed from the map (its host's and rack's weights drop).
    pub remove_from_map: MovementReport,
}

/// The weight of simulated OSD `i`.
pub fn pattern_weight(i: usize) -> Weight {
    WEIGHT_PATTERN[i % WEIGHT_PATTERN.len()]
}

/// The synthetic map of `config`: OSD `i` is in host `i / osds_per_host` ("host-H"), host `h` in
/// rack `h / hosts_per_rack` ("rack-R") when racks are asked for, with [`pattern_weight`]s.
pub fn build_map(config: &SimulateConfig) -> Result<PlacementMap, PlacementError> {
    config.check()?;
    let hosts = config.osds.div_ceil(config.osds_per_host);
    let mut map = PlacementMap::new();
    for h in 0..hosts {
        let host = format!("host-{h}");
        match h.checked_div(config.hosts_per_rack) {
            None => map.add_host(&host)?,
            Some(r) => {
                let rack = format!("rack-{r}");
                if map.bucket_id(&rack).is_none() {
                    map.add_rack(&rack)?;
                }
                map.add_bucket(&host, BucketKind::Host, &rack)?
            }
        };
    }
    for i in 0..config.osds {
        let id = u32::try_from(i).map_err(|_| PlacementError::InvalidArgument("too many OSDs".to_string()))?;
        map.add_osd(OsdId(id), &format!("host-{}", i / config.osds_per_host), pattern_weight(i))?;
    }
    Ok(map)
}

/// The OSD lists of PGs `0..pgs` of `pool`, in seed order.
pub fn map_pgs(
    map: &PlacementMap,
    pool: u32,
    pgs: u32,
    replicas: usize,
    failure_domain: BucketKind,
    is_usable: impl Fn(OsdId) -> bool,
) -> Vec<Vec<OsdId>> {
    (0..pgs)
        .map(|seed| select(map, PgId { pool, seed }.placement_seed(), replicas, failure_domain, &is_usable))
        .collect()
}

/// How `mappings` (as from [`map_pgs`] with `replicas` copies) spread over `map`'s OSDs compared
/// with their weights. OSDs of zero weight are left out of the statistics.
pub fn balance(
    map: &PlacementMap,
    mappings: &[Vec<OsdId>],
    replicas: usize,
    failure_domain: BucketKind,
) -> BalanceReport {
    let osds: Vec<(OsdId, Weight)> = map.osds().filter(|(_, w)| w.raw() > 0).collect();
    let index: BTreeMap<OsdId, usize> = osds.iter().enumerate().map(|(i, (o, _))| (*o, i)).collect();
    let domain_of: Vec<_> = osds.iter().map(|(o, _)| map.osd_ancestor(*o, failure_domain)).collect();
    let host_of: Vec<_> = osds.iter().map(|(o, _)| map.osd_host(*o)).collect();
    let mut counts = vec![0u64; osds.len()];
    let (mut copies, mut short_pgs, mut repeated_domain_pgs) = (0u64, 0u64, 0u64);
    for pg in mappings {
        if pg.len() < replicas {
            short_pgs += 1;
        }
        let mut domains = Vec::with_capacity(pg.len());
        for osd in pg {
            if let Some(&i) = index.get(osd) {
                counts[i] += 1;
                copies += 1;
                if let Some(d) = domain_of[i] {
                    domains.push(d);
                }
            }
        }
        let n = domains.len();
        domains.sort();
        domains.dedup();
        if domains.len() < n {
            repeated_domain_pgs += 1;
        }
    }
    let total_weight: f64 = osds.iter().map(|(_, w)| w.as_f64()).sum();
    let mut report = BalanceReport {
        copies,
        short_pgs,
        repeated_domain_pgs,
        max_rel_deviation: 0.0,
        max_rel_deviation_osd: None,
        mean_abs_rel_deviation: 0.0,
        expected_rel_stddev: 0.0,
        max_abs_z: 0.0,
        chi_square: 0.0,
        degrees_of_freedom: (osds.len() as u64).saturating_sub(1),
        host_max_rel_deviation: 0.0,
    };
    if osds.is_empty() || copies == 0 {
        return report;
    }
    let mut host_counts: BTreeMap<_, (u64, f64)> = BTreeMap::new();
    let mut sum_abs_rel = 0.0;
    for (i, (osd, w)) in osds.iter().enumerate() {
        let p = w.as_f64() / total_weight;
        let expected = copies as f64 * p;
        let diff = counts[i] as f64 - expected;
        let rel = diff.abs() / expected;
        sum_abs_rel += rel;
        if rel > report.max_rel_deviation {
            report.max_rel_deviation = rel;
            report.max_rel_deviation_osd = Some(*osd);
        }
        report.chi_square += diff * diff / expected;
        let sd = (expected * (1.0 - p)).sqrt();
        if sd > 0.0 {
            report.max_abs_z = report.max_abs_z.max(diff.abs() / sd);
        }
        let host = host_counts.entry(host_of[i]).or_insert((0, 0.0));
        host.0 += counts[i];
        host.1 += expected;
    }
    report.mean_abs_rel_deviation = sum_abs_rel / osds.len() as f64;
    report.expected_rel_stddev = 1.0 / (copies as f64 / osds.len() as f64).sqrt();
    report.host_max_rel_deviation =
        host_counts.values().filter(|(_, e)| *e > 0.0).map(|&(c, e)| (c as f64 - e).abs() / e).fold(0.0, f64::max);
    report
}

/// Compares two mappings of the same PGs around `target`, which was added (`Change::Added`) or
/// taken away (`Change::Removed`) between them. `weight` is the target's weight and
/// `total_weight` the total weight of the map that contains it (both in units), for
/// `ideal_fraction`. Contract: `before` and `after` list the same PGs in the same order (extra
/// entries of the longer one are ignored).
pub fn movement(
    before: &[Vec<OsdId>],
    after: &[Vec<OsdId>],
    target: OsdId,
    change: Change,
    weight: f64,
    total_weight: f64,
) -> MovementReport {
    let mut r = MovementReport {
        osd: target,
        weight,
        ideal_fraction: if total_weight > 0.0 { weight / total_weight } else { 0.0 },
        pgs_changed: 0,
        copies_moved: 0,
        moved_fraction: 0.0,
        target_copies: 0,
        target_fraction: 0.0,
        extra_copies: 0,
        untouched_pgs_changed: 0,
        collateral_pgs: 0,
        primaries_changed: 0,
        minimal: true,
    };
    let mut copies_before = 0u64;
    for (old, new) in before.iter().zip(after) {
        copies_before += old.len() as u64;
        if old == new {
            continue;
        }
        r.pgs_changed += 1;
        if old.first() != new.first() {
            r.primaries_changed += 1;
        }
        let fresh = new.iter().filter(|o| !old.contains(o)).count() as u64;
        r.copies_moved += fresh;
        let (slot, involved) = match change {
            Change::Added => (new.iter().position(|&o| o == target), new.contains(&target)),
            Change::Removed => (old.iter().position(|&o| o == target), old.contains(&target)),
        };
        if !involved {
            r.untouched_pgs_changed += 1;
            r.extra_copies += fresh;
            continue;
        }
        r.target_copies += 1;
        // One fresh copy is the target itself (added) or its replacement (removed).
        r.extra_copies += fresh.saturating_sub(1);
        let len = old.len().max(new.len());
        if (0..len).any(|i| Some(i) != slot && old.get(i) != new.get(i)) {
            r.collateral_pgs += 1;
        }
    }
    if copies_before > 0 {
        r.moved_fraction = r.copies_moved as f64 / copies_before as f64;
        r.target_fraction = r.target_copies as f64 / copies_before as f64;
    }
    r.minimal = r.extra_copies == 0 && r.untouched_pgs_changed == 0;
    r
}

/// Runs the whole simulation of `config` (see the module docs). Cost: five mappings of all PGs,
/// each about `pgs * replicas` straw2 descents. Errors: a parameter out of range.
pub fn simulate(config: &SimulateConfig) -> Result<SimulationReport, PlacementError> {
    let map = build_map(config)?;
    let (pool, pgs, replicas, fd) = (config.pool, config.pgs, config.replicas, config.failure_domain);
    let all = |_: OsdId| true;
    let base = map_pgs(&map, pool, pgs, replicas, fd, all);
    let balance = balance(&map, &base, replicas, fd);
    let total = map.total_weight() as f64 / 65536.0;
    let added = config.added_weight.as_f64();
    let new_osd =
        OsdId(u32::try_from(config.osds).map_err(|_| PlacementError::InvalidArgument("too many OSDs".into()))?);

    let mut grown = map.clone();
    grown.add_osd(new_osd, "host-0", config.added_weight)?;
    let after = map_pgs(&grown, pool, pgs, replicas, fd, all);
    let add_to_existing_host = movement(&base, &after, new_osd, Change::Added, added, total + added);

    let mut grown = map.clone();
    let new_host = "host-new";
    let racks = map.buckets_of_kind(BucketKind::Rack);
    match racks.last().and_then(|&r| map.bucket_name(r)) {
        Some(rack) => grown.add_bucket(new_host, BucketKind::Host, rack)?,
        None => grown.add_host(new_host)?,
    };
    grown.add_osd(new_osd, new_host, config.added_weight)?;
    let after = map_pgs(&grown, pool, pgs, replicas, fd, all);
    let add_in_new_host = movement(&base, &after, new_osd, Change::Added, added, total + added);

    let gone = OsdId(0);
    let gone_weight = map.osd_weight(gone).map_or(0.0, Weight::as_f64);
    let after = map_pgs(&map, pool, pgs, replicas, fd, |o| o != gone);
    let mark_out = movement(&base, &after, gone, Change::Removed, gone_weight, total);

    let mut shrunk = map.clone();
    shrunk.remove_osd(gone)?;
    let after = map_pgs(&shrunk, pool, pgs, replicas, fd, all);
    let remove_from_map = movement(&base, &after, gone, Change::Removed, gone_weight, total);

    Ok(SimulationReport {
        config: config.clone(),
        hosts: map.buckets_of_kind(BucketKind::Host).len(),
        racks: racks.len(),
        total_weight: total,
        balance,
        add_to_existing_host,
        add_in_new_host,
        mark_out,
        remove_from_map,
    })
}
