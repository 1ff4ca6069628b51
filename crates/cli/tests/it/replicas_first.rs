//! A primary dies between sending its replicated writes and its own sync (decision 0036): its
//! replicas hold writes it never made durable. Three `block` OSDs, a size-3 pool; osd.0 runs with
//! `SHOAL_OSD_CRASH=before-sync:N` and aborts at its Nth replicating batch while a client writes
//! objects. Every write still completes (the client resends to the new primary), osd.0 starts
//! again on its store behind its replicas, and once the cluster is clean every object reads back
//! its content and, offline, every copy is identical and every store passes fsck.

use crate::common;

use std::time::Duration;

use common::{ok, shoal, start_block_osd, wait_clean, wait_osd};
use shoal_client::{Client, ClusterConfig};
use shoal_map::OsdId;
use shoal_proto::osd::ObjOp;

const OSD_SIZE: &str = "256M";
const OBJECTS: u32 = 120;
/// The replicating batch of osd.0 that it does not live to sync.
const CRASH_AT_BATCH: &str = "before-sync:4";

fn content(i: u32) -> Vec<u8> {
    format!("object {i} written once; ").into_bytes().repeat(100)
}

#[test]
fn writes_a_primary_lost_before_its_sync_come_back_from_its_replicas() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (dir, down) = common::up_block(tmp.path(), 3, OSD_SIZE);
    ok(&shoal(&dir, &["pool", "create", "rep", "--size", "3", "--min-size", "2", "--pg-num", "8"]));
    let cfg = ClusterConfig::from_conf_file(&dir.join("shoal.toml"), "client.admin").expect("conf");
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("rt");
    let client = std::sync::Arc::new(rt.block_on(Client::connect(cfg)).expect("connect"));
    let grace = Duration::from_secs(30);

    // osd.0 again, with the crash point armed.
    common::sigkill(&dir, "osd.0");
    wait_osd(&client, 0, false, grace);
    let mut victim = start_block_osd(&dir, 0, OSD_SIZE, &[("SHOAL_OSD_CRASH", CRASH_AT_BATCH)]);
    wait_osd(&client, 0, true, grace);
    wait_clean(&dir, 3, Duration::from_secs(60));

    // Writes, eight at a time, until every one is acknowledged; osd.0 dies on the way.
    let pool = client.mon().map().pool_by_name("rep").expect("pool rep").id;
    rt.block_on(async {
        let mut next = 0u32;
        while next < OBJECTS {
            let mut writes = tokio::task::JoinSet::new();
            for i in next..(next + 8).min(OBJECTS) {
                let client = client.clone();
                writes.spawn(async move {
                    let data = content(i);
                    let op = ObjOp::WriteFull { len_bytes: data.len() as u64 };
                    (i, client.op("rep", &format!("obj-{i}"), vec![op], data).await)
                });
            }
            next = (next + 8).min(OBJECTS);
            while let Some(done) = writes.join_next().await {
                let (i, r) = done.expect("write task");
                r.unwrap_or_else(|e| panic!("write of obj-{i} failed: {e}"));
            }
        }
    });
    let exited = victim.try_wait().expect("victim status");
    assert!(exited.is_some(), "osd.0 never reached its crash point (write more objects or crash earlier)");
    let log = std::fs::read_to_string(dir.join("osd.0.log")).expect("osd.0 log");
    assert!(log.contains("aborting before the sync"), "osd.0 died of something else:\n{log}");

    // osd.0 starts again on its store, behind its replicas; the cluster becomes clean.
    let mut restarted = start_block_osd(&dir, 0, OSD_SIZE, &[]);
    wait_osd(&client, 0, true, grace);
    wait_clean(&dir, 3, Duration::from_secs(90));
    rt.block_on(async {
        for i in 0..OBJECTS {
            let name = format!("obj-{i}");
            let read = vec![ObjOp::Read { offset: 0, len_bytes: u64::MAX }];
            let data =
                client.op("rep", &name, read, Vec::new()).await.unwrap_or_else(|e| panic!("read of {name}: {e}")).data;
            assert!(data == content(i), "{name} reads back {} bytes that are not what was written", data.len());
        }
    });

    // Offline: every store passes fsck, and every object's three copies are identical.
    let map = client.mon().map();
    drop(client);
    drop(rt);
    drop(down);
    // `shoal down` stopped it; reaped here.
    let _ = restarted.wait();
    let stores: Vec<_> = (0..3).map(|osd| common::fsck_and_open_store(&dir, osd)).collect();
    for i in 0..OBJECTS {
        let name = format!("obj-{i}");
        let loc = map.locate(pool, &name).expect("locate");
        let coll = shoal_osd::exec::pg_collection(loc.pg);
        for osd in &loc.osds {
            let store = &stores[osd.0 as usize];
            let copy = store.read_all(&coll, &name).unwrap_or_else(|e| panic!("{name} on {osd}: {e}"));
            assert!(copy == content(i), "{name}: the copy on {osd} differs");
        }
        assert_eq!(loc.osds.len(), 3, "{name}: {loc:?}");
        assert!(
            loc.osds.contains(&OsdId(0)),
            "{name}: every object has a copy on osd.0 in a pool of size 3 over 3 OSDs"
        );
    }
}
