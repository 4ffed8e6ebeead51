//! The protocol's JSON: what the server answers (messages, events, snapshots, history pages,
//! turn statuses, POST answers, error bodies) and the request bodies the SDK sends.

use turnstream_protocol::{
    ActiveTurn, Attachment, CallTarget, CancelResponse, ErrorDetail, Event, EventBody,
    HistoryResponse, InputGiven, InputRequest, Message, MessageStatus, OnBusy, PostMessageResponse,
    RawJson, RegenerateResponse, RequestKind, ResyncReason, ResyncRequired, Role as WireRole,
    Siblings, Snapshot, ToolCall, ToolRequest, ToolStatus, Truncation, TurnInfo, TurnRequest,
    TurnState,
};

use super::{strings_of, write_strings, Fields, Obj, Value, U32_MAX};
use crate::reducer::TurnPlace;

// ----- enums: the protocol's own names (`as_str`, `parse`) -----

pub fn turn_state_name(s: TurnState) -> &'static str {
    s.as_str()
}

pub fn tool_status_name(s: ToolStatus) -> &'static str {
    s.as_str()
}

pub fn resync_reason_name(r: ResyncReason) -> &'static str {
    r.as_str()
}

impl<V: Value> Fields<'_, V> {
    /// A turn's state. One this SDK does not know reads as `running` (an in-flight state added
    /// by a later contract, as `waiting` was by v1.2, must not make the whole answer
    /// unreadable).
    fn turn_state(&mut self, key: &str) -> TurnState {
        self.variant(
            key,
            |s| Some(TurnState::parse(s).unwrap_or(TurnState::Running)),
            TurnState::Running,
        )
    }
}

// ----- reading: the wire types -----

pub fn message<V: Value>(v: &V) -> Option<Message> {
    let mut f = Fields::new(v);
    let m = Message {
        message_id: f.str("message_id"),
        client_message_id: f.opt_str("client_message_id"),
        role: f.variant("role", WireRole::parse, WireRole::User),
        content: f.str("content"),
        status: f.variant("status", MessageStatus::parse, MessageStatus::Complete),
        turn_id: f.opt_str("turn_id"),
        created_at: f.int("created_at"),
        event_id: f.str("event_id"),
        author: f.opt_str("author"),
        attachments: f.list("attachments", attachment),
        parent_id: f.opt_str("parent_id"),
        siblings: f.opt("siblings", siblings),
        requests: f.list("requests", turn_request),
        // Who called a child turn, and a turn's agent (v1.3): the SDK shows neither (a call
        // shows on the caller's side, from its request).
        called_by: None,
    };
    f.done(m)
}

/// The child turn of an `agent_call` request (v1.3).
fn call_target<V: Value>(v: &V) -> Option<CallTarget> {
    let mut f = Fields::new(v);
    let c = CallTarget {
        agent: f.str("agent"),
        session_id: f.str("session_id"),
        turn_id: f.str("turn_id"),
        message_id: f.str("message_id"),
    };
    f.done(c)
}

/// A message's versions (v1.2).
fn siblings<V: Value>(v: &V) -> Option<Siblings> {
    let mut f = Fields::new(v);
    let s = Siblings {
        index: f.count("index", U32_MAX) as u32,
        count: f.count("count", U32_MAX) as u32,
        ids: f.strings("ids"),
    };
    f.done(s)
}

/// A message's attachment (v1.2); the server always writes `url` and `media_type`.
pub fn attachment<V: Value>(v: &V) -> Option<Attachment> {
    let mut f = Fields::new(v);
    let a = Attachment {
        url: f.str_or_empty("url"),
        media_type: f.str_or_empty("media_type"),
        name: f.opt_str("name"),
    };
    f.done(a)
}

pub fn tool_call<V: Value>(v: &V) -> Option<ToolCall> {
    let mut f = Fields::new(v);
    let t = ToolCall {
        call_id: f.str("call_id"),
        name: f.str("name"),
        status: f.variant("status", ToolStatus::parse, ToolStatus::Started),
        input_preview: f.opt_str("input_preview"),
        output_preview: f.opt_str("output_preview"),
    };
    f.done(t)
}

fn truncation<V: Value>(v: &V) -> Option<Truncation> {
    let mut f = Fields::new(v);
    let t = Truncation {
        field: f.str("field"),
        original_size: f.count("original_size", i64::MAX) as usize,
    };
    f.done(t)
}

fn tool_request<V: Value>(v: &V) -> Option<ToolRequest> {
    let mut f = Fields::new(v);
    let t = ToolRequest {
        call_id: f.str("call_id"),
        name: f.str("name"),
        input: f.raw("input"),
    };
    f.done(t)
}

/// A request's fields but its kind.
fn input_request<V: Value>(f: &mut Fields<'_, V>, kind: RequestKind) -> InputRequest {
    InputRequest {
        request_id: f.str("request_id"),
        kind,
        tool: f.opt("tool", tool_request),
        prompt: f.opt_str("prompt"),
        options: f.opt("options", strings_of),
        expires_at: f.opt_int("expires_at"),
        call: f.opt("call", call_target),
    }
}

/// A request with its answer, as snapshots and turn statuses list them.
pub fn turn_request<V: Value>(v: &V) -> Option<TurnRequest> {
    let mut f = Fields::new(v);
    let kind = f.variant("kind", RequestKind::parse, RequestKind::Approval);
    let r = input_request(&mut f, kind);
    let r = TurnRequest {
        request_id: r.request_id,
        kind: r.kind,
        tool: r.tool,
        prompt: r.prompt,
        options: r.options,
        expires_at: r.expires_at,
        call: r.call,
        answer: f.opt_raw("answer"),
        answered_by: f.opt_str("answered_by"),
    };
    f.done(r)
}

/// An `input_given` event's body, and the winner a `409 input_already_given` names.
pub fn input_given<V: Value>(v: &V) -> Option<InputGiven> {
    let mut f = Fields::new(v);
    let g = given(&mut f);
    f.done(g)
}

fn given<V: Value>(f: &mut Fields<'_, V>) -> InputGiven {
    InputGiven {
        request_id: f.str("request_id"),
        by: f.opt_str("by"),
        answer: f.raw("answer"),
    }
}

/// A journaled event (the `data:` of a stream frame).
pub fn event<V: Value>(v: &V) -> Option<Event> {
    let mut f = Fields::new(v);
    let kind = f.str("kind");
    let body = match kind.as_str() {
        "message_received" => EventBody::MessageReceived {
            message: message(&v.get("message")?)?,
        },
        "turn_queued" => EventBody::TurnQueued {
            reply_id: f.opt_str("reply_id"),
            parent_id: f.opt_str("parent_id"),
            agent: None,
        },
        "branch_changed" => EventBody::BranchChanged {
            leaf_id: f.str("leaf_id"),
        },
        "turn_started" => EventBody::TurnStarted {},
        "thinking" => EventBody::Thinking {
            delta: f.str("delta"),
        },
        "tool" => EventBody::Tool(tool_call(v)?),
        "response_delta" => EventBody::ResponseDelta {
            delta: f.str("delta"),
        },
        "turn_ended" => EventBody::TurnEnded {
            state: f.turn_state("state"),
            message: f.opt("message", message),
            error: f.opt_str("error"),
        },
        "input_given" => EventBody::InputGiven(given(&mut f)),
        // An `input_requested` event's `kind` is its request's.
        k => EventBody::InputRequested(input_request(&mut f, RequestKind::parse(k)?)),
    };
    let e = Event {
        id: f.str("id"),
        session_id: f.str("session_id"),
        ts: f.int("ts"),
        turn_id: f.opt_str("turn_id"),
        body,
        truncated: f.list("truncated", truncation),
    };
    f.done(e)
}

fn active_turn<V: Value>(v: &V) -> Option<ActiveTurn> {
    let mut f = Fields::new(v);
    let t = ActiveTurn {
        turn_id: f.str("turn_id"),
        session_id: f.str("session_id"),
        state: f.turn_state("state"),
        thinking: f.str("thinking"),
        tools: f.list("tools", tool_call),
        text: f.str("text"),
        requests: f.list("requests", turn_request),
        reply_id: None,
        parent_id: None,
        agent: None,
        called_by: None,
    };
    f.done(t)
}

pub fn snapshot<V: Value>(v: &V) -> Option<Snapshot> {
    let mut f = Fields::new(v);
    let s = Snapshot {
        cursor: f.str("cursor"),
        active_turns: f.list("active_turns", active_turn),
    };
    f.done(s)
}

/// Where an active turn's reply goes: its `reply_id` and `parent_id` (v1.2), absent from an
/// older server's snapshot.
fn turn_place<V: Value>(v: &V) -> Option<TurnPlace> {
    let mut f = Fields::new(v);
    let p = TurnPlace {
        turn_id: f.str("turn_id"),
        reply_id: f.opt_str("reply_id"),
        parent_id: f.opt_str("parent_id"),
    };
    f.done(p)
}

/// A snapshot with its active turns' places (read beside the protocol's [`ActiveTurn`]).
pub fn snapshot_placed<V: Value>(v: &V) -> Option<(Snapshot, Vec<TurnPlace>)> {
    let mut f = Fields::new(v);
    let places = f.list("active_turns", turn_place);
    let s = snapshot(v);
    f.done((s?, places))
}

pub fn resync<V: Value>(v: &V) -> Option<ResyncRequired> {
    let mut f = Fields::new(v);
    let r = ResyncRequired {
        reason: f.variant("reason", ResyncReason::parse, ResyncReason::Invalid),
    };
    f.done(r)
}

pub fn history<V: Value>(v: &V) -> Option<HistoryResponse> {
    let mut f = Fields::new(v);
    let h = HistoryResponse {
        session_id: f.str("session_id"),
        messages: f.list("messages", message),
        cursor: f.str("cursor"),
        has_more: f.bool_or_false("has_more"),
        leaf_id: f.opt_str("leaf_id"),
    };
    f.done(h)
}

pub fn turn_info<V: Value>(v: &V) -> Option<TurnInfo> {
    let mut f = Fields::new(v);
    let t = TurnInfo {
        turn_id: f.str("turn_id"),
        session_id: f.str("session_id"),
        state: f.turn_state("state"),
        created_at: f.int("created_at"),
        started_at: f.opt_int("started_at"),
        ended_at: f.opt_int("ended_at"),
        text: f.str("text"),
        thinking: f.str_or_empty("thinking"),
        tools: f.list("tools", tool_call),
        message: f.opt("message", message),
        error: f.opt_str("error"),
        // The SDK shows no token counts; the field is v1.1's and optional.
        usage: None,
        requests: f.list("requests", turn_request),
        reply_id: None,
        parent_id: None,
        agent: None,
        called_by: None,
    };
    f.done(t)
}

pub fn post_response<V: Value>(v: &V) -> Option<PostMessageResponse> {
    let mut f = Fields::new(v);
    let r = PostMessageResponse {
        message_id: f.str("message_id"),
        client_message_id: f.opt_str("client_message_id"),
        turn_id: f.str("turn_id"),
        event_id: f.str("event_id"),
    };
    f.done(r)
}

pub fn cancel_response<V: Value>(v: &V) -> Option<CancelResponse> {
    let mut f = Fields::new(v);
    let r = CancelResponse {
        turn_id: f.str("turn_id"),
        state: f.turn_state("state"),
    };
    f.done(r)
}

pub(super) fn error_detail<V: Value>(v: &V) -> Option<ErrorDetail> {
    let mut f = Fields::new(v);
    let e = ErrorDetail {
        code: f.str("code"),
        message: f.str("message"),
    };
    f.done(e)
}

/// The detail of an error answer, `{"error": {"code", "message"}}`.
pub fn error_body<V: Value>(v: &V) -> Option<ErrorDetail> {
    error_detail(&v.get("error")?)
}

pub(super) fn on_busy<V: Value>(v: &V) -> Option<OnBusy> {
    OnBusy::parse(&v.string()?)
}

// ----- writing -----

/// An attachment, `name` skipped when absent as the protocol's serde does.
fn write_attachment(out: &mut String, a: &Attachment) {
    let mut o = Obj::new(out);
    o.str("url", &a.url).str("media_type", &a.media_type);
    if let Some(name) = &a.name {
        o.str("name", name);
    }
    o.end();
}

/// `"attachments": [...]`, skipped when empty as the protocol's serde does (v1 readers see the
/// shape they know).
pub(super) fn write_attachments(o: &mut Obj<'_>, attachments: &[Attachment]) {
    if !attachments.is_empty() {
        o.list("attachments", attachments, write_attachment);
    }
}

fn write_message(out: &mut String, m: &Message) {
    let mut o = Obj::new(out);
    o.str("message_id", &m.message_id)
        .opt_str("client_message_id", m.client_message_id.as_deref())
        .str(
            "role",
            match m.role {
                WireRole::User => "user",
                WireRole::Assistant => "assistant",
            },
        )
        .str("content", &m.content)
        .str("status", m.status.as_str())
        .opt_str("turn_id", m.turn_id.as_deref())
        .int("created_at", m.created_at)
        .str("event_id", &m.event_id)
        .opt_str("author", m.author.as_deref());
    write_attachments(&mut o, &m.attachments);
    if let Some(parent) = &m.parent_id {
        o.str("parent_id", parent);
    }
    write_requests(&mut o, &m.requests);
    o.end();
}

pub(super) fn write_tool(out: &mut String, t: &ToolCall) {
    let mut o = Obj::new(out);
    o.str("call_id", &t.call_id)
        .str("name", &t.name)
        .str("status", tool_status_name(t.status));
    // Skipped when absent, as the protocol's serde does.
    if let Some(p) = &t.input_preview {
        o.str("input_preview", p);
    }
    if let Some(p) = &t.output_preview {
        o.str("output_preview", p);
    }
    o.end();
}

fn write_tool_request(out: &mut String, t: &ToolRequest) {
    let mut o = Obj::new(out);
    o.str("call_id", &t.call_id).str("name", &t.name);
    o.key("input").push_str(t.input.as_str());
    o.end();
}

/// A request and its answer, fields skipped when absent as the protocol's serde does.
fn write_turn_request(out: &mut String, r: &TurnRequest) {
    let mut o = Obj::new(out);
    o.str("request_id", &r.request_id)
        .str("kind", r.kind.as_str());
    if let Some(t) = &r.tool {
        write_tool_request(o.key("tool"), t);
    }
    if let Some(p) = &r.prompt {
        o.str("prompt", p);
    }
    if let Some(options) = &r.options {
        o.list("options", options, write_strings);
    }
    if let Some(at) = r.expires_at {
        o.int("expires_at", at);
    }
    if let Some(c) = &r.call {
        Obj::new(o.key("call"))
            .str("agent", &c.agent)
            .str("session_id", &c.session_id)
            .str("turn_id", &c.turn_id)
            .str("message_id", &c.message_id)
            .end();
    }
    if let Some(a) = &r.answer {
        o.key("answer").push_str(a.as_str());
    }
    if let Some(by) = &r.answered_by {
        o.str("answered_by", by);
    }
    o.end();
}

/// `"requests": [...]`, skipped when empty as the protocol's serde does.
pub(super) fn write_requests(o: &mut Obj<'_>, requests: &[TurnRequest]) {
    if !requests.is_empty() {
        o.list("requests", requests, write_turn_request);
    }
}

pub(super) fn write_on_busy(o: &mut Obj<'_>, on_busy: Option<OnBusy>) {
    if let Some(b) = on_busy {
        o.str("on_busy", b.as_str());
    }
}

pub(super) fn write_turn_info(out: &mut String, t: &TurnInfo) {
    let mut o = Obj::new(out);
    o.str("turn_id", &t.turn_id)
        .str("session_id", &t.session_id)
        .str("state", turn_state_name(t.state))
        .int("created_at", t.created_at)
        .opt_int("started_at", t.started_at)
        .opt_int("ended_at", t.ended_at)
        .str("text", &t.text)
        .str("thinking", &t.thinking)
        .list("tools", &t.tools, write_tool);
    match &t.message {
        Some(m) => write_message(o.key("message"), m),
        None => o.key("message").push_str("null"),
    }
    o.opt_str("error", t.error.as_deref());
    write_requests(&mut o, &t.requests);
    o.end();
}

pub(super) fn write_post_response(out: &mut String, r: &PostMessageResponse) {
    Obj::new(out)
        .str("message_id", &r.message_id)
        .opt_str("client_message_id", r.client_message_id.as_deref())
        .str("turn_id", &r.turn_id)
        .str("event_id", &r.event_id)
        .end();
}

pub(super) fn write_error(out: &mut String, code: &str, message: &str) {
    Obj::new(out)
        .str("code", code)
        .str("message", message)
        .end();
}

/// The body of `POST /messages`.
pub fn post_request_json(
    content: &str,
    client_message_id: &str,
    attachments: &[Attachment],
    on_busy: Option<OnBusy>,
    parent_id: Option<Option<&str>>,
) -> String {
    let mut out = String::new();
    let mut o = Obj::new(&mut out);
    o.str("content", content)
        .str("client_message_id", client_message_id);
    write_attachments(&mut o, attachments);
    write_on_busy(&mut o, on_busy);
    if let Some(parent) = parent_id {
        o.opt_str("parent_id", parent);
    }
    o.end();
    out
}

/// The answer of `POST /api/messages/{message}/regenerate` (v1.2).
pub fn regenerate_response<V: Value>(v: &V) -> Option<RegenerateResponse> {
    let mut f = Fields::new(v);
    let r = RegenerateResponse {
        message_id: f.str("message_id"),
        turn_id: f.str("turn_id"),
        event_id: f.str("event_id"),
        cursor: f.str("cursor"),
    };
    f.done(r)
}

/// The body of `POST /api/messages/{message}/regenerate`: the id that makes a retry safe.
pub fn regenerate_request_json(client_request_id: &str) -> String {
    let mut out = String::new();
    Obj::new(&mut out)
        .str("client_request_id", client_request_id)
        .end();
    out
}

/// The body of `POST /api/sessions/{session}/active` (v1.2).
pub fn switch_request_json(leaf_id: &str) -> String {
    let mut out = String::new();
    Obj::new(&mut out).str("leaf_id", leaf_id).end();
    out
}

/// The body of `POST /api/turns/{turn}/input`: the request's id and the answer's fields (an
/// answer is always an object: `{"approved": ...}`, `{"output": ...}`, ...).
pub fn input_request_json(request_id: &str, answer: &RawJson) -> String {
    let mut out = String::new();
    Obj::new(&mut out).str("request_id", request_id);
    // `{"request_id":"r"}` and the answer's `"key":value,...}` after a comma.
    out.push(',');
    out.push_str(answer.as_str().get(1..).unwrap_or("}"));
    out
}

/// Its fixtures serve [`super::local`]'s tests too.
#[cfg(all(test, not(target_arch = "wasm32")))]
pub(super) mod tests;
