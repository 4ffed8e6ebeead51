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
    Serve(Box<Config>),
    /// Print a signed token (HS256) for a user and sessions: for scripts, tests and the docs.
    Token(TokenArgs),
}

/// `turnstream token`: what to put in the token.
#[derive(Debug, Clone, clap::Args)]
pub struct TokenArgs {
    /// File holding the HS256 secret (the server's --auth-secret-file).
    #[arg(long, env = "TURNSTREAM_AUTH_SECRET_FILE", conflicts_with = "secret")]
    pub secret_file: Option<PathBuf>,
    /// The HS256 secret itself (prefer --secret-file: a command line is visible to other users).
    #[arg(long, env = "TURNSTREAM_AUTH_SECRET", hide_env_values = true)]
    pub secret: Option<String>,
    /// The user (`sub` claim).
    #[arg(long)]
    pub sub: String,
    /// A session the token covers (repeatable); `PREFIX*` covers every session starting with PREFIX.
    #[arg(long = "session", required = true)]
    pub sessions: Vec<String>,
    /// What the token allows (repeatable: read, write, cancel); all three when omitted.
    #[arg(long = "scope", value_enum)]
    pub scopes: Vec<TokenScope>,
    /// How long the token is valid, e.g. 90s, 15m, 1h, 7d.
    #[arg(long, default_value = "1h", value_parser = humantime::parse_duration)]
    pub ttl: Duration,
}

/// A scope named on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum TokenScope {
    Read,
    Write,
    Cancel,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum AgentKind {
    /// Built-in agent with no network; directives: /echo, /deltas, /sleep, /fail, /bigtool.
    Demo,
    /// Any OpenAI-compatible chat-completions endpoint (key from OPENAI_API_KEY).
    Openai,
    /// Worker processes claim turns over the worker API (needs a --service-key).
    Worker,
}

#[derive(Debug, Clone, clap::Args)]
pub struct Config {
    /// Address to listen on (port 0 picks a free port).
    #[arg(long, env = "TURNSTREAM_LISTEN", default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,
    /// SQLite database file (created with its folder if missing), or a PostgreSQL database
    /// URL (`postgres://user@host:port/name`), which several servers may share.
    #[arg(
        long,
        env = "TURNSTREAM_DB",
        default_value = "./turnstream-data/turnstream.db"
    )]
    pub db: PathBuf,
    /// PostgreSQL database URL; takes the place of `--db` (servers sharing it form a cluster).
    /// It may be a connection pooler's (PgBouncer in transaction or session mode, as managed
    /// databases hand out): see --database-listen-url.
    #[arg(long, env = "TURNSTREAM_DATABASE_URL")]
    pub database_url: Option<String>,
    /// A direct PostgreSQL URL to the same database, used only to LISTEN for other servers'
    /// commits, when the database URL is a pooler's in transaction mode (which cannot carry
    /// LISTEN). Without one that works, a server polls the journal every 100 ms instead: other
    /// servers' events reach its streams up to 100 ms later, and every resume reads the
    /// journal (the log says so once; /metrics: turnstream_journal_polling 1).
    #[arg(long, env = "TURNSTREAM_DATABASE_LISTEN_URL")]
    pub database_listen_url: Option<String>,
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
    /// Seconds a presence state with `typing: true` lasts after the update that set it; the
    /// server then sets `typing` to false itself (a `presence_diff`), so a closed tab does not
    /// type forever.
    #[arg(long, env = "TURNSTREAM_TYPING_TTL_SECS", default_value_t = 6, value_parser = clap::value_parser!(u64).range(1..))]
    pub typing_ttl_secs: u64,
    /// Milliseconds a presence member stays after its last stream closed: a stream of the same
    /// member back within it (a reload, a reconnect) shows no leave and no join.
    #[arg(long, env = "TURNSTREAM_PRESENCE_GRACE_MS", default_value_t = 3000)]
    pub presence_grace_ms: u64,
    /// Seconds another server's presence members last without its renewal (sent every third of
    /// it): a server killed without a shutdown loses its members everywhere within it.
    #[arg(long, env = "TURNSTREAM_PRESENCE_TTL_SECS", default_value_t = 15, value_parser = clap::value_parser!(u64).range(1..))]
    pub presence_ttl_secs: u64,
    /// Presence members listed per session; past it new members still watch and are counted
    /// (`count`) but are not listed.
    #[arg(long, env = "TURNSTREAM_MAX_PRESENCE_MEMBERS", default_value_t = 1000)]
    pub max_presence_members: usize,
    /// Most turns one session may have queued or running.
    #[arg(long, env = "TURNSTREAM_MAX_ACTIVE_TURNS", default_value_t = turnstream_protocol::limits::MAX_ACTIVE_TURNS_PER_SESSION)]
    pub max_active_turns: usize,
    /// HS256 secret that signs the app's tokens; with it every /api/ route needs a token.
    /// Repeatable: during a rotation both the old and the new secret are accepted.
    #[arg(
        long = "auth-secret",
        env = "TURNSTREAM_AUTH_SECRET",
        hide_env_values = true
    )]
    pub auth_secrets: Vec<String>,
    /// File holding an HS256 secret (repeatable, like --auth-secret).
    #[arg(long = "auth-secret-file", env = "TURNSTREAM_AUTH_SECRET_FILE")]
    pub auth_secret_files: Vec<PathBuf>,
    /// Ed25519 or RSA public key (PEM) that verifies EdDSA / RS256 tokens (repeatable).
    #[arg(long = "auth-public-key", env = "TURNSTREAM_AUTH_PUBLIC_KEY")]
    pub auth_public_keys: Vec<PathBuf>,
    /// Key the app's backend sends as `Authorization: Bearer <key>`: every session, every scope
    /// (repeatable; comma-separated in the environment).
    #[arg(
        long = "service-key",
        env = "TURNSTREAM_SERVICE_KEYS",
        value_delimiter = ',',
        hide_env_values = true
    )]
    pub service_keys: Vec<String>,
    /// Messages one client (a token's user, or a peer IP without auth) may post per minute;
    /// more are refused with 429 `rate_limited`. 0 turns the limit off. Service keys are exempt.
    #[arg(long, env = "TURNSTREAM_MESSAGES_PER_MINUTE", default_value_t = 60)]
    pub messages_per_minute: u32,
    /// Streams one client (a token's user, or a peer IP without auth) may hold open; more are
    /// refused with 429 `too_many_streams`. 0 turns the limit off. Service keys are exempt.
    #[arg(long, env = "TURNSTREAM_MAX_STREAMS_PER_CLIENT", default_value_t = 64)]
    pub max_streams_per_client: usize,
    /// Turn slots (of --max-concurrent-turns) one client may hold at once; its further turns
    /// wait while other clients' turns run. 0 means half of --max-concurrent-turns.
    #[arg(long, env = "TURNSTREAM_MAX_TURNS_PER_CLIENT", default_value_t = 0)]
    pub max_turns_per_client: usize,
    /// Milliseconds a journal statement waits for a lock another process holds on the database
    /// before the write fails (`503 storage_unavailable`) and is retried later.
    #[arg(long, env = "TURNSTREAM_BUSY_TIMEOUT_MS", default_value_t = 5000)]
    pub busy_timeout_ms: u64,
    /// System prompt sent first to the model (with --agent openai).
    #[arg(long, env = "TURNSTREAM_OPENAI_SYSTEM_PROMPT")]
    pub openai_system_prompt: Option<String>,
    /// File whose text is the system prompt (read at startup; instead of --openai-system-prompt).
    #[arg(
        long,
        env = "TURNSTREAM_OPENAI_SYSTEM_PROMPT_FILE",
        conflicts_with = "openai_system_prompt",
        value_parser = read_prompt_file
    )]
    pub openai_system_prompt_file: Option<String>,
    /// `max_tokens` sent upstream; the server's own default when unset.
    #[arg(long, env = "TURNSTREAM_OPENAI_MAX_TOKENS")]
    pub openai_max_tokens: Option<u32>,
    /// `temperature` sent upstream; the server's own default when unset.
    #[arg(long, env = "TURNSTREAM_OPENAI_TEMPERATURE")]
    pub openai_temperature: Option<f32>,
    /// Seconds the upstream may stay silent (before answering or mid-reply) before the turn
    /// fails; generous because reasoning models can think for minutes.
    #[arg(
        long,
        env = "TURNSTREAM_OPENAI_IDLE_TIMEOUT_SECS",
        default_value_t = 300
    )]
    pub openai_idle_timeout_secs: u64,
    /// Retries of a rate limit (429), server error (5xx) or lost connection before the first
    /// token, with capped, jittered backoff that honours Retry-After.
    #[arg(long, env = "TURNSTREAM_OPENAI_MAX_RETRIES", default_value_t = 3)]
    pub openai_max_retries: u32,
    /// Ask for token usage (`stream_options.include_usage`), kept on the turn; turn off for a
    /// server that rejects the field.
    #[arg(
        long,
        env = "TURNSTREAM_OPENAI_INCLUDE_USAGE",
        default_value_t = true,
        action = clap::ArgAction::Set
    )]
    pub openai_include_usage: bool,
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
    /// Certificate chain (PEM) to serve HTTPS with: HTTP/2 and HTTP/1.1, chosen by ALPN, on the
    /// one port. Needs --tls-key.
    #[arg(long, env = "TURNSTREAM_TLS_CERT", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// Private key (PEM: PKCS#8, RSA or EC) of --tls-cert's first certificate. Needs --tls-cert.
    #[arg(long, env = "TURNSTREAM_TLS_KEY", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Seconds a worker's lease on a turn lasts after each accepted request (`--agent worker`);
    /// a turn whose lease runs out ends `interrupted`.
    #[arg(
        long,
        env = "TURNSTREAM_WORKER_LEASE_SECS",
        default_value_t = 30,
        value_parser = clap::value_parser!(u64).range(1..=3600)
    )]
    pub worker_lease_secs: u64,
    /// Seconds an agent's request for input (v1.2) waits for an answer when it names no
    /// `expires_at`; then the server answers `{"timed_out": true}` and the turn continues.
    #[arg(
        long,
        env = "TURNSTREAM_INPUT_TIMEOUT_SECS",
        default_value_t = 86_400,
        value_parser = clap::value_parser!(u64).range(1..=31_536_000)
    )]
    pub input_timeout_secs: u64,
    /// Log lines as `text` (coloured only on a terminal) or `json` (one object per line);
    /// `RUST_LOG` sets what is logged.
    #[arg(
        long,
        env = "TURNSTREAM_LOG_FORMAT",
        value_enum,
        default_value = "text"
    )]
    pub log_format: crate::logging::LogFormat,
}

/// Reads `--openai-system-prompt-file` at startup, so a missing file stops the server with a
/// clear message instead of failing every turn.
fn read_prompt_file(path: &str) -> Result<String, String> {
    std::fs::read_to_string(path).map_err(|e| format!("cannot read {path}: {e}"))
}

impl Config {
    /// Where the journal lives: `--database-url`, else `--db` (a `postgres://` URL or a file).
    pub fn database(&self) -> crate::journal::Database {
        match &self.database_url {
            Some(url) => crate::journal::Database::Postgres(url.clone()),
            None => crate::journal::Database::parse(&self.db.to_string_lossy()),
        }
    }

    pub fn coalesce(&self) -> Duration {
        Duration::from_millis(self.coalesce_ms)
    }

    /// Turn slots one client may hold (see `--max-turns-per-client`).
    pub fn turns_per_client(&self) -> usize {
        let all = self.max_concurrent_turns.max(1);
        match self.max_turns_per_client {
            0 => (all / 2).max(1),
            n => n.min(all),
        }
    }

    /// The verifier of tokens and service keys this configuration names (reads key files).
    pub fn authenticator(&self) -> Result<crate::auth::Authenticator, crate::auth::KeyError> {
        let mut secrets = self.auth_secrets.clone();
        for path in &self.auth_secret_files {
            secrets.push(crate::auth::read_secret_file(path)?);
        }
        crate::auth::Authenticator::new(&secrets, &self.auth_public_keys, &self.service_keys)
    }

    pub fn busy_timeout(&self) -> Duration {
        Duration::from_millis(self.busy_timeout_ms)
    }

    /// The presence roster's settings (`--typing-ttl-secs`, `--presence-grace-ms`,
    /// `--presence-ttl-secs`, `--max-presence-members`).
    pub fn presence(&self) -> crate::presence::Settings {
        crate::presence::Settings {
            grace: Duration::from_millis(self.presence_grace_ms),
            typing_ttl: Duration::from_secs(self.typing_ttl_secs.max(1)),
            ttl: Duration::from_secs(self.presence_ttl_secs.max(1)),
            max_members: self.max_presence_members,
        }
    }

    pub fn heartbeat(&self) -> Duration {
        Duration::from_secs(self.heartbeat_secs.max(1))
    }

    /// The built-in agent `--agent` names, with what it needs; `None` with `--agent worker`
    /// (worker processes run the turns).
    pub fn builtin_agent(&self) -> Option<crate::agent::Builtin> {
        match self.agent {
            AgentKind::Demo => Some(crate::agent::Builtin::Demo {
                delay: Duration::from_millis(self.demo_delay_ms),
            }),
            AgentKind::Openai => Some(crate::agent::Builtin::Openai {
                base_url: self.openai_base_url.clone(),
                model: self.openai_model.clone(),
                api_key: std::env::var("OPENAI_API_KEY").ok(),
                options: self.openai_options(),
            }),
            AgentKind::Worker => None,
        }
    }

    /// The openai agent's options from the `--openai-*` flags.
    pub fn openai_options(&self) -> crate::agent::openai::OpenAiOptions {
        crate::agent::openai::OpenAiOptions {
            system_prompt: self
                .openai_system_prompt
                .clone()
                .or_else(|| self.openai_system_prompt_file.clone()),
            max_tokens: self.openai_max_tokens,
            temperature: self.openai_temperature,
            include_usage: self.openai_include_usage,
            idle_timeout: Duration::from_secs(self.openai_idle_timeout_secs.max(1)),
            max_retries: self.openai_max_retries,
            ..Default::default()
        }
    }

    /// The accept loop's limits (a timeout of 0 means 1 s: no request can arrive in no time).
    pub fn conn_limits(&self) -> crate::edge::ConnLimits {
        crate::edge::ConnLimits {
            header_timeout: Duration::from_secs(self.header_timeout_secs.max(1)),
            body_timeout: Duration::from_secs(self.body_timeout_secs.max(1)),
            max_connections_per_ip: self.max_connections_per_ip,
        }
    }

    /// The TLS configuration `--tls-cert` and `--tls-key` name (reads and checks both files),
    /// or `None` to serve plain HTTP/1.1.
    pub fn tls(
        &self,
    ) -> Result<Option<std::sync::Arc<rustls::ServerConfig>>, crate::tls::TlsError> {
        match (&self.tls_cert, &self.tls_key) {
            (Some(cert), Some(key)) => crate::tls::server_config(cert, key).map(Some),
            (None, None) => Ok(None),
            // clap already requires both or neither; this is for embedders.
            _ => Err(crate::tls::TlsError::Incomplete),
        }
    }

    /// Defaults, as `turnstream serve` with no flags would have them (for embedding and tests).
    pub fn defaults() -> Config {
        match Cli::try_parse_from(["turnstream", "serve"]) {
            Ok(Cli {
                command: Command::Serve(c),
            }) => *c,
            Ok(_) => unreachable!("parsed `serve`"),
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

    #[test]
    fn worker_mode_and_its_lease() {
        assert_eq!(Config::defaults().worker_lease_secs, 30);
        let parse = |lease: &str| {
            Cli::try_parse_from([
                "turnstream",
                "serve",
                "--agent",
                "worker",
                "--worker-lease-secs",
                lease,
            ])
        };
        let Ok(Cli {
            command: Command::Serve(c),
        }) = parse("5")
        else {
            panic!("flags do not parse");
        };
        assert_eq!((c.agent, c.worker_lease_secs), (AgentKind::Worker, 5));
        assert!(parse("0").is_err(), "a lease of 0 s is refused");
        assert!(parse("3601").is_err());
    }

    #[test]
    fn openai_flags_become_the_agent_options() -> Result<(), Box<dyn std::error::Error>> {
        let defaults = Config::defaults().openai_options();
        assert_eq!(defaults.idle_timeout, Duration::from_secs(300));
        assert_eq!(defaults.max_retries, 3);
        assert!(defaults.include_usage);
        assert_eq!(defaults.system_prompt, None);
        assert_eq!(defaults.max_tokens, None);

        let dir = tempfile::tempdir()?;
        let prompt = dir.path().join("prompt.txt");
        std::fs::write(&prompt, "You answer in French.\n")?;
        let parsed = Cli::try_parse_from([
            "turnstream",
            "serve",
            "--openai-system-prompt-file",
            prompt.to_str().ok_or("path")?,
            "--openai-max-tokens",
            "512",
            "--openai-temperature",
            "0.2",
            "--openai-idle-timeout-secs",
            "30",
            "--openai-max-retries",
            "0",
            "--openai-include-usage",
            "false",
        ])?;
        let Command::Serve(c) = parsed.command else {
            return Err("not `serve`".into());
        };
        let o = c.openai_options();
        assert_eq!(o.system_prompt.as_deref(), Some("You answer in French.\n"));
        assert_eq!(o.max_tokens, Some(512));
        assert_eq!(o.temperature, Some(0.2));
        assert_eq!(o.idle_timeout, Duration::from_secs(30));
        assert_eq!(o.max_retries, 0);
        assert!(!o.include_usage);

        // A prompt file that cannot be read stops the server at startup, naming the file.
        let missing = dir.path().join("missing.txt");
        let missing = missing.to_str().ok_or("path")?;
        let error = Cli::try_parse_from([
            "turnstream",
            "serve",
            "--openai-system-prompt-file",
            missing,
        ])
        .err()
        .ok_or("a missing prompt file parsed")?;
        assert!(error.to_string().contains("missing.txt"), "{error}");
        // The prompt and the prompt file exclude each other.
        assert!(Cli::try_parse_from([
            "turnstream",
            "serve",
            "--openai-system-prompt",
            "x",
            "--openai-system-prompt-file",
            prompt.to_str().ok_or("path")?,
        ])
        .is_err());
        Ok(())
    }
}
