//! The client end of a connection: pipelined calls and server pushes.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;

use shoal_proto::{Frame, HEADER_BYTES, MAX_PAYLOAD_BYTES};
use tokio::io::{AsyncRead, BufReader};
use tokio::net::TcpStream;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc, oneshot};
use tokio::task::AbortHandle;

use crate::stream::{PeerAddr, connect_local};
use crate::wire::{
    FIRST_USER_MSG_TYPE, Link, MSG_ERROR, PUSH_QUEUE_FRAMES, Payloads, READ_BUFFER, check_outgoing, error_frame,
    error_reason, read_frame, writer_task,
};
use crate::{Key, NetError, auth};
use shoal_splice::SplitStream;

/// Who a client is and how it uses its connections.
#[derive(Clone, Debug)]
pub struct ClientConfig {
    /// The entity name the client authenticates as, e.g. "client.admin".
    pub entity: String,
    pub key: Key,
    /// Bound on TCP connect plus handshake.
    pub connect_timeout_ms: u64,
    /// Calls that may be outstanding on one connection; further calls wait for a slot.
    /// Zero is treated as one.
    pub max_in_flight: usize,
}

impl ClientConfig {
    /// A configuration with a 5 s connect timeout and 128 calls in flight.
    #[must_use]
    pub fn new(entity: &str, key: Key) -> Self {
        Self { entity: entity.to_owned(), key, connect_timeout_ms: 5000, max_in_flight: 128 }
    }
}

/// A call waiting for its reply. It holds the in-flight slot, so the slot is returned only when
/// the server has answered (or the connection closed), even if the caller stopped waiting: the
/// bound on outstanding requests is a bound on what the server is working on.
struct Pending {
    reply: ReplyTo,
    _slot: OwnedSemaphorePermit,
}

/// Where a reply goes: to a caller awaiting it, or into a function run by the connection's
/// reader as soon as it arrives (no task to wake; see [`Connection::start_call_then`]).
enum ReplyTo {
    Wait(oneshot::Sender<Result<Frame, NetError>>),
    Then(Box<dyn FnOnce(Result<Frame, NetError>) + Send>),
}

impl ReplyTo {
    fn deliver(self, result: Result<Frame, NetError>) {
        match self {
            // The caller may have stopped waiting; the reply is then dropped.
            ReplyTo::Wait(tx) => {
                let _ = tx.send(result);
            }
            ReplyTo::Then(f) => f(result),
        }
    }
}

/// State shared by the handles and the reader task.
struct Shared {
    link: Arc<Link>,
    /// Calls awaiting replies by request id. Closing the connection empties it under the lock,
    /// and a call is only added under the lock while the connection is open, so no call can be
    /// left waiting on a closed connection.
    pending: Mutex<HashMap<u64, Pending>>,
    pushes_taken: AtomicBool,
}

impl Shared {
    fn pending(&self) -> MutexGuard<'_, HashMap<u64, Pending>> {
        // A panic while holding this lock cannot leave the map inconsistent (each operation is a
        // single insert or remove), so a poisoned lock is still usable.
        self.pending.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Closes the connection and fails every waiting call with [`NetError::Closed`].
    fn close(&self) {
        self.link.close();
        let drained: Vec<Pending> = self.pending().drain().map(|(_, p)| p).collect();
        for p in drained {
            p.reply.deliver(Err(NetError::Closed));
        }
    }
}

struct Inner {
    shared: Arc<Shared>,
    tx: mpsc::Sender<Frame>,
    slots: Arc<Semaphore>,
    next_id: AtomicU64,
    pushes: Mutex<Option<mpsc::Receiver<Frame>>>,
    peer_addr: PeerAddr,
    server_entity: String,
    reader: AbortHandle,
}

impl Drop for Inner {
    /// The last handle is gone: stop reading, and let the writer flush what is queued and close
    /// the socket.
    fn drop(&mut self) {
        self.reader.abort();
        self.shared.close();
    }
}

/// An authenticated client connection. Cloning it is cheap and every clone uses the same socket;
/// the connection closes when the last clone is dropped.
#[derive(Clone)]
pub struct Connection {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("peer_addr", &self.inner.peer_addr)
            .field("server_entity", &self.inner.server_entity)
            .field("closed", &self.is_closed())
            .finish()
    }
}

impl Connection {
    /// Connects to `addr` (with `TCP_NODELAY`, since requests are small and latency-bound) and
    /// runs the handshake as `cfg.entity`. The whole of it is bounded by `cfg.connect_timeout_ms`
    /// ([`NetError::Timeout`]). A server that does not know the entity or its key refuses with
    /// [`NetError::AuthRefused`] carrying the server's reason; a server that cannot prove it
    /// knows the key fails with [`NetError::AuthFailed`].
    ///
    /// Must be called inside a Tokio runtime: the connection runs a reader and a writer task.
    pub async fn connect(addr: SocketAddr, cfg: &ClientConfig) -> Result<Connection, NetError> {
        let setup = async {
            let stream = TcpStream::connect(addr).await?;
            stream.set_nodelay(true)?;
            Ok(stream)
        };
        Self::establish(setup, PeerAddr::Tcp(addr), cfg).await
    }

    /// Like [`Connection::connect`], over the local socket `name` (a server on this host, in
    /// this network namespace, that bound it with [`crate::bind_local`]). Fails at once with
    /// [`NetError::Io`] when nothing listens under that name, so a caller can fall back to TCP.
    /// The handshake is the same: the server proves it knows this client's key, and
    /// [`Connection::server_entity`] says who it is.
    pub async fn connect_local(name: &str, cfg: &ClientConfig) -> Result<Connection, NetError> {
        Self::establish(connect_local(name), PeerAddr::Local(name.to_owned()), cfg).await
    }

    /// Opens the stream `open` yields, runs the handshake on it and starts the connection's
    /// tasks, all within `cfg.connect_timeout_ms`.
    async fn establish<S: SplitStream>(
        open: impl Future<Output = Result<S, NetError>>,
        peer_addr: PeerAddr,
        cfg: &ClientConfig,
    ) -> Result<Connection, NetError> {
        let timeout = Duration::from_millis(cfg.connect_timeout_ms);
        let setup = async {
            let mut stream = open.await?;
            let server_entity = auth::client(&mut stream, &cfg.entity, &cfg.key).await?;
            Ok::<_, NetError>((stream, server_entity))
        };
        let (stream, server_entity) = tokio::time::timeout(timeout, setup).await.map_err(|_| NetError::Timeout)??;
        let (rd, wr) = stream.into_halves();

        let max_in_flight = cfg.max_in_flight.max(1);
        // Every queued frame is a call holding a slot (plus, rarely, one error frame from the
        // reader), so this queue never makes a call wait beyond the slot it already holds.
        let (tx, rx) = mpsc::channel(max_in_flight + 1);
        let (push_tx, push_rx) = mpsc::channel(PUSH_QUEUE_FRAMES);
        let link = Arc::new(Link::new());
        let shared = Arc::new(Shared {
            link: link.clone(),
            pending: Mutex::new(HashMap::new()),
            pushes_taken: AtomicBool::new(false),
        });
        tokio::spawn(writer_task(wr, rx, link));
        let reader = tokio::spawn(reader_task(rd, shared.clone(), tx.downgrade(), push_tx)).abort_handle();
        Ok(Connection {
            inner: Arc::new(Inner {
                shared,
                tx,
                slots: Arc::new(Semaphore::new(max_in_flight)),
                next_id: AtomicU64::new(1),
                pushes: Mutex::new(Some(push_rx)),
                peer_addr,
                server_entity,
                reader,
            }),
        })
    }

    /// Sends a request and waits for the frame whose request id matches. Requests are pipelined:
    /// many calls may be outstanding on one connection (up to `max_in_flight`; more wait for a
    /// slot), and replies may come back in any order.
    ///
    /// The reply is returned as the server sent it, including its message type. A reply of type
    /// [`crate::MSG_ERROR`] becomes [`NetError::Remote`] and leaves the connection usable. If the
    /// connection closes first, the call fails with [`NetError::Closed`].
    ///
    /// `msg_type` should be [`FIRST_USER_MSG_TYPE`] or above, or [`crate::MSG_KEEPALIVE`] for a
    /// round trip the server answers itself; other reserved types make the server close the
    /// connection. Dropping the returned future abandons the call, but its in-flight slot stays
    /// taken until the server replies.
    ///
    /// A payload over [`shoal_proto::MAX_PAYLOAD_BYTES`] fails at once with
    /// [`NetError::Frame`] and is not sent, since the server would close the connection.
    pub async fn call(&self, msg_type: u16, payload: Vec<u8>) -> Result<Frame, NetError> {
        self.start_call(msg_type, payload).await?.await
    }

    /// [`Connection::call`] with a payload of shared `data` followed by `payload`: the data is
    /// written to the socket from where it is, never copied into the frame, so a caller that
    /// keeps it for a resend pays no copy per attempt.
    pub async fn call_with_data(&self, msg_type: u16, data: Bytes, payload: Vec<u8>) -> Result<Frame, NetError> {
        self.call_frame(Frame::with_data(msg_type, 0, data, payload)).await
    }

    /// [`Connection::call_with_data`] with bulk data in several `parts`, sent in order, each
    /// from where it is (nothing is gathered into one buffer).
    pub async fn call_with_parts(&self, msg_type: u16, parts: Vec<Bytes>, payload: Vec<u8>) -> Result<Frame, NetError> {
        self.call_frame(Frame::with_data_parts(msg_type, 0, parts, payload)).await
    }

    async fn call_frame(&self, frame: Frame) -> Result<Frame, NetError> {
        let (reply_tx, reply_rx) = oneshot::channel();
        self.queue_call(frame, ReplyTo::Wait(reply_tx)).await?;
        PendingReply { rx: reply_rx }.await
    }

    /// Like [`Connection::call`], in two steps: the returned future resolves once the frame is
    /// queued for sending, and yields a [`PendingReply`] to await the reply with. A caller that
    /// queues several requests one after the other this way knows they leave in that order,
    /// while still waiting for their replies concurrently (an OSD forwarding writes to a replica
    /// needs both).
    pub async fn start_call(&self, msg_type: u16, payload: Vec<u8>) -> Result<PendingReply, NetError> {
        let (reply_tx, reply_rx) = oneshot::channel();
        self.queue_call(Frame::new(msg_type, 0, payload), ReplyTo::Wait(reply_tx)).await?;
        Ok(PendingReply { rx: reply_rx })
    }

    /// Like [`Connection::start_call`], but the reply (or the error that ends the call, e.g.
    /// [`NetError::Closed`]) is handed to `then`, called exactly once, by the connection's
    /// reader task as the reply arrives (or, for a connection closed by dropping its last handle,
    /// by the thread that drops it). No task waits per call, which matters to a server
    /// forwarding many small requests (an OSD replicating writes). `then` must not block: it
    /// runs before the reader reads the next frame. When the call cannot be queued, the error
    /// is returned and `then` is not called.
    ///
    /// The request's payload is `data` (shared, sent without a copy; may be empty) followed by
    /// `payload`; `data_crc` is `data`'s crc32c when the caller knows it (see
    /// [`Frame::with_checked_data`]).
    pub async fn start_call_then(
        &self,
        msg_type: u16,
        data: Bytes,
        data_crc: Option<u32>,
        payload: Vec<u8>,
        then: impl FnOnce(Result<Frame, NetError>) + Send + 'static,
    ) -> Result<(), NetError> {
        let frame = Frame::with_checked_data(msg_type, 0, data, data_crc, payload);
        self.queue_call(frame, ReplyTo::Then(Box::new(then))).await
    }

    /// Queues `frame` (its request id is assigned here) as a call answered to `reply`.
    async fn queue_call(&self, frame: Frame, reply: ReplyTo) -> Result<(), NetError> {
        let inner = &*self.inner;
        check_outgoing(&frame)?;
        let slot = inner.slots.clone().acquire_owned().await.map_err(|_| NetError::Closed)?;
        let request_id = inner.next_id.fetch_add(1, Ordering::Relaxed);
        // Room in the write queue is reserved before the call is registered, so that from the
        // registration to the frame being queued nothing can be interrupted: a call abandoned
        // in between would otherwise hold its slot forever for a request never sent.
        let queue = inner.tx.reserve().await.map_err(|_| NetError::Closed)?;
        {
            let mut pending = inner.shared.pending();
            if inner.shared.link.is_closed() {
                return Err(NetError::Closed);
            }
            pending.insert(request_id, Pending { reply, _slot: slot });
        }
        queue.send(Frame { request_id, ..frame });
        Ok(())
    }

    /// Frames the server sent unsolicited (request id 0), e.g. map updates, in arrival order.
    /// Returns the receiver the first time and `None` afterwards.
    ///
    /// Up to [`crate::PUSH_QUEUE_FRAMES`] pushes are buffered. Before the receiver is taken, a
    /// push that finds the buffer full is dropped (nobody has asked for them yet). Once it is
    /// taken, the owner must keep draining it: a push that finds the buffer full closes the
    /// connection rather than being lost silently or stalling replies to calls, so the client
    /// notices (calls fail with [`NetError::Closed`]) and can reconnect and resynchronise. A
    /// dropped receiver simply discards further pushes.
    pub fn take_pushes(&self) -> Option<mpsc::Receiver<Frame>> {
        let taken = self.inner.pushes.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take();
        if taken.is_some() {
            self.inner.shared.pushes_taken.store(true, Ordering::Release);
        }
        taken
    }

    /// Whether the connection has closed; every later call fails with [`NetError::Closed`].
    #[must_use]
    pub fn is_closed(&self) -> bool {
        self.inner.shared.link.is_closed()
    }

    /// The server's address: the one connected to, TCP or local.
    #[must_use]
    pub fn peer_addr(&self) -> &PeerAddr {
        &self.inner.peer_addr
    }

    /// The entity name the server authenticated as (it proved it knows this client's key).
    #[must_use]
    pub fn server_entity(&self) -> &str {
        &self.inner.server_entity
    }
}

/// Reads frames and hands each to its waiting call or to the push queue. Anything the protocol
/// does not allow closes the connection, after telling the server why when possible.
async fn reader_task<R: AsyncRead + Unpin>(
    rd: R,
    shared: Arc<Shared>,
    tx: mpsc::WeakSender<Frame>,
    pushes: mpsc::Sender<Frame>,
) {
    let mut rd = BufReader::with_capacity(READ_BUFFER, rd);
    let mut header = [0u8; HEADER_BYTES];
    let violation = loop {
        let frame = tokio::select! {
            biased;
            () = shared.link.reader_stopped() => break None,
            r = read_frame(&mut rd, &mut header, MAX_PAYLOAD_BYTES, Payloads::Plain) => r,
        };
        let frame = match frame {
            Ok(Some(f)) => f,
            Ok(None) => break None,
            Err(NetError::Frame(e)) => break Some(e.to_string()),
            Err(_) => break None,
        };
        if frame.request_id == 0 {
            if frame.msg_type >= FIRST_USER_MSG_TYPE {
                match pushes.try_send(frame) {
                    Ok(()) | Err(mpsc::error::TrySendError::Closed(_)) => {}
                    Err(mpsc::error::TrySendError::Full(_)) => {
                        if shared.pushes_taken.load(Ordering::Acquire) {
                            break Some("push queue overflow".to_owned());
                        }
                    }
                }
            } else if frame.msg_type == MSG_ERROR {
                // The server's last words before it closes; nothing to answer.
                break None;
            }
            // Other reserved types with id 0 (keepalives) need nothing.
            continue;
        }
        let Some(call) = shared.pending().remove(&frame.request_id) else {
            break Some(format!("reply for unknown request {}", frame.request_id));
        };
        let result = if frame.msg_type == MSG_ERROR {
            Err(NetError::Remote { reason: error_reason(&frame) })
        } else {
            Ok(frame)
        };
        call.reply.deliver(result);
    };
    if let (Some(reason), Some(tx)) = (violation, tx.upgrade()) {
        let _ = tx.try_send(error_frame(0, &reason));
    }
    shared.close();
}

/// The reply of a request queued with [`Connection::start_call`]; resolves like
/// [`Connection::call`].
pub struct PendingReply {
    rx: oneshot::Receiver<Result<Frame, NetError>>,
}

/// Polling the receiver directly (it is `Unpin`) keeps `call` free of a boxed future per request.
impl std::future::Future for PendingReply {
    type Output = Result<Frame, NetError>;

    fn poll(mut self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<Self::Output> {
        std::pin::Pin::new(&mut self.rx).poll(cx).map(|r| r.unwrap_or(Err(NetError::Closed)))
    }
}
