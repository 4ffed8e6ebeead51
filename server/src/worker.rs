//! Turns run by worker processes (`--agent worker`): the runner starts no agent; workers claim
//! queued turns over HTTP under a lease (see [`crate::lease`]). This owns what the runner does
//! for them: waking waiting claims and coalescing a worker's events as a built-in agent's
//! output is. Turns whose lease ran out are ended by the sweep of [`crate::cluster`].

use std::time::Duration;

use tokio::sync::Notify;
use turnstream_protocol::worker::WorkerEvent;
use turnstream_protocol::EventBody;

use crate::runner::split_delta;

/// Worker mode's shared state.
#[derive(Debug)]
pub struct Dispatch {
    /// How long a lease lasts after each accepted request.
    pub lease: Duration,
    /// Told whenever a turn may have become claimable (queued, or its session freed).
    ready: Notify,
}

impl Dispatch {
    pub fn new(lease: Duration) -> Dispatch {
        Dispatch {
            lease,
            ready: Notify::new(),
        }
    }

    /// Wakes every waiting claim to look again.
    pub fn notify(&self) {
        self.ready.notify_waiters();
    }

    /// A wake-up to wait on; create (and enable) it before looking, so none is missed.
    pub fn ready(&self) -> tokio::sync::futures::Notified<'_> {
        self.ready.notified()
    }
}

/// A worker's events as journal bodies, coalesced like a built-in agent's output: consecutive
/// deltas of one kind merge, a delta longer than the journal's largest is split (never cut),
/// empty deltas vanish, tool updates keep their place.
pub fn coalesce(events: Vec<WorkerEvent>) -> Vec<EventBody> {
    let mut out = Vec::new();
    let mut pending: Option<(bool, String)> = None;
    let flush = |pending: &mut Option<(bool, String)>, out: &mut Vec<EventBody>| {
        let Some((thinking, buf)) = pending.take() else {
            return;
        };
        for delta in split_delta(buf) {
            out.push(if thinking {
                EventBody::Thinking { delta }
            } else {
                EventBody::ResponseDelta { delta }
            });
        }
    };
    for event in events {
        let (thinking, delta) = match event {
            WorkerEvent::Thinking { delta } => (true, delta),
            WorkerEvent::Response { delta } => (false, delta),
            WorkerEvent::Tool(call) => {
                flush(&mut pending, &mut out);
                out.push(EventBody::Tool(call));
                continue;
            }
        };
        if delta.is_empty() {
            continue;
        }
        match &mut pending {
            Some((k, buf)) if *k == thinking => buf.push_str(&delta),
            _ => {
                flush(&mut pending, &mut out);
                pending = Some((thinking, delta));
            }
        }
    }
    flush(&mut pending, &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runner::MAX_DELTA_BYTES;
    use turnstream_protocol::{ToolCall, ToolStatus};

    fn response(d: &str) -> WorkerEvent {
        WorkerEvent::Response { delta: d.into() }
    }

    #[test]
    fn merges_runs_and_keeps_tool_order() {
        let tool = ToolCall {
            call_id: "c".into(),
            name: "clock".into(),
            status: ToolStatus::Started,
            input_preview: None,
            output_preview: None,
        };
        let out = coalesce(vec![
            WorkerEvent::Thinking { delta: "a".into() },
            WorkerEvent::Thinking { delta: "b".into() },
            response(""),
            WorkerEvent::Tool(tool.clone()),
            response("x"),
            response("y"),
        ]);
        assert_eq!(
            out,
            vec![
                EventBody::Thinking { delta: "ab".into() },
                EventBody::Tool(tool),
                EventBody::ResponseDelta { delta: "xy".into() },
            ]
        );
    }

    #[test]
    fn splits_long_deltas_on_char_boundaries() {
        let long = "é".repeat(MAX_DELTA_BYTES);
        let out = coalesce(vec![response(&long)]);
        let mut joined = String::new();
        for body in &out {
            let EventBody::ResponseDelta { delta } = body else {
                panic!("unexpected {body:?}");
            };
            assert!(delta.len() <= MAX_DELTA_BYTES);
            joined.push_str(delta);
        }
        assert_eq!(joined, long);
        assert_eq!(out.len(), 2);
    }
}
