//! `shoal placement simulate`: balance and data movement of the placement function on a
//! synthetic map, without a cluster.

use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use shoal_placement::sim::{MovementReport, SimulateConfig, simulate};

#[derive(Subcommand)]
pub enum PlacementCommand {
    /// Place PGs on a synthetic map of OSDs (10 per host), then add and remove an OSD and
    /// report how evenly PGs spread and how many move.
    Simulate(SimulateArgs),
}

#[derive(Args)]
pub struct SimulateArgs {
    #[arg(long, default_value_t = 1000)]
    osds: usize,
    #[arg(long, default_value_t = 100_000)]
    pgs: u32,
    #[arg(long, default_value_t = 3)]
    replicas: usize,
    /// Print one JSON document.
    #[arg(long)]
    json: bool,
}

fn movement(name: &str, m: &MovementReport) {
    println!(
        "{name:<24} osd.{:<6} moved {:>7.3}% of copies (ideal {:>6.3}%), {} PGs changed",
        m.osd.0,
        m.moved_fraction * 100.0,
        m.ideal_fraction * 100.0,
        m.pgs_changed
    );
}

pub fn run(cmd: PlacementCommand) -> Result<ExitCode> {
    match cmd {
        PlacementCommand::Simulate(args) => {
            let cfg = SimulateConfig::new(args.osds, args.pgs, args.replicas);
            let report = simulate(&cfg).context("simulating placement")?;
            if args.json {
                println!("{}", serde_json::to_string_pretty(&report)?);
                return Ok(ExitCode::SUCCESS);
            }
            let b = &report.balance;
            println!(
                "{} OSDs on {} hosts ({} racks), {} PGs x {} replicas",
                args.osds, report.hosts, report.racks, args.pgs, args.replicas
            );
            println!(
                "balance: max deviation {:.1}% from the weight share, mean {:.2}% (sampling noise alone: {:.2}%), \
                 chi-square {:.0} for {} degrees of freedom",
                b.max_rel_deviation * 100.0,
                b.mean_abs_rel_deviation * 100.0,
                b.expected_rel_stddev * 100.0,
                b.chi_square,
                b.degrees_of_freedom
            );
            movement("add to existing host:", &report.add_to_existing_host);
            movement("add in a new host:", &report.add_in_new_host);
            movement("mark out:", &report.mark_out);
            movement("remove from map:", &report.remove_from_map);
        }
    }
    Ok(ExitCode::SUCCESS)
}
