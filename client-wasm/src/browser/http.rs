//! The REST calls of contract v1, over the global `fetch`. Every answer is read into the protocol
//! crate's types by [`crate::codec`]; nothing from the network is unwrapped.

use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;

use js_sys::{Function, Object, Promise, Reflect};
use turnstream_protocol::{CancelResponse, ErrorDetail, HistoryResponse, TurnInfo, CURSOR_HEADER};
use wasm_bindgen::{JsCast, JsValue};
use wasm_bindgen_futures::JsFuture;
use web_sys::Response;

use super::auth::Auth;
use super::json;
use crate::codec;

/// What went wrong with a request.
pub(crate) enum HttpError {
    /// No answer at all (offline, server down, CORS refused).
    Network(String),
    /// The server answered with an error status. Boxed: every future that holds a request's
    /// result moves and drops a pointer instead of the whole answer.
    Status(Box<Refusal>),
    /// The answer did not parse.
    Decode,
}

/// An answer with an error status.
pub(crate) struct Refusal {
    pub(crate) status: u16,
    pub(crate) error: ErrorDetail,
    /// Seconds, from `Retry-After` (429, 503).
    pub(crate) retry_after: Option<u32>,
    /// The whole answer (a `409 input_already_given` names the winning answer in it).
    pub(crate) body: String,
}

impl HttpError {
    pub(crate) fn message(&self) -> String {
        match self {
            HttpError::Network(m) => crate::cat(&["network error: ", m]),
            HttpError::Status(r) => {
                let mut s = crate::cat(&[&r.error.code, " ("]);
                codec::write_int(&mut s, i64::from(r.status));
                s.push_str("): ");
                s.push_str(&r.error.message);
                s
            }
            HttpError::Decode => "unexpected answer".to_owned(),
        }
    }
}

/// Where the server is, which session we speak of, and with what credentials.
pub(crate) struct Endpoint {
    /// No trailing slash; empty means the page's own origin.
    pub(crate) base_url: String,
    pub(crate) session_id: String,
    pub(crate) auth: Option<Rc<Auth>>,
}

pub(crate) fn enc(s: &str) -> String {
    String::from(js_sys::encode_uri_component(s))
}

impl Endpoint {
    /// One request, with the app's token when it gave `getToken`; on a `401`, once more with a
    /// fresh token.
    ///
    /// Boxed: each request's future holds this one instead of a copy of its code.
    pub(crate) fn send<'a>(
        &'a self,
        method: &'a str,
        url: &'a str,
        body: Option<&'a str>,
    ) -> Reply<'a> {
        Box::pin(async move {
            // One `fetch` and one `getToken` in the loop rather than an await of each per
            // path: each await of an `async fn` is its state machine again in this one.
            let mut retried = false;
            loop {
                let mut token = None;
                if let Some(auth) = &self.auth {
                    token = if retried { None } else { auth.cached() };
                    if token.is_none() {
                        token = auth.renew().await;
                    }
                }
                let reply = fetch(method, url, body, token.as_deref()).await;
                match &reply {
                    Err(HttpError::Status(r))
                        if r.status == 401 && self.auth.is_some() && !retried =>
                    {
                        retried = true;
                    }
                    _ => return reply,
                }
            }
        })
    }

    pub(crate) fn url(&self, parts: &[&str]) -> String {
        let mut url = self.base_url.clone();
        for p in parts {
            url.push_str(p);
        }
        url
    }

    /// `GET /history`: the latest page (or the page before the message `before`) and the
    /// journal cursor it was read at.
    pub(crate) async fn history(
        &self,
        limit: u32,
        before: Option<&str>,
    ) -> Result<(HistoryResponse, String), HttpError> {
        let mut limit_s = String::new();
        codec::write_int(&mut limit_s, i64::from(limit));
        let before = before.map(|b| crate::cat(&["&before=", &enc(b)]));
        let url = self.url(&[
            "/api/sessions/",
            &enc(&self.session_id),
            "/history?limit=",
            &limit_s,
            before.as_deref().unwrap_or_default(),
        ]);
        let resp = self.send("GET", &url, None).await?;
        let header = resp.headers().get(CURSOR_HEADER).ok().flatten();
        let history = read(body_json(resp).await?, codec::history)?;
        // The header and the body name the same position; the header is the documented one.
        let cursor = header.unwrap_or_else(|| history.cursor.clone());
        Ok((history, cursor))
    }

    /// `GET /api/turns/{turn}`; `None` when the server does not know the turn.
    pub(crate) async fn turn(&self, turn_id: &str) -> Result<Option<TurnInfo>, HttpError> {
        let url = self.url(&["/api/turns/", &enc(turn_id)]);
        match self.send("GET", &url, None).await {
            Ok(resp) => read(body_json(resp).await?, codec::turn_info).map(Some),
            // Only the server's own "no such turn" means lost; a proxy's 404 does not.
            Err(HttpError::Status(r)) if r.status == 404 && r.error.code == "turn_not_found" => {
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    /// `POST /api/turns/{turn}/cancel`.
    pub(crate) async fn cancel(&self, turn_id: &str) -> Result<CancelResponse, HttpError> {
        let url = self.url(&["/api/turns/", &enc(turn_id), "/cancel"]);
        let resp = self.send("POST", &url, None).await?;
        read(body_json(resp).await?, codec::cancel_response)
    }
}

fn set(target: &Object, key: &str, value: &JsValue) {
    let _ = Reflect::set(target, &JsValue::from_str(key), value);
}

/// What a rejected promise or a thrown value says.
pub(crate) fn describe(e: &JsValue) -> String {
    Reflect::get(e, &JsValue::from_str("message"))
        .ok()
        .and_then(|m| m.as_string())
        .or_else(|| e.as_string())
        .unwrap_or_else(|| "failed".to_owned())
}

/// `fetch(url, {method, body})`: the response when its status is 2xx, else what it says.
async fn fetch(
    method: &str,
    url: &str,
    json_body: Option<&str>,
    token: Option<&str>,
) -> Result<Response, HttpError> {
    let global = js_sys::global();
    let fetch = Reflect::get(&global, &JsValue::from_str("fetch"))
        .ok()
        .and_then(|f| f.dyn_into::<Function>().ok())
        .ok_or_else(|| HttpError::Network("no fetch in this environment".to_owned()))?;
    let init = Object::new();
    set(&init, "method", &JsValue::from_str(method));
    let headers = Object::new();
    if let Some(token) = token {
        set(
            &headers,
            "Authorization",
            &JsValue::from_str(&crate::cat(&["Bearer ", token])),
        );
    }
    if let Some(body) = json_body {
        set(
            &headers,
            "Content-Type",
            &JsValue::from_str("application/json"),
        );
        set(&init, "body", &JsValue::from_str(body));
    }
    set(&init, "headers", &headers);
    let promise = fetch
        .call2(&global, &JsValue::from_str(url), &init)
        .map_err(|e| HttpError::Network(describe(&e)))?;
    let promise: Promise = promise.unchecked_into();
    let resp: Response = JsFuture::from(promise)
        .await
        .map_err(|e| HttpError::Network(describe(&e)))?
        .unchecked_into();
    if resp.ok() {
        return Ok(resp);
    }
    let status = resp.status();
    let retry_after = resp
        .headers()
        .get("retry-after")
        .ok()
        .flatten()
        .and_then(|v| v.trim().parse().ok());
    // An error's body; none when it cannot be read.
    let text = match resp.text() {
        Ok(p) => JsFuture::from(p).await.ok().and_then(|v| v.as_string()),
        Err(_) => None,
    }
    .unwrap_or_default();
    let error = json::read(&text, codec::error_body).unwrap_or_else(|| {
        let mut code = "http_".to_owned();
        codec::write_int(&mut code, i64::from(status));
        ErrorDetail {
            code,
            message: text.chars().take(200).collect(),
        }
    });
    Err(HttpError::Status(Box::new(Refusal {
        status,
        error,
        retry_after,
        body: text,
    })))
}

/// A parsed body read by `read`. Not an `async fn` taking the response: each caller's future
/// would hold that one's state machine too.
fn read<T>(body: JsValue, read: fn(&JsValue) -> Option<T>) -> Result<T, HttpError> {
    read(&body).ok_or(HttpError::Decode)
}

/// The body of `resp`, parsed. Boxed, as [`Endpoint::send`].
pub(crate) fn body_json(
    resp: Response,
) -> Pin<Box<dyn Future<Output = Result<JsValue, HttpError>>>> {
    Box::pin(async move {
        // Read here rather than through an `async fn`: one state machine less in each future.
        let promise = resp.text().map_err(|e| HttpError::Network(describe(&e)))?;
        let text = JsFuture::from(promise)
            .await
            .map_err(|e| HttpError::Network(describe(&e)))?
            .as_string()
            .ok_or(HttpError::Decode)?;
        json::parse(&text).ok_or(HttpError::Decode)
    })
}

type Reply<'a> = Pin<Box<dyn Future<Output = Result<Response, HttpError>> + 'a>>;
