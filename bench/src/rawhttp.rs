//! A minimal HTTP/1.1 GET client for event streams, over a plain tokio `TcpStream`.
//!
//! reqwest (hyper's client) hands each HTTP chunk from its connection task to the response's
//! task through a channel: one cross-thread wake-up per chunk. turnstream writes one chunk per
//! event, so a 10,000-event replay cost the *client* ~10,000 context switches, and that, not the
//! server, dominated the measured time. This client reads 64 KiB at a time and decodes chunked
//! transfer encoding in the reading task itself, as a browser's network stack effectively does.

use anyhow::{anyhow, bail, Context, Result};
use tokio::net::TcpStream;

use crate::sse::Splitter;

const READ_BUF: usize = 64 * 1024;
/// Largest response head accepted.
const MAX_HEAD: usize = 64 * 1024;

/// How the body is delimited.
#[derive(Debug)]
enum Framing {
    /// `Transfer-Encoding: chunked`, with the decoder's state.
    Chunked(Dechunk),
    /// `Content-Length`: bytes still to come.
    Length(u64),
    /// Until the server closes the connection.
    Close,
}

/// An open response whose body is being read.
pub struct Conn {
    sock: TcpStream,
    framing: Framing,
    buf: Vec<u8>,
    /// Body bytes that arrived together with the head (already de-chunked).
    early: Vec<u8>,
    done: bool,
}

/// Sends `GET path` to `base` (`http://host:port`) and reads the response head. Fails on a
/// non-2xx status.
pub async fn get(base: &str, path: &str, last_event_id: Option<&str>) -> Result<Conn> {
    let addr = base
        .strip_prefix("http://")
        .ok_or_else(|| anyhow!("not an http:// URL: {base}"))?
        .trim_end_matches('/');
    let sock = TcpStream::connect(addr)
        .await
        .with_context(|| format!("connect {addr}"))?;
    sock.set_nodelay(true)?;
    let mut req = format!(
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nAccept: text/event-stream\r\nCache-Control: no-cache\r\n"
    );
    if let Some(id) = last_event_id {
        req.push_str(&format!("Last-Event-ID: {id}\r\n"));
    }
    req.push_str("\r\n");
    write_all(&sock, req.as_bytes()).await?;

    let mut buf = vec![0u8; READ_BUF];
    let mut head: Vec<u8> = Vec::new();
    let end = loop {
        let n = read(&sock, &mut buf).await?;
        if n == 0 {
            bail!("connection closed before the response head");
        }
        head.extend_from_slice(&buf[..n]);
        if let Some(i) = head.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        if head.len() > MAX_HEAD {
            bail!("response head too large");
        }
    };
    let text = String::from_utf8_lossy(&head[..end]).to_string();
    let mut lines = text.split("\r\n");
    let status_line = lines.next().unwrap_or("");
    let status: u16 = status_line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| anyhow!("bad status line {status_line:?}"))?;
    if !(200..300).contains(&status) {
        bail!("HTTP {status}");
    }
    let mut framing = Framing::Close;
    for line in lines {
        let Some((k, v)) = line.split_once(':') else {
            continue;
        };
        let (k, v) = (k.trim().to_ascii_lowercase(), v.trim());
        if k == "transfer-encoding" && v.to_ascii_lowercase().contains("chunked") {
            framing = Framing::Chunked(Dechunk::default());
        } else if k == "content-length" && !matches!(framing, Framing::Chunked(_)) {
            framing = Framing::Length(v.parse().context("bad content-length")?);
        }
    }
    let mut conn = Conn {
        sock,
        framing,
        buf,
        early: Vec::new(),
        done: false,
    };
    let rest = head[end..].to_vec();
    let mut early = Vec::new();
    conn.decode(&rest, &mut early)?;
    conn.early = early;
    Ok(conn)
}

impl Conn {
    /// Body bytes that arrived with the head.
    pub fn take_early(&mut self) -> Result<Vec<u8>> {
        Ok(std::mem::take(&mut self.early))
    }

    /// Reads once and pushes the decoded body bytes; false when the body has ended.
    pub async fn read_into(&mut self, out: &mut Splitter) -> Result<bool> {
        if self.done {
            return Ok(false);
        }
        let n = read(&self.sock, &mut self.buf).await?;
        if n == 0 {
            self.done = true;
            return Ok(false);
        }
        let input = std::mem::take(&mut self.buf);
        let mut body = Vec::with_capacity(n);
        let r = self.decode(&input[..n], &mut body);
        self.buf = input;
        r?;
        out.push(&body);
        Ok(!self.done || !body.is_empty())
    }

    fn decode(&mut self, input: &[u8], out: &mut Vec<u8>) -> Result<()> {
        match &mut self.framing {
            Framing::Chunked(d) => {
                if d.feed(input, out)? {
                    self.done = true;
                }
            }
            Framing::Length(left) => {
                let take = (*left).min(input.len() as u64) as usize;
                out.extend_from_slice(&input[..take]);
                *left -= take as u64;
                if *left == 0 {
                    self.done = true;
                }
            }
            Framing::Close => out.extend_from_slice(input),
        }
        Ok(())
    }
}

// Readiness-based I/O (`readable` + `try_read`) needs only tokio's `net` feature, which the
// server enables too; `AsyncReadExt` would need `io-util` (see Cargo.toml for why that matters).

async fn read(sock: &TcpStream, buf: &mut [u8]) -> std::io::Result<usize> {
    loop {
        sock.readable().await?;
        match sock.try_read(buf) {
            Ok(n) => return Ok(n),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
            Err(e) => return Err(e),
        }
    }
}

async fn write_all(sock: &TcpStream, mut data: &[u8]) -> std::io::Result<()> {
    while !data.is_empty() {
        sock.writable().await?;
        match sock.try_write(data) {
            Ok(n) => data = &data[n..],
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Chunked transfer-encoding decoder state.
#[derive(Debug, Default)]
pub struct Dechunk {
    /// Bytes left in the current chunk's data.
    left: usize,
    /// Reading a size line (its bytes so far).
    size_line: Vec<u8>,
    /// CR LF bytes still to skip after a chunk's data.
    crlf: usize,
    in_data: bool,
    ended: bool,
}

impl Dechunk {
    /// Decodes `input` into `out`; true once the last (zero-size) chunk was read.
    pub fn feed(&mut self, mut input: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        while !input.is_empty() && !self.ended {
            if self.crlf > 0 {
                let skip = self.crlf.min(input.len());
                self.crlf -= skip;
                input = &input[skip..];
            } else if self.in_data {
                let take = self.left.min(input.len());
                out.extend_from_slice(&input[..take]);
                self.left -= take;
                input = &input[take..];
                if self.left == 0 {
                    self.in_data = false;
                    self.crlf = 2;
                }
            } else {
                match input.iter().position(|b| *b == b'\n') {
                    None => {
                        self.size_line.extend_from_slice(input);
                        input = &[];
                    }
                    Some(i) => {
                        self.size_line.extend_from_slice(&input[..i]);
                        input = &input[i + 1..];
                        let line = String::from_utf8_lossy(&self.size_line).to_string();
                        self.size_line.clear();
                        let hex = line.split(';').next().unwrap_or("").trim();
                        if hex.is_empty() {
                            continue;
                        }
                        let size = usize::from_str_radix(hex, 16)
                            .map_err(|_| anyhow!("bad chunk size {hex:?}"))?;
                        if size == 0 {
                            self.ended = true;
                        } else {
                            self.left = size;
                            self.in_data = true;
                        }
                    }
                }
            }
        }
        Ok(self.ended)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dechunks_across_arbitrary_splits() {
        let wire = b"5\r\nhello\r\nb;ext=1\r\n world, hi!\r\n0\r\n\r\n";
        for split in 1..wire.len() {
            let mut d = Dechunk::default();
            let mut out = Vec::new();
            let mut ended = false;
            for part in wire.chunks(split) {
                ended = d.feed(part, &mut out).unwrap_or(false);
            }
            assert!(ended);
            assert_eq!(out, b"hello world, hi!");
        }
    }
}
