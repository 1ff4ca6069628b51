//! A real cluster of processes on loopback: `shoal up` with three OSDs in three hosts of the
//! map, a size-3 pool, 1,000 objects of mixed sizes written and read back byte-exact, and every
//! OSD's store checked offline after `shoal down`: each object has exactly its three replicas,
//! on the OSDs placement names. Plus: a wrong key is refused, malformed frames (over TCP and the
//! OSDs' local sockets) do not crash daemons, bad pool commands get clear errors, and the CLI's
//! object commands work.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;

use crate::common;

use common::{Down, fails_with, ok, shoal};
use shoal_client::{Client, ClientError, ClusterConfig};
use shoal_proto::osd::ObjOp;

/// Sizes from 0 B to 8 MiB: mostly small, a few large, about 120 MiB in all.
fn size_of(i: u64) -> usize {
    match i % 100 {
        0 => 8 << 20,
        1..=4 => 1 << 20,
        5..=14 => 64 << 10,
        15..=19 => 0,
        20..=29 => 1,
        _ => (i as usize * 37) % 8192,
    }
}

fn content(i: u64) -> Vec<u8> {
    shoal_util::pattern::xorshift_bytes(i.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1, size_of(i))
}

#[test]
fn three_replicas_across_three_hosts() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("cluster");
    let d = dir.display().to_string();
    // These OSDs run their sockets on two runtime threads, where every other test runs the
    // default one (decision 0098), so that the multi-thread runtime stays proven too.
    let up = common::shoal_env(
        tmp.path(),
        &[
            "up",
            "--dir",
            &d,
            "--osds",
            "3",
            "--hosts",
            "3",
            "--backend",
            "block",
            "--osd-size",
            "768M",
            "--pg-num",
            "32",
            "--json",
        ],
        &[("SHOAL_OSD_THREADS", "2")],
    );
    let report: serde_json::Value = serde_json::from_str(&ok(&up)).expect("up --json");
    let _down = Down(dir.clone());
    assert_eq!(report["pool_size"], 3);
    let conf = dir.join("shoal.toml");

    // Bad pool commands are refused with the reason.
    fails_with(&shoal(&dir, &["pool", "create", "data", "--size", "1"]), "already exists");
    fails_with(&shoal(&dir, &["pool", "create", "big", "--size", "4"]), "larger than the 3 OSDs");
    fails_with(&shoal(&dir, &["pool", "rm", "nope"]), "does not exist");
    fails_with(&shoal(&dir, &["obj", "stat", "--pool", "nope", "x"]), "does not exist");
    let long = "x".repeat(300);
    fails_with(&shoal(&dir, &["obj", "stat", "--pool", "data", &long]), "longer than 255 bytes");

    // 1,000 objects through the library, 16 in flight.
    let cfg = ClusterConfig::from_conf_file(&conf, "client.admin").expect("conf");
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    let client = rt.block_on(Client::connect(cfg.clone())).expect("connect");
    let sem = Arc::new(tokio::sync::Semaphore::new(16));
    rt.block_on(async {
        let mut tasks = Vec::new();
        for i in 0..1000u64 {
            let permit = sem.clone().acquire_owned().await.expect("semaphore");
            let client = client.clone();
            tasks.push(tokio::spawn(async move {
                let data = content(i);
                let op = ObjOp::WriteFull { len_bytes: data.len() as u64 };
                client.op("data", &format!("obj-{i}"), vec![op], data).await.map(|_| drop(permit))
            }));
        }
        for t in tasks {
            t.await.expect("task").expect("write");
        }
        for i in 0..1000u64 {
            let name = format!("obj-{i}");
            let read = vec![ObjOp::Read { offset: 0, len_bytes: u64::MAX }];
            let got = client.op("data", &name, read, vec![]).await.expect("read").data;
            assert!(got == content(i), "{name}: read {} bytes, wrote {}", got.len(), size_of(i));
        }
    });
    // Listing through the CLI sees them all.
    let listed: BTreeSet<String> =
        ok(&shoal(&dir, &["obj", "ls", "--pool", "data"])).lines().map(String::from).collect();
    assert_eq!(listed.len(), 1000);

    // A wrong key is refused by monitors and OSDs alike.
    let mut bad = cfg.clone();
    bad.key = shoal_net::Key::generate();
    match rt.block_on(Client::connect(bad)) {
        Err(ClientError::Net(shoal_net::NetError::AuthRefused { reason })) => {
            assert!(reason.contains("client.admin"), "{reason}")
        }
        Err(e) => panic!("wrong key: unexpected error {e}"),
        Ok(_) => panic!("a client with the wrong key was let in"),
    }

    // Malformed frames close that connection only.
    let map = client.mon().map();
    let mut addrs: Vec<SocketAddr> = map.osds.values().filter_map(|o| o.addr).collect();
    addrs.extend(map.mons.values().map(|m| m.addr));
    for addr in &addrs {
        let mut s = TcpStream::connect(addr).expect("connect");
        let _ = s.write_all(b"GET / HTTP/1.1\r\n\r\n garbage that is not a frame");
        let mut s = TcpStream::connect(addr).expect("connect");
        let mut huge = b"SHF1".to_vec();
        huge.extend_from_slice(&[0xff; 60]);
        let _ = s.write_all(&huge);
    }
    // Each OSD also accepts on its local socket (decision 0027), and this client and the OSDs'
    // replication reached it there: /proc/net/unix lists the listener and every connection it
    // accepted under the socket's name. The same garbage on it closes only that connection.
    use std::os::linux::net::SocketAddrExt;
    let unix_sockets = std::fs::read_to_string("/proc/net/unix").expect("/proc/net/unix");
    for (&osd, _) in map.osds.iter() {
        let name = shoal_client::local::osd_socket_name(&map.fsid, osd).expect("socket name");
        let entries = unix_sockets.lines().filter(|l| l.ends_with(&format!(" @{name}"))).count();
        assert!(entries >= 2, "{osd}: {entries} sockets named @{name}, expected the listener and connections");
        let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).expect("abstract name");
        let mut s = std::os::unix::net::UnixStream::connect_addr(&addr).expect("connect local");
        let _ = s.write_all(b"\0\0\0\0not a frame at all, over the local socket");
    }
    let still = rt.block_on(client.op("data", "obj-7", vec![ObjOp::Stat], vec![])).expect("cluster still serves");
    assert_eq!(still.outputs.len(), 1);

    // The CLI's object commands.
    let src = tmp.path().join("in.bin");
    std::fs::write(&src, content(5)).expect("write input");
    ok(&shoal(&dir, &["obj", "put", "--pool", "data", "cli-obj", &src.display().to_string()]));
    let got = tmp.path().join("out.bin");
    ok(&shoal(&dir, &["obj", "get", "--pool", "data", "cli-obj", "-o", &got.display().to_string()]));
    assert_eq!(std::fs::read(&got).expect("read output"), content(5));
    let stat: serde_json::Value =
        serde_json::from_str(&ok(&shoal(&dir, &["obj", "stat", "--pool", "data", "cli-obj", "--json"]))).expect("json");
    assert_eq!(stat["size_bytes"], size_of(5) as u64);
    ok(&shoal(&dir, &["obj", "rm", "--pool", "data", "cli-obj"]));
    fails_with(&shoal(&dir, &["obj", "get", "--pool", "data", "cli-obj"]), "does not exist");
    let status: serde_json::Value =
        serde_json::from_str(&ok(&shoal(&dir, &["status", "--json"]))).expect("status json");
    assert_eq!(status["osds"]["up"], 3);
    assert_eq!(status["health"], "HEALTH_OK", "{status}");
    let tree = ok(&shoal(&dir, &["osd", "tree"]));
    assert!(tree.contains("host-2") && tree.contains("osd.2"), "{tree}");

    // Where placement says each object lives, at the final map.
    let pool = map.pool_by_name("data").expect("pool").clone();
    let mut expected: BTreeMap<u32, BTreeSet<(String, String)>> = BTreeMap::new();
    for i in 0..1000u64 {
        let name = format!("obj-{i}");
        let loc = map.locate(pool.id, &name).expect("locate");
        assert_eq!(loc.osds.len(), 3);
        let hosts: BTreeSet<_> = loc.osds.iter().map(|o| map.osds[o].host.clone()).collect();
        assert_eq!(hosts.len(), 3, "{name} replicas on distinct hosts");
        for osd in loc.osds {
            expected.entry(osd.0).or_default().insert((shoal_osd::exec::pg_collection(loc.pg), name.clone()));
        }
    }
    drop(client);
    drop(rt);
    ok(&shoal(&dir, &["down", "--dir", &d, "--keep"]));

    // Offline, each OSD's store holds exactly the objects placement names, byte-exact, and
    // every replica of a PG holds the same PG log (one entry per write, in the same order).
    let mut logs: BTreeMap<String, Vec<Vec<shoal_osd::pglog::LogEntry>>> = BTreeMap::new();
    for osd in 0..3u32 {
        let store = shoal_store::open(&dir.join(format!("osd.{osd}"))).expect("open OSD store");
        let mut found = BTreeSet::new();
        for coll in store.list_collections().expect("collections") {
            if let Some(rest) = coll.strip_prefix("pglog.") {
                let pg: shoal_map::PgId = rest.parse().expect("pglog.POOL.SEED");
                let entries = shoal_osd::pglog::read_entries(&*store, pg).expect("read PG log");
                // Every PG of the data pool took writes; the S3 gateway's pools (which `up` makes)
                // may have PGs that peered but hold nothing yet.
                assert!(entries.len() <= shoal_osd::pglog::MAX_LOG_ENTRIES, "{coll}");
                assert!(pg.pool != pool.id || !entries.is_empty(), "{coll} of the data pool has an empty log");
                logs.entry(coll.clone()).or_default().push(entries);
                continue;
            }
            if !coll.starts_with(&format!("pg.{}.", pool.id)) {
                continue;
            }
            let mut after: Option<String> = None;
            loop {
                let page = store.list_objects(&coll, "", after.as_deref(), 1000).expect("list");
                for obj in page.objects {
                    found.insert((coll.clone(), obj));
                }
                match page.next {
                    Some(n) => after = Some(n),
                    None => break,
                }
            }
        }
        assert_eq!(
            found,
            expected.remove(&osd).unwrap_or_default(),
            "osd.{osd} holds other objects than placement names"
        );
        for (coll, obj) in found.iter().step_by(37) {
            let i: u64 = obj.trim_start_matches("obj-").parse().expect("name");
            assert!(store.read_all(coll, obj).expect("read") == content(i), "osd.{osd} {obj} differs");
        }
        let report = store.fsck().expect("fsck");
        assert!(report.is_clean(), "osd.{osd}: {report:?}");
    }
    assert!(!logs.is_empty(), "no PG logs found");
    for (coll, replicas) in &logs {
        assert_eq!(replicas.len(), 3, "{coll} is on {} OSDs, not 3", replicas.len());
        assert!(replicas.iter().all(|r| r == &replicas[0]), "replicas of {coll} hold different logs");
    }

    // `up` on the stopped cluster restarts it with its data; a non-cluster directory is refused.
    let again = ok(&shoal(tmp.path(), &["up", "--dir", &d]));
    assert!(again.contains("restarting"), "{again}");
    for i in [0u64, 1, 999] {
        let out = tmp.path().join(format!("again-{i}"));
        ok(&shoal(&dir, &["obj", "get", "--pool", "data", &format!("obj-{i}"), "-o", &out.display().to_string()]));
        assert!(std::fs::read(&out).expect("read") == content(i), "obj-{i} after restart");
    }
    // `shoal bench` loads a set of a given count under a prefix and reads that set back.
    let json = |out: String| -> serde_json::Value { serde_json::from_str(&out).expect("bench json") };
    let load =
        ["bench", "--pool", "data", "write", "-b", "4K", "--objects", "7", "--prefix", "load_", "--seconds", "60"];
    let wrote = json(ok(&shoal(&dir, &[&load[..], &["--json"]].concat())));
    assert_eq!((wrote["ops"].as_u64(), wrote["errors"].as_u64()), (Some(7), Some(0)), "{wrote}");
    let listed = ok(&shoal(&dir, &["obj", "ls", "--pool", "data"]));
    assert_eq!(listed.lines().filter(|l| l.starts_with("load_")).count(), 7, "{listed}");
    let read =
        json(ok(&shoal(&dir, &["bench", "--pool", "data", "seq", "--prefix", "load_", "--seconds", "1", "--json"])));
    assert!(read["ops"].as_u64().is_some_and(|n| n >= 7) && read["errors"] == 0, "{read}");
    assert!(read.get("timeline").is_none(), "a timeline only when asked for: {read}");
    // `--timeline`: one entry per second, together holding every operation, each consistent.
    let timed = ["bench", "--pool", "data", "seq", "--prefix", "load_", "--seconds", "2", "--json", "--timeline"];
    let timed = json(ok(&shoal(&dir, &timed)));
    let seconds = timed["timeline"].as_array().expect("timeline");
    assert!(seconds.len() >= 2, "{timed}");
    let per_second: Vec<u64> = seconds.iter().map(|s| s["ops"].as_u64().expect("ops")).collect();
    assert_eq!(per_second.iter().sum::<u64>(), timed["ops"].as_u64().expect("ops"), "{timed}");
    for (i, s) in seconds.iter().enumerate() {
        assert_eq!(s["second"].as_u64(), Some(i as u64), "{s}");
        let (p50, p99, max) = (s["lat_ms_p50"].as_f64(), s["lat_ms_p99"].as_f64(), s["lat_ms_max"].as_f64());
        assert!(p50 <= p99 && p99 <= max && max <= timed["lat_ms_max"].as_f64(), "{s} in {timed}");
    }
    fails_with(
        &shoal(&dir, &["bench", "--pool", "data", "seq", "--objects", "3"]),
        "--objects applies to `write` only",
    );
    fails_with(&shoal(&dir, &["bench", "--pool", "data", "write", "--prefix", &long]), "longer than 255 bytes");
    ok(&shoal(&dir, &["down", "--dir", &d, "--keep"]));
    let other = tmp.path().join("other");
    std::fs::create_dir_all(&other).expect("mkdir");
    std::fs::write(other.join("precious"), b"x").expect("write");
    fails_with(&shoal(tmp.path(), &["up", "--dir", &other.display().to_string()]), "holds no Shoal cluster");
    assert!(other.join("precious").exists());
}

/// `shoal down` kills a daemon that does not stop on SIGTERM (here an OSD stopped with SIGSTOP)
/// once the grace has passed, says so in `--json`, and returns only once it has exited: its store
/// opens at once, without "store is in use".
#[test]
fn down_kills_a_daemon_that_does_not_stop_and_returns_once_its_store_is_free() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (dir, _down) = common::up_block(tmp.path(), 2, "256M");
    let pid: i32 = std::fs::read_to_string(dir.join("osd.1.pid")).expect("pid file").trim().parse().expect("pid");
    // SAFETY: kill(2) with a pid read from the cluster's own pid file.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGSTOP) }, 0, "stop osd.1");
    let started = std::time::Instant::now();
    let out = ok(&shoal(&dir, &["down", "--dir", &dir.display().to_string(), "--keep", "--json"]));
    let doc: serde_json::Value = serde_json::from_str(&out).expect("down --json");
    assert_eq!(doc["killed"], serde_json::json!(["osd.1"]), "{doc}");
    assert!(started.elapsed() >= std::time::Duration::from_secs(5), "killed before the grace: {doc}");
    assert!(!dir.join("osd.1.pid").exists(), "the killed OSD's pid file is left");
    for osd in 0..2 {
        common::fsck_and_open_store(&dir, osd);
    }
}
