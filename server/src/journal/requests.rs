//! The rows of `input_requests` (contract v1.2) that a turn's end and recovery touch: closing
//! a turn's open requests, counting them, and putting back in line a continuation that showed
//! nothing yet. The requests' lifecycle is in [`super::inputs`].

use turnstream_protocol::{InputRequest, RawJson, TurnRequest};

use super::sql::{params, Sql};
use super::WriteCtx;
use crate::error::{Error, Result};

/// Closes the requests still open when turn `turn_id` ends: they can no longer be answered.
pub(super) fn close_requests(ctx: &mut WriteCtx<'_>, turn_id: &str) -> Result<()> {
    ctx.conn.execute(
        "UPDATE input_requests SET closed_at = ?2
         WHERE turn_id = ?1 AND answer IS NULL AND closed_at IS NULL",
        params![turn_id, ctx.now],
    )?;
    Ok(())
}

pub(super) fn open_count(conn: &dyn Sql, turn_id: &str) -> Result<i64> {
    Ok(conn
        .query_int(
            "SELECT COUNT(*) FROM input_requests WHERE turn_id = ?1 AND answer IS NULL
             AND closed_at IS NULL",
            params![turn_id],
        )?
        .unwrap_or(0))
}

/// A continuation whose run stopped (a crash, or a lease that ran out) before it journaled
/// anything after its last answer goes back in line instead of ending `interrupted`: nothing of
/// it was shown, so it can run again, and the answer is not lost. `true` if so.
pub(super) fn requeue_untouched(
    ctx: &mut WriteCtx<'_>,
    turn_id: &str,
    resumes: i64,
) -> Result<bool> {
    if resumes == 0 {
        return Ok(false);
    }
    let Some(answered) = ctx.conn.query_int(
        "SELECT MAX(answered_seq) FROM input_requests WHERE turn_id = ?1",
        params![turn_id],
    )?
    else {
        return Ok(false);
    };
    let after = ctx
        .conn
        .query_int(
            "SELECT COUNT(*) FROM events WHERE turn_id = ?1 AND id > ?2",
            params![turn_id, answered],
        )?
        .unwrap_or(0);
    if after > 0 {
        return Ok(false);
    }
    ctx.fences.retain(|(t, _)| t != turn_id);
    let n = ctx.conn.execute(
        "UPDATE turns SET state = 'queued', lease_token = NULL, lease_owner = NULL,
             lease_expires_at = NULL
         WHERE turn_id = ?1 AND state = 'running'",
        params![turn_id],
    )?;
    Ok(n == 1)
}

/// A turn's requests with their answers, in the order they were opened.
pub(super) fn requests_of(conn: &dyn Sql, turn_id: &str) -> Result<Vec<TurnRequest>> {
    let rows = conn.query(
        "SELECT request, answer, answered_by FROM input_requests WHERE turn_id = ?1
         ORDER BY requested_seq",
        params![turn_id],
    )?;
    rows.iter()
        .map(|r| {
            let request: InputRequest = serde_json::from_str(&r.text(0)?)?;
            let mut shown = TurnRequest::open(&request);
            shown.answer = match r.opt_text(1)? {
                Some(a) => Some(
                    RawJson::parse(&a)
                        .ok_or_else(|| Error::Corrupt("a recorded answer is not JSON".into()))?,
                ),
                None => None,
            };
            shown.answered_by = r.opt_text(2)?;
            Ok(shown)
        })
        .collect()
}
