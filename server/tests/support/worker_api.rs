//! A worker process's side of the worker API, for tests: a worker-mode server whose client sends
//! the service key, and the claim and per-turn requests as plain JSON.

use reqwest::header::{HeaderMap, HeaderValue, AUTHORIZATION};
use serde_json::{json, Value};

use super::{Api, TestResult, TestServer, DEADLINE};

pub const SERVICE_KEY: &str = "svc-worker-test-key-01";
pub const SECRET: &str = "test-secret-0123456789-abcdefghijklmnop";

/// A worker-mode server (`extra` flags after the worker ones) whose test client sends the
/// service key on every request.
pub fn worker_server(extra: &[&str]) -> TestResult<TestServer> {
    worker_nodes(None, extra)
}

/// [`worker_server`] with `n` nodes (PostgreSQL only), or as many as the pass says (`None`).
pub fn worker_nodes(n: Option<usize>, extra: &[&str]) -> TestResult<TestServer> {
    let mut args = vec![
        "--agent",
        "worker",
        "--service-key",
        SERVICE_KEY,
        "--auth-secret",
        SECRET,
    ];
    args.extend_from_slice(extra);
    let mut s = match n {
        None => TestServer::start(&args)?,
        Some(n) => TestServer::start_nodes(n, &args)?,
    };
    s.http = keyed_client(SERVICE_KEY)?;
    Ok(s)
}

/// A client that sends `key` as its bearer token, keeping no idle connection (with several nodes
/// behind the proxy each request goes to another node, and none rides a connection to a node a
/// test killed).
pub fn keyed_client(key: &str) -> TestResult<reqwest::Client> {
    let mut headers = HeaderMap::new();
    headers.insert(
        AUTHORIZATION,
        HeaderValue::from_str(&format!("Bearer {key}"))?,
    );
    Ok(reqwest::Client::builder()
        .default_headers(headers)
        .timeout(DEADLINE)
        .pool_max_idle_per_host(0)
        .build()?)
}

/// `POST /api/worker{path}` with `body`: the status and the JSON answer.
pub async fn worker_post(api: &Api, path: &str, body: Value) -> TestResult<(u16, Value)> {
    let res = api
        .http
        .post(format!("{}/api/worker{path}", api.url))
        .json(&body)
        .send()
        .await?;
    let status = res.status().as_u16();
    Ok((status, res.json().await.unwrap_or(Value::Null)))
}

/// A claimed turn: its claim as the server gave it, its id and lease token.
#[derive(Debug, Clone)]
pub struct ClaimedTurn {
    pub claim: Value,
    pub turn: String,
    pub lease: String,
}

impl ClaimedTurn {
    /// `POST .../events` with `seq` and `events`.
    pub async fn events(&self, api: &Api, seq: i64, events: Value) -> TestResult<(u16, Value)> {
        let body = json!({"lease": self.lease, "seq": seq, "events": events});
        worker_post(api, &format!("/turns/{}/events", self.turn), body).await
    }

    /// `POST .../{op}` (`wait`, `complete`) with `seq`.
    pub async fn end(&self, api: &Api, op: &str, seq: i64) -> TestResult<(u16, Value)> {
        let body = json!({"lease": self.lease, "seq": seq});
        worker_post(api, &format!("/turns/{}/{op}", self.turn), body).await
    }

    /// `POST .../fail` with `seq` and `message`.
    pub async fn fail(&self, api: &Api, seq: i64, message: &str) -> TestResult<(u16, Value)> {
        let body = json!({"lease": self.lease, "seq": seq, "error": {"message": message}});
        worker_post(api, &format!("/turns/{}/fail", self.turn), body).await
    }
}

/// Claims one turn of `agents` (every agent when `None`), waiting up to 10 s; `None` if none
/// came.
pub async fn claim_of(
    api: &Api,
    worker: &str,
    agents: Option<&[&str]>,
    wait_ms: u64,
) -> TestResult<Option<ClaimedTurn>> {
    let mut body = json!({"worker_id": worker, "wait_ms": wait_ms, "max_turns": 1});
    if let Some(agents) = agents {
        body["agents"] = json!(agents);
    }
    let (status, answer) = worker_post(api, "/claim", body).await?;
    if status != 200 {
        return Err(format!("claim answered {status}: {answer}").into());
    }
    let Some(t) = answer["turns"].as_array().and_then(|t| t.first()).cloned() else {
        return Ok(None);
    };
    let turn = t["turn_id"].as_str().ok_or("no turn_id")?.to_string();
    let lease = t["lease"]["token"].as_str().ok_or("no lease")?.to_string();
    Ok(Some(ClaimedTurn {
        claim: t,
        turn,
        lease,
    }))
}

/// [`claim_of`] that must hand out a turn within 10 s.
pub async fn claim_one_of(
    api: &Api,
    worker: &str,
    agents: Option<&[&str]>,
) -> TestResult<ClaimedTurn> {
    claim_of(api, worker, agents, 10_000)
        .await?
        .ok_or_else(|| format!("no turn of {agents:?} claimed within 10 s").into())
}

/// The error code of an error answer.
pub fn code(body: &Value) -> &str {
    body["error"]["code"].as_str().unwrap_or("")
}
