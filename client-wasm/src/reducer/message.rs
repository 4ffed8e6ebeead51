//! A journaled message (a history page's, or the stream's `message_received`), joined into the
//! entry of its user message or of the turn whose reply it is.

use turnstream_protocol::{Message, Role as WireRole};

use super::entry::{Final, FinalSource, Node, UserEntry, UserStatus};
use super::Conversation;

impl Conversation {
    pub(super) fn absorb_message(&mut self, m: &Message, seq_hint: Option<i64>) -> bool {
        let seq = self.epoch_seq(&m.event_id).or(seq_hint);
        match m.role {
            WireRole::User => {
                let key = m
                    .client_message_id
                    .clone()
                    .unwrap_or_else(|| m.message_id.clone());
                let incoming = UserEntry {
                    key,
                    client_message_id: m.client_message_id.clone(),
                    message_id: Some(m.message_id.clone()),
                    turn_id: m.turn_id.clone(),
                    content: m.content.clone(),
                    created_at: m.created_at,
                    seq,
                    status: UserStatus::Sent,
                    error: None,
                    from_server: true,
                    send_order: 0,
                    author: m.author.clone(),
                    attachments: m.attachments.clone(),
                    on_busy: None,
                    node: Node {
                        id: None,
                        parent_id: m.parent_id.clone(),
                        placed: true,
                        siblings: m
                            .siblings
                            .as_ref()
                            .map(|s| s.ids.clone())
                            .unwrap_or_default(),
                        elsewhere: false,
                    },
                    edit: false,
                };
                let mut changed = self.join_user(incoming);
                // Its reply's bubble, at once. (On a branch read from history, the turns of
                // replies not written yet come from the snapshot: this one's may be another
                // version's.)
                if let (Some(turn_id), true) =
                    (&m.turn_id, seq_hint.is_some() || self.leaf.is_none())
                {
                    self.turn_mut(turn_id, &mut changed);
                }
                changed
            }
            WireRole::Assistant => {
                let Some(turn_id) = &m.turn_id else {
                    return false;
                };
                let mut changed = false;
                // A turn cached mid-turn that ended while no page listened is recovered,
                // whether its status check or history answers first.
                let unheard = self.left_open.contains(turn_id);
                let a = self.turn_mut(turn_id, &mut changed);
                let was_final = a.is_final();
                changed |= a.note_anchor(seq);
                let before = a.node.clone();
                a.node.join(&Node {
                    id: Some(m.message_id.clone()),
                    parent_id: m.parent_id.clone(),
                    placed: true,
                    siblings: m
                        .siblings
                        .as_ref()
                        .map(|s| s.ids.clone())
                        .unwrap_or_default(),
                    elsewhere: false,
                });
                changed |= a.node != before;
                changed |= a.offer_final(Final {
                    status: m.status,
                    source: FinalSource::Message,
                    message_id: Some(m.message_id.clone()),
                    content: m.content.clone(),
                    truncated: false,
                    error: None,
                });
                // The reply keeps what its turn asked and how it was answered (v1.2).
                for r in &m.requests {
                    match a
                        .progress
                        .requests
                        .iter_mut()
                        .find(|o| o.request_id == r.request_id)
                    {
                        None => {
                            a.progress.requests.push(r.clone());
                            changed = true;
                        }
                        Some(o) if o.answer.is_none() && r.answer.is_some() => {
                            o.answer.clone_from(&r.answer);
                            o.answered_by.clone_from(&r.answered_by);
                            changed = true;
                        }
                        Some(_) => {}
                    }
                }
                if unheard && !was_final && !a.recovered {
                    a.recovered = true;
                    changed = true;
                }
                self.settled(turn_id);
                changed
            }
        }
    }
}
