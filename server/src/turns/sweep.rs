//! The lease sweep: it ends `interrupted` the turns whose lease ran out (their worker went
//! silent, or their server was killed or cut off) and wakes the sessions whose next turn waits
//! with no turn running (their server is gone, or it lost a race).

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::journal::Journal;

/// How often a server sweeps on a shared journal: the delay before a vanished server's queued
/// turns start elsewhere (its running turns end once their lease runs out, at most a lease later).
pub const SWEEP_EVERY: Duration = Duration::from_millis(500);

/// How often a server with workers sweeps: how late past its expiry a silent worker's turn may
/// end (a request on it ends it at once), and, on a shared journal, how late a claim waiting here
/// hears of a turn queued through another server.
pub const WORKER_SWEEP_EVERY: Duration = Duration::from_millis(250);

/// Sweeps every `every` until `stopping`: ends `interrupted` the turns whose lease ran out, then,
/// when that freed a session or `every_tick` (on a shared journal, turns are queued and sessions
/// freed through other servers too), calls `wake` with each session whose next turn waits with
/// no turn running. Time is the journal's clock.
pub async fn sweep(
    journal: Journal,
    every: Duration,
    every_tick: bool,
    wake: impl Fn(&str) + Send + 'static,
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
        if expired == 0 && !every_tick {
            continue;
        }
        match journal.sessions_waiting().await {
            Ok(sessions) => {
                for session in sessions {
                    wake(&session);
                }
            }
            Err(e) => tracing::warn!(error = %e, "cannot look for waiting sessions"),
        }
    }
}
