//! Durability of the real `turnstream` binary: kill -9 and graceful shutdown mid-turn, recovery,
//! retention, `DELETE /realtime`, and the `--agent openai` path against a fake upstream.
//!
//! Every wait is bounded by a deadline; nothing sleeps and hopes.

mod support;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use serde_json::{json, Value};
use support::*;
use turnstream_protocol::{Event, EventBody, Message, MessageStatus, Role, TurnState};

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

/// The `turn_ended` events of `turn`: (state, message, error).
fn turn_endings(events: &[Event], turn: &str) -> Vec<(TurnState, Option<Message>, Option<String>)> {
    events
        .iter()
        .filter(|e| e.turn_id.as_deref() == Some(turn))
        .filter_map(|e| match &e.body {
            EventBody::TurnEnded {
                state,
                message,
                error,
            } => Some((*state, message.clone(), error.clone())),
            _ => None,
        })
        .collect()
}

/// The one `turn_ended` of `turn`, failing unless there is exactly one.
fn single_ending(
    events: &[Event],
    turn: &str,
) -> TestResult<(TurnState, Option<Message>, Option<String>)> {
    let mut endings = turn_endings(events, turn);
    if endings.len() != 1 {
        return Err(format!(
            "turn {turn} has {} turn_ended events, expected exactly one: {endings:?}",
            endings.len()
        )
        .into());
    }
    Ok(endings.remove(0))
}

fn thinking_text(events: &[Event], turn: &str) -> String {
    events
        .iter()
        .filter(|e| e.turn_id.as_deref() == Some(turn))
        .filter_map(|e| match &e.body {
            EventBody::Thinking { delta } => Some(delta.as_str()),
            _ => None,
        })
        .collect()
}

fn count_kind(events: &[Event], turn: &str, kind: &str) -> usize {
    events
        .iter()
        .filter(|e| e.turn_id.as_deref() == Some(turn) && e.body.kind() == kind)
        .count()
}

/// Ids strictly increase (no duplicate, no reordering).
fn assert_strictly_increasing(events: &[Event]) {
    for w in events.windows(2) {
        assert!(
            seq(&w[0]) < seq(&w[1]),
            "event ids not strictly increasing: {} then {}",
            w[0].id,
            w[1].id
        );
    }
}

/// The assistant messages of `turn` in history.
fn assistant_messages<'a>(messages: &'a [Message], turn: &str) -> Vec<&'a Message> {
    messages
        .iter()
        .filter(|m| m.role == Role::Assistant && m.turn_id.as_deref() == Some(turn))
        .collect()
}

/// Opens a stream from `cursor` and returns the resync reason if the first frame is a resync
/// (after checking the stream then closes), or `None` if the stream delivered an event first.
async fn resync_on_open(s: &TestServer, session: &str, cursor: &str) -> TestResult<Option<String>> {
    let mut st = s
        .stream(&format!("session={session}&cursor={cursor}"), None)
        .await?;
    let f = st
        .next_within(Duration::from_secs(5))
        .await?
        .ok_or("stream closed without any frame")?;
    if f.event != "history_resync_required" {
        return Ok(None);
    }
    if f.id.is_some() {
        return Err(format!("resync frame carries an id: {f:?}").into());
    }
    let v: Value = serde_json::from_str(&f.data)?;
    let reason = v["reason"]
        .as_str()
        .ok_or_else(|| format!("resync without a reason: {}", f.data))?
        .to_string();
    match st.next().await? {
        None => Ok(Some(reason)),
        Some(f) => Err(format!("stream went on after the resync: {f:?}").into()),
    }
}

/// Polls until a stream from `cursor` answers `history_resync_required` `expired` and closes.
async fn wait_expired(s: &TestServer, session: &str, cursor: &str) -> TestResult {
    wait_for(|| async {
        match resync_on_open(s, session, cursor).await? {
            None => Ok(None),
            Some(r) if r == "expired" => Ok(Some(())),
            Some(r) => Err(format!("resync reason {r}, expected expired").into()),
        }
    })
    .await
}

/// Reads events until `turn` has started.
async fn until_started(st: &mut SseClient, turn: &str) -> TestResult<Vec<Event>> {
    let mut out = Vec::new();
    loop {
        let e = st.next_event().await?;
        let done = e.turn_id.as_deref() == Some(turn) && e.body.kind() == "turn_started";
        out.push(e);
        if done {
            return Ok(out);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// 1 and 2: kill -9 mid-turn
// ---------------------------------------------------------------------------------------------

struct Crashed {
    s: TestServer,
    t1: String,
    t2: String,
    /// Events a client saw live before the crash.
    seen: Vec<Event>,
}

/// `/deltas 2000` then a queued `/echo after` in session A; kill -9 once a client has seen at
/// least 20 response deltas; restart on the same database.
///
/// On PostgreSQL the restarted server is a new node: the dead one's turn ends once its lease (2 s
/// here) runs out, not at the start (another node may still be running it).
async fn crash_mid_turn() -> TestResult<Crashed> {
    let mut s = TestServer::start(&[
        "--demo-delay-ms",
        "10",
        "--coalesce-ms",
        "0",
        "--worker-lease-secs",
        "2",
    ])?;
    let (_, c0) = s.history("A").await?;
    let mut st = s.stream(&format!("session=A&cursor={c0}"), None).await?;
    let t1 = s.send("A", "/deltas 2000").await?.turn_id;
    let t2 = s.send("A", "/echo after").await?.turn_id;
    let mut seen = Vec::new();
    let mut deltas = 0;
    while deltas < 20 {
        let e = st.next_event().await?;
        if e.turn_id.as_deref() == Some(t1.as_str()) && e.body.kind() == "response_delta" {
            deltas += 1;
        }
        seen.push(e);
    }
    assert_eq!(s.turn(&t1).await?.state, TurnState::Running);
    assert_eq!(s.turn(&t2).await?.state, TurnState::Queued);
    s.kill9()?;
    drop(st);
    s.restart(None)?;
    if support::pg::admin_url().is_some() {
        wait_for(|| async { Ok((s.turn(&t1).await?.state != TurnState::Running).then_some(())) })
            .await?;
    }
    Ok(Crashed { s, t1, t2, seen })
}

#[tokio::test]
async fn kill9_mid_turn_interrupts_it_once_and_runs_the_queued_turn() -> TestResult {
    let Crashed { s, t1, t2, seen } = crash_mid_turn().await?;

    // Recovery ran before the server answered: the turn left running is interrupted.
    let info1 = s.turn(&t1).await?;
    assert_eq!(info1.state, TurnState::Interrupted, "{info1:?}");

    // The queued turn runs after the restart.
    let info2 = s.wait_turn_end(&t2).await?;
    assert_eq!(info2.state, TurnState::Completed, "{info2:?}");
    assert_eq!(info2.text, "after");

    let events = s.replay_session("A").await?;
    assert_strictly_increasing(&events);
    assert!(
        events.starts_with(&seen),
        "the journal lost or changed events a client had already seen"
    );

    let (state, message, error) = single_ending(&events, &t1)?;
    assert_eq!(state, TurnState::Interrupted);
    assert_eq!(error, None);
    let message = message.ok_or("turn_ended of the interrupted turn carries no message")?;
    let journaled = reply_text(&events, &t1);
    let seen_text = reply_text(&seen, &t1);
    assert!(!journaled.is_empty(), "no response delta journaled");
    assert!(
        deltas_text(2000).starts_with(&journaled),
        "journaled text is not a prefix of the full reply: {journaled:?}"
    );
    assert!(
        journaled.starts_with(&seen_text),
        "what a client saw ({seen_text:?}) is not a prefix of what was journaled ({journaled:?})"
    );
    assert_eq!(message.content, journaled);
    assert_eq!(message.status, MessageStatus::Interrupted);
    assert_eq!(message.role, Role::Assistant);
    assert_eq!(info1.text, journaled);
    // The turn_ended of t1 follows every delta of t1.
    let ended_at = events
        .iter()
        .position(|e| e.turn_id.as_deref() == Some(t1.as_str()) && e.body.kind() == "turn_ended")
        .ok_or("no turn_ended")?;
    assert!(events[ended_at..]
        .iter()
        .all(|e| e.turn_id.as_deref() != Some(t1.as_str()) || e.body.kind() == "turn_ended"));

    let (state2, message2, _) = single_ending(&events, &t2)?;
    assert_eq!(state2, TurnState::Completed);
    assert_eq!(reply_text(&events, &t2), "after");
    assert_eq!(message2.as_ref().map(|m| m.content.as_str()), Some("after"));

    // History: the interrupted message, exactly once, equal to the one turn_ended carries.
    let (history, _) = s.history("A").await?;
    let a1 = assistant_messages(&history.messages, &t1);
    assert_eq!(a1.len(), 1, "assistant messages of t1: {a1:?}");
    assert_eq!(*a1[0], message);
    let a2 = assistant_messages(&history.messages, &t2);
    assert_eq!(a2.len(), 1);
    assert_eq!(a2[0].content, "after");
    assert_eq!(a2[0].status, MessageStatus::Complete);
    assert_eq!(history.messages.len(), 4, "{:?}", history.messages);
    Ok(())
}

#[tokio::test]
async fn recovery_twice_is_idempotent() -> TestResult {
    let Crashed { mut s, t1, t2, .. } = crash_mid_turn().await?;
    assert_eq!(s.turn(&t1).await?.state, TurnState::Interrupted);
    assert_eq!(s.wait_turn_end(&t2).await?.state, TurnState::Completed);
    let (h1, c1) = s.history("A").await?;
    let ev1 = s.replay_session("A").await?;
    assert_eq!(turn_endings(&ev1, &t1).len(), 1);

    s.kill9()?;
    s.restart(None)?;

    assert_eq!(s.turn(&t1).await?.state, TurnState::Interrupted);
    assert_eq!(s.turn(&t2).await?.state, TurnState::Completed);
    let (h2, c2) = s.history("A").await?;
    assert_eq!(c2, c1, "the second recovery appended to the journal");
    assert_eq!(
        h2.messages, h1.messages,
        "history changed on the second recovery"
    );
    let ev2 = s.replay_session("A").await?;
    assert_eq!(turn_endings(&ev2, &t1).len(), 1);
    assert_eq!(ev2, ev1);
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// 3 and 4: graceful shutdown
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn graceful_shutdown_lets_a_short_turn_finish() -> TestResult {
    let mut s = TestServer::start(&["--shutdown-grace-secs", "20"])?;
    let (_, c0) = s.history("G").await?;
    let mut st = s.stream(&format!("session=G&cursor={c0}"), None).await?;
    let t = s.send("G", "/sleep 800 done").await?.turn_id;
    let mut seen = until_started(&mut st, &t).await?;

    let started = Instant::now();
    let status = s.terminate()?;
    let took = started.elapsed();
    assert!(status.success(), "exit status {status:?}");
    assert!(
        took < Duration::from_secs(15),
        "shutdown took {took:?}: it waited for the whole grace period"
    );
    // The open stream delivers whatever it delivers before the shutdown, then ends cleanly.
    while let Some(f) = st.next().await? {
        let e: Event = serde_json::from_str(&f.data)?;
        assert_eq!(f.id.as_deref(), Some(e.id.as_str()));
        seen.push(e);
    }

    s.restart(None)?;
    let info = s.turn(&t).await?;
    assert_eq!(info.state, TurnState::Completed, "{info:?}");
    assert_eq!(info.text, "done");

    // A client resuming from the last id it saw gets the rest, exactly once.
    let last = seen.last().ok_or("saw nothing")?.id.clone();
    if turn_endings(&seen, &t).is_empty() {
        let mut resumed = s.stream("session=G", Some(&last)).await?;
        seen.extend(resumed.until_turn_ended(&t).await?);
    }
    assert_strictly_increasing(&seen);
    let (state, message, _) = single_ending(&seen, &t)?;
    assert_eq!(state, TurnState::Completed);
    assert_eq!(reply_text(&seen, &t), "done");
    let message = message.ok_or("no message in turn_ended")?;
    assert_eq!(message.content, "done");
    assert_eq!(message.status, MessageStatus::Complete);

    let (history, _) = s.history("G").await?;
    let a = assistant_messages(&history.messages, &t);
    assert_eq!(a.len(), 1);
    assert_eq!(*a[0], message);
    let all = s.replay_session("G").await?;
    assert_eq!(turn_endings(&all, &t).len(), 1);
    Ok(())
}

#[tokio::test]
async fn graceful_shutdown_interrupts_a_long_turn_after_the_grace() -> TestResult {
    let mut s = TestServer::start(&["--shutdown-grace-secs", "1"])?;
    let (_, c0) = s.history("L").await?;
    let mut st = s.stream(&format!("session=L&cursor={c0}"), None).await?;
    let t1 = s.send("L", "/sleep 60000 never").await?.turn_id;
    until_started(&mut st, &t1).await?;
    let t2 = s.send("L", "/echo later").await?.turn_id;
    assert_eq!(s.turn(&t2).await?.state, TurnState::Queued);

    let started = Instant::now();
    let status = s.terminate()?;
    let took = started.elapsed();
    assert!(status.success(), "exit status {status:?}");
    assert!(
        took < Duration::from_secs(10),
        "shutdown with a 1 s grace took {took:?}"
    );
    drop(st);

    s.restart(None)?;
    let info1 = s.turn(&t1).await?;
    assert_eq!(info1.state, TurnState::Interrupted, "{info1:?}");
    let info2 = s.wait_turn_end(&t2).await?;
    assert_eq!(info2.state, TurnState::Completed, "{info2:?}");
    assert_eq!(info2.text, "later");

    let events = s.replay_session("L").await?;
    assert_strictly_increasing(&events);
    let (state, message, _) = single_ending(&events, &t1)?;
    assert_eq!(state, TurnState::Interrupted);
    let message = message.ok_or("no message in turn_ended")?;
    assert_eq!(message.status, MessageStatus::Interrupted);
    assert_eq!(message.content, "");
    assert_eq!(reply_text(&events, &t2), "later");
    assert_eq!(single_ending(&events, &t2)?.0, TurnState::Completed);
    // The queued turn started only after the restart, so after t1 ended.
    let t1_end = events
        .iter()
        .find(|e| e.turn_id.as_deref() == Some(t1.as_str()) && e.body.kind() == "turn_ended")
        .map(seq)
        .ok_or("no turn_ended for t1")?;
    let t2_start = events
        .iter()
        .find(|e| e.turn_id.as_deref() == Some(t2.as_str()) && e.body.kind() == "turn_started")
        .map(seq)
        .ok_or("no turn_started for t2")?;
    assert!(t1_end < t2_start);

    let (history, _) = s.history("L").await?;
    let a1 = assistant_messages(&history.messages, &t1);
    assert_eq!(a1.len(), 1);
    assert_eq!(*a1[0], message);
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// 5 and 6: retention
// ---------------------------------------------------------------------------------------------

const SHORT_RETENTION: [&str; 4] = ["--retention-secs", "1", "--cleanup-interval-secs", "1"];

#[tokio::test]
async fn retention_expires_old_cursors_but_keeps_history() -> TestResult {
    let s = TestServer::start(&SHORT_RETENTION)?;
    let (_, c0) = s.history("R").await?;
    let t1 = s.send("R", "/echo hi").await?.turn_id;
    assert_eq!(s.wait_turn_end(&t1).await?.state, TurnState::Completed);

    wait_expired(&s, "R", &c0).await?;

    let (history, c1) = s.history("R").await?;
    assert_eq!(history.messages.len(), 2, "{:?}", history.messages);
    assert_eq!(history.messages[0].role, Role::User);
    assert_eq!(history.messages[0].content, "/echo hi");
    assert_eq!(history.messages[1].role, Role::Assistant);
    assert_eq!(history.messages[1].content, "hi");
    assert_eq!(history.messages[1].status, MessageStatus::Complete);

    let mut st = s
        .stream(&format!("session=R&cursor={c1}&snapshot=1"), None)
        .await?;
    let snap = st.snapshot().await?;
    assert_eq!(snap.cursor, c1);
    assert!(snap.active_turns.is_empty(), "{:?}", snap.active_turns);

    let t2 = s.send("R", "/echo again").await?.turn_id;
    let events = st.until_turn_ended(&t2).await?;
    assert_eq!(
        events.first().map(|e| e.body.kind()),
        Some("message_received")
    );
    assert!(events
        .iter()
        .all(|e| e.turn_id.as_deref() == Some(t2.as_str())));
    assert!(events
        .iter()
        .all(|e| seq(e) > cursor_seq(&c1).unwrap_or(i64::MAX)));
    assert_eq!(reply_text(&events, &t2), "again");
    assert_eq!(single_ending(&events, &t2)?.0, TurnState::Completed);
    Ok(())
}

#[tokio::test]
async fn active_turn_events_never_expire() -> TestResult {
    let s = TestServer::start(&SHORT_RETENTION)?;
    // The slow turn has a session of its own: no finished turn there raises its floor.
    let (_, cb) = s.history("B").await?;
    let slow = s.send("B", "/sleep 10000 slow").await?.turn_id;
    wait_for(|| async { Ok((s.turn(&slow).await?.state == TurnState::Running).then_some(())) })
        .await?;

    // Two cleanup passes while the slow turn runs: a turn that ended after the slow one started
    // expires (pass 1), then a turn that ended after that expiry expires too (pass 2).
    for session in ["A", "C"] {
        let (_, c) = s.history(session).await?;
        let t = s.send(session, "/echo quick").await?.turn_id;
        assert_eq!(s.wait_turn_end(&t).await?.state, TurnState::Completed);
        wait_expired(&s, session, &c).await?;
    }
    let info = s.turn(&slow).await?;
    assert_eq!(
        info.state,
        TurnState::Running,
        "the slow turn ended before two cleanup passes ran; the test proves nothing"
    );

    let mut st = s.stream(&format!("session=B&cursor={cb}"), None).await?;
    let events = st.until_turn_ended(&slow).await?;
    let kinds: Vec<&str> = events.iter().map(|e| e.body.kind()).collect();
    assert_eq!(
        kinds.first().copied(),
        Some("message_received"),
        "replay does not start at the slow turn's message: {kinds:?}"
    );
    assert_eq!(count_kind(&events, &slow, "turn_queued"), 1);
    assert_eq!(count_kind(&events, &slow, "turn_started"), 1);
    assert_eq!(reply_text(&events, &slow), "slow");
    assert_eq!(single_ending(&events, &slow)?.0, TurnState::Completed);
    assert_strictly_increasing(&events);
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// 7: DELETE /api/sessions/{s}/realtime
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn delete_realtime_expires_finished_turns_and_keeps_the_active_one() -> TestResult {
    let s = TestServer::start(&[])?;
    let (_, c0) = s.history("A").await?;
    let t1 = s.send("A", "/echo one").await?.turn_id;
    assert_eq!(s.wait_turn_end(&t1).await?.state, TurnState::Completed);
    let mut st = s.stream(&format!("session=A&cursor={c0}"), None).await?;
    let t1_events = st.until_turn_ended(&t1).await?;
    drop(st);
    let t1_end = t1_events.last().map(seq).ok_or("no t1 events")?;
    let epoch = epoch_of(&c0)?;

    let sent2 = s.send("A", "/sleep 2000 x").await?;
    let t2 = sent2.turn_id.clone();
    wait_for(|| async { Ok((s.turn(&t2).await?.state == TurnState::Running).then_some(())) })
        .await?;

    let res = s
        .http
        .delete(format!("{}/api/sessions/A/realtime", s.url))
        .send()
        .await?;
    assert_eq!(res.status().as_u16(), 200);
    let body: Value = res.json().await?;
    assert_eq!(body["session_id"], "A", "{body}");
    let deleted = body["deleted_events"]
        .as_u64()
        .ok_or_else(|| format!("no deleted_events: {body}"))?;
    assert!(deleted > 0, "{body}");
    assert_eq!(
        deleted,
        t1_events.len() as u64,
        "deleted_events should be exactly the finished turn's events: {body}"
    );
    assert_eq!(s.turn(&t2).await?.state, TurnState::Running);

    // Cursors older than the finished turn's end are expired.
    for old in [c0.clone(), format!("{epoch}-{}", t1_end - 1)] {
        let r = resync_on_open(&s, "A", &old).await?;
        assert_eq!(r.as_deref(), Some("expired"), "cursor {old}");
    }

    // The active turn's events stay: a stream from just before its message replays them.
    let before_t2 = format!("{epoch}-{}", cursor_seq(&sent2.event_id)? - 1);
    let mut replay = s
        .stream(&format!("session=A&cursor={before_t2}"), None)
        .await?;
    let first = until_started(&mut replay, &t2).await?;
    let kinds: Vec<&str> = first.iter().map(|e| e.body.kind()).collect();
    assert_eq!(kinds, ["message_received", "turn_queued", "turn_started"]);
    drop(replay);

    // A fresh history cursor with snapshot=1 shows the active turn, then its completion.
    let (history, c2) = s.history("A").await?;
    assert_eq!(history.messages.len(), 3, "{:?}", history.messages);
    let mut st = s
        .stream(&format!("session=A&cursor={c2}&snapshot=1"), None)
        .await?;
    let snap = st.snapshot().await?;
    assert_eq!(snap.cursor, c2);
    assert_eq!(snap.active_turns.len(), 1, "{:?}", snap.active_turns);
    assert_eq!(snap.active_turns[0].turn_id, t2);
    assert_eq!(snap.active_turns[0].session_id, "A");
    assert_eq!(snap.active_turns[0].state, TurnState::Running);
    let events = st.until_turn_ended(&t2).await?;
    assert_eq!(reply_text(&events, &t2), "x");
    let (state, message, _) = single_ending(&events, &t2)?;
    assert_eq!(state, TurnState::Completed);
    assert_eq!(message.map(|m| m.content).as_deref(), Some("x"));
    let (history, _) = s.history("A").await?;
    assert_eq!(history.messages.len(), 4);
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// 8: --agent openai through the real binary
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Copy)]
enum UpstreamMode {
    Stream,
    Unauthorized,
}

#[derive(Clone)]
struct Upstream {
    mode: UpstreamMode,
    requests: Arc<Mutex<Vec<Value>>>,
}

fn sse_chunk(v: Value) -> String {
    format!("data: {v}\n\n")
}

async fn completions(State(up): State<Upstream>, Json(body): Json<Value>) -> Response {
    if let Ok(mut r) = up.requests.lock() {
        r.push(body);
    }
    match up.mode {
        UpstreamMode::Unauthorized => (
            StatusCode::UNAUTHORIZED,
            [("content-type", "application/json")],
            json!({"error": {"message": "Invalid API key"}}).to_string(),
        )
            .into_response(),
        UpstreamMode::Stream => {
            let choice = |delta: Value, finish: Value| {
                sse_chunk(json!({
                    "id": "chatcmpl-1",
                    "object": "chat.completion.chunk",
                    "model": "test-model",
                    "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
                }))
            };
            let pieces: Vec<Result<String, std::io::Error>> = vec![
                Ok(choice(
                    json!({"role": "assistant", "reasoning_content": "hmm"}),
                    Value::Null,
                )),
                Ok(choice(json!({"content": "Hel"}), Value::Null)),
                Ok(choice(json!({"content": "lo"}), Value::Null)),
                Ok(choice(json!({}), json!("stop"))),
                Ok("data: [DONE]\n\n".to_string()),
            ];
            Response::builder()
                .header("content-type", "text/event-stream")
                .body(Body::from_stream(futures::stream::iter(pieces)))
                .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
        }
    }
}

/// A fake OpenAI-compatible upstream on 127.0.0.1:0; returns its state and base URL.
async fn fake_upstream(mode: UpstreamMode) -> TestResult<(Upstream, String)> {
    let up = Upstream {
        mode,
        requests: Arc::new(Mutex::new(Vec::new())),
    };
    let app = Router::new()
        .route("/v1/chat/completions", post(completions))
        .with_state(up.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Ok((up, format!("http://{addr}/v1")))
}

fn recorded(up: &Upstream) -> Vec<Value> {
    up.requests.lock().map(|r| r.clone()).unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_agent_streams_thinking_and_reply_through_the_binary() -> TestResult {
    let (up, base) = fake_upstream(UpstreamMode::Stream).await?;
    let s = TestServer::start(&[
        "--agent",
        "openai",
        "--openai-base-url",
        &base,
        "--openai-model",
        "test-model",
    ])?;
    let (_, c0) = s.history("O").await?;
    let mut st = s.stream(&format!("session=O&cursor={c0}"), None).await?;
    let t1 = s.send("O", "Hi there").await?.turn_id;
    let events = st.until_turn_ended(&t1).await?;
    assert_eq!(thinking_text(&events, &t1), "hmm");
    assert_eq!(reply_text(&events, &t1), "Hello");
    let (state, message, error) = single_ending(&events, &t1)?;
    assert_eq!(state, TurnState::Completed, "error: {error:?}");
    let message = message.ok_or("no message in turn_ended")?;
    assert_eq!(message.content, "Hello");
    assert_eq!(message.status, MessageStatus::Complete);
    let (history, _) = s.history("O").await?;
    let a = assistant_messages(&history.messages, &t1);
    assert_eq!(a.len(), 1);
    assert_eq!(a[0].content, "Hello");
    assert_eq!(a[0].status, MessageStatus::Complete);

    // A second message: the upstream gets the first exchange as context.
    let t2 = s.send("O", "And again?").await?.turn_id;
    let events = st.until_turn_ended(&t2).await?;
    assert_eq!(single_ending(&events, &t2)?.0, TurnState::Completed);
    assert_eq!(reply_text(&events, &t2), "Hello");

    let reqs = recorded(&up);
    assert_eq!(reqs.len(), 2, "{reqs:?}");
    assert_eq!(reqs[0]["model"], "test-model");
    assert_eq!(reqs[0]["stream"], true);
    assert_eq!(
        reqs[0]["messages"],
        json!([{"role": "user", "content": "Hi there"}])
    );
    assert_eq!(
        reqs[1]["messages"],
        json!([
            {"role": "user", "content": "Hi there"},
            {"role": "assistant", "content": "Hello"},
            {"role": "user", "content": "And again?"},
        ])
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_agent_upstream_401_fails_the_turn() -> TestResult {
    let (up, base) = fake_upstream(UpstreamMode::Unauthorized).await?;
    let s = TestServer::start(&[
        "--agent",
        "openai",
        "--openai-base-url",
        &base,
        "--openai-model",
        "test-model",
    ])?;
    let (_, c0) = s.history("O").await?;
    let mut st = s.stream(&format!("session=O&cursor={c0}"), None).await?;
    let t = s.send("O", "Hi").await?.turn_id;
    let events = st.until_turn_ended(&t).await?;
    let (state, message, error) = single_ending(&events, &t)?;
    assert_eq!(state, TurnState::Failed);
    let error = error.ok_or("failed turn_ended without an error")?;
    assert!(error.contains("Invalid API key"), "error: {error}");
    let message = message.ok_or("no message in turn_ended")?;
    assert_eq!(message.status, MessageStatus::Failed);
    assert_eq!(message.content, "");

    let info = s.turn(&t).await?;
    assert_eq!(info.state, TurnState::Failed);
    assert!(
        info.error
            .as_deref()
            .unwrap_or("")
            .contains("Invalid API key"),
        "{info:?}"
    );
    assert_eq!(recorded(&up).len(), 1);
    Ok(())
}
