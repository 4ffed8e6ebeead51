//! A stream's presence queue: the presence frames of its sessions waiting to be written, apart
//! from its inbox of journal frames (presence has no id, no order by seq and no replay, and
//! leaves the journal's hot path as it was).
//!
//! Bounded: when a stream does not take its frames and the queue is full, the queue is emptied
//! and flagged stale, and the stream is then sent a fresh `presence` roster of each of its
//! sessions instead (see [`super::Presence::take`]), so its client stays exact.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::task::Waker;

use bytes::Bytes;

use crate::mutex::lock;

/// Presence frames a stream may have waiting before it is sent fresh rosters instead.
pub const PRESENCE_QUEUE: usize = 64;

#[derive(Debug, Default)]
struct Queue {
    frames: VecDeque<Bytes>,
    stale: bool,
    waker: Option<Waker>,
}

/// One stream's presence queue (shared by the roster's sessions it watches).
#[derive(Debug, Default)]
pub struct Watch {
    queue: Mutex<Queue>,
}

/// What a stream takes from its queue.
pub enum Taken {
    Nothing,
    Frames(Bytes),
    /// Frames were dropped: send fresh rosters.
    Stale,
}

impl Watch {
    /// Queues a frame (or flags the queue stale when full) and wakes the stream.
    pub fn push(&self, frame: Bytes) {
        let waker = {
            let mut q = lock(&self.queue);
            if q.stale {
                return;
            }
            if q.frames.len() >= PRESENCE_QUEUE {
                q.frames = VecDeque::new();
                q.stale = true;
            } else {
                q.frames.push_back(frame);
            }
            q.waker.take()
        };
        if let Some(w) = waker {
            w.wake();
        }
    }

    /// Takes what is queued, or registers `waker` for the next push.
    pub fn take(&self, waker: &Waker) -> Taken {
        let mut q = lock(&self.queue);
        if q.stale {
            return Taken::Stale;
        }
        if q.frames.is_empty() {
            if !q.waker.as_ref().is_some_and(|w| w.will_wake(waker)) {
                q.waker = Some(waker.clone());
            }
            return Taken::Nothing;
        }
        let frames = std::mem::take(&mut q.frames);
        drop(q);
        if frames.len() == 1 {
            return Taken::Frames(frames.into_iter().next().unwrap_or_default());
        }
        let mut buf = bytes::BytesMut::with_capacity(frames.iter().map(Bytes::len).sum());
        for f in frames {
            buf.extend_from_slice(&f);
        }
        Taken::Frames(buf.freeze())
    }

    /// Clears the queue and its stale flag (the roster's lock is held: the fresh rosters the
    /// caller builds are exact as of the frames pushed after).
    pub fn reset(&self) {
        let mut q = lock(&self.queue);
        q.frames = VecDeque::new();
        q.stale = false;
    }
}
