//! Recovery paced under client load (`osd_recovery_busy_share_pct`): on four RAM OSDs with a
//! size-3 pool, `osd out` while a client keeps writing makes every OSD's worker interleave
//! backfill with client I/O at a small share. The writes all succeed, the cluster comes back to
//! `active+clean` on its own, and every object written before and during the recovery reads back
//! whole. The share is a setting with bounds: out-of-range values are refused with their name.
//! Backfill chunks are set smaller than the objects, so every object moves in parts while the
//! writer overwrites some of them; a deep scrub of every PG then finds every member identical.

use crate::common;

use std::time::{Duration, Instant};

use common::{fails_with, ok, shoal};
use shoal_proto::osd::ObjOp;

const OBJECT_BYTES: usize = 256 << 10;
const OBJECTS: u32 = 160;

fn content(tag: u64, i: u32) -> Vec<u8> {
    shoal_util::pattern::xorshift_bytes(
        (tag << 32 | u64::from(i)).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1,
        OBJECT_BYTES,
    )
}

fn clean(dir: &std::path::Path) -> bool {
    let status: serde_json::Value = serde_json::from_str(&ok(&shoal(dir, &["status", "--json"]))).expect("json");
    let count = status["pgs"]["count"].as_u64().unwrap_or(0);
    count > 0
        && status["pgs"]["by_state"]["active+clean"].as_u64() == Some(count)
        && status["recovery"]["degraded_objects"] == 0
        && status["recovery"]["misplaced_objects"] == 0
}

#[test]
fn recovery_under_client_writes_is_paced_and_finishes() {
    let tmp = tempfile::tempdir().expect("tmp");
    let (dir, _down) = common::up_mem(tmp.path(), 4, "1G");
    ok(&shoal(&dir, &["pool", "create", "rep", "--size", "3", "--pg-num", "16"]));
    fails_with(&shoal(&dir, &["config", "set", "osd_recovery_busy_share_pct", "0"]), "osd_recovery_busy_share_pct");
    fails_with(&shoal(&dir, &["config", "set", "osd_recovery_busy_share_pct", "101"]), "osd_recovery_busy_share_pct");
    // A small share, so that backfill is held back most of the time while the writer runs.
    ok(&shoal(&dir, &["config", "set", "osd_recovery_busy_share_pct", "5"]));
    assert_eq!(ok(&shoal(&dir, &["config", "get", "osd_recovery_busy_share_pct"])).trim(), "5");
    // Parts of 64 KiB: each object goes in four, and writes land between them.
    fails_with(&shoal(&dir, &["config", "set", "osd_backfill_chunk_bytes", "63"]), "osd_backfill_chunk_bytes");
    // Over 16 MiB a chunk of whole objects could outgrow one message (twice the setting).
    fails_with(&shoal(&dir, &["config", "set", "osd_backfill_chunk_bytes", "16777217"]), "between 64 and 16777216");
    ok(&shoal(&dir, &["config", "set", "osd_backfill_chunk_bytes", "65536"]));

    let (rt, client) = common::admin_client(&dir);
    for i in 0..OBJECTS {
        let op = ObjOp::WriteFull { len_bytes: OBJECT_BYTES as u64 };
        rt.block_on(client.op("rep", &format!("fill{i}"), vec![op], content(1, i))).expect("fill");
    }
    // A writer that keeps the OSDs busy with client I/O during the whole recovery.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let client = client.clone();
        let stop = stop.clone();
        rt.spawn(async move {
            let mut written = 0u32;
            // Which write last overwrote each `fill` object (every fourth write is one).
            let mut overwrites: Vec<Option<u32>> = vec![None; OBJECTS as usize];
            while !stop.load(std::sync::atomic::Ordering::Relaxed) && written < 100_000 {
                let op = ObjOp::WriteFull { len_bytes: OBJECT_BYTES as u64 };
                if written % 4 == 3 {
                    let i = (written / 4) % OBJECTS;
                    client.op("rep", &format!("fill{i}"), vec![op], content(3, written)).await.expect("overwrite");
                    overwrites[i as usize] = Some(written);
                } else {
                    client.op("rep", &format!("during{written}"), vec![op], content(2, written)).await.expect("write");
                }
                written += 1;
            }
            (written, overwrites)
        })
    };
    std::thread::sleep(Duration::from_millis(300));
    ok(&shoal(&dir, &["osd", "out", "0"]));
    let deadline = Instant::now() + Duration::from_secs(120);
    // The reports catch up with the out first; then the PGs recover.
    std::thread::sleep(Duration::from_secs(2));
    while !clean(&dir) {
        assert!(Instant::now() < deadline, "not clean 120 s after osd out: {}", ok(&shoal(&dir, &["status"])));
        std::thread::sleep(Duration::from_millis(250));
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (written, overwrites) = rt.block_on(writer).expect("writer");
    assert!(written > 0, "the writer wrote nothing during the recovery");

    let read = vec![ObjOp::Read { offset: 0, len_bytes: u64::MAX }];
    for i in 0..OBJECTS {
        let got = rt.block_on(client.op("rep", &format!("fill{i}"), read.clone(), vec![])).expect("read fill");
        let want = overwrites[i as usize].map_or_else(|| content(1, i), |w| content(3, w));
        assert!(got.data == want, "fill{i} differs after the recovery");
    }
    for i in (0..written).filter(|w| w % 4 != 3) {
        let got = rt.block_on(client.op("rep", &format!("during{i}"), read.clone(), vec![])).expect("read");
        assert!(got.data == content(2, i), "during{i} differs after the recovery");
    }
    // Nothing is left on the OSD that went out but strays being purged; every PG is on the others.
    let map = client.mon().map();
    let pool = map.pool_by_name("rep").expect("pool").clone();
    for seed in 0..pool.pg_num {
        let osds = map.pg_osds(shoal_map::PgId { pool: pool.id, seed }).expect("pg osds");
        assert_eq!(osds.len(), 3, "PG {seed} has {osds:?}");
        assert!(!osds.contains(&shoal_map::OsdId(0)), "PG {seed} still on the out OSD: {osds:?}");
        // Every member holds the same objects with the same bytes (reads above see the primary's).
        let pg = shoal_map::PgId { pool: pool.id, seed }.to_string();
        let scrub: serde_json::Value =
            serde_json::from_str(&ok(&shoal(&dir, &["pg", "deep-scrub", &pg, "--wait", "--json"]))).expect("json");
        assert_eq!(scrub["last"]["inconsistent"], 0, "PG {pg} after backfill in parts: {scrub}");
    }
}
