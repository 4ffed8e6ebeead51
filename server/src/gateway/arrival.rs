//! When a request arrived: the outermost layer stamps it, and a handler that times its own stage
//! (a message's `POST`, up to its write handed to the journal writer) reads the stamp.

use std::time::Instant;

use axum::extract::Request;
use axum::middleware::Next;
use axum::response::Response;

/// The instant the server began handling a request (its head read, before every other layer).
#[derive(Debug, Clone, Copy)]
pub(super) struct Arrived(pub Instant);

/// Middleware on every request: stamps its arrival.
pub(super) async fn stamp(mut req: Request, next: Next) -> Response {
    req.extensions_mut().insert(Arrived(Instant::now()));
    next.run(req).await
}
