//! History lists messages in conversation order (contract v1.1): turns in the order their user
//! messages were accepted, each turn's reply right after its user message, even when a later
//! message was accepted while the earlier turn ran (and so was written before that turn's reply).

mod support;

use support::{wait_for, TestResult, TestServer};
use turnstream_protocol::{cursor::sequence_of, HistoryResponse, Message, Role, TurnState};

/// Sends `first` (a slow turn), waits until it runs, then sends `second` while it still runs.
/// Returns both turn ids once both turns have ended.
async fn overlapping_turns(
    server: &TestServer,
    session: &str,
    first: &str,
    second: &str,
) -> TestResult<(String, String)> {
    let one = server.send(session, first).await?;
    wait_for(|| async {
        let t = server.turn(&one.turn_id).await?;
        Ok((t.state == TurnState::Running).then_some(()))
    })
    .await?;
    let two = server.send(session, second).await?;
    let ended = server.wait_turn_end(&one.turn_id).await?;
    // The scenario this file is about: the first reply was written after the second message.
    let reply_seq = ended
        .message
        .as_ref()
        .and_then(|m| sequence_of(&m.event_id))
        .ok_or("first turn has no reply")?;
    let second_seq = sequence_of(&two.event_id).ok_or("bad event id")?;
    if reply_seq <= second_seq {
        return Err("the first turn ended before the second message was accepted".into());
    }
    server.wait_turn_end(&two.turn_id).await?;
    Ok((one.turn_id, two.turn_id))
}

fn summary(messages: &[Message]) -> Vec<(Role, String)> {
    messages
        .iter()
        .map(|m| (m.role, m.content.clone()))
        .collect()
}

#[tokio::test]
async fn a_reply_follows_its_own_message_even_when_written_later() -> TestResult {
    let server = TestServer::start(&[])?;
    overlapping_turns(
        &server,
        "s1",
        "/sleep 1500 first reply",
        "/echo second reply",
    )
    .await?;
    let (history, _) = server.history("s1").await?;
    assert_eq!(
        summary(&history.messages),
        vec![
            (Role::User, "/sleep 1500 first reply".to_string()),
            (Role::Assistant, "first reply".to_string()),
            (Role::User, "/echo second reply".to_string()),
            (Role::Assistant, "second reply".to_string()),
        ]
    );
    // Event ids are still those of the events that brought each message: only the order of
    // the list changed, so the reply listed second carries the newest id but one.
    let ids: Vec<i64> = history
        .messages
        .iter()
        .filter_map(|m| sequence_of(&m.event_id))
        .collect();
    assert_eq!(ids.len(), 4);
    assert!(
        ids[1] > ids[2],
        "reply 1 was written after message 2: {ids:?}"
    );
    Ok(())
}

#[tokio::test]
async fn paging_with_before_returns_each_message_once_in_order() -> TestResult {
    let server = TestServer::start(&[])?;
    overlapping_turns(&server, "s2", "/sleep 1200 a", "/sleep 1200 b").await?;
    overlapping_turns(&server, "s2", "/sleep 1200 c", "/echo d").await?;
    let (whole, _) = server.history("s2").await?;
    let expected = vec![
        (Role::User, "/sleep 1200 a".to_string()),
        (Role::Assistant, "a".to_string()),
        (Role::User, "/sleep 1200 b".to_string()),
        (Role::Assistant, "b".to_string()),
        (Role::User, "/sleep 1200 c".to_string()),
        (Role::Assistant, "c".to_string()),
        (Role::User, "/echo d".to_string()),
        (Role::Assistant, "d".to_string()),
    ];
    assert_eq!(summary(&whole.messages), expected);

    for limit in [1, 2, 3] {
        // Pages come newest first; each page is itself oldest first.
        let mut pages: Vec<Vec<Message>> = Vec::new();
        let mut before: Option<String> = None;
        loop {
            let mut path = format!("/api/sessions/s2/history?limit={limit}");
            if let Some(b) = &before {
                path.push_str(&format!("&before={b}"));
            }
            let (status, body) = server.get_json(&path).await?;
            assert_eq!(status, 200, "{body}");
            let page: HistoryResponse = serde_json::from_value(body)?;
            assert!(page.messages.len() <= limit);
            let has_more = page.has_more;
            before = page.messages.first().map(|m| m.message_id.clone());
            pages.push(page.messages);
            if !has_more {
                break;
            }
            if pages.len() > expected.len() {
                return Err("paging does not end".into());
            }
        }
        let joined: Vec<Message> = pages.into_iter().rev().flatten().collect();
        assert_eq!(summary(&joined), expected, "limit {limit}");
    }
    Ok(())
}
