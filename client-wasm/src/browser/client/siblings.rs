//! The sibling-tab channel: facts the server does not stream (optimistic sends, POST answers,
//! refusals, turn-status results) told to the other tabs of this session.

use crate::browser::On;
use crate::reducer::Conversation;
use std::rc::Rc;

use super::Client;
use crate::browser::channel::Channel;
use crate::tabs::TabMessage;

impl Client {
    // ----- tabs and storage -----

    pub(super) fn open_channel(self: &Rc<Self>) {
        let weak = Rc::downgrade(self);
        let on: Rc<dyn On<TabMessage>> = Rc::new(move |msg: TabMessage| {
            if let Some(me) = weak.upgrade() {
                if me.closed.get() {
                    return;
                }
                me.update(&mut |c: &mut Conversation| msg.apply(c));
                if matches!(
                    msg,
                    TabMessage::Optimistic { .. } | TabMessage::Answer { .. }
                ) {
                    // If the sibling dies before posting it, someone must: the lock decides who.
                    me.kick_outbox();
                }
            }
        });
        *self.channel.borrow_mut() =
            Channel::open(&self.endpoint.base_url, &self.endpoint.session_id, on);
    }

    pub(super) fn broadcast(&self, msg: &TabMessage) {
        if let Some(ch) = self.channel.borrow().as_ref() {
            ch.post(msg);
        }
    }
}
