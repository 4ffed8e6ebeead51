//! Branches (contract v1.2): edits go through the outbox as messages with a `parent_id` (see
//! `Client::send`);
//! regenerations and switches wait in the conversation's queue of branch actions, stored with
//! the cache (a reload still has them) and posted once in order with the outbox (so offline they
//! are applied when the server is reachable again); a regeneration carries the
//! `client_request_id` drawn when it was queued, so a retry, from this page or a reloaded one,
//! never makes a second version. A move of the active leaf to a branch not read makes the tab
//! read the active branch's history.

use crate::reducer::Conversation;
use std::rc::Rc;

use crate::browser::spawn_local;

use super::{warn, Client};
use crate::browser::env;

impl Client {
    /// The user message a regeneration of entry `key` answers again.
    pub(crate) fn regenerate_target(&self, key: &str) -> Option<String> {
        self.conv.borrow().regenerate_target(key)
    }

    /// The message id of version `index` of entry `key`.
    pub(crate) fn sibling_id(&self, key: &str, index: usize) -> Option<String> {
        self.conv.borrow().sibling_id(key, index)
    }

    /// Queues a regeneration of user message `target` (`regenerate`) or a switch to leaf
    /// `target`, stored before it is posted; false when `target` names nothing.
    pub(crate) fn queue_branch(self: &Rc<Self>, regenerate: bool, target: Option<String>) -> bool {
        let Some(target) = target else {
            return false;
        };
        let id = env::new_client_message_id();
        self.conv
            .borrow_mut()
            .queue_branch_action(&id, regenerate, &target);
        let me = self.clone();
        spawn_local(async move {
            // On disk before the first attempt: a reload from here on still posts it.
            me.save_now().await;
            me.kick_outbox();
        });
        true
    }

    /// Reads the active branch's history after the stream moved the leaf to one not read.
    pub(super) fn reread_branch(self: &Rc<Self>) {
        if !self.conv.borrow_mut().take_branch_unread() {
            return;
        }
        let me = self.clone();
        spawn_local(async move {
            match me.endpoint.history(me.history_limit, None).await {
                Ok((history, _)) => {
                    me.update(&mut |c: &mut Conversation| c.apply_history(&history));
                }
                Err(e) => {
                    warn("could not read the branch", &e.message());
                }
            }
        });
    }
}
