//! Leader election between the tabs of one origin: a Web Lock `turnstream-leader:<baseUrl>` held
//! for as long as a tab leads. The browser hands it to the next tab in line when the leader
//! closes or crashes; a tab whose leader went quiet can take it (`steal`).

use crate::browser::{deferred, once, spawn_local};
use js_sys::{Function, Object, Promise, Reflect};
use wasm_bindgen::prelude::*;
use wasm_bindgen_futures::JsFuture;

fn locks() -> Option<(JsValue, Function)> {
    let nav = Reflect::get(&js_sys::global(), &JsValue::from_str("navigator")).ok()?;
    let locks = Reflect::get(&nav, &JsValue::from_str("locks"))
        .ok()
        .filter(JsValue::is_object)?;
    let request = Reflect::get(&locks, &JsValue::from_str("request"))
        .ok()?
        .dyn_into::<Function>()
        .ok()?;
    Some((locks, request))
}

/// Whether this browser has Web Locks.
pub(crate) fn available() -> bool {
    locks().is_some()
}

/// Queues for the lock `name` (or takes it at once with `steal`). When granted, `granted` gets
/// the function that releases it; `lost` runs if the lock is taken away or the request refused.
pub(crate) fn request(
    name: &str,
    steal: bool,
    granted: Box<dyn FnOnce(Function)>,
    lost: Box<dyn FnOnce()>,
) -> bool {
    let Some((locks, request)) = locks() else {
        return false;
    };
    let callback = once(Box::new(move |_lock: JsValue| -> JsValue {
        // Held until this promise settles: its resolve function is the release.
        let (held, release, _) = deferred();
        granted(release);
        held.into()
    }));
    let options = Object::new();
    let _ = Reflect::set(&options, &JsValue::from_str("steal"), &steal.into());
    let Ok(requested) = request.call3(&locks, &JsValue::from_str(name), &options, &callback) else {
        return false;
    };
    let Ok(requested) = requested.dyn_into::<Promise>() else {
        return false;
    };
    spawn_local(async move {
        // Resolves after we released it; rejects when another tab stole it from us.
        if JsFuture::from(requested).await.is_err() {
            lost();
        }
    });
    true
}
