//! `GET /api/stream`: one SSE stream per tab, over any number of sessions (up to a limit).
//!
//! Attach to the live feed first, then read the journal from the resume position (snapshot and
//! replay in one read transaction), then send live frames, dropping those already sent. A
//! subscriber that falls behind goes back to the journal from the last id it sent.

use std::convert::Infallible;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{RawQuery, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::Response;
use bytes::{Bytes, BytesMut};
use tokio::sync::mpsc;
use turnstream_protocol::limits::{is_valid_id, MAX_SESSIONS_PER_STREAM};
use turnstream_protocol::{sse, ResyncReason, ResyncRequired, RESYNC_EVENT, SNAPSHOT_EVENT};

use super::error::AppError;
use super::AppState;
use crate::hub::Subscription;
use crate::journal::{Journal, Page};
use crate::metrics::Metrics;

/// Events read from the journal per query while replaying.
const REPLAY_PAGE: usize = 2000;
/// Writes (each up to 64 KiB) buffered between a stream's pump and its socket: a slow client
/// holds at most this much here before it falls back to the journal.
const BODY_BUFFER: usize = 8;
/// Reconnection delay suggested to EventSource.
const RETRY_MS: u64 = 1000;

#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct StreamParams {
    pub sessions: Vec<String>,
    pub cursor: Option<String>,
    pub snapshot: bool,
}

pub(crate) fn parse_params(query: Option<&str>) -> Result<StreamParams, AppError> {
    let mut p = StreamParams::default();
    for (k, v) in form_urlencoded::parse(query.unwrap_or("").as_bytes()) {
        match &*k {
            "session" => {
                if !is_valid_id(&v) {
                    return Err(AppError::bad_request(
                        "invalid_session_id",
                        "session ids are 1 to 128 characters of [A-Za-z0-9_.:-]",
                    ));
                }
                if !p.sessions.iter().any(|s| *s == *v) {
                    p.sessions.push(v.into_owned());
                }
            }
            "cursor" if !v.is_empty() => p.cursor = Some(v.into_owned()),
            "snapshot" => p.snapshot = matches!(&*v, "1" | "true" | "yes"),
            _ => {}
        }
    }
    if p.sessions.is_empty() {
        return Err(AppError::bad_request(
            "missing_session",
            "subscribe to at least one session with ?session=ID",
        ));
    }
    if p.sessions.len() > MAX_SESSIONS_PER_STREAM {
        return Err(AppError::bad_request(
            "too_many_sessions",
            format!("a stream may subscribe to at most {MAX_SESSIONS_PER_STREAM} sessions"),
        ));
    }
    Ok(p)
}

pub(crate) async fn stream(
    State(state): State<AppState>,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
) -> Result<Response, AppError> {
    let params = parse_params(query.as_deref())?;
    let last_event_id = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .map(str::to_string);
    let want_snapshot = params.snapshot && last_event_id.is_none();
    let resume = last_event_id.or(params.cursor);
    let metrics = state.journal.metrics().clone();
    let Some(guard) = ConnectionGuard::try_new(metrics.clone(), state.limits.max_streams) else {
        return Err(too_many_streams());
    };
    // Attach first, so nothing that commits while the journal is read can be missed.
    let sub = state.journal.hub().subscribe(&params.sessions);
    let start = state
        .journal
        .stream_start(params.sessions.clone(), resume, want_snapshot, REPLAY_PAGE)
        .await?;
    let (tx, rx) = mpsc::channel::<Result<Bytes, Infallible>>(BODY_BUFFER);
    let mut prelude = format!("retry: {RETRY_MS}\n\n");
    let pump = match start {
        Err(reason) => {
            metrics.resync(reason);
            prelude.push_str(&resync_frame(reason));
            None
        }
        Ok(start) => {
            if let Some(snapshot) = &start.snapshot {
                let json = serde_json::to_string(snapshot)
                    .map_err(|e| AppError::from(crate::error::Error::from(e)))?;
                prelude.push_str(&sse::encode(None, SNAPSHOT_EVENT, &json));
            }
            Some(
                Pump {
                    tx: tx.clone(),
                    sub,
                    journal: state.journal.clone(),
                    sessions: params.sessions,
                    last: start.resume_seq,
                    heartbeat: state.limits.heartbeat,
                    shutdown: state.shutdown.clone(),
                    metrics,
                    _guard: guard,
                }
                .run(start.page),
            )
        }
    };
    // The prelude fits the buffer: a fresh channel has room for one frame.
    let _ = tx.try_send(Ok(Bytes::from(prelude)));
    drop(tx);
    if let Some(pump) = pump {
        tokio::spawn(pump);
    }
    let body = Body::from_stream(tokio_stream_from(rx));
    let mut res = Response::new(body);
    let h = res.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert("x-accel-buffering", HeaderValue::from_static("no"));
    Ok(res)
}

fn too_many_streams() -> AppError {
    AppError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "too_many_streams",
        "the server has as many open streams as it allows; retry later",
    )
}

fn resync_frame(reason: ResyncReason) -> String {
    let json = serde_json::to_string(&ResyncRequired { reason })
        .unwrap_or_else(|_| format!("{{\"reason\":\"{}\"}}", reason.as_str()));
    sse::encode(None, RESYNC_EVENT, &json)
}

fn tokio_stream_from(
    mut rx: mpsc::Receiver<Result<Bytes, Infallible>>,
) -> impl futures::Stream<Item = Result<Bytes, Infallible>> {
    futures::stream::poll_fn(move |cx| rx.poll_recv(cx))
}

/// Frames joined into one write of up to [`BATCH_BYTES`].
#[derive(Default)]
struct Batch {
    one: Option<Bytes>,
    many: Option<BytesMut>,
}

/// Largest write a stream makes from several frames.
const BATCH_BYTES: usize = 64 * 1024;

impl Batch {
    /// Adds a frame; returns a full batch to send, if this one filled it.
    fn push(&mut self, frame: &crate::hub::Frame) -> Option<Bytes> {
        match (&mut self.many, self.one.take()) {
            (Some(buf), _) => buf.extend_from_slice(&frame.bytes),
            (None, None) => self.one = Some(frame.bytes.clone()),
            (None, Some(first)) => {
                let mut buf = BytesMut::with_capacity((first.len() + frame.bytes.len()) * 4);
                buf.extend_from_slice(&first);
                buf.extend_from_slice(&frame.bytes);
                self.many = Some(buf);
            }
        }
        if self.many.as_ref().is_some_and(|b| b.len() >= BATCH_BYTES) {
            return self.take();
        }
        None
    }

    /// What is batched, if anything; leaves the batch empty.
    fn take(&mut self) -> Option<Bytes> {
        match self.many.take() {
            Some(buf) => Some(buf.freeze()),
            None => self.one.take(),
        }
    }
}

/// Counts an open stream for its whole life.
struct ConnectionGuard(Arc<Metrics>);

impl ConnectionGuard {
    /// Counts one more stream, unless that would pass `max` (checked and counted in one step).
    fn try_new(m: Arc<Metrics>, max: usize) -> Option<Self> {
        let before = m.connections.fetch_add(1, Ordering::AcqRel);
        if before as usize >= max {
            m.connections.fetch_sub(1, Ordering::AcqRel);
            return None;
        }
        m.connections_total.fetch_add(1, Ordering::Relaxed);
        Some(ConnectionGuard(m))
    }
}

impl Drop for ConnectionGuard {
    fn drop(&mut self) {
        self.0.connections.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Moves frames from the journal and the live feed to one client, in order, exactly once.
struct Pump {
    tx: mpsc::Sender<Result<Bytes, Infallible>>,
    sub: Subscription,
    journal: Journal,
    sessions: Vec<String>,
    /// The last event id sent (or the resume position).
    last: i64,
    heartbeat: Duration,
    shutdown: tokio_util::sync::CancellationToken,
    metrics: Arc<Metrics>,
    _guard: ConnectionGuard,
}

/// Why a pump stopped early.
enum Stop {
    /// The client went away or the server is shutting down.
    Gone,
    /// The journal no longer holds what the client needs.
    Resync(ResyncReason),
}

impl Pump {
    async fn run(mut self, first: Page) {
        let replayed = first.events;
        let outcome = async {
            let complete = first.complete;
            self.send_page(first).await?;
            if !complete {
                self.catch_up().await?;
            }
            if replayed > 0 {
                self.metrics.replays.fetch_add(1, Ordering::Relaxed);
            }
            self.live().await
        }
        .await;
        if let Err(Stop::Resync(reason)) = outcome {
            self.metrics.resync(reason);
            let _ = self.tx.send(Ok(Bytes::from(resync_frame(reason)))).await;
        }
    }

    async fn send_page(&mut self, page: Page) -> Result<(), Stop> {
        self.metrics
            .replayed_events
            .fetch_add(page.events as u64, Ordering::Relaxed);
        // A page holds exactly the events after `self.last`, already joined into writes.
        for chunk in page.chunks {
            self.send(chunk).await?;
        }
        self.last = self.last.max(page.last_seq);
        Ok(())
    }

    /// Reads the journal from the last id sent until the head.
    async fn catch_up(&mut self) -> Result<(), Stop> {
        loop {
            let page = match self
                .journal
                .read_after(self.sessions.clone(), self.last, REPLAY_PAGE)
                .await
            {
                Ok(Ok(page)) => page,
                Ok(Err(reason)) => return Err(Stop::Resync(reason)),
                Err(e) => {
                    tracing::error!(error = %e, "stream: journal read failed; closing so the client resumes");
                    return Err(Stop::Gone);
                }
            };
            let complete = page.complete;
            self.send_page(page).await?;
            if complete {
                return Ok(());
            }
        }
    }

    async fn live(&mut self) -> Result<(), Stop> {
        let mut heartbeat = tokio::time::interval(self.heartbeat);
        heartbeat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        heartbeat.tick().await;
        loop {
            tokio::select! {
                frame = self.sub.recv() => {
                    let Some(first) = frame else { return Err(Stop::Gone) };
                    // Send whatever is already queued in one write: a burst to many subscribers
                    // then costs one syscall each, not one per event.
                    let mut batch = Batch::default();
                    let mut next = Some(first);
                    while let Some(frame) = next {
                        if self.sub.take_lagged() {
                            // Frames were dropped after some of those queued: send what is
                            // batched, then go back to the journal before anything newer.
                            if let Some(sent) = batch.take() {
                                self.send(sent).await?;
                            }
                            self.metrics.lag_fallbacks.fetch_add(1, Ordering::Relaxed);
                            self.catch_up().await?;
                        }
                        if frame.seq > self.last {
                            self.last = frame.seq;
                            if let Some(full) = batch.push(&frame) {
                                self.send(full).await?;
                            }
                        }
                        next = self.sub.try_recv();
                    }
                    if let Some(rest) = batch.take() {
                        self.send(rest).await?;
                        // A stream that carries events needs no heartbeat.
                        heartbeat.reset();
                    }
                }
                _ = heartbeat.tick() => {
                    self.send(Bytes::from_static(b": heartbeat\n\n")).await?;
                }
                _ = self.shutdown.cancelled() => {
                    self.drain().await;
                    return Err(Stop::Gone);
                }
                _ = self.tx.closed() => return Err(Stop::Gone),
            }
        }
    }

    /// On shutdown: send what was committed and queued before the stream closes, so a turn that
    /// ended during the grace period reaches the client live (it could still resume otherwise).
    async fn drain(&mut self) {
        while let Some(frame) = self.sub.try_recv() {
            if frame.seq <= self.last {
                continue;
            }
            let sent = tokio::time::timeout(
                Duration::from_secs(1),
                self.tx.send(Ok(frame.bytes.clone())),
            )
            .await;
            if !matches!(sent, Ok(Ok(()))) {
                return;
            }
            self.last = frame.seq;
        }
    }

    async fn send(&self, bytes: Bytes) -> Result<(), Stop> {
        tokio::select! {
            r = self.tx.send(Ok(bytes)) => r.map_err(|_| Stop::Gone),
            _ = self.shutdown.cancelled() => Err(Stop::Gone),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn params() {
        let p = parse_params(Some("session=a&session=b&session=a&cursor=x-1&snapshot=1"))
            .unwrap_or_default();
        assert_eq!(p.sessions, vec!["a", "b"]);
        assert_eq!(p.cursor.as_deref(), Some("x-1"));
        assert!(p.snapshot);
        assert!(parse_params(Some("cursor=x-1")).is_err());
        assert!(parse_params(Some("session=a%20b")).is_err());
        let many: Vec<String> = (0..=MAX_SESSIONS_PER_STREAM)
            .map(|i| format!("session=s{i}"))
            .collect();
        assert!(parse_params(Some(&many.join("&"))).is_err());
    }

    fn frame(seq: i64, len: usize) -> crate::hub::Frame {
        crate::hub::Frame {
            seq,
            session_id: "s".into(),
            bytes: Bytes::from(vec![b'a' + (seq % 26) as u8; len]),
        }
    }

    #[test]
    fn batches_join_frames_in_order_and_split_when_full() {
        let mut b = Batch::default();
        assert!(b.take().is_none());
        assert!(b.push(&frame(1, 10)).is_none());
        assert_eq!(
            b.take().map(|x| x.len()),
            Some(10),
            "one frame goes out as is"
        );
        assert!(b.push(&frame(2, 3)).is_none());
        assert!(b.push(&frame(3, 3)).is_none());
        assert_eq!(b.take().as_deref(), Some(&b"cccddd"[..]));
        let mut sent = Vec::new();
        for seq in 0..100 {
            if let Some(full) = b.push(&frame(seq, 4096)) {
                sent.push(full);
            }
        }
        sent.extend(b.take());
        assert!(sent.iter().all(|s| s.len() <= BATCH_BYTES));
        let joined: Vec<u8> = sent.iter().flat_map(|s| s.iter().copied()).collect();
        let expected: Vec<u8> = (0..100)
            .flat_map(|seq| frame(seq, 4096).bytes.to_vec())
            .collect();
        assert_eq!(joined, expected);
    }
}
