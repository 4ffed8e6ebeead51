//! The worker API (contract v1.1) against the real binary: workers claim queued turns under a
//! lease, stream their output with a `seq` (retries append nothing, gaps are refused), and end
//! them; a lost lease ends a turn `interrupted` exactly once; a cancel reaches the worker;
//! sessions stay FIFO with several workers; a browser's stream sees what a built-in agent shows.

mod support;

use std::collections::HashSet;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::worker_api::{keyed_client, worker_post, worker_server, SECRET, SERVICE_KEY};
use support::*;
use turnstream_protocol::{EventBody, MessageStatus, Role, ToolStatus, TurnState};

/// Claims with `wait_ms` and `max_turns`; the claimed turns.
async fn claim(s: &TestServer, worker: &str, wait_ms: u64, max: u32) -> TestResult<Vec<Value>> {
    let (status, body) = worker_post(
        s,
        "/claim",
        json!({"worker_id": worker, "wait_ms": wait_ms, "max_turns": max}),
    )
    .await?;
    if status != 200 {
        return Err(format!("claim answered {status}: {body}").into());
    }
    Ok(body["turns"].as_array().cloned().unwrap_or_default())
}

/// Claims until one turn comes (the turn was posted just before).
async fn claim_one(s: &TestServer, worker: &str) -> TestResult<(String, String)> {
    let turns = claim(s, worker, 10_000, 1).await?;
    let t = turns.first().ok_or("no turn claimed within 10 s")?;
    Ok((str_of(t, "turn_id")?, str_of(&t["lease"], "token")?))
}

fn str_of(v: &Value, key: &str) -> TestResult<String> {
    Ok(v[key]
        .as_str()
        .ok_or_else(|| format!("no {key} in {v}"))?
        .to_string())
}

async fn events(
    s: &TestServer,
    turn: &str,
    lease: &str,
    seq: i64,
    events: Value,
) -> TestResult<(u16, Value)> {
    worker_post(
        s,
        &format!("/turns/{turn}/events"),
        json!({"lease": lease, "seq": seq, "events": events}),
    )
    .await
}

fn response(d: &str) -> Value {
    json!({"type": "response", "delta": d})
}

fn code(body: &Value) -> &str {
    body["error"]["code"].as_str().unwrap_or("")
}

/// A worker streams thinking, a tool call and a reply; a browser's stream sees them in order as
/// it would from a built-in agent, the final message is the accepted response text, and the
/// next turn's claim carries the history in conversation order.
#[tokio::test]
async fn browser_sees_a_workers_turn_like_a_built_in_agents() -> TestResult {
    let s = worker_server(&[])?;
    let mut stream = s
        .stream(
            &format!("session=chat&snapshot=1&access_token={SERVICE_KEY}"),
            None,
        )
        .await?;
    stream.snapshot().await?;
    let posted = s.send("chat", "what time is it?").await?;
    // The turn waits, queued, until a worker claims it.
    assert_eq!(s.turn(&posted.turn_id).await?.state, TurnState::Queued);

    let turns = claim(&s, "w1", 10_000, 4).await?;
    assert_eq!(turns.len(), 1);
    let t = &turns[0];
    assert_eq!(str_of(t, "turn_id")?, posted.turn_id);
    assert_eq!(str_of(t, "session_id")?, "chat");
    assert_eq!(t["user_message"]["content"], "what time is it?");
    assert_eq!(t["history"], json!([]));
    assert!(t["lease"]["expires_at"].as_i64().unwrap_or(0) > 0);
    let lease = str_of(&t["lease"], "token")?;
    assert!(lease.len() >= 24, "a lease token of 96 bits or more");
    assert_eq!(s.turn(&posted.turn_id).await?.state, TurnState::Running);

    let turn = posted.turn_id.as_str();
    let (st, ack) = events(
        &s,
        turn,
        &lease,
        0,
        json!([
            {"type": "thinking", "delta": "the user "},
            {"type": "thinking", "delta": "wants the time"},
            {"type": "tool", "call_id": "call_1", "name": "clock", "status": "started",
             "input_preview": "{}"},
        ]),
    )
    .await?;
    assert_eq!((st, ack["acked_seq"].as_i64()), (200, Some(0)), "{ack}");
    assert_eq!(ack["state"], "running");
    let (st, _) = events(
        &s,
        turn,
        &lease,
        1,
        json!([
            {"type": "tool", "call_id": "call_1", "name": "clock", "status": "finished",
             "output_preview": "12:00"},
            response("It is "),
            response("noon."),
        ]),
    )
    .await?;
    assert_eq!(st, 200);
    let (st, done) = worker_post(
        &s,
        &format!("/turns/{turn}/complete"),
        json!({"lease": lease, "seq": 2}),
    )
    .await?;
    assert_eq!(
        (st, done["state"].as_str()),
        (200, Some("completed")),
        "{done}"
    );

    let seen = stream.until_turn_ended(turn).await?;
    let kinds: Vec<&str> = seen.iter().map(|e| e.body.kind()).collect();
    assert_eq!(
        kinds,
        [
            "message_received",
            "turn_queued",
            "turn_started",
            "thinking",
            "tool",
            "tool",
            "response_delta",
            "turn_ended"
        ],
        "consecutive deltas of one request are coalesced as a built-in agent's are"
    );
    assert!(
        matches!(&seen[3].body, EventBody::Thinking { delta } if delta == "the user wants the time")
    );
    assert_eq!(reply_text(&seen, turn), "It is noon.");
    match &seen[7].body {
        EventBody::TurnEnded {
            state,
            message: Some(m),
            ..
        } => {
            assert_eq!(*state, TurnState::Completed);
            assert_eq!(m.content, "It is noon.");
            assert_eq!(m.status, MessageStatus::Complete);
        }
        other => return Err(format!("unexpected end {other:?}").into()),
    }
    let info = s.turn(turn).await?;
    assert_eq!(info.tools.len(), 1);
    assert_eq!(info.tools[0].status, ToolStatus::Finished);
    assert_eq!(info.tools[0].output_preview.as_deref(), Some("12:00"));

    // The next turn's claim carries the conversation so far, in order.
    s.send("chat", "and tomorrow?").await?;
    let turns = claim(&s, "w1", 10_000, 1).await?;
    let history = turns.first().ok_or("no second turn")?["history"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let history: Vec<(String, String)> = history
        .iter()
        .map(|m| {
            (
                m["role"].as_str().unwrap_or("").to_string(),
                m["content"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    assert_eq!(
        history,
        [
            ("user".to_string(), "what time is it?".to_string()),
            ("assistant".to_string(), "It is noon.".to_string())
        ]
    );
    Ok(())
}

/// Four workers racing to claim 24 turns of 24 sessions get each turn exactly once.
#[tokio::test]
async fn racing_workers_claim_each_turn_once() -> TestResult {
    let s = worker_server(&[])?;
    let mut posted = HashSet::new();
    for i in 0..24 {
        posted.insert(s.send(&format!("s{i}"), "hi").await?.turn_id);
    }
    let mut tasks = Vec::new();
    for w in 0..4 {
        let http = s.http.clone();
        let url = s.url.clone();
        tasks.push(tokio::spawn(async move {
            let mut mine = Vec::new();
            loop {
                let res = http
                    .post(format!("{url}/api/worker/claim"))
                    .json(&json!({"worker_id": format!("w{w}"), "max_turns": 3}))
                    .send()
                    .await?;
                let body: Value = res.json().await?;
                let turns = body["turns"].as_array().cloned().unwrap_or_default();
                if turns.is_empty() {
                    return Ok::<_, reqwest::Error>(mine);
                }
                for t in turns {
                    mine.push(t["turn_id"].as_str().unwrap_or("").to_string());
                }
            }
        }));
    }
    let mut claimed = Vec::new();
    for t in tasks {
        claimed.extend(t.await??);
    }
    let unique: HashSet<String> = claimed.iter().cloned().collect();
    assert_eq!(claimed.len(), unique.len(), "a turn was handed out twice");
    assert_eq!(unique, posted);
    Ok(())
}

/// A retry of an accepted `seq` answers 200 and appends nothing, also after other requests; a
/// `seq` past the next one is refused with `seq_gap` and the acked seq; a repeated complete
/// answers the same.
#[tokio::test]
async fn seq_retries_append_nothing_and_gaps_are_refused() -> TestResult {
    let s = worker_server(&["--coalesce-ms", "0"])?;
    let turn = s.send("a", "count").await?.turn_id;
    let (claimed, lease) = claim_one(&s, "w").await?;
    assert_eq!(claimed, turn);

    let (st, ack) = events(&s, &turn, &lease, 0, json!([response("one ")])).await?;
    assert_eq!((st, ack["acked_seq"].as_i64()), (200, Some(0)));
    let (st, ack) = events(&s, &turn, &lease, 0, json!([response("one ")])).await?;
    assert_eq!(
        (st, ack["acked_seq"].as_i64()),
        (200, Some(0)),
        "a retry is answered"
    );
    let (st, gap) = events(&s, &turn, &lease, 2, json!([response("three ")])).await?;
    assert_eq!((st, code(&gap)), (409, "seq_gap"), "{gap}");
    assert_eq!(gap["acked_seq"].as_i64(), Some(0));
    assert!(gap["error"]["message"].as_str().is_some());
    let (st, _) = events(&s, &turn, &lease, 1, json!([response("two")])).await?;
    assert_eq!(st, 200);
    // A late retry of the first request, after the second was accepted.
    let (st, ack) = events(&s, &turn, &lease, 0, json!([response("one ")])).await?;
    assert_eq!((st, ack["acked_seq"].as_i64()), (200, Some(1)));
    // complete's seq is the next one.
    let (st, gap) = worker_post(
        &s,
        &format!("/turns/{turn}/complete"),
        json!({"lease": lease, "seq": 1}),
    )
    .await?;
    assert_eq!((st, code(&gap)), (409, "seq_gap"));
    for _ in 0..2 {
        let (st, done) = worker_post(
            &s,
            &format!("/turns/{turn}/complete"),
            json!({"lease": lease, "seq": 2}),
        )
        .await?;
        assert_eq!(
            (st, done["state"].as_str()),
            (200, Some("completed")),
            "{done}"
        );
        assert_eq!(done["acked_seq"].as_i64(), Some(2));
    }
    let info = s.turn(&turn).await?;
    assert_eq!(info.state, TurnState::Completed);
    assert_eq!(info.text, "one two");
    let (history, _) = s.history("a").await?;
    let replies: Vec<&str> = history
        .messages
        .iter()
        .filter(|m| m.role == Role::Assistant)
        .map(|m| m.content.as_str())
        .collect();
    assert_eq!(replies, ["one two"]);
    // Events after the end are refused.
    let (st, body) = events(&s, &turn, &lease, 3, json!([response("late")])).await?;
    assert_eq!((st, code(&body)), (409, "turn_ended"));
    Ok(())
}

/// A worker that dies mid-turn leaves it `interrupted` with its partial text once the lease
/// runs out, with exactly one `turn_ended`; the turn is never handed to another worker, and
/// the dead worker's late request is refused.
#[tokio::test]
async fn a_lost_lease_ends_the_turn_interrupted_once() -> TestResult {
    let s = worker_server(&["--worker-lease-secs", "1"])?;
    let mut stream = s
        .stream(
            &format!("session=a&snapshot=1&access_token={SERVICE_KEY}"),
            None,
        )
        .await?;
    stream.snapshot().await?;
    let turn = s.send("a", "long job").await?.turn_id;
    let (_, lease) = claim_one(&s, "doomed").await?;
    let (st, _) = events(&s, &turn, &lease, 0, json!([response("partial")])).await?;
    assert_eq!(st, 200);
    let started = Instant::now();
    // The worker goes silent; nobody else gets the turn meanwhile.
    assert!(claim(&s, "other", 0, 32).await?.is_empty());
    let info = s.wait_turn_end(&turn).await?;
    assert!(
        started.elapsed() >= Duration::from_millis(900),
        "ended before the lease ran out"
    );
    assert_eq!(info.state, TurnState::Interrupted);
    assert_eq!(info.text, "partial");
    let seen = stream.until_turn_ended(&turn).await?;
    let ends = seen
        .iter()
        .filter(|e| e.body.kind() == "turn_ended")
        .count();
    assert_eq!(ends, 1);
    // The late worker is told, and nothing more is journaled for the turn.
    let (st, body) = events(&s, &turn, &lease, 1, json!([response(" more")])).await?;
    assert_eq!((st, code(&body)), (409, "lease_lost"), "{body}");
    let (st, body) = worker_post(
        &s,
        &format!("/turns/{turn}/heartbeat"),
        json!({"lease": lease}),
    )
    .await?;
    assert_eq!((st, code(&body)), (409, "lease_lost"));
    assert!(claim(&s, "other", 0, 32).await?.is_empty());
    // A later turn of the session reads that one ended: it is claimable, and one more end
    // of the old turn never appears.
    let next = s.send("a", "again").await?.turn_id;
    let (claimed, _) = claim_one(&s, "other").await?;
    assert_eq!(claimed, next);
    loop {
        let e = stream.next_event().await?;
        assert!(
            !(e.turn_id.as_deref() == Some(turn.as_str()) && e.body.kind() == "turn_ended"),
            "a second turn_ended"
        );
        if e.turn_id.as_deref() == Some(next.as_str()) && e.body.kind() == "turn_started" {
            break;
        }
    }
    Ok(())
}

/// Leases are stored with the turn: after a crash and restart, a worker whose lease is still
/// good carries on; one whose lease ran out during the outage finds its turn `interrupted`.
#[tokio::test]
async fn leases_survive_a_restart() -> TestResult {
    let mut s = worker_server(&["--worker-lease-secs", "30"])?;
    let turn = s.send("a", "hello").await?.turn_id;
    let (_, lease) = claim_one(&s, "w").await?;
    let (st, _) = events(&s, &turn, &lease, 0, json!([response("before ")])).await?;
    assert_eq!(st, 200);
    s.restart(None)?;
    let (st, ack) = events(&s, &turn, &lease, 0, json!([response("before ")])).await?;
    assert_eq!(
        (st, ack["acked_seq"].as_i64()),
        (200, Some(0)),
        "the acked seq is durable"
    );
    let (st, _) = events(&s, &turn, &lease, 1, json!([response("after")])).await?;
    assert_eq!(st, 200);
    let (st, _) = worker_post(
        &s,
        &format!("/turns/{turn}/complete"),
        json!({"lease": lease, "seq": 2}),
    )
    .await?;
    assert_eq!(st, 200);
    assert_eq!(s.turn(&turn).await?.text, "before after");

    // A short lease runs out while the server is down: the start ends the turn interrupted.
    let mut args: Vec<String> = vec![
        "--agent",
        "worker",
        "--service-key",
        SERVICE_KEY,
        "--auth-secret",
        SECRET,
        "--worker-lease-secs",
        "1",
    ]
    .into_iter()
    .map(String::from)
    .collect();
    args.extend(["--demo-delay-ms".into(), "2".into()]);
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    s.restart(Some(&refs))?;
    let turn = s.send("b", "hello").await?.turn_id;
    let (_, lease) = claim_one(&s, "w").await?;
    events(&s, &turn, &lease, 0, json!([response("cut")])).await?;
    s.kill9()?;
    tokio::time::sleep(Duration::from_millis(1100)).await; // the outage outlasts the 1 s lease
    s.restart(None)?;
    let info = s.turn(&turn).await?;
    assert_eq!(
        info.state,
        TurnState::Interrupted,
        "ended at start, not later"
    );
    assert_eq!(info.text, "cut");
    Ok(())
}

/// A cancel ends a worker's turn at once with the text accepted so far; the worker learns it
/// from a 409 on its next append and from the state on its heartbeat.
#[tokio::test]
async fn a_cancel_reaches_the_worker() -> TestResult {
    let s = worker_server(&[])?;
    let turn = s.send("a", "slow").await?.turn_id;
    let (_, lease) = claim_one(&s, "w").await?;
    events(&s, &turn, &lease, 0, json!([response("so far")])).await?;
    let (st, hb) = worker_post(
        &s,
        &format!("/turns/{turn}/heartbeat"),
        json!({"lease": lease}),
    )
    .await?;
    assert_eq!((st, hb["state"].as_str()), (200, Some("running")));
    let (st, body) = s.cancel(&turn).await?;
    assert_eq!(
        (st, body["state"].as_str()),
        (200, Some("cancelled")),
        "{body}"
    );
    let info = s.turn(&turn).await?;
    assert_eq!(info.state, TurnState::Cancelled);
    assert_eq!(info.text, "so far");
    let (st, body) = events(&s, &turn, &lease, 1, json!([response(" more")])).await?;
    assert_eq!((st, code(&body)), (409, "turn_cancelled"), "{body}");
    let (st, hb) = worker_post(
        &s,
        &format!("/turns/{turn}/heartbeat"),
        json!({"lease": lease}),
    )
    .await?;
    assert_eq!((st, hb["state"].as_str()), (200, Some("cancelled")), "{hb}");
    let (st, body) = worker_post(
        &s,
        &format!("/turns/{turn}/complete"),
        json!({"lease": lease, "seq": 1}),
    )
    .await?;
    assert_eq!((st, code(&body)), (409, "turn_cancelled"));
    assert_eq!(s.turn(&turn).await?.text, "so far");
    Ok(())
}

/// With several workers, each session still runs one turn at a time in FIFO order: a claim
/// never hands out a session's second turn while its first runs, nor two of one session at
/// once; and a waiting claim is answered as soon as a turn becomes claimable.
#[tokio::test]
async fn sessions_stay_fifo_with_several_workers() -> TestResult {
    let s = worker_server(&[])?;
    let mut a = Vec::new();
    let mut b = Vec::new();
    for i in 0..3 {
        a.push(s.send("a", &format!("a{i}")).await?.turn_id);
        b.push(s.send("b", &format!("b{i}")).await?.turn_id);
    }
    let first = claim(&s, "w1", 0, 32).await?;
    let ids: HashSet<String> = first
        .iter()
        .map(|t| t["turn_id"].as_str().unwrap_or("").to_string())
        .collect();
    assert_eq!(ids, HashSet::from([a[0].clone(), b[0].clone()]));
    assert!(
        claim(&s, "w2", 0, 32).await?.is_empty(),
        "a session's second turn ran early"
    );

    // w2 waits; finishing a0 frees session a, and w2 gets a1 at once (not at its deadline).
    let waiting = {
        let http = s.http.clone();
        let url = s.url.clone();
        tokio::spawn(async move {
            let started = Instant::now();
            let body: Value = http
                .post(format!("{url}/api/worker/claim"))
                .json(&json!({"worker_id": "w2", "wait_ms": 20000, "max_turns": 32}))
                .send()
                .await?
                .json()
                .await?;
            Ok::<_, reqwest::Error>((body, started.elapsed()))
        })
    };
    let lease_of = |id: &str| -> TestResult<String> {
        let t = first
            .iter()
            .find(|t| t["turn_id"] == id)
            .ok_or("turn not claimed")?;
        str_of(&t["lease"], "token")
    };
    let (st, _) = worker_post(
        &s,
        &format!("/turns/{}/complete", a[0]),
        json!({"lease": lease_of(&a[0])?, "seq": 0}),
    )
    .await?;
    assert_eq!(st, 200);
    let (body, waited) = waiting.await??;
    assert!(
        waited < Duration::from_secs(10),
        "the waiting claim slept to its deadline"
    );
    let got: Vec<&str> = body["turns"]
        .as_array()
        .ok_or("no turns")?
        .iter()
        .filter_map(|t| t["turn_id"].as_str())
        .collect();
    assert_eq!(got, [a[1].as_str()]);
    // Failing b0 hands out b1 next, never b2.
    let (st, f) = worker_post(
        &s,
        &format!("/turns/{}/fail", b[0]),
        json!({"lease": lease_of(&b[0])?, "seq": 0, "error": {"message": "model down"}}),
    )
    .await?;
    assert_eq!((st, f["state"].as_str()), (200, Some("failed")));
    assert_eq!(s.turn(&b[0]).await?.error.as_deref(), Some("model down"));
    let next = claim(&s, "w1", 0, 32).await?;
    let got: Vec<&str> = next.iter().filter_map(|t| t["turn_id"].as_str()).collect();
    assert_eq!(got, [b[1].as_str()]);
    Ok(())
}

/// Only service keys use the worker API, only in worker mode; bad input gets the v1 errors.
#[tokio::test]
async fn refusals_and_bad_input() -> TestResult {
    let s = worker_server(&[])?;
    let claim_body = json!({"worker_id": "w"});
    // No credential, then a user's token.
    let res = reqwest::Client::new()
        .post(format!("{}/api/worker/claim", s.url))
        .json(&claim_body)
        .send()
        .await?;
    assert_eq!(res.status(), 401);
    let user = turnstream_server::auth::mint(
        SECRET,
        "alice",
        &["*".to_string()],
        None,
        Duration::from_secs(600),
        std::time::SystemTime::now(),
    )?;
    let res = keyed_client(&user)?
        .post(format!("{}/api/worker/claim", s.url))
        .json(&claim_body)
        .send()
        .await?;
    assert_eq!(res.status(), 403);
    let body: Value = res.json().await?;
    assert_eq!(code(&body), "forbidden");

    for (bad, why) in [
        (json!({"worker_id": "w", "wait_ms": 60001}), "wait_ms"),
        (json!({"worker_id": "w", "max_turns": 0}), "max_turns"),
        (json!({"worker_id": "w", "max_turns": 33}), "max_turns"),
        (json!({"worker_id": "a b"}), "worker_id"),
        (json!({"worker_id": "w", "wait_ms": -1}), "wait_ms"),
        (json!({}), "worker_id"),
    ] {
        let (st, body) = worker_post(&s, "/claim", bad.clone()).await?;
        assert!(st == 400 || st == 422, "{bad} answered {st}");
        assert!(body["error"]["code"].is_string(), "{bad}: {body}");
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap_or("")
                .contains(why)
                || st == 422,
            "{bad}: {body}"
        );
    }
    let res = s
        .http
        .post(format!("{}/api/worker/claim", s.url))
        .header("content-type", "application/json")
        .body("{not json")
        .send()
        .await?;
    assert_eq!(res.status(), 400);

    let (st, body) = events(&s, "no-such-turn", "lse_x", 0, json!([])).await?;
    assert_eq!((st, code(&body)), (404, "turn_not_found"));
    let turn = s.send("a", "x").await?.turn_id;
    let (_, lease) = claim_one(&s, "w").await?;
    let (st, body) = events(&s, &turn, "lse_not_mine", 0, json!([])).await?;
    assert_eq!((st, code(&body)), (409, "lease_lost"));
    let (st, body) = events(&s, &turn, &lease, -1, json!([])).await?;
    assert_eq!(st, 422, "{body}");
    let (st, body) = events(
        &s,
        &turn,
        &lease,
        0,
        json!([{"type": "smoke", "delta": "x"}]),
    )
    .await?;
    assert_eq!((st, code(&body)), (422, "invalid_body"));
    let (st, body) = events(
        &s,
        &turn,
        &lease,
        0,
        json!([{"type": "tool", "call_id": "bad id", "name": "t", "status": "started"}]),
    )
    .await?;
    assert_eq!((st, code(&body)), (422, "invalid_body"));
    let (st, body) = worker_post(
        &s,
        &format!("/turns/{turn}/fail"),
        json!({"lease": lease, "seq": 0, "error": {"message": ""}}),
    )
    .await?;
    assert_eq!((st, code(&body)), (422, "invalid_body"));
    drop(s);

    // Without any auth configured, the worker API is refused and says what it needs.
    let open = TestServer::start(&["--agent", "worker"])?;
    let (st, body) = worker_post(&open, "/claim", claim_body.clone()).await?;
    assert_eq!((st, code(&body)), (403, "forbidden"));
    assert!(body["error"]["message"]
        .as_str()
        .unwrap_or("")
        .contains("--service-key"));
    // A server whose own agent runs turns does not serve it.
    let mut demo = TestServer::start(&["--service-key", SERVICE_KEY])?;
    demo.http = keyed_client(SERVICE_KEY)?;
    let (st, body) = worker_post(&demo, "/claim", claim_body).await?;
    assert_eq!((st, code(&body)), (404, "not_found"));
    Ok(())
}

/// Contract v1.2: a worker asks for approval and waits (its lease ends); the worker goes away;
/// once answered, another worker claims the turn with a continuation (the answer, the events so
/// far, the next `seq`) and ends it.
#[tokio::test]
async fn a_worker_waits_for_input_and_another_continues_the_turn() -> TestResult {
    let s = worker_server(&[])?;
    let sent = s.send("wi", "deploy?").await?;
    let (turn, lease) = claim_one(&s, "w-asks").await?;
    assert_eq!(turn, sent.turn_id);
    let asked = json!({"lease": lease, "seq": 0, "events": [
        {"type": "response", "delta": "Checking. "},
        {"type": "input_requested", "request_id": "ok_deploy", "kind": "approval",
         "tool": {"call_id": "c1", "name": "deploy", "input": {"env": "prod"}}}
    ]});
    let (status, body) = worker_post(&s, &format!("/turns/{turn}/events"), asked).await?;
    assert_eq!(status, 200, "{body}");
    let (status, body) = worker_post(
        &s,
        &format!("/turns/{turn}/wait"),
        json!({"lease": lease, "seq": 1}),
    )
    .await?;
    assert_eq!((status, &body["state"]), (200, &json!("waiting")), "{body}");
    // The lease is over: the first worker can write no more.
    let late = json!({"lease": lease, "seq": 2, "events": [{"type": "response", "delta": "x"}]});
    let (status, body) = worker_post(&s, &format!("/turns/{turn}/events"), late).await?;
    assert_eq!(
        (status, &body["error"]["code"]),
        (409, &json!("lease_lost"))
    );
    // Nothing to claim while it waits.
    assert!(claim(&s, "w-idle", 0, 1).await?.is_empty());
    let res = s
        .http
        .post(format!("{}/api/turns/{turn}/input", s.url))
        .json(&json!({"request_id": "ok_deploy", "approved": true}))
        .send()
        .await?;
    assert_eq!(res.status(), 200);
    let turns = claim(&s, "w-continues", 10_000, 1).await?;
    let t = turns.first().ok_or("the answered turn was not claimable")?;
    let c = &t["continuation"];
    assert_eq!(c["seq"], 2, "{t}");
    assert_eq!(c["answers"][0]["request_id"], "ok_deploy");
    assert_eq!(c["answers"][0]["answer"], json!({"approved": true}));
    assert_eq!(
        c["events"][0],
        json!({"type": "response", "delta": "Checking. "})
    );
    assert_eq!(c["events"][1]["type"], "input_requested");
    assert_eq!(c["events"][1]["tool"]["input"], json!({"env": "prod"}));
    let lease = str_of(&t["lease"], "token")?;
    let done =
        json!({"lease": lease, "seq": 2, "events": [{"type": "response", "delta": "Deployed."}]});
    let (status, _) = worker_post(&s, &format!("/turns/{turn}/events"), done).await?;
    assert_eq!(status, 200);
    let (status, body) = worker_post(
        &s,
        &format!("/turns/{turn}/complete"),
        json!({"lease": lease, "seq": 3}),
    )
    .await?;
    assert_eq!(
        (status, &body["state"]),
        (200, &json!("completed")),
        "{body}"
    );
    let info = s.wait_turn_end(&turn).await?;
    assert_eq!(
        info.message.map(|m| m.content).as_deref(),
        Some("Checking. Deployed.")
    );
    Ok(())
}

/// A request id used twice in one turn, or one request too many, is refused with 400 and the
/// whole batch appends nothing (v1.2).
#[tokio::test]
async fn a_repeated_request_id_or_one_request_too_many_is_refused() -> TestResult {
    let s = worker_server(&[])?;
    s.send("wr", "ask twice").await?;
    let (turn, lease) = claim_one(&s, "w-dup").await?;
    let ask = |id: &str| json!({"type": "input_requested", "request_id": id, "kind": "question", "prompt": "?"});
    let dup = json!({"lease": lease, "seq": 0, "events": [ask("q1"), ask("q1")]});
    let (status, body) = worker_post(&s, &format!("/turns/{turn}/events"), dup).await?;
    assert_eq!(
        (status, &body["error"]["code"]),
        (400, &json!("invalid_request")),
        "{body}"
    );
    let many: Vec<Value> = (0..=turnstream_protocol::input::MAX_REQUESTS_PER_TURN)
        .map(|i| ask(&format!("q{i}")))
        .collect();
    let too_many = json!({"lease": lease, "seq": 0, "events": many});
    let (status, body) = worker_post(&s, &format!("/turns/{turn}/events"), too_many).await?;
    assert_eq!(
        (status, &body["error"]["code"]),
        (400, &json!("invalid_request")),
        "{body}"
    );
    // Neither batch was accepted: seq 0 is still the next one, and the turn asked nothing.
    let ok = json!({"lease": lease, "seq": 0, "events": [ask("q1")]});
    let (status, body) = worker_post(&s, &format!("/turns/{turn}/events"), ok).await?;
    assert_eq!((status, &body["acked_seq"]), (200, &json!(0)), "{body}");
    assert_eq!(s.turn(&turn).await?.requests.len(), 1);
    Ok(())
}
