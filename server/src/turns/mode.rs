//! How this server's turns run, chosen once at start: by its own agent on a journal it alone
//! writes, by its own agent under leases on a journal other servers share, or by worker
//! processes. Each variant carries what its mode needs; the methods answer what the rest of
//! [`super`] asks of the mode.

use std::sync::Arc;
use std::time::Duration;

use super::dispatch::Dispatch;
use super::lease::Node;
use super::sweep::{SWEEP_EVERY, WORKER_SWEEP_EVERY};
use crate::agent::Agent;

/// How this server's turns run.
pub enum Mode {
    /// This server runs every turn with `agent`, on a journal no other server writes.
    Local { agent: Arc<dyn Agent> },
    /// This server runs turns with `agent` on a journal other servers share (PostgreSQL), each
    /// under a lease it renews while the turn runs: a turn runs once across servers, and one
    /// whose server vanished ends `interrupted` once its lease runs out.
    Shared { agent: Arc<dyn Agent>, node: Node },
    /// Worker processes claim the turns over HTTP under leases (`--agent worker`); this server
    /// runs none. `shared`: other servers write the journal too.
    Workers {
        dispatch: Arc<Dispatch>,
        shared: bool,
    },
}

/// Who starts a queued turn.
pub(super) enum Claimer<'a> {
    /// Worker processes: their waiting claims are woken.
    Workers(&'a Dispatch),
    /// This server, with its agent, under a lease for `lease` if the journal is shared.
    Here {
        agent: &'a Arc<dyn Agent>,
        lease: Option<&'a Node>,
    },
}

impl Mode {
    /// The mode for `agent` (`None`: worker processes run the turns) on a journal other servers
    /// may share (`shared_journal`), with leases of `lease`.
    pub fn new(agent: Option<Arc<dyn Agent>>, shared_journal: bool, lease: Duration) -> Mode {
        match agent {
            None => Mode::Workers {
                dispatch: Arc::new(Dispatch::new(lease)),
                shared: shared_journal,
            },
            Some(agent) if shared_journal => Mode::Shared {
                agent,
                node: Node::new(lease),
            },
            Some(agent) => Mode::Local { agent },
        }
    }

    /// Worker mode's dispatch, for the worker API; `None` when this server runs the turns.
    pub fn workers(&self) -> Option<&Arc<Dispatch>> {
        match self {
            Mode::Workers { dispatch, .. } => Some(dispatch),
            Mode::Local { .. } | Mode::Shared { .. } => None,
        }
    }

    pub(super) fn claimer(&self) -> Claimer<'_> {
        match self {
            Mode::Local { agent } => Claimer::Here { agent, lease: None },
            Mode::Shared { agent, node } => Claimer::Here {
                agent,
                lease: Some(node),
            },
            Mode::Workers { dispatch, .. } => Claimer::Workers(dispatch),
        }
    }

    /// How often leases are swept; `None` when nothing here takes a lease (every lease an
    /// earlier run left ends at start: nothing would renew it).
    pub(super) fn sweep_every(&self) -> Option<Duration> {
        match self {
            Mode::Local { .. } => None,
            Mode::Shared { .. } => Some(SWEEP_EVERY),
            Mode::Workers { .. } => Some(WORKER_SWEEP_EVERY),
        }
    }

    /// Whether other servers queue turns and free sessions on this journal too: then the sweep
    /// looks for waiting sessions on every tick, and a cancel looks again when the turn did not
    /// end (it may have moved to another server meanwhile).
    pub(super) fn shared_journal(&self) -> bool {
        match self {
            Mode::Local { .. } => false,
            Mode::Shared { .. } => true,
            Mode::Workers { shared, .. } => *shared,
        }
    }

    /// Whether a cancel ends a turn that is not queued in the journal, under its lease (a
    /// worker's, or another server's), rather than only stopping its run here.
    pub(super) fn cancel_ends_lease(&self, running_here: bool) -> bool {
        match self {
            Mode::Local { .. } => false,
            Mode::Shared { .. } => !running_here,
            Mode::Workers { .. } => true,
        }
    }

    /// Tells worker claims waiting here that a turn may have become claimable; nothing in the
    /// other modes (this server's session loops look for themselves).
    pub(super) fn wake_claims(&self) {
        if let Mode::Workers { dispatch, .. } = self {
            dispatch.notify();
        }
    }
}
