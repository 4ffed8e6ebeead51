//! Journaling what an agent emits during a turn, in order: deltas merged by the
//! [`Coalescer`] for the coalescing window, tool calls the agent left open marked `failed` once it
//! can emit no more, and, on a shared journal, every write fenced by the turn's lease.
//!
//! A turn taken while still queued (a server of its own journal, with a coalescing window) has
//! its start journaled here too, deferred like a delta: with its first events, at the latest a
//! window after the agent began, or else with its end, so a short turn costs no commit (and no
//! write to each subscriber) for its start.

use std::collections::VecDeque;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use turnstream_protocol::{EventBody, ToolCall, ToolStatus};

use super::coalesce::{Coalescer, DeltaKind};
use crate::agent::{CallRefused, Emission};
use crate::error::{Error, Result};
use crate::journal::{Journal, NewCall};

/// What the emitter journaled for a turn.
pub(super) struct Emitted {
    /// The reply: exactly the concatenation of the journaled response deltas.
    pub text: String,
    /// Why a write failed, if one did.
    pub error: Option<String>,
    /// How many requests for input were journaled.
    pub requests: usize,
    /// The sessions of the calls' child turns (v1.3), to wake.
    pub called: Vec<String>,
    /// The turn's last events, not journaled yet: the deltas still merging when the agent
    /// stopped, then the tool calls it left open, marked `failed`. They go with the turn's end.
    pub tail: Vec<EventBody>,
    /// Where the turn's start stands.
    pub start: Start,
}

/// A turn's start, as the emitter leaves it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Start {
    /// Journaled (before the agent ran, or here with the turn's first events).
    Journaled,
    /// Not journaled yet: it goes with the turn's end.
    WithEnd,
    /// The turn was no longer queued (cancelled meanwhile): nothing of it was journaled.
    Refused,
    /// The storage refused it: the turn is still queued.
    Failed(String),
}

/// A deferred start, while it is not known committed.
enum Deferred {
    /// Not submitted yet.
    Due,
    /// Submitted, with the turn's first events.
    Submitted(oneshot::Receiver<Result<bool>>),
}

/// Journals a turn's emissions in order, merging consecutive deltas of one kind for `window`,
/// until the agent is gone or `stop` (then what it emitted before is still journaled).
pub(super) async fn emit(
    mut out: Emitter,
    mut rx: mpsc::UnboundedReceiver<Emission>,
    mut stop: oneshot::Receiver<()>,
    window: Duration,
) -> Emitted {
    // A deferred start is due a window after the agent began, if nothing comes before.
    let mut deadline: Option<Instant> = out.start.as_ref().map(|_| Instant::now() + window);
    let mut stopping = false;
    loop {
        let item = if stopping {
            // Drain what the agent emitted before it stopped, then finish.
            match rx.try_recv() {
                Ok(item) => Some(item),
                Err(_) => break,
            }
        } else {
            tokio::select! {
                biased;
                item = rx.recv() => match item {
                    Some(item) => Some(item),
                    None => break,
                },
                _ = sleep_until(deadline) => {
                    out.flush_and_start();
                    deadline = None;
                    None
                }
                _ = &mut stop => {
                    stopping = true;
                    None
                }
            }
        };
        let Some(item) = item else { continue };
        match item {
            Emission::Thinking(d) => out.delta(DeltaKind::Thinking, d),
            Emission::Response(d) => out.delta(DeltaKind::Response, d),
            Emission::Tool(call) => {
                out.flush();
                out.track_tool(&call);
                out.submit(EventBody::Tool(call));
            }
            Emission::Request(request) => {
                out.flush_and_start();
                // The request is not fenced by the start: it waits until the start is known.
                if !out.confirm_start().await {
                    continue;
                }
                let write = out.journal.submit_input_request(
                    &out.session,
                    &out.turn,
                    out.fence.as_ref().map(|(token, _)| token.as_str()),
                    request,
                );
                out.inflight.push_back(write);
                out.requests += 1;
            }
            Emission::Call(call, reply) => {
                out.flush_and_start();
                if !out.confirm_start().await {
                    reply.send(Err(CallRefused("turn_ended".into())));
                    continue;
                }
                let write = out.journal.submit_call(
                    &out.turn,
                    out.fence.as_ref().map(|(token, _)| token.as_str()),
                    NewCall {
                        request_id: call.request_id,
                        agent: call.agent,
                        session_id: call.session_id,
                        content: call.content,
                        attachments: Vec::new(),
                    },
                );
                match write.await {
                    Ok(Ok(target)) => {
                        out.requests += 1;
                        out.called.push(target.session_id.clone());
                        reply.send(Ok(target));
                    }
                    Ok(Err(Error::CallRefused(refusal))) => {
                        reply.send(Err(CallRefused(refusal.code().into())));
                    }
                    Ok(Err(e)) => {
                        reply.send(Err(CallRefused(
                            e.storage_fault()
                                .map_or("internal", |_| "storage_unavailable")
                                .into(),
                        )));
                        out.failed(&e);
                    }
                    Err(_) => {
                        reply.send(Err(CallRefused("internal".into())));
                        out.error = Some("journal closed".into());
                    }
                }
            }
            Emission::Usage(usage) => {
                let write = out.journal.submit_turn_usage(&out.turn, usage);
                out.inflight.push_back(write);
            }
        }
        if window.is_zero() {
            out.flush();
        } else if !out.coalescer.is_merging() && !matches!(out.start, Some(Deferred::Due)) {
            deadline = None;
        } else if deadline.is_none() {
            deadline = Some(Instant::now() + window);
        }
    }
    // A turn that asked for input parks after this, so what is left is journaled now; any
    // other turn's last events go in the same step as its end (one commit fewer per turn).
    let tail = if out.requests > 0 {
        out.flush();
        out.fail_open_tools();
        Vec::new()
    } else {
        out.take_tail()
    };
    let start = match out.start.take() {
        None => out.refused.clone().unwrap_or(Start::Journaled),
        Some(Deferred::Due) => Start::WithEnd,
        Some(Deferred::Submitted(rx)) => known(rx.await.map_err(drop)),
    };
    for rx in std::mem::take(&mut out.inflight) {
        match rx.await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => out.failed(&e),
            Err(_) => out.error = Some("journal closed".into()),
        }
    }
    Emitted {
        text: out.text,
        error: out.error,
        requests: out.requests,
        called: out.called,
        tail,
        start,
    }
}

/// What a submitted start's answer says (`Err`: the journal closed without one).
fn known(answer: std::result::Result<Result<bool>, ()>) -> Start {
    match answer {
        Ok(Ok(true)) => Start::Journaled,
        Ok(Ok(false)) => Start::Refused,
        Ok(Err(e)) => Start::Failed(e.to_string()),
        Err(()) => Start::Failed("journal closed".into()),
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

/// One turn's writes.
pub(super) struct Emitter {
    journal: Journal,
    session: String,
    turn: String,
    /// The reply so far: exactly the concatenation of the journaled response deltas.
    text: String,
    /// Requests for input submitted.
    requests: usize,
    /// The sessions of the calls opened (v1.3).
    called: Vec<String>,
    coalescer: Coalescer,
    /// Bodies the coalescer handed back, waiting to be submitted (kept to reuse its memory).
    ready: Vec<EventBody>,
    /// Writes queued and not yet known committed, oldest first (they commit in order).
    inflight: VecDeque<oneshot::Receiver<Result<i64>>>,
    error: Option<String>,
    /// Tool calls reported started and not yet finished or failed. A cancelled or interrupted
    /// turn drops its agent mid-call; without a last word from here the call would show as
    /// running forever.
    open_tools: Vec<ToolCall>,
    /// On a shared journal: the turn's lease token, and what to cancel once a write finds the
    /// lease lost.
    fence: Option<(String, CancellationToken)>,
    /// The turn's start, while it is deferred and not known committed (see the module's docs).
    start: Option<Deferred>,
    /// Set once the deferred start is known refused or failed: what the agent emits from then
    /// on is dropped.
    refused: Option<Start>,
    /// Stops the agent once its start is refused or failed.
    stop_agent: CancellationToken,
}

impl Emitter {
    pub(super) fn new(
        journal: Journal,
        session: String,
        turn: String,
        fence: Option<(String, CancellationToken)>,
        text: String,
    ) -> Emitter {
        Emitter::with_start(journal, session, turn, fence, text, None)
    }

    /// An emitter that also journals the turn's start (see the module's docs); `stop_agent` is
    /// cancelled if the start is refused or fails.
    pub(super) fn deferring_start(
        journal: Journal,
        session: String,
        turn: String,
        text: String,
        stop_agent: CancellationToken,
    ) -> Emitter {
        Emitter::with_start(journal, session, turn, None, text, Some(stop_agent))
    }

    fn with_start(
        journal: Journal,
        session: String,
        turn: String,
        fence: Option<(String, CancellationToken)>,
        text: String,
        stop_agent: Option<CancellationToken>,
    ) -> Emitter {
        let start = stop_agent.is_some().then_some(Deferred::Due);
        Emitter {
            journal,
            session,
            turn,
            text,
            requests: 0,
            called: Vec::new(),
            coalescer: Coalescer::default(),
            ready: Vec::new(),
            inflight: VecDeque::new(),
            error: None,
            open_tools: Vec::new(),
            fence,
            start,
            refused: None,
            stop_agent: stop_agent.unwrap_or_default(),
        }
    }

    /// [`Emitter::flush`], and a deferred start still due goes now, even with nothing to go
    /// with it.
    fn flush_and_start(&mut self) {
        self.flush();
        if matches!(self.start, Some(Deferred::Due)) {
            self.start_with(Vec::new());
        }
    }

    /// Submits the deferred start with the turn's first events, in one step.
    fn start_with(&mut self, first: Vec<EventBody>) {
        // A refusal stops the agent at once, from the writer.
        let write = self
            .journal
            .submit_turn_start(&self.turn, first, self.stop_agent.clone());
        self.start = Some(Deferred::Submitted(write));
    }

    /// Waits until a deferred start is known: true if the turn runs (or nothing was deferred).
    async fn confirm_start(&mut self) -> bool {
        if let Some(Deferred::Submitted(rx)) = self.start.take() {
            self.known(known(rx.await.map_err(drop)));
        }
        self.refused.is_none()
    }

    /// Looks, without waiting, whether a submitted start is known yet.
    fn poll_start(&mut self) {
        if let Some(Deferred::Submitted(rx)) = &mut self.start {
            let outcome = match rx.try_recv() {
                Err(oneshot::error::TryRecvError::Empty) => return,
                Err(oneshot::error::TryRecvError::Closed) => Err(()),
                Ok(r) => Ok(r),
            };
            self.start = None;
            self.known(known(outcome));
        }
    }

    /// The start is known: if refused or failed, the agent stops and nothing more is journaled.
    fn known(&mut self, start: Start) {
        if start != Start::Journaled {
            self.refused = Some(start);
            self.stop_agent.cancel();
        }
    }

    fn failed(&mut self, e: &Error) {
        if let (Error::LeaseLost, Some((_, lost))) = (e, &self.fence) {
            lost.cancel();
        }
        self.error = Some(format!("journal write failed: {e}"));
    }

    fn track_tool(&mut self, call: &ToolCall) {
        self.open_tools.retain(|t| t.call_id != call.call_id);
        if matches!(call.status, ToolStatus::Started | ToolStatus::Progress) {
            self.open_tools.push(call.clone());
        }
    }

    /// Journals every call the agent left open as `failed`, once the agent can emit no more.
    fn fail_open_tools(&mut self) {
        for call in self.failed_open_tools() {
            self.submit(call);
        }
    }

    /// Every call the agent left open, marked `failed`.
    fn failed_open_tools(&mut self) -> Vec<EventBody> {
        std::mem::take(&mut self.open_tools)
            .into_iter()
            .map(|mut call| {
                call.status = ToolStatus::Failed;
                // Previews already journaled stay (a later update without one keeps them).
                call.input_preview = None;
                call.output_preview = None;
                EventBody::Tool(call)
            })
            .collect()
    }

    /// What [`Emitter::flush`] and [`Emitter::fail_open_tools`] would journal, in that order,
    /// handed back instead, for the turn's end to journal in its own step.
    fn take_tail(&mut self) -> Vec<EventBody> {
        if self.refused.is_some() {
            return Vec::new();
        }
        let mut tail = std::mem::take(&mut self.ready);
        self.coalescer.flush(&mut tail);
        tail.extend(self.failed_open_tools());
        tail
    }

    fn delta(&mut self, kind: DeltaKind, delta: String) {
        if kind == DeltaKind::Response {
            self.text.push_str(&delta);
        }
        let mut ready = std::mem::take(&mut self.ready);
        self.coalescer.push(kind, delta, &mut ready);
        self.submit_ready(ready);
    }

    fn flush(&mut self) {
        let mut ready = std::mem::take(&mut self.ready);
        self.coalescer.flush(&mut ready);
        self.submit_ready(ready);
    }

    fn submit_ready(&mut self, mut ready: Vec<EventBody>) {
        if !ready.is_empty() && matches!(self.start, Some(Deferred::Due)) {
            self.start_with(ready.split_off(0));
        }
        for body in ready.drain(..) {
            self.submit(body);
        }
        self.ready = ready;
    }

    fn submit(&mut self, body: EventBody) {
        if let Some(Deferred::Due) = self.start {
            self.start_with(vec![body]);
            return;
        }
        self.poll_start();
        if self.refused.is_some() {
            return;
        }
        // Collect finished writes as we go so the queue stays short on long turns. Writes from
        // one emitter commit in order, so only the front can be done.
        while let Some(front) = self.inflight.front_mut() {
            match front.try_recv() {
                Ok(Ok(_)) => {}
                Ok(Err(e)) => self.failed(&e),
                Err(oneshot::error::TryRecvError::Empty) => break,
                Err(oneshot::error::TryRecvError::Closed) => {
                    self.error = Some("journal closed".into());
                }
            }
            self.inflight.pop_front();
        }
        let write = match &self.fence {
            // Behind a start not known committed, an event is written only if the turn runs.
            None if self.start.is_some() => {
                self.journal
                    .submit_started_turn_event(&self.session, &self.turn, body)
            }
            None => self
                .journal
                .submit_turn_event(&self.session, &self.turn, body),
            Some((token, _)) => {
                self.journal
                    .submit_fenced_turn_event(&self.session, &self.turn, token, body)
            }
        };
        self.inflight.push_back(write);
    }
}
