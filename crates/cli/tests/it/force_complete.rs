//! An operator forces a PG past the history of an OSD whose disk is lost (decision 0078), with
//! real processes: two copies, `min_size` 1, the only OSD the PG's last activation names loses its
//! store, and `shoal pg force-complete` brings the PG back from the copy the other OSD holds.

use crate::common;

use std::time::{Duration, Instant};

use common::{fails_with, json, ok, shoal};
use shoal_map::{OsdId, PgId};
use shoal_proto::osd::ObjOp;

/// The state `shoal pg ls` shows for PG `pg`.
fn pg_state(dir: &std::path::Path, pg: &str) -> String {
    let pgs = json(&ok(&shoal(dir, &["pg", "ls", "--pool", "fc", "--json"])));
    let row = pgs["pgs"].as_array().expect("pgs").iter().find(|r| r["pg"] == pg).cloned().expect("the PG's row");
    row["state"].as_str().expect("state").to_string()
}

/// Waits until `shoal pg ls` shows PG `pg` in state `want` (`why` names the step that waits).
fn wait_pg_state(dir: &std::path::Path, pg: &str, want: &str, timeout: Duration, why: &str) {
    let deadline = Instant::now() + timeout;
    loop {
        let state = pg_state(dir, pg);
        if state == want {
            return;
        }
        assert!(Instant::now() < deadline, "PG {pg} is {state}, not {want}, {why}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn a_pg_whose_only_recorded_osd_lost_its_disk_is_forced_back_to_the_copy_left() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (dir, _down) = common::up_block(tmp.path(), 2, "256M");
    ok(&shoal(&dir, &["pool", "create", "fc", "--size", "2", "--min-size", "1", "--pg-num", "1"]));
    // Nothing moves while an OSD is away.
    ok(&shoal(&dir, &["osd", "set", "noout"]));
    let (rt, client) = common::admin_client(&dir);
    let put = |data: &[u8]| {
        let ops = vec![ObjOp::WriteFull { len_bytes: data.len() as u64 }];
        rt.block_on(client.op("fc", "obj", ops, data.to_vec())).expect("write");
    };
    put(b"left on both");
    let shown = json(&ok(&shoal(&dir, &["osd", "map", "fc", "obj", "--json"])));
    let acting: Vec<u32> =
        shown["acting"].as_array().expect("acting").iter().map(|o| o.as_u64().unwrap() as u32).collect();
    let pg = shown["pg"].as_str().expect("pg").to_string();
    let pg_id = PgId { pool: client.mon().map().pool_by_name("fc").expect("pool").id, seed: 0 };
    let (lost, left) = (acting[0], acting[1]);

    // The other OSD goes away; the PG goes on with one copy, and its record names that OSD only.
    common::sigkill(&dir, &format!("osd.{left}"));
    common::wait_osd(&client, left, false, Duration::from_secs(30));
    put(b"only on the lost disk");
    let deadline = Instant::now() + Duration::from_secs(30);
    while client.mon().map().pg_active.get(&pg_id).is_none_or(|r| r.members != vec![OsdId(lost)]) {
        assert!(Instant::now() < deadline, "the PG's record never named osd.{lost} alone");
        std::thread::sleep(Duration::from_millis(100));
    }

    // That OSD's disk is lost: it comes back on an empty store, and the other OSD comes back.
    common::sigkill(&dir, &format!("osd.{lost}"));
    common::wait_osd(&client, lost, false, Duration::from_secs(30));
    std::fs::remove_dir_all(dir.join(format!("osd.{lost}"))).expect("remove the store");
    let mut fresh = common::start_block_osd(&dir, lost, "256M", &[]);
    let mut back = common::start_block_osd(&dir, left, "256M", &[]);
    common::wait_osd(&client, lost, true, Duration::from_secs(30));
    common::wait_osd(&client, left, true, Duration::from_secs(30));
    wait_pg_state(&dir, &pg, "incomplete", Duration::from_secs(60), "once its recorded OSD lost its disk");

    // Forcing it asks to be sure and names what is lost; then the PG goes on from the copy left.
    fails_with(&shoal(&dir, &["pg", "force-complete", &pg]), &format!("only osd.{lost} held"));
    let forced = json(&ok(&shoal(&dir, &["pg", "force-complete", &pg, "--yes-i-really-mean-it", "--json"])));
    assert!(forced["state"].as_str().is_some_and(|s| s.starts_with("active")), "{forced}");
    assert_eq!(forced["given_up"]["members"], serde_json::json!([lost]), "{forced}");
    let read = vec![ObjOp::Read { offset: 0, len_bytes: u64::MAX }];
    let got = rt.block_on(client.op("fc", "obj", read, vec![])).expect("read after forcing");
    assert_eq!(got.data.as_slice(), b"left on both", "the PG went on from the copy left");
    ok(&shoal(&dir, &["osd", "unset", "noout"]));
    // (The PGs of the cluster's other pool were last activated on that OSD alone too: they stay
    // incomplete, each for the operator to decide on; only this one is checked.)
    wait_pg_state(&dir, &pg, "active+clean", Duration::from_secs(120), "after forcing");
    fails_with(&shoal(&dir, &["pg", "force-complete", &pg, "--yes-i-really-mean-it"]), "not incomplete or down");

    drop(client);
    drop(rt);
    ok(&shoal(&dir, &["down", "--dir", &dir.display().to_string()]));
    // `shoal down` stopped the restarted OSDs too (by their pid files): reap them.
    fresh.wait().expect("the OSD on the new disk exits");
    back.wait().expect("the returning OSD exits");
}
