//! Turn execution: each session's turns run one at a time in FIFO order (sessions run
//! concurrently, in fair slots), what agents emit is journaled (coalescing deltas), and every
//! turn ends with exactly one terminal state, whatever happens: completion, failure, cancel,
//! lease expiry or shutdown. How turns run is one [`Mode`]: by this server's agent alone, by it
//! under leases on a shared journal, or by worker processes.
//!
//! - [`mode`]: the mode, and what each mode does differently.
//! - `session`: the per-session loop, and running one turn to its journaled end.
//! - `emit` and [`coalesce`]: journaling what an agent emits, and the one delta coalescer
//!   (also for workers' events).
//! - [`lease`] and [`sweep`]: this server's leases and their renewal; the sweep that ends turns
//!   whose lease ran out and wakes the sessions left waiting.
//! - [`dispatch`]: waking worker processes' claims.
//! - [`expiry`]: answering requests for input whose time ran out (v1.2).
//! - [`slots`]: fair turn slots per client.

pub mod coalesce;
pub mod dispatch;
mod emit;
pub mod expiry;
pub mod lease;
pub mod mode;
mod session;
pub mod slots;
pub mod sweep;
#[cfg(test)]
mod tests;

pub use dispatch::Dispatch;
pub use lease::Node;
pub use mode::Mode;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use turnstream_protocol::TurnState;

use crate::backoff::Backoff;
use crate::error::{Error, Result};
use crate::journal::{Journal, TurnRow};
use crate::mutex::lock;
use mode::Claimer;
use session::{Phase, Running};
use slots::TurnSlots;

/// Messages of history handed to an agent (or a worker) as context.
pub const AGENT_HISTORY: usize = 50;
/// Longest a cancel waits for a running turn to end.
const CANCEL_WAIT: Duration = Duration::from_secs(10);
/// Waits between retries of a write the storage refused (a turn's end, a turn's start, reading
/// the next queued turn): the longest is how late a session notices that the storage is back.
const RETRY: Backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(2));

#[derive(Debug, Clone)]
pub struct TurnsConfig {
    /// Window over which deltas are merged before journaling; zero journals each delta.
    pub coalesce: Duration,
    pub max_concurrent_turns: usize,
    /// Slots of `max_concurrent_turns` one client may hold (see [`slots`]).
    pub max_turns_per_client: usize,
}

/// The turns of this server's journal: what starts, runs, cancels and ends them.
pub struct Turns {
    journal: Journal,
    mode: Mode,
    config: TurnsConfig,
    slots: TurnSlots,
    /// The client (user or peer address) that posted each turn not yet started, for fair slots.
    /// Unknown after a restart: such a turn counts against its session.
    clients: Mutex<HashMap<String, String>>,
    /// Sessions with a loop; the flag says "look for queued turns again".
    sessions: Mutex<HashMap<String, bool>>,
    /// Turns running in this process.
    running: Mutex<HashMap<String, Running>>,
    /// Stops session loops from starting new turns.
    stopping: CancellationToken,
    /// Ends running turns `interrupted` (after the shutdown grace period).
    interrupt: CancellationToken,
    tasks: TaskTracker,
    /// This, for what runs with `&self` and must wake a session (v1.3: a call's child, a
    /// caller answered).
    me: std::sync::Weak<Turns>,
}

impl Turns {
    pub fn new(journal: Journal, mode: Mode, config: TurnsConfig) -> Arc<Turns> {
        Arc::new_cyclic(|me| Turns {
            me: me.clone(),
            journal,
            mode,
            slots: TurnSlots::new(config.max_concurrent_turns, config.max_turns_per_client),
            config,
            clients: Mutex::new(HashMap::new()),
            sessions: Mutex::new(HashMap::new()),
            running: Mutex::new(HashMap::new()),
            stopping: CancellationToken::new(),
            interrupt: CancellationToken::new(),
            tasks: TaskTracker::new(),
        })
    }

    pub fn mode(&self) -> &Mode {
        &self.mode
    }

    /// Recovers from a crash, starts the lease sweep if the mode takes leases, and starts the
    /// turns left queued.
    pub async fn start(self: &Arc<Self>) -> Result<()> {
        let (interrupted, repaired) = self.journal.recover_after_crash().await?;
        if interrupted + repaired > 0 {
            tracing::info!(
                interrupted,
                repaired,
                "recovered turns left running by a crash"
            );
        }
        match self.mode.sweep_every() {
            // A leased turn ends once its lease is over, here or on a later sweep.
            Some(every) => {
                self.journal
                    .expire_leases(self.journal.clock().now_ms())
                    .await?;
                let turns = self.clone();
                self.tasks.spawn(sweep::sweep(
                    self.journal.clone(),
                    every,
                    self.mode.shared_journal(),
                    move |session| turns.kick(session),
                    self.stopping.clone(),
                ));
            }
            // Nothing would renew a lease an earlier run left.
            None => {
                self.journal.expire_leases(i64::MAX).await?;
            }
        }
        let turns = self.clone();
        self.tasks.spawn(expiry::expire_inputs(
            self.journal.clone(),
            expiry::EXPIRY_EVERY,
            move |session| turns.kick(session),
            self.stopping.clone(),
        ));
        if let Claimer::Here { .. } = self.mode.claimer() {
            for session in self.journal.sessions_with_queued_turns().await? {
                self.kick(&session);
            }
        }
        Ok(())
    }

    /// Records who posted a turn, so its slot counts against that client.
    pub fn note_client(&self, turn_id: &str, client: String) {
        lock(&self.clients).insert(turn_id.to_string(), client);
    }

    /// Says that the session may have a turn to start: its loop looks again (starting one if
    /// needed), or, with workers, waiting claims do.
    pub fn kick(self: &Arc<Self>, session_id: &str) {
        if self.stopping.is_cancelled() {
            return;
        }
        if let Claimer::Workers(dispatch) = self.mode.claimer() {
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
        self.tasks
            .spawn(async move { this.session_loop(session).await });
    }

    /// [`Turns::kick`] from what holds only `&self`.
    pub(super) fn wake(&self, session_id: &str) {
        if let Some(me) = self.me.upgrade() {
            me.kick(session_id);
        }
    }

    /// Cancels a turn as [`Turns::cancel_one`] does, then (v1.3) the child turns of its calls
    /// not answered yet, and theirs, to any depth, each ending once; a cancelled child's caller
    /// is answered by its end, and woken here.
    pub async fn cancel(&self, turn_id: &str) -> Result<TurnState> {
        let after = self.cancel_one(turn_id).await?;
        if after != TurnState::Cancelled {
            return Ok(after);
        }
        for child in self.journal.unanswered_calls(turn_id).await? {
            if let Err(e) = Box::pin(self.cancel(&child)).await {
                tracing::warn!(turn = %turn_id, child = %child, error = %e, "cannot cancel a call's child turn");
            }
        }
        if let Some(turn) = self.journal.turn(turn_id).await? {
            if let Some(by) = turn.called_by {
                self.wake(&by.session_id);
            }
        }
        Ok(after)
    }

    /// Cancels a turn: a queued one never starts, a running one is stopped and ends `cancelled`
    /// with its partial text. Idempotent on a terminal turn. Returns the turn's state after.
    ///
    /// Never answers success without effect: when the storage refuses the cancel's write (a
    /// queued turn) or the stopped turn's end (a running one), this returns the storage error;
    /// a running turn then still ends once the storage recovers, and a retry is safe.
    async fn cancel_one(&self, turn_id: &str) -> Result<TurnState> {
        let Some(turn) = self.journal.turn(turn_id).await? else {
            return Err(Error::NotFound { what: "turn" });
        };
        if matches!(turn.state, TurnState::Queued | TurnState::Waiting)
            && self.cancel_idle(&turn).await?
        {
            // A runner here may have taken it with its start not journaled yet (see
            // `emit`): its agent stops now rather than at that start.
            if let Some(running) = lock(&self.running).get(turn_id) {
                running.cancel.cancel();
            }
            return Ok(TurnState::Cancelled);
        }
        let here = lock(&self.running).contains_key(turn_id);
        if self.mode.cancel_ends_lease(here) {
            self.cancel_leased(turn_id).await?;
        }
        let running = lock(&self.running)
            .get(turn_id)
            .map(|r| (r.cancel.clone(), r.phase.clone()));
        if let Some((cancel, mut phase)) = running {
            cancel.cancel();
            // The turn ends promptly (the agent future is dropped); bound the wait so a stuck
            // storage layer cannot hang the request.
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
        if matches!(after, TurnState::Queued | TurnState::Waiting)
            && !self.mode.shared_journal()
            && self.cancel_idle(&turn).await?
        {
            // Stopped here just as it parked for input (or was answered): end it idle.
            after = TurnState::Cancelled;
        }
        if !after.is_terminal() && self.mode.shared_journal() {
            // The turn may have moved meanwhile: claimed by another server while this one's
            // session loop, which had just tried to claim it too, held it briefly.
            let ended = match after {
                TurnState::Queued | TurnState::Waiting => self.cancel_idle(&turn).await?,
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

    /// Ends `turn` `cancelled` if nothing runs it: queued, waiting for input, or a continuation
    /// not yet claimed (with the text its earlier runs showed).
    async fn cancel_idle(&self, turn: &TurnRow) -> Result<bool> {
        let ended = self
            .journal
            .end_idle_turn(&turn.turn_id, TurnState::Cancelled)
            .await?;
        if ended {
            self.log_turn_end(turn, TurnState::Cancelled);
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
            self.mode.wake_claims();
        }
        Ok(ended)
    }

    /// `on_busy: interrupt` (v1.2): cancels the session's turns in flight other than `except`,
    /// as by cancel, idle ones first so none of them starts meanwhile; `except` runs next.
    pub async fn interrupt(&self, session_id: &str, except: &str) -> Result<()> {
        let mut turns = self.journal.turns_in_flight(session_id, except).await?;
        turns.sort_by_key(|t| t.state == TurnState::Running);
        for turn in turns {
            self.cancel(&turn.turn_id).await?;
        }
        Ok(())
    }

    /// Whether shutdown has begun (new messages are refused).
    pub fn is_stopping(&self) -> bool {
        self.stopping.is_cancelled()
    }

    /// How many turns are running in this process.
    pub fn running_turns(&self) -> usize {
        lock(&self.running).len()
    }

    /// Graceful shutdown: start no new turn, let running ones finish for `grace`, then end the
    /// rest `interrupted`. Queued turns stay queued and run after the next start.
    pub async fn shutdown(&self, grace: Duration) {
        self.stopping.cancel();
        self.mode.wake_claims();
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

    /// One line per turn end (target `turnstream::turn`): its ids, end state and time since its
    /// message was accepted; never its text or error, which may quote the user.
    fn log_turn_end(&self, turn: &TurnRow, state: TurnState) {
        tracing::info!(
            target: crate::logging::TURN_TARGET,
            turn = %turn.turn_id,
            session = %turn.session_id,
            state = state.as_str(),
            duration_ms = self.journal.clock().now_ms().saturating_sub(turn.created_at),
            "turn ended"
        );
    }
}
