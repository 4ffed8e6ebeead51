//! The request body deadline. hyper's header timeout ends once a request's headers are in; a
//! client that then sends part of a body and stops would hold its connection, and a descriptor,
//! for as long as it likes (enough of them starve every other client of descriptors). Here a
//! body must arrive whole within a deadline counted from its headers; a handler still waiting on
//! it then gets an error, the client `408 request_timeout`, and hyper closes the connection
//! since the body was never finished.
//!
//! Only reading the request body is timed: a response (an SSE stream lasts hours) never is, and
//! a request without a body is passed through untouched, with nothing allocated.
//!
//! An answer given before the body was read (a refusal: `401`, `403`, `404`, `429`...) waits for
//! the rest of the body, up to [`MAX_REQUEST_BODY_BYTES`] and within the same deadline. Over
//! HTTP/2 the stream would otherwise be reset while the client is still sending, and clients
//! (curl, browsers) then report a protocol error instead of the answer; over HTTP/1.1 the
//! connection stays usable.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::http::{header, HeaderValue, Request, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::future::RouteFuture;
use bytes::Bytes;
use http_body::{Body as HttpBody, Frame, SizeHint};
use hyper::body::Incoming;
use pin_project_lite::pin_project;
use tower::Service;
use turnstream_protocol::limits::MAX_REQUEST_BODY_BYTES;

use crate::gateway::AppError;

/// The router behind a body deadline: the service each connection runs.
#[derive(Clone)]
pub struct BodyDeadline {
    app: axum::Router,
    limit: Duration,
}

impl BodyDeadline {
    pub fn new(app: axum::Router, limit: Duration) -> Self {
        BodyDeadline { app, limit }
    }
}

/// The error a body gives when its deadline passed.
#[derive(Debug)]
pub struct BodyTimedOut(pub Duration);

impl std::fmt::Display for BodyTimedOut {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the request body did not arrive within {} s",
            self.0.as_secs_f64()
        )
    }
}

impl std::error::Error for BodyTimedOut {}

impl Service<Request<Incoming>> for BodyDeadline {
    type Response = Response;
    type Error = Infallible;
    type Future = DeadlineFuture;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    // The router is always ready (`poll_ready` is `Ready`), so it is called directly.
    fn call(&mut self, req: Request<Incoming>) -> DeadlineFuture {
        if req.body().is_end_stream() {
            return DeadlineFuture {
                inner: self.app.call(req.map(Body::new)),
                shared: None,
                draining: None,
            };
        }
        let shared = Arc::new(Shared::default());
        let limit = self.limit;
        let req = req.map(|inner| {
            Body::new(DeadlineBody {
                inner: Some(inner),
                sleep: Some(Box::pin(tokio::time::sleep(limit))),
                shared: shared.clone(),
                limit,
            })
        });
        DeadlineFuture {
            inner: self.app.call(req),
            shared: Some((shared, limit)),
            draining: None,
        }
    }
}

/// What a request's body and the answer to it share.
#[derive(Default)]
struct Shared {
    /// The deadline passed while the handler was reading.
    expired: AtomicBool,
    /// The unread rest of a body the handler dropped before its end, with its deadline.
    rest: Mutex<Option<Rest>>,
}

struct Rest {
    body: Incoming,
    sleep: Pin<Box<tokio::time::Sleep>>,
    read: usize,
}

impl Rest {
    /// Ready when the body has ended, failed, passed its deadline or its size limit.
    fn poll_drained(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        loop {
            match Pin::new(&mut self.body).poll_frame(cx) {
                Poll::Ready(Some(Ok(frame))) => {
                    self.read += frame.data_ref().map_or(0, Bytes::len);
                    if self.read > MAX_REQUEST_BODY_BYTES {
                        return Poll::Ready(());
                    }
                }
                Poll::Ready(_) => return Poll::Ready(()),
                Poll::Pending => return self.sleep.as_mut().poll(cx),
            }
        }
    }
}

pin_project! {
    /// The router's answer, replaced by `408 request_timeout` when the body's deadline passed,
    /// and held back while the unread rest of the body arrives.
    pub struct DeadlineFuture {
        #[pin]
        inner: RouteFuture<Infallible>,
        shared: Option<(Arc<Shared>, Duration)>,
        draining: Option<(Response, Rest)>,
    }
}

impl Future for DeadlineFuture {
    type Output = Result<Response, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        if let Some((_, rest)) = this.draining.as_mut() {
            if rest.poll_drained(cx).is_pending() {
                return Poll::Pending;
            }
            return match this.draining.take() {
                Some((res, _)) => Poll::Ready(Ok(res)),
                None => Poll::Pending,
            };
        }
        let res = match this.inner.poll(cx) {
            Poll::Ready(Ok(res)) => res,
            Poll::Ready(Err(e)) => match e {},
            Poll::Pending => return Poll::Pending,
        };
        let Some((shared, limit)) = this.shared else {
            return Poll::Ready(Ok(res));
        };
        // Whatever the handler made of the failed read (axum reports it as a bad body), the
        // cause was the client's slowness.
        if shared.expired.load(Ordering::Acquire) {
            let mut res = AppError::new(
                StatusCode::REQUEST_TIMEOUT,
                "request_timeout",
                BodyTimedOut(*limit).to_string(),
            )
            .into_response();
            res.headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
            return Poll::Ready(Ok(res));
        }
        let rest = shared
            .rest
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .take();
        match rest {
            Some(mut rest) => {
                if rest.poll_drained(cx).is_ready() {
                    return Poll::Ready(Ok(res));
                }
                *this.draining = Some((res, rest));
                Poll::Pending
            }
            None => Poll::Ready(Ok(res)),
        }
    }
}

/// A request body that fails once its deadline has passed.
struct DeadlineBody {
    /// Taken only on drop, to hand an unread rest to the answer.
    inner: Option<Incoming>,
    /// Boxed so the body is `Unpin`; only requests that have a body pay for it.
    sleep: Option<Pin<Box<tokio::time::Sleep>>>,
    shared: Arc<Shared>,
    limit: Duration,
}

impl Drop for DeadlineBody {
    fn drop(&mut self) {
        let (Some(body), Some(sleep)) = (self.inner.take(), self.sleep.take()) else {
            return;
        };
        if body.is_end_stream() || self.shared.expired.load(Ordering::Acquire) {
            return;
        }
        *self
            .shared
            .rest
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(Rest {
            body,
            sleep,
            read: 0,
        });
    }
}

impl HttpBody for DeadlineBody {
    type Data = Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = &mut *self;
        let (Some(inner), Some(sleep)) = (this.inner.as_mut(), this.sleep.as_mut()) else {
            return Poll::Ready(None);
        };
        if let Poll::Ready(frame) = Pin::new(inner).poll_frame(cx) {
            return Poll::Ready(frame.map(|f| f.map_err(Into::into)));
        }
        if sleep.as_mut().poll(cx).is_ready() {
            this.shared.expired.store(true, Ordering::Release);
            return Poll::Ready(Some(Err(Box::new(BodyTimedOut(this.limit)))));
        }
        Poll::Pending
    }

    fn is_end_stream(&self) -> bool {
        self.inner.as_ref().is_none_or(Incoming::is_end_stream)
    }

    fn size_hint(&self) -> SizeHint {
        self.inner
            .as_ref()
            .map_or_else(|| SizeHint::with_exact(0), Incoming::size_hint)
    }
}
