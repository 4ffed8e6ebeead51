//! `OpenAiAgent` when the upstream misbehaves: rate limits and server errors are retried (before
//! anything was shown) with backoff that honours `Retry-After`; an HTML error page never reaches
//! the user; an upstream that goes silent mid-reply fails the turn after the idle timeout.

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use serde_json::json;
use tokio::sync::oneshot;
use turnstream_server::agent::openai::OpenAiOptions;
use turnstream_server::agent::{Agent, AgentError, Emission, TurnSink};

use support::upstream::*;

fn rate_limited(retry_after: &str) -> Reply {
    Reply::StatusWith(
        StatusCode::TOO_MANY_REQUESTS,
        vec![
            ("content-type", "application/json".into()),
            ("retry-after", retry_after.into()),
        ],
        json!({"error": {"message": "Rate limit reached for gpt-4o-mini on requests per min (RPM): Limit 3, Used 3, Requested 1.",
            "type": "requests", "param": null, "code": "rate_limit_exceeded"}})
        .to_string(),
    )
}

fn ok_reply(text: &str) -> Reply {
    stream(vec![chunk(json!({"content": text}), Some("stop")), done()])
}

#[tokio::test]
async fn rate_limit_with_retry_after_then_success() {
    let (fake, base) = upstream_replies(vec![rate_limited("1"), ok_reply("hello")]).await;
    // Backoff alone would wait 1 ms: a second between the attempts is the upstream's own ask.
    let (result, emissions) = run_turn(&agent(&base, fast_retries()), ctx("hi", vec![])).await;
    assert_eq!(result, Ok(()));
    assert_eq!(
        without_usage(emissions),
        vec![Emission::Response("hello".into())]
    );
    let requests = fake.requests.lock().expect("requests lock");
    assert_eq!(requests.len(), 2);
    let waited = requests[1].at.duration_since(requests[0].at);
    assert!(
        waited >= Duration::from_millis(950),
        "retried after {waited:?}"
    );
}

#[tokio::test]
async fn retry_after_beyond_a_minute_fails_at_once() {
    let (fake, base) = upstream_replies(vec![rate_limited("3600"), ok_reply("late")]).await;
    let started = Instant::now();
    let (result, _) = run_turn(&agent(&base, fast_retries()), ctx("hi", vec![])).await;
    let error = result.expect_err("a long Retry-After fails the turn");
    assert!(
        error
            .0
            .starts_with("upstream 429 Too Many Requests: Rate limit reached"),
        "{error}"
    );
    assert!(
        error
            .0
            .ends_with("(the server asked to retry after 3600 s)"),
        "{error}"
    );
    assert_eq!(fake.request_count(), 1);
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[tokio::test]
async fn html_502_page_is_retried_then_named_without_the_page() {
    let (fake, base) = upstream_replies(vec![nginx_502(), nginx_502(), nginx_502()]).await;
    let options = OpenAiOptions {
        max_retries: 2,
        ..fast_retries()
    };
    let (result, emissions) = run_turn(&agent(&base, options), ctx("hi", vec![])).await;
    assert_eq!(
        result,
        Err(AgentError(
            "upstream 502 Bad Gateway: the model server, or a proxy in front of it, failed (after 3 attempts)"
                .into()
        ))
    );
    assert!(emissions.is_empty());
    assert_eq!(fake.request_count(), 3);
}

#[tokio::test]
async fn server_error_then_success_shows_the_reply_once() {
    let (fake, base) = upstream_replies(vec![
        Reply::Status(
            StatusCode::SERVICE_UNAVAILABLE,
            "application/json",
            json!({"object": "error", "message": "The model is loading", "code": 503}).to_string(),
        ),
        ok_reply("ready"),
    ])
    .await;
    let (result, emissions) = run_turn(&agent(&base, fast_retries()), ctx("hi", vec![])).await;
    assert_eq!(result, Ok(()));
    assert_eq!(response_text(&emissions), "ready");
    assert_eq!(fake.request_count(), 2);
}

#[tokio::test]
async fn connection_lost_before_the_first_token_is_retried() {
    let (abort, abort_rx) = oneshot::channel();
    let _ = abort.send(());
    let (fake, base) = upstream_replies(vec![
        Reply::Stream(vec![Piece::AbortWhen(abort_rx)]),
        ok_reply("second try"),
    ])
    .await;
    let (result, emissions) = run_turn(&agent(&base, fast_retries()), ctx("hi", vec![])).await;
    assert_eq!(result, Ok(()));
    assert_eq!(response_text(&emissions), "second try");
    assert_eq!(fake.request_count(), 2);
}

#[tokio::test]
async fn nothing_is_retried_once_text_was_shown() {
    let (abort, abort_rx) = oneshot::channel();
    let (fake, base) = upstream_replies(vec![
        Reply::Stream(vec![
            Piece::Bytes(chunk(json!({"content": "half"}), None)),
            Piece::AbortWhen(abort_rx),
        ]),
        ok_reply("never"),
    ])
    .await;
    let agent = Arc::new(agent(&base, fast_retries()));
    let (sink, mut rx) = TurnSink::channel();
    let turn = tokio::spawn({
        let agent = Arc::clone(&agent);
        async move { agent.run(ctx("hi", vec![]), sink).await }
    });
    // Cut the connection only once the first text has been shown.
    let first = tokio::time::timeout(AGENT_DEADLINE, rx.recv())
        .await
        .expect("first delta before the deadline");
    assert_eq!(first, Some(Emission::Response("half".into())));
    let _ = abort.send(());
    let result = tokio::time::timeout(AGENT_DEADLINE, turn)
        .await
        .expect("turn ended before the deadline")
        .expect("turn task joined");
    let error = result.expect_err("a lost connection mid-reply fails the turn");
    assert!(
        error.0.starts_with("upstream stream ended early"),
        "{error}"
    );
    let mut rest = Vec::new();
    while let Ok(e) = rx.try_recv() {
        rest.push(e);
    }
    assert_eq!(response_text(&rest), "", "the reply is not shown twice");
    assert_eq!(fake.request_count(), 1);
}

#[tokio::test]
async fn client_errors_are_not_retried() {
    let (fake, base) = upstream_replies(vec![
        Reply::Status(
            StatusCode::BAD_REQUEST,
            "application/json",
            json!({"error": {"message": "Unrecognized request argument supplied: stream_options",
                "type": "invalid_request_error"}})
            .to_string(),
        ),
        ok_reply("never"),
    ])
    .await;
    let (result, _) = run_turn(&agent(&base, fast_retries()), ctx("hi", vec![])).await;
    assert_eq!(
        result,
        Err(AgentError(
            "upstream 400 Bad Request: Unrecognized request argument supplied: stream_options"
                .into()
        ))
    );
    assert_eq!(fake.request_count(), 1);
}

#[tokio::test]
async fn silent_upstream_mid_reply_fails_after_the_idle_timeout() {
    let (fake, base) = upstream(Reply::Stream(vec![
        Piece::Bytes(chunk(
            json!({"role": "assistant", "content": "Thinking about"}),
            None,
        )),
        Piece::Hold,
    ]))
    .await;
    let options = OpenAiOptions {
        idle_timeout: Duration::from_secs(1),
        ..fast_retries()
    };
    let started = Instant::now();
    let (result, emissions) = run_turn(&agent(&base, options), ctx("hi", vec![])).await;
    assert_eq!(
        result,
        Err(AgentError(
            "upstream timed out: the model server sent nothing for 1 s mid-reply".into()
        ))
    );
    assert_eq!(response_text(&emissions), "Thinking about");
    assert!(started.elapsed() >= Duration::from_secs(1));
    assert_eq!(fake.request_count(), 1);
}

#[tokio::test]
async fn an_error_chunk_with_a_retryable_code_before_any_text_is_retried() {
    // OpenRouter reports a provider failure inside the 200 stream, before the first token.
    let (fake, base) = upstream_replies(vec![
        stream(vec![
            data(&json!({"id": "gen-1", "object": "chat.completion.chunk",
                "error": {"code": 502, "message": "Provider returned error"},
                "choices": [{"index": 0, "delta": {"content": ""}, "finish_reason": "error"}]})),
            done(),
        ]),
        ok_reply("recovered"),
    ])
    .await;
    let (result, emissions) = run_turn(&agent(&base, fast_retries()), ctx("hi", vec![])).await;
    assert_eq!(result, Ok(()));
    assert_eq!(response_text(&emissions), "recovered");
    assert_eq!(fake.request_count(), 2);

    // A request the upstream calls bad is not tried again.
    let (fake, base) = upstream_replies(vec![
        stream(vec![
            data(
                &json!({"object": "error", "message": "maximum context length exceeded",
                "type": "BadRequestError", "code": 400}),
            ),
            done(),
        ]),
        ok_reply("never"),
    ])
    .await;
    let (result, _) = run_turn(&agent(&base, fast_retries()), ctx("hi", vec![])).await;
    assert_eq!(
        result,
        Err(AgentError(
            "upstream error: maximum context length exceeded".into()
        ))
    );
    assert_eq!(fake.request_count(), 1);
}
