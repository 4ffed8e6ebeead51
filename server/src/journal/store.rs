//! The journal's operations: accepting messages, the turn lifecycle, stream reads (validation,
//! snapshot, replay), history, recovery after a crash, and retention.

use std::sync::Arc;

use rusqlite::{params, params_from_iter, Connection, OptionalExtension};
use turnstream_protocol::{
    sse, ActiveTurn, Cursor, EventBody, HistoryResponse, Message, MessageStatus,
    PostMessageResponse, ResyncReason, Role, Snapshot, TurnInfo, TurnState,
};

use super::{event_json, Journal, WriteCtx};
use crate::error::{Error, Result};
use crate::hub::Frame;

/// The result of accepting a message.
#[derive(Debug, Clone)]
pub struct Accepted {
    pub response: PostMessageResponse,
    /// False when this was an idempotent retry of an earlier request.
    pub created: bool,
    pub session_id: String,
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
}

/// Journal events after a position, encoded as frames.
#[derive(Debug)]
pub struct Page {
    pub frames: Vec<Arc<Frame>>,
    /// The sequence of the last event read, or the position read from if none.
    pub last_seq: i64,
    /// Whether the page reached the head as it was when read.
    pub complete: bool,
}

/// Where a stream starts: its snapshot (if asked for) and the first page of replay.
#[derive(Debug)]
pub struct StreamStart {
    pub snapshot: Option<Snapshot>,
    pub page: Page,
    pub resume_seq: i64,
}

pub(crate) fn head(conn: &Connection) -> Result<i64> {
    Ok(conn
        .query_row(
            "SELECT seq FROM sqlite_sequence WHERE name = 'events'",
            [],
            |r| r.get::<_, i64>(0),
        )
        .optional()?
        .unwrap_or(0))
}

fn new_id(prefix: &str) -> String {
    use rand::Rng;
    const ALPHABET: &[u8] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    let mut rng = rand::rng();
    let tail: String = (0..16)
        .map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())] as char)
        .collect();
    format!("{prefix}_{tail}")
}

fn parse_state(s: &str) -> Result<TurnState> {
    TurnState::parse(s).ok_or_else(|| Error::Corrupt(format!("unknown turn state {s:?}")))
}

fn in_list(n: usize) -> String {
    let mut s = String::with_capacity(n * 2);
    for i in 0..n {
        if i > 0 {
            s.push(',');
        }
        s.push('?');
    }
    s
}

const MESSAGE_COLUMNS: &str =
    "message_id, client_message_id, role, content, status, turn_id, created_at, event_seq";

fn message_from_row(r: &rusqlite::Row<'_>, epoch: &str) -> rusqlite::Result<Message> {
    let role: String = r.get(2)?;
    let status: String = r.get(4)?;
    Ok(Message {
        message_id: r.get(0)?,
        client_message_id: r.get(1)?,
        role: if role == "assistant" {
            Role::Assistant
        } else {
            Role::User
        },
        content: r.get(3)?,
        status: MessageStatus::parse(&status).unwrap_or(MessageStatus::Interrupted),
        turn_id: r.get(5)?,
        created_at: r.get(6)?,
        event_id: Cursor::new(epoch, r.get::<_, i64>(7)?).to_string(),
    })
}

fn message_by_id(conn: &Connection, epoch: &str, message_id: &str) -> Result<Option<Message>> {
    Ok(conn
        .prepare_cached(&format!(
            "SELECT {MESSAGE_COLUMNS} FROM messages WHERE message_id = ?1"
        ))?
        .query_row([message_id], |r| message_from_row(r, epoch))
        .optional()?)
}

const TURN_COLUMNS: &str =
    "turn_id, session_id, user_message_id, state, created_at, started_at, ended_at, error, message_id";

fn turn_from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<(TurnRow, String)> {
    let state: String = r.get(3)?;
    Ok((
        TurnRow {
            turn_id: r.get(0)?,
            session_id: r.get(1)?,
            user_message_id: r.get(2)?,
            state: TurnState::Queued,
            created_at: r.get(4)?,
            started_at: r.get(5)?,
            ended_at: r.get(6)?,
            error: r.get(7)?,
            message_id: r.get(8)?,
        },
        state,
    ))
}

fn turn_by_id(conn: &Connection, turn_id: &str) -> Result<Option<TurnRow>> {
    let row = conn
        .prepare_cached(&format!(
            "SELECT {TURN_COLUMNS} FROM turns WHERE turn_id = ?1"
        ))?
        .query_row([turn_id], turn_from_row)
        .optional()?;
    match row {
        Some((mut t, state)) => {
            t.state = parse_state(&state)?;
            Ok(Some(t))
        }
        None => Ok(None),
    }
}

/// Folds a turn's journaled events up to `upto` (inclusive) into its progress.
fn fold_turn(conn: &Connection, turn: &TurnRow, upto: i64) -> Result<ActiveTurn> {
    let mut progress = ActiveTurn::new(&turn.turn_id, &turn.session_id);
    let mut stmt = conn.prepare_cached(
        "SELECT data FROM events WHERE turn_id = ?1 AND id <= ?2 AND kind IN ('turn_started', 'thinking', 'tool', 'response_delta') ORDER BY id",
    )?;
    let mut rows = stmt.query(params![turn.turn_id, upto])?;
    while let Some(row) = rows.next()? {
        let data: String = row.get(0)?;
        let body: EventBody = serde_json::from_str(&data)?;
        progress.apply(&body);
    }
    Ok(progress)
}

fn raise_floor(conn: &Connection, session_id: &str, floor: i64) -> Result<()> {
    conn.prepare_cached(
        "INSERT INTO floors(session_id, floor_seq) VALUES (?1, ?2)
         ON CONFLICT(session_id) DO UPDATE SET floor_seq = MAX(floor_seq, excluded.floor_seq)",
    )?
    .execute(params![session_id, floor])?;
    Ok(())
}

/// Validates a resume position against the journal and the sessions' floors.
fn validate(
    conn: &Connection,
    epoch: &str,
    sessions: &[String],
    resume: &str,
) -> Result<std::result::Result<i64, ResyncReason>> {
    let Ok(cursor) = resume.parse::<Cursor>() else {
        return Ok(Err(ResyncReason::Invalid));
    };
    if cursor.epoch != epoch {
        return Ok(Err(ResyncReason::Epoch));
    }
    if cursor.sequence > head(conn)? {
        return Ok(Err(ResyncReason::Future));
    }
    if cursor.sequence < max_floor(conn, sessions)? {
        return Ok(Err(ResyncReason::Expired));
    }
    Ok(Ok(cursor.sequence))
}

fn max_floor(conn: &Connection, sessions: &[String]) -> Result<i64> {
    let sql = format!(
        "SELECT COALESCE(MAX(floor_seq), 0) FROM floors WHERE session_id IN ({})",
        in_list(sessions.len())
    );
    Ok(conn.query_row(&sql, params_from_iter(sessions.iter()), |r| r.get(0))?)
}

/// Reads up to `limit` events of `sessions` after `after`, re-checking the floors so a page can
/// never hide events that cleanup removed meanwhile.
fn read_page(
    conn: &Connection,
    epoch: &str,
    sessions: &[String],
    after: i64,
    limit: usize,
) -> Result<std::result::Result<Page, ResyncReason>> {
    if after < max_floor(conn, sessions)? {
        return Ok(Err(ResyncReason::Expired));
    }
    let sql = format!(
        "SELECT id, session_id, turn_id, ts, kind, data FROM events
         WHERE session_id IN ({}) AND id > ? ORDER BY id LIMIT ?",
        in_list(sessions.len())
    );
    let mut stmt = conn.prepare_cached(&sql)?;
    let mut values: Vec<rusqlite::types::Value> = sessions
        .iter()
        .map(|s| rusqlite::types::Value::Text(s.clone()))
        .collect();
    values.push(rusqlite::types::Value::Integer(after));
    values.push(rusqlite::types::Value::Integer(limit as i64));
    let mut rows = stmt.query(params_from_iter(values.iter()))?;
    let mut frames = Vec::new();
    let mut last_seq = after;
    while let Some(row) = rows.next()? {
        let seq: i64 = row.get(0)?;
        let session_id: String = row.get(1)?;
        let turn_id: Option<String> = row.get(2)?;
        let ts: i64 = row.get(3)?;
        let kind: String = row.get(4)?;
        let data: String = row.get(5)?;
        let cursor = Cursor::new(epoch, seq).to_string();
        let json = event_json(&cursor, &session_id, ts, turn_id.as_deref(), &data);
        frames.push(Arc::new(Frame {
            seq,
            session_id,
            bytes: sse::encode(Some(&cursor), &kind, &json).into(),
        }));
        last_seq = seq;
    }
    let complete = frames.len() < limit;
    Ok(Ok(Page {
        frames,
        last_seq,
        complete,
    }))
}

/// The active turns of `sessions` as of `at`, each folded from its events up to `at`.
fn snapshot_at(conn: &Connection, epoch: &str, sessions: &[String], at: i64) -> Result<Snapshot> {
    let sql = format!(
        "SELECT {TURN_COLUMNS} FROM turns WHERE session_id IN ({}) AND queued_seq <= ?
         AND (ended_seq IS NULL OR ended_seq > ?) ORDER BY queued_seq",
        in_list(sessions.len())
    );
    let mut values: Vec<rusqlite::types::Value> = sessions
        .iter()
        .map(|s| rusqlite::types::Value::Text(s.clone()))
        .collect();
    values.push(rusqlite::types::Value::Integer(at));
    values.push(rusqlite::types::Value::Integer(at));
    let rows: Vec<(TurnRow, String)> = conn
        .prepare(&sql)?
        .query_map(params_from_iter(values.iter()), turn_from_row)?
        .collect::<rusqlite::Result<_>>()?;
    let mut active_turns = Vec::with_capacity(rows.len());
    for (turn, _) in rows {
        let mut progress = fold_turn(conn, &turn, at)?;
        if progress.state.is_terminal() {
            progress.state = TurnState::Running;
        }
        active_turns.push(progress);
    }
    Ok(Snapshot {
        cursor: Cursor::new(epoch, at).to_string(),
        active_turns,
    })
}

impl Journal {
    /// Accepts a user message: one transaction writes it to history, creates its turn `queued`
    /// and journals `message_received` and `turn_queued`. Idempotent on `client_message_id`.
    pub async fn accept_message(
        &self,
        session_id: &str,
        content: &str,
        client_message_id: Option<&str>,
        max_active_turns: usize,
    ) -> Result<Accepted> {
        let session_id = session_id.to_string();
        let content = content.to_string();
        let cmid = client_message_id.map(str::to_string);
        self.write(move |ctx| {
            if let Some(cmid) = &cmid {
                let existing = ctx
                    .conn
                    .prepare_cached(
                        "SELECT message_id, content, turn_id, event_seq FROM messages
                         WHERE session_id = ?1 AND client_message_id = ?2",
                    )?
                    .query_row(params![session_id, cmid], |r| {
                        Ok((
                            r.get::<_, String>(0)?,
                            r.get::<_, String>(1)?,
                            r.get::<_, Option<String>>(2)?,
                            r.get::<_, i64>(3)?,
                        ))
                    })
                    .optional()?;
                if let Some((message_id, old_content, turn_id, seq)) = existing {
                    if old_content != content {
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
            let active: i64 = ctx
                .conn
                .prepare_cached(
                    "SELECT COUNT(*) FROM turns WHERE session_id = ?1 AND state IN ('queued', 'running')",
                )?
                .query_row([&session_id], |r| r.get(0))?;
            if active as usize >= max_active_turns {
                return Err(Error::TooManyActiveTurns(max_active_turns));
            }
            let message_id = new_id("msg");
            let turn_id = new_id("turn");
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
                };
                message = Some(m.clone());
                EventBody::MessageReceived { message: m }
            })?;
            ctx.conn
                .prepare_cached(
                    "INSERT INTO messages(message_id, session_id, client_message_id, role, content, status, turn_id, created_at, event_seq)
                     VALUES (?1, ?2, ?3, 'user', ?4, 'complete', ?5, ?6, ?7)",
                )?
                .execute(params![message_id, session_id, cmid, content, turn_id, now, seq])?;
            let queued_seq = ctx.append(&session_id, Some(&turn_id), |_| EventBody::TurnQueued {})?;
            ctx.conn
                .prepare_cached(
                    "INSERT INTO turns(turn_id, session_id, user_message_id, state, created_at, queued_seq)
                     VALUES (?1, ?2, ?3, 'queued', ?4, ?5)",
                )?
                .execute(params![turn_id, session_id, message_id, now, queued_seq])?;
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

    /// The oldest queued turn of a session, with its user message's content.
    pub async fn next_queued_turn(&self, session_id: &str) -> Result<Option<(TurnRow, String)>> {
        let session_id = session_id.to_string();
        self.read(move |conn, _| {
            let row = conn
                .prepare_cached(&format!(
                    "SELECT {TURN_COLUMNS} FROM turns WHERE session_id = ?1 AND state = 'queued'
                     ORDER BY queued_seq LIMIT 1"
                ))?
                .query_row([&session_id], turn_from_row)
                .optional()?;
            let Some((mut turn, state)) = row else {
                return Ok(None);
            };
            turn.state = parse_state(&state)?;
            let content: String = conn
                .prepare_cached("SELECT content FROM messages WHERE message_id = ?1")?
                .query_row([&turn.user_message_id], |r| r.get(0))?;
            Ok(Some((turn, content)))
        })
        .await
    }

    /// Sessions that have queued turns (to run after a restart).
    pub async fn sessions_with_queued_turns(&self) -> Result<Vec<String>> {
        self.read(|conn, _| {
            Ok(conn
                .prepare("SELECT DISTINCT session_id FROM turns WHERE state = 'queued'")?
                .query_map([], |r| r.get(0))?
                .collect::<rusqlite::Result<_>>()?)
        })
        .await
    }

    /// Earlier messages of a session, for an agent's context: the last `limit` before `before_message`.
    pub async fn agent_history(
        &self,
        session_id: &str,
        before_message: &str,
        limit: usize,
    ) -> Result<Vec<Message>> {
        let session_id = session_id.to_string();
        let before = before_message.to_string();
        self.read(move |conn, epoch| {
            let mut msgs: Vec<Message> = conn
                .prepare_cached(&format!(
                    "SELECT {MESSAGE_COLUMNS} FROM messages WHERE session_id = ?1
                     AND seq < (SELECT seq FROM messages WHERE message_id = ?2)
                     ORDER BY seq DESC LIMIT ?3"
                ))?
                .query_map(params![session_id, before, limit as i64], |r| {
                    message_from_row(r, epoch)
                })?
                .collect::<rusqlite::Result<_>>()?;
            msgs.reverse();
            Ok(msgs)
        })
        .await
    }

    /// Moves a queued turn to running and journals `turn_started`. False if it is no longer queued.
    pub async fn start_turn(&self, turn_id: &str) -> Result<bool> {
        let turn_id = turn_id.to_string();
        self.write(move |ctx| {
            let Some(turn) = turn_by_id(ctx.conn, &turn_id)? else {
                return Ok(false);
            };
            if turn.state != TurnState::Queued {
                return Ok(false);
            }
            let seq = ctx.append(&turn.session_id, Some(&turn_id), |_| {
                EventBody::TurnStarted {}
            })?;
            let n = ctx
                .conn
                .prepare_cached(
                    "UPDATE turns SET state = 'running', started_at = ?2, started_seq = ?3
                     WHERE turn_id = ?1 AND state = 'queued'",
                )?
                .execute(params![turn_id, ctx.now, seq])?;
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
        self.submit(move |ctx| ctx.append(&session_id, Some(&turn_id), |_| body))
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
        self.write(move |ctx| end_turn_in(ctx, &turn_id, state, text, error, from))
            .await
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
            Ok(Some(TurnInfo {
                turn_id: turn.turn_id,
                session_id: turn.session_id,
                state: turn.state,
                created_at: turn.created_at,
                started_at: turn.started_at,
                ended_at: turn.ended_at,
                text,
                thinking: progress.thinking,
                tools: progress.tools,
                message,
                error: turn.error,
            }))
        })
        .await
    }

    /// A page of history (oldest first) and the journal position of exactly this snapshot.
    pub async fn history(
        &self,
        session_id: &str,
        limit: usize,
        before: Option<&str>,
    ) -> Result<HistoryResponse> {
        let session_id = session_id.to_string();
        let before = before.map(str::to_string);
        self.read(move |conn, epoch| {
            let before_seq: i64 = match &before {
                Some(id) => conn
                    .prepare_cached(
                        "SELECT seq FROM messages WHERE message_id = ?1 AND session_id = ?2",
                    )?
                    .query_row([id, &session_id], |r| r.get(0))
                    .optional()?
                    .ok_or(Error::NotFound { what: "message" })?,
                None => i64::MAX,
            };
            let mut messages: Vec<Message> = conn
                .prepare_cached(&format!(
                    "SELECT {MESSAGE_COLUMNS} FROM messages WHERE session_id = ?1 AND seq < ?2
                     ORDER BY seq DESC LIMIT ?3"
                ))?
                .query_map(params![session_id, before_seq, limit as i64 + 1], |r| {
                    message_from_row(r, epoch)
                })?
                .collect::<rusqlite::Result<_>>()?;
            let has_more = messages.len() > limit;
            messages.truncate(limit);
            messages.reverse();
            let cursor = Cursor::new(epoch, head(conn)?).to_string();
            Ok(HistoryResponse {
                session_id,
                messages,
                cursor,
                has_more,
            })
        })
        .await
    }

    /// Opens a stream: validates the resume position (`None`: the head) and, in the same read
    /// transaction, builds the snapshot (if asked) and the first page of replay.
    pub async fn stream_start(
        &self,
        sessions: Vec<String>,
        resume: Option<String>,
        snapshot: bool,
        page_limit: usize,
    ) -> Result<std::result::Result<StreamStart, ResyncReason>> {
        self.read(move |conn, epoch| {
            let resume_seq = match &resume {
                Some(r) => match validate(conn, epoch, &sessions, r)? {
                    Ok(seq) => seq,
                    Err(reason) => return Ok(Err(reason)),
                },
                None => head(conn)?,
            };
            let snapshot = if snapshot {
                Some(snapshot_at(conn, epoch, &sessions, resume_seq)?)
            } else {
                None
            };
            let page = match read_page(conn, epoch, &sessions, resume_seq, page_limit)? {
                Ok(p) => p,
                Err(reason) => return Ok(Err(reason)),
            };
            Ok(Ok(StreamStart {
                snapshot,
                page,
                resume_seq,
            }))
        })
        .await
    }

    /// The next page of replay after `after`.
    pub async fn read_after(
        &self,
        sessions: Vec<String>,
        after: i64,
        limit: usize,
    ) -> Result<std::result::Result<Page, ResyncReason>> {
        self.read(move |conn, epoch| read_page(conn, epoch, &sessions, after, limit))
            .await
    }

    /// After a crash: every turn left `running` ends `interrupted` with its partial text, unless
    /// its `turn_ended` is already journaled, in which case only the projection is repaired.
    /// Returns how many turns were interrupted and how many repaired.
    pub async fn recover_after_crash(&self) -> Result<(usize, usize)> {
        self.write(|ctx| {
            let running: Vec<String> = ctx
                .conn
                .prepare("SELECT turn_id FROM turns WHERE state = 'running'")?
                .query_map([], |r| r.get(0))?
                .collect::<rusqlite::Result<_>>()?;
            let (mut interrupted, mut repaired) = (0, 0);
            for turn_id in running {
                let ended = ctx
                    .conn
                    .query_row(
                        "SELECT id, ts, data FROM events WHERE turn_id = ?1 AND kind = 'turn_ended' ORDER BY id LIMIT 1",
                        [&turn_id],
                        |r| Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?, r.get::<_, String>(2)?)),
                    )
                    .optional()?;
                if let Some((seq, ts, data)) = ended {
                    let (state, message, error) = match serde_json::from_str::<EventBody>(&data)? {
                        EventBody::TurnEnded { state, message, error } => (state, message, error),
                        _ => return Err(Error::Corrupt("turn_ended row of another kind".into())),
                    };
                    ctx.conn.execute(
                        "UPDATE turns SET state = ?2, ended_at = ?3, ended_seq = ?4, error = ?5, message_id = ?6 WHERE turn_id = ?1",
                        params![turn_id, state.as_str(), ts, seq, error, message.map(|m| m.message_id)],
                    )?;
                    repaired += 1;
                } else {
                    let Some(turn) = turn_by_id(ctx.conn, &turn_id)? else { continue };
                    let progress = fold_turn(ctx.conn, &turn, i64::MAX)?;
                    end_turn_in(ctx, &turn_id, TurnState::Interrupted, progress.text, None, &[TurnState::Running])?;
                    interrupted += 1;
                }
            }
            Ok((interrupted, repaired))
        })
        .await
    }

    /// Retention: deletes the events of turns that ended before `cutoff_ms` (and of events outside
    /// any turn older than that), raising each session's floor. Returns the events deleted.
    pub async fn cleanup(&self, cutoff_ms: i64) -> Result<u64> {
        self.write(move |ctx| {
            let turns: Vec<(String, String)> = ctx
                .conn
                .prepare_cached(
                    "SELECT turn_id, session_id FROM turns WHERE purged = 0 AND ended_at IS NOT NULL
                     AND ended_at < ?1 LIMIT 1000",
                )?
                .query_map([cutoff_ms], |r| Ok((r.get(0)?, r.get(1)?)))?
                .collect::<rusqlite::Result<_>>()?;
            let mut deleted = purge_turns(ctx, &turns)?;
            deleted += purge_loose_events(ctx, None, Some(cutoff_ms))?;
            Ok(deleted)
        })
        .await
    }

    /// `DELETE /api/sessions/{session}/realtime`: removes the events of the session's finished
    /// turns (and loose events), raising its floor. An active turn's events stay.
    pub async fn clear_realtime(&self, session_id: &str) -> Result<u64> {
        let session_id = session_id.to_string();
        self.write(move |ctx| {
            let turns: Vec<(String, String)> = ctx
                .conn
                .prepare_cached(
                    "SELECT turn_id, session_id FROM turns WHERE session_id = ?1 AND purged = 0
                     AND state NOT IN ('queued', 'running')",
                )?
                .query_map([&session_id], |r| Ok((r.get(0)?, r.get(1)?)))?
                .collect::<rusqlite::Result<_>>()?;
            let mut deleted = purge_turns(ctx, &turns)?;
            deleted += purge_loose_events(ctx, Some(&session_id), None)?;
            Ok(deleted)
        })
        .await
    }
}

fn end_turn_in(
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
    let message_id = new_id("msg");
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
        params![turn_id, state.as_str(), now, seq, error, message_id],
    )?;
    if n != 1 {
        return Err(Error::Corrupt("turn changed state during end".into()));
    }
    ctx.conn
        .prepare_cached(
            "INSERT INTO messages(message_id, session_id, client_message_id, role, content, status, turn_id, created_at, event_seq)
             VALUES (?1, ?2, NULL, 'assistant', ?3, ?4, ?5, ?6, ?7)",
        )?
        .execute(params![
            message_id,
            turn.session_id,
            text,
            MessageStatus::for_terminal(state).as_str(),
            turn_id,
            now,
            seq
        ])?;
    Ok(message)
}

fn purge_turns(ctx: &mut WriteCtx<'_>, turns: &[(String, String)]) -> Result<u64> {
    let mut deleted = 0;
    for (turn_id, session_id) in turns {
        let max: Option<i64> = ctx
            .conn
            .prepare_cached("SELECT MAX(id) FROM events WHERE turn_id = ?1")?
            .query_row([turn_id], |r| r.get(0))?;
        if let Some(max) = max {
            deleted += ctx
                .conn
                .prepare_cached("DELETE FROM events WHERE turn_id = ?1")?
                .execute([turn_id])? as u64;
            raise_floor(ctx.conn, session_id, max)?;
        }
        ctx.conn
            .prepare_cached("UPDATE turns SET purged = 1 WHERE turn_id = ?1")?
            .execute([turn_id])?;
    }
    Ok(deleted)
}

fn purge_loose_events(
    ctx: &mut WriteCtx<'_>,
    session: Option<&str>,
    cutoff_ms: Option<i64>,
) -> Result<u64> {
    let groups: Vec<(String, i64)> = ctx
        .conn
        .prepare_cached(
            "SELECT session_id, MAX(id) FROM events WHERE turn_id IS NULL
             AND (?1 IS NULL OR session_id = ?1) AND (?2 IS NULL OR ts < ?2) GROUP BY session_id",
        )?
        .query_map(params![session, cutoff_ms], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<rusqlite::Result<_>>()?;
    let mut deleted = 0;
    for (session_id, max) in groups {
        deleted += ctx
            .conn
            .prepare_cached(
                "DELETE FROM events WHERE turn_id IS NULL AND session_id = ?1 AND id <= ?2
                 AND (?3 IS NULL OR ts < ?3)",
            )?
            .execute(params![session_id, max, cutoff_ms])? as u64;
        raise_floor(ctx.conn, &session_id, max)?;
    }
    Ok(deleted)
}

impl Journal {
    /// Readiness: the database answers and is at this build's schema version.
    pub async fn ready(&self) -> Result<()> {
        self.read(|conn, _| {
            let v: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
            if v != super::schema::SCHEMA_VERSION {
                return Err(Error::Corrupt(format!("schema version {v}")));
            }
            Ok(())
        })
        .await
    }
}
