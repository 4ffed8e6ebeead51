//! Figure 7: streams per N tabs. N tabs of the demo page (`www/`) on one origin in headless
//! Chromium, each on its own session, over plain HTTP/1.1: once every tab is live, how many
//! streams the server holds (its own `turnstream_connections` gauge). The SDK elects one tab to
//! hold the streams of the whole origin (one per 32 sessions) and relays them to the others, so
//! this stays at ceil(sessions / 32) however many tabs are open; a stream per tab would also
//! leave every tab after the sixth without a connection.
//!
//! The browser side is `bench/browser/tabs.mjs`, run like figure 5's script (see
//! [`crate::refresh`]); this module starts the server and turns the script's JSON into a row.

use std::process::Command;
use std::time::Duration;

use anyhow::{anyhow, Result};
use serde_json::Value;

use crate::procs::{self, workspace_root};
use crate::refresh::{log_path, prerequisites, run_script, Skip};
use crate::table::{Row, Sizes};

/// Sessions one stream carries (the server's limit, and the SDK's).
const PER_STREAM: u64 = 32;

pub async fn figure(sizes: &Sizes, rows: &mut Vec<Row>) {
    let mut row = Row::new(
        "7. streams the server holds for N tabs of one origin (headless Chromium, HTTP/1.1, each tab on its own session), once every tab is live",
        "ceil(sessions / 32), whatever N",
    );
    match run(&sizes.tabs).await {
        Ok(out) => fill_row(&out, &mut row),
        Err(Skip(why)) => row.ours = why,
    }
    row.comparisons = vec![
        "ring: not supported: no browser SDK".into(),
        "durable-streams: not supported: it has a JS client, but no chat page like this one to open in tabs".into(),
        "resumable-stream: not supported: no browser SDK".into(),
    ];
    rows.push(row);
}

async fn run(tabs: &[usize]) -> std::result::Result<Value, Skip> {
    let chromium = prerequisites().map_err(Skip)?;
    Ok(measure(&chromium, tabs).await?)
}

async fn measure(chromium: &std::path::Path, tabs: &[usize]) -> Result<Value> {
    let bin = procs::turnstream_binary()?;
    let dir = procs::scratch_dir("tabs-")?;
    let mut cmd = Command::new(bin);
    cmd.arg("serve")
        .args(["--listen", "127.0.0.1:0", "--db"])
        .arg(dir.path().join("ts.db"))
        .arg("--www")
        .arg(workspace_root().join("www"))
        .env("RUST_LOG", "warn");
    let server = procs::spawn(
        "turnstream",
        cmd,
        &log_path("tabs-turnstream")?,
        "http://",
        None,
    )?;
    let cfg = serde_json::json!({
        "url": server.url,
        "tabs": tabs,
        "chromium": chromium,
    });
    let log = log_path("tabs-browser")?;
    let out = tokio::time::timeout(
        Duration::from_secs(300),
        tokio::task::spawn_blocking(move || run_script("tabs", &cfg, &log)),
    )
    .await
    .map_err(|_| anyhow!("the browser script took more than 300 s"))???;
    drop(server);
    Ok(out)
}

/// "N tabs: S stream(s)" for each N, and the worst ratio to ceil(sessions / 32).
fn fill_row(out: &Value, row: &mut Row) {
    let runs = out["runs"].as_array().cloned().unwrap_or_default();
    let mut parts = Vec::new();
    let mut worst: Option<f64> = None;
    for r in &runs {
        let (Some(n), Some(sessions), Some(streams)) = (
            r["tabs"].as_u64(),
            r["sessions"].as_u64(),
            r["streams"].as_u64(),
        ) else {
            continue;
        };
        let later = r["streams_1s_later"].as_u64().unwrap_or(streams);
        let mut cell = format!("{n} tab{}: {streams} stream{}", plural(n), plural(streams));
        if later != streams {
            cell.push_str(&format!(" ({later} a second later)"));
        }
        if let Some(ms) = r["all_live_ms"].as_u64() {
            cell.push_str(&format!(
                ", all live {} ms after the first opened",
                crate::stats::ms(ms.saturating_mul(1000))
            ));
        }
        parts.push(cell);
        let ratio = streams.max(later) as f64 / sessions.div_ceil(PER_STREAM) as f64;
        worst = Some(worst.map_or(ratio, |w: f64| w.max(ratio)));
    }
    if parts.is_empty() {
        row.ours = format!("no runs: {out}");
        return;
    }
    row.ours = parts.join("; ");
    if let Some(b) = out["browser"].as_str() {
        row.ours.push_str(&format!(" (Chromium {b}, headless)"));
    }
    if let Some(w) = worst {
        row.ratio = format!("{w:.2}× target (worst N)");
    }
}

fn plural(n: u64) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_row_names_each_n_and_the_worst_ratio() {
        let out = serde_json::json!({"runs": [
            {"tabs": 1, "sessions": 1, "streams": 1, "streams_1s_later": 1, "all_live_ms": 40},
            {"tabs": 6, "sessions": 6, "streams": 2, "streams_1s_later": 1, "all_live_ms": 300},
        ]});
        let mut row = Row::new("x", "y");
        fill_row(&out, &mut row);
        assert!(
            row.ours.starts_with("1 tab: 1 stream, all live"),
            "{}",
            row.ours
        );
        assert!(
            row.ours.contains("6 tabs: 2 streams (1 a second later)"),
            "{}",
            row.ours
        );
        assert_eq!(row.ratio, "2.00× target (worst N)");
    }
}
