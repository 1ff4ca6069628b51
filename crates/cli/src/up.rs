//! `shoal up` and `shoal down`: a whole local cluster in one command.
//!
//! `up` writes the cluster's files into one directory (conf, keyring, one data directory and
//! one log per daemon), starts each daemon as its own process on loopback, creates the default
//! pool `data`, and returns once every OSD is up and every PG of the pool has its full acting
//! set. `down` stops the daemons (OSDs first, so they can say goodbye to the monitors) and, for
//! the `mem` backend, removes the directory: like DisTRaC's clusters, a RAM cluster lives only
//! as long as it is needed.

use std::collections::BTreeMap;
use std::fs;
use std::net::SocketAddr;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command as Process, ExitCode, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::Args;
use serde::{Deserialize, Serialize};
use shoal_client::blocking::BlockingClient;
use shoal_client::{ClusterConfig, ConfFile, default_cluster_dir};
use shoal_map::{Command, OsdId, PgId};
use shoal_net::{Key, Keyring};
use shoal_store::BackendKind;

#[derive(Args)]
pub struct UpArgs {
    /// Number of OSDs.
    #[arg(long, default_value_t = 3)]
    osds: u32,
    /// Number of monitors: 1 or 3.
    #[arg(long, default_value_t = 1)]
    mons: u32,
    /// Hosts of the map to spread the OSDs over (default: one per OSD).
    #[arg(long)]
    hosts: Option<u32>,
    /// Store backend of every OSD: mem (RAM, removed by `down`), block or posix.
    #[arg(long, default_value = "mem")]
    backend: BackendKind,
    /// Directory for the cluster's files (default: $XDG_RUNTIME_DIR/shoal or /tmp/shoal-$USER).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Capacity of each OSD's store (default: 4G on disk; in RAM, half the machine's memory
    /// shared among the OSDs — RAM stores take memory only as data arrives).
    #[arg(long, value_parser = crate::conf::parse_size_arg)]
    osd_size: Option<u64>,
    /// PGs of the default pool.
    #[arg(long, default_value_t = 64)]
    pg_num: u32,
    /// How long to wait for the cluster to become healthy, in milliseconds.
    #[arg(long, default_value_t = 30_000)]
    timeout_ms: u64,
    /// Print one JSON document instead of text.
    #[arg(long)]
    json: bool,
    /// Start no S3 gateway (and create none of its pools).
    #[arg(long)]
    no_gateway: bool,
}

#[derive(Args)]
pub struct DownArgs {
    /// The cluster's directory (default: the one `shoal up` uses without --dir).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Keep the directory even for the mem backend.
    #[arg(long)]
    keep: bool,
    #[arg(long)]
    json: bool,
}

/// What `up` records about the cluster for `down`, for a restart, and for people.
#[derive(Serialize, Deserialize)]
struct ClusterFile {
    backend: String,
    mons: u32,
    osds: u32,
    #[serde(default)]
    hosts: u32,
    #[serde(default)]
    osd_size: u64,
}

#[derive(Serialize)]
struct UpReport {
    dir: PathBuf,
    conf: PathBuf,
    keyring: PathBuf,
    fsid: String,
    mons: Vec<SocketAddr>,
    osds: u32,
    hosts: u32,
    backend: String,
    pool: String,
    pool_size: u32,
    healthy_after_ms: u64,
    logs: Vec<PathBuf>,
    #[serde(skip_serializing_if = "Option::is_none")]
    gateway: Option<GatewayReport>,
}

/// The S3 gateway `up` starts, and the admin S3 user's keys.
#[derive(Serialize)]
struct GatewayReport {
    endpoint: String,
    access_key: String,
    secret_key: String,
}

/// The S3 user `up` creates for its operator.
const S3_ADMIN_USER: &str = "admin";
/// The entity the gateway acts as.
const GATEWAY_ENTITY: &str = "client.gateway";

/// Gives the gateway its own key (in the keyring file and the monitors' auth table), creates its
/// pools and the admin S3 user if missing, starts it on a free port and waits until it accepts
/// connections. Returns its endpoint and the admin user's keys.
fn start_gateway(
    client: &BlockingClient,
    dir: &Path,
    conf_arg: &str,
    pool_size: u32,
    deadline: Instant,
) -> Result<GatewayReport> {
    let rt = client.runtime();
    let c = client.client();
    let keyring_path = dir.join("keyring");
    let mut keyring = Keyring::load(&keyring_path)?;
    let key = match keyring.get(GATEWAY_ENTITY) {
        Some(k) => k.clone(),
        None => {
            let k = Key::generate();
            keyring.insert(GATEWAY_ENTITY, k.clone());
            keyring.save(&keyring_path)?;
            k
        }
    };
    if c.mon().map().auth.get(GATEWAY_ENTITY).is_none_or(|known| *known != key.0) {
        let epoch = rt.block_on(c.mon().command(Command::AuthAdd { entity: GATEWAY_ENTITY.into(), key: key.0 }))?;
        rt.block_on(c.mon().wait_for_epoch(epoch, 10_000))?;
    }
    let timeout_ms = c.mon().config().op_timeout_ms;
    let (access_key, secret_key) = rt.block_on(async {
        shoal_gateway::meta::ensure_pools(c, pool_size, 64, timeout_ms).await?;
        match shoal_gateway::meta::get_user(c, S3_ADMIN_USER).await {
            Ok(user) => {
                let access = user.access_keys.first().cloned().unwrap_or_default();
                let secret = shoal_gateway::meta::lookup_key(c, &access).await?.secret;
                Ok::<_, shoal_gateway::GatewayError>((access, secret))
            }
            Err(shoal_gateway::GatewayError::NoSuchUser(_)) => {
                let (_, access, secret) = shoal_gateway::meta::create_user(c, S3_ADMIN_USER, None, None).await?;
                Ok((access, secret))
            }
            Err(e) => Err(e),
        }
    })?;
    let addr = free_port()?;
    let args: Vec<String> = vec![
        "gateway".into(),
        "run".into(),
        "--conf".into(),
        conf_arg.into(),
        "--name".into(),
        GATEWAY_ENTITY.into(),
        "--listen".into(),
        addr.to_string(),
        "--pool-size".into(),
        pool_size.to_string(),
    ];
    spawn_daemon(dir, "gateway", &args)?;
    let log = dir.join("gateway.log");
    loop {
        if std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(100)).is_ok() {
            break;
        }
        let alive = read_pids(dir).iter().any(|(n, pid)| n == "gateway" && pid_alive(*pid));
        if !alive {
            bail!("the gateway exited during start-up; the end of {}:\n{}", log.display(), log_tail(&log));
        }
        if Instant::now() >= deadline {
            bail!("the gateway did not listen on {addr} in time; see {}", log.display());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Ok(GatewayReport { endpoint: format!("http://{addr}"), access_key, secret_key })
}

/// 4 GiB on disk; in RAM, half of the machine's memory divided among the OSDs (at least 1 GiB),
/// so a RAM cluster can hold as much as the machine can spare without one OSD taking it all.
fn default_osd_size(backend: BackendKind, osds: u32) -> u64 {
    const GIB: u64 = 1 << 30;
    if backend != BackendKind::Mem {
        return 4 * GIB;
    }
    let total_kib = fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find(|l| l.starts_with("MemTotal:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        })
        .unwrap_or(8 * 1024 * 1024);
    (total_kib * 1024 / 2 / u64::from(osds.max(1))).max(GIB)
}

fn free_port() -> Result<SocketAddr> {
    // Released for the daemon to take; chosen where outgoing connections never take ports. Another
    // process binding it in between is still possible: the daemon then fails to start and `up`
    // reports its log.
    shoal_net::ports::unused_loopback_port().context("finding a free loopback port")
}

/// Whether process `pid` is running. A zombie (exited, not yet reaped: daemons outlive the
/// `up` that started them, and not every init reaps promptly) counts as stopped, but only once
/// every thread of it has exited: the main thread of a process being killed or exiting can be a
/// zombie while its other threads still run and still hold its files (and so the lock on its
/// store), which `down`'s callers rely on being released when it returns.
fn pid_alive(pid: i32) -> bool {
    let Ok(threads) = fs::read_dir(format!("/proc/{pid}/task")) else { return false };
    threads.flatten().any(|t| {
        let Ok(stat) = fs::read_to_string(t.path().join("stat")) else { return false };
        // The state follows the command name, which is in parentheses and may contain spaces.
        let state = stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().next());
        !matches!(state, None | Some("Z") | Some("X"))
    })
}

fn read_pids(dir: &Path) -> Vec<(String, i32)> {
    let mut out = Vec::new();
    let Ok(entries) = fs::read_dir(dir) else { return out };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if let Some(daemon) = name.strip_suffix(".pid")
            && let Ok(text) = fs::read_to_string(e.path())
            && let Ok(pid) = text.trim().parse::<i32>()
        {
            out.push((daemon.to_string(), pid));
        }
    }
    out.sort();
    out
}

fn spawn_daemon(dir: &Path, name: &str, args: &[String]) -> Result<u32> {
    let exe = std::env::current_exe().context("finding the shoal binary")?;
    let log_path = dir.join(format!("{name}.log"));
    let log = fs::File::create(&log_path).with_context(|| format!("creating {}", log_path.display()))?;
    let child = Process::new(exe)
        .args(args)
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        // Its own process group: a Ctrl-C in the terminal that ran `up` does not stop the cluster.
        .process_group(0)
        .spawn()
        .with_context(|| format!("starting {name}"))?;
    let pid = child.id();
    fs::write(dir.join(format!("{name}.pid")), format!("{pid}\n"))?;
    Ok(pid)
}

fn log_tail(path: &Path) -> String {
    let text = fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(10)..].join("\n")
}

/// Writes a new cluster's keyring (a key for the admin, every monitor and every OSD), conf file
/// (monitor addresses on free loopback ports) and `cluster.json`. Returns the fsid and the
/// monitor addresses.
fn create_cluster_files(dir: &Path, mons_n: u32, osds: u32, info: &ClusterFile) -> Result<(String, Vec<SocketAddr>)> {
    let mut keyring = Keyring::new();
    keyring.insert("client.admin", Key::generate());
    for r in 0..mons_n {
        keyring.insert(&format!("mon.{r}"), Key::generate());
    }
    for i in 0..osds {
        keyring.insert(&format!("osd.{i}"), Key::generate());
    }
    keyring.save(&dir.join("keyring"))?;
    let mons: Vec<SocketAddr> = (0..mons_n).map(|_| free_port()).collect::<Result<_>>()?;
    let fsid = Key::generate().to_hex()[..32].to_string();
    let conf = ConfFile { fsid: fsid.clone(), mons: mons.clone(), keyring: PathBuf::from("keyring") };
    conf.save(&dir.join("shoal.toml"))?;
    fs::write(dir.join("cluster.json"), serde_json::to_string_pretty(info)?)?;
    Ok((fsid, mons))
}

pub fn up(args: &UpArgs) -> Result<ExitCode> {
    let started = Instant::now();
    if args.mons != 1 && args.mons != 3 {
        bail!("--mons must be 1 or 3, got {}", args.mons);
    }
    if args.osds == 0 || args.osds > 1000 {
        bail!("--osds must be between 1 and 1000, got {}", args.osds);
    }
    let dir = args.dir.clone().unwrap_or_else(default_cluster_dir);
    let running: Vec<_> = read_pids(&dir).into_iter().filter(|(_, pid)| pid_alive(*pid)).collect();
    if !running.is_empty() {
        bail!(
            "a cluster is already running in {} ({} daemons); stop it with `shoal down --dir {}`",
            dir.display(),
            running.len(),
            dir.display()
        );
    }
    // A stopped cluster on disk is restarted as it was (its data is kept); a stopped RAM cluster
    // has nothing left to keep and is replaced; any other non-empty directory is left alone.
    let previous: Option<ClusterFile> =
        fs::read_to_string(dir.join("cluster.json")).ok().and_then(|t| serde_json::from_str(&t).ok());
    let restart = match &previous {
        Some(p) if p.backend != "mem" && dir.join("shoal.toml").exists() => true,
        Some(_) => {
            fs::remove_dir_all(&dir)
                .with_context(|| format!("clearing the stopped RAM cluster in {}", dir.display()))?;
            false
        }
        None if fs::read_dir(&dir).is_ok_and(|mut d| d.next().is_some()) => {
            bail!("{} is not empty and holds no Shoal cluster; choose another --dir", dir.display())
        }
        None => false,
    };
    let (backend, mons_n, osds, hosts, osd_size) = match previous.as_ref().filter(|_| restart) {
        Some(p) => {
            let backend: BackendKind = p.backend.parse()?;
            let hosts = if p.hosts == 0 { p.osds } else { p.hosts };
            let size = if p.osd_size == 0 { default_osd_size(backend, p.osds) } else { p.osd_size };
            (backend, p.mons, p.osds, hosts, size)
        }
        None => {
            let hosts = args.hosts.unwrap_or(args.osds).clamp(1, args.osds);
            (
                args.backend,
                args.mons,
                args.osds,
                hosts,
                args.osd_size.unwrap_or_else(|| default_osd_size(args.backend, args.osds)),
            )
        }
    };
    fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let dir = dir.canonicalize()?;
    let conf_path = dir.join("shoal.toml");
    let keyring_path = dir.join("keyring");
    let (fsid, mons) = if restart {
        if !args.json {
            println!("restarting the {} cluster in {} (its data is kept)", backend.name(), dir.display());
        }
        let conf = ConfFile::load(&conf_path)?;
        (conf.fsid, conf.mons)
    } else {
        create_cluster_files(
            &dir,
            mons_n,
            osds,
            &ClusterFile { backend: backend.name().into(), mons: mons_n, osds, hosts, osd_size },
        )?
    };

    // Daemons: monitors first (they create their data at first start), then every OSD at once.
    let conf_arg = conf_path.display().to_string();
    let mut logs = Vec::new();
    let mon_map: BTreeMap<u32, SocketAddr> = mons.iter().enumerate().map(|(i, a)| (i as u32, *a)).collect();
    for r in 0..mons_n {
        let data = dir.join(format!("mon.{r}"));
        if !restart {
            shoal_mon::mkfs(&data, r, &fsid, &mon_map).with_context(|| format!("creating {}", data.display()))?;
        }
        let name = format!("mon.{r}");
        spawn_daemon(
            &dir,
            &name,
            &["mon".into(), "run".into(), "--conf".into(), conf_arg.clone(), "--rank".into(), r.to_string()],
        )?;
        logs.push(dir.join(format!("{name}.log")));
    }
    let deadline = started + Duration::from_millis(args.timeout_ms);
    let check_daemons = || -> Result<()> {
        for (name, pid) in read_pids(&dir) {
            if !pid_alive(pid) {
                let log = dir.join(format!("{name}.log"));
                bail!("{name} exited during start-up; the end of {}:\n{}", log.display(), log_tail(&log));
            }
        }
        Ok(())
    };
    let client = loop {
        check_daemons()?;
        let mut cfg = ClusterConfig::from_conf_file(&conf_path, "client.admin")?;
        cfg.op_timeout_ms = 2_000;
        match BlockingClient::connect(cfg) {
            Ok(c) => break c,
            Err(e) if Instant::now() < deadline => {
                let _ = e;
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(e) => return Err(e).context("the monitors did not come up"),
        }
    };
    let monc = client.client().mon().clone();
    let rt = client.runtime();
    // OSDs start once the monitors answer, so that "up" below means booted by this start (a
    // restarted cluster's map may still show OSDs up from before).
    let booted_after = monc.map().epoch;
    for i in 0..osds {
        let name = format!("osd.{i}");
        let osd_args = vec![
            "osd".into(),
            "run".into(),
            "--conf".into(),
            conf_arg.clone(),
            "--id".into(),
            i.to_string(),
            "--host".into(),
            format!("host-{}", i % hosts),
            "--backend".into(),
            backend.name().into(),
            "--size".into(),
            osd_size.to_string(),
        ];
        spawn_daemon(&dir, &name, &osd_args)?;
        logs.push(dir.join(format!("{name}.log")));
    }

    // Every OSD up.
    let want_osds = osds as usize;
    loop {
        check_daemons()?;
        let map = monc.map();
        if map.osds.values().filter(|o| o.up && o.up_from > booted_after).count() >= want_osds {
            break;
        }
        if Instant::now() >= deadline {
            // Name the OSDs that did not boot in this start, with the end of each one's log.
            let late: Vec<String> = (0..osds)
                .filter(|i| map.osds.get(&OsdId(*i)).is_none_or(|o| !(o.up && o.up_from > booted_after)))
                .map(|i| {
                    let log = dir.join(format!("osd.{i}.log"));
                    format!("osd.{i} (the end of {}):\n{}", log.display(), log_tail(&log))
                })
                .collect();
            bail!(
                "only {} of {} OSDs came up in {} ms; not booted: {}",
                want_osds - late.len(),
                want_osds,
                args.timeout_ms,
                late.join("\n")
            );
        }
        let mut watch = monc.watch();
        let _ = rt.block_on(async { tokio::time::timeout(Duration::from_millis(50), watch.changed()).await });
    }
    // The default pool: size 1 in RAM (the DisTRaC choice), else up to three replicas.
    let size = if backend == BackendKind::Mem { 1 } else { osds.min(3) };
    let map = if monc.map().pool_by_name("data").is_ok() {
        monc.map()
    } else {
        let cmd = Command::CreatePool {
            name: "data".into(),
            size,
            min_size: None,
            pg_num: args.pg_num,
            max_object_bytes: None,
        };
        let epoch = rt.block_on(monc.command(cmd)).context("creating pool data")?;
        rt.block_on(monc.wait_for_epoch(epoch, args.timeout_ms))?
    };
    let pool = map.pool_by_name("data")?.clone();
    for seed in 0..pool.pg_num {
        let acting = map.pg_osds(PgId { pool: pool.id, seed })?;
        if acting.len() < pool.size as usize {
            bail!("PG {}.{seed:x} has {} of {} OSDs", pool.id, acting.len(), pool.size);
        }
    }
    let gateway = if args.no_gateway {
        None
    } else {
        Some(start_gateway(&client, &dir, &conf_arg, pool.size, deadline).context("starting the S3 gateway")?)
    };
    let report = UpReport {
        dir: dir.clone(),
        conf: conf_path.clone(),
        keyring: keyring_path,
        fsid,
        mons,
        osds,
        hosts,
        backend: backend.name().into(),
        pool: "data".into(),
        pool_size: pool.size,
        healthy_after_ms: started.elapsed().as_millis() as u64,
        logs,
        gateway,
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!(
            "shoal cluster up in {} ms: {} mon(s), {} OSD(s) on {} host(s), backend {}",
            report.healthy_after_ms, mons_n, osds, hosts, report.backend
        );
        println!("  dir      {}", dir.display());
        println!("  conf     {}   (export SHOAL_CONF={} for other shells)", conf_path.display(), conf_path.display());
        println!("  keyring  {}", report.keyring.display());
        println!("  monitors {}", report.mons.iter().map(ToString::to_string).collect::<Vec<_>>().join(", "));
        println!("  logs     {}/*.log", dir.display());
        println!("  pool     data (size {}, {} PGs)", pool.size, pool.pg_num);
        if let Some(gw) = &report.gateway {
            println!(
                "  s3       {}   (user admin: access key {}, secret key {})",
                gw.endpoint, gw.access_key, gw.secret_key
            );
        }
        println!("try: shoal status; shoal obj put --pool data NAME FILE; shoal bench --pool data --seconds 5 write");
        if let Some(gw) = &report.gateway {
            println!(
                "     AWS_ACCESS_KEY_ID={} AWS_SECRET_ACCESS_KEY={} aws --endpoint-url {} s3 ls",
                gw.access_key, gw.secret_key, gw.endpoint
            );
        }
        println!(
            "stop: shoal down{}",
            if args.dir.is_some() { format!(" --dir {}", dir.display()) } else { String::new() }
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// How long `down` waits for a daemon to stop after SIGTERM before killing it.
const STOP_GRACE_MS: u64 = 5_000;
/// How long `down` waits for a killed daemon's threads to exit.
const KILL_WAIT_MS: u64 = 10_000;

pub fn down(args: &DownArgs) -> Result<ExitCode> {
    let started = Instant::now();
    let dir = args.dir.clone().unwrap_or_else(default_cluster_dir);
    if !dir.join("shoal.toml").exists() {
        bail!("no cluster in {} (no shoal.toml)", dir.display());
    }
    let info: Option<ClusterFile> =
        fs::read_to_string(dir.join("cluster.json")).ok().and_then(|t| serde_json::from_str(&t).ok());
    let pids = read_pids(&dir);
    // The gateway first (it is a client), then OSDs: each marks itself down at the monitors,
    // which must still be running.
    let (gateways, daemons): (Vec<_>, Vec<_>) = pids.into_iter().partition(|(n, _)| n == "gateway");
    let (osds, others): (Vec<_>, Vec<_>) = daemons.into_iter().partition(|(n, _)| n.starts_with("osd."));
    let mut stopped = 0;
    let mut killed = Vec::new();
    let mut stuck = Vec::new();
    for group in [gateways, osds, others] {
        for (_, pid) in &group {
            if pid_alive(*pid) {
                unsafe { libc::kill(*pid, libc::SIGTERM) };
            }
        }
        let deadline = Instant::now() + Duration::from_millis(STOP_GRACE_MS);
        for (name, pid) in &group {
            let ending = stop_or_kill(name, *pid, deadline);
            if ending == Ending::Stuck {
                stuck.push(format!("{name} (pid {pid})"));
                continue;
            }
            if ending == Ending::Killed {
                killed.push(name.clone());
            }
            let _ = fs::remove_file(dir.join(format!("{name}.pid")));
            stopped += 1;
        }
    }
    if !stuck.is_empty() {
        bail!(
            "{} did not exit {KILL_WAIT_MS} ms after SIGKILL (stuck in the kernel?); the other daemons stopped",
            stuck.join(", ")
        );
    }
    let mem = info.as_ref().is_some_and(|i| i.backend == "mem");
    let removed = mem && !args.keep;
    if removed {
        fs::remove_dir_all(&dir).with_context(|| format!("removing {}", dir.display()))?;
    }
    let elapsed_ms = started.elapsed().as_millis() as u64;
    if args.json {
        let doc = serde_json::json!({
            "dir": dir, "stopped": stopped, "killed": killed, "removed": removed, "elapsed_ms": elapsed_ms
        });
        println!("{doc}");
    } else {
        println!(
            "stopped {stopped} daemon(s) in {elapsed_ms} ms{}{}",
            if killed.is_empty() { String::new() } else { format!(" ({} killed after the grace)", killed.join(", ")) },
            if removed { format!("; removed {}", dir.display()) } else { String::new() }
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// How a daemon `down` stopped ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ending {
    /// It exited after SIGTERM.
    Stopped,
    /// It did not exit within the grace, and exited after SIGKILL.
    Killed,
    /// It outlived SIGKILL by `KILL_WAIT_MS`.
    Stuck,
}

/// Waits for daemon `name` (`pid`, sent SIGTERM) to exit, killing it with SIGKILL at `deadline`.
/// SIGKILL is delivered at once, but the process's threads take time to exit and release its
/// store; returning before then would let the next `up` or `store fsck` find the store in use. A
/// process that outlives SIGKILL by `KILL_WAIT_MS` is stuck in the kernel, and is reported rather
/// than waited for.
fn stop_or_kill(name: &str, pid: i32, deadline: Instant) -> Ending {
    let mut killed_at = None;
    while pid_alive(pid) && !reap(pid) {
        let now = Instant::now();
        match killed_at {
            None if now >= deadline => {
                eprintln!("shoal: {name} (pid {pid}) did not stop in {STOP_GRACE_MS} ms; killing it");
                unsafe { libc::kill(pid, libc::SIGKILL) };
                killed_at = Some(now);
            }
            Some(at) if now.duration_since(at) >= Duration::from_millis(KILL_WAIT_MS) => return Ending::Stuck,
            _ => {}
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    if killed_at.is_some() { Ending::Killed } else { Ending::Stopped }
}

/// Reaps `pid` if it is our exited child (it is not when `down` runs in another process than
/// `up`); returns whether it is gone.
fn reap(pid: i32) -> bool {
    let mut status = 0;
    let r = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
    r == pid
}

#[cfg(test)]
mod tests {
    use super::*;

    fn main_thread_state(pid: i32) -> Option<String> {
        let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        Some(stat.rsplit_once(')')?.1.split_whitespace().next()?.to_string())
    }

    /// A process whose main thread has exited while another thread still runs (as while a
    /// daemon exits or is killed: its threads end one by one) still holds its files, so it is
    /// alive; once every thread has exited it is not. Python stands in for the daemon: its main
    /// thread calls `pthread_exit` and a second thread exits the process a moment later.
    #[test]
    fn a_process_is_alive_until_its_last_thread_exits() {
        let script = "import threading, time, os, ctypes\n\
                      def rest():\n    time.sleep(1.5)\n    os._exit(0)\n\
                      threading.Thread(target=rest).start()\n\
                      ctypes.CDLL(None).pthread_exit(None)\n";
        let mut child = std::process::Command::new("python3").args(["-c", script]).spawn().expect("python3 runs");
        let pid = child.id() as i32;
        let deadline = Instant::now() + Duration::from_secs(5);
        while main_thread_state(pid).as_deref() != Some("Z") {
            assert!(Instant::now() < deadline, "the main thread of {pid} did not exit");
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(pid_alive(pid), "a process with a running thread counted as stopped");
        let status = child.wait().expect("wait");
        assert!(status.success());
        assert!(!pid_alive(pid), "a reaped process counted as running");
    }
}
