//! The per-session loop: it runs a session's queued turns one at a time, oldest first, each in a
//! fair slot, until none is left (or another server runs the session's turns now); and running
//! one turn: starting it (under a lease on a shared journal), driving the agent, and journaling
//! its one end, retried while the storage refuses it.

use std::sync::Arc;

use tokio::sync::{oneshot, watch};
use tokio_util::sync::CancellationToken;
use turnstream_protocol::TurnState;

use super::emit::{emit, Emitter, Start};
use super::lease::{keep_lease, Node};
use super::mode::Claimer;
use super::{Turns, AGENT_HISTORY, RETRY};
use crate::agent::{Agent, TurnContext, TurnSink};
use crate::error::{Error, Result, StorageFault};
use crate::journal::{Claim, TurnRow};
use crate::mutex::lock;

/// Where a turn running here is, for a cancel waiting on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Phase {
    /// The agent runs (or the turn is being started).
    Running,
    /// The turn's end is decided but the storage refused to journal it; it is being retried.
    EndPending(StorageFault),
    /// The session loop is done with the turn.
    Finished,
}

/// A running turn's controls.
pub(super) struct Running {
    /// Cancels the turn (`cancelled`).
    pub cancel: CancellationToken,
    /// Leaves [`Phase::Running`] once the turn's end is decided.
    pub phase: watch::Receiver<Phase>,
}

/// How a turn ends: its state, its reply, why it failed, and its last events not journaled yet
/// (journaled in the same step as the end), after its start if that is not journaled yet.
struct End {
    state: TurnState,
    text: String,
    error: Option<String>,
    tail: Vec<turnstream_protocol::EventBody>,
    with_start: bool,
}

/// What the session loop does after a turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum After {
    /// Look for the session's next turn.
    Next,
    /// Another server runs the session's turns now: stop (it, or a sweep, starts the next).
    Elsewhere,
}

impl Turns {
    /// Runs the session's queued turns in order until none is left; started by
    /// [`Turns::kick`], which marks the session to look again if it is running already.
    pub(super) async fn session_loop(self: Arc<Self>, session: String) {
        let Claimer::Here { agent, lease } = self.mode.claimer() else {
            lock(&self.sessions).remove(&session);
            return;
        };
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
            let mut backoff = RETRY;
            loop {
                if self.stopping.is_cancelled() {
                    lock(&self.sessions).remove(&session);
                    return;
                }
                let (turn, user_message) = match self.journal.next_queued_turn(&session).await {
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
                    .remove(&turn.turn_id)
                    .unwrap_or_else(|| format!("session:{session}"));
                let Some(_slot) = self.slots.acquire(&client).await else {
                    return;
                };
                if self.stopping.is_cancelled() {
                    lock(&self.sessions).remove(&session);
                    return;
                }
                match self.run_turn(agent, lease, turn, user_message).await {
                    Ok(After::Next) => backoff.reset(),
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
    async fn pause(&self, wait: std::time::Duration) {
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = self.stopping.cancelled() => {}
        }
    }

    async fn run_turn(
        &self,
        agent: &Arc<dyn Agent>,
        lease: Option<&Node>,
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
            .drive_turn(agent, lease, &turn, user_message, cancel, &phase_tx)
            .await;
        lock(&self.running).remove(&turn.turn_id);
        phase_tx.send_replace(Phase::Finished);
        result
    }

    async fn drive_turn(
        &self,
        agent: &Arc<dyn Agent>,
        lease: Option<&Node>,
        turn: &TurnRow,
        user_message: turnstream_protocol::Message,
        cancel: CancellationToken,
        phase: &watch::Sender<Phase>,
    ) -> Result<After> {
        // A turn of this server's own journal is started by its emitter, with its first events
        // or its end (one commit fewer), when there is a window to defer it by; a continuation
        // was started before it waited.
        let deferred = lease.is_none() && turn.resumes == 0 && !self.config.coalesce.is_zero();
        let lease = match lease {
            None if deferred => None,
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
            tokio::spawn(keep_lease(
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
            .agent_history(&turn.user_message_id, AGENT_HISTORY)
            .await
            .unwrap_or_default();
        // A continuation goes on from what the turn showed before it waited.
        let continuation = if turn.resumes > 0 {
            Some(self.journal.turn_progress(turn).await?)
        } else {
            None
        };
        let text_so_far = continuation
            .as_ref()
            .map(|c| c.text.clone())
            .unwrap_or_default();
        let ctx = TurnContext {
            session_id: turn.session_id.clone(),
            turn_id: turn.turn_id.clone(),
            user_message: user_message.content,
            attachments: user_message.attachments,
            history,
            continuation,
        };
        let (sink, rx) = TurnSink::channel();
        let (stop_tx, stop_rx) = oneshot::channel();
        let emitter = if deferred {
            // A start refused (the turn was cancelled while queued) stops the agent as a lost
            // lease does.
            Emitter::deferring_start(
                self.journal.clone(),
                turn.session_id.clone(),
                turn.turn_id.clone(),
                text_so_far,
                lost.clone(),
            )
        } else {
            Emitter::new(
                self.journal.clone(),
                turn.session_id.clone(),
                turn.turn_id.clone(),
                fence.clone().map(|token| (token, lost.clone())),
                text_so_far,
            )
        };
        let emitter = tokio::spawn(emit(emitter, rx, stop_rx, self.config.coalesce));
        // The agent runs in a task of its own: a panic in it fails this turn, not the session's
        // loop, and cancelling aborts it.
        let agent = agent.clone();
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
        // The calls' child turns are queued (v1.3): their sessions look now.
        for session in &emitted.called {
            self.wake(session);
        }
        let with_start = match emitted.start {
            Start::Journaled => false,
            Start::WithEnd => true,
            // Cancelled while queued: that ended it, and nothing of this run was journaled.
            Start::Refused => return Ok(After::Next),
            // Still queued: it runs again after the session loop's pause.
            Start::Failed(e) => {
                return Err(Error::storage(
                    StorageFault::Unavailable,
                    format!("cannot start the turn: {e}"),
                ))
            }
        };
        let (state, error) = match (outcome, emitted.error) {
            // Progress that could not be journaled is a storage fault: the turn cannot claim
            // completion, and its text may hold more than was sent. A cancel, an interruption
            // or the agent's own failure still say what ended the turn.
            ((TurnState::Completed, _), Some(e)) => (TurnState::Failed, Some(e)),
            (outcome, _) => outcome,
        };
        if state == TurnState::Completed && emitted.requests > 0 {
            // The agent asked and returned: the turn waits for the answers, holding nothing.
            self.journal_park(turn, fence.as_deref(), phase).await?;
            return Ok(After::Next);
        }
        let end = End {
            state,
            text: emitted.text,
            error,
            tail: emitted.tail,
            with_start,
        };
        self.journal_end(turn, fence.as_deref(), end, phase).await?;
        Ok(After::Next)
    }

    /// Parks a turn whose agent asked for input, retrying while the storage refuses it (as
    /// [`Turns::journal_end`] does). It waits, or, answered meanwhile, is next in line again.
    async fn journal_park(
        &self,
        turn: &TurnRow,
        fence: Option<&str>,
        phase: &watch::Sender<Phase>,
    ) -> Result<()> {
        let mut backoff = RETRY;
        loop {
            let e = match self.journal.park_turn(&turn.turn_id, fence).await {
                Ok(parked) => {
                    tracing::debug!(turn = %turn.turn_id, ?parked, "turn parked for input");
                    return Ok(());
                }
                Err(e) => e,
            };
            let Some(fault) = e.storage_fault() else {
                return Err(e);
            };
            tracing::warn!(turn = %turn.turn_id, error = %e, "cannot park the turn yet; retrying");
            phase.send_replace(Phase::EndPending(fault));
            tokio::select! {
                _ = tokio::time::sleep(backoff.next()) => {}
                _ = self.interrupt.cancelled() => return Err(e),
            }
        }
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
        end: End,
        phase: &watch::Sender<Phase>,
    ) -> Result<()> {
        let End {
            state,
            text,
            error,
            tail,
            with_start,
        } = end;
        let mut backoff = RETRY;
        loop {
            let ended = match fence {
                // A retry of an end that did land finds the turn no longer queued: a no-op.
                None if with_start => {
                    self.journal
                        .start_and_end_turn(
                            &turn.turn_id,
                            state,
                            text.clone(),
                            error.clone(),
                            tail.clone(),
                        )
                        .await
                }
                None => {
                    self.journal
                        .end_turn(
                            &turn.turn_id,
                            state,
                            text.clone(),
                            error.clone(),
                            &[TurnState::Running],
                            tail.clone(),
                        )
                        .await
                }
                Some(token) => {
                    self.journal
                        .end_fenced_turn(
                            &turn.turn_id,
                            token,
                            state,
                            text.clone(),
                            error.clone(),
                            tail.clone(),
                        )
                        .await
                }
            };
            let e = match ended {
                Ok(ended) => {
                    if ended.is_some() {
                        self.log_turn_end(turn, state);
                        // Its end answered its caller (v1.3), which may continue now.
                        if let Some(by) = &turn.called_by {
                            self.wake(&by.session_id);
                        }
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
}
