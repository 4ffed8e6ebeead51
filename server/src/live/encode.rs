//! SSE framing, in one place: how a journal event, a snapshot, a resync, a token expiry and
//! presence go
//! on the wire. Live delivery (after a commit), replay (a journal read) and the replay tail all
//! produce the same bytes for the same event, because they all come from here.

use bytes::BytesMut;
use turnstream_protocol::{
    sse, Cursor, ResyncReason, ResyncRequired, Snapshot, RESYNC_EVENT, SNAPSHOT_EVENT,
    TOKEN_EXPIRED_EVENT,
};

use crate::journal::EventRow;
use crate::presence::roster::{Diff, RosterView};

/// The event name of a session's roster (contract v1.3).
pub const PRESENCE_EVENT: &str = "presence";
/// The event name of a change to it.
pub const PRESENCE_DIFF_EVENT: &str = "presence_diff";

/// The JSON of an event from its stored body: the envelope fields spliced in front of the body's
/// own fields, so replay never re-parses a payload.
pub fn event_json(
    cursor: &str,
    session_id: &str,
    ts: i64,
    turn_id: Option<&str>,
    data: &str,
) -> String {
    let mut s = String::with_capacity(data.len() + 128);
    s.push_str("{\"id\":");
    s.push_str(&json_str(cursor));
    s.push_str(",\"session_id\":");
    s.push_str(&json_str(session_id));
    s.push_str(",\"ts\":");
    s.push_str(&ts.to_string());
    if let Some(t) = turn_id {
        s.push_str(",\"turn_id\":");
        s.push_str(&json_str(t));
    }
    match data.strip_prefix('{') {
        Some(rest) if rest.trim_start() != "}" => {
            s.push(',');
            s.push_str(rest);
        }
        _ => s.push('}'),
    }
    s
}

fn json_str(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "\"\"".into())
}

/// One journal event's SSE frame.
pub fn event_frame(epoch: &str, e: &EventRow<'_>) -> String {
    let cursor = Cursor::new(epoch, e.seq).to_string();
    let json = event_json(&cursor, e.session_id, e.ts, e.turn_id, e.data);
    sse::encode(Some(&cursor), e.kind, &json)
}

/// Appends one journal event's SSE frame to `buf`: the same bytes as [`event_frame`], without
/// the intermediate strings (replay's hot path).
pub fn write_event(buf: &mut BytesMut, epoch: &str, e: &EventRow<'_>) {
    let plain = |s: &str| {
        s.bytes()
            .all(|b| b.is_ascii_graphic() && b != b'"' && b != b'\\')
    };
    if e.data.contains(['\n', '\r']) || !plain(e.session_id) || !e.turn_id.is_none_or(plain) {
        // Never for stored events (ids are validated, JSON has no raw newlines); kept exact anyway.
        buf.extend_from_slice(event_frame(epoch, e).as_bytes());
        return;
    }
    let mut n = itoa::Buffer::new();
    let seq = n.format(e.seq).as_bytes();
    let parts: [&[u8]; 12] = [
        b"id: ",
        epoch.as_bytes(),
        b"-",
        seq,
        b"\nevent: ",
        e.kind.as_bytes(),
        b"\ndata: {\"id\":\"",
        epoch.as_bytes(),
        b"-",
        seq,
        b"\",\"session_id\":\"",
        e.session_id.as_bytes(),
    ];
    for p in parts {
        buf.extend_from_slice(p);
    }
    let mut t = itoa::Buffer::new();
    buf.extend_from_slice(b"\",\"ts\":");
    buf.extend_from_slice(t.format(e.ts).as_bytes());
    if let Some(t) = e.turn_id {
        buf.extend_from_slice(b",\"turn_id\":\"");
        buf.extend_from_slice(t.as_bytes());
        buf.extend_from_slice(b"\"");
    }
    match e.data.strip_prefix('{') {
        Some(rest) if rest.trim_start() != "}" => {
            buf.extend_from_slice(b",");
            buf.extend_from_slice(rest.as_bytes());
        }
        _ => buf.extend_from_slice(b"}"),
    }
    buf.extend_from_slice(b"\n\n");
}

/// A stream's snapshot (no id: it is not a journal position).
pub fn snapshot_frame(snapshot: &Snapshot) -> serde_json::Result<String> {
    Ok(sse::encode(
        None,
        SNAPSHOT_EVENT,
        &serde_json::to_string(snapshot)?,
    ))
}

/// The `presence` frame of a session: its roster now (no id: presence is not a journal
/// position, and never moves `Last-Event-ID`).
pub fn presence_frame(roster: &RosterView) -> String {
    let json = serde_json::to_string(roster).unwrap_or_else(|_| "{}".into());
    sse::encode(None, PRESENCE_EVENT, &json)
}

/// A `presence_diff` frame (no id, as [`presence_frame`]).
pub fn presence_diff_frame(diff: &Diff) -> String {
    let json = serde_json::to_string(diff).unwrap_or_else(|_| "{}".into());
    sse::encode(None, PRESENCE_DIFF_EVENT, &json)
}

/// The frame that tells a client to resync, and why.
pub fn resync_frame(reason: ResyncReason) -> String {
    let json = serde_json::to_string(&ResyncRequired { reason })
        .unwrap_or_else(|_| format!("{{\"reason\":\"{}\"}}", reason.as_str()));
    sse::encode(None, RESYNC_EVENT, &json)
}

/// The frame that ends a stream whose token expired (no id: the client resumes after the last
/// event it got, with a new token).
pub fn token_expired_frame() -> String {
    sse::encode(None, TOKEN_EXPIRED_EVENT, r#"{"reason":"expired"}"#)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replay_frames_are_the_live_frames_byte_for_byte() {
        let cases: [(&str, Option<&str>, &str, &str); 4] = [
            (
                "s1",
                Some("turn_1"),
                "response_delta",
                r#"{"delta":"hé \"x\"\\n","kind":"response_delta"}"#,
            ),
            (
                "a.b:c-d_e",
                None,
                "turn_queued",
                r#"{"kind":"turn_queued"}"#,
            ),
            ("s", Some("t"), "weird", "{}"),
            ("has\"quote", Some("t"), "thinking", "{\"delta\":\"a\nb\"}"),
        ];
        for (session_id, turn_id, kind, data) in cases {
            let e = EventRow {
                seq: 42,
                session_id,
                turn_id,
                ts: 7,
                kind,
                data,
            };
            let mut buf = BytesMut::new();
            write_event(&mut buf, "ep0ch", &e);
            assert_eq!(
                std::str::from_utf8(&buf).unwrap_or(""),
                event_frame("ep0ch", &e)
            );
        }
    }
}
