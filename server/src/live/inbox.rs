//! A subscriber's inbox: the frames the hub has for one stream and not yet handed over, kept in
//! the hub's slot for that stream (one allocation, shared by the hub and the stream), and the
//! waker of the stream's body, woken when a frame arrives.
//!
//! It replaces a bounded tokio `mpsc` channel per subscriber, whose shared state and first block
//! of 32 slots (about 0.8 KB) stayed allocated for the whole life of an idle stream. An idle inbox
//! holds no frame and no buffer: a single frame waiting takes no allocation of its own (it sits in
//! `first`), and the buffer for more is given back as soon as the stream takes them.
//!
//! The bound is the channel's: at most [`SUBSCRIBER_QUEUE`] frames wait; past it a frame is
//! dropped *and* the inbox is flagged lagged, so the stream goes back to the journal from the last
//! id it sent before sending anything else. Frames come out in the order they were pushed (the
//! hub pushes in commit order), and once the inbox is closed the stream gets what was already
//! queued, then the end.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};

use super::frame::Frame;
use crate::mutex::lock;

/// Frames a subscriber may have queued before it is flagged lagged.
pub const SUBSCRIBER_QUEUE: usize = 1024;

#[derive(Debug)]
pub struct Inbox {
    /// Tells the hub's slots of one subscription apart (a subscription to several sessions has
    /// one slot in each session's feed, all this inbox).
    pub(crate) id: u64,
    queue: Mutex<Queue>,
}

#[derive(Debug, Default)]
struct Queue {
    /// The oldest frame waiting (one frame, the usual case, needs no buffer).
    first: Option<Arc<Frame>>,
    /// The frames after `first`, in order.
    rest: VecDeque<Arc<Frame>>,
    /// The stream's body, waiting for a frame.
    waker: Option<Waker>,
    /// Frames were dropped since the stream last took what was queued.
    lagged: bool,
    closed: bool,
}

impl Queue {
    fn len(&self) -> usize {
        usize::from(self.first.is_some()) + self.rest.len()
    }
}

/// What the stream takes from its inbox at once: every frame queued, in order, and whether
/// frames were dropped (the stream must then go back to the journal before sending any of them).
#[derive(Debug, Default)]
pub struct Taken {
    first: Option<Arc<Frame>>,
    rest: VecDeque<Arc<Frame>>,
    pub lagged: bool,
}

impl Iterator for Taken {
    type Item = Arc<Frame>;

    fn next(&mut self) -> Option<Arc<Frame>> {
        self.first.take().or_else(|| self.rest.pop_front())
    }
}

impl Inbox {
    /// An empty inbox (already closed if `closed`: the hub is shutting down).
    pub(crate) fn new(id: u64, closed: bool) -> Inbox {
        Inbox {
            id,
            queue: Mutex::new(Queue {
                closed,
                ..Queue::default()
            }),
        }
    }

    /// Queues `frame`, or drops it and flags the inbox lagged when [`SUBSCRIBER_QUEUE`] frames
    /// already wait; wakes the stream.
    #[cfg(test)]
    pub(crate) fn push(&self, frame: &Arc<Frame>) {
        if let Some(w) = self.push_run(std::slice::from_ref(frame)) {
            w.wake();
        }
    }

    /// Queues `frames` in order, as [`Inbox::push`] does each, in one step; returns the waker of
    /// the stream if it was waiting, for the caller to wake (once, and outside its own locks).
    pub(crate) fn push_run(&self, frames: &[Arc<Frame>]) -> Option<Waker> {
        let mut q = lock(&self.queue);
        if q.closed {
            return None;
        }
        for frame in frames {
            if q.first.is_none() && q.rest.is_empty() {
                q.first = Some(frame.clone());
            } else if q.len() < SUBSCRIBER_QUEUE {
                q.rest.push_back(frame.clone());
            } else {
                q.lagged = true;
            }
        }
        q.waker.take()
    }

    /// No more frames: the stream gets what is queued, then the end.
    pub(crate) fn close(&self) {
        let waker = {
            let mut q = lock(&self.queue);
            q.closed = true;
            q.waker.take()
        };
        if let Some(w) = waker {
            w.wake();
        }
    }

    /// Takes every frame queued (and the lag flag), or registers `cx` to be woken by the next
    /// push; `None` once closed and empty.
    pub fn poll_take(&self, cx: &mut Context<'_>) -> Poll<Option<Taken>> {
        let mut q = lock(&self.queue);
        if q.first.is_some() || q.lagged {
            return Poll::Ready(Some(take(&mut q)));
        }
        if q.closed {
            return Poll::Ready(None);
        }
        register(&mut q, cx);
        Poll::Pending
    }

    /// The oldest frame queued, or a wake-up registered for the next one; `None` once closed
    /// and empty.
    pub fn poll_recv(&self, cx: &mut Context<'_>) -> Poll<Option<Arc<Frame>>> {
        let mut q = lock(&self.queue);
        if let Some(frame) = pop(&mut q) {
            return Poll::Ready(Some(frame));
        }
        if q.closed {
            return Poll::Ready(None);
        }
        register(&mut q, cx);
        Poll::Pending
    }

    /// The oldest frame queued, without waiting.
    pub fn try_recv(&self) -> Option<Arc<Frame>> {
        pop(&mut lock(&self.queue))
    }

    /// Whether frames were dropped since the last call (or the last [`Inbox::poll_take`]);
    /// clears the flag.
    pub fn take_lagged(&self) -> bool {
        std::mem::take(&mut lock(&self.queue).lagged)
    }

    pub fn is_closed(&self) -> bool {
        lock(&self.queue).closed
    }

    /// Frames queued and the slots of the buffer behind them (for tests: an idle inbox has 0 and 0).
    #[cfg(test)]
    pub(crate) fn held(&self) -> (usize, usize) {
        let q = lock(&self.queue);
        (q.len(), q.rest.capacity())
    }
}

fn register(q: &mut Queue, cx: &Context<'_>) {
    match &q.waker {
        Some(w) if w.will_wake(cx.waker()) => {}
        _ => q.waker = Some(cx.waker().clone()),
    }
}

/// The oldest frame; the buffer is freed once it empties.
fn pop(q: &mut Queue) -> Option<Arc<Frame>> {
    let frame = q.first.take()?;
    q.first = q.rest.pop_front();
    if q.rest.is_empty() && q.rest.capacity() > 0 {
        q.rest = VecDeque::new();
    }
    Some(frame)
}

/// Empties the queue into what the stream takes (its buffer goes with the frames, so an inbox
/// drained keeps none).
fn take(q: &mut Queue) -> Taken {
    Taken {
        first: q.first.take(),
        rest: std::mem::take(&mut q.rest),
        lagged: std::mem::take(&mut q.lagged),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::task::Wake;

    fn frame(seq: i64) -> Arc<Frame> {
        Arc::new(Frame {
            seq,
            session_id: "s".into(),
            bytes: Bytes::new(),
            at: std::time::Instant::now(),
        })
    }

    struct Count(AtomicUsize);
    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn seqs(t: Taken) -> Vec<i64> {
        t.map(|f| f.seq).collect()
    }

    #[test]
    fn a_push_wakes_the_stream_once_and_frames_come_in_order() {
        let inbox = Inbox::new(0, false);
        let count = Arc::new(Count(AtomicUsize::new(0)));
        let waker = Waker::from(count.clone());
        let mut cx = Context::from_waker(&waker);
        assert!(inbox.poll_take(&mut cx).is_pending());
        inbox.push(&frame(1));
        assert_eq!(count.0.load(Ordering::SeqCst), 1, "woken by the push");
        inbox.push(&frame(2));
        inbox.push(&frame(3));
        assert_eq!(
            count.0.load(Ordering::SeqCst),
            1,
            "not again until it waits"
        );
        match inbox.poll_take(&mut cx) {
            Poll::Ready(Some(t)) => {
                assert!(!t.lagged);
                assert_eq!(seqs(t), vec![1, 2, 3]);
            }
            other => panic!("expected frames, got {other:?}"),
        }
        assert!(inbox.poll_take(&mut cx).is_pending());
        inbox.push(&frame(4));
        assert_eq!(count.0.load(Ordering::SeqCst), 2);
    }

    #[test]
    fn past_the_bound_frames_are_dropped_and_the_inbox_lags() {
        let inbox = Inbox::new(0, false);
        for seq in 0..SUBSCRIBER_QUEUE as i64 + 3 {
            inbox.push(&frame(seq));
        }
        assert_eq!(inbox.held().0, SUBSCRIBER_QUEUE, "the bound holds");
        let waker = Waker::noop();
        let mut cx = Context::from_waker(waker);
        match inbox.poll_take(&mut cx) {
            Poll::Ready(Some(t)) => {
                assert!(t.lagged, "the drop is told with the frames");
                assert_eq!(seqs(t), (0..SUBSCRIBER_QUEUE as i64).collect::<Vec<_>>());
            }
            other => panic!("expected frames, got {other:?}"),
        }
        assert!(!inbox.take_lagged(), "told once");
        inbox.push(&frame(5000));
        assert_eq!(inbox.try_recv().map(|f| f.seq), Some(5000));
    }

    #[test]
    fn an_idle_inbox_holds_no_buffer() {
        let inbox = Inbox::new(0, false);
        assert_eq!(inbox.held(), (0, 0), "new: nothing allocated");
        inbox.push(&frame(1));
        assert_eq!(inbox.held(), (1, 0), "one frame needs no buffer");
        for seq in 2..100 {
            inbox.push(&frame(seq));
        }
        assert!(inbox.held().1 > 0);
        let waker = Waker::noop();
        let mut cx = Context::from_waker(waker);
        assert!(matches!(inbox.poll_take(&mut cx), Poll::Ready(Some(_))));
        assert_eq!(
            inbox.held(),
            (0, 0),
            "taken: the buffer went with the frames"
        );
        for seq in 100..110 {
            inbox.push(&frame(seq));
        }
        while inbox.try_recv().is_some() {}
        assert_eq!(
            inbox.held(),
            (0, 0),
            "drained one by one: the buffer is freed too"
        );
    }

    #[test]
    fn closing_hands_over_what_was_queued_then_ends() {
        let inbox = Inbox::new(0, false);
        let count = Arc::new(Count(AtomicUsize::new(0)));
        let waker = Waker::from(count.clone());
        let mut cx = Context::from_waker(&waker);
        inbox.push(&frame(1));
        inbox.close();
        inbox.push(&frame(2));
        assert!(inbox.is_closed());
        match inbox.poll_take(&mut cx) {
            Poll::Ready(Some(t)) => assert_eq!(seqs(t), vec![1]),
            other => panic!("expected frames, got {other:?}"),
        }
        assert!(matches!(inbox.poll_take(&mut cx), Poll::Ready(None)));
        // A waiting stream is woken by the close.
        let inbox = Inbox::new(1, false);
        assert!(inbox.poll_take(&mut cx).is_pending());
        inbox.close();
        assert_eq!(count.0.load(Ordering::SeqCst), 1);
        assert!(matches!(inbox.poll_take(&mut cx), Poll::Ready(None)));
    }

    /// A push from another thread always reaches a stream waiting on its inbox: 1,000 streams
    /// on a runtime's worker threads wait, one thread pushes a frame to every inbox (as the
    /// journal's writer does after a commit) and waits until each stream has taken it, round
    /// after round. A wake-up lost between a stream finding its inbox empty and registering its
    /// waker would leave that stream waiting until the next push: here there is none until all
    /// have taken the frame, so the round would time out.
    #[test]
    fn no_wake_up_is_lost_between_threads() {
        const STREAMS: usize = 1000;
        const ROUNDS: i64 = 200;
        let rt = stress::runtime();
        let inboxes: Vec<Arc<Inbox>> = (0..STREAMS)
            .map(|i| Arc::new(Inbox::new(i as u64, false)))
            .collect();
        let taken = Arc::new(AtomicUsize::new(0));
        let tasks: Vec<_> = inboxes
            .iter()
            .map(|inbox| {
                let (inbox, taken) = (inbox.clone(), taken.clone());
                rt.spawn(async move {
                    let mut last = 0;
                    while let Some(t) = std::future::poll_fn(|cx| inbox.poll_take(cx)).await {
                        for f in t {
                            assert_eq!(f.seq, last + 1, "in order, none lost");
                            last = f.seq;
                            taken.fetch_add(1, Ordering::SeqCst);
                        }
                    }
                    last
                })
            })
            .collect();
        for round in 1..=ROUNDS {
            let f = frame(round);
            for inbox in &inboxes {
                inbox.push(&f);
            }
            stress::wait_for_round(&taken, STREAMS * round as usize, round);
        }
        for inbox in &inboxes {
            inbox.close();
        }
        for last in stress::lasts(&rt, tasks) {
            assert_eq!(last, ROUNDS);
        }
    }
}

/// What the cross-thread wake-up tests (the inbox's and the hub's) share.
#[cfg(test)]
pub(crate) mod stress {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::{Duration, Instant};

    /// A runtime of two worker threads for the waiting streams.
    pub(crate) fn runtime() -> tokio::runtime::Runtime {
        match tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .build()
        {
            Ok(rt) => rt,
            Err(e) => panic!("runtime: {e}"),
        }
    }

    /// Waits until the streams have taken `want` frames in all; fails `round` if they have not
    /// within 20 s (a stream was not woken, and waits for a frame that does not come).
    pub(crate) fn wait_for_round(taken: &AtomicUsize, want: usize, round: i64) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while taken.load(Ordering::SeqCst) < want {
            assert!(
                Instant::now() < deadline,
                "round {round}: {} frames of {want} taken; the other streams were not woken",
                taken.load(Ordering::SeqCst)
            );
            std::thread::yield_now();
        }
    }

    /// The last frame each stream task took, once every one has ended.
    pub(crate) fn lasts(
        rt: &tokio::runtime::Runtime,
        tasks: Vec<tokio::task::JoinHandle<i64>>,
    ) -> Vec<i64> {
        tasks
            .into_iter()
            .map(|t| match rt.block_on(t) {
                Ok(last) => last,
                Err(e) => panic!("stream task: {e}"),
            })
            .collect()
    }
}
