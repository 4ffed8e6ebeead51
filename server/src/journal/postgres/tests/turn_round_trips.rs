//! What one turn of a server's own costs the writer in round trips to PostgreSQL, step by step
//! (its message accepted, its claim, its first event, its end), against the cluster in
//! `TURNSTREAM_TEST_DATABASE_URL` (a fresh database; skipped without it). Each step is its
//! own batch, as when the writer is idle: a busy writer's batches share their `BEGIN` and
//! `COMMIT`, never a job's own statements.

use std::sync::Arc;
use std::time::Duration;

use turnstream_protocol::{EventBody, TurnState};

use super::pipelined::{connect, with_database};
use crate::journal::{Admission, Claim, Database, Journal, JournalOptions, NewMessage};
use crate::metrics::Metrics;

type TestResult = std::result::Result<(), Box<dyn std::error::Error>>;

/// Runs `f` on a journal of a fresh database of the test cluster, then drops the database.
async fn on_fresh_journal<F, Fut>(f: F) -> TestResult
where
    F: FnOnce(Journal) -> Fut,
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
    let metrics = Arc::new(Metrics::default());
    let hub = crate::hub::Hub::with_metrics(metrics.clone());
    let journal = Journal::open_database(
        &Database::Postgres(with_database(&admin, &name)?),
        metrics,
        JournalOptions::default(),
        crate::live::LiveFeed::new(hub),
    )
    .await?;
    let result = f(journal.clone()).await;
    tokio::task::spawn_blocking(move || journal.close()).await?;
    client
        .batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        .await?;
    result
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_costs_the_writer_fifteen_round_trips() -> TestResult {
    on_fresh_journal(|journal| async move {
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
            .submit_fenced_turn_event(
                "rt",
                &turn,
                &lease.token,
                EventBody::ResponseDelta { delta: "hi".into() },
            )
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
        // back). Accept: the admission and the leaf in one query; its rows go with the commit.
        // Claim: the turn with its session's first, then the claim's UPDATE. First event: the
        // leases the last batch knew (the claim's) checked again, nothing of its own. End: the
        // same check, the turn, its UPDATE; the reply's row goes with the commit. (Before these
        // were folded: 6, 5, 3 and 7.)
        assert_eq!(
            trips,
            [("accept", 3), ("claim", 4), ("first event", 3), ("end", 5)],
            "round trips per step"
        );
        assert_eq!(total, 15);
        Ok(())
    })
    .await
}
