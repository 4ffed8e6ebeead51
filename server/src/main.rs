//! The `turnstream` binary: parses configuration, binds, and runs the server until SIGTERM/Ctrl-C.

use std::io::Write;

use anyhow::Context;
use clap::Parser;
use turnstream_server::config::{Cli, Command};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "info,tower_http=warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let Command::Serve(config) = cli.command;
    // Every connection is a descriptor: take all the system allows before accepting any.
    turnstream_server::edge::nofile::raise_and_log();
    if let Some(warning) = turnstream_server::edge::open_access::warning(
        config.listen,
        turnstream_server::edge::open_access::auth_configured(&config),
    ) {
        tracing::warn!("{warning}");
    }
    let listener = turnstream_server::bind(config.listen)
        .with_context(|| format!("cannot listen on {}", config.listen))?;
    let addr = listener.local_addr()?;
    // One machine-readable line on stdout, so scripts and tests learn the port (with --listen :0).
    let mut out = std::io::stdout();
    writeln!(out, "turnstream listening on http://{addr}")?;
    out.flush()?;
    tracing::info!(%addr, db = %config.db.display(), agent = ?config.agent, "serving");
    let agent = turnstream_server::agent_from_config(&config);
    turnstream_server::run(config, agent, listener, shutdown_signal())
        .await
        .context("server failed")?;
    Ok(())
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
}
