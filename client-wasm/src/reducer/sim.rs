//! A simulated server for the reducer's tests: builds a session's journal the way the real server
//! does (messages accepted at any time, turns run one at a time FIFO, a queued turn may be
//! cancelled early, other sessions' events leave holes in the sequence) and derives from it what
//! each source would hand a client: history at a cursor, the snapshot at a cursor, POST responses.

use turnstream_protocol::{
    ActiveTurn, Attachment, Event, EventBody, HistoryResponse, InputGiven, InputRequest, Message,
    MessageStatus, PostMessageResponse, RawJson, RequestKind, Role, Snapshot, ToolCall,
    ToolRequest, ToolStatus, TurnState,
};

pub const SESSION: &str = "s1";
pub const EPOCH: &str = "ep1";

/// Who sent a user message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sender {
    /// This tab: it shows the message optimistically and receives the POST response.
    Local,
    /// Another tab (relays its optimistic bubble) or device, with a client_message_id.
    Remote,
    /// A client that sends no client_message_id.
    Anonymous,
}

#[derive(Debug, Clone)]
pub enum Step {
    Think(String),
    Say(String),
    /// A call (index within the turn) moves to a status.
    Tool(u8, ToolStatus),
    /// The agent asks request `r<n>` (of a kind that depends on n), unless it already did.
    Ask(u8),
    /// Request `r<n>` is answered, if it was asked and not answered yet.
    Answer(u8),
}

/// The request `r<n>` of turn `t<k>` as the agent asks it.
pub fn request(k: usize, n: u8) -> InputRequest {
    let tool = ToolRequest {
        call_id: format!("call{k}-{n}"),
        name: "deploy".into(),
        input: RawJson::trusted(format!(r#"{{"env":"prod {n}","n":[{k},true,null]}}"#)),
    };
    let (kind, tool, prompt, options) = match n % 3 {
        0 => (RequestKind::Approval, Some(tool), None, None),
        1 => (RequestKind::ClientTool, Some(tool), None, None),
        _ => (
            RequestKind::Question,
            None,
            Some(format!("which \"{n}\"?")),
            Some(vec!["a".into(), "b\nc".into()]),
        ),
    };
    InputRequest {
        call: None,
        request_id: format!("r{n}"),
        kind,
        tool,
        prompt,
        options,
        expires_at: (n % 2 == 0).then_some(86_400_000 + i64::from(n)),
    }
}

/// The journal's answer to `r<n>` of turn `t<k>`, and a different one a browser could give.
pub fn answer(k: usize, n: u8, recorded: bool) -> RawJson {
    let yes = recorded == (k % 2 == 0);
    RawJson::trusted(match n % 3 {
        0 if yes => r#"{"approved":true}"#.to_owned(),
        0 => r#"{"approved":false,"reason":"not \"now\""}"#.to_owned(),
        1 if yes => format!(r#"{{"output":{{"a":[1.5,"x"],"z":{k}}}}}"#),
        1 => r#"{"error":"no GPS"}"#.to_owned(),
        _ => format!(r#"{{"text":"{}"}}"#, if yes { "a" } else { "b" }),
    })
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    Complete,
    Fail,
    Cancel,
    Interrupt,
    /// Cancelled while still queued (may end before earlier turns do).
    CancelQueued,
}

#[derive(Debug, Clone)]
pub struct TurnSpec {
    pub sender: Sender,
    pub content: String,
    pub steps: Vec<Step>,
    pub end: End,
    /// A regeneration (v1.2) of the user message the active leaf answers, not a new message
    /// (a send when there is none yet).
    pub regenerate: bool,
}

/// One user message of the session and where the journal put it.
#[derive(Debug, Clone)]
pub struct Sent {
    pub sender: Sender,
    pub client_message_id: Option<String>,
    pub content: String,
    pub attachments: Vec<Attachment>,
    /// Sequence of its `message_received`.
    pub seq: i64,
    pub response: PostMessageResponse,
}

#[derive(Debug, Clone)]
pub struct SimSession {
    pub journal: Vec<Event>,
    pub sent: Vec<Sent>,
    /// Every turn queued: its id and the sequence of its `turn_queued`.
    pub queued: Vec<(String, i64)>,
}

/// The files message `k` carries: none, an image, or an image and a named document, so every
/// source's account of a message is checked with and without them.
pub fn attachments_of(k: usize) -> Vec<Attachment> {
    let image = Attachment {
        url: format!("https://files.example/{k}.png"),
        media_type: "image/png".into(),
        name: None,
    };
    let document = Attachment {
        url: format!("data:text/plain;base64,{k}"),
        media_type: "text/plain".into(),
        name: Some(format!("notes \"{k}\".txt")),
    };
    match k % 3 {
        0 => Vec::new(),
        1 => vec![image],
        _ => vec![image, document],
    }
}

pub fn cursor(seq: i64) -> String {
    format!("{EPOCH}-{seq}")
}

/// Builds the journal. `choices` decides, at each point, whether the next thing to happen is a
/// new message arriving or the runner moving on; `skips` leaves holes (other sessions' events).
pub fn build(turns: &[TurnSpec], choices: &[u8], skips: &[u8]) -> SimSession {
    let mut b = Builder {
        journal: Vec::new(),
        seq: 0,
        skips: skips.to_vec(),
        skip_at: 0,
        sent: Vec::new(),
        queued: Vec::new(),
        tree: Vec::new(),
        leaf: None,
    };
    // The runner's script per turn: its events after turn_queued.
    let mut arrived = 0usize;
    let mut queue: Vec<usize> = Vec::new(); // FIFO of arrived, not yet run turns
    let mut running: Option<(usize, usize)> = None; // (turn, next step index)
    let mut cancels: Vec<usize> = Vec::new();
    let mut text: Vec<String> = vec![String::new(); turns.len()];
    // Per turn: the requests asked and, of those, answered.
    let mut asked: Vec<Vec<u8>> = vec![Vec::new(); turns.len()];
    let mut answered: Vec<Vec<u8>> = vec![Vec::new(); turns.len()];
    let mut choice_at = 0usize;
    loop {
        let can_arrive = arrived < turns.len();
        let can_run = running.is_some() || !queue.is_empty() || !cancels.is_empty();
        if !can_arrive && !can_run {
            break;
        }
        let pick = choices.get(choice_at).copied().unwrap_or(0);
        choice_at += 1;
        // Someone switches to another branch's leaf (v1.2).
        if pick % 7 == 6 && b.switch(usize::from(pick / 7)) {
            continue;
        }
        if can_arrive && (!can_run || pick % 3 == 0) {
            let k = arrived;
            arrived += 1;
            b.arrive(k, &turns[k]);
            if turns[k].end == End::CancelQueued {
                cancels.push(k);
            } else {
                queue.push(k);
            }
            continue;
        }
        if !cancels.is_empty() && pick % 5 == 1 {
            let k = cancels.remove(0);
            b.end(k, TurnState::Cancelled, "", None);
            continue;
        }
        match running {
            None if !queue.is_empty() => {
                let k = queue.remove(0);
                b.turn_event(k, EventBody::TurnStarted {});
                running = Some((k, 0));
            }
            None => {
                let k = cancels.remove(0);
                b.end(k, TurnState::Cancelled, "", None);
            }
            Some((k, i)) if i < turns[k].steps.len() => {
                running = Some((k, i + 1));
                let body = match &turns[k].steps[i] {
                    Step::Ask(n) if asked[k].contains(n) => continue,
                    Step::Ask(n) => {
                        asked[k].push(*n);
                        EventBody::InputRequested(request(k, *n))
                    }
                    Step::Answer(n) if !asked[k].contains(n) || answered[k].contains(n) => continue,
                    Step::Answer(n) => {
                        answered[k].push(*n);
                        EventBody::InputGiven(InputGiven {
                            request_id: format!("r{n}"),
                            by: (k % 3 != 0).then(|| format!("user-{n}")),
                            answer: answer(k, *n, true),
                        })
                    }
                    Step::Think(d) => EventBody::Thinking { delta: d.clone() },
                    Step::Say(d) => {
                        text[k].push_str(d);
                        EventBody::ResponseDelta { delta: d.clone() }
                    }
                    Step::Tool(c, status) => EventBody::Tool(ToolCall {
                        call_id: format!("t{k}c{c}"),
                        name: if *status == ToolStatus::Started {
                            format!("tool{c}")
                        } else {
                            String::new()
                        },
                        status: *status,
                        input_preview: (*status == ToolStatus::Started).then(|| format!("in{c}")),
                        output_preview: matches!(status, ToolStatus::Finished | ToolStatus::Failed)
                            .then(|| format!("out{c}")),
                    }),
                };
                b.turn_event(k, body);
            }
            Some((k, _)) => {
                let (state, error) = match turns[k].end {
                    End::Complete | End::CancelQueued => (TurnState::Completed, None),
                    End::Fail => (TurnState::Failed, Some("model error".to_owned())),
                    End::Cancel => (TurnState::Cancelled, None),
                    End::Interrupt => (TurnState::Interrupted, None),
                };
                let t = text[k].clone();
                b.end(k, state, &t, error);
                running = None;
            }
        }
    }
    SimSession {
        journal: b.journal,
        sent: b.sent,
        queued: b.queued,
    }
}

struct Builder {
    journal: Vec<Event>,
    seq: i64,
    skips: Vec<u8>,
    skip_at: usize,
    sent: Vec<Sent>,
    queued: Vec<(String, i64)>,
    /// Every message id (replies from their turn's queueing) with its parent, oldest first.
    tree: Vec<(String, Option<String>)>,
    leaf: Option<String>,
}

impl Builder {
    fn next_seq(&mut self) -> i64 {
        let skip = self.skips.get(self.skip_at).copied().unwrap_or(0) % 3;
        self.skip_at += 1;
        self.seq += 1 + i64::from(skip);
        self.seq
    }

    fn push(&mut self, seq: i64, turn_id: Option<String>, body: EventBody) {
        self.journal.push(Event {
            id: cursor(seq),
            session_id: SESSION.to_owned(),
            ts: 1_000 + seq,
            turn_id,
            body,
            truncated: vec![],
        });
    }

    /// `branch_changed` to the `n`-th leaf other than the active one; false when there is none.
    fn switch(&mut self, n: usize) -> bool {
        let leaves: Vec<String> = self
            .tree
            .iter()
            .filter(|(id, _)| !self.tree.iter().any(|(_, p)| p.as_ref() == Some(id)))
            .filter(|(id, _)| Some(id) != self.leaf.as_ref())
            .map(|(id, _)| id.clone())
            .collect();
        if leaves.is_empty() {
            return false;
        }
        let leaf_id = leaves[n % leaves.len()].clone();
        let seq = self.next_seq();
        self.leaf = Some(leaf_id.clone());
        self.push(seq, None, EventBody::BranchChanged { leaf_id });
        true
    }

    fn parent_of(&self, id: &str) -> Option<String> {
        self.tree
            .iter()
            .find(|(i, _)| i == id)
            .and_then(|(_, p)| p.clone())
    }

    fn queue(&mut self, k: usize, parent: String) {
        let reply = format!("a{k}");
        self.tree.push((reply.clone(), Some(parent.clone())));
        self.leaf = Some(reply.clone());
        self.queued.push((format!("t{k}"), self.seq));
        self.push(
            self.seq,
            Some(format!("t{k}")),
            EventBody::TurnQueued {
                agent: None,
                reply_id: Some(reply),
                parent_id: Some(parent),
            },
        );
    }

    fn arrive(&mut self, k: usize, spec: &TurnSpec) {
        // (Once the leaf's reply is written: a page that reloads while both the reply and its
        // regeneration are unwritten cannot tell their turns apart, the snapshot naming no
        // reply ids.)
        let written = self.leaf.as_ref().is_some_and(|l| {
            self.journal.iter().any(|e| {
                matches!(&e.body, EventBody::TurnEnded { message: Some(m), .. } if m.message_id == *l)
            })
        });
        let answered = self.leaf.as_deref().and_then(|l| self.parent_of(l));
        if let (true, true, Some(user)) = (spec.regenerate, written, answered) {
            self.next_seq();
            self.queue(k, user);
            return;
        }
        let seq = self.next_seq();
        let client_message_id = match spec.sender {
            Sender::Local => Some(format!("c{k}")),
            Sender::Remote => Some(format!("x{k}")),
            Sender::Anonymous => None,
        };
        let turn_id = format!("t{k}");
        let message = Message {
            called_by: None,
            message_id: format!("m{k}"),
            client_message_id: client_message_id.clone(),
            role: Role::User,
            content: spec.content.clone(),
            status: MessageStatus::Complete,
            turn_id: Some(turn_id.clone()),
            created_at: 1_000 + seq,
            event_id: cursor(seq),
            author: (k % 2 == 0).then(|| format!("user-{k}")),
            attachments: attachments_of(k),
            parent_id: self.leaf.clone(),
            siblings: None,
            requests: Vec::new(),
        };
        self.tree.push((format!("m{k}"), self.leaf.clone()));
        self.push(
            seq,
            Some(turn_id.clone()),
            EventBody::MessageReceived { message },
        );
        // Accepting a message journals both in one transaction: nothing comes between them.
        self.seq += 1;
        self.queue(k, format!("m{k}"));
        self.sent.push(Sent {
            sender: spec.sender,
            client_message_id: client_message_id.clone(),
            content: spec.content.clone(),
            attachments: attachments_of(k),
            seq,
            response: PostMessageResponse {
                message_id: format!("m{k}"),
                client_message_id,
                turn_id,
                event_id: cursor(seq),
            },
        });
    }

    fn turn_event(&mut self, k: usize, body: EventBody) {
        let seq = self.next_seq();
        self.push(seq, Some(format!("t{k}")), body);
    }

    fn end(&mut self, k: usize, state: TurnState, text: &str, error: Option<String>) {
        let seq = self.next_seq();
        // As the server does: the reply keeps its turn's requests and their answers (v1.2).
        let turn = format!("t{k}");
        let mut requests = Vec::new();
        for e in self
            .journal
            .iter()
            .filter(|e| e.turn_id.as_ref() == Some(&turn))
        {
            match &e.body {
                EventBody::InputRequested(r) => {
                    turnstream_protocol::input::merge_request(&mut requests, r)
                }
                EventBody::InputGiven(g) => {
                    turnstream_protocol::input::merge_answer(&mut requests, g)
                }
                _ => {}
            }
        }
        let message = Message {
            called_by: None,
            message_id: format!("a{k}"),
            client_message_id: None,
            role: Role::Assistant,
            content: text.to_owned(),
            status: MessageStatus::for_terminal(state),
            turn_id: Some(format!("t{k}")),
            created_at: 1_000 + seq,
            event_id: cursor(seq),
            author: None,
            attachments: Vec::new(),
            parent_id: self.parent_of(&format!("a{k}")),
            siblings: None,
            requests,
        };
        self.push(
            seq,
            Some(format!("t{k}")),
            EventBody::TurnEnded {
                state,
                message: Some(message),
                error,
            },
        );
    }
}

pub fn seq_of(e: &Event) -> i64 {
    turnstream_protocol::cursor::sequence_of(&e.id).unwrap_or(i64::MAX)
}

impl SimSession {
    /// The journal as far as `upto` (the part that exists at that moment).
    pub fn until(&self, upto: i64) -> impl Iterator<Item = &Event> {
        self.journal.iter().filter(move |e| seq_of(e) <= upto)
    }

    /// The tree as of `c`: every message id (a reply from its turn's queueing) with its
    /// parent, oldest first, and the active leaf.
    pub fn tree_at(&self, c: i64) -> (Vec<(String, Option<String>)>, Option<String>) {
        let mut tree = Vec::new();
        let mut leaf = None;
        for e in self.until(c) {
            match &e.body {
                EventBody::MessageReceived { message } => {
                    tree.push((message.message_id.clone(), message.parent_id.clone()));
                }
                EventBody::TurnQueued {
                    reply_id: Some(r),
                    parent_id,
                    ..
                } => {
                    tree.push((r.clone(), parent_id.clone()));
                    leaf = Some(r.clone());
                }
                EventBody::BranchChanged { leaf_id } => leaf = Some(leaf_id.clone()),
                _ => {}
            }
        }
        // Between a message and its turn (one transaction on a real server): the message.
        let leaf = leaf.or_else(|| tree.last().map(|(id, _)| id.clone()));
        (tree, leaf)
    }

    /// The active branch at `c`: its message ids, root first.
    pub fn branch_at(&self, c: i64) -> Vec<String> {
        let (tree, leaf) = self.tree_at(c);
        let mut path = Vec::new();
        let mut at = leaf;
        while let Some(id) = at {
            at = tree
                .iter()
                .find(|(i, _)| *i == id)
                .and_then(|(_, p)| p.clone());
            path.insert(0, id);
        }
        path
    }

    /// A position a reader can see: a message and its turn_queued are one transaction.
    fn settled(&self, c: i64) -> i64 {
        let received = self
            .journal
            .iter()
            .any(|e| seq_of(e) == c && matches!(e.body, EventBody::MessageReceived { .. }));
        if received {
            c + 1
        } else {
            c
        }
    }

    /// `GET /history` taken when the journal head was `c`: the active branch (v1.2).
    pub fn history_at(&self, c: i64) -> HistoryResponse {
        let c = self.settled(c);
        let (tree, leaf) = self.tree_at(c);
        let path = self.branch_at(c);
        let mut messages: Vec<Message> = self
            .until(c)
            .filter_map(|e| match &e.body {
                EventBody::MessageReceived { message } => Some(message.clone()),
                EventBody::TurnEnded {
                    message: Some(m), ..
                } => Some(m.clone()),
                _ => None,
            })
            .filter(|m| path.contains(&m.message_id))
            .map(|mut m| {
                let ids: Vec<String> = tree
                    .iter()
                    .filter(|(_, p)| *p == m.parent_id)
                    .map(|(i, _)| i.clone())
                    .collect();
                if ids.len() > 1 {
                    m.siblings = Some(turnstream_protocol::Siblings {
                        index: ids.iter().position(|i| *i == m.message_id).unwrap_or(0) as u32,
                        count: ids.len() as u32,
                        ids,
                    });
                }
                m
            })
            .collect();
        // Conversation order: along the branch.
        messages.sort_by_key(|m| path.iter().position(|id| *id == m.message_id));
        HistoryResponse {
            session_id: SESSION.to_owned(),
            messages,
            cursor: cursor(c),
            has_more: false,
            leaf_id: leaf,
        }
    }

    /// `GET /history?limit=&before=` taken when the journal head was `c`: the newest `limit`
    /// messages written before the message `before` (or overall), and whether older ones exist.
    pub fn history_page(&self, c: i64, before: Option<&str>, limit: usize) -> HistoryResponse {
        let mut all = self.history_at(c);
        if let Some(b) = before {
            let end = all
                .messages
                .iter()
                .position(|m| m.message_id == b)
                .unwrap_or(0);
            all.messages.truncate(end);
        }
        let start = all.messages.len().saturating_sub(limit);
        all.has_more = start > 0;
        all.messages.drain(..start);
        all
    }

    /// The `snapshot` frame of a stream opened at `c`, with its active turns' places (v1.2:
    /// each turn's `reply_id` and `parent_id`, as its `turn_queued` named them).
    pub fn snapshot_placed_at(&self, c: i64) -> (Snapshot, Vec<super::TurnPlace>) {
        let snap = self.snapshot_at(c);
        let places = snap
            .active_turns
            .iter()
            .map(|a| {
                let queued = self.journal.iter().find_map(|e| match &e.body {
                    EventBody::TurnQueued {
                        reply_id,
                        parent_id,
                        ..
                    } if e.turn_id.as_ref() == Some(&a.turn_id) => {
                        Some((reply_id.clone(), parent_id.clone()))
                    }
                    _ => None,
                });
                let (reply_id, parent_id) = queued.unwrap_or_default();
                super::TurnPlace {
                    turn_id: a.turn_id.clone(),
                    reply_id,
                    parent_id,
                }
            })
            .collect();
        (snap, places)
    }

    /// The `snapshot` frame of a stream opened at `c`.
    pub fn snapshot_at(&self, c: i64) -> Snapshot {
        let c = self.settled(c);
        let mut active: Vec<ActiveTurn> = Vec::new();
        for e in self.until(c) {
            let Some(t) = &e.turn_id else { continue };
            match &e.body {
                EventBody::TurnQueued { .. } => active.push(ActiveTurn::new(t.clone(), SESSION)),
                EventBody::TurnEnded { .. } => active.retain(|a| &a.turn_id != t),
                body => {
                    if let Some(a) = active.iter_mut().find(|a| &a.turn_id == t) {
                        a.apply(body);
                    }
                }
            }
        }
        Snapshot {
            cursor: cursor(c),
            active_turns: active,
        }
    }

    /// `GET /api/turns/{turn}` at `c`, for a turn that had ended by then.
    pub fn turn_info_at(&self, turn_id: &str, c: i64) -> Option<turnstream_protocol::TurnInfo> {
        let mut info = None;
        for e in self
            .until(c)
            .filter(|e| e.turn_id.as_deref() == Some(turn_id))
        {
            if let EventBody::TurnEnded {
                state,
                message,
                error,
            } = &e.body
            {
                let active = self.snapshot_at(seq_of(e) - 1);
                let fold = active
                    .active_turns
                    .into_iter()
                    .find(|a| a.turn_id == turn_id);
                info = Some(turnstream_protocol::TurnInfo {
                    agent: None,
                    called_by: None,
                    turn_id: turn_id.to_owned(),
                    session_id: SESSION.to_owned(),
                    state: *state,
                    created_at: 0,
                    started_at: None,
                    ended_at: Some(e.ts),
                    text: message
                        .as_ref()
                        .map(|m| m.content.clone())
                        .unwrap_or_default(),
                    thinking: fold
                        .as_ref()
                        .map(|a| a.thinking.clone())
                        .unwrap_or_default(),
                    tools: fold.as_ref().map(|a| a.tools.clone()).unwrap_or_default(),
                    message: message.clone(),
                    error: error.clone(),
                    usage: None,
                    requests: message
                        .as_ref()
                        .map(|m| m.requests.clone())
                        .unwrap_or_default(),
                    reply_id: None,
                    parent_id: None,
                });
            }
        }
        info
    }

    /// Sequence at which a turn ended, if it did by `upto`.
    pub fn end_seq(&self, turn_id: &str, upto: i64) -> Option<i64> {
        self.until(upto).find_map(|e| match &e.body {
            EventBody::TurnEnded { .. } if e.turn_id.as_deref() == Some(turn_id) => Some(seq_of(e)),
            _ => None,
        })
    }
}
