//! The PostgreSQL engine: connecting (a pool, and the tail's own `LISTEN` connection), creating
//! or migrating the schema, reads in one snapshot each, and the tail that fans out what any
//! server sharing the database committed (the writer only wakes it).

use std::sync::atomic::AtomicI64;
use std::sync::{Arc, Mutex};

use deadpool_postgres::Pool;
use tokio::runtime::Handle;

use super::tail::{Listen, Tail};
use super::write_conn::Writer;
use super::{pool, pool_error, target, PgClient, Statements, BEGIN_READ};
use crate::error::{Error, Result};
use crate::journal::broadcast::{self, Board, BroadcastSink};
use crate::journal::engine::{Engine, Publish, WriteConn};
use crate::journal::fanout::{Committed, FanOut};
use crate::journal::sql::{Backend, Sql};
use crate::metrics::Metrics;
use crate::mutex::lock;
use tokio_postgres::types::Type;

/// A PostgreSQL journal, opened.
pub(in crate::journal) struct Postgres {
    /// The URL without its password.
    location: String,
    epoch: String,
    head: i64,
    pool: Pool,
    statements: Arc<Statements>,
    rt: Handle,
    listen: Listen,
    /// Once delivering: what fans out every server's commits.
    tail: Mutex<Option<Tail>>,
    /// Where broadcasts heard go.
    board: Arc<Board>,
    /// The queue of broadcasts to send (one task sends them, in order).
    outbox: tokio::sync::mpsc::Sender<String>,
}

impl Postgres {
    /// Connects to the database at `url`, creating or migrating its schema. The tail will
    /// `LISTEN` on `listen_url` (a direct connection, when `url` is a pooler's in transaction
    /// mode), else on `url`.
    pub(in crate::journal) async fn open(url: &str, listen_url: Option<&str>) -> Result<Postgres> {
        let target = target(url)?;
        let listen = match listen_url {
            Some(listen_url) => Listen {
                target: super::target(listen_url).map_err(|e| match e {
                    Error::Config(m) => {
                        Error::Config(m.replacen("database URL", "database listen URL", 1))
                    }
                    other => other,
                })?,
                location: crate::journal::redact(listen_url),
                own_url: true,
            },
            None => Listen {
                target: target.clone(),
                location: crate::journal::redact(url),
                own_url: false,
            },
        };
        let pool = pool(&target)?;
        let epoch = super::schema::migrate(&pool).await?;
        let head = stored_head(&pool).await?;
        let statements = Statements::for_pool(&pool).await?;
        let (outbox, queued) = tokio::sync::mpsc::channel(broadcast::QUEUE);
        tokio::spawn(send_broadcasts(pool.clone(), queued));
        Ok(Postgres {
            location: crate::journal::redact(url),
            epoch,
            head,
            pool,
            statements,
            rt: Handle::current(),
            listen,
            tail: Mutex::new(None),
            board: Arc::new(Board::default()),
            outbox,
        })
    }
}

/// Sends each queued broadcast through the pool, one after another (so in order), until the
/// queue closes with the engine.
async fn send_broadcasts(pool: Pool, mut queued: tokio::sync::mpsc::Receiver<String>) {
    let mut failing = false;
    while let Some(payload) = queued.recv().await {
        let sent = async {
            let client = pool.get().await.map_err(|e| e.to_string())?;
            client
                .execute_typed(
                    "SELECT pg_notify($1, $2)",
                    &[(&broadcast::CHANNEL, Type::TEXT), (&payload, Type::TEXT)],
                )
                .await
                .map_err(|e| e.to_string())
        }
        .await;
        match sent {
            Ok(_) if failing => {
                failing = false;
                tracing::info!("broadcast: sending to the other servers again");
            }
            Ok(_) => {}
            Err(e) if !failing => {
                failing = true;
                tracing::warn!(error = %e, "broadcast: cannot send to the other servers; dropped");
            }
            Err(e) => tracing::debug!(error = %e, "broadcast: cannot send; dropped"),
        }
    }
}

/// The head as stored, read at start.
async fn stored_head(pool: &Pool) -> Result<i64> {
    let client = pool.get().await.map_err(pool_error)?;
    let row = client
        .query_typed_one("SELECT head FROM turnstream.counter", &[])
        .await?;
    Ok(row.try_get::<_, i64>(0)?)
}

/// Publishing on a shared database: the writer wakes the tail, which reads what committed back
/// in order with every other server's.
struct Wake(Arc<tokio::sync::Notify>);

impl Publish for Wake {
    fn committed(&self, _head: i64, _events: Vec<Committed>) {
        self.0.notify_one();
    }
}

impl Engine for Postgres {
    /// Round trips this server's connections made (see [`PgClient`]'s `then`).
    #[cfg(test)]
    fn round_trips(&self) -> u64 {
        self.statements
            .round_trips
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    fn backend(&self) -> Backend {
        Backend::Postgres
    }

    fn is_shared(&self) -> bool {
        true
    }

    fn location(&self) -> String {
        self.location.clone()
    }

    fn epoch(&self) -> &str {
        &self.epoch
    }

    fn head(&self) -> i64 {
        self.head
    }

    fn write_conn(&self) -> Result<Box<dyn WriteConn>> {
        Ok(Box::new(Writer::new(
            self.pool.clone(),
            self.statements.clone(),
            self.rt.clone(),
        )))
    }

    /// Inside one read-only transaction that sees one snapshot (see [`BEGIN_READ`]).
    fn read(&self, f: &mut dyn FnMut(&dyn Sql) -> Result<()>) -> Result<()> {
        let client = PgClient::get(&self.pool, &self.statements, &self.rt)?;
        client.begin(BEGIN_READ);
        let result = f(&client);
        let end = client.commit();
        result?;
        end
    }

    fn deliver(
        &self,
        fanout: Arc<dyn FanOut>,
        head: Arc<AtomicI64>,
        metrics: Arc<Metrics>,
    ) -> Box<dyn Publish> {
        let tail = Tail::start(
            self.pool.clone(),
            self.listen.clone(),
            self.epoch.clone(),
            fanout,
            head,
            metrics,
            self.board.clone(),
        );
        let wake = tail.wake.clone();
        *lock(&self.tail) = Some(tail);
        Box::new(Wake(wake))
    }

    fn broadcast(&self, payload: String) {
        if self.outbox.try_send(payload).is_err() {
            tracing::warn!("broadcast: the queue to the other servers is full; one was dropped");
        }
    }

    fn on_broadcast(&self, sink: Arc<dyn BroadcastSink>) {
        self.board.set_sink(sink);
    }

    fn close(&self) {
        if let Some(tail) = lock(&self.tail).as_ref() {
            tail.stop();
        }
    }
}
