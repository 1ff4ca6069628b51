//! Connections over local sockets: same frames, same handshake, no TCP (decision 0027).

mod common;

use std::time::{Duration, Instant};

use common::*;
use shoal_net::{ClientConfig, Connection, Key, MAX_LOCAL_NAME_BYTES, NetError, PeerAddr, bind_local};
use tokio::task::JoinSet;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_over_a_local_socket_carry_every_size_and_the_server_sees_the_socket() {
    let server = TestServer::start_with_local().await;
    let name = server.local.clone().unwrap();
    let mut cfg = server.client_config();
    cfg.max_in_flight = 8;
    let conn = Connection::connect_local(&name, &cfg).await.unwrap();
    assert_eq!(conn.server_entity(), SERVER);
    assert_eq!(conn.peer_addr(), &PeerAddr::Local(name.clone()));
    let who = conn.call(WHO, Vec::new()).await.unwrap();
    assert_eq!(String::from_utf8(who.payload).unwrap(), format!("local:{name}"));

    // Sizes on both sides of the aligned reader's threshold, pipelined.
    let sizes = [0usize, 1, 4095, 4096, 65535, 65536, 65537, 1 << 20, 4 << 20];
    let mut calls = JoinSet::new();
    for (i, &len) in sizes.iter().enumerate() {
        let conn = conn.clone();
        calls.spawn(async move {
            let p = payload(len, i as u64);
            let reply = conn.call(ECHO, p.clone()).await.unwrap();
            assert_eq!(reply.payload.len() + reply.data.len(), len);
            let mut got = reply.data.to_vec();
            got.extend_from_slice(&reply.payload);
            assert!(got == p, "echo of {len} bytes differs");
        });
    }
    while let Some(r) = calls.join_next().await {
        r.unwrap();
    }
    // Bulk data sent by reference: the large parts are spliced into the local socket (decision
    // 0096), in pieces larger than its pipe, starting off a page boundary, between copied parts.
    let bulk = bytes::Bytes::from(payload(5 << 20, 99));
    for i in 0..8usize {
        let conn = conn.clone();
        let bulk = bulk.clone();
        calls.spawn(async move {
            let (data, parts) = match i % 3 {
                0 => (bulk.slice(i..(1 << 20) + 3 * i), Vec::new()),
                1 => (bulk.slice(..64 << 10), vec![bulk.slice(1..100), bulk.slice(4097..)]),
                _ => (bytes::Bytes::new(), vec![bulk.slice(..(64 << 10) - 1), bulk.slice(3..(2 << 20))]),
            };
            let trailer = vec![i as u8; 33];
            let mut want = data.to_vec();
            parts.iter().for_each(|p| want.extend_from_slice(p));
            want.extend_from_slice(&trailer);
            let reply = if parts.is_empty() {
                conn.call_with_data(ECHO, data, trailer).await.unwrap()
            } else {
                conn.call_with_parts(ECHO, std::iter::once(data).chain(parts).collect(), trailer).await.unwrap()
            };
            let mut got = reply.data.to_vec();
            got.extend_from_slice(&reply.payload);
            assert!(got == want, "echo of bulk data {i} differs");
        });
    }
    while let Some(r) = calls.join_next().await {
        r.unwrap();
    }
    // TCP still works beside it.
    let tcp = Connection::connect(server.addr, &server.client_config()).await.unwrap();
    let who = tcp.call(WHO, Vec::new()).await.unwrap();
    assert!(String::from_utf8(who.payload).unwrap().starts_with("127.0.0.1:"));
    drop((conn, tcp));
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_local_socket_authenticates_like_tcp() {
    let server = TestServer::start_with_local().await;
    let name = server.local.clone().unwrap();
    match Connection::connect_local(&name, &ClientConfig::new(CLIENT, Key::generate())).await {
        Err(NetError::AuthRefused { reason }) => assert!(reason.contains(CLIENT), "{reason}"),
        other => panic!("a wrong key must be refused, got {other:?}"),
    }
    match Connection::connect_local(&name, &ClientConfig::new("client.nobody", Key::generate())).await {
        Err(NetError::AuthRefused { reason }) => assert!(reason.contains("client.nobody"), "{reason}"),
        other => panic!("an unknown entity must be refused, got {other:?}"),
    }
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_nobody_holds_fails_at_once_and_a_held_name_cannot_be_bound_twice() {
    let cfg = ClientConfig::new(CLIENT, Key::generate());
    let started = Instant::now();
    let missing = format!("shoal-net-test/{}/nobody", std::process::id());
    assert!(matches!(Connection::connect_local(&missing, &cfg).await, Err(NetError::Io(_))));
    assert!(started.elapsed() < Duration::from_secs(2), "a refusal must not wait for the timeout");

    let server = TestServer::start_with_local().await;
    let name = server.local.clone().unwrap();
    let err = bind_local(&name).expect_err("a held name cannot be bound again");
    assert!(matches!(&err, NetError::Io(e) if e.kind() == std::io::ErrorKind::AddrInUse), "{err}");
    server.stop().await;
    // The name goes with the socket: nothing is left to clean up.
    drop(bind_local(&name).expect("the name is free once the server stopped"));
    assert!(matches!(Connection::connect_local(&name, &cfg).await, Err(NetError::Io(_))));
}

#[tokio::test]
async fn names_that_cannot_be_local_socket_names_are_refused_by_name() {
    let cfg = ClientConfig::new(CLIENT, Key::generate());
    for name in [String::new(), "a\0b".to_owned(), "x".repeat(MAX_LOCAL_NAME_BYTES + 1)] {
        match bind_local(&name) {
            Err(NetError::Io(e)) => assert!(e.to_string().contains("local socket name"), "{e}"),
            other => panic!("{name:?} must be refused, got {:?}", other.map(|_| ())),
        }
        assert!(matches!(Connection::connect_local(&name, &cfg).await, Err(NetError::Io(_))));
    }
    // The longest allowed name works.
    let longest = format!("{}-{}", std::process::id(), "y".repeat(MAX_LOCAL_NAME_BYTES));
    let longest = &longest[..MAX_LOCAL_NAME_BYTES];
    drop(bind_local(longest).unwrap());
}
