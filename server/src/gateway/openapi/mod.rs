//! The API description, `GET /api/openapi.json`: an OpenAPI 3.1 document whose schemas are
//! derived from the wire types of `turnstream-protocol` (its `openapi` feature), with every
//! route of `docs/protocol.md`, its errors, the security schemes and the SSE frames.
//!
//! The operations are declared here on bodiless functions rather than on the handlers, so the
//! whole contract reads in one place and the handlers stay as they are; a test against the real
//! binary keeps the route list in step with `docs/protocol.md`. The worker API's operations are
//! in [`worker`].
#![allow(dead_code)] // The functions below exist for their `#[utoipa::path]` attributes.

use std::sync::OnceLock;

use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use turnstream_protocol::worker::{
    Answer, ClaimRequest, ClaimResponse, ClaimedTurn, CompleteRequest, Continuation, EventsRequest,
    FailRequest, HeartbeatRequest, LeaseGrant, WaitRequest, WorkerAck, WorkerError, WorkerEvent,
};
use turnstream_protocol::{
    ActiveTurn, Attachment, CancelResponse, ClearRealtimeResponse, ErrorBody, ErrorDetail, Event,
    EventBody, HistoryResponse, Message, MessageStatus, PostMessageRequest, PostMessageResponse,
    ResyncReason, ResyncRequired, Role, Snapshot, TokenExpired, ToolCall, ToolStatus, Truncation,
    TurnInfo, TurnState, Usage,
};
use turnstream_protocol::{
    InputAnswerRequest, InputAnswerResponse, InputGiven, InputRequest, OnBusy, RawJson,
    RegenerateRequest, RegenerateResponse, RequestKind, Siblings, SwitchBranchRequest,
    SwitchBranchResponse, ToolRequest, TurnRequest,
};
use utoipa::openapi::security::{ApiKey, ApiKeyValue, HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{IntoResponses, Modify, OpenApi, ToSchema};

use super::error::AppError;

mod worker;

#[derive(OpenApi)]
#[openapi(
    info(
        title = "turnstream",
        description = "Durable, resumable realtime streams for AI chat: one ordered journal of \
            everything a browser shows during a chat turn, delivered by one SSE stream. The \
            contract, with the behaviour behind each route, is docs/protocol.md. Routes under \
            /api take a credential when the server is started with --auth-secret, \
            --auth-secret-file, --auth-public-key or --service-key, and none otherwise. This \
            document itself is public.",
        license(name = "MIT OR Apache-2.0"),
    ),
    paths(
        post_message,
        history,
        stream,
        turn,
        cancel,
        give_input,
        regenerate,
        switch_branch,
        clear_realtime,
        openapi_json,
        healthz,
        readyz,
        metrics,
        worker::worker_claim,
        worker::worker_events,
        worker::worker_heartbeat,
        worker::worker_complete,
        worker::worker_fail,
        worker::worker_wait,
    ),
    components(schemas(
        PostMessageRequest,
        PostMessageResponse,
        HistoryResponse,
        Message,
        Attachment,
        Role,
        MessageStatus,
        TurnInfo,
        TurnState,
        Usage,
        CancelResponse,
        ClearRealtimeResponse,
        ErrorBody,
        ErrorDetail,
        StreamFrame,
        Event,
        EventBody,
        ToolCall,
        ToolStatus,
        Truncation,
        Snapshot,
        ActiveTurn,
        ResyncRequired,
        ResyncReason,
        TokenExpired,
        StatusBody,
        ClaimRequest,
        ClaimResponse,
        ClaimedTurn,
        LeaseGrant,
        WorkerEvent,
        EventsRequest,
        HeartbeatRequest,
        CompleteRequest,
        FailRequest,
        WorkerError,
        WorkerAck,
        SeqGapBody,
        InputRequest,
        InputGiven,
        RequestKind,
        ToolRequest,
        TurnRequest,
        RawJson,
        InputAnswerRequest,
        InputAnswerResponse,
        InputConflictBody,
        OnBusy,
        WaitRequest,
        Continuation,
        Answer,
        Siblings,
        RegenerateResponse,
        RegenerateRequest,
        SwitchBranchRequest,
        SwitchBranchResponse,
    )),
    modifiers(&SecuritySchemes),
    tags(
        (name = "messages", description = "Sending messages and reading history."),
        (name = "stream", description = "The SSE stream of the journal."),
        (name = "turns", description = "A turn's state, and cancelling it."),
        (name = "operations", description = "Health, readiness, metrics and this document."),
        (name = "worker", description = "Agents in any language (--agent worker): claim turns, stream their output under a lease, end them. Service keys only."),
    ),
)]
pub struct ApiDoc;

/// Security scheme names (the operations spell them out: the macro takes only literals).
const BEARER: &str = "bearer";
const ACCESS_TOKEN: &str = "access_token";
const SERVICE_KEY: &str = "service_key";

/// The three ways a request under `/api` can carry its credential.
struct SecuritySchemes;

impl Modify for SecuritySchemes {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            BEARER,
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .bearer_format("JWT")
                    .description(Some(
                        "A token signed with HS256 (--auth-secret), EdDSA or RS256 \
                         (--auth-public-key): `sub` is the user, `sessions` the session ids or \
                         `PREFIX*` patterns it covers, `scope` among read, write and cancel (all \
                         when absent), `exp` its expiry. `turnstream token` mints one.",
                    ))
                    .build(),
            ),
        );
        components.add_security_scheme(
            ACCESS_TOKEN,
            SecurityScheme::ApiKey(ApiKey::Query(ApiKeyValue::with_description(
                super::ACCESS_TOKEN_PARAM,
                "The same token as a query parameter, for EventSource, which cannot send \
                 headers. The bearer header wins when both are present.",
            ))),
        );
        components.add_security_scheme(
            SERVICE_KEY,
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some(
                        "A key of the app's backend (--service-key), sent as \
                         `Authorization: Bearer <key>`: every session, every scope; it may name \
                         a message's `author`, and is exempt from per-client limits.",
                    ))
                    .build(),
            ),
        );
    }
}

/// One frame of `GET /api/stream`, as its `data:` line carries it. A journaled event's frame has
/// `id: <its cursor>` and `event: <its kind>`; the control frames have no `id:` line and are
/// named `snapshot` (first, when asked for), `history_resync_required` (then the stream
/// closes) and `token_expired` (then the stream ends; reconnect with a fresh token). The stream
/// starts with `retry: 1000` and may carry `: heartbeat` comments.
#[derive(Serialize, ToSchema)]
#[serde(untagged)]
#[allow(clippy::large_enum_variant)] // Never built: it exists for its schema.
enum StreamFrame {
    Event(Event),
    Snapshot(Snapshot),
    HistoryResyncRequired(ResyncRequired),
    TokenExpired(TokenExpired),
}

// The error responses several routes share, each set once.

/// The refusals every request on a claimed turn shares: its opening (a service key, the turn id, the body and its lease token).
#[derive(IntoResponses)]
enum LeasedTurnErrors {
    #[response(status = 400, description = "`invalid_json`, `invalid_turn_id`.")]
    BadRequest(ErrorBody),
    #[response(status = 401, description = "`unauthorized`, `invalid_token`.")]
    Unauthorized(ErrorBody),
    #[response(status = 403, description = "`forbidden`.")]
    Forbidden(ErrorBody),
    #[response(status = 404, description = "`turn_not_found`, `not_found`.")]
    NotFound(ErrorBody),
    #[response(status = 422, description = "`invalid_body`.")]
    InvalidBody(ErrorBody),
}

/// A write the journal could not take: the server is stopping, or its storage fails or is full.
#[derive(IntoResponses)]
enum StorageErrors {
    #[response(
        status = 503,
        description = "`shutting_down`; `storage_unavailable` (with `Retry-After`)."
    )]
    Unavailable(ErrorBody),
    #[response(status = 507, description = "`storage_full` (with `Retry-After`).")]
    Full(ErrorBody),
}

/// A claimed turn's write the journal could not take (a stopping server leaves leased turns to their workers).
#[derive(IntoResponses)]
enum LeasedStorageErrors {
    #[response(
        status = 503,
        description = "`storage_unavailable` (with `Retry-After`)."
    )]
    Unavailable(ErrorBody),
    #[response(status = 507, description = "`storage_full` (with `Retry-After`).")]
    Full(ErrorBody),
}

/// No credential, or one that is not valid (with `WWW-Authenticate: Bearer`).
#[derive(IntoResponses)]
enum TokenErrors {
    #[response(
        status = 401,
        description = "`unauthorized`, `invalid_token`, `token_expired`."
    )]
    Unauthorized(ErrorBody),
}

/// A fault of the server.
#[derive(IntoResponses)]
enum InternalError {
    #[response(status = 500, description = "`internal`.")]
    Internal(ErrorBody),
}

/// The `409 seq_gap` answer of the worker API: the error shape plus the last accepted `seq`.
#[derive(Serialize, ToSchema)]
struct SeqGapBody {
    error: ErrorDetail,
    acked_seq: i64,
}

/// Body of `/healthz` (`ok`) and of a ready `/readyz` (`ready`).
#[derive(Serialize, ToSchema)]
struct StatusBody {
    status: String,
}

#[utoipa::path(
    post,
    path = "/api/sessions/{session}/messages",
    tag = "messages",
    summary = "Send a user message; starts a turn.",
    params(("session" = String, Path, description = "Session id, `[A-Za-z0-9_.:-]{1,128}`.")),
    request_body(content = PostMessageRequest, content_type = "application/json"),
    responses(
        (status = 202, description = "The message and its turn were created.", body = PostMessageResponse),
        (status = 200, description = "Idempotent retry: same `client_message_id`, content and attachments; the original answer.", body = PostMessageResponse),
        (status = 400, description = "`invalid_session_id`, `invalid_path`, `invalid_json`, `empty_content`, `too_many_attachments`, `invalid_attachment` (v1.2), `invalid_client_message_id`, `invalid_author`.", body = ErrorBody),
        (status = 401, description = "`unauthorized`, `invalid_token`, `token_expired` (with `WWW-Authenticate: Bearer`).", body = ErrorBody),
        (status = 403, description = "`forbidden` (the token does not allow `write` on this session, or names another author), `forbidden_origin` (cross-site request).", body = ErrorBody),
        (status = 409, description = "`client_message_id_conflict`: the id was used with other content or attachments.", body = ErrorBody),
        (status = 413, description = "`body_too_large`, `content_too_large` (the content and the `data:` URLs of its attachments together).", body = ErrorBody),
        (status = 415, description = "`unsupported_media_type`.", body = ErrorBody),
        (status = 422, description = "`invalid_body`: JSON of the wrong shape, or (v1.3) a bad `agent`.", body = ErrorBody),
        (status = 429, description = "`too_many_active_turns`; `rate_limited` (with `Retry-After`).", body = ErrorBody),
        InternalError,
        StorageErrors,
    ),
    security(("bearer" = []), ("service_key" = []), ("access_token" = [])),
)]
fn post_message() {}

#[utoipa::path(
    get,
    path = "/api/sessions/{session}/history",
    tag = "messages",
    summary = "A page of history, in conversation order, and its cursor.",
    params(
        ("session" = String, Path, description = "Session id."),
        ("limit" = Option<u32>, Query, minimum = 1, maximum = 1000, description = "Page size, 1-1000 (default 100)."),
        ("before" = Option<String>, Query, description = "A `message_id`: the messages before it."),
        ("leaf" = Option<String>, Query, description = "v1.2: a message id: the branch through it (down to its newest leaf) instead of the active one."),
    ),
    responses(
        (status = 200, description = "The page; stream from `cursor` with `snapshot=1`.", body = HistoryResponse,
            headers(
                ("X-Turnstream-Cursor" = String, description = "The same value as `cursor`."),
                ("Cache-Control" = String, description = "`no-store`."),
            )),
        (status = 400, description = "`invalid_session_id`, `invalid_path`, `invalid_limit`, `invalid_before`.", body = ErrorBody),
        TokenErrors,
        (status = 403, description = "`forbidden`: the token does not allow `read` on this session.", body = ErrorBody),
        (status = 404, description = "`message_not_found`: `before` names no message of this session.", body = ErrorBody),
        InternalError,
    ),
    security(("bearer" = []), ("service_key" = []), ("access_token" = [])),
)]
fn history() {}

#[utoipa::path(
    get,
    path = "/api/stream",
    tag = "stream",
    summary = "The SSE stream of one or more sessions: snapshot, replay, then live events.",
    params(
        ("session" = Vec<String>, Query, explode, description = "Session ids, repeatable: 1-32 distinct."),
        ("cursor" = Option<String>, Query, description = "Resume position (a cursor); empty means absent."),
        ("since" = Option<String>, Query, description = "Another name for `cursor`, with the same rules; empty means absent. Sent with a non-empty `cursor`, it must have the same value (else `400 invalid_cursor`)."),
        ("snapshot" = Option<String>, Query, description = "`1`, `true` or `yes`: send a snapshot first (unless `Last-Event-ID` is sent)."),
        ("Last-Event-ID" = Option<String>, Header, description = "Resume position of an automatic reconnect; wins over `cursor` and `since`."),
    ),
    responses(
        (status = 200, description = "`text/event-stream`: `retry: 1000`, then frames whose `data:` is one of these. A resume position the journal cannot serve gets one `history_resync_required` frame, then the stream closes.",
            content_type = "text/event-stream", body = StreamFrame,
            headers(
                ("Cache-Control" = String, description = "`no-cache`."),
                ("X-Accel-Buffering" = String, description = "`no`."),
            )),
        (status = 400, description = "`missing_session`, `invalid_session_id`, `too_many_sessions`; `invalid_cursor`: `cursor` and `since` differ.", body = ErrorBody),
        TokenErrors,
        (status = 403, description = "`forbidden`: the token does not allow `read` on a session.", body = ErrorBody),
        (status = 429, description = "`too_many_streams`: this client holds `--max-streams-per-client` streams.", body = ErrorBody),
        InternalError,
        (status = 503, description = "`too_many_streams`: `--max-streams` streams are open.", body = ErrorBody),
    ),
    security(("bearer" = []), ("service_key" = []), ("access_token" = [])),
)]
fn stream() {}

#[utoipa::path(
    get,
    path = "/api/turns/{turn}",
    tag = "turns",
    summary = "A turn's state and text.",
    params(("turn" = String, Path, description = "Turn id.")),
    responses(
        (status = 200, description = "The turn.", body = TurnInfo),
        (status = 400, description = "`invalid_turn_id`, `invalid_path`.", body = ErrorBody),
        TokenErrors,
        (status = 403, description = "`forbidden`: the token does not allow `read` on the turn's session.", body = ErrorBody),
        (status = 404, description = "`turn_not_found`.", body = ErrorBody),
        InternalError,
    ),
    security(("bearer" = []), ("service_key" = []), ("access_token" = [])),
)]
fn turn() {}

#[utoipa::path(
    post,
    path = "/api/turns/{turn}/cancel",
    tag = "turns",
    summary = "Cancel a queued or running turn (idempotent on an ended one). No body is needed.",
    params(("turn" = String, Path, description = "Turn id.")),
    responses(
        (status = 200, description = "The turn's state after the request (check it: a turn that completed first says so).", body = CancelResponse),
        (status = 400, description = "`invalid_turn_id`, `invalid_path`.", body = ErrorBody),
        TokenErrors,
        (status = 403, description = "`forbidden` (no `cancel` on the turn's session), `forbidden_origin`.", body = ErrorBody),
        (status = 404, description = "`turn_not_found`.", body = ErrorBody),
        InternalError,
        StorageErrors,
    ),
    security(("bearer" = []), ("service_key" = []), ("access_token" = [])),
)]
fn cancel() {}

/// Body of `409 input_already_given`: the error, and the answer that was first.
#[derive(Serialize, ToSchema)]
struct InputConflictBody {
    error: ErrorDetail,
    request_id: String,
    answer: RawJson,
    /// The first answer's author; `null` without auth or for the server's timeout.
    by: Option<String>,
}

#[utoipa::path(
    post,
    path = "/api/turns/{turn}/input",
    tag = "turns",
    summary = "Answer a request the turn's agent opened (v1.2): the field that fits its kind. The first answer wins.",
    params(("turn" = String, Path, description = "Turn id.")),
    request_body = InputAnswerRequest,
    responses(
        (status = 200, description = "Recorded (or the same answer by the same author again): the turn's state after it, `running` once no request is open.", body = InputAnswerResponse),
        (status = 400, description = "`invalid_input` (a wrong or missing field for the request's kind), `invalid_json`, `invalid_turn_id`.", body = ErrorBody),
        TokenErrors,
        (status = 403, description = "`forbidden` (no `write` on the turn's session), `forbidden_origin`.", body = ErrorBody),
        (status = 404, description = "`turn_not_found`, `request_not_found`.", body = ErrorBody),
        (status = 409, description = "`input_already_given` (with the recorded `answer` and `by`), `turn_ended`.", body = InputConflictBody),
        (status = 429, description = "`rate_limited` (with `Retry-After`).", body = ErrorBody),
        StorageErrors,
    ),
    security(("bearer" = []), ("service_key" = []), ("access_token" = [])),
)]
fn give_input() {}

#[utoipa::path(
    post,
    path = "/api/messages/{message}/regenerate",
    tag = "messages",
    summary = "A new reply to a user message (or to an assistant message's user message), kept beside the earlier ones as a branch (v1.2).",
    params(("message" = String, Path, description = "Message id.")),
    request_body(content = Option<RegenerateRequest>, description = "Optional: `on_busy`, and a `client_request_id` that makes the request idempotent within the session."),
    responses(
        (status = 200, description = "A retry: the session already has a regeneration of this user message with this `client_request_id`. The first answer again (same `turn_id`, `event_id`, `cursor`); nothing starts and nothing is journaled, whatever the turn's state now.", body = RegenerateResponse),
        (status = 202, description = "The new turn, queued like any turn; its reply is the session's active leaf.", body = RegenerateResponse),
        (status = 400, description = "`invalid_message_id`, `invalid_client_request_id`, `invalid_json`, `invalid_path`.", body = ErrorBody),
        TokenErrors,
        (status = 403, description = "`forbidden` (no `write` on the message's session), `forbidden_origin`.", body = ErrorBody),
        (status = 404, description = "`message_not_found`.", body = ErrorBody),
        (status = 409, description = "`client_request_id_conflict` (the id was used for another message of the session); `session_busy` (`on_busy: reject`).", body = ErrorBody),
        (status = 413, description = "`body_too_large`.", body = ErrorBody),
        (status = 415, description = "`unsupported_media_type` (a body that is not JSON).", body = ErrorBody),
        (status = 422, description = "`invalid_body` (JSON of the wrong shape).", body = ErrorBody),
        (status = 429, description = "`too_many_active_turns`; `rate_limited` (with `Retry-After`).", body = ErrorBody),
        StorageErrors,
    ),
    security(("bearer" = []), ("service_key" = []), ("access_token" = [])),
)]
fn regenerate() {}

#[utoipa::path(
    post,
    path = "/api/sessions/{session}/active",
    tag = "messages",
    summary = "Move the session's active leaf (a switch of branch, v1.2): to the newest leaf below any message of the session.",
    params(("session" = String, Path, description = "Session id.")),
    request_body = SwitchBranchRequest,
    responses(
        (status = 200, description = "The active leaf now, and the cursor of its `branch_changed`.", body = SwitchBranchResponse),
        (status = 400, description = "`invalid_leaf_id`, `invalid_session_id`, `invalid_json`, `invalid_path`.", body = ErrorBody),
        TokenErrors,
        (status = 403, description = "`forbidden` (no `write` on this session), `forbidden_origin`.", body = ErrorBody),
        (status = 404, description = "`message_not_found`.", body = ErrorBody),
        StorageErrors,
    ),
    security(("bearer" = []), ("service_key" = []), ("access_token" = [])),
)]
fn switch_branch() {}

#[utoipa::path(
    delete,
    path = "/api/sessions/{session}/realtime",
    tag = "messages",
    summary = "Delete the journal events of a session's finished turns; history stays.",
    params(("session" = String, Path, description = "Session id.")),
    responses(
        (status = 200, description = "How many events were deleted.", body = ClearRealtimeResponse),
        (status = 400, description = "`invalid_session_id`, `invalid_path`.", body = ErrorBody),
        TokenErrors,
        (status = 403, description = "`forbidden` (no `write` on this session), `forbidden_origin`.", body = ErrorBody),
        InternalError,
        StorageErrors,
    ),
    security(("bearer" = []), ("service_key" = []), ("access_token" = [])),
)]
fn clear_realtime() {}

#[utoipa::path(
    get,
    path = "/api/openapi.json",
    tag = "operations",
    summary = "This document (OpenAPI 3.1). Public: no credential is needed, even with auth.",
    responses((status = 200, description = "The OpenAPI document.", body = Object, content_type = "application/json")),
    security(()),
)]
fn openapi_json() {}

#[utoipa::path(
    get,
    path = "/healthz",
    tag = "operations",
    summary = "Liveness.",
    responses((status = 200, description = "`{\"status\": \"ok\"}` while the process serves HTTP.", body = StatusBody)),
    security(()),
)]
fn healthz() {}

#[utoipa::path(
    get,
    path = "/readyz",
    tag = "operations",
    summary = "Readiness: the database answers and the latest journal write succeeded.",
    responses(
        (status = 200, description = "`{\"status\": \"ready\"}`.", body = StatusBody),
        (status = 503, description = "`shutting_down`, `not_ready`; `storage_full` or `storage_unavailable` (with `Retry-After`).", body = ErrorBody),
    ),
    security(()),
)]
fn readyz() {}

#[utoipa::path(
    get,
    path = "/metrics",
    tag = "operations",
    summary = "Prometheus metrics.",
    responses((status = 200, description = "Prometheus text format.", body = String, content_type = "text/plain; version=0.0.4")),
    security(()),
)]
fn metrics() {}

/// The document as JSON, built once.
fn document() -> Result<&'static str, AppError> {
    static DOCUMENT: OnceLock<Result<String, String>> = OnceLock::new();
    DOCUMENT
        .get_or_init(|| ApiDoc::openapi().to_json().map_err(|e| e.to_string()))
        .as_deref()
        .map_err(|e| {
            AppError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal",
                format!("cannot build the API description: {e}"),
            )
        })
}

/// `GET /api/openapi.json`: outside the `/api` auth middleware, since the description is public.
pub(crate) async fn serve() -> Result<Response, AppError> {
    Ok(([(header::CONTENT_TYPE, "application/json")], document()?).into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_document_builds_and_is_openapi_3_1() -> Result<(), Box<dyn std::error::Error>> {
        let doc: serde_json::Value = serde_json::from_str(document().map_err(|e| e.message)?)?;
        assert!(doc["openapi"]
            .as_str()
            .is_some_and(|v| v.starts_with("3.1.")));
        Ok(())
    }
}
