//! An embedder's listeners (`Server::builder(..).listener(..)`), on the library served in this
//! process on a real SQLite file (or, on PostgreSQL, a database of its own) and spoken to over
//! HTTP and SSE: every committed event handed once, in journal order, as the stream and the
//! history show it; a blocked listener holds up neither the writer nor the streams, and is told
//! what it missed, which reads back from the journal exactly; a panicking one stops nothing.

mod support;

use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use futures::future::BoxFuture;
use serde_json::Value;
use tokio::sync::{mpsc, oneshot, watch};
use turnstream_protocol::sse::Frame;
use turnstream_protocol::{Cursor, TurnState};
use turnstream_server::agent::{Agent, AgentError, TurnContext, TurnSink};
use turnstream_server::config::Config;
use turnstream_server::journal::Committed;
use turnstream_server::listeners::{Batch, Listener};
use turnstream_server::Server;

use support::{pg, wait_for, Api, SseClient, TestResult, DEADLINE};

/// The library serving on `127.0.0.1:0` in this process until [`Embedded::stop`].
struct Embedded {
    api: Api,
    stop: oneshot::Sender<()>,
    server: tokio::task::JoinHandle<turnstream_server::error::Result<()>>,
    _dir: tempfile::TempDir,
    _database: Option<pg::TestDatabase>,
}

impl Embedded {
    /// Serves `build(Server::builder(config))`: the demo agent on a fresh SQLite file, or on a
    /// fresh PostgreSQL database with `TURNSTREAM_TEST_DATABASE_URL`.
    async fn start(build: impl FnOnce(Server) -> Server) -> TestResult<Embedded> {
        let dir = tempfile::tempdir()?;
        let mut config = Config::defaults();
        config.db = dir.path().join("listeners.db");
        config.demo_delay_ms = 2;
        let database = match pg::admin_url() {
            Some(admin) => Some(pg::TestDatabase::create(&admin)?),
            None => None,
        };
        config.database_url = database.as_ref().map(|d| d.server_url.clone());
        let tcp = turnstream_server::serve::bind("127.0.0.1:0".parse()?)?;
        let url = format!("http://{}", tcp.local_addr()?);
        let (stop, stopped) = oneshot::channel::<()>();
        let server = tokio::spawn(build(Server::builder(config)).run(tcp, async move {
            let _ = stopped.await;
        }));
        let http = reqwest::Client::builder().timeout(DEADLINE).build()?;
        Ok(Embedded {
            api: Api { url, http },
            stop,
            server,
            _dir: dir,
            _database: database,
        })
    }

    /// Shuts the server down; `run` returns once its listeners have handled what committed.
    async fn stop(self) -> TestResult {
        let _ = self.stop.send(());
        tokio::time::timeout(DEADLINE, self.server).await???;
        Ok(())
    }
}

/// A listener that never blocks: every batch goes to the receiver.
fn recorder() -> (impl Listener, mpsc::UnboundedReceiver<Batch>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let listener = move |batch: Batch| {
        let _ = tx.send(batch);
        async {}
    };
    (listener, rx)
}

/// Every batch the receiver holds now.
fn take(rx: &mut mpsc::UnboundedReceiver<Batch>, into: &mut Vec<Batch>) {
    while let Ok(batch) = rx.try_recv() {
        into.push(batch);
    }
}

/// Every batch until the listener's task has ended (its sender dropped).
async fn drain(mut rx: mpsc::UnboundedReceiver<Batch>, into: &mut Vec<Batch>) -> TestResult {
    tokio::time::timeout(DEADLINE, async {
        while let Some(batch) = rx.recv().await {
            into.push(batch);
        }
    })
    .await?;
    Ok(())
}

fn events_of(batches: &[Batch]) -> Vec<Committed> {
    batches
        .iter()
        .flat_map(|b| b.events.iter().cloned())
        .collect()
}

fn last_seq(batches: &[Batch]) -> i64 {
    batches
        .iter()
        .filter_map(|b| b.events.last())
        .map(|e| e.seq)
        .max()
        .unwrap_or(0)
}

/// A committed event as the stream sends it: its body with the envelope fields.
fn as_streamed(epoch: &str, e: &Committed) -> TestResult<Value> {
    let mut v: Value = serde_json::from_str(&e.data)?;
    let obj = v.as_object_mut().ok_or("a body that is not an object")?;
    obj.insert("id".into(), Cursor::new(epoch, e.seq).to_string().into());
    obj.insert("session_id".into(), e.session_id.clone().into());
    obj.insert("ts".into(), e.ts.into());
    if let Some(turn) = &e.turn_id {
        obj.insert("turn_id".into(), turn.clone().into());
    }
    Ok(v)
}

/// The stream's journaled frames until the `turn_ended` of every one of `turns`.
async fn until_all_ended(stream: &mut SseClient, turns: &[String]) -> TestResult<Vec<Frame>> {
    let mut open: HashSet<&str> = turns.iter().map(String::as_str).collect();
    let mut frames = Vec::new();
    while !open.is_empty() {
        let f = stream.next().await?.ok_or("the stream ended")?;
        if f.id.is_none() {
            continue;
        }
        if f.event == "turn_ended" {
            let v: Value = serde_json::from_str(&f.data)?;
            open.remove(v["turn_id"].as_str().unwrap_or_default());
        }
        frames.push(f);
    }
    Ok(frames)
}

/// The journal's epoch, from a history's cursor (`<epoch>-<sequence>`).
async fn epoch(api: &Api) -> TestResult<String> {
    let (history, _) = api.history("probe").await?;
    Ok(history.cursor.parse::<Cursor>()?.epoch)
}

#[tokio::test]
async fn a_listener_is_handed_every_commit_once_in_journal_order_as_the_stream_shows_it(
) -> TestResult {
    let (listener, mut batches_rx) = recorder();
    let server = Embedded::start(|s| s.listener(listener)).await?;
    let api = &server.api;
    let epoch = epoch(api).await?;
    let mut stream = api
        .stream(&format!("session=a&session=b&cursor={epoch}-0"), None)
        .await?;

    // Turns in two sessions at once: their commits interleave in the journal.
    let mut turns = Vec::new();
    for (session, content) in [
        ("a", "/deltas 4"),
        ("b", "hello"),
        ("a", "again"),
        ("b", "/deltas 3"),
    ] {
        turns.push(api.send(session, content).await?.turn_id);
    }
    let frames = until_all_ended(&mut stream, &turns).await?;
    let (history_a, _) = api.history("a").await?;
    let (history_b, _) = api.history("b").await?;
    server.stop().await?;

    let mut batches = Vec::new();
    take(&mut batches_rx, &mut batches);
    drain(batches_rx, &mut batches).await?;
    assert!(batches.iter().all(|b| b.missed.is_none()), "nothing missed");
    assert!(batches.iter().all(|b| *b.epoch == *epoch));
    let events = events_of(&batches);
    // Journal order, each event once: ids strictly increase across batches.
    assert!(
        events.windows(2).all(|w| w[0].seq < w[1].seq),
        "{:?}",
        events.iter().map(|e| e.seq).collect::<Vec<_>>()
    );

    // Exactly what the stream replayed and delivered live: the same ids, kinds and bodies.
    assert_eq!(events.len(), frames.len());
    for (e, f) in events.iter().zip(&frames) {
        assert_eq!(
            f.id.as_deref(),
            Some(&*Cursor::new(&epoch, e.seq).to_string())
        );
        assert_eq!(f.event, e.kind);
        let streamed: Value = serde_json::from_str(&f.data)?;
        assert_eq!(streamed, as_streamed(&epoch, e)?);
    }

    // And what the history holds: each message came with the listener's event of its id,
    // carrying that message; the history's cursor is the last event handed.
    for history in [&history_a, &history_b] {
        assert_eq!(history.messages.len(), 4);
        assert_eq!(
            history.cursor,
            Cursor::new(&epoch, last_seq(&batches)).to_string()
        );
        for m in &history.messages {
            let e = events
                .iter()
                .find(|e| Cursor::new(&epoch, e.seq).to_string() == m.event_id)
                .ok_or_else(|| format!("no event {} for message {}", m.event_id, m.message_id))?;
            assert!(matches!(e.kind.as_str(), "message_received" | "turn_ended"));
            assert_eq!(e.session_id, history.session_id);
            let body: Value = serde_json::from_str(&e.data)?;
            assert_eq!(body["message"], serde_json::to_value(m)?);
        }
    }
    Ok(())
}

/// What the blocked listener recorded of one batch, once released.
struct Seen {
    batch: Batch,
    /// The missed events it read back, when the batch told of some.
    read: Option<Result<Vec<Committed>, String>>,
}

#[tokio::test]
async fn a_blocked_listener_holds_up_nothing_and_reads_back_exactly_what_it_missed() -> TestResult {
    let (entered_tx, mut entered) = mpsc::unbounded_channel::<()>();
    let (release, released) = watch::channel(false);
    let (seen_tx, mut seen_rx) = mpsc::unbounded_channel::<Seen>();
    // Blocks on its first batch until the test releases it, then records every batch and reads
    // back what it was told it missed.
    let blocked = move |batch: Batch| {
        let entered = entered_tx.clone();
        let mut released = released.clone();
        let seen = seen_tx.clone();
        async move {
            let _ = entered.send(());
            let _ = released.wait_for(|r| *r).await;
            let read = match &batch.missed {
                Some(missed) => Some(missed.read().await.map_err(|e| e.to_string())),
                None => None,
            };
            let _ = seen.send(Seen { batch, read });
        }
    };
    let (fast, mut fast_rx) = recorder();
    let server = Embedded::start(|s| s.listener_with_queue(blocked, 2).listener(fast)).await?;
    let api = &server.api;
    let mut stream = api.stream("session=s", None).await?;

    let first = api.send("s", "first").await?.turn_id;
    tokio::time::timeout(DEADLINE, entered.recv())
        .await?
        .ok_or("the listener was never called")?;
    until_all_ended(&mut stream, &[first]).await?;

    // Each message is a commit of its own before its answer, and its turn several more: far
    // more than the blocked listener's queue of 2 holds. Every one is accepted and streamed.
    let mut last_end = 0;
    for i in 0..6 {
        let turn = api.send("s", &format!("/deltas {}", i + 2)).await?.turn_id;
        let t = api.wait_turn_end(&turn).await?;
        assert_eq!(t.state, TurnState::Completed);
        let frames = until_all_ended(&mut stream, &[turn]).await?;
        let end = frames.last().and_then(|f| f.id.as_deref()).ok_or("no id")?;
        last_end = end.parse::<Cursor>()?.sequence;
    }
    assert!(seen_rx.try_recv().is_err(), "the listener is still blocked");
    // The other listener is not held up by it.
    let mut fast_batches = Vec::new();
    wait_for(|| {
        take(&mut fast_rx, &mut fast_batches);
        let caught_up = last_seq(&fast_batches) >= last_end;
        async move { Ok(caught_up.then_some(())) }
    })
    .await?;

    let _ = release.send(true);
    let mut seen = Vec::new();
    wait_for(|| {
        while let Ok(s) = seen_rx.try_recv() {
            seen.push(s);
        }
        let through = seen
            .iter()
            .filter_map(|s| {
                let events = s.batch.events.last().map(|e| e.seq);
                events.or(s.batch.missed.as_ref().map(|m| m.through))
            })
            .max()
            .unwrap_or(0);
        async move { Ok((through >= last_end).then_some(())) }
    })
    .await?;
    // Released, it is handed new commits again.
    let after = api.send("s", "after").await?.turn_id;
    until_all_ended(&mut stream, std::slice::from_ref(&after)).await?;
    server.stop().await?;
    while let Ok(s) = seen_rx.try_recv() {
        seen.push(s);
    }
    take(&mut fast_rx, &mut fast_batches);
    drain(fast_rx, &mut fast_batches).await?;

    assert!(fast_batches.iter().all(|b| b.missed.is_none()));
    let all = events_of(&fast_batches);
    // What the blocked listener was handed and what it read back, in order, is every event.
    let mut rebuilt: Vec<Committed> = Vec::new();
    let mut told = 0;
    for s in &seen {
        if let Some(missed) = &s.batch.missed {
            told += 1;
            let read = s.read.clone().ok_or("not read")??;
            assert!(missed.count > 0);
            assert_eq!(
                read.len() as u64,
                missed.count,
                "every missed event reads back"
            );
            assert_eq!(missed.after, rebuilt.last().map_or(0, |e| e.seq));
            assert_eq!(read.last().map(|e| e.seq), Some(missed.through));
            rebuilt.extend(read);
        }
        rebuilt.extend(s.batch.events.iter().cloned());
    }
    assert!(told > 0, "the blocked listener was told it missed events");
    assert_eq!(rebuilt, all);
    assert!(rebuilt
        .iter()
        .any(|e| e.turn_id.as_deref() == Some(&*after)));
    Ok(())
}

/// Replies with one fixed line.
struct Fixed;

impl Agent for Fixed {
    fn run<'a>(
        &'a self,
        _ctx: TurnContext,
        sink: TurnSink,
    ) -> BoxFuture<'a, Result<(), AgentError>> {
        Box::pin(async move {
            sink.response("fixed reply");
            Ok(())
        })
    }
}

#[tokio::test]
async fn a_panicking_listener_stops_neither_the_other_listeners_nor_the_server() -> TestResult {
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = calls.clone();
    let panicking = move |_batch: Batch| {
        counted.fetch_add(1, Ordering::SeqCst);
        async { panic!("listener bug") }
    };
    let (listener, mut batches_rx) = recorder();
    let server = Embedded::start(|s| {
        s.agent(Arc::new(Fixed))
            .listener(panicking)
            .listener(listener)
    })
    .await?;
    let api = &server.api;
    let mut last_end = String::new();
    for content in ["one", "two"] {
        let turn = api.send("p", content).await?.turn_id;
        let t = api.wait_turn_end(&turn).await?;
        assert_eq!(t.state, TurnState::Completed);
        assert_eq!(t.text, "fixed reply");
        last_end = api.history("p").await?.0.cursor;
    }
    let last_end = last_end.parse::<Cursor>()?.sequence;
    let mut batches = Vec::new();
    wait_for(|| {
        take(&mut batches_rx, &mut batches);
        let handed = last_seq(&batches) >= last_end;
        async move { Ok(handed.then_some(())) }
    })
    .await?;
    // It panicked on its first batch and was handed the next ones all the same.
    wait_for(|| {
        let n = calls.load(Ordering::SeqCst);
        async move { Ok((n >= 2).then_some(())) }
    })
    .await?;
    server.stop().await?;
    drain(batches_rx, &mut batches).await?;
    let events = events_of(&batches);
    assert!(events.windows(2).all(|w| w[0].seq < w[1].seq));
    assert_eq!(events.last().map(|e| e.seq), Some(last_end));
    Ok(())
}
