//! The writer thread's connection to PostgreSQL: one from the pool, replaced when it breaks.
//! Every write transaction takes the lock of the one row of `counter` first, and commits it
//! raised with its events (waking every server's tail); retention's exclusive lock is an
//! advisory lock held for the transaction, and its floor notices go out at commit.

use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::Pool;
use tokio::runtime::Handle;

use super::{floor_notice, PgClient, Statements, BEGIN};
use crate::error::{Error, Result, StorageFault};
use crate::journal::engine::{Begun, WriteConn};
use crate::journal::leased_turns::{holding_of, still_holding, still_holding_literal};
use crate::journal::sql::{params, Backend, EventRow, Param, Row, Sql};

pub(super) struct Writer {
    pool: Pool,
    statements: Arc<Statements>,
    rt: Handle,
    client: Option<PgClient>,
    open: bool,
    /// The head as the open transaction found it.
    begun_at: i64,
}

impl Writer {
    pub(super) fn new(pool: Pool, statements: Arc<Statements>, rt: Handle) -> Writer {
        Writer {
            pool,
            statements,
            rt,
            client: None,
            open: false,
            begun_at: 0,
        }
    }

    /// The connection, connecting anew if there is none or it broke.
    fn client(&mut self) -> Result<&PgClient> {
        if self.client.as_ref().is_none_or(PgClient::is_closed) {
            self.client = None;
            self.client = Some(PgClient::get(&self.pool, &self.statements, &self.rt)?);
        }
        self.client
            .as_ref()
            .ok_or_else(|| Error::Corrupt("no database connection".into()))
    }

    /// Begins a write transaction under the counter row's lock, then runs `check` (see
    /// [`PgClient::begin_counted_then`]): the head, and `check`'s rows.
    fn begin_then(&mut self, check: Option<&str>) -> Result<(i64, Vec<(String, String)>)> {
        self.rollback();
        self.client()?;
        // Left to roll back should the lock's statement fail after BEGIN.
        self.open = true;
        // Every writer of every server takes this lock first: transactions that append commit
        // one after another, in the order of their ids.
        let (head, rows) = self.connected()?.begin_counted_then(check)?;
        self.begun_at = head;
        Ok((head, rows))
    }

    /// The connection as it is, for a statement of the open transaction.
    fn connected(&self) -> Result<&PgClient> {
        self.client.as_ref().ok_or_else(Disconnected::error)
    }
}

/// What the writer's `sql()` answers with no connection: every statement fails as unavailable.
struct Disconnected;

impl Disconnected {
    fn error() -> Error {
        Error::storage(StorageFault::Unavailable, "no database connection")
    }
}

impl Sql for Disconnected {
    fn query(&self, _: &str, _: &[Param<'_>]) -> Result<Vec<Row>> {
        Err(Self::error())
    }
    fn execute(&self, _: &str, _: &[Param<'_>]) -> Result<u64> {
        Err(Self::error())
    }
    fn for_each_event(
        &self,
        _: &str,
        _: &[Param<'_>],
        _: &mut dyn FnMut(EventRow<'_>) -> Result<()>,
    ) -> Result<()> {
        Err(Self::error())
    }
    fn head(&self) -> Result<i64> {
        Err(Self::error())
    }
    fn schema_version(&self) -> Result<i64> {
        Err(Self::error())
    }
    fn backend(&self) -> Backend {
        Backend::Postgres
    }
}

impl WriteConn for Writer {
    fn begin(&mut self) -> Result<Option<i64>> {
        Ok(Some(self.begin_then(None)?.0))
    }

    /// The lock, the begin and the check of the leases in one round trip.
    fn begin_checking(&mut self, known: &[(String, String)], now: i64) -> Result<Begun> {
        if known.is_empty() {
            return Ok(Begun::unchecked(self.begin()?));
        }
        match still_holding_literal(known, now) {
            Some(check) => {
                let (head, found) = self.begin_then(Some(&check))?;
                Ok(Begun {
                    head: Some(head),
                    holding: holding_of(known, found),
                })
            }
            None => {
                let head = self.begin()?;
                let holding = still_holding(self.sql(), known, now)?;
                Ok(Begun { head, holding })
            }
        }
    }

    fn sql(&self) -> &dyn Sql {
        match &self.client {
            Some(c) => c,
            None => &Disconnected,
        }
    }

    fn savepoint(&self) -> Result<()> {
        self.connected()?.savepoint()
    }

    fn release_savepoint(&self) -> Result<()> {
        self.connected()?.release_savepoint()
    }

    fn rollback_to_savepoint(&self) -> Result<()> {
        self.connected()?.rollback_to_savepoint()
    }

    fn in_transaction(&self) -> bool {
        self.open && self.client.as_ref().is_some_and(|c| !c.is_closed())
    }

    fn commit(&mut self, head: i64) -> Result<()> {
        let r = self.connected().and_then(|c| {
            if head != self.begun_at {
                c.commit_head(head)
            } else {
                c.commit()
            }
        });
        // A statement before the COMMIT may have failed, leaving the transaction open: the
        // rollback that follows a failed commit ends it (and does nothing where none is left).
        self.open = r.is_err();
        r
    }

    fn rollback(&mut self) {
        if !self.open {
            return;
        }
        self.open = false;
        let r = self.connected().and_then(PgClient::rollback);
        if let Err(e) = r {
            tracing::debug!(error = %e, "journal: rollback failed; dropping the connection");
            self.client = None;
        }
    }

    fn try_lock(&self, key: i64) -> Result<bool> {
        let held_elsewhere = self
            .sql()
            .query_row("SELECT pg_try_advisory_xact_lock(?1)", params![key])?
            .is_some_and(|r| r.int(0).ok() == Some(0));
        Ok(!held_elsewhere)
    }

    fn announce_floor(&self, session_id: &str, floor: i64) -> Result<()> {
        // Heard by other servers' tails (see the tail).
        self.sql().execute(
            "SELECT pg_notify('turnstream_floors', ?1)",
            params![&floor_notice(session_id, floor)],
        )?;
        Ok(())
    }

    fn probe(&mut self) -> Result<()> {
        self.rollback();
        let client = self.client()?;
        client.begin(BEGIN);
        match crate::journal::writer::write_probe(client) {
            Ok(()) => client.commit(),
            Err(e) => {
                if client.rollback().is_err() {
                    self.client = None;
                }
                Err(e)
            }
        }
    }

    fn stored_head(&mut self) -> Option<i64> {
        // Every begin reads the head anew, and the tail delivers whatever was kept.
        None
    }

    fn set_busy_timeout(&mut self, _wait: Duration) -> Result<()> {
        Ok(())
    }

    fn spoiled(&self) -> bool {
        self.client.as_ref().is_some_and(PgClient::spoiled)
    }
}
