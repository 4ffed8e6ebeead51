//! The built-in demo agent: needs no network, and its directives make every turn lifecycle path
//! reachable from outside (`/echo`, `/deltas`, `/sleep`, `/fail`, `/bigtool`).

use std::time::Duration;

use futures::future::BoxFuture;
use turnstream_protocol::{ToolCall, ToolStatus};

use super::{Agent, AgentError, TurnContext, TurnSink};

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
            _ => Directive::Chat(message.to_string()),
        }
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

    async fn run_directive(&self, d: Directive, sink: TurnSink) -> Result<(), AgentError> {
        match d {
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
            self.run_directive(d, sink).await
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
}
