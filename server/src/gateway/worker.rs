//! The worker API (contract v1.1): `POST /api/worker/claim` and, per claimed turn, `events`,
//! `heartbeat`, `complete` and `fail`; and (v1.2) `wait`, after the turn's agent asked for input. Only service keys may use it, and only a server started
//! with `--agent worker` serves it.

use std::sync::Arc;

use axum::extract::{FromRequest, FromRequestParts, Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Extension, Json, Router};
use serde::de::DeserializeOwned;
use turnstream_protocol::call::{is_valid_agent, MAX_AGENT_LEN, MAX_CLAIM_AGENTS};
use turnstream_protocol::limits::is_valid_id;
use turnstream_protocol::worker::{
    ClaimRequest, ClaimResponse, ClaimedTurn, CompleteRequest, EventsRequest, FailRequest,
    HeartbeatRequest, LeaseGrant, WaitRequest, WorkerAck, WorkerEvent, MAX_CLAIM_TURNS,
    MAX_CLAIM_WAIT_MS, MAX_WORKER_ERROR_BYTES, MAX_WORKER_EVENTS,
};
use turnstream_protocol::{ErrorDetail, RequestKind, ToolCall, TurnState};

use super::error::AppError;
use super::extract::{Body, TurnId};
use super::AppState;
use crate::auth::Principal;
use crate::journal::{Refusal, WorkerOp};
use crate::turns::coalesce::worker_events;
use crate::turns::{Dispatch, AGENT_HISTORY};

/// Longest lease token accepted (a real one is 36 characters).
const MAX_LEASE_TOKEN_LEN: usize = 128;
/// Longest tool name, in bytes.
const MAX_TOOL_NAME_BYTES: usize = 256;

/// The routes, nested under `/api/worker`.
pub(crate) fn routes() -> Router<AppState> {
    Router::new()
        .route("/claim", post(claim))
        .route("/turns/{turn}/events", post(events))
        .route("/turns/{turn}/heartbeat", post(heartbeat))
        .route("/turns/{turn}/complete", post(complete))
        .route("/turns/{turn}/fail", post(fail))
        .route("/turns/{turn}/wait", post(wait))
}

/// Refuses anyone but a service key, and servers not in worker mode.
fn admit(state: &AppState, principal: &Principal) -> Result<Arc<Dispatch>, AppError> {
    match principal {
        Principal::Service => {}
        Principal::Open => {
            return Err(AppError::new(
                StatusCode::FORBIDDEN,
                "forbidden",
                "the worker API needs a service key: start the server with --service-key",
            ))
        }
        Principal::User(_) => {
            return Err(AppError::new(
                StatusCode::FORBIDDEN,
                "forbidden",
                "the worker API takes a service key, not a user's token",
            ))
        }
    }
    state.turns.mode().workers().cloned().ok_or_else(|| {
        AppError::new(
            StatusCode::NOT_FOUND,
            "not_found",
            "the worker API is served by a server started with --agent worker",
        )
    })
}

/// A worker's body that names the lease it holds on the turn.
trait LeaseBody {
    fn lease(&self) -> &str;
}

macro_rules! lease_body {
    ($($t:ty),*) => {$(
        impl LeaseBody for $t {
            fn lease(&self) -> &str {
                &self.lease
            }
        }
    )*};
}

lease_body!(
    EventsRequest,
    HeartbeatRequest,
    CompleteRequest,
    FailRequest,
    WaitRequest
);

/// The opening every request on a claimed turn shares, in its order: the caller may use the
/// worker API ([`admit`]), then the path's turn id, then the body, then the body's lease token.
struct Leased<T> {
    dispatch: Arc<Dispatch>,
    turn: String,
    body: T,
}

impl<T> FromRequest<AppState> for Leased<T>
where
    T: LeaseBody + DeserializeOwned + Send,
{
    type Rejection = AppError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, AppError> {
        let (mut parts, body) = req.into_parts();
        let principal = parts
            .extensions
            .get::<Principal>()
            .cloned()
            .ok_or_else(|| {
                AppError::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "internal",
                    "no principal: the worker routes are served behind authentication",
                )
            })?;
        let dispatch = admit(state, &principal)?;
        let TurnId(turn) = TurnId::from_request_parts(&mut parts, state).await?;
        let Ok(body) = Body::<T>::from_request(Request::from_parts(parts, body), state).await;
        let body = body.read()?;
        check_lease(body.lease())?;
        Ok(Leased {
            dispatch,
            turn,
            body,
        })
    }
}

fn unprocessable(message: impl Into<String>) -> AppError {
    AppError::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid_body", message)
}

async fn claim(
    State(state): State<AppState>,
    Extension(principal): Extension<Principal>,
    body: Body<ClaimRequest>,
) -> Result<Response, AppError> {
    let dispatch = admit(&state, &principal)?;
    let req = body.read()?;
    if !is_valid_id(&req.worker_id) {
        return Err(unprocessable(
            "worker_id is 1 to 128 characters of [A-Za-z0-9_.:-]",
        ));
    }
    if req.wait_ms > MAX_CLAIM_WAIT_MS {
        return Err(unprocessable(format!(
            "wait_ms is 0 to {MAX_CLAIM_WAIT_MS}"
        )));
    }
    if !(1..=MAX_CLAIM_TURNS).contains(&req.max_turns) {
        return Err(unprocessable(format!(
            "max_turns is 1 to {MAX_CLAIM_TURNS}"
        )));
    }
    if let Some(agents) = &req.agents {
        if agents.is_empty()
            || agents.len() > MAX_CLAIM_AGENTS
            || !agents.iter().all(|a| is_valid_agent(a))
        {
            return Err(unprocessable(format!(
                "agents is 1 to {MAX_CLAIM_AGENTS} names, each 1 to {MAX_AGENT_LEN} characters of [a-z0-9_-]"
            )));
        }
    }
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_millis(req.wait_ms);
    loop {
        // Enabled before looking, so a turn queued while looking still wakes this claim.
        let ready = dispatch.ready();
        tokio::pin!(ready);
        ready.as_mut().enable();
        if state.turns.is_stopping() {
            return Ok(Json(ClaimResponse { turns: Vec::new() }).into_response());
        }
        let claimed = state
            .journal
            .claim_turns(
                &req.worker_id,
                req.max_turns as usize,
                dispatch.lease,
                AGENT_HISTORY,
                req.agents.clone(),
            )
            .await?;
        if !claimed.is_empty() {
            let turns = claimed
                .into_iter()
                .map(|c| ClaimedTurn {
                    turn_id: c.turn.turn_id,
                    session_id: c.turn.session_id,
                    user_message: c.user_message,
                    history: c.history,
                    lease: LeaseGrant {
                        token: c.lease.token,
                        expires_at: c.lease.expires_at,
                    },
                    continuation: c.continuation,
                    agent: c.turn.agent,
                    called_by: c.turn.called_by,
                })
                .collect();
            return Ok(Json(ClaimResponse { turns }).into_response());
        }
        tokio::select! {
            _ = ready => {}
            _ = tokio::time::sleep_until(deadline) => {
                return Ok(Json(ClaimResponse { turns: Vec::new() }).into_response());
            }
        }
    }
}

fn check_lease(lease: &str) -> Result<(), AppError> {
    if lease.is_empty() || lease.len() > MAX_LEASE_TOKEN_LEN {
        return Err(unprocessable(format!(
            "lease is the token a claim handed out (1 to {MAX_LEASE_TOKEN_LEN} characters)"
        )));
    }
    Ok(())
}

fn check_seq(seq: i64) -> Result<(), AppError> {
    if seq < 0 {
        return Err(unprocessable("seq is a whole number from 0"));
    }
    Ok(())
}

fn check_tool(call: &ToolCall) -> Result<(), AppError> {
    if !is_valid_id(&call.call_id) {
        return Err(unprocessable(
            "a tool's call_id is 1 to 128 characters of [A-Za-z0-9_.:-]",
        ));
    }
    if call.name.len() > MAX_TOOL_NAME_BYTES {
        return Err(unprocessable(format!(
            "a tool's name is at most {MAX_TOOL_NAME_BYTES} bytes"
        )));
    }
    Ok(())
}

/// Runs one request on a leased turn and answers it: the turn's [`WorkerAck`], or a refusal.
async fn act(
    state: &AppState,
    dispatch: &Dispatch,
    turn: &str,
    lease: &str,
    op: WorkerOp,
) -> Result<Response, AppError> {
    let answer = state
        .journal
        .worker_request(turn, lease, dispatch.lease, op)
        .await?;
    match answer {
        Ok(ack) => {
            if ack.state != TurnState::Running {
                // The turn's session may have a next turn to hand out.
                dispatch.notify();
            }
            Ok(Json(WorkerAck {
                acked_seq: ack.acked_seq,
                state: ack.state,
                lease_expires_at: ack.lease_expires_at,
            })
            .into_response())
        }
        Err(refusal) => {
            if refusal == Refusal::LeaseLost {
                // An expired lease may have just ended the turn, freeing its session.
                dispatch.notify();
            }
            Ok(refused(refusal))
        }
    }
}

fn refused(r: Refusal) -> Response {
    let conflict = |code, message: String| AppError::new(StatusCode::CONFLICT, code, message);
    match r {
        Refusal::NotFound => {
            AppError::new(StatusCode::NOT_FOUND, "turn_not_found", "no such turn").into_response()
        }
        Refusal::LeaseLost => conflict(
            "lease_lost",
            "this lease is not the turn's: it expired (the turn ended interrupted) or another \
             claim holds it"
                .into(),
        )
        .into_response(),
        Refusal::Cancelled => conflict(
            "turn_cancelled",
            "the turn was cancelled; stop working on it".into(),
        )
        .into_response(),
        Refusal::Ended { state } => conflict(
            "turn_ended",
            format!("the turn already ended {}", state.as_str()),
        )
        .into_response(),
        // The v1 error shape, with the last accepted `seq` beside it.
        Refusal::SeqGap { acked } => {
            let body = serde_json::json!({
                "error": ErrorDetail {
                    code: "seq_gap".into(),
                    message: format!("seq must be {}, one past the last accepted", acked + 1),
                },
                "acked_seq": acked,
            });
            (StatusCode::CONFLICT, Json(body)).into_response()
        }
    }
}

async fn events(
    State(state): State<AppState>,
    Leased {
        dispatch,
        turn,
        body: req,
    }: Leased<EventsRequest>,
) -> Result<Response, AppError> {
    check_seq(req.seq)?;
    if req.events.len() > MAX_WORKER_EVENTS {
        return Err(unprocessable(format!(
            "at most {MAX_WORKER_EVENTS} events per request"
        )));
    }
    let mut calls = false;
    for e in &req.events {
        match e {
            WorkerEvent::Tool(call) => check_tool(call)?,
            WorkerEvent::InputRequested(request) if request.kind == RequestKind::AgentCall => {
                return Err(unprocessable(
                    "a call is opened with a `call` event, not an `input_requested` one",
                ))
            }
            WorkerEvent::InputRequested(request) => request.check().map_err(unprocessable)?,
            // Checked again where it is opened, against the caller's chain (v1.3).
            WorkerEvent::Call(_) => calls = true,
            WorkerEvent::Thinking { .. } | WorkerEvent::Response { .. } => {}
        }
    }
    let op = WorkerOp::Events {
        seq: req.seq,
        events: worker_events(req.events),
    };
    let answer = act(&state, &dispatch, &turn, &req.lease, op).await;
    if calls {
        // The calls' child turns are claimable now.
        dispatch.notify();
    }
    answer
}

async fn heartbeat(
    State(state): State<AppState>,
    Leased {
        dispatch,
        turn,
        body: req,
    }: Leased<HeartbeatRequest>,
) -> Result<Response, AppError> {
    act(&state, &dispatch, &turn, &req.lease, WorkerOp::Heartbeat).await
}

async fn complete(
    State(state): State<AppState>,
    Leased {
        dispatch,
        turn,
        body: req,
    }: Leased<CompleteRequest>,
) -> Result<Response, AppError> {
    check_seq(req.seq)?;
    let op = WorkerOp::Finish {
        seq: req.seq,
        state: TurnState::Completed,
        error: None,
        usage: req.usage,
    };
    act(&state, &dispatch, &turn, &req.lease, op).await
}

async fn fail(
    State(state): State<AppState>,
    Leased {
        dispatch,
        turn,
        body: req,
    }: Leased<FailRequest>,
) -> Result<Response, AppError> {
    check_seq(req.seq)?;
    if req.error.message.trim().is_empty() || req.error.message.len() > MAX_WORKER_ERROR_BYTES {
        return Err(unprocessable(format!(
            "error.message is 1 to {MAX_WORKER_ERROR_BYTES} bytes"
        )));
    }
    let op = WorkerOp::Finish {
        seq: req.seq,
        state: TurnState::Failed,
        error: Some(req.error.message),
        usage: req.usage,
    };
    act(&state, &dispatch, &turn, &req.lease, op).await
}

async fn wait(
    State(state): State<AppState>,
    Leased {
        dispatch,
        turn,
        body: req,
    }: Leased<WaitRequest>,
) -> Result<Response, AppError> {
    check_seq(req.seq)?;
    let answer = act(
        &state,
        &dispatch,
        &turn,
        &req.lease,
        WorkerOp::Wait { seq: req.seq },
    )
    .await;
    // Answered meanwhile, the turn is claimable again at once.
    dispatch.notify();
    answer
}
