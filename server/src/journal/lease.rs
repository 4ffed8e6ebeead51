//! Leases on running turns: who may write a turn's output, and until when. A lease is a random
//! token (fencing: every write names it, so a worker or a server that lost its lease can never
//! write again), an owner and an expiry. The journal stores it with the turn, so a restart keeps
//! leases meaningful.

use std::time::Duration;

/// Random bytes in a lease token (128 bits).
const TOKEN_BYTES: usize = 16;

/// A turn's lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    /// Names the claim: only requests that carry it may touch the turn.
    pub token: String,
    /// The worker that claimed the turn, for operators.
    pub owner: String,
    /// Unix milliseconds after which the lease is lost.
    pub expires_at: i64,
}

/// Why a request may not act on a leased turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaseError {
    /// The request names another claim's token (or a token that never was).
    Mismatch,
    /// The lease ran out before this request.
    Expired,
}

impl Lease {
    /// A new lease for `owner`, valid for `ttl` from `now_ms`.
    pub fn grant(owner: &str, ttl: Duration, now_ms: i64) -> Lease {
        Lease {
            token: new_token(),
            owner: owner.to_string(),
            expires_at: expiry(ttl, now_ms),
        }
    }

    /// Whether a request naming `token` at `now_ms` holds this lease. Tokens are compared in
    /// constant time: they are credentials of a sort.
    pub fn check(&self, token: &str, now_ms: i64) -> Result<(), LeaseError> {
        use subtle::ConstantTimeEq;
        if !bool::from(self.token.as_bytes().ct_eq(token.as_bytes())) {
            return Err(LeaseError::Mismatch);
        }
        if self.is_expired(now_ms) {
            return Err(LeaseError::Expired);
        }
        Ok(())
    }

    pub fn is_expired(&self, now_ms: i64) -> bool {
        now_ms >= self.expires_at
    }

    /// Extends the lease to `ttl` from `now_ms` (never shortens it).
    pub fn renew(&mut self, ttl: Duration, now_ms: i64) {
        self.expires_at = self.expires_at.max(expiry(ttl, now_ms));
    }
}

fn expiry(ttl: Duration, now_ms: i64) -> i64 {
    now_ms.saturating_add(i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX))
}

fn new_token() -> String {
    use rand::Rng;
    let bytes: [u8; TOKEN_BYTES] = rand::rng().random();
    let mut s = String::with_capacity(TOKEN_BYTES * 2 + 4);
    s.push_str("lse_");
    for b in bytes {
        s.push_str(&format!("{b:02x}"));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_long_and_distinct() {
        let a = Lease::grant("w", Duration::from_secs(30), 0);
        let b = Lease::grant("w", Duration::from_secs(30), 0);
        assert_ne!(a.token, b.token);
        assert_eq!(a.token.len(), 4 + 32);
        assert_eq!(a.expires_at, 30_000);
    }

    #[test]
    fn check_fences_and_expires() {
        let mut l = Lease::grant("w", Duration::from_secs(1), 1000);
        assert_eq!(l.check(&l.token.clone(), 1999), Ok(()));
        assert_eq!(l.check("lse_other", 1500), Err(LeaseError::Mismatch));
        assert_eq!(l.check(&l.token.clone(), 2000), Err(LeaseError::Expired));
        l.renew(Duration::from_secs(1), 1900);
        assert_eq!(l.expires_at, 2900);
        l.renew(Duration::from_millis(10), 1900);
        assert_eq!(l.expires_at, 2900, "renewing never shortens a lease");
    }
}
