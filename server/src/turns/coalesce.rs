//! The one coalescer of a turn's deltas, for a built-in agent's output and a worker's events
//! alike: consecutive deltas of one kind merge into one event, no event holds more than
//! [`MAX_DELTA_BYTES`] (a longer run is split at character boundaries, never cut), empty deltas
//! vanish, and anything else (a tool update) ends the run before it, keeping its place.

use turnstream_protocol::worker::WorkerEvent;
use turnstream_protocol::EventBody;

use crate::journal::{floor_char_boundary, NewCall, WorkerWrite};

/// Largest delta journaled as one event; longer output is split, never cut.
pub const MAX_DELTA_BYTES: usize = 16 * 1024;

/// What a delta adds to: the model's thinking or its reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeltaKind {
    Thinking,
    Response,
}

/// Merges consecutive deltas of one kind. What is ready to journal is put in the caller's
/// buffer, in order.
#[derive(Debug, Default)]
pub struct Coalescer {
    /// The run being merged; shorter than [`MAX_DELTA_BYTES`] between calls.
    pending: Option<(DeltaKind, String)>,
}

impl Coalescer {
    /// Adds `delta` to the run being merged. Puts in `ready` the run of the other kind it ends,
    /// if any, and every full-size piece of this run (the rest merges on).
    pub fn push(&mut self, kind: DeltaKind, delta: String, ready: &mut Vec<EventBody>) {
        if delta.is_empty() {
            return;
        }
        match &mut self.pending {
            Some((k, run)) if *k == kind => run.push_str(&delta),
            _ => {
                self.flush(ready);
                self.pending = Some((kind, delta));
            }
        }
        if let Some((kind, run)) = &mut self.pending {
            if run.len() >= MAX_DELTA_BYTES {
                take_full_pieces(*kind, run, ready);
                if run.is_empty() {
                    self.pending = None;
                }
            }
        }
    }

    /// Puts the run being merged, if any, in `ready`.
    pub fn flush(&mut self, ready: &mut Vec<EventBody>) {
        if let Some((kind, mut run)) = self.pending.take() {
            take_full_pieces(kind, &mut run, ready);
            if !run.is_empty() {
                ready.push(body(kind, run));
            }
        }
    }

    /// Whether a run is being merged (and waits for a flush).
    pub fn is_merging(&self) -> bool {
        self.pending.is_some()
    }
}

/// Moves the pieces of exactly [`MAX_DELTA_BYTES`] (less at a character boundary) from the
/// front of `run` to `ready`, leaving the shorter rest.
fn take_full_pieces(kind: DeltaKind, run: &mut String, ready: &mut Vec<EventBody>) {
    while run.len() >= MAX_DELTA_BYTES {
        let cut = floor_char_boundary(run, MAX_DELTA_BYTES);
        let rest = run.split_off(cut);
        ready.push(body(kind, std::mem::replace(run, rest)));
    }
}

fn body(kind: DeltaKind, delta: String) -> EventBody {
    match kind {
        DeltaKind::Thinking => EventBody::Thinking { delta },
        DeltaKind::Response => EventBody::ResponseDelta { delta },
    }
}

/// A worker's events as journal bodies (and calls, v1.3), coalesced as a built-in agent's output
/// is.
pub fn worker_events(events: Vec<WorkerEvent>) -> Vec<WorkerWrite> {
    let mut coalescer = Coalescer::default();
    let mut bodies = Vec::with_capacity(events.len());
    let mut out = Vec::with_capacity(events.len());
    for event in events {
        match event {
            WorkerEvent::Thinking { delta } => {
                coalescer.push(DeltaKind::Thinking, delta, &mut bodies)
            }
            WorkerEvent::Response { delta } => {
                coalescer.push(DeltaKind::Response, delta, &mut bodies)
            }
            WorkerEvent::Tool(call) => {
                coalescer.flush(&mut bodies);
                bodies.push(EventBody::Tool(call));
            }
            WorkerEvent::InputRequested(request) => {
                coalescer.flush(&mut bodies);
                bodies.push(EventBody::InputRequested(request));
            }
            WorkerEvent::Call(call) => {
                coalescer.flush(&mut bodies);
                out.extend(bodies.drain(..).map(WorkerWrite::Event));
                out.push(WorkerWrite::Call(NewCall {
                    request_id: call.request_id,
                    agent: call.agent,
                    session_id: call.session_id,
                    content: call.content,
                    attachments: call.attachments,
                }));
            }
        }
    }
    coalescer.flush(&mut bodies);
    out.extend(bodies.into_iter().map(WorkerWrite::Event));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use turnstream_protocol::{ToolCall, ToolStatus};

    fn response(d: &str) -> WorkerEvent {
        WorkerEvent::Response { delta: d.into() }
    }

    /// [`worker_events`] of a batch without calls: its bodies.
    fn bodies(events: Vec<WorkerEvent>) -> Vec<EventBody> {
        worker_events(events)
            .into_iter()
            .map(|w| match w {
                WorkerWrite::Event(body) => body,
                WorkerWrite::Call(call) => panic!("unexpected {call:?}"),
            })
            .collect()
    }

    #[test]
    fn a_call_keeps_its_place_between_runs() {
        use turnstream_protocol::worker::CallEvent;
        let out = worker_events(vec![
            response("a"),
            WorkerEvent::Call(CallEvent {
                request_id: "c1".into(),
                agent: "researcher".into(),
                session_id: "s2".into(),
                content: "look".into(),
                attachments: vec![],
            }),
            response("b"),
        ]);
        assert_eq!(out.len(), 3);
        assert!(
            matches!(&out[0], WorkerWrite::Event(EventBody::ResponseDelta { delta }) if delta == "a")
        );
        assert!(
            matches!(&out[1], WorkerWrite::Call(c) if c.request_id == "c1" && c.session_id == "s2")
        );
        assert!(
            matches!(&out[2], WorkerWrite::Event(EventBody::ResponseDelta { delta }) if delta == "b")
        );
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
        let out = bodies(vec![
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
        let out = bodies(vec![response(&long)]);
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

    /// A run is journaled in full-size pieces as it grows, however it arrives, and the rest
    /// waits for the flush: the same events whether the deltas came one by one or at once.
    #[test]
    fn a_growing_run_gives_full_pieces_and_keeps_the_rest() {
        let piece = "x".repeat(10 * 1024);
        let mut c = Coalescer::default();
        let mut ready = Vec::new();
        for _ in 0..4 {
            c.push(DeltaKind::Response, piece.clone(), &mut ready);
        }
        let sizes = |v: &[EventBody]| -> Vec<usize> {
            v.iter()
                .map(|b| match b {
                    EventBody::ResponseDelta { delta } => delta.len(),
                    other => panic!("unexpected {other:?}"),
                })
                .collect()
        };
        assert_eq!(sizes(&ready), vec![MAX_DELTA_BYTES, MAX_DELTA_BYTES]);
        assert!(c.is_merging());
        c.flush(&mut ready);
        assert_eq!(
            sizes(&ready),
            vec![
                MAX_DELTA_BYTES,
                MAX_DELTA_BYTES,
                40 * 1024 - 2 * MAX_DELTA_BYTES
            ]
        );
        assert!(!c.is_merging());
        let at_once = bodies(vec![response(&piece.repeat(4))]);
        assert_eq!(at_once, ready);
    }

    #[test]
    fn a_kind_change_ends_the_run() {
        let mut c = Coalescer::default();
        let mut ready = Vec::new();
        c.push(DeltaKind::Thinking, "hm".into(), &mut ready);
        c.push(DeltaKind::Thinking, "m".into(), &mut ready);
        assert!(ready.is_empty());
        c.push(DeltaKind::Response, "ok".into(), &mut ready);
        assert_eq!(
            ready,
            vec![EventBody::Thinking {
                delta: "hmm".into()
            }]
        );
        c.flush(&mut ready);
        assert_eq!(ready[1], EventBody::ResponseDelta { delta: "ok".into() });
    }
}
