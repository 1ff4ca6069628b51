//! Pipelined calls, pushes, error replies and connection loss.

mod common;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use common::*;
use shoal_net::{Connection, MSG_KEEPALIVE, NetError};
use tokio::task::JoinSet;

const LIMIT: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_calls_of_every_size_get_their_own_replies_out_of_order() {
    let server = TestServer::start().await;
    let mut cfg = server.client_config();
    cfg.max_in_flight = 16;
    let conn = Connection::connect(server.addr, &cfg).await.unwrap();
    assert_eq!(conn.server_entity(), SERVER);
    assert_eq!(conn.peer_addr(), &shoal_net::PeerAddr::Tcp(server.addr));

    let mut sizes =
        vec![0usize, 1, 2, 27, 28, 29, 4095, 4096, 4097, 65535, 65536, 65537, 1 << 20, (4 << 20) - 1, 4 << 20];
    sizes.extend((0..100).map(|i| (i * 7919) % 300_000 + 1));
    let mut calls = JoinSet::new();
    for (i, &len) in sizes.iter().enumerate() {
        let conn = conn.clone();
        calls.spawn(async move {
            let mut p = payload(len, i as u64);
            // The first byte is the server's delay in ms: later calls often finish first.
            let msg_type = if let Some(b) = p.first_mut() {
                *b = (i as u8).wrapping_mul(37) % 20;
                DELAYED_ECHO
            } else {
                ECHO
            };
            // Every other call sends its first half as shared data (written from where it is):
            // the server sees one payload either way.
            let reply = if i % 2 == 1 {
                let data = bytes::Bytes::copy_from_slice(&p[..len / 2]);
                conn.call_with_data(msg_type, data, p[len / 2..].to_vec()).await.unwrap()
            } else {
                conn.call(msg_type, p.clone()).await.unwrap()
            };
            assert_eq!(reply.msg_type, msg_type);
            assert!(reply.payload == p, "call {i} of {len} bytes got {} bytes back", reply.payload.len());
            i
        });
    }
    let mut order = Vec::new();
    tokio::time::timeout(LIMIT, async {
        while let Some(r) = calls.join_next().await {
            order.push(r.unwrap());
        }
    })
    .await
    .expect("all calls complete");
    assert_eq!(order.len(), sizes.len());
    assert!(order.windows(2).any(|w| w[0] > w[1]), "replies came back out of order");
    assert!(!conn.is_closed());
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn error_replies_and_keepalives_leave_the_connection_usable() {
    let server = TestServer::start().await;
    let conn = Connection::connect(server.addr, &server.client_config()).await.unwrap();
    match conn.call(FAIL, b"x".to_vec()).await {
        Err(NetError::Remote { reason }) => assert_eq!(reason, "no such object"),
        other => panic!("expected a remote error, got {other:?}"),
    }
    let pong = conn.call(MSG_KEEPALIVE, Vec::new()).await.unwrap();
    assert_eq!(pong.msg_type, MSG_KEEPALIVE);
    assert_eq!(conn.call(ECHO, b"still here".to_vec()).await.unwrap().payload, b"still here");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pushes_arrive_in_order_on_take_pushes() {
    let server = TestServer::start().await;
    let conn = Connection::connect(server.addr, &server.client_config()).await.unwrap();
    let mut pushes = conn.take_pushes().expect("first take");
    assert!(conn.take_pushes().is_none(), "pushes can be taken once");
    conn.call(PUSH_THEN_REPLY, vec![5]).await.unwrap();
    for i in 0..5u8 {
        let f = tokio::time::timeout(LIMIT, pushes.recv()).await.unwrap().unwrap();
        assert_eq!((f.msg_type, f.request_id, f.payload), (100, 0, vec![i]));
    }
    assert!(pushes.try_recv().is_err());
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pushes_before_take_are_buffered() {
    let server = TestServer::start().await;
    let conn = Connection::connect(server.addr, &server.client_config()).await.unwrap();
    conn.call(PUSH_THEN_REPLY, vec![3]).await.unwrap();
    let mut pushes = conn.take_pushes().unwrap();
    for i in 0..3u8 {
        assert_eq!(pushes.recv().await.unwrap().payload, vec![i]);
    }
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_shutdown_fails_calls_in_flight_with_closed() {
    let server = TestServer::start().await;
    let conn = Connection::connect(server.addr, &server.client_config()).await.unwrap();
    let mut calls = JoinSet::new();
    for _ in 0..8 {
        let conn = conn.clone();
        calls.spawn(async move { conn.call(NEVER_REPLY, vec![1, 2, 3]).await });
    }
    // Let the requests reach the server before it goes away.
    conn.call(ECHO, Vec::new()).await.unwrap();
    let handler = Arc::clone(&server.handler);
    server.stop().await;
    tokio::time::timeout(LIMIT, async {
        while let Some(r) = calls.join_next().await {
            assert!(matches!(r.unwrap(), Err(NetError::Closed)));
        }
    })
    .await
    .expect("in-flight calls fail instead of hanging");
    assert!(conn.is_closed());
    assert!(matches!(conn.call(ECHO, Vec::new()).await, Err(NetError::Closed)));
    assert_eq!(handler.closed.load(Ordering::SeqCst), 1, "on_close ran once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_the_client_closes_the_server_side() {
    let server = TestServer::start().await;
    let conn = Connection::connect(server.addr, &server.client_config()).await.unwrap();
    conn.call(ECHO, Vec::new()).await.unwrap();
    drop(conn);
    tokio::time::timeout(LIMIT, async {
        while server.handler.closed.load(Ordering::SeqCst) == 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("the server notices the client left");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abandoned_calls_do_not_break_the_connection() {
    let server = TestServer::start().await;
    let mut cfg = server.client_config();
    cfg.max_in_flight = 4;
    let conn = Connection::connect(server.addr, &cfg).await.unwrap();
    // Give up on slow calls; their late replies must be accepted quietly, not treated as replies
    // to unknown requests.
    for _ in 0..3 {
        let r = tokio::time::timeout(Duration::from_millis(5), conn.call(DELAYED_ECHO, vec![50])).await;
        assert!(r.is_err());
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    for _ in 0..10 {
        assert_eq!(conn.call(ECHO, vec![9]).await.unwrap().payload, vec![9]);
    }
    assert!(!conn.is_closed());
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_call_fails_locally_and_the_connection_survives() {
    let server = TestServer::start().await;
    let conn = Connection::connect(server.addr, &server.client_config()).await.unwrap();
    let huge = vec![0u8; shoal_proto::MAX_PAYLOAD_BYTES as usize + 1];
    assert!(matches!(conn.call(ECHO, huge).await, Err(NetError::Frame(shoal_proto::FrameError::TooLarge { .. }))));
    // The limit counts shared data and the rest of the payload together.
    let half = bytes::Bytes::from(vec![0u8; shoal_proto::MAX_PAYLOAD_BYTES as usize / 2 + 1]);
    let rest = vec![0u8; shoal_proto::MAX_PAYLOAD_BYTES as usize / 2 + 1];
    let refused = conn.call_with_data(ECHO, half, rest).await;
    assert!(matches!(refused, Err(NetError::Frame(shoal_proto::FrameError::TooLarge { .. }))), "{refused:?}");
    assert_eq!(conn.call(ECHO, vec![1]).await.unwrap().payload, vec![1]);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_started_in_order_leave_in_order() {
    let server = TestServer::start().await;
    let conn = Connection::connect(server.addr, &server.client_config()).await.unwrap();
    // The server handles one connection's frames in arrival order, and pushes before replying:
    // if the requests left in the order they were started, the pushes come out 0, 1, 2.
    let mut pushes = conn.take_pushes().unwrap();
    let a = conn.start_call(PUSH_THEN_REPLY, vec![1]).await.unwrap();
    let b = conn.start_call(PUSH_THEN_REPLY, vec![2]).await.unwrap();
    let (ra, rb) = tokio::join!(a, b);
    assert!(ra.is_ok() && rb.is_ok());
    let got: Vec<u8> = [pushes.recv().await.unwrap(), pushes.recv().await.unwrap(), pushes.recv().await.unwrap()]
        .iter()
        .map(|f| f.payload[0])
        .collect();
    assert_eq!(got, vec![0, 0, 1]);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_side_close_delivers_what_was_queued_then_fails_calls() {
    let server = TestServer::start().await;
    let conn = Connection::connect(server.addr, &server.client_config()).await.unwrap();
    let mut pushes = conn.take_pushes().unwrap();
    let result = tokio::time::timeout(LIMIT, conn.call(PUSH_THEN_CLOSE, Vec::new())).await.unwrap();
    assert!(matches!(result, Err(NetError::Closed)), "{result:?}");
    let pushed = tokio::time::timeout(LIMIT, pushes.recv()).await.unwrap().expect("the queued push arrives");
    assert_eq!(pushed.payload, vec![7]);
    assert!(conn.is_closed());
    // The server still serves others.
    let other = Connection::connect(server.addr, &server.client_config()).await.unwrap();
    assert_eq!(other.call(ECHO, vec![1, 2]).await.unwrap().payload, vec![1, 2]);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replies_handed_to_a_function_arrive_once_each_and_a_close_fails_the_rest() {
    let server = TestServer::start().await;
    let conn = Connection::connect(server.addr, &server.client_config()).await.unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    // Ten echoes answered, then two calls the server never answers.
    for i in 0..12u64 {
        let tx = tx.clone();
        let msg_type = if i < 10 { ECHO } else { NEVER_REPLY };
        // Half of each request's payload goes as shared data, sent by reference: the server sees
        // one payload, the two halves in order.
        let mut tail = payload(100, i);
        let data = bytes::Bytes::from(tail.drain(..(i as usize * 7) % 100).collect::<Vec<u8>>());
        conn.start_call_then(msg_type, data, None, tail, move |r| {
            tx.send((i, r.map(|f| f.payload))).unwrap();
        })
        .await
        .unwrap();
    }
    drop(tx);
    let mut answered = Vec::new();
    tokio::time::timeout(LIMIT, async {
        while answered.len() < 10 {
            let (i, r) = rx.recv().await.expect("a reply");
            assert_eq!(r.expect("an echo"), payload(100, i), "reply {i} carries its own payload");
            answered.push(i);
        }
    })
    .await
    .expect("echoes arrive");
    answered.sort_unstable();
    assert_eq!(answered, (0..10).collect::<Vec<_>>());
    // Stopping the server closes the connection: the unanswered calls get `Closed`, once each.
    server.stop().await;
    let mut failed = Vec::new();
    tokio::time::timeout(LIMIT, async {
        while let Some((i, r)) = rx.recv().await {
            assert!(matches!(r, Err(NetError::Closed)), "call {i}: {r:?}");
            failed.push(i);
        }
    })
    .await
    .expect("every function was called and dropped");
    failed.sort_unstable();
    assert_eq!(failed, vec![10, 11]);
    drop(conn);
}
