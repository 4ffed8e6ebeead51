//! The connection loop: history, then the session's stream from its cursor through the tab's hub
//! (history reloaded on a resync), network events and turn-status checks.

use crate::reducer::Conversation;
use std::rc::Rc;

use crate::browser::spawn_local;

use super::{warn, Client};
use crate::browser::env::{self, GlobalListener};
use crate::browser::http::HttpError;
use crate::browser::hub::Membership;
use crate::browser::stream::Signal;
use crate::codec;
use crate::reducer::Connection;
use crate::retry::backoff_ms;
use crate::tabs::TabMessage;

/// Why the stream loop handed control back to the connection loop.
pub(super) enum Exit {
    Resync,
    Closed,
}

/// What the stream's callbacks tell the connection loop.
#[derive(Clone, Copy)]
pub(super) enum LoopSignal {
    Resync,
}

impl Client {
    // ----- history and stream -----

    /// History, then the stream from its cursor; again after a resync; until closed.
    pub(super) async fn run(self: Rc<Self>) {
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
            let cursor = match self.endpoint.history(self.history_limit, None).await {
                Ok((history, cursor)) => {
                    attempt = 0;
                    self.update(&mut |c: &mut Conversation| c.apply_history(&history));
                    self.check_turns();
                    cursor
                }
                Err(e) => {
                    if attempt == 0 {
                        warn("could not load history, retrying", &e.message());
                    }
                    match &e {
                        // Refused even with a fresh token: say so, keep the view, keep trying.
                        HttpError::Status(r) if matches!(r.status, 401 | 403) => {
                            self.update(&mut |c: &mut Conversation| c.set_unauthorized(&r.error));
                        }
                        _ => self.set_connection(self.unreachable()),
                    }
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
                    self.update(&mut |c: &mut Conversation| {
                        c.mark_gap() | c.set_connection(Connection::Resyncing)
                    });
                }
                Exit::Closed => return,
            }
        }
    }

    /// Follows the session from `cursor` through the tab's hub (which streams, or hears the
    /// tab that does) until the server asks for a resync or the client closes.
    async fn stream_from(self: &Rc<Self>, cursor: String) -> Exit {
        self.delivered.set(false);
        self.signal.set(None);
        if let Some(m) = self.membership.borrow().as_ref() {
            m.set_position(Some(cursor));
        }
        loop {
            if self.closed.get() {
                return Exit::Closed;
            }
            if let Some(LoopSignal::Resync) = self.signal.take() {
                return Exit::Resync;
            }
            self.signal_waker.sleep(60_000).await;
        }
    }

    pub(super) fn on_stream(self: &Rc<Self>, signal: Signal) {
        if self.closed.get() {
            return;
        }
        match signal {
            Signal::Open => {
                self.ever_live.set(true);
                self.set_connection(if env::online() {
                    Connection::Live
                } else {
                    Connection::Offline
                });
                // The server is reachable again: whatever waits for it should try now.
                self.net_waker.wake_all();
                self.kick_outbox();
                self.check_turns();
            }
            Signal::Snapshot(s) => {
                self.delivered.set(true);
                self.update(&mut |c: &mut Conversation| c.apply_snapshot_placed(&s.0, &s.1));
                self.check_turns();
            }
            Signal::Event(e, _) => {
                self.delivered.set(true);
                self.update(&mut |c: &mut Conversation| c.apply_event(&e));
                self.reread_branch();
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
            Signal::Garbled(kind) => warn("ignored a frame that did not parse", kind),
            Signal::Presence(members, count) => self.show_presence(&members, count),
        }
    }

    /// The state to show while the server cannot be reached.
    pub(super) fn unreachable(&self) -> Connection {
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

    pub(super) fn listen_to_network(self: &Rc<Self>) {
        let weak = Rc::downgrade(self);
        let online = GlobalListener::new("online", move |_| {
            if let Some(me) = weak.upgrade() {
                let live = me
                    .membership
                    .borrow()
                    .as_ref()
                    .is_some_and(Membership::is_live);
                me.set_connection(if live {
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
                // (The hub closes the stream, and resumes it when the network is back.)
                me.set_connection(Connection::Offline);
            }
        });
        self.globals.borrow_mut().extend([online, offline]);
    }

    // ----- turn-status checks -----

    /// Asks the server about every turn the journal left open in our view (cached mid-turn,
    /// or missing from a snapshot). Failures are handed out again at the next trigger.
    pub(super) fn check_turns(self: &Rc<Self>) {
        if self.closed.get() {
            return;
        }
        let turns = self.conv.borrow_mut().take_turns_to_check();
        for turn_id in turns {
            let me = self.clone();
            spawn_local(async move {
                match me.endpoint.turn(&turn_id).await {
                    Ok(info) => {
                        me.update(&mut |c: &mut Conversation| {
                            c.apply_turn_info(&turn_id, info.as_ref())
                        });
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
}
