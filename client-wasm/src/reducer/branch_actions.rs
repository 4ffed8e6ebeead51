//! This browser's regenerations and switches of branch (v1.2): the queue the outbox posts in
//! order, and the copies of it that the cache and sibling tabs carry.

use serde::{Deserialize, Serialize};

use super::Conversation;

/// A regeneration or a switch asked for in this browser (v1.2): queued, kept in the cache so a
/// reload still posts it, posted once in order by the outbox, then kept a while as `done` so
/// joining an older copy of the cache does not bring it back.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BranchAction {
    /// Drawn when queued: a regeneration's `client_request_id` (the server answers a retry
    /// with the first answer), and what joins tabs' copies.
    pub id: String,
    /// `true`: `POST /api/messages/{target}/regenerate`; `false`: a switch to leaf `target`.
    pub regenerate: bool,
    pub target: String,
    /// Posted (or refused for good).
    #[serde(default)]
    pub done: bool,
}

/// Posted branch actions kept (as tombstones) in the cache.
const DONE_KEPT: usize = 16;

impl Conversation {
    /// Queues a regeneration of user message `message_id` (`regenerate`) or a switch to leaf
    /// `message_id`, under `id` (a regeneration's `client_request_id`).
    pub fn queue_branch_action(&mut self, id: &str, regenerate: bool, message_id: &str) {
        self.branch_actions.push(BranchAction {
            id: id.to_owned(),
            regenerate,
            target: message_id.to_owned(),
            done: false,
        });
    }

    /// The oldest branch action not posted yet.
    pub fn next_branch_action(&self) -> Option<BranchAction> {
        self.branch_actions.iter().find(|a| !a.done).cloned()
    }

    /// Branch action `id` was posted (or refused for good).
    pub fn branch_action_done(&mut self, id: &str) {
        for a in &mut self.branch_actions {
            a.done |= a.id == id;
        }
    }

    /// Joins another copy's branch actions (a cache, a sibling tab's): unknown ones queue
    /// after ours, and one posted in either copy is posted.
    pub(super) fn join_branch_actions(&mut self, theirs: &[BranchAction]) -> bool {
        let mut changed = false;
        for t in theirs {
            match self.branch_actions.iter_mut().find(|a| a.id == t.id) {
                Some(a) => {
                    changed |= t.done && !a.done;
                    a.done |= t.done;
                }
                None => {
                    self.branch_actions.push(t.clone());
                    changed |= !t.done;
                }
            }
        }
        changed
    }

    /// What the cache keeps of the branch actions: those waiting, and the newest posted.
    pub(super) fn cached_branch_actions(&self) -> Vec<BranchAction> {
        let done = self.branch_actions.iter().filter(|a| a.done).count();
        let mut skip = done.saturating_sub(DONE_KEPT);
        self.branch_actions
            .iter()
            .filter(|a| {
                let drop = a.done && skip > 0;
                skip -= usize::from(drop);
                !drop
            })
            .cloned()
            .collect()
    }
}
