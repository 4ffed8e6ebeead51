//! Turn execution under tokio's paused time, with the journal's clock moved by hand, on real
//! SQLite files, for each mode: FIFO per session, cancel of a queued, a running and a leased
//! turn, lease expiry and renewal, shutdown drain, and a turn's end retried while the storage
//! refuses it. The agent is a puppet the test drives.
//!
//! Time moves only when a test says so: a blocking task held for the whole test keeps tokio from
//! jumping its paused clock ahead while the journal's writer thread works (which tokio cannot
//! see), and each test advances tokio's clock and the journal's together. Waits for what happens
//! meanwhile (a write landing, a turn starting) are bounded in real time.
//!
//! - `agents`: this server's agent on one node, and under leases on a shared journal;
//! - `workers`: worker processes' turns;
//! - `lease_sweep`: the lease sweep alone.

mod agents;
mod lease_sweep;
mod workers;

use std::future::Future;
use std::path::PathBuf;

use futures::future::BoxFuture;
use tokio::sync::{mpsc, oneshot, watch};
use turnstream_protocol::worker::NO_SEQ;
use turnstream_protocol::EventBody;

use super::*;
use crate::agent::{Agent, AgentError, TurnContext, TurnSink};
use crate::clock::Clock;
use crate::journal::{Claim, Committed, FanOut, JournalOptions, Refusal, WorkerOp};
use crate::metrics::Metrics;
use std::sync::atomic::Ordering;

type TestResult<T = ()> = std::result::Result<T, Box<dyn std::error::Error>>;

/// How long, in real time, a test waits for something that happens at once in a working build.
const REAL_DEADLINE: Duration = Duration::from_secs(20);
/// The leases in these tests.
const LEASE: Duration = Duration::from_secs(30);
/// When the journal's clock starts.
const START_MS: i64 = 1_700_000_000_000;

/// Keeps tokio's paused clock from advancing by itself: a blocking task counts as work tokio
/// waits for, so while one is held the clock moves only by `tokio::time::advance`.
struct Hold(Option<std::sync::mpsc::Sender<()>>);

fn hold() -> Hold {
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    tokio::task::spawn_blocking(move || {
        let _ = rx.recv();
    });
    Hold(Some(tx))
}

impl Drop for Hold {
    fn drop(&mut self) {
        self.0.take();
    }
}

/// `fut`, failing the test unless it is ready within [`REAL_DEADLINE`] of real time.
async fn within<T>(what: &str, fut: impl Future<Output = T>) -> T {
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let timer = tokio::task::spawn_blocking(move || rx.recv_timeout(REAL_DEADLINE));
    tokio::select! {
        out = fut => {
            drop(tx);
            out
        }
        _ = timer => panic!("{what}: not within {REAL_DEADLINE:?}"),
    }
}

/// Waits a little real time (for polling a condition only the database shows).
async fn real_pause() {
    let _ = tokio::task::spawn_blocking(|| std::thread::sleep(Duration::from_millis(5))).await;
}

/// What the journal committed, in order, and which events each commit held.
struct Recorder {
    events: watch::Sender<Vec<Committed>>,
    commits: Arc<std::sync::Mutex<Vec<Vec<i64>>>>,
}

impl FanOut for Recorder {
    fn committed(&self, _epoch: &str, events: Vec<Committed>) {
        crate::mutex::lock(&self.commits).push(events.iter().map(|e| e.seq).collect());
        self.events.send_modify(|all| all.extend(events));
    }
    fn floor_raised(&self, _session_id: &str, _floor: i64) {}
    fn unsure_through(&self, _seq: i64) {}
}

/// A turn the puppet agent runs: the test emits through `sink` and ends it through `end`
/// (dropping `end` leaves the turn running until it is stopped).
struct Act {
    turn: String,
    message: String,
    sink: TurnSink,
    end: oneshot::Sender<std::result::Result<(), AgentError>>,
}

impl Act {
    fn complete(self, text: &str) {
        self.sink.response(text);
        let _ = self.end.send(Ok(()));
    }
}

/// An agent that hands each turn to the test.
struct Puppet(mpsc::UnboundedSender<Act>);

impl Agent for Puppet {
    fn run<'a>(
        &'a self,
        ctx: TurnContext,
        sink: TurnSink,
    ) -> BoxFuture<'a, std::result::Result<(), AgentError>> {
        Box::pin(async move {
            let (end, ended) = oneshot::channel();
            let _ = self.0.send(Act {
                turn: ctx.turn_id,
                message: ctx.user_message,
                sink,
                end,
            });
            match ended.await {
                Ok(result) => result,
                Err(_) => std::future::pending().await,
            }
        })
    }
}

fn puppet() -> (Arc<dyn Agent>, mpsc::UnboundedReceiver<Act>) {
    let (tx, rx) = mpsc::unbounded_channel();
    (Arc::new(Puppet(tx)), rx)
}

/// The modes the generic tests run in; [`Kind::Shared`] runs under leases on SQLite, as it
/// would on a shared PostgreSQL journal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Local,
    Shared,
}

fn mode(kind: Kind, agent: Arc<dyn Agent>) -> Mode {
    match kind {
        Kind::Local => Mode::Local { agent },
        Kind::Shared => Mode::Shared {
            agent,
            node: Node::new(LEASE),
        },
    }
}

/// A journal in a temporary SQLite file on a clock moved by hand.
struct Bed {
    _dir: tempfile::TempDir,
    path: PathBuf,
    clock: Clock,
    journal: Journal,
    events: watch::Receiver<Vec<Committed>>,
    /// The seqs of each commit's events, one entry per commit.
    commits: Arc<std::sync::Mutex<Vec<Vec<i64>>>>,
    _hold: Hold,
}

impl Bed {
    fn new() -> TestResult<Bed> {
        let hold = hold();
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("turns.db");
        let clock = Clock::manual(START_MS);
        let (tx, events) = watch::channel(Vec::new());
        let commits = Arc::new(std::sync::Mutex::new(Vec::new()));
        let journal = Journal::open_with(
            &path,
            Arc::new(Metrics::default()),
            JournalOptions {
                // A write lock held elsewhere fails a write fast.
                busy_timeout: Duration::from_millis(50),
                clock: clock.clone(),
                ..Default::default()
            },
            Arc::new(Recorder {
                events: tx,
                commits: commits.clone(),
            }),
        )?;
        Ok(Bed {
            _dir: dir,
            path,
            clock,
            journal,
            events,
            commits,
            _hold: hold,
        })
    }

    fn turns(&self, mode: Mode) -> Arc<Turns> {
        self.turns_merging(mode, Duration::ZERO)
    }

    /// Turns whose deltas merge for `window` (a turn's runner holds them back meanwhile).
    fn turns_merging(&self, mode: Mode, window: Duration) -> Arc<Turns> {
        Turns::new(
            self.journal.clone(),
            mode,
            TurnsConfig {
                coalesce: window,
                max_concurrent_turns: 8,
                max_turns_per_client: 8,
            },
        )
    }

    /// Queues a message in `session` without telling anyone.
    async fn queue(&self, session: &str, content: &str) -> TestResult<String> {
        let accepted = self
            .journal
            .accept_message(
                session,
                crate::journal::NewMessage {
                    content: content.to_string(),
                    ..Default::default()
                },
                crate::journal::Admission::enqueue(64),
            )
            .await?;
        Ok(accepted.response.turn_id)
    }

    /// Posts a message as the gateway does: queued, then the session kicked.
    async fn post(&self, turns: &Arc<Turns>, session: &str, content: &str) -> TestResult<String> {
        let turn = self.queue(session, content).await?;
        turns.kick(session);
        Ok(turn)
    }

    async fn state(&self, turn: &str) -> TestResult<TurnState> {
        Ok(self.journal.turn(turn).await?.ok_or("no such turn")?.state)
    }

    async fn text(&self, turn: &str) -> TestResult<String> {
        Ok(self
            .journal
            .turn_info(turn)
            .await?
            .ok_or("no such turn")?
            .text)
    }

    /// Moves tokio's clock and the journal's together.
    async fn advance(&self, by: Duration) {
        self.clock.advance(by);
        tokio::time::advance(by).await;
    }

    /// Waits until the committed events satisfy `done`.
    async fn wait_events(&self, what: &str, done: impl Fn(&[Committed]) -> bool) {
        let mut events = self.events.clone();
        let waited = within(what, events.wait_for(|all| done(all))).await;
        assert!(waited.is_ok(), "{what}: the journal closed");
    }

    /// Waits until `turn` has ended.
    async fn wait_ended(&self, turn: &str) {
        self.wait_events(&format!("turn {turn} ends"), |all| ends(all, turn) > 0)
            .await;
    }

    /// The commit that held the event `seq`, by its place among the commits.
    fn commit_of(&self, seq: i64) -> Option<usize> {
        crate::mutex::lock(&self.commits)
            .iter()
            .position(|c| c.contains(&seq))
    }

    fn ends(&self, turn: &str) -> usize {
        ends(&self.events.borrow(), turn)
    }

    fn kinds(&self, turn: &str) -> Vec<String> {
        self.events
            .borrow()
            .iter()
            .filter(|e| e.turn_id.as_deref() == Some(turn))
            .map(|e| e.kind.clone())
            .collect()
    }

    /// The lease expiry stored with `turn`.
    fn lease_expiry(&self, turn: &str) -> TestResult<Option<i64>> {
        let conn = rusqlite::Connection::open(&self.path)?;
        Ok(conn.query_row(
            "SELECT lease_expires_at FROM turns WHERE turn_id = ?1",
            [turn],
            |r| r.get(0),
        )?)
    }

    /// Holds SQLite's write lock from a connection of its own until dropped: every journal
    /// write fails as "database is locked" meanwhile.
    fn lock_writes(&self) -> TestResult<rusqlite::Connection> {
        let conn = rusqlite::Connection::open(&self.path)?;
        conn.execute_batch("BEGIN IMMEDIATE")?;
        Ok(conn)
    }

    /// Waits until some write failed and the storage is marked failing.
    async fn wait_failing(&self) {
        within("writes fail", async {
            while !self.journal.write_health().is_failing() {
                real_pause().await;
            }
        })
        .await;
    }

    /// Until a turn's end, refused by the storage, has been tried again.
    async fn wait_end_retried(&self) {
        within("the end is retried", async {
            while self
                .journal
                .metrics()
                .turn_end_retries
                .load(Ordering::Relaxed)
                == 0
            {
                real_pause().await;
            }
        })
        .await;
    }
}

fn ends(all: &[Committed], turn: &str) -> usize {
    all.iter()
        .filter(|e| e.turn_id.as_deref() == Some(turn) && e.kind == "turn_ended")
        .count()
}

async fn next(acts: &mut mpsc::UnboundedReceiver<Act>) -> Act {
    within("a turn starts", acts.recv())
        .await
        .expect("the puppet agent is gone")
}

/// Lets every task that can make progress run (a few journal round trips), so that a turn that
/// should not start would have.
async fn settle(bed: &Bed) -> TestResult {
    for _ in 0..5 {
        tokio::task::yield_now().await;
        bed.journal.turn("none").await?;
    }
    Ok(())
}

fn assert_idle(acts: &mut mpsc::UnboundedReceiver<Act>) {
    if let Ok(act) = acts.try_recv() {
        panic!("turn {:?} ({}) started", act.message, act.turn);
    }
}

/// Another server's running turn: claimed under its lease, as that server's session loop does.
async fn claimed_elsewhere(bed: &Bed, turn: &str) -> TestResult<String> {
    match bed.journal.claim_turn(turn, "node_other", LEASE).await? {
        Claim::Started(lease) => Ok(lease.token),
        other => Err(format!("claim: {other:?}").into()),
    }
}
