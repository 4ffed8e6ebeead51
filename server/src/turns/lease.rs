//! This server's leases on the turns it runs on a shared journal: who it is to the leases it
//! holds, and the renewal that keeps a running turn's lease alive (or stops the turn once it is
//! lost). The lease itself, as the journal stores and checks it, is [`crate::journal::Lease`].

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::journal::Journal;

/// This server, as the leases it holds name it.
#[derive(Debug, Clone)]
pub struct Node {
    pub id: String,
    /// How long a lease lasts unless renewed.
    pub lease: Duration,
}

impl Node {
    pub fn new(lease: Duration) -> Node {
        Node {
            id: format!("node_{}", crate::ids::random_chars(10)),
            lease,
        }
    }

    /// How often a running turn's lease is renewed: three times a lease, at least every second.
    pub fn renew_every(&self) -> Duration {
        (self.lease / 3).clamp(Duration::from_millis(100), Duration::from_secs(1))
    }
}

/// Renews a running turn's lease until `done`; cancels `lost` once it is lost (another server
/// ended the turn, or the lease expired while the database could not be reached).
pub(super) async fn keep_lease(
    journal: Journal,
    node: Node,
    turn_id: String,
    token: String,
    lost: CancellationToken,
    done: CancellationToken,
) {
    let mut tick = tokio::time::interval(node.renew_every());
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = done.cancelled() => return,
        }
        match journal.renew_turn_lease(&turn_id, &token, node.lease).await {
            Ok(true) => {}
            Ok(false) => {
                tracing::warn!(turn = %turn_id, "lost the turn's lease; stopping it");
                lost.cancel();
                return;
            }
            // The database may be back before the lease runs out.
            Err(e) => tracing::warn!(turn = %turn_id, error = %e, "cannot renew the turn's lease"),
        }
    }
}
