//! The S3 gateway on real processes: a RAM cluster and its gateway from `shoal up`, driven by
//! boto3 at its defaults (`tests/s3/boto3_basic.py`), and the S3 user commands.

mod common;

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

/// The gateway part of `shoal up --json`, read back from a running cluster's files.
fn up_with_gateway(tmp: &Path) -> (PathBuf, common::Down, serde_json::Value) {
    let dir = tmp.join("c");
    let d = dir.display().to_string();
    let out = ok(&shoal(tmp, &["up", "--dir", &d, "--osds", "3", "--backend", "mem", "--osd-size", "1G", "--json"]));
    let report: serde_json::Value = serde_json::from_str(&out).expect("up --json is JSON");
    let gw = report["gateway"].clone();
    assert!(gw["endpoint"].as_str().is_some_and(|e| e.starts_with("http://127.0.0.1:")), "{gw}");
    assert!(gw["access_key"].as_str().is_some_and(|k| k.len() == 20), "{gw}");
    assert!(gw["secret_key"].as_str().is_some_and(|k| k.len() == 40), "{gw}");
    (dir.clone(), common::Down(dir), gw)
}

#[test]
fn boto3_at_its_defaults_works_against_the_gateway_of_shoal_up() {
    let python = python_with_boto3();
    let tmp = tempfile::tempdir().unwrap();
    let (dir, _down, gw) = up_with_gateway(tmp.path());
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/s3/boto3_basic.py");
    let out = Command::new(&python)
        .arg(&script)
        .env("S3_ENDPOINT", gw["endpoint"].as_str().unwrap())
        .env("S3_ACCESS_KEY", gw["access_key"].as_str().unwrap())
        .env("S3_SECRET_KEY", gw["secret_key"].as_str().unwrap())
        .env_remove("AWS_CA_BUNDLE")
        .env_remove("AWS_PROFILE")
        .env_remove("AWS_CONFIG_FILE")
        .output()
        .expect("running python");
    assert!(
        out.status.success(),
        "boto3 checks failed:\nstdout: {}\nstderr: {}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("boto3 checks passed"));

    // The load generator against the same gateway: every request signed and answered.
    for workload in ["put", "get", "mixed", "list"] {
        let args = [
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
            "--concurrency",
            "2",
            workload,
            "--json",
        ];
        let report: serde_json::Value = serde_json::from_str(&ok(&shoal(&dir, &args))).unwrap();
        assert!(report["ops"].as_u64().unwrap() > 0, "{workload}: {report}");
        assert_eq!(report["errors"], 0, "{workload}: {report}");
        assert!(report["p99_ms"].as_f64().unwrap() >= report["p50_ms"].as_f64().unwrap(), "{report}");
        if workload == "list" {
            assert!(report["keys_per_s"].as_f64().unwrap() > 0.0, "{report}");
        }
    }
    let bad = ["s3", "bench", "--endpoint", "127.0.0.1:1", "--access-key", "a", "--secret-key", "b", "put"];
    common::fails_with(&shoal(&dir, &bad), "must start with http://");
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
