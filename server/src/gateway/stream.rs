//! `GET /api/stream`: one SSE stream per tab, over any number of sessions (up to a limit).
//!
//! Attach to the live feed first, then replay from the resume position: from the hub's replay
//! tail when it covers that position (taken in the same step as the attach), else from the
//! journal (snapshot and replay in one read transaction). Then send live frames, dropping those
//! already sent. A subscriber that falls behind goes back to the journal from the last id it sent.

use std::sync::atomic::Ordering;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{RawQuery, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::Response;
use axum::Extension;
use bytes::Bytes;
use turnstream_protocol::limits::{is_valid_id, MAX_SESSIONS_PER_STREAM};
use turnstream_protocol::{Cursor, ResyncReason};

use super::error::AppError;
use super::pump::{ConnectionGuard, Pump, REPLAY_PAGE};
use super::{access, AppState, Peer};
use crate::auth::{Principal, Scope};
use crate::journal::{Journal, StreamStart};
use crate::live::encode;
use crate::live::hub::TailReplay;
use crate::presence::{Mode, Taken};
use tokio::time::Instant;
/// Most events a resume takes from the replay tail at once (the rest, if any, from the journal).
const TAIL_PAGE: usize = 20_000;
/// Reconnection delay suggested to EventSource.
const RETRY_MS: u64 = 1000;

#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct StreamParams {
    pub sessions: Vec<String>,
    pub cursor: Option<String>,
    pub snapshot: bool,
    /// `presence=1` (join) or `presence=watch` (contract v1.3); none without it.
    pub presence: Option<PresenceParam>,
    /// `client=`: the member's id, for `presence=1`.
    pub client: Option<String>,
}

/// What a stream asked of presence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PresenceParam {
    Join,
    Watch,
}

/// Parses the query of `/api/stream`. `since` is another name for `cursor`, for clients that
/// resume with `?since=`: either gives the resume position, and both only with the same value.
pub(crate) fn parse_params(query: Option<&str>) -> Result<StreamParams, AppError> {
    let mut p = StreamParams::default();
    let mut since = None;
    for (k, v) in form_urlencoded::parse(query.unwrap_or("").as_bytes()) {
        match &*k {
            "session" => {
                if !is_valid_id(&v) {
                    return Err(AppError::bad_request(
                        "invalid_session_id",
                        "session ids are 1 to 128 characters of [A-Za-z0-9_.:-]",
                    ));
                }
                if !p.sessions.iter().any(|s| *s == *v) {
                    p.sessions.push(v.into_owned());
                }
            }
            "cursor" if !v.is_empty() => p.cursor = Some(v.into_owned()),
            "since" if !v.is_empty() => since = Some(v.into_owned()),
            "snapshot" => p.snapshot = matches!(&*v, "1" | "true" | "yes"),
            "presence" => {
                p.presence = match &*v {
                    "1" | "true" | "yes" => Some(PresenceParam::Join),
                    "watch" => Some(PresenceParam::Watch),
                    "" | "0" | "false" | "no" => None,
                    _ => {
                        return Err(AppError::bad_request(
                            "invalid_presence",
                            "presence is 1 (join the sessions as the member `client`) or watch",
                        ))
                    }
                }
            }
            "client" => {
                if !super::presence::is_valid_client(&v) {
                    return Err(super::presence::invalid_client());
                }
                p.client = Some(v.into_owned());
            }
            _ => {}
        }
    }
    if p.presence == Some(PresenceParam::Join) && p.client.is_none() {
        return Err(AppError::bad_request(
            "invalid_client_id",
            "presence=1 needs client=ID: 1 to 64 characters of [A-Za-z0-9_.:-]",
        ));
    }
    if p.sessions.is_empty() {
        return Err(AppError::bad_request(
            "missing_session",
            "subscribe to at least one session with ?session=ID",
        ));
    }
    if p.sessions.len() > MAX_SESSIONS_PER_STREAM {
        return Err(AppError::bad_request(
            "too_many_sessions",
            format!("a stream may subscribe to at most {MAX_SESSIONS_PER_STREAM} sessions"),
        ));
    }
    match (&p.cursor, since) {
        (Some(cursor), Some(since)) if *cursor != since => {
            return Err(AppError::bad_request(
                "invalid_cursor",
                "cursor and since both name the resume position and differ: send one of them",
            ))
        }
        (None, since @ Some(_)) => p.cursor = since,
        _ => {}
    }
    Ok(p)
}

pub(crate) async fn stream(
    State(state): State<AppState>,
    Extension(principal): Extension<Principal>,
    peer: Peer,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
) -> Result<Response, AppError> {
    let params = parse_params(query.as_deref())?;
    for session in &params.sessions {
        access::require(&principal, Scope::Read, session)?;
    }
    let client_slot = match access::client_key(&principal, peer.as_ref().map(|Extension(c)| c)) {
        Some(client) => match state.client_streams.open(&client) {
            Some(slot) => Some(slot),
            None => {
                return Err(super::quota::too_many_client_streams(
                    state.limits.max_streams_per_client,
                ))
            }
        },
        None => None,
    };
    // The stream is authorised now; it ends when its token does (the client then resumes with
    // a fresh one from its last event id).
    let expires = principal.expires_at().map(|at| {
        let left = at
            .duration_since(std::time::SystemTime::now())
            .unwrap_or(Duration::ZERO);
        Instant::now() + left
    });
    let last_event_id = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .map(str::to_string);
    let want_snapshot = params.snapshot && last_event_id.is_none();
    // An automatic reconnect's Last-Event-ID is newer than the URL's `cursor` (or `since`).
    let resume = last_event_id.or(params.cursor);
    let metrics = state.journal.metrics();
    let Some(guard) = ConnectionGuard::try_new(metrics.clone(), state.limits.max_streams) else {
        return Err(too_many_streams());
    };
    // Joined (or watching) before the journal is read; its rosters follow `retry:` and the
    // snapshot, and its diffs are queued from this moment on.
    let presence = match params.presence {
        None => None,
        Some(how) => {
            let mode = match (how, &params.client) {
                (PresenceParam::Join, Some(client)) => Mode::Join {
                    client: client.clone(),
                    user: principal.author().map(str::to_string),
                },
                _ => Mode::Watch,
            };
            match state.presence.attach(&params.sessions, mode) {
                Ok(attached) => Some(attached),
                Err(Taken) => {
                    return Err(AppError::new(
                        StatusCode::CONFLICT,
                        "presence_client_taken",
                        "this client is another user's member of a session of the stream",
                    ))
                }
            }
        }
    };
    // Attach first, so nothing that commits while the journal is read can be missed. A resume
    // from a recent position is answered from the hub's replay tail in the same step, without a
    // journal read; anything else (a snapshot, an old, invalid or foreign position) reads it.
    let recent = match &resume {
        Some(r) if !want_snapshot => recent_position(&state.journal, r),
        _ => None,
    };
    let (sub, tail) = state
        .hub
        .subscribe_after(&params.sessions, recent, TAIL_PAGE);
    let start = match (tail, recent) {
        (Some(tail), Some(after)) => {
            metrics.tail_replays.fetch_add(1, Ordering::Relaxed);
            Start::Tail(tail, after)
        }
        _ => Start::Journal(
            state
                .journal
                .stream_start(
                    params.sessions.clone(),
                    resume,
                    want_snapshot,
                    REPLAY_PAGE,
                    encode::write_event,
                )
                .await?,
        ),
    };
    let mut prelude = format!("retry: {RETRY_MS}\n\n");
    drop(params.sessions);
    let mut pump = Pump::new(
        sub,
        state.journal.clone(),
        expires,
        state.limits.heartbeat,
        guard,
        client_slot,
    );
    let (presence, rosters) = presence.map_or((None, None), |(a, r)| (Some(a), Some(r)));
    let mut resyncing = false;
    match start {
        Start::Tail(tail, after) => pump.start_from_tail(tail, after),
        Start::Journal(Err(reason)) => {
            pump.metrics().resync(reason);
            prelude.push_str(&encode::resync_frame(reason));
            resyncing = true;
        }
        Start::Journal(Ok(start)) => {
            if let Some(snapshot) = &start.snapshot {
                let frame = encode::snapshot_frame(snapshot)
                    .map_err(|e| AppError::from(crate::error::Error::from(e)))?;
                prelude.push_str(&frame);
            }
            pump.start_from_page(start.page, start.resume_seq);
        }
    }
    // Right after `retry:` and the snapshot (a stream told to resync ends with no presence).
    if !resyncing {
        if let Some(rosters) = rosters {
            prelude.push_str(&rosters);
        }
        pump.set_presence(presence);
    }
    pump.prepend(Bytes::from(prelude));
    let body = Body::new(pump);
    let mut res = Response::new(body);
    let h = res.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert("x-accel-buffering", HeaderValue::from_static("no"));
    Ok(res)
}

/// The sequence of a valid resume position of this journal, if it is not ahead of the head
/// (the journal read reports every other case).
fn recent_position(journal: &Journal, resume: &str) -> Option<i64> {
    let cursor = resume.parse::<Cursor>().ok()?;
    (cursor.epoch == journal.epoch() && cursor.sequence <= journal.head())
        .then_some(cursor.sequence)
}

/// Where a stream starts: frames from the hub's replay tail after a position, or what the
/// journal read (a first page, or why the client must resync).
enum Start {
    Tail(TailReplay, i64),
    Journal(Result<StreamStart, ResyncReason>),
}

fn too_many_streams() -> AppError {
    AppError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "too_many_streams",
        "the server has as many open streams as it allows; retry later",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn params() {
        let p = parse_params(Some("session=a&session=b&session=a&cursor=x-1&snapshot=1"))
            .unwrap_or_default();
        assert_eq!(p.sessions, vec!["a", "b"]);
        assert_eq!(p.cursor.as_deref(), Some("x-1"));
        assert!(p.snapshot);
        assert!(parse_params(Some("cursor=x-1")).is_err());
        assert!(parse_params(Some("session=a%20b")).is_err());
        let many: Vec<String> = (0..=MAX_SESSIONS_PER_STREAM)
            .map(|i| format!("session=s{i}"))
            .collect();
        assert!(parse_params(Some(&many.join("&"))).is_err());
    }

    #[test]
    fn since_is_cursor_by_another_name() {
        let cursor = |q: &str| parse_params(Some(q)).map(|p| p.cursor);
        assert_eq!(cursor("session=a&since=x-1").ok(), Some(Some("x-1".into())));
        assert_eq!(
            cursor("session=a&since=x-1&cursor=x-1").ok(),
            Some(Some("x-1".into()))
        );
        // Empty means absent, for either name.
        assert_eq!(cursor("session=a&since=").ok(), Some(None));
        assert_eq!(
            cursor("session=a&since=&cursor=x-1").ok(),
            Some(Some("x-1".into()))
        );
        assert_eq!(
            cursor("session=a&since=x-1&cursor=").ok(),
            Some(Some("x-1".into()))
        );
        // Not checked as a cursor here: an unparsable one gets the stream's resync, as `cursor`.
        assert_eq!(
            cursor("session=a&since=garbage").ok(),
            Some(Some("garbage".into()))
        );
        let err = parse_params(Some("session=a&cursor=x-1&since=x-2")).err();
        assert_eq!(
            err.map(|e| (e.status, e.code)),
            Some((StatusCode::BAD_REQUEST, "invalid_cursor"))
        );
    }
}
