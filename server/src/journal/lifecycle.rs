//! A turn's lifecycle in the journal: the next queued turn, its start, its progress events,
//! its end (the terminal state, the assistant message and `turn_ended` in one transaction, with
//! the answer to its caller for a called turn, v1.3), and the turns a crash left running.

use std::sync::atomic::Ordering;

use turnstream_protocol::{EventBody, Message, MessageStatus, Role, TurnState, Usage};

use super::accept::new_id;
use super::rows::{fold_turn, message_by_id, turn_by_id, turns, TurnRow, TURN_COLUMNS};
use super::sql::params;
use super::{Journal, WriteCtx};
use crate::error::{Error, Result};

impl Journal {
    /// The session's next turn to run, with its user message: its oldest turn in flight, if that
    /// one is queued (a waiting turn holds the turns after it back: FIFO).
    pub async fn next_queued_turn(&self, session_id: &str) -> Result<Option<(TurnRow, Message)>> {
        let session_id = session_id.to_string();
        self.read(move |conn, epoch| {
            let Some(turn) = turns(
                conn,
                &format!(
                    "SELECT {TURN_COLUMNS} FROM turns WHERE session_id = ?1 AND state IN ('queued', 'waiting')
                     ORDER BY queued_seq LIMIT 1"
                ),
                params![&session_id],
            )?
            .into_iter()
            .next() else {
                return Ok(None);
            };
            if turn.state != TurnState::Queued {
                return Ok(None);
            }
            let message = message_by_id(conn, epoch, &turn.user_message_id)?
                .ok_or_else(|| Error::Corrupt("a turn without its message".into()))?;
            Ok(Some((turn, message)))
        })
        .await
    }

    /// Sessions that have queued turns (to run after a restart).
    pub async fn sessions_with_queued_turns(&self) -> Result<Vec<String>> {
        self.read(|conn, _| {
            conn.query_texts(
                "SELECT DISTINCT session_id FROM turns WHERE state = 'queued'
                 AND NOT EXISTS (SELECT 1 FROM turns w WHERE w.session_id = turns.session_id
                     AND w.state = 'waiting' AND w.queued_seq < turns.queued_seq)",
                &[],
            )
        })
        .await
    }

    /// Moves a queued turn to running and journals `turn_started` (not again for a
    /// continuation: it started before it waited). False if it is no longer queued.
    pub async fn start_turn(&self, turn_id: &str) -> Result<bool> {
        let turn_id = turn_id.to_string();
        self.write(move |ctx| start_turn_in(ctx, &turn_id).map(|t| t.is_some()))
            .await
    }

    /// Queues a turn's start with its first events after it, in one step (one commit): a turn
    /// whose runner took it while it was still queued, so that its start costs no commit of
    /// its own. False, with nothing written, if the turn is no longer queued (cancelled
    /// meanwhile); `refused` is then cancelled as soon as that is known, before the commit.
    pub(crate) fn submit_turn_start(
        &self,
        turn_id: &str,
        first: Vec<EventBody>,
        refused: tokio_util::sync::CancellationToken,
    ) -> tokio::sync::oneshot::Receiver<Result<bool>> {
        let turn_id = turn_id.to_string();
        self.submit(move |ctx| {
            let Some(turn) = start_turn_in(ctx, &turn_id)? else {
                refused.cancel();
                return Ok(false);
            };
            for body in first {
                ctx.append(&turn.session_id, Some(&turn_id), |_| body)?;
            }
            Ok(true)
        })
    }

    /// Queues one progress event of a running turn (thinking, tool, response delta).
    pub(crate) fn submit_turn_event(
        &self,
        session_id: &str,
        turn_id: &str,
        body: EventBody,
    ) -> tokio::sync::oneshot::Receiver<Result<i64>> {
        let session_id = session_id.to_string();
        let turn_id = turn_id.to_string();
        // One INSERT: a statement is atomic by itself, so it needs no savepoint of its own.
        self.submit_single_statement(move |ctx| ctx.append(&session_id, Some(&turn_id), |_| body))
    }

    /// [`Journal::submit_turn_event`] for a turn whose start is queued and not yet known
    /// committed: the event is journaled only if the turn runs (a start refused, or lost with
    /// its batch, leaves no event behind it). Returns 0, with nothing written, if it does not.
    pub(crate) fn submit_started_turn_event(
        &self,
        session_id: &str,
        turn_id: &str,
        body: EventBody,
    ) -> tokio::sync::oneshot::Receiver<Result<i64>> {
        let session_id = session_id.to_string();
        let turn_id = turn_id.to_string();
        // A read, then one INSERT: no savepoint needed.
        self.submit_single_statement(move |ctx| {
            let running = ctx
                .conn
                .query_row(
                    "SELECT 1 FROM turns WHERE turn_id = ?1 AND state = 'running'",
                    params![&turn_id],
                )?
                .is_some();
            if !running {
                return Ok(0);
            }
            ctx.append(&session_id, Some(&turn_id), |_| body)
        })
    }

    /// Queues the token usage an agent reported for a turn (kept on the turns projection, shown
    /// by `GET /api/turns`; not an event: no client renders it live).
    pub(crate) fn submit_turn_usage(
        &self,
        turn_id: &str,
        usage: Usage,
    ) -> tokio::sync::oneshot::Receiver<Result<i64>> {
        let turn_id = turn_id.to_string();
        self.submit_single_statement(move |ctx| {
            let json = serde_json::to_string(&usage)?;
            ctx.conn.execute(
                "UPDATE turns SET usage = ?2 WHERE turn_id = ?1",
                params![&turn_id, &json],
            )?;
            Ok(0)
        })
    }

    /// Ends a turn, if it is in one of `from`: in one transaction, the terminal state, the
    /// assistant message (with the text so far) and the one `turn_ended` event, after the
    /// turn's `tail` (its last events, not yet journaled: the runner's last merged deltas, the
    /// tool calls it marks failed), so a short turn's end costs no commit of its own. Returns
    /// the message, or `None` if the turn had already left `from` (someone else ended it; the
    /// tail is then dropped with the end).
    pub async fn end_turn(
        &self,
        turn_id: &str,
        state: TurnState,
        text: String,
        error: Option<String>,
        from: &'static [TurnState],
        tail: Vec<EventBody>,
    ) -> Result<Option<Message>> {
        let turn_id = turn_id.to_string();
        self.write_end(move |ctx| end_turn_in(ctx, &turn_id, state, text, error, from, tail))
            .await
    }

    /// Runs `end`, a write that ends a turn or finds it ended already (`None`), and counts the
    /// turn ended if it did.
    pub(super) async fn write_end(
        &self,
        end: impl FnOnce(&mut WriteCtx<'_>) -> Result<Option<Message>> + Send + 'static,
    ) -> Result<Option<Message>> {
        let ended = self.write(end).await?;
        if ended.is_some() {
            self.metrics().turns_ended.fetch_add(1, Ordering::Relaxed);
        }
        Ok(ended)
    }

    /// [`Journal::end_turn`] of a turn whose runner took it while it was queued and never
    /// journaled its start: its start, its `tail` and its end in one step. `None`, with nothing
    /// written, if the turn is no longer queued (cancelled meanwhile: that ended it).
    pub async fn start_and_end_turn(
        &self,
        turn_id: &str,
        state: TurnState,
        text: String,
        error: Option<String>,
        tail: Vec<EventBody>,
    ) -> Result<Option<Message>> {
        self.end_running_turn_if(turn_id, state, text, error, tail, |ctx, turn| {
            Ok(start_turn_in(ctx, turn)?.is_some())
        })
        .await
    }

    /// [`Journal::end_turn`] of a running turn, in the step where `first` (given the turn id)
    /// says it may end: `None`, with nothing written, where `first` says no or the turn is no
    /// longer running.
    pub(super) async fn end_running_turn_if(
        &self,
        turn_id: &str,
        state: TurnState,
        text: String,
        error: Option<String>,
        tail: Vec<EventBody>,
        first: impl FnOnce(&mut WriteCtx<'_>, &str) -> Result<bool> + Send + 'static,
    ) -> Result<Option<Message>> {
        let turn_id = turn_id.to_string();
        self.write_end(move |ctx| {
            if !first(ctx, &turn_id)? {
                return Ok(None);
            }
            end_turn_in(
                ctx,
                &turn_id,
                state,
                text,
                error,
                &[TurnState::Running],
                tail,
            )
        })
        .await
    }

    /// After a crash: every turn left `running` ends `interrupted` with its partial text (a
    /// worker's turn only once its lease expires: see [`Journal::expire_leases`]), unless
    /// its `turn_ended` is already journaled, in which case only the projection is repaired.
    /// Returns how many turns were interrupted and how many repaired.
    pub async fn recover_after_crash(&self) -> Result<(usize, usize)> {
        let (interrupted, repaired) = self
            .write(|ctx| {
                let running = ctx.conn.query_texts(
                    "SELECT turn_id FROM turns WHERE state = 'running' AND lease_token IS NULL",
                    &[],
                )?;
                let (mut interrupted, mut repaired) = (0, 0);
                for turn_id in running {
                    if repair_from_journaled_end(ctx, &turn_id)? {
                        repaired += 1;
                    } else {
                        let Some(turn) = turn_by_id(ctx.conn, &turn_id)? else {
                            continue;
                        };
                        if super::requests::requeue_untouched(ctx, &turn.turn_id, turn.resumes)? {
                            continue;
                        }
                        let progress = fold_turn(ctx.conn, &turn, i64::MAX)?;
                        end_turn_in(
                            ctx,
                            &turn_id,
                            TurnState::Interrupted,
                            progress.text,
                            None,
                            &[TurnState::Running],
                            Vec::new(),
                        )?;
                        interrupted += 1;
                    }
                }
                Ok((interrupted, repaired))
            })
            .await?;
        self.metrics()
            .turns_ended
            .fetch_add(interrupted as u64, Ordering::Relaxed);
        Ok((interrupted, repaired))
    }
}

/// A turn left `running` whose `turn_ended` is journaled already (its row is behind its journal:
/// a journal written by an earlier version, or a write that failed between the two): the row
/// takes the state, end and message of that event, and nothing is journaled. Whether it was
/// such a turn. Recovery runs it for every turn left running, and the lease sweep before it
/// ends a turn whose lease ran out, so such a turn never ends twice.
pub(crate) fn repair_from_journaled_end(ctx: &mut WriteCtx<'_>, turn_id: &str) -> Result<bool> {
    let ended = ctx.conn.query_row(
        "SELECT id, ts, data FROM events WHERE turn_id = ?1 AND kind = 'turn_ended' ORDER BY id LIMIT 1",
        params![turn_id],
    )?;
    let Some(row) = ended else {
        return Ok(false);
    };
    let (seq, ts, data) = (row.int(0)?, row.int(1)?, row.text(2)?);
    let (state, message, error) = match serde_json::from_str::<EventBody>(&data)? {
        EventBody::TurnEnded {
            state,
            message,
            error,
        } => (state, message, error),
        _ => return Err(Error::Corrupt("turn_ended row of another kind".into())),
    };
    let message_id = message.map(|m| m.message_id);
    ctx.conn.execute(
        "UPDATE turns SET state = ?2, ended_at = ?3, ended_seq = ?4, error = ?5, message_id = ?6 WHERE turn_id = ?1",
        params![turn_id, state.as_str(), ts, seq, &error, &message_id],
    )?;
    Ok(true)
}

/// Moves a queued turn to running and journals `turn_started` (not again for a continuation:
/// it started before it waited). The turn as it was, or `None` if it is no longer queued.
fn start_turn_in(ctx: &mut WriteCtx<'_>, turn_id: &str) -> Result<Option<TurnRow>> {
    let Some(turn) = turn_by_id(ctx.conn, turn_id)? else {
        return Ok(None);
    };
    if turn.state != TurnState::Queued {
        return Ok(None);
    }
    if turn.resumes > 0 {
        let n = ctx.conn.execute(
            "UPDATE turns SET state = 'running' WHERE turn_id = ?1 AND state = 'queued'",
            params![turn_id],
        )?;
        return Ok((n == 1).then_some(turn));
    }
    let seq = ctx.append(&turn.session_id, Some(turn_id), |_| {
        EventBody::TurnStarted {}
    })?;
    let n = ctx.conn.execute(
        "UPDATE turns SET state = 'running', started_at = ?2, started_seq = ?3
         WHERE turn_id = ?1 AND state = 'queued'",
        params![turn_id, ctx.now, seq],
    )?;
    if n != 1 {
        return Err(Error::Corrupt("turn changed state during start".into()));
    }
    Ok(Some(turn))
}

pub(super) fn end_turn_in(
    ctx: &mut WriteCtx<'_>,
    turn_id: &str,
    state: TurnState,
    text: String,
    error: Option<String>,
    from: &[TurnState],
    tail: Vec<EventBody>,
) -> Result<Option<Message>> {
    let Some(turn) = turn_by_id(ctx.conn, turn_id)? else {
        return Err(Error::NotFound { what: "turn" });
    };
    if !from.contains(&turn.state) {
        return Ok(None);
    }
    // The turn's last events go in the same step as its end: both land, or neither does.
    for body in tail {
        ctx.append(&turn.session_id, Some(turn_id), |_| body)?;
    }
    // No lease holds an ended turn, whatever was found earlier in this batch.
    ctx.fences.retain(|(t, _)| t != turn_id);
    let message_id = turn.reply_id.clone().unwrap_or_else(|| new_id("msg"));
    // A turn that asked nothing (nearly all) costs its end no extra statement.
    let requests = if turn.asked > 0 {
        super::requests::close_requests(ctx, turn_id)?;
        super::requests::requests_of(ctx.conn, turn_id)?
    } else {
        Vec::new()
    };
    let stored_requests = if requests.is_empty() {
        None
    } else {
        Some(serde_json::to_string(&requests)?)
    };
    let now = ctx.now;
    let mut message = None;
    let seq = ctx.append(&turn.session_id, Some(turn_id), |cursor| {
        let m = Message {
            message_id: message_id.clone(),
            client_message_id: None,
            role: Role::Assistant,
            content: text.clone(),
            status: MessageStatus::for_terminal(state),
            turn_id: Some(turn_id.to_string()),
            created_at: now,
            event_id: cursor.to_string(),
            author: None,
            attachments: Vec::new(),
            parent_id: Some(turn.user_message_id.clone()),
            siblings: None,
            requests: requests.clone(),
            called_by: None,
        };
        message = Some(m.clone());
        EventBody::TurnEnded {
            state,
            message: Some(m),
            error: error.clone(),
        }
    })?;
    let states: Vec<&str> = from.iter().map(|s| s.as_str()).collect();
    let n = ctx.conn.execute(
        &format!(
            "UPDATE turns SET state = ?2, ended_at = ?3, ended_seq = ?4, error = ?5, message_id = ?6
             WHERE turn_id = ?1 AND state IN ({})",
            states
                .iter()
                .map(|s| format!("'{s}'"))
                .collect::<Vec<_>>()
                .join(",")
        ),
        params![turn_id, state.as_str(), now, seq, &error, &message_id],
    )?;
    if n != 1 {
        return Err(Error::Corrupt("turn changed state during end".into()));
    }
    // The reply's new row: sent with the commit (or what follows).
    ctx.conn.execute_unanswered(
        "INSERT INTO messages(message_id, session_id, client_message_id, role, content, status, turn_id, created_at, event_seq, position, parent_id, requests)
         VALUES (?1, ?2, NULL, 'assistant', ?3, ?4, ?5, ?6, ?7,
                 COALESCE((SELECT 2 * event_seq + 1 FROM messages WHERE message_id = ?8), 2 * CAST(?7 AS BIGINT) + 1), ?8, ?9)",
        params![
            &message_id,
            &turn.session_id,
            &text,
            MessageStatus::for_terminal(state).as_str(),
            turn_id,
            now,
            seq,
            &turn.user_message_id,
            &stored_requests
        ],
    )?;
    // A called turn's end answers its caller in the same transaction (v1.3): every way a turn
    // ends comes through here, so none can leave a caller waiting.
    super::calls::answer_caller(ctx, &turn, state, &text, error.as_deref())?;
    Ok(message)
}
