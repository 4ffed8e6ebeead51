//! Conversations that branch (contract v1.2): history along a branch (the active one, or the one
//! through any message), the agent's context (the branch up to the turn's user message), a
//! regeneration (a new turn for the same user message, whose reply becomes a sibling of the
//! earlier ones) and a switch of the active leaf (`branch_changed`). The tree itself is in
//! [`super::leaves`]; an edit is a message posted with a `parent_id` ([`Journal::accept_message`]).

use turnstream_protocol::{
    Cursor, EventBody, HistoryResponse, Message, RegenerateResponse, Role, Siblings,
    SwitchBranchResponse,
};

use super::accept::{new_id, Admission};
use super::leaves::{active_leaf, branched, children, in_session, newest_leaf, set_leaf};
use super::rows::{message_by_id, messages, MESSAGE_COLUMNS};
use super::sql::{params, Sql};
use super::Journal;
use crate::error::{Error, Result};

/// The ids from `start` up to the root, `start` first, at most `max`: messages, and replies
/// still being written (whose parent is their turn's user message).
fn chain(conn: &dyn Sql, start: &str, max: usize) -> Result<Vec<String>> {
    conn.query_texts(
        "WITH RECURSIVE chain(id, depth) AS (
             SELECT CAST(?1 AS TEXT), CAST(0 AS BIGINT)
             UNION ALL
             SELECT COALESCE(
                 (SELECT m.parent_id FROM messages m WHERE m.message_id = chain.id),
                 (SELECT t.user_message_id FROM turns t WHERE t.reply_id = chain.id)),
                 depth + 1
             FROM chain WHERE chain.id IS NOT NULL AND depth < ?2
         )
         SELECT id FROM chain WHERE id IS NOT NULL ORDER BY depth",
        params![start, max as i64],
    )
}

/// Up to `limit` messages of the branch from `start` upward (`start` included when it is a
/// message), newest first, and whether older ones exist.
fn branch_messages(
    conn: &dyn Sql,
    epoch: &str,
    start: &str,
    limit: usize,
) -> Result<(Vec<Message>, bool)> {
    // Replies still being written are nodes without a message: a few per session at most.
    let ids = chain(
        conn,
        start,
        limit + 2 + turnstream_protocol::limits::MAX_ACTIVE_TURNS_PER_SESSION,
    )?;
    let mut out = Vec::with_capacity(limit.min(ids.len()));
    for id in &ids {
        if let Some(m) = message_by_id(conn, epoch, id)? {
            if out.len() == limit {
                return Ok((out, true));
            }
            out.push(m);
        }
    }
    Ok((out, false))
}

/// Where `message` stands among its parent's children.
fn siblings(conn: &dyn Sql, session: &str, message: &Message) -> Result<Siblings> {
    let ids = match message.role {
        Role::Assistant => match &message.parent_id {
            Some(user) => children(conn, session, Some(user))?,
            None => vec![message.message_id.clone()],
        },
        Role::User => children(conn, session, message.parent_id.as_deref())?,
    };
    let index = ids
        .iter()
        .position(|id| *id == message.message_id)
        .unwrap_or(0);
    Ok(Siblings {
        index: u32::try_from(index).unwrap_or(u32::MAX),
        count: u32::try_from(ids.len()).unwrap_or(u32::MAX),
        ids,
    })
}

/// The session a message (or a reply still being written) belongs to.
fn session_of(conn: &dyn Sql, id: &str) -> Result<Option<String>> {
    Ok(conn
        .query_texts(
            "SELECT session_id FROM messages WHERE message_id = ?1
             UNION ALL SELECT session_id FROM turns WHERE reply_id = ?1",
            params![id],
        )?
        .pop())
}

/// The agent's context for a turn: the messages of its branch before `user_message`, oldest
/// first, at most `limit`.
pub(super) fn context(
    conn: &dyn Sql,
    epoch: &str,
    user_message: &str,
    limit: usize,
) -> Result<Vec<Message>> {
    // One read: where the message hangs, and whether its session ever branched.
    let Some(row) = conn.query_row(
        "SELECT m.parent_id, m.session_id,
                (SELECT COUNT(*) FROM leaves l WHERE l.session_id = m.session_id)
         FROM messages m WHERE m.message_id = ?1",
        params![user_message],
    )?
    else {
        return Ok(Vec::new());
    };
    let (parent, session, branched) = (row.opt_text(0)?, row.text(1)?, row.int(2)? > 0);
    let Some(parent) = parent else {
        return Ok(Vec::new());
    };
    if !branched {
        let mut before = in_order(conn, epoch, &session, Some(user_message), limit)?;
        before.truncate(limit);
        before.reverse();
        return Ok(before);
    }
    let (mut found, _) = branch_messages(conn, epoch, &parent, limit)?;
    found.reverse();
    Ok(found)
}

/// A session that never branched: up to `limit + 1` of its messages in conversation order
/// before `before` (or overall), newest first. One query, as before branches existed.
fn in_order(
    conn: &dyn Sql,
    epoch: &str,
    session: &str,
    before: Option<&str>,
    limit: usize,
) -> Result<Vec<Message>> {
    let before_position = match before {
        Some(id) => conn
            .query_int(
                "SELECT position FROM messages WHERE message_id = ?1 AND session_id = ?2",
                params![id, session],
            )?
            .ok_or(Error::NotFound { what: "message" })?,
        None => i64::MAX,
    };
    messages(
        conn,
        epoch,
        &format!(
            "SELECT {MESSAGE_COLUMNS} FROM messages WHERE session_id = ?1 AND position < ?2
             ORDER BY position DESC LIMIT ?3"
        ),
        params![session, before_position, limit as i64 + 1],
    )
}

/// The answer to a regeneration.
#[derive(Debug, Clone)]
pub struct Regenerated {
    pub response: RegenerateResponse,
    pub session_id: String,
    /// False when this was a retry of an earlier request (same `client_request_id`).
    pub created: bool,
}

impl Regenerated {
    /// The answer for turn `turn_id` of user message `message_id`, queued at `cursor`.
    fn new(
        message_id: String,
        turn_id: String,
        cursor: String,
        session_id: String,
        created: bool,
    ) -> Regenerated {
        Regenerated {
            response: RegenerateResponse {
                message_id,
                turn_id,
                event_id: cursor.clone(),
                cursor,
            },
            session_id,
            created,
        }
    }
}

impl Journal {
    /// A page of the session's history along a branch, oldest first, and the journal position of
    /// exactly this snapshot: the active branch, or (`leaf`) the branch through that message
    /// down to its newest leaf; older pages with `before`. Each message says its place among its
    /// siblings.
    pub async fn history(
        &self,
        session_id: &str,
        limit: usize,
        before: Option<&str>,
        leaf: Option<&str>,
    ) -> Result<HistoryResponse> {
        let session_id = session_id.to_string();
        let before = before.map(str::to_string);
        let leaf = leaf.map(str::to_string);
        self.read(move |conn, epoch| {
            if !branched(conn, &session_id)? {
                if let Some(id) = &leaf {
                    if !in_session(conn, &session_id, id)? {
                        return Err(Error::NotFound { what: "message" });
                    }
                }
                let mut page = in_order(conn, epoch, &session_id, before.as_deref(), limit)?;
                let has_more = page.len() > limit;
                page.truncate(limit);
                page.reverse();
                let cursor = Cursor::new(epoch, conn.head()?).to_string();
                return Ok(HistoryResponse {
                    session_id: session_id.clone(),
                    messages: page,
                    cursor,
                    has_more,
                    leaf_id: active_leaf(conn, &session_id)?,
                });
            }
            let leaf = match &leaf {
                Some(id) => {
                    if !in_session(conn, &session_id, id)? {
                        return Err(Error::NotFound { what: "message" });
                    }
                    Some(newest_leaf(conn, &session_id, id)?)
                }
                None => active_leaf(conn, &session_id)?,
            };
            let start = match &before {
                Some(id) => {
                    if !in_session(conn, &session_id, id)? {
                        return Err(Error::NotFound { what: "message" });
                    }
                    chain(conn, id, 2)?.into_iter().nth(1)
                }
                None => leaf.clone(),
            };
            let (mut messages, has_more) = match &start {
                Some(start) => branch_messages(conn, epoch, start, limit)?,
                None => (Vec::new(), false),
            };
            messages.reverse();
            for m in &mut messages {
                // Only a message with other versions says so: one without reads as in its
                // events, as before branches.
                m.siblings = Some(siblings(conn, &session_id, m)?).filter(|s| s.count > 1);
            }
            let cursor = Cursor::new(epoch, conn.head()?).to_string();
            Ok(HistoryResponse {
                session_id,
                messages,
                cursor,
                has_more,
                leaf_id: leaf,
            })
        })
        .await
    }

    /// Earlier messages of the turn's branch, for an agent's context: the last `limit` before
    /// `user_message`, oldest first.
    pub async fn agent_history(&self, user_message: &str, limit: usize) -> Result<Vec<Message>> {
        let user_message = user_message.to_string();
        self.read(move |conn, epoch| context(conn, epoch, &user_message, limit))
            .await
    }

    /// The session of a message (or of a reply still being written), if it exists.
    pub async fn message_session(&self, id: &str) -> Result<Option<String>> {
        let id = id.to_string();
        self.read(move |conn, _| session_of(conn, &id)).await
    }

    /// `POST /api/messages/{message}/regenerate`: a new turn for the user message (an
    /// assistant message's user message), queued like any turn; its reply-to-be becomes the
    /// active leaf, a new sibling of the earlier replies. With a `client_request_id` the session
    /// already holds for the same user message, the first answer again and nothing new (checked
    /// before `admission`); for another message, [`Error::ClientRequestConflict`]. The check and
    /// the new turn are one write transaction (on PostgreSQL every write takes the counter's
    /// lock first, and the unique index on the id stands behind it), so retries racing on any
    /// nodes make one turn. A refusal records nothing.
    pub async fn regenerate(
        &self,
        message_id: &str,
        client_request_id: Option<String>,
        admission: Admission,
    ) -> Result<Regenerated> {
        let id = message_id.to_string();
        self.write(move |ctx| {
            let user = match message_by_id(ctx.conn, ctx.epoch, &id)? {
                Some(m) if m.role == Role::User => m.message_id,
                Some(m) => m.parent_id.ok_or(Error::NotFound { what: "message" })?,
                // A reply still being written: its turn's user message.
                None => ctx
                    .conn
                    .query_texts(
                        "SELECT user_message_id FROM turns WHERE reply_id = ?1",
                        params![&id],
                    )?
                    .pop()
                    .ok_or(Error::NotFound { what: "message" })?,
            };
            let session = session_of(ctx.conn, &user)?.ok_or(Error::NotFound { what: "message" })?;
            if let Some(crid) = &client_request_id {
                let earlier = ctx.conn.query_row(
                    "SELECT turn_id, user_message_id, queued_seq FROM turns
                     WHERE session_id = ?1 AND client_request_id = ?2",
                    params![&session, crid],
                )?;
                if let Some(row) = earlier {
                    let (turn_id, answered, seq) = (row.text(0)?, row.text(1)?, row.int(2)?);
                    if answered != user {
                        return Err(Error::ClientRequestConflict(crid.clone()));
                    }
                    return Ok(Regenerated::new(user, turn_id, ctx.cursor(seq), session, false));
                }
            }
            super::accept::admit(ctx.conn, &session, admission)?;
            let turn_id = new_id("turn");
            let reply_id = new_id("msg");
            // A regeneration is answered by the agent that answered the message before (v1.3).
            let agent = match ctx.conn.query_row(
                "SELECT agent FROM turns WHERE user_message_id = ?1 ORDER BY queued_seq DESC LIMIT 1",
                params![&user],
            )? {
                Some(row) => row.text(0)?,
                None => turnstream_protocol::call::DEFAULT_AGENT.to_string(),
            };
            let (reply, parent, queued_agent) = (reply_id.clone(), user.clone(), agent.clone());
            let seq = ctx.append(&session, Some(&turn_id), move |_| EventBody::TurnQueued {
                reply_id: Some(reply),
                parent_id: Some(parent),
                agent: Some(queued_agent),
            })?;
            ctx.conn.execute(
                "INSERT INTO turns(turn_id, session_id, user_message_id, state, created_at, queued_seq, reply_id, client_request_id, agent)
                 VALUES (?1, ?2, ?3, 'queued', ?4, ?5, ?6, ?7, ?8)",
                params![&turn_id, &session, &user, ctx.now, seq, &reply_id, &client_request_id, &agent],
            )?;
            set_leaf(ctx.conn, &session, &reply_id, true)?;
            Ok(Regenerated::new(user, turn_id, ctx.cursor(seq), session, true))
        })
        .await
    }

    /// `POST /api/sessions/{session}/active`: the active leaf becomes the newest leaf below
    /// `leaf_id` (any message of the session), journaled as `branch_changed`.
    pub async fn switch_branch(
        &self,
        session_id: &str,
        leaf_id: &str,
    ) -> Result<SwitchBranchResponse> {
        let session = session_id.to_string();
        let id = leaf_id.to_string();
        self.write(move |ctx| {
            if !in_session(ctx.conn, &session, &id)? {
                return Err(Error::NotFound { what: "message" });
            }
            let leaf = newest_leaf(ctx.conn, &session, &id)?;
            set_leaf(ctx.conn, &session, &leaf, true)?;
            let changed = leaf.clone();
            let seq = ctx.append(&session, None, move |_| EventBody::BranchChanged {
                leaf_id: changed,
            })?;
            Ok(SwitchBranchResponse {
                session_id: session.clone(),
                leaf_id: leaf,
                event_id: ctx.cursor(seq),
            })
        })
        .await
    }
}
