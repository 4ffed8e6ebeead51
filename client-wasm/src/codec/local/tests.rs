//! The SDK's own formats against serde's derives: the cache of a client fed simulated sessions,
//! every tab message and relay message, written and read back.

use proptest::prelude::*;
use serde_json::json;
use turnstream_protocol::{ErrorDetail, OnBusy, PostMessageResponse, TurnInfo, TurnState};

use super::*;
use crate::codec::tests::{fails_as_serde_fails, same};
use crate::codec::wire::tests::{asked, info};
use crate::reducer::props::{feeds_of, turn};
use crate::reducer::sim;
use crate::reducer::Conversation;

#[test]
fn tab_messages_are_what_serde_writes() {
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
fn bad_shapes_read_as_nothing() {
    assert!(cache_record(&json!({"version": 1})).is_none());
    assert!(tab_message(&json!({"type": "gossip", "session_id": "s"})).is_none());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// The cache of a client fed simulated sessions in any order.
    #[test]
    fn simulated_caches_round_trip(
        turns in prop::collection::vec(turn(), 1..6),
        choices in prop::collection::vec(any::<u8>(), 0..80),
        skips in prop::collection::vec(any::<u8>(), 0..80),
        dice in prop::collection::vec(any::<u8>(), 0..64),
    ) {
        let s = sim::build(&turns, &choices, &skips);
        let mut c = Conversation::new(sim::SESSION);
        for f in feeds_of(&s, &dice) {
            f.apply(&s, &mut c);
            same(&c.to_cache(), cache_record, Some(cache_record_json));
        }
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
        Relay::Presence {
            session: "a".into(),
            state: r#"{"typing":true}"#.into(),
        },
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

proptest! {
    #![proptest_config(ProptestConfig::with_cases(8))]

    /// Every mutation of the cache of a client fed simulated sessions reads as serde reads it.
    #[test]
    fn simulated_caches_fail_as_serde_fails(
        turns in prop::collection::vec(turn(), 1..4),
        dice in prop::collection::vec(any::<u8>(), 0..32),
    ) {
        let s = sim::build(&turns, &[], &[]);
        let mut c = Conversation::new(sim::SESSION);
        for f in feeds_of(&s, &dice) {
            f.apply(&s, &mut c);
        }
        fails_as_serde_fails(&c.to_cache(), cache_record);
    }
}
