//! The one backoff: waits that double from a first wait up to a longest one, so that retrying
//! against something failing neither spins nor leaves it unused for long once it is back.

use std::time::Duration;

use rand::Rng;

/// Waits that double from `first` up to `max`, one after each failed attempt.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Backoff {
    first: Duration,
    max: Duration,
    /// Failed attempts so far.
    attempt: u32,
}

impl Backoff {
    pub(crate) const fn new(first: Duration, max: Duration) -> Backoff {
        Backoff {
            first,
            max,
            attempt: 0,
        }
    }

    /// The wait before the next attempt.
    pub(crate) fn wait(&self) -> Duration {
        nth(self.first, self.max, self.attempt)
    }

    /// The wait before the next attempt; the one after it is twice as long (up to the longest).
    pub(crate) fn next(&mut self) -> Duration {
        let wait = self.wait();
        self.grow();
        wait
    }

    /// Doubles the next wait (up to the longest).
    pub(crate) fn grow(&mut self) {
        self.attempt = self.attempt.saturating_add(1);
    }

    /// Back to the first wait, after a success.
    pub(crate) fn reset(&mut self) {
        self.attempt = 0;
    }
}

/// The wait before retry number `attempt` (0-based): `first` doubled `attempt` times, at most
/// `max`.
pub(crate) fn nth(first: Duration, max: Duration, attempt: u32) -> Duration {
    first.saturating_mul(1u32 << attempt.min(16)).min(max)
}

/// `wait` with full jitter in its upper half, so clients that failed together do not retry
/// together.
pub(crate) fn jittered(wait: Duration) -> Duration {
    let ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX);
    if ms < 2 {
        return wait;
    }
    Duration::from_millis(rand::rng().random_range(ms / 2..=ms))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_double_up_to_the_longest_and_reset() {
        let ms = Duration::from_millis;
        let mut b = Backoff::new(ms(100), ms(1000));
        let waits: Vec<_> = (0..6).map(|_| b.next()).collect();
        assert_eq!(
            waits,
            vec![ms(100), ms(200), ms(400), ms(800), ms(1000), ms(1000)]
        );
        b.reset();
        assert_eq!(b.wait(), ms(100));
        b.grow();
        assert_eq!(b.wait(), ms(200));
        assert_eq!(nth(ms(100), ms(1000), u32::MAX), ms(1000));
    }

    #[test]
    fn jitter_stays_in_the_upper_half() {
        for _ in 0..100 {
            let d = jittered(Duration::from_millis(1000));
            assert!((500..=1000).contains(&d.as_millis()), "{d:?}");
        }
        assert_eq!(jittered(Duration::from_millis(1)), Duration::from_millis(1));
    }
}
