//! `shoal-sim`: runs the nemesis simulation over many seeds and prints every failing one, or
//! replays one seed with its faults and the OSDs' log.
//!
//! ```text
//! shoal-sim --seeds 10000            # seeds 1..=10000 on every core
//! shoal-sim --from 5000 --seeds 100  # seeds 5000..=5099
//! shoal-sim --seed 1234 --verbose    # replay one seed: faults, outcome, OSD log on stderr
//! shoal-sim --seed 1234 --verbose --watch c0-o0  # and every change to what the OSDs hold of one object
//! shoal-sim --mutate skip_prev_check  # with one safety mechanism off: seeds must fail
//! shoal-sim --parts                  # backfill in parts of 64 or 200 bytes (the objects are larger)
//! shoal-sim --rot-and-replace        # a damaged copy and a replaced disk at the same moment
//! shoal-sim --rot-unacked            # the one copy of an unacknowledged write damaged; reverts
//! shoal-sim --toofull                # a quarter of pushes refused as too full (with any of the above)
//! shoal-sim --rot-and-replace --chunk 64  # any scenario with backfill and recovery in parts of 64 bytes
//! shoal-sim --short-logs 2 --value-bytes 8192  # whole-object writes of whole blocks (their checksums handed over)
//! shoal-sim --observers 2             # two clients also read the writers' objects (decision 0035)
//! shoal-sim --short-logs 4            # PG logs of 4 entries: peering meets trimmed logs
//! shoal-sim --short-logs 1 --dups-objects 64  # and request ids kept for 64 writes past the log
//! shoal-sim --read-offload            # OSDs run client reads beside their workers
//! shoal-sim --pool-size 2 --min-size 1  # two copies, writes acknowledged by one member alone
//! shoal-sim --pool-size 1            # one copy (the HPC mode's pools), no store lost or damaged
//! shoal-sim --osds 9 --hosts 3       # three OSDs per host: copies placed on distinct hosts
//! shoal-sim --osds 9 --hosts 3 --host-crashes  # and crashes that take a whole host
//! shoal-sim --link-cuts             # links between two OSDs cut for a while (partial partitions)
//! shoal-sim --peer-heartbeats       # OSDs ping peers; one cut off from them for long is marked down
//! shoal-sim --clients 6 --writes 200  # more clients, longer runs (the scenario's: 3 and 40)
//! shoal-sim --pg-num 32              # more PGs per OSD (the nemesis's default is 8)
//! ```

use std::process::ExitCode;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use shoal_sim::{SimConfig, Simulation};

/// A run that delivers more events than this has livelocked; it is reported as a failure.
const MAX_EVENTS: u64 = 2_000_000;

struct Args {
    from: u64,
    seeds: u64,
    jobs: usize,
    verbose: bool,
    /// `--watch NAME`: the object whose copies are logged as they change (`SimConfig::watch`).
    watch: Option<String>,
    /// The faults: `SimConfig::nemesis` unless a flag picks another scenario.
    config: fn(u64) -> SimConfig,
    /// The flag that picked it (for the replay line).
    scenario_flag: &'static str,
    mutations: shoal_osd::Mutations,
    observers: u32,
    read_offload: bool,
    omap: bool,
    /// `--value-bytes`: the size of whole-object writes (`None`: the scenario's); a scenario in
    /// parts grows its part size with it (`SimConfig::with_value_bytes`, decision 0095).
    value_bytes: Option<usize>,
    snaps: bool,
    /// Pushes refused as too full (`SimConfig::refuse_push_per_mille`).
    toofull: bool,
    /// `--chunk`: the backfill chunk for any scenario (`None`: the scenario's).
    chunk_bytes: Option<u64>,
    log_keep: Option<usize>,
    /// Dups objects kept beyond short logs (`SimConfig::dups_objects`).
    dups_objects: Option<u64>,
    early_replacement: bool,
    revert_unfound: bool,
    /// The pool's size and `min_size` instead of the scenario's (3 and 2).
    pool_size: Option<u32>,
    min_size: Option<u32>,
    /// OSDs, hosts and PGs instead of the scenario's (see [`check_layout`]).
    osds: Option<u32>,
    hosts: Option<u32>,
    pg_num: Option<u32>,
    /// Crashes widened to whole hosts (`SimConfig::with_host_crashes`).
    host_crashes: bool,
    /// Links between two OSDs cut for a while (`SimConfig::with_link_cuts`).
    link_cuts: bool,
    /// Peer heartbeats and a long cut of one OSD from its peers (`SimConfig::with_peer_heartbeats`).
    peer_heartbeats: bool,
    /// Clients and the writes each issues instead of the scenario's (3 and 40).
    clients: Option<u32>,
    writes: Option<u32>,
}

/// Switches on the mutation called `name` (a field of [`shoal_osd::Mutations`]).
fn mutate(m: &mut shoal_osd::Mutations, name: &str) -> Result<(), String> {
    let flag = match name {
        "skip_prev_check" => &mut m.skip_prev_check,
        "skip_activation_record" => &mut m.skip_activation_record,
        "primary_is_authority" => &mut m.primary_is_authority,
        "ignore_down" => &mut m.ignore_down,
        "no_repair_on_access" => &mut m.no_repair_on_access,
        "blind_scrub" => &mut m.blind_scrub,
        "accept_stale_activation" => &mut m.accept_stale_activation,
        "keep_stale_parts" => &mut m.keep_stale_parts,
        "answer_unactivated_pulls" => &mut m.answer_unactivated_pulls,
        "resume_blind" => &mut m.resume_blind,
        "no_backfill_compare" => &mut m.no_backfill_compare,
        "keep_rewritten" => &mut m.keep_rewritten,
        "vouch_past_cursor" => &mut m.vouch_past_cursor,
        "recover_heads_only" => &mut m.recover_heads_only,
        "answer_given_up_resends" => &mut m.answer_given_up_resends,
        "keep_unnamed_needs" => &mut m.keep_unnamed_needs,
        "skip_holder_check" => &mut m.skip_holder_check,
        "skip_record_extension" => &mut m.skip_record_extension,
        "forget_holders" => &mut m.forget_holders,
        "keep_rolled_back" => &mut m.keep_rolled_back,
        "no_pull_around_damage" => &mut m.no_pull_around_damage,
        "push_every_clone" => &mut m.push_every_clone,
        "revert_primary_copy_only" => &mut m.revert_primary_copy_only,
        "accept_stale_pushes" => &mut m.accept_stale_pushes,
        "share_loaded_dups_only" => &mut m.share_loaded_dups_only,
        "share_dups_before_own_replacement" => &mut m.share_dups_before_own_replacement,
        "ignore_interval_since" => &mut m.ignore_interval_since,
        "head_versions_only" => &mut m.head_versions_only,
        "split_by_sent_cursor_only" => &mut m.split_by_sent_cursor_only,
        "removals_need_copies" => &mut m.removals_need_copies,
        "no_stamp_unchanged" => &mut m.no_stamp_unchanged,
        "lose_clones_with_lost_head" => &mut m.lose_clones_with_lost_head,
        "ignore_lost_activation" => &mut m.ignore_lost_activation,
        "unanswered_copies_count_as_none" => &mut m.unanswered_copies_count_as_none,
        "revert_pulls_within_cursor_only" => &mut m.revert_pulls_within_cursor_only,
        "believe_failed_holders" => &mut m.believe_failed_holders,
        "forget_trimmed_decisions" => &mut m.forget_trimmed_decisions,
        "repeer_unfound_on_every_map" => &mut m.repeer_unfound_on_every_map,
        "decisions_wait_for_split" => &mut m.decisions_wait_for_split,
        "ask_copies_once_per_attempt" => &mut m.ask_copies_once_per_attempt,
        "backfill_over_removals_in_flight" => &mut m.backfill_over_removals_in_flight,
        "no_probe_retries" => &mut m.no_probe_retries,
        "pull_heads_without_their_clones" => &mut m.pull_heads_without_their_clones,
        "revert_in_parts_only_without_a_copy" => &mut m.revert_in_parts_only_without_a_copy,
        "keep_temp_equal_to_placement" => &mut m.keep_temp_equal_to_placement,
        other => {
            return Err(format!(
                "--mutate: unknown mutation '{other}' (skip_prev_check, skip_activation_record, \
                 primary_is_authority, ignore_down, no_repair_on_access, blind_scrub, accept_stale_activation, \
                 keep_stale_parts, answer_unactivated_pulls, resume_blind, no_backfill_compare, \
                 keep_rewritten, vouch_past_cursor, recover_heads_only, answer_given_up_resends, keep_unnamed_needs, skip_holder_check, \
                 skip_record_extension, forget_holders, keep_rolled_back, no_pull_around_damage, push_every_clone, revert_primary_copy_only, \
                 accept_stale_pushes, share_loaded_dups_only, share_dups_before_own_replacement, head_versions_only, split_by_sent_cursor_only, removals_need_copies, no_stamp_unchanged, lose_clones_with_lost_head, \
                 ignore_lost_activation, unanswered_copies_count_as_none, \
                 revert_pulls_within_cursor_only, believe_failed_holders, \
                 forget_trimmed_decisions, repeer_unfound_on_every_map, \
                 decisions_wait_for_split, ask_copies_once_per_attempt, \
                 backfill_over_removals_in_flight, no_probe_retries, ignore_interval_since, \
                 pull_heads_without_their_clones, revert_in_parts_only_without_a_copy, \
                 keep_temp_equal_to_placement)"
            ));
        }
    };
    *flag = true;
    Ok(())
}

fn parse() -> Result<Args, String> {
    let mut args = Args {
        from: 1,
        seeds: 1000,
        jobs: std::thread::available_parallelism().map_or(1, |n| n.get()),
        verbose: false,
        watch: None,
        config: SimConfig::nemesis,
        scenario_flag: "",
        mutations: shoal_osd::Mutations::default(),
        observers: 0,
        read_offload: false,
        omap: false,
        value_bytes: None,
        snaps: false,
        toofull: false,
        chunk_bytes: None,
        log_keep: None,
        dups_objects: None,
        early_replacement: false,
        revert_unfound: false,
        pool_size: None,
        min_size: None,
        osds: None,
        hosts: None,
        pg_num: None,
        host_crashes: false,
        link_cuts: false,
        peer_heartbeats: false,
        clients: None,
        writes: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        // The flag's number, within `lo..=hi` (the range is named in the error).
        let mut num_in = |name: &str, lo: u64, hi: u64| -> Result<u64, String> {
            let v = it.next().ok_or(format!("{name} needs a number"))?;
            let n: u64 = v.parse().map_err(|_| format!("{name}: '{v}' is not a number"))?;
            if (lo..=hi).contains(&n) { Ok(n) } else { Err(format!("{name}: {lo} to {hi}, got {n}")) }
        };

        match a.as_str() {
            "--seeds" => args.seeds = num_in("--seeds", 0, u64::MAX)?,
            "--from" => args.from = num_in("--from", 0, u64::MAX)?,
            "--seed" => {
                args.from = num_in("--seed", 0, u64::MAX)?;
                args.seeds = 1;
            }
            "--jobs" => args.jobs = num_in("--jobs", 1, 64)?.max(1) as usize,
            "--verbose" | "-v" => args.verbose = true,
            "--watch" => args.watch = Some(it.next().ok_or("--watch needs an object name (e.g. c0-o0)")?),
            "--parts" | "--rot-and-replace" | "--rot-unacked" if !args.scenario_flag.is_empty() => {
                return Err(format!(
                    "{a} after{}: --parts, --rot-and-replace and --rot-unacked are alternatives (give one)",
                    args.scenario_flag
                ));
            }
            "--parts" => (args.config, args.scenario_flag) = (SimConfig::nemesis_in_parts, " --parts"),
            "--toofull" => args.toofull = true,
            // The setting's own bounds (64 bytes to 16 MiB).
            "--chunk" => args.chunk_bytes = Some(num_in("--chunk", 64, shoal_map::config::BACKFILL_CHUNK_BYTES_MAX)?),
            "--rot-and-replace" => {
                (args.config, args.scenario_flag) = (SimConfig::rot_and_replace, " --rot-and-replace");
            }
            "--rot-unacked" => (args.config, args.scenario_flag) = (SimConfig::rot_unacked, " --rot-unacked"),
            "--observers" => {
                args.observers = num_in("--observers", 0, 16)? as u32;
            }
            "--read-offload" => args.read_offload = true,
            "--omap" => args.omap = true,
            "--value-bytes" => args.value_bytes = Some(num_in("--value-bytes", 1, 1 << 20)? as usize),
            "--snaps" => args.snaps = true,
            "--early-replace" => args.early_replacement = true,
            "--revert-unfound" => args.revert_unfound = true,
            // Entries per PG log; dups objects beyond it (checked against the PG's limit below).
            "--short-logs" => args.log_keep = Some(num_in("--short-logs", 1, 64)? as usize),
            "--dups-objects" => {
                args.dups_objects = Some(num_in("--dups-objects", 1, shoal_osd::pglog::MAX_DUPS_OBJECTS)?);
            }
            // Sizes and layout are checked against each other in `check_sizes` and `check_layout`;
            // these bounds only keep them in `u32`.
            "--pool-size" => args.pool_size = Some(num_in("--pool-size", 0, 64)? as u32),
            "--min-size" => args.min_size = Some(num_in("--min-size", 0, 64)? as u32),
            "--osds" => args.osds = Some(num_in("--osds", 0, 1024)? as u32),
            "--hosts" => args.hosts = Some(num_in("--hosts", 0, 1024)? as u32),
            "--pg-num" => args.pg_num = Some(num_in("--pg-num", 0, 65_536)? as u32),
            "--host-crashes" => args.host_crashes = true,
            "--link-cuts" => args.link_cuts = true,
            "--peer-heartbeats" => args.peer_heartbeats = true,
            "--clients" => args.clients = Some(num_in("--clients", 1, 16)? as u32),
            "--writes" => args.writes = Some(num_in("--writes per client", 1, 1000)? as u32),
            "--mutate" => mutate(&mut args.mutations, &it.next().ok_or("--mutate needs a mutation name")?)?,
            "--help" | "-h" => {
                return Err(
                    "usage: shoal-sim [--seeds N] [--from FIRST] [--seed S] [--jobs J] [--parts | --rot-and-replace | --rot-unacked] [--chunk BYTES] [--toofull] \
                     [--observers N] [--read-offload] [--omap | --snaps] [--value-bytes N] [--short-logs K [--dups-objects N]] \
                     [--early-replace] [--revert-unfound] [--pool-size N] [--min-size M] [--osds N] [--hosts H] \
                     [--host-crashes] [--link-cuts] [--peer-heartbeats] [--pg-num P] [--clients N] [--writes N] [--mutate NAME]... [--verbose [--watch OBJECT]]"
                        .into(),
                );
            }
            other => return Err(format!("unknown argument '{other}' (see --help)")),
        }
    }
    // Dups objects are counted in units of the log's length, so they need a short log's.
    if args.dups_objects.is_some() && args.log_keep.is_none() {
        return Err("--dups-objects goes with --short-logs".into());
    }
    if let (Some(n), Some(keep)) = (args.dups_objects, args.log_keep) {
        let most = shoal_osd::pglog::DUPS_OBJECTS * shoal_osd::pglog::LOG_ENTRIES as u64;
        if n * keep as u64 > most {
            return Err(format!("--dups-objects {n} with --short-logs {keep}: over the {most} request ids a PG keeps"));
        }
    }
    check_sizes(&args)?;
    check_layout(&args)?;
    // The snapshot model knows data, not omap, and observers check orders of plain writes.
    if args.snaps && (args.omap || args.observers > 0) {
        return Err("--snaps goes with neither --omap nor --observers".into());
    }
    Ok(args)
}

/// The pool sizes a run may use. One copy cannot survive the nemesis's replaced disk or damaged
/// block, which the checker would report as lost writes that no code could have kept: a pool of
/// one runs without those faults (`SimConfig::without_store_loss`). A pool of five or more
/// copies gets a sixth OSD or more (see `main`). A damaged copy and a replaced disk at once need
/// a third copy.
fn check_sizes(args: &Args) -> Result<(), String> {
    let size = args.pool_size.unwrap_or(3);
    let min = args.min_size.unwrap_or(size.min(2));
    if !(1..=8).contains(&size) {
        return Err(format!("--pool-size: 1 to 8 copies, got {size}"));
    }
    if !(1..=size).contains(&min) {
        return Err(format!("--min-size: 1 to the pool's size ({size}), got {min}"));
    }
    if size < 3 && args.scenario_flag == " --rot-and-replace" {
        return Err(
            "--rot-and-replace needs --pool-size 3 or more (the damage and the replacement take two copies)".into()
        );
    }
    // The damage and the replacement leave one good copy, but an OSD cut off as primary applies
    // writes that peering then rolls back: the one good copy can be overwritten by such a write,
    // and no copy at the history's version is left. Only an operator's revert (which may keep
    // the unacknowledged write) settles the object (seeds 1300999, 1503843 and 1505997 of the
    // thirty-fourth session's sweeps never finished without one).
    if args.scenario_flag == " --rot-and-replace" && (args.link_cuts || args.peer_heartbeats) && !args.revert_unfound {
        return Err("--rot-and-replace with --link-cuts or --peer-heartbeats needs --revert-unfound (the copy left \
                    whole may take a write that peering rolls back, leaving the object unfound)"
            .into());
    }
    // The write whose newest copy the nemesis damages may still be acknowledged: with min_size
    // 1 it may be on that copy alone. And the nemesis replaces disks too: with two copies the
    // other one may be the disk replaced. Either way the damage loses an acknowledged write by
    // construction (seeds 700008, 700125 and 701507 of the thirty-third session's sweeps).
    if (size < 3 || min < 2) && args.scenario_flag == " --rot-unacked" {
        return Err("--rot-unacked needs --pool-size 3 or more and --min-size 2 or more (the damaged write may be \
                    acknowledged on its only copy, or the other copy's disk replaced)"
            .into());
    }
    Ok(())
}

/// The OSDs, hosts and PGs a run may use. OSD `i` lives on host `i % hosts`, and copies of a PG
/// go to distinct hosts. The nemesis may keep one OSD out for good, so the pool must still find
/// `size` hosts with an OSD in after any one OSD is gone: more hosts than copies, or as many
/// with at least two OSDs on each. The nemesis draws its faults over its own five or six OSDs;
/// the ones added here take none (they take data as placement moves it).
fn check_layout(args: &Args) -> Result<(), String> {
    let size = args.pool_size.unwrap_or(3);
    if let Some(n) = args.osds
        && !(size + 1..=32).contains(&n)
    {
        return Err(format!("--osds: {} to 32 (one more than the pool's {size} copies), got {n}", size + 1));
    }
    if let Some(h) = args.hosts {
        // Counted with the fewest OSDs the run may have: the scenario's five, or --osds.
        let osds = args.osds.unwrap_or(5).max(size + 1);
        if h < size || h > osds {
            return Err(format!("--hosts: {size} (the pool's copies) to {osds} (the OSDs), got {h}"));
        }
        if h == size && osds < 2 * h {
            return Err(format!(
                "--hosts {h} with {osds} OSDs: as many hosts as copies need two OSDs on each (--osds {}), since \
                 the nemesis may keep one out for good",
                2 * h
            ));
        }
    }
    if args.host_crashes && args.hosts.is_none() {
        return Err("--host-crashes needs --hosts (with one OSD per host there is nothing to widen)".into());
    }
    if let Some(p) = args.pg_num
        && !(1..=256).contains(&p)
    {
        return Err(format!("--pg-num: 1 to 256, got {p}"));
    }
    Ok(())
}

fn main() -> ExitCode {
    let args = match parse() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    if args.verbose {
        tracing_subscriber::fmt()
            .with_max_level(tracing::Level::DEBUG)
            .with_writer(std::io::stderr)
            .with_target(false)
            .without_time()
            .init();
    }
    let next = AtomicU64::new(args.from);
    let end = args.from.saturating_add(args.seeds);
    let done = AtomicU64::new(0);
    // Backfills started from the first object and resumed past a cursor, over all seeds: shows
    // what the runs exercised.
    let backfills = (AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0));
    let snap_reads = AtomicU64::new(0);
    let needs_named = AtomicU64::new(0);
    let peer_downs = AtomicU64::new(0);
    let reverts = (AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0));
    let unacked_rotted = AtomicU64::new(0);
    let unfound_deleted = AtomicU64::new(0);
    let failed: Mutex<Vec<(u64, Vec<String>)>> = Mutex::new(Vec::new());
    let started = std::time::Instant::now();
    std::thread::scope(|s| {
        for _ in 0..args.jobs.min(args.seeds.max(1) as usize) {
            s.spawn(|| {
                loop {
                    let seed = next.fetch_add(1, Ordering::Relaxed);
                    if seed >= end {
                        break;
                    }
                    let base = (args.config)(seed);
                    let cfg = SimConfig {
                        watch: args.watch.clone(),
                        mutations: args.mutations,
                        observers: args.observers,
                        read_offload: args.read_offload,
                        omap: args.omap,
                        snaps: args.snaps,
                        refuse_push_per_mille: if args.toofull {
                            shoal_sim::TOOFULL_REFUSED_PER_MILLE
                        } else {
                            base.refuse_push_per_mille
                        },
                        log_keep: args.log_keep,
                        dups_objects: args.dups_objects,
                        early_replacement: args.early_replacement,
                        revert_unfound: args.revert_unfound || base.revert_unfound,
                        // Short logs forget resent writes sooner than the resends come (see
                        // `SimConfig::log_keep`): writes replace objects instead.
                        appends: base.appends && args.log_keep.is_none(),
                        pool_size: args.pool_size.unwrap_or(base.pool_size),
                        // One OSD more than the pool's size, at least: the nemesis may keep one
                        // out for good, and the pool must still be placed whole (the added OSDs
                        // take no faults).
                        osds: base.osds.max(args.pool_size.unwrap_or(0) + 1).max(args.osds.unwrap_or(0)),
                        hosts: args.hosts.unwrap_or_else(|| {
                            base.hosts.max(args.pool_size.unwrap_or(0) + 1).max(args.osds.unwrap_or(0))
                        }),
                        pg_num: args.pg_num.unwrap_or(base.pg_num),
                        clients: args.clients.unwrap_or(base.clients),
                        writes_per_client: args.writes.unwrap_or(base.writes_per_client),
                        min_size: args
                            .min_size
                            .unwrap_or_else(|| args.pool_size.map_or(base.min_size, |size| base.min_size.min(size))),
                        ..base
                    };
                    let cfg = if cfg.pool_size == 1 { cfg.without_store_loss() } else { cfg };
                    let cfg = match args.value_bytes {
                        Some(bytes) => cfg.with_value_bytes(bytes),
                        None => cfg,
                    };
                    let cfg = if args.host_crashes { cfg.with_host_crashes() } else { cfg };
                    let cfg = SimConfig { backfill_chunk_bytes: args.chunk_bytes.or(cfg.backfill_chunk_bytes), ..cfg };
                    let cfg = if args.link_cuts { cfg.with_link_cuts() } else { cfg };
                    let cfg = if args.peer_heartbeats { cfg.with_peer_heartbeats() } else { cfg };
                    if args.verbose {
                        println!("seed {seed}: {} OSDs, appends {}, faults:", cfg.osds, cfg.appends);
                        for (at, f) in &cfg.faults {
                            println!("  {:>8} us  {f:?}", at);
                        }
                    }
                    let expected = u64::from(cfg.clients * cfg.writes_per_client);
                    let out = Simulation::new(cfg).run(MAX_EVENTS);
                    backfills.0.fetch_add(out.backfills_started, Ordering::Relaxed);
                    backfills.1.fetch_add(out.backfills_resumed, Ordering::Relaxed);
                    backfills.2.fetch_add(out.backfill_objects_kept, Ordering::Relaxed);
                    backfills.3.fetch_add(out.recovery_clones_kept, Ordering::Relaxed);
                    backfills.4.fetch_add(out.clones_in_later_parts, Ordering::Relaxed);
                    snap_reads.fetch_add(out.snap_reads_verified, Ordering::Relaxed);
                    needs_named.fetch_add(out.needs_named, Ordering::Relaxed);
                    peer_downs.fetch_add(out.marked_down_by_peers, Ordering::Relaxed);
                    reverts.0.fetch_add(out.reverts_asked, Ordering::Relaxed);
                    reverts.1.fetch_add(out.revert_pulls, Ordering::Relaxed);
                    reverts.2.fetch_add(out.revert_parts_pulled, Ordering::Relaxed);
                    unacked_rotted.fetch_add(out.unacked_rotted, Ordering::Relaxed);
                    unfound_deleted.fetch_add(out.unfound_deleted, Ordering::Relaxed);
                    let mut problems = out.violations.clone();
                    if problems.is_empty() && out.acked_writes != expected {
                        problems.push(format!("{} of {expected} writes acknowledged", out.acked_writes));
                    }
                    if args.verbose {
                        println!("{out:#?}");
                    }
                    if !problems.is_empty() {
                        println!("FAIL seed {seed}: {}", problems[0]);
                        failed.lock().unwrap_or_else(|p| p.into_inner()).push((seed, problems));
                    }
                    let n = done.fetch_add(1, Ordering::Relaxed) + 1;
                    if n.is_multiple_of(500) {
                        eprintln!("{n}/{} seeds, {:.0} s", args.seeds, started.elapsed().as_secs_f64());
                    }
                }
            });
        }
    });
    let mut failed = failed.into_inner().unwrap_or_else(|p| p.into_inner());
    failed.sort_by_key(|(s, _)| *s);
    println!(
        "{} seeds from {} in {:.1} s: {} failed (backfills: {} started, {} resumed, {} objects kept; {} clones kept by \
         recovery pushes, {} sent beside later parts; {} reads at snapshots checked; {} needs of 0'0 named; {} OSDs marked down on peers' reports; {} reverts asked, {} copies to revert to \
         pulled whole and {} parts of them; {} copies of unacknowledged writes damaged; {} PGs' \
         unfound objects given up after reverts)",
        args.seeds,
        args.from,
        started.elapsed().as_secs_f64(),
        failed.len(),
        backfills.0.load(Ordering::Relaxed),
        backfills.1.load(Ordering::Relaxed),
        backfills.2.load(Ordering::Relaxed),
        backfills.3.load(Ordering::Relaxed),
        backfills.4.load(Ordering::Relaxed),
        snap_reads.load(Ordering::Relaxed),
        needs_named.load(Ordering::Relaxed),
        peer_downs.load(Ordering::Relaxed),
        reverts.0.load(Ordering::Relaxed),
        reverts.1.load(Ordering::Relaxed),
        reverts.2.load(Ordering::Relaxed),
        unacked_rotted.load(Ordering::Relaxed),
        unfound_deleted.load(Ordering::Relaxed),
    );
    // The replay line repeats every flag the run was given.
    let switches = [
        (args.read_offload, " --read-offload"),
        (args.omap, " --omap"),
        (args.snaps, " --snaps"),
        (args.toofull, " --toofull"),
        (args.early_replacement, " --early-replace"),
        (args.revert_unfound, " --revert-unfound"),
        (args.host_crashes, " --host-crashes"),
        (args.link_cuts, " --link-cuts"),
        (args.peer_heartbeats, " --peer-heartbeats"),
    ];
    let numbers = [
        ("--chunk", args.chunk_bytes),
        ("--observers", (args.observers > 0).then_some(u64::from(args.observers))),
        ("--short-logs", args.log_keep.map(|k| k as u64)),
        ("--dups-objects", args.dups_objects),
        ("--pool-size", args.pool_size.map(u64::from)),
        ("--min-size", args.min_size.map(u64::from)),
        ("--osds", args.osds.map(u64::from)),
        ("--hosts", args.hosts.map(u64::from)),
        ("--pg-num", args.pg_num.map(u64::from)),
        ("--clients", args.clients.map(u64::from)),
        ("--writes", args.writes.map(u64::from)),
        ("--value-bytes", args.value_bytes.map(|n| n as u64)),
    ];
    let mut flags = args.scenario_flag.to_string();
    for (_, flag) in switches.iter().filter(|(on, _)| *on) {
        flags.push_str(flag);
    }
    for (flag, n) in numbers.iter().filter_map(|(flag, n)| n.map(|n| (flag, n))) {
        flags.push_str(&format!(" {flag} {n}"));
    }
    for (seed, _) in &failed {
        println!("  replay: cargo run --release -p shoal-sim -- --seed {seed}{flags} --verbose");
    }
    if failed.is_empty() { ExitCode::SUCCESS } else { ExitCode::FAILURE }
}
