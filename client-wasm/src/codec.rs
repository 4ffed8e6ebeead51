//! The JSON the SDK reads and writes, by hand instead of through serde's derives (which, with
//! serde_json, were most of the package's size). In the browser, JSON is parsed by the browser
//! (`JSON.parse`) and [`Value`] walks the result; a small writer produces the cache record, the
//! tab messages and the request bodies.
//!
//! The shapes are exactly those of the serde derives on the same types (the native tests check
//! both directions against serde_json), so the server's answers read the same, and a cache or a
//! tab message written by an SDK built with serde reads the same too.
//!
//! Readers return `None` for anything that does not have the expected shape: a missing required
//! field, a field of the wrong type, an unknown enum value. Unknown fields are ignored, a `null`
//! reads as a missing field, and a missing array as an empty one.

use turnstream_protocol::{
    ActiveTurn, Attachment, CancelResponse, ErrorDetail, Event, EventBody, HistoryResponse,
    InputGiven, InputRequest, Message, MessageStatus, OnBusy, PostMessageResponse, RawJson,
    RegenerateResponse, RequestKind, ResyncReason, ResyncRequired, Role as WireRole, Siblings,
    Snapshot, ToolCall, ToolRequest, ToolStatus, Truncation, TurnInfo, TurnRequest, TurnState,
};

use crate::reducer::entry::{
    AssistantEntry, EntryError, Final, FinalSource, LocalAnswer, Node, Progress, UserEntry,
    UserStatus,
};
use crate::reducer::{BranchAction, CacheRecord, TurnPlace};
use crate::relay::{Relay, StreamState, Want};
use crate::tabs::TabMessage;

/// A parsed JSON value: a `JsValue` from `JSON.parse` in the browser, `serde_json::Value` in the
/// native tests.
pub trait Value: Sized {
    /// The member `key` of an object; `None` when absent, `null`, or `self` is not an object.
    fn get(&self, key: &str) -> Option<Self>;
    fn string(&self) -> Option<String>;
    fn number(&self) -> Option<f64>;
    fn boolean(&self) -> Option<bool>;
    /// The elements of an array.
    fn items(&self) -> Option<Vec<Self>>;
    /// The value as compact JSON text (`JSON.stringify`).
    fn json(&self) -> String;
}

// ----- reading: fields -----

fn string<V: Value>(v: &V, key: &str) -> Option<String> {
    v.get(key)?.string()
}

/// A string field that defaults to empty when missing.
fn string_or_empty<V: Value>(v: &V, key: &str) -> Option<String> {
    match v.get(key) {
        None => Some(String::new()),
        Some(x) => x.string(),
    }
}

/// `Some(None)` when missing; `None` (a bad shape) when present but not a string.
fn opt_string<V: Value>(v: &V, key: &str) -> Option<Option<String>> {
    match v.get(key) {
        None => Some(None),
        Some(x) => x.string().map(Some),
    }
}

/// A whole number that a JS number holds exactly (below 2^53 in magnitude: from there on, a
/// parsed number may have been rounded).
fn int_of<V: Value>(v: &V) -> Option<i64> {
    let n = v.number()?;
    (n == n.trunc() && n.abs() < 9_007_199_254_740_992.0).then_some(n as i64)
}

fn int<V: Value>(v: &V, key: &str) -> Option<i64> {
    int_of(&v.get(key)?)
}

fn opt_int<V: Value>(v: &V, key: &str) -> Option<Option<i64>> {
    match v.get(key) {
        None => Some(None),
        Some(x) => int_of(&x).map(Some),
    }
}

fn boolean<V: Value>(v: &V, key: &str) -> Option<bool> {
    v.get(key)?.boolean()
}

/// An array field; missing reads as empty.
fn list<V: Value, T>(v: &V, key: &str, item: fn(&V) -> Option<T>) -> Option<Vec<T>> {
    match v.get(key) {
        None => Some(Vec::new()),
        Some(x) => items_of(&x, item),
    }
}

/// The elements of an array, each read by `item`. A plain loop: `collect` into an `Option`
/// brings a family of iterator adapters into the package for each element type.
fn items_of<V: Value, T>(v: &V, item: fn(&V) -> Option<T>) -> Option<Vec<T>> {
    let mut out = Vec::new();
    each(v, &mut |x| item(x).map(|t| out.push(t)).is_some()).then_some(out)
}

/// Calls `f` on each element of the array `v` until it returns false; false when `v` is not an
/// array or `f` returned false. Not generic over the element type, unlike [`items_of`].
fn each<V: Value>(v: &V, f: &mut dyn FnMut(&V) -> bool) -> bool {
    match v.items() {
        Some(items) => items.iter().all(f),
        None => false,
    }
}

fn opt<V: Value, T>(v: &V, key: &str, item: fn(&V) -> Option<T>) -> Option<Option<T>> {
    match v.get(key) {
        None => Some(None),
        Some(x) => item(&x).map(Some),
    }
}

/// An enum field, read by `parse` (`None` for a name it does not know).
fn variant<V: Value, T>(v: &V, key: &str, parse: fn(&str) -> Option<T>) -> Option<T> {
    parse(&string(v, key)?)
}

/// A turn's state. One this SDK does not know reads as `running` (an in-flight state added by
/// a later contract, as `waiting` was by v1.2, must not make the whole answer unreadable).
fn turn_state<V: Value>(v: &V, key: &str) -> Option<TurnState> {
    Some(TurnState::parse(&string(v, key)?).unwrap_or(TurnState::Running))
}

/// Any JSON value, as its text; missing reads as `null`.
fn raw<V: Value>(v: &V, key: &str) -> RawJson {
    RawJson::trusted(v.get(key).map_or_else(|| "null".to_owned(), |x| x.json()))
}

fn strings_of<V: Value>(v: &V) -> Option<Vec<String>> {
    items_of(v, Value::string)
}

// ----- enums: the protocol's own names (`as_str`, `parse`), and the SDK's -----

pub fn turn_state_name(s: TurnState) -> &'static str {
    s.as_str()
}

pub fn tool_status_name(s: ToolStatus) -> &'static str {
    s.as_str()
}

pub fn resync_reason_name(r: ResyncReason) -> &'static str {
    r.as_str()
}

fn user_status_name(s: UserStatus) -> &'static str {
    match s {
        UserStatus::Sending => "sending",
        UserStatus::Rejected => "rejected",
        UserStatus::Sent => "sent",
    }
}

fn user_status(s: &str) -> Option<UserStatus> {
    [UserStatus::Sending, UserStatus::Rejected, UserStatus::Sent]
        .into_iter()
        .find(|u| user_status_name(*u) == s)
}

fn final_source_name(s: FinalSource) -> &'static str {
    match s {
        FinalSource::Lost => "lost",
        FinalSource::State => "state",
        FinalSource::Message => "message",
    }
}

fn final_source(s: &str) -> Option<FinalSource> {
    [FinalSource::Lost, FinalSource::State, FinalSource::Message]
        .into_iter()
        .find(|f| final_source_name(*f) == s)
}

// ----- reading: the wire types -----

pub fn message<V: Value>(v: &V) -> Option<Message> {
    Some(Message {
        message_id: string(v, "message_id")?,
        client_message_id: opt_string(v, "client_message_id")?,
        role: variant(v, "role", WireRole::parse)?,
        content: string(v, "content")?,
        status: variant(v, "status", MessageStatus::parse)?,
        turn_id: opt_string(v, "turn_id")?,
        created_at: int(v, "created_at")?,
        event_id: string(v, "event_id")?,
        author: opt_string(v, "author")?,
        attachments: list(v, "attachments", attachment)?,
        parent_id: opt_string(v, "parent_id")?,
        siblings: opt(v, "siblings", siblings)?,
        requests: list(v, "requests", turn_request)?,
    })
}

/// A message's versions (v1.2).
fn siblings<V: Value>(v: &V) -> Option<Siblings> {
    Some(Siblings {
        index: u32::try_from(int(v, "index")?).ok()?,
        count: u32::try_from(int(v, "count")?).ok()?,
        ids: strings(v, "ids")?,
    })
}

/// A message's attachment (v1.2); the server always writes `url` and `media_type`.
pub fn attachment<V: Value>(v: &V) -> Option<Attachment> {
    Some(Attachment {
        url: string_or_empty(v, "url")?,
        media_type: string_or_empty(v, "media_type")?,
        name: opt_string(v, "name")?,
    })
}

pub fn tool_call<V: Value>(v: &V) -> Option<ToolCall> {
    Some(ToolCall {
        call_id: string(v, "call_id")?,
        name: string(v, "name")?,
        status: variant(v, "status", ToolStatus::parse)?,
        input_preview: opt_string(v, "input_preview")?,
        output_preview: opt_string(v, "output_preview")?,
    })
}

fn truncation<V: Value>(v: &V) -> Option<Truncation> {
    let size = int(v, "original_size")?;
    Some(Truncation {
        field: string(v, "field")?,
        original_size: usize::try_from(size).ok()?,
    })
}

fn tool_request<V: Value>(v: &V) -> Option<ToolRequest> {
    Some(ToolRequest {
        call_id: string(v, "call_id")?,
        name: string(v, "name")?,
        input: raw(v, "input"),
    })
}

/// A request's fields but its kind.
fn input_request<V: Value>(v: &V, kind: RequestKind) -> Option<InputRequest> {
    Some(InputRequest {
        request_id: string(v, "request_id")?,
        kind,
        tool: opt(v, "tool", tool_request)?,
        prompt: opt_string(v, "prompt")?,
        options: opt(v, "options", strings_of)?,
        expires_at: opt_int(v, "expires_at")?,
    })
}

/// A request with its answer, as snapshots and turn statuses list them.
pub fn turn_request<V: Value>(v: &V) -> Option<TurnRequest> {
    let r = input_request(v, variant(v, "kind", RequestKind::parse)?)?;
    Some(TurnRequest {
        request_id: r.request_id,
        kind: r.kind,
        tool: r.tool,
        prompt: r.prompt,
        options: r.options,
        expires_at: r.expires_at,
        answer: v.get("answer").map(|a| RawJson::trusted(a.json())),
        answered_by: opt_string(v, "answered_by")?,
    })
}

/// An `input_given` event's body, and the winner a `409 input_already_given` names.
pub fn input_given<V: Value>(v: &V) -> Option<InputGiven> {
    Some(InputGiven {
        request_id: string(v, "request_id")?,
        by: opt_string(v, "by")?,
        answer: raw(v, "answer"),
    })
}

/// A journaled event (the `data:` of a stream frame).
pub fn event<V: Value>(v: &V) -> Option<Event> {
    let kind = string(v, "kind")?;
    let body = match kind.as_str() {
        "message_received" => EventBody::MessageReceived {
            message: message(&v.get("message")?)?,
        },
        "turn_queued" => EventBody::TurnQueued {
            reply_id: opt_string(v, "reply_id")?,
            parent_id: opt_string(v, "parent_id")?,
        },
        "branch_changed" => EventBody::BranchChanged {
            leaf_id: string(v, "leaf_id")?,
        },
        "turn_started" => EventBody::TurnStarted {},
        "thinking" => EventBody::Thinking {
            delta: string(v, "delta")?,
        },
        "tool" => EventBody::Tool(tool_call(v)?),
        "response_delta" => EventBody::ResponseDelta {
            delta: string(v, "delta")?,
        },
        "turn_ended" => EventBody::TurnEnded {
            state: turn_state(v, "state")?,
            message: opt(v, "message", message)?,
            error: opt_string(v, "error")?,
        },
        "input_given" => EventBody::InputGiven(input_given(v)?),
        // An `input_requested` event's `kind` is its request's.
        k => EventBody::InputRequested(input_request(v, RequestKind::parse(k)?)?),
    };
    Some(Event {
        id: string(v, "id")?,
        session_id: string(v, "session_id")?,
        ts: int(v, "ts")?,
        turn_id: opt_string(v, "turn_id")?,
        body,
        truncated: list(v, "truncated", truncation)?,
    })
}

fn active_turn<V: Value>(v: &V) -> Option<ActiveTurn> {
    Some(ActiveTurn {
        turn_id: string(v, "turn_id")?,
        session_id: string(v, "session_id")?,
        state: turn_state(v, "state")?,
        thinking: string(v, "thinking")?,
        tools: list(v, "tools", tool_call)?,
        text: string(v, "text")?,
        requests: list(v, "requests", turn_request)?,
        reply_id: None,
        parent_id: None,
    })
}

pub fn snapshot<V: Value>(v: &V) -> Option<Snapshot> {
    Some(Snapshot {
        cursor: string(v, "cursor")?,
        active_turns: list(v, "active_turns", active_turn)?,
    })
}

/// Where an active turn's reply goes: its `reply_id` and `parent_id` (v1.2), absent from an
/// older server's snapshot.
fn turn_place<V: Value>(v: &V) -> Option<TurnPlace> {
    Some(TurnPlace {
        turn_id: string(v, "turn_id")?,
        reply_id: opt_string(v, "reply_id")?,
        parent_id: opt_string(v, "parent_id")?,
    })
}

/// A snapshot with its active turns' places (read beside the protocol's [`ActiveTurn`]).
pub fn snapshot_placed<V: Value>(v: &V) -> Option<(Snapshot, Vec<TurnPlace>)> {
    Some((snapshot(v)?, list(v, "active_turns", turn_place)?))
}

pub fn resync<V: Value>(v: &V) -> Option<ResyncRequired> {
    Some(ResyncRequired {
        reason: variant(v, "reason", ResyncReason::parse)?,
    })
}

pub fn history<V: Value>(v: &V) -> Option<HistoryResponse> {
    Some(HistoryResponse {
        session_id: string(v, "session_id")?,
        messages: list(v, "messages", message)?,
        cursor: string(v, "cursor")?,
        has_more: match v.get("has_more") {
            None => false,
            Some(b) => b.boolean()?,
        },
        leaf_id: opt_string(v, "leaf_id")?,
    })
}

pub fn turn_info<V: Value>(v: &V) -> Option<TurnInfo> {
    Some(TurnInfo {
        turn_id: string(v, "turn_id")?,
        session_id: string(v, "session_id")?,
        state: turn_state(v, "state")?,
        created_at: int(v, "created_at")?,
        started_at: opt_int(v, "started_at")?,
        ended_at: opt_int(v, "ended_at")?,
        text: string(v, "text")?,
        thinking: string_or_empty(v, "thinking")?,
        tools: list(v, "tools", tool_call)?,
        message: opt(v, "message", message)?,
        error: opt_string(v, "error")?,
        // The SDK shows no token counts; the field is v1.1's and optional.
        usage: None,
        requests: list(v, "requests", turn_request)?,
        reply_id: None,
        parent_id: None,
    })
}

pub fn post_response<V: Value>(v: &V) -> Option<PostMessageResponse> {
    Some(PostMessageResponse {
        message_id: string(v, "message_id")?,
        client_message_id: opt_string(v, "client_message_id")?,
        turn_id: string(v, "turn_id")?,
        event_id: string(v, "event_id")?,
    })
}

pub fn cancel_response<V: Value>(v: &V) -> Option<CancelResponse> {
    Some(CancelResponse {
        turn_id: string(v, "turn_id")?,
        state: turn_state(v, "state")?,
    })
}

fn error_detail<V: Value>(v: &V) -> Option<ErrorDetail> {
    Some(ErrorDetail {
        code: string(v, "code")?,
        message: string(v, "message")?,
    })
}

/// The detail of an error answer, `{"error": {"code", "message"}}`.
pub fn error_body<V: Value>(v: &V) -> Option<ErrorDetail> {
    error_detail(&v.get("error")?)
}

// ----- reading: the cache and the tab messages -----

fn entry_error<V: Value>(v: &V) -> Option<EntryError> {
    Some(EntryError {
        code: string(v, "code")?,
        message: string(v, "message")?,
    })
}

fn user_entry<V: Value>(v: &V) -> Option<UserEntry> {
    Some(UserEntry {
        key: string(v, "key")?,
        client_message_id: opt_string(v, "client_message_id")?,
        message_id: opt_string(v, "message_id")?,
        turn_id: opt_string(v, "turn_id")?,
        content: string(v, "content")?,
        created_at: int(v, "created_at")?,
        seq: opt_int(v, "seq")?,
        status: variant(v, "status", user_status)?,
        error: opt(v, "error", entry_error)?,
        from_server: boolean(v, "from_server")?,
        send_order: u64::try_from(int(v, "send_order")?).ok()?,
        author: opt_string(v, "author")?,
        attachments: list(v, "attachments", attachment)?,
        on_busy: opt(v, "on_busy", |b| OnBusy::parse(&b.string()?))?,
        node: opt(v, "node", node)?.unwrap_or_default(),
        edit: opt(v, "edit", |b| b.boolean())?.unwrap_or_default(),
    })
}

fn node<V: Value>(v: &V) -> Option<Node> {
    Some(Node {
        id: opt_string(v, "id")?,
        parent_id: opt_string(v, "parent_id")?,
        placed: boolean(v, "placed")?,
        siblings: strings(v, "siblings")?,
        elsewhere: opt(v, "elsewhere", |b| b.boolean())?.unwrap_or_default(),
    })
}

fn progress<V: Value>(v: &V) -> Option<Progress> {
    Some(Progress {
        through: opt_int(v, "through")?,
        running: boolean(v, "running")?,
        text: string(v, "text")?,
        thinking: string(v, "thinking")?,
        tools: list(v, "tools", tool_call)?,
        requests: list(v, "requests", turn_request)?,
    })
}

fn final_of<V: Value>(v: &V) -> Option<Final> {
    Some(Final {
        status: variant(v, "status", MessageStatus::parse)?,
        source: variant(v, "source", final_source)?,
        message_id: opt_string(v, "message_id")?,
        content: string(v, "content")?,
        truncated: boolean(v, "truncated")?,
        error: opt_string(v, "error")?,
    })
}

fn assistant_entry<V: Value>(v: &V) -> Option<AssistantEntry> {
    Some(AssistantEntry {
        turn_id: string(v, "turn_id")?,
        anchor: opt_int(v, "anchor")?,
        progress: progress(&v.get("progress")?)?,
        fin: opt(v, "final", final_of)?,
        recovered: boolean(v, "recovered")?,
        answers: list(v, "answers", local_answer)?,
        node: opt(v, "node", node)?.unwrap_or_default(),
    })
}

fn local_answer<V: Value>(v: &V) -> Option<LocalAnswer> {
    Some(LocalAnswer {
        request_id: string(v, "request_id")?,
        answer: RawJson::trusted(v.get("answer")?.json()),
        sent: boolean(v, "sent")?,
    })
}

pub fn cache_record<V: Value>(v: &V) -> Option<CacheRecord> {
    Some(CacheRecord {
        version: u32::try_from(int(v, "version")?).ok()?,
        session_id: string(v, "session_id")?,
        epoch: opt_string(v, "epoch")?,
        users: list(v, "users", user_entry)?,
        turns: list(v, "turns", assistant_entry)?,
        branch_actions: list(v, "branch_actions", branch_action)?,
    })
}

fn branch_action<V: Value>(v: &V) -> Option<BranchAction> {
    Some(BranchAction {
        id: string(v, "id")?,
        regenerate: boolean(v, "regenerate")?,
        target: string(v, "target")?,
        done: opt(v, "done", Value::boolean)?.unwrap_or(false),
    })
}

pub fn tab_message<V: Value>(v: &V) -> Option<TabMessage> {
    let session_id = string(v, "session_id")?;
    Some(match string(v, "type")?.as_str() {
        "optimistic" => TabMessage::Optimistic {
            session_id,
            client_message_id: string(v, "client_message_id")?,
            content: string(v, "content")?,
            attachments: list(v, "attachments", attachment)?,
            created_at: int(v, "created_at")?,
            on_busy: opt(v, "on_busy", |b| OnBusy::parse(&b.string()?))?,
            edit: match opt(v, "edit", |b| b.boolean())? {
                Some(true) => Some(opt_string(v, "parent_id")?),
                _ => None,
            },
        },
        "posted" => TabMessage::Posted {
            session_id,
            response: post_response(&v.get("response")?)?,
        },
        "rejected" => TabMessage::Rejected {
            session_id,
            client_message_id: string(v, "client_message_id")?,
            error: error_detail(&v.get("error")?)?,
        },
        "recovered" => TabMessage::Recovered {
            session_id,
            turn_id: string(v, "turn_id")?,
            info: opt(v, "info", turn_info)?.map(Box::new),
        },
        "answer" => TabMessage::Answer {
            session_id,
            turn_id: string(v, "turn_id")?,
            request_id: string(v, "request_id")?,
            answer: RawJson::trusted(v.get("answer")?.json()),
            sent: boolean(v, "sent")?,
        },
        _ => return None,
    })
}

fn strings<V: Value>(v: &V, key: &str) -> Option<Vec<String>> {
    strings_of(&v.get(key)?)
}

pub fn relay<V: Value>(v: &V) -> Option<Relay> {
    Some(match string(v, "t")?.as_str() {
        "state" => Relay::State {
            generation: int(v, "gen")?,
            streams: items_of(&v.get("streams")?, stream_state)?,
            hidden: boolean(v, "hidden")?,
        },
        "frame" => Relay::Frame {
            sid: string(v, "sid")?,
            kind: string(v, "kind")?,
            data: string(v, "data")?,
            prev: opt_string(v, "prev")?,
            last: string(v, "last")?,
        },
        "want" => Relay::Want {
            tab: string(v, "tab")?,
            generation: int(v, "gen")?,
            wants: items_of(&v.get("wants")?, want)?,
        },
        "bye" => Relay::Bye {
            tab: string(v, "tab")?,
        },
        _ => return None,
    })
}

fn stream_state<V: Value>(s: &V) -> Option<StreamState> {
    Some(StreamState {
        sid: string(s, "sid")?,
        sessions: strings(s, "sessions")?,
        from: string(s, "from")?,
        last: opt_string(s, "last")?,
        open: boolean(s, "open")?,
    })
}

fn want<V: Value>(w: &V) -> Option<Want> {
    Some(Want {
        session: string(w, "session")?,
        pos: string(w, "pos")?,
        covered: opt_string(w, "covered")?,
    })
}

// ----- writing -----

/// Builds one JSON object: `Obj::new(out)`, then `key`/`str`/... pairs, then `end`.
pub struct Obj<'a> {
    out: &'a mut String,
    first: bool,
}

impl<'a> Obj<'a> {
    pub fn new(out: &'a mut String) -> Self {
        out.push('{');
        Obj { out, first: true }
    }

    /// Writes `"key":` and hands out the buffer for the value.
    pub fn key(&mut self, key: &str) -> &mut String {
        if !self.first {
            self.out.push(',');
        }
        self.first = false;
        write_str(self.out, key);
        self.out.push(':');
        self.out
    }

    pub fn str(&mut self, key: &str, value: &str) -> &mut Self {
        write_str(self.key(key), value);
        self
    }

    pub fn opt_str(&mut self, key: &str, value: Option<&str>) -> &mut Self {
        match value {
            Some(s) => write_str(self.key(key), s),
            None => self.key(key).push_str("null"),
        }
        self
    }

    pub fn int(&mut self, key: &str, value: i64) -> &mut Self {
        write_int(self.key(key), value);
        self
    }

    pub fn opt_int(&mut self, key: &str, value: Option<i64>) -> &mut Self {
        match value {
            Some(n) => write_int(self.key(key), n),
            None => self.key(key).push_str("null"),
        }
        self
    }

    pub fn bool(&mut self, key: &str, value: bool) -> &mut Self {
        self.key(key).push_str(if value { "true" } else { "false" });
        self
    }

    pub fn list<T>(&mut self, key: &str, items: &[T], write: fn(&mut String, &T)) -> &mut Self {
        let out = self.key(key);
        out.push('[');
        for (i, item) in items.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            write(out, item);
        }
        out.push(']');
        self
    }

    pub fn end(&mut self) {
        self.out.push('}');
    }
}

/// A JSON string literal.
pub fn write_str(out: &mut String, s: &str) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let b = c as usize;
                out.push_str("\\u00");
                out.push(char::from(HEX[b >> 4]));
                out.push(char::from(HEX[b & 15]));
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// A decimal integer (without core::fmt).
pub fn write_int(out: &mut String, n: i64) {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    let mut m = n.unsigned_abs();
    loop {
        i -= 1;
        digits[i] = b'0' + (m % 10) as u8;
        m /= 10;
        if m == 0 {
            break;
        }
    }
    if n < 0 {
        out.push('-');
    }
    for &d in &digits[i..] {
        out.push(char::from(d));
    }
}

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
fn write_attachments(o: &mut Obj<'_>, attachments: &[Attachment]) {
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

fn write_tool(out: &mut String, t: &ToolCall) {
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
    if let Some(a) = &r.answer {
        o.key("answer").push_str(a.as_str());
    }
    if let Some(by) = &r.answered_by {
        o.str("answered_by", by);
    }
    o.end();
}

/// `"requests": [...]`, skipped when empty as the protocol's serde does.
fn write_requests(o: &mut Obj<'_>, requests: &[TurnRequest]) {
    if !requests.is_empty() {
        o.list("requests", requests, write_turn_request);
    }
}

fn write_on_busy(o: &mut Obj<'_>, on_busy: Option<OnBusy>) {
    if let Some(b) = on_busy {
        o.str("on_busy", b.as_str());
    }
}

fn write_turn_info(out: &mut String, t: &TurnInfo) {
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

fn write_post_response(out: &mut String, r: &PostMessageResponse) {
    Obj::new(out)
        .str("message_id", &r.message_id)
        .opt_str("client_message_id", r.client_message_id.as_deref())
        .str("turn_id", &r.turn_id)
        .str("event_id", &r.event_id)
        .end();
}

fn write_error(out: &mut String, code: &str, message: &str) {
    Obj::new(out)
        .str("code", code)
        .str("message", message)
        .end();
}

fn write_user(out: &mut String, u: &UserEntry) {
    let mut o = Obj::new(out);
    o.str("key", &u.key)
        .opt_str("client_message_id", u.client_message_id.as_deref())
        .opt_str("message_id", u.message_id.as_deref())
        .opt_str("turn_id", u.turn_id.as_deref())
        .str("content", &u.content)
        .int("created_at", u.created_at)
        .opt_int("seq", u.seq)
        .str("status", user_status_name(u.status));
    match &u.error {
        Some(e) => write_error(o.key("error"), &e.code, &e.message),
        None => o.key("error").push_str("null"),
    }
    o.bool("from_server", u.from_server)
        .int(
            "send_order",
            i64::try_from(u.send_order).unwrap_or(i64::MAX),
        )
        .opt_str("author", u.author.as_deref());
    write_attachments(&mut o, &u.attachments);
    write_on_busy(&mut o, u.on_busy);
    write_node(o.key("node"), &u.node);
    o.bool("edit", u.edit).end();
}

fn write_node(out: &mut String, n: &Node) {
    Obj::new(out)
        .opt_str("id", n.id.as_deref())
        .opt_str("parent_id", n.parent_id.as_deref())
        .bool("placed", n.placed)
        .list("siblings", &n.siblings, write_strings)
        .bool("elsewhere", n.elsewhere)
        .end();
}

fn write_progress(out: &mut String, p: &Progress) {
    let mut o = Obj::new(out);
    o.opt_int("through", p.through)
        .bool("running", p.running)
        .str("text", &p.text)
        .str("thinking", &p.thinking)
        .list("tools", &p.tools, write_tool);
    write_requests(&mut o, &p.requests);
    o.end();
}

fn write_local_answer(out: &mut String, a: &LocalAnswer) {
    let mut o = Obj::new(out);
    o.str("request_id", &a.request_id);
    o.key("answer").push_str(a.answer.as_str());
    o.bool("sent", a.sent).end();
}

fn write_final(out: &mut String, f: &Final) {
    Obj::new(out)
        .str("status", f.status.as_str())
        .str("source", final_source_name(f.source))
        .opt_str("message_id", f.message_id.as_deref())
        .str("content", &f.content)
        .bool("truncated", f.truncated)
        .opt_str("error", f.error.as_deref())
        .end();
}

fn write_turn(out: &mut String, a: &AssistantEntry) {
    let mut o = Obj::new(out);
    o.str("turn_id", &a.turn_id).opt_int("anchor", a.anchor);
    write_progress(o.key("progress"), &a.progress);
    match &a.fin {
        Some(f) => write_final(o.key("final"), f),
        None => o.key("final").push_str("null"),
    }
    o.bool("recovered", a.recovered);
    if !a.answers.is_empty() {
        o.list("answers", &a.answers, write_local_answer);
    }
    write_node(o.key("node"), &a.node);
    o.end();
}

pub fn cache_record_json(rec: &CacheRecord) -> String {
    let mut out = String::new();
    let mut o = Obj::new(&mut out);
    o.int("version", i64::from(rec.version))
        .str("session_id", &rec.session_id)
        .opt_str("epoch", rec.epoch.as_deref())
        .list("users", &rec.users, write_user)
        .list("turns", &rec.turns, write_turn);
    if !rec.branch_actions.is_empty() {
        o.list("branch_actions", &rec.branch_actions, write_branch_action);
    }
    o.end();
    out
}

fn write_branch_action(out: &mut String, a: &BranchAction) {
    Obj::new(out)
        .str("id", &a.id)
        .bool("regenerate", a.regenerate)
        .str("target", &a.target)
        .bool("done", a.done)
        .end();
}

pub fn tab_message_json(msg: &TabMessage) -> String {
    let mut out = String::new();
    let mut o = Obj::new(&mut out);
    match msg {
        TabMessage::Optimistic {
            session_id,
            client_message_id,
            content,
            attachments,
            created_at,
            on_busy,
            edit,
        } => {
            o.str("type", "optimistic")
                .str("session_id", session_id)
                .str("client_message_id", client_message_id)
                .str("content", content);
            write_attachments(&mut o, attachments);
            o.int("created_at", *created_at);
            write_on_busy(&mut o, *on_busy);
            if let Some(parent) = edit {
                o.bool("edit", true).opt_str("parent_id", parent.as_deref());
            }
        }
        TabMessage::Posted {
            session_id,
            response,
        } => {
            o.str("type", "posted").str("session_id", session_id);
            write_post_response(o.key("response"), response);
        }
        TabMessage::Rejected {
            session_id,
            client_message_id,
            error,
        } => {
            o.str("type", "rejected")
                .str("session_id", session_id)
                .str("client_message_id", client_message_id);
            write_error(o.key("error"), &error.code, &error.message);
        }
        TabMessage::Recovered {
            session_id,
            turn_id,
            info,
        } => {
            o.str("type", "recovered")
                .str("session_id", session_id)
                .str("turn_id", turn_id);
            match info {
                Some(i) => write_turn_info(o.key("info"), i),
                None => o.key("info").push_str("null"),
            }
        }
        TabMessage::Answer {
            session_id,
            turn_id,
            request_id,
            answer,
            sent,
        } => {
            o.str("type", "answer")
                .str("session_id", session_id)
                .str("turn_id", turn_id)
                .str("request_id", request_id);
            o.key("answer").push_str(answer.as_str());
            o.bool("sent", *sent);
        }
    }
    o.end();
    out
}

#[allow(clippy::ptr_arg)] // `Obj::list` hands each item of a `Vec<String>` as `&String`.
fn write_strings(out: &mut String, s: &String) {
    write_str(out, s);
}

fn write_stream_state(out: &mut String, s: &StreamState) {
    Obj::new(out)
        .str("sid", &s.sid)
        .list("sessions", &s.sessions, write_strings)
        .str("from", &s.from)
        .opt_str("last", s.last.as_deref())
        .bool("open", s.open)
        .end();
}

fn write_want(out: &mut String, w: &Want) {
    Obj::new(out)
        .str("session", &w.session)
        .str("pos", &w.pos)
        .opt_str("covered", w.covered.as_deref())
        .end();
}

pub fn relay_json(msg: &Relay) -> String {
    let mut out = String::new();
    let mut o = Obj::new(&mut out);
    match msg {
        Relay::State {
            generation,
            streams,
            hidden,
        } => {
            o.str("t", "state")
                .int("gen", *generation)
                .list("streams", streams, write_stream_state)
                .bool("hidden", *hidden);
        }
        Relay::Frame {
            sid,
            kind,
            data,
            prev,
            last,
        } => {
            o.str("t", "frame")
                .str("sid", sid)
                .str("kind", kind)
                .str("data", data)
                .opt_str("prev", prev.as_deref())
                .str("last", last);
        }
        Relay::Want {
            tab,
            generation,
            wants,
        } => {
            o.str("t", "want")
                .str("tab", tab)
                .int("gen", *generation)
                .list("wants", wants, write_want);
        }
        Relay::Bye { tab } => {
            o.str("t", "bye").str("tab", tab);
        }
    }
    o.end();
    out
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
    Some(RegenerateResponse {
        message_id: string(v, "message_id")?,
        turn_id: string(v, "turn_id")?,
        event_id: string(v, "event_id")?,
        cursor: string(v, "cursor")?,
    })
}

/// The body of `POST /api/sessions/{session}/active` (v1.2).
/// The body of `POST /api/messages/{message}/regenerate`: the id that makes a retry safe.
pub fn regenerate_request_json(client_request_id: &str) -> String {
    let mut out = String::new();
    Obj::new(&mut out)
        .str("client_request_id", client_request_id)
        .end();
    out
}

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

#[cfg(all(test, not(target_arch = "wasm32")))]
mod tests;
