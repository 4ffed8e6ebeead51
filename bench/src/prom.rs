//! Reads the server's `/metrics` (Prometheus text format): counters, and quantiles estimated
//! from histogram buckets.

use std::collections::HashMap;

/// One scrape: every sample line, keyed by its name with labels (`name{le="0.001"}`).
#[derive(Debug, Default, Clone)]
pub struct Scrape {
    pub values: HashMap<String, f64>,
}

impl Scrape {
    pub fn parse(text: &str) -> Scrape {
        let mut values = HashMap::new();
        for line in text.lines() {
            if line.starts_with('#') || line.trim().is_empty() {
                continue;
            }
            if let Some((key, value)) = line.rsplit_once(' ') {
                if let Ok(v) = value.trim().parse::<f64>() {
                    values.insert(key.trim().to_string(), v);
                }
            }
        }
        Scrape { values }
    }

    pub fn get(&self, key: &str) -> f64 {
        self.values.get(key).copied().unwrap_or(0.0)
    }

    /// A histogram's cumulative buckets as (upper bound, count), `+Inf` last.
    pub fn buckets(&self, name: &str) -> Vec<(f64, f64)> {
        let prefix = format!("{name}_bucket{{le=\"");
        let mut out: Vec<(f64, f64)> = self
            .values
            .iter()
            .filter_map(|(k, v)| {
                let le = k.strip_prefix(&prefix)?.strip_suffix("\"}")?;
                let bound = if le == "+Inf" {
                    f64::INFINITY
                } else {
                    le.parse().ok()?
                };
                Some((bound, *v))
            })
            .collect();
        out.sort_by(|a, b| a.0.total_cmp(&b.0));
        out
    }
}

/// Histogram of what was observed between two scrapes.
pub fn bucket_delta(before: &Scrape, after: &Scrape, name: &str) -> Vec<(f64, f64)> {
    let b = before.buckets(name);
    after
        .buckets(name)
        .into_iter()
        .map(|(le, n)| {
            let old = b
                .iter()
                .find(|(l, _)| *l == le)
                .map(|(_, v)| *v)
                .unwrap_or(0.0);
            (le, n - old)
        })
        .collect()
}

/// The `q` quantile (0..1) of cumulative buckets, interpolated linearly inside its bucket as
/// Prometheus' `histogram_quantile` does. Past the last finite bound it answers that bound: the
/// true value is only known to be larger.
pub fn quantile(buckets: &[(f64, f64)], q: f64) -> Option<f64> {
    let total = buckets.last()?.1;
    if total <= 0.0 {
        return None;
    }
    let rank = q * total;
    let mut prev_bound = 0.0;
    let mut prev_count = 0.0;
    for &(bound, count) in buckets {
        if count >= rank {
            if bound.is_infinite() {
                return Some(prev_bound);
            }
            let in_bucket = count - prev_count;
            let frac = if in_bucket > 0.0 {
                (rank - prev_count) / in_bucket
            } else {
                1.0
            };
            return Some(prev_bound + (bound - prev_bound) * frac);
        }
        prev_bound = bound;
        prev_count = count;
    }
    Some(prev_bound)
}

/// Mean of a histogram between two scrapes, from its `_sum` and `_count`.
pub fn mean_delta(before: &Scrape, after: &Scrape, name: &str) -> Option<f64> {
    let n = after.get(&format!("{name}_count")) - before.get(&format!("{name}_count"));
    let s = after.get(&format!("{name}_sum")) - before.get(&format!("{name}_sum"));
    (n > 0.0).then(|| s / n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_estimates() {
        let text = "# HELP x y\nx_total 5\nh_bucket{le=\"0.001\"} 50\nh_bucket{le=\"0.002\"} 100\nh_bucket{le=\"+Inf\"} 100\nh_sum 0.1\nh_count 100\n";
        let s = Scrape::parse(text);
        assert_eq!(s.get("x_total"), 5.0);
        let b = s.buckets("h");
        assert_eq!(b.len(), 3);
        let p50 = quantile(&b, 0.5).unwrap_or(0.0);
        assert!((p50 - 0.001).abs() < 1e-9);
        let p75 = quantile(&b, 0.75).unwrap_or(0.0);
        assert!((p75 - 0.0015).abs() < 1e-9);
        assert_eq!(mean_delta(&Scrape::default(), &s, "h"), Some(0.001));
    }
}
