//! `turnstream-bench`: starts what it measures (the `turnstream` binary, an in-memory baseline,
//! and the peers), runs the figures of docs/performance.md, and prints one markdown table, also
//! written to `target/bench/results.md`. Benchmarks, not tests: nothing here asserts on time.

mod append;
mod compare;
mod fanout;
mod h2client;
mod idle;
mod lineup;
mod peers;
mod pg;
mod procs;
mod prom;
mod rawhttp;
mod refresh;
mod replay;
mod report;
mod ring;
mod scale;
mod sse;
mod stats;
mod systems;
mod table;
mod tabs;
mod upstream;

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Result;
use clap::{Args, Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(name = "turnstream-bench", about = "turnstream's benchmark suite")]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Every figure.
    All(Opts),
    /// Figure 1: durable append throughput and enqueue-to-durable latency.
    Append(Opts),
    /// Figure 2: publish-to-browser latency at 1, 100, 1,000 subscribers and 1,000 sessions.
    Fanout(Opts),
    /// Figure 3: idle connections' memory and a reconnect burst.
    Idle(Opts),
    /// Figure 4: reconnect replay of 1,000 and 10,000 missed events.
    Replay(Opts),
    /// Figure 5: refresh of the demo page mid-turn in headless Chromium, and the page's code size.
    Refresh(Opts),
    /// Figure 6: side by side with the in-memory baseline and the peers on one chat workload.
    Compare(Opts),
    /// Figure 7: streams the server holds for N tabs of one origin in headless Chromium.
    Tabs(Opts),
    /// Figure 8: 100,000 idle streams on one node (HTTP/1.1, and HTTP/2 + TLS at 100 streams per
    /// connection): memory per stream, time to open them, delivery of a message to 1,000 of them.
    Scale(Opts),
    /// The in-memory ring-buffer baseline server (started by the bench itself).
    #[command(hide = true)]
    RingServer {
        #[arg(long, default_value = "127.0.0.1:0")]
        listen: SocketAddr,
        #[arg(long, default_value_t = 2000)]
        capacity: usize,
    },
}

#[derive(Debug, Clone, Args)]
pub struct Opts {
    /// Small sizes for a smoke run (CI): finishes in well under a minute; peers are skipped.
    #[arg(long)]
    pub quick: bool,
    /// Skip durable-streams and resumable-stream (no install, no runs).
    #[arg(long, conflicts_with = "peers")]
    pub no_peers: bool,
    /// Run the peers even with --quick (installing them if needed).
    #[arg(long)]
    pub peers: bool,
    /// Where the table is written (default: target/bench/results.md).
    #[arg(long)]
    pub out: Option<PathBuf>,
}

/// Which figures a command runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Figure {
    Append,
    Fanout,
    Idle,
    Replay,
    Refresh,
    Compare,
    Tabs,
    Scale,
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move {
        match cli.command {
            Cmd::RingServer { listen, capacity } => ring::serve(listen, capacity).await,
            Cmd::All(o) => {
                run(
                    o,
                    &[
                        Figure::Append,
                        Figure::Fanout,
                        Figure::Idle,
                        Figure::Replay,
                        Figure::Refresh,
                        Figure::Compare,
                        Figure::Tabs,
                        Figure::Scale,
                    ],
                )
                .await
            }
            Cmd::Append(o) => run(o, &[Figure::Append]).await,
            Cmd::Fanout(o) => run(o, &[Figure::Fanout]).await,
            Cmd::Idle(o) => run(o, &[Figure::Idle]).await,
            Cmd::Replay(o) => run(o, &[Figure::Replay]).await,
            Cmd::Refresh(o) => run(o, &[Figure::Refresh]).await,
            Cmd::Compare(o) => run(o, &[Figure::Compare]).await,
            Cmd::Tabs(o) => run(o, &[Figure::Tabs]).await,
            Cmd::Scale(o) => scale_figure(o).await,
        }
    })
}

async fn run(opts: Opts, figures: &[Figure]) -> Result<()> {
    // Children must not outlive an interrupted bench.
    tokio::spawn(async {
        let term = async {
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(mut s) => {
                    s.recv().await;
                }
                Err(_) => std::future::pending::<()>().await,
            }
        };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term => {}
        }
        procs::kill_all();
        std::process::exit(130);
    });
    let fds = procs::raise_fd_limit();
    let result = report::run_figures(&opts, figures, fds).await;
    procs::kill_all();
    result
}

/// Figure 8 on its own: the streams one node holds (its own table, see docs/performance.md).
async fn scale_figure(opts: Opts) -> Result<()> {
    let fds = procs::raise_fd_limit();
    let sizes = table::Sizes::new(opts.quick);
    let (n, sample) = (sizes.scale_streams, sizes.scale_sample);
    let mut runs = Vec::new();
    for transport in scale::TRANSPORTS {
        runs.push(scale::measure(n, sample, fds, transport).await?);
    }
    let out = scale::table(&mut runs);
    println!("{out}");
    let path = opts
        .out
        .unwrap_or_else(|| PathBuf::from("target/bench/scale.md"));
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(&path, out)?;
    for f in &runs {
        if f.lost > 0 {
            anyhow::bail!(
                "{:?}: {} of {} messages were not delivered",
                f.transport,
                f.lost,
                f.sample
            );
        }
    }
    Ok(())
}
