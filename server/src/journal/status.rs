//! What the journal answers about a turn and about itself: a turn's row, `GET /api/turns/{turn}`
//! (the projection with its progress folded from the journal), and readiness.

use turnstream_protocol::{TurnInfo, Usage};

use super::rows::{fold_turn, message_by_id, turn_by_id, TurnRow};
use super::sql::params;
use super::Journal;
use crate::error::{Error, Result};

impl Journal {
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
                agent: Some(turn.agent),
                called_by: turn.called_by,
            }))
        })
        .await
    }

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
