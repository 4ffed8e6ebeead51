//! The systems a figure measures side by side: ours and the peers, each started fresh for the
//! figure, or the reason it is not measured.

use std::sync::Arc;

use crate::peers::{self, Avail};
use crate::systems::{Kind, System};
use crate::Opts;

/// The peers, each either started fresh for a figure or the reason it is not measured.
pub struct Peers {
    ds: Avail,
    rs: Avail,
}

impl Peers {
    pub fn setup(opts: &Opts) -> Peers {
        if opts.quick && !opts.peers {
            let why = Avail::Missing("not run (--quick skips the peers)".into());
            return Peers {
                ds: why.clone(),
                rs: why,
            };
        }
        if opts.no_peers {
            let why = Avail::Missing("not run (--no-peers)".into());
            return Peers {
                ds: why.clone(),
                rs: why,
            };
        }
        Peers {
            ds: peers::durable_streams(),
            rs: peers::resumable_stream(),
        }
    }
}

/// Starts a fresh system of `kind`, or says why it cannot run.
pub async fn start(kind: Kind, peers: &Peers) -> std::result::Result<Arc<System>, String> {
    start_with(kind, peers, &[]).await
}

/// [`start`], turnstream with `ours` added to its flags.
pub async fn start_with(
    kind: Kind,
    peers: &Peers,
    ours: &[&str],
) -> std::result::Result<Arc<System>, String> {
    let r = match kind {
        Kind::Turnstream => System::turnstream(ours).await,
        Kind::Ring => System::ring().await,
        Kind::DurableStreams => match &peers.ds {
            Avail::Ready(bin) => System::durable_streams(bin).await,
            Avail::Missing(why) => return Err(why.clone()),
        },
        Kind::Resumable => match &peers.rs {
            Avail::Ready(h) => System::resumable(h).await,
            Avail::Missing(why) => return Err(why.clone()),
        },
    };
    r.map(Arc::new)
        .map_err(|e| format!("failed to start: {e:#}"))
}
