//! The handshake: who gets in, who does not, and what they are told.

mod common;

use std::time::Duration;

use common::*;
use shoal_net::{ClientConfig, Connection, Frame, Key, MSG_AUTH_OK, MSG_CHALLENGE, NetError};
use shoal_proto::FrameDecoder;
use tokio::io::AsyncWriteExt;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_key_and_unknown_entity_are_refused_and_the_server_carries_on() {
    let server = TestServer::start().await;

    match Connection::connect(server.addr, &ClientConfig::new(CLIENT, Key::generate())).await {
        Err(NetError::AuthRefused { reason }) => assert_eq!(reason, "bad key for client.admin"),
        other => panic!("expected refusal, got {other:?}"),
    }
    match Connection::connect(server.addr, &ClientConfig::new("client.x", server.client_key.clone())).await {
        Err(NetError::AuthRefused { reason }) => assert_eq!(reason, "unknown entity client.x"),
        other => panic!("expected refusal, got {other:?}"),
    }

    let good = Connection::connect(server.addr, &server.client_config()).await.unwrap();
    assert_eq!(good.call(ECHO, b"hi".to_vec()).await.unwrap().payload, b"hi");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_does_not_know_the_key_is_not_trusted() {
    // An impostor accepts the connection and the client's proof, but cannot answer the
    // client's challenge.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let impostor = tokio::spawn(async move {
        let (mut s, _) = listener.accept().await.unwrap();
        let mut p = vec![1u8; 32];
        p.extend_from_slice(b"osd.evil");
        s.write_all(&Frame::new(MSG_CHALLENGE, 0, p).encode()).await.unwrap();
        let mut d = FrameDecoder::default();
        let _auth = raw::read_frame(&mut s, &mut d).await;
        s.write_all(&Frame::new(MSG_AUTH_OK, 0, vec![0u8; 32]).encode()).await.unwrap();
        let _ = raw::until_closed(&mut s, &mut d).await;
    });
    match Connection::connect(addr, &ClientConfig::new(CLIENT, Key::generate())).await {
        Err(NetError::AuthFailed { reason }) => assert!(reason.contains("osd.evil"), "{reason}"),
        other => panic!("expected the server to fail authentication, got {other:?}"),
    }
    impostor.await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_server_times_out() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let silent = tokio::spawn(async move {
        let (s, _) = listener.accept().await.unwrap();
        tokio::time::sleep(Duration::from_secs(2)).await;
        drop(s);
    });
    let mut cfg = ClientConfig::new(CLIENT, Key::generate());
    cfg.connect_timeout_ms = 200;
    let started = std::time::Instant::now();
    assert!(matches!(Connection::connect(addr, &cfg).await, Err(NetError::Timeout)));
    assert!(started.elapsed() < Duration::from_secs(2));
    silent.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_listening_is_an_io_error() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    assert!(matches!(
        Connection::connect(addr, &ClientConfig::new(CLIENT, Key::generate())).await,
        Err(NetError::Io(_))
    ));
}
