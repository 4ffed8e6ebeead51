//! The model's context for one turn: the system prompt, the session's history in conversation
//! order, then this turn's message, shaped so roles alternate. Strict chat templates (Llama,
//! Mistral, Gemma under vLLM or llama.cpp) reject two user messages in a row or an assistant
//! message first, and some servers reject an empty assistant message.
//!
//! A user message's attachments (contract v1.2) go with it: images as image parts, which
//! vision models read, and other files as a line of text naming them, since the chat API takes
//! nothing else by URL. A message without images stays a plain string, as every server reads.

use serde_json::{json, Value};
use turnstream_protocol::{Attachment, Message, MessageStatus, Role};

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

/// One piece of a message's content.
#[derive(Debug)]
enum Part {
    Text(String),
    /// An image, by URL (`https:` or `data:`).
    Image(String),
}

/// The `messages` array of the request.
pub(super) fn messages(
    system: Option<&str>,
    history: &[Message],
    user: &str,
    attachments: &[Attachment],
) -> Vec<Value> {
    let mut turns: Vec<(Role, Vec<Part>)> = Vec::with_capacity(history.len() + 1);
    for m in history {
        let content = if m.role == Role::Assistant && m.content.trim().is_empty() {
            placeholder(m.status)
        } else {
            &m.content
        };
        push(&mut turns, m.role, parts(content, &m.attachments));
    }
    push(&mut turns, Role::User, parts(user, attachments));
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
            .map(|(role, parts)| json!({"role": role, "content": content(parts)})),
    );
    out
}

/// A message's text, then its attachments in the order they were posted. A message with
/// attachments and no text has no text part.
fn parts(text: &str, attachments: &[Attachment]) -> Vec<Part> {
    let mut parts = Vec::with_capacity(1 + attachments.len());
    if !text.is_empty() || attachments.is_empty() {
        parts.push(Part::Text(text.to_string()));
    }
    for a in attachments {
        parts.push(if a.is_image() {
            Part::Image(a.url.clone())
        } else {
            Part::Text(reference(a))
        });
    }
    parts
}

/// The line of text that stands for a file the model cannot be handed by URL.
fn reference(a: &Attachment) -> String {
    match &a.name {
        Some(name) => format!("[Attached file \"{name}\" ({}): {}]", a.media_type, a.url),
        None => format!("[Attached file ({}): {}]", a.media_type, a.url),
    }
}

/// `content` as the chat API takes it: a string while it is all text, else an array of parts.
fn content(mut parts: Vec<Part>) -> Value {
    if let [Part::Text(_)] = parts.as_slice() {
        if let Some(Part::Text(text)) = parts.pop() {
            return Value::String(text);
        }
    }
    Value::Array(
        parts
            .into_iter()
            .map(|p| match p {
                Part::Text(text) => json!({"type": "text", "text": text}),
                Part::Image(url) => json!({"type": "image_url", "image_url": {"url": url}}),
            })
            .collect(),
    )
}

/// Appends a message, merging it into the previous one when both have the same role; texts
/// that meet are joined by a blank line.
fn push(turns: &mut Vec<(Role, Vec<Part>)>, role: Role, parts: Vec<Part>) {
    if turns.last().is_none_or(|(last, _)| *last != role) {
        turns.push((role, Vec::new()));
    }
    if let Some((_, into)) = turns.last_mut() {
        append(into, parts);
    }
}

fn append(into: &mut Vec<Part>, parts: Vec<Part>) {
    for part in parts {
        match (into.last_mut(), part) {
            (Some(Part::Text(text)), Part::Text(more)) => {
                text.push_str("\n\n");
                text.push_str(&more);
            }
            (_, part) => into.push(part),
        }
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
            attachments: Vec::new(),
            parent_id: None,
            siblings: None,
            requests: Vec::new(),
            called_by: None,
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
            messages(Some("be brief"), &history, "now", &[]),
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
            messages(Some("  "), &[], "hi", &[]),
            vec![json!({"role": "user", "content": "hi"})]
        );
    }

    #[test]
    fn images_are_image_parts_and_other_files_a_line_of_text() {
        let file = |url: &str, media_type: &str, name: Option<&str>| Attachment {
            url: url.into(),
            media_type: media_type.into(),
            name: name.map(str::to_string),
        };
        let mut earlier = m(Role::User, "what is this?", MessageStatus::Complete);
        earlier.attachments = vec![file("https://h/a.png", "image/png", Some("a.png"))];
        let history = [
            earlier,
            m(Role::Assistant, "a cat", MessageStatus::Complete),
        ];
        let now = [
            file("data:image/jpeg;base64,/9j/", "IMAGE/JPEG", None),
            file("https://h/r.pdf", "application/pdf", Some("r.pdf")),
        ];
        assert_eq!(
            messages(None, &history, "and these?", &now),
            vec![
                json!({"role": "user", "content": [
                    {"type": "text", "text": "what is this?"},
                    {"type": "image_url", "image_url": {"url": "https://h/a.png"}},
                ]}),
                json!({"role": "assistant", "content": "a cat"}),
                json!({"role": "user", "content": [
                    {"type": "text", "text": "and these?"},
                    {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,/9j/"}},
                    {"type": "text", "text": "[Attached file \"r.pdf\" (application/pdf): https://h/r.pdf]"},
                ]}),
            ]
        );
        // Files that are not images stay text, joined to the message's own; an image alone has
        // no text part.
        let pdf = [file("https://h/r.pdf", "application/pdf", None)];
        assert_eq!(
            messages(None, &[], "summarise", &pdf),
            vec![json!({"role": "user", "content":
                "summarise\n\n[Attached file (application/pdf): https://h/r.pdf]"})]
        );
        let image = [file("https://h/a.png", "image/png", None)];
        assert_eq!(
            messages(None, &[], "", &image),
            vec![json!({"role": "user", "content": [
                {"type": "image_url", "image_url": {"url": "https://h/a.png"}},
            ]})]
        );
    }
}
