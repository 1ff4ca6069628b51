//! Peers report an OSD they cannot reach (decision 0062), with real processes: four OSDs on four
//! hosts of the map, a peer grace of 1 s (`SHOAL_PEER_GRACE_MS`, which `shoal up` passes on to
//! its OSDs). One OSD is stopped with SIGSTOP: its peers' pings go unanswered, they name it in
//! their reports, and the monitor marks it down on those reports — well before its own 5 s grace
//! for the OSD's silence would — so writes to its PGs go on without it. Resumed with SIGCONT, it
//! finds itself down, reaches its peers again, boots, and the cluster ends clean with every write
//! readable.

use crate::common;

use std::time::{Duration, Instant};

use common::{Down, admin_client, ok, shoal_env, wait_clean};
use shoal_proto::osd::ObjOp;

fn signal(dir: &std::path::Path, name: &str, sig: i32) {
    let pid: i32 =
        std::fs::read_to_string(dir.join(format!("{name}.pid"))).expect("pid file").trim().parse().expect("pid");
    // SAFETY: kill(2) with a pid read from the cluster's own pid file.
    assert_eq!(unsafe { libc::kill(pid, sig) }, 0, "signal {sig} to {name}");
}

/// Sends SIGCONT to osd.3 when dropped.
struct Resume(std::path::PathBuf);

impl Drop for Resume {
    fn drop(&mut self) {
        signal(&self.0, "osd.3", libc::SIGCONT);
    }
}

#[test]
fn an_osd_its_peers_cannot_reach_is_marked_down_on_their_reports() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("c");
    let d = dir.display().to_string();
    let env = [("SHOAL_PEER_GRACE_MS", "1000")];
    let up = ["up", "--dir", &d, "--osds", "4", "--backend", "mem", "--osd-size", "1G", "--no-gateway"];
    ok(&shoal_env(tmp.path(), &up, &env));
    let _down = Down(dir.clone());
    let shoal = |args: &[&str]| shoal_env(&dir, args, &[]);
    ok(&shoal(&["pool", "create", "rep", "--size", "3", "--min-size", "2", "--pg-num", "16"]));
    ok(&shoal(&["pool", "rm", "data", "--yes-i-really-mean-it"]));
    let (rt, client) = admin_client(&dir);
    let value = |i: u32| i.to_le_bytes().repeat(1024);
    let write = |i: u32| {
        let op = ObjOp::WriteFull { len_bytes: 4096 };
        rt.block_on(client.op("rep", &format!("o{i}"), vec![op], value(i)))
            .unwrap_or_else(|e| panic!("write o{i}: {e}"));
    };
    for i in 0..40 {
        write(i);
    }

    // Markdowns of osd.3 on reports so far (none, unless a worker stalled past the grace while
    // the cluster started: the count must rise past what it was now).
    const REPORTED: &str = "peers on distinct hosts report it unreachable: marking down osd=osd.3";
    let reported = |dir: &std::path::Path| {
        std::fs::read_to_string(dir.join("mon.0.log")).expect("monitor log").matches(REPORTED).count()
    };
    wait_clean(&dir, 4, Duration::from_secs(60));
    let before = reported(&dir);
    signal(&dir, "osd.3", libc::SIGSTOP);
    // Resumed whatever happens, or stopping the cluster would wait for it for ever.
    let _resume = Resume(dir.clone());
    let stopped = Instant::now();
    // Writes go on: those to osd.3's PGs wait until it is marked down, then its PGs peer without
    // it. Among them, writes sent to osd.3 as their primary (the client gives the call up when
    // the map moves the PG, and resends to the new primary) and writes whose primary waits for
    // osd.3 as a replica (the primary fails them when the map marks it down; the client resends
    // and is answered from the PG log), all in flight at once.
    let map = client.mon().map();
    let pool = map.pool_by_name("rep").expect("pool").id;
    let role = |i: u32| {
        let osds = map.locate(pool, &format!("o{i}")).expect("locate").osds;
        osds.iter().position(|o| *o == shoal_map::OsdId(3))
    };
    let led: Vec<u32> = (40..400).filter(|i| role(*i) == Some(0)).take(3).collect();
    let replicated: Vec<u32> = (40..400).filter(|i| role(*i).is_some_and(|r| r > 0)).take(3).collect();
    assert!(led.len() == 3 && replicated.len() == 3, "osd.3 leads {led:?} and holds {replicated:?}");
    let both: Vec<u32> = led.iter().chain(&replicated).copied().collect();
    rt.block_on(async {
        let mut writes = tokio::task::JoinSet::new();
        for i in &both {
            let op = ObjOp::WriteFull { len_bytes: 4096 };
            let (name, data, client) = (format!("o{i}"), value(*i), client.clone());
            writes.spawn(async move {
                client.op("rep", &name, vec![op], data).await.unwrap_or_else(|e| panic!("write {name}: {e}"))
            });
        }
        while let Some(done) = writes.join_next().await {
            done.expect("write task");
        }
    });
    for i in 40..80 {
        write(i);
    }
    common::wait_osd(&client, 3, false, Duration::from_secs(20));
    let down_after = stopped.elapsed();
    assert!(
        reported(&dir) > before,
        "osd.3 was marked down after {down_after:?}, not on its peers' reports:\n{}",
        std::fs::read_to_string(dir.join("mon.0.log")).unwrap_or_default()
    );

    signal(&dir, "osd.3", libc::SIGCONT);
    common::wait_osd(&client, 3, true, Duration::from_secs(30));
    wait_clean(&dir, 4, Duration::from_secs(60));
    for i in (0..80u32).chain(both) {
        let read = vec![ObjOp::Read { offset: 0, len_bytes: u64::MAX }];
        let got = rt.block_on(client.op("rep", &format!("o{i}"), read, vec![])).expect("read").data;
        assert_eq!(got, value(i), "o{i}");
    }
    let osd_log = std::fs::read_to_string(dir.join("osd.3.log")).expect("osd.3 log");
    assert!(osd_log.contains("booting again"), "osd.3 never booted again:\n{osd_log}");
}
