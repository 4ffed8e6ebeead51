//! The SQLite and PostgreSQL schemas end the same: after every migration, the same tables with the
//! same columns. Each side is the schema the real binary writes: a server started once on a
//! fresh SQLite file (read back through `sqlite_schema` and `pragma_table_info`) and once on a
//! fresh PostgreSQL database (read back through `information_schema`, in the server's own schema).
//!
//! Columns are compared by name, and by type where the mapping is obvious: SQLite's `INTEGER`
//! is PostgreSQL's `bigint` (SQLite's integers are 64-bit, and the PostgreSQL schema uses 64-bit
//! integers throughout, so a PostgreSQL `integer` or `smallint` is a difference), `TEXT` is
//! `text`, `BLOB` is `bytea`, `REAL` is `double precision`. A column whose type is outside that
//! mapping on either side is compared by name only. Column order, nullability, defaults, keys
//! and indexes are not compared. Tables that exist on one side only by design are named in
//! [`SQLITE_ONLY`] and [`POSTGRES_ONLY`], each with why; a name there that no longer is on its
//! side only is reported too, so the lists stay true.
//!
//! The PostgreSQL half needs `TURNSTREAM_TEST_DATABASE_URL` (set by `./run test` for its private
//! cluster); without it the test reads SQLite's schema only and says on stderr that it skipped
//! the comparison.

mod support;

use std::collections::BTreeMap;
use std::path::Path;

use support::{pg, TestResult, TestServer};
use turnstream_server::journal::postgres::SCHEMA;

/// Tables only SQLite has, and why.
const SQLITE_ONLY: &[&str] = &[
    // SQLite's own record of the last id of each AUTOINCREMENT table (`events.id`,
    // `messages.seq`): SQLite creates it, no migration does. PostgreSQL keeps `messages.seq` in
    // the sequence of its BIGSERIAL and hands out event ids from `counter`.
    "sqlite_sequence",
];

/// Tables only PostgreSQL has, and why.
const POSTGRES_ONLY: &[&str] = &[
    // The head, the last event id handed out: every write transaction locks its one row first,
    // so ids commit in order across servers sharing the database. On SQLite one writer holds
    // the database and `events.id` is AUTOINCREMENT.
    "counter",
];

/// One column as its database declares it, and its type in the mapping both sides share
/// (`None` when no mapping is obvious: compared by name only).
#[derive(Debug, Clone)]
struct Column {
    declared: String,
    kind: Option<&'static str>,
}

/// Table name -> column name -> column.
type Schema = BTreeMap<String, BTreeMap<String, Column>>;

/// A SQLite declared type in the shared mapping.
fn sqlite_kind(declared: &str) -> Option<&'static str> {
    match declared.to_ascii_uppercase().as_str() {
        "INTEGER" => Some("64-bit integer"),
        "TEXT" => Some("text"),
        "BLOB" => Some("bytes"),
        "REAL" => Some("64-bit float"),
        _ => None,
    }
}

/// A PostgreSQL `information_schema.columns.data_type` in the shared mapping.
fn postgres_kind(data_type: &str) -> Option<&'static str> {
    match data_type {
        "bigint" => Some("64-bit integer"),
        "integer" => Some("32-bit integer"),
        "smallint" => Some("16-bit integer"),
        "text" => Some("text"),
        "bytea" => Some("bytes"),
        "double precision" => Some("64-bit float"),
        "real" => Some("32-bit float"),
        _ => None,
    }
}

/// Every table of the SQLite database at `path` with its columns.
fn sqlite_schema(path: &Path) -> TestResult<Schema> {
    let conn =
        rusqlite::Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)?;
    let tables: Vec<String> = conn
        .prepare("SELECT name FROM sqlite_schema WHERE type = 'table'")?
        .query_map([], |r| r.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    let mut schema = Schema::new();
    for table in tables {
        let columns: Vec<(String, String)> = conn
            .prepare("SELECT name, type FROM pragma_table_info(?1)")?
            .query_map([&table], |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect::<rusqlite::Result<_>>()?;
        let entry = schema.entry(table).or_default();
        for (name, declared) in columns {
            let kind = sqlite_kind(&declared);
            entry.insert(name, Column { declared, kind });
        }
    }
    Ok(schema)
}

/// Every base table of the server's schema in the PostgreSQL database at `url` with its columns.
async fn postgres_schema(url: &str) -> TestResult<Schema> {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls).await?;
    let connection = tokio::spawn(connection);
    // information_schema's columns are domains over `name` and `varchar`: read as text.
    let rows = client
        .query(
            "SELECT c.table_name::text, c.column_name::text, c.data_type::text
               FROM information_schema.columns c
               JOIN information_schema.tables t
                 ON t.table_schema = c.table_schema AND t.table_name = c.table_name
              WHERE c.table_schema::text = $1 AND t.table_type = 'BASE TABLE'",
            &[&SCHEMA],
        )
        .await?;
    drop(client);
    connection.await??;
    let mut schema = Schema::new();
    for row in rows {
        let table: String = row.try_get(0)?;
        let name: String = row.try_get(1)?;
        let declared: String = row.try_get(2)?;
        let kind = postgres_kind(&declared);
        schema
            .entry(table)
            .or_default()
            .insert(name, Column { declared, kind });
    }
    Ok(schema)
}

/// What differs between the two schemas, one line each; empty when they match (but for the
/// tables named one-sided, which must be on their side only).
fn differences(mut sqlite: Schema, mut postgres: Schema) -> Vec<String> {
    let mut out = Vec::new();
    for (only, mine, theirs, side, other) in [
        (SQLITE_ONLY, &sqlite, &postgres, "SQLite", "PostgreSQL"),
        (POSTGRES_ONLY, &postgres, &sqlite, "PostgreSQL", "SQLite"),
    ] {
        for table in only {
            if !mine.contains_key(*table) {
                out.push(format!(
                    "table {table}: listed as {side}'s only but {side} has no such table"
                ));
            }
            if theirs.contains_key(*table) {
                out.push(format!(
                    "table {table}: listed as {side}'s only but {other} has it too"
                ));
            }
        }
    }
    for table in SQLITE_ONLY.iter().chain(POSTGRES_ONLY) {
        sqlite.remove(*table);
        postgres.remove(*table);
    }
    for (table, columns) in &sqlite {
        let Some(theirs) = postgres.get(table) else {
            let names: Vec<&str> = columns.keys().map(String::as_str).collect();
            out.push(format!(
                "table {table}: only in SQLite (columns {})",
                names.join(", ")
            ));
            continue;
        };
        for (name, column) in columns {
            match theirs.get(name) {
                None => out.push(format!(
                    "column {table}.{name}: only in SQLite ({})",
                    column.declared
                )),
                Some(other) => {
                    if let (Some(a), Some(b)) = (column.kind, other.kind) {
                        if a != b {
                            out.push(format!(
                                "column {table}.{name}: {} ({a}) in SQLite, {} ({b}) in PostgreSQL",
                                column.declared, other.declared
                            ));
                        }
                    }
                }
            }
        }
        for (name, column) in theirs {
            if !columns.contains_key(name) {
                out.push(format!(
                    "column {table}.{name}: only in PostgreSQL ({})",
                    column.declared
                ));
            }
        }
    }
    for (table, columns) in &postgres {
        if !sqlite.contains_key(table) {
            let names: Vec<&str> = columns.keys().map(String::as_str).collect();
            out.push(format!(
                "table {table}: only in PostgreSQL (columns {})",
                names.join(", ")
            ));
        }
    }
    out
}

#[tokio::test]
async fn sqlite_and_postgres_end_with_the_same_tables_and_columns() -> TestResult {
    let dir = tempfile::tempdir()?;
    let db = dir.path().join("schema.db");
    let mut server = TestServer::start_with_db(Some(db.clone()), &[])?;
    let status = server.terminate()?;
    if !status.success() {
        return Err(format!("the SQLite server exited {status}").into());
    }
    let sqlite = sqlite_schema(&db)?;
    if !sqlite.contains_key("events") {
        return Err(format!("no events table in SQLite's schema: {sqlite:?}").into());
    }

    if pg::admin_url().is_none() {
        eprintln!(
            "sqlite_and_postgres_end_with_the_same_tables_and_columns: skipped the comparison: \
             needs PostgreSQL and TURNSTREAM_TEST_DATABASE_URL is unset (`./run test` starts a \
             private cluster and sets it)"
        );
        return Ok(());
    }
    let server = TestServer::start_nodes(1, &[])?;
    let url = server
        .database_url()
        .ok_or("a PostgreSQL server has a database URL")?;
    let postgres = postgres_schema(url).await?;
    drop(server);

    let count = |s: &Schema| (s.len(), s.values().map(BTreeMap::len).sum::<usize>());
    let ((st, sc), (pt, pc)) = (count(&sqlite), count(&postgres));
    eprintln!("comparing SQLite's {st} tables ({sc} columns) with PostgreSQL's {pt} ({pc})");
    let diff = differences(sqlite, postgres);
    assert!(
        diff.is_empty(),
        "the schemas differ:\n  {}",
        diff.join("\n  ")
    );
    Ok(())
}

/// The comparison itself, without a database: a column or a table on one side only, or a type
/// that differs, is named; allowlisted tables are left out.
#[test]
fn a_column_on_one_side_only_is_named() -> TestResult {
    let column = |declared: &str, kind: fn(&str) -> Option<&'static str>| Column {
        declared: declared.to_string(),
        kind: kind(declared),
    };
    let mut sqlite = Schema::new();
    let mut postgres = Schema::new();
    for (t, c) in [("turns", "turn_id"), ("turns", "usage"), ("turns", "extra")] {
        sqlite
            .entry(t.to_string())
            .or_default()
            .insert(c.to_string(), column("TEXT", sqlite_kind));
    }
    sqlite
        .entry("turns".to_string())
        .or_default()
        .insert("queued_seq".to_string(), column("INTEGER", sqlite_kind));
    sqlite.entry("sqlite_sequence".to_string()).or_default();
    for (t, c) in [
        ("turns", "turn_id"),
        ("turns", "usage"),
        ("floors", "session_id"),
    ] {
        postgres
            .entry(t.to_string())
            .or_default()
            .insert(c.to_string(), column("text", postgres_kind));
    }
    postgres
        .entry("turns".to_string())
        .or_default()
        .insert("queued_seq".to_string(), column("integer", postgres_kind));
    postgres.entry("counter".to_string()).or_default();

    assert_eq!(
        differences(sqlite.clone(), postgres.clone()),
        [
            "column turns.extra: only in SQLite (TEXT)",
            "column turns.queued_seq: INTEGER (64-bit integer) in SQLite, integer (32-bit integer) in PostgreSQL",
            "table floors: only in PostgreSQL (columns session_id)",
        ]
    );

    // The same schemas without the differences match.
    sqlite.get_mut("turns").ok_or("turns")?.remove("extra");
    postgres.remove("floors");
    postgres
        .get_mut("turns")
        .ok_or("turns")?
        .insert("queued_seq".to_string(), column("bigint", postgres_kind));
    assert_eq!(
        differences(sqlite.clone(), postgres.clone()),
        Vec::<String>::new()
    );

    // An allowlisted table that is not on its side only is reported.
    sqlite.remove("sqlite_sequence");
    sqlite.entry("counter".to_string()).or_default();
    assert_eq!(
        differences(sqlite, postgres),
        [
            "table sqlite_sequence: listed as SQLite's only but SQLite has no such table",
            "table counter: listed as PostgreSQL's only but SQLite has it too",
        ]
    );
    Ok(())
}
