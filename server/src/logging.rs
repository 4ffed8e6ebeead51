//! Log output: text or JSON lines on stderr, colour only on a terminal, and the targets of the
//! structured lines operators filter on (one per request, one per turn end).

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

/// Target of the one line per request (method, route template, status, duration).
pub const ACCESS_TARGET: &str = "turnstream::access";
/// Target of the one line per turn end (turn, session, state, duration).
pub const TURN_TARGET: &str = "turnstream::turn";

/// The log filter when `RUST_LOG` is unset.
pub const DEFAULT_FILTER: &str = "info,tower_http=warn";

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines (coloured only when stderr is a terminal).
    #[default]
    Text,
    /// One JSON object per line, the event's fields at the top level.
    Json,
}

/// Installs the global subscriber: `RUST_LOG` (or [`DEFAULT_FILTER`]) on stderr in `format`.
pub fn init(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| DEFAULT_FILTER.into());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        // Escape codes only for a person at a terminal: a file or a collector gets plain text.
        LogFormat::Text => builder.with_ansi(std::io::stderr().is_terminal()).init(),
        LogFormat::Json => builder
            .json()
            .with_ansi(false)
            .flatten_event(true)
            .with_current_span(false)
            .with_span_list(false)
            .init(),
    }
}
