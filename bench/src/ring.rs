//! The in-memory baseline: fan-out from a per-session ring buffer, as in the replay-buffer design
//! this project started from (seed 004): a monotonic per-session `seq`, a deque of the last 2000
//! events, `?since=` (or `Last-Event-ID`) replay, and live frames to per-subscriber queues. No
//! disk, no journal, nothing survives a restart: it shows what durability costs.
//!
//! Routes: `POST /publish/{s}` (body = text; `?shape=turn` appends the five events of a short
//! turn, like turnstream's `/echo`), `GET /stream/{s}[?since=N]`, `GET /head/{s}`.

use std::collections::{HashMap, VecDeque};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Result;
use axum::body::Body;
use axum::extract::{Path, RawQuery, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use bytes::Bytes;
use tokio::sync::mpsc;

use crate::stats::unix_us;

/// Frames a subscriber may have queued; a subscriber that falls further behind is cut off and
/// must reconnect with `since` (the seed's queues were unbounded; a bound keeps memory honest).
const SUBSCRIBER_QUEUE: usize = 1024;
/// Same heartbeat period as turnstream, so idle connections cost the same timers.
const HEARTBEAT: Duration = Duration::from_secs(15);

#[derive(Default)]
struct Session {
    seq: u64,
    ring: VecDeque<(u64, Bytes)>,
    subs: Vec<mpsc::Sender<Bytes>>,
}

struct Ring {
    capacity: usize,
    sessions: Mutex<HashMap<String, Arc<Mutex<Session>>>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Ring {
    fn session(&self, id: &str) -> Arc<Mutex<Session>> {
        lock(&self.sessions)
            .entry(id.to_string())
            .or_default()
            .clone()
    }
}

pub async fn serve(listen: SocketAddr, capacity: usize) -> Result<()> {
    let state = Arc::new(Ring {
        capacity,
        sessions: Mutex::new(HashMap::new()),
    });
    let app = Router::new()
        .route("/publish/{s}", post(publish))
        .route("/stream/{s}", get(stream))
        .route("/head/{s}", get(head))
        .with_state(state);
    // The same deep backlog turnstream uses, so a reconnect burst is compared fairly.
    let listener = turnstream_server::serve::bind(listen)?;
    println!("ring listening on http://{}", listener.local_addr()?);
    // The same accept loop too, with no cap on connections per address (every bench client is
    // on loopback).
    let limits = turnstream_server::edge::ConnLimits {
        max_connections_per_ip: 0,
        ..Default::default()
    };
    turnstream_server::serve::serve(
        listener,
        app,
        limits,
        tokio_util::sync::CancellationToken::new(),
    )
    .await;
    Ok(())
}

fn frame(seq: u64, session: &str, kind: &str, body: serde_json::Value) -> Bytes {
    let mut v = body;
    if let serde_json::Value::Object(m) = &mut v {
        m.insert("seq".into(), seq.into());
        m.insert("session_id".into(), session.into());
        m.insert("ts".into(), (unix_us() / 1000).into());
        m.insert("kind".into(), kind.into());
    }
    Bytes::from(format!("id: {seq}\nevent: {kind}\ndata: {v}\n\n"))
}

async fn publish(
    State(ring): State<Arc<Ring>>,
    Path(s): Path<String>,
    RawQuery(q): RawQuery,
    text: String,
) -> Response {
    let turn = q.as_deref().is_some_and(|q| q.contains("shape=turn"));
    let events: Vec<(&str, serde_json::Value)> = if turn {
        vec![
            (
                "message_received",
                serde_json::json!({"message": {"role": "user", "content": text}}),
            ),
            ("turn_queued", serde_json::json!({})),
            ("turn_started", serde_json::json!({})),
            ("response_delta", serde_json::json!({ "delta": text })),
            (
                "turn_ended",
                serde_json::json!({"state": "completed", "message": {"role": "assistant", "content": text}}),
            ),
        ]
    } else {
        vec![("response_delta", serde_json::json!({ "delta": text }))]
    };
    let session = ring.session(&s);
    let mut sess = lock(&session);
    for (kind, body) in events {
        sess.seq += 1;
        let seq = sess.seq;
        let f = frame(seq, &s, kind, body);
        sess.ring.push_back((seq, f.clone()));
        while sess.ring.len() > ring.capacity {
            sess.ring.pop_front();
        }
        // A full or closed queue drops that subscriber; its client resumes with `since`.
        sess.subs.retain(|tx| tx.try_send(f.clone()).is_ok());
    }
    let seq = sess.seq;
    drop(sess);
    (StatusCode::ACCEPTED, seq.to_string()).into_response()
}

async fn head(State(ring): State<Arc<Ring>>, Path(s): Path<String>) -> Response {
    let seq = lock(&ring.session(&s)).seq;
    seq.to_string().into_response()
}

async fn stream(
    State(ring): State<Arc<Ring>>,
    Path(s): Path<String>,
    headers: HeaderMap,
    RawQuery(q): RawQuery,
) -> Response {
    let since: Option<u64> = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse().ok())
        .or_else(|| {
            q.as_deref()?
                .split('&')
                .find_map(|kv| kv.strip_prefix("since="))
                .and_then(|v| v.parse().ok())
        });
    let (tx, rx) = mpsc::channel(SUBSCRIBER_QUEUE);
    let mut prelude = String::from("retry: 1000\n\n");
    {
        // Snapshot the replay and attach in one critical section: no gap, no duplicate.
        let session = ring.session(&s);
        let mut sess = lock(&session);
        if let Some(since) = since {
            let oldest = sess
                .ring
                .front()
                .map(|(seq, _)| *seq)
                .unwrap_or(sess.seq + 1);
            if since + 1 < oldest {
                prelude.push_str(&format!(
                    "event: gap\ndata: {{\"since\":{since},\"oldest\":{oldest}}}\n\n"
                ));
            }
            for (seq, f) in &sess.ring {
                if *seq > since {
                    prelude.push_str(&String::from_utf8_lossy(f));
                }
            }
        }
        sess.subs.push(tx);
    }
    let mut heartbeat = tokio::time::interval(HEARTBEAT);
    heartbeat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let first = Some(Bytes::from(prelude));
    let body = futures::stream::unfold(
        (rx, heartbeat, first, true),
        |(mut rx, mut hb, mut first, fresh)| async move {
            if let Some(b) = first.take() {
                return Some((Ok::<_, Infallible>(b), (rx, hb, None, fresh)));
            }
            if fresh {
                // The interval's first tick is immediate; consume it.
                hb.tick().await;
            }
            tokio::select! {
                f = rx.recv() => f.map(|b| (Ok(b), (rx, hb, None, false))),
                _ = hb.tick() => Some((Ok(Bytes::from_static(b": heartbeat\n\n")), (rx, hb, None, false))),
            }
        },
    );
    let mut res = Response::new(Body::from_stream(body));
    let h = res.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    res
}
