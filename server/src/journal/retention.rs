//! Retention: deleting the events of finished turns (on a timer, or on request for a session)
//! and raising each session's replay floor, so an older cursor is told to resync instead of
//! being served a silent gap. An active turn's events are never deleted.

use rusqlite::params;

use super::{Journal, WriteCtx};
use crate::error::Result;

/// Raises a session's floor to `floor`. The hub's replay tail is cut back first, inside the
/// transaction: once the deletion commits, no position before the floor is answered from memory.
pub(super) fn raise_floor(ctx: &WriteCtx<'_>, session_id: &str, floor: i64) -> Result<()> {
    ctx.hub.forget_through(session_id, floor);
    ctx.conn
        .prepare_cached(
            "INSERT INTO floors(session_id, floor_seq) VALUES (?1, ?2)
         ON CONFLICT(session_id) DO UPDATE SET floor_seq = MAX(floor_seq, excluded.floor_seq)",
        )?
        .execute(params![session_id, floor])?;
    Ok(())
}

impl Journal {
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
            raise_floor(ctx, session_id, max)?;
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
        raise_floor(ctx, &session_id, max)?;
    }
    Ok(deleted)
}
