//! The library's error type. The HTTP edge maps it to a status and the stable JSON error shape.

use turnstream_protocol::ResyncReason;

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("database error: {0}")]
    Sqlite(#[from] rusqlite::Error),
    #[error("stored data is corrupt: {0}")]
    Corrupt(String),
    #[error("database schema version {found} is newer than this server understands ({supported}); upgrade turnstream")]
    SchemaTooNew { found: i64, supported: i64 },
    #[error("storage failure: {0}")]
    Storage(String),
    #[error("the journal is shut down")]
    Closed,
    #[error("{what} not found")]
    NotFound { what: &'static str },
    #[error("client_message_id {0:?} was already used with different content")]
    ClientMessageConflict(String),
    #[error("session has {0} active turns, the most allowed; wait for one to end")]
    TooManyActiveTurns(usize),
    #[error("the server is shutting down")]
    ShuttingDown,
    #[error("resync required: {}", .0.as_str())]
    Resync(ResyncReason),
    #[error("configuration: {0}")]
    Config(String),
    #[error("i/o error: {0}")]
    Io(#[from] std::io::Error),
}

impl From<serde_json::Error> for Error {
    fn from(e: serde_json::Error) -> Self {
        Error::Corrupt(e.to_string())
    }
}
