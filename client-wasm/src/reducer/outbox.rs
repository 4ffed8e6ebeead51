//! What the outbox posts, as the conversation hands it out: messages and answers still to post,
//! and what a sibling tab posted, as the shared cache tells it.

use turnstream_protocol::{Attachment, OnBusy, RawJson};

use super::cache::{CacheRecord, CACHE_VERSION};
use super::entry::{UserEntry, UserStatus};
use super::Conversation;

/// A message still to post, as the outbox hands it out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outgoing {
    pub client_message_id: String,
    pub content: String,
    pub attachments: Vec<Attachment>,
    pub on_busy: Option<OnBusy>,
    /// An edit's `parent_id` (`Some(None)`: a new first message); `None` follows the active leaf.
    pub parent_id: Option<Option<String>>,
}

impl Outgoing {
    fn of(u: &UserEntry) -> Outgoing {
        Outgoing {
            client_message_id: u.key.clone(),
            content: u.content.clone(),
            attachments: u.attachments.clone(),
            on_busy: u.on_busy,
            parent_id: u.edit.then(|| u.node.parent_id.clone()),
        }
    }
}

/// An answer still to post (`POST /api/turns/{turn}/input`), as the outbox hands it out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutgoingAnswer {
    pub turn_id: String,
    pub request_id: String,
    pub answer: RawJson,
}

impl Conversation {
    /// Messages still to post, oldest first.
    pub fn outbox(&self) -> Vec<Outgoing> {
        let mut pending: Vec<&UserEntry> = self
            .users
            .values()
            .filter(|u| u.status == UserStatus::Sending)
            .collect();
        // Keys are unique, so an unstable sort orders them all the same (with less code).
        pending.sort_unstable_by(|a, b| {
            (a.created_at, a.send_order, &a.key).cmp(&(b.created_at, b.send_order, &b.key))
        });
        pending.into_iter().map(Outgoing::of).collect()
    }

    /// The oldest message still to post whose client_message_id `allowed` accepts: the first
    /// of [`Conversation::outbox`] that does (without sorting them all).
    pub fn next_to_post(&self, allowed: impl Fn(&str) -> bool) -> Option<Outgoing> {
        self.users
            .values()
            .filter(|u| u.status == UserStatus::Sending && allowed(&u.key))
            .min_by(|a, b| {
                (a.created_at, a.send_order, &a.key).cmp(&(b.created_at, b.send_order, &b.key))
            })
            .map(Outgoing::of)
    }

    /// Whether a message is still waiting for the server.
    pub fn is_sending(&self, client_message_id: &str) -> bool {
        self.users
            .get(client_message_id)
            .is_some_and(|u| u.status == UserStatus::Sending)
    }

    /// What a sibling tab posted, as the stored record tells it: the statuses of the messages,
    /// the `sent` marks of the answers and the branch actions done that this view holds too
    /// (nothing else is taken from the record). Read by a tab granted the outbox's lock before
    /// it posts: the tab that held the lock stored them before letting it go, while its word on
    /// the channel may still be on its way (IndexedDB's transactions are ordered; a lock's grant
    /// and a channel's message are not).
    pub fn join_posted(&mut self, rec: &CacheRecord) -> bool {
        if rec.version != CACHE_VERSION || rec.session_id != self.session_id {
            return false;
        }
        if matches!((&self.epoch, &rec.epoch), (Some(a), Some(b)) if a != b) {
            return false;
        }
        let mut changed = self.join_branch_actions(&rec.branch_actions);
        for u in &rec.users {
            if self
                .users
                .get(&u.key)
                .is_some_and(|mine| mine.status < u.status)
            {
                changed |= self.join_user(u.clone());
            }
        }
        for t in &rec.turns {
            if let Some(mine) = self.turns.get_mut(&t.turn_id) {
                for a in t.answers.iter().filter(|a| a.sent) {
                    changed |= mine.offer_answer(&a.request_id, &a.answer, true);
                }
            }
        }
        self.touch(changed)
    }
}
