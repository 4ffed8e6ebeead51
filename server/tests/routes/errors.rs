//! Every error shape of the HTTP API: status, code and the headers that go with it.

use super::*;

#[tokio::test]
async fn unknown_routes_and_methods_answer_the_error_shape() -> TestResult {
    let app = router_for(Setup::default()).await?;
    let r = &app.router;
    refused(
        r,
        req(Method::GET, "/api/nothing", None),
        StatusCode::NOT_FOUND,
        "not_found",
    )
    .await?;
    refused(
        r,
        req(Method::GET, "/nothing", None),
        StatusCode::NOT_FOUND,
        "not_found",
    )
    .await?;
    let a = refused(
        r,
        req(Method::GET, "/api/sessions/s/messages", None),
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
    )
    .await?;
    assert_eq!(a.header(header::CONTENT_TYPE), Some("application/json"));
    refused(
        r,
        req(Method::POST, "/healthz", None),
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
    )
    .await?;
    Ok(())
}

#[tokio::test]
async fn a_message_with_bad_input_is_refused_with_its_code() -> TestResult {
    let app = router_for(Setup::default()).await?;
    let r = &app.router;
    let bad = StatusCode::BAD_REQUEST;
    refused(r, post_message("a%20b", "hi"), bad, "invalid_session_id").await?;
    refused(r, post_message("..", "hi"), bad, "invalid_session_id").await?;
    refused(
        r,
        post_message(&"s".repeat(129), "hi"),
        bad,
        "invalid_session_id",
    )
    .await?;
    refused(r, post_message("s", "  "), bad, "empty_content").await?;
    refused(
        r,
        post_message("s", &"x".repeat(MAX_CONTENT_BYTES + 1)),
        StatusCode::PAYLOAD_TOO_LARGE,
        "content_too_large",
    )
    .await?;
    let cmid = req(
        Method::POST,
        "/api/sessions/s/messages",
        Some(json!({ "content": "hi", "client_message_id": "no spaces" })),
    );
    refused(r, cmid, bad, "invalid_client_message_id").await?;
    let syntax = with(
        Request::post("/api/sessions/s/messages").body(Body::from("{"))?,
        header::CONTENT_TYPE,
        "application/json",
    );
    refused(r, syntax, bad, "invalid_json").await?;
    let shape = req(
        Method::POST,
        "/api/sessions/s/messages",
        Some(json!({ "content": 5 })),
    );
    refused(r, shape, StatusCode::UNPROCESSABLE_ENTITY, "invalid_body").await?;
    let untyped =
        Request::post("/api/sessions/s/messages").body(Body::from(r#"{"content":"hi"}"#))?;
    refused(
        r,
        untyped,
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        "unsupported_media_type",
    )
    .await?;
    let huge = with(
        Request::post("/api/sessions/s/messages").body(Body::from(vec![
            b' ';
            MAX_REQUEST_BODY_BYTES
                + 1
        ]))?,
        header::CONTENT_TYPE,
        "application/json",
    );
    refused(r, huge, StatusCode::PAYLOAD_TOO_LARGE, "body_too_large").await?;
    // Without auth, a message names no author.
    let authored = req(
        Method::POST,
        "/api/sessions/s/messages",
        Some(json!({ "content": "hi", "author": "bob" })),
    );
    assert_eq!(call(r, authored).await?.status, StatusCode::ACCEPTED);
    Ok(())
}

#[tokio::test]
async fn history_and_turn_queries_are_checked() -> TestResult {
    let app = router_for(Setup::default()).await?;
    let r = &app.router;
    let bad = StatusCode::BAD_REQUEST;
    for limit in ["0", "1001", "ten", "-1"] {
        let uri = format!("/api/sessions/s/history?limit={limit}");
        refused(r, req(Method::GET, &uri, None), bad, "invalid_limit").await?;
    }
    let uri = "/api/sessions/s/history?before=a%20b";
    refused(r, req(Method::GET, uri, None), bad, "invalid_before").await?;
    let uri = "/api/sessions/s/history?before=msg_none";
    refused(
        r,
        req(Method::GET, uri, None),
        StatusCode::NOT_FOUND,
        "message_not_found",
    )
    .await?;
    // A path segment that is not UTF-8 once decoded.
    let uri = "/api/sessions/%FF/history";
    refused(r, req(Method::GET, uri, None), bad, "invalid_path").await?;
    let ok = call(r, req(Method::GET, "/api/sessions/s/history?limit=5", None)).await?;
    assert_eq!(ok.status, StatusCode::OK);
    assert!(ok.headers.contains_key(CURSOR_HEADER), "{:?}", ok.headers);
    assert_eq!(ok.header(header::CACHE_CONTROL), Some("no-store"));
    refused(
        r,
        req(Method::GET, "/api/turns/a%20b", None),
        bad,
        "invalid_turn_id",
    )
    .await?;
    let missing = StatusCode::NOT_FOUND;
    refused(
        r,
        req(Method::GET, "/api/turns/turn_none", None),
        missing,
        "turn_not_found",
    )
    .await?;
    let cancel = req(Method::POST, "/api/turns/turn_none/cancel", None);
    refused(r, cancel, missing, "turn_not_found").await?;
    Ok(())
}

#[tokio::test]
async fn stream_requests_are_checked_and_capped() -> TestResult {
    let r = &router_for(Setup::default()).await?.router;
    let bad = StatusCode::BAD_REQUEST;
    refused(
        r,
        req(Method::GET, "/api/stream", None),
        bad,
        "missing_session",
    )
    .await?;
    refused(
        r,
        req(Method::GET, "/api/stream?session=a%20b", None),
        bad,
        "invalid_session_id",
    )
    .await?;
    let many: Vec<String> = (0..33).map(|i| format!("session=s{i}")).collect();
    let uri = format!("/api/stream?{}", many.join("&"));
    refused(r, req(Method::GET, &uri, None), bad, "too_many_sessions").await?;
    let open = call(r, req(Method::GET, "/api/stream?session=s", None)).await?;
    assert_eq!(open.status, StatusCode::OK);
    assert_eq!(open.header(header::CACHE_CONTROL), Some("no-cache"));

    let full = router_for(Setup {
        max_streams: 0,
        ..Setup::default()
    })
    .await?;
    let uri = "/api/stream?session=s";
    refused(
        &full.router,
        req(Method::GET, uri, None),
        StatusCode::SERVICE_UNAVAILABLE,
        "too_many_streams",
    )
    .await?;

    // One client's streams: the second is refused while the first is open.
    let capped = router_for(Setup {
        auth: true,
        max_streams_per_client: 1,
        ..Setup::default()
    })
    .await?;
    let alice = token("alice", &["s"], None)?;
    let first = capped
        .router
        .clone()
        .oneshot(bearer(req(Method::GET, uri, None), &alice))
        .await?;
    assert_eq!(first.status(), StatusCode::OK);
    let second = bearer(req(Method::GET, uri, None), &alice);
    refused(
        &capped.router,
        second,
        StatusCode::TOO_MANY_REQUESTS,
        "too_many_streams",
    )
    .await?;
    drop(first);
    let third = bearer(req(Method::GET, uri, None), &alice);
    assert_eq!(call(&capped.router, third).await?.status, StatusCode::OK);
    Ok(())
}

#[tokio::test]
async fn a_client_over_its_message_rate_waits() -> TestResult {
    let app = router_for(Setup {
        auth: true,
        messages_per_minute: 1,
        ..Setup::default()
    })
    .await?;
    let alice = token("alice", &["s"], None)?;
    let first = call(&app.router, bearer(post_message("s", "hi"), &alice)).await?;
    assert_eq!(first.status, StatusCode::ACCEPTED);
    let a = refused(
        &app.router,
        bearer(post_message("s", "again"), &alice),
        StatusCode::TOO_MANY_REQUESTS,
        "rate_limited",
    )
    .await?;
    assert!(a.header(header::RETRY_AFTER).is_some());
    // Another client is not held back; a service key has no rate.
    let bob = token("bob", &["s"], None)?;
    assert_eq!(
        call(&app.router, bearer(post_message("s", "hi"), &bob))
            .await?
            .status,
        StatusCode::ACCEPTED
    );
    let svc = bearer(post_message("s", "hi"), SERVICE_KEY);
    assert_eq!(call(&app.router, svc).await?.status, StatusCode::ACCEPTED);
    Ok(())
}

#[tokio::test]
async fn a_session_with_too_many_active_turns_refuses_more() -> TestResult {
    let app = router_for(Setup {
        max_active_turns: 1,
        ..Setup::default()
    })
    .await?;
    let first = call(&app.router, post_message("s", "/sleep 60000 hi")).await?;
    assert_eq!(first.status, StatusCode::ACCEPTED);
    refused(
        &app.router,
        post_message("s", "more"),
        StatusCode::TOO_MANY_REQUESTS,
        "too_many_active_turns",
    )
    .await?;
    // A retry of an accepted message is not a new turn: 200 with the same ids.
    let retry = json!({ "content": "x", "client_message_id": "c1" });
    let other = router_for(Setup::default()).await?;
    let uri = "/api/sessions/t/messages";
    let a = call(&other.router, req(Method::POST, uri, Some(retry.clone()))).await?;
    let b = call(&other.router, req(Method::POST, uri, Some(retry))).await?;
    assert_eq!((a.status, b.status), (StatusCode::ACCEPTED, StatusCode::OK));
    assert_eq!(a.body["turn_id"], b.body["turn_id"]);
    let changed = json!({ "content": "y", "client_message_id": "c1" });
    refused(
        &other.router,
        req(Method::POST, uri, Some(changed)),
        StatusCode::CONFLICT,
        "client_message_id_conflict",
    )
    .await?;
    Ok(())
}

#[tokio::test]
async fn a_server_shutting_down_refuses_messages_and_readiness() -> TestResult {
    let app = router_for(Setup::default()).await?;
    assert_eq!(
        call(&app.router, req(Method::GET, "/readyz", None))
            .await?
            .status,
        StatusCode::OK
    );
    app.turns.shutdown(Duration::ZERO).await;
    let unavailable = StatusCode::SERVICE_UNAVAILABLE;
    refused(
        &app.router,
        post_message("s", "hi"),
        unavailable,
        "shutting_down",
    )
    .await?;
    refused(
        &app.router,
        req(Method::GET, "/readyz", None),
        unavailable,
        "shutting_down",
    )
    .await?;
    // Reads still work.
    let history = req(Method::GET, "/api/sessions/s/history", None);
    assert_eq!(call(&app.router, history).await?.status, StatusCode::OK);
    Ok(())
}

#[tokio::test]
async fn refused_writes_answer_503_with_retry_after() -> TestResult {
    let app = router_for(Setup::default()).await?;
    let holder = rusqlite::Connection::open(app.dir.path().join("routes.db"))?;
    holder.execute_batch("BEGIN IMMEDIATE")?;
    let unavailable = StatusCode::SERVICE_UNAVAILABLE;
    let a = refused(
        &app.router,
        post_message("s", "hi"),
        unavailable,
        "storage_unavailable",
    )
    .await?;
    assert_eq!(a.header(header::RETRY_AFTER), Some("5"));
    let a = refused(
        &app.router,
        req(Method::GET, "/readyz", None),
        unavailable,
        "storage_unavailable",
    )
    .await?;
    assert_eq!(a.header(header::RETRY_AFTER), Some("5"));
    drop(holder);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while call(&app.router, req(Method::GET, "/readyz", None))
        .await?
        .status
        != StatusCode::OK
    {
        assert!(tokio::time::Instant::now() < deadline, "not ready again");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}
