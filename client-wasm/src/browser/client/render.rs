//! Rendering the state for JS: one frozen object per revision, entries that did not change keep
//! their object (so React skips them), subscribers called once per task.

use std::rc::Rc;

use js_sys::{Array, Function, Object};
use wasm_bindgen::prelude::*;
use web_sys::console;

use super::answers::parsed;
use super::{opt_str, set, Client};
use crate::codec;
use crate::reducer::entry::EntryError;
use crate::reducer::EntryView;

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
        let revision = self.conv.borrow().revision();
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
        let conv = self.conv.borrow();
        let revision = conv.revision();
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
                    Object::freeze(&js);
                    js.into()
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

/// One entry as JS sees it (the `ChatEntry` of the TypeScript declarations).
fn entry_js(e: &EntryView) -> Object {
    let o = Object::new();
    set(&o, "key", &e.key.as_str().into());
    set(&o, "role", &e.role.as_str().into());
    set(&o, "content", &e.content.as_str().into());
    set(&o, "status", &e.status.as_str().into());
    set(&o, "messageId", &opt_str(&e.message_id));
    set(&o, "clientMessageId", &opt_str(&e.client_message_id));
    set(&o, "turnId", &opt_str(&e.turn_id));
    set(&o, "thinking", &e.thinking.as_str().into());
    let tools = Array::new();
    for t in &e.tools {
        let js = Object::new();
        set(&js, "callId", &t.call_id.as_str().into());
        set(&js, "name", &t.name.as_str().into());
        set(&js, "status", &codec::tool_status_name(t.status).into());
        set(&js, "inputPreview", &opt_str(&t.input_preview));
        set(&js, "outputPreview", &opt_str(&t.output_preview));
        tools.push(&js);
    }
    set(&o, "tools", &tools);
    set(&o, "recovered", &e.recovered.into());
    set(&o, "error", &error_js(e.error.as_ref()));
    // Unix milliseconds: well inside what a JS number holds exactly.
    let created_at = e
        .created_at
        .map_or(JsValue::NULL, |ms| JsValue::from_f64(ms as f64));
    set(&o, "createdAt", &created_at);
    set(&o, "author", &opt_str(&e.author));
    let attachments = Array::new();
    for a in &e.attachments {
        let js = Object::new();
        set(&js, "url", &a.url.as_str().into());
        set(&js, "mediaType", &a.media_type.as_str().into());
        set(&js, "name", &opt_str(&a.name));
        attachments.push(&js);
    }
    set(&o, "attachments", &attachments);
    let requests = Array::new();
    for r in &e.requests {
        let js = Object::new();
        set(&js, "requestId", &r.request_id.as_str().into());
        set(&js, "kind", &r.kind.as_str().into());
        let tool = match &r.tool {
            Some(t) => {
                let tool = Object::new();
                set(&tool, "callId", &t.call_id.as_str().into());
                set(&tool, "name", &t.name.as_str().into());
                set(&tool, "input", &parsed(&t.input));
                tool.into()
            }
            None => JsValue::NULL,
        };
        set(&js, "tool", &tool);
        set(&js, "prompt", &opt_str(&r.prompt));
        let options = match &r.options {
            Some(list) => list
                .iter()
                .map(|o| JsValue::from_str(o))
                .collect::<Array>()
                .into(),
            None => JsValue::NULL,
        };
        set(&js, "options", &options);
        let expires_at = r
            .expires_at
            .map_or(JsValue::NULL, |ms| JsValue::from_f64(ms as f64));
        set(&js, "expiresAt", &expires_at);
        set(
            &js,
            "answer",
            &r.answer.as_ref().map_or(JsValue::NULL, parsed),
        );
        set(&js, "answeredBy", &opt_str(&r.answered_by));
        requests.push(&js);
    }
    set(&o, "requests", &requests);
    let branch = Object::new();
    set(&branch, "index", &e.branch.index.into());
    set(&branch, "count", &e.branch.count.into());
    set(&o, "branch", &branch);
    o
}
