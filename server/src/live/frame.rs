//! One committed event as the hub shares it: encoded once as an SSE frame, kept in the replay
//! tail and handed to every subscriber's inbox.

use std::time::Instant;

use bytes::Bytes;

/// One committed event, encoded once as an SSE frame and shared by every subscriber.
#[derive(Debug)]
pub struct Frame {
    pub seq: i64,
    pub session_id: String,
    pub bytes: Bytes,
    /// When it was made, right after its commit: a stream taking it observes the time since (the
    /// hub's walk and the stream's wake-up, `turnstream_delivery_seconds`).
    pub at: Instant,
}

impl Frame {
    /// A frame of `session_id` at `seq` from its encoded SSE text. The text's buffer becomes the
    /// frame's bytes as it is when it has no spare capacity (`sse::encode` makes it so); else it
    /// is shrunk first, since spare capacity would stay allocated for the frame's whole life.
    pub fn new(seq: i64, session_id: &str, sse: String) -> Frame {
        let mut bytes = sse.into_bytes();
        bytes.shrink_to_fit();
        Frame {
            seq,
            session_id: session_id.to_string(),
            bytes: bytes.into(),
            at: Instant::now(),
        }
    }
}
