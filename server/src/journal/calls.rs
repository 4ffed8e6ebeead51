//! Agent-to-agent calls in storage (contract v1.3). A call is a request of kind `agent_call` in
//! the caller's turn whose waiter is its journaled row: one transaction journals the caller's
//! `input_requested` (naming the child turn's ids, drawn then) and, in the target session, the
//! child's `message_received` and `turn_queued`, so the child cannot end before the request
//! exists. The transaction that ends the child (whatever ends it: its agent, a cancel, a lease
//! running out, crash recovery) answers the request ([`answer_caller`], called from the one end
//! of every turn, [`super::lifecycle::end_turn_in`]); the caller then continues as any answered
//! turn does.

use turnstream_protocol::call::{
    is_valid_agent, CallRefusal, ANSWERED_BY_TURN_PREFIX, CALLER_AUTHOR_PREFIX, MAX_AGENT_LEN,
    MAX_CALL_DEPTH,
};
use turnstream_protocol::input::MAX_INPUT_TEXT_BYTES;
use turnstream_protocol::limits::{is_valid_id, MAX_ACTIVE_TURNS_PER_SESSION, MAX_CONTENT_BYTES};
use turnstream_protocol::{
    Attachment, CallAnswer, CallTarget, CalledBy, InputRequest, RawJson, RequestKind, TurnState,
};

use super::accept::{admit_and_leaf, new_id, queue_turn, Admission, Queued};
use super::floor_char_boundary;
use super::rows::{turn_by_id, TurnRow};
use super::sql::{params, Sql};
use super::WriteCtx;
use crate::error::{Error, Result};

/// A call an agent opens: of agent `agent`, in session `session_id`, with `content` (and
/// `attachments`) as the child's user message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewCall {
    pub request_id: String,
    pub agent: String,
    pub session_id: String,
    pub content: String,
    pub attachments: Vec<Attachment>,
}

impl NewCall {
    /// Whether the call's target and message are well formed.
    pub fn check(&self) -> std::result::Result<(), CallRefusal> {
        let invalid = |why: String| Err(CallRefusal::Invalid(why));
        if !is_valid_id(&self.request_id) {
            return invalid("a call's request_id is 1 to 128 characters of [A-Za-z0-9_.:-]".into());
        }
        if !is_valid_agent(&self.agent) {
            return invalid(format!(
                "a call's agent is 1 to {MAX_AGENT_LEN} characters of [a-z0-9_-]"
            ));
        }
        if !is_valid_id(&self.session_id) {
            return invalid("a call's session_id is 1 to 128 characters of [A-Za-z0-9_.:-]".into());
        }
        if self.content.trim().is_empty() && self.attachments.is_empty() {
            return invalid("a call's content must not be empty".into());
        }
        if self.content.len() > MAX_CONTENT_BYTES {
            return invalid(format!(
                "a call's content is at most {MAX_CONTENT_BYTES} bytes"
            ));
        }
        turnstream_protocol::attachment::check_attachments(&self.content, &self.attachments)
            .map_err(|e| CallRefusal::Invalid(e.to_string()))
    }
}

/// The sessions on `caller`'s chain (its own, then each caller's above it) and how many calls
/// deep `caller` is (0: posted by a person). Stops past [`MAX_CALL_DEPTH`].
fn chain(conn: &dyn Sql, caller: &TurnRow) -> Result<(Vec<String>, usize)> {
    let mut sessions = vec![caller.session_id.clone()];
    let mut depth = 0;
    let mut above = caller.called_by.clone();
    while let Some(by) = above {
        depth += 1;
        sessions.push(by.session_id.clone());
        if depth > MAX_CALL_DEPTH {
            break;
        }
        above = turn_by_id(conn, &by.turn_id)?.and_then(|t| t.called_by);
    }
    Ok((sessions, depth))
}

/// Opens `call` in running turn `caller_id` (fenced by `fence` if given): the caller's
/// `input_requested` of kind `agent_call` and its row, and the child's message and turn, in the
/// transaction of the job. `Err(Error::CallRefused)` when the call is refused. Returns the
/// child turn's session.
pub(super) fn open_call(
    ctx: &mut WriteCtx<'_>,
    caller_id: &str,
    fence: Option<&str>,
    call: NewCall,
) -> Result<CallTarget> {
    call.check().map_err(Error::CallRefused)?;
    let caller = turn_by_id(ctx.conn, caller_id)?.ok_or(Error::NotFound { what: "turn" })?;
    let (sessions, depth) = chain(ctx.conn, &caller)?;
    if sessions.contains(&call.session_id) {
        return Err(Error::CallRefused(CallRefusal::Cycle));
    }
    if depth + 1 > MAX_CALL_DEPTH {
        return Err(Error::CallRefused(CallRefusal::DepthExceeded));
    }
    let target = CallTarget {
        agent: call.agent.clone(),
        session_id: call.session_id.clone(),
        turn_id: new_id("turn"),
        message_id: new_id("msg"),
    };
    let request = InputRequest {
        request_id: call.request_id.clone(),
        kind: RequestKind::AgentCall,
        tool: None,
        // What the call asks, for those who show it (the AI SDK's tool input): the child's
        // message, cut to a request's text limit.
        prompt: Some(
            call.content[..floor_char_boundary(&call.content, MAX_INPUT_TEXT_BYTES)].to_string(),
        ),
        options: None,
        expires_at: None,
        call: Some(target.clone()),
    };
    // The waiter first: the caller's request, then the child it waits for.
    super::inputs::open_request(ctx, &caller.session_id, caller_id, fence, request, 0)?;
    let (active, recorded) = admit_and_leaf(
        ctx.conn,
        &call.session_id,
        Admission::enqueue(MAX_ACTIVE_TURNS_PER_SESSION),
    )?;
    let called_by = CalledBy {
        turn_id: caller.turn_id.clone(),
        session_id: caller.session_id.clone(),
        request_id: call.request_id.clone(),
    };
    let author = format!("{CALLER_AUTHOR_PREFIX}{}", caller.agent);
    let (_, reply_id) = queue_turn(
        ctx,
        &Queued {
            session_id: &call.session_id,
            message_id: &target.message_id,
            turn_id: &target.turn_id,
            content: &call.content,
            attachments: &call.attachments,
            client_message_id: None,
            author: Some(&author),
            parent: active.as_deref(),
            agent: &call.agent,
            called_by: Some(&called_by),
        },
    )?;
    if recorded {
        super::leaves::set_leaf(ctx.conn, &call.session_id, &reply_id, true)?;
    }
    Ok(target)
}

/// Answers the call that made `child` (if it was called), in the transaction that ends it in
/// `state` with reply `text`: `input_given {request_id, by: "turn:<child>", answer: {turn_id,
/// state, text, error?}}`. A caller that ended meanwhile (its requests closed with it) is left
/// alone. Whether the caller continues now (it waited for nothing more).
pub(super) fn answer_caller(
    ctx: &mut WriteCtx<'_>,
    child: &TurnRow,
    state: TurnState,
    text: &str,
    error: Option<&str>,
) -> Result<bool> {
    let Some(by) = &child.called_by else {
        return Ok(false);
    };
    let answer = CallAnswer {
        turn_id: child.turn_id.clone(),
        state,
        text: text.to_string(),
        error: error.map(str::to_string),
    };
    let answer = RawJson::trusted(serde_json::to_string(&answer)?);
    let given = super::inputs::give_call_answer(
        ctx,
        &by.turn_id,
        &by.request_id,
        answer,
        format!("{ANSWERED_BY_TURN_PREFIX}{}", child.turn_id),
    )?;
    Ok(given)
}

/// The child turns of `caller_id`'s calls not answered yet, in the order they were opened.
pub(super) fn unanswered_children(conn: &dyn Sql, caller_id: &str) -> Result<Vec<String>> {
    let mut children = Vec::new();
    for row in conn.query(
        "SELECT request FROM input_requests WHERE turn_id = ?1 AND answer IS NULL
         ORDER BY requested_seq",
        params![caller_id],
    )? {
        let request: InputRequest = serde_json::from_str(&row.text(0)?)?;
        if let (RequestKind::AgentCall, Some(call)) = (request.kind, request.call) {
            children.push(call.turn_id);
        }
    }
    Ok(children)
}

impl super::Journal {
    /// The child turns of `turn_id`'s calls not answered yet: what a cancel of the caller
    /// cancels too.
    pub async fn unanswered_calls(&self, turn_id: &str) -> Result<Vec<String>> {
        let turn_id = turn_id.to_string();
        self.read(move |conn, _| unanswered_children(conn, &turn_id))
            .await
    }

    /// Queues call `call` of running turn `turn_id` (fenced by `fence` if given) behind the
    /// turn's other writes (a built-in agent's call, v1.3). Resolves to the child turn, or to
    /// [`Error::CallRefused`].
    pub(crate) fn submit_call(
        &self,
        turn_id: &str,
        fence: Option<&str>,
        call: NewCall,
    ) -> tokio::sync::oneshot::Receiver<Result<CallTarget>> {
        let turn_id = turn_id.to_string();
        let fence = fence.map(str::to_string);
        self.submit(move |ctx| open_call(ctx, &turn_id, fence.as_deref(), call))
    }
}
