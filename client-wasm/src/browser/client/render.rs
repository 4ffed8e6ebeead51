//! Rendering the state for JS: one frozen object per revision, entries that did not change keep
//! their object (so React skips them), subscribers called once per task.

use std::rc::Rc;

use js_sys::{Array, Function, Object};
use wasm_bindgen::prelude::*;
use web_sys::console;

use super::{set, Client};
use crate::browser::json;
use crate::codec::{self, write_str, Obj, Value};
use crate::reducer::entry::EntryError;
use crate::reducer::{AttachmentView, EntryView, ToolView};
use turnstream_protocol::{RawJson, TurnRequest};

/// The last state handed to JS, and the JS object of each entry, so an unchanged bubble keeps
/// its identity (React can skip it) and an unchanged state is the very same object.
#[derive(Default)]
pub(super) struct Rendered {
    revision: Option<u64>,
    state: JsValue,
    /// In view order.
    entries: Vec<(EntryView, JsValue)>,
}

impl Client {
    pub(super) fn notify(&self) {
        self.settle_waiters();
        let revision = self.revision();
        if self.notified.replace(Some(revision)) == Some(revision) {
            return;
        }
        let state = self.state();
        let listeners: Vec<Function> = self
            .subscribers
            .borrow()
            .iter()
            .map(|(_, f)| f.clone())
            .collect();
        for f in listeners {
            if let Err(e) = f.call1(&JsValue::NULL, &state) {
                console::error_2(&"turnstream: a subscriber threw".into(), &e);
            }
        }
    }

    /// The current state: the same object until something changes.
    pub(crate) fn state(&self) -> JsValue {
        let revision = self.revision();
        let conv = self.conv.borrow();
        let mut r = self.rendered.borrow_mut();
        if r.revision == Some(revision) {
            return r.state.clone();
        }
        let view = conv.view();
        let history_loaded = conv.history_loaded();
        drop(conv);
        let messages = Array::new();
        let mut old: Vec<Option<(EntryView, JsValue)>> = std::mem::take(&mut r.entries)
            .into_iter()
            .map(Some)
            .collect();
        let mut entries = Vec::with_capacity(view.messages.len());
        // The previous render is in view order too, and bubbles rarely move: look where the
        // last match suggests first, then everywhere.
        let mut shift = 0isize;
        for (i, e) in view.messages.into_iter().enumerate() {
            let is_it =
                |o: &Option<(EntryView, JsValue)>| o.as_ref().is_some_and(|(v, _)| v.key == e.key);
            let guess = i
                .checked_add_signed(shift)
                .filter(|&g| old.get(g).is_some_and(is_it));
            let found = guess.or_else(|| old.iter().position(is_it));
            if let Some(j) = found {
                shift = j as isize - i as isize;
            }
            let js = match found.and_then(|j| old.get_mut(j)).and_then(Option::take) {
                Some((prev, js)) if prev == e => js,
                _ => {
                    let js = entry_js(&e);
                    Object::freeze(js.unchecked_ref::<Object>());
                    js
                }
            };
            messages.push(&js);
            entries.push((e, js));
        }
        Object::freeze(&messages);
        let state = Object::new();
        set(&state, "sessionId", &view.session_id.as_str().into());
        set(&state, "connection", &view.connection.as_str().into());
        set(&state, "busy", &view.busy.into());
        set(&state, "gap", &view.gap.into());
        set(&state, "hasMore", &view.has_more.into());
        set(&state, "historyLoaded", &history_loaded.into());
        set(&state, "error", &error_js(view.error.as_ref()));
        set(&state, "messages", &messages);
        let presence = self.presence.borrow();
        set(&state, "presence", &presence.0);
        set(&state, "presenceCount", &(presence.1 as f64).into());
        Object::freeze(&state);
        r.entries = entries;
        r.state = state.into();
        r.revision = Some(revision);
        r.state.clone()
    }

    pub(crate) fn subscribe(self: &Rc<Self>, listener: Function) -> JsValue {
        let id = self.next_subscriber.get();
        self.next_subscriber.set(id.wrapping_add(1));
        self.subscribers.borrow_mut().push((id, listener));
        let weak = Rc::downgrade(self);
        Closure::<dyn FnMut()>::new(move || {
            if let Some(me) = weak.upgrade() {
                me.subscribers.borrow_mut().retain(|(i, _)| *i != id);
            }
        })
        .into_js_value()
    }
}

/// `{code, message}`, or null.
fn error_js(e: Option<&EntryError>) -> JsValue {
    match e {
        Some(err) => {
            let js = Object::new();
            set(&js, "code", &err.code.as_str().into());
            set(&js, "message", &err.message.as_str().into());
            js.into()
        }
        None => JsValue::NULL,
    }
}

/// One entry as JS sees it (the `ChatEntry` of the TypeScript declarations): written as JSON
/// and parsed by the browser in one call, rather than built field by field across the boundary.
/// (The tool inputs and answers inside are JSON texts already, from `JSON.stringify`.)
fn entry_js(e: &EntryView) -> JsValue {
    let mut out = String::new();
    let mut o = Obj::new(&mut out);
    o.str("key", &e.key)
        .str("role", e.role.as_str())
        .str("content", &e.content)
        .str("status", e.status.as_str())
        .opt_str("messageId", e.message_id.as_deref())
        .opt_str("clientMessageId", e.client_message_id.as_deref())
        .opt_str("turnId", e.turn_id.as_deref())
        .str("thinking", &e.thinking)
        .list("tools", &e.tools, write_tool)
        .bool("recovered", e.recovered);
    write_error(o.key("error"), e.error.as_ref());
    // Unix milliseconds: well inside what a JS number holds exactly.
    o.opt_int("createdAt", e.created_at)
        .opt_str("author", e.author.as_deref())
        .list("attachments", &e.attachments, write_attachment)
        .list("requests", &e.requests, write_request);
    Obj::new(o.key("branch"))
        .int("index", i64::from(e.branch.index))
        .int("count", i64::from(e.branch.count))
        .end();
    o.end();
    json::parse(&out).unwrap_or(JsValue::NULL)
}

fn write_error(out: &mut String, e: Option<&EntryError>) {
    match e {
        Some(e) => Obj::new(out)
            .str("code", &e.code)
            .str("message", &e.message)
            .end(),
        None => out.push_str("null"),
    }
}

fn write_tool(out: &mut String, t: &ToolView) {
    Obj::new(out)
        .str("callId", &t.call_id)
        .str("name", &t.name)
        .str("status", codec::tool_status_name(t.status))
        .opt_str("inputPreview", t.input_preview.as_deref())
        .opt_str("outputPreview", t.output_preview.as_deref())
        .end();
}

fn write_attachment(out: &mut String, a: &AttachmentView) {
    Obj::new(out)
        .str("url", &a.url)
        .str("mediaType", &a.media_type)
        .opt_str("name", a.name.as_deref())
        .end();
}

/// An `agent_call` request's child turn (v1.3), `running` until the call is answered, then
/// the child's end as the answer says it; null for the other kinds.
fn write_call(out: &mut String, r: &TurnRequest) {
    let Some(c) = &r.call else {
        out.push_str("null");
        return;
    };
    let answer = r.answer.as_ref().and_then(|a| json::parse(a.as_str()));
    let field = |k: &str| {
        answer
            .as_ref()
            .and_then(|a| a.get(k))
            .and_then(|v| v.string())
    };
    Obj::new(out)
        .str("agent", &c.agent)
        .str("sessionId", &c.session_id)
        .str("turnId", &c.turn_id)
        .str("messageId", &c.message_id)
        .str("state", field("state").as_deref().unwrap_or("running"))
        .opt_str("text", field("text").as_deref())
        .opt_str("error", field("error").as_deref())
        .end();
}

fn write_request(out: &mut String, r: &TurnRequest) {
    let mut o = Obj::new(out);
    o.str("requestId", &r.request_id)
        .str("kind", r.kind.as_str());
    match &r.tool {
        Some(t) => {
            let mut tool = Obj::new(o.key("tool"));
            tool.str("callId", &t.call_id).str("name", &t.name);
            tool.key("input").push_str(t.input.as_str());
            tool.end();
        }
        None => o.key("tool").push_str("null"),
    }
    o.opt_str("prompt", r.prompt.as_deref());
    match &r.options {
        Some(list) => {
            o.list("options", list, |out, s| write_str(out, s));
        }
        None => o.key("options").push_str("null"),
    }
    o.opt_int("expiresAt", r.expires_at);
    write_call(o.key("call"), r);
    o.key("answer")
        .push_str(r.answer.as_ref().map_or("null", RawJson::as_str));
    o.opt_str("answeredBy", r.answered_by.as_deref()).end();
}
