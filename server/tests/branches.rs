//! Conversations that branch (contract v1.2) against the real binary, on SQLite and on the
//! PostgreSQL passes: edits (`parent_id`) and regenerations keep every version as a sibling,
//! the agent sees only its branch (the demo agent's `/context`), switching moves the active leaf
//! for everyone (`branch_changed`), and history shows any branch with each message's siblings.

mod support;

use serde_json::{json, Value};
use support::*;
use turnstream_protocol::{EventBody, HistoryResponse, Message, MessageStatus, Role, TurnState};

async fn post_json(api: &Api, path: &str, body: Value) -> TestResult<(u16, Value)> {
    api.post_json(path, &body).await
}

/// Posts `content` after `parent` (`Value::Null`: as a first message) and waits for its reply.
async fn edit(api: &Api, session: &str, parent: Value, content: &str) -> TestResult<String> {
    let (status, body) = post_json(
        api,
        &format!("/api/sessions/{session}/messages"),
        json!({"content": content, "parent_id": parent}),
    )
    .await?;
    if status != 202 {
        return Err(format!("edit answered {status}: {body}").into());
    }
    let turn = body["turn_id"].as_str().ok_or("turn_id")?.to_string();
    api.wait_turn_end(&turn).await?;
    Ok(turn)
}

async fn regenerate(api: &Api, message: &str) -> TestResult<String> {
    let (status, body) = post_json(
        api,
        &format!("/api/messages/{message}/regenerate"),
        json!({}),
    )
    .await?;
    if status != 202 {
        return Err(format!("regenerate answered {status}: {body}").into());
    }
    assert_eq!(body["event_id"], body["cursor"]);
    Ok(body["turn_id"].as_str().ok_or("turn_id")?.to_string())
}

async fn ask(api: &Api, session: &str, content: &str) -> TestResult<String> {
    let sent = api.send(session, content).await?;
    let done = api.wait_turn_end(&sent.turn_id).await?;
    Ok(done.message.map(|m| m.content).unwrap_or_default())
}

async fn branch(api: &Api, session: &str, leaf: Option<&str>) -> TestResult<HistoryResponse> {
    let path = match leaf {
        Some(l) => format!("/api/sessions/{session}/history?leaf={l}"),
        None => format!("/api/sessions/{session}/history"),
    };
    let (status, body) = api.get_json(&path).await?;
    if status != 200 {
        return Err(format!("history answered {status}: {body}").into());
    }
    Ok(serde_json::from_value(body)?)
}

fn contents(h: &HistoryResponse) -> Vec<&str> {
    h.messages.iter().map(|m| m.content.as_str()).collect()
}

/// A message's place among its siblings; none said: the only version.
fn place(m: &Message) -> (u32, u32) {
    m.siblings.as_ref().map_or((0, 1), |s| {
        assert!(s.count > 1, "siblings are said only when there are some");
        (s.index, s.count)
    })
}

/// Each message follows the one before it: a linear branch.
fn assert_linear(h: &HistoryResponse) {
    let mut parent: Option<&str> = None;
    for m in &h.messages {
        assert_eq!(m.parent_id.as_deref(), parent, "{}", m.content);
        parent = Some(&m.message_id);
    }
}

#[tokio::test]
async fn edits_and_regenerations_keep_every_version_and_the_agent_sees_its_branch() -> TestResult {
    let s = TestServer::start(&[])?;
    assert_eq!(ask(&s, "t1", "/echo one").await?, "one");
    assert_eq!(
        ask(&s, "t1", "/context").await?,
        "user: /echo one\nassistant: one\nuser: /context"
    );
    let h = branch(&s, "t1", None).await?;
    assert_eq!(
        contents(&h),
        [
            "/echo one",
            "one",
            "/context",
            "user: /echo one\nassistant: one\nuser: /context"
        ]
    );
    assert_linear(&h);
    assert!(h.messages.iter().all(|m| place(m) == (0, 1)));
    let (u1, a1, u2, a2) = (
        h.messages[0].message_id.clone(),
        h.messages[1].message_id.clone(),
        h.messages[2].message_id.clone(),
        h.messages[3].message_id.clone(),
    );
    assert_eq!(h.leaf_id.as_deref(), Some(a2.as_str()));

    // Regenerate the last reply (named by the reply or by its user message alike).
    let t = regenerate(&s, &a2).await?;
    assert_eq!(s.wait_turn_end(&t).await?.state, TurnState::Completed);
    let h = branch(&s, "t1", None).await?;
    assert_eq!(h.messages.len(), 4);
    assert_ne!(h.messages[3].message_id, a2);
    assert_eq!(place(&h.messages[3]), (1, 2));
    assert_eq!(h.messages[3].parent_id.as_deref(), Some(u2.as_str()));
    let t = regenerate(&s, &u2).await?;
    s.wait_turn_end(&t).await?;
    let h = branch(&s, "t1", None).await?;
    assert_eq!(place(&h.messages[3]), (2, 3));
    // The first version is one request away, and says where it stands.
    let old = branch(&s, "t1", Some(&a2)).await?;
    assert_eq!(old.messages[3].message_id, a2);
    assert_eq!(place(&old.messages[3]), (0, 3));
    let ids = &old.messages[3].siblings.as_ref().ok_or("siblings")?.ids;
    assert_eq!(ids.len(), 3);
    assert_eq!(ids[0], a2);

    // Edit the second user message: a sibling of it, and the agent sees only the new branch.
    edit(&s, "t1", json!(a1), "/echo edited").await?;
    assert_eq!(
        ask(&s, "t1", "/context").await?,
        "user: /echo one\nassistant: one\nuser: /echo edited\nassistant: edited\nuser: /context"
    );
    let h = branch(&s, "t1", None).await?;
    assert_eq!(
        contents(&h)[..4],
        ["/echo one", "one", "/echo edited", "edited"]
    );
    assert_eq!(place(&h.messages[2]), (1, 2));
    assert_linear(&h);

    // Edit the first message: a new root.
    edit(&s, "t1", Value::Null, "/echo again").await?;
    let h = branch(&s, "t1", None).await?;
    assert_eq!(contents(&h), ["/echo again", "again"]);
    assert_eq!(place(&h.messages[0]), (1, 2));
    assert_eq!(
        ask(&s, "t1", "/context").await?,
        "user: /echo again\nassistant: again\nuser: /context"
    );

    // Switch back to the first root: the newest leaf below it becomes active.
    let (status, body) = post_json(&s, "/api/sessions/t1/active", json!({"leaf_id": u1})).await?;
    assert_eq!(status, 200, "{body}");
    let h = branch(&s, "t1", None).await?;
    assert_eq!(body["leaf_id"].as_str(), h.leaf_id.as_deref());
    assert_eq!(contents(&h)[..3], ["/echo one", "one", "/echo edited"]);
    assert_eq!(
        h.messages.len(),
        6,
        "the newest descendants, down to a leaf"
    );
    assert_linear(&h);
    // A new message continues the active branch.
    assert!(ask(&s, "t1", "/context")
        .await?
        .starts_with("user: /echo one\nassistant: one\nuser: /echo edited"));
    Ok(())
}

#[tokio::test]
async fn unknown_messages_are_refused() -> TestResult {
    let s = TestServer::start(&[])?;
    ask(&s, "u1", "/echo a").await?;
    let (status, body) = post_json(
        &s,
        "/api/sessions/u1/messages",
        json!({"content": "x", "parent_id": "msg_nope"}),
    )
    .await?;
    assert_eq!(
        (status, &body["error"]["code"]),
        (404, &json!("message_not_found"))
    );
    // A message of another session is not in this one.
    ask(&s, "u2", "/echo b").await?;
    let other = branch(&s, "u2", None).await?.messages[0].message_id.clone();
    let (status, body) = post_json(
        &s,
        "/api/sessions/u1/messages",
        json!({"content": "x", "parent_id": other}),
    )
    .await?;
    assert_eq!(
        (status, &body["error"]["code"]),
        (404, &json!("message_not_found"))
    );
    let (status, body) = post_json(&s, "/api/messages/msg_nope/regenerate", json!({})).await?;
    assert_eq!(
        (status, &body["error"]["code"]),
        (404, &json!("message_not_found"))
    );
    let (status, body) =
        post_json(&s, "/api/sessions/u1/active", json!({"leaf_id": other})).await?;
    assert_eq!(
        (status, &body["error"]["code"]),
        (404, &json!("message_not_found"))
    );
    let (status, body) = s.get_json("/api/sessions/u1/history?leaf=a%20b").await?;
    assert_eq!(
        (status, &body["error"]["code"]),
        (400, &json!("invalid_leaf"))
    );
    let (status, body) = post_json(
        &s,
        "/api/sessions/u1/messages",
        json!({"content": "x", "parent_id": "a b"}),
    )
    .await?;
    assert_eq!(
        (status, &body["error"]["code"]),
        (400, &json!("invalid_parent_id"))
    );
    let (status, body) =
        post_json(&s, "/api/sessions/u1/active", json!({"leaf_id": "a b"})).await?;
    assert_eq!(
        (status, &body["error"]["code"]),
        (400, &json!("invalid_leaf_id"))
    );
    Ok(())
}

#[tokio::test]
async fn a_regeneration_waits_behind_a_running_turn() -> TestResult {
    let s = TestServer::start(&[])?;
    ask(&s, "q1", "/echo a").await?;
    let a1 = branch(&s, "q1", None).await?.messages[1].message_id.clone();
    let slow = s.send("q1", "/sleep 800 b").await?;
    wait_for(|| async {
        Ok((s.turn(&slow.turn_id).await?.state == TurnState::Running).then_some(()))
    })
    .await?;
    let regen = regenerate(&s, &a1).await?;
    assert_eq!(
        s.turn(&regen).await?.state,
        TurnState::Queued,
        "FIFO: behind the running turn"
    );
    let first = s.wait_turn_end(&slow.turn_id).await?;
    let again = s.wait_turn_end(&regen).await?;
    assert!(again.started_at >= first.ended_at);
    assert_eq!(again.message.map(|m| m.content).as_deref(), Some("a"));
    let h = branch(&s, "q1", None).await?;
    assert_eq!(contents(&h), ["/echo a", "a"]);
    assert_eq!(place(&h.messages[1]), (1, 2));
    Ok(())
}

#[tokio::test]
async fn a_crash_during_a_regeneration_interrupts_it_once_and_leaves_the_other_versions(
) -> TestResult {
    // On PostgreSQL the restarted server is another node: the dead one's lease (2 s) runs out.
    let mut s = TestServer::start(&["--worker-lease-secs", "2"])?;
    ask(&s, "k1", "/deltas 50").await?;
    let h = branch(&s, "k1", None).await?;
    let first = h.messages[1].clone();
    s.restart(Some(&[
        "--demo-delay-ms",
        "100",
        "--worker-lease-secs",
        "2",
    ]))?;
    let regen = regenerate(&s, &first.message_id).await?;
    wait_for(|| async { Ok((!s.turn(&regen).await?.text.is_empty()).then_some(())) }).await?;
    s.kill9()?;
    s.restart(Some(&["--demo-delay-ms", "2", "--worker-lease-secs", "2"]))?;
    let ended = s.wait_turn_end(&regen).await?;
    assert_eq!(ended.state, TurnState::Interrupted);
    let h = branch(&s, "k1", None).await?;
    let regenerated = &h.messages[1];
    assert_eq!(regenerated.status, MessageStatus::Interrupted);
    assert_eq!(place(regenerated), (1, 2));
    let old = branch(&s, "k1", Some(&first.message_id)).await?;
    assert_eq!(old.messages[1].content, first.content);
    assert_eq!(old.messages[1].status, MessageStatus::Complete);
    // Exactly one end for the regenerated turn.
    let mut stream = s
        .stream("session=k1&snapshot=1", Some(&h.messages[0].event_id))
        .await?;
    let events = stream.until_turn_ended(&regen).await?;
    let ends = events
        .iter()
        .filter(|e| {
            e.turn_id.as_deref() == Some(regen.as_str())
                && matches!(e.body, EventBody::TurnEnded { .. })
        })
        .count();
    assert_eq!(ends, 1);
    Ok(())
}

#[tokio::test]
async fn a_switch_reaches_every_stream_and_survives_a_resume() -> TestResult {
    let s = TestServer::start(&[])?;
    ask(&s, "s1", "/echo v1").await?;
    let h = branch(&s, "s1", None).await?;
    let u1 = h.messages[0].message_id.clone();
    edit(&s, "s1", Value::Null, "/echo v2").await?;
    let mut stream = s.stream("session=s1&snapshot=1", None).await?;
    let snapshot = stream.snapshot().await?;
    let (status, body) = post_json(&s, "/api/sessions/s1/active", json!({"leaf_id": u1})).await?;
    assert_eq!(status, 200);
    let e = stream.next_event().await?;
    let EventBody::BranchChanged { leaf_id } = &e.body else {
        return Err(format!("expected branch_changed, got {e:?}").into());
    };
    assert_eq!(Some(leaf_id.as_str()), body["leaf_id"].as_str());
    assert_eq!(e.id, body["event_id"].as_str().unwrap_or_default());
    // A client that was away resumes from before the switch and gets it.
    let mut resumed = s.stream("session=s1", Some(&snapshot.cursor)).await?;
    let again = resumed.next_event().await?;
    assert!(
        matches!(again.body, EventBody::BranchChanged { .. }),
        "{again:?}"
    );
    assert_eq!(contents(&branch(&s, "s1", None).await?), ["/echo v1", "v1"]);
    Ok(())
}

#[tokio::test]
async fn a_v1_client_sees_the_active_branch_as_a_linear_history() -> TestResult {
    let s = TestServer::start(&[])?;
    ask(&s, "l1", "/echo a").await?;
    ask(&s, "l1", "/echo b").await?;
    let h = branch(&s, "l1", None).await?;
    let t = regenerate(&s, &h.messages[3].message_id).await?;
    s.wait_turn_end(&t).await?;
    edit(&s, "l1", json!(h.messages[1].message_id), "/echo c").await?;
    // What a v1 client reads: the active branch, oldest first, one reply after each question.
    let (v1, _) = s.history("l1").await?;
    let roles: Vec<Role> = v1.messages.iter().map(|m| m.role).collect();
    assert_eq!(
        roles,
        [Role::User, Role::Assistant, Role::User, Role::Assistant]
    );
    assert_eq!(
        v1.messages
            .iter()
            .map(|m| m.content.as_str())
            .collect::<Vec<_>>(),
        ["/echo a", "a", "/echo c", "c"]
    );
    assert_linear(&v1);
    // Paging with `before` walks the branch.
    let (status, body) = s
        .get_json(&format!(
            "/api/sessions/l1/history?limit=2&before={}",
            v1.messages[2].message_id
        ))
        .await?;
    assert_eq!(status, 200);
    let page: HistoryResponse = serde_json::from_value(body)?;
    assert_eq!(contents(&page), ["/echo a", "a"]);
    assert!(!page.has_more);
    let (_, body) = s.get_json("/api/sessions/l1/history?limit=2").await?;
    let page: HistoryResponse = serde_json::from_value(body)?;
    assert_eq!(contents(&page), ["/echo c", "c"]);
    assert!(page.has_more);
    Ok(())
}

/// `POST /regenerate` with a body: the status and the answer.
async fn regenerate_with(api: &Api, message: &str, body: Value) -> TestResult<(u16, Value)> {
    post_json(api, &format!("/api/messages/{message}/regenerate"), body).await
}

/// The journal's head as history reports it: it moves with every event journaled.
async fn head(api: &Api, session: &str) -> TestResult<String> {
    Ok(api.history(session).await?.1)
}

fn code(body: &Value) -> &Value {
    &body["error"]["code"]
}

#[tokio::test]
async fn a_retried_regeneration_answers_the_first_turn_and_starts_nothing() -> TestResult {
    let s = TestServer::start(&[])?;
    ask(&s, "i1", "/echo a").await?;
    let h = branch(&s, "i1", None).await?;
    let (u1, a1) = (
        h.messages[0].message_id.clone(),
        h.messages[1].message_id.clone(),
    );
    let (status, first) = regenerate_with(&s, &a1, json!({"client_request_id": "regen-1"})).await?;
    assert_eq!(status, 202, "{first}");
    let turn = first["turn_id"].as_str().ok_or("turn_id")?.to_string();
    // A retry while the turn runs, then once it ended: the first answer, field for field.
    let (status, again) = regenerate_with(&s, &a1, json!({"client_request_id": "regen-1"})).await?;
    assert_eq!((status, &again), (200, &first));
    assert_eq!(s.wait_turn_end(&turn).await?.state, TurnState::Completed);
    let before = head(&s, "i1").await?;
    let (status, again) = regenerate_with(&s, &a1, json!({"client_request_id": "regen-1"})).await?;
    assert_eq!((status, &again), (200, &first));
    // Naming the same user message (rather than its reply) is the same request.
    let (status, again) = regenerate_with(&s, &u1, json!({"client_request_id": "regen-1"})).await?;
    assert_eq!((status, &again), (200, &first));
    assert_eq!(head(&s, "i1").await?, before, "a retry journals nothing");
    let h = branch(&s, "i1", None).await?;
    assert_eq!(contents(&h), ["/echo a", "a"]);
    assert_eq!(place(&h.messages[1]), (1, 2), "exactly two versions");
    assert_eq!(h.messages[1].turn_id.as_deref(), Some(turn.as_str()));

    // The id on another message of the session: refused, in the stable shape.
    ask(&s, "i1", "/echo b").await?;
    let u2 = branch(&s, "i1", None).await?.messages[2].message_id.clone();
    let before = head(&s, "i1").await?;
    let (status, body) = regenerate_with(&s, &u2, json!({"client_request_id": "regen-1"})).await?;
    assert_eq!(
        (status, code(&body)),
        (409, &json!("client_request_id_conflict"))
    );
    assert!(body["error"]["message"].is_string(), "{body}");
    assert_eq!(head(&s, "i1").await?, before, "a conflict journals nothing");
    // Another session's ids are its own.
    ask(&s, "i2", "/echo c").await?;
    let c1 = branch(&s, "i2", None).await?.messages[1].message_id.clone();
    let (status, other) = regenerate_with(&s, &c1, json!({"client_request_id": "regen-1"})).await?;
    assert_eq!(status, 202, "{other}");
    assert_ne!(other["turn_id"], first["turn_id"]);
    s.wait_turn_end(other["turn_id"].as_str().ok_or("turn_id")?)
        .await?;

    // Malformed ids and bodies.
    let long = "r".repeat(129);
    for bad in ["", "a b", "é", long.as_str()] {
        let (status, body) = regenerate_with(&s, &a1, json!({"client_request_id": bad})).await?;
        assert_eq!(
            (status, code(&body)),
            (400, &json!("invalid_client_request_id")),
            "{bad:?}"
        );
    }
    let (status, body) = regenerate_with(&s, &a1, json!({"client_request_id": 7})).await?;
    assert_eq!((status, code(&body)), (422, &json!("invalid_body")));
    let ok = "r".repeat(128);
    let (status, body) = regenerate_with(&s, &a1, json!({"client_request_id": ok})).await?;
    assert_eq!(status, 202, "{body}");
    s.wait_turn_end(body["turn_id"].as_str().ok_or("turn_id")?)
        .await?;
    Ok(())
}

#[tokio::test]
async fn concurrent_retries_of_a_regeneration_make_one_turn() -> TestResult {
    let s = TestServer::start(&[])?;
    ask(&s, "c1", "/echo a").await?;
    let a1 = branch(&s, "c1", None).await?.messages[1].message_id.clone();
    // On several nodes, each request reaches another one.
    let answers = futures::future::join_all((0..8).map(|_| {
        regenerate_with(
            &s,
            &a1,
            json!({"client_request_id": "same", "on_busy": "enqueue"}),
        )
    }))
    .await
    .into_iter()
    .collect::<TestResult<Vec<_>>>()?;
    let created = answers.iter().filter(|(status, _)| *status == 202).count();
    assert_eq!(created, 1, "{answers:?}");
    assert!(
        answers
            .iter()
            .all(|(status, _)| *status == 200 || *status == 202),
        "{answers:?}"
    );
    let first = &answers[0].1;
    assert!(answers.iter().all(|(_, body)| body == first), "{answers:?}");
    s.wait_turn_end(first["turn_id"].as_str().ok_or("turn_id")?)
        .await?;
    let h = branch(&s, "c1", None).await?;
    assert_eq!(place(&h.messages[1]), (1, 2), "one new version");
    Ok(())
}

#[tokio::test]
async fn a_refused_regeneration_records_nothing_and_a_retry_runs_once_idle() -> TestResult {
    let s = TestServer::start(&[])?;
    ask(&s, "b1", "/echo a").await?;
    let a1 = branch(&s, "b1", None).await?.messages[1].message_id.clone();
    // A turn waiting for input keeps the session busy until it is cancelled.
    let hold = s.send("b1", "/approve hold").await?;
    let reject = json!({"client_request_id": "again", "on_busy": "reject"});
    let (status, body) = regenerate_with(&s, &a1, reject.clone()).await?;
    assert_eq!((status, code(&body)), (409, &json!("session_busy")));
    assert_eq!(s.cancel(&hold.turn_id).await?.0, 200);
    s.wait_turn_end(&hold.turn_id).await?;
    let (status, first) = regenerate_with(&s, &a1, reject.clone()).await?;
    assert_eq!(status, 202, "the refused attempt recorded nothing: {first}");
    let regen = first["turn_id"].as_str().ok_or("turn_id")?.to_string();
    assert_eq!(s.wait_turn_end(&regen).await?.state, TurnState::Completed);
    // Busy again: a retry of the accepted request is still its answer (checked before busy).
    let hold = s.send("b1", "/approve hold").await?;
    let (status, again) = regenerate_with(&s, &a1, reject).await?;
    assert_eq!((status, &again), (200, &first));

    // `interrupt`: the first request ends the turn in flight; its retry interrupts nothing.
    let now = json!({"client_request_id": "now", "on_busy": "interrupt"});
    let (status, first) = regenerate_with(&s, &a1, now.clone()).await?;
    assert_eq!(status, 202, "{first}");
    assert_eq!(
        s.wait_turn_end(&hold.turn_id).await?.state,
        TurnState::Cancelled
    );
    let regen = first["turn_id"].as_str().ok_or("turn_id")?.to_string();
    assert_eq!(s.wait_turn_end(&regen).await?.state, TurnState::Completed);
    let hold = s.send("b1", "/approve keep").await?;
    wait_for(|| async {
        Ok((s.turn(&hold.turn_id).await?.state == TurnState::Waiting).then_some(()))
    })
    .await?;
    let (status, again) = regenerate_with(&s, &a1, now).await?;
    assert_eq!((status, &again), (200, &first));
    assert_eq!(s.turn(&hold.turn_id).await?.state, TurnState::Waiting);
    s.cancel(&hold.turn_id).await?;
    let h = branch(&s, "b1", Some(&a1)).await?;
    assert_eq!(
        place(&h.messages[1]),
        (0, 3),
        "the original and two regenerations"
    );
    Ok(())
}

#[tokio::test]
async fn an_active_turn_says_which_reply_it_writes_and_what_it_answers() -> TestResult {
    let mut s = TestServer::start(&[])?;
    let mut stream = s.stream("session=p1&snapshot=1", None).await?;
    assert!(stream.snapshot().await?.active_turns.is_empty());
    let sent = s.send("p1", "/approve ship").await?;
    let waiting = wait_for(|| async {
        let t = s.turn(&sent.turn_id).await?;
        Ok((t.state == TurnState::Waiting).then_some(t))
    })
    .await?;
    let u1 = sent.message_id.clone();
    assert_eq!(waiting.parent_id.as_deref(), Some(u1.as_str()));
    let first_reply = waiting
        .reply_id
        .clone()
        .ok_or("a waiting turn's reply_id")?;
    let request = waiting.requests[0].request_id.clone();
    let (status, _) = post_json(
        &s,
        &format!("/api/turns/{}/input", sent.turn_id),
        json!({"request_id": request, "approved": true}),
    )
    .await?;
    assert_eq!(status, 200);
    let done = s.wait_turn_end(&sent.turn_id).await?;
    let message = done.message.as_ref().ok_or("message")?;
    assert_eq!(done.reply_id.as_deref(), Some(message.message_id.as_str()));
    assert_eq!(message.message_id, first_reply);
    assert_eq!(done.parent_id.as_deref(), Some(u1.as_str()));

    // A regeneration that waits too: running (waiting), it says where its reply goes.
    let (status, body) =
        regenerate_with(&s, &first_reply, json!({"client_request_id": "r1"})).await?;
    assert_eq!(status, 202, "{body}");
    let regen = body["turn_id"].as_str().ok_or("turn_id")?.to_string();
    let info = wait_for(|| async {
        let t = s.turn(&regen).await?;
        Ok((t.state == TurnState::Waiting).then_some(t))
    })
    .await?;
    let reply = info.reply_id.clone().ok_or("the regeneration's reply_id")?;
    assert_ne!(reply, first_reply);
    assert_eq!(info.parent_id.as_deref(), Some(u1.as_str()));
    assert_eq!(
        branch(&s, "p1", None).await?.leaf_id.as_deref(),
        Some(reply.as_str())
    );
    let check = |turns: &[turnstream_protocol::ActiveTurn]| -> TestResult {
        let t = turns
            .iter()
            .find(|t| t.turn_id == regen)
            .ok_or("the regeneration is active")?;
        assert_eq!(t.reply_id.as_deref(), Some(reply.as_str()));
        assert_eq!(t.parent_id.as_deref(), Some(u1.as_str()));
        Ok(())
    };
    let mut live = s.stream("session=p1&snapshot=1", None).await?;
    check(&live.snapshot().await?.active_turns)?;
    // A client folding the stream's events agrees: `turn_queued` said the same.
    let queued = loop {
        let e = stream.next_event().await?;
        if e.turn_id.as_deref() == Some(regen.as_str()) && e.body.kind() == "turn_queued" {
            break e;
        }
    };
    let mut folded = turnstream_protocol::ActiveTurn::new(&regen, "p1");
    folded.apply(&queued.body);
    check(std::slice::from_ref(&folded))?;
    drop(live);
    drop(stream);

    // After a restart (every node), from the journal alone.
    s.restart(None)?;
    let mut live = s.stream("session=p1&snapshot=1", None).await?;
    check(&live.snapshot().await?.active_turns)?;
    let info = s.turn(&regen).await?;
    assert_eq!(info.reply_id.as_deref(), Some(reply.as_str()));
    // Answered, it continues, and its reply has the id it said.
    let request = info.requests[0].request_id.clone();
    let (status, _) = post_json(
        &s,
        &format!("/api/turns/{regen}/input"),
        json!({"request_id": request, "approved": false}),
    )
    .await?;
    assert_eq!(status, 200);
    let done = s.wait_turn_end(&regen).await?;
    assert_eq!(done.message.map(|m| m.message_id), Some(reply.clone()));
    assert_eq!(done.reply_id, Some(reply));
    Ok(())
}

/// A journal from before regeneration ids (SQLite's schema v7, PostgreSQL's v4) with turns in it
/// migrates when a server of this version starts on it, and retries find their turn.
#[tokio::test]
async fn a_journal_from_before_regeneration_ids_migrates() -> TestResult {
    let mut s = TestServer::start(&[])?;
    ask(&s, "m1", "/echo a").await?;
    s.kill9()?;
    // Back to the schema before regeneration ids: what came after them (v1.3's agents) too.
    let undo =
        "DROP INDEX turns_by_client_request; ALTER TABLE turns DROP COLUMN client_request_id;
        ALTER TABLE turns DROP COLUMN agent; ALTER TABLE turns DROP COLUMN called_by;
        ALTER TABLE messages DROP COLUMN called_by;";
    match s.database_url() {
        Some(url) => {
            pg::sql(
                url,
                &format!(
                    "SET search_path TO turnstream; {undo}
                     UPDATE meta SET value = '4' WHERE key = 'schema_version'"
                ),
            )?;
        }
        None => {
            let c = rusqlite::Connection::open(s.db_path())?;
            c.execute_batch(&format!("{undo} PRAGMA user_version = 7;"))?;
        }
    }
    s.restart(None)?;
    assert_eq!(s.get_json("/readyz").await?.0, 200);
    let a1 = branch(&s, "m1", None).await?.messages[1].message_id.clone();
    let (status, first) = regenerate_with(&s, &a1, json!({"client_request_id": "m"})).await?;
    assert_eq!(status, 202, "{first}");
    let (status, again) = regenerate_with(&s, &a1, json!({"client_request_id": "m"})).await?;
    assert_eq!((status, &again), (200, &first));
    s.wait_turn_end(first["turn_id"].as_str().ok_or("turn_id")?)
        .await?;
    Ok(())
}
