//! The request body deadline. hyper's header timeout ends once a request's headers are in; a
//! client that then sends part of a body and stops would hold its connection, and a descriptor,
//! for as long as it likes (enough of them starve every other client of descriptors). Here a
//! body must arrive whole within a deadline counted from its headers; a handler still waiting on
//! it then gets an error, the client `408 request_timeout`, and hyper closes the connection
//! since the body was never finished.
//!
//! Only reading the request body is timed: a response (an SSE stream lasts hours) never is, and
//! a request without a body is passed through untouched, with nothing allocated.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
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
                expired: None,
            };
        }
        let expired = Arc::new(AtomicBool::new(false));
        let limit = self.limit;
        let req = req.map(|inner| {
            Body::new(DeadlineBody {
                inner,
                sleep: Box::pin(tokio::time::sleep(limit)),
                expired: expired.clone(),
                limit,
            })
        });
        DeadlineFuture {
            inner: self.app.call(req),
            expired: Some((expired, limit)),
        }
    }
}

pin_project! {
    /// The router's answer, replaced by `408 request_timeout` when the body's deadline passed.
    pub struct DeadlineFuture {
        #[pin]
        inner: RouteFuture<Infallible>,
        expired: Option<(Arc<AtomicBool>, Duration)>,
    }
}

impl Future for DeadlineFuture {
    type Output = Result<Response, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let res = match this.inner.poll(cx) {
            Poll::Ready(Ok(res)) => res,
            Poll::Ready(Err(e)) => match e {},
            Poll::Pending => return Poll::Pending,
        };
        match this.expired {
            // Whatever the handler made of the failed read (axum reports it as a bad body), the
            // cause was the client's slowness.
            Some((expired, limit)) if expired.load(Ordering::Acquire) => {
                let mut res = AppError::new(
                    StatusCode::REQUEST_TIMEOUT,
                    "request_timeout",
                    BodyTimedOut(*limit).to_string(),
                )
                .into_response();
                res.headers_mut()
                    .insert(header::CONNECTION, HeaderValue::from_static("close"));
                Poll::Ready(Ok(res))
            }
            _ => Poll::Ready(Ok(res)),
        }
    }
}

/// A request body that fails once its deadline has passed.
struct DeadlineBody {
    inner: Incoming,
    /// Boxed so the body is `Unpin`; only requests that have a body pay for it.
    sleep: Pin<Box<tokio::time::Sleep>>,
    expired: Arc<AtomicBool>,
    limit: Duration,
}

impl HttpBody for DeadlineBody {
    type Data = Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        if let Poll::Ready(frame) = Pin::new(&mut self.inner).poll_frame(cx) {
            return Poll::Ready(frame.map(|f| f.map_err(Into::into)));
        }
        if self.sleep.as_mut().poll(cx).is_ready() {
            self.expired.store(true, Ordering::Release);
            return Poll::Ready(Some(Err(Box::new(BodyTimedOut(self.limit)))));
        }
        Poll::Pending
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
