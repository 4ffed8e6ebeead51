//! Browser SDK of turnstream: a durable, resumable view of one chat session.
//!
//! # Layout
//! - [`reducer`]: plain Rust. Merges every source (cache, history, snapshot, stream, POST
//!   responses, optimistic sends, turn-status checks, sibling tabs) into one ordered view.
//! - [`tabs`]: what sibling tabs tell each other over a BroadcastChannel.
//! - [`relay`]: what the tabs of an origin tell each other to share one stream.
//! - [`streams`]: which streams the leader tab holds for the sessions every tab shows.
//! - [`presence`]: who is in each session (contract v1.3), from the stream's presence frames.
//! - [`codec`]: the JSON read and written, by hand rather than with serde (package size).
//! - [`retry`]: when to try again and what an HTTP answer means for a queued message.
//! - `browser` (wasm32 only): the thin ring around the reducer — fetch, EventSource, IndexedDB,
//!   BroadcastChannel, Web Locks — and the `ChatClient` JS API.

pub mod codec;
pub mod presence;
pub mod reducer;
pub mod relay;
pub mod retry;
pub mod streams;
pub mod tabs;

#[cfg(target_arch = "wasm32")]
mod browser;

/// The strings `parts` end to end. One plain loop instead of `<[&str]>::concat`, whose generic
/// join (about 1 KB of code) nothing else in the package needs.
pub(crate) fn cat(parts: &[&str]) -> String {
    let mut out = String::new();
    for p in parts {
        out.push_str(p);
    }
    out
}

/// The JS API, also reachable from Rust (the browser tests drive it this way).
#[cfg(target_arch = "wasm32")]
pub use browser::{ChatClient, SendOptions};
