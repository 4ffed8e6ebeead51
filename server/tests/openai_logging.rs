//! Every upstream failure of `OpenAiAgent` is logged for the operator at `WARN`, with the raw
//! detail the user's error leaves out. (Its own test binary: `tracing` caches per call site
//! whether anyone listens, so a subscriber scoped to one test among many can miss events.)

mod support;

use std::io::Write;
use std::sync::{Arc, Mutex};

use axum::http::StatusCode;
use serde_json::json;
use turnstream_server::agent::TurnContext;

use support::upstream::*;

/// A `tracing` writer into a shared buffer, to read what the agent logged.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if let Ok(mut b) = self.0.lock() {
            b.extend_from_slice(buf);
        }
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test]
async fn every_upstream_failure_logs_a_warning_with_the_raw_detail() {
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::WARN)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    tracing::subscriber::set_global_default(subscriber).expect("the only subscriber");
    let rate_limited = Reply::StatusWith(
        StatusCode::TOO_MANY_REQUESTS,
        vec![
            ("content-type", "application/json".into()),
            ("retry-after", "0".into()),
        ],
        json!({"error": {"message": "Rate limit reached", "type": "requests",
            "code": "rate_limit_exceeded"}})
        .to_string(),
    );
    let ok = stream(vec![
        chunk(json!({"content": "fine"}), Some("stop")),
        done(),
    ]);
    let (_fake, base) = upstream_replies(vec![nginx_502(), rate_limited, ok]).await;
    let turn = TurnContext {
        turn_id: "turn_logged".into(),
        ..ctx("hi", vec![])
    };
    let (result, emissions) = run_turn(&agent(&base, fast_retries()), turn).await;
    assert_eq!(result, Ok(()));
    assert_eq!(response_text(&emissions), "fine");
    let log = String::from_utf8(captured.0.lock().map(|b| b.clone()).unwrap_or_default())
        .unwrap_or_default();
    let warnings: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("WARN") && l.contains("turn=turn_logged"))
        .collect();
    assert_eq!(warnings.len(), 2, "{log}");
    assert!(warnings
        .iter()
        .all(|w| w.contains("openai upstream failure")));
    // The operator sees what the user does not: the page itself and the limit's details.
    assert!(warnings[0].contains("status=502"), "{}", warnings[0]);
    assert!(warnings[0].contains("nginx/1.24.0"), "{}", warnings[0]);
    assert!(warnings[1].contains("status=429"), "{}", warnings[1]);
    assert!(
        warnings[1].contains("rate_limit_exceeded"),
        "{}",
        warnings[1]
    );
}
