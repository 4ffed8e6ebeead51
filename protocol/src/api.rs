//! Request and response bodies of the REST endpoints, and the one error shape.

use serde::{Deserialize, Serialize};

use crate::attachment::Attachment;
use crate::event::{ToolCall, TurnState};

/// Response header of `GET /history` carrying the snapshot's cursor.
pub const CURSOR_HEADER: &str = "X-Turnstream-Cursor";

#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    User,
    Assistant,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::User => "user",
            Role::Assistant => "assistant",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "user" => Role::User,
            "assistant" => Role::Assistant,
            _ => return None,
        })
    }
}

/// Status of a message in history. Assistant messages are written by the server only, once, when
/// their turn ends.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MessageStatus {
    Complete,
    Interrupted,
    Cancelled,
    Failed,
}

impl MessageStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            MessageStatus::Complete => "complete",
            MessageStatus::Interrupted => "interrupted",
            MessageStatus::Cancelled => "cancelled",
            MessageStatus::Failed => "failed",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "complete" => MessageStatus::Complete,
            "interrupted" => MessageStatus::Interrupted,
            "cancelled" => MessageStatus::Cancelled,
            "failed" => MessageStatus::Failed,
            _ => return None,
        })
    }

    /// The status of the assistant message written when a turn ends in `state`.
    pub fn for_terminal(state: TurnState) -> Self {
        match state {
            TurnState::Completed => MessageStatus::Complete,
            TurnState::Cancelled => MessageStatus::Cancelled,
            TurnState::Failed => MessageStatus::Failed,
            TurnState::Interrupted
            | TurnState::Queued
            | TurnState::Running
            | TurnState::Waiting => MessageStatus::Interrupted,
        }
    }
}

/// A message of chat history.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Message {
    pub message_id: String,
    pub client_message_id: Option<String>,
    pub role: Role,
    pub content: String,
    pub status: MessageStatus,
    pub turn_id: Option<String>,
    /// Unix milliseconds.
    pub created_at: i64,
    /// Cursor of the event that brought this message (`message_received` or `turn_ended`).
    pub event_id: String,
    /// Who wrote a user message (contract v1.1): the `sub` of the token it was posted with, or
    /// the author a service key named; `null` without auth and on assistant messages.
    #[serde(default)]
    pub author: Option<String>,
    /// The files a user message refers to (contract v1.2); omitted when there are none, so a
    /// v1 client sees the shape it knows.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attachments: Vec<Attachment>,
    /// The message this one follows in the conversation tree (contract v1.2): a reply's user
    /// message, a user message's preceding reply; `null` for the first. Omitted by servers
    /// before v1.2.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_id: Option<String>,
    /// In history (v1.2): this message's place among its parent's children, oldest first, when
    /// it has other versions (omitted when it is the only one, and in events).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub siblings: Option<Siblings>,
    /// On an assistant message (v1.2): the requests for input its turn opened, with their
    /// answers; omitted when none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub requests: Vec<crate::TurnRequest>,
}

/// A message's place among its parent's children (contract v1.2): versions made by edits (user
/// messages) or regenerations (replies).
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Siblings {
    /// 0-based position, oldest first.
    pub index: u32,
    pub count: u32,
    /// Every sibling's message id, oldest first (this one's at `index`): `GET .../history?leaf=ID`
    /// shows a sibling's branch.
    pub ids: Vec<String>,
}

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
    pub on_busy: Option<crate::OnBusy>,
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
    pub on_busy: Option<crate::OnBusy>,
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
    pub requests: Vec<crate::TurnRequest>,
    /// The id of the reply the turn writes (v1.2; the `message`'s id once it ended); omitted
    /// when unknown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reply_id: Option<String>,
    /// The user message the turn answers (v1.2); omitted when unknown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_id: Option<String>,
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
