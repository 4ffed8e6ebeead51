//! Sends: this tab's messages and sibling tabs' shown at once, the answer to `POST /messages`
//! that places them in the journal, and a refusal for good.

use turnstream_protocol::{Attachment, ErrorDetail, OnBusy, PostMessageResponse};

use super::entry::{EntryError, Node, UserEntry, UserStatus};
use super::Conversation;

impl Conversation {
    /// The answer to our own `POST /messages` (or a sibling's, relayed).
    pub fn apply_post_response(&mut self, r: &PostMessageResponse) -> bool {
        let Some(seq) = self.position(&r.event_id) else {
            return false;
        };
        let mut changed = false;
        let key = r
            .client_message_id
            .clone()
            .unwrap_or_else(|| r.message_id.clone());
        if let Some(existing) = self.users.get(&key) {
            // Without the content we cannot show a bubble; message_received will bring it.
            let incoming = UserEntry {
                message_id: Some(r.message_id.clone()),
                turn_id: Some(r.turn_id.clone()),
                seq: Some(seq),
                status: UserStatus::Sent,
                from_server: false,
                error: None,
                ..existing.clone()
            };
            changed |= self.join_user(incoming);
        }
        let a = self.turn_mut(&r.turn_id, &mut changed);
        changed |= a.note_anchor(Some(seq));
        self.touch(changed)
    }

    /// A message this tab is sending: shown at once, `sending` until the server has it.
    pub fn send_local(
        &mut self,
        client_message_id: &str,
        content: &str,
        attachments: &[Attachment],
        created_at: i64,
        on_busy: Option<OnBusy>,
    ) -> bool {
        self.optimistic(client_message_id, content, attachments, created_at, on_busy)
    }

    /// A sibling tab's optimistic message (it may arrive after the server's copy: then it is a no-op).
    pub fn apply_optimistic(
        &mut self,
        client_message_id: &str,
        content: &str,
        attachments: &[Attachment],
        created_at: i64,
        on_busy: Option<OnBusy>,
    ) -> bool {
        self.optimistic(client_message_id, content, attachments, created_at, on_busy)
    }

    fn optimistic(
        &mut self,
        client_message_id: &str,
        content: &str,
        attachments: &[Attachment],
        created_at: i64,
        on_busy: Option<OnBusy>,
    ) -> bool {
        self.optimistic_at(
            client_message_id,
            content,
            attachments,
            created_at,
            on_busy,
            None,
        )
    }

    /// An optimistic message; `edit`: the `parent_id` it is posted with.
    pub(super) fn optimistic_at(
        &mut self,
        client_message_id: &str,
        content: &str,
        attachments: &[Attachment],
        created_at: i64,
        on_busy: Option<OnBusy>,
        edit: Option<Option<String>>,
    ) -> bool {
        if self.users.contains_key(client_message_id) {
            return false;
        }
        self.send_counter += 1;
        let entry = UserEntry {
            key: client_message_id.to_owned(),
            client_message_id: Some(client_message_id.to_owned()),
            message_id: None,
            turn_id: None,
            content: content.to_owned(),
            created_at,
            seq: None,
            status: UserStatus::Sending,
            error: None,
            from_server: false,
            send_order: self.send_counter,
            author: None,
            attachments: attachments.to_vec(),
            on_busy,
            node: Node {
                placed: edit.is_some(),
                parent_id: edit.clone().flatten(),
                ..Node::default()
            },
            edit: edit.is_some(),
        };
        let changed = self.join_user(entry);
        self.touch(changed)
    }

    /// The server refused a message for good (a 4xx other than 409/429).
    pub fn reject(&mut self, client_message_id: &str, error: &ErrorDetail) -> bool {
        let Some(u) = self.users.get_mut(client_message_id) else {
            return false;
        };
        if u.status != UserStatus::Sending {
            return false;
        }
        u.status = UserStatus::Rejected;
        u.error = Some(EntryError {
            code: error.code.clone(),
            message: error.message.clone(),
        });
        self.touch(true)
    }
}
