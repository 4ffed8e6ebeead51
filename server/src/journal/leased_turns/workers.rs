//! Workers' claims and requests on leased turns: a claim hands out the oldest queued turns,
//! each under a new lease; a worker's events, heartbeat, completion and failure are checked
//! against its lease and fenced by its token; a cancel or an expired lease ends the turn.

use std::time::Duration;

use turnstream_protocol::worker::{Continuation, NO_SEQ};
use turnstream_protocol::{EventBody, Message, ToolStatus, TurnState, Usage};

use super::start_leased;
use crate::error::{Error, Result};
use crate::journal::calls::NewCall;
use crate::journal::lease::{Lease, LeaseError};
use crate::journal::lifecycle::end_turn_in;
use crate::journal::rows::{fold_turn, message_by_id, turn_by_id};
use crate::journal::sql::{params, Param, Sql};
use crate::journal::{Journal, TurnRow, WriteCtx};

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

/// One thing of a worker's `events` batch, in order: an event to journal, or a call to open
/// (v1.3).
// Nearly every write is an event: boxing them to shrink the rare call would cost each one.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub enum WorkerWrite {
    Event(EventBody),
    Call(NewCall),
}

/// What a worker request asks of a leased turn.
#[derive(Debug, Clone)]
pub enum WorkerOp {
    /// Append these (already coalesced) events, and open these calls, as request `seq`.
    Events { seq: i64, events: Vec<WorkerWrite> },
    /// Renew the lease and say the turn's state.
    Heartbeat,
    /// End the lease as request `seq` after requests for input: the turn waits (v1.2).
    Wait { seq: i64 },
    /// End the turn (`completed` or `failed`) as request `seq`.
    Finish {
        seq: i64,
        state: TurnState,
        error: Option<String>,
        /// The tokens the worker's model reported, kept on the turn with its end.
        usage: Option<Usage>,
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
        && crate::journal::requests::requeue_untouched(ctx, &turn.turn_id, turn.resumes)?
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
/// at most one per session; only turns of `agents` when given (v1.3).
fn claimable(conn: &dyn Sql, max: usize, agents: Option<&[String]>) -> Result<Vec<String>> {
    let mut args = vec![Param::Int(max as i64)];
    let only = match agents {
        None => String::new(),
        Some(agents) => {
            let marks: Vec<String> = (0..agents.len()).map(|i| format!("?{}", i + 2)).collect();
            args.extend(agents.iter().map(|a| Param::Text(a)));
            format!("AND t.agent IN ({})", marks.join(", "))
        }
    };
    conn.query_texts(
        &format!(
            "SELECT t.turn_id FROM turns t WHERE t.state = 'queued' {only}
             AND NOT EXISTS (SELECT 1 FROM turns r
                 WHERE r.session_id = t.session_id AND r.state = 'running')
             AND t.queued_seq = (SELECT MIN(q.queued_seq) FROM turns q
                 WHERE q.session_id = t.session_id AND q.state IN ('queued', 'waiting'))
             ORDER BY t.queued_seq LIMIT ?1"
        ),
        &args,
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
        agents: Option<Vec<String>>,
    ) -> Result<Vec<Claimed>> {
        // Idle workers poll: look with a read first, so a claim that finds nothing costs the
        // one writer nothing. The write looks again (another claim may have been first).
        let looking = agents.clone();
        if self
            .read(move |conn, _| claimable(conn, 1, looking.as_deref()))
            .await?
            .is_empty()
        {
            return Ok(Vec::new());
        }
        let worker_id = worker_id.to_string();
        let claimed = self
            .write(move |ctx| {
                let ids = claimable(ctx.conn, max, agents.as_deref())?;
                let mut out = Vec::with_capacity(ids.len());
                for turn_id in ids {
                    let Some(mut turn) = turn_by_id(ctx.conn, &turn_id)? else {
                        continue;
                    };
                    let continuation = if turn.resumes > 0 {
                        let acked = load(ctx.conn, &turn_id)?.map_or(NO_SEQ, |l| l.acked);
                        Some(crate::journal::inputs::continuation(
                            ctx.conn, &turn, acked,
                        )?)
                    } else {
                        None
                    };
                    let lease = start_leased(ctx, &turn, &worker_id, ttl)?;
                    turn.state = TurnState::Running;
                    turn.started_at = turn.started_at.or(Some(ctx.now));
                    let user_message =
                        message_by_id(ctx.conn, ctx.epoch, &turn.user_message_id)?
                            .ok_or_else(|| Error::Corrupt("a turn without its message".into()))?;
                    let history = crate::journal::branches::context(
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
                        for write in events {
                            let body = match write {
                                WorkerWrite::Event(body) => body,
                                WorkerWrite::Call(call) => {
                                    crate::journal::calls::open_call(ctx, &turn_id, None, call)?;
                                    continue;
                                }
                            };
                            match body {
                                EventBody::InputRequested(request) => {
                                    crate::journal::inputs::open_request(
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
                        let parked = crate::journal::inputs::park(ctx, &row.turn, Some(seq))?;
                        let state = match parked {
                            crate::journal::inputs::Parked::Continues => TurnState::Running,
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
                        usage,
                    } => {
                        if let Some(usage) = usage {
                            ctx.conn.execute(
                                "UPDATE turns SET usage = ?2 WHERE turn_id = ?1",
                                params![&row.turn.turn_id, &serde_json::to_string(&usage)?],
                            )?;
                        }
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
                    // A turn whose end is journaled already is only behind in its row.
                    if crate::journal::lifecycle::repair_from_journaled_end(ctx, &id)? {
                        continue;
                    }
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
