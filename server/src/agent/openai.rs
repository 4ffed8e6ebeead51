//! `--agent openai`: one turn streamed from any OpenAI-compatible `/chat/completions` endpoint
//! (OpenAI, vLLM, llama.cpp server, Ollama, OpenRouter), mapped onto the [`TurnSink`].
//!
//! The agent only reports tool calls the model makes; it does not execute them, so a turn that
//! ends in tool calls completes with those calls finished and no further reply.

use std::time::Duration;

use futures::future::BoxFuture;
use futures::StreamExt;
use serde_json::{json, Value};
use turnstream_protocol::sse::Decoder;
use turnstream_protocol::{Role, ToolCall, ToolStatus};

use super::{Agent, AgentError, TurnContext, TurnSink};

/// How much of a non-2xx body is quoted in the turn's error when it carries no JSON message.
const ERROR_TEXT_BYTES: usize = 500;
/// How much of a non-2xx body is read at all: an error page is not worth buffering unbounded.
const ERROR_BODY_LIMIT: usize = 64 * 1024;
/// How long to wait for a non-2xx body; the status alone is enough to fail the turn.
const ERROR_BODY_TIMEOUT: Duration = Duration::from_secs(10);

/// Streams turns from an OpenAI-compatible chat-completions endpoint.
pub struct OpenAiAgent {
    /// Building a client can fail (TLS backend setup); the error fails every turn rather than
    /// panicking at startup inside a constructor that cannot return it.
    client: Result<reqwest::Client, String>,
    url: String,
    model: String,
    api_key: Option<String>,
}

impl OpenAiAgent {
    /// `base_url` is the API root, e.g. `https://api.openai.com/v1` or `http://127.0.0.1:11434/v1`.
    /// An empty `api_key` counts as none (local servers need no key; an empty env var is common).
    pub fn new(
        base_url: impl Into<String>,
        model: impl Into<String>,
        api_key: Option<String>,
    ) -> Self {
        // Connect timeout only: a model may legitimately think for minutes before its first token.
        let client = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .build()
            .map_err(|e| format!("cannot build HTTP client: {e}"));
        let base_url = base_url.into();
        OpenAiAgent {
            client,
            url: format!("{}/chat/completions", base_url.trim_end_matches('/')),
            model: model.into(),
            api_key: api_key.filter(|k| !k.is_empty()),
        }
    }

    /// The request body: the session's history as context, then this turn's user message.
    fn body(&self, ctx: &TurnContext) -> Value {
        let mut messages: Vec<Value> = ctx
            .history
            .iter()
            // An empty assistant message (a turn that failed or was cancelled before any text)
            // carries nothing, and some servers reject empty assistant content.
            .filter(|m| m.role == Role::User || !m.content.is_empty())
            // `Role` serializes as OpenAI's own names, `user` and `assistant`.
            .map(|m| json!({"role": m.role, "content": m.content}))
            .collect();
        messages.push(json!({"role": "user", "content": ctx.user_message}));
        json!({"model": self.model, "stream": true, "messages": messages})
    }

    async fn stream(
        &self,
        ctx: &TurnContext,
        sink: &TurnSink,
        turn: &mut Turn,
    ) -> Result<(), AgentError> {
        let client = self.client.as_ref().map_err(|e| AgentError(e.clone()))?;
        let mut request = client
            .post(&self.url)
            .header(reqwest::header::ACCEPT, "text/event-stream")
            .json(&self.body(ctx));
        if let Some(key) = &self.api_key {
            request = request.bearer_auth(key);
        }
        let response = request
            .send()
            .await
            .map_err(|e| AgentError(format!("upstream request failed: {}", causes(&e))))?;
        if !response.status().is_success() {
            return Err(status_error(response).await);
        }

        let mut decoder = Decoder::new();
        // Bytes of a UTF-8 character cut by a chunk boundary, completed by the next chunk.
        let mut pending: Vec<u8> = Vec::new();
        let mut body = response.bytes_stream();
        while let Some(chunk) = body.next().await {
            let chunk = match chunk {
                Ok(chunk) => chunk,
                // Once the choice has finished the answer is complete; only a usage chunk or the
                // `[DONE]` marker was still to come, so losing them costs nothing.
                Err(_) if turn.finished => return Ok(()),
                Err(e) => {
                    let cause = causes(&e);
                    return Err(AgentError(format!("upstream stream ended early: {cause}")));
                }
            };
            pending.extend_from_slice(&chunk);
            let text = take_utf8(&mut pending);
            for frame in decoder.feed(&text) {
                if turn.frame(&frame.data, sink)? {
                    return Ok(());
                }
            }
        }
        // Some servers close right after the final chunk without `[DONE]`; a finish_reason says
        // the answer is whole. Without one, the text may be cut anywhere.
        if turn.finished {
            Ok(())
        } else {
            Err(AgentError(
                "upstream stream ended early: connection closed before [DONE]".into(),
            ))
        }
    }
}

impl Agent for OpenAiAgent {
    fn run<'a>(
        &'a self,
        ctx: TurnContext,
        sink: TurnSink,
    ) -> BoxFuture<'a, Result<(), AgentError>> {
        Box::pin(async move {
            let mut turn = Turn::default();
            let result = self.stream(&ctx, &sink, &mut turn).await;
            // Close every call still open so no tool is left showing as running after the turn.
            let status = if result.is_ok() {
                ToolStatus::Finished
            } else {
                ToolStatus::Failed
            };
            turn.close_calls(status, &sink);
            result
        })
    }
}

/// One tool call being assembled from `delta.tool_calls` fragments.
#[derive(Debug)]
struct PendingCall {
    index: Option<u64>,
    call_id: String,
    name: String,
    arguments: String,
}

/// What the stream has said so far.
#[derive(Debug, Default)]
struct Turn {
    calls: Vec<PendingCall>,
    /// Whether the choice reported a finish_reason.
    finished: bool,
}

impl Turn {
    /// Handles one `data:` payload; `Ok(true)` when the stream is over (`[DONE]`).
    fn frame(&mut self, data: &str, sink: &TurnSink) -> Result<bool, AgentError> {
        let data = data.trim();
        if data == "[DONE]" {
            return Ok(true);
        }
        let chunk: Value = serde_json::from_str(data)
            .map_err(|e| AgentError(format!("upstream sent an unreadable frame: {e}")))?;
        if let Some(error) = chunk.get("error").filter(|e| !e.is_null()) {
            let message = error_message(&chunk).unwrap_or_else(|| error.to_string());
            return Err(AgentError(format!("upstream error: {message}")));
        }
        // Frames without choices (the usage chunk of `stream_options`) carry no text. The turn
        // asks for one completion, so only the first choice exists.
        let Some(choice) = chunk
            .get("choices")
            .and_then(Value::as_array)
            .and_then(|c| c.first())
        else {
            return Ok(false);
        };
        if let Some(delta) = choice.get("delta") {
            // Servers spell reasoning differently; some send both spellings with the same text,
            // so take one, never both.
            let reasoning = ["reasoning_content", "reasoning"]
                .iter()
                .filter_map(|k| delta.get(*k).and_then(Value::as_str))
                .find(|s| !s.is_empty());
            if let Some(reasoning) = reasoning {
                sink.thinking(reasoning);
            }
            if let Some(content) = delta.get("content").and_then(Value::as_str) {
                sink.response(content);
            }
            for fragment in delta
                .get("tool_calls")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                self.tool_fragment(fragment, sink);
            }
        }
        // Any finish_reason ends this choice's call set: `tool_calls` from OpenAI, but some
        // servers (older Ollama) say `stop` after tool calls.
        if choice.get("finish_reason").is_some_and(|r| !r.is_null()) {
            self.finished = true;
            self.close_calls(ToolStatus::Finished, sink);
        }
        Ok(false)
    }

    /// Folds one `tool_calls[]` fragment in, announcing the call when first seen.
    fn tool_fragment(&mut self, fragment: &Value, sink: &TurnSink) {
        let index = fragment.get("index").and_then(Value::as_u64);
        let id = fragment
            .get("id")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty());
        let function = fragment.get("function");
        let name = function.and_then(|f| f.get("name")).and_then(Value::as_str);
        let arguments = function
            .and_then(|f| f.get("arguments"))
            .and_then(Value::as_str);
        // OpenAI keys fragments by `index`; a few servers omit it and send whole calls, which
        // are told apart by `id`, and an id-less fragment without index continues the last call.
        let found = match (index, id) {
            (Some(i), _) => self.calls.iter().position(|c| c.index == Some(i)),
            (None, Some(id)) => self.calls.iter().position(|c| c.call_id == id),
            (None, None) => self.calls.len().checked_sub(1),
        };
        let slot = match found {
            Some(slot) => slot,
            None => {
                let number = index.unwrap_or(self.calls.len() as u64);
                let call = PendingCall {
                    index,
                    call_id: id.map_or_else(|| format!("call_{number}"), str::to_string),
                    name: name.unwrap_or_default().to_string(),
                    arguments: String::new(),
                };
                call.report(ToolStatus::Started, None, sink);
                self.calls.push(call);
                self.calls.len() - 1
            }
        };
        let Some(call) = self.calls.get_mut(slot) else {
            return;
        };
        // The name arrives whole in the first fragment; a later one only fills it if missing.
        if call.name.is_empty() {
            if let Some(name) = name {
                call.name = name.to_string();
            }
        }
        if let Some(arguments) = arguments {
            call.arguments.push_str(arguments);
        }
    }

    /// Reports every open call as `status` with its accumulated arguments, once.
    fn close_calls(&mut self, status: ToolStatus, sink: &TurnSink) {
        for call in self.calls.drain(..) {
            call.report(status, Some(call.arguments.clone()), sink);
        }
    }
}

impl PendingCall {
    fn report(&self, status: ToolStatus, input_preview: Option<String>, sink: &TurnSink) {
        sink.tool(ToolCall {
            call_id: self.call_id.clone(),
            name: self.name.clone(),
            status,
            input_preview,
            output_preview: None,
        });
    }
}

/// Takes the decodable text out of `pending`, leaving an incomplete trailing character for the
/// next chunk. Genuinely invalid bytes become U+FFFD rather than stalling the stream.
fn take_utf8(pending: &mut Vec<u8>) -> String {
    let keep = incomplete_tail(pending);
    let tail = pending.split_off(pending.len() - keep);
    let text = String::from_utf8_lossy(pending).into_owned();
    *pending = tail;
    text
}

/// Length of a UTF-8 sequence cut off at the end of `bytes`, 0 if the end is whole.
fn incomplete_tail(bytes: &[u8]) -> usize {
    for back in 1..=bytes.len().min(3) {
        let byte = bytes[bytes.len() - back];
        if byte & 0xC0 != 0x80 {
            let width = match byte {
                0xC0..=0xDF => 2,
                0xE0..=0xEF => 3,
                0xF0..=0xF7 => 4,
                _ => 1,
            };
            return if width > back { back } else { 0 };
        }
    }
    0
}

/// The turn's error for a non-2xx answer, quoting the upstream's own explanation.
async fn status_error(response: reqwest::Response) -> AgentError {
    let status = response.status();
    let mut body = Vec::new();
    let mut stream = response.bytes_stream();
    let read = async {
        while let Some(Ok(chunk)) = stream.next().await {
            body.extend_from_slice(&chunk);
            if body.len() >= ERROR_BODY_LIMIT {
                break;
            }
        }
    };
    // A body that never arrives must not hold the turn; whatever came is used.
    let _ = tokio::time::timeout(ERROR_BODY_TIMEOUT, read).await;
    let detail = serde_json::from_slice::<Value>(&body)
        .ok()
        .and_then(|v| error_message(&v))
        .unwrap_or_else(|| {
            let text = String::from_utf8_lossy(&body);
            let text = text.trim();
            if text.is_empty() {
                status.canonical_reason().unwrap_or("no body").to_string()
            } else {
                truncate(text, ERROR_TEXT_BYTES)
            }
        });
    AgentError(format!("upstream {}: {detail}", status.as_u16()))
}

/// The message of an error body: OpenAI's `{"error": {"message"}}`, or the `{"error": "..."}`
/// and `{"message": "..."}` shapes some compatible servers use.
fn error_message(body: &Value) -> Option<String> {
    let error = body.get("error");
    error
        .and_then(|e| e.get("message"))
        .or(error.filter(|e| e.is_string()))
        .or(body.get("message"))
        .and_then(Value::as_str)
        .filter(|m| !m.is_empty())
        .map(str::to_string)
}

/// An error with its sources: reqwest's own text names the URL but not why (refused, reset).
fn causes(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// `text` cut to at most `max` bytes on a character boundary, an ellipsis marking the cut.
fn truncate(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let mut end = max.saturating_sub('…'.len_utf8());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}
