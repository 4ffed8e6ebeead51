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
use turnstream_protocol::{EventBody, ToolCall, ToolStatus, TurnState};

use crate::agent::{Agent, Emission, TurnContext, TurnSink};
use crate::cluster::Node;
use crate::error::{Error, Result, StorageFault};
use crate::journal::{floor_char_boundary, Claim, Journal, TurnRow};
use crate::lock;
use crate::slots::TurnSlots;
use crate::worker::Dispatch;

/// Largest delta journaled as one event; longer agent output is split, never cut.
pub(crate) const MAX_DELTA_BYTES: usize = 16 * 1024;

/// A delta in pieces of at most [`MAX_DELTA_BYTES`], split at character boundaries (never cut);
/// nothing for an empty delta. One piece costs no copy.
pub(crate) fn split_delta(mut rest: String) -> impl Iterator<Item = String> {
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let cut = if rest.len() > MAX_DELTA_BYTES {
            floor_char_boundary(&rest, MAX_DELTA_BYTES)
        } else {
            rest.len()
        };
        let tail = rest.split_off(cut);
        Some(std::mem::replace(&mut rest, tail))
    })
}
/// Messages of history handed to an agent as context.
pub(crate) const AGENT_HISTORY: usize = 50;
/// Longest a cancel waits for a running turn to end.
const CANCEL_WAIT: Duration = Duration::from_secs(10);
/// First wait before a write the storage refused (a turn's end, a turn's start) is tried again;
/// doubled on each failure up to [`RETRY_MAX`].
const RETRY_FIRST: Duration = Duration::from_millis(100);
/// Longest wait between retries: how late a session notices that the storage is back.
const RETRY_MAX: Duration = Duration::from_secs(2);

/// Waits that double from [`RETRY_FIRST`] to [`RETRY_MAX`]: retrying against failing storage
/// neither spins nor leaves a recovered disk unused for long.
struct Backoff(Duration);

impl Backoff {
    fn new() -> Self {
        Backoff(RETRY_FIRST)
    }

    fn next(&mut self) -> Duration {
        let wait = self.0;
        self.0 = (wait * 2).min(RETRY_MAX);
        wait
    }
}

/// Where the runner is with a turn, for a cancel waiting on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// The agent runs (or the turn is being started).
    Running,
    /// The turn's end is decided but the storage refused to journal it; it is being retried.
    EndPending(StorageFault),
    /// The runner is done with the turn.
    Finished,
}

#[derive(Debug, Clone)]
pub struct RunnerConfig {
    /// Window over which deltas are merged before journaling; zero journals each delta.
    pub coalesce: Duration,
    pub max_concurrent_turns: usize,
    /// Slots of `max_concurrent_turns` one client may hold (see [`crate::slots`]).
    pub max_turns_per_client: usize,
    /// On a shared journal, how long this server's lease on a running turn lasts unless renewed.
    pub turn_lease: Duration,
}

/// What a session's worker should do after a turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum After {
    /// Look for the session's next turn.
    Next,
    /// Another server runs the session's turns now: stop (it, or a sweep, starts the next).
    Elsewhere,
}

/// A running turn's controls.
struct Running {
    /// Cancels the turn (`cancelled`).
    cancel: CancellationToken,
    /// Leaves [`Phase::Running`] once the turn's end is decided.
    phase: watch::Receiver<Phase>,
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
    /// Set with `--agent worker`: worker processes claim turns, this runner starts none.
    workers: Option<Arc<Dispatch>>,
    /// Set on a shared journal: this server runs turns under leases (see [`crate::cluster`]).
    node: Option<Node>,
}

impl Runner {
    pub fn new(journal: Journal, agent: Arc<dyn Agent>, config: RunnerConfig) -> Arc<Runner> {
        Self::build(journal, agent, config, None)
    }

    /// A runner whose turns worker processes claim (`--agent worker`), with leases of `lease`.
    pub fn for_workers(
        journal: Journal,
        agent: Arc<dyn Agent>,
        config: RunnerConfig,
        lease: Duration,
    ) -> Arc<Runner> {
        Self::build(journal, agent, config, Some(Arc::new(Dispatch::new(lease))))
    }

    fn build(
        journal: Journal,
        agent: Arc<dyn Agent>,
        config: RunnerConfig,
        workers: Option<Arc<Dispatch>>,
    ) -> Arc<Runner> {
        let node = journal.is_shared().then(|| Node::new(config.turn_lease));
        Arc::new(Runner {
            node,
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
            workers,
        })
    }

    /// Worker mode's state, if this runner leaves turns to worker processes.
    pub fn workers(&self) -> Option<&Arc<Dispatch>> {
        self.workers.as_ref()
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
        // A worker's turn ends once its lease is over, here or on a later sweep; so does one that
        // another server ran on a shared journal. Without either, nothing will renew a lease left
        // by an earlier run.
        let sweep_every = if self.workers.is_some() {
            Some(crate::cluster::WORKER_SWEEP_EVERY)
        } else if self.node.is_some() {
            Some(crate::cluster::SWEEP_EVERY)
        } else {
            None
        };
        match sweep_every {
            Some(every) => {
                self.journal.expire_leases(crate::journal::now_ms()).await?;
                self.tasks.spawn(crate::cluster::sweep(
                    self.journal.clone(),
                    self.clone(),
                    every,
                    self.stopping.clone(),
                ));
            }
            None => {
                self.journal.expire_leases(i64::MAX).await?;
            }
        }
        if self.workers.is_some() {
            return Ok(()); // workers claim queued turns themselves
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
        if let Some(dispatch) = &self.workers {
            dispatch.notify();
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
            let mut backoff = Backoff::new();
            loop {
                if self.stopping.is_cancelled() {
                    lock(&self.sessions).remove(&session);
                    return;
                }
                let next = match self.journal.next_queued_turn(&session).await {
                    Ok(Some(next)) => next,
                    Ok(None) => break,
                    Err(e) => {
                        // The queued turns were acknowledged: try again rather than leave them
                        // waiting for the session's next message.
                        tracing::error!(session, error = %e, "cannot read the next queued turn");
                        self.pause(backoff.next()).await;
                        continue;
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
                match self.run_turn(next.0, next.1).await {
                    Ok(After::Next) => backoff = Backoff::new(),
                    Ok(After::Elsewhere) => {
                        lock(&self.sessions).remove(&session);
                        return;
                    }
                    Err(e) => {
                        // A turn whose start failed is still queued and first in line: it is
                        // tried again after the pause, and the session's later turns wait.
                        tracing::error!(session, error = %e, "turn failed to run");
                        self.pause(backoff.next()).await;
                    }
                }
            }
        }
    }

    /// Sleeps for `wait`, or less if shutdown begins.
    async fn pause(&self, wait: Duration) {
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = self.stopping.cancelled() => {}
        }
    }

    async fn run_turn(
        &self,
        turn: TurnRow,
        user_message: turnstream_protocol::Message,
    ) -> Result<After> {
        // Cancellable before it is marked running, so a cancel can never fall between the two.
        let cancel = CancellationToken::new();
        let (phase_tx, phase_rx) = watch::channel(Phase::Running);
        lock(&self.running).insert(
            turn.turn_id.clone(),
            Running {
                cancel: cancel.clone(),
                phase: phase_rx,
            },
        );
        let result = self
            .drive_turn(&turn, user_message, cancel, &phase_tx)
            .await;
        lock(&self.running).remove(&turn.turn_id);
        phase_tx.send_replace(Phase::Finished);
        result
    }

    async fn drive_turn(
        &self,
        turn: &TurnRow,
        user_message: turnstream_protocol::Message,
        cancel: CancellationToken,
        phase: &watch::Sender<Phase>,
    ) -> Result<After> {
        let lease = match &self.node {
            None => {
                if !self.journal.start_turn(&turn.turn_id).await? {
                    return Ok(After::Next); // cancelled while queued
                }
                None
            }
            Some(node) => match self
                .journal
                .claim_turn(&turn.turn_id, &node.id, node.lease)
                .await?
            {
                Claim::Started(lease) => Some((node.clone(), lease.token)),
                Claim::NotQueued => return Ok(After::Next),
                Claim::Busy => return Ok(After::Elsewhere),
            },
        };
        // Cancelled once another server ended the turn, or the lease ran out.
        let lost = CancellationToken::new();
        let renewing = CancellationToken::new();
        let _stop_renewing = renewing.clone().drop_guard();
        if let Some((node, token)) = &lease {
            tokio::spawn(crate::cluster::keep_lease(
                self.journal.clone(),
                node.clone(),
                turn.turn_id.clone(),
                token.clone(),
                lost.clone(),
                renewing,
            ));
        }
        let fence = lease.map(|(_, token)| token);
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
            user_message: user_message.content,
            attachments: user_message.attachments,
            history,
        };
        let (sink, rx) = TurnSink::channel();
        let (stop_tx, stop_rx) = oneshot::channel();
        let emitter = tokio::spawn(emit(
            Emitter::new(
                self.journal.clone(),
                turn.session_id.clone(),
                turn.turn_id.clone(),
                fence.clone().map(|token| (token, lost.clone())),
            ),
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
            // Whoever ended the turn journaled its end; the end below finds it over.
            _ = lost.cancelled() => (TurnState::Interrupted, None),
        };
        task.abort();
        let _ = stop_tx.send(());
        let emitted = emitter
            .await
            .map_err(|_| Error::Corrupt("turn emitter panicked".into()))?;
        let (state, error) = match (outcome, emitted.error) {
            // Progress that could not be journaled is a storage fault: the turn cannot claim
            // completion, and its text may hold more than was sent. A cancel, an interruption
            // or the agent's own failure still say what ended the turn.
            ((TurnState::Completed, _), Some(e)) => (TurnState::Failed, Some(e)),
            (outcome, _) => outcome,
        };
        self.journal_end(turn, fence.as_deref(), state, emitted.text, error, phase)
            .await?;
        Ok(After::Next)
    }

    /// Journals a turn's end, retrying while the storage refuses it. Meanwhile the session's
    /// later turns wait (FIFO), and a retry of an end that did land is a no-op (the end is a
    /// conditional update of a `running` turn), so the turn ends exactly once. Gives up only
    /// when shutdown interrupts running turns: the turn then stays `running` in the journal and
    /// the next start ends it `interrupted`.
    async fn journal_end(
        &self,
        turn: &TurnRow,
        fence: Option<&str>,
        state: TurnState,
        text: String,
        error: Option<String>,
        phase: &watch::Sender<Phase>,
    ) -> Result<()> {
        let mut backoff = Backoff::new();
        loop {
            let ended = match fence {
                None => {
                    self.journal
                        .end_turn(
                            &turn.turn_id,
                            state,
                            text.clone(),
                            error.clone(),
                            &[TurnState::Running],
                        )
                        .await
                }
                Some(token) => {
                    self.journal
                        .end_fenced_turn(&turn.turn_id, token, state, text.clone(), error.clone())
                        .await
                }
            };
            let e = match ended {
                Ok(ended) => {
                    if ended.is_some() {
                        log_turn_end(turn, state);
                    }
                    return Ok(());
                }
                Err(e) => e,
            };
            let Some(fault) = e.storage_fault() else {
                return Err(e);
            };
            self.journal
                .metrics()
                .turn_end_retries
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            tracing::warn!(turn = %turn.turn_id, state = state.as_str(), error = %e, "cannot journal the turn's end yet; retrying");
            phase.send_replace(Phase::EndPending(fault));
            tokio::select! {
                _ = tokio::time::sleep(backoff.next()) => {}
                _ = self.interrupt.cancelled() => {
                    tracing::warn!(turn = %turn.turn_id, "shutting down with the turn's end unwritten; the next start ends it interrupted");
                    return Err(e);
                }
            }
        }
    }

    /// Cancels a turn: a queued one never starts, a running one is stopped and ends `cancelled`
    /// with its partial text. Idempotent on a terminal turn. Returns the turn's state after.
    ///
    /// Never answers success without effect: when the storage refuses the cancel's write (a
    /// queued turn) or the stopped turn's end (a running one), this returns the storage error;
    /// a running turn then still ends once the storage recovers, and a retry is safe.
    pub async fn cancel(&self, turn_id: &str) -> Result<TurnState> {
        let Some(turn) = self.journal.turn(turn_id).await? else {
            return Err(Error::NotFound { what: "turn" });
        };
        if turn.state == TurnState::Queued && self.cancel_queued(&turn).await? {
            return Ok(TurnState::Cancelled);
        }
        let here = lock(&self.running).contains_key(turn_id);
        if self.workers.is_some() || (self.node.is_some() && !here) {
            self.cancel_leased(turn_id).await?;
        }
        let running = lock(&self.running)
            .get(turn_id)
            .map(|r| (r.cancel.clone(), r.phase.clone()));
        if let Some((cancel, mut phase)) = running {
            cancel.cancel();
            // The runner ends the turn promptly (the agent future is dropped); bound the wait so a
            // stuck storage layer cannot hang the request.
            let waited =
                tokio::time::timeout(CANCEL_WAIT, phase.wait_for(|p| *p != Phase::Running)).await;
            if let Ok(Ok(p)) = waited {
                if let Phase::EndPending(fault) = *p {
                    return Err(Error::storage(
                        fault,
                        "the turn was stopped, but the storage refuses to journal its end; \
                         it ends once the storage recovers",
                    ));
                }
            }
        }
        let mut after = self
            .journal
            .turn(turn_id)
            .await?
            .map(|t| t.state)
            .unwrap_or(turn.state);
        if !after.is_terminal() && self.node.is_some() {
            // On a shared journal the turn may have moved meanwhile: claimed by another server
            // while this one's runner, which had just tried to claim it too, held it briefly.
            let ended = match after {
                TurnState::Queued => self.cancel_queued(&turn).await?,
                _ => self.cancel_leased(turn_id).await?,
            };
            if ended {
                after = TurnState::Cancelled;
            }
        }
        if !after.is_terminal() {
            if let Some(failing) = self.journal.write_health().failing() {
                return Err(failing.to_error());
            }
        }
        Ok(after)
    }

    /// Ends `turn` `cancelled` if it is still queued.
    async fn cancel_queued(&self, turn: &TurnRow) -> Result<bool> {
        let ended = self
            .journal
            .end_turn(
                &turn.turn_id,
                TurnState::Cancelled,
                String::new(),
                None,
                &[TurnState::Queued],
            )
            .await?
            .is_some();
        if ended {
            log_turn_end(turn, TurnState::Cancelled);
            lock(&self.clients).remove(&turn.turn_id);
        }
        Ok(ended)
    }

    /// Ends `cancelled` a turn running under a lease (a worker's, or another server's) with the
    /// text journaled so far; its runner learns it from its next write or lease renewal.
    async fn cancel_leased(&self, turn_id: &str) -> Result<bool> {
        let ended = self.journal.is_leased(turn_id).await?
            && self
                .journal
                .end_leased_turn(turn_id, TurnState::Cancelled)
                .await?;
        if ended {
            if let Some(dispatch) = &self.workers {
                dispatch.notify();
            }
        }
        Ok(ended)
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
        if let Some(dispatch) = &self.workers {
            dispatch.notify();
        }
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

/// One line per turn end (target `turnstream::turn`): its ids, end state and time since its
/// message was accepted; never its text or error, which may quote the user.
fn log_turn_end(turn: &TurnRow, state: TurnState) {
    tracing::info!(
        target: crate::logging::TURN_TARGET,
        turn = %turn.turn_id,
        session = %turn.session_id,
        state = state.as_str(),
        duration_ms = crate::journal::now_ms().saturating_sub(turn.created_at),
        "turn ended"
    );
}

/// What the emitter journaled for a turn.
struct Emitted {
    text: String,
    error: Option<String>,
}

/// Journals a turn's emissions in order, merging consecutive deltas of one kind for `window`.
async fn emit(
    mut out: Emitter,
    mut rx: mpsc::UnboundedReceiver<Emission>,
    mut stop: oneshot::Receiver<()>,
    window: Duration,
) -> Emitted {
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
                out.track_tool(&call);
                out.submit(EventBody::Tool(call));
            }
            Emission::Usage(usage) => {
                let write = out.journal.submit_turn_usage(&out.turn, usage);
                out.inflight.push_back(write);
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
    out.fail_open_tools();
    for rx in std::mem::take(&mut out.inflight) {
        match rx.await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => out.failed(&e),
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
    /// Tool calls reported started and not yet finished or failed. A cancelled or interrupted
    /// turn drops its agent mid-call; without a last word from here the call would show as
    /// running forever.
    open_tools: Vec<ToolCall>,
    /// On a shared journal: the turn's lease token, and what to cancel once a write finds the
    /// lease lost.
    fence: Option<(String, CancellationToken)>,
}

impl Emitter {
    fn new(
        journal: Journal,
        session: String,
        turn: String,
        fence: Option<(String, CancellationToken)>,
    ) -> Emitter {
        Emitter {
            journal,
            session,
            turn,
            text: String::new(),
            pending: None,
            inflight: VecDeque::new(),
            error: None,
            open_tools: Vec::new(),
            fence,
        }
    }

    fn failed(&mut self, e: &Error) {
        if let (Error::LeaseLost, Some((_, lost))) = (e, &self.fence) {
            lost.cancel();
        }
        self.error = Some(format!("journal write failed: {e}"));
    }

    fn track_tool(&mut self, call: &ToolCall) {
        self.open_tools.retain(|t| t.call_id != call.call_id);
        if matches!(call.status, ToolStatus::Started | ToolStatus::Progress) {
            self.open_tools.push(call.clone());
        }
    }

    /// Journals every call the agent left open as `failed`, once the agent can emit no more.
    fn fail_open_tools(&mut self) {
        for mut call in std::mem::take(&mut self.open_tools) {
            call.status = ToolStatus::Failed;
            // Previews already journaled stay (a later update without one keeps them).
            call.input_preview = None;
            call.output_preview = None;
            self.submit(EventBody::Tool(call));
        }
    }

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
        let Some((kind, buf)) = self.pending.take() else {
            return;
        };
        for delta in split_delta(buf) {
            let body = match kind {
                Kind::Thinking => EventBody::Thinking { delta },
                Kind::Response => EventBody::ResponseDelta { delta },
            };
            self.submit(body);
        }
    }

    fn submit(&mut self, body: EventBody) {
        // Collect finished writes as we go so the queue stays short on long turns. Writes from
        // one emitter commit in order, so only the front can be done.
        while let Some(front) = self.inflight.front_mut() {
            match front.try_recv() {
                Ok(Ok(_)) => {}
                Ok(Err(e)) => self.failed(&e),
                Err(oneshot::error::TryRecvError::Empty) => break,
                Err(oneshot::error::TryRecvError::Closed) => {
                    self.error = Some("journal closed".into());
                }
            }
            self.inflight.pop_front();
        }
        let write = match &self.fence {
            None => self
                .journal
                .submit_turn_event(&self.session, &self.turn, body),
            Some((token, _)) => {
                self.journal
                    .submit_fenced_turn_event(&self.session, &self.turn, token, body)
            }
        };
        self.inflight.push_back(write);
    }
}
