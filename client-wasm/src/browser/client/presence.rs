//! Presence (contract v1.3) for one session's view: `state.presence` from the hub's rosters,
//! `setPresence` (handed to the hub, whose leader merges every tab's keys into the browser's
//! state), and typing: `setTyping` sends `typing: true` at most every [`TYPING_EVERY_MS`] while
//! it is called, and `typing: false` once it was not called for [`TYPING_IDLE_MS`], after a
//! send, and when the page goes away (`pagehide`, with `fetch`'s `keepalive`).

use std::rc::Rc;

use js_sys::Object;

use super::Client;
use crate::browser::env::{self, GlobalListener};
use crate::browser::json;
use crate::browser::spawn_local;

/// `typing: true` is sent again at most this often while `setTyping` is called.
pub(crate) const TYPING_EVERY_MS: f64 = 2000.0;
/// `typing: false` once `setTyping` was not called for this long.
pub(crate) const TYPING_IDLE_MS: f64 = 3000.0;

const TYPING: &str = r#"{"typing":true}"#;
const NOT_TYPING: &str = r#"{"typing":false}"#;

impl Client {
    /// The hub's roster for this session: `state.presence` as JSON, and `presenceCount`.
    pub(super) fn show_presence(self: &Rc<Self>, members: &str, count: i64) {
        let list = json::parse(members).unwrap_or_else(|| js_sys::Array::new().into());
        for m in js_sys::Array::from(&list).iter() {
            Object::freeze(&m.into());
        }
        Object::freeze(&list.clone().into());
        *self.presence.borrow_mut() = (list, count);
        self.presence_rev.set(self.presence_rev.get() + 1);
        self.notify_soon();
    }

    /// Sets the keys of `patch` (a JSON object's text) in the browser's presence state.
    pub(crate) fn set_presence(&self, patch: &str) {
        if let Some(m) = self.membership.borrow().as_ref() {
            m.set_presence(&self.endpoint.session_id, patch);
        }
    }

    /// The user is typing (called on every keystroke).
    pub(crate) fn set_typing(self: &Rc<Self>) {
        let now = env::now_ms() as f64;
        self.typing_seen.set(now);
        let sent = self.typing_sent.get();
        if sent == 0.0 || now - sent >= TYPING_EVERY_MS {
            self.typing_sent.set(now);
            self.set_presence(TYPING);
        }
        if self.typing_timer.replace(true) {
            return;
        }
        let me = self.clone();
        spawn_local(async move {
            loop {
                let idle = env::now_ms() as f64 - me.typing_seen.get();
                if idle >= TYPING_IDLE_MS || me.closed.get() {
                    break;
                }
                me.net_waker.sleep((TYPING_IDLE_MS - idle) as u32 + 1).await;
            }
            me.typing_timer.set(false);
            me.stop_typing();
        });
    }

    /// Typing ends (idle, a send): `typing: false` if `typing: true` was sent.
    pub(crate) fn stop_typing(&self) {
        if self.typing_sent.replace(0.0) != 0.0 && !self.closed.get() {
            self.set_presence(NOT_TYPING);
        }
    }

    /// On `pagehide`: a typing page tells the others it stopped, with a request that outlives it.
    pub(super) fn stop_typing_on_leave(self: &Rc<Self>) {
        let weak = Rc::downgrade(self);
        let hide = GlobalListener::new("pagehide", move |_| {
            if let Some(me) = weak.upgrade() {
                if me.typing_sent.replace(0.0) != 0.0 {
                    if let Some(m) = me.membership.borrow().as_ref() {
                        m.leave_presence(&me.endpoint.session_id, NOT_TYPING);
                    }
                }
            }
        });
        self.globals.borrow_mut().push(hide);
    }
}
