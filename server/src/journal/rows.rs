//! The projection's rows as queries answer them: messages and turns (their columns and how a
//! row reads back), and a turn's progress folded from its journaled events.

use turnstream_protocol::{
    ActiveTurn, Attachment, CalledBy, Cursor, EventBody, Message, MessageStatus, Role, TurnState,
};

use super::sql::{params, Row, Sql};
use crate::error::{Error, Result};

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
    /// The turn's agent (v1.3).
    pub agent: String,
    /// For a called turn (v1.3): the call that made it.
    pub called_by: Option<CalledBy>,
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

fn parse_state(s: &str) -> Result<TurnState> {
    TurnState::parse(s).ok_or_else(|| Error::Corrupt(format!("unknown turn state {s:?}")))
}

pub(super) const MESSAGE_COLUMNS: &str =
    "message_id, client_message_id, role, content, status, turn_id, created_at, event_seq, author, attachments, parent_id, requests, called_by";

/// The `attachments` column: a JSON array, NULL for none (every message before v1.2, and most
/// after), so a message without attachments costs nothing more to store.
pub(super) fn attachments_column(attachments: &[Attachment]) -> Result<Option<String>> {
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
        called_by: called_by_from_column(r.opt_text(12)?)?,
    })
}

/// The `called_by` column of a turn or a message (v1.3): JSON, NULL for none.
pub(super) fn called_by_column(called_by: Option<&CalledBy>) -> Result<Option<String>> {
    called_by
        .map(serde_json::to_string)
        .transpose()
        .map_err(Into::into)
}

fn called_by_from_column(column: Option<String>) -> Result<Option<CalledBy>> {
    column
        .map(|json| {
            serde_json::from_str(&json).map_err(|e| Error::Corrupt(format!("a called_by: {e}")))
        })
        .transpose()
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
    "turn_id, session_id, user_message_id, state, created_at, started_at, ended_at, error, message_id, resumes, reply_id, asked, agent, called_by";
/// How many columns [`TURN_COLUMNS`] are: the index of the first a query selects after them.
pub(super) const TURN_COLUMN_COUNT: usize = 14;

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
        agent: r.text(12)?,
        called_by: called_by_from_column(r.opt_text(13)?)?,
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
    progress.agent = Some(turn.agent.clone());
    progress.called_by.clone_from(&turn.called_by);
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
