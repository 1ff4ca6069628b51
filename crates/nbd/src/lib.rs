//! A user-space NBD server over any block device (issue 10), speaking the protocol of the NBD
//! project's `doc/proto.md` so that every client works unchanged: the Linux kernel (through
//! `nbdfuse`), QEMU, the libnbd tools, fio.
//!
//! - [`proto`]: the protocol's numbers and fixed-size frames.
//! - [`handshake`]: fixed newstyle option haggling (EXPORT_NAME, LIST, INFO, GO,
//!   STRUCTURED_REPLY, LIST/SET_META_CONTEXT with `base:allocation`).
//! - [`transmission`]: the request loop. Requests of one connection run concurrently (bounded
//!   in number and bytes), replies go out in completion order, each written whole.
//!
//! The device is anything implementing [`BlockDevice`]; the CLI serves block images with it.

pub mod handshake;
pub mod proto;
pub mod transmission;

use std::future::Future;
use std::sync::Arc;

use shoal_splice::SpliceSink;
/// The streams [`serve_connection`] serves on (TCP, unix, or in-memory for tests).
pub use shoal_splice::SplitStream;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::watch;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;

use crate::handshake::{Negotiated, Session, TlsPhase};

/// Why a device operation failed: an errno for the reply and a message for the log (and for
/// structured replies).
#[derive(Debug, Clone, thiserror::Error)]
#[error("{message} (errno {errno})")]
pub struct DeviceError {
    pub errno: u32,
    pub message: String,
}

/// An allocation run: `len_bytes` from `offset`, backed by data or a hole (reads as zeros).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Extent {
    pub offset: u64,
    pub len_bytes: u64,
    pub hole: bool,
}

/// What the server serves. Durability contract the server relies on: when `write` or `zero`
/// returns, the bytes are durable (or `flush` makes them so); `flush` returns once every write
/// and zero that completed before it was called is durable, whichever connection sent it (so
/// the export can offer CAN_MULTI_CONN).
pub trait BlockDevice: Send + Sync + 'static {
    fn size_bytes(&self) -> u64;
    fn read_only(&self) -> bool;
    /// The bytes of `len_bytes` at `offset` (exactly that many), shared rather than copied
    /// where the device holds them already.
    fn read(&self, offset: u64, len_bytes: u32) -> impl Future<Output = Result<bytes::Bytes, DeviceError>> + Send;
    fn write(&self, offset: u64, data: Vec<u8>) -> impl Future<Output = Result<(), DeviceError>> + Send;
    /// Makes the range read as zeros (discard and write-zeroes), without writing zeros where
    /// the device can avoid it.
    fn zero(&self, offset: u64, len_bytes: u64) -> impl Future<Output = Result<(), DeviceError>> + Send;
    fn flush(&self) -> impl Future<Output = Result<(), DeviceError>> + Send;
    /// Allocation of a range, as runs in order covering a prefix of it (at least one byte).
    fn allocation(&self, offset: u64, len_bytes: u64) -> impl Future<Output = Result<Vec<Extent>, DeviceError>> + Send;
}

/// One export: its name (clients ask for it), a description, and the device.
pub struct Export<D> {
    pub name: String,
    pub description: String,
    pub device: Arc<D>,
}

/// Limits of one server.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// The largest read or write request served; a larger one ends its connection.
    pub max_request_bytes: u32,
    /// Requests of one connection in progress at once.
    pub max_in_flight: usize,
    /// Payload bytes of one connection's requests in progress at once (reads and writes).
    pub max_in_flight_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits { max_request_bytes: 32 << 20, max_in_flight: 64, max_in_flight_bytes: 64 << 20 }
    }
}

/// The exports of a server, shared by its connections.
pub struct Exports<D> {
    pub exports: Vec<Export<D>>,
    pub limits: Limits,
    /// The server's TLS identity. With one, TLS is required: a client must send STARTTLS before
    /// anything else (see [`handshake::TlsPhase::Required`]).
    pub tls: Option<TlsAcceptor>,
}

impl<D: BlockDevice> Exports<D> {
    /// The index of the export a client names; the empty name is the first (the default export).
    pub fn position(&self, name: &str) -> Option<usize> {
        if name.is_empty() {
            (!self.exports.is_empty()).then_some(0)
        } else {
            self.exports.iter().position(|e| e.name == name)
        }
    }
}

/// How long a client may take to pick an export (options, and the TLS handshake if any) before
/// its connection is dropped: a connection that never gets past the handshake holds no
/// resources for longer.
pub const HANDSHAKE_TIMEOUT_MS: u64 = 30_000;

/// Serves one client connection to its end: handshake, then requests until it disconnects or
/// `stop` turns true. Protocol errors end this connection only. On `stop` the connection reads
/// no more requests, answers every request it has read, and closes: a client sees its
/// connection end, never an error, and resends what was not answered once it reconnects.
pub async fn serve_connection<D, S>(exports: Arc<Exports<D>>, stream: S, peer: String, stop: watch::Receiver<bool>)
where
    D: BlockDevice,
    S: SplitStream,
{
    let mut handshake_stop = stop.clone();
    let deadline = tokio::time::Duration::from_millis(HANDSHAKE_TIMEOUT_MS);
    let negotiated = tokio::select! {
        n = tokio::time::timeout(deadline, negotiate(&exports, stream)) => match n {
            Ok(n) => n,
            Err(_) => Err(handshake::HandshakeError::Protocol(format!("no export chosen within {HANDSHAKE_TIMEOUT_MS} ms"))),
        },
        _ = handshake_stop.wait_for(|s| *s) => return,
    };
    match negotiated {
        Ok((Negotiated::Session(session), Conn::Clear(stream))) => {
            transmit(exports, stream.into_halves(), session, peer, stop).await;
        }
        Ok((Negotiated::Session(session), Conn::Tls(stream))) => {
            transmit(exports, tokio::io::split(stream), session, peer, stop).await;
        }
        Ok(_) => tracing::debug!(peer, "NBD client ended the handshake"),
        Err(e) => tracing::warn!(peer, error = %e, "NBD handshake failed"),
    }
}

/// A connection's stream after its handshake.
enum Conn<S> {
    Clear(S),
    Tls(Box<TlsStream<S>>),
}

/// The handshake of one connection: the clear option phase and, if the client starts TLS, the
/// TLS handshake and a fresh option phase over it. Returns the stream to serve on.
async fn negotiate<D, S>(
    exports: &Exports<D>,
    mut stream: S,
) -> Result<(Negotiated, Conn<S>), handshake::HandshakeError>
where
    D: BlockDevice,
    S: AsyncRead + AsyncWrite + Unpin,
{
    let no_zeroes = handshake::greet(&mut stream).await?;
    let mut options_left = handshake::MAX_OPTIONS;
    let phase = if exports.tls.is_some() { TlsPhase::Required } else { TlsPhase::Unavailable };
    match handshake::negotiate(exports, &mut stream, no_zeroes, phase, &mut options_left).await? {
        Negotiated::StartTls => {
            let Some(acceptor) = &exports.tls else {
                unreachable!("STARTTLS is acknowledged only when the server has an identity")
            };
            let mut tls = Box::new(acceptor.accept(stream).await?);
            let next = handshake::negotiate(exports, &mut *tls, no_zeroes, TlsPhase::Active, &mut options_left).await?;
            Ok((next, Conn::Tls(tls)))
        }
        other => Ok((other, Conn::Clear(stream))),
    }
}

async fn transmit<D, R, W>(
    exports: Arc<Exports<D>>,
    (reader, writer): (R, W),
    session: Session,
    peer: String,
    stop: watch::Receiver<bool>,
) where
    D: BlockDevice,
    R: AsyncRead + Unpin,
    W: SpliceSink,
{
    tracing::info!(peer, export = session.export_name, "NBD client connected");
    match transmission::run(exports, session, reader, writer, stop).await {
        Ok(()) => tracing::info!(peer, "NBD client disconnected"),
        Err(e) => tracing::warn!(peer, error = %e, "NBD connection ended"),
    }
}
