//! Branches (contract v1.2): `POST /api/messages/{message}/regenerate` (a new reply to the same
//! user message, as a turn like any other) and `POST /api/sessions/{session}/active` (moving the
//! session's active leaf). An edit is a message posted with a `parent_id` (see `messages`).

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use turnstream_protocol::{OnBusy, RegenerateRequest, SwitchBranchRequest};

use super::extract::{Body, MessageId, OptionalBody, SessionId};
use super::{access, admit_turn_write, body_id, AppError, AppState, Peer};
use crate::auth::{Principal, Scope};
use crate::journal::Admission;

/// A regeneration: `202` and the new turn; `200` and the first answer for a retry with the
/// same `client_request_id` (nothing new starts, nothing is journaled).
pub(super) async fn regenerate(
    State(state): State<AppState>,
    Extension(principal): Extension<Principal>,
    peer: Peer,
    MessageId(message): MessageId,
    body: OptionalBody<RegenerateRequest>,
) -> Result<Response, AppError> {
    let Some(session) = state.journal.message_session(&message).await? else {
        return Err(crate::error::Error::NotFound { what: "message" }.into());
    };
    access::require(&principal, Scope::Write, &session)?;
    // The body is optional; one that is sent is read as any other (and refused as any other).
    let req = body.read()?.unwrap_or_default();
    if let Some(crid) = &req.client_request_id {
        body_id(
            crid,
            "invalid_client_request_id",
            "client_request_id is 1 to 128 characters of [A-Za-z0-9_.:-]",
        )?;
    }
    let client = match admit_turn_write(&state, &principal, &peer) {
        Ok(client) => client,
        Err(refused) => return Ok(*refused),
    };
    let on_busy = req.on_busy.unwrap_or_default();
    let regenerated = state
        .journal
        .regenerate(
            &message,
            req.client_request_id,
            Admission {
                max_active_turns: state.limits.max_active_turns,
                reject_if_busy: on_busy == OnBusy::Reject,
            },
        )
        .await?;
    if !regenerated.created {
        return Ok((StatusCode::OK, Json(regenerated.response)).into_response());
    }
    let (answer, session) = (regenerated.response, regenerated.session_id);
    if let Some(client) = client {
        state.turns.note_client(&answer.turn_id, client);
    }
    if on_busy == OnBusy::Interrupt {
        state.turns.interrupt(&session, &answer.turn_id).await?;
    }
    state.turns.kick(&session);
    Ok((StatusCode::ACCEPTED, Json(answer)).into_response())
}

pub(super) async fn switch_branch(
    State(state): State<AppState>,
    Extension(principal): Extension<Principal>,
    SessionId(session): SessionId,
    body: Body<SwitchBranchRequest>,
) -> Result<Response, AppError> {
    access::require(&principal, Scope::Write, &session)?;
    let req = body.read()?;
    body_id(
        &req.leaf_id,
        "invalid_leaf_id",
        "leaf_id is a message id: 1 to 128 characters of [A-Za-z0-9_.:-]",
    )?;
    let switched = state.journal.switch_branch(&session, &req.leaf_id).await?;
    Ok(Json(switched).into_response())
}
