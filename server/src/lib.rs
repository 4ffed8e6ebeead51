//! turnstream's server: a durable, ordered journal of everything a browser shows during a chat
//! turn, turn execution that drives agents (or hands turns to worker processes), and one SSE
//! gateway that delivers the journal.
//!
//! # Layout
//! The crate root only assembles ([`run`], [`run_configured`], and the [`Server`] builder for
//! what they do not take); each module below names only modules it depends on, with no import
//! circle (`tests/layout.rs` checks it).
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
//! - [`listeners`]: an embedder's listeners ([`Server::listener`]), each handed every commit on a
//!   task of its own, through a bounded queue the writer never waits on; what one missed is
//!   told, and read back from the journal.
//! - [`auth`]: tokens and service keys; [`metrics`]: the Prometheus counters.
//! - [`config`]: command-line and environment configuration, mapped to each component's options.
//! - [`serve`] and [`edge`]: binding, the accept loop and its connection-level limits (deadlines
//!   for request headers and bodies, connections per address, JSON for hyper's own answers), and
//!   connections opened for an event stream, served without hyper's buffers.
//! - [`tls`]: HTTPS with `--tls-cert`/`--tls-key`, HTTP/2 and HTTP/1.1 by ALPN.
//! - [`logging`]: text or JSON log lines, and the per-request and per-turn targets.
//! - Leaves: [`clock`] (the time the journal stamps, moved by hand in tests), `backoff` (the one
//!   doubling wait), `ids` (the one random id generator), `mutex` (locking through poison).
//!
//! # Listeners after commit
//! A program that embeds the server observes every committed event in journal order without
//! opening a stream to itself: [`Server::listener`] registers a [`listeners::Listener`], handed a
//! [`listeners::Batch`] after each commit, never before it, with that commit's events (the
//! journal's own [`journal::Committed`]: id, session, turn, kind and the JSON body the stream
//! sends).
//!
//! - Each listener runs on a task of its own and is handed one batch at a time, in journal order.
//!   The journal's writer never waits for one: it leaves each commit in the listener's bounded
//!   queue ([`listeners::LISTENER_QUEUE`] batches, or [`Server::listener_with_queue`]) without
//!   waiting, and when that queue is full counts the commit's events as missed instead.
//! - A listener that fell behind is told in its next batch: [`listeners::Missed`] says how many
//!   events it was not handed and which (the ids after `after`, up to `through`, all before the
//!   batch's own), and [`listeners::Missed::read`] reads them from the journal
//!   ([`journal::Journal::events_after`]). Every committed event is either handed to a listener
//!   or counted in one `Missed`, exactly once.
//! - A panic in a listener is logged; the server, its writer and the other listeners go on, and
//!   the listener is handed the next batch.
//! - On PostgreSQL, each server's listeners are handed every server's commits (its tail reads
//!   them all).
//! - At shutdown, once the journal has closed, each listener has up to
//!   [`listeners::LISTENER_CLOSE_WAIT`] to handle what was queued for it.
//! - With no listener registered, the writer does what it does without this: the journal's
//!   fan-out is the live feed itself.
//!
//! ```
//! use futures::future::BoxFuture;
//! use turnstream_server::config::Config;
//! use turnstream_server::journal::Committed;
//! use turnstream_server::listeners::{Batch, Listener};
//! use turnstream_server::Server;
//!
//! /// Logs each turn's end, reading from the journal the events it was too slow to be handed.
//! #[derive(Default)]
//! struct TurnEnds {
//!     ended: u64,
//! }
//!
//! impl TurnEnds {
//!     fn log(&mut self, events: &[Committed]) {
//!         for e in events.iter().filter(|e| e.kind == "turn_ended") {
//!             let body: serde_json::Value = serde_json::from_str(&e.data).unwrap_or_default();
//!             self.ended += 1;
//!             tracing::info!(
//!                 session = %e.session_id,
//!                 turn = e.turn_id.as_deref().unwrap_or_default(),
//!                 state = body["state"].as_str().unwrap_or_default(),
//!                 ended = self.ended,
//!                 "turn ended"
//!             );
//!         }
//!     }
//! }
//!
//! impl Listener for TurnEnds {
//!     fn committed(&mut self, batch: Batch) -> BoxFuture<'_, ()> {
//!         Box::pin(async move {
//!             // What it missed came before this batch's events.
//!             if let Some(missed) = &batch.missed {
//!                 match missed.read().await {
//!                     Ok(events) => self.log(&events),
//!                     Err(e) => tracing::warn!(error = %e, missed = missed.count, "cannot read"),
//!                 }
//!             }
//!             self.log(&batch.events);
//!         })
//!     }
//! }
//!
//! async fn serve(
//!     config: Config,
//!     shutdown: impl std::future::Future<Output = ()> + Send + 'static,
//! ) -> turnstream_server::error::Result<()> {
//!     let tcp = turnstream_server::serve::bind(config.listen)?;
//!     Server::builder(config)
//!         .listener(TurnEnds::default())
//!         // An async closure is a listener too.
//!         .listener(|batch: Batch| async move {
//!             for e in batch.events.iter() {
//!                 tracing::debug!(id = e.seq, session = %e.session_id, kind = %e.kind, "committed");
//!             }
//!         })
//!         .run(tcp, shutdown)
//!         .await
//! }
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let dir = tempfile::tempdir()?;
//! # let mut config = Config::defaults();
//! # config.db = dir.path().join("chat.db");
//! # config.listen = "127.0.0.1:0".parse()?;
//! # // Started and stopped at once; tests/listeners.rs exercises what the listeners are handed.
//! # serve(config, async {}).await?;
//! # Ok(())
//! # }
//! ```

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
pub mod listeners;
pub mod live;
pub mod logging;
pub mod metrics;
mod mutex;
pub mod presence;
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
use crate::listeners::{Listener, Listeners};
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
    serve_assembled(config, agent, Vec::new(), listener, shutdown, ready).await
}

/// The server, assembled step by step: its configuration, the agent that runs its turns and the
/// listeners handed every commit; [`Server::run`] then serves it as [`run`] does. See the crate
/// docs' [Listeners after commit](crate#listeners-after-commit).
pub struct Server {
    config: Config,
    /// An agent of one's own; `None`: the built-in agent the configuration names.
    agent: Option<Arc<dyn Agent>>,
    listeners: Vec<listeners::Registered>,
}

impl Server {
    /// A server as `config` describes it, its turns run by the built-in agent `--agent` names
    /// (or, with `--agent worker`, by worker processes), with no listener.
    pub fn builder(config: Config) -> Server {
        Server {
            config,
            agent: None,
            listeners: Vec::new(),
        }
    }

    /// Runs turns with `agent` instead of the built-in one (not with `--agent worker`: worker
    /// processes run them then, as with [`run`]).
    pub fn agent(mut self, agent: Arc<dyn Agent>) -> Server {
        self.agent = Some(agent);
        self
    }

    /// Hands `listener` every event after its commit, in journal order, on a task of its own,
    /// through a queue of [`listeners::LISTENER_QUEUE`] batches.
    pub fn listener(self, listener: impl Listener) -> Server {
        self.listener_with_queue(listener, listeners::LISTENER_QUEUE)
    }

    /// [`Server::listener`] with a queue of `batches` (at least 1): how many commits it may
    /// fall behind by before it is told of events it missed.
    pub fn listener_with_queue(mut self, listener: impl Listener, batches: usize) -> Server {
        self.listeners
            .push(listeners::Registered::new(listener, batches));
        self
    }

    /// Serves on `tcp` until `shutdown` resolves, as [`run_configured`] does; once the journal
    /// has closed, each listener is given up to [`listeners::LISTENER_CLOSE_WAIT`] to handle
    /// what was committed before.
    pub async fn run(
        self,
        tcp: TcpListener,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<()> {
        let agent = match (self.config.agent, self.agent) {
            (AgentKind::Worker, _) => None,
            (_, Some(agent)) => Some(agent),
            (_, None) => self.config.builtin_agent().map(|a| a.build()),
        };
        serve_assembled(self.config, agent, self.listeners, tcp, shutdown, || {}).await
    }
}

/// [`run_configured`], with `registered` listeners.
async fn serve_assembled(
    config: Config,
    agent: Option<Arc<dyn Agent>>,
    registered: Vec<listeners::Registered>,
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
    let (fanout, mut listeners) = Listeners::new(live::LiveFeed::new(hub.clone()), registered);
    let journal = Journal::open_database(
        &config.database(),
        metrics,
        journal::JournalOptions {
            busy_timeout: config.busy_timeout(),
            listen_url: config.database_listen_url.clone(),
            input_timeout: Duration::from_secs(config.input_timeout_secs),
            ..Default::default()
        },
        fanout,
    )
    .await?;
    listeners.start(&journal);
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
    let presence = presence::Presence::start(
        config.presence(),
        Arc::new(presence::cluster::OverJournal(journal.clone())),
        journal.metrics().clone(),
    );
    journal.on_broadcast(presence.clone());
    let state = gateway::AppState {
        presence: presence.clone(),
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
    // Its members leave at once, here and on the other servers.
    presence.shutdown();
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
    listeners.close().await;
    tracing::info!("stopped");
    Ok(())
}
