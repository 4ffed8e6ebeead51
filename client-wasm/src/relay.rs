//! What the tabs of one origin tell each other on the relay channel `turnstream-relay:<baseUrl>`:
//! the leader's streams and every frame they deliver, and each tab's sessions with how far it
//! has read them. Written and read by [`crate::codec`] (`relay_json`, `relay`).

use turnstream_protocol::Cursor;

/// One stream the leader holds.
#[derive(Debug, Clone, PartialEq)]
pub struct StreamState {
    /// Names this stream (a reopened stream gets a new one): a tab's session is covered by a
    /// stream only if it was there when the stream started.
    pub sid: String,
    pub sessions: Vec<String>,
    /// The position it started from.
    pub from: String,
    /// The position of the last frame it relayed (`from` before any); `None` from an older
    /// leader that does not say.
    pub last: Option<String>,
    /// The `EventSource` is open.
    pub open: bool,
}

impl StreamState {
    /// This is stream `sid`, and it carries `session`.
    pub fn carries(&self, sid: &str, session: &str) -> bool {
        self.sid == sid && self.sessions.iter().any(|s| s == session)
    }
}

/// One session a tab shows, and how far it has read it.
#[derive(Debug, Clone, PartialEq)]
pub struct Want {
    pub session: String,
    /// The position the tab's view is complete up to.
    pub pos: String,
    /// The stream it follows, if any.
    pub covered: Option<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Relay {
    /// The leader's streams, sent on every change and every second (a heartbeat).
    State {
        generation: i64,
        streams: Vec<StreamState>,
        /// The leader's page is hidden (its timers run late).
        hidden: bool,
    },
    /// A frame of stream `sid`: `kind` is `snapshot`, `event` or `resync`. `prev` is the
    /// stream's position before it (`None` from an older leader), `last` after it.
    Frame {
        sid: String,
        kind: String,
        data: String,
        prev: Option<String>,
        last: String,
    },
    /// A tab's sessions, sent on every change and every second; `generation` is the newest
    /// leader state it has read.
    Want {
        tab: String,
        generation: i64,
        wants: Vec<Want>,
    },
    /// A tab leaves.
    Bye { tab: String },
    /// A tab sets presence state (contract v1.3) for the browser's member in `session`: the
    /// keys of the JSON object `state`, which the leader merges into the browser's state and
    /// posts, so that the state of every tab is one.
    Presence { session: String, state: String },
}

/// `a <= b` as journal positions (cursor texts); true across journals, and for text that is no
/// cursor (the stream's resync sorts those out).
pub fn at_or_before(a: &str, b: &str) -> bool {
    match (a.parse::<Cursor>(), b.parse::<Cursor>()) {
        (Ok(a), Ok(b)) => a.epoch != b.epoch || a.sequence <= b.sequence,
        _ => true,
    }
}

/// How far one session of a tab has read the leader's streams, and which stream it follows.
///
/// The rule that keeps a tab complete, whenever it joins: a frame is delivered to a session only
/// when the session's view already holds everything the stream delivered before that frame
/// (`prev`, the stream's position before it, is at or before the view's position). A frame whose
/// `prev` is past the view means frames were missed (they went out before the tab was listening,
/// or before its history was read): the session stops following and asks the leader to stream
/// from its own position again. The leader's heartbeat says how far each stream has gone, so a
/// missed frame is noticed even when nothing follows it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Follow {
    /// The position the view is complete up to; `None` until history was read.
    pub pos: Option<String>,
    /// The stream the view is complete with: every frame of it after `pos` reaches the view.
    pub covered: Option<String>,
}

/// What a tab does with a frame of a stream that carries its session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fit {
    /// Hand it to the view (events the view holds already fold once).
    Deliver,
    /// Nothing to do (no view yet, or a frame of another stream from an older leader).
    Ignore,
    /// Frames were missed: stream again from the view's position.
    Missed,
}

impl Follow {
    /// Starts over from `pos` (history was read there), following no stream yet.
    pub fn reset(&mut self, pos: Option<String>) {
        self.pos = pos;
        self.covered = None;
    }

    /// The leader's `streams` as they stand, for the view of `session`: it follows the one
    /// carrying the session when it is complete up to where that stream has gone (see
    /// [`Follow::state`]). `known`: the streams this tab had heard of already.
    pub fn cover(&mut self, session: &str, streams: &[StreamState], known: &[String]) -> Fit {
        match streams
            .iter()
            .find(|s| s.sessions.iter().any(|x| x == session))
        {
            Some(s) => self.state(s, !known.contains(&s.sid)),
            None => Fit::Ignore,
        }
    }

    /// A frame of stream `sid` that moved it from `prev` to `last` (`last` empty for a frame that
    /// does not move it, as a snapshot). `prev` is `None` from a leader that does not say it.
    pub fn frame(&mut self, sid: &str, prev: Option<&str>, last: &str) -> Fit {
        let Some(pos) = &self.pos else {
            return Fit::Ignore;
        };
        let fits = match prev {
            Some(prev) => at_or_before(prev, pos),
            None if self.covered.as_deref() == Some(sid) => true,
            None => return Fit::Ignore,
        };
        if !fits {
            self.covered = None;
            return Fit::Missed;
        }
        self.covered = Some(sid.to_owned());
        if !last.is_empty() && !at_or_before(last, pos) {
            self.pos = Some(last.to_owned());
        }
        Fit::Deliver
    }

    /// The leader says where stream `s` (carrying this session) stands. `fresh`: the stream is
    /// new to this tab (for a leader that does not say `last`: then it covers only a view it
    /// started at or before). Returns `Fit::Missed` when the stream went past the view without it.
    pub fn state(&mut self, s: &StreamState, fresh: bool) -> Fit {
        let Some(pos) = &self.pos else {
            return Fit::Ignore;
        };
        let following = self.covered.as_deref() == Some(s.sid.as_str());
        match &s.last {
            Some(last) if at_or_before(last, pos) => {
                self.covered = Some(s.sid.clone());
                Fit::Deliver
            }
            Some(_) => {
                self.covered = None;
                Fit::Missed
            }
            None if following => Fit::Deliver,
            None if fresh && at_or_before(&s.from, pos) => {
                self.covered = Some(s.sid.clone());
                Fit::Deliver
            }
            None => Fit::Ignore,
        }
    }
}

#[cfg(all(test, not(target_arch = "wasm32")))]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const S: &str = "s";

    fn at(id: u32) -> String {
        format!("e1-{id}")
    }

    fn stream(sid: &str, from: u32, last: Option<u32>) -> StreamState {
        StreamState {
            sid: sid.into(),
            sessions: vec![S.into(), "t".into()],
            from: at(from),
            last: last.map(at),
            open: true,
        }
    }

    /// What the leader tells the tabs, in the order a BroadcastChannel keeps.
    #[derive(Debug, Clone)]
    enum Msg {
        Frame { sid: String, prev: u32, id: u32 },
        State(StreamState),
    }

    /// The leader's stream `sid` from `from` over `events` (id, of session S?), with a heartbeat
    /// after each frame where `beats` says so; a heartbeat first (the stream's announcement).
    fn relayed(sid: &str, from: u32, events: &[(u32, bool)], beats: &[bool]) -> Vec<Msg> {
        let mut out = vec![Msg::State(stream(sid, from, Some(from)))];
        let mut last = from;
        for (i, &(id, _)) in events.iter().enumerate().filter(|(_, e)| e.0 > from) {
            out.push(Msg::Frame {
                sid: sid.into(),
                prev: last,
                id,
            });
            last = id;
            if beats.get(i).copied().unwrap_or(false) {
                out.push(Msg::State(stream(sid, from, Some(last))));
            }
        }
        out.push(Msg::State(stream(sid, from, Some(last))));
        out
    }

    /// Plays `msgs` to a tab whose history was read at `pos`, from message `join` on (what came
    /// before went out before it listened). Returns the ids of session S delivered to the view,
    /// and whether it found it missed frames.
    fn play(f: &mut Follow, msgs: &[Msg], events: &[(u32, bool)]) -> (Vec<u32>, bool) {
        let mut got = Vec::new();
        let mut missed = false;
        for m in msgs {
            let fit = match m {
                Msg::Frame { sid, prev, id } => {
                    let fit = f.frame(sid, Some(&at(*prev)), &at(*id));
                    let ours = events.iter().any(|&(e, s)| e == *id && s);
                    if fit == Fit::Deliver && ours {
                        got.push(*id);
                    }
                    fit
                }
                Msg::State(s) => f.state(s, true),
            };
            missed |= fit == Fit::Missed;
        }
        (got, missed)
    }

    proptest! {
        /// A tab that reads history at any position and starts listening at any moment ends
        /// with every event of its session after that position exactly once: from the stream it
        /// joined, or, when it missed frames, from the stream the leader reopens at its position.
        #[test]
        fn a_joining_tab_gets_every_event_after_its_history_once(
            kinds in proptest::collection::vec(any::<bool>(), 1..30),
            beats in proptest::collection::vec(any::<bool>(), 30),
            join in 0usize..80,
            read in 0u32..31,
        ) {
            let events: Vec<(u32, bool)> =
                kinds.iter().enumerate().map(|(i, &s)| (i as u32 + 1, s)).collect();
            let n = events.len() as u32;
            let read = read.min(n);
            let msgs = relayed("a", 0, &events, &beats);
            // What it hears from `join` on, and the leader's next heartbeat.
            let join = join.min(msgs.len());
            let heard = [&msgs[join..], &msgs[msgs.len() - 1..]].concat();
            let mut f = Follow::default();
            f.reset(Some(at(read)));
            let (mut got, missed) = play(&mut f, &heard, &events);
            if missed {
                prop_assert_eq!(f.covered.clone(), None);
                // The leader streams again from the tab's position.
                let from: u32 = f.pos.as_deref().and_then(|p| p.strip_prefix("e1-"))
                    .and_then(|p| p.parse().ok()).unwrap_or(0);
                let again = relayed("b", from, &events, &beats);
                let (more, missed_again) = play(&mut f, &again, &events);
                prop_assert!(!missed_again, "a stream from the tab's own position fits it");
                got.extend(more);
            }
            let want: Vec<u32> = events.iter().filter(|e| e.1 && e.0 > read).map(|e| e.0).collect();
            got.retain(|&id| id > read);
            prop_assert_eq!(got, want, "every event after the history's position, once, in order");
            prop_assert!(f.covered.is_some(), "following a stream at the end");
        }
    }

    #[test]
    fn a_heartbeat_past_the_view_is_a_miss_even_when_no_frame_follows() {
        // The tab read history at 3; the stream had relayed 4 and 5 before it listened.
        let mut f = Follow::default();
        f.reset(Some(at(3)));
        assert_eq!(f.state(&stream("a", 0, Some(5)), true), Fit::Missed);
        assert_eq!(f.covered, None);
        // A stream at or before the view covers it.
        assert_eq!(f.state(&stream("b", 3, Some(3)), true), Fit::Deliver);
        assert_eq!(f.covered.as_deref(), Some("b"));
        // The view ahead of the stream: frames it holds already fold once, and it keeps its place.
        assert_eq!(f.frame("b", Some(&at(3)), &at(4)), Fit::Deliver);
        assert_eq!(f.pos.as_deref(), Some("e1-4"));
    }

    #[test]
    fn a_view_follows_the_stream_carrying_its_session() {
        let streams = [stream("a", 0, Some(3))];
        assert!(streams[0].carries("a", "t") && !streams[0].carries("a", "u"));
        assert!(!streams[0].carries("b", S));
        let mut f = Follow::default();
        f.reset(Some(at(3)));
        assert_eq!(
            f.cover("u", &streams, &[]),
            Fit::Ignore,
            "no stream carries it"
        );
        assert_eq!(f.covered, None);
        assert_eq!(f.cover(S, &streams, &[]), Fit::Deliver);
        assert_eq!(f.covered.as_deref(), Some("a"));
        // An older leader that does not say `last`: only a stream new to the tab covers it.
        let older = [stream("b", 2, None)];
        let mut f = Follow::default();
        f.reset(Some(at(3)));
        assert_eq!(f.cover(S, &older, &["b".into()]), Fit::Ignore);
        assert_eq!(f.cover(S, &older, &[]), Fit::Deliver);
    }

    #[test]
    fn frames_before_history_was_read_are_left_to_history() {
        let mut f = Follow::default();
        assert_eq!(f.frame("a", Some(&at(1)), &at(2)), Fit::Ignore);
        assert_eq!(f.state(&stream("a", 0, Some(2)), true), Fit::Ignore);
    }

    #[test]
    fn an_older_leader_without_positions_covers_only_from_a_stream_start() {
        let mut f = Follow::default();
        f.reset(Some(at(5)));
        let mut s = stream("a", 6, None);
        assert_eq!(f.state(&s, true), Fit::Ignore, "starts after the view");
        s.from = at(2);
        assert_eq!(
            f.state(&s, false),
            Fit::Ignore,
            "not new: it may have gone past the view"
        );
        assert_eq!(f.state(&s, true), Fit::Deliver);
        assert_eq!(f.frame("a", None, &at(7)), Fit::Deliver);
        assert_eq!(f.frame("other", None, &at(8)), Fit::Ignore);
    }
}
