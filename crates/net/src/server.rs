//! The server end: accepting, authenticating and serving connections.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use shoal_proto::{Frame, HEADER_BYTES, MAX_PAYLOAD_BYTES};
use tokio::io::BufReader;
use tokio::net::{TcpStream, UnixListener, UnixStream};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;

use crate::stream::{Listeners, PeerAddr};
use crate::wire::{
    FIRST_USER_MSG_TYPE, HANDSHAKE_TIMEOUT, Link, MSG_KEEPALIVE, Payloads, READ_BUFFER, check_outgoing, error_frame,
    read_frame, writer_task,
};
use crate::{Keyring, NetError, auth};
use shoal_splice::SplitStream;

/// Why [`ServerConn::try_send`] did not queue a frame.
#[derive(Debug, thiserror::Error)]
pub enum TrySendError {
    /// The connection's queue is full; here is the frame back.
    #[error("the connection's send queue is full")]
    Full(Box<Frame>),
    /// The frame cannot be sent on this connection (closed, or a payload over the limit).
    #[error(transparent)]
    Failed(NetError),
}

/// Who a server is and whom it accepts.
#[derive(Clone, Debug)]
pub struct ServerConfig {
    /// The entities allowed to connect, with their keys.
    pub keyring: Arc<Keyring>,
    /// The server's own entity name ("osd.3", "mon.0"), sent to clients in the handshake.
    pub entity: String,
    /// Frames (replies and pushes) that may wait for the writer per connection; a handler that
    /// sends more waits in [`ServerConn::send`], which in turn stops the connection from reading
    /// further requests. Zero is treated as one.
    pub max_queued_replies: usize,
}

impl ServerConfig {
    /// A configuration with room for 128 queued replies per connection.
    #[must_use]
    pub fn new(keyring: Arc<Keyring>, entity: &str) -> Self {
        Self { keyring, entity: entity.to_owned(), max_queued_replies: 128 }
    }
}

/// What the server does with each authenticated frame.
pub trait Handler: Send + Sync + 'static {
    /// Called for each frame of one connection in arrival order. The next frame of that
    /// connection is not read until this future completes: this is what lets a handler order
    /// its effects; a handler that wants concurrency spawns (cloning the [`ServerConn`] to reply).
    ///
    /// The frame's type is [`FIRST_USER_MSG_TYPE`] or above (the messenger handles its own types).
    /// A reply carries the request's `request_id`; an error reply is [`crate::error_frame`].
    fn on_frame(&self, conn: &ServerConn, frame: Frame) -> impl Future<Output = ()> + Send;

    /// Called once when the connection has closed (for whatever reason), after the last
    /// `on_frame` returned. Frames sent to it afterwards fail with [`NetError::Closed`].
    fn on_close(&self, _conn: &ServerConn) {}
}

struct ConnInner {
    id: u64,
    peer_entity: String,
    peer_addr: PeerAddr,
    tx: mpsc::Sender<Frame>,
    link: Arc<Link>,
}

/// One authenticated connection as the server sees it. Clones share it; handlers may keep a
/// clone to push frames later. Holding a clone does not keep the connection open.
#[derive(Clone)]
pub struct ServerConn {
    inner: Arc<ConnInner>,
}

impl std::fmt::Debug for ServerConn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerConn")
            .field("id", &self.inner.id)
            .field("peer_entity", &self.inner.peer_entity)
            .field("peer_addr", &self.inner.peer_addr)
            .finish()
    }
}

impl ServerConn {
    /// A number unique among the connections of one [`serve`] call.
    #[must_use]
    pub fn id(&self) -> u64 {
        self.inner.id
    }

    /// The entity the client authenticated as.
    #[must_use]
    pub fn peer_entity(&self) -> &str {
        &self.inner.peer_entity
    }

    /// The client's TCP address, or the local socket it came in on.
    #[must_use]
    pub fn peer_addr(&self) -> &PeerAddr {
        &self.inner.peer_addr
    }

    /// Queues a frame for the client: a reply (request id = the request's) or a push (request
    /// id 0). Waits while the connection's queue is full. Fails with [`NetError::Closed`] once
    /// the connection has closed. Success means queued, not delivered. A payload over
    /// [`shoal_proto::MAX_PAYLOAD_BYTES`] fails with [`NetError::Frame`] and is not sent.
    pub async fn send(&self, frame: Frame) -> Result<(), NetError> {
        check_outgoing(&frame)?;
        if self.inner.link.is_closed() {
            return Err(NetError::Closed);
        }
        self.inner.tx.send(frame).await.map_err(|_| NetError::Closed)
    }

    /// Like [`ServerConn::send`] but does not wait: a full queue gives the frame back
    /// ([`TrySendError::Full`]), so a caller can send it later without having kept a copy.
    pub fn try_send(&self, frame: Frame) -> Result<(), TrySendError> {
        check_outgoing(&frame).map_err(TrySendError::Failed)?;
        if self.inner.link.is_closed() {
            return Err(TrySendError::Failed(NetError::Closed));
        }
        self.inner.tx.try_send(frame).map_err(|e| match e {
            mpsc::error::TrySendError::Full(frame) => TrySendError::Full(Box::new(frame)),
            mpsc::error::TrySendError::Closed(_) => TrySendError::Failed(NetError::Closed),
        })
    }

    #[must_use]
    pub fn is_closed(&self) -> bool {
        self.inner.link.is_closed() || self.inner.tx.is_closed()
    }

    /// Closes the connection from the server's side: frames already queued are still written,
    /// then the socket shuts down and the client's calls fail with [`NetError::Closed`]. For a
    /// peer that does not keep up with pushes: it notices, reconnects and resynchronises,
    /// instead of silently missing updates.
    pub fn close(&self) {
        self.inner.link.close();
    }
}

/// Accepts connections on `listeners` (a TCP listener, and a local socket if given) until
/// `shutdown` resolves, each connection in its own task.
///
/// Each connection first completes the handshake (bounded by [`crate::HANDSHAKE_TIMEOUT`]);
/// refused clients get an error frame naming the problem. A connection that sends a malformed
/// frame or a reserved message type gets an error frame and is closed; other connections are
/// unaffected.
///
/// On shutdown the listener is closed, every connection stops reading new requests, lets its
/// current `on_frame` finish, flushes its queued replies and closes; `serve` returns when all
/// have. It fails only if the listener itself stops working.
pub async fn serve<H: Handler>(
    listeners: impl Into<Listeners>,
    cfg: ServerConfig,
    handler: Arc<H>,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), NetError> {
    let cfg = Arc::new(cfg);
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut conns = JoinSet::new();
    let mut next_id: u64 = 1;
    let mut shutdown = std::pin::pin!(shutdown);
    let Listeners { tcp: listener, local } = listeners.into();
    let result = loop {
        let accepted = tokio::select! {
            biased;
            () = &mut shutdown => break Ok(()),
            // Reap finished connection tasks so the set does not grow with the server's age.
            Some(_) = conns.join_next(), if !conns.is_empty() => continue,
            accepted = listener.accept() => accepted.map(|(stream, peer)| {
                // Failing to set the option only costs latency: not a reason to refuse.
                let _ = stream.set_nodelay(true);
                Accepted::Tcp(stream, PeerAddr::Tcp(peer))
            }),
            accepted = accept_local(local.as_ref()) => accepted.map(|(stream, peer)| Accepted::Local(stream, peer)),
        };
        match accepted {
            Ok(accepted) => {
                let id = next_id;
                next_id += 1;
                let (cfg, handler, stop) = (cfg.clone(), handler.clone(), stop_rx.clone());
                match accepted {
                    Accepted::Tcp(stream, peer) => conns.spawn(connection(stream, peer, id, cfg, handler, stop)),
                    Accepted::Local(stream, peer) => conns.spawn(connection(stream, peer, id, cfg, handler, stop)),
                };
            }
            Err(e) if accept_error_is_transient(&e) => {
                // Out of descriptors or memory: retrying at once would spin, so back off
                // briefly; existing connections closing will make room.
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(e) => break Err(NetError::Io(e)),
        }
    };
    drop(listener);
    drop(local);
    let _ = stop_tx.send(true);
    while conns.join_next().await.is_some() {}
    result
}

/// Whether an accept error concerns one connection or a temporary shortage (descriptors,
/// memory, buffers), rather than the listener itself. Only the errors that say the listening
/// socket is unusable are fatal; anything else is retried, since giving up would take the whole
/// daemon off the network for one bad connection.
fn accept_error_is_transient(e: &std::io::Error) -> bool {
    // Linux values of EBADF, EFAULT, EINVAL, ENOTSOCK, EOPNOTSUPP.
    const LISTENER_BROKEN: [i32; 5] = [9, 14, 22, 88, 95];
    !matches!(e.raw_os_error(), Some(code) if cfg!(target_os = "linux") && LISTENER_BROKEN.contains(&code))
}

/// A connection just accepted, on either listener.
enum Accepted {
    Tcp(TcpStream, PeerAddr),
    Local(UnixStream, PeerAddr),
}

/// The next connection on the local socket, named by the socket it came in on; never, without
/// one.
async fn accept_local(local: Option<&(UnixListener, String)>) -> std::io::Result<(UnixStream, PeerAddr)> {
    match local {
        Some((listener, name)) => listener.accept().await.map(|(stream, _)| {
            crate::stream::widen_send_buffer(&stream);
            (stream, PeerAddr::Local(name.clone()))
        }),
        None => std::future::pending().await,
    }
}

async fn connection<H: Handler, S: SplitStream>(
    mut stream: S,
    peer_addr: PeerAddr,
    id: u64,
    cfg: Arc<ServerConfig>,
    handler: Arc<H>,
    mut stop: watch::Receiver<bool>,
) {
    let handshake = tokio::time::timeout(HANDSHAKE_TIMEOUT, auth::server(&mut stream, &cfg.keyring, &cfg.entity));
    let peer_entity = tokio::select! {
        r = handshake => match r {
            Ok(Ok(entity)) => entity,
            // Refused, timed out, or gone: the client has been told when it could be.
            _ => return,
        },
        _ = stop.wait_for(|s| *s) => return,
    };

    let (rd, wr) = stream.into_halves();
    let (tx, rx) = mpsc::channel(cfg.max_queued_replies.max(1));
    let link = Arc::new(Link::new());
    let writer = tokio::spawn(writer_task(wr, rx, link.clone()));
    let conn = ServerConn { inner: Arc::new(ConnInner { id, peer_entity, peer_addr, tx, link: link.clone() }) };

    let mut rd = BufReader::with_capacity(READ_BUFFER, rd);
    let mut header = [0u8; HEADER_BYTES];
    let violation = loop {
        let frame = tokio::select! {
            biased;
            () = link.reader_stopped() => break None,
            _ = stop.wait_for(|s| *s) => break None,
            r = read_frame(&mut rd, &mut header, MAX_PAYLOAD_BYTES, Payloads::Aligned) => r,
        };
        let frame = match frame {
            Ok(Some(f)) => f,
            Ok(None) => break None,
            Err(NetError::Frame(e)) => break Some(e.to_string()),
            Err(_) => break None,
        };
        if frame.msg_type >= FIRST_USER_MSG_TYPE {
            handler.on_frame(&conn, frame).await;
        } else if frame.msg_type == MSG_KEEPALIVE {
            if frame.request_id != 0
                && conn.send(Frame::new(MSG_KEEPALIVE, frame.request_id, Vec::new())).await.is_err()
            {
                break None;
            }
        } else {
            break Some(format!("unexpected message type {}", frame.msg_type));
        }
    };
    if let Some(reason) = violation {
        // Best effort: if the queue is full the client learns only that the connection closed.
        let _ = conn.inner.tx.try_send(error_frame(0, &reason));
    }
    link.close();
    handler.on_close(&conn);
    let _ = writer.await;
}
