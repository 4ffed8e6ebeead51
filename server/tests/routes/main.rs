//! The gateway's routes in process: the router called with `oneshot` (as axum's testing example
//! does), on a real SQLite journal and the real turn execution with the demo agent. Every error
//! shape the HTTP API answers, and every access decision, each checked for its status, its
//! stable JSON error code and the headers that go with it. (The suites that start the binary
//! check the same routes over real HTTP; these reach each branch directly and fast.)
//!
//! - `errors`: every error shape of the HTTP API;
//! - `access`: every access decision (credentials, sessions, scopes, authors, origins);
//! - `worker`: the worker API's admission and refusals.

mod access;
mod errors;
mod worker;

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
use turnstream_server::journal::{Journal, JournalOptions};
use turnstream_server::live::hub::Hub;
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
        presence: turnstream_server::presence::Presence::start(
            Default::default(),
            Arc::new(turnstream_server::presence::cluster::Alone),
            journal.metrics().clone(),
        ),
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
