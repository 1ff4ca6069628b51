//! OSD cores wired by a small synchronous network in one thread: peering (queries, activation,
//! the monitors' activation record), primary-copy replication, recovery, and what replicas refuse
//! (a write resolved against another state, a replicated write that skips one, a replaced
//! primary's writes). A PG with a member the monitors flagged full takes removals but no other
//! writes; a backfill target past the backfillfull share waits without filling up.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use shoal_map::{ClusterMap, Command, OsdId, Weight};
use shoal_osd::{Action, Event, OsdCore, PeerCall};
use shoal_proto::osd::{ObjOp, OpOutput, OsdOp, OsdOpReply, RepOp, RepOpReply, ReqId};
use shoal_proto::{ErrorCode, Frame, Message, decode, encode};
use shoal_store::ObjectStore;
use shoal_store::engine::MemEngine;

const CLIENT: u64 = 1_000;
/// The operator's token (`shoal pg ...` commands).
const OPERATOR: u64 = 2_000;

fn new_map() -> ClusterMap {
    let mut map = ClusterMap::new("t", BTreeMap::new());
    for i in 0..2 {
        map.execute(&Command::CreateOsd { id: Some(OsdId(i)), host: format!("h{i}"), weight: Weight::ONE }).unwrap();
        let addr = format!("127.0.0.1:{}", 7000 + i).parse().unwrap();
        map.execute(&Command::OsdBoot { id: OsdId(i), addr }).unwrap();
    }
    let pool = Command::CreatePool { name: "p".into(), size: 2, min_size: Some(1), pg_num: 8, max_object_bytes: None };
    map.execute(&pool).unwrap();
    map
}

enum Call {
    Rep(ReqId),
    Peer(PeerCall),
}

/// Two OSDs and a monitor's map, with every message delivered in order at once.
struct Net {
    map: ClusterMap,
    cores: BTreeMap<u32, OsdCore>,
    calls: BTreeMap<u64, (u32, u32, Call)>,
    next_rid: u64,
    replies: BTreeMap<u64, OsdOpReply>,
    /// Replicated writes to these OSDs are lost.
    drop_rep_to: Vec<u32>,
    /// Replicated writes captured instead of delivered (when `capture` is set).
    captured: Vec<(u32, RepOp, Vec<u8>)>,
    capture: bool,
    /// Recovery pushes held instead of delivered (when `hold_pushes` is set), to count what is in
    /// flight at once.
    held_pushes: VecDeque<(u32, Action)>,
    hold_pushes: bool,
    /// The bulk data of the last answer to the client (its reads).
    last_read: Option<Vec<u8>>,
    /// Reads the OSDs asked to run beside their workers, not run yet.
    held_reads: VecDeque<(u32, shoal_osd::ReadJob)>,
    /// The bulk data of every answer to the client, by request.
    data_of: BTreeMap<u64, Vec<u8>>,
    /// The engines behind the cores' stores (to damage copies).
    engines: BTreeMap<u32, Arc<MemEngine>>,
    /// Answers to the operator's commands.
    operator: Vec<Frame>,
    /// Pushes and pulls of one part of an object (not whole copies) sent so far.
    parts_pushed: usize,
    parts_pulled: usize,
    /// Pushes sent so far (whole copies and parts).
    pushes: usize,
    /// Names of the objects those pushes carried, and of the objects backfill chunks kept on
    /// their targets, in order.
    names_pushed: Vec<String>,
    names_kept: Vec<String>,
    /// Backfill scans held instead of delivered (when `hold_scans` is set).
    held_scans: VecDeque<(u32, Action)>,
    hold_scans: bool,
    /// Questions about copies of unfound objects (decision 0066) still to lose on the way: each
    /// is answered "no answer", as the driver answers a call whose peer went silent.
    lose_copies_queries: usize,
    /// The PG log bounds of every core, restarted ones too (the default if `None`).
    log_bounds: Option<shoal_osd::pglog::LogBounds>,
}

impl Net {
    fn new() -> Net {
        Net::with_log_bounds(None)
    }

    /// Two OSDs whose PG logs keep `bounds` (the default if `None`).
    fn with_log_bounds(bounds: Option<shoal_osd::pglog::LogBounds>) -> Net {
        let map = new_map();
        let shared = Arc::new(map.clone());
        let (mut cores, mut engines) = (BTreeMap::new(), BTreeMap::new());
        for i in 0..2 {
            let engine = Arc::new(MemEngine::new_mem(64 << 20).unwrap());
            let store: Arc<dyn ObjectStore> = engine.clone();
            let mut core = OsdCore::new(OsdId(i), store, shared.clone()).unwrap();
            if let Some(bounds) = bounds {
                core.set_log_bounds(bounds);
            }
            cores.insert(i, core);
            engines.insert(i, engine);
        }
        let mut net = Net {
            map,
            cores,
            calls: BTreeMap::new(),
            next_rid: 1,
            replies: BTreeMap::new(),
            drop_rep_to: Vec::new(),
            captured: Vec::new(),
            capture: false,
            held_pushes: VecDeque::new(),
            hold_pushes: false,
            last_read: None,
            held_reads: VecDeque::new(),
            data_of: BTreeMap::new(),
            engines,
            operator: Vec::new(),
            parts_pushed: 0,
            parts_pulled: 0,
            pushes: 0,
            names_pushed: Vec::new(),
            names_kept: Vec::new(),
            held_scans: VecDeque::new(),
            hold_scans: false,
            lose_copies_queries: 0,
            log_bounds: bounds,
        };
        net.broadcast();
        net
    }

    fn acting(&self) -> Vec<OsdId> {
        self.map.locate(self.map.pool_by_name("p").unwrap().id, "obj").unwrap().osds
    }

    fn core(&self, osd: OsdId) -> &OsdCore {
        &self.cores[&osd.0]
    }

    /// Every core gets the current map.
    fn broadcast(&mut self) {
        let map = Arc::new(self.map.clone());
        let ids: Vec<u32> = self.cores.keys().copied().collect();
        let queue = ids.into_iter().map(|i| (i, Event::Map(map.clone()))).collect();
        self.run(queue);
    }

    fn change(&mut self, cmd: Command) {
        self.map.execute(&cmd).unwrap();
        self.broadcast();
    }

    fn tick(&mut self) {
        let ids: Vec<u32> = self.cores.keys().copied().collect();
        self.run(ids.into_iter().map(|i| (i, Event::Tick { now_ms: 1 })).collect());
    }

    /// Replaces OSD `osd`'s core by a fresh one on the same store (a restart) and boots it.
    fn restart(&mut self, osd: OsdId) {
        let store = self.cores[&osd.0].store().clone();
        let core = self.new_core(osd, store);
        self.cores.insert(osd.0, core);
        let addr = format!("127.0.0.1:{}", 8000 + self.map.epoch).parse().unwrap();
        self.change(Command::OsdBoot { id: osd, addr });
    }

    /// `n` object names of pool `p` other than "obj" that map to PG `pg`.
    fn names_in_pg(&self, pg: shoal_map::PgId, n: usize) -> Vec<String> {
        let pool = self.map.pool_by_name("p").unwrap().id;
        let names: Vec<String> = (0..10_000)
            .map(|i| format!("other-{i}"))
            .filter(|o| self.map.locate(pool, o).unwrap().pg == pg)
            .take(n)
            .collect();
        assert_eq!(names.len(), n, "names in {pg}");
        names
    }

    /// A core for `osd` on `store`, with the network's log bounds.
    fn new_core(&self, osd: OsdId, store: Arc<dyn ObjectStore>) -> OsdCore {
        let mut core = OsdCore::new(osd, store, Arc::new(self.map.clone())).unwrap();
        if let Some(bounds) = self.log_bounds {
            core.set_log_bounds(bounds);
        }
        core
    }

    /// Every core's clock moves to `now_ms` (never backwards) and it ticks.
    fn tick_at(&mut self, now_ms: u64) {
        let ids: Vec<u32> = self.cores.keys().copied().collect();
        self.run(ids.into_iter().map(|i| (i, Event::Tick { now_ms })).collect());
    }

    /// Replaces OSD `osd`'s store by an empty one (a new disk) and boots it on it.
    fn replace_disk(&mut self, osd: OsdId) {
        self.replace_disk_sized(osd, 64 << 20);
    }

    /// Replaces OSD `osd`'s store by an empty one of `size_bytes` and boots it on it.
    fn replace_disk_sized(&mut self, osd: OsdId, size_bytes: u64) {
        let fresh = Arc::new(MemEngine::new_mem(size_bytes).unwrap());
        let store: Arc<dyn ObjectStore> = fresh.clone();
        let core = self.new_core(osd, store);
        self.cores.insert(osd.0, core);
        self.engines.insert(osd.0, fresh);
        let addr = format!("127.0.0.1:{}", 8000 + self.map.epoch).parse().unwrap();
        self.change(Command::OsdBoot { id: osd, addr });
    }

    /// Delivers `queue` and everything it causes, in order.
    fn run(&mut self, mut queue: VecDeque<(u32, Event)>) {
        let mut steps = 0;
        while let Some((osd, event)) = queue.pop_front() {
            steps += 1;
            assert!(steps < 100_000, "the network does not settle");
            let mut out = Vec::new();
            let Some(core) = self.cores.get_mut(&osd) else { continue };
            core.handle(event, &mut out);
            for action in out {
                self.route(osd, action, &mut queue);
            }
        }
    }

    fn route(&mut self, from: u32, action: Action, queue: &mut VecDeque<(u32, Event)>) {
        match action {
            Action::Reply { to: CLIENT, frame, .. } => {
                let request_id = frame.request_id;
                let (reply, data): (OsdOpReply, Vec<u8>) = decode(frame.into_payload()).unwrap();
                self.data_of.insert(request_id, data.clone());
                self.last_read = Some(data);
                self.replies.insert(request_id, reply);
            }
            Action::Reply { to: OPERATOR, frame, .. } => self.operator.push(frame),
            Action::Reply { frame, .. } => self.answer(frame, queue),
            Action::Replicate { osd, op, data, data_crc } => {
                // A checksum the primary passes on must be its data's (the replica's frame
                // header starts from it).
                assert!(data_crc.is_none() || !data.is_empty(), "a checksum for a log-only copy");
                assert!(data_crc.is_none_or(|c| shoal_util::crc32c(&data) == c), "a wrong forwarded checksum");
                if self.drop_rep_to.contains(&osd.0) {
                    return;
                }
                if self.capture {
                    self.captured.push((osd.0, op, data.to_vec()));
                    return;
                }
                let rid = self.rid(from, osd.0, Call::Rep(op.reqid));
                let frame = Frame::with_checked_data(RepOp::TYPE, rid, data, data_crc, encode(&op, Vec::new()));
                let (op, data): (RepOp, bytes::Bytes) = shoal_proto::decode_bytes(frame.into_bytes()).unwrap();
                let data = shoal_util::SummedBytes::summing(data);
                queue.push_back((osd.0, Event::RepOp { from: u64::from(from), request_id: rid, op, data }));
            }
            Action::Peer { msg_type, .. }
                if self.hold_pushes && msg_type == <shoal_proto::osd::PgPush as shoal_proto::Message>::TYPE =>
            {
                self.held_pushes.push_back((from, action));
            }
            Action::Peer { msg_type, .. }
                if self.hold_scans && msg_type == <shoal_proto::osd::PgScanVersions as shoal_proto::Message>::TYPE =>
            {
                self.held_scans.push_back((from, action));
            }
            Action::Peer { osd, call: call @ PeerCall::CopiesElsewhere { .. }, .. } if self.lose_copies_queries > 0 => {
                self.lose_copies_queries -= 1;
                let result = Err(shoal_proto::RemoteError::new(ErrorCode::Timeout, "no answer"));
                queue.push_back((from, Event::PeerReply { from: osd, call, result }));
            }
            Action::Peer { osd, msg_type, payload, call } => {
                use shoal_proto::osd::{PgPull, PgPush};
                if msg_type == <PgPush as shoal_proto::Message>::TYPE {
                    let push = decode::<PgPush>(payload.clone()).unwrap().0;
                    self.pushes += 1;
                    self.parts_pushed += usize::from(push.part.is_some());
                    self.names_pushed.extend(push.objects.iter().map(|c| c.name.clone()));
                    self.names_kept.extend(push.kept.iter().map(|(name, _)| name.clone()));
                }
                if msg_type == <PgPull as shoal_proto::Message>::TYPE {
                    self.parts_pulled += usize::from(decode::<PgPull>(payload.clone()).unwrap().0.part.is_some());
                }
                let rid = self.rid(from, osd.0, Call::Peer(call));
                queue.push_back((
                    osd.0,
                    Event::PeerMsg { from: u64::from(from), request_id: rid, msg_type, payload: payload.into() },
                ));
            }
            Action::MonCommand(cmd) => {
                let epoch = self.map.execute(&cmd).unwrap().map(|i| i.epoch);
                if epoch.is_some() {
                    let map = Arc::new(self.map.clone());
                    for i in self.cores.keys() {
                        queue.push_back((*i, Event::Map(map.clone())));
                    }
                }
                queue.push_back((from, Event::MonCommandDone { epoch }));
            }
            Action::Stats(_) => {}
            // Reads run beside the worker: held until the test lets them run.
            Action::Read(job) => self.held_reads.push_back((from, job)),
        }
    }

    /// Delivers the replicated writes captured so far (oldest first) and everything they cause
    /// (replicated writes among that are captured if `capture` is still set).
    fn deliver_captured(&mut self, from: u32) {
        let captured: Vec<_> = self.captured.drain(..).collect();
        let capture = std::mem::replace(&mut self.capture, false);
        let mut queue = VecDeque::new();
        for (osd, op, data) in captured {
            let action = Action::Replicate { osd: OsdId(osd), op, data: bytes::Bytes::from(data), data_crc: None };
            self.route(from, action, &mut queue);
        }
        self.capture = capture;
        self.run(queue);
    }

    /// Runs the reads held so far (not those they cause), oldest first, on their OSDs' stores
    /// now, and delivers what they cause.
    fn run_reads(&mut self) {
        let reads: Vec<_> = self.held_reads.drain(..).collect();
        for (osd, job) in reads {
            let result = shoal_osd::exec::execute_reads(&**self.cores[&osd].store(), &job.coll, &job.object, &job.ops);
            self.run(VecDeque::from([(osd, Event::ReadDone { id: job.id, result })]));
        }
    }

    fn rid(&mut self, caller: u32, callee: u32, call: Call) -> u64 {
        let rid = self.next_rid;
        self.next_rid += 1;
        self.calls.insert(rid, (caller, callee, call));
        rid
    }

    fn answer(&mut self, frame: Frame, queue: &mut VecDeque<(u32, Event)>) {
        let Some((caller, callee, call)) = self.calls.remove(&frame.request_id) else { return };
        let event = match call {
            Call::Rep(reqid) => {
                let (reply, _): (RepOpReply, _) = decode(frame.into_payload()).unwrap();
                Event::RepReply { from: OsdId(callee), reqid, result: Ok(reply) }
            }
            Call::Peer(call) => Event::PeerReply { from: OsdId(callee), call, result: Ok(frame) },
        };
        queue.push_back((caller, event));
    }

    /// Sends client 7's request `tid` to the primary and returns its answer.
    fn request(&mut self, tid: u64, ops: Vec<ObjOp>, data: &[u8]) -> OsdOpReply {
        let op = client_op(&self.map, tid, ops);
        let primary = self.acting()[0].0;
        let request_id = self.submit(primary, op, data, 0);
        self.replies.remove(&request_id).expect("the client got an answer")
    }

    /// Delivers client request `op` with `data`, arriving at `arrived_ms`, to `osd` and
    /// everything it causes; returns its request id (its answer, if any, is in `replies`).
    fn submit(&mut self, osd: u32, op: OsdOp, data: &[u8], arrived_ms: u64) -> u64 {
        let request_id = self.next_rid;
        self.next_rid += 1;
        // As a primary's reader gives it: the data with the checksum computed on receipt.
        let data_crc = (!data.is_empty()).then(|| shoal_util::crc32c(data));
        let data = shoal_util::SummedBytes::summing(bytes::Bytes::from(data.to_vec()));
        let event = Event::ClientOp { from: CLIENT, request_id, op, data, data_crc, arrived_ms };
        self.run(VecDeque::from([(osd, event)]));
        request_id
    }

    /// The bytes request `request_id` read, once answered with success.
    fn read_answer(&mut self, request_id: u64) -> Vec<u8> {
        self.replies.remove(&request_id).expect("answered").result.expect("read");
        self.data_of.remove(&request_id).expect("the answer's data")
    }

    fn append(&mut self, tid: u64, bytes: &[u8]) -> OsdOpReply {
        self.request(tid, vec![ObjOp::Append { len_bytes: bytes.len() as u64 }], bytes)
    }

    /// Sends the operator's command `cmd` for `pg` to `osd` and returns the answer.
    fn pg_command(
        &mut self,
        osd: OsdId,
        pg: shoal_map::PgId,
        cmd: shoal_proto::osd::PgCmd,
    ) -> shoal_proto::osd::PgCommandReply {
        // Repeated while the primary only waits for other OSDs' answers, as `shoal pg` does
        // (here they arrive with the command's own delivery).
        for _ in 0..5 {
            let req =
                shoal_proto::osd::PgCommand { epoch: self.map.epoch, pool: pg.pool, pg: pg.seed, cmd: cmd.clone() };
            let request_id = self.next_rid;
            self.next_rid += 1;
            self.run(VecDeque::from([(osd.0, Event::PgCommand { from: OPERATOR, request_id, req })]));
            let frame = self.operator.pop().expect("the primary answered");
            assert_eq!(frame.request_id, request_id);
            let reply = decode::<shoal_proto::osd::PgCommandReply>(frame.into_payload()).unwrap().0;
            if !matches!(&reply.result, Err(e) if e.code == ErrorCode::TryAgain) {
                return reply;
            }
        }
        panic!("the primary still waits for other OSDs after five tries");
    }

    fn content(&self, osd: OsdId) -> Option<Vec<u8>> {
        let pool = self.map.pool_by_name("p").unwrap().id;
        let coll = shoal_osd::exec::pg_collection(self.map.locate(pool, "obj").unwrap().pg);
        self.cores[&osd.0].store().read_all(&coll, "obj").ok()
    }
}

/// Client 7's request `tid` on object `obj` of pool `p`, routed with `map`.
fn client_op(map: &ClusterMap, tid: u64, ops: Vec<ObjOp>) -> OsdOp {
    let pool = map.pool_by_name("p").unwrap().id;
    let pg = map.locate(pool, "obj").unwrap().pg.seed;
    OsdOp {
        reqid: ReqId { client: 7, tid },
        epoch: map.epoch,
        pool,
        pg,
        object: "obj".into(),
        ops,
        expires_in_ms: None,
        resend: false,
        frees_space: false,
    }
}

#[test]
fn a_pg_serves_only_once_peered_and_recorded_by_the_monitors() {
    let mut net = Net::new();
    let pool = net.map.pool_by_name("p").unwrap().id;
    let pg = net.map.locate(pool, "obj").unwrap().pg;
    let record = net.map.pg_active.get(&pg).expect("the monitors recorded the activation").clone();
    assert_eq!(record.members, net.acting());
    assert!(net.core(net.acting()[0]).pg_state(pg).as_deref() == Some("active+clean"));
    net.append(1, b"abc").result.expect("first append");
    net.append(2, b"def").result.expect("second append");
    for osd in net.acting() {
        assert_eq!(net.content(osd).as_deref(), Some(&b"abcdef"[..]));
    }
}

#[test]
fn replicas_refuse_writes_resolved_against_another_state() {
    let mut net = Net::new();
    net.append(1, b"abc").result.expect("first append");
    let acting = net.acting();
    // The replica's copy is damaged behind the OSD's back (a bug or a bad disk): the primary
    // resolves the next append at offset 3, which the replica's copy does not match.
    let pool = net.map.pool_by_name("p").unwrap().id;
    let coll = shoal_osd::exec::pg_collection(net.map.locate(pool, "obj").unwrap().pg);
    let mut txn = shoal_store::Transaction::new();
    txn.truncate(&coll, "obj", 1);
    net.core(acting[1]).store().commit(txn, shoal_store::Durability::Sync).unwrap();
    let err = net.append(2, b"def").result.expect_err("a diverging write must fail");
    assert_eq!(err.code, ErrorCode::Timeout, "reported for a resend: {err}");
    assert!(err.message.contains("diverges"), "{err}");
    // The refusal made the primary peer again: the replica now lacks the append (it is not in its
    // log), so peering recovered the primary's whole copy to it.
    for osd in &acting {
        assert_eq!(net.content(*osd).as_deref(), Some(&b"abcdef"[..]), "{osd}");
    }
}

#[test]
fn guarded_writes_apply_only_when_their_guards_hold_on_every_member() {
    let mut net = Net::new();
    let tag = |t: &[u8]| ObjOp::SetXattr { name: "tag".into(), value: t.to_vec() };
    let put = |data: &[u8]| ObjOp::WriteFull { len_bytes: data.len() as u64 };
    let xattr_is = |v: Option<&[u8]>| ObjOp::AssertXattr { name: "tag".into(), value: v.map(<[u8]>::to_vec) };
    // Created only if absent: the guard holds on a missing object.
    net.request(1, vec![xattr_is(None), put(b"one"), tag(b"a")], b"one").result.expect("guard on an absent object");
    // The same guard now fails, and nothing of the request is applied anywhere.
    let err = net.request(2, vec![xattr_is(None), put(b"two"), tag(b"b")], b"two").result.expect_err("must conflict");
    assert_eq!(err.code, ErrorCode::Conflict, "{err}");
    assert!(err.message.contains("\"tag\""), "the error names the guard: {err}");
    // A compare-and-swap on the xattr: the wrong value conflicts, the right one applies.
    let err = net.request(3, vec![xattr_is(Some(b"b")), put(b"two"), tag(b"b")], b"two").result.expect_err("stale");
    assert_eq!(err.code, ErrorCode::Conflict);
    net.request(4, vec![xattr_is(Some(b"a")), put(b"two"), tag(b"b")], b"two").result.expect("matching guard");
    // Omap guards: absent, then a value.
    let omap_is = |v: Option<&[u8]>| ObjOp::AssertOmap { key: b"k".to_vec(), value: v.map(<[u8]>::to_vec) };
    let set = |v: &[u8]| ObjOp::OmapSet { entries: vec![(b"k".to_vec(), v.to_vec())] };
    net.request(5, vec![omap_is(None), set(b"1")], b"").result.expect("absent key");
    let err = net.request(6, vec![omap_is(None), set(b"2")], b"").result.expect_err("present key");
    assert_eq!(err.code, ErrorCode::Conflict);
    net.request(7, vec![omap_is(Some(b"1")), set(b"2")], b"").result.expect("swap 1 -> 2");
    let err = net.request(8, vec![omap_is(Some(b"1")), set(b"3")], b"").result.expect_err("1 is gone");
    assert_eq!(err.code, ErrorCode::Conflict);
    let pool = net.map.pool_by_name("p").unwrap().id;
    let coll = shoal_osd::exec::pg_collection(net.map.locate(pool, "obj").unwrap().pg);
    for osd in net.acting() {
        let store = net.core(osd).store();
        assert_eq!(net.content(osd).as_deref(), Some(&b"two"[..]), "{osd}");
        assert_eq!(store.get_xattr(&coll, "obj", "tag").unwrap().as_deref(), Some(&b"b"[..]), "{osd}");
        assert_eq!(store.omap_get(&coll, "obj", b"k").unwrap().as_deref(), Some(&b"2"[..]), "{osd}");
    }
}

#[test]
fn reads_in_a_write_request_see_the_object_just_before_its_writes() {
    let mut net = Net::new();
    let get = || {
        vec![ObjOp::GetXattr { name: "tag".into() }, ObjOp::OmapGet { keys: vec![b"k".to_vec(), b"other".to_vec()] }]
    };
    let set = |t: &[u8]| {
        vec![
            ObjOp::SetXattr { name: "tag".into(), value: t.to_vec() },
            ObjOp::OmapSet { entries: vec![(b"k".to_vec(), t.to_vec())] },
        ]
    };
    let request = |net: &mut Net, tid: u64, t: &[u8]| {
        let mut ops = get();
        ops.extend(set(t));
        net.request(tid, ops, b"").result
    };
    // On an absent object the reads find nothing; the writes create it.
    let first = request(&mut net, 1, b"a").expect("reads beside writes on an absent object");
    assert_eq!(
        first,
        vec![
            OpOutput::Xattr(None),
            OpOutput::Omap(vec![(b"k".to_vec(), None), (b"other".to_vec(), None)]),
            OpOutput::Done,
            OpOutput::Done,
        ]
    );
    // The next request reads what the first wrote (on every member: the reply waited for all).
    let second = request(&mut net, 2, b"b").expect("reads beside writes");
    assert_eq!(second[0], OpOutput::Xattr(Some(b"a".to_vec())));
    assert_eq!(second[1], OpOutput::Omap(vec![(b"k".to_vec(), Some(b"a".to_vec())), (b"other".to_vec(), None)]));
    // A resend of an applied request is answered from the PG log, which keeps no outputs: every
    // operation answers Done, reads too (callers then read again), and nothing applies twice.
    let resent = request(&mut net, 2, b"b").expect("a resend");
    assert_eq!(resent, vec![OpOutput::Done; 4]);
    let third = request(&mut net, 3, b"c").expect("reads beside writes");
    assert_eq!(third[0], OpOutput::Xattr(Some(b"b".to_vec())), "the resend did not apply again");
    // Reads of data, stat or listings cannot ride in a write request, and a refused request
    // changes nothing.
    for read in [ObjOp::Read { offset: 0, len_bytes: 4 }, ObjOp::Stat, ObjOp::OmapList { after: None, max: 5 }] {
        let mut ops = vec![read.clone()];
        ops.extend(set(b"x"));
        let err = net.request(10, ops, b"").result.expect_err("a data read in a write request");
        assert_eq!(err.code, ErrorCode::Invalid, "{read:?}: {err}");
        assert!(err.message.contains("may read only xattrs and omap values"), "{err}");
    }
    let pool = net.map.pool_by_name("p").unwrap().id;
    let coll = shoal_osd::exec::pg_collection(net.map.locate(pool, "obj").unwrap().pg);
    for osd in net.acting() {
        let store = net.core(osd).store();
        assert_eq!(store.get_xattr(&coll, "obj", "tag").unwrap().as_deref(), Some(&b"c"[..]), "{osd}");
    }
}

#[test]
fn a_full_member_stops_writes_that_need_space_but_not_removals() {
    let mut net = Net::new();
    let acting = net.acting();
    net.append(1, b"abc").result.expect("append before the flag");
    net.change(Command::OsdFull { id: acting[1], full: true });
    let err = net.append(2, b"def").result.expect_err("refused while full");
    assert_eq!(err.code, ErrorCode::NoSpace, "{err}");
    assert!(err.message.contains(&format!("{} is full", acting[1])), "names the full OSD: {err}");
    let err =
        net.request(3, vec![ObjOp::WriteFull { len_bytes: 1 }], b"x").result.expect_err("a whole write needs space");
    assert_eq!(err.code, ErrorCode::NoSpace, "{err}");
    for osd in &acting {
        assert_eq!(net.content(*osd).as_deref(), Some(&b"abc"[..]), "nothing was applied");
    }
    // Removing gives space back, so it is served on every replica.
    net.request(4, vec![ObjOp::Remove], b"").result.expect("remove while full");
    for osd in &acting {
        assert_eq!(net.content(*osd), None);
    }
    net.change(Command::OsdFull { id: acting[1], full: false });
    net.append(5, b"ghi").result.expect("append after the flag is cleared");
    assert_eq!(net.content(acting[1]).as_deref(), Some(&b"ghi"[..]));
}

#[test]
fn a_full_member_takes_small_writes_made_to_free_space_but_no_others() {
    let mut net = Net::new();
    let acting = net.acting();
    net.append(1, b"abc").result.expect("append before the flag");
    net.change(Command::OsdFull { id: acting[1], full: true });
    let pool = net.map.pool_by_name("p").unwrap().id;
    let coll = shoal_osd::exec::pg_collection(net.map.locate(pool, "obj").unwrap().pg);
    let primary = acting[0].0;
    let marked = |map: &ClusterMap, tid: u64, ops: Vec<ObjOp>| OsdOp { frees_space: true, ..client_op(map, tid, ops) };
    let record =
        |key: &[u8], value_bytes: usize| ObjOp::OmapSet { entries: vec![(key.to_vec(), vec![7; value_bytes])] };

    // Unmarked, a delete's bookkeeping (an omap record) is refused like any write that needs space.
    let rid = net.submit(primary, client_op(&net.map, 2, vec![record(b"gc", 100)]), b"", 0);
    let err = net.replies.remove(&rid).expect("answered").result.expect_err("refused while full");
    assert_eq!(err.code, ErrorCode::NoSpace, "{err}");
    // Marked as made to free space and small, it is served on every member, with a removal of a
    // range and an xattr.
    let small = vec![
        record(b"gc", 100),
        ObjOp::SetXattr { name: "state".into(), value: b"deleting".to_vec() },
        ObjOp::Zero { offset: 0, len_bytes: 1 },
    ];
    let rid = net.submit(primary, marked(&net.map, 3, small), b"", 0);
    net.replies.remove(&rid).expect("answered").result.expect("a small marked write while full");
    for osd in &acting {
        let store = net.core(*osd).store();
        assert_eq!(store.omap_get(&coll, "obj", b"gc").unwrap().map(|v| v.len()), Some(100), "{osd}");
        assert_eq!(store.get_xattr(&coll, "obj", "state").unwrap().as_deref(), Some(&b"deleting"[..]), "{osd}");
    }
    // Marked but larger than the reserve allows (data or metadata), it is refused and changes nothing.
    let big = shoal_proto::osd::FULL_RESERVE_REQUEST_BYTES as usize;
    let rid = net.submit(primary, marked(&net.map, 4, vec![record(b"big", big)]), b"", 0);
    let err = net.replies.remove(&rid).expect("answered").result.expect_err("too big for the reserve");
    assert_eq!(err.code, ErrorCode::NoSpace, "{err}");
    let data = vec![1u8; big + 1];
    let op = marked(&net.map, 5, vec![ObjOp::Write { offset: 0, len_bytes: data.len() as u64 }]);
    let rid = net.submit(primary, op, &data, 0);
    let err = net.replies.remove(&rid).expect("answered").result.expect_err("data beyond the reserve");
    assert_eq!(err.code, ErrorCode::NoSpace, "{err}");
    for osd in &acting {
        let store = net.core(*osd).store();
        assert_eq!(store.omap_get(&coll, "obj", b"big").unwrap(), None, "{osd}");
        assert_eq!(net.content(*osd).as_deref(), Some(&b"\0bc"[..]), "{osd}: only the zeroed byte changed");
    }
}

#[test]
fn a_resent_append_is_applied_once_by_a_new_primary_and_after_a_restart() {
    let mut net = Net::new();
    let acting = net.acting();
    net.append(1, b"abc").result.expect("first append");
    net.append(2, b"def").result.expect("applied; the client never hears of it");

    // The primary is marked out: the replica is now the PG's only member, and so its primary.
    net.change(Command::OsdOut { id: acting[0] });
    assert_eq!(net.acting(), vec![acting[1]]);
    // The client resends append #2 there: the PG log knows it, so it is not applied twice.
    let reply = net.append(2, b"def");
    assert_eq!(reply.result.expect("answered"), vec![shoal_proto::osd::OpOutput::Done]);
    assert_eq!(net.content(acting[1]).as_deref(), Some(&b"abcdef"[..]));

    // The OSD restarts on the same store: it peers again and still recognises the resend.
    net.restart(acting[1]);
    assert!(net.append(2, b"def").result.is_ok());
    assert_eq!(net.content(acting[1]).as_deref(), Some(&b"abcdef"[..]));
    // A new append gets a version after everything in the log.
    net.append(3, b"ghi").result.expect("new append");
    assert_eq!(net.content(acting[1]).as_deref(), Some(&b"abcdefghi"[..]));
    let pool = net.map.pool_by_name("p").unwrap().id;
    let pg = net.map.locate(pool, "obj").unwrap().pg;
    let versions: Vec<_> =
        shoal_osd::pglog::read_entries(&**net.core(acting[1]).store(), pg).unwrap().iter().map(|e| e.version).collect();
    assert_eq!(versions.len(), 3);
    assert!(versions.windows(2).all(|w| w[0] < w[1]), "{versions:?}");

    // The old primary comes back in: it is a stray or a member again, and ends with the same bytes.
    net.change(Command::OsdIn { id: acting[0] });
    for _ in 0..20 {
        net.tick();
    }
    for osd in net.acting() {
        assert_eq!(net.content(osd).as_deref(), Some(&b"abcdefghi"[..]), "{osd}");
    }
}

#[test]
fn replicas_apply_a_replicated_write_once_and_refuse_gaps_and_replaced_primaries() {
    let mut net = Net::new();
    let acting = net.acting();
    net.append(1, b"abc").result.expect("first append");
    // Capture the next replicated write instead of delivering it.
    net.capture = true;
    let op = client_op(&net.map, 2, vec![ObjOp::Append { len_bytes: 3 }]);
    net.run(VecDeque::from([(
        acting[0].0,
        Event::ClientOp {
            from: CLIENT,
            request_id: 50,
            op,
            data: bytes::Bytes::from(b"def".to_vec()).into(),
            data_crc: None,
            arrived_ms: 0,
        },
    )]));
    net.capture = false;
    let (to, rep, data) = net.captured.pop().expect("a replicated write");
    let deliver = |net: &mut Net, op: RepOp, data: &[u8]| {
        let mut out = Vec::new();
        net.cores.get_mut(&to).unwrap().handle(
            Event::RepOp { from: 99, request_id: 1, op, data: bytes::Bytes::from(data.to_vec()).into() },
            &mut out,
        );
        let [Action::Reply { frame, .. }] = &out[..] else { panic!("{out:?}") };
        decode::<RepOpReply>(frame.clone().into_payload()).unwrap().0.result
    };
    // One that skips a write it follows is refused (the replica missed one).
    let mut gap = rep.clone();
    gap.prev.seq += 1;
    gap.version.seq += 1;
    let err = deliver(&mut net, gap, &data).expect_err("gap");
    assert_eq!(err.code, ErrorCode::WrongPrimary, "{err}");
    assert!(err.message.contains("follows"), "{err}");
    // Delivered twice (a primary resending after a reconnect): applied once.
    deliver(&mut net, rep.clone(), &data).expect("first delivery");
    deliver(&mut net, rep.clone(), &data).expect("second delivery");
    assert_eq!(net.content(OsdId(to)).as_deref(), Some(&b"abcdef"[..]));
    // A write stamped before the replica's activation comes from a replaced primary.
    let mut stale = rep;
    stale.reqid.tid = 9;
    stale.prev = stale.version;
    stale.version.seq += 1;
    stale.epoch = 1;
    let err = deliver(&mut net, stale, &data).expect_err("stale primary");
    assert_eq!(err.code, ErrorCode::WrongPrimary, "{err}");
    assert!(err.message.contains("predates"), "{err}");
}

#[test]
fn the_pg_log_is_bounded_and_identical_on_every_member() {
    let mut net = Net::new();
    let acting = net.acting();
    let pool = net.map.pool_by_name("p").unwrap().id;
    let pg = net.map.locate(pool, "obj").unwrap().pg;
    use shoal_osd::pglog::{LOG_ENTRIES, MAX_LOG_ENTRIES, TRIM_BATCH};
    let writes = MAX_LOG_ENTRIES as u64 + 1;
    for tid in 1..=writes {
        net.append(tid, b"x").result.expect("append");
    }
    let on_primary = shoal_osd::pglog::read_entries(&**net.core(acting[0]).store(), pg).unwrap();
    let on_replica = shoal_osd::pglog::read_entries(&**net.core(acting[1]).store(), pg).unwrap();
    assert_eq!(on_primary.len(), MAX_LOG_ENTRIES + 1 - TRIM_BATCH, "a batch was trimmed");
    assert!(on_primary.len() >= LOG_ENTRIES);
    assert_eq!(on_primary, on_replica);
    // Both keep the trimmed batch's newest version as the log's tail, right before what is left.
    let tail = |osd: OsdId| shoal_osd::pglog::read_tail(&**net.core(osd).store(), pg).unwrap();
    assert_eq!(tail(acting[0]).seq + 1, on_primary[0].version.seq);
    assert_eq!(tail(acting[0]), tail(acting[1]));
    let reloaded = shoal_osd::pglog::PgLog::load(&**net.core(acting[0]).store(), pg, Default::default()).unwrap();
    assert_eq!(reloaded.len(), on_primary.len());
    assert_eq!(reloaded.last_update(), on_primary.last().unwrap().version);
    // A resend of a write still in the log is recognised.
    assert!(net.append(writes, b"x").result.is_ok());
    assert_eq!(net.content(acting[0]).map(|c| c.len()), Some(writes as usize));
}

#[test]
fn a_resend_older_than_the_pg_log_is_recognised_from_the_trimmed_ids_on_every_member() {
    let mut net = Net::new();
    let acting = net.acting();
    use shoal_osd::pglog::MAX_LOG_ENTRIES;
    net.append(1, b"a").result.expect("the first append");
    // Enough later writes that the first one's entry is trimmed from every member's log.
    let later = MAX_LOG_ENTRIES as u64 + 70;
    for tid in 2..=later {
        net.append(tid, b"x").result.expect("append");
    }
    let resend = |net: &mut Net, marked: bool| {
        let mut op = client_op(&net.map, 1, vec![ObjOp::Append { len_bytes: 1 }]);
        op.resend = marked;
        let primary = net.acting()[0].0;
        let id = net.submit(primary, op, b"a", 0);
        net.replies.remove(&id).expect("answered")
    };
    // Marked as a resend, as clients send every attempt after the first: answered as done from
    // the trimmed ids, not applied again.
    assert_eq!(resend(&mut net, true).result.expect("answered"), vec![shoal_proto::osd::OpOutput::Done]);
    assert_eq!(net.content(acting[0]).map(|c| c.len()), Some(later as usize));
    // The replica, made the PG's only member, recognises it too: it trimmed the same entries.
    net.change(Command::OsdOut { id: acting[0] });
    assert_eq!(net.acting(), vec![acting[1]]);
    assert_eq!(resend(&mut net, true).result.expect("answered"), vec![shoal_proto::osd::OpOutput::Done]);
    assert_eq!(net.content(acting[1]).map(|c| c.len()), Some(later as usize));
    // And after a restart on its store.
    net.restart(acting[1]);
    assert_eq!(resend(&mut net, true).result.expect("answered"), vec![shoal_proto::osd::OpOutput::Done]);
    assert_eq!(net.content(acting[1]).map(|c| c.len()), Some(later as usize));
}

#[test]
fn a_member_backfilled_onto_a_new_disk_recognises_resends_older_than_the_pg_log() {
    let mut net = Net::new();
    let acting = net.acting();
    net.append(1, b"a").result.expect("the first append");
    let later = shoal_osd::pglog::MAX_LOG_ENTRIES as u64 + 70;
    for tid in 2..=later {
        net.append(tid, b"x").result.expect("append");
    }
    // The replica's disk is replaced: it comes back empty and is backfilled from the primary.
    net.replace_disk(acting[1]);
    for _ in 0..10 {
        net.tick();
    }
    assert_eq!(net.content(acting[1]).map(|c| c.len()), Some(later as usize), "backfilled");
    // The backfilled member serves alone; the first append is resent (marked, as clients mark
    // every attempt after the first): recognised from the ids it was given, not applied again.
    net.change(Command::OsdOut { id: acting[0] });
    assert_eq!(net.acting(), vec![acting[1]]);
    let mut op = client_op(&net.map, 1, vec![ObjOp::Append { len_bytes: 1 }]);
    op.resend = true;
    let id = net.submit(acting[1].0, op, b"a", 0);
    let reply = net.replies.remove(&id).expect("answered");
    assert_eq!(reply.result.expect("answered"), vec![shoal_proto::osd::OpOutput::Done]);
    assert_eq!(net.content(acting[1]).map(|c| c.len()), Some(later as usize), "applied once");
}

/// Everything "obj" holds on `osd`: data, xattrs, omap and stored version.
#[allow(clippy::type_complexity)]
fn object_state(net: &Net, osd: OsdId) -> (Vec<u8>, Vec<(String, Vec<u8>)>, Vec<(Vec<u8>, Vec<u8>)>, (u64, u64)) {
    let pool = net.map.pool_by_name("p").unwrap().id;
    let coll = shoal_osd::exec::pg_collection(net.map.locate(pool, "obj").unwrap().pg);
    let store = net.core(osd).store();
    let data = store.read_all(&coll, "obj").unwrap_or_else(|e| panic!("{osd}: {e}"));
    let xattrs = store.list_xattrs(&coll, "obj").unwrap();
    let omap = store.omap_list(&coll, "obj", None, 100_000).unwrap();
    let version = store.version(&coll, "obj").unwrap();
    assert!(version != (0, 0), "{osd} holds obj without a version");
    (data, xattrs, omap, version)
}

/// Rewrites "obj" whole in one request: 10 KiB of data, an xattr, and 30 omap entries of 1 KiB
/// (keys `round:i`), far more metadata than one 4 KiB chunk. Sent to the primary; answered only
/// if every member got it.
fn write_wide(net: &mut Net, tid: u64, round: u8) -> u64 {
    let entries = (0..30u8).map(|i| (vec![round, i], vec![round ^ i; 1024])).collect();
    let ops = vec![
        ObjOp::WriteFull { len_bytes: 10 << 10 },
        ObjOp::SetXattr { name: "round".into(), value: vec![round] },
        ObjOp::OmapSet { entries },
    ];
    let op = client_op(&net.map, tid, ops);
    let primary = net.acting()[0].0;
    net.submit(primary, op, &[round; 10 << 10], 0)
}

#[test]
fn objects_with_more_metadata_than_a_chunk_are_recovered_and_backfilled_in_parts() {
    let mut net = Net::new();
    let acting = net.acting();
    // Parts of 4 KiB: the object's 30 KiB of omap cannot go whole.
    net.change(Command::ConfigSet { key: shoal_map::config::BACKFILL_CHUNK_BYTES.to_string(), value: Some(4096) });
    let id = write_wide(&mut net, 1, 1);
    net.replies.remove(&id).expect("answered").result.expect("the first write");

    // 1. A replica misses a write; the primary restarts and pushes the object to it in parts.
    net.drop_rep_to = vec![acting[1].0];
    write_wide(&mut net, 2, 2);
    net.drop_rep_to.clear();
    assert!(object_state(&net, acting[0]) != object_state(&net, acting[1]), "the replica missed it");
    net.restart(acting[0]);
    net.tick();
    let want = object_state(&net, acting[0]);
    assert_eq!(want.2.len(), 60, "both rounds' omap entries");
    assert!(object_state(&net, acting[1]) == want, "pushed to the replica whole");
    assert!(net.parts_pushed >= 8, "pushed in parts: {}", net.parts_pushed);

    // 2. The primary misses a write (it was out), comes back and pulls the object in parts.
    net.change(Command::OsdOut { id: acting[0] });
    assert_eq!(net.acting(), vec![acting[1]]);
    let id = write_wide(&mut net, 3, 3);
    net.replies.remove(&id).expect("answered").result.expect("written on the replica alone");
    net.change(Command::OsdIn { id: acting[0] });
    assert_eq!(net.acting(), acting);
    for _ in 0..3 {
        net.tick();
    }
    let want = object_state(&net, acting[1]);
    assert_eq!(want.2.len(), 90);
    assert!(object_state(&net, acting[0]) == want, "pulled by the primary whole");
    assert!(net.parts_pulled >= 8, "pulled in parts: {}", net.parts_pulled);
    let id = write_wide(&mut net, 4, 4);
    net.replies.remove(&id).expect("answered").result.expect("a write once recovered");

    // 3. The replica's disk is replaced: it is backfilled, the object in parts.
    let before = net.parts_pushed;
    net.replace_disk(acting[1]);
    for _ in 0..30 {
        net.tick();
    }
    let want = object_state(&net, acting[0]);
    assert_eq!(want.2.len(), 120);
    assert!(object_state(&net, acting[1]) == want, "backfilled whole");
    assert!(net.parts_pushed >= before + 8, "backfilled in parts: {}", net.parts_pushed - before);
}

#[test]
fn collections_of_a_deleted_pool_are_purged_in_bounded_steps() {
    let mut net = Net::new();
    let acting = net.acting();
    let pool = net.map.pool_by_name("p").unwrap().id;
    let pg = net.map.locate(pool, "obj").unwrap().pg;
    net.append(1, b"abc").result.expect("append");
    let coll = shoal_osd::exec::pg_collection(pg);
    let many = shoal_osd::core::PURGE_OBJECTS_PER_TICK + 100;
    for chunk in (0..many).collect::<Vec<_>>().chunks(500) {
        let mut txn = shoal_store::Transaction::new();
        for i in chunk {
            txn.touch(&coll, &format!("bulk-{i}"));
        }
        net.core(acting[0]).store().commit(txn, shoal_store::Durability::Batch).unwrap();
    }
    let pool_collections = |c: &OsdCore| {
        let prefixes = [format!("pg.{pool}."), format!("pglog.{pool}.")];
        c.store().list_collections().unwrap().into_iter().filter(|n| prefixes.iter().any(|p| n.starts_with(p))).count()
    };
    // The written PG's data and every PG's log (activation creates them).
    let before = pool_collections(net.core(acting[0]));
    assert_eq!(before, 9, "one PG's objects and eight PG logs");
    let replica_store = net.core(acting[1]).store().clone();
    net.cores.remove(&acting[1].0);
    net.change(Command::RemovePool { name: "p".into() });
    let primary = net.cores.get_mut(&acting[0].0).unwrap();
    assert_eq!(primary.purge_backlog(), before);
    primary.handle(Event::Tick { now_ms: 1 }, &mut Vec::new());
    assert!(primary.store().usage().unwrap().objects > 0, "one tick removes a bounded batch");
    // The append above was client I/O since the last tick: that tick removed the smaller batch.
    assert!(
        primary.store().usage().unwrap().objects + shoal_osd::core::PURGE_OBJECTS_PER_TICK_BUSY as u64 >= many as u64,
        "a tick after client I/O purges at most PURGE_OBJECTS_PER_TICK_BUSY objects"
    );
    for t in 2..6 {
        primary.handle(Event::Tick { now_ms: t }, &mut Vec::new());
    }
    assert_eq!(primary.purge_backlog(), 0);
    assert_eq!(pool_collections(primary), 0);
    assert_eq!(primary.store().usage().unwrap().objects, 0);

    // An OSD that was down when the pool was deleted purges it when it starts with the new map.
    let mut restarted = OsdCore::new(acting[1], replica_store, Arc::new(net.map.clone())).unwrap();
    assert_eq!(restarted.purge_backlog(), before);
    restarted.handle(Event::Tick { now_ms: 1 }, &mut Vec::new());
    assert_eq!(pool_collections(&restarted), 0);
    // A late replicated write to the deleted pool (from a primary on an older map) is refused.
    let op = RepOp {
        reqid: ReqId { client: 7, tid: 9 },
        epoch: 3,
        pool,
        pg: pg.seed,
        object: "obj".into(),
        version: shoal_proto::osd::Eversion { epoch: 3, seq: 9 },
        precondition: shoal_proto::osd::Precondition::Any,
        ops: vec![ObjOp::WriteFull { len_bytes: 1 }],
        op_count: 1,
        prev: shoal_proto::osd::Eversion::default(),
        log_only: false,
        decided: false,
        empties: false,
    };
    let mut out = Vec::new();
    restarted
        .handle(Event::RepOp { from: 1, request_id: 1, op, data: bytes::Bytes::from(b"z".to_vec()).into() }, &mut out);
    let [Action::Reply { frame, .. }] = &out[..] else { panic!("{out:?}") };
    let err = decode::<RepOpReply>(frame.clone().into_payload()).unwrap().0.result.expect_err("deleted pool");
    assert_eq!(err.code, ErrorCode::NotFound, "{err}");
    assert_eq!(pool_collections(&restarted), 0, "nothing was recreated");
}

#[test]
fn a_write_lost_on_its_way_to_a_replica_is_recovered_when_the_primary_restarts() {
    let mut net = Net::new();
    let acting = net.acting();
    net.request(1, vec![ObjOp::WriteFull { len_bytes: 3 }], b"old").result.unwrap();
    // The primary applies write 2; its replicated write is lost and the primary crashes.
    net.drop_rep_to = vec![acting[1].0];
    let op = client_op(&net.map, 2, vec![ObjOp::WriteFull { len_bytes: 3 }]);
    net.run(VecDeque::from([(
        acting[0].0,
        Event::ClientOp {
            from: CLIENT,
            request_id: 60,
            op,
            data: bytes::Bytes::from(b"new".to_vec()).into(),
            data_crc: None,
            arrived_ms: 0,
        },
    )]));
    net.drop_rep_to.clear();
    assert_eq!(net.content(acting[0]).as_deref(), Some(&b"new"[..]));
    assert_eq!(net.content(acting[1]).as_deref(), Some(&b"old"[..]), "the replicated write was lost");
    net.restart(acting[0]);
    // Peering found the replica behind and recovered the object to it.
    assert_eq!(net.content(acting[1]).as_deref(), Some(&b"new"[..]));
    // The resend is answered from the log, not applied again.
    net.request(2, vec![ObjOp::WriteFull { len_bytes: 3 }], b"new").result.expect("resend");
    let pool = net.map.pool_by_name("p").unwrap().id;
    let pg = net.map.locate(pool, "obj").unwrap().pg;
    for osd in &acting {
        assert_eq!(shoal_osd::pglog::read_entries(&**net.core(*osd).store(), pg).unwrap().len(), 2, "{osd}");
    }
}

#[test]
fn any_member_answers_what_it_holds_of_a_pg() {
    let mut net = Net::new();
    let acting = net.acting();
    net.append(1, b"abc").result.unwrap();
    net.append(2, b"def").result.unwrap();
    let pool = net.map.pool_by_name("p").unwrap().id;
    let pg = net.map.locate(pool, "obj").unwrap().pg;
    let epoch = net.map.epoch;
    let query = |net: &mut Net, osd: OsdId, seed: u32| {
        let mut out = Vec::new();
        let req = shoal_proto::osd::PgQuery { epoch, pool, pg: seed };
        net.cores.get_mut(&osd.0).unwrap().handle(Event::PgQuery { from: CLIENT, request_id: 1, req }, &mut out);
        let [Action::Reply { frame, .. }] = &out[..] else { panic!("{out:?}") };
        decode::<shoal_proto::osd::PgQueryReply>(frame.clone().into_payload()).unwrap().0.result
    };
    let (a, b) = (query(&mut net, acting[0], pg.seed).unwrap(), query(&mut net, acting[1], pg.seed).unwrap());
    // The primary also reports the PG's state; a replica has none to report.
    assert_eq!((a.state.as_deref(), b.state.as_deref()), (Some("active+clean"), None));
    assert_eq!((a.last_update, a.log_entries, a.objects), (b.last_update, b.log_entries, b.objects), "same writes");
    assert_eq!((a.objects, a.log_entries), (1, 2));
    assert_eq!(a.last_update.seq, 2);
    let err = query(&mut net, acting[0], 99).unwrap_err();
    assert_eq!(err.code, ErrorCode::NotFound, "{err}");
}

#[test]
fn recovery_pushes_in_flight_stay_within_the_bytes_bound() {
    const OBJECT_BYTES: usize = 600 << 10;
    let mut net = Net::new();
    let pool = net.map.pool_by_name("p").unwrap().id;
    let primary = net.acting()[0];
    let replica = net.acting()[1];
    // Six objects led by the same primary, written while the replica loses every replicated write.
    let names: Vec<String> = (0..200)
        .map(|i| format!("big{i}"))
        .filter(|n| net.map.locate(pool, n).unwrap().osds[0] == primary)
        .take(6)
        .collect();
    assert_eq!(names.len(), 6);
    net.drop_rep_to = vec![replica.0];
    for (i, name) in names.iter().enumerate() {
        let op = OsdOp {
            reqid: ReqId { client: 7, tid: 100 + i as u64 },
            epoch: net.map.epoch,
            pool,
            pg: net.map.locate(pool, name).unwrap().pg.seed,
            object: name.clone(),
            ops: vec![ObjOp::WriteFull { len_bytes: OBJECT_BYTES as u64 }],
            expires_in_ms: None,
            resend: false,
            frees_space: false,
        };
        let event = Event::ClientOp {
            from: CLIENT,
            request_id: 500 + i as u64,
            op,
            data: bytes::Bytes::from(vec![i as u8; OBJECT_BYTES]).into(),
            data_crc: None,
            arrived_ms: 0,
        };
        net.run(VecDeque::from([(primary.0, event)]));
    }
    net.drop_rep_to.clear();
    let key = shoal_map::config::RECOVERY_MAX_BYTES.to_string();
    net.change(Command::ConfigSet { key, value: Some(1 << 20) });
    // The primary restarts: peering finds the replica lacking all six; recovery pushes them.
    net.hold_pushes = true;
    net.restart(primary);
    net.tick();
    // The replica never held these PGs: each is backfilled, a chunk of up to 4 MiB per PG. The
    // first chunk (1.8 MiB or less) already fills the 1 MiB bound, so no other PG's chunk goes
    // until it is acknowledged (the object bound, 8, would let every PG's go).
    let pgs: std::collections::BTreeSet<_> = names.iter().map(|n| net.map.locate(pool, n).unwrap().pg).collect();
    assert!(pgs.len() >= 2, "the objects should span PGs: {pgs:?}");
    assert_eq!(net.held_pushes.len(), 1, "pushes in flight at once under a 1 MiB bound");
    net.hold_pushes = false;
    for _ in 0..10 {
        let held: Vec<(u32, Action)> = net.held_pushes.drain(..).collect();
        let mut queue = VecDeque::new();
        for (from, action) in held {
            net.route(from, action, &mut queue);
        }
        net.run(queue);
        net.tick();
    }
    for (i, name) in names.iter().enumerate() {
        let coll = shoal_osd::exec::pg_collection(net.map.locate(pool, name).unwrap().pg);
        let got = net.core(replica).store().read_all(&coll, name).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(got == vec![i as u8; OBJECT_BYTES], "{name} recovered with the wrong bytes");
    }
}

/// Everything stored in the PG of "obj" on `osd`: each object's name and data.
fn pg_objects(net: &Net, osd: OsdId) -> Vec<(String, Vec<u8>)> {
    let pool = net.map.pool_by_name("p").unwrap().id;
    let coll = shoal_osd::exec::pg_collection(net.map.locate(pool, "obj").unwrap().pg);
    let store = net.core(osd).store();
    let names = store.list_objects(&coll, "", None, 1000).unwrap().objects;
    names.into_iter().map(|n| (n.clone(), store.read_all(&coll, &n).unwrap())).collect()
}

fn ctx(seq: u64, snaps: &[u64]) -> ObjOp {
    ObjOp::SnapContext { seq, snaps: snaps.to_vec() }
}

fn read_at(net: &mut Net, tid: u64, snap: Option<u64>) -> Result<Vec<u8>, ErrorCode> {
    let mut ops: Vec<ObjOp> = snap.map(|snap| ObjOp::ReadSnap { snap }).into_iter().collect();
    ops.push(ObjOp::Read { offset: 0, len_bytes: u64::MAX });
    let op = client_op(&net.map, tid, ops);
    let primary = net.acting()[0].0;
    let request_id = 10_000 + tid;
    net.run(VecDeque::from([(
        primary,
        Event::ClientOp {
            from: CLIENT,
            request_id,
            op,
            data: bytes::Bytes::new().into(),
            data_crc: None,
            arrived_ms: 0,
        },
    )]));
    let frame_reply = net.replies.remove(&request_id).expect("an answer");
    frame_reply.result.map(|_| net.last_read.take().unwrap_or_default()).map_err(|e| e.code)
}

#[test]
fn snapshots_keep_each_state_on_every_member_through_writes_removal_rollback_and_trim() {
    let mut net = Net::new();
    let put = |n: usize| ObjOp::WriteFull { len_bytes: n as u64 };
    net.request(1, vec![ctx(0, &[]), put(2)], b"v1").result.expect("v1");
    // Snapshot 1 taken: the next write clones the head first.
    net.request(2, vec![ctx(1, &[1]), put(2)], b"v2").result.expect("v2");
    // Snapshots 2 and 3: one clone serves both; a second write under the same context clones nothing.
    net.request(3, vec![ctx(3, &[3, 2, 1]), put(2)], b"v3").result.expect("v3");
    net.request(4, vec![ctx(3, &[3, 2, 1]), ObjOp::Write { offset: 2, len_bytes: 1 }], b"!").result.expect("v3!");
    assert_eq!(read_at(&mut net, 5, None).unwrap(), b"v3!");
    assert_eq!(read_at(&mut net, 6, Some(1)).unwrap(), b"v1");
    assert_eq!(read_at(&mut net, 7, Some(2)).unwrap(), b"v2");
    assert_eq!(read_at(&mut net, 8, Some(3)).unwrap(), b"v2");
    assert_eq!(read_at(&mut net, 9, Some(4)).unwrap(), b"v3!", "a snapshot newer than every write reads the head");
    // Removing the head keeps its clones and their state (on the snap directory).
    net.request(10, vec![ctx(4, &[4, 3, 2, 1]), ObjOp::Remove], b"").result.expect("remove");
    assert_eq!(read_at(&mut net, 11, None), Err(ErrorCode::NotFound));
    assert_eq!(read_at(&mut net, 12, Some(4)).unwrap(), b"v3!", "snapshot 4 cloned the head before removing it");
    assert_eq!(read_at(&mut net, 13, Some(1)).unwrap(), b"v1");
    // Rollback to snapshot 2 brings that state back as the head.
    net.request(14, vec![ctx(4, &[4, 3, 2, 1]), ObjOp::SnapRollback { snap: 2 }], b"").result.expect("rollback");
    assert_eq!(read_at(&mut net, 15, None).unwrap(), b"v2");
    assert_eq!(read_at(&mut net, 16, Some(4)).unwrap(), b"v3!");
    let acting = net.acting();
    assert_eq!(pg_objects(&net, acting[0]), pg_objects(&net, acting[1]), "members hold the same clones");
    // Snapshots 1, 2 and 4 removed: their clones go, the one serving 3 stays.
    net.request(17, vec![ctx(4, &[3]), ObjOp::SnapTrim], b"").result.expect("trim");
    assert_eq!(read_at(&mut net, 18, Some(3)).unwrap(), b"v2");
    assert_eq!(read_at(&mut net, 19, Some(1)), Err(ErrorCode::NotFound), "a trimmed snapshot reads nothing");
    let listed = net.request(20, vec![ObjOp::ListSnaps], b"").result.expect("list snaps");
    let shoal_proto::osd::OpOutput::Snaps { seq, head_exists, clones } = &listed[0] else { panic!("{listed:?}") };
    assert_eq!((*seq, *head_exists), (4, true));
    assert_eq!(clones.iter().map(|c| (c.id, c.snaps.clone())).collect::<Vec<_>>(), vec![(3, vec![3])]);
    assert_eq!(pg_objects(&net, acting[0]), pg_objects(&net, acting[1]));
    assert_eq!(pg_objects(&net, acting[0]).len(), 2, "the head and one clone: {:?}", pg_objects(&net, acting[0]));
    // Trimming everything leaves the head alone.
    net.request(21, vec![ctx(4, &[]), ObjOp::SnapTrim], b"").result.expect("trim all");
    assert_eq!(pg_objects(&net, acting[0]).iter().map(|o| o.0.as_str()).collect::<Vec<_>>(), vec!["obj"]);
    // Rolling back to a snapshot the head has not changed since changes nothing (the clone the
    // context makes first is the head as it is).
    net.request(25, vec![ctx(5, &[5]), ObjOp::SnapRollback { snap: 5 }], b"").result.expect("rollback to now");
    assert_eq!(read_at(&mut net, 26, None).unwrap(), b"v2");
    assert_eq!(read_at(&mut net, 27, Some(5)).unwrap(), b"v2");
    // Members log the client's operation counts (the resolved requests differ), so whichever
    // becomes primary answers a resend with one result per operation sent.
    let pool = net.map.pool_by_name("p").unwrap().id;
    let pg = net.map.locate(pool, "obj").unwrap().pg;
    let logs: Vec<_> =
        acting.iter().map(|o| shoal_osd::pglog::read_entries(&**net.core(*o).store(), pg).unwrap()).collect();
    assert_eq!(logs[0], logs[1]);
    assert_eq!(logs[0].last().map(|e| e.op_count), Some(2), "the rollback request had two operations");
    // What clients may not do: send internal operations, touch reserved xattrs, name companions.
    let err = net.request(22, vec![ObjOp::SnapRemoveClone { id: 3 }], b"").result.expect_err("internal");
    assert_eq!(err.code, ErrorCode::Invalid);
    let reserved = ObjOp::SetXattr { name: "\u{1}snapset".into(), value: vec![] };
    assert_eq!(net.request(23, vec![reserved], b"").result.expect_err("reserved").code, ErrorCode::Invalid);
    let err = net.request(24, vec![ctx(1, &[2]), put(1)], b"x").result.expect_err("bad context");
    assert!(err.message.contains("newer than its seq"), "{err}");
}

#[test]
fn objects_with_the_longest_names_are_removed_as_before_but_take_no_snapshots() {
    let mut net = Net::new();
    let long = "l".repeat(255);
    let pool = net.map.pool_by_name("p").unwrap().id;
    let loc = net.map.locate(pool, &long).unwrap();
    let primary = loc.osds[0].0;
    let send = |net: &mut Net, tid: u64, ops: Vec<ObjOp>, data: &[u8]| {
        let op = OsdOp {
            reqid: ReqId { client: 7, tid },
            epoch: net.map.epoch,
            pool,
            pg: loc.pg.seed,
            object: long.clone(),
            ops,
            expires_in_ms: None,
            resend: false,
            frees_space: false,
        };
        let request_id = 20_000 + tid;
        net.run(VecDeque::from([(
            primary,
            Event::ClientOp {
                from: CLIENT,
                request_id,
                op,
                data: bytes::Bytes::from(data.to_vec()).into(),
                data_crc: None,
                arrived_ms: 0,
            },
        )]));
        net.replies.remove(&request_id).expect("an answer").result
    };
    send(&mut net, 1, vec![ObjOp::WriteFull { len_bytes: 1 }], b"x").expect("write");
    let err = send(&mut net, 2, vec![ctx(1, &[1]), ObjOp::WriteFull { len_bytes: 1 }], b"y").expect_err("too long");
    assert!(err.message.contains("the most an object with snapshots may have"), "{err}");
    send(&mut net, 3, vec![ObjOp::Remove], b"").expect("a plain removal still works");
}

#[test]
fn clones_move_with_their_head_in_recovery_and_trimmed_ones_go() {
    let mut net = Net::new();
    let acting = net.acting();
    let put = |n: usize| ObjOp::WriteFull { len_bytes: n as u64 };
    net.request(1, vec![ctx(0, &[]), put(3)], b"old").result.unwrap();
    // The write that makes clone 1 never reaches the replica; the primary restarts.
    net.drop_rep_to = vec![acting[1].0];
    let op = client_op(&net.map, 2, vec![ctx(1, &[1]), put(3)]);
    net.run(VecDeque::from([(
        acting[0].0,
        Event::ClientOp {
            from: CLIENT,
            request_id: 60,
            op,
            data: bytes::Bytes::from(b"new".to_vec()).into(),
            data_crc: None,
            arrived_ms: 0,
        },
    )]));
    net.drop_rep_to.clear();
    assert_eq!(pg_objects(&net, acting[1]).len(), 1, "the replica missed the clone");
    net.restart(acting[0]);
    assert_eq!(pg_objects(&net, acting[0]), pg_objects(&net, acting[1]), "the clone came with its head");
    assert_eq!(pg_objects(&net, acting[1]).len(), 2);
    // A trim the replica misses: recovery removes its stale clone.
    net.drop_rep_to = vec![acting[1].0];
    let op = client_op(&net.map, 3, vec![ctx(1, &[]), ObjOp::SnapTrim]);
    net.run(VecDeque::from([(
        acting[0].0,
        Event::ClientOp {
            from: CLIENT,
            request_id: 61,
            op,
            data: bytes::Bytes::new().into(),
            data_crc: None,
            arrived_ms: 0,
        },
    )]));
    net.drop_rep_to.clear();
    assert_eq!(pg_objects(&net, acting[0]).len(), 1);
    net.restart(acting[0]);
    assert_eq!(pg_objects(&net, acting[0]), pg_objects(&net, acting[1]), "the trimmed clone is gone everywhere");
}

#[test]
fn a_recovery_push_leaves_out_the_clones_its_target_holds_and_repairs_a_damaged_one() {
    // Decision 0065: a replica away while a head was written after a new snapshot is pushed the
    // head and the clone that write made, not the clones it held before; if one of those does
    // not read back whole there, it refuses the push and gets the object whole.
    for damaged in [false, true] {
        let mut net = Net::new();
        let acting = net.acting();
        let (primary, replica) = (acting[0], acting[1]);
        let pool = net.map.pool_by_name("p").unwrap().id;
        let pg = net.map.locate(pool, "obj").unwrap().pg;
        let coll = shoal_osd::exec::pg_collection(pg);
        let put = |n: usize| ObjOp::WriteFull { len_bytes: n as u64 };
        net.request(1, vec![ctx(0, &[]), put(2)], b"v1").result.unwrap();
        net.request(2, vec![ctx(1, &[1]), put(2)], b"v2").result.unwrap();
        net.request(3, vec![ctx(2, &[2, 1]), put(2)], b"v3").result.unwrap();
        net.change(Command::OsdDown { id: replica });
        net.request(4, vec![ctx(3, &[3, 2, 1]), put(2)], b"v4").result.expect("a write while the replica is away");
        let clone = |id| shoal_osd::snaps::clone_name("obj", id);
        if damaged {
            assert!(net.engines[&replica.0].inject_bit_rot(&coll, &clone(1)).unwrap(), "clone 1 to damage");
        }
        net.names_pushed.clear();
        net.restart(replica);
        for _ in 0..3 {
            net.tick();
        }
        let expected =
            [("obj", b"v4"), (clone(1).as_str(), b"v1"), (clone(2).as_str(), b"v2"), (clone(3).as_str(), b"v3")]
                .map(|(n, d)| (n.to_string(), d.to_vec()));
        for osd in [primary, replica] {
            let mut held = pg_objects(&net, osd);
            held.sort();
            let mut want = expected.to_vec();
            want.sort();
            assert_eq!(held, want, "{osd}: the object whole (damaged: {damaged})");
        }
        let sent: Vec<&str> = net.names_pushed.iter().map(String::as_str).collect();
        if damaged {
            // Refused (clone 1 does not read back), then pushed whole.
            assert_eq!(sent, vec!["obj", &clone(3), "obj", &clone(1), &clone(2), &clone(3)], "{sent:?}");
        } else {
            assert_eq!(sent, vec!["obj", &clone(3)], "only the head and the clone made while it was away");
        }
    }
}

#[test]
fn a_head_is_pulled_around_a_members_damaged_clone_that_the_primary_holds() {
    // Decision 0064 (the simulation's seed 9704): the replica leads alone and writes the head on
    // while its copy of clone 1 rots; the primary comes back with clone 1 whole under an older
    // head. No member holds the head whole, but every byte of it exists: the primary pulls the
    // replica's head, leaving clone 1 out, and then pushes the whole object back. Undone
    // (`no_pull_around_damage`), the object stays unfound.
    for undone in [false, true] {
        let mut net = Net::new();
        let acting = net.acting();
        let (primary, replica) = (acting[0], acting[1]);
        let pool = net.map.pool_by_name("p").unwrap().id;
        let pg = net.map.locate(pool, "obj").unwrap().pg;
        let coll = shoal_osd::exec::pg_collection(pg);
        let put = |n: usize| ObjOp::WriteFull { len_bytes: n as u64 };
        net.request(1, vec![ctx(0, &[]), put(3)], b"old").result.unwrap();
        net.request(2, vec![ctx(1, &[1]), put(3)], b"new").result.unwrap();
        net.change(Command::OsdDown { id: primary });
        assert_eq!(net.acting(), vec![replica]);
        net.request(3, vec![ctx(1, &[1]), put(3)], b"nw3").result.expect("a write while the primary is down");
        let clone1 = shoal_osd::snaps::clone_name("obj", 1);
        assert!(net.engines[&replica.0].inject_bit_rot(&coll, &clone1).unwrap(), "clone 1 to damage");
        let op = client_op(&net.map, 4, vec![ObjOp::ReadSnap { snap: 1 }, ObjOp::Read { offset: 0, len_bytes: 3 }]);
        let waiting = net.submit(replica.0, op, &[], 0);
        assert!(!net.replies.contains_key(&waiting), "the read of the damaged clone waits for a copy");

        let store = net.core(primary).store().clone();
        let mut core = net.new_core(primary, store);
        core.set_mutations(shoal_osd::core::Mutations { no_pull_around_damage: undone, ..Default::default() });
        net.cores.insert(primary.0, core);
        let addr = format!("127.0.0.1:{}", 8000 + net.map.epoch).parse().unwrap();
        net.change(Command::OsdBoot { id: primary, addr });
        for _ in 0..5 {
            net.tick();
        }
        assert_eq!(net.acting()[0], primary);
        let unfound = net.core(primary).pg_states().iter().any(|(s, _)| s.contains("unfound"));
        if undone {
            assert!(unfound, "without the pull around damage the head is unfound");
            continue;
        }
        assert!(!unfound, "{:?}", net.core(primary).pg_states());
        for osd in [primary, replica] {
            let objects = pg_objects(&net, osd);
            let get = |name: &str| objects.iter().find(|(n, _)| n == name).map(|(_, d)| d.as_slice());
            assert_eq!((get("obj"), get(&clone1)), (Some(&b"nw3"[..]), Some(&b"old"[..])), "{osd}: whole");
        }
        assert_eq!(read_at(&mut net, 5, Some(1)).as_deref(), Ok(&b"old"[..]));
        assert_eq!(read_at(&mut net, 6, None).as_deref(), Ok(&b"nw3"[..]));
    }
}

#[test]
fn a_member_being_backfilled_does_not_send_a_head_without_its_clones() {
    // Decision 0099 (the simulation's seed 503827): a backfill sent the replica the head (a head
    // sorts before its clones) and was cut off before clone 1; the replica's backfill has since
    // started over, so its cursor no longer splits them. The primary lost the object and the
    // replica's head carries the version needed, so the primary pulls it from there, vouching
    // for it past the cursor. The replica refuses: its head's snapshot state names a clone it
    // lacks, and the object is unfound instead. Undone (`pull_heads_without_their_clones`), the
    // primary installs a head whose state names a clone no member holds.
    use shoal_osd::pgmeta::PgMeta;
    use shoal_osd::snaps::{SNAPSET_XATTR, SnapSet, clone_name};
    use shoal_store::{Durability, Transaction};
    for undone in [false, true] {
        let mut net = Net::new();
        let acting = net.acting();
        let (primary, replica) = (acting[0], acting[1]);
        let pool = net.map.pool_by_name("p").unwrap().id;
        let pg = net.map.locate(pool, "obj").unwrap().pg;
        let coll = shoal_osd::exec::pg_collection(pg);
        let put = |n: usize| ObjOp::WriteFull { len_bytes: n as u64 };
        net.request(1, vec![ctx(0, &[]), put(3)], b"old").result.unwrap();
        net.request(2, vec![ctx(1, &[1]), put(3)], b"new").result.unwrap();
        let clone1 = clone_name("obj", 1);
        let needed = shoal_osd::objver::stored(&**net.core(primary).store(), &coll, "obj").expect("a stored version");

        // Both stopped while their stores are set up.
        net.change(Command::OsdDown { id: replica });
        net.change(Command::OsdDown { id: primary });
        // The replica: the head without clone 1, and a backfill cursor back at the start.
        let store = net.core(replica).store().clone();
        let mut txn = Transaction::new();
        txn.remove(&coll, &clone1);
        PgMeta::write_backfill(&mut txn, pg, Some(""));
        store.commit(txn, Durability::Sync).unwrap();
        // The primary: the object lost, recorded missing at the version its log names.
        let pstore = net.core(primary).store().clone();
        let mut meta = PgMeta::load(&*pstore, pg).unwrap();
        meta.missing.insert("obj".into(), needed);
        let mut txn = Transaction::new();
        txn.remove(&coll, "obj");
        txn.remove(&coll, &clone1);
        meta.write_whole(&mut txn, pg);
        pstore.commit(txn, Durability::Sync).unwrap();

        net.restart(primary);
        let mut core = net.new_core(replica, store);
        core.set_mutations(shoal_osd::core::Mutations {
            pull_heads_without_their_clones: undone,
            ..Default::default()
        });
        net.cores.insert(replica.0, core);
        let addr = format!("127.0.0.1:{}", 8000 + net.map.epoch).parse().unwrap();
        net.change(Command::OsdBoot { id: replica, addr });
        for _ in 0..5 {
            net.tick();
        }
        assert_eq!(net.acting()[0], primary);
        let held = |net: &Net, name: &str| net.core(primary).store().exists(&coll, name).unwrap();
        let unfound = net.core(primary).pg_states().iter().any(|(s, _)| s.contains("unfound"));
        if undone {
            assert!(held(&net, "obj") && !held(&net, &clone1), "the head came alone");
            let state =
                net.core(primary).store().get_xattr(&coll, "obj", SNAPSET_XATTR).unwrap().expect("a snapshot state");
            let set = SnapSet::decode("obj", &state).unwrap();
            assert!(set.clones.iter().any(|c| c.id == 1), "its state names clone 1, which nobody sent: {set:?}");
            continue;
        }
        assert!(unfound, "{:?}", net.core(primary).pg_states());
        assert!(!held(&net, "obj"), "no head without its clones");
        assert!(net.core(replica).store().exists(&coll, "obj").unwrap(), "the replica keeps what it holds");
    }
}

/// A request held on the OSD (here: waiting for the map its client already has) is executed
/// when its turn comes only if it has not outlived its expiry; past it, it is refused and
/// changes nothing, so its sender knows it can never take effect later. A write applied
/// before its expiry is still answered as applied when resent after it.
#[test]
fn a_request_held_past_its_expiry_is_refused_and_changes_nothing() {
    let mut net = Net::new();
    net.append(1, b"abc").result.expect("first append");
    let primary = net.acting()[0].0;
    let tick = |net: &mut Net, now_ms: u64| net.run(VecDeque::from([(primary, Event::Tick { now_ms })]));
    // Sends client 7's append `tid`, stamped as arriving at `arrived_ms` with an expiry, from a
    // client whose map is one epoch ahead of the OSD's: the OSD holds it until that map comes.
    let held_append = |net: &mut Net, tid: u64, arrived_ms: u64| -> u64 {
        let mut op = client_op(&net.map, tid, vec![ObjOp::Append { len_bytes: 3 }]);
        op.epoch += 1;
        op.expires_in_ms = Some(5_000);
        let request_id = net.submit(primary, op, b"xyz", arrived_ms);
        assert!(!net.replies.contains_key(&request_id), "held until the newer map");
        request_id
    };
    let next_epoch = |net: &mut Net, name: &str| {
        let cmd = Command::CreatePool { name: name.into(), size: 1, min_size: None, pg_num: 1, max_object_bytes: None };
        net.change(cmd);
    };

    // Held 4 s of its 5: applied when the map comes.
    tick(&mut net, 1_000);
    let within = held_append(&mut net, 2, 1_000);
    tick(&mut net, 5_000);
    next_epoch(&mut net, "q1");
    net.replies.remove(&within).expect("answered").result.expect("applied within its expiry");
    for osd in net.acting() {
        assert_eq!(net.content(osd).as_deref(), Some(&b"abcxyz"[..]), "{osd}");
    }

    // Held 7 s of its 5: refused, and no member has it.
    let late = held_append(&mut net, 3, 5_000);
    tick(&mut net, 12_000);
    next_epoch(&mut net, "q2");
    let err = net.replies.remove(&late).expect("answered").result.expect_err("held past its expiry");
    assert_eq!(err.code, ErrorCode::Timeout, "{err}");
    assert!(err.message.contains("expiry"), "the error says why: {err}");
    for osd in net.acting() {
        assert_eq!(net.content(osd).as_deref(), Some(&b"abcxyz"[..]), "{osd}: nothing of the late append");
    }

    // Judged as of the batch that executes it, not the last tick: a worker that is behind may
    // have ticks queued behind its requests, and advances the clock before each batch.
    let behind = held_append(&mut net, 4, 12_000);
    net.cores.get_mut(&primary).expect("primary").advance_clock(20_000);
    next_epoch(&mut net, "q3");
    let err = net.replies.remove(&behind).expect("answered").result.expect_err("held past its expiry, no tick");
    assert_eq!(err.code, ErrorCode::Timeout, "{err}");

    // The write that was applied, resent long after its expiry: answered from the PG log.
    let mut again = client_op(&net.map, 2, vec![ObjOp::Append { len_bytes: 3 }]);
    again.expires_in_ms = Some(1);
    let request_id = net.submit(primary, again, b"xyz", 0);
    net.replies.remove(&request_id).expect("answered").result.expect("applied before: answered as applied");
    assert_eq!(net.content(net.acting()[0]).as_deref(), Some(&b"abcxyz"[..]), "never applied twice");
}

/// With reads beside the worker (a `block` OSD), a write of an object waits for the reads of it
/// that came first — they must not see it — and what came after the write waits behind it;
/// requests on other objects go on meanwhile.
#[test]
fn a_write_waits_for_the_reads_before_it_that_run_beside_the_worker() {
    let mut net = Net::new();
    net.append(1, b"abc").result.expect("first append");
    let primary = net.acting()[0].0;
    net.cores.get_mut(&primary).expect("primary").set_read_offload(true);
    let send = |net: &mut Net, tid: u64, ops: Vec<ObjOp>, data: &[u8]| {
        let op = client_op(&net.map, tid, ops);
        net.submit(primary, op, data, 0)
    };
    let read = || vec![ObjOp::Read { offset: 0, len_bytes: 100 }];
    // A read, then an append, then another read of the same object, all sent at once.
    let first = send(&mut net, 2, read(), b"");
    let append = send(&mut net, 3, vec![ObjOp::Append { len_bytes: 3 }], b"def");
    let second = send(&mut net, 4, read(), b"");
    assert!(net.replies.is_empty(), "the first read runs beside the worker; the rest wait behind it");
    assert_eq!(net.content(net.acting()[0]).as_deref(), Some(&b"abc"[..]), "the append waited");
    // Meanwhile a write of another object is not held.
    let other = client_op(&net.map, 5, vec![ObjOp::WriteFull { len_bytes: 1 }]);
    let loc = net.map.locate(other.pool, "other").unwrap();
    let other = shoal_proto::osd::OsdOp { object: "other".into(), pg: loc.pg.seed, ..other };
    let request_id = net.submit(loc.osds[0].0, other, b"x", 0);
    net.replies.remove(&request_id).expect("answered").result.expect("another object's write went on");
    // The first read runs: it sees the object before the append; then the append applies, and
    // the second read (beside the worker in turn) sees it.
    net.run_reads();
    assert_eq!(net.read_answer(first), b"abc", "the read that came first saw the append");
    net.replies.remove(&append).expect("the append answered").result.expect("append");
    net.run_reads();
    assert_eq!(net.read_answer(second), b"abcdef", "the read that came after missed the append");
}

/// A read never sees a write its replicas have not all acknowledged (decision 0035): such a
/// write may still be lost with its primary, and then a later read would find the object older
/// than an earlier one did. The read waits for the write, behind which anything later of the
/// object waits too; reads of other objects do not.
#[test]
fn a_read_waits_for_the_writes_of_its_object_that_replicas_have_not_acknowledged() {
    let mut net = Net::new();
    net.append(1, b"abc").result.expect("first append");
    let primary = net.acting()[0].0;
    let send = |net: &mut Net, tid: u64, ops: Vec<ObjOp>, data: &[u8]| {
        let op = client_op(&net.map, tid, ops);
        net.submit(primary, op, data, 0)
    };
    let read = || vec![ObjOp::Read { offset: 0, len_bytes: 100 }];
    // The append is applied on the primary; its copy to the replica is held.
    net.capture = true;
    let append = send(&mut net, 2, vec![ObjOp::Append { len_bytes: 3 }], b"def");
    assert_eq!(net.content(net.acting()[0]).as_deref(), Some(&b"abcdef"[..]), "applied on the primary");
    assert!(!net.replies.contains_key(&append), "not acknowledged: the replica has not answered");
    // A read of the object, then another append: both wait (the read for the first append, the
    // append behind the read).
    let reader = send(&mut net, 3, read(), b"");
    let later = send(&mut net, 4, vec![ObjOp::Append { len_bytes: 3 }], b"ghi");
    assert!(net.replies.is_empty(), "the read saw an unacknowledged write");
    assert_eq!(net.captured.len(), 1, "the append behind the read was not held");
    // Another object is served meanwhile.
    let other = client_op(&net.map, 5, vec![ObjOp::WriteFull { len_bytes: 1 }]);
    let loc = net.map.locate(other.pool, "other").unwrap();
    let other = shoal_proto::osd::OsdOp { object: "other".into(), pg: loc.pg.seed, ..other };
    net.capture = false;
    let other_id = net.submit(loc.osds[0].0, other, b"x", 0);
    net.replies.remove(&other_id).expect("answered").result.expect("another object's write went on");
    // The replica acknowledges: the append is answered, then the read sees it, then the later
    // append applies.
    net.capture = true;
    net.deliver_captured(primary);
    net.replies.remove(&append).expect("the append answered").result.expect("append");
    assert_eq!(net.read_answer(reader), b"abcdef", "the read after the acknowledged append");
    assert_eq!(net.captured.len(), 1, "the later append went out after the read");
    net.capture = false;
    net.deliver_captured(primary);
    net.replies.remove(&later).expect("the later append answered").result.expect("append");
    for osd in net.acting() {
        assert_eq!(net.content(osd).as_deref(), Some(&b"abcdefghi"[..]), "{osd}");
    }
}

/// Operations waiting for their objects are bounded per PG: past the bound they are refused
/// with `Timeout` (clients retry), and those that waited are all served once their object is.
#[test]
fn operations_waiting_for_their_objects_are_bounded_per_pg() {
    let mut net = Net::new();
    net.append(1, b"abc").result.expect("first append");
    let primary = net.acting()[0].0;
    net.capture = true;
    let append = {
        let op = client_op(&net.map, 2, vec![ObjOp::Append { len_bytes: 3 }]);
        net.submit(primary, op, b"def", 0)
    };
    let bound = shoal_osd::MAX_BLOCKED_OPS_PER_PG as u64;
    let reads: Vec<u64> = (0..=bound)
        .map(|i| {
            let op = client_op(&net.map, 10 + i, vec![ObjOp::Read { offset: 0, len_bytes: 100 }]);
            net.submit(primary, op, b"", 0)
        })
        .collect();
    let (waiting, over) = reads.split_at(reads.len() - 1);
    let err = net.replies.remove(&over[0]).expect("refused at once").result.expect_err("past the bound");
    assert_eq!(err.code, ErrorCode::Timeout, "{err}");
    assert!(err.message.contains("waiting for their objects"), "{err}");
    assert!(waiting.iter().all(|r| !net.replies.contains_key(r)), "the reads within the bound wait");
    net.capture = false;
    net.deliver_captured(primary);
    net.replies.remove(&append).expect("answered").result.expect("append");
    for r in waiting {
        assert_eq!(net.read_answer(*r), b"abcdef");
    }
}

/// A read handed off beside the worker that finishes after its PG changed primary is not
/// answered from what it read (this OSD may since hold writes of another primary that are not
/// acknowledged): it is handled again, here refused with the PG's new primary to ask.
#[test]
fn a_read_beside_the_worker_that_outlives_its_primary_term_is_handled_again() {
    let mut net = Net::new();
    net.append(1, b"abc").result.expect("first append");
    let acting = net.acting();
    let primary = acting[0].0;
    net.cores.get_mut(&primary).expect("primary").set_read_offload(true);
    let op = client_op(&net.map, 2, vec![ObjOp::Read { offset: 0, len_bytes: 100 }]);
    let reader = net.submit(primary, op, b"", 0);
    assert!(net.replies.is_empty(), "the read runs beside the worker");
    // The primary is marked out before the read finishes: the other OSD leads the PG.
    net.change(Command::OsdOut { id: acting[0] });
    assert_eq!(net.acting(), vec![acting[1]]);
    net.run_reads();
    let err = net.replies.remove(&reader).expect("answered").result.expect_err("not answered from the old term");
    assert_eq!(err.code, ErrorCode::WrongPrimary, "{err}");
    // At the new primary the same read is served.
    let op = client_op(&net.map, 3, vec![ObjOp::Read { offset: 0, len_bytes: 100 }]);
    let again = net.submit(acting[1].0, op, b"", 0);
    assert_eq!(net.read_answer(again), b"abc");
}

#[test]
fn an_object_no_member_can_provide_is_listed_as_unfound_and_can_be_given_up() {
    let mut net = Net::new();
    let acting = net.acting();
    let pool = net.map.pool_by_name("p").unwrap().id;
    let pg = net.map.locate(pool, "obj").unwrap().pg;
    net.append(1, b"abc").result.expect("append");
    let written = shoal_osd::pglog::read_entries(&**net.core(acting[0]).store(), pg).unwrap().last().unwrap().version;
    // Both copies rot: the primary's read fails its checksum, so it repairs its copy first, and
    // the only other copy fails its checksum too.
    let coll = shoal_osd::exec::pg_collection(pg);
    for osd in &acting {
        assert!(net.engines[&osd.0].inject_bit_rot(&coll, "obj").unwrap(), "a copy to damage on {osd}");
    }
    let read = client_op(&net.map, 2, vec![ObjOp::Read { offset: 0, len_bytes: 3 }]);
    let waiting = net.submit(acting[0].0, read, &[], 0);
    assert!(!net.replies.contains_key(&waiting), "a read of an unfound object waits");
    assert!(net.core(acting[0]).pg_states().iter().any(|(s, _)| s.contains("unfound")));

    let reply = net.pg_command(acting[0], pg, shoal_proto::osd::PgCmd::ListUnfound);
    let Ok(shoal_proto::osd::PgCmdOutput::Unfound(report)) = reply.result else { panic!("{:?}", reply.result) };
    let names: Vec<&str> = report.objects.iter().map(|(o, _)| o.as_str()).collect();
    assert_eq!(names, vec!["obj"]);
    // The version needed is the damaged copy's own, read from the version stored with it
    // (`objver`): the write that made it, not "whatever the authority holds".
    assert_eq!(report.objects[0].1, written, "version needed");

    // The operator gives it up: removed on both members, the removal in both logs, and the read
    // that waited is answered (the object no longer exists).
    let reply = net.pg_command(acting[0], pg, shoal_proto::osd::PgCmd::MarkUnfoundLost);
    assert_eq!(reply.result, Ok(shoal_proto::osd::PgCmdOutput::Lost(vec!["obj".to_string()])));
    let answer = net.replies.remove(&waiting).expect("the waiting read is answered");
    assert_eq!(answer.result.map_err(|e| e.code), Err(ErrorCode::NotFound));
    for osd in &acting {
        assert_eq!(net.content(*osd), None, "{osd} still holds the lost object");
        let log = shoal_osd::pglog::read_entries(&**net.core(*osd).store(), pg).unwrap();
        let last = log.last().expect("a log entry");
        assert_eq!((last.object.as_str(), last.reqid.client), ("obj", u64::MAX - 1), "{osd}: {last:?}");
    }
    assert!(net.core(acting[0]).pg_states().iter().all(|(s, _)| !s.contains("unfound")));
    // A resend of the write given up (its client heard nothing) is applied again on the absent
    // object, once: answered from the log, which still names it, its client would count as
    // stored a write the removal threw away.
    for _ in 0..2 {
        net.append(1, b"abc").result.expect("the resend of the write given up");
        for osd in &acting {
            assert_eq!(net.content(*osd).as_deref(), Some(&b"abc"[..]), "{osd}");
        }
    }
    // The object takes writes again.
    net.append(3, b"new").result.expect("append after the loss");
    assert_eq!(net.content(acting[1]), Some(b"abcnew".to_vec()));
}

#[test]
fn objects_given_up_while_a_member_lacks_them_are_each_removed_under_a_request_id_of_its_own() {
    // Two objects of one PG are written while the replica is down, and then the primary's copies
    // rot: when the replica is back it lacks both, and the primary has no good copy to send it,
    // so both are unfound. Giving them up removes each on both members through a logged removal;
    // each removal waits for the replica's copy to be removed first, so the PG log does not move
    // between them (the removals' request ids were once taken from the log's position, both got
    // the same one, and the second was answered as a resend of the first: never logged).
    let mut net = Net::new();
    let acting = net.acting();
    let pool = net.map.pool_by_name("p").unwrap().id;
    let pg = net.map.locate(pool, "obj").unwrap().pg;
    let other = net.names_in_pg(pg, 1).remove(0);
    net.append(1, b"abc").result.expect("append");
    write_object(&mut net, 2, &other, b"one").result.expect("write");
    net.change(Command::OsdDown { id: acting[1] });
    assert_eq!(net.acting(), vec![acting[0]]);
    net.append(3, b"def").result.expect("append while the replica is down");
    write_object(&mut net, 4, &other, b"two").result.expect("write while the replica is down");
    let coll = shoal_osd::exec::pg_collection(pg);
    for name in ["obj", other.as_str()] {
        assert!(net.engines[&acting[0].0].inject_bit_rot(&coll, name).unwrap(), "a copy of {name} to damage");
    }
    net.restart(acting[1]);
    for _ in 0..5 {
        net.tick();
    }
    let mut both = vec!["obj".to_string(), other.clone()];
    both.sort_unstable();
    let reply = net.pg_command(acting[0], pg, shoal_proto::osd::PgCmd::ListUnfound);
    let Ok(shoal_proto::osd::PgCmdOutput::Unfound(report)) = reply.result else { panic!("{:?}", reply.result) };
    let names: Vec<String> = report.objects.iter().map(|(o, _)| o.clone()).collect();
    assert_eq!(names, both, "unfound");

    // The pushes that come before the removals are held: until the removals are logged, the
    // report names the objects as decided on and no longer unfound (what `shoal pg
    // mark-unfound-lost` waits for before it answers).
    // So are the removals' replicated writes, logged on the primary once the pushes are in:
    // decided on until the replica has answered them too.
    net.hold_pushes = true;
    net.capture = true;
    let reply = net.pg_command(acting[0], pg, shoal_proto::osd::PgCmd::MarkUnfoundLost);
    assert_eq!(reply.result, Ok(shoal_proto::osd::PgCmdOutput::Lost(both.clone())));
    let deciding = |net: &mut Net| {
        let reply = net.pg_command(acting[0], pg, shoal_proto::osd::PgCmd::ListUnfound);
        let Ok(shoal_proto::osd::PgCmdOutput::Unfound(report)) = reply.result else { panic!("{:?}", reply.result) };
        assert_eq!(report.objects.len(), 0, "{report:?}");
        report.deciding
    };
    assert_eq!(deciding(&mut net), both, "pushes held");
    net.hold_pushes = false;
    while deliver_held_pushes(&mut net) > 0 {}
    assert!(!net.captured.is_empty(), "no removal replicated");
    assert_eq!(deciding(&mut net), both, "replicated writes held");
    while !net.captured.is_empty() {
        net.deliver_captured(acting[0].0);
    }
    net.capture = false;
    for _ in 0..5 {
        net.tick();
    }
    let reply = net.pg_command(acting[0], pg, shoal_proto::osd::PgCmd::ListUnfound);
    let Ok(shoal_proto::osd::PgCmdOutput::Unfound(report)) = reply.result else { panic!("{:?}", reply.result) };
    assert_eq!(report, shoal_proto::osd::UnfoundReport::default(), "decisions logged");
    for osd in &acting {
        for name in &both {
            assert!(net.cores[&osd.0].store().read_all(&coll, name).is_err(), "{osd} still holds {name}");
        }
        let log = shoal_osd::pglog::read_entries(&**net.core(*osd).store(), pg).unwrap();
        let removals: Vec<_> = log.iter().filter(|e| e.reqid.client == u64::MAX - 1).collect();
        let mut removed: Vec<String> = removals.iter().map(|e| e.object.clone()).collect();
        removed.sort_unstable();
        assert_eq!(removed, both, "{osd}: the removals logged: {removals:?}");
        assert_ne!(removals[0].reqid, removals[1].reqid, "{osd}: two removals under one request id");
    }
    assert!(
        net.core(acting[0]).pg_states().iter().all(|(s, _)| s == "active+clean"),
        "{:?}",
        net.core(acting[0]).pg_states()
    );
}

#[test]
fn unfound_objects_are_given_up_only_while_no_osd_that_may_hold_them_is_down() {
    // An operator who gives up (or reverts) unfound objects while an OSD is down throws away
    // what that OSD may bring back (the simulation's seed 90310 `--revert-unfound
    // --early-replace`: objects were reverted while their only current holder was down, and an
    // acknowledged write was lost). Both decisions are refused, naming the OSD, until it is up
    // again (or removed for good); nothing is changed meanwhile.
    let mut net = Net::new();
    let LostWrite { primary, replica, pg, .. } = lose_the_newest_write(&mut net);
    net.change(Command::OsdDown { id: primary });
    for _ in 0..3 {
        net.tick();
    }
    for cmd in [shoal_proto::osd::PgCmd::MarkUnfoundLost, shoal_proto::osd::PgCmd::RevertUnfound] {
        let reply = net.pg_command(replica, pg, cmd.clone());
        let err = reply.result.expect_err("refused while an OSD that may hold the object is down");
        assert!(err.message.contains(&format!("{primary} is down")), "{cmd:?}: {err}");
        assert!(!err.message.contains("  "), "one line, single spaces: {err}");
    }
    let reply = net.pg_command(replica, pg, shoal_proto::osd::PgCmd::ListUnfound);
    let Ok(shoal_proto::osd::PgCmdOutput::Unfound(report)) = reply.result else { panic!("{:?}", reply.result) };
    assert_eq!(report.objects.iter().map(|(o, _)| o.as_str()).collect::<Vec<_>>(), vec!["obj"], "still unfound");
    // Up again (on its new, empty disk): it holds nothing, and the revert goes ahead.
    net.restart(primary);
    for _ in 0..5 {
        net.tick();
    }
    let reply = net.pg_command(replica, pg, shoal_proto::osd::PgCmd::RevertUnfound);
    let Ok(shoal_proto::osd::PgCmdOutput::Reverted(report)) = reply.result else { panic!("{:?}", reply.result) };
    assert_eq!(report.reverted.iter().map(|(o, _)| o.as_str()).collect::<Vec<_>>(), vec!["obj"]);
}

/// What [`lose_the_newest_write`] leaves: the PG of "obj", its old primary (on a new disk now)
/// and its replica (which leads the PG), and the version of the replica's copy.
struct LostWrite {
    primary: OsdId,
    replica: OsdId,
    pg: shoal_map::PgId,
    coll: String,
    kept: (u64, u64),
}

/// The shape the simulation found (seed 13072 `--parts`): a write applied on the primary alone
/// (its replica never got it, so it was never acknowledged) becomes, at the next peering, the
/// newest entry of the PG's log, and the replica needs it; before recovery sends it there, the
/// old primary's disk is replaced. No member holds that version: "obj" is unfound, while the
/// replica still holds the copy before it ("abc", every acknowledged write). The lost write is
/// client 7's tid 2, appending "def".
fn lose_the_newest_write(net: &mut Net) -> LostWrite {
    let acting = net.acting();
    let (primary, replica) = (acting[0], acting[1]);
    let pool = net.map.pool_by_name("p").unwrap().id;
    let pg = net.map.locate(pool, "obj").unwrap().pg;
    let coll = shoal_osd::exec::pg_collection(pg);
    net.append(1, b"abc").result.expect("acknowledged append");
    let kept = net.core(replica).store().version(&coll, "obj").unwrap();
    net.drop_rep_to = vec![replica.0];
    let lost = client_op(&net.map, 2, vec![ObjOp::Append { len_bytes: 3 }]);
    let never_answered = net.submit(primary.0, lost, b"def", 0);
    net.drop_rep_to.clear();
    net.hold_pushes = true;
    net.restart(primary);
    net.tick();
    assert_eq!(net.content(primary).as_deref(), Some(&b"abcdef"[..]));
    net.held_pushes.clear();
    net.replace_disk(primary);
    for _ in 0..5 {
        net.tick();
    }
    assert!(!net.replies.contains_key(&never_answered), "the lost write is never answered by its old primary");
    assert_eq!(net.acting()[0], replica, "the member with the PG's history leads it");
    let reply = net.pg_command(replica, pg, shoal_proto::osd::PgCmd::ListUnfound);
    let Ok(shoal_proto::osd::PgCmdOutput::Unfound(report)) = reply.result else { panic!("{:?}", reply.result) };
    assert_eq!(report.objects.iter().map(|(o, _)| o.as_str()).collect::<Vec<_>>(), vec!["obj"]);
    // The listing says what a revert would keep: the replica's copy, at its version.
    let at = shoal_proto::osd::Eversion { epoch: kept.0, seq: kept.1 };
    assert_eq!(report.revert, vec![Ok(at)], "{report:?}");
    net.hold_pushes = false;
    LostWrite { primary, replica, pg, coll, kept }
}

#[test]
fn an_unfound_object_reverted_keeps_the_copy_its_primary_holds_on_every_member() {
    let mut net = Net::new();
    let LostWrite { primary, replica, pg, coll, kept } = lose_the_newest_write(&mut net);
    let leader = replica;
    let read = client_op(&net.map, 3, vec![ObjOp::Read { offset: 0, len_bytes: 100 }]);
    let waiting = net.submit(leader.0, read, &[], 0);
    assert!(!net.replies.contains_key(&waiting), "a read of an unfound object waits");

    // The operator reverts it: the replica's copy (the acknowledged write) is the object again,
    // on both members, under a new version in both logs; the read that waited is answered.
    let reply = net.pg_command(leader, pg, shoal_proto::osd::PgCmd::RevertUnfound);
    let kept_version = shoal_proto::osd::Eversion { epoch: kept.0, seq: kept.1 };
    let expected =
        shoal_proto::osd::RevertReport { reverted: vec![("obj".to_string(), kept_version)], unfound: vec![] };
    assert_eq!(reply.result, Ok(shoal_proto::osd::PgCmdOutput::Reverted(expected)));
    for _ in 0..10 {
        net.tick();
    }
    assert_eq!(net.read_answer(waiting), b"abc");
    for osd in [primary, replica] {
        assert_eq!(net.content(osd).as_deref(), Some(&b"abc"[..]), "{osd}");
        let log = shoal_osd::pglog::read_entries(&**net.core(osd).store(), pg).unwrap();
        let last = log.last().expect("a log entry");
        // The revert's request id names the copy kept (its sequence).
        let revert = shoal_proto::osd::ReqId { client: u64::MAX - 2, tid: kept.1 };
        assert_eq!((last.object.as_str(), last.reqid), ("obj", revert), "{osd}: {last:?}");
        let version = net.core(osd).store().version(&coll, "obj").unwrap();
        assert_eq!(
            version,
            (last.version.epoch, last.version.seq),
            "{osd}: the copy is stored at the revert's version"
        );
    }
    assert!(
        net.core(replica).pg_states().iter().all(|(s, _)| !s.contains("unfound")),
        "{:?}",
        net.core(replica).pg_states()
    );
    // The client of the write given up never heard of it and resends it: it is applied again,
    // once, on the kept copy (not answered from the log, which still names it).
    for _ in 0..2 {
        net.append(2, b"def").result.expect("the resend of the write given up");
        for osd in [primary, replica] {
            assert_eq!(net.content(osd).as_deref(), Some(&b"abcdef"[..]), "{osd}");
        }
    }
    // A resend of a write the kept copy holds is answered from the log, not applied again.
    net.append(1, b"abc").result.expect("a resend of the kept write");
    assert_eq!(net.content(replica).as_deref(), Some(&b"abcdef"[..]));
    // The object takes writes again.
    net.append(4, b"ghi").result.expect("append after the revert");
    assert_eq!(net.content(primary).as_deref(), Some(&b"abcdefghi"[..]));
    assert_eq!(net.content(replica).as_deref(), Some(&b"abcdefghi"[..]));
}

#[test]
fn a_write_given_up_by_a_revert_is_applied_again_when_resent_after_its_entry_was_trimmed() {
    // Logs of 4 entries trimmed 2 at a time: after the revert, writes of other objects push the
    // lost write's entry out of the log (its request id moves to the dups) while the revert's
    // entry stays. The client's marked resend is found among the dups, and applied again all the
    // same: the revert logged after it kept an older copy.
    let mut net = Net::with_log_bounds(Some(shoal_osd::pglog::LogBounds::new(4, 2)));
    let LostWrite { primary, replica, pg, .. } = lose_the_newest_write(&mut net);
    let reply = net.pg_command(replica, pg, shoal_proto::osd::PgCmd::RevertUnfound);
    assert!(matches!(reply.result, Ok(shoal_proto::osd::PgCmdOutput::Reverted(ref r)) if r.reverted.len() == 1));
    for _ in 0..10 {
        net.tick();
    }
    let others = net.names_in_pg(pg, 6);
    let in_log = |net: &Net, client: u64| {
        let log = shoal_osd::pglog::read_entries(&**net.core(net.acting()[0]).store(), pg).unwrap();
        log.iter().any(|e| e.object == "obj" && e.reqid.client == client)
    };
    let mut trimmed = false;
    for (i, name) in others.iter().enumerate() {
        write_object(&mut net, 100 + i as u64, name, b"x").result.expect("write of another object");
        if !in_log(&net, 7) && in_log(&net, u64::MAX - 2) {
            trimmed = true;
            break;
        }
    }
    assert!(trimmed, "the lost write's entry left the log while the revert's stayed");
    let resend = OsdOp { resend: true, ..client_op(&net.map, 2, vec![ObjOp::Append { len_bytes: 3 }]) };
    // (The PG, clean again, went back to the OSDs placement names: its primary leads it.)
    let rid = net.submit(net.acting()[0].0, resend, b"def", 0);
    net.replies.remove(&rid).expect("answered").result.expect("the resend of the write given up");
    for osd in [primary, replica] {
        assert_eq!(net.content(osd).as_deref(), Some(&b"abcdef"[..]), "{osd}");
    }
}

/// Decision 0063's shape: the primary applies client 7's append (tid 2, "def") that its replica
/// never gets (never acknowledged), then goes down; the replica leads alone and writes another
/// object, and its copy of "obj" rots; the primary comes back, its log replaced by the replica's
/// (the append rolled back from the log, not from its copy, "abcdef"), and "obj" is unfound.
/// Returns the primary, the replica and the PG.
fn roll_back_an_append(net: &mut Net) -> (OsdId, OsdId, shoal_map::PgId) {
    let acting = net.acting();
    let (primary, replica) = (acting[0], acting[1]);
    let pool = net.map.pool_by_name("p").unwrap().id;
    let pg = net.map.locate(pool, "obj").unwrap().pg;
    let coll = shoal_osd::exec::pg_collection(pg);
    let other = net.names_in_pg(pg, 1).remove(0);
    net.append(1, b"abc").result.expect("acknowledged append");
    net.drop_rep_to = vec![replica.0];
    let lost = client_op(&net.map, 2, vec![ObjOp::Append { len_bytes: 3 }]);
    let never_answered = net.submit(primary.0, lost, b"def", 0);
    net.drop_rep_to.clear();
    net.change(Command::OsdDown { id: primary });
    assert_eq!(net.acting(), vec![replica]);
    assert!(!net.replies.contains_key(&never_answered), "the append is never acknowledged");
    write_object(net, 3, &other, b"one").result.expect("a write while the primary is down");
    assert!(net.engines[&replica.0].inject_bit_rot(&coll, "obj").unwrap(), "the replica's copy to damage");
    net.restart(primary);
    for _ in 0..5 {
        net.tick();
    }
    assert_eq!(net.acting()[0], primary, "the primary leads again");
    assert_eq!(net.content(primary).as_deref(), Some(&b"abcdef"[..]), "its copy still holds the append");
    (primary, replica, pg)
}

#[test]
fn a_revert_to_a_copy_holding_a_rolled_back_write_answers_its_resend_as_done() {
    // Decision 0063 (the simulation's seeds 3050 and 4449): a primary applies an append its
    // replica never gets (never acknowledged), then goes down; the replica leads alone and writes
    // on, so at the primary's return its log is the authority's and the append is rolled back
    // from the primary's log, not from its copy. With the replica's copy damaged, no member holds
    // the version needed: unfound. The revert keeps the primary's copy, which holds the append
    // once; the client's resend of it is answered as done, not applied a second time.
    let mut net = Net::new();
    let (primary, replica, pg) = roll_back_an_append(&mut net);
    let meta = shoal_osd::pgmeta::PgMeta::load(&**net.core(primary).store(), pg).unwrap();
    let held = meta.held_divergent.get("obj").expect("the rolled-back append is recorded with the missing entry");
    assert_eq!(held.writes.iter().map(|w| w.reqid).collect::<Vec<_>>(), vec![ReqId { client: 7, tid: 2 }]);
    let reply = net.pg_command(primary, pg, shoal_proto::osd::PgCmd::ListUnfound);
    let Ok(shoal_proto::osd::PgCmdOutput::Unfound(report)) = reply.result else { panic!("{:?}", reply.result) };
    assert_eq!(report.objects.iter().map(|(o, _)| o.as_str()).collect::<Vec<_>>(), vec!["obj"]);
    assert_eq!(report.revert, vec![Ok(held.writes[0].version)], "the listing: a revert keeps the copy, {report:?}");

    let reply = net.pg_command(primary, pg, shoal_proto::osd::PgCmd::RevertUnfound);
    let Ok(shoal_proto::osd::PgCmdOutput::Reverted(report)) = reply.result else { panic!("{:?}", reply.result) };
    assert_eq!(report.reverted.len(), 1, "{report:?}");
    for _ in 0..10 {
        net.tick();
    }
    for osd in [primary, replica] {
        assert_eq!(net.content(osd).as_deref(), Some(&b"abcdef"[..]), "{osd}: the kept copy everywhere");
        let log = shoal_osd::pglog::read_entries(&**net.core(osd).store(), pg).unwrap();
        let last = log.last().expect("a log entry");
        assert_eq!((last.object.as_str(), last.reqid), ("obj", ReqId { client: 7, tid: 2 }), "{osd}: logged again");
    }
    // The resend (twice: a lost answer) is answered as done and changes nothing.
    for _ in 0..2 {
        let resend = OsdOp { resend: true, ..client_op(&net.map, 2, vec![ObjOp::Append { len_bytes: 3 }]) };
        let rid = net.submit(primary.0, resend, b"def", 0);
        net.replies.remove(&rid).expect("answered").result.expect("the resend of the rolled-back append");
        for osd in [primary, replica] {
            assert_eq!(net.content(osd).as_deref(), Some(&b"abcdef"[..]), "{osd}: applied once");
        }
    }
    net.append(4, b"ghi").result.expect("an append after the revert");
    assert_eq!(net.content(replica).as_deref(), Some(&b"abcdefghi"[..]));
}

#[test]
fn a_revert_refuses_a_copy_holding_rolled_back_writes_it_cannot_name() {
    // Decision 0063's fallback: the shape above, but the record of the rolled-back append is gone
    // (a store written before records were kept): the copy holds a write no log names, and which
    // ones is unknown, so the revert keeps nothing and says why; the object stays unfound.
    let mut net = Net::new();
    let (primary, _, pg) = roll_back_an_append(&mut net);
    // The record goes; the primary restarts on that store and peers again.
    let store = net.core(primary).store().clone();
    let mut meta = shoal_osd::pgmeta::PgMeta::load(&*store, pg).unwrap();
    assert!(meta.held_divergent.remove("obj").is_some(), "the rolled-back append was recorded");
    let mut txn = shoal_store::Transaction::new();
    meta.write_whole(&mut txn, pg);
    store.commit(txn, shoal_store::Durability::Sync).unwrap();
    net.restart(primary);
    for _ in 0..5 {
        net.tick();
    }
    let reply = net.pg_command(primary, pg, shoal_proto::osd::PgCmd::ListUnfound);
    let Ok(shoal_proto::osd::PgCmdOutput::Unfound(listed)) = reply.result else { panic!("{:?}", reply.result) };
    assert!(
        matches!(&listed.revert[..], [Err(why)] if why.contains("rolled back")),
        "the listing says why: {listed:?}"
    );
    let reply = net.pg_command(primary, pg, shoal_proto::osd::PgCmd::RevertUnfound);
    let Ok(shoal_proto::osd::PgCmdOutput::Reverted(report)) = reply.result else { panic!("{:?}", reply.result) };
    assert!(report.reverted.is_empty(), "{report:?}");
    assert_eq!(report.unfound.len(), 1, "{report:?}");
    assert!(report.unfound[0].1.contains("rolled back"), "{report:?}");
    assert!(!report.unfound[0].1.contains("  "), "one line, single spaces: {report:?}");
    assert!(net.core(primary).pg_states().iter().any(|(s, _)| s.contains("unfound")));
    assert_eq!(net.content(primary).as_deref(), Some(&b"abcdef"[..]), "nothing changed");
}

#[test]
fn a_revert_keeps_the_newest_copy_of_the_history_another_member_holds() {
    // Decision 0066: the primary alone holds the object's newest write (never acknowledged: its
    // replica missed it) and its copy rots; the replica still holds the acknowledged copy before
    // it. A revert used to keep only the primary's own copy (damaged: nothing to keep, so the
    // operator's only way out threw the acknowledged write away too). It now asks the replica
    // which copy it stores, pulls it, and the next revert keeps it on both members; the client's
    // resend of the write given up is applied again. Undone (`revert_primary_copy_only`), the
    // object stays unfound. In parts: the copy has more omap than one backfill chunk (64 bytes
    // here), so the pull goes in parts, each asking for the copy at the version chosen (before,
    // such a copy stayed where it was and the object unfound).
    let omap: Vec<(Vec<u8>, Vec<u8>)> = (0..8u64).map(|i| (i.to_be_bytes().to_vec(), vec![i as u8; 40])).collect();
    //
    // Lost answer (decision 0081): the replica's answer about the copy it holds is lost on the
    // way. The revert refuses until the replica is asked again and answers; undone
    // (`unanswered_copies_count_as_none`), the replica counted as holding nothing, and the
    // revert reported the object damaged — the operator's cue to delete it and the acknowledged
    // bytes with it.
    for (undone, in_parts, lost_answer) in
        [(false, false, false), (true, false, false), (false, true, false), (false, false, true), (true, false, true)]
    {
        let mut net = Net::new();
        let acting = net.acting();
        let (primary, replica) = (acting[0], acting[1]);
        let pool = net.map.pool_by_name("p").unwrap().id;
        let pg = net.map.locate(pool, "obj").unwrap().pg;
        let coll = shoal_osd::exec::pg_collection(pg);
        if in_parts {
            let key = shoal_map::config::BACKFILL_CHUNK_BYTES.to_string();
            net.change(Command::ConfigSet { key, value: Some(64) });
            let ops = vec![ObjOp::Append { len_bytes: 3 }, ObjOp::OmapSet { entries: omap.clone() }];
            net.request(1, ops, b"abc").result.expect("acknowledged append with omap");
        } else {
            net.append(1, b"abc").result.expect("acknowledged append");
        }
        net.drop_rep_to = vec![replica.0];
        let lost = client_op(&net.map, 2, vec![ObjOp::Append { len_bytes: 3 }]);
        net.submit(primary.0, lost, b"def", 0);
        net.drop_rep_to.clear();
        // Peering again makes the primary's log the PG's: the replica needs the append, and the
        // push that would bring it is held back.
        net.hold_pushes = true;
        let store = net.core(primary).store().clone();
        let mut core = net.new_core(primary, store);
        core.set_mutations(shoal_osd::core::Mutations {
            revert_primary_copy_only: undone && !lost_answer,
            unanswered_copies_count_as_none: undone && lost_answer,
            ..Default::default()
        });
        net.cores.insert(primary.0, core);
        let addr = format!("127.0.0.1:{}", 8000 + net.map.epoch).parse().unwrap();
        net.change(Command::OsdBoot { id: primary, addr });
        net.tick();
        net.held_pushes.clear();
        assert!(net.engines[&primary.0].inject_bit_rot(&coll, "obj").unwrap(), "the primary's copy to damage");
        // The replica restarts (the lost push forgotten): recovery meets the damaged copy.
        net.hold_pushes = false;
        net.restart(replica);
        for _ in 0..3 {
            net.tick();
        }
        assert!(net.core(primary).pg_states().iter().any(|(s, _)| s.contains("unfound")));
        let read = client_op(&net.map, 3, vec![ObjOp::Read { offset: 0, len_bytes: 100 }]);
        let waiting = net.submit(primary.0, read, &[], 0);
        assert!(!net.replies.contains_key(&waiting), "the read waits: no member holds the version needed");

        // The command is repeated while the primary waits for answers (as `shoal pg` does).
        net.lose_copies_queries = usize::from(lost_answer);
        let reply = net.pg_command(primary, pg, shoal_proto::osd::PgCmd::RevertUnfound);
        let Ok(shoal_proto::osd::PgCmdOutput::Reverted(first)) = reply.result else { panic!("{:?}", reply.result) };
        assert_eq!(net.lose_copies_queries, 0, "the question to lose was asked");
        assert!(first.reverted.is_empty(), "{first:?}");
        if undone {
            assert!(first.unfound[0].1.contains("damaged"), "only its own copy was considered: {first:?}");
            assert!(net.core(primary).pg_states().iter().any(|(s, _)| s.contains("unfound")));
            continue;
        }
        assert!(first.unfound[0].1.contains(&format!("{replica} holds it")), "{first:?}");
        let reply = net.pg_command(primary, pg, shoal_proto::osd::PgCmd::RevertUnfound);
        let Ok(shoal_proto::osd::PgCmdOutput::Reverted(second)) = reply.result else { panic!("{:?}", reply.result) };
        assert_eq!(second.reverted.len(), 1, "the replica's copy, pulled, is kept: {second:?}");
        for _ in 0..10 {
            net.tick();
        }
        assert_eq!(net.read_answer(waiting), b"abc", "the read that waited sees the acknowledged bytes");
        for osd in [primary, replica] {
            assert_eq!(net.content(osd).as_deref(), Some(&b"abc"[..]), "{osd}");
            if in_parts {
                let held = net.cores[&osd.0].store().omap_list(&coll, "obj", None, 100).expect("omap");
                assert_eq!(held, omap, "{osd}'s omap");
            }
        }
        // The append given up, resent, is applied again: once.
        net.append(2, b"def").result.expect("the resend of the write given up");
        for osd in [primary, replica] {
            assert_eq!(net.content(osd).as_deref(), Some(&b"abcdef"[..]), "{osd}");
        }
    }
}

#[test]
fn a_revert_leaves_unfound_what_its_primary_holds_no_copy_of() {
    // Both copies rot: the primary holds a copy, but not one that reads back whole, so a revert
    // keeps nothing and says why; the object stays unfound (delete is the operator's call).
    let mut net = Net::new();
    let acting = net.acting();
    let pool = net.map.pool_by_name("p").unwrap().id;
    let pg = net.map.locate(pool, "obj").unwrap().pg;
    net.append(1, b"abc").result.expect("append");
    let coll = shoal_osd::exec::pg_collection(pg);
    for osd in &acting {
        assert!(net.engines[&osd.0].inject_bit_rot(&coll, "obj").unwrap(), "a copy to damage on {osd}");
    }
    let read = client_op(&net.map, 2, vec![ObjOp::Read { offset: 0, len_bytes: 3 }]);
    let waiting = net.submit(acting[0].0, read, &[], 0);
    assert!(!net.replies.contains_key(&waiting), "a read of an unfound object waits");
    let reply = net.pg_command(acting[0], pg, shoal_proto::osd::PgCmd::RevertUnfound);
    let Ok(shoal_proto::osd::PgCmdOutput::Reverted(report)) = reply.result else { panic!("{:?}", reply.result) };
    assert!(report.reverted.is_empty(), "{report:?}");
    assert_eq!(report.unfound.len(), 1, "{report:?}");
    assert_eq!(report.unfound[0].0, "obj");
    assert!(report.unfound[0].1.contains("damaged"), "{report:?}");
    assert!(net.core(acting[0]).pg_states().iter().any(|(s, _)| s.contains("unfound")));
    assert!(!net.replies.contains_key(&waiting), "the read still waits");
}

/// The default `osd_backfill_retry_interval_ms`: how long a member that refused a push as too full
/// is left alone.
fn retry_interval_ms() -> u64 {
    shoal_map::config::setting(shoal_map::config::BACKFILL_RETRY_INTERVAL_MS).unwrap().default
}

/// Writes `bytes` as the whole of object `name` through its primary.
fn write_object(net: &mut Net, tid: u64, name: &str, bytes: &[u8]) -> OsdOpReply {
    let op = object_op(net, tid, name, vec![ObjOp::WriteFull { len_bytes: bytes.len() as u64 }]);
    submit_object_op(net, op, bytes)
}

/// Sends `op` (from [`object_op`]) with `data` to its object's primary; its answer.
fn submit_object_op(net: &mut Net, op: OsdOp, data: &[u8]) -> OsdOpReply {
    let primary = net.map.locate(op.pool, &op.object).unwrap().osds[0].0;
    let rid = net.submit(primary, op, data, 0);
    net.replies.remove(&rid).expect("answered")
}

/// Lets the network run 60 ticks, then requires every PG on `osds` to be active and clean.
fn settle_clean(net: &mut Net, osds: &[OsdId]) {
    for _ in 0..60 {
        net.tick();
    }
    for osd in osds {
        let states = net.core(*osd).pg_states();
        assert!(states.iter().all(|(s, _)| s.starts_with("active+clean")), "osd.{}: {states:?}", osd.0);
    }
}

/// Client 7's request `tid` on object `name` of pool `p`.
fn object_op(net: &Net, tid: u64, name: &str, ops: Vec<ObjOp>) -> OsdOp {
    let pool = net.map.pool_by_name("p").unwrap().id;
    OsdOp { object: name.into(), pg: net.map.locate(pool, name).unwrap().pg.seed, ..client_op(&net.map, tid, ops) }
}

/// Names and bytes of every object of pool `p` on `osd`.
fn all_objects(net: &Net, osd: OsdId) -> BTreeMap<String, Vec<u8>> {
    let pool = net.map.pool_by_name("p").unwrap();
    let store = net.core(osd).store();
    let mut all = BTreeMap::new();
    for seed in 0..pool.pg_num {
        let coll = shoal_osd::exec::pg_collection(shoal_map::PgId { pool: pool.id, seed });
        let Ok(page) = store.list_objects(&coll, "", None, 1000) else { continue };
        for name in page.objects {
            let bytes = store.read_all(&coll, &name).unwrap();
            all.insert(name, bytes);
        }
    }
    all
}

#[test]
fn backfill_stops_short_of_filling_its_target_and_goes_on_once_there_is_room() {
    const OBJECT_BYTES: usize = 1 << 20;
    let mut net = Net::new();
    let (keep, replaced) = (net.acting()[0], net.acting()[1]);
    // The replacement disk's data capacity, and objects worth a quarter more than it.
    let capacity = MemEngine::new_mem(16 << 20).unwrap().usage().unwrap().size_bytes;
    let count = (capacity * 5 / 4).div_ceil(OBJECT_BYTES as u64) as usize;
    let names: Vec<String> = (0..count).map(|i| format!("o{i:03}")).collect();
    for (i, name) in names.iter().enumerate() {
        write_object(&mut net, 10 + i as u64, name, &vec![i as u8; OBJECT_BYTES]).result.expect("write");
    }
    net.replace_disk_sized(replaced, 16 << 20);
    let mut now_ms = 1_000;
    for _ in 0..10 {
        now_ms += 100;
        net.tick_at(now_ms);
    }
    // Backfill filled the new disk up to the backfillfull share, not to the full flag's.
    let usage = net.core(replaced).store().usage().unwrap();
    let permille = shoal_map::used_permille(usage.used_bytes, usage.size_bytes);
    assert!(permille < shoal_map::BACKFILLFULL_PERMILLE, "backfill went past backfillfull: {permille}‰");
    assert!(permille >= shoal_map::BACKFILLFULL_PERMILLE - 100, "backfill stopped early: {permille}‰");
    // Every PG still serves (none peering again and again); those with objects left to send say so.
    let states = net.core(keep).pg_states();
    assert!(states.iter().all(|(s, _)| s.starts_with("active")), "{states:?}");
    assert!(states.iter().any(|(s, _)| s.contains("+backfill_toofull")), "{states:?}");
    let write = write_object(&mut net, 500, &names[0], &vec![0xee; OBJECT_BYTES]);
    write.result.expect("client writes go on while backfill waits");
    // Before the retry interval, nothing more is sent, however often the primaries tick.
    let pushes = net.pushes;
    for _ in 0..5 {
        now_ms += 1_000;
        net.tick_at(now_ms);
    }
    assert_eq!(net.pushes, pushes, "backfill sent to a too-full target before the retry interval");
    // Space is freed: objects the new disk already holds are removed through their primaries.
    let held: Vec<String> = all_objects(&net, replaced).into_keys().take(count / 3).collect();
    assert!(!held.is_empty());
    for (i, name) in held.iter().enumerate() {
        let op = object_op(&net, 1_000 + i as u64, name, vec![ObjOp::Remove]);
        submit_object_op(&mut net, op, b"").result.expect("remove");
    }
    // After the retry interval, backfill goes on and completes: both OSDs hold the same objects.
    now_ms += retry_interval_ms();
    for _ in 0..20 {
        now_ms += 100;
        net.tick_at(now_ms);
    }
    let states = net.core(keep).pg_states();
    assert!(states.iter().all(|(s, _)| s == "active+clean"), "{states:?}");
    let (kept, backfilled) = (all_objects(&net, keep), all_objects(&net, replaced));
    assert_eq!(kept.len(), count - held.len());
    assert!(kept == backfilled, "the backfilled disk differs from the primary's");
    if !held.contains(&names[0]) {
        assert!(kept[&names[0]] == vec![0xee; OBJECT_BYTES], "the write made while backfill waited");
    }
}

#[test]
fn recovery_onto_a_member_out_of_room_waits_without_peering_again() {
    const OBJECT_BYTES: usize = 1 << 20;
    let mut net = Net::new();
    let (primary, replica) = (net.acting()[0], net.acting()[1]);
    let pool = net.map.pool_by_name("p").unwrap().id;
    let pg = net.map.locate(pool, "obj").unwrap().pg;
    net.append(1, b"held by both").result.expect("a write both members take");
    // Objects of the same PG written while the replica loses every replicated write: they are
    // in the primary's log, so the replica is recovered from the log (not backfilled).
    let names: Vec<String> =
        (0..2000).map(|i| format!("r{i}")).filter(|n| net.map.locate(pool, n).unwrap().pg == pg).take(3).collect();
    assert_eq!(names.len(), 3);
    net.drop_rep_to = vec![replica.0];
    for (i, name) in names.iter().enumerate() {
        let op = object_op(&net, 10 + i as u64, name, vec![ObjOp::WriteFull { len_bytes: OBJECT_BYTES as u64 }]);
        net.submit(primary.0, op, &vec![i as u8 + 1; OBJECT_BYTES], 0);
    }
    net.drop_rep_to.clear();
    // Something else fills the replica's store past the failsafe share.
    let store = net.core(replica).store().clone();
    let mut filler = 0;
    while {
        let u = store.usage().unwrap();
        shoal_map::used_permille(u.used_bytes, u.size_bytes) < shoal_map::FULL_FAILSAFE_PERMILLE + 5
    } {
        let mut txn = shoal_store::Transaction::new();
        if filler == 0 {
            txn.create_collection("filler");
        }
        txn.write("filler", &format!("f{filler}"), 0, vec![9u8; 256 << 10]);
        store.commit(txn, shoal_store::Durability::Batch).unwrap();
        filler += 1;
    }
    // The primary restarts: peering finds the replica missing the three objects and pushes them;
    // the replica refuses, and the PG stays active (it does not peer again and again: the
    // network settles) and says why it waits.
    net.restart(primary);
    let mut now_ms = 1_000;
    net.tick_at(now_ms);
    let state = net.core(primary).pg_state(pg).expect("primary");
    assert!(state.starts_with("active") && state.contains("+recovery_toofull"), "{state}");
    // A write to a missing object waits for its recovery (without pushing to the member before
    // the retry time); one to an object both hold goes on.
    let pushes = net.pushes;
    let waiting = object_op(&net, 100, &names[0], vec![ObjOp::Append { len_bytes: 1 }]);
    let waiting = net.submit(primary.0, waiting, b"!", now_ms);
    assert!(!net.replies.contains_key(&waiting), "a write to an object missing on a member must wait");
    net.tick_at(now_ms + 100);
    assert_eq!(net.pushes, pushes, "pushed to a member that refused as too full before the retry time");
    net.append(101, b"+").result.expect("a write to an object every member holds");
    // Room again: after the retry interval recovery goes on, and the waiting write is applied.
    let mut txn = shoal_store::Transaction::new();
    for f in 0..filler {
        txn.remove("filler", &format!("f{f}"));
    }
    store.commit(txn, shoal_store::Durability::Batch).unwrap();
    now_ms += retry_interval_ms();
    for _ in 0..5 {
        now_ms += 100;
        net.tick_at(now_ms);
    }
    net.replies.remove(&waiting).expect("answered once recovered").result.expect("the waiting write");
    assert_eq!(net.core(primary).pg_state(pg).as_deref(), Some("active+clean"));
    let coll = shoal_osd::exec::pg_collection(pg);
    for (i, name) in names.iter().enumerate() {
        let mut want = vec![i as u8 + 1; OBJECT_BYTES];
        if i == 0 {
            want.push(b'!');
        }
        for osd in [primary, replica] {
            let got = net.core(osd).store().read_all(&coll, name).unwrap();
            assert!(got == want, "{name} on {osd}");
        }
    }
}

/// Delivers the pushes held so far (oldest first) and everything they cause; the pushes that
/// causes are held again (while `hold_pushes` is set). Returns how many were delivered.
fn deliver_held_pushes(net: &mut Net) -> usize {
    let held: Vec<(u32, Action)> = net.held_pushes.drain(..).collect();
    let count = held.len();
    let mut queue = VecDeque::new();
    let hold = std::mem::replace(&mut net.hold_pushes, false);
    for (from, action) in held {
        net.route(from, action, &mut queue);
    }
    net.hold_pushes = hold;
    net.run(queue);
    count
}

#[test]
fn a_member_restarted_during_its_backfill_resumes_past_what_it_holds() {
    const OBJECTS: usize = 48;
    let mut net = Net::new();
    let (keep, backfilled) = (net.acting()[0], net.acting()[1]);
    let key = shoal_map::config::BACKFILL_CHUNK_OBJECTS.to_string();
    net.change(Command::ConfigSet { key, value: Some(1) });
    let names: Vec<String> = (0..OBJECTS).map(|i| format!("o{i:02}")).collect();
    for (i, name) in names.iter().enumerate() {
        write_object(&mut net, 10 + i as u64, name, &[i as u8; 4096]).result.expect("write");
    }
    // A new disk: every object is backfilled to it, one per push, a few rounds of them delivered.
    net.hold_pushes = true;
    net.replace_disk(backfilled);
    net.tick();
    for _ in 0..3 {
        deliver_held_pushes(&mut net);
        net.tick();
    }
    let held = all_objects(&net, backfilled);
    assert!(held.len() >= 8 && held.len() < OBJECTS / 2, "{} objects backfilled before the restart", held.len());
    // It goes down with pushes in flight (lost); meanwhile an object it holds is written, one
    // is removed, and one it does not hold yet is written.
    net.held_pushes.clear();
    net.change(Command::OsdDown { id: backfilled });
    let (rewritten, removed) = {
        let mut held_names = held.keys();
        (held_names.next().expect("held").clone(), held_names.next().expect("held").clone())
    };
    let later = names.iter().find(|n| !held.contains_key(*n)).expect("an object not held yet").clone();
    write_object(&mut net, 500, &rewritten, &[0xee; 4096]).result.expect("write while it is down");
    write_object(&mut net, 501, &later, &[0xdd; 4096]).result.expect("write while it is down");
    let op = object_op(&net, 502, &removed, vec![ObjOp::Remove]);
    let rid = net.submit(keep.0, op, b"", 0);
    net.replies.remove(&rid).expect("answered").result.expect("remove while it is down");
    // It restarts on the same store: its backfill goes on past its cursor, and of what it held
    // only the two objects changed meanwhile are sent again.
    let before = net.pushes;
    net.restart(backfilled);
    net.tick();
    for _ in 0..OBJECTS + 10 {
        if deliver_held_pushes(&mut net) == 0 {
            net.tick();
            if net.held_pushes.is_empty() {
                break;
            }
        }
        net.tick();
    }
    let states = net.core(keep).pg_states();
    assert!(states.iter().all(|(s, _)| s == "active+clean"), "{states:?}");
    let sent_again = net.pushes - before;
    let still_to_send = OBJECTS - held.len();
    assert!(
        sent_again <= still_to_send + 2,
        "{sent_again} pushes after the restart for {still_to_send} objects not held and 2 changed: backfill started over"
    );
    let (primary_objects, member_objects) = (all_objects(&net, keep), all_objects(&net, backfilled));
    assert_eq!(primary_objects.len(), OBJECTS - 1);
    assert!(primary_objects == member_objects, "the backfilled member differs from the primary");
    assert!(member_objects[&rewritten] == vec![0xee; 4096], "the write made while it was down");
    assert!(member_objects[&later] == vec![0xdd; 4096]);
    assert!(!member_objects.contains_key(&removed), "the removal made while it was down");
}

#[test]
fn a_member_back_after_its_log_was_trimmed_past_is_sent_only_what_changed() {
    const OLD: usize = 40;
    const NEW: usize = 64;
    let mut net = Net::with_log_bounds(Some(shoal_osd::pglog::LogBounds::new(4, 2)));
    let away = OsdId(1);
    let key = shoal_map::config::BACKFILL_CHUNK_OBJECTS.to_string();
    net.change(Command::ConfigSet { key, value: Some(2) });
    let old: Vec<String> = (0..OLD).map(|i| format!("o{i:02}")).collect();
    for (i, name) in old.iter().enumerate() {
        write_object(&mut net, 10 + i as u64, name, &[i as u8; 4096]).result.expect("write");
    }
    // osd.1 is away while every PG's log moves on past what it holds (4 entries kept).
    net.change(Command::OsdDown { id: away });
    for i in 0..NEW {
        write_object(&mut net, 100 + i as u64, &format!("n{i:02}"), &[0x40 + i as u8; 4096]).result.expect("write");
    }
    write_object(&mut net, 300, &old[0], &[0xee; 4096]).result.expect("rewrite while it is away");
    let op = object_op(&net, 301, &old[1], vec![ObjOp::Remove]);
    submit_object_op(&mut net, op, b"").result.expect("remove while it is away");
    // It comes back with its store and its log: backfilled, comparing versions. Its scans are
    // held; an object one of them names is written before they arrive.
    net.hold_scans = true;
    let addr = format!("127.0.0.1:{}", 8000 + net.map.epoch).parse().unwrap();
    net.change(Command::OsdBoot { id: away, addr });
    net.tick();
    assert!(!net.held_scans.is_empty(), "no backfill scan: the member was not compared");
    let scanned: Vec<String> = net
        .held_scans
        .iter()
        .flat_map(|(_, action)| match action {
            Action::Peer { payload, .. } => {
                decode::<shoal_proto::osd::PgScanVersions>(payload.clone()).unwrap().0.objects
            }
            _ => Vec::new(),
        })
        .map(|(name, _)| name)
        .collect();
    let moved = scanned
        .iter()
        .find(|n| n.starts_with('o') && **n != old[0] && **n != old[1])
        .expect("an old object scanned")
        .clone();
    write_object(&mut net, 302, &moved, &[0xdd; 4096]).result.expect("write between the scan and its answer");
    net.hold_scans = false;
    let held: Vec<(u32, Action)> = net.held_scans.drain(..).collect();
    let mut queue = VecDeque::new();
    for (from, action) in held {
        net.route(from, action, &mut queue);
    }
    net.run(queue);
    settle_clean(&mut net, &[OsdId(0), away]);
    let (a, b) = (all_objects(&net, OsdId(0)), all_objects(&net, away));
    assert_eq!(a.len(), OLD - 1 + NEW);
    assert!(a == b, "the members differ");
    assert!(b[&old[0]] == vec![0xee; 4096] && b[&moved] == vec![0xdd; 4096], "a write made while away or mid-scan");
    assert!(!b.contains_key(&old[1]), "the removal made while it was away");
    // What it held unchanged stayed; what changed was sent.
    let (pushed, kept) = (net.names_pushed.len(), net.names_kept.len());
    assert!(kept >= OLD / 2, "{kept} objects kept, {pushed} sent");
    assert!(pushed + kept <= OLD + NEW + 8 && pushed <= NEW + 8, "{kept} objects kept, {pushed} sent");
}

#[test]
fn a_member_back_after_its_log_was_trimmed_past_keeps_the_snapshot_clones_it_holds() {
    const OLD: usize = 12;
    const NEW: usize = 64;
    let mut net = Net::with_log_bounds(Some(shoal_osd::pglog::LogBounds::new(4, 2)));
    let away = OsdId(1);
    let old: Vec<String> = (0..OLD).map(|i| format!("o{i:02}")).collect();
    let write_under = |net: &mut Net, tid: u64, name: &str, snapc: ObjOp, bytes: &[u8]| {
        let ops = vec![snapc, ObjOp::WriteFull { len_bytes: bytes.len() as u64 }];
        submit_object_op(net, object_op(net, tid, name, ops), bytes).result.expect("write");
    };
    // Every old object written, then written again after snapshot 1 was taken: clone 1 of each.
    for (i, name) in old.iter().enumerate() {
        write_under(&mut net, 10 + i as u64, name, ctx(0, &[]), &[i as u8; 4096]);
        write_under(&mut net, 50 + i as u64, name, ctx(1, &[1]), &[0x80 + i as u8; 4096]);
    }
    let clone1 = |name: &str| shoal_osd::snaps::clone_name(name, 1);
    // The last one's head removed: its clone stays, its snapshot state moves to its directory.
    let removed = &old[OLD - 1];
    let dir = shoal_osd::snaps::snapdir_name(removed);
    let op = object_op(&net, 90, removed, vec![ctx(1, &[1]), ObjOp::Remove]);
    submit_object_op(&mut net, op, b"").result.expect("remove a head that has a clone");
    let on_away = all_objects(&net, away);
    assert!(old.iter().all(|o| on_away.contains_key(&clone1(o))), "every old object has clone 1 on the member");
    assert!(on_away.contains_key(&dir) && !on_away.contains_key(removed), "{removed}'s directory on the member");
    // The member is away while the logs move on; meanwhile snapshot 2 is taken and one object
    // written under it (a new clone), and snapshot 1 is removed and trimmed from another.
    net.change(Command::OsdDown { id: away });
    for i in 0..NEW {
        write_object(&mut net, 100 + i as u64, &format!("n{i:02}"), &[0x40 + i as u8; 4096]).result.expect("write");
    }
    write_under(&mut net, 300, &old[0], ctx(2, &[2, 1]), &[0xee; 4096]);
    let op = object_op(&net, 301, &old[1], vec![ctx(2, &[2]), ObjOp::SnapTrim]);
    submit_object_op(&mut net, op, b"").result.expect("trim while it is away");
    let addr = format!("127.0.0.1:{}", 8000 + net.map.epoch).parse().unwrap();
    net.change(Command::OsdBoot { id: away, addr });
    settle_clean(&mut net, &[OsdId(0), away]);
    let (a, b) = (all_objects(&net, OsdId(0)), all_objects(&net, away));
    assert!(a == b, "the members differ");
    assert!(b[&shoal_osd::snaps::clone_name(&old[0], 2)] == vec![0x80; 4096], "the clone made while it was away");
    assert!(!b.contains_key(&clone1(&old[1])), "the clone trimmed while it was away");
    // Clones it held stayed where they were, as the heads that did not change.
    let kept_clones = net.names_kept.iter().filter(|n| n.contains(shoal_osd::snaps::COMPANION_SEP)).count();
    assert!(kept_clones > 0, "no clone kept; kept {:?}, sent {:?}", net.names_kept, net.names_pushed);
    assert!(
        net.names_pushed.iter().all(|n| !old[2..].iter().any(|o| *n == clone1(o))),
        "an unchanged clone was sent again: {:?}",
        net.names_pushed
    );
    // So did the directory of the head removed before it went away.
    assert!(
        net.names_kept.contains(&dir),
        "{dir:?} sent again: kept {:?}, sent {:?}",
        net.names_kept,
        net.names_pushed
    );
    // Every clone carries the version of the write that made it, and the directory that of the
    // removal, on both members.
    let pool = net.map.pool_by_name("p").unwrap().id;
    let on_both = |net: &Net, o: &str, name: &str| -> Vec<(u64, u64)> {
        let coll = shoal_osd::exec::pg_collection(net.map.locate(pool, o).unwrap().pg);
        [OsdId(0), away].iter().map(|m| net.core(*m).store().version(&coll, name).unwrap()).collect()
    };
    for o in &old[2..] {
        let versions = on_both(&net, o, &clone1(o));
        assert_ne!(versions[0], (0, 0), "{o}'s clone has no version");
        assert_eq!(versions[0], versions[1], "{o}'s clone");
    }
    let versions = on_both(&net, removed, &dir);
    assert_ne!(versions[0], (0, 0), "{dir:?} has no version");
    assert_eq!(versions[0], versions[1], "{dir:?}");
}

#[test]
fn a_backfill_chunk_keeping_an_object_the_member_holds_otherwise_is_refused_whole() {
    use shoal_proto::osd::{BackfillRange, Eversion, PeerAck, PgPush};
    let mut net = Net::new();
    let replica = net.acting()[1];
    let pool = net.map.pool_by_name("p").unwrap().id;
    let pg = net.map.locate(pool, "obj").unwrap().pg;
    net.request(1, vec![ObjOp::WriteFull { len_bytes: 3 }], b"abc").result.expect("write");
    let held = net.core(replica).store().version(&shoal_osd::exec::pg_collection(pg), "obj").unwrap();
    let held = Eversion { epoch: held.0, seq: held.1 };
    // Pushes a backfill chunk over the whole PG that sends nothing and keeps `kept`; returns the
    // member's answer.
    let push = |net: &mut Net, kept: Vec<(String, Eversion)>| {
        let push = PgPush {
            epoch: net.map.epoch,
            pool,
            pg: pg.seed,
            objects: Vec::new(),
            backfill: Some(BackfillRange { after: None, upto: Some("zzz".into()) }),
            part: None,
            kept,
            decided: false,
        };
        let event = Event::PeerMsg {
            from: 0,
            request_id: 77,
            msg_type: PgPush::TYPE,
            payload: encode(&push, Vec::new()).into(),
        };
        let mut out = Vec::new();
        net.cores.get_mut(&replica.0).unwrap().handle(event, &mut out);
        out.into_iter()
            .find_map(|a| match a {
                Action::Reply { frame, .. } if frame.request_id == 77 => {
                    Some(decode::<PeerAck>(frame.into_payload()).unwrap().0.result)
                }
                _ => None,
            })
            .expect("the member answered")
    };
    // Kept at a version the member's copy does not have, or outside the range: refused, and the
    // chunk's removals (everything else in the range) are not applied.
    let stale = Eversion { epoch: held.epoch, seq: held.seq + 1 };
    let e = push(&mut net, vec![("obj".into(), stale)]).expect_err("a kept object at another version");
    assert_eq!(e.code, ErrorCode::Invalid, "{e}");
    assert!(e.message.contains("obj"), "{e}");
    let e = push(&mut net, vec![("zzzz".into(), held)]).expect_err("a kept object outside the range");
    assert_eq!(e.code, ErrorCode::Invalid, "{e}");
    assert_eq!(net.content(replica).as_deref(), Some(&b"abc"[..]), "a refused chunk removed the object");
    // Kept at the version it has: taken, the object stays.
    push(&mut net, vec![("obj".into(), held)]).expect("a kept object as held");
    assert_eq!(net.content(replica).as_deref(), Some(&b"abc"[..]));
}

/// Names of the objects in the backfill pushes held so far.
fn held_push_names(net: &Net) -> Vec<String> {
    use shoal_proto::osd::PgPush;
    net.held_pushes
        .iter()
        .filter_map(|(_, action)| match action {
            Action::Peer { payload, .. } => Some(decode::<PgPush>(payload.clone()).unwrap().0),
            _ => None,
        })
        .flat_map(|push| push.objects.into_iter().map(|c| c.name))
        .collect()
}

#[test]
fn a_backfill_push_never_carries_a_write_still_on_its_way_to_its_target() {
    // A backfill chunk read the primary's copy of an object while a write of it was applied
    // there and on its way to the members: the target got the write's data in the push, and its
    // log entry only in the replicated write, which a broken connection can lose. If that write
    // is never acknowledged and a member without it becomes the authority, the target's copy
    // holds a write no log names and nothing rolls it back (simulation seed 232212: an append
    // applied twice). A chunk now stops before such an object and goes once the write is
    // answered.
    let mut net = Net::new();
    let pool = net.map.pool_by_name("p").unwrap().id;
    let pg = net.map.locate(pool, "obj").unwrap().pg;
    let (primary, target) = (net.acting()[0], net.acting()[1]);
    let key = shoal_map::config::BACKFILL_CHUNK_OBJECTS.to_string();
    net.change(Command::ConfigSet { key, value: Some(1) });
    let mut names = net.names_in_pg(pg, 2);
    names.sort();
    let (first, second) = (names[0].clone(), names[1].clone());
    write_object(&mut net, 10, &first, &[1; 512]).result.expect("write");
    write_object(&mut net, 11, &second, &[2; 512]).result.expect("write");
    // A new disk on the target: backfilled one object per push, the pushes held.
    net.hold_pushes = true;
    net.replace_disk(target);
    net.tick();
    assert_eq!(held_push_names(&net), vec![first.clone()], "the first chunk");
    // A write of the second object, past the cursor: applied on the primary, its log entry on
    // its way to the target (captured, not delivered).
    net.capture = true;
    let op = object_op(&net, 12, &second, vec![ObjOp::WriteFull { len_bytes: 512 }]);
    let rid = net.submit(primary.0, op, &[3; 512], 0);
    assert!(!net.replies.contains_key(&rid), "acknowledged before its replica answered");
    assert_eq!(net.captured.len(), 1, "one replicated write on its way");
    // The first push lands: the next chunk would hold the second object with the write's data.
    deliver_held_pushes(&mut net);
    for _ in 0..3 {
        net.tick();
    }
    assert!(held_push_names(&net).is_empty(), "a push while the write is on its way: {:?}", held_push_names(&net));
    // The write reaches the target and is answered: the backfill goes on at once.
    net.capture = false;
    net.deliver_captured(primary.0);
    net.replies.remove(&rid).expect("answered").result.expect("write");
    assert_eq!(held_push_names(&net), vec![second.clone()], "the chunk that waited");
    for _ in 0..10 {
        deliver_held_pushes(&mut net);
        net.tick();
    }
    let (on_primary, on_target) = (all_objects(&net, primary), all_objects(&net, target));
    assert_eq!(on_target.get(&second), Some(&vec![3; 512]));
    assert!(on_primary == on_target, "the backfilled member differs from the primary");
    let states = net.core(primary).pg_states();
    assert!(states.iter().all(|(s, _)| s == "active+clean"), "{states:?}");
}

/// Runs the shape of decision 0053's second fix with logs of 2 entries: a write of "obj" applied
/// on its primary alone, then rolled back at a peering whose authority (the other member, which
/// served other objects meanwhile) has trimmed every entry of "obj" from its log. Returns the
/// needs of 0'0 the returning primary named, and the two members' copies of "obj" afterwards.
fn roll_back_against_a_log_that_no_longer_names_the_object() -> (u64, [Vec<u8>; 2]) {
    let mut net = Net::with_log_bounds(Some(shoal_osd::pglog::LogBounds::new(2, 1)));
    let (primary, replica) = (net.acting()[0], net.acting()[1]);
    let pool = net.map.pool_by_name("p").unwrap().id;
    let pg = net.map.locate(pool, "obj").unwrap().pg;
    net.append(1, b"abc").result.expect("acknowledged append");
    // Two writes of other objects: both logs are trimmed past the append's entry.
    let others = net.names_in_pg(pg, 3);
    for (i, name) in others[..2].iter().enumerate() {
        write_object(&mut net, 10 + i as u64, name, b"x").result.expect("write of another object");
    }
    // A write applied on the primary alone: never acknowledged.
    net.drop_rep_to = vec![replica.0];
    let lost = client_op(&net.map, 2, vec![ObjOp::Append { len_bytes: 3 }]);
    let never_answered = net.submit(primary.0, lost, b"def", 0);
    net.drop_rep_to.clear();
    // The primary goes down; the replica leads alone and writes one more object: its log still
    // shares an entry with the primary's, is newer, and does not name "obj".
    net.change(Command::OsdDown { id: primary });
    write_object(&mut net, 20, &others[2], b"x").result.expect("write while the primary is down");
    let log = shoal_osd::pglog::read_entries(&**net.core(replica).store(), pg).unwrap();
    assert!(log.iter().all(|e| e.object != "obj"), "the authority's log still names obj: {log:?}");
    // The old primary comes back with its divergent write.
    net.restart(primary);
    settle_clean(&mut net, &[primary, replica]);
    assert!(!net.replies.contains_key(&never_answered), "the lost write was answered");
    let copies = [net.content(primary).expect("obj on the old primary"), net.content(replica).expect("obj")];
    (net.core(primary).needs_named(), copies)
}

#[test]
fn a_rolled_back_object_the_authoritys_log_no_longer_names_is_needed_at_the_authoritys_version() {
    // The rolled-back object is recorded missing at "whatever the authority holds" (0'0): peering
    // names that need with the version stored with the authority's copy (decision 0053), so that
    // a later peering can match it against any member's copy (the simulation's seeds no longer
    // reach the loss that an unnamed need caused, decision 0053's amendment; this shape reaches
    // the naming every time). Both members end with the acknowledged write only.
    let (named, copies) = roll_back_against_a_log_that_no_longer_names_the_object();
    assert!(named > 0, "no need of 0'0 was named");
    for copy in &copies {
        assert_eq!(copy.as_slice(), b"abc", "the unacknowledged write was rolled back");
    }
}

#[test]
fn an_incomplete_pg_activates_from_the_copy_left_once_the_operator_gives_up_its_history() {
    // Two copies, min_size 1: the replica goes down and the primary takes a write alone, so the
    // PG's activation record names the primary only. Its disk is then lost and replaced, and the
    // replica comes back: no member of the record holds the PG, and the PG stays incomplete. The
    // operator gives up the record (`shoal pg force-complete`, decision 0078): the PG peers again
    // with the newest copy left, the replica's, and every member ends with it.
    let mut net = Net::new();
    let acting = net.acting();
    let (primary, replica) = (acting[0], acting[1]);
    let pool = net.map.pool_by_name("p").unwrap().id;
    let pg = net.map.locate(pool, "obj").unwrap().pg;
    net.append(1, b"abc").result.expect("append on both");
    net.change(Command::OsdDown { id: replica });
    net.append(2, b"def").result.expect("append on the primary alone");
    assert_eq!(net.map.pg_active[&pg].members, vec![primary], "the record names the primary alone");
    net.change(Command::OsdDown { id: primary });
    net.replace_disk(primary);
    net.restart(replica);
    for _ in 0..5 {
        net.tick();
    }
    let leader = net.acting()[0];
    assert_eq!(net.core(leader).pg_state(pg).as_deref(), Some("incomplete"));
    assert_eq!(net.content(replica).as_deref(), Some(&b"abc"[..]), "the replica still holds the older copy");

    // A stale decision (another record than the one the operator saw) is refused.
    let epoch = net.map.pg_active[&pg].epoch;
    let stale = Command::PgForgetHistory { pg, record_epoch: epoch - 1 };
    assert!(net.map.execute(&stale).is_err(), "a decision on an older record was applied");
    net.change(Command::PgForgetHistory { pg, record_epoch: epoch });
    // (The PG may have peered and been recorded again already: the harness applies at once.)
    assert_ne!(net.map.pg_active.get(&pg).map(|r| r.epoch), Some(epoch), "the record given up is still there");
    // The pool's other PGs, empty, were recorded on the primary alone too: given up as well.
    for seed in 0..net.map.pools[&pool].pg_num {
        let other = shoal_map::PgId { pool, seed };
        let leader = net.map.pg_osds(other).unwrap()[0];
        if net.core(leader).pg_state(other).as_deref() == Some("incomplete") {
            let record_epoch = net.map.pg_active[&other].epoch;
            net.change(Command::PgForgetHistory { pg: other, record_epoch });
        }
    }
    settle_clean(&mut net, &[primary, replica]);
    for osd in [primary, replica] {
        assert_eq!(net.content(osd).as_deref(), Some(&b"abc"[..]), "{osd} holds the copy left");
    }
    let record = &net.map.pg_active[&pg];
    assert!(record.members.contains(&replica) && record.holders.is_empty(), "{record:?}");
    let again = Command::PgForgetHistory { pg, record_epoch: epoch };
    assert!(net.map.execute(&again).is_err(), "a repeated decision was applied to the new record");
}

#[test]
fn a_member_lacking_a_removal_removes_the_object_at_activation_without_a_copy() {
    // The primary removes "obj" and the replica misses the replicated write; at the next
    // peering the primary's log is the authority and names the removal. Its push to the replica
    // never arrives, and then the primary goes down. The removal left nothing of the object, so
    // the replica removes it when it is activated and needs no copy from anyone (decision 0077);
    // with the mutation (the object planned missing, as before) it waits for a copy only the
    // primary could send, and the object is unfound while the primary is down.
    for undone in [false, true] {
        let mut net = Net::new();
        for id in [0, 1] {
            let store = net.cores[&id].store().clone();
            let mut core = net.new_core(OsdId(id), store);
            core.set_mutations(shoal_osd::core::Mutations { removals_need_copies: undone, ..Default::default() });
            net.cores.insert(id, core);
            let addr = format!("127.0.0.1:{}", 8000 + net.map.epoch).parse().unwrap();
            net.change(Command::OsdBoot { id: OsdId(id), addr });
        }
        let acting = net.acting();
        let (primary, replica) = (acting[0], acting[1]);
        let pool = net.map.pool_by_name("p").unwrap().id;
        let pg = net.map.locate(pool, "obj").unwrap().pg;
        net.append(1, b"abc").result.expect("a write on both");
        net.drop_rep_to = vec![replica.0];
        let op = client_op(&net.map, 2, vec![ObjOp::Remove]);
        net.submit(primary.0, op, &[], 0);
        net.drop_rep_to.clear();
        net.hold_pushes = true;
        net.change(Command::OsdDown { id: replica });
        net.restart(replica);
        for _ in 0..5 {
            net.tick();
        }
        let log = shoal_osd::pglog::read_entries(&**net.core(replica).store(), pg).unwrap();
        let removal = log.iter().find(|e| e.reqid.tid == 2).expect("the replica logged the removal");
        // (The mutation takes the flag out of the log the primary activates the replica with.)
        assert_eq!(removal.empties, !undone, "the removal left nothing of the object: {removal:?}");
        net.change(Command::OsdDown { id: primary });
        for _ in 0..5 {
            net.tick();
        }
        let states = net.core(replica).pg_states();
        let unfound = states.iter().any(|(s, _)| s.contains("unfound"));
        if undone {
            assert!(unfound, "planned missing, the removal waits for the primary's copy: {states:?}");
            continue;
        }
        assert!(!unfound, "{states:?}");
        assert_eq!(net.content(replica), None, "the replica removed obj without a copy");
    }
}

#[test]
fn a_member_reports_a_removed_heads_version_from_its_snapshot_directory() {
    // A head removed while a snapshot keeps a clone of it leaves its state, and the removal's
    // version, on its snapshot directory. Asked for the object's stored version, a member
    // reports that one (decision 0075): with only heads' versions reported (the mutation), no
    // member could be recognised as holding the removal once its log no longer shows it.
    for undone in [false, true] {
        let mut net = Net::new();
        let acting = net.acting();
        let pool = net.map.pool_by_name("p").unwrap().id;
        let pg = net.map.locate(pool, "obj").unwrap().pg;
        let put = |n: usize| ObjOp::WriteFull { len_bytes: n as u64 };
        net.request(1, vec![ctx(0, &[]), put(3)], b"old").result.expect("write");
        net.request(2, vec![ctx(1, &[1]), ObjOp::Remove], &[]).result.expect("removal keeping a clone");
        let log = shoal_osd::pglog::read_entries(&**net.core(acting[1]).store(), pg).unwrap();
        let removal = log.iter().find(|e| e.reqid.tid == 2).expect("logged").clone();
        assert!(!removal.empties, "a clone is left: {removal:?}");
        let member = acting[1];
        let store = net.core(member).store().clone();
        let mut core = net.new_core(member, store);
        core.set_mutations(shoal_osd::core::Mutations { head_versions_only: undone, ..Default::default() });
        net.cores.insert(member.0, core);
        net.broadcast();
        let query = shoal_proto::osd::PeerQuery {
            epoch: net.map.epoch,
            pool,
            pg: pg.seed,
            versions_of: vec!["obj".to_string()],
        };
        let event = Event::PeerMsg {
            from: 0,
            request_id: 91,
            msg_type: shoal_proto::osd::PeerQuery::TYPE,
            payload: encode(&query, Vec::new()).into(),
        };
        let mut out = Vec::new();
        net.cores.get_mut(&member.0).unwrap().handle(event, &mut out);
        let state = out
            .into_iter()
            .find_map(|a| match a {
                Action::Reply { frame, .. } if frame.request_id == 91 => {
                    Some(decode::<shoal_proto::osd::PeerInfo>(frame.into_payload()).unwrap().0.result)
                }
                _ => None,
            })
            .expect("the member answered")
            .expect("its state");
        let reported = state.versions.iter().find(|(o, _)| o == "obj").map(|(_, v)| *v);
        assert_eq!(reported, (!undone).then_some(removal.version), "undone: {undone}");
    }
}

/// The scenario of decisions 0080 and 0091 (the simulation's seed 301566), with the primary's
/// `mutations`: the replica sees the PG move away from it (out) and back (in), while the primary,
/// cut off from the monitors, gets only the last map, where the PG's interval has the same OSDs
/// with the same boot epochs as the one it activated, but began later. The replica took two new
/// intervals and holds no activation. The primary's copy is then damaged and read, which needs
/// the replica's copy. Returns whether the read was answered (checking the answer and both
/// copies if so).
fn read_after_a_skipped_interval(mutations: shoal_osd::core::Mutations) -> bool {
    let mut net = Net::new();
    let acting = net.acting();
    let (primary, replica) = (acting[0], acting[1]);
    let pool = net.map.pool_by_name("p").unwrap().id;
    let pg = net.map.locate(pool, "obj").unwrap().pg;
    let coll = shoal_osd::exec::pg_collection(pg);
    net.request(1, vec![ObjOp::WriteFull { len_bytes: 3 }], b"abc").result.expect("write");
    net.cores.get_mut(&primary.0).unwrap().set_mutations(mutations);
    let began = net.map.pg_interval_since.get(&pg).copied();
    let interval = net.map.pg_interval(pg).unwrap();
    for cmd in [Command::OsdOut { id: replica }, Command::OsdIn { id: replica }] {
        net.map.execute(&cmd).unwrap();
        net.run(VecDeque::from([(replica.0, Event::Map(Arc::new(net.map.clone())))]));
    }
    assert_eq!(net.map.pg_interval(pg).unwrap(), interval, "the same OSDs with the same boot epochs");
    assert!(net.map.pg_interval_since.get(&pg).copied() > began, "an interval that began later");
    net.run(VecDeque::from([(primary.0, Event::Map(Arc::new(net.map.clone())))]));
    assert_eq!(net.acting(), vec![primary, replica], "the interval the primary activated");

    assert!(net.engines[&primary.0].inject_bit_rot(&coll, "obj").unwrap(), "the primary's copy to damage");
    let op = client_op(&net.map, 2, vec![ObjOp::Read { offset: 0, len_bytes: 3 }]);
    let waiting = net.submit(primary.0, op, &[], 0);
    for _ in 0..5 {
        net.tick();
    }
    if !net.replies.contains_key(&waiting) {
        return false;
    }
    assert_eq!(net.read_answer(waiting), b"abc");
    for osd in [primary, replica] {
        assert_eq!(net.content(osd).as_deref(), Some(&b"abc"[..]), "{osd}");
    }
    true
}

#[test]
fn a_primary_whose_map_skipped_an_interval_peers_again_when_a_member_lost_its_activation() {
    // Decision 0080: the primary sees nothing to peer for, and its pull of the replica's copy
    // is refused until the replica is activated: the primary peers again on that refusal, and
    // the read is answered. Undone (`ignore_lost_activation`), the primary retries the pull for
    // ever and the read never gets an answer. The primary's own check of the epoch the interval
    // began at (decision 0091) would peer again before the read: it is undone here, so that this
    // test shows the members' refusals alone suffice.
    for undone in [false, true] {
        let mutations = shoal_osd::core::Mutations {
            ignore_lost_activation: undone,
            ignore_interval_since: true,
            ..Default::default()
        };
        assert_eq!(read_after_a_skipped_interval(mutations), !undone, "undone: {undone}");
    }
}

#[test]
fn a_primary_whose_map_skipped_an_interval_sees_it_began_later_and_peers_again() {
    // Decision 0091: the primary sees on the last map that the interval began later than the
    // one it activated (`ClusterMap::pg_interval_since`) and peers again, before any request
    // needs the replica; with the members' refusals (decision 0080) undone, the read is
    // answered all the same. Undone too (`ignore_interval_since`), the read waits for ever.
    for undone in [false, true] {
        let mutations = shoal_osd::core::Mutations {
            ignore_lost_activation: true,
            ignore_interval_since: undone,
            ..Default::default()
        };
        assert_eq!(read_after_a_skipped_interval(mutations), !undone, "undone: {undone}");
    }
}

#[test]
fn a_blocklisted_client_is_refused_everything_even_requests_queued_before_the_fence() {
    let mut net = Net::new();
    net.append(1, b"abc").result.expect("first append");
    let primary = net.acting()[0].0;
    // A request of client 7 that waits on the primary for a map newer than its own: it is
    // served only once that map arrives, and that map fences client 7.
    let mut early = client_op(&net.map, 2, vec![ObjOp::Append { len_bytes: 3 }]);
    early.epoch = net.map.epoch + 1;
    let queued = net.submit(primary, early, b"def", 0);
    assert!(!net.replies.contains_key(&queued), "served before the map it waits for");
    net.change(Command::Blocklist { client: 7, until_unix_ms: u64::MAX, now_unix_ms: 0 });
    let refused = net.replies.remove(&queued).expect("answered once the map arrived").result.expect_err("fenced");
    assert_eq!(refused.code, ErrorCode::Blocklisted, "{refused}");
    assert!(
        refused.message.contains("0000000000000007") && refused.message.contains("nothing was applied"),
        "{refused}"
    );
    // New requests of any kind, with the client's old map or the new one, are refused too.
    let err = net.append(3, b"ghi").result.expect_err("a write of a fenced client");
    assert_eq!(err.code, ErrorCode::Blocklisted);
    let err = net.request(4, vec![ObjOp::Read { offset: 0, len_bytes: 3 }], b"").result.expect_err("a read");
    assert_eq!(err.code, ErrorCode::Blocklisted);
    for osd in net.acting() {
        assert_eq!(net.content(osd).as_deref(), Some(&b"abc"[..]), "{osd}");
    }
    // Another client instance is served as before, and client 7 once it is let back in.
    let mut other = client_op(&net.map, 5, vec![ObjOp::Append { len_bytes: 3 }]);
    other.reqid.client = 8;
    let id = net.submit(primary, other, b"jkl", 0);
    net.replies.remove(&id).expect("answered").result.expect("another client's write");
    net.change(Command::Unblocklist { client: 7 });
    net.append(6, b"mno").result.expect("let back in");
    for osd in net.acting() {
        assert_eq!(net.content(osd).as_deref(), Some(&b"abcjklmno"[..]), "{osd}");
    }
}

#[test]
fn a_primary_that_lacks_the_fence_serves_the_new_holders_requests_after_the_old_holders() {
    let mut net = Net::new();
    let (primary, replica) = (net.acting()[0].0, net.acting()[1].0);
    net.append(1, b"a").result.expect("the old holder (client 7) writes");
    let old_map = net.map.clone();
    // The fence reaches the replica, but not yet the primary (replicas do not check it).
    net.map.execute(&Command::Blocklist { client: 7, until_unix_ms: u64::MAX, now_unix_ms: 0 }).unwrap();
    let fenced = Arc::new(net.map.clone());
    net.run(VecDeque::from([(replica, Event::Map(fenced.clone()))]));
    // The new holder (client 8) writes with the fencing epoch: the primary holds it until it
    // has that map.
    let mut first_new = client_op(&net.map, 10, vec![ObjOp::Append { len_bytes: 1 }]);
    first_new.reqid.client = 8;
    let waiting = net.submit(primary, first_new, b"N", 0);
    assert!(!net.replies.contains_key(&waiting), "served before the primary had the fence");
    // The old holder's request, sent meanwhile, is applied by a primary that does not know the
    // fence yet, and its replica takes it: it is ordered before everything of the new holder.
    let late = net.submit(primary, client_op(&old_map, 2, vec![ObjOp::Append { len_bytes: 1 }]), b"o", 0);
    net.replies.remove(&late).expect("answered").result.expect("applied before the fence is known");
    // The fence reaches the primary: the new holder's request is served, after the old one,
    // and nothing of the old holder is served any more.
    net.run(VecDeque::from([(primary, Event::Map(fenced))]));
    net.replies.remove(&waiting).expect("answered with the fence").result.expect("the new holder's write");
    let refused = net.submit(primary, client_op(&old_map, 3, vec![ObjOp::Append { len_bytes: 1 }]), b"x", 0);
    let refused = net.replies.remove(&refused).expect("answered").result.expect_err("the old holder is fenced");
    assert_eq!(refused.code, ErrorCode::Blocklisted, "{refused}");
    for osd in net.acting() {
        assert_eq!(net.content(osd).as_deref(), Some(&b"aoN"[..]), "{osd}");
    }
}

/// Block checksums that arrive with a request's data are cut with it: each write of a request
/// with several is stored, on every member, with the checksums of its own blocks (a write that
/// starts off a block boundary in the data computes its own), so every copy reads back and is
/// clean under fsck.
#[test]
fn each_write_of_a_request_keeps_the_block_checksums_of_its_own_piece_of_the_data() {
    let mut net = Net::new();
    let block = shoal_util::SUM_BLOCK_BYTES;
    // Pieces at their data offsets: 8 KiB at 0, 12 KiB at 8 KiB, 16 KiB at 20 KiB (each on a
    // block boundary of the data, so each has checksums of its own), 100 bytes at 36 KiB (not
    // whole blocks), and 8 KiB at 36 KiB + 100 (off a block boundary: computed by the store).
    let pieces: [(u64, usize); 5] =
        [(0, 2 * block), (128 << 10, 3 * block), (256 << 10, 4 * block), (64 << 10, 100), (512 << 10, 2 * block)];
    let data: Vec<u8> =
        (0..pieces.iter().map(|p| p.1).sum::<usize>()).map(|i| (i * 7 % 251) as u8 ^ (i >> 12) as u8).collect();
    let ops = pieces.iter().map(|&(offset, len)| ObjOp::Write { offset, len_bytes: len as u64 }).collect();
    let reply = net.request(1, ops, &data);
    assert!(reply.result.is_ok(), "{reply:?}");
    let mut want = vec![0u8; (512 << 10) + 2 * block];
    let mut at = 0;
    for (offset, len) in pieces {
        want[offset as usize..offset as usize + len].copy_from_slice(&data[at..at + len]);
        at += len;
    }
    for osd in net.acting() {
        assert_eq!(object_state(&net, osd).0, want, "{osd}");
        let report = net.core(osd).store().fsck().unwrap();
        assert!(report.is_clean(), "{osd}: {report:?}");
    }
}
