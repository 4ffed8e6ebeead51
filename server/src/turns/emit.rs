//! Journaling what an agent emits during a turn, in order: deltas merged by the
//! [`Coalescer`] for the coalescing window, tool calls the agent left open marked `failed` once it
//! can emit no more, and, on a shared journal, every write fenced by the turn's lease.

use std::collections::VecDeque;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use turnstream_protocol::{EventBody, ToolCall, ToolStatus};

use super::coalesce::{Coalescer, DeltaKind};
use crate::agent::Emission;
use crate::error::{Error, Result};
use crate::journal::Journal;

/// What the emitter journaled for a turn.
pub(super) struct Emitted {
    /// The reply: exactly the concatenation of the journaled response deltas.
    pub text: String,
    /// Why a write failed, if one did.
    pub error: Option<String>,
    /// How many requests for input were journaled.
    pub requests: usize,
    /// The turn's last events, not journaled yet: the deltas still merging when the agent
    /// stopped, then the tool calls it left open, marked `failed`. They go with the turn's end.
    pub tail: Vec<EventBody>,
}

/// Journals a turn's emissions in order, merging consecutive deltas of one kind for `window`,
/// until the agent is gone or `stop` (then what it emitted before is still journaled).
pub(super) async fn emit(
    mut out: Emitter,
    mut rx: mpsc::UnboundedReceiver<Emission>,
    mut stop: oneshot::Receiver<()>,
    window: Duration,
) -> Emitted {
    let mut deadline: Option<Instant> = None;
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
                    out.flush();
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
                out.flush();
                let write = out.journal.submit_input_request(
                    &out.session,
                    &out.turn,
                    out.fence.as_ref().map(|(token, _)| token.as_str()),
                    request,
                );
                out.inflight.push_back(write);
                out.requests += 1;
            }
            Emission::Usage(usage) => {
                let write = out.journal.submit_turn_usage(&out.turn, usage);
                out.inflight.push_back(write);
            }
        }
        if window.is_zero() {
            out.flush();
        } else if !out.coalescer.is_merging() {
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
        tail,
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
}

impl Emitter {
    pub(super) fn new(
        journal: Journal,
        session: String,
        turn: String,
        fence: Option<(String, CancellationToken)>,
        text: String,
    ) -> Emitter {
        Emitter {
            journal,
            session,
            turn,
            text,
            requests: 0,
            coalescer: Coalescer::default(),
            ready: Vec::new(),
            inflight: VecDeque::new(),
            error: None,
            open_tools: Vec::new(),
            fence,
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
        for body in ready.drain(..) {
            self.submit(body);
        }
        self.ready = ready;
    }

    fn submit(&mut self, body: EventBody) {
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
