//! The cache of a session: what the SDK keeps between page loads (IndexedDB) and hands between
//! tabs, how a conversation writes it (whole, or bounded to its newest positions) and joins it.

use std::collections::BinaryHeap;

use serde::{Deserialize, Serialize};

use super::branch_actions::BranchAction;
use super::entry::{AssistantEntry, UserEntry, UserStatus};
use super::Conversation;

/// Version of [`CacheRecord`]; a cache of another version is ignored.
pub const CACHE_VERSION: u32 = 2;

/// What the SDK keeps of a session between page loads (IndexedDB) and hands between tabs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CacheRecord {
    pub version: u32,
    pub session_id: String,
    /// Journal the server-derived entries belong to.
    pub epoch: Option<String>,
    pub users: Vec<UserEntry>,
    pub turns: Vec<AssistantEntry>,
    /// This browser's changes of branch (v1.2), waiting or posted; omitted when none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub branch_actions: Vec<BranchAction>,
}

impl Conversation {
    /// A cache written by an earlier page load or a sibling tab.
    pub fn apply_cache(&mut self, rec: &CacheRecord) -> bool {
        if rec.version != CACHE_VERSION || rec.session_id != self.session_id {
            return false;
        }
        let same_journal = match (&self.epoch, &rec.epoch) {
            (Some(a), Some(b)) => a == b,
            _ => true,
        };
        if self.epoch.is_none() {
            self.epoch.clone_from(&rec.epoch);
        }
        let mut changed = self.join_branch_actions(&rec.branch_actions);
        for u in &rec.users {
            // Entries of a journal that no longer exists would be ghosts; unsent ones are still ours.
            if same_journal || u.status != UserStatus::Sent {
                changed |= self.join_user(u.clone());
            }
        }
        if same_journal {
            for t in &rec.turns {
                changed |= self.join_turn(t);
                if !self.turns.get(&t.turn_id).is_some_and(|a| a.is_final()) {
                    // Cached mid-turn: its end may have happened while no page listened.
                    self.to_check.add(t.turn_id.clone());
                    self.left_open.add(t.turn_id.clone());
                }
            }
        }
        self.touch(changed)
    }

    pub fn to_cache(&self) -> CacheRecord {
        CacheRecord {
            version: CACHE_VERSION,
            session_id: self.session_id.clone(),
            epoch: self.epoch.clone(),
            users: self.users.values().cloned().collect(),
            turns: self.turns.values().cloned().collect(),
            branch_actions: self.cached_branch_actions(),
        }
    }

    /// The cache, keeping only the newest `keep` journal positions (a message and its reply share
    /// one): unsent messages and open turns are always kept, as they are what a reload must
    /// not lose. Older bubbles come back from history when its page reaches them.
    pub fn to_cache_bounded(&self, keep: usize) -> CacheRecord {
        if self.users.len() + self.turns.len() <= keep {
            // Fewer entries than positions to keep: nothing to drop.
            return self.to_cache();
        }
        let mut anchors: Vec<i64> = self.users.values().filter_map(|u| u.seq).collect();
        anchors.extend(self.turns.values().filter_map(|a| self.introduced_at(a)));
        // (A heap sort: far less code in the package than `sort_unstable`.)
        let mut anchors = BinaryHeap::from(anchors).into_sorted_vec();
        anchors.dedup();
        let Some(&cutoff) = anchors.len().checked_sub(keep).and_then(|i| anchors.get(i)) else {
            return self.to_cache();
        };
        CacheRecord {
            version: CACHE_VERSION,
            session_id: self.session_id.clone(),
            epoch: self.epoch.clone(),
            users: self
                .users
                .values()
                .filter(|u| u.seq.is_none_or(|s| s >= cutoff))
                .cloned()
                .collect(),
            turns: self
                .turns
                .values()
                .filter(|a| !a.is_final() || self.introduced_at(a).is_none_or(|s| s >= cutoff))
                .cloned()
                .collect(),
            branch_actions: self.cached_branch_actions(),
        }
    }
}
