//! Tokens, service keys, scopes and participants (contract v1.1), against the real binary: every
//! `/api/` route refuses what it must with the documented status and code, and allows what a
//! token covers; a stream ends with `token_expired` when its token does, and a reconnect with a
//! fresh token resumes with no gap and no duplicate; several users share a session.

mod support;

use std::time::{Duration, SystemTime};

use reqwest::Method;
use serde_json::{json, Value};
use support::*;
use turnstream_server::auth::{mint, Scope};

const SECRET: &str = "test-secret-0123456789-abcdefghijklmnop";
const SERVICE_KEY: &str = "svc-test-key-0001";

fn token_at(
    sub: &str,
    sessions: &[&str],
    scope: Option<&[Scope]>,
    ttl: u64,
    now: SystemTime,
) -> String {
    let sessions: Vec<String> = sessions.iter().map(|s| s.to_string()).collect();
    mint(SECRET, sub, &sessions, scope, Duration::from_secs(ttl), now).unwrap_or_default()
}

fn token(sub: &str, sessions: &[&str], scope: Option<&[Scope]>) -> String {
    token_at(sub, sessions, scope, 3600, SystemTime::now())
}

fn auth_server(extra: &[&str]) -> TestResult<TestServer> {
    let mut args = vec!["--auth-secret", SECRET, "--service-key", SERVICE_KEY];
    args.extend_from_slice(extra);
    TestServer::start(&args)
}

/// A token with `alg: none` and no signature, claiming every session: a real token's claims
/// segment (with `sessions: ["*"]`) under the header `{"alg":"none","typ":"JWT"}`.
fn alg_none_token() -> String {
    let everything = token("mallory", &["*"], None);
    let claims = everything.split('.').nth(1).unwrap_or_default();
    format!("eyJhbGciOiJub25lIiwidHlwIjoiSldUIn0.{claims}.")
}

/// How a credential travels.
#[derive(Clone, Copy, Debug)]
enum Via {
    Header,
    Query,
}

/// One request with a credential; the status and the JSON body (or `Null` for a stream).
async fn call(
    s: &TestServer,
    method: Method,
    path: &str,
    body: Option<Value>,
    cred: Option<(&str, Via)>,
) -> TestResult<(u16, Value, Option<String>)> {
    let mut url = format!("{}{path}", s.url);
    let mut req_headers = reqwest::header::HeaderMap::new();
    match cred {
        Some((c, Via::Header)) => {
            req_headers.insert("authorization", format!("Bearer {c}").parse()?);
        }
        Some((c, Via::Query)) => {
            let sep = if path.contains('?') { '&' } else { '?' };
            url.push(sep);
            url.push_str("access_token=");
            url.push_str(&c.replace('+', "%2B"));
        }
        None => {}
    }
    let mut req = reqwest::Client::new()
        .request(method, url)
        .headers(req_headers)
        .timeout(DEADLINE);
    if let Some(b) = body {
        req = req.json(&b);
    }
    let res = req.send().await?;
    let status = res.status().as_u16();
    let challenge = res
        .headers()
        .get("www-authenticate")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let is_stream = res
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|c| c.starts_with("text/event-stream"));
    let body = if is_stream {
        Value::Null
    } else {
        res.json().await.unwrap_or(Value::Null)
    };
    Ok((status, body, challenge))
}

/// Every `/api/` route of contract v1, with what it needs.
struct Route {
    method: Method,
    path: String,
    body: Option<Value>,
    /// Status when allowed.
    ok: u16,
}

fn routes(session: &str, turn: &str) -> Vec<Route> {
    vec![
        Route {
            method: Method::POST,
            path: format!("/api/sessions/{session}/messages"),
            body: Some(json!({"content": "/echo hi"})),
            ok: 202,
        },
        Route {
            method: Method::GET,
            path: format!("/api/sessions/{session}/history"),
            body: None,
            ok: 200,
        },
        Route {
            method: Method::GET,
            path: format!("/api/stream?session={session}"),
            body: None,
            ok: 200,
        },
        Route {
            method: Method::GET,
            path: format!("/api/turns/{turn}"),
            body: None,
            ok: 200,
        },
        Route {
            method: Method::POST,
            path: format!("/api/turns/{turn}/cancel"),
            body: None,
            ok: 200,
        },
        Route {
            method: Method::DELETE,
            path: format!("/api/sessions/{session}/realtime"),
            body: None,
            ok: 200,
        },
    ]
}

#[tokio::test]
async fn every_route_answers_each_credential_as_documented() -> TestResult {
    let s = auth_server(&[])?;
    // A turn in session `s1`, posted by the backend.
    let (status, posted, _) = call(
        &s,
        Method::POST,
        "/api/sessions/s1/messages",
        Some(json!({"content": "/echo hi"})),
        Some((SERVICE_KEY, Via::Header)),
    )
    .await?;
    assert_eq!(status, 202, "{posted}");
    let turn = posted["turn_id"].as_str().ok_or("no turn_id")?.to_string();

    let other_secret = mint(
        "another-secret-0123456789-abcdefghijkl",
        "u1",
        &["s1".into()],
        None,
        Duration::from_secs(3600),
        SystemTime::now(),
    )?;
    let expired = token_at(
        "u1",
        &["s1"],
        None,
        60,
        SystemTime::now() - Duration::from_secs(3600),
    );
    let other_session = token("u1", &["s2"], None);
    let prefix = token("u1", &["s*"], None);
    let none = alg_none_token();
    let refusals: Vec<(&str, Option<&str>, u16, &str)> = vec![
        ("no token", None, 401, "unauthorized"),
        ("bad signature", Some(&other_secret), 401, "invalid_token"),
        ("alg none", Some(&none), 401, "invalid_token"),
        ("garbage", Some("not.a.token"), 401, "invalid_token"),
        ("expired", Some(&expired), 401, "token_expired"),
        ("another session", Some(&other_session), 403, "forbidden"),
    ];
    for route in routes("s1", &turn) {
        for (what, cred, status, code) in &refusals {
            for via in [Via::Header, Via::Query] {
                let (got, body, challenge) = call(
                    &s,
                    route.method.clone(),
                    &route.path,
                    route.body.clone(),
                    cred.map(|c| (c, via)),
                )
                .await?;
                let label = format!("{} {} with {what} ({via:?})", route.method, route.path);
                assert_eq!(got, *status, "{label}: {body}");
                assert_eq!(body["error"]["code"], *code, "{label}: {body}");
                if *status == 401 {
                    assert!(
                        challenge.is_some_and(|c| c.starts_with("Bearer")),
                        "{label}: no WWW-Authenticate: Bearer"
                    );
                }
            }
        }
        // A token without the route's scope.
        let needs = match (&route.method, route.path.as_str()) {
            (&Method::GET, _) => Scope::Read,
            (_, p) if p.ends_with("/cancel") => Scope::Cancel,
            _ => Scope::Write,
        };
        let others: Vec<Scope> = [Scope::Read, Scope::Write, Scope::Cancel]
            .into_iter()
            .filter(|s| *s != needs)
            .collect();
        let unscoped = token("u1", &["s1"], Some(&others));
        let (got, body, _) = call(
            &s,
            route.method.clone(),
            &route.path,
            route.body.clone(),
            Some((&unscoped, Via::Header)),
        )
        .await?;
        assert_eq!(
            got, 403,
            "{} {} without {needs:?}: {body}",
            route.method, route.path
        );
        assert_eq!(body["error"]["code"], "forbidden");
        // Allowed: a prefix token, the exact scope, a service key; by header and by query.
        let scoped = token("u1", &["s1"], Some(&[needs]));
        for (what, cred) in [
            ("prefix", &prefix),
            ("scoped", &scoped),
            ("service key", &SERVICE_KEY.to_string()),
        ] {
            for via in [Via::Header, Via::Query] {
                let (got, body, _) = call(
                    &s,
                    route.method.clone(),
                    &route.path,
                    route.body.clone(),
                    Some((cred, via)),
                )
                .await?;
                assert_eq!(
                    got, route.ok,
                    "{} {} with {what} ({via:?}): {body}",
                    route.method, route.path
                );
            }
        }
    }
    // A turn id grants nothing by itself: a token for another session cannot read or cancel it,
    // and an unknown route under /api still wants a token.
    let (got, _, _) = call(&s, Method::GET, "/api/nope", None, None).await?;
    assert_eq!(got, 401);
    // Health, readiness and metrics stay open.
    for path in ["/healthz", "/readyz"] {
        let (got, _, _) = call(&s, Method::GET, path, None, None).await?;
        assert_eq!(got, 200, "{path}");
    }
    Ok(())
}

#[tokio::test]
async fn public_keys_verify_eddsa_and_rs256_tokens() -> TestResult {
    let keys = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/keys");
    let ed_pub = keys.join("ed25519-public.pem");
    let rsa_pub = keys.join("rsa-public.pem");
    let s = TestServer::start(&[
        "--auth-public-key",
        ed_pub.to_str().ok_or("path")?,
        "--auth-public-key",
        rsa_pub.to_str().ok_or("path")?,
    ])?;
    let now = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)?
        .as_secs();
    let claims = json!({"sub": "u1", "exp": now + 600, "sessions": ["pk"]});
    for (alg, file) in [
        (jsonwebtoken::Algorithm::EdDSA, "ed25519-private.pem"),
        (jsonwebtoken::Algorithm::RS256, "rsa-private.pem"),
    ] {
        let pem = std::fs::read(keys.join(file))?;
        let key = match alg {
            jsonwebtoken::Algorithm::EdDSA => jsonwebtoken::EncodingKey::from_ed_pem(&pem)?,
            _ => jsonwebtoken::EncodingKey::from_rsa_pem(&pem)?,
        };
        let t = jsonwebtoken::encode(&jsonwebtoken::Header::new(alg), &claims, &key)?;
        let (got, body, _) = call(
            &s,
            Method::GET,
            "/api/sessions/pk/history",
            None,
            Some((&t, Via::Header)),
        )
        .await?;
        assert_eq!(got, 200, "{alg:?}: {body}");
        let (got, _, _) = call(
            &s,
            Method::GET,
            "/api/sessions/other/history",
            None,
            Some((&t, Via::Header)),
        )
        .await?;
        assert_eq!(got, 403, "{alg:?} for another session");
    }
    // An HS256 token is refused when no secret is configured (no algorithm confusion).
    let hs = token("u1", &["pk"], None);
    let (got, body, _) = call(
        &s,
        Method::GET,
        "/api/sessions/pk/history",
        None,
        Some((&hs, Via::Header)),
    )
    .await?;
    assert_eq!(
        (got, body["error"]["code"].as_str()),
        (401, Some("invalid_token"))
    );
    Ok(())
}

#[tokio::test]
async fn the_token_command_mints_what_the_server_accepts() -> TestResult {
    let s = auth_server(&[])?;
    let secret_file = s.dir.path().join("secret");
    std::fs::write(&secret_file, format!("{SECRET}\n"))?;
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_turnstream"))
        .args(["token", "--secret-file"])
        .arg(&secret_file)
        .args([
            "--sub",
            "cli-user",
            "--session",
            "t1",
            "--session",
            "team:*",
            "--scope",
            "read",
            "--ttl",
            "10m",
        ])
        .env_remove("TURNSTREAM_AUTH_SECRET")
        .output()?;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let t = String::from_utf8(out.stdout)?.trim().to_string();
    for path in ["/api/sessions/t1/history", "/api/sessions/team:7/history"] {
        let (got, _, _) = call(&s, Method::GET, path, None, Some((&t, Via::Header))).await?;
        assert_eq!(got, 200, "{path}");
    }
    let (got, _, _) = call(
        &s,
        Method::POST,
        "/api/sessions/t1/messages",
        Some(json!({"content": "x"})),
        Some((&t, Via::Header)),
    )
    .await?;
    assert_eq!(got, 403, "a read-only token cannot post");
    Ok(())
}

#[tokio::test]
async fn a_stream_ends_when_its_token_does_and_resumes_with_a_fresh_one() -> TestResult {
    let s = auth_server(&["--demo-delay-ms", "10"])?;
    // A token that expires in 2 s; the turn streams for longer than that.
    let short = token_at("u1", &["exp"], None, 2, SystemTime::now());
    let mut stream = s
        .stream(&format!("session=exp&access_token={short}"), None)
        .await?;
    let (status, posted, _) = call(
        &s,
        Method::POST,
        "/api/sessions/exp/messages",
        Some(json!({"content": "/deltas 600"})),
        Some((&short, Via::Header)),
    )
    .await?;
    assert_eq!(status, 202, "{posted}");
    let turn = posted["turn_id"].as_str().ok_or("no turn")?.to_string();
    let mut events = Vec::new();
    let mut expired = false;
    while let Some(frame) = stream.next().await? {
        if frame.event == "token_expired" {
            assert!(frame.id.is_none(), "token_expired carries no id");
            let v: Value = serde_json::from_str(&frame.data)?;
            assert_eq!(v, json!({"reason": "expired"}));
            expired = true;
            continue;
        }
        assert!(!expired, "nothing follows token_expired");
        if frame.id.is_some() {
            events.push(serde_json::from_str::<turnstream_protocol::Event>(
                &frame.data,
            )?);
        }
    }
    assert!(expired, "the stream ended without token_expired");
    let ended_early = !events.iter().any(|e| e.body.kind() == "turn_ended");
    assert!(
        ended_early,
        "the stream should end mid-turn (make the turn longer)"
    );
    // The old token no longer streams: refused, or (within the 5 s leeway of `exp`) ended at
    // once with token_expired. A fresh one resumes from the last id.
    let last = events
        .last()
        .map(|e| e.id.clone())
        .ok_or("no events before expiry")?;
    if let Ok(mut again) = s
        .stream(
            &format!("session=exp&access_token={short}&cursor={last}"),
            None,
        )
        .await
    {
        let f = again.next().await?.ok_or("ended without a frame")?;
        assert_eq!(f.event, "token_expired", "{f:?}");
        assert!(
            again.next().await?.is_none(),
            "nothing follows token_expired"
        );
    }
    let fresh = token("u1", &["exp"], None);
    let mut resumed = s
        .stream(
            &format!("session=exp&access_token={fresh}&cursor={last}"),
            None,
        )
        .await?;
    events.extend(resumed.until_turn_ended(&turn).await?);
    let ids: Vec<i64> = events.iter().map(seq).collect();
    for w in ids.windows(2) {
        assert_eq!(w[1], w[0] + 1, "no gap and no duplicate: {ids:?}");
    }
    assert_eq!(reply_text(&events, &turn), deltas_text(600));
    Ok(())
}

#[tokio::test]
async fn a_group_chat_shows_each_author_to_everyone() -> TestResult {
    let s = auth_server(&[])?;
    let ann = token("ann", &["room"], None);
    let bob = token("bob", &["room"], None);
    let mut ann_stream = s
        .stream(&format!("session=room&access_token={ann}"), None)
        .await?;
    let mut bob_stream = s
        .stream(&format!("session=room&access_token={bob}"), None)
        .await?;
    let mut turns = Vec::new();
    for (who, t) in [("ann", &ann), ("bob", &bob)] {
        let (status, body, _) = call(
            &s,
            Method::POST,
            "/api/sessions/room/messages",
            Some(json!({"content": format!("/echo from {who}")})),
            Some((t, Via::Header)),
        )
        .await?;
        assert_eq!(status, 202, "{body}");
        turns.push(body["turn_id"].as_str().ok_or("turn")?.to_string());
    }
    // The backend posts for a third user; a user cannot post as someone else.
    let (status, body, _) = call(
        &s,
        Method::POST,
        "/api/sessions/room/messages",
        Some(json!({"content": "/echo from cid", "author": "cid"})),
        Some((SERVICE_KEY, Via::Header)),
    )
    .await?;
    assert_eq!(status, 202, "{body}");
    turns.push(body["turn_id"].as_str().ok_or("turn")?.to_string());
    let (status, body, _) = call(
        &s,
        Method::POST,
        "/api/sessions/room/messages",
        Some(json!({"content": "spoof", "author": "ann"})),
        Some((&bob, Via::Header)),
    )
    .await?;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (403, Some("forbidden"))
    );
    for stream in [&mut ann_stream, &mut bob_stream] {
        let mut authors = Vec::new();
        let mut done = 0;
        while done < turns.len() {
            let e = stream.next_event().await?;
            match &e.body {
                turnstream_protocol::EventBody::MessageReceived { message } => {
                    authors.push(message.author.clone());
                }
                turnstream_protocol::EventBody::TurnEnded { message, .. } => {
                    done += 1;
                    assert_eq!(message.as_ref().and_then(|m| m.author.clone()), None);
                }
                _ => {}
            }
        }
        assert_eq!(
            authors,
            vec![Some("ann".into()), Some("bob".into()), Some("cid".into())]
        );
    }
    let (status, history, _) = call(
        &s,
        Method::GET,
        "/api/sessions/room/history",
        None,
        Some((&ann, Via::Header)),
    )
    .await?;
    assert_eq!(status, 200);
    let users: Vec<Value> = history["messages"]
        .as_array()
        .ok_or("messages")?
        .iter()
        .filter(|m| m["role"] == "user")
        .map(|m| m["author"].clone())
        .collect();
    assert_eq!(users, vec![json!("ann"), json!("bob"), json!("cid")]);
    Ok(())
}

#[tokio::test]
async fn without_auth_authors_are_null() -> TestResult {
    let s = TestServer::start(&[])?;
    let posted = s.send("open", "/echo hi").await?;
    s.wait_turn_end(&posted.turn_id).await?;
    let (status, history) = s.get_json("/api/sessions/open/history").await?;
    assert_eq!(status, 200);
    let first = &history["messages"][0];
    assert!(first.get("author").is_some_and(Value::is_null), "{first}");
    Ok(())
}
