//! Stream reads: validating a resume position against the epoch, the head and the floors;
//! the snapshot of active turns as of that position; and replay pages after it, each event
//! written by the [`Encoder`] the caller hands in (the journal knows no wire format).

use bytes::{Bytes, BytesMut};
use turnstream_protocol::{Cursor, ResyncReason, Snapshot};

use super::rows::{fold_turn, turns, TURN_COLUMNS};
use super::sql::{in_list, EventRow, Param, Sql};
use super::Journal;

/// Appends one event, as the stream sends it, to a page being written.
pub type Encoder = fn(&mut BytesMut, &str, &EventRow<'_>);
use crate::error::Result;

/// Largest write a replay page is cut into.
const CHUNK_BYTES: usize = 64 * 1024;

/// Journal events after a position, encoded straight into writes of up to 64 KiB.
#[derive(Debug)]
pub struct Page {
    pub chunks: Vec<Bytes>,
    /// Events in `chunks`.
    pub events: usize,
    /// The sequence of the last event read, or the position read from if none.
    pub last_seq: i64,
    /// Whether the page reached the head as it was when read.
    pub complete: bool,
}

/// Where a stream starts: its snapshot (if asked for) and the first page of replay.
#[derive(Debug)]
pub struct StreamStart {
    pub snapshot: Option<Snapshot>,
    pub page: Page,
    pub resume_seq: i64,
}

/// Validates a resume position against the journal and the sessions' floors.
fn validate(
    conn: &dyn Sql,
    epoch: &str,
    sessions: &[String],
    resume: &str,
) -> Result<std::result::Result<i64, ResyncReason>> {
    let Ok(cursor) = resume.parse::<Cursor>() else {
        return Ok(Err(ResyncReason::Invalid));
    };
    if cursor.epoch != epoch {
        return Ok(Err(ResyncReason::Epoch));
    }
    if cursor.sequence > conn.head()? {
        return Ok(Err(ResyncReason::Future));
    }
    if cursor.sequence < max_floor(conn, sessions)? {
        return Ok(Err(ResyncReason::Expired));
    }
    Ok(Ok(cursor.sequence))
}

fn max_floor(conn: &dyn Sql, sessions: &[String]) -> Result<i64> {
    let sql = format!(
        "SELECT COALESCE(MAX(floor_seq), 0) FROM floors WHERE session_id IN ({})",
        in_list(sessions.len())
    );
    Ok(conn
        .query_int(&sql, &session_params(sessions, &[]))?
        .unwrap_or(0))
}

/// Reads up to `limit` events of `sessions` after `after`, re-checking the floors so a page can
/// never hide events that cleanup removed meanwhile.
fn read_page(
    conn: &dyn Sql,
    epoch: &str,
    sessions: &[String],
    after: i64,
    limit: usize,
    encode: Encoder,
) -> Result<std::result::Result<Page, ResyncReason>> {
    if after < max_floor(conn, sessions)? {
        return Ok(Err(ResyncReason::Expired));
    }
    let sql = format!(
        "SELECT id, session_id, turn_id, ts, kind, data FROM events
         WHERE session_id IN ({}) AND id > ? ORDER BY id LIMIT ?",
        in_list(sessions.len())
    );
    let mut chunks = Vec::new();
    let mut buf = BytesMut::new();
    let mut events = 0;
    let mut last_seq = after;
    // Each row is borrowed straight from the database's row: no allocation per column.
    conn.for_each_event(
        &sql,
        &session_params(sessions, &[after, limit as i64]),
        &mut |e| {
            if buf.is_empty() {
                buf.reserve(CHUNK_BYTES + e.data.len() + 256);
            }
            encode(&mut buf, epoch, &e);
            events += 1;
            last_seq = e.seq;
            if buf.len() >= CHUNK_BYTES {
                chunks.push(buf.split().freeze());
            }
            Ok(())
        },
    )?;
    if !buf.is_empty() {
        chunks.push(buf.freeze());
    }
    Ok(Ok(Page {
        chunks,
        events,
        last_seq,
        complete: events < limit,
    }))
}

/// Parameters for a query over `IN (sessions...)` followed by integer parameters.
fn session_params<'a>(sessions: &'a [String], ints: &[i64]) -> Vec<Param<'a>> {
    sessions
        .iter()
        .map(|s| Param::Text(s))
        .chain(ints.iter().map(|i| Param::Int(*i)))
        .collect()
}

/// The active turns of `sessions` as of `at`, each folded from its events up to `at`.
fn snapshot_at(conn: &dyn Sql, epoch: &str, sessions: &[String], at: i64) -> Result<Snapshot> {
    let sql = format!(
        "SELECT {TURN_COLUMNS} FROM turns WHERE session_id IN ({}) AND queued_seq <= ?
         AND (ended_seq IS NULL OR ended_seq > ?) ORDER BY queued_seq",
        in_list(sessions.len())
    );
    let rows = turns(conn, &sql, &session_params(sessions, &[at, at]))?;
    let mut active_turns = Vec::with_capacity(rows.len());
    for turn in rows {
        // Active as of `at`: its `turn_ended` (if any) is after `at`, so the fold stops short of it.
        active_turns.push(fold_turn(conn, &turn, at)?);
    }
    Ok(Snapshot {
        cursor: Cursor::new(epoch, at).to_string(),
        active_turns,
    })
}

impl Journal {
    /// Opens a stream: validates the resume position (`None`: the head) and, in the same read
    /// transaction, builds the snapshot (if asked) and the first page of replay.
    pub async fn stream_start(
        &self,
        sessions: Vec<String>,
        resume: Option<String>,
        snapshot: bool,
        page_limit: usize,
        encode: Encoder,
    ) -> Result<std::result::Result<StreamStart, ResyncReason>> {
        self.read(move |conn, epoch| {
            let resume_seq = match &resume {
                Some(r) => match validate(conn, epoch, &sessions, r)? {
                    Ok(seq) => seq,
                    Err(reason) => return Ok(Err(reason)),
                },
                None => conn.head()?,
            };
            let snapshot = if snapshot {
                Some(snapshot_at(conn, epoch, &sessions, resume_seq)?)
            } else {
                None
            };
            let page = match read_page(conn, epoch, &sessions, resume_seq, page_limit, encode)? {
                Ok(p) => p,
                Err(reason) => return Ok(Err(reason)),
            };
            Ok(Ok(StreamStart {
                snapshot,
                page,
                resume_seq,
            }))
        })
        .await
    }

    /// The next page of replay after `after`.
    pub async fn read_after(
        &self,
        sessions: Vec<String>,
        after: i64,
        limit: usize,
        encode: Encoder,
    ) -> Result<std::result::Result<Page, ResyncReason>> {
        self.read(move |conn, epoch| read_page(conn, epoch, &sessions, after, limit, encode))
            .await
    }
}
