//! An HTTP/2-over-TLS GET client for event streams: hyper's HTTP/2 client connection on a
//! tokio-rustls stream, trusting whatever certificate the server shows (the bench makes a
//! self-signed one for the server it starts; nothing here leaves loopback).
//!
//! Two ways to open streams, for the two shapes of browser traffic: a TLS connection per stream
//! (separate browsers or devices) or many streams on one connection (one browser's tabs and
//! sessions, multiplexed).

use std::future::poll_fn;
use std::pin::Pin;
use std::sync::Arc;

use anyhow::{anyhow, bail, Context, Result};
use bytes::Bytes;
use http_body::Body as _;
use hyper::body::Incoming;
use hyper::client::conn::http2::SendRequest;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use rustls::pki_types::ServerName;
use tokio::net::TcpStream;
use tokio::sync::Mutex;
use turnstream_server::tls::EncryptOnly;

use crate::sse::Splitter;

/// How streams map onto connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// One TLS connection per stream.
    PerStream,
    /// Up to this many streams per TLS connection (below the server's concurrent-stream limit).
    Shared(usize),
}

/// Opens HTTP/2 streams to one `https://` server.
pub struct H2Client {
    addr: String,
    tls: tokio_rustls::TlsConnector,
    mode: Mode,
    /// The connection streams are being added to, and how many it carries.
    shared: Mutex<Option<(SendRequest<String>, usize)>>,
}

impl H2Client {
    pub fn new(base: &str, mode: Mode) -> Result<H2Client> {
        let addr = base
            .strip_prefix("https://")
            .ok_or_else(|| anyhow!("not an https:// URL: {base}"))?
            .trim_end_matches('/')
            .to_string();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()?
            .dangerous()
            // Any certificate (the bench's own self-signed one), with the handshake's signatures
            // still checked, so the TLS work measured is the real work.
            .with_custom_certificate_verifier(Arc::new(EncryptOnly::new(provider)))
            .with_no_client_auth();
        config.alpn_protocols = vec![b"h2".to_vec()];
        Ok(H2Client {
            addr,
            tls: tokio_rustls::TlsConnector::from(Arc::new(config)),
            mode,
            shared: Mutex::new(None),
        })
    }

    /// A new TLS connection that negotiated `h2`, its driver task spawned.
    async fn connect(&self) -> Result<SendRequest<String>> {
        let tcp = TcpStream::connect(&self.addr)
            .await
            .with_context(|| format!("connect {}", self.addr))?;
        tcp.set_nodelay(true)?;
        let name = ServerName::try_from("localhost")?;
        let tls = self.tls.connect(name, tcp).await.context("TLS handshake")?;
        if tls.get_ref().1.alpn_protocol() != Some(b"h2") {
            bail!("the server did not choose h2 by ALPN");
        }
        let (sender, conn) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
            .timer(TokioTimer::new())
            .handshake(TokioIo::new(tls))
            .await
            .context("HTTP/2 handshake")?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        Ok(sender)
    }

    async fn sender(&self) -> Result<SendRequest<String>> {
        let Mode::Shared(per_conn) = self.mode else {
            return self.connect().await;
        };
        let mut shared = self.shared.lock().await;
        match shared.as_mut() {
            Some((sender, n)) if *n < per_conn && !sender.is_closed() => {
                *n += 1;
                Ok(sender.clone())
            }
            _ => {
                let sender = self.connect().await?;
                *shared = Some((sender.clone(), 1));
                Ok(sender)
            }
        }
    }

    /// Sends `GET path` and waits for the response head; fails on a non-2xx status.
    pub async fn get(&self, path: &str, last_event_id: Option<&str>) -> Result<H2Stream> {
        let mut sender = self.sender().await?;
        sender.ready().await.context("HTTP/2 connection")?;
        let mut req = hyper::Request::get(format!("https://{}{path}", self.addr))
            .header("accept", "text/event-stream")
            .header("cache-control", "no-cache");
        if let Some(id) = last_event_id {
            req = req.header("last-event-id", id);
        }
        let res = sender.send_request(req.body(String::new())?).await?;
        if !res.status().is_success() {
            bail!("HTTP {}", res.status());
        }
        Ok(H2Stream {
            body: res.into_body(),
            _sender: sender,
        })
    }
}

/// An open response on an HTTP/2 stream.
pub struct H2Stream {
    body: Incoming,
    /// Keeps the connection up while its only stream is read.
    _sender: SendRequest<String>,
}

impl H2Stream {
    /// Reads one DATA frame's worth into `out`; false once the body has ended.
    pub async fn read_into(&mut self, out: &mut Splitter) -> Result<bool> {
        loop {
            let frame = poll_fn(|cx| Pin::new(&mut self.body).poll_frame(cx)).await;
            match frame {
                None => return Ok(false),
                Some(frame) => {
                    if let Ok(data) = frame?.into_data() {
                        let data: Bytes = data;
                        out.push(&data);
                        return Ok(true);
                    }
                }
            }
        }
    }
}

/// What one idle HTTP/2 + TLS connection and one stream on it hold in the server, by part: the
/// server's RSS step by step as `conn-parts` (a binary of this crate, next to this one) measures
/// it, bytes each.
#[derive(Debug, Clone, serde::Deserialize)]
pub struct Parts {
    /// rustls and tokio-rustls between records.
    pub tls: f64,
    /// h2's codec (read and write buffers, HPACK), its stream store, hyper's connection, the
    /// connection's task.
    pub h2_connection: f64,
    /// h2's stream, hyper's stream task and the response body.
    pub stream: f64,
}

impl Parts {
    /// Runs `conn-parts` and reads its line.
    pub fn measure() -> Result<Parts> {
        let exe = std::env::current_exe()?;
        let bin = exe.with_file_name("conn-parts");
        let out = std::process::Command::new(&bin)
            .output()
            .with_context(|| format!("run {}", bin.display()))?;
        if !out.status.success() {
            bail!(
                "{} failed: {}",
                bin.display(),
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(serde_json::from_slice(&out.stdout)?)
    }

    /// The cell: each part in KB.
    pub fn cell(&self) -> String {
        format!(
            "made of (server RSS step by step, `conn-parts`): TLS {:.1} KB (rustls, tokio-rustls) + HTTP/2 connection {:.1} KB (h2's buffers and HPACK, hyper's connection, its task) + HTTP/2 stream {:.1} KB (h2's stream, hyper's stream task, the body; a connection's first stream), turnstream's stream state on top",
            self.tls / 1000.0,
            self.h2_connection / 1000.0,
            self.stream / 1000.0
        )
    }
}
