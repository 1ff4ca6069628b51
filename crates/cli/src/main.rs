//! The `shoal` binary: argument parsing and wiring, nothing else. Each subcommand lives in its
//! own module and calls into the library crates.

mod demo;
mod placement_cmd;
mod store_cmd;
mod table;
mod torture;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Shoal: objects, S3, block devices and files on one cluster.
#[derive(Parser)]
#[command(name = "shoal", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Work with a local object store directly (no cluster): mkfs, put, get, fsck, bench, ...
    #[command(subcommand)]
    Store(store_cmd::StoreCommand),
    /// Placement without a cluster: `shoal placement simulate`.
    #[command(subcommand)]
    Placement(placement_cmd::PlacementCommand),
    /// Show the engine at work: create a store on a file, store and verify objects, check it,
    /// and run a quick benchmark against plain files and the raw device.
    Demo(demo::DemoArgs),
    /// Commit random transactions to a store until killed (driven by the crash test).
    #[command(hide = true)]
    StoreTorture(torture::TortureArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Store(cmd) => store_cmd::run(cmd),
        Command::Demo(args) => demo::run(&args),
        Command::Placement(cmd) => placement_cmd::run(cmd),
        Command::StoreTorture(args) => torture::run(&args),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("shoal: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
