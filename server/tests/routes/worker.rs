//! The worker API: who it admits, and its checks and refusals.

use super::*;

fn claim(body: Value) -> Request<Body> {
    bearer(
        req(Method::POST, "/api/worker/claim", Some(body)),
        SERVICE_KEY,
    )
}

fn on_turn(turn: &str, what: &str, body: Value) -> Request<Body> {
    let uri = format!("/api/worker/turns/{turn}/{what}");
    bearer(req(Method::POST, &uri, Some(body)), SERVICE_KEY)
}

#[tokio::test]
async fn the_worker_api_admits_service_keys_on_worker_servers_only() -> TestResult {
    let any = json!({ "worker_id": "w1", "wait_ms": 0 });
    // No auth at all: nobody holds a service key.
    let open = router_for(Setup {
        workers: true,
        ..Setup::default()
    })
    .await?;
    let r = req(Method::POST, "/api/worker/claim", Some(any.clone()));
    refused(&open.router, r, StatusCode::FORBIDDEN, "forbidden").await?;
    let guarded = router_for(Setup {
        auth: true,
        workers: true,
        ..Setup::default()
    })
    .await?;
    let alice = token("alice", &["*"], None)?;
    let r = bearer(
        req(Method::POST, "/api/worker/claim", Some(any.clone())),
        &alice,
    );
    refused(&guarded.router, r, StatusCode::FORBIDDEN, "forbidden").await?;
    let r = req(Method::POST, "/api/worker/claim", Some(any.clone()));
    refused(&guarded.router, r, StatusCode::UNAUTHORIZED, "unauthorized").await?;
    assert_eq!(
        call(&guarded.router, claim(any.clone())).await?.status,
        StatusCode::OK
    );
    // A server that runs its own agent serves no worker API.
    let own = router_for(Setup {
        auth: true,
        ..Setup::default()
    })
    .await?;
    refused(&own.router, claim(any), StatusCode::NOT_FOUND, "not_found").await?;
    Ok(())
}

#[tokio::test]
async fn worker_requests_are_checked_and_refused_with_their_codes() -> TestResult {
    let app = router_for(Setup {
        auth: true,
        workers: true,
        ..Setup::default()
    })
    .await?;
    let r = &app.router;
    let invalid = StatusCode::UNPROCESSABLE_ENTITY;
    for body in [
        json!({ "worker_id": "no spaces", "wait_ms": 0 }),
        json!({ "worker_id": "w", "wait_ms": 60_001 }),
        json!({ "worker_id": "w", "wait_ms": 0, "max_turns": 0 }),
        json!({ "worker_id": "w", "wait_ms": 0, "max_turns": 33 }),
    ] {
        refused(r, claim(body), invalid, "invalid_body").await?;
    }
    let svc = |r: Request<Body>| bearer(r, SERVICE_KEY);
    let posted = call(r, svc(post_message("s", "one"))).await?;
    let s1 = posted.body["turn_id"]
        .as_str()
        .ok_or("turn_id")?
        .to_string();
    let posted = call(r, svc(post_message("s", "two"))).await?;
    let s2 = posted.body["turn_id"]
        .as_str()
        .ok_or("turn_id")?
        .to_string();
    let claimed = call(r, claim(json!({ "worker_id": "w1", "wait_ms": 0 }))).await?;
    assert_eq!(claimed.status, StatusCode::OK);
    assert_eq!(claimed.body["turns"][0]["turn_id"], json!(s1));
    let lease = claimed.body["turns"][0]["lease"]["token"]
        .as_str()
        .ok_or("lease")?
        .to_string();
    let delta = |seq: i64| json!({ "lease": lease, "seq": seq, "events": [{ "type": "response", "delta": "x" }] });
    // Bodies checked before the turn is looked at.
    refused(
        r,
        on_turn(
            &s1,
            "events",
            json!({ "lease": "", "seq": 0, "events": [] }),
        ),
        invalid,
        "invalid_body",
    )
    .await?;
    refused(
        r,
        on_turn(
            &s1,
            "events",
            json!({ "lease": lease, "seq": -1, "events": [] }),
        ),
        invalid,
        "invalid_body",
    )
    .await?;
    let many: Vec<Value> = (0..1025)
        .map(|_| json!({ "type": "response", "delta": "x" }))
        .collect();
    refused(
        r,
        on_turn(
            &s1,
            "events",
            json!({ "lease": lease, "seq": 0, "events": many }),
        ),
        invalid,
        "invalid_body",
    )
    .await?;
    let tool = json!({ "type": "tool", "call_id": "a b", "name": "t", "status": "started" });
    refused(
        r,
        on_turn(
            &s1,
            "events",
            json!({ "lease": lease, "seq": 0, "events": [tool] }),
        ),
        invalid,
        "invalid_body",
    )
    .await?;
    let failed = json!({ "lease": lease, "seq": 0, "error": { "message": " " } });
    refused(r, on_turn(&s1, "fail", failed), invalid, "invalid_body").await?;
    refused(
        r,
        on_turn("a%20b", "heartbeat", json!({ "lease": lease })),
        StatusCode::BAD_REQUEST,
        "invalid_turn_id",
    )
    .await?;
    // The turn's own refusals.
    refused(
        r,
        on_turn("turn_none", "heartbeat", json!({ "lease": lease })),
        StatusCode::NOT_FOUND,
        "turn_not_found",
    )
    .await?;
    let conflict = StatusCode::CONFLICT;
    refused(
        r,
        on_turn(&s1, "heartbeat", json!({ "lease": "lse_other" })),
        conflict,
        "lease_lost",
    )
    .await?;
    let gap = refused(r, on_turn(&s1, "events", delta(3)), conflict, "seq_gap").await?;
    assert_eq!(gap.body["acked_seq"], json!(-1));
    assert_eq!(
        call(r, on_turn(&s1, "events", delta(0))).await?.status,
        StatusCode::OK
    );
    let done = call(
        r,
        on_turn(&s1, "complete", json!({ "lease": lease, "seq": 1 })),
    )
    .await?;
    assert_eq!(
        (done.status, &done.body["state"]),
        (StatusCode::OK, &json!("completed"))
    );
    refused(r, on_turn(&s1, "events", delta(5)), conflict, "turn_ended").await?;
    // A cancelled turn tells its worker to stop.
    let next = call(r, claim(json!({ "worker_id": "w1", "wait_ms": 0 }))).await?;
    assert_eq!(next.body["turns"][0]["turn_id"], json!(s2));
    let lease2 = next.body["turns"][0]["lease"]["token"]
        .as_str()
        .ok_or("lease")?
        .to_string();
    let cancelled = call(
        r,
        svc(req(Method::POST, &format!("/api/turns/{s2}/cancel"), None)),
    )
    .await?;
    assert_eq!(cancelled.body["state"], json!("cancelled"));
    let after = json!({ "lease": lease2, "seq": 0, "events": [] });
    refused(r, on_turn(&s2, "events", after), conflict, "turn_cancelled").await?;
    Ok(())
}
