//! A message of the conversation, as history, events and the worker API carry it: who wrote it,
//! where it stands, and its place in the branch tree.

use serde::{Deserialize, Serialize};

use crate::attachment::Attachment;
use crate::call::CalledBy;
use crate::input::TurnRequest;
use crate::turn::TurnState;

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
    pub requests: Vec<TurnRequest>,
    /// On the user message of a called turn (v1.3): the call that posted it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub called_by: Option<CalledBy>,
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
