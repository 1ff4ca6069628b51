//! `shoal pg`: PGs as their primaries see them, and scrub.
//!
//! `shoal pg ls`: every PG of a pool (or of all pools) with its acting OSDs and what each of
//! them holds — the newest write in its PG log and its object count — so that members that
//! disagree are visible: a member that recovery or backfill has not caught up yet (decision 0009)
//! shows here (`members_agree: false`, counted in `diverged`). The state is the one the PG's
//! primary reports (`active+clean`, `active+recovering`, `peering`, `down`, ...), or, when the
//! primary does not answer, what the map alone says.
//!
//! `shoal pg scrub|deep-scrub|repair PGID [--wait]` queue a scrub on the PG's primary (decision
//! 0011); `shoal pg list-inconsistent PGID` names the objects the last scrubs found inconsistent,
//! with the OSDs whose copies are bad and the copy a repair would take.
//!
//! `shoal pg list-unfound PGID` names the objects the PG's primary lacks and no member it knows of
//! can provide (their requests wait for them): with the version needed and the OSDs outside the
//! acting set that said they hold a copy of the PG. `shoal pg mark-unfound-lost PGID delete
//! --yes-i-really-mean-it` gives them up: removed on every member, the removal recorded in the PG
//! log, and the requests that waited for them answered (the objects no longer exist). `revert`
//! instead keeps the copy of each the primary holds (older than the version the log names),
//! rewritten on every member under a new version (decision 0052); objects with no readable copy
//! there stay unfound, named with the reason, and the command exits 2. Both answer once every
//! member has logged the decision; a PG that peers again before that drops it (decision 0070),
//! and the command fails naming the objects, unfound again.
//!
//! `shoal pg force-complete PGID --yes-i-really-mean-it` is the last resort for a PG that is
//! `incomplete` (no member of its last activation holds it whole: their disks were lost) or
//! `down` (none of them is up, and will not be): it gives up the history the monitors' record
//! vouches for, and the PG peers again with the newest copy its acting members hold (decision
//! 0078). The writes only the lost members held are gone for good. It waits, showing progress,
//! until the PG is active again.

use std::process::ExitCode;

use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::Subcommand;
use serde_json::json;
use shoal_map::PgId;
use shoal_proto::osd::{PgCmd, PgCmdOutput, ScrubReport};

use crate::conf::ConfArgs;

#[derive(Subcommand)]
pub enum PgCommand {
    /// PGs with their acting OSDs, each member's last update and object count, and whether the
    /// members agree.
    Ls {
        #[command(flatten)]
        conf: ConfArgs,
        /// Only this pool's PGs.
        #[arg(long)]
        pool: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// Queues a light scrub of a PG (object lists, sizes, xattr and omap digests compared
    /// across its members).
    Scrub(ScrubArgs),
    /// Queues a deep scrub of a PG: every byte read on every member, checksums and data digests
    /// compared.
    DeepScrub(ScrubArgs),
    /// Deep-scrubs a PG and replaces every bad copy it finds with the authoritative one.
    Repair(ScrubArgs),
    /// The objects a PG's last scrubs found inconsistent, the OSDs with bad copies and what is
    /// wrong with each, and the copy a repair would take.
    ListInconsistent {
        #[command(flatten)]
        conf: ConfArgs,
        /// The PG, as `shoal osd map` prints it: `POOL.SEED` with the seed in hex (`1.1d`).
        pgid: String,
        #[arg(long)]
        json: bool,
    },
    /// The objects a PG's primary lacks and no member it knows of can provide (requests on them
    /// wait), with the version needed and the OSDs outside the acting set known to hold a copy
    /// of the PG.
    ListUnfound {
        #[command(flatten)]
        conf: ConfArgs,
        /// The PG, as `shoal osd map` prints it: `POOL.SEED` with the seed in hex (`1.1d`).
        pgid: String,
        #[arg(long)]
        json: bool,
    },
    /// Gives up a PG's unfound objects when no OSD that holds them will come back. `revert`
    /// keeps the copy of each that the PG's primary holds, older than the version its log names
    /// (the newest writes of the object are given up; objects the primary holds no readable copy
    /// of stay unfound); `delete` removes them on every member (their snapshots stay). Either is recorded in the PG log,
    /// and the requests waiting for the objects are answered then. Refused while any OSD is down
    /// (start it again, or `shoal osd rm` it if its disk is lost) or a stray copy's OSD has not
    /// answered yet.
    MarkUnfoundLost {
        #[command(flatten)]
        conf: ConfArgs,
        /// The PG, as `shoal osd map` prints it: `POOL.SEED` with the seed in hex (`1.1d`).
        pgid: String,
        /// What becomes of them: `revert` (to the copy the primary holds) or `delete`.
        action: LostAction,
        #[arg(long)]
        yes_i_really_mean_it: bool,
        #[arg(long)]
        json: bool,
    },
    /// Makes an `incomplete` or `down` PG usable again when the OSDs its last activation names
    /// are lost for good: gives up the history they held, and the PG peers with the newest copy
    /// its acting OSDs hold. The writes only the lost OSDs held are lost.
    ForceComplete {
        #[command(flatten)]
        conf: ConfArgs,
        /// The PG, as `shoal osd map` prints it: `POOL.SEED` with the seed in hex (`1.1d`).
        pgid: String,
        #[arg(long)]
        yes_i_really_mean_it: bool,
        /// Gives up after this many seconds if the PG is not active again.
        #[arg(long, default_value_t = 120)]
        timeout_secs: u64,
        #[arg(long)]
        json: bool,
    },
}

#[derive(Clone, Copy, clap::ValueEnum)]
pub enum LostAction {
    Revert,
    Delete,
}

#[derive(clap::Args)]
pub struct ScrubArgs {
    #[command(flatten)]
    conf: ConfArgs,
    /// The PG, as `shoal osd map` prints it: `POOL.SEED` with the seed in hex (`1.1d`).
    pgid: String,
    /// Waits until the scrub has finished and prints what it found (exit status 2 if
    /// inconsistent objects remain).
    #[arg(long)]
    wait: bool,
    /// With `--wait`: gives up after this many seconds.
    #[arg(long, default_value_t = 600)]
    timeout_secs: u64,
    #[arg(long)]
    json: bool,
}

pub fn run(cmd: &PgCommand) -> Result<ExitCode> {
    match cmd {
        PgCommand::Ls { conf, pool, json } => ls(conf, pool.as_deref(), *json),
        PgCommand::Scrub(a) => scrub(a, false, false),
        PgCommand::DeepScrub(a) => scrub(a, true, false),
        PgCommand::Repair(a) => scrub(a, true, true),
        PgCommand::ListInconsistent { conf, pgid, json } => list_inconsistent(conf, pgid, *json),
        PgCommand::ListUnfound { conf, pgid, json } => list_unfound(conf, pgid, *json),
        PgCommand::MarkUnfoundLost { conf, pgid, action: LostAction::Delete, yes_i_really_mean_it, json } => {
            mark_unfound_lost(conf, pgid, *yes_i_really_mean_it, *json)
        }
        PgCommand::MarkUnfoundLost { conf, pgid, action: LostAction::Revert, yes_i_really_mean_it, json } => {
            revert_unfound(conf, pgid, *yes_i_really_mean_it, *json)
        }
        PgCommand::ForceComplete { conf, pgid, yes_i_really_mean_it, timeout_secs, json } => {
            force_complete(conf, pgid, *yes_i_really_mean_it, Duration::from_secs(*timeout_secs), *json)
        }
    }
}

/// The state PG `pg`'s primary reports (`None` if it does not answer).
fn primary_state(client: &shoal_client::blocking::BlockingClient, pg: PgId) -> Option<String> {
    let map = client.client().mon().map();
    let primary = *map.pg_osds(pg).ok()?.first()?;
    client.runtime().block_on(client.client().pg_query(primary, pg)).ok()?.state
}

/// `shoal pg force-complete`: gives up PG `pgid`'s recorded history once `confirmed`, and waits
/// until the PG is active again.
fn force_complete(conf: &ConfArgs, pgid: &str, confirmed: bool, timeout: Duration, json_out: bool) -> Result<ExitCode> {
    const POLL: Duration = Duration::from_millis(200);
    let client = conf.connect()?;
    let map = client.client().mon().map();
    let pg = parse_pgid(&map, pgid)?;
    let Some(record) = map.pg_active.get(&pg).cloned() else {
        bail!("PG {pg} has no activation record: it has no history to give up (see `shoal pg ls`)");
    };
    let state = primary_state(&client, pg);
    let stuck = state.as_deref().is_some_and(|s| s == "incomplete" || s == "down");
    if !stuck {
        bail!(
            "PG {pg} is {}, not incomplete or down: nothing to force (only a PG whose last activation's OSDs \
            are lost needs this)",
            state.as_deref().unwrap_or("not reported by its primary")
        );
    }
    let members: Vec<String> = record.members.iter().map(ToString::to_string).collect();
    if !confirmed {
        bail!(
            "forcing PG {pg} gives up the writes that only {} held (its last activation, at epoch {}): they are \
            lost for good, and the PG goes on from the newest copy its acting OSDs hold; add \
            --yes-i-really-mean-it if {} will not come back with {} data",
            members.join(", "),
            record.activated_at,
            if members.len() == 1 { "it" } else { "none of them" },
            if members.len() == 1 { "its" } else { "their" },
        );
    }
    let command = shoal_map::Command::PgForgetHistory { pg, record_epoch: record.epoch };
    let epoch = client
        .runtime()
        .block_on(client.client().mon().command(command))
        .with_context(|| format!("giving up PG {pg}'s recorded history"))?;
    if !json_out {
        eprintln!("PG {pg}: history of epoch {} given up (map epoch {epoch}); waiting for it to peer", record.epoch);
    }
    let started = Instant::now();
    let mut last = String::new();
    let state = loop {
        let now = primary_state(&client, pg).unwrap_or_else(|| "not reported".into());
        if now.starts_with("active") {
            break now;
        }
        if now != last && !json_out {
            eprintln!("PG {pg}: {now}");
        }
        if started.elapsed() > timeout {
            bail!(
                "PG {pg} is {now} {} s after its history was given up; see `shoal pg ls` (its acting OSDs must be up)",
                timeout.as_secs()
            );
        }
        last = now;
        std::thread::sleep(POLL);
    };
    if json_out {
        println!(
            "{}",
            json!({"pg": pg.to_string(), "state": state, "given_up": {"record_epoch": record.epoch,
                   "activated_at": record.activated_at, "members": record.members.iter().map(|o| o.0).collect::<Vec<_>>()}})
        );
    } else {
        println!("PG {pg}: {state}; the writes only {} held are given up", members.join(", "));
    }
    Ok(ExitCode::SUCCESS)
}

/// Parses a PG id and checks that the PG exists in `map`.
fn parse_pgid(map: &shoal_map::ClusterMap, s: &str) -> Result<PgId> {
    let pg: PgId = s.parse().map_err(|e: String| anyhow::anyhow!("bad PG id: {e}"))?;
    let Some(pool) = map.pools.get(&pg.pool) else { bail!("PG {pg}: there is no pool with id {}", pg.pool) };
    if pg.seed >= pool.pg_num {
        bail!("PG {pg} does not exist: pool {} has {} PGs (0..{:x})", pool.name, pool.pg_num, pool.pg_num - 1);
    }
    Ok(pg)
}

fn report(client: &shoal_client::blocking::BlockingClient, pg: PgId) -> Result<ScrubReport> {
    match client.runtime().block_on(client.client().pg_command(pg, PgCmd::Report)) {
        Ok(PgCmdOutput::Report(r)) => Ok(r),
        Ok(other) => bail!("PG {pg}'s primary answered {other:?} to a report request"),
        Err(e) => Err(e).with_context(|| format!("asking PG {pg}'s primary for its scrub state")),
    }
}

fn report_json(pg: PgId, primary: Option<u32>, r: &ScrubReport) -> serde_json::Value {
    let objects: Vec<_> = r
        .inconsistent
        .iter()
        .map(|o| {
            json!({"object": o.name, "auth_osd": o.auth.map(|a| a.0),
                   "errors": o.errors.iter().map(|(osd, what)| json!({"osd": osd.0, "errors": what})).collect::<Vec<_>>()})
        })
        .collect();
    json!({"pg": pg.to_string(), "primary": primary, "running": r.running, "queued": r.queued,
           "completed": r.completed,
           "last": r.last.as_ref().map(|l| json!({"deep": l.deep, "repair": l.repair, "objects": l.objects,
                                                   "inconsistent": l.inconsistent, "repaired": l.repaired})),
           "inconsistent": objects})
}

fn print_inconsistent(r: &ScrubReport) {
    for o in &r.inconsistent {
        let auth = o.auth.map_or_else(|| "none readable".to_string(), |a| a.to_string());
        let errors: Vec<String> = o.errors.iter().map(|(osd, what)| format!("{osd}: {}", what.join(","))).collect();
        println!("  {}  (good copy: {auth})  {}", o.name, errors.join("; "));
    }
}

fn scrub(a: &ScrubArgs, deep: bool, repair: bool) -> Result<ExitCode> {
    let client = a.conf.connect()?;
    let map = client.client().mon().map();
    let pg = parse_pgid(&map, &a.pgid)?;
    let primary = map.pg_osds(pg).unwrap_or_default().first().map(|o| o.0);
    let kind = if repair {
        "repair"
    } else if deep {
        "deep-scrub"
    } else {
        "scrub"
    };
    let before = if a.wait { Some(report(&client, pg)?.completed) } else { None };
    match client.runtime().block_on(client.client().pg_command(pg, PgCmd::Scrub { deep, repair })) {
        Ok(_) => {}
        Err(e) => return Err(e).with_context(|| format!("asking PG {pg}'s primary to {kind}")),
    }
    let Some(before) = before else {
        if a.json {
            println!("{}", json!({"pg": pg.to_string(), "primary": primary, "queued": kind}));
        } else {
            let on = primary.map_or_else(String::new, |p| format!(" on osd.{p}"));
            println!("instructed PG {pg}{on} to {kind}");
        }
        return Ok(ExitCode::SUCCESS);
    };
    let deadline = Instant::now() + Duration::from_secs(a.timeout_secs);
    let mut last_note = Instant::now();
    let done = loop {
        let r = report(&client, pg)?;
        if r.completed > before && r.running.is_none() && r.queued.is_none() {
            break r;
        }
        if Instant::now() >= deadline {
            bail!(
                "PG {pg}'s {kind} did not finish within {} s (running: {:?}, queued: {:?})",
                a.timeout_secs,
                r.running,
                r.queued
            );
        }
        if !a.json && last_note.elapsed() >= Duration::from_secs(5) {
            let state = r.running.as_deref().map_or("waiting for the PG to be clean and a scrub slot", |_| "running");
            eprintln!("PG {pg}: {kind} {state}...");
            last_note = Instant::now();
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    if a.json {
        println!("{}", report_json(pg, primary, &done));
    } else if let Some(last) = &done.last {
        println!(
            "PG {pg}: {kind} finished: {} objects, {} inconsistent, {} repaired",
            last.objects, last.inconsistent, last.repaired
        );
        print_inconsistent(&done);
    }
    Ok(if done.inconsistent.is_empty() { ExitCode::SUCCESS } else { ExitCode::from(2) })
}

fn list_inconsistent(conf: &ConfArgs, pgid: &str, json_out: bool) -> Result<ExitCode> {
    let client = conf.connect()?;
    let map = client.client().mon().map();
    let pg = parse_pgid(&map, pgid)?;
    let primary = map.pg_osds(pg).unwrap_or_default().first().map(|o| o.0);
    let r = report(&client, pg)?;
    if json_out {
        println!("{}", report_json(pg, primary, &r));
        return Ok(ExitCode::SUCCESS);
    }
    if r.completed == 0 {
        println!("PG {pg} has not been scrubbed since its primary took it over");
    }
    if r.inconsistent.is_empty() {
        println!("PG {pg}: no inconsistent objects");
    } else {
        println!("PG {pg}: {} inconsistent object(s) (`shoal pg repair {pg}` fixes them):", r.inconsistent.len());
        print_inconsistent(&r);
    }
    Ok(ExitCode::SUCCESS)
}

fn list_unfound(conf: &ConfArgs, pgid: &str, json_out: bool) -> Result<ExitCode> {
    let client = conf.connect()?;
    let map = client.client().mon().map();
    let pg = parse_pgid(&map, pgid)?;
    let primary = map.pg_osds(pg).unwrap_or_default().first().map(|o| o.0);
    let r = match client.runtime().block_on(client.client().pg_command(pg, PgCmd::ListUnfound)) {
        Ok(PgCmdOutput::Unfound(r)) => r,
        Ok(other) => bail!("PG {pg}'s primary answered {other:?} to a request for its unfound objects"),
        Err(e) => return Err(e).with_context(|| format!("asking PG {pg}'s primary for its unfound objects")),
    };
    // What a revert would do with each object (an older primary may not say: nothing shown).
    let revert = |i: usize| r.revert.get(i);
    if json_out {
        let objects: Vec<_> = r
            .objects
            .iter()
            .enumerate()
            .map(|(i, (o, need))| {
                let revert = match revert(i) {
                    Some(Ok(keeps)) => json!({"keeps": keeps.to_string()}),
                    Some(Err(why)) => json!({"refused": why}),
                    None => serde_json::Value::Null,
                };
                json!({"object": o, "need": need.to_string(), "revert": revert})
            })
            .collect();
        let ids = |v: &[shoal_map::OsdId]| v.iter().map(|o| o.0).collect::<Vec<_>>();
        println!(
            "{}",
            json!({"pg": pg.to_string(), "primary": primary, "unfound": objects,
                   "strays": ids(&r.strays), "probing": ids(&r.probing), "deciding": r.deciding})
        );
        return Ok(ExitCode::SUCCESS);
    }
    if !r.deciding.is_empty() {
        println!(
            "PG {pg}: decided on, not yet logged on every member: {} (they are unfound again if the PG peers first)",
            r.deciding.join(", ")
        );
    }
    if r.objects.is_empty() {
        println!("PG {pg}: no unfound objects");
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "PG {pg}: {} unfound object(s); requests on them wait until an OSD that holds them is up again",
        r.objects.len()
    );
    for (i, (object, need)) in r.objects.iter().enumerate() {
        match revert(i) {
            Some(Ok(keeps)) => {
                println!("  {object}  (needs {need}; a revert would keep a copy at {keeps})")
            }
            Some(Err(why)) => println!("  {object}  (needs {need}; a revert would keep nothing: {why})"),
            None => println!("  {object}  (needs {need})"),
        }
    }
    let names = |v: &[shoal_map::OsdId]| v.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ");
    if !r.strays.is_empty() {
        println!("OSDs outside the acting set that hold or may hold a copy of the PG: {}", names(&r.strays));
    }
    if !r.probing.is_empty() {
        println!("asked and not answered yet: {}", names(&r.probing));
    }
    Ok(ExitCode::SUCCESS)
}

/// Sends PG `pgid`'s primary the operator's decision `cmd` on its unfound objects, once
/// `confirmed`; without it, refuses with the consequence `refusal` names (given the PG).
fn decide_unfound(
    conf: &ConfArgs,
    pgid: &str,
    confirmed: bool,
    cmd: PgCmd,
    refusal: impl Fn(PgId) -> String,
) -> Result<(PgId, PgCmdOutput)> {
    let client = conf.connect()?;
    let map = client.client().mon().map();
    let pg = parse_pgid(&map, pgid)?;
    if !confirmed {
        bail!(
            "{}; see them with `shoal pg list-unfound {pg}`, and add --yes-i-really-mean-it if no OSD that holds \
             them will come back",
            refusal(pg)
        );
    }
    // The primary may first ask other OSDs what they hold (strays, the copies a revert could
    // keep) and refuse until they answer: the command is repeated, a few times a second, for
    // at most DECIDE_WAIT (what is left waiting then is reported as the primary says it).
    const DECIDE_WAIT: std::time::Duration = std::time::Duration::from_secs(15);
    let started = std::time::Instant::now();
    let mut said = false;
    loop {
        let answer = client.runtime().block_on(client.client().pg_command(pg, cmd.clone()));
        match answer {
            Err(shoal_client::ClientError::Remote(e))
                if e.code == shoal_proto::ErrorCode::TryAgain && started.elapsed() < DECIDE_WAIT =>
            {
                if !said {
                    eprintln!(
                        "{}; waiting",
                        e.message.trim_end_matches(shoal_proto::osd::DECIDE_AGAIN).trim_end_matches([':', ' '])
                    );
                    said = true;
                }
                std::thread::sleep(std::time::Duration::from_millis(200));
            }
            answer => {
                let output = answer
                    .with_context(|| format!("asking PG {pg}'s primary to decide on its unfound objects ({cmd:?})"))?;
                let decided: Vec<String> = match &output {
                    PgCmdOutput::Lost(objects) => objects.clone(),
                    PgCmdOutput::Reverted(r) => r.reverted.iter().map(|(o, _)| o.clone()).collect(),
                    _ => Vec::new(),
                };
                wait_decisions_logged(&client, pg, &decided)?;
                return Ok((pg, output));
            }
        }
    }
}

/// Waits until PG `pg`'s primary has logged its decision on each of `objects` and every member
/// has answered the write that carries it (its report no longer names them as deciding). A
/// decision takes effect with its log entry or not at all (decision 0070): the primary answers
/// the command when it has made it, and should the PG peer again before the write is logged,
/// the objects are unfound again — which is reported as an error, so that the operator is
/// never told objects were given up or reverted when they were not.
fn wait_decisions_logged(client: &shoal_client::blocking::BlockingClient, pg: PgId, objects: &[String]) -> Result<()> {
    // Long enough for a PG to finish recovering the members a decision pushes its copy to
    // first; each poll is one small request to the primary.
    const LOGGED_WAIT: Duration = Duration::from_secs(60);
    const POLL: Duration = Duration::from_millis(100);
    if objects.is_empty() {
        return Ok(());
    }
    let started = Instant::now();
    let mut said = false;
    loop {
        let last = match client.runtime().block_on(client.client().pg_command(pg, PgCmd::ListUnfound)) {
            Ok(PgCmdOutput::Unfound(r)) => {
                let again: Vec<&str> =
                    r.objects.iter().map(|(o, _)| o.as_str()).filter(|o| objects.iter().any(|d| d == o)).collect();
                if !again.is_empty() {
                    bail!(
                        "PG {pg} peered again before the decision on {} was logged: {} still unfound (see `shoal \
                        pg list-unfound {pg}`); decide again",
                        again.join(", "),
                        if again.len() == 1 { "it is" } else { "they are" }
                    );
                }
                let waiting = objects.iter().filter(|o| r.deciding.contains(o)).count();
                if waiting == 0 {
                    return Ok(());
                }
                format!("{waiting} of {} decision(s) not logged on every member yet", objects.len())
            }
            Ok(other) => bail!("PG {pg}'s primary answered {other:?} to a request for its unfound objects"),
            // The PG may be peering (a member came or went): ask again.
            Err(e) => e.to_string(),
        };
        if started.elapsed() > LOGGED_WAIT {
            bail!(
                "PG {pg}'s decision on its unfound objects is not logged on every member after {} s ({last}); see \
                `shoal pg list-unfound {pg}` and `shoal pg ls`",
                LOGGED_WAIT.as_secs()
            );
        }
        if !said {
            eprintln!("waiting for PG {pg} to log the decision on {} object(s) on every member", objects.len());
            said = true;
        }
        std::thread::sleep(POLL);
    }
}

fn mark_unfound_lost(conf: &ConfArgs, pgid: &str, confirmed: bool, json_out: bool) -> Result<ExitCode> {
    let (pg, output) = decide_unfound(conf, pgid, confirmed, PgCmd::MarkUnfoundLost, |pg| {
        format!("giving up PG {pg}'s unfound objects removes them for good")
    })?;
    let PgCmdOutput::Lost(lost) = output else {
        bail!("PG {pg}'s primary answered {output:?} to giving up its unfound objects");
    };
    if json_out {
        println!("{}", json!({"pg": pg.to_string(), "lost": lost}));
    } else if lost.is_empty() {
        println!("PG {pg}: no unfound objects; nothing given up");
    } else {
        println!("PG {pg}: {} object(s) given up as lost and removed: {}", lost.len(), lost.join(", "));
    }
    Ok(ExitCode::SUCCESS)
}

fn revert_unfound(conf: &ConfArgs, pgid: &str, confirmed: bool, json_out: bool) -> Result<ExitCode> {
    let (pg, output) = decide_unfound(conf, pgid, confirmed, PgCmd::RevertUnfound, |pg| {
        format!(
            "reverting PG {pg}'s unfound objects gives up their newest writes for good, keeping the older copies \
             its primary holds"
        )
    })?;
    let PgCmdOutput::Reverted(r) = output else {
        bail!("PG {pg}'s primary answered {output:?} to reverting its unfound objects");
    };
    if json_out {
        let reverted: Vec<_> = r.reverted.iter().map(|(o, v)| json!({"object": o, "version": v.to_string()})).collect();
        let unfound: Vec<_> = r.unfound.iter().map(|(o, why)| json!({"object": o, "reason": why})).collect();
        println!("{}", json!({"pg": pg.to_string(), "reverted": reverted, "unfound": unfound}));
    } else if r.reverted.is_empty() && r.unfound.is_empty() {
        println!("PG {pg}: no unfound objects; nothing reverted");
    } else {
        for (object, version) in &r.reverted {
            println!("PG {pg}: {object} reverted to the copy at {version}");
        }
        for (object, why) in &r.unfound {
            println!("PG {pg}: {object} still unfound: {why}");
        }
    }
    // Objects left unfound are the operator's to decide on: a status scripts can test.
    Ok(if r.unfound.is_empty() { ExitCode::SUCCESS } else { ExitCode::from(2) })
}

fn ls(conf: &ConfArgs, pool: Option<&str>, json: bool) -> Result<ExitCode> {
    let client = conf.connect()?;
    let map = client.client().mon().map();
    let pools: Vec<&shoal_map::Pool> = match pool {
        Some(name) => vec![map.pool_by_name(name)?],
        None => map.pools.values().collect(),
    };
    let mut rows = Vec::new();
    let mut diverged = 0usize;
    for p in pools {
        for seed in 0..p.pg_num {
            let pg = PgId { pool: p.id, seed };
            let acting = map.pg_osds(pg).unwrap_or_default();
            let infos: Vec<_> =
                acting.iter().map(|osd| client.runtime().block_on(client.client().pg_query(*osd, pg))).collect();
            // Members agree when each answered with the same newest write and object count.
            let agree = infos.iter().all(|i| {
                i.as_ref().is_ok_and(|i| {
                    infos[0].as_ref().is_ok_and(|f| f.last_update == i.last_update && f.objects == i.objects)
                })
            });
            let members: Vec<_> = acting
                .iter()
                .zip(&infos)
                .map(|(osd, info)| match info {
                    Ok(i) => json!({"osd": osd.0, "last_update": i.last_update.to_string(), "log_entries": i.log_entries, "objects": i.objects}),
                    Err(e) => json!({"osd": osd.0, "error": e.to_string()}),
                })
                .collect();
            if !agree {
                diverged += 1;
            }
            // The primary's own view when it answered; otherwise what the map alone says.
            let reported = infos.first().and_then(|i| i.as_ref().ok()).and_then(|i| i.state.clone());
            let state = match (reported, p.acting_state(acting.len())) {
                (Some(s), _) => s,
                (None, "inactive") => "inactive".to_string(),
                (None, _) if !agree => "active+diverged".to_string(),
                (None, other) => other.to_string(),
            };
            rows.push(json!({"pg": pg.to_string(), "pool": p.name, "state": state, "members_agree": agree,
                             "acting": acting.iter().map(|o| o.0).collect::<Vec<_>>(), "members": members}));
        }
    }
    if json {
        println!("{}", json!({"epoch": map.epoch, "pgs": rows, "diverged": diverged}));
        return Ok(ExitCode::SUCCESS);
    }
    println!("{:<10} {:<20} {:<14} MEMBERS (osd: last update / objects)", "PG", "STATE", "ACTING");
    for r in &rows {
        let members: Vec<String> = r["members"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|m| match m.get("error") {
                Some(e) => format!("osd.{}: {e}", m["osd"]),
                None => format!("osd.{}: {} / {}", m["osd"], m["last_update"].as_str().unwrap_or("?"), m["objects"]),
            })
            .collect();
        println!(
            "{:<10} {:<20} {:<14} {}",
            r["pg"].as_str().unwrap_or("?"),
            r["state"].as_str().unwrap_or("?"),
            r["acting"].to_string(),
            members.join(", ")
        );
    }
    if diverged > 0 {
        println!(
            "{diverged} PG(s) diverged: their members hold different writes (recovery in progress, or stuck: see `shoal status` and docs/CLUSTER.md)"
        );
    }
    Ok(ExitCode::SUCCESS)
}
