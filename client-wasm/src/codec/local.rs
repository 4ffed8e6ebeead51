//! The SDK's own JSON: the cache record it keeps in IndexedDB, the messages sibling tabs of a
//! session exchange, and those of the relay channel. Built on [`super::wire`] for the protocol
//! types they carry.

use turnstream_protocol::MessageStatus;

use super::wire::{
    attachment, error_detail, on_busy, post_response, tool_call, turn_info, turn_request,
    write_attachments, write_error, write_on_busy, write_post_response, write_requests, write_tool,
    write_turn_info,
};
use super::{write_strings, Fields, Obj, Value, U32_MAX};
use crate::reducer::entry::{
    AssistantEntry, EntryError, Final, FinalSource, LocalAnswer, Node, Progress, UserEntry,
    UserStatus,
};
use crate::reducer::{BranchAction, CacheRecord};
use crate::relay::{Relay, StreamState, Want};
use crate::tabs::TabMessage;

// ----- enums: the SDK's own names -----

fn user_status_name(s: UserStatus) -> &'static str {
    match s {
        UserStatus::Sending => "sending",
        UserStatus::Rejected => "rejected",
        UserStatus::Sent => "sent",
    }
}

fn user_status(s: &str) -> Option<UserStatus> {
    [UserStatus::Sending, UserStatus::Rejected, UserStatus::Sent]
        .into_iter()
        .find(|u| user_status_name(*u) == s)
}

fn final_source_name(s: FinalSource) -> &'static str {
    match s {
        FinalSource::Lost => "lost",
        FinalSource::State => "state",
        FinalSource::Message => "message",
    }
}

fn final_source(s: &str) -> Option<FinalSource> {
    [FinalSource::Lost, FinalSource::State, FinalSource::Message]
        .into_iter()
        .find(|f| final_source_name(*f) == s)
}

// ----- reading: the cache, the tab messages and the relay -----

fn entry_error<V: Value>(v: &V) -> Option<EntryError> {
    let e = error_detail(v)?;
    Some(EntryError {
        code: e.code,
        message: e.message,
    })
}

fn user_entry<V: Value>(v: &V) -> Option<UserEntry> {
    let mut f = Fields::new(v);
    let u = UserEntry {
        key: f.str("key"),
        client_message_id: f.opt_str("client_message_id"),
        message_id: f.opt_str("message_id"),
        turn_id: f.opt_str("turn_id"),
        content: f.str("content"),
        created_at: f.int("created_at"),
        seq: f.opt_int("seq"),
        status: f.variant("status", user_status, UserStatus::Sent),
        error: f.opt("error", entry_error),
        from_server: f.bool("from_server"),
        send_order: f.count("send_order", i64::MAX) as u64,
        author: f.opt_str("author"),
        attachments: f.list("attachments", attachment),
        on_busy: f.opt("on_busy", on_busy),
        node: f.opt("node", node).unwrap_or_default(),
        edit: f.bool_or_false("edit"),
    };
    f.done(u)
}

fn node<V: Value>(v: &V) -> Option<Node> {
    let mut f = Fields::new(v);
    let n = Node {
        id: f.opt_str("id"),
        parent_id: f.opt_str("parent_id"),
        placed: f.bool("placed"),
        siblings: f.strings("siblings"),
        elsewhere: f.bool_or_false("elsewhere"),
    };
    f.done(n)
}

fn progress<V: Value>(v: &V) -> Option<Progress> {
    let mut f = Fields::new(v);
    let p = Progress {
        through: f.opt_int("through"),
        running: f.bool("running"),
        text: f.str("text"),
        thinking: f.str("thinking"),
        tools: f.list("tools", tool_call),
        requests: f.list("requests", turn_request),
    };
    f.done(p)
}

fn final_of<V: Value>(v: &V) -> Option<Final> {
    let mut f = Fields::new(v);
    let x = Final {
        status: f.variant("status", MessageStatus::parse, MessageStatus::Complete),
        source: f.variant("source", final_source, FinalSource::Lost),
        message_id: f.opt_str("message_id"),
        content: f.str("content"),
        truncated: f.bool("truncated"),
        error: f.opt_str("error"),
    };
    f.done(x)
}

fn assistant_entry<V: Value>(v: &V) -> Option<AssistantEntry> {
    let progress = progress(&v.get("progress")?)?;
    let mut f = Fields::new(v);
    let a = AssistantEntry {
        turn_id: f.str("turn_id"),
        anchor: f.opt_int("anchor"),
        progress,
        fin: f.opt("final", final_of),
        recovered: f.bool("recovered"),
        answers: f.list("answers", local_answer),
        node: f.opt("node", node).unwrap_or_default(),
    };
    f.done(a)
}

fn local_answer<V: Value>(v: &V) -> Option<LocalAnswer> {
    let mut f = Fields::new(v);
    let a = LocalAnswer {
        request_id: f.str("request_id"),
        answer: f.req_raw("answer"),
        sent: f.bool("sent"),
    };
    f.done(a)
}

pub fn cache_record<V: Value>(v: &V) -> Option<CacheRecord> {
    let mut f = Fields::new(v);
    let r = CacheRecord {
        version: f.count("version", U32_MAX) as u32,
        session_id: f.str("session_id"),
        epoch: f.opt_str("epoch"),
        users: f.list("users", user_entry),
        turns: f.list("turns", assistant_entry),
        branch_actions: f.list("branch_actions", branch_action),
    };
    f.done(r)
}

fn branch_action<V: Value>(v: &V) -> Option<BranchAction> {
    let mut f = Fields::new(v);
    let a = BranchAction {
        id: f.str("id"),
        regenerate: f.bool("regenerate"),
        target: f.str("target"),
        done: f.bool_or_false("done"),
    };
    f.done(a)
}

pub fn tab_message<V: Value>(v: &V) -> Option<TabMessage> {
    let mut f = Fields::new(v);
    let session_id = f.str("session_id");
    let m = match f.str("type").as_str() {
        "optimistic" => TabMessage::Optimistic {
            session_id,
            client_message_id: f.str("client_message_id"),
            content: f.str("content"),
            attachments: f.list("attachments", attachment),
            created_at: f.int("created_at"),
            on_busy: f.opt("on_busy", on_busy),
            edit: match f.bool_or_false("edit") {
                true => Some(f.opt_str("parent_id")),
                false => None,
            },
        },
        "posted" => TabMessage::Posted {
            session_id,
            response: post_response(&v.get("response")?)?,
        },
        "rejected" => TabMessage::Rejected {
            session_id,
            client_message_id: f.str("client_message_id"),
            error: error_detail(&v.get("error")?)?,
        },
        "recovered" => TabMessage::Recovered {
            session_id,
            turn_id: f.str("turn_id"),
            info: f.opt("info", turn_info).map(Box::new),
        },
        "answer" => TabMessage::Answer {
            session_id,
            turn_id: f.str("turn_id"),
            request_id: f.str("request_id"),
            answer: f.req_raw("answer"),
            sent: f.bool("sent"),
        },
        _ => return None,
    };
    f.done(m)
}

pub fn relay<V: Value>(v: &V) -> Option<Relay> {
    let mut f = Fields::new(v);
    let r = match f.str("t").as_str() {
        "state" => Relay::State {
            generation: f.int("gen"),
            streams: f.items("streams", stream_state),
            hidden: f.bool("hidden"),
        },
        "frame" => Relay::Frame {
            sid: f.str("sid"),
            kind: f.str("kind"),
            data: f.str("data"),
            prev: f.opt_str("prev"),
            last: f.str("last"),
        },
        "want" => Relay::Want {
            tab: f.str("tab"),
            generation: f.int("gen"),
            wants: f.items("wants", want),
        },
        "bye" => Relay::Bye { tab: f.str("tab") },
        "presence" => Relay::Presence {
            session: f.str("session"),
            state: f.str("state"),
        },
        _ => return None,
    };
    f.done(r)
}

fn stream_state<V: Value>(v: &V) -> Option<StreamState> {
    let mut f = Fields::new(v);
    let s = StreamState {
        sid: f.str("sid"),
        sessions: f.strings("sessions"),
        from: f.str("from"),
        last: f.opt_str("last"),
        open: f.bool("open"),
    };
    f.done(s)
}

fn want<V: Value>(v: &V) -> Option<Want> {
    let mut f = Fields::new(v);
    let w = Want {
        session: f.str("session"),
        pos: f.str("pos"),
        covered: f.opt_str("covered"),
    };
    f.done(w)
}

// ----- writing -----

fn write_user(out: &mut String, u: &UserEntry) {
    let mut o = Obj::new(out);
    o.str("key", &u.key)
        .opt_str("client_message_id", u.client_message_id.as_deref())
        .opt_str("message_id", u.message_id.as_deref())
        .opt_str("turn_id", u.turn_id.as_deref())
        .str("content", &u.content)
        .int("created_at", u.created_at)
        .opt_int("seq", u.seq)
        .str("status", user_status_name(u.status));
    match &u.error {
        Some(e) => write_error(o.key("error"), &e.code, &e.message),
        None => o.key("error").push_str("null"),
    }
    o.bool("from_server", u.from_server)
        .int(
            "send_order",
            i64::try_from(u.send_order).unwrap_or(i64::MAX),
        )
        .opt_str("author", u.author.as_deref());
    write_attachments(&mut o, &u.attachments);
    write_on_busy(&mut o, u.on_busy);
    write_node(o.key("node"), &u.node);
    o.bool("edit", u.edit).end();
}

fn write_node(out: &mut String, n: &Node) {
    Obj::new(out)
        .opt_str("id", n.id.as_deref())
        .opt_str("parent_id", n.parent_id.as_deref())
        .bool("placed", n.placed)
        .list("siblings", &n.siblings, write_strings)
        .bool("elsewhere", n.elsewhere)
        .end();
}

fn write_progress(out: &mut String, p: &Progress) {
    let mut o = Obj::new(out);
    o.opt_int("through", p.through)
        .bool("running", p.running)
        .str("text", &p.text)
        .str("thinking", &p.thinking)
        .list("tools", &p.tools, write_tool);
    write_requests(&mut o, &p.requests);
    o.end();
}

fn write_local_answer(out: &mut String, a: &LocalAnswer) {
    let mut o = Obj::new(out);
    o.str("request_id", &a.request_id);
    o.key("answer").push_str(a.answer.as_str());
    o.bool("sent", a.sent).end();
}

fn write_final(out: &mut String, f: &Final) {
    Obj::new(out)
        .str("status", f.status.as_str())
        .str("source", final_source_name(f.source))
        .opt_str("message_id", f.message_id.as_deref())
        .str("content", &f.content)
        .bool("truncated", f.truncated)
        .opt_str("error", f.error.as_deref())
        .end();
}

fn write_turn(out: &mut String, a: &AssistantEntry) {
    let mut o = Obj::new(out);
    o.str("turn_id", &a.turn_id).opt_int("anchor", a.anchor);
    write_progress(o.key("progress"), &a.progress);
    match &a.fin {
        Some(f) => write_final(o.key("final"), f),
        None => o.key("final").push_str("null"),
    }
    o.bool("recovered", a.recovered);
    if !a.answers.is_empty() {
        o.list("answers", &a.answers, write_local_answer);
    }
    write_node(o.key("node"), &a.node);
    o.end();
}

pub fn cache_record_json(rec: &CacheRecord) -> String {
    let mut out = String::new();
    let mut o = Obj::new(&mut out);
    o.int("version", i64::from(rec.version))
        .str("session_id", &rec.session_id)
        .opt_str("epoch", rec.epoch.as_deref())
        .list("users", &rec.users, write_user)
        .list("turns", &rec.turns, write_turn);
    if !rec.branch_actions.is_empty() {
        o.list("branch_actions", &rec.branch_actions, write_branch_action);
    }
    o.end();
    out
}

fn write_branch_action(out: &mut String, a: &BranchAction) {
    Obj::new(out)
        .str("id", &a.id)
        .bool("regenerate", a.regenerate)
        .str("target", &a.target)
        .bool("done", a.done)
        .end();
}

pub fn tab_message_json(msg: &TabMessage) -> String {
    let mut out = String::new();
    let mut o = Obj::new(&mut out);
    match msg {
        TabMessage::Optimistic {
            session_id,
            client_message_id,
            content,
            attachments,
            created_at,
            on_busy,
            edit,
        } => {
            o.str("type", "optimistic")
                .str("session_id", session_id)
                .str("client_message_id", client_message_id)
                .str("content", content);
            write_attachments(&mut o, attachments);
            o.int("created_at", *created_at);
            write_on_busy(&mut o, *on_busy);
            if let Some(parent) = edit {
                o.bool("edit", true).opt_str("parent_id", parent.as_deref());
            }
        }
        TabMessage::Posted {
            session_id,
            response,
        } => {
            o.str("type", "posted").str("session_id", session_id);
            write_post_response(o.key("response"), response);
        }
        TabMessage::Rejected {
            session_id,
            client_message_id,
            error,
        } => {
            o.str("type", "rejected")
                .str("session_id", session_id)
                .str("client_message_id", client_message_id);
            write_error(o.key("error"), &error.code, &error.message);
        }
        TabMessage::Recovered {
            session_id,
            turn_id,
            info,
        } => {
            o.str("type", "recovered")
                .str("session_id", session_id)
                .str("turn_id", turn_id);
            match info {
                Some(i) => write_turn_info(o.key("info"), i),
                None => o.key("info").push_str("null"),
            }
        }
        TabMessage::Answer {
            session_id,
            turn_id,
            request_id,
            answer,
            sent,
        } => {
            o.str("type", "answer")
                .str("session_id", session_id)
                .str("turn_id", turn_id)
                .str("request_id", request_id);
            o.key("answer").push_str(answer.as_str());
            o.bool("sent", *sent);
        }
    }
    o.end();
    out
}

fn write_stream_state(out: &mut String, s: &StreamState) {
    Obj::new(out)
        .str("sid", &s.sid)
        .list("sessions", &s.sessions, write_strings)
        .str("from", &s.from)
        .opt_str("last", s.last.as_deref())
        .bool("open", s.open)
        .end();
}

fn write_want(out: &mut String, w: &Want) {
    Obj::new(out)
        .str("session", &w.session)
        .str("pos", &w.pos)
        .opt_str("covered", w.covered.as_deref())
        .end();
}

pub fn relay_json(msg: &Relay) -> String {
    let mut out = String::new();
    let mut o = Obj::new(&mut out);
    match msg {
        Relay::State {
            generation,
            streams,
            hidden,
        } => {
            o.str("t", "state")
                .int("gen", *generation)
                .list("streams", streams, write_stream_state)
                .bool("hidden", *hidden);
        }
        Relay::Frame {
            sid,
            kind,
            data,
            prev,
            last,
        } => {
            o.str("t", "frame")
                .str("sid", sid)
                .str("kind", kind)
                .str("data", data)
                .opt_str("prev", prev.as_deref())
                .str("last", last);
        }
        Relay::Want {
            tab,
            generation,
            wants,
        } => {
            o.str("t", "want")
                .str("tab", tab)
                .int("gen", *generation)
                .list("wants", wants, write_want);
        }
        Relay::Bye { tab } => {
            o.str("t", "bye").str("tab", tab);
        }
        Relay::Presence { session, state } => {
            o.str("t", "presence")
                .str("session", session)
                .str("state", state);
        }
    }
    o.end();
    out
}

#[cfg(all(test, not(target_arch = "wasm32")))]
mod tests;
