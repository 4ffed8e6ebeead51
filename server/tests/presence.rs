//! Presence and typing (contract v1.3), against the real binary: rosters then diffs, one member
//! over several streams, reconnects inside and outside the grace, typing cleared by its TTL,
//! presence frames without ids that leave the journal as it was, the member limit, the error
//! codes, auth isolation, a killed node's members leaving within the TTL, a shutdown's members
//! leaving at once, and v1.2 streams seeing none of it. On PostgreSQL with several nodes every
//! stream and request goes to another node (the members cross servers by `NOTIFY`).

mod support;

use std::collections::BTreeMap;
use std::time::{Duration, Instant, SystemTime};

use serde_json::{json, Value};
use support::*;
use turnstream_server::auth::mint;

const SECRET: &str = "test-secret-0123456789-abcdefghijklmnop";
/// A short grace, so leaves come quickly.
const GRACE_MS: u64 = 400;

fn args<'a>(extra: &[&'a str]) -> Vec<&'a str> {
    let mut a = vec!["--max-streams-per-client", "0"];
    if !extra.contains(&"--presence-grace-ms") {
        a.extend(["--presence-grace-ms", "400"]);
    }
    a.extend_from_slice(extra);
    a
}

fn join(session: &str, client: &str) -> String {
    format!("session={session}&presence=1&client={client}")
}

fn watch(session: &str) -> String {
    format!("session={session}&presence=watch")
}

/// A stream's view of one session's presence, built from its roster and diffs only.
struct Seen {
    sse: SseClient,
    members: BTreeMap<String, Value>,
    count: u64,
    /// Every presence frame so far: its event name and data.
    log: Vec<(String, Value)>,
}

impl Seen {
    /// Opens `query` on `api`: its first frame must be the `presence` roster.
    async fn open(api: &Api, query: &str) -> TestResult<Seen> {
        let mut seen = Seen {
            sse: api.stream(query, None).await?,
            members: BTreeMap::new(),
            count: 0,
            log: Vec::new(),
        };
        let (event, _) = seen.next().await?;
        if event != "presence" {
            return Err(format!("the first frame is {event}, not presence").into());
        }
        Ok(seen)
    }

    /// The next presence frame (journal frames are skipped), applied to the view.
    async fn next(&mut self) -> TestResult<(String, Value)> {
        self.next_within(DEADLINE).await
    }

    async fn next_within(&mut self, limit: Duration) -> TestResult<(String, Value)> {
        let until = Instant::now() + limit;
        loop {
            let left = until.saturating_duration_since(Instant::now());
            let f = self.sse.next_within(left).await?.ok_or("stream ended")?;
            if f.event != "presence" && f.event != "presence_diff" {
                continue;
            }
            if f.id.is_some() {
                return Err(format!("a presence frame with an id: {f:?}").into());
            }
            let v: Value = serde_json::from_str(&f.data)?;
            if f.event == "presence" {
                self.members = v["members"]
                    .as_array()
                    .ok_or("no members")?
                    .iter()
                    .map(|m| (m["member_id"].as_str().unwrap_or("").to_string(), m.clone()))
                    .collect();
                self.count = v["count"].as_u64().ok_or("no count")?;
            } else {
                for l in v["leaves"].as_array().ok_or("no leaves")? {
                    self.members.remove(l["member_id"].as_str().unwrap_or(""));
                }
                for j in v["joins"].as_array().ok_or("no joins")? {
                    self.members
                        .insert(j["member_id"].as_str().unwrap_or("").to_string(), j.clone());
                }
                if let Some(c) = v["count"].as_u64() {
                    self.count = c;
                }
            }
            self.log.push((f.event.clone(), v.clone()));
            return Ok((f.event, v));
        }
    }

    /// Reads presence frames until `done` holds of the view.
    async fn until(&mut self, done: impl Fn(&Seen) -> bool) -> TestResult {
        while !done(self) {
            self.next().await?;
        }
        Ok(())
    }

    fn has(&self, client: &str) -> bool {
        self.members.contains_key(client)
    }

    /// Whether any frame since `from` in the log names `client` among its joins or leaves.
    fn mentions(&self, from: usize, client: &str) -> bool {
        self.log[from..].iter().any(|(_, v)| {
            ["joins", "leaves"].iter().any(|k| {
                v[*k]
                    .as_array()
                    .is_some_and(|a| a.iter().any(|m| m["member_id"] == client))
            })
        })
    }
}

async fn roster(api: &Api, session: &str) -> TestResult<(u16, Value)> {
    api.get_json(&format!("/api/sessions/{session}/presence"))
        .await
}

/// Waits until every running node's roster of `session` satisfies `ok` (a member a stream
/// joined on one node reaches the others by broadcast).
async fn everywhere(s: &TestServer, session: &str, ok: impl Fn(&Value) -> bool) -> TestResult {
    everywhere_as(s, &s.http, session, ok).await
}

/// [`everywhere`] with the credentials of `http`.
async fn everywhere_as(
    s: &TestServer,
    http: &reqwest::Client,
    session: &str,
    ok: impl Fn(&Value) -> bool,
) -> TestResult {
    for i in 0..s.node_count() {
        if !s.node_running(i) {
            continue;
        }
        let node = Api {
            url: s.node(i).url,
            http: http.clone(),
        };
        wait_for(|| async {
            let (status, v) = roster(&node, session).await?;
            Ok((status == 200 && ok(&v)).then_some(()))
        })
        .await?;
    }
    Ok(())
}

fn lists(v: &Value, client: &str) -> bool {
    v["members"]
        .as_array()
        .is_some_and(|a| a.iter().any(|m| m["member_id"] == client))
}

async fn set_state(
    api: &Api,
    session: &str,
    client: &str,
    state: Value,
) -> TestResult<(u16, Value)> {
    api.post_json(
        &format!("/api/sessions/{session}/presence"),
        &json!({"client": client, "state": state}),
    )
    .await
}

#[tokio::test]
async fn a_roster_then_diffs_for_joins_states_and_leaves() -> TestResult {
    let s = TestServer::start(&args(&[]))?;
    let mut w = Seen::open(&s, &watch("room")).await?;
    assert!(w.members.is_empty());
    assert_eq!(w.count, 0);
    let mut a = Seen::open(&s, &join("room", "tab-a")).await?;
    // The member's own first roster holds itself.
    assert!(a.has("tab-a"), "own roster {:?}", a.members);
    let me = &a.members["tab-a"];
    assert_eq!(me["user"], Value::Null);
    assert_eq!(me["state"], json!({}));
    assert!(me["joined_at"]
        .as_i64()
        .is_some_and(|t| t > 1_600_000_000_000));
    w.until(|w| w.has("tab-a")).await?;
    assert_eq!(w.count, 1);
    everywhere(&s, "room", |v| lists(v, "tab-a")).await?;
    let (status, _) = set_state(&s, "room", "tab-a", json!({"status": "here"})).await?;
    assert_eq!(status, 204);
    w.until(|w| {
        w.members
            .get("tab-a")
            .is_some_and(|m| m["state"]["status"] == "here")
    })
    .await?;
    a.until(|a| {
        a.members
            .get("tab-a")
            .is_some_and(|m| m["state"]["status"] == "here")
    })
    .await?;
    // GET answers the same roster.
    let (status, v) = roster(&s, "room").await?;
    assert_eq!(status, 200);
    assert_eq!(v["session_id"], "room");
    assert_eq!(v["count"], 1);
    // A (re)connect with Last-Event-ID gets a fresh roster right after retry:, with its state.
    s.send("room", "hello").await?;
    let mut again = s
        .stream(
            &join("room", "tab-b"),
            Some(&format!(
                "{}-0",
                s.history("room").await?.1.split('-').next().unwrap_or("")
            )),
        )
        .await?;
    let first = again.next().await?.ok_or("ended")?;
    assert_eq!(first.event, "presence");
    assert!(first.id.is_none());
    let v: Value = serde_json::from_str(&first.data)?;
    assert!(lists(&v, "tab-a") && lists(&v, "tab-b"), "{v}");
    drop(again);
    drop(a);
    // After the grace, both leave.
    w.until(|w| !w.has("tab-a") && !w.has("tab-b")).await?;
    assert_eq!(w.count, 0);
    let left = w.log.iter().rev().find(|(_, v)| {
        v["leaves"]
            .as_array()
            .is_some_and(|l| l.iter().any(|m| m["member_id"] == "tab-a"))
    });
    // A leave carries the whole member.
    let left = left.ok_or("no leave of tab-a")?;
    assert!(left.1["leaves"][0]["state"].is_object());
    Ok(())
}

#[tokio::test]
async fn a_snapshot_comes_first_then_the_roster() -> TestResult {
    let s = TestServer::start(&args(&[]))?;
    let mut sse = s
        .stream("session=snap&snapshot=1&presence=watch", None)
        .await?;
    let first = sse.next().await?.ok_or("ended")?;
    assert_eq!(first.event, "snapshot");
    let second = sse.next().await?.ok_or("ended")?;
    assert_eq!(second.event, "presence");
    assert!(second.id.is_none());
    Ok(())
}

#[tokio::test]
async fn one_member_on_two_streams_leaves_only_with_the_last() -> TestResult {
    let s = TestServer::start(&args(&[]))?;
    let mut w = Seen::open(&s, &watch("two")).await?;
    let a1 = Seen::open(&s, &join("two", "browser")).await?;
    w.until(|w| w.has("browser")).await?;
    let a2 = Seen::open(&s, &join("two", "browser")).await?;
    assert!(a2.has("browser"));
    let mark = w.log.len();
    drop(a1);
    // Past the grace, a marker member joins: nothing of "browser" came before it.
    tokio::time::sleep(Duration::from_millis(GRACE_MS * 2)).await;
    let _marker = Seen::open(&s, &join("two", "marker")).await?;
    w.until(|w| w.has("marker")).await?;
    assert!(!w.mentions(mark, "browser"), "{:?}", &w.log[mark..]);
    assert!(w.has("browser"));
    assert_eq!(w.count, 2);
    drop(a2);
    w.until(|w| !w.has("browser")).await?;
    assert_eq!(w.count, 1);
    Ok(())
}

#[tokio::test]
async fn a_reconnect_inside_the_grace_does_not_flap_and_one_after_it_leaves_then_joins(
) -> TestResult {
    let s = TestServer::start(&args(&["--presence-grace-ms", "1500"]))?;
    let mut w = Seen::open(&s, &watch("blip")).await?;
    let a = Seen::open(&s, &join("blip", "phone")).await?;
    w.until(|w| w.has("phone")).await?;
    everywhere(&s, "blip", |v| lists(v, "phone")).await?;
    let mark = w.log.len();
    drop(a);
    let back = Seen::open(&s, &join("blip", "phone")).await?;
    // Past the grace, a marker joins: no leave or join of "phone" came before it.
    tokio::time::sleep(Duration::from_millis(2000)).await;
    let _marker = Seen::open(&s, &join("blip", "marker")).await?;
    w.until(|w| w.has("marker")).await?;
    assert!(!w.mentions(mark, "phone"), "{:?}", &w.log[mark..]);
    // Outside the grace: a leave, then a join.
    drop(back);
    w.until(|w| !w.has("phone")).await?;
    let mark = w.log.len();
    let _again = Seen::open(&s, &join("blip", "phone")).await?;
    w.until(|w| w.has("phone")).await?;
    assert!(w.mentions(mark, "phone"));
    Ok(())
}

#[tokio::test]
async fn typing_is_cleared_by_the_server_after_its_ttl() -> TestResult {
    let s = TestServer::start(&args(&["--typing-ttl-secs", "1"]))?;
    let mut w = Seen::open(&s, &watch("typing")).await?;
    let _a = Seen::open(&s, &join("typing", "typist")).await?;
    everywhere(&s, "typing", |v| lists(v, "typist")).await?;
    let sent = Instant::now();
    let (status, _) = set_state(
        &s,
        "typing",
        "typist",
        json!({"typing": true, "name": "Ann"}),
    )
    .await?;
    assert_eq!(status, 204);
    w.until(|w| {
        w.members
            .get("typist")
            .is_some_and(|m| m["state"]["typing"] == true)
    })
    .await?;
    w.until(|w| {
        w.members
            .get("typist")
            .is_some_and(|m| m["state"]["typing"] == false)
    })
    .await?;
    let took = sent.elapsed();
    assert!(took >= Duration::from_millis(900), "cleared after {took:?}");
    assert!(took < Duration::from_secs(4), "cleared after {took:?}");
    // The rest of the state stays.
    assert_eq!(w.members["typist"]["state"]["name"], "Ann");
    Ok(())
}

#[tokio::test]
async fn a_thousand_presence_updates_leave_the_journal_as_it_was() -> TestResult {
    let s = TestServer::start(&args(&[]))?;
    let session = "quiet";
    let sent = s.send(session, "before").await?;
    s.wait_turn_end(&sent.turn_id).await?;
    let (_, cursor) = s.history(session).await?;
    let appended = s.counter("turnstream_events_appended_total").await?;
    let mut w = Seen::open(&s, &watch(session)).await?;
    // 100 members, 10 updates each: the rate limit (10 a second per member) is not reached.
    let mut members = Vec::new();
    for i in 0..100 {
        members.push(s.stream(&join(session, &format!("m{i}")), None).await?);
    }
    everywhere(&s, session, |v| v["count"] == 100).await?;
    let mut posts = Vec::new();
    for i in 0..100 {
        let api: Api = (*s).clone();
        posts.push(tokio::spawn(async move {
            let mut codes = Vec::new();
            for n in 0..10 {
                let (status, _) =
                    set_state(&api, "quiet", &format!("m{i}"), json!({"n": n})).await?;
                codes.push(status);
            }
            Ok::<_, Box<dyn std::error::Error + Send + Sync>>(codes)
        }));
    }
    for p in posts {
        let codes = p.await??;
        assert!(codes.iter().all(|c| *c == 204), "{codes:?}");
    }
    w.until(|w| {
        (0..100).all(|i| {
            w.members
                .get(&format!("m{i}"))
                .is_some_and(|m| m["state"]["n"] == 9)
        })
    })
    .await?;
    // No presence frame had an id (checked by Seen), and the journal did not move.
    let (_, after) = s.history(session).await?;
    assert_eq!(after, cursor);
    assert_eq!(
        s.counter("turnstream_events_appended_total").await?,
        appended
    );
    // A replay from the epoch's start holds the message's turn only: no presence.
    let events = s.replay_session(session).await?;
    assert!(events
        .iter()
        .all(|e| !e.body.kind().starts_with("presence")));
    drop(members);
    Ok(())
}

#[tokio::test]
async fn updates_past_ten_a_second_are_refused_with_429() -> TestResult {
    let s = TestServer::start(&args(&[]))?;
    let _a = Seen::open(&s, &join("fast", "quick")).await?;
    everywhere(&s, "fast", |v| lists(v, "quick")).await?;
    // Each node counts its own: past 10 a second on a node, some are refused. The updates of a
    // burst are sent at once, so that a loaded machine's slow requests cannot spread them
    // over more than a second; bursts go on until one is refused, or the deadline.
    let burst = 15 * s.node_count();
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut refused = None;
    while refused.is_none() && Instant::now() < deadline {
        let sends = (0..burst).map(|n| {
            s.http
                .post(format!("{}/api/sessions/fast/presence", s.url))
                .json(&json!({"client": "quick", "state": {"n": n}}))
                .send()
        });
        for res in futures::future::join_all(sends).await {
            let res = res?;
            if res.status() == 429 && refused.is_none() {
                let retry = res
                    .headers()
                    .get("retry-after")
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.parse::<u64>().ok());
                let body: Value = res.json().await?;
                refused = Some((retry, body["error"]["code"].clone()));
            } else if res.status() != 429 {
                assert_eq!(res.status(), 204);
            }
        }
    }
    let (retry, code) = refused.ok_or("no update was refused")?;
    assert_eq!(code, "rate_limited");
    assert!(retry.is_some_and(|r| r >= 1));
    Ok(())
}

#[tokio::test]
async fn past_the_member_limit_new_members_are_counted_not_listed() -> TestResult {
    let s = TestServer::start(&args(&["--max-presence-members", "2"]))?;
    let mut streams = Vec::new();
    for (i, c) in ["first", "second", "third"].iter().enumerate() {
        streams.push(Seen::open(&s, &join("big", c)).await?);
        everywhere(&s, "big", |v| v["count"] == i as u64 + 1).await?;
    }
    let (_, v) = roster(&s, "big").await?;
    assert_eq!(v["count"], 3);
    let listed: Vec<&str> = v["members"]
        .as_array()
        .ok_or("no members")?
        .iter()
        .filter_map(|m| m["member_id"].as_str())
        .collect();
    assert_eq!(listed, ["first", "second"]);
    // The third still watches: it sees the roster (listed 2, counted 3) and diffs.
    let third = &mut streams[2];
    assert_eq!(third.count, 3);
    assert_eq!(third.members.len(), 2);
    // When a listed member leaves, the third takes its place.
    let first = streams.remove(0);
    drop(first);
    let third = &mut streams[1];
    third.until(|t| t.has("third") && !t.has("first")).await?;
    assert_eq!(third.count, 2);
    Ok(())
}

#[tokio::test]
async fn bad_input_is_refused_with_stable_codes() -> TestResult {
    let s = TestServer::start(&args(&[]))?;
    let code = |v: &Value| v["error"]["code"].as_str().unwrap_or("").to_string();
    for query in [
        "session=e&presence=1",
        "session=e&presence=1&client=",
        "session=e&presence=1&client=has%20space",
        &format!("session=e&presence=1&client={}", "x".repeat(65)),
    ] {
        let (status, v) = s.get_json(&format!("/api/stream?{query}")).await?;
        assert_eq!(
            (status, code(&v)),
            (400, "invalid_client_id".into()),
            "{query}"
        );
    }
    let (status, v) = s.get_json("/api/stream?session=e&presence=maybe").await?;
    assert_eq!((status, code(&v)), (400, "invalid_presence".into()));
    // 64 characters of the alphabet are fine.
    let ok = format!("A-Z_a.z:0-{}", "9".repeat(54));
    let _member = Seen::open(&s, &join("e", &ok)).await?;
    everywhere(&s, "e", |v| lists(v, &ok)).await?;
    let (status, v) = set_state(&s, "e", &ok, json!({"big": "x".repeat(1100)})).await?;
    assert_eq!((status, code(&v)), (413, "presence_state_too_large".into()));
    let (status, v) = set_state(&s, "e", "nobody", json!({})).await?;
    assert_eq!((status, code(&v)), (404, "not_present".into()));
    let (status, v) = set_state(&s, "e", "bad client", json!({})).await?;
    assert_eq!((status, code(&v)), (400, "invalid_client_id".into()));
    let (status, v) = set_state(&s, "e", &ok, json!([1, 2])).await?;
    assert_eq!((status, code(&v)), (400, "invalid_presence_state".into()));
    // A state of exactly 1 KiB is accepted.
    let exact = json!({"p": "y".repeat(1024 - r#"{"p":""}"#.len())});
    assert_eq!(serde_json::to_string(&exact)?.len(), 1024);
    let (status, _) = set_state(&s, "e", &ok, exact).await?;
    assert_eq!(status, 204);
    Ok(())
}

fn token(sub: &str, sessions: &[&str]) -> String {
    let sessions: Vec<String> = sessions.iter().map(|s| s.to_string()).collect();
    mint(
        SECRET,
        sub,
        &sessions,
        None,
        Duration::from_secs(3600),
        SystemTime::now(),
    )
    .unwrap_or_default()
}

#[tokio::test]
async fn under_auth_no_roster_of_an_unreadable_session_and_no_update_of_another_users_member(
) -> TestResult {
    let s = TestServer::start(&args(&["--auth-secret", SECRET]))?;
    let alice = token("alice", &["shared", "alice-only"]);
    let bob = token("bob", &["shared"]);
    let with = |t: &str| Api {
        url: s.url.clone(),
        http: reqwest::Client::builder()
            .default_headers(
                [(
                    reqwest::header::AUTHORIZATION,
                    reqwest::header::HeaderValue::from_str(&format!("Bearer {t}"))
                        .unwrap_or(reqwest::header::HeaderValue::from_static("")),
                )]
                .into_iter()
                .collect(),
            )
            .pool_max_idle_per_host(0)
            .build()
            .unwrap_or_default(),
    };
    let (a, b) = (with(&alice), with(&bob));
    // Bob may not read alice-only: not its roster, not a presence stream of it.
    let (status, _) = roster(&b, "alice-only").await?;
    assert_eq!(status, 403);
    let (status, _) = b
        .get_json(&format!("/api/stream?{}", watch("alice-only")))
        .await?;
    assert_eq!(status, 403);
    // Alice's member carries her sub.
    let mut alice_tab = Seen::open(
        &a,
        &format!("{}&access_token={alice}", join("shared", "laptop")),
    )
    .await?;
    assert_eq!(alice_tab.members["laptop"]["user"], "alice");
    everywhere_as(&s, &a.http, "shared", |v| lists(v, "laptop")).await?;
    for _ in 0..s.node_count() {
        // Bob cannot update it (on any node) nor join as it.
        let (status, v) = set_state(&b, "shared", "laptop", json!({"hacked": true})).await?;
        assert_eq!(
            (status, v["error"]["code"].clone()),
            (404, json!("not_present"))
        );
    }
    let (status, v) = b
        .get_json(&format!("/api/stream?{}", join("shared", "laptop")))
        .await?;
    assert_eq!(
        (status, v["error"]["code"].clone()),
        (409, json!("presence_client_taken"))
    );
    // Alice can.
    let (status, _) = set_state(&a, "shared", "laptop", json!({"ok": true})).await?;
    assert_eq!(status, 204);
    alice_tab
        .until(|t| {
            t.members
                .get("laptop")
                .is_some_and(|m| m["state"]["ok"] == true)
        })
        .await?;
    assert!(alice_tab
        .log
        .iter()
        .all(|(_, v)| !v.to_string().contains("hacked")));
    Ok(())
}

#[tokio::test]
async fn v1_2_streams_see_no_presence_frames() -> TestResult {
    let s = TestServer::start(&args(&[]))?;
    let mut plain = s.stream("session=old", None).await?;
    let _m = Seen::open(&s, &join("old", "someone")).await?;
    everywhere(&s, "old", |v| lists(v, "someone")).await?;
    let (status, _) = set_state(&s, "old", "someone", json!({"typing": true})).await?;
    assert_eq!(status, 204);
    let sent = s.send("old", "hi").await?;
    let turn = sent.turn_id.clone();
    // Everything up to the turn's end: journal events only.
    loop {
        let f = plain.next().await?.ok_or("ended")?;
        assert!(!f.event.starts_with("presence"), "{f:?}");
        if f.event == "turn_ended" && f.data.contains(&turn) {
            break;
        }
    }
    Ok(())
}

#[tokio::test]
async fn a_shutdown_s_members_leave_at_once() -> TestResult {
    // A long grace and TTL: only the shutdown itself can make the member leave in time.
    let mut s = TestServer::start(&args(&[
        "--presence-grace-ms",
        "60000",
        "--presence-ttl-secs",
        "60",
    ]))?;
    let last = s.node_count() - 1;
    let member = Seen::open(&s.node(last), &join("bye", "leaver")).await?;
    let mut w = Seen::open(&s.node(0), &watch("bye")).await?;
    w.until(|w| w.has("leaver")).await?;
    let started = Instant::now();
    if s.node_count() > 1 {
        s.terminate_node(last)?;
    } else {
        // One node: its own streams are told before they end.
        let stop = tokio::task::spawn_blocking(move || s.terminate().map(|_| ()));
        w.until(|w| !w.has("leaver")).await?;
        stop.await.map_err(|e| e.to_string())??;
        drop(member);
        return Ok(());
    }
    w.until(|w| !w.has("leaver")).await?;
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    drop(member);
    Ok(())
}

#[tokio::test]
async fn a_member_on_a_killed_node_leaves_the_others_within_the_ttl() -> TestResult {
    if pg::nodes() < 3 {
        return Ok(());
    }
    let ttl = 3;
    let mut s = TestServer::start(&args(&[
        "--presence-grace-ms",
        "60000",
        "--presence-ttl-secs",
        "3",
    ]))?;
    let member = Seen::open(&s.node(0), &join("killed", "victim")).await?;
    let mut w1 = Seen::open(&s.node(1), &watch("killed")).await?;
    let mut w2 = Seen::open(&s.node(2), &watch("killed")).await?;
    w1.until(|w| w.has("victim")).await?;
    w2.until(|w| w.has("victim")).await?;
    let killed = Instant::now();
    s.kill9_node(0)?;
    w1.until(|w| !w.has("victim")).await?;
    w2.until(|w| !w.has("victim")).await?;
    let took = killed.elapsed();
    assert!(took <= Duration::from_secs(ttl + 1), "left after {took:?}");
    drop(member);
    Ok(())
}
