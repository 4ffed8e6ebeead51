//! Child processes the bench starts (the server, its peers, redis): spawning, learning their
//! address, reading their memory, and making sure none outlives the bench.
//!
//! Every child is registered by pid. Dropping its [`Proc`] kills it (also while unwinding from
//! an error or a panic), and `main` kills whatever is still registered on Ctrl-C or SIGTERM.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};

static LIVE: Mutex<Vec<u32>> = Mutex::new(Vec::new());

fn live() -> std::sync::MutexGuard<'static, Vec<u32>> {
    LIVE.lock().unwrap_or_else(|p| p.into_inner())
}

/// Kills every child still running (used by the signal handler before exiting).
pub fn kill_all() {
    let pids: Vec<u32> = live().drain(..).collect();
    for pid in pids {
        // SIGKILL by pid through kill(1): std offers no signal-by-pid, and unsafe code is
        // forbidden in this workspace.
        let _ = Command::new("kill")
            .args(["-9", &pid.to_string()])
            .stderr(Stdio::null())
            .status();
    }
}

/// A running child. Killed on drop.
pub struct Proc {
    pub url: String,
    child: Option<Child>,
    pid: u32,
}

impl Proc {
    /// Resident memory of the process, in KiB (VmRSS of /proc/PID/status).
    pub fn rss_kib(&self) -> Result<u64> {
        rss_kib(self.pid)
    }

    /// CPU seconds the process has used so far.
    pub fn cpu_secs(&self) -> f64 {
        process_cpu_secs(self.pid)
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
            unregister(self.pid);
        }
    }
}

fn unregister(pid: u32) {
    live().retain(|p| *p != pid);
}

pub fn rss_kib(pid: u32) -> Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("cannot read /proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| anyhow!("no VmRSS in /proc/{pid}/status"))
}

/// CPU seconds (user + system) used so far by this process's threads whose name starts with
/// `name` (Linux truncates thread names to 15 bytes), or by the calling thread for `None`.
pub fn thread_cpu_secs(name: Option<&str>) -> f64 {
    let ticks = |stat: &str| -> f64 {
        // Fields after the ")" that ends the command name: utime is the 12th, stime the 13th.
        stat.rsplit_once(')')
            .map(|(_, rest)| {
                let f: Vec<&str> = rest.split_whitespace().collect();
                let t = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
                t(11) + t(12)
            })
            .unwrap_or(0.0)
    };
    // Linux reports these in USER_HZ, which is 100 on every mainstream configuration.
    const USER_HZ: f64 = 100.0;
    let Some(name) = name else {
        return std::fs::read_to_string("/proc/thread-self/stat")
            .map(|s| ticks(&s) / USER_HZ)
            .unwrap_or(0.0);
    };
    let mut total = 0.0;
    if let Ok(dir) = std::fs::read_dir("/proc/self/task") {
        for e in dir.flatten() {
            let p = e.path();
            let comm = std::fs::read_to_string(p.join("comm")).unwrap_or_default();
            if name.starts_with(comm.trim()) || comm.trim().starts_with(name) {
                total += std::fs::read_to_string(p.join("stat"))
                    .map(|s| ticks(&s))
                    .unwrap_or(0.0);
            }
        }
    }
    total / USER_HZ
}

/// CPU seconds (user + system) used so far by process `pid`.
fn process_cpu_secs(pid: u32) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            let (_, rest) = stat.rsplit_once(')')?;
            let f: Vec<&str> = rest.split_whitespace().collect();
            let t = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
            Some((t(11) + t(12)) / 100.0)
        })
        .unwrap_or(0.0)
}

/// Starts `cmd` and waits for a stdout line containing `ready` (`http://` for the servers, which
/// print their address); the URL is taken from that line, or is `fixed_url` when given. Its
/// stderr and the rest of its stdout go to `log`.
pub fn spawn(
    name: &str,
    mut cmd: Command,
    log: &Path,
    ready: &'static str,
    fixed_url: Option<String>,
) -> Result<Proc> {
    let log_file = std::fs::File::create(log)
        .with_context(|| format!("cannot create log file {}", log.display()))?;
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::from(log_file.try_clone()?))
        .stdin(Stdio::null())
        .spawn()
        .with_context(|| format!("cannot start {name}"))?;
    let pid = child.id();
    live().push(pid);
    let mut proc = Proc {
        url: String::new(),
        child: None,
        pid,
    };
    let stdout = child
        .stdout
        .take()
        .ok_or_else(|| anyhow!("{name}: no stdout"))?;
    proc.child = Some(child);
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    // Reads stdout on a thread: the first URL line is handed over, the rest is copied to the log
    // so a chatty child never blocks on a full pipe.
    std::thread::spawn(move || {
        let mut reader = BufReader::new(stdout);
        let mut log = log_file;
        let mut sent = false;
        let mut line = String::new();
        loop {
            line.clear();
            match reader.read_line(&mut line) {
                Ok(0) | Err(_) => break,
                Ok(_) => {
                    let _ = log.write_all(line.as_bytes());
                    if !sent && line.contains(ready) {
                        let _ = tx.send(line.clone());
                        sent = true;
                    }
                }
            }
        }
    });
    let line = rx.recv_timeout(Duration::from_secs(30)).map_err(|_| {
        anyhow!(
            "{name} did not say where it listens (see {})",
            log.display()
        )
    })?;
    proc.url = match fixed_url {
        Some(u) => u,
        None => {
            let start = line
                .find("http://")
                .or_else(|| line.find("https://"))
                .ok_or_else(|| anyhow!("{name}: no URL in {line:?}"))?;
            line[start..]
                .split_whitespace()
                .next()
                .unwrap_or("")
                .trim_end_matches('/')
                .to_string()
        }
    };
    Ok(proc)
}

/// A TCP port free right now (for programs that cannot report the port they picked).
pub fn free_port() -> Result<u16> {
    let l = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(l.local_addr()?.port())
}

/// The workspace root (this crate lives in `bench/`).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."))
}

pub fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("target"))
}

/// `target/bench`, created if needed: results, logs, installed peers and scratch databases.
pub fn bench_dir() -> Result<PathBuf> {
    let d = target_dir().join("bench");
    std::fs::create_dir_all(d.join("logs"))?;
    std::fs::create_dir_all(d.join("tmp"))?;
    Ok(d)
}

/// A scratch folder on the same disk as the workspace (not a tmpfs: fsync must cost what it
/// costs in production).
pub fn scratch_dir(prefix: &str) -> Result<tempfile::TempDir> {
    Ok(tempfile::Builder::new()
        .prefix(prefix)
        .tempdir_in(bench_dir()?.join("tmp"))?)
}

/// The release `turnstream` binary, built first (a no-op when it is up to date) together with
/// the bench's `conn-parts` (figure 3 starts it), or the binary named by
/// `TURNSTREAM_BENCH_SERVER` (to measure a patched server side by side, unbuilt).
pub fn turnstream_binary() -> Result<PathBuf> {
    if let Some(bin) = std::env::var_os("TURNSTREAM_BENCH_SERVER") {
        let bin = PathBuf::from(bin);
        if !bin.exists() {
            bail!("TURNSTREAM_BENCH_SERVER={} does not exist", bin.display());
        }
        return Ok(bin);
    }
    let status = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args([
            "build",
            "--release",
            "-q",
            "-p",
            "turnstream-server",
            "-p",
            "turnstream-bench",
            "--bin",
            "turnstream",
            "--bin",
            "conn-parts",
        ])
        .current_dir(workspace_root())
        .status()
        .context("cannot run cargo to build the server")?;
    if !status.success() {
        bail!("building turnstream-server failed");
    }
    let bin = target_dir().join("release").join("turnstream");
    if !bin.exists() {
        bail!("{} is missing after the build", bin.display());
    }
    Ok(bin)
}

/// Raises this process's open-file limit to its hard limit (children inherit it), and returns
/// the soft limit now in force.
pub fn raise_fd_limit() -> u64 {
    // As root the hard limit itself may go up to the kernel's `nr_open` (figure 8 holds 100,000
    // sockets on each side); elsewhere this fails and the soft limit goes up to the hard one.
    if let Some(max) = std::fs::read_to_string("/proc/sys/fs/nr_open")
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
    {
        let _ = rlimit::setrlimit(rlimit::Resource::NOFILE, max, max);
    }
    match rlimit::increase_nofile_limit(u64::MAX) {
        Ok(n) => n,
        Err(_) => rlimit::getrlimit(rlimit::Resource::NOFILE)
            .map(|(soft, _)| soft)
            .unwrap_or(1024),
    }
}
