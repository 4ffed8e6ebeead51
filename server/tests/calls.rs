//! Agent-to-agent calls (contract v1.3) against the real binary, on SQLite and on the PostgreSQL
//! passes (one node, three behind the proxy): a worker's `call` event opens a request of kind
//! `agent_call` and a child turn of the named agent in one transaction; whatever ends the child
//! answers the caller in the transaction of that end, with no stream open; a cancel cascades;
//! cycles, depth and bad targets are refused with nothing written; a retried batch opens no
//! second child; a crash or a dead node loses no answer; and the demo agent's `/call`.

mod support;

use serde_json::{json, Value};
use support::worker_api::*;
use support::*;
use turnstream_protocol::{CallAnswer, Event, EventBody, RequestKind, TurnInfo, TurnState};

/// A worker's `{"type": "call", ...}` event.
fn call_event(request_id: &str, agent: &str, session: &str, content: &str) -> Value {
    json!({"type": "call", "request_id": request_id, "agent": agent, "session_id": session,
           "content": content})
}

fn response(d: &str) -> Value {
    json!({"type": "response", "delta": d})
}

/// Posts `content` for agent `agent` in `session`: the new turn's id.
async fn post_for(api: &Api, session: &str, content: &str, agent: &str) -> TestResult<String> {
    let (status, body) = api
        .post_json(
            &format!("/api/sessions/{session}/messages"),
            &json!({"content": content, "agent": agent}),
        )
        .await?;
    if status != 202 {
        return Err(format!("POST answered {status}: {body}").into());
    }
    Ok(body["turn_id"].as_str().ok_or("no turn_id")?.to_string())
}

/// The answer recorded on call `request_id` of `turn`, once there is one.
async fn until_answered(api: &Api, turn: &str, request_id: &str) -> TestResult<CallAnswer> {
    wait_for(|| async {
        let t = api.turn(turn).await?;
        let Some(r) = t.requests.iter().find(|r| r.request_id == request_id) else {
            return Ok(None);
        };
        match &r.answer {
            None => Ok(None),
            Some(a) => Ok(Some(serde_json::from_str(a.as_str())?)),
        }
    })
    .await
}

/// Waits until `turn` is in `state`.
async fn until_state(api: &Api, turn: &str, state: TurnState) -> TestResult<TurnInfo> {
    wait_for(|| async {
        let t = api.turn(turn).await?;
        Ok((t.state == state).then_some(t))
    })
    .await
}

/// The child turn id a call of `turn` names.
async fn child_of(api: &Api, turn: &str, request_id: &str) -> TestResult<String> {
    let t = api.turn(turn).await?;
    let r = t
        .requests
        .iter()
        .find(|r| r.request_id == request_id)
        .ok_or("no such request")?;
    assert_eq!(r.kind, RequestKind::AgentCall);
    Ok(r.call
        .as_ref()
        .ok_or("a call without `call`")?
        .turn_id
        .clone())
}

/// Every event of `session` so far, read through the stream from the journal's start up to a
/// marker message posted now (the journal holds other sessions' events after this one's last,
/// so the head is no end to read to).
async fn journal_of(api: &Api, session: &str) -> TestResult<Vec<Event>> {
    let marker = api.send(session, "/echo marker").await?;
    let epoch = epoch_of(&marker.event_id)?;
    // The key is ignored by a server without auth.
    let mut stream = api
        .stream(
            &format!("session={session}&cursor={epoch}-0&access_token={SERVICE_KEY}"),
            None,
        )
        .await?;
    let mut out = Vec::new();
    loop {
        let e = stream.next_event().await?;
        if e.id == marker.event_id {
            return Ok(out);
        }
        out.push(e);
    }
}

fn count(events: &[Event], turn: &str, kind: &str) -> usize {
    events
        .iter()
        .filter(|e| e.turn_id.as_deref() == Some(turn) && e.body.kind() == kind)
        .count()
}

fn reply(t: &TurnInfo) -> &str {
    t.message.as_ref().map_or("", |m| m.content.as_str())
}

/// A target that ends before its caller's worker even sends `wait`: the answer is there when the
/// wait comes (it answers `running`), and the continuation carries it. No stream is open at any
/// moment; the claim's `agents` filter hands each worker its own agent's turns.
#[tokio::test]
async fn a_fast_child_answers_before_the_callers_wait() -> TestResult {
    let s = worker_server(&[])?;
    let caller_turn = s.send("p1", "plan a trip").await?.turn_id;
    // A researcher claims nothing: the only turn is the default agent's.
    assert!(claim_of(&s, "researcher", Some(&["researcher"]), 0)
        .await?
        .is_none());
    let caller = claim_one_of(&s, "planner", Some(&["default"])).await?;
    assert_eq!(caller.turn, caller_turn);
    assert_eq!(caller.claim["agent"], "default");
    assert!(caller.claim.get("called_by").is_none());
    let (st, ack) = caller
        .events(
            &s,
            0,
            json!([
                response("Asking. "),
                call_event("c1", "researcher", "r1", "find flights")
            ]),
        )
        .await?;
    assert_eq!(st, 200, "{ack}");
    let t = s.turn(&caller_turn).await?;
    let call = t.requests[0].call.clone().ok_or("no call")?;
    assert_eq!(
        (call.agent.as_str(), call.session_id.as_str()),
        ("researcher", "r1")
    );

    let child = claim_one_of(&s, "researcher", Some(&["researcher"])).await?;
    assert_eq!(
        child.turn, call.turn_id,
        "the ids drawn when the call opened"
    );
    assert_eq!(child.claim["agent"], "researcher");
    assert_eq!(
        child.claim["called_by"],
        json!({"turn_id": caller_turn, "session_id": "p1", "request_id": "c1"})
    );
    let message = &child.claim["user_message"];
    assert_eq!(message["message_id"], call.message_id.as_str());
    assert_eq!(
        (&message["role"], &message["author"], &message["content"]),
        (
            &json!("user"),
            &json!("agent:default"),
            &json!("find flights")
        )
    );
    assert_eq!(message["called_by"]["turn_id"], caller_turn.as_str());
    let status = s.turn(&child.turn).await?;
    assert_eq!(status.agent.as_deref(), Some("researcher"));
    assert_eq!(
        status.called_by.as_ref().map(|c| c.request_id.as_str()),
        Some("c1")
    );
    assert_eq!(
        child
            .events(&s, 0, json!([response("Three flights.")]))
            .await?
            .0,
        200
    );
    assert_eq!(child.end(&s, "complete", 1).await?.0, 200);

    // The answer is in before the caller waits.
    let answer = until_answered(&s, &caller_turn, "c1").await?;
    assert_eq!(
        answer,
        CallAnswer {
            turn_id: child.turn.clone(),
            state: TurnState::Completed,
            text: "Three flights.".into(),
            error: None
        }
    );
    let t = s.turn(&caller_turn).await?;
    assert_eq!(
        t.requests[0].answered_by.as_deref(),
        Some(format!("turn:{}", child.turn).as_str())
    );
    let (st, ack) = caller.end(&s, "wait", 1).await?;
    assert_eq!((st, &ack["state"]), (200, &json!("running")), "{ack}");
    let again = claim_one_of(&s, "planner", Some(&["default"])).await?;
    assert_eq!(again.turn, caller_turn);
    let answers = &again.claim["continuation"]["answers"];
    assert_eq!(answers[0]["request_id"], "c1");
    assert_eq!(answers[0]["by"], format!("turn:{}", child.turn).as_str());
    assert_eq!(answers[0]["answer"]["text"], "Three flights.");
    assert_eq!(again.claim["continuation"]["seq"], 2);
    assert_eq!(
        again.events(&s, 2, json!([response("Booked.")])).await?.0,
        200
    );
    assert_eq!(again.end(&s, "complete", 3).await?.0, 200);
    let done = s.wait_turn_end(&caller_turn).await?;
    assert_eq!(
        (done.state, reply(&done)),
        (TurnState::Completed, "Asking. Booked.")
    );

    // Both sessions' journals say it all, each once: the call (data `kind` agent_call) and its
    // answer in the caller's, the child's message and turn (with its agent) in the target's.
    let caller_events = journal_of(&s, "p1").await?;
    let asked: Vec<_> = caller_events
        .iter()
        .filter_map(|e| match &e.body {
            EventBody::InputRequested(r) => Some(r),
            _ => None,
        })
        .collect();
    assert_eq!(asked.len(), 1);
    assert_eq!(asked[0].kind, RequestKind::AgentCall);
    assert_eq!(asked[0].call.as_ref(), Some(&call));
    assert_eq!(count(&caller_events, &caller_turn, "input_given"), 1);
    assert_eq!(count(&caller_events, &caller_turn, "turn_ended"), 1);
    let child_events = journal_of(&s, "r1").await?;
    let queued = child_events
        .iter()
        .find_map(|e| match &e.body {
            EventBody::TurnQueued { agent, .. } => Some(agent.clone()),
            _ => None,
        })
        .ok_or("no turn_queued")?;
    assert_eq!(queued.as_deref(), Some("researcher"));
    let received = child_events
        .iter()
        .find_map(|e| match &e.body {
            EventBody::MessageReceived { message } => Some(message.clone()),
            _ => None,
        })
        .ok_or("no message_received")?;
    assert_eq!(received.author.as_deref(), Some("agent:default"));
    assert_eq!(
        received.called_by.as_ref().map(|c| c.session_id.as_str()),
        Some("p1")
    );
    // History keeps who called.
    let (history, _) = s.history("r1").await?;
    assert_eq!(
        history.messages[0]
            .called_by
            .as_ref()
            .map(|c| c.turn_id.as_str()),
        Some(caller_turn.as_str())
    );
    Ok(())
}

/// Opens call `c1` of a new caller in `session` into `target`, waits, and claims the child.
async fn waiting_call(
    s: &TestServer,
    session: &str,
    target: &str,
) -> TestResult<(String, ClaimedTurn)> {
    let caller_turn = s.send(session, "go").await?.turn_id;
    let caller = claim_one_of(s, "planner", Some(&["default"])).await?;
    assert_eq!(caller.turn, caller_turn);
    let (st, body) = caller
        .events(
            s,
            0,
            json!([call_event("c1", "researcher", target, "work")]),
        )
        .await?;
    assert_eq!(st, 200, "{body}");
    let (st, ack) = caller.end(s, "wait", 1).await?;
    assert_eq!((st, &ack["state"]), (200, &json!("waiting")), "{ack}");
    let child = claim_one_of(s, "researcher", Some(&["researcher"])).await?;
    Ok((caller_turn, child))
}

/// Each way the child ends reaches its waiting caller: failed (with its error), cancelled, and
/// interrupted by a lease that ran out.
#[tokio::test]
async fn each_end_of_the_child_reaches_the_caller() -> TestResult {
    let s = worker_server(&["--worker-lease-secs", "1"])?;

    let (caller, child) = waiting_call(&s, "f1", "f2").await?;
    child.events(&s, 0, json!([response("half")])).await?;
    assert_eq!(child.fail(&s, 1, "no network").await?.0, 200);
    let a = until_answered(&s, &caller, "c1").await?;
    assert_eq!(
        (a.state, a.text.as_str(), a.error.as_deref()),
        (TurnState::Failed, "half", Some("no network"))
    );
    // Answered, the caller is a continuation, shown running.
    until_state(&s, &caller, TurnState::Running).await?;
    let cont = claim_one_of(&s, "planner", Some(&["default"])).await?;
    assert_eq!(cont.turn, caller);
    assert_eq!(cont.end(&s, "complete", 2).await?.0, 200);

    let (caller, child) = waiting_call(&s, "k1", "k2").await?;
    child.events(&s, 0, json!([response("started")])).await?;
    let (st, _) = s.cancel(&child.turn).await?;
    assert_eq!(st, 200);
    let a = until_answered(&s, &caller, "c1").await?;
    assert_eq!(
        (a.state, a.text.as_str()),
        (TurnState::Cancelled, "started")
    );
    let cont = claim_one_of(&s, "planner", Some(&["default"])).await?;
    assert_eq!(cont.turn, caller);
    assert_eq!(cont.end(&s, "complete", 2).await?.0, 200);

    // The child's worker goes silent: its lease runs out and the sweep ends it.
    let (caller, child) = waiting_call(&s, "i1", "i2").await?;
    child.events(&s, 0, json!([response("gone")])).await?;
    let a = until_answered(&s, &caller, "c1").await?;
    assert_eq!((a.state, a.text.as_str()), (TurnState::Interrupted, "gone"));
    let events = journal_of(&s, "i2").await?;
    assert_eq!(count(&events, &child.turn, "turn_ended"), 1);
    Ok(())
}

/// Cancelling a caller cancels its call's child, and that child's child: each ends once,
/// `cancelled`.
#[tokio::test]
async fn a_cancel_cascades_down_two_levels() -> TestResult {
    let s = worker_server(&[])?;
    let top = s.send("top", "go").await?.turn_id;
    let a = claim_one_of(&s, "w", Some(&["default"])).await?;
    a.events(&s, 0, json!([call_event("c1", "mid", "mid1", "down")]))
        .await?;
    assert_eq!(a.end(&s, "wait", 1).await?.0, 200);
    let b = claim_one_of(&s, "w", Some(&["mid"])).await?;
    let (st, body) = b
        .events(&s, 0, json!([call_event("c2", "leaf", "leaf1", "further")]))
        .await?;
    assert_eq!(st, 200, "{body}");
    assert_eq!(b.end(&s, "wait", 1).await?.0, 200);
    let c = claim_one_of(&s, "w", Some(&["leaf"])).await?;
    c.events(&s, 0, json!([response("digging")])).await?;

    let (st, body) = s.cancel(&top).await?;
    assert_eq!((st, &body["state"]), (200, &json!("cancelled")), "{body}");
    for (session, turn) in [("top", &top), ("mid1", &b.turn), ("leaf1", &c.turn)] {
        let t = s.wait_turn_end(turn).await?;
        assert_eq!(t.state, TurnState::Cancelled, "{session}");
        let events = journal_of(&s, session).await?;
        assert_eq!(count(&events, turn, "turn_ended"), 1, "{session}");
    }
    // The leaf's worker learns it from its next request.
    let (st, body) = c.end(&s, "complete", 1).await?;
    assert_eq!((st, code(&body)), (409, "turn_cancelled"));
    Ok(())
}

/// Three calls in one batch: the caller waits until all three are answered, then continues
/// with the three answers.
#[tokio::test]
async fn a_fan_out_of_three_calls_waits_for_all() -> TestResult {
    let s = worker_server(&[])?;
    let caller_turn = s.send("fan", "compare").await?.turn_id;
    let caller = claim_one_of(&s, "planner", Some(&["default"])).await?;
    let (st, body) = caller
        .events(
            &s,
            0,
            json!([
                call_event("a", "researcher", "fa", "one"),
                call_event("b", "researcher", "fb", "two"),
                call_event("c", "researcher", "fc", "three"),
            ]),
        )
        .await?;
    assert_eq!(st, 200, "{body}");
    assert_eq!(caller.end(&s, "wait", 1).await?.1["state"], "waiting");
    for i in 0..3 {
        let child = claim_one_of(&s, "researcher", Some(&["researcher"])).await?;
        let text = child.claim["user_message"]["content"]
            .as_str()
            .unwrap_or("")
            .to_string();
        child.events(&s, 0, json!([response(&text)])).await?;
        child.end(&s, "complete", 1).await?;
        let state = s.turn(&caller_turn).await?.state;
        if i < 2 {
            assert_eq!(state, TurnState::Waiting, "after {} answers", i + 1);
        }
    }
    until_state(&s, &caller_turn, TurnState::Running).await?;
    let cont = claim_one_of(&s, "planner", Some(&["default"])).await?;
    let answers = cont.claim["continuation"]["answers"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let mut texts: Vec<String> = answers
        .iter()
        .map(|a| a["answer"]["text"].as_str().unwrap_or("").to_string())
        .collect();
    texts.sort();
    assert_eq!(texts, ["one", "three", "two"]);
    Ok(())
}

/// Calls into the caller's own chain, too deep, or at a bad target are refused with the whole
/// batch: nothing is appended, and the same `seq` is taken afterwards.
#[tokio::test]
async fn cycles_depth_and_bad_targets_are_refused() -> TestResult {
    let s = worker_server(&[])?;
    let top = s.send("ch0", "go").await?.turn_id;
    let caller = claim_one_of(&s, "w", Some(&["default"])).await?;
    assert_eq!(caller.turn, top);
    let refused = |body: Value, status: u16, want: &str| {
        assert_eq!((status, code(&body)), (409, want), "{body}");
    };
    let (st, body) = caller
        .events(
            &s,
            0,
            json!([response("lost"), call_event("c", "x", "ch0", "me")]),
        )
        .await?;
    refused(body, st, "call_cycle");
    for (agent, session) in [("", "t"), ("Bad", "t"), ("ok", ""), ("ok", "a b")] {
        let (st, body) = caller
            .events(&s, 0, json!([call_event("c", agent, session, "x")]))
            .await?;
        assert_eq!(
            (st, code(&body)),
            (422, "invalid_body"),
            "{agent:?} {session:?}"
        );
    }
    let (st, body) = caller
        .events(&s, 0, json!([call_event("c", "ok", "t", "  ")]))
        .await?;
    assert_eq!((st, code(&body)), (422, "invalid_body"), "{body}");
    assert!(s.turn(&top).await?.requests.is_empty(), "nothing written");
    assert_eq!(s.turn(&top).await?.text, "");

    // A chain ch0 -> ch1 -> ... -> ch8 (eight calls) is allowed; a call into ch1 from ch2 is
    // a cycle (A -> B -> A); a ninth call is too deep.
    let mut current = caller;
    for depth in 1..=8 {
        let agent = format!("l{depth}");
        let (st, body) = current
            .events(
                &s,
                0,
                json!([call_event("c", &agent, &format!("ch{depth}"), "deeper")]),
            )
            .await?;
        assert_eq!(st, 200, "depth {depth}: {body}");
        assert_eq!(current.end(&s, "wait", 1).await?.0, 200);
        current = claim_one_of(&s, "w", Some(&[agent.as_str()])).await?;
        if depth == 2 {
            let (st, body) = current
                .events(&s, 0, json!([call_event("back", "l1", "ch1", "again")]))
                .await?;
            refused(body, st, "call_cycle");
            let (st, body) = current
                .events(&s, 0, json!([call_event("back", "l1", "ch0", "again")]))
                .await?;
            refused(body, st, "call_cycle");
        }
    }
    let (st, body) = current
        .events(&s, 0, json!([call_event("c", "l9", "ch9", "too deep")]))
        .await?;
    refused(body, st, "call_depth_exceeded");
    // The refused batch took nothing: seq 0 is still free, and the deepest turn may answer.
    assert_eq!(
        current.events(&s, 0, json!([response("bottom")])).await?.0,
        200
    );
    assert_eq!(current.end(&s, "complete", 1).await?.0, 200);
    let a = until_answered(&s, &child_parent(&s, &current.turn).await?, "c").await?;
    assert_eq!(a.text, "bottom");
    Ok(())
}

/// The caller of a called turn.
async fn child_parent(api: &Api, turn: &str) -> TestResult<String> {
    Ok(api
        .turn(turn)
        .await?
        .called_by
        .ok_or("not a called turn")?
        .turn_id)
}

/// A batch retried with the same `seq` opens no second child.
#[tokio::test]
async fn a_retried_batch_opens_no_second_child() -> TestResult {
    let s = worker_server(&[])?;
    let caller_turn = s.send("rt1", "go").await?.turn_id;
    let caller = claim_one_of(&s, "w", Some(&["default"])).await?;
    let batch = json!([call_event("c1", "researcher", "rt2", "once")]);
    for _ in 0..2 {
        let (st, ack) = caller.events(&s, 0, batch.clone()).await?;
        assert_eq!((st, &ack["acked_seq"]), (200, &json!(0)), "{ack}");
    }
    let child = child_of(&s, &caller_turn, "c1").await?;
    let events = journal_of(&s, "rt2").await?;
    let queued: Vec<_> = events
        .iter()
        .filter(|e| e.body.kind() == "turn_queued")
        .collect();
    assert_eq!(queued.len(), 1);
    assert_eq!(queued[0].turn_id.as_deref(), Some(child.as_str()));
    assert_eq!(s.turn(&caller_turn).await?.requests.len(), 1);
    Ok(())
}

/// The demo agent's `/call`: the answer, another end, a refusal; `agent` on messages, the turn
/// status and the snapshot's active turns; a bad agent name.
#[tokio::test]
async fn the_demo_agent_calls_and_replies_with_the_answer() -> TestResult {
    let s = TestServer::start(&[])?;
    let sent = s.send("s1", "/call researcher s2 /echo hello").await?;
    let done = s.wait_turn_end(&sent.turn_id).await?;
    assert_eq!(
        (done.state, reply(&done)),
        (TurnState::Completed, "researcher answered: hello")
    );
    let (history, _) = s.history("s2").await?;
    let texts: Vec<_> = history
        .messages
        .iter()
        .map(|m| (m.author.clone(), m.content.clone()))
        .collect();
    assert_eq!(
        texts,
        [
            (Some("agent:default".to_string()), "/echo hello".to_string()),
            (None, "hello".to_string())
        ]
    );
    let child = history.messages[0].turn_id.clone().ok_or("no turn")?;
    assert_eq!(s.turn(&child).await?.agent.as_deref(), Some("researcher"));
    // The caller's reply keeps the call and its answer.
    let call = &done.message.as_ref().ok_or("no message")?.requests[0];
    assert_eq!(
        (call.request_id.as_str(), call.kind),
        ("demo_call", RequestKind::AgentCall)
    );

    let sent = s.send("s1", "/call critic s3 /fail boom").await?;
    let done = s.wait_turn_end(&sent.turn_id).await?;
    assert_eq!(
        reply(&done),
        "critic ended failed: Starting a reply that will not finish"
    );
    let sent = s.send("s1", "/call critic s1 hi").await?;
    assert_eq!(
        reply(&s.wait_turn_end(&sent.turn_id).await?),
        "critic refused: call_cycle"
    );

    // `agent` on a posted message: the turn status and a snapshot say it.
    let turn = post_for(&s, "s4", "/sleep 3000 late", "researcher").await?;
    let mut stream = s.stream("session=s4&snapshot=1", None).await?;
    let snap = stream.snapshot().await?;
    let active = snap
        .active_turns
        .iter()
        .find(|t| t.turn_id == turn)
        .ok_or("not active")?;
    assert_eq!(active.agent.as_deref(), Some("researcher"));
    assert_eq!(s.turn(&turn).await?.agent.as_deref(), Some("researcher"));
    let plain = s.send("s5", "/echo x").await?.turn_id;
    assert_eq!(s.turn(&plain).await?.agent.as_deref(), Some("default"));
    for bad in ["", "Researcher", "a b", &"x".repeat(65)] {
        let (st, body) = s
            .post_json(
                "/api/sessions/s6/messages",
                &json!({"content": "hi", "agent": bad}),
            )
            .await?;
        assert_eq!((st, code(&body)), (422, "invalid_body"), "{bad:?}");
    }
    Ok(())
}

/// `kill -9` while the child runs: after the restart the child ends `interrupted` once, and its
/// caller is answered and continues once.
#[tokio::test]
async fn kill9_while_the_child_runs_answers_the_caller_once() -> TestResult {
    let mut s = TestServer::start(&["--worker-lease-secs", "1"])?;
    let sent = s
        .send("k1", "/call researcher k2 /sleep 60000 never")
        .await?;
    let child = wait_for(|| async {
        let t = s.turn(&sent.turn_id).await?;
        Ok(t.requests.first().and_then(|r| r.call.clone()))
    })
    .await?
    .turn_id;
    until_state(&s, &child, TurnState::Running).await?;
    s.kill9()?;
    s.restart(None)?;
    let done = s.wait_turn_end(&sent.turn_id).await?;
    assert_eq!(
        (done.state, reply(&done)),
        (TurnState::Completed, "researcher ended interrupted: ")
    );
    assert_eq!(s.turn(&child).await?.state, TurnState::Interrupted);
    let child_events = journal_of(&s, "k2").await?;
    assert_eq!(count(&child_events, &child, "turn_ended"), 1);
    let caller_events = journal_of(&s, "k1").await?;
    assert_eq!(count(&caller_events, &sent.turn_id, "input_given"), 1);
    assert_eq!(count(&caller_events, &sent.turn_id, "turn_ended"), 1);
    Ok(())
}

/// The caller's worker works through one node, the child's through another; the caller's node
/// is killed while it waits: the answer still comes and the caller continues elsewhere.
#[tokio::test]
async fn a_caller_waiting_on_a_dead_node_is_answered_and_continues_on_another() -> TestResult {
    if support::pg::admin_url().is_none() {
        return Ok(());
    }
    let mut s = worker_nodes(Some(2), &[])?;
    let (one, two) = (s.node(0), s.node(1));
    let caller_turn = one.send("n1", "go").await?.turn_id;
    let caller = claim_one_of(&one, "planner", Some(&["default"])).await?;
    let (st, body) = caller
        .events(
            &one,
            0,
            json!([call_event("c1", "researcher", "n2", "far")]),
        )
        .await?;
    assert_eq!(st, 200, "{body}");
    assert_eq!(caller.end(&one, "wait", 1).await?.0, 200);
    s.kill9_node(0)?;
    let child = claim_one_of(&two, "researcher", Some(&["researcher"])).await?;
    child.events(&two, 0, json!([response("near")])).await?;
    assert_eq!(child.end(&two, "complete", 1).await?.0, 200);
    let cont = claim_one_of(&two, "planner", Some(&["default"])).await?;
    assert_eq!(cont.turn, caller_turn);
    assert_eq!(
        cont.claim["continuation"]["answers"][0]["answer"]["text"],
        "near"
    );
    assert_eq!(cont.end(&two, "complete", 2).await?.0, 200);
    assert_eq!(
        two.wait_turn_end(&caller_turn).await?.state,
        TurnState::Completed
    );
    Ok(())
}
