//! Bit rot on real disks: byte flips in the `block` data files of a size-3 pool's OSDs, behind
//! the running OSDs' backs. A client read of an object whose primary copy is damaged returns the
//! right bytes (the primary repairs its copy from a member first); a damaged replica copy is
//! invisible to reads, passes a light scrub (which reads no data), is named by a deep scrub
//! (`shoal pg deep-scrub --wait`, `pg list-inconsistent`, `active+clean+inconsistent` in
//! `pg ls`, HEALTH_ERR in `status`), and `shoal pg repair` replaces it; a deep scrub then finds
//! the PG clean, and offline every store passes fsck with three identical copies of every object.

use crate::common;

use std::os::unix::fs::FileExt;
use std::path::Path;

use common::{Down, fails_with, json, ok, shoal};
use shoal_proto::osd::ObjOp;

const OBJECT_BYTES: usize = 64 << 10;
const OBJECTS: u32 = 24;

fn content(i: u32) -> Vec<u8> {
    shoal_util::pattern::xorshift_bytes(u64::from(i).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1, OBJECT_BYTES)
}

/// Flips one byte of object `i`'s copy in the data file `block`: found by searching the file for
/// the object's first 4 KiB (unique random bytes).
fn rot(block: &Path, i: u32) {
    let data = content(i);
    let needle = &data[..4096];
    let bytes = std::fs::read(block).expect("read block file");
    let hits: Vec<usize> =
        (0..=bytes.len() - needle.len()).step_by(4096).filter(|&o| &bytes[o..o + 4096] == needle).collect();
    assert_eq!(hits.len(), 1, "object {i}'s first block occurs {} times in {}", hits.len(), block.display());
    let f = std::fs::OpenOptions::new().read(true).write(true).open(block).expect("open block file");
    let at = (hits[0] + 100) as u64;
    let mut b = [0u8];
    f.read_exact_at(&mut b, at).expect("read byte");
    b[0] ^= 0x5a;
    f.write_all_at(&b, at).expect("write byte");
    f.sync_all().expect("sync");
}

#[test]
fn damaged_copies_are_read_around_found_by_deep_scrub_and_repaired() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("c");
    let d = dir.display().to_string();
    ok(&shoal(tmp.path(), &["up", "--dir", &d, "--osds", "3", "--backend", "block", "--osd-size", "256M"]));
    let down = Down(dir.clone());
    ok(&shoal(&dir, &["pool", "create", "rep", "--size", "3", "--min-size", "2", "--pg-num", "8"]));
    ok(&shoal(&dir, &["pool", "rm", "data", "--yes-i-really-mean-it"]));

    let (rt, client) = common::admin_client(&dir);
    for i in 0..OBJECTS {
        let op = ObjOp::WriteFull { len_bytes: OBJECT_BYTES as u64 };
        rt.block_on(client.op("rep", &format!("o{i}"), vec![op], content(i))).expect("write");
    }
    let map = client.mon().map();
    let pool = map.pool_by_name("rep").expect("pool").id;
    let locate = |i: u32| map.locate(pool, &format!("o{i}")).expect("locate");
    let block = |osd: shoal_map::OsdId| dir.join(format!("osd.{}", osd.0)).join("block");

    // Object 0: its primary's copy is damaged. The read still returns the written bytes.
    let primary = locate(0).osds[0];
    rot(&block(primary), 0);
    let read = vec![ObjOp::Read { offset: 0, len_bytes: u64::MAX }];
    let got = rt.block_on(client.op("rep", "o0", read.clone(), vec![])).expect("read of a damaged primary copy");
    assert!(got.data == content(0), "o0 read back wrong bytes");

    // Object v (not in o0's PG): a replica's copy is damaged.
    let v = (1..OBJECTS).find(|i| locate(*i).pg != locate(0).pg).expect("an object in another PG");
    let loc = locate(v);
    let (pg, bad) = (loc.pg.to_string(), loc.osds[2]);
    rot(&block(bad), v);

    // A light scrub reads no data: it passes.
    let light = json(&ok(&shoal(&dir, &["pg", "scrub", &pg, "--wait", "--json"])));
    assert_eq!(light["last"]["deep"], false, "{light}");
    assert_eq!(light["inconsistent"].as_array().map(Vec::len), Some(0), "{light}");

    // A deep scrub names the object, the OSD and what is wrong, and exits 2.
    let out = shoal(&dir, &["pg", "deep-scrub", &pg, "--wait", "--json"]);
    assert_eq!(out.status.code(), Some(2), "deep scrub of {pg}: {}", String::from_utf8_lossy(&out.stderr));
    let deep = json(&String::from_utf8_lossy(&out.stdout));
    let found = &deep["inconsistent"][0];
    assert_eq!(found["object"], format!("o{v}"), "{deep}");
    assert_eq!(found["errors"][0]["osd"], bad.0, "{deep}");
    assert_eq!(found["errors"][0]["errors"][0], "read_error", "{deep}");
    assert!(found["auth_osd"].as_u64().is_some_and(|a| a != u64::from(bad.0)), "{deep}");
    let listed = json(&ok(&shoal(&dir, &["pg", "list-inconsistent", &pg, "--json"])));
    assert_eq!(listed["inconsistent"], deep["inconsistent"]);
    // A damaged copy with good ones elsewhere is inconsistent, not unfound.
    let unfound = json(&ok(&shoal(&dir, &["pg", "list-unfound", &pg, "--json"])));
    assert_eq!(unfound["unfound"], serde_json::json!([]), "{unfound}");
    assert_eq!(unfound["pg"], pg.as_str(), "{unfound}");
    // Giving up asks to be sure, and then gives up nothing when nothing is unfound.
    fails_with(&shoal(&dir, &["pg", "mark-unfound-lost", &pg, "delete"]), "--yes-i-really-mean-it");
    fails_with(&shoal(&dir, &["pg", "mark-unfound-lost", &pg, "revert"]), "--yes-i-really-mean-it");
    fails_with(&shoal(&dir, &["pg", "mark-unfound-lost", &pg, "undo", "--yes-i-really-mean-it"]), "revert");
    // Forcing a PG past its lost history is only for one that is incomplete or down.
    fails_with(&shoal(&dir, &["pg", "force-complete", &pg, "--yes-i-really-mean-it"]), "not incomplete or down");
    let reverted =
        json(&ok(&shoal(&dir, &["pg", "mark-unfound-lost", &pg, "revert", "--yes-i-really-mean-it", "--json"])));
    assert_eq!(
        (&reverted["reverted"], &reverted["unfound"]),
        (&serde_json::json!([]), &serde_json::json!([])),
        "{reverted}"
    );
    let lost = json(&ok(&shoal(&dir, &["pg", "mark-unfound-lost", &pg, "delete", "--yes-i-really-mean-it", "--json"])));
    assert_eq!(lost["lost"], serde_json::json!([]), "{lost}");
    let pgs = json(&ok(&shoal(&dir, &["pg", "ls", "--json"])));
    let state =
        pgs["pgs"].as_array().expect("pgs").iter().find(|r| r["pg"] == pg.as_str()).expect("row")["state"].clone();
    assert_eq!(state, "active+clean+inconsistent", "{pgs}");
    // `shoal status` shows it once the primary's next report (every second) is in.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
    let status = loop {
        let status = json(&ok(&shoal(&dir, &["status", "--json"])));
        if status["health"] == "HEALTH_ERR" || std::time::Instant::now() > deadline {
            break status;
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    };
    assert_eq!(status["health"], "HEALTH_ERR", "{status}");
    assert!(status["problems"].to_string().contains("inconsistent"), "{status}");
    // Reads of it never saw the damage.
    let got = rt.block_on(client.op("rep", &format!("o{v}"), read.clone(), vec![])).expect("read");
    assert!(got.data == content(v), "o{v} read back wrong bytes");

    // Repair replaces the bad copy; a deep scrub then finds the PG clean.
    let repaired = json(&ok(&shoal(&dir, &["pg", "repair", &pg, "--wait", "--json"])));
    assert_eq!(repaired["last"]["repaired"], 1, "{repaired}");
    let again = json(&ok(&shoal(&dir, &["pg", "deep-scrub", &pg, "--wait", "--json"])));
    assert_eq!(again["inconsistent"].as_array().map(Vec::len), Some(0), "{again}");
    assert_eq!(again["last"]["inconsistent"], 0, "{again}");
    // o0's PG too: the read repaired its primary.
    let first = locate(0).pg.to_string();
    let clean = json(&ok(&shoal(&dir, &["pg", "deep-scrub", &first, "--wait", "--json"])));
    assert_eq!(clean["last"]["inconsistent"], 0, "{clean}");

    // Object u: every copy is damaged. A read finds no good copy and waits (the object is
    // unfound); the operator gives it up, and the command answers once every member has logged
    // the removal: the read is answered "not found", and nothing is left deciding.
    let u = (1..OBJECTS).find(|i| *i != v).expect("a third object");
    let loc = locate(u);
    let upg = loc.pg.to_string();
    for osd in &loc.osds {
        rot(&block(*osd), u);
    }
    let name = format!("o{u}");
    let waiting = {
        let client = client.clone();
        let name = name.clone();
        let read = read.clone();
        rt.spawn(async move { client.op("rep", &name, read, vec![]).await })
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let unfound = loop {
        let unfound = json(&ok(&shoal(&dir, &["pg", "list-unfound", &upg, "--json"])));
        if unfound["unfound"].as_array().is_some_and(|a| !a.is_empty()) || std::time::Instant::now() > deadline {
            break unfound;
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    };
    assert_eq!(unfound["unfound"][0]["object"], name.as_str(), "{unfound}");
    assert!(!waiting.is_finished(), "a read of an unfound object waits");
    let lost =
        json(&ok(&shoal(&dir, &["pg", "mark-unfound-lost", &upg, "delete", "--yes-i-really-mean-it", "--json"])));
    assert_eq!(lost["lost"], serde_json::json!([name.as_str()]), "{lost}");
    let after = json(&ok(&shoal(&dir, &["pg", "list-unfound", &upg, "--json"])));
    assert_eq!((&after["unfound"], &after["deciding"]), (&serde_json::json!([]), &serde_json::json!([])), "{after}");
    let answer = rt.block_on(waiting).expect("the waiting read");
    let err = answer.expect_err("the object given up is gone");
    assert_eq!(err.code(), Some(shoal_proto::ErrorCode::NotFound), "{err}");
    // It takes writes again (and is whole on every OSD for the offline check below).
    let op = ObjOp::WriteFull { len_bytes: OBJECT_BYTES as u64 };
    rt.block_on(client.op("rep", &name, vec![op], content(u))).expect("write after the loss");

    // Bad input is refused with the problem named.
    fails_with(&shoal(&dir, &["pg", "scrub", "9.0"]), "no pool with id 9");
    fails_with(&shoal(&dir, &["pg", "deep-scrub", &format!("{pool}.ff")]), "does not exist");
    fails_with(&shoal(&dir, &["pg", "repair", "zz"]), "bad PG id");

    // Offline: every store is consistent and holds every object whole.
    drop(client);
    drop(down);
    for osd in 0..3 {
        let store = common::fsck_and_open_store(&dir, osd);
        for i in 0..OBJECTS {
            let coll = shoal_osd::exec::pg_collection(locate(i).pg);
            let bytes = store.read_all(&coll, &format!("o{i}")).unwrap_or_else(|e| panic!("osd.{osd} o{i}: {e}"));
            assert!(bytes == content(i), "osd.{osd} holds a wrong o{i}");
        }
    }
}
