//! The browser ring around the reducer (wasm32 only): fetch, EventSource, IndexedDB,
//! BroadcastChannel, Web Locks and timers, and the `ChatClient` class exported to JS.
//!
//! Nothing here runs at import: every browser object is created inside `ChatClient.connect`, so
//! the package can be imported during server-side rendering.

mod api;
mod auth;
mod channel;
mod client;
mod env;
mod http;
mod hub;
mod json;
mod leader;
mod relay;
mod storage;
mod stream;

pub use api::{ChatClient, SendOptions};

use std::future::Future;
use std::pin::Pin;

type Task = Pin<Box<dyn Future<Output = ()>>>;
type Call = Pin<Box<dyn Future<Output = Result<wasm_bindgen::JsValue, wasm_bindgen::JsValue>>>>;

/// Runs `task` on the page's event loop. Boxed here so that the executor's code is in the
/// package once rather than once per task.
pub(crate) fn spawn_local(task: impl Future<Output = ()> + 'static) {
    wasm_bindgen_futures::spawn_local(Box::pin(task) as Task);
}

/// The promise of a method that runs `call`; boxed for the same reason as [`spawn_local`].
pub(crate) fn future_to_promise(
    call: impl Future<Output = Result<wasm_bindgen::JsValue, wasm_bindgen::JsValue>> + 'static,
) -> js_sys::Promise {
    wasm_bindgen_futures::future_to_promise(Box::pin(call) as Call)
}

/// A callback the browser ring holds (`Rc<dyn On<T>>`): a closure, whose parameter its maker
/// names (`|s: Signal| ...`). A trait of its own rather than `dyn Fn`, whose vtable also holds
/// `FnMut::call_mut` and `FnOnce::call_once`: copies of each closure, never called.
pub(crate) trait On<T> {
    fn on(&self, x: T);
}

impl<T, F: Fn(T)> On<T> for F {
    fn on(&self, x: T) {
        self(x)
    }
}

/// An event listener's body, boxed (`Box<dyn Listen>`) and wrapped by [`listener`]. A trait
/// of its own for the reason of [`On`].
pub(crate) trait Listen {
    fn event(&mut self, e: web_sys::Event);
}

impl<F: FnMut(web_sys::Event)> Listen for F {
    fn event(&mut self, e: web_sys::Event) {
        self(e)
    }
}

/// The JS function for an event listener: every listener is this one closure type around its
/// boxed body, so wasm-bindgen's `Closure` vtable (with its `call_once`) is in the package once.
pub(crate) fn listener(
    mut f: Box<dyn Listen>,
) -> wasm_bindgen::closure::Closure<dyn FnMut(web_sys::Event)> {
    wasm_bindgen::closure::Closure::new(move |e| f.event(e))
}

/// A new promise with its resolve and reject functions: every promise the ring makes comes
/// from this one `Promise::new` closure (each closure was its own glue and vtable).
pub(crate) fn deferred() -> (js_sys::Promise, js_sys::Function, js_sys::Function) {
    use wasm_bindgen::JsCast;
    // Replaced at once: `Promise::new` runs its executor before it returns.
    let mut fns: (js_sys::Function, js_sys::Function) = (
        wasm_bindgen::JsValue::UNDEFINED.unchecked_into(),
        wasm_bindgen::JsValue::UNDEFINED.unchecked_into(),
    );
    let promise = js_sys::Promise::new(&mut |resolve, reject| fns = (resolve, reject));
    (promise, fns.0, fns.1)
}

/// A one-shot JS function running `f` (collected once called or dropped): one closure type
/// for every such function, so wasm-bindgen's glue for it is in the package once.
pub(crate) fn once(f: Box<dyn Once>) -> wasm_bindgen::JsValue {
    wasm_bindgen::closure::Closure::once_into_js(move |x| f.call(x))
}

/// What [`once`] runs: a closure (`|x: JsValue| -> JsValue { ... }`).
pub(crate) trait Once {
    fn call(self: Box<Self>, x: wasm_bindgen::JsValue) -> wasm_bindgen::JsValue;
}

impl<F: FnOnce(wasm_bindgen::JsValue) -> wasm_bindgen::JsValue> Once for F {
    fn call(self: Box<Self>, x: wasm_bindgen::JsValue) -> wasm_bindgen::JsValue {
        (*self)(x)
    }
}

/// The allocator: talc is smaller than std's dlmalloc (about 2 KB of the gzipped package).
// SAFETY: `new_global` needs single-threaded wasm, and the SDK runs on the page's one thread
// (the package is built without atomics).
#[allow(unsafe_code)]
#[global_allocator]
static ALLOCATOR: talc::TalckWasm = unsafe { talc::TalckWasm::new_global() };
