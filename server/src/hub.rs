//! Live fan-out of committed events to stream subscribers, per session, in commit order.
//!
//! Each subscriber has a bounded queue. A subscriber that cannot keep up is never skipped silently:
//! when its queue is full the frame is dropped *and* the subscriber is flagged lagged, so it goes
//! back to the journal from the last id it sent before sending anything else.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use tokio::sync::mpsc;

use crate::lock;

/// Frames a subscriber may have queued before it is flagged lagged.
pub const SUBSCRIBER_QUEUE: usize = 1024;

/// One committed event, encoded once as an SSE frame and shared by every subscriber.
#[derive(Debug)]
pub struct Frame {
    pub seq: i64,
    pub session_id: String,
    pub bytes: Bytes,
}

#[derive(Debug)]
struct Slot {
    id: u64,
    tx: mpsc::Sender<Arc<Frame>>,
    lagged: Arc<AtomicBool>,
}

#[derive(Debug, Default)]
struct Sessions {
    slots: HashMap<String, Vec<Arc<Slot>>>,
    /// Set by [`Hub::close`]: no subscriber is attached any more.
    closed: bool,
}

#[derive(Debug, Default)]
pub struct Hub {
    sessions: Mutex<Sessions>,
    next_id: AtomicU64,
    closed: AtomicBool,
}

impl Hub {
    pub fn new() -> Arc<Hub> {
        Arc::new(Hub::default())
    }

    /// Attaches a subscriber to the live feed of `sessions`. Attach first, then read the journal:
    /// whatever commits in between arrives here and is deduplicated by id.
    pub fn subscribe(self: &Arc<Self>, sessions: &[String]) -> Subscription {
        let (tx, rx) = mpsc::channel(SUBSCRIBER_QUEUE);
        let lagged = Arc::new(AtomicBool::new(false));
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let mut map = lock(&self.sessions);
        if !map.closed {
            let slot = Arc::new(Slot {
                id,
                tx,
                lagged: lagged.clone(),
            });
            for s in sessions {
                map.slots.entry(s.clone()).or_default().push(slot.clone());
            }
        }
        Subscription {
            hub: self.clone(),
            id,
            lagged,
            sessions: sessions.to_vec(),
            rx,
        }
    }

    /// Delivers committed frames, in order. Called by the journal writer after each commit.
    pub fn publish(&self, frames: &[Arc<Frame>]) {
        let map = lock(&self.sessions);
        for frame in frames {
            let Some(slots) = map.slots.get(&frame.session_id) else {
                continue;
            };
            for slot in slots {
                if let Err(mpsc::error::TrySendError::Full(_)) = slot.tx.try_send(frame.clone()) {
                    slot.lagged.store(true, Ordering::Release);
                }
            }
        }
    }

    /// Detaches every subscriber (on shutdown): each receives what is already queued for it,
    /// then the end of its feed. Later subscriptions end at once.
    pub fn close(&self) {
        let mut map = lock(&self.sessions);
        map.closed = true;
        map.slots.clear();
        self.closed.store(true, Ordering::Release);
    }

    /// Number of attached subscriptions (a subscription to several sessions counts once each).
    pub fn subscriber_slots(&self) -> usize {
        lock(&self.sessions).slots.values().map(Vec::len).sum()
    }
}

/// A live feed; detaches itself when dropped.
#[derive(Debug)]
pub struct Subscription {
    hub: Arc<Hub>,
    id: u64,
    lagged: Arc<AtomicBool>,
    sessions: Vec<String>,
    rx: mpsc::Receiver<Arc<Frame>>,
}

impl Subscription {
    /// The next live frame; `None` once the hub is closed and what was queued has been taken.
    pub async fn recv(&mut self) -> Option<Arc<Frame>> {
        self.rx.recv().await
    }

    /// A frame already queued, without waiting.
    pub fn try_recv(&mut self) -> Option<Arc<Frame>> {
        self.rx.try_recv().ok()
    }

    /// Whether frames were dropped since the last call; clears the flag. Call it before sending
    /// each live frame: if it says true, re-read the journal from the last id sent.
    pub fn take_lagged(&self) -> bool {
        self.lagged.swap(false, Ordering::AcqRel)
    }

    /// Whether the hub was closed (the server is shutting down).
    pub fn is_closed(&self) -> bool {
        self.hub.closed.load(Ordering::Acquire)
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        let mut map = lock(&self.hub.sessions);
        for s in &self.sessions {
            if let Some(slots) = map.slots.get_mut(s) {
                slots.retain(|slot| slot.id != self.id);
                if slots.is_empty() {
                    map.slots.remove(s);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(seq: i64, session: &str) -> Arc<Frame> {
        Arc::new(Frame {
            seq,
            session_id: session.into(),
            bytes: Bytes::new(),
        })
    }

    #[tokio::test]
    async fn delivers_only_subscribed_sessions_in_order() {
        let hub = Hub::new();
        let mut a = hub.subscribe(&["a".into(), "c".into()]);
        hub.publish(&[frame(1, "a"), frame(2, "b"), frame(3, "c")]);
        assert_eq!(a.recv().await.map(|f| f.seq), Some(1));
        assert_eq!(a.recv().await.map(|f| f.seq), Some(3));
        assert!(!a.take_lagged());
    }

    #[tokio::test]
    async fn overflow_flags_lag_instead_of_skipping_silently() {
        let hub = Hub::new();
        let sub = hub.subscribe(&["a".into()]);
        let frames: Vec<_> = (0..SUBSCRIBER_QUEUE as i64 + 5)
            .map(|i| frame(i, "a"))
            .collect();
        hub.publish(&frames);
        assert!(sub.take_lagged());
        assert!(!sub.take_lagged());
    }

    #[tokio::test]
    async fn close_ends_feeds_after_what_was_queued() {
        let hub = Hub::new();
        let mut a = hub.subscribe(&["a".into()]);
        hub.publish(&[frame(1, "a"), frame(2, "a")]);
        hub.close();
        assert!(a.is_closed());
        assert_eq!(a.recv().await.map(|f| f.seq), Some(1));
        assert_eq!(a.recv().await.map(|f| f.seq), Some(2));
        assert!(a.recv().await.is_none());
        let mut late = hub.subscribe(&["a".into()]);
        hub.publish(&[frame(3, "a")]);
        assert!(late.recv().await.is_none());
        assert_eq!(hub.subscriber_slots(), 0);
    }

    #[tokio::test]
    async fn drop_detaches() {
        let hub = Hub::new();
        let sub = hub.subscribe(&["a".into(), "b".into()]);
        assert_eq!(hub.subscriber_slots(), 2);
        drop(sub);
        assert_eq!(hub.subscriber_slots(), 0);
    }
}
