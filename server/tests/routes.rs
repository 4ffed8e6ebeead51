//! The gateway's routes in process: the router called with `oneshot` (as axum's testing example
//! does), on a real SQLite journal and the real turn execution with the demo agent. Every error
//! shape the HTTP API answers, and every access decision, each checked for its status, its
//! stable JSON error code and the headers that go with it. (The suites that start the binary
//! check the same routes over real HTTP; these reach each branch directly and fast.)

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use axum::body::Body;
use axum::http::{header, HeaderMap, Method, Request, StatusCode};
use axum::Router;
use serde_json::{json, Value};
use tower::ServiceExt;
use turnstream_protocol::limits::{MAX_CONTENT_BYTES, MAX_REQUEST_BODY_BYTES};
use turnstream_protocol::CURSOR_HEADER;
use turnstream_server::agent::demo::DemoAgent;
use turnstream_server::auth::{mint, Authenticator, Scope};
use turnstream_server::gateway::{self, AppState, Limits, OriginPolicy, RateLimiter, StreamQuota};
use turnstream_server::hub::Hub;
use turnstream_server::journal::{Journal, JournalOptions};
use turnstream_server::live::LiveFeed;
use turnstream_server::metrics::Metrics;
use turnstream_server::turns::{Mode, Turns, TurnsConfig};

type TestResult<T = ()> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

const SECRET: &str = "a test secret of at least thirty-two bytes";
const SERVICE_KEY: &str = "svc-key-for-tests";

/// How the server under test is configured.
#[derive(Clone)]
struct Setup {
    auth: bool,
    workers: bool,
    messages_per_minute: u32,
    max_streams: usize,
    max_streams_per_client: usize,
    max_active_turns: usize,
    cors: Vec<String>,
}

impl Default for Setup {
    fn default() -> Self {
        Setup {
            auth: false,
            workers: false,
            messages_per_minute: 0,
            max_streams: 100,
            max_streams_per_client: 0,
            max_active_turns: 64,
            cors: Vec::new(),
        }
    }
}

struct App {
    router: Router,
    turns: Arc<Turns>,
    journal: Journal,
    dir: tempfile::TempDir,
}

async fn router_for(setup: Setup) -> TestResult<App> {
    let dir = tempfile::tempdir()?;
    let metrics = Arc::new(Metrics::default());
    let hub = Hub::with_metrics(metrics.clone());
    let journal = Journal::open_with(
        &dir.path().join("routes.db"),
        metrics,
        JournalOptions {
            busy_timeout: Duration::from_millis(50),
            ..Default::default()
        },
        LiveFeed::new(hub.clone()),
    )?;
    let agent = (!setup.workers).then(|| {
        Arc::new(DemoAgent {
            delay: Duration::from_millis(1),
        }) as Arc<dyn turnstream_server::agent::Agent>
    });
    let turns = Turns::new(
        journal.clone(),
        Mode::new(agent, false, Duration::from_secs(30)),
        TurnsConfig {
            coalesce: Duration::ZERO,
            max_concurrent_turns: 8,
            max_turns_per_client: 8,
        },
    );
    turns.start().await?;
    let auth = if setup.auth {
        Authenticator::new(&[SECRET.to_string()], &[], &[SERVICE_KEY.to_string()])?
    } else {
        Authenticator::default()
    };
    let state = AppState {
        journal: journal.clone(),
        hub,
        turns: turns.clone(),
        limits: Arc::new(Limits {
            heartbeat: Duration::from_secs(15),
            max_streams: setup.max_streams,
            max_active_turns: setup.max_active_turns,
            max_streams_per_client: setup.max_streams_per_client,
        }),
        auth: Arc::new(auth),
        origins: Arc::new(OriginPolicy::new(&setup.cors)),
        rate: Arc::new(RateLimiter::new(setup.messages_per_minute)),
        client_streams: Arc::new(StreamQuota::new(setup.max_streams_per_client)),
    };
    Ok(App {
        router: gateway::router(state, None, &setup.cors),
        turns,
        journal,
        dir,
    })
}

fn token(sub: &str, sessions: &[&str], scopes: Option<&[Scope]>) -> TestResult<String> {
    let sessions: Vec<String> = sessions.iter().map(|s| s.to_string()).collect();
    Ok(mint(
        SECRET,
        sub,
        &sessions,
        scopes,
        Duration::from_secs(3600),
        SystemTime::now(),
    )?)
}

/// A request: `body` is sent as JSON when given.
fn req(method: Method, uri: &str, body: Option<Value>) -> Request<Body> {
    let builder = Request::builder().method(method).uri(uri);
    match body {
        Some(b) => builder
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from(b.to_string())),
        None => builder.body(Body::empty()),
    }
    .expect("a valid request")
}

fn with(mut r: Request<Body>, name: header::HeaderName, value: &str) -> Request<Body> {
    r.headers_mut()
        .insert(name, value.parse().expect("a valid header value"));
    r
}

fn bearer(r: Request<Body>, credential: &str) -> Request<Body> {
    with(r, header::AUTHORIZATION, &format!("Bearer {credential}"))
}

struct Answer {
    status: StatusCode,
    headers: HeaderMap,
    body: Value,
}

impl Answer {
    /// The error code of a refusal in the stable JSON shape (and nothing else in `error`).
    fn code(&self) -> &str {
        let error = &self.body["error"];
        assert!(
            error["message"].as_str().is_some_and(|m| !m.is_empty()),
            "{}",
            self.body
        );
        error["code"].as_str().unwrap_or("")
    }

    fn header(&self, name: header::HeaderName) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

/// Calls the router once. The body is read unless it is an event stream (which never ends):
/// as JSON when it says it is, else as text.
async fn call(router: &Router, r: Request<Body>) -> TestResult<Answer> {
    let res = router.clone().oneshot(r).await?;
    let status = res.status();
    let headers = res.headers().clone();
    let streaming = headers
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"text/event-stream"));
    let body = if streaming {
        Value::Null
    } else {
        let json = headers
            .get(header::CONTENT_TYPE)
            .is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
        let bytes = axum::body::to_bytes(res.into_body(), 4 << 20).await?;
        if json {
            serde_json::from_slice(&bytes)?
        } else {
            Value::String(String::from_utf8_lossy(&bytes).into_owned())
        }
    };
    Ok(Answer {
        status,
        headers,
        body,
    })
}

/// Calls and checks a refusal: its status and its code.
async fn refused(
    router: &Router,
    r: Request<Body>,
    status: StatusCode,
    code: &str,
) -> TestResult<Answer> {
    let what = format!("{} {}", r.method(), r.uri());
    let a = call(router, r).await?;
    assert_eq!((a.status, a.code()), (status, code), "{what}: {}", a.body);
    Ok(a)
}

fn post_message(session: &str, content: &str) -> Request<Body> {
    req(
        Method::POST,
        &format!("/api/sessions/{session}/messages"),
        Some(json!({ "content": content })),
    )
}

async fn wait_ended(journal: &Journal, turn: &str) -> TestResult {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let t = journal.turn(turn).await?.ok_or("no such turn")?;
        if t.state.is_terminal() {
            return Ok(());
        }
        if tokio::time::Instant::now() > deadline {
            return Err(format!("turn {turn} did not end").into());
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

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
