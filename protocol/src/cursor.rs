//! Journal cursors: `<epoch>-<sequence>`, opaque to clients.
//!
//! The epoch names one journal (it is drawn when the database is created), so a cursor from a
//! recreated database is told apart from a cursor that is merely old or ahead.

use std::fmt;
use std::str::FromStr;

/// A position in one journal: every event with `sequence <= self.sequence` has been seen.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Cursor {
    /// Names the journal the sequence belongs to.
    pub epoch: String,
    /// The global event id; 0 means "before the first event".
    pub sequence: i64,
}

/// Why a cursor string could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CursorError;

impl fmt::Display for CursorError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("cursor is not of the form <epoch>-<sequence>")
    }
}

impl std::error::Error for CursorError {}

impl Cursor {
    pub fn new(epoch: impl Into<String>, sequence: i64) -> Self {
        Self {
            epoch: epoch.into(),
            sequence,
        }
    }
}

impl fmt::Display for Cursor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.epoch, self.sequence)
    }
}

impl FromStr for Cursor {
    type Err = CursorError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (epoch, seq) = s.trim().rsplit_once('-').ok_or(CursorError)?;
        if epoch.is_empty()
            || epoch.len() > 64
            || !epoch.bytes().all(|b| b.is_ascii_alphanumeric())
            || seq.is_empty()
            || seq.len() > 19
            || !seq.bytes().all(|b| b.is_ascii_digit())
        {
            return Err(CursorError);
        }
        let sequence = seq.parse::<i64>().map_err(|_| CursorError)?;
        Ok(Cursor::new(epoch, sequence))
    }
}

/// The sequence of a cursor string, if it parses; for ordering events of one journal.
pub fn sequence_of(cursor: &str) -> Option<i64> {
    cursor.parse::<Cursor>().ok().map(|c| c.sequence)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips() {
        let c = Cursor::new("a1b2c3", 42);
        assert_eq!(c.to_string(), "a1b2c3-42");
        assert_eq!("a1b2c3-42".parse::<Cursor>(), Ok(c));
    }

    #[test]
    fn rejects_garbage() {
        for bad in [
            "",
            "42",
            "-42",
            "abc-",
            "abc--1",
            "ab c-1",
            "abc-1x",
            "abc-99999999999999999999",
        ] {
            assert!(bad.parse::<Cursor>().is_err(), "{bad:?} parsed");
        }
    }
}
