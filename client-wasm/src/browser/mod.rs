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
