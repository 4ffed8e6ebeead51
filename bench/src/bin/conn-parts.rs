//! What an idle HTTP/2 + TLS connection is made of in the server, by RSS (figure 3's breakdown;
//! `turnstream-bench idle` runs it and prints its line).
//!
//! A child process (`conn-parts serve`) runs the server's accept loop
//! ([`turnstream_server::serve::serve_tls`]: the same code, settings and TLS configuration as
//! `turnstream serve --tls-cert`) with a router of one route, an event stream that never sends,
//! so what it holds is the connection and the stream's HTTP/2 and hyper parts, not turnstream's
//! stream state (figure 3's other rows); beside it, a listener that only does the TLS handshake
//! (the same rustls configuration) and keeps each TLS stream with a read pending. This process
//! opens connections to it in steps, `CONNS` each, all kept open, and reads the child's RSS
//! after each:
//!
//! 1. TLS alone: what rustls and tokio-rustls hold between records;
//! 2. HTTP/2 connections (`h2` by ALPN, preface and settings exchanged), no stream yet; minus
//!    step 1: the HTTP/2 connection (h2's codec with its read and write buffers and HPACK
//!    tables, its stream store, hyper's connection, the connection's task);
//! 3. one event stream on each: h2's stream, hyper's stream task, the response body.
//!
//! A warm-up round (kept open) first fills what the server keeps across connections (TLS
//! session tickets in a bounded cache, the runtime's slabs).
//!
//! Output: one line of JSON, bytes per connection or stream for each part.

use std::convert::Infallible;
use std::io::BufRead;
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use bytes::Bytes;
use futures::StreamExt;
use hyper::client::conn::http2::SendRequest;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use rustls::pki_types::ServerName;
use tokio::io::AsyncReadExt;
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

/// Connections in each step.
const CONNS: usize = 2_000;
/// Connections of the warm-up round, on each listener.
const WARM_UP: usize = 200;
/// Connections being opened at once.
const CONCURRENCY: usize = 32;

fn main() -> Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    if std::env::args().nth(1).as_deref() == Some("serve") {
        return rt.block_on(serve());
    }
    let _ = rlimit::increase_nofile_limit(u64::MAX);
    let parts = rt.block_on(measure())?;
    println!("{}", serde_json::to_string(&parts)?);
    Ok(())
}

/// The child: both listeners, their addresses on stdout, until stdin closes.
async fn serve() -> Result<()> {
    let _ = rlimit::increase_nofile_limit(u64::MAX);
    let ck = rcgen::generate_simple_self_signed(vec!["localhost".to_string()])?;
    let dir = tempfile::tempdir()?;
    let (cert, key) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
    std::fs::write(&cert, ck.cert.pem())?;
    std::fs::write(&key, ck.signing_key.serialize_pem())?;
    let config = turnstream_server::tls::server_config(&cert, &key)?;
    let h2 = turnstream_server::serve::bind("127.0.0.1:0".parse()?)?;
    let tls = turnstream_server::serve::bind("127.0.0.1:0".parse()?)?;
    println!("{} {}", h2.local_addr()?, tls.local_addr()?);
    let stop = CancellationToken::new();
    tokio::spawn(tls_only(tls, config.clone(), stop.clone()));
    let limits = turnstream_server::edge::ConnLimits {
        // Step 2 holds connections without streams: longer than the idle close.
        header_timeout: Duration::from_secs(300),
        body_timeout: Duration::from_secs(300),
        max_connections_per_ip: 0,
    };
    let server = tokio::spawn(turnstream_server::serve::serve_tls(
        h2,
        app(),
        limits,
        config,
        stop.clone(),
    ));
    // The parent closes stdin (or goes away) when it is done.
    tokio::task::spawn_blocking(|| {
        let mut line = String::new();
        while std::io::stdin().lock().read_line(&mut line).unwrap_or(0) > 0 {
            line.clear();
        }
    })
    .await?;
    stop.cancel();
    server.abort();
    Ok(())
}

/// The server's router, reduced to one endless event stream.
fn app() -> axum::Router {
    axum::Router::new().route(
        "/stream",
        axum::routing::get(|| async {
            let body = futures::stream::pending::<Result<Bytes, Infallible>>();
            (
                [(axum::http::header::CONTENT_TYPE, "text/event-stream")],
                axum::body::Body::from_stream(body),
            )
        }),
    )
}

/// Accepts, does the handshake, and holds each TLS stream with a read pending until `stop`.
async fn tls_only(
    listener: TcpListener,
    config: Arc<rustls::ServerConfig>,
    stop: CancellationToken,
) {
    let acceptor = tokio_rustls::TlsAcceptor::from(config);
    loop {
        let tcp = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((tcp, _)) => tcp,
                Err(_) => continue,
            },
            _ = stop.cancelled() => return,
        };
        let (acceptor, stop) = (acceptor.clone(), stop.clone());
        tokio::spawn(async move {
            let _ = tcp.set_nodelay(true);
            let Ok(mut tls) = acceptor.accept(tcp).await else {
                return;
            };
            let mut buf = [0u8; 1];
            tokio::select! {
                _ = tls.read(&mut buf) => {}
                _ = stop.cancelled() => {}
            }
        });
    }
}

#[derive(serde::Serialize)]
struct Parts {
    conns: usize,
    /// Bytes per connection: rustls and tokio-rustls at rest.
    tls: f64,
    /// Bytes per connection: HTTP/2 (h2 and hyper) and the connection's task, without streams.
    h2_connection: f64,
    /// Bytes per idle stream: h2's stream, hyper's stream task, the response body.
    stream: f64,
}

/// The child's resident memory, KiB.
fn rss_kib(pid: u32) -> Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .ok_or_else(|| anyhow!("no VmRSS for {pid}"))
}

/// The child's RSS once allocations have settled.
async fn settled(pid: u32) -> Result<i64> {
    tokio::time::sleep(Duration::from_secs(2)).await;
    Ok(rss_kib(pid)? as i64)
}

fn connector() -> Result<tokio_rustls::TlsConnector> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(turnstream_server::tls::EncryptOnly::new(
            provider,
        )))
        .with_no_client_auth();
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(tokio_rustls::TlsConnector::from(Arc::new(config)))
}

async fn tls_connect(
    tls: &tokio_rustls::TlsConnector,
    addr: std::net::SocketAddr,
) -> Result<tokio_rustls::client::TlsStream<TcpStream>> {
    let tcp = TcpStream::connect(addr).await?;
    tcp.set_nodelay(true)?;
    Ok(tls.connect(ServerName::try_from("localhost")?, tcp).await?)
}

async fn h2_connect(
    tls: &tokio_rustls::TlsConnector,
    addr: std::net::SocketAddr,
) -> Result<SendRequest<String>> {
    let stream = tls_connect(tls, addr).await?;
    let (mut sender, conn) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
        .timer(TokioTimer::new())
        .handshake(TokioIo::new(stream))
        .await
        .context("HTTP/2 handshake")?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    // The settings exchange completes once the connection is ready for a request.
    sender.ready().await?;
    Ok(sender)
}

async fn open_stream(
    sender: &mut SendRequest<String>,
    addr: std::net::SocketAddr,
) -> Result<hyper::body::Incoming> {
    sender.ready().await?;
    let req = hyper::Request::get(format!("https://{addr}/stream"))
        .header("accept", "text/event-stream")
        .header("cache-control", "no-cache")
        .body(String::new())?;
    let res = sender.send_request(req).await?;
    if !res.status().is_success() {
        bail!("HTTP {}", res.status());
    }
    Ok(res.into_body())
}

/// Opens `n` of whatever `open` makes, `CONCURRENCY` at a time.
async fn open_all<T, F, Fut>(n: usize, open: F) -> Result<Vec<T>>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<T>>,
{
    futures::stream::iter((0..n).map(|_| open()))
        .buffer_unordered(CONCURRENCY)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect()
}

async fn measure() -> Result<Parts> {
    let exe = std::env::current_exe()?;
    let mut child = Command::new(exe)
        .arg("serve")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .context("start the server")?;
    let result = steps(&mut child).await;
    drop(child.stdin.take());
    let _ = child.kill();
    let _ = child.wait();
    result
}

async fn steps(child: &mut std::process::Child) -> Result<Parts> {
    let stdout = child.stdout.take().ok_or_else(|| anyhow!("no stdout"))?;
    let line = tokio::task::spawn_blocking(move || {
        let mut line = String::new();
        std::io::BufReader::new(stdout)
            .read_line(&mut line)
            .map(|_| line)
    })
    .await??;
    let mut addrs = line.split_whitespace().map(str::parse::<SocketAddr>);
    let (Some(Ok(h2_addr)), Some(Ok(tls_addr))) = (addrs.next(), addrs.next()) else {
        bail!("the server said {line:?}");
    };
    let pid = child.id();
    let tls = connector()?;
    let with_stream = || async {
        let mut sender = h2_connect(&tls, h2_addr).await?;
        let body = open_stream(&mut sender, h2_addr).await?;
        Ok::<_, anyhow::Error>((sender, body))
    };

    let _warm = (
        open_all(WARM_UP, || tls_connect(&tls, tls_addr)).await?,
        open_all(WARM_UP, with_stream).await?,
    );
    let base = settled(pid).await?;
    let _tls_only = open_all(CONNS, || tls_connect(&tls, tls_addr)).await?;
    let with_tls = settled(pid).await?;
    let mut senders = open_all(CONNS, || h2_connect(&tls, h2_addr)).await?;
    let with_conns = settled(pid).await?;
    let mut bodies = Vec::with_capacity(CONNS);
    for chunk in senders.chunks_mut(CONCURRENCY) {
        let opened =
            futures::future::join_all(chunk.iter_mut().map(|s| open_stream(s, h2_addr))).await;
        for b in opened {
            bodies.push(b?);
        }
    }
    let with_streams = settled(pid).await?;
    let per = |kib: i64| kib as f64 * 1024.0 / CONNS as f64;
    Ok(Parts {
        conns: CONNS,
        tls: per(with_tls - base),
        h2_connection: per(with_conns - with_tls) - per(with_tls - base),
        stream: per(with_streams - with_conns),
    })
}
