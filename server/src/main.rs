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
    // A certificate, key or auth setting that cannot be used stops the server here, before
    // anything else (`run` loads them again for itself; it is also the embedders' entry point).
    let scheme = match config.tls().context("cannot serve HTTPS")? {
        Some(_) => "https",
        None => "http",
    };
    config
        .authenticator()
        .context("the auth settings cannot be used")?;
    let listener = turnstream_server::serve::bind(config.listen)
        .with_context(|| format!("cannot listen on {}", config.listen))?;
    let addr = listener.local_addr()?;
    let db = config.database();
    tracing::info!(%addr, %scheme, %db, agent = ?config.agent, "starting");
    let agent = config.builtin_agent().map(|a| a.build());
    // One machine-readable line on stdout, once the server can serve (the journal open, turns
    // running), so scripts and tests learn the port (with --listen :0) and that it is up.
    let ready = || {
        let mut out = std::io::stdout();
        let _ = writeln!(out, "turnstream listening on {scheme}://{addr}");
        let _ = out.flush();
        tracing::info!(%addr, %scheme, "serving");
    };
    // Every error here comes before the server could serve: the journal's (the database's or
    // a pooler's own words, in the causes) or the agent's. The URL is shown without password.
    turnstream_server::run_configured(config, agent, listener, shutdown_signal(), ready)
        .await
        .with_context(|| format!("cannot start on the journal at {db}"))?;
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
