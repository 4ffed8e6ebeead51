//! Leased turns in storage, for worker processes and for servers sharing a journal alike: a
//! queued turn is claimed under a lease (see [`super::lease`]), the one way a leased turn
//! starts; its output is appended fenced by the lease token, so whoever lost the lease (a worker
//! that went silent, a server that stalled or was cut off, and whose turn was ended
//! `interrupted`) can never write to it again; the lease is renewed, and expired leases end
//! their turns. A session's turns still run one at a time, in order, across all of them.
//!
//! Every check and change of one request is one write transaction, and write transactions of
//! all servers are serialized by the journal's counter row, so racing requests (two claims, a
//! cancel and a complete, two servers claiming one turn) are ordered. A worker's output is
//! appended with its `seq` in the same transaction, so a retry appends nothing.

use std::time::Duration;

use turnstream_protocol::worker::{Continuation, NO_SEQ};
use turnstream_protocol::{EventBody, Message, ToolStatus, TurnState};

use super::lease::{Lease, LeaseError};
use super::lifecycle::end_turn_in;
use super::rows::{
    fold_turn, message_by_id, turn_by_id, turn_from_row, TURN_COLUMNS, TURN_COLUMN_COUNT,
};
use super::sql::{params, Param, Sql};
use super::{Journal, TurnRow, WriteCtx};
use crate::error::{Error, Result};

/// What a claim of a queued turn found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim {
    /// The turn is `running` under this lease.
    Started(Lease),
    /// The turn is no longer queued (cancelled, or another server ran it).
    NotQueued,
    /// Another turn of the session is running, or an older one is queued: not this one's turn.
    Busy,
}

/// Starts queued turn `turn_id` under a new lease for `owner` (a worker or a server): journals
/// `turn_started` and marks the turn `running` with the lease. The one way a leased turn starts.
fn start_leased(
    ctx: &mut WriteCtx<'_>,
    turn: &TurnRow,
    owner: &str,
    ttl: Duration,
) -> Result<Lease> {
    let (session_id, turn_id) = (turn.session_id.as_str(), turn.turn_id.as_str());
    let lease = Lease::grant(owner, ttl, ctx.now);
    if turn.resumes > 0 {
        // A continuation: it started before it waited, and its worker `seq` goes on.
        let n = ctx.conn.execute(
            "UPDATE turns SET state = 'running', lease_token = ?2, lease_owner = ?3,
                 lease_expires_at = ?4
             WHERE turn_id = ?1 AND state = 'queued'",
            params![turn_id, &lease.token, &lease.owner, lease.expires_at],
        )?;
        if n != 1 {
            return Err(Error::Corrupt("turn changed state during claim".into()));
        }
        // Granted in this batch, it holds in it: the turn's first writes and its end need not
        // ask (the batches after check it again first, with the others they know).
        ctx.known_holding(turn_id, &lease.token);
        return Ok(lease);
    }
    let seq = ctx.append(session_id, Some(turn_id), |_| EventBody::TurnStarted {})?;
    let n = ctx.conn.execute(
        "UPDATE turns SET state = 'running', started_at = ?2, started_seq = ?3,
             lease_token = ?4, lease_owner = ?5, lease_expires_at = ?6, worker_seq = ?7
         WHERE turn_id = ?1 AND state = 'queued'",
        params![
            turn_id,
            ctx.now,
            seq,
            &lease.token,
            &lease.owner,
            lease.expires_at,
            NO_SEQ
        ],
    )?;
    if n != 1 {
        return Err(Error::Corrupt("turn changed state during claim".into()));
    }
    ctx.known_holding(turn_id, &lease.token);
    Ok(lease)
}

/// Whether `token` holds the running turn's lease now.
pub(super) fn holds(conn: &dyn Sql, turn_id: &str, token: &str, now: i64) -> Result<bool> {
    Ok(conn
        .query_int(
            "SELECT COUNT(*) FROM turns WHERE turn_id = ?1 AND state = 'running'
             AND lease_token = ?2 AND lease_expires_at > ?3",
            params![turn_id, token, now],
        )?
        .unwrap_or(0)
        == 1)
}

/// Which of `fences` (`(turn, lease token)` pairs) hold their running turn's lease now, in one
/// statement: [`holds`] for many turns at once.
pub(super) fn still_holding(
    conn: &dyn Sql,
    fences: &[(String, String)],
    now: i64,
) -> Result<Vec<(String, String)>> {
    if fences.is_empty() {
        return Ok(Vec::new());
    }
    // As many placeholders as the next power of two (the last turn repeated), so a few
    // statement texts serve every count (each is prepared and kept per connection).
    let slots = fences.len().next_power_of_two();
    let placeholders: Vec<String> = (0..slots).map(|i| format!("?{}", i + 2)).collect();
    let sql = holding_sql("?1", &placeholders);
    let mut args = Vec::with_capacity(slots + 1);
    args.push(Param::Int(now));
    for i in 0..slots {
        let (turn, _) = &fences[i.min(fences.len() - 1)];
        args.push(Param::Text(turn));
    }
    let rows = conn.query(&sql, &args)?;
    let found = rows
        .iter()
        .map(|row| Ok((row.text(0)?, row.text(1)?)))
        .collect::<Result<Vec<_>>>()?;
    Ok(holding_of(fences, found))
}

/// [`still_holding`]'s statement with its values written in (for a simple query that also
/// begins the transaction: one round trip for both), or `None` when a value is anything but
/// an id's characters (`[0-9A-Za-z_-]`), which are never quoted wrong.
pub(super) fn still_holding_literal(fences: &[(String, String)], now: i64) -> Option<String> {
    let id_like = |v: &str| {
        !v.is_empty()
            && v.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    };
    if fences.is_empty() || !fences.iter().all(|(t, k)| id_like(t) && id_like(k)) {
        return None;
    }
    let turns: Vec<String> = fences.iter().map(|(t, _)| format!("'{t}'")).collect();
    Some(holding_sql(&now.to_string(), &turns))
}

/// The running turns among `turns` (SQL values) whose lease is unexpired at `now` (a SQL
/// value), with their lease tokens: the query of [`still_holding`] and of
/// [`still_holding_literal`].
fn holding_sql(now: &str, turns: &[String]) -> String {
    format!(
        "SELECT turn_id, lease_token FROM turns WHERE state = 'running'
         AND lease_token IS NOT NULL AND lease_expires_at > {now} AND turn_id IN ({})",
        turns.join(", ")
    )
}

/// Which of `fences` the `(turn, lease token)` rows `found` hold, each once.
pub(super) fn holding_of(
    fences: &[(String, String)],
    found: impl IntoIterator<Item = (String, String)>,
) -> Vec<(String, String)> {
    let mut holding = Vec::with_capacity(fences.len());
    for (turn, token) in found {
        if let Some(fence) = fences.iter().find(|(t, k)| *t == turn && *k == token) {
            if !holding.contains(fence) {
                holding.push(fence.clone());
            }
        }
    }
    holding
}

/// A turn a claim handed out.
#[derive(Debug, Clone)]
pub struct Claimed {
    pub turn: TurnRow,
    pub user_message: Message,
    pub history: Vec<Message>,
    pub lease: Lease,
    /// For a turn that waited for input and was answered: what continuing it needs.
    pub continuation: Option<Continuation>,
}

/// Where a leased turn stands after an accepted request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeasedTurn {
    pub acked_seq: i64,
    pub state: TurnState,
    pub lease_expires_at: i64,
}

/// Why a worker's request on a turn was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    NotFound,
    /// The lease expired (the turn ended `interrupted`) or names another claim.
    LeaseLost,
    /// The turn was cancelled; the worker should stop.
    Cancelled,
    /// The `seq` is not the next one; `acked` is the last accepted.
    SeqGap {
        acked: i64,
    },
    /// The worker already ended the turn (`completed` or `failed`) and this is not a repeat.
    Ended {
        state: TurnState,
    },
}

/// What a worker request asks of a leased turn.
#[derive(Debug, Clone)]
pub enum WorkerOp {
    /// Append these (already coalesced) events as request `seq`.
    Events { seq: i64, events: Vec<EventBody> },
    /// Renew the lease and say the turn's state.
    Heartbeat,
    /// End the lease as request `seq` after requests for input: the turn waits (v1.2).
    Wait { seq: i64 },
    /// End the turn (`completed` or `failed`) as request `seq`.
    Finish {
        seq: i64,
        state: TurnState,
        error: Option<String>,
    },
}

/// A turn's row with its lease and acked seq.
struct Leased {
    turn: TurnRow,
    lease: Option<Lease>,
    acked: i64,
}

fn load(conn: &dyn Sql, turn_id: &str) -> Result<Option<Leased>> {
    let Some(turn) = turn_by_id(conn, turn_id)? else {
        return Ok(None);
    };
    let row = conn
        .query_row(
            "SELECT lease_token, lease_owner, lease_expires_at, worker_seq FROM turns WHERE turn_id = ?1",
            params![turn_id],
        )?
        .ok_or(Error::NotFound { what: "turn" })?;
    let (token, owner, expires_at, acked) = (
        row.opt_text(0)?,
        row.opt_text(1)?,
        row.opt_int(2)?,
        row.int(3)?,
    );
    let lease = match (token, expires_at) {
        (Some(token), Some(expires_at)) => Some(Lease {
            token,
            owner: owner.unwrap_or_default(),
            expires_at,
        }),
        _ => None,
    };
    Ok(Some(Leased { turn, lease, acked }))
}

/// Ends a leased turn with the text its journaled response deltas make (so the end is right
/// after a restart too), after marking every tool call still open `failed`. `None` if the turn
/// had already ended.
fn end_leased(
    ctx: &mut WriteCtx<'_>,
    turn: &TurnRow,
    state: TurnState,
    error: Option<String>,
) -> Result<Option<Message>> {
    if turn.state != TurnState::Running {
        return Ok(None);
    }
    if state == TurnState::Interrupted
        && super::requests::requeue_untouched(ctx, &turn.turn_id, turn.resumes)?
    {
        return Ok(None);
    }
    let progress = fold_turn(ctx.conn, turn, i64::MAX)?;
    for mut call in progress.tools {
        if matches!(call.status, ToolStatus::Started | ToolStatus::Progress) {
            call.status = ToolStatus::Failed;
            call.input_preview = None;
            call.output_preview = None;
            ctx.append(&turn.session_id, Some(&turn.turn_id), |_| {
                EventBody::Tool(call)
            })?;
        }
    }
    end_turn_in(
        ctx,
        &turn.turn_id,
        state,
        progress.text,
        error,
        &[TurnState::Running],
        Vec::new(),
    )
}

/// The oldest queued turns whose session has no running turn and no waiting turn before them,
/// at most one per session.
fn claimable(conn: &dyn Sql, max: usize) -> Result<Vec<String>> {
    conn.query_texts(
        "SELECT t.turn_id FROM turns t WHERE t.state = 'queued'
         AND NOT EXISTS (SELECT 1 FROM turns r
             WHERE r.session_id = t.session_id AND r.state = 'running')
         AND t.queued_seq = (SELECT MIN(q.queued_seq) FROM turns q
             WHERE q.session_id = t.session_id AND q.state IN ('queued', 'waiting'))
         ORDER BY t.queued_seq LIMIT ?1",
        params![max as i64],
    )
}

/// Workers' claims and requests, and the end of leased turns (a cancel, an expired lease).
impl Journal {
    /// Hands out up to `max` of the oldest queued turns whose session has no running turn, at
    /// most one per session, each `running` under a new lease of `ttl` for `worker_id`.
    pub async fn claim_turns(
        &self,
        worker_id: &str,
        max: usize,
        ttl: Duration,
        history_limit: usize,
    ) -> Result<Vec<Claimed>> {
        // Idle workers poll: look with a read first, so a claim that finds nothing costs the
        // one writer nothing. The write looks again (another claim may have been first).
        if self
            .read(move |conn, _| claimable(conn, 1))
            .await?
            .is_empty()
        {
            return Ok(Vec::new());
        }
        let worker_id = worker_id.to_string();
        let claimed = self
            .write(move |ctx| {
                let ids = claimable(ctx.conn, max)?;
                let mut out = Vec::with_capacity(ids.len());
                for turn_id in ids {
                    let Some(mut turn) = turn_by_id(ctx.conn, &turn_id)? else {
                        continue;
                    };
                    let continuation = if turn.resumes > 0 {
                        let acked = load(ctx.conn, &turn_id)?.map_or(NO_SEQ, |l| l.acked);
                        Some(super::inputs::continuation(ctx.conn, &turn, acked)?)
                    } else {
                        None
                    };
                    let lease = start_leased(ctx, &turn, &worker_id, ttl)?;
                    turn.state = TurnState::Running;
                    turn.started_at = turn.started_at.or(Some(ctx.now));
                    let user_message =
                        message_by_id(ctx.conn, ctx.epoch, &turn.user_message_id)?
                            .ok_or_else(|| Error::Corrupt("a turn without its message".into()))?;
                    let history = super::branches::context(
                        ctx.conn,
                        ctx.epoch,
                        &turn.user_message_id,
                        history_limit,
                    )?;
                    out.push(Claimed {
                        turn,
                        user_message,
                        history,
                        lease,
                        continuation,
                    });
                }
                Ok(out)
            })
            .await?;
        self.metrics()
            .turns_started
            .fetch_add(claimed.len() as u64, std::sync::atomic::Ordering::Relaxed);
        Ok(claimed)
    }

    /// Runs one worker request on a leased turn, fenced by `token`; every accepted request
    /// renews the lease to `ttl` from now. A lease found expired ends the turn `interrupted`
    /// here and now (exactly once: the end is conditional on `running`).
    pub async fn worker_request(
        &self,
        turn_id: &str,
        token: &str,
        ttl: Duration,
        op: WorkerOp,
    ) -> Result<std::result::Result<LeasedTurn, Refusal>> {
        let turn_id = turn_id.to_string();
        let token = token.to_string();
        let input_timeout_ms = i64::try_from(self.input_timeout().as_millis()).unwrap_or(i64::MAX);
        let (answer, ended) = self
            .write(move |ctx| {
                let Some(row) = load(ctx.conn, &turn_id)? else {
                    return Ok((Err(Refusal::NotFound), false));
                };
                let Some(mut lease) = row.lease.clone() else {
                    return Ok((Err(Refusal::LeaseLost), false));
                };
                let expired = match lease.check(&token, ctx.now) {
                    Err(LeaseError::Mismatch) => return Ok((Err(Refusal::LeaseLost), false)),
                    Err(LeaseError::Expired) => true,
                    Ok(()) => false,
                };
                let here = |state| LeasedTurn {
                    acked_seq: row.acked,
                    state,
                    lease_expires_at: lease.expires_at,
                };
                match row.turn.state {
                    TurnState::Running => {}
                    TurnState::Cancelled => {
                        return Ok((
                            match op {
                                WorkerOp::Heartbeat => Ok(here(TurnState::Cancelled)),
                                _ => Err(Refusal::Cancelled),
                            },
                            false,
                        ))
                    }
                    s @ (TurnState::Completed | TurnState::Failed) => {
                        let repeat = match op {
                            WorkerOp::Heartbeat => true,
                            WorkerOp::Events { seq, .. } => seq <= row.acked,
                            WorkerOp::Finish { seq, .. } | WorkerOp::Wait { seq } => {
                                seq == row.acked
                            }
                        };
                        return Ok((
                            if repeat {
                                Ok(here(s))
                            } else {
                                Err(Refusal::Ended { state: s })
                            },
                            false,
                        ));
                    }
                    // Parked: a repeat of the `wait` that parked it is answered as it was.
                    TurnState::Waiting | TurnState::Queued
                        if matches!(op, WorkerOp::Wait { seq } if seq == row.acked) =>
                    {
                        return Ok((Ok(here(row.turn.shown_state())), false))
                    }
                    TurnState::Interrupted | TurnState::Queued | TurnState::Waiting => {
                        return Ok((Err(Refusal::LeaseLost), false))
                    }
                }
                if expired {
                    let ended = end_leased(ctx, &row.turn, TurnState::Interrupted, None)?.is_some();
                    return Ok((Err(Refusal::LeaseLost), ended));
                }
                let next = row.acked + 1;
                let mut acked = row.acked;
                let mut state = TurnState::Running;
                match op {
                    WorkerOp::Heartbeat => {}
                    WorkerOp::Events { seq, .. } if seq <= row.acked => {}
                    WorkerOp::Events { seq, .. }
                    | WorkerOp::Finish { seq, .. }
                    | WorkerOp::Wait { seq }
                        if seq != next =>
                    {
                        return Ok((Err(Refusal::SeqGap { acked: row.acked }), false));
                    }
                    WorkerOp::Events { seq, events } => {
                        for body in events {
                            match body {
                                EventBody::InputRequested(request) => {
                                    super::inputs::open_request(
                                        ctx,
                                        &row.turn.session_id,
                                        &turn_id,
                                        None,
                                        request,
                                        input_timeout_ms,
                                    )?;
                                }
                                body => {
                                    ctx.append(&row.turn.session_id, Some(&turn_id), |_| body)?;
                                }
                            }
                        }
                        acked = seq;
                    }
                    WorkerOp::Wait { seq } => {
                        let parked = super::inputs::park(ctx, &row.turn, Some(seq))?;
                        let state = match parked {
                            super::inputs::Parked::Continues => TurnState::Running,
                            _ => TurnState::Waiting,
                        };
                        return Ok((
                            Ok(LeasedTurn {
                                acked_seq: seq,
                                state,
                                lease_expires_at: ctx.now,
                            }),
                            false,
                        ));
                    }
                    WorkerOp::Finish {
                        seq,
                        state: end,
                        error,
                    } => {
                        end_leased(ctx, &row.turn, end, error)?;
                        acked = seq;
                        state = end;
                    }
                }
                lease.renew(ttl, ctx.now);
                ctx.conn.execute(
                    "UPDATE turns SET worker_seq = ?3, lease_expires_at = ?4
                     WHERE turn_id = ?1 AND lease_token = ?2",
                    params![&turn_id, &lease.token, acked, lease.expires_at],
                )?;
                let ended = state != TurnState::Running;
                Ok((
                    Ok(LeasedTurn {
                        acked_seq: acked,
                        state,
                        lease_expires_at: lease.expires_at,
                    }),
                    ended,
                ))
            })
            .await?;
        if ended {
            self.metrics()
                .turns_ended
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        Ok(answer)
    }

    /// Ends a worker's running turn in `state` now, with the text accepted so far, whoever holds
    /// its lease (a cancel does not wait for the worker). `false` if it was not running.
    pub async fn end_leased_turn(&self, turn_id: &str, state: TurnState) -> Result<bool> {
        let turn_id = turn_id.to_string();
        let ended = self
            .write(move |ctx| {
                let Some(turn) = turn_by_id(ctx.conn, &turn_id)? else {
                    return Err(Error::NotFound { what: "turn" });
                };
                Ok(end_leased(ctx, &turn, state, None)?.is_some())
            })
            .await?;
        if ended {
            self.metrics()
                .turns_ended
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        Ok(ended)
    }

    /// Ends `interrupted` every running turn whose lease expired by `now_ms` (`i64::MAX`: every
    /// leased turn, for a server that runs no workers). Returns how many ended.
    pub async fn expire_leases(&self, now_ms: i64) -> Result<usize> {
        let due: i64 = self
            .read(move |conn, _| {
                Ok(conn
                    .query_int(
                        "SELECT COUNT(*) FROM turns WHERE state = 'running'
                         AND lease_token IS NOT NULL AND lease_expires_at <= ?1",
                        params![now_ms],
                    )?
                    .unwrap_or(0))
            })
            .await?;
        if due == 0 {
            return Ok(0);
        }
        let ended = self
            .write(move |ctx| {
                let ids = ctx.conn.query_texts(
                    "SELECT turn_id FROM turns WHERE state = 'running'
                     AND lease_token IS NOT NULL AND lease_expires_at <= ?1",
                    params![now_ms],
                )?;
                let mut ended = 0;
                for id in ids {
                    if let Some(turn) = turn_by_id(ctx.conn, &id)? {
                        if end_leased(ctx, &turn, TurnState::Interrupted, None)?.is_some() {
                            ended += 1;
                        }
                    }
                }
                Ok(ended)
            })
            .await?;
        self.metrics()
            .turns_ended
            .fetch_add(ended as u64, std::sync::atomic::Ordering::Relaxed);
        Ok(ended)
    }

    /// Whether a turn is held by a worker's lease.
    pub async fn is_leased(&self, turn_id: &str) -> Result<bool> {
        let turn_id = turn_id.to_string();
        self.read(move |conn, _| {
            let token = conn.query_row(
                "SELECT lease_token FROM turns WHERE turn_id = ?1",
                params![&turn_id],
            )?;
            Ok(match token {
                Some(row) => row.opt_text(0)?.is_some(),
                None => false,
            })
        })
        .await
    }
}

/// Servers' own turns on a shared journal.
impl Journal {
    /// Claims a queued turn for this server (`owner`) under a lease of `ttl`, if it is the
    /// session's next and no turn of the session runs; journals `turn_started`.
    pub async fn claim_turn(&self, turn_id: &str, owner: &str, ttl: Duration) -> Result<Claim> {
        let turn_id = turn_id.to_string();
        let owner = owner.to_string();
        self.write(move |ctx| {
            // The turn, and its session's turn that goes first (the running one, else the
            // oldest in flight), in one round trip.
            let Some(row) = ctx.conn.query_row(
                &format!(
                    "SELECT {TURN_COLUMNS}, (SELECT f.turn_id FROM turns f
                         WHERE f.session_id = turns.session_id
                         AND f.state IN ('queued', 'running', 'waiting')
                         ORDER BY CASE WHEN f.state = 'running' THEN 0 ELSE 1 END, f.queued_seq
                         LIMIT 1)
                     FROM turns WHERE turn_id = ?1"
                ),
                params![&turn_id],
            )?
            else {
                return Ok(Claim::NotQueued);
            };
            let turn = turn_from_row(&row)?;
            if turn.state != TurnState::Queued {
                return Ok(Claim::NotQueued);
            }
            if row.opt_text(TURN_COLUMN_COUNT)?.as_deref() != Some(turn_id.as_str()) {
                return Ok(Claim::Busy);
            }
            let lease = start_leased(ctx, &turn, &owner, ttl)?;
            Ok(Claim::Started(lease))
        })
        .await
    }

    /// Parks a turn this server ran, after its agent opened requests and returned (fenced by
    /// `fence` on a shared journal).
    pub async fn park_turn(
        &self,
        turn_id: &str,
        fence: Option<&str>,
    ) -> Result<super::inputs::Parked> {
        let turn_id = turn_id.to_string();
        let fence = fence.map(str::to_string);
        self.write(move |ctx| {
            let Some(turn) = turn_by_id(ctx.conn, &turn_id)? else {
                return Ok(super::inputs::Parked::Gone);
            };
            if let Some(token) = &fence {
                if !ctx.holds(&turn_id, token)? {
                    return Ok(super::inputs::Parked::Gone);
                }
            }
            super::inputs::park(ctx, &turn, None)
        })
        .await
    }

    /// Renews a running turn's lease to `ttl` from now. `false` if the lease is lost: the turn
    /// ended (another server interrupted or cancelled it) or the lease expired.
    pub async fn renew_turn_lease(
        &self,
        turn_id: &str,
        token: &str,
        ttl: Duration,
    ) -> Result<bool> {
        let turn_id = turn_id.to_string();
        let token = token.to_string();
        let ttl_ms = i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX);
        self.write(move |ctx| {
            let n = ctx.conn.execute(
                "UPDATE turns SET lease_expires_at = ?3 WHERE turn_id = ?1 AND state = 'running'
                 AND lease_token = ?2 AND lease_expires_at > ?4",
                params![&turn_id, &token, ctx.now.saturating_add(ttl_ms), ctx.now],
            )?;
            Ok(n == 1)
        })
        .await
    }

    /// [`Journal::submit_turn_event`] fenced by a lease: refused with [`Error::LeaseLost`] once
    /// `token` no longer holds the turn.
    pub(crate) fn submit_fenced_turn_event(
        &self,
        session_id: &str,
        turn_id: &str,
        token: &str,
        body: EventBody,
    ) -> tokio::sync::oneshot::Receiver<Result<i64>> {
        let session_id = session_id.to_string();
        let turn_id = turn_id.to_string();
        let token = token.to_string();
        // One statement (the check is part of the insert): no savepoint needed.
        self.submit_single_statement(move |ctx| {
            ctx.append_fenced(&session_id, Some(&turn_id), Some(&token), |_| body)
        })
    }

    /// [`Journal::end_turn`] of a running turn, fenced by its lease: `None` when `token` no
    /// longer holds it (the server that ended it instead wrote its end; `tail` is dropped).
    pub async fn end_fenced_turn(
        &self,
        turn_id: &str,
        token: &str,
        state: TurnState,
        text: String,
        error: Option<String>,
        tail: Vec<EventBody>,
    ) -> Result<Option<Message>> {
        let token = token.to_string();
        self.end_running_turn_if(turn_id, state, text, error, tail, move |ctx, turn| {
            ctx.holds(turn, &token)
        })
        .await
    }

    /// Sessions whose next turn waits: queued turns and none running (their server may be gone).
    pub async fn sessions_waiting(&self) -> Result<Vec<String>> {
        self.read(|conn, _| {
            conn.query_texts(
                "SELECT DISTINCT q.session_id FROM turns q WHERE q.state = 'queued'
                 AND NOT EXISTS (SELECT 1 FROM turns r
                     WHERE r.session_id = q.session_id AND (r.state = 'running'
                         OR (r.state = 'waiting' AND r.queued_seq < q.queued_seq)))",
                &[],
            )
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::journal::schema;

    type TestResult = std::result::Result<(), Box<dyn std::error::Error>>;

    fn pair(turn: &str, token: &str) -> (String, String) {
        (turn.to_string(), token.to_string())
    }

    #[test]
    fn the_check_written_in_takes_only_ids_characters() {
        let sql = still_holding_literal(&[pair("turn_a1", "lse_9f-2")], 7);
        assert!(
            sql.as_deref()
                .is_some_and(|s| s.contains("lease_expires_at > 7 AND turn_id IN ('turn_a1')")),
            "{sql:?}"
        );
        for bad in ["t'; DROP TABLE turns; --", "t\\", "", "t\u{0}"] {
            assert_eq!(
                still_holding_literal(&[pair(bad, "lse_1")], 7),
                None,
                "{bad:?}"
            );
            assert_eq!(
                still_holding_literal(&[pair("turn_a", bad)], 7),
                None,
                "{bad:?}"
            );
        }
        assert_eq!(still_holding_literal(&[], 7), None);
    }

    #[test]
    fn still_holding_keeps_only_the_leases_that_hold_now() -> TestResult {
        let dir = tempfile::tempdir()?;
        let mut conn = rusqlite::Connection::open(dir.path().join("l.db"))?;
        schema::configure(&conn)?;
        schema::migrate(&mut conn)?;
        for (turn, state, token, expires) in [
            ("a", "running", "ta", 2_000),
            ("b", "running", "tb", 2_000),
            ("c", "running", "tc", 500),
            ("d", "completed", "td", 2_000),
            ("e", "running", "new", 2_000),
        ] {
            conn.execute(
                "INSERT INTO turns(turn_id, session_id, user_message_id, state, created_at,
                                   queued_seq, lease_token, lease_owner, lease_expires_at)
                 VALUES (?1, 's', 'm', ?2, 0, 1, ?3, 'w', ?4)",
                rusqlite::params![turn, state, token, expires],
            )?;
        }
        let known = vec![
            pair("a", "ta"),
            pair("b", "tb"),
            pair("c", "tc"),
            pair("d", "td"),
            pair("e", "old"),
        ];
        let holding = still_holding(&conn, &known, 1_000)?;
        assert_eq!(holding, vec![pair("a", "ta"), pair("b", "tb")]);
        // The same answers as one `holds` per turn.
        for (turn, token) in &known {
            assert_eq!(
                holds(&conn, turn, token, 1_000)?,
                holding.contains(&pair(turn, token)),
                "{turn}"
            );
        }
        assert!(still_holding(&conn, &[], 1_000)?.is_empty());
        assert!(still_holding(&conn, &known, 3_000)?.is_empty(), "expired");
        Ok(())
    }
}
