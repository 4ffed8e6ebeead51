//! What a UI renders: the view built from the reducer's entries, in the shape the JS API returns
//! (camelCase, closed string unions).

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use serde::{Deserialize, Serialize};
use turnstream_protocol::{Attachment, MessageStatus, ToolCall, ToolStatus, TurnRequest};

use super::entry::{AssistantEntry, EntryError, UserEntry, UserStatus};
use super::Conversation;

/// The link to the server, as a UI would word it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Connection {
    /// Loading history and opening the stream for the first time.
    Connecting,
    /// The stream is open: what is shown is what the server has.
    Live,
    /// The stream dropped; the browser (or the SDK) is resuming from the last event seen.
    Reconnecting,
    /// The server asked for a history reload (its journal no longer covers our position).
    Resyncing,
    /// The browser reports no network.
    Offline,
    /// The server keeps refusing the token (`getToken` was asked again and did not help).
    Unauthorized,
    /// `close()` was called.
    Closed,
}

impl Connection {
    pub fn as_str(self) -> &'static str {
        match self {
            Connection::Connecting => "connecting",
            Connection::Live => "live",
            Connection::Reconnecting => "reconnecting",
            Connection::Resyncing => "resyncing",
            Connection::Offline => "offline",
            Connection::Unauthorized => "unauthorized",
            Connection::Closed => "closed",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    User,
    Assistant,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::User => "user",
            Role::Assistant => "assistant",
        }
    }
}

/// `sending|sent|rejected` for user entries,
/// `queued|streaming|waiting|complete|cancelled|failed|interrupted` for assistant entries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EntryStatus {
    Sending,
    Sent,
    Rejected,
    Queued,
    Streaming,
    /// The agent asked something no one has answered yet (contract v1.2).
    Waiting,
    Complete,
    Cancelled,
    Failed,
    Interrupted,
}

impl EntryStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            EntryStatus::Sending => "sending",
            EntryStatus::Sent => "sent",
            EntryStatus::Rejected => "rejected",
            EntryStatus::Queued => "queued",
            EntryStatus::Streaming => "streaming",
            EntryStatus::Waiting => "waiting",
            EntryStatus::Complete => "complete",
            EntryStatus::Cancelled => "cancelled",
            EntryStatus::Failed => "failed",
            EntryStatus::Interrupted => "interrupted",
        }
    }
}

/// A tool call as shown.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolView {
    pub call_id: String,
    pub name: String,
    pub status: ToolStatus,
    pub input_preview: Option<String>,
    pub output_preview: Option<String>,
}

impl From<&ToolCall> for ToolView {
    fn from(t: &ToolCall) -> Self {
        ToolView {
            call_id: t.call_id.clone(),
            name: t.name.clone(),
            status: t.status,
            input_preview: t.input_preview.clone(),
            output_preview: t.output_preview.clone(),
        }
    }
}

/// A file a user message refers to, as shown.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AttachmentView {
    pub url: String,
    pub media_type: String,
    pub name: Option<String>,
}

impl From<&Attachment> for AttachmentView {
    fn from(a: &Attachment) -> Self {
        AttachmentView {
            url: a.url.clone(),
            media_type: a.media_type.clone(),
            name: a.name.clone(),
        }
    }
}

/// One bubble as shown.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EntryView {
    /// Stable for the life of the bubble: the client_message_id (else message_id) of a user
    /// message, `turn:<turn_id>` of a reply. Use it as the React key.
    pub key: String,
    pub role: Role,
    pub content: String,
    pub status: EntryStatus,
    pub message_id: Option<String>,
    pub client_message_id: Option<String>,
    pub turn_id: Option<String>,
    pub thinking: String,
    pub tools: Vec<ToolView>,
    /// The turn ended while no page listened and was settled after a reload (status check or
    /// history), not by the live stream.
    pub recovered: bool,
    pub error: Option<EntryError>,
    /// Unix milliseconds (the sender's clock until the server's is known); `null` for replies.
    pub created_at: Option<i64>,
    /// Who wrote a user message, as the server recorded it (the token's `sub`, or the author a
    /// service key named); `null` until the server has the message, without auth, and for
    /// replies.
    pub author: Option<String>,
    /// The files a user message refers to (contract v1.2); empty for replies.
    pub attachments: Vec<AttachmentView>,
    /// What the agent asked in this turn and the answers (contract v1.2); empty for user
    /// messages. `answer` is the journal's, else the one given in this browser (shown before
    /// the server has it); `answered_by` is the journal's.
    pub requests: Vec<TurnRequest>,
    /// Its place among its versions (contract v1.2): a user message's edits, a reply's
    /// regenerations; `{index: 0, count: 1}` for the only version.
    pub branch: BranchView,
}

/// Version `index` (0-based, oldest first) of `count`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct BranchView {
    pub index: u32,
    pub count: u32,
}

/// Everything a UI renders for one session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct View {
    pub session_id: String,
    pub connection: Connection,
    /// The session has a queued or running turn.
    pub busy: bool,
    /// The SDK knows something could not be recovered (a history resync, or a turn the server lost).
    pub gap: bool,
    /// Older messages exist on the server (`loadOlder` pages them in).
    pub has_more: bool,
    /// The server's refusal while `connection` is `unauthorized`.
    pub error: Option<EntryError>,
    pub messages: Vec<EntryView>,
}

/// Where a bubble sits: journal entries by the sequence of the event that introduced them (a
/// reply right after the message that started its turn), then unsent messages in send order.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Place {
    Journal {
        seq: i64,
        rank: u8,
    },
    Unsent {
        created_at: i64,
        send_order: u64,
    },
    /// A reply whose position nothing tells (should not happen): after everything.
    Unknown,
}

pub(crate) fn user_view(u: &UserEntry) -> EntryView {
    EntryView {
        key: u.key.clone(),
        role: Role::User,
        content: u.content.clone(),
        status: match u.status {
            UserStatus::Sending => EntryStatus::Sending,
            UserStatus::Sent => EntryStatus::Sent,
            UserStatus::Rejected => EntryStatus::Rejected,
        },
        message_id: u.message_id.clone(),
        client_message_id: u.client_message_id.clone(),
        turn_id: u.turn_id.clone(),
        thinking: String::new(),
        tools: Vec::new(),
        recovered: false,
        error: u.error.clone(),
        created_at: Some(u.created_at),
        author: u.author.clone(),
        attachments: u.attachments.iter().map(AttachmentView::from).collect(),
        requests: Vec::new(),
        branch: BranchView { index: 0, count: 1 },
    }
}

pub(crate) fn assistant_view(a: &AssistantEntry) -> EntryView {
    let (status, content, message_id, error) = match &a.fin {
        Some(f) => (
            match f.status {
                MessageStatus::Complete => EntryStatus::Complete,
                MessageStatus::Cancelled => EntryStatus::Cancelled,
                MessageStatus::Failed => EntryStatus::Failed,
                MessageStatus::Interrupted => EntryStatus::Interrupted,
            },
            f.content.clone(),
            f.message_id.clone(),
            f.error.as_ref().map(|m| EntryError {
                code: match f.source {
                    super::entry::FinalSource::Lost => "turn_not_found".to_owned(),
                    _ => "turn_failed".to_owned(),
                },
                message: m.clone(),
            }),
        ),
        None => (
            if a.is_waiting() {
                EntryStatus::Waiting
            } else if a.progress.running {
                EntryStatus::Streaming
            } else {
                EntryStatus::Queued
            },
            a.progress.text.clone(),
            None,
            None,
        ),
    };
    let mut requests = a.progress.requests.clone();
    for r in &mut requests {
        if r.answer.is_none() {
            r.answer = a.local_answer(&r.request_id).map(|l| l.answer.clone());
        }
    }
    EntryView {
        key: assistant_key(&a.turn_id),
        role: Role::Assistant,
        content,
        status,
        message_id,
        client_message_id: None,
        turn_id: Some(a.turn_id.clone()),
        thinking: a.progress.thinking.clone(),
        tools: a.progress.tools.iter().map(ToolView::from).collect(),
        recovered: a.recovered,
        error,
        created_at: None,
        author: None,
        attachments: Vec::new(),
        requests,
        branch: BranchView { index: 0, count: 1 },
    }
}

/// The key of a turn's reply bubble.
pub fn assistant_key(turn_id: &str) -> String {
    crate::cat(&["turn:", turn_id])
}

enum Either<'a> {
    User(&'a UserEntry),
    Turn(&'a AssistantEntry),
}

/// An entry with its place in the view, ordered by `(place, key)`.
struct Placed<'a> {
    place: Place,
    key: &'a str,
    entry: Either<'a>,
}

impl Ord for Placed<'_> {
    fn cmp(&self, other: &Self) -> Ordering {
        (&self.place, self.key).cmp(&(&other.place, other.key))
    }
}

impl PartialOrd for Placed<'_> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for Placed<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Placed<'_> {}

impl Conversation {
    pub fn view(&self) -> View {
        let mut placed: Vec<Placed<'_>> = Vec::with_capacity(self.users.len() + self.turns.len());
        let shown = self.shown();
        for u in self.users.values() {
            if !Self::shows_user(&shown, u) {
                continue;
            }
            let place = match u.seq {
                Some(seq) => Place::Journal { seq, rank: 0 },
                None => Place::Unsent {
                    created_at: u.created_at,
                    send_order: u.send_order,
                },
            };
            placed.push(Placed {
                place,
                key: &u.key,
                entry: Either::User(u),
            });
        }
        let claims = self.claims();
        // Each user message's journal position, by message id (the branch index's heap).
        let users: Vec<&UserEntry> = self.users.values().collect();
        let seqs = BinaryHeap::from(
            users
                .iter()
                .enumerate()
                .filter_map(|(i, u)| Some((u.message_id.as_deref()?, i)))
                .collect::<Vec<_>>(),
        )
        .into_sorted_vec();
        for a in self.turns.values() {
            let (id, parent) = self.turn_place(a, &claims);
            if !Self::shows_turn(&shown, id, parent) {
                continue;
            }
            // A reply right after its user message (a regeneration's too).
            let answered = parent
                .and_then(|p| seqs.binary_search_by(|(id, _)| (*id).cmp(p)).ok())
                .and_then(|i| users[seqs[i].1].seq);
            let place = match answered.or(self.introduced_at(a)) {
                Some(seq) => Place::Journal { seq, rank: 1 },
                None => Place::Unknown,
            };
            placed.push(Placed {
                place,
                key: &a.turn_id,
                entry: Either::Turn(a),
            });
        }
        // (place, key) is unique (a user message and a reply never share a place), so any
        // sort gives the one order; a heap sort is the least code in the package.
        let placed = BinaryHeap::from(placed).into_sorted_vec();
        View {
            session_id: self.session_id.clone(),
            connection: self.connection,
            busy: self.turns.values().any(|a| !a.is_final()),
            gap: self.gap,
            has_more: self.has_more,
            error: self.refusal.clone(),
            messages: placed
                .iter()
                .map(|p| match p.entry {
                    Either::User(u) => EntryView {
                        branch: Self::branch_of(&shown, u.message_id.as_deref()),
                        ..user_view(u)
                    },
                    Either::Turn(a) => EntryView {
                        branch: Self::branch_of(&shown, self.turn_place(a, &claims).0),
                        ..assistant_view(a)
                    },
                })
                .collect(),
        }
    }
}
