//! The time of day the server stamps and compares (event times, lease expiry, retention): the
//! system's clock, or, for tests, a clock moved by hand, so that lease expiry can be tested
//! under tokio's paused time without waiting for it.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// A source of Unix milliseconds; cheap to clone (clones share the time of a manual clock).
#[derive(Debug, Clone, Default)]
pub struct Clock {
    manual: Option<Arc<AtomicI64>>,
}

impl Clock {
    /// The system's clock.
    pub fn system() -> Clock {
        Clock::default()
    }

    /// A clock that shows `start_ms` until moved with [`Clock::advance`].
    pub fn manual(start_ms: i64) -> Clock {
        Clock {
            manual: Some(Arc::new(AtomicI64::new(start_ms))),
        }
    }

    /// Unix milliseconds now.
    pub fn now_ms(&self) -> i64 {
        match &self.manual {
            Some(ms) => ms.load(Ordering::Acquire),
            None => system_ms(),
        }
    }

    /// Moves a manual clock forward by `by`; the system's clock moves by itself.
    pub fn advance(&self, by: Duration) {
        if let Some(ms) = &self.manual {
            let by = i64::try_from(by.as_millis()).unwrap_or(i64::MAX);
            ms.fetch_add(by, Ordering::AcqRel);
        }
    }
}

/// Unix milliseconds by the system's clock (0 before 1970).
pub fn system_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_manual_clock_moves_only_by_hand_and_clones_share_it() {
        let c = Clock::manual(1_000);
        let twin = c.clone();
        assert_eq!(c.now_ms(), 1_000);
        twin.advance(Duration::from_millis(250));
        assert_eq!(c.now_ms(), 1_250);
        assert!(Clock::system().now_ms() > 1_600_000_000_000);
    }
}
