//! A fake OpenAI-compatible upstream inside the bench, so turnstream's chunks come through its
//! real agent path (`--agent openai`): model stream → agent → journal → SSE.
//!
//! The user message says `"N RATE HOLD_MS SIZE"`: stream N chunks of SIZE bytes at RATE per
//! second, each stamped with its send time and numbered (`#<n>@T<unix µs>@`), then wait HOLD_MS
//! before finishing (a held-open turn lets a replay window end on deltas, mid-turn, instead of
//! on the turn's final message).

use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use axum::extract::State;
use axum::response::Response;
use bytes::Bytes;

use crate::stats::unix_us;

/// A chunk of `size` bytes naming its number and send time.
pub fn chunk_text(n: u64, size: usize) -> String {
    let mut s = format!("#{n}@T{}@ ", unix_us());
    while s.len() < size {
        s.push('x');
    }
    s
}

struct Upstream {
    sent: Arc<AtomicU64>,
}

async fn completions(State(up): State<Arc<Upstream>>, body: String) -> Response {
    let content = serde_json::from_str::<serde_json::Value>(&body)
        .ok()
        .and_then(|v| {
            v.get("messages")?
                .as_array()?
                .last()?
                .get("content")?
                .as_str()
                .map(str::to_string)
        })
        .unwrap_or_default();
    let nums: Vec<f64> = content
        .split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect();
    let n = nums.first().copied().unwrap_or(0.0) as u64;
    let rate = nums.get(1).copied().unwrap_or(100.0).max(1.0);
    let hold = Duration::from_millis(nums.get(2).copied().unwrap_or(0.0) as u64);
    let size = nums.get(3).copied().unwrap_or(64.0) as usize;
    let start = tokio::time::Instant::now();
    let sent = up.sent.clone();
    let stream = futures::stream::unfold(0u64, move |i| {
        let sent = sent.clone();
        async move {
            let frame = if i < n {
                tokio::time::sleep_until(start + Duration::from_secs_f64(i as f64 / rate)).await;
                let chunk = serde_json::json!({"choices": [{"index": 0, "delta": {"content": chunk_text(i, size)}}]});
                sent.fetch_add(1, Ordering::Release);
                format!("data: {chunk}\n\n")
            } else if i == n {
                if !hold.is_zero() {
                    tokio::time::sleep(hold).await;
                }
                "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n"
                    .to_string()
            } else if i == n + 1 {
                "data: [DONE]\n\n".to_string()
            } else {
                return None;
            };
            Some((Ok::<_, Infallible>(Bytes::from(frame)), i + 1))
        }
    });
    let mut res = Response::new(axum::body::Body::from_stream(stream));
    res.headers_mut().insert(
        axum::http::header::CONTENT_TYPE,
        axum::http::HeaderValue::from_static("text/event-stream"),
    );
    res
}

/// Starts the upstream on a free port; returns its base URL (`…/v1`), its sent-chunk counter,
/// and its task (abort it when done).
pub async fn start() -> Result<(String, Arc<AtomicU64>, tokio::task::JoinHandle<()>)> {
    let sent = Arc::new(AtomicU64::new(0));
    let app = axum::Router::new()
        .route("/v1/chat/completions", axum::routing::post(completions))
        .with_state(Arc::new(Upstream { sent: sent.clone() }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}/v1", listener.local_addr()?);
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Ok((url, sent, task))
}
