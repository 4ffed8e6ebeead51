//! Every access decision: credentials, the sessions and scopes a token allows, message authors,
//! and cross-site writes.

use super::*;

#[tokio::test]
async fn credentials_are_required_and_checked() -> TestResult {
    let app = router_for(Setup {
        auth: true,
        ..Setup::default()
    })
    .await?;
    let r = &app.router;
    let unauthorized = StatusCode::UNAUTHORIZED;
    let a = refused(r, post_message("s", "hi"), unauthorized, "unauthorized").await?;
    assert_eq!(a.header(header::WWW_AUTHENTICATE), Some("Bearer"));
    let a = refused(
        r,
        bearer(post_message("s", "hi"), "not.a.token"),
        unauthorized,
        "invalid_token",
    )
    .await?;
    assert!(a
        .header(header::WWW_AUTHENTICATE)
        .is_some_and(|c| c.contains("invalid_token")));
    let old = mint(
        SECRET,
        "alice",
        &["s".to_string()],
        None,
        Duration::from_secs(60),
        SystemTime::now() - Duration::from_secs(86_400),
    )?;
    let a = refused(
        r,
        bearer(post_message("s", "hi"), &old),
        unauthorized,
        "token_expired",
    )
    .await?;
    assert!(a
        .header(header::WWW_AUTHENTICATE)
        .is_some_and(|c| c.contains("expired")));
    let basic = with(post_message("s", "hi"), header::AUTHORIZATION, "Basic dTpw");
    refused(r, basic, unauthorized, "unauthorized").await?;
    // Public routes need nothing.
    for uri in ["/healthz", "/readyz", "/metrics", "/api/openapi.json"] {
        assert_eq!(
            call(r, req(Method::GET, uri, None)).await?.status,
            StatusCode::OK,
            "{uri}"
        );
    }
    // The stream takes its token from the query too (EventSource sends no header).
    let alice = token("alice", &["a:*"], None)?;
    let uri = format!("/api/stream?session=a:1&access_token={alice}");
    assert_eq!(
        call(r, req(Method::GET, &uri, None)).await?.status,
        StatusCode::OK
    );
    Ok(())
}

#[tokio::test]
async fn tokens_allow_their_sessions_and_scopes_only() -> TestResult {
    let app = router_for(Setup {
        auth: true,
        ..Setup::default()
    })
    .await?;
    let r = &app.router;
    let forbidden = StatusCode::FORBIDDEN;
    let alice = token("alice", &["a:*"], None)?;
    let mine = call(r, bearer(post_message("a:1", "/sleep 60000 hi"), &alice)).await?;
    assert_eq!(mine.status, StatusCode::ACCEPTED);
    let turn = mine.body["turn_id"].as_str().ok_or("turn_id")?.to_string();
    refused(
        r,
        bearer(post_message("b:1", "hi"), &alice),
        forbidden,
        "forbidden",
    )
    .await?;
    let theirs = bearer(req(Method::GET, "/api/sessions/b:1/history", None), &alice);
    refused(r, theirs, forbidden, "forbidden").await?;
    refused(
        r,
        bearer(
            req(Method::GET, "/api/stream?session=a:1&session=b:1", None),
            &alice,
        ),
        forbidden,
        "forbidden",
    )
    .await?;
    refused(
        r,
        bearer(
            req(Method::DELETE, "/api/sessions/b:1/realtime", None),
            &alice,
        ),
        forbidden,
        "forbidden",
    )
    .await?;
    // A turn id grants nothing by itself.
    let bob = token("bob", &["b:*"], None)?;
    refused(
        r,
        bearer(req(Method::GET, &format!("/api/turns/{turn}"), None), &bob),
        forbidden,
        "forbidden",
    )
    .await?;
    let cancel = format!("/api/turns/{turn}/cancel");
    refused(
        r,
        bearer(req(Method::POST, &cancel, None), &bob),
        forbidden,
        "forbidden",
    )
    .await?;
    // Scopes: a read-only token reads and does nothing else.
    let reader = token("carol", &["a:*"], Some(&[Scope::Read]))?;
    let history = bearer(req(Method::GET, "/api/sessions/a:1/history", None), &reader);
    assert_eq!(call(r, history).await?.status, StatusCode::OK);
    refused(
        r,
        bearer(post_message("a:1", "hi"), &reader),
        forbidden,
        "forbidden",
    )
    .await?;
    refused(
        r,
        bearer(req(Method::POST, &cancel, None), &reader),
        forbidden,
        "forbidden",
    )
    .await?;
    let canceller = token("dave", &["a:*"], Some(&[Scope::Cancel]))?;
    let cancelled = call(r, bearer(req(Method::POST, &cancel, None), &canceller)).await?;
    assert_eq!(
        (cancelled.status, &cancelled.body["state"]),
        (StatusCode::OK, &json!("cancelled"))
    );
    wait_ended(&app.journal, &turn).await?;
    // Authors: a user writes as themself only; a service key names anyone (well-formed).
    let named = |author: &str| {
        req(
            Method::POST,
            "/api/sessions/a:1/messages",
            Some(json!({ "content": "hi", "author": author })),
        )
    };
    refused(r, bearer(named("mallory"), &alice), forbidden, "forbidden").await?;
    assert_eq!(
        call(r, bearer(named("alice"), &alice)).await?.status,
        StatusCode::ACCEPTED
    );
    assert_eq!(
        call(r, bearer(named("erin"), SERVICE_KEY)).await?.status,
        StatusCode::ACCEPTED
    );
    refused(
        r,
        bearer(named("bad\nname"), SERVICE_KEY),
        StatusCode::BAD_REQUEST,
        "invalid_author",
    )
    .await?;
    refused(
        r,
        bearer(named(""), SERVICE_KEY),
        StatusCode::BAD_REQUEST,
        "invalid_author",
    )
    .await?;
    Ok(())
}

#[tokio::test]
async fn cross_site_writes_are_refused_before_credentials() -> TestResult {
    let open = router_for(Setup {
        cors: vec!["https://app.example".into()],
        ..Setup::default()
    })
    .await?;
    let r = &open.router;
    let from = |origin: &str, req: Request<Body>| with(req, header::ORIGIN, origin);
    let forbidden = StatusCode::FORBIDDEN;
    refused(
        r,
        from("https://evil.example", post_message("s", "hi")),
        forbidden,
        "forbidden_origin",
    )
    .await?;
    let cancel = req(Method::POST, "/api/turns/turn_x/cancel", None);
    refused(r, from("null", cancel), forbidden, "forbidden_origin").await?;
    // Reads pass; allowed and same origins pass.
    let read = from(
        "https://evil.example",
        req(Method::GET, "/api/sessions/s/history", None),
    );
    assert_eq!(call(r, read).await?.status, StatusCode::OK);
    let allowed = from("https://app.example", post_message("s", "hi"));
    assert_eq!(call(r, allowed).await?.status, StatusCode::ACCEPTED);
    let same = with(
        from("http://turnstream.test:8080", post_message("s", "hi")),
        header::HOST,
        "turnstream.test:8080",
    );
    assert_eq!(call(r, same).await?.status, StatusCode::ACCEPTED);
    // With auth, the origin is refused first: no credential is looked at.
    let guarded = router_for(Setup {
        auth: true,
        ..Setup::default()
    })
    .await?;
    let anonymous = from("https://evil.example", post_message("s", "hi"));
    refused(&guarded.router, anonymous, forbidden, "forbidden_origin").await?;
    Ok(())
}
