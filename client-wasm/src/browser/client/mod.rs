//! The client behind `ChatClient`: owns one session's [`Conversation`] and runs the loops around
//! it, one job per file:
//! - `connection`: history, then the stream (reconnect, resync), network events, turn checks;
//! - `outbox`: posting what the user sent, with retries;
//! - `older`: paging back through history;
//! - `cache`: writing the view to storage;
//! - `siblings`: what this session's other tabs are told;
//! - `render`: the state object handed to JS, and its subscribers.

use crate::browser::On;
use std::cell::{Cell, RefCell};
use std::rc::Rc;

use crate::browser::spawn_local;
use js_sys::{Function, Object, Reflect};
use wasm_bindgen::prelude::*;
use web_sys::console;

use super::auth::Auth;
use super::channel::Channel;
use super::env::{self, GlobalListener, Waker};
use super::http::Endpoint;
use super::hub::Membership;
use super::storage::Storage;
use super::stream::Signal;
use crate::codec;
use crate::reducer::keyed::Keys;
use crate::reducer::{Connection, Conversation};
pub(crate) use answers::coded_error;
use connection::LoopSignal;
use render::Rendered;

mod answers;
mod branches;
mod cache;
mod connection;
mod older;
mod outbox;
mod presence;
mod render;
mod siblings;

pub(crate) struct Options {
    pub(crate) get_token: Option<Function>,
    pub(crate) base_url: String,
    pub(crate) session_id: String,
    pub(crate) persistent: bool,
    pub(crate) history_limit: u32,
}

pub(crate) struct Client {
    endpoint: Endpoint,
    history_limit: u32,
    conv: RefCell<Conversation>,
    storage: Storage,
    channel: RefCell<Option<Channel>>,
    /// This session's place in the tab's stream hub.
    membership: RefCell<Option<Membership>>,
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
    ever_live: Cell<bool>,
    /// The current stream delivered a snapshot or an event (it is not a resync loop).
    delivered: Cell<bool>,
    /// `respond` promises still waiting for the server's verdict.
    waiters: RefCell<Vec<answers::Waiter>>,
    /// `state.presence` (frozen) and `state.presenceCount` (contract v1.3); never cached.
    presence: RefCell<(JsValue, i64)>,
    /// Bumped on every roster change: part of the state's revision.
    presence_rev: Cell<u64>,
    /// When `typing: true` was last sent (0: not typing), and `setTyping` last called.
    typing_sent: Cell<f64>,
    typing_seen: Cell<f64>,
    typing_timer: Cell<bool>,
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
                auth: opts.get_token.map(|f| Rc::new(Auth::new(f))),
            },
            history_limit: opts.history_limit,
            conv: RefCell::new(Conversation::new(opts.session_id)),
            storage,
            channel: RefCell::new(None),
            membership: RefCell::new(None),
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
            ever_live: Cell::new(false),
            delivered: Cell::new(false),
            waiters: RefCell::new(Vec::new()),
            presence: RefCell::new((js_sys::Array::new().into(), 0)),
            presence_rev: Cell::new(0),
            typing_sent: Cell::new(0.0),
            typing_seen: Cell::new(0.0),
            typing_timer: Cell::new(false),
        });

        // The cache first: the page shows the last known view before any network round trip.
        match client.storage.load().await {
            Ok(records) => {
                for rec in records {
                    client.own.borrow_mut().extend(
                        rec.users
                            .iter()
                            .filter(|u| u.status == crate::reducer::entry::UserStatus::Sending)
                            .map(|u| u.key.clone()),
                    );
                    client.update(&mut |c: &mut Conversation| c.apply_cache(&rec));
                }
            }
            Err(e) => warn("could not read the cache", &e),
        }
        if !env::online() {
            client.update(&mut |c: &mut Conversation| c.set_connection(Connection::Offline));
        }
        client.open_channel();
        let weak = Rc::downgrade(&client);
        let on: Rc<dyn On<Signal>> = Rc::new(move |s: Signal| {
            if let Some(me) = weak.upgrade() {
                me.on_stream(s);
            }
        });
        *client.membership.borrow_mut() = Some(Membership::join(
            &client.endpoint.base_url,
            &client.endpoint.session_id,
            on,
            client.endpoint.auth.clone(),
        ));
        client.listen_to_network();
        client.save_on_leave();
        client.stop_typing_on_leave();
        spawn_local(client.clone().run());
        client.check_turns();
        client.kick_outbox();
        client
    }
    // ----- the view -----

    pub(super) fn update(self: &Rc<Self>, f: &mut dyn Change) -> bool {
        let changed = f.apply(&mut self.conv.borrow_mut());
        if changed {
            self.changed();
        }
        changed
    }

    pub(super) fn set_connection(self: &Rc<Self>, c: Connection) {
        if !self.closed.get() {
            self.update(&mut |conv: &mut Conversation| conv.set_connection(c));
        }
    }

    pub(super) fn changed(self: &Rc<Self>) {
        self.notify_soon();
        self.schedule_save();
    }

    /// Subscribers hear once per task, however many changes that task made.
    pub(super) fn notify_soon(self: &Rc<Self>) {
        if !self.notify_scheduled.replace(true) {
            let me = self.clone();
            spawn_local(async move {
                me.notify_scheduled.set(false);
                me.notify();
            });
        }
    }

    /// The state's revision: the view's, and the presence roster's.
    pub(super) fn revision(&self) -> u64 {
        self.conv.borrow().revision() + self.presence_rev.get()
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

    /// The turn a request shown belongs to, and its kind.
    pub(crate) fn find_request(
        &self,
        request_id: &str,
    ) -> Option<(String, turnstream_protocol::RequestKind)> {
        self.conv.borrow().find_request(request_id)
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.closed.get()
    }

    /// Stops everything synchronously; what is unsaved is saved by [`Client::close`].
    pub(crate) fn shutdown(self: &Rc<Self>) {
        if self.closed.get() {
            return;
        }
        self.update(&mut |c: &mut Conversation| c.set_connection(Connection::Closed));
        self.closed.set(true);
        self.membership.borrow_mut().take();
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

pub(super) fn set(target: &Object, key: &str, value: &JsValue) {
    let _ = Reflect::set(target, &JsValue::from_str(key), value);
}

pub(super) fn warn(what: &str, detail: &str) {
    console::warn_1(&crate::cat(&["turnstream: ", what, ": ", detail]).into());
}

pub(super) fn opt_str(v: &Option<String>) -> JsValue {
    v.as_deref().map_or(JsValue::NULL, JsValue::from_str)
}

/// A change to the conversation, for [`Client::update`]: a closure, whose parameter the call
/// names (`|c: &mut Conversation| ...`). A trait of its own rather than `dyn FnMut`, whose
/// vtable also holds `FnOnce::call_once`: a second copy of each closure's body, never called.
pub(super) trait Change {
    fn apply(&mut self, c: &mut Conversation) -> bool;
}

impl<F: FnMut(&mut Conversation) -> bool> Change for F {
    fn apply(&mut self, c: &mut Conversation) -> bool {
        self(c)
    }
}
