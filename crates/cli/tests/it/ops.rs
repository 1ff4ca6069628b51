//! Every object operation through a real cluster (three monitors, four OSDs in RAM, a size-3
//! pool), a resent write applied once, writes that continue while an OSD is marked out, and
//! objects over the pool's size limit refused; `shoal osd map` agrees with the client.

use std::net::SocketAddr;

use crate::common;

use common::{Down, fails_with, ok, shoal};
use shoal_client::{Client, ClientError, ClusterConfig};
use shoal_net::{ClientConfig, Connection};
use shoal_proto::osd::{ObjOp, OpOutput, OsdOp, OsdOpReply, ReqId};
use shoal_proto::{ErrorCode, Message, decode, encode};

async fn op(
    client: &Client,
    name: &str,
    ops: Vec<ObjOp>,
    data: Vec<u8>,
) -> Result<(Vec<OpOutput>, Vec<u8>), ClientError> {
    client.op("rep", name, ops, data).await.map(|r| (r.outputs, r.data))
}

/// Requests whose answers would not fit one message (their values travel in its header) are
/// refused by name — a write among them before anything is applied — and the OSD serves on.
async fn answers_over_a_message_are_refused_and_the_osd_stays_up(client: &Client) {
    let value = vec![9u8; 60 << 10];
    let keys: Vec<Vec<u8>> = (0..20u8).map(|i| vec![b'w', i]).collect();
    for k in &keys {
        let ops = vec![ObjOp::OmapSet { entries: vec![(k.clone(), value.clone())] }];
        op(client, "wide", ops, vec![]).await.expect("one wide value");
    }
    let too_big = |e: ClientError| {
        assert_eq!(e.code(), Some(ErrorCode::Invalid), "{e}");
        assert!(e.to_string().contains("answer"), "{e}");
    };
    too_big(op(client, "wide", vec![ObjOp::OmapList { after: None, max: 100 }], vec![]).await.unwrap_err());
    too_big(op(client, "wide", vec![ObjOp::OmapGet { keys: keys.clone() }], vec![]).await.unwrap_err());
    let read_and_write = vec![
        ObjOp::OmapGet { keys: keys.clone() },
        ObjOp::OmapSet { entries: vec![(b"after".to_vec(), b"x".to_vec())] },
    ];
    too_big(op(client, "wide", read_and_write, vec![]).await.unwrap_err());
    let (out, _) =
        op(client, "wide", vec![ObjOp::OmapGet { keys: vec![b"after".to_vec()] }], vec![]).await.expect("alive");
    assert_eq!(out, vec![OpOutput::Omap(vec![(b"after".to_vec(), None)])], "the refused write changed nothing");
    let (out, _) = op(client, "wide", vec![ObjOp::OmapList { after: None, max: 10 }], vec![]).await.expect("page");
    assert!(matches!(&out[0], OpOutput::OmapList(page) if page.len() == 10), "a page that fits is answered");
}

/// A request of more bytes than one message carries (its data and operations together) is
/// refused by size at once; it used to be refused by the sender at every attempt until the
/// operation timed out. One just under the bound is written on every member of a size-3 pool
/// (the replicas' copies of it carry a few fields more).
async fn requests_over_a_message_are_refused_by_size(client: &Client) {
    let data = vec![7u8; 64 << 20];
    let ops = |xattr_bytes: usize| {
        vec![
            ObjOp::SetXattr { name: "x".into(), value: vec![1; xattr_bytes] },
            ObjOp::WriteFull { len_bytes: data.len() as u64 },
        ]
    };
    let started = std::time::Instant::now();
    let e = client.op("big", "o", ops(70_000), data.clone()).await.unwrap_err();
    assert!(matches!(e, ClientError::MessageTooLarge { .. }), "{e}");
    assert!(e.to_string().contains("one message carries"), "{e}");
    assert!(started.elapsed() < std::time::Duration::from_secs(5), "refused at once");
    let fits = ops(60_000);
    assert!(
        shoal_client::objecter::ops_header_bytes("o", &fits) as u64 + data.len() as u64
            <= shoal_client::objecter::REQUEST_MAX_BYTES
    );
    client.op("big", "o", fits, data.clone()).await.expect("a request just under the bound");
    let r = client.op("big", "o", vec![ObjOp::Read { offset: 0, len_bytes: u64::MAX }], vec![]).await.expect("read");
    assert!(r.data == data, "the large write reads back");
}

/// Polls `f` once: its answer if it already has one.
async fn poll_once<F: std::future::Future + Unpin>(f: &mut F) -> Option<F::Output> {
    tokio::select! {
        biased;
        out = f => Some(out),
        () = std::future::ready(()) => None,
    }
}

/// Many small requests on one object at once through `Client::op_combined`: they share trips
/// (decision 0042), yet each gets exactly its own answer — its guard judged alone, its reads as
/// it would have seen them — and requests on the same key are never combined.
async fn combined_requests_each_get_their_own_answer(client: &Client) {
    const N: usize = 160;
    let key = |what: &str, i: usize| format!("{what}/{i:03}").into_bytes();
    // Every fourth request of the second half finds its key taken (its guard fails); every
    // request reads a value set before.
    let mut before = Vec::new();
    for i in 0..N {
        before.push((key("seen", i), format!("s{i}").into_bytes()));
        if i >= N / 2 && i % 4 == 0 {
            before.push((key("taken", i), b"earlier".to_vec()));
        }
    }
    client.op("rep", "idx", vec![ObjOp::OmapSet { entries: before }], Vec::new()).await.expect("set up");
    // Every request waits behind the one on its way, however briefly it has been out.
    client.set_combine_after(std::time::Duration::ZERO);
    let stats_before = client.combine_stats();
    let request = |i: usize| {
        let client = client.clone();
        let ops = vec![
            ObjOp::AssertOmap { key: key("taken", i), value: None },
            ObjOp::OmapGet { keys: vec![key("seen", i)] },
            ObjOp::OmapSet { entries: vec![(key("taken", i), format!("by {i}").into_bytes())] },
        ];
        tokio::spawn(async move { client.op_combined("rep", "idx", ops).await })
    };
    // The first half only finds free keys (combined requests succeed whole); in the second
    // every fourth key is taken (combined requests are refused and sent again alone).
    let mut tasks: Vec<_> = (0..N / 2).map(request).collect();
    for t in tasks.drain(..) {
        t.await.expect("task").expect("free key");
    }
    let first_half = client.combine_stats();
    assert!(first_half.combined_requests >= stats_before.combined_requests + 2, "nothing was combined: {first_half:?}");
    assert_eq!(first_half.combined_refused, stats_before.combined_refused, "{first_half:?}");
    let tasks: Vec<_> = (N / 2..N).map(request).collect();
    for (i, t) in (N / 2..N).zip(tasks) {
        match t.await.expect("task") {
            Ok(r) if i % 4 != 0 => {
                assert_eq!(r.outputs.len(), 3, "request {i}: {:?}", r.outputs);
                let want = OpOutput::Omap(vec![(key("seen", i), Some(format!("s{i}").into_bytes()))]);
                assert_eq!(r.outputs[1], want, "request {i} read its own key");
            }
            Ok(r) => panic!("request {i} passed a guard that cannot hold: {:?}", r.outputs),
            Err(e) if i % 4 == 0 => assert_eq!(e.code(), Some(ErrorCode::Conflict), "request {i}: {e}"),
            Err(e) => panic!("request {i} failed: {e}"),
        }
    }
    // Eight requests race for one lock key while a slow request holds the object: they all wait
    // for the same round, but touch the same key, so they are never in one request, and exactly
    // one takes the lock.
    let slow_ops = {
        let entries = (0..100u32).map(|i| (format!("bulk/{i:05}").into_bytes(), vec![7u8; 1024])).collect();
        vec![ObjOp::OmapSet { entries }]
    };
    // Each request is polled once in turn, which queues it: the first leads a round at once, the
    // lockers wait behind it for the next.
    let mut slow = Box::pin(client.op_combined("rep", "idx", slow_ops));
    let mut slow_done = poll_once(&mut slow).await;
    let mut lockers = Vec::new();
    for j in 0..8u8 {
        let ops = vec![
            ObjOp::AssertOmap { key: b"lock".to_vec(), value: None },
            ObjOp::OmapSet { entries: vec![(b"lock".to_vec(), vec![j])] },
        ];
        let mut f = Box::pin(client.op_combined("rep", "idx", ops));
        let done = poll_once(&mut f).await;
        lockers.push((j, f, done));
    }
    if slow_done.is_none() {
        slow_done = Some(slow.await);
    }
    slow_done.expect("answered").expect("slow request");
    let mut winners = Vec::new();
    for (j, f, done) in lockers {
        let answer = match done {
            Some(a) => a,
            None => f.await,
        };
        match answer {
            Ok(_) => winners.push(j),
            Err(e) => assert_eq!(e.code(), Some(ErrorCode::Conflict), "{e}"),
        }
    }
    assert_eq!(winners.len(), 1, "one locker wins: {winners:?}");
    // A request whose operations do not fit one message is refused by name, alone or combined.
    let huge = vec![ObjOp::OmapSet { entries: vec![(b"huge".to_vec(), vec![0u8; 2 << 20])] }];
    for e in [
        client.op("rep", "idx", huge.clone(), Vec::new()).await.unwrap_err(),
        client.op_combined("rep", "idx", huge).await.unwrap_err(),
    ] {
        assert!(matches!(e, ClientError::RequestTooLarge { .. }), "{e}");
    }
    let stats = client.combine_stats();
    // Guards that failed inside a combined request sent its requests alone.
    assert!(stats.combined_refused > stats_before.combined_refused, "{stats:?}");
    // The object holds exactly what the answers said.
    let (out, _) = op(client, "idx", vec![ObjOp::OmapList { after: None, max: 10_000 }], vec![]).await.expect("list");
    let Some(OpOutput::OmapList(entries)) = out.into_iter().next() else { panic!("omap list answered otherwise") };
    let entries: std::collections::BTreeMap<Vec<u8>, Vec<u8>> = entries.into_iter().collect();
    for i in 0..N {
        let want = if i >= N / 2 && i % 4 == 0 { b"earlier".to_vec() } else { format!("by {i}").into_bytes() };
        assert_eq!(entries.get(&key("taken", i)), Some(&want), "taken/{i}");
    }
    assert_eq!(entries.get(b"lock".as_slice()), Some(&vec![winners[0]]));
}

#[test]
fn all_operations_on_a_replicated_pool() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("c");
    let d = dir.display().to_string();
    ok(&shoal(tmp.path(), &["up", "--dir", &d, "--osds", "4", "--mons", "3", "--backend", "mem", "--osd-size", "1G"]));
    let _down = Down(dir.clone());
    ok(&shoal(&dir, &["pool", "create", "rep", "--size", "3", "--pg-num", "16", "--max-object-size", "1M"]));
    ok(&shoal(&dir, &["pool", "create", "big", "--size", "3", "--pg-num", "1"]));
    let pools = ok(&shoal(&dir, &["pool", "ls", "--json"]));
    assert!(pools.contains("\"rep\"") && pools.contains("\"data\""), "{pools}");
    // OSDs do not split PGs: a new pg_num would hide the pool's objects, so it is refused.
    fails_with(&shoal(&dir, &["pool", "set", "rep", "pg_num", "32"]), "splitting");
    let pools = ok(&shoal(&dir, &["pool", "ls", "--json"]));
    assert!(pools.contains("\"pg_num\":16"), "{pools}");

    let cfg = ClusterConfig::from_conf_file(&dir.join("shoal.toml"), "client.admin").expect("conf");
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("rt");
    rt.block_on(async {
        let client = Client::connect(cfg.clone()).await.expect("connect");
        // Create, write at offsets, append, truncate, read ranges, stat.
        op(&client, "o", vec![ObjOp::Create { exclusive: true }], vec![]).await.expect("create");
        let e = op(&client, "o", vec![ObjOp::Create { exclusive: true }], vec![]).await.unwrap_err();
        assert_eq!(e.code(), Some(ErrorCode::Exists), "{e}");
        op(&client, "o", vec![ObjOp::Write { offset: 4, len_bytes: 3 }], b"abc".to_vec()).await.expect("write");
        op(&client, "o", vec![ObjOp::Append { len_bytes: 2 }, ObjOp::Append { len_bytes: 1 }], b"xyz".to_vec())
            .await
            .expect("append");
        let (_, data) =
            op(&client, "o", vec![ObjOp::Read { offset: 0, len_bytes: u64::MAX }], vec![]).await.expect("read");
        assert_eq!(data, b"\0\0\0\0abcxyz");
        let (out, data) = op(
            &client,
            "o",
            vec![ObjOp::Read { offset: 4, len_bytes: 2 }, ObjOp::Read { offset: 8, len_bytes: 100 }, ObjOp::Stat],
            vec![],
        )
        .await
        .expect("ranges");
        assert_eq!(data, b"abyz");
        assert!(matches!(out[2], OpOutput::Stat { size_bytes: 10, .. }), "{out:?}");
        op(&client, "o", vec![ObjOp::Truncate { size_bytes: 5 }], vec![]).await.expect("truncate");
        // A request with an expiry: applied while it lasts; once it has passed, never sent, and
        // the object stays as it was.
        let soon = std::time::Instant::now() + std::time::Duration::from_secs(60);
        let parts = vec![bytes::Bytes::from_static(b"e")];
        let append = || vec![ObjOp::Append { len_bytes: 1 }];
        client.op_parts_before("rep", "expiring", append(), parts.clone(), Some(soon)).await.expect("within expiry");
        let past = std::time::Instant::now();
        let e = client.op_parts_before("rep", "expiring", append(), parts, Some(past)).await.unwrap_err();
        assert!(matches!(e, ClientError::Expired), "{e}");
        let (_, data) =
            op(&client, "expiring", vec![ObjOp::Read { offset: 0, len_bytes: 10 }], vec![]).await.expect("read");
        assert_eq!(data, b"e", "the expired append was not applied");
        let (_, data) =
            op(&client, "o", vec![ObjOp::Read { offset: 0, len_bytes: u64::MAX }], vec![]).await.expect("read");
        assert_eq!(data, b"\0\0\0\0a");
        // Zero: inside the object it writes zeros, reaching its end it truncates, past the end
        // or on a missing object it does nothing (and creates nothing); replicas agree.
        op(&client, "z", vec![ObjOp::WriteFull { len_bytes: 8 }], b"abcdefgh".to_vec()).await.expect("write z");
        op(&client, "z", vec![ObjOp::Zero { offset: 2, len_bytes: 3 }], vec![]).await.expect("zero inside");
        let read_z = || op(&client, "z", vec![ObjOp::Read { offset: 0, len_bytes: u64::MAX }], vec![]);
        assert_eq!(read_z().await.expect("read z").1, b"ab\0\0\0fgh");
        op(&client, "z", vec![ObjOp::Zero { offset: 6, len_bytes: 100 }], vec![]).await.expect("zero to the end");
        assert_eq!(read_z().await.expect("read z").1, b"ab\0\0\0f");
        op(&client, "z", vec![ObjOp::Zero { offset: 50, len_bytes: 10 }], vec![]).await.expect("zero past the end");
        assert_eq!(read_z().await.expect("read z").1, b"ab\0\0\0f");
        op(&client, "no-z", vec![ObjOp::Zero { offset: 0, len_bytes: 10 }], vec![]).await.expect("zero missing");
        let e = op(&client, "no-z", vec![ObjOp::Stat], vec![]).await.unwrap_err();
        assert!(e.is_not_found(), "{e}");
        // Xattrs and omap.
        let set = vec![
            ObjOp::SetXattr { name: "user.a".into(), value: b"1".to_vec() },
            ObjOp::SetXattr { name: "user.b".into(), value: b"2".to_vec() },
            ObjOp::OmapSet { entries: vec![(b"k1".to_vec(), b"v1".to_vec()), (b"k2".to_vec(), b"v2".to_vec())] },
        ];
        op(&client, "o", set, vec![]).await.expect("set attrs");
        op(
            &client,
            "o",
            vec![ObjOp::RemoveXattr { name: "user.a".into() }, ObjOp::OmapRemove { keys: vec![b"k1".to_vec()] }],
            vec![],
        )
        .await
        .expect("remove attrs");
        let (out, _) = op(
            &client,
            "o",
            vec![
                ObjOp::GetXattr { name: "user.b".into() },
                ObjOp::ListXattrs,
                ObjOp::OmapGet { keys: vec![b"k1".to_vec(), b"k2".to_vec()] },
                ObjOp::OmapList { after: None, max: 10 },
            ],
            vec![],
        )
        .await
        .expect("get attrs");
        assert_eq!(out[0], OpOutput::Xattr(Some(b"2".to_vec())));
        assert_eq!(out[1], OpOutput::Xattrs(vec![("user.b".into(), b"2".to_vec())]));
        assert_eq!(out[2], OpOutput::Omap(vec![(b"k1".to_vec(), None), (b"k2".to_vec(), Some(b"v2".to_vec()))]));
        assert_eq!(out[3], OpOutput::OmapList(vec![(b"k2".to_vec(), b"v2".to_vec())]));
        // Mixed requests, missing objects and oversized objects get clear errors.
        let e = op(&client, "o", vec![ObjOp::Stat, ObjOp::Remove], vec![]).await.unwrap_err();
        assert_eq!(e.code(), Some(ErrorCode::Invalid), "{e}");
        let e = op(&client, "missing", vec![ObjOp::Stat], vec![]).await.unwrap_err();
        assert!(e.is_not_found() && e.to_string().contains("missing"), "{e}");
        let e = op(&client, "big", vec![ObjOp::WriteFull { len_bytes: 2 << 20 }], vec![7; 2 << 20]).await.unwrap_err();
        assert!(matches!(e, ClientError::TooLarge { .. }), "{e}");
        let e =
            op(&client, "o", vec![ObjOp::Write { offset: (1 << 20) - 1, len_bytes: 2 }], vec![1, 2]).await.unwrap_err();
        assert!(e.to_string().contains("limit"), "{e}");
        op(&client, "o", vec![ObjOp::Remove], vec![]).await.expect("remove");
        let e = op(&client, "o", vec![ObjOp::Remove], vec![]).await.unwrap_err();
        assert!(e.is_not_found(), "{e}");

        // A resent append (same request id, e.g. after a reconnect) is applied once.
        let map = client.mon().map();
        let pool = map.pool_by_name("rep").expect("pool").clone();
        let loc = map.locate(pool.id, "dedup").expect("locate");
        // `shoal osd map` names the same PG and acting set as the client computes.
        let shown: serde_json::Value =
            serde_json::from_str(&ok(&shoal(&dir, &["osd", "map", "rep", "dedup", "--json"]))).expect("json");
        assert_eq!(shown["pg"], loc.pg.to_string(), "{shown}");
        let acting: Vec<u32> = loc.osds.iter().map(|o| o.0).collect();
        assert_eq!(shown["acting"], serde_json::json!(acting), "{shown}");
        assert_eq!(shown["primary"], acting[0], "{shown}");
        common::fails_with(&shoal(&dir, &["osd", "map", "rep", ""]), "empty");
        common::fails_with(&shoal(&dir, &["osd", "map", "nope", "x"]), "nope");
        let primary: SocketAddr = map.osds[&loc.osds[0]].addr.expect("address");
        let net = ClientConfig::new("client.admin", shoal_net::Key(cfg.key.0));
        let reqid = ReqId { client: 0xfeed, tid: 1 };
        let msg = OsdOp {
            reqid,
            epoch: map.epoch,
            pool: pool.id,
            pg: loc.pg.seed,
            object: "dedup".into(),
            ops: vec![ObjOp::Append { len_bytes: 4 }],
            expires_in_ms: None,
            resend: false,
            frees_space: false,
        };
        for _ in 0..3 {
            // A new connection each time, as after a reconnect.
            let conn = Connection::connect(primary, &net).await.expect("connect osd");
            let reply = conn.call(OsdOp::TYPE, encode(&msg, b"once".to_vec())).await.expect("call");
            let (reply, _): (OsdOpReply, _) = decode(reply.payload).expect("decode");
            reply.result.expect("append");
        }
        let (_, data) =
            op(&client, "dedup", vec![ObjOp::Read { offset: 0, len_bytes: u64::MAX }], vec![]).await.expect("read");
        assert_eq!(data, b"once");
        // Well-formed frames carrying malformed messages get an error reply; the OSD carries on.
        let conn = Connection::connect(primary, &net).await.expect("connect osd");
        for payload in [vec![], vec![0xff; 3], vec![1, 2, 3, 4, 5, 6, 7, 8, 9, 1], encode(&"not an op", vec![9; 64])] {
            match conn.call(OsdOp::TYPE, payload).await {
                Err(shoal_net::NetError::Remote { reason }) => assert!(reason.contains("malformed"), "{reason}"),
                other => panic!("malformed OsdOp answered with {other:?}"),
            }
        }
        // Operations over a client's bound (the client library refuses them before sending) are
        // refused by the OSD too, by name, and it carries on.
        let wide = OsdOp {
            reqid: ReqId { client: 0xfeed, tid: 3 },
            ops: vec![ObjOp::OmapSet { entries: vec![(b"k".to_vec(), vec![0; 2 << 20])] }],
            ..msg.clone()
        };
        match conn.call(OsdOp::TYPE, encode(&wide, Vec::new())).await {
            Err(shoal_net::NetError::Remote { reason }) => assert!(reason.contains("exceeds the limit"), "{reason}"),
            other => panic!("an oversized OsdOp answered with {other:?}"),
        }
        match conn.call(999, vec![1, 2, 3]).await {
            Err(shoal_net::NetError::Remote { reason }) => assert!(reason.contains("999"), "{reason}"),
            other => panic!("unknown message type answered with {other:?}"),
        }
        // A request for the wrong PG is refused, not misplaced.
        let conn = Connection::connect(primary, &net).await.expect("connect osd");
        let wrong = OsdOp { pg: (loc.pg.seed + 1) % pool.pg_num, reqid: ReqId { client: 0xfeed, tid: 2 }, ..msg };
        let reply = conn.call(OsdOp::TYPE, encode(&wrong, b"nope".to_vec())).await.expect("call");
        let (reply, _): (OsdOpReply, _) = decode(reply.payload).expect("decode");
        assert_eq!(reply.result.unwrap_err().code, ErrorCode::WrongPrimary);

        combined_requests_each_get_their_own_answer(&client).await;
        answers_over_a_message_are_refused_and_the_osd_stays_up(&client).await;
        requests_over_a_message_are_refused_by_size(&client).await;

        // Writes keep succeeding while an OSD is marked out (clients follow the new map).
        let writer = {
            let client = client.clone();
            tokio::spawn(async move {
                for i in 0..300u32 {
                    let data = i.to_le_bytes().repeat(64);
                    op(&client, &format!("w{i}"), vec![ObjOp::WriteFull { len_bytes: 256 }], data)
                        .await
                        .expect("write during out");
                }
            })
        };
        tokio::time::sleep(std::time::Duration::from_millis(30)).await;
        let epoch = client.mon().command(shoal_map::Command::OsdOut { id: shoal_map::OsdId(1) }).await.expect("out");
        writer.await.expect("writer");
        let map = client.mon().wait_for_epoch(epoch, 5_000).await.expect("map");
        assert!(!map.osds[&shoal_map::OsdId(1)].in_cluster);
        // Objects written after the change are on their new acting sets; read the last ones.
        for i in 250..300u32 {
            let (_, data) = op(&client, &format!("w{i}"), vec![ObjOp::Read { offset: 0, len_bytes: u64::MAX }], vec![])
                .await
                .expect("read back");
            assert_eq!(data, i.to_le_bytes().repeat(64));
        }
    });
    let status = ok(&shoal(&dir, &["status", "--json"]));
    let status: serde_json::Value = serde_json::from_str(&status).expect("json");
    assert_eq!(status["mons"]["count"], 3, "{status}");
    assert_eq!(status["osds"]["in"], 3, "{status}");
    ok(&shoal(&dir, &["osd", "in", "1"]));
    common::wait_clean(&dir, 4, std::time::Duration::from_secs(60));

    // The "wide" object (over a MiB of omap, more than a client's message carries and more than
    // the 1 MiB backfill chunk) moves when its primary goes out: the new member gets it in parts
    // (decision 0044), and no OSD fails sending it.
    rt.block_on(async {
        let client = Client::connect(cfg.clone()).await.expect("connect");
        let map = client.mon().map();
        let pool = map.pool_by_name("rep").expect("pool").id;
        let primary = map.locate(pool, "wide").expect("locate").osds[0];
        client.mon().command(shoal_map::Command::OsdOut { id: primary }).await.expect("out");
    });
    // Clean with all four OSDs up: none failed while moving the wide object.
    common::wait_clean(&dir, 4, std::time::Duration::from_secs(60));
    rt.block_on(async {
        let client = Client::connect(cfg.clone()).await.expect("connect");
        let mut after = None;
        let mut entries = 0;
        for _ in 0..100 {
            let (out, _) = op(&client, "wide", vec![ObjOp::OmapList { after: after.clone(), max: 8 }], vec![])
                .await
                .expect("list the moved object");
            let Some(OpOutput::OmapList(page)) = out.into_iter().next() else { panic!("no listing") };
            let Some((last, _)) = page.last() else { break };
            after = Some(last.clone());
            entries += page.iter().filter(|(k, v)| k[0] == b'w' && v.len() == 60 << 10).count();
        }
        assert_eq!(entries, 20, "the wide object arrived whole");
    });

    // Client keys kept by the monitors: a new client works at once on monitors and OSDs, sees
    // no keys in its map, may not change the map, and is refused once its key is removed.
    let line = ok(&shoal(&dir, &["auth", "add", "client.bob"]));
    std::fs::write(dir.join("bob.keyring"), &line).expect("write keyring");
    let conf = std::fs::read_to_string(dir.join("shoal.toml")).expect("conf");
    let bob_conf: String = conf
        .lines()
        .map(|l| if l.starts_with("keyring") { "keyring = \"bob.keyring\"" } else { l })
        .collect::<Vec<_>>()
        .join("\n");
    std::fs::write(dir.join("bob.toml"), bob_conf).expect("write conf");
    let bob = |args: &[&str]| {
        let mut all = vec!["--conf", "bob.toml", "--name", "client.bob"];
        all.extend_from_slice(args);
        let all: Vec<String> = all
            .iter()
            .map(|a| if *a == "bob.toml" { dir.join("bob.toml").display().to_string() } else { a.to_string() })
            .collect();
        let refs: Vec<&str> = all.iter().map(String::as_str).collect();
        shoal(&dir, &refs)
    };
    let big = dir.join("big-in");
    std::fs::write(&big, vec![1u8; 2 << 20]).expect("write");
    common::fails_with(
        &shoal(&dir, &["obj", "put", "--pool", "rep", "big", &big.display().to_string()]),
        "larger than pool rep's maximum object size",
    );
    let src = dir.join("bob-in");
    std::fs::write(&src, b"from bob").expect("write");
    ok(&bob(&["obj", "put", "--pool", "rep", "bobs", &src.display().to_string()]));
    assert_eq!(ok(&bob(&["obj", "get", "--pool", "rep", "bobs"])), "from bob");
    assert_eq!(ok(&bob(&["auth", "ls", "--json"])).trim(), "[]", "client.bob must not see keys");
    assert!(ok(&shoal(&dir, &["auth", "ls"])).contains("client.bob"));
    common::fails_with(&bob(&["pool", "create", "mine", "--size", "1"]), "permission denied");
    common::fails_with(&shoal(&dir, &["auth", "add", "mon.9"]), "client.NAME");
    ok(&shoal(&dir, &["auth", "rm", "client.bob"]));
    common::fails_with(&bob(&["obj", "get", "--pool", "rep", "bobs"]), "unknown entity client.bob");

    // An OSD joins the running cluster with a key added through the monitors, bound to a
    // wildcard address and announced with a reachable one.
    let line = ok(&shoal(&dir, &["auth", "add", "osd.4"]));
    let mut keyring = std::fs::read_to_string(dir.join("keyring")).expect("keyring");
    keyring.push_str(&line);
    std::fs::write(dir.join("keyring"), keyring).expect("write keyring");
    let conf = dir.join("shoal.toml").display().to_string();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_shoal"))
        .args(["osd", "run", "--conf", &conf, "--id", "4", "--host", "late", "--backend", "mem", "--size", "1G"])
        .args(["--addr", "0.0.0.0:0"])
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start osd.4");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let joined = loop {
        let tree: serde_json::Value =
            serde_json::from_str(&ok(&shoal(&dir, &["osd", "tree", "--json"]))).expect("json");
        let osd4 = tree["hosts"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|h| h["osds"].as_array().cloned().unwrap_or_default())
            .find(|o| o["id"] == 4);
        if let Some(o) = osd4.filter(|o| o["up"] == true) {
            break o;
        }
        assert!(std::time::Instant::now() < deadline, "osd.4 did not come up");
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    let addr = joined["addr"].as_str().expect("address");
    assert!(!addr.starts_with("0.0.0.0"), "announced {addr}");
    let _ = child.kill();
    let _ = child.wait();
}
