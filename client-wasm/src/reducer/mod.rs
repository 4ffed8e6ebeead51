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

mod answers;
mod branch;
pub mod entry;
pub mod keyed;
mod outbox;
pub mod view;

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use serde::{Deserialize, Serialize};
use turnstream_protocol::{
    Attachment, Cursor, ErrorDetail, Event, EventBody, HistoryResponse, Message, MessageStatus,
    OnBusy, PostMessageResponse, Role as WireRole, Snapshot, TurnInfo,
};

use entry::{
    AssistantEntry, EntryError, Final, FinalSource, Node, Progress, UserEntry, UserStatus,
};
use keyed::{Keyed, Keys};
pub use outbox::{Outgoing, OutgoingAnswer};
use view::{assistant_view, user_view, Place};
pub use view::{
    AttachmentView, BranchView, Connection, EntryStatus, EntryView, Role, ToolView, View,
};

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

/// A regeneration or a switch asked for in this browser (v1.2): queued, kept in the cache so a
/// reload still posts it, posted once in order by the outbox, then kept a while as `done` so
/// joining an older copy of the cache does not bring it back.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BranchAction {
    /// Drawn when queued: a regeneration's `client_request_id` (the server answers a retry
    /// with the first answer), and what joins tabs' copies.
    pub id: String,
    /// `true`: `POST /api/messages/{target}/regenerate`; `false`: a switch to leaf `target`.
    pub regenerate: bool,
    pub target: String,
    /// Posted (or refused for good).
    #[serde(default)]
    pub done: bool,
}

/// Posted branch actions kept (as tombstones) in the cache.
const DONE_KEPT: usize = 16;

/// Where an active turn's reply goes in the tree: the `reply_id` and `parent_id` a v1.2
/// server's snapshot gives each active turn (absent from an older server's).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TurnPlace {
    pub turn_id: String,
    pub reply_id: Option<String>,
    pub parent_id: Option<String>,
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

    // ----- sources -----

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

    /// The answer to our own `POST /messages` (or a sibling's, relayed).
    pub fn apply_post_response(&mut self, r: &PostMessageResponse) -> bool {
        let Some(seq) = self.position(&r.event_id) else {
            return false;
        };
        let mut changed = false;
        let key = r
            .client_message_id
            .clone()
            .unwrap_or_else(|| r.message_id.clone());
        if let Some(existing) = self.users.get(&key) {
            // Without the content we cannot show a bubble; message_received will bring it.
            let incoming = UserEntry {
                message_id: Some(r.message_id.clone()),
                turn_id: Some(r.turn_id.clone()),
                seq: Some(seq),
                status: UserStatus::Sent,
                from_server: false,
                error: None,
                ..existing.clone()
            };
            changed |= self.join_user(incoming);
        }
        let a = self.turn_mut(&r.turn_id, &mut changed);
        changed |= a.note_anchor(Some(seq));
        self.touch(changed)
    }

    /// A message this tab is sending: shown at once, `sending` until the server has it.
    pub fn send_local(
        &mut self,
        client_message_id: &str,
        content: &str,
        attachments: &[Attachment],
        created_at: i64,
        on_busy: Option<OnBusy>,
    ) -> bool {
        self.optimistic(client_message_id, content, attachments, created_at, on_busy)
    }

    /// A sibling tab's optimistic message (it may arrive after the server's copy: then it is a no-op).
    pub fn apply_optimistic(
        &mut self,
        client_message_id: &str,
        content: &str,
        attachments: &[Attachment],
        created_at: i64,
        on_busy: Option<OnBusy>,
    ) -> bool {
        self.optimistic(client_message_id, content, attachments, created_at, on_busy)
    }

    fn optimistic(
        &mut self,
        client_message_id: &str,
        content: &str,
        attachments: &[Attachment],
        created_at: i64,
        on_busy: Option<OnBusy>,
    ) -> bool {
        self.optimistic_at(
            client_message_id,
            content,
            attachments,
            created_at,
            on_busy,
            None,
        )
    }

    /// An optimistic message; `edit`: the `parent_id` it is posted with.
    fn optimistic_at(
        &mut self,
        client_message_id: &str,
        content: &str,
        attachments: &[Attachment],
        created_at: i64,
        on_busy: Option<OnBusy>,
        edit: Option<Option<String>>,
    ) -> bool {
        if self.users.contains_key(client_message_id) {
            return false;
        }
        self.send_counter += 1;
        let entry = UserEntry {
            key: client_message_id.to_owned(),
            client_message_id: Some(client_message_id.to_owned()),
            message_id: None,
            turn_id: None,
            content: content.to_owned(),
            created_at,
            seq: None,
            status: UserStatus::Sending,
            error: None,
            from_server: false,
            send_order: self.send_counter,
            author: None,
            attachments: attachments.to_vec(),
            on_busy,
            node: Node {
                placed: edit.is_some(),
                parent_id: edit.clone().flatten(),
                ..Node::default()
            },
            edit: edit.is_some(),
        };
        let changed = self.join_user(entry);
        self.touch(changed)
    }

    /// The server refused a message for good (a 4xx other than 409/429).
    pub fn reject(&mut self, client_message_id: &str, error: &ErrorDetail) -> bool {
        let Some(u) = self.users.get_mut(client_message_id) else {
            return false;
        };
        if u.status != UserStatus::Sending {
            return false;
        }
        u.status = UserStatus::Rejected;
        u.error = Some(EntryError {
            code: error.code.clone(),
            message: error.message.clone(),
        });
        self.touch(true)
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

    // ----- questions the browser glue asks -----

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

    // ----- internals -----

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

    fn absorb_message(&mut self, m: &Message, seq_hint: Option<i64>) -> bool {
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
