//! An OSD on a disk-backed store is killed with SIGKILL in the middle of a stream of pipelined
//! appends to one object, then the cluster is restarted on its data. Every acknowledged append
//! is there, in order, exactly once (what was applied is a prefix of what was sent); resending
//! every request with its original request id then applies none twice (the PG log, read back
//! from the store, recognises them) and the missing tail once; and offline, the PG log holds one
//! entry per append, in order, in a store that passes fsck, and `shoal osd pglog` shows it.

use crate::common;

use std::collections::VecDeque;
use std::net::SocketAddr;

use common::{Down, ok, shoal};
use shoal_client::{Client, ClusterConfig};
use shoal_net::{ClientConfig, Connection, PendingReply};
use shoal_proto::osd::{ObjOp, OsdOp, OsdOpReply, ReqId};
use shoal_proto::{Message, decode, encode};

const SENT: u64 = 300;
const KILL_AFTER_ACKS: u64 = 150;
const IN_FLIGHT: usize = 8;
const CLIENT_ID: u64 = 0x5eed;

fn piece(tid: u64) -> Vec<u8> {
    format!("[{tid:05}]").into_bytes()
}

fn pieces(tids: std::ops::RangeInclusive<u64>) -> Vec<u8> {
    tids.flat_map(piece).collect()
}

/// Where object `obj` of pool `data` lives now: the primary's address and the request template.
fn route(client: &Client, object: &str) -> (SocketAddr, OsdOp) {
    let map = client.mon().map();
    let pool = map.pool_by_name("data").expect("pool data");
    let loc = map.locate(pool.id, object).expect("locate");
    let primary = map.osds[&loc.osds[0]].addr.expect("primary address");
    let op = OsdOp {
        reqid: ReqId { client: CLIENT_ID, tid: 0 },
        epoch: map.epoch,
        pool: pool.id,
        pg: loc.pg.seed,
        object: object.into(),
        ops: vec![],
        expires_in_ms: None,
        resend: false,
        frees_space: false,
    };
    (primary, op)
}

/// Queues append `tid` on `conn` (requests on one connection reach the OSD in queueing order).
async fn start_append(conn: &Connection, template: &OsdOp, tid: u64) -> Option<PendingReply> {
    let data = piece(tid);
    let op = OsdOp {
        reqid: ReqId { client: CLIENT_ID, tid },
        ops: vec![ObjOp::Append { len_bytes: data.len() as u64 }],
        ..template.clone()
    };
    conn.start_call(OsdOp::TYPE, encode(&op, data)).await.ok()
}

async fn acked(reply: PendingReply) -> bool {
    match reply.await {
        Ok(frame) => decode::<OsdOpReply>(frame.payload).is_ok_and(|(r, _)| r.result.is_ok()),
        Err(_) => false,
    }
}

#[test]
fn appends_survive_sigkill_and_resends_apply_once() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("c");
    let d = dir.display().to_string();
    ok(&shoal(tmp.path(), &["up", "--dir", &d, "--osds", "1", "--backend", "block", "--osd-size", "256M"]));
    let _down = Down(dir.clone());
    let cfg = ClusterConfig::from_conf_file(&dir.join("shoal.toml"), "client.admin").expect("conf");
    let net = ClientConfig::new("client.admin", shoal_net::Key(cfg.key.0));
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("rt");

    // Pipelined appends; SIGKILL once KILL_AFTER_ACKS are acknowledged, with more in flight.
    let max_acked = rt.block_on(async {
        let client = Client::connect(cfg.clone()).await.expect("connect");
        let (primary, template) = route(&client, "journal");
        let conn = Connection::connect(primary, &net).await.expect("connect osd");
        let mut in_flight: VecDeque<(u64, PendingReply)> = VecDeque::new();
        let (mut next, mut max_acked, mut killed) = (1u64, 0u64, false);
        while next <= SENT || !in_flight.is_empty() {
            while next <= SENT && in_flight.len() < IN_FLIGHT && !killed {
                match start_append(&conn, &template, next).await {
                    Some(p) => in_flight.push_back((next, p)),
                    None => break,
                }
                next += 1;
            }
            let Some((tid, reply)) = in_flight.pop_front() else { break };
            if acked(reply).await {
                assert_eq!(tid, max_acked + 1, "acknowledged out of order");
                max_acked = tid;
            }
            if max_acked == KILL_AFTER_ACKS && !killed {
                common::sigkill(&dir, "osd.0");
                killed = true;
            }
            if killed && next <= SENT {
                next = SENT + 1; // nothing more is sent to the dead OSD
            }
        }
        assert!(killed, "the OSD was never killed");
        max_acked
    });
    assert!(max_acked >= KILL_AFTER_ACKS);

    // Restart the whole cluster on its data.
    ok(&shoal(&dir, &["down", "--dir", &d, "--keep"]));
    let again = ok(&shoal(tmp.path(), &["up", "--dir", &d]));
    assert!(again.contains("restarting"), "{again}");

    let pg = rt.block_on(async {
        let client = Client::connect(cfg.clone()).await.expect("reconnect");
        let read = || async {
            let op = vec![ObjOp::Read { offset: 0, len_bytes: u64::MAX }];
            client.op("data", "journal", op, vec![]).await.expect("read").data
        };
        // What survived is a prefix of what was sent, containing everything acknowledged.
        let survived = read().await;
        let applied = (survived.len() / piece(1).len()) as u64;
        assert!(applied >= max_acked, "acknowledged appends lost: {applied} applied, {max_acked} acknowledged");
        assert!(applied <= SENT);
        assert!(survived == pieces(1..=applied), "not a clean prefix of the appends sent");

        // Every request resent with its original id: the applied ones are recognised from the
        // PG log, the rest applied now, once each, in order.
        let (primary, template) = route(&client, "journal");
        let conn = Connection::connect(primary, &net).await.expect("connect restarted osd");
        let mut in_flight = VecDeque::new();
        for tid in 1..=SENT {
            let reply = start_append(&conn, &template, tid).await.expect("queue resend");
            in_flight.push_back((tid, reply));
            if in_flight.len() >= IN_FLIGHT
                && let Some((tid, reply)) = in_flight.pop_front()
            {
                assert!(acked(reply).await, "resend of {tid} refused");
            }
        }
        for (tid, reply) in in_flight {
            assert!(acked(reply).await, "resend of {tid} refused");
        }
        assert!(read().await == pieces(1..=SENT), "a resent append was applied twice or not at all");
        let map = client.mon().map();
        map.locate(template.pool, "journal").expect("locate").pg
    });

    // Offline: one PG log entry per append, in order, and a clean store.
    ok(&shoal(&dir, &["down", "--dir", &d, "--keep"]));
    let store = shoal_store::open(&dir.join("osd.0")).expect("open OSD store");
    let entries = shoal_osd::pglog::read_entries(&*store, pg).expect("read the PG log");
    let tids: Vec<u64> = entries.iter().filter(|e| e.object == "journal").map(|e| e.reqid.tid).collect();
    assert_eq!(tids, (1..=SENT).collect::<Vec<_>>(), "one log entry per append, in order");
    assert!(entries.windows(2).all(|w| w[0].version < w[1].version), "log versions grow");
    let report = store.fsck().expect("fsck");
    assert!(report.is_clean(), "{report:?}");
    drop(store);

    // The same log through the CLI, as an operator would read it.
    let shown: serde_json::Value = serde_json::from_str(&ok(&shoal(
        &dir,
        &["osd", "pglog", &dir.join("osd.0").display().to_string(), "--pg", &pg.to_string(), "--json"],
    )))
    .expect("pglog json");
    let shown_tids: Vec<u64> = shown["entries"]
        .as_array()
        .expect("entries")
        .iter()
        .filter(|e| e["object"] == "journal")
        .filter_map(|e| e["tid"].as_u64())
        .collect();
    assert_eq!(shown_tids, tids);
    let summary = ok(&shoal(&dir, &["osd", "pglog", &dir.join("osd.0").display().to_string()]));
    assert!(summary.contains(&pg.to_string()), "{summary}");
    common::fails_with(
        &shoal(&dir, &["osd", "pglog", &dir.join("osd.0").display().to_string(), "--pg", "1.zz"]),
        "not hex",
    );
}
