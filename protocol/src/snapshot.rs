//! A stream's `snapshot` (opened with `snapshot=1`): the turns in flight as of its cursor, each
//! folded from its events so far.

use serde::{Deserialize, Serialize};

use crate::call::CalledBy;
use crate::event::EventBody;
use crate::input::{merge_answer, merge_request, TurnRequest};
use crate::turn::{merge_tool, ToolCall, TurnState};

/// The first event of a stream opened with `snapshot=1` (sent without an `id:` line).
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Snapshot {
    /// The resume position the snapshot describes; the events after it follow.
    pub cursor: String,
    pub active_turns: Vec<ActiveTurn>,
}

/// An in-flight turn as of a snapshot's cursor: everything its events said so far.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ActiveTurn {
    pub turn_id: String,
    pub session_id: String,
    pub state: TurnState,
    pub thinking: String,
    pub tools: Vec<ToolCall>,
    pub text: String,
    /// The agent's requests of this turn and their answers (v1.2); omitted when none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub requests: Vec<TurnRequest>,
    /// The id of the reply this turn writes (v1.2, as its `turn_queued` says): where it goes in
    /// the conversation tree; omitted when unknown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reply_id: Option<String>,
    /// The user message this turn answers (v1.2, as its `turn_queued` says); omitted when
    /// unknown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_id: Option<String>,
    /// The turn's agent (v1.3); omitted by servers before it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    /// For a called turn (v1.3): the call that made it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub called_by: Option<CalledBy>,
}

impl ActiveTurn {
    pub fn new(turn_id: impl Into<String>, session_id: impl Into<String>) -> Self {
        ActiveTurn {
            turn_id: turn_id.into(),
            session_id: session_id.into(),
            state: TurnState::Queued,
            thinking: String::new(),
            tools: Vec::new(),
            text: String::new(),
            requests: Vec::new(),
            reply_id: None,
            parent_id: None,
            agent: None,
            called_by: None,
        }
    }

    /// Folds one event of this turn into its progress. The server builds snapshots with this and
    /// clients may use it to continue one, so both sides agree on what "so far" means.
    pub fn apply(&mut self, body: &EventBody) {
        match body {
            EventBody::MessageReceived { .. } | EventBody::BranchChanged { .. } => {}
            EventBody::TurnQueued {
                reply_id,
                parent_id,
                agent,
            } => {
                if agent.is_some() {
                    self.agent.clone_from(agent);
                }
                // A turn queued before v1.2 says neither: what is known stays.
                if reply_id.is_some() {
                    self.reply_id.clone_from(reply_id);
                }
                if parent_id.is_some() {
                    self.parent_id.clone_from(parent_id);
                }
            }
            EventBody::TurnStarted {} => {
                if !self.state.is_terminal() {
                    self.state = TurnState::Running;
                }
            }
            EventBody::Thinking { delta } => self.thinking.push_str(delta),
            EventBody::ResponseDelta { delta } => self.text.push_str(delta),
            EventBody::Tool(call) => merge_tool(&mut self.tools, call),
            EventBody::TurnEnded { state, .. } => self.state = *state,
            EventBody::InputRequested(request) => {
                merge_request(&mut self.requests, request);
                if !self.state.is_terminal() {
                    self.state = TurnState::Waiting;
                }
            }
            EventBody::InputGiven(given) => {
                merge_answer(&mut self.requests, given);
                if self.state == TurnState::Waiting && !self.requests.iter().any(|r| r.is_open()) {
                    self.state = TurnState::Running;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::turn::ToolStatus;
    use serde_json::json;

    #[test]
    fn active_turn_folds() {
        let mut t = ActiveTurn::new("t", "s");
        t.apply(&EventBody::TurnStarted {});
        t.apply(&EventBody::Thinking { delta: "hm".into() });
        let mut call = ToolCall {
            call_id: "c".into(),
            name: "n".into(),
            status: ToolStatus::Started,
            input_preview: Some("in".into()),
            output_preview: None,
        };
        t.apply(&EventBody::Tool(call.clone()));
        call.status = ToolStatus::Finished;
        call.input_preview = None;
        call.output_preview = Some("out".into());
        t.apply(&EventBody::Tool(call));
        t.apply(&EventBody::ResponseDelta { delta: "a".into() });
        t.apply(&EventBody::ResponseDelta { delta: "b".into() });
        assert_eq!(t.state, TurnState::Running);
        assert_eq!(t.thinking, "hm");
        assert_eq!(t.text, "ab");
        assert_eq!(t.tools.len(), 1);
        assert_eq!(t.tools[0].status, ToolStatus::Finished);
        assert_eq!(t.tools[0].input_preview.as_deref(), Some("in"));
        assert_eq!(t.tools[0].output_preview.as_deref(), Some("out"));
    }

    /// `turn_queued` says which reply the turn writes and which message it answers (v1.2); a
    /// turn without them (queued before v1.2) serializes as before, field for field.
    #[test]
    fn active_turn_knows_its_reply_and_parent_from_turn_queued() {
        let mut t = ActiveTurn::new("t", "s");
        let v1 = serde_json::to_value(&t).unwrap_or_default();
        assert_eq!(
            v1,
            json!({"turn_id": "t", "session_id": "s", "state": "queued", "thinking": "", "tools": [], "text": ""})
        );
        t.apply(&EventBody::TurnQueued {
            reply_id: Some("msg_r".into()),
            parent_id: Some("msg_u".into()),
            agent: Some("researcher".into()),
        });
        t.apply(&EventBody::TurnStarted {});
        assert_eq!(t.reply_id.as_deref(), Some("msg_r"));
        assert_eq!(t.parent_id.as_deref(), Some("msg_u"));
        assert_eq!(t.agent.as_deref(), Some("researcher"));
        let v = serde_json::to_value(&t).unwrap_or_default();
        assert_eq!(v["reply_id"], "msg_r");
        assert_eq!(v["parent_id"], "msg_u");
        assert_eq!(
            serde_json::from_value::<ActiveTurn>(v).ok(),
            Some(t.clone())
        );
        // An old turn_queued (no ids) leaves what is known.
        t.apply(&EventBody::TurnQueued {
            reply_id: None,
            parent_id: None,
            agent: None,
        });
        assert_eq!(t.reply_id.as_deref(), Some("msg_r"));
        // A v1.1 snapshot's turn (no ids) still parses.
        let old: ActiveTurn = serde_json::from_value(v1).expect("parses");
        assert_eq!(old.reply_id, None);
    }
}
