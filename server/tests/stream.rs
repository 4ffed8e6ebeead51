//! The stream contract against the real binary: full turns, refresh mid-turn, Last-Event-ID
//! resume, `since` as `cursor`, resync reasons, fan-out, isolation, cancel, silent turns, the
//! payload cap, coalescing.

mod support;

use std::collections::HashSet;
use std::time::Duration;

use support::*;
use turnstream_protocol::{EventBody, MessageStatus, Role, ToolStatus, TurnState};

#[tokio::test]
async fn a_turn_streams_every_kind_and_ends_with_its_message() -> TestResult {
    let s = TestServer::start(&[])?;
    let (_, cursor) = s.history("s").await?;
    let mut stream = s
        .stream(&format!("session=s&cursor={cursor}"), None)
        .await?;
    let sent = s.send("s", "hello world").await?;
    let events = stream.until_turn_ended(&sent.turn_id).await?;
    let kinds: Vec<&str> = events.iter().map(|e| e.body.kind()).collect();
    assert_eq!(
        &kinds[..3],
        &["message_received", "turn_queued", "turn_started"]
    );
    for k in ["thinking", "tool", "response_delta"] {
        assert!(kinds.contains(&k), "no {k} in {kinds:?}");
    }
    let seqs: Vec<i64> = events.iter().map(seq).collect();
    assert!(
        seqs.windows(2).all(|w| w[0] < w[1]),
        "ids not increasing: {seqs:?}"
    );
    assert_eq!(events[0].id, sent.event_id);
    let EventBody::MessageReceived { message } = &events[0].body else {
        panic!("first event is not message_received")
    };
    assert_eq!(message.content, "hello world");
    assert_eq!(message.message_id, sent.message_id);
    let tools: Vec<ToolStatus> = events
        .iter()
        .filter_map(|e| match &e.body {
            EventBody::Tool(t) => Some(t.status),
            _ => None,
        })
        .collect();
    assert_eq!(tools, vec![ToolStatus::Started, ToolStatus::Finished]);
    let Some(EventBody::TurnEnded {
        state,
        message: Some(m),
        error,
    }) = events.last().map(|e| &e.body)
    else {
        panic!("last event is not turn_ended with a message")
    };
    assert_eq!(*state, TurnState::Completed);
    assert!(error.is_none());
    assert_eq!(m.content, reply_text(&events, &sent.turn_id));
    assert!(m.content.contains("hello world"));
    let (history, _) = s.history("s").await?;
    assert_eq!(history.messages.len(), 2);
    assert_eq!(history.messages[0].role, Role::User);
    assert_eq!(history.messages[1], *m);
    assert_eq!(history.messages[1].status, MessageStatus::Complete);
    Ok(())
}

#[tokio::test]
async fn refresh_mid_turn_rebuilds_the_exact_text() -> TestResult {
    let s = TestServer::start(&["--demo-delay-ms", "4", "--coalesce-ms", "0"])?;
    let sent = s.send("r", "/deltas 300").await?;
    // Let the turn get going, as a page would have shown part of it before the refresh.
    wait_for(|| async {
        let t = s.turn(&sent.turn_id).await?;
        Ok((t.text.len() > 40).then_some(()))
    })
    .await?;
    // The refreshed page: history, then the stream from that exact cursor with a snapshot.
    let (history, cursor) = s.history("r").await?;
    assert_eq!(history.cursor, cursor);
    assert_eq!(
        history.messages.len(),
        1,
        "the assistant message does not exist yet"
    );
    let mut stream = s
        .stream(&format!("session=r&cursor={cursor}&snapshot=1"), None)
        .await?;
    let snapshot = stream.snapshot().await?;
    assert_eq!(snapshot.cursor, cursor);
    assert_eq!(snapshot.active_turns.len(), 1);
    let active = &snapshot.active_turns[0];
    assert_eq!(active.turn_id, sent.turn_id);
    assert_eq!(active.state, TurnState::Running);
    assert!(!active.text.is_empty());
    let tail = stream.until_turn_ended(&sent.turn_id).await?;
    assert!(tail
        .iter()
        .all(|e| seq(e) > turnstream_protocol::cursor::sequence_of(&cursor).unwrap_or(0)));
    let rebuilt = format!("{}{}", active.text, reply_text(&tail, &sent.turn_id));
    assert_eq!(rebuilt, deltas_text(300));
    let (history, _) = s.history("r").await?;
    assert_eq!(history.messages[1].content, rebuilt);
    Ok(())
}

/// A stream drops after 30 events of a 200-delta turn and resumes with `Last-Event-ID`: the ids
/// must be contiguous to the end of the turn.
async fn resume_with_last_event_id(s: &TestServer, session: &str) -> TestResult {
    let (_, cursor) = s.history(session).await?;
    let mut first = s
        .stream(&format!("session={session}&cursor={cursor}"), None)
        .await?;
    let sent = s.send(session, "/deltas 200").await?;
    let mut seen = Vec::new();
    while seen.len() < 30 {
        seen.push(first.next_event().await?);
    }
    drop(first); // the network drops
    let last = seen.last().map(|e| e.id.clone()).ok_or("no events")?;
    // The browser reconnects natively: same URL, plus Last-Event-ID (which wins over cursor).
    let mut second = s
        .stream(
            &format!("session={session}&cursor={cursor}&snapshot=1"),
            Some(&last),
        )
        .await?;
    let rest = second.until_turn_ended(&sent.turn_id).await?;
    assert_eq!(
        turnstream_protocol::cursor::sequence_of(&rest[0].id),
        turnstream_protocol::cursor::sequence_of(&last).map(|n| n + 1),
        "no snapshot on a native reconnect, and the first event follows the last id"
    );
    let all: Vec<_> = seen.into_iter().chain(rest).collect();
    let seqs: Vec<i64> = all.iter().map(seq).collect();
    let first_seq = seqs[0];
    let expected: Vec<i64> = (first_seq..first_seq + seqs.len() as i64).collect();
    assert_eq!(
        seqs, expected,
        "ids must be contiguous: no gap, no duplicate"
    );
    assert_eq!(reply_text(&all, &sent.turn_id), deltas_text(200));
    Ok(())
}

#[tokio::test]
async fn last_event_id_resumes_with_no_duplicate_and_no_gap() -> TestResult {
    let s = TestServer::start(&["--demo-delay-ms", "3", "--coalesce-ms", "0"])?;
    resume_with_last_event_id(&s, "l").await?;
    assert_eq!(
        s.counter("turnstream_tail_replays_total").await?,
        1.0,
        "a resume from a recent position is answered from memory"
    );
    Ok(())
}

#[tokio::test]
async fn last_event_id_resumes_from_the_journal_without_a_replay_tail() -> TestResult {
    let s = TestServer::start(&[
        "--demo-delay-ms",
        "3",
        "--coalesce-ms",
        "0",
        "--replay-cache-mb",
        "0",
    ])?;
    resume_with_last_event_id(&s, "l").await?;
    assert_eq!(s.counter("turnstream_tail_replays_total").await?, 0.0);
    Ok(())
}

#[tokio::test]
async fn old_positions_past_the_tail_budget_are_read_from_the_journal() -> TestResult {
    // 1 MiB holds a few thousand of these frames: the turn's start falls out of memory.
    let s = TestServer::start(&[
        "--demo-delay-ms",
        "0",
        "--coalesce-ms",
        "0",
        "--replay-cache-mb",
        "1",
    ])?;
    let (_, cursor) = s.history("e").await?;
    let sent = s.send("e", "/deltas 8000").await?;
    s.wait_turn_end(&sent.turn_id).await?;
    // From before the turn: the journal.
    let mut from_start = s
        .stream(&format!("session=e&cursor={cursor}"), None)
        .await?;
    let all = from_start.until_turn_ended(&sent.turn_id).await?;
    assert_eq!(reply_text(&all, &sent.turn_id), deltas_text(8000));
    assert_eq!(s.counter("turnstream_tail_replays_total").await?, 0.0);
    // From near the end: memory, the same events as the journal gave.
    let at = all.len() - 100;
    let mut near_end = s.stream("session=e", Some(&all[at - 1].id)).await?;
    let tail = near_end.until_turn_ended(&sent.turn_id).await?;
    assert_eq!(s.counter("turnstream_tail_replays_total").await?, 1.0);
    let ids = |es: &[turnstream_protocol::Event]| -> Vec<String> {
        es.iter()
            .map(|e| serde_json::to_string(e).unwrap_or_default())
            .collect()
    };
    assert_eq!(
        ids(&tail),
        ids(&all[at..]),
        "the tail and the journal agree"
    );
    Ok(())
}

#[tokio::test]
async fn a_resume_longer_than_one_tail_page_goes_on_from_the_journal() -> TestResult {
    // 25,000 events after the resume position: the tail gives its first 20,000 (one page),
    // written a batch at a time; the journal gives the rest; then the stream is live.
    let s = TestServer::start(&["--demo-delay-ms", "0", "--coalesce-ms", "0"])?;
    let (_, cursor) = s.history("long").await?;
    let mut live = s
        .stream(&format!("session=long&cursor={cursor}"), None)
        .await?;
    let n = 25_000;
    let sent = s.send("long", &format!("/deltas {n}")).await?;
    let all = live.until_turn_ended(&sent.turn_id).await?;
    let first = all.first().ok_or("no events")?;
    let mut resumed = s.stream("session=long", Some(&first.id)).await?;
    let rest = resumed.until_turn_ended(&sent.turn_id).await?;
    assert_eq!(s.counter("turnstream_tail_replays_total").await?, 1.0);
    let seqs: Vec<i64> = rest.iter().map(seq).collect();
    let expected: Vec<i64> = (seq(first) + 1..=seq(first) + all.len() as i64 - 1).collect();
    assert!(
        seqs == expected,
        "gap or duplicate where the tail's page ends ({} events, expected {})",
        seqs.len(),
        expected.len()
    );
    assert_eq!(reply_text(&rest, &sent.turn_id), deltas_text(n));
    // Live after the catch-up: the next turn comes on the same stream.
    let next = s.send("long", "/echo after").await?;
    let after = resumed.until_turn_ended(&next.turn_id).await?;
    assert_eq!(reply_text(&after, &next.turn_id), "after");
    Ok(())
}

#[tokio::test]
async fn every_resync_reason_is_sent_and_closes_the_stream() -> TestResult {
    let s = TestServer::start(&[])?;
    let sent = s.send("x", "/echo done").await?;
    s.wait_turn_end(&sent.turn_id).await?;
    let (_, cursor) = s.history("x").await?;
    let c: turnstream_protocol::Cursor = cursor.parse().map_err(|_| "bad cursor")?;

    s.stream("session=x&cursor=not-a-cursor!", None)
        .await?
        .expect_resync("invalid")
        .await?;
    s.stream("session=x&cursor=othrjournal-1", None)
        .await?
        .expect_resync("epoch")
        .await?;
    let future = format!("{}-{}", c.epoch, c.sequence + 1000);
    s.stream(&format!("session=x&cursor={future}"), None)
        .await?
        .expect_resync("future")
        .await?;
    // Last-Event-ID is validated the same way.
    s.stream("session=x", Some("garbage"))
        .await?
        .expect_resync("invalid")
        .await?;
    // Expired: the finished turn's events are cleared, so a cursor before them cannot replay.
    let res = s
        .http
        .delete(format!("{}/api/sessions/x/realtime", s.url))
        .send()
        .await?;
    assert_eq!(res.status(), 200);
    let old = format!("{}-0", c.epoch);
    s.stream(&format!("session=x&cursor={old}&snapshot=1"), None)
        .await?
        .expect_resync("expired")
        .await?;
    // The cursor at the head is still good: an empty replay is not missing data.
    let mut ok = s
        .stream(&format!("session=x&cursor={cursor}&snapshot=1"), None)
        .await?;
    assert!(ok.snapshot().await?.active_turns.is_empty());
    for reason in ["invalid", "epoch", "future", "expired"] {
        let n = s
            .counter(&format!("turnstream_resyncs_total{{reason=\"{reason}\"}}"))
            .await?;
        assert!(n >= 1.0, "{reason} counted {n}");
    }
    Ok(())
}

/// `since` is `cursor` by another name: the same replay, snapshot and resync from it,
/// `Last-Event-ID` above it, and `400 invalid_cursor` when the two name different positions.
#[tokio::test]
async fn since_resumes_exactly_like_cursor() -> TestResult {
    let s = TestServer::start(&["--coalesce-ms", "0"])?;
    let (_, start) = s.history("since").await?;
    let sent = s.send("since", "/deltas 20").await?;
    s.wait_turn_end(&sent.turn_id).await?;
    let all = s
        .stream(&format!("session=since&cursor={start}"), None)
        .await?
        .until_turn_ended(&sent.turn_id)
        .await?;
    let ids = |es: &[turnstream_protocol::Event]| -> Vec<String> {
        es.iter().map(|e| e.id.clone()).collect()
    };
    let mid = all.len() / 2;
    let at = &all[mid].id;
    for query in [
        format!("session=since&since={at}"),
        format!("session=since&since={at}&cursor={at}"),
        format!("session=since&cursor=&since={at}"),
    ] {
        let got = s
            .stream(&query, None)
            .await?
            .until_turn_ended(&sent.turn_id)
            .await?;
        assert_eq!(
            ids(&got),
            ids(&all[mid + 1..]),
            "{query}: a gap or a duplicate"
        );
    }
    // The snapshot describes the same position: with the replay after it, the whole reply.
    let mut with_snapshot = s
        .stream(&format!("session=since&since={at}&snapshot=1"), None)
        .await?;
    let snap = with_snapshot.snapshot().await?;
    assert_eq!(&snap.cursor, at);
    let rest = with_snapshot.until_turn_ended(&sent.turn_id).await?;
    let before: String = snap.active_turns.iter().map(|t| t.text.as_str()).collect();
    assert_eq!(
        format!("{before}{}", reply_text(&rest, &sent.turn_id)),
        deltas_text(20)
    );
    // A native reconnect's Last-Event-ID wins over `since`.
    let later = &all[mid + 3].id;
    let got = s
        .stream(&format!("session=since&since={at}"), Some(later))
        .await?
        .until_turn_ended(&sent.turn_id)
        .await?;
    assert_eq!(ids(&got), ids(&all[mid + 4..]));
    // The same checks as `cursor`: a bare sequence number is no cursor.
    s.stream("session=since&since=42", None)
        .await?
        .expect_resync("invalid")
        .await?;
    // Two different positions: refused before any stream, with or without Last-Event-ID.
    let first = &all[0].id;
    for last_event_id in [None, Some(later)] {
        let mut req = s.http.get(format!(
            "{}/api/stream?session=since&cursor={first}&since={at}",
            s.url
        ));
        if let Some(id) = last_event_id {
            req = req.header("Last-Event-ID", id.as_str());
        }
        let res = req.send().await?;
        assert_eq!(res.status(), 400);
        let body: serde_json::Value = res.json().await?;
        assert_eq!(body["error"]["code"], "invalid_cursor", "{body}");
        assert!(body["error"]["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty()));
        assert_eq!(body.as_object().map(|o| o.len()), Some(1), "{body}");
    }
    Ok(())
}

#[tokio::test]
async fn two_subscribers_both_receive_a_message_and_sessions_stay_isolated() -> TestResult {
    let s = TestServer::start(&[])?;
    let (_, cursor) = s.history("a").await?;
    let mut tab1 = s
        .stream(&format!("session=a&cursor={cursor}"), None)
        .await?;
    let mut tab2 = s
        .stream(&format!("session=a&cursor={cursor}"), None)
        .await?;
    let mut other = s
        .stream(&format!("session=b&cursor={cursor}"), None)
        .await?;
    let both = s
        .stream(&format!("session=a&session=b&cursor={cursor}"), None)
        .await;
    let mut both = both?;
    let in_b = s.send("b", "/echo bee").await?;
    let in_a = s.send("a", "/echo from tab one").await?;
    for tab in [&mut tab1, &mut tab2] {
        let e = tab.next_event().await?;
        let EventBody::MessageReceived { message } = &e.body else {
            panic!("expected message_received, got {e:?}")
        };
        assert_eq!(message.content, "/echo from tab one");
        let rest = tab.until_turn_ended(&in_a.turn_id).await?;
        assert!(
            rest.iter().all(|e| e.session_id == "a"),
            "another session leaked in"
        );
        assert_eq!(reply_text(&rest, &in_a.turn_id), "from tab one");
    }
    let b_events = other.until_turn_ended(&in_b.turn_id).await?;
    assert!(b_events.iter().all(|e| e.session_id == "b"));
    // A stream of both sessions gets both turns, in journal order.
    let mut seen_turns = HashSet::new();
    let mut last = 0;
    while seen_turns.len() < 2 {
        let e = both.next_event().await?;
        assert!(seq(&e) > last);
        last = seq(&e);
        if e.body.kind() == "turn_ended" {
            seen_turns.insert(e.turn_id.clone().unwrap_or_default());
        }
    }
    Ok(())
}

#[tokio::test]
async fn turns_of_a_session_run_one_at_a_time_in_order() -> TestResult {
    let s = TestServer::start(&[])?;
    let (_, cursor) = s.history("f").await?;
    let mut stream = s
        .stream(&format!("session=f&cursor={cursor}"), None)
        .await?;
    let one = s.send("f", "/sleep 300 one").await?;
    let two = s.send("f", "/echo two").await?;
    let mut events = stream.until_turn_ended(&two.turn_id).await?;
    events.retain(|e| matches!(e.body.kind(), "turn_started" | "turn_ended"));
    let order: Vec<(String, &str)> = events
        .iter()
        .map(|e| (e.turn_id.clone().unwrap_or_default(), e.body.kind()))
        .collect();
    assert_eq!(
        order,
        vec![
            (one.turn_id.clone(), "turn_started"),
            (one.turn_id.clone(), "turn_ended"),
            (two.turn_id.clone(), "turn_started"),
            (two.turn_id.clone(), "turn_ended"),
        ]
    );
    Ok(())
}

#[tokio::test]
async fn cancel_while_queued_and_while_running() -> TestResult {
    let s = TestServer::start(&["--demo-delay-ms", "20", "--coalesce-ms", "0"])?;
    let (_, cursor) = s.history("c").await?;
    let mut stream = s
        .stream(&format!("session=c&cursor={cursor}"), None)
        .await?;
    let running = s.send("c", "/deltas 5000").await?;
    let queued = s.send("c", "/echo never").await?;
    // Cancel the queued one: it ends at once and never starts.
    let (status, body) = s.cancel(&queued.turn_id).await?;
    assert_eq!(status, 200);
    assert_eq!(body["state"], "cancelled");
    assert_eq!(body["turn_id"], queued.turn_id.as_str());
    // Wait for some text, then cancel the running one.
    wait_for(|| async {
        let t = s.turn(&running.turn_id).await?;
        Ok((t.text.len() > 10).then_some(()))
    })
    .await?;
    let (status, body) = s.cancel(&running.turn_id).await?;
    assert_eq!(status, 200);
    assert_eq!(body["state"], "cancelled");
    // Idempotent on a terminal turn.
    let (status, body) = s.cancel(&running.turn_id).await?;
    assert_eq!((status, body["state"].as_str()), (200, Some("cancelled")));

    let events = stream.until_turn_ended(&running.turn_id).await?;
    let started: Vec<_> = events
        .iter()
        .filter(|e| e.body.kind() == "turn_started")
        .map(|e| e.turn_id.clone().unwrap_or_default())
        .collect();
    assert_eq!(
        started,
        vec![running.turn_id.clone()],
        "the cancelled queued turn never starts"
    );
    let ended: Vec<_> = events
        .iter()
        .filter(|e| e.body.kind() == "turn_ended")
        .collect();
    assert_eq!(ended.len(), 2);
    let partial = reply_text(&events, &running.turn_id);
    assert!(!partial.is_empty() && deltas_text(5000).starts_with(&partial));
    let info = s.turn(&running.turn_id).await?;
    assert_eq!(info.state, TurnState::Cancelled);
    let m = info.message.ok_or("no message for the cancelled turn")?;
    assert_eq!(m.status, MessageStatus::Cancelled);
    assert_eq!(m.content, partial);
    let q = s.turn(&queued.turn_id).await?;
    assert_eq!(q.state, TurnState::Cancelled);
    assert!(q.started_at.is_none());
    Ok(())
}

#[tokio::test]
async fn a_long_silent_turn_is_running_throughout() -> TestResult {
    let s = TestServer::start(&[])?;
    let (_, cursor) = s.history("q").await?;
    let mut stream = s
        .stream(&format!("session=q&cursor={cursor}"), None)
        .await?;
    let sent = s.send("q", "/sleep 2500 finally").await?;
    loop {
        if stream.next_event().await?.body.kind() == "turn_started" {
            break;
        }
    }
    // While silent: no event at all, and the turn reports running on every poll.
    let start = std::time::Instant::now();
    let mut polls = 0;
    while start.elapsed() < Duration::from_millis(2000) {
        let t = s.turn(&sent.turn_id).await?;
        assert_eq!(t.state, TurnState::Running, "after {:?}", start.elapsed());
        polls += 1;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(polls >= 5);
    let rest = stream.until_turn_ended(&sent.turn_id).await?;
    assert_eq!(reply_text(&rest, &sent.turn_id), "finally");
    Ok(())
}

#[tokio::test]
async fn failed_turns_keep_their_text_and_error() -> TestResult {
    let s = TestServer::start(&[])?;
    let sent = s.send("e", "/fail the model fell over").await?;
    let t = s.wait_turn_end(&sent.turn_id).await?;
    assert_eq!(t.state, TurnState::Failed);
    assert_eq!(t.error.as_deref(), Some("the model fell over"));
    let m = t.message.ok_or("no message")?;
    assert_eq!(m.status, MessageStatus::Failed);
    assert!(!m.content.is_empty());
    Ok(())
}

#[tokio::test]
async fn oversized_tool_output_is_capped_with_truncation_metadata() -> TestResult {
    let s = TestServer::start(&[])?;
    let (_, cursor) = s.history("p").await?;
    let mut stream = s
        .stream(&format!("session=p&cursor={cursor}"), None)
        .await?;
    let big = s.send("p", "/bigtool 1000000").await?;
    let events = stream.until_turn_ended(&big.turn_id).await?;
    let finished = events
        .iter()
        .find(|e| matches!(&e.body, EventBody::Tool(t) if t.status == ToolStatus::Finished))
        .ok_or("no finished tool event")?;
    let EventBody::Tool(tool) = &finished.body else {
        unreachable!()
    };
    let preview = tool.output_preview.as_deref().unwrap_or("");
    assert!(preview.len() <= turnstream_protocol::limits::TRUNCATED_PREVIEW_BYTES);
    assert!(!preview.is_empty());
    assert_eq!(finished.truncated.len(), 1);
    assert_eq!(finished.truncated[0].field, "output_preview");
    assert_eq!(finished.truncated[0].original_size, 1_000_000);
    assert!(
        serde_json::to_string(finished)?.len()
            <= turnstream_protocol::limits::MAX_EVENT_PAYLOAD_BYTES
    );
    // Under the cap nothing is cut.
    let small = s.send("p", "/bigtool 100000").await?;
    let events = stream.until_turn_ended(&small.turn_id).await?;
    let ok = events
        .iter()
        .find_map(|e| match &e.body {
            EventBody::Tool(t) if t.status == ToolStatus::Finished => Some((t, &e.truncated)),
            _ => None,
        })
        .ok_or("no tool event")?;
    assert_eq!(ok.0.output_preview.as_ref().map(String::len), Some(100_000));
    assert!(ok.1.is_empty());
    Ok(())
}

#[tokio::test]
async fn deltas_are_coalesced_by_default_and_not_with_zero() -> TestResult {
    for (flags, exact) in [
        (vec!["--coalesce-ms", "0"], true),
        (vec!["--demo-delay-ms", "0"], false),
    ] {
        let s = TestServer::start(&flags)?;
        let (_, cursor) = s.history("k").await?;
        let mut stream = s
            .stream(&format!("session=k&cursor={cursor}"), None)
            .await?;
        let sent = s.send("k", "/deltas 500").await?;
        let events = stream.until_turn_ended(&sent.turn_id).await?;
        let n = events
            .iter()
            .filter(|e| e.body.kind() == "response_delta")
            .count();
        assert_eq!(reply_text(&events, &sent.turn_id), deltas_text(500));
        if exact {
            assert_eq!(n, 500, "--coalesce-ms 0 journals every delta");
        } else {
            assert!(n < 100, "500 instant deltas were journaled as {n} events");
        }
    }
    Ok(())
}

#[tokio::test]
async fn idempotent_posts_and_conflicts() -> TestResult {
    let s = TestServer::start(&[])?;
    let (status, first) = s.post("i", "/echo once", Some("cm-1")).await?;
    assert_eq!(status, 202);
    for key in ["message_id", "client_message_id", "turn_id", "event_id"] {
        assert!(first[key].is_string(), "{key} missing in {first}");
    }
    let (status, again) = s.post("i", "/echo once", Some("cm-1")).await?;
    assert_eq!(status, 200);
    assert_eq!(again, first);
    let (status, conflict) = s.post("i", "/echo different", Some("cm-1")).await?;
    assert_eq!(status, 409);
    assert_eq!(conflict["error"]["code"], "client_message_id_conflict");
    // The same client id in another session is another message.
    let (status, _) = s.post("j", "/echo once", Some("cm-1")).await?;
    assert_eq!(status, 202);
    let turn = first["turn_id"].as_str().ok_or("no turn id")?;
    s.wait_turn_end(turn).await?;
    let (history, _) = s.history("i").await?;
    assert_eq!(
        history.messages.len(),
        2,
        "one user message and one reply, not two turns"
    );
    Ok(())
}

#[tokio::test]
async fn snapshot_on_connect_without_cursor_is_live_only() -> TestResult {
    let s = TestServer::start(&["--demo-delay-ms", "10"])?;
    let sent = s.send("n", "/deltas 100").await?;
    wait_for(|| async {
        Ok((s.turn(&sent.turn_id).await?.state == TurnState::Running).then_some(()))
    })
    .await?;
    let mut stream = s.stream("session=n&snapshot=1", None).await?;
    let snap = stream.snapshot().await?;
    assert_eq!(snap.active_turns.len(), 1);
    let tail = stream.until_turn_ended(&sent.turn_id).await?;
    let text = format!(
        "{}{}",
        snap.active_turns[0].text,
        reply_text(&tail, &sent.turn_id)
    );
    assert_eq!(text, deltas_text(100));
    Ok(())
}

#[tokio::test]
async fn a_subscriber_that_stops_reading_falls_back_to_the_journal() -> TestResult {
    let s = TestServer::start(&["--demo-delay-ms", "0", "--coalesce-ms", "0"])?;
    let (_, cursor) = s.history("slow").await?;
    // A 4 KB receive window: 60,000 deltas (several MB of SSE) overflow it, the server's
    // send buffer (at most `tcp_wmem`'s 4 MB) and the subscriber's queue, on any kernel.
    // The stream goes straight to a node: through the several nodes' proxy, the proxy's own
    // sockets (their buffers autotuned, up to `tcp_rmem` and `tcp_wmem` more) could take the
    // whole turn. The message still goes through the proxy, so it may be run by another node.
    let node = s.node(0);
    let query = format!("session=slow&cursor={cursor}");
    let mut slow = node.stream_with_small_window(&query).await?;
    // A second subscriber on the same node that reads: once it has the turn's end, the node has
    // handed the whole turn to the slow one too (with several nodes polling, the turn may end
    // well before a node has heard all of it).
    let mut witness = node.stream(&query, None).await?;
    let n = 60_000;
    let sent = s.send("slow", &format!("/deltas {n}")).await?;
    // The reader does not read while the whole turn reaches its node: its socket and its
    // queue fill.
    witness.until_turn_ended(&sent.turn_id).await?;
    // The witness may have lagged too; the slow subscriber's fallback is counted once it reads.
    let lags_before = node.counter("turnstream_lag_fallbacks_total").await?;
    let events = slow.until_turn_ended(&sent.turn_id).await?;
    let seqs: Vec<i64> = events.iter().map(seq).collect();
    assert!(
        seqs.windows(2).all(|w| w[1] == w[0] + 1),
        "gap or duplicate after lag"
    );
    assert_eq!(reply_text(&events, &sent.turn_id), deltas_text(n));
    let lags = node.counter("turnstream_lag_fallbacks_total").await?;
    assert!(
        lags > lags_before,
        "the subscriber never lagged, so the fallback was not exercised"
    );
    Ok(())
}

#[tokio::test]
async fn heartbeats_go_out_only_on_a_quiet_stream() -> TestResult {
    use futures::StreamExt;
    use std::time::Instant;
    let s = TestServer::start(&["--heartbeat-secs", "1", "--demo-delay-ms", "100"])?;
    let res = reqwest::Client::new()
        .get(format!("{}/api/stream?session=hb", s.url))
        .send()
        .await?;
    let mut body = res.bytes_stream();
    let mut next = async || -> TestResult<(Instant, String)> {
        let chunk = tokio::time::timeout(Duration::from_secs(5), body.next())
            .await
            .map_err(|_| "no write on the stream within 5 s")?
            .ok_or("stream ended")??;
        Ok((Instant::now(), String::from_utf8_lossy(&chunk).into_owned()))
    };
    // Idle: a heartbeat comes within the period (and the 5 s deadline).
    loop {
        if next().await?.1.contains(": heartbeat") {
            break;
        }
    }
    // Busy (a delta every 100 ms for 2.5 s): from its first event to `turn_ended`, no heartbeat.
    s.send("hb", "/deltas 25").await?;
    let mut started = false;
    let ended_at = loop {
        let (at, text) = next().await?;
        if started {
            assert!(
                !text.contains(": heartbeat"),
                "heartbeat while events flowed: {text:?}"
            );
        }
        started |= text.contains("event: ");
        if text.contains("event: turn_ended") {
            break at;
        }
    };
    // Quiet again: the next heartbeat comes about one period after the last event, not sooner.
    let (at, text) = next().await?;
    assert!(text.contains(": heartbeat"), "unexpected write {text:?}");
    let gap = at - ended_at;
    assert!(
        gap >= Duration::from_millis(700),
        "heartbeat {gap:?} after the last event"
    );
    Ok(())
}
