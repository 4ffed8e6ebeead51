//! Figure 6: every system on one chat workload, side by side.
//!
//! A producer streams one turn of N small chunks at a steady rate. Five readers follow it live
//! from the start; five attach halfway through (and must first receive the turn so far); five
//! drop out a quarter of the way through, stay away 300 ms, and reconnect with their last
//! position. Every chunk carries its number and its send time, so each reader's latency, catch-up
//! time, and any lost or duplicated chunk are counted.
//!
//! A reader attaching or coming back has caught up once it has every chunk the live readers
//! had when it (re)connected: what it missed, by the readers that stayed. (Counting instead
//! the chunks the producer had sent would bill each system for the chunks then still on their
//! way, which differ by producer: turnstream's count comes from its fake upstream, before the
//! agent, the journal and the hub have seen the chunk; the others' from their append's answer.)
//!
//! turnstream's producer is its real agent path: `--agent openai` pointed at a fake
//! OpenAI-compatible upstream inside the bench, which stamps each chunk as it sends it. The
//! others' producer is the bench posting each chunk to the system's append endpoint.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, Result};
use tokio::sync::watch;

use crate::lineup::{start, Peers};
use crate::stats::Samples;
use crate::systems::{chunk_numbers, is_boundary, markers, Kind, Resume, System};
use crate::table::{Row, Sizes};

const READERS: usize = 5;
const AWAY: Duration = Duration::from_millis(300);
const CHUNK_BYTES: usize = 64;

fn chunk_text(n: u64) -> String {
    crate::upstream::chunk_text(n, CHUNK_BYTES)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    Live,
    Mid,
    Reconnect,
}

#[derive(Default)]
struct ReaderOut {
    latency: Samples,
    /// Mid: attach-to-caught-up; Reconnect: reconnect-to-caught-up.
    catch_up: Option<Duration>,
    seen: u64,
    dups: u64,
}

/// Tracks which chunks a reader has, and how far its gap-free prefix reaches.
struct Seen {
    have: Vec<bool>,
    prefix: u64,
    count: u64,
    dups: u64,
}

impl Seen {
    fn new(n: u64) -> Seen {
        Seen {
            have: vec![false; n as usize],
            prefix: 0,
            count: 0,
            dups: 0,
        }
    }

    fn add(&mut self, c: u64) -> bool {
        let Some(slot) = self.have.get_mut(c as usize) else {
            return false;
        };
        if *slot {
            self.dups += 1;
            return false;
        }
        *slot = true;
        self.count += 1;
        while self
            .have
            .get(self.prefix as usize)
            .copied()
            .unwrap_or(false)
        {
            self.prefix += 1;
        }
        true
    }
}

/// The chunks a frame carries (only the systems' delta events: turnstream's `turn_ended`
/// repeats the whole text and is not a delivery of chunks).
fn frame_chunks(kind: Kind, f: &crate::sse::Frame) -> Vec<(u64, Option<u64>)> {
    let carries = match kind {
        Kind::DurableStreams => f.event.as_deref() == Some("data"),
        _ => f.event.as_deref() == Some("response_delta"),
    };
    if !carries {
        return Vec::new();
    }
    let nums: Vec<u64> = chunk_numbers(&f.data).collect();
    let stamps: Vec<u64> = markers(&f.data).collect();
    nums.into_iter()
        .enumerate()
        .map(|(i, n)| (n, stamps.get(i).copied()))
        .collect()
}

struct Shared {
    sys: Arc<System>,
    stream: String,
    n: u64,
    /// Chunks published so far.
    sent: Arc<AtomicU64>,
    /// The longest gap-free run of chunks a live reader has so far.
    stayed: AtomicU64,
    stop: watch::Receiver<bool>,
}

async fn reader(sh: Arc<Shared>, role: Role) -> Result<ReaderOut> {
    let mut out = ReaderOut::default();
    let mut seen = Seen::new(sh.n);
    let kind = sh.sys.kind;
    let mut stop = sh.stop.clone();
    let wait_sent = |k: u64| {
        let sent = sh.sent.clone();
        async move {
            while sent.load(Ordering::Acquire) < k {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        }
    };
    let mut reader = match role {
        Role::Mid => {
            wait_sent(sh.n / 2).await;
            None
        }
        _ => Some(sh.sys.open(&sh.stream, &Resume::Start).await?),
    };
    if role == Role::Reconnect {
        if let Some(mut r) = reader.take() {
            let sent = sh.sent.clone();
            let quarter = sh.n / 4;
            tokio::select! {
                res = r.read(|f, _| {
                    for (c, _) in frame_chunks(kind, f) {
                        seen.add(c);
                    }
                    !(sent.load(Ordering::Acquire) >= quarter && is_boundary(kind, f))
                }) => res?,
                _ = stop.wait_for(|s| *s) => return Ok(out),
            }
            let pos = r
                .pos
                .clone()
                .ok_or_else(|| anyhow!("no position to resume from"))?;
            drop(r);
            tokio::time::sleep(AWAY).await;
            let target = sh.stayed.load(Ordering::Acquire);
            let t0 = Instant::now();
            let mut r = sh.sys.open(&sh.stream, &Resume::At(pos)).await?;
            let mut caught: Option<Duration> = None;
            tokio::select! {
                res = r.read(|f, _| {
                    for (c, _) in frame_chunks(kind, f) {
                        seen.add(c);
                    }
                    if caught.is_none() && seen.prefix >= target {
                        caught = Some(t0.elapsed());
                    }
                    seen.count < sh.n
                }) => res?,
                _ = stop.wait_for(|s| *s) => {}
            }
            out.catch_up = caught;
        }
    } else {
        let (mut r, target, t0) = match reader.take() {
            Some(r) => (r, 0, Instant::now()),
            None => {
                let target = sh.stayed.load(Ordering::Acquire);
                let t0 = Instant::now();
                (sh.sys.open(&sh.stream, &Resume::Start).await?, target, t0)
            }
        };
        let mut caught: Option<Duration> = None;
        let latency = &mut out.latency;
        tokio::select! {
            res = r.read(|f, now| {
                for (c, stamp) in frame_chunks(kind, f) {
                    if seen.add(c) && role == Role::Live {
                        if let Some(t) = stamp {
                            latency.push(now.saturating_sub(t));
                        }
                    }
                }
                if role == Role::Live {
                    sh.stayed.fetch_max(seen.prefix, Ordering::AcqRel);
                }
                if role == Role::Mid && caught.is_none() && seen.prefix >= target {
                    caught = Some(t0.elapsed());
                }
                seen.count < sh.n
            }) => res?,
            _ = stop.wait_for(|s| *s) => {}
        }
        out.catch_up = caught;
    }
    out.seen = seen.count;
    out.dups = seen.dups;
    Ok(out)
}

/// One system's results on the workload.
pub struct Outcome {
    live: Samples,
    mid: Samples,
    reconnect: Samples,
    lost: u64,
    dups: u64,
    achieved_rate: f64,
}

/// Runs the workload; `sent` counts published chunks (turnstream: the fake upstream's counter).
async fn run(sys: Arc<System>, n: u64, rate: f64, sent: Arc<AtomicU64>) -> Result<Outcome> {
    let stream = "chat".to_string();
    sys.prepare(&stream).await?;
    let (stop_tx, stop_rx) = watch::channel(false);
    let sh = Arc::new(Shared {
        sys: sys.clone(),
        stream: stream.clone(),
        n,
        sent: sent.clone(),
        stayed: AtomicU64::new(0),
        stop: stop_rx,
    });
    let mut tasks = Vec::new();
    for role in [Role::Live, Role::Mid, Role::Reconnect] {
        for _ in 0..READERS {
            let sh = sh.clone();
            tasks.push((role, tokio::spawn(reader(sh, role))));
        }
    }
    // Let the from-start readers attach before the first chunk.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let t0 = Instant::now();
    if sys.kind == Kind::Turnstream {
        let res = sys
            .http
            .post(format!("{}/api/sessions/{stream}/messages", sys.proc.url))
            .header("content-type", "application/json")
            .body(
                serde_json::json!({ "content": format!("{n} {rate} 0 {CHUNK_BYTES}") }).to_string(),
            )
            .send()
            .await?;
        if !res.status().is_success() {
            return Err(anyhow!("POST message: {}", res.status()));
        }
        while sent.load(Ordering::Acquire) < n {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    } else {
        for i in 0..n {
            tokio::time::sleep_until((t0 + Duration::from_secs_f64(i as f64 / rate)).into()).await;
            sys.publish_chunk(&stream, &chunk_text(i)).await?;
            sent.fetch_add(1, Ordering::Release);
        }
    }
    let achieved_rate = n as f64 / t0.elapsed().as_secs_f64();
    // Readers finish when they have every chunk; stragglers are stopped after a grace period.
    let grace = tokio::time::Instant::now() + Duration::from_secs(10);
    let mut out = Outcome {
        live: Samples::default(),
        mid: Samples::default(),
        reconnect: Samples::default(),
        lost: 0,
        dups: 0,
        achieved_rate,
    };
    for (role, t) in tasks {
        let r = tokio::select! {
            r = t => r,
            _ = tokio::time::sleep_until(grace) => {
                let _ = stop_tx.send(true);
                continue;
            }
        };
        let r = r.map_err(|e| anyhow!("reader task: {e}"))??;
        out.lost += n - r.seen;
        out.dups += r.dups;
        match role {
            Role::Live => out.live.extend(r.latency),
            Role::Mid => {
                if let Some(d) = r.catch_up {
                    out.mid.push(d.as_micros() as u64);
                }
            }
            Role::Reconnect => {
                if let Some(d) = r.catch_up {
                    out.reconnect.push(d.as_micros() as u64);
                }
            }
        }
    }
    let _ = stop_tx.send(true);
    Ok(out)
}

fn p50_max(s: &mut Samples) -> String {
    match (s.pct(50.0), s.pct(100.0)) {
        (Some(a), Some(b)) => format!("{} / {} ms", crate::stats::ms(a), crate::stats::ms(b)),
        _ => "no samples".into(),
    }
}

pub async fn figure(sizes: &Sizes, peers: &Peers, rows: &mut Vec<Row>) {
    let n = sizes.compare_chunks;
    let rate = sizes.compare_rate;
    let mut live = Row::new(
        format!("6. chat turn of {n} chunks at {rate}/s: live latency p50 / p99 (producer → reader, {READERS} readers)"),
        "—",
    );
    let mut mid = Row::new(
        format!(
            "6. reader attaching mid-turn: time to receive the turn so far, p50 / max of {READERS}"
        ),
        "—",
    );
    let mut rec = Row::new(
        format!(
            "6. reader back after {} ms away: time to recover what it missed, p50 / max of {READERS}",
            AWAY.as_millis()
        ),
        "≤ durable-streams'",
    );
    let mut loss = Row::new(
        format!(
            "6. chunks lost / duplicated over all {} readers",
            3 * READERS
        ),
        "0 / 0",
    );
    let mut ours: Option<(f64, f64, f64)> = None;
    for kind in [
        Kind::Turnstream,
        Kind::Ring,
        Kind::DurableStreams,
        Kind::Resumable,
    ] {
        eprintln!("compare: {kind}");
        let result: std::result::Result<Outcome, String> = async {
            if kind == Kind::Turnstream {
                let (url, sent, task) = crate::upstream::start()
                    .await
                    .map_err(|e| format!("{e:#}"))?;
                let sys = System::turnstream(&["--agent", "openai", "--openai-base-url", &url])
                    .await
                    .map_err(|e| format!("failed to start: {e:#}"))?;
                let r = run(Arc::new(sys), n, rate, sent).await;
                task.abort();
                r.map_err(|e| format!("failed: {e:#}"))
            } else {
                let sys = start(kind, peers).await?;
                run(sys, n, rate, Arc::new(AtomicU64::new(0)))
                    .await
                    .map_err(|e| format!("failed: {e:#}"))
            }
        }
        .await;
        let (l, m, r, x) = match result {
            Err(why) => (why.clone(), why.clone(), why.clone(), why),
            Ok(mut o) => {
                let lp99 = o.live.pct(99.0).unwrap_or(0) as f64;
                let mp = o.mid.pct(50.0).unwrap_or(0) as f64;
                let rp = o.reconnect.pct(50.0).unwrap_or(0) as f64;
                match (kind, ours) {
                    (Kind::Turnstream, _) => ours = Some((lp99, mp, rp)),
                    (Kind::Ring, Some((a, b, c))) => {
                        live.ratio = ratio(a, lp99);
                        mid.ratio = ratio(b, mp);
                        rec.ratio = ratio(c, rp);
                    }
                    _ => {}
                }
                (
                    format!("{} (achieved {:.0}/s)", o.live.p50_p99(), o.achieved_rate),
                    p50_max(&mut o.mid),
                    p50_max(&mut o.reconnect),
                    format!("{} lost / {} duplicated", o.lost, o.dups),
                )
            }
        };
        for (row, cell) in [(&mut live, l), (&mut mid, m), (&mut rec, r), (&mut loss, x)] {
            if kind == Kind::Turnstream {
                row.ours = cell;
            } else {
                row.comparisons.push(format!("{kind}: {cell}"));
            }
        }
    }
    rows.extend([live, mid, rec, loss]);
}

fn ratio(ours: f64, theirs: f64) -> String {
    if theirs > 0.0 && ours > 0.0 {
        format!("{:.2}×", ours / theirs)
    } else {
        "—".into()
    }
}
