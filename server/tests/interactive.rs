//! Agents that ask (contract v1.2) against the real binary, on SQLite and on the PostgreSQL
//! passes: the demo agent's `/approve`, `/ask` and `/clienttool` wait durably for an answer given
//! with `POST /api/turns/{turn}/input` (first answer wins), through restarts, `kill -9`, cancel,
//! expiry, `on_busy` and the worker API's `wait` and continuation.

mod support;

use serde_json::{json, Value};
use support::*;
use turnstream_protocol::{EventBody, RequestKind, TurnInfo, TurnState};

async fn answer(api: &Api, turn: &str, body: Value) -> TestResult<(u16, Value)> {
    api.post_json(&format!("/api/turns/{turn}/input"), &body)
        .await
}

async fn post_with(api: &Api, session: &str, body: Value) -> TestResult<(u16, Value)> {
    api.post_json(&format!("/api/sessions/{session}/messages"), &body)
        .await
}

/// Waits until the turn waits for input with one request open, and returns it.
async fn until_waiting(api: &Api, turn: &str) -> TestResult<TurnInfo> {
    wait_for(|| async {
        let t = api.turn(turn).await?;
        Ok((t.state == TurnState::Waiting && t.requests.iter().any(|r| r.is_open())).then_some(t))
    })
    .await
}

fn reply(t: &TurnInfo) -> &str {
    t.message.as_ref().map_or("", |m| m.content.as_str())
}

#[tokio::test]
async fn an_approval_waits_then_continues_with_the_answer() -> TestResult {
    let s = TestServer::start(&[])?;
    let mut stream = s.stream("session=a1&snapshot=1", None).await?;
    stream.snapshot().await?;
    let sent = s.send("a1", "/approve deploy prod").await?;
    let t = until_waiting(&s, &sent.turn_id).await?;
    let request = &t.requests[0];
    assert_eq!(request.kind, RequestKind::Approval);
    let tool = request.tool.as_ref().ok_or("no tool")?;
    assert_eq!(tool.name, "demo_action");
    assert_eq!(tool.input.as_str(), r#"{"action":"deploy prod"}"#);
    assert!(
        request.expires_at.is_some(),
        "the server fills in expires_at"
    );
    let (status, body) = answer(
        &s,
        &sent.turn_id,
        json!({"request_id": request.request_id, "approved": true}),
    )
    .await?;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["state"], "running");
    let done = s.wait_turn_end(&sent.turn_id).await?;
    assert_eq!(done.state, TurnState::Completed);
    assert_eq!(reply(&done), "Approved: deploy prod");
    // The stream says it all, each event once: the request (whose data `kind` is the request's
    // kind), the answer, and the reply.
    let events = stream.until_turn_ended(&sent.turn_id).await?;
    let asked: Vec<_> = events
        .iter()
        .filter(|e| matches!(e.body, EventBody::InputRequested(_)))
        .collect();
    let given: Vec<_> = events
        .iter()
        .filter_map(|e| match &e.body {
            EventBody::InputGiven(g) => Some(g),
            _ => None,
        })
        .collect();
    assert_eq!((asked.len(), given.len()), (1, 1));
    assert_eq!(given[0].answer.as_str(), r#"{"approved":true}"#);
    assert_eq!(given[0].by, None);
    assert_eq!(reply_text(&events, &sent.turn_id), "Approved: deploy prod");
    // The raw frame: `event: input_requested`, data `kind` "approval".
    let (_, page) = s.get_json(&format!("/api/turns/{}", sent.turn_id)).await?;
    assert_eq!(page["requests"][0]["kind"], "approval");
    assert_eq!(page["requests"][0]["answer"]["approved"], true);
    // The reply keeps its requests and their answers, in its event and in history alike.
    let ended = events
        .iter()
        .find_map(|e| match &e.body {
            EventBody::TurnEnded {
                message: Some(m), ..
            } => Some(m.clone()),
            _ => None,
        })
        .ok_or("no turn_ended")?;
    assert_eq!(ended.requests.len(), 1);
    assert_eq!(
        ended.requests[0].answer.as_ref().map(|a| a.as_str()),
        Some(r#"{"approved":true}"#)
    );
    let (history, _) = s.history("a1").await?;
    assert_eq!(history.messages.last(), Some(&ended));
    Ok(())
}

#[tokio::test]
async fn questions_and_client_tools_are_answered_by_their_own_fields() -> TestResult {
    let s = TestServer::start(&[])?;
    let q = s.send("q1", "/ask which file?").await?;
    let t = until_waiting(&s, &q.turn_id).await?;
    assert_eq!(t.requests[0].prompt.as_deref(), Some("which file?"));
    let id = t.requests[0].request_id.clone();
    // The wrong field, or none, is refused and answers nothing.
    for bad in [
        json!({"request_id": id, "approved": true}),
        json!({"request_id": id}),
        json!({"request_id": id, "text": "a", "output": 1}),
    ] {
        let (status, body) = answer(&s, &q.turn_id, bad).await?;
        assert_eq!(
            (status, &body["error"]["code"]),
            (400, &json!("invalid_input"))
        );
    }
    let (status, body) = answer(&s, &q.turn_id, json!({"request_id": "nope", "text": "a"})).await?;
    assert_eq!(
        (status, &body["error"]["code"]),
        (404, &json!("request_not_found"))
    );
    let (status, body) = answer(&s, "turn_missing", json!({"request_id": id, "text": "a"})).await?;
    assert_eq!(
        (status, &body["error"]["code"]),
        (404, &json!("turn_not_found"))
    );
    let (status, _) = answer(&s, &q.turn_id, json!({"request_id": id, "text": "b.txt"})).await?;
    assert_eq!(status, 200);
    assert_eq!(
        reply(&s.wait_turn_end(&q.turn_id).await?),
        "You answered: b.txt"
    );

    let c = s.send("q1", "/clienttool get_location").await?;
    let t = until_waiting(&s, &c.turn_id).await?;
    let r = &t.requests[0];
    assert_eq!(r.kind, RequestKind::ClientTool);
    assert_eq!(
        r.tool.as_ref().map(|t| t.name.as_str()),
        Some("get_location")
    );
    let body =
        r#"{"request_id": "REQ", "output": {"lon": 2.5, "lat": -1}}"#.replace("REQ", &r.request_id);
    let res = s
        .http
        .post(format!("{}/api/turns/{}/input", s.url, c.turn_id))
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await?;
    assert_eq!(res.status(), 200);
    assert_eq!(
        reply(&s.wait_turn_end(&c.turn_id).await?),
        r#"The tool returned: {"lon":2.5,"lat":-1}"#
    );

    let f = s.send("q1", "/clienttool camera").await?;
    let t = until_waiting(&s, &f.turn_id).await?;
    let id = t.requests[0].request_id.clone();
    let (status, _) = answer(&s, &f.turn_id, json!({"request_id": id, "error": "denied"})).await?;
    assert_eq!(status, 200);
    assert_eq!(
        reply(&s.wait_turn_end(&f.turn_id).await?),
        "The tool failed: denied"
    );
    // The request was answered: another answer is refused, with the first one.
    let (status, body) = answer(&s, &f.turn_id, json!({"request_id": id, "error": "x"})).await?;
    assert_eq!(
        (status, &body["error"]["code"]),
        (409, &json!("input_already_given"))
    );
    Ok(())
}

#[tokio::test]
async fn two_racing_answers_one_wins_and_a_retry_is_harmless() -> TestResult {
    let s = TestServer::start(&[])?;
    let sent = s.send("r1", "/approve ship it").await?;
    let t = until_waiting(&s, &sent.turn_id).await?;
    let id = t.requests[0].request_id.clone();
    let yes = json!({"request_id": id, "approved": true});
    let no = json!({"request_id": id, "approved": false, "reason": "not today"});
    let (a, b) = tokio::join!(
        answer(&s, &sent.turn_id, yes.clone()),
        answer(&s, &sent.turn_id, no.clone())
    );
    let (a, b) = (a?, b?);
    let (winner, loser, won) = match (a.0, b.0) {
        (200, 409) => (a, b, &yes),
        (409, 200) => (b, a, &no),
        other => return Err(format!("expected one 200 and one 409, got {other:?}").into()),
    };
    assert_eq!(loser.1["error"]["code"], "input_already_given");
    assert_eq!(loser.1["answer"]["approved"], won["approved"]);
    assert_eq!(winner.1["request_id"], json!(id));
    // The same answer again (a retry) is accepted and changes nothing.
    let (status, _) = answer(&s, &sent.turn_id, won.clone()).await?;
    assert_eq!(status, 200);
    let done = s.wait_turn_end(&sent.turn_id).await?;
    let expected = if won == &yes {
        "Approved: ship it"
    } else {
        "Denied: ship it (not today)"
    };
    assert_eq!(reply(&done), expected);
    let given = done.requests.iter().filter(|r| r.answer.is_some()).count();
    assert_eq!(given, 1);
    Ok(())
}

#[tokio::test]
async fn a_waiting_turn_survives_a_restart_then_continues() -> TestResult {
    let mut s = TestServer::start(&[])?;
    let sent = s.send("w1", "/ask colour?").await?;
    let id = until_waiting(&s, &sent.turn_id).await?.requests[0]
        .request_id
        .clone();
    s.restart(None)?;
    // Still waiting (not interrupted: nothing was running), the request still open.
    let t = until_waiting(&s, &sent.turn_id).await?;
    assert_eq!(t.requests[0].request_id, id);
    let (status, _) = answer(&s, &sent.turn_id, json!({"request_id": id, "text": "teal"})).await?;
    assert_eq!(status, 200);
    let done = s.wait_turn_end(&sent.turn_id).await?;
    assert_eq!(
        (done.state, reply(&done)),
        (TurnState::Completed, "You answered: teal")
    );
    Ok(())
}

#[tokio::test]
async fn kill9_right_after_an_acknowledged_answer_still_continues_once() -> TestResult {
    // Slow words: the continuation writes nothing before the kill. (On PostgreSQL the restarted
    // server is another node: the dead one's lease, 2 s here, runs out first.)
    let mut s = TestServer::start(&["--demo-delay-ms", "400", "--worker-lease-secs", "2"])?;
    let sent = s.send("k1", "/approve restart db").await?;
    let id = until_waiting(&s, &sent.turn_id).await?.requests[0]
        .request_id
        .clone();
    let (status, _) = answer(
        &s,
        &sent.turn_id,
        json!({"request_id": id, "approved": true}),
    )
    .await?;
    assert_eq!(status, 200);
    s.kill9()?;
    s.restart(Some(&["--demo-delay-ms", "2"]))?;
    let done = s.wait_turn_end(&sent.turn_id).await?;
    assert_eq!(
        (done.state, reply(&done)),
        (TurnState::Completed, "Approved: restart db")
    );
    let (history, cursor) = s.history("k1").await?;
    let _ = cursor;
    let replies = history
        .messages
        .iter()
        .filter(|m| m.turn_id.as_deref() == Some(sent.turn_id.as_str()))
        .count();
    assert_eq!(replies, 2, "the user message and one reply");
    Ok(())
}

#[tokio::test]
async fn cancel_ends_a_waiting_turn_and_closes_its_requests() -> TestResult {
    let s = TestServer::start(&[])?;
    let sent = s.send("c1", "/approve drop table").await?;
    let id = until_waiting(&s, &sent.turn_id).await?.requests[0]
        .request_id
        .clone();
    let (status, body) = s.cancel(&sent.turn_id).await?;
    assert_eq!((status, &body["state"]), (200, &json!("cancelled")));
    let (status, body) = answer(
        &s,
        &sent.turn_id,
        json!({"request_id": id, "approved": true}),
    )
    .await?;
    assert_eq!(
        (status, &body["error"]["code"]),
        (409, &json!("turn_ended"))
    );
    // The session goes on.
    let next = s.send("c1", "/echo after").await?;
    assert_eq!(reply(&s.wait_turn_end(&next.turn_id).await?), "after");
    Ok(())
}

#[tokio::test]
async fn an_unanswered_request_times_out_and_the_agent_says_so() -> TestResult {
    let s = TestServer::start(&["--input-timeout-secs", "1"])?;
    let mut stream = s.stream("session=e1&snapshot=1", None).await?;
    stream.snapshot().await?;
    let sent = s.send("e1", "/approve late").await?;
    let done = s.wait_turn_end(&sent.turn_id).await?;
    assert_eq!(reply(&done), "Timed out: late");
    let events = stream.until_turn_ended(&sent.turn_id).await?;
    let given: Vec<_> = events
        .iter()
        .filter_map(|e| match &e.body {
            EventBody::InputGiven(g) => Some(g),
            _ => None,
        })
        .collect();
    assert_eq!(given.len(), 1);
    assert_eq!(given[0].answer.as_str(), r#"{"timed_out":true}"#);
    assert_eq!(given[0].by, None);
    Ok(())
}

#[tokio::test]
async fn on_busy_enqueues_rejects_or_interrupts() -> TestResult {
    let s = TestServer::start(&[])?;
    let first = s.send("b1", "/approve one").await?;
    until_waiting(&s, &first.turn_id).await?;
    // reject: refused while a turn waits.
    let (status, body) =
        post_with(&s, "b1", json!({"content": "/echo x", "on_busy": "reject"})).await?;
    assert_eq!(
        (status, &body["error"]["code"]),
        (409, &json!("session_busy"))
    );
    // enqueue (the default): queued behind the waiting turn, FIFO.
    let (status, queued) = post_with(
        &s,
        "b1",
        json!({"content": "/echo two", "on_busy": "enqueue"}),
    )
    .await?;
    assert_eq!(status, 202);
    let queued_turn = queued["turn_id"].as_str().ok_or("turn_id")?.to_string();
    assert_eq!(s.turn(&queued_turn).await?.state, TurnState::Queued);
    assert_eq!(s.turn(&first.turn_id).await?.state, TurnState::Waiting);
    // interrupt: the turns in flight end as by cancel; the new one runs next.
    let (status, body) = post_with(
        &s,
        "b1",
        json!({"content": "/echo three", "on_busy": "interrupt"}),
    )
    .await?;
    assert_eq!(status, 202, "{body}");
    let third = body["turn_id"].as_str().ok_or("turn_id")?.to_string();
    assert_eq!(reply(&s.wait_turn_end(&third).await?), "three");
    assert_eq!(s.turn(&first.turn_id).await?.state, TurnState::Cancelled);
    assert_eq!(s.turn(&queued_turn).await?.state, TurnState::Cancelled);
    // An unknown value is refused.
    let (status, _) = post_with(&s, "b1", json!({"content": "x", "on_busy": "sometimes"})).await?;
    assert!((400..500).contains(&status));
    Ok(())
}

#[tokio::test]
async fn a_waiting_turn_holds_no_slot() -> TestResult {
    let s = TestServer::start(&["--max-concurrent-turns", "1"])?;
    let waiting = s.send("s1", "/approve hold").await?;
    until_waiting(&s, &waiting.turn_id).await?;
    let other = s.send("s2", "/echo runs meanwhile").await?;
    let done = s.wait_turn_end(&other.turn_id).await?;
    assert_eq!(reply(&done), "runs meanwhile");
    assert_eq!(s.turn(&waiting.turn_id).await?.state, TurnState::Waiting);
    Ok(())
}

/// On PostgreSQL only: the node that ran the turn dies while it waits; the answer is given on
/// another node, which continues the turn.
#[tokio::test]
async fn a_turn_waiting_on_a_dead_node_is_answered_on_another() -> TestResult {
    if support::pg::admin_url().is_none() {
        return Ok(());
    }
    let mut s = TestServer::start_nodes(2, &[])?;
    let sent = s.node(0).send("n1", "/ask node?").await?;
    let id = until_waiting(&s.node(0), &sent.turn_id).await?.requests[0]
        .request_id
        .clone();
    s.kill9_node(0)?;
    let other = s.node(1);
    let (status, _) = answer(
        &other,
        &sent.turn_id,
        json!({"request_id": id, "text": "two"}),
    )
    .await?;
    assert_eq!(status, 200);
    let done = other.wait_turn_end(&sent.turn_id).await?;
    assert_eq!(
        (done.state, reply(&done)),
        (TurnState::Completed, "You answered: two")
    );
    Ok(())
}
