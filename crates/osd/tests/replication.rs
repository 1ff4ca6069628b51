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

/// The primary and the replica of object `obj`'s PG at `map`, each on a new RAM store.
fn primary_and_replica(map: &Arc<ClusterMap>) -> (OsdCore, OsdCore) {
    let acting = map.locate(map.pool_by_name("p").unwrap().id, "obj").unwrap().osds;
    (core(acting[0], map), core(acting[1], map))
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
    let op = client_op(map, tid, ops);
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
    let (mut primary, mut replica) = primary_and_replica(&map);

    append(&mut primary, &mut replica, &map, 1, b"abc").result.expect("first append");
    append(&mut primary, &mut replica, &map, 2, b"def").result.expect("second append");
    assert_eq!(content(&primary, &map).as_deref(), Some(&b"abcdef"[..]));
    assert_eq!(content(&replica, &map).as_deref(), Some(&b"abcdef"[..]));

    // The primary's copy is gone (as on an OSD that became primary without recovery, at a later
    // epoch, so its versions are newer than the replica's): its append would start at offset 0
    // and overwrite the replica's data. The replica refuses.
    let mut later = (*map).clone();
    later
        .execute(&Command::CreatePool { name: "q".into(), size: 1, min_size: None, pg_num: 1, max_object_bytes: None })
        .unwrap();
    let later = Arc::new(later);
    let mut fresh = core(acting[0], &later);
    let reply = append(&mut fresh, &mut replica, &later, 3, b"XYZ");
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
    let (mut primary, mut replica) = primary_and_replica(&Arc::new(map.clone()));
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

/// Delivers a client write to `primary` and its replicated write to `replica`, but drops every
/// answer to the client (as a connection reset would): the write is applied on both.
fn write_reply_lost(primary: &mut OsdCore, replica: &mut OsdCore, map: &ClusterMap, tid: u64, bytes: &[u8]) {
    let reply = append(primary, replica, map, tid, bytes);
    reply.result.expect("applied (the client just never hears of it)");
}

/// Client 7's request `tid` on object `obj` of pool `p`, routed with `map`.
fn client_op(map: &ClusterMap, tid: u64, ops: Vec<ObjOp>) -> OsdOp {
    let pool = map.pool_by_name("p").unwrap().id;
    let pg = map.locate(pool, "obj").unwrap().pg.seed;
    OsdOp { reqid: ReqId { client: 7, tid }, epoch: map.epoch, pool, pg, object: "obj".into(), ops }
}

/// Sends an append to `core` alone (no replica involved) and returns its answer.
fn resend(core: &mut OsdCore, map: &ClusterMap, tid: u64, bytes: &[u8]) -> OsdOpReply {
    let op = client_op(map, tid, vec![ObjOp::Append { len_bytes: bytes.len() as u64 }]);
    let mut out = Vec::new();
    core.handle(Event::ClientOp { from: CLIENT, request_id: 99, op, data: bytes.to_vec() }, &mut out);
    let [Action::Reply { frame, .. }] = &out[..] else { panic!("expected one reply, got {out:?}") };
    decode::<OsdOpReply>(frame.payload.clone()).unwrap().0
}

#[test]
fn a_resent_append_is_applied_once_by_a_new_primary_and_after_a_restart() {
    let map = map();
    let pool = map.pool_by_name("p").unwrap().id;
    let acting = map.locate(pool, "obj").unwrap().osds;
    let (mut primary, mut replica) = primary_and_replica(&map);
    append(&mut primary, &mut replica, &map, 1, b"abc").result.expect("first append");
    write_reply_lost(&mut primary, &mut replica, &map, 2, b"def");

    // The primary is marked out: the replica is now the PG's only member, and so its primary.
    let mut next = (*map).clone();
    next.execute(&Command::OsdOut { id: acting[0] }).unwrap();
    assert_eq!(next.locate(pool, "obj").unwrap().osds, vec![acting[1]]);
    replica.handle(Event::Map(Arc::new(next.clone())), &mut Vec::new());
    // The client resends append #2 there: the replica's PG log knows it, so it is not applied twice.
    let reply = resend(&mut replica, &next, 2, b"def");
    assert_eq!(reply.result.expect("answered"), vec![shoal_proto::osd::OpOutput::Done]);
    assert_eq!(content(&replica, &next).as_deref(), Some(&b"abcdef"[..]));

    // The OSD restarts on the same store: the log is read back, and the resend is still recognised.
    let store = replica.store().clone();
    let mut restarted = OsdCore::new(acting[1], store, Arc::new(next.clone())).unwrap();
    let reply = resend(&mut restarted, &next, 2, b"def");
    assert!(reply.result.is_ok(), "{reply:?}");
    assert_eq!(content(&restarted, &next).as_deref(), Some(&b"abcdef"[..]));
    // A new append gets a version of the newer epoch, after everything in the log.
    let reply = resend(&mut restarted, &next, 3, b"ghi");
    assert!(reply.result.is_ok(), "{reply:?}");
    assert_eq!(content(&restarted, &next).as_deref(), Some(&b"abcdefghi"[..]));
    let pg = next.locate(pool, "obj").unwrap().pg;
    let versions: Vec<_> =
        shoal_osd::pglog::read_entries(&**restarted.store(), pg).unwrap().iter().map(|e| e.version).collect();
    assert_eq!(versions.len(), 3);
    assert!(versions.windows(2).all(|w| w[0] < w[1]), "{versions:?}");
    assert_eq!(versions[2].epoch, next.epoch, "ordered at the new primary's epoch");
}

#[test]
fn replicas_apply_a_replicated_write_once_and_refuse_one_from_a_replaced_primary() {
    let map = map();
    let pool = map.pool_by_name("p").unwrap().id;
    let loc = map.locate(pool, "obj").unwrap();
    let mut replica = core(loc.osds[1], &map);
    let rep = |tid: u64, seq: u64, epoch: u64, precondition| RepOp {
        reqid: ReqId { client: 7, tid },
        epoch,
        pool,
        pg: loc.pg.seed,
        object: "obj".into(),
        version: shoal_proto::osd::Eversion { epoch, seq },
        precondition,
        ops: vec![ObjOp::Write { offset: 0, len_bytes: 3 }],
    };
    let deliver = |replica: &mut OsdCore, op: RepOp, data: &[u8]| {
        let mut out = Vec::new();
        replica.handle(Event::RepOp { from: 1, request_id: 1, op, data: data.to_vec() }, &mut out);
        let [Action::Reply { frame, .. }] = &out[..] else { panic!("{out:?}") };
        decode::<RepOpReply>(frame.payload.clone()).unwrap().0.result
    };
    use shoal_proto::osd::Precondition;
    deliver(&mut replica, rep(1, 1, map.epoch, Precondition::Absent), b"abc").expect("first delivery");
    // The same replicated write again (a primary resending after a reconnect): acknowledged, not
    // applied again (it would fail its precondition if it were).
    deliver(&mut replica, rep(1, 1, map.epoch, Precondition::Absent), b"abc").expect("second delivery");
    // A newer write from a newer primary, then a late one from the replaced primary.
    deliver(&mut replica, rep(2, 2, map.epoch + 5, Precondition::Size(3)), b"xyz").expect("newer primary");
    let err = deliver(&mut replica, rep(3, 3, map.epoch, Precondition::Size(3)), b"old").expect_err("stale primary");
    assert_eq!(err.code, ErrorCode::WrongPrimary, "{err}");
    assert!(err.message.contains("replaced"), "{err}");
    assert_eq!(content(&replica, &map).as_deref(), Some(&b"xyz"[..]));
    // Request 1 applied again by its primary (an idempotent resend it had not seen complete) comes
    // under a newer version: the replica applies it too, so that both hold the same bytes.
    deliver(&mut replica, rep(1, 3, map.epoch + 5, Precondition::Any), b"abc").expect("re-applied request");
    assert_eq!(content(&replica, &map).as_deref(), Some(&b"abc"[..]));
}

#[test]
fn the_pg_log_is_bounded_and_identical_on_every_member() {
    let map = map();
    let pool = map.pool_by_name("p").unwrap().id;
    let loc = map.locate(pool, "obj").unwrap();
    let (mut primary, mut replica) = primary_and_replica(&map);
    use shoal_osd::pglog::{LOG_ENTRIES, MAX_LOG_ENTRIES, TRIM_BATCH};
    // One past the longest log: the oldest batch is trimmed.
    let writes = MAX_LOG_ENTRIES as u64 + 1;
    for tid in 1..=writes {
        append(&mut primary, &mut replica, &map, tid, b"x").result.expect("append");
    }
    let on_primary = shoal_osd::pglog::read_entries(&**primary.store(), loc.pg).unwrap();
    let on_replica = shoal_osd::pglog::read_entries(&**replica.store(), loc.pg).unwrap();
    assert_eq!(on_primary.len(), MAX_LOG_ENTRIES + 1 - TRIM_BATCH, "a batch was trimmed");
    assert!(on_primary.len() >= LOG_ENTRIES);
    assert_eq!(on_primary, on_replica);
    assert_eq!(on_primary[0].reqid.tid, TRIM_BATCH as u64 + 1, "oldest trimmed first");
    // Read back from the store, the log is the same.
    let reloaded = shoal_osd::pglog::PgLog::load(&**primary.store(), loc.pg).unwrap();
    assert_eq!(reloaded.len(), on_primary.len());
    assert_eq!(reloaded.last_update(), on_primary.last().unwrap().version);
    // A resend of a write still in the log is recognised; one trimmed away is not (and would be
    // applied again): the log's bound is the dedup window.
    assert!(resend(&mut primary, &map, writes, b"x").result.is_ok());
    assert_eq!(content(&primary, &map).map(|c| c.len()), Some(writes as usize));
}

#[test]
fn collections_of_a_deleted_pool_are_purged_in_bounded_steps() {
    let map = map();
    let pool = map.pool_by_name("p").unwrap().id;
    let loc = map.locate(pool, "obj").unwrap();
    let (mut primary, mut replica) = primary_and_replica(&map);
    append(&mut primary, &mut replica, &map, 1, b"abc").result.expect("append");
    // More objects than one tick removes, straight into the PG's collection.
    let coll = shoal_osd::exec::pg_collection(loc.pg);
    let many = shoal_osd::core::PURGE_OBJECTS_PER_TICK + 100;
    for chunk in (0..many).collect::<Vec<_>>().chunks(500) {
        let mut txn = shoal_store::Transaction::new();
        for i in chunk {
            txn.touch(&coll, &format!("bulk-{i}"));
        }
        primary.store().commit(txn, shoal_store::Durability::Batch).unwrap();
    }
    let pool_collections = |c: &OsdCore| {
        c.store()
            .list_collections()
            .unwrap()
            .into_iter()
            .filter(|n| n.ends_with(&format!("{pool}.{:x}", loc.pg.seed)))
            .count()
    };
    assert_eq!(pool_collections(&primary), 2, "the PG and its log");

    let mut without = (*map).clone();
    without.execute(&Command::RemovePool { name: "p".into() }).unwrap();
    let without = Arc::new(without);
    primary.handle(Event::Map(without.clone()), &mut Vec::new());
    assert_eq!(primary.purge_backlog(), 2);
    primary.handle(Event::Tick { now_ms: 1 }, &mut Vec::new());
    assert!(primary.store().usage().unwrap().objects > 0, "one tick removes a bounded batch");
    primary.handle(Event::Tick { now_ms: 2 }, &mut Vec::new());
    primary.handle(Event::Tick { now_ms: 3 }, &mut Vec::new());
    assert_eq!(primary.purge_backlog(), 0);
    assert_eq!(pool_collections(&primary), 0);
    assert_eq!(primary.store().usage().unwrap().objects, 0);

    // An OSD that was down when the pool was deleted purges it when it starts with the new map.
    let mut restarted = OsdCore::new(replica.id(), replica.store().clone(), without.clone()).unwrap();
    assert_eq!(restarted.purge_backlog(), 2);
    restarted.handle(Event::Tick { now_ms: 1 }, &mut Vec::new());
    assert_eq!(pool_collections(&restarted), 0);

    // A late replicated write to the deleted pool (from a primary on an older map) is refused.
    let op = RepOp {
        reqid: ReqId { client: 7, tid: 9 },
        epoch: map.epoch,
        pool,
        pg: loc.pg.seed,
        object: "obj".into(),
        version: shoal_proto::osd::Eversion { epoch: map.epoch, seq: 9 },
        precondition: shoal_proto::osd::Precondition::Any,
        ops: vec![ObjOp::WriteFull { len_bytes: 1 }],
    };
    let mut out = Vec::new();
    restarted.handle(Event::RepOp { from: 1, request_id: 1, op, data: b"z".to_vec() }, &mut out);
    let [Action::Reply { frame, .. }] = &out[..] else { panic!("{out:?}") };
    let err = decode::<RepOpReply>(frame.payload.clone()).unwrap().0.result.expect_err("deleted pool");
    assert_eq!(err.code, ErrorCode::NotFound, "{err}");
    assert_eq!(pool_collections(&restarted), 0, "nothing was recreated");
}

#[test]
fn an_idempotent_resend_to_a_restarted_primary_reaches_a_replica_that_missed_it() {
    let map = map();
    let pool = map.pool_by_name("p").unwrap().id;
    let acting = map.locate(pool, "obj").unwrap().osds;
    let (mut primary, mut replica) = primary_and_replica(&map);
    request(&mut primary, &mut replica, &map, 1, vec![ObjOp::WriteFull { len_bytes: 3 }], b"old").result.unwrap();

    // The primary applies write 2 and crashes before its replicated write leaves.
    let mut out = Vec::new();
    let op = client_op(&map, 2, vec![ObjOp::WriteFull { len_bytes: 3 }]);
    primary.handle(Event::ClientOp { from: CLIENT, request_id: 2, op, data: b"new".to_vec() }, &mut out);
    assert!(out.iter().any(|a| matches!(a, Action::Replicate { .. })), "{out:?}");
    assert_eq!(content(&primary, &map).as_deref(), Some(&b"new"[..]));
    assert_eq!(content(&replica, &map).as_deref(), Some(&b"old"[..]), "the replicated write was lost");
    let mut restarted = OsdCore::new(acting[0], primary.store().clone(), map.clone()).unwrap();

    // The resend is in the restarted primary's log, but it never saw the write complete: a whole-
    // object write is applied again, so the replica gets it too.
    let reply = request(&mut restarted, &mut replica, &map, 2, vec![ObjOp::WriteFull { len_bytes: 3 }], b"new");
    reply.result.expect("resend");
    assert_eq!(content(&replica, &map).as_deref(), Some(&b"new"[..]));
    // Once seen complete, a further resend is answered from the log without another write.
    let mut out = Vec::new();
    let op = client_op(&map, 2, vec![ObjOp::WriteFull { len_bytes: 3 }]);
    restarted.handle(Event::ClientOp { from: CLIENT, request_id: 3, op, data: b"new".to_vec() }, &mut out);
    assert!(matches!(&out[..], [Action::Reply { .. }]), "answered from the log: {out:?}");
}

#[test]
fn any_member_answers_what_it_holds_of_a_pg() {
    let map = map();
    let (mut primary, mut replica) = primary_and_replica(&map);
    append(&mut primary, &mut replica, &map, 1, b"abc").result.unwrap();
    append(&mut primary, &mut replica, &map, 2, b"def").result.unwrap();
    let pool = map.pool_by_name("p").unwrap().id;
    let pg = map.locate(pool, "obj").unwrap().pg;
    let query = |core: &mut OsdCore, seed: u32| {
        let mut out = Vec::new();
        let req = shoal_proto::osd::PgQuery { epoch: map.epoch, pool, pg: seed };
        core.handle(Event::PgQuery { from: CLIENT, request_id: 1, req }, &mut out);
        let [Action::Reply { frame, .. }] = &out[..] else { panic!("{out:?}") };
        decode::<shoal_proto::osd::PgQueryReply>(frame.payload.clone()).unwrap().0.result
    };
    let (a, b) = (query(&mut primary, pg.seed).unwrap(), query(&mut replica, pg.seed).unwrap());
    assert_eq!(a, b, "both members hold the same writes");
    assert_eq!((a.objects, a.log_entries), (1, 2));
    assert_eq!(a.last_update.seq, 2);
    let empty = query(&mut primary, (pg.seed + 1) % 8).unwrap();
    assert_eq!((empty.objects, empty.log_entries, empty.last_update.seq), (0, 0, 0));
    let err = query(&mut primary, 99).unwrap_err();
    assert_eq!(err.code, ErrorCode::NotFound, "{err}");
}
