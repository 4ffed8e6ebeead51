//! The conversation reducer: one session's bubbles, merged from every source the SDK hears
//! (cache, history, snapshot, stream, POST responses, optimistic sends, turn-status checks and
//! sibling tabs). Plain Rust, no browser types, so it is tested natively.
//!
//! # Model
//! Each bubble is keyed by identity, never by arrival: a user message by its client_message_id
//! (else message_id), a reply by its turn. Sources only add facts (see [`entry`]), so a replay, a
//! duplicate or a late POST response changes nothing it should not. A turn's progress is the fold
//! of its events up to a journal position; a later position (a snapshot, a sibling's cache) replaces
//! an earlier one, and an event at or below the position already folded is a duplicate.
//!
//! This file holds the [`Conversation`] and what every source shares (journal positions, joining
//! an entry); each source's folding is in a file named after it, the tree in `branch`, the view
//! in `view`.

mod answers;
mod branch;
mod branch_actions;
mod cache;
mod checks;
pub mod entry;
mod history;
pub mod keyed;
mod message;
mod outbox;
mod sends;
mod stream;
pub mod view;

use turnstream_protocol::{Cursor, ErrorDetail};

pub use branch_actions::BranchAction;
pub use cache::{CacheRecord, CACHE_VERSION};
use entry::{AssistantEntry, EntryError, UserEntry};
use keyed::{Keyed, Keys};
pub use outbox::{Outgoing, OutgoingAnswer};
pub use stream::TurnPlace;
pub use view::{
    AttachmentView, BranchView, Connection, EntryStatus, EntryView, Role, ToolView, View,
};

/// One session's conversation. See the module docs.
#[derive(Debug, Clone)]
pub struct Conversation {
    session_id: String,
    /// Journal the server-derived entries belong to; a history of another epoch resets them.
    epoch: Option<String>,
    users: Keyed<UserEntry>,
    turns: Keyed<AssistantEntry>,
    /// turn_id -> key of the user message that started it.
    turn_user: Keyed<String>,
    connection: Connection,
    gap: bool,
    /// Highest journal sequence the stream delivered.
    high_water: Option<i64>,
    /// Turns whose fate the journal did not tell: to be asked with `GET /api/turns/{turn}`.
    to_check: Keys,
    /// Of those, the ones handed out and not answered yet.
    checking: Keys,
    /// Turns a cache showed open whose end may have come while no page listened: until a
    /// snapshot or a status check says they are still running (the stream then carries their
    /// end), an end learned from history or a status check marks them `recovered`.
    left_open: Keys,
    /// Older messages exist before `oldest` (history's `has_more`).
    has_more: bool,
    /// A page of the server's history was read (not only a cache): what a caller that must show
    /// the server's conversation, not this browser's, waits for.
    history_loaded: bool,
    /// Why the server refuses us, while `connection` is `Unauthorized`.
    refusal: Option<EntryError>,
    /// The oldest message of the history pages read, where an older page starts (`before`).
    oldest: Option<String>,
    /// The session's active leaf (contract v1.2) and the journal position that said so; `None`
    /// from a server that does not branch: the view is then every message.
    leaf: Option<(String, i64)>,
    /// Replies history named before they were written (the leaf, or the parent of a message
    /// sent while its turn ran), each with its user message: the branch goes through them.
    unwritten: Keyed<String>,
    /// This browser's edit being posted: the view shows its branch until the server's leaf does.
    editing: Option<String>,
    /// The stream moved the leaf to a branch not read yet: reload the active branch's history.
    branch_unread: bool,
    /// This browser's regenerations and switches, in order (see [`BranchAction`]).
    branch_actions: Vec<BranchAction>,
    /// Bumped on every change, so a caller can tell "same view" cheaply.
    revision: u64,
    send_counter: u64,
}

impl Conversation {
    pub fn new(session_id: impl Into<String>) -> Self {
        Conversation {
            session_id: session_id.into(),
            epoch: None,
            users: Keyed::new(),
            turns: Keyed::new(),
            turn_user: Keyed::new(),
            connection: Connection::Connecting,
            gap: false,
            high_water: None,
            to_check: Keys::new(),
            checking: Keys::new(),
            left_open: Keys::new(),
            has_more: false,
            history_loaded: false,
            refusal: None,
            oldest: None,
            leaf: None,
            unwritten: Keyed::new(),
            editing: None,
            branch_unread: false,
            branch_actions: Vec::new(),
            revision: 0,
            send_counter: 0,
        }
    }

    pub fn session_id(&self) -> &str {
        &self.session_id
    }

    /// Changes whenever the view may have changed.
    pub fn revision(&self) -> u64 {
        self.revision
    }

    pub fn connection(&self) -> Connection {
        self.connection
    }

    /// Whether the server's history was read (see [`Conversation::apply_history`]); until then
    /// the view holds only what a cache, sibling tabs and this page's own sends gave it.
    pub fn history_loaded(&self) -> bool {
        self.history_loaded
    }

    /// Highest journal sequence the stream delivered.
    pub fn high_water(&self) -> Option<i64> {
        self.high_water
    }

    fn touch(&mut self, changed: bool) -> bool {
        if changed {
            self.revision += 1;
        }
        changed
    }

    pub fn set_connection(&mut self, c: Connection) -> bool {
        let mut changed = self.connection != c;
        self.connection = c;
        if c != Connection::Unauthorized && self.refusal.take().is_some() {
            changed = true;
        }
        self.touch(changed)
    }

    /// The server keeps refusing our credentials: `unauthorized`, with its error.
    pub fn set_unauthorized(&mut self, error: &ErrorDetail) -> bool {
        let refusal = Some(EntryError {
            code: error.code.clone(),
            message: error.message.clone(),
        });
        let changed = self.refusal != refusal || self.connection != Connection::Unauthorized;
        self.refusal = refusal;
        self.connection = Connection::Unauthorized;
        self.touch(changed)
    }

    /// Something could not be recovered (the server asked for a history resync).
    pub fn mark_gap(&mut self) -> bool {
        let changed = !self.gap;
        self.gap = true;
        self.touch(changed)
    }

    // ----- what every source shares -----

    /// Where a turn's reply sits: right after the message that started it, else at the lowest
    /// journal position known to belong to it.
    fn introduced_at(&self, a: &AssistantEntry) -> Option<i64> {
        self.turn_user
            .get(&a.turn_id)
            .and_then(|k| self.users.get(k))
            .and_then(|u| u.seq)
            .or(a.anchor)
    }

    /// The sequence of a cursor of our journal; `None` for garbage or another journal's cursor
    /// (a stale source: the history of the new journal will replace everything).
    fn position(&mut self, cursor: &str) -> Option<i64> {
        let c = cursor.parse::<Cursor>().ok()?;
        match &self.epoch {
            None => {
                self.epoch = Some(c.epoch);
                Some(c.sequence)
            }
            Some(e) if *e == c.epoch => Some(c.sequence),
            Some(_) => None,
        }
    }

    fn epoch_seq(&self, cursor: &str) -> Option<i64> {
        let c = cursor.parse::<Cursor>().ok()?;
        (self.epoch.as_deref() == Some(c.epoch.as_str())).then_some(c.sequence)
    }

    fn settled(&mut self, turn_id: &str) {
        self.to_check.remove(turn_id);
        self.checking.remove(turn_id);
        self.left_open.remove(turn_id);
    }

    fn join_user(&mut self, incoming: UserEntry) -> bool {
        if let Some(turn_id) = &incoming.turn_id {
            self.turn_user
                .get_or_insert_with(turn_id, || incoming.key.clone());
        }
        match self.users.get_mut(&incoming.key) {
            Some(existing) => {
                let before = existing.clone();
                existing.join(&incoming);
                *existing != before
            }
            None => {
                self.users.insert(incoming.key.clone(), incoming);
                true
            }
        }
    }

    fn join_turn(&mut self, incoming: &AssistantEntry) -> bool {
        match self.turns.get_mut(&incoming.turn_id) {
            Some(existing) => {
                let before = existing.clone();
                existing.join(incoming);
                *existing != before
            }
            None => {
                self.turns
                    .insert(incoming.turn_id.clone(), incoming.clone());
                true
            }
        }
    }

    fn turn_mut(&mut self, turn_id: &str, changed: &mut bool) -> &mut AssistantEntry {
        self.turns.get_or_insert_with(turn_id, || {
            *changed = true;
            AssistantEntry::new(turn_id)
        })
    }
}

/// A reply's message id, once known.
fn reply_id(a: &AssistantEntry) -> Option<&str> {
    a.node
        .id
        .as_deref()
        .or(a.fin.as_ref().and_then(|f| f.message_id.as_deref()))
}

#[cfg(all(test, not(target_arch = "wasm32")))]
pub(crate) mod props;
#[cfg(all(test, not(target_arch = "wasm32")))]
pub(crate) mod sim;
#[cfg(all(test, not(target_arch = "wasm32")))]
mod tests;
