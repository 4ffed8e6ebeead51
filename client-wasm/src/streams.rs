//! Which streams the leader tab holds for the sessions every tab of its origin shows: at most
//! [`MAX_SESSIONS`] to a stream, each session on one stream, and a stream reopened only when
//! what it carries changes or a tab's view does not follow it. Plain Rust; `browser/hub.rs`
//! opens and closes what [`plan`] says.

use crate::relay::{at_or_before, StreamState};

/// Sessions on one stream (the server's limit).
pub const MAX_SESSIONS: usize = 32;

/// One session a tab shows, as the leader plans for it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Wanted<'a> {
    pub session: &'a str,
    /// The position the tab's view is complete up to.
    pub pos: &'a str,
    /// The stream the view follows, if any.
    pub covered: Option<&'a str>,
    /// The tab spoke after the leader's latest streams (its generation is the leader's): its
    /// `covered` is about them. An older word asks for no reopen; the tab speaks again.
    pub current: bool,
}

/// A stream the leader holds. `S` is the tab's handle on it (an `EventSource` in the browser),
/// which [`plan`] carries along and leaves to the caller.
#[derive(Debug, Clone, PartialEq)]
pub struct Held<S> {
    /// Its name (empty until first planned), sessions and start, as the relay tells them.
    pub state: StreamState,
    /// The resume position: the last event id delivered (or `from`).
    pub last: String,
    pub stream: Option<S>,
    /// Failed opens since it last opened.
    pub attempt: u32,
}

impl<S> Held<S> {
    /// The stream as the relay tells it: with how far it has gone.
    pub fn said(&self) -> StreamState {
        StreamState {
            last: Some(self.last.clone()),
            ..self.state.clone()
        }
    }
}

/// What [`plan`] changed.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// A stream closed or (re)opens: the tabs must be told.
    pub changed: bool,
    /// The streams that (re)start, by index: each has a new name, its `from` and `last` where
    /// it starts, and is not open; the caller closes what it had of it and opens it.
    pub opening: Vec<usize>,
}

/// Makes `held` the streams that give every tab what it `wants`, naming each stream that
/// (re)opens with `name`.
///
/// Held streams keep their order and their sessions (a session never moves to another stream),
/// less those nobody wants any more. A session on no stream joins the first stream with room
/// (one just emptied included), or a new stream after the others; a stream left with no
/// session closes. So there are ceil(sessions / 32) streams when none were held or one had to
/// be added, and otherwise no more than were held: streams are not merged as sessions leave,
/// which would reopen streams other tabs follow.
///
/// A stream reopens when its sessions changed, or when a current tab's view of one of them
/// does not follow it. It starts at the lowest position needed (a current uncovered view's, or
/// that of the first tab wanting a session new to it), and a held one no later than its `last`.
pub fn plan<S>(
    held: &mut Vec<Held<S>>,
    wants: &[Wanted<'_>],
    mut name: impl FnMut() -> String,
) -> Plan {
    let mut dirty = vec![false; held.len()];
    // Sessions nobody shows any more leave their stream.
    for (i, g) in held.iter_mut().enumerate() {
        let before = g.state.sessions.len();
        g.state
            .sessions
            .retain(|s| wants.iter().any(|w| w.session == s));
        dirty[i] |= g.state.sessions.len() != before;
    }
    // The position each stream must (re)start from, for what is not covered.
    let mut need: Vec<Option<String>> = vec![None; held.len()];
    for w in wants {
        match held
            .iter()
            .position(|g| g.state.sessions.iter().any(|s| s == w.session))
        {
            Some(i) => {
                let ok = w.covered == Some(held[i].state.sid.as_str());
                if !ok && w.current {
                    need[i] = lowest(need[i].take(), w.pos);
                    dirty[i] = true;
                }
            }
            None => {
                let i = match held
                    .iter()
                    .position(|g| g.state.sessions.len() < MAX_SESSIONS)
                {
                    Some(i) => i,
                    None => {
                        held.push(Held {
                            state: StreamState {
                                sid: String::new(),
                                sessions: Vec::new(),
                                from: w.pos.to_owned(),
                                last: None,
                                open: false,
                            },
                            last: w.pos.to_owned(),
                            stream: None,
                            attempt: 0,
                        });
                        dirty.push(true);
                        need.push(None);
                        held.len() - 1
                    }
                };
                held[i].state.sessions.push(w.session.to_owned());
                need[i] = lowest(need[i].take(), w.pos);
                dirty[i] = true;
            }
        }
    }
    let mut plan = Plan {
        changed: false,
        opening: Vec::new(),
    };
    let mut i = 0;
    while i < held.len() {
        if held[i].state.sessions.is_empty() {
            held.remove(i);
            dirty.remove(i);
            need.remove(i);
            plan.changed = true;
            continue;
        }
        if dirty[i] {
            let g = &mut held[i];
            let from = match need[i].take() {
                // A new stream starts where it is needed.
                Some(n) if g.state.sid.is_empty() => n,
                Some(n) => lowest(Some(n), &g.last).unwrap_or_default(),
                None => g.last.clone(),
            };
            g.state.sid = name();
            g.state.from = from.clone();
            g.state.open = false;
            g.last = from;
            plan.changed = true;
            plan.opening.push(i);
        }
        i += 1;
    }
    plan
}

/// The lower of two positions; `a` when they do not compare (see [`at_or_before`]).
fn lowest(a: Option<String>, b: &str) -> Option<String> {
    match a {
        Some(a) if at_or_before(&a, b) => Some(a),
        _ => Some(b.to_owned()),
    }
}

#[cfg(all(test, not(target_arch = "wasm32")))]
mod tests;
