//! A down OSD keeps its place until it goes out (decision 0050), on real processes with
//! disk-backed stores: four OSDs, a size-3 pool. One OSD is killed with SIGKILL and marked down
//! by the monitors; its PGs go on with their two other members (shorter acting sets, never a
//! replacement), client writes succeed, nothing is backfilled anywhere, and `shoal status` counts
//! each of its objects as one degraded copy. `osd out` then
//! remaps its PGs onto the fourth OSD, which is backfilled, and the cluster is clean without it;
//! every object reads back.

use crate::common;

use std::time::Duration;

use common::{ok, shoal};
use shoal_proto::osd::ObjOp;

const OBJECTS: u32 = 24;

fn content(tag: u64, i: u32) -> Vec<u8> {
    shoal_util::pattern::xorshift_bytes((tag << 32 | u64::from(i)).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1, 8192)
}

/// Lines of the OSD logs in `dir` that say a backfill finished.
fn backfills_finished(dir: &std::path::Path) -> usize {
    (0..4)
        .map(|id| std::fs::read_to_string(dir.join(format!("osd.{id}.log"))).unwrap_or_default())
        .map(|log| log.lines().filter(|l| l.contains("backfill finished")).count())
        .sum()
}

#[test]
fn a_down_osd_keeps_its_place_until_it_goes_out() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (dir, _down) = common::up_block(tmp.path(), 4, "256M");
    ok(&shoal(&dir, &["pool", "create", "keep", "--size", "3", "--min-size", "2", "--pg-num", "8"]));
    let (rt, client) = common::admin_client(&dir);
    let write = |i: u32, tag: u64| {
        let data = content(tag, i);
        let op = ObjOp::WriteFull { len_bytes: data.len() as u64 };
        rt.block_on(client.op("keep", &format!("k{i:02}"), vec![op], data)).unwrap_or_else(|e| panic!("k{i:02}: {e}"));
    };
    for i in 0..OBJECTS {
        write(i, 1);
    }
    common::wait_clean(&dir, 4, Duration::from_secs(60));
    let before = backfills_finished(&dir);
    // Acting sets that hold osd.3 now.
    let acting_of = |i: u32| -> Vec<u64> {
        let shown = common::json(&ok(&shoal(&dir, &["osd", "map", "keep", &format!("k{i:02}"), "--json"])));
        shown["acting"].as_array().expect("acting").iter().map(|o| o.as_u64().expect("id")).collect()
    };
    let with3: Vec<u32> = (0..OBJECTS).filter(|i| acting_of(*i).contains(&3)).collect();
    assert!(!with3.is_empty(), "no object on osd.3");

    common::sigkill(&dir, "osd.3");
    common::wait_osd(&client, 3, false, Duration::from_secs(30));
    // Its PGs run on their two other members: nothing takes its place, and writes go on.
    for i in &with3 {
        let acting = acting_of(*i);
        assert_eq!(acting.len(), 2, "k{i:02} while osd.3 is down: {acting:?}");
        assert!(!acting.contains(&3));
    }
    for i in 0..OBJECTS {
        write(i, 2);
    }
    // Every object whose acting set held osd.3 lacks one copy: counted as degraded (reports
    // reach the monitors once a second).
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    let status = loop {
        std::thread::sleep(Duration::from_secs(1));
        let status = common::json(&ok(&shoal(&dir, &["status", "--json"])));
        if status["recovery"]["degraded_objects"] == with3.len() as u64 || std::time::Instant::now() > deadline {
            break status;
        }
    };
    assert_eq!(
        status["recovery"]["degraded_objects"],
        with3.len() as u64,
        "objects on osd.3 while it is down ({} of them) are not all counted degraded: {status}",
        with3.len()
    );
    assert_eq!(status["recovery"]["misplaced_objects"], 0, "data moved while osd.3 was only down: {status}");
    let by_state = status["pgs"]["by_state"].as_object().expect("states");
    assert!(by_state.keys().any(|s| s.contains("undersized")), "no PG undersized while osd.3 is down: {status}");
    assert_eq!(backfills_finished(&dir), before, "a backfill ran while osd.3 was only down");

    // Out: its PGs are remapped onto the fourth OSD and backfilled there.
    ok(&shoal(&dir, &["osd", "out", "3"]));
    common::wait_clean(&dir, 3, Duration::from_secs(120));
    assert!(backfills_finished(&dir) > before, "nothing was backfilled after osd.3 went out");
    for i in &with3 {
        let acting = acting_of(*i);
        assert_eq!(acting.len(), 3, "k{i:02} after osd.3 went out: {acting:?}");
        assert!(!acting.contains(&3));
    }
    for i in 0..OBJECTS {
        let read = vec![ObjOp::Read { offset: 0, len_bytes: u64::MAX }];
        let got = rt
            .block_on(client.op("keep", &format!("k{i:02}"), read, vec![]))
            .unwrap_or_else(|e| panic!("k{i:02}: {e}"));
        assert!(got.data == content(2, i), "k{i:02} reads other bytes than its last write");
    }
}
