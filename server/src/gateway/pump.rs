//! The body of an SSE stream: moves frames from the replay tail, the journal and the live feed
//! to one client, in order, exactly once.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use tokio::time::{Instant, Sleep};
use turnstream_protocol::ResyncReason;

use super::batch::{Batch, TailWrites};
use super::quota::StreamSlot;
use crate::journal::{Journal, Page};
use crate::live::encode;
use crate::live::hub::{Subscription, TailReplay};
use crate::metrics::Metrics;
use crate::presence::Attached;

/// Events read from the journal per query while replaying.
pub(super) const REPLAY_PAGE: usize = 2000;

/// Counts an open stream for its whole life.
pub(super) struct ConnectionGuard(Arc<Metrics>);

impl ConnectionGuard {
    /// Counts one more stream, unless that would pass `max` (checked and counted in one step).
    pub(super) fn try_new(m: Arc<Metrics>, max: usize) -> Option<Self> {
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
pub(super) struct Pump {
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
    /// The stream's part in presence, when it asked for it: its presence frames come from
    /// there, apart from the inbox (no id, no dedup, no replay); a stream without it never
    /// looks.
    presence: Option<Box<Attached>>,
}

/// A journal read in flight.
type Read = Pin<
    Box<dyn Future<Output = crate::error::Result<Result<Page, ResyncReason>>> + Send + 'static>,
>;

/// What a stream does once `pending` is empty.
enum Phase {
    /// Write frames taken from the hub's replay tail (boxed: only a stream catching up holds
    /// them); then go live, or read the journal if the tail did not reach the head.
    Tail(Box<TailWrites>),
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
    /// A stream with nothing to send yet, attached to the live feed by `sub`.
    pub(super) fn new(
        sub: Subscription,
        journal: Journal,
        expires: Option<Instant>,
        heartbeat_every: Duration,
        guard: ConnectionGuard,
        client_slot: Option<StreamSlot>,
    ) -> Pump {
        Pump {
            pending: VecDeque::new(),
            phase: Phase::Done,
            sub,
            journal,
            last: 0,
            timer: None,
            expires,
            heartbeat_every,
            last_write: Instant::now(),
            replayed: 0,
            guard,
            _client_slot: client_slot,
            presence: None,
        }
    }

    /// Sends the presence frames of `presence` as they come (after the prelude).
    pub(super) fn set_presence(&mut self, presence: Option<Attached>) {
        self.presence = presence.map(Box::new);
    }

    pub(super) fn metrics(&self) -> &Arc<Metrics> {
        &self.guard.0
    }

    /// Writes `bytes` before anything else queued (the stream's prelude).
    pub(super) fn prepend(&mut self, bytes: Bytes) {
        self.pending.push_front(bytes);
    }

    /// Starts from the first page of the journal after `resume_seq`.
    pub(super) fn start_from_page(&mut self, page: Page, resume_seq: i64) {
        self.last = resume_seq;
        self.phase = if page.complete {
            Phase::Live
        } else {
            Phase::CatchUp
        };
        self.take_page(page);
    }

    /// Starts from frames of the hub's replay tail, the events after `after`.
    pub(super) fn start_from_tail(&mut self, tail: TailReplay, after: i64) {
        self.count_replayed(tail.frames.len());
        self.last = tail.frames.last().map_or(after, |f| f.seq);
        self.phase = Phase::Tail(Box::new(TailWrites::new(tail)));
    }

    fn count_replayed(&mut self, events: usize) {
        self.metrics()
            .replayed_events
            .fetch_add(events as u64, Ordering::Relaxed);
        self.replayed += events;
    }

    /// Queues a page read from the journal (exactly the events after `last`).
    fn take_page(&mut self, page: Page) {
        self.count_replayed(page.events);
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
                return Poll::Ready(Some(Bytes::from(encode::token_expired_frame())));
            }
            if let Some(chunk) = self.pending.pop_front() {
                if self.pending.is_empty() {
                    self.pending = VecDeque::new();
                }
                return Poll::Ready(Some(chunk));
            }
            if let Some(p) = &self.presence {
                if !matches!(self.phase, Phase::Done) {
                    if let Some(frames) = p.take(cx.waker()) {
                        return Poll::Ready(Some(frames));
                    }
                }
            }
            match &mut self.phase {
                Phase::Done => return Poll::Ready(None),
                Phase::Tail(tail) => match tail.next_write() {
                    Some(write) => return Poll::Ready(Some(write)),
                    None if tail.complete => self.phase = Phase::Live,
                    None => self.phase = Phase::CatchUp,
                },
                Phase::Resync(reason) => {
                    let reason = *reason;
                    self.metrics().resync(reason);
                    self.phase = Phase::Done;
                    return Poll::Ready(Some(Bytes::from(encode::resync_frame(reason))));
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
                            .read_after(sessions, after, REPLAY_PAGE, encode::write_event)
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
