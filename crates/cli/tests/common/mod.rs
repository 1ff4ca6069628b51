//! Running the `shoal` binary against a cluster directory, shared by the cluster tests.
#![allow(dead_code)]

use std::path::Path;
use std::process::{Command, Output, Stdio};

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
    let dir = tmp.join("c");
    let d = dir.display().to_string();
    let n = osds.to_string();
    ok(&shoal(tmp, &["up", "--dir", &d, "--osds", &n, "--backend", "mem", "--osd-size", osd_size]));
    (dir.clone(), Down(dir))
}

/// Kills daemon `name` (`osd.2`, ...) of the cluster in `dir` with SIGKILL, using its pid file.
pub fn sigkill(dir: &Path, name: &str) {
    let pid: i32 =
        std::fs::read_to_string(dir.join(format!("{name}.pid"))).expect("pid file").trim().parse().expect("pid");
    // SAFETY: kill(2) with a pid read from the cluster's own pid file.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0, "kill {name}");
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
