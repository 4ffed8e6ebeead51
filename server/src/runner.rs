//! The turn runner: runs each session's turns one at a time in FIFO order (sessions run
//! concurrently up to a limit), journals what agents emit (coalescing deltas), and ends every turn
//! with exactly one terminal state, whatever happens: completion, failure, cancel or shutdown.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use turnstream_protocol::{EventBody, TurnState};

use crate::agent::{Agent, Emission, TurnContext, TurnSink};
use crate::error::{Error, Result};
use crate::journal::{floor_char_boundary, Journal, TurnRow};
use crate::lock;
use crate::slots::TurnSlots;

/// Largest delta journaled as one event; longer agent output is split, never cut.
const MAX_DELTA_BYTES: usize = 16 * 1024;
/// Messages of history handed to an agent as context.
const AGENT_HISTORY: usize = 50;

#[derive(Debug, Clone)]
pub struct RunnerConfig {
    /// Window over which deltas are merged before journaling; zero journals each delta.
    pub coalesce: Duration,
    pub max_concurrent_turns: usize,
    /// Slots of `max_concurrent_turns` one client may hold (see [`crate::slots`]).
    pub max_turns_per_client: usize,
}

/// A running turn's controls.
struct Running {
    /// Cancels the turn (`cancelled`).
    cancel: CancellationToken,
    /// Resolves when the turn has been ended in the journal.
    done: watch::Receiver<bool>,
}

pub struct Runner {
    journal: Journal,
    agent: Arc<dyn Agent>,
    config: RunnerConfig,
    slots: TurnSlots,
    /// The client (user or peer address) that posted each turn not yet started, for fair slots.
    /// Unknown after a restart: such a turn counts against its session.
    clients: Mutex<HashMap<String, String>>,
    /// Sessions with a worker; the flag says "look for queued turns again".
    sessions: Mutex<HashMap<String, bool>>,
    running: Mutex<HashMap<String, Running>>,
    /// Stops workers from starting new turns.
    stopping: CancellationToken,
    /// Ends running turns `interrupted` (after the shutdown grace period).
    interrupt: CancellationToken,
    tasks: TaskTracker,
}

impl Runner {
    pub fn new(journal: Journal, agent: Arc<dyn Agent>, config: RunnerConfig) -> Arc<Runner> {
        Arc::new(Runner {
            journal,
            agent,
            slots: TurnSlots::new(config.max_concurrent_turns, config.max_turns_per_client),
            clients: Mutex::new(HashMap::new()),
            config,
            sessions: Mutex::new(HashMap::new()),
            running: Mutex::new(HashMap::new()),
            stopping: CancellationToken::new(),
            interrupt: CancellationToken::new(),
            tasks: TaskTracker::new(),
        })
    }

    /// Recovers from a crash and starts the turns left queued.
    pub async fn start(self: &Arc<Self>) -> Result<()> {
        let (interrupted, repaired) = self.journal.recover_after_crash().await?;
        if interrupted + repaired > 0 {
            tracing::info!(
                interrupted,
                repaired,
                "recovered turns left running by a crash"
            );
        }
        for session in self.journal.sessions_with_queued_turns().await? {
            self.kick(&session);
        }
        Ok(())
    }

    /// Records who posted a turn, so its slot counts against that client.
    pub fn note_client(&self, turn_id: &str, client: String) {
        lock(&self.clients).insert(turn_id.to_string(), client);
    }

    /// Tells the session's worker to look for queued turns, starting one if needed.
    pub fn kick(self: &Arc<Self>, session_id: &str) {
        if self.stopping.is_cancelled() {
            return;
        }
        let mut sessions = lock(&self.sessions);
        if let Some(dirty) = sessions.get_mut(session_id) {
            *dirty = true;
            return;
        }
        sessions.insert(session_id.to_string(), true);
        drop(sessions);
        let this = self.clone();
        let session = session_id.to_string();
        self.tasks.spawn(async move { this.worker(session).await });
    }

    async fn worker(self: Arc<Self>, session: String) {
        loop {
            {
                let mut sessions = lock(&self.sessions);
                match sessions.get_mut(&session) {
                    Some(dirty) if *dirty => *dirty = false,
                    _ => {
                        sessions.remove(&session);
                        return;
                    }
                }
            }
            loop {
                if self.stopping.is_cancelled() {
                    lock(&self.sessions).remove(&session);
                    return;
                }
                let next = match self.journal.next_queued_turn(&session).await {
                    Ok(Some(next)) => next,
                    Ok(None) => break,
                    Err(e) => {
                        tracing::error!(session, error = %e, "cannot read the next queued turn");
                        break;
                    }
                };
                let client = lock(&self.clients)
                    .remove(&next.0.turn_id)
                    .unwrap_or_else(|| format!("session:{session}"));
                let Some(_slot) = self.slots.acquire(&client).await else {
                    return;
                };
                if self.stopping.is_cancelled() {
                    lock(&self.sessions).remove(&session);
                    return;
                }
                if let Err(e) = self.run_turn(next.0, next.1).await {
                    tracing::error!(session, error = %e, "turn failed to run");
                    // Avoid a hot loop on a persistent storage error.
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            }
        }
    }

    async fn run_turn(&self, turn: TurnRow, user_message: String) -> Result<()> {
        // Cancellable before it is marked running, so a cancel can never fall between the two.
        let cancel = CancellationToken::new();
        let (done_tx, done_rx) = watch::channel(false);
        lock(&self.running).insert(
            turn.turn_id.clone(),
            Running {
                cancel: cancel.clone(),
                done: done_rx,
            },
        );
        let result = self.drive_turn(&turn, user_message, cancel).await;
        lock(&self.running).remove(&turn.turn_id);
        let _ = done_tx.send(true);
        result
    }

    async fn drive_turn(
        &self,
        turn: &TurnRow,
        user_message: String,
        cancel: CancellationToken,
    ) -> Result<()> {
        if !self.journal.start_turn(&turn.turn_id).await? {
            return Ok(()); // cancelled while queued
        }
        self.journal
            .metrics()
            .turns_started
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let history = self
            .journal
            .agent_history(&turn.session_id, &turn.user_message_id, AGENT_HISTORY)
            .await
            .unwrap_or_default();
        let ctx = TurnContext {
            session_id: turn.session_id.clone(),
            turn_id: turn.turn_id.clone(),
            user_message,
            history,
        };
        let (sink, rx) = TurnSink::channel();
        let (stop_tx, stop_rx) = oneshot::channel();
        let emitter = tokio::spawn(emit(
            self.journal.clone(),
            turn.session_id.clone(),
            turn.turn_id.clone(),
            rx,
            stop_rx,
            self.config.coalesce,
        ));
        // The agent runs in a task of its own: a panic in it fails this turn, not the session's
        // worker, and cancelling aborts it.
        let agent = self.agent.clone();
        let mut task = tokio::spawn(async move { agent.run(ctx, sink).await });
        let outcome = tokio::select! {
            r = &mut task => match r {
                Ok(Ok(())) => (TurnState::Completed, None),
                Ok(Err(e)) => (TurnState::Failed, Some(e.0)),
                Err(e) => {
                    tracing::error!(turn = %turn.turn_id, error = %e, "agent task failed");
                    (TurnState::Failed, Some("the agent crashed".to_string()))
                }
            },
            _ = cancel.cancelled() => (TurnState::Cancelled, None),
            _ = self.interrupt.cancelled() => (TurnState::Interrupted, None),
        };
        task.abort();
        let _ = stop_tx.send(());
        let emitted = emitter
            .await
            .map_err(|_| Error::Corrupt("turn emitter panicked".into()))?;
        let (state, error) = match emitted.error {
            // Progress that could not be journaled is a storage fault: the turn cannot claim
            // completion, and its text may hold more than was sent.
            Some(e) => (TurnState::Failed, Some(e)),
            None => outcome,
        };
        self.journal
            .end_turn(
                &turn.turn_id,
                state,
                emitted.text,
                error,
                &[TurnState::Running],
            )
            .await
            .map(|_| ())
    }

    /// Cancels a turn: a queued one never starts, a running one is stopped and ends `cancelled`
    /// with its partial text. Idempotent on a terminal turn. Returns the turn's state after.
    pub async fn cancel(&self, turn_id: &str) -> Result<TurnState> {
        let Some(turn) = self.journal.turn(turn_id).await? else {
            return Err(Error::NotFound { what: "turn" });
        };
        if turn.state == TurnState::Queued {
            let ended = self
                .journal
                .end_turn(
                    turn_id,
                    TurnState::Cancelled,
                    String::new(),
                    None,
                    &[TurnState::Queued],
                )
                .await?;
            if ended.is_some() {
                lock(&self.clients).remove(turn_id);
                return Ok(TurnState::Cancelled);
            }
        }
        let running = lock(&self.running)
            .get(turn_id)
            .map(|r| (r.cancel.clone(), r.done.clone()));
        if let Some((cancel, mut done)) = running {
            cancel.cancel();
            // The runner ends the turn promptly (the agent future is dropped); bound the wait so a
            // stuck storage layer cannot hang the request.
            let _ = tokio::time::timeout(Duration::from_secs(10), done.wait_for(|d| *d)).await;
        }
        Ok(self
            .journal
            .turn(turn_id)
            .await?
            .map(|t| t.state)
            .unwrap_or(turn.state))
    }

    /// Whether shutdown has begun (new messages are refused).
    pub fn is_stopping(&self) -> bool {
        self.stopping.is_cancelled()
    }

    /// Whether any turn is running in this process.
    pub fn running_turns(&self) -> usize {
        lock(&self.running).len()
    }

    /// Graceful shutdown: start no new turn, let running ones finish for `grace`, then end the
    /// rest `interrupted`. Queued turns stay queued and run after the next start.
    pub async fn shutdown(&self, grace: Duration) {
        self.stopping.cancel();
        self.tasks.close();
        if tokio::time::timeout(grace, self.tasks.wait())
            .await
            .is_err()
        {
            tracing::warn!(
                running = self.running_turns(),
                "shutdown grace period over; interrupting running turns"
            );
            self.interrupt.cancel();
            self.tasks.wait().await;
        }
    }
}

/// What the emitter journaled for a turn.
struct Emitted {
    text: String,
    error: Option<String>,
}

/// Journals a turn's emissions in order, merging consecutive deltas of one kind for `window`.
async fn emit(
    journal: Journal,
    session: String,
    turn: String,
    mut rx: mpsc::UnboundedReceiver<Emission>,
    mut stop: oneshot::Receiver<()>,
    window: Duration,
) -> Emitted {
    let mut out = Emitter {
        journal,
        session,
        turn,
        text: String::new(),
        pending: None,
        inflight: VecDeque::new(),
        error: None,
    };
    let mut deadline: Option<Instant> = None;
    let mut stopping = false;
    loop {
        let item = if stopping {
            // Drain what the agent emitted before it stopped, then finish.
            match rx.try_recv() {
                Ok(item) => Some(item),
                Err(_) => break,
            }
        } else {
            tokio::select! {
                biased;
                item = rx.recv() => match item {
                    Some(item) => Some(item),
                    None => break,
                },
                _ = sleep_until(deadline) => {
                    out.flush();
                    deadline = None;
                    None
                }
                _ = &mut stop => {
                    stopping = true;
                    None
                }
            }
        };
        let Some(item) = item else { continue };
        match item {
            Emission::Thinking(d) => out.delta(Kind::Thinking, d),
            Emission::Response(d) => out.delta(Kind::Response, d),
            Emission::Tool(call) => {
                out.flush();
                out.submit(EventBody::Tool(call));
            }
        }
        if window.is_zero() {
            out.flush();
        } else if out.pending.is_some() && deadline.is_none() {
            deadline = Some(Instant::now() + window);
        } else if out.pending.is_none() {
            deadline = None;
        }
    }
    out.flush();
    for rx in out.inflight.drain(..) {
        match rx.await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => out.error = Some(format!("journal write failed: {e}")),
            Err(_) => out.error = Some("journal closed".into()),
        }
    }
    Emitted {
        text: out.text,
        error: out.error,
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Thinking,
    Response,
}

struct Emitter {
    journal: Journal,
    session: String,
    turn: String,
    /// The reply so far: exactly the concatenation of the journaled response deltas.
    text: String,
    pending: Option<(Kind, String)>,
    /// Writes queued and not yet known committed, oldest first (they commit in order).
    inflight: VecDeque<oneshot::Receiver<Result<i64>>>,
    error: Option<String>,
}

impl Emitter {
    fn delta(&mut self, kind: Kind, delta: String) {
        if kind == Kind::Response {
            self.text.push_str(&delta);
        }
        match &mut self.pending {
            Some((k, buf)) if *k == kind => buf.push_str(&delta),
            _ => {
                self.flush();
                self.pending = Some((kind, delta));
            }
        }
        if self
            .pending
            .as_ref()
            .is_some_and(|(_, b)| b.len() >= MAX_DELTA_BYTES)
        {
            self.flush();
        }
    }

    fn flush(&mut self) {
        let Some((kind, mut buf)) = self.pending.take() else {
            return;
        };
        while !buf.is_empty() {
            let cut = if buf.len() > MAX_DELTA_BYTES {
                floor_char_boundary(&buf, MAX_DELTA_BYTES)
            } else {
                buf.len()
            };
            let rest = buf.split_off(cut);
            let body = match kind {
                Kind::Thinking => EventBody::Thinking { delta: buf },
                Kind::Response => EventBody::ResponseDelta { delta: buf },
            };
            self.submit(body);
            buf = rest;
        }
    }

    fn submit(&mut self, body: EventBody) {
        // Collect finished writes as we go so the queue stays short on long turns. Writes from
        // one emitter commit in order, so only the front can be done.
        while let Some(front) = self.inflight.front_mut() {
            match front.try_recv() {
                Ok(Ok(_)) => {}
                Ok(Err(e)) => self.error = Some(format!("journal write failed: {e}")),
                Err(oneshot::error::TryRecvError::Empty) => break,
                Err(oneshot::error::TryRecvError::Closed) => {
                    self.error = Some("journal closed".into());
                }
            }
            self.inflight.pop_front();
        }
        self.inflight.push_back(
            self.journal
                .submit_turn_event(&self.session, &self.turn, body),
        );
    }
}
