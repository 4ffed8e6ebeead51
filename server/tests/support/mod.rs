//! Test support: the real `turnstream` binary on port 0 with a temporary database, and an HTTP
//! and SSE client that speaks to it as a browser would.
#![allow(dead_code)]

pub mod upstream;

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use futures::StreamExt;
use serde_json::Value;
use turnstream_protocol::sse::{Decoder, Frame};
use turnstream_protocol::{Event, HistoryResponse, PostMessageResponse, Snapshot, TurnInfo};

pub type TestResult<T = ()> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// How long any wait in these tests may take before it fails.
pub const DEADLINE: Duration = Duration::from_secs(30);

/// A running server process.
pub struct TestServer {
    pub url: String,
    pub dir: tempfile::TempDir,
    /// The database file, when not the default one in `dir`.
    db: Option<PathBuf>,
    args: Vec<String>,
    child: Option<Child>,
    pub http: reqwest::Client,
}

impl TestServer {
    /// Starts the binary with a fresh database and `extra` flags (demo agent, fast deltas unless
    /// overridden).
    pub fn start(extra: &[&str]) -> TestResult<TestServer> {
        Self::start_with_db(None, extra)
    }

    /// [`TestServer::start`] with the database at `db` (say, on a small filesystem the test
    /// mounted) instead of in the server's temporary folder.
    pub fn start_with_db(db: Option<PathBuf>, extra: &[&str]) -> TestResult<TestServer> {
        let dir = tempfile::tempdir()?;
        let mut args: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
        if !extra.contains(&"--demo-delay-ms") {
            args.extend(["--demo-delay-ms".to_string(), "2".to_string()]);
        }
        let mut s = TestServer {
            url: String::new(),
            dir,
            db,
            args,
            child: None,
            http: reqwest::Client::builder().timeout(DEADLINE).build()?,
        };
        s.spawn()?;
        Ok(s)
    }

    pub fn db_path(&self) -> PathBuf {
        self.db
            .clone()
            .unwrap_or_else(|| self.dir.path().join("turnstream.db"))
    }

    fn spawn(&mut self) -> TestResult {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_turnstream"));
        cmd.arg("serve")
            .arg("--listen")
            .arg("127.0.0.1:0")
            .arg("--db")
            .arg(self.db_path())
            .args(&self.args)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        let mut child = cmd.spawn()?;
        self.url = listening_url(&mut child)?;
        self.child = Some(child);
        Ok(())
    }

    /// SIGKILL: no shutdown code runs.
    pub fn kill9(&mut self) -> TestResult {
        if let Some(mut c) = self.child.take() {
            c.kill()?;
            c.wait()?;
        }
        Ok(())
    }

    /// SIGTERM, then wait for the process to exit (graceful shutdown).
    pub fn terminate(&mut self) -> TestResult<std::process::ExitStatus> {
        let mut c = self.child.take().ok_or("not running")?;
        let status = Command::new("kill")
            .arg("-TERM")
            .arg(c.id().to_string())
            .status()?;
        if !status.success() {
            return Err("kill -TERM failed".into());
        }
        let start = Instant::now();
        loop {
            if let Some(s) = c.try_wait()? {
                return Ok(s);
            }
            if start.elapsed() > DEADLINE {
                c.kill()?;
                return Err("server did not exit after SIGTERM".into());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Starts the binary again on the same database (a new port).
    pub fn restart(&mut self, extra: Option<&[&str]>) -> TestResult {
        self.kill9()?;
        if let Some(extra) = extra {
            self.args = extra.iter().map(|s| s.to_string()).collect();
        }
        self.spawn()
    }

    pub async fn post(
        &self,
        session: &str,
        content: &str,
        cmid: Option<&str>,
    ) -> TestResult<(u16, Value)> {
        let mut body = serde_json::json!({ "content": content });
        if let Some(c) = cmid {
            body["client_message_id"] = c.into();
        }
        let res = self
            .http
            .post(format!("{}/api/sessions/{session}/messages", self.url))
            .json(&body)
            .send()
            .await?;
        Ok((res.status().as_u16(), res.json().await?))
    }

    /// Posts a message that must be accepted.
    pub async fn send(&self, session: &str, content: &str) -> TestResult<PostMessageResponse> {
        let (status, body) = self.post(session, content, None).await?;
        if status != 202 {
            return Err(format!("POST answered {status}: {body}").into());
        }
        Ok(serde_json::from_value(body)?)
    }

    pub async fn history(&self, session: &str) -> TestResult<(HistoryResponse, String)> {
        let res = self
            .http
            .get(format!("{}/api/sessions/{session}/history", self.url))
            .send()
            .await?;
        if res.status() != 200 {
            return Err(format!("history answered {}", res.status()).into());
        }
        let header = res
            .headers()
            .get("x-turnstream-cursor")
            .and_then(|v| v.to_str().ok())
            .ok_or("no X-Turnstream-Cursor")?
            .to_string();
        Ok((res.json().await?, header))
    }

    pub async fn turn(&self, turn: &str) -> TestResult<TurnInfo> {
        let res = self
            .http
            .get(format!("{}/api/turns/{turn}", self.url))
            .send()
            .await?;
        if res.status() != 200 {
            return Err(format!("turn answered {}", res.status()).into());
        }
        Ok(res.json().await?)
    }

    pub async fn get_json(&self, path: &str) -> TestResult<(u16, Value)> {
        let res = self.http.get(format!("{}{path}", self.url)).send().await?;
        let status = res.status().as_u16();
        Ok((status, res.json().await.unwrap_or(Value::Null)))
    }

    /// One of the server's counters (or gauges) from `/metrics`, by its name with any labels.
    pub async fn counter(&self, name: &str) -> TestResult<f64> {
        let text = self
            .http
            .get(format!("{}/metrics", self.url))
            .send()
            .await?
            .text()
            .await?;
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
            .ok_or_else(|| format!("no {name} in /metrics").into())
    }

    pub async fn cancel(&self, turn: &str) -> TestResult<(u16, Value)> {
        let res = self
            .http
            .post(format!("{}/api/turns/{turn}/cancel", self.url))
            .send()
            .await?;
        Ok((res.status().as_u16(), res.json().await?))
    }

    /// Polls the turn until it is terminal.
    pub async fn wait_turn_end(&self, turn: &str) -> TestResult<TurnInfo> {
        wait_for(|| async {
            let t = self.turn(turn).await?;
            Ok(t.state.is_terminal().then_some(t))
        })
        .await
    }

    /// Opens `/api/stream` with the given query and optional `Last-Event-ID`.
    pub async fn stream(&self, query: &str, last_event_id: Option<&str>) -> TestResult<SseClient> {
        let mut req = self.http.get(format!("{}/api/stream?{query}", self.url));
        if let Some(id) = last_event_id {
            req = req.header("Last-Event-ID", id);
        }
        open_stream(req).await
    }
}

/// The server's address, from the first line a `turnstream serve` child prints on stdout.
pub fn listening_url(child: &mut Child) -> TestResult<String> {
    let stdout = child.stdout.take().ok_or("no stdout")?;
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line)?;
    Ok(line
        .trim()
        .strip_prefix("turnstream listening on ")
        .ok_or_else(|| format!("unexpected first line: {line:?}"))?
        .to_string())
}

/// Opens a stream request built by the caller (with its own headers), expecting 200 and SSE.
pub async fn open_stream(req: reqwest::RequestBuilder) -> TestResult<SseClient> {
    // Streams outlive the client's request timeout.
    let res = reqwest::Client::new().execute(req.build()?).await?;
    if res.status() != 200 {
        return Err(format!("stream answered {}", res.status()).into());
    }
    let ct = res
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    if !ct.starts_with("text/event-stream") {
        return Err(format!("stream content-type {ct:?}").into());
    }
    Ok(SseClient {
        body: Box::pin(res.bytes_stream()),
        decoder: Decoder::new(),
        queue: Default::default(),
        pending_bytes: Vec::new(),
        ended: false,
    })
}

impl Drop for TestServer {
    fn drop(&mut self) {
        let _ = self.kill9();
    }
}

type ByteStream =
    std::pin::Pin<Box<dyn futures::Stream<Item = reqwest::Result<bytes::Bytes>> + Send>>;

/// A native EventSource-like reader.
pub struct SseClient {
    body: ByteStream,
    decoder: Decoder,
    queue: std::collections::VecDeque<Frame>,
    pending_bytes: Vec<u8>,
    pub ended: bool,
}

impl SseClient {
    /// The next frame, or `None` when the server closed the stream. Fails after [`DEADLINE`].
    pub async fn next(&mut self) -> TestResult<Option<Frame>> {
        self.next_within(DEADLINE).await
    }

    pub async fn next_within(&mut self, limit: Duration) -> TestResult<Option<Frame>> {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            if let Some(f) = self.queue.pop_front() {
                return Ok(Some(f));
            }
            if self.ended {
                return Ok(None);
            }
            let chunk = tokio::time::timeout_at(deadline, self.body.next())
                .await
                .map_err(|_| "timed out waiting for an SSE frame")?;
            match chunk {
                Some(bytes) => {
                    self.pending_bytes.extend_from_slice(&bytes?);
                    let valid = match std::str::from_utf8(&self.pending_bytes) {
                        Ok(s) => s.len(),
                        Err(e) => e.valid_up_to(),
                    };
                    let text: Vec<u8> = self.pending_bytes.drain(..valid).collect();
                    let text = String::from_utf8(text)?;
                    self.queue.extend(self.decoder.feed(&text));
                }
                None => self.ended = true,
            }
        }
    }

    /// The next journaled event (skipping control frames other than resync, which is an error).
    pub async fn next_event(&mut self) -> TestResult<Event> {
        loop {
            let f = self.next().await?.ok_or("stream ended")?;
            match f.event.as_str() {
                "snapshot" => continue,
                "history_resync_required" => {
                    return Err(format!("unexpected resync: {}", f.data).into())
                }
                _ => {
                    let e: Event = serde_json::from_str(&f.data)?;
                    if f.id.as_deref() != Some(e.id.as_str()) {
                        return Err(format!("id line {:?} != data id {}", f.id, e.id).into());
                    }
                    if e.body.kind() != f.event {
                        return Err(
                            format!("event name {} != kind {}", f.event, e.body.kind()).into()
                        );
                    }
                    return Ok(e);
                }
            }
        }
    }

    /// The snapshot frame, which must come first.
    pub async fn snapshot(&mut self) -> TestResult<Snapshot> {
        let f = self
            .next()
            .await?
            .ok_or("stream ended before the snapshot")?;
        if f.event != "snapshot" || f.id.is_some() {
            return Err(format!("expected an id-less snapshot first, got {f:?}").into());
        }
        Ok(serde_json::from_str(&f.data)?)
    }

    /// Reads events until (and including) the `turn_ended` of `turn`.
    pub async fn until_turn_ended(&mut self, turn: &str) -> TestResult<Vec<Event>> {
        let mut out = Vec::new();
        loop {
            let e = self.next_event().await?;
            let done = e.turn_id.as_deref() == Some(turn) && e.body.kind() == "turn_ended";
            out.push(e);
            if done {
                return Ok(out);
            }
        }
    }

    /// Expects a resync frame with `reason`, then the end of the stream.
    pub async fn expect_resync(&mut self, reason: &str) -> TestResult {
        let f = self.next().await?.ok_or("stream ended without a resync")?;
        if f.event != "history_resync_required" {
            return Err(format!("expected resync, got {f:?}").into());
        }
        if f.id.is_some() {
            return Err("resync frame carries an id".into());
        }
        let v: Value = serde_json::from_str(&f.data)?;
        if v["reason"] != reason {
            return Err(format!("resync reason {} != {reason}", v["reason"]).into());
        }
        match self.next().await? {
            None => Ok(()),
            Some(f) => Err(format!("stream went on after resync: {f:?}").into()),
        }
    }
}

/// Polls `check` until it yields a value, failing after [`DEADLINE`].
pub async fn wait_for<T, F, Fut>(mut check: F) -> TestResult<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = TestResult<Option<T>>>,
{
    let start = Instant::now();
    loop {
        if let Some(v) = check().await? {
            return Ok(v);
        }
        if start.elapsed() > DEADLINE {
            return Err("condition not met before the deadline".into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Concatenated response deltas of `turn` in `events`.
pub fn reply_text(events: &[Event], turn: &str) -> String {
    events
        .iter()
        .filter(|e| e.turn_id.as_deref() == Some(turn))
        .filter_map(|e| match &e.body {
            turnstream_protocol::EventBody::ResponseDelta { delta } => Some(delta.as_str()),
            _ => None,
        })
        .collect()
}

pub fn seq(e: &Event) -> i64 {
    turnstream_protocol::cursor::sequence_of(&e.id).unwrap_or(-1)
}

/// `x1 x2 ... xN ` as the demo agent's `/deltas N` replies.
pub fn deltas_text(n: usize) -> String {
    (1..=n).map(|i| format!("x{i} ")).collect()
}
