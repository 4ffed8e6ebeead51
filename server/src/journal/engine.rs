//! What differs per storage engine, behind one trait each engine answers ([`super::sqlite`],
//! [`super::postgres`]): the opened database (its epoch, its head, where it is), the writer's
//! connection with its transaction control, read transactions, how a commit reaches the fan-out
//! (directly, or through PostgreSQL's tail, which hears every server's commits), the notice other
//! servers get of a raised floor, and exclusive locks. The journal's queries are written once,
//! against [`Sql`]; nothing outside the engines names a backend to decide what to do.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::fanout::{Committed, FanOut};
use super::sql::{Backend, Sql};
use crate::error::Result;
use crate::metrics::Metrics;

/// An opened (and migrated) database of one engine.
pub(super) trait Engine: Send + Sync {
    /// Which database this is.
    fn backend(&self) -> Backend;

    /// Whether other servers may write to the same journal.
    fn is_shared(&self) -> bool;

    /// The file, or the database URL without its password.
    fn location(&self) -> String;

    /// The journal's epoch (what every cursor of this database starts with).
    fn epoch(&self) -> &str;

    /// The last event id committed when the database was opened.
    fn head(&self) -> i64;

    /// The writer thread's connection (asked once, when the writer starts).
    fn write_conn(&self) -> Result<Box<dyn WriteConn>>;

    /// Runs `f` inside one read transaction (one snapshot) on a connection of its own; called
    /// from a blocking thread. `f`'s error, if any, is the answer.
    fn read(&self, f: &mut dyn FnMut(&dyn Sql) -> Result<()>) -> Result<()>;

    /// Starts delivering what commits to `fanout`, moving `head` (the last id delivered) as it
    /// goes; returns what the writer tells after each of its commits.
    fn deliver(
        &self,
        fanout: Arc<dyn FanOut>,
        head: Arc<AtomicI64>,
        metrics: Arc<Metrics>,
    ) -> Box<dyn Publish>;

    /// Sends `payload` to the other servers sharing the database (see [`super::broadcast`]);
    /// nowhere when there are none.
    fn broadcast(&self, _payload: String) {}

    /// Where other servers' broadcasts go (never called back when there are none).
    fn on_broadcast(&self, _sink: Arc<dyn super::broadcast::BroadcastSink>) {}

    /// Stops what [`Engine::deliver`] started.
    fn close(&self);

    /// Round trips to the database so far, where the engine counts them (PostgreSQL's).
    #[cfg(test)]
    fn round_trips(&self) -> u64 {
        0
    }
}

/// A write transaction begun ([`WriteConn::begin_checking`]).
pub(super) struct Begun {
    /// The head, on a shared database (see [`WriteConn::begin`]).
    pub head: Option<i64>,
    /// Which of the leases known holding still hold.
    pub holding: Vec<(String, String)>,
}

impl Begun {
    /// Begun with no lease to check.
    pub fn unchecked(head: Option<i64>) -> Begun {
        Begun {
            head,
            holding: Vec::new(),
        }
    }
}

/// What the writer does once one of its batches committed.
pub(super) trait Publish: Send {
    /// The batch committed `events` (in id order; none for a batch that appended nothing), the
    /// last id it used being `head`.
    fn committed(&self, head: i64, events: Vec<Committed>);
}

/// Publishing where this server is the only writer: the events go to the fan-out as they
/// commit, and the head moves with them.
pub(super) struct Direct {
    pub epoch: String,
    pub fanout: Arc<dyn FanOut>,
    pub head: Arc<AtomicI64>,
}

impl Publish for Direct {
    fn committed(&self, head: i64, events: Vec<Committed>) {
        self.head.store(head, Ordering::Release);
        self.fanout.committed(&self.epoch, events);
    }
}

/// The writer's connection, as each engine provides it: the transaction of a batch, a savepoint
/// per job within it, and what a transaction does beside its statements.
pub(super) trait WriteConn: Send {
    /// Begins a write transaction, ending one a failed rollback left open. A database shared
    /// by several servers answers the head as of this transaction, taken under a lock every
    /// writer takes first, so ids are handed out (and committed) in order across servers.
    fn begin(&mut self) -> Result<Option<i64>>;

    /// [`WriteConn::begin`], then, where it answered a head (a shared database), which of
    /// `known` (`(turn, lease token)` pairs the last batches found holding) hold their running
    /// turn's lease at `now` ([`still_holding`](super::leased_turns::still_holding)). An engine
    /// may ask both in one round trip.
    fn begin_checking(&mut self, known: &[(String, String)], now: i64) -> Result<Begun> {
        let head = self.begin()?;
        if head.is_none() || known.is_empty() {
            return Ok(Begun::unchecked(head));
        }
        let holding = super::leased_turns::still_holding(self.sql(), known, now)?;
        Ok(Begun { head, holding })
    }

    /// The connection inside the transaction [`WriteConn::begin`] opened.
    fn sql(&self) -> &dyn Sql;

    /// Opens the savepoint a job runs in (one at a time).
    fn savepoint(&self) -> Result<()>;

    /// Keeps what the job did since [`WriteConn::savepoint`], ending the savepoint.
    fn release_savepoint(&self) -> Result<()>;

    /// Undoes what the job did since [`WriteConn::savepoint`], ending the savepoint; statements
    /// run again afterwards even if one of the job's failed.
    fn rollback_to_savepoint(&self) -> Result<()>;

    /// Whether a transaction is still open (the database may roll one back by itself after an
    /// I/O error or a full disk).
    fn in_transaction(&self) -> bool;

    /// Commits; `head` is the last id the transaction used.
    fn commit(&mut self, head: i64) -> Result<()>;

    /// Rolls back whatever is left of the transaction.
    fn rollback(&mut self);

    /// Takes the exclusive lock `key` (any fixed number, one per purpose) for the rest of the
    /// transaction, unless another server holds it: false then. Always true where this server
    /// is the only writer (its one transaction at a time is exclusive already).
    fn try_lock(&self, key: i64) -> Result<bool>;

    /// Tells, at commit, the other servers sharing the database that retention raised
    /// `session_id`'s floor to `floor` (their replay tails cut back); nothing where this server
    /// is the only writer.
    fn announce_floor(&self, session_id: &str, floor: i64) -> Result<()>;

    /// A one-row write in a transaction of its own: after a probe succeeded, it puts the probe's
    /// row back to its small size.
    fn probe(&mut self) -> Result<()>;

    /// Bytes free on the file system that holds the database, when this process can tell (a
    /// database file on a Unix file system); `None` for a database elsewhere.
    fn free_bytes(&self) -> Option<u64> {
        None
    }

    /// After a commit reported as failed: the head as stored, where this writer alone moves it
    /// (such a commit may have been kept after all). `None` where every transaction reads the
    /// head anew at its begin and what was kept is delivered like any other commit.
    fn stored_head(&mut self) -> Option<i64>;

    /// Bounds the wait for a lock another connection holds.
    fn set_busy_timeout(&mut self, wait: Duration) -> Result<()>;

    /// Whether a failed statement left the transaction unusable (PostgreSQL aborts a
    /// transaction at its first failed statement, until it rolls back to a savepoint): a job
    /// without a savepoint of its own that failed that way loses its batch.
    fn spoiled(&self) -> bool;
}
