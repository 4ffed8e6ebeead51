//! The hand-written codec against serde's derives: everything the simulated sessions produce
//! reads the same both ways, and everything written parses back, with serde, to the same value.

use proptest::prelude::*;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{json, Value as Json};
use turnstream_protocol::{
    ErrorBody, ErrorDetail, Event, EventBody, InputGiven, Message, MessageStatus, OnBusy,
    PostMessageRequest, RawJson, Role as WireRole, ToolCall, ToolStatus, Truncation, TurnInfo,
    TurnRequest, TurnState,
};

use super::*;
use crate::reducer::props::{feeds_of, turn};
use crate::reducer::sim;
use crate::reducer::Conversation;

impl Value for Json {
    fn get(&self, key: &str) -> Option<Self> {
        self.as_object()?.get(key).filter(|v| !v.is_null()).cloned()
    }
    fn string(&self) -> Option<String> {
        self.as_str().map(str::to_owned)
    }
    fn number(&self) -> Option<f64> {
        self.as_f64()
    }
    fn boolean(&self) -> Option<bool> {
        self.as_bool()
    }
    fn items(&self) -> Option<Vec<Self>> {
        self.as_array().cloned()
    }
    fn json(&self) -> String {
        self.to_string()
    }
}

/// `read` reads what serde writes, and (when given) `write` writes what serde reads.
fn same<T>(x: &T, read: fn(&Json) -> Option<T>, write: Option<fn(&T) -> String>)
where
    T: Serialize + DeserializeOwned + PartialEq + std::fmt::Debug,
{
    let v = serde_json::to_value(x).expect("serde writes it");
    assert_eq!(read(&v).as_ref(), Some(x), "reading {v}");
    if let Some(write) = write {
        let text = write(x);
        let parsed: Json = serde_json::from_str(&text).expect("valid JSON");
        assert_eq!(parsed, v, "writing {x:?}");
        let back: T = serde_json::from_str(&text).expect("serde reads it");
        assert_eq!(&back, x);
        assert_eq!(read(&parsed).as_ref(), Some(x));
    }
}

fn tricky() -> Vec<String> {
    vec![
        String::new(),
        "plain".into(),
        "quote \" backslash \\ slash /".into(),
        "lines\nand\ttabs\r".into(),
        "\u{0}\u{1}\u{1f}\u{7f}".into(),
        "héllo wörld 💬 \u{2028}\u{2029}".into(),
    ]
}

fn msg(n: u32, content: &str) -> Message {
    Message {
        message_id: format!("m{n}"),
        client_message_id: (n % 2 == 0).then(|| format!("c{n}")),
        role: if n % 2 == 0 {
            WireRole::User
        } else {
            WireRole::Assistant
        },
        content: content.into(),
        status: MessageStatus::Failed,
        turn_id: Some(format!("t{n}")),
        created_at: 1_700_000_000_000 + i64::from(n),
        event_id: format!("ep1-{n}"),
        author: (n % 3 == 0).then(|| format!("user-{n}")),
        attachments: sim::attachments_of(n as usize),
        parent_id: (n > 0).then(|| format!("m{}", n - 1)),
        siblings: None,
        requests: Vec::new(),
    }
}

fn tool(n: u32) -> ToolCall {
    ToolCall {
        call_id: format!("call{n}"),
        name: "search".into(),
        status: [
            ToolStatus::Started,
            ToolStatus::Progress,
            ToolStatus::Finished,
            ToolStatus::Failed,
        ][n as usize % 4],
        input_preview: (n % 2 == 0).then(|| "in \"q\"".into()),
        output_preview: (n % 3 == 0).then(|| "out\n".into()),
    }
}

fn info(with_message: bool) -> TurnInfo {
    TurnInfo {
        turn_id: "t1".into(),
        session_id: "s1".into(),
        state: TurnState::Failed,
        created_at: 1,
        started_at: Some(2),
        ended_at: None,
        text: "partial".into(),
        thinking: "hm".into(),
        tools: (0..4).map(tool).collect(),
        message: with_message.then(|| msg(1, "reply")),
        error: Some("boom".into()),
        usage: None,
        requests: Vec::new(),
        reply_id: None,
        parent_id: None,
    }
}

#[test]
fn wire_types_read_as_serde_reads_them() {
    for s in tricky() {
        same(&msg(2, &s), message, None);
        same(&msg(3, &s), message, None);
    }
    for n in 0..6 {
        same(&tool(n), tool_call, None);
    }
    same(&info(true), turn_info, None);
    same(&info(false), turn_info, None);
    let ended = Event {
        id: "ep1-9".into(),
        session_id: "s1".into(),
        ts: 9,
        turn_id: Some("t1".into()),
        body: EventBody::TurnEnded {
            state: TurnState::Failed,
            message: Some(msg(1, "x")),
            error: Some("why".into()),
        },
        truncated: vec![Truncation {
            field: "message.content".into(),
            original_size: 300_000,
        }],
    };
    same(&ended, event, None);
    let tool_event = Event {
        body: EventBody::Tool(tool(2)),
        truncated: vec![],
        turn_id: None,
        ..ended.clone()
    };
    same(&tool_event, event, None);
    same(
        &turnstream_protocol::CancelResponse {
            turn_id: "t".into(),
            state: TurnState::Cancelled,
        },
        cancel_response,
        None,
    );
    for reason in [
        ResyncReason::Invalid,
        ResyncReason::Epoch,
        ResyncReason::Expired,
        ResyncReason::Future,
    ] {
        same(&ResyncRequired { reason }, resync, None);
        assert_eq!(
            json!(resync_reason_name(reason)),
            serde_json::to_value(reason).expect("json")
        );
    }
    for state in [
        TurnState::Queued,
        TurnState::Running,
        TurnState::Completed,
        TurnState::Cancelled,
        TurnState::Failed,
        TurnState::Interrupted,
    ] {
        assert_eq!(
            json!(turn_state_name(state)),
            serde_json::to_value(state).expect("json")
        );
    }
    let body = ErrorBody {
        error: ErrorDetail {
            code: "content_too_large".into(),
            message: "no".into(),
        },
    };
    assert_eq!(
        error_body(&serde_json::to_value(&body).expect("json")),
        Some(body.error)
    );
}

/// The requests of the simulated sessions, one of each kind, answered and not.
fn asked() -> Vec<TurnRequest> {
    (0..6u8)
        .map(|n| {
            let mut r = TurnRequest::open(&sim::request(1, n));
            if n >= 3 {
                r.answer = Some(sim::answer(1, n, true));
                r.answered_by = (n == 4).then(|| "ann".into());
            }
            r
        })
        .collect()
}

#[test]
fn requests_and_answers_read_as_serde_reads_them() {
    for r in asked() {
        let body =
            EventBody::InputRequested(sim::request(2, r.request_id[1..].parse().unwrap_or(0)));
        let e = Event {
            id: "ep1-4".into(),
            session_id: "s1".into(),
            ts: 5,
            turn_id: Some("t2".into()),
            body,
            truncated: vec![],
        };
        same(&e, event, None);
        same(&r, turn_request, None);
    }
    let given = Event {
        id: "ep1-5".into(),
        session_id: "s1".into(),
        ts: 6,
        turn_id: Some("t2".into()),
        body: EventBody::InputGiven(InputGiven {
            request_id: "r1".into(),
            by: None,
            answer: RawJson::trusted(r#"{"timed_out":true}"#.into()),
        }),
        truncated: vec![],
    };
    same(&given, event, None);
    let waiting = TurnInfo {
        state: TurnState::Waiting,
        requests: asked(),
        ..info(false)
    };
    same(&waiting, turn_info, None);
    // A state a later contract adds reads as running rather than making the answer unreadable.
    let mut later = serde_json::to_value(&waiting).expect("serde writes it");
    later["state"] = json!("pondering");
    assert_eq!(turn_info(&later).map(|t| t.state), Some(TurnState::Running));
    let snap = json!({"cursor": "ep1-9", "active_turns": [{"turn_id": "t", "session_id": "s1",
        "state": "pondering", "thinking": "", "tools": [], "text": "", "requests": later["requests"]}]});
    let read = snapshot(&snap).expect("reads");
    assert_eq!(read.active_turns[0].state, TurnState::Running);
    assert_eq!(read.active_turns[0].requests, asked());
    // An unknown request kind is an event this SDK skips, not a broken stream.
    assert!(event(
        &json!({"id": "ep1-1", "session_id": "s1", "ts": 1, "turn_id": "t",
        "kind": "telepathy", "request_id": "r"})
    )
    .is_none());
}

#[test]
fn answer_bodies_are_what_the_server_reads() {
    for n in 0..6u8 {
        for recorded in [true, false] {
            let answer = sim::answer(1, n, recorded);
            let text = input_request_json("r \"1\"", &answer);
            let body: Json = serde_json::from_str(&text).expect("valid JSON");
            let mut want: Json = serde_json::from_str(answer.as_str()).expect("valid JSON");
            want["request_id"] = json!("r \"1\"");
            assert_eq!(body, want);
        }
    }
    for on_busy in [OnBusy::Enqueue, OnBusy::Reject, OnBusy::Interrupt] {
        let text = post_request_json("hi", "c-1", &[], Some(on_busy), None);
        let req: PostMessageRequest = serde_json::from_str(&text).expect("parses");
        assert_eq!(req.on_busy, Some(on_busy));
    }
    assert!(!post_request_json("hi", "c-1", &[], None, None).contains("on_busy"));
}

#[test]
fn written_bodies_are_what_serde_writes() {
    for (n, s) in tricky().into_iter().enumerate() {
        let files = sim::attachments_of(n);
        let text = post_request_json(&s, "c-1", &files, None, None);
        let req: PostMessageRequest = serde_json::from_str(&text).expect("parses");
        assert_eq!(req.content, s);
        assert_eq!(req.client_message_id.as_deref(), Some("c-1"));
        assert_eq!(req.attachments, files);
        // Without attachments the body is a v1 body.
        assert_eq!(text.contains("attachments"), !files.is_empty());
    }
    let id = |s: &str| Some(s.to_owned());
    let tabs = [
        TabMessage::Optimistic {
            session_id: "s1".into(),
            client_message_id: "c1".into(),
            content: "hi \"there\"\n".into(),
            attachments: Vec::new(),
            created_at: -5,
            on_busy: None,
            edit: None,
        },
        TabMessage::Optimistic {
            session_id: "s1".into(),
            client_message_id: "c2".into(),
            content: String::new(),
            attachments: sim::attachments_of(2),
            created_at: 7,
            on_busy: None,
            edit: None,
        },
        TabMessage::Posted {
            session_id: "s1".into(),
            response: PostMessageResponse {
                message_id: "m1".into(),
                client_message_id: id("c1"),
                turn_id: "t1".into(),
                event_id: "ep1-3".into(),
            },
        },
        TabMessage::Rejected {
            session_id: "s1".into(),
            client_message_id: "c1".into(),
            error: ErrorDetail {
                code: "c".into(),
                message: "m".into(),
            },
        },
        TabMessage::Recovered {
            session_id: "s1".into(),
            turn_id: "t1".into(),
            info: Some(Box::new(info(true))),
        },
        TabMessage::Recovered {
            session_id: "s1".into(),
            turn_id: "t1".into(),
            info: Some(Box::new(info(false))),
        },
        TabMessage::Recovered {
            session_id: "s1".into(),
            turn_id: "t1".into(),
            info: None,
        },
        TabMessage::Recovered {
            session_id: "s1".into(),
            turn_id: "t1".into(),
            info: Some(Box::new(TurnInfo {
                state: TurnState::Waiting,
                requests: asked(),
                ..info(false)
            })),
        },
        TabMessage::Optimistic {
            session_id: "s1".into(),
            client_message_id: "c3".into(),
            content: "stop that".into(),
            attachments: Vec::new(),
            created_at: 9,
            on_busy: Some(OnBusy::Interrupt),
            edit: None,
        },
        TabMessage::Answer {
            session_id: "s1".into(),
            turn_id: "t1".into(),
            request_id: "r1".into(),
            answer: sim::answer(1, 1, true),
            sent: false,
        },
        TabMessage::Answer {
            session_id: "s1".into(),
            turn_id: "t1".into(),
            request_id: "r2".into(),
            answer: sim::answer(1, 2, false),
            sent: true,
        },
    ];
    for t in &tabs {
        same(t, tab_message, Some(tab_message_json));
        fails_as_serde_fails(t, tab_message);
    }
}

#[test]
fn integers_and_strings_are_written_exactly() {
    for n in [0, 1, -1, 9, 10, 123_456_789, i64::MAX, i64::MIN] {
        let mut out = String::new();
        write_int(&mut out, n);
        assert_eq!(out, n.to_string());
    }
    for s in tricky() {
        let mut out = String::new();
        write_str(&mut out, &s);
        assert_eq!(serde_json::from_str::<String>(&out).ok(), Some(s));
    }
}

#[test]
fn bad_shapes_read_as_nothing() {
    let good = json!({"id": "ep1-1", "session_id": "s", "ts": 1, "kind": "turn_started"});
    assert!(event(&good).is_some());
    let mut extra = good.clone();
    extra["future_field"] = json!({"nested": [1, 2]});
    assert!(event(&extra).is_some(), "unknown fields are ignored");
    let mut null_turn = good.clone();
    null_turn["turn_id"] = Json::Null;
    assert_eq!(event(&null_turn).and_then(|e| e.turn_id), None);
    for (field, bad) in [
        ("kind", json!("teleported")),
        ("kind", json!(3)),
        ("ts", json!("1")),
        ("ts", json!(1.5)),
        ("id", json!(null)),
        ("turn_id", json!(7)),
        ("truncated", json!({})),
    ] {
        let mut v = good.clone();
        v[field] = bad.clone();
        assert!(event(&v).is_none(), "{field}: {bad}");
    }
    let mut big = good.clone();
    big["ts"] = json!(9_007_199_254_740_991_i64);
    assert_eq!(event(&big).map(|e| e.ts), Some(9_007_199_254_740_991));
    for past in [
        json!(9_007_199_254_740_992_i64),
        json!(9_007_199_254_740_993_i64),
    ] {
        big["ts"] = past;
        assert!(
            event(&big).is_none(),
            "a number a JS number may have rounded"
        );
    }
    assert!(event(&json!("not an object")).is_none());
    assert!(event(&json!([good])).is_none());
    assert!(cache_record(&json!({"version": 1})).is_none());
    assert!(tab_message(&json!({"type": "gossip", "session_id": "s"})).is_none());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Every event, snapshot, history page and POST answer of simulated sessions, and the cache
    /// of a client fed them in any order.
    #[test]
    fn simulated_sessions_round_trip(
        turns in prop::collection::vec(turn(), 1..6),
        choices in prop::collection::vec(any::<u8>(), 0..80),
        skips in prop::collection::vec(any::<u8>(), 0..80),
        dice in prop::collection::vec(any::<u8>(), 0..64),
    ) {
        let s = sim::build(&turns, &choices, &skips);
        let head = s.journal.last().map_or(0, sim::seq_of);
        for e in &s.journal {
            same(e, event, None);
        }
        for at in 0..=head {
            same(&s.snapshot_at(at), snapshot, None);
        }
        same(&s.history_at(head), history, None);
        for m in &s.sent {
            same(&m.response, post_response, None);
        }
        let mut c = Conversation::new(sim::SESSION);
        for f in feeds_of(&s, &dice) {
            f.apply(&s, &mut c);
            same(&c.to_cache(), cache_record, Some(cache_record_json));
        }
    }

    #[test]
    fn any_string_survives(s in any::<String>()) {
        let mut out = String::new();
        write_str(&mut out, &s);
        prop_assert_eq!(serde_json::from_str::<String>(&out).ok(), Some(s));
    }
}

#[test]
fn relay_messages_round_trip() {
    use crate::relay::{Relay, StreamState, Want};
    let msgs = [
        Relay::State {
            generation: 123_456,
            streams: vec![StreamState {
                sid: "c-1.0".into(),
                sessions: vec!["a".into(), "b \"q\"".into()],
                from: "e1-5".into(),
                last: Some("e1-6".into()),
                open: true,
            }],
            hidden: false,
        },
        Relay::Frame {
            sid: "c-1.0".into(),
            kind: "event".into(),
            data: r#"{"id":"e1-6","kind":"turn_started"}"#.into(),
            prev: Some("e1-5".into()),
            last: "e1-6".into(),
        },
        Relay::Want {
            tab: "c-2".into(),
            generation: 7,
            wants: vec![
                Want {
                    session: "a".into(),
                    pos: "e1-6".into(),
                    covered: Some("c-1.0".into()),
                },
                Want {
                    session: "b".into(),
                    pos: "e1-2".into(),
                    covered: None,
                },
            ],
        },
        Relay::Bye { tab: "c-2".into() },
    ];
    for m in msgs {
        let json: serde_json::Value =
            serde_json::from_str(&relay_json(&m)).expect("relay_json writes JSON");
        assert_eq!(relay(&json), Some(m));
    }
    // A leader of an earlier release says neither `last` nor `prev`: still read.
    let older = serde_json::json!({"t": "frame", "sid": "c-1.0", "kind": "event", "data": "{}", "last": "e1-6"});
    assert!(matches!(
        relay(&older),
        Some(Relay::Frame { prev: None, .. })
    ));
    let older = serde_json::json!({"t": "state", "gen": 1, "hidden": false,
        "streams": [{"sid": "c-1.0", "sessions": ["a"], "from": "e1-5", "open": true}]});
    let Some(Relay::State { streams, .. }) = relay(&older) else {
        panic!("an older leader's state reads")
    };
    assert_eq!(streams[0].last, None);
}

#[test]
fn the_sdks_own_enum_names_are_their_serde_names() {
    for s in [UserStatus::Sending, UserStatus::Rejected, UserStatus::Sent] {
        assert_eq!(
            json!(user_status_name(s)),
            serde_json::to_value(s).expect("json")
        );
        assert_eq!(user_status(user_status_name(s)), Some(s));
    }
    for f in [FinalSource::Lost, FinalSource::State, FinalSource::Message] {
        assert_eq!(
            json!(final_source_name(f)),
            serde_json::to_value(f).expect("json")
        );
        assert_eq!(final_source(final_source_name(f)), Some(f));
    }
    assert_eq!(user_status("nope"), None);
    assert_eq!(final_source("nope"), None);
}

/// `v` with one member (at any depth; of an array, its first element's) replaced by `[[]]`, a
/// value of no type the codec reads but raw JSON; and `v` with one member removed. Each with
/// its path, and a JSON serde may read the same instead of the mutation: for a removed array,
/// an empty one (the codec reads most missing arrays as empty, where serde fails unless the
/// field has a default); for removed raw JSON (a tool's input, an answer), `null`, as the codec
/// reads it. Raw JSON is not walked into.
fn mutations(v: &Json) -> Vec<(String, Json, Json)> {
    let mut out = Vec::new();
    match v {
        Json::Object(members) => {
            for (key, child) in members {
                let mut bad = v.clone();
                bad[key.as_str()] = json!([[]]);
                out.push((format!("{key}: [[]]"), bad.clone(), bad));
                let mut gone = v.clone();
                gone.as_object_mut().map(|o| o.remove(key));
                let mut expected = gone.clone();
                let raw = key == "input" || key == "answer";
                if child.is_array() {
                    expected[key.as_str()] = json!([]);
                } else if raw {
                    expected[key.as_str()] = Json::Null;
                }
                out.push((format!("{key} removed"), gone, expected));
                if raw {
                    continue;
                }
                for (path, m, e) in mutations(child) {
                    let mut inner = v.clone();
                    inner[key.as_str()] = m;
                    let mut expected = v.clone();
                    expected[key.as_str()] = e;
                    out.push((format!("{key}.{path}"), inner, expected));
                }
            }
        }
        Json::Array(items) if !items.is_empty() => {
            for (path, m, e) in mutations(&items[0]) {
                let mut inner = v.clone();
                inner[0] = m;
                let mut expected = v.clone();
                expected[0] = e;
                out.push((format!("[0].{path}"), inner, expected));
            }
        }
        _ => {}
    }
    out
}

/// Every mutation of `x`'s JSON reads as serde reads it: nothing where serde fails, the same
/// value where it succeeds (a field of the wrong type, at any depth, fails the whole read; a
/// missing optional one reads as absent).
fn fails_as_serde_fails<T>(x: &T, read: fn(&Json) -> Option<T>)
where
    T: Serialize + DeserializeOwned + PartialEq + std::fmt::Debug,
{
    let v = serde_json::to_value(x).expect("serde writes it");
    for (path, m, alt) in mutations(&v) {
        let got = read(&m);
        let serde = serde_json::from_value::<T>(m).ok();
        if got != serde {
            let alt = serde_json::from_value::<T>(alt).ok();
            assert_eq!(got, alt, "{path} in {v}");
        }
    }
}

#[test]
fn every_field_of_a_wrong_shape_fails_as_serde_fails() {
    let mut asked_msg = msg(4, "with versions");
    asked_msg.siblings = Some(Siblings {
        index: 1,
        count: 2,
        ids: vec!["m3".into(), "m4".into()],
    });
    asked_msg.requests = asked();
    fails_as_serde_fails(&asked_msg, message);
    let mut full = info(true);
    full.requests = asked();
    fails_as_serde_fails(&full, turn_info);
    for r in asked() {
        fails_as_serde_fails(&r, turn_request);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(8))]

    /// The same for what simulated sessions produce: events, snapshots, history pages, POST
    /// answers, and the cache of a client fed them.
    #[test]
    fn simulated_sessions_fail_as_serde_fails(
        turns in prop::collection::vec(turn(), 1..4),
        dice in prop::collection::vec(any::<u8>(), 0..32),
    ) {
        let s = sim::build(&turns, &[], &[]);
        let head = s.journal.last().map_or(0, sim::seq_of);
        for e in &s.journal {
            fails_as_serde_fails(e, event);
        }
        fails_as_serde_fails(&s.snapshot_at(head / 2), snapshot);
        fails_as_serde_fails(&s.history_at(head), history);
        for m in &s.sent {
            fails_as_serde_fails(&m.response, post_response);
        }
        let mut c = Conversation::new(sim::SESSION);
        for f in feeds_of(&s, &dice) {
            f.apply(&s, &mut c);
        }
        fails_as_serde_fails(&c.to_cache(), cache_record);
    }
}
