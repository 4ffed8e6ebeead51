//! Connection-level abuse limits, over real sockets against the real binary: deadlines for
//! request headers and bodies (and that streams are never cut by them), the cap on connections
//! per address, JSON for the answers hyper makes before routing, ids made of dots, `--www`
//! staying inside its folder, the size of server-made ids, the start-up warning for an open
//! server, and 1,100 connections stalled mid-body not starving a normal client.

mod support;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;
use support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The server's `host:port`.
fn addr(s: &TestServer) -> String {
    s.url.trim_start_matches("http://").to_string()
}

/// An answer read off a raw socket: status, headers (lower-cased names) and body.
#[derive(Debug)]
struct RawAnswer {
    status: u16,
    head: String,
    body: String,
}

impl RawAnswer {
    fn json(&self) -> TestResult<Value> {
        Ok(serde_json::from_str(&self.body)
            .map_err(|e| format!("body is not JSON ({e}): {:?}", self.body))?)
    }

    /// Checks the status and the stable error shape with `code`.
    fn expect_error(&self, status: u16, code: &str) -> TestResult {
        assert_eq!(self.status, status, "{self:?}");
        assert!(
            self.head
                .to_ascii_lowercase()
                .contains("content-type: application/json"),
            "{self:?}"
        );
        let v = self.json()?;
        assert_eq!(v["error"]["code"], code, "{v}");
        assert!(
            v["error"]["message"]
                .as_str()
                .is_some_and(|m| !m.is_empty()),
            "{v}"
        );
        Ok(())
    }
}

/// Reads one answer to its end (by `content-length`), failing after [`DEADLINE`].
async fn read_answer(tcp: &mut TcpStream) -> TestResult<RawAnswer> {
    let deadline = tokio::time::Instant::now() + DEADLINE;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_string();
            let len = head
                .lines()
                .find_map(|l| {
                    let (k, v) = l.split_once(':')?;
                    k.eq_ignore_ascii_case("content-length")
                        .then(|| v.trim().parse::<usize>().ok())?
                })
                .unwrap_or(0);
            if buf.len() >= end + 4 + len {
                let status = head
                    .split(' ')
                    .nth(1)
                    .and_then(|s| s.parse().ok())
                    .ok_or_else(|| format!("no status in {head:?}"))?;
                let body = String::from_utf8_lossy(&buf[end + 4..end + 4 + len]).to_string();
                return Ok(RawAnswer { status, head, body });
            }
        }
        let n = tokio::time::timeout_at(deadline, tcp.read(&mut chunk))
            .await
            .map_err(|_| "timed out waiting for an answer")??;
        if n == 0 {
            return Err(format!(
                "connection closed before a whole answer: {:?}",
                String::from_utf8_lossy(&buf)
            )
            .into());
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// Sends `request` on a new connection and reads the answer.
async fn raw(addr: &str, request: &[u8]) -> TestResult<RawAnswer> {
    let mut tcp = TcpStream::connect(addr).await?;
    tcp.write_all(request).await?;
    read_answer(&mut tcp).await
}

/// Waits until the server closes `tcp` (a read returns end of file or a reset), failing after
/// [`DEADLINE`]; returns how long that took.
async fn closed_within(tcp: &mut TcpStream) -> TestResult<Duration> {
    let start = Instant::now();
    let mut chunk = [0u8; 1024];
    loop {
        match tokio::time::timeout(DEADLINE, tcp.read(&mut chunk)).await {
            Err(_) => return Err("the server did not close the connection".into()),
            Ok(Ok(0)) | Ok(Err(_)) => return Ok(start.elapsed()),
            Ok(Ok(_)) => {}
        }
    }
}

fn get(path: &str) -> Vec<u8> {
    format!("GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n").into_bytes()
}

#[test]
fn defaults_are_the_documented_ones() {
    let c = turnstream_server::config::Config::defaults();
    assert_eq!(c.header_timeout_secs, 10);
    assert_eq!(c.body_timeout_secs, 30);
    assert_eq!(c.max_connections_per_ip, 1000);
}

#[tokio::test]
async fn headers_must_arrive_within_the_header_deadline() -> TestResult {
    let s = TestServer::start(&["--header-timeout-secs", "1"])?;
    // A connection that sends nothing at all.
    let mut silent = TcpStream::connect(addr(&s)).await?;
    let took = closed_within(&mut silent).await?;
    assert!(
        took >= Duration::from_millis(900),
        "closed after {took:?}, before the deadline"
    );
    // Half a request head, then nothing: closed after about the deadline.
    let mut tcp = TcpStream::connect(addr(&s)).await?;
    tcp.write_all(b"GET /healthz HTTP/1.1\r\nHost: t\r\n")
        .await?;
    let took = closed_within(&mut tcp).await?;
    assert!(
        took >= Duration::from_millis(900),
        "closed after {took:?}, before the deadline"
    );
    // A kept-alive connection that sends no next request is closed the same way.
    let mut tcp = TcpStream::connect(addr(&s)).await?;
    tcp.write_all(b"GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n")
        .await?;
    assert_eq!(read_answer(&mut tcp).await?.status, 200);
    let took = closed_within(&mut tcp).await?;
    assert!(took >= Duration::from_millis(900), "closed after {took:?}");
    Ok(())
}

#[tokio::test]
async fn a_stalled_body_gets_408_and_a_slow_one_within_the_deadline_is_fine() -> TestResult {
    let s = TestServer::start(&["--body-timeout-secs", "1"])?;
    let body = r#"{"content":"hello"}"#;
    let head = format!(
        "POST /api/sessions/slow/messages HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    // Headers and half the body, then nothing.
    let mut tcp = TcpStream::connect(addr(&s)).await?;
    let start = Instant::now();
    tcp.write_all(head.as_bytes()).await?;
    tcp.write_all(&body.as_bytes()[..8]).await?;
    let answer = read_answer(&mut tcp).await?;
    answer.expect_error(408, "request_timeout")?;
    assert!(start.elapsed() >= Duration::from_millis(900), "{answer:?}");
    closed_within(&mut tcp).await?;
    // Nothing was accepted from it.
    let (history, _) = s.history("slow").await?;
    assert!(history.messages.is_empty(), "{:?}", history.messages);

    // The same body in two parts, well within the deadline, is accepted.
    let mut tcp = TcpStream::connect(addr(&s)).await?;
    tcp.write_all(head.as_bytes()).await?;
    tcp.write_all(&body.as_bytes()[..8]).await?;
    tokio::time::sleep(Duration::from_millis(200)).await;
    tcp.write_all(&body.as_bytes()[8..]).await?;
    assert_eq!(read_answer(&mut tcp).await?.status, 202);
    Ok(())
}

#[tokio::test]
async fn streams_outlive_the_header_and_body_deadlines() -> TestResult {
    let s = TestServer::start(&[
        "--header-timeout-secs",
        "1",
        "--body-timeout-secs",
        "1",
        "--heartbeat-secs",
        "60",
    ])?;
    let mut stream = s.stream("session=long&snapshot=1", None).await?;
    stream.snapshot().await?;
    // Past both deadlines, with nothing sent on the stream meanwhile.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let sent = s.send("long", "/echo still here").await?;
    let events = stream.until_turn_ended(&sent.turn_id).await?;
    assert_eq!(reply_text(&events, &sent.turn_id), "still here");
    Ok(())
}

#[tokio::test]
async fn connections_per_address_are_capped() -> TestResult {
    let s = TestServer::start(&["--max-connections-per-ip", "3"])?;
    let a = addr(&s);
    // Three connections held open (one mid-request, two idle).
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(TcpStream::connect(&a).await?);
    }
    held[0]
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n")
        .await?;
    assert_eq!(read_answer(&mut held[0]).await?.status, 200);
    // The fourth is refused with the JSON shape, and closed.
    let mut fourth = TcpStream::connect(&a).await?;
    fourth.write_all(&get("/healthz")).await?;
    read_answer(&mut fourth)
        .await?
        .expect_error(429, "too_many_connections")?;
    closed_within(&mut fourth).await?;
    // Once one of the three closes, a new connection is served again.
    drop(held.pop());
    let answer = wait_for(|| async {
        let answer = raw(&a, &get("/healthz")).await?;
        Ok((answer.status == 200).then_some(answer))
    })
    .await?;
    assert_eq!(answer.json()?["status"], "ok");
    // The held ones still work.
    held[0]
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n")
        .await?;
    assert_eq!(read_answer(&mut held[0]).await?.status, 200);
    Ok(())
}

#[tokio::test]
async fn answers_made_before_routing_carry_the_json_shape() -> TestResult {
    let s = TestServer::start(&[])?;
    let a = addr(&s);
    // A request line that is not HTTP.
    raw(&a, b"THIS IS NOT HTTP\r\n\r\n")
        .await?
        .expect_error(400, "bad_request")?;
    raw(
        &a,
        b"GET /healthz HTTP/1.1\r\nHost: t\r\nBad Header\r\n\r\n",
    )
    .await?
    .expect_error(400, "bad_request")?;
    // A target over 64 KiB.
    let long = format!("/healthz?{}", "a".repeat(70 * 1024));
    raw(&a, &get(&long))
        .await?
        .expect_error(414, "uri_too_long")?;
    // Headers over the head limit, and too many headers.
    let big = format!(
        "GET /healthz HTTP/1.1\r\nHost: t\r\nX-Big: {}\r\n\r\n",
        "b".repeat(100 * 1024)
    );
    raw(&a, big.as_bytes())
        .await?
        .expect_error(431, "headers_too_large")?;
    let many: String = (0..120).map(|i| format!("X-H{i}: v\r\n")).collect();
    let many = format!("GET /healthz HTTP/1.1\r\nHost: t\r\n{many}\r\n");
    raw(&a, many.as_bytes())
        .await?
        .expect_error(431, "headers_too_large")?;
    // After a good request on a kept-alive connection, a bad one still gets JSON, and the good
    // answer before it is untouched.
    let mut tcp = TcpStream::connect(&a).await?;
    tcp.write_all(b"GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n")
        .await?;
    let first = read_answer(&mut tcp).await?;
    assert_eq!(first.status, 200);
    assert_eq!(first.json()?["status"], "ok");
    tcp.write_all(b"NOPE\r\n\r\n").await?;
    read_answer(&mut tcp)
        .await?
        .expect_error(400, "bad_request")?;
    Ok(())
}

#[tokio::test]
async fn ids_made_of_dots_are_refused() -> TestResult {
    let s = TestServer::start(&[])?;
    let a = addr(&s);
    for id in ["..", ".", "...", "%2e%2e", "%2E"] {
        raw(&a, &get(&format!("/api/sessions/{id}/history")))
            .await?
            .expect_error(400, "invalid_session_id")?;
        raw(&a, &get(&format!("/api/turns/{id}")))
            .await?
            .expect_error(400, "invalid_turn_id")?;
        let body = r#"{"content":"hi"}"#;
        let post = format!(
            "POST /api/sessions/{id}/messages HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        raw(&a, post.as_bytes())
            .await?
            .expect_error(400, "invalid_session_id")?;
    }
    let (status, v) = s.post("ok", "hi", Some("..")).await?;
    assert_eq!(status, 400, "{v}");
    assert_eq!(v["error"]["code"], "invalid_client_message_id");
    // Dots among other characters are fine.
    assert_eq!(
        raw(&a, &get("/api/sessions/a..b/history")).await?.status,
        200
    );
    Ok(())
}

#[cfg(unix)]
#[tokio::test]
async fn www_never_serves_a_file_outside_its_folder() -> TestResult {
    use std::os::unix::fs::symlink;
    let outside = tempfile::tempdir()?;
    std::fs::write(outside.path().join("secret.txt"), "SECRET")?;
    std::fs::create_dir(outside.path().join("dir"))?;
    std::fs::write(outside.path().join("dir").join("index.html"), "SECRET")?;
    let www = tempfile::tempdir()?;
    std::fs::write(www.path().join("index.html"), "home")?;
    std::fs::write(www.path().join("real.txt"), "real")?;
    symlink(
        www.path().join("real.txt"),
        www.path().join("inside-link.txt"),
    )?;
    symlink(
        outside.path().join("secret.txt"),
        www.path().join("leak.txt"),
    )?;
    symlink(outside.path(), www.path().join("out"))?;
    symlink(outside.path().join("dir"), www.path().join("outdir"))?;
    std::fs::create_dir(www.path().join("sub"))?;
    symlink(
        outside.path().join("secret.txt"),
        www.path().join("sub").join("index.html"),
    )?;
    let www_arg = www.path().to_string_lossy().to_string();
    let s = TestServer::start(&["--www", &www_arg])?;
    let a = addr(&s);
    for (path, body) in [
        ("/", "home"),
        ("/index.html", "home"),
        ("/real.txt", "real"),
        ("/inside-link.txt", "real"),
    ] {
        let answer = raw(&a, &get(path)).await?;
        assert_eq!((answer.status, answer.body.as_str()), (200, body), "{path}");
    }
    for path in [
        "/leak.txt",
        "/out/secret.txt",
        "/out/dir/index.html",
        "/outdir/",
        "/outdir/index.html",
        "/sub/",
        "/sub/index.html",
        "/%6ceak.txt",
    ] {
        let answer = raw(&a, &get(path)).await?;
        assert!(!answer.body.contains("SECRET"), "{path}: {answer:?}");
        answer.expect_error(404, "not_found")?;
    }
    // `..` never leaves either (ServeDir refuses it itself).
    let answer = raw(&a, &get("/../secret.txt")).await?;
    assert!(!answer.body.contains("SECRET"), "{answer:?}");
    assert_eq!(answer.status, 404);
    Ok(())
}

#[tokio::test]
async fn server_made_ids_carry_at_least_96_random_bits() -> TestResult {
    let s = TestServer::start(&[])?;
    let a = s.send("ids", "/echo a").await?;
    let b = s.send("ids", "/echo b").await?;
    let ended = s.wait_turn_end(&a.turn_id).await?;
    let reply = ended.message.ok_or("no reply message")?.message_id;
    for (id, prefix) in [
        (a.message_id.as_str(), "msg_"),
        (b.message_id.as_str(), "msg_"),
        (reply.as_str(), "msg_"),
        (a.turn_id.as_str(), "turn_"),
        (b.turn_id.as_str(), "turn_"),
    ] {
        let tail = id
            .strip_prefix(prefix)
            .ok_or_else(|| format!("{id} lacks {prefix}"))?;
        assert!(
            tail.bytes()
                .all(|c| c.is_ascii_digit() || c.is_ascii_lowercase()),
            "{id}"
        );
        // 36^19 > 2^98.
        let bits = tail.len() as f64 * 36f64.log2();
        assert!(bits >= 96.0, "{id}: {bits:.1} bits");
    }
    assert_ne!(a.turn_id, b.turn_id);
    assert_ne!(a.message_id, b.message_id);
    Ok(())
}

/// A server process started by hand, with its log collected (the shared support pipes only its
/// first stdout line and lets stderr through).
struct Logged {
    child: Child,
    url: String,
    log: Arc<Mutex<String>>,
    _dir: tempfile::TempDir,
}

impl Logged {
    /// Starts `sh -c '<shell_prefix> exec turnstream serve ...'`, so a test can set limits
    /// (`ulimit`) the server process starts with.
    fn start(shell_prefix: &str, args: &[&str]) -> TestResult<Logged> {
        let dir = tempfile::tempdir()?;
        let db = dir.path().join("t.db");
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg(format!("{shell_prefix} exec \"$0\" \"$@\""))
            .arg(env!("CARGO_BIN_EXE_turnstream"))
            .arg("serve")
            .arg("--db")
            .arg(&db)
            .args(args)
            .env("RUST_LOG", "info")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn()?;
        let log = Arc::new(Mutex::new(String::new()));
        let stderr = child.stderr.take().ok_or("no stderr")?;
        let sink = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let mut log = sink.lock().unwrap_or_else(|p| p.into_inner());
                log.push_str(&line);
                log.push('\n');
            }
        });
        let url = listening_url(&mut child)?;
        Ok(Logged {
            child,
            url,
            log,
            _dir: dir,
        })
    }

    /// The log so far, without terminal colour codes.
    fn log(&self) -> String {
        let raw = self.log.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let mut out = String::with_capacity(raw.len());
        let mut chars = raw.chars();
        while let Some(c) = chars.next() {
            if c == '\u{1b}' {
                // ESC [ ... m
                for c in chars.by_ref() {
                    if c == 'm' {
                        break;
                    }
                }
            } else {
                out.push(c);
            }
        }
        out
    }

    /// Waits until the log has a line containing `needle`.
    async fn wait_log(&self, needle: &str) -> TestResult<String> {
        wait_for(|| async {
            Ok(self
                .log()
                .lines()
                .find(|l| l.contains(needle))
                .map(str::to_string))
        })
        .await
        .map_err(|_| format!("no log line with {needle:?} in:\n{}", self.log()).into())
    }
}

impl Drop for Logged {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test]
async fn an_open_server_without_auth_warns_at_start() -> TestResult {
    const WARNING: &str = "no authentication configured";
    let open = Logged::start("", &["--listen", "0.0.0.0:0"])?;
    let line = open.wait_log(WARNING).await?;
    assert!(line.contains("WARN"), "{line}");
    assert!(line.contains("every session"), "{line}");
    // On loopback: the log reaches "serving" (logged after the check) with no warning.
    let local = Logged::start("", &["--listen", "127.0.0.1:0"])?;
    local.wait_log("serving").await?;
    assert!(!local.log().contains(WARNING), "{}", local.log());
    Ok(())
}

/// The case of the issue: with the server at a 1,024 descriptor limit, 1,100 connections that
/// send their headers and then stall mid-body would hold every descriptor for as long as they
/// stay. The body deadline ends them, so a normal client is answered. The cap on connections
/// per address is set above 1,100 here so that it is the body deadline that is tested.
#[cfg(unix)]
#[tokio::test]
async fn stalled_bodies_do_not_starve_a_normal_client() -> TestResult {
    const STALLED: usize = 1100;
    // This process holds 1,100 sockets too.
    let (soft, hard) = rlimit::Resource::NOFILE.get()?;
    if soft < 2 * STALLED as u64 {
        rlimit::increase_nofile_limit(hard)?;
    }
    // The server starts with a soft limit of 512 under a hard one of 1,024, raises the soft one
    // to 1,024 and logs it.
    let server = Logged::start(
        "ulimit -Sn 512 && ulimit -Hn 1024 &&",
        &[
            "--listen",
            "127.0.0.1:0",
            "--body-timeout-secs",
            "2",
            "--max-connections-per-ip",
            "5000",
        ],
    )?;
    let raised = server.wait_log("raised the open-file limit").await?;
    assert!(
        raised.contains("before=512") && raised.contains("now=1024"),
        "{raised}"
    );
    let a = server.url.trim_start_matches("http://").to_string();
    let stall = b"POST /api/sessions/s/messages HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"content\":";
    let mut stalled = Vec::with_capacity(STALLED);
    for _ in 0..STALLED {
        let mut tcp = TcpStream::connect(&a).await?;
        tcp.write_all(stall).await?;
        stalled.push(tcp);
    }
    // A normal client, after all of them: answered (within the shared deadline).
    let start = Instant::now();
    let answer = raw(&a, &get("/healthz")).await?;
    assert_eq!(answer.status, 200, "{answer:?}");
    let waited = start.elapsed();
    // The stalled ones got the JSON 408 (the first and the last alike).
    let last = stalled.len() - 1;
    for i in [0, last] {
        read_answer(&mut stalled[i])
            .await?
            .expect_error(408, "request_timeout")?;
    }
    eprintln!("normal client answered {waited:?} after {STALLED} stalled connections");
    Ok(())
}
