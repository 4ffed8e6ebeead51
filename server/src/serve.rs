//! The HTTP/1.1 accept loop: hyper's HTTP/1 connection driving the axum router directly.
//!
//! `axum::serve` rebuilds the router's route table for every connection (its make-service
//! clones the path maps) and drives connections through hyper-util's HTTP/1-or-2 connection.
//! An SSE stream holds its connection for hours, so what a connection keeps is what an idle
//! stream costs: here a connection holds one clone of the router (reference counts), hyper's
//! HTTP/1 buffers and the stream body, nothing else. Sockets get `TCP_NODELAY` (a stream's frames
//! are small writes that must not wait for the previous one's ACK). The limits of
//! [`crate::edge`] apply here: request headers and bodies have deadlines, each peer address has a
//! cap on open connections, and hyper's own parse-error answers carry the JSON error shape.

use std::time::Duration;

use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

use crate::edge::body_deadline::BodyDeadline;
use crate::edge::parse_errors::{ParseErrorJson, MAX_REQUEST_HEAD_BYTES};
use crate::edge::peer_limit::{self, PeerLimit};
use crate::edge::ConnLimits;

/// Serves `app` on `listener` until `stop` is cancelled; then stops accepting, asks every open
/// connection to close once its current response is done, and returns when all have closed.
pub async fn serve(
    listener: TcpListener,
    app: axum::Router,
    limits: ConnLimits,
    stop: CancellationToken,
) {
    let graceful = GracefulShutdown::new();
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        .max_header_size(MAX_REQUEST_HEAD_BYTES);
    let peers = PeerLimit::new(limits.max_connections_per_ip);
    let service = BodyDeadline::new(app, limits.body_timeout);
    loop {
        let (tcp, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) if is_connection_error(&e) => continue,
                Err(e) => {
                    // Out of file descriptors or memory: back off instead of spinning.
                    tracing::error!(error = %e, "accept failed; retrying in 1 s");
                    tokio::select! {
                        _ = tokio::time::sleep(Duration::from_secs(1)) => continue,
                        _ = stop.cancelled() => break,
                    }
                }
            },
            _ = stop.cancelled() => break,
        };
        let slot = match peers.admit(peer.ip()) {
            Ok(slot) => slot,
            Err(()) => {
                tracing::debug!(peer = %peer.ip(), "connection refused: too many from this address");
                tokio::spawn(peer_limit::refuse(tcp, limits.max_connections_per_ip));
                continue;
            }
        };
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::debug!(error = %e, "TCP_NODELAY not set");
        }
        let io = TokioIo::new(ParseErrorJson::new(tcp));
        // Handlers learn the peer's address (per-client limits without auth) as axum's
        // `ConnectInfo`, set on each request without rebuilding the router per connection.
        let svc =
            service
                .clone()
                .map_request(move |mut req: hyper::Request<hyper::body::Incoming>| {
                    req.extensions_mut()
                        .insert(axum::extract::ConnectInfo(peer));
                    req
                });
        let conn = builder.serve_connection(io, TowerToHyperService::new(svc));
        let conn = graceful.watch(conn);
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::trace!(error = %e, "connection ended with an error");
            }
            // The peer's place is free once its connection is.
            drop(slot);
        });
    }
    drop(listener);
    graceful.shutdown().await;
}

/// Errors of one connection attempt (the peer gave up), not of the listener.
fn is_connection_error(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::ConnectionRefused
            | std::io::ErrorKind::ConnectionAborted
            | std::io::ErrorKind::ConnectionReset
    )
}
