//! Bad input on every endpoint gets a 4xx with the stable JSON error shape; health, readiness,
//! metrics and turn status answer as documented.

mod support;

use serde_json::Value;
use support::*;

/// Sends a request and checks status and error code (and that the body has the stable shape).
async fn expect_error(
    s: &TestServer,
    method: reqwest::Method,
    path: &str,
    body: Option<(&str, &str)>,
    status: u16,
    code: &str,
) -> TestResult {
    let mut req = s.http.request(method.clone(), format!("{}{path}", s.url));
    if let Some((content_type, b)) = body {
        req = req.header("content-type", content_type).body(b.to_string());
    }
    let res = req.send().await?;
    let got = res.status().as_u16();
    let ct = res
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let v: Value = res
        .json()
        .await
        .map_err(|e| format!("{method} {path}: body is not JSON ({e})"))?;
    assert_eq!(got, status, "{method} {path}: {v}");
    assert!(
        ct.starts_with("application/json"),
        "{method} {path}: content-type {ct}"
    );
    assert_eq!(v["error"]["code"], code, "{method} {path}: {v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty()),
        "{method} {path}: no message in {v}"
    );
    assert_eq!(
        v.as_object().map(|o| o.len()),
        Some(1),
        "only `error` at the top: {v}"
    );
    Ok(())
}

#[tokio::test]
async fn bad_input_on_every_endpoint() -> TestResult {
    let s = TestServer::start(&[])?;
    let json = "application/json";
    let post = reqwest::Method::POST;
    let get = reqwest::Method::GET;
    let msgs = "/api/sessions/s/messages";
    expect_error(
        &s,
        post.clone(),
        msgs,
        Some((json, "{not json")),
        400,
        "invalid_json",
    )
    .await?;
    expect_error(
        &s,
        post.clone(),
        msgs,
        Some((json, "{}")),
        422,
        "invalid_body",
    )
    .await?;
    expect_error(
        &s,
        post.clone(),
        msgs,
        Some((json, r#"{"content": 5}"#)),
        422,
        "invalid_body",
    )
    .await?;
    expect_error(
        &s,
        post.clone(),
        msgs,
        Some(("text/plain", r#"{"content":"x"}"#)),
        415,
        "unsupported_media_type",
    )
    .await?;
    expect_error(
        &s,
        post.clone(),
        msgs,
        Some((json, r#"{"content": "   "}"#)),
        400,
        "empty_content",
    )
    .await?;
    let big = serde_json::json!({ "content": "a".repeat(64 * 1024 + 1) }).to_string();
    expect_error(
        &s,
        post.clone(),
        msgs,
        Some((json, &big)),
        413,
        "content_too_large",
    )
    .await?;
    let huge = serde_json::json!({ "content": "a".repeat(600 * 1024) }).to_string();
    expect_error(
        &s,
        post.clone(),
        msgs,
        Some((json, &huge)),
        413,
        "body_too_large",
    )
    .await?;
    let exactly = serde_json::json!({ "content": "a".repeat(64 * 1024) }).to_string();
    let res = s
        .http
        .post(format!("{}{msgs}", s.url))
        .header("content-type", json)
        .body(exactly)
        .send()
        .await?;
    assert_eq!(res.status(), 202, "64 KiB exactly is allowed");
    let bad_cmid = r#"{"content": "hi", "client_message_id": "has space"}"#;
    expect_error(
        &s,
        post.clone(),
        msgs,
        Some((json, bad_cmid)),
        400,
        "invalid_client_message_id",
    )
    .await?;
    let long_id = "x".repeat(129);
    let ok = r#"{"content": "hi"}"#;
    expect_error(
        &s,
        post.clone(),
        &format!("/api/sessions/{long_id}/messages"),
        Some((json, ok)),
        400,
        "invalid_session_id",
    )
    .await?;
    expect_error(
        &s,
        post.clone(),
        "/api/sessions/a%20b/messages",
        Some((json, ok)),
        400,
        "invalid_session_id",
    )
    .await?;
    expect_error(&s, get.clone(), msgs, None, 405, "method_not_allowed").await?;

    expect_error(
        &s,
        get.clone(),
        "/api/sessions/s/history?limit=0",
        None,
        400,
        "invalid_limit",
    )
    .await?;
    expect_error(
        &s,
        get.clone(),
        "/api/sessions/s/history?limit=1001",
        None,
        400,
        "invalid_limit",
    )
    .await?;
    expect_error(
        &s,
        get.clone(),
        "/api/sessions/s/history?limit=abc",
        None,
        400,
        "invalid_limit",
    )
    .await?;
    expect_error(
        &s,
        get.clone(),
        "/api/sessions/s/history?before=no/such",
        None,
        400,
        "invalid_before",
    )
    .await?;
    expect_error(
        &s,
        get.clone(),
        "/api/sessions/s/history?before=msg_unknown",
        None,
        404,
        "message_not_found",
    )
    .await?;
    expect_error(
        &s,
        get.clone(),
        "/api/sessions/bad%21id/history",
        None,
        400,
        "invalid_session_id",
    )
    .await?;

    expect_error(&s, get.clone(), "/api/stream", None, 400, "missing_session").await?;
    expect_error(
        &s,
        get.clone(),
        "/api/stream?session=",
        None,
        400,
        "invalid_session_id",
    )
    .await?;
    let many: Vec<String> = (0..33).map(|i| format!("session=s{i}")).collect();
    expect_error(
        &s,
        get.clone(),
        &format!("/api/stream?{}", many.join("&")),
        None,
        400,
        "too_many_sessions",
    )
    .await?;

    expect_error(
        &s,
        get.clone(),
        "/api/turns/turn_nope",
        None,
        404,
        "turn_not_found",
    )
    .await?;
    expect_error(
        &s,
        get.clone(),
        "/api/turns/bad%20id",
        None,
        400,
        "invalid_turn_id",
    )
    .await?;
    expect_error(
        &s,
        post.clone(),
        "/api/turns/turn_nope/cancel",
        None,
        404,
        "turn_not_found",
    )
    .await?;
    expect_error(
        &s,
        post.clone(),
        "/api/turns/bad%20id/cancel",
        None,
        400,
        "invalid_turn_id",
    )
    .await?;
    expect_error(
        &s,
        reqwest::Method::DELETE,
        "/api/sessions/bad%20id/realtime",
        None,
        400,
        "invalid_session_id",
    )
    .await?;
    expect_error(&s, get.clone(), "/api/nothing/here", None, 404, "not_found").await?;
    expect_error(&s, get, "/nothing/here", None, 404, "not_found").await?;
    Ok(())
}

#[tokio::test]
async fn history_pages_oldest_first_with_a_cursor_header() -> TestResult {
    let s = TestServer::start(&[])?;
    for i in 0..3 {
        let sent = s.send("h", &format!("/echo reply {i}")).await?;
        s.wait_turn_end(&sent.turn_id).await?;
    }
    let (all, header) = s.history("h").await?;
    assert_eq!(all.cursor, header);
    assert_eq!(all.messages.len(), 6);
    assert!(!all.has_more);
    let contents: Vec<&str> = all.messages.iter().map(|m| m.content.as_str()).collect();
    assert_eq!(
        contents,
        [
            "/echo reply 0",
            "reply 0",
            "/echo reply 1",
            "reply 1",
            "/echo reply 2",
            "reply 2"
        ]
    );
    let (status, page) = s.get_json("/api/sessions/h/history?limit=2").await?;
    assert_eq!(status, 200);
    assert_eq!(page["messages"].as_array().map(Vec::len), Some(2));
    assert_eq!(page["messages"][0]["content"], "/echo reply 2");
    assert_eq!(page["has_more"], true);
    let before = page["messages"][0]["message_id"].as_str().ok_or("no id")?;
    let (_, older) = s
        .get_json(&format!("/api/sessions/h/history?limit=10&before={before}"))
        .await?;
    assert_eq!(older["messages"].as_array().map(Vec::len), Some(4));
    assert_eq!(older["has_more"], false);
    // Field names of a message, as documented.
    let m = &all.messages[1];
    let v = serde_json::to_value(m)?;
    for key in [
        "message_id",
        "client_message_id",
        "role",
        "content",
        "status",
        "turn_id",
        "created_at",
        "event_id",
    ] {
        assert!(v.get(key).is_some(), "message lacks {key}");
    }
    // An unknown session has an empty history and a valid cursor.
    let (empty, cursor) = s.history("nobody").await?;
    assert!(empty.messages.is_empty());
    assert!(cursor.parse::<turnstream_protocol::Cursor>().is_ok());
    Ok(())
}

#[tokio::test]
async fn turn_status_health_readiness_and_metrics() -> TestResult {
    let s = TestServer::start(&[])?;
    // A live stream of the session, so every stage of a publish is timed.
    let mut live = s.stream("session=t", None).await?;
    let sent = s.send("t", "/echo status").await?;
    let t = s.wait_turn_end(&sent.turn_id).await?;
    while live.next_event().await?.body.kind() != "turn_ended" {}
    let (_, v) = s.get_json(&format!("/api/turns/{}", sent.turn_id)).await?;
    for key in [
        "turn_id",
        "session_id",
        "state",
        "created_at",
        "started_at",
        "ended_at",
        "text",
        "message",
        "error",
    ] {
        assert!(v.get(key).is_some(), "turn lacks {key}: {v}");
    }
    assert_eq!(v["state"], "completed");
    assert_eq!(v["text"], "status");
    assert!(t.started_at.is_some() && t.ended_at >= t.started_at);
    assert_eq!(s.get_json("/healthz").await?.0, 200);
    let (status, ready) = s.get_json("/readyz").await?;
    assert_eq!((status, ready["status"].as_str()), (200, Some("ready")));
    let res = s.http.get(format!("{}/metrics", s.url)).send().await?;
    assert!(res
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|c| c.starts_with("text/plain")));
    let text = res.text().await?;
    for name in [
        "turnstream_connections ",
        "turnstream_events_appended_total ",
        "turnstream_append_latency_seconds_bucket",
        "turnstream_commit_batch_size_bucket",
        "turnstream_message_request_seconds_bucket",
        "turnstream_writer_wait_seconds_bucket",
        "turnstream_commit_statements_seconds_bucket",
        "turnstream_commit_seconds_bucket",
        "turnstream_publish_seconds_bucket",
        "turnstream_delivery_seconds_bucket",
        "turnstream_replays_total ",
        "turnstream_tail_replays_total ",
        "turnstream_replay_tail_bytes ",
        "turnstream_resyncs_total{reason=\"expired\"}",
    ] {
        assert!(text.contains(name), "metrics lack {name}");
    }
    let appended = s.counter("turnstream_events_appended_total").await?;
    assert!(appended >= 5.0);
    for stage in [
        "turnstream_message_request_seconds_count",
        "turnstream_writer_wait_seconds_count",
        "turnstream_commit_statements_seconds_count",
        "turnstream_commit_seconds_count",
        "turnstream_publish_seconds_count",
        "turnstream_delivery_seconds_count",
    ] {
        assert!(s.counter(stage).await? >= 1.0, "{stage} observed nothing");
    }
    Ok(())
}

#[tokio::test]
async fn cors_exposes_the_cursor_header_to_allowed_origins() -> TestResult {
    let s = TestServer::start(&["--cors-origin", "http://app.example"])?;
    let res = s
        .http
        .get(format!("{}/api/sessions/c/history", s.url))
        .header("origin", "http://app.example")
        .send()
        .await?;
    let h = res.headers();
    assert_eq!(
        h.get("access-control-allow-origin")
            .and_then(|v| v.to_str().ok()),
        Some("http://app.example")
    );
    let exposed = h
        .get("access-control-expose-headers")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    assert!(exposed.to_ascii_lowercase().contains("x-turnstream-cursor"));
    let res = s
        .http
        .get(format!("{}/api/sessions/c/history", s.url))
        .header("origin", "http://evil.example")
        .send()
        .await?;
    assert!(res.headers().get("access-control-allow-origin").is_none());
    Ok(())
}

#[tokio::test]
async fn too_many_active_turns_is_a_429() -> TestResult {
    let s = TestServer::start(&["--max-active-turns", "2"])?;
    s.send("m", "/sleep 5000 a").await?;
    s.send("m", "/echo b").await?;
    let (status, body) = s.post("m", "/echo c", None).await?;
    assert_eq!(status, 429);
    assert_eq!(body["error"]["code"], "too_many_active_turns");
    Ok(())
}

#[tokio::test]
async fn a_cancel_racing_the_start_of_a_turn_always_wins() -> TestResult {
    let s = TestServer::start(&["--demo-delay-ms", "5"])?;
    for i in 0..25 {
        let session = format!("race{i}");
        let sent = s.send(&session, "/deltas 1000").await?;
        let (status, body) = s.cancel(&sent.turn_id).await?;
        assert_eq!(status, 200);
        assert_eq!(body["state"], "cancelled", "round {i}: {body}");
        let t = s.wait_turn_end(&sent.turn_id).await?;
        assert_eq!(t.state, turnstream_protocol::TurnState::Cancelled);
    }
    Ok(())
}

#[tokio::test]
async fn streams_past_the_limit_are_refused_with_503() -> TestResult {
    let s = TestServer::start(&["--max-streams", "2"])?;
    let _a = s.stream("session=a", None).await?;
    let _b = s.stream("session=b", None).await?;
    let res = s
        .http
        .get(format!("{}/api/stream?session=c", s.url))
        .send()
        .await?;
    assert_eq!(res.status(), 503);
    let v: serde_json::Value = res.json().await?;
    assert_eq!(v["error"]["code"], "too_many_streams");
    drop(_a);
    // Once a stream closes, a new one is accepted.
    wait_for(|| async {
        let res = s
            .http
            .get(format!("{}/api/stream?session=c", s.url))
            .send()
            .await?;
        Ok((res.status() == 200).then_some(()))
    })
    .await?;
    Ok(())
}
