//! Primary-copy replication through two OSD cores wired by hand: a write reaches the replica
//! and is acknowledged only after it; and a replica whose copy differs from the state the
//! primary resolved a partial write against refuses it, so the divergence is reported instead
//! of written. A PG with a member the monitors flagged full takes removals but no other writes.

use std::collections::BTreeMap;
use std::sync::Arc;

use shoal_map::{ClusterMap, Command, OsdId, Weight};
use shoal_osd::{Action, Event, OsdCore};
use shoal_proto::osd::{ObjOp, OsdOp, OsdOpReply, RepOp, RepOpReply, ReqId};
use shoal_proto::{ErrorCode, decode, encode};
use shoal_store::ObjectStore;
use shoal_store::engine::MemEngine;

const CLIENT: u64 = 1_000;

fn map() -> Arc<ClusterMap> {
    let mut map = ClusterMap::new("t", BTreeMap::new());
    for i in 0..2 {
        map.execute(&Command::CreateOsd { id: Some(OsdId(i)), host: format!("h{i}"), weight: Weight::ONE }).unwrap();
        let addr = format!("127.0.0.1:{}", 7000 + i).parse().unwrap();
        map.execute(&Command::OsdBoot { id: OsdId(i), addr }).unwrap();
    }
    let pool = Command::CreatePool { name: "p".into(), size: 2, min_size: Some(1), pg_num: 8, max_object_bytes: None };
    map.execute(&pool).unwrap();
    Arc::new(map)
}

fn core(id: OsdId, map: &Arc<ClusterMap>) -> OsdCore {
    let store: Arc<dyn ObjectStore> = Arc::new(MemEngine::new_mem(64 << 20).unwrap());
    OsdCore::new(id, store, map.clone()).unwrap()
}

/// Sends an append through `primary`, delivering its replicated write to `replica` and the
/// replica's answer back; returns the client's reply.
fn append(primary: &mut OsdCore, replica: &mut OsdCore, map: &ClusterMap, tid: u64, bytes: &[u8]) -> OsdOpReply {
    let ops = vec![ObjOp::Append { len_bytes: bytes.len() as u64 }];
    request(primary, replica, map, tid, ops, bytes)
}

/// Sends a write request of `ops` with `data` through `primary` (as [`append`] does).
fn request(
    primary: &mut OsdCore,
    replica: &mut OsdCore,
    map: &ClusterMap,
    tid: u64,
    ops: Vec<ObjOp>,
    data: &[u8],
) -> OsdOpReply {
    let pool = map.pool_by_name("p").unwrap().id;
    let loc = map.locate(pool, "obj").unwrap();
    let op =
        OsdOp { reqid: ReqId { client: 7, tid }, epoch: map.epoch, pool, pg: loc.pg.seed, object: "obj".into(), ops };
    let mut out = Vec::new();
    primary.handle(Event::ClientOp { from: CLIENT, request_id: tid, op, data: data.to_vec() }, &mut out);
    let mut client_reply = None;
    while let Some(action) = out.pop() {
        match action {
            Action::Replicate { osd, op, data } => {
                assert_eq!(osd, replica.id());
                let (reqid, mut rep_out) = (op.reqid, Vec::new());
                let (op, data): (RepOp, Vec<u8>) = decode(encode(&op, data)).unwrap();
                replica.handle(Event::RepOp { from: u64::from(primary.id().0), request_id: 1, op, data }, &mut rep_out);
                for a in rep_out {
                    let Action::Reply { frame, after_sync: true, .. } = a else { panic!("unexpected {a:?}") };
                    let (reply, _): (RepOpReply, _) = decode(frame.payload).unwrap();
                    primary.handle(Event::RepReply { from: osd, reqid, result: Ok(reply) }, &mut out);
                }
            }
            Action::Reply { to: CLIENT, frame, after_sync } => {
                let (reply, _): (OsdOpReply, _) = decode(frame.payload).unwrap();
                assert!(after_sync || reply.result.is_err(), "a write is acknowledged only after a sync");
                client_reply = Some(reply);
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    client_reply.expect("the client got an answer")
}

fn content(core: &OsdCore, map: &ClusterMap) -> Option<Vec<u8>> {
    let pool = map.pool_by_name("p").unwrap().id;
    let coll = shoal_osd::exec::pg_collection(map.locate(pool, "obj").unwrap().pg);
    core.store().read_all(&coll, "obj").ok()
}

#[test]
fn replicas_refuse_writes_resolved_against_another_state() {
    let map = map();
    let pool = map.pool_by_name("p").unwrap().id;
    let acting = map.locate(pool, "obj").unwrap().osds;
    let (mut primary, mut replica) = (core(acting[0], &map), core(acting[1], &map));

    append(&mut primary, &mut replica, &map, 1, b"abc").result.expect("first append");
    append(&mut primary, &mut replica, &map, 2, b"def").result.expect("second append");
    assert_eq!(content(&primary, &map).as_deref(), Some(&b"abcdef"[..]));
    assert_eq!(content(&replica, &map).as_deref(), Some(&b"abcdef"[..]));

    // The primary's copy is gone (as on an OSD that became primary without recovery): its append
    // would start at offset 0 and overwrite the replica's data. The replica refuses.
    let mut fresh = core(acting[0], &map);
    let reply = append(&mut fresh, &mut replica, &map, 3, b"XYZ");
    let err = reply.result.expect_err("a diverging write must fail");
    assert_eq!(err.code, ErrorCode::Corrupt, "{err}");
    assert!(err.message.contains("diverges"), "{err}");
    assert_eq!(content(&replica, &map).as_deref(), Some(&b"abcdef"[..]), "the replica's data is intact");
}

#[test]
fn a_full_member_stops_writes_that_need_space_but_not_removals() {
    let mut map = (*map()).clone();
    let pool = map.pool_by_name("p").unwrap().id;
    let acting = map.locate(pool, "obj").unwrap().osds;
    let (mut primary, mut replica) = (core(acting[0], &Arc::new(map.clone())), core(acting[1], &Arc::new(map.clone())));
    append(&mut primary, &mut replica, &map, 1, b"abc").result.expect("append before the flag");

    // The monitors flag the replica full; both cores get the new map.
    map.execute(&Command::OsdFull { id: acting[1], full: true }).unwrap();
    let flagged = Arc::new(map.clone());
    for c in [&mut primary, &mut replica] {
        c.handle(Event::Map(flagged.clone()), &mut Vec::new());
    }
    let err = append(&mut primary, &mut replica, &map, 2, b"def").result.expect_err("refused while full");
    assert_eq!(err.code, ErrorCode::NoSpace, "{err}");
    assert!(err.message.contains(&format!("{} is full", acting[1])), "names the full OSD: {err}");
    let err = request(&mut primary, &mut replica, &map, 3, vec![ObjOp::WriteFull { len_bytes: 1 }], b"x")
        .result
        .expect_err("a whole-object write needs space too");
    assert_eq!(err.code, ErrorCode::NoSpace, "{err}");
    assert_eq!(content(&primary, &map).as_deref(), Some(&b"abc"[..]), "nothing was applied");
    assert_eq!(content(&replica, &map).as_deref(), Some(&b"abc"[..]));

    // Removing gives space back, so it is served on every replica.
    request(&mut primary, &mut replica, &map, 4, vec![ObjOp::Remove], b"").result.expect("remove while full");
    assert_eq!(content(&primary, &map), None);
    assert_eq!(content(&replica, &map), None);

    // Once the flag is cleared, writes are taken again.
    map.execute(&Command::OsdFull { id: acting[1], full: false }).unwrap();
    let cleared = Arc::new(map.clone());
    for c in [&mut primary, &mut replica] {
        c.handle(Event::Map(cleared.clone()), &mut Vec::new());
    }
    append(&mut primary, &mut replica, &map, 5, b"ghi").result.expect("append after the flag is cleared");
    assert_eq!(content(&replica, &map).as_deref(), Some(&b"ghi"[..]));
}
