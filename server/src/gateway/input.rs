//! `POST /api/turns/{turn}/input` (contract v1.2): answering a request an agent opened. The
//! first answer wins; the same answer by the same author again is a harmless retry.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use turnstream_protocol::limits::is_valid_id;
use turnstream_protocol::{ErrorDetail, InputAnswerRequest, InputAnswerResponse};

use super::extract::{Body, TurnId};
use super::{access, admit_turn_write, AppError, AppState, Peer};
use crate::auth::{Principal, Scope};
use crate::journal::{Given, InputRefusal};

pub(super) async fn give_input(
    State(state): State<AppState>,
    Extension(principal): Extension<Principal>,
    peer: Peer,
    TurnId(turn): TurnId,
    body: Body<InputAnswerRequest>,
) -> Result<Response, AppError> {
    if principal != Principal::Open {
        // A turn id grants nothing by itself: its session must be covered.
        let Some(row) = state.journal.turn(&turn).await? else {
            return Err(crate::error::Error::NotFound { what: "turn" }.into());
        };
        access::require(&principal, Scope::Write, &row.session_id)?;
    }
    let req = body.read()?;
    if !is_valid_id(&req.request_id) {
        return Err(AppError::bad_request(
            "invalid_input",
            "request_id is 1 to 128 characters of [A-Za-z0-9_.:-]",
        ));
    }
    if let Err(refused) = admit_turn_write(&state, &principal, &peer) {
        return Ok(*refused);
    }
    let by = match &principal {
        Principal::User(grant) => Some(grant.sub.clone()),
        Principal::Open | Principal::Service => None,
    };
    let request_id = req.request_id.clone();
    let answered = |state| {
        Json(InputAnswerResponse {
            turn_id: turn.clone(),
            request_id: request_id.clone(),
            state,
        })
        .into_response()
    };
    match state.journal.give_input(&turn, req, by).await? {
        Ok(Given::Recorded {
            state: after,
            session_id,
            continues,
        }) => {
            if continues {
                state.turns.kick(&session_id);
            }
            Ok(answered(after))
        }
        Ok(Given::Repeat { state }) => Ok(answered(state)),
        Err(InputRefusal::TurnNotFound) => {
            Err(crate::error::Error::NotFound { what: "turn" }.into())
        }
        Err(InputRefusal::RequestNotFound) => Err(AppError::new(
            StatusCode::NOT_FOUND,
            "request_not_found",
            format!("the turn has no request {request_id:?}"),
        )),
        Err(InputRefusal::TurnEnded(ended)) => Err(AppError::new(
            StatusCode::CONFLICT,
            "turn_ended",
            format!("the turn ended {}; its requests are closed", ended.as_str()),
        )),
        Err(InputRefusal::Invalid(why)) => Err(AppError::bad_request("invalid_input", why)),
        // The error shape, with the answer that was first beside it.
        Err(InputRefusal::AlreadyGiven { answer, by }) => {
            let body = serde_json::json!({
                "error": ErrorDetail {
                    code: "input_already_given".into(),
                    message: "another answer to this request was given first".into(),
                },
                "request_id": request_id,
                "answer": answer,
                "by": by,
            });
            Ok((StatusCode::CONFLICT, Json(body)).into_response())
        }
    }
}
