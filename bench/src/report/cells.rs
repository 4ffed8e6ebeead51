//! The cells several figures' rows share: a ratio, a measurement that failed, a p99.

use crate::stats::Samples;

/// `ours / theirs`, or a dash when either side has no figure.
pub(super) fn ratio(ours: f64, theirs: f64) -> String {
    if theirs > 0.0 && ours.is_finite() {
        format!("{:.2}×", ours / theirs)
    } else {
        "—".into()
    }
}

/// A cell for a measurement that could not be made.
pub(super) fn failed(e: anyhow::Error) -> String {
    format!("failed: {e:#}")
}

/// The p99 in µs; NaN without samples.
pub(super) fn p99(s: &mut Samples) -> f64 {
    s.pct(99.0).map(|v| v as f64).unwrap_or(f64::NAN)
}
