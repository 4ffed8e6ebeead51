//! Agents: what produces a turn's thinking, tool calls and reply. They know nothing of storage;
//! they emit through the [`TurnSink`] the turn runner hands them.

pub mod demo;
pub mod openai;
pub mod worker;

use futures::future::BoxFuture;
use tokio::sync::mpsc;
use turnstream_protocol::{Attachment, Message, ToolCall, Usage};

/// What an agent is given for one turn.
#[derive(Debug, Clone)]
pub struct TurnContext {
    pub session_id: String,
    pub turn_id: String,
    /// The user message that started this turn.
    pub user_message: String,
    /// The files that message refers to (contract v1.2), in the order they were posted.
    pub attachments: Vec<Attachment>,
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

/// Where an agent sends its output. Sending never blocks; the runner journals (and coalesces) it.
#[derive(Debug, Clone)]
pub struct TurnSink {
    tx: mpsc::UnboundedSender<Emission>,
}

impl TurnSink {
    /// A sink and the receiving end the runner drains.
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
