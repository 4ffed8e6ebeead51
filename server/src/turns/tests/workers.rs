//! Worker processes running the turns: claims, cancels, lease expiry, shutdown.

use super::*;

fn workers(bed: &Bed) -> Arc<Turns> {
    bed.turns(Mode::Workers {
        dispatch: Arc::new(Dispatch::new(LEASE)),
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
        .claim_turns("w", max, LEASE, AGENT_HISTORY, None)
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
                usage: None,
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
        events: vec![crate::journal::WorkerWrite::Event(
            EventBody::ResponseDelta { delta: "x".into() },
        )],
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
                usage: None,
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
