//! Listeners an embedder registers (`Server::listener`): each is handed every committed event, in
//! journal order, on a task of its own behind a bounded queue the journal's writer never waits
//! on; one that falls behind is told what it missed, and reads it back from the journal.

use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use futures::FutureExt;
use tokio::sync::mpsc::{self, error::TryRecvError, error::TrySendError};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::error::Result;
use crate::journal::{Committed, FanOut, Journal};
use crate::live::LiveFeed;
use crate::mutex::lock;

/// Batches (one per commit) a listener's queue holds unless registered with a queue of its own:
/// what a listener may fall behind by before it is told it missed some.
pub const LISTENER_QUEUE: usize = 1024;

/// How long shutdown waits, once the journal has closed, for listeners to handle what was queued
/// for them; a listener still busy then is stopped.
pub const LISTENER_CLOSE_WAIT: Duration = Duration::from_secs(5);

/// Events [`Missed::read`] asks of the journal at a time.
const READ_PAGE: usize = 1000;

/// Called after each commit with what committed. Each listener runs on a task of its own and is
/// handed one [`Batch`] at a time, in journal order: the next is handed once this one's future
/// has finished. A panic in it is logged, and the next batch is handed to it as usual.
///
/// Any `FnMut(Batch) -> impl Future<Output = ()>` that is `Send + 'static` is a listener.
pub trait Listener: Send + 'static {
    fn committed(&mut self, batch: Batch) -> BoxFuture<'_, ()>;
}

impl<F, Fut> Listener for F
where
    F: FnMut(Batch) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    fn committed(&mut self, batch: Batch) -> BoxFuture<'_, ()> {
        Box::pin(self(batch))
    }
}

/// What a listener is handed: one commit's events, and what it missed before them.
#[derive(Debug, Clone)]
pub struct Batch {
    /// The journal's epoch: an event's cursor (its `id` on the stream) is
    /// `turnstream_protocol::Cursor::new(&epoch, event.seq)`.
    pub epoch: Arc<str>,
    /// Committed events, in journal order: ids increase within a batch and from one batch to the
    /// next. Empty when the batch only tells of events missed.
    pub events: Arc<[Committed]>,
    /// Events committed before `events` (and after the previous batch's) that were not handed to
    /// this listener, because its queue was full.
    pub missed: Option<Missed>,
}

/// Events a listener was not handed because its queue was full: every event with an id greater
/// than `after` and up to `through`, `count` of them.
#[derive(Debug, Clone)]
pub struct Missed {
    /// How many committed events the listener was not handed.
    pub count: u64,
    /// The id of the last event handed before them.
    pub after: i64,
    /// The id of the last of them.
    pub through: i64,
    journal: Journal,
}

impl Missed {
    /// Reads the missed events from the journal, in journal order ([`Journal::events_after`] in
    /// pages, up to `through`). Fewer than `count` when retention deleted some meanwhile (a
    /// finished turn's events, on its timer or by `DELETE /api/sessions/{session}/realtime`).
    pub async fn read(&self) -> Result<Vec<Committed>> {
        let mut events = Vec::new();
        let mut after = self.after;
        while after < self.through {
            let page = self.journal.events_after(after, READ_PAGE).await?;
            let full = page.len() == READ_PAGE;
            let Some(last) = page.last().map(|e| e.seq) else {
                break;
            };
            events.extend(page.into_iter().take_while(|e| e.seq <= self.through));
            if !full {
                break;
            }
            after = last;
        }
        Ok(events)
    }
}

/// A listener as the builder holds it, with its queue's length.
pub(crate) struct Registered {
    listener: Box<dyn Listener>,
    queue: usize,
}

impl Registered {
    /// `queue`: batches; at least one.
    pub(crate) fn new(listener: impl Listener, queue: usize) -> Registered {
        Registered {
            listener: Box::new(listener),
            queue: queue.max(1),
        }
    }
}

/// A range of events a listener was not handed (see [`Missed`]).
#[derive(Debug, Clone, Copy)]
struct Gap {
    after: i64,
    through: i64,
    count: u64,
}

/// One commit on its way to one listener.
struct Queued {
    events: Arc<[Committed]>,
    missed: Option<Gap>,
}

/// Where the writer leaves one listener's batches.
struct Outlet {
    queue: mpsc::Sender<Queued>,
    /// Held while a batch is offered and while the listener, finding its queue empty, takes the
    /// gap: a gap is told after every batch queued before it and before every batch after it.
    state: Mutex<OutletState>,
}

struct OutletState {
    /// The id of the last event queued, or told as missed.
    last: i64,
    /// Events not queued since then.
    gap: Option<Gap>,
}

impl Outlet {
    /// Queues `events` (not empty) without waiting: a full queue adds them to the gap instead.
    fn offer(&self, events: &Arc<[Committed]>) {
        let Some(last) = events.last().map(|e| e.seq) else {
            return;
        };
        let mut state = lock(&self.state);
        let queued = Queued {
            events: events.clone(),
            missed: state.gap.take(),
        };
        match self.queue.try_send(queued) {
            Ok(()) => state.last = last,
            Err(TrySendError::Full(queued)) => {
                let count = events.len() as u64;
                state.gap = Some(match queued.missed {
                    Some(gap) => Gap {
                        through: last,
                        count: gap.count + count,
                        ..gap
                    },
                    None => Gap {
                        after: state.last,
                        through: last,
                        count,
                    },
                });
            }
            // The listener's task has ended (the server is shutting down).
            Err(TrySendError::Closed(_)) => {}
        }
    }

    /// The next batch once the queue is drained: the gap, if events were missed since the last
    /// batch queued.
    fn take_gap(&self, queue: &mut mpsc::Receiver<Queued>) -> Option<Queued> {
        let mut state = lock(&self.state);
        // Under the lock no batch is being offered: empty now means empty.
        match queue.try_recv() {
            Ok(queued) => Some(queued),
            Err(_) => {
                let gap = state.gap.take()?;
                state.last = gap.through;
                Some(Queued {
                    events: Arc::from(Vec::new()),
                    missed: Some(gap),
                })
            }
        }
    }
}

/// The journal's fan-out where listeners are registered: the live feed first, then each
/// listener's queue.
struct ListenerFeed {
    live: Arc<LiveFeed>,
    outlets: Vec<Arc<Outlet>>,
}

impl FanOut for ListenerFeed {
    fn committed(&self, epoch: &str, events: Vec<Committed>) {
        self.live.publish(epoch, &events);
        if events.is_empty() {
            return;
        }
        // One copy of the events, shared by every listener.
        let events: Arc<[Committed]> = events.into();
        for outlet in &self.outlets {
            outlet.offer(&events);
        }
    }

    fn floor_raised(&self, session_id: &str, floor: i64) {
        self.live.floor_raised(session_id, floor);
    }

    fn unsure_through(&self, seq: i64) {
        self.live.unsure_through(seq);
    }

    fn retention_heard(&self, heard: bool) {
        self.live.retention_heard(heard);
    }
}

/// A server's listeners: their queues until the journal opens, their tasks after. Dropped, it
/// ends the tasks once they have drained their queues.
pub(crate) struct Listeners {
    waiting: Vec<Waiting>,
    tasks: JoinSet<()>,
    closing: CancellationToken,
}

/// A listener whose task has not started yet, with its end of the queue.
struct Waiting {
    listener: Box<dyn Listener>,
    queue: mpsc::Receiver<Queued>,
    outlet: Arc<Outlet>,
}

impl Listeners {
    /// The fan-out to open the journal with: `live` itself when no listener is registered (the
    /// writer then does nothing more than it would without this), else `live` and then each
    /// listener's queue.
    pub(crate) fn new(
        live: Arc<LiveFeed>,
        registered: Vec<Registered>,
    ) -> (Arc<dyn FanOut>, Listeners) {
        let mut waiting = Vec::with_capacity(registered.len());
        let mut outlets = Vec::with_capacity(registered.len());
        for r in registered {
            let (tx, rx) = mpsc::channel(r.queue);
            let outlet = Arc::new(Outlet {
                queue: tx,
                state: Mutex::new(OutletState { last: 0, gap: None }),
            });
            outlets.push(outlet.clone());
            waiting.push(Waiting {
                listener: r.listener,
                queue: rx,
                outlet,
            });
        }
        let fanout: Arc<dyn FanOut> = if outlets.is_empty() {
            live
        } else {
            Arc::new(ListenerFeed { live, outlets })
        };
        let listeners = Listeners {
            waiting,
            tasks: JoinSet::new(),
            closing: CancellationToken::new(),
        };
        (fanout, listeners)
    }

    /// Starts each listener's task (what committed meanwhile is in its queue); `journal` is what
    /// a [`Missed`] reads from.
    pub(crate) fn start(&mut self, journal: &Journal) {
        let epoch: Arc<str> = journal.epoch().into();
        for w in self.waiting.drain(..) {
            self.tasks.spawn(listen(
                w.listener,
                w.queue,
                w.outlet,
                journal.clone(),
                epoch.clone(),
                self.closing.clone(),
            ));
        }
    }

    /// Once the journal has closed: lets each listener handle what was queued for it (and what
    /// it missed), for up to [`LISTENER_CLOSE_WAIT`], then ends its task.
    pub(crate) async fn close(mut self) {
        self.closing.cancel();
        let drained = tokio::time::timeout(LISTENER_CLOSE_WAIT, async {
            while self.tasks.join_next().await.is_some() {}
        })
        .await;
        if drained.is_err() {
            tracing::warn!(
                "a listener was still handling events {} s after the journal closed; stopping it",
                LISTENER_CLOSE_WAIT.as_secs()
            );
        }
    }
}

impl Drop for Listeners {
    fn drop(&mut self) {
        // Also on a start that failed after the journal opened: the tasks hold the journal.
        self.closing.cancel();
    }
}

/// One listener's task: hands it each batch in order until the server closes and its queue is
/// drained.
async fn listen(
    mut listener: Box<dyn Listener>,
    mut queue: mpsc::Receiver<Queued>,
    outlet: Arc<Outlet>,
    journal: Journal,
    epoch: Arc<str>,
    closing: CancellationToken,
) {
    loop {
        let queued = match queue.try_recv() {
            Ok(queued) => queued,
            Err(empty) => match outlet.take_gap(&mut queue) {
                Some(queued) => queued,
                None if empty == TryRecvError::Disconnected || closing.is_cancelled() => return,
                None => tokio::select! {
                    queued = queue.recv() => match queued {
                        Some(queued) => queued,
                        None => return,
                    },
                    // Drain what is queued, then end.
                    _ = closing.cancelled() => continue,
                },
            },
        };
        let batch = Batch {
            epoch: epoch.clone(),
            events: queued.events,
            missed: queued.missed.map(|gap| Missed {
                count: gap.count,
                after: gap.after,
                through: gap.through,
                journal: journal.clone(),
            }),
        };
        // The id of the batch's last event, for the log.
        let through = match (batch.events.last(), &batch.missed) {
            (Some(e), _) => e.seq,
            (None, Some(missed)) => missed.through,
            (None, None) => 0,
        };
        // Inside the future, so a panic in the call itself is caught too.
        let handled = AssertUnwindSafe(async { listener.committed(batch).await })
            .catch_unwind()
            .await;
        if let Err(panic) = handled {
            tracing::error!(
                through,
                panic = panic_message(&*panic),
                "a listener panicked handling events; it is handed the next ones as usual"
            );
        }
    }
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> &str {
    panic
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(not a string)")
}
