//! Crash test with real process kills: `shoal store-torture` commits random `Sync` transactions
//! to a `block` store and is killed with SIGKILL at a random moment; the store must then mount,
//! pass fsck, hold every acknowledged transaction, and hold the one transaction that was in
//! flight either wholly or not at all.
//!
//! The child describes every transaction on stdout before committing it (see
//! `crates/cli/src/torture.rs` for the line format), so this test replays them on an in-memory
//! model without sharing code with the binary.
//!
//! Two runs: a 256 MiB store killed 5-300 ms after each start, and a 16 MiB store (1 MiB commit
//! log) killed 0.4-2.5 s after each start, so that kills also land around log laps.
//!
//! Environment: `SHOAL_CRASH_ITERATIONS` (default 20; the small-store run does a third),
//! `SHOAL_CRASH_SECONDS` (time budget for starting new iterations, per run, default 40),
//! `SHOAL_CRASH_SEED` (default: from the clock; printed, and named in every failure).

use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use shoal_store::{BackendKind, Durability, MkfsOptions, ObjectStore, Transaction};

const COLL: &str = "t";

#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Obj {
    data: Vec<u8>,
    xattrs: BTreeMap<String, Vec<u8>>,
    omap: BTreeMap<Vec<u8>, Vec<u8>>,
}

/// The expected content of collection `t`.
type Model = BTreeMap<String, Obj>;

/// The bytes the torture child wrote for content seed `cseed`.
fn content(cseed: u64, len: usize) -> Vec<u8> {
    shoal_util::pattern::xorshift_bytes(cseed, len)
}

/// The test's own generator, for seeds and delays.
struct Rng(u64);

impl Rng {
    fn next_u64(&mut self) -> u64 {
        let mut s = self.0;
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        self.0 = s;
        s
    }
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next_u64() % (hi - lo + 1)
    }
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().map(|v| v.parse().unwrap_or_else(|_| panic!("{name}={v:?} is not a number")))
}

/// Applies one `op N I ...` line (the fields after `op N I`) to the model.
fn apply_op(m: &mut Model, fields: &[&str], line: &str) {
    let num = |i: usize| -> u64 { fields[i].parse().unwrap_or_else(|_| panic!("bad number in {line:?}")) };
    let obj = fields[1].to_string();
    match fields[0] {
        "write" => {
            let (offset, len, cseed) = (num(2) as usize, num(3) as usize, num(4));
            let o = m.entry(obj).or_default();
            if o.data.len() < offset + len {
                o.data.resize(offset + len, 0);
            }
            o.data[offset..offset + len].copy_from_slice(&content(cseed, len));
        }
        "touch" => {
            m.entry(obj).or_default();
        }
        "truncate" => {
            let size = num(2) as usize;
            m.get_mut(&obj).unwrap_or_else(|| panic!("truncate of a missing object: {line:?}")).data.resize(size, 0);
        }
        "remove" => {
            m.remove(&obj).unwrap_or_else(|| panic!("remove of a missing object: {line:?}"));
        }
        "setxattr" => {
            let value = content(num(4), num(3) as usize);
            let o = m.get_mut(&obj).unwrap_or_else(|| panic!("setxattr on a missing object: {line:?}"));
            o.xattrs.insert(fields[2].to_string(), value);
        }
        "omapset" => {
            assert!(fields.len() >= 5 && (fields.len() - 2).is_multiple_of(3), "bad omapset line {line:?}");
            let o = m.get_mut(&obj).unwrap_or_else(|| panic!("omapset on a missing object: {line:?}"));
            for e in fields[2..].chunks(3) {
                let len: usize = e[1].parse().unwrap_or_else(|_| panic!("bad length in {line:?}"));
                let cseed: u64 = e[2].parse().unwrap_or_else(|_| panic!("bad seed in {line:?}"));
                o.omap.insert(e[0].as_bytes().to_vec(), content(cseed, len));
            }
        }
        other => panic!("unknown op {other:?} in {line:?}"),
    }
}

/// What the child reported before it died.
#[derive(Default)]
struct Run {
    /// Operation lines (fields after `op N I`) by transaction number.
    ops: BTreeMap<u64, Vec<String>>,
    begun: Vec<u64>,
    acked: Vec<u64>,
}

fn parse_output(out: &[u8]) -> Run {
    let mut run = Run::default();
    // A last line without its newline was cut by the kill; the child flushes `begin N` before
    // it commits, so a cut `begin` means the commit never started.
    for raw in out.split_inclusive(|b| *b == b'\n').filter(|l| l.ends_with(b"\n")) {
        let line = std::str::from_utf8(raw).expect("child output is UTF-8").trim_end();
        let fields: Vec<&str> = line.split(' ').collect();
        let n = |i: usize| -> u64 { fields[i].parse().unwrap_or_else(|_| panic!("bad line {line:?}")) };
        match fields[0] {
            "mounted" => {}
            "op" => {
                let ops = run.ops.entry(n(1)).or_default();
                assert_eq!(n(2), ops.len() as u64, "operation lines out of order: {line:?}");
                ops.push(fields[3..].join(" "));
            }
            "begin" => {
                assert_eq!(n(1), run.begun.len() as u64 + 1, "begin out of order: {line:?}");
                assert_eq!(run.begun.len(), run.acked.len(), "begin before the previous ack: {line:?}");
                run.begun.push(n(1));
            }
            "ack" => {
                assert_eq!(run.begun.last(), Some(&n(1)), "ack of a transaction that did not begin: {line:?}");
                run.acked.push(n(1));
            }
            _ => panic!("unexpected line from the child: {line:?}"),
        }
    }
    run
}

fn apply_txn(m: &mut Model, run: &Run, n: u64) {
    for line in &run.ops[&n] {
        let fields: Vec<&str> = line.split(' ').collect();
        apply_op(m, &fields, line);
    }
}

/// Reads the store's collections and the whole content of collection `t`.
fn snapshot(store: &dyn ObjectStore) -> Model {
    assert_eq!(store.list_collections().unwrap(), vec![COLL.to_string()], "collections");
    let mut m = Model::new();
    let mut after: Option<String> = None;
    loop {
        let page = store.list_objects(COLL, "", after.as_deref(), 1000).unwrap();
        for name in &page.objects {
            let data = store.read_all(COLL, name).unwrap_or_else(|e| panic!("reading {COLL}/{name}: {e}"));
            let size = store.stat(COLL, name).unwrap().size_bytes;
            assert_eq!(size, data.len() as u64, "{COLL}/{name}: stat size differs from the bytes read");
            let xattrs = store.list_xattrs(COLL, name).unwrap().into_iter().collect();
            let omap = store.omap_list(COLL, name, None, usize::MAX).unwrap().into_iter().collect();
            m.insert(name.clone(), Obj { data, xattrs, omap });
        }
        match page.next {
            Some(n) => after = Some(n),
            None => break,
        }
    }
    m
}

/// A short description of how `got` differs from `want`.
fn describe_diff(got: &Model, want: &Model) -> String {
    let mut out = Vec::new();
    for name in got.keys().chain(want.keys()).collect::<std::collections::BTreeSet<_>>() {
        match (got.get(name), want.get(name)) {
            (Some(_), None) => out.push(format!("{name}: present, expected absent")),
            (None, Some(_)) => out.push(format!("{name}: absent, expected present")),
            (Some(g), Some(w)) => {
                if g.data.len() != w.data.len() {
                    out.push(format!("{name}: {} bytes, expected {}", g.data.len(), w.data.len()));
                }
                if let Some(i) = g.data.iter().zip(&w.data).position(|(a, b)| a != b) {
                    out.push(format!("{name}: first differing byte at offset {i}"));
                }
                if g.xattrs != w.xattrs {
                    out.push(format!(
                        "{name}: xattrs {:?}, expected {:?}",
                        g.xattrs.keys().collect::<Vec<_>>(),
                        w.xattrs.keys().collect::<Vec<_>>()
                    ));
                }
                if g.omap != w.omap {
                    out.push(format!(
                        "{name}: omap keys {:?}, expected {:?} (or values differ)",
                        g.omap.keys().map(|k| String::from_utf8_lossy(k).into_owned()).collect::<Vec<_>>(),
                        w.omap.keys().map(|k| String::from_utf8_lossy(k).into_owned()).collect::<Vec<_>>()
                    ));
                }
            }
            (None, None) => unreachable!(),
        }
    }
    out.join("; ")
}

#[test]
fn sigkill_during_sync_commits_loses_nothing_acknowledged() {
    let iterations = env_u64("SHOAL_CRASH_ITERATIONS").unwrap_or(20);
    crash_loop("crash test", 256 << 20, iterations, 5..=300);
}

/// On a 16 MiB store the commit log is 1 MiB, so a child that runs for a second or two fills
/// it and starts new laps (checkpoint, then records from the log's start again): kills land
/// around those too.
#[test]
fn sigkill_across_commit_log_laps_on_a_small_store() {
    let iterations = env_u64("SHOAL_CRASH_ITERATIONS").map_or(6, |n| n.div_ceil(3));
    crash_loop("crash test (16 MiB store)", 16 << 20, iterations, 400..=2500);
}

/// Kills the torture child `iterations` times (fewer if the time budget runs out), each after
/// a random delay in `delay_ms`, checking the store after each kill.
fn crash_loop(label: &str, size_bytes: u64, iterations: u64, delay_ms: std::ops::RangeInclusive<u64>) {
    let started = Instant::now();
    let budget = Duration::from_secs(env_u64("SHOAL_CRASH_SECONDS").unwrap_or(40));
    let test_seed = env_u64("SHOAL_CRASH_SEED").unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64
    });
    eprintln!("{label}: SHOAL_CRASH_SEED={test_seed}");
    let mut rng = Rng(test_seed | 1);

    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("store");
    {
        let opts = MkfsOptions { backend: BackendKind::Block, size_bytes, device: None, force: false };
        let store = shoal_store::mkfs(&dir, &opts).unwrap();
        let mut txn = Transaction::new();
        txn.create_collection(COLL);
        store.commit(txn, Durability::Sync).unwrap();
    }

    let mut model = Model::new();
    let mut max_acked = 0;
    let (mut total_acked, mut in_flight_applied, mut in_flight_lost, mut done) = (0u64, 0u64, 0u64, 0u64);
    for iter in 0..iterations {
        if started.elapsed() > budget {
            eprintln!("{label}: time budget reached after {iter} iterations");
            break;
        }
        let seed = rng.next_u64();
        let delay = Duration::from_millis(rng.range(*delay_ms.start(), *delay_ms.end()));
        let ctx = format!(
            "{label}: iteration {iter}, child seed {seed}, kill after {delay:?} (SHOAL_CRASH_SEED={test_seed})"
        );
        let (run, stderr) = run_child(&dir, seed, delay, &ctx);

        let store = shoal_store::open(&dir).unwrap_or_else(|e| panic!("{ctx}: mount after the kill failed: {e}"));
        let report = store.fsck().unwrap_or_else(|e| panic!("{ctx}: fsck failed: {e}"));
        assert!(report.is_clean(), "{ctx}: fsck after the kill found problems: {:#?}", report.errors);

        let mut with_acked = model.clone();
        for &n in &run.acked {
            apply_txn(&mut with_acked, &run, n);
        }
        let in_flight = run.begun.last().copied().filter(|n| !run.acked.contains(n));
        let got = snapshot(store.as_ref());
        let matches_acked = got == with_acked;
        match in_flight {
            None => {
                assert!(
                    matches_acked,
                    "{ctx}: store differs from its {} acknowledged transactions: {}\nchild stderr: {stderr}",
                    run.acked.len(),
                    describe_diff(&got, &with_acked)
                );
            }
            Some(n) => {
                let mut with_in_flight = with_acked.clone();
                apply_txn(&mut with_in_flight, &run, n);
                let matches_in_flight = got == with_in_flight;
                assert!(
                    matches_acked || matches_in_flight,
                    "{ctx}: store matches neither the {} acknowledged transactions ({}) nor those plus \
                     in-flight transaction {n} ({})\nops of {n}: {:?}\nchild stderr: {stderr}",
                    run.acked.len(),
                    describe_diff(&got, &with_acked),
                    describe_diff(&got, &with_in_flight),
                    run.ops[&n]
                );
                // Both match only if the transaction changed nothing (e.g. touch + remove of a
                // missing object); then there is nothing to tell apart.
                if matches_in_flight && !matches_acked {
                    in_flight_applied += 1;
                } else if matches_acked && !matches_in_flight {
                    in_flight_lost += 1;
                }
            }
        }
        model = got;
        total_acked += run.acked.len() as u64;
        max_acked = max_acked.max(run.acked.len());
        done += 1;
        drop(store);
    }
    eprintln!(
        "{label}: {done} kills, {total_acked} acknowledged transactions verified (at most {max_acked} in one \
         run), in-flight transaction applied {in_flight_applied} times and absent {in_flight_lost} times, \
         {} objects at the end, {:.1?}",
        model.len(),
        started.elapsed()
    );
    assert!(done > 0, "no iteration ran");
    if done >= 5 {
        assert!(total_acked > 0, "the child never acknowledged a transaction: the test checked nothing");
    }
}

/// Runs the torture child with `seed`, kills it after `delay`, and returns what it printed.
fn run_child(dir: &Path, seed: u64, delay: Duration, ctx: &str) -> (Run, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_shoal"))
        .arg("store-torture")
        .arg(dir)
        .arg("--seed")
        .arg(seed.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawning shoal store-torture");
    let mut stdout = child.stdout.take().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let out_reader = std::thread::spawn(move || {
        let mut buf = Vec::new();
        stdout.read_to_end(&mut buf).map(|_| buf)
    });
    let err_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });
    std::thread::sleep(delay);
    if let Some(st) = child.try_wait().expect("polling the child") {
        let err = err_reader.join().unwrap();
        panic!("{ctx}: the torture child exited by itself ({st}) before the kill: {err}");
    }
    // Child::kill sends SIGKILL.
    child.kill().expect("killing the child");
    let status = child.wait().expect("waiting for the child");
    let out = out_reader.join().unwrap().expect("reading the child's stdout");
    let err = err_reader.join().unwrap();
    {
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(status.signal(), Some(9), "{ctx}: the child did not die of SIGKILL ({status}): {err}");
    }
    (parse_output(&out), err)
}
