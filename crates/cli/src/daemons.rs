//! `shoal mon` and `shoal osd`: run one daemon in the foreground until SIGTERM or SIGINT.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Context, Result, bail};
use clap::Args;
use shoal_client::{ClusterConfig, ConfFile};
use shoal_map::{OsdId, Weight};
use shoal_net::Keyring;
use shoal_store::BackendKind;

use crate::conf::ConfArgs;

#[derive(Args)]
pub struct MonArgs {
    #[command(flatten)]
    conf: ConfArgs,
    /// This monitor's rank: its index in the conf file's `mons`.
    #[arg(long)]
    rank: u32,
    /// Data directory (default: `mon.RANK` next to the conf file).
    #[arg(long)]
    data: Option<PathBuf>,
}

#[derive(Args)]
pub struct OsdArgs {
    #[command(flatten)]
    conf: ConfArgs,
    /// The OSD's id (`osd.ID`).
    #[arg(long)]
    id: u32,
    /// Host bucket of the map the OSD belongs to (default: this machine's host name).
    #[arg(long)]
    host: Option<String>,
    /// Store backend: block, posix or mem.
    #[arg(long, default_value = "block")]
    backend: BackendKind,
    /// Store directory (default: `osd.ID` next to the conf file).
    #[arg(long)]
    store: Option<PathBuf>,
    /// Capacity of a new store (`mem`: its RAM limit), e.g. 4G.
    #[arg(long, default_value = "4G", value_parser = crate::conf::parse_size_arg)]
    size: u64,
    /// Address to listen on; port 0 picks a free port.
    #[arg(long, default_value = "127.0.0.1:0")]
    addr: SocketAddr,
    /// CRUSH-style weight (1.0 = one TiB by convention).
    #[arg(long, default_value_t = 1.0)]
    weight: f64,
    /// Memory a disk store (`block`) keeps of recently read small blocks, in bytes or as a size
    /// such as 64M (0: none).
    #[arg(long, env = "SHOAL_BLOCK_CACHE_BYTES", default_value_t = shoal_store::engine::device::DEFAULT_CACHE_BYTES, value_parser = crate::conf::parse_size_arg)]
    block_cache: u64,
    /// Memory a disk store keeps of recent large reads (up to 4 MiB each, kept whole), in bytes
    /// or as a size such as 256M (0: none).
    #[arg(long, env = "SHOAL_BLOCK_CACHE_LARGE_BYTES", default_value_t = shoal_store::engine::device::DEFAULT_LARGE_CACHE_BYTES, value_parser = crate::conf::parse_size_arg)]
    block_cache_large: u64,
    /// How long a peer may leave this OSD's pings unanswered before the OSD reports it
    /// unreachable to the monitors (decision 0062); pings go out every tenth of it, at most
    /// once a second.
    #[arg(long, env = "SHOAL_PEER_GRACE_MS", default_value_t = shoal_osd::HeartbeatConfig::daemon().grace_ms)]
    peer_grace_ms: u64,
    /// Threads of the OSD's runtime. One (the default) runs a current-thread runtime: the steps
    /// of a request (its read off the socket, its execution, its reply) wake each other with a
    /// function call instead of a futex wake of another core. A RAM store's worker runs on that
    /// thread (it never waits); a disk store's worker and readers are threads of their own
    /// (decisions 0024, 0034 and 0098).
    #[arg(long, env = "SHOAL_OSD_THREADS", default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=256))]
    threads: u16,
}

/// Daemons log to stderr, which `shoal up` points at `DIR/NAME.log`: one line per event, with
/// a timestamp, no colours. The Raft library reports every election step at INFO; only its
/// warnings are kept.
pub(crate) fn init_logging() {
    use tracing_subscriber::filter::{LevelFilter, Targets};
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    // SHOAL_LOG=debug (or trace, warn, error) raises or lowers the daemons' detail; anything else
    // keeps the default, info.
    let level = match std::env::var("SHOAL_LOG").unwrap_or_default().to_ascii_lowercase().as_str() {
        "trace" => LevelFilter::TRACE,
        "debug" => LevelFilter::DEBUG,
        "warn" => LevelFilter::WARN,
        "error" => LevelFilter::ERROR,
        _ => LevelFilter::INFO,
    };
    let filter = Targets::new().with_default(level).with_target("openraft", LevelFilter::WARN);
    let fmt = tracing_subscriber::fmt::layer().with_writer(std::io::stderr).with_ansi(false).with_target(false);
    let _ = tracing_subscriber::registry().with(filter).with(fmt).try_init();
}

/// The runtime of a server taking `--threads N`: one thread runs everything (a current-thread
/// runtime: a task woken by another is polled on the same thread, a function call rather than a
/// futex wake and a context switch on another core); more start a multi-thread runtime of that
/// many workers. `on_thread_start` runs on every thread the runtime starts (workers and blocking
/// threads), not on the caller's.
pub(crate) fn serving_runtime(threads: u16, on_thread_start: fn()) -> Result<tokio::runtime::Runtime> {
    let mut builder = if threads <= 1 {
        tokio::runtime::Builder::new_current_thread()
    } else {
        let mut b = tokio::runtime::Builder::new_multi_thread();
        b.worker_threads(usize::from(threads));
        b
    };
    builder.on_thread_start(on_thread_start).enable_all().build().context("starting tokio")
}

fn runtime(threads: usize) -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread().worker_threads(threads).enable_all().build().context("starting tokio")
}

/// Resolves when the process gets SIGTERM or SIGINT.
pub(crate) async fn stop_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (signal(SignalKind::terminate()), signal(SignalKind::interrupt())) else {
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
}

pub fn run_mon(args: &MonArgs) -> Result<ExitCode> {
    init_logging();
    let conf_path = args.conf.path();
    let conf = ConfFile::load(&conf_path)?;
    let Some(&listen) = conf.mons.get(args.rank as usize) else {
        bail!("{} has no monitor of rank {} ({} listed)", conf_path.display(), args.rank, conf.mons.len());
    };
    let keyring = Arc::new(Keyring::load(&conf.keyring)?);
    let data_dir = args.data.clone().unwrap_or_else(|| args.conf.dir().join(format!("mon.{}", args.rank)));
    let mons: BTreeMap<u32, SocketAddr> = conf.mons.iter().enumerate().map(|(i, a)| (i as u32, *a)).collect();
    if !data_dir.exists() {
        shoal_mon::mkfs(&data_dir, args.rank, &conf.fsid, &mons)
            .with_context(|| format!("creating monitor data in {}", data_dir.display()))?;
    }
    let cfg = shoal_mon::MonConfig { rank: args.rank, data_dir, listen, mons, keyring };
    runtime(2)?.block_on(shoal_mon::run(cfg, stop_signal()))?;
    Ok(ExitCode::SUCCESS)
}

/// Peer heartbeats for a grace of `grace_ms`: pings every tenth of it, at most once a second.
fn heartbeat_config(grace_ms: u64) -> Result<shoal_osd::HeartbeatConfig> {
    if grace_ms < 100 {
        bail!("--peer-grace-ms {grace_ms} is too short: at least 100 ms");
    }
    let interval_ms = (grace_ms / 10).clamp(10, 1_000);
    Ok(shoal_osd::HeartbeatConfig { interval_ms, grace_ms })
}

pub fn run_osd(args: &OsdArgs) -> Result<ExitCode> {
    init_logging();
    let conf_path = args.conf.path();
    let conf = ConfFile::load(&conf_path)?;
    let entity = format!("osd.{}", args.id);
    let cluster = ClusterConfig::from_conf_file(&conf_path, &entity)?;
    let keyring = Arc::new(Keyring::load(&conf.keyring)?);
    let host = match &args.host {
        Some(h) => h.clone(),
        None => std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_string())
            .unwrap_or_else(|_| "localhost".into()),
    };
    let weight = Weight::from_f64(args.weight).with_context(|| format!("invalid weight {}", args.weight))?;
    let cfg = shoal_osd::OsdConfig {
        id: OsdId(args.id),
        host,
        weight,
        backend: args.backend,
        store_dir: args.store.clone().unwrap_or_else(|| args.conf.dir().join(&entity)),
        size_bytes: args.size,
        listen: args.addr,
        cluster,
        keyring,
        stats_interval_ms: 1000,
        heartbeat: heartbeat_config(args.peer_grace_ms)?,
        block_cache: shoal_store::CacheSizes { small_bytes: args.block_cache, large_bytes: args.block_cache_large },
    };
    serving_runtime(args.threads, || {})?.block_on(shoal_osd::run(cfg, stop_signal()))?;
    Ok(ExitCode::SUCCESS)
}
