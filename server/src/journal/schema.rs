//! Schema of the journal database, versioned with `PRAGMA user_version`.

use rusqlite::config::DbConfig;
use rusqlite::{Connection, TransactionBehavior};

use crate::error::{Error, Result};

/// Migrations in order; migration `i` moves the schema from version `i` to `i + 1`.
const MIGRATIONS: &[&str] = &[
    r#"
CREATE TABLE meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
) WITHOUT ROWID;

-- The journal: one global, strictly increasing id (AUTOINCREMENT: never reused, so the head
-- never moves backwards even when cleanup deletes the newest rows).
CREATE TABLE events (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id TEXT NOT NULL,
    turn_id    TEXT,
    kind       TEXT NOT NULL,
    ts         INTEGER NOT NULL,
    data       TEXT NOT NULL
);
CREATE INDEX events_by_session ON events(session_id, id);
CREATE INDEX events_by_turn ON events(turn_id, id) WHERE turn_id IS NOT NULL;

-- Chat history: user messages, and assistant messages written when their turn ends.
CREATE TABLE messages (
    seq               INTEGER PRIMARY KEY AUTOINCREMENT,
    message_id        TEXT NOT NULL UNIQUE,
    session_id        TEXT NOT NULL,
    client_message_id TEXT,
    role              TEXT NOT NULL,
    content           TEXT NOT NULL,
    status            TEXT NOT NULL,
    turn_id           TEXT,
    created_at        INTEGER NOT NULL,
    event_seq         INTEGER NOT NULL
);
CREATE INDEX messages_by_session ON messages(session_id, seq);
CREATE UNIQUE INDEX messages_by_client_id ON messages(session_id, client_message_id)
    WHERE client_message_id IS NOT NULL;

-- The turns projection. *_seq are the journal ids of the lifecycle events, so a snapshot can
-- tell which turns were active at any cursor.
CREATE TABLE turns (
    turn_id         TEXT PRIMARY KEY,
    session_id      TEXT NOT NULL,
    user_message_id TEXT NOT NULL,
    state           TEXT NOT NULL,
    created_at      INTEGER NOT NULL,
    started_at      INTEGER,
    ended_at        INTEGER,
    queued_seq      INTEGER NOT NULL,
    started_seq     INTEGER,
    ended_seq       INTEGER,
    error           TEXT,
    message_id      TEXT,
    purged          INTEGER NOT NULL DEFAULT 0
) WITHOUT ROWID;
CREATE INDEX turns_active ON turns(session_id, queued_seq) WHERE state IN ('queued', 'running');
CREATE INDEX turns_to_purge ON turns(ended_at) WHERE purged = 0 AND ended_at IS NOT NULL;

-- Per-session replay floors: the newest event id that cleanup has made unavailable.
CREATE TABLE floors (
    session_id TEXT PRIMARY KEY,
    floor_seq  INTEGER NOT NULL
) WITHOUT ROWID;
"#,
    // v2: conversation order. A user message sorts at twice the journal id of its
    // `message_received`, its turn's reply right after it (one more), so history lists each reply
    // right after its question even when a later message was accepted while that turn ran.
    // And the token usage an agent reported for a turn (JSON, as `TurnInfo.usage` shows it).
    r#"
ALTER TABLE messages ADD COLUMN position INTEGER NOT NULL DEFAULT 0;
UPDATE messages SET position = 2 * event_seq WHERE role = 'user';
UPDATE messages SET position = COALESCE(
    (SELECT 2 * u.event_seq + 1 FROM turns t JOIN messages u ON u.message_id = t.user_message_id
     WHERE t.turn_id = messages.turn_id),
    2 * event_seq + 1)
WHERE role = 'assistant';
CREATE INDEX messages_by_position ON messages(session_id, position);
ALTER TABLE turns ADD COLUMN usage TEXT;
"#,
    // v3 (contract v1.1): who wrote a user message (a token's `sub`); NULL without auth.
    r#"
ALTER TABLE messages ADD COLUMN author TEXT;
"#,
    // v4 (contract v1.1): the lease of a turn a worker process runs (see `lease.rs`), and the
    // last `seq` of its output accepted, written with that output so a retry appends nothing.
    r#"
ALTER TABLE turns ADD COLUMN lease_token TEXT;
ALTER TABLE turns ADD COLUMN lease_owner TEXT;
ALTER TABLE turns ADD COLUMN lease_expires_at INTEGER;
ALTER TABLE turns ADD COLUMN worker_seq INTEGER NOT NULL DEFAULT -1;
CREATE INDEX turns_leased ON turns(lease_expires_at) WHERE state = 'running' AND lease_token IS NOT NULL;
"#,
    // v5 (contract v1.2): the files a user message refers to, as a JSON array; NULL for none.
    r#"
ALTER TABLE messages ADD COLUMN attachments TEXT;
"#,
    // v6 (contract v1.2, agents that ask): the requests an agent opened in a turn and their
    // answers (the first one wins); `resumes` counts how often a turn continued after waiting
    // (a queued turn with resumes > 0 is a continuation, shown `running`); a request still open
    // when its turn ends is closed (`closed_at`); `waiting` turns are
    // in flight like queued and running ones.
    r#"
CREATE TABLE input_requests (
    turn_id       TEXT NOT NULL,
    request_id    TEXT NOT NULL,
    session_id    TEXT NOT NULL,
    request       TEXT NOT NULL,
    expires_at    INTEGER NOT NULL,
    requested_seq INTEGER NOT NULL,
    answer        TEXT,
    answered_by   TEXT,
    answered_at   INTEGER,
    answered_seq  INTEGER,
    closed_at     INTEGER,
    PRIMARY KEY (turn_id, request_id)
) WITHOUT ROWID;
CREATE INDEX input_requests_open ON input_requests(expires_at) WHERE answer IS NULL AND closed_at IS NULL;
-- An assistant message's requests and their answers, as JSON (NULL for none).
ALTER TABLE messages ADD COLUMN requests TEXT;
ALTER TABLE turns ADD COLUMN resumes INTEGER NOT NULL DEFAULT 0;
-- How many requests the turn opened: a turn that asked nothing ends without looking.
ALTER TABLE turns ADD COLUMN asked INTEGER NOT NULL DEFAULT 0;
DROP INDEX turns_active;
CREATE INDEX turns_active ON turns(session_id, queued_seq) WHERE state IN ('queued', 'running', 'waiting');
"#,
    // v7 (contract v1.2, branches): every message's parent in the conversation tree (filled in
    // from conversation order for earlier messages: one line); every turn's reply id, drawn
    // when the turn is queued; each session's active leaf.
    r#"
ALTER TABLE messages ADD COLUMN parent_id TEXT;
UPDATE messages SET parent_id = (SELECT p.message_id FROM messages p
    WHERE p.session_id = messages.session_id AND p.position < messages.position
    ORDER BY p.position DESC LIMIT 1);
CREATE INDEX messages_by_parent ON messages(parent_id, event_seq) WHERE parent_id IS NOT NULL;
ALTER TABLE turns ADD COLUMN reply_id TEXT;
UPDATE turns SET reply_id = COALESCE(message_id, 'msg_r' || turn_id);
-- A user message sent while the turn before it ran follows that turn's reply, written later.
UPDATE messages SET parent_id = (SELECT t.reply_id FROM turns t
    WHERE t.user_message_id = messages.parent_id ORDER BY t.queued_seq DESC LIMIT 1)
WHERE role = 'user' AND parent_id IN (SELECT u.message_id FROM messages u WHERE u.role = 'user');
CREATE INDEX turns_by_reply ON turns(reply_id);
CREATE INDEX turns_by_user_message ON turns(user_message_id, queued_seq);
CREATE INDEX turns_by_session ON turns(session_id, queued_seq);
-- A session's leaf once it branched (an edit, a regeneration or a switch): until then its leaf
-- is its last turn's reply and history reads in conversation order, as before branches.
CREATE TABLE leaves (
    session_id TEXT PRIMARY KEY,
    leaf_id    TEXT NOT NULL,
    branched   INTEGER NOT NULL DEFAULT 0
) WITHOUT ROWID;
"#,
    // v8 (contract v1.2, branches): the `client_request_id` of a regeneration, so a retry finds
    // its turn instead of starting another; NULL for every other turn.
    r#"
ALTER TABLE turns ADD COLUMN client_request_id TEXT;
CREATE UNIQUE INDEX turns_by_client_request ON turns(session_id, client_request_id)
    WHERE client_request_id IS NOT NULL;
"#,
    // v9 (contract v1.3, agent calls): every turn's agent (`default` for the turns before);
    // a called turn's caller (`{turn_id, session_id, request_id}` as JSON, NULL for a turn a
    // message posted), on the turn and on its user message.
    r#"
ALTER TABLE turns ADD COLUMN agent TEXT NOT NULL DEFAULT 'default';
ALTER TABLE turns ADD COLUMN called_by TEXT;
ALTER TABLE messages ADD COLUMN called_by TEXT;
"#,
];

/// The schema version this build writes.
pub const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

/// How long a statement waits for another connection's lock unless configured otherwise.
pub const DEFAULT_BUSY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// Settings every connection gets, with the default busy timeout.
pub fn configure(conn: &Connection) -> Result<()> {
    configure_with(conn, DEFAULT_BUSY_TIMEOUT)
}

/// Settings every connection gets; `busy_timeout` bounds the wait for another connection's lock.
///
/// The query planner's stability guarantee is on: a prepared statement keeps its one plan
/// whatever values are bound. Without it SQLite recompiles a statement on the next run after
/// any value is bound to a parameter that could steer the plan (a bound `LIMIT`, a key compared
/// inside a subquery), which the journal's statements, cached and run with new values every
/// time, paid on every run: a message's commit recompiled the lookup of its session's leaf,
/// and each turn's start the query of its row. None of the journal's queries needs a plan
/// chosen by value (no partial index is matched against a bound value).
pub fn configure_with(conn: &Connection, busy_timeout: std::time::Duration) -> Result<()> {
    conn.set_db_config(DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG, true)?;
    conn.busy_timeout(busy_timeout)?;
    conn.pragma_update(None, "foreign_keys", "ON")?;
    conn.pragma_update(None, "synchronous", "FULL")?;
    Ok(())
}

/// Brings the database to [`SCHEMA_VERSION`] in one IMMEDIATE transaction; refuses newer databases.
/// Returns the journal epoch (drawn when the database is created).
pub fn migrate(conn: &mut Connection) -> Result<String> {
    conn.pragma_update(None, "journal_mode", "WAL")?;
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let version: i64 = tx.query_row("PRAGMA user_version", [], |r| r.get(0))?;
    if version > SCHEMA_VERSION {
        return Err(Error::SchemaTooNew {
            found: version,
            supported: SCHEMA_VERSION,
        });
    }
    for migration in &MIGRATIONS[version as usize..] {
        tx.execute_batch(migration)?;
    }
    if version < SCHEMA_VERSION {
        tx.pragma_update(None, "user_version", SCHEMA_VERSION)?;
    }
    let epoch: Option<String> = tx
        .query_row("SELECT value FROM meta WHERE key = 'epoch'", [], |r| {
            r.get(0)
        })
        .ok();
    let epoch = match epoch {
        Some(e) => e,
        None => {
            let e = new_epoch();
            tx.execute("INSERT INTO meta(key, value) VALUES ('epoch', ?1)", [&e])?;
            e
        }
    };
    tx.commit()?;
    Ok(epoch)
}

/// A new journal epoch: 10 random characters of `[0-9a-z]`.
pub(crate) fn new_epoch() -> String {
    crate::ids::random_chars(10)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The bundled SQLite is compiled to make commits durable with `fdatasync()` (set for the
    /// whole workspace in `.cargo/config.toml`; see there).
    #[test]
    fn sqlite_is_built_to_sync_with_fdatasync() {
        let flags = option_env!("LIBSQLITE3_FLAGS").unwrap_or("");
        assert!(
            flags.split_whitespace().any(|f| f == "-DHAVE_FDATASYNC=1"),
            "LIBSQLITE3_FLAGS is {flags:?}"
        );
    }

    #[test]
    fn migrates_once_and_keeps_epoch() -> Result<()> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("t.db");
        let mut c = Connection::open(&path)?;
        let e1 = migrate(&mut c)?;
        drop(c);
        let mut c = Connection::open(&path)?;
        let e2 = migrate(&mut c)?;
        assert_eq!(e1, e2);
        let v: i64 = c.query_row("PRAGMA user_version", [], |r| r.get(0))?;
        assert_eq!(v, SCHEMA_VERSION);
        Ok(())
    }

    /// A v1 database where message 2 was accepted while turn 1 ran (so reply 1 was written
    /// after it) migrates to conversation order.
    #[test]
    fn v1_history_migrates_to_conversation_order() -> Result<()> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("t.db");
        let c = Connection::open(&path)?;
        c.execute_batch(MIGRATIONS[0])?;
        c.pragma_update(None, "user_version", 1)?;
        c.execute_batch(
            "INSERT INTO turns(turn_id, session_id, user_message_id, state, created_at, queued_seq)
                 VALUES ('t1', 's', 'u1', 'completed', 0, 2), ('t2', 's', 'u2', 'completed', 0, 4);
             INSERT INTO messages(message_id, session_id, role, content, status, turn_id, created_at, event_seq) VALUES
                 ('u1', 's', 'user', 'q1', 'complete', 't1', 0, 1),
                 ('u2', 's', 'user', 'q2', 'complete', 't2', 0, 3),
                 ('a1', 's', 'assistant', 'r1', 'complete', 't1', 0, 6),
                 ('a2', 's', 'assistant', 'r2', 'complete', 't2', 0, 9);",
        )?;
        drop(c);
        let mut c = Connection::open(&path)?;
        migrate(&mut c)?;
        let order: Vec<String> = c
            .prepare("SELECT message_id FROM messages WHERE session_id = 's' ORDER BY position")?
            .query_map([], |r| r.get(0))?
            .collect::<rusqlite::Result<_>>()?;
        assert_eq!(order, ["u1", "a1", "u2", "a2"]);
        Ok(())
    }

    /// A v8 database (before agents, v1.3) migrates with its turns and messages: every turn is
    /// the `default` agent's, and none was called.
    #[test]
    fn v8_turns_migrate_to_agents() -> Result<()> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("t.db");
        let c = Connection::open(&path)?;
        for m in &MIGRATIONS[..8] {
            c.execute_batch(m)?;
        }
        c.pragma_update(None, "user_version", 8)?;
        c.execute_batch(
            "INSERT INTO turns(turn_id, session_id, user_message_id, state, created_at, queued_seq, reply_id)
                 VALUES ('t1', 's', 'u1', 'completed', 0, 2, 'a1');
             INSERT INTO messages(message_id, session_id, role, content, status, created_at, event_seq)
                 VALUES ('u1', 's', 'user', 'hi', 'complete', 0, 1);",
        )?;
        drop(c);
        let mut c = Connection::open(&path)?;
        migrate(&mut c)?;
        let (agent, called): (String, Option<String>) =
            c.query_row("SELECT agent, called_by FROM turns", [], |r| {
                Ok((r.get(0)?, r.get(1)?))
            })?;
        assert_eq!((agent.as_str(), called), ("default", None));
        let called: Option<String> =
            c.query_row("SELECT called_by FROM messages", [], |r| r.get(0))?;
        assert_eq!(called, None);
        Ok(())
    }

    /// A v7 database (branches, before regeneration ids) migrates with its turns: theirs is
    /// NULL, and an id is unique within its session only.
    #[test]
    fn v7_turns_migrate_to_regeneration_ids() -> Result<()> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("t.db");
        let c = Connection::open(&path)?;
        for m in &MIGRATIONS[..7] {
            c.execute_batch(m)?;
        }
        c.pragma_update(None, "user_version", 7)?;
        c.execute_batch(
            "INSERT INTO turns(turn_id, session_id, user_message_id, state, created_at, queued_seq, reply_id)
                 VALUES ('t1', 's', 'u1', 'completed', 0, 2, 'a1'), ('t2', 's', 'u1', 'queued', 0, 4, 'a2');",
        )?;
        drop(c);
        let mut c = Connection::open(&path)?;
        migrate(&mut c)?;
        let v: i64 = c.query_row("PRAGMA user_version", [], |r| r.get(0))?;
        assert_eq!(v, SCHEMA_VERSION);
        let unset: i64 = c.query_row(
            "SELECT COUNT(*) FROM turns WHERE client_request_id IS NULL",
            [],
            |r| r.get(0),
        )?;
        assert_eq!(unset, 2);
        let insert = "INSERT INTO turns(turn_id, session_id, user_message_id, state, created_at, queued_seq, reply_id, client_request_id)
                      VALUES (?1, ?2, 'u1', 'queued', 0, ?3, ?4, 'r1')";
        c.execute(insert, rusqlite::params!["t3", "s", 6, "a3"])?;
        assert!(
            c.execute(insert, rusqlite::params!["t4", "s", 8, "a4"])
                .is_err(),
            "one turn per id in a session"
        );
        c.execute(insert, rusqlite::params!["t5", "other", 10, "a5"])?;
        Ok(())
    }

    #[test]
    fn refuses_newer_database() -> Result<()> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("t.db");
        let c = Connection::open(&path)?;
        c.pragma_update(None, "user_version", SCHEMA_VERSION + 1)?;
        drop(c);
        let mut c = Connection::open(&path)?;
        match migrate(&mut c) {
            Err(Error::SchemaTooNew { found, .. }) => assert_eq!(found, SCHEMA_VERSION + 1),
            other => panic!("expected SchemaTooNew, got {other:?}"),
        }
        Ok(())
    }
}
