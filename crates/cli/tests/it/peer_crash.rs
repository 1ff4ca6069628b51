//! A crashed peer: an OSD of a size-3 pool is killed with SIGKILL in the middle of a stream of
//! writes. The monitors notice its silence and mark it down, PGs get new acting sets, and every
//! write still completes (the client waits for the new map and resends); what was written after
//! the crash reads back exactly, and so does everything written before it: peering and recovery
//! bring every new member the objects it lacks, until `shoal pg ls` shows every member of every PG
//! agreeing on its last update and object count. Appends go on through the crash too: the client
//! resends them, and each lands exactly once. The monitors mark the dead OSD out after the
//! down-out interval, set short here with `shoal config set`. First, an OSD marked down while it
//! runs boots again by itself.

use crate::common;

use std::time::{Duration, Instant};

use common::{Down, ok, shoal};
use shoal_client::{Client, ClusterConfig};
use shoal_proto::osd::ObjOp;

#[test]
fn writes_survive_a_killed_osd() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("c");
    let d = dir.display().to_string();
    ok(&shoal(tmp.path(), &["up", "--dir", &d, "--osds", "4", "--backend", "mem", "--osd-size", "1G", "--no-gateway"]));
    let _down = Down(dir.clone());
    ok(&shoal(&dir, &["pool", "create", "rep", "--size", "3", "--min-size", "2", "--pg-num", "16"]));
    // The default pool has one replica in RAM: its PGs on the killed OSD would rightly stay down.
    ok(&shoal(&dir, &["pool", "rm", "data", "--yes-i-really-mean-it"]));
    let refused = shoal(&dir, &["osd", "rm", "2"]);
    assert!(!refused.status.success() && String::from_utf8_lossy(&refused.stderr).contains("osd.2 is up"));
    let bad = shoal(&dir, &["config", "set", "mon_osd_down_out_interval", "3"]);
    assert!(!bad.status.success() && String::from_utf8_lossy(&bad.stderr).contains("mon_osd_down_out_interval_secs"));
    ok(&shoal(&dir, &["config", "set", "mon_osd_down_out_interval_secs", "3"]));
    let got = ok(&shoal(&dir, &["config", "get", "mon_osd_down_out_interval_secs", "--json"]));
    assert!(got.contains("\"value\":3"), "{got}");

    let cfg = ClusterConfig::from_conf_file(&dir.join("shoal.toml"), "client.admin").expect("conf");
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("rt");
    rt.block_on(async {
        let client = Client::connect(cfg).await.expect("connect");
        // A running OSD wrongly marked down (as after a partition from the monitors) boots again.
        let osd1 = shoal_map::OsdId(1);
        let before = client.mon().map().osds[&osd1].up_from;
        client.mon().command(shoal_map::Command::OsdDown { id: osd1 }).await.expect("mark osd.1 down");
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let map = client.mon().map();
            if map.osds[&osd1].up && map.osds[&osd1].up_from > before {
                break;
            }
            assert!(Instant::now() < deadline, "osd.1 did not boot again after being marked down");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let value = |i: u32| i.to_le_bytes().repeat(1024);
        let started = Instant::now();
        for i in 0..120u32 {
            if i == 40 {
                common::sigkill(&dir, "osd.2");
            }
            let op = ObjOp::WriteFull { len_bytes: 4096 };
            client.op("rep", &format!("o{i}"), vec![op], value(i)).await.unwrap_or_else(|e| panic!("write o{i}: {e}"));
            let append = ObjOp::Append { len_bytes: 4 };
            let log = format!("log{}", i % 8);
            client
                .op("rep", &log, vec![append], i.to_le_bytes().to_vec())
                .await
                .unwrap_or_else(|e| panic!("append {i}: {e}"));
        }
        // The monitors marked it down (after their grace period) and the writes went on.
        let map = client.mon().map();
        assert!(!map.osds[&shoal_map::OsdId(2)].up, "osd.2 still up in epoch {}", map.epoch);
        assert!(started.elapsed() < Duration::from_secs(30));
        for i in 0..120u32 {
            let read = vec![ObjOp::Read { offset: 0, len_bytes: u64::MAX }];
            let got = client.op("rep", &format!("o{i}"), read, vec![]).await.expect("read").data;
            assert_eq!(got, value(i), "o{i}");
        }
        // Each append landed once, in order, the resent ones included.
        for l in 0..8u32 {
            let read = vec![ObjOp::Read { offset: 0, len_bytes: u64::MAX }];
            let got = client.op("rep", &format!("log{l}"), read, vec![]).await.expect("read log").data;
            let want: Vec<u8> = (0..120u32).filter(|i| i % 8 == l).flat_map(u32::to_le_bytes).collect();
            assert_eq!(got, want, "log{l}");
        }
        // Down, then out after the interval (3 s, counted from when the monitors saw it down).
        let deadline = Instant::now() + Duration::from_secs(30);
        while client.mon().map().osds[&shoal_map::OsdId(2)].in_cluster {
            assert!(Instant::now() < deadline, "osd.2 was not marked out");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    let status: serde_json::Value = serde_json::from_str(&ok(&shoal(&dir, &["status", "--json"]))).expect("json");
    assert_eq!(status["osds"]["up"], 3, "{status}");

    // Recovery gives every new member the objects written before it joined: within a bounded
    // time, every PG's three members agree on their last update and object count.
    let deadline = Instant::now() + Duration::from_secs(60);
    let pgs = loop {
        let pgs: serde_json::Value =
            serde_json::from_str(&ok(&shoal(&dir, &["pg", "ls", "--pool", "rep", "--json"]))).expect("pg ls json");
        if pgs["diverged"] == 0 || Instant::now() > deadline {
            break pgs;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let rows = pgs["pgs"].as_array().expect("pgs");
    assert_eq!(rows.len(), 16, "{pgs}");
    assert_eq!(pgs["diverged"], 0, "members still disagree after recovery: {pgs}");
    let mut objects = 0;
    for row in rows {
        let members = row["members"].as_array().expect("members");
        assert_eq!(members.len(), 3, "{row}");
        assert!(members.iter().all(|m| m["osd"] != 2), "the dead OSD is in an acting set: {row}");
        assert!(members.iter().all(|m| m["last_update"] == members[0]["last_update"]), "{row}");
        assert!(members.iter().all(|m| m["objects"] == members[0]["objects"]), "{row}");
        objects += members[0]["objects"].as_u64().expect("objects");
    }
    assert_eq!(objects, 128, "every object is on its PG's three members: {pgs}");

    // The primaries report every PG active+clean, with nothing left to recover.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let status: serde_json::Value = serde_json::from_str(&ok(&shoal(&dir, &["status", "--json"]))).expect("json");
        let total = status["pgs"]["count"].as_u64().expect("pg count");
        let clean = status["pgs"]["by_state"]["active+clean"].as_u64().unwrap_or(0);
        if clean == total && status["recovery"]["degraded_objects"] == 0 && status["recovery"]["misplaced_objects"] == 0
        {
            assert_eq!(status["recovery"]["unfound_objects"], 0, "{status}");
            break;
        }
        assert!(Instant::now() < deadline, "PGs not reported active+clean: {status}");
        std::thread::sleep(Duration::from_millis(250));
    }
    // `pg ls` shows the state each primary reports.
    let pgs: serde_json::Value =
        serde_json::from_str(&ok(&shoal(&dir, &["pg", "ls", "--pool", "rep", "--json"]))).expect("pg ls json");
    for row in pgs["pgs"].as_array().expect("pgs") {
        assert_eq!(row["state"], "active+clean", "{row}");
        assert_eq!(row["members_agree"], true, "{row}");
    }
    // Down, out and clean elsewhere: it may go for good.
    ok(&shoal(&dir, &["osd", "rm", "2"]));
    let tree = ok(&shoal(&dir, &["osd", "tree", "--json"]));
    assert!(!tree.contains("\"id\":2,"), "{tree}");
}
