//! Agents' requests and their answers in storage (contract v1.2). A request is journaled
//! (`input_requested`) with its row in `input_requests`, in one transaction; the first answer
//! wins (`input_given`, conditional on the row being open); once a waiting turn has no open
//! request it becomes a continuation: `queued` with one more `resumes`, claimed like any
//! queued turn, on whichever server or worker comes first. A turn whose run ended with requests
//! open is parked `waiting`, holding no lease and no slot.

use std::sync::atomic::Ordering;

use turnstream_protocol::input::{MAX_REQUESTS_PER_TURN, TIMED_OUT_ANSWER};
use turnstream_protocol::worker::{Answer, Continuation, WorkerEvent};
use turnstream_protocol::{
    ActiveTurn, EventBody, InputAnswerRequest, InputGiven, InputRequest, RawJson, RequestKind,
    TurnState,
};

use super::requests::open_count;
use super::rows::{fold_turn, turn_by_id};
use super::sql::{params, Sql};
use super::{Journal, TurnRow, WriteCtx};
use crate::error::{Error, Result};

/// An answer that was recorded (or repeated).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Given {
    /// The answer is in; `continues`: it was the turn's last open request and the turn is a
    /// continuation now (wake its session).
    Recorded {
        state: TurnState,
        session_id: String,
        continues: bool,
    },
    /// The same answer by the same author was recorded before: nothing changed.
    Repeat { state: TurnState },
}

/// Why an answer was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InputRefusal {
    TurnNotFound,
    RequestNotFound,
    /// The turn ended (its open requests closed with it).
    TurnEnded(TurnState),
    /// Another answer was first: this one.
    AlreadyGiven {
        answer: RawJson,
        by: Option<String>,
    },
    /// The answer does not fit the request's kind.
    Invalid(String),
}

/// Where a turn whose run ended with requests open went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Parked {
    /// `waiting` for answers.
    Waiting,
    /// Every request was answered meanwhile: it is a continuation, claimable now.
    Continues,
    /// The turn is no longer running under this runner (cancelled, or its lease was lost).
    Gone,
}

/// Journals `request` for running turn `turn_id` (fenced by `fence` if given): its
/// `input_requested` event (with `expires_at` filled in from `timeout_ms` when the agent left it
/// out) and its row. Refused when malformed, repeated in the turn, or one too many.
pub(super) fn open_request(
    ctx: &mut WriteCtx<'_>,
    session_id: &str,
    turn_id: &str,
    fence: Option<&str>,
    mut request: InputRequest,
    timeout_ms: i64,
) -> Result<i64> {
    request.check().map_err(Error::InvalidRequest)?;
    // One read of the turn's requests: how many, and whether this id is among them.
    let (opened, taken) = match ctx.conn.query_row(
        "SELECT COUNT(*), COALESCE(SUM(CASE WHEN request_id = ?2 THEN 1 ELSE 0 END), 0)
         FROM input_requests WHERE turn_id = ?1",
        params![turn_id, &request.request_id],
    )? {
        Some(row) => (row.int(0)?, row.int(1)?),
        None => (0, 0),
    };
    if opened as usize >= MAX_REQUESTS_PER_TURN {
        return Err(Error::InvalidRequest(format!(
            "a turn opens at most {MAX_REQUESTS_PER_TURN} requests"
        )));
    }
    if taken > 0 {
        return Err(Error::InvalidRequest(format!(
            "request_id {:?} is already used in this turn",
            request.request_id
        )));
    }
    // A call (v1.3) waits for its child's end, however long: the server never answers it.
    let expires_at = if request.kind == RequestKind::AgentCall {
        i64::MAX
    } else {
        let at = request
            .expires_at
            .unwrap_or_else(|| ctx.now.saturating_add(timeout_ms));
        request.expires_at = Some(at);
        at
    };
    let stored = serde_json::to_string(&request)?;
    let request_id = request.request_id.clone();
    let seq = ctx.append_fenced(session_id, Some(turn_id), fence, |_| {
        EventBody::InputRequested(request)
    })?;
    ctx.conn.execute(
        "INSERT INTO input_requests(turn_id, request_id, session_id, request, expires_at, requested_seq)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        params![turn_id, &request_id, session_id, &stored, expires_at, seq],
    )?;
    ctx.conn.execute(
        "UPDATE turns SET asked = asked + 1 WHERE turn_id = ?1",
        params![turn_id],
    )?;
    Ok(seq)
}

/// Parks running turn `turn` after a run that opened requests: `waiting` while one is open,
/// else a continuation right away. The lease (if any) ends either way; a worker's last
/// accepted `seq` is kept as `acked`.
pub(super) fn park(ctx: &mut WriteCtx<'_>, turn: &TurnRow, acked: Option<i64>) -> Result<Parked> {
    if turn.state != TurnState::Running {
        return Ok(Parked::Gone);
    }
    ctx.fences.retain(|(t, _)| *t != turn.turn_id);
    let (state, resumes, parked) = if open_count(ctx.conn, &turn.turn_id)? > 0 {
        ("waiting", turn.resumes, Parked::Waiting)
    } else {
        ("queued", turn.resumes + 1, Parked::Continues)
    };
    let n = ctx.conn.execute(
        "UPDATE turns SET state = ?2, resumes = ?3, lease_token = NULL, lease_owner = NULL,
             lease_expires_at = NULL, worker_seq = COALESCE(?4, worker_seq)
         WHERE turn_id = ?1 AND state = 'running'",
        params![&turn.turn_id, state, resumes, acked],
    )?;
    if n != 1 {
        return Err(Error::Corrupt("turn changed state while parking".into()));
    }
    Ok(parked)
}

/// Records `answer` by `by` on request `request_id` of turn `turn_id` if it is open (first answer
/// wins); makes the turn a continuation once it waits for nothing more.
fn give(
    ctx: &mut WriteCtx<'_>,
    turn_id: &str,
    request_id: &str,
    answer: Answering,
    by: Option<String>,
) -> Result<std::result::Result<Given, InputRefusal>> {
    let Some(turn) = turn_by_id(ctx.conn, turn_id)? else {
        return Ok(Err(InputRefusal::TurnNotFound));
    };
    let Some(row) = ctx.conn.query_row(
        "SELECT request, answer, answered_by FROM input_requests WHERE turn_id = ?1 AND request_id = ?2",
        params![turn_id, request_id],
    )?
    else {
        return Ok(Err(InputRefusal::RequestNotFound));
    };
    let request: InputRequest = serde_json::from_str(&row.text(0)?)?;
    let answer = match answer {
        Answering::Given(body) => match body.answer_for(request.kind) {
            Ok(a) => a,
            Err(why) => return Ok(Err(InputRefusal::Invalid(why))),
        },
        Answering::TimedOut => RawJson::trusted(TIMED_OUT_ANSWER.to_string()),
        Answering::Call(answer) => answer,
    };
    if let Some(recorded) = row.opt_text(1)? {
        let recorded = RawJson::parse(&recorded)
            .ok_or_else(|| Error::Corrupt("a recorded answer is not JSON".into()))?;
        let recorded_by = row.opt_text(2)?;
        if recorded.same_value(&answer) && recorded_by == by {
            return Ok(Ok(Given::Repeat {
                state: turn.shown_state(),
            }));
        }
        return Ok(Err(InputRefusal::AlreadyGiven {
            answer: recorded,
            by: recorded_by,
        }));
    }
    if turn.state.is_terminal() {
        return Ok(Err(InputRefusal::TurnEnded(turn.state)));
    }
    let given = InputGiven {
        request_id: request_id.to_string(),
        by: by.clone(),
        answer: answer.clone(),
    };
    let seq = ctx.append(&turn.session_id, Some(turn_id), |_| {
        EventBody::InputGiven(given)
    })?;
    let n = ctx.conn.execute(
        "UPDATE input_requests SET answer = ?3, answered_by = ?4, answered_at = ?5, answered_seq = ?6
         WHERE turn_id = ?1 AND request_id = ?2 AND answer IS NULL",
        params![turn_id, request_id, answer.as_str(), &by, ctx.now, seq],
    )?;
    if n != 1 {
        return Err(Error::Corrupt("a request changed during its answer".into()));
    }
    let mut continues = false;
    let state = if turn.state == TurnState::Waiting {
        if open_count(ctx.conn, turn_id)? == 0 {
            let n = ctx.conn.execute(
                "UPDATE turns SET state = 'queued', resumes = resumes + 1
                 WHERE turn_id = ?1 AND state = 'waiting'",
                params![turn_id],
            )?;
            if n != 1 {
                return Err(Error::Corrupt("turn changed state during an answer".into()));
            }
            continues = true;
            TurnState::Running
        } else {
            TurnState::Waiting
        }
    } else {
        // Answered while the agent still runs the part that asked: it continues once parked.
        turn.shown_state()
    };
    Ok(Ok(Given::Recorded {
        state,
        session_id: turn.session_id,
        continues,
    }))
}

enum Answering {
    Given(InputAnswerRequest),
    TimedOut,
    /// A call's child ended (v1.3): its `{turn_id, state, text, error?}`.
    Call(RawJson),
}

/// Records `answer` by `by` (`turn:<child>`) on call `request_id` of turn `turn_id` (v1.3), if
/// it is open. Whether the turn continues now.
pub(super) fn give_call_answer(
    ctx: &mut WriteCtx<'_>,
    turn_id: &str,
    request_id: &str,
    answer: RawJson,
    by: String,
) -> Result<bool> {
    Ok(matches!(
        give(ctx, turn_id, request_id, Answering::Call(answer), Some(by))?,
        Ok(Given::Recorded {
            continues: true,
            ..
        })
    ))
}

/// A turn's progress so far and, for a worker continuing it, what it needs.
pub(super) fn continuation(conn: &dyn Sql, turn: &TurnRow, acked: i64) -> Result<Continuation> {
    let mut answers = Vec::new();
    for row in conn.query(
        "SELECT request_id, answer, answered_by FROM input_requests
         WHERE turn_id = ?1 AND answer IS NOT NULL ORDER BY answered_seq",
        params![&turn.turn_id],
    )? {
        answers.push(Answer {
            request_id: row.text(0)?,
            answer: RawJson::parse(&row.text(1)?)
                .ok_or_else(|| Error::Corrupt("a recorded answer is not JSON".into()))?,
            by: row.opt_text(2)?,
        });
    }
    let mut events = Vec::new();
    conn.for_each_event(
        "SELECT id, session_id, turn_id, ts, kind, data FROM events WHERE turn_id = ?1
         AND kind IN ('thinking', 'tool', 'response_delta', 'input_requested') ORDER BY id",
        params![&turn.turn_id],
        &mut |e| {
            events.push(match serde_json::from_str::<EventBody>(e.data)? {
                EventBody::Thinking { delta } => WorkerEvent::Thinking { delta },
                EventBody::ResponseDelta { delta } => WorkerEvent::Response { delta },
                EventBody::Tool(call) => WorkerEvent::Tool(call),
                EventBody::InputRequested(r) => WorkerEvent::InputRequested(r),
                _ => return Ok(()),
            });
            Ok(())
        },
    )?;
    Ok(Continuation {
        seq: acked + 1,
        answers,
        events,
    })
}

impl Journal {
    /// `POST /api/turns/{turn}/input`: records `body`'s answer by `by` (see [`give`]).
    pub async fn give_input(
        &self,
        turn_id: &str,
        body: InputAnswerRequest,
        by: Option<String>,
    ) -> Result<std::result::Result<Given, InputRefusal>> {
        let turn_id = turn_id.to_string();
        self.write(move |ctx| {
            let request_id = body.request_id.clone();
            give(ctx, &turn_id, &request_id, Answering::Given(body), by)
        })
        .await
    }

    /// Answers `{"timed_out": true}` (by nobody) every open request of a turn in flight whose
    /// time ran out by `now_ms`. Returns the sessions with a turn that continues now.
    pub async fn expire_inputs(&self, now_ms: i64) -> Result<Vec<String>> {
        const DUE: &str = "SELECT r.turn_id, r.request_id FROM input_requests r
             WHERE r.answer IS NULL AND r.closed_at IS NULL AND r.expires_at <= ?1
             ORDER BY r.expires_at LIMIT 256";
        // A read first: the usual answer is "none", and it costs the one writer nothing.
        if self
            .read(move |conn, _| Ok(conn.query(DUE, params![now_ms])?.is_empty()))
            .await?
        {
            return Ok(Vec::new());
        }
        self.write(move |ctx| {
            let mut woken = Vec::new();
            for row in ctx.conn.query(DUE, params![now_ms])? {
                let (turn_id, request_id) = (row.text(0)?, row.text(1)?);
                if let Ok(Given::Recorded {
                    session_id,
                    continues: true,
                    ..
                }) = give(ctx, &turn_id, &request_id, Answering::TimedOut, None)?
                {
                    woken.push(session_id);
                }
            }
            Ok(woken)
        })
        .await
    }

    /// Queues request `request` of running turn `turn_id` behind the turn's other writes.
    pub(crate) fn submit_input_request(
        &self,
        session_id: &str,
        turn_id: &str,
        fence: Option<&str>,
        request: InputRequest,
    ) -> tokio::sync::oneshot::Receiver<Result<i64>> {
        let session_id = session_id.to_string();
        let turn_id = turn_id.to_string();
        let fence = fence.map(str::to_string);
        let timeout_ms = i64::try_from(self.input_timeout().as_millis()).unwrap_or(i64::MAX);
        self.submit(move |ctx| {
            open_request(
                ctx,
                &session_id,
                &turn_id,
                fence.as_deref(),
                request,
                timeout_ms,
            )
        })
    }

    /// A turn's progress so far (text, thinking, tools, requests and answers), for an agent
    /// continuing it.
    pub async fn turn_progress(&self, turn: &TurnRow) -> Result<ActiveTurn> {
        let turn = turn.clone();
        self.read(move |conn, _| fold_turn(conn, &turn, i64::MAX))
            .await
    }

    /// Ends a turn nothing runs now (`queued`, a continuation, or `waiting`) in `state`, with
    /// the text its earlier runs journaled. `false` if it is no longer idle.
    pub async fn end_idle_turn(&self, turn_id: &str, state: TurnState) -> Result<bool> {
        let turn_id = turn_id.to_string();
        let ended = self
            .write(move |ctx| {
                let Some(turn) = turn_by_id(ctx.conn, &turn_id)? else {
                    return Err(Error::NotFound { what: "turn" });
                };
                if !matches!(turn.state, TurnState::Queued | TurnState::Waiting) {
                    return Ok(false);
                }
                let text = if turn.resumes > 0 || turn.state == TurnState::Waiting {
                    fold_turn(ctx.conn, &turn, i64::MAX)?.text
                } else {
                    String::new()
                };
                Ok(super::lifecycle::end_turn_in(
                    ctx,
                    &turn_id,
                    state,
                    text,
                    None,
                    &[TurnState::Queued, TurnState::Waiting],
                    Vec::new(),
                )?
                .is_some())
            })
            .await?;
        if ended {
            self.metrics().turns_ended.fetch_add(1, Ordering::Relaxed);
        }
        Ok(ended)
    }

    /// The session's turns in flight (queued, running or waiting) other than `except`, oldest
    /// first, for `on_busy: interrupt`.
    pub async fn turns_in_flight(&self, session_id: &str, except: &str) -> Result<Vec<TurnRow>> {
        let session_id = session_id.to_string();
        let except = except.to_string();
        self.read(move |conn, _| {
            super::rows::turns(
                conn,
                &format!(
                    "SELECT {} FROM turns WHERE session_id = ?1 AND turn_id <> ?2
                     AND state IN ('queued', 'running', 'waiting') ORDER BY queued_seq",
                    super::rows::TURN_COLUMNS
                ),
                params![&session_id, &except],
            )
        })
        .await
    }
}
