//! How long the gateway waits on a client. A connection holds one of the gateway's connection
//! permits, and a request its share of the memory budget, for as long as it lasts; a client
//! that stops sending or reading (a slow or stalled client, one that vanished without closing
//! its connection, or one that means harm) must not hold them for ever. Three waits are bounded,
//! each only while the gateway is waiting on the client, never while a request waits on the
//! cluster (a PG peering may take longer, and such a request must wait, not fail):
//!
//! - a request's headers, including the wait for the next request on a kept-alive connection:
//!   hyper's header read timeout (set in `server.rs`);
//! - the next bytes of a request body, once the gateway asks for them: [`TimedBody`], after
//!   which the request is answered `RequestTimeout`, as S3 answers it, and the connection closed;
//! - a client reading the answer: [`Watched`], whose writes fail once the socket has taken no
//!   byte for that long, which ends the connection.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Sleep;

/// The error a body or a socket returns when its client let the wait run out.
#[derive(Debug, thiserror::Error)]
#[error("the client sent or read nothing for {0:?}")]
pub struct ClientIdle(pub Duration);

/// A stall timer: armed when an operation on the client first has to wait, disarmed when it
/// makes progress. Only the waiting side arms it, so time spent elsewhere never counts.
struct Stall {
    limit: Duration,
    timer: Option<Pin<Box<Sleep>>>,
}

impl Stall {
    fn new(limit: Duration) -> Stall {
        Stall { limit, timer: None }
    }

    /// Called when the operation is pending: true once it has been pending for the limit.
    fn expired(&mut self, cx: &mut Context<'_>) -> bool {
        let limit = self.limit;
        let timer = self.timer.get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
        timer.as_mut().poll(cx).is_ready()
    }

    fn progressed(&mut self) {
        self.timer = None;
    }
}

/// A request body whose client must send its next bytes within a limit once asked for them.
pub struct TimedBody<B> {
    inner: B,
    stall: Stall,
    idled: Arc<AtomicBool>,
}

/// Tells whether a [`TimedBody`] ran out of time.
#[derive(Clone)]
pub struct Idled(Arc<AtomicBool>);

impl Idled {
    pub fn idled(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }
}

/// Wraps `body` with a wait of at most `limit` for each of its frames.
pub fn timed_body<B>(body: B, limit: Duration) -> (TimedBody<B>, Idled) {
    let idled = Arc::new(AtomicBool::new(false));
    (TimedBody { inner: body, stall: Stall::new(limit), idled: idled.clone() }, Idled(idled))
}

impl<B> Body for TimedBody<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    type Data = Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        match Pin::new(&mut self.inner).poll_frame(cx) {
            Poll::Pending => {
                if self.stall.expired(cx) {
                    self.idled.store(true, Ordering::Release);
                    return Poll::Ready(Some(Err(Box::new(ClientIdle(self.stall.limit)))));
                }
                Poll::Pending
            }
            Poll::Ready(frame) => {
                self.stall.progressed();
                Poll::Ready(frame.map(|f| f.map_err(Into::into)))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// A client connection whose writes fail once the client has read nothing for a limit (the
/// socket took no byte). Reads pass through: hyper and [`TimedBody`] bound them.
pub struct Watched<IO> {
    io: IO,
    stall: Stall,
}

impl<IO> Watched<IO> {
    pub fn new(io: IO, limit: Duration) -> Watched<IO> {
        Watched { io, stall: Stall::new(limit) }
    }

    /// Times a write, flush or shutdown that `polled` the socket: progress disarms the timer; a
    /// pending one stays pending until it has waited for the limit, then fails.
    fn timed<T>(&mut self, cx: &mut Context<'_>, polled: Poll<std::io::Result<T>>) -> Poll<std::io::Result<T>> {
        if polled.is_ready() {
            self.stall.progressed();
            return polled;
        }
        if self.stall.expired(cx) {
            let idle = ClientIdle(self.stall.limit);
            return Poll::Ready(Err(std::io::Error::new(std::io::ErrorKind::TimedOut, idle)));
        }
        Poll::Pending
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for Watched<IO> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for Watched<IO> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.io).poll_write(cx, buf);
        self.timed(cx, polled)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.io).poll_write_vectored(cx, bufs);
        self.timed(cx, polled)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let polled = Pin::new(&mut self.io).poll_flush(cx);
        self.timed(cx, polled)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let polled = Pin::new(&mut self.io).poll_shutdown(cx);
        self.timed(cx, polled)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A body fed by a channel, as hyper's is by its connection.
    struct Channel(tokio::sync::mpsc::Receiver<Bytes>);

    impl Body for Channel {
        type Data = Bytes;
        type Error = std::convert::Infallible;

        fn poll_frame(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
            self.0.poll_recv(cx).map(|b| b.map(|b| Ok(Frame::data(b))))
        }
    }

    async fn next_frame<B: Body + Unpin>(body: &mut B) -> Option<Result<Frame<B::Data>, B::Error>> {
        std::future::poll_fn(|cx| Pin::new(&mut *body).poll_frame(cx)).await
    }

    /// A body whose client sends a frame every 9 s is read whole however long it takes in all;
    /// once the client stalls for the 10 s limit, the next frame is an error that says so.
    #[tokio::test(start_paused = true)]
    async fn a_body_fails_only_when_its_client_stalls_for_the_limit() {
        let (tx, rx) = tokio::sync::mpsc::channel(1);
        let (mut timed, idled) = timed_body(Channel(rx), Duration::from_secs(10));
        let sender = tokio::spawn(async move {
            for _ in 0..5 {
                tokio::time::sleep(Duration::from_secs(9)).await;
                tx.send(Bytes::from_static(b"piece")).await.unwrap();
            }
            tokio::time::sleep(Duration::from_secs(11)).await;
            tx
        });
        for _ in 0..5 {
            let frame = next_frame(&mut timed).await.expect("a frame").expect("not an error");
            assert_eq!(frame.into_data().unwrap(), Bytes::from_static(b"piece"));
        }
        assert!(!idled.idled());
        let err = next_frame(&mut timed).await.expect("an error").unwrap_err();
        assert!(err.downcast_ref::<ClientIdle>().is_some(), "{err}");
        assert!(idled.idled());
        drop(sender.await.unwrap());
    }

    /// Writes to a client that reads a little every 9 s go on; once it reads nothing for the
    /// 10 s limit, the write fails with a timeout.
    #[tokio::test(start_paused = true)]
    async fn writes_fail_only_when_the_client_reads_nothing_for_the_limit() {
        let (a, mut b) = tokio::io::duplex(4096);
        let mut w = Watched::new(a, Duration::from_secs(10));
        let reader = tokio::spawn(async move {
            let mut got = vec![0u8; 64 << 10];
            for chunk in got.chunks_mut(4096) {
                tokio::time::sleep(Duration::from_secs(9)).await;
                b.read_exact(chunk).await.unwrap();
            }
            (got, b)
        });
        let data: Vec<u8> = (0..64 << 10).map(|i| (i % 251) as u8).collect();
        w.write_all(&data).await.expect("a client that keeps reading is written to");
        let (got, _b) = reader.await.unwrap();
        assert!(got == data);
        let err = w.write_all(&data).await.unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::TimedOut);
    }
}
