//! A fake OpenAI-compatible upstream, in process: it answers `POST /v1/chat/completions` with
//! scripted replies, byte for byte as the real servers send them (`data: {json}\n\n` chunks,
//! `event:` frames, `[DONE]`, error statuses with their headers and bodies), one reply per
//! request in order, and records every request it got.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use serde_json::{json, Value};
use tokio::sync::oneshot;

/// One piece of a scripted streaming body.
pub enum Piece {
    /// Sent as its own HTTP chunk, so the client sees a boundary exactly after it.
    Bytes(Vec<u8>),
    /// Wait for the signal, then abort the connection mid-body.
    AbortWhen(oneshot::Receiver<()>),
    /// Send nothing more, and keep the connection open until the client goes away.
    Hold,
    /// Wait for the signal, then go on with the next piece.
    WaitFor(oneshot::Receiver<()>),
}

/// What the fake answers to one request.
pub enum Reply {
    Stream(Vec<Piece>),
    /// A status with a content type and body.
    Status(StatusCode, &'static str, String),
    /// A status with headers of its own (e.g. `Retry-After`) and a body.
    StatusWith(StatusCode, Vec<(&'static str, String)>, String),
}

/// A request as the fake received it.
pub struct Recorded {
    pub headers: HeaderMap,
    pub body: Value,
    pub at: Instant,
}

#[derive(Clone)]
pub struct Fake {
    replies: Arc<Mutex<VecDeque<Reply>>>,
    pub requests: Arc<Mutex<Vec<Recorded>>>,
}

impl Fake {
    /// How many requests arrived so far.
    pub fn request_count(&self) -> usize {
        self.requests.lock().map(|r| r.len()).unwrap_or(0)
    }

    /// The body of request `i` (0-based).
    pub fn request_body(&self, i: usize) -> Option<Value> {
        self.requests.lock().ok()?.get(i).map(|r| r.body.clone())
    }
}

async fn completions(
    State(fake): State<Fake>,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> Response {
    fake.requests.lock().expect("requests lock").push(Recorded {
        headers,
        body,
        at: Instant::now(),
    });
    let reply = fake.replies.lock().expect("reply lock").pop_front();
    match reply {
        None => (StatusCode::IM_A_TEAPOT, "no reply scripted").into_response(),
        Some(Reply::Status(status, content_type, body)) => {
            (status, [("content-type", content_type)], body).into_response()
        }
        Some(Reply::StatusWith(status, headers, body)) => {
            let mut response = Response::builder().status(status);
            for (name, value) in headers {
                response = response.header(name, value);
            }
            response
                .body(Body::from(body))
                .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
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
                    Piece::Hold => {
                        std::future::pending::<()>().await;
                        None
                    }
                    Piece::WaitFor(signal) => {
                        let _ = signal.await;
                        Some((Ok(Vec::new()), rest))
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

/// Starts a fake upstream that answers its first request with `reply` (and later ones with
/// `418`); returns it and its base URL (`http://127.0.0.1:PORT/v1`).
pub async fn upstream(reply: Reply) -> (Fake, String) {
    upstream_replies(vec![reply]).await
}

/// Starts a fake upstream that answers its requests with `replies`, in order.
pub async fn upstream_replies(replies: Vec<Reply>) -> (Fake, String) {
    let fake = Fake {
        replies: Arc::new(Mutex::new(replies.into())),
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

/// One `chat.completion.chunk` frame as OpenAI sends it.
pub fn chunk(delta: Value, finish_reason: Option<&str>) -> Vec<u8> {
    let frame = json!({
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1_700_000_000,
        "model": "gpt-test",
        "system_fingerprint": "fp_1",
        "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish_reason}],
    });
    data(&frame)
}

/// `data: {json}\n\n`.
pub fn data(frame: &Value) -> Vec<u8> {
    format!("data: {frame}\n\n").into_bytes()
}

/// llama.cpp's error inside a stream: a line of the SSE field `error` (where `data:` lines were)
/// carrying the error object, then a blank line, as its server's
/// `server_sent_event(sink, "error", error_data)` writes it; `[DONE]` follows.
pub fn llama_cpp_error(error: &Value) -> Vec<u8> {
    format!("error: {error}\n\n").into_bytes()
}

pub fn done() -> Vec<u8> {
    b"data: [DONE]\n\n".to_vec()
}

/// The usage chunk of `stream_options.include_usage`: no choices.
pub fn usage() -> Vec<u8> {
    data(
        &json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "choices": [],
        "usage": {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8}}),
    )
}

/// A streamed reply of whole chunks.
pub fn stream(chunks: Vec<Vec<u8>>) -> Reply {
    Reply::Stream(chunks.into_iter().map(Piece::Bytes).collect())
}

/// The HTML page a reverse proxy (nginx) answers with when the model server behind it is down.
pub fn nginx_502() -> Reply {
    Reply::Status(
        StatusCode::BAD_GATEWAY,
        "text/html",
        "<html>\r\n<head><title>502 Bad Gateway</title></head>\r\n<body>\r\n<center><h1>502 Bad Gateway</h1></center>\r\n<hr><center>nginx/1.24.0</center>\r\n</body>\r\n</html>\r\n".into(),
    )
}

// Driving the agent in process.

use std::time::Duration;

use turnstream_protocol::{Message, MessageStatus, Role, ToolCall, ToolStatus};
use turnstream_server::agent::openai::{OpenAiAgent, OpenAiOptions};
use turnstream_server::agent::{Agent, AgentError, Emission, TurnContext, TurnSink};

/// Deadline for anything an in-process agent test waits on.
pub const AGENT_DEADLINE: Duration = Duration::from_secs(10);

/// Options that fail at once instead of retrying, for tests about one failure.
pub fn no_retries() -> OpenAiOptions {
    OpenAiOptions {
        max_retries: 0,
        ..OpenAiOptions::default()
    }
}

/// Options that retry quickly (1 ms, 2 ms, ...) so a test of retries does not wait seconds.
pub fn fast_retries() -> OpenAiOptions {
    OpenAiOptions {
        retry_delay: Duration::from_millis(1),
        max_retry_delay: Duration::from_millis(5),
        ..OpenAiOptions::default()
    }
}

pub fn agent(base: &str, options: OpenAiOptions) -> OpenAiAgent {
    OpenAiAgent::with_options(base, "m", None, options)
}

pub fn ctx(user_message: &str, history: Vec<Message>) -> TurnContext {
    TurnContext {
        session_id: "s1".into(),
        turn_id: "t1".into(),
        user_message: user_message.into(),
        attachments: Vec::new(),
        history,
        continuation: None,
    }
}

pub fn message(role: Role, content: &str, status: MessageStatus) -> Message {
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
        attachments: Vec::new(),
        parent_id: None,
        siblings: None,
        requests: Vec::new(),
        called_by: None,
    }
}

/// Runs one turn to its end and drains everything it emitted, in order.
pub async fn run_turn(
    agent: &OpenAiAgent,
    ctx: TurnContext,
) -> (Result<(), AgentError>, Vec<Emission>) {
    let (sink, mut rx) = TurnSink::channel();
    let result = tokio::time::timeout(AGENT_DEADLINE, agent.run(ctx, sink))
        .await
        .expect("turn ended before the deadline");
    let mut emissions = Vec::new();
    while let Ok(e) = rx.try_recv() {
        emissions.push(e);
    }
    (result, emissions)
}

pub fn response_text(emissions: &[Emission]) -> String {
    emissions
        .iter()
        .filter_map(|e| match e {
            Emission::Response(d) => Some(d.as_str()),
            _ => None,
        })
        .collect()
}

/// The emissions that are not token usage (which most tests do not look at).
pub fn without_usage(emissions: Vec<Emission>) -> Vec<Emission> {
    emissions
        .into_iter()
        .filter(|e| !matches!(e, Emission::Usage(_)))
        .collect()
}

pub fn tool(call_id: &str, name: &str, status: ToolStatus, input: Option<&str>) -> Emission {
    Emission::Tool(ToolCall {
        call_id: call_id.into(),
        name: name.into(),
        status,
        input_preview: input.map(str::to_string),
        output_preview: None,
    })
}
