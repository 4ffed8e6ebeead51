//! What the tabs of one origin tell each other on the relay channel `turnstream-relay:<baseUrl>`:
//! the leader's streams and every frame they deliver, and each tab's sessions with how far it
//! has read them. Written and read by [`crate::codec`] (`relay_json`, `relay`).

/// One stream the leader holds.
#[derive(Debug, Clone, PartialEq)]
pub struct StreamState {
    /// Names this stream (a reopened stream gets a new one): a tab's session is covered by a
    /// stream only if it was there when the stream started.
    pub sid: String,
    pub sessions: Vec<String>,
    /// The position it started from.
    pub from: String,
    /// The `EventSource` is open.
    pub open: bool,
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
    /// A frame of stream `sid`: `kind` is `snapshot`, `event` or `resync`.
    Frame {
        sid: String,
        kind: String,
        data: String,
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
}
