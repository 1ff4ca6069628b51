//! Running the `shoal` binary against a cluster directory, shared by the cluster tests.
#![allow(dead_code)]

use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Runs `shoal ARGS` with `SHOAL_CONF` pointing into `dir`, empty stdin.
pub fn shoal(dir: &Path, args: &[&str]) -> Output {
    shoal_env(dir, args, &[])
}

/// [`shoal`] with `env` added to its environment (and to that of the daemons it starts).
pub fn shoal_env(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_shoal"))
        .args(args)
        .env("SHOAL_CONF", dir.join("shoal.toml"))
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .output()
        .expect("running shoal")
}

/// Asserts success and returns stdout.
pub fn ok(out: &Output) -> String {
    assert!(
        out.status.success(),
        "shoal failed: {}\nstdout: {}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Asserts failure with `needle` in stderr.
pub fn fails_with(out: &Output, needle: &str) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "expected failure mentioning {needle:?}");
    assert!(err.contains(needle), "stderr {err:?} should mention {needle:?}");
}

/// Stops the cluster in a directory when dropped (also when a test fails half-way).
pub struct Down(pub std::path::PathBuf);

impl Drop for Down {
    fn drop(&mut self) {
        let _ = shoal(&self.0, &["down", "--dir", &self.0.display().to_string(), "--keep"]);
    }
}

/// Starts a RAM cluster of `osds` OSDs of `osd_size` each in `tmp/c` (`shoal up`) and returns its
/// directory with a guard that stops it.
pub fn up_mem(tmp: &Path, osds: u32, osd_size: &str) -> (std::path::PathBuf, Down) {
    up(tmp, osds, "mem", osd_size, &[])
}

/// Starts a cluster of `osds` disk-backed OSDs (`block` stores of `osd_size` each) without a
/// gateway in `tmp/c` (`shoal up`) and returns its directory with a guard that stops it.
pub fn up_block(tmp: &Path, osds: u32, osd_size: &str) -> (std::path::PathBuf, Down) {
    up(tmp, osds, "block", osd_size, &["--no-gateway"])
}

/// `shoal up` of `osds` OSDs on `backend` in `tmp/c`, with `extra` arguments.
fn up(tmp: &Path, osds: u32, backend: &str, osd_size: &str, extra: &[&str]) -> (std::path::PathBuf, Down) {
    let dir = tmp.join("c");
    let d = dir.display().to_string();
    let n = osds.to_string();
    let args = [&["up", "--dir", &d, "--osds", &n, "--backend", backend, "--osd-size", osd_size][..], extra].concat();
    ok(&shoal(tmp, &args));
    (dir.clone(), Down(dir))
}

/// Kills daemon `name` (`osd.2`, ...) of the cluster in `dir` with SIGKILL, using its pid file,
/// and returns once it has exited: SIGKILL is delivered asynchronously, and until the exit the
/// daemon still holds its files (a store's lock), so a restart at once could find them in use.
pub fn sigkill(dir: &Path, name: &str) {
    let pid: i32 =
        std::fs::read_to_string(dir.join(format!("{name}.pid"))).expect("pid file").trim().parse().expect("pid");
    // SAFETY: kill(2) with a pid read from the cluster's own pid file.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0, "kill {name}");
    wait_exited(pid, name, Duration::from_secs(30));
}

/// Waits until process `pid` has exited: gone, or every thread of it a zombie its parent has
/// not reaped yet. The main thread alone is not enough: under SIGKILL it can be a zombie while
/// the other threads still run and hold the process's files (its store's lock).
pub fn wait_exited(pid: i32, name: &str, timeout: Duration) {
    let deadline = Instant::now() + timeout;
    let thread_runs = |stat: &str| {
        // The state follows the command name, which is in parentheses and may hold spaces.
        stat.rsplit_once(')').is_some_and(|(_, rest)| !rest.trim_start().starts_with(['Z', 'X']))
    };
    loop {
        let Ok(threads) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return };
        let running = threads
            .flatten()
            .any(|t| std::fs::read_to_string(t.path().join("stat")).is_ok_and(|stat| thread_runs(&stat)));
        if !running {
            return;
        }
        assert!(Instant::now() < deadline, "{name} (pid {pid}) still runs {timeout:?} after SIGKILL");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Kills with SIGKILL the last acting OSD of `object`'s PG in `pool` (a size-3 pool: the primary
/// stays where it is, so the OSD's return is a single peering) and waits until the monitors mark
/// it down; returns its id.
pub fn kill_last_replica(dir: &Path, client: &shoal_client::Client, pool: &str, object: &str) -> u32 {
    let shown = json(&ok(&shoal(dir, &["osd", "map", pool, object, "--json"])));
    let acting: Vec<u32> =
        shown["acting"].as_array().expect("acting").iter().map(|o| o.as_u64().expect("id") as u32).collect();
    assert_eq!(acting.len(), 3, "{shown}");
    let away = acting[2];
    sigkill(dir, &format!("osd.{away}"));
    wait_osd(client, away, false, Duration::from_secs(30));
    away
}

/// A self-signed TLS identity for `localhost` and 127.0.0.1, made with openssl in `dir`:
/// (certificate, key), PEM. Clients trust it by taking the certificate as their CA.
pub fn tls_identity(dir: &Path) -> (std::path::PathBuf, std::path::PathBuf) {
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    let made = Command::new("openssl")
        .args(["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2"])
        .args(["-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1", "-keyout"])
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .expect("running openssl");
    assert!(made.status.success(), "openssl: {}", String::from_utf8_lossy(&made.stderr));
    (cert, key)
}

/// A tokio runtime and a client connected as `client.admin` to the cluster in `dir`, for tests
/// that drive objects directly rather than through the CLI.
pub fn admin_client(dir: &Path) -> (tokio::runtime::Runtime, shoal_client::Client) {
    let cfg = shoal_client::ClusterConfig::from_conf_file(&dir.join("shoal.toml"), "client.admin").expect("conf");
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("rt");
    let client = rt.block_on(shoal_client::Client::connect(cfg)).expect("connect");
    (rt, client)
}

/// Starts a daemon of the cluster in `dir` as `shoal up` does (its own process group, output
/// appended to its log, its pid file rewritten), with `env` added to its environment.
pub fn start_daemon(dir: &Path, name: &str, args: &[String], env: &[(&str, &str)]) -> Child {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join(format!("{name}.log")))
        .expect("open daemon log");
    let child = {
        use std::os::unix::process::CommandExt;
        Command::new(env!("CARGO_BIN_EXE_shoal"))
            .args(args)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .process_group(0)
            .spawn()
            .expect("start daemon")
    };
    std::fs::write(dir.join(format!("{name}.pid")), format!("{}\n", child.id())).expect("pid file");
    child
}

/// Starts OSD `id` of the cluster in `dir` on a `block` store of `size` (e.g. "256M").
pub fn start_block_osd(dir: &Path, id: u32, size: &str, env: &[(&str, &str)]) -> Child {
    let conf = dir.join("shoal.toml").display().to_string();
    let args: Vec<String> = ["osd", "run", "--conf", &conf, "--id", &id.to_string(), "--host", &format!("host-{id}")]
        .into_iter()
        .map(String::from)
        .chain(["--backend", "block", "--size", size].map(String::from))
        .collect();
    start_daemon(dir, &format!("osd.{id}"), &args, env)
}

pub fn json(out: &str) -> serde_json::Value {
    serde_json::from_str(out).unwrap_or_else(|e| panic!("not JSON ({e}): {out}"))
}

/// Waits until the map shows `osd` in the state `up`.
pub fn wait_osd(client: &shoal_client::Client, osd: u32, up: bool, timeout: Duration) {
    let deadline = Instant::now() + timeout;
    while client.mon().map().osds[&shoal_map::OsdId(osd)].up != up {
        assert!(Instant::now() < deadline, "osd.{osd} not marked {} in {timeout:?}", if up { "up" } else { "down" });
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Waits until every PG is active+clean with nothing degraded, misplaced, unfound or stray, and
/// `osds` OSDs are up.
pub fn wait_clean(dir: &Path, osds: u32, timeout: Duration) -> serde_json::Value {
    let deadline = Instant::now() + timeout;
    loop {
        let status = json(&ok(&shoal(dir, &["status", "--json"])));
        let total = status["pgs"]["count"].as_u64().expect("pg count");
        let clean = status["pgs"]["by_state"]["active+clean"].as_u64().unwrap_or(0);
        let r = &status["recovery"];
        if clean == total
            && r["degraded_objects"] == 0
            && r["misplaced_objects"] == 0
            && r["unfound_objects"] == 0
            && r["stray_pgs"] == 0
            && status["osds"]["up"] == osds
        {
            return status;
        }
        assert!(Instant::now() < deadline, "the cluster did not become clean in {timeout:?}: {status}");
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// Checks OSD `osd`'s store of the stopped cluster in `dir` with `shoal store fsck` (no error
/// allowed) and opens it for the test to read.
pub fn fsck_and_open_store(dir: &Path, osd: u32) -> shoal_store::Store {
    let store_dir = dir.join(format!("osd.{osd}"));
    let fsck = json(&ok(&shoal(dir, &["store", "fsck", &store_dir.display().to_string(), "--json"])));
    assert_eq!(fsck["errors"].as_array().map(Vec::len), Some(0), "osd.{osd}: {fsck}");
    shoal_store::open(&store_dir).expect("open store")
}

/// The name of the PG collection holding `object` in an offline `store` (found by looking, since
/// no map says it without the cluster).
pub fn pg_collection_holding(store: &shoal_store::Store, object: &str) -> String {
    let colls = store.list_collections().expect("collections");
    colls
        .into_iter()
        .find(|c| c.starts_with("pg.") && store.stat(c, object).is_ok())
        .unwrap_or_else(|| panic!("no PG collection of this store holds {object}"))
}
