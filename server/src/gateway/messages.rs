//! `POST /api/sessions/{session}/messages`: accepting a user message (its content, attachments,
//! author and idempotency key), and what to do while the session is busy (`on_busy`, v1.2).

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use turnstream_protocol::attachment::{check_attachments, AttachmentError};
use turnstream_protocol::call::{is_valid_agent, DEFAULT_AGENT, MAX_AGENT_LEN};
use turnstream_protocol::limits::MAX_CONTENT_BYTES;
use turnstream_protocol::{OnBusy, PostMessageRequest};

use super::arrival::Arrived;
use super::extract::{Body, SessionId};
use super::{access, admit_turn_write, body_id, AppError, AppState, Peer};
use crate::auth::{Principal, Scope, MAX_SUB_BYTES};
use crate::journal::{Admission, NewMessage};

pub(super) async fn post_message(
    State(state): State<AppState>,
    Extension(principal): Extension<Principal>,
    peer: Peer,
    arrived: Option<Extension<Arrived>>,
    SessionId(session): SessionId,
    body: Body<PostMessageRequest>,
) -> Result<Response, AppError> {
    access::require(&principal, Scope::Write, &session)?;
    let req = body.read()?;
    let author = message_author(&principal, req.author.as_deref())?.map(str::to_string);
    // A message of attachments alone (an image without a caption) needs no text.
    if req.content.trim().is_empty() && req.attachments.is_empty() {
        return Err(AppError::bad_request(
            "empty_content",
            "content must not be empty",
        ));
    }
    if req.content.len() > MAX_CONTENT_BYTES {
        return Err(AppError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "content_too_large",
            format!(
                "content is {} bytes; the limit is {MAX_CONTENT_BYTES}",
                req.content.len()
            ),
        ));
    }
    if let Err(e) = check_attachments(&req.content, &req.attachments) {
        let status = match e {
            AttachmentError::TooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            AttachmentError::TooMany(_) | AttachmentError::Invalid { .. } => {
                StatusCode::BAD_REQUEST
            }
        };
        return Err(AppError::new(status, e.code(), e.to_string()));
    }
    if let Some(Some(parent)) = &req.parent_id {
        body_id(
            parent,
            "invalid_parent_id",
            "parent_id is null or a message id: 1 to 128 characters of [A-Za-z0-9_.:-]",
        )?;
    }
    let agent = match req.agent.as_deref() {
        None => DEFAULT_AGENT.to_string(),
        Some(a) if is_valid_agent(a) => a.to_string(),
        Some(_) => {
            return Err(AppError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "invalid_body",
                format!("agent is 1 to {MAX_AGENT_LEN} characters of [a-z0-9_-]"),
            ))
        }
    };
    if let Some(cmid) = &req.client_message_id {
        body_id(
            cmid,
            "invalid_client_message_id",
            "client_message_id is 1 to 128 characters of [A-Za-z0-9_.:-]",
        )?;
    }
    let client = match admit_turn_write(&state, &principal, &peer) {
        Ok(client) => client,
        Err(refused) => return Ok(*refused),
    };
    let on_busy = req.on_busy.unwrap_or_default();
    if let Some(Extension(Arrived(at))) = arrived {
        // The request's own stage of a publish: from its arrival to its write handed on.
        let metrics = state.journal.metrics();
        metrics.message_request.observe(at.elapsed().as_secs_f64());
    }
    let accepted = state
        .journal
        .accept_message(
            &session,
            NewMessage {
                content: req.content,
                attachments: req.attachments,
                client_message_id: req.client_message_id,
                author,
                parent: req.parent_id,
                agent,
            },
            Admission {
                max_active_turns: state.limits.max_active_turns,
                reject_if_busy: on_busy == OnBusy::Reject,
            },
        )
        .await?;
    let status = if accepted.created {
        if let Some(client) = client {
            state.turns.note_client(&accepted.response.turn_id, client);
        }
        if on_busy == OnBusy::Interrupt {
            // Every earlier turn in flight ends as by cancel, so the new one runs next.
            state
                .turns
                .interrupt(&session, &accepted.response.turn_id)
                .await?;
        }
        state.turns.kick(&session);
        StatusCode::ACCEPTED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(accepted.response)).into_response())
}

/// Who a posted message is written by: a token's user; for a service key, the user it names
/// (acting for them), if any; nobody without auth.
fn message_author<'a>(
    principal: &'a Principal,
    named: Option<&'a str>,
) -> Result<Option<&'a str>, AppError> {
    match (principal, named) {
        (Principal::Open, _) => Ok(None),
        (Principal::User(g), None) => Ok(Some(&g.sub)),
        (Principal::User(g), Some(a)) if a == g.sub => Ok(Some(&g.sub)),
        (Principal::User(_), Some(_)) => Err(AppError::new(
            StatusCode::FORBIDDEN,
            "forbidden",
            "only a service key may name a message's author",
        )),
        (Principal::Service, None) => Ok(None),
        (Principal::Service, Some(a)) => {
            if a.is_empty() || a.len() > MAX_SUB_BYTES || a.chars().any(char::is_control) {
                return Err(AppError::bad_request(
                    "invalid_author",
                    format!("author is 1 to {MAX_SUB_BYTES} bytes without control characters"),
                ));
            }
            Ok(Some(a))
        }
    }
}
