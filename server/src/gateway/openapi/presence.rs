//! The presence routes of the API description (contract v1.3), merged into [`super::ApiDoc`]:
//! `GET` and `POST /api/sessions/{session}/presence` and their schemas. Joining and watching
//! are parameters of `GET /api/stream`, described there.

use turnstream_protocol::ErrorBody;
use utoipa::OpenApi;

use super::{InternalError, TokenErrors};
use crate::gateway::presence::PresenceUpdate;
use crate::presence::roster::{MemberView, PresenceDiff, RosterView};

#[derive(OpenApi)]
#[openapi(
    paths(presence_roster, presence_update),
    components(schemas(RosterView, MemberView, PresenceDiff, PresenceUpdate)),
    tags((name = "presence", description = "v1.3: who is in a session and who is typing; never journaled.")),
)]
pub struct PresenceApi;

#[utoipa::path(
    get,
    path = "/api/sessions/{session}/presence",
    tag = "presence",
    summary = "v1.3: the session's presence roster now (the same JSON as the stream's `presence` frame).",
    params(("session" = String, Path, description = "Session id.")),
    responses(
        (status = 200, description = "The roster: members listed up to `--max-presence-members`, and `count` of them all.", body = RosterView,
            headers(("Cache-Control" = String, description = "`no-store`."))),
        (status = 400, description = "`invalid_session_id`, `invalid_path`.", body = ErrorBody),
        TokenErrors,
        (status = 403, description = "`forbidden`: the token does not allow `read` on this session.", body = ErrorBody),
        InternalError,
    ),
    security(("bearer" = []), ("service_key" = []), ("access_token" = [])),
)]
fn presence_roster() {}

#[utoipa::path(
    post,
    path = "/api/sessions/{session}/presence",
    tag = "presence",
    summary = "v1.3: replaces the state of the caller's member (its `client` has a stream open with `presence=1`); every other stream of the session gets a `presence_diff`.",
    params(("session" = String, Path, description = "Session id.")),
    request_body(content = PresenceUpdate, content_type = "application/json"),
    responses(
        (status = 204, description = "Set; the diff is on its way to every stream of the session."),
        (status = 400, description = "`invalid_json`, `invalid_session_id`, `invalid_path`, `invalid_client_id`, `invalid_presence_state` (not an object).", body = ErrorBody),
        TokenErrors,
        (status = 403, description = "`forbidden`: the token does not allow `read` on this session.", body = ErrorBody),
        (status = 404, description = "`not_present`: no member of that client (and of this token's user) in the session.", body = ErrorBody),
        (status = 413, description = "`presence_state_too_large`: the state is over 1 KiB of JSON; `body_too_large`.", body = ErrorBody),
        (status = 415, description = "`unsupported_media_type`.", body = ErrorBody),
        (status = 422, description = "`invalid_body`: no `client` or no `state`.", body = ErrorBody),
        (status = 429, description = "`rate_limited`: more than 10 updates a second for this member; `Retry-After` says when to retry.", body = ErrorBody,
            headers(("Retry-After" = u64, description = "Seconds to wait."))),
        InternalError,
    ),
    security(("bearer" = []), ("service_key" = []), ("access_token" = [])),
)]
fn presence_update() {}
