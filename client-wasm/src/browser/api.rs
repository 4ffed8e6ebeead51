//! The JS surface: the `ChatClient` class and its TypeScript types. Thin shims that check their
//! arguments and call the `pub(crate)` client.

use std::rc::Rc;

use crate::browser::future_to_promise;
use js_sys::{Array, Function, Promise, Reflect};
use turnstream_protocol::limits::{
    is_valid_id, DEFAULT_HISTORY_LIMIT, MAX_CONTENT_BYTES, MAX_HISTORY_LIMIT,
};
use turnstream_protocol::{Attachment, OnBusy, RawJson, RequestKind};
use wasm_bindgen::prelude::*;

use super::client::{coded_error, Client, Options};
use crate::codec::{write_str, Obj};

#[wasm_bindgen(typescript_custom_section)]
const TS_TYPES: &str = r#"
/** Where the view and the outbox outlive the page. */
export type StorageKind = "indexeddb" | "memory";

export interface ConnectOptions {
  /** Origin (and path prefix) of the turnstream server, e.g. "https://chat.example.com".
   *  Default: the page's own origin. */
  baseUrl?: string;
  /** The session to show: 1 to 128 of [A-Za-z0-9_.:-]. */
  sessionId: string;
  /** "indexeddb" (default): the view and unsent messages survive reloads and are shared by tabs.
   *  "memory": nothing is stored. */
  storage?: StorageKind;
  /** Messages of history loaded on connect and after a resync: 1 to 1000, default 100. */
  historyLimit?: number;
  /** Called for a token when one is first needed, after a `401`, and when a stream's token
   *  expired. Sent as `Authorization: Bearer` on requests and as `access_token` on the stream.
   *  Without it nothing is sent (cookies still are, as the browser sends them). */
  getToken?: () => Promise<string>;
}

/** The link to the server. */
export type Connection = "connecting" | "live" | "reconnecting" | "resyncing" | "offline" | "unauthorized" | "closed";

export type UserStatus = "sending" | "sent" | "rejected";
/** "waiting": the agent asked something (see `requests`) that no one has answered yet. */
export type AssistantStatus = "queued" | "streaming" | "waiting" | "complete" | "cancelled" | "failed" | "interrupted";
export type ToolStatus = "started" | "progress" | "finished" | "failed";
/** A state this SDK does not know (a later contract's) reads as "running". */
export type TurnState = "queued" | "running" | "waiting" | "completed" | "cancelled" | "failed" | "interrupted";

/** What an agent asks for: a yes or no on a tool call, a tool the browser runs, a question;
 *  or (contract v1.3) a call of another agent, answered by the server when its turn ends. */
export type RequestKind = "approval" | "client_tool" | "question" | "agent_call";

/** The child turn an `agent_call` request runs, in the session `sessionId` (connect a
 *  `ChatClient` to it to follow it live: the browser's one stream carries it too). */
export interface AgentCallView {
  readonly agent: string;
  readonly sessionId: string;
  readonly turnId: string;
  /** The child's user message. */
  readonly messageId: string;
  /** "running" until the call is answered, then how the child turn ended. */
  readonly state: TurnState;
  /** The child's reply, once answered. */
  readonly text: string | null;
  readonly error: string | null;
}

/** A request's answer, as `respond` takes it and `requests[].answer` shows it. */
export type RequestAnswer =
  /** approval */
  | { approved: boolean; reason?: string }
  /** client_tool: what the tool returned (any JSON value) or why it failed */
  | { output: unknown }
  | { error: string }
  /** question (a plain string is taken as `{ text }`) */
  | { text: string }
  /** given by the server when the request's time ran out */
  | { timed_out: true }
  /** agent_call: the child turn's end, given by the server */
  | { turn_id: string; state: TurnState; text: string; error?: string };

/** Something the agent asked in this turn, and its answer once given. */
export interface InputRequest {
  /** What `respond` takes. */
  readonly requestId: string;
  readonly kind: RequestKind;
  /** The tool call (approval, client_tool): `input` is its JSON value. */
  readonly tool: { readonly callId: string; readonly name: string; readonly input: unknown } | null;
  readonly prompt: string | null;
  /** Suggested answers to a question. */
  readonly options: readonly string[] | null;
  /** Unix milliseconds after which the server answers `{ timed_out: true }` itself. */
  readonly expiresAt: number | null;
  /** The child turn of an `agent_call` (contract v1.3), else null. */
  readonly call: AgentCallView | null;
  /** null while open; the answer given in this browser shows at once, the server's wins. */
  readonly answer: RequestAnswer | null;
  /** Who gave the server's answer (null without auth, for a timeout, and until it arrives). */
  readonly answeredBy: string | null;
}

/** Why `respond` rejected: its `code` is "input_already_given" (another tab or device
 *  answered first: `answer` and `answeredBy` name that answer, and the request shows it),
 *  "turn_ended", "request_not_found" or "invalid_input". */
export interface RespondError extends Error {
  readonly code: string;
  readonly answer?: RequestAnswer;
  readonly answeredBy?: string | null;
}

export interface EntryError {
  readonly code: string;
  readonly message: string;
}

export interface ToolCallView {
  readonly callId: string;
  readonly name: string;
  readonly status: ToolStatus;
  readonly inputPreview: string | null;
  readonly outputPreview: string | null;
}

/** A file a message refers to: the app stores it and gives its URL. */
export interface Attachment {
  /** http:, https:, or data: (the file inline; counts against the 64 KiB of a message). */
  readonly url: string;
  /** e.g. "image/png", "application/pdf". */
  readonly mediaType: string;
  readonly name: string | null;
}

/** What `send` takes besides the text. */
export interface SendOptions {
  /** `name` may be left out. The server refuses a message whose attachments break its rules
   *  (more than 16, a URL other than http:, https: or data:, ...): it then shows "rejected". */
  attachments?: readonly { url: string; mediaType: string; name?: string | null }[];
  /** While a turn of the session is queued, running or waiting: "enqueue" (default: the new
   *  turn runs after it), "reject" (the message shows "rejected" with code "session_busy"), or
   *  "interrupt" (that turn is cancelled and this one runs next). */
  onBusy?: "enqueue" | "reject" | "interrupt";
}

interface EntryBase {
  /** Stable for the life of the bubble: use it as the React key. */
  readonly key: string;
  readonly content: string;
  readonly messageId: string | null;
  readonly thinking: string;
  readonly tools: readonly ToolCallView[];
  readonly error: EntryError | null;
  /** The files of a user message, as sent; always empty on replies. */
  readonly attachments: readonly Attachment[];
  /** Its place among its versions (contract v1.2): a user message's edits, a reply's
   *  regenerations; `{ index: 0, count: 1 }` for the only version. Show "< index+1/count >"
   *  and call `switchBranch(key, i)`. */
  readonly branch: BranchPosition;
}

/** Version `index` (0-based, oldest first) of `count`. */
export interface BranchPosition {
  readonly index: number;
  readonly count: number;
}

export interface UserEntry extends EntryBase {
  readonly role: "user";
  readonly status: UserStatus;
  readonly clientMessageId: string | null;
  /** null until the server accepted the message. */
  readonly turnId: string | null;
  readonly recovered: false;
  /** Unix milliseconds: the sender's clock until the server's is known. */
  readonly createdAt: number;
  /** Who wrote it, as the server recorded it: the `sub` of the token it was posted with, or the
   *  author a service key named. null until the server has the message, and without auth. */
  readonly author: string | null;
  readonly requests: readonly [];
}

export interface AssistantEntry extends EntryBase {
  readonly role: "assistant";
  readonly status: AssistantStatus;
  readonly clientMessageId: null;
  readonly turnId: string;
  /** The turn was still open in this browser's cache and ended while no page listened: its end
   *  came after a reload, from a turn-status check or history, not from the live stream. */
  readonly recovered: boolean;
  readonly createdAt: null;
  readonly author: null;
  /** What the agent asked in this turn (approvals, client tools, questions) and the answers. */
  readonly requests: readonly InputRequest[];
}

export type ChatEntry = UserEntry | AssistantEntry;

/** Immutable; a new object after every change, the same object otherwise. */
export interface ChatState {
  readonly sessionId: string;
  readonly connection: Connection;
  /** The session has a queued or running turn. */
  readonly busy: boolean;
  /** Something could not be recovered (a history resync, or a turn the server lost). */
  readonly gap: boolean;
  /** Older messages exist on the server: `loadOlder()` pages them in. */
  readonly hasMore: boolean;
  /** The server's history has been read since `connect` (the newest page): `messages` are then
   *  the server's conversation, joined with what the cache and the stream added. false while
   *  only this browser's cache is shown (a new device shows nothing until then). */
  readonly historyLoaded: boolean;
  /** The server's refusal while `connection` is "unauthorized", else null. */
  readonly error: EntryError | null;
  /** The active branch (contract v1.2), in conversation order; messages not yet accepted by
   *  the server last, in send order. */
  readonly messages: readonly ChatEntry[];
  /** Who is in the session (contract v1.3): this browser's member first (`self`), from the
   *  stream's roster and its changes; empty until the first roster. */
  readonly presence: readonly PresenceMember[];
  /** Members present, those the server does not list (past its limit) included. */
  readonly presenceCount: number;
}

/** One member: a browser (all its tabs are one) or an agent. */
export interface PresenceMember {
  readonly memberId: string;
  /** The token's `sub` under auth, else null. */
  readonly user: string | null;
  /** What `setPresence` set (`typing: true` while its user types). */
  readonly state: { readonly typing?: boolean; readonly [key: string]: unknown };
  readonly joinedAt: number;
  /** This browser. */
  readonly self: boolean;
}

export interface SendResult {
  readonly clientMessageId: string;
}

export interface LoadOlderResult {
  /** Entries the page added to `messages` (0 once nothing older exists). */
  readonly added: number;
}

export interface CancelResult {
  readonly turnId: string;
  readonly state: TurnState;
}
"#;

/// `options[key]`: `Ok(None)` when absent (undefined or null), `Err` when not of the type.
fn option<T>(
    options: &JsValue,
    key: &str,
    read: fn(&JsValue) -> Option<T>,
    error: &str,
) -> Result<Option<T>, JsError> {
    let v = Reflect::get(options, &JsValue::from_str(key)).map_err(|_| JsError::new(error))?;
    if v.is_undefined() || v.is_null() {
        return Ok(None);
    }
    read(&v).map(Some).ok_or_else(|| JsError::new(error))
}

// The messages below spell these out (no formatting machinery for two numbers).
const _: () = assert!(MAX_HISTORY_LIMIT == 1000 && MAX_CONTENT_BYTES == 65536);

/// `send`'s `attachments` option. Only its shape is checked here: the server applies the
/// contract's rules and refuses a message that breaks them, which then shows `rejected` with
/// the reason, as any refusal does (the rules, run here too, cost the package over a kilobyte).
fn parse_attachments(options: Option<&JsValue>) -> Result<Vec<Attachment>, JsValue> {
    const SHAPE: &str = "turnstream: attachments must be an array of { url, mediaType, name? }";
    let Some(options) = options else {
        return Ok(Vec::new());
    };
    let shape = || js_error(SHAPE);
    let Some(list) = option(
        options,
        "attachments",
        |v| v.clone().dyn_into::<Array>().ok(),
        SHAPE,
    )?
    else {
        return Ok(Vec::new());
    };
    let mut attachments = Vec::with_capacity(list.length() as usize);
    for item in list.iter() {
        if !item.is_object() {
            return Err(shape());
        }
        let text = |key: &str| option(&item, key, JsValue::as_string, SHAPE);
        attachments.push(Attachment {
            url: text("url")?.ok_or_else(shape)?,
            media_type: text("mediaType")?.ok_or_else(shape)?,
            name: text("name")?,
        });
    }
    Ok(attachments)
}

fn parse_options(options: JsValue) -> Result<Options, JsError> {
    if !options.is_object() {
        return Err(JsError::new("turnstream: connect takes an options object"));
    }
    const SESSION: &str = "turnstream: sessionId must be 1 to 128 of [A-Za-z0-9_.:-]";
    const STORAGE: &str = "turnstream: storage must be \"indexeddb\" or \"memory\"";
    const LIMIT: &str = "turnstream: historyLimit must be a whole number from 1 to 1000";
    let session_id = option(&options, "sessionId", JsValue::as_string, SESSION)?
        .filter(|s| is_valid_id(s))
        .ok_or_else(|| JsError::new(SESSION))?;
    let base_url = option(
        &options,
        "baseUrl",
        JsValue::as_string,
        "turnstream: baseUrl must be a string",
    )?
    .unwrap_or_default();
    let persistent = match option(&options, "storage", JsValue::as_string, STORAGE)?.as_deref() {
        None | Some("indexeddb") => true,
        Some("memory") => false,
        Some(_) => return Err(JsError::new(STORAGE)),
    };
    let history_limit = match option(&options, "historyLimit", JsValue::as_f64, LIMIT)? {
        None => DEFAULT_HISTORY_LIMIT as u32,
        Some(n) if n == n.trunc() && (1.0..=1000.0).contains(&n) => n as u32,
        Some(_) => return Err(JsError::new(LIMIT)),
    };
    let get_token = option(
        &options,
        "getToken",
        |v| v.clone().dyn_into::<Function>().ok(),
        "turnstream: getToken must be a function returning a Promise of a string",
    )?;
    Ok(Options {
        get_token,
        base_url: base_url.trim().trim_end_matches('/').to_owned(),
        session_id,
        persistent,
        history_limit,
    })
}

#[wasm_bindgen]
extern "C" {
    /// `send`'s options object (the `SendOptions` of the declarations above).
    #[wasm_bindgen(typescript_type = "SendOptions")]
    pub type SendOptions;
}

/// A live, durable view of one chat session.
#[wasm_bindgen]
pub struct ChatClient {
    inner: Rc<Client>,
}

/// A panic's message and where it happened, in the console with a JS stack (what
/// `console_error_panic_hook` shows, without formatting the location through `core::fmt`).
fn set_panic_hook() {
    // A flag rather than `std::sync::Once`, whose poisoning and re-entry checks the page's one
    // thread does not need (and whose messages would be in the package).
    static SET: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if !SET.swap(true, std::sync::atomic::Ordering::Relaxed) {
        std::panic::set_hook(Box::new(|info| {
            let p = info.payload();
            let message = p
                .downcast_ref::<&str>()
                .copied()
                .or_else(|| p.downcast_ref::<String>().map(String::as_str))
                .unwrap_or("panic");
            let (file, line) = info.location().map_or(("?", 0), |l| (l.file(), l.line()));
            web_sys::console::error_4(
                &js_sys::Error::new(&crate::cat(&["turnstream panicked: ", message])).into(),
                &"at".into(),
                &file.into(),
                &line.into(),
            );
        }));
    }
}

impl ChatClient {
    /// Shows the cached view at once, then loads history and follows the session's stream.
    /// Resolves once the cache is read; never waits for the network. (JS calls `connect_js`,
    /// the same steps; the package has only that one.)
    pub async fn connect(options: JsValue) -> Result<ChatClient, JsError> {
        set_panic_hook();
        let opts = parse_options(options)?;
        Ok(ChatClient {
            inner: Client::connect(opts).await,
        })
    }
}

#[wasm_bindgen]
impl ChatClient {
    /// Shows the cached view at once, then loads history and follows the session's stream.
    /// Resolves once the cache is read; never waits for the network.
    // `ChatClient::connect` for JS. Not an `async fn`: that would bring a second copy of the
    // promise glue, for this one future type, beside the boxed one every other method shares.
    #[doc(hidden)]
    #[wasm_bindgen(js_name = "connect", unchecked_return_type = "Promise<ChatClient>")]
    pub fn connect_js(
        #[wasm_bindgen(unchecked_param_type = "ConnectOptions")] options: JsValue,
    ) -> Promise {
        future_to_promise(async move {
            set_panic_hook();
            let opts = parse_options(options)?;
            let client = ChatClient {
                inner: Client::connect(opts).await,
            };
            Ok(client.into())
        })
    }

    /// Calls `listener` with the new state after every change. Returns the unsubscribe function.
    #[wasm_bindgen(unchecked_return_type = "() => void")]
    pub fn subscribe(
        &self,
        #[wasm_bindgen(unchecked_param_type = "(state: ChatState) => void")] listener: Function,
    ) -> JsValue {
        self.inner.subscribe(listener)
    }

    /// The current state; the same object until something changes (safe for
    /// `useSyncExternalStore`).
    #[wasm_bindgen(unchecked_return_type = "ChatState")]
    pub fn state(&self) -> JsValue {
        self.inner.state()
    }

    /// Shows the message at once and posts it, now or when the server is reachable again
    /// (it survives a reload in between). Resolves once the message is stored locally.
    /// `options.attachments`: files the app stored, by URL (text may then be empty).
    #[wasm_bindgen(unchecked_return_type = "Promise<SendResult>")]
    pub fn send(&self, content: String, options: Option<SendOptions>) -> Promise {
        self.inner.stop_typing();
        send(self.inner.clone(), content, options, None)
    }

    /// Sets these keys of this browser's presence state in the session (contract v1.3), for
    /// every tab of the browser (the state set in any tab is the browser's); other members see
    /// it in their `presence`. Throws unless `state` is a plain object.
    #[wasm_bindgen(js_name = "setPresence")]
    pub fn set_presence(
        &self,
        #[wasm_bindgen(unchecked_param_type = "Record<string, unknown>")] state: JsValue,
    ) -> Result<(), JsError> {
        if !state.is_object() || Array::is_array(&state) {
            return Err(JsError::new("turnstream: setPresence takes an object"));
        }
        self.inner.set_presence(&crate::codec::Value::json(&state));
        Ok(())
    }

    /// The user is typing: call it on every keystroke. Sends `typing: true` at most every 2 s
    /// while called, and `typing: false` 3 s after the last call, after `send`, and when the
    /// page goes away.
    #[wasm_bindgen(js_name = "setTyping")]
    pub fn set_typing(&self) {
        self.inner.set_typing();
    }

    /// Loads the page of history before the oldest message read (`historyLimit` messages) and
    /// merges it; `state.hasMore` says whether there is more. Entries keep their keys.
    #[wasm_bindgen(
        js_name = "loadOlder",
        unchecked_return_type = "Promise<LoadOlderResult>"
    )]
    pub fn load_older(&self) -> Promise {
        let inner = self.inner.clone();
        future_to_promise(async move {
            if inner.is_closed() {
                return Err(js_error("turnstream: the client is closed"));
            }
            let added = inner
                .load_older()
                .await
                .map_err(|e| js_error(&crate::cat(&["turnstream: loadOlder failed: ", &e])))?;
            let out = js_sys::Object::new();
            js_sys::Reflect::set(&out, &"added".into(), &added.into())?;
            Ok(out.into())
        })
    }

    /// Answers a request of the agent (`state.messages[].requests`): shown at once in every
    /// tab, posted now or when the server is reachable again (it survives a reload). Resolves
    /// once the server has it; rejects with a `RespondError` whose `code` says why not
    /// (`input_already_given`: another tab or device answered first, and its answer shows).
    #[wasm_bindgen(unchecked_return_type = "Promise<void>")]
    pub fn respond(
        &self,
        #[wasm_bindgen(js_name = "requestId")] request_id: String,
        #[wasm_bindgen(unchecked_param_type = "RequestAnswer | string")] answer: JsValue,
    ) -> Promise {
        if self.inner.is_closed() {
            return Promise::reject(&js_error("turnstream: the client is closed"));
        }
        let Some((turn_id, kind)) = self.inner.find_request(&request_id) else {
            return Promise::reject(
                &coded_error("request_not_found", "turnstream: no such request is shown").into(),
            );
        };
        match answer_json(kind, &answer) {
            Some(text) => self
                .inner
                .respond(turn_id, request_id, RawJson::trusted(text)),
            None => Promise::reject(
                &coded_error(
                    "invalid_input",
                    "turnstream: an approval is answered with { approved, reason? }, a client tool with { output } or { error }, a question with { text }",
                )
                .into(),
            ),
        }
    }

    /// Edits user entry `key` (contract v1.2): a new version of it, sent like `send` (shown at
    /// once, posted now or when the server is reachable again), whose reply starts a new
    /// branch; the old versions stay, one `switchBranch` away.
    #[wasm_bindgen(unchecked_return_type = "Promise<SendResult>")]
    pub fn edit(&self, key: String, content: String) -> Promise {
        send(self.inner.clone(), content, None, Some(key))
    }

    /// Asks for another reply (contract v1.2) to user entry `key`, or to the user message of
    /// reply `key`: a new version of the reply, streamed like any turn; posted now or when the
    /// server is reachable again.
    pub fn regenerate(&self, key: String) -> Result<(), JsError> {
        let target = self.inner.regenerate_target(&key);
        if !self.inner.queue_branch(true, target) {
            return Err(JsError::new(
                "turnstream: regenerate takes the key of a message the server has",
            ));
        }
        Ok(())
    }

    /// Shows version `index` (0-based, of `entry.branch.count`) of entry `key` and the
    /// branch below it, in every tab and device (contract v1.2); posted now or when the
    /// server is reachable again.
    #[wasm_bindgen(js_name = "switchBranch")]
    pub fn switch_branch(&self, key: String, index: u32) -> Result<(), JsError> {
        let target = self.inner.sibling_id(&key, index as usize);
        if !self.inner.queue_branch(false, target) {
            return Err(JsError::new("turnstream: no such version of that entry"));
        }
        Ok(())
    }

    /// Asks the server to cancel a turn; its end arrives through the stream like any other.
    #[wasm_bindgen(unchecked_return_type = "Promise<CancelResult>")]
    pub fn cancel(&self, #[wasm_bindgen(js_name = "turnId")] turn_id: String) -> Promise {
        let inner = self.inner.clone();
        future_to_promise(async move {
            if !is_valid_id(&turn_id) {
                return Err(js_error("turnstream: not a turn id"));
            }
            inner
                .cancel(&turn_id)
                .await
                .map_err(|e| js_error(&crate::cat(&["turnstream: cancel failed: ", &e])))
        })
    }

    /// Closes the stream and the tab channel and writes the cache. Never cancels a turn: the
    /// server finishes it, and the next `connect` shows the result.
    #[wasm_bindgen(unchecked_return_type = "Promise<void>")]
    pub fn close(&self) -> Promise {
        let inner = self.inner.clone();
        future_to_promise(async move {
            inner.close().await;
            Ok(JsValue::UNDEFINED)
        })
    }
}

/// `send`, and `edit` (with the key of the entry edited; it takes no options).
fn send(
    inner: Rc<Client>,
    content: String,
    options: Option<SendOptions>,
    edit: Option<String>,
) -> Promise {
    future_to_promise(async move {
        if inner.is_closed() {
            return Err(js_error("turnstream: the client is closed"));
        }
        if content.len() > MAX_CONTENT_BYTES {
            return Err(js_error("turnstream: a message is at most 65536 bytes"));
        }
        let options: Option<&JsValue> = options.as_ref().map(AsRef::as_ref);
        let attachments = parse_attachments(options)?;
        if content.trim().is_empty() && attachments.is_empty() {
            return Err(js_error("turnstream: a message cannot be empty"));
        }
        const BUSY: &str = "turnstream: onBusy must be \"enqueue\", \"reject\" or \"interrupt\"";
        let on_busy = match options {
            Some(o) => option(o, "onBusy", JsValue::as_string, BUSY)?
                .map(|b| OnBusy::parse(&b).ok_or_else(|| js_error(BUSY)))
                .transpose()?,
            None => None,
        };
        let id = inner
            .send(content, attachments, on_busy, edit.as_deref())
            .await
            .ok_or_else(|| {
                js_error("turnstream: edit takes the key of a user message the server has")
            })?;
        let out = js_sys::Object::new();
        js_sys::Reflect::set(&out, &"clientMessageId".into(), &id.into())?;
        Ok(out.into())
    })
}

impl Drop for ChatClient {
    fn drop(&mut self) {
        // `free()` from JS: stop the loops, which otherwise keep the client alive.
        self.inner.shutdown();
    }
}

/// The answer as the server records it (and the body of `POST /input` but its `request_id`);
/// `None` when it does not fit the request's kind.
fn answer_json(kind: RequestKind, answer: &JsValue) -> Option<String> {
    let text = |key: &str| option(answer, key, JsValue::as_string, "").ok().flatten();
    let mut out = String::new();
    let mut o = Obj::new(&mut out);
    match kind {
        RequestKind::Approval => {
            let approved = option(answer, "approved", JsValue::as_bool, "").ok()??;
            o.bool("approved", approved);
            if let Some(reason) = text("reason") {
                o.str("reason", &reason);
            }
        }
        RequestKind::ClientTool => {
            if Reflect::has(answer, &"output".into()).unwrap_or(false) {
                let output = Reflect::get(answer, &"output".into()).ok()?;
                // `JSON.stringify(undefined)` is undefined: no output at all.
                let json = js_sys::JSON::stringify(&output).ok()?.as_string()?;
                o.key("output").push_str(&json);
            } else {
                o.str("error", &text("error")?);
            }
        }
        // A call (v1.3) is answered by its child turn's end, never by a person.
        RequestKind::AgentCall => return None,
        RequestKind::Question => match answer.as_string() {
            Some(t) => write_str(o.key("text"), &t),
            None => {
                o.str("text", &text("text")?);
            }
        },
    }
    o.end();
    Some(out)
}

fn js_error(message: &str) -> JsValue {
    js_sys::Error::new(message).into()
}
