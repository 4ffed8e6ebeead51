//! PostgreSQL for the tests: when `TURNSTREAM_TEST_DATABASE_URL` names a cluster's admin URL
//! (`./run test` starts a private one with `scripts/pg-cluster.sh`), each test server gets a
//! fresh database of its own, dropped when the server is.
//!
//! - `TURNSTREAM_TEST_DATABASE_URL`: the admin URL, e.g. `postgres://postgres@127.0.0.1:PORT/postgres`.
//! - `TURNSTREAM_TEST_NODES`: how many server processes share each database (default 1).
//! - `TURNSTREAM_TEST_PG_CTL`: a command line that restarts the cluster (`pg_ctl restart -m fast`).
//! - `TURNSTREAM_TEST_PSQL`: the `psql` to run (default `psql` on `PATH`).
//! - `TURNSTREAM_TEST_POOLER_URL`: a connection pooler in front of that cluster
//!   (`scripts/pg-pooler.sh`): the servers connect through it, each to its test's database;
//!   the tests themselves (`psql`) connect directly.
//! - `TURNSTREAM_TEST_LISTEN_DIRECT=1`: with a pooler, the servers also get
//!   `--database-listen-url`, a direct URL to their database.
//! - `TURNSTREAM_TEST_EXPECT_POLLING`: `1` or `0`, what every server's
//!   `turnstream_journal_polling` must settle at (checked by `pooler.rs`).

use std::process::{Command, Stdio};

use super::TestResult;

/// The cluster's admin URL, when the tests run on PostgreSQL.
pub fn admin_url() -> Option<String> {
    std::env::var("TURNSTREAM_TEST_DATABASE_URL")
        .ok()
        .filter(|u| !u.trim().is_empty())
}

/// The pooler the servers connect through, if any.
pub fn pooler_url() -> Option<String> {
    std::env::var("TURNSTREAM_TEST_POOLER_URL")
        .ok()
        .filter(|u| !u.trim().is_empty())
}

/// Whether the servers get a direct `--database-listen-url` beside the pooler's URL.
pub fn listen_direct() -> bool {
    pooler_url().is_some() && std::env::var("TURNSTREAM_TEST_LISTEN_DIRECT").as_deref() == Ok("1")
}

/// How many server processes each [`super::TestServer`] starts (`TURNSTREAM_TEST_NODES`, only on
/// PostgreSQL; 1 otherwise).
pub fn nodes() -> usize {
    if admin_url().is_none() {
        return 1;
    }
    std::env::var("TURNSTREAM_TEST_NODES")
        .ok()
        .and_then(|n| n.trim().parse::<usize>().ok())
        .filter(|n| *n >= 1)
        .unwrap_or(1)
}

/// Runs the command line in `TURNSTREAM_TEST_PG_CTL` that restarts the cluster (returns when
/// it accepts connections again).
pub fn restart_cluster() -> TestResult {
    let line = std::env::var("TURNSTREAM_TEST_PG_CTL")
        .map_err(|_| "TURNSTREAM_TEST_PG_CTL is not set: no way to restart PostgreSQL")?;
    let status = Command::new("sh").arg("-c").arg(&line).status()?;
    if !status.success() {
        return Err(format!("{line:?} failed: {status}").into());
    }
    Ok(())
}

fn psql() -> String {
    std::env::var("TURNSTREAM_TEST_PSQL").unwrap_or_else(|_| "psql".to_string())
}

/// Runs one SQL statement through `psql` on the database at `url`; its output, trimmed.
pub fn sql(url: &str, statement: &str) -> TestResult<String> {
    let out = Command::new(psql())
        .args([
            "-X",
            "-q",
            "-At",
            "-v",
            "ON_ERROR_STOP=1",
            "-d",
            url,
            "-c",
            statement,
        ])
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run {}: {e}", psql()))?;
    if !out.status.success() {
        return Err(format!(
            "psql {statement:?} failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )
        .into());
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// `url` with its database name replaced by `name` (any query string is kept).
pub fn with_database(url: &str, name: &str) -> TestResult<String> {
    let scheme_end = url.find("://").ok_or("a database URL has a scheme")? + 3;
    let (head, rest) = url.split_at(scheme_end);
    let (rest, query) = match rest.find('?') {
        Some(i) => rest.split_at(i),
        None => (rest, ""),
    };
    let authority = rest.split('/').next().unwrap_or("");
    Ok(format!("{head}{authority}/{name}{query}"))
}

/// A database of its own for one test server, dropped (best effort) with this value.
#[derive(Debug)]
pub struct TestDatabase {
    /// The database, directly: `postgres://.../ts_<random>`.
    pub url: String,
    /// What the servers are given: [`TestDatabase::url`], or the same database through the
    /// pooler (`TURNSTREAM_TEST_POOLER_URL`).
    pub server_url: String,
    pub name: String,
    admin: String,
}

impl TestDatabase {
    pub fn create(admin: &str) -> TestResult<TestDatabase> {
        let name = format!("ts_{:016x}", rand::random::<u64>());
        sql(admin, &format!("CREATE DATABASE {name}"))?;
        let url = with_database(admin, &name)?;
        Ok(TestDatabase {
            server_url: match pooler_url() {
                Some(pooler) => with_database(&pooler, &name)?,
                None => url.clone(),
            },
            url,
            name,
            admin: admin.to_string(),
        })
    }
}

impl Drop for TestDatabase {
    fn drop(&mut self) {
        let _ = sql(
            &self.admin,
            &format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name),
        );
    }
}
