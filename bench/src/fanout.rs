//! Figure 2: publish-to-browser latency over SSE, commit included.
//!
//! Native SSE readers subscribe; a publisher posts messages stamped with their send time
//! (`@T<unix µs>@`) at a steady rate; each reader records receive time minus send time for the
//! first frame carrying each stamp (on turnstream that is `message_received`, which is sent only
//! after the message's commit).

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, Result};
use futures::StreamExt;
use tokio::sync::watch;

use crate::prom::{bucket_delta, quantile, Scrape};
use crate::stats::{unix_us, Samples};
use crate::systems::{markers, Kind, Resume, System};

pub struct Fanout {
    pub samples: Samples,
    /// Deliveries expected but not seen before the deadline.
    pub missing: u64,
    pub failed_publishes: u64,
    /// Why the first failed publish failed.
    pub first_failure: Option<String>,
    /// Server CPU (all its threads) over the publishing window, in % of one core.
    pub server_cpu_pct: f64,
    /// turnstream only: where a publish's time goes, by its own histograms over the window.
    pub stages: Vec<Stage>,
    /// turnstream only: the times a stream took frames from its inbox (one socket write each)
    /// per message per subscriber over the window. A message is its own commit and then its
    /// turn's (started, reply, ended), which reach a subscriber in as many writes as they find
    /// it between two.
    pub writes_per_message: Option<f64>,
}

/// One stage of a publish inside turnstream, p50 and p99 in µs (interpolated in the buckets of
/// the server's histogram, as Prometheus' `histogram_quantile` does).
pub struct Stage {
    pub name: &'static str,
    pub p50_us: f64,
    pub p99_us: f64,
}

/// turnstream as deployed: deltas merged for the server's default window (25 ms). The echo's one
/// delta is not held by it (the agent returns at once); it goes in the turn's end's commit, as a
/// turn's last deltas do on a deployed server.
pub const SERVER_FLAGS: &[&str] = &["--coalesce-ms", "25"];

/// A stream's takes from its inbox: the count of the stream wake-up's histogram.
const DELIVERY_COUNT: &str = "turnstream_delivery_seconds_count";

/// The hub's walk over a commit's subscribers (the stream's wake-up is timed from before it).
pub const HUB_STAGE: &str = "hub";

/// The stages turnstream times, in the order a publish goes through them: the histogram, and
/// what the report calls it.
const STAGES: [(&str, &str); 6] = [
    ("turnstream_message_request_seconds", "request"),
    ("turnstream_writer_wait_seconds", "writer wake-up"),
    ("turnstream_commit_statements_seconds", "statements"),
    ("turnstream_commit_seconds", "commit and fsync"),
    ("turnstream_publish_seconds", HUB_STAGE),
    ("turnstream_delivery_seconds", "stream wake-up"),
];

/// The stages of what committed on `writer` and was delivered on `reader`, between two scrapes
/// of each.
fn stages(writer: (&Scrape, &Scrape), reader: (&Scrape, &Scrape)) -> Vec<Stage> {
    STAGES
        .iter()
        .filter_map(|&(metric, name)| {
            let (before, after) = if metric == "turnstream_delivery_seconds" {
                reader
            } else {
                writer
            };
            let b = bucket_delta(before, after, metric);
            Some(Stage {
                name,
                p50_us: quantile(&b, 0.5)? * 1e6,
                p99_us: quantile(&b, 0.99)? * 1e6,
            })
        })
        .collect()
}

async fn scrape_if_ours(sys: &System) -> Option<Scrape> {
    if sys.kind != Kind::Turnstream {
        return None;
    }
    crate::append::scrape(sys).await.ok()
}

/// Opens readers concurrently, at most this many connecting at once (a gentle ramp, not the
/// reconnect burst of figure 3).
const OPEN_CONCURRENCY: usize = 128;

/// `streams` streams with `subs` readers each; `messages` messages spread round-robin over the
/// streams at `rate` per second.
pub async fn run(
    sys: Arc<System>,
    streams: usize,
    subs: usize,
    messages: usize,
    rate: f64,
) -> Result<Fanout> {
    across(sys.clone(), sys, streams, subs, messages, rate).await
}

/// [`run`] with the messages published on `publisher` and read from `readers`: two nodes of one
/// PostgreSQL journal (or the same system twice). Server CPU counts both when they differ.
pub async fn across(
    publisher: Arc<System>,
    sys: Arc<System>,
    streams: usize,
    subs: usize,
    messages: usize,
    rate: f64,
) -> Result<Fanout> {
    let two = !Arc::ptr_eq(&publisher, &sys);
    let cpu = || sys.cpu_secs() + if two { publisher.cpu_secs() } else { 0.0 };
    let names: Vec<String> = (0..streams).map(|i| format!("f{i}")).collect();
    for n in &names {
        sys.prepare(n).await?;
    }
    let per_stream: Vec<usize> = (0..streams)
        .map(|s| (0..messages).filter(|m| m % streams == s).count())
        .collect();
    let (stop_tx, stop_rx) = watch::channel(false);
    let opened = futures::stream::iter((0..streams * subs).map(|i| {
        let sys = sys.clone();
        let name = names[i % streams].clone();
        async move {
            sys.open(&name, &Resume::Now)
                .await
                .map(|r| (i % streams, r))
        }
    }))
    .buffer_unordered(OPEN_CONCURRENCY)
    .collect::<Vec<_>>()
    .await;
    let mut tasks = Vec::new();
    let mut deliveries = 0;
    for r in opened {
        let (stream, mut reader) = r?;
        let expected = per_stream[stream];
        deliveries += expected;
        let mut stop = stop_rx.clone();
        tasks.push(tokio::spawn(async move {
            let mut seen = HashSet::new();
            let mut samples = Samples::default();
            if expected > 0 {
                let read = reader.read(|f, now| {
                    for m in markers(&f.data) {
                        if seen.insert(m) {
                            samples.push(now.saturating_sub(m));
                        }
                    }
                    seen.len() < expected
                });
                tokio::select! {
                    _ = read => {}
                    _ = stop.wait_for(|s| *s) => {}
                }
            }
            (samples, expected.saturating_sub(seen.len()) as u64)
        }));
    }
    // Let the streams' first bytes (prelude, replay of nothing) settle before timing.
    tokio::time::sleep(Duration::from_millis(300)).await;

    let scraped0 = (scrape_if_ours(&publisher).await, scrape_if_ours(&sys).await);
    let cpu0 = cpu();
    let t0 = Instant::now();
    let mut posts = Vec::with_capacity(messages);
    for m in 0..messages {
        let at = t0 + Duration::from_secs_f64(m as f64 / rate);
        tokio::time::sleep_until(at.into()).await;
        let sys = publisher.clone();
        let name = names[m % streams].clone();
        // Open loop: each publish runs on its own so a slow one does not delay the next.
        posts.push(tokio::spawn(async move {
            sys.publish_message(&name, unix_us()).await
        }));
    }
    let mut failed_publishes = 0;
    let mut first_failure = None;
    for p in posts {
        let why = match p.await {
            Ok(Ok(())) => continue,
            Ok(Err(e)) => format!("{e:#}"),
            Err(e) => format!("publish task: {e}"),
        };
        failed_publishes += 1;
        first_failure.get_or_insert(why);
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    let mut samples = Samples::default();
    let mut missing = 0;
    let mut waiting = Vec::new();
    for t in tasks {
        waiting.push(t);
    }
    // Wait for every reader to see every message, or the deadline; then stop the stragglers.
    let all = futures::future::join_all(waiting);
    tokio::pin!(all);
    let results = tokio::select! {
        r = &mut all => r,
        _ = tokio::time::sleep_until(deadline) => {
            let _ = stop_tx.send(true);
            all.await
        }
    };
    let server_cpu_pct = 100.0 * (cpu() - cpu0) / t0.elapsed().as_secs_f64();
    for r in results {
        let (s, miss) = r.map_err(|e| anyhow!("reader task: {e}"))?;
        samples.extend(s);
        missing += miss;
    }
    let _ = stop_tx.send(true);
    let (stages, writes_per_message) = match (
        scraped0,
        scrape_if_ours(&publisher).await,
        scrape_if_ours(&sys).await,
    ) {
        ((Some(w0), Some(r0)), Some(w1), Some(r1)) => {
            let takes = r1.get(DELIVERY_COUNT) - r0.get(DELIVERY_COUNT);
            // Only where every reader stays for many messages: one that leaves after its last
            // marker does not take the rest of that message's turn.
            let stays = per_stream.iter().all(|&n| n >= 10);
            (
                stages((&w0, &w1), (&r0, &r1)),
                (stays && deliveries > 0).then(|| takes / deliveries as f64),
            )
        }
        _ => (Vec::new(), None),
    };
    Ok(Fanout {
        stages,
        writes_per_message,
        samples,
        missing,
        failed_publishes,
        first_failure,
        server_cpu_pct,
    })
}
