//! Leased turns in storage, for worker processes and for servers sharing a journal alike: a
//! queued turn is claimed under a lease (see [`super::lease`]), the one way a leased turn
//! starts; its output is appended fenced by the lease token, so whoever lost the lease (a worker
//! that went silent, a server that stalled or was cut off, and whose turn was ended
//! `interrupted`) can never write to it again; the lease is renewed, and expired leases end
//! their turns. A session's turns still run one at a time, in order, across all of them.
//!
//! Every check and change of one request is one write transaction, and write transactions of
//! all servers are serialized by the journal's counter row, so racing requests (two claims, a
//! cancel and a complete, two servers claiming one turn) are ordered. A worker's output is
//! appended with its `seq` in the same transaction, so a retry appends nothing.
//!
//! This module holds what both share: a leased turn's start and the lease checks. Workers'
//! claims and requests are in [`workers`], servers' own turns on a shared journal in [`servers`].

mod servers;
mod workers;

use std::time::Duration;

use turnstream_protocol::worker::NO_SEQ;
use turnstream_protocol::EventBody;

use super::lease::Lease;
use super::sql::{params, Param, Sql};
use super::{TurnRow, WriteCtx};
use crate::error::{Error, Result};

pub use servers::Claim;
pub use workers::{Claimed, LeasedTurn, Refusal, WorkerOp, WorkerWrite};

/// Starts queued turn `turn_id` under a new lease for `owner` (a worker or a server): journals
/// `turn_started` and marks the turn `running` with the lease. The one way a leased turn starts.
fn start_leased(
    ctx: &mut WriteCtx<'_>,
    turn: &TurnRow,
    owner: &str,
    ttl: Duration,
) -> Result<Lease> {
    let (session_id, turn_id) = (turn.session_id.as_str(), turn.turn_id.as_str());
    let lease = Lease::grant(owner, ttl, ctx.now);
    if turn.resumes > 0 {
        // A continuation: it started before it waited, and its worker `seq` goes on.
        let n = ctx.conn.execute(
            "UPDATE turns SET state = 'running', lease_token = ?2, lease_owner = ?3,
                 lease_expires_at = ?4
             WHERE turn_id = ?1 AND state = 'queued'",
            params![turn_id, &lease.token, &lease.owner, lease.expires_at],
        )?;
        if n != 1 {
            return Err(Error::Corrupt("turn changed state during claim".into()));
        }
        // Granted in this batch, it holds in it: the turn's first writes and its end need not
        // ask (the batches after check it again first, with the others they know).
        ctx.known_holding(turn_id, &lease.token);
        return Ok(lease);
    }
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
    ctx.known_holding(turn_id, &lease.token);
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

/// Which of `fences` (`(turn, lease token)` pairs) hold their running turn's lease now, in one
/// statement: [`holds`] for many turns at once.
pub(super) fn still_holding(
    conn: &dyn Sql,
    fences: &[(String, String)],
    now: i64,
) -> Result<Vec<(String, String)>> {
    if fences.is_empty() {
        return Ok(Vec::new());
    }
    // As many placeholders as the next power of two (the last turn repeated), so a few
    // statement texts serve every count (each is prepared and kept per connection).
    let slots = fences.len().next_power_of_two();
    let placeholders: Vec<String> = (0..slots).map(|i| format!("?{}", i + 2)).collect();
    let sql = holding_sql("?1", &placeholders);
    let mut args = Vec::with_capacity(slots + 1);
    args.push(Param::Int(now));
    for i in 0..slots {
        let (turn, _) = &fences[i.min(fences.len() - 1)];
        args.push(Param::Text(turn));
    }
    let rows = conn.query(&sql, &args)?;
    let found = rows
        .iter()
        .map(|row| Ok((row.text(0)?, row.text(1)?)))
        .collect::<Result<Vec<_>>>()?;
    Ok(holding_of(fences, found))
}

/// [`still_holding`]'s statement with its values written in (for a simple query that also
/// begins the transaction: one round trip for both), or `None` when a value is anything but
/// an id's characters (`[0-9A-Za-z_-]`), which are never quoted wrong.
pub(super) fn still_holding_literal(fences: &[(String, String)], now: i64) -> Option<String> {
    let id_like = |v: &str| {
        !v.is_empty()
            && v.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    };
    if fences.is_empty() || !fences.iter().all(|(t, k)| id_like(t) && id_like(k)) {
        return None;
    }
    let turns: Vec<String> = fences.iter().map(|(t, _)| format!("'{t}'")).collect();
    Some(holding_sql(&now.to_string(), &turns))
}

/// The running turns among `turns` (SQL values) whose lease is unexpired at `now` (a SQL
/// value), with their lease tokens: the query of [`still_holding`] and of
/// [`still_holding_literal`].
fn holding_sql(now: &str, turns: &[String]) -> String {
    format!(
        "SELECT turn_id, lease_token FROM turns WHERE state = 'running'
         AND lease_token IS NOT NULL AND lease_expires_at > {now} AND turn_id IN ({})",
        turns.join(", ")
    )
}

/// Which of `fences` the `(turn, lease token)` rows `found` hold, each once.
pub(super) fn holding_of(
    fences: &[(String, String)],
    found: impl IntoIterator<Item = (String, String)>,
) -> Vec<(String, String)> {
    let mut holding = Vec::with_capacity(fences.len());
    for (turn, token) in found {
        if let Some(fence) = fences.iter().find(|(t, k)| *t == turn && *k == token) {
            if !holding.contains(fence) {
                holding.push(fence.clone());
            }
        }
    }
    holding
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::journal::schema;

    type TestResult = std::result::Result<(), Box<dyn std::error::Error>>;

    fn pair(turn: &str, token: &str) -> (String, String) {
        (turn.to_string(), token.to_string())
    }

    #[test]
    fn the_check_written_in_takes_only_ids_characters() {
        let sql = still_holding_literal(&[pair("turn_a1", "lse_9f-2")], 7);
        assert!(
            sql.as_deref()
                .is_some_and(|s| s.contains("lease_expires_at > 7 AND turn_id IN ('turn_a1')")),
            "{sql:?}"
        );
        for bad in ["t'; DROP TABLE turns; --", "t\\", "", "t\u{0}"] {
            assert_eq!(
                still_holding_literal(&[pair(bad, "lse_1")], 7),
                None,
                "{bad:?}"
            );
            assert_eq!(
                still_holding_literal(&[pair("turn_a", bad)], 7),
                None,
                "{bad:?}"
            );
        }
        assert_eq!(still_holding_literal(&[], 7), None);
    }

    #[test]
    fn still_holding_keeps_only_the_leases_that_hold_now() -> TestResult {
        let dir = tempfile::tempdir()?;
        let mut conn = rusqlite::Connection::open(dir.path().join("l.db"))?;
        schema::configure(&conn)?;
        schema::migrate(&mut conn)?;
        for (turn, state, token, expires) in [
            ("a", "running", "ta", 2_000),
            ("b", "running", "tb", 2_000),
            ("c", "running", "tc", 500),
            ("d", "completed", "td", 2_000),
            ("e", "running", "new", 2_000),
        ] {
            conn.execute(
                "INSERT INTO turns(turn_id, session_id, user_message_id, state, created_at,
                                   queued_seq, lease_token, lease_owner, lease_expires_at)
                 VALUES (?1, 's', 'm', ?2, 0, 1, ?3, 'w', ?4)",
                rusqlite::params![turn, state, token, expires],
            )?;
        }
        let known = vec![
            pair("a", "ta"),
            pair("b", "tb"),
            pair("c", "tc"),
            pair("d", "td"),
            pair("e", "old"),
        ];
        let holding = still_holding(&conn, &known, 1_000)?;
        assert_eq!(holding, vec![pair("a", "ta"), pair("b", "tb")]);
        // The same answers as one `holds` per turn.
        for (turn, token) in &known {
            assert_eq!(
                holds(&conn, turn, token, 1_000)?,
                holding.contains(&pair(turn, token)),
                "{turn}"
            );
        }
        assert!(still_holding(&conn, &[], 1_000)?.is_empty());
        assert!(still_holding(&conn, &known, 3_000)?.is_empty(), "expired");
        Ok(())
    }
}
