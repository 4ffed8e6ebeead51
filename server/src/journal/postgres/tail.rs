//! The journal tail: how a server learns of events committed by any server sharing the
//! database, its own included, and hands them to its fan-out in id order.
//!
//! It reads the journal after the last id it delivered whenever it is woken: by this server's
//! writer after a commit, by a `NOTIFY` from another server's commit (through `LISTEN` on a
//! connection of its own), or by a timer. A notification is only a wake-up, never the data: one
//! that is missed (the listening connection dropped) delays delivery by at most the timer.
//!
//! Retention on another server raises a session's floor; the notice of it (`turnstream_floors`)
//! cuts this server's replay tail back, so the tail never answers a position the journal no
//! longer can. Whenever the listening connection is (re)established, this server cannot know
//! what it missed, and its whole replay tail is cut back to the head: streams then read the
//! journal, which knows the floors.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::Pool;
use futures::StreamExt;
use tokio::sync::Notify;
use tokio_postgres::AsyncMessage;
use tokio_util::sync::CancellationToken;

use super::Target;
use crate::journal::{Committed, FanOut};

/// Longest a committed event waits for delivery when every wake-up was missed.
const POLL: Duration = Duration::from_millis(500);
/// Events read per query.
const PAGE: i64 = 1000;
/// Wait before listening again after the listening connection failed.
const RELISTEN: Duration = Duration::from_secs(1);

/// The running tail of one server.
pub(in crate::journal) struct Tail {
    pub wake: Arc<Notify>,
    stop: CancellationToken,
}

impl Tail {
    /// Starts tailing after `head` (the last id already delivered, or the head at start).
    pub(in crate::journal) fn start(
        pool: Pool,
        target: Target,
        epoch: String,
        fanout: Arc<dyn FanOut>,
        head: Arc<AtomicI64>,
    ) -> Tail {
        let wake = Arc::new(Notify::new());
        let stop = CancellationToken::new();
        tokio::spawn(listen(
            target,
            fanout.clone(),
            head.clone(),
            wake.clone(),
            stop.clone(),
        ));
        tokio::spawn(deliver(
            pool,
            epoch,
            fanout,
            head,
            wake.clone(),
            stop.clone(),
        ));
        Tail { wake, stop }
    }

    pub(in crate::journal) fn stop(&self) {
        self.stop.cancel();
    }
}

/// Reads and hands on every event after the delivered head, each time it is woken.
async fn deliver(
    pool: Pool,
    epoch: String,
    fanout: Arc<dyn FanOut>,
    head: Arc<AtomicI64>,
    wake: Arc<Notify>,
    stop: CancellationToken,
) {
    loop {
        loop {
            match read_after(&pool, head.load(Ordering::Acquire)).await {
                Ok(events) if events.is_empty() => break,
                Ok(events) => {
                    let full = events.len() as i64 >= PAGE;
                    let last = events.last().map_or(0, |e| e.seq);
                    fanout.committed(&epoch, events);
                    head.store(last, Ordering::Release);
                    if !full {
                        break;
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "journal tail: cannot read new events; retrying");
                    break;
                }
            }
        }
        tokio::select! {
            _ = wake.notified() => {}
            _ = tokio::time::sleep(POLL) => {}
            _ = stop.cancelled() => return,
        }
    }
}

async fn read_after(
    pool: &Pool,
    after: i64,
) -> Result<Vec<Committed>, Box<dyn std::error::Error + Send + Sync>> {
    let client = pool.get().await?;
    let stmt = client
        .prepare_cached(
            "SELECT id, session_id, turn_id, ts, kind, data FROM events WHERE id > $1
             ORDER BY id LIMIT $2",
        )
        .await?;
    let rows = client.query(&stmt, &[&after, &PAGE]).await?;
    let mut events = Vec::with_capacity(rows.len());
    for row in rows {
        events.push(Committed {
            seq: row.try_get(0)?,
            session_id: row.try_get(1)?,
            turn_id: row.try_get(2)?,
            ts: row.try_get(3)?,
            kind: row.try_get(4)?,
            data: row.try_get(5)?,
        });
    }
    Ok(events)
}

/// Cuts the replay tail back to a floor another server raised.
fn floor_raised(fanout: &dyn FanOut, payload: &str) {
    match payload
        .split_once(' ')
        .and_then(|(floor, session)| Some((floor.parse::<i64>().ok()?, session)))
    {
        Some((floor, session)) => fanout.floor_raised(session, floor),
        None => tracing::warn!(payload, "journal tail: an unreadable floor notice"),
    }
}

/// Holds a connection that `LISTEN`s for commits and wakes the tail on each notification.
async fn listen(
    target: Target,
    fanout: Arc<dyn FanOut>,
    head: Arc<AtomicI64>,
    wake: Arc<Notify>,
    stop: CancellationToken,
) {
    loop {
        match target.config.connect(target.tls.clone()).await {
            Ok((client, mut connection)) => {
                let mut messages = futures::stream::poll_fn(move |cx| connection.poll_message(cx));
                // The connection makes progress only while its messages are polled: LISTEN
                // is sent while they are.
                let listen =
                    client.batch_execute("LISTEN turnstream_events; LISTEN turnstream_floors");
                tokio::pin!(listen);
                let mut listening = false;
                loop {
                    tokio::select! {
                        r = &mut listen, if !listening => match r {
                            Ok(()) => {
                                listening = true;
                                // Whatever committed before LISTEN took effect: events are
                                // read anew, floors are unknown.
                                fanout.unsure_through(head.load(Ordering::Acquire));
                                wake.notify_one();
                            }
                            Err(e) => {
                                tracing::warn!(error = %e, "journal tail: LISTEN failed");
                                break;
                            }
                        },
                        m = messages.next() => match m {
                            Some(Ok(AsyncMessage::Notification(n))) => {
                                if n.channel() == "turnstream_floors" {
                                    floor_raised(&*fanout, n.payload());
                                } else {
                                    wake.notify_one();
                                }
                            }
                            Some(Ok(_)) => {}
                            Some(Err(e)) => {
                                tracing::warn!(error = %e, "journal tail: the listening connection failed");
                                break;
                            }
                            None => break,
                        },
                        _ = stop.cancelled() => return,
                    }
                }
            }
            Err(e) => tracing::warn!(error = %e, "journal tail: cannot connect to listen"),
        }
        tokio::select! {
            _ = tokio::time::sleep(RELISTEN) => {}
            _ = stop.cancelled() => return,
        }
        wake.notify_one();
    }
}
