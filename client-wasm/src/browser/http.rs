//! The REST calls of contract v1, over fetch (gloo-net). Every answer is decoded into the
//! protocol crate's types; nothing from the network is unwrapped.

use gloo_net::http::{Request, Response};
use turnstream_protocol::{
    CancelResponse, ErrorBody, ErrorDetail, HistoryResponse, PostMessageRequest,
    PostMessageResponse, TurnInfo, CURSOR_HEADER,
};

/// What went wrong with a request.
#[derive(Debug)]
pub(crate) enum HttpError {
    /// No answer at all (offline, server down, CORS refused).
    Network(String),
    /// The server answered with an error status.
    Status {
        status: u16,
        error: ErrorDetail,
        /// Seconds, from `Retry-After` (429, 503).
        retry_after: Option<u32>,
    },
    /// The answer did not parse.
    Decode(String),
}

impl HttpError {
    pub(crate) fn message(&self) -> String {
        match self {
            HttpError::Network(m) => format!("network error: {m}"),
            HttpError::Status { status, error, .. } => {
                format!("{} ({status}): {}", error.code, error.message)
            }
            HttpError::Decode(m) => format!("unexpected answer: {m}"),
        }
    }
}

/// Where the server is and which session we speak of.
#[derive(Debug, Clone)]
pub(crate) struct Endpoint {
    /// No trailing slash; empty means the page's own origin.
    pub(crate) base_url: String,
    pub(crate) session_id: String,
}

fn enc(s: &str) -> String {
    String::from(js_sys::encode_uri_component(s))
}

impl Endpoint {
    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base_url)
    }

    pub(crate) fn stream_url(&self, cursor: &str) -> String {
        self.url(&format!(
            "/api/stream?session={}&cursor={}&snapshot=1",
            enc(&self.session_id),
            enc(cursor)
        ))
    }

    /// `GET /history`: the latest page and the journal cursor it was read at.
    pub(crate) async fn history(&self, limit: u32) -> Result<(HistoryResponse, String), HttpError> {
        let url = self.url(&format!(
            "/api/sessions/{}/history?limit={limit}",
            enc(&self.session_id)
        ));
        let resp = send(Request::get(&url)).await?;
        let header = resp.headers().get(CURSOR_HEADER);
        let history: HistoryResponse = decode(resp).await?;
        // The header and the body name the same position; the header is the documented one.
        let cursor = header.unwrap_or_else(|| history.cursor.clone());
        Ok((history, cursor))
    }

    /// `POST /messages`. Returns the status with the accepted message, so the caller can tell a
    /// retry worth doing from a refusal.
    pub(crate) async fn post_message(
        &self,
        client_message_id: &str,
        content: &str,
    ) -> Result<PostMessageResponse, HttpError> {
        let url = self.url(&format!("/api/sessions/{}/messages", enc(&self.session_id)));
        let body = PostMessageRequest {
            content: content.to_owned(),
            client_message_id: Some(client_message_id.to_owned()),
        };
        let req = Request::post(&url)
            .json(&body)
            .map_err(|e| HttpError::Decode(e.to_string()))?;
        decode(send_built(req).await?).await
    }

    /// `GET /api/turns/{turn}`; `None` when the server does not know the turn.
    pub(crate) async fn turn(&self, turn_id: &str) -> Result<Option<TurnInfo>, HttpError> {
        let url = self.url(&format!("/api/turns/{}", enc(turn_id)));
        match send(Request::get(&url)).await {
            Ok(resp) => decode(resp).await.map(Some),
            // Only the server's own "no such turn" means lost; a proxy's 404 does not.
            Err(HttpError::Status {
                status: 404, error, ..
            }) if error.code == "turn_not_found" => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// `POST /api/turns/{turn}/cancel`.
    pub(crate) async fn cancel(&self, turn_id: &str) -> Result<CancelResponse, HttpError> {
        let url = self.url(&format!("/api/turns/{}/cancel", enc(turn_id)));
        decode(send(Request::post(&url)).await?).await
    }
}

async fn send(builder: gloo_net::http::RequestBuilder) -> Result<Response, HttpError> {
    let req = builder
        .build()
        .map_err(|e| HttpError::Network(e.to_string()))?;
    send_built(req).await
}

async fn send_built(req: gloo_net::http::Request) -> Result<Response, HttpError> {
    let resp = req
        .send()
        .await
        .map_err(|e| HttpError::Network(e.to_string()))?;
    if resp.ok() {
        return Ok(resp);
    }
    let status = resp.status();
    let retry_after = resp
        .headers()
        .get("retry-after")
        .and_then(|v| v.trim().parse().ok());
    let text = resp.text().await.unwrap_or_default();
    let error = serde_json::from_str::<ErrorBody>(&text)
        .map(|b| b.error)
        .unwrap_or_else(|_| ErrorDetail {
            code: format!("http_{status}"),
            message: text.chars().take(200).collect(),
        });
    Err(HttpError::Status {
        status,
        error,
        retry_after,
    })
}

async fn decode<T: serde::de::DeserializeOwned>(resp: Response) -> Result<T, HttpError> {
    let text = resp
        .text()
        .await
        .map_err(|e| HttpError::Network(e.to_string()))?;
    serde_json::from_str(&text).map_err(|e| HttpError::Decode(e.to_string()))
}
