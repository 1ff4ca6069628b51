//! The S3 gateway on real processes: a RAM cluster and its gateway from `shoal up`, driven by
//! boto3 at its defaults (`tests/s3/boto3_basic.py`), and the S3 user commands.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{fails_with, ok, shoal, up_mem};

/// A Python interpreter that can import boto3: the one on PATH if it can, else a virtual
/// environment made under the target directory (PyPI is reachable from CI) on first use.
fn python_with_boto3() -> PathBuf {
    let can_import =
        |python: &Path| Command::new(python).args(["-c", "import boto3"]).output().is_ok_and(|o| o.status.success());
    let system = PathBuf::from("python3");
    if can_import(&system) {
        return system;
    }
    let venv = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("s3-venv");
    let python = venv.join("bin/python3");
    if !can_import(&python) {
        let made = Command::new("python3").args(["-m", "venv"]).arg(&venv).status();
        assert!(made.is_ok_and(|s| s.success()), "python3 -m venv failed: install python3 and python3-venv");
        let pip = Command::new(&python).args(["-m", "pip", "install", "--quiet", "boto3"]).status();
        assert!(pip.is_ok_and(|s| s.success()), "pip could not install boto3 into {}", venv.display());
    }
    python
}

/// An `aws` command (aws-cli): the one on PATH, else one installed into the test's virtual
/// environment.
fn aws_cli() -> PathBuf {
    let works = |aws: &Path| Command::new(aws).arg("--version").output().is_ok_and(|o| o.status.success());
    let system = PathBuf::from("aws");
    if works(&system) {
        return system;
    }
    let python = python_with_boto3();
    let aws = python.parent().map(|bin| bin.join("aws")).unwrap_or_default();
    if !works(&aws) {
        let pip = Command::new(&python).args(["-m", "pip", "install", "--quiet", "awscli"]).status();
        assert!(pip.is_ok_and(|s| s.success()), "pip could not install awscli next to {}", python.display());
    }
    aws
}

/// Seconds in the lifecycle day of the gateway `up_with_gateway` starts, so that lifecycle
/// rules act within a test.
const LIFECYCLE_DAY_S: &str = "2";

/// The gateway part of `shoal up --json`, read back from a running cluster's files.
fn up_with_gateway(tmp: &Path) -> (PathBuf, common::Down, serde_json::Value) {
    let dir = tmp.join("c");
    let d = dir.display().to_string();
    let args = ["up", "--dir", &d, "--osds", "3", "--backend", "mem", "--osd-size", "1G", "--json"];
    let out = ok(&common::shoal_env(tmp, &args, &[("SHOAL_LIFECYCLE_DAY_S", LIFECYCLE_DAY_S)]));
    let report: serde_json::Value = serde_json::from_str(&out).expect("up --json is JSON");
    let gw = report["gateway"].clone();
    assert!(gw["endpoint"].as_str().is_some_and(|e| e.starts_with("http://127.0.0.1:")), "{gw}");
    assert!(gw["access_key"].as_str().is_some_and(|k| k.len() == 20), "{gw}");
    assert!(gw["secret_key"].as_str().is_some_and(|k| k.len() == 40), "{gw}");
    (dir.clone(), common::Down(dir), gw)
}

/// Runs `tests/s3/SCRIPT` with `env` (and no AWS settings of this machine's) and checks that it
/// ends with `passed`.
fn run_boto3_script(python: &Path, script: &str, env: &[(&str, &str)], passed: &str) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/s3").join(script);
    let out = Command::new(python)
        .arg(&script)
        .envs(env.iter().copied())
        .env_remove("AWS_CA_BUNDLE")
        .env_remove("AWS_PROFILE")
        .env_remove("AWS_CONFIG_FILE")
        .output()
        .expect("running python");
    assert!(
        out.status.success(),
        "{} failed:\nstdout: {}\nstderr: {}",
        script.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains(passed), "{} did not say {passed:?}", script.display());
}

#[test]
fn boto3_at_its_defaults_works_against_the_gateway_of_shoal_up() {
    let python = python_with_boto3();
    let tmp = tempfile::tempdir().unwrap();
    let (dir, _down, gw) = up_with_gateway(tmp.path());
    let owner = [
        ("S3_ENDPOINT", gw["endpoint"].as_str().unwrap()),
        ("S3_ACCESS_KEY", gw["access_key"].as_str().unwrap()),
        ("S3_SECRET_KEY", gw["secret_key"].as_str().unwrap()),
    ];
    run_boto3_script(&python, "boto3_basic.py", &owner, "boto3 checks passed");

    // ACLs, policies and anonymous requests, with a second user.
    let alt: serde_json::Value =
        serde_json::from_str(&ok(&shoal(&dir, &["s3", "user", "create", "bob", "--json"]))).unwrap();
    let mut env = owner.to_vec();
    env.extend([
        ("ALT_ACCESS_KEY", alt["access_key"].as_str().unwrap()),
        ("ALT_SECRET_KEY", alt["secret_key"].as_str().unwrap()),
        ("ALT_ID", alt["canonical_id"].as_str().unwrap()),
        ("ALT_NAME", "bob"),
    ]);
    run_boto3_script(&python, "boto3_access.py", &env, "boto3 access checks passed");
    run_boto3_script(&python, "boto3_versioning.py", &owner, "boto3 versioning checks passed");
    let mut env = owner.to_vec();
    env.push(("LIFECYCLE_DAY_S", LIFECYCLE_DAY_S));
    run_boto3_script(&python, "boto3_lifecycle.py", &env, "boto3 lifecycle checks passed");

    // The load generator against the same gateway: every request signed and answered. The
    // `--no-prefill` get reads the objects the get before it wrote.
    let bench = |more: &[&'static str]| {
        let mut args = vec![
            "s3",
            "bench",
            "--endpoint",
            gw["endpoint"].as_str().unwrap(),
            "--access-key",
            gw["access_key"].as_str().unwrap(),
            "--secret-key",
            gw["secret_key"].as_str().unwrap(),
            "--seconds",
            "1",
        ];
        args.extend_from_slice(more);
        shoal(&dir, &args)
    };
    for workload in ["put", "get", "mixed", "list", "get --no-prefill"] {
        let mut args = vec!["--concurrency", "2", "--json"];
        args.extend(workload.split(' '));
        let report: serde_json::Value = serde_json::from_str(&ok(&bench(&args))).unwrap();
        assert!(report["ops"].as_u64().unwrap() > 0, "{workload}: {report}");
        assert_eq!(report["errors"], 0, "{workload}: {report}");
        assert!(report["p99_ms"].as_f64().unwrap() >= report["p50_ms"].as_f64().unwrap(), "{report}");
        if workload == "list" {
            assert!(report["keys_per_s"].as_f64().unwrap() > 0.0, "{report}");
        }
    }
    let bad = ["s3", "bench", "--endpoint", "127.0.0.1:1", "--access-key", "a", "--secret-key", "b", "put"];
    common::fails_with(&shoal(&dir, &bad), "must start with http://");
    // Reads of objects no run wrote are errors that name the key.
    common::fails_with(&bench(&["--bucket", "never-filled", "--no-prefill", "get"]), "NoSuchKey");
    answered_before_its_body_a_request_ends_its_connection(gw["endpoint"].as_str().unwrap());
}

/// A PUT refused from its headers, its client waiting on `Expect: 100-continue`, gets
/// `Connection: close` and then the connection ends: a client must not send its next request
/// on it (botocore did, and read the refusal's status as the next answer). A request whose body
/// was read keeps its connection.
fn answered_before_its_body_a_request_ends_its_connection(endpoint: &str) {
    use std::io::{Read, Write};
    let host = endpoint.trim_start_matches("http://");
    let mut s = std::net::TcpStream::connect(host).unwrap();
    s.set_read_timeout(Some(std::time::Duration::from_secs(30))).unwrap();
    let put = format!(
        "PUT /no-such-bucket-here/k HTTP/1.1\r\nHost: {host}\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n"
    );
    s.write_all(put.as_bytes()).unwrap();
    // The whole answer, then the end of the connection (a keep-alive one would time out here).
    let mut out = Vec::new();
    s.read_to_end(&mut out).unwrap();
    let text = String::from_utf8_lossy(&out).to_ascii_lowercase();
    assert!(text.starts_with("http/1.1 404"), "{text}");
    assert!(text.contains("\r\nconnection: close\r\n"), "{text}");
    assert!(text.contains("<code>nosuchbucket</code>"), "{text}");

    // Two requests without bodies on one connection: both answered, neither closes it.
    let mut s = std::net::TcpStream::connect(host).unwrap();
    s.set_read_timeout(Some(std::time::Duration::from_secs(30))).unwrap();
    let get = format!("GET /no-such-bucket-here HTTP/1.1\r\nHost: {host}\r\n\r\n");
    s.write_all(format!("{get}{get}").as_bytes()).unwrap();
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    while String::from_utf8_lossy(&out).matches("</Error>").count() < 2 {
        let n = s.read(&mut buf).unwrap();
        assert!(n > 0, "the connection ended after {}", String::from_utf8_lossy(&out));
        out.extend_from_slice(&buf[..n]);
    }
    let text = String::from_utf8_lossy(&out).to_ascii_lowercase();
    assert_eq!(text.matches("http/1.1 404").count(), 2, "{text}");
    assert!(!text.contains("connection: close"), "{text}");
}

#[test]
fn a_gateway_serves_https_with_its_certificate_and_refuses_unusable_identity_files() {
    let python = python_with_boto3();
    let tmp = tempfile::tempdir().unwrap();
    let (dir, _down, gw) = up_with_gateway(tmp.path());
    let (cert, key) = common::tls_identity(tmp.path());
    let (c, k) = (cert.display().to_string(), key.display().to_string());

    // Unusable identities stop the start with the file named.
    let conf = dir.join("shoal.toml").display().to_string();
    let gateway = |cert: &str, key: &str| {
        shoal(
            &dir,
            &["gateway", "run", "--conf", &conf, "--listen", "127.0.0.1:0", "--tls-cert", cert, "--tls-key", key],
        )
    };
    fails_with(&gateway(&c, "/nonexistent/key.pem"), "/nonexistent/key.pem cannot be opened");
    fails_with(&gateway(&k, &k), "holds no CERTIFICATE");
    fails_with(&gateway(&c, &c), "holds no usable private key");
    let half = ["gateway", "run", "--conf", &conf, "--tls-cert", &c];
    fails_with(&shoal(&dir, &half), "--tls-key");

    let (mut tls_gw, listen) = spawn_gateway_with(&dir, None, &["--tls-cert", &c, "--tls-key", &k]);
    let alt: serde_json::Value =
        serde_json::from_str(&ok(&shoal(&dir, &["s3", "user", "create", "tess", "--json"]))).unwrap();
    let endpoint = format!("https://{listen}");
    let env = [
        ("S3_TLS_ENDPOINT", endpoint.as_str()),
        ("S3_TLS_CA", c.as_str()),
        ("S3_ENDPOINT", gw["endpoint"].as_str().unwrap()),
        ("S3_ACCESS_KEY", gw["access_key"].as_str().unwrap()),
        ("S3_SECRET_KEY", gw["secret_key"].as_str().unwrap()),
        ("ALT_ACCESS_KEY", alt["access_key"].as_str().unwrap()),
        ("ALT_SECRET_KEY", alt["secret_key"].as_str().unwrap()),
        ("ALT_NAME", "tess"),
    ];
    run_boto3_script(&python, "boto3_tls.py", &env, "boto3 TLS checks passed");
    let _ = tls_gw.kill();
    let _ = tls_gw.wait();
}

#[test]
fn aws_cli_s3cmd_and_rclone_at_their_defaults_put_list_get_and_delete() {
    for tool in ["s3cmd", "rclone"] {
        let found = Command::new(tool).arg("--version").output().is_ok_and(|o| o.status.success());
        assert!(found, "{tool} is not installed (.ci/run installs it from the distribution)");
    }
    let aws = aws_cli();
    let tmp = tempfile::tempdir().unwrap();
    let (_dir, _down, gw) = up_with_gateway(tmp.path());
    let work = tmp.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/s3/real_clients.sh");
    let out = Command::new("bash")
        .arg(&script)
        .env("S3_ENDPOINT", gw["endpoint"].as_str().unwrap())
        .env("S3_ACCESS_KEY", gw["access_key"].as_str().unwrap())
        .env("S3_SECRET_KEY", gw["secret_key"].as_str().unwrap())
        .env("AWS", &aws)
        .env("WORK", &work)
        .output()
        .expect("running bash");
    assert!(
        out.status.success(),
        "real clients failed:\nstdout: {}\nstderr: {}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("real clients passed"));
}

#[test]
fn s3_users_and_keys_are_managed_from_the_cli_with_clear_errors() {
    let tmp = tempfile::tempdir().unwrap();
    let (dir, _down) = up_mem(tmp.path(), 1, "256M");
    let created: serde_json::Value =
        serde_json::from_str(&ok(&shoal(&dir, &["s3", "user", "create", "alice", "--json"]))).unwrap();
    assert_eq!(created["user"], "alice");
    let access = created["access_key"].as_str().unwrap().to_string();
    assert_eq!(created["secret_key"].as_str().unwrap().len(), 40);
    assert_eq!(created["canonical_id"].as_str().unwrap().len(), 64);
    fails_with(&shoal(&dir, &["s3", "user", "create", "alice"]), "already exists");
    fails_with(&shoal(&dir, &["s3", "user", "create", "bad name!"]), "invalid user name");
    let key: serde_json::Value =
        serde_json::from_str(&ok(&shoal(&dir, &["s3", "key", "create", "alice", "--json"]))).unwrap();
    let second = key["access_key"].as_str().unwrap().to_string();
    let info: serde_json::Value =
        serde_json::from_str(&ok(&shoal(&dir, &["s3", "user", "info", "alice", "--json"]))).unwrap();
    assert_eq!(info["access_keys"], serde_json::json!([access, second]));
    assert!(!info.to_string().contains(key["secret_key"].as_str().unwrap()), "info never shows secrets");
    ok(&shoal(&dir, &["s3", "key", "rm", &second]));
    fails_with(&shoal(&dir, &["s3", "key", "rm", &second]), "does not exist");
    fails_with(&shoal(&dir, &["s3", "key", "create", "bob"]), "does not exist");
    let users: serde_json::Value = serde_json::from_str(&ok(&shoal(&dir, &["s3", "user", "ls", "--json"]))).unwrap();
    assert_eq!(
        users.as_array().unwrap().iter().map(|u| u["user"].as_str().unwrap()).collect::<Vec<_>>(),
        ["admin", "alice"]
    );
    ok(&shoal(&dir, &["s3", "user", "rm", "alice"]));
    fails_with(&shoal(&dir, &["s3", "user", "info", "alice"]), "does not exist");
}

/// One signed S3 request over a fresh connection (`Connection: close`); returns the status, the
/// response head (lower-case) and its body.
fn s3_request(
    endpoint: &str,
    keys: (&str, &str),
    method: &str,
    path: &str,
    query: &str,
    body: &[u8],
) -> (u16, String, Vec<u8>) {
    s3_request_with(endpoint, keys, method, path, query, body, &[])
}

/// [`s3_request`] with `extra` headers (not signed).
fn s3_request_with(
    endpoint: &str,
    keys: (&str, &str),
    method: &str,
    path: &str,
    query: &str,
    body: &[u8],
    extra: &[(&str, &str)],
) -> (u16, String, Vec<u8>) {
    use std::io::{Read, Write};
    let host = endpoint.trim_start_matches("http://");
    let mut extra = extra.to_vec();
    extra.push(("connection", "close"));
    let req = signed_head(endpoint, keys, method, path, query, body.len(), &extra);
    // A gateway that crashed (a crash test's) refuses the connection: status 0.
    let Ok(mut s) = std::net::TcpStream::connect(host) else { return (0, String::new(), Vec::new()) };
    if s.write_all(req.as_bytes()).is_err() {
        return (0, String::new(), Vec::new());
    }
    // A gateway may answer before it has read the whole body (a refusal) and close the
    // connection: the answer is read even when sending the rest failed. A gateway that crashes
    // mid-request closes the connection without one: status 0.
    let _ = s.write_all(body);
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    if out.windows(4).all(|w| w != b"\r\n\r\n") {
        return (0, String::new(), Vec::new());
    }
    let split = out.windows(4).position(|w| w == b"\r\n\r\n").expect("a response head");
    let head = String::from_utf8_lossy(&out[..split]).to_ascii_lowercase();
    let status = head.split(' ').nth(1).and_then(|s| s.parse().ok()).expect("a status");
    (status, head, out[split + 4..].to_vec())
}

/// The head of a signed S3 request (unsigned payload) announcing a body of `body_bytes`, with
/// `extra` headers (not signed).
fn signed_head(
    endpoint: &str,
    keys: (&str, &str),
    method: &str,
    path: &str,
    query: &str,
    body_bytes: usize,
    extra: &[(&str, &str)],
) -> String {
    let host = endpoint.trim_start_matches("http://");
    let signer = shoal_gateway::loadgen::sigv4::Signer { access: keys.0, secret: keys.1, region: "us-east-1" };
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
    let headers = shoal_gateway::loadgen::sigv4::sign(method, host, path, query, &signer, now);
    let target = if query.is_empty() { path.to_string() } else { format!("{path}?{query}") };
    let mut req = format!("{method} {target} HTTP/1.1\r\nhost: {host}\r\ncontent-length: {body_bytes}\r\n");
    for (n, v) in headers {
        req.push_str(&format!("{n}: {v}\r\n"));
    }
    for (n, v) in extra {
        req.push_str(&format!("{n}: {v}\r\n"));
    }
    req.push_str("\r\n");
    req
}

/// A gateway of its own on the cluster in `dir`, with a short lease and GC delay so that the
/// collector acts within the test; `crash` sets its crash point (`POINT:KEY`).
fn spawn_gateway(dir: &Path, crash: Option<&str>) -> (Gateway, String) {
    let (child, listen) = spawn_gateway_with(dir, crash, &[]);
    (child, format!("http://{listen}"))
}

/// A gateway process a test started, killed when the test ends however it ends (a test that
/// panics would otherwise leave it running against a cluster directory that is gone).
struct Gateway(std::process::Child);

impl std::ops::Deref for Gateway {
    type Target = std::process::Child;
    fn deref(&self) -> &std::process::Child {
        &self.0
    }
}

impl std::ops::DerefMut for Gateway {
    fn deref_mut(&mut self) -> &mut std::process::Child {
        &mut self.0
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A gateway as `spawn_gateway` starts it, with `extra` arguments; returns its address.
fn spawn_gateway_with(dir: &Path, crash: Option<&str>, extra: &[&str]) -> (Gateway, String) {
    spawn_gateway_full(dir, crash, extra, &[])
}

/// A gateway as `spawn_gateway` starts it, with `extra` arguments and `env` set; returns its
/// address.
fn spawn_gateway_full(dir: &Path, crash: Option<&str>, extra: &[&str], env: &[(&str, &str)]) -> (Gateway, String) {
    let port = shoal_net::ports::unused_loopback_port().unwrap().port();
    let listen = format!("127.0.0.1:{port}");
    let conf = dir.join("shoal.toml").display().to_string();
    let log = std::fs::File::create(dir.join(format!("gw-{port}.log"))).unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_shoal"));
    cmd.args(["gateway", "run", "--conf", &conf, "--name", "client.gateway", "--listen", &listen])
        .args(["--pool-size", "1"])
        .args(if extra.contains(&"--gc-delay-s") { &[][..] } else { &["--gc-delay-s", "1"][..] })
        .args(if extra.contains(&"--lease-s") { &[][..] } else { &["--lease-s", "2"][..] })
        .args(extra)
        .stdin(std::process::Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log);
    if let Some(c) = crash {
        cmd.env(shoal_gateway::crashpoint::ENV, c);
    }
    cmd.envs(env.iter().copied());
    let child = Gateway(cmd.spawn().unwrap());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while std::net::TcpStream::connect(&listen).is_err() {
        assert!(std::time::Instant::now() < deadline, "the gateway did not listen on {listen}");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    (child, listen)
}

/// Objects of a pool, as `shoal obj ls` prints them.
fn pool_objects(dir: &Path, pool: &str) -> Vec<String> {
    let mut v: Vec<String> = ok(&shoal(dir, &["obj", "ls", "-p", pool])).lines().map(str::to_string).collect();
    v.sort();
    v
}

/// Starts a multipart upload of `path`; returns its id.
fn start_upload(endpoint: &str, keys: (&str, &str), path: &str) -> String {
    let (status, head, body) = s3_request(endpoint, keys, "POST", path, "uploads=", b"");
    assert_eq!(status, 200, "{head}");
    let body = String::from_utf8_lossy(&body);
    let id = body.split("<UploadId>").nth(1).and_then(|r| r.split("</UploadId>").next());
    id.unwrap_or_else(|| panic!("no upload id in {body}")).to_string()
}

/// Uploads part `n`; returns its ETag (with quotes).
fn upload_part(endpoint: &str, keys: (&str, &str), path: &str, upload: &str, n: u32, data: &[u8]) -> String {
    let query = format!("partNumber={n}&uploadId={upload}");
    let (status, head, _) = s3_request(endpoint, keys, "PUT", path, &query, data);
    assert_eq!(status, 200, "{head}");
    let etag = head.lines().find_map(|l| l.strip_prefix("etag: "));
    etag.unwrap_or_else(|| panic!("no etag in {head}")).trim().to_string()
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect()
}

#[test]
fn a_gateway_killed_at_any_point_of_a_write_leaves_no_half_object_and_no_leak() {
    const MIB: usize = 1 << 20;
    let tmp = tempfile::tempdir().unwrap();
    // The gateway of `shoal up` has the default lease; this test runs its own.
    let (dir, _down, keys) = up_without_gateway(tmp.path());
    let keys = (keys.0.as_str(), keys.1.as_str());

    let (mut gw, ep) = spawn_gateway(&dir, Some("after-head:halfway"));
    assert_eq!(s3_request(&ep, keys, "PUT", "/bkt", "", b"").0, 200);
    // An overwrite and a delete leave GC records for the replaced tails.
    assert_eq!(s3_request(&ep, keys, "PUT", "/bkt/kept", "", &pattern(9 * MIB, 1)).0, 200);
    let kept = pattern(5 * MIB, 2);
    assert_eq!(s3_request(&ep, keys, "PUT", "/bkt/kept", "", &kept).0, 200);
    assert_eq!(s3_request(&ep, keys, "PUT", "/bkt/gone", "", &pattern(5 * MIB, 3)).0, 200);
    assert_eq!(s3_request(&ep, keys, "DELETE", "/bkt/gone", "", b"").0, 204);
    // Crash after the head, before the index knows: the head decides, so the object appears.
    let halfway = pattern(6 * MIB, 4);
    assert_eq!(s3_request(&ep, keys, "PUT", "/bkt/halfway", "", &halfway).0, 0, "the gateway crashes");
    assert!(!gw.wait().unwrap().success());

    // A multipart completion that crashes after its head: the head decides here too; the part
    // uploaded but not listed in the completion is collected.
    let (mut gw, ep) = spawn_gateway(&dir, Some("after-head:mp"));
    let upload = start_upload(&ep, keys, "/bkt/mp");
    let (p1, p2) = (pattern(5 * MIB, 7), pattern(MIB, 8));
    let e1 = upload_part(&ep, keys, "/bkt/mp", &upload, 1, &p1);
    let e2 = upload_part(&ep, keys, "/bkt/mp", &upload, 2, &p2);
    upload_part(&ep, keys, "/bkt/mp", &upload, 3, &pattern(MIB, 9));
    let xml = format!(
        "<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>{e1}</ETag></Part><Part><PartNumber>2</PartNumber><ETag>{e2}</ETag></Part></CompleteMultipartUpload>"
    );
    let query = format!("uploadId={upload}");
    assert_eq!(s3_request(&ep, keys, "POST", "/bkt/mp", &query, xml.as_bytes()).0, 0, "the gateway crashes");
    assert!(!gw.wait().unwrap().success());

    // Crash after the tails, before the head: nothing appears, the tails are collected.
    let (mut gw, ep) = spawn_gateway(&dir, Some("after-tails:tailsonly"));
    assert_eq!(s3_request(&ep, keys, "PUT", "/bkt/tailsonly", "", &pattern(13 * MIB, 5)).0, 0, "the gateway crashes");
    assert!(!gw.wait().unwrap().success());

    // SIGKILL while the body streams: 9 MiB of a 12 MiB body sent, its first tail written.
    let (mut gw, ep) = spawn_gateway(&dir, None);
    let host = ep.trim_start_matches("http://").to_string();
    let signer = shoal_gateway::loadgen::sigv4::Signer { access: keys.0, secret: keys.1, region: "us-east-1" };
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
    let mut req = format!("PUT /bkt/ghost HTTP/1.1\r\nhost: {host}\r\ncontent-length: {}\r\n", 12 * MIB);
    for (n, v) in shoal_gateway::loadgen::sigv4::sign("PUT", &host, "/bkt/ghost", "", &signer, now) {
        req.push_str(&format!("{n}: {v}\r\n"));
    }
    req.push_str("\r\n");
    let before = pool_objects(&dir, ".gw.data");
    let mut s = std::net::TcpStream::connect(&host).unwrap();
    std::io::Write::write_all(&mut s, req.as_bytes()).unwrap();
    std::io::Write::write_all(&mut s, &pattern(9 * MIB, 6)).unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !pool_objects(&dir, ".gw.data")
        .iter()
        .any(|o| o.starts_with("t.") && o.ends_with(".1") && !before.contains(o))
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the streaming write's first tail never landed: {:?}; gateway log: {}",
            pool_objects(&dir, ".gw.data"),
            std::fs::read_to_string(dir.join(format!("gw-{}.log", host.rsplit(':').next().unwrap())))
                .unwrap_or_default()
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    gw.kill().unwrap();
    gw.wait().unwrap();
    drop(s);

    // A fresh gateway: its collector decides every interrupted write from its head after the
    // lease, and deletes replaced and orphaned tails after the delay.
    let (mut gw, ep) = spawn_gateway(&dir, None);
    let expect_left = |objs: &[String]| {
        let heads = objs.iter().filter(|o| o.starts_with("h.")).count();
        let tails = objs.iter().filter(|o| o.starts_with("t.")).count();
        let manifests = objs.iter().filter(|o| o.starts_with("M.")).count();
        // kept and halfway: a head and one tail each; mp: a head, a manifest, and the chunks of
        // its two parts (two of 5 MiB, one of 1 MiB).
        heads == 3 && tails == 5 && manifests == 1 && objs.len() == 9
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let objs = pool_objects(&dir, ".gw.data");
        let (_, _, listing) = s3_request(&ep, keys, "GET", "/bkt", "list-type=2", b"");
        let listing = String::from_utf8_lossy(&listing).into_owned();
        if expect_left(&objs) && listing.contains("<Key>halfway</Key>") && listing.contains("<Key>mp</Key>") {
            assert!(listing.contains("<Key>kept</Key>"), "{listing}");
            for gone in ["ghost", "tailsonly", "gone"] {
                assert!(!listing.contains(&format!("<Key>{gone}</Key>")), "{listing}");
            }
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the collector left {objs:?}; listing {listing}");
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    let mp = [p1.clone(), p2.clone()].concat();
    for (key, want) in [("halfway", &halfway), ("kept", &kept), ("mp", &mp)] {
        let (status, head, body) = s3_request(&ep, keys, "GET", &format!("/bkt/{key}"), "", b"");
        assert_eq!(status, 200, "{key}: {head}");
        assert_eq!(&body, want, "{key} reads back whole");
    }
    for key in ["ghost", "tailsonly", "gone"] {
        assert_eq!(s3_request(&ep, keys, "GET", &format!("/bkt/{key}"), "", b"").0, 404, "{key}");
    }

    // Deleting everything and the bucket leaves nothing in the gateway's data and index pools
    // once the GC delay has passed; an upload still open when the bucket goes is aborted.
    let open = start_upload(&ep, keys, "/bkt/open");
    upload_part(&ep, keys, "/bkt/open", &open, 1, &pattern(MIB, 10));
    for key in ["halfway", "kept", "mp"] {
        assert_eq!(s3_request(&ep, keys, "DELETE", &format!("/bkt/{key}"), "", b"").0, 204);
    }
    assert_eq!(s3_request(&ep, keys, "DELETE", "/bkt", "", b"").0, 204);
    assert_eq!(s3_request(&ep, keys, "PUT", "/bkt/late", "", b"x").0, 404, "a deleted bucket takes no writes");
    wait_gateway_pools_empty(&dir);
    gw.kill().unwrap();
    gw.wait().unwrap();
}

/// Waits up to 60 s for the gateway's data and index pools to hold nothing (every object and
/// bucket deleted, the collector's delay passed); fails naming what is left.
fn wait_gateway_pools_empty(dir: &Path) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let (data, index) = (pool_objects(dir, ".gw.data"), pool_objects(dir, ".gw.index"));
        if data.is_empty() && index.is_empty() {
            return;
        }
        assert!(std::time::Instant::now() < deadline, "left behind: data {data:?}, index {index:?}");
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}

/// The version ids in a ListObjectVersions answer, in order.
fn version_ids(listing: &str) -> Vec<String> {
    listing.split("<VersionId>").skip(1).filter_map(|r| r.split("</VersionId>").next()).map(str::to_string).collect()
}

#[test]
fn a_versioned_write_killed_mid_way_is_decided_by_its_version_object_and_removed_versions_are_collected() {
    const MIB: usize = 1 << 20;
    let tmp = tempfile::tempdir().unwrap();
    let (dir, _down, keys) = up_without_gateway(tmp.path());
    let keys = (keys.0.as_str(), keys.1.as_str());

    // Two versions of one key, then a write that dies after its version object is written.
    let (mut gw, ep) = spawn_gateway(&dir, Some("after-head:vhalf"));
    assert_eq!(s3_request(&ep, keys, "PUT", "/vbk", "", b"").0, 200);
    let enable = b"<VersioningConfiguration><Status>Enabled</Status></VersioningConfiguration>";
    assert_eq!(s3_request(&ep, keys, "PUT", "/vbk", "versioning=", enable).0, 200);
    let (old, new) = (pattern(5 * MIB, 1), pattern(MIB, 2));
    assert_eq!(s3_request(&ep, keys, "PUT", "/vbk/k", "", &old).0, 200);
    assert_eq!(s3_request(&ep, keys, "PUT", "/vbk/k", "", &new).0, 200);
    let vhalf = pattern(6 * MIB, 3);
    assert_eq!(s3_request(&ep, keys, "PUT", "/vbk/vhalf", "", &vhalf).0, 0, "the gateway crashes");
    assert!(!gw.wait().unwrap().success());
    // A write that dies after its tails, before its version object: nothing appears.
    let (mut gw, ep) = spawn_gateway(&dir, Some("after-tails:vtails"));
    assert_eq!(s3_request(&ep, keys, "PUT", "/vbk/vtails", "", &pattern(9 * MIB, 4)).0, 0, "the gateway crashes");
    assert!(!gw.wait().unwrap().success());

    // A fresh gateway's collector records the first as the key's newest version and collects the
    // second's tails: left are three version objects (k twice, vhalf) and their tails (k's old
    // version and vhalf have one each).
    let (mut gw, ep) = spawn_gateway(&dir, None);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let objs = pool_objects(&dir, ".gw.data");
        let (_, _, listing) = s3_request(&ep, keys, "GET", "/vbk", "versions=", b"");
        let listing = String::from_utf8_lossy(&listing).into_owned();
        let versions = objs.iter().filter(|o| o.starts_with("v.")).count();
        let tails = objs.iter().filter(|o| o.starts_with("t.")).count();
        if listing.contains("<Key>vhalf</Key>") && versions == 3 && tails == 2 && objs.len() == 5 {
            assert!(!listing.contains("<Key>vtails</Key>"), "{listing}");
            assert_eq!(version_ids(&listing).len(), 3, "{listing}");
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the collector left {objs:?}; listing {listing}");
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    let (status, _, body) = s3_request(&ep, keys, "GET", "/vbk/vhalf", "", b"");
    assert_eq!((status, body == vhalf), (200, true), "the recorded version reads back whole");
    let (_, _, listing) = s3_request(&ep, keys, "GET", "/vbk", "prefix=k&versions=", b"");
    let ids = version_ids(&String::from_utf8_lossy(&listing));
    assert_eq!(ids.len(), 2);
    let (status, _, body) = s3_request(&ep, keys, "GET", "/vbk/k", &format!("versionId={}", ids[1]), b"");
    assert_eq!((status, body == old), (200, true), "the older version reads back whole");

    // A delete marker, then every version and marker removed by id, then the bucket: nothing is
    // left in the data and index pools once the GC delay has passed.
    assert_eq!(s3_request(&ep, keys, "DELETE", "/vbk/k", "", b"").0, 204);
    assert_eq!(s3_request(&ep, keys, "DELETE", "/vbk", "", b"").0, 409, "versions keep the bucket");
    let (_, _, listing) = s3_request(&ep, keys, "GET", "/vbk", "versions=", b"");
    let listing = String::from_utf8_lossy(&listing).into_owned();
    for entry in listing.split("<Key>").skip(1) {
        let key = entry.split("</Key>").next().unwrap();
        let id = version_ids(entry).into_iter().next().unwrap();
        let (status, head, _) =
            s3_request(&ep, keys, "DELETE", &format!("/vbk/{key}"), &format!("versionId={id}"), b"");
        assert_eq!(status, 204, "{key} {id}: {head}");
    }
    assert_eq!(s3_request(&ep, keys, "DELETE", "/vbk", "", b"").0, 204);
    wait_gateway_pools_empty(&dir);
    gw.kill().unwrap();
    gw.wait().unwrap();
}

/// A one-OSD RAM cluster whose `shoal up` gateway is stopped (tests run their own); returns its
/// directory, its stopper and the admin's keys.
fn up_without_gateway(tmp: &Path) -> (PathBuf, common::Down, (String, String)) {
    up_without_gateway_sized(tmp, "1G")
}

/// [`up_without_gateway`] with an OSD of `osd_size` (`shoal up --osd-size`).
fn up_without_gateway_sized(tmp: &Path, osd_size: &str) -> (PathBuf, common::Down, (String, String)) {
    let dir = tmp.join("c");
    let d = dir.display().to_string();
    let out =
        ok(&shoal(tmp, &["up", "--dir", &d, "--osds", "1", "--backend", "mem", "--osd-size", osd_size, "--json"]));
    let down = common::Down(dir.clone());
    let report: serde_json::Value = serde_json::from_str(&out).unwrap();
    let gw = &report["gateway"];
    let keys = (gw["access_key"].as_str().unwrap().to_string(), gw["secret_key"].as_str().unwrap().to_string());
    common::sigkill(&dir, "gateway");
    (dir, down, keys)
}

/// Index partitions of the gateway's buckets (objects `i.BUCKET.PARTITION`).
fn index_partitions(dir: &Path) -> Vec<String> {
    pool_objects(dir, shoal_gateway::layout::INDEX_POOL).into_iter().filter(|o| o.starts_with("i.")).collect()
}

#[test]
fn index_partitions_split_and_merge_online_under_concurrent_writes_and_listings() {
    let python = python_with_boto3();
    let tmp = tempfile::tempdir().unwrap();
    let (dir, _down, keys) = up_without_gateway(tmp.path());
    // 32 entries per partition: the writers' 720 keys split partitions many times over.
    // A lease of 30 s, not the 2 s other tests use: the lease caps how long a split or merge may
    // take before anyone gives it up, and with every test of this file sharing two cores a
    // copy can take longer than 2 s. None may be given up here.
    let extra = ["--index-split-entries", "32", "--lease-s", "30"];
    let (mut gw, listen) = spawn_gateway_with(&dir, None, &extra);
    let endpoint = format!("http://{listen}");
    let env = [("S3_ENDPOINT", endpoint.as_str()), ("S3_ACCESS_KEY", &keys.0), ("S3_SECRET_KEY", &keys.1)];
    run_boto3_script(&python, "boto3_split.py", &env, "boto3 split checks passed");
    let log = std::fs::read_to_string(dir.join(format!("gw-{}.log", listen.rsplit(':').next().unwrap()))).unwrap();
    let splits = log.matches("index partition split").count();
    assert!(splits >= 8, "only {splits} splits happened:\n{log}");
    let merges = log.matches("index partition merge").count();
    assert!(merges >= 4, "only {merges} merges happened:\n{log}");
    assert!(
        !log.contains("split failed")
            && !log.contains("reshape (split or merge) failed")
            && !log.contains("was given up")
            && !log.contains("unknown index record"),
        "{log}"
    );
    let _ = gw.kill();
    let _ = gw.wait();
}

#[test]
fn racing_writes_and_deletes_through_two_gateways_leave_every_entry_at_its_head() {
    let python = python_with_boto3();
    let tmp = tempfile::tempdir().unwrap();
    let (dir, _down, keys) = up_without_gateway(tmp.path());
    // Writes pause up to 20 ms between their steps, so that their steps interleave.
    let jitter = [(shoal_gateway::crashpoint::JITTER_ENV, "20")];
    // The first makes every index request wait behind the one on its way to its partition, so
    // its index writes race combined (decision 0042); the second waits only behind slow ones.
    let combining = [jitter[0], ("SHOAL_COMBINE_AFTER_US", "0")];
    let (_a, first) = spawn_gateway_full(&dir, None, &[], &combining);
    // The second serves every request on one thread (a current-thread runtime): both kinds of
    // runtime race here.
    let (_b, second) = spawn_gateway_full(&dir, None, &["--threads", "1"], &jitter);
    let (first, second) = (format!("http://{first}"), format!("http://{second}"));
    let env = [
        ("S3_ENDPOINT", first.as_str()),
        ("S3_ENDPOINT2", second.as_str()),
        ("S3_ACCESS_KEY", &keys.0),
        ("S3_SECRET_KEY", &keys.1),
    ];
    run_boto3_script(&python, "boto3_races.py", &env, "boto3 race checks passed");
}

#[test]
fn a_completion_that_outlives_a_later_write_and_delete_of_its_key_does_not_list_it_again() {
    let tmp = tempfile::tempdir().unwrap();
    let (dir, _down, keys) = up_without_gateway(tmp.path());
    let keys = (keys.0.as_str(), keys.1.as_str());
    // One interleaving, forced: gateway A's write of KEY pauses before its completion's swap;
    // inside that pause gateway B writes KEY and deletes it, both completed. The key had no
    // entry when A looked, and has none again when A swaps: "no entry" came back, and a guard
    // that only compares the entry would let A list a key whose head is gone. Twice: with
    // tombstones kept past the pause (long lease and GC delay: the collector passes once a
    // minute), and with the collector removing the delete's tombstone inside the pause. And a
    // third time with B only deleting: A looked at a key with nothing recorded, B removes A's
    // head and completes its delete over that same view ("no entry" installed over "no entry"),
    // which must still change what A's guard checks.
    let long: &[&str] = &["--lease-s", "3600", "--gc-delay-s", "3600"];
    let cases: [(&str, &[&str], bool); 3] =
        [("kept", long, true), ("collected", &["--lease-s", "2"], true), ("deleted", long, false)];
    for (case, extra, b_writes) in cases {
        let key = format!("{case}/k");
        let pause = format!("{}:{key}:3000", shoal_gateway::crashpoint::COMPLETE_SWAP);
        let (_a, a) = spawn_gateway_full(&dir, None, extra, &[(shoal_gateway::crashpoint::PAUSE_ENV, &pause)]);
        let (_b, b) = spawn_gateway_full(&dir, None, extra, &[]);
        let logs = [&a, &b].map(|l| dir.join(format!("gw-{}.log", l.rsplit(':').next().unwrap())));
        let (a, b) = (format!("http://{a}"), format!("http://{b}"));
        let bucket = format!("/aba-{case}");
        assert_eq!(s3_request(&b, keys, "PUT", &bucket, "", b"").0, 200);
        let path = format!("{bucket}/{key}");
        let slow = {
            let (a, path) = (a.clone(), path.clone());
            let keys = (keys.0.to_string(), keys.1.to_string());
            std::thread::spawn(move || s3_request(&a, (&keys.0, &keys.1), "PUT", &path, "", b"first").0)
        };
        // A has written its head and waits before its swap (the pause is 3 s).
        std::thread::sleep(std::time::Duration::from_millis(700));
        if b_writes {
            assert_eq!(s3_request(&b, keys, "PUT", &path, "", b"second").0, 200);
        }
        assert_eq!(s3_request(&b, keys, "DELETE", &path, "", b"").0, 204);
        assert_eq!(slow.join().unwrap(), 200, "{case}: a superseded write is still acknowledged");
        assert_eq!(s3_request(&b, keys, "HEAD", &path, "", b"").0, 404, "{case}: the delete came last");
        let (status, _, listing) = s3_request(&b, keys, "GET", &bucket, "list-type=2", b"");
        assert_eq!(status, 200);
        let listing = String::from_utf8_lossy(&listing);
        assert!(!listing.contains("<Key>"), "{case}: a deleted key is listed: {listing}");
        // The case is what it says: the delete's tombstone was removed inside the pause, or not.
        let removed = logs.iter().any(|l| {
            std::fs::read_to_string(l).unwrap().split("tombstones_removed: ").skip(1).any(|rest| !rest.starts_with('0'))
        });
        assert_eq!(removed, case == "collected", "{case}: tombstones removed by a collector: {removed}");
    }
}

#[test]
fn a_head_commit_held_past_its_writes_expiry_never_takes_effect() {
    let tmp = tempfile::tempdir().unwrap();
    let (dir, _down, keys) = up_without_gateway(tmp.path());
    let keys = (keys.0.as_str(), keys.1.as_str());
    // A lease of 4 s: a write's requests expire 2 s after its pending record (decision 0032).
    // The gateway pauses 3 s between the tails and the head of KEY, as if the cluster held the
    // head's request that long: the head must then never be written (the collector, a lease
    // later, decides the write from the head and must find it final).
    let key = "late/k";
    let pause = format!("{}:{key}:3000", shoal_gateway::crashpoint::AFTER_TAILS);
    let (_gw, ep) =
        spawn_gateway_full(&dir, None, &["--lease-s", "4"], &[(shoal_gateway::crashpoint::PAUSE_ENV, &pause)]);
    let ep = format!("http://{ep}");
    assert_eq!(s3_request(&ep, keys, "PUT", "/expiry", "", b"").0, 200);
    let path = format!("/expiry/{key}");
    for body in [&b"small"[..], &pattern(6 << 20, 3)] {
        let (status, _, answer) = s3_request(&ep, keys, "PUT", &path, "", body);
        let answer = String::from_utf8_lossy(&answer);
        assert_eq!(status, 503, "a commit past its expiry is refused as a retryable failure: {answer}");
        assert!(answer.contains("ServiceUnavailable"), "{answer}");
        assert_eq!(s3_request(&ep, keys, "HEAD", &path, "", b"").0, 404, "the late head was written");
    }
    // Other keys are written as usual, and once the collector has decided the two writes (a
    // lease after them) only they are listed.
    assert_eq!(s3_request(&ep, keys, "PUT", "/expiry/other", "", b"x").0, 200);
    std::thread::sleep(std::time::Duration::from_secs(6));
    assert_eq!(list_keys(&ep, keys, "expiry"), vec!["other".to_string()]);
    assert_eq!(s3_request(&ep, keys, "HEAD", &path, "", b"").0, 404);
}

#[test]
fn a_bucket_deletion_that_died_midway_is_decided_for_the_whole_bucket() {
    let tmp = tempfile::tempdir().unwrap();
    let (dir, _down, keys) = up_without_gateway(tmp.path());
    let keys = (keys.0.as_str(), keys.1.as_str());
    let put = |ep: &str, path: &str| s3_request(ep, keys, "PUT", path, "", b"x").0;
    // Leases of 4 s: the collector leaves a deletion alone for that long after it died.
    // No merges: emptying the bucket before deleting it must leave several partitions.
    let lease = ["--lease-s", "4", "--index-split-entries", "16", "--index-merge-entries", "0"];
    // "revived": a write lands in a partition the deletion had not reached when it died; it
    // must survive (the whole bucket lives again). "finished": nothing is written; the
    // deletion is completed.
    for bucket in ["revived", "finished"] {
        let crash = format!("{}:{bucket}", shoal_gateway::crashpoint::DELETE_PARTLY);
        let (mut gw, listen) = spawn_gateway_with(&dir, Some(&crash), &lease);
        let ep = format!("http://{listen}");
        assert_eq!(s3_request(&ep, keys, "PUT", &format!("/{bucket}"), "", b"").0, 200);
        // Splits run in the background (counted against the gateway's cached table, which
        // is refreshed every 2 s): write in rounds until two are done, so the table has at least
        // three partitions.
        let log_path = dir.join(format!("gw-{}.log", listen.rsplit(':').next().unwrap()));
        let mut written = 0;
        while std::fs::read_to_string(&log_path).unwrap().matches("index partition split").count() < 2 {
            assert!(written < 600, "no splits of {bucket}: {}", std::fs::read_to_string(&log_path).unwrap());
            for i in written..written + 30 {
                assert_eq!(put(&ep, &format!("/{bucket}/k{i:03}")), 200);
            }
            written += 30;
            std::thread::sleep(std::time::Duration::from_millis(700));
        }
        for i in 0..written {
            assert_eq!(s3_request(&ep, keys, "DELETE", &format!("/{bucket}/k{i:03}"), "", b"").0, 204);
        }
        let (status, _, _) = s3_request(&ep, keys, "DELETE", &format!("/{bucket}"), "", b"");
        assert_ne!(status, 204, "{bucket}: the gateway did not crash in the deletion");
        let _ = gw.wait();

        let (mut gw, listen) = spawn_gateway_with(&dir, None, &lease);
        let ep = format!("http://{listen}");
        if bucket == "revived" {
            // The top of the key space is in a partition still live: this write is acknowledged.
            assert_eq!(put(&ep, &format!("/{bucket}/zzz-late")), 200);
            // Once the collector decides (a lease after the deletion died), the bottom of the key
            // space takes writes again and the acknowledged key is there.
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
            while put(&ep, &format!("/{bucket}/a-low")) != 200 {
                assert!(std::time::Instant::now() < deadline, "the bucket never came back");
                std::thread::sleep(std::time::Duration::from_millis(250));
            }
            let (status, _, body) = s3_request(&ep, keys, "GET", &format!("/{bucket}"), "list-type=2", b"");
            assert_eq!(status, 200);
            let body = String::from_utf8_lossy(&body);
            let listed: Vec<&str> = body.split("<Key>").skip(1).filter_map(|r| r.split("</Key>").next()).collect();
            assert_eq!(listed, ["a-low", "zzz-late"], "{body}");
            assert_eq!(s3_request(&ep, keys, "GET", &format!("/{bucket}/zzz-late"), "", b"").0, 200);
        } else {
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
            while s3_request(&ep, keys, "HEAD", &format!("/{bucket}"), "", b"").0 != 404 {
                assert!(std::time::Instant::now() < deadline, "the deletion was never finished");
                std::thread::sleep(std::time::Duration::from_millis(250));
            }
            // The name is free again.
            assert_eq!(s3_request(&ep, keys, "PUT", &format!("/{bucket}"), "", b"").0, 200);
        }
        let _ = gw.kill();
        let _ = gw.wait();
    }
}

/// The peak resident memory of process `pid`, in KiB (`VmHWM`).
fn peak_rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

#[test]
fn browser_form_uploads_check_their_policy_and_stream_their_file() {
    let python = python_with_boto3();
    let tmp = tempfile::tempdir().unwrap();
    let (dir, _down, keys) = up_without_gateway(tmp.path());
    // An 8 MiB in-flight budget: the script's 96 MiB form upload must stream through it.
    let (mut gw, listen) = spawn_gateway_with(&dir, None, &["--inflight", "8M"]);
    let endpoint = format!("http://{listen}");
    let env = [("S3_ENDPOINT", endpoint.as_str()), ("S3_ACCESS_KEY", &keys.0), ("S3_SECRET_KEY", &keys.1)];
    run_boto3_script(&python, "boto3_post.py", &env, "boto3 POST checks passed");
    let peak_kib = peak_rss_kib(gw.id());
    assert!(peak_kib < 80 << 10, "the gateway peaked at {peak_kib} KiB: a 96 MiB form upload was held in memory");
    let _ = gw.kill();
    let _ = gw.wait();
}

/// Every key of `bucket`, through ListObjectsV2 pages of 7 (so that pages end inside
/// partitions and at their edges).
fn list_keys(ep: &str, keys: (&str, &str), bucket: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut token = String::new();
    loop {
        let query = if token.is_empty() {
            "list-type=2&max-keys=7".to_string()
        } else {
            format!("continuation-token={}&list-type=2&max-keys=7", shoal_gateway::text::uri_encode(&token))
        };
        let (status, head, body) = s3_request(ep, keys, "GET", &format!("/{bucket}"), &query, b"");
        assert_eq!(status, 200, "{head}");
        let body = String::from_utf8_lossy(&body).to_string();
        out.extend(body.split("<Key>").skip(1).filter_map(|r| r.split("</Key>").next()).map(str::to_string));
        match body.split("<NextContinuationToken>").nth(1).and_then(|r| r.split("</NextContinuationToken>").next()) {
            Some(t) => token = t.to_string(),
            None => return out,
        }
    }
}

/// The partition table of `bucket` as its record in the cluster holds it: (bucket id, partition
/// ids in key order).
fn partition_table(dir: &Path, bucket: &str) -> (u64, Vec<u32>) {
    use shoal_gateway::layout;
    let out = dir.join("record");
    let path = out.display().to_string();
    ok(&shoal(dir, &["obj", "get", "-p", layout::META_POOL, &layout::bucket_object(bucket), "-o", &path]));
    let record: layout::BucketRecord = layout::decode(&std::fs::read(&out).unwrap(), "bucket record").unwrap();
    (record.id, record.partitions.iter().map(|p| p.id).collect())
}

/// Waits until `bucket`'s index is settled: its partition objects are exactly those its table
/// names (no split or merge half done); returns how many there are.
fn settled_partitions(dir: &Path, bucket: &str, what: &str) -> usize {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let (id, table) = partition_table(dir, bucket);
        let mut named: Vec<String> = table.iter().map(|p| shoal_gateway::layout::partition_object(id, *p)).collect();
        named.sort();
        let prefix = format!("i.{id:016x}.");
        let objects: Vec<String> = index_partitions(dir).into_iter().filter(|o| o.starts_with(&prefix)).collect();
        if objects == named {
            return table.len();
        }
        assert!(std::time::Instant::now() < deadline, "{what}: partition objects {objects:?}, table {named:?}");
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}

#[test]
fn a_merge_interrupted_at_any_step_is_finished_or_given_up_and_loses_no_key() {
    let tmp = tempfile::tempdir().unwrap();
    let (dir, _down, keys) = up_without_gateway(tmp.path());
    let keys = (keys.0.as_str(), keys.1.as_str());
    // A merge given up leaves the table as it was, a finished one a partition fewer.
    for (point, fewer) in [("merge-copied", 0), ("merge-fenced", 0), ("merge-committed", 1)] {
        let bucket = point.to_string();
        // Filled (and split: 16 entries per partition) by one gateway...
        let (mut gw, listen) = spawn_gateway_with(&dir, None, &["--index-split-entries", "16"]);
        let ep = format!("http://{listen}");
        assert_eq!(s3_request(&ep, keys, "PUT", &format!("/{bucket}"), "", b"").0, 200);
        let all: Vec<String> = (0..160).map(|i| format!("k{i:03}")).collect();
        for key in &all {
            assert_eq!(s3_request(&ep, keys, "PUT", &format!("/{bucket}/{key}"), "", key.as_bytes()).0, 200, "{key}");
        }
        let before = settled_partitions(&dir, &bucket, point);
        assert!(before >= 6, "{point}: only {before} partitions after the fill");
        let _ = gw.kill();
        let _ = gw.wait();

        // ...then emptied by another until its first merge crashes it.
        let crash = format!("{point}:{bucket}");
        let (mut gw, listen) = spawn_gateway_with(&dir, Some(&crash), &["--index-split-entries", "16"]);
        let ep = format!("http://{listen}");
        let mut remaining: std::collections::BTreeSet<String> = all.iter().cloned().collect();
        let mut unknown = None;
        for i in 0..all.len() {
            let key = &all[(i * 37) % all.len()];
            match s3_request(&ep, keys, "DELETE", &format!("/{bucket}/{key}"), "", b"").0 {
                204 => {
                    remaining.remove(key);
                }
                _ => {
                    unknown = Some(key.clone());
                    break;
                }
            }
        }
        assert!(unknown.is_some(), "{point}: the gateway never crashed");
        let _ = gw.wait();

        // A fresh gateway (2 s lease: the merge's deadline) finds the merge and carries on.
        let (mut gw, listen) = spawn_gateway_with(&dir, None, &[]);
        let ep = format!("http://{listen}");
        let settle = |listed: Vec<String>| -> Vec<String> {
            listed.into_iter().filter(|k| Some(k) != unknown.as_ref()).collect()
        };
        let mut expected: Vec<String> = remaining.iter().filter(|k| Some(*k) != unknown.as_ref()).cloned().collect();
        assert_eq!(settle(list_keys(&ep, keys, &bucket)), expected, "{point}: the listing after the crash");
        // Writes on both sides of the merged ranges succeed (those to a fenced partition wait for
        // the deadline, then the merge is given up or published).
        for key in ["a-low", "k080x", "z-high"] {
            assert_eq!(s3_request(&ep, keys, "PUT", &format!("/{bucket}/{key}"), "", b"x").0, 200, "{point} {key}");
            expected.push(key.to_string());
        }
        expected.sort();
        assert_eq!(settle(list_keys(&ep, keys, &bucket)), expected, "{point}: the listing after more writes");
        for key in expected.iter().take(6) {
            let (status, _, body) = s3_request(&ep, keys, "GET", &format!("/{bucket}/{key}"), "", b"");
            assert_eq!(status, 200, "{point} {key}");
            assert!(body == key.as_bytes() || body == b"x", "{point} {key}");
        }
        let after = settled_partitions(&dir, &bucket, point);
        if fewer == 0 {
            assert_eq!(after, before, "{point}: partitions before the merge {before}, after {after}");
        } else {
            // Merges run as background tasks, several at once: another one may have committed
            // in the instant between this one's commit and the crash, and is then published
            // too (CI saw 19 partitions become 17). Every committed merge is finished; none may
            // be lost, and no key either (the listings above and below).
            assert!(
                after <= before - fewer,
                "{point}: partitions before the merge {before}, after {after} (at least {fewer} fewer)"
            );
        }
        assert_eq!(settle(list_keys(&ep, keys, &bucket)), expected, "{point}: the listing once the merge is settled");
        let _ = gw.kill();
        let _ = gw.wait();
    }
}

#[test]
fn a_split_interrupted_at_any_step_is_finished_or_given_up_and_loses_no_key() {
    let tmp = tempfile::tempdir().unwrap();
    let (dir, _down, keys) = up_without_gateway(tmp.path());
    let keys = (keys.0.as_str(), keys.1.as_str());
    let list_all = |ep: &str, bucket: &str| list_keys(ep, keys, bucket);
    // Partitions of the bucket when all is done: a split given up leaves one, a finished one two.
    for (point, partitions) in [("split-copied", 1), ("split-fenced", 1), ("split-committed", 2)] {
        let bucket = point.to_string();
        let base = index_partitions(&dir);
        let crash = format!("{point}:{bucket}");
        let (mut gw, listen) = spawn_gateway_with(&dir, Some(&crash), &["--index-split-entries", "16"]);
        let ep = format!("http://{listen}");
        assert_eq!(s3_request(&ep, keys, "PUT", &format!("/{bucket}"), "", b"").0, 200);
        // Keys are acknowledged until the split (in the background) crashes the gateway.
        let mut acknowledged = Vec::new();
        let mut unknown = None;
        for i in 0..200 {
            let key = format!("k{:03}", (i * 37) % 200);
            match s3_request(&ep, keys, "PUT", &format!("/{bucket}/{key}"), "", key.as_bytes()).0 {
                200 => acknowledged.push(key),
                _ => {
                    unknown = Some(key);
                    break;
                }
            }
        }
        assert!(unknown.is_some(), "{point}: the gateway never crashed");
        let _ = gw.wait();

        // A fresh gateway (2 s lease: the split's deadline; no further splits) finds the split
        // and carries on.
        let (mut gw, listen) = spawn_gateway_with(&dir, None, &[]);
        let ep = format!("http://{listen}");
        let mut listed = list_all(&ep, &bucket);
        listed.retain(|k| Some(k) != unknown.as_ref());
        acknowledged.sort();
        assert_eq!(listed, acknowledged, "{point}: the listing after the crash");
        // Writes on both sides of any cut succeed (those above a fenced cut wait for the
        // deadline, then the split is given up or published).
        for key in ["a-low", "k100x", "z-high"] {
            assert_eq!(s3_request(&ep, keys, "PUT", &format!("/{bucket}/{key}"), "", b"x").0, 200, "{point} {key}");
            acknowledged.push(key.to_string());
        }
        acknowledged.sort();
        let mut listed = list_all(&ep, &bucket);
        listed.retain(|k| Some(k) != unknown.as_ref());
        assert_eq!(listed, acknowledged, "{point}: the listing after more writes");
        for key in &acknowledged[..5] {
            let (status, _, body) = s3_request(&ep, keys, "GET", &format!("/{bucket}/{key}"), "", b"");
            assert_eq!(status, 200, "{point} {key}");
            assert!(body == key.as_bytes() || body == b"x", "{point} {key}");
        }
        // The collector gives up a split stuck before its fence and removes its copy.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        loop {
            let mine: Vec<String> = index_partitions(&dir).into_iter().filter(|o| !base.contains(o)).collect();
            if mine.len() == partitions {
                break;
            }
            assert!(std::time::Instant::now() < deadline, "{point}: partitions {mine:?}, expected {partitions}");
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
        let mut listed = list_all(&ep, &bucket);
        listed.retain(|k| Some(k) != unknown.as_ref());
        assert_eq!(listed, acknowledged, "{point}: the listing once the split is settled");
        let _ = gw.kill();
        let _ = gw.wait();
    }
}

/// `shoal status --json` problems of the cluster in `dir`.
fn status_problems(dir: &Path) -> (String, Vec<String>) {
    let s: serde_json::Value = serde_json::from_str(&ok(&shoal(dir, &["status", "--json"]))).expect("status json");
    let problems = s["problems"].as_array().into_iter().flatten().filter_map(|p| p.as_str().map(String::from));
    (s["health"].as_str().unwrap_or_default().to_string(), problems.collect())
}

#[test]
fn a_full_cluster_takes_deletes_through_the_gateway_and_gives_their_space_back() {
    const MIB: usize = 1 << 20;
    let tmp = tempfile::tempdir().unwrap();
    let (dir, _down, keys) = up_without_gateway_sized(tmp.path(), "128M");
    let keys = (keys.0.as_str(), keys.1.as_str());
    let (_gw, ep) = spawn_gateway(&dir, None);
    assert_eq!(s3_request(&ep, keys, "PUT", "/full", "", b"").0, 200);
    // An upload left open with two parts of 5 MiB: aborted once the cluster is full.
    let upload = start_upload(&ep, keys, "/full/mp");
    upload_part(&ep, keys, "/full/mp", &upload, 1, &pattern(5 * MIB, 0xa1));
    upload_part(&ep, keys, "/full/mp", &upload, 2, &pattern(5 * MIB, 0xa2));

    // Paced 5 MiB PUTs (a head and a tail each) until one is refused: by the monitors' full flag
    // (95% used) or, if the store filled up before the OSD's next report, by the store itself.
    // Either way nothing acknowledged may be lost, and S3 names the condition.
    let mut stored: Vec<(usize, Vec<u8>)> = Vec::new();
    let mut refused = None;
    for i in 0..60 {
        let body = pattern(5 * MIB, i as u8);
        let (status, head, answer) = s3_request(&ep, keys, "PUT", &format!("/full/o{i}"), "", &body);
        match status {
            200 => stored.push((i, body)),
            507 => {
                refused = Some(String::from_utf8_lossy(&answer).into_owned());
                break;
            }
            other => panic!("PUT o{i}: HTTP {other}: {head} {}", String::from_utf8_lossy(&answer)),
        }
        std::thread::sleep(std::time::Duration::from_millis(250));
    }
    let refused = refused.expect("a 128 MiB OSD took 300 MiB");
    assert!(refused.contains("<Code>InsufficientStorage</Code>"), "{refused}");
    assert!(stored.len() >= 12, "only {} objects of 5 MiB stored before the first refusal: {refused}", stored.len());

    // The OSD reports once a second; its report flags it full.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !status_problems(&dir).1.iter().any(|p| p.contains("is full")) {
        assert!(std::time::Instant::now() < deadline, "never flagged full: {:?}", status_problems(&dir));
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    let (status, _, answer) = s3_request(&ep, keys, "PUT", "/full/late", "", b"small");
    let answer = String::from_utf8_lossy(&answer);
    assert_eq!(status, 507, "a write into a full cluster: {answer}");
    assert!(answer.contains("InsufficientStorage") && answer.contains("is full"), "names the full OSD: {answer}");

    // Deleting is how a user gets out: every DELETE is taken (its index record and GC entry are
    // small writes made to free space, decision 0045), single and multi-object alike.
    let half = stored.len() / 2;
    for (i, _) in &stored[..half - 4] {
        let (status, head, answer) = s3_request(&ep, keys, "DELETE", &format!("/full/o{i}"), "", b"");
        assert_eq!(status, 204, "DELETE o{i} in a full cluster: {head} {}", String::from_utf8_lossy(&answer));
    }
    let objects: String =
        stored[half - 4..half].iter().map(|(i, _)| format!("<Object><Key>o{i}</Key></Object>")).collect();
    let delete = format!("<Delete><Quiet>true</Quiet>{objects}</Delete>");
    let md5 = {
        use md5::Digest as _;
        base64_simd::STANDARD.encode_to_string(md5::Md5::digest(delete.as_bytes()))
    };
    let (status, _, answer) =
        s3_request_with(&ep, keys, "POST", "/full", "delete=", delete.as_bytes(), &[("content-md5", &md5)]);
    let answer = String::from_utf8_lossy(&answer);
    assert_eq!(status, 200, "multi-object delete in a full cluster: {answer}");
    assert!(!answer.contains("<Error>"), "every key deleted: {answer}");

    let (status, head, _) = s3_request(&ep, keys, "DELETE", "/full/mp", &format!("uploadId={upload}"), b"");
    assert_eq!(status, 204, "aborting an upload in a full cluster: {head}");

    // What was not deleted reads back whole, and the listing holds exactly it.
    for (i, body) in &stored[half..] {
        let (status, _, got) = s3_request(&ep, keys, "GET", &format!("/full/o{i}"), "", b"");
        assert_eq!(status, 200, "GET o{i}");
        assert!(got == *body, "o{i} changed while the cluster was full");
    }
    let (_, _, listing) = s3_request(&ep, keys, "GET", "/full", "list-type=2&max-keys=1000", b"");
    let listing = String::from_utf8_lossy(&listing);
    let mut listed: Vec<String> =
        listing.split("<Key>").skip(1).filter_map(|r| r.split("</Key>").next()).map(String::from).collect();
    listed.sort();
    let mut want: Vec<String> = stored[half..].iter().map(|(i, _)| format!("o{i}")).collect();
    want.sort();
    assert_eq!(listed, want, "{listing}");

    // The space comes back (the collector removes the data), the monitors clear the flag, and
    // writes are taken again.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while status_problems(&dir).1.iter().any(|p| p.contains("is full")) {
        assert!(std::time::Instant::now() < deadline, "the flag never cleared: {:?}", status_problems(&dir));
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    let body = pattern(MIB, 0xee);
    assert_eq!(s3_request(&ep, keys, "PUT", "/full/after", "", &body).0, 200, "a write after space was freed");
    assert_eq!(s3_request(&ep, keys, "GET", "/full/after", "", b"").2, body);

    // Nothing is left of the deleted objects, the aborted upload's parts or the refused PUT once
    // the collector has passed: a head and a tail for each remaining 5 MiB object, a head for the
    // last one.
    let kept = stored.len() - half;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let objs = pool_objects(&dir, shoal_gateway::layout::DATA_POOL);
        let heads = objs.iter().filter(|o| o.starts_with("h.")).count();
        let tails = objs.iter().filter(|o| o.starts_with("t.")).count();
        if heads == kept + 1 && tails == kept && objs.len() == heads + tails {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the collector left {objs:?} for {kept} objects and one");
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}

#[test]
fn s3_writes_across_an_outage_of_two_of_three_osds_wait_and_every_acknowledged_one_reads_back() {
    // Three `block` OSDs (the gateway's pools keep three copies, min_size 2) and the gateway of
    // `shoal up`. A writer PUTs distinct 16 KiB objects one after another while two of the three
    // OSDs are killed with SIGKILL for 12 s and started again on their stores: every PG stops
    // serving meanwhile. Each PUT must be answered 200 or 503 (retry later), never another error
    // or a dropped connection, and afterwards every acknowledged object reads back whole and is
    // listed.
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("c");
    let d = dir.display().to_string();
    let out = ok(&shoal(
        tmp.path(),
        &["up", "--dir", &d, "--osds", "3", "--backend", "block", "--osd-size", "256M", "--json"],
    ));
    let down = common::Down(dir.clone());
    let report: serde_json::Value = serde_json::from_str(&out).unwrap();
    let gw = &report["gateway"];
    let ep = gw["endpoint"].as_str().unwrap().to_string();
    let keys = (gw["access_key"].as_str().unwrap().to_string(), gw["secret_key"].as_str().unwrap().to_string());
    assert_eq!(s3_request(&ep, (&keys.0, &keys.1), "PUT", "/outage", "", b"").0, 200);

    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let (ep, keys, stop) = (ep.clone(), keys.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut answers = Vec::new();
            // Bounded: at most 2,000 PUTs, however fast the gateway answers.
            for i in 0..2_000u32 {
                if stop.load(std::sync::atomic::Ordering::Acquire) {
                    break;
                }
                let body = pattern(16 << 10, (i % 251) as u8);
                let started = std::time::Instant::now();
                let (status, _, _) = s3_request(&ep, (&keys.0, &keys.1), "PUT", &format!("/outage/k{i:04}"), "", &body);
                answers.push((i, status, started.elapsed()));
            }
            answers
        })
    };
    std::thread::sleep(std::time::Duration::from_secs(2));
    common::sigkill(&dir, "osd.1");
    common::sigkill(&dir, "osd.2");
    std::thread::sleep(std::time::Duration::from_secs(12));
    let restarted = [1, 2].map(|id| common::start_block_osd(&dir, id, "256M", &[]));
    common::wait_clean(&dir, 3, std::time::Duration::from_secs(120));
    std::thread::sleep(std::time::Duration::from_secs(2));
    stop.store(true, std::sync::atomic::Ordering::Release);
    let answers = writer.join().expect("the writer");

    let bad: Vec<_> = answers.iter().filter(|(_, status, _)| ![200, 503].contains(status)).collect();
    assert!(bad.is_empty(), "PUTs answered other than 200 or 503 across the outage: {bad:?}");
    let acked: Vec<u32> = answers.iter().filter(|(_, status, _)| *status == 200).map(|(i, _, _)| *i).collect();
    // The outage was seen (a PUT waited for the cluster) and writes went on after it.
    let longest = answers.iter().map(|(_, _, took)| *took).max().unwrap_or_default();
    assert!(longest >= std::time::Duration::from_secs(5), "no PUT waited out the outage (longest {longest:?})");
    assert!(answers.last().is_some_and(|(_, status, _)| *status == 200), "{:?}", answers.last());
    for i in &acked {
        let (status, _, got) = s3_request(&ep, (&keys.0, &keys.1), "GET", &format!("/outage/k{i:04}"), "", b"");
        assert_eq!(status, 200, "k{i:04}");
        assert!(got == pattern(16 << 10, (i % 251) as u8), "k{i:04} reads back other bytes");
    }
    let (status, _, listing) = s3_request(&ep, (&keys.0, &keys.1), "GET", "/outage", "list-type=2&max-keys=1000", b"");
    assert_eq!(status, 200);
    let listing = String::from_utf8_lossy(&listing);
    let listed = listing.matches("<Key>").count();
    // The first page holds k0000..k0999 of those that exist: every acknowledged one among them.
    let missing: Vec<_> =
        acked.iter().filter(|i| **i < 1000 && !listing.contains(&format!("<Key>k{i:04}</Key>"))).collect();
    assert!(missing.is_empty(), "acknowledged objects not listed ({listed} listed): {missing:?}");
    drop(down);
    for mut osd in restarted {
        osd.wait().expect("a restarted OSD exits");
    }
}

/// Reads from `s` until the gateway closes the connection (or 20 s pass, a failure); returns what
/// was read and how long the close took from `since`.
fn read_until_closed(s: &mut std::net::TcpStream, since: std::time::Instant) -> (Vec<u8>, std::time::Duration) {
    use std::io::Read;
    s.set_read_timeout(Some(std::time::Duration::from_secs(20))).unwrap();
    let mut out = Vec::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return (out, since.elapsed()),
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return (out, since.elapsed()),
            Err(e) => panic!("the gateway kept the connection open: {e} after {:?}", since.elapsed()),
        }
    }
}

#[test]
fn clients_that_stall_are_cut_off_after_the_idle_limit_and_slow_ones_are_not() {
    use std::io::{Read, Write};
    use std::time::{Duration, Instant};
    let tmp = tempfile::tempdir().unwrap();
    let (dir, _down, (ak, sk)) = up_without_gateway(tmp.path());
    let keys = (ak.as_str(), sk.as_str());
    let (_gw, listen) = spawn_gateway_with(&dir, None, &["--client-timeout-s", "2"]);
    let ep = format!("http://{listen}");
    assert_eq!(s3_request(&ep, keys, "PUT", "/idle", "", b"").0, 200);
    let limit = Duration::from_secs(2);
    let soon = Duration::from_secs(8);

    // A connection that never sends a request, and one that sends half a request head, are
    // closed once the limit has passed, not before.
    for sent in [&b""[..], b"GET /idle HTTP/1.1\r\nhost: x\r\n"] {
        let mut s = std::net::TcpStream::connect(&listen).unwrap();
        let start = Instant::now();
        s.write_all(sent).unwrap();
        let (_, after) = read_until_closed(&mut s, start);
        assert!(after >= limit - Duration::from_millis(200) && after < soon, "closed after {after:?}");
    }

    // A PUT whose body stalls after 1,000 of its 1 MiB is answered RequestTimeout, and the
    // connection closes; nothing is stored.
    let mut s = std::net::TcpStream::connect(&listen).unwrap();
    s.write_all(signed_head(&ep, keys, "PUT", "/idle/stalled", "", 1 << 20, &[]).as_bytes()).unwrap();
    s.write_all(&[7u8; 1000]).unwrap();
    let (answer, after) = read_until_closed(&mut s, Instant::now());
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    assert!(answer.contains("<Code>RequestTimeout</Code>"), "{answer}");
    assert!(after < soon, "the stalled PUT was answered after {after:?}");
    assert_eq!(s3_request(&ep, keys, "HEAD", "/idle/stalled", "", b"").0, 404);

    // A PUT whose body comes in eight pieces 1 s apart (longer in all than the limit, never
    // stalled for it) is stored whole, and the kept-alive connection then serves a GET of it.
    let body: Vec<u8> = (0..8 * 4096).map(|i| (i % 251) as u8).collect();
    let mut s = std::net::TcpStream::connect(&listen).unwrap();
    s.write_all(signed_head(&ep, keys, "PUT", "/idle/slow", "", body.len(), &[]).as_bytes()).unwrap();
    for piece in body.chunks(4096) {
        std::thread::sleep(Duration::from_secs(1));
        s.write_all(piece).unwrap();
    }
    let mut head = [0u8; 12];
    s.read_exact(&mut head).unwrap();
    assert_eq!(&head, b"HTTP/1.1 200", "the slow PUT's answer");
    let (status, _, got) = s3_request(&ep, keys, "GET", "/idle/slow", "", b"");
    assert!(status == 200 && got == body, "the slow PUT's object: status {status}, {} bytes", got.len());

    // A kept-alive connection with nothing more to ask is closed after the limit.
    let mut s = std::net::TcpStream::connect(&listen).unwrap();
    s.write_all(signed_head(&ep, keys, "HEAD", "/idle/slow", "", 0, &[]).as_bytes()).unwrap();
    let start = Instant::now();
    let (answer, after) = read_until_closed(&mut s, start);
    assert!(String::from_utf8_lossy(&answer).starts_with("HTTP/1.1 200"));
    assert!(
        after >= limit - Duration::from_millis(200) && after < soon,
        "an idle kept-alive connection closed after {after:?}"
    );

    // A client that reads nothing of a 32 MiB answer is cut off: what it then reads ends early.
    let big: Vec<u8> = (0..32 << 20).map(|i: usize| (i % 253) as u8).collect();
    assert_eq!(s3_request(&ep, keys, "PUT", "/idle/big", "", &big).0, 200);
    let mut s = std::net::TcpStream::connect(&listen).unwrap();
    s.write_all(signed_head(&ep, keys, "GET", "/idle/big", "", 0, &[]).as_bytes()).unwrap();
    std::thread::sleep(Duration::from_secs(5));
    let (answer, _) = read_until_closed(&mut s, Instant::now());
    assert!(answer.starts_with(b"HTTP/1.1 200"));
    assert!(answer.len() < big.len(), "a client that read nothing for 5 s still got all {} bytes", answer.len());
    let (status, _, got) = s3_request(&ep, keys, "GET", "/idle/big", "", b"");
    assert!(status == 200 && got == big, "the object after a client was cut off");
}
