//! Embedding the library with an agent of one's own: `turnstream_server::run` on a listener the
//! caller binds, with a shutdown future the caller controls.

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use turnstream_protocol::{ToolCall, ToolStatus, TurnInfo, TurnState};
use turnstream_server::agent::{Agent, AgentError, TurnContext, TurnSink};
use turnstream_server::config::Config;

type TestResult<T = ()> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// Replies with the number of earlier messages it was given; panics on "/panic".
struct CountingAgent;

impl Agent for CountingAgent {
    fn run<'a>(
        &'a self,
        ctx: TurnContext,
        sink: TurnSink,
    ) -> BoxFuture<'a, Result<(), AgentError>> {
        Box::pin(async move {
            if ctx.user_message == "/panic" {
                panic!("agent bug");
            }
            sink.thinking("counting");
            sink.tool(ToolCall {
                call_id: "c".into(),
                name: "count".into(),
                status: ToolStatus::Finished,
                input_preview: None,
                output_preview: Some(ctx.history.len().to_string()),
            });
            sink.response(format!("{} earlier messages", ctx.history.len()));
            Ok(())
        })
    }
}

async fn wait_end(http: &reqwest::Client, url: &str, turn: &str) -> TestResult<TurnInfo> {
    let start = std::time::Instant::now();
    loop {
        let t: TurnInfo = http
            .get(format!("{url}/api/turns/{turn}"))
            .send()
            .await?
            .json()
            .await?;
        if t.state.is_terminal() {
            return Ok(t);
        }
        if start.elapsed() > Duration::from_secs(20) {
            return Err("turn did not end".into());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn a_custom_agent_runs_and_a_panicking_one_fails_only_its_turn() -> TestResult {
    let dir = tempfile::tempdir()?;
    let mut config = Config::defaults();
    config.db = dir.path().join("embedded.db");
    let listener = turnstream_server::serve::bind("127.0.0.1:0".parse()?)?;
    let url = format!("http://{}", listener.local_addr()?);
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(turnstream_server::run(
        config,
        Arc::new(CountingAgent),
        listener,
        async move {
            let _ = stop_rx.await;
        },
    ));
    let http = reqwest::Client::new();
    let post = |content: &'static str| {
        let http = http.clone();
        let url = url.clone();
        async move {
            let v: serde_json::Value = http
                .post(format!("{url}/api/sessions/e/messages"))
                .json(&serde_json::json!({ "content": content }))
                .send()
                .await?
                .json()
                .await?;
            v["turn_id"]
                .as_str()
                .map(str::to_string)
                .ok_or_else(|| format!("no turn id in {v}").into())
                as TestResult<String>
        }
    };
    let first = post("hello").await?;
    let t = wait_end(&http, &url, &first).await?;
    assert_eq!(t.state, TurnState::Completed);
    assert_eq!(t.text, "0 earlier messages");
    assert_eq!(t.thinking, "counting");
    assert_eq!(t.tools.len(), 1);

    let crash = post("/panic").await?;
    let t = wait_end(&http, &url, &crash).await?;
    assert_eq!(t.state, TurnState::Failed);
    assert_eq!(t.error.as_deref(), Some("the agent crashed"));

    // The session still runs turns, and the agent sees the history so far as context.
    let third = post("again").await?;
    let t = wait_end(&http, &url, &third).await?;
    assert_eq!(t.state, TurnState::Completed);
    assert_eq!(t.text, "4 earlier messages");

    let _ = stop_tx.send(());
    tokio::time::timeout(Duration::from_secs(20), server).await???;
    Ok(())
}
