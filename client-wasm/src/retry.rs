//! Retry policy of the browser ring, kept pure so it is tested natively: how long to wait before
//! the next attempt, and what an HTTP answer to `POST /messages` means for a queued message.

/// First wait after a failure, in milliseconds.
pub const BASE_DELAY_MS: u32 = 500;
/// Longest wait between attempts, in milliseconds.
pub const MAX_DELAY_MS: u32 = 30_000;

/// Exponential backoff with a cap; `jitter` in `[0, 1)` spreads tabs and clients that failed
/// together so they do not come back together.
pub fn backoff_ms(attempt: u32, jitter: f64) -> u32 {
    let exp = BASE_DELAY_MS.saturating_mul(1u32.checked_shl(attempt.min(16)).unwrap_or(u32::MAX));
    let capped = exp.min(MAX_DELAY_MS);
    let jitter = jitter.clamp(0.0, 1.0);
    // Up to +50%, still capped: the cap is a promise to the user about how stale "offline" gets.
    let with_jitter = f64::from(capped) * (1.0 + jitter / 2.0);
    (with_jitter as u32).min(MAX_DELAY_MS)
}

/// What to do with a queued message after the server answered its POST with `status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PostOutcome {
    /// 200/202: accepted (200 is an idempotent retry of one the server already has).
    Accepted,
    /// 409: the server holds another message under this client_message_id. History tells which.
    Conflict,
    /// Network failure, 429 or 5xx: keep it `sending` and try again later.
    Retry,
    /// Any other 4xx: the server will never take it.
    Rejected,
}

pub fn classify_post(status: u16) -> PostOutcome {
    match status {
        200..=299 => PostOutcome::Accepted,
        409 => PostOutcome::Conflict,
        429 => PostOutcome::Retry,
        400..=499 => PostOutcome::Rejected,
        _ => PostOutcome::Retry,
    }
}

#[cfg(all(test, not(target_arch = "wasm32")))]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_then_caps() {
        let waits: Vec<u32> = (0..12).map(|a| backoff_ms(a, 0.0)).collect();
        assert_eq!(&waits[..4], &[500, 1000, 2000, 4000]);
        assert!(waits.windows(2).all(|w| w[0] <= w[1]));
        assert_eq!(waits[11], MAX_DELAY_MS);
        assert_eq!(backoff_ms(u32::MAX, 0.99), MAX_DELAY_MS);
        assert_eq!(backoff_ms(1, 0.5), 1250);
    }

    #[test]
    fn post_outcomes() {
        assert_eq!(classify_post(202), PostOutcome::Accepted);
        assert_eq!(classify_post(200), PostOutcome::Accepted);
        assert_eq!(classify_post(409), PostOutcome::Conflict);
        assert_eq!(classify_post(429), PostOutcome::Retry);
        assert_eq!(classify_post(400), PostOutcome::Rejected);
        assert_eq!(classify_post(413), PostOutcome::Rejected);
        assert_eq!(classify_post(500), PostOutcome::Retry);
        assert_eq!(classify_post(503), PostOutcome::Retry);
    }
}
