//! The outbox: messages shown at once, stored before `send` resolves, posted one at a time (one
//! tab at a time, under a Web Lock), retried with backoff, settled by the server's answer.

use crate::reducer::Conversation;
use std::rc::Rc;

use wasm_bindgen::JsValue;

use crate::browser::spawn_local;
use turnstream_protocol::{Attachment, ErrorDetail, OnBusy, PostMessageResponse};

use super::{warn, Client};
use crate::browser::env;
use crate::browser::http::{body_json, enc, HttpError, Refusal};
use crate::browser::json;
use crate::codec::{self, Value};
use crate::reducer::{BranchAction, Outgoing, OutgoingAnswer};
use crate::retry::{backoff_ms, classify_post, PostOutcome};
use crate::tabs::TabMessage;

/// One item of the outbox, as posted.
enum Job {
    /// An answer to an agent's request (contract v1.2).
    Answer(OutgoingAnswer),
    /// A regeneration or a change of the active branch (contract v1.2).
    Branch(BranchAction),
    /// A message (an edit is one with a `parent_id`).
    Message(Outgoing),
}

impl Client {
    // ----- the outbox -----

    /// A new message, or with `edit` a new version of user entry `edit` (contract v1.2: posted
    /// with the `parent_id` of the version it replaces). Shown at once, told to the sibling tabs,
    /// on disk before this resolves with its client_message_id; `None` when `edit` names no
    /// user message the server has.
    pub(crate) async fn send(
        self: &Rc<Self>,
        content: String,
        attachments: Vec<Attachment>,
        on_busy: Option<OnBusy>,
        edit: Option<&str>,
    ) -> Option<String> {
        let client_message_id = env::new_client_message_id();
        let created_at = env::now_ms();
        let mut parent = None;
        let shown = self.update(&mut |c: &mut Conversation| match edit {
            None => c.send_local(
                &client_message_id,
                &content,
                &attachments,
                created_at,
                on_busy,
            ),
            Some(key) => {
                let r = c.edit_local(key, &client_message_id, &content, created_at);
                parent = c.next_to_post(|id| id == client_message_id);
                r.unwrap_or(false)
            }
        });
        let edit = match edit {
            Some(_) if !shown => return None,
            Some(_) => parent?.parent_id,
            None => None,
        };
        self.own.borrow_mut().add(client_message_id.clone());
        self.broadcast(&TabMessage::Optimistic {
            session_id: self.endpoint.session_id.clone(),
            client_message_id: client_message_id.clone(),
            content,
            attachments,
            created_at,
            on_busy,
            edit,
        });
        // On disk before the first attempt: a reload from here on still has it to post.
        self.save_now().await;
        self.kick_outbox();
        Some(client_message_id)
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
                let lock = crate::cat(&[
                    "turnstream-outbox:",
                    &me.endpoint.base_url,
                    ":",
                    &me.endpoint.session_id,
                ]);
                // One tab posts at a time (the client_message_id makes a double post harmless,
                // but not free). Without Web Locks, each tab posts only its own messages.
                if !env::with_lock(&lock, me.clone().drain_shared()).await {
                    me.clone().drain_outbox(false).await;
                }
                if !me.outbox_again.get() || me.closed.get() {
                    break;
                }
            }
            me.outbox_running.set(false);
        });
    }

    /// The outbox under its lock, shared by the tabs of this browser. What the tab that held
    /// the lock before posted is read from storage first: its word on the channel may come
    /// after the lock's grant. What this tab posts is stored before the lock goes to the next.
    async fn drain_shared(self: Rc<Self>) {
        // Most grants find nothing to post (a stream opened, a sibling's word): no read then.
        if self.next_job(true).is_none() {
            return;
        }
        match self.storage.load().await {
            Ok(records) => {
                for rec in records {
                    self.update(&mut |c: &mut Conversation| c.join_posted(&rec));
                }
            }
            Err(e) => warn("could not read the cache", &e),
        }
        if self.clone().drain_outbox(true).await {
            self.save_now().await;
        }
    }

    /// Posts the outbox until it is empty, one item at a time, with one backoff for all; true
    /// when the server settled any item.
    pub(super) async fn drain_outbox(self: Rc<Self>, everyone: bool) -> bool {
        let mut attempt = 0u32;
        let mut settled = false;
        loop {
            if self.closed.get() {
                return settled;
            }
            let Some(job) = self.next_job(everyone) else {
                return settled;
            };
            let (url, body) = self.request(&job);
            let reply = match self.endpoint.send("POST", &url, Some(&body)).await {
                // A change of branch answers nothing the client reads.
                Ok(_) if matches!(&job, Job::Branch(b) if !b.regenerate) => Ok(JsValue::NULL),
                Ok(resp) => body_json(resp).await,
                Err(e) => Err(e),
            };
            match self.settle_job(job, reply).await {
                None => {
                    attempt = 0;
                    settled = true;
                }
                Some(after) => {
                    let ms = after.unwrap_or_else(|| backoff_ms(attempt, env::random()));
                    attempt = attempt.saturating_add(1);
                    self.net_waker.sleep(ms).await;
                }
            }
        }
    }

    /// Answers first: a waiting turn holds back every message queued behind it. (Any tab may
    /// post any answer: a second post of the same answer is answered 200.) Then this tab's
    /// changes of branch, in order (before a message sent after them), then the messages.
    fn next_job(&self, everyone: bool) -> Option<Job> {
        let conv = self.conv.borrow();
        if let Some(a) = conv.next_answer() {
            return Some(Job::Answer(a));
        }
        if let Some(b) = conv.next_branch_action() {
            return Some(Job::Branch(b));
        }
        let own = self.own.borrow();
        conv.next_to_post(|id| everyone || own.contains(id))
            .map(Job::Message)
    }

    /// The URL and JSON body of `job`'s `POST`.
    fn request(&self, job: &Job) -> (String, String) {
        let e = &self.endpoint;
        let session = enc(&e.session_id);
        match job {
            // `POST /api/turns/{turn}/input` (contract v1.2).
            Job::Answer(a) => (
                e.url(&["/api/turns/", &enc(&a.turn_id), "/input"]),
                codec::input_request_json(&a.request_id, &a.answer),
            ),
            // `POST /api/messages/{message}/regenerate` (contract v1.2): 202 the first time,
            // 200 with the same answer for a retry of the same id.
            Job::Branch(b) if b.regenerate => (
                e.url(&["/api/messages/", &enc(&b.target), "/regenerate"]),
                codec::regenerate_request_json(&b.id),
            ),
            // `POST /api/sessions/{session}/active` (contract v1.2).
            Job::Branch(b) => (
                e.url(&["/api/sessions/", &session, "/active"]),
                codec::switch_request_json(&b.target),
            ),
            Job::Message(m) => (
                e.url(&["/api/sessions/", &session, "/messages"]),
                codec::post_request_json(
                    &m.content,
                    &m.client_message_id,
                    &m.attachments,
                    m.on_busy,
                    m.parent_id.as_ref().map(Option::as_deref),
                ),
            ),
        }
    }

    /// What the server's answer to `job` means. `None`: done with it (taken, or refused for
    /// good); `Some(after)`: try again later (`after` ms when the server said).
    async fn settle_job(
        self: &Rc<Self>,
        job: Job,
        reply: Result<JsValue, HttpError>,
    ) -> Option<Option<u32>> {
        let refusal = match reply {
            Ok(v) => {
                if !self.taken(&job, &v) {
                    return Some(None);
                }
                None
            }
            Err(HttpError::Status(r)) => {
                let Refusal {
                    status,
                    error,
                    retry_after,
                    body,
                } = *r;
                match classify_post(status) {
                    PostOutcome::Accepted | PostOutcome::Retry => {
                        return Some(retry_after.map(|s| s.saturating_mul(1000)));
                    }
                    outcome => Some((outcome, error, body)),
                }
            }
            Err(HttpError::Network(_)) | Err(HttpError::Decode) => return Some(None),
        };
        match job {
            Job::Answer(a) => {
                if let Some((_, error, body)) = refusal {
                    if error.code == "input_already_given" {
                        if let Some(given) = json::read(&body, codec::input_given) {
                            self.update(&mut |c: &mut Conversation| {
                                c.apply_given(&a.turn_id, &given)
                            });
                        }
                    }
                    self.update(&mut |c: &mut Conversation| {
                        c.drop_answer(&a.turn_id, &a.request_id)
                    });
                    self.settle(&a.turn_id, &a.request_id, Some(&error));
                }
            }
            Job::Branch(b) => {
                if let Some((_, error, _)) = refusal {
                    warn("a change of branch was refused", &error.message);
                }
                self.conv.borrow_mut().branch_action_done(&b.id);
                self.save_now().await;
            }
            Job::Message(m) => match refusal {
                Some((PostOutcome::Conflict, error, _)) => {
                    self.conflict(&m.client_message_id, error).await;
                }
                Some((_, error, _)) => self.rejected(&m.client_message_id, error),
                None => {}
            },
        }
        None
    }

    /// `job` was taken: the view learns what the server answered. False when the answer does
    /// not read (the job is tried again).
    fn taken(self: &Rc<Self>, job: &Job, v: &JsValue) -> bool {
        match job {
            Job::Answer(a) => {
                // The turn's state after the answer: read only to know the answer is the server's.
                if v.get("state").and_then(|s| s.string()).is_none() {
                    return false;
                }
                self.update(&mut |c: &mut Conversation| c.answer_posted(&a.turn_id, &a.request_id));
                self.settle(&a.turn_id, &a.request_id, None);
                self.broadcast(&TabMessage::Answer {
                    session_id: self.endpoint.session_id.clone(),
                    turn_id: a.turn_id.clone(),
                    request_id: a.request_id.clone(),
                    answer: a.answer.clone(),
                    sent: true,
                });
            }
            Job::Branch(b) if b.regenerate => match codec::regenerate_response(v) {
                Some(r) => {
                    self.update(&mut |c: &mut Conversation| c.apply_regenerate(&r));
                }
                None => return false,
            },
            Job::Branch(_) => {}
            Job::Message(m) => match codec::post_response(v) {
                Some(mut resp) => {
                    resp.client_message_id = Some(m.client_message_id.clone());
                    self.accepted(&resp);
                }
                None => return false,
            },
        }
        true
    }

    pub(super) fn accepted(self: &Rc<Self>, resp: &PostMessageResponse) {
        self.update(&mut |c: &mut Conversation| c.apply_post_response(resp));
        self.broadcast(&TabMessage::Posted {
            session_id: self.endpoint.session_id.clone(),
            response: resp.clone(),
        });
    }

    pub(super) fn rejected(self: &Rc<Self>, client_message_id: &str, error: ErrorDetail) {
        self.update(&mut |c: &mut Conversation| c.reject(client_message_id, &error));
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
            self.update(&mut |c: &mut Conversation| c.apply_history(&history));
        }
        if self.conv.borrow().is_sending(client_message_id) {
            self.rejected(client_message_id, error);
        }
    }
}
