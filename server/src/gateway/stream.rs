//! `GET /api/stream`: one SSE stream per tab, over any number of sessions (up to a limit).
//!
//! Attach to the live feed first, then replay from the resume position: from the hub's replay
//! tail when it covers that position (taken in the same step as the attach), else from the
//! journal (snapshot and replay in one read transaction). Then send live frames, dropping those
//! already sent. A subscriber that falls behind goes back to the journal from the last id it sent.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::extract::{RawQuery, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::Response;
use axum::Extension;
use bytes::{Bytes, BytesMut};
use turnstream_protocol::limits::{is_valid_id, MAX_SESSIONS_PER_STREAM};
use turnstream_protocol::{Cursor, ResyncReason};

use super::error::AppError;
use super::quota::StreamSlot;
use super::{access, AppState, Peer};
use crate::auth::{Principal, Scope};
use crate::frames;
use crate::hub::{Subscription, TailReplay};
use crate::journal::{Journal, Page, StreamStart};
use crate::metrics::Metrics;
use tokio::time::{Instant, Sleep};

/// Events read from the journal per query while replaying.
const REPLAY_PAGE: usize = 2000;
/// Most events a resume takes from the replay tail at once (the rest, if any, from the journal).
const TAIL_PAGE: usize = 20_000;
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
    Extension(principal): Extension<Principal>,
    peer: Peer,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
) -> Result<Response, AppError> {
    let params = parse_params(query.as_deref())?;
    for session in &params.sessions {
        access::require(&principal, Scope::Read, session)?;
    }
    let client_slot = match access::client_key(&principal, peer.as_ref().map(|Extension(c)| c)) {
        Some(client) => match state.client_streams.open(&client) {
            Some(slot) => Some(slot),
            None => {
                return Err(super::quota::too_many_client_streams(
                    state.limits.max_streams_per_client,
                ))
            }
        },
        None => None,
    };
    // The stream is authorised now; it ends when its token does (the client then resumes with
    // a fresh one from its last event id).
    let expires = principal.expires_at().map(|at| {
        let left = at
            .duration_since(std::time::SystemTime::now())
            .unwrap_or(Duration::ZERO);
        Instant::now() + left
    });
    let last_event_id = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .map(str::to_string);
    let want_snapshot = params.snapshot && last_event_id.is_none();
    let resume = last_event_id.or(params.cursor);
    let metrics = state.journal.metrics();
    let Some(guard) = ConnectionGuard::try_new(metrics.clone(), state.limits.max_streams) else {
        return Err(too_many_streams());
    };
    // Attach first, so nothing that commits while the journal is read can be missed. A resume
    // from a recent position is answered from the hub's replay tail in the same step, without a
    // journal read; anything else (a snapshot, an old, invalid or foreign position) reads it.
    let recent = match &resume {
        Some(r) if !want_snapshot => recent_position(&state.journal, r),
        _ => None,
    };
    let (sub, tail) = state
        .hub
        .subscribe_after(&params.sessions, recent, TAIL_PAGE);
    let start = match (tail, recent) {
        (Some(tail), Some(after)) => {
            metrics.tail_replays.fetch_add(1, Ordering::Relaxed);
            Ok(StreamStart {
                snapshot: None,
                page: page_from_tail(tail, after),
                resume_seq: after,
            })
        }
        _ => {
            state
                .journal
                .stream_start(
                    params.sessions.clone(),
                    resume,
                    want_snapshot,
                    REPLAY_PAGE,
                    frames::write_event,
                )
                .await?
        }
    };
    let mut prelude = format!("retry: {RETRY_MS}\n\n");
    drop(params.sessions);
    let mut pump = Pump {
        pending: VecDeque::new(),
        phase: Phase::Done,
        sub,
        journal: state.journal.clone(),
        last: 0,
        timer: None,
        expires,
        heartbeat_every: state.limits.heartbeat,
        last_write: Instant::now(),
        replayed: 0,
        guard,
        _client_slot: client_slot,
    };
    match start {
        Err(reason) => {
            pump.metrics().resync(reason);
            prelude.push_str(&frames::resync_frame(reason));
        }
        Ok(start) => {
            if let Some(snapshot) = &start.snapshot {
                let frame = frames::snapshot_frame(snapshot)
                    .map_err(|e| AppError::from(crate::error::Error::from(e)))?;
                prelude.push_str(&frame);
            }
            pump.last = start.resume_seq;
            pump.phase = if start.page.complete {
                Phase::Live
            } else {
                Phase::CatchUp
            };
            pump.take_page(start.page);
        }
    }
    pump.pending.push_front(Bytes::from(prelude));
    let body = Body::new(pump);
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

/// The sequence of a valid resume position of this journal, if it is not ahead of the head
/// (the journal read reports every other case).
fn recent_position(journal: &Journal, resume: &str) -> Option<i64> {
    let cursor = resume.parse::<Cursor>().ok()?;
    (cursor.epoch == journal.epoch() && cursor.sequence <= journal.head())
        .then_some(cursor.sequence)
}

/// A first page made of frames from the replay tail, joined into writes like the journal's.
fn page_from_tail(tail: TailReplay, after: i64) -> Page {
    let mut batch = Batch::default();
    let mut chunks = Vec::new();
    for frame in &tail.frames {
        chunks.extend(batch.push(frame));
    }
    chunks.extend(batch.take());
    Page {
        chunks,
        events: tail.frames.len(),
        last_seq: tail.frames.last().map_or(after, |f| f.seq),
        complete: tail.complete,
    }
}

fn too_many_streams() -> AppError {
    AppError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "too_many_streams",
        "the server has as many open streams as it allows; retry later",
    )
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
///
/// It is the response body itself, polled by the connection when the socket can take more: no
/// task, channel or future of its own, so an idle stream costs its subscription (an empty inbox
/// in the hub), one timer and this struct, which keeps no buffer while idle. A client that stops
/// reading stops the polling; its inbox then fills, the hub flags it lagged, and the next poll
/// goes back to the journal from the last id sent.
struct Pump {
    /// Writes ready to go out, in order (given back once empty: a live stream writes what its
    /// inbox had straight from there).
    pending: VecDeque<Bytes>,
    phase: Phase,
    /// The live feed, and the stream's only copy of its sessions.
    sub: Subscription,
    journal: Journal,
    /// The last event id sent or queued in `pending` (or the resume position).
    last: i64,
    /// Armed once the stream is live, for the next heartbeat or the token's expiry, whichever
    /// comes first (one timer for both).
    timer: Option<Pin<Box<Sleep>>>,
    /// When the stream's token expires (never for streams without one).
    expires: Option<Instant>,
    heartbeat_every: Duration,
    /// When live frames were last queued: a heartbeat goes out only after a period without any
    /// (checked when the timer fires, so sending frames never touches the timer).
    last_write: Instant,
    /// Events replayed from the journal before going live.
    replayed: usize,
    guard: ConnectionGuard,
    _client_slot: Option<StreamSlot>,
}

/// A journal read in flight.
type Read = Pin<
    Box<dyn Future<Output = crate::error::Result<Result<Page, ResyncReason>>> + Send + 'static>,
>;

/// What a stream does once `pending` is empty.
enum Phase {
    /// Read the next page of the journal after `last`.
    CatchUp,
    /// Waiting for that page (boxed: only a stream catching up holds it).
    Reading(Read),
    /// Send live frames (and heartbeats).
    Live,
    /// Send a resync event, then end.
    Resync(ResyncReason),
    /// End the stream.
    Done,
}

impl http_body::Body for Pump {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, Infallible>>> {
        self.get_mut()
            .poll_chunk(cx)
            .map(|chunk| chunk.map(|c| Ok(http_body::Frame::data(c))))
    }

    fn is_end_stream(&self) -> bool {
        matches!(self.phase, Phase::Done) && self.pending.is_empty()
    }
}

impl Pump {
    fn metrics(&self) -> &Arc<Metrics> {
        &self.guard.0
    }

    /// Queues a page read from the journal (exactly the events after `last`).
    fn take_page(&mut self, page: Page) {
        self.metrics()
            .replayed_events
            .fetch_add(page.events as u64, Ordering::Relaxed);
        self.replayed += page.events;
        self.pending.extend(page.chunks);
        self.last = self.last.max(page.last_seq);
    }

    /// The next write of this stream; `None` ends it.
    fn poll_chunk(&mut self, cx: &mut Context<'_>) -> Poll<Option<Bytes>> {
        loop {
            // Checked before each write, so nothing goes out under an expired token (a chunk
            // holds whole frames: the client resumes after the last one it got).
            if self.token_expired() {
                self.phase = Phase::Done;
                self.pending = VecDeque::new();
                self.timer = None;
                return Poll::Ready(Some(Bytes::from(frames::token_expired_frame())));
            }
            if let Some(chunk) = self.pending.pop_front() {
                if self.pending.is_empty() {
                    self.pending = VecDeque::new();
                }
                return Poll::Ready(Some(chunk));
            }
            match &mut self.phase {
                Phase::Done => return Poll::Ready(None),
                Phase::Resync(reason) => {
                    let reason = *reason;
                    self.metrics().resync(reason);
                    self.phase = Phase::Done;
                    return Poll::Ready(Some(Bytes::from(frames::resync_frame(reason))));
                }
                Phase::CatchUp => {
                    if self.sub.is_closed() {
                        // Shutting down: the client resumes from what it has.
                        self.phase = Phase::Done;
                        continue;
                    }
                    let journal = self.journal.clone();
                    let sessions = self.sub.sessions().to_vec();
                    let after = self.last;
                    self.phase = Phase::Reading(Box::pin(async move {
                        journal
                            .read_after(sessions, after, REPLAY_PAGE, frames::write_event)
                            .await
                    }));
                }
                Phase::Reading(read) => {
                    let read = std::task::ready!(read.as_mut().poll(cx));
                    self.phase = Phase::CatchUp;
                    self.read_done(read);
                }
                Phase::Live => match self.poll_live(cx) {
                    Poll::Ready(Some(chunk)) => return Poll::Ready(Some(chunk)),
                    Poll::Ready(None) => {}
                    Poll::Pending => return Poll::Pending,
                },
            }
        }
    }

    /// Whether the stream's token has expired (checked between writes, so a busy stream ends too).
    fn token_expired(&self) -> bool {
        match self.expires {
            Some(at) if !matches!(self.phase, Phase::Done) => at <= Instant::now(),
            _ => false,
        }
    }

    /// Takes a page of the journal after `last`; goes live once a page reaches the head.
    fn read_done(&mut self, read: crate::error::Result<Result<Page, ResyncReason>>) {
        match read {
            Ok(Ok(page)) => {
                if page.complete {
                    self.phase = Phase::Live;
                }
                self.take_page(page);
            }
            Ok(Err(reason)) => self.phase = Phase::Resync(reason),
            Err(e) => {
                tracing::error!(error = %e, "stream: journal read failed; closing so the client resumes");
                self.phase = Phase::Done;
            }
        }
    }

    /// Live frames or a heartbeat. Returns a write, `Ready(None)` when frames were queued in
    /// `pending` or the phase changed (lag: back to the journal; the hub closed on shutdown: the
    /// end, after every frame queued before it; the token expired), or `Pending` with the inbox
    /// and the timer set to wake the stream.
    fn poll_live(&mut self, cx: &mut Context<'_>) -> Poll<Option<Bytes>> {
        if self.replayed > 0 {
            self.metrics().replays.fetch_add(1, Ordering::Relaxed);
            self.replayed = 0;
        }
        match self.sub.poll_take(cx) {
            Poll::Ready(None) => {
                self.phase = Phase::Done;
                return Poll::Ready(None);
            }
            Poll::Ready(Some(taken)) => {
                if taken.lagged {
                    // Frames were dropped after some of those taken: go back to the journal
                    // (which holds them all) before anything newer; newer frames that arrive
                    // meanwhile are deduplicated by id.
                    self.metrics().lag_fallbacks.fetch_add(1, Ordering::Relaxed);
                    self.phase = Phase::CatchUp;
                    return Poll::Ready(None);
                }
                // Send whatever was queued in one write: a burst to many subscribers then costs
                // one syscall each, not one per event.
                let mut batch = Batch::default();
                let mut oldest = None;
                for frame in taken {
                    oldest.get_or_insert(frame.at);
                    if frame.seq > self.last {
                        self.last = frame.seq;
                        if let Some(full) = batch.push(&frame) {
                            self.pending.push_back(full);
                        }
                    }
                }
                self.last_write = Instant::now();
                if let Some(at) = oldest {
                    self.metrics().delivery.observe(at.elapsed().as_secs_f64());
                }
                let rest = batch.take();
                if self.pending.is_empty() {
                    return Poll::Ready(rest);
                }
                self.pending.extend(rest);
                return Poll::Ready(None);
            }
            Poll::Pending => {}
        }
        let every = self.heartbeat_every;
        let now = Instant::now();
        let next = self.expires.map_or(now + every, |at| at.min(now + every));
        let timer = self
            .timer
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(next)));
        if timer.as_mut().poll(cx).is_pending() {
            return Poll::Pending;
        }
        if self.expires.is_some_and(|at| at <= now) {
            return Poll::Ready(None);
        }
        // The heartbeat is due, unless frames went out within the period.
        let quiet_until = self.last_write + every;
        let (beat, due) = if quiet_until > now {
            (false, quiet_until)
        } else {
            (true, now + every)
        };
        let due = self.expires.map_or(due, |at| at.min(due));
        timer.as_mut().reset(due);
        if beat {
            return Poll::Ready(Some(Bytes::from_static(b": heartbeat\n\n")));
        }
        // Registers the timer's wake-up at its new deadline.
        match timer.as_mut().poll(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(()) => Poll::Ready(None),
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
            at: std::time::Instant::now(),
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
