//! Per-client limits against abuse, against the real binary: the message rate, open streams,
//! fair turn slots, and the refusal of cross-site state changes.

mod support;

use std::time::{Duration, SystemTime};

use serde_json::{json, Value};
use support::*;
use turnstream_protocol::TurnState;
use turnstream_server::auth::mint;

const SECRET: &str = "quota-secret-0123456789-abcdefghijklmn";
const SERVICE_KEY: &str = "svc-quota-key";

fn token(sub: &str, sessions: &[&str]) -> String {
    let sessions: Vec<String> = sessions.iter().map(|s| s.to_string()).collect();
    mint(
        SECRET,
        sub,
        &sessions,
        None,
        Duration::from_secs(3600),
        SystemTime::now(),
    )
    .unwrap_or_default()
}

fn auth_server(extra: &[&str]) -> TestResult<TestServer> {
    let mut args = vec!["--auth-secret", SECRET, "--service-key", SERVICE_KEY];
    args.extend_from_slice(extra);
    TestServer::start(&args)
}

/// Posts as `cred`; the status, the body and `Retry-After`.
async fn post_as(
    s: &TestServer,
    cred: &str,
    session: &str,
    content: &str,
) -> TestResult<(u16, Value, Option<String>)> {
    let res = s
        .http
        .post(format!("{}/api/sessions/{session}/messages", s.url))
        .bearer_auth(cred)
        .json(&json!({ "content": content }))
        .send()
        .await?;
    let status = res.status().as_u16();
    let retry = res
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    Ok((status, res.json().await?, retry))
}

#[tokio::test]
async fn messages_per_minute_per_user_with_retry_after() -> TestResult {
    let s = auth_server(&["--messages-per-minute", "3"])?;
    let ann = token("ann", &["a*"]);
    let bob = token("bob", &["b*"]);
    for i in 0..3 {
        let (status, body, _) = post_as(&s, &ann, "a1", &format!("/echo {i}")).await?;
        assert_eq!(status, 202, "{body}");
    }
    let (status, body, retry) = post_as(&s, &ann, "a2", "/echo over").await?;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (429, Some("rate_limited"))
    );
    let secs: u64 = retry.ok_or("no Retry-After")?.parse()?;
    assert!((1..=20).contains(&secs), "Retry-After {secs}");
    // Another user, and the app's backend, are not affected.
    let (status, body, _) = post_as(&s, &bob, "b1", "/echo bob").await?;
    assert_eq!(status, 202, "{body}");
    for i in 0..5 {
        let (status, body, _) = post_as(&s, SERVICE_KEY, "a3", &format!("/echo svc {i}")).await?;
        assert_eq!(status, 202, "{body}");
    }
    Ok(())
}

#[tokio::test]
async fn without_auth_the_peer_address_is_the_client() -> TestResult {
    let s = TestServer::start(&["--messages-per-minute", "2"])?;
    s.send("p1", "/echo 1").await?;
    s.send("p2", "/echo 2").await?;
    let (status, body) = s.post("p3", "/echo 3", None).await?;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (429, Some("rate_limited"))
    );
    Ok(())
}

#[tokio::test]
async fn a_flood_from_one_user_does_not_hold_up_another() -> TestResult {
    let s = auth_server(&["--messages-per-minute", "20"])?;
    let flooder = token("flood", &["f*"]);
    let bob = token("bob", &["calm"]);
    let mut stream = open_stream(
        reqwest::Client::new()
            .get(format!("{}/api/stream?session=calm", s.url))
            .bearer_auth(&bob),
    )
    .await?;
    // 300 messages at once from one user: 20 are accepted, the rest refused.
    let flood = futures::future::join_all((0..300).map(|i| {
        let (s, t) = (&s, &flooder);
        async move { post_as(s, t, &format!("f{}", i % 30), "/echo flood").await }
    }));
    let calm = async {
        let (status, body, _) = post_as(&s, &bob, "calm", "/echo calm").await?;
        assert_eq!(status, 202, "{body}");
        let turn = body["turn_id"].as_str().ok_or("turn")?.to_string();
        let events = stream.until_turn_ended(&turn).await?;
        TestResult::Ok(reply_text(&events, &turn))
    };
    let (flooded, calm) = tokio::join!(flood, calm);
    assert_eq!(calm?, "calm");
    let mut accepted = 0;
    for r in flooded {
        let (status, body, _) = r?;
        match status {
            202 => accepted += 1,
            429 => assert_eq!(body["error"]["code"], "rate_limited"),
            other => return Err(format!("flood answered {other}: {body}").into()),
        }
    }
    assert_eq!(accepted, 20, "a minute's burst, no more");
    Ok(())
}

#[tokio::test]
async fn open_streams_per_user() -> TestResult {
    let s = auth_server(&["--max-streams-per-client", "2"])?;
    let ann = token("ann", &["*"]);
    let bob = token("bob", &["*"]);
    let q = |t: &str| format!("session=s&access_token={t}");
    let first = s.stream(&q(&ann), None).await?;
    let _second = s.stream(&q(&ann), None).await?;
    let (status, body) = s.get_json(&format!("/api/stream?{}", q(&ann))).await?;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (429, Some("too_many_streams"))
    );
    let _bob = s.stream(&q(&bob), None).await?;
    // Closing one frees its place.
    drop(first);
    wait_for(|| async { Ok(s.stream(&q(&ann), None).await.ok()) }).await?;
    Ok(())
}

/// A turn's state, read with the service key.
async fn state_of(s: &TestServer, turn: &str) -> TestResult<TurnState> {
    let res = s
        .http
        .get(format!("{}/api/turns/{turn}", s.url))
        .bearer_auth(SERVICE_KEY)
        .send()
        .await?;
    Ok(res.json::<turnstream_protocol::TurnInfo>().await?.state)
}

async fn wait_state(s: &TestServer, turn: &str, want: TurnState) -> TestResult {
    wait_for(|| async { Ok((state_of(s, turn).await? == want).then_some(())) }).await
}

#[tokio::test]
async fn one_user_cannot_hold_every_turn_slot() -> TestResult {
    let s = auth_server(&["--max-concurrent-turns", "2", "--max-turns-per-client", "1"])?;
    let ann = token("ann", &["a*"]);
    let bob = token("bob", &["b*"]);
    // Ann's two long turns in two sessions: one runs, the other waits for her share...
    let (_, a1, _) = post_as(&s, &ann, "a1", "/sleep 60000 long").await?;
    let a1 = a1["turn_id"].as_str().ok_or("turn")?.to_string();
    wait_state(&s, &a1, TurnState::Running).await?;
    let (_, a2, _) = post_as(&s, &ann, "a2", "/sleep 60000 long").await?;
    let a2 = a2["turn_id"].as_str().ok_or("turn")?.to_string();
    // ...so Bob's turn takes the free slot at once and completes.
    let (status, b1, _) = post_as(&s, &bob, "b1", "/echo bob").await?;
    assert_eq!(status, 202);
    let b1 = b1["turn_id"].as_str().ok_or("turn")?.to_string();
    wait_state(&s, &b1, TurnState::Completed).await?;
    assert_eq!(
        state_of(&s, &a2).await?,
        TurnState::Queued,
        "Ann's second turn waits for her share"
    );
    // When her first turn ends, her second runs.
    let res = s
        .http
        .post(format!("{}/api/turns/{a1}/cancel", s.url))
        .bearer_auth(&ann)
        .send()
        .await?;
    assert_eq!(res.status(), 200);
    wait_state(&s, &a2, TurnState::Running).await?;
    Ok(())
}

#[tokio::test]
async fn cross_site_state_changes_are_refused() -> TestResult {
    let s = TestServer::start(&["--cors-origin", "https://app.example"])?;
    let posted = s.send("x", "/sleep 60000 long").await?;
    wait_for(|| async {
        Ok((s.turn(&posted.turn_id).await?.state == TurnState::Running).then_some(()))
    })
    .await?;
    let own = s.url.clone();
    let send = |method: reqwest::Method, path: String, origin: Option<&str>, body: Option<&str>| {
        let mut req = s.http.request(method, format!("{}{path}", s.url));
        if let Some(o) = origin {
            req = req.header("origin", o);
        }
        if let Some(b) = body {
            req = req.header("content-type", "text/plain").body(b.to_string());
        }
        req.send()
    };
    let cancel = format!("/api/turns/{}/cancel", posted.turn_id);
    // A page elsewhere: refused, with or without a body, whatever its content type.
    for (method, path, body) in [
        (reqwest::Method::POST, cancel.clone(), None),
        (
            reqwest::Method::POST,
            "/api/sessions/x/messages".to_string(),
            Some(r#"{"content":"hi"}"#),
        ),
        (
            reqwest::Method::DELETE,
            "/api/sessions/x/realtime".to_string(),
            None,
        ),
    ] {
        for origin in ["https://evil.example", "null"] {
            let res = send(method.clone(), path.clone(), Some(origin), body).await?;
            let status = res.status().as_u16();
            let v: Value = res.json().await?;
            assert_eq!(
                (status, v["error"]["code"].as_str()),
                (403, Some("forbidden_origin")),
                "{method} {path} from {origin}"
            );
        }
    }
    assert_eq!(
        s.turn(&posted.turn_id).await?.state,
        TurnState::Running,
        "the turn was not cancelled"
    );
    // Reads are CORS's business; a page of this server, an allowed origin and no origin pass.
    let res = send(
        reqwest::Method::GET,
        "/api/sessions/x/history".into(),
        Some("https://evil.example"),
        None,
    )
    .await?;
    assert_eq!(res.status(), 200);
    let res = send(
        reqwest::Method::POST,
        "/api/sessions/y/messages".into(),
        Some(&own),
        None,
    )
    .await?;
    assert_eq!(
        res.status(),
        415,
        "same origin reaches the handler (which wants JSON)"
    );
    let res = send(
        reqwest::Method::POST,
        cancel.clone(),
        Some("https://app.example"),
        None,
    )
    .await?;
    assert_eq!(res.status(), 200);
    let res = send(reqwest::Method::POST, cancel, None, None).await?;
    assert_eq!(res.status(), 200);
    Ok(())
}
