//! Presence (contract v1.3): who is in a session, live on every stream that asks for it and on
//! every server, never journaled.
//!
//! - A stream with `presence=1&client=ID` joins each of its sessions as one member, keyed by
//!   its `client` (and its token's `sub`, under auth: another user's stream cannot take that
//!   member); `presence=watch` only watches. [`Presence::attach`] registers the stream's
//!   [`Watch`] queue and takes each session's roster in one step under the roster's lock, so
//!   the `presence` frames it starts with and the `presence_diff` frames queued after agree.
//! - The [`roster`] holds the members and the rules (grace after the last stream, typing
//!   TTL, other servers' holds and their TTL, the listing limit); this file runs it: delivers
//!   its diffs to the streams' queues, its messages to the other servers ([`cluster`]), and
//!   ticks its timers every [`TICK`], renewing this server's members every third of the TTL.
//! - Presence frames never touch the journal, its replay tail or its ids: a stream's pump takes
//!   them from its own [`Watch`] queue, apart from its inbox of journal frames.

pub mod cluster;
pub mod roster;
pub mod watch;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::task::Waker;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use serde_json::{Map, Value};

use crate::journal::BroadcastSink;
use crate::live::encode;
use crate::metrics::Metrics;
use crate::mutex::lock;
use cluster::{Cluster, Envelope, Message};
use roster::{Changes, Roster};
pub use roster::{RosterView, Settings, Taken, UpdateError};
pub use watch::Watch;

/// How often graces, typing and other servers' TTLs are checked (how late each may end).
pub const TICK: Duration = Duration::from_millis(100);

/// Most bytes of a member's state, as JSON.
pub const MAX_STATE_BYTES: usize = 1024;

/// How a stream takes part.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mode {
    /// One member of each of its sessions, by `client` (and `user`, under auth).
    Join {
        client: String,
        user: Option<String>,
    },
    /// Presence frames only.
    Watch,
}

struct Inner {
    roster: Roster,
    /// Each session's watching streams.
    watchers: HashMap<String, Vec<Arc<Watch>>>,
}

/// This server's presence.
pub struct Presence {
    inner: Mutex<Inner>,
    cluster: Arc<dyn Cluster>,
    node: u64,
    /// Set at shutdown: nothing joins or leaves any more.
    closed: AtomicBool,
    /// Whether the other servers can be heard (said once in the log when not).
    hearing: AtomicBool,
    metrics: Arc<Metrics>,
}

/// A stream's part in presence, for its life: dropped, its member's stream closes.
pub struct Attached {
    presence: Arc<Presence>,
    watch: Arc<Watch>,
    sessions: Vec<String>,
    client: Option<String>,
}

impl Attached {
    /// The stream's next presence frames, or `None` (its waker is then registered).
    pub fn take(&self, waker: &Waker) -> Option<Bytes> {
        match self.watch.take(waker) {
            watch::Taken::Nothing => None,
            watch::Taken::Frames(b) => Some(b),
            watch::Taken::Stale => Some(self.presence.fresh(self)),
        }
    }
}

impl Drop for Attached {
    fn drop(&mut self) {
        self.presence.detach(self);
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

impl Presence {
    /// Presence on `cluster`, ticking on the current runtime until shutdown.
    pub fn start(
        settings: Settings,
        cluster: Arc<dyn Cluster>,
        metrics: Arc<Metrics>,
    ) -> Arc<Presence> {
        let node = rand::random::<u64>() >> 1;
        let renew = settings.ttl / 3;
        let p = Arc::new(Presence {
            inner: Mutex::new(Inner {
                roster: Roster::new(settings, node),
                watchers: HashMap::new(),
            }),
            cluster,
            node,
            closed: AtomicBool::new(false),
            hearing: AtomicBool::new(false),
            metrics,
        });
        tokio::spawn(run(Arc::downgrade(&p), renew.max(TICK)));
        p
    }

    /// Joins or watches `sessions` for one stream; answers its part and its first frames (one
    /// `presence` roster per session). `Err` when a session's member of that client is another
    /// user's.
    pub fn attach(
        self: &Arc<Self>,
        sessions: &[String],
        mode: Mode,
    ) -> Result<(Attached, String), Taken> {
        let watch = Arc::new(Watch::default());
        let mut out = Vec::new();
        let frames = {
            let mut inner = lock(&self.inner);
            let client = match &mode {
                Mode::Join { client, user } => {
                    if sessions
                        .iter()
                        .any(|s| inner.roster.taken(s, client, user.as_deref()))
                    {
                        return Err(Taken);
                    }
                    if !self.closed.load(Ordering::Acquire) {
                        for s in sessions {
                            let changes =
                                inner.roster.join(s, client, user.as_deref(), now_ms())?;
                            out.extend(self.deliver(&mut inner, changes));
                        }
                    }
                    Some(client.clone())
                }
                Mode::Watch => None,
            };
            let mut frames = String::new();
            for s in sessions {
                inner
                    .watchers
                    .entry(s.clone())
                    .or_default()
                    .push(watch.clone());
                frames.push_str(&encode::presence_frame(&inner.roster.view(s)));
            }
            self.count_members(&inner);
            drop(inner);
            (frames, client)
        };
        self.send(out);
        let (frames, client) = frames;
        Ok((
            Attached {
                presence: self.clone(),
                watch,
                sessions: sessions.to_vec(),
                client,
            },
            frames,
        ))
    }

    fn detach(&self, a: &Attached) {
        let mut out = Vec::new();
        {
            let mut inner = lock(&self.inner);
            for s in &a.sessions {
                if let Some(w) = inner.watchers.get_mut(s) {
                    w.retain(|w| !Arc::ptr_eq(w, &a.watch));
                    if w.is_empty() {
                        inner.watchers.remove(s);
                    }
                }
                if let (Some(client), false) = (&a.client, self.closed.load(Ordering::Acquire)) {
                    let changes = inner.roster.close(s, client, Instant::now());
                    out.extend(self.deliver(&mut inner, changes));
                }
            }
            self.count_members(&inner);
        }
        self.send(out);
    }

    /// Fresh rosters of a stream whose queue went stale (taken under the lock, so the diffs
    /// queued after them apply on top).
    fn fresh(&self, a: &Attached) -> Bytes {
        let inner = lock(&self.inner);
        a.watch.reset();
        let mut frames = String::new();
        for s in &a.sessions {
            frames.push_str(&encode::presence_frame(&inner.roster.view(s)));
        }
        Bytes::from(frames)
    }

    /// The roster of `session` now.
    pub fn view(&self, session: &str) -> RosterView {
        lock(&self.inner).roster.view(session)
    }

    /// Replaces a member's state (the caller checked its size).
    pub fn set_state(
        &self,
        session: &str,
        client: &str,
        user: Option<&str>,
        state: Map<String, Value>,
    ) -> Result<(), UpdateError> {
        let out = {
            let mut inner = lock(&self.inner);
            let changes =
                inner
                    .roster
                    .set_state(session, client, user, state, Instant::now(), now_ms())?;
            self.deliver(&mut inner, changes)
        };
        self.metrics
            .presence_updates
            .fetch_add(1, Ordering::Relaxed);
        self.send(out);
        Ok(())
    }

    /// This server stops: its members leave at once, here and on the other servers.
    pub fn shutdown(&self) {
        if self.closed.swap(true, Ordering::AcqRel) {
            return;
        }
        let out = {
            let mut inner = lock(&self.inner);
            let changes = inner.roster.shutdown();
            let out = self.deliver(&mut inner, changes);
            self.count_members(&inner);
            out
        };
        self.send(out);
    }

    /// Queues `changes`' diffs on the watching streams; answers its messages for the others.
    fn deliver(&self, inner: &mut Inner, changes: Changes) -> Vec<Message> {
        for diff in &changes.diffs {
            let Some(watchers) = inner.watchers.get(&diff.session_id) else {
                continue;
            };
            let frame = Bytes::from(encode::presence_diff_frame(diff));
            for w in watchers {
                w.push(frame.clone());
            }
            self.metrics
                .presence_frames
                .fetch_add(watchers.len() as u64, Ordering::Relaxed);
        }
        changes.out
    }

    fn count_members(&self, inner: &Inner) {
        self.metrics
            .presence_members
            .store(inner.roster.members() as u64, Ordering::Relaxed);
    }

    fn send(&self, out: Vec<Message>) {
        if out.is_empty() || !self.cluster.shared() {
            return;
        }
        for payload in cluster::payloads(self.node, out) {
            self.cluster.send(payload);
        }
    }

    fn tick(&self) {
        let out = {
            let mut inner = lock(&self.inner);
            let changes = inner.roster.tick(Instant::now());
            let out = self.deliver(&mut inner, changes);
            self.count_members(&inner);
            out
        };
        self.send(out);
    }

    fn renew(&self) {
        if self.closed.load(Ordering::Acquire) {
            return;
        }
        let holds = lock(&self.inner).roster.holds();
        self.send(holds);
    }
}

impl BroadcastSink for Presence {
    fn heard(&self, payload: &str) {
        let envelope: Envelope = match serde_json::from_str(payload) {
            Ok(e) => e,
            Err(e) => {
                tracing::warn!(error = %e, "presence: an unreadable message from another server");
                return;
            }
        };
        if envelope.n == self.node || self.closed.load(Ordering::Acquire) {
            return;
        }
        let out = {
            let mut inner = lock(&self.inner);
            let mut out = Vec::new();
            let now = Instant::now();
            for m in envelope.m {
                let changes = inner.roster.heard(envelope.n, m, now);
                out.extend(self.deliver(&mut inner, changes));
            }
            self.count_members(&inner);
            out
        };
        self.send(out);
    }

    fn hearing(&self, heard: bool) {
        let was = self.hearing.swap(heard, Ordering::AcqRel);
        if heard && !was {
            // Whatever was said while not hearing is unknown: ask for everyone's members.
            self.send(vec![Message::Hello]);
            self.renew();
        } else if !heard && was {
            tracing::warn!(
                "presence: this server cannot hear the others now; their members stay as last \
                 heard until their TTL, and joins elsewhere reach this server's streams once it \
                 hears again"
            );
        }
    }
}

/// Ticks `presence` until it is gone or shut down; renews its members every `renew`.
async fn run(presence: Weak<Presence>, renew: Duration) {
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut renewed = Instant::now();
    loop {
        tick.tick().await;
        let Some(p) = presence.upgrade() else { return };
        if p.closed.load(Ordering::Acquire) {
            return;
        }
        p.tick();
        if renewed.elapsed() >= renew {
            renewed = Instant::now();
            p.renew();
        }
    }
}

#[cfg(test)]
mod tests;
