//! Log lines of the real binary: with `--log-format json` (or `TURNSTREAM_LOG_FORMAT=json`) every
//! stderr line is a JSON object; one line per request names its method, route template, status
//! and duration, a stream gets a second line when it ends, and every turn end is logged with its
//! state and duration. No line carries a credential or message content, and none has terminal
//! escape codes when stderr is not a terminal.

mod support;

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use serde_json::{json, Value};
use support::{listening_url, open_stream, wait_for, TestResult, DEADLINE};

const SERVICE_KEY: &str = "svc-log-key-4f1c9e27d3";
/// Posted as message content (and echoed as the reply): must never reach the log.
const SECRET_CONTENT: &str = "zebra-quartz-7731-unlogged";

/// The binary with stderr captured in a file, killed on drop.
struct LoggedServer {
    url: String,
    log: PathBuf,
    child: Child,
    _dir: tempfile::TempDir,
}

impl LoggedServer {
    fn start(args: &[&str], env: &[(&str, &str)]) -> TestResult<LoggedServer> {
        let dir = tempfile::tempdir()?;
        let log = dir.path().join("stderr.log");
        let mut child = Command::new(env!("CARGO_BIN_EXE_turnstream"))
            .arg("serve")
            .args(["--listen", "127.0.0.1:0", "--demo-delay-ms", "2"])
            .arg("--db")
            .arg(dir.path().join("turnstream.db"))
            .args(args)
            .env_remove("TURNSTREAM_LOG_FORMAT")
            .env("RUST_LOG", "info")
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log)?)
            .spawn()?;
        let url = listening_url(&mut child)?;
        Ok(LoggedServer {
            url,
            log,
            child,
            _dir: dir,
        })
    }

    fn stderr(&self) -> TestResult<String> {
        Ok(std::fs::read_to_string(&self.log)?)
    }
}

impl Drop for LoggedServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Every stderr line as JSON; fails on a line that is not a JSON object.
fn json_lines(text: &str) -> TestResult<Vec<Value>> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let v: Value = serde_json::from_str(l).map_err(|e| format!("not JSON ({e}): {l:?}"))?;
            if !v.is_object() {
                return Err(format!("not a JSON object: {l:?}").into());
            }
            Ok(v)
        })
        .collect()
}

/// The access lines for `method route`, with their messages.
fn access<'a>(lines: &'a [Value], method: &str, route: &str) -> Vec<&'a Value> {
    lines
        .iter()
        .filter(|l| {
            l["target"] == "turnstream::access" && l["method"] == method && l["route"] == route
        })
        .collect()
}

fn assert_clean(text: &str) {
    assert!(
        !text.contains("\u{1b}["),
        "escape codes in the log:\n{text}"
    );
    assert!(
        !text.contains(SERVICE_KEY),
        "the service key is in the log:\n{text}"
    );
    assert!(
        !text.contains(SECRET_CONTENT),
        "message content is in the log:\n{text}"
    );
}

async fn wait_for_log(server: &LoggedServer, needle: &'static str) -> TestResult<String> {
    wait_for(|| async move {
        let text = server.stderr()?;
        Ok(text.contains(needle).then_some(text))
    })
    .await
}

#[tokio::test]
async fn json_lines_for_requests_streams_and_turn_ends_without_secrets() -> TestResult {
    // The format comes from the environment here; the flag is the same setting.
    let server = LoggedServer::start(
        &["--service-key", SERVICE_KEY],
        &[("TURNSTREAM_LOG_FORMAT", "json")],
    )?;
    let http = reqwest::Client::builder().timeout(DEADLINE).build()?;
    let bearer = format!("Bearer {SERVICE_KEY}");

    let res = http
        .post(format!("{}/api/sessions/logged/messages", server.url))
        .header("authorization", &bearer)
        .json(&json!({ "content": format!("/echo {SECRET_CONTENT}") }))
        .send()
        .await?;
    assert_eq!(res.status(), 202);
    let posted: Value = res.json().await?;
    let turn = posted["turn_id"].as_str().ok_or("no turn_id")?.to_string();

    // A stream with the key in its query (as EventSource sends it), replaying the turn.
    let mut stream = open_stream(http.get(format!(
        "{}/api/stream?session=logged&cursor=garbage&access_token={SERVICE_KEY}",
        server.url
    )))
    .await?;
    // The resync frame, then the server closes the stream.
    while stream.next().await?.is_some() {}

    // A refused request is logged too, with its status.
    let res = http
        .get(format!("{}/api/turns/{turn}", server.url))
        .send()
        .await?;
    assert_eq!(res.status(), 401);

    wait_for_log(&server, "\"turn ended\"").await?;
    wait_for_log(&server, "stream ended").await?;
    // The reply (which echoes the content) has been written and read back.
    let res = http
        .get(format!("{}/api/turns/{turn}", server.url))
        .header("authorization", &bearer)
        .send()
        .await?;
    let info: Value = res.json().await?;
    assert_eq!(info["state"], "completed");
    assert!(info["text"].as_str().unwrap_or("").contains(SECRET_CONTENT));

    let text = server.stderr()?;
    assert_clean(&text);
    let lines = json_lines(&text)?;

    let post = access(&lines, "POST", "/api/sessions/{session}/messages");
    let post = post
        .first()
        .ok_or_else(|| format!("no POST line:\n{text}"))?;
    assert_eq!(post["status"], 202, "{post}");
    assert_eq!(post["level"], "INFO", "{post}");
    assert_eq!(post["message"], "request", "{post}");
    assert!(
        post["duration_ms"].as_f64().is_some_and(|d| d >= 0.0),
        "{post}"
    );
    assert!(post.get("timestamp").is_some(), "{post}");

    let stream_lines = access(&lines, "GET", "/api/stream");
    let started = stream_lines
        .iter()
        .find(|l| l["message"] == "request")
        .ok_or_else(|| format!("no stream line:\n{text}"))?;
    assert_eq!(started["status"], 200, "{started}");
    let ended = stream_lines
        .iter()
        .find(|l| l["message"] == "stream ended")
        .ok_or_else(|| format!("no stream end line:\n{text}"))?;
    assert_eq!(ended["status"], 200, "{ended}");
    assert!(
        ended["duration_ms"].as_f64() >= started["duration_ms"].as_f64(),
        "a stream ends after it starts: {started} {ended}"
    );

    let refused = access(&lines, "GET", "/api/turns/{turn}");
    assert!(
        refused.iter().any(|l| l["status"] == 401),
        "no 401 line:\n{text}"
    );

    let ends: Vec<&Value> = lines
        .iter()
        .filter(|l| l["target"] == "turnstream::turn")
        .collect();
    assert_eq!(ends.len(), 1, "one line per turn end:\n{text}");
    let end = ends[0];
    assert_eq!(end["message"], "turn ended", "{end}");
    assert_eq!(end["turn"], turn.as_str(), "{end}");
    assert_eq!(end["session"], "logged", "{end}");
    assert_eq!(end["state"], "completed", "{end}");
    assert!(end["duration_ms"].as_i64().is_some_and(|d| d >= 0), "{end}");
    Ok(())
}

#[tokio::test]
async fn text_lines_have_no_escape_codes_off_a_terminal() -> TestResult {
    let server = LoggedServer::start(&["--log-format", "text"], &[])?;
    let http = reqwest::Client::builder().timeout(DEADLINE).build()?;
    let res = http
        .post(format!("{}/api/sessions/plain/messages", server.url))
        .json(&json!({ "content": format!("/echo {SECRET_CONTENT}") }))
        .send()
        .await?;
    assert_eq!(res.status(), 202);
    let text = wait_for_log(&server, "turn ended").await?;
    assert_clean(&text);
    let line = text
        .lines()
        .find(|l| l.contains("turnstream::access") && l.contains("POST"))
        .ok_or_else(|| format!("no request line:\n{text}"))?;
    assert!(
        line.contains(r#"route="/api/sessions/{session}/messages""#) && line.contains("status=202"),
        "{line}"
    );
    assert!(json_lines(&text).is_err(), "text format wrote JSON");
    Ok(())
}
