//! The gateway's extractors: a path's id and a JSON body, read the same way by every route, their
//! rejections turned into the one JSON error shape ([`AppError`], axum's custom-extractor
//! pattern), so no handler unwraps a `Rejection` by hand.
//!
//! A path id is checked before the handler runs: every route reads its path first. A body is read
//! before the handler runs too, but its refusal ([`Body::read`]) is returned where the handler
//! reads it, after the route's access checks, so a request that may not write is told `403`
//! whatever body it sent.

use std::convert::Infallible;

use axum::extract::rejection::JsonRejection;
use axum::extract::{FromRequest, FromRequestParts, OptionalFromRequest, Path, Request};
use axum::http::request::Parts;
use axum::Json;
use turnstream_protocol::limits::is_valid_id;

use super::error::AppError;

/// `id` when it is a valid id; else `400 code`, naming `what` ids' rule.
fn checked_id(id: String, code: &'static str, what: &str) -> Result<String, AppError> {
    if is_valid_id(&id) {
        Ok(id)
    } else {
        Err(AppError::bad_request(
            code,
            format!("{what} ids are 1 to 128 characters of [A-Za-z0-9_.:-], not only dots"),
        ))
    }
}

/// One extractor per kind of id a path carries: `400 invalid_path` when the path does not parse,
/// `400 invalid_<kind>_id` when the id breaks the id rule.
macro_rules! path_id {
    ($(#[$doc:meta])* $name:ident, $code:literal, $what:literal) => {
        $(#[$doc])*
        #[derive(Debug, Clone)]
        pub struct $name(pub String);

        impl<S: Send + Sync> FromRequestParts<S> for $name {
            type Rejection = AppError;

            async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, AppError> {
                let Path(id) = Path::<String>::from_request_parts(parts, state).await?;
                checked_id(id, $code, $what).map($name)
            }
        }
    };
}

path_id!(
    /// The `{session}` of a route's path.
    SessionId,
    "invalid_session_id",
    "session"
);
path_id!(
    /// The `{turn}` of a route's path.
    TurnId,
    "invalid_turn_id",
    "turn"
);
path_id!(
    /// The `{message}` of a route's path.
    MessageId,
    "invalid_message_id",
    "message"
);

/// A JSON body of type `T`, or why it is refused: `400 invalid_json`, `422 invalid_body`,
/// `415 unsupported_media_type`, `413 body_too_large` (see [`AppError`]'s `From<JsonRejection>`).
pub struct Body<T>(Result<T, AppError>);

impl<T> Body<T> {
    /// The body, or its refusal: read it where the route's checks allow it to be read.
    pub fn read(self) -> Result<T, AppError> {
        self.0
    }
}

impl<S, T> FromRequest<S> for Body<T>
where
    Json<T>: FromRequest<S, Rejection = JsonRejection>,
    S: Send + Sync,
{
    type Rejection = Infallible;

    async fn from_request(req: Request, state: &S) -> Result<Self, Infallible> {
        let read = Json::<T>::from_request(req, state).await;
        Ok(Body(read.map(|Json(body)| body).map_err(AppError::from)))
    }
}

/// A JSON body that may be left out (a request without `Content-Type` has none); one that is
/// sent is read, and refused, as any [`Body`].
pub struct OptionalBody<T>(Result<Option<T>, AppError>);

impl<T> OptionalBody<T> {
    /// The body (`None` when none was sent), or its refusal.
    pub fn read(self) -> Result<Option<T>, AppError> {
        self.0
    }
}

impl<S, T> FromRequest<S> for OptionalBody<T>
where
    Json<T>: OptionalFromRequest<S, Rejection = JsonRejection>,
    S: Send + Sync,
{
    type Rejection = Infallible;

    async fn from_request(req: Request, state: &S) -> Result<Self, Infallible> {
        let read = <Json<T> as OptionalFromRequest<S>>::from_request(req, state).await;
        Ok(OptionalBody(
            read.map(|body| body.map(|Json(body)| body))
                .map_err(AppError::from),
        ))
    }
}

#[cfg(test)]
mod tests {
    use axum::body::to_bytes;
    use axum::http::StatusCode;
    use axum::response::{IntoResponse, Response};
    use axum::routing::post;
    use axum::Router;
    use serde::Deserialize;
    use tower::ServiceExt;

    use super::*;

    #[derive(Deserialize)]
    struct Named {
        name: String,
    }

    async fn named(session: SessionId, body: Body<Named>) -> Result<String, AppError> {
        let body = body.read()?;
        Ok(format!("{} {}", session.0, body.name))
    }

    async fn maybe(turn: TurnId, body: OptionalBody<Named>) -> Result<String, AppError> {
        let name = body.read()?.map(|b| b.name);
        Ok(format!("{} {name:?}", turn.0))
    }

    fn app() -> Router {
        Router::new()
            .route("/s/{session}", post(named))
            .route("/t/{turn}", post(maybe))
    }

    async fn send(uri: &str, content_type: Option<&str>, body: &str) -> (StatusCode, String) {
        let mut req = Request::post(uri);
        if let Some(ct) = content_type {
            req = req.header("content-type", ct);
        }
        let res: Response = match req.body(axum::body::Body::from(body.to_string())) {
            Ok(req) => match app().oneshot(req).await {
                Ok(res) => res,
                Err(never) => match never {},
            },
            Err(e) => AppError::bad_request("test", e.to_string()).into_response(),
        };
        let status = res.status();
        let bytes = to_bytes(res.into_body(), 1 << 20).await.unwrap_or_default();
        (status, String::from_utf8_lossy(&bytes).into_owned())
    }

    fn code(body: &str) -> String {
        serde_json::from_str::<serde_json::Value>(body)
            .ok()
            .and_then(|v| v["error"]["code"].as_str().map(str::to_string))
            .unwrap_or_default()
    }

    #[tokio::test]
    async fn ids_and_bodies_are_read_or_refused_in_the_one_error_shape() {
        let json = Some("application/json");
        let (status, body) = send("/s/s1", json, r#"{"name":"a"}"#).await;
        assert_eq!((status, body.as_str()), (StatusCode::OK, "s1 a"));

        let (status, body) = send("/s/..", json, r#"{"name":"a"}"#).await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
        assert_eq!(code(&body), "invalid_session_id");

        let (status, body) = send("/s/s1", json, "{").await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
        assert_eq!(code(&body), "invalid_json");

        let (status, body) = send("/s/s1", json, r#"{"name":1}"#).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
        assert_eq!(code(&body), "invalid_body");

        let (status, body) = send("/s/s1", Some("text/plain"), r#"{"name":"a"}"#).await;
        assert_eq!(status, StatusCode::UNSUPPORTED_MEDIA_TYPE);
        assert_eq!(code(&body), "unsupported_media_type");
    }

    #[tokio::test]
    async fn an_optional_body_left_out_is_none_and_one_sent_is_read() {
        let (status, body) = send("/t/t1", None, "").await;
        assert_eq!((status, body.as_str()), (StatusCode::OK, "t1 None"));

        let (status, body) = send("/t/t1", Some("application/json"), r#"{"name":"b"}"#).await;
        assert_eq!((status, body.as_str()), (StatusCode::OK, "t1 Some(\"b\")"));

        let (status, body) = send("/t/t1", Some("application/json"), "[").await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
        assert_eq!(code(&body), "invalid_json");

        let (status, body) = send("/t/.", None, "").await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
        assert_eq!(code(&body), "invalid_turn_id");
    }
}
