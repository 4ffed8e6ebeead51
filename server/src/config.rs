//! Configuration: every flag of `turnstream serve`, each also read from `TURNSTREAM_<FLAG>`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, Subcommand, ValueEnum};

#[derive(Debug, Parser)]
#[command(
    name = "turnstream",
    version,
    about = "Durable, resumable realtime streams for AI chat"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve the HTTP API, the SSE stream and (with --www) the demo page.
    Serve(Config),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum AgentKind {
    /// Built-in agent with no network; directives: /echo, /deltas, /sleep, /fail, /bigtool.
    Demo,
    /// Any OpenAI-compatible chat-completions endpoint (key from OPENAI_API_KEY).
    Openai,
}

#[derive(Debug, Clone, clap::Args)]
pub struct Config {
    /// Address to listen on (port 0 picks a free port).
    #[arg(long, env = "TURNSTREAM_LISTEN", default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,
    /// SQLite database file (created with its folder if missing).
    #[arg(
        long,
        env = "TURNSTREAM_DB",
        default_value = "./turnstream-data/turnstream.db"
    )]
    pub db: PathBuf,
    /// Folder of static files served at `/` (the demo page).
    #[arg(long, env = "TURNSTREAM_WWW")]
    pub www: Option<PathBuf>,
    /// Which agent answers messages.
    #[arg(long, env = "TURNSTREAM_AGENT", value_enum, default_value = "demo")]
    pub agent: AgentKind,
    /// Base URL of the OpenAI-compatible API (with --agent openai).
    #[arg(
        long,
        env = "TURNSTREAM_OPENAI_BASE_URL",
        default_value = "https://api.openai.com/v1"
    )]
    pub openai_base_url: String,
    /// Model name sent upstream (with --agent openai).
    #[arg(long, env = "TURNSTREAM_OPENAI_MODEL", default_value = "gpt-4o-mini")]
    pub openai_model: String,
    /// Milliseconds over which response and thinking deltas are merged before journaling; 0 disables.
    #[arg(long, env = "TURNSTREAM_COALESCE_MS", default_value_t = 25)]
    pub coalesce_ms: u64,
    /// Turns running at once across all sessions (each session runs one at a time).
    #[arg(long, env = "TURNSTREAM_MAX_CONCURRENT_TURNS", default_value_t = 64)]
    pub max_concurrent_turns: usize,
    /// Seconds running turns may take to finish on shutdown before they end `interrupted`.
    #[arg(long, env = "TURNSTREAM_SHUTDOWN_GRACE_SECS", default_value_t = 10)]
    pub shutdown_grace_secs: u64,
    /// Milliseconds between the demo agent's deltas.
    #[arg(long, env = "TURNSTREAM_DEMO_DELAY_MS", default_value_t = 30)]
    pub demo_delay_ms: u64,
    /// Seconds a stream may stay silent before a heartbeat comment is sent on it.
    #[arg(long, env = "TURNSTREAM_HEARTBEAT_SECS", default_value_t = 15)]
    pub heartbeat_secs: u64,
    /// Seconds a finished turn's events (and events outside any turn) stay replayable.
    #[arg(long, env = "TURNSTREAM_RETENTION_SECS", default_value_t = 3600)]
    pub retention_secs: u64,
    /// Seconds between retention cleanup passes.
    #[arg(long, env = "TURNSTREAM_CLEANUP_INTERVAL_SECS", default_value_t = 60)]
    pub cleanup_interval_secs: u64,
    /// Origin allowed to call the API from a browser (repeatable; `*` allows any).
    #[arg(
        long = "cors-origin",
        env = "TURNSTREAM_CORS_ORIGIN",
        value_delimiter = ','
    )]
    pub cors_origins: Vec<String>,
    /// Most SSE streams open at once; more are refused with 503.
    #[arg(long, env = "TURNSTREAM_MAX_STREAMS", default_value_t = 100_000)]
    pub max_streams: usize,
    /// Memory (MiB, over all sessions) for recent frames kept to answer reconnects without a
    /// journal read; 0 turns it off (every resume then reads the journal).
    #[arg(long, env = "TURNSTREAM_REPLAY_CACHE_MB", default_value_t = 64)]
    pub replay_cache_mb: usize,
    /// Most turns one session may have queued or running.
    #[arg(long, env = "TURNSTREAM_MAX_ACTIVE_TURNS", default_value_t = turnstream_protocol::limits::MAX_ACTIVE_TURNS_PER_SESSION)]
    pub max_active_turns: usize,
    /// Seconds a client has to send a request's headers (also between requests on a kept-alive
    /// connection); then the connection is closed.
    #[arg(long, env = "TURNSTREAM_HEADER_TIMEOUT_SECS", default_value_t = 10)]
    pub header_timeout_secs: u64,
    /// Seconds a client has to send a request's whole body once its headers arrived; then it gets
    /// 408 and the connection is closed. Responses (streams) are never timed.
    #[arg(long, env = "TURNSTREAM_BODY_TIMEOUT_SECS", default_value_t = 30)]
    pub body_timeout_secs: u64,
    /// Connections open at once from one IP address; more get 429 and are closed. 0 is no cap.
    /// Behind a reverse proxy every connection comes from the proxy's address: raise it or use 0.
    #[arg(
        long,
        env = "TURNSTREAM_MAX_CONNECTIONS_PER_IP",
        default_value_t = 1000
    )]
    pub max_connections_per_ip: usize,
}

impl Config {
    pub fn coalesce(&self) -> Duration {
        Duration::from_millis(self.coalesce_ms)
    }

    pub fn heartbeat(&self) -> Duration {
        Duration::from_secs(self.heartbeat_secs.max(1))
    }

    /// The accept loop's limits (a timeout of 0 means 1 s: no request can arrive in no time).
    pub fn conn_limits(&self) -> crate::edge::ConnLimits {
        crate::edge::ConnLimits {
            header_timeout: Duration::from_secs(self.header_timeout_secs.max(1)),
            body_timeout: Duration::from_secs(self.body_timeout_secs.max(1)),
            max_connections_per_ip: self.max_connections_per_ip,
        }
    }

    /// Defaults, as `turnstream serve` with no flags would have them (for embedding and tests).
    pub fn defaults() -> Config {
        match Cli::try_parse_from(["turnstream", "serve"]) {
            Ok(Cli {
                command: Command::Serve(c),
            }) => c,
            Err(e) => panic!("default configuration does not parse: {e}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_and_defaults() {
        let c = Config::defaults();
        assert_eq!(c.listen.port(), 8080);
        assert_eq!(c.coalesce_ms, 25);
        assert_eq!(c.retention_secs, 3600);
        assert_eq!(c.replay_cache_mb, 64);
        let Ok(Cli {
            command: Command::Serve(c),
        }) = Cli::try_parse_from([
            "turnstream",
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--coalesce-ms",
            "0",
            "--cors-origin",
            "http://a",
            "--cors-origin",
            "http://b",
            "--agent",
            "openai",
        ])
        else {
            panic!("flags do not parse");
        };
        assert_eq!(c.listen.port(), 0);
        assert_eq!(c.coalesce_ms, 0);
        assert_eq!(c.cors_origins, vec!["http://a", "http://b"]);
        assert_eq!(c.agent, AgentKind::Openai);
    }
}
