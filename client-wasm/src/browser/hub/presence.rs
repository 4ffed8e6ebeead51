//! The hub's presence (contract v1.3): the rosters of the sessions its tabs show, from the
//! leader's streams (`presence=1&client=<id>`, one member for the whole browser) and relayed to
//! every tab; and the browser's presence state, merged in one place, the leader, which posts it.
//!
//! A tab sets state keys (`setPresence`, `setTyping`); the leader merges them into the browser's
//! state for the session (the last it posted, else its member's state in the roster) and posts
//! the whole: one update in flight per session, the latest next. A `404 not_present` (no stream
//! of the member yet) waits for the roster; a `429` is retried after its `Retry-After`. When a
//! fresh roster shows the member without the state it was last given (it came back after its
//! grace), the leader posts that state again.

use std::rc::Rc;

use js_sys::{Object, Reflect};
use wasm_bindgen::{JsCast, JsValue};

use super::{Call, Hub};
use crate::browser::http::{enc, Endpoint, HttpError};
use crate::browser::json;
use crate::browser::spawn_local;
use crate::browser::stream::Signal;
use crate::codec::presence::{
    members_json, presence, presence_diff, presence_json, presence_request_json,
};
use crate::relay::Relay;

/// The wait before retrying an update the server found too frequent, without `Retry-After`.
const RETRY_MS: u32 = 200;

/// The browser's presence state in one session, as the leader posts it.
pub(crate) struct Post {
    session: String,
    /// The state as a JSON object's text.
    state: String,
    /// An update is in flight.
    busy: bool,
    /// `state` is not posted yet.
    dirty: bool,
}

/// `base` with the keys of `patch` (JSON objects' texts) set, as JSON text.
fn merged(base: &str, patch: &str) -> String {
    let out = Object::new();
    for text in [base, patch] {
        if let Some(v) = json::parse(text).filter(JsValue::is_object) {
            Object::assign(&out, v.unchecked_ref());
        }
    }
    crate::codec::Value::json(&JsValue::from(out))
}

impl Hub {
    /// A presence frame, from our stream or relayed by the leader.
    pub(super) fn presence_frame(&self, kind: &str, data: &str) {
        let session = if kind == "presence" {
            let Some(r) = json::read(data, presence) else {
                return;
            };
            let session = r.session_id.clone();
            let fresh = self.self_state_in(&r);
            let old = self.rosters.borrow_mut().roster(r);
            if self.leading.get() {
                self.repost(
                    &session,
                    old.as_ref().and_then(|o| self.self_state_in(o)),
                    fresh,
                );
            }
            session
        } else {
            let Some(d) = json::read(data, presence_diff) else {
                return;
            };
            if !self.rosters.borrow_mut().diff(&d) {
                return;
            }
            // What the server says of our member is the browser's state now (an update of
            // ours arriving, or the typing flag cleared by its time-to-live).
            if let Some(m) = d.joins.iter().find(|m| m.member_id == self.client) {
                for p in self.posts.borrow_mut().iter_mut() {
                    if p.session == d.session_id && !p.busy && !p.dirty {
                        p.state = m.state.as_str().to_owned();
                    }
                }
            }
            d.session_id
        };
        self.show_presence(&session);
    }

    /// Our member's state in a roster.
    fn self_state_in(&self, r: &crate::presence::Roster) -> Option<String> {
        r.members
            .iter()
            .find(|m| m.member_id == self.client)
            .map(|m| m.state.as_str().to_owned())
    }

    /// A fresh roster reached the leader: post the browser's state again if the member lost it.
    fn repost(&self, session: &str, before: Option<String>, now: Option<String>) {
        let again = {
            let mut posts = self.posts.borrow_mut();
            match posts.iter_mut().find(|p| p.session == session) {
                Some(p) => {
                    p.dirty |= now.as_deref() != Some(p.state.as_str());
                    p.dirty
                }
                None => match before {
                    Some(b) if b != "{}" && now.as_deref() == Some("{}") => {
                        posts.push(Post {
                            session: session.to_owned(),
                            state: b,
                            busy: false,
                            dirty: true,
                        });
                        true
                    }
                    _ => false,
                },
            }
        };
        if again {
            self.kick_post(session);
        }
    }

    /// Tells the views of `session` its roster.
    pub(super) fn show_presence(&self, session: &str) {
        let Some((text, count)) = self
            .rosters
            .borrow()
            .get(session)
            .map(|r| (Rc::<str>::from(members_json(r, &self.client)), r.count))
        else {
            return;
        };
        let calls: Vec<Call> = self
            .members
            .borrow()
            .iter()
            .filter(|m| m.session == session)
            .map(|m| (m.on.clone(), Signal::Presence(text.clone(), count)))
            .collect();
        for (on, s) in calls {
            on.on(s);
        }
    }

    /// The leader hands a tab the rosters of `sessions` it knows (the tab joined after them).
    pub(super) fn send_rosters(&self, sessions: &[String]) {
        for s in sessions {
            let data = match self.rosters.borrow().get(s) {
                Some(r) => presence_json(r),
                None => continue,
            };
            self.post(&Relay::Frame {
                sid: String::new(),
                kind: "presence".to_owned(),
                data,
                prev: None,
                last: String::new(),
            });
        }
    }

    /// A tab of this browser sets the keys of `patch` (a JSON object's text) in `session`.
    pub(crate) fn set_presence(&self, session: &str, patch: &str) {
        if self.leading.get() {
            self.merge_presence(session, patch);
        } else {
            self.post(&Relay::Presence {
                session: session.to_owned(),
                state: patch.to_owned(),
            });
        }
    }

    /// The browser's state in `session` with `patch` set: what a leaving page sends itself.
    pub(crate) fn presence_with(&self, session: &str, patch: &str) -> String {
        let base = self
            .posts
            .borrow()
            .iter()
            .find(|p| p.session == session)
            .map(|p| p.state.clone())
            .or_else(|| {
                self.rosters
                    .borrow()
                    .get(session)
                    .and_then(|r| self.self_state_in(r))
            })
            .unwrap_or_default();
        merged(&base, patch)
    }

    pub(super) fn merge_presence(&self, session: &str, patch: &str) {
        let state = self.presence_with(session, patch);
        {
            let mut posts = self.posts.borrow_mut();
            match posts.iter_mut().find(|p| p.session == session) {
                Some(p) => {
                    p.state = state;
                    p.dirty = true;
                }
                None => posts.push(Post {
                    session: session.to_owned(),
                    state,
                    busy: false,
                    dirty: true,
                }),
            }
        }
        self.kick_post(session);
    }

    /// Posts the session's state unless an update is in flight (it posts the latest after).
    fn kick_post(&self, session: &str) {
        {
            let mut posts = self.posts.borrow_mut();
            let Some(p) = posts.iter_mut().find(|p| p.session == session) else {
                return;
            };
            if p.busy || !p.dirty {
                return;
            }
            p.busy = true;
        }
        let weak = self.me.clone();
        let session = session.to_owned();
        spawn_local(async move {
            loop {
                let Some(hub) = weak.upgrade() else { return };
                let state = {
                    let mut posts = hub.posts.borrow_mut();
                    let Some(p) = posts.iter_mut().find(|p| p.session == session) else {
                        return;
                    };
                    if !p.dirty || hub.closed.get() {
                        p.busy = false;
                        return;
                    }
                    p.dirty = false;
                    p.state.clone()
                };
                let endpoint = Endpoint {
                    base_url: hub.base_url.clone(),
                    session_id: session.clone(),
                    auth: hub.auth.borrow().clone(),
                };
                let body = presence_request_json(&hub.client, &state);
                let waker = hub.waker.clone();
                drop(hub);
                let url = endpoint.url(&["/api/sessions/", &enc(&session), "/presence"]);
                let wait = match endpoint.send("POST", &url, Some(&body)).await {
                    Err(HttpError::Status(r)) if r.status == 429 => {
                        Some(r.retry_after.map_or(RETRY_MS, |s| s.saturating_mul(1000)))
                    }
                    // Not present yet, or unreachable: the next fresh roster posts it.
                    _ => None,
                };
                if let Some(ms) = wait {
                    waker.sleep(ms).await;
                    if let Some(hub) = weak.upgrade() {
                        for p in hub.posts.borrow_mut().iter_mut() {
                            if p.session == session {
                                p.dirty = true;
                            }
                        }
                    }
                }
            }
        });
    }
}

/// `fetch(url, {keepalive: true})` of the state a leaving page's member ends with: it outlives
/// the page (its answer is never read).
pub(crate) fn beacon(base_url: &str, session: &str, token: Option<String>, body: &str) {
    let global = js_sys::global();
    let Some(fetch) = Reflect::get(&global, &"fetch".into())
        .ok()
        .and_then(|f| f.dyn_into::<js_sys::Function>().ok())
    else {
        return;
    };
    let init = Object::new();
    let headers = Object::new();
    let set = |o: &Object, k: &str, v: &JsValue| {
        let _ = Reflect::set(o, &k.into(), v);
    };
    set(&init, "method", &"POST".into());
    set(&init, "keepalive", &true.into());
    set(&headers, "Content-Type", &"application/json".into());
    if let Some(t) = token {
        set(
            &headers,
            "Authorization",
            &crate::cat(&["Bearer ", &t]).into(),
        );
    }
    set(&init, "headers", &headers);
    set(&init, "body", &body.into());
    let url = crate::cat(&[base_url, "/api/sessions/", &enc(session), "/presence"]);
    let _ = fetch.call2(&global, &url.into(), &init);
}
