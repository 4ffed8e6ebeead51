//! Attachments (contract v1.2) against the real binary: a message's files go through
//! `POST /messages`, history, the stream's `message_received` and a worker's claim unchanged, and
//! a message without any shows the v1 shape; bad attachments get a 4xx with the stable error
//! shape and create nothing; the `openai` agent hands images to the model as image parts.

mod support;

use reqwest::header::{HeaderMap, HeaderValue, AUTHORIZATION};
use serde_json::{json, Value};
use support::upstream::*;
use support::*;
use turnstream_protocol::limits::{MAX_ATTACHMENTS_PER_MESSAGE, MAX_CONTENT_BYTES};
use turnstream_protocol::{Attachment, EventBody, TurnState};

/// Posts `body` as a message of `session`; the status and the JSON answer.
async fn post(s: &Api, session: &str, body: Value) -> TestResult<(u16, Value)> {
    s.post_json(&format!("/api/sessions/{session}/messages"), &body)
        .await
}

fn files() -> Value {
    json!([
        {"url": "https://files.example.com/u/1/cat.png?sig=abc", "media_type": "image/png", "name": "cat.png"},
        {"url": "data:application/pdf;base64,JVBERi0xLjQK", "media_type": "application/pdf"},
    ])
}

/// The error code of an answer, after checking it has the stable shape.
fn code(body: &Value) -> TestResult<&str> {
    let error = body["error"].as_object().ok_or("no error object")?;
    if error.len() != 2 || !error["message"].is_string() {
        return Err(format!("not the error shape: {body}").into());
    }
    Ok(error["code"].as_str().unwrap_or(""))
}

#[tokio::test]
async fn attachments_round_trip_through_post_history_and_the_stream() -> TestResult {
    let server = TestServer::start(&[])?;
    let mut stream = server.stream("session=att", None).await?;
    let (status, posted) = post(
        &server,
        "att",
        json!({"content": "/echo look", "client_message_id": "c-1", "attachments": files()}),
    )
    .await?;
    assert_eq!(status, 202, "{posted}");
    let expected: Vec<Attachment> = serde_json::from_value(files())?;

    // The stream's `message_received` carries them, exactly as posted.
    let event = loop {
        let e = stream.next_event().await?;
        if let EventBody::MessageReceived { message } = &e.body {
            break message.clone();
        }
    };
    assert_eq!(event.attachments, expected);
    assert_eq!(event.client_message_id.as_deref(), Some("c-1"));

    // History, and the raw JSON: `name` left out where none was given.
    let (history, _) = server.history("att").await?;
    assert_eq!(history.messages[0].attachments, expected);
    let (_, raw) = server.get_json("/api/sessions/att/history").await?;
    assert_eq!(raw["messages"][0]["attachments"], files());

    // A retry with the same files is the same message; with other files, a conflict.
    let (status, again) = post(
        &server,
        "att",
        json!({"content": "/echo look", "client_message_id": "c-1", "attachments": files()}),
    )
    .await?;
    assert_eq!((status, &again["turn_id"]), (200, &posted["turn_id"]));
    let (status, conflict) = post(
        &server,
        "att",
        json!({"content": "/echo look", "client_message_id": "c-1", "attachments": []}),
    )
    .await?;
    assert_eq!(status, 409);
    assert_eq!(code(&conflict)?, "client_message_id_conflict");

    // An image alone needs no text.
    let (status, alone) = post(
        &server,
        "att",
        json!({"content": "", "attachments": [files()[0].clone()]}),
    )
    .await?;
    assert_eq!(status, 202, "{alone}");

    // A message without attachments, and the reply, show v1's shape: no `attachments` field.
    let plain = server.send("att", "/echo plain").await?;
    server.wait_turn_end(&plain.turn_id).await?;
    let (_, raw) = server.get_json("/api/sessions/att/history").await?;
    let messages = raw["messages"].as_array().ok_or("no messages")?;
    assert_eq!(messages.len(), 6, "{raw}");
    for m in messages {
        let with = m["role"] == "user" && m["content"] != "/echo plain";
        assert_eq!(m.get("attachments").is_some(), with, "{m}");
    }
    let events = stream.until_turn_ended(&plain.turn_id).await?;
    let received = events
        .iter()
        .find(|e| {
            e.turn_id.as_deref() == Some(&plain.turn_id)
                && matches!(e.body, EventBody::MessageReceived { .. })
        })
        .ok_or("no message_received of the plain message")?;
    let raw = serde_json::to_value(received)?;
    assert!(raw["message"].get("attachments").is_none(), "{raw}");
    Ok(())
}

#[tokio::test]
async fn bad_attachments_are_refused_with_the_error_shape_and_create_nothing() -> TestResult {
    let server = TestServer::start(&[])?;
    let image = |url: &str| json!({"url": url, "media_type": "image/png"});
    let many: Vec<Value> = (0..=MAX_ATTACHMENTS_PER_MESSAGE)
        .map(|i| image(&format!("https://h/{i}.png")))
        .collect();
    let inline = format!("data:image/png;base64,{}", "A".repeat(MAX_CONTENT_BYTES));
    let cases = [
        (json!([image("ftp://h/a.png")]), 400, "invalid_attachment"),
        (
            json!([image("javascript:alert(1)")]),
            400,
            "invalid_attachment",
        ),
        (
            json!([image("https://h/a b.png")]),
            400,
            "invalid_attachment",
        ),
        (
            json!([{"url": "https://h/a.png"}]),
            400,
            "invalid_attachment",
        ),
        (
            json!([{"url": "https://h/a.png", "media_type": "png"}]),
            400,
            "invalid_attachment",
        ),
        (
            json!([{"media_type": "image/png"}]),
            400,
            "invalid_attachment",
        ),
        (json!(many), 400, "too_many_attachments"),
        (json!([image(&inline)]), 413, "content_too_large"),
        (
            json!([{"url": 7, "media_type": "image/png"}]),
            422,
            "invalid_body",
        ),
        (json!({"url": "https://h/a.png"}), 422, "invalid_body"),
    ];
    for (attachments, status, expected) in cases {
        let (got, body) = post(
            &server,
            "bad",
            json!({"content": "hi", "attachments": attachments}),
        )
        .await?;
        assert_eq!((got, code(&body)?), (status, expected), "{attachments}");
    }
    let (status, body) = post(&server, "bad", json!({"content": " ", "attachments": []})).await?;
    assert_eq!((status, code(&body)?), (400, "empty_content"));
    // Which attachment and why, for people.
    let (_, body) = post(
        &server,
        "bad",
        json!({"content": "hi", "attachments": [image("https://h/ok.png"), image("ftp://h/a")]}),
    )
    .await?;
    let message = body["error"]["message"].as_str().unwrap_or("");
    assert!(message.contains("attachments[1]"), "{message}");
    // A data: URL counts against the size cap together with the content.
    let half = "x".repeat(MAX_CONTENT_BYTES / 2);
    let (status, body) = post(
        &server,
        "bad",
        json!({"content": half, "attachments": [image(&format!("data:,{half}"))]}),
    )
    .await?;
    assert_eq!((status, code(&body)?), (413, "content_too_large"));
    let (history, _) = server.history("bad").await?;
    assert!(history.messages.is_empty(), "{:?}", history.messages);
    Ok(())
}

#[tokio::test]
async fn a_worker_claim_hands_out_the_attachments() -> TestResult {
    const KEY: &str = "svc-attachments-key-01";
    let mut server = TestServer::start(&[
        "--agent",
        "worker",
        "--service-key",
        KEY,
        "--auth-secret",
        "test-secret-0123456789-abcdefghijklmnop",
    ])?;
    let mut headers = HeaderMap::new();
    headers.insert(
        AUTHORIZATION,
        HeaderValue::from_str(&format!("Bearer {KEY}"))?,
    );
    server.http = reqwest::Client::builder()
        .default_headers(headers)
        .timeout(DEADLINE)
        .pool_max_idle_per_host(0)
        .build()?;
    let (status, _) = post(
        &server,
        "w",
        json!({"content": "first", "attachments": [files()[0].clone()]}),
    )
    .await?;
    assert_eq!(status, 202);
    let claim = |wait_ms: u64| {
        let server = &server;
        async move {
            let res = server
                .http
                .post(format!("{}/api/worker/claim", server.url))
                .json(&json!({"worker_id": "w1", "wait_ms": wait_ms}))
                .send()
                .await?;
            let body: Value = res.json().await?;
            TestResult::<Value>::Ok(body["turns"][0].clone())
        }
    };
    let first = claim(10_000).await?;
    assert_eq!(first["user_message"]["attachments"], json!([files()[0]]));
    let lease = first["lease"]["token"].as_str().ok_or("no lease")?;
    let turn = first["turn_id"].as_str().ok_or("no turn")?;
    let res = server
        .http
        .post(format!("{}/api/worker/turns/{turn}/complete", server.url))
        .json(&json!({"lease": lease, "seq": 0}))
        .send()
        .await?;
    assert_eq!(res.status(), 200);

    // The next turn's history carries the earlier message's files too.
    let (status, _) = post(
        &server,
        "w",
        json!({"content": "second", "attachments": files()}),
    )
    .await?;
    assert_eq!(status, 202);
    let second = claim(10_000).await?;
    assert_eq!(second["user_message"]["attachments"], files());
    assert_eq!(second["history"][0]["attachments"], json!([files()[0]]));
    assert!(second["history"][1].get("attachments").is_none());
    Ok(())
}

#[tokio::test]
async fn the_openai_agent_sends_images_as_image_parts() -> TestResult {
    let (fake, base) = upstream_replies(vec![
        stream(vec![
            chunk(json!({"content": "Two cats."}), Some("stop")),
            done(),
        ]),
        stream(vec![
            chunk(json!({"content": "Yes."}), Some("stop")),
            done(),
        ]),
    ])
    .await;
    let server = TestServer::start(&[
        "--agent",
        "openai",
        "--openai-base-url",
        &base,
        "--openai-model",
        "vision-model",
        "--openai-max-retries",
        "0",
    ])?;
    let png = "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR4nGNgYGBgAAAABQABpfZFQAAAAABJRU5ErkJggg==";
    let attachments = json!([
        {"url": "https://files.example.com/cat-1.jpg", "media_type": "image/jpeg", "name": "cat-1.jpg"},
        {"url": png, "media_type": "image/png"},
        {"url": "https://files.example.com/notes.pdf", "media_type": "application/pdf", "name": "notes.pdf"},
    ]);
    let (status, posted) = post(
        &server,
        "vision",
        json!({"content": "What is in these?", "attachments": attachments}),
    )
    .await?;
    assert_eq!(status, 202, "{posted}");
    let turn = posted["turn_id"].as_str().ok_or("no turn")?;
    let info = server.wait_turn_end(turn).await?;
    assert_eq!(
        (info.state, info.text.as_str()),
        (TurnState::Completed, "Two cats.")
    );

    let image_parts = json!([
        {"type": "text", "text": "What is in these?"},
        {"type": "image_url", "image_url": {"url": "https://files.example.com/cat-1.jpg"}},
        {"type": "image_url", "image_url": {"url": png}},
        {"type": "text", "text": "[Attached file \"notes.pdf\" (application/pdf): https://files.example.com/notes.pdf]"},
    ]);
    let body = fake.request_body(0).ok_or("the upstream got no request")?;
    assert_eq!(
        body["messages"],
        json!([{"role": "user", "content": image_parts}])
    );

    // The next turn's context shows the model the same images again, then a plain question.
    let next = server.send("vision", "Are they asleep?").await?;
    server.wait_turn_end(&next.turn_id).await?;
    let body = fake.request_body(1).ok_or("no second request")?;
    assert_eq!(
        body["messages"],
        json!([
            {"role": "user", "content": image_parts},
            {"role": "assistant", "content": "Two cats."},
            {"role": "user", "content": "Are they asleep?"},
        ])
    );
    Ok(())
}
