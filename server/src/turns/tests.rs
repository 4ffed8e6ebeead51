//! Turn execution under tokio's paused time, with the journal's clock moved by hand, on real
//! SQLite files, for each mode: FIFO per session, cancel of a queued, a running and a leased
//! turn, lease expiry and renewal, shutdown drain, and a turn's end retried while the storage
//! refuses it. The agent is a puppet the test drives.
//!
//! Time moves only when a test says so: a blocking task held for the whole test keeps tokio from
//! jumping its paused clock ahead while the journal's writer thread works (which tokio cannot
//! see), and each test advances tokio's clock and the journal's together. Waits for what happens
//! meanwhile (a write landing, a turn starting) are bounded in real time.

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

/// What the journal committed, in order.
struct Recorder(watch::Sender<Vec<Committed>>);

impl FanOut for Recorder {
    fn committed(&self, _epoch: &str, events: Vec<Committed>) {
        self.0.send_modify(|all| all.extend(events));
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
    _hold: Hold,
}

impl Bed {
    fn new() -> TestResult<Bed> {
        let hold = hold();
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("turns.db");
        let clock = Clock::manual(START_MS);
        let (tx, events) = watch::channel(Vec::new());
        let journal = Journal::open_with(
            &path,
            Arc::new(Metrics::default()),
            JournalOptions {
                // A write lock held elsewhere fails a write fast.
                busy_timeout: Duration::from_millis(50),
                clock: clock.clone(),
                ..Default::default()
            },
            Arc::new(Recorder(tx)),
        )?;
        Ok(Bed {
            _dir: dir,
            path,
            clock,
            journal,
            events,
            _hold: hold,
        })
    }

    fn turns(&self, mode: Mode) -> Arc<Turns> {
        Turns::new(
            self.journal.clone(),
            mode,
            TurnsConfig {
                coalesce: Duration::ZERO,
                max_concurrent_turns: 8,
                max_turns_per_client: 8,
            },
        )
    }

    /// Queues a message in `session` without telling anyone.
    async fn queue(&self, session: &str, content: &str) -> TestResult<String> {
        let accepted = self
            .journal
            .accept_message(session, content, Vec::new(), None, None, 64)
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

// ---- one node, and a shared journal under leases -------------------------------------------

async fn runs_each_sessions_turns_one_at_a_time_in_order(kind: Kind) -> TestResult {
    let bed = Bed::new()?;
    let (agent, mut acts) = puppet();
    let turns = bed.turns(mode(kind, agent));
    turns.start().await?;
    let s1 = bed.post(&turns, "s", "s1").await?;
    let s2 = bed.post(&turns, "s", "s2").await?;
    let s3 = bed.post(&turns, "s", "s3").await?;
    let t1 = bed.post(&turns, "t", "t1").await?;
    // Sessions run side by side; within one, the oldest turn first.
    let mut first = [next(&mut acts).await, next(&mut acts).await];
    first.sort_by(|a, b| a.message.cmp(&b.message));
    assert_eq!([&*first[0].message, &*first[1].message], ["s1", "t1"]);
    assert_eq!(first[0].turn, s1);
    assert_eq!(
        bed.journal.is_leased(&s1).await?,
        kind == Kind::Shared,
        "a turn runs under a lease exactly on a shared journal"
    );
    settle(&bed).await?;
    assert_idle(&mut acts);
    assert_eq!(bed.state(&s2).await?, TurnState::Queued);
    assert_eq!(bed.state(&s3).await?, TurnState::Queued);
    let [s, t] = first;
    s.complete("one");
    let second = next(&mut acts).await;
    assert_eq!((second.message.as_str(), &second.turn), ("s2", &s2));
    assert_eq!(bed.state(&s1).await?, TurnState::Completed);
    assert_eq!(bed.text(&s1).await?, "one");
    second.complete("two");
    let third = next(&mut acts).await;
    assert_eq!(third.turn, s3);
    third.complete("three");
    t.complete("t");
    for turn in [&s1, &s2, &s3, &t1] {
        bed.wait_ended(turn).await;
        assert_eq!(bed.state(turn).await?, TurnState::Completed);
        assert_eq!(bed.ends(turn), 1);
    }
    Ok(())
}

async fn a_cancelled_queued_turn_never_starts(kind: Kind) -> TestResult {
    let bed = Bed::new()?;
    let (agent, mut acts) = puppet();
    let turns = bed.turns(mode(kind, agent));
    turns.start().await?;
    let _s1 = bed.post(&turns, "s", "s1").await?;
    let s2 = bed.post(&turns, "s", "s2").await?;
    let s3 = bed.post(&turns, "s", "s3").await?;
    let running = next(&mut acts).await;
    assert_eq!(turns.cancel(&s2).await?, TurnState::Cancelled);
    assert_eq!(bed.state(&s2).await?, TurnState::Cancelled);
    assert_eq!(turns.cancel(&s2).await?, TurnState::Cancelled, "idempotent");
    running.complete("one");
    let after = next(&mut acts).await;
    assert_eq!(after.turn, s3, "the cancelled turn is skipped");
    assert_eq!(
        bed.kinds(&s2),
        ["message_received", "turn_queued", "turn_ended"]
    );
    Ok(())
}

async fn a_cancelled_running_turn_ends_cancelled_with_its_text(kind: Kind) -> TestResult {
    let bed = Bed::new()?;
    let (agent, mut acts) = puppet();
    let turns = bed.turns(mode(kind, agent));
    turns.start().await?;
    let s1 = bed.post(&turns, "s", "s1").await?;
    let s2 = bed.post(&turns, "s", "s2").await?;
    let mut act = next(&mut acts).await;
    act.sink.response("partial");
    bed.wait_events("the delta is journaled", |all| {
        all.iter().any(|e| e.kind == "response_delta")
    })
    .await;
    assert_eq!(turns.cancel(&s1).await?, TurnState::Cancelled);
    within("the agent is stopped", act.end.closed()).await;
    assert_eq!(bed.text(&s1).await?, "partial");
    assert_eq!(bed.ends(&s1), 1);
    // The session goes on with its next turn.
    assert_eq!(next(&mut acts).await.turn, s2);
    Ok(())
}

async fn shutdown_lets_running_turns_finish_then_interrupts_the_rest(kind: Kind) -> TestResult {
    let bed = Bed::new()?;
    let (agent, mut acts) = puppet();
    let turns = bed.turns(mode(kind, agent));
    turns.start().await?;
    let s1 = bed.post(&turns, "s", "s1").await?;
    let s2 = bed.post(&turns, "s", "s2").await?;
    let t1 = bed.post(&turns, "t", "t1").await?;
    let t2 = bed.post(&turns, "t", "t2").await?;
    let mut running = [next(&mut acts).await, next(&mut acts).await];
    running.sort_by(|a, b| a.message.cmp(&b.message));
    let [mut s, t] = running;
    let grace = Duration::from_secs(5);
    let stopping = tokio::spawn({
        let turns = turns.clone();
        async move { turns.shutdown(grace).await }
    });
    within("shutdown begins", async {
        while !turns.is_stopping() {
            tokio::task::yield_now().await;
        }
    })
    .await;
    // Within the grace period a running turn still ends as its agent says...
    t.complete("in time");
    bed.wait_ended(&t1).await;
    assert_eq!(bed.state(&t1).await?, TurnState::Completed);
    // ...and no queued turn starts.
    settle(&bed).await?;
    assert_idle(&mut acts);
    assert_eq!(bed.state(&t2).await?, TurnState::Queued);
    bed.advance(grace).await;
    within("shutdown ends", stopping).await?;
    within("the agent is stopped", s.end.closed()).await;
    assert_eq!(bed.state(&s1).await?, TurnState::Interrupted);
    assert_eq!(bed.ends(&s1), 1);
    // Queued turns wait for the next start.
    assert_eq!(bed.state(&s2).await?, TurnState::Queued);
    turns.kick("s");
    settle(&bed).await?;
    assert_idle(&mut acts);
    Ok(())
}

async fn a_refused_end_is_retried_and_lands_once(kind: Kind) -> TestResult {
    let bed = Bed::new()?;
    let (agent, mut acts) = puppet();
    let turns = bed.turns(mode(kind, agent));
    turns.start().await?;
    let s1 = bed.post(&turns, "s", "s1").await?;
    let s2 = bed.post(&turns, "s", "s2").await?;
    let act = next(&mut acts).await;
    act.sink.response("done");
    bed.wait_events("the delta is journaled", |all| {
        all.iter().any(|e| e.kind == "response_delta")
    })
    .await;
    let lock = bed.lock_writes()?;
    let _ = act.end.send(Ok(()));
    bed.wait_failing().await;
    within("the end is retried", async {
        while bed
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
    // A cancel meanwhile says the storage refuses the end, rather than answering "cancelled".
    let refused = turns.cancel(&s1).await;
    assert!(
        matches!(refused, Err(ref e) if e.storage_fault() == Some(crate::error::StorageFault::Unavailable)),
        "{refused:?}"
    );
    assert_eq!(bed.state(&s1).await?, TurnState::Running);
    // The session's next turn waits for it.
    settle(&bed).await?;
    assert_idle(&mut acts);
    drop(lock);
    bed.advance(RETRY.wait()).await;
    bed.wait_ended(&s1).await;
    assert_eq!(bed.state(&s1).await?, TurnState::Completed);
    assert_eq!(bed.text(&s1).await?, "done");
    assert_eq!(next(&mut acts).await.turn, s2);
    // Later retries of the end find it over and write nothing.
    bed.advance(Duration::from_secs(5)).await;
    settle(&bed).await?;
    assert_eq!(bed.ends(&s1), 1);
    Ok(())
}

macro_rules! each_kind {
    ($($name:ident),* $(,)?) => {
        mod local {
            $(
                #[tokio::test(start_paused = true)]
                async fn $name() -> super::TestResult {
                    super::$name(super::Kind::Local).await
                }
            )*
        }
        mod shared {
            $(
                #[tokio::test(start_paused = true)]
                async fn $name() -> super::TestResult {
                    super::$name(super::Kind::Shared).await
                }
            )*
        }
    };
}

each_kind!(
    runs_each_sessions_turns_one_at_a_time_in_order,
    a_cancelled_queued_turn_never_starts,
    a_cancelled_running_turn_ends_cancelled_with_its_text,
    shutdown_lets_running_turns_finish_then_interrupts_the_rest,
    a_refused_end_is_retried_and_lands_once,
);

/// One node: a lease an earlier run left (its worker mode, say) ends at start, as nothing here
/// would renew it.
#[tokio::test(start_paused = true)]
async fn local_start_ends_leases_an_earlier_run_left() -> TestResult {
    let bed = Bed::new()?;
    let s1 = bed.queue("s", "s1").await?;
    let claimed = bed.journal.claim_turns("w1", 1, LEASE, 0).await?;
    assert_eq!(claimed.len(), 1);
    let (agent, _acts) = puppet();
    let turns = bed.turns(Mode::Local { agent });
    turns.start().await?;
    assert_eq!(bed.state(&s1).await?, TurnState::Interrupted);
    assert_eq!(bed.ends(&s1), 1);
    Ok(())
}

// ---- a shared journal: other servers' leases ------------------------------------------------

/// Another server's running turn: claimed under its lease, as that server's session loop does.
async fn claimed_elsewhere(bed: &Bed, turn: &str) -> TestResult<String> {
    match bed.journal.claim_turn(turn, "node_other", LEASE).await? {
        Claim::Started(lease) => Ok(lease.token),
        other => Err(format!("claim: {other:?}").into()),
    }
}

#[tokio::test(start_paused = true)]
async fn shared_cancel_ends_another_servers_turn_under_its_lease() -> TestResult {
    let bed = Bed::new()?;
    let s1 = bed.queue("s", "s1").await?;
    let token = claimed_elsewhere(&bed, &s1).await?;
    let written = bed.journal.submit_fenced_turn_event(
        "s",
        &s1,
        &token,
        EventBody::ResponseDelta {
            delta: "theirs".into(),
        },
    );
    within("their delta lands", written).await??;
    let (agent, mut acts) = puppet();
    let turns = bed.turns(mode(Kind::Shared, agent));
    turns.start().await?;
    assert_eq!(turns.cancel(&s1).await?, TurnState::Cancelled);
    assert_eq!(bed.text(&s1).await?, "theirs");
    assert_eq!(bed.ends(&s1), 1);
    // Their next write is refused: the lease is no longer theirs.
    let refused = bed.journal.submit_fenced_turn_event(
        "s",
        &s1,
        &token,
        EventBody::ResponseDelta { delta: "x".into() },
    );
    assert!(matches!(
        within("their write is answered", refused).await?,
        Err(Error::LeaseLost)
    ));
    // The session is free: its next turn runs here.
    let s2 = bed.post(&turns, "s", "s2").await?;
    assert_eq!(next(&mut acts).await.turn, s2);
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn shared_a_vanished_servers_turn_ends_when_its_lease_runs_out() -> TestResult {
    let bed = Bed::new()?;
    let s1 = bed.queue("s", "s1").await?;
    let s2 = bed.queue("s", "s2").await?;
    claimed_elsewhere(&bed, &s1).await?;
    let (agent, mut acts) = puppet();
    let turns = bed.turns(mode(Kind::Shared, agent));
    turns.start().await?;
    // The other server never renews. Just before the lease ends, nothing moves...
    bed.advance(LEASE - Duration::from_secs(1)).await;
    settle(&bed).await?;
    assert_eq!(bed.state(&s1).await?, TurnState::Running);
    assert_idle(&mut acts);
    // ...once it has, the sweep ends the turn and this server runs the session's next one.
    bed.advance(Duration::from_secs(2)).await;
    let act = next(&mut acts).await;
    assert_eq!(act.turn, s2);
    assert_eq!(bed.state(&s1).await?, TurnState::Interrupted);
    assert_eq!(bed.ends(&s1), 1);
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn shared_a_running_turn_keeps_its_lease_and_stops_once_it_is_lost() -> TestResult {
    let bed = Bed::new()?;
    let (agent, mut acts) = puppet();
    let turns = bed.turns(mode(Kind::Shared, agent));
    turns.start().await?;
    let s1 = bed.post(&turns, "s", "s1").await?;
    let s2 = bed.post(&turns, "s", "s2").await?;
    let mut act = next(&mut acts).await;
    // Twice a lease long, renewed as it goes: the sweep never finds it expired.
    for _ in 0..(2 * LEASE.as_secs()) {
        bed.advance(Duration::from_secs(1)).await;
        let renewed_to = bed.clock.now_ms() + LEASE.as_millis() as i64;
        within("the lease is renewed", async {
            while bed.lease_expiry(&s1).ok().flatten() != Some(renewed_to) {
                real_pause().await;
            }
        })
        .await;
    }
    assert_eq!(bed.state(&s1).await?, TurnState::Running);
    // Another server ends it (its sweep found the lease expired, say): this server's next
    // renewal finds the lease lost and stops the turn without writing a second end.
    assert!(
        bed.journal
            .end_leased_turn(&s1, TurnState::Interrupted)
            .await?
    );
    bed.advance(Duration::from_secs(1)).await;
    within("the agent is stopped", act.end.closed()).await;
    assert_eq!(next(&mut acts).await.turn, s2);
    assert_eq!(bed.state(&s1).await?, TurnState::Interrupted);
    assert_eq!(bed.ends(&s1), 1);
    Ok(())
}

// ---- workers ------------------------------------------------------------------------------

fn workers(bed: &Bed) -> Arc<Turns> {
    bed.turns(Mode::Workers {
        dispatch: Dispatch::new(LEASE),
        shared: false,
    })
}

fn dispatch(turns: &Turns) -> &Dispatch {
    turns.mode().workers().expect("worker mode")
}

/// Claims for worker `w`: the turns handed out.
async fn claim(bed: &Bed, max: usize) -> TestResult<Vec<crate::journal::Claimed>> {
    Ok(bed
        .journal
        .claim_turns("w", max, LEASE, AGENT_HISTORY)
        .await?)
}

#[tokio::test(start_paused = true)]
async fn workers_claim_each_sessions_turns_one_at_a_time_in_order() -> TestResult {
    let bed = Bed::new()?;
    let turns = workers(&bed);
    turns.start().await?;
    // A claim waiting before anything is queued is woken by the message.
    let ready = dispatch(&turns).ready();
    tokio::pin!(ready);
    ready.as_mut().enable();
    let s1 = bed.post(&turns, "s", "s1").await?;
    within("the waiting claim is woken", ready).await;
    let s2 = bed.post(&turns, "s", "s2").await?;
    let t1 = bed.post(&turns, "t", "t1").await?;
    let first = claim(&bed, 8).await?;
    let mut ids: Vec<&str> = first.iter().map(|c| c.turn.turn_id.as_str()).collect();
    ids.sort();
    let mut want = [s1.as_str(), t1.as_str()];
    want.sort();
    assert_eq!(ids, want, "one turn per session, the oldest");
    assert!(claim(&bed, 8).await?.is_empty(), "s2 waits for s1");
    let c1 = first.iter().find(|c| c.turn.turn_id == s1).ok_or("s1")?;
    let done = bed
        .journal
        .worker_request(
            &s1,
            &c1.lease.token,
            LEASE,
            WorkerOp::Finish {
                seq: NO_SEQ + 1,
                state: TurnState::Completed,
                error: None,
            },
        )
        .await?;
    assert_eq!(done.map(|a| a.state), Ok(TurnState::Completed));
    let second = claim(&bed, 8).await?;
    assert_eq!(second.len(), 1);
    assert_eq!(second[0].turn.turn_id, s2);
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn workers_a_cancelled_queued_turn_is_never_claimed() -> TestResult {
    let bed = Bed::new()?;
    let turns = workers(&bed);
    turns.start().await?;
    let s1 = bed.post(&turns, "s", "s1").await?;
    let s2 = bed.post(&turns, "s", "s2").await?;
    assert_eq!(turns.cancel(&s1).await?, TurnState::Cancelled);
    let claimed = claim(&bed, 8).await?;
    assert_eq!(claimed.len(), 1);
    assert_eq!(claimed[0].turn.turn_id, s2);
    assert_eq!(
        bed.kinds(&s1),
        ["message_received", "turn_queued", "turn_ended"]
    );
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn workers_a_cancelled_leased_turn_ends_and_frees_its_session() -> TestResult {
    let bed = Bed::new()?;
    let turns = workers(&bed);
    turns.start().await?;
    let s1 = bed.post(&turns, "s", "s1").await?;
    let s2 = bed.post(&turns, "s", "s2").await?;
    let claimed = claim(&bed, 8).await?;
    let token = claimed[0].lease.token.clone();
    let ready = dispatch(&turns).ready();
    tokio::pin!(ready);
    ready.as_mut().enable();
    assert_eq!(turns.cancel(&s1).await?, TurnState::Cancelled);
    within("waiting claims are woken", ready).await;
    assert_eq!(bed.ends(&s1), 1);
    // The worker learns it on its next request.
    let events = WorkerOp::Events {
        seq: 0,
        events: vec![EventBody::ResponseDelta { delta: "x".into() }],
    };
    let answer = bed
        .journal
        .worker_request(&s1, &token, LEASE, events)
        .await?;
    assert_eq!(answer, Err(Refusal::Cancelled));
    assert_eq!(claim(&bed, 8).await?[0].turn.turn_id, s2);
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn workers_a_silent_workers_turn_ends_when_its_lease_runs_out() -> TestResult {
    let bed = Bed::new()?;
    let turns = workers(&bed);
    turns.start().await?;
    let s1 = bed.post(&turns, "s", "s1").await?;
    let s2 = bed.post(&turns, "s", "s2").await?;
    assert_eq!(claim(&bed, 8).await?.len(), 1);
    bed.advance(LEASE - Duration::from_secs(1)).await;
    settle(&bed).await?;
    assert_eq!(bed.state(&s1).await?, TurnState::Running);
    let ready = dispatch(&turns).ready();
    tokio::pin!(ready);
    ready.as_mut().enable();
    bed.advance(Duration::from_secs(2)).await;
    within("the sweep wakes waiting claims", ready).await;
    assert_eq!(bed.state(&s1).await?, TurnState::Interrupted);
    assert_eq!(bed.ends(&s1), 1);
    assert_eq!(claim(&bed, 8).await?[0].turn.turn_id, s2);
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn workers_shutdown_wakes_claims_and_leaves_leased_turns_to_their_workers() -> TestResult {
    let bed = Bed::new()?;
    let turns = workers(&bed);
    turns.start().await?;
    let s1 = bed.post(&turns, "s", "s1").await?;
    let token = claim(&bed, 8).await?[0].lease.token.clone();
    let ready = dispatch(&turns).ready();
    tokio::pin!(ready);
    ready.as_mut().enable();
    within("shutdown", turns.shutdown(Duration::from_secs(5))).await;
    within("waiting claims are woken", ready).await;
    assert!(turns.is_stopping());
    // The worker may still finish its turn.
    let done = bed
        .journal
        .worker_request(
            &s1,
            &token,
            LEASE,
            WorkerOp::Finish {
                seq: 0,
                state: TurnState::Completed,
                error: None,
            },
        )
        .await?;
    assert_eq!(done.map(|a| a.state), Ok(TurnState::Completed));
    Ok(())
}

/// With workers, a turn's end written by the sweep (its lease ran out) is retried on the next
/// sweep while the storage refuses it.
#[tokio::test(start_paused = true)]
async fn workers_an_expired_lease_refused_by_the_storage_ends_on_a_later_sweep() -> TestResult {
    let bed = Bed::new()?;
    let turns = workers(&bed);
    turns.start().await?;
    let s1 = bed.post(&turns, "s", "s1").await?;
    assert_eq!(claim(&bed, 8).await?.len(), 1);
    let lock = bed.lock_writes()?;
    bed.advance(LEASE + Duration::from_secs(1)).await;
    bed.wait_failing().await;
    assert_eq!(bed.state(&s1).await?, TurnState::Running);
    drop(lock);
    bed.advance(sweep::WORKER_SWEEP_EVERY).await;
    bed.wait_ended(&s1).await;
    assert_eq!(bed.state(&s1).await?, TurnState::Interrupted);
    assert_eq!(bed.ends(&s1), 1);
    Ok(())
}

// ---- the sweep alone ------------------------------------------------------------------------

/// The sweep, given a function that records the sessions it wakes.
fn sweeping(bed: &Bed, every_tick: bool) -> (CancellationToken, mpsc::UnboundedReceiver<String>) {
    let (tx, woken) = mpsc::unbounded_channel();
    let stop = CancellationToken::new();
    tokio::spawn(sweep::sweep(
        bed.journal.clone(),
        sweep::SWEEP_EVERY,
        every_tick,
        move |session| {
            let _ = tx.send(session.to_string());
        },
        stop.clone(),
    ));
    (stop, woken)
}

#[tokio::test(start_paused = true)]
async fn the_sweep_ends_expired_leases_and_wakes_waiting_sessions() -> TestResult {
    let bed = Bed::new()?;
    let s1 = bed.queue("s", "s1").await?;
    bed.queue("s", "s2").await?;
    claimed_elsewhere(&bed, &s1).await?;
    bed.queue("t", "t1").await?;
    let (stop, mut woken) = sweeping(&bed, true);
    // On a shared journal every tick wakes the waiting sessions: `t`, not `s` (s1 runs).
    assert_eq!(within("a tick", woken.recv()).await.as_deref(), Some("t"));
    bed.advance(LEASE - Duration::from_secs(1)).await;
    assert_eq!(within("a tick", woken.recv()).await.as_deref(), Some("t"));
    assert_eq!(bed.state(&s1).await?, TurnState::Running);
    bed.advance(Duration::from_secs(1)).await;
    let mut after = vec![
        within("a tick", woken.recv()).await.ok_or("closed")?,
        within("a tick", woken.recv()).await.ok_or("closed")?,
    ];
    after.sort();
    assert_eq!(after, ["s", "t"]);
    assert_eq!(bed.state(&s1).await?, TurnState::Interrupted);
    stop.cancel();
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn the_sweep_of_one_node_wakes_sessions_only_when_it_ended_a_turn() -> TestResult {
    let bed = Bed::new()?;
    let s1 = bed.queue("s", "s1").await?;
    bed.queue("s", "s2").await?;
    claimed_elsewhere(&bed, &s1).await?;
    bed.queue("t", "t1").await?;
    let (stop, mut woken) = sweeping(&bed, false);
    bed.advance(LEASE).await;
    let mut after = vec![
        within("a tick", woken.recv()).await.ok_or("closed")?,
        within("a tick", woken.recv()).await.ok_or("closed")?,
    ];
    after.sort();
    assert_eq!(after, ["s", "t"]);
    assert_eq!(bed.state(&s1).await?, TurnState::Interrupted);
    // The ticks after it end nothing, so they wake nobody, though `t` still waits.
    for _ in 0..4 {
        bed.advance(sweep::SWEEP_EVERY).await;
        settle(&bed).await?;
    }
    assert!(woken.try_recv().is_err());
    stop.cancel();
    Ok(())
}
