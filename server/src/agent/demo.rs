//! The built-in demo agent: needs no network, and its directives make every turn lifecycle path
//! reachable from outside (`/echo`, `/deltas`, `/sleep`, `/fail`, `/bigtool`; and, v1.2,
//! `/approve`, `/ask`, `/clienttool`, which ask for input and continue with the answer; and,
//! v1.3, `/call AGENT SESSION TEXT`, which calls another agent and replies with its answer).

use std::time::Duration;

use futures::future::BoxFuture;
use serde::Deserialize;
use turnstream_protocol::{
    ActiveTurn, CallAnswer, InputRequest, RawJson, RequestKind, ToolCall, ToolRequest, ToolStatus,
    TurnState,
};

use super::{Agent, AgentCall, AgentError, CallRefused, TurnContext, TurnSink};

/// Largest `/bigtool` output, so a directive cannot exhaust memory.
pub const MAX_BIGTOOL_BYTES: usize = 16 * 1024 * 1024;
/// Most deltas of `/deltas`.
pub const MAX_DEMO_DELTAS: usize = 1_000_000;

#[derive(Debug, Clone)]
pub struct DemoAgent {
    /// Pause between deltas.
    pub delay: Duration,
}

/// What a user message asks the demo agent to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Directive {
    Echo(String),
    Deltas(usize),
    Sleep(u64, String),
    Fail(String),
    BigTool(usize),
    /// Asks approval for tool `demo_action` with input `{"action": TEXT}`.
    Approve(String),
    /// Asks a question with prompt TEXT.
    Ask(String),
    /// Asks the browser to run tool NAME with input `{}`.
    ClientTool(String),
    /// Replies with its context, one line per message, `ROLE: CONTENT`, its own message last.
    Context,
    /// Calls agent `agent` with message `text` in session `session` (v1.3), then replies with
    /// its answer.
    Call {
        agent: String,
        session: String,
        text: String,
    },
    Chat(String),
}

impl Directive {
    pub fn parse(message: &str) -> Directive {
        let m = message.trim_start();
        let (cmd, rest) = match m.split_once(char::is_whitespace) {
            Some((c, r)) => (c, r),
            None => (m, ""),
        };
        match cmd {
            // `/echo` replies exactly TEXT: only the one separating space is dropped.
            "/echo" => Directive::Echo(
                m.strip_prefix("/echo")
                    .unwrap_or("")
                    .strip_prefix(' ')
                    .unwrap_or(rest)
                    .to_string(),
            ),
            "/deltas" => match rest.trim().parse::<usize>() {
                Ok(n) => Directive::Deltas(n.min(MAX_DEMO_DELTAS)),
                Err(_) => Directive::Chat(message.to_string()),
            },
            "/sleep" => {
                let rest = rest.trim_start();
                let (ms, text) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
                match ms.parse::<u64>() {
                    Ok(ms) => Directive::Sleep(ms, text.to_string()),
                    Err(_) => Directive::Chat(message.to_string()),
                }
            }
            "/fail" => Directive::Fail(rest.trim().to_string()),
            "/bigtool" => match rest.trim().parse::<usize>() {
                Ok(n) => Directive::BigTool(n.min(MAX_BIGTOOL_BYTES)),
                Err(_) => Directive::Chat(message.to_string()),
            },
            "/approve" => Directive::Approve(rest.trim().to_string()),
            "/context" => Directive::Context,
            "/call" => {
                let mut parts = rest.trim_start().splitn(3, char::is_whitespace);
                match (parts.next(), parts.next()) {
                    (Some(agent), Some(session)) if !agent.is_empty() && !session.is_empty() => {
                        Directive::Call {
                            agent: agent.to_string(),
                            session: session.to_string(),
                            text: parts.next().unwrap_or("").trim_start().to_string(),
                        }
                    }
                    _ => Directive::Chat(message.to_string()),
                }
            }
            "/ask" => Directive::Ask(rest.trim().to_string()),
            "/clienttool" if !rest.trim().is_empty() => {
                Directive::ClientTool(rest.trim().to_string())
            }
            _ => Directive::Chat(message.to_string()),
        }
    }
}

/// The request id each asking directive uses (one request per turn).
const APPROVAL_ID: &str = "demo_approval";
const QUESTION_ID: &str = "demo_question";
const CLIENT_TOOL_ID: &str = "demo_client_tool";
const CALL_ID: &str = "demo_call";

/// The answer to call `id` in the turn so far (v1.3), once its child ended.
fn call_answer(so_far: Option<&ActiveTurn>, id: &str) -> Option<CallAnswer> {
    serde_json::from_str(given(so_far, id)?.as_str()).ok()
}

/// The raw answer given to request `id` in the turn so far, if any.
fn given<'a>(so_far: Option<&'a ActiveTurn>, id: &str) -> Option<&'a RawJson> {
    so_far?
        .requests
        .iter()
        .find(|r| r.request_id == id)?
        .answer
        .as_ref()
}

/// Any answer's fields, as the demo reads them.
#[derive(Debug, Default, Deserialize)]
struct AnswerFields {
    #[serde(default)]
    approved: Option<bool>,
    #[serde(default)]
    reason: Option<String>,
    #[serde(default)]
    output: Option<RawJson>,
    #[serde(default)]
    error: Option<String>,
    #[serde(default)]
    text: Option<String>,
    #[serde(default)]
    timed_out: bool,
}

/// The answer to request `id` in the turn so far, if it was given.
fn answer_to(so_far: Option<&ActiveTurn>, id: &str) -> Option<AnswerFields> {
    Some(serde_json::from_str(given(so_far, id)?.as_str()).unwrap_or_default())
}

/// ` (REASON)` when a reason was given.
fn with_reason(reason: Option<&str>) -> String {
    match reason {
        Some(r) if !r.trim().is_empty() => format!(" ({r})"),
        _ => String::new(),
    }
}

/// Splits text into word-sized deltas whose concatenation is exactly the text.
fn words(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut in_space = false;
    for (i, ch) in text.char_indices() {
        if ch.is_whitespace() {
            in_space = true;
        } else if in_space {
            out.push(&text[start..i]);
            start = i;
            in_space = false;
        }
    }
    if start < text.len() {
        out.push(&text[start..]);
    }
    out
}

impl DemoAgent {
    async fn pause(&self) {
        if !self.delay.is_zero() {
            tokio::time::sleep(self.delay).await;
        }
    }

    async fn stream(&self, sink: &TurnSink, text: &str) {
        for w in words(text) {
            self.pause().await;
            sink.response(w);
        }
    }

    async fn think(&self, sink: &TurnSink, text: &str) {
        for w in words(text) {
            self.pause().await;
            sink.thinking(w);
        }
    }

    async fn run_directive(
        &self,
        d: Directive,
        sink: TurnSink,
        ctx: &TurnContext,
    ) -> Result<(), AgentError> {
        let so_far = ctx.continuation.as_ref();
        match d {
            Directive::Context => {
                let mut lines: Vec<String> = ctx
                    .history
                    .iter()
                    .map(|m| format!("{}: {}", m.role.as_str(), m.content))
                    .collect();
                lines.push(format!("user: {}", ctx.user_message));
                self.stream(&sink, &lines.join("\n")).await
            }
            Directive::Approve(text) => match answer_to(so_far, APPROVAL_ID) {
                None => sink.request(InputRequest {
                    request_id: APPROVAL_ID.into(),
                    kind: RequestKind::Approval,
                    tool: Some(ToolRequest {
                        call_id: "call_demo_action".into(),
                        name: "demo_action".into(),
                        input: RawJson::from_value(&serde_json::json!({ "action": text })),
                    }),
                    prompt: None,
                    options: None,
                    expires_at: None,
                    call: None,
                }),
                Some(a) if a.timed_out => self.stream(&sink, &format!("Timed out: {text}")).await,
                Some(a) => {
                    let verdict = if a.approved == Some(true) {
                        "Approved"
                    } else {
                        "Denied"
                    };
                    let reason = with_reason(a.reason.as_deref());
                    self.stream(&sink, &format!("{verdict}: {text}{reason}"))
                        .await
                }
            },
            Directive::Ask(prompt) => match answer_to(so_far, QUESTION_ID) {
                None => sink.request(InputRequest {
                    request_id: QUESTION_ID.into(),
                    kind: RequestKind::Question,
                    tool: None,
                    prompt: Some(prompt),
                    options: None,
                    expires_at: None,
                    call: None,
                }),
                Some(a) if a.timed_out => self.stream(&sink, &format!("Timed out: {prompt}")).await,
                Some(a) => {
                    let text = a.text.unwrap_or_default();
                    self.stream(&sink, &format!("You answered: {text}")).await
                }
            },
            Directive::ClientTool(name) => match answer_to(so_far, CLIENT_TOOL_ID) {
                None => sink.request(InputRequest {
                    request_id: CLIENT_TOOL_ID.into(),
                    kind: RequestKind::ClientTool,
                    tool: Some(ToolRequest {
                        call_id: "call_client_tool".into(),
                        name: name.clone(),
                        input: RawJson::trusted("{}".into()),
                    }),
                    prompt: None,
                    options: None,
                    expires_at: None,
                    call: None,
                }),
                Some(a) if a.timed_out => self.stream(&sink, &format!("Timed out: {name}")).await,
                Some(AnswerFields {
                    error: Some(error), ..
                }) => {
                    self.stream(&sink, &format!("The tool failed: {error}"))
                        .await
                }
                Some(a) => {
                    let output = a.output.unwrap_or_else(RawJson::null);
                    self.stream(&sink, &format!("The tool returned: {}", output.as_str()))
                        .await
                }
            },
            Directive::Call {
                agent,
                session,
                text,
            } => match call_answer(so_far, CALL_ID) {
                None => {
                    let call = AgentCall {
                        request_id: CALL_ID.into(),
                        agent: agent.clone(),
                        session_id: session,
                        content: text,
                    };
                    // Opened, the turn waits for the child's end; refused, it says why.
                    if let Err(CallRefused(code)) = sink.call(call).await {
                        self.stream(&sink, &format!("{agent} refused: {code}"))
                            .await;
                    }
                }
                Some(a) if a.state == TurnState::Completed => {
                    self.stream(&sink, &format!("{agent} answered: {}", a.text))
                        .await
                }
                Some(a) => {
                    self.stream(
                        &sink,
                        &format!("{agent} ended {}: {}", a.state.as_str(), a.text),
                    )
                    .await
                }
            },
            Directive::Echo(text) => self.stream(&sink, &text).await,
            Directive::Deltas(n) => {
                for i in 1..=n {
                    self.pause().await;
                    sink.response(format!("x{i} "));
                }
            }
            Directive::Sleep(ms, text) => {
                tokio::time::sleep(Duration::from_millis(ms)).await;
                self.stream(&sink, &text).await;
            }
            Directive::Fail(message) => {
                self.think(&sink, "This one is going to fail.").await;
                self.stream(&sink, "Starting a reply that will not finish")
                    .await;
                let message = if message.is_empty() {
                    "demo failure".to_string()
                } else {
                    message
                };
                return Err(AgentError(message));
            }
            Directive::BigTool(bytes) => {
                let call_id = "call_bigtool".to_string();
                sink.tool(ToolCall {
                    call_id: call_id.clone(),
                    name: "bigtool".into(),
                    status: ToolStatus::Started,
                    input_preview: Some(format!("{{\"bytes\":{bytes}}}")),
                    output_preview: None,
                });
                self.pause().await;
                sink.tool(ToolCall {
                    call_id,
                    name: "bigtool".into(),
                    status: ToolStatus::Finished,
                    input_preview: None,
                    output_preview: Some("x".repeat(bytes)),
                });
                self.stream(&sink, &format!("The tool returned {bytes} bytes."))
                    .await;
            }
            Directive::Chat(message) => {
                self.think(&sink, "Reading the message and deciding how to answer.")
                    .await;
                let call_id = "call_lookup".to_string();
                sink.tool(ToolCall {
                    call_id: call_id.clone(),
                    name: "lookup".into(),
                    status: ToolStatus::Started,
                    input_preview: Some(serde_json::json!({ "query": message }).to_string()),
                    output_preview: None,
                });
                self.pause().await;
                self.pause().await;
                sink.tool(ToolCall {
                    call_id,
                    name: "lookup".into(),
                    status: ToolStatus::Finished,
                    input_preview: None,
                    output_preview: Some(format!(
                        "{} characters, {} words",
                        message.chars().count(),
                        words(&message).len()
                    )),
                });
                let reply = format!(
                    "You said: \"{}\". This reply streams word by word from the demo agent. Every word is journaled before it is sent, so a refresh, a dropped network, a second tab or a server restart shows the same text, with no duplicate and no gap.",
                    message.trim()
                );
                self.stream(&sink, &reply).await;
            }
        }
        Ok(())
    }
}

impl Agent for DemoAgent {
    fn run<'a>(
        &'a self,
        ctx: TurnContext,
        sink: TurnSink,
    ) -> BoxFuture<'a, Result<(), AgentError>> {
        Box::pin(async move {
            let d = Directive::parse(&ctx.user_message);
            self.run_directive(d, sink, &ctx).await
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::Emission;

    #[test]
    fn parses_directives() {
        assert_eq!(
            Directive::parse("/echo hi  there "),
            Directive::Echo("hi  there ".into())
        );
        assert_eq!(Directive::parse("/echo"), Directive::Echo("".into()));
        assert_eq!(Directive::parse("/deltas 5"), Directive::Deltas(5));
        assert_eq!(
            Directive::parse("/sleep 200 ok then"),
            Directive::Sleep(200, "ok then".into())
        );
        assert_eq!(
            Directive::parse("/fail boom now"),
            Directive::Fail("boom now".into())
        );
        assert_eq!(
            Directive::parse("/bigtool 300000"),
            Directive::BigTool(300_000)
        );
        assert_eq!(
            Directive::parse("/deltas many"),
            Directive::Chat("/deltas many".into())
        );
        assert_eq!(Directive::parse("hello"), Directive::Chat("hello".into()));
        assert_eq!(
            Directive::parse("/approve rm -rf tmp"),
            Directive::Approve("rm -rf tmp".into())
        );
        assert_eq!(
            Directive::parse("/ask which one?"),
            Directive::Ask("which one?".into())
        );
        assert_eq!(
            Directive::parse("/clienttool get_location"),
            Directive::ClientTool("get_location".into())
        );
        assert_eq!(
            Directive::parse("/call researcher s2 /echo hello"),
            Directive::Call {
                agent: "researcher".into(),
                session: "s2".into(),
                text: "/echo hello".into()
            }
        );
        assert_eq!(
            Directive::parse("/call researcher"),
            Directive::Chat("/call researcher".into())
        );
    }

    #[test]
    fn words_concatenate_to_the_text() {
        for t in ["", "a", " a b  c ", "héllo wörld\nnext"] {
            assert_eq!(words(t).concat(), t);
        }
        assert_eq!(words("a b c"), vec!["a ", "b ", "c"]);
    }

    #[tokio::test]
    async fn deltas_directive_emits_n_deltas() {
        let agent = DemoAgent {
            delay: Duration::ZERO,
        };
        let (sink, mut rx) = TurnSink::channel();
        let ctx = TurnContext {
            session_id: "s".into(),
            turn_id: "t".into(),
            user_message: "/deltas 3".into(),
            attachments: vec![],
            history: vec![],
            continuation: None,
        };
        assert!(agent.run(ctx, sink).await.is_ok());
        let mut got = vec![];
        while let Ok(e) = rx.try_recv() {
            got.push(e);
        }
        assert_eq!(
            got,
            vec![
                Emission::Response("x1 ".into()),
                Emission::Response("x2 ".into()),
                Emission::Response("x3 ".into())
            ]
        );
    }

    /// `/approve` asks, then (called again with the answer) replies with the verdict.
    #[tokio::test]
    async fn approve_asks_then_answers() {
        let agent = DemoAgent {
            delay: Duration::ZERO,
        };
        let mut ctx = TurnContext {
            session_id: "s".into(),
            turn_id: "t".into(),
            user_message: "/approve deploy prod".into(),
            attachments: vec![],
            history: vec![],
            continuation: None,
        };
        let (sink, mut rx) = TurnSink::channel();
        assert!(agent.run(ctx.clone(), sink).await.is_ok());
        let Ok(Emission::Request(request)) = rx.try_recv() else {
            panic!("no request")
        };
        assert_eq!(request.kind, RequestKind::Approval);
        let tool = request.tool.clone().expect("a tool");
        assert_eq!(
            (tool.name.as_str(), tool.input.as_str()),
            ("demo_action", r#"{"action":"deploy prod"}"#)
        );
        let mut so_far = ActiveTurn::new("t", "s");
        so_far
            .requests
            .push(turnstream_protocol::TurnRequest::open(&request));
        so_far.requests[0].answer = RawJson::parse(r#"{"approved":false,"reason":"not today"}"#);
        ctx.continuation = Some(so_far);
        let (sink, mut rx) = TurnSink::channel();
        assert!(agent.run(ctx, sink).await.is_ok());
        let mut reply = String::new();
        while let Ok(Emission::Response(d)) = rx.try_recv() {
            reply.push_str(&d);
        }
        assert_eq!(reply, "Denied: deploy prod (not today)");
    }
}
