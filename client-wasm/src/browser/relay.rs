//! The relay channel `turnstream-relay:<baseUrl>` between the tabs of one origin: the leader's
//! streams and every frame they deliver, and each tab's sessions with how far it has read. Messages
//! are plain objects (structured clone); anything on the channel that does not read is ignored.

use std::rc::Rc;

use js_sys::{Array, Object, Reflect};
use wasm_bindgen::prelude::*;
use web_sys::{BroadcastChannel, MessageEvent};

/// One stream the leader holds.
#[derive(Clone)]
pub(crate) struct StreamState {
    /// Names this stream (a reopened stream gets a new one): a tab's session is covered by a
    /// stream only if it was there when the stream started.
    pub(crate) sid: String,
    pub(crate) sessions: Vec<String>,
    /// The position it started from.
    pub(crate) from: String,
    /// The `EventSource` is open.
    pub(crate) open: bool,
}

/// One session a tab shows, and how far it has read it.
#[derive(Clone)]
pub(crate) struct Want {
    pub(crate) session: String,
    /// The position the tab's view is complete up to.
    pub(crate) pos: String,
    /// The stream it follows, if any.
    pub(crate) covered: Option<String>,
}

pub(crate) enum Relay {
    /// The leader's streams, sent on every change and every second (a heartbeat).
    State {
        generation: f64,
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
        generation: f64,
        wants: Vec<Want>,
    },
    /// A tab leaves.
    Bye { tab: String },
}

fn set(o: &Object, key: &str, v: &JsValue) {
    let _ = Reflect::set(o, &JsValue::from_str(key), v);
}

fn get(o: &JsValue, key: &str) -> Option<JsValue> {
    Reflect::get(o, &JsValue::from_str(key))
        .ok()
        .filter(|v| !v.is_undefined() && !v.is_null())
}

fn text(o: &JsValue, key: &str) -> Option<String> {
    get(o, key)?.as_string()
}

fn strings(items: &[String]) -> Array {
    items.iter().map(|s| JsValue::from_str(s)).collect()
}

fn list(o: &JsValue, key: &str) -> Option<Vec<JsValue>> {
    let v = get(o, key)?;
    Array::is_array(&v).then(|| v.unchecked_into::<Array>().iter().collect())
}

impl Relay {
    fn to_js(&self) -> JsValue {
        let o = Object::new();
        match self {
            Relay::State {
                generation,
                streams,
                hidden,
            } => {
                set(&o, "t", &"state".into());
                set(&o, "hidden", &(*hidden).into());
                set(&o, "gen", &(*generation).into());
                let arr: Array = streams
                    .iter()
                    .map(|s| {
                        let js = Object::new();
                        set(&js, "sid", &s.sid.as_str().into());
                        set(&js, "sessions", &strings(&s.sessions));
                        set(&js, "from", &s.from.as_str().into());
                        set(&js, "open", &s.open.into());
                        JsValue::from(js)
                    })
                    .collect();
                set(&o, "streams", &arr);
            }
            Relay::Frame {
                sid,
                kind,
                data,
                last,
            } => {
                set(&o, "t", &"frame".into());
                set(&o, "sid", &sid.as_str().into());
                set(&o, "kind", &kind.as_str().into());
                set(&o, "data", &data.as_str().into());
                set(&o, "last", &last.as_str().into());
            }
            Relay::Want {
                tab,
                generation,
                wants,
            } => {
                set(&o, "t", &"want".into());
                set(&o, "tab", &tab.as_str().into());
                set(&o, "gen", &(*generation).into());
                let arr: Array = wants
                    .iter()
                    .map(|w| {
                        let js = Object::new();
                        set(&js, "session", &w.session.as_str().into());
                        set(&js, "pos", &w.pos.as_str().into());
                        if let Some(c) = &w.covered {
                            set(&js, "covered", &c.as_str().into());
                        }
                        JsValue::from(js)
                    })
                    .collect();
                set(&o, "wants", &arr);
            }
            Relay::Bye { tab } => {
                set(&o, "t", &"bye".into());
                set(&o, "tab", &tab.as_str().into());
            }
        }
        o.into()
    }

    fn from_js(v: &JsValue) -> Option<Relay> {
        Some(match text(v, "t")?.as_str() {
            "state" => Relay::State {
                generation: get(v, "gen")?.as_f64()?,
                streams: list(v, "streams")?
                    .iter()
                    .map(|s| {
                        Some(StreamState {
                            sid: text(s, "sid")?,
                            sessions: list(s, "sessions")?
                                .iter()
                                .map(JsValue::as_string)
                                .collect::<Option<_>>()?,
                            from: text(s, "from")?,
                            open: get(s, "open")?.as_bool()?,
                        })
                    })
                    .collect::<Option<_>>()?,
                hidden: get(v, "hidden").and_then(|h| h.as_bool()).unwrap_or(false),
            },
            "frame" => Relay::Frame {
                sid: text(v, "sid")?,
                kind: text(v, "kind")?,
                data: text(v, "data")?,
                last: text(v, "last").unwrap_or_default(),
            },
            "want" => Relay::Want {
                tab: text(v, "tab")?,
                generation: get(v, "gen")?.as_f64()?,
                wants: list(v, "wants")?
                    .iter()
                    .map(|w| {
                        Some(Want {
                            session: text(w, "session")?,
                            pos: text(w, "pos")?,
                            covered: text(w, "covered"),
                        })
                    })
                    .collect::<Option<_>>()?,
            },
            "bye" => Relay::Bye {
                tab: text(v, "tab")?,
            },
            _ => return None,
        })
    }
}

pub(crate) struct RelayChannel {
    channel: BroadcastChannel,
    _on_message: Closure<dyn FnMut(MessageEvent)>,
}

impl RelayChannel {
    /// `None` where the browser has no BroadcastChannel: each tab then streams for itself.
    pub(crate) fn open(base_url: &str, on: Rc<dyn Fn(Relay)>) -> Option<Self> {
        let channel = BroadcastChannel::new(&["turnstream-relay:", base_url].concat()).ok()?;
        let on_message = Closure::<dyn FnMut(MessageEvent)>::new(move |e: MessageEvent| {
            if let Some(msg) = Relay::from_js(&e.data()) {
                on(msg);
            }
        });
        channel.set_onmessage(Some(on_message.as_ref().unchecked_ref()));
        Some(RelayChannel {
            channel,
            _on_message: on_message,
        })
    }

    pub(crate) fn post(&self, msg: &Relay) {
        // A closing channel throws; the tabs that stay notice the silence.
        let _ = self.channel.post_message(&msg.to_js());
    }
}

impl Drop for RelayChannel {
    fn drop(&mut self) {
        self.channel.set_onmessage(None);
        self.channel.close();
    }
}
