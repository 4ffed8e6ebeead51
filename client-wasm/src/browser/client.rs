//! The client behind `ChatClient`: owns one session's [`Conversation`] and runs the loops around
//! it — history then stream (with reconnect and resync), the outbox, turn-status checks, the
//! cache writes and the sibling-tab channel — and renders the view for JS subscribers.

use std::cell::{Cell, RefCell};
use std::rc::{Rc, Weak};

use js_sys::{Array, Function, Object, Reflect};
use turnstream_protocol::{ErrorDetail, PostMessageResponse};
use wasm_bindgen::prelude::*;
use wasm_bindgen_futures::spawn_local;
use web_sys::console;

use super::channel::Channel;
use super::env::{self, GlobalListener, Waker};
use super::http::{Endpoint, HttpError};
use super::storage::Storage;
use super::stream::{Signal, Stream};
use crate::codec;
use crate::reducer::keyed::Keys;
use crate::reducer::{Connection, Conversation, EntryView};
use crate::retry::{backoff_ms, classify_post, PostOutcome};
use crate::tabs::TabMessage;

/// How often at most the cache is written while a turn streams, in milliseconds. The outbox is
/// written at once; anything else lost to a crash inside this window comes back from the server.
const SAVE_EVERY_MS: u32 = 300;

pub(crate) struct Options {
    pub(crate) base_url: String,
    pub(crate) session_id: String,
    pub(crate) persistent: bool,
    pub(crate) history_limit: u32,
}

/// Why the stream loop handed control back to the connection loop.
enum Exit {
    Resync,
    Closed,
}

/// What the stream's callbacks tell the connection loop.
#[derive(Clone, Copy)]
enum LoopSignal {
    Resync,
    Failed,
}

/// The last state handed to JS, and the JS object of each entry, so an unchanged bubble keeps
/// its identity (React can skip it) and an unchanged state is the very same object.
#[derive(Default)]
struct Rendered {
    revision: Option<u64>,
    state: JsValue,
    /// In view order.
    entries: Vec<(EntryView, JsValue)>,
}

pub(crate) struct Client {
    endpoint: Endpoint,
    history_limit: u32,
    conv: RefCell<Conversation>,
    storage: Storage,
    channel: RefCell<Option<Channel>>,
    stream: RefCell<Option<Stream>>,
    globals: RefCell<Vec<GlobalListener>>,
    subscribers: RefCell<Vec<(u32, Function)>>,
    next_subscriber: Cell<u32>,
    rendered: RefCell<Rendered>,
    notified: Cell<Option<u64>>,
    notify_scheduled: Cell<bool>,
    save_scheduled: Cell<bool>,
    /// Wakes the connection loop when the stream has something to say.
    signal_waker: Waker,
    signal: Cell<Option<LoopSignal>>,
    /// Wakes every backoff when the network may be back (online, stream open, a new send).
    net_waker: Waker,
    closed: Cell<bool>,
    /// client_message_ids this tab (or its earlier page load) created: the ones it posts when the
    /// browser has no Web Locks to share the outbox safely.
    own: RefCell<Keys>,
    outbox_running: Cell<bool>,
    outbox_again: Cell<bool>,
    /// The browser's resume position on the current stream.
    last_event_id: RefCell<Option<String>>,
    stream_attempt: Cell<u32>,
    ever_live: Cell<bool>,
    /// The current stream delivered a snapshot or an event (it is not a resync loop).
    delivered: Cell<bool>,
}

impl Client {
    pub(crate) async fn connect(opts: Options) -> Rc<Client> {
        let storage = if opts.persistent {
            match Storage::indexed_db(&opts.base_url, &opts.session_id).await {
                Some(s) => s,
                None => {
                    console::warn_1(
                        &"turnstream: IndexedDB unavailable, keeping the session in memory".into(),
                    );
                    Storage::Memory
                }
            }
        } else {
            Storage::Memory
        };
        let client = Rc::new(Client {
            endpoint: Endpoint {
                base_url: opts.base_url,
                session_id: opts.session_id.clone(),
            },
            history_limit: opts.history_limit,
            conv: RefCell::new(Conversation::new(opts.session_id)),
            storage,
            channel: RefCell::new(None),
            stream: RefCell::new(None),
            globals: RefCell::new(Vec::new()),
            subscribers: RefCell::new(Vec::new()),
            next_subscriber: Cell::new(0),
            rendered: RefCell::new(Rendered::default()),
            notified: Cell::new(None),
            notify_scheduled: Cell::new(false),
            save_scheduled: Cell::new(false),
            signal_waker: Waker::default(),
            signal: Cell::new(None),
            net_waker: Waker::default(),
            closed: Cell::new(false),
            own: RefCell::new(Keys::new()),
            outbox_running: Cell::new(false),
            outbox_again: Cell::new(false),
            last_event_id: RefCell::new(None),
            stream_attempt: Cell::new(0),
            ever_live: Cell::new(false),
            delivered: Cell::new(false),
        });

        // The cache first: the page shows the last known view before any network round trip.
        match client.storage.load().await {
            Ok(Some(rec)) => {
                client.own.borrow_mut().extend(
                    rec.users
                        .iter()
                        .filter(|u| u.status == crate::reducer::entry::UserStatus::Sending)
                        .map(|u| u.key.clone()),
                );
                client.update(|c| c.apply_cache(&rec));
            }
            Ok(None) => {}
            Err(e) => warn("could not read the cache", &e),
        }
        if !env::online() {
            client.update(|c| c.set_connection(Connection::Offline));
        }
        client.open_channel();
        client.listen_to_network();
        spawn_local(client.clone().run());
        client.check_turns();
        client.kick_outbox();
        client
    }

    // ----- the view -----

    fn update(self: &Rc<Self>, f: impl FnOnce(&mut Conversation) -> bool) -> bool {
        let changed = f(&mut self.conv.borrow_mut());
        if changed {
            self.changed();
        }
        changed
    }

    fn set_connection(self: &Rc<Self>, c: Connection) {
        if !self.closed.get() {
            self.update(|conv| conv.set_connection(c));
        }
    }

    fn changed(self: &Rc<Self>) {
        // Subscribers hear once per task, however many events that task applied.
        if !self.notify_scheduled.replace(true) {
            let me = self.clone();
            spawn_local(async move {
                me.notify_scheduled.set(false);
                me.notify();
            });
        }
        self.schedule_save();
    }

    fn notify(&self) {
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

    // ----- history and stream -----

    /// History, then the stream from its cursor; again after a resync; until closed.
    async fn run(self: Rc<Self>) {
        let mut attempt = 0u32;
        // Resyncs in a row whose stream delivered nothing: a server that cannot serve even a
        // fresh cursor must not be hammered.
        let mut barren_resyncs = 0u32;
        while !self.closed.get() {
            if barren_resyncs > 1 {
                self.net_waker
                    .sleep(backoff_ms(barren_resyncs - 2, env::random()))
                    .await;
            }
            let cursor = match self.endpoint.history(self.history_limit).await {
                Ok((history, cursor)) => {
                    attempt = 0;
                    self.update(|c| c.apply_history(&history));
                    self.check_turns();
                    cursor
                }
                Err(e) => {
                    if attempt == 0 {
                        warn("could not load history, retrying", &e.message());
                    }
                    self.set_connection(self.unreachable());
                    self.net_waker
                        .sleep(backoff_ms(attempt, env::random()))
                        .await;
                    attempt = attempt.saturating_add(1);
                    continue;
                }
            };
            match self.stream_from(cursor).await {
                Exit::Resync => {
                    barren_resyncs = if self.delivered.get() {
                        1
                    } else {
                        barren_resyncs.saturating_add(1)
                    };
                    self.update(|c| c.mark_gap() | c.set_connection(Connection::Resyncing));
                }
                Exit::Closed => return,
            }
        }
    }

    /// Keeps a stream open from `cursor` (reopening it from the last event seen when the
    /// browser gives up) until the server asks for a resync or the client closes.
    async fn stream_from(self: &Rc<Self>, cursor: String) -> Exit {
        *self.last_event_id.borrow_mut() = None;
        self.stream_attempt.set(0);
        self.delivered.set(false);
        loop {
            if self.closed.get() {
                return Exit::Closed;
            }
            let from = self
                .last_event_id
                .borrow()
                .clone()
                .unwrap_or_else(|| cursor.clone());
            let weak: Weak<Client> = Rc::downgrade(self);
            let handler: Rc<dyn Fn(Signal)> = Rc::new(move |s| {
                if let Some(me) = weak.upgrade() {
                    me.on_stream(s);
                }
            });
            self.signal.set(None);
            match Stream::open(&self.endpoint.stream_url(&from), handler) {
                Ok(s) => *self.stream.borrow_mut() = Some(s),
                Err(e) => {
                    console::error_2(&"turnstream: cannot open the stream".into(), &e);
                    self.signal.set(Some(LoopSignal::Failed));
                }
            }
            let signal = loop {
                if self.closed.get() {
                    return Exit::Closed;
                }
                if let Some(s) = self.signal.take() {
                    break s;
                }
                self.signal_waker.sleep(60_000).await;
            };
            // Dropping the stream closes it and detaches its listeners.
            self.stream.borrow_mut().take();
            match signal {
                LoopSignal::Resync => return Exit::Resync,
                LoopSignal::Failed => {
                    self.set_connection(self.unreachable());
                    let attempt = self.stream_attempt.get();
                    self.stream_attempt.set(attempt.saturating_add(1));
                    self.net_waker
                        .sleep(backoff_ms(attempt, env::random()))
                        .await;
                }
            }
        }
    }

    fn on_stream(self: &Rc<Self>, signal: Signal) {
        if self.closed.get() {
            return;
        }
        match signal {
            Signal::Open => {
                self.ever_live.set(true);
                self.stream_attempt.set(0);
                self.set_connection(Connection::Live);
                // The server is reachable again: whatever waits for it should try now.
                self.net_waker.wake_all();
                self.kick_outbox();
                self.check_turns();
            }
            Signal::Snapshot(s) => {
                self.delivered.set(true);
                self.update(|c| c.apply_snapshot(&s));
                self.check_turns();
            }
            Signal::Event(e, last) => {
                self.delivered.set(true);
                *self.last_event_id.borrow_mut() = Some(last);
                self.update(|c| c.apply_event(&e));
            }
            Signal::Resync(r) => {
                warn(
                    "the server asked for a history resync",
                    codec::resync_reason_name(r.reason),
                );
                self.signal.set(Some(LoopSignal::Resync));
                self.signal_waker.wake_all();
            }
            Signal::Retrying => self.set_connection(self.unreachable()),
            Signal::Failed => {
                self.signal.set(Some(LoopSignal::Failed));
                self.signal_waker.wake_all();
            }
            Signal::Garbled(kind) => warn("ignored a frame that did not parse", kind),
        }
    }

    /// The state to show while the server cannot be reached.
    fn unreachable(&self) -> Connection {
        if !env::online() {
            Connection::Offline
        } else if self.conv.borrow().connection() == Connection::Resyncing {
            Connection::Resyncing
        } else if self.ever_live.get() {
            Connection::Reconnecting
        } else {
            Connection::Connecting
        }
    }

    fn listen_to_network(self: &Rc<Self>) {
        let weak = Rc::downgrade(self);
        let online = GlobalListener::new("online", move |_| {
            if let Some(me) = weak.upgrade() {
                let open = me.stream.borrow().as_ref().is_some_and(Stream::is_open);
                me.set_connection(if open {
                    Connection::Live
                } else {
                    me.unreachable()
                });
                me.net_waker.wake_all();
                me.kick_outbox();
                me.check_turns();
            }
        });
        let weak = Rc::downgrade(self);
        let offline = GlobalListener::new("offline", move |_| {
            if let Some(me) = weak.upgrade() {
                me.set_connection(Connection::Offline);
                // A browser that lost its network can keep a dead socket "open" for minutes:
                // close the stream now, and resume from the last event seen when it is back.
                if me.stream.borrow().is_some() {
                    me.signal.set(Some(LoopSignal::Failed));
                    me.signal_waker.wake_all();
                }
            }
        });
        self.globals.borrow_mut().extend([online, offline]);
    }

    // ----- turn-status checks -----

    /// Asks the server about every turn the journal left open in our view (cached mid-turn,
    /// or missing from a snapshot). Failures are handed out again at the next trigger.
    fn check_turns(self: &Rc<Self>) {
        if self.closed.get() {
            return;
        }
        let turns = self.conv.borrow_mut().take_turns_to_check();
        for turn_id in turns {
            let me = self.clone();
            spawn_local(async move {
                match me.endpoint.turn(&turn_id).await {
                    Ok(info) => {
                        me.update(|c| c.apply_turn_info(&turn_id, info.as_ref()));
                        me.broadcast(&TabMessage::Recovered {
                            session_id: me.endpoint.session_id.clone(),
                            turn_id,
                            info: info.map(Box::new),
                        });
                    }
                    Err(_) => me.conv.borrow_mut().check_failed(&turn_id),
                }
            });
        }
    }

    // ----- the outbox -----

    pub(crate) async fn send(self: &Rc<Self>, content: String) -> String {
        let client_message_id = env::new_client_message_id();
        let created_at = env::now_ms();
        self.own.borrow_mut().add(client_message_id.clone());
        self.update(|c| c.send_local(&client_message_id, &content, created_at));
        self.broadcast(&TabMessage::Optimistic {
            session_id: self.endpoint.session_id.clone(),
            client_message_id: client_message_id.clone(),
            content,
            created_at,
        });
        // On disk before the first attempt: a reload from here on still has it to post.
        self.save_now().await;
        self.kick_outbox();
        client_message_id
    }

    fn kick_outbox(self: &Rc<Self>) {
        if self.closed.get() {
            return;
        }
        if self.outbox_running.replace(true) {
            self.outbox_again.set(true);
            self.net_waker.wake_all();
            return;
        }
        let me = self.clone();
        spawn_local(async move {
            loop {
                me.outbox_again.set(false);
                let lock = [
                    "turnstream-outbox:",
                    &me.endpoint.base_url,
                    ":",
                    &me.endpoint.session_id,
                ]
                .concat();
                // One tab posts at a time (the client_message_id makes a double post harmless,
                // but not free). Without Web Locks, each tab posts only its own messages.
                if !env::with_lock(&lock, me.clone().drain_outbox(true)).await {
                    me.clone().drain_outbox(false).await;
                }
                if !me.outbox_again.get() || me.closed.get() {
                    break;
                }
            }
            me.outbox_running.set(false);
        });
    }

    async fn drain_outbox(self: Rc<Self>, everyone: bool) {
        let mut attempt = 0u32;
        loop {
            if self.closed.get() {
                return;
            }
            let next = {
                let own = self.own.borrow();
                self.conv
                    .borrow()
                    .next_to_post(|id| everyone || own.contains(id))
            };
            let Some((client_message_id, content)) = next else {
                return;
            };
            let wait = match self
                .endpoint
                .post_message(&client_message_id, &content)
                .await
            {
                Ok(mut resp) => {
                    resp.client_message_id = Some(client_message_id.clone());
                    self.accepted(&resp);
                    None
                }
                Err(HttpError::Status {
                    status,
                    error,
                    retry_after,
                }) => match classify_post(status) {
                    PostOutcome::Rejected => {
                        self.rejected(&client_message_id, error);
                        None
                    }
                    PostOutcome::Conflict => {
                        self.conflict(&client_message_id, error).await;
                        None
                    }
                    PostOutcome::Accepted | PostOutcome::Retry => {
                        Some(retry_after.map(|s| s.saturating_mul(1000)))
                    }
                },
                Err(HttpError::Network(_)) | Err(HttpError::Decode) => Some(None),
            };
            match wait {
                None => attempt = 0,
                Some(after) => {
                    let ms = after.unwrap_or_else(|| backoff_ms(attempt, env::random()));
                    attempt = attempt.saturating_add(1);
                    self.net_waker.sleep(ms).await;
                }
            }
        }
    }

    fn accepted(self: &Rc<Self>, resp: &PostMessageResponse) {
        self.update(|c| c.apply_post_response(resp));
        self.broadcast(&TabMessage::Posted {
            session_id: self.endpoint.session_id.clone(),
            response: resp.clone(),
        });
    }

    fn rejected(self: &Rc<Self>, client_message_id: &str, error: ErrorDetail) {
        self.update(|c| c.reject(client_message_id, &error));
        self.broadcast(&TabMessage::Rejected {
            session_id: self.endpoint.session_id.clone(),
            client_message_id: client_message_id.to_owned(),
            error,
        });
    }

    /// 409: the server holds a message under this id. If history shows it (same message, say
    /// posted by a sibling), that settles it; otherwise the id is taken and ours cannot be sent.
    async fn conflict(self: &Rc<Self>, client_message_id: &str, error: ErrorDetail) {
        if let Ok((history, _)) = self.endpoint.history(self.history_limit).await {
            self.update(|c| c.apply_history(&history));
        }
        if self.conv.borrow().is_sending(client_message_id) {
            self.rejected(client_message_id, error);
        }
    }

    // ----- tabs and storage -----

    fn open_channel(self: &Rc<Self>) {
        let weak = Rc::downgrade(self);
        let on: Rc<dyn Fn(TabMessage)> = Rc::new(move |msg| {
            if let Some(me) = weak.upgrade() {
                if me.closed.get() {
                    return;
                }
                me.update(|c| msg.apply(c));
                if matches!(msg, TabMessage::Optimistic { .. }) {
                    // If the sibling dies before posting it, someone must: the lock decides who.
                    me.kick_outbox();
                }
            }
        });
        *self.channel.borrow_mut() =
            Channel::open(&self.endpoint.base_url, &self.endpoint.session_id, on);
    }

    fn broadcast(&self, msg: &TabMessage) {
        if let Some(ch) = self.channel.borrow().as_ref() {
            ch.post(msg);
        }
    }

    fn schedule_save(self: &Rc<Self>) {
        if !self.storage.is_persistent() || self.save_scheduled.replace(true) {
            return;
        }
        let me = self.clone();
        spawn_local(async move {
            Waker::default().sleep(SAVE_EVERY_MS).await;
            me.save_scheduled.set(false);
            me.save_now().await;
        });
    }

    async fn save_now(&self) {
        if !self.storage.is_persistent() {
            return;
        }
        let conv = self.conv.borrow().clone();
        if let Err(e) = self.storage.save(&conv).await {
            warn("could not write the cache", &e);
        }
    }

    pub(crate) async fn cancel(&self, turn_id: &str) -> Result<JsValue, String> {
        let resp = self
            .endpoint
            .cancel(turn_id)
            .await
            .map_err(|e| e.message())?;
        let out = Object::new();
        set(&out, "turnId", &resp.turn_id.as_str().into());
        set(&out, "state", &codec::turn_state_name(resp.state).into());
        Ok(out.into())
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.closed.get()
    }

    /// Stops everything synchronously; what is unsaved is saved by [`Client::close`].
    pub(crate) fn shutdown(self: &Rc<Self>) {
        if self.closed.get() {
            return;
        }
        self.update(|c| c.set_connection(Connection::Closed));
        self.closed.set(true);
        self.stream.borrow_mut().take();
        self.channel.borrow_mut().take();
        self.globals.borrow_mut().clear();
        self.signal_waker.wake_all();
        self.net_waker.wake_all();
        // Tell subscribers now: after close nothing else will.
        self.notify();
    }

    pub(crate) async fn close(self: &Rc<Self>) {
        self.shutdown();
        self.save_now().await;
    }
}

fn set(target: &Object, key: &str, value: &JsValue) {
    let _ = Reflect::set(target, &JsValue::from_str(key), value);
}

fn warn(what: &str, detail: &str) {
    console::warn_1(&["turnstream: ", what, ": ", detail].concat().into());
}

fn opt_str(v: &Option<String>) -> JsValue {
    v.as_deref().map_or(JsValue::NULL, JsValue::from_str)
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
    let error = match &e.error {
        Some(err) => {
            let js = Object::new();
            set(&js, "code", &err.code.as_str().into());
            set(&js, "message", &err.message.as_str().into());
            js.into()
        }
        None => JsValue::NULL,
    };
    set(&o, "error", &error);
    // Unix milliseconds: well inside what a JS number holds exactly.
    let created_at = e
        .created_at
        .map_or(JsValue::NULL, |ms| JsValue::from_f64(ms as f64));
    set(&o, "createdAt", &created_at);
    o
}
