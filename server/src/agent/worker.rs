//! The agent of `--agent worker`: a placeholder, since worker processes run those turns (see
//! [`crate::worker`]) and the runner never starts an agent for them.

use futures::future::BoxFuture;

use super::{Agent, AgentError, TurnContext, TurnSink};

/// Never run: the runner of `--agent worker` leaves turns to worker processes.
#[derive(Debug, Clone, Copy, Default)]
pub struct WorkerAgent;

impl Agent for WorkerAgent {
    fn run<'a>(
        &'a self,
        _ctx: TurnContext,
        _sink: TurnSink,
    ) -> BoxFuture<'a, Result<(), AgentError>> {
        Box::pin(async {
            Err(AgentError(
                "this turn is for a worker process (--agent worker)".into(),
            ))
        })
    }
}
