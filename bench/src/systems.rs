//! The systems under test behind one interface: start one, publish to a stream, read a stream
//! from a position, and learn a stream's head position, so every figure measures each system
//! the same way.
//!
//! A "position" is whatever the system resumes from: turnstream's cursor (`Last-Event-ID`), the
//! ring baseline's sequence number, a durable-streams byte offset, or a resumable-stream
//! character count.

use std::fmt;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};

use crate::h2client::{self, H2Client, H2Stream};
use crate::procs::{self, Proc};
use crate::rawhttp;
use crate::sse::{Frame, Splitter};
use crate::stats::unix_us;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Turnstream,
    Ring,
    DurableStreams,
    Resumable,
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Kind::Turnstream => "turnstream",
            Kind::Ring => "ring",
            Kind::DurableStreams => "durable-streams",
            Kind::Resumable => "resumable-stream",
        })
    }
}

/// Where a reader starts.
#[derive(Debug, Clone)]
pub enum Resume {
    /// Everything the stream holds.
    Start,
    /// Only what is published from now on.
    Now,
    /// After this position.
    At(String),
}

/// A started system and an HTTP client to talk to it.
pub struct System {
    pub kind: Kind,
    pub proc: Proc,
    pub http: reqwest::Client,
    /// Processes it depends on (Redis for resumable-stream).
    aux: Vec<Proc>,
    _dir: tempfile::TempDir,
    epoch: String,
    /// Streams are opened over HTTP/2 with TLS (turnstream with `--tls-cert`), not HTTP/1.1.
    h2: Option<H2Client>,
}

/// An HTTP client for many concurrent long-lived streams: no pooled-connection cap, HTTP/1.1
/// only (each SSE stream holds one connection, as a browser's EventSource does).
pub fn client() -> Result<reqwest::Client> {
    Ok(reqwest::Client::builder()
        .http1_only()
        .pool_idle_timeout(Duration::from_secs(30))
        .connect_timeout(Duration::from_secs(30))
        .tcp_nodelay(true)
        .build()?)
}

/// [`client`] for a server with the bench's self-signed certificate.
fn tls_client() -> Result<reqwest::Client> {
    Ok(reqwest::Client::builder()
        .http1_only()
        .danger_accept_invalid_certs(true)
        .pool_idle_timeout(Duration::from_secs(30))
        .connect_timeout(Duration::from_secs(30))
        .tcp_nodelay(true)
        .build()?)
}

impl System {
    /// Starts turnstream's release binary with the demo agent and no artificial delays, each
    /// delta its own event (`--coalesce-ms 0`, unless `extra` sets it), plus `extra` flags.
    pub async fn turnstream(extra: &[&str]) -> Result<System> {
        Self::turnstream_with(None, extra, None).await
    }

    /// [`System::turnstream`] on the PostgreSQL database at `database_url` (`None`: a fresh
    /// SQLite file). Several systems started on one URL share the journal (a cluster).
    pub async fn turnstream_on(database_url: Option<&str>, extra: &[&str]) -> Result<System> {
        Self::turnstream_with(database_url, extra, None).await
    }

    /// [`System::turnstream`] serving HTTPS with a fresh self-signed certificate; its streams
    /// are read over HTTP/2, laid onto TLS connections as `mode` says.
    pub async fn turnstream_h2(mode: h2client::Mode) -> Result<System> {
        Self::turnstream_with(None, &[], Some(mode)).await
    }

    /// [`System::turnstream_h2`] with more arguments to `turnstream serve`.
    pub async fn turnstream_h2_with(mode: h2client::Mode, extra: &[&str]) -> Result<System> {
        Self::turnstream_with(None, extra, Some(mode)).await
    }

    async fn turnstream_with(
        database_url: Option<&str>,
        extra: &[&str],
        h2: Option<h2client::Mode>,
    ) -> Result<System> {
        let bin = procs::turnstream_binary()?;
        let dir = procs::scratch_dir("turnstream-")?;
        let mut cmd = Command::new(bin);
        cmd.arg("serve");
        if h2.is_some() {
            let ck = rcgen::generate_simple_self_signed(vec!["localhost".to_string()])?;
            let (cert, key) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
            std::fs::write(&cert, ck.cert.pem())?;
            std::fs::write(&key, ck.signing_key.serialize_pem())?;
            cmd.arg("--tls-cert").arg(&cert).arg("--tls-key").arg(&key);
        }
        cmd.args(["--listen", "127.0.0.1:0", "--db"]);
        match database_url {
            Some(url) => cmd.arg(url),
            None => cmd.arg(dir.path().join("ts.db")),
        };
        cmd.args(["--demo-delay-ms", "0"]);
        // Each delta its own event, unless the figure sets the window itself.
        if !extra.contains(&"--coalesce-ms") {
            cmd.args(["--coalesce-ms", "0"]);
        }
        cmd
            // Every bench client is on loopback: thousands of connections from one address, so
            // the per-address and per-client limits are off.
            .args([
                "--max-connections-per-ip",
                "0",
                "--messages-per-minute",
                "0",
            ])
            .args(["--max-streams-per-client", "0"])
            .args(extra)
            .env("RUST_LOG", "warn");
        let (ready, http) = match h2 {
            Some(_) => ("https://", tls_client()?),
            None => ("http://", client()?),
        };
        // Nodes of one PostgreSQL database run side by side: each keeps a log of its own.
        let log = match database_url {
            None => log_path("turnstream")?,
            Some(_) => {
                static NODE: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
                let n = NODE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                log_path(&format!("turnstream-pg-{n}"))?
            }
        };
        let proc = procs::spawn("turnstream", cmd, &log, ready, None)?;
        let h2 = match h2 {
            Some(mode) => Some(H2Client::new(&proc.url, mode)?),
            None => None,
        };
        let mut sys = System {
            kind: Kind::Turnstream,
            proc,
            http,
            aux: Vec::new(),
            _dir: dir,
            epoch: String::new(),
            h2,
        };
        let head = sys.head("probe").await?;
        sys.epoch = head
            .rsplit_once('-')
            .map(|(e, _)| e.to_string())
            .ok_or_else(|| anyhow!("unexpected cursor {head:?}"))?;
        Ok(sys)
    }

    /// The in-memory ring-buffer baseline: this binary's hidden `ring-server` subcommand.
    pub async fn ring() -> Result<System> {
        let dir = procs::scratch_dir("ring-")?;
        let mut cmd = Command::new(std::env::current_exe()?);
        cmd.args(["ring-server", "--listen", "127.0.0.1:0"]);
        let proc = procs::spawn("ring", cmd, &log_path("ring")?, "http://", None)?;
        Ok(System {
            kind: Kind::Ring,
            proc,
            http: client()?,
            aux: Vec::new(),
            _dir: dir,
            epoch: String::new(),
            h2: None,
        })
    }

    pub async fn durable_streams(bin: &PathBuf) -> Result<System> {
        let dir = procs::scratch_dir("durable-streams-")?;
        // It prints the address it was given, not the one bound: pick the port here.
        let port = procs::free_port()?;
        let mut cmd = Command::new(bin);
        cmd.args(["--host", "127.0.0.1", "--port", &port.to_string()])
            .arg("--data-dir")
            .arg(dir.path().join("data"));
        let proc = procs::spawn(
            "durable-streams",
            cmd,
            &log_path("durable-streams")?,
            "http://",
            Some(format!("http://127.0.0.1:{port}")),
        )?;
        Ok(System {
            kind: Kind::DurableStreams,
            proc,
            http: client()?,
            aux: Vec::new(),
            _dir: dir,
            epoch: String::new(),
            h2: None,
        })
    }

    pub async fn resumable(harness: &PathBuf) -> Result<System> {
        let dir = procs::scratch_dir("resumable-")?;
        let port = procs::free_port()?;
        let mut redis = Command::new("redis-server");
        redis
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--maxclients", "50000"])
            .arg("--dir")
            .arg(dir.path());
        let redis = procs::spawn(
            "redis",
            redis,
            &log_path("redis")?,
            "Ready to accept connections",
            Some(format!("redis://127.0.0.1:{port}")),
        )?;
        let mut node = Command::new("node");
        node.arg(harness)
            .env("REDIS_URL", &redis.url)
            .env("UV_THREADPOOL_SIZE", "4");
        let proc = procs::spawn(
            "resumable-stream",
            node,
            &log_path("resumable")?,
            "http://",
            None,
        )?;
        Ok(System {
            kind: Kind::Resumable,
            proc,
            http: client()?,
            aux: vec![redis],
            _dir: dir,
            epoch: String::new(),
            h2: None,
        })
    }

    /// Resident memory of the system's processes (the server, plus Redis for resumable-stream).
    pub fn rss_kib(&self) -> Result<u64> {
        let mut total = self.proc.rss_kib()?;
        for p in &self.aux {
            total += p.rss_kib()?;
        }
        Ok(total)
    }

    /// CPU seconds used so far by the system's processes.
    pub fn cpu_secs(&self) -> f64 {
        self.proc.cpu_secs() + self.aux.iter().map(Proc::cpu_secs).sum::<f64>()
    }

    fn url(&self, path: &str) -> String {
        format!("{}{}", self.proc.url, path)
    }

    /// Creates a stream where the system needs that (durable-streams, resumable-stream).
    pub async fn prepare(&self, stream: &str) -> Result<()> {
        let req = match self.kind {
            Kind::Turnstream | Kind::Ring => return Ok(()),
            Kind::DurableStreams => self
                .http
                .put(self.url(&format!("/{stream}")))
                .header("content-type", "application/json"),
            Kind::Resumable => self
                .http
                .post(self.url(&format!("/streams/{stream}/start"))),
        };
        let res = req.send().await?;
        if !res.status().is_success() {
            bail!("{}: creating stream {stream}: {}", self.kind, res.status());
        }
        Ok(())
    }

    /// Publishes one chat "message" stamped with `marker_us`: five events per message on every
    /// system, the shape of a short turn (message, queued, started, one delta, ended). On
    /// turnstream it is a real message whose turn the demo agent runs (`/echo`).
    pub async fn publish_message(&self, stream: &str, marker_us: u64) -> Result<()> {
        let marker = format!("@T{marker_us}@");
        let req = match self.kind {
            Kind::Turnstream => self
                .http
                .post(self.url(&format!("/api/sessions/{stream}/messages")))
                .header("content-type", "application/json")
                .body(serde_json::json!({ "content": format!("/echo {marker}") }).to_string()),
            Kind::Ring => self
                .http
                .post(self.url(&format!("/publish/{stream}?shape=turn")))
                .body(marker),
            Kind::DurableStreams => {
                let records = serde_json::json!([
                    {"kind": "message_received", "message": {"role": "user", "content": marker}},
                    {"kind": "turn_queued"},
                    {"kind": "turn_started"},
                    {"kind": "response_delta", "delta": marker},
                    {"kind": "turn_ended", "state": "completed", "message": {"role": "assistant", "content": marker}},
                ]);
                self.http
                    .post(self.url(&format!("/{stream}")))
                    .header("content-type", "application/json")
                    .body(records.to_string())
            }
            Kind::Resumable => {
                let mut chunk = String::new();
                for (kind, body) in [
                    (
                        "message_received",
                        format!("{{\"message\":{{\"role\":\"user\",\"content\":\"{marker}\"}}}}"),
                    ),
                    ("turn_queued", "{}".into()),
                    ("turn_started", "{}".into()),
                    ("response_delta", format!("{{\"delta\":\"{marker}\"}}")),
                    (
                        "turn_ended",
                        format!(
                            "{{\"state\":\"completed\",\"message\":{{\"content\":\"{marker}\"}}}}"
                        ),
                    ),
                ] {
                    chunk.push_str(&format!("event: {kind}\ndata: {body}\n\n"));
                }
                self.http
                    .post(self.url(&format!("/streams/{stream}/append")))
                    .body(chunk)
            }
        };
        let res = req.send().await?;
        if !res.status().is_success() {
            let status = res.status();
            let body = res.text().await.unwrap_or_default();
            let body: String = body.chars().take(200).collect();
            bail!("{}: publish to {stream}: {status} {body}", self.kind);
        }
        Ok(())
    }

    /// Appends one chunk of text as one event (not on turnstream, whose chunks come from its
    /// agent).
    pub async fn publish_chunk(&self, stream: &str, text: &str) -> Result<()> {
        let req = match self.kind {
            Kind::Turnstream => bail!("turnstream chunks come from its agent"),
            Kind::Ring => self
                .http
                .post(self.url(&format!("/publish/{stream}")))
                .body(text.to_string()),
            Kind::DurableStreams => self
                .http
                .post(self.url(&format!("/{stream}")))
                .header("content-type", "application/json")
                .body(serde_json::json!({ "kind": "response_delta", "delta": text }).to_string()),
            Kind::Resumable => self
                .http
                .post(self.url(&format!("/streams/{stream}/append")))
                .body(format!(
                    "event: response_delta\ndata: {}\n\n",
                    serde_json::json!({ "delta": text })
                )),
        };
        let res = req.send().await?;
        if !res.status().is_success() {
            bail!("{}: append to {stream}: {}", self.kind, res.status());
        }
        Ok(())
    }

    /// The position a reader would resume from to get only what is published after now.
    pub async fn head(&self, stream: &str) -> Result<String> {
        match self.kind {
            Kind::Turnstream => {
                let res = self
                    .http
                    .get(self.url(&format!("/api/sessions/{stream}/history?limit=1")))
                    .send()
                    .await?;
                let cursor = res
                    .headers()
                    .get("x-turnstream-cursor")
                    .and_then(|v| v.to_str().ok())
                    .ok_or_else(|| anyhow!("history has no cursor header ({})", res.status()))?;
                Ok(cursor.to_string())
            }
            Kind::Ring => Ok(self
                .http
                .get(self.url(&format!("/head/{stream}")))
                .send()
                .await?
                .text()
                .await?),
            Kind::DurableStreams => {
                let res = self
                    .http
                    .head(self.url(&format!("/{stream}")))
                    .send()
                    .await?;
                Ok(res
                    .headers()
                    .get("stream-next-offset")
                    .and_then(|v| v.to_str().ok())
                    .ok_or_else(|| anyhow!("HEAD has no stream-next-offset ({})", res.status()))?
                    .to_string())
            }
            Kind::Resumable => Ok(self
                .http
                .get(self.url(&format!("/streams/{stream}/length")))
                .send()
                .await?
                .text()
                .await?),
        }
    }

    /// The position `n` events before the head on a system whose positions count events (the
    /// turnstream journal ids of a session that is alone in the journal, the ring's seq).
    pub fn back_by(&self, head: &str, n: u64) -> Result<String> {
        match self.kind {
            Kind::Turnstream => {
                let (epoch, seq) = head
                    .rsplit_once('-')
                    .ok_or_else(|| anyhow!("bad cursor {head}"))?;
                let seq: u64 = seq.parse().context("bad cursor")?;
                Ok(format!("{epoch}-{}", seq.saturating_sub(n)))
            }
            Kind::Ring => {
                let seq: u64 = head.trim().parse().context("bad seq")?;
                Ok(seq.saturating_sub(n).to_string())
            }
            _ => bail!("{} positions are not event counts", self.kind),
        }
    }

    /// Opens a reader of `stream`; returns once the response headers arrived.
    pub async fn open(&self, stream: &str, resume: &Resume) -> Result<Reader> {
        let mut last_event_id = None;
        let mut base = 0;
        let path = match (self.kind, resume) {
            (Kind::Turnstream, Resume::Start) => {
                format!("/api/stream?session={stream}&cursor={}-0", self.epoch)
            }
            (Kind::Turnstream, Resume::Now) => format!("/api/stream?session={stream}"),
            (Kind::Turnstream, Resume::At(c)) => {
                last_event_id = Some(c.clone());
                format!("/api/stream?session={stream}")
            }
            (Kind::Ring, Resume::Start) => format!("/stream/{stream}?since=0"),
            (Kind::Ring, Resume::Now) => format!("/stream/{stream}"),
            (Kind::Ring, Resume::At(s)) => {
                last_event_id = Some(s.clone());
                format!("/stream/{stream}")
            }
            (Kind::DurableStreams, r) => {
                let offset = match r {
                    Resume::Start => "-1",
                    Resume::Now => "now",
                    Resume::At(o) => o.as_str(),
                };
                format!("/{stream}?offset={offset}&live=sse")
            }
            (Kind::Resumable, r) => {
                // resumable-stream has no "from now": a reader always replays from a character
                // offset, so "now" is the start (the figures attach before publishing).
                base = match r {
                    Resume::At(n) => n.parse().context("bad character offset")?,
                    _ => 0,
                };
                format!("/streams/{stream}?resumeAt={base}")
            }
        };
        let conn = match &self.h2 {
            Some(h2) => Body::H2(
                h2.get(&path, last_event_id.as_deref())
                    .await
                    .with_context(|| format!("{} over HTTP/2: open {stream}", self.kind))?,
            ),
            None => Body::Http1(
                rawhttp::get(&self.proc.url, &path, last_event_id.as_deref())
                    .await
                    .with_context(|| format!("{}: open {stream}", self.kind))?,
            ),
        };
        let mut reader = Reader {
            kind: self.kind,
            conn,
            splitter: Splitter::new(),
            base,
            pos: None,
            arrived: unix_us(),
        };
        // Bytes that came with the headers are part of the stream.
        if let Body::Http1(conn) = &mut reader.conn {
            let early = conn.take_early()?;
            reader.splitter.push(&early);
        }
        Ok(reader)
    }
}

fn log_path(name: &str) -> Result<PathBuf> {
    Ok(procs::bench_dir()?.join("logs").join(format!("{name}.log")))
}

/// A stream's response body, over HTTP/1.1 or HTTP/2.
enum Body {
    Http1(rawhttp::Conn),
    H2(H2Stream),
}

impl Body {
    async fn read_into(&mut self, out: &mut Splitter) -> Result<bool> {
        match self {
            Body::Http1(c) => c.read_into(out).await,
            Body::H2(s) => s.read_into(out).await,
        }
    }
}

/// What a reader received until a position: events, the SSE frames carrying them, and bytes.
#[derive(Debug, Default, Clone, Copy)]
pub struct Received {
    pub events: u64,
    pub frames: u64,
    pub bytes: u64,
}

/// An open stream.
pub struct Reader {
    kind: Kind,
    conn: Body,
    splitter: Splitter,
    /// resumable-stream: the character offset this reader started at.
    base: u64,
    /// The position after the last frame read.
    pub pos: Option<String>,
    /// When the last read returned (unix µs): the arrival time of the frames it completed.
    arrived: u64,
}

impl Reader {
    /// Reads frames until `f` returns false or the stream ends. `f` gets each frame and the
    /// arrival time (unix µs) of the bytes that completed it.
    pub async fn read(&mut self, mut f: impl FnMut(&Frame, u64) -> bool) -> Result<()> {
        loop {
            while let Some(frame) = self.splitter.next_frame() {
                self.track(&frame);
                if !f(&frame, self.arrived) {
                    return Ok(());
                }
            }
            if !self.conn.read_into(&mut self.splitter).await? {
                return Ok(());
            }
            self.arrived = unix_us();
        }
    }

    /// Reads until the reader's position is `target` (the last missed event); returns how many
    /// events arrived on the way, in how many SSE frames, and the stream's bytes up to the last.
    pub async fn read_until(&mut self, target: &str) -> Result<Received> {
        let mut events = 0u64;
        let mut frames = 0u64;
        let start = self.splitter.consumed();
        loop {
            while let Some(frame) = self.splitter.next_frame() {
                self.track(&frame);
                frames += 1;
                events += match self.kind {
                    Kind::Turnstream | Kind::Ring => u64::from(frame.id.is_some()),
                    // A catch-up frame carries many records, each with a "kind" field.
                    Kind::DurableStreams if frame.event.as_deref() == Some("data") => {
                        frame.data.matches("\"kind\"").count() as u64
                    }
                    Kind::DurableStreams => 0,
                    Kind::Resumable => u64::from(!frame.data.is_empty()),
                };
                if self.pos.as_deref() == Some(target) {
                    return Ok(Received {
                        events,
                        frames,
                        bytes: frame.end_offset - start,
                    });
                }
            }
            if !self.conn.read_into(&mut self.splitter).await? {
                bail!("the stream ended before reaching {target}");
            }
        }
    }

    fn track(&mut self, frame: &Frame) {
        match self.kind {
            Kind::Turnstream | Kind::Ring => {
                if let Some(id) = &frame.id {
                    self.pos = Some(id.clone());
                }
            }
            Kind::DurableStreams => {
                if frame.event.as_deref() == Some("control") {
                    if let Ok(v) = serde_json::from_str::<serde_json::Value>(&frame.data) {
                        if let Some(o) = v.get("streamNextOffset").and_then(|o| o.as_str()) {
                            self.pos = Some(o.to_string());
                        }
                    }
                }
            }
            Kind::Resumable => {
                self.pos = Some((self.base + frame.end_offset).to_string());
            }
        }
    }
}

/// Whether a frame moves the resume position: a client can only leave cleanly right after one
/// (a durable-streams `data` event is followed by the `control` event that carries its offset).
pub fn is_boundary(kind: Kind, f: &Frame) -> bool {
    match kind {
        Kind::Turnstream | Kind::Ring => f.id.is_some(),
        Kind::DurableStreams => f.event.as_deref() == Some("control"),
        Kind::Resumable => !f.data.is_empty(),
    }
}

/// Every `@T<µs>@` marker in a frame's data (a durable-streams catch-up frame can carry many).
pub fn markers(data: &str) -> impl Iterator<Item = u64> + '_ {
    data.match_indices("@T").filter_map(move |(i, _)| {
        let rest = &data[i + 2..];
        let end = rest.find('@')?;
        rest[..end].parse().ok()
    })
}

/// Every `#<n>@` chunk number in a frame's data.
pub fn chunk_numbers(data: &str) -> impl Iterator<Item = u64> + '_ {
    data.match_indices('#').filter_map(move |(i, _)| {
        let rest = &data[i + 1..];
        let end = rest.find('@')?;
        rest[..end].parse().ok()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_every_marker_and_chunk() {
        let d = r##"[{"delta":"#1@T10@ x"},{"delta":"#2@T20@ y"}]"##;
        assert_eq!(markers(d).collect::<Vec<_>>(), vec![10, 20]);
        assert_eq!(chunk_numbers(d).collect::<Vec<_>>(), vec![1, 2]);
    }
}
