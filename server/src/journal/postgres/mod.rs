//! The PostgreSQL engine ([`Postgres`]): [`Sql`] over a pooled `tokio-postgres` connection with
//! its transaction control, the writer's connection ([`write_conn`]), the schema, and the tail
//! that fans out what any server committed.
//!
//! Several servers may share one database. Every write transaction begins by locking the one
//! row of `counter` (the head), and commits it raised with its events, so ids are handed out
//! and committed in order across servers: a reader never sees an id before the ones below it.
//! The journal's queries are the same as on SQLite (see [`super::sql`]); they run on blocking
//! threads (the writer thread, or a read's `spawn_blocking`), which wait on the async client.
//!
//! Nothing relies on the state of a session, so the URL may be a pooler's (PgBouncer in
//! transaction or session mode) that runs each transaction on whichever server connection is
//! free: every transaction sets its own `search_path` ([`BEGIN`], [`BEGIN_READ`]), advisory
//! locks are taken for the transaction only, `LISTEN` is the tail's own connection, which may go
//! elsewhere (see [`tail`]), and statements are prepared (and their plans kept) only where the
//! connection keeps its session: behind a pooler in transaction mode they are sent unnamed with
//! their parameters' types (`query_typed`: parse, bind and execute in one round trip, nothing
//! left on the server connection), see [`Statements`].

mod connect;
mod engine;
mod schema;
mod session;
mod tail;
mod write_conn;

pub(in crate::journal) use connect::{target, Target};

pub(super) use engine::Postgres;
pub use schema::SCHEMA_VERSION;

use bytes::BytesMut;
use deadpool_postgres::{Manager, ManagerConfig, Object, Pool, RecyclingMethod, Runtime};
use tokio::runtime::Handle;
use tokio_postgres::types::{to_sql_checked, IsNull, ToSql, Type};

use super::sql::{Backend, EventRow, Param, Row, Sql, Val};
use crate::error::{Error, Result};

/// Connections a server keeps to the database (reads, the writer, the tail).
const POOL_SIZE: usize = 16;
use connect::CONNECT_TIMEOUT;

/// The schema every table lives in (each transaction's `search_path`).
pub const SCHEMA: &str = "turnstream";

/// How every write transaction begins: the journal's schema first on the search path, for this
/// transaction only (a pooler may run the next one on another server connection, and refuses
/// the `options` startup parameter that would set it for the session).
pub(super) const BEGIN: &str = "BEGIN; SET LOCAL search_path TO turnstream";

/// How every read transaction begins: one snapshot (REPEATABLE READ), so a history page and its
/// cursor agree as on SQLite, and the journal's schema as in [`BEGIN`].
pub(super) const BEGIN_READ: &str =
    "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY; SET LOCAL search_path TO turnstream";

/// Whether `db` names a PostgreSQL database rather than a SQLite file.
pub fn is_url(db: &str) -> bool {
    db.starts_with("postgres://") || db.starts_with("postgresql://")
}

/// A pool of connections to `target`.
pub(super) fn pool(target: &Target) -> Result<Pool> {
    let manager = Manager::from_config(
        target.config.clone(),
        target.tls.clone(),
        ManagerConfig {
            recycling_method: RecyclingMethod::Fast,
        },
    );
    Pool::builder(manager)
        .max_size(POOL_SIZE)
        .runtime(Runtime::Tokio1)
        .create_timeout(Some(CONNECT_TIMEOUT))
        .wait_timeout(Some(CONNECT_TIMEOUT * 2))
        .build()
        .map_err(|e| Error::Config(format!("database pool: {e}")))
}

/// How statements are sent, for every connection of a server: prepared once per connection
/// (deadpool's cache; the server keeps their plans) where the database URL keeps a session of its
/// own, else unnamed. A prepared statement that went missing (or whose name was taken) on the
/// server connection means a pooler in transaction mode that the check at start did not see: from
/// then on statements are sent unnamed.
pub(super) struct Statements {
    unnamed: std::sync::atomic::AtomicBool,
}

impl Statements {
    /// Checks, at start, whether the database URL keeps its session (two pool connections).
    pub(super) async fn for_pool(pool: &Pool) -> Result<std::sync::Arc<Statements>> {
        let own = pool.get().await.map_err(pool_error)?;
        let other = pool.get().await.map_err(pool_error)?;
        let kept = session::keeps_session(&own, &other).await?;
        if !kept {
            tracing::info!(
                "journal: the database URL keeps no session of its own (a pooler in transaction \
                 mode): statements are sent unnamed, each parsed and planned where it runs"
            );
        }
        Ok(std::sync::Arc::new(Statements {
            unnamed: std::sync::atomic::AtomicBool::new(!kept),
        }))
    }

    fn unnamed(&self) -> bool {
        self.unnamed.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Notes `e`: a prepared statement unknown to the server connection (26000), or a name
    /// already taken there (42P05), means the connection is shared.
    fn saw(&self, e: &tokio_postgres::Error) {
        let shared = e
            .code()
            .is_some_and(|c| c.code() == "26000" || c.code() == "42P05");
        if shared
            && !self
                .unnamed
                .swap(true, std::sync::atomic::Ordering::Relaxed)
        {
            tracing::warn!(
                error = %e,
                "journal: a prepared statement did not outlive its transaction (a pooler in \
                 transaction mode): statements are sent unnamed from now on"
            );
        }
    }
}

/// A pooled connection, waited on from a blocking thread.
pub(super) struct PgClient {
    client: Object,
    statements: std::sync::Arc<Statements>,
    rt: Handle,
    /// A statement failed since the transaction began or last rolled back (to a savepoint):
    /// PostgreSQL refuses everything else in it until then.
    failed: std::cell::Cell<bool>,
    /// Events inserted and not yet sent: they go in one statement before the next one.
    pending: std::cell::RefCell<Pending>,
}

/// What a transaction-control statement does with the events held back.
enum Held {
    /// Sends them first: they are part of what the statement keeps or undoes.
    Send,
    /// Drops them: the statement ends the transaction they were in.
    Drop,
}

/// Journal events held back, column by column (they are sent as arrays).
#[derive(Default)]
struct Pending {
    ids: Vec<i64>,
    sessions: Vec<String>,
    turns: Vec<Option<String>>,
    kinds: Vec<String>,
    ts: Vec<i64>,
    data: Vec<String>,
}

impl PgClient {
    /// Takes a connection from `pool` (waiting from a blocking thread).
    pub(super) fn get(
        pool: &Pool,
        statements: &std::sync::Arc<Statements>,
        rt: &Handle,
    ) -> Result<PgClient> {
        let client = rt.block_on(pool.get()).map_err(pool_error)?;
        Ok(PgClient {
            client,
            statements: statements.clone(),
            rt: rt.clone(),
            failed: std::cell::Cell::new(false),
            pending: std::cell::RefCell::new(Pending::default()),
        })
    }

    /// Runs `next` (the future of one statement, not yet polled) after sending the events held
    /// back, in the same round trip: both requests are written before either answer is awaited,
    /// the insert first (the connection keeps their order). Should the insert fail, the
    /// transaction is aborted and `next` fails or rolls back with it; the insert's error is the
    /// answer.
    fn then<T>(
        &self,
        next: impl std::future::Future<Output = std::result::Result<T, tokio_postgres::Error>>,
    ) -> Result<T> {
        let p = std::mem::take(&mut *self.pending.borrow_mut());
        if p.ids.is_empty() {
            return self.track(self.rt.block_on(next));
        }
        const INSERT: &str = "INSERT INTO events(id, session_id, turn_id, kind, ts, data)
             SELECT * FROM UNNEST($1::bigint[], $2::text[], $3::text[], $4::text[],
                                  $5::bigint[], $6::text[])";
        let args: [(&(dyn ToSql + Sync), Type); 6] = [
            (&p.ids, Type::INT8_ARRAY),
            (&p.sessions, Type::TEXT_ARRAY),
            (&p.turns, Type::TEXT_ARRAY),
            (&p.kinds, Type::TEXT_ARRAY),
            (&p.ts, Type::INT8_ARRAY),
            (&p.data, Type::TEXT_ARRAY),
        ];
        let (inserted, r) = self.rt.block_on(async {
            // Prepared (or found prepared) before anything is sent: `next` must not overtake it.
            let stmt = if self.statements.unnamed() {
                None
            } else {
                match self.client.prepare_cached(INSERT).await {
                    Ok(stmt) => Some(stmt),
                    Err(e) => return (Err(e), None),
                }
            };
            let insert = async {
                match &stmt {
                    None => self.client.execute_typed(INSERT, &args).await,
                    Some(stmt) => {
                        let values: Vec<&(dyn ToSql + Sync)> =
                            args.iter().map(|(v, _)| *v).collect();
                        self.client.execute(stmt, &values).await
                    }
                }
            };
            // `join` polls the insert first: its request is written before `next`'s.
            let (inserted, r) = futures::future::join(insert, next).await;
            (inserted, Some(r))
        });
        self.track(inserted.map(|_| ()))?;
        match r {
            Some(r) => self.track(r),
            None => Err(Error::Corrupt("a statement was not sent".into())),
        }
    }

    /// Notes whether a statement failed (see `failed`, and [`Statements::saw`]).
    fn track<T>(&self, r: std::result::Result<T, tokio_postgres::Error>) -> Result<T> {
        if let Err(e) = &r {
            self.failed.set(true);
            self.statements.saw(e);
        }
        Ok(r?)
    }

    fn is_closed(&self) -> bool {
        self.client.is_closed()
    }

    /// Runs one transaction-control statement (`sql`, fixed text), first sending the events held
    /// back, or dropping them with the transaction they were in (`held`). `recovers`: once it
    /// ran, the transaction accepts statements again (see `failed`).
    fn control(&self, sql: &str, held: Held, recovers: bool) -> Result<()> {
        let r = match held {
            Held::Send => self.then(self.client.batch_execute(sql)),
            Held::Drop => {
                *self.pending.borrow_mut() = Pending::default();
                self.track(self.rt.block_on(self.client.batch_execute(sql)))
            }
        };
        if r.is_ok() && recovers {
            self.failed.set(false);
        }
        r
    }

    /// Begins a transaction: `how` is [`BEGIN`] or [`BEGIN_READ`].
    pub(super) fn begin(&self, how: &str) -> Result<()> {
        self.control(how, Held::Send, true)
    }

    /// Begins a write transaction ([`BEGIN`]) and locks the one row of `counter`, in one round
    /// trip: the head as it stands once the lock is held.
    pub(super) fn begin_counted(&self) -> Result<i64> {
        let sql = format!("{BEGIN}; SELECT head FROM counter FOR UPDATE");
        let messages = self.then(self.client.simple_query(&sql))?;
        self.failed.set(false);
        let head = messages
            .iter()
            .find_map(|m| match m {
                tokio_postgres::SimpleQueryMessage::Row(row) => Some(row.get(0)),
                _ => None,
            })
            .flatten()
            .ok_or_else(|| Error::Corrupt("the counter row is missing".into()))?;
        head.parse()
            .map_err(|e| Error::Corrupt(format!("the counter's head {head:?}: {e}")))
    }

    /// Commits a write transaction that appended events up to `head`: the events held back, the
    /// counter raised to `head`, a wake-up for every server's tail and the COMMIT go in one
    /// round trip. Should the insert or the update fail, the COMMIT is not run (a failed
    /// statement ends the simple query it is in) and the transaction is left to roll back.
    pub(super) fn commit_head(&self, head: i64) -> Result<()> {
        self.control(
            &format!("UPDATE counter SET head = {head}; NOTIFY turnstream_events; COMMIT"),
            Held::Send,
            false,
        )
    }

    pub(super) fn commit(&self) -> Result<()> {
        self.control("COMMIT", Held::Send, false)
    }

    pub(super) fn rollback(&self) -> Result<()> {
        self.control("ROLLBACK", Held::Drop, true)
    }

    /// Opens the savepoint of a write job (one at a time).
    pub(super) fn savepoint(&self) -> Result<()> {
        self.control("SAVEPOINT job", Held::Send, false)
    }

    pub(super) fn release_savepoint(&self) -> Result<()> {
        self.control("RELEASE job", Held::Send, false)
    }

    pub(super) fn rollback_to_savepoint(&self) -> Result<()> {
        self.control("ROLLBACK TO job; RELEASE job", Held::Send, true)
    }

    fn rows(&self, sql: &str, params: &[Param<'_>]) -> Result<Vec<tokio_postgres::Row>> {
        let sql = dollar_params(sql);
        self.then(async {
            if self.statements.unnamed() {
                return self.client.query_typed(&sql, &typed(params)).await;
            }
            let stmt = self.client.prepare_cached(&sql).await?;
            let args: Vec<&(dyn ToSql + Sync)> = params.iter().map(|p| p as _).collect();
            self.client.query(&stmt, &args).await
        })
    }
}

/// Each parameter with the type it is sent as: an unnamed statement has no server-inferred
/// types to consult, and every integer column of the schema is a BIGINT.
fn typed<'a>(params: &'a [Param<'a>]) -> Vec<(&'a (dyn ToSql + Sync), Type)> {
    params
        .iter()
        .map(|p| {
            let ty = match p {
                Param::Int(_) | Param::NullInt => Type::INT8,
                Param::Text(_) | Param::NullText => Type::TEXT,
            };
            (p as &(dyn ToSql + Sync), ty)
        })
        .collect()
}

/// `?N` and `?` parameters (SQLite's) as `$N` (PostgreSQL's); a bare `?` is the next number.
pub(super) fn dollar_params(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len() + 8);
    let mut next = 1;
    let mut chars = sql.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '?' {
            out.push(c);
            continue;
        }
        out.push('$');
        let mut digits = String::new();
        while let Some(d) = chars.peek().filter(|d| d.is_ascii_digit()) {
            digits.push(*d);
            chars.next();
        }
        if digits.is_empty() {
            out.push_str(&next.to_string());
            next += 1;
        } else {
            out.push_str(&digits);
        }
    }
    out
}

impl ToSql for Param<'_> {
    fn to_sql(
        &self,
        ty: &Type,
        out: &mut BytesMut,
    ) -> std::result::Result<IsNull, Box<dyn std::error::Error + Sync + Send>> {
        match self {
            Param::Int(v) if *ty == Type::INT4 => i32::try_from(*v)?.to_sql(ty, out),
            Param::Int(v) if *ty == Type::INT8 => v.to_sql(ty, out),
            Param::Text(v) if *ty != Type::INT4 && *ty != Type::INT8 => v.to_sql(ty, out),
            Param::NullInt | Param::NullText => Ok(IsNull::Yes),
            other => Err(format!("parameter {other:?} does not fit a column of type {ty}").into()),
        }
    }

    fn accepts(ty: &Type) -> bool {
        matches!(
            *ty,
            Type::INT4 | Type::INT8 | Type::TEXT | Type::VARCHAR | Type::BPCHAR | Type::NAME
        )
    }

    to_sql_checked!();
}

fn val(row: &tokio_postgres::Row, i: usize) -> Result<Val> {
    let ty = row.columns()[i].type_();
    Ok(if *ty == Type::INT8 {
        row.try_get::<_, Option<i64>>(i)?
            .map_or(Val::Null, Val::Int)
    } else if *ty == Type::INT4 {
        row.try_get::<_, Option<i32>>(i)?
            .map_or(Val::Null, |v| Val::Int(v.into()))
    } else if *ty == Type::INT2 {
        row.try_get::<_, Option<i16>>(i)?
            .map_or(Val::Null, |v| Val::Int(v.into()))
    } else if *ty == Type::BOOL {
        row.try_get::<_, Option<bool>>(i)?
            .map_or(Val::Null, |v| Val::Int(v.into()))
    } else {
        row.try_get::<_, Option<String>>(i)?
            .map_or(Val::Null, Val::Text)
    })
}

impl Sql for PgClient {
    fn query(&self, sql: &str, params: &[Param<'_>]) -> Result<Vec<Row>> {
        self.rows(sql, params)?
            .iter()
            .map(|r| {
                Ok(Row((0..r.len())
                    .map(|i| val(r, i))
                    .collect::<Result<_>>()?))
            })
            .collect()
    }

    fn execute(&self, sql: &str, params: &[Param<'_>]) -> Result<u64> {
        let sql = dollar_params(sql);
        self.then(async {
            if self.statements.unnamed() {
                return self.client.execute_typed(&sql, &typed(params)).await;
            }
            let stmt = self.client.prepare_cached(&sql).await?;
            let args: Vec<&(dyn ToSql + Sync)> = params.iter().map(|p| p as _).collect();
            self.client.execute(&stmt, &args).await
        })
    }

    fn insert_event(&self, e: &EventRow<'_>) -> Result<()> {
        let mut p = self.pending.borrow_mut();
        p.ids.push(e.seq);
        p.sessions.push(e.session_id.to_string());
        p.turns.push(e.turn_id.map(str::to_string));
        p.kinds.push(e.kind.to_string());
        p.ts.push(e.ts);
        p.data.push(e.data.to_string());
        Ok(())
    }

    fn for_each_event(
        &self,
        sql: &str,
        params: &[Param<'_>],
        each: &mut dyn FnMut(EventRow<'_>) -> Result<()>,
    ) -> Result<()> {
        for row in self.rows(sql, params)? {
            each(EventRow {
                seq: row.try_get(0)?,
                session_id: row.try_get(1)?,
                turn_id: row.try_get(2)?,
                ts: row.try_get(3)?,
                kind: row.try_get(4)?,
                data: row.try_get(5)?,
            })?;
        }
        Ok(())
    }

    fn head(&self) -> Result<i64> {
        // Qualified: the writer asks outside any transaction too.
        self.query_int("SELECT head FROM turnstream.counter", &[])?
            .ok_or_else(|| Error::Corrupt("the counter row is missing".into()))
    }

    fn schema_version(&self) -> Result<i64> {
        schema::version(self)
    }

    fn backend(&self) -> Backend {
        Backend::Postgres
    }
}

/// The payload of a `turnstream_floors` notification: `<floor> <session>` (session ids have no
/// spaces).
pub(super) fn floor_notice(session_id: &str, floor: i64) -> String {
    format!("{floor} {session_id}")
}

/// A pool error as a storage fault: whatever kept the server from a connection (the database
/// down, gone, refusing the login or at its connection limit), the same request may succeed
/// later.
pub(super) fn pool_error(e: deadpool_postgres::PoolError) -> Error {
    let causes = with_causes(&e);
    let hint = hint(&causes);
    Error::storage(
        crate::error::StorageFault::Unavailable,
        format!("cannot connect to the database: {causes}{hint}"),
    )
}

/// What usually fixes a failure to connect or to set up the schema, going by the database's
/// (or its pooler's) own words; empty when they say nothing known.
pub(super) fn hint(causes: &str) -> &'static str {
    const HINTS: &[(&str, &str)] = &[
        (
            "unsupported startup parameter",
            " (a connection pooler refuses a parameter the URL sets: PgBouncer accepts only \
             application_name, client_encoding, DateStyle, TimeZone and \
             standard_conforming_strings; take it out of the URL, or list it in the pooler's \
             ignore_startup_parameters)",
        ),
        (
            "password authentication failed",
            " (check the user and the password in the URL)",
        ),
        (
            "SASL authentication failed",
            " (check the user and the password in the URL)",
        ),
        (
            "no such user",
            " (the pooler knows no such user: check the user in the URL)",
        ),
        (
            "does not exist",
            " (check the name in the URL; a database must be created before a server uses it)",
        ),
        (
            "Connection refused",
            " (nothing accepts connections at that host and port: is the database, or its \
             pooler, running there?)",
        ),
        (
            "permission denied for database",
            " (the role needs CREATE on the database to create the turnstream schema: GRANT \
             CREATE ON DATABASE name TO role; or an administrator creates the schema and gives \
             the role USAGE and CREATE on it)",
        ),
        (
            "permission denied for schema",
            " (the role needs USAGE and CREATE on the turnstream schema, and to own its tables \
             to migrate them: GRANT USAGE, CREATE ON SCHEMA turnstream TO role)",
        ),
        (
            "permission denied for table",
            " (the role needs to own the turnstream schema's tables, or be granted them)",
        ),
    ];
    HINTS
        .iter()
        .find(|(words, _)| causes.contains(words))
        .map_or("", |(_, hint)| hint)
}

/// `e` and its causes on one line: they say what went wrong (a refused certificate, a
/// password, an unknown host, a pooler's refusal), where deadpool's and tokio-postgres's own
/// messages ("db error", "error connecting to server") do not.
pub(super) fn with_causes(e: &(dyn std::error::Error + 'static)) -> String {
    let mut message = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        if !message.ends_with(&text) {
            message.push_str(": ");
            message.push_str(&text);
        }
        source = cause.source();
    }
    message
}

#[cfg(test)]
mod tests {
    use super::{dollar_params, BEGIN, BEGIN_READ, SCHEMA};

    #[test]
    fn every_transaction_sets_the_schema() {
        let set = format!("; SET LOCAL search_path TO {SCHEMA}");
        assert!(BEGIN.ends_with(&set), "{BEGIN}");
        assert!(BEGIN_READ.ends_with(&set), "{BEGIN_READ}");
    }

    #[test]
    fn parameters_are_renumbered_for_postgres() {
        assert_eq!(
            dollar_params("SELECT ?1, ?2 WHERE a = ?1 AND b IN (?, ?) AND c > ? LIMIT ?12"),
            "SELECT $1, $2 WHERE a = $1 AND b IN ($1, $2) AND c > $3 LIMIT $12"
        );
    }
}
