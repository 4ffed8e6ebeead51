//! Percentiles, clocks and number formatting shared by every figure.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Microseconds since the Unix epoch. Every process on this machine reads the same clock, so a
/// timestamp stamped by one process (the bench, a peer's harness) and read by another is
/// comparable; that is what lets latency be "receive time minus send time".
pub fn unix_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0)
}

/// Latency samples in microseconds.
#[derive(Debug, Default, Clone)]
pub struct Samples {
    us: Vec<u64>,
}

impl Samples {
    pub fn push(&mut self, us: u64) {
        self.us.push(us);
    }

    pub fn extend(&mut self, other: Samples) {
        self.us.extend(other.us);
    }

    pub fn len(&self) -> usize {
        self.us.len()
    }

    /// The `p`-th percentile (0..=100), nearest-rank; `None` without samples.
    pub fn pct(&mut self, p: f64) -> Option<u64> {
        if self.us.is_empty() {
            return None;
        }
        self.us.sort_unstable();
        let rank = ((p / 100.0) * self.us.len() as f64).ceil() as usize;
        let i = rank.clamp(1, self.us.len()) - 1;
        Some(self.us[i])
    }

    /// "p50 / p99 ms", or a dash when there is nothing to show.
    pub fn p50_p99(&mut self) -> String {
        match (self.pct(50.0), self.pct(99.0)) {
            (Some(a), Some(b)) => format!("{} / {} ms", ms(a), ms(b)),
            _ => "no samples".into(),
        }
    }
}

/// Microseconds as milliseconds with a precision that suits the size.
pub fn ms(us: u64) -> String {
    let v = us as f64 / 1000.0;
    if v < 10.0 {
        format!("{v:.2}")
    } else if v < 100.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.0}")
    }
}

pub fn dur_ms(d: Duration) -> String {
    ms(d.as_micros() as u64)
}

/// A rate with thousands separators, e.g. `123,456`.
pub fn thousands(v: f64) -> String {
    let n = v.round() as i64;
    let s = n.abs().to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    if n < 0 {
        format!("-{out}")
    } else {
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_and_formatting() {
        let mut s = Samples::default();
        for v in 1..=100 {
            s.push(v * 1000);
        }
        assert_eq!(s.pct(50.0), Some(50_000));
        assert_eq!(s.pct(99.0), Some(99_000));
        assert_eq!(s.pct(100.0), Some(100_000));
        assert_eq!(thousands(1_234_567.4), "1,234,567");
        assert_eq!(thousands(999.0), "999");
        assert_eq!(ms(1_234), "1.23");
        assert_eq!(Samples::default().p50_p99(), "no samples");
    }
}
