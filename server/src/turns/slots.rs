//! Fair turn slots: `--max-concurrent-turns` turns run at once over all sessions, and one client
//! (a token's user, or a peer address without auth) holds at most `--max-turns-per-client` of
//! them. A client over its share waits for one of its own turns to end, while other clients'
//! turns take the free slots; waiting turns take free slots in the order they asked (tokio's
//! semaphore is fair), so no session waits behind another client's long turns.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};

use crate::mutex::lock;

pub struct TurnSlots {
    /// All slots.
    permits: Arc<Semaphore>,
    /// Most slots one client may hold.
    per_client: usize,
    held: Arc<Mutex<HashMap<String, usize>>>,
    /// Woken when a client gives a slot back.
    freed: Arc<Notify>,
}

/// One running turn's slot; given back when dropped.
pub struct Slot {
    _permit: OwnedSemaphorePermit,
    client: String,
    held: Arc<Mutex<HashMap<String, usize>>>,
    freed: Arc<Notify>,
}

impl TurnSlots {
    pub fn new(total: usize, per_client: usize) -> TurnSlots {
        TurnSlots {
            permits: Arc::new(Semaphore::new(total.max(1))),
            per_client: per_client.max(1),
            held: Arc::new(Mutex::new(HashMap::new())),
            freed: Arc::new(Notify::new()),
        }
    }

    /// Waits for a slot for `client`: first its share, then one of all. `None` once closed.
    pub async fn acquire(&self, client: &str) -> Option<Slot> {
        loop {
            let freed = self.freed.notified();
            tokio::pin!(freed);
            // Registered before the check, so a slot freed in between is not missed.
            freed.as_mut().enable();
            {
                let mut held = lock(&self.held);
                let n = held.entry(client.to_string()).or_insert(0);
                if *n < self.per_client {
                    *n += 1;
                    break;
                }
            }
            freed.await;
        }
        let slot = |permit| Slot {
            _permit: permit,
            client: client.to_string(),
            held: self.held.clone(),
            freed: self.freed.clone(),
        };
        match self.permits.clone().acquire_owned().await {
            Ok(permit) => Some(slot(permit)),
            Err(_) => {
                release(&self.held, &self.freed, client);
                None
            }
        }
    }

    /// Slots `client` holds (or waits for a global slot with).
    pub fn held_by(&self, client: &str) -> usize {
        lock(&self.held).get(client).copied().unwrap_or(0)
    }
}

fn release(held: &Mutex<HashMap<String, usize>>, freed: &Notify, client: &str) {
    let mut held = lock(held);
    if let Some(n) = held.get_mut(client) {
        *n = n.saturating_sub(1);
        if *n == 0 {
            held.remove(client);
        }
    }
    drop(held);
    freed.notify_waiters();
}

impl Drop for Slot {
    fn drop(&mut self) {
        release(&self.held, &self.freed, &self.client);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn a_client_over_its_share_waits_while_others_run() {
        let slots = Arc::new(TurnSlots::new(4, 2));
        let a1 = slots.acquire("a").await;
        let a2 = slots.acquire("a").await;
        assert!(a1.is_some() && a2.is_some());
        // A third turn of `a` waits...
        let s = slots.clone();
        let mut a3 = tokio::spawn(async move { s.acquire("a").await.is_some() });
        // ...while `b` gets the free slots at once.
        let b1 = tokio::time::timeout(Duration::from_secs(5), slots.acquire("b")).await;
        assert!(matches!(b1, Ok(Some(_))));
        assert!(
            tokio::time::timeout(Duration::from_millis(50), &mut a3)
                .await
                .is_err(),
            "a third turn of one client must wait for its share"
        );
        drop(a1);
        let got = tokio::time::timeout(Duration::from_secs(5), a3).await;
        assert!(matches!(got, Ok(Ok(true))));
        // The third turn's slot was given back when its task ended; `a2` is still held.
        assert_eq!(slots.held_by("a"), 1);
        drop(a2);
        assert_eq!(slots.held_by("a"), 0);
    }
}
