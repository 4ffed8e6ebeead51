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

/// Reads the fields of one object. Each reader returns the field's value, or a placeholder
/// when the field is missing or has the wrong shape, and then marks the read as failed;
/// [`Fields::done`] hands out the value built from them only when none failed.
///
/// No early return per field: with `?` after each one, every reader carried a branch and a
/// path dropping the fields read so far for each field (most of the codec's code), where now
/// a field is one call and a failed read drops the built value once.
struct Fields<'v, V> {
    v: &'v V,
    ok: bool,
}

impl<'v, V: Value> Fields<'v, V> {
    fn new(v: &'v V) -> Self {
        Fields { v, ok: true }
    }

    /// The value built from the fields read, `None` when any of them failed.
    fn done<T>(self, value: T) -> Option<T> {
        self.ok.then_some(value)
    }

    /// `x`; the read is marked failed when it is false. Not generic over the field's type, as
    /// a helper taking the field's `Option` would be (one copy per type).
    fn seen(&mut self, x: bool) -> bool {
        self.ok &= x;
        x
    }

    /// An optional member: `None` when missing (or `null`), failed when not readable by `item`.
    fn opt<T>(&mut self, key: &str, item: fn(&V) -> Option<T>) -> Option<T> {
        let x = item(&self.v.get(key)?);
        self.seen(x.is_some());
        x
    }

    /// A required member; `or` stands in for it when it is missing or not readable.
    fn req<T>(&mut self, key: &str, item: fn(&V) -> Option<T>, or: T) -> T {
        let x = self.v.get(key).and_then(|x| item(&x));
        match x {
            Some(x) => x,
            None => {
                self.seen(false);
                or
            }
        }
    }

    fn str(&mut self, key: &str) -> String {
        self.req(key, Value::string, String::new())
    }

    /// A string that defaults to empty when missing.
    fn str_or_empty(&mut self, key: &str) -> String {
        self.opt(key, Value::string).unwrap_or_default()
    }

    fn opt_str(&mut self, key: &str) -> Option<String> {
        self.opt(key, Value::string)
    }

    fn int(&mut self, key: &str) -> i64 {
        self.req(key, int_of, 0)
    }

    /// A whole number in `0..=max`.
    fn count(&mut self, key: &str, max: i64) -> i64 {
        let n = self.int(key);
        self.seen((0..=max).contains(&n));
        n
    }

    fn opt_int(&mut self, key: &str) -> Option<i64> {
        self.opt(key, int_of)
    }

    fn bool(&mut self, key: &str) -> bool {
        self.req(key, Value::boolean, false)
    }

    /// A boolean that defaults to false when missing.
    fn bool_or_false(&mut self, key: &str) -> bool {
        self.opt(key, Value::boolean).unwrap_or_default()
    }

    /// An array; missing reads as empty. On a failed element the elements before it are
    /// returned: the read has failed, and what it built is dropped.
    fn list<T>(&mut self, key: &str, item: fn(&V) -> Option<T>) -> Vec<T> {
        let mut out = Vec::new();
        if let Some(x) = self.v.get(key) {
            let all = each(&x, &mut |e: &V| item(e).map(|t| out.push(t)).is_some());
            self.seen(all);
        }
        out
    }

    /// An array that must be present.
    fn items<T>(&mut self, key: &str, item: fn(&V) -> Option<T>) -> Vec<T> {
        self.seen(self.v.get(key).is_some());
        self.list(key, item)
    }

    fn strings(&mut self, key: &str) -> Vec<String> {
        self.items(key, Value::string)
    }

    /// An enum, read by `parse` (failed for a name it does not know; `or` is a placeholder).
    fn variant<T>(&mut self, key: &str, parse: fn(&str) -> Option<T>, or: T) -> T {
        let x = self
            .v
            .get(key)
            .and_then(|x| x.string())
            .and_then(|s| parse(&s));
        match x {
            Some(x) => x,
            None => {
                self.seen(false);
                or
            }
        }
    }

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

    /// Any JSON value, as its text; missing reads as `null`.
    fn raw(&self, key: &str) -> RawJson {
        self.opt_raw(key).unwrap_or_else(RawJson::null)
    }

    /// Any JSON value, as its text; `None` when missing.
    fn opt_raw(&self, key: &str) -> Option<RawJson> {
        self.v.get(key).map(|x| RawJson::trusted(x.json()))
    }

    /// Any JSON value that must be present.
    fn req_raw(&mut self, key: &str) -> RawJson {
        let x = self.opt_raw(key);
        self.seen(x.is_some());
        x.unwrap_or_else(RawJson::null)
    }
}

/// A whole number that a JS number holds exactly (below 2^53 in magnitude: from there on, a
/// parsed number may have been rounded).
fn int_of<V: Value>(v: &V) -> Option<i64> {
    let n = v.number()?;
    (n == n.trunc() && n.abs() < 9_007_199_254_740_992.0).then_some(n as i64)
}

/// The elements of an array, each read by `item`. A plain loop: `collect` into an `Option`
/// brings a family of iterator adapters into the package for each element type.
fn items_of<V: Value, T>(v: &V, item: fn(&V) -> Option<T>) -> Option<Vec<T>> {
    let mut out = Vec::new();
    each(v, &mut |x: &V| item(x).map(|t| out.push(t)).is_some()).then_some(out)
}

/// Calls `f` on each element of the array `v` until it returns false; false when `v` is not an
/// array or `f` returned false. Not generic over the element type, unlike [`items_of`].
fn each<V: Value>(v: &V, f: &mut dyn Each<V>) -> bool {
    match v.items() {
        Some(items) => items.iter().all(|x| f.next(x)),
        None => false,
    }
}

/// What [`each`] calls: a closure (`|x: &V| ...`). A trait of its own rather than `dyn FnMut`,
/// whose vtable also holds `FnOnce::call_once`, a second copy of each closure, never called.
trait Each<V> {
    fn next(&mut self, x: &V) -> bool;
}

impl<V, F: FnMut(&V) -> bool> Each<V> for F {
    fn next(&mut self, x: &V) -> bool {
        self(x)
    }
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
    };
    f.done(m)
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

const U32_MAX: i64 = u32::MAX as i64;

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

fn error_detail<V: Value>(v: &V) -> Option<ErrorDetail> {
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

// ----- reading: the cache and the tab messages -----

fn entry_error<V: Value>(v: &V) -> Option<EntryError> {
    let e = error_detail(v)?;
    Some(EntryError {
        code: e.code,
        message: e.message,
    })
}

fn on_busy<V: Value>(v: &V) -> Option<OnBusy> {
    OnBusy::parse(&v.string()?)
}

fn user_entry<V: Value>(v: &V) -> Option<UserEntry> {
    let mut f = Fields::new(v);
    let u = UserEntry {
        key: f.str("key"),
        client_message_id: f.opt_str("client_message_id"),
        message_id: f.opt_str("message_id"),
        turn_id: f.opt_str("turn_id"),
        content: f.str("content"),
        created_at: f.int("created_at"),
        seq: f.opt_int("seq"),
        status: f.variant("status", user_status, UserStatus::Sent),
        error: f.opt("error", entry_error),
        from_server: f.bool("from_server"),
        send_order: f.count("send_order", i64::MAX) as u64,
        author: f.opt_str("author"),
        attachments: f.list("attachments", attachment),
        on_busy: f.opt("on_busy", on_busy),
        node: f.opt("node", node).unwrap_or_default(),
        edit: f.bool_or_false("edit"),
    };
    f.done(u)
}

fn node<V: Value>(v: &V) -> Option<Node> {
    let mut f = Fields::new(v);
    let n = Node {
        id: f.opt_str("id"),
        parent_id: f.opt_str("parent_id"),
        placed: f.bool("placed"),
        siblings: f.strings("siblings"),
        elsewhere: f.bool_or_false("elsewhere"),
    };
    f.done(n)
}

fn progress<V: Value>(v: &V) -> Option<Progress> {
    let mut f = Fields::new(v);
    let p = Progress {
        through: f.opt_int("through"),
        running: f.bool("running"),
        text: f.str("text"),
        thinking: f.str("thinking"),
        tools: f.list("tools", tool_call),
        requests: f.list("requests", turn_request),
    };
    f.done(p)
}

fn final_of<V: Value>(v: &V) -> Option<Final> {
    let mut f = Fields::new(v);
    let x = Final {
        status: f.variant("status", MessageStatus::parse, MessageStatus::Complete),
        source: f.variant("source", final_source, FinalSource::Lost),
        message_id: f.opt_str("message_id"),
        content: f.str("content"),
        truncated: f.bool("truncated"),
        error: f.opt_str("error"),
    };
    f.done(x)
}

fn assistant_entry<V: Value>(v: &V) -> Option<AssistantEntry> {
    let progress = progress(&v.get("progress")?)?;
    let mut f = Fields::new(v);
    let a = AssistantEntry {
        turn_id: f.str("turn_id"),
        anchor: f.opt_int("anchor"),
        progress,
        fin: f.opt("final", final_of),
        recovered: f.bool("recovered"),
        answers: f.list("answers", local_answer),
        node: f.opt("node", node).unwrap_or_default(),
    };
    f.done(a)
}

fn local_answer<V: Value>(v: &V) -> Option<LocalAnswer> {
    let mut f = Fields::new(v);
    let a = LocalAnswer {
        request_id: f.str("request_id"),
        answer: f.req_raw("answer"),
        sent: f.bool("sent"),
    };
    f.done(a)
}

pub fn cache_record<V: Value>(v: &V) -> Option<CacheRecord> {
    let mut f = Fields::new(v);
    let r = CacheRecord {
        version: f.count("version", U32_MAX) as u32,
        session_id: f.str("session_id"),
        epoch: f.opt_str("epoch"),
        users: f.list("users", user_entry),
        turns: f.list("turns", assistant_entry),
        branch_actions: f.list("branch_actions", branch_action),
    };
    f.done(r)
}

fn branch_action<V: Value>(v: &V) -> Option<BranchAction> {
    let mut f = Fields::new(v);
    let a = BranchAction {
        id: f.str("id"),
        regenerate: f.bool("regenerate"),
        target: f.str("target"),
        done: f.bool_or_false("done"),
    };
    f.done(a)
}

pub fn tab_message<V: Value>(v: &V) -> Option<TabMessage> {
    let mut f = Fields::new(v);
    let session_id = f.str("session_id");
    let m = match f.str("type").as_str() {
        "optimistic" => TabMessage::Optimistic {
            session_id,
            client_message_id: f.str("client_message_id"),
            content: f.str("content"),
            attachments: f.list("attachments", attachment),
            created_at: f.int("created_at"),
            on_busy: f.opt("on_busy", on_busy),
            edit: match f.bool_or_false("edit") {
                true => Some(f.opt_str("parent_id")),
                false => None,
            },
        },
        "posted" => TabMessage::Posted {
            session_id,
            response: post_response(&v.get("response")?)?,
        },
        "rejected" => TabMessage::Rejected {
            session_id,
            client_message_id: f.str("client_message_id"),
            error: error_detail(&v.get("error")?)?,
        },
        "recovered" => TabMessage::Recovered {
            session_id,
            turn_id: f.str("turn_id"),
            info: f.opt("info", turn_info).map(Box::new),
        },
        "answer" => TabMessage::Answer {
            session_id,
            turn_id: f.str("turn_id"),
            request_id: f.str("request_id"),
            answer: f.req_raw("answer"),
            sent: f.bool("sent"),
        },
        _ => return None,
    };
    f.done(m)
}

pub fn relay<V: Value>(v: &V) -> Option<Relay> {
    let mut f = Fields::new(v);
    let r = match f.str("t").as_str() {
        "state" => Relay::State {
            generation: f.int("gen"),
            streams: f.items("streams", stream_state),
            hidden: f.bool("hidden"),
        },
        "frame" => Relay::Frame {
            sid: f.str("sid"),
            kind: f.str("kind"),
            data: f.str("data"),
            prev: f.opt_str("prev"),
            last: f.str("last"),
        },
        "want" => Relay::Want {
            tab: f.str("tab"),
            generation: f.int("gen"),
            wants: f.items("wants", want),
        },
        "bye" => Relay::Bye { tab: f.str("tab") },
        _ => return None,
    };
    f.done(r)
}

fn stream_state<V: Value>(v: &V) -> Option<StreamState> {
    let mut f = Fields::new(v);
    let s = StreamState {
        sid: f.str("sid"),
        sessions: f.strings("sessions"),
        from: f.str("from"),
        last: f.opt_str("last"),
        open: f.bool("open"),
    };
    f.done(s)
}

fn want<V: Value>(v: &V) -> Option<Want> {
    let mut f = Fields::new(v);
    let w = Want {
        session: f.str("session"),
        pos: f.str("pos"),
        covered: f.opt_str("covered"),
    };
    f.done(w)
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
    let mut f = Fields::new(v);
    let r = RegenerateResponse {
        message_id: f.str("message_id"),
        turn_id: f.str("turn_id"),
        event_id: f.str("event_id"),
        cursor: f.str("cursor"),
    };
    f.done(r)
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
