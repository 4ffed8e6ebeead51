//! Calls of other agents (contract v1.3) on the caller's reply: an `agent_call` request with its
//! child turn, open until the child's end answers it, the same from every source.

use turnstream_protocol::{
    ActiveTurn, CallTarget, EventBody, HistoryResponse, InputGiven, InputRequest, MessageStatus,
    RawJson, RequestKind, Snapshot, TurnRequest, TurnState,
};

use super::{ev, received, reply, user_msg, S};
use crate::reducer::{Conversation, EntryStatus};

fn call() -> InputRequest {
    InputRequest {
        request_id: "c1".into(),
        kind: RequestKind::AgentCall,
        tool: None,
        prompt: None,
        options: None,
        expires_at: None,
        call: Some(CallTarget {
            agent: "researcher".into(),
            session_id: "s2".into(),
            turn_id: "t9".into(),
            message_id: "m9".into(),
        }),
    }
}

fn answered() -> InputGiven {
    InputGiven {
        request_id: "c1".into(),
        by: Some("turn:t9".into()),
        answer: RawJson::trusted(r#"{"turn_id":"t9","state":"completed","text":"hello"}"#.into()),
    }
}

/// `t1` started and called `researcher` in `s2`.
fn calling() -> Conversation {
    let mut c = Conversation::new(S);
    c.apply_event(&received(
        1,
        1,
        Some("c1"),
        "/call researcher s2 /echo hello",
    ));
    c.apply_event(&ev(2, "t1", EventBody::TurnStarted {}));
    c.apply_event(&ev(3, "t1", EventBody::InputRequested(call())));
    c
}

#[test]
fn a_call_shows_on_the_callers_reply_until_the_child_answers_it() {
    let mut c = calling();
    let entry = |c: &Conversation| c.view().messages[1].clone();
    assert_eq!(entry(&c).status, EntryStatus::Waiting);
    let r = &entry(&c).requests[0];
    assert_eq!((r.kind, r.answer.as_ref()), (RequestKind::AgentCall, None));
    assert_eq!(r.call.as_ref().map(|t| t.turn_id.as_str()), Some("t9"));
    assert_eq!(
        c.find_request("c1"),
        Some(("t1".to_owned(), RequestKind::AgentCall))
    );
    // The child's end answers it, in the journal.
    c.apply_event(&ev(7, "t1", EventBody::InputGiven(answered())));
    let r = &entry(&c).requests[0];
    assert_eq!(r.answer.as_ref(), Some(&answered().answer));
    assert_eq!(r.answered_by.as_deref(), Some("turn:t9"));
    assert_eq!(
        entry(&c).status,
        EntryStatus::Streaming,
        "the caller goes on"
    );
    // A reload shows the same from the cache.
    let mut reloaded = Conversation::new(S);
    reloaded.apply_cache(&c.to_cache());
    assert_eq!(reloaded.view().messages, c.view().messages);
    assert_eq!(
        reloaded.next_answer(),
        None,
        "nothing for a browser to post"
    );
}

#[test]
fn a_call_reads_the_same_from_the_snapshot_and_from_history() {
    let live = calling();
    let mut at = ActiveTurn::new("t1", S);
    at.apply(&EventBody::TurnStarted {});
    at.apply(&EventBody::InputRequested(call()));
    assert_eq!(at.state, TurnState::Waiting);
    let mut c = Conversation::new(S);
    let page = |messages| HistoryResponse {
        session_id: S.into(),
        messages,
        cursor: "e1-3".into(),
        has_more: false,
        leaf_id: None,
    };
    c.apply_history(&page(vec![user_msg(
        1,
        1,
        Some("c1"),
        "/call researcher s2 /echo hello",
    )]));
    c.apply_snapshot(&Snapshot {
        cursor: "e1-3".into(),
        active_turns: vec![at],
    });
    assert_eq!(c.view().messages, live.view().messages);

    // Once the turn ended, history's reply lists the call with its answer.
    let mut r = TurnRequest::open(&call());
    r.answer = Some(answered().answer);
    r.answered_by = answered().by;
    let mut done = reply(9, 1, MessageStatus::Complete, "researcher answered: hello");
    done.requests = vec![r.clone()];
    let mut h = Conversation::new(S);
    h.apply_history(&page(vec![
        user_msg(1, 1, Some("c1"), "/call researcher s2 /echo hello"),
        done,
    ]));
    let v = h.view();
    assert_eq!(v.messages[1].status, EntryStatus::Complete);
    assert_eq!(v.messages[1].requests, vec![r]);
}
