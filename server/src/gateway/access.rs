//! Access control at the HTTP edge (contract v1.1): reads the credential off a request (the
//! `Authorization: Bearer` header, or the `access_token` query parameter that EventSource needs),
//! authenticates it once per request, and answers the refusals: `401 unauthorized`,
//! `401 invalid_token`, `401 token_expired` (each with `WWW-Authenticate: Bearer`) and
//! `403 forbidden`. The credential itself is never logged.

use std::net::{IpAddr, SocketAddr};
use std::time::SystemTime;

use axum::extract::{ConnectInfo, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::error::AppError;
use super::AppState;
use crate::auth::{AuthError, Principal, Scope};

/// Query parameter that carries a token where headers cannot (EventSource).
pub const ACCESS_TOKEN_PARAM: &str = "access_token";

/// The credential of a request: the bearer header first, else the query parameter.
fn credential(headers: &HeaderMap, query: Option<&str>) -> Option<String> {
    if let Some(v) = headers.get(header::AUTHORIZATION) {
        let v = v.to_str().ok()?;
        let (scheme, rest) = v.split_once(' ')?;
        return scheme
            .eq_ignore_ascii_case("bearer")
            .then(|| rest.trim().to_string());
    }
    form_urlencoded::parse(query?.as_bytes())
        .find(|(k, _)| k == ACCESS_TOKEN_PARAM)
        .map(|(_, v)| v.into_owned())
}

/// Middleware on `/api`: authenticates the request and leaves its [`Principal`] in the request's
/// extensions for the handlers, which check it against the session they touch.
pub(crate) async fn authenticate(
    State(state): State<AppState>,
    mut req: Request,
    next: Next,
) -> Response {
    let principal = if state.auth.enabled() {
        let cred = credential(req.headers(), req.uri().query());
        match state.auth.authenticate(cred.as_deref(), SystemTime::now()) {
            Ok(p) => p,
            Err(e) => return refusal(e),
        }
    } else {
        Principal::Open
    };
    req.extensions_mut().insert(principal);
    next.run(req).await
}

/// The 401 answer for a refused credential.
fn refusal(e: AuthError) -> Response {
    let (code, challenge) = match &e {
        AuthError::Missing => ("unauthorized", "Bearer"),
        AuthError::Invalid(_) => ("invalid_token", "Bearer error=\"invalid_token\""),
        AuthError::Expired => (
            "token_expired",
            "Bearer error=\"invalid_token\", error_description=\"the token has expired\"",
        ),
    };
    let mut res = AppError::new(StatusCode::UNAUTHORIZED, code, e.to_string()).into_response();
    res.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        HeaderValue::from_static(challenge),
    );
    res
}

/// Refuses unless `principal` may do `scope` on `session`.
pub(crate) fn require(principal: &Principal, scope: Scope, session: &str) -> Result<(), AppError> {
    if principal.allows(scope, session) {
        return Ok(());
    }
    Err(AppError::new(
        StatusCode::FORBIDDEN,
        "forbidden",
        format!(
            "this token does not allow `{}` on session {session:?}",
            scope.as_str()
        ),
    ))
}

/// Who a request counts against for per-client limits: a token's user, or the peer's address
/// without auth. `None` for service keys (the app's backend is trusted) and unknown peers.
pub(crate) fn client_key(
    principal: &Principal,
    peer: Option<&ConnectInfo<SocketAddr>>,
) -> Option<String> {
    match principal {
        Principal::User(g) => Some(format!("user:{}", g.sub)),
        Principal::Open => peer.map(|ConnectInfo(addr)| format!("ip:{}", canonical_ip(addr.ip()))),
        Principal::Service => None,
    }
}

/// An IPv4 peer reached over an IPv6 socket counts as its IPv4 address.
fn canonical_ip(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credential_from_header_or_query() {
        let mut h = HeaderMap::new();
        assert_eq!(
            credential(&h, Some("access_token=abc&x=1")).as_deref(),
            Some("abc")
        );
        assert_eq!(credential(&h, Some("x=1")), None);
        h.insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("bearer  t1 "),
        );
        assert_eq!(
            credential(&h, Some("access_token=abc")).as_deref(),
            Some("t1")
        );
        h.insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("Basic dTpw"),
        );
        assert_eq!(credential(&h, Some("access_token=abc")), None);
    }
}
