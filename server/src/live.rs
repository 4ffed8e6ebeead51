//! The live feed: the journal's [`FanOut`] that encodes each committed event once (see
//! [`crate::frames`]) and hands the frames to the [`Hub`], which delivers them to subscribers and
//! keeps the recent ones as the replay tail.

use std::sync::Arc;

use crate::frames;
use crate::hub::{Frame, Hub};
use crate::journal::{Committed, FanOut};

pub struct LiveFeed {
    hub: Arc<Hub>,
}

impl LiveFeed {
    pub fn new(hub: Arc<Hub>) -> Arc<LiveFeed> {
        Arc::new(LiveFeed { hub })
    }
}

impl FanOut for LiveFeed {
    fn committed(&self, epoch: &str, events: Vec<Committed>) {
        let frames: Vec<Arc<Frame>> = events
            .iter()
            .map(|e| {
                Arc::new(Frame::new(
                    e.seq,
                    &e.session_id,
                    frames::event_frame(epoch, &e.row()),
                ))
            })
            .collect();
        self.hub.publish(&frames);
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
