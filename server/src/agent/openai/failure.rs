//! What went wrong upstream, said twice: briefly for the user's bubble (never an HTML page), and
//! with the raw detail for the operator's log; plus whether trying again could help, and when.

use std::time::{Duration, SystemTime};

use futures::StreamExt;
use serde_json::Value;

/// How much of a non-2xx body is quoted in the turn's error when it carries no JSON message.
const ERROR_TEXT_BYTES: usize = 300;
/// How much of an upstream body the operator's log line quotes.
const LOG_TEXT_BYTES: usize = 500;
/// How much of a non-2xx body is read at all: an error page is not worth buffering unbounded.
const ERROR_BODY_LIMIT: usize = 64 * 1024;
/// How long to wait for a non-2xx body; the status alone is enough to fail the turn.
const ERROR_BODY_TIMEOUT: Duration = Duration::from_secs(10);

/// One failed attempt at a turn.
#[derive(Debug)]
pub(super) struct Failure {
    /// Shown to the user as the turn's error.
    pub user: String,
    /// Logged for the operator (may quote the raw upstream body).
    pub log: String,
    /// The HTTP status, when the upstream answered with one.
    pub status: Option<u16>,
    /// Whether another attempt could succeed (rate limits, server errors, lost connections).
    pub retryable: bool,
    /// The upstream's own `Retry-After`.
    pub retry_after: Option<Duration>,
}

impl Failure {
    /// A failure that retrying would not help, with the same text for user and log.
    pub fn fatal(message: impl Into<String>) -> Failure {
        let message = message.into();
        Failure {
            log: message.clone(),
            user: message,
            status: None,
            retryable: false,
            retry_after: None,
        }
    }

    /// A failure that another attempt may not meet (a connection refused or reset).
    pub fn transient(message: impl Into<String>) -> Failure {
        Failure {
            retryable: true,
            ..Failure::fatal(message)
        }
    }
}

/// The failure of a non-2xx answer, quoting the upstream's own explanation when it gave one in
/// JSON or plain text, and only naming the status when it sent an HTML page.
pub(super) async fn status_failure(response: reqwest::Response) -> Failure {
    let status = response.status();
    let retry_after = response
        .headers()
        .get(reqwest::header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(parse_retry_after);
    let content_type = response
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_ascii_lowercase();
    let mut body = Vec::new();
    let mut stream = response.bytes_stream();
    let read = async {
        while let Some(Ok(chunk)) = stream.next().await {
            body.extend_from_slice(&chunk);
            if body.len() >= ERROR_BODY_LIMIT {
                break;
            }
        }
    };
    // A body that never arrives must not hold the turn; whatever came is used.
    let _ = tokio::time::timeout(ERROR_BODY_TIMEOUT, read).await;
    let text = String::from_utf8_lossy(&body);
    let text = text.trim();
    // An error page from the server or a proxy in front of it (`<!DOCTYPE html>`, `<html>`).
    let html = content_type.contains("html") || text.starts_with('<');
    let detail = serde_json::from_str::<Value>(text)
        .ok()
        .and_then(|v| error_message(&v))
        .or_else(|| (!html && !text.is_empty()).then(|| truncate(text, ERROR_TEXT_BYTES)))
        .unwrap_or_else(|| explain(status.as_u16()).to_string());
    let code = status.as_u16();
    let name = match status.canonical_reason() {
        Some(reason) => format!("{code} {reason}"),
        None => code.to_string(),
    };
    Failure {
        user: format!("upstream {name}: {detail}"),
        log: format!("upstream {name}: {}", one_line(text, LOG_TEXT_BYTES)),
        status: Some(code),
        retryable: code == 408 || code == 429 || status.is_server_error(),
        retry_after,
    }
}

/// What a status means, for a body that does not say (empty, or an HTML page).
fn explain(status: u16) -> &'static str {
    match status {
        401 | 403 => "the model server refused the API key",
        404 => "no such endpoint or model at the configured base URL",
        408 => "the model server timed out",
        429 => "too many requests; the model server asked to slow down",
        500..=599 => "the model server, or a proxy in front of it, failed",
        _ => "the model server refused the request",
    }
}

/// `Retry-After`: delay-seconds or an HTTP date.
pub(super) fn parse_retry_after(value: &str) -> Option<Duration> {
    let value = value.trim();
    if let Ok(secs) = value.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    if let Ok(secs) = value.parse::<f64>() {
        return (secs.is_finite() && secs >= 0.0).then(|| Duration::from_secs_f64(secs));
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(
        at.duration_since(SystemTime::now())
            .unwrap_or(Duration::ZERO),
    )
}

/// The delay before retry number `attempt` (0-based): exponential from `base`, capped at `cap`,
/// with full jitter in its upper half so clients that failed together do not retry together.
pub(super) fn backoff(attempt: u32, base: Duration, cap: Duration) -> Duration {
    crate::backoff::jittered(crate::backoff::nth(base, cap, attempt))
}

/// The message of an error body or error chunk: OpenAI's `{"error": {"message"}}`, the
/// `{"error": "..."}` and `{"message": "..."}` shapes of compatible servers (vLLM's
/// `{"object": "error", "message"}`, llama.cpp's bare error object).
pub(super) fn error_message(body: &Value) -> Option<String> {
    let error = body.get("error");
    error
        .and_then(|e| e.get("message"))
        .or(error.filter(|e| e.is_string()))
        .or(body.get("message"))
        .or(body.get("detail").filter(|d| d.is_string()))
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|m| !m.is_empty())
        .map(|m| truncate(m, ERROR_TEXT_BYTES))
}

/// An error with its sources: reqwest's own text names the URL but not why (refused, reset).
pub(super) fn causes(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// `text` on one line (for a log), cut to `max` bytes.
fn one_line(text: &str, max: usize) -> String {
    let flat: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if flat.is_empty() {
        "(empty body)".into()
    } else {
        truncate(&flat, max)
    }
}

/// `text` cut to at most `max` bytes on a character boundary, an ellipsis marking the cut.
pub(super) fn truncate(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let mut end = max.saturating_sub('…'.len_utf8());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_seconds_and_dates() {
        assert_eq!(parse_retry_after("7"), Some(Duration::from_secs(7)));
        assert_eq!(parse_retry_after(" 0 "), Some(Duration::ZERO));
        assert_eq!(parse_retry_after("1.5"), Some(Duration::from_millis(1500)));
        let later = SystemTime::now() + Duration::from_secs(120);
        let date = httpdate::fmt_http_date(later);
        let parsed = parse_retry_after(&date).unwrap_or_default();
        assert!(parsed > Duration::from_secs(100) && parsed <= Duration::from_secs(120));
        assert_eq!(
            parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT"),
            Some(Duration::ZERO)
        );
        assert_eq!(parse_retry_after("soon"), None);
    }

    #[test]
    fn backoff_grows_is_capped_and_jittered() {
        let base = Duration::from_millis(100);
        let cap = Duration::from_millis(1000);
        for attempt in 0..20 {
            let ceiling = (base * 2u32.pow(attempt.min(10))).min(cap);
            let d = backoff(attempt, base, cap);
            assert!(d <= ceiling && d >= ceiling / 2, "{attempt}: {d:?}");
        }
    }
}
