//! Limits of contract v1. The server enforces them; clients may check early.

/// Largest accepted user message content, in bytes of UTF-8; since v1.2 the `data:` URLs of its
/// attachments count against it too.
pub const MAX_CONTENT_BYTES: usize = 64 * 1024;
/// Largest accepted request body, in bytes (content plus JSON framing and escapes).
pub const MAX_REQUEST_BODY_BYTES: usize = 512 * 1024;
/// Largest stored event payload (its JSON), in bytes.
pub const MAX_EVENT_PAYLOAD_BYTES: usize = 256 * 1024;
/// Length kept of a string field that had to be cut to fit [`MAX_EVENT_PAYLOAD_BYTES`].
pub const TRUNCATED_PREVIEW_BYTES: usize = 8 * 1024;
/// Longest session, turn, message or client message id.
pub const MAX_ID_LEN: usize = 128;
/// Default and largest page of `GET /history`.
pub const DEFAULT_HISTORY_LIMIT: usize = 100;
pub const MAX_HISTORY_LIMIT: usize = 1000;
/// Most sessions one stream may subscribe to.
pub const MAX_SESSIONS_PER_STREAM: usize = 32;
/// Most turns a session may have queued or running at once.
pub const MAX_ACTIVE_TURNS_PER_SESSION: usize = 64;
/// Most attachments one message carries (v1.2).
pub const MAX_ATTACHMENTS_PER_MESSAGE: usize = 16;
/// Longest `http:`/`https:` attachment URL, in bytes (a `data:` URL is bounded by
/// [`MAX_CONTENT_BYTES`] instead).
pub const MAX_ATTACHMENT_URL_BYTES: usize = 4096;
/// Longest attachment `media_type`, in bytes (RFC 6838: 127 for the type and for the subtype).
pub const MAX_MEDIA_TYPE_BYTES: usize = 255;
/// Longest attachment `name`, in bytes of UTF-8.
pub const MAX_ATTACHMENT_NAME_BYTES: usize = 1024;

/// Whether `id` is a valid session, turn, message or client message id: `[A-Za-z0-9_.:-]{1,128}`,
/// not made only of dots. Ids travel in URL paths, where `.` and `..` are path segments that
/// normalising clients and proxies rewrite (`/sessions/../history` becomes `/history`), so such an
/// id would name a different resource on the way to the server.
pub fn is_valid_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= MAX_ID_LEN
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b':' | b'-'))
        && !id.bytes().all(|b| b == b'.')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids() {
        assert!(is_valid_id("a"));
        assert!(is_valid_id("Sess_1.2:3-4"));
        assert!(is_valid_id(&"x".repeat(128)));
        assert!(!is_valid_id(""));
        assert!(!is_valid_id(&"x".repeat(129)));
        assert!(!is_valid_id("a b"));
        assert!(!is_valid_id("a/b"));
        assert!(!is_valid_id("é"));
        assert!(!is_valid_id("."));
        assert!(!is_valid_id(".."));
        assert!(!is_valid_id("..."));
        assert!(is_valid_id(".a."));
        assert!(is_valid_id("a..b"));
    }
}
