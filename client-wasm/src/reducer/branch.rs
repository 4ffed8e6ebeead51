//! Branches (contract v1.2): the conversation tree the entries form, the session's active leaf,
//! and which entries the view shows (the path from the root to that leaf).
//!
//! The leaf moves with the journal (`turn_queued` names its reply, `branch_changed` a switch,
//! history the leaf at its cursor); a later position wins. A leaf the entries do not know (a
//! switch to a branch never read) asks the browser glue for the active branch's history.

use turnstream_protocol::{Attachment, HistoryResponse, Message, OnBusy, RegenerateResponse, Role};

use super::entry::{AssistantEntry, Node, UserEntry, UserStatus};
use std::collections::BinaryHeap;

use super::keyed::Keyed;
use super::view::BranchView;
use super::Conversation;

/// One message of the tree, as the entries know it.
struct TreeNode<'a> {
    id: &'a str,
    parent: Option<&'a str>,
    /// Creation order among siblings (a journal position).
    order: i64,
    siblings: &'a [String],
}

/// The message ids the tree knows, indexed (a view of a long session stays O(n log n)).
pub(crate) struct Tree<'a> {
    nodes: Vec<TreeNode<'a>>,
    /// `(id, node)`, by id.
    by_id: Vec<(&'a str, usize)>,
    /// `(parent id, node)`, by parent ("" for a first message).
    kids: Vec<(&'a str, usize)>,
}

impl<'a> Tree<'a> {
    fn new(nodes: Vec<TreeNode<'a>>) -> Self {
        // (A heap sort: far less code in the package than `sort`.)
        let sorted = |v: Vec<(&'a str, usize)>| BinaryHeap::from(v).into_sorted_vec();
        let by_id = sorted(nodes.iter().enumerate().map(|(i, n)| (n.id, i)).collect());
        let kids = sorted(
            nodes
                .iter()
                .enumerate()
                .map(|(i, n)| (n.parent.unwrap_or(""), i))
                .collect(),
        );
        Tree { nodes, by_id, kids }
    }

    fn find(&self, id: &str) -> Option<&TreeNode<'a>> {
        let i = self.by_id.partition_point(|(k, _)| *k < id);
        let (k, n) = self.by_id.get(i)?;
        (*k == id).then(|| &self.nodes[*n])
    }

    fn children<'t>(&'t self, parent: Option<&'t str>) -> impl Iterator<Item = &'t TreeNode<'a>> {
        let p = parent.unwrap_or("");
        let from = self.kids.partition_point(|(k, _)| *k < p);
        self.kids[from..]
            .iter()
            .take_while(move |(k, _)| *k == p)
            .map(|(_, n)| &self.nodes[*n])
    }
}

/// A set of ids, sorted once built.
struct Ids<'a>(Vec<&'a str>);

impl<'a> Ids<'a> {
    fn contains(&self, id: &str) -> bool {
        self.0.binary_search(&id).is_ok()
    }
}

/// The entries the view shows, when the session has branches.
pub(crate) struct Shown<'a> {
    tree: Tree<'a>,
    /// Replies named before they were written, with their user message.
    unwritten: &'a Keyed<String>,
    path: Ids<'a>,
    /// The messages of `path` whose next message on it is known.
    continued: Ids<'a>,
    /// `path` reaches the first message (else the tree does not know the branch's top).
    rooted: bool,
    /// This browser's edit being posted (a user entry's key), shown after `path`.
    editing: Option<&'a str>,
}

impl Shown<'_> {
    /// A known message's parent: `Some(None)` for a first message.
    fn parent(&self, id: &str) -> Option<Option<&str>> {
        match self.tree.find(id) {
            Some(n) => Some(n.parent),
            None => self.unwritten.get(id).map(|u| Some(u.as_str())),
        }
    }

    fn knows(&self, id: &str) -> bool {
        self.parent(id).is_some()
    }

    /// Whether the tree knows `id` to be on another branch: it, or a message it follows, is
    /// another version of a message of the branch.
    fn elsewhere(&self, id: &str) -> bool {
        let mut at = id;
        for _ in 0..=self.tree.nodes.len() + self.unwritten.len() {
            if self.path.contains(at) {
                return false;
            }
            match self.parent(at) {
                // Not known: shown.
                None => return false,
                Some(None) => return self.rooted,
                Some(Some(p)) if self.path.contains(p) => return true,
                Some(Some(p)) => at = p,
            }
        }
        false
    }
}

impl Conversation {
    /// The message ids the tree knows, each with its parent.
    pub(crate) fn tree(&self) -> Tree<'_> {
        let mut nodes = Vec::new();
        for u in self.users.values() {
            if let (Some(id), true) = (&u.message_id, u.node.placed) {
                nodes.push(TreeNode {
                    id,
                    parent: u.node.parent_id.as_deref(),
                    order: u.seq.unwrap_or(i64::MAX),
                    siblings: &u.node.siblings,
                });
            }
        }
        let claims = self.claims();
        for a in self.turns.values() {
            let (id, parent) = self.turn_place(a, &claims);
            if let (Some(id), Some(parent)) = (id, parent) {
                nodes.push(TreeNode {
                    id,
                    parent: Some(parent),
                    order: a.anchor.unwrap_or(i64::MAX),
                    siblings: &a.node.siblings,
                });
            }
        }
        Tree::new(nodes)
    }

    /// A reply's id and its user message's, as far as known.
    pub(super) fn turn_place<'a>(
        &'a self,
        a: &'a AssistantEntry,
        claims: &[(&'a str, &'a str, &'a str)],
    ) -> (Option<&'a str>, Option<&'a str>) {
        if let Some((_, r, u)) = claims.iter().find(|c| c.0 == a.turn_id) {
            return (Some(r), Some(u));
        }
        let parent = if a.node.placed {
            a.node.parent_id.as_deref()
        } else {
            self.turn_user
                .get(&a.turn_id)
                .and_then(|k| self.users.get(k))
                .and_then(|u| u.message_id.as_deref())
        };
        (super::reply_id(a), parent)
    }

    /// Replies history named before they were written, each given to the open turn that must
    /// be writing it (the snapshot names no reply ids): one answering its user message, else
    /// one nothing placed. `(turn, reply, user)`.
    pub(super) fn claims(&self) -> Vec<(&str, &str, &str)> {
        let mut out: Vec<(&str, &str, &str)> = Vec::new();
        for (reply, user) in self.unwritten.iter() {
            if self
                .turns
                .values()
                .any(|a| super::reply_id(a) == Some(reply))
            {
                continue;
            }
            let open = |a: &&AssistantEntry| {
                !a.is_final()
                    && super::reply_id(a).is_none()
                    && !out.iter().any(|c| c.0 == a.turn_id)
            };
            let parent_of = |a: &'_ AssistantEntry| self.turn_place(a, &[]).1.map(str::to_owned);
            // One answering its message (the newest: an older one is the version it replaces,
            // its end not heard yet), else one nothing places.
            let newest = |by: Option<&String>| {
                self.turns
                    .values()
                    .filter(open)
                    .filter(|a| parent_of(a).as_ref() == by)
                    .max_by_key(|a| a.anchor)
            };
            let turn = newest(Some(user)).or_else(|| newest(None));
            if let Some(a) = turn {
                out.push((a.turn_id.as_str(), reply.as_str(), user.as_str()));
            }
        }
        out
    }

    /// A known message's parent (`Some(None)` for a first message); `None` when unknown.
    pub(super) fn node_parent(&self, id: &str) -> Option<Option<String>> {
        self.tree().find(id).map(|n| n.parent.map(str::to_owned))
    }

    /// Moves the active leaf, unless a later journal position already placed it.
    pub(super) fn move_leaf(&mut self, id: &str, seq: i64) -> bool {
        if self.leaf.as_ref().is_some_and(|(_, at)| *at > seq) {
            return false;
        }
        let changed = self.leaf.as_ref().is_none_or(|(l, _)| l != id);
        self.leaf = Some((id.to_owned(), seq));
        changed
    }

    /// A turn's reply in the tree: its id (when known) and the user message it answers.
    pub(super) fn place_turn(
        &mut self,
        turn_id: &str,
        reply_id: Option<&str>,
        parent_id: Option<&str>,
        seq: i64,
    ) -> bool {
        let mut changed = false;
        let user = self
            .users
            .values()
            .find(|u| u.message_id.is_some() && u.message_id.as_deref() == parent_id)
            .map(|u| u.key.clone());
        match &user {
            Some(key) => {
                self.turn_user.get_or_insert_with(turn_id, || key.clone());
            }
            // A regeneration of a message not read here: read its branch.
            None => self.branch_unread = true,
        }
        let a = self.turn_mut(turn_id, &mut changed);
        changed |= a.note_anchor(Some(seq));
        let before = a.node.clone();
        a.node.join(&Node {
            id: reply_id.map(str::to_owned),
            parent_id: parent_id.map(str::to_owned),
            placed: parent_id.is_some(),
            siblings: Vec::new(),
            elsewhere: false,
        });
        changed | (a.node != before)
    }

    /// Notes the replies a page of history (a branch, in conversation order) goes through
    /// without holding them: the parent of a message that follows one, and the leaf after the
    /// last; each is a reply being written to the user message before it.
    pub(super) fn note_unwritten(&mut self, h: &HistoryResponse, newest: bool) {
        if newest {
            // The newest page names again those still being written.
            self.unwritten.clear();
        }
        // What follows the page: the leaf, or (an older page) the parent of the oldest message
        // read before it.
        let after = if newest {
            h.leaf_id.clone()
        } else {
            self.oldest
                .as_deref()
                .and_then(|o| self.node_parent(o))
                .flatten()
        };
        // Messages the page should hold and does not (known only by a POST answer): another
        // branch's.
        let span = h.messages.first().and_then(|m| self.epoch_seq(&m.event_id));
        let end = self.epoch_seq(&h.cursor);
        if let (Some(from), Some(to), true) = (span, end, h.leaf_id.is_some() && newest) {
            for u in self.users.values_mut() {
                let inside = u.seq.is_some_and(|s| s >= from && s <= to);
                let listed = h
                    .messages
                    .iter()
                    .any(|m| Some(&m.message_id) == u.message_id.as_ref());
                if inside && !listed && !u.node.placed && u.message_id.is_some() {
                    u.node.elsewhere = true;
                }
            }
        }
        let mut prev: Option<&Message> = None;
        let next = h.messages.iter().map(|m| m.parent_id.as_ref());
        for (m, missing) in h
            .messages
            .iter()
            .map(Some)
            .chain([None])
            .zip(next.chain([after.as_ref()]))
        {
            if let (Some(p), Some(id)) = (prev.filter(|p| p.role == Role::User), missing) {
                if p.message_id != *id && !h.messages.iter().any(|x| x.message_id == *id) {
                    self.unwritten.insert(id.clone(), p.message_id.clone());
                }
            }
            prev = m;
        }
    }

    /// The answer to this browser's `POST /api/messages/{message}/regenerate`.
    pub fn apply_regenerate(&mut self, r: &RegenerateResponse) -> bool {
        let Some(seq) = self.position(&r.event_id) else {
            return false;
        };
        let changed = self.place_turn(&r.turn_id, None, Some(&r.message_id), seq);
        self.touch(changed)
    }

    /// An edit made in this browser: a new version of the user message `key`, shown at once
    /// (with the branch up to the message it replaces), posted by the outbox. `None` when
    /// `key` is not a user message the server has.
    pub fn edit_local(
        &mut self,
        key: &str,
        client_message_id: &str,
        content: &str,
        created_at: i64,
    ) -> Option<bool> {
        let u = self.users.get(key)?;
        if u.message_id.is_none() || !u.node.placed {
            return None;
        }
        let parent = u.node.parent_id.clone();
        self.editing = Some(client_message_id.to_owned());
        Some(self.optimistic_at(
            client_message_id,
            content,
            &[],
            created_at,
            None,
            Some(parent),
        ))
    }

    /// A sibling tab's edit (its optimistic message with the `parent_id` it is posted with).
    pub fn apply_optimistic_edit(
        &mut self,
        client_message_id: &str,
        content: &str,
        attachments: &[Attachment],
        created_at: i64,
        on_busy: Option<OnBusy>,
        parent_id: Option<String>,
    ) -> bool {
        if !self.users.contains_key(client_message_id) {
            self.editing = Some(client_message_id.to_owned());
        }
        self.optimistic_at(
            client_message_id,
            content,
            attachments,
            created_at,
            on_busy,
            Some(parent_id),
        )
    }

    /// The user message a regeneration of entry `key` answers again (a user message's key, or
    /// a reply's `turn:<id>`).
    pub fn regenerate_target(&self, key: &str) -> Option<String> {
        if let Some(u) = self.users.get(key) {
            return u.message_id.clone();
        }
        let turn_id = key.strip_prefix("turn:")?;
        let a = self.turns.get(turn_id)?;
        a.node.parent_id.clone().or_else(|| {
            self.turn_user
                .get(turn_id)
                .and_then(|k| self.users.get(k))
                .and_then(|u| u.message_id.clone())
        })
    }

    /// The message id of version `index` of entry `key` (what a switch to it posts).
    pub fn sibling_id(&self, key: &str, index: usize) -> Option<String> {
        let id = match self.users.get(key) {
            Some(u) => u.message_id.clone()?,
            None => {
                let a = self.turns.get(key.strip_prefix("turn:")?)?;
                a.node
                    .id
                    .clone()
                    .or(a.fin.as_ref().and_then(|f| f.message_id.clone()))?
            }
        };
        let tree = self.tree();
        let node = tree.find(&id)?;
        versions(&tree, node.parent)
            .get(index)
            .map(|s| (*s).to_owned())
    }

    /// The stream moved the leaf somewhere the entries do not know: reload the active branch's
    /// history (asked once per such move).
    pub fn take_branch_unread(&mut self) -> bool {
        std::mem::take(&mut self.branch_unread)
    }

    /// The session's active leaf, when the server branches.
    pub fn leaf(&self) -> Option<&str> {
        self.leaf.as_ref().map(|(l, _)| l.as_str())
    }

    /// Which entries the view shows: `None` shows every entry (a server without branches).
    pub(crate) fn shown(&self) -> Option<Shown<'_>> {
        let (leaf, _) = self.leaf.as_ref()?;
        let tree = self.tree();
        let parent = |id: &str| match tree.find(id) {
            Some(n) => Some(n.parent),
            None => self.unwritten.get(id).map(|u| Some(u.as_str())),
        };
        // This browser's edit not yet on the server's branch: its branch, up to its parent.
        let editing = self
            .editing
            .as_ref()
            .and_then(|k| self.users.get(k))
            .filter(|u| {
                u.status != UserStatus::Rejected
                    && !u
                        .message_id
                        .as_deref()
                        .is_some_and(|id| on_path(&parent, leaf, id))
            });
        let (start, down) = match editing {
            Some(u) => (u.node.parent_id.as_deref(), false),
            None => (Some(leaf.as_str()), true),
        };
        let mut path: Vec<&str> = Vec::new();
        let mut continued: Vec<&str> = Vec::new();
        let mut at = start;
        let mut rooted = start.is_none();
        // (Bounded: a cycle in what sources said cannot loop.)
        let bound = tree.nodes.len() + self.unwritten.len() + 1;
        while let (Some(id), true) = (at, path.len() < bound) {
            path.push(id);
            at = match parent(id) {
                Some(p) => {
                    rooted = p.is_none();
                    p
                }
                None => None,
            };
            continued.extend(at);
        }
        // Messages that followed the leaf (a send before its turn was queued): the newest
        // child at each step, as the server follows a branch down.
        let mut at = start.filter(|_| down);
        while let (Some(id), true) = (at, path.len() < bound) {
            at = tree
                .children(Some(id))
                .max_by_key(|n| n.order)
                .map(|n| n.id);
            if let Some(child) = at {
                continued.push(id);
                path.push(child);
            }
        }
        let (path, continued) = (Ids(sorted_ids(path)), Ids(sorted_ids(continued)));
        Some(Shown {
            tree,
            unwritten: &self.unwritten,
            path,
            continued,
            rooted,
            editing: editing.map(|u| u.key.as_str()),
        })
    }

    /// Whether the view shows a user entry (with `shown` from [`Conversation::shown`]).
    /// An entry is hidden when the tree knows it is on another branch; one it cannot place
    /// (unsent, or known by a POST answer only) is shown, after the branch as any send.
    pub(crate) fn shows_user(shown: &Option<Shown<'_>>, u: &UserEntry) -> bool {
        let Some(s) = shown else { return true };
        if s.editing == Some(u.key.as_str()) {
            return true;
        }
        !u.node.elsewhere && u.message_id.as_deref().is_none_or(|id| !s.elsewhere(id))
    }

    /// Whether the view shows a reply, whose message id (or, before it is known, whose user
    /// message's) is `id`.
    pub(crate) fn shows_turn(
        shown: &Option<Shown<'_>>,
        id: Option<&str>,
        parent: Option<&str>,
    ) -> bool {
        let Some(s) = shown else { return true };
        match (id, parent) {
            (Some(id), _) if s.knows(id) => !s.elsewhere(id),
            // A reply not named yet: the next message after its user message on the branch,
            // unless that is known.
            (_, Some(p)) if s.path.contains(p) => !s.continued.contains(p),
            (_, Some(p)) => !s.elsewhere(p),
            (Some(_), None) => true,
            // A turn nothing places (a snapshot's, whose message is older than the pages read).
            (None, None) => true,
        }
    }

    /// Entry `id`'s place among its versions.
    pub(crate) fn branch_of(shown: &Option<Shown<'_>>, id: Option<&str>) -> BranchView {
        let one = BranchView { index: 0, count: 1 };
        let (Some(s), Some(id)) = (shown, id) else {
            return one;
        };
        let Some(node) = s.tree.find(id) else {
            return one;
        };
        // The only version (most messages): nothing to order.
        if node.siblings.len() <= 1 && s.tree.children(node.parent).nth(1).is_none() {
            return one;
        }
        let all = versions(&s.tree, node.parent);
        match all.iter().position(|s| *s == id) {
            Some(index) => BranchView {
                index: index as u32,
                count: all.len() as u32,
            },
            None => one,
        }
    }
}

/// The versions of a message under `parent`, oldest first: the list history gave, then those
/// learned since (the stream's regenerations and edits) in journal order.
fn versions<'a>(tree: &Tree<'a>, parent: Option<&str>) -> Vec<&'a str> {
    let children: Vec<&TreeNode<'a>> = tree.children(parent).collect();
    let mut out: Vec<&'a str> = children
        .iter()
        .map(|n| n.siblings)
        .max_by_key(|s| s.len())
        .unwrap_or_default()
        .iter()
        .map(String::as_str)
        .collect();
    // A message has few versions: an insertion sort is the least code.
    let mut by_order: Vec<&TreeNode<'a>> = Vec::with_capacity(children.len());
    for n in children {
        let at = by_order.partition_point(|o| o.order <= n.order);
        by_order.insert(at, n);
    }
    for n in by_order {
        if !out.contains(&n.id) {
            out.push(n.id);
        }
    }
    out
}

/// Ids sorted (a heap sort: far less code in the package than `sort`), once each.
fn sorted_ids(v: Vec<&str>) -> Vec<&str> {
    // (The tree's index's heap, to share its code.)
    let mut v: Vec<&str> = BinaryHeap::from(v.into_iter().map(|id| (id, 0)).collect::<Vec<_>>())
        .into_sorted_vec()
        .into_iter()
        .map(|(id, _)| id)
        .collect();
    v.dedup();
    v
}

/// Whether `id` is on the path from the root to `leaf` (`parent`: a message's known parent).
fn on_path<'a>(parent: &impl Fn(&str) -> Option<Option<&'a str>>, leaf: &str, id: &str) -> bool {
    let mut at = Some(leaf);
    // (Bounded, as a branch is: a cycle in what sources said cannot loop.)
    for _ in 0..100_000 {
        match at {
            Some(x) if x == id => return true,
            Some(x) => at = parent(x).flatten(),
            None => return false,
        }
    }
    false
}
