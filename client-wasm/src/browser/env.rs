//! The few things the SDK needs from the JS global scope (window or worker): time, randomness,
//! `navigator.onLine`, timers that can be woken early, and Web Locks. Looked up on use, never at
//! import, so loading the package during server-side rendering touches nothing.

use crate::browser::{deferred, listener, once, Listen};
use std::cell::RefCell;
use std::rc::Rc;

use js_sys::{Function, Promise, Reflect};
use wasm_bindgen::prelude::*;
use wasm_bindgen_futures::JsFuture;

#[wasm_bindgen]
extern "C" {
    #[wasm_bindgen(js_name = setTimeout)]
    fn set_timeout(handler: &Function, ms: i32) -> JsValue;
}

pub(crate) fn now_ms() -> i64 {
    js_sys::Date::now() as i64
}

/// In `[0, 1)`.
pub(crate) fn random() -> f64 {
    js_sys::Math::random()
}

/// A fresh client_message_id: time-prefixed (readable in logs) with 64 random bits.
pub(crate) fn new_client_message_id() -> String {
    let hi = (random() * 4_294_967_296.0) as u64;
    let lo = (random() * 4_294_967_296.0) as u64;
    let mut id = "c-".to_owned();
    push_hex(&mut id, u64::try_from(now_ms()).unwrap_or_default(), 1);
    id.push('-');
    push_hex(&mut id, (hi << 32) | lo, 16);
    id
}

/// `n` in lowercase hex, at least `width` digits.
fn push_hex(out: &mut String, n: u64, width: usize) {
    let digits = (16 - n.leading_zeros() as usize / 4).max(width);
    for i in (0..digits).rev() {
        let d = ((n >> (i * 4)) & 15) as u32;
        out.push(char::from_digit(d, 16).unwrap_or('0'));
    }
}

fn get(target: &JsValue, key: &str) -> Option<JsValue> {
    Reflect::get(target, &JsValue::from_str(key))
        .ok()
        .filter(|v| !v.is_undefined() && !v.is_null())
}

fn navigator() -> Option<JsValue> {
    get(&js_sys::global(), "navigator")
}

/// `navigator.onLine`; true where the browser does not say.
pub(crate) fn online() -> bool {
    navigator()
        .and_then(|n| get(&n, "onLine"))
        .and_then(|v| v.as_bool())
        .unwrap_or(true)
}

/// Timers that a `wake_all` ends early: the retry loops sleep on it, and coming back online or
/// `close()` wakes them so nobody waits out a 30 s backoff for nothing.
#[derive(Clone, Default)]
pub(crate) struct Waker {
    pending: Rc<RefCell<Vec<Function>>>,
}

impl Waker {
    /// Resolves after `ms`, or sooner on `wake_all`.
    pub(crate) async fn sleep(&self, ms: u32) {
        let pending = self.pending.clone();
        let (promise, mine, _) = deferred();
        set_timeout(&mine, i32::try_from(ms).unwrap_or(i32::MAX));
        pending.borrow_mut().push(mine.clone());
        // A timer promise never rejects; either way the caller just re-checks its condition.
        let _ = JsFuture::from(promise).await;
        self.pending
            .borrow_mut()
            .retain(|f| !js_sys::Object::is(f, &mine));
    }

    pub(crate) fn wake_all(&self) {
        let waiting: Vec<Function> = self.pending.borrow_mut().drain(..).collect();
        for resolve in waiting {
            let _ = resolve.call0(&JsValue::UNDEFINED);
        }
    }
}

/// Runs `work` holding the Web Lock `name`, so only one tab of a browser runs it at a time. The
/// lock is released when `work` ends or the tab dies. Returns false (without running `work`)
/// where the browser has no Web Locks.
pub(crate) async fn with_lock<F>(name: &str, work: F) -> bool
where
    F: std::future::Future<Output = ()>,
{
    let Some(locks) = navigator().and_then(|n| get(&n, "locks")) else {
        return false;
    };
    let Some(request) = get(&locks, "request").and_then(|f| f.dyn_into::<Function>().ok()) else {
        return false;
    };
    // The lock is held until the promise the callback returns settles: that is `release`.
    let (release, release_fn, _) = deferred();
    let (granted, granted_fn, refused_fn) = deferred();
    let callback = once(Box::new(move |_lock: JsValue| -> JsValue {
        let _ = granted_fn.call0(&JsValue::UNDEFINED);
        release.into()
    }));
    let Ok(requested) = request.call2(&locks, &JsValue::from_str(name), &callback) else {
        return false;
    };
    let Ok(requested) = requested.dyn_into::<Promise>() else {
        return false;
    };
    // A request refused later (some sandboxed or opaque origins) must not leave us waiting for
    // a grant that never comes. After a grant, this rejection is a no-op.
    let refused = once(Box::new(move |e: JsValue| -> JsValue {
        let _ = refused_fn.call1(&JsValue::UNDEFINED, &e);
        JsValue::UNDEFINED
    }));
    // (`Promise::catch` wants a `Closure` we would have to leak; a one-shot JS function is
    // collected once called or dropped.)
    let requested = get(&requested, "catch")
        .and_then(|f| f.dyn_into::<Function>().ok())
        .and_then(|catch| catch.call1(&requested, &refused).ok())
        .and_then(|p| p.dyn_into::<Promise>().ok())
        .unwrap_or(requested);
    if JsFuture::from(granted).await.is_err() {
        return false;
    }
    work.await;
    let _ = release_fn.call0(&JsValue::UNDEFINED);
    let _ = JsFuture::from(requested).await;
    true
}

/// Listens to `event` on the global scope (or its document) until dropped.
pub(crate) struct GlobalListener {
    event: &'static str,
    target: Option<web_sys::EventTarget>,
    closure: Closure<dyn FnMut(web_sys::Event)>,
}

impl GlobalListener {
    pub(crate) fn new(event: &'static str, f: impl FnMut(web_sys::Event) + 'static) -> Self {
        Self::on(js_sys::global().dyn_into().ok(), event, Box::new(f))
    }

    /// On `document` (`freeze`, `visibilitychange`); nothing where there is none (a worker).
    pub(crate) fn on_document(
        event: &'static str,
        f: impl FnMut(web_sys::Event) + 'static,
    ) -> Self {
        let document = get(&js_sys::global(), "document").and_then(|d| d.dyn_into().ok());
        Self::on(document, event, Box::new(f))
    }

    /// Boxed: one copy of this code for every listener (package size).
    fn on(target: Option<web_sys::EventTarget>, event: &'static str, f: Box<dyn Listen>) -> Self {
        let closure = listener(f);
        if let Some(target) = &target {
            let _ =
                target.add_event_listener_with_callback(event, closure.as_ref().unchecked_ref());
        }
        GlobalListener {
            event,
            target,
            closure,
        }
    }
}

/// `document.visibilityState == "hidden"`.
pub(crate) fn hidden() -> bool {
    get(&js_sys::global(), "document")
        .and_then(|d| get(&d, "visibilityState"))
        .and_then(|v| v.as_string())
        .is_some_and(|v| v == "hidden")
}

impl Drop for GlobalListener {
    fn drop(&mut self) {
        if let Some(target) = &self.target {
            let _ = target.remove_event_listener_with_callback(
                self.event,
                self.closure.as_ref().unchecked_ref(),
            );
        }
    }
}

/// Where the browser's presence client id is kept.
const CLIENT_KEY: &str = "turnstream-client";

/// This browser's presence member id (contract v1.3), the same in every tab and across
/// reloads: kept in `localStorage`, made on first use. A fresh one per page where there is no
/// `localStorage` (a worker, storage refused).
pub(crate) fn client_id() -> String {
    let storage = get(&js_sys::global(), "localStorage");
    let call = |name: &str, args: &js_sys::Array| -> Option<JsValue> {
        let s = storage.as_ref()?;
        let f = get(s, name)?.dyn_into::<Function>().ok()?;
        Reflect::apply(&f, s, args).ok()
    };
    let key = JsValue::from_str(CLIENT_KEY);
    if let Some(id) = call("getItem", &js_sys::Array::of1(&key)).and_then(|v| v.as_string()) {
        if turnstream_protocol::limits::is_valid_id(&id) && id.len() <= 64 {
            return id;
        }
    }
    let id = new_client_message_id();
    call(
        "setItem",
        &js_sys::Array::of2(&key, &JsValue::from_str(&id)),
    );
    id
}
