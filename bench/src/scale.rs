//! Figure 8: how many idle streams one node holds. `n` streams (100,000 in a full run), each on
//! a session of its own, opened over plain HTTP/1.1 from several loopback source addresses (one
//! address has ~28,000 ephemeral ports towards one server port), as `EventSource` opens them.
//! Measured: the time to open them all, the server's RSS per stream once they sit idle, then one
//! message to each of `sample` sessions picked at random among them, its delivery to that
//! session's stream (p50/p99 of publish to arrival) and how many never arrived.
//!
//! The readers are lean on purpose (a socket and nothing else while idle; a task only for the
//! sampled ones), so the bench process itself holds `n` sockets without holding `n` buffers.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use futures::StreamExt;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

use crate::stats::{unix_us, Samples};
use crate::systems::{markers, System};

/// Loopback source addresses the streams come from.
const SOURCES: u8 = 8;
/// Streams being opened at once.
const OPEN_CONCURRENCY: usize = 512;
/// Descriptors kept free for everything else in each process (the database, logs, requests).
const SPARE_FDS: u64 = 2_000;

pub struct Scale {
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
fn fit(n: usize, fds: u64) -> (usize, Option<String>) {
    let room = fds.saturating_sub(SPARE_FDS) as usize;
    if room < n {
        (
            room,
            Some(format!("descriptors: the limit is {fds} per process")),
        )
    } else {
        (n, None)
    }
}

pub async fn run(n: usize, sample: usize, fds: u64) -> Result<Scale> {
    let (wanted, capped_by) = fit(n, fds);
    if wanted < sample {
        bail!("too few descriptors for the figure ({fds})");
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
    let mut picked = Vec::with_capacity(sample);
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    while picked.len() < sample.min(opened) {
        // xorshift: a fixed sequence, the same sample in every run.
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let i = (x % wanted as u64) as usize;
        if socks[i].is_some() && !picked.contains(&i) {
            picked.push(i);
        }
    }
    let mut readers = Vec::with_capacity(picked.len());
    for &i in &picked {
        let Some(sock) = socks[i].take() else {
            continue;
        };
        readers.push(tokio::spawn(first_marker(sock)));
    }
    let published = futures::stream::iter(picked.iter().map(|&i| {
        let sys = sys.clone();
        async move { sys.publish_message(&session(i), unix_us()).await }
    }))
    .buffer_unordered(64)
    .collect::<Vec<_>>()
    .await;
    published.into_iter().collect::<Result<Vec<_>>>()?;
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
        assert_eq!(fit(100_000, 1_048_576), (100_000, None));
        let (n, why) = fit(100_000, 20_000);
        assert_eq!(n, 18_000);
        assert!(why.is_some_and(|w| w.contains("20000")));
    }
}
