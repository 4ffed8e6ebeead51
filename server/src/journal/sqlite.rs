//! The SQLite engine: one file, opened (created if missing) and migrated; [`Sql`] over a
//! `rusqlite` connection (or a transaction on one), with prepared statements cached per
//! connection; the writer's connection; read-only connections for reads. This server is the
//! file's only writer: commits go straight to the fan-out, and no lock or notice is needed
//! beside the write transaction.

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicI64;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rusqlite::types::{ToSqlOutput, Value, ValueRef};
use rusqlite::{Connection, ToSql};

use super::engine::{Direct, Engine, Publish, WriteConn};
use super::fanout::FanOut;
use super::schema;
use super::sql::{Backend, EventRow, Param, Row, Sql, Val};
use crate::error::{Error, Result};
use crate::metrics::Metrics;
use crate::mutex::lock;

/// A SQLite journal, opened.
pub(super) struct Sqlite {
    path: PathBuf,
    epoch: String,
    head: i64,
    busy_timeout: Duration,
    /// The connection that opened and migrated the file, until the writer takes it.
    writer: Mutex<Option<Connection>>,
    readers: Readers,
}

impl Sqlite {
    /// Opens (creating it and its folder if needed) and migrates the file at `path`.
    pub(super) fn open(path: &Path, busy_timeout: Duration) -> Result<Sqlite> {
        if let Some(dir) = path.parent() {
            if !dir.as_os_str().is_empty() {
                std::fs::create_dir_all(dir)?;
            }
        }
        let mut conn = Connection::open(path)?;
        schema::configure_with(&conn, busy_timeout)?;
        let epoch = schema::migrate(&mut conn)?;
        let head = Sql::head(&conn)?;
        Ok(Sqlite {
            path: path.to_path_buf(),
            epoch,
            head,
            busy_timeout,
            writer: Mutex::new(Some(conn)),
            readers: Readers::new(path, busy_timeout),
        })
    }
}

impl Engine for Sqlite {
    fn backend(&self) -> Backend {
        Backend::Sqlite
    }

    fn is_shared(&self) -> bool {
        false
    }

    fn location(&self) -> String {
        self.path.display().to_string()
    }

    fn epoch(&self) -> &str {
        &self.epoch
    }

    fn head(&self) -> i64 {
        self.head
    }

    fn write_conn(&self) -> Result<Box<dyn WriteConn>> {
        let conn = match lock(&self.writer).take() {
            Some(conn) => conn,
            None => {
                let conn = Connection::open(&self.path)?;
                schema::configure_with(&conn, self.busy_timeout)?;
                conn
            }
        };
        Ok(Box::new(conn))
    }

    fn read(&self, f: &mut dyn FnMut(&dyn Sql) -> Result<()>) -> Result<()> {
        self.readers.read(f)
    }

    fn deliver(
        &self,
        fanout: Arc<dyn FanOut>,
        head: Arc<AtomicI64>,
        _metrics: Arc<Metrics>,
    ) -> Box<dyn Publish> {
        Box::new(Direct {
            epoch: self.epoch.clone(),
            fanout,
            head,
        })
    }

    fn close(&self) {}
}

impl ToSql for Param<'_> {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(match self {
            Param::Int(v) => ToSqlOutput::Owned(Value::Integer(*v)),
            Param::Text(v) => ToSqlOutput::Borrowed(ValueRef::Text(v.as_bytes())),
            Param::NullInt | Param::NullText => ToSqlOutput::Owned(Value::Null),
        })
    }
}

fn val(v: ValueRef<'_>) -> Result<Val> {
    Ok(match v {
        ValueRef::Null => Val::Null,
        ValueRef::Integer(i) => Val::Int(i),
        ValueRef::Text(t) => Val::Text(
            std::str::from_utf8(t)
                .map_err(|e| Error::Corrupt(format!("stored text is not UTF-8: {e}")))?
                .to_string(),
        ),
        ValueRef::Real(_) | ValueRef::Blob(_) => {
            return Err(Error::Corrupt("a column of an unexpected type".into()))
        }
    })
}

fn text<'r>(row: &'r rusqlite::Row<'_>, i: usize) -> Result<&'r str> {
    row.get_ref(i)?
        .as_str()
        .map_err(|e| Error::Corrupt(format!("column {i}: {e}")))
}

impl Sql for Connection {
    fn query(&self, sql: &str, params: &[Param<'_>]) -> Result<Vec<Row>> {
        let mut stmt = self.prepare_cached(sql)?;
        let n = stmt.column_count();
        let mut rows = stmt.query(rusqlite::params_from_iter(params.iter()))?;
        let mut out = Vec::new();
        while let Some(row) = rows.next()? {
            let mut vals = Vec::with_capacity(n);
            for i in 0..n {
                vals.push(val(row.get_ref(i)?)?);
            }
            out.push(Row(vals));
        }
        Ok(out)
    }

    fn execute(&self, sql: &str, params: &[Param<'_>]) -> Result<u64> {
        Ok(self
            .prepare_cached(sql)?
            .execute(rusqlite::params_from_iter(params.iter()))? as u64)
    }

    fn for_each_event(
        &self,
        sql: &str,
        params: &[Param<'_>],
        each: &mut dyn FnMut(EventRow<'_>) -> Result<()>,
    ) -> Result<()> {
        let mut stmt = self.prepare_cached(sql)?;
        let mut rows = stmt.query(rusqlite::params_from_iter(params.iter()))?;
        while let Some(row) = rows.next()? {
            let turn_id = match row.get_ref(2)? {
                ValueRef::Null => None,
                _ => Some(text(row, 2)?),
            };
            each(EventRow {
                seq: row.get(0)?,
                session_id: text(row, 1)?,
                turn_id,
                ts: row.get(3)?,
                kind: text(row, 4)?,
                data: text(row, 5)?,
            })?;
        }
        Ok(())
    }

    fn head(&self) -> Result<i64> {
        // AUTOINCREMENT's counter: never lowered, even when cleanup deletes the newest rows.
        Ok(self
            .query_int("SELECT seq FROM sqlite_sequence WHERE name = 'events'", &[])?
            .unwrap_or(0))
    }

    fn schema_version(&self) -> Result<i64> {
        Ok(self.query_row("PRAGMA user_version", [], |r| r.get(0))?)
    }

    fn backend(&self) -> Backend {
        Backend::Sqlite
    }
}

/// Runs a transaction-control statement from the connection's statement cache: parsed once,
/// not on every batch and job as `execute_batch` would.
fn control(conn: &Connection, sql: &str) -> Result<()> {
    conn.prepare_cached(sql)?.execute([])?;
    Ok(())
}

impl WriteConn for Connection {
    fn begin(&mut self) -> Result<Option<i64>> {
        self.rollback();
        // IMMEDIATE: take the write lock now, not at the first write halfway through a batch.
        control(self, "BEGIN IMMEDIATE")?;
        Ok(None)
    }

    fn sql(&self) -> &dyn Sql {
        self
    }

    fn savepoint(&self) -> Result<()> {
        control(self, "SAVEPOINT job")
    }

    fn release_savepoint(&self) -> Result<()> {
        control(self, "RELEASE job")
    }

    fn rollback_to_savepoint(&self) -> Result<()> {
        Ok(self.execute_batch("ROLLBACK TO job; RELEASE job")?)
    }

    fn try_lock(&self, _key: i64) -> Result<bool> {
        Ok(true)
    }

    fn announce_floor(&self, _session_id: &str, _floor: i64) -> Result<()> {
        Ok(())
    }

    fn in_transaction(&self) -> bool {
        !self.is_autocommit()
    }

    fn commit(&mut self, _head: i64) -> Result<()> {
        control(self, "COMMIT")
    }

    fn rollback(&mut self) {
        // A failed rollback can leave the connection inside a transaction, where every later
        // BEGIN would fail; the next begin tries again.
        if !self.is_autocommit() {
            if let Err(e) = self.execute_batch("ROLLBACK") {
                tracing::debug!(error = %e, "journal: rollback failed");
            }
        }
    }

    fn probe(&mut self) -> Result<()> {
        self.rollback();
        super::writer::write_probe(self)
    }

    fn free_bytes(&self) -> Option<u64> {
        free_bytes(Path::new(self.path().filter(|p| !p.is_empty())?))
    }

    fn stored_head(&mut self) -> Option<i64> {
        Sql::head(self).ok()
    }

    fn set_busy_timeout(&mut self, wait: Duration) -> Result<()> {
        Ok(self.busy_timeout(wait)?)
    }

    fn spoiled(&self) -> bool {
        // A failed statement undoes itself alone; a transaction SQLite rolled back is seen by
        // `in_transaction`.
        false
    }
}

/// Bytes the file system holding `path` has free for this process (`statvfs`'s `f_bavail`).
#[cfg(unix)]
fn free_bytes(path: &std::path::Path) -> Option<u64> {
    let fs = rustix::fs::statvfs(path).ok()?;
    Some(fs.f_bavail.saturating_mul(fs.f_frsize))
}

#[cfg(not(unix))]
fn free_bytes(_path: &std::path::Path) -> Option<u64> {
    None
}

/// Read connections of a SQLite journal: opened read-only on demand, a few kept idle.
struct Readers {
    path: PathBuf,
    busy_timeout: Duration,
    idle: Mutex<Vec<Connection>>,
}

/// Idle read connections kept open.
const MAX_IDLE_READERS: usize = 16;

impl Readers {
    fn new(path: &Path, busy_timeout: Duration) -> Readers {
        Readers {
            path: path.to_path_buf(),
            busy_timeout,
            idle: Mutex::new(Vec::new()),
        }
    }

    /// Runs `f` inside one read transaction on a pooled connection.
    fn read(&self, f: &mut dyn FnMut(&dyn Sql) -> Result<()>) -> Result<()> {
        let conn = match lock(&self.idle).pop() {
            Some(c) => c,
            None => {
                let conn = Connection::open_with_flags(
                    &self.path,
                    rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY
                        | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
                )?;
                schema::configure_with(&conn, self.busy_timeout)?;
                conn
            }
        };
        let result = (|| {
            let tx = conn.unchecked_transaction()?;
            let r = f(&*tx);
            drop(tx);
            r
        })();
        let mut pool = lock(&self.idle);
        if pool.len() < MAX_IDLE_READERS {
            pool.push(conn);
        }
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rusqlite::StatementStatus;

    type TestResult = std::result::Result<(), Box<dyn std::error::Error>>;

    /// The journal's statements are prepared once and run with new values every time: on a
    /// connection the journal configured, binding new values recompiles none of them (SQLite
    /// otherwise recompiles, on the next run, a statement whose bound `LIMIT` or subquery key
    /// could steer its plan).
    #[test]
    fn binding_new_values_recompiles_no_statement() -> TestResult {
        let mut conn = Connection::open_in_memory()?;
        schema::configure(&conn)?;
        schema::migrate(&mut conn)?;
        let page = "SELECT id FROM events WHERE session_id = ?1 AND id > ?2 ORDER BY id LIMIT ?3";
        let leaf = "SELECT (SELECT leaf_id FROM leaves WHERE session_id = ?1),
                (SELECT reply_id FROM turns WHERE session_id = ?1
                 ORDER BY queued_seq DESC LIMIT 1)";
        for i in 0..4i64 {
            let session = format!("s{i}");
            conn.query(
                page,
                crate::journal::sql::params![session.as_str(), i, i + 1],
            )?;
            conn.query(leaf, crate::journal::sql::params![session.as_str()])?;
        }
        for sql in [page, leaf] {
            let stmt = conn.prepare_cached(sql)?;
            assert_eq!(
                stmt.get_status(StatementStatus::RePrepare),
                0,
                "recompiled on new values: {sql}"
            );
        }
        Ok(())
    }
}
