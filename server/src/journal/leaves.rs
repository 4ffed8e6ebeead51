//! The conversation tree's primitives (contract v1.2): each session's active leaf, a node's
//! children and the walk down to the newest leaf. A node is a message, or the reply a turn in
//! flight will write (its `reply_id`, drawn when the turn is queued). A user message's children
//! are its turns' replies (more than one after a regeneration), in the order the turns were
//! queued; a reply's children (and a session's roots) are the user messages that follow it (more
//! than one after an edit), in journal order.

use super::sql::{params, Row, Sql};
use crate::error::Result;

/// Deepest walk down a branch: far more than any conversation, and a bound on a corrupt loop.
const MAX_DEPTH: usize = 1_000_000;

/// Whether `id` is a node of `session`: a message, or a reply still being written.
pub(super) fn in_session(conn: &dyn Sql, session: &str, id: &str) -> Result<bool> {
    let n = conn
        .query_int(
            "SELECT (SELECT COUNT(*) FROM messages WHERE message_id = ?1 AND session_id = ?2)
                  + (SELECT COUNT(*) FROM turns WHERE reply_id = ?1 AND session_id = ?2)",
            params![id, session],
        )?
        .unwrap_or(0);
    Ok(n > 0)
}

/// Whether `id` is a user message (whose children are replies).
fn is_user_message(conn: &dyn Sql, id: &str) -> Result<bool> {
    Ok(conn
        .query_int(
            "SELECT COUNT(*) FROM messages WHERE message_id = ?1 AND role = 'user'",
            params![id],
        )?
        .unwrap_or(0)
        > 0)
}

/// The children of `parent` (`None`: the session's first messages), oldest first.
pub(super) fn children(conn: &dyn Sql, session: &str, parent: Option<&str>) -> Result<Vec<String>> {
    match parent {
        None => conn.query_texts(
            "SELECT message_id FROM messages WHERE session_id = ?1 AND parent_id IS NULL
             AND role = 'user' ORDER BY event_seq",
            params![session],
        ),
        Some(id) if is_user_message(conn, id)? => conn.query_texts(
            "SELECT reply_id FROM turns WHERE user_message_id = ?1 AND reply_id IS NOT NULL
             ORDER BY queued_seq",
            params![id],
        ),
        Some(id) => conn.query_texts(
            "SELECT message_id FROM messages WHERE parent_id = ?1 AND role = 'user'
             ORDER BY event_seq",
            params![id],
        ),
    }
}

/// The leaf reached from `from` by following the newest child down.
pub(super) fn newest_leaf(conn: &dyn Sql, session: &str, from: &str) -> Result<String> {
    let mut at = from.to_string();
    for _ in 0..MAX_DEPTH {
        match children(conn, session, Some(&at))?.pop() {
            Some(child) => at = child,
            None => break,
        }
    }
    Ok(at)
}

/// The session's active leaf, and whether it is recorded (a session that branched records its
/// leaf; one that never did has its last turn's reply as its leaf, so its messages cost no write
/// for it); `None` for a session without turns.
pub(super) fn active_leaf(conn: &dyn Sql, session: &str) -> Result<Option<String>> {
    Ok(leaf_and_record(conn, session)?.0)
}

/// The two columns [`leaf_from`] reads (the recorded leaf, the newest turn's reply), as
/// subqueries of session `?1`, for a statement that reads the leaf with what it reads itself.
pub(super) const LEAF_COLUMNS: &str = "(SELECT leaf_id FROM leaves WHERE session_id = ?1),
    (SELECT reply_id FROM turns WHERE session_id = ?1 ORDER BY queued_seq DESC LIMIT 1)";

/// [`active_leaf`], and whether the session records it (it branched).
fn leaf_and_record(conn: &dyn Sql, session: &str) -> Result<(Option<String>, bool)> {
    let Some(row) = conn.query_row(&format!("SELECT {LEAF_COLUMNS}"), params![session])? else {
        return Ok((None, false));
    };
    leaf_from(&row, 0)
}

/// [`leaf_and_record`] from [`LEAF_COLUMNS`] at column `at` of `row`.
pub(super) fn leaf_from(row: &Row, at: usize) -> Result<(Option<String>, bool)> {
    Ok(match (row.opt_text(at)?, row.opt_text(at + 1)?) {
        (Some(leaf), _) => (Some(leaf), true),
        (None, last) => (last, false),
    })
}

/// Records `leaf` as the session's active leaf (once it branched: an edit, a regeneration or a
/// switch; the session reads along its tree from then on).
pub(super) fn set_leaf(conn: &dyn Sql, session: &str, leaf: &str, branched: bool) -> Result<()> {
    conn.execute(
        "INSERT INTO leaves(session_id, leaf_id, branched) VALUES (?1, ?2, ?3)
         ON CONFLICT(session_id) DO UPDATE SET leaf_id = excluded.leaf_id,
             branched = CASE WHEN excluded.branched = 1 THEN 1 ELSE leaves.branched END",
        params![session, leaf, i64::from(branched)],
    )?;
    Ok(())
}

/// Whether the session ever branched (an edit, a regeneration or a switch). A session that did
/// not is one line: its conversation order is its only branch.
pub(super) fn branched(conn: &dyn Sql, session: &str) -> Result<bool> {
    Ok(conn
        .query_int(
            "SELECT branched FROM leaves WHERE session_id = ?1",
            params![session],
        )?
        .unwrap_or(0)
        != 0)
}
