//! turnstream's server: a durable, ordered journal of everything a browser shows during a chat
//! turn, a turn runner that drives agents, and one SSE gateway that delivers the journal.
//!
//! # Layout
//! - [`journal`]: storage (history, event journal, turns projection, floors) in SQLite or
//!   PostgreSQL behind one seam (`journal::sql`), the writer thread with group commit, stream
//!   reads, recovery and retention. Knows nothing of HTTP or SSE: it hands what committed to a
//!   [`journal::FanOut`].
//! - [`live`]: the fan-out the server uses: encodes each committed event once and hands it to
//!   the [`hub`], which delivers it to subscribers (with lag detection) and keeps the replay tail.
//! - [`frames`]: SSE framing, in one place (live, replay and the stream's own events).
//! - [`agent`]: the `Agent` trait and the built-in agents (`demo`, `openai`).
//! - [`runner`]: per-session FIFO turn scheduling, coalescing, cancel and shutdown.
//! - [`worker`] and [`lease`]: turns run by worker processes (`--agent worker`) under leases.
//! - [`cluster`]: turns run under leases by servers sharing a PostgreSQL journal.
//! - [`gateway`]: the HTTP routes and the SSE stream.
//! - [`config`]: command-line and environment configuration.
//! - [`serve`] and [`edge`]: the accept loop and its connection-level limits (deadlines for
//!   request headers and bodies, connections per address, JSON for hyper's own answers).
//! - [`tls`]: HTTPS with `--tls-cert`/`--tls-key`, HTTP/2 and HTTP/1.1 by ALPN.
//! - [`logging`]: text or JSON log lines, and the per-request and per-turn targets.

pub mod agent;
pub mod auth;
pub mod cluster;
pub mod config;
pub mod edge;
pub mod error;
pub mod frames;
pub mod gateway;
pub mod hub;
pub mod journal;
pub mod lease;
pub mod live;
pub mod logging;
pub mod metrics;
pub mod runner;
pub mod serve;
pub mod slots;
pub mod tls;
pub mod worker;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, TcpSocket};
use tokio_util::sync::CancellationToken;

use crate::agent::{demo::DemoAgent, openai::OpenAiAgent, worker::WorkerAgent, Agent};
use crate::config::{AgentKind, Config};
use crate::error::Result;
use crate::journal::Journal;
use crate::runner::{Runner, RunnerConfig};

/// Locks a mutex, taking the data even if a panic poisoned it: every lock in this crate guards
/// state that single inserts and removes keep consistent, so a panic elsewhere leaves it usable.
pub(crate) fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Listen backlog: a reconnect storm must not overflow it (each dropped SYN costs a client 1 s).
pub const LISTEN_BACKLOG: u32 = 4096;

/// Binds `addr` with a deep listen backlog.
pub fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(LISTEN_BACKLOG)
}

/// How long shutdown waits for connections to close once their streams have ended.
pub const CLOSE_WAIT: Duration = Duration::from_secs(5);

/// The agent a configuration asks for.
pub fn agent_from_config(config: &Config) -> Arc<dyn Agent> {
    match config.agent {
        AgentKind::Demo => Arc::new(DemoAgent {
            delay: Duration::from_millis(config.demo_delay_ms),
        }),
        AgentKind::Openai => Arc::new(OpenAiAgent::with_options(
            config.openai_base_url.clone(),
            config.openai_model.clone(),
            std::env::var("OPENAI_API_KEY").ok(),
            config.openai_options(),
        )),
        AgentKind::Worker => Arc::new(WorkerAgent),
    }
}

/// Runs the server on `listener` until `shutdown` resolves, then shuts down gracefully: stop
/// accepting, let running turns finish for the grace period (streams keep delivering them), end
/// the rest `interrupted`, close the streams, and flush the journal.
pub async fn run(
    config: Config,
    agent: Arc<dyn Agent>,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<()> {
    run_with_ready(config, agent, listener, shutdown, || {}).await
}

/// [`run`], calling `ready` once the server can serve: the journal is open, turns run and the
/// listener accepts. Every error `run` returns comes before that (the binary prints its
/// `turnstream listening on ...` line in `ready`, so a script waiting for it is never told a
/// server is up that then exits).
pub async fn run_with_ready(
    config: Config,
    agent: Arc<dyn Agent>,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
    ready: impl FnOnce(),
) -> Result<()> {
    let auth = config
        .authenticator()
        .map_err(|e| error::Error::Config(e.to_string()))?;
    let tls = config
        .tls()
        .map_err(|e| error::Error::Config(e.to_string()))?;
    let metrics = Arc::new(metrics::Metrics::default());
    let hub = hub::Hub::with_metrics(metrics.clone());
    hub.set_tail_budget(config.replay_cache_mb.saturating_mul(1024 * 1024));
    let journal = Journal::open_database(
        &config.database(),
        metrics,
        journal::JournalOptions {
            busy_timeout: config.busy_timeout(),
            listen_url: config.database_listen_url.clone(),
        },
        live::LiveFeed::new(hub.clone()),
    )
    .await?;
    let runner_config = RunnerConfig {
        coalesce: config.coalesce(),
        max_concurrent_turns: config.max_concurrent_turns,
        max_turns_per_client: config.turns_per_client(),
        turn_lease: Duration::from_secs(config.worker_lease_secs),
    };
    let runner = match config.agent {
        AgentKind::Worker => Runner::for_workers(
            journal.clone(),
            agent,
            runner_config,
            Duration::from_secs(config.worker_lease_secs),
        ),
        _ => Runner::new(journal.clone(), agent, runner_config),
    };
    runner.start().await?;
    let state = gateway::AppState {
        journal: journal.clone(),
        hub: hub.clone(),
        runner: runner.clone(),
        limits: Arc::new(gateway::Limits {
            heartbeat: config.heartbeat(),
            max_streams: config.max_streams,
            max_active_turns: config.max_active_turns,
            max_streams_per_client: config.max_streams_per_client,
        }),
        auth: Arc::new(auth),
        origins: Arc::new(gateway::OriginPolicy::new(&config.cors_origins)),
        rate: Arc::new(gateway::RateLimiter::new(config.messages_per_minute)),
        client_streams: Arc::new(gateway::StreamQuota::new(config.max_streams_per_client)),
    };
    let app = gateway::router(state, config.www.as_deref(), &config.cors_origins);

    let cleanup = tokio::spawn(cleanup_loop(
        journal.clone(),
        Duration::from_secs(config.retention_secs),
        Duration::from_secs(config.cleanup_interval_secs.max(1)),
    ));

    let stop_accepting = CancellationToken::new();
    let server = match tls {
        Some(tls) => tokio::spawn(serve::serve_tls(
            listener,
            app,
            config.conn_limits(),
            tls,
            stop_accepting.clone(),
        )),
        None => tokio::spawn(serve::serve(
            listener,
            app,
            config.conn_limits(),
            stop_accepting.clone(),
        )),
    };
    ready();

    shutdown.await;
    tracing::info!("shutting down: no new connections or messages");
    stop_accepting.cancel();
    runner
        .shutdown(Duration::from_secs(config.shutdown_grace_secs))
        .await;
    // Streams send what was committed and queued for them, then end.
    hub.close();
    cleanup.abort();
    // Streams end now; a client that stopped reading could hold its connection open forever.
    match tokio::time::timeout(CLOSE_WAIT, server).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => tracing::error!(error = %e, "server task failed"),
        Err(_) => tracing::warn!(
            "some connections were still open {} s after their streams ended; not waiting for them",
            CLOSE_WAIT.as_secs()
        ),
    }
    journal.close();
    tracing::info!("stopped");
    Ok(())
}

async fn cleanup_loop(journal: Journal, retention: Duration, every: Duration) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let cutoff = journal::now_ms() - retention.as_millis() as i64;
        match journal.cleanup(cutoff).await {
            Ok(0) => {}
            Ok(n) => tracing::debug!(deleted = n, "retention cleanup"),
            Err(e) => tracing::warn!(error = %e, "retention cleanup failed"),
        }
    }
}
