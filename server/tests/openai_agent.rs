//! `OpenAiAgent` against an in-process fake upstream that speaks the chat-completions streaming
//! protocol byte for byte: `data: {json}\n\n` chunks, then `data: [DONE]\n\n`.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use serde_json::{json, Value};
use tokio::sync::oneshot;
use turnstream_protocol::{Message, MessageStatus, Role, ToolCall, ToolStatus};
use turnstream_server::agent::openai::OpenAiAgent;
use turnstream_server::agent::{Agent, AgentError, Emission, TurnContext, TurnSink};

/// Deadline for anything the tests wait on; a hang fails instead of blocking the suite.
const DEADLINE: Duration = Duration::from_secs(10);

/// One piece of a scripted streaming body.
enum Piece {
    /// Sent as its own HTTP chunk, so the client sees a boundary exactly after it.
    Bytes(Vec<u8>),
    /// Wait for the signal, then abort the connection mid-body.
    AbortWhen(oneshot::Receiver<()>),
}

/// What the fake answers to the next request.
enum Reply {
    Stream(Vec<Piece>),
    Status(StatusCode, &'static str, String),
}

/// A request as the fake received it.
struct Recorded {
    headers: HeaderMap,
    body: Value,
}

#[derive(Clone)]
struct Fake {
    reply: Arc<Mutex<Option<Reply>>>,
    requests: Arc<Mutex<Vec<Recorded>>>,
}

async fn completions(
    State(fake): State<Fake>,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> Response {
    fake.requests
        .lock()
        .expect("requests lock")
        .push(Recorded { headers, body });
    let reply = fake.reply.lock().expect("reply lock").take();
    match reply {
        None => (StatusCode::IM_A_TEAPOT, "no reply scripted").into_response(),
        Some(Reply::Status(status, content_type, body)) => {
            (status, [("content-type", content_type)], body).into_response()
        }
        Some(Reply::Stream(pieces)) => {
            let stream = futures::stream::unfold(VecDeque::from(pieces), |mut rest| async move {
                match rest.pop_front()? {
                    Piece::Bytes(bytes) => Some((Ok::<_, std::io::Error>(bytes), rest)),
                    Piece::AbortWhen(signal) => {
                        let _ = signal.await;
                        // An error from the body stream makes hyper drop the connection
                        // without the terminating chunk.
                        Some((Err(std::io::Error::other("abort")), rest))
                    }
                }
            });
            Response::builder()
                .header("content-type", "text/event-stream")
                .body(Body::from_stream(stream))
                .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
        }
    }
}

/// Starts a fake upstream that answers its first request with `reply`; returns it and its
/// base URL (`http://127.0.0.1:PORT/v1`).
async fn upstream(reply: Reply) -> (Fake, String) {
    let fake = Fake {
        reply: Arc::new(Mutex::new(Some(reply))),
        requests: Arc::new(Mutex::new(Vec::new())),
    };
    let app = Router::new()
        .route("/v1/chat/completions", post(completions))
        .with_state(fake.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind fake upstream");
    let addr = listener.local_addr().expect("local addr");
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (fake, format!("http://{addr}/v1"))
}

fn ctx(user_message: &str, history: Vec<Message>) -> TurnContext {
    TurnContext {
        session_id: "s1".into(),
        turn_id: "t1".into(),
        user_message: user_message.into(),
        history,
    }
}

fn message(role: Role, content: &str, status: MessageStatus) -> Message {
    Message {
        message_id: format!("m-{content}"),
        client_message_id: None,
        role,
        content: content.into(),
        status,
        turn_id: None,
        created_at: 0,
        event_id: "e-1".into(),
        author: None,
    }
}

/// One `chat.completion.chunk` frame as OpenAI sends it.
fn chunk(delta: Value, finish_reason: Option<&str>) -> Vec<u8> {
    let frame = json!({
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1_700_000_000,
        "model": "gpt-test",
        "system_fingerprint": "fp_1",
        "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish_reason}],
    });
    format!("data: {frame}\n\n").into_bytes()
}

fn done() -> Vec<u8> {
    b"data: [DONE]\n\n".to_vec()
}

/// The usage chunk of `stream_options.include_usage`: no choices.
fn usage() -> Vec<u8> {
    let frame = json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "choices": [],
        "usage": {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8}});
    format!("data: {frame}\n\n").into_bytes()
}

fn stream(chunks: Vec<Vec<u8>>) -> Reply {
    Reply::Stream(chunks.into_iter().map(Piece::Bytes).collect())
}

/// Runs one turn to its end and drains everything it emitted, in order.
async fn run_turn(
    agent: &OpenAiAgent,
    ctx: TurnContext,
) -> (Result<(), AgentError>, Vec<Emission>) {
    let (sink, mut rx) = TurnSink::channel();
    let result = tokio::time::timeout(DEADLINE, agent.run(ctx, sink))
        .await
        .expect("turn ended before the deadline");
    let mut emissions = Vec::new();
    while let Ok(e) = rx.try_recv() {
        emissions.push(e);
    }
    (result, emissions)
}

fn response_text(emissions: &[Emission]) -> String {
    emissions
        .iter()
        .filter_map(|e| match e {
            Emission::Response(d) => Some(d.as_str()),
            _ => None,
        })
        .collect()
}

fn tool(call_id: &str, name: &str, status: ToolStatus, input: Option<&str>) -> Emission {
    Emission::Tool(ToolCall {
        call_id: call_id.into(),
        name: name.into(),
        status,
        input_preview: input.map(str::to_string),
        output_preview: None,
    })
}

#[tokio::test]
async fn content_deltas_stream_in_order() {
    let (_fake, base) = upstream(stream(vec![
        chunk(
            json!({"role": "assistant", "content": "", "refusal": null}),
            None,
        ),
        chunk(json!({"content": "Hel"}), None),
        chunk(json!({"content": "lo"}), None),
        chunk(json!({"content": " world"}), None),
        chunk(json!({}), Some("stop")),
        usage(),
        done(),
    ]))
    .await;
    let agent = OpenAiAgent::new(base, "gpt-test", None);
    let (result, emissions) = run_turn(&agent, ctx("hi", vec![])).await;
    assert_eq!(result, Ok(()));
    assert_eq!(
        emissions,
        vec![
            Emission::Response("Hel".into()),
            Emission::Response("lo".into()),
            Emission::Response(" world".into()),
        ]
    );
    assert_eq!(response_text(&emissions), "Hello world");
}

#[tokio::test]
async fn reasoning_spellings_map_to_thinking() {
    let (_fake, base) = upstream(stream(vec![
        chunk(
            json!({"role": "assistant", "reasoning_content": "Let me"}),
            None,
        ),
        chunk(json!({"reasoning": " think."}), None),
        // Servers in transition send both spellings with the same text: it counts once.
        chunk(
            json!({"reasoning_content": " Ok", "reasoning": " Ok"}),
            None,
        ),
        chunk(json!({"content": "42", "reasoning_content": null}), None),
        chunk(json!({}), Some("stop")),
        done(),
    ]))
    .await;
    let agent = OpenAiAgent::new(base, "m", None);
    let (result, emissions) = run_turn(&agent, ctx("q", vec![])).await;
    assert_eq!(result, Ok(()));
    assert_eq!(
        emissions,
        vec![
            Emission::Thinking("Let me".into()),
            Emission::Thinking(" think.".into()),
            Emission::Thinking(" Ok".into()),
            Emission::Response("42".into()),
        ]
    );
}

#[tokio::test]
async fn tool_calls_over_several_chunks_start_once_and_finish_once() {
    let (_fake, base) = upstream(stream(vec![
        chunk(json!({"role": "assistant", "content": null}), None),
        chunk(
            json!({"tool_calls": [{"index": 0, "id": "call_abc", "type": "function",
                "function": {"name": "get_weather", "arguments": ""}}]}),
            None,
        ),
        chunk(
            json!({"tool_calls": [{"index": 0, "function": {"arguments": "{\"loc"}}]}),
            None,
        ),
        chunk(
            json!({"tool_calls": [{"index": 0, "function": {"arguments": "ation\": \"Pa"}}]}),
            None,
        ),
        // A second call without an id (llama.cpp style): named after its index.
        chunk(
            json!({"tool_calls": [{"index": 1, "type": "function",
                "function": {"name": "get_time", "arguments": "{}"}}]}),
            None,
        ),
        chunk(
            json!({"tool_calls": [{"index": 0, "function": {"arguments": "ris\"}"}}]}),
            None,
        ),
        chunk(json!({}), Some("tool_calls")),
        done(),
    ]))
    .await;
    let agent = OpenAiAgent::new(base, "m", None);
    let (result, emissions) = run_turn(&agent, ctx("weather?", vec![])).await;
    assert_eq!(result, Ok(()));
    assert_eq!(
        emissions,
        vec![
            tool("call_abc", "get_weather", ToolStatus::Started, None),
            tool("call_1", "get_time", ToolStatus::Started, None),
            tool(
                "call_abc",
                "get_weather",
                ToolStatus::Finished,
                Some("{\"location\": \"Paris\"}")
            ),
            tool("call_1", "get_time", ToolStatus::Finished, Some("{}")),
        ]
    );
}

#[tokio::test]
async fn tool_call_is_finished_at_end_of_stream_without_tool_calls_reason() {
    let (_fake, base) = upstream(stream(vec![
        chunk(
            json!({"tool_calls": [{"index": 0, "id": "c9",
                "function": {"name": "search", "arguments": "{\"q\":"}}]}),
            None,
        ),
        chunk(
            json!({"tool_calls": [{"index": 0, "function": {"arguments": "\"rust\"}"}}]}),
            None,
        ),
        done(),
    ]))
    .await;
    let agent = OpenAiAgent::new(base, "m", None);
    let (result, emissions) = run_turn(&agent, ctx("find", vec![])).await;
    assert_eq!(result, Ok(()));
    assert_eq!(
        emissions,
        vec![
            tool("c9", "search", ToolStatus::Started, None),
            tool(
                "c9",
                "search",
                ToolStatus::Finished,
                Some("{\"q\":\"rust\"}")
            ),
        ]
    );
}

#[tokio::test]
async fn sends_history_model_stream_and_key() {
    let history = vec![
        message(Role::User, "first question", MessageStatus::Complete),
        message(Role::Assistant, "first answer", MessageStatus::Complete),
        message(Role::User, "second question", MessageStatus::Complete),
        // A turn that failed before any text: nothing to send.
        message(Role::Assistant, "", MessageStatus::Failed),
        message(Role::User, "third question", MessageStatus::Complete),
        message(Role::Assistant, "partial", MessageStatus::Cancelled),
    ];
    let (fake, base) = upstream(stream(vec![
        chunk(json!({"content": "ok"}), Some("stop")),
        done(),
    ]))
    .await;
    // A trailing slash on the base URL must not double up in the path (the fake would 404).
    let agent = OpenAiAgent::new(format!("{base}/"), "model-x", Some("sk-test".into()));
    let (result, _) = run_turn(&agent, ctx("now", history)).await;
    assert_eq!(result, Ok(()));

    let requests = fake.requests.lock().expect("requests lock");
    assert_eq!(requests.len(), 1);
    let request = &requests[0];
    assert_eq!(
        request
            .headers
            .get("authorization")
            .and_then(|v| v.to_str().ok()),
        Some("Bearer sk-test")
    );
    assert_eq!(request.body["model"], json!("model-x"));
    assert_eq!(request.body["stream"], json!(true));
    assert_eq!(
        request.body["messages"],
        json!([
            {"role": "user", "content": "first question"},
            {"role": "assistant", "content": "first answer"},
            {"role": "user", "content": "second question"},
            {"role": "user", "content": "third question"},
            {"role": "assistant", "content": "partial"},
            {"role": "user", "content": "now"},
        ])
    );
}

#[tokio::test]
async fn no_authorization_header_without_a_key() {
    for key in [None, Some(String::new())] {
        let (fake, base) = upstream(stream(vec![
            chunk(json!({"content": "ok"}), Some("stop")),
            done(),
        ]))
        .await;
        let agent = OpenAiAgent::new(base, "llama3", key.clone());
        let (result, emissions) = run_turn(&agent, ctx("hello", vec![])).await;
        assert_eq!(result, Ok(()));
        assert_eq!(emissions, vec![Emission::Response("ok".into())]);
        let requests = fake.requests.lock().expect("requests lock");
        assert_eq!(requests.len(), 1);
        assert!(
            requests[0].headers.get("authorization").is_none(),
            "key {key:?} sent an Authorization header"
        );
        assert_eq!(
            requests[0].body["messages"],
            json!([{"role": "user", "content": "hello"}])
        );
    }
}

#[tokio::test]
async fn upstream_401_fails_with_openai_error_message() {
    let body = json!({"error": {
        "message": "Incorrect API key provided: sk-bad. You can find your API key at https://platform.openai.com/account/api-keys.",
        "type": "invalid_request_error", "param": null, "code": "invalid_api_key"}});
    let (_fake, base) = upstream(Reply::Status(
        StatusCode::UNAUTHORIZED,
        "application/json",
        body.to_string(),
    ))
    .await;
    let agent = OpenAiAgent::new(base, "gpt-test", Some("sk-bad".into()));
    let (result, emissions) = run_turn(&agent, ctx("hi", vec![])).await;
    let error = result.expect_err("a 401 fails the turn");
    assert!(
        error
            .0
            .starts_with("upstream 401: Incorrect API key provided: sk-bad."),
        "{error}"
    );
    assert!(!error.0.contains("invalid_request_error"), "{error}");
    assert!(emissions.is_empty());
}

#[tokio::test]
async fn upstream_500_plain_text_long_body_and_empty_body() {
    let (_fake, base) = upstream(Reply::Status(
        StatusCode::INTERNAL_SERVER_ERROR,
        "text/plain",
        "model crashed: CUDA out of memory\n".into(),
    ))
    .await;
    let (result, _) = run_turn(&OpenAiAgent::new(base, "m", None), ctx("hi", vec![])).await;
    assert_eq!(
        result,
        Err(AgentError(
            "upstream 500: model crashed: CUDA out of memory".into()
        ))
    );

    // A long error page is cut to 500 bytes, on a character boundary.
    let page = "é".repeat(2000);
    let (_fake, base) = upstream(Reply::Status(StatusCode::BAD_GATEWAY, "text/html", page)).await;
    let (result, _) = run_turn(&OpenAiAgent::new(base, "m", None), ctx("hi", vec![])).await;
    let error = result.expect_err("a 502 fails the turn");
    let detail = error
        .0
        .strip_prefix("upstream 502: ")
        .expect("status prefix");
    assert!(detail.len() <= 500, "{} bytes", detail.len());
    assert!(detail.len() > 400, "{} bytes", detail.len());
    assert!(detail.starts_with("éé"));

    let (_fake, base) = upstream(Reply::Status(
        StatusCode::SERVICE_UNAVAILABLE,
        "text/plain",
        String::new(),
    ))
    .await;
    let (result, _) = run_turn(&OpenAiAgent::new(base, "m", None), ctx("hi", vec![])).await;
    assert_eq!(
        result,
        Err(AgentError("upstream 503: Service Unavailable".into()))
    );
}

#[tokio::test]
async fn error_frame_mid_stream_fails_with_its_message() {
    let error = json!({"error": {"message": "The server had an error while processing your request.",
        "type": "server_error", "param": null, "code": null}});
    let (_fake, base) = upstream(stream(vec![
        chunk(json!({"role": "assistant", "content": "Par"}), None),
        chunk(
            json!({"tool_calls": [{"index": 0, "id": "c1", "function": {"name": "f", "arguments": "{"}}]}),
            None,
        ),
        format!("data: {error}\n\n").into_bytes(),
        done(),
    ]))
    .await;
    let agent = OpenAiAgent::new(base, "m", None);
    let (result, emissions) = run_turn(&agent, ctx("hi", vec![])).await;
    let error = result.expect_err("an error frame fails the turn");
    assert!(
        error
            .0
            .contains("The server had an error while processing your request."),
        "{error}"
    );
    // The text so far is kept, and the open call does not stay running.
    assert_eq!(
        emissions,
        vec![
            Emission::Response("Par".into()),
            tool("c1", "f", ToolStatus::Started, None),
            tool("c1", "f", ToolStatus::Failed, Some("{")),
        ]
    );
}

#[tokio::test]
async fn connection_closed_mid_stream_fails_the_turn() {
    let (abort, abort_rx) = oneshot::channel();
    let (_fake, base) = upstream(Reply::Stream(vec![
        Piece::Bytes(chunk(
            json!({"role": "assistant", "content": "partial"}),
            None,
        )),
        Piece::AbortWhen(abort_rx),
    ]))
    .await;
    let agent = Arc::new(OpenAiAgent::new(base, "m", None));
    let (sink, mut rx) = TurnSink::channel();
    let turn = tokio::spawn({
        let agent = Arc::clone(&agent);
        async move { agent.run(ctx("hi", vec![]), sink).await }
    });
    // Abort only once the client has the first delta, so the close is truly mid-stream.
    let first = tokio::time::timeout(DEADLINE, rx.recv())
        .await
        .expect("first delta before the deadline");
    assert_eq!(first, Some(Emission::Response("partial".into())));
    let _ = abort.send(());
    let result = tokio::time::timeout(DEADLINE, turn)
        .await
        .expect("turn ended before the deadline")
        .expect("turn task joined");
    let error = result.expect_err("a dropped connection fails the turn");
    assert!(
        error.0.starts_with("upstream stream ended early"),
        "{error}"
    );
    assert!(rx.try_recv().is_err(), "nothing after the close");
}

#[tokio::test]
async fn clean_close_without_done_fails_only_without_finish_reason() {
    let (_fake, base) = upstream(stream(vec![chunk(json!({"content": "cut"}), None)])).await;
    let (result, emissions) = run_turn(&OpenAiAgent::new(base, "m", None), ctx("hi", vec![])).await;
    let error = result.expect_err("a stream cut before any finish_reason fails the turn");
    assert!(
        error.0.starts_with("upstream stream ended early"),
        "{error}"
    );
    assert_eq!(emissions, vec![Emission::Response("cut".into())]);

    // A server that closes after the final chunk without `[DONE]` still gave a whole answer.
    let (_fake, base) = upstream(stream(vec![chunk(
        json!({"content": "whole"}),
        Some("stop"),
    )]))
    .await;
    let (result, emissions) = run_turn(&OpenAiAgent::new(base, "m", None), ctx("hi", vec![])).await;
    assert_eq!(result, Ok(()));
    assert_eq!(emissions, vec![Emission::Response("whole".into())]);
}

#[tokio::test]
async fn chunk_boundaries_inside_a_character_and_a_data_line() {
    let text = "café ☕ 😀";
    let wire = [
        chunk(json!({"content": text}), None),
        chunk(json!({"reasoning_content": "ü"}), None),
        chunk(json!({}), Some("stop")),
        done(),
    ]
    .concat();
    // Cut inside the 2-byte "é", the 3-byte "☕", the 4-byte "😀" and the second `data:` field name.
    let mut cuts = Vec::new();
    for (needle, offset) in [("é", 1), ("☕", 2), ("😀", 1), ("😀", 3)] {
        let at = find(&wire, needle.as_bytes()).expect("character on the wire");
        cuts.push(at + offset);
    }
    let second_frame = find(&wire, b"\n\ndata:").expect("second frame") + 2;
    cuts.push(second_frame + 2);
    cuts.sort_unstable();
    let mut pieces = Vec::new();
    let mut from = 0;
    for cut in cuts {
        pieces.push(wire[from..cut].to_vec());
        from = cut;
    }
    pieces.push(wire[from..].to_vec());
    let (_fake, base) = upstream(stream(pieces)).await;
    let (result, emissions) = run_turn(&OpenAiAgent::new(base, "m", None), ctx("hi", vec![])).await;
    assert_eq!(result, Ok(()));
    assert_eq!(
        emissions,
        vec![
            Emission::Response(text.into()),
            Emission::Thinking("ü".into())
        ]
    );
}

#[tokio::test]
async fn every_byte_in_its_own_chunk_with_crlf_lines() {
    let text = "naïve — ok 👍";
    let wire = [
        chunk(json!({"content": text}), None),
        chunk(json!({"content": "!"}), Some("stop")),
        done(),
    ]
    .concat();
    let wire = String::from_utf8(wire)
        .expect("utf-8")
        .replace("\n", "\r\n")
        .into_bytes();
    let (_fake, base) = upstream(stream(wire.iter().map(|b| vec![*b]).collect())).await;
    let (result, emissions) = run_turn(&OpenAiAgent::new(base, "m", None), ctx("hi", vec![])).await;
    assert_eq!(result, Ok(()));
    assert_eq!(
        emissions,
        vec![
            Emission::Response(text.into()),
            Emission::Response("!".into())
        ]
    );
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

#[tokio::test]
async fn whole_tool_calls_without_index_are_told_apart_by_id() {
    // Some compatible servers (e.g. Gemini's) omit `index` and send each call whole.
    let (_fake, base) = upstream(stream(vec![
        chunk(
            json!({"tool_calls": [{"id": "a", "function": {"name": "f", "arguments": "{\"x\":1}"}}]}),
            None,
        ),
        chunk(
            json!({"tool_calls": [{"id": "b", "function": {"name": "g", "arguments": "{}"}}]}),
            None,
        ),
        chunk(json!({}), Some("stop")),
        done(),
    ]))
    .await;
    let (result, emissions) = run_turn(&OpenAiAgent::new(base, "m", None), ctx("hi", vec![])).await;
    assert_eq!(result, Ok(()));
    assert_eq!(
        emissions,
        vec![
            tool("a", "f", ToolStatus::Started, None),
            tool("b", "g", ToolStatus::Started, None),
            tool("a", "f", ToolStatus::Finished, Some("{\"x\":1}")),
            tool("b", "g", ToolStatus::Finished, Some("{}")),
        ]
    );
}

#[tokio::test]
async fn connection_lost_after_finish_reason_keeps_the_whole_answer() {
    let (abort, abort_rx) = oneshot::channel();
    let (_fake, base) = upstream(Reply::Stream(vec![
        Piece::Bytes(chunk(json!({"content": "done"}), Some("stop"))),
        Piece::AbortWhen(abort_rx),
    ]))
    .await;
    let agent = Arc::new(OpenAiAgent::new(base, "m", None));
    let (sink, mut rx) = TurnSink::channel();
    let turn = tokio::spawn({
        let agent = Arc::clone(&agent);
        async move { agent.run(ctx("hi", vec![]), sink).await }
    });
    let first = tokio::time::timeout(DEADLINE, rx.recv())
        .await
        .expect("delta before the deadline");
    assert_eq!(first, Some(Emission::Response("done".into())));
    // Only the usage chunk and `[DONE]` were missing: the answer is whole.
    let _ = abort.send(());
    let result = tokio::time::timeout(DEADLINE, turn)
        .await
        .expect("turn ended before the deadline")
        .expect("turn task joined");
    assert_eq!(result, Ok(()));
}

#[tokio::test]
async fn unreachable_upstream_fails_with_the_cause() {
    // Bind then drop a listener: nothing accepts on that port any more.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("local addr");
    drop(listener);
    let agent = OpenAiAgent::new(format!("http://{addr}/v1"), "m", None);
    let (result, emissions) = run_turn(&agent, ctx("hi", vec![])).await;
    let error = result.expect_err("a refused connection fails the turn");
    assert!(error.0.starts_with("upstream request failed: "), "{error}");
    assert!(error.0.to_lowercase().contains("refused"), "{error}");
    assert!(emissions.is_empty());
}
