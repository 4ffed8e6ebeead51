//! Promises of the design documents the project started from, each against the real binary on
//! SQLite and on the PostgreSQL passes: an event outside a turn expires after retention, counted
//! from when it happened; crash recovery only repairs a turn whose `turn_ended` is journaled;
//! clearing a session keeps a turn that waits for input; an open approval is in the snapshot.

mod support;

use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};
use support::*;
use turnstream_protocol::{
    ActiveTurn, Event, EventBody, MessageStatus, RequestKind, Snapshot, TurnInfo, TurnState,
};

fn now_ms() -> TestResult<i64> {
    Ok(i64::try_from(
        SystemTime::now().duration_since(UNIX_EPOCH)?.as_millis(),
    )?)
}

/// The `turn_ended` events of `turn`.
fn endings<'a>(events: &'a [Event], turn: &str) -> Vec<&'a Event> {
    events
        .iter()
        .filter(|e| e.turn_id.as_deref() == Some(turn))
        .filter(|e| matches!(e.body, EventBody::TurnEnded { .. }))
        .collect()
}

/// The first frame of a stream from `cursor`: `Ok(None)` when it is an event (the position is
/// served), the reason when it is a resync (then the stream must end).
async fn resync_on_open(s: &TestServer, session: &str, cursor: &str) -> TestResult<Option<String>> {
    let mut st = s
        .stream(&format!("session={session}&cursor={cursor}"), None)
        .await?;
    let f = st.next().await?.ok_or("stream closed without any frame")?;
    if f.event != "history_resync_required" {
        return Ok(None);
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

/// A snapshot of `session` as of `cursor` (`None`: the head).
async fn snapshot(s: &TestServer, session: &str, cursor: Option<&str>) -> TestResult<Snapshot> {
    let query = match cursor {
        Some(c) => format!("session={session}&snapshot=1&cursor={c}"),
        None => format!("session={session}&snapshot=1"),
    };
    s.stream(&query, None).await?.snapshot().await
}

async fn switch_branch(s: &TestServer, session: &str, leaf: &str) -> TestResult<String> {
    let (status, body) = s
        .post_json(
            &format!("/api/sessions/{session}/active"),
            &json!({ "leaf_id": leaf }),
        )
        .await?;
    if status != 200 {
        return Err(format!("switch answered {status}: {body}").into());
    }
    Ok(body["event_id"]
        .as_str()
        .ok_or_else(|| format!("no event_id: {body}"))?
        .to_string())
}

async fn clear_realtime(s: &TestServer, session: &str) -> TestResult<u64> {
    let res = s
        .http
        .delete(format!("{}/api/sessions/{session}/realtime", s.url))
        .send()
        .await?;
    let status = res.status().as_u16();
    let body: Value = res.json().await?;
    if status != 200 || body["session_id"] != session {
        return Err(format!("DELETE /realtime answered {status}: {body}").into());
    }
    body["deleted_events"]
        .as_u64()
        .ok_or_else(|| format!("no deleted_events: {body}").into())
}

/// Waits until `turn` waits for input with a request open.
async fn until_waiting(s: &TestServer, turn: &str) -> TestResult<TurnInfo> {
    wait_for(|| async {
        let t = s.turn(turn).await?;
        Ok((t.state == TurnState::Waiting && t.requests.iter().any(|r| r.is_open())).then_some(t))
    })
    .await
}

async fn approve(s: &TestServer, turn: &str, request: &str) -> TestResult {
    let (status, body) = s
        .post_json(
            &format!("/api/turns/{turn}/input"),
            &json!({ "request_id": request, "approved": true }),
        )
        .await?;
    if status != 200 {
        return Err(format!("the answer got {status}: {body}").into());
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Retention of events outside a turn
// ---------------------------------------------------------------------------------------------

const RETENTION_MS: i64 = 2000;

/// A `branch_changed` belongs to no turn: it expires `--retention-secs` after it was journaled
/// (not sooner, and not never), raising the floor above the turns before it; history keeps the
/// branch it chose.
#[tokio::test]
async fn an_event_outside_a_turn_expires_after_retention() -> TestResult {
    let s = TestServer::start(&["--retention-secs", "2", "--cleanup-interval-secs", "1"])?;
    let v1 = s.send("loose", "/echo v1").await?;
    s.wait_turn_end(&v1.turn_id).await?;
    let (status, body) = s
        .post_json(
            "/api/sessions/loose/messages",
            &json!({"content": "/echo v2", "parent_id": null}),
        )
        .await?;
    assert_eq!(status, 202, "{body}");
    s.wait_turn_end(body["turn_id"].as_str().ok_or("turn_id")?)
        .await?;
    // Both turns have ended: the position after them is what their own expiry leaves valid.
    let (_, after_turns) = s.history("loose").await?;

    let posted_at = now_ms()?;
    let switched = switch_branch(&s, "loose", &v1.message_id).await?;
    assert_eq!(cursor_seq(&switched)?, cursor_seq(&after_turns)? + 1);
    let (chosen, _) = s.history("loose").await?;
    let contents: Vec<&str> = chosen.messages.iter().map(|m| m.content.as_str()).collect();
    assert_eq!(contents, ["/echo v1", "v1"]);

    // Until it expires, a stream from just before it is served; it expires once retention has
    // passed since it was journaled, and not sooner (`posted_at` is no later than its time).
    let expired_at = wait_for(|| async {
        match resync_on_open(&s, "loose", &after_turns).await? {
            None => Ok(None),
            Some(r) if r == "expired" => Ok(Some(now_ms()?)),
            Some(r) => Err(format!("resync reason {r}, expected expired").into()),
        }
    })
    .await?;
    assert!(
        expired_at > posted_at + RETENTION_MS,
        "the event outside a turn expired {} ms after it was journaled, before the {RETENTION_MS} ms of retention",
        expired_at - posted_at
    );

    // The floor is the event itself: its own position stays valid and serves what follows.
    let (unchanged, _) = s.history("loose").await?;
    assert_eq!(
        unchanged.messages, chosen.messages,
        "retention changed history"
    );
    assert_eq!(unchanged.leaf_id, chosen.leaf_id);
    let mut st = s
        .stream(&format!("session=loose&cursor={switched}"), None)
        .await?;
    let next = s.send("loose", "/echo after").await?;
    let events = st.until_turn_ended(&next.turn_id).await?;
    assert_eq!(
        events.first().map(|e| e.body.kind()),
        Some("message_received")
    );
    assert_eq!(reply_text(&events, &next.turn_id), "after");
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Crash recovery: the repair-only branch
// ---------------------------------------------------------------------------------------------

/// Puts a finished turn's row back to `running`, as a crash between journaling its
/// `turn_ended` and updating the turns table would leave it (the server writes both in one
/// transaction; a journal from another version, or a partial failure, may not have). Its lease,
/// if any, is cleared: recovery at start looks at the turns no lease holds (a leased turn ends
/// when its lease runs out instead).
fn turns_row_behind(s: &TestServer, turn: &str) -> TestResult {
    turns_row_behind_with(
        s,
        turn,
        "lease_token = NULL, lease_owner = NULL, lease_expires_at = NULL",
    )
}

/// As [`turns_row_behind`], the row left holding `lease`: the columns of a lease, as a turn run
/// under one (a worker's, or a server's on a shared journal) leaves them.
fn turns_row_behind_with(s: &TestServer, turn: &str, lease: &str) -> TestResult {
    let undo = format!(
        "UPDATE turns SET state = 'running', ended_at = NULL, ended_seq = NULL, error = NULL,
                message_id = NULL, {lease}"
    );
    match s.database_url() {
        Some(url) => {
            if !turn.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
                return Err(format!("unexpected turn id {turn:?}").into());
            }
            let n = pg::sql(
                url,
                &format!(
                    "SET search_path TO turnstream; {undo} WHERE turn_id = '{turn}' RETURNING 1"
                ),
            )?;
            assert_eq!(n, "1", "one row put back");
        }
        None => {
            let c = rusqlite::Connection::open(s.db_path())?;
            let n = c.execute(&format!("{undo} WHERE turn_id = ?1"), [turn])?;
            assert_eq!(n, 1, "one row put back");
        }
    }
    Ok(())
}

/// A turn whose `turn_ended` is journaled but whose row still says `running`: the next start
/// repairs the row from that event and journals nothing; the turn, history, the journal and
/// the snapshot all say what they said before.
#[tokio::test]
async fn recovery_only_repairs_a_turn_whose_end_is_journaled() -> TestResult {
    let mut s = TestServer::start(&[])?;
    let sent = s.send("rp", "/echo ended once").await?;
    let ended = s.wait_turn_end(&sent.turn_id).await?;
    assert_eq!(ended.state, TurnState::Completed);
    let (history, head) = s.history("rp").await?;
    let journal = s.replay_session("rp").await?;
    let end = endings(&journal, &sent.turn_id);
    assert_eq!(end.len(), 1);
    let before_end = format!("{}-{}", epoch_of(&head)?, seq(end[0]) - 1);
    let as_of_before_end = snapshot(&s, "rp", Some(&before_end)).await?;
    assert_eq!(as_of_before_end.active_turns.len(), 1);

    s.kill9()?;
    turns_row_behind(&s, &sent.turn_id)?;
    s.restart(None)?;

    assert_eq!(
        s.turn(&sent.turn_id).await?,
        ended,
        "the turn as it was before"
    );
    let (history_after, head_after) = s.history("rp").await?;
    assert_eq!(head_after, head, "recovery journaled something");
    assert_eq!(history_after.messages, history.messages);
    let journal_after = s.replay_session("rp").await?;
    assert_eq!(endings(&journal_after, &sent.turn_id).len(), 1);
    assert_eq!(journal_after, journal);
    // The repaired row ends the turn where its event does: active just before it, not at the head.
    assert_eq!(
        snapshot(&s, "rp", Some(&before_end)).await?,
        as_of_before_end
    );
    let now = snapshot(&s, "rp", None).await?;
    assert_eq!(now.cursor, head);
    assert!(now.active_turns.is_empty(), "{:?}", now.active_turns);

    // The session goes on.
    let next = s.send("rp", "/echo next").await?;
    let info = s.wait_turn_end(&next.turn_id).await?;
    assert_eq!(
        (info.state, info.text.as_str()),
        (TurnState::Completed, "next")
    );
    let all = s.replay_session("rp").await?;
    assert_eq!(endings(&all, &sent.turn_id).len(), 1);
    assert_eq!(endings(&all, &next.turn_id).len(), 1);
    Ok(())
}

/// The same row behind its journal, still holding a lease that ran out (as a leased turn leaves
/// it): the lease's end repairs the row from its `turn_ended` instead of ending the turn again
/// (which wrote a second reply and failed its commit on every sweep).
#[tokio::test]
async fn a_leased_turn_whose_end_is_journaled_is_repaired_not_ended_again() -> TestResult {
    let mut s = TestServer::start(&[])?;
    let sent = s.send("rl", "/echo ended under a lease").await?;
    let ended = s.wait_turn_end(&sent.turn_id).await?;
    let (history, head) = s.history("rl").await?;

    s.kill9()?;
    turns_row_behind_with(
        &s,
        &sent.turn_id,
        "lease_token = 'lse_gone', lease_owner = 'gone', lease_expires_at = 1",
    )?;
    s.restart(None)?;

    // The lease ran out long ago: the restarted server (or, on a shared journal, its sweep)
    // settles the turn; it must come back as it ended, not interrupted and not twice.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let info = s.turn(&sent.turn_id).await?;
        if info.state.is_terminal() {
            assert_eq!(info, ended, "the turn as it was before");
            break;
        }
        if std::time::Instant::now() > deadline {
            return Err(format!("the turn stayed {:?}", info.state).into());
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let (history_after, head_after) = s.history("rl").await?;
    assert_eq!(head_after, head, "the lease's end journaled something");
    assert_eq!(history_after.messages, history.messages);
    let next = s.send("rl", "/echo next").await?;
    let info = s.wait_turn_end(&next.turn_id).await?;
    assert_eq!(
        (info.state, info.text.as_str()),
        (TurnState::Completed, "next")
    );
    assert_eq!(
        endings(&s.replay_session("rl").await?, &sent.turn_id).len(),
        1
    );
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Session clear while a turn waits for input
// ---------------------------------------------------------------------------------------------

/// `DELETE /realtime` while a turn waits: the finished turn's events and the one outside any
/// turn go; the waiting turn's stay (a stream from the floor replays them), its approval is
/// still open and shown, and once answered it ends once, in full.
#[tokio::test]
async fn clearing_a_session_keeps_a_turn_that_waits_for_input() -> TestResult {
    let s = TestServer::start(&[])?;
    let (_, c0) = s.history("cw").await?;
    let first = s.send("cw", "/echo one").await?;
    s.wait_turn_end(&first.turn_id).await?;
    let switched = switch_branch(&s, "cw", &first.message_id).await?;
    let finished = s.replay_session("cw").await?;
    assert_eq!(
        finished.last().map(|e| e.id.as_str()),
        Some(switched.as_str())
    );

    let asks = s.send("cw", "/approve wipe").await?;
    let waiting = until_waiting(&s, &asks.turn_id).await?;
    let request = waiting.requests[0].request_id.clone();
    // What the waiting turn journaled so far.
    let mut st = s
        .stream(&format!("session=cw&cursor={switched}"), None)
        .await?;
    let mut asked = Vec::new();
    while !asked
        .iter()
        .any(|e: &Event| matches!(e.body, EventBody::InputRequested(_)))
    {
        asked.push(st.next_event().await?);
    }
    drop(st);

    let deleted = clear_realtime(&s, "cw").await?;
    assert_eq!(
        deleted,
        finished.len() as u64,
        "the finished turn's events and the branch switch, nothing of the waiting turn"
    );
    let still = s.turn(&asks.turn_id).await?;
    assert_eq!(still.state, TurnState::Waiting);
    assert_eq!(still.requests, waiting.requests);

    // Positions before the switch are gone; the switch's own (the floor) replays the waiting turn.
    let before_switch = format!("{}-{}", epoch_of(&c0)?, cursor_seq(&switched)? - 1);
    for old in [c0.as_str(), before_switch.as_str()] {
        if s.node_count() > 1 {
            // Another node's replay tail hears of the raised floor by notification, just after.
            wait_for(|| async {
                let r = resync_on_open(&s, "cw", old).await?;
                Ok((r.as_deref() == Some("expired")).then_some(()))
            })
            .await?;
        } else {
            let r = resync_on_open(&s, "cw", old).await?;
            assert_eq!(r.as_deref(), Some("expired"), "cursor {old}");
        }
    }
    let mut from_floor = s
        .stream(&format!("session=cw&cursor={switched}"), None)
        .await?;
    let mut replayed = Vec::new();
    for _ in 0..asked.len() {
        replayed.push(from_floor.next_event().await?);
    }
    assert_eq!(replayed, asked, "the waiting turn's events after the clear");

    // A page loaded now shows the open approval.
    let snap = snapshot(&s, "cw", None).await?;
    assert_eq!(snap.active_turns.len(), 1, "{:?}", snap.active_turns);
    let active = &snap.active_turns[0];
    assert_eq!(
        (active.turn_id.as_str(), active.state),
        (asks.turn_id.as_str(), TurnState::Waiting)
    );
    assert_eq!(active.requests, waiting.requests);

    approve(&s, &asks.turn_id, &request).await?;
    let rest = from_floor.until_turn_ended(&asks.turn_id).await?;
    assert_eq!(reply_text(&rest, &asks.turn_id), "Approved: wipe");
    let mut whole = replayed;
    whole.extend(rest);
    assert_eq!(endings(&whole, &asks.turn_id).len(), 1);
    let done = s.wait_turn_end(&asks.turn_id).await?;
    assert_eq!(done.state, TurnState::Completed);
    let (history, _) = s.history("cw").await?;
    let contents: Vec<&str> = history
        .messages
        .iter()
        .map(|m| m.content.as_str())
        .collect();
    assert_eq!(
        contents,
        ["/echo one", "one", "/approve wipe", "Approved: wipe"]
    );
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// An open approval in the snapshot, also after a restart
// ---------------------------------------------------------------------------------------------

/// The one active turn of `snap`, which must wait on one open approval for `action`.
fn open_approval<'a>(snap: &'a Snapshot, turn: &str, action: &str) -> TestResult<&'a ActiveTurn> {
    let [active] = snap.active_turns.as_slice() else {
        return Err(format!("expected one active turn: {:?}", snap.active_turns).into());
    };
    assert_eq!(active.turn_id, turn);
    assert_eq!(active.state, TurnState::Waiting);
    let [request] = active.requests.as_slice() else {
        return Err(format!("expected one request: {:?}", active.requests).into());
    };
    assert_eq!(request.kind, RequestKind::Approval);
    assert!(request.is_open(), "{request:?}");
    assert_eq!(request.answered_by, None);
    assert!(request.expires_at.is_some());
    let tool = request.tool.as_ref().ok_or("an approval names its tool")?;
    assert_eq!(
        (tool.call_id.as_str(), tool.name.as_str()),
        ("call_demo_action", "demo_action")
    );
    assert_eq!(tool.input.to_value(), json!({ "action": action }));
    Ok(active)
}

/// A snapshot shows a turn's open approval (from the head, and from a history cursor), and
/// after a kill -9 and a restart it shows the same; answered, the turn continues once.
#[tokio::test]
async fn an_open_approval_is_in_the_snapshot_also_after_a_restart() -> TestResult {
    let mut s = TestServer::start(&[])?;
    let sent = s.send("ap", "/approve ship v2").await?;
    let waiting = until_waiting(&s, &sent.turn_id).await?;
    let (_, cursor) = s.history("ap").await?;
    let live = snapshot(&s, "ap", None).await?;
    let active = open_approval(&live, &sent.turn_id, "ship v2")?;
    assert_eq!(
        active.requests, waiting.requests,
        "the snapshot and the turn agree"
    );
    assert_eq!(active.parent_id.as_deref(), Some(sent.message_id.as_str()));
    assert_eq!(active.reply_id, waiting.reply_id);
    assert_eq!(snapshot(&s, "ap", Some(&cursor)).await?, live);

    s.kill9()?;
    s.restart(None)?;
    // The same snapshot, from the journal alone: nothing was interrupted or journaled.
    let cold = snapshot(&s, "ap", None).await?;
    assert_eq!(cold, live, "the snapshot after the restart");
    let (_, cursor_after) = s.history("ap").await?;
    assert_eq!(cursor_after, cursor);

    let mut st = s
        .stream(
            &format!("session=ap&cursor={cursor_after}&snapshot=1"),
            None,
        )
        .await?;
    open_approval(&st.snapshot().await?, &sent.turn_id, "ship v2")?;
    approve(&s, &sent.turn_id, &waiting.requests[0].request_id).await?;
    let events = st.until_turn_ended(&sent.turn_id).await?;
    assert_eq!(
        events.first().map(|e| e.body.kind()),
        Some("input_given"),
        "the answer is the first thing after the snapshot"
    );
    assert_eq!(reply_text(&events, &sent.turn_id), "Approved: ship v2");
    assert_eq!(endings(&events, &sent.turn_id).len(), 1);
    let done = s.wait_turn_end(&sent.turn_id).await?;
    let message = done.message.ok_or("no reply")?;
    assert_eq!(
        (message.content.as_str(), message.status),
        ("Approved: ship v2", MessageStatus::Complete)
    );
    assert!(snapshot(&s, "ap", None).await?.active_turns.is_empty());
    Ok(())
}
