//! Figure 3's rows: an idle connection's memory and a reconnect burst on every system, then
//! ours over HTTP/2 with TLS beside plain HTTP/1.1.

use std::sync::Arc;

use super::cells::ratio;
use super::PEERS;
use crate::lineup::{start, Peers};
use crate::stats::{dur_ms, ms, thousands};
use crate::systems::{Kind, System};
use crate::table::{Row, Sizes};
use crate::{h2client, idle};

pub(super) async fn figure(sizes: &Sizes, peers: &Peers, fds: u64, rows: &mut Vec<Row>) {
    let conns = sizes.idle_conns.min((fds as usize).saturating_sub(200));
    let mut mem = Row::new(
        format!(
            "3. server RSS per idle SSE connection ({} open streams on {} sessions)",
            thousands(conns as f64),
            sizes.idle_streams
        ),
        "≤ 2 KB",
    );
    let mut burst = Row::new(
        format!("3. reconnect burst: {} readers at once with their last position; accepted streams/s, all caught up after", thousands(conns as f64)),
        "≥ 5,000 accepts/s",
    );
    let mut ours = (f64::NAN, f64::NAN);
    for kind in std::iter::once(Kind::Turnstream).chain(PEERS) {
        eprintln!("idle: {kind}");
        let (m, b) = match start(kind, peers).await {
            Err(why) => (why.clone(), why),
            Ok(sys) => match idle::run(sys.clone(), conns, sizes.idle_streams).await {
                Ok(mut i) => {
                    if kind == Kind::Turnstream {
                        ours = (i.bytes_per_conn, i.accept_rate);
                    } else if kind == Kind::Ring {
                        mem.ratio = ratio(ours.0, i.bytes_per_conn);
                        burst.ratio = ratio(ours.1, i.accept_rate);
                    }
                    idle_cells(&mut i)
                }
                Err(e) => (format!("failed: {e:#}"), format!("failed: {e:#}")),
            },
        };
        if kind == Kind::Turnstream {
            mem.ours = m;
            burst.ours = b;
        } else {
            mem.comparisons.push(format!("{kind}: {m}"));
            burst.comparisons.push(format!("{kind}: {b}"));
        }
    }
    rows.push(mem);
    rows.push(burst);
    figure_h2(sizes, conns, ours, rows).await;
}

/// Figure 3 over HTTP/2 with TLS (`--tls-cert`), side by side with plain HTTP/1.1 (`plain`:
/// bytes per connection and accepts per second): one TLS connection per stream, as separate
/// browsers have, and many streams per connection, as one browser's tabs have.
async fn figure_h2(sizes: &Sizes, conns: usize, plain: (f64, f64), rows: &mut Vec<Row>) {
    let per_conn = IDLE_H2_STREAMS_PER_CONN.min(conns.max(1));
    let mut mem = Row::new(
        format!(
            "3. server RSS per idle SSE stream over HTTP/2 + TLS ({} streams on {} sessions; one TLS connection per stream, and {per_conn} streams per connection)",
            thousands(conns as f64),
            sizes.idle_streams
        ),
        "≤ 2 KB per stream at many per connection; ≤ 17 KB for a TLS connection of one stream (half of 34.5 KB)",
    );
    let mut burst = Row::new(
        format!("3. reconnect burst over HTTP/2 + TLS: {} readers at once, each with its own TLS handshake; accepted streams/s, all caught up after", thousands(conns as f64)),
        "—",
    );
    for mode in [h2client::Mode::PerStream, h2client::Mode::Shared(per_conn)] {
        eprintln!("idle over HTTP/2 + TLS: {mode:?}");
        let (m, b) = match System::turnstream_h2(mode).await {
            Err(e) => (
                format!("failed to start: {e:#}"),
                format!("failed to start: {e:#}"),
            ),
            Ok(sys) => match idle::run(Arc::new(sys), conns, sizes.idle_streams).await {
                Ok(mut i) => {
                    if mode == h2client::Mode::PerStream {
                        mem.ratio = format!("{} of HTTP/1.1", ratio(i.bytes_per_conn, plain.0));
                        burst.ratio = format!("{} of HTTP/1.1", ratio(i.accept_rate, plain.1));
                    }
                    idle_cells(&mut i)
                }
                Err(e) => (format!("failed: {e:#}"), format!("failed: {e:#}")),
            },
        };
        if mode == h2client::Mode::PerStream {
            mem.ours = m;
            burst.ours = b;
        } else {
            mem.comparisons
                .push(format!("{per_conn} streams per connection: {m}"));
            burst
                .comparisons
                .push(format!("{per_conn} streams per connection: {b}"));
        }
    }
    mem.comparisons.push(format!(
        "plain HTTP/1.1 (above): {:.1} KB",
        plain.0 / 1000.0
    ));
    mem.comparisons.push(match h2client::Parts::measure() {
        Ok(parts) => parts.cell(),
        Err(e) => format!("parts: failed: {e:#}"),
    });
    burst
        .comparisons
        .push(format!("plain HTTP/1.1 (above): {}/s", thousands(plain.1)));
    rows.push(mem);
    rows.push(burst);
}

/// Streams per TLS connection in figure 3's multiplexed run: under the server's limit of
/// concurrent streams per HTTP/2 connection.
const IDLE_H2_STREAMS_PER_CONN: usize = 500;

/// Figure 3's two cells: memory per idle connection, and the reconnect burst.
fn idle_cells(i: &mut idle::Idle) -> (String, String) {
    let fail = if i.failed > 0 {
        format!(", {} failed", i.failed)
    } else {
        String::new()
    };
    (
        format!(
            "{:.1} KB (RSS {} → {} MiB{fail})",
            i.bytes_per_conn / 1000.0,
            i.rss_before_kib / 1024,
            i.rss_after_kib / 1024
        ),
        format!(
            "{}/s (all headers in {} ms, p50 {} ms; all caught up in {} ms; {} SYNs dropped{fail})",
            thousands(i.accept_rate),
            dur_ms(i.headers_all),
            i.headers.pct(50.0).map(ms).unwrap_or_default(),
            dur_ms(i.caught_up_all),
            i.listen_drops
        ),
    )
}
