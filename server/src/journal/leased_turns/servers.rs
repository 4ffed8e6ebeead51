//! Servers' own turns on a shared journal: a server claims a queued turn for itself under a
//! lease, appends its output fenced by the lease's token, renews the lease and ends the turn.

use std::time::Duration;

use turnstream_protocol::{EventBody, Message, TurnState};

use super::start_leased;
use crate::error::Result;
use crate::journal::lease::Lease;
use crate::journal::rows::{turn_by_id, turn_from_row, TURN_COLUMNS, TURN_COLUMN_COUNT};
use crate::journal::sql::params;
use crate::journal::Journal;

/// What a claim of a queued turn found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim {
    /// The turn is `running` under this lease.
    Started(Lease),
    /// The turn is no longer queued (cancelled, or another server ran it).
    NotQueued,
    /// Another turn of the session is running, or an older one is queued: not this one's turn.
    Busy,
}

/// Servers' own turns on a shared journal.
impl Journal {
    /// Claims a queued turn for this server (`owner`) under a lease of `ttl`, if it is the
    /// session's next and no turn of the session runs; journals `turn_started`.
    pub async fn claim_turn(&self, turn_id: &str, owner: &str, ttl: Duration) -> Result<Claim> {
        let turn_id = turn_id.to_string();
        let owner = owner.to_string();
        self.write(move |ctx| {
            // The turn, and its session's turn that goes first (the running one, else the
            // oldest in flight), in one round trip.
            let Some(row) = ctx.conn.query_row(
                &format!(
                    "SELECT {TURN_COLUMNS}, (SELECT f.turn_id FROM turns f
                         WHERE f.session_id = turns.session_id
                         AND f.state IN ('queued', 'running', 'waiting')
                         ORDER BY CASE WHEN f.state = 'running' THEN 0 ELSE 1 END, f.queued_seq
                         LIMIT 1)
                     FROM turns WHERE turn_id = ?1"
                ),
                params![&turn_id],
            )?
            else {
                return Ok(Claim::NotQueued);
            };
            let turn = turn_from_row(&row)?;
            if turn.state != TurnState::Queued {
                return Ok(Claim::NotQueued);
            }
            if row.opt_text(TURN_COLUMN_COUNT)?.as_deref() != Some(turn_id.as_str()) {
                return Ok(Claim::Busy);
            }
            let lease = start_leased(ctx, &turn, &owner, ttl)?;
            Ok(Claim::Started(lease))
        })
        .await
    }

    /// Parks a turn this server ran, after its agent opened requests and returned (fenced by
    /// `fence` on a shared journal).
    pub async fn park_turn(
        &self,
        turn_id: &str,
        fence: Option<&str>,
    ) -> Result<crate::journal::inputs::Parked> {
        let turn_id = turn_id.to_string();
        let fence = fence.map(str::to_string);
        self.write(move |ctx| {
            let Some(turn) = turn_by_id(ctx.conn, &turn_id)? else {
                return Ok(crate::journal::inputs::Parked::Gone);
            };
            if let Some(token) = &fence {
                if !ctx.holds(&turn_id, token)? {
                    return Ok(crate::journal::inputs::Parked::Gone);
                }
            }
            crate::journal::inputs::park(ctx, &turn, None)
        })
        .await
    }

    /// Renews a running turn's lease to `ttl` from now. `false` if the lease is lost: the turn
    /// ended (another server interrupted or cancelled it) or the lease expired.
    pub async fn renew_turn_lease(
        &self,
        turn_id: &str,
        token: &str,
        ttl: Duration,
    ) -> Result<bool> {
        let turn_id = turn_id.to_string();
        let token = token.to_string();
        let ttl_ms = i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX);
        self.write(move |ctx| {
            let n = ctx.conn.execute(
                "UPDATE turns SET lease_expires_at = ?3 WHERE turn_id = ?1 AND state = 'running'
                 AND lease_token = ?2 AND lease_expires_at > ?4",
                params![&turn_id, &token, ctx.now.saturating_add(ttl_ms), ctx.now],
            )?;
            Ok(n == 1)
        })
        .await
    }

    /// [`Journal::submit_turn_event`] fenced by a lease: refused with [`Error::LeaseLost`] once
    /// `token` no longer holds the turn.
    pub(crate) fn submit_fenced_turn_event(
        &self,
        session_id: &str,
        turn_id: &str,
        token: &str,
        body: EventBody,
    ) -> tokio::sync::oneshot::Receiver<Result<i64>> {
        let session_id = session_id.to_string();
        let turn_id = turn_id.to_string();
        let token = token.to_string();
        // One statement (the check is part of the insert): no savepoint needed.
        self.submit_single_statement(move |ctx| {
            ctx.append_fenced(&session_id, Some(&turn_id), Some(&token), |_| body)
        })
    }

    /// [`Journal::end_turn`] of a running turn, fenced by its lease: `None` when `token` no
    /// longer holds it (the server that ended it instead wrote its end; `tail` is dropped).
    pub async fn end_fenced_turn(
        &self,
        turn_id: &str,
        token: &str,
        state: TurnState,
        text: String,
        error: Option<String>,
        tail: Vec<EventBody>,
    ) -> Result<Option<Message>> {
        let token = token.to_string();
        self.end_running_turn_if(turn_id, state, text, error, tail, move |ctx, turn| {
            ctx.holds(turn, &token)
        })
        .await
    }

    /// Sessions whose next turn waits: queued turns and none running (their server may be gone).
    pub async fn sessions_waiting(&self) -> Result<Vec<String>> {
        self.read(|conn, _| {
            conn.query_texts(
                "SELECT DISTINCT q.session_id FROM turns q WHERE q.state = 'queued'
                 AND NOT EXISTS (SELECT 1 FROM turns r
                     WHERE r.session_id = q.session_id AND (r.state = 'running'
                         OR (r.state = 'waiting' AND r.queued_seq < q.queued_seq)))",
                &[],
            )
        })
        .await
    }
}
