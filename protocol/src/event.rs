//! Events: the journaled kinds every tab replays, and the control events of the stream.

use serde::{Deserialize, Serialize};

use crate::call::CallTarget;
use crate::input::{InputGiven, InputRequest, RequestKind, ToolRequest};
use crate::message::Message;
use crate::turn::{ToolCall, TurnState};

/// One journaled event, as sent in the `data:` line of the stream (its `id:` line is [`Event::id`]).
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Event {
    /// The cursor of this event; the same string as the SSE `id:` line.
    pub id: String,
    pub session_id: String,
    /// When the event was journaled, Unix milliseconds.
    pub ts: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn_id: Option<String>,
    #[serde(flatten)]
    pub body: EventBody,
    /// String fields cut to fit the payload cap, with their original sizes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub truncated: Vec<Truncation>,
}

/// The kind-specific part of an event; [`EventBody::kind`] is the SSE `event:` name and, but for
/// `input_requested` (whose `kind` field is the request's kind: `approval`, `client_tool` or
/// `question`, contract v1.2), the `kind` field of its data.
#[derive(Debug, Clone, PartialEq)]
pub enum EventBody {
    MessageReceived {
        message: Message,
    },
    /// The turn exists, `queued`. From v1.2 it names the reply it will write (`reply_id`,
    /// the `message_id` of its `turn_ended` message) and the user message it answers
    /// (`parent_id`): what a client needs to place a regeneration, which has no
    /// `message_received`.
    TurnQueued {
        reply_id: Option<String>,
        parent_id: Option<String>,
        /// The turn's agent (v1.3); omitted by servers before it.
        agent: Option<String>,
    },
    TurnStarted {},
    Thinking {
        delta: String,
    },
    Tool(ToolCall),
    ResponseDelta {
        delta: String,
    },
    TurnEnded {
        state: TurnState,
        message: Option<Message>,
        error: Option<String>,
    },
    /// The agent asks (v1.2): the turn waits until every open request is answered.
    InputRequested(InputRequest),
    /// A request was answered (v1.2).
    InputGiven(InputGiven),
    /// The session's active leaf moved (v1.2): a switch of branch. (An edit or a regeneration
    /// moves it too, shown by their own events.)
    BranchChanged {
        leaf_id: String,
    },
}

impl EventBody {
    /// The kind name, also the SSE `event:` field.
    pub fn kind(&self) -> &'static str {
        match self {
            EventBody::MessageReceived { .. } => "message_received",
            EventBody::TurnQueued { .. } => "turn_queued",
            EventBody::TurnStarted {} => "turn_started",
            EventBody::Thinking { .. } => "thinking",
            EventBody::Tool(_) => "tool",
            EventBody::ResponseDelta { .. } => "response_delta",
            EventBody::TurnEnded { .. } => "turn_ended",
            EventBody::InputRequested(_) => "input_requested",
            EventBody::InputGiven(_) => "input_given",
            EventBody::BranchChanged { .. } => "branch_changed",
        }
    }
}

/// Every journaled kind, in lifecycle order (the last three: contract v1.2).
pub const EVENT_KINDS: [&str; 10] = [
    "message_received",
    "turn_queued",
    "turn_started",
    "thinking",
    "tool",
    "response_delta",
    "turn_ended",
    "input_requested",
    "input_given",
    "branch_changed",
];

/// An `input_requested` event's fields but its `kind`, which names the variant of [`WireBody`].
#[derive(Serialize)]
struct RequestRef<'a> {
    request_id: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool: &'a Option<ToolRequest>,
    #[serde(skip_serializing_if = "Option::is_none")]
    prompt: &'a Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    options: &'a Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    expires_at: &'a Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    call: &'a Option<CallTarget>,
}

#[derive(Deserialize)]
struct RequestOwned {
    request_id: String,
    #[serde(default)]
    tool: Option<ToolRequest>,
    #[serde(default)]
    prompt: Option<String>,
    #[serde(default)]
    options: Option<Vec<String>>,
    #[serde(default)]
    expires_at: Option<i64>,
    #[serde(default)]
    call: Option<CallTarget>,
}

impl RequestOwned {
    fn into_request(self, kind: RequestKind) -> EventBody {
        EventBody::InputRequested(InputRequest {
            request_id: self.request_id,
            kind,
            tool: self.tool,
            prompt: self.prompt,
            options: self.options,
            expires_at: self.expires_at,
            call: self.call,
        })
    }
}

/// How an [`EventBody`] is written: tagged by `kind`, an `input_requested` by its request's kind.
#[derive(Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
enum WireBodyRef<'a> {
    MessageReceived {
        message: &'a Message,
    },
    TurnQueued {
        #[serde(skip_serializing_if = "Option::is_none")]
        reply_id: &'a Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        parent_id: &'a Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        agent: &'a Option<String>,
    },
    TurnStarted {},
    Thinking {
        delta: &'a str,
    },
    Tool(&'a ToolCall),
    ResponseDelta {
        delta: &'a str,
    },
    TurnEnded {
        state: TurnState,
        #[serde(skip_serializing_if = "Option::is_none")]
        message: &'a Option<Message>,
        #[serde(skip_serializing_if = "Option::is_none")]
        error: &'a Option<String>,
    },
    Approval(RequestRef<'a>),
    ClientTool(RequestRef<'a>),
    Question(RequestRef<'a>),
    AgentCall(RequestRef<'a>),
    InputGiven(&'a InputGiven),
    BranchChanged {
        leaf_id: &'a str,
    },
}

/// How an [`EventBody`] is read (the shape of [`WireBodyRef`], owned).
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
enum WireBody {
    MessageReceived {
        message: Message,
    },
    TurnQueued {
        #[serde(default)]
        reply_id: Option<String>,
        #[serde(default)]
        parent_id: Option<String>,
        #[serde(default)]
        agent: Option<String>,
    },
    TurnStarted {},
    Thinking {
        delta: String,
    },
    Tool(ToolCall),
    ResponseDelta {
        delta: String,
    },
    TurnEnded {
        state: TurnState,
        #[serde(default)]
        message: Option<Message>,
        #[serde(default)]
        error: Option<String>,
    },
    #[cfg_attr(feature = "openapi", schema(value_type = InputRequest))]
    Approval(RequestOwned),
    #[cfg_attr(feature = "openapi", schema(value_type = InputRequest))]
    ClientTool(RequestOwned),
    #[cfg_attr(feature = "openapi", schema(value_type = InputRequest))]
    Question(RequestOwned),
    #[cfg_attr(feature = "openapi", schema(value_type = InputRequest))]
    AgentCall(RequestOwned),
    InputGiven(InputGiven),
    BranchChanged {
        leaf_id: String,
    },
}

impl Serialize for EventBody {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let wire = match self {
            EventBody::MessageReceived { message } => WireBodyRef::MessageReceived { message },
            EventBody::TurnQueued {
                reply_id,
                parent_id,
                agent,
            } => WireBodyRef::TurnQueued {
                reply_id,
                parent_id,
                agent,
            },
            EventBody::TurnStarted {} => WireBodyRef::TurnStarted {},
            EventBody::Thinking { delta } => WireBodyRef::Thinking { delta },
            EventBody::Tool(call) => WireBodyRef::Tool(call),
            EventBody::ResponseDelta { delta } => WireBodyRef::ResponseDelta { delta },
            EventBody::TurnEnded {
                state,
                message,
                error,
            } => WireBodyRef::TurnEnded {
                state: *state,
                message,
                error,
            },
            EventBody::InputRequested(r) => {
                let fields = RequestRef {
                    request_id: &r.request_id,
                    tool: &r.tool,
                    prompt: &r.prompt,
                    options: &r.options,
                    expires_at: &r.expires_at,
                    call: &r.call,
                };
                match r.kind {
                    RequestKind::Approval => WireBodyRef::Approval(fields),
                    RequestKind::ClientTool => WireBodyRef::ClientTool(fields),
                    RequestKind::Question => WireBodyRef::Question(fields),
                    RequestKind::AgentCall => WireBodyRef::AgentCall(fields),
                }
            }
            EventBody::InputGiven(given) => WireBodyRef::InputGiven(given),
            EventBody::BranchChanged { leaf_id } => WireBodyRef::BranchChanged { leaf_id },
        };
        wire.serialize(s)
    }
}

impl<'de> Deserialize<'de> for EventBody {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(match WireBody::deserialize(d)? {
            WireBody::MessageReceived { message } => EventBody::MessageReceived { message },
            WireBody::TurnQueued {
                reply_id,
                parent_id,
                agent,
            } => EventBody::TurnQueued {
                reply_id,
                parent_id,
                agent,
            },
            WireBody::TurnStarted {} => EventBody::TurnStarted {},
            WireBody::Thinking { delta } => EventBody::Thinking { delta },
            WireBody::Tool(call) => EventBody::Tool(call),
            WireBody::ResponseDelta { delta } => EventBody::ResponseDelta { delta },
            WireBody::TurnEnded {
                state,
                message,
                error,
            } => EventBody::TurnEnded {
                state,
                message,
                error,
            },
            WireBody::Approval(r) => r.into_request(RequestKind::Approval),
            WireBody::ClientTool(r) => r.into_request(RequestKind::ClientTool),
            WireBody::Question(r) => r.into_request(RequestKind::Question),
            WireBody::AgentCall(r) => r.into_request(RequestKind::AgentCall),
            WireBody::InputGiven(given) => EventBody::InputGiven(given),
            WireBody::BranchChanged { leaf_id } => EventBody::BranchChanged { leaf_id },
        })
    }
}

#[cfg(feature = "openapi")]
impl utoipa::PartialSchema for EventBody {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        <WireBody as utoipa::PartialSchema>::schema()
    }
}

#[cfg(feature = "openapi")]
impl utoipa::ToSchema for EventBody {}

/// A string field cut to fit the payload cap.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Truncation {
    /// Dotted path of the field within the event, e.g. `output_preview` or `message.content`.
    pub field: String,
    /// Size of the field before it was cut, in bytes.
    pub original_size: usize,
}

/// Why a stream asked the client to reload history.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ResyncReason {
    /// The resume position did not parse.
    Invalid,
    /// The resume position belongs to another journal (the database was recreated).
    Epoch,
    /// Events after the resume position were removed by retention.
    Expired,
    /// The resume position is ahead of the journal head.
    Future,
}

impl ResyncReason {
    pub fn as_str(self) -> &'static str {
        match self {
            ResyncReason::Invalid => "invalid",
            ResyncReason::Epoch => "epoch",
            ResyncReason::Expired => "expired",
            ResyncReason::Future => "future",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "invalid" => ResyncReason::Invalid,
            "epoch" => ResyncReason::Epoch,
            "expired" => ResyncReason::Expired,
            "future" => ResyncReason::Future,
            _ => return None,
        })
    }
}

/// Body of `event: history_resync_required` (sent without an `id:` line, then the stream closes).
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResyncRequired {
    pub reason: ResyncReason,
}

/// SSE event names of the control events.
pub const SNAPSHOT_EVENT: &str = "snapshot";
pub const RESYNC_EVENT: &str = "history_resync_required";
/// Sent (without an `id:` line) when the token a stream was opened with expires; the stream then
/// ends and the client reconnects with a fresh token from its last event id (contract v1.1).
pub const TOKEN_EXPIRED_EVENT: &str = "token_expired";

/// Body of `event: token_expired`.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenExpired {
    /// Always `"expired"`.
    pub reason: String,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::turn::ToolStatus;
    use serde_json::json;

    /// `as_str` and `parse` say each variant's wire name, as serde writes it.
    fn check_names<T: Serialize + PartialEq + std::fmt::Debug + Copy>(
        all: &[T],
        name: fn(T) -> &'static str,
        parse: fn(&str) -> Option<T>,
    ) {
        for &v in all {
            assert_eq!(serde_json::to_value(v).expect("serializes"), json!(name(v)));
            assert_eq!(parse(name(v)), Some(v));
        }
        assert_eq!(parse("nope"), None);
    }

    #[test]
    fn enum_names_are_their_wire_names() {
        use crate::message::{MessageStatus, Role};
        use TurnState::*;
        let states = [
            Queued,
            Running,
            Waiting,
            Completed,
            Cancelled,
            Failed,
            Interrupted,
        ];
        check_names(&states, TurnState::as_str, TurnState::parse);
        use ToolStatus::{Failed as ToolFailed, Finished, Progress, Started};
        let tools = [Started, Progress, Finished, ToolFailed];
        check_names(&tools, ToolStatus::as_str, ToolStatus::parse);
        use ResyncReason::*;
        let reasons = [Invalid, Epoch, Expired, Future];
        check_names(&reasons, ResyncReason::as_str, ResyncReason::parse);
        let statuses = [
            MessageStatus::Complete,
            MessageStatus::Interrupted,
            MessageStatus::Cancelled,
            MessageStatus::Failed,
        ];
        check_names(&statuses, MessageStatus::as_str, MessageStatus::parse);
        check_names(&[Role::User, Role::Assistant], Role::as_str, Role::parse);
    }

    #[test]
    fn event_json_shape() {
        let e = Event {
            id: "ab-7".into(),
            session_id: "s".into(),
            ts: 5,
            turn_id: Some("t".into()),
            body: EventBody::ResponseDelta { delta: "hi".into() },
            truncated: vec![],
        };
        let v = serde_json::to_value(&e).unwrap_or_default();
        assert_eq!(
            v,
            json!({"id": "ab-7", "session_id": "s", "ts": 5, "turn_id": "t", "kind": "response_delta", "delta": "hi"})
        );
        let back: Event = serde_json::from_value(v).expect("parses");
        assert_eq!(back, e);
    }

    #[test]
    fn tool_and_ended_shapes() {
        let tool = EventBody::Tool(ToolCall {
            call_id: "c1".into(),
            name: "search".into(),
            status: ToolStatus::Finished,
            input_preview: None,
            output_preview: Some("ok".into()),
        });
        assert_eq!(
            serde_json::to_value(&tool).unwrap_or_default(),
            json!({"kind": "tool", "call_id": "c1", "name": "search", "status": "finished", "output_preview": "ok"})
        );
        let ended = EventBody::TurnEnded {
            state: TurnState::Failed,
            message: None,
            error: Some("boom".into()),
        };
        assert_eq!(
            serde_json::to_value(&ended).unwrap_or_default(),
            json!({"kind": "turn_ended", "state": "failed", "error": "boom"})
        );
        assert_eq!(
            serde_json::to_value(EventBody::TurnQueued {
                reply_id: None,
                parent_id: None,
                agent: None,
            })
            .unwrap_or_default(),
            json!({"kind": "turn_queued"})
        );
    }

    #[test]
    fn input_events_shapes() {
        let asked: EventBody = serde_json::from_value(json!({
            "kind": "approval", "request_id": "r1",
            "tool": {"call_id": "c1", "name": "deploy", "input": {"env": "prod"}}
        }))
        .expect("parses");
        let EventBody::InputRequested(request) = &asked else {
            panic!("{asked:?}")
        };
        assert_eq!(request.kind, RequestKind::Approval);
        assert_eq!(asked.kind(), "input_requested");
        assert_eq!(
            serde_json::to_value(&asked).unwrap_or_default(),
            json!({"kind": "approval", "request_id": "r1",
                   "tool": {"call_id": "c1", "name": "deploy", "input": {"env": "prod"}}})
        );
        let given = EventBody::InputGiven(InputGiven {
            request_id: "r1".into(),
            by: None,
            answer: crate::RawJson::parse(r#"{"approved":true}"#).expect("json"),
        });
        let v = serde_json::to_value(&given).unwrap_or_default();
        assert_eq!(
            v,
            json!({"kind": "input_given", "request_id": "r1", "by": null, "answer": {"approved": true}})
        );
        assert_eq!(
            serde_json::from_value::<EventBody>(v).ok(),
            Some(given.clone())
        );
        let mut t = crate::snapshot::ActiveTurn::new("t", "s");
        t.apply(&EventBody::TurnStarted {});
        t.apply(&asked);
        assert_eq!(t.state, TurnState::Waiting);
        t.apply(&given);
        assert_eq!(t.state, TurnState::Running);
        assert_eq!(t.requests.len(), 1);
        assert!(!t.requests[0].is_open());
    }
}
