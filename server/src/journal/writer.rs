//! The writer thread: the one owner of the write connection. It commits whatever is queued in
//! one transaction (group commit), each job inside a savepoint of its own, and fans the batch's
//! events out only after the commit. A batch that cannot be committed is lost as a whole: every
//! job in it is told so, none of its events reaches the hub, and the ids it used are handed out
//! again (no client ever saw them).
//!
//! While writes fail, the thread probes the storage by itself, and only the probe ends the
//! fault: a write that lands meanwhile may have fitted where a larger one does not (a write that
//! finds the disk full has written part of itself before failing, and what it wrote is room for
//! the next small one). The probe asks for what the largest message needs, through the same
//! transaction as every write, so it cannot succeed where the writes it stands for would fail.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{mpsc as std_mpsc, Arc};
use std::time::{Duration, Instant};

use tokio::sync::oneshot;
use turnstream_protocol::limits::MAX_EVENT_PAYLOAD_BYTES;

use super::engine::{Begun, Publish, WriteConn};
use super::health::WriteHealth;
use super::sql::{Param, Sql};
use super::WriteCtx;
use super::{Committed, FanOut};
use crate::backoff::Backoff;
use crate::error::{Error, Result, StorageFault};
use crate::metrics::Metrics;

/// Most writes committed by one transaction.
const MAX_BATCH: usize = 1024;
/// Most leases a batch hands on to the next to check in one statement (see
/// [`Writer::fences`]); a turn beyond them is checked at its first write, as before.
const MAX_KNOWN_FENCES: usize = 1024;
/// First wait, once writes fail, before the writer probes the storage on its own; doubled after
/// each failed probe up to [`PROBE_MAX`]. Any queued write is an attempt too.
const PROBE_FIRST: Duration = Duration::from_millis(100);
/// Longest wait between probes of failing storage: how late readiness may notice recovery.
const PROBE_MAX: Duration = Duration::from_secs(1);
/// What the probe writes, in bytes: as much as the largest message a client can send (its text in
/// history and its `message_received` event, each at most one event payload). A one-row probe
/// fits in the few pages a full disk still has (what a failed write left allocated) while every
/// message is refused, and readiness would come and go with each probe.
const PROBE_BYTES: usize = 2 * MAX_EVENT_PAYLOAD_BYTES;
/// Free space the probe asks of the journal's file system, where it can tell: room for the probe
/// and, after it, for the largest message.
const PROBE_ROOM: u64 = 2 * PROBE_BYTES as u64;
/// Longest a write waits for a lock held elsewhere once writes are already failing. A write
/// has waited the whole busy timeout to find the lock still held; the writes after it (and the
/// probes) fail fast instead of each waiting as long again in the one writer's queue.
const FAILING_BUSY_TIMEOUT: Duration = Duration::from_millis(50);

pub(super) type Completion = Box<dyn FnOnce(Result<()>) + Send>;

/// How a job ran: `Ok` to keep its changes; otherwise they are rolled back, and the error's
/// storage fault (if that was the cause) counts against the storage's health.
pub(super) type Ran = std::result::Result<(), Option<(StorageFault, String)>>;

/// A write job: runs inside its own savepoint (or, given `None`, not at all: the batch it was in
/// was lost before its turn), says whether to keep its changes, and hands back what to call once
/// the batch's commit is known.
pub(super) type JobFn = Box<dyn FnOnce(Option<&mut WriteCtx<'_>>) -> (Ran, Completion) + Send>;

pub(super) struct Job {
    pub enqueued: Instant,
    /// False for a job that changes the database with at most one statement: a failing
    /// statement changes nothing, so the job needs no savepoint (which costs ~2 µs a job).
    pub savepoint: bool,
    pub run: JobFn,
}

impl Job {
    /// The job that runs `f` and sends its result, once the batch's commit is known, to the
    /// returned receiver.
    pub(super) fn new<R: Send + 'static>(
        savepoint: bool,
        f: impl FnOnce(&mut WriteCtx<'_>) -> Result<R> + Send + 'static,
    ) -> (Job, oneshot::Receiver<Result<R>>) {
        let (tx, rx) = oneshot::channel();
        let job = Job {
            enqueued: Instant::now(),
            savepoint,
            run: Box::new(move |ctx| {
                let r = match ctx {
                    Some(ctx) => f(ctx),
                    // Never sent as such: a job not run is answered with its batch's error.
                    None => Err(Error::Closed),
                };
                let ran = match &r {
                    Ok(_) => Ok(()),
                    Err(e) => Err(e.storage_fault().map(|f| (f, e.to_string()))),
                };
                let completion: Completion = Box::new(move |commit: Result<()>| {
                    let _ = tx.send(commit.and(r));
                });
                (ran, completion)
            }),
        };
        (job, rx)
    }
}

/// Why a whole batch was lost; every job in it gets this as its error.
struct Lost {
    fault: StorageFault,
    message: String,
}

impl Lost {
    fn of(what: &str, e: &Error) -> Lost {
        Lost {
            fault: e.storage_fault().unwrap_or(StorageFault::Unavailable),
            message: format!("{what}: {e}"),
        }
    }

    fn error(&self) -> Error {
        Error::storage(self.fault, self.message.clone())
    }
}

/// The write [`WriteConn::probe`] makes, the same on every database.
pub(super) fn write_probe(conn: &dyn Sql) -> Result<()> {
    write_probe_value(conn, &crate::clock::system_ms().to_string())
}

/// The probe's row, `bytes` long: random text, so no database stores it in less (PostgreSQL
/// compresses a long value that repeats itself).
fn write_probe_of(conn: &dyn Sql, bytes: usize) -> Result<()> {
    use rand::distr::{Alphanumeric, SampleString};
    write_probe_value(conn, &Alphanumeric.sample_string(&mut rand::rng(), bytes))
}

fn write_probe_value(conn: &dyn Sql, value: &str) -> Result<()> {
    conn.execute(
        "INSERT INTO meta(key, value) VALUES ('write_probe', ?1)
         ON CONFLICT(key) DO UPDATE SET value = excluded.value",
        &[Param::Text(value)],
    )?;
    Ok(())
}

pub(super) struct Writer {
    pub conn: Box<dyn WriteConn>,
    /// What the batch's events are handed to after the commit.
    pub publish: Box<dyn Publish>,
    pub epoch: String,
    pub fanout: Arc<dyn FanOut>,
    pub metrics: Arc<Metrics>,
    /// The last committed event id, published after each commit.
    pub head: Arc<AtomicI64>,
    pub health: Arc<WriteHealth>,
    /// The configured busy timeout, used while writes succeed.
    pub busy_timeout: Duration,
    /// What each job's `now` is read from.
    pub clock: crate::clock::Clock,
    /// Where other servers write too: the `(turn, lease token)` pairs the last batch found
    /// holding, checked again at the start of the next.
    pub fences: Vec<(String, String)>,
}

impl Writer {
    pub(super) fn run(mut self, rx: std_mpsc::Receiver<Job>) {
        let mut next_seq = self.head.load(Ordering::Acquire) + 1;
        let mut probe_wait = Backoff::new(PROBE_FIRST, PROBE_MAX);
        // While writes fail: when the next probe is due.
        let mut probe_at: Option<Instant> = None;
        let mut failing = false;
        loop {
            if failing != self.health.is_failing() {
                failing = !failing;
                let wait = if failing {
                    FAILING_BUSY_TIMEOUT.min(self.busy_timeout)
                } else {
                    self.busy_timeout
                };
                if let Err(e) = self.conn.set_busy_timeout(wait) {
                    tracing::warn!(error = %e, "journal: cannot set the busy timeout");
                }
            }
            let first = if self.health.is_failing() {
                // Due however many writes keep coming: only the probe ends the fault.
                let due = *probe_at.get_or_insert_with(|| Instant::now() + probe_wait.wait());
                let now = Instant::now();
                if now >= due {
                    self.probe(&mut next_seq);
                    probe_wait.grow();
                    probe_at = None;
                    continue;
                }
                match rx.recv_timeout(due - now) {
                    Ok(job) => job,
                    Err(std_mpsc::RecvTimeoutError::Timeout) => continue,
                    Err(std_mpsc::RecvTimeoutError::Disconnected) => break,
                }
            } else {
                probe_wait.reset();
                probe_at = None;
                match rx.recv() {
                    Ok(job) => job,
                    Err(_) => break,
                }
            };
            let mut batch = vec![first];
            while batch.len() < MAX_BATCH {
                match rx.try_recv() {
                    Ok(job) => batch.push(job),
                    Err(_) => break,
                }
            }
            self.metrics.batch_size.observe(batch.len() as f64);
            // A batch that lands does not end a fault (see the module docs); one that fails
            // starts or prolongs it.
            // Its fault, if any, is recorded in the health already.
            let _ = self.commit_batch(batch, &mut next_seq);
        }
        tracing::debug!("journal writer stopped");
    }

    /// The one way out of a fault, run while writes fail so health returns once the storage
    /// does, even with no traffic: a write that needs what a real one needs. [`PROBE_ROOM`] free
    /// on the database's file system (where the server can tell), [`PROBE_BYTES`] written by
    /// one job in a batch of its own (the same transaction, locks and durable commit as every
    /// write), then the row put back to its small size. Ready again means all three held.
    fn probe(&mut self, next_seq: &mut i64) {
        let outcome = match self.conn.free_bytes() {
            Some(free) if free < PROBE_ROOM => Err(Some(Error::storage(
                StorageFault::Full,
                format!(
                    "the database's file system has {free} bytes free; writes resume once it \
                     has {PROBE_ROOM}"
                ),
            ))),
            _ => self.probe_write(next_seq),
        };
        match outcome {
            Ok(()) => self.health.record_ok(),
            // The probe's batch was lost, and its fault recorded with it.
            Err(None) => {}
            Err(Some(e)) => {
                let fault = e.storage_fault().unwrap_or(StorageFault::Unavailable);
                self.health
                    .record_fault(fault, &format!("write probe failed: {e}"));
            }
        }
    }

    /// [`PROBE_BYTES`] through a batch of its own, then the one-row write that shrinks it back.
    /// `Err(None)`: the batch met a storage fault, recorded in the health already.
    fn probe_write(&mut self, next_seq: &mut i64) -> std::result::Result<(), Option<Error>> {
        let (job, mut done) = Job::new(false, |ctx| write_probe_of(ctx.conn, PROBE_BYTES));
        match (self.commit_batch(vec![job], next_seq), done.try_recv()) {
            (None, Ok(Ok(()))) => self.conn.probe().map_err(Some),
            (Some(_), _) => Err(None),
            (None, Ok(Err(e))) => Err(Some(e)),
            // (Never: the batch answers every job before it returns.)
            (None, Err(_)) => Err(Some(Error::Closed)),
        }
    }

    /// Runs `batch` in one transaction and answers every job: after the commit, or with the
    /// error that lost the batch. Events reach the hub only after the commit. A storage fault
    /// seen (a job's own, or the one that lost the batch) is recorded in the health before any
    /// job is answered, so a client refused for it finds the server not ready as well; it is
    /// returned too.
    fn commit_batch(
        &mut self,
        batch: Vec<Job>,
        next_seq: &mut i64,
    ) -> Option<(StorageFault, String)> {
        let started = Instant::now();
        if let Some(oldest) = batch.first() {
            self.metrics.writer_wait.observe(
                started
                    .saturating_duration_since(oldest.enqueued)
                    .as_secs_f64(),
            );
        }
        // Leases found holding in this batch (its transaction: no other writer runs meanwhile).
        // Where other servers write too, the leases the last batches found holding are checked
        // again first, all in one statement (sent with the transaction's begin where the
        // engine can), rather than one statement per turn as its first write in the batch
        // comes (a round trip each).
        let known = std::mem::take(&mut self.fences);
        let (shared, mut fences) = match self.conn.begin_checking(&known, self.clock.now_ms()) {
            Ok(Begun { head: None, .. }) => (false, Vec::new()),
            Ok(Begun {
                head: Some(head),
                holding,
            }) => {
                *next_seq = head + 1;
                (true, holding)
            }
            Err(e) => {
                self.conn.rollback();
                self.fences = known;
                return fail_all(
                    &self.health,
                    Vec::new(),
                    batch,
                    Lost::of("cannot begin a write transaction and check its leases", &e),
                );
            }
        };
        let batch_start_seq = *next_seq;
        let mut completions: Vec<(Instant, Completion)> = Vec::with_capacity(batch.len());
        let mut committed: Vec<Committed> = Vec::new();
        let mut job_fault = None;
        let mut lost = None;
        let mut jobs = batch.into_iter();
        for job in jobs.by_ref() {
            let saved = *next_seq;
            let savepoint = job.savepoint;
            if savepoint {
                if let Err(e) = self.conn.savepoint() {
                    lost = Some(Lost::of("cannot open a savepoint", &e));
                    let (_, completion) = (job.run)(None);
                    completions.push((job.enqueued, completion));
                    break;
                }
            }
            let mut ctx = WriteCtx {
                conn: self.conn.sql(),
                write_conn: &*self.conn,
                epoch: &self.epoch,
                next_seq: &mut *next_seq,
                committed: Vec::new(),
                fanout: &*self.fanout,
                fences: &mut fences,
                now: self.clock.now_ms(),
            };
            let (ran, completion) = (job.run)(Some(&mut ctx));
            let job_events = ctx.committed;
            completions.push((job.enqueued, completion));
            if let Err(Some(fault)) = &ran {
                job_fault = Some(fault.clone());
            }
            let keep = ran.is_ok();
            if !keep {
                *next_seq = saved;
            }
            // SQLite may roll back the whole transaction after an I/O error or a full disk;
            // what follows would then run outside it, so the batch ends here.
            if !self.conn.in_transaction() {
                lost = Some(Lost {
                    fault: job_fault
                        .as_ref()
                        .map_or(StorageFault::Unavailable, |f| f.0),
                    message: "the storage rolled back the write transaction after an error".into(),
                });
                break;
            }
            if savepoint {
                let end = if keep {
                    self.conn.release_savepoint()
                } else {
                    self.conn.rollback_to_savepoint()
                };
                if let Err(e) = end {
                    // The job's changes can be neither kept apart nor undone: lose the batch.
                    lost = Some(Lost::of("cannot end a savepoint", &e));
                    break;
                }
            }
            if self.conn.spoiled() {
                lost = Some(Lost {
                    fault: job_fault
                        .as_ref()
                        .map_or(StorageFault::Unavailable, |f| f.0),
                    message: "a failed statement aborted the write transaction".into(),
                });
                break;
            }
            if keep {
                committed.extend(job_events);
            }
        }
        if shared {
            fences.truncate(MAX_KNOWN_FENCES);
            self.fences = fences;
        }
        if let Some(lost) = lost {
            *next_seq = batch_start_seq;
            self.conn.rollback();
            return fail_all(&self.health, completions, jobs.collect(), lost);
        }
        let commit_start = Instant::now();
        self.metrics
            .batch_statements
            .observe((commit_start - started).as_secs_f64());
        match self.conn.commit(*next_seq - 1) {
            Ok(()) => {
                let publish_start = Instant::now();
                self.metrics
                    .commit_time
                    .observe((publish_start - commit_start).as_secs_f64());
                self.metrics
                    .events_appended
                    .fetch_add(committed.len() as u64, Ordering::Relaxed);
                self.publish.committed(*next_seq - 1, committed);
                self.metrics
                    .publish_time
                    .observe(publish_start.elapsed().as_secs_f64());
                if let Some((fault, message)) = &job_fault {
                    self.health.record_fault(*fault, message);
                }
                for (enqueued, completion) in completions {
                    self.metrics
                        .append_latency
                        .observe(enqueued.elapsed().as_secs_f64());
                    completion(Ok(()));
                }
                job_fault
            }
            Err(e) => {
                // Dropping the transaction rolled it back: nothing of it exists, so its ids are
                // free again, and no subscriber was told of them. The stored head is read back
                // to be sure: should a commit reported as failed have been kept after all, the
                // next ids must not collide with its events.
                *next_seq = batch_start_seq;
                self.conn.rollback();
                if let Some(stored) = self.conn.stored_head() {
                    if stored >= batch_start_seq {
                        tracing::error!(
                            stored,
                            "journal: a commit reported as failed was kept; its events reach streams only by replay"
                        );
                        *next_seq = stored + 1;
                        self.head.store(stored, Ordering::Release);
                    }
                }
                fail_all(
                    &self.health,
                    completions,
                    Vec::new(),
                    Lost::of("commit failed", &e),
                )
            }
        }
    }
}

/// Records the fault that lost a batch in the health, then answers every job of it with its
/// error: those that ran, and those never run.
fn fail_all(
    health: &WriteHealth,
    ran: Vec<(Instant, Completion)>,
    not_run: Vec<Job>,
    lost: Lost,
) -> Option<(StorageFault, String)> {
    health.record_fault(lost.fault, &lost.message);
    // Not an error log per batch: the health logs the first failure and the recovery.
    tracing::debug!(error = %lost.message, jobs = ran.len() + not_run.len(), "journal: a write batch was lost");
    for (_, completion) in ran {
        completion(Err(lost.error()));
    }
    for job in not_run {
        let (_, completion) = (job.run)(None);
        completion(Err(lost.error()));
    }
    Some((lost.fault, lost.message))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::journal::schema;
    use turnstream_protocol::EventBody;

    type TestResult = std::result::Result<(), Box<dyn std::error::Error>>;

    /// A writer on a fresh database with a table whose deferred foreign key is checked only at
    /// COMMIT: a job that breaks it makes the whole batch's commit fail, as a full disk or an
    /// I/O error at commit time would.
    type Built = (Arc<crate::live::hub::Hub>, Writer);

    /// The writer, and the hub its live feed publishes to.
    fn writer(dir: &std::path::Path) -> std::result::Result<Built, Box<dyn std::error::Error>> {
        let mut conn = rusqlite::Connection::open(dir.join("w.db"))?;
        schema::configure(&conn)?;
        let epoch = schema::migrate(&mut conn)?;
        conn.execute_batch(
            "CREATE TABLE parent(id INTEGER PRIMARY KEY);
             CREATE TABLE child(parent INTEGER REFERENCES parent(id) DEFERRABLE INITIALLY DEFERRED);",
        )?;
        let metrics = Arc::new(Metrics::default());
        let hub = crate::live::hub::Hub::with_metrics(metrics.clone());
        let fanout: Arc<dyn FanOut> = crate::live::LiveFeed::new(hub.clone());
        let head = Arc::new(AtomicI64::new(0));
        Ok((
            hub.clone(),
            Writer {
                conn: Box::new(conn),
                publish: Box::new(crate::journal::engine::Direct {
                    epoch: epoch.clone(),
                    fanout: fanout.clone(),
                    head: head.clone(),
                }),
                epoch,
                fanout,
                metrics: metrics.clone(),
                head,
                health: Arc::new(WriteHealth::new(metrics)),
                busy_timeout: schema::DEFAULT_BUSY_TIMEOUT,
                clock: crate::clock::Clock::system(),
                fences: Vec::new(),
            },
        ))
    }

    fn append(savepoint: bool) -> (Job, oneshot::Receiver<Result<i64>>) {
        Job::new(savepoint, |ctx| {
            ctx.append("s", Some("t"), |_| EventBody::TurnStarted {})
        })
    }

    fn events(w: &Writer) -> Result<Vec<i64>> {
        w.conn
            .sql()
            .query("SELECT id FROM events ORDER BY id", &[])?
            .iter()
            .map(|r| r.int(0))
            .collect()
    }

    #[test]
    fn a_failed_commit_fails_every_job_of_its_batch_and_publishes_nothing() -> TestResult {
        let dir = tempfile::tempdir()?;
        let (hub, mut w) = writer(dir.path())?;
        let mut sub = hub.subscribe(&["s".to_string()]);
        let mut next_seq = 1;

        let (a, mut ra) = append(true);
        let (b, mut rb) = append(false);
        let (poison, mut rp) = Job::new(true, |ctx| {
            let seq = ctx.append("s", Some("t"), |_| EventBody::TurnStarted {})?;
            ctx.conn
                .execute("INSERT INTO child(parent) VALUES (42)", &[])?;
            Ok(seq)
        });
        let (d, mut rd) = append(true);
        let fault = w.commit_batch(vec![a, b, poison, d], &mut next_seq);
        assert!(fault.is_some(), "a lost batch is a storage fault");
        for r in [&mut ra, &mut rb, &mut rp, &mut rd] {
            match r.try_recv() {
                Ok(Err(Error::Storage { message, .. })) => assert!(message.contains("commit")),
                other => panic!("every job of the batch must learn it failed, got {other:?}"),
            }
        }
        assert!(
            sub.try_recv().is_none(),
            "nothing of a failed commit is fanned out"
        );
        assert_eq!(w.head.load(Ordering::Acquire), 0);
        assert_eq!(next_seq, 1, "the ids of a rolled-back batch are free again");
        assert!(events(&w)?.is_empty());
        assert!(!w.conn.in_transaction(), "no transaction is left open");

        // The next batch commits, reusing the ids nobody saw; a job failing on its own is
        // rolled back alone and leaves no gap.
        let (e, mut re) = append(true);
        let (failing, mut rf) = Job::new(true, |ctx| -> Result<i64> {
            ctx.append("s", Some("t"), |_| EventBody::TurnStarted {})?;
            Err(Error::NotFound { what: "turn" })
        });
        let (g, mut rg) = append(false);
        assert!(w.commit_batch(vec![e, failing, g], &mut next_seq).is_none());
        assert_eq!(re.try_recv()?.ok(), Some(1));
        assert!(matches!(rf.try_recv()?, Err(Error::NotFound { .. })));
        assert_eq!(rg.try_recv()?.ok(), Some(2));
        assert_eq!(events(&w)?, vec![1, 2]);
        assert_eq!(w.head.load(Ordering::Acquire), 2);
        let published: Vec<i64> = std::iter::from_fn(|| sub.try_recv().map(|f| f.seq)).collect();
        assert_eq!(published, vec![1, 2]);
        Ok(())
    }

    #[test]
    fn a_transaction_the_storage_rolled_back_loses_the_whole_batch() -> TestResult {
        let dir = tempfile::tempdir()?;
        let (hub, mut w) = writer(dir.path())?;
        let mut sub = hub.subscribe(&["s".to_string()]);
        let mut next_seq = 1;
        let (a, mut ra) = append(true);
        // What SQLite does by itself after some I/O errors or a full disk: the whole transaction
        // is gone, and the statements that follow would run outside it.
        let (rolled_back, mut rr) = Job::new(false, |ctx| -> Result<()> {
            ctx.conn.execute("ROLLBACK", &[])?;
            Err(Error::storage(StorageFault::Full, "disk full"))
        });
        let (c, mut rc) = append(true);
        let fault = w.commit_batch(vec![a, rolled_back, c], &mut next_seq);
        assert_eq!(fault.map(|f| f.0), Some(StorageFault::Full));
        for r in [&mut ra, &mut rc] {
            assert!(
                matches!(r.try_recv()?, Err(Error::Storage { .. })),
                "a job before or after the rollback must not look committed"
            );
        }
        assert!(matches!(rr.try_recv()?, Err(Error::Storage { .. })));
        assert!(sub.try_recv().is_none());
        assert!(events(&w)?.is_empty(), "no job ran outside the transaction");
        assert_eq!(next_seq, 1);
        Ok(())
    }

    /// SQLite's connection, reporting `free` bytes free on its file system.
    struct Reporting {
        conn: rusqlite::Connection,
        free: Option<u64>,
    }

    impl WriteConn for Reporting {
        fn begin(&mut self) -> Result<Option<i64>> {
            self.conn.begin()
        }
        fn sql(&self) -> &dyn Sql {
            &self.conn
        }
        fn savepoint(&self) -> Result<()> {
            self.conn.savepoint()
        }
        fn release_savepoint(&self) -> Result<()> {
            self.conn.release_savepoint()
        }
        fn rollback_to_savepoint(&self) -> Result<()> {
            self.conn.rollback_to_savepoint()
        }
        fn try_lock(&self, key: i64) -> Result<bool> {
            self.conn.try_lock(key)
        }
        fn announce_floor(&self, session_id: &str, floor: i64) -> Result<()> {
            self.conn.announce_floor(session_id, floor)
        }
        fn in_transaction(&self) -> bool {
            WriteConn::in_transaction(&self.conn)
        }
        fn commit(&mut self, head: i64) -> Result<()> {
            WriteConn::commit(&mut self.conn, head)
        }
        fn rollback(&mut self) {
            WriteConn::rollback(&mut self.conn)
        }
        fn probe(&mut self) -> Result<()> {
            self.conn.probe()
        }
        fn stored_head(&mut self) -> Option<i64> {
            self.conn.stored_head()
        }
        fn set_busy_timeout(&mut self, wait: Duration) -> Result<()> {
            self.conn.set_busy_timeout(wait)
        }
        fn spoiled(&self) -> bool {
            self.conn.spoiled()
        }
        fn free_bytes(&self) -> Option<u64> {
            self.free
        }
    }

    fn probe_value(w: &Writer) -> Result<Option<String>> {
        Ok(w.conn
            .sql()
            .query_texts("SELECT value FROM meta WHERE key = 'write_probe'", &[])?
            .into_iter()
            .next())
    }

    #[test]
    fn the_probe_asks_for_room_then_writes_a_message_s_size_and_shrinks_back() -> TestResult {
        let dir = tempfile::tempdir()?;
        let (_hub, mut w) = writer(dir.path())?;
        #[cfg(unix)]
        assert!(
            w.conn.free_bytes().is_some_and(|b| b > 0),
            "a database file on a Unix file system knows its free space"
        );
        let path = dir.path().join("w.db");
        w.conn = Box::new(Reporting {
            conn: rusqlite::Connection::open(&path)?,
            free: Some(PROBE_ROOM - 1),
        });
        let mut next_seq = 1;
        w.health.record_fault(StorageFault::Full, "disk full");
        w.probe(&mut next_seq);
        let failing = w.health.failing().ok_or("still failing")?;
        assert_eq!(failing.fault, StorageFault::Full);
        assert!(
            failing.message.contains("bytes free"),
            "{}",
            failing.message
        );
        assert_eq!(probe_value(&w)?, None, "nothing written without the room");

        w.conn = Box::new(Reporting {
            conn: rusqlite::Connection::open(&path)?,
            free: Some(PROBE_ROOM),
        });
        w.probe(&mut next_seq);
        assert!(!w.health.is_failing(), "the probe ends the fault");
        let value = probe_value(&w)?.ok_or("no probe row")?;
        assert!(value.len() < 20, "the probe's row is shrunk back");
        // What it wrote is left as free pages of the database (for the next writes to reuse).
        let free_pages = w
            .conn
            .sql()
            .query_int("PRAGMA freelist_count", &[])?
            .unwrap_or(0);
        assert!(
            free_pages as usize * 4096 >= PROBE_BYTES * 9 / 10,
            "{free_pages} free pages after the probe"
        );
        assert!(events(&w)?.is_empty(), "the probe journals no event");
        assert_eq!(next_seq, 1, "and uses no event id");
        Ok(())
    }

    #[test]
    fn a_lock_held_elsewhere_fails_the_batch_and_the_probe_notices_its_release() -> TestResult {
        let dir = tempfile::tempdir()?;
        let (_hub, mut w) = writer(dir.path())?;
        w.busy_timeout = Duration::from_millis(10);
        w.conn.set_busy_timeout(w.busy_timeout)?;
        let other = rusqlite::Connection::open(dir.path().join("w.db"))?;
        other.execute_batch("BEGIN IMMEDIATE")?;

        let mut next_seq = 1;
        // The job's answer is given once the fault is in the health: a client refused for it
        // finds the server not ready.
        let failing_when_answered = Arc::new(std::sync::Mutex::new(None));
        let job = Job {
            enqueued: Instant::now(),
            savepoint: true,
            run: {
                let (health, seen) = (w.health.clone(), failing_when_answered.clone());
                Box::new(move |_| {
                    let completion: Completion = Box::new(move |r: Result<()>| {
                        *crate::mutex::lock(&seen) = Some((r.is_err(), health.is_failing()));
                    });
                    (Ok(()), completion)
                })
            },
        };
        let fault = w.commit_batch(vec![job], &mut next_seq);
        assert_eq!(fault.map(|f| f.0), Some(StorageFault::Unavailable));
        assert_eq!(
            *crate::mutex::lock(&failing_when_answered),
            Some((true, true)),
            "refused, with the fault already recorded"
        );
        let (a, mut ra) = append(true);
        w.commit_batch(vec![a], &mut next_seq);
        assert!(matches!(
            ra.try_recv()?,
            Err(Error::Storage {
                fault: StorageFault::Unavailable,
                ..
            })
        ));
        // A failed probe's batch is one failed attempt, counted once.
        let metrics = w.metrics.clone();
        let faults = || metrics.storage_faults[1].load(Ordering::Relaxed);
        let before = faults();
        w.probe(&mut next_seq);
        assert_eq!(faults(), before + 1, "one failed probe, one fault counted");
        assert!(
            w.health.is_failing(),
            "the probe fails while the lock is held"
        );
        other.execute_batch("ROLLBACK")?;
        w.probe(&mut next_seq);
        assert!(
            !w.health.is_failing(),
            "the probe succeeds once the lock is gone"
        );
        Ok(())
    }
}
