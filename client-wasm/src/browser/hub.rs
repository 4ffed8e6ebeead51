//! One stream per browser. Every tab of an origin runs a hub; the tab holding the leader lock
//! (see [`super::leader`]) holds the only `EventSource`s, on the multiplexed stream, for the union
//! of the sessions every tab shows (at most 32 per stream), and relays each frame over the relay
//! channel (see [`super::relay`]); the others deliver what it relays. Without Web Locks or
//! BroadcastChannel each tab leads alone.
//!
//! A tab's session is *covered* by a stream while its view holds everything the stream delivered
//! (see [`Follow`]): every relayed frame says the stream's position before it, and every
//! heartbeat how far each stream has gone, so a tab that joins at any moment, or missed a frame,
//! knows it at once. A session that is not covered asks the leader to reopen the stream from the
//! lowest position any tab needs (repeats are harmless: the reducer folds an event once). A
//! session is `live` only while a covering stream is open and, in a follower, the leader was
//! heard from lately (see [`QUIET_MS`]).

use crate::browser::On;
use std::cell::{Cell, RefCell};
use std::rc::{Rc, Weak};

use crate::browser::spawn_local;
use js_sys::Function;
use web_sys::console;

use super::auth::Auth;
use super::env::{self, GlobalListener, Waker};
use super::leader;
use super::relay::RelayChannel;
use super::stream::{Frame, Signal, Stream};
use crate::relay::{Fit, Follow, Relay, StreamState, Want};
use crate::retry::backoff_ms;
use crate::streams::{self, Held, Wanted};

mod presence;

/// The leader's heartbeat; followers announce themselves every [`ANNOUNCE_EVERY`] ticks.
const TICK_MS: u32 = 500;
const ANNOUNCE_EVERY: u32 = 4;
/// A follower that has not heard its visible leader for this long is not live, and takes the
/// lead (a hung leader; a frozen one steps down in `freeze`, a closed or crashed one loses the
/// lock at once).
const QUIET_MS: f64 = 1200.0;
/// The same for a hidden leader: browsers run a hidden tab's timers once a second, and once a
/// minute after five minutes (its stream and relays are not slowed).
const HIDDEN_QUIET_MS: f64 = 65_000.0;
/// A tab silent for this long has gone (a crash says no goodbye); hidden tabs tick once a minute.
const TAB_GONE_MS: f64 = 150_000.0;

thread_local! {
    static HUBS: RefCell<Vec<Weak<Hub>>> = const { RefCell::new(Vec::new()) };
}

/// A member's handler with what to tell it, called once no borrow is held.
type Call = (Rc<dyn On<Signal>>, Signal);

struct Member {
    id: u32,
    session: String,
    /// How far the view has read, and the stream it follows.
    follow: Follow,
    live: bool,
    on: Rc<dyn On<Signal>>,
}

/// A stream the leader holds, with its `EventSource`.
type Group = Held<Stream>;

struct Remote {
    tab: String,
    generation: i64,
    wants: Vec<Want>,
    seen: f64,
}

pub(crate) struct Hub {
    base_url: String,
    tab: String,
    me: Weak<Hub>,
    members: RefCell<Vec<Member>>,
    next_member: Cell<u32>,
    channel: Option<RelayChannel>,
    leading: Cell<bool>,
    /// Releases the leader lock.
    release: RefCell<Option<Function>>,
    /// A lock request is queued (or held).
    requested: Cell<bool>,
    stealing: Cell<bool>,
    /// The newest leader state known (ours when leading).
    generation: Cell<i64>,
    groups: RefCell<Vec<Group>>,
    /// The leader's streams, as it last said.
    seen: RefCell<Vec<StreamState>>,
    /// When the leader last spoke.
    heard: Cell<f64>,
    /// The leader said its page is hidden.
    leader_hidden: Cell<bool>,
    remotes: RefCell<Vec<Remote>>,
    counter: Cell<u32>,
    globals: RefCell<Vec<GlobalListener>>,
    waker: Waker,
    closed: Cell<bool>,
    /// The app's credentials for the streams.
    auth: RefCell<Option<Rc<Auth>>>,
    /// This browser's presence member id (see [`env::client_id`]).
    client: String,
    /// The presence rosters of the sessions shown (contract v1.3).
    rosters: RefCell<crate::presence::Rosters>,
    /// The leader's presence updates, one per session.
    posts: RefCell<Vec<presence::Post>>,
}

/// A session's place in its tab's hub; leaving on drop.
pub(crate) struct Membership {
    hub: Rc<Hub>,
    id: u32,
}

impl Membership {
    /// Joins the hub of `base_url` (made on first use) for `session`. The first member with
    /// credentials lends them to the streams this tab opens.
    pub(crate) fn join(
        base_url: &str,
        session: &str,
        on: Rc<dyn On<Signal>>,
        auth: Option<Rc<Auth>>,
    ) -> Membership {
        let hub = Hub::get(base_url);
        if hub.auth.borrow().is_none() {
            *hub.auth.borrow_mut() = auth;
        }
        let id = hub.next_member.get();
        hub.next_member.set(id.wrapping_add(1));
        hub.members.borrow_mut().push(Member {
            id,
            session: session.to_owned(),
            follow: Follow::default(),
            live: false,
            on,
        });
        // The roster this tab knows already, at once.
        hub.show_presence(session);
        Membership { hub, id }
    }

    /// The view is complete up to `cursor` (history was read there): stream from it. `None`
    /// stops streaming this session (a resync in progress).
    pub(crate) fn set_position(&self, cursor: Option<String>) {
        for m in self.hub.members.borrow_mut().iter_mut() {
            if m.id == self.id {
                m.follow.reset(cursor.clone());
            }
        }
        self.hub.members_changed();
    }

    /// Sets the keys of `patch` (a JSON object's text) in the browser's presence state.
    pub(crate) fn set_presence(&self, session: &str, patch: &str) {
        self.hub.set_presence(session, patch);
    }

    /// The page goes away: its member's state with `patch` set, posted with `keepalive`.
    pub(crate) fn leave_presence(&self, session: &str, patch: &str) {
        let body = crate::codec::presence::presence_request_json(
            &self.hub.client,
            &self.hub.presence_with(session, patch),
        );
        let token = self.hub.auth.borrow().as_ref().and_then(|a| a.cached());
        presence::beacon(&self.hub.base_url, session, token, &body);
    }

    pub(crate) fn is_live(&self) -> bool {
        self.hub
            .members
            .borrow()
            .iter()
            .any(|m| m.id == self.id && m.live)
    }
}

impl Drop for Membership {
    fn drop(&mut self) {
        self.hub.members.borrow_mut().retain(|m| m.id != self.id);
        if self.hub.members.borrow().is_empty() {
            self.hub.shutdown();
        } else {
            self.hub.members_changed();
        }
    }
}

impl Hub {
    fn get(base_url: &str) -> Rc<Hub> {
        let found = HUBS.with(|h| {
            h.borrow()
                .iter()
                .filter_map(Weak::upgrade)
                .find(|hub| hub.base_url == base_url && !hub.closed.get())
        });
        if let Some(hub) = found {
            return hub;
        }
        let hub = Rc::new_cyclic(|me: &Weak<Hub>| {
            let weak = me.clone();
            let on: Rc<dyn On<Relay>> = Rc::new(move |msg: Relay| {
                if let Some(hub) = weak.upgrade() {
                    hub.on_relay(msg);
                }
            });
            // Sharing needs both; with one missing, every tab streams for itself.
            let channel = if leader::available() {
                RelayChannel::open(base_url, on)
            } else {
                None
            };
            Hub {
                base_url: base_url.to_owned(),
                tab: env::new_client_message_id(),
                me: me.clone(),
                members: RefCell::new(Vec::new()),
                next_member: Cell::new(0),
                channel,
                leading: Cell::new(false),
                release: RefCell::new(None),
                requested: Cell::new(false),
                stealing: Cell::new(false),
                generation: Cell::new(0),
                groups: RefCell::new(Vec::new()),
                seen: RefCell::new(Vec::new()),
                heard: Cell::new(env::now_ms() as f64),
                leader_hidden: Cell::new(false),
                remotes: RefCell::new(Vec::new()),
                counter: Cell::new(0),
                globals: RefCell::new(Vec::new()),
                waker: Waker::default(),
                closed: Cell::new(false),
                auth: RefCell::new(None),
                client: env::client_id(),
                rosters: RefCell::default(),
                posts: RefCell::default(),
            }
        });
        HUBS.with(|h| {
            let mut h = h.borrow_mut();
            h.retain(|w| w.strong_count() > 0);
            h.push(Rc::downgrade(&hub));
        });
        hub.listen();
        if hub.channel.is_some() {
            hub.request_lead(false);
        } else {
            hub.leading.set(true);
        }
        spawn_local(hub.clone().tick());
        hub
    }

    fn lock_name(&self) -> String {
        crate::cat(&["turnstream-leader:", &self.base_url])
    }

    fn post(&self, msg: &Relay) {
        if let Some(ch) = &self.channel {
            ch.post(msg);
        }
    }

    // ----- leadership -----

    fn request_lead(&self, steal: bool) {
        if self.closed.get() || (self.requested.get() && !steal) {
            return;
        }
        self.requested.set(true);
        self.stealing.set(steal);
        let granted = self.me.clone();
        let lost = self.me.clone();
        let asked = leader::request(
            &self.lock_name(),
            steal,
            Box::new(move |release: Function| match granted.upgrade() {
                Some(hub) => hub.lead(release),
                None => {
                    let _ = release.call0(&wasm_bindgen::JsValue::UNDEFINED);
                }
            }),
            Box::new(move || {
                if let Some(hub) = lost.upgrade() {
                    hub.lost_lead();
                }
            }),
        );
        if !asked {
            // Web Locks refused to take the request: stream for ourselves.
            self.requested.set(false);
            self.leading.set(true);
            self.reconcile();
        }
    }

    fn lead(&self, release: Function) {
        self.stealing.set(false);
        if self.closed.get() || self.leading.get() {
            // A request left queued from before a steal, or a closed hub: give it back.
            let _ = release.call0(&wasm_bindgen::JsValue::UNDEFINED);
            return;
        }
        *self.release.borrow_mut() = Some(release);
        self.leading.set(true);
        // Above any generation seen, and unlike any other tab's.
        self.generation
            .set(self.generation.get() + 1 + (env::random() * 1e6) as i64);
        self.seen.borrow_mut().clear();
        self.reconcile();
    }

    /// Another tab stole the lock (it thought we were gone).
    fn lost_lead(&self) {
        self.requested.set(false);
        self.stealing.set(false);
        if self.leading.replace(false) {
            self.release.borrow_mut().take();
            self.groups.borrow_mut().clear();
            self.heard.set(env::now_ms() as f64);
            self.update_live();
        }
        self.request_lead(false);
    }

    /// Gives up leading (the tab is frozen or hidden away): the next tab in line takes over.
    fn step_down(&self) {
        if !self.leading.get() || self.channel.is_none() {
            return;
        }
        self.leading.set(false);
        self.groups.borrow_mut().clear();
        self.requested.set(false);
        if let Some(release) = self.release.borrow_mut().take() {
            let _ = release.call0(&wasm_bindgen::JsValue::UNDEFINED);
        }
        self.heard.set(env::now_ms() as f64);
        self.update_live();
    }

    // ----- members and the relay -----

    fn members_changed(&self) {
        if self.closed.get() {
            return;
        }
        // A view already at or past where its stream has gone follows it as it is: no reopen.
        let streams: Vec<StreamState> = if self.leading.get() {
            self.groups.borrow().iter().map(Group::said).collect()
        } else {
            self.seen.borrow().clone()
        };
        self.cover(&streams);
        if self.leading.get() {
            self.reconcile();
        } else {
            self.announce();
            self.update_live();
        }
    }

    fn announce(&self) {
        let wants = self
            .members
            .borrow()
            .iter()
            .filter_map(|m| {
                Some(Want {
                    session: m.session.clone(),
                    pos: m.follow.pos.clone()?,
                    covered: m.follow.covered.clone(),
                })
            })
            .collect();
        self.post(&Relay::Want {
            tab: self.tab.clone(),
            generation: self.generation.get(),
            wants,
        });
    }

    fn on_relay(&self, msg: Relay) {
        if self.closed.get() {
            return;
        }
        match msg {
            Relay::State {
                generation,
                streams,
                hidden,
            } => {
                if self.leading.get() {
                    // Another tab thinks it leads (we stole from it, or it from us): the lock
                    // decides, and it is ours until the browser says otherwise.
                    return;
                }
                self.heard.set(env::now_ms() as f64);
                self.leader_hidden.set(hidden);
                let missed = self.cover(&streams);
                *self.seen.borrow_mut() = streams;
                if generation != self.generation.get() || missed {
                    self.generation.set(generation);
                    self.announce();
                }
                self.update_live();
            }
            Relay::Frame {
                sid,
                kind,
                data,
                prev,
                last,
            } => {
                if !self.leading.get() {
                    self.heard.set(env::now_ms() as f64);
                    if kind.starts_with("presence") {
                        self.presence_frame(&kind, &data);
                    } else if self.deliver(&sid, &kind, &data, prev.as_deref(), &last) {
                        self.announce();
                        self.update_live();
                    }
                }
            }
            Relay::Want {
                tab,
                generation,
                wants,
            } => {
                let now = env::now_ms() as f64;
                {
                    let mut remotes = self.remotes.borrow_mut();
                    // A tab new here, or showing a session it did not: hand it the rosters.
                    let before = remotes.iter().find(|r| r.tab == tab);
                    let new: Vec<String> = wants
                        .iter()
                        .filter(|w| {
                            !before.is_some_and(|b| b.wants.iter().any(|x| x.session == w.session))
                        })
                        .map(|w| w.session.clone())
                        .collect();
                    if self.leading.get() {
                        self.send_rosters(&new);
                    }
                    remotes.retain(|r| r.tab != tab);
                    remotes.push(Remote {
                        tab,
                        generation,
                        wants,
                        seen: now,
                    });
                }
                if self.leading.get() {
                    self.reconcile();
                }
            }
            Relay::Bye { tab } => {
                self.remotes.borrow_mut().retain(|r| r.tab != tab);
                if self.leading.get() {
                    self.reconcile();
                }
            }
            Relay::Presence { session, state } => {
                if self.leading.get() {
                    self.merge_presence(&session, &state);
                }
            }
        }
    }

    /// The streams as the leader has them now: each member follows the one carrying its session
    /// if its view is complete up to where that stream has gone. True when a member found it
    /// missed frames (it must ask for the stream again).
    fn cover(&self, streams: &[StreamState]) -> bool {
        let known: Vec<String> = if self.leading.get() {
            Vec::new()
        } else {
            self.seen.borrow().iter().map(|s| s.sid.clone()).collect()
        };
        let mut missed = false;
        for m in self.members.borrow_mut().iter_mut() {
            missed |= m.follow.cover(&m.session, streams, &known) == Fit::Missed;
        }
        missed
    }

    /// The sessions stream `sid` carries, as the leader (we, or the tab we hear) has them.
    fn carries(&self, sid: &str, session: &str) -> bool {
        if self.leading.get() {
            self.groups
                .borrow()
                .iter()
                .any(|g| g.state.carries(sid, session))
        } else {
            self.seen.borrow().iter().any(|s| s.carries(sid, session))
        }
    }

    /// A frame of stream `sid` (ours or relayed), which moved it from `prev` to `last`, to the
    /// members whose view it continues. True when a member found it missed frames.
    fn deliver(&self, sid: &str, kind: &str, data: &str, prev: Option<&str>, last: &str) -> bool {
        let Some(signal) = Frame::parse(kind, data, last) else {
            return false;
        };
        let mut calls: Vec<Call> = Vec::new();
        let mut missed = false;
        let sessions: Vec<(u32, bool)> = self
            .members
            .borrow()
            .iter()
            .map(|m| (m.id, self.carries(sid, &m.session)))
            .collect();
        let resync = matches!(signal, Signal::Resync(_));
        for m in self.members.borrow_mut().iter_mut() {
            // A resync ends the stream: it goes to the views that follow it.
            if !resync && !sessions.iter().any(|&(id, carried)| id == m.id && carried) {
                continue;
            }
            match &signal {
                Signal::Event(e, last) => match m.follow.frame(sid, prev, last) {
                    Fit::Deliver if e.session_id == m.session => {
                        calls.push((m.on.clone(), Signal::Event(e.clone(), last.clone())));
                    }
                    Fit::Missed => missed = true,
                    _ => {}
                },
                Signal::Snapshot(s) => match m.follow.frame(sid, prev, "") {
                    Fit::Deliver => calls.push((m.on.clone(), Signal::Snapshot(s.clone()))),
                    Fit::Missed => missed = true,
                    Fit::Ignore => {}
                },
                Signal::Resync(r) => {
                    if m.follow.covered.as_deref() == Some(sid) {
                        m.follow.reset(None);
                        m.live = false;
                        calls.push((m.on.clone(), Signal::Resync(r.clone())));
                    }
                }
                Signal::Garbled(k) => {
                    console::warn_1(
                        &crate::cat(&["turnstream: ignored a frame that did not parse: ", k])
                            .into(),
                    );
                    break;
                }
                Signal::Open | Signal::Retrying | Signal::Presence(..) => {}
            }
        }
        for (on, s) in calls {
            on.on(s);
        }
        missed
    }

    fn quiet_limit(&self) -> f64 {
        if self.leader_hidden.get() {
            HIDDEN_QUIET_MS
        } else {
            QUIET_MS
        }
    }

    /// Tells each member whether its stream is delivering, when that changed.
    fn update_live(&self) {
        let now = env::now_ms() as f64;
        let leading = self.leading.get();
        let fresh = leading || now - self.heard.get() < self.quiet_limit();
        let open = |sid: &str| -> bool {
            if leading {
                self.groups
                    .borrow()
                    .iter()
                    .any(|g| g.state.sid == sid && g.state.open)
            } else {
                self.seen.borrow().iter().any(|s| s.sid == sid && s.open)
            }
        };
        let mut calls: Vec<Call> = Vec::new();
        for m in self.members.borrow_mut().iter_mut() {
            let live = fresh && m.follow.covered.as_deref().is_some_and(open);
            if live != m.live {
                m.live = live;
                calls.push((
                    m.on.clone(),
                    if live { Signal::Open } else { Signal::Retrying },
                ));
            }
        }
        for (on, s) in calls {
            on.on(s);
        }
    }

    // ----- the leader's streams -----

    fn broadcast_state(&self) {
        let streams = self.groups.borrow().iter().map(Group::said).collect();
        self.post(&Relay::State {
            generation: self.generation.get(),
            streams,
            hidden: env::hidden(),
        });
    }

    /// Makes the streams match what every tab needs; reopens only what must change.
    fn reconcile(&self) {
        if !self.leading.get() || self.closed.get() {
            return;
        }
        let now = env::now_ms() as f64;
        let generation = self.generation.get();
        self.remotes
            .borrow_mut()
            .retain(|r| now - r.seen < TAB_GONE_MS);
        let members = self.members.borrow();
        let remotes = self.remotes.borrow();
        // Our own sessions first, then the other tabs'.
        let mut wants: Vec<Wanted<'_>> = Vec::new();
        for m in members.iter() {
            if let Some(pos) = &m.follow.pos {
                wants.push(Wanted {
                    session: &m.session,
                    pos,
                    covered: m.follow.covered.as_deref(),
                    current: true,
                });
            }
        }
        for r in remotes.iter() {
            for w in &r.wants {
                wants.push(Wanted {
                    session: &w.session,
                    pos: &w.pos,
                    covered: w.covered.as_deref(),
                    current: r.generation == generation,
                });
            }
        }
        let mut groups = self.groups.borrow_mut();
        let plan = streams::plan(&mut groups, &wants, || {
            let n = self.counter.get();
            self.counter.set(n.wrapping_add(1));
            let mut sid = self.tab.clone();
            sid.push('.');
            crate::codec::write_int(&mut sid, i64::from(n));
            sid
        });
        drop(wants);
        drop((members, remotes));
        for &i in &plan.opening {
            // It reopens under a new name: what the old one delivers is of no use.
            if let Some(g) = groups.get_mut(i) {
                g.stream = None;
                g.attempt = 0;
            }
        }
        let states: Vec<StreamState> = groups.iter().map(Group::said).collect();
        drop(groups);
        if plan.changed {
            self.generation.set(self.generation.get() + 1);
            self.cover(&states);
            self.broadcast_state();
        }
        for i in plan.opening {
            self.open_group(i);
        }
        self.update_live();
    }

    fn stream_url(&self, g: &Group) -> String {
        let mut url = self.base_url.clone();
        url.push_str("/api/stream?");
        for s in &g.state.sessions {
            url.push_str("session=");
            url.push_str(&String::from(js_sys::encode_uri_component(s)));
            url.push('&');
        }
        url.push_str("cursor=");
        url.push_str(&String::from(js_sys::encode_uri_component(&g.last)));
        url.push_str("&snapshot=1&presence=1&client=");
        url.push_str(&String::from(js_sys::encode_uri_component(&self.client)));
        if let Some(token) = self.auth.borrow().as_ref().and_then(|a| a.cached()) {
            // EventSource cannot send headers.
            url.push_str("&access_token=");
            url.push_str(&String::from(js_sys::encode_uri_component(&token)));
        }
        url
    }

    fn open_group(&self, i: usize) {
        if !env::online() {
            // Reopened by `online`.
            return;
        }
        let mut groups = self.groups.borrow_mut();
        let Some(g) = groups.get_mut(i) else { return };
        let sid = g.state.sid.clone();
        let weak = self.me.clone();
        let on: Rc<dyn On<Frame>> = Rc::new(move |f: Frame| {
            if let Some(hub) = weak.upgrade() {
                hub.on_frame(&sid, f);
            }
        });
        match Stream::open(&self.stream_url(g), on) {
            Ok(s) => g.stream = Some(s),
            Err(e) => console::error_2(&"turnstream: cannot open the stream".into(), &e),
        }
    }

    fn on_frame(&self, sid: &str, frame: Frame) {
        if self.closed.get() || !self.leading.get() {
            return;
        }
        let idx = self.groups.borrow().iter().position(|g| g.state.sid == sid);
        let Some(i) = idx else { return };
        let (kind, data, prev, last) = match frame {
            Frame::Open => {
                {
                    let mut groups = self.groups.borrow_mut();
                    groups[i].state.open = true;
                    groups[i].attempt = 0;
                    // A new connection: its fresh rosters come first, diffs wait for them.
                    self.rosters.borrow_mut().stale(&groups[i].state.sessions);
                }
                self.broadcast_state();
                self.update_live();
                return;
            }
            Frame::Retrying | Frame::Failed | Frame::TokenExpired => {
                let expired = matches!(frame, Frame::TokenExpired);
                let failed = expired || matches!(frame, Frame::Failed);
                let attempt = {
                    let mut groups = self.groups.borrow_mut();
                    let g = &mut groups[i];
                    g.state.open = false;
                    if failed {
                        g.stream = None;
                    }
                    g.attempt = g.attempt.saturating_add(1);
                    g.attempt
                };
                self.broadcast_state();
                self.update_live();
                if failed {
                    // The browser gave up: reopen from the last event delivered, after a wait.
                    let weak = self.me.clone();
                    let sid = sid.to_owned();
                    let waker = self.waker.clone();
                    let auth = self.auth.borrow().clone();
                    spawn_local(async move {
                        if !expired {
                            waker.sleep(backoff_ms(attempt - 1, env::random())).await;
                        }
                        // A refused or expired token: ask for a fresh one. The stream resumes
                        // from its last event with the same name, so nobody misses anything.
                        if let Some(auth) = auth {
                            auth.renew().await;
                        }
                        if let Some(hub) = weak.upgrade() {
                            let i = hub
                                .groups
                                .borrow()
                                .iter()
                                .position(|g| g.state.sid == sid && g.stream.is_none());
                            if let (Some(i), true) = (i, hub.leading.get()) {
                                hub.open_group(i);
                            }
                        }
                    });
                }
                return;
            }
            Frame::Snapshot(d) => {
                let prev = self.groups.borrow()[i].last.clone();
                ("snapshot", d, Some(prev), String::new())
            }
            Frame::Event(d, last) => {
                let prev = std::mem::replace(&mut self.groups.borrow_mut()[i].last, last.clone());
                ("event", d, Some(prev), last)
            }
            Frame::Resync(d) => ("resync", d, None, String::new()),
            // No `id:`: the stream's position stays where it is.
            Frame::Presence(kind, d) => (kind, d, None, String::new()),
        };
        self.post(&Relay::Frame {
            sid: sid.to_owned(),
            kind: kind.to_owned(),
            data: data.clone(),
            prev: prev.clone(),
            last: last.clone(),
        });
        if kind.starts_with("presence") {
            self.presence_frame(kind, &data);
            return;
        }
        let missed = self.deliver(sid, kind, &data, prev.as_deref(), &last);
        if kind == "resync" {
            self.groups.borrow_mut().retain(|g| g.state.sid != sid);
            self.generation.set(self.generation.get() + 1);
            self.broadcast_state();
            self.update_live();
        } else if missed {
            // One of our own sessions is behind the stream: stream it again from its position.
            self.reconcile();
        }
    }

    // ----- the tab's life -----

    fn listen(&self) {
        let weak = self.me.clone();
        let online = GlobalListener::new("online", move |_| {
            if let Some(hub) = weak.upgrade() {
                let closed: Vec<usize> = hub
                    .groups
                    .borrow()
                    .iter()
                    .enumerate()
                    .filter(|(_, g)| g.stream.is_none())
                    .map(|(i, _)| i)
                    .collect();
                for i in closed {
                    hub.open_group(i);
                }
            }
        });
        let weak = self.me.clone();
        let offline = GlobalListener::new("offline", move |_| {
            if let Some(hub) = weak.upgrade() {
                // A browser that lost its network can keep a dead socket "open" for minutes:
                // close now, and resume from the last event delivered when it is back.
                for g in hub.groups.borrow_mut().iter_mut() {
                    g.stream = None;
                    g.state.open = false;
                }
                hub.broadcast_state();
                hub.update_live();
            }
        });
        let weak = self.me.clone();
        let freeze = GlobalListener::on_document("freeze", move |_| {
            if let Some(hub) = weak.upgrade() {
                hub.step_down();
            }
        });
        let weak = self.me.clone();
        let pagehide = GlobalListener::new("pagehide", move |_| {
            if let Some(hub) = weak.upgrade() {
                hub.post(&Relay::Bye {
                    tab: hub.tab.clone(),
                });
                hub.step_down();
            }
        });
        self.globals
            .borrow_mut()
            .extend([online, offline, freeze, pagehide]);
    }

    /// Heartbeats, announcements, a quiet leader's replacement, gone tabs.
    async fn tick(self: Rc<Self>) {
        let mut ticks = 0u32;
        while !self.closed.get() {
            ticks = ticks.wrapping_add(1);
            self.waker.sleep(TICK_MS).await;
            if self.closed.get() {
                return;
            }
            if self.leading.get() {
                let before = self.remotes.borrow().len();
                let now = env::now_ms() as f64;
                self.remotes
                    .borrow_mut()
                    .retain(|r| now - r.seen < TAB_GONE_MS);
                if self.remotes.borrow().len() != before {
                    self.reconcile();
                }
                self.broadcast_state();
            } else {
                if ticks % ANNOUNCE_EVERY == 0 {
                    self.announce();
                }
                let quiet = env::now_ms() as f64 - self.heard.get();
                if !self.requested.get() {
                    // Back from the back/forward cache, or after stepping down.
                    self.request_lead(false);
                } else if quiet > self.quiet_limit() && !self.stealing.get() {
                    self.request_lead(true);
                }
            }
            self.update_live();
        }
    }

    fn shutdown(&self) {
        if self.closed.replace(true) {
            return;
        }
        self.post(&Relay::Bye {
            tab: self.tab.clone(),
        });
        self.groups.borrow_mut().clear();
        self.leading.set(false);
        if let Some(release) = self.release.borrow_mut().take() {
            let _ = release.call0(&wasm_bindgen::JsValue::UNDEFINED);
        }
        self.globals.borrow_mut().clear();
        self.waker.wake_all();
        HUBS.with(|h| h.borrow_mut().retain(|w| w.strong_count() > 0));
    }
}
