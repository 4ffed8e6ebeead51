//! One `EventSource` on `/api/stream`, turned into frames for the hub. Journaled events and the
//! snapshot go straight to a handler (synchronously, in arrival order); listeners are removed and
//! the source closed on drop, so a replaced stream can never deliver into the view again.

use crate::browser::{listener, Listen, On};
use std::rc::Rc;

use turnstream_protocol::{
    Event, ResyncRequired, Snapshot, EVENT_KINDS, RESYNC_EVENT, SNAPSHOT_EVENT, TOKEN_EXPIRED_EVENT,
};
use wasm_bindgen::prelude::*;
use web_sys::{EventSource, MessageEvent};

use super::json;
use crate::codec;
use crate::reducer::TurnPlace;

/// The stream's presence frames (contract v1.3).
pub(crate) const PRESENCE_EVENTS: [&str; 2] = ["presence", "presence_diff"];

/// What the stream tells the client.
pub(crate) enum Signal {
    /// The stream covering the session is delivering: we are live.
    Open,
    /// Shared: one parse serves every session of the tab. With its active turns' places.
    Snapshot(Rc<(Snapshot, Vec<TurnPlace>)>),
    /// A journaled event; `last_event_id` is the stream's resume position after it.
    Event(Rc<Event>, String),
    /// The server cannot serve our position; the source is already closed.
    Resync(ResyncRequired),
    /// The stream is not delivering (reconnecting, failed, or the tab relaying it went quiet).
    Retrying,
    /// A frame that did not parse (logged, otherwise ignored).
    Garbled(&'static str),
    /// The session's presence roster changed (contract v1.3): its members as `state.presence`
    /// shows them (JSON, this browser's member first) and their count.
    Presence(Rc<str>, i64),
}

/// What one `EventSource` says, unparsed: the hub relays these to sibling tabs as they came.
pub(crate) enum Frame {
    /// The response started.
    Open,
    /// The `data` of a snapshot frame.
    Snapshot(String),
    /// The `data` of a journaled event and the source's `lastEventId` after it.
    Event(String, String),
    /// The `data` of a resync frame; the source is already closed.
    Resync(String),
    /// The stream's token expired; the source is already closed.
    TokenExpired,
    /// The browser is reconnecting by itself (it will send `Last-Event-ID`).
    Retrying,
    /// The browser gave up (an HTTP error answer): the source must be reopened.
    Failed,
    /// A presence frame (`presence` or `presence_diff`, no `id:`) and its `data`.
    Presence(&'static str, String),
}

impl Frame {
    /// The signal a data frame carries (`None` for the others).
    pub(crate) fn parse(kind: &str, data: &str, last: &str) -> Option<Signal> {
        Some(match kind {
            "snapshot" => match json::read(data, codec::snapshot_placed) {
                Some(s) => Signal::Snapshot(Rc::new(s)),
                None => Signal::Garbled(SNAPSHOT_EVENT),
            },
            "resync" => match json::read(data, codec::resync) {
                Some(r) => Signal::Resync(r),
                None => Signal::Garbled(RESYNC_EVENT),
            },
            "event" => match json::read(data, codec::event) {
                Some(ev) => {
                    let last = if last.is_empty() {
                        ev.id.clone()
                    } else {
                        last.to_owned()
                    };
                    Signal::Event(Rc::new(ev), last)
                }
                None => Signal::Garbled("event"),
            },
            _ => return None,
        })
    }
}

type Listener = Closure<dyn FnMut(web_sys::Event)>;

pub(crate) struct Stream {
    source: EventSource,
    listeners: Vec<(&'static str, Listener)>,
}

impl Stream {
    pub(crate) fn open(url: &str, on: Rc<dyn On<Frame>>) -> Result<Stream, JsValue> {
        let source = EventSource::new(url)?;
        let mut stream = Stream {
            source,
            listeners: Vec::new(),
        };

        let h = on.clone();
        stream.listen("open", move |_| h.on(Frame::Open));

        let h = on.clone();
        stream.listen(SNAPSHOT_EVENT, move |e| h.on(Frame::Snapshot(data(&e))));

        for kind in EVENT_KINDS {
            let h = on.clone();
            stream.listen(kind, move |e| {
                let last = e
                    .dyn_ref::<MessageEvent>()
                    .map(|m| m.last_event_id())
                    .unwrap_or_default();
                h.on(Frame::Event(data(&e), last))
            });
        }

        for kind in PRESENCE_EVENTS {
            let h = on.clone();
            stream.listen(kind, move |e| h.on(Frame::Presence(kind, data(&e))));
        }

        let h = on.clone();
        let src = stream.source.clone();
        stream.listen(RESYNC_EVENT, move |e| {
            // Close here, inside the handler: otherwise the browser reconnects with the same
            // dead Last-Event-ID and is told the same thing forever.
            src.close();
            h.on(Frame::Resync(data(&e)))
        });

        let h = on.clone();
        let src = stream.source.clone();
        stream.listen(TOKEN_EXPIRED_EVENT, move |_| {
            // The same: reconnecting with the expired token in the URL would only be refused.
            src.close();
            h.on(Frame::TokenExpired)
        });

        let h = on;
        let src = stream.source.clone();
        stream.listen("error", move |_| {
            h.on(if src.ready_state() == EventSource::CLOSED {
                Frame::Failed
            } else {
                Frame::Retrying
            })
        });
        Ok(stream)
    }

    fn listen(&mut self, kind: &'static str, f: impl FnMut(web_sys::Event) + 'static) {
        self.listen_boxed(kind, Box::new(f));
    }

    /// Boxed: one copy of this code for every listener (package size).
    fn listen_boxed(&mut self, kind: &'static str, f: Box<dyn Listen>) {
        let closure = listener(f);
        if self
            .source
            .add_event_listener_with_callback(kind, closure.as_ref().unchecked_ref())
            .is_ok()
        {
            self.listeners.push((kind, closure));
        }
    }
}

fn data(e: &web_sys::Event) -> String {
    e.dyn_ref::<MessageEvent>()
        .and_then(|m| m.data().as_string())
        .unwrap_or_default()
}

impl Drop for Stream {
    fn drop(&mut self) {
        self.source.close();
        for (kind, closure) in &self.listeners {
            let _ = self
                .source
                .remove_event_listener_with_callback(kind, closure.as_ref().unchecked_ref());
        }
    }
}
