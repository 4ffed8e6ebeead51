//! Connection-level protections in front of the router: what keeps slow or abusive clients from
//! holding the descriptors, memory and time every other client needs.
//!
//! - [`body_deadline`]: a request body must arrive within a deadline (`408 request_timeout`).
//! - [`event_stream`]: a connection opened for an event stream is served without hyper's
//!   buffers, so an idle stream costs little more than its socket.
//! - [`peer_limit`]: connections open at once from one IP address (`429 too_many_connections`).
//! - [`parse_errors`]: answers hyper makes before routing (400, 414, 431) carry the JSON error
//!   shape.
//! - [`nofile`]: the process's open-file limit, raised to what the system allows.
//! - [`open_access`]: the warning when anyone on the network can reach an unauthenticated server.

pub mod body_deadline;
pub mod event_stream;
pub mod nofile;
pub mod open_access;
pub mod parse_errors;
pub mod peer_limit;

use std::time::Duration;

/// The connection limits the accept loop enforces.
#[derive(Debug, Clone, Copy)]
pub struct ConnLimits {
    /// Time a client has to send a request's headers, also between requests on a kept-alive
    /// connection: a connection that sends nothing must not hold a descriptor for long.
    pub header_timeout: Duration,
    /// Time a client has to send a request's whole body once its headers arrived: a body that
    /// stalls would otherwise hold its connection (and a descriptor) forever.
    pub body_timeout: Duration,
    /// Connections open at once from one IP address; 0 is no cap.
    pub max_connections_per_ip: usize,
}

impl Default for ConnLimits {
    fn default() -> Self {
        ConnLimits {
            header_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(30),
            max_connections_per_ip: 1000,
        }
    }
}
