//! The BroadcastChannel `turnstream:<baseUrl>:<sessionId>` between sibling tabs. Messages are JSON
//! [`TabMessage`]s; the sender never hears its own, and the receiver merges them by id like any
//! other source, whatever the server has said meanwhile.

use crate::browser::{listener, On};
use std::rc::Rc;

use wasm_bindgen::prelude::*;
use web_sys::{BroadcastChannel, MessageEvent};

use super::json;
use crate::codec;
use crate::tabs::TabMessage;

pub(crate) struct Channel {
    channel: BroadcastChannel,
    _on_message: Closure<dyn FnMut(web_sys::Event)>,
}

impl Channel {
    /// `None` where the browser has no BroadcastChannel: tabs then meet only through the server.
    pub(crate) fn open(
        base_url: &str,
        session_id: &str,
        on: Rc<dyn On<TabMessage>>,
    ) -> Option<Self> {
        let channel =
            BroadcastChannel::new(&crate::cat(&["turnstream:", base_url, ":", session_id])).ok()?;
        let on_message = listener(Box::new(move |e: web_sys::Event| {
            // Anything else on the channel (another SDK version, a stray page) is not ours.
            if let Some(msg) = e
                .dyn_ref::<MessageEvent>()
                .and_then(|m| m.data().as_string())
                .and_then(|s| json::read(&s, codec::tab_message))
            {
                on.on(msg);
            }
        }));
        channel.set_onmessage(Some(on_message.as_ref().unchecked_ref()));
        Some(Channel {
            channel,
            _on_message: on_message,
        })
    }

    pub(crate) fn post(&self, msg: &TabMessage) {
        let json = codec::tab_message_json(msg);
        // A closed channel (tab unloading) throws; the fact still reaches siblings through the
        // server or the shared cache.
        let _ = self.channel.post_message(&JsValue::from_str(&json));
    }
}

impl Drop for Channel {
    fn drop(&mut self) {
        self.channel.set_onmessage(None);
        self.channel.close();
    }
}
