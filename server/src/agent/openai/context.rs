//! The model's context for one turn: the system prompt, the session's history in conversation
//! order, then this turn's message, shaped so roles alternate. Strict chat templates (Llama,
//! Mistral, Gemma under vLLM or llama.cpp) reject two user messages in a row or an assistant
//! message first, and some servers reject an empty assistant message.

use serde_json::{json, Value};
use turnstream_protocol::{Message, MessageStatus, Role};

/// What stands in an assistant slot whose turn produced no text, so the model still sees that
/// its earlier question went unanswered (and why) rather than two questions in a row.
fn placeholder(status: MessageStatus) -> &'static str {
    match status {
        MessageStatus::Complete => "(no text reply)",
        MessageStatus::Failed => "(no reply: the turn failed)",
        MessageStatus::Cancelled => "(no reply: the user cancelled the turn)",
        MessageStatus::Interrupted => "(no reply: the turn was interrupted)",
    }
}

/// The `messages` array of the request.
pub(super) fn messages(system: Option<&str>, history: &[Message], user: &str) -> Vec<Value> {
    let mut turns: Vec<(Role, String)> = Vec::with_capacity(history.len() + 1);
    for m in history {
        let content = if m.role == Role::Assistant && m.content.trim().is_empty() {
            placeholder(m.status).to_string()
        } else {
            m.content.clone()
        };
        push(&mut turns, m.role, content);
    }
    push(&mut turns, Role::User, user.to_string());
    // A history window can start with a reply whose question fell outside it.
    let first_user = turns
        .iter()
        .position(|(role, _)| *role == Role::User)
        .unwrap_or(0);
    let mut out = Vec::with_capacity(turns.len() + 1);
    if let Some(system) = system.filter(|s| !s.trim().is_empty()) {
        out.push(json!({"role": "system", "content": system}));
    }
    // `Role` serializes as OpenAI's own names, `user` and `assistant`.
    out.extend(
        turns
            .into_iter()
            .skip(first_user)
            .map(|(role, content)| json!({"role": role, "content": content})),
    );
    out
}

/// Appends a message, merging it into the previous one when both have the same role.
fn push(turns: &mut Vec<(Role, String)>, role: Role, content: String) {
    match turns.last_mut() {
        Some((last, text)) if *last == role => {
            text.push_str("\n\n");
            text.push_str(&content);
        }
        _ => turns.push((role, content)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(role: Role, content: &str, status: MessageStatus) -> Message {
        Message {
            message_id: String::new(),
            client_message_id: None,
            role,
            content: content.into(),
            status,
            turn_id: None,
            created_at: 0,
            event_id: String::new(),
            author: None,
        }
    }

    #[test]
    fn roles_alternate_whatever_the_history() {
        let history = [
            m(Role::Assistant, "orphan reply", MessageStatus::Complete),
            m(Role::User, "a", MessageStatus::Complete),
            m(Role::Assistant, "", MessageStatus::Failed),
            m(Role::User, "b", MessageStatus::Complete),
            m(Role::User, "c", MessageStatus::Complete),
            m(Role::Assistant, "part", MessageStatus::Cancelled),
            m(Role::User, "d", MessageStatus::Complete),
        ];
        assert_eq!(
            messages(Some("be brief"), &history, "now"),
            vec![
                json!({"role": "system", "content": "be brief"}),
                json!({"role": "user", "content": "a"}),
                json!({"role": "assistant", "content": "(no reply: the turn failed)"}),
                json!({"role": "user", "content": "b\n\nc"}),
                json!({"role": "assistant", "content": "part"}),
                json!({"role": "user", "content": "d\n\nnow"}),
            ]
        );
        assert_eq!(
            messages(Some("  "), &[], "hi"),
            vec![json!({"role": "user", "content": "hi"})]
        );
    }
}
