//! What the journal hands what committed to. The journal knows neither SSE nor subscribers: after
//! each commit (SQLite) or each read of its tail (PostgreSQL), it hands the committed events, in
//! id order, to a [`FanOut`]; and it tells it when retention made positions unavailable. Whoever
//! missed some reads them back with [`Journal::events_after`].

use super::sql::{EventRow, Param};
use super::Journal;
use crate::error::Result;

/// One committed journal event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Committed {
    pub seq: i64,
    pub session_id: String,
    pub turn_id: Option<String>,
    pub ts: i64,
    pub kind: String,
    /// The event's body, as stored (JSON).
    pub data: String,
}

impl Committed {
    pub fn row(&self) -> EventRow<'_> {
        EventRow {
            seq: self.seq,
            session_id: &self.session_id,
            turn_id: self.turn_id.as_deref(),
            ts: self.ts,
            kind: &self.kind,
            data: &self.data,
        }
    }
}

impl From<EventRow<'_>> for Committed {
    fn from(e: EventRow<'_>) -> Committed {
        Committed {
            seq: e.seq,
            session_id: e.session_id.to_owned(),
            turn_id: e.turn_id.map(str::to_owned),
            ts: e.ts,
            kind: e.kind.to_owned(),
            data: e.data.to_owned(),
        }
    }
}

/// Where committed events go.
pub trait FanOut: Send + Sync {
    /// Events of journal `epoch` that committed, in id order, with no id left out that a reader
    /// could see. Called only after the commit.
    fn committed(&self, epoch: &str, events: Vec<Committed>);

    /// Retention made every position of `session_id` up to `floor` unavailable. Called before
    /// the deletion commits, so nothing answers from memory what the journal no longer can.
    fn floor_raised(&self, session_id: &str, floor: i64);

    /// Positions up to `seq` of every session may have been made unavailable meanwhile (another
    /// server's retention went unheard).
    fn unsure_through(&self, seq: i64);

    /// Whether other servers' retention is heard as it commits (PostgreSQL: the tail listens).
    /// While it is not, nothing may answer a position from memory: another server may have
    /// deleted it a moment ago.
    fn retention_heard(&self, heard: bool) {
        let _ = heard;
    }
}

impl Journal {
    /// Every session's committed events with an id greater than `after`, in id order, at most
    /// `limit` of them: what a consumer of the fan-out reads back when it missed some (an
    /// embedder's listener that fell behind). Events retention deleted meanwhile are not there.
    pub async fn events_after(&self, after: i64, limit: usize) -> Result<Vec<Committed>> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.read(move |conn, _| {
            let mut events = Vec::new();
            conn.for_each_event(
                "SELECT id, session_id, turn_id, ts, kind, data FROM events
                 WHERE id > ? ORDER BY id LIMIT ?",
                &[Param::Int(after), Param::Int(limit)],
                &mut |e| {
                    events.push(Committed::from(e));
                    Ok(())
                },
            )?;
            Ok(events)
        })
        .await
    }
}
