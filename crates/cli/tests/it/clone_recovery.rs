//! A replica back among snapshotted objects (decision 0065), on real OSD processes with
//! disk-backed stores: objects of a one-PG size-3 pool are written under two snapshots (each
//! with two clones beside its head), a replica is killed with SIGKILL, and while it is away some
//! heads are rewritten under the same snapshots (no new clone) and some under a third (a new
//! clone). Back, it is recovered from the log: recovery pushes leave out the clones it holds and
//! send the heads and the new clones. Once the cluster is clean every member's store holds
//! exactly the same bytes and stored version for every head and clone, and the bytes each write
//! left (read offline, after fsck).

use crate::common;

use std::time::Duration;

use common::{ok, shoal};
use shoal_proto::osd::ObjOp;

const OBJECTS: u32 = 8;
const BYTES: usize = 128 << 10;
/// Objects rewritten under the same snapshots while the replica is away, and those rewritten
/// under a new one (making a third clone).
const SAME_SNAPS: std::ops::Range<u32> = 0..3;
const NEW_SNAP: std::ops::Range<u32> = 3..5;

fn content(tag: u64, i: u32) -> Vec<u8> {
    shoal_util::pattern::xorshift_bytes((tag << 32 | u64::from(i)).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1, BYTES)
}

fn ctx(seq: u64, snaps: &[u64]) -> ObjOp {
    ObjOp::SnapContext { seq, snaps: snaps.to_vec() }
}

#[test]
fn a_replica_back_among_snapshotted_objects_ends_with_every_clone() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (dir, _down) = common::up_block(tmp.path(), 3, "512M");
    ok(&shoal(&dir, &["pool", "create", "snapped", "--size", "3", "--min-size", "2", "--pg-num", "1"]));
    ok(&shoal(&dir, &["osd", "set", "noout"]));
    let (rt, client) = common::admin_client(&dir);
    let write = |i: u32, snapc: ObjOp, tag: u64| {
        let ops = vec![snapc, ObjOp::WriteFull { len_bytes: BYTES as u64 }];
        rt.block_on(client.op("snapped", &format!("obj-{i}"), ops, content(tag, i)))
            .unwrap_or_else(|e| panic!("obj-{i}, tag {tag}: {e}"));
    };
    // Heads written, then rewritten after snapshot 1 and after snapshot 2: clones 1 and 2.
    for i in 0..OBJECTS {
        write(i, ctx(0, &[]), 1);
        write(i, ctx(1, &[1]), 2);
        write(i, ctx(2, &[2, 1]), 3);
    }
    let away = common::kill_last_replica(&dir, &client, "snapped", "obj-0");
    for i in SAME_SNAPS {
        write(i, ctx(2, &[2, 1]), 4);
    }
    for i in NEW_SNAP {
        write(i, ctx(3, &[3, 2, 1]), 5);
    }
    // (At debug level, to see that recovery kept its clones.)
    let mut back = common::start_block_osd(&dir, away, "512M", &[("SHOAL_LOG", "debug")]);
    common::wait_osd(&client, away, true, Duration::from_secs(30));
    common::wait_clean(&dir, 3, Duration::from_secs(120));
    ok(&shoal(&dir, &["osd", "unset", "noout"]));
    // Every rewritten head came back with its older clones kept, not sent.
    let log = std::fs::read_to_string(dir.join(format!("osd.{away}.log"))).expect("the OSD's log");
    let kept = log.lines().filter(|l| l.contains("recovered copy keeps clones held here")).count();
    assert_eq!(kept, SAME_SNAPS.len() + NEW_SNAP.len(), "recovery pushes that kept clones on osd.{away}");
    drop(client);
    drop(rt);
    ok(&shoal(&dir, &["down", "--dir", &dir.display().to_string()]));
    // `shoal down` stopped the restarted OSD too (by its pid file): reap it.
    back.wait().expect("the restarted OSD exits");

    let stores: Vec<shoal_store::Store> = (0..3).map(|osd| common::fsck_and_open_store(&dir, osd)).collect();
    let coll = common::pg_collection_holding(&stores[0], "obj-0");
    for i in 0..OBJECTS {
        let head = format!("obj-{i}");
        let head_tag = if SAME_SNAPS.contains(&i) {
            4
        } else if NEW_SNAP.contains(&i) {
            5
        } else {
            3
        };
        let clone = |id| shoal_osd::snaps::clone_name(&head, id);
        let mut expected = vec![(head.clone(), Some(head_tag)), (clone(1), Some(1)), (clone(2), Some(2))];
        expected.push((clone(3), NEW_SNAP.contains(&i).then_some(3)));
        for (name, tag) in expected {
            for (osd, store) in stores.iter().enumerate() {
                match tag {
                    Some(tag) => {
                        let data = store.read_all(&coll, &name).unwrap_or_else(|e| panic!("osd.{osd} {name}: {e}"));
                        assert!(data == content(tag, i), "osd.{osd}'s {name} is not the bytes of write {tag}");
                    }
                    None => assert!(store.stat(&coll, &name).is_err(), "osd.{osd} holds {name}, never made"),
                }
            }
            let versions: Vec<_> = stores.iter().map(|s| s.version(&coll, &name).ok()).collect();
            assert!(versions.iter().all(|v| *v == versions[0]), "{name}: stored versions differ: {versions:?}");
        }
    }
}

/// An OSD back after a large object got new clones: the object with the clones it lacks holds
/// more than one message carries (a 24 MiB head with two new 24 MiB clones, and a head deleted
/// after two such snapshots, its clones left), so recovery sends each in parts with the clones
/// spread over them. Before, the push was refused at the sender for its size and retried
/// forever: the PG never became clean and writes to those objects waited for good.
#[test]
fn a_replica_back_after_large_clones_were_made_gets_them_in_parts() {
    replica_back_after_large_clones(24 << 20, &["big", "gone"]);
}

/// The same with objects as large as a pool allows (64 MiB): each clone alone holds more than
/// a message carries beside the largest header, and goes in a part of its own beside a small
/// one. Before, such a clone was refused by name and the PG never became clean.
#[test]
fn a_replica_back_after_clones_of_the_largest_objects_were_made_gets_them() {
    replica_back_after_large_clones(64 << 20, &["big"]);
}

/// Writes each of `names` (`big_bytes` each) three times under growing snapshots while a
/// replica is away ("gone" is then removed, its clones kept), restarts the replica, and checks
/// once the PG is clean that every member holds every head and clone with the same bytes and
/// versions.
fn replica_back_after_large_clones(big_bytes: usize, names: &[&str]) {
    let big = |name: &str, tag: u64| {
        // Distinct per object (by its name's length) and per write.
        let seed = (tag << 8 | name.len() as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        shoal_util::pattern::xorshift_bytes(seed | 1, big_bytes)
    };
    let tmp = tempfile::tempdir().expect("tempdir");
    let (dir, _down) = common::up_block(tmp.path(), 3, "1G");
    ok(&shoal(&dir, &["pool", "create", "snapped", "--size", "3", "--min-size", "2", "--pg-num", "1"]));
    ok(&shoal(&dir, &["osd", "set", "noout"]));
    let (rt, client) = common::admin_client(&dir);
    let op = |name: &str, ops: Vec<ObjOp>, data: Vec<u8>| {
        rt.block_on(client.op("snapped", name, ops, data)).unwrap_or_else(|e| panic!("{name}: {e}"));
    };
    let write = |name: &str, snapc: ObjOp, tag: u64| {
        op(name, vec![snapc, ObjOp::WriteFull { len_bytes: big_bytes as u64 }], big(name, tag));
    };
    for name in names {
        write(name, ctx(0, &[]), 1);
    }
    let away = common::kill_last_replica(&dir, &client, "snapped", "big");
    for name in names {
        write(name, ctx(1, &[1]), 2);
        write(name, ctx(2, &[2, 1]), 3);
    }
    let gone = names.contains(&"gone");
    if gone {
        op("gone", vec![ctx(3, &[3, 2, 1]), ObjOp::Remove], Vec::new());
    }
    let mut back = common::start_block_osd(&dir, away, "1G", &[]);
    common::wait_osd(&client, away, true, Duration::from_secs(30));
    common::wait_clean(&dir, 3, Duration::from_secs(120));
    ok(&shoal(&dir, &["osd", "unset", "noout"]));
    drop(client);
    drop(rt);
    ok(&shoal(&dir, &["down", "--dir", &dir.display().to_string()]));
    back.wait().expect("the restarted OSD exits");

    let stores: Vec<shoal_store::Store> = (0..3).map(|osd| common::fsck_and_open_store(&dir, osd)).collect();
    let coll = common::pg_collection_holding(&stores[0], "big");
    let clone = |head: &str, id| shoal_osd::snaps::clone_name(head, id);
    // Each clone holds the head's bytes from before the snapshot it was made for: clone 1 the
    // first write, clone 2 the second; "gone"'s clone 3 its last write, kept by its removal.
    let mut expected = vec![
        ("big".to_string(), Some(("big", 3))),
        (clone("big", 1), Some(("big", 1))),
        (clone("big", 2), Some(("big", 2))),
    ];
    if gone {
        expected.extend([
            ("gone".to_string(), None),
            (clone("gone", 1), Some(("gone", 1))),
            (clone("gone", 2), Some(("gone", 2))),
            (clone("gone", 3), Some(("gone", 3))),
        ]);
    }
    for (name, bytes) in expected {
        for (osd, store) in stores.iter().enumerate() {
            match bytes {
                Some((head, tag)) => {
                    let data = store.read_all(&coll, &name).unwrap_or_else(|e| panic!("osd.{osd} {name}: {e}"));
                    assert!(data == big(head, tag), "osd.{osd}'s {name} is not the bytes of write {tag}");
                }
                None => assert!(store.stat(&coll, &name).is_err(), "osd.{osd} holds {name}, removed"),
            }
        }
        let versions: Vec<_> = stores.iter().map(|s| s.version(&coll, &name).ok()).collect();
        assert!(versions.iter().all(|v| *v == versions[0]), "{name}: stored versions differ: {versions:?}");
    }
}
