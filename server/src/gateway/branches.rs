//! Branches (contract v1.2): `POST /api/messages/{message}/regenerate` (a new reply to the same
//! user message, as a turn like any other) and `POST /api/sessions/{session}/active` (moving the
//! session's active leaf). An edit is a message posted with a `parent_id` (see `messages`).

use axum::extract::rejection::{JsonRejection, PathRejection};
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde::Deserialize;
use turnstream_protocol::limits::is_valid_id;
use turnstream_protocol::{OnBusy, SwitchBranchRequest};

use super::{access, admit_turn_write, id_param, AppError, AppState, Peer};
use crate::auth::{Principal, Scope};
use crate::journal::Admission;

/// Body of a regeneration (optional): what to do while the session is busy.
#[derive(Debug, Default, Deserialize)]
pub(super) struct RegenerateRequest {
    #[serde(default)]
    on_busy: Option<OnBusy>,
}

pub(super) async fn regenerate(
    State(state): State<AppState>,
    Extension(principal): Extension<Principal>,
    peer: Peer,
    message: Result<Path<String>, PathRejection>,
    body: Option<Json<RegenerateRequest>>,
) -> Result<Response, AppError> {
    let message = id_param(message, "invalid_message_id", "message")?;
    let Some(session) = state.journal.message_session(&message).await? else {
        return Err(crate::error::Error::NotFound { what: "message" }.into());
    };
    access::require(&principal, Scope::Write, &session)?;
    let client = match admit_turn_write(&state, &principal, &peer) {
        Ok(client) => client,
        Err(refused) => return Ok(*refused),
    };
    let on_busy = body.and_then(|Json(b)| b.on_busy).unwrap_or_default();
    let (answer, session) = state
        .journal
        .regenerate(
            &message,
            Admission {
                max_active_turns: state.limits.max_active_turns,
                reject_if_busy: on_busy == OnBusy::Reject,
            },
        )
        .await?;
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
    session: Result<Path<String>, PathRejection>,
    body: Result<Json<SwitchBranchRequest>, JsonRejection>,
) -> Result<Response, AppError> {
    let session = id_param(session, "invalid_session_id", "session")?;
    access::require(&principal, Scope::Write, &session)?;
    let Json(req) = body?;
    if !is_valid_id(&req.leaf_id) {
        return Err(AppError::bad_request(
            "invalid_leaf_id",
            "leaf_id is a message id: 1 to 128 characters of [A-Za-z0-9_.:-]",
        ));
    }
    let switched = state.journal.switch_branch(&session, &req.leaf_id).await?;
    Ok(Json(switched).into_response())
}
