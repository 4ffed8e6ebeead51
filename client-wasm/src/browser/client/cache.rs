//! The cache writes: at most every [`SAVE_EVERY_MS`] while the view changes, at once for the
//! outbox.

use std::rc::Rc;

use wasm_bindgen_futures::spawn_local;

use super::{warn, Client};
use crate::browser::env::Waker;

/// How often at most the cache is written while a turn streams, in milliseconds. The outbox is
/// written at once; anything else lost to a crash inside this window comes back from the server.
const SAVE_EVERY_MS: u32 = 300;

impl Client {
    pub(super) fn schedule_save(self: &Rc<Self>) {
        if !self.storage.is_persistent() || self.save_scheduled.replace(true) {
            return;
        }
        let me = self.clone();
        spawn_local(async move {
            Waker::default().sleep(SAVE_EVERY_MS).await;
            me.save_scheduled.set(false);
            me.save_now().await;
        });
    }

    pub(super) async fn save_now(&self) {
        if !self.storage.is_persistent() {
            return;
        }
        let conv = self.conv.borrow().clone();
        if let Err(e) = self.storage.save(&conv).await {
            warn("could not write the cache", &e);
        }
    }
}
