//! Agents: what produces a turn's thinking, tool calls and reply. They know nothing of storage;
//! they emit through the [`TurnSink`] turn execution ([`crate::turns`]) hands them.

pub mod demo;
pub mod openai;

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use tokio::sync::mpsc;
use turnstream_protocol::{Message, ToolCall, Usage};

use crate::config::{AgentKind, Config};
use demo::DemoAgent;
use openai::{OpenAiAgent, OpenAiOptions};

/// The built-in agent a configuration asks for; `None` with `--agent worker` (worker processes
/// run the turns).
pub fn from_config(config: &Config) -> Option<Arc<dyn Agent>> {
    match config.agent {
        AgentKind::Demo => Some(Arc::new(DemoAgent {
            delay: Duration::from_millis(config.demo_delay_ms),
        })),
        AgentKind::Openai => Some(Arc::new(OpenAiAgent::with_options(
            config.openai_base_url.clone(),
            config.openai_model.clone(),
            std::env::var("OPENAI_API_KEY").ok(),
            openai_options(config),
        ))),
        AgentKind::Worker => None,
    }
}

/// The openai agent's options from the `--openai-*` flags.
pub fn openai_options(config: &Config) -> OpenAiOptions {
    OpenAiOptions {
        system_prompt: config
            .openai_system_prompt
            .clone()
            .or_else(|| config.openai_system_prompt_file.clone()),
        max_tokens: config.openai_max_tokens,
        temperature: config.openai_temperature,
        include_usage: config.openai_include_usage,
        idle_timeout: Duration::from_secs(config.openai_idle_timeout_secs.max(1)),
        max_retries: config.openai_max_retries,
        ..Default::default()
    }
}

/// What an agent is given for one turn.
#[derive(Debug, Clone)]
pub struct TurnContext {
    pub session_id: String,
    pub turn_id: String,
    /// The user message that started this turn.
    pub user_message: String,
    /// The session's earlier messages, oldest first, not including `user_message`.
    pub history: Vec<Message>,
}

/// One thing an agent said during a turn, in order.
#[derive(Debug, Clone, PartialEq)]
pub enum Emission {
    Thinking(String),
    Tool(ToolCall),
    Response(String),
    /// Tokens the model reported for the turn; the last one sent is kept on the turn.
    Usage(Usage),
}

/// Where an agent sends its output. Sending never blocks; turn execution journals (and coalesces) it.
#[derive(Debug, Clone)]
pub struct TurnSink {
    tx: mpsc::UnboundedSender<Emission>,
}

impl TurnSink {
    /// A sink and the receiving end turn execution drains.
    pub fn channel() -> (TurnSink, mpsc::UnboundedReceiver<Emission>) {
        let (tx, rx) = mpsc::unbounded_channel();
        (TurnSink { tx }, rx)
    }

    pub fn thinking(&self, delta: impl Into<String>) {
        let delta = delta.into();
        if !delta.is_empty() {
            // A closed receiver means the turn already ended (cancelled); nothing to do.
            let _ = self.tx.send(Emission::Thinking(delta));
        }
    }

    pub fn tool(&self, call: ToolCall) {
        let _ = self.tx.send(Emission::Tool(call));
    }

    pub fn response(&self, delta: impl Into<String>) {
        let delta = delta.into();
        if !delta.is_empty() {
            let _ = self.tx.send(Emission::Response(delta));
        }
    }

    pub fn usage(&self, usage: Usage) {
        let _ = self.tx.send(Emission::Usage(usage));
    }
}

/// Why a turn failed; the message is shown to the user as the turn's `error`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct AgentError(pub String);

/// Produces one turn. Returning `Ok` completes the turn with the text sent through
/// [`TurnSink::response`]; `Err` fails it, keeping that text. Cancellation drops the future.
pub trait Agent: Send + Sync + 'static {
    fn run<'a>(&'a self, ctx: TurnContext, sink: TurnSink)
        -> BoxFuture<'a, Result<(), AgentError>>;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Cli, Command};
    use clap::Parser;

    #[test]
    fn openai_flags_become_the_agent_options() -> Result<(), Box<dyn std::error::Error>> {
        let defaults = openai_options(&Config::defaults());
        assert_eq!(defaults.idle_timeout, Duration::from_secs(300));
        assert_eq!(defaults.max_retries, 3);
        assert!(defaults.include_usage);
        assert_eq!(defaults.system_prompt, None);
        assert_eq!(defaults.max_tokens, None);

        let dir = tempfile::tempdir()?;
        let prompt = dir.path().join("prompt.txt");
        std::fs::write(&prompt, "You answer in French.\n")?;
        let parsed = Cli::try_parse_from([
            "turnstream",
            "serve",
            "--openai-system-prompt-file",
            prompt.to_str().ok_or("path")?,
            "--openai-max-tokens",
            "512",
            "--openai-temperature",
            "0.2",
            "--openai-idle-timeout-secs",
            "30",
            "--openai-max-retries",
            "0",
            "--openai-include-usage",
            "false",
        ])?;
        let Command::Serve(c) = parsed.command else {
            return Err("not `serve`".into());
        };
        let o = openai_options(&c);
        assert_eq!(o.system_prompt.as_deref(), Some("You answer in French.\n"));
        assert_eq!(o.max_tokens, Some(512));
        assert_eq!(o.temperature, Some(0.2));
        assert_eq!(o.idle_timeout, Duration::from_secs(30));
        assert_eq!(o.max_retries, 0);
        assert!(!o.include_usage);

        // A prompt file that cannot be read stops the server at startup, naming the file.
        let missing = dir.path().join("missing.txt");
        let missing = missing.to_str().ok_or("path")?;
        let error = Cli::try_parse_from([
            "turnstream",
            "serve",
            "--openai-system-prompt-file",
            missing,
        ])
        .err()
        .ok_or("a missing prompt file parsed")?;
        assert!(error.to_string().contains("missing.txt"), "{error}");
        // The prompt and the prompt file exclude each other.
        assert!(Cli::try_parse_from([
            "turnstream",
            "serve",
            "--openai-system-prompt",
            "x",
            "--openai-system-prompt-file",
            prompt.to_str().ok_or("path")?,
        ])
        .is_err());
        Ok(())
    }
}
