//! The journal's turn operations: accepting messages, the turn lifecycle, history, turn status
//! and recovery after a crash.

use std::sync::atomic::Ordering;

use turnstream_protocol::{
    ActiveTurn, Attachment, Cursor, EventBody, Message, MessageStatus, PostMessageResponse, Role,
    TurnInfo, TurnState, Usage,
};

use super::sql::{params, Row, Sql};
use super::{Journal, WriteCtx};
use crate::error::{Error, Result};

/// The result of accepting a message.
#[derive(Debug, Clone)]
pub struct Accepted {
    pub response: PostMessageResponse,
    /// False when this was an idempotent retry of an earlier request.
    pub created: bool,
    pub session_id: String,
}

/// A user message to accept.
#[derive(Debug, Clone, Default)]
pub struct NewMessage {
    pub content: String,
    pub attachments: Vec<Attachment>,
    pub client_message_id: Option<String>,
    pub author: Option<String>,
    /// The message it follows (v1.2): `None`, the active leaf; `Some(None)`, none (a first
    /// message); `Some(Some(id))`, that message (an edit of its child).
    pub parent: Option<Option<String>>,
}

/// Refuses a new turn for `session` as `admission` says.
pub(super) fn admit(conn: &dyn Sql, session: &str, admission: Admission) -> Result<()> {
    let active = conn
        .query_int(
            "SELECT COUNT(*) FROM turns WHERE session_id = ?1 AND state IN ('queued', 'running', 'waiting')",
            params![session],
        )?
        .unwrap_or(0);
    if admission.reject_if_busy && active > 0 {
        return Err(Error::SessionBusy);
    }
    if active as usize >= admission.max_active_turns {
        return Err(Error::TooManyActiveTurns(admission.max_active_turns));
    }
    Ok(())
}

/// When a session takes a new message.
#[derive(Debug, Clone, Copy)]
pub struct Admission {
    /// Most turns in flight (queued, running or waiting) per session.
    pub max_active_turns: usize,
    /// Refuse (`session_busy`) while any turn of the session is in flight (`on_busy: reject`).
    pub reject_if_busy: bool,
}

impl Admission {
    /// v1's rule: up to `max_active_turns` turns in flight, queued one after the other.
    pub fn enqueue(max_active_turns: usize) -> Admission {
        Admission {
            max_active_turns,
            reject_if_busy: false,
        }
    }
}

/// A turn as the projection records it.
#[derive(Debug, Clone)]
pub struct TurnRow {
    pub turn_id: String,
    pub session_id: String,
    pub user_message_id: String,
    pub state: TurnState,
    pub created_at: i64,
    pub started_at: Option<i64>,
    pub ended_at: Option<i64>,
    pub error: Option<String>,
    pub message_id: Option<String>,
    /// How often the turn continued after waiting for input (v1.2): a `queued` turn with
    /// `resumes > 0` is a continuation waiting for its runner.
    pub resumes: i64,
    /// The id of the reply the turn writes when it ends, drawn when it was queued (v1.2; `None`
    /// only for a turn queued by a server before it).
    pub reply_id: Option<String>,
    /// How many requests for input the turn opened (v1.2).
    pub asked: i64,
}

impl TurnRow {
    /// The state clients see: a continuation waiting for its runner is `running` (it started
    /// long ago, and its answers are in).
    pub fn shown_state(&self) -> TurnState {
        match self.state {
            TurnState::Queued if self.resumes > 0 => TurnState::Running,
            s => s,
        }
    }
}

/// Characters of `[0-9a-z]` after the prefix of a server-made id: 20 of them carry about 103
/// random bits, so knowing one id (a turn id is handed to every reader of a session) never lets
/// anyone guess another session's ids.
pub(crate) const ID_RANDOM_CHARS: usize = 20;

/// A new turn or message id, `{prefix}_` + [`ID_RANDOM_CHARS`] random characters of `[0-9a-z]`.
pub(super) fn new_id(prefix: &str) -> String {
    format!("{prefix}_{}", crate::ids::random_chars(ID_RANDOM_CHARS))
}

fn parse_state(s: &str) -> Result<TurnState> {
    TurnState::parse(s).ok_or_else(|| Error::Corrupt(format!("unknown turn state {s:?}")))
}

pub(super) const MESSAGE_COLUMNS: &str =
    "message_id, client_message_id, role, content, status, turn_id, created_at, event_seq, author, attachments, parent_id, requests";

/// The `attachments` column: a JSON array, NULL for none (every message before v1.2, and most
/// after), so a message without attachments costs nothing more to store.
fn attachments_column(attachments: &[Attachment]) -> Result<Option<String>> {
    if attachments.is_empty() {
        return Ok(None);
    }
    Ok(Some(serde_json::to_string(attachments)?))
}

fn attachments_from_column(column: Option<String>) -> Result<Vec<Attachment>> {
    match column {
        None => Ok(Vec::new()),
        Some(json) => serde_json::from_str(&json)
            .map_err(|e| Error::Corrupt(format!("a message's attachments: {e}"))),
    }
}

pub(super) fn message_from_row(r: &Row, epoch: &str) -> Result<Message> {
    let role = r.text(2)?;
    let status = r.text(4)?;
    Ok(Message {
        message_id: r.text(0)?,
        client_message_id: r.opt_text(1)?,
        role: if role == "assistant" {
            Role::Assistant
        } else {
            Role::User
        },
        content: r.text(3)?,
        status: MessageStatus::parse(&status).unwrap_or(MessageStatus::Interrupted),
        turn_id: r.opt_text(5)?,
        created_at: r.int(6)?,
        event_id: Cursor::new(epoch, r.int(7)?).to_string(),
        author: r.opt_text(8)?,
        attachments: attachments_from_column(r.opt_text(9)?)?,
        parent_id: r.opt_text(10)?,
        siblings: None,
        requests: match r.opt_text(11)? {
            None => Vec::new(),
            Some(json) => serde_json::from_str(&json)
                .map_err(|e| Error::Corrupt(format!("a message's requests: {e}")))?,
        },
    })
}

/// Messages a query answers (its columns are [`MESSAGE_COLUMNS`]).
pub(super) fn messages(
    conn: &dyn Sql,
    epoch: &str,
    sql: &str,
    params: &[super::sql::Param<'_>],
) -> Result<Vec<Message>> {
    conn.query(sql, params)?
        .iter()
        .map(|r| message_from_row(r, epoch))
        .collect()
}

pub(super) fn message_by_id(
    conn: &dyn Sql,
    epoch: &str,
    message_id: &str,
) -> Result<Option<Message>> {
    Ok(messages(
        conn,
        epoch,
        &format!("SELECT {MESSAGE_COLUMNS} FROM messages WHERE message_id = ?1"),
        params![message_id],
    )?
    .into_iter()
    .next())
}

pub(super) const TURN_COLUMNS: &str =
    "turn_id, session_id, user_message_id, state, created_at, started_at, ended_at, error, message_id, resumes, reply_id, asked";

pub(super) fn turn_from_row(r: &Row) -> Result<TurnRow> {
    Ok(TurnRow {
        turn_id: r.text(0)?,
        session_id: r.text(1)?,
        user_message_id: r.text(2)?,
        state: parse_state(&r.text(3)?)?,
        created_at: r.int(4)?,
        started_at: r.opt_int(5)?,
        ended_at: r.opt_int(6)?,
        error: r.opt_text(7)?,
        message_id: r.opt_text(8)?,
        resumes: r.int(9)?,
        reply_id: r.opt_text(10)?,
        asked: r.int(11)?,
    })
}

/// Turns a query answers (its columns are [`TURN_COLUMNS`]).
pub(super) fn turns(
    conn: &dyn Sql,
    sql: &str,
    params: &[super::sql::Param<'_>],
) -> Result<Vec<TurnRow>> {
    conn.query(sql, params)?.iter().map(turn_from_row).collect()
}

pub(super) fn turn_by_id(conn: &dyn Sql, turn_id: &str) -> Result<Option<TurnRow>> {
    Ok(turns(
        conn,
        &format!("SELECT {TURN_COLUMNS} FROM turns WHERE turn_id = ?1"),
        params![turn_id],
    )?
    .into_iter()
    .next())
}

/// Folds a turn's journaled events up to `upto` (inclusive) into its progress.
pub(super) fn fold_turn(conn: &dyn Sql, turn: &TurnRow, upto: i64) -> Result<ActiveTurn> {
    let mut progress = ActiveTurn::new(&turn.turn_id, &turn.session_id);
    // Where the turn writes, from the projection: its `turn_queued` (left out of the fold) says
    // the same, and a turn queued before v1.2 has the reply id its migration gave it.
    progress.reply_id.clone_from(&turn.reply_id);
    progress.parent_id = Some(turn.user_message_id.clone());
    conn.for_each_event(
        "SELECT id, session_id, turn_id, ts, kind, data FROM events WHERE turn_id = ?1 AND id <= ?2
         AND kind IN ('turn_started', 'thinking', 'tool', 'response_delta', 'input_requested', 'input_given')
         ORDER BY id",
        params![&turn.turn_id, upto],
        &mut |e| {
            let body: EventBody = serde_json::from_str(e.data)?;
            progress.apply(&body);
            Ok(())
        },
    )?;
    Ok(progress)
}

impl Journal {
    /// Accepts a user message: one transaction writes it to history, creates its turn `queued`
    /// and journals `message_received` and `turn_queued`. Idempotent on `client_message_id`.
    pub async fn accept_message(
        &self,
        session_id: &str,
        message: NewMessage,
        admission: Admission,
    ) -> Result<Accepted> {
        let session_id = session_id.to_string();
        let NewMessage {
            content,
            attachments,
            client_message_id: cmid,
            author,
            parent,
        } = message;
        let stored_attachments = attachments_column(&attachments)?;
        self.write(move |ctx| {
            if let Some(cmid) = &cmid {
                let existing = ctx.conn.query_row(
                    "SELECT message_id, content, turn_id, event_seq, attachments FROM messages
                     WHERE session_id = ?1 AND client_message_id = ?2",
                    params![&session_id, cmid],
                )?;
                if let Some(row) = existing {
                    let (message_id, old_content, turn_id, seq) =
                        (row.text(0)?, row.text(1)?, row.opt_text(2)?, row.int(3)?);
                    // Written by this code from the same type: equal attachments are equal text.
                    if old_content != content || row.opt_text(4)? != stored_attachments {
                        return Err(Error::ClientMessageConflict(cmid.clone()));
                    }
                    return Ok(Accepted {
                        response: PostMessageResponse {
                            message_id,
                            client_message_id: Some(cmid.clone()),
                            turn_id: turn_id.unwrap_or_default(),
                            event_id: ctx.cursor(seq),
                        },
                        created: false,
                        session_id: session_id.clone(),
                    });
                }
            }
            admit(ctx.conn, &session_id, admission)?;
            let (active, recorded) = super::leaves::leaf_and_record(ctx.conn, &session_id)?;
            let parent = match &parent {
                None => active.clone(),
                Some(None) => None,
                Some(Some(id)) => {
                    if !super::leaves::in_session(ctx.conn, &session_id, id)? {
                        return Err(Error::NotFound { what: "message" });
                    }
                    Some(id.clone())
                }
            };
            let message_id = new_id("msg");
            let turn_id = new_id("turn");
            let reply_id = new_id("msg");
            let now = ctx.now;
            let mut message = None;
            let seq = ctx.append(&session_id, Some(&turn_id), |cursor| {
                let m = Message {
                    message_id: message_id.clone(),
                    client_message_id: cmid.clone(),
                    role: Role::User,
                    content: content.clone(),
                    status: MessageStatus::Complete,
                    turn_id: Some(turn_id.clone()),
                    created_at: now,
                    event_id: cursor.to_string(),
                    author: author.clone(),
                    attachments: attachments.clone(),
                    parent_id: parent.clone(),
                    siblings: None,
                    requests: Vec::new(),
                };
                message = Some(m.clone());
                EventBody::MessageReceived { message: m }
            })?;
            ctx.conn.execute(
                "INSERT INTO messages(message_id, session_id, client_message_id, role, content, status, turn_id, created_at, event_seq, author, position, attachments, parent_id)
                 VALUES (?1, ?2, ?3, 'user', ?4, 'complete', ?5, ?6, ?7, ?8, 2 * CAST(?7 AS BIGINT), ?9, ?10)",
                params![&message_id, &session_id, &cmid, &content, &turn_id, now, seq, &author, &stored_attachments, &parent],
            )?;
            let (reply, asked) = (reply_id.clone(), message_id.clone());
            let queued_seq = ctx.append(&session_id, Some(&turn_id), move |_| EventBody::TurnQueued {
                reply_id: Some(reply),
                parent_id: Some(asked),
            })?;
            ctx.conn.execute(
                "INSERT INTO turns(turn_id, session_id, user_message_id, state, created_at, queued_seq, reply_id)
                 VALUES (?1, ?2, ?3, 'queued', ?4, ?5, ?6)",
                params![&turn_id, &session_id, &message_id, now, queued_seq, &reply_id],
            )?;
            // Following anything but the active leaf is an edit: the session branches, and from
            // then on records its leaf. A session that never branched writes nothing for it.
            if recorded || parent != active {
                super::leaves::set_leaf(ctx.conn, &session_id, &reply_id, true)?;
            }
            Ok(Accepted {
                response: PostMessageResponse {
                    message_id,
                    client_message_id: cmid.clone(),
                    turn_id,
                    event_id: ctx.cursor(seq),
                },
                created: true,
                session_id: session_id.clone(),
            })
        })
        .await
    }

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
        self.write(move |ctx| {
            let Some(turn) = turn_by_id(ctx.conn, &turn_id)? else {
                return Ok(false);
            };
            if turn.state != TurnState::Queued {
                return Ok(false);
            }
            if turn.resumes > 0 {
                let n = ctx.conn.execute(
                    "UPDATE turns SET state = 'running' WHERE turn_id = ?1 AND state = 'queued'",
                    params![&turn_id],
                )?;
                return Ok(n == 1);
            }
            let seq = ctx.append(&turn.session_id, Some(&turn_id), |_| {
                EventBody::TurnStarted {}
            })?;
            let n = ctx.conn.execute(
                "UPDATE turns SET state = 'running', started_at = ?2, started_seq = ?3
                 WHERE turn_id = ?1 AND state = 'queued'",
                params![&turn_id, ctx.now, seq],
            )?;
            if n != 1 {
                return Err(Error::Corrupt("turn changed state during start".into()));
            }
            Ok(true)
        })
        .await
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
    /// assistant message (with the text so far) and the one `turn_ended` event. Returns the
    /// message, or `None` if the turn had already left `from` (someone else ended it).
    pub async fn end_turn(
        &self,
        turn_id: &str,
        state: TurnState,
        text: String,
        error: Option<String>,
        from: &'static [TurnState],
    ) -> Result<Option<Message>> {
        let turn_id = turn_id.to_string();
        let ended = self
            .write(move |ctx| end_turn_in(ctx, &turn_id, state, text, error, from))
            .await?;
        if ended.is_some() {
            self.metrics().turns_ended.fetch_add(1, Ordering::Relaxed);
        }
        Ok(ended)
    }

    pub async fn turn(&self, turn_id: &str) -> Result<Option<TurnRow>> {
        let turn_id = turn_id.to_string();
        self.read(move |conn, _| turn_by_id(conn, &turn_id)).await
    }

    /// `GET /api/turns/{turn}`: the projection, with the text so far folded from the journal.
    pub async fn turn_info(&self, turn_id: &str) -> Result<Option<TurnInfo>> {
        let turn_id = turn_id.to_string();
        self.read(move |conn, epoch| {
            let Some(turn) = turn_by_id(conn, &turn_id)? else {
                return Ok(None);
            };
            let progress = fold_turn(conn, &turn, i64::MAX)?;
            let message = match &turn.message_id {
                Some(id) => message_by_id(conn, epoch, id)?,
                None => None,
            };
            let text = message
                .as_ref()
                .map(|m| m.content.clone())
                .unwrap_or(progress.text);
            let usage = match conn.query_row(
                "SELECT usage FROM turns WHERE turn_id = ?1",
                params![&turn_id],
            )? {
                Some(row) => row.opt_text(0)?,
                None => None,
            };
            // Written by this server from the same type; an unreadable value is left out.
            let usage = usage.and_then(|u| serde_json::from_str::<Usage>(&u).ok());
            Ok(Some(TurnInfo {
                state: turn.shown_state(),
                turn_id: turn.turn_id,
                session_id: turn.session_id,
                created_at: turn.created_at,
                started_at: turn.started_at,
                ended_at: turn.ended_at,
                text,
                thinking: progress.thinking,
                tools: progress.tools,
                message,
                error: turn.error,
                usage,
                requests: progress.requests,
                reply_id: progress.reply_id,
                parent_id: progress.parent_id,
            }))
        })
        .await
    }

    /// After a crash: every turn left `running` ends `interrupted` with its partial text (a
    /// worker's turn only once its lease expires: see [`Journal::expire_leases`]), unless
    /// its `turn_ended` is already journaled, in which case only the projection is repaired.
    /// Returns how many turns were interrupted and how many repaired.
    pub async fn recover_after_crash(&self) -> Result<(usize, usize)> {
        let (interrupted, repaired) = self.write(|ctx| {
            let running = ctx.conn.query_texts(
                "SELECT turn_id FROM turns WHERE state = 'running' AND lease_token IS NULL",
                &[],
            )?;
            let (mut interrupted, mut repaired) = (0, 0);
            for turn_id in running {
                let ended = ctx.conn.query_row(
                    "SELECT id, ts, data FROM events WHERE turn_id = ?1 AND kind = 'turn_ended' ORDER BY id LIMIT 1",
                    params![&turn_id],
                )?;
                if let Some(row) = ended {
                    let (seq, ts, data) = (row.int(0)?, row.int(1)?, row.text(2)?);
                    let (state, message, error) = match serde_json::from_str::<EventBody>(&data)? {
                        EventBody::TurnEnded { state, message, error } => (state, message, error),
                        _ => return Err(Error::Corrupt("turn_ended row of another kind".into())),
                    };
                    let message_id = message.map(|m| m.message_id);
                    ctx.conn.execute(
                        "UPDATE turns SET state = ?2, ended_at = ?3, ended_seq = ?4, error = ?5, message_id = ?6 WHERE turn_id = ?1",
                        params![&turn_id, state.as_str(), ts, seq, &error, &message_id],
                    )?;
                    repaired += 1;
                } else {
                    let Some(turn) = turn_by_id(ctx.conn, &turn_id)? else { continue };
                    if super::requests::requeue_untouched(ctx, &turn.turn_id, turn.resumes)? {
                        continue;
                    }
                    let progress = fold_turn(ctx.conn, &turn, i64::MAX)?;
                    end_turn_in(ctx, &turn_id, TurnState::Interrupted, progress.text, None, &[TurnState::Running])?;
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

pub(super) fn end_turn_in(
    ctx: &mut WriteCtx<'_>,
    turn_id: &str,
    state: TurnState,
    text: String,
    error: Option<String>,
    from: &[TurnState],
) -> Result<Option<Message>> {
    let Some(turn) = turn_by_id(ctx.conn, turn_id)? else {
        return Err(Error::NotFound { what: "turn" });
    };
    if !from.contains(&turn.state) {
        return Ok(None);
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
    ctx.conn.execute(
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
    Ok(message)
}

impl Journal {
    /// Readiness: the database answers and is at this build's schema version.
    pub async fn ready(&self) -> Result<()> {
        self.read(|conn, _| {
            let v = conn.schema_version()?;
            if v != super::schema_version(conn.backend()) {
                return Err(Error::Corrupt(format!("schema version {v}")));
            }
            Ok(())
        })
        .await
    }
}
