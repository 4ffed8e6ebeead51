//! Figure 8: how many idle streams one node holds. `n` streams (100,000 in a full run), each on
//! a session of its own, in two modes:
//!
//! - HTTP/1.1: one plain connection per stream from several loopback source addresses (one
//!   address has ~28,000 ephemeral ports towards one server port), as `EventSource` opens them;
//! - HTTP/2 over TLS, 100 streams per connection, as browsers multiplex them (the server speaks
//!   HTTP/2 only over TLS, chosen by ALPN: no cleartext `h2c`), with a self-signed certificate.
//!
//! Measured: the time to open them all, the server's RSS per stream once they sit idle, then one
//! message to each of `sample` sessions picked at random among them, its delivery to that
//! session's stream (p50/p99 of publish to arrival) and how many never arrived.
//!
//! The HTTP/1.1 readers are lean on purpose (a socket and nothing else while idle; a task only
//! for the sampled ones), so the bench process itself holds `n` sockets without holding `n`
//! buffers; the HTTP/2 ones are hyper's client streams, read only when sampled.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use futures::StreamExt;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

use crate::h2client;
use crate::stats::{dur_ms, unix_us, Samples};
use crate::systems::{markers, Reader, Resume, System};

/// Loopback source addresses the streams come from.
const SOURCES: u8 = 8;
/// Streams being opened at once.
const OPEN_CONCURRENCY: usize = 512;
/// Descriptors kept free for everything else in each process (the database, logs, requests).
const SPARE_FDS: u64 = 2_000;

/// How the streams reach the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// One plain HTTP/1.1 connection per stream.
    Http1,
    /// HTTP/2 over TLS, this many streams per connection.
    H2 { per_conn: usize },
}

/// Streams per connection in the HTTP/2 mode (the figure).
pub const H2_STREAMS_PER_CONN: usize = 100;

/// The transports figure 8 measures, in order: HTTP/1.1, then HTTP/2 + TLS.
pub const TRANSPORTS: [Transport; 2] = [
    Transport::Http1,
    Transport::H2 {
        per_conn: H2_STREAMS_PER_CONN,
    },
];

/// [`run`] over one transport, every process it started killed after.
pub async fn measure(n: usize, sample: usize, fds: u64, transport: Transport) -> Result<Scale> {
    eprintln!("scale: {transport:?}");
    let result = run(n, sample, fds, transport).await;
    crate::procs::kill_all();
    result
}

impl Transport {
    fn label(self) -> String {
        match self {
            Transport::Http1 => "HTTP/1.1".to_string(),
            Transport::H2 { per_conn } => {
                format!("HTTP/2 + TLS, {per_conn} streams per connection")
            }
        }
    }

    /// Descriptors `n` streams take in the server (and in the bench).
    fn fds(self, n: usize) -> usize {
        match self {
            Transport::Http1 => n,
            Transport::H2 { per_conn } => n.div_ceil(per_conn.max(1)),
        }
    }
}

pub struct Scale {
    pub transport: Transport,
    /// Streams asked for, and opened.
    pub wanted: usize,
    pub opened: usize,
    /// What capped `wanted` below the figure's size, if anything.
    pub capped_by: Option<String>,
    pub open_time: Duration,
    pub rss_before_kib: u64,
    pub rss_after_kib: u64,
    pub bytes_per_stream: f64,
    pub sample: usize,
    pub delivery: Samples,
    pub lost: usize,
}

/// The streams to open for a figure of `n`, given each process's descriptor limit.
fn fit(n: usize, fds: u64, transport: Transport) -> (usize, Option<String>) {
    let room = fds.saturating_sub(SPARE_FDS) as usize;
    if room < transport.fds(n) {
        let streams = match transport {
            Transport::Http1 => room,
            Transport::H2 { per_conn } => room * per_conn,
        };
        (
            streams,
            Some(format!("descriptors: the limit is {fds} per process")),
        )
    } else {
        (n, None)
    }
}

pub async fn run(n: usize, sample: usize, fds: u64, transport: Transport) -> Result<Scale> {
    let (wanted, capped_by) = fit(n, fds, transport);
    if wanted < sample {
        bail!("too few descriptors for the figure ({fds})");
    }
    if let Transport::H2 { per_conn } = transport {
        return run_h2(wanted, capped_by, sample, per_conn).await;
    }
    let max_streams = (wanted + 1_000).to_string();
    let sys = Arc::new(System::turnstream(&["--max-streams", &max_streams]).await?);
    let server: SocketAddr = sys
        .proc
        .url
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .parse()
        .context("the server's address")?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let rss_before_kib = sys.rss_kib()?;

    let t0 = Instant::now();
    let results: Vec<Result<TcpStream>> = futures::stream::iter(0..wanted)
        .map(|i| open(server, i))
        .buffered(OPEN_CONCURRENCY)
        .collect()
        .await;
    let open_time = t0.elapsed();
    let mut socks: Vec<Option<TcpStream>> = Vec::with_capacity(wanted);
    let mut first_error = None;
    for r in results {
        match r {
            Ok(s) => socks.push(Some(s)),
            Err(e) => {
                first_error.get_or_insert(e);
                socks.push(None);
            }
        }
    }
    let opened = socks.iter().filter(|s| s.is_some()).count();
    if opened == 0 {
        return Err(first_error.unwrap_or_else(|| anyhow!("no stream opened")));
    }
    // Let first allocations settle before reading memory.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let rss_after_kib = sys.rss_kib()?;

    // Delivery: one message to each of `sample` sessions picked at random among the open ones.
    let picked = pick(sample.min(opened), wanted, |i| socks[i].is_some());
    let mut readers = Vec::with_capacity(picked.len());
    for &i in &picked {
        let Some(sock) = socks[i].take() else {
            continue;
        };
        readers.push(tokio::spawn(first_marker(sock)));
    }
    publish(&sys, &picked).await?;
    let mut delivery = Samples::default();
    let mut lost = 0;
    for r in readers {
        match r.await {
            Ok(Ok(us)) => delivery.push(us),
            _ => lost += 1,
        }
    }
    drop(socks);
    Ok(Scale {
        transport,
        wanted,
        opened,
        capped_by,
        open_time,
        rss_before_kib,
        rss_after_kib,
        bytes_per_stream: (rss_after_kib.saturating_sub(rss_before_kib) as f64 * 1024.0)
            / opened as f64,
        sample: picked.len(),
        delivery,
        lost,
    })
}

/// The HTTP/2 mode: the same steps with hyper's HTTP/2 client over TLS, `per_conn` streams on
/// each connection.
async fn run_h2(
    wanted: usize,
    capped_by: Option<String>,
    sample: usize,
    per_conn: usize,
) -> Result<Scale> {
    let max_streams = (wanted + 1_000).to_string();
    let sys = Arc::new(
        System::turnstream_h2_with(
            h2client::Mode::Shared(per_conn),
            &["--max-streams", &max_streams],
        )
        .await?,
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    let rss_before_kib = sys.rss_kib()?;

    let t0 = Instant::now();
    let results: Vec<Result<Reader>> = futures::stream::iter(0..wanted)
        .map(|i| {
            let sys = sys.clone();
            async move { sys.open(&session(i), &Resume::Now).await }
        })
        .buffered(OPEN_CONCURRENCY)
        .collect()
        .await;
    let open_time = t0.elapsed();
    let mut readers: Vec<Option<Reader>> = Vec::with_capacity(wanted);
    let mut first_error = None;
    for r in results {
        match r {
            Ok(reader) => readers.push(Some(reader)),
            Err(e) => {
                first_error.get_or_insert(e);
                readers.push(None);
            }
        }
    }
    let opened = readers.iter().filter(|r| r.is_some()).count();
    if opened == 0 {
        return Err(first_error.unwrap_or_else(|| anyhow!("no stream opened")));
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let rss_after_kib = sys.rss_kib()?;

    let picked = pick(sample.min(opened), wanted, |i| readers[i].is_some());
    let mut sampled = Vec::with_capacity(picked.len());
    for &i in &picked {
        let Some(mut reader) = readers[i].take() else {
            continue;
        };
        sampled.push(tokio::spawn(async move {
            let mut latency = None;
            tokio::time::timeout(
                Duration::from_secs(30),
                reader.read(|f, arrived| {
                    latency = markers(&f.data)
                        .next()
                        .map(|sent| arrived.saturating_sub(sent));
                    latency.is_none()
                }),
            )
            .await
            .map_err(|_| anyhow!("no message within 30 s"))??;
            latency.ok_or_else(|| anyhow!("stream ended"))
        }));
    }
    publish(&sys, &picked).await?;
    let mut delivery = Samples::default();
    let mut lost = 0;
    for r in sampled {
        match r.await {
            Ok(Ok(us)) => delivery.push(us),
            _ => lost += 1,
        }
    }
    drop(readers);
    Ok(Scale {
        transport: Transport::H2 { per_conn },
        wanted,
        opened,
        capped_by,
        open_time,
        rss_before_kib,
        rss_after_kib,
        bytes_per_stream: (rss_after_kib.saturating_sub(rss_before_kib) as f64 * 1024.0)
            / opened as f64,
        sample: picked.len(),
        delivery,
        lost,
    })
}

/// `k` of the `n` streams for which `open` holds, picked by a fixed xorshift sequence (the same
/// sample in every run).
fn pick(k: usize, n: usize, open: impl Fn(usize) -> bool) -> Vec<usize> {
    let mut picked = Vec::with_capacity(k);
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    while picked.len() < k {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let i = (x % n as u64) as usize;
        if open(i) && !picked.contains(&i) {
            picked.push(i);
        }
    }
    picked
}

/// One stamped message to each picked stream's session, 64 at a time.
async fn publish(sys: &Arc<System>, picked: &[usize]) -> Result<()> {
    let published = futures::stream::iter(picked.iter().map(|&i| {
        let sys = sys.clone();
        async move { sys.publish_message(&session(i), unix_us()).await }
    }))
    .buffer_unordered(64)
    .collect::<Vec<_>>()
    .await;
    published.into_iter().collect::<Result<Vec<_>>>()?;
    Ok(())
}

/// Figure 8's table: one column per mode.
/// Figure 8 in the main table (`all`): a row per transport, each opened after the last closed.
pub async fn figure(n: usize, sample: usize, fds: u64, rows: &mut Vec<crate::table::Row>) {
    for transport in TRANSPORTS {
        let result = measure(n, sample, fds, transport).await;
        let mut row = crate::table::Row::new(
            format!(
                "8. idle streams on one node, {}, one session each: streams open, time to open them all, server RSS per idle stream, then a message to {sample} random sessions: delivery p50 / p99, lost",
                transport.label()
            ),
            "100,000 streams, ≤ 2 KB each, 0 lost",
        );
        row.ours = match result {
            Ok(mut f) => format!(
                "{} of {} streams{}; opened in {} ms ({:.0}/s); {:.2} KB per stream (RSS {} → {} MiB); delivery {}; {} of {} lost",
                f.opened,
                f.wanted,
                f.capped_by
                    .as_deref()
                    .map(|c| format!(" (capped by {c})"))
                    .unwrap_or_default(),
                dur_ms(f.open_time),
                f.opened as f64 / f.open_time.as_secs_f64().max(1e-6),
                f.bytes_per_stream / 1000.0,
                f.rss_before_kib / 1024,
                f.rss_after_kib / 1024,
                f.delivery.p50_p99(),
                f.lost,
                f.sample
            ),
            Err(e) => format!("failed: {e:#}"),
        };
        row.comparisons.push(
            "ring, durable-streams, resumable-stream: not run (turnstream's own figure)".into(),
        );
        rows.push(row);
    }
}

pub fn table(runs: &mut [Scale]) -> String {
    let mut out = String::from("| figure 8: idle streams on one node |");
    for r in runs.iter() {
        out.push_str(&format!(" {} |", r.transport.label()));
    }
    out.push_str("\n|---|");
    out.push_str(&"---|".repeat(runs.len()));
    out.push('\n');
    let mut row = |name: &str, cells: Vec<String>| {
        out.push_str(&format!("| {name} |"));
        for c in cells {
            out.push_str(&format!(" {c} |"));
        }
        out.push('\n');
    };
    row(
        "streams open",
        runs.iter()
            .map(|f| {
                format!(
                    "{} of {} asked{}",
                    f.opened,
                    f.wanted,
                    f.capped_by
                        .as_deref()
                        .map(|c| format!(" (capped by {c})"))
                        .unwrap_or_default()
                )
            })
            .collect(),
    );
    row(
        "time to open them all",
        runs.iter()
            .map(|f| {
                format!(
                    "{} ms ({:.0} streams/s)",
                    dur_ms(f.open_time),
                    f.opened as f64 / f.open_time.as_secs_f64().max(1e-6)
                )
            })
            .collect(),
    );
    row(
        "server RSS per idle stream",
        runs.iter()
            .map(|f| {
                format!(
                    "{:.2} KB (RSS {} → {} MiB)",
                    f.bytes_per_stream / 1000.0,
                    f.rss_before_kib / 1024,
                    f.rss_after_kib / 1024
                )
            })
            .collect(),
    );
    let sample = runs.first().map(|r| r.sample).unwrap_or_default();
    row(
        &format!("a message to {sample} random sessions: delivery p50 / p99"),
        runs.iter_mut().map(|f| f.delivery.p50_p99()).collect(),
    );
    row(
        "lost",
        runs.iter()
            .map(|f| format!("{} of {}", f.lost, f.sample))
            .collect(),
    );
    out
}

fn session(i: usize) -> String {
    format!("z{i}")
}

/// Opens stream `i` from source address 127.0.0.(2 + i mod SOURCES) and reads its response head.
async fn open(server: SocketAddr, i: usize) -> Result<TcpStream> {
    let source = Ipv4Addr::new(127, 0, 0, 2 + (i % SOURCES as usize) as u8);
    let socket = TcpSocket::new_v4()?;
    socket.bind(SocketAddr::from((source, 0)))?;
    let mut sock = socket.connect(server).await.context("connect")?;
    sock.set_nodelay(true)?;
    let req = format!(
        "GET /api/stream?session={} HTTP/1.1\r\nHost: {server}\r\nAccept: text/event-stream\r\n\r\n",
        session(i)
    );
    sock.write_all(req.as_bytes()).await?;
    let mut head = Vec::with_capacity(512);
    let mut buf = [0u8; 512];
    loop {
        let n = sock.read(&mut buf).await?;
        if n == 0 {
            bail!("closed before the response head");
        }
        head.extend_from_slice(&buf[..n]);
        if head.windows(4).any(|w| w == b"\r\n\r\n") {
            break;
        }
        if head.len() > 16 * 1024 {
            bail!("response head too large");
        }
    }
    if !head.starts_with(b"HTTP/1.1 200") {
        bail!(
            "stream refused: {}",
            String::from_utf8_lossy(&head[..head.len().min(200)])
        );
    }
    Ok(sock)
}

/// Reads `sock` until a stamped marker arrives; its latency in µs. Gives up after 30 s.
async fn first_marker(mut sock: TcpStream) -> Result<u64> {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let n = tokio::time::timeout(left, sock.read(&mut buf))
            .await
            .map_err(|_| anyhow!("no message within 30 s"))??;
        if n == 0 {
            bail!("stream closed");
        }
        let now = unix_us();
        seen.extend_from_slice(&buf[..n]);
        if let Some(sent) = markers(&String::from_utf8_lossy(&seen)).next() {
            return Ok(now.saturating_sub(sent));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_figure_fits_the_descriptors() {
        assert_eq!(fit(100_000, 1_048_576, Transport::Http1), (100_000, None));
        let (n, why) = fit(100_000, 20_000, Transport::Http1);
        assert_eq!(n, 18_000);
        assert!(why.is_some_and(|w| w.contains("20000")));
        // 100 streams per connection: 1,000 descriptors for 100,000 streams.
        let h2 = Transport::H2 { per_conn: 100 };
        assert_eq!(fit(100_000, 20_000, h2), (100_000, None));
        assert_eq!(fit(100_000, 2_500, h2).0, 50_000);
    }
}
