//! What sibling tabs of one session tell each other over their BroadcastChannel: facts a tab
//! learned outside the shared stream (its optimistic sends, POST answers, rejections and
//! turn-status checks). Each is keyed by id and merged like any other source, never by arrival.

use serde::{Deserialize, Serialize};
use turnstream_protocol::{
    Attachment, ErrorDetail, OnBusy, PostMessageResponse, RawJson, TurnInfo,
};

use crate::reducer::Conversation;

/// One message on the channel `turnstream:<baseUrl>:<sessionId>`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum TabMessage {
    /// A tab is sending this message.
    Optimistic {
        session_id: String,
        client_message_id: String,
        content: String,
        /// Its files (contract v1.2); absent when none, as a tab of an earlier SDK writes it.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        attachments: Vec<Attachment>,
        created_at: i64,
        /// Its `on_busy` (contract v1.2); absent for the default.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        on_busy: Option<OnBusy>,
        /// An edit's `parent_id` (contract v1.2; `Some(None)`: a new first message); absent
        /// for a message that follows the active leaf.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        edit: Option<Option<String>>,
    },
    /// The server accepted a message.
    Posted {
        session_id: String,
        response: PostMessageResponse,
    },
    /// The server refused a message for good.
    Rejected {
        session_id: String,
        client_message_id: String,
        error: ErrorDetail,
    },
    /// A turn-status check answered (`info: null` when the server did not know the turn).
    Recovered {
        session_id: String,
        turn_id: String,
        /// Boxed: a turn's status is far larger than the other messages.
        info: Option<Box<TurnInfo>>,
    },
    /// A tab answered one of the agent's requests (contract v1.2): shown at once everywhere,
    /// posted by whichever tab drains the outbox; told again with `sent` once the server took
    /// it, so no other tab posts it too. (A refusal reaches every tab through the stream.)
    Answer {
        session_id: String,
        turn_id: String,
        request_id: String,
        answer: RawJson,
        sent: bool,
    },
}

impl TabMessage {
    pub fn session_id(&self) -> &str {
        match self {
            TabMessage::Optimistic { session_id, .. }
            | TabMessage::Posted { session_id, .. }
            | TabMessage::Rejected { session_id, .. }
            | TabMessage::Recovered { session_id, .. }
            | TabMessage::Answer { session_id, .. } => session_id,
        }
    }

    /// Folds the message into a conversation; messages of another session change nothing.
    pub fn apply(&self, conv: &mut Conversation) -> bool {
        if self.session_id() != conv.session_id() {
            return false;
        }
        match self {
            TabMessage::Optimistic {
                client_message_id,
                content,
                attachments,
                created_at,
                on_busy,
                edit,
                ..
            } => match edit {
                Some(parent) => conv.apply_optimistic_edit(
                    client_message_id,
                    content,
                    attachments,
                    *created_at,
                    *on_busy,
                    parent.clone(),
                ),
                None => conv.apply_optimistic(
                    client_message_id,
                    content,
                    attachments,
                    *created_at,
                    *on_busy,
                ),
            },
            TabMessage::Posted { response, .. } => conv.apply_post_response(response),
            TabMessage::Rejected {
                client_message_id,
                error,
                ..
            } => conv.reject(client_message_id, error),
            TabMessage::Recovered { turn_id, info, .. } => {
                conv.apply_turn_info(turn_id, info.as_deref())
            }
            TabMessage::Answer {
                turn_id,
                request_id,
                answer,
                sent,
                ..
            } => conv.answer_local(turn_id, request_id, answer, *sent),
        }
    }
}
