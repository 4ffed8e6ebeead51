//! One bubble of the conversation, as the reducer keeps it: what each source may say about it and
//! how two partial accounts of the same bubble are joined.
//!
//! Every field moves only forward (a status up its ladder, a progress to a later journal position,
//! a final reply from a weaker to a stronger source), so joining is order-independent: whichever
//! way history, snapshot, stream, POST responses, cache and sibling tabs interleave, the same facts
//! give the same entry.

use serde::{Deserialize, Serialize};
use turnstream_protocol::input::{merge_answer, merge_request};
use turnstream_protocol::{
    merge_tool, ActiveTurn, Attachment, EventBody, MessageStatus, OnBusy, RawJson, ToolCall,
    TurnRequest, TurnState,
};

/// Where a user message is on its way to the journal. Ordered: a later rung wins a join, so a
/// message the server accepted is `Sent` even if a stale tab still thinks it was rejected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UserStatus {
    Sending,
    Rejected,
    Sent,
}

/// Why a message or a turn did not make it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EntryError {
    pub code: String,
    pub message: String,
}

/// A user message: optimistic until the journal (or a POST response) gives it a position.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UserEntry {
    pub key: String,
    pub client_message_id: Option<String>,
    pub message_id: Option<String>,
    pub turn_id: Option<String>,
    pub content: String,
    /// Unix milliseconds: the sender's clock until the server's is known.
    pub created_at: i64,
    /// Sequence of the `message_received` event: the bubble's place in the journal.
    pub seq: Option<i64>,
    pub status: UserStatus,
    pub error: Option<EntryError>,
    /// Whether `content`/`created_at` are the server's (they then win every join).
    pub from_server: bool,
    /// Order among unsent messages of one tab (the clock alone ties within a millisecond).
    pub send_order: u64,
    /// Who wrote it, as the server recorded it (contract v1.1); `None` until the server's copy
    /// arrives, and without auth.
    #[serde(default)]
    pub author: Option<String>,
    /// The files the message refers to (contract v1.2): as sent, until the server's copy.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attachments: Vec<Attachment>,
    /// What the server does if a turn of the session is in flight when it gets the message
    /// (contract v1.2); `None` is the server's default, `enqueue`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_busy: Option<OnBusy>,
    /// Its place in the conversation tree (contract v1.2).
    #[serde(default)]
    pub node: Node,
    /// Posted with an explicit `parent_id` (`node.parent_id`, `None` for a new first message):
    /// an edit.
    #[serde(default)]
    pub edit: bool,
}

/// Where a message sits in the conversation tree (contract v1.2).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Node {
    /// A reply's message id (a user message's is its entry's `message_id`).
    pub id: Option<String>,
    /// The message it follows; `None` for a first message (when `placed`).
    pub parent_id: Option<String>,
    /// Whether `parent_id` is known: the server said it (or this browser's edit did).
    pub placed: bool,
    /// Every version's id, oldest first, as history last said; empty when it said none.
    pub siblings: Vec<String>,
    /// Not `placed`, but a history of the active branch that covers it left it out: another
    /// branch's.
    #[serde(default)]
    pub elsewhere: bool,
}

impl Node {
    /// Folds another account of the same message into this one.
    pub fn join(&mut self, other: &Node) {
        fill(&mut self.id, &other.id);
        if !self.placed && other.placed {
            self.parent_id.clone_from(&other.parent_id);
            self.placed = true;
        }
        if other.siblings.len() > self.siblings.len() {
            self.siblings.clone_from(&other.siblings);
        }
        self.elsewhere = (self.elsewhere || other.elsewhere) && !self.placed;
    }
}

impl UserEntry {
    /// Folds another account of the same message into this one.
    pub fn join(&mut self, other: &UserEntry) {
        if other.from_server && !self.from_server {
            self.content.clone_from(&other.content);
            self.created_at = other.created_at;
            self.attachments.clone_from(&other.attachments);
            self.from_server = true;
        } else if !self.from_server && self.attachments.is_empty() {
            // Two local accounts of one send (this tab's and a sibling's) carry the same files;
            // one that lacks them was told less.
            self.attachments.clone_from(&other.attachments);
        }
        if other.status > self.status {
            self.status = other.status;
        }
        if self.status == UserStatus::Rejected {
            if self.error.is_none() {
                self.error.clone_from(&other.error);
            }
        } else {
            self.error = None;
        }
        fill(&mut self.client_message_id, &other.client_message_id);
        fill(&mut self.message_id, &other.message_id);
        fill(&mut self.turn_id, &other.turn_id);
        fill(&mut self.author, &other.author);
        if self.on_busy.is_none() {
            self.on_busy = other.on_busy;
        }
        if self.seq.is_none() {
            self.seq = other.seq;
        }
        if self.send_order == 0 {
            self.send_order = other.send_order;
        }
        self.edit |= other.edit;
        self.node.join(&other.node);
    }
}

/// How much a final reply is worth: a stronger one replaces a weaker one in a join.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FinalSource {
    /// The server no longer knows the turn (turn status 404): the SDK closed it itself.
    Lost,
    /// A terminal state without the written assistant message.
    State,
    /// The assistant message the server wrote to history.
    Message,
}

/// How a turn ended, once it has.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Final {
    pub status: MessageStatus,
    pub source: FinalSource,
    pub message_id: Option<String>,
    pub content: String,
    /// The content was cut to fit an event; history carries it whole.
    pub truncated: bool,
    pub error: Option<String>,
}

impl Final {
    fn beats(&self, other: &Final) -> bool {
        self.source > other.source
            || (self.source == other.source && other.truncated && !self.truncated)
    }
}

/// A turn's progress as of one journal position: the fold of its events up to `through`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Progress {
    /// Last journal sequence folded in; `None` before any event of the turn.
    pub through: Option<i64>,
    pub running: bool,
    pub text: String,
    pub thinking: String,
    pub tools: Vec<ToolCall>,
    /// The agent's requests and their answers, as the journal has them (contract v1.2).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub requests: Vec<TurnRequest>,
}

impl Progress {
    pub fn empty() -> Self {
        Progress {
            through: None,
            running: false,
            text: String::new(),
            thinking: String::new(),
            tools: Vec::new(),
            requests: Vec::new(),
        }
    }

    /// The progress a snapshot reports at journal position `seq`.
    pub fn from_active(turn: &ActiveTurn, seq: i64) -> Self {
        Progress {
            through: Some(seq),
            // A waiting turn has started (and one of a state this SDK does not know reads as
            // running).
            running: matches!(turn.state, TurnState::Running | TurnState::Waiting),
            text: turn.text.clone(),
            thinking: turn.thinking.clone(),
            tools: turn.tools.clone(),
            requests: turn.requests.clone(),
        }
    }

    /// How much of the turn this account holds. Two accounts at one journal position differ
    /// only when one of them missed events (a tab whose relay lost some): that one holds less.
    fn extent(&self) -> usize {
        let tools: usize = self
            .tools
            .iter()
            .map(|t| {
                1 + t.input_preview.as_ref().map_or(0, String::len)
                    + t.output_preview.as_ref().map_or(0, String::len)
            })
            .sum();
        let requests: usize = self
            .requests
            .iter()
            .map(|r| 1 + usize::from(r.answer.is_some()))
            .sum();
        usize::from(self.running) + self.text.len() + self.thinking.len() + tools + requests
    }

    /// Folds the event at `seq`, unless this progress already covers it (a replayed duplicate).
    /// Events of one stream arrive in journal order, so "already covers" is a comparison.
    pub fn apply(&mut self, seq: i64, body: &EventBody) -> bool {
        if self.through.is_some_and(|t| seq <= t) {
            return false;
        }
        self.through = Some(seq);
        match body {
            EventBody::TurnStarted {} => self.running = true,
            EventBody::Thinking { delta } => self.thinking.push_str(delta),
            EventBody::ResponseDelta { delta } => self.text.push_str(delta),
            EventBody::Tool(call) => merge_tool(&mut self.tools, call),
            EventBody::InputRequested(r) => merge_request(&mut self.requests, r),
            EventBody::InputGiven(g) => merge_answer(&mut self.requests, g),
            EventBody::MessageReceived { .. }
            | EventBody::TurnQueued { .. }
            | EventBody::BranchChanged { .. }
            | EventBody::TurnEnded { .. } => {}
        }
        true
    }
}

/// The assistant side of one turn.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AssistantEntry {
    pub turn_id: String,
    /// Lowest journal sequence known to belong to this turn: its place when its user message is
    /// not known (say, older than the history page).
    pub anchor: Option<i64>,
    pub progress: Progress,
    #[serde(rename = "final")]
    pub fin: Option<Final>,
    /// Open in a cache when the page loaded, and ended while no page listened: settled by a
    /// turn-status check or by history rather than by the stream.
    pub recovered: bool,
    /// Answers given in this browser (`respond`), kept until the journal has the request's
    /// answer: shown at once, posted by the outbox.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub answers: Vec<LocalAnswer>,
    /// Its reply's place in the conversation tree (contract v1.2): `turn_queued` names both.
    #[serde(default)]
    pub node: Node,
}

/// An answer given in this browser to one of the turn's requests.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LocalAnswer {
    pub request_id: String,
    /// The answer as the server records it: `{"approved", "reason"?}`, `{"output"}`,
    /// `{"error"}` or `{"text"}`.
    pub answer: RawJson,
    /// The server took it (this tab's POST or a sibling's was answered 200).
    pub sent: bool,
}

impl AssistantEntry {
    pub fn new(turn_id: &str) -> Self {
        AssistantEntry {
            turn_id: turn_id.to_owned(),
            anchor: None,
            progress: Progress::empty(),
            fin: None,
            recovered: false,
            answers: Vec::new(),
            node: Node::default(),
        }
    }

    /// Records an answer given in this browser; the first one given stays, and `sent` only
    /// goes from false to true (for that answer).
    pub fn offer_answer(&mut self, request_id: &str, answer: &RawJson, sent: bool) -> bool {
        match self.answers.iter_mut().find(|a| a.request_id == request_id) {
            // Taken by the server is said of one answer: not of another given here first.
            Some(a) => {
                let changed = sent && !a.sent && a.answer == *answer;
                a.sent |= changed;
                changed
            }
            None => {
                self.answers.push(LocalAnswer {
                    request_id: request_id.to_owned(),
                    answer: answer.clone(),
                    sent,
                });
                true
            }
        }
    }

    /// The journal's account of a request, if it has one.
    pub fn request(&self, request_id: &str) -> Option<&TurnRequest> {
        self.progress
            .requests
            .iter()
            .find(|r| r.request_id == request_id)
    }

    /// This browser's answer to a request, if it gave one.
    pub fn local_answer(&self, request_id: &str) -> Option<&LocalAnswer> {
        self.answers.iter().find(|a| a.request_id == request_id)
    }

    /// Some request has no answer yet, neither the journal's nor this browser's.
    pub fn is_waiting(&self) -> bool {
        self.progress
            .requests
            .iter()
            .any(|r| r.answer.is_none() && self.local_answer(&r.request_id).is_none())
    }

    pub fn is_final(&self) -> bool {
        self.fin.is_some()
    }

    pub fn note_anchor(&mut self, seq: Option<i64>) -> bool {
        match (seq, self.anchor) {
            (Some(s), Some(a)) if s < a => self.anchor = Some(s),
            (Some(s), None) => self.anchor = Some(s),
            _ => return false,
        }
        true
    }

    /// Replaces the progress when `other` covers a later journal position, or the same one with
    /// more of the turn (this account missed events the other folded: what another tab showed
    /// must not be lost by a join with this one, in whichever order they meet).
    pub fn offer_progress(&mut self, other: &Progress) -> bool {
        let newer = match (other.through, self.progress.through) {
            (Some(o), Some(s)) => o > s || (o == s && other.extent() > self.progress.extent()),
            (Some(_), None) => true,
            (None, _) => false,
        };
        if newer {
            self.progress = other.clone();
        }
        newer
    }

    /// Records how the turn ended, unless a stronger account is already here.
    pub fn offer_final(&mut self, fin: Final) -> bool {
        match &self.fin {
            Some(existing) if !fin.beats(existing) => {
                // Keep the reason a turn failed even when it came with the weaker account.
                if existing.error.is_none() && fin.error.is_some() {
                    if let Some(e) = self.fin.as_mut() {
                        e.error = fin.error;
                    }
                    return true;
                }
                false
            }
            _ => {
                let error = fin
                    .error
                    .clone()
                    .or_else(|| self.fin.as_ref().and_then(|f| f.error.clone()));
                self.fin = Some(Final { error, ..fin });
                true
            }
        }
    }

    pub fn join(&mut self, other: &AssistantEntry) {
        self.note_anchor(other.anchor);
        self.offer_progress(&other.progress);
        if let Some(fin) = &other.fin {
            self.offer_final(fin.clone());
        }
        self.recovered |= other.recovered;
        self.node.join(&other.node);
        for a in &other.answers {
            self.offer_answer(&a.request_id, &a.answer, a.sent);
        }
    }
}

fn fill(slot: &mut Option<String>, other: &Option<String>) {
    if slot.is_none() {
        slot.clone_from(other);
    }
}
