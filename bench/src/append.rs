//! Figure 1: durable append throughput and enqueue-to-durable latency.
//!
//! Three measurements of the same 200-byte events:
//! - **journal path, in process**: the server library's own turn execution and journal writer, driven by
//!   a bench agent in many concurrent turns (coalescing off, so each delta is one event). This is
//!   the path every agent token takes, minus HTTP.
//! - **end to end over HTTP**: the real binary, sessions posting `/echo` messages of 200-byte
//!   words (the demo agent journals each word as one event), counted from `/metrics`.
//! - **the ceiling**: the very rows the journal wrote, re-inserted into a bare SQLite file with
//!   the same schema and pragmas (WAL, `synchronous=FULL`) in batches as big as the group commit
//!   achieved, with no server around them.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context, Result};
use futures::future::BoxFuture;
use turnstream_server::agent::{Agent, AgentError, TurnContext, TurnSink};
use turnstream_server::journal::{schema, Database, Journal, JournalOptions};
use turnstream_server::live::hub::Hub;
use turnstream_server::live::LiveFeed;
use turnstream_server::metrics::Metrics;
use turnstream_server::turns::{Mode, Turns, TurnsConfig};

use crate::prom::{bucket_delta, mean_delta, quantile, Scrape};
use crate::stats::{unix_us, Samples};
use crate::systems::{chunk_numbers, Resume, System};

pub const PAYLOAD_BYTES: usize = 200;

/// A 200-byte delta that names its global index, so a reader can find when it was emitted.
pub fn payload(idx: u64) -> String {
    let mut s = format!("#{idx}@");
    while s.len() < PAYLOAD_BYTES {
        s.push('a');
    }
    s
}

/// Emits `N` deltas as fast as it can (or one every `pace` µs), stamping each one's emit time.
/// Its message is `"N FIRST_INDEX PACE_US"`.
struct BenchAgent {
    stamps: Arc<Vec<AtomicU64>>,
}

impl Agent for BenchAgent {
    fn run<'a>(
        &'a self,
        ctx: TurnContext,
        sink: TurnSink,
    ) -> BoxFuture<'a, Result<(), AgentError>> {
        Box::pin(async move {
            let nums: Vec<u64> = ctx
                .user_message
                .split_whitespace()
                .filter_map(|w| w.parse().ok())
                .collect();
            let [n, first, pace_us] = nums[..] else {
                return Err(AgentError("expected \"N FIRST PACE_US\"".into()));
            };
            let start = tokio::time::Instant::now();
            for i in 0..n {
                if pace_us > 0 {
                    tokio::time::sleep_until(start + Duration::from_micros(i * pace_us)).await;
                }
                let idx = first + i;
                if let Some(slot) = self.stamps.get(idx as usize) {
                    slot.store(unix_us(), Ordering::Relaxed);
                }
                sink.response(payload(idx));
            }
            Ok(())
        })
    }
}

/// What one in-process run measured.
pub struct InProcess {
    pub events: u64,
    pub secs: f64,
    pub mean_batch: f64,
    /// Emit (agent) to committed-and-published (hub), measured per event.
    pub emit_to_durable: Samples,
    /// The server's own enqueue-to-commit histogram: (p50, p99) seconds, interpolated.
    pub hist_p50_p99: (Option<f64>, Option<f64>),
    pub offered_rate: f64,
    /// CPU seconds the journal's writer thread used during the run.
    pub writer_cpu: f64,
    /// The database the run wrote (kept for the ceiling run).
    pub dir: tempfile::TempDir,
}

impl InProcess {
    pub fn rate(&self) -> f64 {
        self.events as f64 / self.secs
    }
}

/// The server's turn runner on `journal`, its agent the bench's (stamping each delta into
/// `stamps`), every delta its own event, a slot for each of `sessions`.
async fn start_turns(
    journal: &Journal,
    stamps: &Arc<Vec<AtomicU64>>,
    sessions: u64,
) -> Result<Arc<Turns>> {
    let agent = Arc::new(BenchAgent {
        stamps: stamps.clone(),
    });
    let turns = Turns::new(
        journal.clone(),
        Mode::new(Some(agent), journal.is_shared(), Duration::from_secs(30)),
        TurnsConfig {
            coalesce: Duration::ZERO,
            max_concurrent_turns: sessions as usize,
            max_turns_per_client: sessions as usize,
        },
    );
    turns
        .start()
        .await
        .map_err(|e| anyhow!("turns start: {e}"))?;
    Ok(turns)
}

/// Runs `sessions` concurrent turns of `per_session` deltas each through the server's turn execution
/// and journal. `pace_us` 0 = as fast as possible (throughput); otherwise one delta per
/// `pace_us` per session (latency at an offered rate). `database_url`: the PostgreSQL database
/// to journal in (`None`: a fresh SQLite file). On PostgreSQL a committed event reaches the hub
/// through the server's tail (one read after each commit), as it does in the binary.
pub async fn in_process(
    database_url: Option<&str>,
    sessions: u64,
    per_session: u64,
    pace_us: u64,
) -> Result<InProcess> {
    let dir = crate::procs::scratch_dir("append-")?;
    let metrics = Arc::new(Metrics::default());
    let hub = Hub::with_metrics(metrics.clone());
    // The server's replay tail, sized as the binary would size it from its environment.
    if let Some(mb) = std::env::var("TURNSTREAM_REPLAY_CACHE_MB")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
    {
        hub.set_tail_budget(mb.saturating_mul(1024 * 1024));
    }
    let db = match database_url {
        Some(url) => Database::Postgres(url.to_string()),
        None => Database::Sqlite(dir.path().join("ts.db")),
    };
    let journal = Journal::open_database(
        &db,
        metrics.clone(),
        JournalOptions::default(),
        LiveFeed::new(hub.clone()),
    )
    .await
    .map_err(|e| anyhow!("cannot open the journal: {e}"))?;
    let total = (sessions * per_session) as usize;
    let stamps: Arc<Vec<AtomicU64>> = Arc::new((0..total).map(|_| AtomicU64::new(0)).collect());
    let turns = start_turns(&journal, &stamps, sessions).await?;
    let names: Vec<String> = (0..sessions).map(|s| format!("p{s}")).collect();

    // Committed frames reach the hub right after their commit: a subscriber there sees the
    // moment an event became durable (and visible).
    let mut sub = hub.subscribe(&names);
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let collector = {
        let stamps = stamps.clone();
        let done = done.clone();
        tokio::spawn(async move {
            let mut samples = Samples::default();
            loop {
                // The subscription never closes by itself (the hub keeps its sender): stop once
                // the run is over and the queue has stayed empty for a moment.
                let frame = match tokio::time::timeout(Duration::from_millis(100), sub.recv()).await
                {
                    Ok(Some(f)) => f,
                    Ok(None) => break,
                    Err(_) if done.load(Ordering::Acquire) => break,
                    Err(_) => continue,
                };
                let now = unix_us();
                let text = String::from_utf8_lossy(&frame.bytes);
                let idx = chunk_numbers(&text).next();
                if let Some(idx) = idx {
                    if let Some(t) = stamps.get(idx as usize).map(|s| s.load(Ordering::Relaxed)) {
                        if t > 0 {
                            samples.push(now.saturating_sub(t));
                        }
                    }
                }
            }
            samples
        })
    };

    let before = Scrape::parse(&metrics.render());
    let writer_cpu0 = crate::procs::thread_cpu_secs(Some("turnstream-writer"));
    let t0 = Instant::now();
    let accepts = names.iter().enumerate().map(|(i, name)| {
        let journal = journal.clone();
        let msg = format!("{per_session} {} {pace_us}", i as u64 * per_session);
        async move {
            journal
                .accept_message(
                    name,
                    turnstream_server::journal::NewMessage {
                        content: msg,
                        ..Default::default()
                    },
                    turnstream_server::journal::Admission::enqueue(64),
                )
                .await
        }
    });
    for r in futures::future::join_all(accepts).await {
        r.map_err(|e| anyhow!("accept_message: {e}"))?;
    }
    for name in &names {
        turns.kick(name);
    }
    let deadline = Instant::now() + Duration::from_secs(600);
    while metrics.turns_ended.load(Ordering::Relaxed) < sessions {
        if Instant::now() > deadline {
            return Err(anyhow!("turns did not finish within 10 minutes"));
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let secs = t0.elapsed().as_secs_f64();
    let writer_cpu = crate::procs::thread_cpu_secs(Some("turnstream-writer")) - writer_cpu0;
    let after = Scrape::parse(&metrics.render());
    done.store(true, Ordering::Release);
    let emit_to_durable = collector.await.unwrap_or_default();
    turns.shutdown(Duration::from_secs(5)).await;
    // Joins the writer thread, which on PostgreSQL waits on this runtime: off its workers.
    let closing = journal.clone();
    tokio::task::spawn_blocking(move || closing.close()).await?;
    let events = (after.get("turnstream_events_appended_total")
        - before.get("turnstream_events_appended_total")) as u64;
    let lat = bucket_delta(&before, &after, "turnstream_append_latency_seconds");
    let mean_batch = mean_delta(&before, &after, "turnstream_commit_batch_size").unwrap_or(1.0);
    let offered_rate = if pace_us > 0 {
        sessions as f64 * 1e6 / pace_us as f64
    } else {
        0.0
    };
    Ok(InProcess {
        events,
        secs,
        mean_batch,
        emit_to_durable,
        hist_p50_p99: (quantile(&lat, 0.5), quantile(&lat, 0.99)),
        offered_rate,
        writer_cpu,
        dir,
    })
}

/// What a run on several nodes measured.
pub struct OnNodes {
    pub events: u64,
    pub secs: f64,
    /// The mean group commit over every node's writer.
    pub mean_batch: f64,
    /// Commits each node's writer made.
    pub commits: Vec<u64>,
}

impl OnNodes {
    pub fn rate(&self) -> f64 {
        self.events as f64 / self.secs
    }
}

/// One node of [`in_process_nodes`]: its metrics, journal and turn runner.
type Node = (Arc<Metrics>, Journal, Arc<Turns>);

/// [`in_process`] at full speed on `nodes` servers sharing the PostgreSQL database at
/// `database_url`: each a journal (its own pool, writer thread and tail) and a turn runner of
/// its own, all in this process; session `i`'s message is accepted and its turn kicked on node
/// `i % nodes`. Every writer takes the same counter row's lock for each commit, so their
/// transactions take turns. Events are counted by each node's own writer.
pub async fn in_process_nodes(
    database_url: &str,
    nodes: usize,
    sessions: u64,
    per_session: u64,
) -> Result<OnNodes> {
    let nodes = nodes.max(1);
    let total = (sessions * per_session) as usize;
    let stamps: Arc<Vec<AtomicU64>> = Arc::new((0..total).map(|_| AtomicU64::new(0)).collect());
    let mut servers: Vec<Node> = Vec::with_capacity(nodes);
    for _ in 0..nodes {
        let metrics = Arc::new(Metrics::default());
        let hub = Hub::with_metrics(metrics.clone());
        let journal = Journal::open_database(
            &Database::Postgres(database_url.to_string()),
            metrics.clone(),
            JournalOptions::default(),
            LiveFeed::new(hub),
        )
        .await
        .map_err(|e| anyhow!("cannot open the journal: {e}"))?;
        let turns = start_turns(&journal, &stamps, sessions).await?;
        servers.push((metrics, journal, turns));
    }
    let scrape = |servers: &[Node]| -> Vec<Scrape> {
        servers
            .iter()
            .map(|(m, _, _)| Scrape::parse(&m.render()))
            .collect()
    };
    let before = scrape(&servers);
    let t0 = Instant::now();
    let accepts = (0..sessions).map(|i| {
        let journal = servers[i as usize % nodes].1.clone();
        let msg = format!("{per_session} {} 0", i * per_session);
        async move {
            journal
                .accept_message(
                    &format!("p{i}"),
                    turnstream_server::journal::NewMessage {
                        content: msg,
                        ..Default::default()
                    },
                    turnstream_server::journal::Admission::enqueue(64),
                )
                .await
        }
    });
    for r in futures::future::join_all(accepts).await {
        r.map_err(|e| anyhow!("accept_message: {e}"))?;
    }
    for i in 0..sessions {
        servers[i as usize % nodes].2.kick(&format!("p{i}"));
    }
    let deadline = Instant::now() + Duration::from_secs(600);
    let ended = |servers: &[Node]| -> u64 {
        servers
            .iter()
            .map(|(m, _, _)| m.turns_ended.load(Ordering::Relaxed))
            .sum()
    };
    while ended(&servers) < sessions {
        if Instant::now() > deadline {
            return Err(anyhow!("turns did not finish within 10 minutes"));
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let secs = t0.elapsed().as_secs_f64();
    let after = scrape(&servers);
    let mut events = 0.0;
    let mut commits = Vec::with_capacity(nodes);
    let mut writes = 0.0;
    for (b, a) in before.iter().zip(&after) {
        events +=
            a.get("turnstream_events_appended_total") - b.get("turnstream_events_appended_total");
        let n = a.get("turnstream_commit_batch_size_count")
            - b.get("turnstream_commit_batch_size_count");
        writes +=
            a.get("turnstream_commit_batch_size_sum") - b.get("turnstream_commit_batch_size_sum");
        commits.push(n.max(0.0) as u64);
    }
    for (_, journal, turns) in servers {
        turns.shutdown(Duration::from_secs(5)).await;
        // Joins the writer thread, which on PostgreSQL waits on this runtime: off its workers.
        tokio::task::spawn_blocking(move || journal.close()).await?;
    }
    let total_commits: u64 = commits.iter().sum();
    Ok(OnNodes {
        events: events as u64,
        secs,
        mean_batch: writes / total_commits.max(1) as f64,
        commits,
    })
}

/// Re-inserts the rows of `from`'s journal into a fresh database with the same schema, `batch`
/// rows per transaction. With `savepoints`, each row gets its own `SAVEPOINT`/`RELEASE`, as each
/// job in the journal writer's group commit does (to isolate that cost). Returns (rows, seconds,
/// CPU seconds of the inserting thread).
pub fn raw_sqlite(
    from: &std::path::Path,
    batch: usize,
    savepoints: bool,
) -> Result<(u64, f64, f64)> {
    type Row = (i64, String, Option<String>, String, i64, String);
    let src = rusqlite::Connection::open(from.join("ts.db"))?;
    let rows: Vec<Row> = src
        .prepare("SELECT id, session_id, turn_id, kind, ts, data FROM events ORDER BY id")?
        .query_map([], |r| {
            Ok((
                r.get(0)?,
                r.get(1)?,
                r.get(2)?,
                r.get(3)?,
                r.get(4)?,
                r.get(5)?,
            ))
        })?
        .collect::<rusqlite::Result<_>>()?;
    drop(src);
    let path = from.join(if savepoints { "raw-sp.db" } else { "raw.db" });
    let mut conn = rusqlite::Connection::open(&path)?;
    schema::configure(&conn).map_err(|e| anyhow!("configure: {e}"))?;
    schema::migrate(&mut conn).map_err(|e| anyhow!("migrate: {e}"))?;
    let batch = batch.max(1);
    let cpu0 = crate::procs::thread_cpu_secs(None);
    let t0 = Instant::now();
    for chunk in rows.chunks(batch) {
        let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        {
            let mut stmt = tx.prepare_cached(
                "INSERT INTO events(id, session_id, turn_id, kind, ts, data) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            )?;
            for (id, s, t, k, ts, d) in chunk {
                if savepoints {
                    tx.execute_batch("SAVEPOINT job")?;
                }
                stmt.execute(rusqlite::params![id, s, t, k, ts, d])?;
                if savepoints {
                    tx.execute_batch("RELEASE job")?;
                }
            }
        }
        tx.commit()?;
    }
    let secs = t0.elapsed().as_secs_f64();
    Ok((
        rows.len() as u64,
        secs,
        crate::procs::thread_cpu_secs(None) - cpu0,
    ))
}

/// What the HTTP run measured.
pub struct OverHttp {
    pub events: u64,
    pub secs: f64,
    pub delivered: u64,
}

impl OverHttp {
    pub fn rate(&self) -> f64 {
        self.events as f64 / self.secs
    }
}

pub async fn scrape(sys: &System) -> Result<Scrape> {
    let text = sys
        .http
        .get(format!("{}/metrics", sys.proc.url))
        .send()
        .await?
        .text()
        .await?;
    Ok(Scrape::parse(&text))
}

/// Words per `/echo` message: 320 × 200 bytes stays under the 64 KiB content limit.
const WORDS_PER_MESSAGE: usize = 320;

/// `sessions` sessions, each with one SSE reader, each posting `messages` `/echo` messages of
/// 200-byte words; the committed-event rate comes from the server's own counter.
pub async fn over_http(
    database_url: Option<&str>,
    sessions: usize,
    messages: usize,
) -> Result<OverHttp> {
    let sys = Arc::new(System::turnstream_on(database_url, &[]).await?);
    let word = format!("{} ", "w".repeat(PAYLOAD_BYTES - 1));
    let content = format!("/echo {}", word.repeat(WORDS_PER_MESSAGE));
    let delivered = Arc::new(AtomicU64::new(0));
    let mut readers = Vec::new();
    for s in 0..sessions {
        let mut reader = sys.open(&format!("h{s}"), &Resume::Now).await?;
        let delivered = delivered.clone();
        readers.push(tokio::spawn(async move {
            let mut ended = 0;
            let _ = reader
                .read(|f, _| {
                    if f.id.is_some() {
                        delivered.fetch_add(1, Ordering::Relaxed);
                    }
                    if f.event.as_deref() == Some("turn_ended") {
                        ended += 1;
                    }
                    ended < messages
                })
                .await;
        }));
    }
    let before = scrape(&sys).await?;
    let t0 = Instant::now();
    let mut posts = Vec::new();
    for m in 0..messages {
        for s in 0..sessions {
            let sys = sys.clone();
            let body =
                serde_json::json!({ "content": content, "client_message_id": format!("m{m}") })
                    .to_string();
            posts.push(tokio::spawn(async move {
                sys.http
                    .post(format!("{}/api/sessions/h{s}/messages", sys.proc.url))
                    .header("content-type", "application/json")
                    .body(body)
                    .send()
                    .await
                    .map(|r| r.status())
            }));
        }
    }
    for p in posts {
        let status = p.await.context("post task")??;
        if !status.is_success() {
            return Err(anyhow!("POST message: {status}"));
        }
    }
    let want = (sessions * messages) as f64;
    let deadline = Instant::now() + Duration::from_secs(600);
    let after = loop {
        let s = scrape(&sys).await?;
        if s.get("turnstream_turns_ended_total") >= want {
            break s;
        }
        if Instant::now() > deadline {
            return Err(anyhow!("HTTP append run did not finish"));
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let secs = t0.elapsed().as_secs_f64();
    for r in readers {
        let _ = tokio::time::timeout(Duration::from_secs(30), r).await;
    }
    Ok(OverHttp {
        events: (after.get("turnstream_events_appended_total")
            - before.get("turnstream_events_appended_total")) as u64,
        secs,
        delivered: delivered.load(Ordering::Relaxed),
    })
}
