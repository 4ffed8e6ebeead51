//! The `turnstream` binary: parses configuration, binds, and runs the server until SIGTERM/Ctrl-C.

use std::io::Write;

use anyhow::Context;
use clap::Parser;
use turnstream_server::auth::Scope;
use turnstream_server::config::{Cli, Command, TokenArgs, TokenScope};
use turnstream_server::logging::LogFormat;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let log_format = match &cli.command {
        Command::Serve(config) => config.log_format,
        Command::Token(_) => LogFormat::Text,
    };
    turnstream_server::logging::init(log_format);
    let config = match cli.command {
        Command::Serve(config) => *config,
        Command::Token(args) => return print_token(args),
    };
    // Every connection is a descriptor: take all the system allows before accepting any.
    turnstream_server::edge::nofile::raise_and_log();
    // Keys that cannot be read stop the server in `run`, with the error; no warning here.
    let auth_enabled = config.authenticator().map_or(true, |auth| auth.enabled());
    if let Some(warning) =
        turnstream_server::edge::open_access::warning(config.listen, auth_enabled)
    {
        tracing::warn!("{warning}");
    }
    // A certificate or key that cannot be served stops the server here, before it says it is
    // listening (`run` loads them again for itself; it is also the embedders' entry point).
    let scheme = match config.tls().context("cannot serve HTTPS")? {
        Some(_) => "https",
        None => "http",
    };
    let listener = turnstream_server::serve::bind(config.listen)
        .with_context(|| format!("cannot listen on {}", config.listen))?;
    let addr = listener.local_addr()?;
    // One machine-readable line on stdout, so scripts and tests learn the port (with --listen :0).
    let mut out = std::io::stdout();
    writeln!(out, "turnstream listening on {scheme}://{addr}")?;
    out.flush()?;
    tracing::info!(%addr, %scheme, db = %config.database(), agent = ?config.agent, "serving");
    let agent = config.builtin_agent().map(|a| a.build());
    turnstream_server::run_configured(config, agent, listener, shutdown_signal())
        .await
        .context("server failed")?;
    Ok(())
}

/// `turnstream token`: prints a signed token on stdout.
fn print_token(args: TokenArgs) -> anyhow::Result<()> {
    let secret = match (&args.secret_file, &args.secret) {
        (Some(path), _) => turnstream_server::auth::read_secret_file(path)?,
        (None, Some(s)) => s.clone(),
        (None, None) => {
            anyhow::bail!("give the HS256 secret with --secret-file PATH (or --secret)")
        }
    };
    if secret.len() < turnstream_server::auth::MIN_SECRET_BYTES {
        anyhow::bail!(turnstream_server::auth::KeyError::ShortSecret(secret.len()));
    }
    for s in &args.sessions {
        if !turnstream_server::auth::is_session_pattern(s) {
            anyhow::bail!("--session {s:?} is neither a session id nor a prefix ending in `*`");
        }
    }
    let scopes: Vec<Scope> = args
        .scopes
        .iter()
        .map(|s| match s {
            TokenScope::Read => Scope::Read,
            TokenScope::Write => Scope::Write,
            TokenScope::Cancel => Scope::Cancel,
        })
        .collect();
    let token = turnstream_server::auth::mint(
        &secret,
        &args.sub,
        &args.sessions,
        (!scopes.is_empty()).then_some(scopes.as_slice()),
        args.ttl,
        std::time::SystemTime::now(),
    )?;
    println!("{token}");
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
