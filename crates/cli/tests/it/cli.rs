//! End-to-end tests of `shoal store` with the real binary: the happy path on both persistent
//! backends, and bad input, which must fail with a clear message on stderr and a non-zero exit
//! while losing nothing already stored.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use shoal_store::{BackendKind, Durability, MkfsOptions, StoreError, Transaction};

/// Pseudo-random bytes, distinct per seed.
fn content(seed: u64, len: usize) -> Vec<u8> {
    shoal_util::pattern::xorshift_bytes(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15), len)
}

fn shoal_cmd(args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_shoal"));
    cmd.args(args);
    cmd
}

/// Runs `shoal ARGS` with empty stdin.
fn shoal(args: &[&str]) -> Output {
    shoal_cmd(args).stdin(Stdio::null()).output().expect("running shoal")
}

/// Runs `shoal ARGS` with `input` on stdin.
fn shoal_stdin(args: &[&str], input: &[u8]) -> Output {
    let mut child = shoal_cmd(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("running shoal");
    let mut stdin = child.stdin.take().unwrap();
    let input = input.to_vec();
    let feeder = std::thread::spawn(move || stdin.write_all(&input));
    let out = child.wait_with_output().expect("waiting for shoal");
    match feeder.join().unwrap() {
        // A command that fails before reading its input closes the pipe early.
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => assert!(!out.status.success(), "stdin not read"),
        r => r.expect("writing stdin"),
    }
    out
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Asserts success and returns stdout.
#[track_caller]
fn ok(out: &Output) -> Vec<u8> {
    assert!(out.status.success(), "shoal failed ({}): {}", out.status, text(&out.stderr));
    out.stdout.clone()
}

/// Asserts a failure whose stderr contains every one of `needles`, and returns stderr.
#[track_caller]
fn fails_with(out: &Output, needles: &[&str]) -> String {
    let err = text(&out.stderr);
    assert!(!out.status.success(), "shoal succeeded but should have failed; stdout: {}", text(&out.stdout));
    assert_eq!(out.status.code(), Some(1), "exit status {}: {err}", out.status);
    for n in needles {
        assert!(err.contains(n), "stderr does not mention {n:?}: {err}");
    }
    err
}

fn p(path: &Path) -> &str {
    path.to_str().expect("temporary paths are UTF-8")
}

fn lines(out: &[u8]) -> Vec<String> {
    text(out).lines().map(str::to_string).collect()
}

fn write_file(path: &Path, data: &[u8]) {
    std::fs::write(path, data).unwrap();
}

fn mkfs(dir: &Path, backend: &str, size: &str) {
    let out = ok(&shoal(&["store", "mkfs", "--backend", backend, "--size", size, p(dir)]));
    assert!(text(&out).contains("created"), "{}", text(&out));
}

fn round_trip(backend: &str) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("store");
    let s = p(&dir);
    mkfs(&dir, backend, "64M");

    // put from a file (larger than one 4 MiB chunk), from stdin, and an empty file.
    let a = content(1, (9 << 20) + 12_345);
    let fa = tmp.path().join("a.bin");
    write_file(&fa, &a);
    ok(&shoal(&["store", "put", s, "c1/a", p(&fa)]));
    let b = content(2, 5000);
    ok(&shoal_stdin(&["store", "put", "--sync", s, "c1/b", "-"], &b));
    let fe = tmp.path().join("empty");
    write_file(&fe, b"");
    ok(&shoal(&["store", "put", s, "c2/empty", p(&fe)]));

    // get to stdout and to a file.
    assert!(ok(&shoal(&["store", "get", s, "c1/a"])) == a, "c1/a read back differs");
    let fb = tmp.path().join("b.out");
    let out = ok(&shoal(&["store", "get", s, "c1/b", "-o", p(&fb)]));
    assert!(out.is_empty(), "get -o printed to stdout");
    assert!(std::fs::read(&fb).unwrap() == b, "c1/b read back differs");
    assert!(ok(&shoal(&["store", "get", s, "c2/empty"])).is_empty());

    // put replaces the whole object.
    let b2 = content(3, 100);
    ok(&shoal_stdin(&["store", "put", s, "c1/b", "-"], &b2));
    assert!(ok(&shoal(&["store", "get", s, "c1/b"])) == b2, "c1/b after replacing it");

    // ls: COLLECTION/OBJECT lines, all collections or one.
    assert_eq!(lines(&ok(&shoal(&["store", "ls", s]))), ["c1/a", "c1/b", "c2/empty"]);
    assert_eq!(lines(&ok(&shoal(&["store", "ls", s, "c1"]))), ["c1/a", "c1/b"]);
    let ls: serde_json::Value = serde_json::from_slice(&ok(&shoal(&["store", "ls", "--json", s]))).unwrap();
    assert_eq!(ls, serde_json::json!(["c1/a", "c1/b", "c2/empty"]));

    // stat --json.
    let st: serde_json::Value =
        serde_json::from_slice(&ok(&shoal(&["store", "stat", "--json", s, "c1/a"]))).expect("stat --json prints JSON");
    assert_eq!(st["size_bytes"], serde_json::json!(a.len()), "{st}");
    assert_eq!(st["collection"], "c1");
    assert_eq!(st["object"], "a");
    assert!(st["mtime_ns"].as_i64().is_some_and(|t| t > 0), "{st}");

    // status --json.
    let status: serde_json::Value =
        serde_json::from_slice(&ok(&shoal(&["store", "status", "--json", s]))).expect("status --json prints JSON");
    assert_eq!(status["backend"], backend, "{status}");
    assert_eq!(status["usage"]["objects"], 3, "{status}");
    assert_eq!(status["usage"]["collections"], 2, "{status}");
    assert!(status["usage"]["size_bytes"].as_u64().is_some_and(|n| n > 0), "{status}");

    // rm.
    ok(&shoal(&["store", "rm", "--sync", s, "c1/a"]));
    fails_with(&shoal(&["store", "get", s, "c1/a"]), &["c1/a", "does not exist"]);
    fails_with(&shoal(&["store", "rm", s, "c1/a"]), &["c1/a", "does not exist"]);
    assert_eq!(lines(&ok(&shoal(&["store", "ls", s]))), ["c1/b", "c2/empty"]);

    // fsck of a clean store.
    let out = shoal(&["store", "fsck", s]);
    assert_eq!(out.status.code(), Some(0), "fsck: {}{}", text(&out.stdout), text(&out.stderr));
    assert!(text(&out.stdout).contains("clean"), "{}", text(&out.stdout));
    let report: serde_json::Value = serde_json::from_slice(&ok(&shoal(&["store", "fsck", "--json", s]))).unwrap();
    assert_eq!(report["errors"], serde_json::json!([]), "{report}");
    assert_eq!(report["objects"], 2, "{report}");

    // Everything is still there after all these mounts.
    assert!(ok(&shoal(&["store", "get", s, "c1/b"])) == b2);
}

#[test]
fn block_round_trip() {
    round_trip("block");
}

#[test]
fn posix_round_trip() {
    round_trip("posix");
}

#[test]
fn mount_errors_name_the_problem() {
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("missing");
    for verb in ["ls", "status", "fsck"] {
        fails_with(&shoal(&["store", verb, p(&missing)]), &[p(&missing), "no such file or directory"]);
    }
    fails_with(&shoal(&["store", "get", p(&missing), "c/o"]), &["no such file or directory"]);

    let empty = tmp.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    fails_with(&shoal(&["store", "ls", p(&empty)]), &[p(&empty), "not a Shoal store"]);
    fails_with(&shoal(&["store", "status", p(&empty)]), &["not a Shoal store"]);
    let file = tmp.path().join("plain-file");
    write_file(&file, b"hello");
    fails_with(&shoal(&["store", "ls", p(&file)]), &["not a Shoal store"]);
    // Nothing was created by the failed mounts.
    assert!(!missing.exists());
    assert_eq!(std::fs::read_dir(&empty).unwrap().count(), 0, "a failed mount left files behind");

    // mkfs --size 1M is refused and says why.
    fails_with(&shoal(&["store", "mkfs", "--size", "1M", p(&tmp.path().join("tiny"))]), &["too small"]);
    fails_with(&shoal(&["store", "mkfs", "--size", "12X", p(&tmp.path().join("bad"))]), &["12X"]);

    // Block cache sizes that cannot be read are refused with their names, and a size with a unit
    // is taken.
    let cached = tmp.path().join("cached");
    mkfs(&cached, "block", "64M");
    let with_env = |var: &str, value: &str| {
        shoal_cmd(&["store", "ls", p(&cached)]).env(var, value).stdin(Stdio::null()).output().expect("running shoal")
    };
    fails_with(&with_env("SHOAL_BLOCK_CACHE_LARGE_BYTES", "lots"), &["SHOAL_BLOCK_CACHE_LARGE_BYTES", "lots"]);
    fails_with(&with_env("SHOAL_BLOCK_CACHE_BYTES", "-1"), &["SHOAL_BLOCK_CACHE_BYTES"]);
    ok(&with_env("SHOAL_BLOCK_CACHE_LARGE_BYTES", "128M"));
    // A usage error: clap's exit status 2, before anything starts.
    let out = shoal(&["osd", "run", "--id", "0", "--block-cache", "lots"]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("--block-cache") && err.contains("lots"), "{err}");
}

#[test]
fn mkfs_over_an_existing_store_needs_force_and_loses_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("store");
    let s = p(&dir);
    mkfs(&dir, "block", "32M");
    let data = content(7, 70_000);
    ok(&shoal_stdin(&["store", "put", "--sync", s, "c/keep", "-"], &data));

    fails_with(&shoal(&["store", "mkfs", "--size", "32M", s]), &[s, "--force"]);
    fails_with(&shoal(&["store", "mkfs", "--backend", "posix", s]), &["--force"]);
    assert!(ok(&shoal(&["store", "get", s, "c/keep"])) == data, "object lost after a refused mkfs");
    assert_eq!(lines(&ok(&shoal(&["store", "ls", s]))), ["c/keep"]);

    // With --force it is really replaced.
    mkfs_force(&dir);
    assert!(lines(&ok(&shoal(&["store", "ls", s]))).is_empty());
}

fn mkfs_force(dir: &Path) {
    ok(&shoal(&["store", "mkfs", "--force", "--size", "32M", p(dir)]));
}

#[test]
fn second_mount_is_refused_while_the_store_is_in_use() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("store");
    let s = p(&dir);
    mkfs(&dir, "block", "32M");
    ok(&shoal_stdin(&["store", "put", s, "c/o", "-"], b"hello"));
    {
        let _held = shoal_store::open(&dir).unwrap();
        fails_with(&shoal(&["store", "ls", s]), &[s, "in use"]);
        fails_with(&shoal_stdin(&["store", "put", s, "c/p", "-"], b"x"), &["in use"]);
        fails_with(&shoal(&["store", "mkfs", "--force", "--size", "32M", s]), &["in use"]);
        // In the same process, too.
        assert!(matches!(shoal_store::open(&dir).err(), Some(StoreError::Busy { .. })));
    }
    assert_eq!(lines(&ok(&shoal(&["store", "ls", s]))), ["c/o"]);
    assert_eq!(ok(&shoal(&["store", "get", s, "c/o"])), b"hello");
}

#[test]
fn bad_names_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("store");
    let s = p(&dir);
    mkfs(&dir, "block", "32M");
    ok(&shoal_stdin(&["store", "put", s, "c/ok", "-"], b"fine"));

    let long = "n".repeat(256);
    let at_limit = "m".repeat(255);
    fails_with(&shoal_stdin(&["store", "put", s, &format!("c/{long}"), "-"], b"x"), &["object name", "too long"]);
    fails_with(&shoal_stdin(&["store", "put", s, &format!("{long}/o"), "-"], b"x"), &["collection name", "too long"]);
    fails_with(&shoal(&["store", "get", s, &format!("c/{long}")]), &["too long"]);
    ok(&shoal_stdin(&["store", "put", s, &format!("c/{at_limit}"), "-"], b"255"));
    assert_eq!(ok(&shoal(&["store", "get", s, &format!("c/{at_limit}")])), b"255");
    for bad in ["noslash", "/o", "c/"] {
        fails_with(&shoal(&["store", "get", s, bad]), &["COLLECTION/OBJECT"]);
    }
    fails_with(&shoal(&["store", "get", s, "c/missing"]), &["c/missing", "does not exist"]);
    fails_with(&shoal(&["store", "get", s, "nocoll/x"]), &["nocoll", "does not exist"]);
    fails_with(&shoal(&["store", "stat", s, "c/missing"]), &["does not exist"]);

    // NUL cannot go through argv; check it through the library, with the store unchanged after.
    let store = shoal_store::open(&dir).unwrap();
    let is_invalid =
        |r: shoal_store::Result<()>| matches!(r, Err(StoreError::InvalidName { reason: "contains NUL", .. }));
    let mut txn = Transaction::new();
    txn.write("c", "a\0b", 0, b"x".to_vec());
    assert!(is_invalid(store.commit(txn, Durability::Sync)));
    let mut txn = Transaction::new();
    txn.create_collection("x\0y");
    assert!(is_invalid(store.commit(txn, Durability::Sync)));
    let mut txn = Transaction::new();
    txn.write("c", "fine", 0, b"x".to_vec()).set_xattr("c", "fine", "k\0", b"v".to_vec());
    assert!(is_invalid(store.commit(txn, Durability::Sync)));
    assert!(is_invalid(store.read("c", "a\0b", 0, 1).map(drop)));
    assert!(is_invalid(store.stat("c\0", "o").map(drop)));
    let mut txn = Transaction::new();
    txn.write("c", &long, 0, b"x".to_vec());
    let err = store.commit(txn, Durability::Sync).unwrap_err();
    assert!(matches!(err, StoreError::InvalidName { reason: "too long", .. }), "{err}");
    assert_eq!(err.errno(), 36);
    // The failed transactions left nothing behind.
    assert!(!store.exists("c", "fine").unwrap());
    assert_eq!(store.list_collections().unwrap(), ["c"]);
    assert_eq!(store.read_all("c", "ok").unwrap(), b"fine");
}

#[test]
fn reads_past_the_end_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("store");
    let opts = MkfsOptions { backend: BackendKind::Block, size_bytes: 32 << 20, device: None, force: false };
    let store = shoal_store::mkfs(&dir, &opts).unwrap();
    let data = content(9, 10_000);
    let mut txn = Transaction::new();
    txn.create_collection("c").write("c", "o", 0, data.clone());
    store.commit(txn, Durability::Sync).unwrap();
    assert_eq!(store.read("c", "o", 9_990, 100).unwrap(), &data[9_990..], "a read over the end is cut short");
    assert!(store.read("c", "o", 10_000, 100).unwrap().is_empty(), "a read at the end returns nothing");
    match store.read("c", "o", 10_001, 1) {
        Err(StoreError::ReadPastEnd { coll, obj, offset, size_bytes }) => {
            assert_eq!((coll.as_str(), obj.as_str(), offset, size_bytes), ("c", "o", 10_001, 10_000));
        }
        other => panic!("expected ReadPastEnd, got {other:?}"),
    }
    assert!(matches!(store.read("c", "o", u64::MAX, 1), Err(StoreError::ReadPastEnd { .. })));
    assert!(matches!(store.read("c", "missing", 0, 1), Err(StoreError::NoSuchObject { .. })));
    assert_eq!(store.read_all("c", "o").unwrap(), data);
}

#[test]
fn running_out_of_space_keeps_what_was_stored() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("store");
    let s = p(&dir);
    mkfs(&dir, "block", "16M");
    let kept: Vec<(String, Vec<u8>)> =
        (0..3).map(|i| (format!("c/keep{i}"), content(100 + i, 1_000_000 + 777 * i as usize))).collect();
    for (name, data) in &kept {
        ok(&shoal_stdin(&["store", "put", "--sync", s, name, "-"], data));
    }
    let big = tmp.path().join("big.bin");
    write_file(&big, &content(200, 20 << 20));
    fails_with(&shoal(&["store", "put", "--sync", s, "c/big", p(&big)]), &["no space"]);
    // Replacing an existing object with something too big fails the same way, in its first
    // transaction (less than one 4 MiB chunk is free), so the old content stays.
    fails_with(&shoal(&["store", "put", s, "c/keep0", p(&big)]), &["no space"]);

    for (name, data) in &kept {
        assert!(ok(&shoal(&["store", "get", s, name])) == *data, "{name} changed after running out of space");
    }
    let out = shoal(&["store", "fsck", s]);
    assert_eq!(out.status.code(), Some(0), "fsck after ENOSPC: {}{}", text(&out.stdout), text(&out.stderr));
    // Freeing space makes room again.
    ok(&shoal(&["store", "rm", s, "c/big"]));
    ok(&shoal(&["store", "rm", s, "c/keep0"]));
    let small = content(300, 3 << 20);
    ok(&shoal_stdin(&["store", "put", "--sync", s, "c/after", "-"], &small));
    assert!(ok(&shoal(&["store", "get", s, "c/after"])) == small);
}

#[test]
fn fsck_of_a_corrupt_store_fails_and_names_the_object() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("store");
    let s = p(&dir);
    mkfs(&dir, "block", "32M");
    let data = content(42, 200_000);
    ok(&shoal_stdin(&["store", "put", "--sync", s, "pool/victim", "-"], &data));
    ok(&shoal_stdin(&["store", "put", "--sync", s, "pool/bystander", "-"], &content(43, 50_000)));

    // Flip one byte of the object's data in the data file, found by its content.
    let block_file = dir.join("block");
    let mut bytes = std::fs::read(&block_file).unwrap();
    let pos = 123_457;
    let needle = &data[pos - 32..pos + 32];
    let hits: Vec<usize> =
        (0..=bytes.len() - 64).filter(|&i| bytes[i] == needle[0] && &bytes[i..i + 64] == needle).collect();
    assert_eq!(hits.len(), 1, "object content found {} times", hits.len());
    let at = hits[0] + 32;
    bytes[at] ^= 0x5a;
    {
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new().write(true).open(&block_file).unwrap();
        f.write_all_at(&bytes[at..=at], at as u64).unwrap();
        f.sync_all().unwrap();
    }

    let out = shoal(&["store", "fsck", s]);
    let stdout = text(&out.stdout);
    assert!(!out.status.success(), "fsck of a corrupt store exited 0: {stdout}");
    assert!(stdout.contains("pool/victim"), "fsck does not name the object: {stdout}");
    assert!(!stdout.contains("pool/bystander"), "fsck blames an intact object: {stdout}");
    assert!(stdout.contains("PROBLEMS FOUND"), "{stdout}");
    let report = shoal(&["store", "fsck", "--json", s]);
    assert!(!report.status.success());
    let report: serde_json::Value = serde_json::from_slice(&report.stdout).unwrap();
    assert!(report["errors"].as_array().is_some_and(|e| !e.is_empty()), "{report}");

    // get refuses to return the corrupt data and says so; the other object still reads.
    fails_with(&shoal(&["store", "get", s, "pool/victim"]), &["pool/victim", "checksum"]);
    ok(&shoal(&["store", "get", s, "pool/bystander"]));
}
