//! The expiry of requests for input (v1.2): every [`EXPIRY_EVERY`], requests whose time ran out
//! are answered `{"timed_out": true}` by the server, and the sessions of the turns that continue
//! are woken. Every server of a shared journal runs it; the first answer wins, so two servers
//! expiring one request at once record it once.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::journal::Journal;

/// How often requests are checked for expiry: how late a timed-out request may be answered.
pub const EXPIRY_EVERY: Duration = Duration::from_secs(1);

/// Answers expired requests until `stop`, handing each session whose turn continues to `wake`.
pub(super) async fn expire_inputs(
    journal: Journal,
    every: Duration,
    wake: impl Fn(&str) + Send + 'static,
    stop: CancellationToken,
) {
    loop {
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = stop.cancelled() => return,
        }
        match journal.expire_inputs(journal.clock().now_ms()).await {
            Ok(sessions) => {
                for session in sessions {
                    wake(&session);
                }
            }
            // The requests stay due; the next tick tries again.
            Err(e) => tracing::warn!(error = %e, "cannot answer expired requests for input yet"),
        }
    }
}
