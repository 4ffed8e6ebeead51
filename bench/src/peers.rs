//! Installing the peers the bench compares against, each from its own registry, idempotently:
//! `durable-streams` (crates.io, `cargo install` into `target/bench/tools`), Redis (Debian) and
//! `resumable-stream` (npm, into `bench/peers/node_modules`).

use std::path::PathBuf;
use std::process::{Command, Stdio};

use anyhow::{bail, Context, Result};

use crate::procs::{bench_dir, workspace_root};

pub const DURABLE_STREAMS_VERSION: &str = "0.1.5";

/// Where a peer stands after setup: ready, or why it cannot be measured here.
#[derive(Debug, Clone)]
pub enum Avail {
    Ready(PathBuf),
    Missing(String),
}

fn have(cmd: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {cmd}")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

/// `durable-streams-server`, built from crates.io (a few minutes once; then a file check).
pub fn durable_streams() -> Avail {
    match install_durable_streams() {
        Ok(p) => Avail::Ready(p),
        Err(e) => Avail::Missing(format!(
            "not supported here: cargo install durable-streams failed: {e:#}"
        )),
    }
}

fn install_durable_streams() -> Result<PathBuf> {
    let root = bench_dir()?.join("tools");
    let bin = root.join("bin").join("durable-streams-server");
    if bin.exists() {
        return Ok(bin);
    }
    eprintln!(
        "installing durable-streams {DURABLE_STREAMS_VERSION} from crates.io (a few minutes, once)"
    );
    let status = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args([
            "install",
            "durable-streams",
            "--version",
            DURABLE_STREAMS_VERSION,
            "--locked",
            "--root",
        ])
        .arg(&root)
        .status()
        .context("cannot run cargo install")?;
    if !status.success() || !bin.exists() {
        bail!("cargo install exited with {status}");
    }
    Ok(bin)
}

/// Redis (Debian's `redis-server`) and the Node harness with `resumable-stream`.
pub fn resumable_stream() -> Avail {
    match install_resumable() {
        Ok(p) => Avail::Ready(p),
        Err(e) => Avail::Missing(format!("not supported here: {e:#}")),
    }
}

fn install_resumable() -> Result<PathBuf> {
    if !have("node") || !have("npm") {
        bail!("node and npm are not installed");
    }
    if !have("redis-server") {
        eprintln!("installing redis-server (Debian package)");
        let sudo = if is_root() { "" } else { "sudo " };
        let status = Command::new("sh")
            .args([
                "-c",
                &format!("{sudo}apt-get update -qq && {sudo}apt-get install -y -qq redis-server >/dev/null"),
            ])
            .status()
            .context("cannot run apt-get")?;
        if !status.success() || !have("redis-server") {
            bail!("apt-get install redis-server failed");
        }
    }
    let dir = workspace_root().join("bench").join("peers");
    if !dir.join("node_modules").join("resumable-stream").exists() {
        eprintln!("installing resumable-stream from npm");
        let status = Command::new("npm")
            .args(["ci", "--no-audit", "--no-fund", "--loglevel=error"])
            .current_dir(&dir)
            .status()
            .context("cannot run npm")?;
        if !status.success() {
            bail!("npm ci in bench/peers failed");
        }
    }
    Ok(dir.join("resumable.mjs"))
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}
