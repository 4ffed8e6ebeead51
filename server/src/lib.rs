//! turnstream's server: a durable, ordered journal of everything a browser shows during a chat
//! turn, turn execution that drives agents (or hands turns to worker processes), and one SSE
//! gateway that delivers the journal.
//!
//! # Layout
//! The crate root only assembles ([`run`], [`run_configured`]); each module below names only
//! modules it depends on, with no import circle (`tests/layout.rs` checks it).
//! - [`gateway`]: the HTTP routes, access control and the SSE stream. Reads and appends through
//!   the journal's and [`turns`]'s APIs only.
//! - [`turns`]: turn execution in one [`turns::Mode`] (this server's agent on one node, under
//!   leases on a shared PostgreSQL journal, or worker processes): the per-session FIFO loop,
//!   emitting through one delta coalescer, lease renewal and the expiry sweep, worker dispatch,
//!   fair slots, turns that wait for input and continue (and the expiry of requests), cancel and
//!   shutdown.
//! - [`agent`]: the `Agent` trait and the built-in agents (`demo`, `openai`). Agents know
//!   nothing of storage.
//! - [`journal`]: storage (history and its branches, event journal, turns projection, floors,
//!   leased turns, requests for input and their answers) in SQLite or PostgreSQL behind one seam:
//!   each query once against `journal::sql`, and what differs per database (opening,
//!   transaction control, reads, delivering commits, exclusive locks) behind one
//!   `journal::engine::Engine` each; the writer thread with group commit,
//!   stream reads, recovery and retention. Knows nothing of HTTP or SSE: it hands what committed
//!   to a [`journal::FanOut`].
//! - [`live`]: the live path, one folder: the fan-out the server uses ([`live::LiveFeed`])
//!   encodes each committed event once ([`live::encode`], SSE framing in one place, for live,
//!   replay and the stream's own events) and hands it to the [`live::hub`], which delivers it to
//!   subscribers (with lag detection) and keeps the replay tail: a [`live::Frame`] each, into
//!   each subscriber's [`live::inbox`].
//! - [`auth`]: tokens and service keys; [`metrics`]: the Prometheus counters.
//! - [`config`]: command-line and environment configuration, mapped to each component's options.
//! - [`serve`] and [`edge`]: binding, the accept loop and its connection-level limits (deadlines
//!   for request headers and bodies, connections per address, JSON for hyper's own answers), and
//!   connections opened for an event stream, served without hyper's buffers.
//! - [`tls`]: HTTPS with `--tls-cert`/`--tls-key`, HTTP/2 and HTTP/1.1 by ALPN.
//! - [`logging`]: text or JSON log lines, and the per-request and per-turn targets.
//! - Leaves: [`clock`] (the time the journal stamps, moved by hand in tests), `backoff` (the one
//!   doubling wait), `ids` (the one random id generator), `mutex` (locking through poison).

pub mod agent;
pub mod auth;
mod backoff;
pub mod clock;
pub mod config;
pub mod edge;
pub mod error;
pub mod gateway;
mod ids;
pub mod journal;
pub mod live;
pub mod logging;
pub mod metrics;
mod mutex;
pub mod serve;
pub mod tls;
pub mod turns;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::agent::Agent;
use crate::config::{AgentKind, Config};
use crate::error::Result;
use crate::journal::Journal;
use crate::turns::{Mode, Turns, TurnsConfig};

/// How long shutdown waits for connections to close once their streams have ended.
pub const CLOSE_WAIT: Duration = Duration::from_secs(5);

/// Runs the server with `agent` running its turns ([`run_configured`] with an agent of one's
/// own, where the binary builds [`config::Config::builtin_agent`]); with `--agent worker` in `config`, worker processes run them and `agent` is not used.
pub async fn run(
    config: Config,
    agent: Arc<dyn Agent>,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<()> {
    let agent = (config.agent != AgentKind::Worker).then_some(agent);
    run_configured(config, agent, listener, shutdown, || {}).await
}

/// Runs the server on `listener` until `shutdown` resolves, its turns run by `agent` (`None`:
/// by worker processes), then shuts down gracefully: stop accepting, let running turns finish
/// for the grace period (streams keep delivering them), end the rest `interrupted`, close the
/// streams, and flush the journal. `ready` is called once the server can serve: the journal is
/// open, turns run and the listener accepts. Every error this returns comes before that (the
/// binary prints its `turnstream listening on ...` line in `ready`, so a script waiting for it
/// is never told a server is up that then exits).
pub async fn run_configured(
    config: Config,
    agent: Option<Arc<dyn Agent>>,
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
    let hub = live::Hub::with_metrics(metrics.clone());
    hub.set_tail_budget(config.replay_cache_mb.saturating_mul(1024 * 1024));
    let journal = Journal::open_database(
        &config.database(),
        metrics,
        journal::JournalOptions {
            busy_timeout: config.busy_timeout(),
            listen_url: config.database_listen_url.clone(),
            input_timeout: Duration::from_secs(config.input_timeout_secs),
            ..Default::default()
        },
        live::LiveFeed::new(hub.clone()),
    )
    .await?;
    let mode = Mode::new(
        agent,
        journal.is_shared(),
        Duration::from_secs(config.worker_lease_secs),
    );
    let turns = Turns::new(
        journal.clone(),
        mode,
        TurnsConfig {
            coalesce: config.coalesce(),
            max_concurrent_turns: config.max_concurrent_turns,
            max_turns_per_client: config.turns_per_client(),
        },
    );
    turns.start().await?;
    let state = gateway::AppState {
        journal: journal.clone(),
        hub: hub.clone(),
        turns: turns.clone(),
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

    let cleanup = tokio::spawn(journal::cleanup_loop(
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
    turns
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
