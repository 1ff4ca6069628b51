//! Whether a request's body was read to its end before the response went out.
//!
//! A gateway answers many requests without reading their bodies: a PUT refused by an ACL, a
//! public access block or a missing bucket is answered from its headers alone. The connection
//! cannot carry another request after that, because the unread body (or, for a client that sent
//! `Expect: 100-continue` and now waits, the body it may still send) would be read as the next
//! request; hyper closes it. HTTP asks a server that answers before reading the whole body to
//! say whether it will close the connection (RFC 9110, section 10.1.1), and clients need to
//! hear it: without `Connection: close` a client may send its next request on the connection
//! hyper is closing. botocore then even reports the previous request's status for it (its
//! connection keeps the status line of the refused `Expect: 100-continue` request; a bare 403
//! "Forbidden" with no headers is what that looks like).

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};

/// A request body that records when it has been read to its end.
pub struct Tracked<B> {
    inner: B,
    ended: Arc<AtomicBool>,
}

/// The other side of a [`Tracked`] body: asks whether it ended.
#[derive(Clone)]
pub struct Ended(Arc<AtomicBool>);

impl Ended {
    /// True once the body's last byte was read (at once for a request without a body).
    pub fn ended(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }
}

/// Wraps `body`; the [`Ended`] tells later whether it was read to its end.
pub fn track<B: Body>(body: B) -> (Tracked<B>, Ended) {
    let ended = Arc::new(AtomicBool::new(body.is_end_stream()));
    (Tracked { inner: body, ended: ended.clone() }, Ended(ended))
}

impl<B: Body<Data = Bytes> + Unpin> Body for Tracked<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        // The end is either the last frame (hyper knows the length) or the stream's `None`.
        if matches!(polled, Poll::Ready(None)) || self.inner.is_end_stream() {
            self.ended.store(true, Ordering::Release);
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// Marks `resp` as the connection's last when its request's body was not read to its end.
pub fn close_if_unread<B>(resp: &mut hyper::Response<B>, ended: &Ended) {
    if !ended.ended() {
        resp.headers_mut().insert(hyper::header::CONNECTION, hyper::header::HeaderValue::from_static("close"));
    }
}
