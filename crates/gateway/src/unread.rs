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
//!
//! The same botocore trait needs a close after any answer to an `Expect: 100-continue` request
//! that was not preceded by `100 Continue`, even one whose body was read whole. botocore takes such
//! an answer as its reply to the expectation and keeps its status line for the connection: the
//! next request on it that expects to continue reads its answer with that status and no status
//! line of its own, and waits for ever (an empty `PutObject`, a directory marker, followed by any
//! other upload hung boto3 until its read timed out). hyper sends `100 Continue` only when the
//! body is asked for and has bytes to come; so a request that expected to continue and had an
//! empty body, or whose body was never asked for, ends its connection.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};

/// A request body that records when it has been asked for and when it has been read to its end.
pub struct Tracked<B> {
    inner: B,
    state: Arc<State>,
}

struct State {
    ended: AtomicBool,
    polled: AtomicBool,
    /// The request asked to continue before sending its body, and its body was not empty: only
    /// then may a `100 Continue` have been sent.
    continue_possible: bool,
    expects_continue: bool,
}

/// The other side of a [`Tracked`] body: asks whether it ended.
#[derive(Clone)]
pub struct Ended(Arc<State>);

impl Ended {
    /// True once the body's last byte was read (at once for a request without a body).
    pub fn ended(&self) -> bool {
        self.0.ended.load(Ordering::Acquire)
    }

    /// Whether the connection must close after the answer: its body was not read to its end,
    /// or it expected to continue and no `100 Continue` went out (see the module's doc).
    pub fn must_close(&self) -> bool {
        let continued = self.0.continue_possible && self.0.polled.load(Ordering::Acquire);
        !self.ended() || (self.0.expects_continue && !continued)
    }
}

/// Wraps `body` of a request that sent `Expect: 100-continue` if `expects_continue`; the
/// [`Ended`] tells later whether it was read to its end and whether the connection must close.
pub fn track<B: Body>(body: B, expects_continue: bool) -> (Tracked<B>, Ended) {
    let empty = body.is_end_stream();
    let state = Arc::new(State {
        ended: AtomicBool::new(empty),
        polled: AtomicBool::new(false),
        continue_possible: expects_continue && !empty,
        expects_continue,
    });
    (Tracked { inner: body, state: state.clone() }, Ended(state))
}

/// Whether request `headers` ask the server to confirm before the body is sent.
pub fn expects_continue(headers: &hyper::HeaderMap) -> bool {
    headers.get(hyper::header::EXPECT).is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"))
}

impl<B: Body<Data = Bytes> + Unpin> Body for Tracked<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        self.state.polled.store(true, Ordering::Release);
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        // The end is either the last frame (hyper knows the length) or the stream's `None`.
        if matches!(polled, Poll::Ready(None)) || self.inner.is_end_stream() {
            self.state.ended.store(true, Ordering::Release);
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

/// Marks `resp` as the connection's last when [`Ended::must_close`] says so.
pub fn close_if_unread<B>(resp: &mut hyper::Response<B>, ended: &Ended) {
    if ended.must_close() {
        resp.headers_mut().insert(hyper::header::CONNECTION, hyper::header::HeaderValue::from_static("close"));
    }
}
