//! The writer's round trips on PostgreSQL, against the cluster in `TURNSTREAM_TEST_DATABASE_URL`
//! (each test in a fresh database; skipped without it): a job's savepoint and release go with
//! the statements around them, a job that sends nothing needs no savepoint on the server, and a
//! failure sent ahead of a job's savepoint loses the batch rather than the job alone.

use std::sync::atomic::AtomicI64;
use std::sync::{mpsc, Arc};

use tokio::sync::oneshot;
use tokio_postgres::NoTls;
use turnstream_protocol::EventBody;

use crate::error::{Error, Result};
use crate::journal::engine::{Direct, Engine};
use crate::journal::health::WriteHealth;
use crate::journal::postgres::Postgres;
use crate::journal::sql::EventRow;
use crate::journal::writer::{Job, Writer};
use crate::journal::FanOut;
use crate::metrics::Metrics;

type TestResult = std::result::Result<(), Box<dyn std::error::Error>>;

/// A fresh database on the test cluster: the runtime the engine waits on, the engine, a
/// client for checking, and the database's name (dropped by [`Db::drop`]).
struct Db {
    rt: tokio::runtime::Runtime,
    engine: Postgres,
    check: tokio_postgres::Client,
    admin: String,
    name: String,
}

impl Db {
    fn open() -> std::result::Result<Option<Db>, Box<dyn std::error::Error>> {
        let Some(admin) = std::env::var("TURNSTREAM_TEST_DATABASE_URL")
            .ok()
            .filter(|u| !u.trim().is_empty())
        else {
            return Ok(None);
        };
        let rt = tokio::runtime::Runtime::new()?;
        let name = format!(
            "ts_lib_{}_{:08x}",
            std::process::id(),
            rand::random::<u32>()
        );
        let url = with_database(&admin, &name)?;
        let (engine, check) = rt.block_on(async {
            let admin_client = connect(&admin).await?;
            admin_client
                .batch_execute(&format!("CREATE DATABASE {name}"))
                .await?;
            let engine = Postgres::open(&url, None).await?;
            let check = connect(&url).await?;
            Ok::<_, Box<dyn std::error::Error>>((engine, check))
        })?;
        Ok(Some(Db {
            rt,
            engine,
            check,
            admin,
            name,
        }))
    }

    /// A writer of this database, as the journal runs it.
    fn writer(&self) -> Result<Writer> {
        let metrics = Arc::new(Metrics::default());
        let hub = crate::live::hub::Hub::with_metrics(metrics.clone());
        let fanout: Arc<dyn FanOut> = crate::live::LiveFeed::new(hub);
        let head = Arc::new(AtomicI64::new(self.engine.head()));
        Ok(Writer {
            conn: self.engine.write_conn()?,
            publish: Box::new(Direct {
                epoch: self.engine.epoch().to_string(),
                fanout: fanout.clone(),
                head: head.clone(),
            }),
            epoch: self.engine.epoch().to_string(),
            fanout,
            metrics: metrics.clone(),
            head,
            health: Arc::new(WriteHealth::new(metrics)),
            busy_timeout: crate::journal::schema::DEFAULT_BUSY_TIMEOUT,
            clock: crate::clock::Clock::system(),
            fences: Vec::new(),
        })
    }

    /// Runs `jobs` as one batch (all queued before the writer starts) on a writer thread of
    /// its own; the round trips it made.
    fn batch(&self, jobs: Vec<Job>) -> Result<u64> {
        let writer = self.writer()?;
        let (tx, rx) = mpsc::channel();
        for job in jobs {
            tx.send(job).map_err(|_| Error::Closed)?;
        }
        drop(tx);
        let before = self.engine.round_trips();
        std::thread::spawn(move || writer.run(rx))
            .join()
            .map_err(|_| Error::Corrupt("the writer thread panicked".into()))?;
        Ok(self.engine.round_trips() - before)
    }

    fn ints(&self, sql: &str) -> std::result::Result<Vec<i64>, tokio_postgres::Error> {
        let rows = self.rt.block_on(self.check.query(sql, &[]))?;
        rows.iter().map(|r| r.try_get(0)).collect()
    }

    fn texts(&self, sql: &str) -> std::result::Result<Vec<String>, tokio_postgres::Error> {
        let rows = self.rt.block_on(self.check.query(sql, &[]))?;
        rows.iter().map(|r| r.try_get(0)).collect()
    }
}

impl Drop for Db {
    fn drop(&mut self) {
        self.engine.close();
        let (admin, name) = (self.admin.clone(), self.name.clone());
        // Best effort: the cluster's start drops what is left of `ts_` databases.
        let _ = self.rt.block_on(async move {
            let client = connect(&admin).await?;
            client
                .batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                .await?;
            Ok::<_, Box<dyn std::error::Error>>(())
        });
    }
}

pub(super) async fn connect(
    url: &str,
) -> std::result::Result<tokio_postgres::Client, tokio_postgres::Error> {
    let (client, connection) = tokio_postgres::connect(url, NoTls).await?;
    tokio::spawn(connection);
    Ok(client)
}

/// `url` with its database name replaced by `db`.
pub(super) fn with_database(url: &str, db: &str) -> std::result::Result<String, String> {
    let (head, query) = url.split_at(url.find('?').unwrap_or(url.len()));
    let (base, _) = head
        .rsplit_once('/')
        .filter(|(base, _)| base.contains("://") && !base.ends_with('/'))
        .ok_or_else(|| format!("no database name in {url:?}"))?;
    Ok(format!("{base}/{db}{query}"))
}

fn append(savepoint: bool) -> (Job, oneshot::Receiver<Result<i64>>) {
    Job::new(savepoint, |ctx| {
        ctx.append("s", Some("t"), |_| EventBody::TurnStarted {})
    })
}

fn meta(key: &'static str) -> impl Fn(&mut crate::journal::WriteCtx<'_>) -> Result<u64> {
    move |ctx| {
        ctx.conn.execute(
            &format!("INSERT INTO meta(key, value) VALUES ('{key}', 'x')"),
            &[],
        )
    }
}

#[test]
fn savepoints_go_with_the_statements_and_a_failed_job_rolls_back_alone() -> TestResult {
    let Some(db) = Db::open()? else {
        return Ok(());
    };
    let first = meta("first");
    let (a, mut ra) = Job::new(true, move |ctx| {
        let seq = ctx.append("s", Some("t"), |_| EventBody::TurnStarted {})?;
        first(ctx)?;
        Ok(seq)
    });
    // Its own statement fails (the key is taken): it alone is undone, with its own error.
    let again = meta("first");
    let (taken, mut rt) = Job::new(true, move |ctx| {
        ctx.append("s", Some("t"), |_| EventBody::TurnStarted {})?;
        again(ctx)?;
        Ok(0)
    });
    // Sends nothing: its savepoint never reaches the server.
    let (quiet, mut rq) = append(true);
    // Fails before sending anything: what it held back is dropped here.
    let (dropped, mut rd) = Job::new(true, |ctx| -> Result<i64> {
        ctx.append("s", Some("t"), |_| EventBody::TurnStarted {})?;
        Err(Error::NotFound { what: "turn" })
    });
    // Fails after a statement of its own that worked: rolled back on the server.
    let undone_meta = meta("undone");
    let (undone, mut ru) = Job::new(true, move |ctx| -> Result<i64> {
        ctx.append("s", Some("t"), |_| EventBody::TurnStarted {})?;
        undone_meta(ctx)?;
        Err(Error::NotFound { what: "turn" })
    });
    let (single, mut rs) = append(false);

    let round_trips = db.batch(vec![a, taken, quiet, dropped, undone, single])?;

    assert_eq!(ra.try_recv()?.ok(), Some(1));
    match rt.try_recv()? {
        Err(Error::Postgres(e)) => assert_eq!(e.code().map(|c| c.code()), Some("23505"), "{e}"),
        other => panic!("the job whose statement failed gets its own error, got {other:?}"),
    }
    assert_eq!(rq.try_recv()?.ok(), Some(2));
    assert!(matches!(rd.try_recv()?, Err(Error::NotFound { .. })));
    assert!(matches!(ru.try_recv()?, Err(Error::NotFound { .. })));
    assert_eq!(rs.try_recv()?.ok(), Some(3));
    assert_eq!(
        db.ints("SELECT id FROM turnstream.events ORDER BY id")?,
        [1, 2, 3]
    );
    assert_eq!(db.ints("SELECT head FROM turnstream.counter")?, [3]);
    assert_eq!(
        db.texts("SELECT key FROM turnstream.meta WHERE key IN ('first', 'undone')")?,
        ["first"]
    );
    // The lock and begin, each job's statement with the savepoints around it (the failed one
    // and its rollback, the undone one and its rollback), and the commit: a savepoint, a
    // release or a rollback of its own for each job would be 15.
    assert_eq!(round_trips, 7, "round trips for the batch");

    // A read's BEGIN (which sets the schema) goes with its first statement.
    let before = db.engine.round_trips();
    let mut head = None;
    db.engine.read(&mut |conn| {
        head = conn.query_int("SELECT head FROM counter", &[])?;
        Ok(())
    })?;
    assert_eq!(head, Some(3));
    assert_eq!(db.engine.round_trips() - before, 2, "a read and its commit");
    Ok(())
}

#[test]
fn a_read_whose_statement_failed_leaves_no_transaction_on_its_connection() -> TestResult {
    let Some(db) = Db::open()? else {
        return Ok(());
    };
    let failed = db.engine.read(&mut |conn| {
        conn.query("SELECT 1 / 0", &[])?;
        Ok(())
    });
    assert!(failed.is_err(), "{failed:?}");
    // Every pooled connection, that one among them, takes a read again.
    for _ in 0..2 * crate::journal::postgres::POOL_SIZE {
        let mut head = None;
        db.engine.read(&mut |conn| {
            head = conn.query_int("SELECT head FROM counter", &[])?;
            Ok(())
        })?;
        assert_eq!(head, Some(0));
    }
    Ok(())
}

#[test]
fn a_failure_sent_ahead_of_a_job_s_savepoint_loses_the_batch() -> TestResult {
    let Some(db) = Db::open()? else {
        return Ok(());
    };
    let (seed, mut r0) = append(false);
    db.batch(vec![seed])?;
    assert_eq!(r0.try_recv()?.ok(), Some(1));

    // Its statement runs in its savepoint, then it holds back an event that cannot be
    // inserted (its id is taken), which goes with the release of its savepoint, ahead of the
    // next job's savepoint and statement.
    let kept = meta("kept");
    let (a, mut ra) = Job::new(true, move |ctx| {
        kept(ctx)?;
        ctx.conn.insert_event(&EventRow {
            seq: 1,
            session_id: "s",
            turn_id: None,
            ts: 0,
            kind: "turn_started",
            data: "{}",
        })?;
        Ok(0)
    });
    // Its savepoint never opened: rolling back to "the" savepoint would undo `a`'s statement
    // while `a` is answered as committed.
    let (b, mut rb) = Job::new(true, meta("next"));
    let (c, mut rc) = append(false);
    db.batch(vec![a, b, c])?;
    assert!(
        matches!(ra.try_recv()?, Err(Error::Storage { .. })),
        "the job whose events failed must not look committed"
    );
    assert!(rb.try_recv()?.is_err());
    assert!(matches!(rc.try_recv()?, Err(Error::Storage { .. })));
    assert!(db
        .texts("SELECT key FROM turnstream.meta WHERE key IN ('kept', 'next')")?
        .is_empty());
    assert_eq!(
        db.ints("SELECT id FROM turnstream.events ORDER BY id")?,
        [1]
    );
    assert_eq!(db.ints("SELECT head FROM turnstream.counter")?, [1]);

    // The next batch begins afresh.
    let (d, mut rd) = append(true);
    db.batch(vec![d])?;
    assert_eq!(rd.try_recv()?.ok(), Some(2));
    Ok(())
}

/// A statement that can be held back ([`Sql::execute_unanswered`](crate::journal::sql::Sql)).
fn meta_unanswered(key: &'static str) -> impl Fn(&mut crate::journal::WriteCtx<'_>) -> Result<()> {
    move |ctx| {
        ctx.conn.execute_unanswered(
            "INSERT INTO meta(key, value) VALUES (?1, 'x')",
            crate::journal::sql::params![key],
        )
    }
}

#[test]
fn unanswered_statements_go_with_the_next_and_fail_their_job_or_its_batch() -> TestResult {
    let Some(db) = Db::open()? else {
        return Ok(());
    };
    // Two held back and an event, all sent with the commit: one round trip for the job.
    let (a, b) = (meta_unanswered("a"), meta_unanswered("b"));
    let (kept, mut rk) = Job::new(true, move |ctx| {
        a(ctx)?;
        let seq = ctx.append("s", Some("t"), |_| EventBody::TurnStarted {})?;
        b(ctx)?;
        Ok(seq)
    });
    assert_eq!(
        db.batch(vec![kept])?,
        2,
        "the lock and begin, then the rest with the commit"
    );
    assert_eq!(rk.try_recv()?.ok(), Some(1));
    assert_eq!(
        db.texts("SELECT key FROM turnstream.meta WHERE key IN ('a', 'b') ORDER BY key")?,
        ["a", "b"]
    );

    // One that fails (the key is taken), heard at the job's own next statement: that job
    // alone is undone, with its own error.
    let (taken, kept_too) = (meta_unanswered("a"), meta_unanswered("c"));
    let (failed, mut rf) = Job::new(true, move |ctx| {
        taken(ctx)?;
        ctx.conn.query_int("SELECT head FROM counter", &[])?;
        Ok(0)
    });
    let (after, mut ra) = Job::new(true, move |ctx| {
        kept_too(ctx)?;
        ctx.append("s", Some("t"), |_| EventBody::TurnStarted {})
    });
    db.batch(vec![failed, after])?;
    match rf.try_recv()? {
        Err(Error::Postgres(e)) => assert_eq!(e.code().map(|c| c.code()), Some("23505"), "{e}"),
        other => panic!("the job whose statement failed gets its own error, got {other:?}"),
    }
    assert_eq!(ra.try_recv()?.ok(), Some(2));
    assert_eq!(
        db.texts("SELECT key FROM turnstream.meta WHERE key = 'c'")?,
        ["c"]
    );

    // One that fails heard only with the commit: no job of the batch looks committed.
    let taken = meta_unanswered("b");
    let (last, mut rl) = Job::new(true, move |ctx| {
        ctx.append("s", Some("t"), |_| EventBody::TurnStarted {})?;
        taken(ctx)
    });
    let (other, mut ro) = append(false);
    db.batch(vec![other, last])?;
    assert!(rl.try_recv()?.is_err(), "the failed statement's job");
    assert!(ro.try_recv()?.is_err(), "the batch it was in");
    assert_eq!(
        db.ints("SELECT id FROM turnstream.events ORDER BY id")?,
        [1, 2]
    );
    assert_eq!(db.ints("SELECT head FROM turnstream.counter")?, [2]);
    Ok(())
}
