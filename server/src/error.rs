//! The library's error type. The HTTP edge maps it to a status and the stable JSON error shape.

use turnstream_protocol::ResyncReason;

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("database error: {0}")]
    Sqlite(#[from] rusqlite::Error),
    #[error("database error: {0}")]
    Postgres(#[from] tokio_postgres::Error),
    #[error("stored data is corrupt: {0}")]
    Corrupt(String),
    #[error("database schema version {found} is newer than this server understands ({supported}); upgrade turnstream")]
    SchemaTooNew { found: i64, supported: i64 },
    /// A write the storage refused; `fault` says whether waiting for space or for the storage
    /// to answer again is what helps.
    #[error("{}: {message}", .fault.describe())]
    Storage {
        fault: StorageFault,
        message: String,
    },
    /// A write for a turn whose lease this server no longer holds.
    #[error("the turn's lease was lost")]
    LeaseLost,
    #[error("the journal is shut down")]
    Closed,
    #[error("{what} not found")]
    NotFound { what: &'static str },
    #[error("client_message_id {0:?} was already used with different content or attachments")]
    ClientMessageConflict(String),
    #[error("client_request_id {0:?} was already used for another message of the session")]
    ClientRequestConflict(String),
    #[error("session has {0} active turns, the most allowed; wait for one to end")]
    TooManyActiveTurns(usize),
    #[error("invalid request for input: {0}")]
    InvalidRequest(String),
    #[error("a turn of the session is queued, running or waiting")]
    SessionBusy,
    /// A call (v1.3) refused: nothing of it, nor of the batch it came in, was written.
    #[error("call refused: {0}")]
    CallRefused(crate::journal::CallRefusal),
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

/// Why the storage refused a write, when the cause is the storage itself and not the request:
/// the same write can succeed later, so the caller is told to retry rather than given up on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StorageFault {
    /// No space left (SQLite's `SQLITE_FULL`, `ENOSPC`): writes succeed again once space is freed.
    Full,
    /// The storage did not answer a write: an I/O error, a lock held past the busy timeout, a
    /// read-only or vanished file.
    Unavailable,
}

impl StorageFault {
    /// The fault's name in metrics labels.
    pub fn as_str(self) -> &'static str {
        match self {
            StorageFault::Full => "full",
            StorageFault::Unavailable => "unavailable",
        }
    }

    fn describe(self) -> &'static str {
        match self {
            StorageFault::Full => "storage full",
            StorageFault::Unavailable => "storage unavailable",
        }
    }

    /// The fault behind a SQLite error, if the error is one of the storage's and not of the
    /// statement (a constraint, a corrupt file, a misuse are not retried).
    pub fn of_sqlite(e: &rusqlite::Error) -> Option<StorageFault> {
        use rusqlite::ErrorCode as C;
        match e.sqlite_error_code()? {
            C::DiskFull => Some(StorageFault::Full),
            C::DatabaseBusy
            | C::DatabaseLocked
            | C::SystemIoFailure
            | C::CannotOpen
            | C::ReadOnly
            | C::PermissionDenied
            | C::FileLockingProtocolFailed
            | C::OutOfMemory => Some(StorageFault::Unavailable),
            _ => None,
        }
    }

    /// The fault behind a PostgreSQL error, if the error is the database's and not the
    /// statement's: a lost or refused connection, a server shutting down or out of resources,
    /// a full disk, a lock or serialization conflict.
    pub fn of_postgres(e: &tokio_postgres::Error) -> Option<StorageFault> {
        let Some(code) = e.code() else {
            // No SQLSTATE: the connection itself failed (closed, I/O, timeout).
            return Some(StorageFault::Unavailable);
        };
        let code = code.code();
        if code == "53100" {
            return Some(StorageFault::Full);
        }
        let class = &code[..code.len().min(2)];
        match class {
            // connection exception, insufficient resources, operator intervention, system error
            "08" | "53" | "57" | "58" => Some(StorageFault::Unavailable),
            // serialization failure, deadlock, lock not available: the same write may succeed
            "40" => Some(StorageFault::Unavailable),
            _ if code == "55P03" => Some(StorageFault::Unavailable),
            _ => None,
        }
    }

    /// The fault behind an operating-system I/O error.
    pub fn of_io(e: &std::io::Error) -> StorageFault {
        if e.kind() == std::io::ErrorKind::StorageFull {
            StorageFault::Full
        } else {
            StorageFault::Unavailable
        }
    }
}

impl Error {
    /// The storage fault behind this error, if it is one (the write may succeed when retried).
    pub fn storage_fault(&self) -> Option<StorageFault> {
        match self {
            Error::Sqlite(e) => StorageFault::of_sqlite(e),
            Error::Postgres(e) => StorageFault::of_postgres(e),
            Error::Storage { fault, .. } => Some(*fault),
            Error::Io(e) => Some(StorageFault::of_io(e)),
            _ => None,
        }
    }

    /// A storage error for `fault` with a message of its own.
    pub fn storage(fault: StorageFault, message: impl Into<String>) -> Error {
        Error::Storage {
            fault,
            message: message.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sqlite(code: i32) -> Error {
        Error::Sqlite(rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(code),
            None,
        ))
    }

    #[test]
    fn storage_faults_are_told_apart_from_other_errors() {
        assert_eq!(
            sqlite(rusqlite::ffi::SQLITE_FULL).storage_fault(),
            Some(StorageFault::Full)
        );
        for code in [
            rusqlite::ffi::SQLITE_BUSY,
            rusqlite::ffi::SQLITE_LOCKED,
            rusqlite::ffi::SQLITE_IOERR,
            rusqlite::ffi::SQLITE_IOERR_FSYNC,
            rusqlite::ffi::SQLITE_READONLY,
        ] {
            assert_eq!(
                sqlite(code).storage_fault(),
                Some(StorageFault::Unavailable),
                "code {code}"
            );
        }
        for code in [
            rusqlite::ffi::SQLITE_CONSTRAINT,
            rusqlite::ffi::SQLITE_CORRUPT,
            rusqlite::ffi::SQLITE_MISUSE,
        ] {
            assert_eq!(sqlite(code).storage_fault(), None, "code {code}");
        }
        let enospc = std::io::Error::from(std::io::ErrorKind::StorageFull);
        assert_eq!(Error::Io(enospc).storage_fault(), Some(StorageFault::Full));
        assert_eq!(Error::NotFound { what: "turn" }.storage_fault(), None);
    }
}
