//! Reading a chat-completions stream, one SSE frame at a time, in every dialect the compatible
//! servers speak: errors inside a 200 stream (OpenAI's and OpenRouter's `{"error": {...}}` chunk,
//! vLLM's `{"object": "error"}` chunk, llama.cpp's `error: {json}` line and `event: error` frame),
//! the reasons a choice can finish, both spellings of reasoning, and tool calls keyed by `index`,
//! by `id`, or (Ollama) all at `index: 0` with different ids.

use serde_json::Value;
use turnstream_protocol::sse::Frame;
use turnstream_protocol::{ToolCall, ToolStatus, Usage};

use super::failure::{error_message, truncate, Failure};
use crate::agent::TurnSink;

/// How much of an unreadable error frame is quoted.
const FRAME_TEXT_BYTES: usize = 300;

/// One tool call being assembled from `delta.tool_calls` fragments.
#[derive(Debug)]
struct PendingCall {
    index: Option<u64>,
    /// The id the upstream gave, if any (`call_id` is made up without one).
    upstream_id: Option<String>,
    call_id: String,
    name: String,
    arguments: String,
}

/// What the stream has said so far.
#[derive(Debug, Default)]
pub(super) struct Turn {
    calls: Vec<PendingCall>,
    /// The choice's finish_reason, once it came.
    pub finish_reason: Option<String>,
    /// Whether anything reached the sink: after that, an attempt cannot be retried without
    /// showing the user the same text twice.
    pub emitted: bool,
    /// The last usage the upstream reported.
    pub usage: Option<Usage>,
}

/// Whether the stream is over after a frame.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Next {
    More,
    Done,
}

impl Turn {
    pub fn finished(&self) -> bool {
        self.finish_reason.is_some()
    }

    /// Handles one SSE frame.
    pub fn frame(&mut self, frame: &Frame, sink: &TurnSink) -> Result<Next, Failure> {
        let data = frame.data.trim();
        if frame.event == "error" {
            // llama.cpp: an `error: {json}` line where data lines were (the decoder reads it as
            // this event), or `event: error` with the error object as data; then `[DONE]`.
            let error = serde_json::from_str::<Value>(data).ok();
            let message = error
                .as_ref()
                .and_then(error_message)
                .unwrap_or_else(|| truncate(data, FRAME_TEXT_BYTES));
            return Err(in_stream(&message, data, error.as_ref()));
        }
        if data == "[DONE]" {
            return Ok(Next::Done);
        }
        if data.is_empty() {
            return Ok(Next::More);
        }
        let chunk: Value = serde_json::from_str(data)
            .map_err(|e| Failure::fatal(format!("upstream sent an unreadable frame: {e}")))?;
        if chunk.get("object").and_then(Value::as_str) == Some("error")
            || chunk.get("error").is_some_and(|e| !e.is_null())
        {
            // vLLM's `{"object": "error", "message"}`; OpenAI's and OpenRouter's `{"error"}`.
            let message = error_message(&chunk).unwrap_or_else(|| "no message".into());
            return Err(in_stream(&message, data, Some(&chunk)));
        }
        if let Some(usage) = chunk.get("usage").filter(|u| u.is_object()) {
            if let Ok(usage) = serde_json::from_value::<Usage>(usage.clone()) {
                self.usage = Some(usage);
            }
        }
        // Frames without choices (the usage chunk of `stream_options`) carry no text. The turn
        // asks for one completion, so only the first choice exists.
        let Some(choice) = chunk
            .get("choices")
            .and_then(Value::as_array)
            .and_then(|c| c.first())
        else {
            return Ok(Next::More);
        };
        if let Some(delta) = choice.get("delta") {
            // Servers spell reasoning differently; some send both spellings with the same text,
            // so take one, never both.
            let reasoning = ["reasoning_content", "reasoning"]
                .iter()
                .filter_map(|k| delta.get(*k).and_then(Value::as_str))
                .find(|s| !s.is_empty());
            if let Some(reasoning) = reasoning {
                self.emitted = true;
                sink.thinking(reasoning);
            }
            if let Some(content) = delta
                .get("content")
                .and_then(Value::as_str)
                .filter(|c| !c.is_empty())
            {
                self.emitted = true;
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
        if let Some(reason) = choice.get("finish_reason").and_then(Value::as_str) {
            if reason == "error" {
                // OpenRouter ends a choice this way when its provider failed mid-reply.
                return Err(in_stream("the model failed mid-reply", data, None));
            }
            // Any finish_reason ends this choice's call set: `tool_calls` from OpenAI, but some
            // servers (older Ollama) say `stop` after tool calls. A reply cut short also cuts
            // its calls short.
            let status = if cut_short(reason).is_some() {
                ToolStatus::Failed
            } else {
                ToolStatus::Finished
            };
            self.finish_reason = Some(reason.to_string());
            self.close_calls(status, sink);
        }
        Ok(Next::More)
    }

    /// The failure a finish_reason stands for, if the reply did not end on its own terms.
    pub fn finish_failure(&self) -> Option<Failure> {
        let reason = self.finish_reason.as_deref()?;
        cut_short(reason).map(|why| Failure {
            log: format!("upstream finished with finish_reason {reason:?}"),
            ..Failure::fatal(why)
        })
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
        let arguments = function.and_then(|f| f.get("arguments")).and_then(|a| {
            // Ollama sends arguments as an object, the others as a JSON string.
            match a {
                Value::String(s) => Some(s.clone()),
                Value::Null => None,
                other => Some(other.to_string()),
            }
        });
        // OpenAI keys fragments by `index`, with the id on the first only. Ollama puts every
        // parallel call at `index: 0`, each whole with its own id: an id unlike the one at that
        // index starts a new call. A few servers omit `index` and send whole calls, told apart
        // by `id`; an id-less fragment without index continues the last call.
        let found = match (index, id) {
            (Some(i), Some(id)) => self.calls.iter().rposition(|c| {
                c.index == Some(i) && c.upstream_id.as_deref().is_none_or(|u| u == id)
            }),
            (Some(i), None) => self.calls.iter().rposition(|c| c.index == Some(i)),
            (None, Some(id)) => self
                .calls
                .iter()
                .position(|c| c.upstream_id.as_deref() == Some(id)),
            (None, None) => self.calls.len().checked_sub(1),
        };
        let slot = match found {
            Some(slot) => slot,
            None => {
                let number = self.calls.len();
                let call = PendingCall {
                    index,
                    upstream_id: id.map(str::to_string),
                    call_id: id.map_or_else(
                        || format!("call_{}", index.unwrap_or(number as u64)),
                        str::to_string,
                    ),
                    name: name.unwrap_or_default().to_string(),
                    arguments: String::new(),
                };
                self.emitted = true;
                call.report(ToolStatus::Started, None, sink);
                self.calls.push(call);
                self.calls.len() - 1
            }
        };
        let Some(call) = self.calls.get_mut(slot) else {
            return;
        };
        if call.upstream_id.is_none() {
            call.upstream_id = id.map(str::to_string);
        }
        // The name arrives whole in the first fragment; a later one only fills it if missing.
        if call.name.is_empty() {
            if let Some(name) = name {
                call.name = name.to_string();
            }
        }
        if let Some(arguments) = arguments {
            call.arguments.push_str(&arguments);
        }
    }

    /// Reports every open call as `status` with its accumulated arguments, once.
    pub fn close_calls(&mut self, status: ToolStatus, sink: &TurnSink) {
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

/// Why a reply that finished with `reason` is not whole, or `None` when it is. `stop` and
/// `tool_calls` are the usual success; unknown reasons (`eos`, `end_turn`, `function_call`)
/// are taken as success too, since a server that invents one still ended the reply on purpose.
fn cut_short(reason: &str) -> Option<&'static str> {
    match reason {
        "length" | "max_tokens" => {
            Some("the reply was cut off: the model reached its output token limit")
        }
        "content_filter" => Some("the reply was stopped by the provider's content filter"),
        _ => None,
    }
}

/// An error the upstream reported inside a 200 stream. Its numeric `code`, where it gives one
/// (OpenRouter's provider errors and rate limits, vLLM's and llama.cpp's error objects), says
/// whether another attempt could succeed, as the status would have.
fn in_stream(message: &str, raw: &str, body: Option<&Value>) -> Failure {
    let code = body.and_then(|b| {
        b.get("error")
            .and_then(|e| e.get("code"))
            .or(b.get("code"))
            .and_then(Value::as_u64)
    });
    Failure {
        log: format!(
            "upstream error in stream: {}",
            truncate(raw, FRAME_TEXT_BYTES)
        ),
        retryable: code.is_some_and(|c| c == 408 || c == 429 || (500..600).contains(&c)),
        ..Failure::fatal(format!("upstream error: {message}"))
    }
}

/// Takes the decodable text out of `pending`, leaving an incomplete trailing character for the
/// next chunk. Genuinely invalid bytes become U+FFFD rather than stalling the stream.
pub(super) fn take_utf8(pending: &mut Vec<u8>) -> String {
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
