//! The HTTP API: routes, validation and the stable JSON error shape. It reads and appends only
//! through the journal's and turn execution's ([`crate::turns`]) APIs.

mod access;
mod arrival;
mod batch;
mod branches;
mod error;
mod extract;
mod input;
mod messages;
mod openapi;
mod origin;
mod presence;
mod pump;
mod quota;
mod request_log;
mod stream;
mod worker;
mod www;

pub use access::ACCESS_TOKEN_PARAM;
pub use error::AppError;
pub use origin::OriginPolicy;
pub use quota::{RateLimiter, StreamQuota};

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{ConnectInfo, DefaultBodyLimit, RawQuery, State};
use axum::http::{header, HeaderName, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use axum::{Extension, Json, Router};
use tower_http::cors::{AllowOrigin, Any, CorsLayer, ExposeHeaders};
use turnstream_protocol::limits::{
    is_valid_id, DEFAULT_HISTORY_LIMIT, MAX_HISTORY_LIMIT, MAX_REQUEST_BODY_BYTES,
};
use turnstream_protocol::{CancelResponse, ClearRealtimeResponse, CURSOR_HEADER};

use crate::auth::{Authenticator, Principal, Scope};
use crate::journal::Journal;
use crate::turns::Turns;
use extract::{SessionId, TurnId};

/// Limits and timings the gateway enforces.
#[derive(Debug, Clone)]
pub struct Limits {
    pub heartbeat: Duration,
    pub max_streams: usize,
    pub max_active_turns: usize,
    /// Streams one client may hold open (0: any number).
    pub max_streams_per_client: usize,
}

#[derive(Clone)]
pub struct AppState {
    pub journal: Journal,
    /// Live fan-out of committed events, and the replay tail.
    pub hub: Arc<crate::live::hub::Hub>,
    pub turns: Arc<Turns>,
    pub limits: Arc<Limits>,
    /// Tokens and service keys; with none configured every request is allowed (contract v1).
    pub auth: Arc<Authenticator>,
    /// Origins allowed to send state-changing requests besides the server's own.
    pub origins: Arc<OriginPolicy>,
    /// Messages per minute per client.
    pub rate: Arc<RateLimiter>,
    /// Open streams per client.
    pub client_streams: Arc<StreamQuota>,
    /// Who is in each session (never journaled).
    pub presence: Arc<crate::presence::Presence>,
}

/// The peer's address, when the server knows it (it always does over TCP).
type Peer = Option<Extension<ConnectInfo<std::net::SocketAddr>>>;

/// What every write that starts or continues a turn checks first (a message, an answer, a
/// regeneration): the server is not shutting down, and the client (a token's user, or the peer's
/// address) has a message left this minute. `Ok` holds the client's key (`None` when it has
/// none), `Err` the answer to give instead.
fn admit_turn_write(
    state: &AppState,
    principal: &Principal,
    peer: &Peer,
) -> Result<Option<String>, Box<Response>> {
    if state.turns.is_stopping() {
        return Err(Box::new(
            AppError::from(crate::error::Error::ShuttingDown).into_response(),
        ));
    }
    let client = access::client_key(principal, peer.as_ref().map(|Extension(c)| c));
    if let Some(client) = &client {
        if let Err(wait) = state.rate.take(client, std::time::Instant::now()) {
            return Err(Box::new(quota::rate_limited(wait)));
        }
    }
    Ok(client)
}

/// The router: the API under `/api`, health and metrics, and (if given) static files at `/`.
pub fn router(state: AppState, www: Option<&std::path::Path>, cors_origins: &[String]) -> Router {
    let api = Router::new()
        .route("/sessions/{session}/messages", post(messages::post_message))
        .route("/sessions/{session}/history", get(history))
        .route("/sessions/{session}/realtime", delete(clear_realtime))
        .route("/sessions/{session}/active", post(branches::switch_branch))
        .route(
            "/sessions/{session}/presence",
            get(presence::roster).post(presence::update),
        )
        .route("/messages/{message}/regenerate", post(branches::regenerate))
        .route("/stream", get(stream::stream))
        .route("/turns/{turn}", get(turn))
        .route("/turns/{turn}/cancel", post(cancel))
        .route("/turns/{turn}/input", post(input::give_input))
        .nest("/worker", worker::routes())
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        // Outermost first: a cross-site request is refused before its credential is looked at.
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            access::authenticate,
        ))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            origin::check_origin,
        ));
    let mut app = Router::new()
        // Public, so outside the `/api` router's auth and origin middleware.
        .route("/api/openapi.json", get(openapi::serve))
        .nest("/api", api)
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(MAX_REQUEST_BODY_BYTES))
        .with_state(state);
    app = match www {
        Some(dir) => {
            let www = www::Www::new(dir);
            app.fallback(move |req: axum::extract::Request| www.clone().serve(req))
        }
        None => app.fallback(not_found),
    };
    if let Some(cors) = cors_layer(cors_origins) {
        app = app.layer(cors);
    }
    app.layer(axum::middleware::from_fn(request_log::log_request))
        // Outermost: a request's arrival is stamped before anything else runs.
        .layer(axum::middleware::from_fn(arrival::stamp))
}

fn cors_layer(origins: &[String]) -> Option<CorsLayer> {
    if origins.is_empty() {
        return None;
    }
    let allow = if origins.iter().any(|o| o == "*") {
        AllowOrigin::from(Any)
    } else {
        let list: Vec<HeaderValue> = origins
            .iter()
            .filter_map(|o| HeaderValue::from_str(o.trim_end_matches('/')).ok())
            .collect();
        AllowOrigin::list(list)
    };
    Some(
        CorsLayer::new()
            .allow_origin(allow)
            .allow_methods([Method::GET, Method::POST, Method::DELETE, Method::OPTIONS])
            .allow_headers([
                header::CONTENT_TYPE,
                header::AUTHORIZATION,
                HeaderName::from_static("last-event-id"),
            ])
            // The one cursor header name: a constant the parse cannot refuse.
            .expose_headers(ExposeHeaders::list(
                HeaderName::from_bytes(CURSOR_HEADER.as_bytes()).ok(),
            ))
            .max_age(Duration::from_secs(600)),
    )
}

async fn not_found() -> AppError {
    AppError::new(StatusCode::NOT_FOUND, "not_found", "no such endpoint")
}

async fn method_not_allowed() -> AppError {
    AppError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        "this endpoint does not take that method",
    )
}

/// A body's id field: `code` and `message` when it breaks the id rule.
fn body_id(id: &str, code: &'static str, message: &'static str) -> Result<(), AppError> {
    if is_valid_id(id) {
        Ok(())
    } else {
        Err(AppError::bad_request(code, message))
    }
}

async fn history(
    State(state): State<AppState>,
    Extension(principal): Extension<Principal>,
    SessionId(session): SessionId,
    RawQuery(query): RawQuery,
) -> Result<Response, AppError> {
    access::require(&principal, Scope::Read, &session)?;
    let mut limit = DEFAULT_HISTORY_LIMIT;
    let mut before = None;
    let mut leaf = None;
    for (k, v) in form_urlencoded::parse(query.as_deref().unwrap_or("").as_bytes()) {
        match &*k {
            "limit" => {
                limit = v
                    .parse::<usize>()
                    .ok()
                    .filter(|n| (1..=MAX_HISTORY_LIMIT).contains(n))
                    .ok_or_else(|| {
                        AppError::bad_request(
                            "invalid_limit",
                            format!("limit is a whole number from 1 to {MAX_HISTORY_LIMIT}"),
                        )
                    })?;
            }
            "before" => {
                if !is_valid_id(&v) {
                    return Err(AppError::bad_request(
                        "invalid_before",
                        "before is a message id: 1 to 128 characters of [A-Za-z0-9_.:-]",
                    ));
                }
                before = Some(v.into_owned());
            }
            "leaf" => {
                if !is_valid_id(&v) {
                    return Err(AppError::bad_request(
                        "invalid_leaf",
                        "leaf is a message id: 1 to 128 characters of [A-Za-z0-9_.:-]",
                    ));
                }
                leaf = Some(v.into_owned());
            }
            _ => {}
        }
    }
    let page = state
        .journal
        .history(&session, limit, before.as_deref(), leaf.as_deref())
        .await?;
    let cursor = HeaderValue::from_str(&page.cursor)
        .map_err(|e| AppError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.to_string()))?;
    let mut res = Json(page).into_response();
    res.headers_mut().insert(CURSOR_HEADER, cursor);
    res.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    Ok(res)
}

async fn turn(
    State(state): State<AppState>,
    Extension(principal): Extension<Principal>,
    TurnId(turn): TurnId,
) -> Result<Response, AppError> {
    match state.journal.turn_info(&turn).await? {
        Some(info) => {
            // A turn id grants nothing by itself: its session must be covered.
            access::require(&principal, Scope::Read, &info.session_id)?;
            Ok(Json(info).into_response())
        }
        None => Err(crate::error::Error::NotFound { what: "turn" }.into()),
    }
}

async fn cancel(
    State(state): State<AppState>,
    Extension(principal): Extension<Principal>,
    TurnId(turn): TurnId,
) -> Result<Response, AppError> {
    if principal != Principal::Open {
        let Some(row) = state.journal.turn(&turn).await? else {
            return Err(crate::error::Error::NotFound { what: "turn" }.into());
        };
        access::require(&principal, Scope::Cancel, &row.session_id)?;
    }
    let state_after = state.turns.cancel(&turn).await?;
    Ok(Json(CancelResponse {
        turn_id: turn,
        state: state_after,
    })
    .into_response())
}

async fn clear_realtime(
    State(state): State<AppState>,
    Extension(principal): Extension<Principal>,
    SessionId(session): SessionId,
) -> Result<Response, AppError> {
    access::require(&principal, Scope::Write, &session)?;
    let deleted = state.journal.clear_realtime(&session).await?;
    Ok(Json(ClearRealtimeResponse {
        session_id: session,
        deleted_events: deleted,
    })
    .into_response())
}

async fn healthz() -> Response {
    Json(serde_json::json!({"status": "ok"})).into_response()
}

/// Ready when the database answers a read at this build's schema version and the latest
/// journal writes reached the disk: while writes fail, a balancer should send traffic elsewhere.
/// The journal probes failing storage by itself, so this turns back to 200 without a restart.
async fn readyz(State(state): State<AppState>) -> Result<Response, AppError> {
    if state.turns.is_stopping() {
        return Err(crate::error::Error::ShuttingDown.into());
    }
    if let Some(failing) = state.journal.write_health().failing() {
        return Err(AppError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            match failing.fault {
                crate::error::StorageFault::Full => "storage_full",
                crate::error::StorageFault::Unavailable => "storage_unavailable",
            },
            failing.to_error().to_string(),
        )
        .retry_after(error::STORAGE_RETRY_AFTER_SECS));
    }
    match state.journal.ready().await {
        Ok(()) => Ok(Json(serde_json::json!({"status": "ready"})).into_response()),
        Err(e) => Err(AppError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "not_ready",
            e.to_string(),
        )),
    }
}

async fn metrics(State(state): State<AppState>) -> Response {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        state.journal.metrics().render(),
    )
        .into_response()
}
