//! Accepting a user message: one transaction writes it to history, creates its turn `queued`
//! and journals `message_received` and `turn_queued`; the admission rules a session applies
//! first, and the server-made ids.

use turnstream_protocol::{
    Attachment, CalledBy, EventBody, Message, MessageStatus, PostMessageResponse, Role,
};

use super::rows::{attachments_column, called_by_column};
use super::sql::{params, Sql};
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
#[derive(Debug, Clone)]
pub struct NewMessage {
    pub content: String,
    pub attachments: Vec<Attachment>,
    pub client_message_id: Option<String>,
    pub author: Option<String>,
    /// The message it follows (v1.2): `None`, the active leaf; `Some(None)`, none (a first
    /// message); `Some(Some(id))`, that message (an edit of its child).
    pub parent: Option<Option<String>>,
    /// The turn's agent (v1.3), checked by the caller.
    pub agent: String,
}

impl Default for NewMessage {
    fn default() -> Self {
        NewMessage {
            content: String::new(),
            attachments: Vec::new(),
            client_message_id: None,
            author: None,
            parent: None,
            agent: turnstream_protocol::call::DEFAULT_AGENT.to_string(),
        }
    }
}

/// A turn to queue with its user message, its ids drawn already: a posted message's, or a
/// call's child (v1.3), whose ids the caller's request names.
pub(super) struct Queued<'a> {
    pub session_id: &'a str,
    pub message_id: &'a str,
    pub turn_id: &'a str,
    pub content: &'a str,
    pub attachments: &'a [Attachment],
    pub client_message_id: Option<&'a str>,
    pub author: Option<&'a str>,
    pub parent: Option<&'a str>,
    pub agent: &'a str,
    pub called_by: Option<&'a CalledBy>,
}

/// Journals `message_received` and `turn_queued` of `q` and writes its message and its turn's
/// row. Returns the message's sequence and the reply id drawn for the turn.
pub(super) fn queue_turn(ctx: &mut WriteCtx<'_>, q: &Queued<'_>) -> Result<(i64, String)> {
    let reply_id = new_id("msg");
    let now = ctx.now;
    let stored_attachments = attachments_column(q.attachments)?;
    let stored_called_by = called_by_column(q.called_by)?;
    let seq = ctx.append(q.session_id, Some(q.turn_id), |cursor| {
        EventBody::MessageReceived {
            message: Message {
                message_id: q.message_id.to_string(),
                client_message_id: q.client_message_id.map(str::to_string),
                role: Role::User,
                content: q.content.to_string(),
                status: MessageStatus::Complete,
                turn_id: Some(q.turn_id.to_string()),
                created_at: now,
                event_id: cursor.to_string(),
                author: q.author.map(str::to_string),
                attachments: q.attachments.to_vec(),
                parent_id: q.parent.map(str::to_string),
                siblings: None,
                requests: Vec::new(),
                called_by: q.called_by.cloned(),
            },
        }
    })?;
    // New rows, answered by nothing the job reads: sent with what follows.
    ctx.conn.execute_unanswered(
        "INSERT INTO messages(message_id, session_id, client_message_id, role, content, status, turn_id, created_at, event_seq, author, position, attachments, parent_id, called_by)
         VALUES (?1, ?2, ?3, 'user', ?4, 'complete', ?5, ?6, ?7, ?8, 2 * CAST(?7 AS BIGINT), ?9, ?10, ?11)",
        params![q.message_id, q.session_id, q.client_message_id, q.content, q.turn_id, now, seq, q.author, &stored_attachments, q.parent, &stored_called_by],
    )?;
    let (reply, asked, agent) = (
        reply_id.clone(),
        q.message_id.to_string(),
        q.agent.to_string(),
    );
    let queued_seq = ctx.append(q.session_id, Some(q.turn_id), move |_| {
        EventBody::TurnQueued {
            reply_id: Some(reply),
            parent_id: Some(asked),
            agent: Some(agent),
        }
    })?;
    ctx.conn.execute_unanswered(
        "INSERT INTO turns(turn_id, session_id, user_message_id, state, created_at, queued_seq, reply_id, agent, called_by)
         VALUES (?1, ?2, ?3, 'queued', ?4, ?5, ?6, ?7, ?8)",
        params![q.turn_id, q.session_id, q.message_id, now, queued_seq, &reply_id, q.agent, &stored_called_by],
    )?;
    Ok((seq, reply_id))
}

/// What counts a session's turns in flight, as a subquery of session `?1`.
const ACTIVE_TURNS: &str = "(SELECT COUNT(*) FROM turns WHERE session_id = ?1
    AND state IN ('queued', 'running', 'waiting'))";

/// Refuses a new turn for `session` as `admission` says.
pub(super) fn admit(conn: &dyn Sql, session: &str, admission: Admission) -> Result<()> {
    let active = conn
        .query_int(&format!("SELECT {ACTIVE_TURNS}"), params![session])?
        .unwrap_or(0);
    admission.check(active)
}

/// [`admit`], then the session's active leaf and whether it records it
/// ([`leaves::leaf_from`](super::leaves::leaf_from)), in one statement: a new message's first
/// round trip to the database.
pub(super) fn admit_and_leaf(
    conn: &dyn Sql,
    session: &str,
    admission: Admission,
) -> Result<(Option<String>, bool)> {
    let row = conn
        .query_row(
            &format!("SELECT {ACTIVE_TURNS}, {}", super::leaves::LEAF_COLUMNS),
            params![session],
        )?
        .ok_or_else(|| Error::Corrupt("a SELECT without FROM gave no row".into()))?;
    admission.check(row.opt_int(0)?.unwrap_or(0))?;
    super::leaves::leaf_from(&row, 1)
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

    /// Refuses a new turn of a session with `active` turns in flight.
    fn check(self, active: i64) -> Result<()> {
        if self.reject_if_busy && active > 0 {
            return Err(Error::SessionBusy);
        }
        if active as usize >= self.max_active_turns {
            return Err(Error::TooManyActiveTurns(self.max_active_turns));
        }
        Ok(())
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
            agent,
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
            let (active, recorded) = admit_and_leaf(ctx.conn, &session_id, admission)?;
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
            let (seq, reply_id) = queue_turn(
                ctx,
                &Queued {
                    session_id: &session_id,
                    message_id: &message_id,
                    turn_id: &turn_id,
                    content: &content,
                    attachments: &attachments,
                    client_message_id: cmid.as_deref(),
                    author: author.as_deref(),
                    parent: parent.as_deref(),
                    agent: &agent,
                    called_by: None,
                },
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
}
