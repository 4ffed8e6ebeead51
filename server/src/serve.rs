//! Binding the listener (with a deep backlog) and the accept loop: hyper's HTTP/1 connection (and, over TLS, its HTTP/2 connection) driving
//! the axum router directly.
//!
//! `axum::serve` rebuilds the router's route table for every connection (its make-service
//! clones the path maps) and drives connections through hyper-util's HTTP/1-or-2 connection.
//! An SSE stream holds its connection for hours, so what a connection keeps is what an idle
//! stream costs: here a connection holds one clone of the router (reference counts), hyper's
//! HTTP/1 buffers and the stream body, nothing else. Sockets get `TCP_NODELAY` (a stream's frames
//! are small writes that must not wait for the previous one's ACK). The limits of
//! [`crate::edge`] apply here: request headers and bodies have deadlines, each peer address has a
//! cap on open connections, and hyper's own parse-error answers carry the JSON error shape. A
//! plain connection whose first request asks for an event stream is answered by the same router
//! but written without hyper ([`crate::edge::event_stream`]): an idle stream keeps no buffers.
//!
//! With TLS ([`serve_tls`], `--tls-cert`/`--tls-key`) the same loop accepts, applies the same
//! per-address cap (it counts TCP connections, however many streams an HTTP/2 connection
//! carries), and hands the socket to a task that does the handshake within the header deadline
//! and serves HTTP/2 or HTTP/1.1 by the protocol the client chose (ALPN). Over HTTP/2 a browser
//! multiplexes every tab's requests and streams on one connection. Without TLS nothing of that
//! is on the path: a plain connection costs what it did.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::response::Response;
use hyper::body::Incoming;
use hyper::server::conn::{http1, http2};
use hyper::Request;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::graceful::{GracefulShutdown, Watcher};
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

use crate::edge::body_deadline::BodyDeadline;
use crate::edge::event_stream::{self, First};
use crate::edge::parse_errors::{ParseErrorJson, MAX_REQUEST_HEAD_BYTES};
use crate::edge::peer_limit::{self, PeerLimit};
use crate::edge::ConnLimits;

/// Listen backlog: a reconnect storm must not overflow it (each dropped SYN costs a client 1 s).
pub const LISTEN_BACKLOG: u32 = 4096;

/// Binds `addr` with a deep listen backlog.
pub fn bind(addr: std::net::SocketAddr) -> std::io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(LISTEN_BACKLOG)
}

/// Streams one HTTP/2 connection may have open at once. A browser puts every tab's requests
/// and SSE streams for an origin on one connection, so this is well above the streams one client
/// may hold (`--max-streams-per-client`), which is what limits a client's streams.
pub const H2_MAX_CONCURRENT_STREAMS: u32 = 512;

/// How often an HTTP/2 connection is pinged, and how long the answer may take before the
/// connection is taken for dead (a dead peer's streams are dropped, not kept for hours).
pub const H2_KEEP_ALIVE: Duration = Duration::from_secs(20);

/// Serves `app` over plain HTTP/1.1 on `listener` until `stop` is cancelled; then stops
/// accepting, asks every open connection to close once its current response is done, and
/// returns when all have closed.
pub async fn serve(
    listener: TcpListener,
    app: axum::Router,
    limits: ConnLimits,
    stop: CancellationToken,
) {
    serve_with(listener, app, limits, None, stop).await
}

/// [`serve`] over TLS with `config` (see [`crate::tls::server_config`]): HTTP/2 or HTTP/1.1 by
/// ALPN on every connection.
pub async fn serve_tls(
    listener: TcpListener,
    app: axum::Router,
    limits: ConnLimits,
    config: Arc<rustls::ServerConfig>,
    stop: CancellationToken,
) {
    serve_with(listener, app, limits, Some(config), stop).await
}

/// What a TLS connection's task needs: the acceptor and both protocols' connection builders.
struct TlsServing {
    acceptor: TlsAcceptor,
    http1: http1::Builder,
    http2: http2::Builder<TokioExecutor>,
    /// Time a client has to complete the handshake, and an HTTP/2 connection may stay without
    /// requests (the header deadline).
    handshake_timeout: Duration,
    /// Cancelled when the server stops accepting: HTTP/2 connections then close gracefully.
    stop: CancellationToken,
}

async fn serve_with(
    listener: TcpListener,
    app: axum::Router,
    limits: ConnLimits,
    tls: Option<Arc<rustls::ServerConfig>>,
    stop: CancellationToken,
) {
    let graceful = GracefulShutdown::new();
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        .max_header_size(MAX_REQUEST_HEAD_BYTES);
    let tls = tls.map(|config| {
        let mut h2 = http2::Builder::new(TokioExecutor::new());
        h2.timer(TokioTimer::new())
            .max_concurrent_streams(H2_MAX_CONCURRENT_STREAMS)
            .max_header_list_size(MAX_REQUEST_HEAD_BYTES as u32)
            .keep_alive_interval(Some(H2_KEEP_ALIVE))
            .keep_alive_timeout(H2_KEEP_ALIVE);
        Arc::new(TlsServing {
            acceptor: TlsAcceptor::from(config),
            http1: builder.clone(),
            http2: h2,
            handshake_timeout: limits.header_timeout,
            stop: stop.clone(),
        })
    });
    let peers = PeerLimit::new(limits.max_connections_per_ip);
    let service = BodyDeadline::new(app.clone(), limits.body_timeout);
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
                // A TLS client cannot read a plain-text 429; it is closed without a handshake
                // (which would cost this server more than it costs the peer).
                if tls.is_none() {
                    tokio::spawn(peer_limit::refuse(tcp, limits.max_connections_per_ip));
                }
                continue;
            }
        };
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::debug!(error = %e, "TCP_NODELAY not set");
        }
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
        if let Some(tls) = &tls {
            let (tls, watcher) = (tls.clone(), graceful.watcher());
            tokio::spawn(async move {
                serve_tls_connection(&tls, tcp, svc, watcher).await;
                drop(slot);
            });
            continue;
        }
        let (builder, watcher, app, stop) = (
            builder.clone(),
            graceful.watcher(),
            app.clone(),
            stop.clone(),
        );
        let header_timeout = limits.header_timeout;
        tokio::spawn(async move {
            // Shutdown waits for this connection while the watcher lives. Each step is boxed:
            // the task's own future stays small, and a parked stream does not carry the size
            // of hyper's connection or of the first read.
            match Box::pin(event_stream::first_request(tcp, header_timeout, &stop)).await {
                First::Stream(tcp, req) => {
                    // A task of its own, holding only what the stream needs: this one ends
                    // here with everything it kept for hyper's connections.
                    tokio::spawn(async move {
                        event_stream::serve(tcp, req, peer, app).await;
                        drop((watcher, slot));
                    });
                    return;
                }
                First::Other(io) => {
                    let io = TokioIo::new(ParseErrorJson::new(io));
                    let conn = builder.serve_connection(io, TowerToHyperService::new(svc));
                    if let Err(e) = Box::pin(watcher.watch(conn)).await {
                        tracing::trace!(error = %e, "connection ended with an error");
                    }
                }
                First::Gone => drop(watcher),
            }
            // The peer's place is free once its connection is.
            drop(slot);
        });
    }
    drop(listener);
    graceful.shutdown().await;
}

/// One TLS connection: the handshake within its deadline, then HTTP/2 if the client chose `h2`,
/// else HTTP/1.1 as on a plain connection. `watcher` covers the handshake too, so shutdown
/// waits for a connection that is still shaking hands (no longer than the deadline).
async fn serve_tls_connection<S>(tls: &TlsServing, tcp: TcpStream, svc: S, watcher: Watcher)
where
    S: tower::Service<Request<Incoming>, Response = Response, Error = Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    // Boxed: the handshake's state (a whole rustls connection and a timer) is freed once it is
    // done, not kept in this task's future for as long as the connection lives.
    let handshake = Box::pin(tokio::time::timeout(
        tls.handshake_timeout,
        tls.acceptor.accept(tcp),
    ));
    let stream = match handshake.await {
        Ok(Ok(stream)) => stream,
        Ok(Err(e)) => {
            tracing::debug!(error = %e, "TLS handshake failed");
            return;
        }
        Err(_) => {
            tracing::debug!("TLS handshake timed out");
            return;
        }
    };
    let h2 = stream.get_ref().1.alpn_protocol() == Some(crate::tls::ALPN_H2);
    let result = if h2 {
        serve_h2(tls, stream, svc, watcher).await
    } else {
        let io = TokioIo::new(ParseErrorJson::new(stream));
        let conn = tls
            .http1
            .serve_connection(io, TowerToHyperService::new(svc));
        watcher.watch(conn).await
    };
    if let Err(e) = result {
        tracing::trace!(error = %e, h2, "TLS connection ended with an error");
    }
}

/// One HTTP/2 connection. Its requests are counted from their call until their response body is
/// dropped (an SSE stream counts for as long as it is open): a connection with none open, and
/// none started, for a whole header deadline is closed (GOAWAY), as an idle HTTP/1.1 connection
/// is at its header deadline, so a client that shakes hands and then sends nothing (or only
/// answers pings) cannot hold its place. Shutdown closes it the same way, once `stop` fires;
/// `watcher` makes shutdown wait for it.
async fn serve_h2<S>(
    tls: &TlsServing,
    stream: tokio_rustls::server::TlsStream<TcpStream>,
    svc: S,
    watcher: Watcher,
) -> Result<(), hyper::Error>
where
    S: tower::Service<Request<Incoming>, Response = Response, Error = Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    let activity = Arc::new(Activity::default());
    let counted = activity.clone();
    let svc = svc
        .map_request(host_from_authority)
        .map_future(move |response: S::Future| {
            let in_flight = InFlight::start(&counted);
            async move {
                response.await.map(|res| {
                    res.map(|body| {
                        axum::body::Body::new(Tracked {
                            inner: body,
                            _in_flight: in_flight,
                        })
                    })
                })
            }
        });
    let conn = tls.http2.serve_connection(
        TokioIo::new(stream),
        BoxedCall(TowerToHyperService::new(svc)),
    );
    tokio::pin!(conn);
    let idle = tls.handshake_timeout;
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + idle, idle);
    let mut closing = false;
    let result = loop {
        tokio::select! {
            result = conn.as_mut() => break result,
            _ = tls.stop.cancelled(), if !closing => {
                closing = true;
                conn.as_mut().graceful_shutdown();
            }
            _ = tick.tick(), if !closing => {
                let started = activity.started.swap(false, Ordering::AcqRel);
                if !started && activity.open.load(Ordering::Acquire) == 0 {
                    tracing::trace!("idle HTTP/2 connection closed");
                    closing = true;
                    conn.as_mut().graceful_shutdown();
                }
            }
        }
    };
    drop(watcher);
    result
}

/// A hyper service whose calls' futures are boxed. hyper's HTTP/2 connection runs each stream
/// as a task that holds the service's future or the response body (an enum of the two), so an
/// unboxed future (the request, the router's routing, the service stack) is paid for by every
/// open stream for as long as its body lives; boxed, it is a pointer, its box freed once the
/// response is there.
#[derive(Clone)]
struct BoxedCall<S>(S);

impl<S, R> hyper::service::Service<R> for BoxedCall<S>
where
    S: hyper::service::Service<R>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn call(&self, req: R) -> Self::Future {
        Box::pin(self.0.call(req))
    }
}

/// Requests of one HTTP/2 connection in progress, and whether one started since the last look.
#[derive(Debug, Default)]
struct Activity {
    open: AtomicUsize,
    started: AtomicBool,
}

/// One request in progress; dropping it (with the response body) ends it.
struct InFlight(Arc<Activity>);

impl InFlight {
    fn start(activity: &Arc<Activity>) -> InFlight {
        activity.open.fetch_add(1, Ordering::AcqRel);
        activity.started.store(true, Ordering::Release);
        InFlight(activity.clone())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A response body that keeps its request counted as in progress until it is dropped.
struct Tracked {
    inner: axum::body::Body,
    _in_flight: InFlight,
}

impl http_body::Body for Tracked {
    type Data = bytes::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<bytes::Bytes>, axum::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// An HTTP/2 request names its host in the `:authority` pseudo-header (the request URI's
/// authority), and browsers send no `Host`; whatever reads `Host` (the same-origin check on
/// state-changing requests, above all) gets it from there, as over HTTP/1.1.
fn host_from_authority(mut req: Request<Incoming>) -> Request<Incoming> {
    if !req.headers().contains_key(http::header::HOST) {
        let host = req
            .uri()
            .authority()
            .and_then(|a| http::HeaderValue::from_str(a.as_str()).ok());
        if let Some(host) = host {
            req.headers_mut().insert(http::header::HOST, host);
        }
    }
    req
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
