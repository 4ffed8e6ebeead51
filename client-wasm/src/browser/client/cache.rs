//! The cache writes: at most every [`SAVE_EVERY_MS`] while the view changes, at once for the
//! outbox, and at once when the page is hidden or goes away (`visibilitychange`, `pagehide`), so
//! a reload never shows less than was on screen.

use std::rc::Rc;

use crate::browser::spawn_local;

use super::{warn, Client};
use crate::browser::env::{self, GlobalListener, Waker};

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

    /// Writes the view when the page is hidden or leaves.
    pub(super) fn save_on_leave(self: &Rc<Self>) {
        if !self.storage.is_persistent() {
            return;
        }
        let weak = Rc::downgrade(self);
        let hide = GlobalListener::new("pagehide", move |_| {
            if let Some(me) = weak.upgrade() {
                me.save_at_once();
            }
        });
        let weak = Rc::downgrade(self);
        let hidden = GlobalListener::on_document("visibilitychange", move |_| {
            if let (Some(me), true) = (weak.upgrade(), env::hidden()) {
                me.save_at_once();
            }
        });
        self.globals.borrow_mut().extend([hide, hidden]);
    }

    fn save_at_once(&self) {
        if let Err(e) = self.storage.put_now(&self.conv.borrow()) {
            warn("could not write the cache", &e);
        }
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
