//! The protocol's types against serde's derives: everything the simulated sessions produce
//! reads the same both ways, and the request bodies parse back, with serde, to what was sent.

use proptest::prelude::*;
use serde_json::{json, Value as Json};
use turnstream_protocol::{
    ErrorBody, ErrorDetail, Event, EventBody, InputGiven, Message, MessageStatus, OnBusy,
    PostMessageRequest, RawJson, Role as WireRole, ToolCall, ToolStatus, Truncation, TurnInfo,
    TurnRequest, TurnState,
};

use super::*;
use crate::codec::tests::{fails_as_serde_fails, same, tricky};
use crate::reducer::props::turn;
use crate::reducer::sim;

fn msg(n: u32, content: &str) -> Message {
    Message {
        called_by: None,
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

pub(in crate::codec) fn info(with_message: bool) -> TurnInfo {
    TurnInfo {
        agent: None,
        called_by: None,
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
pub(in crate::codec) fn asked() -> Vec<TurnRequest> {
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
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Every event, snapshot, history page and POST answer of simulated sessions.
    #[test]
    fn simulated_sessions_round_trip(
        turns in prop::collection::vec(turn(), 1..6),
        choices in prop::collection::vec(any::<u8>(), 0..80),
        skips in prop::collection::vec(any::<u8>(), 0..80),
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

    /// The same for what simulated sessions produce: events, snapshots, history pages and POST
    /// answers.
    #[test]
    fn simulated_sessions_fail_as_serde_fails(turns in prop::collection::vec(turn(), 1..4)) {
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
    }
}
