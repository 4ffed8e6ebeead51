//! The journal: chat history, the ordered event journal, the turns projection and per-session
//! replay floors, in one SQLite file or one PostgreSQL database (see [`sql`] for the seam).
//!
//! One writer thread owns the write connection and commits whatever is queued in one transaction
//! (group commit, `synchronous=FULL` on SQLite); only after the commit are the events fanned out,
//! so no client ever sees an id a crash could take back. Readers use pooled connections of their
//! own, each read inside one transaction so a history page and its cursor agree. On PostgreSQL,
//! several servers may share the database: each fans out what any of them committed through its
//! tail. What differs per database is asked of its [`engine::Engine`].

mod accept;
mod branches;
pub mod broadcast;
mod calls;
mod engine;
mod fanout;
mod health;
mod inputs;
mod lease;
mod leased_turns;
mod leaves;
mod lifecycle;
mod payload;
pub mod postgres;
mod replay;
mod requests;
mod retention;
mod rows;
pub mod schema;
pub(crate) mod sql;
mod sqlite;
mod status;
mod writer;

pub use accept::{Accepted, Admission, NewMessage};
pub use branches::Regenerated;
pub use broadcast::BroadcastSink;
pub use calls::{CallRefusal, NewCall};
pub use fanout::{Committed, FanOut};
pub use health::{Failing, WriteHealth};
pub use inputs::{Given, InputRefusal, Parked};
pub use lease::{Lease, LeaseError};
pub use leased_turns::{Claim, Claimed, LeasedTurn, Refusal, WorkerOp, WorkerWrite};
pub use payload::floor_char_boundary;
pub use replay::{Encoder, Page, StreamStart};
pub use retention::cleanup_loop;
pub use rows::TurnRow;
pub use sql::Backend;
pub use sql::EventRow;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{mpsc as std_mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use tokio::sync::oneshot;
use turnstream_protocol::{Cursor, EventBody};

use crate::clock::Clock;
use crate::error::{Error, Result};
use crate::metrics::Metrics;
use crate::mutex::lock;
use engine::{Engine, WriteConn};
use sql::Sql;
use writer::{Job, Writer};

/// Reads running at once. A reconnect storm queues here instead of opening a connection (and a
/// blocking thread) per stream.
const MAX_CONCURRENT_READS: usize = 8;

/// How the journal opens its database.
#[derive(Debug, Clone)]
pub struct JournalOptions {
    /// How long a statement waits for a lock another connection holds before it fails with
    /// "database is locked" (SQLite's busy timeout), on every connection.
    pub busy_timeout: Duration,
    /// The time of day every write is stamped with (and lease expiry is judged by).
    pub clock: Clock,
    /// PostgreSQL: where the tail `LISTEN`s for other servers' commits (a direct connection,
    /// when the database URL is a pooler's in transaction mode); the database URL when unset.
    pub listen_url: Option<String>,
    /// How long an agent's request waits for an answer when it names no `expires_at`
    /// (`--input-timeout-secs`).
    pub input_timeout: Duration,
}

/// [`JournalOptions::input_timeout`] unless configured: a day.
pub const DEFAULT_INPUT_TIMEOUT: Duration = Duration::from_secs(86_400);

impl Default for JournalOptions {
    fn default() -> Self {
        JournalOptions {
            busy_timeout: schema::DEFAULT_BUSY_TIMEOUT,
            clock: Clock::system(),
            listen_url: None,
            input_timeout: DEFAULT_INPUT_TIMEOUT,
        }
    }
}

/// Where the journal lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Database {
    /// A SQLite file (created if missing).
    Sqlite(PathBuf),
    /// A PostgreSQL database, by URL (`postgres://user@host:port/name`).
    Postgres(String),
}

impl Database {
    /// `postgres://...` and `postgresql://...` name a PostgreSQL database; anything else is a
    /// SQLite file's path.
    pub fn parse(db: &str) -> Database {
        if postgres::is_url(db) {
            Database::Postgres(db.to_string())
        } else {
            Database::Sqlite(PathBuf::from(db))
        }
    }
}

impl std::fmt::Display for Database {
    /// The file, or the URL without its password.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Database::Sqlite(path) => write!(f, "{}", path.display()),
            Database::Postgres(url) => f.write_str(&redact(url)),
        }
    }
}

/// Handle to the journal; cheap to clone.
#[derive(Clone)]
pub struct Journal {
    inner: Arc<Inner>,
}

struct Inner {
    /// The database: its reads, and what delivers its commits.
    engine: Box<dyn Engine>,
    writer: Mutex<Option<std_mpsc::Sender<Job>>>,
    writer_thread: Mutex<Option<JoinHandle<()>>>,
    read_permits: Arc<tokio::sync::Semaphore>,
    metrics: Arc<Metrics>,
    /// The last committed event id; only ever grows.
    head: Arc<AtomicI64>,
    health: Arc<WriteHealth>,
    clock: Clock,
    input_timeout: Duration,
}

impl std::fmt::Debug for Journal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Journal")
            .field("location", &self.inner.engine.location())
            .field("epoch", &self.inner.engine.epoch())
            .finish()
    }
}

/// What a write job sees: the open transaction (inside a savepoint of its own) and the means to
/// append events.
pub(crate) struct WriteCtx<'a> {
    pub conn: &'a dyn Sql,
    /// The writer's connection, for what a transaction does beside its statements.
    write_conn: &'a dyn WriteConn,
    epoch: &'a str,
    next_seq: &'a mut i64,
    committed: Vec<Committed>,
    /// The live feed, told before the commit when retention stops holding events.
    pub(crate) fanout: &'a dyn FanOut,
    /// `(turn, lease token)` pairs found holding earlier in this batch; a turn's end removes it.
    pub(crate) fences: &'a mut Vec<(String, String)>,
    /// Unix milliseconds, one value for the whole job.
    pub now: i64,
}

impl WriteCtx<'_> {
    /// Whether `token` holds the running turn `turn_id`'s lease now: known in this batch (found
    /// holding, or granted, earlier in it), else asked of the database and then known.
    pub(crate) fn holds(&mut self, turn_id: &str, token: &str) -> Result<bool> {
        if self.fences.iter().any(|(t, k)| t == turn_id && k == token) {
            return Ok(true);
        }
        if !leased_turns::holds(self.conn, turn_id, token, self.now)? {
            return Ok(false);
        }
        self.known_holding(turn_id, token);
        Ok(true)
    }

    /// Notes that `token` holds running turn `turn_id`'s lease for the rest of this batch.
    pub(crate) fn known_holding(&mut self, turn_id: &str, token: &str) {
        self.fences.push((turn_id.to_string(), token.to_string()));
    }

    /// Appends one event; `build` gets the event's cursor (for bodies that quote it, such as a
    /// message's `event_id`). Returns the event's sequence.
    pub fn append(
        &mut self,
        session_id: &str,
        turn_id: Option<&str>,
        build: impl FnOnce(&str) -> EventBody,
    ) -> Result<i64> {
        self.append_fenced(session_id, turn_id, None, build)
    }

    /// [`WriteCtx::append`], refused with [`Error::LeaseLost`] unless `fence` (a lease token)
    /// holds the running turn `turn_id` now: the check and the insert are one statement.
    pub fn append_fenced(
        &mut self,
        session_id: &str,
        turn_id: Option<&str>,
        fence: Option<&str>,
        build: impl FnOnce(&str) -> EventBody,
    ) -> Result<i64> {
        let seq = *self.next_seq;
        let cursor = Cursor::new(self.epoch, seq).to_string();
        let body = build(&cursor);
        let kind = body.kind();
        let mut data = serde_json::to_string(&body)?;
        if data.len() > payload::BODY_LIMIT {
            // Rare: take the slow path through a JSON value to cut the largest fields.
            let mut value = serde_json::to_value(&body)?;
            let truncated = payload::cap(&mut value);
            if let (false, serde_json::Value::Object(map)) = (truncated.is_empty(), &mut value) {
                map.insert("truncated".into(), serde_json::to_value(&truncated)?);
            }
            data = serde_json::to_string(&value)?;
        }
        if let Some(token) = fence {
            if !self.holds(turn_id.unwrap_or_default(), token)? {
                return Err(Error::LeaseLost);
            }
        }
        self.conn.insert_event(&sql::EventRow {
            seq,
            session_id,
            turn_id,
            ts: self.now,
            kind,
            data: &data,
        })?;
        *self.next_seq += 1;
        self.committed.push(Committed {
            seq,
            session_id: session_id.to_string(),
            turn_id: turn_id.map(str::to_string),
            ts: self.now,
            kind: kind.to_string(),
            data,
        });
        Ok(seq)
    }

    pub fn cursor(&self, seq: i64) -> String {
        Cursor::new(self.epoch, seq).to_string()
    }

    /// Takes the exclusive lock `key` for the rest of the transaction, unless another server
    /// sharing the database holds it (false then); see [`WriteConn::try_lock`].
    pub(crate) fn try_lock(&self, key: i64) -> Result<bool> {
        self.write_conn.try_lock(key)
    }

    /// Tells the other servers sharing the database, at commit, that `session_id`'s floor rose
    /// to `floor`; see [`WriteConn::announce_floor`].
    pub(crate) fn announce_floor(&self, session_id: &str, floor: i64) -> Result<()> {
        self.write_conn.announce_floor(session_id, floor)
    }
}

impl Journal {
    /// Opens (creating if needed) and migrates the database, and starts the writer thread.
    /// Committed events go to `fanout`.
    pub fn open(path: &Path, metrics: Arc<Metrics>, fanout: Arc<dyn FanOut>) -> Result<Journal> {
        Self::open_with(path, metrics, JournalOptions::default(), fanout)
    }

    /// [`Journal::open`] with options.
    pub fn open_with(
        path: &Path,
        metrics: Arc<Metrics>,
        options: JournalOptions,
        fanout: Arc<dyn FanOut>,
    ) -> Result<Journal> {
        let engine = sqlite::Sqlite::open(path, options.busy_timeout)?;
        Self::start(Box::new(engine), &options, metrics, fanout)
    }

    /// Opens the journal in `db`: a SQLite file, or a PostgreSQL database (connecting, creating
    /// or migrating its schema, and starting the tail that fans out every server's commits).
    pub async fn open_database(
        db: &Database,
        metrics: Arc<Metrics>,
        options: JournalOptions,
        fanout: Arc<dyn FanOut>,
    ) -> Result<Journal> {
        let engine: Box<dyn Engine> = match db {
            Database::Sqlite(path) => Box::new(sqlite::Sqlite::open(path, options.busy_timeout)?),
            Database::Postgres(url) => {
                Box::new(postgres::Postgres::open(url, options.listen_url.as_deref()).await?)
            }
        };
        Self::start(engine, &options, metrics, fanout)
    }

    /// Starts the writer thread on `engine`'s database; committed events go to `fanout`.
    fn start(
        engine: Box<dyn Engine>,
        options: &JournalOptions,
        metrics: Arc<Metrics>,
        fanout: Arc<dyn FanOut>,
    ) -> Result<Journal> {
        let health = Arc::new(WriteHealth::new(metrics.clone()));
        let (tx, rx) = std_mpsc::channel::<Job>();
        let head = Arc::new(AtomicI64::new(engine.head()));
        let conn = engine.write_conn()?;
        let publish = engine.deliver(fanout.clone(), head.clone(), metrics.clone());
        let writer = Writer {
            conn,
            publish,
            epoch: engine.epoch().to_string(),
            fanout,
            metrics: metrics.clone(),
            head: head.clone(),
            health: health.clone(),
            busy_timeout: options.busy_timeout,
            clock: options.clock.clone(),
            fences: Vec::new(),
        };
        let thread = std::thread::Builder::new()
            .name("turnstream-writer".into())
            .spawn(move || writer.run(rx))?;
        Ok(Journal {
            inner: Arc::new(Inner {
                engine,
                writer: Mutex::new(Some(tx)),
                writer_thread: Mutex::new(Some(thread)),
                read_permits: Arc::new(tokio::sync::Semaphore::new(MAX_CONCURRENT_READS)),
                metrics,
                head,
                health,
                clock: options.clock.clone(),
                input_timeout: options.input_timeout,
            }),
        })
    }

    /// Which database holds the journal.
    pub fn backend(&self) -> Backend {
        self.inner.engine.backend()
    }

    /// Whether other servers may write to the same journal (PostgreSQL).
    pub fn is_shared(&self) -> bool {
        self.inner.engine.is_shared()
    }

    pub fn epoch(&self) -> &str {
        self.inner.engine.epoch()
    }

    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.inner.metrics
    }

    /// Whether the latest journal writes reached the disk.
    pub fn write_health(&self) -> &WriteHealth {
        &self.inner.health
    }

    /// How long a request without its own `expires_at` waits for an answer.
    pub fn input_timeout(&self) -> Duration {
        self.inner.input_timeout
    }

    /// The clock the journal stamps its writes with.
    pub fn clock(&self) -> &Clock {
        &self.inner.clock
    }

    /// The last committed event id.
    pub fn head(&self) -> i64 {
        self.inner.head.load(Ordering::Acquire)
    }

    /// Queues a write and returns the receiver of its result (resolved after the commit). Writes
    /// queued from one task commit in the order they were queued.
    pub(crate) fn submit<R: Send + 'static>(
        &self,
        f: impl FnOnce(&mut WriteCtx<'_>) -> Result<R> + Send + 'static,
    ) -> oneshot::Receiver<Result<R>> {
        self.enqueue(true, f)
    }

    /// [`Journal::submit`] for a job that writes with at most one statement.
    pub(crate) fn submit_single_statement<R: Send + 'static>(
        &self,
        f: impl FnOnce(&mut WriteCtx<'_>) -> Result<R> + Send + 'static,
    ) -> oneshot::Receiver<Result<R>> {
        self.enqueue(false, f)
    }

    fn enqueue<R: Send + 'static>(
        &self,
        savepoint: bool,
        f: impl FnOnce(&mut WriteCtx<'_>) -> Result<R> + Send + 'static,
    ) -> oneshot::Receiver<Result<R>> {
        let (job, rx) = Job::new(savepoint, f);
        let sender = lock(&self.inner.writer).clone();
        if let Some(sender) = sender {
            // A send error drops the job (and its oneshot), which the receiver sees as Closed.
            let _ = sender.send(job);
        }
        rx
    }

    /// Runs a write and waits for its durable commit.
    pub(crate) async fn write<R: Send + 'static>(
        &self,
        f: impl FnOnce(&mut WriteCtx<'_>) -> Result<R> + Send + 'static,
    ) -> Result<R> {
        self.submit(f).await.map_err(|_| Error::Closed)?
    }

    /// Runs a read on a pooled connection, inside one read transaction.
    pub(crate) async fn read<R: Send + 'static>(
        &self,
        f: impl FnOnce(&dyn Sql, &str) -> Result<R> + Send + 'static,
    ) -> Result<R> {
        let inner = self.inner.clone();
        let permit = inner
            .read_permits
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| Error::Closed)?;
        tokio::task::spawn_blocking(move || {
            let _permit = permit;
            let engine = &inner.engine;
            let mut f = Some(f);
            let mut answer = None;
            engine.read(&mut |conn| {
                if let Some(f) = f.take() {
                    answer = Some(f(conn, engine.epoch())?);
                }
                Ok(())
            })?;
            answer.ok_or(Error::Closed)
        })
        .await
        .map_err(|_| Error::Closed)?
    }

    /// Sends `payload` to every other server sharing the database, best effort and never
    /// stored (see [`broadcast`]); nowhere on SQLite.
    pub fn broadcast(&self, payload: String) {
        self.inner.engine.broadcast(payload);
    }

    /// Where other servers' broadcasts go from now on.
    pub fn on_broadcast(&self, sink: Arc<dyn BroadcastSink>) {
        self.inner.engine.on_broadcast(sink);
    }

    /// Round trips to the database so far (PostgreSQL's; 0 on SQLite).
    #[cfg(test)]
    pub(crate) fn round_trips(&self) -> u64 {
        self.inner.engine.round_trips()
    }

    /// Stops the writer after it has committed everything queued so far.
    pub fn close(&self) {
        lock(&self.inner.writer).take();
        if let Some(t) = lock(&self.inner.writer_thread).take() {
            let _ = t.join();
        }
        self.inner.engine.close();
    }
}

/// The schema version a backend's database must be at.
pub(crate) fn schema_version(backend: Backend) -> i64 {
    match backend {
        Backend::Sqlite => schema::SCHEMA_VERSION,
        Backend::Postgres => postgres::SCHEMA_VERSION,
    }
}

/// A database URL without its password, for logs.
fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let creds = &url[scheme + 3..at];
            let user = creds.split(':').next().unwrap_or("");
            format!("{}{user}@{}", &url[..scheme + 3], &url[at + 1..])
        }
        _ => url.to_string(),
    }
}
