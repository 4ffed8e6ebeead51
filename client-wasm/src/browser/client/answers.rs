//! Answers to the agent's requests (contract v1.2): `respond` shows the answer at once, stores
//! it, tells the sibling tabs, and leaves the posting to the outbox; the server's verdict
//! settles the promise `respond` returned.

use crate::reducer::Conversation;
use std::rc::Rc;

use crate::browser::{deferred, spawn_local};
use js_sys::{Function, Object, Promise};
use turnstream_protocol::{ErrorDetail, RawJson};
use wasm_bindgen::prelude::*;

use super::{set, Client};
use crate::tabs::TabMessage;

/// A `respond` promise not settled yet.
pub(crate) struct Waiter {
    turn_id: String,
    request_id: String,
    resolve: Function,
    reject: Function,
}

/// An `Error` with the server's `code` (and, for `input_already_given`, the answer that won).
pub(crate) fn coded_error(code: &str, message: &str) -> Object {
    let e: Object = js_sys::Error::new(message).into();
    set(&e, "code", &code.into());
    e
}

/// A JSON text as a JS value.
pub(super) fn parsed(raw: &RawJson) -> JsValue {
    js_sys::JSON::parse(raw.as_str()).unwrap_or(JsValue::NULL)
}

impl Client {
    /// Shows `answer` on its request at once and queues it; the promise settles with the server's
    /// verdict (however long the browser stays offline).
    pub(crate) fn respond(
        self: &Rc<Self>,
        turn_id: String,
        request_id: String,
        answer: RawJson,
    ) -> Promise {
        // Answered already (the journal says so, or a tab of this browser answered first): the
        // same answer waits for that one's verdict; another is refused at once.
        let given = self.conv.borrow().given_answer(&turn_id, &request_id);
        let (promise, resolve, reject) = deferred();
        self.waiters.borrow_mut().push(Waiter {
            turn_id: turn_id.clone(),
            request_id: request_id.clone(),
            resolve,
            reject,
        });
        if let Some((first, _)) = given {
            if first.as_str() == answer.as_str() {
                self.settle_waiters();
            } else {
                self.settle(
                    &turn_id,
                    &request_id,
                    Some(&ErrorDetail {
                        code: "input_already_given".to_owned(),
                        message: "the request was answered first".to_owned(),
                    }),
                );
            }
            return promise;
        }
        self.update(&mut |c: &mut Conversation| {
            c.answer_local(&turn_id, &request_id, &answer, false)
        });
        self.broadcast(&TabMessage::Answer {
            session_id: self.endpoint.session_id.clone(),
            turn_id,
            request_id,
            answer,
            sent: false,
        });
        let me = self.clone();
        spawn_local(async move {
            // On disk before the first attempt: a reload from here on still has it to post.
            me.save_now().await;
            me.kick_outbox();
        });
        promise
    }

    /// Settles the promises waiting on one answer: resolved, or rejected with `error`.
    pub(super) fn settle(&self, turn_id: &str, request_id: &str, error: Option<&ErrorDetail>) {
        let mut settled = Vec::new();
        self.waiters.borrow_mut().retain_mut(|w| {
            let it = w.turn_id == turn_id && w.request_id == request_id;
            if it {
                settled.push((w.resolve.clone(), w.reject.clone()));
            }
            !it
        });
        for (resolve, reject) in settled {
            let _ = match error {
                None => resolve.call0(&JsValue::NULL),
                Some(e) => {
                    let err = coded_error(&e.code, &e.message);
                    let recorded = self.conv.borrow().given_answer(turn_id, request_id);
                    if let Some((answer, by)) = recorded.filter(|_| e.code == "input_already_given")
                    {
                        set(&err, "answer", &parsed(&answer));
                        set(&err, "answeredBy", &super::opt_str(&by));
                    }
                    reject.call1(&JsValue::NULL, &err)
                }
            };
        }
    }

    /// After a change: a promise whose answer the server has (a sibling posted it, or the
    /// journal shows it) resolves; one whose turn ended before the answer was posted rejects.
    pub(super) fn settle_waiters(&self) {
        let pending: Vec<(String, String, Option<bool>)> = {
            let conv = self.conv.borrow();
            self.waiters
                .borrow()
                .iter()
                .map(|w| {
                    let state = conv.local_answer_sent(&w.turn_id, &w.request_id);
                    (w.turn_id.clone(), w.request_id.clone(), state)
                })
                .collect()
        };
        for (turn_id, request_id, state) in pending {
            match state {
                Some(true) => self.settle(&turn_id, &request_id, None),
                Some(false) => {}
                None => self.settle(
                    &turn_id,
                    &request_id,
                    Some(&ErrorDetail {
                        code: "turn_ended".to_owned(),
                        message: "the turn ended before the answer reached the server".to_owned(),
                    }),
                ),
            }
        }
    }
}
