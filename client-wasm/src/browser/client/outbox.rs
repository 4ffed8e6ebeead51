//! The outbox: messages shown at once, stored before `send` resolves, posted one at a time (one
//! tab at a time, under a Web Lock), retried with backoff, settled by the server's answer.

use std::rc::Rc;

use crate::browser::spawn_local;
use turnstream_protocol::{Attachment, ErrorDetail, OnBusy, PostMessageResponse};

use super::Client;
use crate::browser::env;
use crate::browser::http::HttpError;
use crate::reducer::Outgoing;
use crate::retry::{backoff_ms, classify_post, PostOutcome};
use crate::tabs::TabMessage;

impl Client {
    // ----- the outbox -----

    pub(crate) async fn send(
        self: &Rc<Self>,
        content: String,
        attachments: Vec<Attachment>,
        on_busy: Option<OnBusy>,
    ) -> String {
        let client_message_id = env::new_client_message_id();
        let created_at = env::now_ms();
        self.own.borrow_mut().add(client_message_id.clone());
        self.update(&mut |c| {
            c.send_local(
                &client_message_id,
                &content,
                &attachments,
                created_at,
                on_busy,
            )
        });
        self.broadcast(&TabMessage::Optimistic {
            session_id: self.endpoint.session_id.clone(),
            client_message_id: client_message_id.clone(),
            content,
            attachments,
            created_at,
            on_busy,
            edit: None,
        });
        // On disk before the first attempt: a reload from here on still has it to post.
        self.save_now().await;
        self.kick_outbox();
        client_message_id
    }

    pub(super) fn kick_outbox(self: &Rc<Self>) {
        if self.closed.get() {
            return;
        }
        if self.outbox_running.replace(true) {
            self.outbox_again.set(true);
            self.net_waker.wake_all();
            return;
        }
        let me = self.clone();
        spawn_local(async move {
            loop {
                me.outbox_again.set(false);
                let lock = [
                    "turnstream-outbox:",
                    &me.endpoint.base_url,
                    ":",
                    &me.endpoint.session_id,
                ]
                .concat();
                // One tab posts at a time (the client_message_id makes a double post harmless,
                // but not free). Without Web Locks, each tab posts only its own messages.
                if !env::with_lock(&lock, me.clone().drain_outbox(true)).await {
                    me.clone().drain_outbox(false).await;
                }
                if !me.outbox_again.get() || me.closed.get() {
                    break;
                }
            }
            me.outbox_running.set(false);
        });
    }

    pub(super) async fn drain_outbox(self: Rc<Self>, everyone: bool) {
        let mut attempt = 0u32;
        loop {
            if self.closed.get() {
                return;
            }
            // Answers first: a waiting turn holds back every message queued behind it. (Any
            // tab may post any answer: a second post of the same answer is answered 200.) Then
            // this tab's changes of branch, in order (before a message sent after them), then
            // the messages. One backoff for the three.
            let answer = self.conv.borrow().next_answer();
            let wait = if let Some(a) = answer {
                self.post_answer(a).await
            } else if self.conv.borrow().next_branch_action().is_some() {
                self.post_branch_action().await
            } else {
                let next = {
                    let own = self.own.borrow();
                    self.conv
                        .borrow()
                        .next_to_post(|id| everyone || own.contains(id))
                };
                let Some(next) = next else {
                    return;
                };
                self.post_message(next).await
            };
            match wait {
                None => attempt = 0,
                Some(after) => {
                    let ms = after.unwrap_or_else(|| backoff_ms(attempt, env::random()));
                    attempt = attempt.saturating_add(1);
                    self.net_waker.sleep(ms).await;
                }
            }
        }
    }

    /// Posts one message of the outbox; as [`Client::post_branch_action`] for what it returns.
    async fn post_message(self: &Rc<Self>, next: Outgoing) -> Option<Option<u32>> {
        let client_message_id = next.client_message_id;
        match self
            .endpoint
            .post_message(
                &client_message_id,
                &next.content,
                &next.attachments,
                next.on_busy,
                next.parent_id.as_ref().map(Option::as_deref),
            )
            .await
        {
            Ok(mut resp) => {
                resp.client_message_id = Some(client_message_id.clone());
                self.accepted(&resp);
                None
            }
            Err(HttpError::Status {
                status,
                error,
                retry_after,
                ..
            }) => match classify_post(status) {
                PostOutcome::Rejected => {
                    self.rejected(&client_message_id, error);
                    None
                }
                PostOutcome::Conflict => {
                    self.conflict(&client_message_id, error).await;
                    None
                }
                PostOutcome::Accepted | PostOutcome::Retry => {
                    Some(retry_after.map(|s| s.saturating_mul(1000)))
                }
            },
            Err(HttpError::Network(_)) | Err(HttpError::Decode) => Some(None),
        }
    }

    pub(super) fn accepted(self: &Rc<Self>, resp: &PostMessageResponse) {
        self.update(&mut |c| c.apply_post_response(resp));
        self.broadcast(&TabMessage::Posted {
            session_id: self.endpoint.session_id.clone(),
            response: resp.clone(),
        });
    }

    pub(super) fn rejected(self: &Rc<Self>, client_message_id: &str, error: ErrorDetail) {
        self.update(&mut |c| c.reject(client_message_id, &error));
        self.broadcast(&TabMessage::Rejected {
            session_id: self.endpoint.session_id.clone(),
            client_message_id: client_message_id.to_owned(),
            error,
        });
    }

    /// 409: the server holds a message under this id. If history shows it (same message, say
    /// posted by a sibling), that settles it; otherwise the id is taken and ours cannot be sent.
    pub(super) async fn conflict(self: &Rc<Self>, client_message_id: &str, error: ErrorDetail) {
        if let Ok((history, _)) = self.endpoint.history(self.history_limit, None).await {
            self.update(&mut |c| c.apply_history(&history));
        }
        if self.conv.borrow().is_sending(client_message_id) {
            self.rejected(client_message_id, error);
        }
    }
}
