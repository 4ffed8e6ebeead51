//! The HTTP/1.1 accept loop: hyper's HTTP/1 connection driving the axum router directly.
//!
//! `axum::serve` rebuilds the router's route table for every connection (its make-service
//! clones the path maps) and drives connections through hyper-util's HTTP/1-or-2 connection.
//! An SSE stream holds its connection for hours, so what a connection keeps is what an idle
//! stream costs: here a connection holds one clone of the router (reference counts), hyper's
//! HTTP/1 buffers and the stream body, nothing else. Sockets get `TCP_NODELAY` (a stream's frames
//! are small writes that must not wait for the previous one's ACK) and request headers must
//! arrive within [`HEADER_READ_TIMEOUT`].

use std::time::Duration;

use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

/// Time a client has to send a request's headers (slow-header clients are cut off after it).
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// Serves `app` on `listener` until `stop` is cancelled; then stops accepting, asks every open
/// connection to close once its current response is done, and returns when all have closed.
pub async fn serve(listener: TcpListener, app: axum::Router, stop: CancellationToken) {
    let graceful = GracefulShutdown::new();
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT);
    loop {
        let tcp = tokio::select! {
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
        let (tcp, peer) = tcp;
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::debug!(error = %e, "TCP_NODELAY not set");
        }
        // Handlers learn the peer's address (per-client limits without auth) as axum's
        // `ConnectInfo`, set on each request without rebuilding the router per connection.
        let svc = app.clone().map_request(
            move |mut req: axum::extract::Request<hyper::body::Incoming>| {
                req.extensions_mut()
                    .insert(axum::extract::ConnectInfo(peer));
                req
            },
        );
        let conn = builder.serve_connection(TokioIo::new(tcp), TowerToHyperService::new(svc));
        let conn = graceful.watch(conn);
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::trace!(error = %e, "connection ended with an error");
            }
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
