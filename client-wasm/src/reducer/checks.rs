//! Turn-status checks (`GET /api/turns/{turn}`): the turns whose end the journal did not tell,
//! handed out once each, and the answers that settle them.

use turnstream_protocol::{MessageStatus, TurnInfo};

use super::entry::{Final, FinalSource, Progress};
use super::Conversation;

impl Conversation {
    /// Turns to ask `GET /api/turns/{turn}` about; each is handed out once until answered or
    /// [`Conversation::check_failed`].
    pub fn take_turns_to_check(&mut self) -> Vec<String> {
        let out: Vec<String> = self
            .to_check
            .keys()
            .filter(|t| !self.checking.contains(t))
            .filter(|t| self.turns.get(t).is_some_and(|a| !a.is_final()))
            .cloned()
            .collect();
        self.checking.extend(out.iter().cloned());
        out
    }

    /// A status check could not reach the server: hand the turn out again next time.
    pub fn check_failed(&mut self, turn_id: &str) {
        self.checking.remove(turn_id);
    }

    /// The answer of `GET /api/turns/{turn}`; `None` when the server does not know the turn (404).
    pub fn apply_turn_info(&mut self, turn_id: &str, info: Option<&TurnInfo>) -> bool {
        self.checking.remove(turn_id);
        let mut changed = false;
        let Some(a) = self.turns.get_mut(turn_id) else {
            self.to_check.remove(turn_id);
            return false;
        };
        match info {
            None => {
                if !a.is_final() {
                    changed |= a.offer_final(Final {
                        status: MessageStatus::Interrupted,
                        source: FinalSource::Lost,
                        message_id: None,
                        content: a.progress.text.clone(),
                        truncated: false,
                        error: Some("the server no longer knows this turn".to_owned()),
                    });
                    a.recovered = true;
                    self.gap = true;
                }
            }
            Some(i) if i.session_id != self.session_id => return false,
            Some(i) if i.state.is_terminal() => {
                let end = i
                    .message
                    .as_ref()
                    .and_then(|m| self.epoch_seq(&m.event_id))
                    .unwrap_or(i64::MAX);
                let Some(a) = self.turns.get_mut(turn_id) else {
                    return false;
                };
                let fin = match &i.message {
                    Some(m) => Final {
                        status: m.status,
                        source: FinalSource::Message,
                        message_id: Some(m.message_id.clone()),
                        content: m.content.clone(),
                        truncated: false,
                        error: i.error.clone(),
                    },
                    None => Final {
                        status: MessageStatus::for_terminal(i.state),
                        source: FinalSource::State,
                        message_id: None,
                        content: i.text.clone(),
                        truncated: false,
                        error: i.error.clone(),
                    },
                };
                let was_final = a.is_final();
                changed |= a.offer_final(fin);
                // The status answer carries the whole fold of the turn: its thinking and tools.
                changed |= a.offer_progress(&Progress {
                    through: Some(end),
                    running: true,
                    text: i.text.clone(),
                    thinking: i.thinking.clone(),
                    tools: i.tools.clone(),
                    requests: i.requests.clone(),
                });
                if !was_final {
                    a.recovered = true;
                    changed = true;
                }
            }
            // Queued or running: the stream carries it on.
            Some(_) => {}
        }
        self.to_check.remove(turn_id);
        self.left_open.remove(turn_id);
        self.touch(changed)
    }
}
