//! Storage faults, made real: another process holding the database's write lock, and a full disk
//! (a small tmpfs). While writes fail, new work is refused with `503 storage_unavailable` /
//! `507 storage_full` and `Retry-After`, `/readyz` answers 503 (at every poll, for as long as
//! messages are refused), and a cancel answers an error rather than a 200 that did nothing.
//! Afterwards, with no restart, `/readyz` is back to 200, every acknowledged turn has ended
//! exactly once, each session's turns ended in the order they were sent, and every frame a
//! stream delivered is the journal's event of that id.

mod support;

use std::collections::{HashMap, HashSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;
use support::{wait_for, SseClient, TestResult, TestServer, DEADLINE};
use turnstream_protocol::{cursor::sequence_of, Event, TurnState};

/// An answer with what these tests look at: status, `Retry-After` and the JSON body.
#[derive(Debug)]
struct Answer {
    status: u16,
    retry_after: Option<String>,
    body: Value,
}

impl Answer {
    fn code(&self) -> &str {
        self.body["error"]["code"].as_str().unwrap_or("")
    }

    /// A refusal the client may retry: `status`, `code`, a whole number of seconds as
    /// `Retry-After`, and the stable error shape.
    fn expect_refused(&self, status: u16, code: &str) -> TestResult {
        if self.status != status || self.code() != code {
            return Err(format!("expected {status} {code}, got {self:?}").into());
        }
        match self.retry_after.as_deref().map(str::parse::<u64>) {
            Some(Ok(secs)) if secs > 0 => {}
            _ => return Err(format!("no Retry-After in seconds on {self:?}").into()),
        }
        if !self.body["error"]["message"].is_string() {
            return Err(format!("no error message in {self:?}").into());
        }
        Ok(())
    }
}

async fn request(req: reqwest::RequestBuilder) -> TestResult<Answer> {
    let res = req.send().await?;
    let status = res.status().as_u16();
    let retry_after = res
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let body = res.json().await.unwrap_or(Value::Null);
    Ok(Answer {
        status,
        retry_after,
        body,
    })
}

async fn post(server: &TestServer, session: &str, content: &str) -> TestResult<Answer> {
    post_with_id(server, session, content, None).await
}

async fn post_with_id(
    server: &TestServer,
    session: &str,
    content: &str,
    client_message_id: Option<&str>,
) -> TestResult<Answer> {
    let url = format!("{}/api/sessions/{session}/messages", server.url);
    let req = server.http.post(url).json(&serde_json::json!({
        "content": content,
        "client_message_id": client_message_id,
    }));
    request(req).await
}

async fn cancel(server: &TestServer, turn: &str) -> TestResult<Answer> {
    let req = server
        .http
        .post(format!("{}/api/turns/{turn}/cancel", server.url));
    request(req).await
}

async fn readyz(server: &TestServer) -> TestResult<Answer> {
    request(server.http.get(format!("{}/readyz", server.url))).await
}

async fn wait_state(server: &TestServer, turn: &str, state: TurnState) -> TestResult {
    wait_for(|| async { Ok((server.turn(turn).await?.state == state).then_some(())) }).await
}

/// Waits until `/readyz` answers `status` (and, for 503, `code` with a `Retry-After`).
async fn wait_ready(server: &TestServer, status: u16, code: &str) -> TestResult {
    let answer = wait_for(|| async {
        let a = readyz(server).await?;
        Ok((a.status == status).then_some(a))
    })
    .await?;
    if status != 200 {
        answer.expect_refused(status, code)?;
    }
    Ok(())
}

/// Waits until at least `n` turn ends failed to be journaled and were retried.
async fn wait_end_retries(server: &TestServer, n: f64) -> TestResult {
    wait_for(|| async {
        let retries = server.counter("turnstream_turn_end_retries_total").await?;
        Ok((retries >= n).then_some(()))
    })
    .await
}

/// Holds the database's write lock from another connection (as another process would) until
/// dropped: the server's writes then fail with "database is locked" after its busy timeout.
struct WriteLock(rusqlite::Connection);

impl WriteLock {
    fn take(db: &Path) -> TestResult<WriteLock> {
        let conn = rusqlite::Connection::open(db)?;
        conn.busy_timeout(DEADLINE)?;
        conn.execute_batch("BEGIN IMMEDIATE")?;
        Ok(WriteLock(conn))
    }

    fn release(self) -> TestResult {
        self.0.execute_batch("ROLLBACK")?;
        Ok(())
    }
}

/// A small tmpfs of the test's own, unmounted on drop.
struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    /// Mounts a tmpfs of `size` (as `mount -o size=` takes it); the reason if it cannot be.
    fn mount(size: &str) -> TestResult<Result<Tmpfs, String>> {
        let dir = tempfile::tempdir()?;
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .output();
        Ok(match out {
            Ok(o) if o.status.success() => Ok(Tmpfs { dir }),
            Ok(o) => Err(String::from_utf8_lossy(&o.stderr).trim().to_string()),
            Err(e) => Err(e.to_string()),
        })
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Fills the filesystem but for `free` bytes, which the server's own writes then use up:
    /// the write that finds the disk full has written part of itself before failing.
    fn fill_but(&self, free: u64) -> TestResult<PathBuf> {
        let path = self.fill()?;
        let file = std::fs::OpenOptions::new().write(true).open(&path)?;
        let len = file.metadata()?.len();
        file.set_len(len.saturating_sub(free))?;
        Ok(path)
    }

    /// Fills the filesystem to its last byte with one file, whose path it returns.
    fn fill(&self) -> TestResult<PathBuf> {
        let path = self.path().join("filler");
        let mut file = std::fs::File::create(&path)?;
        let chunk = vec![0u8; 64 * 1024];
        for size in [chunk.len(), 4096, 512, 1] {
            loop {
                match file.write_all(&chunk[..size]) {
                    Ok(()) => continue,
                    Err(e) if e.kind() == std::io::ErrorKind::StorageFull => break,
                    Err(e) => return Err(e.into()),
                }
            }
        }
        Ok(path)
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        // Lazy: a server killed a moment ago may still hold the files open.
        let _ = Command::new("umount").arg("-l").arg(self.path()).status();
    }
}

/// One event as the journal holds it.
#[derive(Debug, PartialEq)]
struct Row {
    kind: String,
    turn_id: Option<String>,
    ts: i64,
}

/// Checks the journal file after the fault: every acknowledged turn (listed per session in
/// the order its POST was answered 202) is terminal with exactly one `turn_ended`; each turn of
/// a session started only after the one before it ended (FIFO); event ids are dense (no id was
/// skipped). Returns the journal's events by id.
fn audit_journal(db: &Path, sessions: &[&[&str]]) -> TestResult<HashMap<i64, Row>> {
    let conn =
        rusqlite::Connection::open_with_flags(db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)?;
    let mut rows = HashMap::new();
    let mut stmt = conn.prepare("SELECT id, kind, turn_id, ts FROM events")?;
    let mut query = stmt.query([])?;
    while let Some(r) = query.next()? {
        rows.insert(
            r.get::<_, i64>(0)?,
            Row {
                kind: r.get(1)?,
                turn_id: r.get(2)?,
                ts: r.get(3)?,
            },
        );
    }
    let (min, max) = (
        rows.keys().min().copied().unwrap_or(0),
        rows.keys().max().copied().unwrap_or(0),
    );
    if rows.len() as i64 != max - min + 1 {
        return Err(format!("event ids {min}..={max} have gaps ({} events)", rows.len()).into());
    }
    for turns in sessions {
        let mut previous_end: Option<(i64, &str)> = None;
        for turn in turns.iter() {
            let ends: Vec<i64> = rows
                .iter()
                .filter(|(_, r)| r.kind == "turn_ended" && r.turn_id.as_deref() == Some(*turn))
                .map(|(id, _)| *id)
                .collect();
            if ends.len() != 1 {
                return Err(format!("turn {turn} has {} turn_ended events", ends.len()).into());
            }
            let (state, started, ended): (String, Option<i64>, Option<i64>) = conn.query_row(
                "SELECT state, started_seq, ended_seq FROM turns WHERE turn_id = ?1",
                [turn],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )?;
            if ended != Some(ends[0]) || state == "queued" || state == "running" {
                return Err(format!("turn {turn} is {state}, ended at {ended:?}").into());
            }
            if let (Some((before_end, before)), Some(started)) = (previous_end, started) {
                if started < before_end {
                    return Err(format!(
                        "turn {turn} started at {started}, before {before} ended at {before_end}"
                    )
                    .into());
                }
            }
            previous_end = Some((ends[0], turn));
        }
    }
    Ok(rows)
}

/// Reads `stream` until it has delivered the `turn_ended` of every turn in `turns`, and checks
/// that each frame is the journal's event of the same id (an id fanned out from a commit that
/// failed, then used again, would differ), in increasing id order, with one end per turn.
async fn audit_stream(
    stream: &mut SseClient,
    journal: &HashMap<i64, Row>,
    turns: &[&str],
) -> TestResult {
    let mut waiting: HashSet<&str> = turns.iter().copied().collect();
    let mut last = 0;
    let deadline = Instant::now() + DEADLINE;
    while !waiting.is_empty() {
        if Instant::now() > deadline {
            return Err(format!("the stream never delivered the end of {waiting:?}").into());
        }
        let event: Event = stream.next_event().await?;
        let seq = sequence_of(&event.id).ok_or("an event id without a sequence")?;
        if seq <= last {
            return Err(format!("event {seq} after {last}").into());
        }
        last = seq;
        let delivered = Row {
            kind: event.body.kind().to_string(),
            turn_id: event.turn_id.clone(),
            ts: event.ts,
        };
        if journal.get(&seq) != Some(&delivered) {
            return Err(format!(
                "the stream delivered {delivered:?} as {seq}; the journal holds {:?}",
                journal.get(&seq)
            )
            .into());
        }
        if delivered.kind == "turn_ended" {
            let turn = event.turn_id.as_deref().unwrap_or("");
            if turns.contains(&turn) && !waiting.remove(turn) {
                return Err(format!("turn {turn} ended twice on the stream").into());
            }
        }
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_lock_held_elsewhere_refuses_work_then_every_acknowledged_turn_ends_once(
) -> TestResult {
    let server = TestServer::start(&[
        "--busy-timeout-ms",
        "1000",
        "--coalesce-ms",
        "0",
        "--demo-delay-ms",
        "10",
    ])?;
    let mut stream = server.stream("session=la&session=lb", None).await?;
    // A turn that will finish while the lock is held, one queued behind it, and one that runs
    // until it is cancelled.
    let a1 = server.send("la", "/deltas 200").await?.turn_id;
    let a2 = server.send("la", "/echo second in line").await?.turn_id;
    let b1 = server.send("lb", "/sleep 600000 never said").await?.turn_id;
    wait_state(&server, &a1, TurnState::Running).await?;
    wait_state(&server, &b1, TurnState::Running).await?;
    wait_ready(&server, 200, "").await?;

    let lock = WriteLock::take(&server.db_path())?;
    // The first turn's agent finishes; its end cannot be journaled and is retried.
    wait_end_retries(&server, 1.0).await?;
    wait_ready(&server, 503, "storage_unavailable").await?;
    // Writes already fail: a new one is refused without waiting the whole busy timeout.
    let sent = Instant::now();
    post_with_id(&server, "la", "/echo sent while locked", Some("c-locked"))
        .await?
        .expect_refused(503, "storage_unavailable")?;
    let waited = sent.elapsed();
    assert!(
        waited < Duration::from_millis(1000),
        "refused after {waited:?}, not promptly"
    );
    // A cancel cannot be journaled: it says so instead of answering 200.
    cancel(&server, &b1)
        .await?
        .expect_refused(503, "storage_unavailable")?;
    cancel(&server, &a2)
        .await?
        .expect_refused(503, "storage_unavailable")?;
    // Reads still work; nothing ended or started behind the lock's back.
    assert_eq!(server.turn(&a1).await?.state, TurnState::Running);
    assert_eq!(server.turn(&a2).await?.state, TurnState::Queued);
    assert_eq!(server.counter("turnstream_storage_healthy").await?, 0.0);
    lock.release()?;

    // Recovery by itself: no restart, no new request.
    wait_ready(&server, 200, "").await?;
    for turn in [&a1, &a2, &b1] {
        server.wait_turn_end(turn).await?;
    }
    // The stopped turn ends the way its cancel asked, once the storage allowed it.
    assert_eq!(server.turn(&b1).await?.state, TurnState::Cancelled);
    // The refused message created nothing: sent again, it is new (202, not a 200 replay).
    let again = post_with_id(&server, "la", "/echo sent while locked", Some("c-locked")).await?;
    assert_eq!(again.status, 202, "{again:?}");
    let a3 = again.body["turn_id"].as_str().unwrap_or("").to_string();
    assert_eq!(server.wait_turn_end(&a3).await?.state, TurnState::Completed);

    let journal = audit_journal(&server.db_path(), &[&[&a1, &a2, &a3], &[&b1]])?;
    audit_stream(&mut stream, &journal, &[&a1, &a2, &a3, &b1]).await?;
    assert!(
        server
            .counter("turnstream_storage_faults_total{fault=\"unavailable\"}")
            .await?
            >= 1.0
    );
    assert_eq!(server.counter("turnstream_storage_healthy").await?, 1.0);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_refuses_work_then_every_acknowledged_turn_ends_once() -> TestResult {
    let disk = match Tmpfs::mount("4m")? {
        Ok(disk) => disk,
        Err(why) => {
            eprintln!(
                "SKIPPED a_full_disk_refuses_work_then_every_acknowledged_turn_ends_once: \
                 cannot mount a tmpfs ({why}); it needs root on Linux"
            );
            return Ok(());
        }
    };
    let db = disk.path().join("turnstream.db");
    let server = TestServer::start_with_db(
        Some(db.clone()),
        &["--coalesce-ms", "0", "--demo-delay-ms", "10"],
    )?;
    let mut stream = server.stream("session=da&session=db", None).await?;
    let a1 = server.send("da", "/deltas 200").await?.turn_id;
    let a2 = server.send("da", "/echo second in line").await?.turn_id;
    let b1 = server.send("db", "/sleep 600000 never said").await?.turn_id;
    wait_state(&server, &a1, TurnState::Running).await?;
    wait_state(&server, &b1, TurnState::Running).await?;

    let filler = disk.fill()?;
    // Messages sent now are refused, unless the journal still had room for them: those were
    // acknowledged and must end like any other.
    let mut acknowledged = vec![a1.clone(), a2.clone()];
    let deadline = Instant::now() + DEADLINE;
    loop {
        let answer = post(&server, "da", "sent to a full disk").await?;
        if answer.status == 202 {
            acknowledged.push(answer.body["turn_id"].as_str().unwrap_or("").to_string());
        } else {
            answer.expect_refused(507, "storage_full")?;
            break;
        }
        if Instant::now() > deadline {
            return Err("messages were still accepted on a full disk".into());
        }
    }
    wait_ready(&server, 503, "storage_full").await?;
    wait_end_retries(&server, 1.0).await?;
    cancel(&server, &b1)
        .await?
        .expect_refused(507, "storage_full")?;

    std::fs::remove_file(&filler)?;
    wait_ready(&server, 200, "").await?;
    for turn in acknowledged.iter().chain([&b1]) {
        server.wait_turn_end(turn).await?;
    }
    assert_eq!(server.turn(&b1).await?.state, TurnState::Cancelled);
    let last = server.send("da", "/echo space is back").await?.turn_id;
    assert_eq!(
        server.wait_turn_end(&last).await?.state,
        TurnState::Completed
    );
    acknowledged.push(last);

    let session_a: Vec<&str> = acknowledged.iter().map(String::as_str).collect();
    let journal = audit_journal(&db, &[&session_a, &[&b1]])?;
    let mut all = session_a.clone();
    all.push(&b1);
    audit_stream(&mut stream, &journal, &all).await?;
    assert!(
        server
            .counter("turnstream_storage_faults_total{fault=\"full\"}")
            .await?
            >= 1.0
    );
    drop(server);
    drop(disk);
    Ok(())
}

/// Readiness on a full disk: `/readyz` answers 503 at every poll for as long as messages are
/// refused (polled for longer than the storage probe's backoff takes to reach its ceiling, with
/// a refused message between polls), then 200 within seconds of the space returning, with no
/// request in between to carry a write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_stays_down_while_writes_fail_and_returns_with_the_space() -> TestResult {
    let disk = match Tmpfs::mount("4m")? {
        Ok(disk) => disk,
        Err(why) => {
            eprintln!(
                "SKIPPED readiness_stays_down_while_writes_fail_and_returns_with_the_space: \
                 cannot mount a tmpfs ({why}); it needs root on Linux"
            );
            return Ok(());
        }
    };
    let db = disk.path().join("turnstream.db");
    let server =
        TestServer::start_with_db(Some(db), &["--coalesce-ms", "0", "--demo-delay-ms", "10"])?;
    let first = server
        .send("rf", "/echo before the disk fills")
        .await?
        .turn_id;
    server.wait_turn_end(&first).await?;
    wait_ready(&server, 200, "").await?;
    // Turns in flight while the disk fills: progress, ends and their retries hit it too.
    let streaming = server.send("rf", "/deltas 200").await?.turn_id;
    let sleeping = server.send("rs", "/sleep 600000 never said").await?.turn_id;
    wait_state(&server, &streaming, TurnState::Running).await?;
    wait_state(&server, &sleeping, TurnState::Running).await?;

    // The last room goes to the journal's own writes: the one that finds the disk full has
    // written part of itself, and a smaller write fits in what it left.
    let filler = disk.fill_but(256 * 1024)?;
    let deadline = Instant::now() + DEADLINE;
    let long = format!("/sleep 600000 {}", "x".repeat(60_000));
    loop {
        let answer = post(&server, "rq", &long).await?;
        if answer.status != 202 {
            answer.expect_refused(507, "storage_full")?;
            break;
        }
        if Instant::now() > deadline {
            return Err("messages were still accepted on a full disk".into());
        }
    }
    wait_ready(&server, 503, "storage_full").await?;
    let full_until = Instant::now() + Duration::from_secs(6);
    let mut polls = 0;
    while Instant::now() < full_until {
        for _ in 0..2 {
            let ready = readyz(&server).await?;
            if ready.status != 503 {
                return Err(format!(
                    "/readyz answered {} after {polls} polls while the disk is full: {:?}",
                    ready.status, ready.body
                )
                .into());
            }
            ready.expect_refused(503, "storage_full")?;
            polls += 1;
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        post(&server, "rq", &long)
            .await?
            .expect_refused(507, "storage_full")?;
    }

    std::fs::remove_file(&filler)?;
    let freed = Instant::now();
    wait_ready(&server, 200, "").await?;
    let took = freed.elapsed();
    assert!(
        took < Duration::from_secs(5),
        "ready {took:?} after the space returned"
    );
    let last = server.send("rb", "/echo space is back").await?.turn_id;
    assert_eq!(
        server.wait_turn_end(&last).await?.state,
        TurnState::Completed
    );
    drop(server);
    drop(disk);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_whose_end_never_landed_ends_interrupted_at_the_next_start() -> TestResult {
    let flags = ["--busy-timeout-ms", "100", "--demo-delay-ms", "10"];
    let mut server = TestServer::start(&flags)?;
    let a1 = server
        .send("ra", "/sleep 1500 ends behind a lock")
        .await?
        .turn_id;
    let a2 = server
        .send("ra", "/sleep 600000 queued behind it")
        .await?
        .turn_id;
    wait_state(&server, &a1, TurnState::Running).await?;
    let lock = WriteLock::take(&server.db_path())?;
    wait_end_retries(&server, 1.0).await?;
    server.kill9()?;
    lock.release()?;
    server.restart(None)?;
    assert_eq!(
        server.wait_turn_end(&a1).await?.state,
        TurnState::Interrupted
    );
    // The session's next turn runs only now, after the first one's end.
    wait_state(&server, &a2, TurnState::Running).await?;
    let (status, _) = server.cancel(&a2).await?;
    assert_eq!(status, 200);
    audit_journal(&server.db_path(), &[&[&a1, &a2]])?;
    Ok(())
}
