//! What one turn of a server's own costs the writer in round trips to PostgreSQL, step by step
//! (its message accepted, its claim, its first event, its end), against the cluster in
//! `TURNSTREAM_TEST_DATABASE_URL` (a fresh database; skipped without it). Each step is its
//! own batch, as when the writer is idle: a busy writer's batches share their `BEGIN` and
//! `COMMIT`, never a job's own statements.

use std::sync::Arc;
use std::time::Duration;

use turnstream_protocol::{EventBody, TurnState};

use super::pipelined::{connect, with_database};
use crate::error::Error;
use crate::journal::{Admission, Claim, Database, Journal, JournalOptions, Lease, NewMessage};
use crate::metrics::Metrics;

type TestResult = std::result::Result<(), Box<dyn std::error::Error>>;

/// Runs `f` on the URL of a fresh database of the test cluster, then drops the database.
async fn on_fresh_database<F, Fut>(f: F) -> TestResult
where
    F: FnOnce(String) -> Fut,
    Fut: std::future::Future<Output = TestResult>,
{
    let Some(admin) = std::env::var("TURNSTREAM_TEST_DATABASE_URL")
        .ok()
        .filter(|u| !u.trim().is_empty())
    else {
        return Ok(());
    };
    let name = format!(
        "ts_lib_{}_{:08x}",
        std::process::id(),
        rand::random::<u32>()
    );
    let client = connect(&admin).await?;
    client
        .batch_execute(&format!("CREATE DATABASE {name}"))
        .await?;
    let result = f(with_database(&admin, &name)?).await;
    client
        .batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        .await?;
    result
}

/// A journal (one server's) on the database at `url`.
async fn open(url: &str) -> std::result::Result<Journal, Box<dyn std::error::Error>> {
    let metrics = Arc::new(Metrics::default());
    let hub = crate::live::hub::Hub::with_metrics(metrics.clone());
    Ok(Journal::open_database(
        &Database::Postgres(url.to_string()),
        metrics,
        JournalOptions::default(),
        crate::live::LiveFeed::new(hub),
    )
    .await?)
}

/// Closes `journal` (joining its writer thread, off the runtime's workers).
async fn close(journal: Journal) -> TestResult {
    tokio::task::spawn_blocking(move || journal.close()).await?;
    Ok(())
}

/// Accepts a message in `session` and claims its turn for `owner`: the turn and its lease.
async fn claimed(
    journal: &Journal,
    session: &str,
    owner: &str,
) -> std::result::Result<(String, Lease), Box<dyn std::error::Error>> {
    let accepted = journal
        .accept_message(
            session,
            NewMessage {
                content: "hello".into(),
                ..Default::default()
            },
            Admission::enqueue(8),
        )
        .await?;
    let turn = accepted.response.turn_id;
    match journal
        .claim_turn(&turn, owner, Duration::from_secs(30))
        .await?
    {
        Claim::Started(lease) => Ok((turn, lease)),
        other => Err(format!("the turn was not claimed: {other:?}").into()),
    }
}

fn delta(text: &str) -> EventBody {
    EventBody::ResponseDelta { delta: text.into() }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_costs_the_writer_thirteen_round_trips() -> TestResult {
    on_fresh_database(|url| async move {
        let journal = open(&url).await?;
        let mut trips = Vec::new();
        let mut step = |name: &'static str, before: u64| {
            trips.push((name, journal.round_trips() - before));
        };
        let before = journal.round_trips();
        let accepted = journal
            .accept_message(
                "rt",
                NewMessage {
                    content: "hello".into(),
                    ..Default::default()
                },
                Admission::enqueue(8),
            )
            .await?;
        step("accept", before);
        let turn = accepted.response.turn_id;

        let before = journal.round_trips();
        let Claim::Started(lease) = journal
            .claim_turn(&turn, "node_rt", Duration::from_secs(30))
            .await?
        else {
            return Err("the turn was not claimed".into());
        };
        step("claim", before);

        let before = journal.round_trips();
        journal
            .submit_fenced_turn_event("rt", &turn, &lease.token, delta("hi"))
            .await??;
        step("first event", before);

        let before = journal.round_trips();
        let ended = journal
            .end_fenced_turn(
                &turn,
                &lease.token,
                TurnState::Completed,
                "hi".into(),
                None,
                Vec::new(),
            )
            .await?;
        step("end", before);
        if ended.is_none() {
            return Err("the end was refused".into());
        }
        let total: u64 = trips.iter().map(|(_, n)| n).sum();
        eprintln!("round trips: {trips:?}, {total} in all");
        // Each step is its transaction's `BEGIN` (with the counter row's lock, the one answer
        // it needs first), what its job must hear back, and its `COMMIT` (with everything held
        // back). The leases the last batch knew (from the claim on) are checked again with the
        // `BEGIN`. Accept: the admission and the leaf in one query; its rows go with the
        // commit. Claim: the turn with its session's first, then the claim's UPDATE. First
        // event: nothing of its own. End: the turn, its UPDATE; the reply's row goes with the
        // commit. (Before these were folded: 6, 5, 3 and 7.)
        assert_eq!(
            trips,
            [("accept", 3), ("claim", 4), ("first event", 2), ("end", 4)],
            "round trips per step"
        );
        assert_eq!(total, 13);
        close(journal).await
    })
    .await
}

/// The leases a writer knows holding are checked again with each batch's `BEGIN`: a turn
/// another server ended meanwhile takes no more of this one's writes, and its end is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_lost_to_another_server_is_known_at_the_next_batch() -> TestResult {
    on_fresh_database(|url| async move {
        let (a, b) = (open(&url).await?, open(&url).await?);
        let (turn, lease) = claimed(&a, "lost", "node_a").await?;
        let (other, other_lease) = claimed(&a, "kept", "node_a").await?;
        a.submit_fenced_turn_event("lost", &turn, &lease.token, delta("one"))
            .await??;
        a.submit_fenced_turn_event("kept", &other, &other_lease.token, delta("one"))
            .await??;
        // The other server ends the turn (a cancel there), whoever holds its lease.
        assert!(b.end_leased_turn(&turn, TurnState::Cancelled).await?);
        let refused = a
            .submit_fenced_turn_event("lost", &turn, &lease.token, delta("two"))
            .await?;
        assert!(
            matches!(refused, Err(Error::LeaseLost)),
            "a write under a lost lease: {refused:?}"
        );
        let end = a
            .end_fenced_turn(
                &turn,
                &lease.token,
                TurnState::Completed,
                "one two".into(),
                None,
                Vec::new(),
            )
            .await?;
        assert!(end.is_none(), "the end under a lost lease was written");
        // The lease that still holds writes on.
        a.submit_fenced_turn_event("kept", &other, &other_lease.token, delta("two"))
            .await??;
        let check = connect(&url).await?;
        let rows = check
            .query(
                "SELECT kind FROM turnstream.events WHERE session_id = 'lost' ORDER BY id",
                &[],
            )
            .await?;
        let kinds = rows
            .iter()
            .map(|r| r.try_get::<_, String>(0))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        assert_eq!(
            kinds,
            [
                "message_received",
                "turn_queued",
                "turn_started",
                "response_delta",
                "turn_ended"
            ],
            "the lost turn's journal"
        );
        close(a).await?;
        close(b).await
    })
    .await
}
