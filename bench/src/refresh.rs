//! Figure 5: refresh. The demo page (`www/`) is opened in headless Chromium while a turn of
//! 10,000 deltas is in flight: time from navigation to the page's code loaded, and from there to
//! the assistant bubble showing every delta journaled before the navigation; plus the gzipped
//! size of the wasm and JS the page loads.
//!
//! The browser side is `bench/browser/refresh.mjs` (playwright-core driving Debian's Chromium),
//! which prints one JSON line; this module checks what it needs, starts the server and the turn,
//! runs the script and turns its JSON into rows.
//!
//! The turn comes from a model of our own (an OpenAI-compatible stream on a local port, through
//! `--agent openai`): 10,000 deltas `x1 x2 … x10000 ` as fast as the server journals them, then
//! one more every 200 ms for as long as the figure runs. So the page always meets a turn that is
//! still streaming, as a real refresh does, and it has ~10,000 deltas, not however many a fixed
//! demo delay left by then (the demo agent cannot stream fast and then slowly). The trickle is
//! slow on purpose: the demo page re-lays out the whole reply on every delta (20-50 ms at 10,000
//! deltas here), so at 50 deltas/s it falls further behind with every delta and never shows the
//! turn at all; the figure reports that render cost in a row of its own.

use std::convert::Infallible;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use axum::response::Response;
use bytes::Bytes;
use serde_json::Value;

use crate::procs::{self, workspace_root};
use crate::stats::thousands;
use crate::table::{Row, Sizes};

/// Deltas in the turn when the first measured page opens.
const DELTAS: u64 = 10_000;
/// After those, one more delta per `TRICKLE` (5 a second: see the module's doc).
const TRICKLE: Duration = Duration::from_millis(200);
/// Deltas per HTTP chunk while the upstream fills the turn.
const FILL_BATCH: u64 = 100;
const SESSION: &str = "refresh";
const TARGET_MS: f64 = 150.0;
const TARGET_KB: f64 = 80.0;

/// The three peers have nothing a browser page could be refreshed on.
const PEERS_CELLS: [&str; 3] = [
    "ring: not supported: no browser SDK",
    "durable-streams: not supported: it has a JS client, but no chat page like this one to refresh",
    "resumable-stream: not supported: no browser SDK",
];

pub async fn figure(sizes: &Sizes, rows: &mut Vec<Row>) {
    let reps = sizes.refresh_reps;
    let mut cold = Row::new(
        format!(
            "5. refresh, cold (new browser context: no HTTP cache, no IndexedDB), in-flight turn of {} deltas: page's code loaded → all its text so far shown, p50 / max of {reps} (and navigation → code loaded)",
            thousands(DELTAS as f64)
        ),
        "≤ 150 ms after the code has loaded",
    );
    let mut warm = Row::new(
        format!("5. refresh, warm (the same tab loaded again ~1 s later: HTTP cache and the SDK's IndexedDB cache present), same turn, p50 / max of {reps}"),
        "≤ 150 ms after the code has loaded",
    );
    let mut steps = Row::new(
        "5. refresh milestones, p50 ms after navigation start (cold; warm)",
        "—",
    );
    let mut render = Row::new(
        "5. the demo page's render (at most one a frame, layout included) at ~10,000 deltas: the first, p50; each later one, p50 / max",
        "—",
    );
    let mut size = Row::new(
        "5. wasm + JS glue the page loads, gzipped (zlib level 9)",
        "≤ 80 KB",
    );
    match run(reps).await {
        Ok(out) => {
            fill_rows(&out, &mut cold, &mut warm, &mut steps, &mut size);
            render.ours = render_cell(&out);
        }
        Err(Skip(why)) => {
            for r in [&mut cold, &mut warm, &mut steps, &mut render, &mut size] {
                r.ours = why.clone();
            }
        }
    }
    for r in [&mut cold, &mut warm, &mut size] {
        r.comparisons = PEERS_CELLS.iter().map(|s| s.to_string()).collect();
    }
    rows.extend([cold, warm, steps, render, size]);
}

/// Why the figure has no numbers: a missing prerequisite ("not run: …") or a failure.
pub(crate) struct Skip(pub(crate) String);

impl From<anyhow::Error> for Skip {
    fn from(e: anyhow::Error) -> Skip {
        Skip(format!("failed: {e:#}"))
    }
}

async fn run(reps: usize) -> std::result::Result<Value, Skip> {
    let chromium = prerequisites().map_err(Skip)?;
    let (upstream_url, upstream) = start_upstream().await?;
    let result = measure(&chromium, &upstream_url, reps).await;
    upstream.abort();
    Ok(result?)
}

/// Chromium's path, once node, the page's package and playwright-core are all in place; or
/// why the figure cannot run here.
pub(crate) fn prerequisites() -> std::result::Result<PathBuf, String> {
    if !have("node") || !have("npm") {
        return Err("not run: node and npm are not installed".into());
    }
    let chromium = ["chromium", "chromium-browser"]
        .iter()
        .find_map(|c| which(c))
        .ok_or("not run: no chromium on PATH (`./run setup` installs Debian's)")?;
    let root = workspace_root();
    let www_pkg = root.join("www").join("pkg");
    if !www_pkg.join("turnstream.js").exists() || !www_pkg.join("turnstream_bg.wasm").exists() {
        eprintln!("refresh: www/pkg is missing; building it (bash scripts/build-pkg.sh)");
        let log = log_path("refresh-build-pkg").map_err(|e| format!("failed: {e:#}"))?;
        let ok = logged(
            Command::new("bash").arg("scripts/build-pkg.sh"),
            &root,
            &log,
        ) && copy_dir(&root.join("pkg"), &www_pkg).is_ok();
        if !ok {
            return Err(format!(
                "not run: www/pkg is missing and `bash scripts/build-pkg.sh` failed (see {}; `./run pkg` builds it)",
                log.display()
            ));
        }
    }
    let dir = browser_dir();
    if !dir.join("node_modules").join("playwright-core").exists() {
        eprintln!("refresh: installing playwright-core from npm (no browser download)");
        let log = log_path("refresh-npm").map_err(|e| format!("failed: {e:#}"))?;
        let mut npm = Command::new("npm");
        npm.args(["ci", "--no-audit", "--no-fund", "--loglevel=error"]);
        if !logged(&mut npm, &dir, &log) {
            return Err(format!(
                "not run: npm ci in bench/browser failed (see {})",
                log.display()
            ));
        }
    }
    Ok(chromium)
}

fn browser_dir() -> PathBuf {
    workspace_root().join("bench").join("browser")
}

pub(crate) fn log_path(name: &str) -> Result<PathBuf> {
    Ok(procs::bench_dir()?.join("logs").join(format!("{name}.log")))
}

/// Runs `cmd` in `dir` with its output in `log`; whether it succeeded.
fn logged(cmd: &mut Command, dir: &Path, log: &Path) -> bool {
    let Ok(file) = std::fs::File::create(log) else {
        return false;
    };
    let Ok(err) = file.try_clone() else {
        return false;
    };
    cmd.current_dir(dir)
        .stdin(Stdio::null())
        .stdout(file)
        .stderr(err)
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

fn copy_dir(from: &Path, to: &Path) -> Result<()> {
    std::fs::create_dir_all(to)?;
    for e in std::fs::read_dir(from)? {
        let e = e?;
        std::fs::copy(e.path(), to.join(e.file_name()))?;
    }
    Ok(())
}

fn have(cmd: &str) -> bool {
    which(cmd).is_some()
}

fn which(cmd: &str) -> Option<PathBuf> {
    let out = Command::new("sh")
        .args(["-c", &format!("command -v {cmd}")])
        .stderr(Stdio::null())
        .output()
        .ok()?;
    let path = String::from_utf8_lossy(&out.stdout).trim().to_string();
    (out.status.success() && !path.is_empty()).then(|| PathBuf::from(path))
}

/// The model: `x1 ` … `x{DELTAS} ` at once (in chunks of `FILL_BATCH`), then one delta per
/// `TRICKLE`, without end (the server is killed when the figure is done).
async fn completions() -> Response {
    let stream = futures::stream::unfold(1u64, |i| async move {
        let batch = if i <= DELTAS { FILL_BATCH } else { 1 };
        if i > DELTAS {
            tokio::time::sleep(TRICKLE).await;
        }
        let mut frame = String::new();
        for k in i..i + batch {
            let chunk = serde_json::json!({"choices": [{"index": 0, "delta": {"content": format!("x{k} ")}}]});
            frame.push_str(&format!("data: {chunk}\n\n"));
        }
        Some((Ok::<_, Infallible>(Bytes::from(frame)), i + batch))
    });
    let mut res = Response::new(axum::body::Body::from_stream(stream));
    res.headers_mut().insert(
        axum::http::header::CONTENT_TYPE,
        axum::http::HeaderValue::from_static("text/event-stream"),
    );
    res
}

async fn start_upstream() -> Result<(String, tokio::task::JoinHandle<()>)> {
    let app = axum::Router::new().route("/v1/chat/completions", axum::routing::post(completions));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}/v1", listener.local_addr()?);
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Ok((url, task))
}

/// Starts the server with the page, starts the turn, waits for its first `DELTAS` deltas, and
/// runs the browser script.
async fn measure(chromium: &Path, upstream: &str, reps: usize) -> Result<Value> {
    let root = workspace_root();
    let bin = procs::turnstream_binary()?;
    let dir = procs::scratch_dir("refresh-")?;
    let mut cmd = Command::new(bin);
    cmd.arg("serve")
        .args(["--listen", "127.0.0.1:0", "--db"])
        .arg(dir.path().join("ts.db"))
        .arg("--www")
        .arg(root.join("www"))
        .args([
            "--coalesce-ms",
            "0",
            "--agent",
            "openai",
            "--openai-base-url",
        ])
        .arg(upstream)
        .env("RUST_LOG", "warn")
        // The model is ours, on loopback: no key goes anywhere.
        .env_remove("OPENAI_API_KEY");
    let server = procs::spawn(
        "turnstream",
        cmd,
        &log_path("refresh-turnstream")?,
        "http://",
        None,
    )?;
    let http = crate::systems::client()?;
    let res = http
        .post(format!("{}/api/sessions/{SESSION}/messages", server.url))
        .header("content-type", "application/json")
        .body(r#"{"content":"tell me everything"}"#)
        .send()
        .await?;
    if !res.status().is_success() {
        bail!("POST message: {}", res.status());
    }
    let turn = res.json::<Value>().await?["turn_id"]
        .as_str()
        .ok_or_else(|| anyhow!("no turn_id in the POST answer"))?
        .to_string();
    let t0 = Instant::now();
    loop {
        let info: Value = http
            .get(format!("{}/api/turns/{turn}", server.url))
            .send()
            .await?
            .json()
            .await?;
        let text = info["text"].as_str().unwrap_or("");
        if text.matches(' ').count() as u64 >= DELTAS {
            break;
        }
        if info["state"] != "running" && info["state"] != "queued" {
            bail!("the turn ended early: {info}");
        }
        if t0.elapsed() > Duration::from_secs(120) {
            bail!("the turn did not reach {DELTAS} deltas within 120 s");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    eprintln!(
        "refresh: {DELTAS} deltas journaled in {:.2} s; {reps} cold + {reps} warm page loads",
        t0.elapsed().as_secs_f64()
    );
    let cfg = serde_json::json!({
        "url": server.url,
        "session": SESSION,
        "turn": turn,
        "reps": reps,
        "chromium": chromium,
    });
    let log = log_path("refresh-browser")?;
    let out = tokio::time::timeout(
        Duration::from_secs(300),
        tokio::task::spawn_blocking(move || run_script("refresh", &cfg, &log)),
    )
    .await
    .map_err(|_| anyhow!("the browser script took more than 300 s"))???;
    drop(server);
    Ok(out)
}

/// A child killed when dropped (the bench timing out or erroring).
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Runs `bench/browser/{script}.mjs` and parses the JSON line it prints (kept in
/// `target/bench/{script}.json`). Its stdin stays open while we wait: the script exits (and
/// closes Chromium) when the bench goes away, however it goes.
pub(crate) fn run_script(script: &str, cfg: &Value, log: &Path) -> Result<Value> {
    let dir = browser_dir();
    let err = std::fs::File::create(log)?;
    let child = Command::new("node")
        .arg(dir.join(format!("{script}.mjs")))
        .arg(cfg.to_string())
        .current_dir(&dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(err)
        .spawn()
        .context("cannot start node")?;
    let mut child = Killed(child);
    let mut stdout = String::new();
    child
        .0
        .stdout
        .take()
        .ok_or_else(|| anyhow!("no stdout"))?
        .read_to_string(&mut stdout)?;
    let status = child.0.wait()?;
    let line = stdout.lines().last().unwrap_or("");
    let v: Value = serde_json::from_str(line).map_err(|_| {
        anyhow!(
            "{script}.mjs exited with {status} without results (see {})",
            log.display()
        )
    })?;
    // Every run's details (milestones, resources, renders…), for a closer look than the table's.
    if let Ok(dir) = procs::bench_dir() {
        let _ = std::fs::write(dir.join(format!("{script}.json")), line);
    }
    if let Some(e) = v.get("error").and_then(Value::as_str) {
        bail!(
            "{script}.mjs: {}",
            e.lines().next().unwrap_or(e).trim_start_matches("Error: ")
        );
    }
    Ok(v)
}

/// A milestone of one run, in ms after navigation start.
fn mark(run: &Value, name: &str) -> Option<f64> {
    run["marks"][name].as_f64()
}

/// When the resource whose URL contains `needle` finished arriving.
fn resource_end(run: &Value, needle: &str) -> Option<f64> {
    run["resources"]
        .as_array()?
        .iter()
        .find(|r| r["name"].as_str().is_some_and(|n| n.contains(needle)))?["end"]
        .as_f64()
}

fn p50_max(mut v: Vec<f64>) -> Option<(f64, f64)> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    // Nearest-rank, as `Samples::pct`.
    let p50 = v[(v.len().div_ceil(2)).max(1) - 1];
    Some((p50, v[v.len() - 1]))
}

fn ms(v: f64) -> String {
    crate::stats::ms((v * 1000.0).round().max(0.0) as u64)
}

/// "p50 / max ms (navigation → code loaded p50 / max; N deltas)" of one kind of run, and p50.
fn page_cell(runs: &[Value]) -> (String, Option<f64>) {
    let after: Vec<f64> = runs
        .iter()
        .filter_map(|r| Some(mark(r, "shown")? - mark(r, "chat_set")?))
        .collect();
    let code: Vec<f64> = runs.iter().filter_map(|r| mark(r, "chat_set")).collect();
    let total: Vec<f64> = runs.iter().filter_map(|r| mark(r, "shown")).collect();
    let ns: Vec<u64> = runs.iter().filter_map(|r| r["n"].as_u64()).collect();
    let (Some(a), Some(c), Some(t)) = (p50_max(after), p50_max(code), p50_max(total)) else {
        return ("no runs".into(), None);
    };
    let n_lo = ns.iter().min().copied().unwrap_or(0);
    let n_hi = ns.iter().max().copied().unwrap_or(0);
    (
        format!(
            "{} / {} ms (navigation → code loaded {} / {} ms; navigation → text shown {} / {} ms; {}-{} deltas at navigation)",
            ms(a.0),
            ms(a.1),
            ms(c.0),
            ms(c.1),
            ms(t.0),
            ms(t.1),
            thousands(n_lo as f64),
            thousands(n_hi as f64)
        ),
        Some(a.0),
    )
}

/// A milestone's name, and when a run reached it.
type Milestone = (&'static str, fn(&Value) -> Option<f64>);

/// p50 of each milestone, in page order.
fn milestones(runs: &[Value]) -> String {
    let steps: [Milestone; 12] = [
        ("HTML", |r| r["nav"]["response_end"].as_f64()),
        ("app.js", |r| resource_end(r, "/app.js")),
        ("turnstream.js", |r| resource_end(r, "/turnstream.js")),
        ("wasm fetched", |r| resource_end(r, ".wasm")),
        ("wasm instantiated", |r| mark(r, "wasm_instantiated")),
        ("IndexedDB open", |r| mark(r, "idb_opened")),
        ("connect returned (code loaded)", |r| mark(r, "chat_set")),
        ("history", |r| resource_end(r, "/history")),
        ("stream requested", |r| mark(r, "stream_created")),
        ("stream open", |r| mark(r, "stream_open")),
        ("snapshot", |r| mark(r, "snapshot")),
        ("text in the DOM", |r| mark(r, "shown")),
    ];
    let mut parts: Vec<String> = steps
        .iter()
        .filter_map(|(name, f)| {
            let (p50, _) = p50_max(runs.iter().filter_map(f).collect())?;
            Some(format!("{name} {}", ms(p50)))
        })
        .collect();
    if let Some((p50, _)) = p50_max(runs.iter().filter_map(|r| mark(r, "first_text")).collect()) {
        parts.push(format!("(first text {})", ms(p50)));
    }
    if let Some((p50, _)) = p50_max(runs.iter().filter_map(|r| mark(r, "frame")).collect()) {
        parts.push(format!("(next frame {})", ms(p50)));
    }
    parts.join(", ")
}

fn fill_rows(out: &Value, cold: &mut Row, warm: &mut Row, steps: &mut Row, size: &mut Row) {
    let runs = |k: &str| out[k].as_array().cloned().unwrap_or_default();
    let (cold_runs, warm_runs) = (runs("cold"), runs("warm"));
    for (row, rs) in [(&mut *cold, &cold_runs), (&mut *warm, &warm_runs)] {
        let (cell, p50) = page_cell(rs);
        row.ours = cell;
        if let Some(p50) = p50 {
            row.ratio = format!("{:.2}× target", p50 / TARGET_MS);
        }
    }
    steps.ours = format!(
        "cold: {}; warm: {}",
        milestones(&cold_runs),
        milestones(&warm_runs)
    );
    if let Some(b) = out["browser"].as_str() {
        steps.ours.push_str(&format!(" (Chromium {b}, headless)"));
    }
    let sizes = out["sizes"].as_array().cloned().unwrap_or_default();
    let gz = |needle: &str| -> Option<f64> {
        sizes
            .iter()
            .find(|s| s["path"].as_str().is_some_and(|p| p.ends_with(needle)))?["gzip"]
            .as_f64()
    };
    let kb = |b: f64| format!("{:.1} KB", b / 1000.0);
    match (gz("/turnstream_bg.wasm"), gz("/turnstream.js")) {
        (Some(w), Some(j)) => {
            size.ours = format!(
                "{} (turnstream_bg.wasm {} + turnstream.js {}; the page's own app.js adds {}; {})",
                kb(w + j),
                kb(w),
                kb(j),
                gz("/app.js").map(kb).unwrap_or_else(|| "?".into()),
                pkg_age()
            );
            size.ratio = format!("{:.2}× target", (w + j) / 1000.0 / TARGET_KB);
        }
        _ => size.ours = format!("the page loaded no turnstream.js/.wasm: {sizes:?}"),
    }
}

/// How old the measured build of the SDK is (the bench builds `www/pkg` only when missing).
fn pkg_age() -> String {
    let wasm = workspace_root()
        .join("www")
        .join("pkg")
        .join("turnstream_bg.wasm");
    match std::fs::metadata(wasm).and_then(|m| m.modified()) {
        Ok(t) => {
            let mins = t.elapsed().map(|d| d.as_secs() / 60).unwrap_or(0);
            format!("www/pkg built {mins} min before this run")
        }
        Err(_) => "www/pkg: no build time".into(),
    }
}

/// Renders of one run: (duration ms, characters in the bubble after it).
fn renders(run: &Value) -> Vec<(f64, u64)> {
    run["renders"]
        .as_array()
        .map(|rs| {
            rs.iter()
                .filter_map(|r| Some((r[1].as_f64()?, r[2].as_u64()?)))
                .collect()
        })
        .unwrap_or_default()
}

/// The render that first showed the whole turn (the snapshot's), and every one after it, over
/// the cold runs (each stays open ~1 s after its measurement, with the turn still streaming).
fn render_cell(out: &Value) -> String {
    let mut first = Vec::new();
    let mut later = Vec::new();
    for run in out["cold"].as_array().into_iter().flatten() {
        let Some(shown) = run["shown_chars"].as_u64() else {
            continue;
        };
        let rs = renders(run);
        if let Some(i) = rs.iter().position(|(_, chars)| *chars >= shown) {
            first.push(rs[i].0);
            later.extend(rs[i + 1..].iter().map(|(d, _)| *d));
        }
    }
    match (p50_max(first), p50_max(later.clone())) {
        (Some(f), Some(l)) => format!(
            "first render {} ms; each later render {} / {} ms ({} renders, at most one a frame, each a layout of the whole reply): the page keeps up with at most ~{:.0} renders/s",
            ms(f.0),
            ms(l.0),
            ms(l.1),
            later.len(),
            1000.0 / l.0
        ),
        (Some(f), None) => format!("snapshot {} ms; no later renders recorded", ms(f.0)),
        _ => "no renders recorded".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn p50_and_max_are_nearest_rank() {
        assert_eq!(p50_max(vec![3.0, 1.0, 2.0]), Some((2.0, 3.0)));
        assert_eq!(p50_max(vec![4.0, 1.0, 2.0, 3.0]), Some((2.0, 4.0)));
        assert_eq!(p50_max(vec![]), None);
    }
}
