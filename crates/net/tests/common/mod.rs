//! A loopback server with an echo handler, shared by the messenger's tests.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use shoal_net::{ClientConfig, Frame, Handler, Key, Keyring, Listeners, ServerConfig, ServerConn, bind_local, serve};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// Echoes type 16 (same payload back); type 17 replies after a delay given by the first payload
/// byte in milliseconds, from a spawned task, so replies overtake each other; type 18 asks for
/// `payload[0]` pushes followed by the reply; type 19 never replies; type 20 replies with an
/// error frame; type 21 ([`ACK`]) replies with an empty payload.
pub struct Echo {
    pub closed: AtomicUsize,
}

pub const ECHO: u16 = 16;
pub const DELAYED_ECHO: u16 = 17;
pub const PUSH_THEN_REPLY: u16 = 18;
pub const NEVER_REPLY: u16 = 19;
pub const FAIL: u16 = 20;
/// Replies with an empty payload, like a write's acknowledgement.
pub const ACK: u16 = 21;
/// Pushes one frame, then closes the connection from the server's side.
pub const PUSH_THEN_CLOSE: u16 = 22;
/// Replies with the client's address as the server sees it, as text.
pub const WHO: u16 = 23;

impl Handler for Echo {
    async fn on_frame(&self, conn: &ServerConn, frame: Frame) {
        match frame.msg_type {
            ECHO => {
                let _ = conn.send(frame).await;
            }
            DELAYED_ECHO => {
                let conn = conn.clone();
                tokio::spawn(async move {
                    let ms = frame.payload.first().copied().unwrap_or(0);
                    tokio::time::sleep(Duration::from_millis(u64::from(ms))).await;
                    let _ = conn.send(frame).await;
                });
            }
            PUSH_THEN_REPLY => {
                let n = frame.payload.first().copied().unwrap_or(0);
                for i in 0..n {
                    let _ = conn.send(Frame::new(100, 0, vec![i])).await;
                }
                let _ = conn.send(Frame::new(PUSH_THEN_REPLY, frame.request_id, Vec::new())).await;
            }
            ACK => {
                let _ = conn.send(Frame::new(ACK, frame.request_id, Vec::new())).await;
            }
            FAIL => {
                let _ = conn.send(shoal_net::error_frame(frame.request_id, "no such object")).await;
            }
            WHO => {
                let who = conn.peer_addr().to_string().into_bytes();
                let _ = conn.send(Frame::new(WHO, frame.request_id, who)).await;
            }
            PUSH_THEN_CLOSE => {
                let _ = conn.send(Frame::new(100, 0, vec![7])).await;
                conn.close();
            }
            _ => {}
        }
    }

    fn on_close(&self, _conn: &ServerConn) {
        self.closed.fetch_add(1, Ordering::SeqCst);
    }
}

pub const CLIENT: &str = "client.admin";
pub const SERVER: &str = "osd.0";

pub struct TestServer {
    pub addr: SocketAddr,
    /// The local socket's name, when the server has one.
    pub local: Option<String>,
    pub client_key: Key,
    pub handler: Arc<Echo>,
    stop: Option<oneshot::Sender<()>>,
    pub task: Option<JoinHandle<Result<(), shoal_net::NetError>>>,
}

impl TestServer {
    pub async fn start() -> TestServer {
        Self::start_on(None).await
    }

    /// A server that also accepts on a local socket with a name unique to this call.
    pub async fn start_with_local() -> TestServer {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let name = format!("shoal-net-test/{}/{}", std::process::id(), NEXT.fetch_add(1, Ordering::SeqCst));
        Self::start_on(Some(name)).await
    }

    async fn start_on(local: Option<String>) -> TestServer {
        let client_key = Key::generate();
        let mut ring = Keyring::new();
        ring.insert(CLIENT, client_key.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let handler = Arc::new(Echo { closed: AtomicUsize::new(0) });
        let (stop, stopped) = oneshot::channel::<()>();
        let cfg = ServerConfig::new(Arc::new(ring), SERVER);
        let mut listeners = Listeners::tcp(listener);
        if let Some(name) = &local {
            listeners = listeners.with_local(bind_local(name).unwrap(), name);
        }
        let task = tokio::spawn(serve(listeners, cfg, handler.clone(), async move {
            let _ = stopped.await;
        }));
        TestServer { addr, local, client_key, handler, stop: Some(stop), task: Some(task) }
    }

    pub fn client_config(&self) -> ClientConfig {
        ClientConfig::new(CLIENT, self.client_key.clone())
    }

    /// Stops the server and waits for `serve` to return.
    pub async fn stop(mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.task.take() {
            tokio::time::timeout(Duration::from_secs(10), t)
                .await
                .expect("serve returns after shutdown")
                .unwrap()
                .unwrap();
        }
    }
}

/// Deterministic payload of `len` bytes that differs per `seed`.
pub fn payload(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

pub mod raw {
    //! Speaking the protocol by hand, to misbehave on purpose.

    use hmac::{Hmac, KeyInit, Mac};
    use sha2::Sha256;
    use shoal_net::{Frame, Key, MSG_AUTH, MSG_AUTH_OK, MSG_CHALLENGE};
    use shoal_proto::{FrameDecoder, HEADER_BYTES};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;

    pub fn mac(key: &Key, challenge: &[u8], entity: &str) -> Vec<u8> {
        let mut m = <Hmac<Sha256> as KeyInit>::new_from_slice(&key.0).unwrap();
        m.update(challenge);
        m.update(entity.as_bytes());
        m.finalize().into_bytes().to_vec()
    }

    /// Reads frames until one arrives; `None` at end of stream.
    pub async fn read_frame(s: &mut TcpStream, d: &mut FrameDecoder) -> Option<Frame> {
        loop {
            if let Some(f) = d.next_frame().expect("the peer sends valid frames") {
                return Some(f);
            }
            let mut buf = [0u8; 4096];
            let n = s.read(&mut buf).await.ok()?;
            if n == 0 {
                return None;
            }
            d.push(&buf[..n]);
        }
    }

    /// Connects and authenticates by hand; returns the socket ready for frames.
    pub async fn authenticated(addr: std::net::SocketAddr, entity: &str, key: &Key) -> (TcpStream, FrameDecoder) {
        let mut s = TcpStream::connect(addr).await.unwrap();
        let mut d = FrameDecoder::default();
        let ch = read_frame(&mut s, &mut d).await.unwrap();
        assert_eq!(ch.msg_type, MSG_CHALLENGE);
        let mut p = mac(key, &ch.payload[..32], entity);
        p.extend_from_slice(&[7u8; 32]);
        p.extend_from_slice(entity.as_bytes());
        s.write_all(&Frame::new(MSG_AUTH, 0, p).encode()).await.unwrap();
        let ok = read_frame(&mut s, &mut d).await.unwrap();
        assert_eq!(ok.msg_type, MSG_AUTH_OK);
        (s, d)
    }

    /// Reads until the peer closes, returning the frames it sent first. Bytes after a frame
    /// error are ignored.
    pub async fn until_closed(s: &mut TcpStream, d: &mut FrameDecoder) -> Vec<Frame> {
        let mut frames = Vec::new();
        let mut buf = vec![0u8; 1 << 16];
        loop {
            while let Ok(Some(f)) = d.next_frame() {
                frames.push(f);
            }
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => return frames,
                Ok(n) => d.push(&buf[..n]),
            }
        }
    }

    pub const HEADER: usize = HEADER_BYTES;
}
