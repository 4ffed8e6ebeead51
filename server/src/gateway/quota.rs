//! Per-client quotas against abuse: how many messages a client may post per minute (a token
//! bucket: a burst of a minute's worth, refilled evenly) and how many streams it may hold open.
//! A client is a token's user, or the peer's address without auth (see `access::client_key`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

use super::error::AppError;
use crate::mutex::lock;

/// Clients remembered by the rate limiter before full buckets (clients that have not posted for
/// a minute, the same as never seen) are swept out.
const SWEEP_AT: usize = 10_000;

/// Messages per minute per client.
#[derive(Debug)]
pub struct RateLimiter {
    per_minute: u32,
    buckets: Mutex<HashMap<String, Bucket>>,
}

#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

impl RateLimiter {
    /// `per_minute == 0` allows everything.
    pub fn new(per_minute: u32) -> RateLimiter {
        RateLimiter {
            per_minute,
            buckets: Mutex::new(HashMap::new()),
        }
    }

    /// Takes one message from `client`'s allowance, or says how long until one is available.
    pub fn take(&self, client: &str, now: Instant) -> Result<(), Duration> {
        if self.per_minute == 0 {
            return Ok(());
        }
        let cap = f64::from(self.per_minute);
        let per_sec = cap / 60.0;
        let mut buckets = lock(&self.buckets);
        if buckets.len() >= SWEEP_AT && !buckets.contains_key(client) {
            buckets.retain(|_, b| {
                b.tokens + now.saturating_duration_since(b.at).as_secs_f64() * per_sec < cap
            });
        }
        let b = buckets.entry(client.to_string()).or_insert(Bucket {
            tokens: cap,
            at: now,
        });
        b.tokens =
            (b.tokens + now.saturating_duration_since(b.at).as_secs_f64() * per_sec).min(cap);
        b.at = now;
        if b.tokens >= 1.0 {
            b.tokens -= 1.0;
            Ok(())
        } else {
            Err(Duration::from_secs_f64((1.0 - b.tokens) / per_sec))
        }
    }
}

/// `429 rate_limited` with `Retry-After` (whole seconds, rounded up).
pub fn rate_limited(wait: Duration) -> Response {
    let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
    let mut res = AppError::new(
        StatusCode::TOO_MANY_REQUESTS,
        "rate_limited",
        format!("too many messages; retry in {secs} s"),
    )
    .into_response();
    res.headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from(secs.max(1)));
    res
}

/// Open streams per client.
#[derive(Debug)]
pub struct StreamQuota {
    max: usize,
    open: Arc<Mutex<HashMap<String, usize>>>,
}

/// One client's stream, counted until dropped.
#[derive(Debug)]
pub struct StreamSlot {
    client: String,
    open: Arc<Mutex<HashMap<String, usize>>>,
}

impl StreamQuota {
    /// `max == 0` allows any number.
    pub fn new(max: usize) -> StreamQuota {
        StreamQuota {
            max,
            open: Arc::new(Mutex::new(HashMap::new())),
        }
    }

    /// Counts one more stream for `client`, unless it already holds as many as allowed.
    pub fn open(&self, client: &str) -> Option<StreamSlot> {
        let mut open = lock(&self.open);
        let n = open.entry(client.to_string()).or_insert(0);
        if self.max > 0 && *n >= self.max {
            return None;
        }
        *n += 1;
        Some(StreamSlot {
            client: client.to_string(),
            open: self.open.clone(),
        })
    }
}

impl Drop for StreamSlot {
    fn drop(&mut self) {
        let mut open = lock(&self.open);
        if let Some(n) = open.get_mut(&self.client) {
            *n -= 1;
            if *n == 0 {
                open.remove(&self.client);
            }
        }
    }
}

/// `429 too_many_streams`: this client holds as many streams as it may.
pub fn too_many_client_streams(max: usize) -> AppError {
    AppError::new(
        StatusCode::TOO_MANY_REQUESTS,
        "too_many_streams",
        format!("this client already has {max} open streams, the most allowed; close one (one stream carries up to 32 sessions)"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_minutes_burst_then_an_even_refill() {
        let r = RateLimiter::new(60);
        let t0 = Instant::now();
        for _ in 0..60 {
            assert!(r.take("a", t0).is_ok());
        }
        let wait = r.take("a", t0).err().unwrap_or_default();
        assert!(
            wait > Duration::ZERO && wait <= Duration::from_secs(1),
            "{wait:?}"
        );
        // Another client is not affected.
        assert!(r.take("b", t0).is_ok());
        // One second later, one more.
        assert!(r.take("a", t0 + Duration::from_secs(1)).is_ok());
        assert!(r.take("a", t0 + Duration::from_secs(1)).is_err());
        assert!(RateLimiter::new(0).take("a", t0).is_ok());
    }

    #[test]
    fn stream_slots_count_until_dropped() {
        let q = StreamQuota::new(2);
        let a = q.open("c");
        let b = q.open("c");
        assert!(a.is_some() && b.is_some());
        assert!(q.open("c").is_none());
        assert!(q.open("d").is_some());
        drop(a);
        assert!(q.open("c").is_some());
    }
}
