//! `shoal pg ls`: every PG of a pool (or of all pools) with its acting OSDs and what each of
//! them holds — the newest write in its PG log and its object count — so that members that
//! disagree are visible: a member that recovery or backfill has not caught up yet (decision 0009)
//! shows here (`members_agree: false`, counted in `diverged`). The state is the one the PG's
//! primary reports (`active+clean`, `active+recovering`, `peering`, `down`, ...), or, when the
//! primary does not answer, what the map alone says.

use std::process::ExitCode;

use anyhow::Result;
use clap::Subcommand;
use serde_json::json;
use shoal_map::PgId;

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
}

pub fn run(cmd: &PgCommand) -> Result<ExitCode> {
    let PgCommand::Ls { conf, pool, json } = cmd;
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
    if *json {
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
