//! Cross-site request refusal (contract v1.1): a state-changing request (`POST`, `DELETE`) that
//! carries an `Origin` header naming neither this server nor an origin allowed by `--cors-origin`
//! is refused with `403 forbidden_origin`, with or without auth. A web page can send a
//! `text/plain` or bodiless POST to any server without a CORS preflight; this is what keeps one
//! from cancelling turns or posting messages. Requests without `Origin` (servers, curl) pass.

use axum::extract::{Request, State};
use axum::http::{header, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::error::AppError;
use super::AppState;

/// Which origins may send state-changing requests besides the server's own.
#[derive(Debug, Default)]
pub struct OriginPolicy {
    any: bool,
    allowed: Vec<String>,
}

impl OriginPolicy {
    /// From `--cors-origin` values (`*` allows any).
    pub fn new(cors_origins: &[String]) -> OriginPolicy {
        OriginPolicy {
            any: cors_origins.iter().any(|o| o == "*"),
            allowed: cors_origins
                .iter()
                .map(|o| o.trim_end_matches('/').to_ascii_lowercase())
                .collect(),
        }
    }

    /// Whether a request from `origin` to the server reached as `host` may change state.
    pub fn allows(&self, origin: &str, host: Option<&str>) -> bool {
        if self.any {
            return true;
        }
        let origin = origin.trim_end_matches('/').to_ascii_lowercase();
        if self.allowed.contains(&origin) {
            return true;
        }
        // Same origin: the page was served by this server, under the host it asked for. The
        // scheme is not compared: behind a TLS proxy the page is https and this server is not.
        let authority = origin
            .strip_prefix("http://")
            .or_else(|| origin.strip_prefix("https://"));
        matches!((authority, host), (Some(a), Some(h)) if a.eq_ignore_ascii_case(h))
    }
}

/// Middleware on `/api`.
pub(crate) async fn check_origin(
    State(state): State<AppState>,
    req: Request,
    next: Next,
) -> Response {
    let changes_state = !matches!(*req.method(), Method::GET | Method::HEAD | Method::OPTIONS);
    if changes_state {
        if let Some(origin) = req.headers().get(header::ORIGIN) {
            let host = req
                .headers()
                .get(header::HOST)
                .and_then(|h| h.to_str().ok());
            let ok = origin.to_str().is_ok_and(|o| state.origins.allows(o, host));
            if !ok {
                return AppError::new(
                    StatusCode::FORBIDDEN,
                    "forbidden_origin",
                    "cross-site request refused: this origin is not allowed (see --cors-origin)",
                )
                .into_response();
            }
        }
    }
    next.run(req).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_origin_and_allowed_origins_pass() {
        let p = OriginPolicy::new(&["https://app.example".into()]);
        assert!(p.allows("https://app.example", Some("api.example")));
        assert!(p.allows("https://APP.example/", Some("api.example")));
        assert!(p.allows("http://127.0.0.1:8080", Some("127.0.0.1:8080")));
        assert!(!p.allows("https://evil.example", Some("127.0.0.1:8080")));
        assert!(!p.allows("null", Some("127.0.0.1:8080")));
        assert!(!p.allows("http://127.0.0.1:8081", Some("127.0.0.1:8080")));
        assert!(OriginPolicy::new(&["*".into()]).allows("null", None));
    }
}
