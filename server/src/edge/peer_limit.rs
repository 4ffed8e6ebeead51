//! Connections open at once per peer IP address. One address that opens connection after
//! connection (or holds thousands idle) must not take every descriptor the server has; past the
//! cap its new connections get `429 too_many_connections` and are closed, while everyone else's
//! are accepted as usual.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::http::StatusCode;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::mutex::lock;

/// Counts open connections per IP address.
#[derive(Debug)]
pub struct PeerLimit {
    /// Most connections from one address at once; 0 is no cap (nothing is counted).
    max: usize,
    /// Open connections per address; an address leaves the map with its last connection.
    open: Mutex<HashMap<IpAddr, usize>>,
}

/// One admitted connection; dropping it (when the connection ends) frees its place.
#[derive(Debug)]
pub struct PeerSlot {
    limit: Arc<PeerLimit>,
    ip: IpAddr,
}

impl PeerLimit {
    pub fn new(max: usize) -> Arc<PeerLimit> {
        Arc::new(PeerLimit {
            max,
            open: Mutex::new(HashMap::new()),
        })
    }

    /// Admits a connection from `ip`, or `Err(())` when that address is at the cap. With no cap
    /// the slot is `None` and nothing is counted.
    #[allow(clippy::result_unit_err)]
    pub fn admit(self: &Arc<Self>, ip: IpAddr) -> Result<Option<PeerSlot>, ()> {
        if self.max == 0 {
            return Ok(None);
        }
        // An IPv4 client of a dual-stack socket appears as `::ffff:a.b.c.d`: count it as itself.
        let ip = ip.to_canonical();
        let mut open = lock(&self.open);
        let n = open.entry(ip).or_insert(0);
        if *n >= self.max {
            return Err(());
        }
        *n += 1;
        Ok(Some(PeerSlot {
            limit: self.clone(),
            ip,
        }))
    }

    /// Connections open now from `ip` (for tests and diagnostics).
    pub fn open_from(&self, ip: IpAddr) -> usize {
        lock(&self.open)
            .get(&ip.to_canonical())
            .copied()
            .unwrap_or(0)
    }
}

impl Drop for PeerSlot {
    fn drop(&mut self) {
        let mut open = lock(&self.limit.open);
        if let Some(n) = open.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                open.remove(&self.ip);
            }
        }
    }
}

/// How long a refused connection may take to send its request head before the refusal is
/// written anyway; it bounds the descriptor a refused connection holds.
const REFUSE_WAIT: Duration = Duration::from_secs(1);

/// Answers a connection over the cap with a JSON 429 and closes it. The request head is read
/// first (briefly), so the client, which usually sends it right after connecting, sees the
/// answer rather than a reset.
pub async fn refuse(mut tcp: TcpStream, max: usize) {
    let mut buf = [0u8; 4096];
    let mut seen = 0usize;
    let _ = tokio::time::timeout(REFUSE_WAIT, async {
        while seen < buf.len() {
            match tcp.read(&mut buf[seen..]).await {
                Ok(0) | Err(_) => break,
                Ok(n) => seen += n,
            }
            if buf[..seen].windows(4).any(|w| w == b"\r\n\r\n") {
                break;
            }
        }
    })
    .await;
    let response = super::parse_errors::json_response(
        StatusCode::TOO_MANY_REQUESTS,
        "too_many_connections",
        &format!("this address has {max} connections open, the most allowed; close one and retry"),
    );
    let _ = tokio::time::timeout(REFUSE_WAIT, async {
        tcp.write_all(&response).await?;
        tcp.shutdown().await
    })
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_per_address_and_frees_on_drop() {
        let limit = PeerLimit::new(2);
        let a: IpAddr = "192.0.2.1".parse().expect("ip");
        let b: IpAddr = "192.0.2.2".parse().expect("ip");
        let s1 = limit.admit(a).expect("first");
        let _s2 = limit.admit(a).expect("second");
        assert!(limit.admit(a).is_err(), "third from one address");
        assert!(limit.admit(b).is_ok(), "another address is not affected");
        drop(s1);
        assert_eq!(limit.open_from(a), 1);
        assert!(limit.admit(a).is_ok(), "a freed place is taken again");
        let mapped: IpAddr = "::ffff:192.0.2.1".parse().expect("ip");
        assert_eq!(
            limit.open_from(mapped),
            1,
            "an IPv4-mapped address is the same peer"
        );
    }

    #[test]
    fn zero_is_no_cap() {
        let limit = PeerLimit::new(0);
        let a: IpAddr = "192.0.2.1".parse().expect("ip");
        let slots: Vec<_> = (0..10_000).map(|_| limit.admit(a)).collect();
        assert!(slots.iter().all(|s| matches!(s, Ok(None))));
        assert_eq!(limit.open_from(a), 0);
    }
}
