//! Request and response bodies of the REST endpoints, and the one error shape.

use serde::{Deserialize, Serialize};

use crate::attachment::Attachment;
use crate::call::CalledBy;
use crate::input::{OnBusy, TurnRequest};
use crate::message::Message;
use crate::turn::{ToolCall, TurnState};

/// Response header of `GET /history` carrying the snapshot's cursor.
pub const CURSOR_HEADER: &str = "X-Turnstream-Cursor";

/// Body of `POST /api/sessions/{session}/messages`.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PostMessageRequest {
    pub content: String,
    #[serde(default)]
    pub client_message_id: Option<String>,
    /// The user a service key posts for (contract v1.1); refused with a user's token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub author: Option<String>,
    /// Files the message refers to (contract v1.2), at most
    /// [`MAX_ATTACHMENTS_PER_MESSAGE`](crate::limits::MAX_ATTACHMENTS_PER_MESSAGE).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attachments: Vec<Attachment>,
    /// What to do while a turn of the session is in flight (v1.2; default `enqueue`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_busy: Option<OnBusy>,
    /// The message the new one follows (v1.2): absent, the active leaf (v1's behaviour); `null`,
    /// none (a new first message: an edit of the first); an id, an edit of that message's
    /// child, whose new sibling this message becomes.
    #[serde(
        default,
        deserialize_with = "present_or_null",
        skip_serializing_if = "Option::is_none"
    )]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>))]
    pub parent_id: Option<Option<String>>,
    /// The agent that answers (v1.3): 1 to 64 characters of `[a-z0-9_-]`; `default` when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
}

/// A field that is present is `Some`, `null` included (`Some(None)`).
fn present_or_null<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<Option<String>>, D::Error> {
    Option::<String>::deserialize(d).map(Some)
}

/// Body of `POST /api/messages/{message}/regenerate` (v1.2), optional (`{}` or none).
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegenerateRequest {
    /// What to do while a turn of the session is in flight (default `enqueue`), as for messages.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_busy: Option<OnBusy>,
    /// Makes the request idempotent within the session (1 to 128 characters of
    /// `[A-Za-z0-9_.:-]`, as `client_message_id`): a retry with the same id for the same user
    /// message answers `200` with the first answer and starts nothing; for another message of
    /// the session, `409 client_request_id_conflict`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_request_id: Option<String>,
}

/// Answer of `POST /api/messages/{message}/regenerate` (v1.2), 202: the new turn for the same
/// user message (200, the same answer again, for a retry with the same `client_request_id`).
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegenerateResponse {
    /// The user message answered again.
    pub message_id: String,
    pub turn_id: String,
    /// Cursor of the new turn's `turn_queued`.
    pub event_id: String,
    /// The same cursor (stream from here).
    pub cursor: String,
}

/// Body of `POST /api/sessions/{session}/active` (v1.2).
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SwitchBranchRequest {
    /// Any message of the session; the active leaf becomes its newest descendant's leaf.
    pub leaf_id: String,
}

/// Answer of `POST /api/sessions/{session}/active` (v1.2).
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SwitchBranchResponse {
    pub session_id: String,
    /// The active leaf now.
    pub leaf_id: String,
    /// Cursor of the `branch_changed` event.
    pub event_id: String,
}

/// Answer of `POST /api/sessions/{session}/messages` (202 when created, 200 on an idempotent retry).
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PostMessageResponse {
    pub message_id: String,
    pub client_message_id: Option<String>,
    pub turn_id: String,
    /// Cursor of the `message_received` event.
    pub event_id: String,
}

/// Answer of `GET /api/sessions/{session}/history`.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HistoryResponse {
    pub session_id: String,
    /// Oldest first.
    pub messages: Vec<Message>,
    /// Journal position of exactly this snapshot: stream from here with `snapshot=1`.
    pub cursor: String,
    /// Whether older messages exist (page with `before=<first message_id>`).
    #[serde(default)]
    pub has_more: bool,
    /// The leaf of the branch shown (v1.2): the session's active leaf unless `?leaf=` named
    /// another. May be the id of a reply still being written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leaf_id: Option<String>,
}

/// Answer of `GET /api/turns/{turn}`.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TurnInfo {
    pub turn_id: String,
    pub session_id: String,
    pub state: TurnState,
    pub created_at: i64,
    pub started_at: Option<i64>,
    pub ended_at: Option<i64>,
    /// The reply so far while running; the final reply once ended.
    pub text: String,
    #[serde(default)]
    pub thinking: String,
    #[serde(default)]
    pub tools: Vec<ToolCall>,
    /// The assistant message written when the turn ended.
    pub message: Option<Message>,
    pub error: Option<String>,
    /// Tokens the model reported for the turn (v1.1), when the agent knows them; omitted
    /// otherwise, so a v1 client sees the shape it knows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    /// The agent's requests in this turn and their answers (v1.2); omitted when none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub requests: Vec<TurnRequest>,
    /// The id of the reply the turn writes (v1.2; the `message`'s id once it ended); omitted
    /// when unknown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reply_id: Option<String>,
    /// The user message the turn answers (v1.2); omitted when unknown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_id: Option<String>,
    /// The turn's agent (v1.3); omitted by servers before it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    /// For a called turn (v1.3): the call that made it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub called_by: Option<CalledBy>,
}

/// Token counts of one turn, as an OpenAI-compatible server reports them.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    #[serde(default)]
    pub prompt_tokens: u64,
    #[serde(default)]
    pub completion_tokens: u64,
    #[serde(default)]
    pub total_tokens: u64,
}

/// Answer of `POST /api/turns/{turn}/cancel`.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CancelResponse {
    pub turn_id: String,
    pub state: TurnState,
}

/// Answer of `DELETE /api/sessions/{session}/realtime`.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClearRealtimeResponse {
    pub session_id: String,
    pub deleted_events: u64,
}

/// Every error: `{"error": {"code": "snake_case", "message": "..."}}`.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorDetail {
    pub code: String,
    pub message: String,
}
