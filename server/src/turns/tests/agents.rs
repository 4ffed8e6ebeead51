//! This server's agent running the turns: on one node, and under leases on a journal other
//! servers share (on SQLite here, as on PostgreSQL).

use super::*;

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
    bed.wait_end_retried().await;
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

/// The deltas still merging when the agent returns, and the tool calls it left open, go in
/// the end's own commit, in the order they would have been journaled: a short turn's end costs
/// no commit of its own, and every subscriber gets them in one write.
async fn a_turns_last_events_go_in_its_ends_commit(kind: Kind) -> TestResult {
    let bed = Bed::new()?;
    let (agent, mut acts) = puppet();
    // A window the paused clock never reaches: what merges stays held until the end.
    let turns = bed.turns_merging(mode(kind, agent), Duration::from_secs(3600));
    turns.start().await?;
    let t = bed.post(&turns, "s", "hi").await?;
    let act = next(&mut acts).await;
    act.sink.response("a");
    act.sink.response("b");
    act.sink.tool(turnstream_protocol::ToolCall {
        call_id: "call_1".into(),
        name: "search".into(),
        status: turnstream_protocol::ToolStatus::Started,
        input_preview: None,
        output_preview: None,
    });
    act.complete("c");
    bed.wait_ended(&t).await;
    assert_eq!(bed.state(&t).await?, TurnState::Completed);
    assert_eq!(bed.text(&t).await?, "abc");
    let events: Vec<Committed> = bed
        .events
        .borrow()
        .iter()
        .filter(|e| e.turn_id.as_deref() == Some(t.as_str()))
        .cloned()
        .collect();
    let kinds: Vec<&str> = events.iter().map(|e| e.kind.as_str()).collect();
    assert_eq!(
        kinds,
        [
            "message_received",
            "turn_queued",
            "turn_started",
            "response_delta",
            "tool",
            "response_delta",
            "tool",
            "turn_ended"
        ]
    );
    assert!(
        events[5].data.contains(r#""delta":"c""#),
        "{}",
        events[5].data
    );
    assert!(events[6].data.contains(r#""failed""#), "{}", events[6].data);
    let end = bed.commit_of(events[7].seq);
    assert!(end.is_some());
    for e in &events[5..7] {
        assert_eq!(
            bed.commit_of(e.seq),
            end,
            "{} is not in the end's commit",
            e.kind
        );
    }
    // What went before the tool was journaled as it came.
    assert_ne!(bed.commit_of(events[3].seq), end);
    Ok(())
}

/// A turn's end refused by the storage is retried with its last deltas: they land once, with
/// the end, and the reply is exactly their concatenation.
async fn a_refused_end_keeps_the_turns_last_deltas(kind: Kind) -> TestResult {
    let bed = Bed::new()?;
    let (agent, mut acts) = puppet();
    let turns = bed.turns_merging(mode(kind, agent), Duration::from_secs(3600));
    turns.start().await?;
    let t = bed.post(&turns, "s", "hi").await?;
    let act = next(&mut acts).await;
    act.sink.response("held ");
    let lock = bed.lock_writes()?;
    act.complete("back");
    bed.wait_failing().await;
    bed.wait_end_retried().await;
    // On one node the turn's start goes with its end (see `local_a_short_turns_start_...`):
    // it shows queued until that lands.
    let waiting = match kind {
        Kind::Local => TurnState::Queued,
        Kind::Shared => TurnState::Running,
    };
    assert_eq!(bed.state(&t).await?, waiting);
    drop(lock);
    bed.advance(RETRY.wait()).await;
    bed.wait_ended(&t).await;
    assert_eq!(bed.state(&t).await?, TurnState::Completed);
    assert_eq!(bed.text(&t).await?, "held back");
    bed.advance(Duration::from_secs(5)).await;
    settle(&bed).await?;
    assert_eq!(
        bed.kinds(&t),
        [
            "message_received",
            "turn_queued",
            "turn_started",
            "response_delta",
            "turn_ended"
        ]
    );
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
    a_turns_last_events_go_in_its_ends_commit,
    a_refused_end_keeps_the_turns_last_deltas,
);

/// The events of `turn`, in order.
fn turn_events(bed: &Bed, turn: &str) -> Vec<Committed> {
    bed.events
        .borrow()
        .iter()
        .filter(|e| e.turn_id.as_deref() == Some(turn))
        .cloned()
        .collect()
}

/// One node, with a coalescing window: a turn's start is journaled with its first events, here
/// its end, in one commit; the message's own commit is the turn's only other one.
#[tokio::test(start_paused = true)]
async fn local_a_short_turns_start_goes_in_its_ends_commit() -> TestResult {
    let bed = Bed::new()?;
    let (agent, mut acts) = puppet();
    let turns = bed.turns_merging(mode(Kind::Local, agent), Duration::from_secs(3600));
    turns.start().await?;
    let t = bed.post(&turns, "s", "hi").await?;
    let act = next(&mut acts).await;
    settle(&bed).await?;
    assert_eq!(bed.state(&t).await?, TurnState::Queued, "not journaled yet");
    act.complete("hello");
    bed.wait_ended(&t).await;
    assert_eq!(bed.state(&t).await?, TurnState::Completed);
    assert_eq!(bed.text(&t).await?, "hello");
    let events = turn_events(&bed, &t);
    let kinds: Vec<&str> = events.iter().map(|e| e.kind.as_str()).collect();
    assert_eq!(
        kinds,
        [
            "message_received",
            "turn_queued",
            "turn_started",
            "response_delta",
            "turn_ended"
        ]
    );
    let commits: Vec<Option<usize>> = events.iter().map(|e| bed.commit_of(e.seq)).collect();
    assert_eq!(commits[0], commits[1], "the message's commit");
    assert_ne!(commits[1], commits[2]);
    assert!(
        commits[2..].iter().all(|c| *c == commits[2]),
        "start, reply and end in one commit: {commits:?}"
    );
    let info = bed.journal.turn(&t).await?.ok_or("no such turn")?;
    assert!(info.started_at.is_some(), "the start is recorded");
    Ok(())
}

/// One node, with a coalescing window: a turn whose agent says nothing yet shows running once
/// the window has passed, not only at its first words.
#[tokio::test(start_paused = true)]
async fn local_a_silent_turn_is_started_within_the_window() -> TestResult {
    let bed = Bed::new()?;
    let (agent, mut acts) = puppet();
    let window = Duration::from_millis(25);
    let turns = bed.turns_merging(mode(Kind::Local, agent), window);
    turns.start().await?;
    let t = bed.post(&turns, "s", "hi").await?;
    let act = next(&mut acts).await;
    bed.advance(window).await;
    bed.wait_events("the turn is started", |all| {
        all.iter()
            .any(|e| e.turn_id.as_deref() == Some(t.as_str()) && e.kind == "turn_started")
    })
    .await;
    assert_eq!(bed.state(&t).await?, TurnState::Running);
    act.sink.response("late");
    settle(&bed).await?;
    bed.advance(window).await;
    bed.wait_events("the delta is journaled", |all| {
        all.iter().any(|e| e.kind == "response_delta")
    })
    .await;
    let _ = act.end.send(Ok(()));
    bed.wait_ended(&t).await;
    assert_eq!(bed.text(&t).await?, "late");
    assert_eq!(
        bed.kinds(&t),
        [
            "message_received",
            "turn_queued",
            "turn_started",
            "response_delta",
            "turn_ended"
        ]
    );
    Ok(())
}

/// One node, with a coalescing window: a turn cancelled after its runner took it, before its
/// start was journaled, stops its agent and ends once, never started; the session goes on.
#[tokio::test(start_paused = true)]
async fn local_a_turn_cancelled_before_its_start_is_journaled_ends_once() -> TestResult {
    let bed = Bed::new()?;
    let (agent, mut acts) = puppet();
    let turns = bed.turns_merging(mode(Kind::Local, agent), Duration::from_secs(3600));
    turns.start().await?;
    let t1 = bed.post(&turns, "s", "one").await?;
    let t2 = bed.post(&turns, "s", "two").await?;
    let mut act = next(&mut acts).await;
    act.sink.response("held");
    assert_eq!(turns.cancel(&t1).await?, TurnState::Cancelled);
    within("the agent is stopped", act.end.closed()).await;
    let after = next(&mut acts).await;
    assert_eq!(after.turn, t2, "the session goes on");
    settle(&bed).await?;
    assert_eq!(bed.state(&t1).await?, TurnState::Cancelled);
    assert_eq!(
        bed.kinds(&t1),
        ["message_received", "turn_queued", "turn_ended"]
    );
    after.complete("done");
    bed.wait_ended(&t2).await;
    assert_eq!(bed.ends(&t1), 1);
    Ok(())
}

/// One node, with a coalescing window: a turn ended elsewhere while queued (as `on_busy:
/// interrupt` or a cancel racing its runner does) refuses the start its first events bring:
/// nothing of the run is journaled, before or after its one end, and its agent is stopped.
#[tokio::test(start_paused = true)]
async fn local_a_refused_start_journals_nothing_of_the_run() -> TestResult {
    let bed = Bed::new()?;
    let (agent, mut acts) = puppet();
    let turns = bed.turns_merging(mode(Kind::Local, agent), Duration::from_secs(3600));
    turns.start().await?;
    let t = bed.post(&turns, "s", "hi").await?;
    let mut act = next(&mut acts).await;
    // Ended behind the runner's back: its agent runs on, not told.
    assert!(bed.journal.end_idle_turn(&t, TurnState::Cancelled).await?);
    act.sink.response("before");
    act.sink.tool(turnstream_protocol::ToolCall {
        call_id: "call_1".into(),
        name: "search".into(),
        status: turnstream_protocol::ToolStatus::Started,
        input_preview: None,
        output_preview: None,
    });
    act.sink.response("after");
    within("the agent is stopped", act.end.closed()).await;
    let u = bed.post(&turns, "s", "next").await?;
    next(&mut acts).await.complete("ok");
    bed.wait_ended(&u).await;
    assert_eq!(bed.state(&t).await?, TurnState::Cancelled);
    assert_eq!(
        bed.kinds(&t),
        ["message_received", "turn_queued", "turn_ended"]
    );
    Ok(())
}

/// One node: a lease an earlier run left (its worker mode, say) ends at start, as nothing here
/// would renew it.
#[tokio::test(start_paused = true)]
async fn local_start_ends_leases_an_earlier_run_left() -> TestResult {
    let bed = Bed::new()?;
    let s1 = bed.queue("s", "s1").await?;
    let claimed = bed.journal.claim_turns("w1", 1, LEASE, 0, None).await?;
    assert_eq!(claimed.len(), 1);
    let (agent, _acts) = puppet();
    let turns = bed.turns(Mode::Local { agent });
    turns.start().await?;
    assert_eq!(bed.state(&s1).await?, TurnState::Interrupted);
    assert_eq!(bed.ends(&s1), 1);
    Ok(())
}

// ---- a shared journal: other servers' leases ----

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
