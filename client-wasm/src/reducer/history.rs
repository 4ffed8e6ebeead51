//! History pages (`GET /history`): the newest page, which says where the journal is and where
//! its leaf is, and older pages read while scrolling back.

use turnstream_protocol::{Cursor, HistoryResponse};

use super::entry::UserStatus;
use super::Conversation;

impl Conversation {
    /// A page of history; its cursor is the journal position it describes.
    pub fn apply_history(&mut self, h: &HistoryResponse) -> bool {
        if h.session_id != self.session_id {
            return false;
        }
        let mut changed = !self.history_loaded;
        self.history_loaded = true;
        if let Ok(cursor) = h.cursor.parse::<Cursor>() {
            changed |= self.adopt_epoch(&cursor.epoch);
        }
        if let (Some(leaf), Some(seq)) = (&h.leaf_id, self.epoch_seq(&h.cursor)) {
            changed |= self.move_leaf(leaf, seq);
        }
        self.note_unwritten(h, true);
        for m in &h.messages {
            changed |= self.absorb_message(m, None);
        }
        // The first page read says where paging back starts; later reloads of the newest page
        // (a resync, a conflict) do not move it back to the newest.
        if self.oldest.is_none() && self.has_more != h.has_more {
            self.has_more = h.has_more;
            changed = true;
        }
        if self.oldest.is_none() {
            self.oldest = h.messages.first().map(|m| m.message_id.clone());
        }
        self.touch(changed)
    }

    /// A page of history older than what we have (`GET /history?before=`); returns how many
    /// entries it added. Messages already shown are merged, never repeated.
    pub fn apply_older(&mut self, h: &HistoryResponse) -> usize {
        if h.session_id != self.session_id {
            return 0;
        }
        let before = self.users.len() + self.turns.len();
        let mut changed = false;
        self.note_unwritten(h, false);
        for m in &h.messages {
            changed |= self.absorb_message(m, None);
        }
        if let Some(first) = h.messages.first() {
            self.oldest = Some(first.message_id.clone());
        }
        let has_more = h.has_more && !h.messages.is_empty();
        changed |= self.has_more != has_more;
        self.has_more = has_more;
        self.touch(changed);
        self.users.len() + self.turns.len() - before
    }

    /// Where the next older page starts (`before`), while older messages exist.
    pub fn older_than(&self) -> Option<&str> {
        self.oldest.as_deref().filter(|_| self.has_more)
    }

    /// Takes the journal of a history; when it is a new journal (the server's database was
    /// recreated) drops everything that came from the old one, keeping only unsent messages.
    fn adopt_epoch(&mut self, epoch: &str) -> bool {
        match &self.epoch {
            Some(e) if e == epoch => false,
            None => {
                self.epoch = Some(epoch.to_owned());
                false
            }
            Some(_) => {
                self.epoch = Some(epoch.to_owned());
                let had = !self.turns.is_empty()
                    || self.users.values().any(|u| u.status == UserStatus::Sent);
                self.users.retain(|u| u.status != UserStatus::Sent);
                self.turns.clear();
                self.turn_user.clear();
                self.to_check.clear();
                self.checking.clear();
                self.left_open.clear();
                self.high_water = None;
                self.oldest = None;
                self.has_more = false;
                if had {
                    self.gap = true;
                }
                had
            }
        }
    }
}
