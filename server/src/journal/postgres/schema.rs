//! The journal's schema on PostgreSQL, in its own `turnstream` schema, versioned like SQLite's
//! (the version is a row of `meta`). Migrations run in one transaction under an advisory lock
//! held for that transaction only, so servers starting together migrate once, also through a
//! pooler.

use deadpool_postgres::Pool;
use tokio_postgres::types::Type;

use super::{hint, pool_error, with_causes, SCHEMA};
use crate::error::{Error, Result};
use crate::journal::sql::Sql;

/// Migrations in order; migration `i` moves the schema from version `i` to `i + 1`. The first
/// is SQLite's first four migrations in one, with 64-bit integers throughout; the ones after it
/// follow SQLite's one for one.
const MIGRATIONS: &[&str] = &[
    r#"
CREATE TABLE meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);

-- The head: the last event id handed out. Every write transaction locks this row first and
-- raises it with the events it appends, so ids commit in order across servers.
CREATE TABLE counter (
    one  BOOLEAN PRIMARY KEY DEFAULT TRUE CHECK (one),
    head BIGINT NOT NULL
);
INSERT INTO counter(one, head) VALUES (TRUE, 0);

CREATE TABLE events (
    id         BIGINT PRIMARY KEY,
    session_id TEXT NOT NULL,
    turn_id    TEXT,
    kind       TEXT NOT NULL,
    ts         BIGINT NOT NULL,
    data       TEXT NOT NULL
);
CREATE INDEX events_by_session ON events(session_id, id);
CREATE INDEX events_by_turn ON events(turn_id, id) WHERE turn_id IS NOT NULL;

CREATE TABLE messages (
    seq               BIGSERIAL PRIMARY KEY,
    message_id        TEXT NOT NULL UNIQUE,
    session_id        TEXT NOT NULL,
    client_message_id TEXT,
    role              TEXT NOT NULL,
    content           TEXT NOT NULL,
    status            TEXT NOT NULL,
    turn_id           TEXT,
    created_at        BIGINT NOT NULL,
    event_seq         BIGINT NOT NULL,
    position          BIGINT NOT NULL DEFAULT 0,
    author            TEXT
);
CREATE INDEX messages_by_session ON messages(session_id, seq);
CREATE UNIQUE INDEX messages_by_client_id ON messages(session_id, client_message_id)
    WHERE client_message_id IS NOT NULL;
CREATE INDEX messages_by_position ON messages(session_id, position);

CREATE TABLE turns (
    turn_id          TEXT PRIMARY KEY,
    session_id       TEXT NOT NULL,
    user_message_id  TEXT NOT NULL,
    state            TEXT NOT NULL,
    created_at       BIGINT NOT NULL,
    started_at       BIGINT,
    ended_at         BIGINT,
    queued_seq       BIGINT NOT NULL,
    started_seq      BIGINT,
    ended_seq        BIGINT,
    error            TEXT,
    message_id       TEXT,
    purged           BIGINT NOT NULL DEFAULT 0,
    usage            TEXT,
    lease_token      TEXT,
    lease_owner      TEXT,
    lease_expires_at BIGINT,
    worker_seq       BIGINT NOT NULL DEFAULT -1
);
CREATE INDEX turns_active ON turns(session_id, queued_seq) WHERE state IN ('queued', 'running');
CREATE INDEX turns_to_purge ON turns(ended_at) WHERE purged = 0 AND ended_at IS NOT NULL;
CREATE INDEX turns_leased ON turns(lease_expires_at) WHERE state = 'running' AND lease_token IS NOT NULL;

CREATE TABLE floors (
    session_id TEXT PRIMARY KEY,
    floor_seq  BIGINT NOT NULL
);
"#,
    // v2 (SQLite's v5, contract v1.2): the files a user message refers to, as a JSON array.
    r#"
ALTER TABLE messages ADD COLUMN attachments TEXT;
"#,
    // v3 (SQLite's v6, contract v1.2, agents that ask): the requests an agent opened in a turn and their
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
    expires_at    BIGINT NOT NULL,
    requested_seq BIGINT NOT NULL,
    answer        TEXT,
    answered_by   TEXT,
    answered_at   BIGINT,
    answered_seq  BIGINT,
    closed_at     BIGINT,
    PRIMARY KEY (turn_id, request_id)
);
CREATE INDEX input_requests_open ON input_requests(expires_at) WHERE answer IS NULL AND closed_at IS NULL;
-- An assistant message's requests and their answers, as JSON (NULL for none).
ALTER TABLE messages ADD COLUMN requests TEXT;
ALTER TABLE turns ADD COLUMN resumes BIGINT NOT NULL DEFAULT 0;
-- How many requests the turn opened: a turn that asked nothing ends without looking.
ALTER TABLE turns ADD COLUMN asked BIGINT NOT NULL DEFAULT 0;
DROP INDEX IF EXISTS turns_active;
CREATE INDEX turns_active ON turns(session_id, queued_seq) WHERE state IN ('queued', 'running', 'waiting');
"#,
    // v4 (SQLite's v7, contract v1.2, branches): every message's parent in the conversation tree (filled in
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
    branched   BIGINT NOT NULL DEFAULT 0
);
"#,
    // v5 (SQLite's v8, contract v1.2, branches): the `client_request_id` of a regeneration, so a
    // retry finds its turn instead of starting another; NULL for every other turn.
    r#"
ALTER TABLE turns ADD COLUMN client_request_id TEXT;
CREATE UNIQUE INDEX turns_by_client_request ON turns(session_id, client_request_id)
    WHERE client_request_id IS NOT NULL;
"#,
    // v6 (SQLite's v9, contract v1.3, agent calls): every turn's agent (`default` for the turns before);
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

/// Any fixed number: the advisory lock that makes migrations one server's job at a time.
const MIGRATION_LOCK: i64 = 0x7475_726e_7374_7265;

/// The version recorded in `meta` (0 for a database without the schema).
pub(crate) fn version(conn: &dyn Sql) -> Result<i64> {
    let v = conn
        .query_texts("SELECT value FROM meta WHERE key = 'schema_version'", &[])?
        .into_iter()
        .next();
    match v {
        None => Ok(0),
        Some(v) => v
            .parse()
            .map_err(|_| Error::Corrupt(format!("schema version {v:?}"))),
    }
}

/// Creates the schema or brings it to [`SCHEMA_VERSION`]; refuses a newer one. Returns the
/// journal epoch (drawn when the schema is created). A statement the database refuses (most
/// often for want of a privilege) is a configuration error that says which and what helps.
pub(crate) async fn migrate(pool: &Pool) -> Result<String> {
    migrate_or_fail(pool).await.map_err(|e| match e {
        Error::Postgres(e) if e.code().is_some() => {
            let causes = with_causes(&e);
            let hint = hint(&causes);
            Error::Config(format!(
                "cannot create or migrate the {SCHEMA} schema: {causes}{hint}"
            ))
        }
        other => other,
    })
}

async fn migrate_or_fail(pool: &Pool) -> Result<String> {
    let mut client = pool.get().await.map_err(pool_error)?;
    let tx = client.transaction().await?;
    // Unnamed statements only (`*_typed`): see the module `postgres`.
    tx.execute_typed(
        "SELECT pg_advisory_xact_lock($1)",
        &[(&MIGRATION_LOCK, Type::INT8)],
    )
    .await?;
    let has_schema: bool = tx
        .query_typed_one(
            &format!("SELECT to_regnamespace('{SCHEMA}') IS NOT NULL"),
            &[],
        )
        .await?
        .try_get(0)?;
    if !has_schema {
        tx.batch_execute(&format!("CREATE SCHEMA {SCHEMA}")).await?;
    }
    tx.batch_execute(&format!("SET LOCAL search_path TO {SCHEMA}"))
        .await?;
    let has_meta: bool = tx
        .query_typed_one(
            &format!("SELECT to_regclass('{SCHEMA}.meta') IS NOT NULL"),
            &[],
        )
        .await?
        .try_get(0)?;
    let version: i64 = if has_meta {
        match tx
            .query_typed_opt("SELECT value FROM meta WHERE key = 'schema_version'", &[])
            .await?
        {
            Some(row) => {
                let v: String = row.try_get(0)?;
                v.parse()
                    .map_err(|_| Error::Corrupt(format!("schema version {v:?}")))?
            }
            None => 0,
        }
    } else {
        0
    };
    if version > SCHEMA_VERSION {
        return Err(Error::SchemaTooNew {
            found: version,
            supported: SCHEMA_VERSION,
        });
    }
    for migration in &MIGRATIONS[version as usize..] {
        tx.batch_execute(migration).await?;
    }
    tx.execute_typed(
        "INSERT INTO meta(key, value) VALUES ('schema_version', $1)
         ON CONFLICT(key) DO UPDATE SET value = excluded.value",
        &[(&SCHEMA_VERSION.to_string(), Type::TEXT)],
    )
    .await?;
    let epoch = match tx
        .query_typed_opt("SELECT value FROM meta WHERE key = 'epoch'", &[])
        .await?
    {
        Some(row) => row.try_get(0)?,
        None => {
            let e = crate::journal::schema::new_epoch();
            tx.execute_typed(
                "INSERT INTO meta(key, value) VALUES ('epoch', $1)",
                &[(&e, Type::TEXT)],
            )
            .await?;
            e
        }
    };
    tx.commit().await?;
    Ok(epoch)
}
