//! Large bulk data sent to a local peer without a copy (decisions 0096 and 0097).
//!
//! Written with `write`, every byte is copied into the local socket's buffer, and the peer
//! copies it out again. Spliced instead (`vmsplice` of the sender's memory into a pipe, then
//! `splice` from the pipe into the socket), the socket's buffer refers to the sender's pages and
//! the peer's read is the one copy. That halves the memory traffic of large requests and replies
//! between two processes on one host: an NBD server or gateway and its local OSD, two OSDs on one
//! host (the messenger, decision 0096), and an NBD server and a client on its unix socket
//! (decision 0097).
//!
//! The price is a contract on the memory: the socket refers to the pages themselves, so the bytes
//! must not change until the peer has read them. `Bytes` never change, but memory freed by
//! dropping the last handle is reused by the allocator (and a RAM store rewrites a chunk in place
//! only when nobody else holds it). So the writer keeps a handle to every part it spliced until
//! the socket shows that its peer has read everything sent (`SIOCOUTQ` at zero), bounded by
//! [`HELD_MAX_BYTES`]: past that it copies until the peer catches up. When the connection ends,
//! the writer keeps the socket open until the peer has read or dropped what is queued
//! ([`Splicer::drain`]).
//!
//! Only local (unix) sockets are spliced: a TCP socket's `SIOCOUTQ` counts bytes the peer has not
//! acknowledged, and on loopback an acknowledged segment can still wait unread in the peer's
//! queue, referring to the pages.

use std::collections::VecDeque;
use std::os::fd::{AsFd, OwnedFd};
use std::time::Duration;

use bytes::Bytes;
use rustix::pipe::{IoSliceRaw, PipeFlags, SpliceFlags};
use tokio::io::{AsyncWrite, Interest};
use tokio::net::UnixStream;

/// Bulk parts at least this large are spliced; smaller ones are copied with the rest of the
/// frame, which costs fewer system calls than a splice.
pub const SPLICE_MIN_BYTES: usize = 64 << 10;

/// Spliced bytes one connection holds at most while its peer has not read them all; past this
/// it copies (which needs no hold) until the peer has caught up. Four 4 MiB messages and more in
/// flight, in a bound that keeps a connection's memory small beside its buffers.
pub const HELD_MAX_BYTES: usize = 32 << 20;

/// The pipe a connection splices through, asked for at this size (the kernel's default limit for
/// a pipe's size). A smaller pipe (the user's pipe memory is limited) only means more rounds.
pub const PIPE_BYTES: usize = 1 << 20;

/// How long an ending connection's writer waits for the peer to read what was spliced before it
/// gives the held memory up for good (leaks it), rather than let it be reused while the peer may
/// still read it.
const DRAIN_TIMEOUT_MS: u64 = 30_000;
/// How often a writer holding spliced parts looks whether its peer has read them, while it has
/// nothing to write (and while it drains).
pub const IDLE_POLL_MS: u64 = 2;

/// Waits one [`IDLE_POLL_MS`]: a writer holding spliced parts with nothing to write looks again
/// after it. An `async fn`, so that a `select!` branch disabled because nothing is held costs
/// nothing (the timer is made only when the future is first polled).
pub async fn idle_poll() {
    tokio::time::sleep(Duration::from_millis(IDLE_POLL_MS)).await;
}

/// A connection's splicing state, owned by its writer: the pipe (made on the first splice) and
/// the parts spliced since the peer last had nothing unread.
pub struct Splicer {
    pipe: Option<(OwnedFd, OwnedFd)>,
    pipe_bytes: usize,
    held: VecDeque<Bytes>,
    held_bytes: usize,
}

impl Splicer {
    #[must_use]
    pub fn new() -> Self {
        Self { pipe: None, pipe_bytes: 0, held: VecDeque::new(), held_bytes: 0 }
    }

    /// Whether a bulk part of `len` bytes goes by splice now: large enough, and within what the
    /// connection may hold.
    #[must_use]
    pub fn takes(&self, len: usize) -> bool {
        len >= SPLICE_MIN_BYTES && self.held_bytes + len <= HELD_MAX_BYTES
    }

    /// Whether parts are held (the writer then looks whether the peer has read them).
    #[must_use]
    pub fn holds(&self) -> bool {
        !self.held.is_empty()
    }

    /// Lets the held parts go if the peer has read everything sent on `sock`. Returns whether
    /// nothing is held now.
    pub fn release_if_read(&mut self, sock: &UnixStream) -> bool {
        if !self.held.is_empty() && unread_bytes(sock).is_ok_and(|n| n == 0) {
            self.held.clear();
            self.held_bytes = 0;
        }
        self.held.is_empty()
    }

    /// Sends `data` on `sock` without copying it, and holds it until the peer has read it (see the
    /// module comment). Whole, or fails (the connection is then broken). Every byte is in the
    /// socket when this returns; nothing stays in the pipe, so whatever the caller writes next
    /// follows `data` on the wire.
    pub async fn send(&mut self, sock: &UnixStream, data: &Bytes) -> std::io::Result<()> {
        // Held before the first byte goes: from then on the socket may refer to it.
        self.held.push_back(data.clone());
        self.held_bytes += data.len();
        // SAFETY: held just above.
        unsafe { self.splice_all(sock, data) }.await
    }

    /// Moves `data` into `sock` by reference, through the pipe.
    ///
    /// # Safety
    ///
    /// The socket refers to `data`'s memory until the peer reads it: the caller keeps that memory
    /// unchanged until then.
    async unsafe fn splice_all(&mut self, sock: &UnixStream, data: &[u8]) -> std::io::Result<()> {
        if self.pipe.is_none() {
            let (rd, wr) = rustix::pipe::pipe_with(PipeFlags::CLOEXEC | PipeFlags::NONBLOCK)?;
            let _ = rustix::pipe::fcntl_setpipe_size(&wr, PIPE_BYTES);
            self.pipe_bytes = rustix::pipe::fcntl_getpipe_size(&wr)?;
            self.pipe = Some((rd, wr));
        }
        let Some((rd, wr)) = self.pipe.as_ref() else { unreachable!("the pipe was just made") };
        let mut sent = 0;
        while sent < data.len() {
            let piece = &data[sent..data.len().min(sent + self.pipe_bytes)];
            // SAFETY: `wr` is the pipe's write end, so vmsplice only reads `piece`; the caller keeps
            // its memory unchanged until the peer has read it.
            let moved = unsafe { rustix::pipe::vmsplice(wr, &[IoSliceRaw::from_slice(piece)], SpliceFlags::NONBLOCK) }?;
            if moved == 0 {
                return Err(std::io::ErrorKind::WriteZero.into());
            }
            let mut in_pipe = moved;
            while in_pipe > 0 {
                let flags = SpliceFlags::NONBLOCK | SpliceFlags::MOVE;
                match sock.try_io(Interest::WRITABLE, || {
                    Ok(rustix::pipe::splice(rd, None, sock.as_fd(), None, in_pipe, flags)?)
                }) {
                    Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
                    Ok(n) => in_pipe -= n,
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => sock.writable().await?,
                    Err(e) => return Err(e),
                }
            }
            sent += moved;
        }
        Ok(())
    }

    /// Run by the writer when its connection ends: waits (up to [`DRAIN_TIMEOUT_MS`]) until the
    /// peer has read or dropped everything queued on `sock`, then lets the held parts go; past
    /// the wait, or if the socket cannot tell, they are leaked rather than reused while the peer
    /// may still read them.
    pub async fn drain(mut self, sock: &UnixStream) {
        let mut waited_ms = 0;
        loop {
            match unread_bytes(sock) {
                Ok(0) => break,
                Ok(_) if waited_ms < DRAIN_TIMEOUT_MS => {
                    tokio::time::sleep(Duration::from_millis(IDLE_POLL_MS)).await;
                    waited_ms += IDLE_POLL_MS;
                }
                // Still unread past the wait, or the socket cannot tell.
                _ => {
                    let bytes = self.held_bytes;
                    tracing::warn!(bytes, "a local peer left spliced data unread: its memory is given up, not reused");
                    for part in self.held.drain(..) {
                        std::mem::forget(part);
                    }
                    return;
                }
            }
        }
        self.held.clear();
    }
}

impl Default for Splicer {
    fn default() -> Self {
        Self::new()
    }
}

/// The writing half of a connection's stream, and the local socket under it if it is one (which
/// a writer may splice into).
pub trait SpliceSink: AsyncWrite + Unpin + Send + 'static {
    fn local(&self) -> Option<&UnixStream> {
        None
    }
}

impl SpliceSink for tokio::net::tcp::OwnedWriteHalf {}

impl SpliceSink for tokio::net::unix::OwnedWriteHalf {
    fn local(&self) -> Option<&UnixStream> {
        Some(self.as_ref())
    }
}

/// A half of any stream split by `tokio::io::split` (TLS, in-memory): never spliced.
impl<T: tokio::io::AsyncRead + AsyncWrite + Send + 'static> SpliceSink for tokio::io::WriteHalf<T> {}

/// A connected stream that splits into halves owned by a reader and a writer task, the writing
/// half one a writer may splice into when the stream is a local socket.
pub trait SplitStream: tokio::io::AsyncRead + AsyncWrite + Send + Unpin + 'static {
    type Read: tokio::io::AsyncRead + Send + Unpin + 'static;
    type Write: SpliceSink;
    fn into_halves(self) -> (Self::Read, Self::Write);
}

impl SplitStream for tokio::net::TcpStream {
    type Read = tokio::net::tcp::OwnedReadHalf;
    type Write = tokio::net::tcp::OwnedWriteHalf;
    fn into_halves(self) -> (Self::Read, Self::Write) {
        self.into_split()
    }
}

impl SplitStream for UnixStream {
    type Read = tokio::net::unix::OwnedReadHalf;
    type Write = tokio::net::unix::OwnedWriteHalf;
    fn into_halves(self) -> (Self::Read, Self::Write) {
        self.into_split()
    }
}

/// An in-memory pipe (tests).
impl SplitStream for tokio::io::DuplexStream {
    type Read = tokio::io::ReadHalf<Self>;
    type Write = tokio::io::WriteHalf<Self>;
    fn into_halves(self) -> (Self::Read, Self::Write) {
        tokio::io::split(self)
    }
}

/// Bytes queued on a socket that its peer has not read yet (`SIOCOUTQ`; for a local stream
/// socket, what its unread messages take, so zero once the peer has read everything or closed).
fn unread_bytes(sock: &UnixStream) -> std::io::Result<i32> {
    // SAFETY: SIOCOUTQ (the same number as TIOCOUTQ) writes one int.
    let getter = unsafe { rustix::ioctl::Getter::<{ 0x5411 as rustix::ioctl::Opcode }, rustix::ffi::c_int>::new() };
    // SAFETY: the getter matches the request's argument.
    Ok(unsafe { rustix::ioctl::ioctl(sock, getter) }?)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use tokio::io::AsyncReadExt;

    use super::*;

    fn pattern(len: usize, seed: u8) -> Vec<u8> {
        (0..len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect()
    }

    #[tokio::test]
    async fn a_spliced_socket_refers_to_the_senders_memory_until_the_peer_reads_it() {
        // Why a spliced part must be held: the peer reads the memory as it is when it reads, not
        // as it was when it was sent.
        let (a, mut b) = UnixStream::pair().unwrap();
        let len = SPLICE_MIN_BYTES * 2;
        let mut buf = pattern(len, 5);
        // SAFETY (of the test): breaking the contract is the point; `buf` outlives the read.
        let mut raw = Splicer::new();
        unsafe { raw.splice_all(&a, &buf) }.await.unwrap();
        assert!(unread_bytes(&a).unwrap() > 0);
        buf.iter_mut().for_each(|x| *x = 0xEE);
        let mut got = vec![0u8; len];
        b.read_exact(&mut got).await.unwrap();
        assert!(got.iter().all(|x| *x == 0xEE), "the peer read the memory as changed after the send");
        assert_eq!(unread_bytes(&a).unwrap(), 0);

        // A splicer lets what it holds go only once the peer has read it.
        let mut s = Splicer::new();
        s.send(&a, &Bytes::from(buf)).await.unwrap();
        assert!(!s.release_if_read(&a) && s.holds(), "released before the peer read it");
        b.read_exact(&mut got).await.unwrap();
        assert!(s.release_if_read(&a) && !s.holds(), "held after the peer read everything");
    }

    #[tokio::test]
    async fn an_ending_writer_holds_what_it_spliced_until_the_peer_has_read_it() {
        let (a, mut b) = UnixStream::pair().unwrap();
        let data = Bytes::from(pattern(SPLICE_MIN_BYTES * 3, 6));
        let weak = {
            let mut s = Splicer::new();
            s.send(&a, &data).await.unwrap();
            let a = Arc::new(a);
            let drain = tokio::spawn({
                let a = a.clone();
                async move { s.drain(&a).await }
            });
            tokio::time::sleep(Duration::from_millis(50)).await;
            assert!(!drain.is_finished(), "the drain ended while the peer had not read");
            let mut got = vec![0u8; data.len()];
            b.read_exact(&mut got).await.unwrap();
            assert!(got == data);
            drain.await.unwrap();
            data
        };
        // The drain let its handle go: this one is the last.
        assert!(weak.is_unique());
    }
}
