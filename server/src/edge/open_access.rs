//! The start-up warning for a server that anyone on the network can use: listening on an address
//! other than loopback with no authentication lets every client that reaches it read and write
//! every session.

use std::net::SocketAddr;

/// The warning to log at start-up, if `listen` is reachable from other machines and no
/// authentication is configured (`auth_enabled`: [`crate::auth::Authenticator::enabled`]).
pub fn warning(listen: SocketAddr, auth_enabled: bool) -> Option<String> {
    if auth_enabled || listen.ip().is_loopback() {
        return None;
    }
    Some(format!(
        "listening on {listen} with no authentication configured: anyone who can reach this \
         address can read and write every session"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_non_loopback_without_auth_warns() {
        let at = |s: &str| s.parse::<SocketAddr>().expect("address");
        assert!(warning(at("127.0.0.1:8080"), false).is_none());
        assert!(warning(at("[::1]:8080"), false).is_none());
        assert!(warning(at("0.0.0.0:8080"), false).is_some());
        assert!(warning(at("[::]:8080"), false).is_some());
        assert!(warning(at("192.0.2.7:8080"), false).is_some());
        assert!(warning(at("0.0.0.0:8080"), true).is_none());
    }
}
