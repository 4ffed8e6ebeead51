//! The live path: what a commit becomes on its way to every open stream.
//!
//! What flows through it, in order:
//! 1. The journal's writer commits a batch and hands it to [`LiveFeed`] (the journal's
//!    [`FanOut`]), on the writer's side of the commit: nothing here is seen before it is durable.
//! 2. [`LiveFeed`] encodes each committed event once as an SSE [`Frame`] ([`encode`]: SSE framing,
//!    in one place, for live delivery, replay and the stream's own events alike).
//! 3. The [`Hub`] ([`hub`]) walks the frames' sessions, pushes each frame into the [`inbox`] of
//!    every stream subscribed to that session, and keeps the recent frames as the replay tail.
//! 4. A stream's body (the gateway's pump) takes its inbox's frames; a full inbox is flagged
//!    lagged, and that stream goes back to the journal from the last id it sent.
//!
//! The journal knows nothing of this folder; the gateway reads it (subscriptions, the tail, the
//! framing of what it sends itself). An embedder's listeners ([`crate::listeners`]) are handed
//! the same commits, after the live feed.

pub mod encode;
pub mod frame;
pub mod hub;
pub mod inbox;

use std::sync::Arc;

use crate::journal::{Committed, FanOut};

pub use frame::Frame;
pub use hub::Hub;

/// The journal's fan-out on this server: encodes each commit's events and hands them to the hub.
pub struct LiveFeed {
    hub: Arc<Hub>,
}

impl LiveFeed {
    pub fn new(hub: Arc<Hub>) -> Arc<LiveFeed> {
        Arc::new(LiveFeed { hub })
    }

    /// Encodes and publishes `events` (of journal `epoch`, committed, in id order), borrowing
    /// them: a fan-out that hands the same commit on to others too calls this.
    pub fn publish(&self, epoch: &str, events: &[Committed]) {
        let frames: Vec<Arc<Frame>> = events
            .iter()
            .map(|e| {
                Arc::new(Frame::new(
                    e.seq,
                    &e.session_id,
                    encode::event_frame(epoch, &e.row()),
                ))
            })
            .collect();
        self.hub.publish(&frames);
    }
}

impl FanOut for LiveFeed {
    fn committed(&self, epoch: &str, events: Vec<Committed>) {
        self.publish(epoch, &events);
    }

    fn floor_raised(&self, session_id: &str, floor: i64) {
        self.hub.forget_through(session_id, floor);
    }

    fn unsure_through(&self, seq: i64) {
        self.hub.forget_all_through(seq);
    }

    fn retention_heard(&self, heard: bool) {
        self.hub.suspend_tail(!heard);
    }
}
