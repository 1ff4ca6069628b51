//! Cluster administration that reads like Ceph's: `shoal status`, `shoal osd ...`,
//! `shoal pool ...`. Every command has `--json`.

use std::collections::BTreeMap;
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use serde_json::json;
use shoal_map::{ClusterMap, Command, OsdId, PoolSetting};

use crate::conf::ConfArgs;

#[derive(Args)]
pub struct StatusArgs {
    #[command(flatten)]
    conf: ConfArgs,
    #[arg(long)]
    json: bool,
}

#[derive(Subcommand)]
pub enum OsdCommand {
    /// The placement hierarchy with every OSD's state and weight.
    Tree {
        #[command(flatten)]
        conf: ConfArgs,
        #[arg(long)]
        json: bool,
    },
    /// Usage of every OSD (capacity, used, share used, objects, full flag), from their latest
    /// reports to the monitors.
    Df {
        #[command(flatten)]
        conf: ConfArgs,
        #[arg(long)]
        json: bool,
    },
    /// Where an object lives: its PG and the OSDs acting for it (the first is the primary).
    /// Computed from the map alone, as every client does; the object need not exist.
    Map {
        #[command(flatten)]
        conf: ConfArgs,
        pool: String,
        object: String,
        #[arg(long)]
        json: bool,
    },
    /// Stop placing data on an OSD.
    Out {
        #[command(flatten)]
        conf: ConfArgs,
        id: u32,
        #[arg(long)]
        json: bool,
    },
    /// Place data on an OSD again.
    In {
        #[command(flatten)]
        conf: ConfArgs,
        id: u32,
        #[arg(long)]
        json: bool,
    },
    /// Remove an OSD from the cluster for good. Refused unless it is down and out and every PG
    /// is reported active+clean without it; `--yes-i-really-mean-it` skips the PG check (data
    /// only it held is then lost).
    Rm {
        #[command(flatten)]
        conf: ConfArgs,
        id: u32,
        #[arg(long = "yes-i-really-mean-it")]
        force: bool,
        #[arg(long)]
        json: bool,
    },
    /// Set a cluster flag: `noout` keeps down OSDs in (no automatic out) during maintenance.
    Set {
        #[command(flatten)]
        conf: ConfArgs,
        flag: String,
        #[arg(long)]
        json: bool,
    },
    /// Clear a cluster flag.
    Unset {
        #[command(flatten)]
        conf: ConfArgs,
        flag: String,
        #[arg(long)]
        json: bool,
    },
    /// Client instances fenced off the cluster: every OSD refuses their requests (`shoal rbd lock
    /// break` and lock takeovers add the old holder here).
    #[command(subcommand)]
    Blocklist(BlocklistCommand),
}

#[derive(Subcommand)]
pub enum BlocklistCommand {
    /// The fenced client instances and when each entry lapses.
    Ls {
        #[command(flatten)]
        conf: ConfArgs,
        #[arg(long)]
        json: bool,
    },
    /// Fence client instance CLIENT (16 hex digits, as `shoal rbd lock ls` shows it) off the
    /// cluster for `--expire-s` seconds (an hour by default).
    Add {
        #[command(flatten)]
        conf: ConfArgs,
        client: String,
        #[arg(long, default_value_t = 3600)]
        expire_s: u64,
        #[arg(long)]
        json: bool,
    },
    /// Let client instance CLIENT back in.
    Rm {
        #[command(flatten)]
        conf: ConfArgs,
        client: String,
        #[arg(long)]
        json: bool,
    },
}

/// A client instance id as the CLI shows it: 16 hex digits.
fn parse_client_instance(text: &str) -> Result<u64> {
    let digits = text.trim_start_matches("0x");
    if digits.is_empty() || digits.len() > 16 {
        anyhow::bail!("client instance {text:?} must be 1 to 16 hex digits (as `shoal osd blocklist ls` shows it)");
    }
    u64::from_str_radix(digits, 16)
        .with_context(|| format!("client instance {text:?} must be hex digits (as `shoal osd blocklist ls` shows it)"))
}

fn blocklist(cmd: &BlocklistCommand) -> Result<()> {
    let now_unix_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    match cmd {
        BlocklistCommand::Ls { conf, json } => {
            let client = conf.connect()?;
            let map = client.client().mon().map();
            let entries: Vec<serde_json::Value> = map
                .blocklist
                .iter()
                .map(|(c, until)| {
                    json!({
                        "client": format!("{c:016x}"),
                        "until_unix_ms": until,
                        "expires_in_s": until.saturating_sub(now_unix_ms) / 1000,
                    })
                })
                .collect();
            print(*json, json!({"epoch": map.epoch, "blocklist": entries}), || {
                if map.blocklist.is_empty() {
                    return "no client instance is blocklisted".to_string();
                }
                let rows: Vec<String> = map
                    .blocklist
                    .iter()
                    .map(|(c, until)| {
                        let left_s = until.saturating_sub(now_unix_ms) / 1000;
                        if left_s == 0 {
                            format!("{c:016x}  lapsed (still refused until a later entry or `rm` removes it)")
                        } else {
                            format!("{c:016x}  lapses in {left_s} s")
                        }
                    })
                    .collect();
                rows.join("\n")
            });
        }
        BlocklistCommand::Add { conf, client: text, expire_s, json } => {
            let instance = parse_client_instance(text)?;
            if *expire_s == 0 {
                anyhow::bail!("--expire-s must be at least 1");
            }
            let until_unix_ms = now_unix_ms.saturating_add(expire_s.saturating_mul(1000));
            let command = Command::Blocklist { client: instance, until_unix_ms, now_unix_ms };
            let client = conf.connect()?;
            let epoch = client.runtime().block_on(client.client().mon().command(command))?;
            print(
                *json,
                json!({"client": format!("{instance:016x}"), "until_unix_ms": until_unix_ms, "epoch": epoch}),
                || format!("blocklisted {instance:016x} for {expire_s} s (epoch {epoch})"),
            );
        }
        BlocklistCommand::Rm { conf, client: text, json } => {
            let instance = parse_client_instance(text)?;
            let client = conf.connect()?;
            let epoch =
                client.runtime().block_on(client.client().mon().command(Command::Unblocklist { client: instance }))?;
            print(*json, json!({"client": format!("{instance:016x}"), "removed": true, "epoch": epoch}), || {
                format!("un-blocklisted {instance:016x} (epoch {epoch})")
            });
        }
    }
    Ok(())
}

#[derive(Subcommand)]
pub enum AuthCommand {
    /// Create a key for ENTITY (`client.NAME`, or `osd.N` to add an OSD to a running cluster)
    /// and print it as a keyring line (`shoal auth add client.bob > bob.keyring`). OSDs and
    /// monitors accept it at once.
    Add {
        #[command(flatten)]
        conf: ConfArgs,
        entity: String,
        #[arg(long)]
        json: bool,
    },
    /// Entities with keys in the cluster's auth table (the bootstrap keyring's are not listed).
    Ls {
        #[command(flatten)]
        conf: ConfArgs,
        #[arg(long)]
        json: bool,
    },
    /// Remove ENTITY's key: new connections with it are refused.
    Rm {
        #[command(flatten)]
        conf: ConfArgs,
        entity: String,
        #[arg(long)]
        json: bool,
    },
}

pub fn auth(cmd: &AuthCommand) -> Result<ExitCode> {
    match cmd {
        AuthCommand::Add { conf, entity, json } => {
            let key = shoal_net::Key::generate();
            let client = conf.connect()?;
            let command = Command::AuthAdd { entity: entity.clone(), key: key.0 };
            let epoch = client.runtime().block_on(client.client().mon().command(command))?;
            print(*json, json!({"entity": entity, "key": key.to_hex(), "epoch": epoch}), || {
                format!("{entity} {}", key.to_hex())
            });
        }
        AuthCommand::Ls { conf, json } => {
            let client = conf.connect()?;
            let map = client.client().mon().map();
            let entities: Vec<&String> = map.auth.keys().collect();
            print(*json, json!(entities), || entities.iter().map(|e| e.as_str()).collect::<Vec<_>>().join("\n"));
        }
        AuthCommand::Rm { conf, entity, json } => {
            let client = conf.connect()?;
            let command = Command::AuthRemove { entity: entity.clone() };
            let epoch = client.runtime().block_on(client.client().mon().command(command))?;
            print(*json, json!({"removed": entity, "epoch": epoch}), || format!("removed the key of {entity}"));
        }
    }
    Ok(ExitCode::SUCCESS)
}

#[derive(Subcommand)]
pub enum PoolCommand {
    /// Create a replicated pool.
    Create {
        #[command(flatten)]
        conf: ConfArgs,
        name: String,
        /// Replicas per object.
        #[arg(long, default_value_t = 3)]
        size: u32,
        /// Fewest acting replicas that still accept writes (default: size - size/2).
        #[arg(long)]
        min_size: Option<u32>,
        #[arg(long, default_value_t = 64)]
        pg_num: u32,
        /// Largest object, e.g. 64M.
        #[arg(long, value_parser = crate::conf::parse_size_arg)]
        max_object_size: Option<u64>,
        #[arg(long)]
        json: bool,
    },
    /// List pools.
    Ls {
        #[command(flatten)]
        conf: ConfArgs,
        #[arg(long)]
        json: bool,
    },
    /// Remove a pool and every object in it, for good: its objects become unreachable at once
    /// and each OSD deletes them in the background (`shoal osd df` shows the space coming back).
    /// Needs `--yes-i-really-mean-it`.
    Rm {
        #[command(flatten)]
        conf: ConfArgs,
        name: String,
        /// Confirms that the pool's data is to be deleted.
        #[arg(long)]
        yes_i_really_mean_it: bool,
        #[arg(long)]
        json: bool,
    },
    /// Change a pool property: size, min_size, pg_num or max_object_size.
    Set {
        #[command(flatten)]
        conf: ConfArgs,
        name: String,
        key: String,
        value: String,
        #[arg(long)]
        json: bool,
    },
}

pub(crate) fn print(json_out: bool, doc: serde_json::Value, text: impl FnOnce() -> String) {
    if json_out {
        println!("{doc}");
    } else {
        println!("{}", text());
    }
}

/// PG states as their primaries report them (`active+clean`, `peering`, `down`, ...), from the
/// latest report of every OSD that is up; PGs no report covers yet (a primary just changed, or
/// its first report is a second away) count as `unknown`. Returns the states and the PG total.
fn pg_summary(map: &ClusterMap, stats: &[shoal_proto::mon::OsdStats]) -> (BTreeMap<String, u64>, u64) {
    let total: u64 = map.pools.values().map(|p| u64::from(p.pg_num)).sum();
    let mut states: BTreeMap<String, u64> = BTreeMap::new();
    for s in stats.iter().filter(|s| map.osds.get(&s.osd).is_some_and(|o| o.up)) {
        for (state, n) in &s.pg_states {
            *states.entry(state.clone()).or_default() += u64::from(*n);
        }
    }
    let reported: u64 = states.values().sum();
    if reported < total {
        states.insert("unknown".into(), total - reported);
    }
    (states, total)
}

/// Recovery in view: degraded, misplaced and unfound object copies (with their share of all
/// copies), the recovery rate, the time left at that rate, and the PG copies left on OSDs that
/// no longer act for them (removed once their PG is clean elsewhere).
fn recovery_summary(stats: &[shoal_proto::mon::OsdStats], copies: u64) -> serde_json::Value {
    let degraded: u64 = stats.iter().map(|s| s.degraded_objects).sum();
    let misplaced: u64 = stats.iter().map(|s| s.misplaced_objects).sum();
    let unfound: u64 = stats.iter().map(|s| s.unfound_objects).sum();
    let rate: f64 = stats.iter().map(|s| s.recovery_objects_per_s).sum();
    let stray_pgs: u64 = stats.iter().map(|s| s.stray_pgs).sum();
    let pct = |n: u64| if copies == 0 { 0.0 } else { (n as f64 * 1000.0 / copies as f64).round() / 10.0 };
    let left = degraded + misplaced;
    let eta_secs = (rate > 0.0 && left > 0).then(|| (left as f64 / rate).ceil() as u64);
    json!({
        "degraded_objects": degraded, "degraded_percent": pct(degraded),
        "misplaced_objects": misplaced, "misplaced_percent": pct(misplaced),
        "unfound_objects": unfound, "objects_per_s": rate, "eta_secs": eta_secs,
        "stray_pgs": stray_pgs,
    })
}

/// Appends a problem for every OSD the monitors flagged full (an error: its PGs take no writes),
/// every one reporting at least [`shoal_map::BACKFILLFULL_PERMILLE`] used (a warning: backfill
/// onto it waits) and every one reporting at least [`shoal_map::NEARFULL_PERMILLE`] (a warning);
/// returns how many errors it added.
fn capacity_problems(map: &ClusterMap, stats: &[shoal_proto::mon::OsdStats], problems: &mut Vec<String>) -> usize {
    let mut errors = 0;
    for (id, info) in &map.osds {
        let report = stats.iter().find(|s| s.osd == *id);
        let permille = report.map(|s| shoal_map::used_permille(s.used_bytes, s.capacity_bytes));
        let used = permille.map_or_else(|| "usage unknown".to_string(), |p| format!("{}.{}% used", p / 10, p % 10));
        if info.full {
            problems.push(format!(
                "{id} is full ({used}): PGs with a replica on it take only removals, deletes and discards"
            ));
            errors += 1;
        } else if permille.is_some_and(|p| p >= shoal_map::BACKFILLFULL_PERMILLE) {
            problems.push(format!("{id} is backfillfull ({used}): it takes no more data moved onto it by backfill"));
        } else if permille.is_some_and(|p| p >= shoal_map::NEARFULL_PERMILLE) {
            problems.push(format!("{id} is nearfull ({used})"));
        }
    }
    errors
}

/// PGs `active+clean`, whether or not a scrub is running on them (an inconsistent one is not
/// clean).
fn clean_pgs(pgs: &BTreeMap<String, u64>) -> u64 {
    pgs.iter().filter(|(s, _)| shoal_proto::osd::state_is_clean(s)).map(|(_, n)| *n).sum()
}

pub fn status(args: &StatusArgs) -> Result<ExitCode> {
    let client = args.conf.connect()?;
    let monc = client.client().mon().clone();
    let status = client.runtime().block_on(monc.status()).context("asking the monitors for status")?;
    let map = monc.map();
    let (up, inn) = map.osd_counts();
    let (pgs, total_pgs) = pg_summary(&map, &status.osd_stats);
    let clean = clean_pgs(&pgs);
    let inconsistent: u64 = pgs.iter().filter(|(s, _)| s.contains("+inconsistent")).map(|(_, n)| *n).sum();
    let mut problems = Vec::new();
    if up < map.osds.len() {
        problems.push(format!("{} OSD(s) down", map.osds.len() - up));
    }
    if clean < total_pgs {
        problems.push(format!("{} PG(s) not active+clean", total_pgs - clean));
    }
    for (state, what) in [("backfill_toofull", "a backfill target"), ("recovery_toofull", "a member being recovered")] {
        let waiting: u64 = pgs.iter().filter(|(s, _)| s.contains(&format!("+{state}"))).map(|(_, n)| *n).sum();
        if waiting > 0 {
            problems.push(format!(
                "{waiting} PG(s) {state}: {what} is too full to take their data (free space or add OSDs)"
            ));
        }
    }
    if status.quorum.len() * 2 <= map.mons.len().max(status.quorum.len()) {
        problems.push(format!("monitor quorum {} of {}", status.quorum.len(), map.mons.len()));
    }
    if !map.flags.is_empty() {
        let flags: Vec<&str> = map.flags.iter().map(String::as_str).collect();
        problems.push(format!("{} flag(s) set", flags.join(",")));
    }
    let mut errors = capacity_problems(&map, &status.osd_stats, &mut problems);
    if inconsistent > 0 {
        errors += 1;
        problems.push(format!(
            "{inconsistent} PG(s) inconsistent: damaged or differing copies (`shoal pg list-inconsistent PGID`, `shoal pg repair PGID`)"
        ));
    }
    let objects: u64 = status.osd_stats.iter().map(|s| s.objects).sum();
    let recovery = recovery_summary(&status.osd_stats, objects);
    if recovery["unfound_objects"].as_u64().unwrap_or(0) > 0 {
        problems.push(format!(
            "{} unfound object(s): no OSD that is up holds them and requests on them wait (`shoal pg ls` shows \
             their PGs as +unfound; `shoal pg list-unfound PGID`, `shoal pg mark-unfound-lost PGID revert|delete`)",
            recovery["unfound_objects"]
        ));
    }
    let health = if errors > 0 {
        "HEALTH_ERR"
    } else if problems.is_empty() {
        "HEALTH_OK"
    } else {
        "HEALTH_WARN"
    };
    let sum = |f: fn(&shoal_proto::mon::OsdStats) -> f64| status.osd_stats.iter().map(f).sum::<f64>();
    let used: u64 = status.osd_stats.iter().map(|s| s.used_bytes).sum();
    let capacity: u64 = status.osd_stats.iter().map(|s| s.capacity_bytes).sum();
    let (rd, wr) = (sum(|s| s.read_bytes_per_s), sum(|s| s.write_bytes_per_s));
    let (rops, wops) = (sum(|s| s.read_ops_per_s), sum(|s| s.write_ops_per_s));
    let doc = json!({
        "fsid": map.fsid, "health": health, "problems": problems, "epoch": map.epoch,
        "mons": {"count": map.mons.len(), "quorum": status.quorum, "leader": status.leader},
        "osds": {"count": map.osds.len(), "up": up, "in": inn},
        "pools": map.pools.len(), "pgs": {"count": total_pgs, "by_state": pgs},
        "usage": {"objects": objects, "used_bytes": used, "capacity_bytes": capacity},
        "io": {"read_bytes_per_s": rd, "write_bytes_per_s": wr, "read_ops_per_s": rops, "write_ops_per_s": wops},
        "recovery": recovery,
    });
    print(args.json, doc, || {
        let mut s = format!("  cluster:\n    id:     {}\n    health: {health}\n", map.fsid);
        for p in &problems {
            s += &format!("            {p}\n");
        }
        s += &format!(
            "\n  services:\n    mon: {} daemons, quorum {:?}, leader {}\n    osd: {} osds: {up} up, {inn} in (epoch {})\n",
            map.mons.len(),
            status.quorum,
            status.leader.map_or("none".into(), |l| format!("mon.{l}")),
            map.osds.len(),
            map.epoch
        );
        s += &format!("\n  data:\n    pools:   {} pools, {total_pgs} pgs\n", map.pools.len());
        s += &format!(
            "    objects: {objects} (replicas counted)\n    usage:   {} used of {}\n    pgs:     {}\n",
            human(used),
            human(capacity),
            pgs.iter().map(|(k, v)| format!("{v} {k}")).collect::<Vec<_>>().join(", ")
        );
        let r = &recovery;
        if r["degraded_objects"].as_u64().unwrap_or(0) + r["misplaced_objects"].as_u64().unwrap_or(0) > 0 {
            s += &format!(
                "    recovery: {} objects degraded ({}%), {} misplaced ({}%), {} unfound\n",
                r["degraded_objects"],
                r["degraded_percent"],
                r["misplaced_objects"],
                r["misplaced_percent"],
                r["unfound_objects"]
            );
        }
        if let Some(n) = r["stray_pgs"].as_u64().filter(|n| *n > 0) {
            s += &format!("    strays:  {n} PG copies on OSDs no longer acting for them, removed once clean\n");
        }
        s += &format!(
            "\n  io:\n    client: {}/s rd, {}/s wr, {rops:.0} op/s rd, {wops:.0} op/s wr",
            human(rd as u64),
            human(wr as u64)
        );
        if let Some(rate) = r["objects_per_s"].as_f64().filter(|r| *r > 0.0) {
            let eta = r["eta_secs"].as_u64().map_or(String::new(), |e| format!(", about {e} s left"));
            s += &format!("\n    recovery: {rate:.0} objects/s{eta}");
        }
        s
    });
    Ok(ExitCode::SUCCESS)
}

fn human(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = bytes as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 { format!("{bytes} B") } else { format!("{v:.1} {}", UNITS[u]) }
}

pub fn osd(cmd: &OsdCommand) -> Result<ExitCode> {
    match cmd {
        OsdCommand::Tree { conf, json } => {
            let client = conf.connect()?;
            let map = client.client().mon().map();
            let mut hosts: BTreeMap<&str, Vec<(OsdId, &shoal_map::OsdInfo)>> = BTreeMap::new();
            for (id, info) in &map.osds {
                hosts.entry(info.host.as_str()).or_default().push((*id, info));
            }
            let weight = |id: OsdId| map.placement.osd_weight(id).map_or(0.0, |w| w.as_f64());
            let doc = json!({"epoch": map.epoch, "hosts": hosts.iter().map(|(h, osds)| json!({
                "name": h,
                "osds": osds.iter().map(|(id, o)| json!({"id": id.0, "weight": weight(*id), "up": o.up, "in": o.in_cluster, "full": o.full, "addr": o.addr})).collect::<Vec<_>>(),
            })).collect::<Vec<_>>()});
            print(*json, doc, || {
                let mut s = format!("{:<5} {:>8}  {:<24} {:<6} {:<4}\n", "ID", "WEIGHT", "NAME", "STATUS", "IN");
                s += &format!("{:<5} {:>8.3}  root default\n", "", map.placement.total_weight() as f64 / 65536.0);
                for (h, osds) in &hosts {
                    let hw: f64 = osds.iter().map(|(id, _)| weight(*id)).sum();
                    s += &format!("{:<5} {:>8.3}      host {h}\n", "", hw);
                    for (id, o) in osds {
                        s += &format!(
                            "{:<5} {:>8.3}          {:<16} {:<6} {}{}\n",
                            id.0,
                            weight(*id),
                            id.to_string(),
                            if o.up { "up" } else { "down" },
                            if o.in_cluster { "in" } else { "out" },
                            if o.full { "  full" } else { "" }
                        );
                    }
                }
                s.trim_end().to_string()
            });
        }
        OsdCommand::Df { conf, json } => osd_df(conf, *json)?,
        OsdCommand::Map { conf, pool, object, json } => {
            shoal_client::validate_object_name(object)?;
            let client = conf.connect()?;
            let map = client.client().mon().map();
            let p = map.pool_by_name(pool)?;
            let loc = map.locate(p.id, object).with_context(|| format!("locating {object:?} in pool {pool:?}"))?;
            let acting: Vec<u32> = loc.osds.iter().map(|o| o.0).collect();
            let doc = json!({
                "epoch": map.epoch, "pool": p.name, "pool_id": p.id, "object": object,
                "pg": loc.pg.to_string(), "acting": acting, "primary": acting.first(),
            });
            print(*json, doc, || {
                let primary = acting.first().map_or("none".to_string(), |o| format!("osd.{o}"));
                format!(
                    "epoch {} pool '{}' ({}) object '{object}' -> pg {} -> acting {acting:?}, primary {primary}",
                    map.epoch, p.name, p.id, loc.pg
                )
            });
        }
        OsdCommand::Out { conf, id, json } | OsdCommand::In { conf, id, json } => {
            let out = matches!(cmd, OsdCommand::Out { .. });
            let command = if out { Command::OsdOut { id: OsdId(*id) } } else { Command::OsdIn { id: OsdId(*id) } };
            let client = conf.connect()?;
            let epoch = client.runtime().block_on(client.client().mon().command(command))?;
            let word = if out { "out" } else { "in" };
            print(*json, json!({"osd": id, "state": word, "epoch": epoch}), || {
                format!("marked osd.{id} {word} (epoch {epoch})")
            });
        }
        OsdCommand::Rm { conf, id, force, json } => {
            let client = conf.connect()?;
            let monc = client.client().mon().clone();
            let map = monc.map();
            let osd = OsdId(*id);
            let info = map.osds.get(&osd).with_context(|| format!("{osd} does not exist"))?;
            if info.up || info.in_cluster {
                anyhow::bail!(
                    "{osd} is {} and {}: stop it and mark it out (`shoal osd out {id}`) first, then wait for its \
                     PGs to be active+clean elsewhere",
                    if info.up { "up" } else { "down" },
                    if info.in_cluster { "in" } else { "out" }
                );
            }
            if !*force {
                let status = client.runtime().block_on(monc.status()).context("asking the monitors for PG states")?;
                let (pgs, total) = pg_summary(&map, &status.osd_stats);
                let clean = clean_pgs(&pgs);
                if clean < total {
                    let states: Vec<String> = pgs.iter().map(|(k, v)| format!("{v} {k}")).collect();
                    anyhow::bail!(
                        "not every PG is active+clean ({}): {osd} may still hold the only copy of some data; \
                         wait for recovery, or pass --yes-i-really-mean-it to remove it anyway",
                        states.join(", ")
                    );
                }
            }
            let epoch = client.runtime().block_on(monc.command(Command::RemoveOsd { id: osd }))?;
            print(*json, json!({"removed": id, "epoch": epoch}), || format!("removed {osd} (epoch {epoch})"));
        }
        OsdCommand::Set { conf, flag, json } | OsdCommand::Unset { conf, flag, json } => {
            let on = matches!(cmd, OsdCommand::Set { .. });
            shoal_map::config::check_flag(flag)?;
            let client = conf.connect()?;
            let epoch = client
                .runtime()
                .block_on(client.client().mon().command(Command::SetFlag { flag: flag.clone(), on }))?;
            let word = if on { "set" } else { "unset" };
            print(*json, json!({"flag": flag, "set": on, "epoch": epoch}), || format!("{flag} is {word}"));
        }
        OsdCommand::Blocklist(cmd) => blocklist(cmd)?,
    }
    Ok(ExitCode::SUCCESS)
}

/// `shoal osd df`: one row per OSD of the map; an OSD that has not reported shows no figures.
fn osd_df(conf: &ConfArgs, json_out: bool) -> Result<()> {
    let client = conf.connect()?;
    let monc = client.client().mon().clone();
    let status = client.runtime().block_on(monc.status()).context("asking the monitors for OSD reports")?;
    let map = monc.map();
    let rows: Vec<serde_json::Value> = map
        .osds
        .iter()
        .map(|(id, info)| {
            let report = status.osd_stats.iter().find(|s| s.osd == *id);
            json!({
                "id": id.0, "host": info.host, "up": info.up, "in": info.in_cluster, "full": info.full,
                "capacity_bytes": report.map(|r| r.capacity_bytes),
                "used_bytes": report.map(|r| r.used_bytes),
                "used_percent": report.map(|r| shoal_map::used_permille(r.used_bytes, r.capacity_bytes) as f64 / 10.0),
                "objects": report.map(|r| r.objects),
            })
        })
        .collect();
    let total_capacity: u64 = status.osd_stats.iter().map(|s| s.capacity_bytes).sum();
    let total_used: u64 = status.osd_stats.iter().map(|s| s.used_bytes).sum();
    let doc = json!({"epoch": map.epoch, "osds": rows, "total": {
        "capacity_bytes": total_capacity, "used_bytes": total_used,
        "used_percent": shoal_map::used_permille(total_used, total_capacity) as f64 / 10.0,
    }});
    print(json_out, doc, || {
        let mut s = format!(
            "{:<5} {:<12} {:<6} {:<4} {:>10} {:>10} {:>6} {:>8}  {}\n",
            "ID", "HOST", "STATUS", "IN", "SIZE", "USED", "%USE", "OBJECTS", "FLAGS"
        );
        for (id, info) in &map.osds {
            let report = status.osd_stats.iter().find(|r| r.osd == *id);
            let (size, used, pct, objects) = match report {
                Some(r) => (
                    human(r.capacity_bytes),
                    human(r.used_bytes),
                    format!("{:.1}", shoal_map::used_permille(r.used_bytes, r.capacity_bytes) as f64 / 10.0),
                    r.objects.to_string(),
                ),
                None => ("-".into(), "-".into(), "-".into(), "-".into()),
            };
            s += &format!(
                "{:<5} {:<12} {:<6} {:<4} {size:>10} {used:>10} {pct:>6} {objects:>8}  {}\n",
                id.0,
                info.host,
                if info.up { "up" } else { "down" },
                if info.in_cluster { "in" } else { "out" },
                if info.full { "full" } else { "" }
            );
        }
        s += &format!(
            "TOTAL {:>35} {:>10} {:>6.1}",
            human(total_capacity),
            human(total_used),
            shoal_map::used_permille(total_used, total_capacity) as f64 / 10.0
        );
        s
    });
    Ok(())
}

fn pool_json(p: &shoal_map::Pool) -> serde_json::Value {
    json!({"id": p.id, "name": p.name, "size": p.size, "min_size": p.min_size, "pg_num": p.pg_num, "max_object_bytes": p.max_object_bytes})
}

pub fn pool(cmd: &PoolCommand) -> Result<ExitCode> {
    let run = |conf: &ConfArgs, command: Command| -> Result<(u64, std::sync::Arc<ClusterMap>)> {
        let client = conf.connect()?;
        let monc = client.client().mon().clone();
        let epoch = client.runtime().block_on(monc.command(command))?;
        let map = client.runtime().block_on(monc.wait_for_epoch(epoch, 10_000))?;
        Ok((epoch, map))
    };
    match cmd {
        PoolCommand::Create { conf, name, size, min_size, pg_num, max_object_size, json } => {
            let command = Command::CreatePool {
                name: name.clone(),
                size: *size,
                min_size: *min_size,
                pg_num: *pg_num,
                max_object_bytes: *max_object_size,
            };
            let (_, map) = run(conf, command)?;
            let p = map.pool_by_name(name)?;
            print(*json, pool_json(p), || {
                format!("pool '{name}' created (id {}, size {}, {} PGs)", p.id, p.size, p.pg_num)
            });
        }
        PoolCommand::Ls { conf, json } => {
            let client = conf.connect()?;
            let map = client.client().mon().map();
            let doc = json!(map.pools.values().map(pool_json).collect::<Vec<_>>());
            print(*json, doc, || map.pools.values().map(|p| p.name.clone()).collect::<Vec<_>>().join("\n"));
        }
        PoolCommand::Rm { conf, name, yes_i_really_mean_it, json } => {
            if !yes_i_really_mean_it {
                let client = conf.connect()?;
                let map = client.client().mon().map();
                map.pool_by_name(name)?;
                anyhow::bail!(
                    "removing pool '{name}' deletes every object in it for good; repeat with --yes-i-really-mean-it"
                );
            }
            let (epoch, _) = run(conf, Command::RemovePool { name: name.clone() })?;
            print(*json, json!({"removed": name, "epoch": epoch}), || format!("pool '{name}' removed"));
        }
        PoolCommand::Set { conf, name, key, value, json } => {
            let num = || value.parse::<u32>().with_context(|| format!("{key} needs a whole number, got {value:?}"));
            let setting = match key.as_str() {
                "size" => PoolSetting::Size(num()?),
                "min_size" => PoolSetting::MinSize(num()?),
                "pg_num" => PoolSetting::PgNum(num()?),
                "max_object_size" => PoolSetting::MaxObjectBytes(shoal_store::parse_size(value)?),
                other => anyhow::bail!("unknown pool setting {other:?} (size, min_size, pg_num, max_object_size)"),
            };
            let (_, map) = run(conf, Command::SetPool { name: name.clone(), setting })?;
            let p = map.pool_by_name(name)?;
            print(*json, pool_json(p), || format!("set pool '{name}' {key} to {value}"));
        }
    }
    Ok(ExitCode::SUCCESS)
}
