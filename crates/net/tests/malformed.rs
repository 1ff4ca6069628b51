//! Peers that break the protocol lose their own connection, and only it.

mod common;

use std::time::Duration;

use common::*;
use shoal_net::{Connection, Frame, MSG_AUTH_OK, MSG_CHALLENGE, MSG_ERROR, NetError};
use shoal_proto::frame::encode_header;
use shoal_proto::{FrameDecoder, MAX_PAYLOAD_BYTES};
use tokio::io::AsyncWriteExt;

const LIMIT: Duration = Duration::from_secs(20);

/// Sends `bytes` on an authenticated raw connection and returns the reason of the error frame
/// the server sent before closing.
async fn server_reason_for(server: &TestServer, bytes: &[u8]) -> String {
    let (mut s, mut d) = raw::authenticated(server.addr, CLIENT, &server.client_key).await;
    s.write_all(bytes).await.unwrap();
    let frames =
        tokio::time::timeout(LIMIT, raw::until_closed(&mut s, &mut d)).await.expect("the server closes the connection");
    let last = frames.last().expect("an error frame before closing");
    assert_eq!((last.msg_type, last.request_id), (MSG_ERROR, 0));
    String::from_utf8(last.payload.clone()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_frames_close_only_their_connection() {
    let server = TestServer::start().await;
    let bystander = Connection::connect(server.addr, &server.client_config()).await.unwrap();
    bystander.call(ECHO, b"before".to_vec()).await.unwrap();

    let reason = server_reason_for(&server, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").await;
    assert!(reason.contains("magic"), "{reason}");

    // A valid header (its checksum matches) announcing a payload over the limit.
    let huge = vec![0u8; MAX_PAYLOAD_BYTES as usize + 1];
    let reason = server_reason_for(&server, &encode_header(ECHO, 1, &huge)).await;
    assert!(reason.contains("exceeds the limit"), "{reason}");

    let mut bad_header = encode_header(ECHO, 1, b"hello").to_vec();
    bad_header[9] ^= 1;
    bad_header.extend_from_slice(b"hello");
    let reason = server_reason_for(&server, &bad_header).await;
    assert!(reason.contains("header checksum"), "{reason}");

    let mut bad_payload = encode_header(ECHO, 1, b"hello").to_vec();
    bad_payload.extend_from_slice(b"hellp");
    let reason = server_reason_for(&server, &bad_payload).await;
    assert!(reason.contains("payload checksum"), "{reason}");

    let reason = server_reason_for(&server, &Frame::new(MSG_AUTH_OK, 1, Vec::new()).encode()).await;
    assert!(reason.contains("unexpected message type 3"), "{reason}");

    // The well-behaved client never noticed, and new clients still get in.
    assert_eq!(bystander.call(ECHO, b"after".to_vec()).await.unwrap().payload, b"after");
    let late = Connection::connect(server.addr, &server.client_config()).await.unwrap();
    assert_eq!(late.call(ECHO, b"late".to_vec()).await.unwrap().payload, b"late");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_instead_of_a_handshake_is_refused_at_once() {
    let server = TestServer::start().await;
    let mut s = tokio::net::TcpStream::connect(server.addr).await.unwrap();
    s.write_all(b"\x00\x01garbage").await.unwrap();
    let mut d = FrameDecoder::default();
    let frames = tokio::time::timeout(Duration::from_secs(5), raw::until_closed(&mut s, &mut d))
        .await
        .expect("refused well before the handshake timeout");
    assert_eq!(frames.first().map(|f| f.msg_type), Some(MSG_CHALLENGE));
    let last = frames.last().unwrap();
    assert_eq!(last.msg_type, MSG_ERROR);
    assert!(String::from_utf8_lossy(&last.payload).contains("magic"));

    let good = Connection::connect(server.addr, &server.client_config()).await.unwrap();
    good.call(ECHO, Vec::new()).await.unwrap();
    server.stop().await;
}

/// A fake server that authenticates the client properly, then runs `then` on the socket.
async fn fake_server<F, Fut>(then: F) -> (std::net::SocketAddr, shoal_net::Key, tokio::task::JoinHandle<()>)
where
    F: FnOnce(tokio::net::TcpStream, FrameDecoder) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let key = shoal_net::Key::generate();
    let k = key.clone();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(async move {
        let (mut s, _) = listener.accept().await.unwrap();
        let mut p = vec![3u8; 32];
        p.extend_from_slice(SERVER.as_bytes());
        s.write_all(&Frame::new(MSG_CHALLENGE, 0, p).encode()).await.unwrap();
        let mut d = FrameDecoder::default();
        let auth = raw::read_frame(&mut s, &mut d).await.unwrap();
        let proof = raw::mac(&k, &auth.payload[32..64], SERVER);
        s.write_all(&Frame::new(MSG_AUTH_OK, 0, proof).encode()).await.unwrap();
        then(s, d).await;
    });
    (addr, key, task)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_connection_fails_calls_in_flight_with_closed() {
    let (addr, key, server) = fake_server(|mut s, mut d| async move {
        // Take two requests, then vanish without answering.
        let _ = raw::read_frame(&mut s, &mut d).await;
        let _ = raw::read_frame(&mut s, &mut d).await;
        drop(s);
    })
    .await;
    let conn = Connection::connect(addr, &shoal_net::ClientConfig::new(CLIENT, key)).await.unwrap();
    let (a, b) = tokio::time::timeout(LIMIT, async {
        tokio::join!(conn.call(ECHO, vec![1]), conn.call(ECHO, vec![2; 100_000]))
    })
    .await
    .expect("calls fail instead of hanging");
    assert!(matches!(a, Err(NetError::Closed)), "{a:?}");
    assert!(matches!(b, Err(NetError::Closed)), "{b:?}");
    assert!(conn.is_closed());
    server.await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_to_an_unknown_request_closes_the_client_connection() {
    let (addr, key, server) = fake_server(|mut s, mut d| async move {
        let req = raw::read_frame(&mut s, &mut d).await.unwrap();
        s.write_all(&Frame::new(ECHO, req.request_id + 1000, Vec::new()).encode()).await.unwrap();
        let frames = raw::until_closed(&mut s, &mut d).await;
        let last = frames.last().expect("the client says why it closes");
        assert_eq!(last.msg_type, MSG_ERROR);
        assert!(String::from_utf8_lossy(&last.payload).contains("unknown request"));
    })
    .await;
    let conn = Connection::connect(addr, &shoal_net::ClientConfig::new(CLIENT, key)).await.unwrap();
    let r = tokio::time::timeout(LIMIT, conn.call(ECHO, vec![1])).await.unwrap();
    assert!(matches!(r, Err(NetError::Closed)), "{r:?}");
    tokio::time::timeout(LIMIT, server).await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_frame_from_the_server_closes_the_client_connection() {
    let (addr, key, server) = fake_server(|mut s, mut d| async move {
        let _ = raw::read_frame(&mut s, &mut d).await.unwrap();
        s.write_all(b"SHF1 but not really a frame header").await.unwrap();
        let _ = raw::until_closed(&mut s, &mut d).await;
    })
    .await;
    let conn = Connection::connect(addr, &shoal_net::ClientConfig::new(CLIENT, key)).await.unwrap();
    let r = tokio::time::timeout(LIMIT, conn.call(ECHO, vec![1])).await.unwrap();
    assert!(matches!(r, Err(NetError::Closed)), "{r:?}");
    tokio::time::timeout(LIMIT, server).await.unwrap().unwrap();
}
