//! Unit tests of the reducer: one behaviour each, on hand-written events.

use turnstream_protocol::{
    ActiveTurn, ErrorDetail, Event, EventBody, HistoryResponse, Message, MessageStatus,
    PostMessageResponse, Role as WireRole, Snapshot, ToolCall, ToolStatus, Truncation, TurnInfo,
    TurnState,
};

use super::{CacheRecord, Connection, Conversation, EntryStatus, Role};
use crate::tabs::TabMessage;

mod calls;

const S: &str = "s1";

fn ev(seq: i64, turn: &str, body: EventBody) -> Event {
    Event {
        id: format!("e1-{seq}"),
        session_id: S.into(),
        ts: seq,
        turn_id: Some(turn.into()),
        body,
        truncated: vec![],
    }
}

fn user_msg(seq: i64, n: u32, cmid: Option<&str>, content: &str) -> Message {
    Message {
        called_by: None,
        message_id: format!("m{n}"),
        client_message_id: cmid.map(Into::into),
        role: WireRole::User,
        content: content.into(),
        status: MessageStatus::Complete,
        turn_id: Some(format!("t{n}")),
        created_at: 1000 + seq,
        event_id: format!("e1-{seq}"),
        author: None,
        attachments: Vec::new(),
        parent_id: None,
        siblings: None,
        requests: Vec::new(),
    }
}

fn reply(seq: i64, n: u32, status: MessageStatus, content: &str) -> Message {
    Message {
        called_by: None,
        message_id: format!("a{n}"),
        client_message_id: None,
        role: WireRole::Assistant,
        content: content.into(),
        status,
        turn_id: Some(format!("t{n}")),
        created_at: 1000 + seq,
        event_id: format!("e1-{seq}"),
        author: None,
        attachments: Vec::new(),
        parent_id: None,
        siblings: None,
        requests: Vec::new(),
    }
}

fn received(seq: i64, n: u32, cmid: Option<&str>, content: &str) -> Event {
    ev(
        seq,
        &format!("t{n}"),
        EventBody::MessageReceived {
            message: user_msg(seq, n, cmid, content),
        },
    )
}

fn delta(seq: i64, n: u32, d: &str) -> Event {
    ev(
        seq,
        &format!("t{n}"),
        EventBody::ResponseDelta { delta: d.into() },
    )
}

fn ended(seq: i64, n: u32, state: TurnState, content: &str) -> Event {
    ev(
        seq,
        &format!("t{n}"),
        EventBody::TurnEnded {
            state,
            message: Some(reply(seq, n, MessageStatus::for_terminal(state), content)),
            error: None,
        },
    )
}

fn history(cursor: &str, messages: Vec<Message>) -> HistoryResponse {
    HistoryResponse {
        session_id: S.into(),
        messages,
        cursor: cursor.into(),
        has_more: false,
        leaf_id: None,
    }
}

fn info(n: u32, state: TurnState, text: &str, message: Option<Message>) -> TurnInfo {
    TurnInfo {
        agent: None,
        called_by: None,
        turn_id: format!("t{n}"),
        session_id: S.into(),
        state,
        created_at: 1,
        started_at: Some(2),
        ended_at: state.is_terminal().then_some(3),
        text: text.into(),
        thinking: "pondered".into(),
        tools: vec![],
        message,
        error: None,
        usage: None,
        requests: Vec::new(),
        reply_id: None,
        parent_id: None,
    }
}

fn statuses(c: &Conversation) -> Vec<(String, EntryStatus)> {
    c.view()
        .messages
        .into_iter()
        .map(|e| (e.key, e.status))
        .collect()
}

#[test]
fn optimistic_bubble_becomes_the_server_message_once() {
    let mut c = Conversation::new(S);
    c.send_local("c1", "hello", &[], 5, None);
    assert_eq!(statuses(&c), vec![("c1".into(), EntryStatus::Sending)]);
    assert!(!c.view().busy, "no turn exists before the server accepts");

    // The stream is faster than the POST answer here; the answer then changes nothing visible.
    c.apply_event(&received(10, 1, Some("c1"), "hello"));
    c.apply_post_response(&PostMessageResponse {
        message_id: "m1".into(),
        client_message_id: Some("c1".into()),
        turn_id: "t1".into(),
        event_id: "e1-10".into(),
    });
    let v = c.view();
    assert_eq!(
        statuses(&c),
        vec![
            ("c1".into(), EntryStatus::Sent),
            ("turn:t1".into(), EntryStatus::Queued)
        ]
    );
    assert_eq!(v.messages[0].message_id.as_deref(), Some("m1"));
    assert_eq!(
        v.messages[0].created_at,
        Some(1010),
        "the server's clock wins"
    );
    assert!(v.busy);
}

#[test]
fn the_author_is_the_servers_and_survives_the_cache() {
    let mut c = Conversation::new(S);
    c.send_local("c1", "mine", &[], 5, None);
    assert_eq!(
        c.view().messages[0].author,
        None,
        "not known before the server has it"
    );
    let mut m = user_msg(10, 1, Some("c1"), "mine");
    m.author = Some("alice".into());
    c.apply_event(&ev(10, "t1", EventBody::MessageReceived { message: m }));
    let mut theirs = user_msg(12, 2, None, "theirs");
    theirs.author = Some("bob".into());
    c.apply_history(&history("e1-13", vec![theirs]));
    // A later account without it (a sibling's relay of the POST answer) keeps it.
    c.apply_post_response(&PostMessageResponse {
        message_id: "m1".into(),
        client_message_id: Some("c1".into()),
        turn_id: "t1".into(),
        event_id: "e1-10".into(),
    });
    let authors = |c: &Conversation| -> Vec<(String, Option<String>)> {
        c.view()
            .messages
            .into_iter()
            .map(|e| (e.key, e.author))
            .collect()
    };
    let want = vec![
        ("c1".to_owned(), Some("alice".to_owned())),
        ("turn:t1".to_owned(), None),
        ("m2".to_owned(), Some("bob".to_owned())),
        ("turn:t2".to_owned(), None),
    ];
    assert_eq!(authors(&c), want);

    // Through the cache's JSON, as a reload reads it.
    let json = crate::codec::cache_record_json(&c.to_cache());
    let value: serde_json::Value = serde_json::from_str(&json).expect("the cache is JSON");
    let rec = crate::codec::cache_record(&value).expect("the cache reads back");
    let mut reloaded = Conversation::new(S);
    reloaded.apply_cache(&rec);
    assert_eq!(authors(&reloaded), want);
}

#[test]
fn post_answer_first_places_the_bubble_and_its_reply() {
    let mut c = Conversation::new(S);
    c.apply_history(&history("e1-3", vec![user_msg(2, 0, None, "old")]));
    c.send_local("c1", "new", &[], 5, None);
    c.apply_post_response(&PostMessageResponse {
        message_id: "m1".into(),
        client_message_id: Some("c1".into()),
        turn_id: "t1".into(),
        event_id: "e1-10".into(),
    });
    assert_eq!(
        statuses(&c),
        vec![
            ("m0".into(), EntryStatus::Sent),
            ("turn:t0".into(), EntryStatus::Queued),
            ("c1".into(), EntryStatus::Sent),
            ("turn:t1".into(), EntryStatus::Queued),
        ]
    );
}

#[test]
fn a_message_from_another_tab_is_shown_not_filtered() {
    let mut c = Conversation::new(S);
    c.send_local("mine", "a", &[], 5, None);
    c.apply_event(&received(10, 1, Some("theirs"), "from the phone"));
    let v = c.view();
    assert_eq!(v.messages.len(), 3);
    assert_eq!(v.messages[0].key, "theirs");
    assert_eq!(v.messages[0].content, "from the phone");
    assert_eq!(v.messages[2].key, "mine", "unsent messages stay last");
}

#[test]
fn a_sibling_relay_after_the_server_copy_is_a_no_op() {
    let mut c = Conversation::new(S);
    c.apply_event(&received(10, 1, Some("x1"), "hi"));
    let before = c.view();
    // (Files the server's copy does not have change nothing either: the server's copy wins.)
    let relay = TabMessage::Optimistic {
        session_id: S.into(),
        client_message_id: "x1".into(),
        content: "hi".into(),
        attachments: crate::reducer::sim::attachments_of(1),
        created_at: 1,
        on_busy: None,
        edit: None,
    };
    assert!(!relay.apply(&mut c));
    assert_eq!(c.view(), before);
    let other_session = TabMessage::Optimistic {
        session_id: "elsewhere".into(),
        client_message_id: "y".into(),
        content: "no".into(),
        attachments: Vec::new(),
        created_at: 1,
        on_busy: None,
        edit: None,
    };
    assert!(!other_session.apply(&mut c));
}

#[test]
fn attachments_show_from_every_source() {
    use crate::reducer::sim::attachments_of;
    use crate::reducer::AttachmentView;
    let files = attachments_of(2);
    let shown: Vec<AttachmentView> = files.iter().map(AttachmentView::from).collect();
    assert_eq!(shown[1].media_type, "text/plain");
    assert_eq!(shown[1].name.as_deref(), Some("notes \"2\".txt"));
    let with_files = |cmid: Option<&str>, seq: i64| {
        let mut m = user_msg(seq, 1, cmid, "look");
        m.attachments = files.clone();
        m
    };

    // Our own send: shown at once, kept through the POST answer and the server's copy.
    let mut mine = Conversation::new(S);
    mine.send_local("c1", "look", &files, 5, None);
    assert_eq!(mine.view().messages[0].attachments, shown);
    assert_eq!(mine.outbox()[0].attachments, files);
    mine.apply_post_response(&PostMessageResponse {
        message_id: "m1".into(),
        client_message_id: Some("c1".into()),
        turn_id: "t1".into(),
        event_id: "e1-3".into(),
    });
    assert_eq!(mine.view().messages[0].attachments, shown);
    mine.apply_event(&ev(
        3,
        "t1",
        EventBody::MessageReceived {
            message: with_files(Some("c1"), 3),
        },
    ));
    assert_eq!(mine.view().messages[0].attachments, shown);

    // A sibling's relay, then the cache it writes, read by a new page.
    let mut sibling = Conversation::new(S);
    let relay = TabMessage::Optimistic {
        session_id: S.into(),
        client_message_id: "c1".into(),
        content: "look".into(),
        attachments: files.clone(),
        created_at: 5,
        on_busy: None,
        edit: None,
    };
    assert!(relay.apply(&mut sibling));
    assert_eq!(sibling.view().messages[0].attachments, shown);
    let mut reloaded = Conversation::new(S);
    reloaded.apply_cache(&mine.to_cache());
    assert_eq!(reloaded.view().messages[0].attachments, shown);

    // History on a new device; a message without files shows none, and replies none.
    let mut fresh = Conversation::new(S);
    fresh.apply_history(&HistoryResponse {
        session_id: S.into(),
        messages: vec![
            with_files(None, 3),
            reply(5, 1, MessageStatus::Complete, "a cat"),
            user_msg(7, 2, None, "plain"),
        ],
        cursor: "e1-8".into(),
        has_more: false,
        leaf_id: None,
    });
    let v = fresh.view();
    assert_eq!(v.messages[0].attachments, shown);
    assert!(v.messages[1].attachments.is_empty() && v.messages[2].attachments.is_empty());
}

#[test]
fn rejection_is_final_unless_the_server_has_the_message() {
    let mut c = Conversation::new(S);
    c.send_local("c1", "x", &[], 5, None);
    let err = ErrorDetail {
        code: "content_too_large".into(),
        message: "too big".into(),
    };
    assert!(c.reject("c1", &err));
    let v = c.view();
    assert_eq!(v.messages[0].status, EntryStatus::Rejected);
    assert_eq!(
        v.messages[0].error.as_ref().map(|e| e.code.as_str()),
        Some("content_too_large")
    );
    assert!(c.outbox().is_empty());
    // A sibling that did get it through: the journal is the truth.
    c.apply_event(&received(10, 1, Some("c1"), "x"));
    assert_eq!(c.view().messages[0].status, EntryStatus::Sent);
    assert_eq!(c.view().messages[0].error, None);
    assert!(!c.reject("c1", &err), "a sent message cannot be rejected");
}

#[test]
fn outbox_is_in_send_order() {
    let mut c = Conversation::new(S);
    c.send_local("b", "second", &[], 7, None);
    c.send_local("a", "first", &[], 5, None);
    c.send_local("c", "third", &[], 7, None);
    let ids: Vec<String> = c
        .outbox()
        .into_iter()
        .map(|o| o.client_message_id)
        .collect();
    assert_eq!(ids, vec!["a", "b", "c"]);
    assert!(c.is_sending("a"));
}

#[test]
fn stream_folds_a_turn_and_ignores_duplicates() {
    let mut c = Conversation::new(S);
    c.apply_event(&received(1, 1, None, "q"));
    c.apply_event(&ev(3, "t1", EventBody::TurnStarted {}));
    c.apply_event(&delta(4, 1, "Hel"));
    c.apply_event(&delta(4, 1, "Hel"));
    c.apply_event(&delta(5, 1, "lo"));
    let v = c.view();
    assert_eq!(v.messages[1].status, EntryStatus::Streaming);
    assert_eq!(v.messages[1].content, "Hello");
    c.apply_event(&ended(6, 1, TurnState::Completed, "Hello"));
    c.apply_event(&delta(5, 1, "lo"));
    let v = c.view();
    assert_eq!(v.messages[1].status, EntryStatus::Complete);
    assert_eq!(v.messages[1].content, "Hello");
    assert_eq!(v.messages[1].message_id.as_deref(), Some("a1"));
    assert!(!v.busy);
}

#[test]
fn a_snapshot_newer_than_what_we_folded_replaces_it() {
    let mut c = Conversation::new(S);
    c.apply_event(&received(1, 1, None, "q"));
    c.apply_event(&delta(4, 1, "He"));
    let mut turn = ActiveTurn::new("t1", S);
    turn.state = TurnState::Running;
    turn.text = "Hello".into();
    let snap = |cursor: &str| Snapshot {
        cursor: cursor.into(),
        active_turns: vec![turn.clone()],
    };
    c.apply_snapshot(&snap("e1-3"));
    assert_eq!(
        c.view().messages[1].content,
        "He",
        "an older snapshot is ignored"
    );
    c.apply_snapshot(&snap("e1-9"));
    assert_eq!(c.view().messages[1].content, "Hello");
    c.apply_event(&delta(8, 1, "dup"));
    c.apply_event(&delta(10, 1, "!"));
    assert_eq!(c.view().messages[1].content, "Hello!");
}

#[test]
fn a_truncated_final_reply_is_completed_by_history() {
    let mut c = Conversation::new(S);
    c.apply_event(&received(1, 1, None, "q"));
    let mut end = ended(5, 1, TurnState::Completed, "long…");
    end.truncated = vec![Truncation {
        field: "message.content".into(),
        original_size: 999,
    }];
    c.apply_event(&end);
    assert_eq!(c.view().messages[1].content, "long…");
    c.apply_history(&history(
        "e1-5",
        vec![
            user_msg(1, 1, None, "q"),
            reply(5, 1, MessageStatus::Complete, "long and whole"),
        ],
    ));
    assert_eq!(c.view().messages[1].content, "long and whole");

    // With the deltas folded, the accumulated text is the whole reply already.
    let mut c = Conversation::new(S);
    c.apply_event(&received(1, 1, None, "q"));
    c.apply_event(&delta(2, 1, "long and "));
    c.apply_event(&delta(3, 1, "whole"));
    let mut end = ended(5, 1, TurnState::Completed, "long…");
    end.truncated = vec![Truncation {
        field: "message.content".into(),
        original_size: 999,
    }];
    c.apply_event(&end);
    assert_eq!(c.view().messages[1].content, "long and whole");
}

#[test]
fn a_failed_turn_keeps_its_reason() {
    let mut c = Conversation::new(S);
    c.apply_event(&received(1, 1, None, "q"));
    c.apply_event(&delta(2, 1, "par"));
    c.apply_event(&ev(
        3,
        "t1",
        EventBody::TurnEnded {
            state: TurnState::Failed,
            message: None,
            error: Some("model down".into()),
        },
    ));
    let e = &c.view().messages[1];
    assert_eq!(e.status, EntryStatus::Failed);
    assert_eq!(e.content, "par", "without the message, the text so far");
    assert_eq!(
        e.error.as_ref().map(|x| x.message.as_str()),
        Some("model down")
    );
    // History's copy (no reason on the wire) upgrades the reply but keeps the reason.
    c.apply_history(&history(
        "e1-3",
        vec![
            user_msg(1, 1, None, "q"),
            reply(3, 1, MessageStatus::Failed, "par"),
        ],
    ));
    let e = &c.view().messages[1];
    assert_eq!(e.message_id.as_deref(), Some("a1"));
    assert!(e.error.is_some());
}

fn cached_mid_turn() -> CacheRecord {
    let mut prev = Conversation::new(S);
    prev.apply_event(&received(1, 1, Some("c1"), "q"));
    prev.apply_event(&ev(2, "t1", EventBody::TurnStarted {}));
    prev.apply_event(&delta(3, 1, "partial"));
    prev.to_cache()
}

#[test]
fn recovery_completes_a_cached_turn_from_its_status() {
    let mut c = Conversation::new(S);
    c.apply_cache(&cached_mid_turn());
    assert_eq!(c.view().messages[1].status, EntryStatus::Streaming);
    assert_eq!(c.take_turns_to_check(), vec!["t1".to_owned()]);
    assert!(c.take_turns_to_check().is_empty(), "handed out once");

    let done = info(
        1,
        TurnState::Completed,
        "partial and done",
        Some(reply(9, 1, MessageStatus::Complete, "partial and done")),
    );
    assert!(c.apply_turn_info("t1", Some(&done)));
    let e = &c.view().messages[1];
    assert_eq!(e.status, EntryStatus::Complete);
    assert_eq!(e.content, "partial and done");
    assert_eq!(e.thinking, "pondered", "the status carries the whole turn");
    assert!(e.recovered);
    assert!(!c.view().gap);
    assert!(!c.view().busy);
}

/// After a reload, history (asked first) and the status check race: whichever answers first,
/// the cached bubble ends the same way, `recovered` included.
#[test]
fn recovery_does_not_depend_on_which_answer_comes_first() {
    let page = history(
        "e1-9",
        vec![
            user_msg(1, 1, Some("c1"), "q"),
            reply(9, 1, MessageStatus::Complete, "partial and done"),
        ],
    );
    let status = info(
        1,
        TurnState::Completed,
        "partial and done",
        Some(reply(9, 1, MessageStatus::Complete, "partial and done")),
    );

    let mut history_first = Conversation::new(S);
    history_first.apply_cache(&cached_mid_turn());
    assert_eq!(history_first.take_turns_to_check(), vec!["t1".to_owned()]);
    assert!(history_first.apply_history(&page));
    let e = &history_first.view().messages[1];
    assert_eq!(e.status, EntryStatus::Complete);
    assert_eq!(e.content, "partial and done");
    assert!(
        e.recovered,
        "settled by history after a reload, not by the stream"
    );
    history_first.apply_turn_info("t1", Some(&status));

    let mut status_first = Conversation::new(S);
    status_first.apply_cache(&cached_mid_turn());
    status_first.take_turns_to_check();
    assert!(status_first.apply_turn_info("t1", Some(&status)));
    status_first.apply_history(&page);

    assert_eq!(history_first.view(), status_first.view());
    assert!(!history_first.view().gap);
    assert!(!history_first.view().busy);

    // Even when the status check never got out (offline), history still settles it the same way.
    let mut unchecked = Conversation::new(S);
    unchecked.apply_cache(&cached_mid_turn());
    unchecked.apply_history(&page);
    assert!(unchecked.view().messages[1].recovered);
    assert!(
        unchecked.take_turns_to_check().is_empty(),
        "nothing left to ask"
    );
}

/// `recovered` says the end was not heard live: a turn the stream ends is never recovered, even
/// one that was cached mid-turn before the reload.
#[test]
fn a_turn_ended_by_the_stream_is_not_recovered() {
    let mut live = Conversation::new(S);
    live.apply_history(&history("e1-0", vec![]));
    live.apply_event(&received(1, 1, Some("c1"), "q"));
    live.apply_event(&ended(2, 1, TurnState::Completed, "done"));
    // A later history reload carrying the same reply changes nothing.
    live.apply_history(&history(
        "e1-2",
        vec![
            user_msg(1, 1, Some("c1"), "q"),
            reply(2, 1, MessageStatus::Complete, "done"),
        ],
    ));
    assert!(!live.view().messages[1].recovered);

    let mut reloaded = Conversation::new(S);
    reloaded.apply_cache(&cached_mid_turn());
    reloaded.take_turns_to_check();
    reloaded.apply_turn_info(
        "t1",
        Some(&info(1, TurnState::Running, "partial more", None)),
    );
    reloaded.apply_event(&ended(9, 1, TurnState::Completed, "partial more"));
    reloaded.apply_history(&history(
        "e1-9",
        vec![
            user_msg(1, 1, Some("c1"), "q"),
            reply(9, 1, MessageStatus::Complete, "partial more"),
        ],
    ));
    let e = &reloaded.view().messages[1];
    assert_eq!(e.status, EntryStatus::Complete);
    assert!(!e.recovered);
}

/// A cached turn the reloaded page's snapshot still shows running is followed live from there:
/// an end it later learns from a resync's history is not `recovered` (the gap says what was lost).
#[test]
fn a_cached_turn_the_snapshot_shows_running_is_followed_live() {
    let mut c = Conversation::new(S);
    c.apply_cache(&cached_mid_turn());
    c.take_turns_to_check();
    c.apply_history(&history("e1-5", vec![user_msg(1, 1, Some("c1"), "q")]));
    let mut turn = ActiveTurn::new("t1", S);
    turn.state = TurnState::Running;
    turn.text = "partial more".into();
    c.apply_snapshot(&Snapshot {
        cursor: "e1-5".into(),
        active_turns: vec![turn],
    });
    c.mark_gap();
    c.apply_history(&history(
        "e1-9",
        vec![
            user_msg(1, 1, Some("c1"), "q"),
            reply(9, 1, MessageStatus::Complete, "partial more"),
        ],
    ));
    let v = c.view();
    assert_eq!(v.messages[1].status, EntryStatus::Complete);
    assert!(!v.messages[1].recovered);
    assert!(v.gap);
}

#[test]
fn recovery_of_a_lost_turn_ends_it_interrupted_and_says_so() {
    let mut c = Conversation::new(S);
    c.apply_cache(&cached_mid_turn());
    c.take_turns_to_check();
    assert!(c.apply_turn_info("t1", None));
    let v = c.view();
    assert_eq!(v.messages[1].status, EntryStatus::Interrupted);
    assert_eq!(v.messages[1].content, "partial");
    assert!(v.messages[1].recovered);
    assert!(v.gap);
    assert!(!v.busy, "no bubble spins forever");
    // If the server turns out to have the reply after all, its copy wins.
    c.apply_history(&history(
        "e1-9",
        vec![
            user_msg(1, 1, Some("c1"), "q"),
            reply(9, 1, MessageStatus::Complete, "real"),
        ],
    ));
    assert_eq!(c.view().messages[1].status, EntryStatus::Complete);
}

#[test]
fn a_running_status_leaves_the_turn_to_the_stream() {
    let mut c = Conversation::new(S);
    c.apply_cache(&cached_mid_turn());
    c.take_turns_to_check();
    assert!(!c.apply_turn_info(
        "t1",
        Some(&info(1, TurnState::Running, "partial more", None))
    ));
    assert_eq!(c.view().messages[1].content, "partial");
    assert!(!c.view().messages[1].recovered);
    c.apply_event(&delta(4, 1, " more"));
    assert_eq!(c.view().messages[1].content, "partial more");
}

#[test]
fn a_failed_check_is_handed_out_again() {
    let mut c = Conversation::new(S);
    c.apply_cache(&cached_mid_turn());
    assert_eq!(c.take_turns_to_check().len(), 1);
    c.check_failed("t1");
    assert_eq!(c.take_turns_to_check(), vec!["t1".to_owned()]);
}

#[test]
fn a_turn_missing_from_a_later_snapshot_is_checked() {
    let mut c = Conversation::new(S);
    c.apply_history(&history("e1-2", vec![user_msg(1, 1, None, "q")]));
    // The history page said t1 was open; a snapshot at a later cursor does not list it.
    c.apply_snapshot(&Snapshot {
        cursor: "e1-20".into(),
        active_turns: vec![],
    });
    assert_eq!(c.take_turns_to_check(), vec!["t1".to_owned()]);
    c.apply_turn_info("t1", Some(&info(1, TurnState::Completed, "", None)));
    // A turn introduced after the snapshot's cursor is not suspicious.
    c.apply_post_response(&PostMessageResponse {
        message_id: "m2".into(),
        client_message_id: None,
        turn_id: "t2".into(),
        event_id: "e1-30".into(),
    });
    c.apply_snapshot(&Snapshot {
        cursor: "e1-25".into(),
        active_turns: vec![],
    });
    assert!(c.take_turns_to_check().is_empty());
}

#[test]
fn a_new_journal_drops_the_old_one_but_keeps_the_outbox() {
    let mut c = Conversation::new(S);
    c.apply_event(&received(1, 1, Some("c1"), "old"));
    c.send_local("c2", "unsent", &[], 9, None);
    c.apply_history(&history(
        "e2-0",
        vec![], // the server's database was recreated
    ));
    let v = c.view();
    assert_eq!(statuses(&c), vec![("c2".into(), EntryStatus::Sending)]);
    assert!(v.gap);
    // Events of the dead journal are ignored from now on.
    assert!(!c.apply_event(&received(2, 3, Some("zz"), "ghost")));
}

#[test]
fn a_cache_of_a_dead_journal_brings_only_unsent_messages() {
    let mut c = Conversation::new(S);
    c.apply_history(&history("e2-5", vec![]));
    let mut rec = cached_mid_turn();
    let mut outbox = Conversation::new(S);
    outbox.send_local("c9", "queued offline", &[], 5, None);
    rec.users.extend(outbox.to_cache().users);
    assert!(c.apply_cache(&rec));
    assert_eq!(statuses(&c), vec![("c9".into(), EntryStatus::Sending)]);
    let mut foreign = cached_mid_turn();
    foreign.session_id = "other".into();
    assert!(!Conversation::new(S).apply_cache(&foreign));
}

#[test]
fn other_sessions_are_ignored() {
    let mut c = Conversation::new(S);
    let mut e = received(1, 1, None, "q");
    e.session_id = "other".into();
    assert!(!c.apply_event(&e));
    let mut h = history("e1-1", vec![]);
    h.session_id = "other".into();
    assert!(!c.apply_history(&h));
    assert!(c.view().messages.is_empty());
}

#[test]
fn connection_and_gap_are_part_of_the_view() {
    let mut c = Conversation::new(S);
    assert_eq!(c.view().connection, Connection::Connecting);
    let r = c.revision();
    assert!(c.set_connection(Connection::Live));
    assert!(!c.set_connection(Connection::Live));
    assert!(c.mark_gap());
    assert!(!c.mark_gap());
    assert_eq!(c.revision(), r + 2);
    let v = c.view();
    assert_eq!(v.connection, Connection::Live);
    assert!(v.gap);
    assert_eq!(v.session_id, S);
}

#[test]
fn view_json_is_camel_case_with_closed_unions() {
    let mut c = Conversation::new(S);
    c.send_local("c1", "hi", &[], 5, None);
    let json = serde_json::to_value(c.view()).unwrap_or_default();
    assert_eq!(json["sessionId"], "s1");
    assert_eq!(json["connection"], "connecting");
    assert_eq!(json["messages"][0]["clientMessageId"], "c1");
    assert_eq!(json["messages"][0]["status"], "sending");
    assert_eq!(json["messages"][0]["role"], "user");
    assert_eq!(json["messages"][0]["messageId"], serde_json::Value::Null);
    assert!(matches!(c.view().messages[0].role, Role::User));
    // The browser renders these names by hand: they are serde's.
    for status in [
        EntryStatus::Sending,
        EntryStatus::Sent,
        EntryStatus::Rejected,
        EntryStatus::Queued,
        EntryStatus::Streaming,
        EntryStatus::Complete,
        EntryStatus::Cancelled,
        EntryStatus::Failed,
        EntryStatus::Interrupted,
    ] {
        assert_eq!(
            serde_json::to_value(status).ok(),
            Some(status.as_str().into())
        );
    }
    for role in [Role::User, Role::Assistant] {
        assert_eq!(serde_json::to_value(role).ok(), Some(role.as_str().into()));
    }
    for connection in [
        Connection::Connecting,
        Connection::Live,
        Connection::Reconnecting,
        Connection::Resyncing,
        Connection::Offline,
        Connection::Unauthorized,
        Connection::Closed,
    ] {
        assert_eq!(
            serde_json::to_value(connection).ok(),
            Some(connection.as_str().into())
        );
    }
}

#[test]
fn a_bounded_cache_keeps_the_newest_and_everything_unfinished() {
    let mut c = Conversation::new(S);
    for n in 0..5u32 {
        let seq = i64::from(n) * 10;
        c.apply_event(&received(seq + 1, n, None, "q"));
        if n != 1 {
            c.apply_event(&ended(seq + 5, n, TurnState::Completed, "a"));
        }
    }
    c.send_local("c9", "unsent", &[], 99, None);
    let rec = c.to_cache_bounded(2);
    let users: Vec<&str> = rec.users.iter().map(|u| u.key.as_str()).collect();
    let turns: Vec<&str> = rec.turns.iter().map(|t| t.turn_id.as_str()).collect();
    assert_eq!(users, vec!["c9", "m3", "m4"]);
    assert_eq!(turns, vec!["t1", "t3", "t4"], "t1 is still open: kept");
    assert_eq!(c.to_cache_bounded(100), c.to_cache());
}

/// `history_loaded` says whether the server's history was read: a cache, a sibling's relay or the
/// stream alone leave it false (a new device's first view is not the server's conversation).
#[test]
fn history_loaded_only_after_a_page_of_history() {
    let mut c = Conversation::new(S);
    assert!(!c.history_loaded());
    c.apply_cache(&cached_mid_turn());
    c.apply_event(&delta(4, 1, " more"));
    assert!(!c.history_loaded(), "cache and stream are not history");
    let mut other = history("e1-1", vec![]);
    other.session_id = "other".into();
    assert!(!c.apply_history(&other));
    assert!(
        !c.history_loaded(),
        "another session's history does not count"
    );
    let rev = c.revision();
    assert!(
        c.apply_history(&history("e1-4", vec![user_msg(1, 1, Some("c1"), "q")])),
        "a change, even though the page adds nothing new"
    );
    assert!(c.history_loaded());
    assert_ne!(c.revision(), rev, "so the state is rendered again");
    assert!(!c.apply_history(&history("e1-4", vec![user_msg(1, 1, Some("c1"), "q")])));
    assert!(c.history_loaded(), "and it stays");
}

/// Two tabs' caches of one turn at the same journal position: the tab that missed some of the
/// turn's events (its relay lost them) holds less. Their join, as a save writes it (this tab's
/// view joined with what is stored), keeps the whole turn in either order, so a reload shows
/// what the other tab showed.
#[test]
fn a_cache_join_keeps_the_account_that_missed_nothing() {
    let tool = |status| ToolCall {
        call_id: "c1".into(),
        name: "lookup".into(),
        status,
        input_preview: Some("{}".into()),
        output_preview: (status == ToolStatus::Finished).then(|| "found".into()),
    };
    let events = [
        received(1, 1, Some("c1"), "q"),
        ev(2, "t1", EventBody::TurnStarted {}),
        ev(
            3,
            "t1",
            EventBody::Thinking {
                delta: "pondered".into(),
            },
        ),
        ev(4, "t1", EventBody::Tool(tool(ToolStatus::Started))),
        ev(5, "t1", EventBody::Tool(tool(ToolStatus::Finished))),
        delta(6, 1, "the "),
        delta(7, 1, "answer"),
        ended(8, 1, TurnState::Completed, "the answer"),
    ];
    let mut whole = Conversation::new(S);
    let mut gappy = Conversation::new(S);
    for (i, e) in events.iter().enumerate() {
        whole.apply_event(e);
        // Heard the message and the end, and none of the turn's events in between.
        if i == 0 || i == events.len() - 1 {
            gappy.apply_event(e);
        }
    }
    let shown = |c: &Conversation| {
        let e = c.view().messages[1].clone();
        (e.content, e.thinking, e.tools.len())
    };
    assert_eq!(shown(&whole), ("the answer".into(), "pondered".into(), 1));
    assert_eq!(shown(&gappy), ("the answer".into(), String::new(), 0));
    for (mine, stored) in [(&gappy, &whole), (&whole, &gappy)] {
        let mut merged = mine.clone();
        merged.apply_cache(&stored.to_cache());
        let mut reloaded = Conversation::new(S);
        reloaded.apply_cache(&merged.to_cache());
        assert_eq!(
            shown(&reloaded),
            shown(&whole),
            "the join lost what a tab showed"
        );
    }
}

/// `t1` started and asked `r0` (an approval) and `r2` (a question).
fn asking() -> Conversation {
    use crate::reducer::sim;
    let mut c = Conversation::new(S);
    c.apply_event(&received(1, 1, Some("c1"), "deploy"));
    c.apply_event(&ev(2, "t1", EventBody::TurnStarted {}));
    c.apply_event(&ev(3, "t1", EventBody::InputRequested(sim::request(1, 0))));
    c.apply_event(&ev(4, "t1", EventBody::InputRequested(sim::request(1, 2))));
    c
}

#[test]
fn an_answer_given_here_shows_at_once_and_waits_in_the_outbox() {
    use crate::reducer::sim;
    use turnstream_protocol::{InputGiven, RequestKind};
    let mut c = asking();
    let reply = |c: &Conversation| c.view().messages[1].clone();
    assert_eq!(reply(&c).status, EntryStatus::Waiting);
    assert_eq!(reply(&c).requests.len(), 2);
    assert_eq!(
        c.find_request("r0"),
        Some(("t1".to_owned(), RequestKind::Approval))
    );
    let yes = sim::answer(1, 0, true);
    assert!(c.answer_local("t1", "r0", &yes, false));
    assert_eq!(reply(&c).requests[0].answer.as_ref(), Some(&yes));
    assert_eq!(reply(&c).status, EntryStatus::Waiting, "r2 is still open");
    assert_eq!(c.next_answer().map(|a| a.request_id), Some("r0".into()));
    assert_eq!(c.local_answer_sent("t1", "r0"), Some(false));
    assert!(c.answer_posted("t1", "r0"));
    assert_eq!(c.next_answer(), None, "taken: not posted again");
    assert_eq!(c.local_answer_sent("t1", "r0"), Some(true));

    // Another device answered r2 first: its answer shows, ours is refused.
    let mine = sim::answer(1, 2, false);
    c.answer_local("t1", "r2", &mine, false);
    assert_eq!(reply(&c).status, EntryStatus::Streaming);
    let theirs = InputGiven {
        request_id: "r2".into(),
        by: Some("bob".into()),
        answer: sim::answer(1, 2, true),
    };
    assert!(c.apply_given("t1", &theirs));
    assert_eq!(reply(&c).requests[1].answer.as_ref(), Some(&theirs.answer));
    assert_eq!(reply(&c).requests[1].answered_by.as_deref(), Some("bob"));
    assert!(c.drop_answer("t1", "r2"));
    assert_eq!(c.local_answer_sent("t1", "r2"), None);
    // The journal says the same later: nothing shown changes.
    let before = c.view();
    c.apply_event(&ev(6, "t1", EventBody::InputGiven(theirs)));
    assert_eq!(c.view(), before);
}

#[test]
fn a_tab_granted_the_outbox_takes_what_the_last_holder_stored_as_posted() {
    use crate::reducer::sim;
    // Two tabs hold the same answer and the same message, both unsent.
    let mut holder = asking();
    holder.answer_local("t1", "r0", &sim::answer(1, 0, true), false);
    holder.send_local("c2", "next", &[], 9, None);
    let mut next = holder.clone();
    // The holder posts both and stores its view; a message only it has is stored too.
    assert!(holder.answer_posted("t1", "r0"));
    holder.apply_post_response(&PostMessageResponse {
        message_id: "m2".into(),
        client_message_id: Some("c2".into()),
        turn_id: "t2".into(),
        event_id: "e1-10".into(),
    });
    holder.send_local("c3", "only the holder's", &[], 11, None);
    holder.answer_local("t1", "r2", &sim::answer(1, 2, true), false);
    let stored = holder.to_cache();

    assert_eq!(next.next_answer().map(|a| a.request_id), Some("r0".into()));
    assert!(next.join_posted(&stored));
    assert_eq!(
        next.next_answer(),
        None,
        "the answer the holder posted is not posted again"
    );
    assert_eq!(next.next_to_post(|_| true), None, "nor its message");
    assert_eq!(next.local_answer_sent("t1", "r0"), Some(true));
    // Nothing else is taken from the record: what the holder has alone comes by its channel.
    assert!(!next.is_sending("c3"));
    assert_eq!(next.local_answer_sent("t1", "r2"), None);
    assert!(!next.join_posted(&stored), "a second read changes nothing");
    // A record of another journal says nothing of this one's.
    let mut other = asking();
    other.answer_local("t1", "r0", &sim::answer(1, 0, true), false);
    let mut foreign = stored.clone();
    foreign.epoch = Some("e9".into());
    assert!(!other.join_posted(&foreign));
    assert_eq!(other.next_answer().map(|a| a.request_id), Some("r0".into()));
}

#[test]
fn requests_come_from_snapshots_turn_statuses_and_the_cache() {
    use crate::reducer::sim;
    let live = asking();
    // A tab that opens the stream later reads them from the snapshot.
    let mut at = ActiveTurn::new("t1", S);
    at.apply(&EventBody::TurnStarted {});
    at.apply(&EventBody::InputRequested(sim::request(1, 0)));
    at.apply(&EventBody::InputRequested(sim::request(1, 2)));
    assert_eq!(at.state, TurnState::Waiting);
    let mut c = Conversation::new(S);
    c.apply_history(&HistoryResponse {
        session_id: S.into(),
        messages: vec![user_msg(1, 1, Some("c1"), "deploy")],
        cursor: "e1-4".into(),
        has_more: false,
        leaf_id: None,
    });
    c.apply_snapshot(&Snapshot {
        cursor: "e1-4".into(),
        active_turns: vec![at],
    });
    assert_eq!(c.view().messages, live.view().messages);
    // A reload reads them from the cache, answers given here included.
    let mut answered = live.clone();
    answered.answer_local("t1", "r0", &sim::answer(1, 0, true), false);
    let mut reloaded = Conversation::new(S);
    reloaded.apply_cache(&answered.to_cache());
    assert_eq!(reloaded.view().messages, answered.view().messages);
    assert_eq!(reloaded.next_answer(), answered.next_answer());
    // A turn that ended while no page listened keeps its requests from its status.
    let mut info = TurnInfo {
        agent: None,
        called_by: None,
        turn_id: "t1".into(),
        session_id: S.into(),
        state: TurnState::Completed,
        created_at: 1,
        started_at: Some(2),
        ended_at: Some(9),
        text: "done".into(),
        thinking: String::new(),
        tools: vec![],
        message: Some(reply(9, 1, MessageStatus::Complete, "done")),
        error: None,
        usage: None,
        requests: vec![],
        reply_id: None,
        parent_id: None,
    };
    let mut r = turnstream_protocol::TurnRequest::open(&sim::request(1, 0));
    r.answer = Some(sim::answer(1, 0, true));
    info.requests = vec![r];
    reloaded.apply_turn_info("t1", Some(&info));
    let v = reloaded.view();
    assert_eq!(v.messages[1].status, EntryStatus::Complete);
    assert_eq!(v.messages[1].requests.len(), 1);
    assert_eq!(
        reloaded.next_answer(),
        None,
        "an ended turn takes no answer"
    );
}

/// How long a view of a long session takes (not a gate: prints the figure).
#[test]
#[ignore]
fn view_cost_of_a_long_session() {
    use turnstream_protocol::{Event, EventBody, Message, MessageStatus, Role as R, TurnState};
    let mut c = Conversation::new("s1");
    let ev = |seq: i64, turn: Option<String>, body| Event {
        id: format!("ep-{seq}"),
        session_id: "s1".into(),
        ts: seq,
        turn_id: turn,
        body,
        truncated: vec![],
    };
    let mut seq = 0;
    let mut leaf: Option<String> = None;
    for k in 0..1000 {
        seq += 1;
        let t = format!("t{k}");
        c.apply_event(&ev(
            seq,
            Some(t.clone()),
            EventBody::MessageReceived {
                message: Message {
                    called_by: None,
                    message_id: format!("m{k}"),
                    client_message_id: None,
                    role: R::User,
                    content: "hi".into(),
                    status: MessageStatus::Complete,
                    turn_id: Some(t.clone()),
                    created_at: seq,
                    event_id: format!("ep-{seq}"),
                    author: None,
                    attachments: vec![],
                    parent_id: leaf.clone(),
                    siblings: None,
                    requests: vec![],
                },
            },
        ));
        seq += 1;
        c.apply_event(&ev(
            seq,
            Some(t.clone()),
            EventBody::TurnQueued {
                agent: None,
                reply_id: Some(format!("a{k}")),
                parent_id: Some(format!("m{k}")),
            },
        ));
        seq += 1;
        c.apply_event(&ev(
            seq,
            Some(t.clone()),
            EventBody::TurnEnded {
                state: TurnState::Completed,
                message: Some(Message {
                    called_by: None,
                    message_id: format!("a{k}"),
                    client_message_id: None,
                    role: R::Assistant,
                    content: "reply".into(),
                    status: MessageStatus::Complete,
                    turn_id: Some(t.clone()),
                    created_at: seq,
                    event_id: format!("ep-{seq}"),
                    author: None,
                    attachments: vec![],
                    parent_id: Some(format!("m{k}")),
                    siblings: None,
                    requests: vec![],
                }),
                error: None,
            },
        ));
        leaf = Some(format!("a{k}"));
    }
    let t0 = std::time::Instant::now();
    let mut n = 0;
    for _ in 0..50 {
        n += c.view().messages.len();
    }
    eprintln!(
        "VIEW_COST: {} entries, {:.2} ms per view",
        n / 50,
        t0.elapsed().as_secs_f64() * 1000.0 / 50.0
    );
}

/// A message of the tree with its parent (v1.2).
fn placed(mut m: Message, parent: &str) -> Message {
    m.parent_id = Some(parent.into());
    m
}

fn queued(seq: i64, n: u32, parent: &str) -> Event {
    ev(
        seq,
        &format!("t{n}"),
        EventBody::TurnQueued {
            agent: None,
            reply_id: Some(format!("a{n}")),
            parent_id: Some(parent.into()),
        },
    )
}

fn keys(c: &Conversation) -> Vec<String> {
    c.view().messages.into_iter().map(|e| e.key).collect()
}

#[test]
fn an_edit_shows_its_branch_at_once_then_the_journal_moves_the_branch() {
    let mut c = Conversation::new(S);
    let done = |seq, n, parent: &str| {
        let mut r = reply(seq, n, MessageStatus::Complete, "ok");
        r.message_id = format!("a{n}");
        ev(
            seq,
            &format!("t{n}"),
            EventBody::TurnEnded {
                state: TurnState::Completed,
                message: Some(placed(r, parent)),
                error: None,
            },
        )
    };
    c.apply_event(&ev(
        1,
        "t1",
        EventBody::MessageReceived {
            message: user_msg(1, 1, Some("c1"), "one"),
        },
    ));
    c.apply_event(&queued(2, 1, "m1"));
    c.apply_event(&done(3, 1, "m1"));
    let two = placed(user_msg(4, 2, Some("c2"), "two"), "a1");
    c.apply_event(&ev(4, "t2", EventBody::MessageReceived { message: two }));
    c.apply_event(&queued(5, 2, "m2"));
    c.apply_event(&done(6, 2, "m2"));
    assert_eq!(keys(&c), ["c1", "turn:t1", "c2", "turn:t2"]);

    // Edited (offline, say): the branch up to the message it replaces, then the edit.
    assert_eq!(c.edit_local("c2", "e1", "two bis", 10), Some(true));
    assert_eq!(keys(&c), ["c1", "turn:t1", "e1"]);
    assert_eq!(
        c.outbox()[0].parent_id,
        Some(Some("a1".to_owned())),
        "posted as a sibling of c2"
    );
    assert_eq!(
        c.edit_local("turn:t1", "e2", "x", 11),
        None,
        "only a user message is edited"
    );

    // The server took it: its turn moves the leaf; the edit is version 2 of 2.
    let bis = placed(user_msg(7, 3, Some("e1"), "two bis"), "a1");
    c.apply_event(&ev(7, "t3", EventBody::MessageReceived { message: bis }));
    c.apply_event(&queued(8, 3, "m3"));
    assert_eq!(keys(&c), ["c1", "turn:t1", "e1", "turn:t3"]);
    let e1 = c
        .view()
        .messages
        .into_iter()
        .find(|e| e.key == "e1")
        .map(|e| e.branch);
    assert_eq!(e1, Some(super::BranchView { index: 1, count: 2 }));
    assert_eq!(c.sibling_id("e1", 0).as_deref(), Some("m2"));
    assert_eq!(c.regenerate_target("turn:t3").as_deref(), Some("m3"));

    // Another tab switched back: this one follows; a leaf it never read asks for history.
    let switch = |seq: i64, leaf: &str| Event {
        turn_id: None,
        ..ev(
            seq,
            "",
            EventBody::BranchChanged {
                leaf_id: leaf.into(),
            },
        )
    };
    c.apply_event(&switch(9, "a2"));
    assert_eq!(keys(&c), ["c1", "turn:t1", "c2", "turn:t2"]);
    assert!(!c.take_branch_unread());
    c.apply_event(&switch(10, "a-unknown"));
    assert!(
        c.take_branch_unread(),
        "a branch not read: read the history"
    );
    assert!(!c.take_branch_unread(), "asked once");
}

/// A page that joins while a regeneration streams: the snapshot's `reply_id` and `parent_id`
/// show the streaming reply as the new version of its user message at once.
#[test]
fn a_snapshot_shows_a_streaming_regeneration_as_the_new_version() {
    let with_places = |places: &[super::TurnPlace]| {
        let mut c = Conversation::new(S);
        let m1 = placed(user_msg(1, 1, Some("c1"), "q"), "");
        let m1 = Message {
            parent_id: None,
            ..m1
        };
        let a1 = placed(reply(3, 1, MessageStatus::Complete, "first"), "m1");
        let mut h = history("e1-3", vec![m1.clone(), a1]);
        h.leaf_id = Some("a1".into());
        c.apply_history(&h);
        // The page (re)loads while the regeneration streams: the active branch ends in its
        // reply, a2, not written yet (the snapshot never moves the leaf: a switch it skipped
        // would be lost).
        let mut h = history("e1-5", vec![m1]);
        h.leaf_id = Some("a2".into());
        c.apply_history(&h);
        let mut regen = ActiveTurn::new("t2", S);
        regen.state = TurnState::Running;
        regen.text = "second, so far".into();
        let snap = Snapshot {
            cursor: "e1-6".into(),
            active_turns: vec![regen],
        };
        c.apply_snapshot_placed(&snap, places);
        c
    };
    let c = with_places(&[super::TurnPlace {
        turn_id: "t2".into(),
        reply_id: Some("a2".into()),
        parent_id: Some("m1".into()),
    }]);
    let view = c.view().messages;
    assert_eq!(
        view.iter().map(|e| e.key.as_str()).collect::<Vec<_>>(),
        ["c1", "turn:t2"],
        "the new version replaces the earlier reply on the branch"
    );
    assert_eq!(view[1].content, "second, so far");
    assert_eq!(view[1].branch, super::BranchView { index: 1, count: 2 });
    assert_eq!(c.leaf(), Some("a2"));
    assert_eq!(c.sibling_id("turn:t2", 0).as_deref(), Some("a1"));

    // An older server names no places: the turn shows, placed by nothing yet.
    let c = with_places(&[]);
    assert!(c.view().messages.iter().any(|e| e.key == "turn:t2"));
}

/// Branch actions live in the cache until posted; a posted one is not brought back by an older
/// copy of the cache.
#[test]
fn branch_actions_survive_the_cache_and_are_posted_once() {
    let mut c = Conversation::new(S);
    c.queue_branch_action("r1", true, "m1");
    c.queue_branch_action("s1", false, "a1");
    let stored = c.to_cache();
    let json = crate::codec::cache_record_json(&stored);
    let value: serde_json::Value = serde_json::from_str(&json).expect("json");
    let read = crate::codec::cache_record(&value).expect("reads back");
    assert_eq!(read, stored);
    assert_eq!(
        serde_json::from_str::<CacheRecord>(&json).expect("serde reads it"),
        stored
    );

    let mut reloaded = Conversation::new(S);
    reloaded.apply_cache(&read);
    let next = reloaded.next_branch_action().expect("queued");
    assert_eq!(
        (next.id.as_str(), next.regenerate, next.target.as_str()),
        ("r1", true, "m1")
    );
    reloaded.branch_action_done("r1");
    // The write joins the older stored copy: r1 stays posted.
    let mut merged = reloaded.clone();
    merged.apply_cache(&stored);
    assert_eq!(merged.next_branch_action().map(|a| a.id), Some("s1".into()));
    merged.branch_action_done("s1");
    assert_eq!(merged.next_branch_action(), None);
    assert!(merged.to_cache().branch_actions.iter().all(|a| a.done));

    // Only the newest posted ones are kept.
    for i in 0..40 {
        let id = format!("x{i}");
        merged.queue_branch_action(&id, false, "a1");
        merged.branch_action_done(&id);
    }
    let kept = merged.to_cache().branch_actions;
    assert_eq!(kept.len(), 16);
    assert_eq!(kept.last().map(|a| a.id.as_str()), Some("x39"));
}
