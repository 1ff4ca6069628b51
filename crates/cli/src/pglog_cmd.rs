//! `shoal osd pglog STORE`: the PG logs in a stopped OSD's store, read offline — which writes
//! each PG applied on this OSD, in order (what a resend is checked against, and what peering
//! will compare between members).

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::Args;
use serde_json::json;
use shoal_map::PgId;
use shoal_osd::pglog::{LogEntry, read_entries};

#[derive(Args)]
pub struct PglogArgs {
    /// The OSD's store directory (`DIR/osd.N` under `shoal up`); the OSD must be stopped.
    store: PathBuf,
    /// One PG, as `POOL.SEED` with the seed in hex (as `shoal osd map` prints it): list its
    /// entries. Without it, one line per PG.
    #[arg(long)]
    pg: Option<String>,
    #[arg(long)]
    json: bool,
}

fn parse_pg(s: &str) -> Result<PgId> {
    s.parse().map_err(|e: String| anyhow::anyhow!(e))
}

fn entry_json(e: &LogEntry) -> serde_json::Value {
    json!({"version": e.version.to_string(), "epoch": e.version.epoch, "seq": e.version.seq,
           "client": e.reqid.client, "tid": e.reqid.tid, "object": e.object, "ops": e.op_count})
}

pub fn run(args: &PglogArgs) -> Result<ExitCode> {
    // Bad arguments are refused before the store is touched.
    let pg = args.pg.as_deref().map(parse_pg).transpose()?;
    let store =
        shoal_store::open(&args.store).with_context(|| format!("mounting OSD store {}", args.store.display()))?;
    if let Some(pg) = pg {
        let entries = read_entries(&*store, pg).with_context(|| format!("reading the log of PG {pg}"))?;
        if args.json {
            println!(
                "{}",
                json!({"pg": pg.to_string(), "entries": entries.iter().map(entry_json).collect::<Vec<_>>()})
            );
        } else {
            for e in &entries {
                println!(
                    "{:<12} client {:x} tid {:<8} ops {:<3} {}",
                    e.version, e.reqid.client, e.reqid.tid, e.op_count, e.object
                );
            }
        }
        return Ok(ExitCode::SUCCESS);
    }
    let mut rows = Vec::new();
    for coll in store.list_collections()? {
        let Some(rest) = coll.strip_prefix("pglog.") else { continue };
        let pg = parse_pg(rest).with_context(|| format!("collection {coll} is not a PG log"))?;
        let entries = read_entries(&*store, pg).with_context(|| format!("reading the log of PG {pg}"))?;
        let (first, last) = (entries.first().map(|e| e.version), entries.last().map(|e| e.version));
        rows.push((pg, entries.len(), first, last));
    }
    if args.json {
        let doc: Vec<_> = rows
            .iter()
            .map(|(pg, n, first, last)| {
                json!({"pg": pg.to_string(), "entries": n, "first": first.map(|v| v.to_string()), "last_update": last.map(|v| v.to_string())})
            })
            .collect();
        println!("{}", json!({"pgs": doc}));
    } else {
        println!("{:<10} {:>8} {:>14} {:>14}", "PG", "ENTRIES", "FIRST", "LAST_UPDATE");
        for (pg, n, first, last) in &rows {
            let show = |v: &Option<shoal_proto::osd::Eversion>| v.map_or("-".to_string(), |v| v.to_string());
            println!("{:<10} {n:>8} {:>14} {:>14}", pg.to_string(), show(first), show(last));
        }
    }
    Ok(ExitCode::SUCCESS)
}
