//! Answers given in this browser to the agent's requests (contract v1.2): shown at once, kept
//! until the journal has them, handed to the outbox, settled by the server's verdict.

use turnstream_protocol::input::merge_answer;
use turnstream_protocol::{InputGiven, RawJson, RequestKind};

use super::entry::AssistantEntry;
use super::{Conversation, OutgoingAnswer};

impl Conversation {
    /// An answer given in this browser (`respond`) or in a sibling tab (relayed): shown at once,
    /// posted by the outbox. `sent`: the server already took it.
    pub fn answer_local(
        &mut self,
        turn_id: &str,
        request_id: &str,
        answer: &RawJson,
        sent: bool,
    ) -> bool {
        let mut created = false;
        let offered = self
            .turn_mut(turn_id, &mut created)
            .offer_answer(request_id, answer, sent);
        self.touch(created || offered)
    }

    /// The server took this browser's answer (a POST answered 200, here or in a sibling tab).
    pub fn answer_posted(&mut self, turn_id: &str, request_id: &str) -> bool {
        let changed = self.turns.get_mut(turn_id).is_some_and(|a| {
            a.answers
                .iter_mut()
                .find(|l| l.request_id == request_id)
                .is_some_and(|l| !std::mem::replace(&mut l.sent, true))
        });
        self.touch(changed)
    }

    /// The server refused this browser's answer (another was first, the turn ended, ...): it is
    /// no longer shown nor posted.
    pub fn drop_answer(&mut self, turn_id: &str, request_id: &str) -> bool {
        let Some(a) = self.turns.get_mut(turn_id) else {
            return false;
        };
        let before = a.answers.len();
        a.answers.retain(|l| l.request_id != request_id);
        let changed = a.answers.len() != before;
        self.touch(changed)
    }

    /// The answer the server recorded, as a `409 input_already_given` tells it (the journal's
    /// `input_given` says the same, later).
    pub fn apply_given(&mut self, turn_id: &str, given: &InputGiven) -> bool {
        let Some(a) = self.turns.get_mut(turn_id) else {
            return false;
        };
        let before = a.progress.requests.clone();
        merge_answer(&mut a.progress.requests, given);
        let changed = a.progress.requests != before;
        self.touch(changed)
    }

    /// The journal's answer to a request and its author, once known.
    pub fn journal_answer(
        &self,
        turn_id: &str,
        request_id: &str,
    ) -> Option<(RawJson, Option<String>)> {
        let r = self.turns.get(turn_id)?.request(request_id)?;
        Some((r.answer.clone()?, r.answered_by.clone()))
    }

    /// The answer a request already has: the journal's, else one given in this browser (by
    /// this tab or a sibling).
    pub fn given_answer(
        &self,
        turn_id: &str,
        request_id: &str,
    ) -> Option<(RawJson, Option<String>)> {
        self.journal_answer(turn_id, request_id).or_else(|| {
            let l = self.turns.get(turn_id)?.local_answer(request_id)?;
            Some((l.answer.clone(), None))
        })
    }

    /// The turn a request shown belongs to, and its kind. Request ids are unique within a turn
    /// only: an open request wins over an answered one, a later turn over an earlier one.
    pub fn find_request(&self, request_id: &str) -> Option<(String, RequestKind)> {
        let mut best: Option<(bool, Option<i64>, &AssistantEntry, RequestKind)> = None;
        for a in self.turns.values() {
            let Some(r) = a.request(request_id) else {
                continue;
            };
            let open = !a.is_final() && r.answer.is_none();
            let at = self.introduced_at(a);
            if best.as_ref().is_none_or(|b| (open, at) > (b.0, b.1)) {
                best = Some((open, at, a, r.kind));
            }
        }
        best.map(|(_, _, a, kind)| (a.turn_id.clone(), kind))
    }

    /// An answer given here that the server has not taken yet, of a turn still open.
    pub fn next_answer(&self) -> Option<OutgoingAnswer> {
        self.turns
            .values()
            .filter(|a| !a.is_final())
            .flat_map(|a| a.answers.iter().map(move |l| (a, l)))
            .find(|(a, l)| {
                // The journal's answer is this one: nothing to post.
                !l.sent
                    && a.request(&l.request_id)
                        .and_then(|r| r.answer.as_ref())
                        .is_none_or(|r| r.as_str() != l.answer.as_str())
            })
            .map(|(a, l)| OutgoingAnswer {
                turn_id: a.turn_id.clone(),
                request_id: l.request_id.clone(),
                answer: l.answer.clone(),
            })
    }

    /// Where this browser's answer stands: `Some(true)` taken by the server (or the journal
    /// has it), `Some(false)` still to post, `None` when there is none or its turn has ended
    /// without it.
    pub fn local_answer_sent(&self, turn_id: &str, request_id: &str) -> Option<bool> {
        let a = self.turns.get(turn_id)?;
        let l = a.local_answer(request_id)?;
        let recorded = a
            .request(request_id)
            .and_then(|r| r.answer.as_ref())
            .is_some_and(|r| r.as_str() == l.answer.as_str());
        if l.sent || recorded {
            return Some(true);
        }
        (!a.is_final()).then_some(false)
    }
}
