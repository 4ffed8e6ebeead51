//! Wire types of turnstream's HTTP and SSE contract, version 1.
//!
//! # Layout
//! - [`cursor`]: the opaque journal position a client resumes from (`<epoch>-<sequence>`).
//! - [`event`]: journaled events (`message_received`, `turn_started`, `response_delta`, ...) and the
//!   un-journaled control events (`snapshot`, `history_resync_required`).
//! - [`snapshot`]: a stream's `snapshot`: the turns in flight, folded from their events.
//! - [`message`]: a message of the conversation (history, events, the worker API).
//! - [`turn`]: a turn's state and its tool calls.
//! - [`api`]: request and response bodies of the REST endpoints, and the error shape.
//! - [`raw_json`]: a JSON value carried as its compact text.
//! - [`input`]: agents that ask (v1.2): requests, answers, `on_busy`.
//! - [`call`]: agents by name and agent-to-agent calls (v1.3).
//! - [`attachment`]: the files a user message refers to (v1.2), and their rules.
//! - [`sse`]: encoding and decoding of `text/event-stream` frames.
//! - [`limits`]: the named limits both sides enforce.
//! - [`worker`]: the worker API's bodies (claim, events, heartbeat, complete, fail).
//!
//! No two of these modules import each other (each names only modules below it: `limits`,
//! `raw_json`, `turn`, `call`, `input`, `attachment`, `message`, then `event`, `snapshot`, `api` and `worker`).
//!
//! This crate depends on nothing of the project's own and compiles for the server and for wasm32.
//! The `openapi` feature (the server's, never the SDK's) derives a JSON Schema for every wire type.

pub mod api;
pub mod attachment;
pub mod call;
pub mod cursor;
pub mod event;
pub mod input;
pub mod limits;
pub mod message;
pub mod raw_json;
pub mod snapshot;
pub mod sse;
pub mod turn;
pub mod worker;

pub use api::*;
pub use attachment::Attachment;
pub use call::{CallAnswer, CallTarget, CalledBy};
pub use cursor::{Cursor, CursorError};
pub use event::*;
pub use input::{
    InputAnswerRequest, InputAnswerResponse, InputGiven, InputRequest, OnBusy, RawJson,
    RequestKind, ToolRequest, TurnRequest,
};
pub use message::*;
pub use snapshot::{ActiveTurn, Snapshot};
pub use turn::*;
