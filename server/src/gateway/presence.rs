//! `GET` and `POST /api/sessions/{session}/presence` (contract v1.3): a session's roster, and
//! a member's state. Joining and watching are the stream's (`presence=1|watch&client=` on
//! `GET /api/stream`, see [`super::stream`]).

use axum::extract::State;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde::Deserialize;
use serde_json::{Map, Value};

use super::error::AppError;
use super::extract::{Body, SessionId};
use super::{access, AppState};
use crate::auth::{Principal, Scope};
use crate::presence::{UpdateError, MAX_STATE_BYTES};

/// Longest a presence `client` id is.
pub const MAX_CLIENT_ID_CHARS: usize = 64;

/// Whether `client` is a valid presence client id: 1 to [`MAX_CLIENT_ID_CHARS`] characters of
/// `[A-Za-z0-9_.:-]`.
pub fn is_valid_client(client: &str) -> bool {
    (1..=MAX_CLIENT_ID_CHARS).contains(&client.len())
        && client
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b':' | b'-'))
}

/// `400 invalid_client_id`.
pub fn invalid_client() -> AppError {
    AppError::bad_request(
        "invalid_client_id",
        format!("client is 1 to {MAX_CLIENT_ID_CHARS} characters of [A-Za-z0-9_.:-]"),
    )
}

/// `GET /api/sessions/{session}/presence`: the roster now (read access).
pub(crate) async fn roster(
    State(state): State<AppState>,
    Extension(principal): Extension<Principal>,
    SessionId(session): SessionId,
) -> Result<Response, AppError> {
    access::require(&principal, Scope::Read, &session)?;
    let mut res = Json(state.presence.view(&session)).into_response();
    res.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    Ok(res)
}

#[derive(Deserialize)]
pub(crate) struct Update {
    client: String,
    state: Value,
}

/// `POST /api/sessions/{session}/presence {"client", "state"}`: replaces the state of the
/// caller's member (read access; under auth the member is the token's `sub` with that client).
pub(crate) async fn update(
    State(state): State<AppState>,
    Extension(principal): Extension<Principal>,
    SessionId(session): SessionId,
    body: Body<Update>,
) -> Result<Response, AppError> {
    access::require(&principal, Scope::Read, &session)?;
    let body = body.read()?;
    if !is_valid_client(&body.client) {
        return Err(invalid_client());
    }
    let Value::Object(map) = body.state else {
        return Err(AppError::bad_request(
            "invalid_presence_state",
            "state is a JSON object",
        ));
    };
    let size = serde_json::to_string(&map).map_or(usize::MAX, |s| s.len());
    if size > MAX_STATE_BYTES {
        return Err(AppError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "presence_state_too_large",
            format!("a presence state is at most {MAX_STATE_BYTES} bytes of JSON"),
        ));
    }
    let map: Map<String, Value> = map;
    match state
        .presence
        .set_state(&session, &body.client, principal.author(), map)
    {
        Ok(()) => Ok(StatusCode::NO_CONTENT.into_response()),
        Err(UpdateError::NotPresent) => Err(AppError::new(
            StatusCode::NOT_FOUND,
            "not_present",
            "this client has no open stream in the session (open one with presence=1&client=)",
        )),
        Err(UpdateError::RateLimited(wait)) => {
            let ms = wait.as_millis() as u64;
            let secs = ms.div_ceil(1000).max(1);
            let mut res = AppError::new(
                StatusCode::TOO_MANY_REQUESTS,
                "rate_limited",
                format!(
                    "at most {} presence updates a second per member; retry in {ms} ms",
                    crate::presence::roster::UPDATES_PER_SECOND
                ),
            )
            .into_response();
            res.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(secs));
            Ok(res)
        }
    }
}
