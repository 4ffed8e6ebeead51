//! Broadcast: short messages from this server to every other server sharing the database,
//! never stored (no table, no id, no disk write). Presence rides on it (see
//! [`crate::presence::cluster`]).
//!
//! On PostgreSQL a payload is a `NOTIFY` on [`CHANNEL`], sent through the pool (as the
//! journal's own notices; a pooler in transaction mode passes it) one after another from one
//! task, so they arrive in the order sent; they are heard on the tail's `LISTEN` connection
//! (see [`super::postgres`]'s tail). Delivery is best effort: nothing is sent again after a
//! failure, and a server that cannot listen hears nothing ([`BroadcastSink::hearing`] says
//! so). On SQLite there is no other server and a broadcast goes nowhere.

use std::sync::{Arc, Mutex};

use crate::mutex::lock;

/// The `NOTIFY` channel of broadcasts.
pub const CHANNEL: &str = "turnstream_broadcast";

/// Broadcasts waiting to be sent; past this many, new ones are dropped (with a warning).
pub const QUEUE: usize = 4096;

/// What hears other servers' broadcasts.
pub trait BroadcastSink: Send + Sync {
    /// One payload another server sent (this server's own come back too).
    fn heard(&self, payload: &str);
    /// Whether this server hears the others now (false until its listening connection works,
    /// and whenever it fails).
    fn hearing(&self, heard: bool);
}

/// The sink of a journal's broadcasts, and whether they are heard: shared by the engine's
/// listening connection and the journal's handle.
#[derive(Default)]
pub struct Board {
    sink: Mutex<Option<Arc<dyn BroadcastSink>>>,
    heard: std::sync::atomic::AtomicBool,
}

impl Board {
    /// Sets what hears broadcasts, telling it at once whether they are heard.
    pub fn set_sink(&self, sink: Arc<dyn BroadcastSink>) {
        sink.hearing(self.heard.load(std::sync::atomic::Ordering::Acquire));
        *lock(&self.sink) = Some(sink);
    }

    fn sink(&self) -> Option<Arc<dyn BroadcastSink>> {
        lock(&self.sink).clone()
    }

    /// A payload heard.
    pub fn heard(&self, payload: &str) {
        if let Some(s) = self.sink() {
            s.heard(payload);
        }
    }

    /// Whether broadcasts are heard now.
    pub fn hearing(&self, heard: bool) {
        self.heard
            .store(heard, std::sync::atomic::Ordering::Release);
        if let Some(s) = self.sink() {
            s.hearing(heard);
        }
    }
}
