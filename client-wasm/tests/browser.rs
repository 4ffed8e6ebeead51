//! Browser tests: the real `ChatClient` in headless Chromium against a real turnstream server.
//!
//! `scripts/test-browser.sh` starts the server and passes its URL at compile time in
//! `TURNSTREAM_TEST_URL` (wasm cannot read the environment at run time). Without it, or with the
//! server down, every test fails: a browser test that cannot reach its server proves nothing.
#![cfg(target_arch = "wasm32")]

use js_sys::{Function, Object, Promise, Reflect};
use turnstream_client::reducer::{Connection, Conversation, EntryStatus, EntryView, Role, View};
use turnstream_client::{ChatClient, SendOptions};
use turnstream_protocol::{
    Event, EventBody, HistoryResponse, Message, MessageStatus, Role as WireRole, TurnInfo,
    TurnState,
};
use wasm_bindgen::prelude::*;
use wasm_bindgen_futures::JsFuture;
use wasm_bindgen_test::*;

wasm_bindgen_test_configure!(run_in_browser);

/// How long a condition may take before the test fails.
const DEADLINE_MS: f64 = 15_000.0;

fn server() -> &'static str {
    match option_env!("TURNSTREAM_TEST_URL") {
        Some(url) if !url.is_empty() => url,
        _ => panic!("TURNSTREAM_TEST_URL was not set when these tests were built: run scripts/test-browser.sh"),
    }
}

/// A proxy to the same server that the tests can take down (see `tests/flaky-proxy.mjs`).
fn proxy() -> &'static str {
    match option_env!("TURNSTREAM_TEST_PROXY_URL") {
        Some(url) if !url.is_empty() => url,
        _ => panic!("TURNSTREAM_TEST_PROXY_URL was not set when these tests were built: run scripts/test-browser.sh"),
    }
}

/// `fetch(url, {method})`, failing the test on a network error or a non-2xx answer.
async fn http(method: &str, url: &str) {
    let global: JsValue = js_sys::global().into();
    let fetch: Function = Reflect::get(&global, &"fetch".into())
        .expect("fetch")
        .into();
    let init = Object::new();
    Reflect::set(&init, &"method".into(), &method.into()).expect("init");
    let p: Promise = fetch
        .call2(&global, &url.into(), &init)
        .expect("fetch call")
        .into();
    let resp = JsFuture::from(p).await.expect("an answer");
    let ok = Reflect::get(&resp, &"ok".into())
        .ok()
        .and_then(|v| v.as_bool());
    assert_eq!(ok, Some(true), "{method} {url} failed");
}

/// `GET url` as text.
async fn get_text(url: &str) -> String {
    let global: JsValue = js_sys::global().into();
    let fetch: Function = Reflect::get(&global, &"fetch".into())
        .expect("fetch")
        .into();
    let p: Promise = fetch
        .call1(&global, &url.into())
        .expect("fetch call")
        .into();
    let resp = JsFuture::from(p).await.expect("an answer");
    let text: Function = Reflect::get(&resp, &"text".into()).expect("text").into();
    let p: Promise = text.call0(&resp).expect("text call").into();
    JsFuture::from(p)
        .await
        .expect("a body")
        .as_string()
        .expect("text")
}

/// The server's own history of `session` (straight to the server, not through the SDK).
async fn server_history(session: &str) -> HistoryResponse {
    serde_json::from_str(
        &get_text(&format!(
            "{}/api/sessions/{session}/history?limit=1000",
            server()
        ))
        .await,
    )
    .expect("a history answer")
}

/// The requests the proxy forwarded so far, as `"METHOD /path?query"`.
async fn proxy_log() -> Vec<String> {
    serde_json::from_str(&get_text(&format!("{}/__proxy/log", proxy())).await).expect("the log")
}

/// Takes the proxy "down" (every connection cut, new ones reset) or back "up".
async fn set_proxy(state: &str) {
    http("POST", &format!("{}/__proxy/{state}", proxy())).await;
}

/// A session nobody else uses.
fn fresh_session(tag: &str) -> String {
    format!(
        "{tag}-{}-{}",
        js_sys::Date::now() as u64,
        (js_sys::Math::random() * 1e9) as u64
    )
}

fn options(base_url: &str, session: &str, storage: &str) -> JsValue {
    let o = Object::new();
    let set = |k: &str, v: JsValue| Reflect::set(&o, &k.into(), &v).expect("set option");
    set("baseUrl", base_url.into());
    set("sessionId", session.into());
    set("storage", storage.into());
    o.into()
}

async fn connect(base_url: &str, session: &str, storage: &str) -> ChatClient {
    ChatClient::connect(options(base_url, session, storage))
        .await
        .map_err(JsValue::from)
        .expect("connect")
}

fn view(c: &ChatClient) -> View {
    serde_wasm_bindgen::from_value(c.state()).expect("the state has the documented shape")
}

async fn sleep_ms(ms: i32) {
    let p = Promise::new(&mut |resolve, _| {
        let global: JsValue = js_sys::global().into();
        let set_timeout: Function = Reflect::get(&global, &"setTimeout".into())
            .expect("setTimeout")
            .into();
        set_timeout
            .call2(&global, &resolve, &ms.into())
            .expect("setTimeout call");
    });
    JsFuture::from(p).await.expect("timer");
}

/// Polls the client's state until `cond` holds; fails the test with the last state at the deadline.
async fn wait_for(c: &ChatClient, what: &str, cond: impl Fn(&View) -> bool) -> View {
    let start = js_sys::Date::now();
    loop {
        let v = view(c);
        if cond(&v) {
            return v;
        }
        if js_sys::Date::now() - start > DEADLINE_MS {
            panic!("timed out waiting for {what}; last state: {v:#?}");
        }
        sleep_ms(10).await;
    }
}

async fn send(c: &ChatClient, text: &str) -> String {
    let result = JsFuture::from(c.send(text.to_owned(), None))
        .await
        .expect("send");
    Reflect::get(&result, &"clientMessageId".into())
        .expect("clientMessageId")
        .as_string()
        .expect("a string id")
}

async fn close(c: &ChatClient) {
    JsFuture::from(c.close()).await.expect("close");
}

fn reply<'a>(v: &'a View, turn_of: &str) -> Option<&'a EntryView> {
    let user = v
        .messages
        .iter()
        .find(|e| e.client_message_id.as_deref() == Some(turn_of))?;
    let turn = user.turn_id.as_deref()?;
    v.messages
        .iter()
        .find(|e| e.role == Role::Assistant && e.turn_id.as_deref() == Some(turn))
}

fn deltas(n: usize) -> String {
    (1..=n).map(|i| format!("x{i} ")).collect()
}

#[wasm_bindgen_test]
async fn send_and_receive_a_streamed_reply() {
    let session = fresh_session("stream");
    let c = connect(server(), &session, "memory").await;
    let id = send(&c, "/deltas 20").await;

    let sending = view(&c);
    assert_eq!(
        sending.messages.len(),
        1,
        "the bubble shows before the server answers"
    );
    assert_eq!(sending.messages[0].key, id);

    let done = wait_for(&c, "the reply to complete", |v| {
        reply(v, &id).is_some_and(|r| r.status == EntryStatus::Complete)
    })
    .await;
    assert_eq!(
        done.messages.len(),
        2,
        "one user bubble, one reply: {done:#?}"
    );
    let user = &done.messages[0];
    assert_eq!(user.role, Role::User);
    assert_eq!(user.status, EntryStatus::Sent);
    assert_eq!(user.content, "/deltas 20");
    assert_eq!(user.key, id, "the key survives the server's copy");
    assert!(user.message_id.is_some());
    let r = &done.messages[1];
    assert_eq!(r.content, deltas(20));
    assert_eq!(
        r.key,
        format!("turn:{}", r.turn_id.clone().unwrap_or_default())
    );
    assert!(
        r.message_id.is_some(),
        "the reply is the message the server wrote"
    );
    assert!(!done.busy);
    assert!(!done.gap);
    assert_eq!(done.connection, Connection::Live);

    // An unchanged state is the very same object (useSyncExternalStore relies on it).
    assert!(Object::is(&c.state(), &c.state()));

    // And an entry that did not change keeps its object across states (memoized bubbles).
    let entry = |state: &JsValue, i: u32| {
        let messages: js_sys::Array = Reflect::get(state, &"messages".into())
            .expect("messages")
            .into();
        messages.get(i)
    };
    let before = c.state();
    let id2 = send(&c, "/echo again").await;
    wait_for(&c, "the second reply", |v| {
        reply(v, &id2).is_some_and(|r| r.status == EntryStatus::Complete)
    })
    .await;
    let after = c.state();
    assert!(!Object::is(&before, &after));
    assert!(Object::is(&entry(&before, 0), &entry(&after, 0)));
    assert!(Object::is(&entry(&before, 1), &entry(&after, 1)));
    assert!(Object::is_frozen(&entry(&after, 2).into()));
    close(&c).await;
    assert_eq!(view(&c).connection, Connection::Closed);
}

/// `{attachments: [{url, mediaType, name?}, ...]}`, `send`'s options.
fn with_attachments(files: &[(&str, &str, Option<&str>)]) -> SendOptions {
    let list = js_sys::Array::new();
    for (url, media_type, name) in files {
        let a = Object::new();
        Reflect::set(&a, &"url".into(), &(*url).into()).expect("url");
        Reflect::set(&a, &"mediaType".into(), &(*media_type).into()).expect("mediaType");
        if let Some(name) = name {
            Reflect::set(&a, &"name".into(), &(*name).into()).expect("name");
        }
        list.push(&a);
    }
    let o = Object::new();
    Reflect::set(&o, &"attachments".into(), &list).expect("attachments");
    o.unchecked_into()
}

#[wasm_bindgen_test]
async fn attachments_show_from_the_send_to_another_page_s_history() {
    use turnstream_client::reducer::AttachmentView;
    let session = fresh_session("files");
    let c = connect(server(), &session, "memory").await;
    let files = [
        (
            "https://files.example.com/cat.png",
            "image/png",
            Some("cat.png"),
        ),
        ("data:text/plain;base64,aGk=", "text/plain", None),
    ];
    let expected: Vec<AttachmentView> = files
        .iter()
        .map(|(url, media_type, name)| AttachmentView {
            url: (*url).into(),
            media_type: (*media_type).into(),
            name: name.map(Into::into),
        })
        .collect();
    // An image needs no caption.
    let result = JsFuture::from(c.send(String::new(), Some(with_attachments(&files))))
        .await
        .expect("send with attachments");
    let id = Reflect::get(&result, &"clientMessageId".into())
        .expect("clientMessageId")
        .as_string()
        .expect("a string id");
    assert_eq!(view(&c).messages[0].attachments, expected, "shown at once");
    let sent = wait_for(&c, "the reply", |v| {
        reply(v, &id).is_some_and(|r| r.status == EntryStatus::Complete)
    })
    .await;
    assert_eq!(
        sent.messages[0].attachments, expected,
        "and after the server's copy"
    );
    assert!(sent.messages[1].attachments.is_empty(), "a reply has none");
    let history = server_history(&session).await;
    let stored: Vec<(String, String, Option<String>)> = history.messages[0]
        .attachments
        .iter()
        .map(|a| (a.url.clone(), a.media_type.clone(), a.name.clone()))
        .collect();
    let posted: Vec<(String, String, Option<String>)> = files
        .iter()
        .map(|(u, m, n)| ((*u).into(), (*m).into(), n.map(Into::into)))
        .collect();
    assert_eq!(stored, posted, "the server has them as sent");

    let other = connect(server(), &session, "memory").await;
    let loaded = wait_for(&other, "history in another page", |v| v.messages.len() == 2).await;
    assert_eq!(loaded.messages[0].attachments, expected);

    // The server's rules: a message that breaks them shows rejected, with the reason.
    let refused = JsFuture::from(c.send(
        "x".into(),
        Some(with_attachments(&[("ftp://h/a.png", "image/png", None)])),
    ))
    .await
    .expect("queued");
    let refused = Reflect::get(&refused, &"clientMessageId".into())
        .expect("clientMessageId")
        .as_string()
        .expect("a string id");
    let v = wait_for(&c, "the refusal", |v| {
        v.messages
            .iter()
            .any(|e| e.key == refused && e.status == EntryStatus::Rejected)
    })
    .await;
    let entry = v.messages.iter().find(|e| e.key == refused).expect("entry");
    let error = entry.error.as_ref().expect("the reason");
    assert_eq!(error.code, "invalid_attachment");
    assert!(
        error.message.contains("attachments[0]"),
        "{}",
        error.message
    );
    // A value of the wrong shape is refused by `send` itself.
    let bad: SendOptions = Object::new().unchecked_into();
    Reflect::set(&bad, &"attachments".into(), &"a.png".into()).expect("set");
    assert!(JsFuture::from(c.send("x".into(), Some(bad))).await.is_err());
    close(&c).await;
    close(&other).await;
}

#[wasm_bindgen_test]
async fn a_message_from_another_client_appears() {
    let session = fresh_session("two");
    let a = connect(server(), &session, "memory").await;
    wait_for(&a, "the first client to be live", |v| {
        v.connection == Connection::Live
    })
    .await;
    // Another device: a different base URL for the same server, so no tab channel is shared and
    // the message can only arrive through the server.
    let other = server().replace("127.0.0.1", "localhost");
    let b = connect(&other, &session, "memory").await;
    let id = send(&b, "/echo hello from b").await;

    let seen = wait_for(&a, "b's message and its reply on a", |v| {
        reply(v, &id).is_some_and(|r| r.status == EntryStatus::Complete)
    })
    .await;
    assert_eq!(seen.messages.len(), 2, "{seen:#?}");
    let user = &seen.messages[0];
    assert_eq!(user.content, "/echo hello from b");
    assert_eq!(user.client_message_id.as_deref(), Some(id.as_str()));
    assert_eq!(user.status, EntryStatus::Sent);
    assert_eq!(seen.messages[1].content, "hello from b");

    // And a's own message shows on b, in the same order on both.
    let id_a = send(&a, "/echo and from a").await;
    let on_b = wait_for(&b, "a's reply on b", |v| {
        reply(v, &id_a).is_some_and(|r| r.status == EntryStatus::Complete)
    })
    .await;
    let on_a = wait_for(&a, "a's reply on a", |v| {
        reply(v, &id_a).is_some_and(|r| r.status == EntryStatus::Complete)
    })
    .await;
    let keys = |v: &View| v.messages.iter().map(|e| e.key.clone()).collect::<Vec<_>>();
    assert_eq!(keys(&on_a), keys(&on_b));
    assert_eq!(on_a.messages.len(), 4);
    close(&a).await;
    close(&b).await;
}

#[wasm_bindgen_test]
async fn a_new_client_on_the_same_storage_rebuilds_an_in_flight_turn() {
    let session = fresh_session("reload");
    let first = connect(server(), &session, "indexeddb").await;
    let id = send(&first, "/deltas 300").await;
    wait_for(&first, "the reply to be streaming", |v| {
        reply(v, &id)
            .is_some_and(|r| r.status == EntryStatus::Streaming && r.content.contains("x3 "))
    })
    .await;
    // The page goes away mid-turn (close writes the cache; it never cancels the turn).
    close(&first).await;

    let second = connect(server(), &session, "indexeddb").await;
    let cached = view(&second);
    assert_eq!(
        cached.messages.len(),
        2,
        "the cache shows at once, before any network answer: {cached:#?}"
    );
    assert!(cached.messages[1].content.starts_with("x1 x2 x3 "));
    assert!(matches!(
        cached.messages[1].status,
        EntryStatus::Streaming | EntryStatus::Complete
    ));

    let done = wait_for(&second, "the rebuilt reply to complete", |v| {
        reply(v, &id).is_some_and(|r| r.status == EntryStatus::Complete)
    })
    .await;
    assert_eq!(done.messages.len(), 2, "no duplicate bubble: {done:#?}");
    assert_eq!(
        done.messages[1].content,
        deltas(300),
        "cache, snapshot and stream joined without a gap or a repeated delta"
    );
    assert!(!done.gap);
    assert!(!done.busy);
    close(&second).await;
}

#[wasm_bindgen_test]
async fn cancel_ends_the_turn_for_everyone() {
    let session = fresh_session("cancel");
    let c = connect(server(), &session, "memory").await;
    let id = send(&c, "/sleep 5000 too late").await;
    let running = wait_for(&c, "the turn to exist", |v| reply(v, &id).is_some()).await;
    let turn = reply(&running, &id)
        .and_then(|r| r.turn_id.clone())
        .expect("a turn id");
    let answer = JsFuture::from(c.cancel(turn.clone()))
        .await
        .expect("cancel");
    assert_eq!(
        Reflect::get(&answer, &"turnId".into())
            .ok()
            .and_then(|v| v.as_string()),
        Some(turn)
    );
    let done = wait_for(&c, "the turn to end cancelled", |v| {
        reply(v, &id).is_some_and(|r| r.status == EntryStatus::Cancelled)
    })
    .await;
    assert!(!done.busy);
    close(&c).await;
}

#[wasm_bindgen_test]
async fn bad_options_are_refused() {
    let err = ChatClient::connect(options(server(), "not a valid id!", "memory")).await;
    assert!(err.is_err());
    let err = ChatClient::connect(options(server(), "ok", "disk")).await;
    assert!(err.is_err());
    let with = |key: &str, value: JsValue| {
        let o = options(server(), "ok", "memory");
        Reflect::set(&o, &key.into(), &value).expect("set");
        o
    };
    for (key, bad) in [
        ("historyLimit", JsValue::from(0)),
        ("historyLimit", JsValue::from(1001)),
        ("historyLimit", JsValue::from(2.5)),
        ("historyLimit", JsValue::from("10")),
        ("baseUrl", JsValue::from(7)),
        ("sessionId", JsValue::UNDEFINED),
    ] {
        let refused = ChatClient::connect(with(key, bad.clone())).await;
        assert!(refused.is_err(), "{key}: {bad:?}");
    }
    assert!(ChatClient::connect(JsValue::from("session")).await.is_err());
    // A good limit and a trailing slash are fine.
    let base = [server(), "/"].concat();
    let o = options(&base, &fresh_session("opts"), "memory");
    Reflect::set(&o, &"historyLimit".into(), &JsValue::from(5)).expect("set");
    let c = ChatClient::connect(o)
        .await
        .map_err(JsValue::from)
        .expect("connect");
    wait_for(&c, "live", |v| v.connection == Connection::Live).await;
    close(&c).await;
}

#[wasm_bindgen_test]
async fn the_outbox_survives_a_reload_while_the_server_is_unreachable() {
    let session = fresh_session("outbox");
    set_proxy("down").await;
    let first = connect(proxy(), &session, "indexeddb").await;
    let id = send(&first, "/echo sent while down").await;
    let queued = view(&first);
    assert_eq!(queued.messages.len(), 1);
    assert_eq!(queued.messages[0].status, EntryStatus::Sending);
    assert_ne!(queued.connection, Connection::Live);
    // The page goes away before the server was ever reached.
    close(&first).await;

    set_proxy("up").await;
    let second = connect(proxy(), &session, "indexeddb").await;
    let cached = view(&second);
    assert_eq!(
        cached.messages.len(),
        1,
        "the outbox came back from IndexedDB"
    );
    assert_eq!(cached.messages[0].key, id);
    let done = wait_for(
        &second,
        "the queued message to be posted and answered",
        |v| reply(v, &id).is_some_and(|r| r.status == EntryStatus::Complete),
    )
    .await;
    assert_eq!(done.messages.len(), 2, "{done:#?}");
    assert_eq!(
        done.messages[0].key, id,
        "posted with the same client_message_id"
    );
    assert_eq!(done.messages[0].status, EntryStatus::Sent);
    assert_eq!(done.messages[1].content, "sent while down");
    // And the server got it exactly once, whatever the two pages tried.
    let history = server_history(&session).await;
    let delivered = history
        .messages
        .iter()
        .filter(|m| m.role == WireRole::User && m.client_message_id.as_deref() == Some(&id))
        .count();
    assert_eq!(delivered, 1, "delivered exactly once: {history:#?}");
    assert_eq!(
        history.messages.len(),
        2,
        "one message, one reply: {history:#?}"
    );
    close(&second).await;
}

#[wasm_bindgen_test]
async fn a_stream_cut_mid_turn_resumes_without_a_gap_or_a_repeat() {
    let session = fresh_session("cut");
    set_proxy("up").await;
    let c = connect(proxy(), &session, "memory").await;
    wait_for(&c, "live", |v| v.connection == Connection::Live).await;
    let id = send(&c, "/deltas 300").await;
    wait_for(&c, "the reply to stream", |v| {
        reply(v, &id).is_some_and(|r| r.content.contains("x5 "))
    })
    .await;
    set_proxy("down").await;
    let cut = wait_for(&c, "the client to notice", |v| {
        v.connection == Connection::Reconnecting
    })
    .await;
    assert!(cut.busy, "the turn goes on without us");
    set_proxy("up").await;
    let done = wait_for(&c, "the reply to complete after the reconnect", |v| {
        reply(v, &id).is_some_and(|r| r.status == EntryStatus::Complete)
    })
    .await;
    assert_eq!(done.messages.len(), 2, "{done:#?}");
    assert_eq!(done.messages[1].content, deltas(300));
    assert!(!done.gap, "a resumed stream is not a gap");
    assert_eq!(done.connection, Connection::Live);
    close(&c).await;
}

#[wasm_bindgen_test]
async fn sibling_tabs_share_a_bubble_before_the_server_has_it() {
    let session = fresh_session("tabs");
    set_proxy("down").await;
    // Same base URL and session: the two clients are sibling tabs on one BroadcastChannel.
    let a = connect(proxy(), &session, "memory").await;
    let b = connect(proxy(), &session, "memory").await;
    let id = send(&a, "/echo from a sibling").await;
    let relayed = wait_for(&b, "the optimistic bubble on the sibling", |v| {
        v.messages.iter().any(|e| e.key == id)
    })
    .await;
    assert_eq!(relayed.messages[0].status, EntryStatus::Sending);

    set_proxy("up").await;
    for (tab, name) in [(&a, "a"), (&b, "b")] {
        let done = wait_for(tab, &format!("the reply on {name}"), |v| {
            reply(v, &id).is_some_and(|r| r.status == EntryStatus::Complete)
        })
        .await;
        assert_eq!(
            done.messages.len(),
            2,
            "one bubble per message on {name}: {done:#?}"
        );
        assert_eq!(done.messages[1].content, "from a sibling");
    }
    close(&a).await;
    close(&b).await;
}

#[wasm_bindgen_test]
async fn an_expired_position_reloads_history_and_says_so() {
    let session = fresh_session("resync");
    set_proxy("up").await;
    let c = connect(proxy(), &session, "memory").await;
    wait_for(&c, "live", |v| v.connection == Connection::Live).await;
    set_proxy("down").await;
    wait_for(&c, "the cut to be noticed", |v| {
        v.connection == Connection::Reconnecting
    })
    .await;

    // Meanwhile another device has a whole turn, and its events are purged: our resume
    // position is now below the session's floor.
    let other = connect(server(), &session, "memory").await;
    let id = send(&other, "/echo while you were away").await;
    wait_for(&other, "the other device's reply", |v| {
        reply(v, &id).is_some_and(|r| r.status == EntryStatus::Complete)
    })
    .await;
    close(&other).await;
    http(
        "DELETE",
        &format!("{}/api/sessions/{session}/realtime", server()),
    )
    .await;

    set_proxy("up").await;
    let back = wait_for(&c, "history reloaded after the resync", |v| {
        v.connection == Connection::Live
            && reply(v, &id).is_some_and(|r| r.status == EntryStatus::Complete)
    })
    .await;
    assert_eq!(back.messages.len(), 2, "{back:#?}");
    assert_eq!(back.messages[1].content, "while you were away");
    assert!(
        back.gap,
        "the purged telemetry is gone, and the state says so"
    );

    // And the stream that replaced the dead one is live: a new turn streams in.
    let id2 = send(&c, "/echo still here").await;
    wait_for(&c, "a reply on the new stream", |v| {
        reply(v, &id2).is_some_and(|r| r.status == EntryStatus::Complete)
    })
    .await;
    close(&c).await;
}

/// Writes a cache record the way a page that died mid-turn would have left it.
async fn seed_cache(base_url: &str, session: &str, conv: &Conversation) {
    let db = rexie::Rexie::builder("turnstream")
        .version(1)
        .add_object_store(rexie::ObjectStore::new("sessions"))
        .build()
        .await
        .expect("open IndexedDB");
    let tx = db
        .transaction(&["sessions"], rexie::TransactionMode::ReadWrite)
        .expect("transaction");
    let store = tx.store("sessions").expect("store");
    let json = serde_json::to_string(&conv.to_cache()).expect("json");
    store
        .put(
            &JsValue::from_str(&json),
            Some(&JsValue::from_str(&format!("{base_url}|{session}"))),
        )
        .await
        .expect("put");
    tx.done().await.expect("commit");
    db.close();
}

#[wasm_bindgen_test]
async fn a_cached_turn_the_server_lost_ends_interrupted_instead_of_spinning() {
    let session = fresh_session("lost");
    // The server's journal (its epoch), so the cache is of the same journal, not a dead one.
    let history: HistoryResponse = serde_json::from_str(
        &get_text(&format!("{}/api/sessions/{session}/history", server())).await,
    )
    .expect("history");
    let epoch = history
        .cursor
        .rsplit_once('-')
        .map(|(e, _)| e.to_owned())
        .expect("a cursor");
    let event = |seq: i64, body: EventBody| Event {
        id: format!("{epoch}-{seq}"),
        session_id: session.clone(),
        ts: 1,
        turn_id: Some("ghost-turn".into()),
        body,
        truncated: vec![],
    };
    let mut dead_page = Conversation::new(session.clone());
    dead_page.apply_event(&event(
        1,
        EventBody::MessageReceived {
            message: Message {
                message_id: "ghost-msg".into(),
                client_message_id: Some("ghost-c".into()),
                role: WireRole::User,
                content: "hello?".into(),
                status: MessageStatus::Complete,
                turn_id: Some("ghost-turn".into()),
                created_at: 1,
                event_id: format!("{epoch}-1"),
                author: None,
                attachments: Vec::new(),
                parent_id: None,
                siblings: None,
                requests: Vec::new(),
                called_by: None,
            },
        },
    ));
    dead_page.apply_event(&event(2, EventBody::TurnStarted {}));
    dead_page.apply_event(&event(
        3,
        EventBody::ResponseDelta {
            delta: "half an ans".into(),
        },
    ));
    seed_cache(server(), &session, &dead_page).await;

    let c = connect(server(), &session, "indexeddb").await;
    assert_eq!(
        view(&c).messages[1].status,
        EntryStatus::Streaming,
        "the cache shows first"
    );
    let settled = wait_for(&c, "the lost turn to be settled", |v| {
        v.messages
            .iter()
            .any(|e| e.key == "turn:ghost-turn" && e.status == EntryStatus::Interrupted)
    })
    .await;
    let r = &settled.messages[1];
    assert_eq!(r.content, "half an ans", "the partial text is kept");
    assert!(r.recovered);
    assert_eq!(
        r.error.as_ref().map(|e| e.code.as_str()),
        Some("turn_not_found")
    );
    assert!(settled.gap, "the SDK knows it could not recover this");
    assert!(!settled.busy, "nothing spins");
    close(&c).await;
}

#[wasm_bindgen_test]
async fn a_turn_completed_while_no_client_was_open_is_recovered() {
    let session = fresh_session("away");
    set_proxy("up").await;
    // Through the proxy, whose log shows which calls the second page made.
    let first = connect(proxy(), &session, "indexeddb").await;
    let id = send(&first, "/deltas 300").await;
    let streaming = wait_for(&first, "the reply to be streaming", |v| {
        reply(v, &id)
            .is_some_and(|r| r.status == EntryStatus::Streaming && r.content.contains("x3 "))
    })
    .await;
    let turn = reply(&streaming, &id)
        .and_then(|r| r.turn_id.clone())
        .expect("a turn id");
    // The browser closes mid-turn: close writes the cache (the turn streaming) and cancels nothing.
    close(&first).await;

    // The turn ends on the server while no page listens.
    let start = js_sys::Date::now();
    let ended: TurnInfo = loop {
        let info: TurnInfo =
            serde_json::from_str(&get_text(&format!("{}/api/turns/{turn}", server())).await)
                .expect("a turn status");
        if info.state.is_terminal() {
            break info;
        }
        assert!(
            js_sys::Date::now() - start < DEADLINE_MS,
            "the turn did not end: {info:#?}"
        );
        sleep_ms(50).await;
    };
    assert_eq!(ended.state, TurnState::Completed, "{ended:#?}");
    let final_text = deltas(300);
    assert_eq!(ended.text, final_text);

    let seen_before = proxy_log().await.len();
    let second = connect(proxy(), &session, "indexeddb").await;
    let cached = view(&second);
    assert_eq!(
        cached.messages.len(),
        2,
        "the cache shows at once: {cached:#?}"
    );
    let bubble = &cached.messages[1];
    assert_eq!(bubble.key, format!("turn:{turn}"));
    assert_eq!(
        bubble.status,
        EntryStatus::Streaming,
        "cached as it was when the page closed: {cached:#?}"
    );
    assert!(bubble.content.starts_with("x1 x2 x3 "));
    assert_ne!(bubble.content, final_text, "the page closed mid-turn");
    assert!(!bubble.recovered);

    let done = wait_for(&second, "the cached bubble to be settled", |v| {
        v.messages
            .iter()
            .any(|e| e.key == format!("turn:{turn}") && e.status != EntryStatus::Streaming)
    })
    .await;
    let users: Vec<&EntryView> = done
        .messages
        .iter()
        .filter(|e| e.role == Role::User)
        .collect();
    let replies: Vec<&EntryView> = done
        .messages
        .iter()
        .filter(|e| e.role == Role::Assistant)
        .collect();
    assert_eq!(users.len(), 1, "one user entry: {done:#?}");
    assert_eq!(replies.len(), 1, "one assistant entry: {done:#?}");
    assert_eq!(users[0].key, id);
    assert_eq!(users[0].status, EntryStatus::Sent);
    let r = replies[0];
    assert_eq!(r.key, format!("turn:{turn}"), "the same bubble, replaced");
    assert_eq!(r.status, EntryStatus::Complete, "{done:#?}");
    assert_eq!(
        r.content, final_text,
        "the final message, not the cached part"
    );
    assert_eq!(
        r.message_id,
        ended.message.as_ref().map(|m| m.message_id.clone()),
        "the message the server wrote"
    );
    assert!(
        r.recovered,
        "settled after the reload, not by the stream: {done:#?}"
    );
    assert!(r.error.is_none());
    assert!(!done.gap, "nothing was lost: {done:#?}");
    assert!(!done.busy);

    // The cached streaming entry was checked with the turn-status endpoint.
    let status_path = format!("GET /api/turns/{turn}");
    let log = proxy_log().await;
    let log = log.get(seen_before..).unwrap_or_default();
    assert!(
        log.contains(&status_path),
        "the second page asked {status_path}: {log:#?}"
    );
    close(&second).await;
}
