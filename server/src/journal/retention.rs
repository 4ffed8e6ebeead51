//! Retention: deleting the events of finished turns (on a timer, or on request for a session)
//! and raising each session's replay floor, so an older cursor is told to resync instead of
//! being served a silent gap. An active turn's events are never deleted.

use super::sql::{params, Backend};
use super::{Journal, WriteCtx};
use crate::error::Result;

/// PostgreSQL: the advisory lock a server holds while it cleans up, so servers sharing the
/// database take turns (any fixed number).
const CLEANUP_LOCK: i64 = 0x7475_726e_636c_6e75;

/// Raises a session's floor to `floor`. The fan-out is told first, inside the transaction (the
/// replay tail is cut back): once the deletion commits, no position before the floor is
/// answered from memory.
pub(super) fn raise_floor(ctx: &WriteCtx<'_>, session_id: &str, floor: i64) -> Result<()> {
    ctx.fanout.floor_raised(session_id, floor);
    if ctx.conn.backend() == Backend::Postgres {
        // Other servers' replay tails, told at commit (see the journal tail).
        ctx.conn.execute(
            "SELECT pg_notify('turnstream_floors', ?1)",
            params![&super::postgres::floor_notice(session_id, floor)],
        )?;
    }
    ctx.conn.execute(
        "INSERT INTO floors(session_id, floor_seq) VALUES (?1, ?2)
         ON CONFLICT(session_id) DO UPDATE SET floor_seq = CASE
             WHEN excluded.floor_seq > floors.floor_seq THEN excluded.floor_seq
             ELSE floors.floor_seq END",
        params![session_id, floor],
    )?;
    Ok(())
}

impl Journal {
    /// Retention: deletes the events of turns that ended before `cutoff_ms` (and of events outside
    /// any turn older than that), raising each session's floor. Returns the events deleted.
    pub async fn cleanup(&self, cutoff_ms: i64) -> Result<u64> {
        self.write(move |ctx| {
            if ctx.conn.backend() == Backend::Postgres
                && ctx
                    .conn
                    .query_row(
                        "SELECT pg_try_advisory_xact_lock(?1)",
                        params![CLEANUP_LOCK],
                    )?
                    .is_some_and(|r| r.int(0).ok() == Some(0))
            {
                // Another server is cleaning up.
                return Ok(0);
            }
            let turns = pairs(ctx.conn.query(
                "SELECT turn_id, session_id FROM turns WHERE purged = 0 AND ended_at IS NOT NULL
                 AND ended_at < ?1 LIMIT 1000",
                params![cutoff_ms],
            )?)?;
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
            let turns = pairs(ctx.conn.query(
                "SELECT turn_id, session_id FROM turns WHERE session_id = ?1 AND purged = 0
                 AND state NOT IN ('queued', 'running', 'waiting')",
                params![&session_id],
            )?)?;
            let mut deleted = purge_turns(ctx, &turns)?;
            deleted += purge_loose_events(ctx, Some(&session_id), None)?;
            Ok(deleted)
        })
        .await
    }
}

fn pairs(rows: Vec<super::sql::Row>) -> Result<Vec<(String, String)>> {
    rows.iter().map(|r| Ok((r.text(0)?, r.text(1)?))).collect()
}

fn purge_turns(ctx: &mut WriteCtx<'_>, turns: &[(String, String)]) -> Result<u64> {
    let mut deleted = 0;
    for (turn_id, session_id) in turns {
        let max = ctx.conn.query_int(
            "SELECT MAX(id) FROM events WHERE turn_id = ?1",
            params![turn_id],
        )?;
        if let Some(max) = max {
            deleted += ctx
                .conn
                .execute("DELETE FROM events WHERE turn_id = ?1", params![turn_id])?;
            raise_floor(ctx, session_id, max)?;
        }
        ctx.conn.execute(
            "UPDATE turns SET purged = 1 WHERE turn_id = ?1",
            params![turn_id],
        )?;
    }
    Ok(deleted)
}

fn purge_loose_events(
    ctx: &mut WriteCtx<'_>,
    session: Option<&str>,
    cutoff_ms: Option<i64>,
) -> Result<u64> {
    let groups = ctx.conn.query(
        "SELECT session_id, MAX(id) FROM events WHERE turn_id IS NULL
         AND (CAST(?1 AS TEXT) IS NULL OR session_id = ?1)
         AND (CAST(?2 AS BIGINT) IS NULL OR ts < ?2) GROUP BY session_id",
        params![session, cutoff_ms],
    )?;
    let mut deleted = 0;
    for group in groups {
        let (session_id, max) = (group.text(0)?, group.int(1)?);
        deleted += ctx.conn.execute(
            "DELETE FROM events WHERE turn_id IS NULL AND session_id = ?1 AND id <= ?2
             AND (CAST(?3 AS BIGINT) IS NULL OR ts < ?3)",
            params![&session_id, max, cutoff_ms],
        )?;
        raise_floor(ctx, &session_id, max)?;
    }
    Ok(deleted)
}

/// The cleanup loop a server runs: every `every`, deletes what is older than `retention` (by the
/// journal's clock), until its task is dropped.
pub async fn cleanup_loop(
    journal: Journal,
    retention: std::time::Duration,
    every: std::time::Duration,
) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let cutoff = journal.clock().now_ms() - retention.as_millis() as i64;
        match journal.cleanup(cutoff).await {
            Ok(0) => {}
            Ok(n) => tracing::debug!(deleted = n, "retention cleanup"),
            Err(e) => tracing::warn!(error = %e, "retention cleanup failed"),
        }
    }
}
