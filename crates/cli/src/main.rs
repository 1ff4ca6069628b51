//! The `shoal` binary: argument parsing and wiring, nothing else. Each subcommand lives in its
//! own module and calls into the library crates.

mod admin;
mod alloc;
mod bench_cmd;
mod conf;
mod config_cmd;
mod daemons;
mod demo;
mod gateway_cmd;
mod nbd_cmd;
mod obj;
mod pg_cmd;
mod pglog_cmd;
mod placement_cmd;
mod rbd_cmd;
mod store_cmd;
mod table;
mod torture;
mod up;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Shoal: objects, S3, block devices and files on one cluster.
#[derive(Parser)]
#[command(name = "shoal", version, about)]
struct Cli {
    /// Cluster config file (default: $SHOAL_CONF, else the directory `shoal up` uses by default).
    #[arg(long, env = "SHOAL_CONF", global = true)]
    conf: Option<std::path::PathBuf>,
    /// Who to act as (an entity with a key in the keyring).
    #[arg(long = "name", id = "act_as", value_name = "ENTITY", default_value = "client.admin", global = true)]
    entity: String,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Start a local cluster (monitors and OSDs as processes on loopback) and wait until it is
    /// healthy.
    Up(up::UpArgs),
    /// Stop the local cluster `up` started (and remove it, for the mem backend).
    Down(up::DownArgs),
    /// Health, daemons, pools, PGs, usage and client I/O of the cluster.
    Status(admin::StatusArgs),
    /// OSDs: `tree`, `out ID`, `in ID`, or `run` one OSD daemon in the foreground.
    #[command(subcommand)]
    Osd(OsdCli),
    /// Run a monitor daemon in the foreground.
    #[command(subcommand)]
    Mon(MonCli),
    /// Pools: create, ls, rm, set.
    #[command(subcommand)]
    Pool(admin::PoolCommand),
    /// PGs: `ls` with each member's last update and object count.
    #[command(subcommand)]
    Pg(pg_cmd::PgCommand),
    /// Cluster-wide settings kept by the monitors: set, get, rm, ls.
    #[command(subcommand)]
    Config(config_cmd::ConfigCommand),
    /// Client keys kept by the monitors: add, ls, rm.
    #[command(subcommand)]
    Auth(admin::AuthCommand),
    /// The S3 gateway: `shoal gateway run`.
    #[command(subcommand)]
    Gateway(gateway_cmd::GatewayCommand),
    /// S3 users and access keys: `shoal s3 user create|ls|info|rm`, `shoal s3 key create|rm`.
    #[command(subcommand)]
    S3(gateway_cmd::S3Command),
    /// Objects: put, get, rm, stat, ls.
    #[command(subcommand)]
    Obj(obj::ObjCommand),
    /// Block images: create, ls, info, resize, rm, du.
    #[command(subcommand)]
    Rbd(rbd_cmd::RbdCommand),
    /// Serve block images over NBD: `shoal nbd serve POOL/IMAGE...`.
    #[command(subcommand)]
    Nbd(nbd_cmd::NbdCommand),
    /// Like `rados bench`: write, seq or rand objects with N in flight for S seconds.
    Bench(bench_cmd::BenchArgs),
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

#[derive(Subcommand)]
enum OsdCli {
    #[command(flatten)]
    Admin(admin::OsdCommand),
    /// Run OSD `--id N` until SIGTERM.
    Run(daemons::OsdArgs),
    /// The PG logs in a stopped OSD's store (offline): `shoal osd pglog DIR/osd.N [--pg 1.1f]`.
    Pglog(pglog_cmd::PglogArgs),
}

#[derive(Subcommand)]
enum MonCli {
    /// Run monitor `--rank R` until SIGTERM.
    Run(daemons::MonArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    conf::set_identity(conf::Identity { conf: cli.conf.clone(), entity: cli.entity.clone() });
    let result = match cli.command {
        Command::Up(args) => up::up(&args),
        Command::Down(args) => up::down(&args),
        Command::Status(args) => admin::status(&args),
        Command::Osd(OsdCli::Admin(cmd)) => admin::osd(&cmd),
        Command::Osd(OsdCli::Run(args)) => daemons::run_osd(&args),
        Command::Osd(OsdCli::Pglog(args)) => pglog_cmd::run(&args),
        Command::Mon(MonCli::Run(args)) => daemons::run_mon(&args),
        Command::Pool(cmd) => admin::pool(&cmd),
        Command::Pg(cmd) => pg_cmd::run(&cmd),
        Command::Auth(cmd) => admin::auth(&cmd),
        Command::Config(cmd) => config_cmd::run(&cmd),
        Command::Gateway(cmd) => gateway_cmd::run(&cmd),
        Command::S3(cmd) => gateway_cmd::s3(&cmd),
        Command::Obj(cmd) => obj::run(&cmd),
        Command::Rbd(cmd) => rbd_cmd::run(&cmd),
        Command::Nbd(cmd) => nbd_cmd::run(&cmd),
        Command::Bench(args) => bench_cmd::run(&args),
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
