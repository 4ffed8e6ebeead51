//! The stream's frames: the snapshot of the active turns it opens with, and each journaled
//! event after it, folded into the turns' progress and finals.

use turnstream_protocol::{Event, EventBody, MessageStatus, Snapshot};

use super::entry::{Final, FinalSource, Progress};
use super::keyed::Keys;
use super::Conversation;

/// Where an active turn's reply goes in the tree: the `reply_id` and `parent_id` a v1.2
/// server's snapshot gives each active turn (absent from an older server's).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TurnPlace {
    pub turn_id: String,
    pub reply_id: Option<String>,
    pub parent_id: Option<String>,
}

impl Conversation {
    /// The active turns at the snapshot's cursor (first frame of a stream opened with snapshot=1).
    pub fn apply_snapshot(&mut self, s: &Snapshot) -> bool {
        self.apply_snapshot_placed(s, &[])
    }

    /// A snapshot with where its active turns' replies go (`places`, by turn): a turn that
    /// writes a new version of a message (a regeneration, an edit's reply) is shown as that
    /// version at once. The leaf is left to the journal and history: a snapshot cannot tell
    /// whether a switch it skipped moved the leaf after the turn was queued.
    pub fn apply_snapshot_placed(&mut self, s: &Snapshot, places: &[TurnPlace]) -> bool {
        let Some(seq) = self.position(&s.cursor) else {
            return false;
        };
        let mut changed = false;
        let mut active = Keys::new();
        for at in &s.active_turns {
            if at.session_id != self.session_id || at.state.is_terminal() {
                continue;
            }
            active.add(at.turn_id.clone());
            // Still running as of the stream's position: the stream will carry its end.
            self.left_open.remove(&at.turn_id);
            let a = self.turn_mut(&at.turn_id, &mut changed);
            changed |= a.note_anchor(Some(seq));
            if !a.is_final() {
                changed |= a.offer_progress(&Progress::from_active(at, seq));
            }
            let place = places.iter().find(|p| p.turn_id == at.turn_id);
            if let Some(TurnPlace {
                reply_id: Some(reply),
                parent_id: Some(parent),
                ..
            }) = place
            {
                // (Its user message is in what was read: nothing to reread.)
                let unread = self.branch_unread;
                changed |= self.place_turn(&at.turn_id, Some(reply), Some(parent), seq);
                self.branch_unread = unread;
            }
        }
        // A turn we think is open, started at or before the snapshot, but not in it: it ended
        // without our hearing of it. Ask the server.
        let missing: Vec<String> = self
            .turns
            .values()
            .filter(|a| !a.is_final() && !active.contains(&a.turn_id))
            .filter(|a| self.introduced_at(a).is_none_or(|i| i <= seq))
            .map(|a| a.turn_id.clone())
            .collect();
        // (One already being checked stays handed out: its answer is on the way.)
        self.to_check.extend(missing);
        self.touch(changed)
    }

    /// One journaled event from the stream.
    pub fn apply_event(&mut self, e: &Event) -> bool {
        if e.session_id != self.session_id {
            return false;
        }
        let Some(seq) = self.position(&e.id) else {
            return false;
        };
        self.high_water = Some(self.high_water.map_or(seq, |h| h.max(seq)));
        let mut changed = false;
        match &e.body {
            EventBody::MessageReceived { message } => {
                changed |= self.absorb_message(message, Some(seq));
            }
            EventBody::BranchChanged { leaf_id } => {
                self.editing = None;
                changed |= self.move_leaf(leaf_id, seq);
                self.branch_unread |= self.node_parent(leaf_id).is_none();
            }
            EventBody::TurnQueued {
                reply_id: Some(reply_id),
                parent_id,
                ..
            } => {
                let Some(turn_id) = &e.turn_id else {
                    return false;
                };
                changed |= self.place_turn(turn_id, Some(reply_id), parent_id.as_deref(), seq);
                changed |= self.move_leaf(reply_id, seq);
            }
            EventBody::TurnEnded {
                state,
                message,
                error,
            } => {
                let Some(turn_id) = e
                    .turn_id
                    .clone()
                    .or_else(|| message.as_ref().and_then(|m| m.turn_id.clone()))
                else {
                    return false;
                };
                let truncated = e.truncated.iter().any(|t| t.field == "message.content");
                let a = self.turn_mut(&turn_id, &mut changed);
                changed |= a.note_anchor(Some(seq));
                // A replayed end of a turn settled by history must not claim its progress is
                // complete through here: the thinking and tools before it were never folded.
                if !a.is_final() {
                    changed |= a.progress.apply(seq, &e.body);
                }
                let fin = match message {
                    Some(m) => Final {
                        status: m.status,
                        source: FinalSource::Message,
                        message_id: Some(m.message_id.clone()),
                        // A cut reply: the deltas we folded are the whole text (deltas are never
                        // cut). History's copy replaces it either way.
                        content: if truncated && a.progress.text.len() > m.content.len() {
                            a.progress.text.clone()
                        } else {
                            m.content.clone()
                        },
                        truncated,
                        error: error.clone(),
                    },
                    None => Final {
                        status: MessageStatus::for_terminal(*state),
                        source: FinalSource::State,
                        message_id: None,
                        content: a.progress.text.clone(),
                        truncated: false,
                        error: error.clone(),
                    },
                };
                changed |= a.offer_final(fin);
                self.settled(&turn_id);
            }
            body => {
                let Some(turn_id) = &e.turn_id else {
                    return false;
                };
                let a = self.turn_mut(turn_id, &mut changed);
                changed |= a.note_anchor(Some(seq));
                // A settled turn takes no more progress: its reply is the written message.
                if !a.is_final() {
                    changed |= a.progress.apply(seq, body);
                }
            }
        }
        self.touch(changed)
    }
}
