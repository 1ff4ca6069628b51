//! Properties of placement as a whole: determinism, weight proportionality, minimal movement,
//! failure-domain separation and unusable OSDs, plus the simulation at scale.
//!
//! Proptest cases use small maps and a few hundred PGs so that the whole file runs in seconds
//! in a debug build; the larger deterministic tests measure the statistics that need many PGs.

use std::collections::BTreeSet;
use std::time::Instant;

use proptest::prelude::*;
use shoal_placement::sim::{self, Change};
use shoal_placement::{
    BucketKind, OsdId, PgId, PlacementError, PlacementMap, SimulateConfig, Weight, pg_for_object, pg_to_osds, select,
    simulate,
};

/// A small random cluster: `racks` racks (0: hosts directly under the root), and per host the raw
/// weights of its OSDs. OSD ids are assigned in order; host `h` is in rack `h % racks`.
#[derive(Debug, Clone)]
struct Spec {
    racks: usize,
    hosts: Vec<Vec<u32>>,
}

fn weight() -> impl Strategy<Value = u32> {
    prop_oneof![1 => Just(0u32), 9 => 1u32..(8 << 16)]
}

fn spec(max_hosts: usize) -> impl Strategy<Value = Spec> {
    (0usize..4, prop::collection::vec(prop::collection::vec(weight(), 1..5), 1..max_hosts))
        .prop_map(|(racks, hosts)| Spec { racks, hosts })
}

fn build(spec: &Spec) -> PlacementMap {
    let mut map = PlacementMap::new();
    for r in 0..spec.racks {
        map.add_rack(&format!("r{r}")).expect("new rack");
    }
    let mut id = 0;
    for (h, osds) in spec.hosts.iter().enumerate() {
        let host = format!("h{h}");
        if spec.racks == 0 {
            map.add_host(&host).expect("new host");
        } else {
            map.add_bucket(&host, BucketKind::Host, &format!("r{}", h % spec.racks)).expect("host in rack");
        }
        for &w in osds {
            map.add_osd(OsdId(id), &host, Weight::from_raw(w)).expect("new osd");
            id += 1;
        }
    }
    map
}

fn next_osd_id(map: &PlacementMap) -> OsdId {
    OsdId(map.osds().map(|(o, _)| o.0 + 1).max().unwrap_or(0))
}

/// Length of the common prefix of the paths root → ... → OSD of `a` and `b` (the OSD itself
/// counts as the last element): 1 when they only share the root, `depth + 1` when `a == b`.
fn affinity(map: &PlacementMap, a: OsdId, b: OsdId) -> usize {
    let pa = map.osd_path(a).expect("osd in map");
    let pb = map.osd_path(b).expect("osd in map");
    let common = pa.iter().zip(&pb).take_while(|(x, y)| x == y).count();
    if common == pa.len() && common == pb.len() && a == b { common + 1 } else { common }
}

fn one_replica(map: &PlacementMap, pgs: u32, usable: impl Fn(OsdId) -> bool) -> Vec<Option<OsdId>> {
    (0..pgs)
        .map(|seed| select(map, PgId { pool: 3, seed }.placement_seed(), 1, BucketKind::Host, &usable).first().copied())
        .collect()
}

/// 64 cases per property keeps this file at a few seconds in debug builds. Failures are not
/// persisted to a file (integration tests have no lib.rs for proptest to sit next to); proptest
/// prints the minimal failing input, which belongs in a regular test.
fn config() -> ProptestConfig {
    ProptestConfig { cases: 64, failure_persistence: None, ..ProptestConfig::default() }
}

proptest! {
    #![proptest_config(config())]

    /// Same inputs, same outputs, also through a serialized copy of the map.
    #[test]
    fn same_inputs_same_outputs(spec in spec(10), pool in any::<u32>(), replicas in 1usize..4) {
        let map = build(&spec);
        let copy: PlacementMap = serde_json::from_str(&serde_json::to_string(&map).expect("ser")).expect("de");
        for seed in 0..50 {
            let a = pg_to_osds(&map, pool, seed, replicas, BucketKind::Host, |_| true);
            let b = pg_to_osds(&map, pool, seed, replicas, BucketKind::Host, |_| true);
            let c = pg_to_osds(&copy, pool, seed, replicas, BucketKind::Host, |_| true);
            prop_assert_eq!(&a, &b);
            prop_assert_eq!(&a, &c);
        }
    }

    /// Results hold only usable OSDs of positive weight, all distinct, as many as asked when
    /// that many exist, on as many distinct hosts as possible: distinct hosts whenever at least
    /// `replicas` hosts have a usable OSD.
    #[test]
    fn usable_distinct_and_separated(
        spec in spec(10),
        down in prop::collection::vec(any::<bool>(), 40),
        replicas in 1usize..5,
    ) {
        let map = build(&spec);
        let usable = |o: OsdId| !down[o.0 as usize % down.len()];
        let eligible: Vec<OsdId> = map.osds().filter(|&(o, w)| w.raw() > 0 && usable(o)).map(|(o, _)| o).collect();
        let usable_hosts: BTreeSet<_> = eligible.iter().map(|&o| map.osd_host(o)).collect();
        for seed in 0..40 {
            let osds = select(&map, PgId { pool: 1, seed }.placement_seed(), replicas, BucketKind::Host, usable);
            prop_assert_eq!(osds.len(), replicas.min(eligible.len()));
            prop_assert!(osds.iter().all(|o| eligible.contains(o)), "{:?} not all eligible", osds);
            let distinct: BTreeSet<_> = osds.iter().collect();
            prop_assert_eq!(distinct.len(), osds.len());
            let hosts: BTreeSet<_> = osds.iter().map(|&o| map.osd_host(o)).collect();
            prop_assert_eq!(hosts.len(), osds.len().min(usable_hosts.len()), "{:?}", osds);
        }
    }

    /// Adding an OSD moves PGs only towards it: a PG that moves gets an OSD strictly closer in
    /// the tree to the new OSD than its old one (same rack, then same host, then the OSD itself).
    /// When the new OSD is alone in a new host under the root, every PG that moves moves onto
    /// it, and the number that move is its weight share within 5 binomial standard deviations.
    #[test]
    fn adding_an_osd_moves_pgs_only_towards_it(
        spec in spec(10),
        w in 1u32..(8 << 16),
        into in any::<prop::sample::Index>(),
        new_host in any::<bool>(),
    ) {
        let map = build(&spec);
        prop_assume!(map.total_weight() > 0);
        let pgs = 600;
        let before = one_replica(&map, pgs, |_| true);
        let mut grown = map.clone();
        let id = next_osd_id(&map);
        let host = if new_host {
            grown.add_host("fresh").expect("new host");
            "fresh".to_string()
        } else {
            format!("h{}", into.index(spec.hosts.len()))
        };
        grown.add_osd(id, &host, Weight::from_raw(w)).expect("new osd");
        let after = one_replica(&grown, pgs, |_| true);
        let mut moved = 0u32;
        for (old, new) in before.iter().zip(&after) {
            let (Some(old), Some(new)) = (old, new) else { prop_assert!(false, "unplaced PG"); continue };
            if old != new {
                moved += 1;
                prop_assert!(affinity(&grown, *new, id) > affinity(&grown, *old, id), "{old} -> {new}, added {id}");
                if new_host {
                    prop_assert_eq!(*new, id);
                }
            }
        }
        if new_host {
            let p = f64::from(w) / (map.total_weight() + u64::from(w)) as f64;
            let expected = f64::from(pgs) * p;
            let sd = (expected * (1.0 - p)).sqrt();
            prop_assert!((f64::from(moved) - expected).abs() <= 5.0 * sd + 1.0, "moved {moved}, expected {expected:.1}");
        }
    }

    /// Marking an OSD out (unusable, map unchanged) moves exactly the PGs that were on it.
    #[test]
    fn marking_out_moves_only_its_pgs(spec in spec(10), which in any::<prop::sample::Index>()) {
        let map = build(&spec);
        let ids: Vec<OsdId> = map.osds().map(|(o, _)| o).collect();
        let out = ids[which.index(ids.len())];
        let before = one_replica(&map, 600, |_| true);
        let after = one_replica(&map, 600, |o| o != out);
        for (old, new) in before.iter().zip(&after) {
            if old != new {
                prop_assert_eq!(*old, Some(out));
            }
            prop_assert_ne!(*new, Some(out));
        }
    }

    /// Removing an OSD from the map lowers its host's (and rack's) weight, so PGs can also move
    /// off the OSD's siblings under the same top-level bucket, but nothing moves elsewhere; when
    /// the OSD is alone in its top-level bucket, exactly its PGs move.
    #[test]
    fn removing_an_osd_moves_only_pgs_near_it(spec in spec(10), which in any::<prop::sample::Index>()) {
        let map = build(&spec);
        let ids: Vec<OsdId> = map.osds().map(|(o, _)| o).collect();
        let gone = ids[which.index(ids.len())];
        let top = map.osd_path(gone).expect("in map")[1];
        let alone = ids.iter().all(|&o| o == gone || map.osd_path(o).expect("in map")[1] != top);
        let mut shrunk = map.clone();
        shrunk.remove_osd(gone).expect("in map");
        let before = one_replica(&map, 600, |_| true);
        let after = one_replica(&shrunk, 600, |_| true);
        for (old, new) in before.iter().zip(&after) {
            if old != new {
                let old = old.expect("placed before, since it moved");
                prop_assert!(affinity(&map, old, gone) >= 2, "{old} moved but is not under {gone}'s top bucket");
                if alone {
                    prop_assert_eq!(old, gone);
                }
            }
        }
    }

        /// Setting an OSD's weight to zero moves the same PGs as removing it, so removing it
    /// afterwards moves nothing more.
    #[test]
    fn zero_weight_then_remove_moves_nothing_more(spec in spec(8), which in any::<prop::sample::Index>(), replicas in 1usize..4) {
        let map = build(&spec);
        let ids: Vec<OsdId> = map.osds().map(|(o, _)| o).collect();
        let gone = ids[which.index(ids.len())];
        let mut zeroed = map.clone();
        zeroed.set_weight(gone, Weight::ZERO).expect("in map");
        let mut removed = zeroed.clone();
        removed.remove_osd(gone).expect("in map");
        let a = sim::map_pgs(&zeroed, 2, 200, replicas, BucketKind::Host, |_| true);
        let b = sim::map_pgs(&removed, 2, 200, replicas, BucketKind::Host, |_| true);
        prop_assert_eq!(a, b);
    }

    /// Growing pg_num from n to m moves an object only to a new PG (>= n) descending from its
    /// old PG.
    #[test]
    fn growing_pg_num_splits_pgs(n in 1u32..3000, extra in 1u32..6000, names in prop::collection::vec("[a-z0-9._-]{1,40}", 1..50)) {
        let m = n + extra;
        for name in &names {
            let old = pg_for_object(5, n, name).expect("valid pg_num").seed;
            let new = pg_for_object(5, m, name).expect("valid pg_num").seed;
            if old != new {
                prop_assert!(new >= n && new < m);
                prop_assert_eq!(shoal_placement::pg::pg_ancestor(new, n), old);
            }
        }
    }
}

/// Placement of a fixed map, pinned: a failure means every existing cluster's data would move.
#[test]
fn placement_is_pinned() {
    let mut map = PlacementMap::new();
    for h in 0..4u32 {
        let host = format!("h{h}");
        map.add_host(&host).expect("new host");
        for i in 0..3 {
            map.add_osd(OsdId(h * 3 + i), &host, Weight::from_units(1 + i as u16)).expect("new osd");
        }
    }
    let got: Vec<Vec<u32>> = (0..6)
        .map(|seed| {
            pg_to_osds(&map, 1, seed, 3, BucketKind::Host, |_| true).expect("placed").iter().map(|o| o.0).collect()
        })
        .collect();
    assert_eq!(got, PINNED);
}

const PINNED: [[u32; 3]; 6] = [[11, 0, 5], [8, 2, 11], [8, 3, 2], [2, 8, 11], [4, 2, 11], [10, 3, 0]];

#[test]
fn pg_to_osds_errors() {
    let mut map = PlacementMap::new();
    map.add_host("h").expect("new host");
    assert_eq!(
        pg_to_osds(&map, 1, 0, 3, BucketKind::Host, |_| true),
        Err(PlacementError::NoUsableOsd(PgId { pool: 1, seed: 0 }))
    );
    map.add_osd(OsdId(1), "h", Weight::ONE).expect("new osd");
    assert_eq!(
        pg_to_osds(&map, 1, 0, 3, BucketKind::Rack, |_| true),
        Err(PlacementError::NoFailureDomain(BucketKind::Rack))
    );
    assert_eq!(pg_to_osds(&map, 1, 0, 3, BucketKind::Host, |_| true), Ok(vec![OsdId(1)]));
    assert_eq!(pg_to_osds(&map, 1, 0, 0, BucketKind::Host, |_| true), Ok(vec![]));
    assert!(matches!(pg_to_osds(&map, 1, 0, 3, BucketKind::Host, |_| false), Err(PlacementError::NoUsableOsd(_))));
    map.set_weight(OsdId(1), Weight::ZERO).expect("in map");
    assert!(matches!(pg_to_osds(&map, 1, 0, 1, BucketKind::Host, |_| true), Err(PlacementError::NoUsableOsd(_))));
}

/// Per-OSD shares are within ±5% of weight shares once each OSD holds enough PGs for sampling
/// noise to be small: 10 OSDs and 400,000 PGs (16,000 to 64,000 per OSD, relative standard
/// deviation at most 0.8%, so 5% is over 6 standard deviations).
#[test]
fn per_osd_share_within_5_percent_when_sampling_noise_allows() {
    let mut config = SimulateConfig::new(10, 400_000, 1);
    config.osds_per_host = 1;
    let map = sim::build_map(&config).expect("valid config");
    let pgs = sim::map_pgs(&map, 1, config.pgs, 1, BucketKind::Host, |_| true);
    let report = sim::balance(&map, &pgs, 1, BucketKind::Host);
    eprintln!("10 OSDs / 400k PGs: {report:?}");
    assert!(report.max_rel_deviation < 0.05, "{report:?}");
}

/// The requested check at 1,000 OSDs and 100,000 PGs with 1 replica.
///
/// A per-OSD ±5% bound is not statistically reachable at this size, whatever the placement
/// function: an OSD expecting `e` PGs gets a binomial count with relative standard deviation
/// about `1/sqrt(e)`. Here `e` is 40 to 160 (weights 1 to 4, mean 100), so relative noise is 8%
/// to 16%, and the largest of 1,000 such deviations is typically 3.3 standard deviations (over
/// 40% for the lightest OSDs). We measured a max relative deviation of 42.5%, a max z-score of
/// 3.5 and a mean absolute relative deviation of 8.9% (the binomial expectation is 8.8%).
///
/// What is sound, and tested here:
/// - chi-square over OSDs is within 5 standard deviations of its degrees of freedom (placement
///   is as close to weight-proportional as independent random placement can be);
/// - no OSD deviates by more than 5 binomial standard deviations;
/// - the mean absolute relative deviation is within 15% of its binomial expectation;
/// - aggregated per weight class (250 OSDs, 10,000 to 40,000 PGs each) shares are within ±5%
///   of weight shares (that is at least 5 standard deviations of noise);
/// - per host (about 1,000 PGs, noise about 3%), within 5 standard deviations.
///
/// With 3 replicas the per-OSD variance is similar: each OSD's count is still a sum of
/// near-independent draws, with relative standard deviation `1/sqrt(expected copies)`
/// (the simulate report shows it, and the distinct-host rule adds only slight negative
/// correlation).
#[test]
fn proportional_to_weight_1000_osds_100k_pgs() {
    let config = SimulateConfig::new(1000, 100_000, 1);
    let map = sim::build_map(&config).expect("valid config");
    let started = Instant::now();
    let pgs = sim::map_pgs(&map, 1, config.pgs, 1, BucketKind::Host, |_| true);
    let report = sim::balance(&map, &pgs, 1, BucketKind::Host);
    eprintln!("1000 OSDs / 100k PGs / 1 replica in {:?}: {report:?}", started.elapsed());

    let df = report.degrees_of_freedom as f64;
    assert!((report.chi_square - df).abs() < 5.0 * (2.0 * df).sqrt(), "{report:?}");
    assert!(report.max_abs_z < 5.0, "{report:?}");

    let total = map.total_weight() as f64 / 65536.0;
    let n = f64::from(config.pgs);
    let mut expected_mad = 0.0;
    let mut class_counts = [0u64; 4];
    let mut class_weight = [0f64; 4];
    let mut counts = std::collections::BTreeMap::new();
    for pg in &pgs {
        *counts.entry(pg[0]).or_insert(0u64) += 1;
    }
    for (osd, w) in map.osds() {
        let p = w.as_f64() / total;
        let e = n * p;
        expected_mad += (2.0 / std::f64::consts::PI).sqrt() * (e * (1.0 - p)).sqrt() / e;
        let class = osd.0 as usize % 4;
        class_counts[class] += counts.get(&osd).copied().unwrap_or(0);
        class_weight[class] += w.as_f64();
    }
    expected_mad /= map.osd_count() as f64;
    let mad_ratio = report.mean_abs_rel_deviation / expected_mad;
    eprintln!("mean abs rel deviation {:.4}, binomial expectation {expected_mad:.4}", report.mean_abs_rel_deviation);
    assert!((0.85..1.15).contains(&mad_ratio), "MAD ratio {mad_ratio}");
    for class in 0..4 {
        let share = class_counts[class] as f64 / n;
        let expected = class_weight[class] / total;
        let rel = (share - expected).abs() / expected;
        eprintln!("weight class {}: share {share:.4}, weight share {expected:.4}, deviation {rel:.4}", class + 1);
        assert!(rel < 0.05, "class {class}: {share} vs {expected}");
    }
    let host_expected = n / 100.0;
    assert!(report.host_max_rel_deviation < 5.0 / host_expected.sqrt(), "{report:?}");
}

/// Movement at 100 OSDs (10 hosts directly under the root), 100,000 PGs, 1 replica.
///
/// Adding an OSD of weight w = 4 in a new host: exactly the PGs that now map to it move, and
/// their number is Binomial(N, w / (W + w)): about 1,575 of 100,000 with a standard deviation
/// of 40, so a 5-sigma tolerance is ±12.6% of the expected count. Added to an existing host, the
/// host's weight grows and PGs also move from other hosts onto the host's old OSDs (straw2 is
/// minimal per level, not across levels; Ceph behaves the same): measured, bounded by the
/// movement into the host. Marking an OSD out moves exactly its PGs; removing it from the map
/// moves its PGs plus some from its host siblings.
#[test]
fn movement_when_adding_and_removing_one_osd() {
    let mut config = SimulateConfig::new(100, 100_000, 1);
    config.hosts_per_rack = 0;
    config.added_weight = Weight::from_units(4);
    let report = simulate(&config).expect("valid config");
    eprintln!("{}", serde_json::to_string_pretty(&report).expect("serializes"));

    let new_host = &report.add_in_new_host;
    assert!(new_host.minimal, "{new_host:?}");
    let n = 100_000.0;
    let expected = n * new_host.ideal_fraction;
    let sd = (expected * (1.0 - new_host.ideal_fraction)).sqrt();
    assert!((new_host.target_copies as f64 - expected).abs() < 5.0 * sd, "{new_host:?}");

    let existing = &report.add_to_existing_host;
    assert!((existing.target_copies as f64 - expected).abs() < 5.0 * sd, "{existing:?}");
    // Extra movement lands on the host's old OSDs; it is at most the weight share that the host
    // gains, times the share of the host held by old OSDs, plus noise: well under 2x here.
    assert!(existing.copies_moved < 2 * existing.target_copies, "{existing:?}");

    let out = &report.mark_out;
    assert!(out.minimal, "{out:?}");
    let removed = &report.remove_from_map;
    assert_eq!(removed.target_copies, out.target_copies);
}

/// With 3 replicas and host failure domain (20 hosts of 5 OSDs), marking one OSD out leaves
/// every PG that did not hold it unchanged, and in the PGs that held it, usually only that slot
/// changes. Other slots change when the new OSD's host collides with a later slot's host, or a
/// later slot had skipped a draw because of the old OSD's host: about (later slots) / (hosts)
/// of the PGs involved. Measured and bounded here.
#[test]
fn down_osd_changes_little_besides_its_slot() {
    let mut config = SimulateConfig::new(100, 20_000, 3);
    config.osds_per_host = 5;
    config.hosts_per_rack = 0;
    let map = sim::build_map(&config).expect("valid config");
    let before = sim::map_pgs(&map, 1, config.pgs, 3, BucketKind::Host, |_| true);
    let mut worst: f64 = 0.0;
    for down in [OsdId(0), OsdId(37), OsdId(99)] {
        let after = sim::map_pgs(&map, 1, config.pgs, 3, BucketKind::Host, |o| o != down);
        let w = map.osd_weight(down).expect("in map").as_f64();
        let total = map.total_weight() as f64 / 65536.0;
        let r = sim::movement(&before, &after, down, Change::Removed, w, total);
        let collateral = r.collateral_pgs as f64 / r.target_copies as f64;
        eprintln!(
            "{down} down: {} PGs held it, {} had another slot change ({collateral:.3}); {r:?}",
            r.target_copies, r.collateral_pgs
        );
        assert_eq!(r.untouched_pgs_changed, 0, "{r:?}");
        assert!(after.iter().all(|pg| pg.len() == 3 && !pg.contains(&down)));
        worst = worst.max(collateral);
    }
    assert!(worst < 0.15, "collateral fraction {worst}");
}

/// `simulate` at 10,000 OSDs (1,000 hosts in 32 racks) and 100,000 PGs with 1 replica: five
/// full mappings, a few seconds in a debug build. (3 replicas take three times as long; see the
/// ignored test below.)
#[test]
fn simulate_10k_osds_100k_pgs() {
    let started = Instant::now();
    let report = simulate(&SimulateConfig::new(10_000, 100_000, 1)).expect("valid config");
    eprintln!("simulate 10k OSDs / 100k PGs / 1 replica in {:?}", started.elapsed());
    eprintln!("{}", serde_json::to_string_pretty(&report).expect("serializes"));
    check_simulation(&report);
}

/// The same with 3 replicas: about three times slower (run with `--ignored`).
#[test]

fn simulate_10k_osds_100k_pgs_3_replicas() {
    let started = Instant::now();
    let report = simulate(&SimulateConfig::new(10_000, 100_000, 3)).expect("valid config");
    eprintln!("simulate 10k OSDs / 100k PGs / 3 replicas in {:?}", started.elapsed());
    eprintln!("{}", serde_json::to_string_pretty(&report).expect("serializes"));
    check_simulation(&report);
}

fn check_simulation(report: &sim::SimulationReport) {
    let b = &report.balance;
    assert_eq!(b.short_pgs, 0);
    assert_eq!(b.repeated_domain_pgs, 0);
    let df = b.degrees_of_freedom as f64;
    assert!((b.chi_square - df).abs() < 5.0 * (2.0 * df).sqrt(), "{b:?}");
    // 10,000 OSDs: the chance that any exceeds 5.5 sigma by noise alone is below 0.1%.
    assert!(b.max_abs_z < 5.5, "{b:?}");
    assert!(report.mark_out.minimal || report.config.replicas > 1, "{:?}", report.mark_out);
    assert_eq!(report.mark_out.untouched_pgs_changed, 0);
    // The new OSD gets its weight share of copies, within 5 binomial standard deviations.
    let copies = b.copies as f64;
    for add in [&report.add_to_existing_host, &report.add_in_new_host] {
        let expected = copies * add.ideal_fraction;
        let sd = (expected * (1.0 - add.ideal_fraction)).sqrt();
        assert!((add.target_copies as f64 - expected).abs() < 5.0 * sd + 1.0, "{add:?}");
    }
}
