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
//!
//! `LISTEN` needs a session of its own: the database URL when it is a direct connection or a
//! pooler in session mode, else `--database-listen-url`. A pooler in transaction mode accepts
//! `LISTEN` and then delivers nothing, so the connection is only trusted once a probe (a
//! `NOTIFY` sent through the pool) has come back on it; a URL whose probe never came back is
//! not tried again (each try would leave a server connection behind the pooler listening).
//! Without a connection that hears, the tail polls every [`POLL_UNHEARD`] and the replay tail
//! answers no resume (another server's retention would go unheard); it says so once in the log
//! and in `turnstream_journal_polling`, and keeps trying to connect when that is what failed.
//!
//! The same connection hears other servers' broadcasts (`turnstream_broadcast`, see
//! [`crate::journal::broadcast`]) and tells the broadcast's sink whether it hears.

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::Pool;
use futures::StreamExt;
use tokio::sync::Notify;
use tokio_postgres::types::Type;
use tokio_postgres::AsyncMessage;
use tokio_util::sync::CancellationToken;

use super::client::event_row;
use super::{with_causes, Target};
use crate::journal::broadcast::{self, Board};
use crate::journal::{Committed, FanOut};
use crate::metrics::Metrics;

/// Longest a committed event waits for delivery when every wake-up was missed.
const POLL: Duration = Duration::from_millis(500);
/// How often the tail reads the journal when it cannot listen: how late another server's
/// commit may reach this server's streams (half that on average).
pub const POLL_UNHEARD: Duration = Duration::from_millis(100);
/// Events read per query.
const PAGE: i64 = 1000;
/// First wait before listening again after the listening connection failed; doubled after each
/// failure up to [`RELISTEN_MAX`].
const RELISTEN: Duration = Duration::from_secs(1);
const RELISTEN_MAX: Duration = Duration::from_secs(60);
/// How long the probe notification may take to come back on a new listening connection.
const PROBE_WAIT: Duration = Duration::from_secs(2);
/// The channel of the probe: its payload is a token only the probing server knows.
const PROBE_CHANNEL: &str = "turnstream_probe";

/// Where the tail listens.
#[derive(Clone)]
pub(in crate::journal) struct Listen {
    pub target: Target,
    /// The URL without its password, for the log.
    pub location: String,
    /// Whether it is `--database-listen-url` rather than the database URL itself.
    pub own_url: bool,
}

/// The running tail of one server.
pub(in crate::journal) struct Tail {
    pub wake: Arc<Notify>,
    stop: CancellationToken,
}

impl Tail {
    /// Starts tailing after `head` (the last id already delivered, or the head at start).
    pub(in crate::journal) fn start(
        pool: Pool,
        listen: Listen,
        epoch: String,
        fanout: Arc<dyn FanOut>,
        head: Arc<AtomicI64>,
        metrics: Arc<Metrics>,
        board: Arc<Board>,
    ) -> Tail {
        let wake = Arc::new(Notify::new());
        let stop = CancellationToken::new();
        // Until a listening connection is known to hear, nothing is answered from memory.
        let heard = Arc::new(AtomicBool::new(false));
        fanout.retention_heard(false);
        let listener = Listener {
            pool: pool.clone(),
            listen,
            fanout: fanout.clone(),
            head: head.clone(),
            wake: wake.clone(),
            heard: heard.clone(),
            metrics,
            board,
        };
        tokio::spawn(listener.run(stop.clone()));
        tokio::spawn(deliver(
            pool,
            epoch,
            fanout,
            head,
            wake.clone(),
            heard,
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
    heard: Arc<AtomicBool>,
    stop: CancellationToken,
) {
    // Whether reads fail: said once when they start failing and once when they work again
    // (polling, a read is tried every 100 ms while the database is away).
    let mut failing = false;
    loop {
        loop {
            let read = read_after(&pool, head.load(Ordering::Acquire)).await;
            if read.is_ok() && failing {
                failing = false;
                tracing::info!("journal tail: reading new events again");
            }
            match read {
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
                Err(e) if failing => {
                    tracing::debug!(error = %e, "journal tail: cannot read new events; retrying");
                    break;
                }
                Err(e) => {
                    failing = true;
                    tracing::warn!(error = %e, "journal tail: cannot read new events; retrying");
                    break;
                }
            }
        }
        let every = if heard.load(Ordering::Acquire) {
            POLL
        } else {
            POLL_UNHEARD
        };
        tokio::select! {
            _ = wake.notified() => {}
            _ = tokio::time::sleep(every) => {}
            _ = stop.cancelled() => return,
        }
    }
}

async fn read_after(
    pool: &Pool,
    after: i64,
) -> Result<Vec<Committed>, Box<dyn std::error::Error + Send + Sync>> {
    let client = pool.get().await?;
    let rows = client
        .query_typed(
            "SELECT id, session_id, turn_id, ts, kind, data FROM turnstream.events WHERE id > $1
             ORDER BY id LIMIT $2",
            &[(&after, Type::INT8), (&PAGE, Type::INT8)],
        )
        .await?;
    let mut events = Vec::with_capacity(rows.len());
    for row in &rows {
        events.push(Committed::from(event_row(row)?));
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

/// What the listening task needs.
struct Listener {
    pool: Pool,
    listen: Listen,
    fanout: Arc<dyn FanOut>,
    head: Arc<AtomicI64>,
    wake: Arc<Notify>,
    /// Whether the listening connection is known to hear (else the tail polls faster).
    heard: Arc<AtomicBool>,
    metrics: Arc<Metrics>,
    /// Where other servers' broadcasts go.
    board: Arc<Board>,
}

/// How a listening connection ended.
enum Ended {
    Stopped,
    /// Why it could not listen, or stopped hearing; whether it had been hearing; and whether
    /// trying again may help (not when `LISTEN` worked and heard nothing).
    Failed {
        why: String,
        had_heard: bool,
        again: bool,
    },
}

impl Listener {
    /// Listens, and listens again whenever the connection fails, until `stop`.
    async fn run(self, stop: CancellationToken) {
        let mut wait = RELISTEN;
        // Whether the log has said that the tail polls, since it last heard.
        let mut said = false;
        loop {
            let (why, had_heard, again) = match self.session(&stop, &mut said).await {
                Ended::Stopped => return,
                Ended::Failed {
                    why,
                    had_heard,
                    again,
                } => (why, had_heard, again),
            };
            self.set_heard(false);
            if had_heard {
                wait = RELISTEN;
            }
            if said {
                tracing::debug!(reason = %why, "journal tail: still polling");
            } else {
                let advice = if self.listen.own_url {
                    ""
                } else {
                    "; give --database-listen-url a direct connection (not a pooler in transaction \
                     mode) to the same database to hear them at once"
                };
                tracing::warn!(
                    "journal tail: {why}; other servers' commits now reach this server's streams \
                     by polling the journal every {} ms, and every resume reads the journal{advice}",
                    POLL_UNHEARD.as_millis()
                );
                said = true;
            }
            if !again {
                return;
            }
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = stop.cancelled() => return,
            }
            wait = (wait * 2).min(RELISTEN_MAX);
            self.wake.notify_one();
        }
    }

    fn set_heard(&self, heard: bool) {
        self.heard.store(heard, Ordering::Release);
        self.metrics
            .journal_polling
            .store(u64::from(!heard), Ordering::Relaxed);
        self.fanout.retention_heard(heard);
        self.board.hearing(heard);
    }

    /// One listening connection: `LISTEN`, the probe, then every notification until it fails.
    async fn session(&self, stop: &CancellationToken, said: &mut bool) -> Ended {
        let location = &self.listen.location;
        let failed = |why: String, had_heard: bool| Ended::Failed {
            why,
            had_heard,
            again: true,
        };
        let target = &self.listen.target;
        let (client, mut connection) = tokio::select! {
            c = target.config.connect(target.tls.clone()) => match c {
                Ok(c) => c,
                Err(e) => {
                    return failed(format!("cannot connect to {location} to LISTEN: {}", with_causes(&e)), false)
                }
            },
            _ = stop.cancelled() => return Ended::Stopped,
        };
        let mut messages = futures::stream::poll_fn(move |cx| connection.poll_message(cx));
        let probe = Probe {
            token: format!("{:016x}", rand::random::<u64>()),
            back: AtomicBool::new(false),
            came: Notify::new(),
        };
        // A pooler in transaction mode would run LISTEN on a server connection that then
        // receives every commit's notification for nobody (PgBouncer logs each one): look first.
        let own = tokio::select! {
            r = self.alongside(self.own_session(&client), &mut messages, &probe) => r,
            _ = tokio::time::sleep(PROBE_WAIT * 4) => {
                Err(format!("{location} did not answer the session check"))
            }
            _ = stop.cancelled() => return Ended::Stopped,
        };
        match own {
            Ok(Ok(true)) => {}
            Ok(Ok(false)) => {
                return Ended::Failed {
                    why: format!(
                        "{location} has no session of its own to LISTEN on (a pooler in \
                         transaction mode); it is not tried again"
                    ),
                    had_heard: false,
                    again: false,
                }
            }
            Ok(Err(why)) | Err(why) => return failed(why, false),
        }
        let listen = client.batch_execute(
            "LISTEN turnstream_events; LISTEN turnstream_floors; LISTEN turnstream_probe; \
             LISTEN turnstream_broadcast",
        );
        tokio::select! {
            r = self.alongside(listen, &mut messages, &probe) => match r {
                Ok(Ok(())) => {}
                Ok(Err(e)) => return failed(format!("LISTEN on {location} failed: {}", with_causes(&e)), false),
                Err(why) => return failed(why, false),
            },
            _ = tokio::time::sleep(PROBE_WAIT * 4) => {
                return failed(format!("LISTEN on {location} did not answer"), false)
            }
            _ = stop.cancelled() => return Ended::Stopped,
        };
        // Sent through the pool; waited for until it comes back, or PROBE_WAIT after.
        let until_back = async {
            send_probe(&self.pool, &probe.token).await?;
            tokio::select! {
                _ = tokio::time::sleep(PROBE_WAIT) => {}
                _ = probe.came_back() => {}
            }
            Ok::<(), String>(())
        };
        tokio::select! {
            r = self.alongside(until_back, &mut messages, &probe) => match r {
                Ok(Ok(())) => {}
                Ok(Err(why)) => return failed(format!("cannot send the LISTEN probe: {why}"), false),
                Err(why) => return failed(why, false),
            },
            _ = stop.cancelled() => return Ended::Stopped,
        }
        if !probe.back.load(Ordering::Acquire) {
            return Ended::Failed {
                why: format!(
                    "LISTEN on {location} heard nothing of a notification sent through the \
                     database URL within {} s (a pooler in transaction mode, or another \
                     database); it is not tried again",
                    PROBE_WAIT.as_secs()
                ),
                had_heard: false,
                again: false,
            };
        }
        // Whatever committed before LISTEN took effect: events are read anew, floors are unknown.
        self.fanout
            .unsure_through(self.head.load(Ordering::Acquire));
        self.set_heard(true);
        if *said {
            tracing::info!("journal tail: listening on {location} again; polling stops");
            *said = false;
        } else {
            tracing::debug!("journal tail: listening on {location}");
        }
        self.wake.notify_one();
        tokio::select! {
            r = self.alongside(futures::future::pending::<()>(), &mut messages, &probe) => match r {
                Ok(()) => Ended::Stopped,
                Err(why) => failed(why, true),
            },
            _ = stop.cancelled() => Ended::Stopped,
        }
    }

    /// Awaits `fut` while reading the connection's messages (the connection makes progress only
    /// while they are read), handling each notification and noting the probe's. An error or
    /// the end of the connection is an `Err` saying so.
    async fn alongside<T>(
        &self,
        fut: impl std::future::Future<Output = T>,
        messages: &mut (impl futures::Stream<Item = Result<AsyncMessage, tokio_postgres::Error>>
                  + Unpin),
        probe: &Probe,
    ) -> Result<T, String> {
        let location = &self.listen.location;
        tokio::pin!(fut);
        loop {
            tokio::select! {
                out = &mut fut => return Ok(out),
                m = messages.next() => match m {
                    Some(Ok(AsyncMessage::Notification(n))) => {
                        probe.notified(&n);
                        self.notified(&n);
                    }
                    Some(Ok(_)) => {}
                    Some(Err(e)) => {
                        return Err(format!("the connection to {location} to LISTEN failed: {}", with_causes(&e)))
                    }
                    None => return Err(format!("the connection to {location} to LISTEN closed")),
                },
            }
        }
    }

    /// Whether the listening connection keeps a session of its own (see
    /// [`super::session::keeps_session`]), checked against a pool connection.
    async fn own_session(&self, client: &tokio_postgres::Client) -> Result<bool, String> {
        let location = &self.listen.location;
        let other = self.pool.get().await.map_err(|e| with_causes(&e))?;
        super::session::keeps_session(client, &other)
            .await
            .map_err(|e| {
                format!(
                    "cannot check the session of {location}: {}",
                    with_causes(&e)
                )
            })
    }

    fn notified(&self, n: &tokio_postgres::Notification) {
        match n.channel() {
            "turnstream_floors" => floor_raised(&*self.fanout, n.payload()),
            PROBE_CHANNEL => {}
            broadcast::CHANNEL => self.board.heard(n.payload()),
            _ => self.wake.notify_one(),
        }
    }
}

/// The notification a new listening connection waits for, sent through the pool.
struct Probe {
    /// Its payload, which only this server knows.
    token: String,
    back: AtomicBool,
    came: Notify,
}

impl Probe {
    fn notified(&self, n: &tokio_postgres::Notification) {
        if n.channel() == PROBE_CHANNEL && n.payload() == self.token {
            self.back.store(true, Ordering::Release);
            self.came.notify_one();
        }
    }

    async fn came_back(&self) {
        while !self.back.load(Ordering::Acquire) {
            self.came.notified().await;
        }
    }
}

/// Sends the probe notification through the pool (the way every commit's `NOTIFY` goes).
async fn send_probe(pool: &Pool, token: &str) -> Result<(), String> {
    let client = pool.get().await.map_err(|e| with_causes(&e))?;
    client
        .execute_typed(
            "SELECT pg_notify($1, $2)",
            &[(&PROBE_CHANNEL, Type::TEXT), (&token, Type::TEXT)],
        )
        .await
        .map_err(|e| with_causes(&e))?;
    Ok(())
}
