//! A connection opened for an event stream (its first request a `GET` with `Accept:
//! text/event-stream`) is served without hyper's buffers; every other connection as before.
//! Over raw sockets against the real binary: the response's framing, the stream's frames, a
//! client that goes, answers that are not streams, heads that arrive in pieces, a stream that is
//! not its connection's first request, and shutdown.

mod support;

use std::time::{Duration, Instant};

use support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

fn addr(s: &TestServer) -> String {
    s.url.trim_start_matches("http://").to_string()
}

/// Reads from `tcp` until `done` says the bytes so far are enough, or the deadline passes.
async fn read_until(
    tcp: &mut TcpStream,
    got: &mut Vec<u8>,
    what: &str,
    done: impl Fn(&str) -> bool,
) -> TestResult {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut buf = [0u8; 4096];
    while !done(&String::from_utf8_lossy(got)) {
        let left = deadline.saturating_duration_since(Instant::now());
        let n = tokio::time::timeout(left, tcp.read(&mut buf))
            .await
            .map_err(|_| {
                format!(
                    "timed out waiting for {what}; got {:?}",
                    String::from_utf8_lossy(got)
                )
            })??;
        if n == 0 {
            return Err(format!(
                "closed before {what}; got {:?}",
                String::from_utf8_lossy(got)
            )
            .into());
        }
        got.extend_from_slice(&buf[..n]);
    }
    Ok(())
}

/// Undoes chunked transfer coding: the body's bytes, and whether the last chunk came.
fn dechunk(body: &[u8]) -> TestResult<(Vec<u8>, bool)> {
    let mut out = Vec::new();
    let mut rest = body;
    loop {
        let Some(eol) = rest.windows(2).position(|w| w == b"\r\n") else {
            return Ok((out, false));
        };
        let size = usize::from_str_radix(std::str::from_utf8(&rest[..eol])?, 16)?;
        if size == 0 {
            return Ok((out, &rest[eol..] == b"\r\n\r\n"));
        }
        let start = eol + 2;
        if rest.len() < start + size + 2 {
            return Ok((out, false));
        }
        out.extend_from_slice(&rest[start..start + size]);
        assert_eq!(
            &rest[start + size..start + size + 2],
            b"\r\n",
            "a chunk ends with CRLF"
        );
        rest = &rest[start + size + 2..];
    }
}

fn split_head(raw: &[u8]) -> TestResult<(String, &[u8])> {
    let end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or("no end of head")?;
    Ok((
        String::from_utf8_lossy(&raw[..end]).to_lowercase(),
        &raw[end + 4..],
    ))
}

fn stream_request(s: &TestServer, query: &str) -> String {
    format!(
        "GET /api/stream?{query} HTTP/1.1\r\nHost: {}\r\nAccept: text/event-stream\r\n\r\n",
        addr(s)
    )
}

#[tokio::test]
async fn an_event_stream_connection_is_chunked_sse_that_says_it_closes() -> TestResult {
    let s = TestServer::start(&["--demo-delay-ms", "1"])?;
    let mut tcp = TcpStream::connect(addr(&s)).await?;
    tcp.write_all(stream_request(&s, "session=a&snapshot=1").as_bytes())
        .await?;
    let mut got = Vec::new();
    read_until(&mut tcp, &mut got, "the snapshot", |t| {
        t.contains("event: snapshot")
    })
    .await?;
    let (head, _) = split_head(&got)?;
    assert!(head.starts_with("http/1.1 200 ok"), "{head}");
    for line in [
        "content-type: text/event-stream",
        "cache-control: no-cache",
        "x-accel-buffering: no",
        "transfer-encoding: chunked",
        "connection: close",
    ] {
        assert!(
            head.lines().any(|l| l == line),
            "missing {line:?} in {head}"
        );
    }
    assert!(head.lines().any(|l| l.starts_with("date: ")), "{head}");
    let posted = s.send("a", "/echo over a parked stream").await?;
    read_until(&mut tcp, &mut got, "the turn's end", |t| {
        t.contains("event: turn_ended")
    })
    .await?;
    let (_, body) = split_head(&got)?;
    let (sse, _) = dechunk(body)?;
    let sse = String::from_utf8(sse)?;
    assert!(sse.starts_with("retry: "), "{sse}");
    assert!(
        sse.contains(&format!("\"turn_id\":\"{}\"", posted.turn_id)),
        "{sse}"
    );
    assert!(sse.contains("over a parked stream"), "{sse}");
    Ok(())
}

#[tokio::test]
async fn a_client_that_goes_frees_its_stream() -> TestResult {
    let s = TestServer::start(&[])?;
    let mut streams = Vec::new();
    for _ in 0..5 {
        let mut tcp = TcpStream::connect(addr(&s)).await?;
        tcp.write_all(stream_request(&s, "session=a").as_bytes())
            .await?;
        let mut got = Vec::new();
        read_until(&mut tcp, &mut got, "the head", |t| t.contains("\r\n\r\n")).await?;
        streams.push(tcp);
    }
    wait_for(|| async { Ok((s.counter("turnstream_connections").await? == 5.0).then_some(())) })
        .await?;
    drop(streams);
    wait_for(|| async { Ok((s.counter("turnstream_connections").await? == 0.0).then_some(())) })
        .await?;
    Ok(())
}

#[tokio::test]
async fn a_head_in_pieces_is_read_whole() -> TestResult {
    let s = TestServer::start(&[])?;
    let mut tcp = TcpStream::connect(addr(&s)).await?;
    tcp.set_nodelay(true)?;
    let req = stream_request(&s, "session=a&snapshot=1");
    for piece in req.as_bytes().chunks(7) {
        tcp.write_all(piece).await?;
        tcp.flush().await?;
        tokio::task::yield_now().await;
    }
    let mut got = Vec::new();
    read_until(&mut tcp, &mut got, "the snapshot", |t| {
        t.contains("event: snapshot")
    })
    .await?;
    assert!(split_head(&got)?.0.contains("transfer-encoding: chunked"));
    Ok(())
}

#[tokio::test]
async fn an_answer_that_is_not_a_stream_has_its_length_and_json_body() -> TestResult {
    let s = TestServer::start(&[])?;
    let mut tcp = TcpStream::connect(addr(&s)).await?;
    // No session: refused before any stream starts.
    tcp.write_all(stream_request(&s, "cursor=x").as_bytes())
        .await?;
    let mut got = Vec::new();
    read_until(&mut tcp, &mut got, "the whole answer", |t| {
        t.split_once("\r\n\r\n").is_some_and(|(h, b)| {
            h.to_lowercase()
                .lines()
                .find_map(|l| l.strip_prefix("content-length: "))
                .and_then(|n| n.trim().parse::<usize>().ok())
                .is_some_and(|n| b.len() >= n)
        })
    })
    .await?;
    let (head, body) = split_head(&got)?;
    assert!(head.starts_with("http/1.1 400 "), "{head}");
    assert!(!head.contains("transfer-encoding"), "{head}");
    let v: serde_json::Value = serde_json::from_slice(body)?;
    assert!(v["error"]["code"].is_string(), "{v}");
    // And the connection is closed after it.
    let mut rest = Vec::new();
    let n = tokio::time::timeout(Duration::from_secs(10), tcp.read_to_end(&mut rest)).await??;
    assert_eq!(n, 0, "nothing after the answer");
    Ok(())
}

#[tokio::test]
async fn a_stream_after_another_request_on_a_kept_alive_connection_is_served_as_before(
) -> TestResult {
    let s = TestServer::start(&["--demo-delay-ms", "1"])?;
    let mut tcp = TcpStream::connect(addr(&s)).await?;
    let host = addr(&s);
    tcp.write_all(format!("GET /healthz HTTP/1.1\r\nHost: {host}\r\n\r\n").as_bytes())
        .await?;
    let mut got = Vec::new();
    read_until(&mut tcp, &mut got, "the health answer", |t| {
        t.split_once("\r\n\r\n").is_some_and(|(_, b)| !b.is_empty())
    })
    .await?;
    assert!(String::from_utf8_lossy(&got).starts_with("HTTP/1.1 200"));
    tcp.write_all(stream_request(&s, "session=b&snapshot=1").as_bytes())
        .await?;
    let mut got = Vec::new();
    read_until(&mut tcp, &mut got, "the snapshot", |t| {
        t.contains("event: snapshot")
    })
    .await?;
    let posted = s.send("b", "/echo on a kept-alive connection").await?;
    read_until(&mut tcp, &mut got, "the turn's end", |t| {
        t.contains("event: turn_ended")
    })
    .await?;
    let (head, body) = split_head(&got)?;
    assert!(
        !head.contains("connection: close"),
        "hyper's connection stays open: {head}"
    );
    let sse = String::from_utf8(dechunk(body)?.0)?;
    assert!(sse.contains(&posted.turn_id), "{sse}");
    Ok(())
}

#[tokio::test]
async fn shutdown_ends_a_parked_stream_with_its_last_chunk() -> TestResult {
    let mut s = TestServer::start(&[])?;
    let mut tcp = TcpStream::connect(addr(&s)).await?;
    tcp.write_all(stream_request(&s, "session=a").as_bytes())
        .await?;
    let mut got = Vec::new();
    read_until(&mut tcp, &mut got, "the head", |t| t.contains("\r\n\r\n")).await?;
    let started = Instant::now();
    let status = s.terminate()?;
    assert!(status.success(), "{status}");
    assert!(started.elapsed() < Duration::from_secs(10));
    tcp.read_to_end(&mut got).await?;
    let (_, body) = split_head(&got)?;
    let (_, ended) = dechunk(body)?;
    assert!(
        ended,
        "the last chunk came: {:?}",
        String::from_utf8_lossy(body)
    );
    Ok(())
}
