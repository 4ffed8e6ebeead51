//! Servers whose database URL is a connection pooler's (PgBouncer, `scripts/pg-pooler.sh`), as
//! `./run test` runs them: in transaction mode without and with a direct `--database-listen-url`,
//! and in session mode. Each server hears other servers' commits through `LISTEN` where its
//! setup allows it, else polls, and says which once, in its log and in `/metrics`; events cross
//! nodes either way; and another node's retention expires old cursors on this one, at once when
//! it polls (its replay tail then answers no resume).
//!
//! These run only with `TURNSTREAM_TEST_POOLER_URL` (and `TURNSTREAM_TEST_DATABASE_URL`);
//! `TURNSTREAM_TEST_EXPECT_POLLING` (`1` or `0`) says which the setup must give. Every wait has a
//! deadline.

mod support;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use support::{listening_url, pg, wait_for, Api, TestResult, TestServer, DEADLINE};
use turnstream_protocol::TurnState;

/// What the log says, once, when a server polls.
const POLLING_SAID: &str = "by polling the journal every";

/// The gauge that says it.
const POLLING: &str = "turnstream_journal_polling";

/// Whether the tests run behind a pooler; if not, says so.
fn pooled(test: &str) -> bool {
    let yes = pg::admin_url().is_some() && pg::pooler_url().is_some();
    if !yes {
        eprintln!("{test}: skipped: needs TURNSTREAM_TEST_POOLER_URL (`./run test` sets it)");
    }
    yes
}

/// `TURNSTREAM_TEST_EXPECT_POLLING`, if set.
fn expect_polling() -> Option<bool> {
    match std::env::var("TURNSTREAM_TEST_EXPECT_POLLING").as_deref() {
        Ok("1") => Some(true),
        Ok("0") => Some(false),
        _ => None,
    }
}

/// What `node`'s gauge settles at: it is 0 until the tail has tried to listen.
async fn polling(node: &Api, expected: Option<bool>) -> TestResult<bool> {
    match expected {
        Some(want) => {
            wait_for(|| async {
                let v = node.counter(POLLING).await? == 1.0;
                Ok((v == want).then_some(v))
            })
            .await
        }
        None => {
            // The session check and the probe take at most a few seconds.
            tokio::time::sleep(Duration::from_secs(5)).await;
            Ok(node.counter(POLLING).await? == 1.0)
        }
    }
}

#[tokio::test]
async fn a_server_listens_or_polls_as_its_setup_allows_and_says_so_once() -> TestResult {
    if !pooled("a_server_listens_or_polls_as_its_setup_allows_and_says_so_once") {
        return Ok(());
    }
    let admin = pg::admin_url().ok_or("no admin URL")?;
    let db = pg::TestDatabase::create(&admin)?;
    let dir = tempfile::tempdir()?;
    let log = dir.path().join("server.log");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_turnstream"));
    cmd.args(["serve", "--listen", "127.0.0.1:0", "--db", &db.server_url])
        .args(["--demo-delay-ms", "2"]);
    if pg::listen_direct() {
        cmd.args(["--database-listen-url", &db.url]);
    }
    let mut child = cmd
        .env("RUST_LOG", "warn,turnstream_server::journal=info")
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&log)?)
        .spawn()?;
    let result = async {
        let api = Api {
            url: listening_url(&mut child)?,
            http: reqwest::Client::builder().timeout(DEADLINE).build()?,
        };
        let polls = polling(&api, expect_polling()).await?;
        // Commits after that: nothing more is said.
        for i in 0..3 {
            let sent = api.send("said", &format!("/echo {i}")).await?;
            assert_eq!(
                api.wait_turn_end(&sent.turn_id).await?.state,
                TurnState::Completed
            );
        }
        assert_eq!(api.counter(POLLING).await? == 1.0, polls);
        Ok::<bool, Box<dyn std::error::Error + Send + Sync>>(polls)
    }
    .await;
    let _ = child.kill();
    let _ = child.wait();
    let polls = result?;
    let text = std::fs::read_to_string(&log)?;
    let said = text.matches(POLLING_SAID).count();
    eprintln!("polling: {polls}; the log:\n{text}");
    assert_eq!(said, usize::from(polls), "said {said} times");
    if polls && !pg::listen_direct() {
        assert!(text.contains("--database-listen-url"), "{text}");
    }
    Ok(())
}

#[tokio::test]
async fn events_cross_nodes_and_retention_on_one_expires_old_cursors_on_the_other() -> TestResult {
    if !pooled("events_cross_nodes_and_retention_on_one_expires_old_cursors_on_the_other") {
        return Ok(());
    }
    let s = TestServer::start_nodes(2, &["--messages-per-minute", "0"])?;
    let (a, b) = (s.node(0), s.node(1));
    let polls = polling(&b, expect_polling()).await?;
    let (_, c0) = a.history("x").await?;
    let mut live = b.stream(&format!("session=x&cursor={c0}"), None).await?;
    let t0 = Instant::now();
    let sent = a.send("x", "/echo across").await?;
    let events = live.until_turn_ended(&sent.turn_id).await?;
    eprintln!(
        "a turn on one node seen whole on the other in {:?} (polling: {polls})",
        t0.elapsed()
    );
    assert_eq!(support::reply_text(&events, &sent.turn_id), "across");
    drop(live);

    let res = a
        .http
        .delete(format!("{}/api/sessions/x/realtime", a.url))
        .send()
        .await?;
    assert_eq!(res.status(), 200);
    // The other node held those events in memory: it must not answer the old cursor from there.
    let resync = || async {
        let mut st = b.stream(&format!("session=x&cursor={c0}"), None).await?;
        let f = st.next().await?.ok_or("the stream ended")?;
        Ok::<_, Box<dyn std::error::Error + Send + Sync>>(
            (f.event == "history_resync_required" && f.data.contains("expired")).then_some(()),
        )
    };
    if polls {
        // Its replay tail answers no resume: the journal, which knows the floor, does.
        assert!(
            resync().await?.is_some(),
            "answered at once, from the journal"
        );
    } else {
        // The floor's notice comes through LISTEN, a moment after the commit.
        wait_for(resync).await?;
    }
    Ok(())
}
