//! Several `turnstream` processes sharing one PostgreSQL database, each addressed on its own: a
//! turn is claimed once when three nodes race; `kill -9` of the node running a turn ends it
//! `interrupted` once and the session's next turn runs on another node; a stream on one node sees
//! every other node's events in journal order with no gap; `Last-Event-ID` resume moves across
//! nodes; a PostgreSQL restart mid-turn loses no acknowledged message; nodes starting together on
//! an empty database all come up.
//!
//! These run only on PostgreSQL (`TURNSTREAM_TEST_DATABASE_URL`, set by `./run test` for its
//! private cluster); elsewhere each returns at once, saying why. Every wait has a deadline.

mod support;

use std::collections::{HashMap, HashSet};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use support::{
    cluster::Proxy, deltas_text, listening_url, pg, reply_text, seq, Api, SseClient, TestResult,
    TestServer,
};
use turnstream_protocol::{Event, EventBody, TurnState};

/// Flags every node of these tests gets: no per-client message rate (all requests come from one
/// address), single-delta events.
const NODE_ARGS: &[&str] = &[
    "--messages-per-minute",
    "0",
    "--coalesce-ms",
    "0",
    "--worker-lease-secs",
    "2",
];

/// How long the survivors may take to notice a node that died mid-turn and end its turn (the
/// nodes here hold 2 s leases on the turns they run).
const NODE_LOSS_DEADLINE: Duration = Duration::from_secs(30);

/// The test that restarts PostgreSQL takes this for writing; every other test here holds it for
/// reading, so none of them sees the restart.
static PG_CLUSTER: tokio::sync::RwLock<()> = tokio::sync::RwLock::const_new(());

/// `n` nodes on one fresh database with `extra` flags after [`NODE_ARGS`], or `None` (and a note
/// on stderr) when the tests do not run on PostgreSQL.
fn nodes(test: &str, n: usize, extra: &[&str]) -> TestResult<Option<TestServer>> {
    if pg::admin_url().is_none() {
        eprintln!(
            "{test}: skipped: several nodes need a shared PostgreSQL database and \
             TURNSTREAM_TEST_DATABASE_URL is unset (`./run test` starts a private cluster and sets it)"
        );
        return Ok(None);
    }
    let args: Vec<&str> = NODE_ARGS.iter().chain(extra).copied().collect();
    Ok(Some(TestServer::start_nodes(n, &args)?))
}

/// Polls `check` until it yields a value, failing after `limit`.
async fn wait_within<T, F, Fut>(limit: Duration, what: &str, mut check: F) -> TestResult<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = TestResult<Option<T>>>,
{
    let start = Instant::now();
    loop {
        if let Some(v) = check().await? {
            return Ok(v);
        }
        if start.elapsed() > limit {
            return Err(format!("{what}: not before the deadline ({limit:?})").into());
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// `turnstream_turns_started_total` of each running node (0 for a node that is down).
async fn started_per_node(s: &TestServer) -> TestResult<Vec<f64>> {
    let mut out = Vec::new();
    for i in 0..s.node_count() {
        out.push(if s.node_running(i) {
            s.node(i).counter("turnstream_turns_started_total").await?
        } else {
            0.0
        });
    }
    Ok(out)
}

fn epoch_and_seq(cursor: &str) -> TestResult<(String, i64)> {
    let (epoch, n) = cursor
        .rsplit_once('-')
        .ok_or_else(|| format!("cursor {cursor:?}"))?;
    Ok((epoch.to_string(), n.parse()?))
}

/// The `turn_ended` states of `turn` in `events`.
fn endings(events: &[Event], turn: &str) -> Vec<TurnState> {
    events
        .iter()
        .filter(|e| e.turn_id.as_deref() == Some(turn))
        .filter_map(|e| match &e.body {
            EventBody::TurnEnded { state, .. } => Some(*state),
            _ => None,
        })
        .collect()
}

fn count_kind(events: &[Event], turn: &str, kind: &str) -> usize {
    events
        .iter()
        .filter(|e| e.turn_id.as_deref() == Some(turn) && e.body.kind() == kind)
        .count()
}

fn position(events: &[Event], turn: &str, kind: &str) -> TestResult<usize> {
    events
        .iter()
        .position(|e| e.turn_id.as_deref() == Some(turn) && e.body.kind() == kind)
        .ok_or_else(|| format!("no {kind} of {turn}").into())
}

/// Ids strictly increasing, and each event exactly the journal's event of that id.
fn assert_matches_journal(seen: &[Event], journal: &[Event], what: &str) -> TestResult {
    for w in seen.windows(2) {
        if seq(&w[1]) <= seq(&w[0]) {
            return Err(format!("{what}: {} after {}", w[1].id, w[0].id).into());
        }
    }
    let by_id: HashMap<&str, &Event> = journal.iter().map(|e| (e.id.as_str(), e)).collect();
    for e in seen {
        let j = by_id
            .get(e.id.as_str())
            .ok_or_else(|| format!("{what}: {} is not in the journal", e.id))?;
        if serde_json::to_value(e)? != serde_json::to_value(j)? {
            return Err(format!("{what}: {} differs from the journal's", e.id).into());
        }
    }
    Ok(())
}

/// Reads `st` until it has delivered every event of `journal` after `after` (an id), checking
/// each is the journal's next one: in order, no gap, no duplicate.
async fn expect_journal_tail(
    st: &mut SseClient,
    journal: &[Event],
    after: i64,
    what: &str,
) -> TestResult {
    for want in journal.iter().filter(|e| seq(e) > after) {
        let got = st.next_event().await?;
        if got.id != want.id {
            return Err(format!("{what}: got {} where the journal has {}", got.id, want.id).into());
        }
        if serde_json::to_value(&got)? != serde_json::to_value(want)? {
            return Err(format!("{what}: {} differs from the journal's", got.id).into());
        }
    }
    Ok(())
}

#[test]
fn the_proxy_sends_each_connection_to_the_next_node_that_is_up() -> TestResult {
    use std::io::{Read, Write};
    // Three "nodes" that each answer a connection with their number and close it.
    let mut addrs = Vec::new();
    for i in 0..3u8 {
        let l = std::net::TcpListener::bind("127.0.0.1:0")?;
        addrs.push(l.local_addr()?);
        std::thread::spawn(move || {
            for mut c in l.incoming().flatten() {
                let _ = c.write_all(&[b'0' + i]);
            }
        });
    }
    let proxy = Proxy::start(3)?;
    for (i, a) in addrs.iter().enumerate() {
        proxy.set(i, Some(*a));
    }
    let target = support::cluster::socket_addr(&proxy.url)?;
    let hits = |n: usize| -> TestResult<String> {
        let mut out = String::new();
        for _ in 0..n {
            let mut c = std::net::TcpStream::connect(target)?;
            c.set_read_timeout(Some(support::DEADLINE))?;
            c.read_to_string(&mut out)?;
        }
        Ok(out)
    };
    assert_eq!(hits(6)?, "012012");
    // A node that is down is skipped.
    proxy.set(1, None);
    assert_eq!(hits(4)?, "0220");
    // So is one that refuses connections: a closed port.
    let closed = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?;
    proxy.set(1, Some(closed));
    assert_eq!(hits(3)?, "220");
    Ok(())
}

#[test]
fn the_database_name_in_a_url_is_replaced() -> TestResult {
    for (admin, want) in [
        (
            "postgres://postgres@127.0.0.1:5432/postgres",
            "postgres://postgres@127.0.0.1:5432/ts_1",
        ),
        (
            "postgresql://u:p@h:1/db?sslmode=disable",
            "postgresql://u:p@h:1/ts_1?sslmode=disable",
        ),
        ("postgres://h", "postgres://h/ts_1"),
    ] {
        assert_eq!(pg::with_database(admin, "ts_1")?, want);
    }
    Ok(())
}

/// `turnstream_connections_total` (streams opened) of each running node (0 for one that is down).
async fn streams_per_node(s: &TestServer) -> TestResult<Vec<f64>> {
    let mut out = Vec::new();
    for i in 0..s.node_count() {
        out.push(if s.node_running(i) {
            s.node(i).counter("turnstream_connections_total").await?
        } else {
            0.0
        });
    }
    Ok(out)
}

/// Opens `n` streams through the proxy (each a new connection) and keeps them open.
async fn open_streams(s: &TestServer, n: usize) -> TestResult<Vec<SseClient>> {
    let mut out = Vec::new();
    for _ in 0..n {
        out.push(s.stream("session=rotation", None).await?);
    }
    Ok(out)
}

/// The test support's node controls: each connection through the proxy goes to the next node; a
/// node that is down is out of the rotation and the others answer; once started again (on a new
/// port) it is back in; `restart` brings every node back on the same database, the proxy staying
/// where it is.
#[tokio::test]
async fn the_proxy_follows_nodes_going_down_and_coming_back() -> TestResult {
    let _pg = PG_CLUSTER.read().await;
    let Some(mut s) = nodes("node_controls", 3, &[])? else {
        return Ok(());
    };
    let proxy = s.url.clone();
    let _open = open_streams(&s, 6).await?;
    assert_eq!(streams_per_node(&s).await?, vec![2.0, 2.0, 2.0]);

    let old = s.node_urls();
    s.kill9_node(1)?;
    assert!(!s.node_running(1));
    let _more = open_streams(&s, 4).await?;
    let now = streams_per_node(&s).await?;
    assert_eq!(
        now[0] + now[2],
        8.0,
        "node 1 is out of the rotation: {now:?}"
    );

    s.start_node(1)?;
    assert!(s.node_running(1));
    assert_ne!(s.node_urls()[1], old[1], "a new port");
    let _again = open_streams(&s, 3).await?;
    assert_eq!(streams_per_node(&s).await?[1], 1.0, "node 1 is back in");

    s.restart(None)?;
    for i in 0..3 {
        assert_eq!(s.node(i).get_json("/readyz").await?.0, 200, "node {i}");
    }
    assert_eq!(s.url, proxy, "the proxy stays where it is");
    assert!(s.database_url().is_some_and(|u| u.contains("/ts_")));
    Ok(())
}

/// Three processes started at the same moment on an empty database (so racing to create and
/// migrate the schema) all come up and serve; the one journal is visible from each.
#[tokio::test]
async fn nodes_starting_together_on_an_empty_database_all_come_up() -> TestResult {
    let Some(admin) = pg::admin_url() else {
        eprintln!("nodes_starting_together: skipped: needs TURNSTREAM_TEST_DATABASE_URL");
        return Ok(());
    };
    let _pg = PG_CLUSTER.read().await;
    let db = pg::TestDatabase::create(&admin)?;
    let dir = tempfile::tempdir()?;
    let mut children = Vec::new();
    for _ in 0..3 {
        let child = Command::new(env!("CARGO_BIN_EXE_turnstream"))
            .args(["serve", "--listen", "127.0.0.1:0", "--db", &db.server_url])
            .args(NODE_ARGS)
            .current_dir(dir.path())
            .env("RUST_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()?;
        children.push(KillOnDrop(child));
    }
    let mut apis = Vec::new();
    for c in &mut children {
        apis.push(Api {
            url: listening_url(&mut c.0)?,
            http: reqwest::Client::builder()
                .timeout(support::DEADLINE)
                .build()?,
        });
    }
    for a in &apis {
        let (status, body) = a.get_json("/readyz").await?;
        assert_eq!(status, 200, "{}: /readyz {body}", a.url);
    }
    let sent = apis[0].send("together", "/echo one journal").await?;
    for a in &apis {
        let t = a.wait_turn_end(&sent.turn_id).await?;
        assert_eq!(t.state, TurnState::Completed);
        assert_eq!(t.text, "one journal");
    }
    drop(children);
    drop(db);
    Ok(())
}

struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Many turns posted round-robin over three nodes, all racing to claim them: each turn starts
/// and ends exactly once, with its whole reply, and each session's turns run one at a time in
/// the order they were sent.
#[tokio::test]
async fn a_turn_is_claimed_once_when_three_nodes_race() -> TestResult {
    let _pg = PG_CLUSTER.read().await;
    let Some(s) = nodes("claimed_once", 3, &["--demo-delay-ms", "1"])? else {
        return Ok(());
    };
    let sessions = ["racea", "raceb", "racec", "raced"];
    let mut turns: Vec<(String, String)> = Vec::new();
    for round in 0..4 {
        for (k, session) in sessions.iter().enumerate() {
            // Each post goes to the next node: every node queues turns that every node may claim.
            let node = s.node((round + k) % 3);
            let sent = node
                .send(session, &format!("/deltas {}", 5 + round))
                .await?;
            turns.push((session.to_string(), sent.turn_id));
        }
    }
    for (i, (_, turn)) in turns.iter().enumerate() {
        let t = s.node(i % 3).wait_turn_end(turn).await?;
        assert_eq!(t.state, TurnState::Completed, "{turn}");
    }
    let started = started_per_node(&s).await?;
    assert_eq!(
        started.iter().sum::<f64>(),
        turns.len() as f64,
        "each turn started once over all nodes: {started:?}"
    );
    // The journal, read from each node in turn, says the same.
    for (k, session) in sessions.iter().enumerate() {
        let journal = replay_to_last_message(&s.node(k % 3), session).await?;
        let mut last_end = None;
        for (round, (_, turn)) in turns.iter().filter(|(se, _)| se == session).enumerate() {
            assert_eq!(count_kind(&journal, turn, "turn_started"), 1, "{turn}");
            assert_eq!(
                endings(&journal, turn),
                vec![TurnState::Completed],
                "{turn}"
            );
            assert_eq!(reply_text(&journal, turn), deltas_text(5 + round), "{turn}");
            let start = position(&journal, turn, "turn_started")?;
            if let Some(prev) = last_end {
                assert!(
                    start > prev,
                    "{turn} started before the previous turn ended"
                );
            }
            last_end = Some(position(&journal, turn, "turn_ended")?);
        }
    }
    Ok(())
}

/// The events of `session` from the start of a journal that holds other sessions too, up to the
/// event that brought its newest message (use it once the session's turns have ended).
async fn replay_to_last_message(api: &Api, session: &str) -> TestResult<Vec<Event>> {
    let (history, cursor) = api
        .history(session)
        .await
        .map_err(|e| format!("history: {e}"))?;
    let (epoch, _) = epoch_and_seq(&cursor)?;
    let last = history
        .messages
        .last()
        .ok_or("no message in the session")?
        .event_id
        .clone();
    let (_, last_seq) = epoch_and_seq(&last)?;
    let mut st = api
        .stream(&format!("session={session}&cursor={epoch}-0"), None)
        .await?;
    let mut out = Vec::new();
    loop {
        let e = st.next_event().await?;
        let done = seq(&e) >= last_seq;
        out.push(e);
        if done {
            return Ok(out);
        }
    }
}

/// `kill -9` of the node running a turn: a surviving node ends that turn `interrupted`, exactly
/// once, and the session's next turn (sent to a survivor while the dead node held the turn) runs
/// on a survivor and completes.
#[tokio::test]
async fn kill9_of_the_node_running_a_turn_ends_it_interrupted_once() -> TestResult {
    let _pg = PG_CLUSTER.read().await;
    let Some(mut s) = nodes("kill9_node", 3, &["--demo-delay-ms", "20"])? else {
        return Ok(());
    };
    let session = "crash";
    let (_, cursor) = s.node(0).history(session).await?;
    let mut live = s
        .node(0)
        .stream(&format!("session={session}&cursor={cursor}"), None)
        .await?;
    let t1 = s.node(0).send(session, "/deltas 100000").await?;
    // Running, with output journaled.
    let mut seen = Vec::new();
    while count_kind(&seen, &t1.turn_id, "response_delta") < 5 {
        seen.push(live.next_event().await?);
    }
    drop(live);
    let started = started_per_node(&s).await?;
    let runner = started
        .iter()
        .position(|n| *n == 1.0)
        .ok_or_else(|| format!("no node started the turn: {started:?}"))?;
    assert_eq!(started.iter().sum::<f64>(), 1.0, "{started:?}");
    s.kill9_node(runner)?;
    let survivors: Vec<usize> = (0..3).filter(|i| *i != runner).collect();
    let a = s.node(survivors[0]);
    let b = s.node(survivors[1]);

    // The next message, sent while the dead node still holds the session's running turn.
    let t2 = a.send(session, "/echo after the crash").await?;
    let t1_end = wait_within(NODE_LOSS_DEADLINE, "the dead node's turn ends", || async {
        let t = b.turn(&t1.turn_id).await?;
        Ok(t.state.is_terminal().then_some(t))
    })
    .await?;
    assert_eq!(t1_end.state, TurnState::Interrupted);
    let t2_end = b.wait_turn_end(&t2.turn_id).await?;
    assert_eq!(t2_end.state, TurnState::Completed);
    assert_eq!(t2_end.text, "after the crash");

    let journal = a.replay_session(session).await?;
    assert_eq!(endings(&journal, &t1.turn_id), vec![TurnState::Interrupted]);
    assert_eq!(endings(&journal, &t2.turn_id), vec![TurnState::Completed]);
    assert_eq!(count_kind(&journal, &t2.turn_id, "turn_started"), 1);
    assert!(
        position(&journal, &t2.turn_id, "turn_started")?
            > position(&journal, &t1.turn_id, "turn_ended")?,
        "the next turn started only after the interrupted one ended"
    );
    // Every event a stream delivered before the crash is still the journal's.
    assert_matches_journal(&seen, &journal, "before the crash")?;
    let after = started_per_node(&s).await?;
    assert_eq!(
        survivors.iter().map(|i| after[*i]).sum::<f64>(),
        1.0,
        "the next turn ran on a survivor: {after:?}"
    );
    Ok(())
}

/// A stream open on every node while messages are posted round-robin to all of them: each
/// stream delivers exactly the journal, in order, with no gap, whichever node committed each
/// event (a message is committed by the node that accepted it; a turn's output by the node that
/// runs it).
#[tokio::test]
async fn a_stream_on_one_node_sees_the_others_events_in_order_with_no_gap() -> TestResult {
    let _pg = PG_CLUSTER.read().await;
    let Some(s) = nodes("fan_out", 3, &["--demo-delay-ms", "2"])? else {
        return Ok(());
    };
    let session = "fan";
    let (_, cursor) = s.node(0).history(session).await?;
    let (_, from) = epoch_and_seq(&cursor)?;
    let mut streams = Vec::new();
    for i in 0..3 {
        let st = s
            .node(i)
            .stream(&format!("session={session}&cursor={cursor}"), None)
            .await?;
        streams.push(st);
    }
    let mut turns = Vec::new();
    for k in 0..9 {
        let sent = s
            .node(k % 3)
            .send(session, &format!("/deltas {}", 10 + k))
            .await?;
        turns.push(sent.turn_id);
    }
    let last = turns.last().ok_or("no turn")?.clone();
    s.node(1).wait_turn_end(&last).await?;
    let journal = s.node(2).replay_session(session).await?;
    for (k, turn) in turns.iter().enumerate() {
        assert_eq!(endings(&journal, turn), vec![TurnState::Completed]);
        assert_eq!(reply_text(&journal, turn), deltas_text(10 + k));
    }
    for (i, st) in streams.iter_mut().enumerate() {
        expect_journal_tail(st, &journal, from, &format!("the stream on node {i}")).await?;
    }
    let started = started_per_node(&s).await?;
    eprintln!("turns started per node: {started:?}");
    Ok(())
}

/// A long turn read over three connections, each to another node, each resuming with
/// `Last-Event-ID` where the previous one stopped: together exactly the journal, no gap, no
/// duplicate, the whole reply.
#[tokio::test]
async fn last_event_id_resume_moves_across_nodes() -> TestResult {
    let _pg = PG_CLUSTER.read().await;
    let Some(s) = nodes("resume_across", 3, &["--demo-delay-ms", "5"])? else {
        return Ok(());
    };
    let session = "hop";
    let (_, cursor) = s.node(0).history(session).await?;
    let mut st = s
        .node(0)
        .stream(&format!("session={session}&cursor={cursor}"), None)
        .await?;
    let sent = s.node(1).send(session, "/deltas 300").await?;
    let mut seen: Vec<Event> = Vec::new();
    for hop in 1..=4 {
        // Read a stretch, drop the connection, resume on the next node.
        let stop_at = seen.len() + 40;
        while seen.len() < stop_at {
            seen.push(st.next_event().await?);
        }
        let last = seen.last().ok_or("no events")?.id.clone();
        drop(st);
        st = s
            .node(hop % 3)
            .stream(
                &format!("session={session}&cursor={cursor}&snapshot=1"),
                Some(&last),
            )
            .await?;
    }
    seen.extend(st.until_turn_ended(&sent.turn_id).await?);
    let ids: Vec<&str> = seen.iter().map(|e| e.id.as_str()).collect();
    let unique: HashSet<&str> = ids.iter().copied().collect();
    assert_eq!(unique.len(), ids.len(), "no duplicate");
    assert_eq!(reply_text(&seen, &sent.turn_id), deltas_text(300));
    let journal = s.node(2).replay_session(session).await?;
    let journal_ids: Vec<&str> = journal.iter().map(|e| e.id.as_str()).collect();
    assert_eq!(ids, journal_ids, "exactly the journal, in order, no gap");
    assert_matches_journal(&seen, &journal, "resumed across nodes")?;
    Ok(())
}

/// PostgreSQL restarts (`pg_ctl restart -m fast`) while a turn streams and messages keep coming
/// through every node: afterwards each node is ready again, every message that was acknowledged
/// (202) is in history exactly once, each of their turns ended exactly once, and every event a
/// stream delivered before the restart is still the journal's.
#[tokio::test]
async fn a_postgres_restart_mid_turn_loses_no_acknowledged_message() -> TestResult {
    if std::env::var_os("TURNSTREAM_TEST_PG_CTL").is_none() && pg::admin_url().is_some() {
        eprintln!(
            "postgres_restart: skipped: TURNSTREAM_TEST_PG_CTL (a command that restarts the \
             cluster) is unset"
        );
        return Ok(());
    }
    let _pg = PG_CLUSTER.write().await;
    let Some(s) = nodes(
        "postgres_restart",
        3,
        &["--demo-delay-ms", "10", "--max-active-turns", "1000"],
    )?
    else {
        return Ok(());
    };
    let session = "pgrestart";
    let (_, cursor) = s.node(0).history(session).await?;
    let mut live = s
        .node(0)
        .stream(&format!("session={session}&cursor={cursor}"), None)
        .await?;
    let long = s.node(1).send(session, "/deltas 400").await?;
    let mut seen = Vec::new();
    while count_kind(&seen, &long.turn_id, "response_delta") < 10 {
        seen.push(live.next_event().await?);
    }
    drop(live);

    let restart = tokio::task::spawn_blocking(pg::restart_cluster);
    // (client_message_id, turn, acknowledged once the restart was over)
    let mut acknowledged: Vec<(String, String, bool)> = Vec::new();
    let mut refused = 0;
    let mut k = 0usize;
    let mut restarted = false;
    let mut after_restart = 0;
    let deadline = Instant::now() + support::DEADLINE * 2;
    while after_restart < 10 {
        if Instant::now() > deadline {
            return Err("PostgreSQL did not come back".into());
        }
        if !restarted && restart.is_finished() {
            restarted = true;
        }
        let cmid = format!("m{k}");
        let node = s.node(k % 3);
        k += 1;
        match node
            .post(session, &format!("/echo message {cmid}"), Some(&cmid))
            .await
        {
            Ok((202, body)) => {
                let turn = body["turn_id"].as_str().ok_or("no turn_id")?.to_string();
                acknowledged.push((cmid, turn, restarted));
                if restarted {
                    after_restart += 1;
                }
            }
            Ok((status, _)) if status >= 500 => refused += 1,
            Ok((status, body)) => return Err(format!("POST answered {status}: {body}").into()),
            Err(_) => refused += 1,
        }
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    restart.await??;
    eprintln!(
        "postgres_restart: {} acknowledged, {refused} refused while it restarted",
        acknowledged.len()
    );
    for i in 0..3 {
        let node = s.node(i);
        wait_within(
            support::DEADLINE,
            "/readyz 200 after the restart",
            || async { Ok((node.get_json("/readyz").await?.0 == 200).then_some(())) },
        )
        .await?;
    }
    let t = s.node(2).wait_turn_end(&long.turn_id).await?;
    eprintln!("postgres_restart: the long turn ended {:?}", t.state);
    // Every acknowledged turn ends; those acknowledged after the restart complete.
    for (cmid, turn, after) in &acknowledged {
        let t = s.node(0).wait_turn_end(turn).await?;
        if *after {
            assert_eq!(t.state, TurnState::Completed, "{cmid}: {turn}");
            assert_eq!(t.text, format!("message {cmid}"));
        }
    }
    let journal = s.node(1).replay_session(session).await?;
    assert_eq!(
        endings(&journal, &long.turn_id).len(),
        1,
        "the long turn ended once"
    );
    for (cmid, turn, _) in &acknowledged {
        assert_eq!(
            endings(&journal, turn).len(),
            1,
            "{cmid}: {turn} ended once"
        );
    }
    assert_matches_journal(&seen, &journal, "delivered before the restart")?;
    let (status, page) = s
        .node(2)
        .get_json(&format!("/api/sessions/{session}/history?limit=1000"))
        .await?;
    assert_eq!(status, 200);
    let mut count: HashMap<String, usize> = HashMap::new();
    for m in page["messages"].as_array().ok_or("no messages")? {
        if let Some(c) = m["client_message_id"].as_str() {
            *count.entry(c.to_string()).or_default() += 1;
        }
    }
    for (cmid, _, _) in &acknowledged {
        assert_eq!(
            count.get(cmid),
            Some(&1),
            "{cmid} is in history exactly once"
        );
    }
    Ok(())
}

/// `/readyz` says 503 once the database cannot be reached (here: it is gone, its connections
/// closed), and requests that need it fail with the storage error's JSON instead of hanging.
#[tokio::test]
async fn readiness_fails_when_the_database_is_unreachable() -> TestResult {
    let _shared = PG_CLUSTER.read().await;
    let Some(s) = nodes("readiness_fails_when_the_database_is_unreachable", 1, &[])? else {
        return Ok(());
    };
    let (status, _) = s.get_json("/readyz").await?;
    assert_eq!(status, 200);
    let admin = pg::admin_url().ok_or("no admin URL")?;
    let url = s.database_url().ok_or("no database")?;
    let name = url.rsplit('/').next().ok_or("no database name")?;
    pg::sql(&admin, &format!("DROP DATABASE {name} WITH (FORCE)"))?;
    let body = wait_within(Duration::from_secs(20), "readyz answers 503", || async {
        let (status, body) = s.get_json("/readyz").await?;
        Ok((status == 503).then_some(body))
    })
    .await?;
    assert!(body["error"]["code"].is_string(), "{body}");
    let (status, body) = s.post("gone", "hello", None).await?;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["error"]["code"], "storage_unavailable", "{body}");
    Ok(())
}
