//! The HTTP edge of errors: one stable JSON shape, `{"error": {"code", "message"}}`.

use axum::extract::rejection::{JsonRejection, PathRejection};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use turnstream_protocol::{ErrorBody, ErrorDetail};

use crate::error::{Error, StorageFault};

/// `Retry-After` (seconds) of an answer refused because journal writes fail: long enough not
/// to hammer a struggling disk, short enough that a client notices recovery promptly.
pub const STORAGE_RETRY_AFTER_SECS: u64 = 5;

#[derive(Debug)]
pub struct AppError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
    /// Seconds sent as `Retry-After`, for refusals that a later retry can overcome.
    pub retry_after: Option<u64>,
}

impl AppError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        AppError {
            status,
            code,
            message: message.into(),
            retry_after: None,
        }
    }

    /// Adds a `Retry-After` of `secs` seconds.
    pub fn retry_after(mut self, secs: u64) -> Self {
        self.retry_after = Some(secs);
        self
    }

    /// A write the storage refused: `507 storage_full` when the disk is full, otherwise
    /// `503 storage_unavailable`; both say when to retry.
    pub fn storage(fault: StorageFault, message: impl Into<String>) -> Self {
        let (status, code) = match fault {
            StorageFault::Full => (StatusCode::INSUFFICIENT_STORAGE, "storage_full"),
            StorageFault::Unavailable => (StatusCode::SERVICE_UNAVAILABLE, "storage_unavailable"),
        };
        Self::new(status, code, message).retry_after(STORAGE_RETRY_AFTER_SECS)
    }

    pub fn bad_request(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, code, message)
    }
}

impl IntoResponse for AppError {
    fn into_response(self) -> Response {
        // A refusal with a Retry-After is expected while it lasts and logged where it arises.
        if self.status.is_server_error() && self.retry_after.is_none() {
            tracing::error!(code = self.code, message = %self.message, "server error");
        }
        let body = ErrorBody {
            error: ErrorDetail {
                code: self.code.to_string(),
                message: self.message,
            },
        };
        let mut res = (self.status, Json(body)).into_response();
        if let Some(secs) = self.retry_after {
            res.headers_mut()
                .insert(axum::http::header::RETRY_AFTER, secs.into());
        }
        res
    }
}

impl From<Error> for AppError {
    fn from(e: Error) -> Self {
        match e {
            Error::NotFound { what } => AppError::new(
                StatusCode::NOT_FOUND,
                match what {
                    "turn" => "turn_not_found",
                    "message" => "message_not_found",
                    _ => "not_found",
                },
                e.to_string(),
            ),
            Error::ClientMessageConflict(_) => AppError::new(
                StatusCode::CONFLICT,
                "client_message_id_conflict",
                e.to_string(),
            ),
            Error::ClientRequestConflict(_) => AppError::new(
                StatusCode::CONFLICT,
                "client_request_id_conflict",
                e.to_string(),
            ),
            Error::TooManyActiveTurns(_) => AppError::new(
                StatusCode::TOO_MANY_REQUESTS,
                "too_many_active_turns",
                e.to_string(),
            ),
            Error::InvalidRequest(_) => {
                AppError::new(StatusCode::BAD_REQUEST, "invalid_request", e.to_string())
            }
            Error::CallRefused(refusal) => {
                let status = match refusal {
                    crate::journal::CallRefusal::Invalid(_) => StatusCode::UNPROCESSABLE_ENTITY,
                    _ => StatusCode::CONFLICT,
                };
                AppError::new(status, refusal.code(), refusal.to_string())
            }
            Error::SessionBusy => {
                AppError::new(StatusCode::CONFLICT, "session_busy", e.to_string())
            }
            Error::ShuttingDown | Error::Closed => AppError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "shutting_down",
                e.to_string(),
            ),
            other => match other.storage_fault() {
                Some(fault) => AppError::storage(fault, other.to_string()),
                None => AppError::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "internal",
                    other.to_string(),
                ),
            },
        }
    }
}

impl From<JsonRejection> for AppError {
    fn from(r: JsonRejection) -> Self {
        let (status, code) = match &r {
            JsonRejection::JsonDataError(_) => (StatusCode::UNPROCESSABLE_ENTITY, "invalid_body"),
            JsonRejection::JsonSyntaxError(_) => (StatusCode::BAD_REQUEST, "invalid_json"),
            JsonRejection::MissingJsonContentType(_) => {
                (StatusCode::UNSUPPORTED_MEDIA_TYPE, "unsupported_media_type")
            }
            JsonRejection::BytesRejection(_) if r.status() == StatusCode::PAYLOAD_TOO_LARGE => {
                (StatusCode::PAYLOAD_TOO_LARGE, "body_too_large")
            }
            _ => (r.status(), "invalid_body"),
        };
        AppError::new(status, code, r.body_text())
    }
}

impl From<PathRejection> for AppError {
    fn from(r: PathRejection) -> Self {
        AppError::bad_request("invalid_path", r.body_text())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(e: Error) -> Response {
        AppError::from(e).into_response()
    }

    fn retry_after(res: &Response) -> Option<&str> {
        res.headers()
            .get(axum::http::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
    }

    #[test]
    fn storage_faults_answer_507_or_503_with_retry_after() {
        let full = answer(Error::storage(
            StorageFault::Full,
            "database or disk is full",
        ));
        assert_eq!(full.status(), StatusCode::INSUFFICIENT_STORAGE);
        assert_eq!(retry_after(&full), Some("5"));

        let locked = Error::Sqlite(rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_BUSY),
            Some("database is locked".into()),
        ));
        let locked = answer(locked);
        assert_eq!(locked.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(retry_after(&locked), Some("5"));

        let corrupt = answer(Error::Corrupt("bad row".into()));
        assert_eq!(corrupt.status(), StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(retry_after(&corrupt), None);
    }

    #[test]
    fn storage_codes_are_stable() {
        assert_eq!(
            AppError::from(Error::storage(StorageFault::Full, "x")).code,
            "storage_full"
        );
        assert_eq!(
            AppError::from(Error::storage(StorageFault::Unavailable, "x")).code,
            "storage_unavailable"
        );
    }
}
