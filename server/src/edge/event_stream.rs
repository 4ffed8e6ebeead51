//! An HTTP/1.1 connection whose first request asks for an event stream (`GET` with `Accept:
//! text/event-stream`, what `EventSource` sends), served without hyper, so that an idle stream
//! keeps no connection buffers.
//!
//! hyper's HTTP/1 connection keeps a read buffer of at least 8 KiB and a write buffer for as long
//! as the connection lives (`max_buf_size` refuses less), and an SSE stream lives for hours with
//! nothing to read: those buffers were most of what an idle stream cost. Here the accept loop
//! reads the first request head itself into a buffer it frees right after; when that request is
//! an event stream, the router answers it as it answers any request (auth, limits, logs), and
//! this module writes the response: its head, then the body in HTTP/1.1 chunks, each frame as
//! it comes, straight to the socket. While the stream is idle the connection holds the socket,
//! the response body (the stream's own state) and nothing else; it watches the socket for the
//! client's close without a buffer. The response says `connection: close`, and the connection
//! closes when the stream ends.
//!
//! Anything else — another request, a head that does not parse, bytes after the head (a
//! pipelined request), a body — goes to hyper with the bytes already read put back in front, so
//! it is served exactly as before. A stream that is not its connection's first request (a
//! browser reusing a kept-alive connection) is served by hyper too.

use std::io::{self, IoSlice};
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime};

use axum::body::Body;
use axum::response::Response;
use bytes::Bytes;
use http::{HeaderName, HeaderValue, Method, Request, Uri, Version};
use http_body::Body as _;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

use super::parse_errors::MAX_REQUEST_HEAD_BYTES;

/// Headers a request head may have for this module to read it (more go to hyper).
const MAX_HEADERS: usize = 64;

/// What the first read of a connection found.
pub enum First {
    /// An event-stream request, parsed (the head's bytes are freed), and its socket.
    Stream(TcpStream, Box<Request<Body>>),
    /// Anything else: the socket with the bytes read so far, for hyper.
    Other(Prefixed),
    /// The client closed, sent nothing in time, or the server is stopping.
    Gone,
}

/// Reads the first request head of `tcp` (within `deadline`, or until `stop`) and tells whether
/// it asks for an event stream.
pub async fn first_request(tcp: TcpStream, deadline: Duration, stop: &CancellationToken) -> First {
    let mut buf: Vec<u8> = Vec::new();
    let read = async {
        loop {
            match parse(&buf) {
                Parsed::Partial if buf.len() < MAX_REQUEST_HEAD_BYTES => {}
                parsed => return Some(parsed),
            }
            if tcp.readable().await.is_err() {
                return None;
            }
            let mut chunk = [0u8; 2048];
            match tcp.try_read(&mut chunk) {
                // Closed: what came before it (if anything) is hyper's to answer.
                Ok(0) if buf.is_empty() => return None,
                Ok(0) => return Some(Parsed::Other),
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(_) => return None,
            }
        }
    };
    let parsed = tokio::select! {
        parsed = tokio::time::timeout(deadline, read) => parsed,
        _ = stop.cancelled() => return First::Gone,
    };
    match parsed {
        // No head in time: closed, as hyper closes a connection past its header deadline.
        Err(_) | Ok(None) => First::Gone,
        Ok(Some(Parsed::Stream(req))) => First::Stream(tcp, req),
        Ok(Some(_)) => First::Other(Prefixed {
            prefix: Bytes::from(buf),
            tcp,
        }),
    }
}

enum Parsed {
    Partial,
    Other,
    Stream(Box<Request<Body>>),
}

/// The request in `buf` if it is a whole `GET` head asking for an event stream, with nothing
/// after it.
fn parse(buf: &[u8]) -> Parsed {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut head = httparse::Request::new(&mut headers);
    let len = match head.parse(buf) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) => return Parsed::Partial,
        Err(_) => return Parsed::Other,
    };
    if len != buf.len() || head.method != Some("GET") || head.version != Some(1) {
        return Parsed::Other;
    }
    let mut event_stream = false;
    let mut req = Request::new(Body::empty());
    for h in head.headers.iter() {
        let name = h.name.as_bytes();
        if name.eq_ignore_ascii_case(b"content-length")
            || name.eq_ignore_ascii_case(b"transfer-encoding")
            || name.eq_ignore_ascii_case(b"upgrade")
            || name.eq_ignore_ascii_case(b"expect")
        {
            return Parsed::Other;
        }
        if name.eq_ignore_ascii_case(b"accept")
            && h.value
                .split(|&b| b == b',')
                .any(|v| v.trim_ascii().starts_with(b"text/event-stream"))
        {
            event_stream = true;
        }
        let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(name),
            HeaderValue::from_bytes(h.value),
        ) else {
            return Parsed::Other;
        };
        req.headers_mut().append(name, value);
    }
    let Some(Ok(uri)) = head.path.map(str::parse::<Uri>) else {
        return Parsed::Other;
    };
    if !event_stream {
        return Parsed::Other;
    }
    *req.method_mut() = Method::GET;
    *req.uri_mut() = uri;
    *req.version_mut() = Version::HTTP_11;
    Parsed::Stream(Box::new(req))
}

/// Answers `req` with `app` and writes the response to `tcp` until the body ends or the client
/// goes. `peer` reaches the handlers as axum's `ConnectInfo`, as on hyper's connections.
pub async fn serve(
    mut tcp: TcpStream,
    req: Box<Request<Body>>,
    peer: SocketAddr,
    app: axum::Router,
) {
    let mut req = *req;
    req.extensions_mut()
        .insert(axum::extract::ConnectInfo(peer));
    // Boxed, so the router's future is freed once answered instead of sizing this one.
    let res: Response = match Box::pin(app.oneshot(req)).await {
        Ok(res) => res,
        Err(e) => match e {},
    };
    let (parts, mut body) = res.into_parts();
    let size = body.size_hint().exact();
    let mut head = Vec::with_capacity(256);
    head.extend_from_slice(b"HTTP/1.1 ");
    head.extend_from_slice(parts.status.as_str().as_bytes());
    head.push(b' ');
    head.extend_from_slice(parts.status.canonical_reason().unwrap_or("").as_bytes());
    head.extend_from_slice(b"\r\n");
    for (name, value) in &parts.headers {
        if name == http::header::CONNECTION || name == http::header::TRANSFER_ENCODING {
            continue;
        }
        head.extend_from_slice(name.as_str().as_bytes());
        head.extend_from_slice(b": ");
        head.extend_from_slice(value.as_bytes());
        head.extend_from_slice(b"\r\n");
    }
    if !parts.headers.contains_key(http::header::DATE) {
        head.extend_from_slice(b"date: ");
        head.extend_from_slice(httpdate::fmt_http_date(SystemTime::now()).as_bytes());
        head.extend_from_slice(b"\r\n");
    }
    let chunked = match size {
        Some(n) if !parts.headers.contains_key(http::header::CONTENT_LENGTH) => {
            head.extend_from_slice(b"content-length: ");
            head.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
            head.extend_from_slice(b"\r\n");
            false
        }
        Some(_) => false,
        None => {
            head.extend_from_slice(b"transfer-encoding: chunked\r\n");
            true
        }
    };
    head.extend_from_slice(b"connection: close\r\n\r\n");
    // What an idle stream keeps from here on: the socket and the body.
    drop(parts);
    if tcp.write_all(&head).await.is_err() {
        return;
    }
    drop(head);
    loop {
        let frame = tokio::select! {
            frame = std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)) => frame,
            gone = client_gone(&tcp) => {
                if gone {
                    return;
                }
                continue;
            }
        };
        let data = match frame {
            None => break,
            Some(Err(_)) => return,
            Some(Ok(frame)) => match frame.into_data() {
                Ok(data) => data,
                // Trailers: none of this server's bodies has them.
                Err(_) => continue,
            },
        };
        if data.is_empty() {
            continue;
        }
        let written = if chunked {
            let mut size = [0u8; 18];
            let n = chunk_size_line(&mut size, data.len());
            write_all_vectored(
                &mut tcp,
                &mut [
                    IoSlice::new(&size[..n]),
                    IoSlice::new(&data),
                    IoSlice::new(b"\r\n"),
                ],
            )
            .await
        } else {
            tcp.write_all(&data).await
        };
        if written.is_err() {
            return;
        }
    }
    if chunked && tcp.write_all(b"0\r\n\r\n").await.is_err() {
        return;
    }
    let _ = tcp.shutdown().await;
}

/// Waits until the socket is readable; true when the client closed it (or it failed). What a
/// client sends on a stream's connection is read and dropped a few bytes at a time.
async fn client_gone(tcp: &TcpStream) -> bool {
    if tcp.readable().await.is_err() {
        return true;
    }
    let mut scratch = [0u8; 64];
    match tcp.try_read(&mut scratch) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => false,
        Err(_) => true,
    }
}

/// Writes `{len:x}\r\n` into `out`; returns its length.
fn chunk_size_line(out: &mut [u8; 18], len: usize) -> usize {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut digits = [0u8; 16];
    let mut n = 0;
    let mut v = len;
    loop {
        digits[n] = HEX[v & 0xf];
        n += 1;
        v >>= 4;
        if v == 0 {
            break;
        }
    }
    for (i, d) in digits[..n].iter().rev().enumerate() {
        out[i] = *d;
    }
    out[n] = b'\r';
    out[n + 1] = b'\n';
    n + 2
}

async fn write_all_vectored(tcp: &mut TcpStream, mut bufs: &mut [IoSlice<'_>]) -> io::Result<()> {
    while !bufs.is_empty() {
        let n = tcp.write_vectored(bufs).await?;
        if n == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        IoSlice::advance_slices(&mut bufs, n);
    }
    Ok(())
}

/// A socket with bytes already read from it put back in front, for hyper.
pub struct Prefixed {
    prefix: Bytes,
    tcp: TcpStream,
}

impl AsyncRead for Prefixed {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if !self.prefix.is_empty() {
            let n = self.prefix.len().min(buf.remaining());
            let head = self.prefix.split_to(n);
            buf.put_slice(&head);
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.tcp).poll_read(cx, buf)
    }
}

impl AsyncWrite for Prefixed {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.tcp).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.tcp).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.tcp.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.tcp).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.tcp).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunk_sizes_are_lowercase_hex() {
        let mut out = [0u8; 18];
        for (len, want) in [
            (0, "0\r\n"),
            (1, "1\r\n"),
            (255, "ff\r\n"),
            (65536, "10000\r\n"),
        ] {
            let n = chunk_size_line(&mut out, len);
            assert_eq!(&out[..n], want.as_bytes());
        }
    }

    fn is_stream(head: &str) -> bool {
        matches!(parse(head.as_bytes()), Parsed::Stream(_))
    }

    #[test]
    fn only_a_whole_get_asking_for_an_event_stream_is_taken() {
        let ok =
            "GET /api/stream?session=a HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\n\r\n";
        assert!(is_stream(ok));
        assert!(is_stream(
            "GET /s HTTP/1.1\r\nhost: x\r\naccept: application/json, text/event-stream;q=0.9\r\n\r\n"
        ));
        assert!(matches!(parse(&ok.as_bytes()[..20]), Parsed::Partial));
        for other in [
            "GET /api/stream HTTP/1.1\r\nHost: x\r\n\r\n",
            "POST /api/stream HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\n\r\n",
            "GET /api/stream HTTP/1.0\r\nHost: x\r\nAccept: text/event-stream\r\n\r\n",
            "GET /api/stream HTTP/1.1\r\nAccept: text/event-stream\r\nContent-Length: 3\r\n\r\n",
            "GET /api/stream HTTP/1.1\r\nAccept: text/event-stream\r\nUpgrade: h2c\r\n\r\n",
            // A pipelined request after it.
            "GET /a HTTP/1.1\r\nAccept: text/event-stream\r\n\r\nGET /b HTTP/1.1\r\n\r\n",
            "garbage\r\n\r\n",
        ] {
            assert!(!is_stream(other), "{other:?}");
        }
    }
}
