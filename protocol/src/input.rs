//! Agents that ask (contract v1.2): during a turn an agent may journal an `input_requested`
//! event (an approval of a tool call, a tool the browser runs, or a question) and the turn
//! waits, holding nothing, until every open request is answered with
//! `POST /api/turns/{turn}/input` (or times out); then it continues.

use serde::{Deserialize, Deserializer, Serialize};

use crate::call::CallTarget;
use crate::limits::MAX_ID_LEN;
pub use crate::raw_json::RawJson;
use crate::turn::TurnState;

/// Most requests one turn may open.
pub const MAX_REQUESTS_PER_TURN: usize = 16;
/// Most `options` of a question.
pub const MAX_REQUEST_OPTIONS: usize = 32;
/// Longest `prompt`, option, `reason`, `error` or `text`, in bytes.
pub const MAX_INPUT_TEXT_BYTES: usize = 16 * 1024;
/// Longest tool `input` or `output`, as JSON text, in bytes.
pub const MAX_INPUT_JSON_BYTES: usize = 64 * 1024;
/// The answer the server gives a request whose time ran out (`by` is `null`).
pub const TIMED_OUT_ANSWER: &str = r#"{"timed_out":true}"#;

/// What an agent asks for.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RequestKind {
    /// A tool call that needs a person's yes or no before it runs; answered with `approved`.
    Approval,
    /// A tool the browser runs; answered with its `output` (or `error`).
    ClientTool,
    /// A question in free text, with optional suggested `options`; answered with `text`.
    Question,
    /// A call of another agent (v1.3): answered by the server when the child turn ends, with
    /// `{turn_id, state, text, error?}`.
    AgentCall,
}

impl RequestKind {
    pub fn as_str(self) -> &'static str {
        match self {
            RequestKind::Approval => "approval",
            RequestKind::ClientTool => "client_tool",
            RequestKind::Question => "question",
            RequestKind::AgentCall => "agent_call",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "approval" => RequestKind::Approval,
            "client_tool" => RequestKind::ClientTool,
            "question" => RequestKind::Question,
            "agent_call" => RequestKind::AgentCall,
            _ => return None,
        })
    }
}

/// The tool call an `approval` or a `client_tool` request is about.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolRequest {
    pub call_id: String,
    pub name: String,
    #[serde(default = "RawJson::null")]
    pub input: RawJson,
}

/// A request an agent opens during a turn: the body of an `input_requested` event (whose `kind`
/// is the request's kind; the SSE `event:` name says `input_requested`), and of a worker's
/// `{"type": "input_requested", ...}` event.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InputRequest {
    /// Chosen by the agent, unique in its turn: 1 to 128 characters of `[A-Za-z0-9_.:-]`.
    pub request_id: String,
    pub kind: RequestKind,
    /// For `approval` and `client_tool`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<ToolRequest>,
    /// For `question` (and optionally the others): what to show the person.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt: Option<String>,
    /// For `question`: suggested answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub options: Option<Vec<String>>,
    /// Unix milliseconds after which the server answers `{"timed_out": true}` itself. The server
    /// fills it in from `--input-timeout-secs` when the agent leaves it out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<i64>,
    /// For `agent_call` (v1.3): the child turn the call runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call: Option<CallTarget>,
}

impl InputRequest {
    /// Whether the request is well formed: `Err` says what is wrong.
    pub fn check(&self) -> Result<(), String> {
        if !crate::limits::is_valid_id(&self.request_id) {
            return Err(format!(
                "request_id is 1 to {MAX_ID_LEN} characters of [A-Za-z0-9_.:-]"
            ));
        }
        match (self.kind, &self.tool) {
            (RequestKind::Approval | RequestKind::ClientTool, None) => {
                return Err(format!("a {} request needs `tool`", self.kind.as_str()))
            }
            (RequestKind::Question, Some(_)) => return Err("a question has no `tool`".to_string()),
            (RequestKind::Question, None) if self.prompt.is_none() => {
                return Err("a question needs `prompt`".to_string())
            }
            (RequestKind::AgentCall, Some(_)) => return Err("a call has no `tool`".to_string()),
            (RequestKind::AgentCall, None) if self.call.is_none() => {
                return Err("a call needs `call`".to_string())
            }
            _ => {}
        }
        if let Some(tool) = &self.tool {
            if tool.name.is_empty()
                || tool.name.len() > MAX_ID_LEN
                || tool.call_id.len() > MAX_ID_LEN
            {
                return Err(format!(
                    "tool.name is 1 to {MAX_ID_LEN} bytes and tool.call_id at most {MAX_ID_LEN}"
                ));
            }
            if tool.input.as_str().len() > MAX_INPUT_JSON_BYTES {
                return Err(format!(
                    "tool.input is at most {MAX_INPUT_JSON_BYTES} bytes of JSON"
                ));
            }
        }
        if self
            .prompt
            .as_ref()
            .is_some_and(|p| p.len() > MAX_INPUT_TEXT_BYTES)
        {
            return Err(format!("prompt is at most {MAX_INPUT_TEXT_BYTES} bytes"));
        }
        if let Some(options) = &self.options {
            if options.len() > MAX_REQUEST_OPTIONS
                || options.iter().any(|o| o.len() > MAX_INPUT_TEXT_BYTES)
            {
                return Err(format!(
                    "options are at most {MAX_REQUEST_OPTIONS}, each at most {MAX_INPUT_TEXT_BYTES} bytes"
                ));
            }
        }
        Ok(())
    }
}

/// The body of an `input_given` event: who answered which request, and how.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InputGiven {
    pub request_id: String,
    /// The answer's author, as for messages; `null` without auth and for the server's own
    /// answer to a request whose time ran out.
    #[serde(default)]
    pub by: Option<String>,
    /// `{"approved", "reason"?}`, `{"output"}` or `{"error"}`, `{"text"}`, or `{"timed_out": true}`.
    pub answer: RawJson,
}

/// A request as a turn's snapshot and `GET /api/turns/{turn}` show it: the request and, once
/// given, its answer.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TurnRequest {
    pub request_id: String,
    pub kind: RequestKind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<ToolRequest>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub options: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<i64>,
    /// For `agent_call` (v1.3): the child turn.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call: Option<CallTarget>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer: Option<RawJson>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answered_by: Option<String>,
}

impl TurnRequest {
    pub fn open(request: &InputRequest) -> TurnRequest {
        TurnRequest {
            request_id: request.request_id.clone(),
            kind: request.kind,
            tool: request.tool.clone(),
            prompt: request.prompt.clone(),
            options: request.options.clone(),
            expires_at: request.expires_at,
            call: request.call.clone(),
            answer: None,
            answered_by: None,
        }
    }

    pub fn is_open(&self) -> bool {
        self.answer.is_none()
    }
}

/// Folds a request or an answer into a turn's list of requests (an answer to a request not in
/// the list is kept for when it arrives; a repeated request or answer changes nothing).
pub fn merge_request(requests: &mut Vec<TurnRequest>, request: &InputRequest) {
    if !requests.iter().any(|r| r.request_id == request.request_id) {
        requests.push(TurnRequest::open(request));
    }
}

/// Records `given` on its request; the first answer stays.
pub fn merge_answer(requests: &mut [TurnRequest], given: &InputGiven) {
    if let Some(r) = requests
        .iter_mut()
        .find(|r| r.request_id == given.request_id)
    {
        if r.answer.is_none() {
            r.answer = Some(given.answer.clone());
            r.answered_by.clone_from(&given.by);
        }
    }
}

/// Body of `POST /api/turns/{turn}/input`: the field that fits the request's kind.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct InputAnswerRequest {
    pub request_id: String,
    /// `approval`: the person's yes or no (with an optional `reason`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approved: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// `client_tool`: what the tool returned (any JSON value, `null` included)...
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub output: Option<RawJson>,
    /// ... or why it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// `question`: the answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
}

/// A field that is present is `Some`, even when it is `null`.
fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<RawJson>, D::Error> {
    RawJson::deserialize(d).map(Some)
}

impl InputAnswerRequest {
    /// The answer to record for a request of `kind`: `Err` says which field is wrong or missing.
    pub fn answer_for(&self, kind: RequestKind) -> Result<RawJson, String> {
        let texts = [&self.reason, &self.error, &self.text];
        if texts
            .iter()
            .any(|t| t.as_ref().is_some_and(|t| t.len() > MAX_INPUT_TEXT_BYTES))
        {
            return Err(format!(
                "reason, error and text are at most {MAX_INPUT_TEXT_BYTES} bytes"
            ));
        }
        let only = |allowed: &[&str]| -> Result<(), String> {
            let given = [
                ("approved", self.approved.is_some()),
                ("reason", self.reason.is_some()),
                ("output", self.output.is_some()),
                ("error", self.error.is_some()),
                ("text", self.text.is_some()),
            ];
            match given
                .iter()
                .find(|(name, set)| *set && !allowed.contains(name))
            {
                Some((name, _)) => Err(format!(
                    "`{name}` does not answer a {} request",
                    kind.as_str()
                )),
                None => Ok(()),
            }
        };
        let mut answer = serde_json::Map::new();
        match kind {
            RequestKind::Approval => {
                only(&["approved", "reason"])?;
                let approved = self
                    .approved
                    .ok_or("an approval is answered with `approved` (true or false)")?;
                answer.insert("approved".into(), approved.into());
                if let Some(reason) = &self.reason {
                    answer.insert("reason".into(), reason.clone().into());
                }
            }
            RequestKind::ClientTool => {
                only(&["output", "error"])?;
                match (&self.output, &self.error) {
                    (Some(output), None) => {
                        if output.as_str().len() > MAX_INPUT_JSON_BYTES {
                            return Err(format!(
                                "output is at most {MAX_INPUT_JSON_BYTES} bytes of JSON"
                            ));
                        }
                        // Kept as it came (key order too): `{"output": <output>}`.
                        return Ok(RawJson::trusted(format!(
                            r#"{{"output":{}}}"#,
                            output.as_str()
                        )));
                    }
                    (None, Some(error)) => {
                        answer.insert("error".into(), error.clone().into());
                    }
                    _ => {
                        return Err(
                            "a client tool is answered with `output` or with `error`, one of them"
                                .to_string(),
                        )
                    }
                }
            }
            RequestKind::AgentCall => {
                return Err("a call is answered by the end of its child turn".to_string())
            }
            RequestKind::Question => {
                only(&["text"])?;
                let text = self
                    .text
                    .as_ref()
                    .ok_or("a question is answered with `text`")?;
                answer.insert("text".into(), text.clone().into());
            }
        }
        Ok(RawJson::from_value(&serde_json::Value::Object(answer)))
    }
}

/// Answer of `POST /api/turns/{turn}/input`.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InputAnswerResponse {
    pub turn_id: String,
    pub request_id: String,
    /// The turn's state after the answer: `running` once every open request is answered,
    /// `waiting` while others are open.
    pub state: TurnState,
}

/// What `POST .../messages` does while a turn of the session is queued, running or waiting
/// (contract v1.2, `on_busy`).
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnBusy {
    /// The new turn runs after the others (v1).
    #[default]
    Enqueue,
    /// `409 session_busy`.
    Reject,
    /// The session's turns in flight are cancelled, as by cancel; the new one runs next.
    Interrupt,
}

impl OnBusy {
    pub fn as_str(self) -> &'static str {
        match self {
            OnBusy::Enqueue => "enqueue",
            OnBusy::Reject => "reject",
            OnBusy::Interrupt => "interrupt",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "enqueue" => OnBusy::Enqueue,
            "reject" => OnBusy::Reject,
            "interrupt" => OnBusy::Interrupt,
            _ => return None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn answer(body: serde_json::Value, kind: RequestKind) -> Result<String, String> {
        let req: InputAnswerRequest = serde_json::from_value(body).map_err(|e| e.to_string())?;
        req.answer_for(kind).map(|a| a.as_str().to_string())
    }

    #[test]
    fn answers_by_kind() {
        use RequestKind::*;
        let approve = json!({"request_id": "r", "approved": false, "reason": "no"});
        assert_eq!(
            answer(approve, Approval).as_deref(),
            Ok(r#"{"approved":false,"reason":"no"}"#)
        );
        let output: InputAnswerRequest =
            serde_json::from_str(r#"{"request_id": "r", "output": {"z": 1, "a": [1, 2]}}"#)
                .expect("parses");
        assert_eq!(
            output
                .answer_for(ClientTool)
                .map(|a| a.as_str().to_string())
                .as_deref(),
            Ok(r#"{"output":{"z":1,"a":[1,2]}}"#)
        );
        let null = json!({"request_id": "r", "output": null});
        assert_eq!(
            answer(null, ClientTool).as_deref(),
            Ok(r#"{"output":null}"#)
        );
        let failed = json!({"request_id": "r", "error": "denied"});
        assert_eq!(
            answer(failed, ClientTool).as_deref(),
            Ok(r#"{"error":"denied"}"#)
        );
        let text = json!({"request_id": "r", "text": "b.txt"});
        assert_eq!(answer(text, Question).as_deref(), Ok(r#"{"text":"b.txt"}"#));
    }

    #[test]
    fn wrong_or_missing_fields_are_refused() {
        use RequestKind::*;
        assert!(answer(json!({"request_id": "r"}), Approval).is_err());
        assert!(answer(json!({"request_id": "r", "text": "y"}), Approval).is_err());
        assert!(answer(json!({"request_id": "r", "approved": true}), Question).is_err());
        let both = json!({"request_id": "r", "output": 1, "error": "x"});
        assert!(answer(both, ClientTool).is_err());
        assert!(answer(json!({"request_id": "r"}), ClientTool).is_err());
    }

    #[test]
    fn raw_json_keeps_order_and_compares_values() {
        let a = RawJson::parse(r#"{ "b": 1, "a": "x y" }"#).expect("json");
        assert_eq!(a.as_str(), r#"{"b":1,"a":"x y"}"#);
        let b = RawJson::parse(r#"{"a":"x y","b":1}"#).expect("json");
        assert!(a.same_value(&b));
        assert!(RawJson::parse("{").is_none());
        let back: RawJson = serde_json::from_str(r#"[1, {"k": "\" q"}]"#).expect("json");
        assert_eq!(back.as_str(), r#"[1,{"k":"\" q"}]"#);
        assert_eq!(
            serde_json::to_string(&json!({"v": back.to_value()})).unwrap_or_default(),
            r#"{"v":[1,{"k":"\" q"}]}"#
        );
    }

    #[test]
    fn requests_are_checked() {
        let mut r = InputRequest {
            request_id: "r1".into(),
            kind: RequestKind::Approval,
            tool: None,
            prompt: None,
            options: None,
            expires_at: None,
            call: None,
        };
        assert!(r.check().is_err());
        r.tool = Some(ToolRequest {
            call_id: "c".into(),
            name: "deploy".into(),
            input: RawJson::null(),
        });
        assert_eq!(r.check(), Ok(()));
        r.kind = RequestKind::Question;
        assert!(r.check().is_err());
        r.tool = None;
        r.prompt = Some("which?".into());
        assert_eq!(r.check(), Ok(()));
        r.request_id = "a b".into();
        assert!(r.check().is_err());
    }
}
