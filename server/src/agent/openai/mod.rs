//! `--agent openai`: one turn streamed from any OpenAI-compatible `/chat/completions` endpoint
//! (OpenAI, vLLM, llama.cpp server, Ollama, OpenRouter), mapped onto the [`TurnSink`].
//!
//! The agent only reports tool calls the model makes; it does not execute them, so a turn that
//! ends in tool calls completes with those calls finished and no further reply.
//!
//! A reply that did not end on its own terms fails the turn, keeping the text so far: an error
//! reported inside the stream, a `finish_reason` of `length` (cut off at the token limit) or
//! `content_filter`, a connection lost mid-reply, or an upstream silent for longer than the idle
//! timeout. Rate limits, server errors and lost connections are retried while nothing has been
//! shown yet.

mod chunk;
mod context;
mod failure;

use std::time::Duration;

use futures::future::BoxFuture;
use futures::StreamExt;
use serde_json::{json, Value};
use turnstream_protocol::sse::Decoder;
use turnstream_protocol::ToolStatus;

use self::chunk::{take_utf8, Next, Turn};
use self::failure::{backoff, causes, status_failure, Failure};
use super::{Agent, AgentError, TurnContext, TurnSink};

/// The longest `Retry-After` honoured; an upstream that asks for longer fails the turn now
/// rather than leaving the user staring at a turn that looks stuck.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(60);

/// How the agent talks to its upstream, beyond where and which model.
#[derive(Debug, Clone)]
pub struct OpenAiOptions {
    /// Sent first as the `system` message.
    pub system_prompt: Option<String>,
    /// `max_tokens` of the request; the server's default when `None`.
    pub max_tokens: Option<u32>,
    /// `temperature` of the request; the server's default when `None`.
    pub temperature: Option<f32>,
    /// Asks for `stream_options.include_usage`, so the turn keeps its token counts.
    pub include_usage: bool,
    /// Longest silence between two reads (and before the answer's headers) before the turn
    /// fails. Generous: reasoning models can think for minutes before their first token.
    pub idle_timeout: Duration,
    /// Extra attempts after a rate limit, server error or lost connection, while nothing of the
    /// reply has been shown.
    pub max_retries: u32,
    /// Delay before the first retry, doubling each time up to `max_retry_delay` (jittered),
    /// unless the upstream says `Retry-After`.
    pub retry_delay: Duration,
    pub max_retry_delay: Duration,
}

impl Default for OpenAiOptions {
    fn default() -> Self {
        OpenAiOptions {
            system_prompt: None,
            max_tokens: None,
            temperature: None,
            include_usage: true,
            idle_timeout: Duration::from_secs(300),
            max_retries: 3,
            retry_delay: Duration::from_millis(500),
            max_retry_delay: Duration::from_secs(8),
        }
    }
}

/// Streams turns from an OpenAI-compatible chat-completions endpoint.
pub struct OpenAiAgent {
    /// Building a client can fail (TLS backend setup); the error fails every turn rather than
    /// panicking at startup inside a constructor that cannot return it.
    client: Result<reqwest::Client, String>,
    url: String,
    model: String,
    api_key: Option<String>,
    options: OpenAiOptions,
}

impl OpenAiAgent {
    /// `base_url` is the API root, e.g. `https://api.openai.com/v1` or `http://127.0.0.1:11434/v1`.
    /// An empty `api_key` counts as none (local servers need no key; an empty env var is common).
    pub fn new(
        base_url: impl Into<String>,
        model: impl Into<String>,
        api_key: Option<String>,
    ) -> Self {
        Self::with_options(base_url, model, api_key, OpenAiOptions::default())
    }

    pub fn with_options(
        base_url: impl Into<String>,
        model: impl Into<String>,
        api_key: Option<String>,
        options: OpenAiOptions,
    ) -> Self {
        // No overall timeout: a reply may stream for many minutes. Silence is bounded by
        // `idle_timeout` instead, read by read.
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
            options,
        }
    }

    /// The request body: the system prompt, the session's history as context, then this turn's
    /// user message with its attachments, and the sampling settings that were configured.
    fn body(&self, ctx: &TurnContext) -> Value {
        let messages = context::messages(
            self.options.system_prompt.as_deref(),
            &ctx.history,
            &ctx.user_message,
            &ctx.attachments,
        );
        let mut body = json!({"model": self.model, "stream": true, "messages": messages});
        if self.options.include_usage {
            body["stream_options"] = json!({"include_usage": true});
        }
        if let Some(max_tokens) = self.options.max_tokens {
            body["max_tokens"] = json!(max_tokens);
        }
        if let Some(temperature) = self.options.temperature {
            body["temperature"] = json!(temperature);
        }
        body
    }

    /// The turn, retried while that is safe and useful.
    async fn turn(
        &self,
        ctx: &TurnContext,
        sink: &TurnSink,
        turn: &mut Turn,
    ) -> Result<(), Failure> {
        let body = self.body(ctx);
        let mut attempt: u32 = 0;
        loop {
            let failure = match self.attempt(&body, sink, turn).await {
                Ok(()) => return Ok(()),
                Err(failure) => failure,
            };
            attempt += 1;
            tracing::warn!(
                turn = %ctx.turn_id,
                url = %self.url,
                model = %self.model,
                attempt,
                status = failure.status,
                error = %failure.log,
                "openai upstream failure"
            );
            let delay = failure.retry_after.unwrap_or_else(|| {
                backoff(
                    attempt - 1,
                    self.options.retry_delay,
                    self.options.max_retry_delay,
                )
            });
            let retry = failure.retryable
                && !turn.emitted
                && attempt <= self.options.max_retries
                && delay <= MAX_RETRY_AFTER;
            if !retry {
                let mut failure = failure;
                if attempt > 1 {
                    failure.user = format!("{} (after {attempt} attempts)", failure.user);
                }
                if failure.retryable && delay > MAX_RETRY_AFTER {
                    failure.user = format!(
                        "{} (the server asked to retry after {} s)",
                        failure.user,
                        delay.as_secs()
                    );
                }
                return Err(failure);
            }
            tokio::time::sleep(delay).await;
            // Nothing was shown, so nothing of the failed attempt carries over.
            *turn = Turn::default();
        }
    }

    /// One request and its streamed answer.
    async fn attempt(&self, body: &Value, sink: &TurnSink, turn: &mut Turn) -> Result<(), Failure> {
        let client = self
            .client
            .as_ref()
            .map_err(|e| Failure::fatal(e.clone()))?;
        let mut request = client
            .post(&self.url)
            .header(reqwest::header::ACCEPT, "text/event-stream")
            .json(body);
        if let Some(key) = &self.api_key {
            request = request.bearer_auth(key);
        }
        let idle = self.options.idle_timeout;
        let response = tokio::time::timeout(idle, request.send())
            .await
            .map_err(|_| silent(idle, "before answering"))?
            .map_err(|e| Failure::transient(format!("upstream request failed: {}", causes(&e))))?;
        if !response.status().is_success() {
            return Err(status_failure(response).await);
        }

        // llama.cpp writes an error as an `error: {json}` line, read here as an `error` frame.
        let mut decoder = Decoder::with_field_as_event("error");
        // Bytes of a UTF-8 character cut by a chunk boundary, completed by the next chunk.
        let mut pending: Vec<u8> = Vec::new();
        let mut stream = response.bytes_stream();
        loop {
            let next = tokio::time::timeout(idle, stream.next())
                .await
                .map_err(|_| silent(idle, "mid-reply"))?;
            let chunk = match next {
                None => break,
                Some(Ok(chunk)) => chunk,
                // Once the choice has finished the answer is complete; only a usage chunk or the
                // `[DONE]` marker was still to come, so losing them costs nothing.
                Some(Err(_)) if turn.finished() => break,
                Some(Err(e)) => {
                    return Err(Failure::transient(format!(
                        "upstream stream ended early: {}",
                        causes(&e)
                    )))
                }
            };
            pending.extend_from_slice(&chunk);
            let text = take_utf8(&mut pending);
            for frame in decoder.feed(&text) {
                if turn.frame(&frame, sink)? == Next::Done {
                    return turn.finish_failure().map_or(Ok(()), Err);
                }
            }
        }
        // Some servers close right after the final chunk without `[DONE]`; a finish_reason says
        // the answer is whole. Without one, the text may be cut anywhere.
        if turn.finished() {
            turn.finish_failure().map_or(Ok(()), Err)
        } else {
            Err(Failure::transient(
                "upstream stream ended early: connection closed before [DONE]",
            ))
        }
    }
}

/// The failure of an upstream that stayed silent for the whole idle timeout.
fn silent(idle: Duration, when: &str) -> Failure {
    Failure::fatal(format!(
        "upstream timed out: the model server sent nothing for {} s {when}",
        idle.as_secs()
    ))
}

impl Agent for OpenAiAgent {
    fn run<'a>(
        &'a self,
        ctx: TurnContext,
        sink: TurnSink,
    ) -> BoxFuture<'a, Result<(), AgentError>> {
        Box::pin(async move {
            let mut turn = Turn::default();
            let result = self.turn(&ctx, &sink, &mut turn).await;
            // Close every call still open so no tool is left showing as running after the turn.
            let status = if result.is_ok() {
                ToolStatus::Finished
            } else {
                ToolStatus::Failed
            };
            turn.close_calls(status, &sink);
            if let Some(usage) = turn.usage {
                sink.usage(usage);
            }
            result.map_err(|f| AgentError(f.user))
        })
    }
}
