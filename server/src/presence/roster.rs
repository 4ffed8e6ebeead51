//! The roster: every session's members as this server sees them, and the rules that change it.
//!
//! Pure bookkeeping, with the time passed in: each operation answers the [`Changes`] it made
//! (diffs for this server's streams, messages for the other servers), and the caller
//! ([`super::Presence`]) delivers them. A member is keyed by its `client` within a session; it
//! is held by this server's streams (and, for [`Settings::grace`] after the last one closed, by
//! its grace period) and by other servers that said they hold it (each until its renewal is
//! [`Settings::ttl`] late). It is present while anything holds it.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::cluster::{Message, WireMember};

/// The key of a state that means "typing" (cleared by the server after [`Settings::typing_ttl`]).
pub const TYPING_KEY: &str = "typing";

/// Updates of one member's state a second (a burst of as many is allowed).
pub const UPDATES_PER_SECOND: f64 = 10.0;

/// How the roster behaves (the server's flags).
#[derive(Debug, Clone)]
pub struct Settings {
    /// How long a member whose last stream closed stays (`--presence-grace-ms`).
    pub grace: Duration,
    /// How long `state.typing: true` lasts after the update that set it (`--typing-ttl-secs`).
    pub typing_ttl: Duration,
    /// How long another server's member lasts without its renewal (`--presence-ttl-secs`).
    pub ttl: Duration,
    /// Members listed per session (`--max-presence-members`); the rest are only counted.
    pub max_members: usize,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            grace: Duration::from_millis(3000),
            typing_ttl: Duration::from_secs(6),
            ttl: Duration::from_secs(15),
            max_members: 1000,
        }
    }
}

/// The order of a member's states across servers: the newest wins everywhere. Unix ms, then a
/// tiebreak of the server that set it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Version(pub u64, pub u64);

/// A member as the protocol shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MemberView {
    pub member_id: String,
    pub user: Option<String>,
    pub state: Map<String, Value>,
    /// Unix milliseconds of the member's first stream (as `ts` of events).
    pub joined_at: i64,
}

/// `GET /api/sessions/{session}/presence` and the `presence` frame.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RosterView {
    pub session_id: String,
    pub members: Vec<MemberView>,
    pub count: usize,
}

/// The `presence_diff` frame (`count` is the session's count after it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Diff {
    pub session_id: String,
    pub joins: Vec<MemberView>,
    pub leaves: Vec<MemberView>,
    pub count: usize,
}

/// What an operation changed.
#[derive(Debug, Default)]
pub struct Changes {
    /// For this server's streams of each session, in order.
    pub diffs: Vec<Diff>,
    /// For the other servers, in order.
    pub out: Vec<Message>,
}

/// Why a join was refused.
#[derive(Debug, PartialEq, Eq)]
pub struct Taken;

/// Why a state update was refused.
#[derive(Debug, PartialEq, Eq)]
pub enum UpdateError {
    /// No such member of the session (for this user).
    NotPresent,
    /// Over [`UPDATES_PER_SECOND`]: retry after this long.
    RateLimited(Duration),
}

/// A token bucket of [`UPDATES_PER_SECOND`].
#[derive(Debug, Clone)]
struct Bucket {
    tokens: f64,
    at: Option<Instant>,
}

impl Bucket {
    fn take(&mut self, now: Instant) -> Result<(), Duration> {
        let elapsed = self
            .at
            .map_or(Duration::ZERO, |at| now.saturating_duration_since(at));
        self.tokens =
            (self.tokens + elapsed.as_secs_f64() * UPDATES_PER_SECOND).min(UPDATES_PER_SECOND);
        self.at = Some(now);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            Ok(())
        } else {
            Err(Duration::from_secs_f64(
                (1.0 - self.tokens) / UPDATES_PER_SECOND,
            ))
        }
    }
}

#[derive(Debug, Clone)]
struct Member {
    user: Option<String>,
    state: Map<String, Value>,
    version: Version,
    joined_at: i64,
    /// The order it was first seen in here (listing order).
    order: u64,
    listed: bool,
    /// This server's open streams of it.
    streams: usize,
    /// Set while its last stream here is closed and its grace runs.
    grace_until: Option<Instant>,
    /// Other servers holding it, each until when.
    remote: HashMap<u64, Instant>,
    typing_until: Option<Instant>,
    bucket: Bucket,
}

impl Member {
    fn held_here(&self) -> bool {
        self.streams > 0 || self.grace_until.is_some()
    }

    fn present(&self) -> bool {
        self.held_here() || !self.remote.is_empty()
    }

    fn view(&self, client: &str) -> MemberView {
        MemberView {
            member_id: client.to_string(),
            user: self.user.clone(),
            state: self.state.clone(),
            joined_at: self.joined_at,
        }
    }

    fn wire(&self, client: &str) -> WireMember {
        WireMember {
            c: client.to_string(),
            u: self.user.clone(),
            st: self.state.clone(),
            v: self.version,
            j: self.joined_at,
        }
    }

    /// Takes `state` if `version` is newer; whether it did.
    fn take_state(
        &mut self,
        state: Map<String, Value>,
        version: Version,
        now: Instant,
        s: &Settings,
    ) -> bool {
        if version <= self.version {
            return false;
        }
        self.typing_until =
            (state.get(TYPING_KEY) == Some(&Value::Bool(true))).then(|| now + s.typing_ttl);
        self.state = state;
        self.version = version;
        true
    }
}

#[derive(Debug, Default)]
struct Session {
    members: HashMap<String, Member>,
    next_order: u64,
    listed: usize,
}

/// Every session's members as this server sees them.
#[derive(Debug)]
pub struct Roster {
    settings: Settings,
    /// This server, in [`Version`]s and messages.
    node: u64,
    sessions: HashMap<String, Session>,
}

/// A diff being built for one session.
struct Pending<'a> {
    changes: &'a mut Changes,
    session_id: &'a str,
    joins: Vec<MemberView>,
    leaves: Vec<MemberView>,
    counted: bool,
}

impl<'a> Pending<'a> {
    fn new(changes: &'a mut Changes, session_id: &'a str) -> Self {
        Pending {
            changes,
            session_id,
            joins: Vec::new(),
            leaves: Vec::new(),
            counted: false,
        }
    }

    /// Notes a join (or a changed state); a member is never in both lists of one diff, so a
    /// client may apply them in either order.
    fn join(&mut self, m: MemberView) {
        self.leaves.retain(|l| l.member_id != m.member_id);
        self.joins.retain(|j| j.member_id != m.member_id);
        self.joins.push(m);
    }

    fn leave(&mut self, m: MemberView) {
        self.joins.retain(|j| j.member_id != m.member_id);
        self.leaves.push(m);
    }

    fn finish(self, count: usize) {
        if self.joins.is_empty() && self.leaves.is_empty() && !self.counted {
            return;
        }
        self.changes.diffs.push(Diff {
            session_id: self.session_id.to_string(),
            joins: self.joins,
            leaves: self.leaves,
            count,
        });
    }
}

impl Roster {
    pub fn new(settings: Settings, node: u64) -> Roster {
        Roster {
            settings,
            node,
            sessions: HashMap::new(),
        }
    }

    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// Members present over all sessions.
    pub fn members(&self) -> usize {
        self.sessions.values().map(|s| s.members.len()).sum()
    }

    /// The roster of `session_id` now.
    pub fn view(&self, session_id: &str) -> RosterView {
        let Some(s) = self.sessions.get(session_id) else {
            return RosterView {
                session_id: session_id.to_string(),
                members: Vec::new(),
                count: 0,
            };
        };
        let mut listed: Vec<(&String, &Member)> =
            s.members.iter().filter(|(_, m)| m.listed).collect();
        listed.sort_by_key(|(_, m)| m.order);
        RosterView {
            session_id: session_id.to_string(),
            members: listed.into_iter().map(|(c, m)| m.view(c)).collect(),
            count: s.members.len(),
        }
    }

    /// Whether `client` of `session_id` is a member held for another user than `user`.
    pub fn taken(&self, session_id: &str, client: &str, user: Option<&str>) -> bool {
        self.sessions
            .get(session_id)
            .and_then(|s| s.members.get(client))
            .is_some_and(|m| m.user.as_deref() != user)
    }

    /// Adds a new member to a session (listed if there is room) and notes its join.
    fn admit(
        settings: &Settings,
        s: &mut Session,
        pending: &mut Pending<'_>,
        client: &str,
        m: Member,
    ) {
        let mut m = m;
        m.order = s.next_order;
        s.next_order += 1;
        m.listed = s.listed < settings.max_members;
        if m.listed {
            s.listed += 1;
            pending.join(m.view(client));
        } else {
            pending.counted = true;
        }
        s.members.insert(client.to_string(), m);
    }

    /// Removes members no longer present, noting their leaves (and who takes a freed listing).
    fn sweep(s: &mut Session, pending: &mut Pending<'_>) {
        let gone: Vec<String> = s
            .members
            .iter()
            .filter(|(_, m)| !m.present())
            .map(|(c, _)| c.clone())
            .collect();
        for client in gone {
            let Some(m) = s.members.remove(&client) else {
                continue;
            };
            if !m.listed {
                pending.counted = true;
                continue;
            }
            s.listed -= 1;
            pending.leave(m.view(&client));
            // The longest-present unlisted member takes the freed place.
            if let Some((c, next)) = s
                .members
                .iter_mut()
                .filter(|(_, m)| !m.listed)
                .min_by_key(|(_, m)| m.order)
            {
                next.listed = true;
                s.listed += 1;
                pending.join(next.view(c));
            }
        }
    }

    /// One more stream of `client` (of `user`) on this server in `session_id`.
    pub fn join(
        &mut self,
        session_id: &str,
        client: &str,
        user: Option<&str>,
        now_ms: u64,
    ) -> Result<Changes, Taken> {
        if self.taken(session_id, client, user) {
            return Err(Taken);
        }
        let mut changes = Changes::default();
        let s = self.sessions.entry(session_id.to_string()).or_default();
        let mut pending = Pending::new(&mut changes, session_id);
        let mut announce = None;
        match s.members.get_mut(client) {
            Some(m) => {
                if !m.held_here() {
                    announce = Some(m.wire(client));
                }
                m.streams += 1;
                m.grace_until = None;
            }
            None => {
                let m = Member {
                    user: user.map(str::to_string),
                    state: Map::new(),
                    version: Version::default(),
                    joined_at: now_ms as i64,
                    order: 0,
                    listed: false,
                    streams: 1,
                    grace_until: None,
                    remote: HashMap::new(),
                    typing_until: None,
                    bucket: Bucket {
                        tokens: UPDATES_PER_SECOND,
                        at: None,
                    },
                };
                announce = Some(m.wire(client));
                Self::admit(&self.settings, s, &mut pending, client, m);
            }
        }
        let count = s.members.len();
        pending.finish(count);
        if let Some(m) = announce {
            changes.out.push(Message::Hold {
                s: session_id.to_string(),
                m,
            });
        }
        Ok(changes)
    }

    /// One stream of `client` in `session_id` closed on this server: after the last, its grace
    /// starts (see [`Roster::tick`] for its end).
    pub fn close(&mut self, session_id: &str, client: &str, now: Instant) -> Changes {
        let grace = self.settings.grace;
        if let Some(m) = self
            .sessions
            .get_mut(session_id)
            .and_then(|s| s.members.get_mut(client))
        {
            m.streams = m.streams.saturating_sub(1);
            if m.streams == 0 {
                m.grace_until = Some(now + grace);
            }
        }
        self.tick(now)
    }

    /// Replaces the state of `client` (of `user`) in `session_id`.
    pub fn set_state(
        &mut self,
        session_id: &str,
        client: &str,
        user: Option<&str>,
        state: Map<String, Value>,
        now: Instant,
        now_ms: u64,
    ) -> Result<Changes, UpdateError> {
        let node = self.node;
        let settings = self.settings.clone();
        let s = self
            .sessions
            .get_mut(session_id)
            .ok_or(UpdateError::NotPresent)?;
        let m = s
            .members
            .get_mut(client)
            .filter(|m| m.user.as_deref() == user)
            .ok_or(UpdateError::NotPresent)?;
        m.bucket.take(now).map_err(UpdateError::RateLimited)?;
        let version = Version(now_ms.max(m.version.0 + 1), node);
        m.take_state(state, version, now, &settings);
        let mut changes = Changes::default();
        let wire = m.wire(client);
        let view = m.listed.then(|| m.view(client));
        let count = s.members.len();
        let mut pending = Pending::new(&mut changes, session_id);
        if let Some(view) = view {
            pending.join(view);
        }
        pending.finish(count);
        changes.out.push(Message::State {
            s: session_id.to_string(),
            m: wire,
        });
        Ok(changes)
    }

    /// Ends what is due by `now`: graces (the member is released here), other servers' holds
    /// past their renewal, typing past its TTL.
    pub fn tick(&mut self, now: Instant) -> Changes {
        let mut changes = Changes::default();
        for (id, s) in self.sessions.iter_mut() {
            let mut pending = Pending::new(&mut changes, id);
            let mut released = Vec::new();
            for (client, m) in s.members.iter_mut() {
                if m.streams == 0 && m.grace_until.is_some_and(|at| at <= now) {
                    m.grace_until = None;
                    released.push(Message::Release {
                        s: id.clone(),
                        c: client.clone(),
                        u: m.user.clone(),
                    });
                }
                m.remote.retain(|_, until| *until > now);
                if m.typing_until.is_some_and(|at| at <= now) {
                    m.typing_until = None;
                    m.state.insert(TYPING_KEY.to_string(), Value::Bool(false));
                    if m.listed && m.present() {
                        pending.join(m.view(client));
                    }
                }
            }
            Self::sweep(s, &mut pending);
            let count = s.members.len();
            pending.finish(count);
            changes.out.extend(released);
        }
        self.sessions.retain(|_, s| !s.members.is_empty());
        changes
    }

    /// The messages that renew this server's members on the others.
    pub fn holds(&self) -> Vec<Message> {
        let mut out = Vec::new();
        for (id, s) in &self.sessions {
            for (client, m) in &s.members {
                if m.held_here() {
                    out.push(Message::Hold {
                        s: id.clone(),
                        m: m.wire(client),
                    });
                }
            }
        }
        out
    }

    /// What another server said.
    pub fn heard(&mut self, from: u64, msg: Message, now: Instant) -> Changes {
        let mut changes = Changes::default();
        if from == self.node {
            return changes;
        }
        let settings = self.settings.clone();
        match msg {
            Message::Hello => changes.out = self.holds(),
            Message::Bye => {
                for s in self.sessions.values_mut() {
                    for m in s.members.values_mut() {
                        m.remote.remove(&from);
                    }
                }
                for (id, s) in self.sessions.iter_mut() {
                    let mut pending = Pending::new(&mut changes, id);
                    Self::sweep(s, &mut pending);
                    let count = s.members.len();
                    pending.finish(count);
                }
                self.sessions.retain(|_, s| !s.members.is_empty());
            }
            Message::Release { s: id, c, u } => {
                if let Some(s) = self.sessions.get_mut(&id) {
                    if let Some(m) = s.members.get_mut(&c).filter(|m| m.user == u) {
                        m.remote.remove(&from);
                    }
                    let mut pending = Pending::new(&mut changes, &id);
                    Self::sweep(s, &mut pending);
                    let count = s.members.len();
                    pending.finish(count);
                    if s.members.is_empty() {
                        self.sessions.remove(&id);
                    }
                }
            }
            Message::Hold { s: id, m: w } | Message::State { s: id, m: w }
                if self.taken(&id, &w.c, w.u.as_deref()) =>
            {
                tracing::debug!(session = %id, client = %w.c, "presence: another server's member of another user; ignored");
            }
            Message::Hold { s: id, m: w } => {
                let s = self.sessions.entry(id.clone()).or_default();
                let mut pending = Pending::new(&mut changes, &id);
                match s.members.get_mut(&w.c) {
                    Some(m) => {
                        m.remote.insert(from, now + settings.ttl);
                        m.joined_at = m.joined_at.min(w.j);
                        if m.take_state(w.st, w.v, now, &settings) && m.listed {
                            pending.join(m.view(&w.c));
                        }
                    }
                    None => {
                        let typing = w.st.get(TYPING_KEY) == Some(&Value::Bool(true));
                        let m = Member {
                            user: w.u,
                            state: w.st,
                            version: w.v,
                            joined_at: w.j,
                            order: 0,
                            listed: false,
                            streams: 0,
                            grace_until: None,
                            remote: HashMap::from([(from, now + settings.ttl)]),
                            typing_until: typing.then(|| now + settings.typing_ttl),
                            bucket: Bucket {
                                tokens: UPDATES_PER_SECOND,
                                at: None,
                            },
                        };
                        Self::admit(&settings, s, &mut pending, &w.c, m);
                    }
                }
                let count = s.members.len();
                pending.finish(count);
            }
            Message::State { s: id, m: w } => {
                if let Some(s) = self.sessions.get_mut(&id) {
                    let mut pending = Pending::new(&mut changes, &id);
                    if let Some(m) = s.members.get_mut(&w.c) {
                        if m.take_state(w.st, w.v, now, &settings) && m.listed {
                            pending.join(m.view(&w.c));
                        }
                    }
                    let count = s.members.len();
                    pending.finish(count);
                }
            }
        }
        changes
    }

    /// This server stops: its members leave here at once (those no other server holds), and
    /// the others are told.
    pub fn shutdown(&mut self) -> Changes {
        let mut changes = Changes::default();
        for (id, s) in self.sessions.iter_mut() {
            for m in s.members.values_mut() {
                m.streams = 0;
                m.grace_until = None;
            }
            let mut pending = Pending::new(&mut changes, id);
            Self::sweep(s, &mut pending);
            let count = s.members.len();
            pending.finish(count);
        }
        self.sessions.retain(|_, s| !s.members.is_empty());
        changes.out.push(Message::Bye);
        changes
    }
}
