//! The transmission phase: requests of one connection read in order and served concurrently.
//!
//! The reader takes a permit for each request (at most `max_in_flight` at once) and for its
//! payload bytes (at most `max_in_flight_bytes` of reads and writes at once) before reading a
//! write's data, then runs the request as its own task. A task's reply is queued whole to the
//! connection's writer, which sends replies in completion order and releases the permits once
//! a reply is written, so memory stays bounded however fast the client sends. A protocol
//! violation (bad magic, a request over the size limit) ends the connection; errors of one
//! request are that request's reply.

use std::sync::Arc;

use shoal_splice::{SpliceSink, Splicer};
use tokio::io::{AsyncBufRead, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc, watch};

use crate::handshake::Session;
use crate::proto::*;
use crate::{BlockDevice, DeviceError, Exports};

/// The most bytes one BLOCK_STATUS answer describes (one stat per object touched).
const MAX_STATUS_BYTES: u64 = 1 << 30;
/// Bytes of replies buffered before they are written.
const IO_BUFFER_BYTES: usize = 256 << 10;
/// Bytes of requests read ahead: enough for a queue of small requests to arrive in one read,
/// small enough that little of a large write's payload is read into it (and copied out again)
/// before the rest goes straight into the payload (see [`read_payload`]).
const REQUEST_BUFFER_BYTES: usize = 64 << 10;
/// Zeros written per request when a client asks for allocated zeros (NO_HOLE).
const ZERO_WRITE_BYTES: u64 = 4 << 20;

#[derive(Debug, thiserror::Error)]
pub enum TransmissionError {
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
    #[error("protocol: {0}")]
    Protocol(String),
}

/// A reply's bytes: `head`, then `data` (a read's payload, sent as the device returned it rather
/// than copied behind the header).
struct Reply {
    head: Vec<u8>,
    data: bytes::Bytes,
}

/// A reply ready to send, with the permits it holds until it is written.
struct Outgoing {
    reply: Reply,
    _permits: (OwnedSemaphorePermit, OwnedSemaphorePermit),
}

/// Payloads at least this long are written from where they are instead of through the
/// connection's buffer (smaller ones are cheaper to copy than to send on their own).
const DIRECT_PAYLOAD_BYTES: usize = 64 << 10;

/// Writes replies in the order they come, batching those that are ready together into one
/// system call where it can: small replies are copied into `buf`; a large payload is written
/// from its own buffer, together with what `buf` holds, by one vectored write. On a local socket
/// a large payload is spliced instead (decision 0097): `buf` is written first, then the payload
/// by reference, held by `splicer` until the client has read it.
struct ReplyWriter<W> {
    w: W,
    buf: Vec<u8>,
    splicer: Option<Splicer>,
}

impl<W: SpliceSink> ReplyWriter<W> {
    fn new(w: W) -> Self {
        let splicer = w.local().map(|_| Splicer::new());
        Self { w, buf: Vec::with_capacity(IO_BUFFER_BYTES), splicer }
    }

    async fn push(&mut self, reply: &Reply) -> std::io::Result<()> {
        self.buf.extend_from_slice(&reply.head);
        if reply.data.len() < DIRECT_PAYLOAD_BYTES {
            self.buf.extend_from_slice(&reply.data);
            if self.buf.len() >= IO_BUFFER_BYTES {
                self.flush().await?;
            }
            return Ok(());
        }
        if self.splicer.as_ref().is_some_and(|s| s.takes(reply.data.len())) {
            // The head (and the replies before it) must reach the socket before the payload.
            self.w.write_all(&self.buf).await?;
            self.buf.clear();
            if let (Some(s), Some(sock)) = (self.splicer.as_mut(), self.w.local()) {
                return s.send(sock, &reply.data).await;
            }
        }
        write_all_two(&mut self.w, &self.buf, &reply.data).await?;
        self.buf.clear();
        Ok(())
    }

    async fn flush(&mut self) -> std::io::Result<()> {
        self.w.write_all(&self.buf).await?;
        self.buf.clear();
        self.w.flush().await
    }

    /// Whether spliced payloads are held (the writer then looks whether the client has read
    /// them, while it has nothing to write).
    fn holds(&self) -> bool {
        self.splicer.as_ref().is_some_and(Splicer::holds)
    }

    /// Lets the spliced payloads go if the client has read everything sent.
    fn release_if_read(&mut self) {
        if let (Some(s), Some(sock)) = (self.splicer.as_mut(), self.w.local()) {
            s.release_if_read(sock);
        }
    }

    /// Ends the writer: if it holds spliced payloads, a detached task keeps the socket open
    /// until the client has read or dropped them ([`Splicer::drain`]), so that their memory is
    /// not reused while the socket still refers to it.
    fn finish(self) {
        let Self { w, splicer, .. } = self;
        if let Some(s) = splicer.filter(Splicer::holds) {
            tokio::spawn(async move {
                if let Some(sock) = w.local() {
                    s.drain(sock).await;
                }
            });
        }
    }
}

/// Writes all of `a` then all of `b`, with vectored writes (one system call when the socket takes
/// both).
async fn write_all_two<W: AsyncWrite + Unpin>(w: &mut W, a: &[u8], b: &[u8]) -> std::io::Result<()> {
    let (mut a, mut b) = (a, b);
    while !a.is_empty() {
        let n = w.write_vectored(&[std::io::IoSlice::new(a), std::io::IoSlice::new(b)]).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        let from_a = n.min(a.len());
        a = &a[from_a..];
        b = &b[n - from_a..];
    }
    w.write_all(b).await
}

/// Serves requests until the client disconnects (DISC or end of stream) or `stop` turns true.
/// Every request read is answered before this returns.
pub async fn run<D, R, W>(
    exports: Arc<Exports<D>>,
    session: Session,
    r: R,
    w: W,
    mut stop: watch::Receiver<bool>,
) -> Result<(), TransmissionError>
where
    D: BlockDevice,
    R: AsyncRead + Unpin,
    W: SpliceSink,
{
    let device = exports.exports[session.export].device.clone();
    let limits = exports.limits;
    let (tx, mut rx) = mpsc::channel::<Outgoing>(limits.max_in_flight.max(1));
    let writer = tokio::spawn(async move {
        // Replies that are ready together go out in one system call: under many small requests
        // a write per reply is most of the server's cost. A reply waits in the buffer only
        // while others are being appended; the buffer is flushed whenever the queue is empty.
        let mut w = ReplyWriter::new(w);
        let written = async {
            loop {
                let out = tokio::select! {
                    out = rx.recv() => match out {
                        Some(out) => out,
                        None => break,
                    },
                    // Nothing to write, spliced payloads held: free them once the client has
                    // read them.
                    () = shoal_splice::idle_poll(), if w.holds() => {
                        w.release_if_read();
                        continue;
                    }
                };
                w.release_if_read();
                w.push(&out.reply).await?;
                drop(out);
                while let Ok(more) = rx.try_recv() {
                    w.push(&more.reply).await?;
                }
                w.flush().await?;
            }
            w.flush().await
        }
        .await;
        w.finish();
        written
    });
    // Requests read through a buffer: one system call brings in many small requests.
    let mut r = BufReader::with_capacity(REQUEST_BUFFER_BYTES, r);
    let count = Arc::new(Semaphore::new(limits.max_in_flight.max(1)));
    let bytes = Arc::new(Semaphore::new(limits.max_in_flight_bytes.max(limits.max_request_bytes as usize)));
    let session = Arc::new(session);
    let result = loop {
        let mut header = [0u8; REQUEST_BYTES];
        // A stop ends the connection between requests (a request partly read is dropped with
        // it: the client never had an answer and resends it after reconnecting).
        let read = tokio::select! {
            biased;
            _ = stop.wait_for(|s| *s) => break Ok(()),
            read = r.read_exact(&mut header) => read,
        };
        match read {
            Ok(_) => {}
            // A client that closes without DISC has still been served everything it sent.
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => break Ok(()),
            Err(e) => break Err(e.into()),
        }
        let Some(req) = Request::parse(&header) else {
            break Err(TransmissionError::Protocol("a request with a wrong magic".into()));
        };
        if req.kind == CMD_DISC {
            break Ok(());
        }
        let carries = matches!(req.kind, CMD_READ | CMD_WRITE);
        if carries && req.length > limits.max_request_bytes {
            break Err(TransmissionError::Protocol(format!(
                "a request of {} bytes, over the limit of {}",
                req.length, limits.max_request_bytes
            )));
        }
        let Ok(count_permit) = count.clone().acquire_owned().await else { break Ok(()) };
        let want = if carries { req.length.max(1) } else { 1 };
        let Ok(byte_permit) = bytes.clone().acquire_many_owned(want).await else { break Ok(()) };
        let mut data = Vec::new();
        if req.kind == CMD_WRITE
            && let Err(e) = read_payload(&mut r, req.length as usize, &mut data).await
        {
            break Err(e.into());
        }
        let (device, session, tx) = (device.clone(), session.clone(), tx.clone());
        tokio::spawn(async move {
            let reply = serve(&*device, &session, req, data).await;
            let _ = tx.send(Outgoing { reply, _permits: (count_permit, byte_permit) }).await;
        });
    };
    // Answer everything in flight, then let the writer drain and finish.
    let _all = count.acquire_many(limits.max_in_flight.max(1) as u32).await;
    drop(tx);
    match writer.await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => return Err(e.into()),
        Err(e) => return Err(TransmissionError::Protocol(format!("the reply writer failed: {e}"))),
    }
    result
}

/// Reads a write's `len_bytes` of data into `data` (empty on entry) without zeroing the buffer
/// first. What the connection's buffer already holds is copied out of it; a remainder of at
/// least `DIRECT_PAYLOAD_BYTES` is then read from the socket straight into `data`. Through the
/// buffer, every read that wants less than a whole buffer (a large payload's tail) is copied
/// twice, into the buffer and out of it; a small remainder still goes through it, since the
/// read that fetches it also brings in the requests behind it.
async fn read_payload<R: AsyncRead + Unpin>(
    r: &mut BufReader<R>,
    len_bytes: usize,
    data: &mut Vec<u8>,
) -> std::io::Result<()> {
    data.reserve_exact(len_bytes);
    if len_bytes >= DIRECT_PAYLOAD_BYTES {
        let buffered = r.buffer();
        let taken = buffered.len().min(len_bytes);
        data.extend_from_slice(&buffered[..taken]);
        std::pin::Pin::new(&mut *r).consume(taken);
        // The buffer is empty unless it held the whole payload, so reading past it loses nothing.
        debug_assert!(taken == len_bytes || r.buffer().is_empty());
        let inner = r.get_mut();
        while len_bytes - data.len() >= DIRECT_PAYLOAD_BYTES {
            let want = (len_bytes - data.len()) as u64;
            if (&mut *inner).take(want).read_buf(data).await? == 0 {
                return Err(std::io::ErrorKind::UnexpectedEof.into());
            }
        }
    }
    while data.len() < len_bytes {
        let want = (len_bytes - data.len()) as u64;
        if (&mut *r).take(want).read_buf(data).await? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
    }
    debug_assert_eq!(data.len(), len_bytes);
    Ok(())
}

fn fail(errno: u32, message: impl Into<String>) -> DeviceError {
    DeviceError { errno, message: message.into() }
}

/// Runs one request; returns its whole reply.
async fn serve<D: BlockDevice>(device: &D, session: &Session, req: Request, data: Vec<u8>) -> Reply {
    let only = |head: Vec<u8>| Reply { head, data: bytes::Bytes::new() };
    match execute(device, session, &req, data).await {
        Ok(Answer::Data(bytes)) if session.structured => {
            let mut head = Vec::with_capacity(28);
            chunk_header(&mut head, req.cookie, REPLY_FLAG_DONE, REPLY_TYPE_OFFSET_DATA, 8 + bytes.len());
            head.extend_from_slice(&req.offset.to_be_bytes());
            Reply { head, data: bytes }
        }
        Ok(Answer::Data(bytes)) => Reply { head: simple_reply(req.cookie, 0, &[]), data: bytes },
        Ok(Answer::Status(payload)) => {
            let mut out = Vec::new();
            chunk(&mut out, req.cookie, REPLY_FLAG_DONE, REPLY_TYPE_BLOCK_STATUS, &[&payload]);
            only(out)
        }
        Ok(Answer::Done) if session.structured => {
            let mut out = Vec::with_capacity(20);
            chunk(&mut out, req.cookie, REPLY_FLAG_DONE, REPLY_TYPE_NONE, &[]);
            only(out)
        }
        Ok(Answer::Done) => only(simple_reply(req.cookie, 0, &[])),
        Err(e) => {
            tracing::debug!(cookie = req.cookie, kind = req.kind, error = %e, "NBD request failed");
            if session.structured {
                only(error_chunk(req.cookie, e.errno, &e.message))
            } else {
                only(simple_reply(req.cookie, e.errno, &[]))
            }
        }
    }
}

/// The command flags a request of `kind` may carry, given the transmission flags sent: FUA on
/// any command (clients are known to set it on reads and flushes), DF on reads when offered (only
/// with structured replies), REQ_ONE on BLOCK_STATUS, NO_HOLE and FAST_ZERO on WRITE_ZEROES. The
/// same rule as qemu-nbd and nbdkit: a flag outside it is a client bug, answered EINVAL.
fn allowed_flags(kind: u16, transmission_flags: u16) -> u16 {
    let mut allowed = CMD_FLAG_FUA;
    match kind {
        CMD_READ if transmission_flags & TF_SEND_DF != 0 => allowed |= CMD_FLAG_DF,
        CMD_BLOCK_STATUS => allowed |= CMD_FLAG_REQ_ONE,
        CMD_WRITE_ZEROES => allowed |= CMD_FLAG_NO_HOLE | CMD_FLAG_FAST_ZERO,
        _ => {}
    }
    allowed
}

enum Answer {
    Done,
    Data(bytes::Bytes),
    Status(Vec<u8>),
}

async fn execute<D: BlockDevice>(
    device: &D,
    session: &Session,
    req: &Request,
    data: Vec<u8>,
) -> Result<Answer, DeviceError> {
    let size = device.size_bytes();
    let allowed = allowed_flags(req.kind, session.flags);
    if req.flags & !allowed != 0 {
        return Err(fail(
            EINVAL,
            format!("command flags {:#x} not valid for command {} on this connection", req.flags & !allowed, req.kind),
        ));
    }
    let writes = matches!(req.kind, CMD_WRITE | CMD_TRIM | CMD_WRITE_ZEROES);
    if writes && device.read_only() {
        return Err(fail(EPERM, "the export is read-only"));
    }
    let len = u64::from(req.length);
    let in_range = req.offset.checked_add(len).is_some_and(|end| end <= size);
    if matches!(req.kind, CMD_READ | CMD_WRITE | CMD_TRIM | CMD_WRITE_ZEROES | CMD_CACHE | CMD_BLOCK_STATUS) {
        if !in_range {
            // As the protocol asks: no space for data past the end, an invalid range otherwise.
            let errno = if matches!(req.kind, CMD_WRITE | CMD_WRITE_ZEROES) { ENOSPC } else { EINVAL };
            return Err(fail(errno, format!("{}+{} is past the end of the export ({size} bytes)", req.offset, len)));
        }
        if len == 0 {
            return Err(fail(EINVAL, "a request of length zero"));
        }
    }
    let fua = req.flags & CMD_FLAG_FUA != 0;
    match req.kind {
        CMD_READ => Ok(Answer::Data(device.read(req.offset, req.length).await?)),
        CMD_WRITE => {
            device.write(req.offset, data).await?;
            if fua {
                device.flush().await?;
            }
            Ok(Answer::Done)
        }
        CMD_FLUSH => {
            device.flush().await?;
            Ok(Answer::Done)
        }
        CMD_TRIM => {
            device.zero(req.offset, len).await?;
            if fua {
                device.flush().await?;
            }
            Ok(Answer::Done)
        }
        CMD_WRITE_ZEROES => {
            if req.flags & CMD_FLAG_NO_HOLE != 0 {
                // Allocated zeros were asked for: they must be written, which is not fast.
                if req.flags & CMD_FLAG_FAST_ZERO != 0 {
                    return Err(fail(ENOTSUP, "allocated zeros cannot be written fast"));
                }
                let mut at = req.offset;
                while at < req.offset + len {
                    let n = ZERO_WRITE_BYTES.min(req.offset + len - at);
                    device.write(at, vec![0u8; n as usize]).await?;
                    at += n;
                }
            } else {
                device.zero(req.offset, len).await?;
            }
            if fua {
                device.flush().await?;
            }
            Ok(Answer::Done)
        }
        // Nothing is cached between the server and the cluster: prefetching would only cost.
        CMD_CACHE => Ok(Answer::Done),
        CMD_BLOCK_STATUS => {
            if !session.structured || !session.allocation_context {
                return Err(fail(EINVAL, "BLOCK_STATUS needs structured replies and base:allocation"));
            }
            let runs = device.allocation(req.offset, len.min(MAX_STATUS_BYTES)).await?;
            let mut payload = Vec::with_capacity(4 + 8 * runs.len());
            payload.extend_from_slice(&BASE_ALLOCATION_ID.to_be_bytes());
            for run in &runs {
                let flags = if run.hole { STATE_HOLE | STATE_ZERO } else { 0 };
                payload.extend_from_slice(&(run.len_bytes.min(u64::from(u32::MAX)) as u32).to_be_bytes());
                payload.extend_from_slice(&flags.to_be_bytes());
                if req.flags & CMD_FLAG_REQ_ONE != 0 {
                    break;
                }
            }
            if runs.is_empty() {
                return Err(fail(EIO, "the device described no allocation"));
            }
            Ok(Answer::Status(payload))
        }
        other => Err(fail(EINVAL, format!("unknown command {other}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::pin::Pin;
    use std::task::{Context, Poll};

    /// A socket that takes at most `step` bytes per write (vectored or not), as a full socket
    /// buffer does, and records everything it took.
    struct Trickle {
        took: Vec<u8>,
        step: usize,
    }

    impl AsyncWrite for Trickle {
        fn poll_write(mut self: Pin<&mut Self>, _: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
            let n = buf.len().min(self.step);
            self.took.extend_from_slice(&buf[..n]);
            Poll::Ready(Ok(n))
        }
        fn poll_write_vectored(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
            bufs: &[std::io::IoSlice<'_>],
        ) -> Poll<std::io::Result<usize>> {
            let mut n = 0;
            for b in bufs {
                let take = b.len().min(self.step - n);
                self.took.extend_from_slice(&b[..take]);
                n += take;
                if n == self.step {
                    break;
                }
            }
            Poll::Ready(Ok(n))
        }
        fn is_write_vectored(&self) -> bool {
            true
        }
        fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
            Poll::Ready(Ok(()))
        }
        fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    impl SpliceSink for Trickle {}

    /// Replies small and large, written through sockets that take any number of bytes at a
    /// time, arrive whole and in order: each reply's head, then its payload.
    #[tokio::test]
    async fn replies_arrive_whole_and_in_order_however_the_socket_takes_them() {
        let sizes = [0usize, 4096, DIRECT_PAYLOAD_BYTES, 3 * DIRECT_PAYLOAD_BYTES + 5, 100, IO_BUFFER_BYTES + 1];
        let replies: Vec<Reply> = sizes
            .iter()
            .enumerate()
            .map(|(i, &n)| Reply {
                head: vec![0xA0 + i as u8; 16 + i],
                data: (0..n).map(|b| (b % 251) as u8).collect(),
            })
            .collect();
        let expected: Vec<u8> = replies.iter().flat_map(|r| r.head.iter().chain(&r.data).copied()).collect();
        for step in [1usize, 7, 4096, 1 << 20] {
            let mut w = ReplyWriter::new(Trickle { took: Vec::new(), step });
            for r in &replies {
                w.push(r).await.unwrap();
            }
            w.flush().await.unwrap();
            assert!(w.buf.is_empty(), "a flush left bytes in the buffer");
            assert!(w.w.took == expected, "socket taking {step} bytes at a time: the bytes differ");
        }
    }

    /// Over a local socket, large payloads are spliced (decision 0097): the client reads exactly
    /// the bytes a copying writer sends, with payloads past what a connection holds copied, and
    /// the writer keeps every spliced payload until the client has read it.
    #[tokio::test]
    async fn spliced_replies_on_a_local_socket_arrive_unchanged_and_are_held_until_read() {
        let (a, mut b) = tokio::net::UnixStream::pair().unwrap();
        let (_, wr) = a.into_split();
        let sizes = [100usize, 512 << 10, 4096, 3 * DIRECT_PAYLOAD_BYTES + 5, shoal_splice::HELD_MAX_BYTES, 1 << 20, 7];
        let replies: Vec<Reply> = sizes
            .iter()
            .enumerate()
            .map(|(i, &n)| Reply {
                head: vec![0xB0 + i as u8; 16 + i],
                data: (0..n).map(|b| (b.wrapping_mul(13) + i) as u8).collect(),
            })
            .collect();
        let expected: Vec<u8> = replies.iter().flat_map(|r| r.head.iter().chain(&r.data).copied()).collect();
        let reader = tokio::spawn(async move {
            let mut got = vec![0u8; expected.len()];
            b.read_exact(&mut got).await.unwrap();
            assert!(got == expected, "the spliced stream differs from the copied one");
            b
        });
        let mut w = ReplyWriter::new(wr);
        assert!(w.splicer.is_some(), "a local socket's writer does not splice");
        for r in &replies {
            w.push(r).await.unwrap();
        }
        w.flush().await.unwrap();
        let mut b = reader.await.unwrap();
        w.release_if_read();
        assert!(!w.holds(), "payloads still held after the client read everything");

        // A payload spliced and not read yet is held: its memory cannot be reused meanwhile.
        let data = bytes::Bytes::from(vec![0x5A; 2 * DIRECT_PAYLOAD_BYTES]);
        w.push(&Reply { head: b"head".to_vec(), data: data.clone() }).await.unwrap();
        w.flush().await.unwrap();
        w.release_if_read();
        assert!(w.holds(), "a spliced payload was let go before the client read it");
        let mut got = vec![0u8; 4 + data.len()];
        b.read_exact(&mut got).await.unwrap();
        assert!(got[..4] == *b"head" && got[4..] == data[..]);
        w.release_if_read();
        assert!(!w.holds());
        assert!(data.is_unique(), "the writer kept a handle to a payload the client has read");
    }

    /// A socket that hands out at most `step` bytes per read.
    struct Dribble {
        bytes: Vec<u8>,
        at: usize,
        step: usize,
    }

    impl AsyncRead for Dribble {
        fn poll_read(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
            buf: &mut tokio::io::ReadBuf<'_>,
        ) -> Poll<std::io::Result<()>> {
            let n = buf.remaining().min(self.step).min(self.bytes.len() - self.at);
            let at = self.at;
            buf.put_slice(&self.bytes[at..at + n]);
            self.at += n;
            Poll::Ready(Ok(()))
        }
    }

    /// Payloads small and large, each followed by the bytes of the next request, come out whole
    /// and leave the next request's bytes in place, however the socket hands them out; a large
    /// payload's tail is read past the buffer.
    #[tokio::test]
    async fn payloads_are_read_whole_and_leave_the_next_request_in_place() {
        let sizes = [0usize, 1, 4096, DIRECT_PAYLOAD_BYTES - 1, DIRECT_PAYLOAD_BYTES, 512 << 10, IO_BUFFER_BYTES + 7];
        let mut wire = Vec::new();
        for (i, &n) in sizes.iter().enumerate() {
            wire.extend((0..n).map(|b| (b * 7 + i) as u8));
            wire.extend_from_slice(&[0xEE; REQUEST_BYTES]);
        }
        for step in [1usize, 28, 4096, 100_000, 1 << 20] {
            let mut r = BufReader::with_capacity(REQUEST_BUFFER_BYTES, Dribble { bytes: wire.clone(), at: 0, step });
            for (i, &n) in sizes.iter().enumerate() {
                let mut data = Vec::new();
                read_payload(&mut r, n, &mut data).await.unwrap();
                assert!(
                    data.iter().enumerate().all(|(b, &v)| v == (b * 7 + i) as u8),
                    "payload {i} differs at step {step}"
                );
                assert_eq!(data.len(), n);
                let mut next = [0u8; REQUEST_BYTES];
                r.read_exact(&mut next).await.unwrap();
                assert_eq!(next, [0xEE; REQUEST_BYTES], "the bytes after payload {i} at step {step}");
            }
        }
        // A truncated payload is an error, not a short payload.
        let mut r = BufReader::new(Dribble { bytes: vec![1; 100_000], at: 0, step: 4096 });
        let err = read_payload(&mut r, 200_000, &mut Vec::new()).await.unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::UnexpectedEof);
    }
}
