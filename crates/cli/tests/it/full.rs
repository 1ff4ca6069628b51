//! A cluster filling up: `shoal status` warns when an OSD is nearly full, the monitors flag it
//! full from its reports, primaries then refuse writes that need space with an error naming the
//! OSD (before any replica runs out mid-write), every acknowledged object stays readable, removals
//! still work, and writes are taken again once space is freed. Backfill after an OSD goes out
//! stops short of filling the OSDs left (`backfill_toofull`) instead of flagging them full.

use crate::common;

use std::time::{Duration, Instant};

use common::{ok, shoal};
use shoal_client::ClientError;
use shoal_proto::ErrorCode;
use shoal_proto::osd::ObjOp;

const MIB: usize = 1 << 20;

fn status(dir: &std::path::Path) -> serde_json::Value {
    serde_json::from_str(&ok(&shoal(dir, &["status", "--json"]))).expect("status json")
}

/// Polls `shoal status --json` until `pred` holds (OSDs report once a second), for at most 15 s.
fn wait_for_status(dir: &std::path::Path, what: &str, pred: impl Fn(&serde_json::Value) -> bool) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let s = status(dir);
        if pred(&s) {
            return s;
        }
        assert!(Instant::now() < deadline, "status never showed {what}: {s}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn problems(s: &serde_json::Value) -> Vec<String> {
    s["problems"]
        .as_array()
        .map(|a| a.iter().filter_map(|p| p.as_str().map(String::from)).collect())
        .unwrap_or_default()
}

#[test]
fn a_filling_cluster_warns_then_refuses_writes_without_losing_data() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (dir, _down) = common::up_mem(tmp.path(), 3, "128M");
    // Size 3 on 3 OSDs: every OSD holds every object, so all three fill together.
    ok(&shoal(&dir, &["pool", "create", "rep", "--size", "3", "--pg-num", "8"]));

    let (rt, client) = common::admin_client(&dir);
    let value = |i: usize, len: usize| {
        (0..len).map(|b| (b as u32).wrapping_mul(31).wrapping_add(i as u32) as u8).collect::<Vec<u8>>()
    };
    let write = |name: &str, data: Vec<u8>| {
        let op = ObjOp::WriteFull { len_bytes: data.len() as u64 };
        rt.block_on(client.op("rep", name, vec![op], data))
    };
    let mut stored: Vec<(String, Vec<u8>)> = Vec::new();

    // 27 objects of 4 MiB: 108 MiB of 128 MiB (84%), then 1 MiB more crosses the 85% warning.
    for i in 0..27 {
        let (name, data) = (format!("big{i}"), value(i, 4 * MIB));
        write(&name, data.clone()).unwrap_or_else(|e| panic!("write {name}: {e}"));
        stored.push((name, data));
    }
    let (name, data) = ("mid".to_string(), value(99, 2 * MIB));
    write(&name, data.clone()).unwrap_or_else(|e| panic!("write {name}: {e}"));
    stored.push((name, data));
    let s = wait_for_status(&dir, "a nearfull warning", |s| problems(s).iter().any(|p| p.contains("nearfull")));
    assert_eq!(s["health"], "HEALTH_WARN", "{s}");

    // Small paced writes until an OSD's report shows 95% used (reports come once a second, so at
    // most a few writes land past the line, far from the store's own limit), then wait for the
    // monitors' flag: the next write must be refused by the flag, naming an OSD, however slow
    // this machine is.
    let monc = client.mon().clone();
    let over_full = || {
        let status = rt.block_on(monc.status()).expect("status");
        status.osd_stats.iter().any(|s| shoal_map::used_permille(s.used_bytes, s.capacity_bytes) >= 950)
    };
    let mut refused = None;
    for i in 0..200 {
        let (name, data) = (format!("small{i}"), value(1000 + i, 256 << 10));
        match write(&name, data.clone()) {
            Ok(_) => stored.push((name, data)),
            // The flag arrived between two of our checks: that is the refusal we wait for.
            Err(ClientError::Remote(e)) if e.code == ErrorCode::NoSpace && e.message.contains("is full") => {
                refused = Some(e);
                break;
            }
            Err(e) => panic!("write {name}: unexpected error {e}"),
        }
        if over_full() {
            let deadline = Instant::now() + Duration::from_secs(15);
            while !monc.map().osds.values().any(|o| o.full) {
                assert!(Instant::now() < deadline, "the monitors never flagged a full OSD");
                std::thread::sleep(Duration::from_millis(100));
            }
            match write("refused", value(2000, 256 << 10)) {
                Err(ClientError::Remote(e)) => refused = Some(e),
                other => panic!("a write to a full cluster was not refused: {other:?}"),
            }
            break;
        }
        std::thread::sleep(Duration::from_millis(150));
    }
    let e = refused.expect("no OSD ever reported 95% used");
    assert_eq!(e.code, ErrorCode::NoSpace, "{e}");
    assert!(e.message.contains("is full") && e.message.contains("osd."), "the error names the full OSD: {e}");
    let s = status(&dir);
    assert_eq!(s["health"], "HEALTH_ERR", "{s}");
    assert!(problems(&s).iter().any(|p| p.contains("is full")), "{s}");
    let tree: serde_json::Value = serde_json::from_str(&ok(&shoal(&dir, &["osd", "tree", "--json"]))).expect("json");
    let mut flagged =
        tree["hosts"].as_array().into_iter().flatten().flat_map(|h| h["osds"].as_array().into_iter().flatten());
    assert!(flagged.any(|o| o["full"] == true), "osd tree shows the full flag: {tree}");
    let df: serde_json::Value = serde_json::from_str(&ok(&shoal(&dir, &["osd", "df", "--json"]))).expect("json");
    let rows = df["osds"].as_array().expect("osds");
    assert_eq!(rows.len(), 3, "{df}");
    assert!(
        rows.iter().any(|o| o["full"] == true && o["used_percent"].as_f64().is_some_and(|p| p >= 95.0)),
        "osd df shows a full OSD at 95% or more: {df}"
    );
    // The CLI reports the same refusal by name.
    let file = tmp.path().join("one-mib");
    std::fs::write(&file, vec![7u8; MIB]).expect("write file");
    let out = shoal(&dir, &["obj", "put", "--pool", "rep", "late", &file.display().to_string()]);
    assert!(!out.status.success(), "a put into a full cluster must fail");
    assert!(String::from_utf8_lossy(&out.stderr).contains("is full"), "{}", String::from_utf8_lossy(&out.stderr));

    // Nothing acknowledged was lost.
    for (name, data) in &stored {
        let read = vec![ObjOp::Read { offset: 0, len_bytes: u64::MAX }];
        let got = rt.block_on(client.op("rep", name, read, vec![])).unwrap_or_else(|e| panic!("read {name}: {e}"));
        assert!(got.data == *data, "{name} changed while the cluster filled up");
    }

    // Removing objects is how a user gets out; once usage falls below the clearing threshold the
    // monitors clear the flag and writes are taken again.
    for i in 0..6 {
        ok(&shoal(&dir, &["obj", "rm", "--pool", "rep", &format!("big{i}")]));
    }
    let s = wait_for_status(&dir, "the full flag cleared", |s| s["health"] != "HEALTH_ERR");
    assert!(!problems(&s).iter().any(|p| p.contains("is full")), "{s}");
    write("after", value(7, MIB)).expect("a write after space was freed");
}

#[test]
fn removing_a_pool_asks_for_confirmation_then_gives_its_space_back() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (dir, _down) = common::up_mem(tmp.path(), 2, "256M");
    ok(&shoal(&dir, &["pool", "create", "scratch", "--size", "2", "--pg-num", "8"]));
    let file = tmp.path().join("one-mib");
    std::fs::write(&file, vec![3u8; MIB]).expect("write file");
    for i in 0..24 {
        ok(&shoal(&dir, &["obj", "put", "--pool", "scratch", &format!("o{i}"), &file.display().to_string()]));
    }
    let used = |s: &serde_json::Value| s["total"]["used_bytes"].as_u64().unwrap_or(0);
    let df = |dir: &std::path::Path| -> serde_json::Value {
        serde_json::from_str(&ok(&shoal(dir, &["osd", "df", "--json"]))).expect("df json")
    };
    let deadline = Instant::now() + Duration::from_secs(15);
    while used(&df(&dir)) < 48 * MIB as u64 {
        assert!(Instant::now() < deadline, "usage never showed the pool's data: {}", df(&dir));
        std::thread::sleep(Duration::from_millis(200));
    }

    // Without the confirmation nothing happens; an unknown pool is named either way.
    common::fails_with(&shoal(&dir, &["pool", "rm", "scratch"]), "--yes-i-really-mean-it");
    common::fails_with(&shoal(&dir, &["pool", "rm", "nope"]), "does not exist");
    ok(&shoal(&dir, &["obj", "stat", "--pool", "scratch", "o0"]));

    ok(&shoal(&dir, &["pool", "rm", "scratch", "--yes-i-really-mean-it"]));
    common::fails_with(&shoal(&dir, &["obj", "stat", "--pool", "scratch", "o0"]), "scratch");
    // Every OSD purges the pool's collections in the background; usage falls back to nothing.
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let s = df(&dir);
        if used(&s) < MIB as u64 {
            break;
        }
        assert!(Instant::now() < deadline, "the deleted pool's space never came back: {s}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn backfill_after_an_osd_goes_out_stops_short_of_filling_the_others() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (dir, _down) = common::up_mem(tmp.path(), 3, "128M");
    ok(&shoal(&dir, &["pool", "create", "rep", "--size", "2", "--pg-num", "32"]));
    let (rt, client) = common::admin_client(&dir);
    let monc = client.mon().clone();
    let capacity = loop {
        let status = rt.block_on(monc.status()).expect("status");
        if status.osd_stats.len() == 3 {
            break status.osd_stats.iter().map(|s| s.capacity_bytes).min().unwrap_or(0);
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(capacity > 64 * MIB as u64, "capacity {capacity}");
    // Two copies of 95% of one OSD's capacity: about 63% of each of the three OSDs now, and more
    // than the two left can take once one goes out (95% of each).
    let count = (capacity * 95 / 100).div_ceil(MIB as u64) as usize;
    let value =
        |i: usize| (0..MIB).map(|b| (b as u32).wrapping_mul(13).wrapping_add(i as u32) as u8).collect::<Vec<u8>>();
    let write = |name: &str, data: Vec<u8>| {
        let op = ObjOp::WriteFull { len_bytes: data.len() as u64 };
        rt.block_on(client.op("rep", name, vec![op], data))
    };
    for i in 0..count {
        write(&format!("o{i}"), value(i)).unwrap_or_else(|e| panic!("write o{i}: {e}"));
    }
    wait_for_status(&dir, "every PG clean", |s| s["health"] == "HEALTH_OK");

    ok(&shoal(&dir, &["osd", "out", "2"]));
    let s = wait_for_status(&dir, "backfill_toofull", |s| {
        problems(s).iter().any(|p| p.contains("backfill_toofull")) && problems(s).iter().any(|p| p.contains("nearfull"))
    });
    assert_eq!(s["health"], "HEALTH_WARN", "waiting backfill is a warning, not an error: {s}");
    // The OSDs left stop below the backfillfull share: neither is flagged full, so every PG still
    // takes writes, and everything written reads back.
    std::thread::sleep(Duration::from_secs(2));
    let reports = rt.block_on(monc.status()).expect("status");
    for stats in reports.osd_stats.iter().filter(|s| s.osd.0 != 2) {
        let permille = shoal_map::used_permille(stats.used_bytes, stats.capacity_bytes);
        assert!(permille < shoal_map::BACKFILLFULL_PERMILLE, "{} filled to {permille}‰ by backfill", stats.osd);
    }
    assert!(!monc.map().osds.values().any(|o| o.full), "an OSD was flagged full");
    write("during", value(count)).expect("a write while backfill waits");
    for i in (0..count).step_by(7) {
        let read = vec![ObjOp::Read { offset: 0, len_bytes: u64::MAX }];
        let got =
            rt.block_on(client.op("rep", &format!("o{i}"), read, vec![])).unwrap_or_else(|e| panic!("read o{i}: {e}"));
        assert!(got.data == value(i), "o{i} changed");
    }
    // With the OSD back in, its PGs return to members that hold their data and become clean.
    ok(&shoal(&dir, &["osd", "in", "2"]));
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let s = status(&dir);
        if s["health"] == "HEALTH_OK" {
            break;
        }
        assert!(Instant::now() < deadline, "the cluster never became healthy again: {s}");
        std::thread::sleep(Duration::from_millis(500));
    }
}
