//! The lease sweep alone, given a function that records the sessions it wakes.

use super::*;

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
