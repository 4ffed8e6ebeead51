//! `OpenAiAgent` against the ways real OpenAI-compatible servers end, fail and call tools inside
//! a streamed answer: each upstream's own error shape, every `finish_reason`, Ollama's parallel
//! tool calls, the reasoning spellings, and what the request carries.

mod support;

use serde_json::json;
use turnstream_protocol::{MessageStatus, Role, ToolStatus, Usage};
use turnstream_server::agent::openai::OpenAiOptions;
use turnstream_server::agent::Emission;

use support::upstream::*;

/// Runs one turn against a fake that streams `chunks`.
async fn turn_of(
    chunks: Vec<Vec<u8>>,
) -> (
    Result<(), turnstream_server::agent::AgentError>,
    Vec<Emission>,
) {
    let (_fake, base) = upstream(stream(chunks)).await;
    run_turn(&agent(&base, no_retries()), ctx("hi", vec![])).await
}

/// Asserts a failed turn whose error names `message`, with `text` kept as the reply so far.
fn assert_failed(
    result: Result<(), turnstream_server::agent::AgentError>,
    emissions: &[Emission],
    message: &str,
    text: &str,
) {
    let error = result.expect_err("the turn fails");
    assert!(error.0.contains(message), "error {:?}", error.0);
    assert_eq!(response_text(emissions), text);
}

#[tokio::test]
async fn openai_error_chunk_fails_the_turn() {
    let (result, emissions) = turn_of(vec![
        chunk(json!({"role": "assistant", "content": "Hal"}), None),
        data(
            &json!({"error": {"message": "The server had an error while processing your request.",
            "type": "server_error", "param": null, "code": null}}),
        ),
        done(),
    ])
    .await;
    assert_failed(
        result,
        &emissions,
        "upstream error: The server had an error while processing your request.",
        "Hal",
    );
}

#[tokio::test]
async fn openrouter_error_chunk_fails_the_turn() {
    // OpenRouter: a chunk with a top-level error and a choice finished with "error".
    let (result, emissions) = turn_of(vec![
        chunk(json!({"role": "assistant", "content": "Once"}), None),
        data(
            &json!({"id": "gen-1", "object": "chat.completion.chunk", "created": 1,
            "model": "openai/gpt-4o", "provider": "OpenAI",
            "error": {"code": 502, "message": "Provider returned error"},
            "choices": [{"index": 0, "delta": {"content": ""}, "finish_reason": "error"}]}),
        ),
        done(),
    ])
    .await;
    assert_failed(
        result,
        &emissions,
        "upstream error: Provider returned error",
        "Once",
    );

    // The same ending without the error object still fails.
    let (result, emissions) = turn_of(vec![
        chunk(json!({"content": "Once"}), None),
        chunk(json!({"content": ""}), Some("error")),
        done(),
    ])
    .await;
    assert_failed(result, &emissions, "failed mid-reply", "Once");
}

#[tokio::test]
async fn llama_cpp_error_line_then_done_fails_the_turn() {
    // llama.cpp's server: an `error: {json}` line where data lines were, then `[DONE]`. A
    // spec-following SSE parser drops the line and sees a reply that simply ended.
    let (result, emissions) = turn_of(vec![
        chunk(json!({"content": "The"}), None),
        llama_cpp_error(&json!({"code": 400,
            "message": "the request exceeds the available context size, try increasing it",
            "type": "exceed_context_size_error"})),
        done(),
    ])
    .await;
    assert_failed(
        result,
        &emissions,
        "upstream error: the request exceeds the available context size, try increasing it",
        "The",
    );

    // The same before any text, with the code of a server error: failed, quoting the message.
    let (result, emissions) = turn_of(vec![
        llama_cpp_error(
            &json!({"code": 500, "message": "slot unavailable", "type": "server_error"}),
        ),
        done(),
    ])
    .await;
    assert_failed(result, &emissions, "upstream error: slot unavailable", "");
}

#[tokio::test]
async fn an_error_event_then_done_fails_the_turn() {
    // An `event: error` frame carrying the error object, then `[DONE]`.
    let (result, emissions) = turn_of(vec![
        chunk(json!({"content": "The"}), None),
        b"event: error\ndata: {\"code\":500,\"message\":\"the request exceeds the available context size, try increasing it\",\"type\":\"exceed_context_size_error\"}\n\n".to_vec(),
        done(),
    ])
    .await;
    assert_failed(
        result,
        &emissions,
        "upstream error: the request exceeds the available context size",
        "The",
    );

    // An error frame whose data is not JSON is quoted as it is.
    let (result, emissions) = turn_of(vec![
        b"event: error\ndata: slot unavailable\n\n".to_vec(),
        done(),
    ])
    .await;
    assert_failed(result, &emissions, "upstream error: slot unavailable", "");
}

#[tokio::test]
async fn vllm_error_object_chunk_fails_the_turn() {
    // Older vLLM: `{"object": "error", ...}` as a data chunk inside the 200 stream.
    let (result, emissions) = turn_of(vec![
        chunk(json!({"content": "Sure"}), None),
        data(&json!({"object": "error", "message": "This model's maximum context length is 4096 tokens.",
            "type": "BadRequestError", "param": null, "code": 400})),
        done(),
    ])
    .await;
    assert_failed(
        result,
        &emissions,
        "upstream error: This model's maximum context length is 4096 tokens.",
        "Sure",
    );
}

#[tokio::test]
async fn length_keeps_the_reply_and_fails_with_the_reason() {
    let (result, emissions) = turn_of(vec![
        chunk(json!({"content": "The three reasons are: one,"}), None),
        chunk(json!({}), Some("length")),
        usage(),
        done(),
    ])
    .await;
    assert_failed(
        result,
        &emissions,
        "the reply was cut off: the model reached its output token limit",
        "The three reasons are: one,",
    );
    // The usage that followed the finish is still reported.
    assert!(emissions.iter().any(|e| matches!(
        e,
        Emission::Usage(Usage {
            total_tokens: 8,
            ..
        })
    )));
}

#[tokio::test]
async fn content_filter_fails_with_a_reason() {
    let (result, emissions) = turn_of(vec![
        chunk(json!({"role": "assistant", "content": ""}), None),
        chunk(json!({}), Some("content_filter")),
        done(),
    ])
    .await;
    assert_failed(
        result,
        &emissions,
        "the reply was stopped by the provider's content filter",
        "",
    );
}

#[tokio::test]
async fn stop_and_tool_calls_are_success_even_without_done() {
    for reason in ["stop", "tool_calls", "eos"] {
        let (result, emissions) =
            turn_of(vec![chunk(json!({"content": "fine"}), Some(reason))]).await;
        assert_eq!(result, Ok(()), "{reason}");
        assert_eq!(response_text(&emissions), "fine");
    }
}

#[tokio::test]
async fn ollama_parallel_tool_calls_at_index_0_stay_apart() {
    // Ollama's OpenAI endpoint sends each parallel call whole, all at `index: 0`, with ids.
    let (result, emissions) = turn_of(vec![
        chunk(
            json!({"role": "assistant", "content": "", "tool_calls": [
                {"id": "call_x1", "index": 0, "type": "function",
                 "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}},
                {"id": "call_x2", "index": 0, "type": "function",
                 "function": {"name": "get_weather", "arguments": "{\"city\":\"Rome\"}"}}]}),
            None,
        ),
        chunk(
            json!({"tool_calls": [{"id": "call_x3", "index": 0, "type": "function",
                "function": {"name": "get_time", "arguments": "{}"}}]}),
            None,
        ),
        chunk(json!({"content": ""}), Some("tool_calls")),
        done(),
    ])
    .await;
    assert_eq!(result, Ok(()));
    assert_eq!(
        without_usage(emissions),
        vec![
            tool("call_x1", "get_weather", ToolStatus::Started, None),
            tool("call_x2", "get_weather", ToolStatus::Started, None),
            tool("call_x3", "get_time", ToolStatus::Started, None),
            tool(
                "call_x1",
                "get_weather",
                ToolStatus::Finished,
                Some("{\"city\":\"Paris\"}")
            ),
            tool(
                "call_x2",
                "get_weather",
                ToolStatus::Finished,
                Some("{\"city\":\"Rome\"}")
            ),
            tool("call_x3", "get_time", ToolStatus::Finished, Some("{}")),
        ]
    );
}

#[tokio::test]
async fn reasoning_content_and_reasoning_are_thinking() {
    // vLLM and DeepSeek spell it `reasoning_content`; Ollama and OpenRouter `reasoning`.
    for field in ["reasoning_content", "reasoning"] {
        let (result, emissions) = turn_of(vec![
            chunk(
                json!({"role": "assistant", "content": "", field: "Hmm, "}),
                None,
            ),
            chunk(json!({"content": null, field: "two."}), None),
            chunk(json!({"content": "2", field: null}), None),
            chunk(json!({}), Some("stop")),
            done(),
        ])
        .await;
        assert_eq!(result, Ok(()), "{field}");
        assert_eq!(
            without_usage(emissions),
            vec![
                Emission::Thinking("Hmm, ".into()),
                Emission::Thinking("two.".into()),
                Emission::Response("2".into()),
            ],
            "{field}"
        );
    }
}

#[tokio::test]
async fn request_carries_system_prompt_sampling_and_usage_options() {
    let (fake, base) = upstream(stream(vec![
        chunk(json!({"content": "ok"}), Some("stop")),
        done(),
    ]))
    .await;
    let options = OpenAiOptions {
        system_prompt: Some("You are terse.".into()),
        max_tokens: Some(256),
        temperature: Some(0.25),
        ..no_retries()
    };
    let history = vec![
        message(Role::User, "one", MessageStatus::Complete),
        message(Role::Assistant, "", MessageStatus::Cancelled),
    ];
    let (result, _) = run_turn(&agent(&base, options), ctx("two", history)).await;
    assert_eq!(result, Ok(()));
    let body = fake.request_body(0).expect("one request");
    assert_eq!(body["max_tokens"], json!(256));
    assert_eq!(body["temperature"], json!(0.25));
    assert_eq!(body["stream_options"], json!({"include_usage": true}));
    assert_eq!(
        body["messages"],
        json!([
            {"role": "system", "content": "You are terse."},
            {"role": "user", "content": "one"},
            {"role": "assistant", "content": "(no reply: the user cancelled the turn)"},
            {"role": "user", "content": "two"},
        ])
    );

    // Usage can be turned off for a server that rejects `stream_options`.
    let (fake, base) = upstream(stream(vec![
        chunk(json!({"content": "ok"}), Some("stop")),
        done(),
    ]))
    .await;
    let options = OpenAiOptions {
        include_usage: false,
        ..no_retries()
    };
    let (result, _) = run_turn(&agent(&base, options), ctx("hi", vec![])).await;
    assert_eq!(result, Ok(()));
    let body = fake.request_body(0).expect("one request");
    assert!(body.get("stream_options").is_none());
}
