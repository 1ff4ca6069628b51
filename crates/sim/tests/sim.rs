//! The deterministic cluster simulation: writes and reads through simulated OSDs with delayed,
//! reordered and lost messages, crashed OSDs and map changes; replays exactly from its seed.

use shoal_map::OsdId;
use shoal_osd::Mutations;
use shoal_sim::{Fault, Outcome, SimConfig, Simulation};

const MAX_EVENTS: u64 = 2_000_000;

/// Runs `config(seed)` for every seed and checks what every run must hold: no violation (every
/// read matched the model, every replica current at the end where the run checks it) and every
/// write acknowledged. Returns the outcomes for the test's own checks.
fn run_seeds(seeds: std::ops::RangeInclusive<u64>, config: impl Fn(u64) -> SimConfig) -> Vec<Outcome> {
    seeds
        .map(|seed| {
            let cfg = config(seed);
            let out = Simulation::new(cfg.clone()).run(MAX_EVENTS);
            assert!(out.violations.is_empty(), "seed {seed}: {:?}", out.violations);
            assert_eq!(out.acked_writes, u64::from(cfg.clients * cfg.writes_per_client), "seed {seed}");
            out
        })
        .collect()
}

fn total(outs: &[Outcome], f: impl Fn(&Outcome) -> u64) -> u64 {
    outs.iter().map(f).sum()
}

#[test]
fn writes_and_reads_survive_delays_and_reordering() {
    let outs = run_seeds(1..=5, |seed| SimConfig { seed, ..SimConfig::default() });
    assert!(outs.iter().all(|o| o.verified_reads > 0));
}

#[test]
fn a_seed_replays_exactly_and_different_seeds_differ() {
    let cfg = SimConfig { seed: 42, ..SimConfig::default() };
    let a = Simulation::new(cfg.clone()).run(MAX_EVENTS);
    let b = Simulation::new(cfg).run(MAX_EVENTS);
    assert_eq!(a, b);
    let c = Simulation::new(SimConfig { seed: 43, ..SimConfig::default() }).run(MAX_EVENTS);
    assert_ne!(a.trace_hash, c.trace_hash);
}

#[test]
fn clients_follow_a_map_change_mid_run() {
    let outs = run_seeds(1..=5, |seed| SimConfig {
        seed,
        faults: vec![(20_000, Fault::Out(OsdId(1)))],
        ..SimConfig::default()
    });
    assert!(outs.iter().all(|o| o.epoch > 1));
    // Some requests reached an OSD whose map disagreed with the client's and were resent.
    assert!(total(&outs, |o| o.resends) > 0, "no request was ever redirected by the map change");
}

#[test]
fn lost_messages_and_resends_apply_each_append_once() {
    // Every read compares the whole object with the model's concatenation of acknowledged
    // appends: an append applied twice (a resend not recognised) would show.
    let outs = run_seeds(1..=5, |seed| SimConfig {
        seed,
        appends: true,
        drop_client_per_mille: 100,
        client_timeout_us: 20_000,
        writes_per_client: 40,
        ..SimConfig::default()
    });
    let (dropped, resends) = (total(&outs, |o| o.dropped), total(&outs, |o| o.resends));
    assert!(dropped > 0 && resends > 0, "the network lost nothing ({dropped} dropped, {resends} resends)");
}

#[test]
fn an_osd_crashed_and_restarted_on_its_store_ends_with_every_replica_current() {
    // osd.1 dies 15 ms in and comes back 45 ms in, before the monitors would mark it down: writes
    // that needed it fail and are resent, and the final check reads every acknowledged object on
    // every OSD of its acting set, osd.1 included.
    let outs = run_seeds(1..=6, |seed| SimConfig {
        seed,
        faults: vec![(15_000, Fault::Crash(OsdId(1))), (45_000, Fault::Restart(OsdId(1)))],
        client_timeout_us: 10_000,
        ..SimConfig::default()
    });
    assert!(total(&outs, |o| o.resends) > 0, "the crash never made a client resend");
}

#[test]
fn lost_replication_messages_end_with_every_replica_current() {
    // 5% of replicated writes and of their answers are lost: the primary times out, the client
    // resends, and the write is applied again wherever it is missing. The final check reads every
    // acknowledged object on every OSD of its acting set.
    let outs = run_seeds(1..=5, |seed| SimConfig {
        seed,
        drop_replication_per_mille: 50,
        replication_timeout_us: 5_000,
        client_timeout_us: 10_000,
        ..SimConfig::default()
    });
    assert!(total(&outs, |o| o.resends) > 0, "no replication message was ever lost");
}

/// Nemesis seeds in CI (the `shoal-sim` binary runs thousands: `shoal-sim --seeds 10000`).
const NEMESIS_SEEDS: u64 = 500;

#[test]
fn nemesis_seeds_keep_every_acknowledged_write() {
    // Every read returns the last acknowledged write (an older one would be a rollback, a longer
    // one an append applied twice), every write is acknowledged in the end, the cluster comes back
    // to active+clean, and every acknowledged object is then on exactly its acting set.
    let outs = run_seeds(1..=NEMESIS_SEEDS, SimConfig::nemesis);
    assert!(total(&outs, |o| o.resends) > 0);
    assert!(total(&outs, |o| o.verified_reads) > NEMESIS_SEEDS);
}

/// Nemesis seeds with backfill in parts in CI.
const NEMESIS_PARTS_SEEDS: u64 = 200;

#[test]
fn nemesis_seeds_with_backfill_in_parts_keep_every_acknowledged_write() {
    // The same checks with every object larger than a backfill chunk: backfilled in parts, with
    // writes landing between them.
    let outs = run_seeds(1..=NEMESIS_PARTS_SEEDS, SimConfig::nemesis_in_parts);
    assert!(total(&outs, |o| o.verified_reads) > NEMESIS_PARTS_SEEDS);
    // Backfills slow enough to be interrupted: some members peered again mid-way go on past
    // their cursors (decision 0048), with the writes they missed compared from the log.
    let (started, resumed) = (total(&outs, |o| o.backfills_started), total(&outs, |o| o.backfills_resumed));
    assert!(resumed > 0 && started > resumed, "backfills: {started} started, {resumed} resumed");
}

#[test]
fn nemesis_seeds_with_omap_in_parts_keep_every_acknowledged_write() {
    // Every write also sets omap entries, every owner's read checks the omap against the model,
    // and the chunks are smaller than an object's omap: objects recover, are pulled and are
    // backfilled with their omap in parts (decision 0044), under the same faults.
    let outs = run_seeds(1..=NEMESIS_PARTS_SEEDS, |seed| SimConfig { omap: true, ..SimConfig::nemesis_in_parts(seed) });
    assert!(total(&outs, |o| o.verified_reads) > NEMESIS_PARTS_SEEDS);
}

#[test]
fn nemesis_seeds_with_pushes_refused_as_too_full_keep_every_acknowledged_write() {
    // A quarter of the backfill and recovery pushes that bring data are refused as too full
    // (decision 0046): for backfill the primary rolls its target's cursor back while writes to
    // the refused range are on their way to the target, and sends the range again after the
    // retry interval; for recovery the objects stay missing on the target and writes to them
    // wait. Every acknowledged write must survive and every PG end clean, with its members'
    // copies equal.
    let outs = run_seeds(1..=NEMESIS_PARTS_SEEDS, SimConfig::toofull);
    assert!(total(&outs, |o| o.verified_reads) > NEMESIS_PARTS_SEEDS);
    assert!(total(&outs, |o| o.pushes_refused) > NEMESIS_PARTS_SEEDS, "refusals must happen in these runs");
}

/// Nemesis seeds with snapshots in CI.
const NEMESIS_SNAP_SEEDS: u64 = 200;

#[test]
fn nemesis_seeds_with_snapshots_keep_every_snapshot() {
    // Writes carry snapshot contexts while snapshots are taken and removed (every object
    // trimmed after a removal), some writes remove heads or roll them back to a snapshot, some
    // reads read at a snapshot, and half the seeds backfill in parts: every read at a live
    // snapshot returns what the object held when it was taken, and at the end every acting
    // member's store reads every object at every live snapshot as the model says, holding no
    // clone its snapshot state does not name (clones recovered, backfilled, trimmed and
    // repaired with their heads; decision 0049's versions on clones and directories).
    let outs = run_seeds(1..=NEMESIS_SNAP_SEEDS, |seed| {
        let base = if seed % 2 == 0 { SimConfig::nemesis_in_parts(seed) } else { SimConfig::nemesis(seed) };
        SimConfig { snaps: true, ..base }
    });
    let checked = total(&outs, |o| o.snap_reads_verified);
    assert!(checked > 50 * NEMESIS_SNAP_SEEDS, "{checked} reads at snapshots checked");
}

#[test]
fn a_damaged_clone_is_repaired_alone_and_never_lost() {
    // Seeds 2269 and 2903 (`--snaps`): a clone on a primary is unreadable, and the head's newest
    // write is on that primary alone (and on a member whose backfill has sent the head but not
    // its clones). Found with `--snaps`, three ways to lose the clone, now each closed: its own
    // name in the missing set read at the next peering as an object the history never wrote
    // and removed it; a pull of the head from the member mid-backfill brought no clones and
    // removed the primary's; and with no member holding the head at its version the object
    // stayed unfound. A damaged companion now marks its head, a member whose cursor stands
    // between a head and its clones does not serve the head, and the primary pulls the damaged
    // clone alone from a member holding it at the same version (clones never change).
    for seed in [2269, 2903] {
        let outs = run_seeds(seed..=seed, |seed| SimConfig { snaps: true, ..SimConfig::nemesis(seed) });
        assert!(total(&outs, |o| o.snap_reads_verified) > 0);
    }
}

#[test]
fn a_late_answer_to_an_earlier_intervals_pull_is_not_taken_for_this_ones() {
    // Seed 3330 (`--snaps --read-offload`): a pull sent in one interval timed out in the next,
    // whose first peering attempt had the same number (attempts restarted with each interval),
    // so the failure cleared the marker of the new interval's pull of the same object; a second
    // pull went out, and its answer, read before a write the first answer let through, was
    // installed over that acknowledged write. Attempts are now unique on an OSD.
    run_seeds(3330..=3330, |seed| SimConfig { snaps: true, read_offload: true, ..SimConfig::nemesis(seed) });
}

#[test]
fn a_disk_is_replaced_only_when_every_pg_of_the_current_map_has_a_clean_primary() {
    // Seed 13072 (`--parts`): the nemesis replaced a disk "when clean" while a new map was on its
    // way: the PG's old primary had stepped down, the new one had not yet taken over, so no OSD
    // led it and none reported it unclean; the replaced disk held the only copy of the PG's
    // newest (unacknowledged) entry, which the surviving member's log already named, and the
    // object stayed unfound. The nemesis now also waits for every OSD to have the monitors' map
    // and for every PG of that map to have a primary that reports it clean.
    run_seeds(13072..=13072, SimConfig::nemesis_in_parts);
}

#[test]
fn a_write_waits_while_a_backfill_cursor_stands_between_its_head_and_clones() {
    // Seeds 5278 and 5894 (`--snaps --parts`): a backfill target's cursor had passed a head but
    // not its clones when a rollback to a snapshot reached it in full; it restored the head from
    // a clone it did not hold yet (200 bytes of an earlier part), and the copies diverged. Writes
    // of such a head now wait until the next chunk passes its clones (decision 0051).
    for seed in [5278, 5894] {
        run_seeds(seed..=seed, |seed| SimConfig { snaps: true, ..SimConfig::nemesis_in_parts(seed) });
    }
}

#[test]
fn a_part_push_starts_over_when_an_object_appears_between_the_cursor_and_its_object() {
    // Seeds 60095 and 50565 (`--snaps --toofull --parts`): a member is backfilled in parts with
    // pushes refused as too full; its cursor stands past a head's first clone when a write of the
    // head makes another clone (on the member too: the head is below its cursor). The part push
    // under way — or resumed after a refusal — of the next object carried a range reaching back
    // to the cursor, so the member removed the new clone, and the cursor then passed it: never
    // sent. Seed 60126 lost the snapshot state that way and kept a clone it no longer named.
    // About 1 seed in 200 of that mode failed so (fifteenth session; 0 of 3,000 since).
    for seed in [60095, 50565, 60126] {
        let outs = run_seeds(seed..=seed, |seed| SimConfig {
            snaps: true,
            refuse_push_per_mille: shoal_sim::TOOFULL_REFUSED_PER_MILLE,
            ..SimConfig::nemesis_in_parts(seed)
        });
        assert!(total(&outs, |o| o.snap_reads_verified) > 0);
    }
}

#[test]
fn a_removed_head_with_clones_is_recovered_whatever_the_backfill_chunk() {
    // Seeds 3273 and 3315 (`--snaps --parts`, chunks of 64 or 200 bytes): a head that does not
    // exist, whose snapshot directory's state is larger than a chunk, was sent to be recovered in
    // parts, which a head that does not exist has none of: it stayed missing forever. Companions
    // now travel whole, bounded by what one message may carry, as in a first part.
    for seed in [3273, 3315] {
        run_seeds(seed..=seed, |seed| SimConfig { snaps: true, ..SimConfig::nemesis_in_parts(seed) });
    }
}

#[test]
fn a_copy_marked_missing_under_a_write_in_flight_is_not_pulled_from_an_older_member() {
    // Seed 7343 (`--snaps --rot-and-replace`): a backfill read met a damaged clone right after the
    // primary applied an append to its head that had not reached the members yet; the head, marked
    // missing, was pulled at once from a member without the append and installed over it, and the
    // append, answered from the log when the client resent it, was lost. Such a pull now waits
    // for the write.
    run_seeds(7343..=7343, |seed| SimConfig { snaps: true, ..SimConfig::rot_and_replace(seed) });
}

/// Nemesis seeds with reads beside the workers in CI.
const NEMESIS_READ_OFFLOAD_SEEDS: u64 = 200;

#[test]
fn nemesis_seeds_with_reads_beside_the_workers_keep_every_acknowledged_write() {
    // The same checks with every OSD running client reads beside its worker, as `block` OSDs
    // do: a read runs a delivery after the worker handed it off, writes of its object wait for
    // it, and crashes lose the reads in flight.
    let outs =
        run_seeds(1..=NEMESIS_READ_OFFLOAD_SEEDS, |seed| SimConfig { read_offload: true, ..SimConfig::nemesis(seed) });
    assert!(total(&outs, |o| o.verified_reads) > NEMESIS_READ_OFFLOAD_SEEDS);
}

/// Nemesis seeds with observers in CI.
const NEMESIS_OBSERVER_SEEDS: u64 = 300;

#[test]
fn nemesis_seeds_with_observers_never_see_a_write_that_is_lost_later() {
    // Two more clients read the writers' objects while they are written, through the same
    // faults, half the seeds with reads beside the workers: a read sees no value older than the
    // last write acknowledged before it was sent, and none older than what a read that finished
    // before it began saw. A primary that let a read see a write its replicas had not
    // acknowledged fails this when it crashes and the write is lost with it (decision 0035).
    let outs = run_seeds(1..=NEMESIS_OBSERVER_SEEDS, |seed| SimConfig {
        observers: 2,
        read_offload: seed % 2 == 0,
        ..SimConfig::nemesis(seed)
    });
    assert!(total(&outs, |o| o.verified_reads) > 2 * NEMESIS_OBSERVER_SEEDS);
}

#[test]
fn a_rolled_back_write_of_an_object_nobody_else_wrote_never_leaves_it_unfound() {
    // Seed 3552: a write that was never acknowledged reached osd.1 only; osd.1 rolled it back
    // when an authority with an empty log was chosen, recording the object as missing with
    // "whatever the authority holds"; later osd.1 itself became the authority with that need
    // still recorded, and no member held the object: its requests waited forever. A rollback to
    // an object the authoritative history never wrote now removes it at activation.
    let outs =
        run_seeds(3552..=3552, |seed| SimConfig { observers: 2, read_offload: true, ..SimConfig::nemesis(seed) });
    assert!(total(&outs, |o| o.verified_reads) > 0);
}

/// Nemesis seeds with short PG logs in CI.
const SHORT_LOG_SEEDS: u64 = 200;

#[test]
fn nemesis_seeds_with_short_logs_peer_through_trimmed_histories() {
    // Logs of 3 entries: members that missed a few writes no longer share an entry with the
    // authority (backfill instead of log recovery), rollbacks meet trimmed histories, and
    // activations replace logs that were trimmed. Writes replace objects (no appends): a log this
    // short forgets a write before its resend comes (see `SimConfig::log_keep`).
    let outs = run_seeds(1..=SHORT_LOG_SEEDS, |seed| SimConfig {
        log_keep: Some(3),
        appends: false,
        observers: 1,
        read_offload: seed % 2 == 0,
        ..SimConfig::nemesis(seed)
    });
    assert!(total(&outs, |o| o.verified_reads) > SHORT_LOG_SEEDS);
    // Most members' logs end trimmed (about 15 of a run's 24 PG copies when this was written).
    assert!(total(&outs, |o| o.trimmed_logs) > 5 * SHORT_LOG_SEEDS, "{}", total(&outs, |o| o.trimmed_logs));
    // Members back after their logs were trimmed past are backfilled comparing versions: some
    // of what they held is kept, not sent again (decision 0049).
    assert!(total(&outs, |o| o.backfill_objects_kept) > 0, "no backfill chunk kept anything");
}

#[test]
fn an_object_needed_at_a_version_only_a_member_past_the_log_holds_is_pulled_from_it() {
    // The newest copy of an object is on one OSD only, and the PG's log was trimmed past that
    // OSD's while it was away: seed 4059 (logs of 4) leaves it a stray, seed 143 (logs of 2) an
    // acting member to be backfilled. Its log still shows the needed version as its own newest
    // write of the object, so the primary pulls the object from it (before this, the object
    // stayed unfound and its requests waited forever).
    let short =
        |keep: usize| move |seed| SimConfig { log_keep: Some(keep), appends: false, ..SimConfig::nemesis(seed) };
    run_seeds(4059..=4059, short(4));
    run_seeds(143..=143, short(2));
}

#[test]
fn a_copy_written_past_a_backfill_push_that_never_landed_is_not_kept_by_a_comparing_backfill() {
    // Logs of 4, omap (800116, then 800767 until down OSDs stopped being replaced, decision
    // 0050; see below for the seed now): a backfill push to a member times out, the writes after it
    // reach the member in full and apply to its stale copy; peered again, the member is
    // backfilled comparing versions. The copy must not carry the write's version (it is not the
    // write's object), or it is kept and a read from it later returns the wrong omap (decision
    // 0049). The mutation that stamps such copies fails the seed.
    // Seed 800208 with a quarter of the pushes refused as too full (800767 without refusals until
    // peering attempts became unique on an OSD in the fourteenth session, then 800843 until
    // undersized PGs stopped letting their strays go in the fifteenth, then 801202 until backfill
    // waited for writes on their way in the seventeenth: each change moved the lost push away;
    // `shoal-sim --toofull --short-logs 4 --omap --mutate vouch_past_cursor --from 800000` finds
    // others, 800979 and 801346 too at the time).
    let config = |seed| SimConfig {
        log_keep: Some(4),
        omap: true,
        appends: false,
        refuse_push_per_mille: shoal_sim::TOOFULL_REFUSED_PER_MILLE,
        ..SimConfig::nemesis(seed)
    };
    // Unmutated, the copy carries no version and nothing is kept (objects here are rewritten all
    // the time); with the mutation the comparing backfill keeps the stamped copy.
    run_seeds(800_208..=800_208, config);
    let mutated =
        SimConfig { mutations: Mutations { vouch_past_cursor: true, ..Mutations::default() }, ..config(800_208) };
    let out = Simulation::new(mutated).run(MAX_EVENTS);
    assert!(out.backfill_objects_kept > 0, "the seed no longer backfills comparing versions");
    assert!(!out.violations.is_empty(), "the seed no longer meets a write past a lost push");
}

/// Logs of 2 entries with omap on every write (`shoal-sim --short-logs 2 --omap`).
fn short_logs_with_omap(seed: u64) -> SimConfig {
    SimConfig { log_keep: Some(2), omap: true, appends: false, ..SimConfig::nemesis(seed) }
}

#[test]
fn a_member_whose_divergent_writes_were_trimmed_from_its_log_is_backfilled() {
    // Seed 50111: a write never acknowledged (21'1) reached only osd.3, whose log was then trimmed
    // past it (into the request ids kept beyond the log) before it crashed. Back as the primary,
    // it peered with an authority whose log was empty: every entry of its log was divergent, and
    // the objects of those entries were rolled back, but the trimmed entry's object was not (no
    // log named it), and the client's resend of that write was answered as done from the kept
    // request ids. The next write of the object reached the replicas, which had never held it, as
    // a whole-object write plus omap keys: a read then missed the first write's keys. A member
    // whose log is not whole now shares nothing with an empty authority: it is backfilled, and
    // its kept request ids are replaced with the primary's.
    let outs = run_seeds(50_111..=50_111, short_logs_with_omap);
    assert!(total(&outs, |o| o.verified_reads) > 0);
}

#[test]
fn an_object_rolled_back_to_whatever_the_authority_held_is_found_after_that_authority_is_gone() {
    // Seed 50072: osd.0 rolled back a divergent write of c1-o4 whose object the authority's
    // (trimmed) log no longer named, recording it missing at "whatever the authority holds", and
    // was cut off before pulling it. Later osd.0 was the authority itself, and osd.3, the only
    // holder, was to be backfilled: a need that names no version matches no member's copy, so
    // the object stayed unfound and its requests waited forever. Peering now names the version of
    // the authority's copy at the activation that records the need.
    //
    // Until backfill waited for writes on their way (decision 0054, seventeenth session) the
    // seed also failed with the need left unnamed (`keep_unnamed_needs`); since then neither it
    // nor any of 29,000 seeds searched (`--short-logs 1..3` with `--omap`, `--snaps`, `--parts`,
    // `--toofull`, `--early-replace`, `--read-offload`, `--rot-and-replace`) fails with that
    // mutation, so the naming is checked by `merge`'s unit test, and here by a seed whose peering
    // still names such a need, which must pass: 50169 until decisions 0055–0058 (eighteenth
    // session) moved the scenarios, 50127 since (the first of 50000..=50600 to name one).
    run_seeds(50_072..=50_072, short_logs_with_omap);
    let outs = run_seeds(50_127..=50_127, short_logs_with_omap);
    assert!(total(&outs, |o| o.needs_named) > 0, "the seed no longer names a need of 0'0");
}

#[test]
fn a_member_that_stopped_at_the_authoritys_log_tail_catches_up_from_the_log() {
    // Seed 412 (logs of 1 entry): the primary's own copy of an object cannot be read, and the
    // only others are on a member whose newest entry is the one the primary's log trimmed last.
    // With the log's tail kept, that member shares the history (it lacks only the one newer
    // write) and serves the object; before, it was backfilled and the object stayed unfound.
    run_seeds(412..=412, |seed| SimConfig { log_keep: Some(1), appends: false, ..SimConfig::nemesis(seed) });
}

#[test]
fn a_damaged_primary_copy_is_recovered_from_members_whose_logs_were_trimmed_past_its_write() {
    // Logs of 2 entries, a damaged primary copy and a replaced disk at the same moment, one
    // observer: the primary records the write its damaged copy holds (the version stored with
    // it), and members whose logs were trimmed past that write show, from the versions stored
    // with their copies, that they hold it (decision 0039, part 2). Before object versions, each
    // of these seeds left the object unfound and its requests waiting forever.
    for seed in [38, 65, 671, 709, 739] {
        run_seeds(seed..=seed, |seed| {
            let base = SimConfig::rot_and_replace(seed);
            SimConfig { log_keep: Some(2), appends: false, observers: 1, ..base }
        });
    }
}

/// Seeds of the damaged-copy-and-replaced-disk scenario in CI.
const ROT_AND_REPLACE_SEEDS: u64 = 200;

#[test]
fn a_damaged_primary_copy_is_not_repaired_from_a_member_whose_disk_was_just_replaced() {
    // The primary repairs a damaged copy from a member it knew as complete; that member's disk
    // was replaced a moment before, so it holds nothing until the primary activates it again.
    let outs = run_seeds(1..=ROT_AND_REPLACE_SEEDS, SimConfig::rot_and_replace);
    assert!(total(&outs, |o| o.verified_reads) > ROT_AND_REPLACE_SEEDS);
}

/// Two-copy nemesis seeds in CI (`shoal-sim --pool-size 2 --min-size 1` runs thousands).
const TWO_COPY_SEEDS: u64 = 200;

/// [`SimConfig::nemesis`] on a pool of two copies that takes writes with one member alone.
fn two_copies(seed: u64) -> SimConfig {
    SimConfig { pool_size: 2, min_size: 1, ..SimConfig::nemesis(seed) }
}

#[test]
fn nemesis_seeds_on_two_copies_taking_writes_with_one_member_keep_every_acknowledged_write() {
    // With two copies and min_size 1, a write may be acknowledged by a lone member, and a disk
    // may be replaced under the one member left of a PG's activation. Before decision 0055, 4 of
    // these 200 seeds (153, 167, 185, 193) ended with a PG incomplete for good: its last
    // activation record named only the primary (the other member was being backfilled then),
    // the primary's disk was replaced, and the backfilled member, which held every write, was
    // not eligible to lead peering.
    let outs = run_seeds(1..=TWO_COPY_SEEDS, two_copies);
    assert!(total(&outs, |o| o.backfills_started) > 0);
}

#[test]
fn a_pg_undersized_on_its_temporary_acting_set_hands_it_back_once_more_osds_are_up() {
    // Four copies, min_size 3: a temporary acting set chosen while OSDs were down held fewer
    // members than min_size, and only a clean PG handed its set back: 66 of the first 1,000
    // seeds (20, 24, 54, 64, 73 among them) ended with a PG undersized for good although every
    // OSD of its placement was up again. The PG now hands the set back (decision 0057).
    let outs = run_seeds(1..=80, |seed| SimConfig { pool_size: 4, min_size: 3, ..SimConfig::nemesis(seed) });
    assert!(total(&outs, |o| o.backfills_started) > 0);
}

/// Nine OSDs on three hosts, three to a host, as a small real cluster is laid out: every PG has
/// one copy per host, an OSD out remaps its copies to another OSD of the same host, and half the
/// crashes take a whole host at once (a power cut).
fn three_hosts_with_host_crashes(seed: u64) -> SimConfig {
    SimConfig { osds: 9, hosts: 3, ..SimConfig::nemesis(seed) }.with_host_crashes()
}

#[test]
fn nemesis_seeds_on_three_hosts_losing_whole_hosts_keep_every_acknowledged_write() {
    // Swept over seeds 1..=1000 (with --snaps, --omap --short-logs 2, and on 6 OSDs / 3 hosts,
    // 8 / 4, two copies on 2 hosts and four copies on 4) without a failure when the layout was
    // added; kept here so that placement by host stays under the nemesis in CI.
    let outs = run_seeds(1..=40, three_hosts_with_host_crashes);
    assert!(total(&outs, |o| o.backfills_started) > 0);
    // The seeds must take host crashes, not only the nemesis's own: some crash lists grew.
    let widened = (1..=40u64)
        .filter(|&seed| {
            let crashes = |c: &SimConfig| c.faults.iter().filter(|(_, f)| matches!(f, Fault::Crash(_))).count();
            crashes(&three_hosts_with_host_crashes(seed))
                > crashes(&SimConfig { osds: 9, hosts: 3, ..SimConfig::nemesis(seed) })
        })
        .count();
    assert!(widened >= 10, "only {widened} of 40 seeds crashed a whole host");
}

#[test]
fn nemesis_seeds_with_links_between_two_osds_cut_keep_every_acknowledged_write() {
    // Partial partitions: one to three links between two OSDs cut for 5 to 80 ms, both OSDs up
    // and reaching everyone else (a primary cannot reach one replica, which the monitors still
    // hear), on top of the nemesis's own faults. Swept when added over 1,000 seeds each of plain
    // runs, --snaps --revert-unfound, two copies with six clients, snapshots, early replacement
    // and reverts, --parts --toofull, --short-logs 2 --omap, one copy, --observers 2
    // --read-offload, and 500 of 9 OSDs on 3 hosts with host crashes: no failure. 26 of these 40
    // seeds lose messages to a cut link.
    let config = |seed| SimConfig::nemesis(seed).with_link_cuts();
    let outs = run_seeds(1..=40, config);
    let cut = outs.iter().filter(|o| o.dropped_by_link_cuts > 0).count();
    assert!(cut >= 20, "only {cut} of 40 seeds lost a message to a cut link");
    assert!((1..=40).all(|seed| config(seed).faults.iter().any(|(_, f)| matches!(f, Fault::CutLink(..)))));
}

/// An OSD cut off from its peers but not from the monitors, from 2 ms into the run for 2 s of
/// simulated time: far longer than the clients' work takes without the cut.
fn cut_off_for_long(seed: u64, heartbeats: bool) -> SimConfig {
    SimConfig {
        seed,
        min_size: 2,
        peer_heartbeats: heartbeats,
        faults: vec![(2_000, Fault::Isolate(OsdId(1))), (2_002_000, Fault::Heal(OsdId(1)))],
        ..SimConfig::default()
    }
}

#[test]
fn an_osd_its_peers_cannot_reach_is_marked_down_on_their_reports_and_writes_go_on_without_it() {
    // Without peer reports the monitors, which still hear osd.1, keep it up: every PG it is a
    // member of waits for it until the cut heals 2 s in, and so do the clients' writes there.
    // With them, its peers report it after the grace, the monitor marks it down, its PGs peer
    // without it and the clients finish long before the cut heals; osd.1 boots again only once
    // it reaches its peers, and catches up.
    const HEAL_US: u64 = 2_002_000;
    let with = run_seeds(1..=6, |seed| cut_off_for_long(seed, true));
    for (seed, out) in (1..=6).zip(&with) {
        assert!(out.marked_down_by_peers >= 1, "seed {seed}: osd.1 never marked down on reports");
        assert!(out.last_answer_us < HEAL_US / 4, "seed {seed}: clients done at {} us only", out.last_answer_us);
        assert!(out.end_us > HEAL_US, "seed {seed}: the run ended before the cut healed");
    }
    let without = run_seeds(1..=6, |seed| cut_off_for_long(seed, false));
    for (seed, out) in (1..=6).zip(&without) {
        assert_eq!(out.marked_down_by_peers, 0);
        assert!(out.last_answer_us > HEAL_US, "seed {seed}: clients done at {} us despite the cut", out.last_answer_us);
    }
}

#[test]
fn nemesis_seeds_with_peer_heartbeats_and_an_osd_cut_off_from_its_peers_keep_every_acknowledged_write() {
    // The nemesis's faults, peer heartbeats, and one OSD cut off from its peers (not from the
    // monitors) for 100 to 400 ms, which its peers report: it is marked down while cut off and
    // boots again once it reaches them.
    let config = |seed| SimConfig::nemesis(seed).with_peer_heartbeats();
    let outs = run_seeds(1..=40, config);
    let reported = outs.iter().filter(|o| o.marked_down_by_peers > 0).count();
    assert!(reported >= 30, "only {reported} of 40 seeds marked an OSD down on its peers' reports");
}

#[test]
fn a_disk_replaced_right_after_a_boot_at_the_same_address_is_a_new_incarnation() {
    // Seed 1310595 of `--snaps --link-cuts --peer-heartbeats`: osd.4's disk is replaced just
    // after the cluster is clean, and its boot comes at the same simulated address as its
    // previous one. A boot that changes nothing in the map left four PGs clean with osd.4, empty,
    // as a member; the harness now marks the earlier run down first, as the daemon does.
    let outs = run_seeds(1_310_595..=1_310_595, |seed| {
        SimConfig { snaps: true, ..SimConfig::nemesis(seed) }.with_link_cuts().with_peer_heartbeats()
    });
    assert!(outs[0].snap_reads_verified > 0);
}

/// One copy, as the transient HPC cluster's pools (seed 004): every PG has a single member.
fn one_copy(seed: u64) -> SimConfig {
    SimConfig { pool_size: 1, min_size: 1, ..SimConfig::nemesis(seed) }.without_store_loss()
}

#[test]
fn nemesis_seeds_on_one_copy_keep_every_acknowledged_write_through_crashes_and_moves() {
    // Crashes on kept stores, OSDs marked down, out (the only copy handed to another OSD by
    // backfill) and in, cut off from peers or monitors; no store lost or damaged, which one
    // copy cannot survive. Swept over 2,000 seeds each of plain runs, --snaps, --omap
    // --short-logs 2, --parts --toofull, --observers 2 and host crashes when added.
    let outs = run_seeds(1..=60, one_copy);
    assert!(total(&outs, |o| o.backfills_started) > 0);
    assert!(
        (1..=60).all(|seed| one_copy(seed).faults.iter().all(|(_, f)| !matches!(
            f,
            Fault::ReplaceWhenClean(_) | Fault::BitRotWhenClean(_) | Fault::ReadErrorWhenClean(_)
        ))),
        "a run of one copy lost a store"
    );
}

#[test]
fn a_damaged_copy_on_a_pg_left_with_one_member_waits_for_the_other_instead_of_failing() {
    // Seed 3400 (two copies, min_size 1): osd.4's copy of c2-o5 had a flipped bit; osd.0, the
    // PG's other member, crashed, and a client's request met the damage on osd.4 alone. Repair
    // on access required a second acting member, so the request failed with the store's checksum
    // error. A pool of more than one copy now marks the copy missing and the request waits until
    // a member that holds the object is back (decision 0058).
    run_seeds(3_400..=3_400, two_copies);
}

#[test]
fn a_damaged_copy_is_pulled_from_a_member_being_backfilled_that_holds_it() {
    // Seed 814 (two copies, min_size 1, logs of 1 entry, omap): the primary's copy of c1-o0
    // became unreadable after an activation that had to backfill the other member; that member
    // held the object at exactly the version needed, but only strays were probed for unfound
    // objects, and the backfill could not read the object either: the PG never finished. Members
    // being backfilled are probed too (decision 0058).
    run_seeds(814..=814, |seed| SimConfig {
        log_keep: Some(1),
        dups_objects: Some(64),
        omap: true,
        appends: false,
        ..two_copies(seed)
    });
}

#[test]
fn a_copy_damaged_after_a_write_is_not_pulled_from_a_stray_that_never_got_the_write() {
    // Seed 545 (two copies, min_size 1, snapshots): a primary activated with its other member
    // being backfilled; a stray that shared the PG's history was the only source. A client's
    // append of an object was applied and acknowledged; then the primary found a clone of the
    // object unreadable, marked the object missing (a clone is recovered with its head) and
    // pulled it from the stray, which had never received the append: the acknowledged append
    // was rolled back on both members. A write now leaves every source outside the acting set
    // lacking its object (decision 0056); the damaged clone is repaired alone.
    run_seeds(545..=545, |seed| SimConfig { snaps: true, ..two_copies(seed) });
}

/// Mutation seeds searched for a failure.
const MUTATION_SEEDS: u64 = 300;

/// Requires some nemesis seed to fail with `mutations` switched on; prints the first one.
///
/// The seeds run with whole backfill chunks (the default 8 objects per push): one-object pushes
/// (half the nemesis seeds since decision 0048) change every later event of a seed, and the
/// scenarios these mutations need (a partition around a peering, a down OSD's PGs) then came up in
/// none of the first 300 seeds for two of them. The mutations that concern backfill itself search
/// their own configurations with [`some_seed_fails_in`].
fn some_seed_fails(mutations: Mutations) {
    some_seed_fails_in(mutations, nemesis_whole_chunks);
}

/// Three of five OSDs crash at the same moment, are marked down and out, and start again on
/// their stores (still out) later: a PG all of whose members were among them maps to OSDs that
/// never held it, and must wait for the old members (`down`) rather than start empty.
fn three_out_at_once(seed: u64) -> SimConfig {
    let three = [OsdId(0), OsdId(1), OsdId(2)];
    let mut faults = Vec::new();
    for o in three {
        faults.push((30_000, Fault::Crash(o)));
        faults.push((31_000, Fault::MarkDown(o)));
        faults.push((32_000, Fault::Out(o)));
        faults.push((90_000, Fault::Restart(o)));
    }
    SimConfig { osds: 5, hosts: 5, pg_num: 32, faults, backfill_chunk_objects: None, ..SimConfig::nemesis(seed) }
}

/// [`SimConfig::nemesis`] with the default backfill chunk for every seed.
fn nemesis_whole_chunks(seed: u64) -> SimConfig {
    SimConfig { backfill_chunk_objects: None, ..SimConfig::nemesis(seed) }
}

/// [`some_seed_fails`] with the nemesis `config`.
fn some_seed_fails_in(mutations: Mutations, config: fn(u64) -> SimConfig) {
    some_seed_fails_among(mutations, config, 1..=MUTATION_SEEDS);
}

/// [`some_seed_fails_in`] over the given `seeds`.
fn some_seed_fails_among(mutations: Mutations, config: fn(u64) -> SimConfig, seeds: std::ops::RangeInclusive<u64>) {
    let range = format!("{seeds:?}");
    let failing = seeds.into_iter().find_map(|seed| {
        let cfg = SimConfig { mutations, ..config(seed) };
        let expected = u64::from(cfg.clients * cfg.writes_per_client);
        let out = Simulation::new(cfg).run(MAX_EVENTS / 4);
        (!out.violations.is_empty() || out.acked_writes != expected).then_some((seed, out.violations))
    });
    let Some((seed, violations)) = failing else {
        panic!("no seed of {range} failed with {mutations:?}");
    };
    eprintln!("{mutations:?}: seed {seed} fails: {}", violations.first().map_or("", String::as_str));
}

// Mutation tests: each switches off one mechanism in every OSD and requires the nemesis to find
// a failing seed, so that the invariants above are shown to depend on it.

#[test]
fn without_record_extension_a_backfilled_member_cannot_lead_peering() {
    // Members backfilled since an activation left out of its record: the end check finds
    // clean PGs whose record does not name every member, and on two copies a PG whose named
    // member's disk is replaced stays incomplete (decision 0055).
    some_seed_fails_in(Mutations { skip_record_extension: true, ..Mutations::default() }, two_copies);
}

#[test]
fn without_clones_in_recovery_snapshots_are_lost() {
    // Recovery that moves a head without its clones (and lets the member applying it drop the
    // ones it holds) loses what a snapshot reads.
    let snaps = |seed| SimConfig { snaps: true, ..SimConfig::nemesis(seed) };
    some_seed_fails_in(Mutations { recover_heads_only: true, ..Mutations::default() }, snaps);
}

#[test]
fn recovery_pushes_leave_out_the_clones_their_targets_hold_and_snapshots_read_back() {
    // Decision 0065: recovery pushes name the clones their targets hold instead of sending them
    // (the targets check each); every seed still ends with every snapshot of every member's
    // store reading as the model says.
    let outs = run_seeds(1..=20, |seed| SimConfig { snaps: true, ..SimConfig::nemesis(seed) });
    assert!(total(&outs, |o| o.recovery_clones_kept) > 0, "no recovery push kept a clone");
    assert!(total(&outs, |o| o.snap_reads_verified) > 0);
}

#[test]
fn without_the_log_comparison_a_resumed_backfill_keeps_stale_copies() {
    // A member peered again mid-backfill keeps what it holds up to its cursor; the writes to
    // those objects it missed while away must still be recovered (decision 0048).
    some_seed_fails_in(Mutations { resume_blind: true, ..Mutations::default() }, SimConfig::nemesis_in_parts);
}

#[test]
fn without_the_prev_check_replicas_diverge() {
    // A replica that applies a replicated write after a gap (it missed the one before) holds a
    // different object from the primary's; the end check reads every member.
    some_seed_fails(Mutations { skip_prev_check: true, ..Mutations::default() });
}

#[test]
fn without_the_activation_record_writes_roll_back() {
    // Serving before the monitors hold the record lets a later peering miss the members that
    // hold the newest writes.
    some_seed_fails(Mutations { skip_activation_record: true, ..Mutations::default() });
}

#[test]
fn with_the_primary_as_authority_writes_roll_back() {
    // A new primary that trusts its own log over the members' forgets writes it missed.
    some_seed_fails(Mutations { primary_is_authority: true, ..Mutations::default() });
}

#[test]
fn a_request_answered_while_parked_for_a_newer_map_does_not_hold_the_run() {
    // Seed 494 (one copy, six clients of 200 writes, snapshots): a write met an OSD a map behind
    // (WrongPrimary), was parked until the map after the client's, and its timeout resent it to
    // the same OSD, which acknowledged it. No map came after that, so the parked entry stayed and
    // the run never counted as finished (two million events). Finishing a request now unparks it.
    run_seeds(494..=494, |seed| SimConfig { clients: 6, writes_per_client: 200, snaps: true, ..one_copy(seed) });
}

#[test]
fn a_head_is_pulled_from_a_member_whose_clone_is_damaged_when_the_primary_holds_that_clone() {
    // Seed 500 (two copies, min_size 1, six clients of 200 writes, snapshots): osd.0's copy of
    // clone 1 of c2-o0 had an unreadable block; osd.4, the other member, went out, and writes
    // went on on osd.0 alone. Back in as primary, osd.4 lacked the new head and pulled it with
    // its companions from osd.0, whose read of clone 1 failed: the object stayed unfound and its
    // writes waited for ever, although osd.4 held clone 1 whole at the same version. A pull now
    // names the clones the primary holds whole, and the source leaves them out (decision 0059).
    run_seeds(500..=500, |seed| SimConfig {
        pool_size: 2,
        min_size: 1,
        clients: 6,
        writes_per_client: 200,
        snaps: true,
        ..SimConfig::nemesis(seed)
    });
}

#[test]
fn an_object_recovered_in_parts_resumes_after_a_too_full_refusal_instead_of_starting_over() {
    // Seed 1000 of `--clients 6 --writes 200 --parts --toofull --omap` (59 of 1,000 seeds failed
    // so): an object whose omap had grown to hundreds of 64-byte parts was recovered to a member
    // that refused a quarter of the pushes as too full. Each refusal started the object over
    // after the retry interval, so no attempt ever got through every part, and the PG re-peered
    // for ever (epoch 9,819 after two million events) while a write to the object waited. A
    // refused part is now sent again where it started (decision 0046 amended).
    run_seeds(1_000..=1_000, |seed| SimConfig {
        clients: 6,
        writes_per_client: 200,
        omap: true,
        ..SimConfig::toofull(seed)
    });
}

#[test]
fn on_one_copy_a_primary_trusting_its_own_log_loses_the_writes_its_predecessor_took() {
    // With a single member per PG, an OSD taken out hands the PG to one that holds nothing yet;
    // peering must take the old member's log as the authority and backfill from it. The checker
    // sees the difference in this shape too (119 of the first 300 seeds fail this way).
    some_seed_fails_in(Mutations { primary_is_authority: true, ..Mutations::default() }, one_copy);
}

#[test]
fn without_down_pgs_writes_roll_back() {
    // A PG whose last members are all down, served by whoever is up, serves older data.
    // Since down OSDs keep their place (decision 0050), a PG is down only when the members of
    // its last activation are down *and* out, so that placement names OSDs that never held it:
    // three of five OSDs crash together and are marked out, then start again on their stores.
    some_seed_fails_among(
        Mutations { ignore_down: true, ..Mutations::default() },
        three_out_at_once,
        1..=MUTATION_SEEDS,
    );
}

#[test]
fn without_repair_on_access_readers_see_damaged_data_errors() {
    // A read or append of an object whose primary copy has a flipped bit fails with the store's
    // checksum error although the other members hold good copies.
    some_seed_fails(Mutations { no_repair_on_access: true, ..Mutations::default() });
}

#[test]
fn with_a_blind_scrub_damaged_replicas_stay_damaged() {
    // A damaged replica copy no read touches is found only by a deep scrub; the end check reads
    // every member's copy.
    some_seed_fails(Mutations { blind_scrub: true, ..Mutations::default() });
}

#[test]
fn with_stale_activations_accepted_pgs_lose_their_history() {
    // An OSD cut off from the monitors keeps peering with the map it has; members that accept its
    // activation for an interval they have left lower their recorded activation, and the PG then
    // finds no member that holds it whole (or serves what the stale primary wrote).
    //
    // The scenario is rare: a primary cut off from the monitors activates members after they
    // moved on, and the PG cannot find its history again. Seed 5389 of the plain nemesis shows
    // it (the PG stays incomplete and the run does not finish). Earlier seeds that did (1..=300,
    // 738, 3582 with whole chunks, 13749 plain) lost the scenario as the OSD or the nemesis
    // changed: one-object backfill pushes, decision 0050, unique peering attempts, the nemesis
    // waiting for every PG of the current map to have a clean primary before it replaces a disk
    // (fifteenth session), and last backfill waiting for writes on their way (seventeenth
    // session; 8,000 plain seeds then showed only 5389, 6,000 in parts only 2994), and the
    // activation record extended to backfilled members with the other changes of decisions
    // 0055–0058 (eighteenth session: 10,000 plain seeds showed only 8015).
    // If a change moves it again, search with `shoal-sim --mutate accept_stale_activation
    // --seeds 10000` (and `--parts`) and put the range around the seed found here.
    some_seed_fails_among(
        Mutations { accept_stale_activation: true, ..Mutations::default() },
        SimConfig::nemesis,
        8011..=8020,
    );
}

#[test]
fn with_pushes_from_an_earlier_activation_applied_a_member_trusts_a_partial_copy() {
    // A primary cut off from the monitors keeps backfilling a member in parts after the member
    // was activated for a newer interval by another primary; both send the same object in
    // parts. Applied, the old primary's last part moves the member's cursor past the object
    // while the new primary's restart of it (first part, a replacement) is still on its way, and
    // a later peering resumes past an object the member holds only partly (decision 0073).
    // Found by a sweep of 20,000 `--parts --toofull` seeds (thirty-first session): seed 100892
    // alone. If a change moves it, search with `shoal-sim --parts --toofull --mutate
    // accept_stale_pushes --seeds 20000 --from 100000` and put the range around the seed found.
    some_seed_fails_among(
        Mutations { accept_stale_pushes: true, ..Mutations::default() },
        SimConfig::toofull,
        100_890..=100_895,
    );
}

/// Short logs (two entries), snapshots, a disk replaced early, link cuts and peer heartbeats:
/// `shoal-sim --snaps --early-replace --link-cuts --peer-heartbeats --short-logs 2`.
fn short_logs_with_snaps_and_cuts(seed: u64) -> SimConfig {
    let base = SimConfig::nemesis(seed);
    SimConfig { snaps: true, early_replacement: true, log_keep: Some(2), appends: false, ..base }
        .with_link_cuts()
        .with_peer_heartbeats()
}

#[test]
fn a_primary_that_has_not_loaded_its_log_still_shares_its_dups_with_a_member_it_backfills() {
    // A primary restarted since it last touched a PG peers from its stored state without
    // loading the PG's log; it backfilled a member and sent it none of the request ids kept
    // beyond the log. That member, primary later, applied a client's resend of a trimmed removal
    // a second time ("does not exist"), and the model's snapshots disagreed with every copy
    // (decision 0074). Found by a sweep of 10,000 seeds of this configuration (thirty-first
    // session): 102013 and 107100. With the mutation, both fail again; without it, both pass.
    run_seeds(102_013..=102_013, short_logs_with_snaps_and_cuts);
    run_seeds(107_100..=107_100, short_logs_with_snaps_and_cuts);
    some_seed_fails_among(
        Mutations { share_loaded_dups_only: true, ..Mutations::default() },
        short_logs_with_snaps_and_cuts,
        102_013..=102_013,
    );
}

#[test]
fn a_member_that_lacks_a_removal_removes_the_object_without_a_copy() {
    // A primary removed an object (no clones left) and was cut off before its push reached the
    // others, which recorded the object missing at that removal; it came back to be backfilled
    // from the start, and its activation replaced the log that showed it held the removal. A
    // removal leaves nothing to store a version on, so no member could be recognised as holding
    // it: the object stayed unfound and the client's write on it waited for ever. Log entries now
    // say when a write left nothing of its object's name, and a member lacking such a write
    // removes what it holds of it at activation (decision 0077). Found by a sweep (thirty-first
    // session): 110135. Since decision 0079 changed the schedules, no seed of 22,000 near it
    // reaches the removal with the mutation (`removals_need_copies`); the mechanism's mutation
    // check is the OSD test `replication.rs::a_member_lacking_a_removal_removes_the_object_at_activation_without_a_copy`.
    run_seeds(110_135..=110_135, short_logs_with_snaps_and_cuts);
}

#[test]
fn a_write_that_changes_nothing_still_stamps_the_copy_with_its_version() {
    // A trim with nothing to trim is logged like any write but changes no copy. Its version
    // became the one a member lacking it needed, and no copy carried it (every copy kept the
    // version of the object's last real change): the object stayed unfound, though every copy
    // held exactly what was needed (decision 0077). Found by a sweep: 128294.
    run_seeds(128_294..=128_294, short_logs_with_snaps_and_cuts);
    some_seed_fails_among(
        Mutations { no_stamp_unchanged: true, ..Mutations::default() },
        short_logs_with_snaps_and_cuts,
        128_294..=128_294,
    );
}

#[test]
fn a_head_removed_with_clones_is_vouched_for_by_its_snapshot_directory() {
    // A head removed while snapshots kept clones of it leaves its state, and the removal's
    // version, on its snapshot directory. A member reporting only heads' stored versions could
    // not be recognised as holding such a removal once its log no longer showed it, and the
    // object stayed unfound (decision 0075). Found by the same sweep: 116114. Since decision 0079
    // changed the schedules, no seed of 22,000 near it reaches this with the mutation
    // (`head_versions_only`); the mechanism's mutation check is the OSD test
    // `replication.rs::a_member_reports_a_removed_heads_version_from_its_snapshot_directory`.
    run_seeds(116_114..=116_114, short_logs_with_snaps_and_cuts);
}

/// Backfill in parts with a quarter of the pushes refused as too full, snapshots, one-entry logs
/// and 64 dups objects: `shoal-sim --parts --snaps --toofull --short-logs 1 --dups-objects 64`.
fn toofull_parts_with_snaps_and_short_logs(seed: u64) -> SimConfig {
    SimConfig { snaps: true, log_keep: Some(1), dups_objects: Some(64), appends: false, ..SimConfig::toofull(seed) }
}

#[test]
fn a_head_waits_while_the_push_of_its_last_clone_is_unanswered() {
    // The primary moves a backfill target's cursor when it sends an object's last part, so that
    // a write of the object sent behind the part is applied in full. The last part of a head's
    // clone was refused as too full, the cursor went back between the head and that clone, but a
    // rollback of the head, let through while the push was unanswered (the cursor no longer
    // split the head from its clones), had restored the head on the target from the clone's
    // first parts only: a stale head that backfill, past it, never sent again (decision 0076).
    // Found by a sweep (thirty-first session): 104355. Since decision 0079 changed the schedules,
    // the mutation fails 103330 instead (which passes without it).
    run_seeds(104_355..=104_355, toofull_parts_with_snaps_and_short_logs);
    run_seeds(103_330..=103_330, toofull_parts_with_snaps_and_short_logs);
    some_seed_fails_among(
        Mutations { split_by_sent_cursor_only: true, ..Mutations::default() },
        toofull_parts_with_snaps_and_short_logs,
        103_330..=103_330,
    );
}

#[test]
fn an_activation_is_recorded_only_in_its_own_interval() {
    // osd.1 activated PG 1.5 on [1, 0]; before its record reached the map, osd.3 became primary,
    // activated the same members again (to be backfilled from its log) and its own record was
    // dropped, its interval over; then osd.1 led again and the monitors recorded its earlier
    // activation, which named [1, 0] — members now backfilling from the start, so none was
    // eligible to lead and the PG stayed incomplete for ever. The monitors now record an
    // activation only in the interval it was made in (decision 0079); with that check taken out
    // of `ClusterMap::prepare`, this seed fails again (checked by hand: the check is the
    // monitors', which no OSD mutation reaches). Found by a sweep (thirty-second session) of
    // `--parts --toofull --snaps --short-logs 1 --dups-objects 64 --link-cuts`.
    run_seeds(146_250..=146_250, |seed| SimConfig {
        snaps: true,
        log_keep: Some(1),
        dups_objects: Some(64),
        appends: false,
        ..SimConfig::toofull(seed).with_link_cuts()
    });
}

#[test]
fn with_stale_parts_kept_backfilled_objects_diverge() {
    // A write to an object being backfilled in parts reaches the target as a log entry only; if
    // the primary went on with the next part instead of starting the object over, the target
    // would end with old parts under new ones (or miss an object created below it), and the end
    // check reads every member.
    some_seed_fails_in(Mutations { keep_stale_parts: true, ..Mutations::default() }, SimConfig::nemesis_in_parts);
}

#[test]
fn with_pulls_answered_before_activation_repairs_erase_objects() {
    // A member restarted on an empty store, not yet activated, answers a pull with "absent"; the
    // primary installs that over its damaged copy and the object is gone (or older elsewhere).
    some_seed_fails_in(
        Mutations { answer_unactivated_pulls: true, ..Mutations::default() },
        SimConfig::rot_and_replace,
    );
}

#[test]
fn a_restarted_osd_keeps_its_copy_while_its_pg_is_undersized() {
    // Three OSDs, a size-3 pool, logs of 2: an OSD crashes and is marked down (not out, so its
    // PGs stay undersized on the other two), the PGs move far past its log, and it restarts.
    // Until the monitors mark it up again it is a stray of its PGs and asks their primaries
    // whether it may remove its copies; the primaries refuse while the PGs are undersized, so
    // the backfills that follow compare versions and keep the objects the OSD still holds at
    // them (before, a primary said "clean without you" and the whole copy was sent again).
    let config = |seed| SimConfig {
        seed,
        osds: 3,
        hosts: 3,
        pool_size: 3,
        min_size: 2,
        pg_num: 4,
        clients: 3,
        objects_per_client: 16,
        writes_per_client: 120,
        log_keep: Some(2),
        faults: vec![
            (20_000, Fault::Crash(OsdId(2))),
            (21_000, Fault::MarkDown(OsdId(2))),
            (150_000, Fault::Restart(OsdId(2))),
        ],
        ..SimConfig::default()
    };
    let outs = run_seeds(1..=5, config);
    assert!(total(&outs, |o| o.backfills_started) > 0, "no backfill started");
    assert!(total(&outs, |o| o.backfill_objects_kept) > 0, "no backfill kept an object it found on the OSD");
}

/// Two OSDs and one PG of size 2: the replica is cut off while a write reaches the primary
/// alone, comes back (peering makes it need that write) and is cut off again after an offset the
/// seed picks, when the primary's disk is replaced: the write's only copy is gone, and the object
/// is unfound while the replica still holds the copy before it.
fn newest_entry_lost(seed: u64) -> SimConfig {
    let (p, r) = if seed.is_multiple_of(2) { (OsdId(0), OsdId(1)) } else { (OsdId(1), OsdId(0)) };
    let again = 60_000 + (seed / 2 % 40) * 500;
    let faults = vec![
        (20_000, Fault::Isolate(r)),
        (60_000, Fault::Heal(r)),
        (again, Fault::Isolate(r)),
        (again + 100, Fault::Crash(p)),
        (again + 200, Fault::RestartEmpty(p)),
        (again + 40_000, Fault::Heal(r)),
    ];
    SimConfig {
        seed,
        osds: 2,
        hosts: 2,
        pool_size: 2,
        min_size: 1,
        pg_num: 1,
        clients: 2,
        objects_per_client: 2,
        writes_per_client: 40,
        faults,
        ..SimConfig::default()
    }
}

#[test]
fn an_operators_revert_of_an_unfound_object_keeps_every_acknowledged_write() {
    // Seeds 72 and 76 of `newest_entry_lost`: the primary's disk is replaced while the replica
    // needs the write only that disk held, and the object is unfound (the run never finishes).
    // The operator's revert (decision 0052) keeps the replica's copy, every acknowledged write,
    // and the client's resend of the write given up is applied again: every seed of the schedule
    // then ends with every write acknowledged and readable. Answered from the log instead, the
    // resend is acknowledged while its data is gone (seed 72's reads then miss a write).
    for seed in [72, 76] {
        let stuck = Simulation::new(newest_entry_lost(seed)).run(MAX_EVENTS / 4);
        assert!(
            stuck.violations.iter().any(|v| v.contains("did not finish")),
            "seed {seed} no longer leaves an object unfound: {:?}",
            stuck.violations
        );
    }
    let reverting = |seed| SimConfig { revert_unfound: true, ..newest_entry_lost(seed) };
    let outs = run_seeds(1..=80, reverting);
    assert!(outs[71].reverts_asked > 0 && outs[75].reverts_asked > 0, "the operator reverted nothing");
    let mutated =
        SimConfig { mutations: Mutations { answer_given_up_resends: true, ..Mutations::default() }, ..reverting(72) };
    let out = Simulation::new(mutated).run(MAX_EVENTS);
    assert!(out.violations.iter().any(|v| v.contains("acknowledged")), "{:?}", out.violations);
}

#[test]
fn an_operator_cannot_revert_unfound_objects_while_an_osd_that_may_hold_them_is_down() {
    // Seed 90310 `--revert-unfound --early-replace` (sixteenth session): objects went unfound while
    // osd.0, which held their newest acknowledged writes, was down (crashed, to start again
    // later), and the operator reverted them at once to the older copies the primary held: a
    // write acknowledged at epoch 29 was gone. The primary now refuses to give up or revert
    // unfound objects while any OSD is down or a stray has not answered whether it holds them;
    // the operator's repeated command finds nothing left to revert once the OSD is back. The
    // scenario moved to seed 90673 when backfill began to wait for writes on their way (decision
    // 0054), and to 92840 with decisions 0055–0058 (eighteenth session). Decision 0066 (a revert
    // first asks the OSDs that are up which copies they hold) moved it off every seed of 90000 to
    // 100000 of that shape (twenty-second session); with two copies and min_size 1 (`--pool-size 2
    // --min-size 1`) seed 58 shows it: without the guard (`skip_holder_check`) it reads a
    // rolled-back append (173 and 205 fail too). If a change moves it again, search with
    // `shoal-sim --revert-unfound --early-replace --pool-size 2 --min-size 1 --mutate
    // skip_holder_check --seeds 4000`.
    let config = |seed| SimConfig {
        pool_size: 2,
        min_size: 1,
        early_replacement: true,
        revert_unfound: true,
        ..SimConfig::nemesis(seed)
    };
    let outs = run_seeds(58..=58, config);
    assert!(outs[0].reverts_asked > 0, "the operator was never asked to decide");
    let mutated = SimConfig { mutations: Mutations { skip_holder_check: true, ..Mutations::default() }, ..config(58) };
    let out = Simulation::new(mutated).run(MAX_EVENTS);
    assert!(!out.violations.is_empty(), "the seed no longer reverts while a holder is away");
}

#[test]
fn an_operator_cannot_revert_unfound_objects_while_an_earlier_holder_is_up_but_unreachable() {
    // Seed 632 (two copies, min_size 1, six clients of 200 writes, snapshots, early replacement,
    // operator reverts): osd.1 led PG 1.1 alone on a temporary acting set and took writes; handed
    // back, osd.4 activated with osd.1 as the authority and seven objects to pull from it, just
    // as osd.1 was cut off from its peers (not from the monitors: it stayed up). The next
    // activation's record named only osd.4, the objects were unfound, and the operator's revert
    // went ahead: osd.1 was neither down nor a stray that had made itself known, so nothing said
    // it might hold them, and acknowledged writes were rolled back. Records now name such OSDs as
    // holders, and a revert waits for each holder that is up to answer (decision 0060).
    //
    // Since decision 0062 (a primary fails the writes waiting for a replica the map marks down)
    // the seed's schedule no longer reaches that window, with or without the guard; no seed of
    // 20,000 in three shapes near it did (`forget_holders` sweeps in the twenty-first session's
    // note), so this is a regression run only until one is found: the guard's mutation check is
    // in the note's open items, not here.
    run_seeds(632..=632, |seed| SimConfig { snaps: true, ..reverting_six_clients(seed) });
}

/// The shape the twenty-first session's revert findings came from: two copies, min_size 1, six
/// clients of 200 writes, early disk replacement, an operator who reverts unfound objects.
fn reverting_six_clients(seed: u64) -> SimConfig {
    SimConfig {
        pool_size: 2,
        min_size: 1,
        clients: 6,
        writes_per_client: 200,
        early_replacement: true,
        revert_unfound: true,
        ..SimConfig::nemesis(seed)
    }
}

#[test]
fn a_revert_to_a_copy_holding_rolled_back_writes_applies_none_of_them_twice() {
    // Seeds 3050 and 4449 (two copies, min_size 1, six clients of 200 writes, early replacement,
    // operator reverts; twenty-first session): the primary's append to c5-o3 at 22'43 failed on
    // its replica, whose copy was damaged; peering rolled the write back (the authority's log
    // did not have it) but the primary's copy still held it, and with the replica's copy bad the
    // object was unfound. The operator's revert kept that copy, and the client's resend of the
    // append, which no log named any more, was applied a second time: the object read 48 bytes
    // longer than its last acknowledged write. An OSD now records the writes its copy holds when
    // its log rolls them back, and a revert logs each again under its request id, so the resend
    // is answered as done (decision 0063). Undone (`keep_rolled_back`), the seeds fail again.
    let config = reverting_six_clients;
    for seed in [3050, 4449] {
        let outs = run_seeds(seed..=seed, config);
        assert!(outs[0].reverts_asked > 0, "seed {seed}: the operator was never asked to decide");
        let mutated =
            SimConfig { mutations: Mutations { keep_rolled_back: true, ..Mutations::default() }, ..config(seed) };
        let out = Simulation::new(mutated).run(MAX_EVENTS);
        assert!(
            out.violations.iter().any(|v| v.contains("not its last acknowledged write")),
            "seed {seed} no longer keeps a copy holding a rolled-back write: {:?}",
            out.violations
        );
    }
}

#[test]
fn a_head_missing_for_a_damaged_clone_is_pulled_around_it_from_the_primary_that_wrote_it_last() {
    // Seed 9704 (the shape above, with snapshots): osd.0 led PG 1.1 alone and wrote c2-o0 on
    // (seven acknowledged writes) while its copy of the head's clone 1 rotted; osd.4, back as
    // primary, held clone 1 whole under a head 40 writes older. Neither held the object whole,
    // so it was unfound, and the operator's revert kept osd.4's old head: the acknowledged
    // writes were gone, and reads at snapshot 6 saw old data. The primary now pulls osd.0's head
    // leaving out the clones it holds (decision 0064); undone (`no_pull_around_damage`) together
    // with decision 0066 (`revert_primary_copy_only`), the seed fails again.
    let config = |seed| SimConfig { snaps: true, ..reverting_six_clients(seed) };
    let outs = run_seeds(9704..=9704, config);
    assert!(outs[0].snap_reads_verified > 0);
    // Decision 0066 saves the seed too (the revert pulls osd.0's newer head, leaving out the
    // clone osd.4 holds), so each decision alone passes and only both undone fail.
    let mutated = |m: Mutations| SimConfig { mutations: m, ..config(9704) };
    let around_only = Mutations { revert_primary_copy_only: true, ..Mutations::default() };
    let revert_only = Mutations { no_pull_around_damage: true, ..Mutations::default() };
    let neither = Mutations { no_pull_around_damage: true, revert_primary_copy_only: true, ..Mutations::default() };
    for (m, what) in
        [(around_only, "the pull around damage alone"), (revert_only, "the revert of the newest copy alone")]
    {
        let out = Simulation::new(mutated(m)).run(MAX_EVENTS);
        assert!(out.violations.is_empty(), "with {what}: {:?}", out.violations);
    }
    let out = Simulation::new(mutated(neither)).run(MAX_EVENTS);
    assert!(!out.violations.is_empty(), "seed 9704 no longer needs either decision");
}

#[test]
fn a_member_caught_up_from_a_trimmed_log_still_knows_the_requests_it_applied() {
    // Seed 130488 `--snaps --short-logs 2` (130584 and 130693 too): a removal applied before a
    // member's log was replaced by an authority's that had trimmed past it; the replacement
    // dropped the member's entry without keeping its request id, and the client's resend of the
    // removal, reaching that member as primary, was applied again: "does not exist", and the
    // model's snapshots then disagreed with every copy. Entries of shared history a replacement
    // drops now join the request ids kept beyond the log.
    let config = |seed| SimConfig { log_keep: Some(2), snaps: true, appends: false, ..SimConfig::nemesis(seed) };
    let outs = run_seeds(130_488..=130_488, config);
    assert!(total(&outs, |o| o.snap_reads_verified) > 0);
}

#[test]
fn a_resend_past_the_dups_window_runs_again_and_a_wider_window_recognises_it() {
    // Seed 140374 with logs of one entry, snapshots and backfill in parts: a removal's answer is
    // lost and its resend comes eleven writes later, past what eight dups objects of one request
    // id each remember. The resend then runs again ("does not exist") and the run fails: the
    // documented limit of a PG's resend window (decision 0039), which the simulation must see.
    // With 64 dups objects the same run recognises the resend and passes.
    let config = |seed, dups_objects| SimConfig {
        log_keep: Some(1),
        dups_objects,
        snaps: true,
        appends: false,
        ..SimConfig::nemesis_in_parts(seed)
    };
    let out = Simulation::new(config(140_374, None)).run(MAX_EVENTS);
    assert!(!out.violations.is_empty(), "the resend no longer comes past the default window");
    run_seeds(140_374..=140_374, |seed| config(seed, Some(64)));
}

#[test]
fn a_damaged_clone_is_pulled_from_a_member_being_backfilled_when_no_complete_member_has_it() {
    // Logs of 2, snapshots, a rotten clone on the primary and a peer's disk replaced at once
    // (seed 214526): the third member then missed a write, and its log no longer met the
    // primary's, so both other members were backfill targets and the primary the only complete
    // one. Its backfill read of the rotten clone marked its head missing; the replaced member
    // held the head at the needed version (backfilled past it) but not the clone yet, and the
    // other target still held the clone at its version past its cursor. Only complete members
    // were asked for the clone: the object stayed unfound, its writes waited forever (the run
    // did not finish). Now a member being backfilled (or a stray) is asked too, its copy taken
    // only at the clone's version (decision 0051). Seed 215160 is the same on another PG.
    let config = |seed| SimConfig {
        log_keep: Some(2),
        snaps: true,
        appends: false,
        early_replacement: true,
        ..SimConfig::rot_and_replace(seed)
    };
    run_seeds(214_526..=214_526, config);
    run_seeds(215_160..=215_160, config);
}

#[test]
fn a_backfill_push_does_not_carry_a_write_that_was_never_acknowledged() {
    // Seed 232212 (plain nemesis, appends): a temporary primary applied an append and sent it to
    // its members, to the backfill target as a log entry only; the backfill chunk read after it
    // pushed the object with the append's data, and the log entry was lost on the way. The
    // append was never acknowledged; once a member without it led the PG, the target's log met
    // the authority's, its copy kept the append, and the client's resend appended it again.
    // Backfill now waits for the writes of an object on their way before reading it.
    run_seeds(232_212..=232_212, SimConfig::nemesis);
}

#[test]
fn the_one_copy_of_an_unacknowledged_write_damaged_is_reverted_or_given_up_without_lying_to_its_writer() {
    // `--rot-unacked`: the only copy of a write no client has heard back about is damaged, so
    // the object is unfound; the operator's revert keeps the newest older copy any OSD holds
    // (decision 0066, pulled from another member when the primary has none), and an object with
    // nothing to keep is given up as lost. Thirty seeds hold at least one pull.
    let outs = run_seeds(1..=30, SimConfig::rot_unacked);
    assert!(outs.iter().map(|o| o.unacked_rotted).sum::<u64>() > 0, "no unacknowledged write was damaged");
    assert!(outs.iter().map(|o| o.revert_pulls).sum::<u64>() > 0, "no revert pulled a copy from another OSD");

    // Seed 169: osd.4, cut off from its peers, applied c2-o0's first append alone, and that copy
    // rotted. Nothing older exists, so the operator gave the object up while its PG was
    // backfilling below min_size. The logged removal was refused there (not active), so the
    // append's resend was answered from the log as done and the following appends were stored
    // without it: reads returned 48 bytes fewer than acknowledged. Decisions now pass that gate,
    // and a resend of a write logged before a removal as lost is applied again (decision 0052,
    // amended). With resends of writes given up answered from the log
    // (`answer_given_up_resends`), the seed fails again.
    let outs = run_seeds(169..=169, SimConfig::rot_unacked);
    assert_eq!(outs[0].unfound_deleted, 1, "seed 169 no longer gives an object up");
    let mutated = SimConfig {
        mutations: Mutations { answer_given_up_resends: true, ..Mutations::default() },
        ..SimConfig::rot_unacked(169)
    };
    let out = Simulation::new(mutated).run(MAX_EVENTS);
    assert!(
        out.violations.iter().any(|v| v.contains("not its last acknowledged write")),
        "seed 169 no longer loses an append whose resend is answered from the log: {:?}",
        out.violations
    );
}

#[test]
fn an_unfound_head_given_up_as_lost_keeps_its_snapshots() {
    // `--rot-unacked --snaps`, seeds 1214047, 1214415 and 1214451: the one copy of a write that
    // made a head again after a removal (its clones held on every member) rotted, nothing older
    // could be kept, and the operator gave the head up. The primary removed the head with its
    // clones and snap directory, and pushed that copy to the members lacking the head: reads at
    // an acknowledged snapshot found nothing on every member. The decision now removes the head
    // alone and moves its snapshot state to the snap directory (decision 0069).
    // (Seed 1214415 no longer reaches it since decision 0079 changed the schedules.)
    for seed in [1_214_047, 1_214_451] {
        let outs = run_seeds(seed..=seed, |seed| SimConfig { snaps: true, ..SimConfig::rot_unacked(seed) });
        assert_eq!(outs[0].unfound_deleted, 1, "seed {seed} no longer gives an object up");
        let mutated = SimConfig {
            snaps: true,
            mutations: Mutations { lose_clones_with_lost_head: true, ..Mutations::default() },
            ..SimConfig::rot_unacked(seed)
        };
        let out = Simulation::new(mutated).run(MAX_EVENTS);
        assert!(
            out.violations.iter().any(|v| v.contains("at snapshot")),
            "seed {seed} no longer loses a snapshot when the clones go with the head: {:?}",
            out.violations
        );
    }
}

#[test]
fn an_operators_decision_takes_effect_with_its_log_entry_or_not_at_all() {
    // `--rot-unacked --snaps`, seed 1208721: the one copy of an append (never acknowledged) rotted
    // on the primary; the operator's revert kept the copy before it, pulled from a member. The
    // primary cleared its missing record and pushed that copy to a member, which cleared its own;
    // then the other member's push failed, the PG peered again, and the decision's logged write
    // was dropped. Both copies now passed for the version the log named, the append's: its
    // resend was answered from the log as done, and a read returned 48 bytes fewer than
    // acknowledged. A decision now removes missing records only with its log entry, on the
    // primary and on every member it was pushed to (decision 0070), and the object stays
    // unfound until the operator decides again. With the member clearing its record at the
    // push, the seed fails again.
    let outs = run_seeds(1_208_721..=1_208_721, |seed| SimConfig { snaps: true, ..SimConfig::rot_unacked(seed) });
    assert!(outs[0].revert_pulls > 0, "seed 1208721 no longer pulls a copy for a revert");
    let mutated = SimConfig {
        snaps: true,
        mutations: Mutations { decided_push_clears_missing: true, ..Mutations::default() },
        ..SimConfig::rot_unacked(1_208_721)
    };
    let out = Simulation::new(mutated).run(MAX_EVENTS);
    assert!(
        out.violations.iter().any(|v| v.contains("not its last acknowledged write")),
        "seed 1208721 no longer loses an acknowledged append when a member clears its record at the push: {:?}",
        out.violations
    );
    // Seed 1210974: a deletion dropped so after the primary removed its head. The snap directory
    // that removal wrote must not carry the head's version: with it, the copy passed for the
    // head's newest write as a removal of it, and acknowledged snapshots read as absent.
    run_seeds(1_210_974..=1_210_974, |seed| SimConfig { snaps: true, ..SimConfig::rot_unacked(seed) });
}

#[test]
fn a_recovery_in_parts_leaves_a_members_clones_it_has_not_covered_yet() {
    // `--parts --snaps --host-crashes --osds 6 --hosts 3`, seed 1012007: the primary's copy of a
    // clone was unreadable; the first part of the head's recovery to each lagging member removed
    // every clone the member held, and the part that was to carry that clone could not be read.
    // No member held the clone any more, the head stayed unfound, and a client's write was resent
    // for ever. Parts now remove only the companions in the range they cover (their cursor to
    // their last companion); the primary then pulls the clone alone from a member. With the
    // first part clearing every companion, the seed does not finish.
    let cfg =
        |seed| SimConfig { snaps: true, osds: 6, hosts: 3, ..SimConfig::nemesis_in_parts(seed) }.with_host_crashes();
    let outs = run_seeds(1_012_007..=1_012_007, cfg);
    let mutated = SimConfig {
        mutations: Mutations { first_part_clears_companions: true, ..Mutations::default() },
        ..cfg(1_012_007)
    };
    // Ten times the events the seed takes to finish (a livelock runs to any bound).
    let out = Simulation::new(mutated).run(outs[0].delivered * 10);
    assert!(
        out.violations.iter().any(|v| v.contains("did not finish")),
        "seed 1012007 finishes although a first part clears every companion: {:?}",
        out.violations
    );
}

/// `--rot-unacked --omap --link-cuts --peer-heartbeats`, as the sweep that found decisions 0080
/// and 0081 ran it.
fn rot_unacked_omap_with_cuts(seed: u64) -> SimConfig {
    SimConfig { omap: true, ..SimConfig::rot_unacked(seed) }.with_link_cuts().with_peer_heartbeats()
}

#[test]
fn a_primary_peers_again_when_a_member_lost_its_activation() {
    // PG 1.2 moved from osd.1 to osd.4 and back while its primary, osd.2, was cut off from the
    // monitors: osd.2's map skipped that interval and showed the one it had activated, but
    // osd.0 and osd.1 had taken both changes and waited for an activation that never came.
    // osd.2's copy of an object then rotted, and the pull that would repair it was refused by
    // the unactivated members for ever, so the writes queued behind it never finished. A
    // primary now peers again when a member it activated says it no longer holds that
    // activation (decision 0080); undone (`ignore_lost_activation`), the seed fails again. Found
    // by a sweep (thirty-third session).
    //
    // Since decision 0091 the map also says the interval osd.2 saw began later than the one it
    // activated, and osd.2 peers again on that alone: each of the two checks suffices here, so
    // the seed fails only with both undone (`ignore_interval_since` as well), and passes with
    // either one.
    run_seeds(301_566..=301_566, rot_unacked_omap_with_cuts);
    for one_left in [
        Mutations { ignore_lost_activation: true, ..Mutations::default() },
        Mutations { ignore_interval_since: true, ..Mutations::default() },
    ] {
        let cfg = SimConfig { mutations: one_left, ..rot_unacked_omap_with_cuts(301_566) };
        let out = Simulation::new(cfg).run(MAX_EVENTS);
        assert!(out.violations.is_empty(), "one check left: {:?}", out.violations);
    }
    some_seed_fails_among(
        Mutations { ignore_lost_activation: true, ignore_interval_since: true, ..Mutations::default() },
        rot_unacked_omap_with_cuts,
        301_566..=301_566,
    );
}

#[test]
fn a_revert_asks_again_an_osd_whose_answer_about_copies_was_lost() {
    // osd.1, the primary of PG 1.4, held the only copy of an unacknowledged write, and it
    // rotted: the object was unfound. osd.3 and osd.4 held the copy before that write, with
    // every acknowledged write, but their answers to the revert's question about copies were
    // lost (a cut link), and a lost answer counted as holding nothing: every revert reported
    // the object damaged, the operator deleted it, and its acknowledged writes were gone. A
    // lost answer is now asked for again, the revert waiting meanwhile (decision 0081); undone
    // (`unanswered_copies_count_as_none`), the seed failed again until decision 0085 changed
    // its schedule; no seed of 310,000–320,000 fails under the mutation since, and the OSD test
    // `a_revert_keeps_the_newest_copy_of_the_history_another_member_holds` (its "lost answer"
    // case) carries the check. Found by the same sweep.
    run_seeds(318_056..=318_056, rot_unacked_omap_with_cuts);
}

/// `--rot-unacked --snaps --link-cuts --peer-heartbeats --short-logs 2`, as the sweep that found
/// decision 0082 ran it.
fn rot_unacked_snaps_short_logs(seed: u64) -> SimConfig {
    SimConfig { snaps: true, log_keep: Some(2), appends: false, ..SimConfig::rot_unacked(seed) }
        .with_link_cuts()
        .with_peer_heartbeats()
}

#[test]
fn a_revert_keeps_a_copy_of_the_history_from_a_member_being_backfilled() {
    // The primary held the only copy of an unacknowledged write, and it rotted. The copy before
    // it, with every acknowledged write, was on members being backfilled from the start, which
    // sent a revert their copy only from within their backfill cursor: every revert kept
    // nothing, the operator deleted the object, and its acknowledged writes (and snapshots) were
    // gone. A copy at a version certainly of the PG's history — named by the primary's log or
    // trimmed into its dups — is now sent from past the cursor too (decision 0082); undone
    // (`revert_pulls_within_cursor_only`), the first seed fails again. Found by a sweep
    // (thirty-third session), with four more seeds of the same shape.
    run_seeds(317_111..=317_111, rot_unacked_snaps_short_logs);
    for seed in [317_553, 318_880, 319_380, 319_832] {
        run_seeds(seed..=seed, rot_unacked_snaps_short_logs);
    }
    some_seed_fails_among(
        Mutations { revert_pulls_within_cursor_only: true, ..Mutations::default() },
        rot_unacked_snaps_short_logs,
        317_111..=317_111,
    );
}

#[test]
fn a_stray_whose_copy_failed_a_pull_is_not_believed_again() {
    // A stray's copy of an unfound object carried the version needed but its data had rotted.
    // Every probe named it again, every pull of it failed, and each failure made the object
    // unfound and probed the stray once more: the loop never ended, and the operator's revert
    // waited on the probes for ever. A primary now remembers, for the attempt, the copies a
    // stray failed to provide (decision 0083); undone (`believe_failed_holders`), the seed never
    // finishes again. Found by the sweep of decision 0082.
    run_seeds(317_182..=317_182, rot_unacked_snaps_short_logs);
    some_seed_fails_among(
        Mutations { believe_failed_holders: true, ..Mutations::default() },
        rot_unacked_snaps_short_logs,
        317_182..=317_182,
    );
}

#[test]
fn a_resend_of_a_write_given_up_is_applied_again_after_the_decision_left_the_log() {
    // An operator gave an unfound object up as lost; the client's write to it that was never
    // acknowledged came again after more writes than the PG log keeps. Both the write and the
    // decision were in the dups only, which named no objects: the resend was answered as done
    // from the dups, and the client was told a write had succeeded that existed nowhere. The
    // dups now keep a decision's object name (decision 0084); undone
    // (`forget_trimmed_decisions`), the seed fails again. Found by the sweep of decision 0082.
    run_seeds(317_444..=317_444, rot_unacked_snaps_short_logs);
    // A revert's resend, whose snapshot then held the wrong bytes (found with decision 0082).
    run_seeds(319_293..=319_293, rot_unacked_snaps_short_logs);
    // Seed 317444 passes under the mutation since decision 0085 changed its schedule; 311436
    // (found again then) does not.
    run_seeds(311_436..=311_436, rot_unacked_snaps_short_logs);
    some_seed_fails_among(
        Mutations { forget_trimmed_decisions: true, ..Mutations::default() },
        rot_unacked_snaps_short_logs,
        311_436..=311_436,
    );
    // The same with omap updates and a revert (`--omap --link-cuts --peer-heartbeats
    // --revert-unfound --short-logs 3`): a read then missed omap entries of the resend.
    run_seeds(310_320..=310_320, omap_reverts_short_logs);
    some_seed_fails_among(
        Mutations { forget_trimmed_decisions: true, ..Mutations::default() },
        omap_reverts_short_logs,
        310_320..=310_320,
    );
}

/// `--omap --link-cuts --peer-heartbeats --revert-unfound --short-logs 3`.
fn omap_reverts_short_logs(seed: u64) -> SimConfig {
    SimConfig { omap: true, revert_unfound: true, log_keep: Some(3), appends: false, ..SimConfig::nemesis(seed) }
        .with_link_cuts()
        .with_peer_heartbeats()
}

#[test]
fn primaries_with_unfound_objects_peer_again_only_when_an_osd_comes_or_goes() {
    // Two PGs had unfound objects, and a primary with unfound objects peered again on every new
    // map. Each activation is recorded in the map, so each PG's re-peering made the map that
    // had the other peer again: epochs climbed past 9,000, the operator's reverts never found
    // an attempt that lasted long enough to ask about copies, and the clients' writes never
    // finished. Such a primary now peers again only when the OSDs that are up change (decision
    // 0085); undone (`repeer_unfound_on_every_map`), the seed never finishes again. Found by the
    // sweep of decision 0082.
    run_seeds(314_820..=314_820, rot_unacked_snaps_short_logs);
    some_seed_fails_among(
        Mutations { repeer_unfound_on_every_map: true, ..Mutations::default() },
        rot_unacked_snaps_short_logs,
        314_820..=314_820,
    );
}

/// `--snaps --link-cuts --peer-heartbeats --revert-unfound --toofull`.
fn snaps_reverts_toofull(seed: u64) -> SimConfig {
    SimConfig {
        snaps: true,
        revert_unfound: true,
        refuse_push_per_mille: shoal_sim::TOOFULL_REFUSED_PER_MILLE,
        ..SimConfig::nemesis(seed)
    }
    .with_link_cuts()
    .with_peer_heartbeats()
}

#[test]
fn an_operators_decision_does_not_wait_for_a_backfill_cursor() {
    // An operator reverted an unfound head to the primary's copy. The decision's write waited
    // for the backfill cursor to pass the head's clones (decision 0076), and the backfill
    // waited for the primary to stop recording objects missing, which only that write would
    // do: the PG stayed backfilling below min_size, and the clients' writes never finished.
    // Decisions no longer wait for backfill cursors (decision 0086); undone
    // (`decisions_wait_for_split`), the seed never finishes again. Found by a sweep
    // (thirty-third session).
    run_seeds(311_779..=311_779, snaps_reverts_toofull);
    some_seed_fails_among(
        Mutations { decisions_wait_for_split: true, ..Mutations::default() },
        snaps_reverts_toofull,
        311_779..=311_779,
    );
    // A first version let backfill go on instead, and sent a decided head's kept copy to a
    // target before the decision was logged: these two seeds then lost an acknowledged write.
    for seed in [403_267, 403_816] {
        run_seeds(seed..=seed, rot_unacked_omap_with_cuts);
    }
}

#[test]
fn a_revert_asks_about_objects_found_unfound_after_the_first_question() {
    // Two objects of one PG became unfound, one after the other, in the same peering attempt.
    // The other members were asked about copies of the first only, and never again: the
    // revert reported the second damaged with no copy elsewhere, the operator deleted it, and
    // its acknowledged writes were gone although members held them. Each OSD is now asked about
    // every unfound object it was not asked about yet (decision 0087); undone
    // (`ask_copies_once_per_attempt`), the seed fails again. Found by a sweep (thirty-third
    // session).
    run_seeds(400_878..=400_878, rot_unacked_snaps_short_logs);
    some_seed_fails_among(
        Mutations { ask_copies_once_per_attempt: true, ..Mutations::default() },
        rot_unacked_snaps_short_logs,
        400_878..=400_878,
    );
}

#[test]
fn a_backfill_chunk_never_reaches_over_a_removal_on_its_way() {
    // A primary applied a client's removal and sent it to its members, and in the same batch
    // listed the next backfill chunk for a member being backfilled: the removed object was no
    // longer listed, so the chunk's range reached over it and the target, which had no copy,
    // counted itself as holding the PG past it. The removal's messages were lost with the
    // primary cut off; the new primary (the former target) believed it held the object at the
    // log's version and had none, and acknowledged writes of it were lost. A chunk's range now
    // stops before any object with writes on their way (decision 0088); undone
    // (`backfill_over_removals_in_flight`), the seed fails again. Found by a sweep
    // (thirty-third session).
    run_seeds(601_767..=601_767, rot_unacked_snaps_short_logs);
    some_seed_fails_among(
        Mutations { backfill_over_removals_in_flight: true, ..Mutations::default() },
        rot_unacked_snaps_short_logs,
        601_767..=601_767,
    );
}

#[test]
fn a_stray_whose_probe_failed_is_probed_again() {
    // An unfound object's only copy was on a stray whose one probe was lost. Nothing probed it
    // again: before decision 0085 every map change re-peered the PG, which probed afresh, and
    // since then the PG stays in its attempt. Failed probes are now retried on the tick while
    // the PG has unfound objects (decision 0085, amended); undone (`no_probe_retries`), the
    // seed never finishes again. Found by the review sweep (thirty-third session).
    let config = |seed| SimConfig {
        snaps: true,
        log_keep: Some(1),
        dups_objects: Some(64),
        appends: false,
        ..SimConfig::toofull(seed).with_link_cuts()
    };
    run_seeds(951_182..=951_182, config);
    some_seed_fails_among(Mutations { no_probe_retries: true, ..Mutations::default() }, config, 951_182..=951_182);
}

/// `--snaps --early-replace --revert-unfound --link-cuts --peer-heartbeats --short-logs 3`.
fn snaps_early_reverts_short_logs(seed: u64) -> SimConfig {
    SimConfig {
        snaps: true,
        early_replacement: true,
        revert_unfound: true,
        log_keep: Some(3),
        appends: false,
        ..SimConfig::nemesis(seed)
    }
    .with_link_cuts()
    .with_peer_heartbeats()
}

#[test]
fn a_backfilled_member_keeps_the_request_ids_its_primary_trims_on_activation() {
    // A client's removal was applied at 30'24 and the PG's later writes trimmed it from the
    // authority's log. The primary that activated next held it in its own log: replacing that
    // log by the authority's moved it into the primary's dups, but the dups it had sent the
    // member it backfilled from the start were read before that replacement. The member, primary
    // later, did not know the request, applied the client's resend a second time, and answered
    // "no such object" for a removal that had succeeded. The primary now activates itself first
    // and shares the dups as its replacement left them (decision 0089); undone
    // (`share_dups_before_own_replacement`), the seed fails again. Found by a sweep (thirty-third
    // session).
    run_seeds(902_849..=902_849, snaps_early_reverts_short_logs);
    some_seed_fails_among(
        Mutations { share_dups_before_own_replacement: true, ..Mutations::default() },
        snaps_early_reverts_short_logs,
        902_849..=902_849,
    );
}

#[test]
fn a_record_of_an_interval_that_went_and_came_back_is_refused() {
    // osd.4 activated PG 1.4 with osd.3 while osd.1 was down, and queued its record while a
    // command of its own was with the monitors. osd.1 came up, led the PG, and activated osd.3
    // and osd.4 again (to be backfilled from its log; recovery only, so not recorded); then
    // osd.1 went down, and the PG's interval was osd.4 and osd.3 with the same `up_from`s
    // again. osd.4's queued record reached the monitors then and passed their interval check
    // (decision 0079): it named members that no longer held the PG whole, and the PG stayed
    // incomplete for ever, even with every OSD up. The monitors now also refuse a record whose
    // PG's interval changed after it was made (`ClusterMap::pg_interval_since`, decision 0090);
    // the map test `an_activation_is_not_recorded_after_its_interval_went_and_came_back` fails
    // without the check. Found by a sweep (thirty-third session), fixed in the thirty-fourth.
    run_seeds(950_280..=950_280, rot_unacked_snaps_short_logs);
}

#[test]
fn writes_of_whole_blocks_keep_the_checksums_they_arrived_with_through_faults() {
    // Values of two 4 KiB blocks (`shoal-sim --short-logs 2 --value-bytes 8192`): every write
    // hands its OSDs the blocks' checksums with the data, as a server's reader does (decision
    // 0094), and the stores keep them; every copy read back, recovered or backfilled through the
    // nemesis' crashes, partitions and replacements must check against them. A store that kept
    // altered checksums fails these seeds (checked by hand when the test was written: seeds 118
    // and 119 of 100..=119 fail then); with the default 512-byte values the path is not taken.
    let config = |seed| SimConfig { log_keep: Some(2), appends: false, value_bytes: 8192, ..SimConfig::nemesis(seed) };
    let outs = run_seeds(100..=129, config);
    assert!(total(&outs, |o| o.acked_writes) > 0);
}

/// `shoal-sim --parts --toofull --short-logs 2 --value-bytes 12288 --snaps --link-cuts
/// --peer-heartbeats`.
fn large_values_in_parts_with_snaps_and_cut_links(seed: u64) -> SimConfig {
    SimConfig { snaps: true, log_keep: Some(2), appends: false, ..SimConfig::toofull(seed) }
        .with_value_bytes(12288)
        .with_link_cuts()
        .with_peer_heartbeats()
}

#[test]
fn a_head_backfilled_without_its_clones_is_not_pulled_from_its_holder() {
    // osd.3 backfilled osd.0 and sent head c0-o0 (a head sorts before its clones); the backfill
    // was cut off before clone 1 went. In the next interval osd.0's backfill started over from
    // the first object, so its cursor no longer split the head from its clones, and the new
    // primary, osd.4, missing the object, pulled it from osd.0: the head's stored version was
    // the one needed, and a vouched pull is answered past the cursor. osd.4 got a head whose
    // snapshot state named clone 1 with no clone 1, every member copied it from there, and a
    // read at snapshot 1 found nothing. A member now refuses a pull of a head past its cursor
    // that names clones it lacks (decision 0099); undone (`pull_heads_without_their_clones`),
    // the seed fails again. Found by a sweep (fortieth session).
    run_seeds(503_827..=503_827, large_values_in_parts_with_snaps_and_cut_links);
    some_seed_fails_among(
        Mutations { pull_heads_without_their_clones: true, ..Mutations::default() },
        large_values_in_parts_with_snaps_and_cut_links,
        503_827..=503_827,
    );
}

#[test]
fn a_revert_pulls_a_newer_copy_in_parts_over_an_older_one_its_primary_could_keep() {
    // `shoal-sim --parts --revert-unfound --omap --clients 4 --peer-heartbeats`, seed 906696:
    // c1-o3 was unfound at its primary, osd.1, which held it at 17'1; osd.3 held the newer copy,
    // 23'9, with acknowledged writes (and an omap larger than one 64-byte part). The revert chose
    // osd.3's copy, but the pull of it did not fit one message, and over a copy the primary could
    // keep it was not pulled in parts: the next revert kept osd.1's older copy, and the
    // acknowledged writes osd.3 held were gone. Such a copy is now pulled in parts (decision
    // 0066, second amendment); undone (`revert_in_parts_only_without_a_copy`), the seed fails
    // again. Found by a sweep of new combinations (forty-first session).
    let config = |seed| {
        SimConfig { omap: true, revert_unfound: true, clients: 4, ..SimConfig::nemesis_in_parts(seed) }
            .with_peer_heartbeats()
    };
    let outs = run_seeds(906_696..=906_696, config);
    assert!(total(&outs, |o| o.revert_parts_pulled) > 0, "the copy to revert to came in parts");
    some_seed_fails_among(
        Mutations { revert_in_parts_only_without_a_copy: true, ..Mutations::default() },
        config,
        906_696..=906_696,
    );
}

#[test]
fn a_temporary_acting_set_is_handed_back_when_placement_names_the_same_osds_again() {
    // `shoal-sim --parts`, seeds 142 and 620: a PG's primary lacked its history and took a
    // temporary acting set, then placement came back to the same OSDs in the same order (an OSD
    // out and in again) before the PG was clean. The primary handed back only a set that differed
    // from placement's, so the entry stayed in the map of a clean cluster; the real-process
    // nemesis test met the same (`temporary acting sets left in a clean cluster`). The simulation
    // now counts such an entry as a violation, and the primary hands it back too; undone
    // (`keep_temp_equal_to_placement`), the seeds fail again. Found in the forty-second session.
    run_seeds(142..=142, SimConfig::nemesis_in_parts);
    run_seeds(620..=620, SimConfig::nemesis_in_parts);
    some_seed_fails_among(
        Mutations { keep_temp_equal_to_placement: true, ..Mutations::default() },
        SimConfig::nemesis_in_parts,
        142..=142,
    );
}

#[test]
fn large_values_sent_in_parts_finish_while_pushes_are_refused_and_messages_lost() {
    // `shoal-sim --parts --toofull --short-logs 2 --value-bytes 12288 --snaps --link-cuts
    // --peer-heartbeats`: the part size grows with the values (decision 0095), so a 12 KiB
    // object goes in as many parts as a 512-byte one did. With the scenario's 64- or 200-byte
    // parts (`--chunk 64`) 7 of these 8 seeds never finish: every lost push answer makes the
    // primary peer again and start its object of hundreds of parts over.
    let config = |seed| {
        let cfg = large_values_in_parts_with_snaps_and_cut_links(seed);
        let parts = SimConfig::toofull(seed).backfill_chunk_bytes.expect("a scenario in parts");
        assert_eq!(cfg.backfill_chunk_bytes, Some(parts * 24), "seed {seed}: the part size grows with the values");
        cfg
    };
    let outs = run_seeds(2_700_000..=2_700_007, config);
    assert!(total(&outs, |o| o.backfills_started) > 0);
}
