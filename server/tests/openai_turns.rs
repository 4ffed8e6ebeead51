//! The real `turnstream` binary with `--agent openai` against a fake upstream: what a client sees
//! of the agent's turns through the HTTP API and the stream (token usage on the turn, a cut-off
//! reply, llama.cpp's in-stream error line, a cancel while a tool call streams) and the context
//! the model is given.

mod support;

use serde_json::json;
use tokio::sync::oneshot;
use turnstream_protocol::{EventBody, MessageStatus, ToolStatus, TurnState, Usage};

use support::upstream::*;
use support::{wait_for, TestResult, TestServer};

/// The binary using the fake at `base`, failing fast (no retries) unless `extra` says otherwise.
fn server(base: &str, extra: &[&str]) -> TestResult<TestServer> {
    let mut args = vec![
        "--agent",
        "openai",
        "--openai-base-url",
        base,
        "--openai-model",
        "test-model",
        "--coalesce-ms",
        "0",
    ];
    if !extra.contains(&"--openai-max-retries") {
        args.extend(["--openai-max-retries", "0"]);
    }
    args.extend(extra);
    TestServer::start(&args)
}

#[tokio::test]
async fn usage_is_kept_on_the_turn_and_omitted_when_unknown() -> TestResult {
    let (fake, base) = upstream_replies(vec![
        stream(vec![
            chunk(json!({"content": "Hi there"}), Some("stop")),
            usage(),
            done(),
        ]),
        // A server that does not report usage.
        stream(vec![
            chunk(json!({"content": "again"}), Some("stop")),
            done(),
        ]),
    ])
    .await;
    let server = server(
        &base,
        &["--openai-max-tokens", "64", "--openai-temperature", "0.5"],
    )?;
    let sent = server.send("s1", "hello").await?;
    let info = server.wait_turn_end(&sent.turn_id).await?;
    assert_eq!(info.state, TurnState::Completed);
    assert_eq!(info.text, "Hi there");
    assert_eq!(
        info.usage,
        Some(Usage {
            prompt_tokens: 5,
            completion_tokens: 3,
            total_tokens: 8
        })
    );
    let body = fake.request_body(0).ok_or("no request")?;
    assert_eq!(body["max_tokens"], json!(64));
    assert_eq!(body["temperature"], json!(0.5));
    assert_eq!(body["stream_options"], json!({"include_usage": true}));

    let sent = server.send("s1", "more").await?;
    server.wait_turn_end(&sent.turn_id).await?;
    let (status, raw) = server
        .get_json(&format!("/api/turns/{}", sent.turn_id))
        .await?;
    assert_eq!(status, 200);
    assert!(raw.get("usage").is_none(), "usage shown without one: {raw}");
    Ok(())
}

#[tokio::test]
async fn a_cut_off_reply_fails_with_its_text_and_reason() -> TestResult {
    let (_fake, base) = upstream(stream(vec![
        chunk(json!({"content": "The list: 1. apples, 2."}), None),
        chunk(json!({}), Some("length")),
        done(),
    ]))
    .await;
    let server = server(&base, &[])?;
    let (history, cursor) = server.history("s1").await?;
    assert!(history.messages.is_empty());
    let mut events = server
        .stream(&format!("session=s1&cursor={cursor}"), None)
        .await?;
    let sent = server.send("s1", "list fruit").await?;
    let seen = events.until_turn_ended(&sent.turn_id).await?;
    let Some(EventBody::TurnEnded {
        state,
        message,
        error,
    }) = seen.last().map(|e| &e.body)
    else {
        return Err("no turn_ended".into());
    };
    assert_eq!(*state, TurnState::Failed);
    let message = message.as_ref().ok_or("no message")?;
    assert_eq!(message.content, "The list: 1. apples, 2.");
    assert_eq!(message.status, MessageStatus::Failed);
    assert_eq!(
        error.as_deref(),
        Some("the reply was cut off: the model reached its output token limit")
    );
    Ok(())
}

#[tokio::test]
async fn llama_cpp_error_line_fails_the_turn_with_its_message() -> TestResult {
    let (_fake, base) = upstream(stream(vec![
        chunk(json!({"content": "Let me"}), None),
        llama_cpp_error(&json!({"code": 400,
            "message": "the request exceeds the available context size, try increasing it",
            "type": "exceed_context_size_error"})),
        done(),
    ]))
    .await;
    let server = server(&base, &[])?;
    let (_, cursor) = server.history("s1").await?;
    let mut events = server
        .stream(&format!("session=s1&cursor={cursor}"), None)
        .await?;
    let sent = server.send("s1", "a very long question").await?;
    let seen = events.until_turn_ended(&sent.turn_id).await?;
    let Some(EventBody::TurnEnded { state, error, .. }) = seen.last().map(|e| &e.body) else {
        return Err("no turn_ended".into());
    };
    let expected =
        "upstream error: the request exceeds the available context size, try increasing it";
    assert_eq!(
        (*state, error.as_deref()),
        (TurnState::Failed, Some(expected))
    );
    let info = server.turn(&sent.turn_id).await?;
    assert_eq!(info.state, TurnState::Failed);
    assert_eq!(info.error.as_deref(), Some(expected));
    assert_eq!(info.text, "Let me");
    Ok(())
}

#[tokio::test]
async fn cancel_while_a_tool_call_streams_leaves_no_tool_running() -> TestResult {
    let (_fake, base) = upstream(Reply::Stream(vec![
        Piece::Bytes(chunk(
            json!({"role": "assistant", "content": null, "tool_calls": [{"index": 0,
                "id": "call_1", "type": "function",
                "function": {"name": "search", "arguments": "{\"q\": \"ru"}}]}),
            None,
        )),
        // The model never finishes the call.
        Piece::Hold,
    ]))
    .await;
    let server = server(&base, &[])?;
    let sent = server.send("s1", "search").await?;
    wait_for(|| async {
        let t = server.turn(&sent.turn_id).await?;
        Ok(t.tools
            .iter()
            .any(|c| c.call_id == "call_1" && c.status == ToolStatus::Started)
            .then_some(()))
    })
    .await?;
    let (status, _) = server.cancel(&sent.turn_id).await?;
    assert_eq!(status, 200);
    let info = server.wait_turn_end(&sent.turn_id).await?;
    assert_eq!(info.state, TurnState::Cancelled);
    assert_eq!(info.tools.len(), 1);
    assert_eq!(info.tools[0].status, ToolStatus::Failed);
    assert_eq!(info.tools[0].name, "search");
    Ok(())
}

#[tokio::test]
async fn shutdown_while_a_tool_call_streams_leaves_no_tool_running() -> TestResult {
    let (_fake, base) = upstream(Reply::Stream(vec![
        Piece::Bytes(chunk(
            json!({"tool_calls": [{"index": 0, "id": "call_9", "type": "function",
                "function": {"name": "fetch", "arguments": ""}}]}),
            None,
        )),
        Piece::Hold,
    ]))
    .await;
    let mut server = server(&base, &["--shutdown-grace-secs", "0"])?;
    let sent = server.send("s1", "fetch it").await?;
    wait_for(|| async {
        let t = server.turn(&sent.turn_id).await?;
        Ok((!t.tools.is_empty()).then_some(()))
    })
    .await?;
    let exit = server.terminate()?;
    assert!(exit.success(), "{exit:?}");
    server.restart(None)?;
    let info = server.turn(&sent.turn_id).await?;
    assert_eq!(info.state, TurnState::Interrupted);
    assert_eq!(info.tools.len(), 1);
    assert_eq!(info.tools[0].status, ToolStatus::Failed);
    Ok(())
}

#[tokio::test]
async fn context_alternates_after_a_failed_turn_and_an_overlapping_message() -> TestResult {
    let (release, release_rx) = oneshot::channel();
    let (fake, base) = upstream_replies(vec![
        // Turn 1 fails before any text.
        Reply::Status(
            axum::http::StatusCode::BAD_REQUEST,
            "application/json",
            json!({"error": {"message": "bad"}}).to_string(),
        ),
        // Turn 2 holds its reply until turn 3's message has been accepted.
        Reply::Stream(vec![
            Piece::WaitFor(release_rx),
            Piece::Bytes(chunk(json!({"content": "second answer"}), Some("stop"))),
            Piece::Bytes(done()),
        ]),
        stream(vec![
            chunk(json!({"content": "third answer"}), Some("stop")),
            done(),
        ]),
    ])
    .await;
    let server = server(&base, &["--openai-system-prompt", "Be kind."])?;
    let one = server.send("s1", "first").await?;
    let info = server.wait_turn_end(&one.turn_id).await?;
    assert_eq!(info.state, TurnState::Failed);
    assert_eq!(info.error.as_deref(), Some("upstream 400 Bad Request: bad"));

    let two = server.send("s1", "second").await?;
    wait_for(|| async { Ok((fake.request_count() == 2).then_some(())) }).await?;
    let three = server.send("s1", "third").await?;
    let _ = release.send(());
    server.wait_turn_end(&two.turn_id).await?;
    server.wait_turn_end(&three.turn_id).await?;

    assert_eq!(
        fake.request_body(1).ok_or("no second request")?["messages"],
        json!([
            {"role": "system", "content": "Be kind."},
            {"role": "user", "content": "first"},
            {"role": "assistant", "content": "(no reply: the turn failed)"},
            {"role": "user", "content": "second"},
        ])
    );
    // Turn 2's reply was written after message 3, yet the model sees it in its place.
    assert_eq!(
        fake.request_body(2).ok_or("no third request")?["messages"],
        json!([
            {"role": "system", "content": "Be kind."},
            {"role": "user", "content": "first"},
            {"role": "assistant", "content": "(no reply: the turn failed)"},
            {"role": "user", "content": "second"},
            {"role": "assistant", "content": "second answer"},
            {"role": "user", "content": "third"},
        ])
    );
    Ok(())
}
