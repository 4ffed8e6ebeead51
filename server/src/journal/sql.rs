//! The storage seam: the few SQL operations the journal's queries need, answered by SQLite
//! ([`super::sqlite`]) or PostgreSQL ([`super::postgres`]).
//!
//! Every query of the journal (accepting a message, the turn lifecycle, history, stream reads,
//! worker leases, retention) is written once, against [`Sql`], in the SQL both databases speak:
//! `?N` parameters (PostgreSQL's connection rewrites them to `$N`), integers as 64-bit,
//! `CAST(? AS BIGINT)` where an operator alone would leave a parameter's type open. So both
//! backends answer the same contract by construction; what differs per statement (how the head
//! is stored, how the schema version is read) is asked of the [`Sql`] itself, and what differs
//! beyond statements (transaction control, delivering commits, exclusive locks) of the database's
//! [`super::engine::Engine`].

use crate::error::{Error, Result};

/// One parameter of a statement.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Param<'a> {
    Int(i64),
    Text(&'a str),
    /// NULL where an integer goes.
    NullInt,
    /// NULL where text goes.
    NullText,
}

impl From<i64> for Param<'_> {
    fn from(v: i64) -> Self {
        Param::Int(v)
    }
}

impl<'a> From<&'a str> for Param<'a> {
    fn from(v: &'a str) -> Self {
        Param::Text(v)
    }
}

impl<'a> From<&'a String> for Param<'a> {
    fn from(v: &'a String) -> Self {
        Param::Text(v)
    }
}

impl<'a> From<Option<&'a str>> for Param<'a> {
    fn from(v: Option<&'a str>) -> Self {
        v.map_or(Param::NullText, Param::Text)
    }
}

impl<'a> From<&'a Option<String>> for Param<'a> {
    fn from(v: &'a Option<String>) -> Self {
        v.as_deref().map_or(Param::NullText, Param::Text)
    }
}

impl From<Option<i64>> for Param<'_> {
    fn from(v: Option<i64>) -> Self {
        v.map_or(Param::NullInt, Param::Int)
    }
}

/// `&[Param]` from a list of values: `params![session_id, seq]`.
macro_rules! params {
    ($($v:expr),* $(,)?) => {
        &[$($crate::journal::sql::Param::from($v)),*][..]
    };
}
pub(crate) use params;

/// One column's value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Val {
    Null,
    Int(i64),
    Text(String),
}

/// One row of a result.
#[derive(Debug, Clone)]
pub(crate) struct Row(pub Vec<Val>);

impl Row {
    fn col(&self, i: usize) -> Result<&Val> {
        self.0
            .get(i)
            .ok_or_else(|| Error::Corrupt(format!("a row without column {i}")))
    }

    pub fn int(&self, i: usize) -> Result<i64> {
        self.opt_int(i)?
            .ok_or_else(|| Error::Corrupt(format!("column {i} is NULL")))
    }

    pub fn opt_int(&self, i: usize) -> Result<Option<i64>> {
        match self.col(i)? {
            Val::Null => Ok(None),
            Val::Int(v) => Ok(Some(*v)),
            Val::Text(_) => Err(Error::Corrupt(format!("column {i} is text, not a number"))),
        }
    }

    pub fn text(&self, i: usize) -> Result<String> {
        self.opt_text(i)?
            .ok_or_else(|| Error::Corrupt(format!("column {i} is NULL")))
    }

    pub fn opt_text(&self, i: usize) -> Result<Option<String>> {
        match self.col(i)? {
            Val::Null => Ok(None),
            Val::Text(v) => Ok(Some(v.clone())),
            Val::Int(_) => Err(Error::Corrupt(format!("column {i} is a number, not text"))),
        }
    }
}

/// One journal event as a stream read sees it, borrowed from the database's row (replay is the
/// hot read path: no allocation per column).
#[derive(Debug, Clone, Copy)]
pub struct EventRow<'a> {
    pub seq: i64,
    pub session_id: &'a str,
    pub turn_id: Option<&'a str>,
    pub ts: i64,
    pub kind: &'a str,
    pub data: &'a str,
}

/// Which database answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

/// A connection (or an open transaction on one) of either database.
pub(crate) trait Sql {
    /// Runs a query and returns its rows.
    fn query(&self, sql: &str, params: &[Param<'_>]) -> Result<Vec<Row>>;

    /// Runs a statement and returns how many rows it changed.
    fn execute(&self, sql: &str, params: &[Param<'_>]) -> Result<u64>;

    /// Runs an events query (columns `id, session_id, turn_id, ts, kind, data`), handing each
    /// row to `each` without copying it.
    fn for_each_event(
        &self,
        sql: &str,
        params: &[Param<'_>],
        each: &mut dyn FnMut(EventRow<'_>) -> Result<()>,
    ) -> Result<()>;

    /// Inserts one journal event. A connection may hold it back and insert it with others
    /// before its next statement (PostgreSQL does: one round trip for a batch's events); it is
    /// in the transaction either way.
    fn insert_event(&self, e: &EventRow<'_>) -> Result<()> {
        self.execute(
            "INSERT INTO events(id, session_id, turn_id, kind, ts, data) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            params![e.seq, e.session_id, e.turn_id, e.kind, e.ts, e.data],
        )?;
        Ok(())
    }

    /// Runs a statement whose answer the job does not read (an INSERT of a new row, whose
    /// count it would not look at). A connection may hold it back and send it with its next
    /// statement, as it does events (PostgreSQL does); a failure then comes back from that
    /// statement or the commit, and fails the job alone only if it is the job's own next
    /// statement, else the batch. For what can fail only with the storage.
    fn execute_unanswered(&self, sql: &str, params: &[Param<'_>]) -> Result<()> {
        self.execute(sql, params)?;
        Ok(())
    }

    /// The last event id ever assigned (deleting events never lowers it).
    fn head(&self) -> Result<i64>;

    /// The schema version the database is at.
    fn schema_version(&self) -> Result<i64>;

    /// Which database this is.
    fn backend(&self) -> Backend;

    /// The first row of a query, if any.
    fn query_row(&self, sql: &str, params: &[Param<'_>]) -> Result<Option<Row>> {
        Ok(self.query(sql, params)?.into_iter().next())
    }

    /// The one integer a query answers (`COUNT(*)`, `MAX(..)`); `None` for no row or NULL.
    fn query_int(&self, sql: &str, params: &[Param<'_>]) -> Result<Option<i64>> {
        match self.query_row(sql, params)? {
            Some(row) => row.opt_int(0),
            None => Ok(None),
        }
    }

    /// The first column of every row, as text.
    fn query_texts(&self, sql: &str, params: &[Param<'_>]) -> Result<Vec<String>> {
        self.query(sql, params)?.iter().map(|r| r.text(0)).collect()
    }
}

/// `?, ?, ?` for an `IN (...)` of `n` values.
pub(crate) fn in_list(n: usize) -> String {
    let mut s = String::with_capacity(n * 2);
    for i in 0..n {
        if i > 0 {
            s.push(',');
        }
        s.push('?');
    }
    s
}
