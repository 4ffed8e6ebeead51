//! Figure 3: what an idle SSE connection costs the server, and how fast it takes back a burst
//! of reconnects that all resume from an old position.
//!
//! 1. Each stream gets one message, then the server's RSS is read.
//! 2. `conns` readers open (a gentle ramp) at the head and sit idle; RSS is read again:
//!    (after − before) / conns is the cost of one idle connection.
//! 3. All close; each stream gets a second message (stamped); then all `conns` reconnect at
//!    once from the position before that message (`Last-Event-ID` on turnstream). Accepted
//!    streams per second = conns / time until the last response headers arrived; "caught up" is
//!    when the last reader has received its stream's stamped message.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, Result};
use futures::StreamExt;
use tokio::sync::watch;

use crate::append::scrape;
use crate::stats::{unix_us, Samples};
use crate::systems::{markers, Kind, Resume, System};

pub struct Idle {
    pub bytes_per_conn: f64,
    pub rss_before_kib: u64,
    pub rss_after_kib: u64,
    pub accept_rate: f64,
    pub headers_all: Duration,
    pub caught_up_all: Duration,
    pub headers: Samples,
    pub failed: usize,
    /// SYNs the kernel dropped because a listen queue was full during the burst (machine-wide
    /// `TcpExt: ListenDrops`; each costs its client a 1 s retransmit).
    pub listen_drops: u64,
}

/// The kernel's count of connection attempts dropped at a full listen queue.
fn listen_drops() -> u64 {
    let text = std::fs::read_to_string("/proc/net/netstat").unwrap_or_default();
    let mut lines = text.lines().filter(|l| l.starts_with("TcpExt:"));
    let (Some(names), Some(values)) = (lines.next(), lines.next()) else {
        return 0;
    };
    names
        .split_whitespace()
        .zip(values.split_whitespace())
        .find(|(n, _)| *n == "ListenDrops")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0)
}

const RAMP_CONCURRENCY: usize = 256;

/// Waits until turnstream has ended `turns` turns (its publishes return before the agent runs);
/// other systems are done when their publish returns.
async fn quiesce(sys: &System, turns: f64) -> Result<()> {
    if sys.kind != Kind::Turnstream {
        return Ok(());
    }
    let deadline = Instant::now() + Duration::from_secs(120);
    while scrape(sys).await?.get("turnstream_turns_ended_total") < turns {
        if Instant::now() > deadline {
            return Err(anyhow!("turns did not finish"));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

async fn publish_round(sys: &Arc<System>, names: &[String]) -> Result<()> {
    let results = futures::stream::iter(names.iter().cloned().map(|n| {
        let sys = sys.clone();
        async move { sys.publish_message(&n, unix_us()).await }
    }))
    .buffer_unordered(64)
    .collect::<Vec<_>>()
    .await;
    results.into_iter().collect()
}

async fn heads(sys: &System, names: &[String]) -> Result<Vec<String>> {
    if sys.kind == Kind::Turnstream {
        // One journal, one global head.
        let h = sys.head(&names[0]).await?;
        return Ok(vec![h; names.len()]);
    }
    let mut out = Vec::with_capacity(names.len());
    for n in names {
        out.push(sys.head(n).await?);
    }
    Ok(out)
}

pub async fn run(sys: Arc<System>, conns: usize, streams: usize) -> Result<Idle> {
    let names: Vec<String> = (0..streams).map(|i| format!("i{i}")).collect();
    for n in &names {
        sys.prepare(n).await?;
    }
    publish_round(&sys, &names).await?;
    quiesce(&sys, streams as f64).await?;
    let h0 = heads(&sys, &names).await?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let rss_before_kib = sys.rss_kib()?;

    // Idle phase.
    let (stop_tx, stop_rx) = watch::channel(false);
    let opened = futures::stream::iter((0..conns).map(|i| {
        let sys = sys.clone();
        let s = i % streams;
        let name = names[s].clone();
        let at = Resume::At(h0[s].clone());
        async move { sys.open(&name, &at).await }
    }))
    .buffer_unordered(RAMP_CONCURRENCY)
    .collect::<Vec<_>>()
    .await;
    let mut idle_tasks = Vec::new();
    let mut failed = 0;
    for r in opened {
        match r {
            Ok(mut reader) => {
                let mut stop = stop_rx.clone();
                idle_tasks.push(tokio::spawn(async move {
                    tokio::select! {
                        _ = reader.read(|_, _| true) => {}
                        _ = stop.wait_for(|s| *s) => {}
                    }
                }));
            }
            Err(_) => failed += 1,
        }
    }
    // Let allocations settle (buffers, first heartbeat timers) before reading memory.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let rss_after_kib = sys.rss_kib()?;
    let _ = stop_tx.send(true);
    for t in idle_tasks {
        let _ = t.await;
    }
    // Give the server time to notice the closed sockets.
    tokio::time::sleep(Duration::from_secs(1)).await;

    // Burst phase: everyone missed one message, then everyone comes back at once.
    publish_round(&sys, &names).await?;
    quiesce(&sys, 2.0 * streams as f64).await?;
    let drops0 = listen_drops();
    let t0 = Instant::now();
    let mut burst = Vec::with_capacity(conns);
    for i in 0..conns {
        let sys = sys.clone();
        let s = i % streams;
        let name = names[s].clone();
        let at = Resume::At(h0[s].clone());
        burst.push(tokio::spawn(async move {
            let mut reader = tokio::time::timeout(Duration::from_secs(60), sys.open(&name, &at))
                .await
                .map_err(|_| anyhow!("open timed out"))??;
            let headers = t0.elapsed();
            let mut got = false;
            tokio::time::timeout(
                Duration::from_secs(60),
                reader.read(|f, _| {
                    got = markers(&f.data).next().is_some();
                    !got
                }),
            )
            .await
            .map_err(|_| anyhow!("catch-up timed out"))??;
            if !got {
                return Err(anyhow!("stream ended before catching up"));
            }
            Ok::<_, anyhow::Error>((headers, t0.elapsed()))
        }));
    }
    let mut headers_all = Duration::ZERO;
    let mut caught_up_all = Duration::ZERO;
    let mut headers = Samples::default();
    for b in burst {
        match b.await {
            Ok(Ok((h, c))) => {
                headers_all = headers_all.max(h);
                caught_up_all = caught_up_all.max(c);
                headers.push(h.as_micros() as u64);
            }
            _ => failed += 1,
        }
    }
    let listen_drops = listen_drops().saturating_sub(drops0);
    let ok = conns.saturating_sub(failed).max(1);
    Ok(Idle {
        bytes_per_conn: (rss_after_kib.saturating_sub(rss_before_kib) as f64 * 1024.0)
            / conns as f64,
        rss_before_kib,
        rss_after_kib,
        accept_rate: ok as f64 / headers_all.as_secs_f64().max(1e-6),
        headers_all,
        caught_up_all,
        headers,
        failed,
        listen_drops,
    })
}
