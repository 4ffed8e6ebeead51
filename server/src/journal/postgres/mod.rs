//! The PostgreSQL engine ([`Postgres`]): [`Sql`](super::sql::Sql) over a pooled `tokio-postgres` connection ([`client`]) with
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

mod client;
mod connect;
mod engine;
mod schema;
mod session;
mod tail;
mod write_conn;

pub(in crate::journal) use connect::{target, Target};

use client::PgClient;
pub(super) use engine::Postgres;
pub use schema::SCHEMA_VERSION;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};

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
    /// Round trips the connections made (see [`PgClient::then`]).
    #[cfg(test)]
    round_trips: std::sync::atomic::AtomicU64,
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
            #[cfg(test)]
            round_trips: std::sync::atomic::AtomicU64::new(0),
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
mod tests;
