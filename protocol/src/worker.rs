//! Wire types of the worker API (contract v1.1): an agent process of its own, in any language,
//! claims queued turns, streams their output under a lease and ends them.

use serde::{Deserialize, Serialize};

use crate::api::Usage;
use crate::attachment::Attachment;
use crate::call::CalledBy;
use crate::input::{InputRequest, RawJson};
use crate::message::Message;
use crate::turn::{ToolCall, TurnState};

/// Longest `wait_ms` of a claim: how long one claim may long-poll for a turn.
pub const MAX_CLAIM_WAIT_MS: u64 = 60_000;
/// Most turns one claim hands out.
pub const MAX_CLAIM_TURNS: u32 = 32;
/// Most events in one `events` request.
pub const MAX_WORKER_EVENTS: usize = 1024;
/// Longest error message a worker may give when it fails a turn, in bytes.
pub const MAX_WORKER_ERROR_BYTES: usize = 4096;
/// The `acked_seq` of a turn no `events` request was accepted for yet.
pub const NO_SEQ: i64 = -1;

/// `POST /api/worker/claim`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ClaimRequest {
    /// Who claims: 1 to 128 characters of `[A-Za-z0-9_.:-]`, kept as the lease's owner.
    pub worker_id: String,
    /// How long to wait for a turn when none is ready, 0 to [`MAX_CLAIM_WAIT_MS`].
    #[serde(default)]
    pub wait_ms: u64,
    /// Most turns to hand out, 1 to [`MAX_CLAIM_TURNS`].
    #[serde(default = "one")]
    pub max_turns: u32,
    /// Only turns of these agents (v1.3), at most
    /// [`MAX_CLAIM_AGENTS`](crate::call::MAX_CLAIM_AGENTS); absent: every agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agents: Option<Vec<String>>,
}

fn one() -> u32 {
    1
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ClaimResponse {
    pub turns: Vec<ClaimedTurn>,
}

/// A turn handed to a worker: it is `running` and the worker holds its lease.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ClaimedTurn {
    pub turn_id: String,
    pub session_id: String,
    pub user_message: Message,
    /// The session's messages before `user_message`, in conversation order.
    pub history: Vec<Message>,
    pub lease: LeaseGrant,
    /// Set when the turn ran before, waited for input and was answered (v1.2): continue it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub continuation: Option<Continuation>,
    /// The turn's agent (v1.3).
    #[serde(default = "default_agent")]
    pub agent: String,
    /// For a called turn (v1.3): the call that made it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub called_by: Option<CalledBy>,
}

fn default_agent() -> String {
    crate::call::DEFAULT_AGENT.to_string()
}

/// What a worker continuing a turn needs (v1.2).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Continuation {
    /// The next `seq` to send (of `events`, `wait`, `complete` or `fail`).
    pub seq: i64,
    /// Every answered request of the turn, in the order they were answered.
    pub answers: Vec<Answer>,
    /// The turn's events so far, in the shape workers send them.
    pub events: Vec<WorkerEvent>,
}

/// One answer in a [`Continuation`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Answer {
    pub request_id: String,
    pub answer: RawJson,
    /// `null` for the server's answer to a request whose time ran out.
    pub by: Option<String>,
}

/// The lease a worker holds on a turn: every later request names its token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct LeaseGrant {
    pub token: String,
    /// Unix milliseconds; every accepted request moves it forward.
    pub expires_at: i64,
}

/// One thing a worker's agent said, in order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum WorkerEvent {
    Thinking {
        delta: String,
    },
    Response {
        delta: String,
    },
    Tool(ToolCall),
    /// The agent asks (v1.2); then `POST .../wait` ends the lease and the turn waits.
    InputRequested(InputRequest),
    /// The agent calls another agent (v1.3): a request of kind `agent_call` in this turn and a
    /// child turn of `agent` in session `session_id`, with `content` as its user message; then
    /// `POST .../wait`, and the child's end answers it.
    Call(CallEvent),
}

/// A worker's `{"type": "call", ...}` event (v1.3).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CallEvent {
    /// Unique in the calling turn, as any request's id.
    pub request_id: String,
    pub agent: String,
    pub session_id: String,
    pub content: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attachments: Vec<Attachment>,
}

/// `POST /api/worker/turns/{turn}/wait` (v1.2): ends the lease after `input_requested` events;
/// `seq` as for `complete`. The turn waits, then is claimable again once answered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct WaitRequest {
    pub lease: String,
    pub seq: i64,
}

/// `POST /api/worker/turns/{turn}/events`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct EventsRequest {
    pub lease: String,
    /// 0 for a turn's first request, one more for each next one.
    pub seq: i64,
    pub events: Vec<WorkerEvent>,
}

/// `POST /api/worker/turns/{turn}/heartbeat`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct HeartbeatRequest {
    pub lease: String,
}

/// `POST /api/worker/turns/{turn}/complete`; its `seq` is one past the last accepted events
/// request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CompleteRequest {
    pub lease: String,
    pub seq: i64,
    /// The tokens the model reported for the turn (v1.3), shown as the turn's `usage`; absent
    /// when the worker does not know them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
}

/// `POST /api/worker/turns/{turn}/fail`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct FailRequest {
    pub lease: String,
    pub seq: i64,
    pub error: WorkerError,
    /// As on `complete` (v1.3): the tokens a failed turn used before it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct WorkerError {
    pub message: String,
}

/// The answer of every accepted worker request on a turn.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct WorkerAck {
    /// The last accepted `seq` ([`NO_SEQ`] before the first).
    pub acked_seq: i64,
    pub state: TurnState,
    /// When the lease now expires (Unix milliseconds).
    pub lease_expires_at: i64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_parse_by_type() {
        let r: EventsRequest = serde_json::from_str(
            r#"{"lease":"l","seq":0,"events":[{"type":"thinking","delta":"a"},
            {"type":"response","delta":"b"},
            {"type":"tool","call_id":"c","name":"n","status":"started","input_preview":"{}"}]}"#,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(r.events.len(), 3);
        assert!(matches!(&r.events[2], WorkerEvent::Tool(t) if t.call_id == "c"));
        let asked: WorkerEvent = serde_json::from_str(
            r#"{"type":"input_requested","request_id":"r","kind":"question","prompt":"which?"}"#,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert!(
            matches!(asked, WorkerEvent::InputRequested(r) if r.prompt.as_deref() == Some("which?"))
        );
    }

    #[test]
    fn claim_defaults() {
        let r: ClaimRequest =
            serde_json::from_str(r#"{"worker_id":"w"}"#).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((r.wait_ms, r.max_turns), (0, 1));
    }
}
