//! Agents by name and agent-to-agent calls (contract v1.3). Every turn has an `agent`; an agent
//! may open a call: a request of kind `agent_call` in its own turn whose answer is the end of a
//! child turn, of the named agent, in another session.

use serde::{Deserialize, Serialize};

use crate::turn::TurnState;

/// The agent of a turn whose message named none.
pub const DEFAULT_AGENT: &str = "default";
/// Longest agent name.
pub const MAX_AGENT_LEN: usize = 64;
/// Most calls on a chain: a call whose caller is itself this many calls deep is refused
/// (`409 call_depth_exceeded`).
pub const MAX_CALL_DEPTH: usize = 8;
/// Most agents one claim may name.
pub const MAX_CLAIM_AGENTS: usize = 32;
/// The prefix of the `author` of a child turn's message: `agent:<caller's agent>`.
pub const CALLER_AUTHOR_PREFIX: &str = "agent:";
/// The prefix of the `by` of a call's answer: `turn:<child turn id>`.
pub const ANSWERED_BY_TURN_PREFIX: &str = "turn:";

/// Whether `name` is an agent name: 1 to [`MAX_AGENT_LEN`] characters of `[a-z0-9_-]`.
pub fn is_valid_agent(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_AGENT_LEN
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'_' | b'-'))
}

/// What an `agent_call` request calls: the child turn, its ids drawn when the call opened.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallTarget {
    pub agent: String,
    pub session_id: String,
    pub turn_id: String,
    /// The child's user message.
    pub message_id: String,
}

/// On a called turn and its message: who called it.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CalledBy {
    pub turn_id: String,
    pub session_id: String,
    pub request_id: String,
}

/// The answer of an `agent_call` request: how its child turn ended.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallAnswer {
    pub turn_id: String,
    pub state: TurnState,
    /// The child's reply.
    pub text: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agent_names() {
        for ok in [
            "default",
            "researcher",
            "a",
            "a-b_9",
            &"x".repeat(MAX_AGENT_LEN),
        ] {
            assert!(is_valid_agent(ok), "{ok}");
        }
        for bad in [
            "",
            "Researcher",
            "a b",
            "a.b",
            "é",
            &"x".repeat(MAX_AGENT_LEN + 1),
        ] {
            assert!(!is_valid_agent(bad), "{bad}");
        }
    }

    #[test]
    fn answer_shape() {
        let a = CallAnswer {
            turn_id: "t".into(),
            state: TurnState::Completed,
            text: "hi".into(),
            error: None,
        };
        assert_eq!(
            serde_json::to_string(&a).unwrap_or_default(),
            r#"{"turn_id":"t","state":"completed","text":"hi"}"#
        );
    }
}
