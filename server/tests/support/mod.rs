//! Test support: the real `turnstream` binary on port 0 with a temporary database, and an HTTP
//! and SSE client that speaks to it as a browser would.
//!
//! On PostgreSQL (`TURNSTREAM_TEST_DATABASE_URL`, see [`pg`]) each server gets a fresh database
//! of its own instead of a SQLite file, and with `TURNSTREAM_TEST_NODES=N` (N > 1) it is N
//! processes on that database behind a round-robin proxy ([`cluster`]): every request and every
//! stream (re)connect goes to another node.
#![allow(dead_code)]

pub mod cluster;
pub mod pg;
pub mod upstream;
pub mod worker_api;

use std::io::{BufRead, BufReader};
use std::ops::{Deref, DerefMut};
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

/// Where requests go: a server (through the proxy when it has several nodes) or one node of it.
/// A [`TestServer`] dereferences to its own, so `s.url`, `s.http` and `s.send(..)` work on it.
#[derive(Clone)]
pub struct Api {
    pub url: String,
    pub http: reqwest::Client,
}

/// One server process.
struct Node {
    url: String,
    child: Option<Child>,
}

/// A running server: one process, or on PostgreSQL with `TURNSTREAM_TEST_NODES` (or
/// [`TestServer::start_nodes`]) several sharing one database behind a round-robin proxy.
pub struct TestServer {
    api: Api,
    pub dir: tempfile::TempDir,
    /// The database file, when not the default one in `dir`.
    db: Option<PathBuf>,
    /// The PostgreSQL database, when the tests run on PostgreSQL.
    database: Option<pg::TestDatabase>,
    args: Vec<String>,
    nodes: Vec<Node>,
    proxy: Option<cluster::Proxy>,
}

impl Deref for TestServer {
    type Target = Api;
    fn deref(&self) -> &Api {
        &self.api
    }
}

/// A test may swap the client (say, for one that sends a key with every request).
impl DerefMut for TestServer {
    fn deref_mut(&mut self) -> &mut Api {
        &mut self.api
    }
}

impl TestServer {
    /// Starts the binary with a fresh database and `extra` flags (demo agent, fast deltas unless
    /// overridden).
    pub fn start(extra: &[&str]) -> TestResult<TestServer> {
        Self::start_with_db(None, extra)
    }

    /// [`TestServer::start`] with the database at `db` (say, on a small filesystem the test
    /// mounted) instead of in the server's temporary folder.
    ///
    /// On PostgreSQL a given `db` still means that SQLite file, with one process.
    pub fn start_with_db(db: Option<PathBuf>, extra: &[&str]) -> TestResult<TestServer> {
        let nodes = if db.is_some() { 1 } else { pg::nodes() };
        Self::launch(db, nodes, extra)
    }

    /// `n` processes on one fresh PostgreSQL database, behind a round-robin proxy at `url` when
    /// `n` > 1 (see [`TestServer::node`] to address one). Needs `TURNSTREAM_TEST_DATABASE_URL`.
    pub fn start_nodes(n: usize, extra: &[&str]) -> TestResult<TestServer> {
        if pg::admin_url().is_none() {
            return Err(
                "several nodes need PostgreSQL: TURNSTREAM_TEST_DATABASE_URL is unset".into(),
            );
        }
        Self::launch(None, n.max(1), extra)
    }

    fn launch(db: Option<PathBuf>, n: usize, extra: &[&str]) -> TestResult<TestServer> {
        let dir = tempfile::tempdir()?;
        let mut args: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
        if !extra.contains(&"--demo-delay-ms") {
            args.extend(["--demo-delay-ms".to_string(), "2".to_string()]);
        }
        let database = match (&db, pg::admin_url()) {
            (None, Some(admin)) => Some(pg::TestDatabase::create(&admin)?),
            _ => None,
        };
        // Idle connections are dropped well before the server's header deadline (10 s), which
        // closes a kept-alive connection waiting for its next request: a request sent on one
        // just as the server closes it fails with an incomplete message.
        let mut http = reqwest::Client::builder()
            .timeout(DEADLINE)
            .pool_idle_timeout(Duration::from_secs(5));
        let proxy = if n > 1 {
            // No idle connection is kept, so each request opens one and the proxy sends it to
            // the next node.
            http = http.pool_max_idle_per_host(0);
            Some(cluster::Proxy::start(n)?)
        } else {
            None
        };
        let mut s = TestServer {
            api: Api {
                url: String::new(),
                http: http.build()?,
            },
            dir,
            db,
            database,
            args,
            nodes: (0..n)
                .map(|_| Node {
                    url: String::new(),
                    child: None,
                })
                .collect(),
            proxy,
        };
        s.spawn()?;
        Ok(s)
    }

    pub fn db_path(&self) -> PathBuf {
        self.db
            .clone()
            .unwrap_or_else(|| self.dir.path().join("turnstream.db"))
    }

    /// The PostgreSQL URL the nodes are given, when the tests run on PostgreSQL.
    pub fn database_url(&self) -> Option<&str> {
        self.database.as_ref().map(|d| d.url.as_str())
    }

    /// Starts every node that is not running.
    fn spawn(&mut self) -> TestResult {
        for i in 0..self.nodes.len() {
            if self.nodes[i].child.is_none() {
                self.spawn_node(i)?;
            }
        }
        Ok(())
    }

    fn spawn_node(&mut self, i: usize) -> TestResult {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_turnstream"));
        cmd.arg("serve")
            .arg("--listen")
            .arg("127.0.0.1:0")
            .arg("--db");
        match &self.database {
            Some(d) => cmd.arg(&d.server_url),
            None => cmd.arg(self.db_path()),
        };
        if let (Some(d), true) = (&self.database, pg::listen_direct()) {
            cmd.arg("--database-listen-url").arg(&d.url);
        }
        cmd.args(&self.args)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        let mut child = cmd.spawn()?;
        let url = match listening_url(&mut child) {
            Ok(url) => url,
            Err(e) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(e);
            }
        };
        match &self.proxy {
            Some(p) => {
                p.set(i, Some(cluster::socket_addr(&url)?));
                self.api.url = p.url.clone();
            }
            None => self.api.url = url.clone(),
        }
        self.nodes[i] = Node {
            url,
            child: Some(child),
        };
        Ok(())
    }

    /// SIGKILL: no shutdown code runs (every node).
    pub fn kill9(&mut self) -> TestResult {
        for i in 0..self.nodes.len() {
            self.kill9_node(i)?;
        }
        Ok(())
    }

    /// SIGTERM, then wait for the process to exit (graceful shutdown). With several nodes, all
    /// are sent SIGTERM at once; the answer is the first unsuccessful exit, else the first.
    pub fn terminate(&mut self) -> TestResult<std::process::ExitStatus> {
        let running: Vec<usize> = (0..self.nodes.len())
            .filter(|i| self.nodes[*i].child.is_some())
            .collect();
        if running.is_empty() {
            return Err("not running".into());
        }
        let mut children = Vec::new();
        for i in running {
            let c = self.take_node(i).ok_or("not running")?;
            let status = Command::new("kill")
                .arg("-TERM")
                .arg(c.id().to_string())
                .status()?;
            if !status.success() {
                return Err("kill -TERM failed".into());
            }
            children.push(c);
        }
        let start = Instant::now();
        let mut statuses = Vec::new();
        for mut c in children {
            loop {
                if let Some(s) = c.try_wait()? {
                    statuses.push(s);
                    break;
                }
                if start.elapsed() > DEADLINE {
                    c.kill()?;
                    return Err("server did not exit after SIGTERM".into());
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        let first = statuses[0];
        Ok(statuses.into_iter().find(|s| !s.success()).unwrap_or(first))
    }

    /// Starts the binary again on the same database (a new port; every node).
    pub fn restart(&mut self, extra: Option<&[&str]>) -> TestResult {
        self.kill9()?;
        if let Some(extra) = extra {
            self.args = extra.iter().map(|s| s.to_string()).collect();
        }
        self.spawn()
    }

    /// How many nodes this server has (running or not).
    pub fn node_count(&self) -> usize {
        self.nodes.len()
    }

    /// Each node's own URL (the last one it had, when it is down).
    pub fn node_urls(&self) -> Vec<String> {
        self.nodes.iter().map(|n| n.url.clone()).collect()
    }

    /// Requests to node `i` only, bypassing the proxy.
    pub fn node(&self, i: usize) -> Api {
        Api {
            url: self.nodes.get(i).map(|n| n.url.clone()).unwrap_or_default(),
            http: self.api.http.clone(),
        }
    }

    pub fn node_running(&self, i: usize) -> bool {
        self.nodes.get(i).is_some_and(|n| n.child.is_some())
    }

    /// Takes node `i`'s process out of the rotation.
    fn take_node(&mut self, i: usize) -> Option<Child> {
        if let Some(p) = &self.proxy {
            p.set(i, None);
        }
        self.nodes.get_mut(i)?.child.take()
    }

    /// SIGKILL of node `i` only; the proxy sends no new connection to it.
    pub fn kill9_node(&mut self, i: usize) -> TestResult {
        if let Some(mut c) = self.take_node(i) {
            c.kill()?;
            c.wait()?;
        }
        Ok(())
    }

    /// Starts node `i` again (after [`TestServer::kill9_node`]) on the same database, a new port.
    pub fn start_node(&mut self, i: usize) -> TestResult {
        if i >= self.nodes.len() {
            return Err(format!("no node {i}").into());
        }
        self.kill9_node(i)?;
        self.spawn_node(i)
    }

    /// One of the server's counters (or gauges) from `/metrics`, by its name with any labels;
    /// with several nodes, the sum over the running ones.
    pub async fn counter(&self, name: &str) -> TestResult<f64> {
        if self.nodes.len() == 1 {
            return self.api.counter(name).await;
        }
        let mut sum = 0.0;
        for i in 0..self.nodes.len() {
            if self.node_running(i) {
                sum += self.node(i).counter(name).await?;
            }
        }
        Ok(sum)
    }
}

impl Api {
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

    /// POSTs `body` as JSON to `path`: the status and the JSON answer (`null` when none).
    pub async fn post_json(&self, path: &str, body: &Value) -> TestResult<(u16, Value)> {
        let res = self
            .http
            .post(format!("{}{path}", self.url))
            .json(body)
            .send()
            .await?;
        Ok((
            res.status().as_u16(),
            res.json().await.unwrap_or(Value::Null),
        ))
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

    /// Opens `/api/stream` with the given query and optional `Last-Event-ID`, asking for an
    /// event stream as `EventSource` does (`open_stream` with a request of one's own leaves the
    /// header out: the server then streams through its general HTTP/1.1 path).
    pub async fn stream(&self, query: &str, last_event_id: Option<&str>) -> TestResult<SseClient> {
        let mut req = self
            .http
            .get(format!("{}/api/stream?{query}", self.url))
            .header("accept", "text/event-stream");
        if let Some(id) = last_event_id {
            req = req.header("Last-Event-ID", id);
        }
        open_stream(req).await
    }

    /// A stream whose socket's receive buffer is fixed at 4 KB (no autotuning, which on
    /// loopback may grow to tens of MB): a reader that stops reading stalls the server's
    /// writes after a bounded number of bytes, whatever the kernel's settings.
    pub async fn stream_with_small_window(&self, query: &str) -> TestResult<SseClient> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let host = self
            .url
            .strip_prefix("http://")
            .ok_or("a plain HTTP server is needed")?;
        let addr = tokio::net::lookup_host(host)
            .await?
            .next()
            .ok_or("no address")?;
        let socket = if addr.is_ipv4() {
            tokio::net::TcpSocket::new_v4()?
        } else {
            tokio::net::TcpSocket::new_v6()?
        };
        socket.set_recv_buffer_size(4096)?;
        let mut conn = socket.connect(addr).await?;
        // HTTP/1.0: the body is delimited by the connection's end, not chunked.
        let request = format!(
            "GET /api/stream?{query} HTTP/1.0\r\nHost: {host}\r\nAccept: text/event-stream\r\n\r\n"
        );
        conn.write_all(request.as_bytes()).await?;
        let mut head = Vec::new();
        let body_start = loop {
            let mut buf = [0u8; 1024];
            let n = tokio::time::timeout(DEADLINE, conn.read(&mut buf))
                .await
                .map_err(|_| "no response head")??;
            if n == 0 {
                return Err("closed before the response head".into());
            }
            head.extend_from_slice(&buf[..n]);
            if let Some(end) = head.windows(4).position(|w| w == b"\r\n\r\n") {
                break end + 4;
            }
        };
        let status = String::from_utf8_lossy(&head[..body_start]).into_owned();
        if !status.starts_with("HTTP/1.0 200") && !status.starts_with("HTTP/1.1 200") {
            return Err(format!("stream answered {status:?}").into());
        }
        let first = bytes::Bytes::copy_from_slice(&head[body_start..]);
        let rest = futures::stream::unfold(conn, |mut conn| async move {
            let mut buf = vec![0u8; 4096];
            match conn.read(&mut buf).await {
                Ok(0) => None,
                Ok(n) => {
                    buf.truncate(n);
                    Some((Ok(bytes::Bytes::from(buf)), conn))
                }
                Err(e) => Some((Err(e.into()), conn)),
            }
        });
        Ok(SseClient::over(Box::pin(
            futures::stream::iter([Ok(first)]).chain(rest),
        )))
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
    Ok(SseClient::over(Box::pin(
        res.bytes_stream().map(|chunk| chunk.map_err(Into::into)),
    )))
}

impl Drop for TestServer {
    fn drop(&mut self) {
        let _ = self.kill9();
        // Then the proxy, then the database (once nothing uses it).
        self.proxy.take();
        self.database.take();
    }
}

type ByteStream = std::pin::Pin<Box<dyn futures::Stream<Item = TestResult<bytes::Bytes>> + Send>>;

/// A native EventSource-like reader.
pub struct SseClient {
    body: ByteStream,
    decoder: Decoder,
    queue: std::collections::VecDeque<Frame>,
    pending_bytes: Vec<u8>,
    pub ended: bool,
}

impl SseClient {
    fn over(body: ByteStream) -> SseClient {
        SseClient {
            body,
            decoder: Decoder::new(),
            queue: Default::default(),
            pending_bytes: Vec::new(),
            ended: false,
        }
    }

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

/// The epoch part of a cursor (`<epoch>-<sequence>`).
pub fn epoch_of(cursor: &str) -> TestResult<String> {
    let (epoch, _) = cursor
        .rsplit_once('-')
        .ok_or_else(|| format!("cursor {cursor:?} has no epoch"))?;
    Ok(epoch.to_string())
}

/// The sequence part of a cursor.
pub fn cursor_seq(cursor: &str) -> TestResult<i64> {
    turnstream_protocol::cursor::sequence_of(cursor)
        .ok_or_else(|| format!("cursor {cursor:?} does not parse").into())
}

impl Api {
    /// Every event of `session` from `<epoch>-0` up to the head, read through this API (the head
    /// must be an event of this session: use it where the journal holds only this session's).
    pub async fn replay_session(&self, session: &str) -> TestResult<Vec<Event>> {
        let (_, cursor) = self.history(session).await?;
        let head = cursor_seq(&cursor)?;
        let mut out = Vec::new();
        if head == 0 {
            return Ok(out);
        }
        let epoch = epoch_of(&cursor)?;
        let mut st = self
            .stream(&format!("session={session}&cursor={epoch}-0"), None)
            .await?;
        loop {
            let e = st.next_event().await?;
            let done = seq(&e) >= head;
            out.push(e);
            if done {
                return Ok(out);
            }
        }
    }
}

pub fn seq(e: &Event) -> i64 {
    turnstream_protocol::cursor::sequence_of(&e.id).unwrap_or(-1)
}

/// `x1 x2 ... xN ` as the demo agent's `/deltas N` replies.
pub fn deltas_text(n: usize) -> String {
    (1..=n).map(|i| format!("x{i} ")).collect()
}
