//! JSON bodies for the answers hyper makes itself. When a request line or its headers cannot be
//! parsed (a malformed request line, a target over 64 KiB, headers over
//! [`MAX_REQUEST_HEAD_BYTES`]), hyper writes a bare `400`, `414` or `431` with an empty body and
//! closes the connection; no router or handler ever sees the request. Every other answer of the
//! server carries `{"error":{"code","message"}}`, so these should too.
//!
//! hyper offers no hook for those answers, so [`ParseErrorJson`] wraps the connection's socket
//! and rewrites them on their way out. The rewrite is exact rather than heuristic: hyper writes
//! such an answer only when no response is in progress (it parses a request head only after the
//! previous response was flushed), as one whole write holding a complete head with
//! `content-length: 0`; the router never answers 400, 414 or 431 without a JSON body, and a
//! response body never starts a write with a status line (chunked bodies start with a size).

use std::io::IoSlice;
use std::pin::Pin;
use std::task::{Context, Poll};

use axum::http::StatusCode;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use turnstream_protocol::{ErrorBody, ErrorDetail};

/// Largest request head (request line and headers) the server reads; larger ones get
/// `431 headers_too_large`. Above hyper's own 64 KiB limit on the request target, so a target
/// over that gets `414 uri_too_long` rather than 431.
pub const MAX_REQUEST_HEAD_BYTES: usize = 96 * 1024;

/// A complete HTTP/1.1 response with a JSON error body, ending the connection.
pub fn json_response(status: StatusCode, code: &str, message: &str) -> Vec<u8> {
    let body = serde_json::to_vec(&ErrorBody {
        error: ErrorDetail {
            code: code.to_string(),
            message: message.to_string(),
        },
    })
    .unwrap_or_else(|_| b"{}".to_vec());
    let mut out = format!(
        "HTTP/1.1 {} {}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        status.as_u16(),
        status.canonical_reason().unwrap_or(""),
        body.len()
    )
    .into_bytes();
    out.extend_from_slice(&body);
    out
}

/// The JSON answer that replaces hyper's bare answer `head`, if `head` is one.
fn replacement(head: &[u8]) -> Option<Vec<u8>> {
    let (status, code, message) = if head.starts_with(b"HTTP/1.1 400 ") {
        (
            StatusCode::BAD_REQUEST,
            "bad_request",
            "the request line or headers could not be parsed as HTTP/1.1".to_string(),
        )
    } else if head.starts_with(b"HTTP/1.1 414 ") {
        (
            StatusCode::URI_TOO_LONG,
            "uri_too_long",
            "the request target is longer than 64 KiB".to_string(),
        )
    } else if head.starts_with(b"HTTP/1.1 431 ") {
        (
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            "headers_too_large",
            format!(
                "the request line and headers are larger than {} KiB, or there are more than 100 headers",
                MAX_REQUEST_HEAD_BYTES / 1024
            ),
        )
    } else {
        return None;
    };
    // One whole head and nothing after it, announcing an empty body.
    let end = head.windows(4).position(|w| w == b"\r\n\r\n")?;
    if end + 4 != head.len() || !contains_ci(&head[..end], b"\r\ncontent-length: 0\r\n") {
        return None;
    }
    Some(json_response(status, code, &message))
}

fn contains_ci(hay: &[u8], needle: &[u8]) -> bool {
    // hyper writes header names in lower case; the trailing CRLF of the head's last line is
    // before `end`, so add it back for the search.
    let mut buf = Vec::with_capacity(hay.len() + 2);
    buf.extend_from_slice(hay);
    buf.extend_from_slice(b"\r\n");
    buf.windows(needle.len())
        .any(|w| w.eq_ignore_ascii_case(needle))
}

/// A connection's socket, with hyper's bare parse-error answers rewritten as JSON.
pub struct ParseErrorJson<T> {
    inner: T,
    /// A JSON answer being written in place of hyper's, and how much of it is written.
    rewriting: Option<(Vec<u8>, usize)>,
}

impl<T> ParseErrorJson<T> {
    pub fn new(inner: T) -> Self {
        ParseErrorJson {
            inner,
            rewriting: None,
        }
    }
}

impl<T: AsyncWrite + Unpin> ParseErrorJson<T> {
    /// Writes the JSON answer that replaces `original`; reports `original` written once all of
    /// it is, so hyper goes on to flush and close as it would have.
    fn poll_rewrite(
        &mut self,
        cx: &mut Context<'_>,
        original_len: usize,
    ) -> Poll<std::io::Result<usize>> {
        while let Some((bytes, done)) = &mut self.rewriting {
            if *done == bytes.len() {
                self.rewriting = None;
                return Poll::Ready(Ok(original_len));
            }
            match Pin::new(&mut self.inner).poll_write(cx, &bytes[*done..]) {
                Poll::Ready(Ok(0)) => {
                    return Poll::Ready(Err(std::io::ErrorKind::WriteZero.into()));
                }
                Poll::Ready(Ok(n)) => *done += n,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => return Poll::Pending,
            }
        }
        Poll::Ready(Ok(original_len))
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for ParseErrorJson<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for ParseErrorJson<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        if self.rewriting.is_none() {
            match replacement(buf) {
                Some(json) => self.rewriting = Some((json, 0)),
                None => return Pin::new(&mut self.inner).poll_write(cx, buf),
            }
        }
        self.poll_rewrite(cx, buf.len())
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        if self.rewriting.is_none() {
            let mut non_empty = bufs.iter().filter(|b| !b.is_empty());
            let only = match (non_empty.next(), non_empty.next()) {
                (Some(one), None) => replacement(one),
                _ => None,
            };
            match only {
                Some(json) => self.rewriting = Some((json, 0)),
                None => return Pin::new(&mut self.inner).poll_write_vectored(cx, bufs),
            }
        }
        let len = bufs.iter().map(|b| b.len()).sum();
        self.poll_rewrite(cx, len)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rewrites_only_a_whole_bare_head() {
        let bare = b"HTTP/1.1 431 Request Header Fields Too Large\r\nconnection: close\r\ncontent-length: 0\r\ndate: Tue, 01 Dec 2026 02:00:00 GMT\r\n\r\n";
        let json = replacement(bare).expect("rewritten");
        let text = String::from_utf8(json).expect("utf-8");
        assert!(text.starts_with("HTTP/1.1 431 Request Header Fields Too Large\r\n"));
        assert!(text.ends_with(r#"{"error":{"code":"headers_too_large","message":"the request line and headers are larger than 96 KiB, or there are more than 100 headers"}}"#));
        // A head followed by a body, a head announcing a body, another status, a body chunk.
        let mut with_body = bare.to_vec();
        with_body.extend_from_slice(b"x");
        assert!(replacement(&with_body).is_none());
        assert!(replacement(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 12\r\n\r\n").is_none());
        assert!(replacement(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n").is_none());
        assert!(replacement(b"1a\r\nHTTP/1.1 400 Bad Request\r\n").is_none());
        assert!(replacement(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n").is_some());
    }
}
