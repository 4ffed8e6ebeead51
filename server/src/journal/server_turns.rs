//! Turns a server runs on a shared (PostgreSQL) journal: claimed under a lease, exactly like a
//! worker's (see [`super::lease`] and [`super::worker`]), so that a turn runs once across
//! servers, a session's turns run one at a time in order, and a server that lost its lease (it
//! stalled, or was cut off, and another server ended the turn `interrupted`) can no longer
//! append to the turn.
//!
//! Every check and change here is one write transaction, and write transactions of all servers
//! are serialized by the journal's counter row: two servers racing for a turn are ordered.

use std::time::Duration;

use turnstream_protocol::worker::NO_SEQ;
use turnstream_protocol::{EventBody, Message, TurnState};

use super::lease::Lease;
use super::sql::{params, Sql};
use super::store::{end_turn_in, turn_by_id};
use super::{Journal, WriteCtx};
use crate::error::{Error, Result};

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

/// Starts queued turn `turn_id` under a new lease for `owner` (a worker or a server): journals
/// `turn_started` and marks the turn `running` with the lease. The one way a leased turn starts.
pub(super) fn start_leased(
    ctx: &mut WriteCtx<'_>,
    session_id: &str,
    turn_id: &str,
    owner: &str,
    ttl: Duration,
) -> Result<Lease> {
    let lease = Lease::grant(owner, ttl, ctx.now);
    let seq = ctx.append(session_id, Some(turn_id), |_| EventBody::TurnStarted {})?;
    let n = ctx.conn.execute(
        "UPDATE turns SET state = 'running', started_at = ?2, started_seq = ?3,
             lease_token = ?4, lease_owner = ?5, lease_expires_at = ?6, worker_seq = ?7
         WHERE turn_id = ?1 AND state = 'queued'",
        params![
            turn_id,
            ctx.now,
            seq,
            &lease.token,
            &lease.owner,
            lease.expires_at,
            NO_SEQ
        ],
    )?;
    if n != 1 {
        return Err(Error::Corrupt("turn changed state during claim".into()));
    }
    Ok(lease)
}

/// Whether `token` holds the running turn's lease now.
pub(super) fn holds(conn: &dyn Sql, turn_id: &str, token: &str, now: i64) -> Result<bool> {
    Ok(conn
        .query_int(
            "SELECT COUNT(*) FROM turns WHERE turn_id = ?1 AND state = 'running'
             AND lease_token = ?2 AND lease_expires_at > ?3",
            params![turn_id, token, now],
        )?
        .unwrap_or(0)
        == 1)
}

impl Journal {
    /// Claims a queued turn for this server (`owner`) under a lease of `ttl`, if it is the
    /// session's next and no turn of the session runs; journals `turn_started`.
    pub async fn claim_turn(&self, turn_id: &str, owner: &str, ttl: Duration) -> Result<Claim> {
        let turn_id = turn_id.to_string();
        let owner = owner.to_string();
        self.write(move |ctx| {
            let Some(turn) = turn_by_id(ctx.conn, &turn_id)? else {
                return Ok(Claim::NotQueued);
            };
            if turn.state != TurnState::Queued {
                return Ok(Claim::NotQueued);
            }
            let first = ctx.conn.query_texts(
                "SELECT turn_id FROM turns WHERE session_id = ?1 AND state IN ('queued', 'running')
                 ORDER BY CASE WHEN state = 'running' THEN 0 ELSE 1 END, queued_seq LIMIT 1",
                params![&turn.session_id],
            )?;
            if first.first() != Some(&turn_id) {
                return Ok(Claim::Busy);
            }
            let lease = start_leased(ctx, &turn.session_id, &turn_id, &owner, ttl)?;
            Ok(Claim::Started(lease))
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
    /// longer holds it (the server that ended it instead wrote its end).
    pub async fn end_fenced_turn(
        &self,
        turn_id: &str,
        token: &str,
        state: TurnState,
        text: String,
        error: Option<String>,
    ) -> Result<Option<Message>> {
        let turn_id = turn_id.to_string();
        let token = token.to_string();
        let ended = self
            .write(move |ctx| {
                if !holds(ctx.conn, &turn_id, &token, ctx.now)? {
                    return Ok(None);
                }
                end_turn_in(ctx, &turn_id, state, text, error, &[TurnState::Running])
            })
            .await?;
        if ended.is_some() {
            self.metrics()
                .turns_ended
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        Ok(ended)
    }

    /// Sessions whose next turn waits: queued turns and none running (their server may be gone).
    pub async fn sessions_waiting(&self) -> Result<Vec<String>> {
        self.read(|conn, _| {
            conn.query_texts(
                "SELECT DISTINCT q.session_id FROM turns q WHERE q.state = 'queued'
                 AND NOT EXISTS (SELECT 1 FROM turns r
                     WHERE r.session_id = q.session_id AND r.state = 'running')",
                &[],
            )
        })
        .await
    }
}
