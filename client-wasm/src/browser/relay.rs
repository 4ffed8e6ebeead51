//! The relay channel `turnstream-relay:<baseUrl>` between the tabs of one origin, carrying
//! [`Relay`] messages as JSON text; anything on it that does not read is ignored.

use crate::browser::{listener, On};
use std::rc::Rc;

use wasm_bindgen::prelude::*;
use web_sys::{BroadcastChannel, MessageEvent};

use super::json;
use crate::codec;
use crate::relay::Relay;

pub(crate) struct RelayChannel {
    channel: BroadcastChannel,
    _on_message: Closure<dyn FnMut(web_sys::Event)>,
}

impl RelayChannel {
    /// `None` where the browser has no BroadcastChannel: each tab then streams for itself.
    pub(crate) fn open(base_url: &str, on: Rc<dyn On<Relay>>) -> Option<Self> {
        let channel = BroadcastChannel::new(&crate::cat(&["turnstream-relay:", base_url])).ok()?;
        let on_message = listener(Box::new(move |e: web_sys::Event| {
            if let Some(msg) = e
                .dyn_ref::<MessageEvent>()
                .and_then(|m| m.data().as_string())
                .and_then(|s| json::read(&s, codec::relay))
            {
                on.on(msg);
            }
        }));
        channel.set_onmessage(Some(on_message.as_ref().unchecked_ref()));
        Some(RelayChannel {
            channel,
            _on_message: on_message,
        })
    }

    pub(crate) fn post(&self, msg: &Relay) {
        // A closing channel throws; the tabs that stay notice the silence.
        let _ = self
            .channel
            .post_message(&JsValue::from_str(&codec::relay_json(msg)));
    }
}

impl Drop for RelayChannel {
    fn drop(&mut self) {
        self.channel.set_onmessage(None);
        self.channel.close();
    }
}
