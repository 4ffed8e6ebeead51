//! Agents: what produces a turn's thinking, tool calls and reply. They know nothing of storage;
//! they emit through the [`TurnSink`] turn execution ([`crate::turns`]) hands them.

pub mod demo;
pub mod openai;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use tokio::sync::{mpsc, oneshot};
use turnstream_protocol::{
    ActiveTurn, Attachment, CallTarget, InputRequest, Message, ToolCall, Usage,
};

use demo::DemoAgent;
use openai::{OpenAiAgent, OpenAiOptions};

/// A built-in agent, as the configuration names it (see [`crate::config::Config::builtin_agent`]).
#[derive(Debug, Clone)]
pub enum Builtin {
    /// The demo agent, with no network.
    Demo { delay: Duration },
    /// An OpenAI-compatible endpoint.
    Openai {
        base_url: String,
        model: String,
        api_key: Option<String>,
        options: OpenAiOptions,
    },
}

impl Builtin {
    /// The agent itself.
    pub fn build(self) -> Arc<dyn Agent> {
        match self {
            Builtin::Demo { delay } => Arc::new(DemoAgent { delay }),
            Builtin::Openai {
                base_url,
                model,
                api_key,
                options,
            } => Arc::new(OpenAiAgent::with_options(base_url, model, api_key, options)),
        }
    }
}

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
    /// Set when the turn asked for input, waited and was answered (v1.2): everything the turn
    /// showed so far (reply text, thinking, tools) and its requests with their answers. The
    /// agent continues from there; the turn's reply is the text so far plus what it sends now.
    pub continuation: Option<ActiveTurn>,
}

/// One thing an agent said during a turn, in order.
#[derive(Debug, Clone, PartialEq)]
pub enum Emission {
    Thinking(String),
    Tool(ToolCall),
    Response(String),
    /// Tokens the model reported for the turn; the last one sent is kept on the turn.
    Usage(Usage),
    /// A request for input (v1.2): once the agent returns, the turn waits for the answers,
    /// holding nothing, and the agent is called again with them.
    Request(InputRequest),
    /// A call of another agent (v1.3), and where to say whether it opened.
    Call(AgentCall, CallReply),
}

/// A call a built-in agent opens (v1.3): agent `agent` answers `content` in session
/// `session_id`; the answer comes as the request `request_id`'s, as for [`TurnSink::request`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentCall {
    pub request_id: String,
    pub agent: String,
    pub session_id: String,
    pub content: String,
}

/// Why a call did not open: the error code (`call_cycle`, `call_depth_exceeded`,
/// `invalid_body`, or what the storage said).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("call refused: {0}")]
pub struct CallRefused(pub String);

/// Whether a call opened: the child turn, or why not.
pub type CallOutcome = Result<CallTarget, CallRefused>;

/// Where the emitter says whether a call opened (taken once).
#[derive(Clone)]
pub struct CallReply(Arc<Mutex<Option<oneshot::Sender<CallOutcome>>>>);

impl CallReply {
    /// Says how the call went (only the first time).
    pub fn send(&self, outcome: CallOutcome) {
        if let Some(tx) = crate::mutex::lock(&self.0).take() {
            let _ = tx.send(outcome);
        }
    }
}

impl std::fmt::Debug for CallReply {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CallReply")
    }
}

impl PartialEq for CallReply {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
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

    /// Asks for input (v1.2): an approval, a tool the browser runs, or a question. The agent
    /// then returns `Ok`; the turn waits and the agent is called again with the answers in
    /// [`TurnContext::continuation`].
    pub fn request(&self, request: InputRequest) {
        let _ = self.tx.send(Emission::Request(request));
    }

    /// Opens a call of another agent (v1.3) and says whether it opened: the child turn, or why
    /// not. Once open, the agent returns `Ok`; the turn waits, and the agent is called again
    /// when the child ended, with its `{turn_id, state, text, error?}` as the request's answer
    /// in [`TurnContext::continuation`].
    pub async fn call(&self, call: AgentCall) -> CallOutcome {
        let (tx, rx) = oneshot::channel();
        let reply = CallReply(Arc::new(Mutex::new(Some(tx))));
        if self.tx.send(Emission::Call(call, reply)).is_err() {
            return Err(CallRefused("turn_ended".into()));
        }
        rx.await
            .unwrap_or_else(|_| Err(CallRefused("turn_ended".into())))
    }
}

/// Why a turn failed; the message is shown to the user as the turn's `error`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct AgentError(pub String);

/// Produces one turn. Returning `Ok` completes the turn with the text sent through
/// [`TurnSink::response`] (or, after [`TurnSink::request`], makes it wait for the answers);
/// `Err` fails it, keeping that text. Cancellation drops the future.
pub trait Agent: Send + Sync + 'static {
    fn run<'a>(&'a self, ctx: TurnContext, sink: TurnSink)
        -> BoxFuture<'a, Result<(), AgentError>>;
}
