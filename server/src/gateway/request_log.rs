//! One structured line per request (target `turnstream::access`): method, the matched route
//! template (never the raw URI, which may carry an `access_token`), status and duration. A
//! stream gets its line when its response starts and a second one when it ends.

use std::time::Instant;

use axum::body::Body;
use axum::extract::{MatchedPath, Request};
use axum::http::{header, Method, Response};
use axum::middleware::Next;
use futures::StreamExt;

use crate::logging::ACCESS_TARGET;

/// Route logged for a request no route matched (static files, unknown paths).
const UNMATCHED: &str = "(fallback)";

/// Middleware on every route: logs the request once its response head is ready.
pub(crate) async fn log_request(req: Request, next: Next) -> Response<Body> {
    // Costs nothing beyond this check when the access target is filtered out.
    if !tracing::enabled!(target: ACCESS_TARGET, tracing::Level::INFO) {
        return next.run(req).await;
    }
    let start = Instant::now();
    let method = req.method().clone();
    let route = req.extensions().get::<MatchedPath>().cloned();
    let res = next.run(req).await;
    let line = Line {
        method,
        route,
        status: res.status().as_u16(),
        start,
    };
    line.emit("request");
    if line.status == 200 && is_event_stream(&res) {
        // The stream's end is logged when its body is dropped: finished, or the client left.
        let (parts, body) = res.into_parts();
        let ended = StreamEnd(line);
        let body = body.into_data_stream().map(move |chunk| {
            let _ = &ended;
            chunk
        });
        return Response::from_parts(parts, Body::from_stream(body));
    }
    res
}

fn is_event_stream(res: &Response<Body>) -> bool {
    res.headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"text/event-stream"))
}

/// What a request's line says.
struct Line {
    method: Method,
    route: Option<MatchedPath>,
    status: u16,
    start: Instant,
}

impl Line {
    fn emit(&self, message: &'static str) {
        let duration_ms = self.start.elapsed().as_micros() as f64 / 1000.0;
        let route = self.route.as_ref().map_or(UNMATCHED, MatchedPath::as_str);
        tracing::info!(
            target: ACCESS_TARGET,
            method = self.method.as_str(),
            route,
            status = self.status,
            duration_ms,
            "{message}"
        );
    }
}

/// Logs the end of a stream, with its whole duration, when the response body is dropped.
struct StreamEnd(Line);

impl Drop for StreamEnd {
    fn drop(&mut self) {
        self.0.emit("stream ended");
    }
}
