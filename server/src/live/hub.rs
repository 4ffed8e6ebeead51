//! Live fan-out of committed events to stream subscribers, per session, in commit order, and
//! the replay tail: the most recent committed frames of each session, kept in memory so that a
//! reconnect that resumes from a recent position is answered without reading the journal.
//!
//! Each subscriber has a bounded [`Inbox`], kept in its slots here. A subscriber that cannot keep
//! up is never skipped silently: when its inbox is full the frame is dropped *and* the inbox is
//! flagged lagged, so it goes back to the journal from the last id it sent before sending anything
//! else.
//!
//! The tail is a cache of the journal, never a substitute: a session's tail holds *every* frame of
//! that session after its `covered_from` position (a frame is added when its commit is published,
//! and publishing follows commit order), so a resume from any position at or after it is served
//! exactly from memory. Anything older, or a session with no tail, is read from the journal. Frames
//! leave the tail oldest first, across all sessions, once the tail passes its byte budget; and a
//! session's tail is cut back before retention deletes its events, so a position the journal no
//! longer holds is never answered from memory.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

pub use super::frame::Frame;
use super::inbox::Inbox;
pub use super::inbox::{Taken, SUBSCRIBER_QUEUE};
use crate::metrics::Metrics;
use crate::mutex::lock;

/// Default memory for the replay tail, over all sessions.
pub const DEFAULT_TAIL_BYTES: usize = 64 * 1024 * 1024;

/// What an allocation of `n` bytes takes from the heap: general-purpose allocators (glibc's among
/// them) add a header of a word and round chunks up to 16 bytes, with 32 at the least.
const fn heap_size(n: usize) -> usize {
    let chunk = (n + 8 + 15) & !15;
    if chunk < 32 {
        32
    } else {
        chunk
    }
}

/// A queue holds at most this many slots per frame in it: growth doubles its capacity, and
/// [`shrink_if_sparse`] gives slots back once fewer than a quarter are used.
const SLOTS_PER_FRAME: usize = 4;

/// What a frame costs the tail besides its bytes and its session id: its shared allocation
/// (`Arc` counts and the `Frame`), and its slots in the session's queue and in the queue over
/// all sessions.
const FRAME_OVERHEAD: usize =
    heap_size(2 * std::mem::size_of::<usize>() + std::mem::size_of::<Frame>())
        + 2 * SLOTS_PER_FRAME * std::mem::size_of::<Arc<Frame>>();

/// What a session's entry costs the tail while its tail holds frames: its slot in the map of
/// sessions (key and feed, with the map between 7/16 and 7/8 full), the key's text and the
/// queue's first buffer, plus the same eighth for fragmentation as a frame. Charged too, since a
/// session with few frames costs as much again as its frames (one frame per session measured at
/// 1.3 times the budget without it).
fn feed_cost(session_id: &str) -> usize {
    let slot = std::mem::size_of::<String>() + std::mem::size_of::<Feed>() + 1;
    let heap = (slot * 16).div_ceil(7)
        + heap_size(session_id.len())
        + heap_size(4 * std::mem::size_of::<Arc<Frame>>());
    heap + heap / 8
}

/// Gives back most of a queue's unused slots once it uses fewer than a quarter of them (a burst
/// that left would otherwise keep its slots for good), keeping room to grow twofold again so
/// that a queue near the threshold does not shrink and grow on every frame.
fn shrink_if_sparse<T>(queue: &mut VecDeque<T>) {
    if queue.capacity() > 64 && queue.len() < queue.capacity() / SLOTS_PER_FRAME {
        queue.shrink_to(queue.len() * 2);
    }
}

impl Frame {
    /// What the frame really takes from the heap while the tail holds it: its bytes and its
    /// session id as allocated, the shared frame and its queue slots, plus an eighth for the
    /// allocator's fragmentation (frames of mixed sizes leave first-in-first-out and their holes
    /// fit the next ones only partly; without it resident memory was measured at 0.96 of the
    /// budget, with no margin). Charging only the lengths let resident memory reach about twice
    /// the budget; `tests/tail_memory.rs` measures it.
    fn cost(&self) -> usize {
        let heap = heap_size(self.bytes.len()) + heap_size(self.session_id.len()) + FRAME_OVERHEAD;
        heap + heap / 8
    }
}

/// One session's subscribers and recent frames.
#[derive(Debug)]
struct Feed {
    /// The inboxes of the session's subscribers.
    slots: Vec<Arc<Inbox>>,
    /// Every frame of the session after `covered_from`, in order.
    tail: VecDeque<Arc<Frame>>,
    /// The tail holds every frame of the session with a sequence above this one
    /// (`i64::MAX`: it has seen no frame yet and covers nothing).
    covered_from: i64,
}

impl Default for Feed {
    fn default() -> Self {
        Feed {
            slots: Vec::new(),
            tail: VecDeque::new(),
            covered_from: i64::MAX,
        }
    }
}

impl Feed {
    fn is_unused(&self) -> bool {
        self.slots.is_empty() && self.tail.is_empty()
    }

    /// Drops tail frames up to `seq`; the tail then covers only what is after it. Returns whether
    /// this emptied the tail (the session's entry is then no longer charged to the budget).
    fn forget_through(&mut self, seq: i64) -> bool {
        let had_frames = !self.tail.is_empty();
        while self.tail.front().is_some_and(|f| f.seq <= seq) {
            self.tail.pop_front();
        }
        shrink_if_sparse(&mut self.tail);
        if self.covered_from != i64::MAX {
            self.covered_from = self.covered_from.max(seq);
        }
        had_frames && self.tail.is_empty()
    }
}

#[derive(Debug, Default)]
struct State {
    feeds: HashMap<String, Feed>,
    /// Every frame still counted against the budget, oldest first (over all sessions).
    fifo: VecDeque<Arc<Frame>>,
    tail_bytes: usize,
}

#[derive(Debug)]
pub struct Hub {
    state: Mutex<State>,
    next_id: AtomicU64,
    /// Set by [`Hub::close`] (under the state's lock): no subscriber is attached any more.
    closed: AtomicBool,
    tail_budget: AtomicUsize,
    /// Set while the replay tail may hold positions another server deleted unheard: it then
    /// keeps nothing and answers no resume (see [`Hub::suspend_tail`]).
    tail_suspended: AtomicBool,
    metrics: Arc<Metrics>,
}

impl Default for Hub {
    fn default() -> Self {
        Hub {
            state: Mutex::new(State::default()),
            next_id: AtomicU64::new(0),
            closed: AtomicBool::new(false),
            tail_budget: AtomicUsize::new(DEFAULT_TAIL_BYTES),
            tail_suspended: AtomicBool::new(false),
            metrics: Arc::new(Metrics::default()),
        }
    }
}

/// Frames of a resume served from the replay tail.
#[derive(Debug)]
pub struct TailReplay {
    /// The frames after the resume position, in order (at most the `limit` asked for).
    pub frames: Vec<Arc<Frame>>,
    /// False if the limit cut it short: the rest must be read from the journal.
    pub complete: bool,
}

impl Hub {
    pub fn new() -> Arc<Hub> {
        Arc::new(Hub::default())
    }

    /// A hub that reports the replay tail's size in `metrics`.
    pub fn with_metrics(metrics: Arc<Metrics>) -> Arc<Hub> {
        Arc::new(Hub {
            metrics,
            ..Hub::default()
        })
    }

    /// Sets the replay tail's memory budget (0 turns it off). Applies from the next publish.
    pub fn set_tail_budget(&self, bytes: usize) {
        self.tail_budget.store(bytes, Ordering::Relaxed);
    }

    /// Suspends the replay tail (or lets it work again): while suspended it answers no resume
    /// and keeps no frame (as with a budget of 0), so every resume reads the journal. For a
    /// server that cannot hear other servers' retention as it happens.
    pub fn suspend_tail(&self, suspended: bool) {
        self.tail_suspended.store(suspended, Ordering::Release);
    }

    /// Attaches a subscriber to the live feed of `sessions`. Attach first, then read the journal:
    /// whatever commits in between arrives here and is deduplicated by id.
    pub fn subscribe(self: &Arc<Self>, sessions: &[String]) -> Subscription {
        self.subscribe_after(sessions, None, 0).0
    }

    /// Attaches a subscriber and, in the same step, takes from the replay tail the frames of
    /// `sessions` after `after` (at most `limit`), if the tail covers that position for every one
    /// of them. Nothing can fall between the two: a frame is either in what is returned or
    /// delivered to the subscription later.
    pub fn subscribe_after(
        self: &Arc<Self>,
        sessions: &[String],
        after: Option<i64>,
        limit: usize,
    ) -> (Subscription, Option<TailReplay>) {
        // A session named twice is subscribed once (else its frames would come twice).
        let mut unique: Vec<String> = Vec::with_capacity(sessions.len());
        for s in sessions {
            if !unique.contains(s) {
                unique.push(s.clone());
            }
        }
        let sessions = &unique[..];
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let mut state = lock(&self.state);
        let mut replay = None;
        let closed = self.closed.load(Ordering::Acquire);
        let inbox = Arc::new(Inbox::new(id, closed));
        if !closed {
            if let Some(after) = after.filter(|_| !self.tail_suspended.load(Ordering::Acquire)) {
                replay = tail_after(&state.feeds, sessions, after, limit);
            }
            for s in sessions {
                state
                    .feeds
                    .entry(s.clone())
                    .or_default()
                    .slots
                    .push(inbox.clone());
            }
        }
        drop(state);
        let sub = Subscription {
            hub: self.clone(),
            inbox,
            sessions: unique.into_boxed_slice(),
        };
        (sub, replay)
    }

    /// Delivers committed frames, in order, and adds them to the replay tail. Called by the
    /// journal writer after each commit.
    pub fn publish(&self, frames: &[Arc<Frame>]) {
        let budget = if self.tail_suspended.load(Ordering::Acquire) {
            0
        } else {
            self.tail_budget.load(Ordering::Relaxed)
        };
        let mut guard = lock(&self.state);
        let state = &mut *guard;
        // Streams are woken once the hub's lock is released, each once per publish: a run of
        // frames of one session goes into each subscriber's inbox in one step.
        let mut woken = Vec::new();
        let mut rest = frames;
        while let Some(first) = rest.first() {
            let n = rest
                .iter()
                .take_while(|f| f.session_id == first.session_id)
                .count();
            let (run, after) = rest.split_at(n);
            rest = after;
            if budget == 0 {
                if let Some(feed) = state.feeds.get_mut(&first.session_id) {
                    deliver(&feed.slots, run, &mut woken);
                    // Not kept: from here on the tail covers nothing of this session.
                    if !feed.tail.is_empty() {
                        state.tail_bytes -= feed_cost(&first.session_id);
                    }
                    feed.tail.clear();
                    feed.covered_from = i64::MAX;
                }
                continue;
            }
            // Look up first: a new key (and its allocation) only for a session's first frame.
            if !state.feeds.contains_key(&first.session_id) {
                state
                    .feeds
                    .insert(first.session_id.clone(), Feed::default());
            }
            let Some(feed) = state.feeds.get_mut(&first.session_id) else {
                continue;
            };
            deliver(&feed.slots, run, &mut woken);
            for frame in run {
                if feed.covered_from == i64::MAX {
                    // Every later frame of the session is published after this one.
                    feed.covered_from = frame.seq - 1;
                }
                if feed.tail.is_empty() {
                    state.tail_bytes += feed_cost(&frame.session_id);
                }
                feed.tail.push_back(frame.clone());
                state.fifo.push_back(frame.clone());
                state.tail_bytes += frame.cost();
            }
        }
        while state.tail_bytes > budget {
            let Some(old) = state.fifo.pop_front() else {
                break;
            };
            state.tail_bytes -= old.cost();
            if let Some(feed) = state.feeds.get_mut(&old.session_id) {
                // Already gone from the session's tail if retention cut it back.
                if feed.tail.front().is_some_and(|f| f.seq == old.seq)
                    && feed.forget_through(old.seq)
                {
                    state.tail_bytes -= feed_cost(&old.session_id);
                }
                if feed.is_unused() {
                    state.feeds.remove(&old.session_id);
                }
            }
        }
        shrink_if_sparse(&mut state.fifo);
        self.metrics
            .tail_bytes
            .store(state.tail_bytes as u64, Ordering::Relaxed);
        drop(guard);
        for waker in woken {
            waker.wake();
        }
    }

    /// Before the journal stops holding a session's events up to `seq` (retention): the tail
    /// stops answering positions before it.
    pub fn forget_through(&self, session_id: &str, seq: i64) {
        let mut guard = lock(&self.state);
        let state = &mut *guard;
        if let Some(feed) = state.feeds.get_mut(session_id) {
            if feed.forget_through(seq) {
                state.tail_bytes -= feed_cost(session_id);
                self.metrics
                    .tail_bytes
                    .store(state.tail_bytes as u64, Ordering::Relaxed);
            }
        }
    }

    /// Detaches every subscriber (on shutdown): each receives what is already queued for it,
    /// then the end of its feed. Later subscriptions end at once.
    /// [`Hub::forget_through`] for every session: the replay tail answers nothing up to `seq`
    /// (when this server cannot be sure what another one deleted).
    pub fn forget_all_through(&self, seq: i64) {
        let sessions: Vec<String> = lock(&self.state).feeds.keys().cloned().collect();
        for session in sessions {
            self.forget_through(&session, seq);
        }
    }

    pub fn close(&self) {
        let mut state = lock(&self.state);
        self.closed.store(true, Ordering::Release);
        for feed in state.feeds.values_mut() {
            for inbox in feed.slots.drain(..) {
                inbox.close();
            }
        }
    }

    /// Number of attached subscriptions (a subscription to several sessions counts once each).
    pub fn subscriber_slots(&self) -> usize {
        lock(&self.state)
            .feeds
            .values()
            .map(|f| f.slots.len())
            .sum()
    }
}

/// Queues `run` (frames of one session, in order) in each of its subscribers' inboxes; adds the
/// wakers of the streams waiting on them to `woken`.
fn deliver(slots: &[Arc<Inbox>], run: &[Arc<Frame>], woken: &mut Vec<std::task::Waker>) {
    for inbox in slots {
        woken.extend(inbox.push_run(run));
    }
}

/// The frames of `sessions` after `after`, if every session's tail covers that position.
fn tail_after(
    feeds: &HashMap<String, Feed>,
    sessions: &[String],
    after: i64,
    limit: usize,
) -> Option<TailReplay> {
    let mut frames: Vec<Arc<Frame>> = Vec::new();
    let mut complete = true;
    for s in sessions {
        let feed = feeds.get(s)?;
        if after < feed.covered_from {
            return None;
        }
        let from = feed.tail.partition_point(|f| f.seq <= after);
        let n = feed.tail.len() - from;
        complete &= n <= limit;
        frames.extend(feed.tail.range(from..).take(limit).cloned());
    }
    if sessions.len() > 1 {
        frames.sort_unstable_by_key(|f| f.seq);
    }
    if frames.len() > limit {
        // Several sessions: keep the oldest `limit`; the journal has the rest, in order.
        frames.truncate(limit);
        complete = false;
    }
    Some(TailReplay { frames, complete })
}

/// A live feed; detaches itself when dropped.
#[derive(Debug)]
pub struct Subscription {
    hub: Arc<Hub>,
    inbox: Arc<Inbox>,
    /// The sessions it is attached to, each once (the stream's only copy of the list).
    sessions: Box<[String]>,
}

impl Subscription {
    /// The next live frame; `None` once the hub is closed and what was queued has been taken.
    pub async fn recv(&mut self) -> Option<Arc<Frame>> {
        std::future::poll_fn(|cx| self.inbox.poll_recv(cx)).await
    }

    /// Every frame queued, in order, with whether frames were dropped (then none of them may be
    /// sent before re-reading the journal from the last id sent); or a wake-up registered for the
    /// next one. `None` once the hub is closed and what was queued has been taken.
    pub fn poll_take(&mut self, cx: &mut Context<'_>) -> Poll<Option<Taken>> {
        self.inbox.poll_take(cx)
    }

    /// A frame already queued, without waiting.
    pub fn try_recv(&mut self) -> Option<Arc<Frame>> {
        self.inbox.try_recv()
    }

    /// Whether frames were dropped since the last call; clears the flag. Call it before sending
    /// each live frame: if it says true, re-read the journal from the last id sent.
    pub fn take_lagged(&self) -> bool {
        self.inbox.take_lagged()
    }

    /// Whether the hub was closed (the server is shutting down).
    pub fn is_closed(&self) -> bool {
        self.hub.closed.load(Ordering::Acquire)
    }

    /// The sessions it is attached to, each once.
    pub fn sessions(&self) -> &[String] {
        &self.sessions
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        let mut state = lock(&self.hub.state);
        for s in self.sessions.iter() {
            if let Some(feed) = state.feeds.get_mut(s) {
                feed.slots.retain(|slot| slot.id != self.inbox.id);
                if feed.is_unused() {
                    state.feeds.remove(s);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
