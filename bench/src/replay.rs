//! Figure 4: reconnect replay. A reader comes back with a position N events behind the head of
//! its stream; the time is from sending the request to receiving the last missed event.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, Result};
use futures::StreamExt;

use crate::append::{payload, scrape, PAYLOAD_BYTES};
use crate::stats::Samples;
use crate::systems::{Kind, Resume, System};

const STREAM: &str = "replay";

/// Appends `n` 200-byte events to the replay stream. Peers: one chunk per request, 32 in
/// flight. turnstream: one turn whose model (the bench's fake upstream) streams `n` chunks as
/// fast as it can and then holds the turn open, so the replayed window is all deltas, as when a
/// reader drops out mid-turn.
async fn fill(sys: &Arc<System>, n: u64, first_index: u64) -> Result<()> {
    if sys.kind == Kind::Turnstream {
        let before = scrape(sys).await?.get("turnstream_events_appended_total");
        let res = sys
            .http
            .post(format!("{}/api/sessions/{STREAM}/messages", sys.proc.url))
            .header("content-type", "application/json")
            .body(
                serde_json::json!({ "content": format!("{n} 1000000000 600000 {PAYLOAD_BYTES}") })
                    .to_string(),
            )
            .send()
            .await?;
        if !res.status().is_success() {
            return Err(anyhow!("fill: POST message: {}", res.status()));
        }
        // message_received, turn_queued, turn_started, then the n deltas.
        let want = before + n as f64 + 3.0;
        let deadline = Instant::now() + Duration::from_secs(300);
        while scrape(sys).await?.get("turnstream_events_appended_total") < want {
            if Instant::now() > deadline {
                return Err(anyhow!("fill: the deltas were not all journaled"));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        return Ok(());
    }
    // Order matters for positions, so the chunks go in order, pipelined 32 deep per window.
    let results = futures::stream::iter((0..n).map(|i| {
        let sys = sys.clone();
        async move { sys.publish_chunk(STREAM, &payload(first_index + i)).await }
    }))
    .buffered(32)
    .collect::<Vec<_>>()
    .await;
    results.into_iter().collect()
}

pub struct Replay {
    pub missed: u64,
    pub samples: Samples,
    /// Events received per replay (should equal `missed`; turnstream's count includes each
    /// message's own lifecycle events).
    pub received: u64,
    /// The SSE frames that carried them (one per event on turnstream; durable-streams batches
    /// records into one frame while catching up) and the bytes of the stream until the last.
    pub frames: u64,
    pub bytes: u64,
}

/// Measures replay of each of `missed` `reps` times. A turnstream `sys` must run with
/// `--agent openai` against the bench's fake upstream (see `upstream`).
pub async fn run(sys: Arc<System>, missed: &[u64], reps: usize) -> Result<Vec<Replay>> {
    sys.prepare(STREAM).await?;
    let mut sorted: Vec<u64> = missed.to_vec();
    sorted.sort_unstable_by(|a, b| b.cmp(a));
    let max = sorted.first().copied().unwrap_or(0);
    // Positions N events behind the final head: turnstream and the ring count events in their
    // positions; the others get a position recorded after filling all but N events.
    let mut positions: Vec<(u64, String)> = Vec::new();
    let mut filled = 200;
    if matches!(sys.kind, Kind::Turnstream | Kind::Ring) {
        fill(&sys, max + 200, 0).await?;
    } else {
        fill(&sys, 200, 0).await?;
        for &n in &sorted {
            fill(&sys, max - n + 200 - filled, filled).await?;
            filled = max - n + 200;
            positions.push((n, sys.head(STREAM).await?));
        }
        fill(&sys, max + 200 - filled, filled).await?;
    }
    let head = sys.head(STREAM).await?;
    if matches!(sys.kind, Kind::Turnstream | Kind::Ring) {
        for &n in &sorted {
            positions.push((n, sys.back_by(&head, n)?));
        }
    }
    let mut out = Vec::new();
    for (n, pos) in positions {
        let mut samples = Samples::default();
        let mut received = crate::systems::Received::default();
        for _ in 0..reps {
            let t0 = Instant::now();
            let mut reader = sys.open(STREAM, &Resume::At(pos.clone())).await?;
            let count = tokio::time::timeout(Duration::from_secs(60), reader.read_until(&head))
                .await
                .map_err(|_| anyhow!("replay of {n} did not finish within 60 s"))??;
            samples.push(t0.elapsed().as_micros() as u64);
            received = count;
        }
        out.push(Replay {
            missed: n,
            samples,
            received: received.events,
            frames: received.frames,
            bytes: received.bytes,
        });
    }
    Ok(out)
}
