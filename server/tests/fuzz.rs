//! Arbitrary input against the real binary: tokens, cursors, ids and bodies of every shape reach
//! the credential check, the parsers and the handlers. Whatever comes in, the server answers a
//! success or a documented 4xx in the stable JSON shape, never a 5xx, and never dies.

mod support;

use std::time::{Duration, SystemTime};

use proptest::prelude::*;
use serde_json::Value;
use support::*;

const SECRET: &str = "fuzz-secret-0123456789-abcdefghijklmnop";
const SERVICE_KEY: &str = "svc-fuzz-key";

/// Every error code the API documents (docs/protocol.md §4 and docs/security.md).
const CODES: &[&str] = &[
    "unauthorized",
    "invalid_token",
    "token_expired",
    "forbidden",
    "forbidden_origin",
    "not_found",
    "method_not_allowed",
    "invalid_path",
    "invalid_session_id",
    "invalid_turn_id",
    "invalid_json",
    "invalid_body",
    "unsupported_media_type",
    "body_too_large",
    "empty_content",
    "content_too_large",
    "too_many_attachments",
    "invalid_attachment",
    "invalid_client_message_id",
    "invalid_author",
    "client_message_id_conflict",
    "too_many_active_turns",
    "invalid_limit",
    "invalid_before",
    "missing_session",
    "too_many_sessions",
    "turn_not_found",
    "message_not_found",
    "rate_limited",
    "too_many_streams",
    // v1.2: agents that ask, and conversations that branch.
    "invalid_input",
    "invalid_request",
    "request_not_found",
    "input_already_given",
    "turn_ended",
    "session_busy",
    "invalid_message_id",
    "invalid_parent_id",
    "invalid_leaf",
    "invalid_leaf_id",
    "invalid_client_request_id",
    "client_request_id_conflict",
];

/// Percent-encodes anything into one path segment or query value.
fn enc(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                char::from(b).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Sends one request and checks the answer is a success or a documented 4xx.
async fn check(
    http: &reqwest::Client,
    method: reqwest::Method,
    url: String,
    auth: Option<&str>,
    body: Option<(&str, String)>,
) -> Result<(), String> {
    let mut req = http.request(method.clone(), &url);
    if let Some(a) = auth {
        req = req.header("authorization", a);
    }
    if let Some((ct, b)) = body {
        req = req.header("content-type", ct).body(b);
    }
    let res = req
        .send()
        .await
        .map_err(|e| format!("{method} {url}: {e}"))?;
    let status = res.status().as_u16();
    let ct = res
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    if ct.starts_with("text/event-stream") {
        // A stream opened (it may carry a resync); that is a documented answer.
        return if status == 200 {
            Ok(())
        } else {
            Err(format!("stream with {status}"))
        };
    }
    let text = res.text().await.map_err(|e| e.to_string())?;
    if (200..300).contains(&status) {
        return Ok(());
    }
    if !(400..500).contains(&status) {
        return Err(format!("{method} {url} answered {status}: {text}"));
    }
    let v: Value = serde_json::from_str(&text)
        .map_err(|_| format!("{method} {url}: {status} body is not JSON: {text}"))?;
    let code = v["error"]["code"].as_str().unwrap_or("");
    if !CODES.contains(&code) || v["error"]["message"].as_str().is_none_or(str::is_empty) {
        return Err(format!("{method} {url}: undocumented error {v}"));
    }
    Ok(())
}

fn token_like() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<String>(),
        "[A-Za-z0-9_-]{0,40}\\.[A-Za-z0-9_-]{0,80}\\.[A-Za-z0-9_-]{0,40}",
        // A real token with one character changed.
        (0usize..400, "[A-Za-z0-9_.-]").prop_map(|(i, c)| {
            let t = turnstream_server::auth::mint(
                SECRET,
                "u",
                &["s".into()],
                None,
                Duration::from_secs(60),
                SystemTime::now(),
            )
            .unwrap_or_default();
            let i = i % t.len().max(1);
            format!("{}{c}{}", &t[..i], t.get(i + 1..).unwrap_or(""))
        }),
    ]
}

fn body_like() -> impl Strategy<Value = String> {
    let scalar = prop_oneof![
        Just("null".to_string()),
        any::<i64>().prop_map(|n| n.to_string()),
        any::<String>().prop_map(|s| Value::String(s).to_string()),
        Just("true".to_string()),
        Just("[]".to_string()),
    ];
    prop_oneof![
        any::<String>(),
        (scalar.clone(), scalar.clone(), scalar.clone()).prop_map(|(c, m, a)| {
            format!(r#"{{"content":{c},"client_message_id":{m},"author":{a}}}"#)
        }),
        // v1.2 bodies: an edit, an answer, a regeneration, a switch of branch.
        (scalar.clone(), scalar.clone(), scalar.clone(), scalar).prop_map(|(p, o, r, l)| {
            format!(
                r#"{{"content":"x","parent_id":{p},"on_busy":{o},"request_id":{r},"answer":{l},"client_request_id":{r},"leaf_id":{l}}}"#
            )
        }),
        "[{}\\[\\]\":,a-z0-9 ]{0,60}",
    ]
}

struct Servers {
    open: TestServer,
    auth: TestServer,
    rt: tokio::runtime::Runtime,
    http: reqwest::Client,
}

fn servers() -> Servers {
    let rt = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => panic!("runtime: {e}"),
    };
    let start = |args: &[&str]| match TestServer::start(args) {
        Ok(s) => s,
        Err(e) => panic!("server: {e}"),
    };
    Servers {
        open: start(&["--messages-per-minute", "0", "--demo-delay-ms", "0"]),
        auth: start(&[
            "--auth-secret",
            SECRET,
            "--service-key",
            SERVICE_KEY,
            "--messages-per-minute",
            "0",
            "--demo-delay-ms",
            "0",
        ]),
        rt,
        http: reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .build()
            .unwrap_or_default(),
    }
}

/// One case: every route of both servers with this input.
#[allow(clippy::too_many_arguments)]
async fn case(
    sv: &Servers,
    token: &str,
    session: &str,
    turn: &str,
    cursor: &str,
    query: &str,
    body: &str,
    ct: &str,
) -> Result<(), String> {
    use reqwest::Method as M;
    let bearer = format!("Bearer {token}");
    let svc = format!("Bearer {SERVICE_KEY}");
    let (s, t, c, q) = (enc(session), enc(turn), enc(cursor), enc(query));
    for (server, auth) in [
        (&sv.open, None),
        (&sv.auth, Some(bearer.as_str())),
        (&sv.auth, Some(svc.as_str())),
    ] {
        let u = &server.url;
        let b = || Some((ct, body.to_string()));
        check(
            &sv.http,
            M::POST,
            format!("{u}/api/sessions/{s}/messages"),
            auth,
            b(),
        )
        .await?;
        check(
            &sv.http,
            M::GET,
            format!("{u}/api/sessions/{s}/history?limit={q}&before={t}"),
            auth,
            None,
        )
        .await?;
        check(
            &sv.http,
            M::GET,
            format!("{u}/api/stream?session={s}&cursor={c}&snapshot={q}"),
            auth,
            None,
        )
        .await?;
        check(&sv.http, M::GET, format!("{u}/api/stream?{q}"), auth, None).await?;
        check(&sv.http, M::GET, format!("{u}/api/turns/{t}"), auth, None).await?;
        check(
            &sv.http,
            M::GET,
            format!("{u}/api/sessions/{s}/history?leaf={t}&limit={q}"),
            auth,
            None,
        )
        .await?;
        check(
            &sv.http,
            M::POST,
            format!("{u}/api/turns/{t}/input"),
            auth,
            b(),
        )
        .await?;
        check(
            &sv.http,
            M::POST,
            format!("{u}/api/messages/{t}/regenerate"),
            auth,
            b(),
        )
        .await?;
        check(
            &sv.http,
            M::POST,
            format!("{u}/api/sessions/{s}/active"),
            auth,
            b(),
        )
        .await?;
        check(
            &sv.http,
            M::POST,
            format!("{u}/api/turns/{t}/cancel"),
            auth,
            b(),
        )
        .await?;
        check(
            &sv.http,
            M::DELETE,
            format!("{u}/api/sessions/{s}/realtime"),
            auth,
            None,
        )
        .await?;
        let with_token = format!("{u}/api/stream?session=a&access_token={}", enc(token));
        check(&sv.http, M::GET, with_token, None, None).await?;
    }
    Ok(())
}

#[test]
fn any_input_gets_a_documented_answer() {
    let sv = servers();
    let strategy = (
        token_like(),
        any::<String>(),
        any::<String>(),
        any::<String>(),
        any::<String>(),
        body_like(),
        prop_oneof![
            Just("application/json"),
            Just("text/plain"),
            Just("application/x-www-form-urlencoded")
        ],
    );
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig {
        cases: 150,
        // Each case is a few dozen real requests; shrinking a failure would take long.
        max_shrink_iters: 64,
        ..ProptestConfig::default()
    });
    let result = runner.run(
        &strategy,
        |(token, session, turn, cursor, query, body, ct)| {
            let r = sv.rt.block_on(case(
                &sv, &token, &session, &turn, &cursor, &query, &body, ct,
            ));
            prop_assert!(r.is_ok(), "{}", r.err().unwrap_or_default());
            Ok(())
        },
    );
    if let Err(e) = result {
        panic!("{e}");
    }
}
