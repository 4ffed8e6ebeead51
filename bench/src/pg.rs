//! PostgreSQL for the PostgreSQL rows: the cluster named by `TURNSTREAM_BENCH_DATABASE_URL` (an
//! admin URL, e.g. `postgres://postgres@127.0.0.1:5432/postgres`), a fresh database per system,
//! and the raw-insert ceiling of figure 1.

use std::sync::Mutex;
use std::time::Instant;

use anyhow::{anyhow, bail, Context, Result};
use tokio_postgres::NoTls;

/// The environment variable naming the cluster.
pub const ENV: &str = "TURNSTREAM_BENCH_DATABASE_URL";

/// The environment variable naming a connection pooler in transaction mode in front of that
/// cluster (`scripts/pg-pooler.sh`): the rows "through PgBouncer" connect the servers there.
pub const POOLER_ENV: &str = "TURNSTREAM_BENCH_POOLER_URL";

/// The pooler's URL, when the rows through it run.
pub fn pooler_url() -> Option<String> {
    std::env::var(POOLER_ENV)
        .ok()
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
}

/// The database of `url` (a fresh one's direct URL) reached through `pooler` instead.
pub fn through(pooler: &str, url: &str) -> Result<String> {
    let path = url.split('?').next().unwrap_or(url);
    let name = path
        .rsplit_once('/')
        .map(|(_, name)| name)
        .filter(|name| !name.is_empty() && !name.contains('@'))
        .ok_or_else(|| anyhow!("no database name in {}", redact(url)))?;
    with_database(pooler, name)
}

/// Databases this run created (dropped at the end).
static CREATED: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// The admin URL, or why the PostgreSQL rows are skipped.
pub fn admin_url() -> std::result::Result<String, String> {
    match std::env::var(ENV) {
        Ok(v) if !v.trim().is_empty() => Ok(v.trim().to_string()),
        _ => Err(format!("PostgreSQL rows skipped: {ENV} not set")),
    }
}

/// `url` with its database name replaced by `db` (query string kept).
pub fn with_database(url: &str, db: &str) -> Result<String> {
    let scheme_end = url
        .find("://")
        .map(|i| i + 3)
        .ok_or_else(|| anyhow!("{ENV} is not a postgres:// URL"))?;
    let (head, query) = match url.find('?') {
        Some(q) => (&url[..q], &url[q..]),
        None => (url, ""),
    };
    let authority_end = head[scheme_end..]
        .find('/')
        .map_or(head.len(), |i| scheme_end + i);
    Ok(format!("{}/{db}{query}", &head[..authority_end]))
}

async fn connect(url: &str) -> Result<tokio_postgres::Client> {
    let (client, conn) = tokio_postgres::connect(url, NoTls)
        .await
        .with_context(|| format!("connecting to {}", redact(url)))?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(client)
}

/// The URL without its password, for messages.
fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(s), Some(at)) if at > s => {
            let user = &url[s + 3..at];
            match user.split_once(':') {
                Some((u, _)) => format!("{}{u}:***{}", &url[..s + 3], &url[at..]),
                None => url.to_string(),
            }
        }
        _ => url.to_string(),
    }
}

/// Creates a fresh, empty database on the cluster of `admin` and returns its URL. Its name
/// starts with `ts_` so a private test cluster's `start` drops it if this run could not.
pub async fn fresh_database(admin: &str, label: &str) -> Result<String> {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let name = format!("ts_bench_{}_{n}_{label}", std::process::id());
    if !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
        bail!("bad database label {label:?}");
    }
    let client = connect(admin).await?;
    client
        .batch_execute(&format!("CREATE DATABASE {name}"))
        .await
        .with_context(|| format!("CREATE DATABASE {name}"))?;
    if let Ok(mut v) = CREATED.lock() {
        v.push(name.clone());
    }
    with_database(admin, &name)
}

/// Drops every database this run created (best effort: the servers using them are gone).
pub async fn drop_created(admin: &str) {
    let names: Vec<String> = match CREATED.lock() {
        Ok(mut v) => std::mem::take(&mut *v),
        Err(_) => return,
    };
    if names.is_empty() {
        return;
    }
    let Ok(client) = connect(admin).await else {
        return;
    };
    for name in names {
        if let Err(e) = client
            .batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
            .await
        {
            eprintln!("could not drop database {name}: {e}");
        }
    }
}

/// The cluster's version and durability settings, for the report's header.
pub async fn describe(admin: &str) -> Result<String> {
    let client = connect(admin).await?;
    let mut parts = Vec::new();
    for setting in [
        "server_version",
        "fsync",
        "synchronous_commit",
        "wal_sync_method",
    ] {
        let row = client.query_one(&format!("SHOW {setting}"), &[]).await?;
        let v: String = row.try_get(0)?;
        parts.push(if setting == "server_version" {
            format!("PostgreSQL {v}")
        } else {
            format!("{setting}={v}")
        });
    }
    Ok(format!(
        "{} at {}, a fresh database per system",
        parts.join(", "),
        host_port(admin)
    ))
}

/// `host:port` of a URL (no user, password or database).
pub fn host_port(url: &str) -> &str {
    let rest = url.find("://").map_or(url, |i| &url[i + 3..]);
    let rest = rest.rsplit_once('@').map_or(rest, |(_, r)| r);
    rest.split(['/', '?']).next().unwrap_or(rest)
}

/// One event row of the journal.
type EventRow = (i64, String, Option<String>, String, i64, String);

/// The events of the journal in `url` (schema `turnstream`), in id order.
async fn journal_events(url: &str) -> Result<Vec<EventRow>> {
    let client = connect(url).await?;
    let rows = client
        .query(
            "SELECT id, session_id, turn_id, kind, ts, data FROM turnstream.events ORDER BY id",
            &[],
        )
        .await?;
    rows.iter()
        .map(|r| {
            Ok((
                r.try_get(0)?,
                r.try_get(1)?,
                r.try_get(2)?,
                r.try_get(3)?,
                r.try_get(4)?,
                r.try_get(5)?,
            ))
        })
        .collect()
}

/// How the raw ceiling writes each batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RawMode {
    /// One INSERT round trip per row, as the journal writer does.
    RowByRow,
    /// The same, plus SAVEPOINT/RELEASE round trips around each row, as the writer does per job.
    Savepoints,
    /// One multi-row INSERT per batch: what fewer round trips would reach.
    MultiRow,
}

/// What a raw insert run measured.
pub struct Raw {
    pub rows: u64,
    pub secs: f64,
}

impl Raw {
    pub fn rate(&self) -> f64 {
        self.rows as f64 / self.secs
    }
}

/// Re-inserts the events of the journal in `from` into `into` (a database with the journal's
/// schema, empty), `batch` rows per transaction, each transaction first locking the counter row
/// as every journal write does.
pub async fn raw_insert(from: &str, into: &str, batch: usize, mode: RawMode) -> Result<Raw> {
    let rows = journal_events(from).await?;
    let client = connect(into).await?;
    client.batch_execute("SET search_path = turnstream").await?;
    let insert = client
        .prepare(
            "INSERT INTO events(id, session_id, turn_id, kind, ts, data) VALUES ($1, $2, $3, $4, $5, $6)",
        )
        .await?;
    let batch = batch.max(1);
    let t0 = Instant::now();
    for chunk in rows.chunks(batch) {
        client.batch_execute("BEGIN").await?;
        client
            .query("SELECT head FROM counter FOR UPDATE", &[])
            .await?;
        match mode {
            RawMode::RowByRow | RawMode::Savepoints => {
                for (id, s, t, k, ts, d) in chunk {
                    if mode == RawMode::Savepoints {
                        client.batch_execute("SAVEPOINT job").await?;
                    }
                    client.execute(&insert, &[id, s, t, k, ts, d]).await?;
                    if mode == RawMode::Savepoints {
                        client.batch_execute("RELEASE job").await?;
                    }
                }
            }
            RawMode::MultiRow => {
                let ids: Vec<i64> = chunk.iter().map(|r| r.0).collect();
                let sessions: Vec<&str> = chunk.iter().map(|r| r.1.as_str()).collect();
                let turns: Vec<Option<&str>> = chunk.iter().map(|r| r.2.as_deref()).collect();
                let kinds: Vec<&str> = chunk.iter().map(|r| r.3.as_str()).collect();
                let tss: Vec<i64> = chunk.iter().map(|r| r.4).collect();
                let datas: Vec<&str> = chunk.iter().map(|r| r.5.as_str()).collect();
                client
                    .execute(
                        "INSERT INTO events(id, session_id, turn_id, kind, ts, data)
                         SELECT * FROM unnest($1::bigint[], $2::text[], $3::text[], $4::text[], $5::bigint[], $6::text[])",
                        &[&ids, &sessions, &turns, &kinds, &tss, &datas],
                    )
                    .await?;
            }
        }
        let last = chunk.last().map_or(0, |r| r.0);
        client
            .execute("UPDATE counter SET head = $1", &[&last])
            .await?;
        client.batch_execute("NOTIFY turnstream_events").await?;
        client.batch_execute("COMMIT").await?;
    }
    Ok(Raw {
        rows: rows.len() as u64,
        secs: t0.elapsed().as_secs_f64(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replaces_the_database_name() {
        let u = |s| with_database(s, "ts_x").unwrap_or_default();
        assert_eq!(
            u("postgres://postgres@127.0.0.1:5432/postgres"),
            "postgres://postgres@127.0.0.1:5432/ts_x"
        );
        assert_eq!(u("postgres://u:p@h:1"), "postgres://u:p@h:1/ts_x");
        assert_eq!(
            u("postgresql://u@h/db?sslmode=disable"),
            "postgresql://u@h/ts_x?sslmode=disable"
        );
        assert_eq!(redact("postgres://u:secret@h/db"), "postgres://u:***@h/db");
        assert_eq!(
            through(
                "postgres://p@127.0.0.1:6432/postgres",
                "postgres://u@h:5/ts_a"
            )
            .ok(),
            Some("postgres://p@127.0.0.1:6432/ts_a".to_string())
        );
        assert_eq!(
            host_port("postgres://u:p@127.0.0.1:5/db?x=1"),
            "127.0.0.1:5"
        );
    }
}
