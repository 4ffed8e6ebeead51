//! Turns run by worker processes (`--agent worker`): this server starts no agent; workers claim
//! queued turns over HTTP under a lease, and a claim with nothing to hand out waits here until a
//! turn may have become claimable.

use std::time::Duration;

use tokio::sync::Notify;

/// Worker mode's shared state.
#[derive(Debug)]
pub struct Dispatch {
    /// How long a lease lasts after each accepted request.
    pub lease: Duration,
    /// Told whenever a turn may have become claimable (queued, or its session freed).
    ready: Notify,
}

impl Dispatch {
    pub fn new(lease: Duration) -> Dispatch {
        Dispatch {
            lease,
            ready: Notify::new(),
        }
    }

    /// Wakes every waiting claim to look again.
    pub fn notify(&self) {
        self.ready.notify_waiters();
    }

    /// A wake-up to wait on; create (and enable) it before looking, so none is missed.
    pub fn ready(&self) -> tokio::sync::futures::Notified<'_> {
        self.ready.notified()
    }
}
