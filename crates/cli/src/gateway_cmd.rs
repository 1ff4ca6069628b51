//! `shoal gateway run` (the S3 gateway daemon) and `shoal s3 user|key` (S3 users and their
//! access keys, kept in the cluster).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use serde_json::json;
use shoal_gateway::layout::UserRecord;
use shoal_gateway::{GatewayConfig, Server, TlsFiles, meta};

use crate::admin::print;
use crate::conf::ConfArgs;

#[derive(Subcommand)]
pub enum GatewayCommand {
    /// Run an S3 gateway in the foreground until SIGTERM. It creates the gateway's pools on
    /// first start; any number of gateways may serve one cluster.
    Run(GatewayArgs),
}

#[derive(Args)]
pub struct GatewayArgs {
    #[command(flatten)]
    conf: ConfArgs,
    /// Address to serve S3 on (HTTP/1.1, or HTTPS with --tls-cert and --tls-key).
    #[arg(long, default_value = "127.0.0.1:7480")]
    listen: SocketAddr,
    /// PEM certificate chain (leaf first) to serve HTTPS with; needs --tls-key.
    #[arg(long, requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// PEM private key of the --tls-cert certificate.
    #[arg(long, requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// Domain for virtual-host-style requests (BUCKET.DOMAIN); may be repeated.
    #[arg(long)]
    domain: Vec<String>,
    /// The region this gateway serves (checked in signatures and LocationConstraint).
    #[arg(long, default_value = "us-east-1")]
    region: String,
    /// Bytes the gateway may hold in memory: 64 MiB for the process, the rest for requests'
    /// data (requests beyond it wait; at least one request always fits, so below 88M the
    /// process may hold more).
    #[arg(long, default_value = "256M", value_parser = crate::conf::parse_size_arg)]
    inflight: u64,
    /// Seconds replaced or deleted data stays readable before it is collected.
    #[arg(long, default_value_t = 7200)]
    gc_delay_s: u64,
    /// Seconds after which a write whose gateway died is decided from its head by the collector
    /// (writers never commit past half of it).
    #[arg(long, default_value_t = 3600, value_parser = clap::value_parser!(u64).range(1..))]
    lease_s: u64,
    /// Replicas of the gateway's pools when it creates them (default: up to 3, one per OSD).
    #[arg(long)]
    pool_size: Option<u32>,
    /// PGs of the data pool when the gateway creates it.
    #[arg(long, default_value_t = 64)]
    pg_num: u32,
    /// Entries a bucket index partition may hold before it is split in two (online).
    #[arg(long, default_value_t = 50_000, value_parser = clap::value_parser!(u64).range(4..))]
    index_split_entries: u64,
    /// Neighbouring bucket index partitions holding fewer entries than this together are merged
    /// into one (online); default a quarter of --index-split-entries, 0 never.
    #[arg(long)]
    index_merge_entries: Option<u64>,
    /// Seconds in a lifecycle day: 86400, or a few seconds to watch lifecycle rules act in a
    /// test (the `x-amz-expiration` header still counts real days).
    #[arg(long, env = "SHOAL_LIFECYCLE_DAY_S", default_value_t = 86_400, value_parser = clap::value_parser!(u64).range(1..))]
    lifecycle_day_s: u64,
    /// Threads serving requests (default: one per core). One runs every request on one thread:
    /// a small request's steps (its HTTP parts, its cluster operations, its reply) wake each
    /// other several times, and on one thread a wake is a function call rather than a futex wake
    /// and a context switch on another core.
    #[arg(long, env = "SHOAL_GATEWAY_THREADS", value_parser = clap::value_parser!(u16).range(1..=256))]
    threads: Option<u16>,
    /// Seconds the gateway waits on a client: for a request's headers (also for the next request
    /// on a kept-alive connection), for the next bytes of a request body (then the answer is
    /// RequestTimeout), and for the client to read an answer. Past it the connection is closed,
    /// so stalled or vanished clients do not hold connections and memory.
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    client_timeout_s: u64,
}

pub fn run(cmd: &GatewayCommand) -> Result<ExitCode> {
    match cmd {
        GatewayCommand::Run(args) => run_gateway(args),
    }
}

/// How long the gateway's freed pages stay for reuse before going back to the kernel (see
/// [`crate::alloc::set_first_arena_decay_ms`]): short, because its RSS has a limit.
const GATEWAY_DIRTY_DECAY_MS: isize = 500;

fn run_gateway(args: &GatewayArgs) -> Result<ExitCode> {
    // One arena for all the gateway's threads: with one per thread, each runtime thread that
    // frees 4 MiB chunks keeps its own freed extents, and under 64 concurrent 4 MiB PUTs the
    // gateway held more than its 256 MiB limit (glibc's arenas did: 308-367 MiB of RSS for a
    // 186 MiB heap peak; docs/BENCHMARKS.md).
    crate::alloc::use_first_arena();
    crate::daemons::init_logging();
    crate::alloc::set_first_arena_decay_ms(GATEWAY_DIRTY_DECAY_MS);
    let cluster = args.conf.cluster()?;
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    let threads = args.threads.unwrap_or_else(|| u16::try_from(cores).unwrap_or(u16::MAX));
    let rt = crate::daemons::serving_runtime(threads, crate::alloc::use_first_arena)?;
    rt.block_on(async {
        let client = shoal_client::Client::connect(cluster).await.context("connecting to the cluster")?;
        let osds = client.mon().map().osds.len() as u32;
        let cfg = GatewayConfig {
            listen: args.listen,
            domains: args.domain.clone(),
            region: args.region.clone(),
            inflight_bytes: args.inflight,
            gc_delay: Duration::from_secs(args.gc_delay_s),
            lease: Duration::from_secs(args.lease_s),
            pool_size: args.pool_size.unwrap_or(osds.clamp(1, 3)),
            pg_num: args.pg_num,
            lifecycle_day: Duration::from_secs(args.lifecycle_day_s),
            split_entries: args.index_split_entries,
            merge_entries: args.index_merge_entries,
            client_idle_timeout: Duration::from_secs(args.client_timeout_s),
            tls: match (&args.tls_cert, &args.tls_key) {
                (Some(cert), Some(key)) => Some(TlsFiles { cert: cert.clone(), key: key.clone() }),
                _ => None,
            },
        };
        let server = Server::bind(client, &cfg).await?;
        let scheme = if server.is_tls() { "https" } else { "http" };
        tracing::info!(endpoint = %format!("{scheme}://{}", server.local_addr()), "S3 gateway serving");
        tokio::select! {
            r = server.run() => r?,
            () = crate::daemons::stop_signal() => tracing::info!("stopping on a signal"),
        }
        Ok::<_, anyhow::Error>(())
    })?;
    Ok(ExitCode::SUCCESS)
}

#[derive(Subcommand)]
pub enum S3Command {
    /// S3 users: create, ls, info, rm.
    #[command(subcommand)]
    User(UserCommand),
    /// Access keys of S3 users: create, rm.
    #[command(subcommand)]
    Key(KeyCommand),
    /// Load an S3 server (any, not only Shoal's) with signed requests for a fixed time and
    /// report ops/s, MB/s and latency: put, get, list (keys/s of ListObjectsV2 pages) or mixed.
    Bench(S3BenchArgs),
}

#[derive(Args)]
pub struct S3BenchArgs {
    #[arg(long, env = "AWS_ENDPOINT_URL")]
    endpoint: String,
    #[arg(long, env = "AWS_ACCESS_KEY_ID")]
    access_key: String,
    #[arg(long, env = "AWS_SECRET_ACCESS_KEY", hide_env_values = true)]
    secret_key: String,
    #[arg(long, default_value = "us-east-1")]
    region: String,
    /// Bucket to use (created if missing).
    #[arg(long, default_value = "shoal-bench")]
    bucket: String,
    /// Object size, e.g. 4K or 4M.
    #[arg(long, default_value = "4K", value_parser = crate::conf::parse_size_arg)]
    size: u64,
    /// Requests in flight (one connection each).
    #[arg(long, default_value_t = 16)]
    concurrency: usize,
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    /// put, get, list, mixed (half get, half put) or delete (the bucket's keys, listed first,
    /// in key order: workers share the listing round-robin).
    workload: String,
    /// `get`, `mixed`: read the objects an earlier run with the same bucket, size and
    /// concurrency wrote, instead of writing them first (so that a measurement of the run holds
    /// only reads; a missing object counts as an error).
    #[arg(long)]
    no_prefill: bool,
    #[arg(long)]
    json: bool,
}

fn s3_bench(args: &S3BenchArgs) -> Result<ExitCode> {
    use shoal_gateway::loadgen::{self, BenchSpec, Workload};
    let workload = match args.workload.as_str() {
        "put" => Workload::Put,
        "get" => Workload::Get,
        "list" => Workload::List,
        "mixed" => Workload::Mixed,
        "delete" => Workload::Delete,
        other => anyhow::bail!("unknown workload {other:?}: use put, get, list, mixed or delete"),
    };
    let spec = BenchSpec {
        endpoint: args.endpoint.clone(),
        access_key: args.access_key.clone(),
        secret_key: args.secret_key.clone(),
        region: args.region.clone(),
        bucket: args.bucket.clone(),
        size_bytes: usize::try_from(args.size).context("object size")?,
        concurrency: args.concurrency,
        seconds: args.seconds,
        workload,
        prefill: !args.no_prefill,
    };
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().context("starting tokio")?;
    let json_out = args.json;
    let report = rt
        .block_on(loadgen::run(spec, |s, ops| {
            if !json_out {
                eprintln!("  {s:>4} s  {ops} ops");
            }
        }))
        .map_err(anyhow::Error::msg)?;
    print(args.json, serde_json::to_value(&report)?, || {
        format!(
            "{:?} {} B x {} for {:.1} s: {:.0} ops/s, {:.1} MB/s{}, latency p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms, \
             {} errors",
            report.workload,
            report.size_bytes,
            report.concurrency,
            report.seconds,
            report.ops_per_s,
            report.mb_per_s,
            if report.keys_per_s > 0.0 { format!(", {:.0} keys/s", report.keys_per_s) } else { String::new() },
            report.p50_ms,
            report.p99_ms,
            report.max_ms,
            report.errors
        )
    });
    Ok(ExitCode::SUCCESS)
}

#[derive(Subcommand)]
pub enum UserCommand {
    /// Create a user with one access key; prints the key and its secret (shown only here).
    Create {
        #[command(flatten)]
        conf: ConfArgs,
        name: String,
        #[arg(long)]
        display_name: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// List users.
    Ls {
        #[command(flatten)]
        conf: ConfArgs,
        #[arg(long)]
        json: bool,
    },
    /// A user's ids, keys and buckets.
    Info {
        #[command(flatten)]
        conf: ConfArgs,
        name: String,
        #[arg(long)]
        json: bool,
    },
    /// Remove a user and its keys (refused while it owns buckets).
    Rm {
        #[command(flatten)]
        conf: ConfArgs,
        name: String,
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand)]
pub enum KeyCommand {
    /// Add an access key to a user; prints it and its secret.
    Create {
        #[command(flatten)]
        conf: ConfArgs,
        user: String,
        #[arg(long)]
        json: bool,
    },
    /// Remove an access key.
    Rm {
        #[command(flatten)]
        conf: ConfArgs,
        access_key: String,
        #[arg(long)]
        json: bool,
    },
}

fn user_json(u: &UserRecord) -> serde_json::Value {
    json!({
        "user": u.name,
        "display_name": u.display_name,
        "canonical_id": u.canonical_id,
        "access_keys": u.access_keys,
    })
}

pub fn s3(cmd: &S3Command) -> Result<ExitCode> {
    match cmd {
        S3Command::Bench(args) => return s3_bench(args),
        S3Command::User(UserCommand::Create { conf, name, display_name, json }) => {
            let c = conf.connect()?;
            let (user, access, secret) = c.runtime().block_on(async {
                ensure_pools(c.client()).await?;
                meta::create_user(c.client(), name, display_name.as_deref(), None).await.map_err(anyhow::Error::from)
            })?;
            let mut doc = user_json(&user);
            doc["access_key"] = json!(access);
            doc["secret_key"] = json!(secret);
            print(*json, doc, || format!("user {}\n  access key {access}\n  secret key {secret}", user.name));
        }
        S3Command::User(UserCommand::Ls { conf, json }) => {
            let c = conf.connect()?;
            let users = c.runtime().block_on(meta::list_users(c.client()))?;
            print(*json, json!(users.iter().map(user_json).collect::<Vec<_>>()), || {
                users.iter().map(|u| u.name.clone()).collect::<Vec<_>>().join("\n")
            });
        }
        S3Command::User(UserCommand::Info { conf, name, json }) => {
            let c = conf.connect()?;
            let (user, buckets) = c.runtime().block_on(async {
                let user = meta::get_user(c.client(), name).await?;
                let buckets = meta::list_buckets(c.client(), &user).await?;
                Ok::<_, shoal_gateway::GatewayError>((user, buckets))
            })?;
            let names: Vec<&str> = buckets.iter().map(|b| b.name.as_str()).collect();
            let mut doc = user_json(&user);
            doc["buckets"] = json!(names);
            print(*json, doc, || {
                format!(
                    "user {}\n  display name {}\n  canonical id {}\n  access keys {}\n  buckets {}",
                    user.name,
                    user.display_name,
                    user.canonical_id,
                    user.access_keys.join(", "),
                    names.join(", ")
                )
            });
        }
        S3Command::User(UserCommand::Rm { conf, name, json }) => {
            let c = conf.connect()?;
            c.runtime().block_on(meta::remove_user(c.client(), name))?;
            print(*json, json!({"removed": name}), || format!("removed user {name}"));
        }
        S3Command::Key(KeyCommand::Create { conf, user, json }) => {
            let c = conf.connect()?;
            let (access, secret) = c.runtime().block_on(meta::create_key(c.client(), user))?;
            print(*json, json!({"user": user, "access_key": access, "secret_key": secret}), || {
                format!("user {user}\n  access key {access}\n  secret key {secret}")
            });
        }
        S3Command::Key(KeyCommand::Rm { conf, access_key, json }) => {
            let c = conf.connect()?;
            let user = c.runtime().block_on(meta::remove_key(c.client(), access_key))?;
            print(*json, json!({"removed": access_key, "user": user}), || {
                format!("removed access key {access_key} of user {user}")
            });
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Creates the gateway's pools if no gateway has yet (a user can be made before any runs).
pub async fn ensure_pools(client: &shoal_client::Client) -> Result<()> {
    let map = client.mon().map();
    let size = map.osds.len().clamp(1, 3) as u32;
    let timeout_ms = client.mon().config().op_timeout_ms;
    meta::ensure_pools(client, size, 64, timeout_ms).await.context("creating the gateway's pools")
}
