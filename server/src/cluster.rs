//! What a server does when it shares its journal with other servers (PostgreSQL): it runs each
//! turn under a lease it renews while the turn runs, and it sweeps: it ends `interrupted` the
//! turns whose lease ran out (their server was killed or cut off) and starts the sessions whose
//! next turn waits with no turn running (their server is gone, or it lost a race). With
//! `--agent worker` the same sweep ends the turns of workers that went silent.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::journal::Journal;
use crate::runner::Runner;

/// How often a server sweeps: the delay before a vanished server's queued turns start elsewhere
/// (its running turns end once their lease runs out, at most a lease later).
pub const SWEEP_EVERY: Duration = Duration::from_millis(500);

/// How often a server with workers sweeps: how late past its expiry a silent worker's turn may
/// end (a request on it ends it at once), and, on a shared journal, how late a claim waiting here
/// hears of a turn queued through another server.
pub const WORKER_SWEEP_EVERY: Duration = Duration::from_millis(250);

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
pub async fn keep_lease(
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

/// Sweeps every `every` until `stopping`: ends `interrupted` the turns whose lease ran out (a
/// worker or a server stopped renewing it), then, when that freed a session or the journal is
/// shared (turns are queued and sessions freed through other servers too), kicks the sessions
/// whose next turn waits with no turn running: this server starts it, or, with workers, waiting
/// claims look again.
pub async fn sweep(
    journal: Journal,
    runner: Arc<Runner>,
    every: Duration,
    stopping: CancellationToken,
) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stopping.cancelled() => return,
        }
        let expired = match journal.expire_leases(journal.clock().now_ms()).await {
            Ok(0) => 0,
            Ok(n) => {
                tracing::warn!(
                    turns = n,
                    "turn leases expired (their worker or server stopped renewing them); the turns ended interrupted"
                );
                n
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot end turns with expired leases");
                0
            }
        };
        if expired == 0 && !journal.is_shared() {
            continue;
        }
        match journal.sessions_waiting().await {
            Ok(sessions) => {
                for session in sessions {
                    runner.kick(&session);
                }
            }
            Err(e) => tracing::warn!(error = %e, "cannot look for waiting sessions"),
        }
    }
}
