//! The worker API's operations (contract v1.1, `wait` v1.2, calls v1.3) in the API description.
#![allow(dead_code)] // The functions below exist for their `#[utoipa::path]` attributes.

use turnstream_protocol::worker::{
    ClaimRequest, ClaimResponse, CompleteRequest, EventsRequest, FailRequest, HeartbeatRequest,
    WaitRequest, WorkerAck,
};
use turnstream_protocol::ErrorBody;

use super::{LeasedStorageErrors, LeasedTurnErrors, SeqGapBody, StorageErrors};

#[utoipa::path(
    post,
    path = "/api/worker/claim",
    tag = "worker",
    summary = "Claim the oldest queued turns (one per session; v1.3: of the named `agents` only), long-polling up to `wait_ms`.",
    request_body = ClaimRequest,
    responses(
        (status = 200, description = "The claimed turns, each `running` under a lease (`[]` when none came in time).", body = ClaimResponse),
        (status = 400, description = "`invalid_json`.", body = ErrorBody),
        (status = 401, description = "`unauthorized`, `invalid_token`.", body = ErrorBody),
        (status = 403, description = "`forbidden`: not a service key, or no auth configured.", body = ErrorBody),
        (status = 404, description = "`not_found`: the server does not run `--agent worker`.", body = ErrorBody),
        (status = 422, description = "`invalid_body`: wrong shape or a value out of range (v1.3: `agents` empty, over 32 names, or a bad name).", body = ErrorBody),
        StorageErrors,
    ),
    security(("service_key" = [])),
)]
pub(super) fn worker_claim() {}

#[utoipa::path(
    post,
    path = "/api/worker/turns/{turn}/events",
    tag = "worker",
    summary = "Append a claimed turn's output, and (v1.3) open its `call` events' calls; `seq` makes retries safe. A refused call refuses the whole batch.",
    params(("turn" = String, Path, description = "Turn id.")),
    request_body = EventsRequest,
    responses(
        (status = 200, description = "Accepted (or already accepted: nothing appended twice).", body = WorkerAck),
        LeasedTurnErrors,
        (status = 409, description = "`lease_lost`, `turn_cancelled`, `turn_ended`; `seq_gap` with `acked_seq`; v1.3: `call_cycle` (a call into a session on the caller's own chain), `call_depth_exceeded` (more than 8 calls deep).", body = SeqGapBody),
        (status = 503, description = "`storage_unavailable` (with `Retry-After`): retry with the same `seq`.", body = ErrorBody),
        (status = 507, description = "`storage_full` (with `Retry-After`).", body = ErrorBody),
    ),
    security(("service_key" = [])),
)]
pub(super) fn worker_events() {}

#[utoipa::path(
    post,
    path = "/api/worker/turns/{turn}/heartbeat",
    tag = "worker",
    summary = "Renew the lease; answers the turn's state (a cancel shows here).",
    params(("turn" = String, Path, description = "Turn id.")),
    request_body = HeartbeatRequest,
    responses(
        (status = 200, description = "The lease renewed, and the turn's state.", body = WorkerAck),
        LeasedTurnErrors,
        (status = 409, description = "`lease_lost`.", body = ErrorBody),
    ),
    security(("service_key" = [])),
)]
pub(super) fn worker_heartbeat() {}

#[utoipa::path(
    post,
    path = "/api/worker/turns/{turn}/complete",
    tag = "worker",
    summary = "End the turn `completed`; the reply is the response deltas accepted.",
    params(("turn" = String, Path, description = "Turn id.")),
    request_body = CompleteRequest,
    responses(
        (status = 200, description = "The turn's end (the same answer when repeated).", body = WorkerAck),
        LeasedTurnErrors,
        (status = 409, description = "`lease_lost`, `turn_cancelled`; `seq_gap` with `acked_seq`.", body = SeqGapBody),
        LeasedStorageErrors,
    ),
    security(("service_key" = [])),
)]
pub(super) fn worker_complete() {}

#[utoipa::path(
    post,
    path = "/api/worker/turns/{turn}/fail",
    tag = "worker",
    summary = "End the turn `failed` with an error; the text accepted so far is kept.",
    params(("turn" = String, Path, description = "Turn id.")),
    request_body = FailRequest,
    responses(
        (status = 200, description = "The turn's end (the same answer when repeated).", body = WorkerAck),
        LeasedTurnErrors,
        (status = 409, description = "`lease_lost`, `turn_cancelled`; `seq_gap` with `acked_seq`.", body = SeqGapBody),
        LeasedStorageErrors,
    ),
    security(("service_key" = [])),
)]
pub(super) fn worker_fail() {}

#[utoipa::path(
    post,
    path = "/api/worker/turns/{turn}/wait",
    tag = "worker",
    summary = "End the lease after `input_requested` events (v1.2): the turn waits; once answered it is claimable again, with a `continuation`.",
    params(("turn" = String, Path, description = "Turn id.")),
    request_body = WaitRequest,
    responses(
        (status = 200, description = "`state` is `waiting`, or `running` when every request was answered already (claim it again).", body = WorkerAck),
        LeasedTurnErrors,
        (status = 409, description = "`lease_lost`, `turn_cancelled`; `seq_gap` with `acked_seq`.", body = SeqGapBody),
        LeasedStorageErrors,
    ),
    security(("service_key" = [])),
)]
pub(super) fn worker_wait() {}
