//! An OSD back after its PG's log moved on past it (decision 0049), on real OSD processes with
//! disk-backed stores: a replica of a one-PG size-3 pool is killed with SIGKILL; while it is away
//! one object is rewritten, one removed, and far more writes than a PG log keeps go to a few new
//! objects, so that the log can no longer bring the replica up to date and it is backfilled. The
//! backfill asks it which objects it holds at the primary's versions and keeps those: the
//! primary's log line for the finished backfill names how many objects it kept and sent, and only
//! what changed is sent. Once the cluster is clean, every member's store holds exactly the same
//! data, xattrs and stored version of every object, and the removed one nowhere (read offline,
//! after fsck).

use crate::common;

use std::time::Duration;

use common::{ok, shoal};
use shoal_proto::osd::ObjOp;

/// Objects written before the replica goes away.
const OLD: u32 = 40;
const OLD_BYTES: usize = 64 << 10;
/// Objects written while it is away, and the writes they take between them: more than the
/// longest PG log (`MAX_LOG_ENTRIES`, 575), so that the log is trimmed past the replica's last
/// entry whatever the trims' phase.
const HOT: u32 = 6;
const HOT_WRITES: u32 = 700;
/// The old objects rewritten and removed while it is away.
const REWRITTEN: u32 = 3;
const REMOVED: u32 = 7;

fn content(tag: u64, i: u32, len: usize) -> Vec<u8> {
    shoal_util::pattern::xorshift_bytes((tag << 32 | u64::from(i)).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1, len)
}

fn write_ops(len: usize, tag: u64) -> Vec<ObjOp> {
    vec![
        ObjOp::WriteFull { len_bytes: len as u64 },
        ObjOp::SetXattr { name: "tag".into(), value: tag.to_be_bytes().to_vec() },
    ]
}

/// The `kept=` and `sent=` counts of every finished backfill to `osd` in the OSD logs of `dir`.
fn finished_backfills(dir: &std::path::Path, osd: u32) -> Vec<(u64, u64)> {
    let field = |line: &str, name: &str| -> u64 {
        let at = line.find(&format!(" {name}=")).unwrap_or_else(|| panic!("no {name}= in: {line}"));
        let rest = &line[at + name.len() + 2..];
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        digits.parse().unwrap_or_else(|e| panic!("{name}= in {line}: {e}"))
    };
    let mut found = Vec::new();
    for id in 0..3 {
        let log = std::fs::read_to_string(dir.join(format!("osd.{id}.log"))).unwrap_or_default();
        for line in log.lines().filter(|l| l.contains("backfill finished") && l.contains(&format!(" peer=osd.{osd} ")))
        {
            found.push((field(line, "kept"), field(line, "sent")));
        }
    }
    found
}

#[test]
fn a_replica_back_after_the_log_moved_on_is_sent_only_what_changed() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (dir, _down) = common::up_block(tmp.path(), 3, "512M");
    ok(&shoal(&dir, &["pool", "create", "back", "--size", "3", "--min-size", "2", "--pg-num", "1"]));
    // Nothing moves while the replica is away: it stays in, its PG degraded.
    ok(&shoal(&dir, &["osd", "set", "noout"]));
    let (rt, client) = common::admin_client(&dir);
    let write = |name: String, tag: u64, data: Vec<u8>| {
        let ops = write_ops(data.len(), tag);
        rt.block_on(client.op("back", &name, ops, data)).unwrap_or_else(|e| panic!("{name}: {e}"));
    };
    for i in 0..OLD {
        write(format!("old-{i:02}"), 1, content(1, i, OLD_BYTES));
    }
    // The replica to kill: the PG's last acting OSD, so that a single peering (the replica
    // coming back up) starts the backfill.
    let away = common::kill_last_replica(&dir, &client, "back", "old-00");

    write(format!("old-{REWRITTEN:02}"), 2, content(2, REWRITTEN, OLD_BYTES));
    rt.block_on(client.op("back", &format!("old-{REMOVED:02}"), vec![ObjOp::Remove], vec![])).expect("remove");
    for k in 0..HOT_WRITES {
        write(format!("hot-{}", k % HOT), 3, content(3, k, 1024));
    }
    let mut back = common::start_block_osd(&dir, away, "512M", &[]);
    common::wait_osd(&client, away, true, Duration::from_secs(30));
    common::wait_clean(&dir, 3, Duration::from_secs(120));
    ok(&shoal(&dir, &["osd", "unset", "noout"]));

    // Backfilled, not recovered from the log (which no longer reaches its last entry), and sent
    // only the new objects and the rewritten one; every other old object kept where it was.
    let finished = finished_backfills(&dir, away);
    assert!(!finished.is_empty(), "no finished backfill to osd.{away} logged");
    let kept: u64 = finished.iter().map(|(k, _)| k).sum();
    let sent: u64 = finished.iter().map(|(_, s)| s).sum();
    let unchanged = u64::from(OLD) - 2;
    let changed = u64::from(HOT) + 1;
    assert_eq!((kept, sent), (unchanged, changed), "kept and sent by the backfills to osd.{away}: {finished:?}");

    drop(client);
    drop(rt);
    ok(&shoal(&dir, &["down", "--dir", &dir.display().to_string()]));
    // `shoal down` stopped the restarted OSD too (by its pid file): reap it.
    back.wait().expect("the restarted OSD exits");

    let stores: Vec<shoal_store::Store> = (0..3).map(|osd| common::fsck_and_open_store(&dir, osd)).collect();
    let coll = common::pg_collection_holding(&stores[0], "old-00");
    let names: Vec<String> =
        (0..OLD).map(|i| format!("old-{i:02}")).chain((0..HOT).map(|h| format!("hot-{h}"))).collect();
    for name in &names {
        let state = |s: &shoal_store::Store| {
            if name == &format!("old-{REMOVED:02}") {
                assert!(s.stat(&coll, name).is_err(), "{name} was removed, yet a store holds it");
                return None;
            }
            let data = s.read_all(&coll, name).unwrap_or_else(|e| panic!("{name}: {e}"));
            let xattrs = s.list_xattrs(&coll, name).expect("xattrs");
            let version = s.version(&coll, name).expect("version");
            Some((data, xattrs, version))
        };
        let want = state(&stores[0]);
        if let Some((data, _, version)) = &want {
            let expect = if name == &format!("old-{REWRITTEN:02}") {
                content(2, REWRITTEN, OLD_BYTES)
            } else if let Some(i) = name.strip_prefix("old-") {
                content(1, i.parse().expect("number"), OLD_BYTES)
            } else {
                // The last write of hot-h was write number k, the largest below HOT_WRITES with
                // k % HOT == h.
                let h: u32 = name.strip_prefix("hot-").and_then(|h| h.parse().ok()).expect("hot number");
                let k = (0..HOT_WRITES).rev().find(|k| k % HOT == h).expect("a write");
                content(3, k, 1024)
            };
            assert!(data == &expect, "{name}: osd.0 holds other bytes than the last write");
            assert_ne!(*version, (0, 0), "{name} has a stored version");
        }
        for (osd, s) in stores.iter().enumerate().skip(1) {
            let got = state(s);
            assert!(got == want, "osd.{osd}'s {name} differs from osd.0's");
        }
    }
}
