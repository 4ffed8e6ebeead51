//! Figure 2's rows: publish-to-browser latency on every system, then on PostgreSQL on one node
//! and across two (directly, and through the pooler polling or listening).

use std::fmt::Write as _;
use std::sync::Arc;

use anyhow::Result;

use super::cells::{failed, p99, ratio};
use super::PEERS;
use crate::fanout;
use crate::lineup::{start_with, Peers};
use crate::pg;
use crate::stats::ms;
use crate::systems::{Kind, System};
use crate::table::{Row, Sizes};

/// One fan-out measurement as a cell, and its p99 (µs).
fn fanout_cell(r: Result<fanout::Fanout>) -> (String, f64) {
    match r {
        Ok(mut f) => {
            let p = p99(&mut f.samples);
            let mut c = format!(
                "{} (server CPU {:.0}%)",
                f.samples.p50_p99(),
                f.server_cpu_pct
            );
            if !f.stages.is_empty() {
                let p50 = f.samples.pct(50.0).map_or(f64::NAN, |v| v as f64);
                // The stream's wake-up is timed from the frame's making, so it covers the hub's
                // walk up to that stream: the hub's own row is not added again.
                let inside: f64 = f
                    .stages
                    .iter()
                    .filter(|s| s.name != fanout::HUB_STAGE)
                    .map(|s| s.p50_us)
                    .sum();
                c.push_str("; inside the server, p50 / p99:");
                for s in &f.stages {
                    let _ = write!(
                        c,
                        " {} {} / {},",
                        s.name,
                        ms(s.p50_us as u64),
                        ms(s.p99_us as u64)
                    );
                }
                let _ = write!(
                    c,
                    " the rest of the p50 (the POST before the server's handling, the stream's socket write, the reader) {} ms",
                    ms((p50 - inside).max(0.0) as u64)
                );
                if let Some(w) = f.writes_per_message {
                    let _ = write!(c, "; {w:.1} stream writes per message per subscriber");
                }
            }
            if f.missing > 0 || f.failed_publishes > 0 {
                let _ = write!(
                    c,
                    " ({} deliveries missing, {} publishes failed",
                    f.missing, f.failed_publishes
                );
                if let Some(why) = &f.first_failure {
                    let _ = write!(c, ", the first: {why}");
                }
                c.push(')');
            }
            (c, p)
        }
        Err(e) => (failed(e), f64::NAN),
    }
}

/// Figure 2 on PostgreSQL: one node, then publish on node A and read on node B of one database.
async fn pg_fanout(
    admin: &str,
    case: (usize, usize, usize, f64),
    label: &str,
    sqlite: Option<&(String, f64)>,
    rows: &mut Vec<Row>,
) {
    let (streams, subs, messages, rate) = case;
    let sqlite_cell = |r: &mut Row| {
        if let Some((cell, _)) = sqlite {
            r.comparisons.push(format!("SQLite, same run: {cell}"));
        }
    };
    let sqlite_p99 = sqlite.map_or(f64::NAN, |(_, p)| *p);
    eprintln!("fan-out {label}: PostgreSQL, one node");
    let one = async {
        let url = pg::fresh_database(admin, "fanout").await?;
        let sys = Arc::new(System::turnstream_on(Some(&url), fanout::SERVER_FLAGS).await?);
        fanout::run(sys, streams, subs, messages, rate).await
    };
    let (one_cell, one_p99) = fanout_cell(one.await);
    let mut r = Row::new(
        format!("2. PostgreSQL, one node: publish-to-browser latency p50 / p99, {label} ({messages} messages at {rate}/s, 5 events each)"),
        "—",
    );
    r.ours = one_cell.clone();
    sqlite_cell(&mut r);
    r.ratio = ratio(one_p99, sqlite_p99);
    rows.push(r);

    eprintln!("fan-out {label}: PostgreSQL, across two nodes");
    let across = async {
        let url = pg::fresh_database(admin, "nodes").await?;
        let a = Arc::new(System::turnstream_on(Some(&url), fanout::SERVER_FLAGS).await?);
        let b = Arc::new(System::turnstream_on(Some(&url), fanout::SERVER_FLAGS).await?);
        fanout::across(a, b, streams, subs, messages, rate).await
    };
    let (cell, p) = fanout_cell(across.await);
    let mut r = Row::new(
        format!("2. PostgreSQL, across nodes: published on node A, read on node B (two servers, one database), p50 / p99, {label} ({messages} messages at {rate}/s, 5 events each)"),
        "p99 ≤ 50 ms",
    );
    r.ours = cell.replacen("(server CPU ", "(server CPU of both nodes ", 1);
    sqlite_cell(&mut r);
    r.comparisons
        .push(format!("PostgreSQL one node, same run: {one_cell}"));
    r.ratio = ratio(p, sqlite_p99);
    rows.push(r);

    // The same across two nodes whose database URL is a pooler's: without a listen URL they
    // poll the journal (every 100 ms); with a direct one they listen.
    let Some(pooler) = pg::pooler_url() else {
        return;
    };
    for (listen, how) in [
        (false, "no listen URL: each node polls the journal"),
        (true, "a direct --database-listen-url: each node listens"),
    ] {
        eprintln!("fan-out {label}: through PgBouncer, across two nodes, {how}");
        let across = async {
            let direct = pg::fresh_database(admin, "pooled").await?;
            let url = pg::through(&pooler, &direct)?;
            let mut extra = fanout::SERVER_FLAGS.to_vec();
            if listen {
                extra.extend(["--database-listen-url", &direct]);
            }
            let a = Arc::new(System::turnstream_on(Some(&url), &extra).await?);
            let b = Arc::new(System::turnstream_on(Some(&url), &extra).await?);
            fanout::across(a, b, streams, subs, messages, rate).await
        };
        let (pooled, pooled_p99) = fanout_cell(across.await);
        let mut r = Row::new(
            format!("2. PostgreSQL through PgBouncer (transaction mode), across nodes, {how}: published on node A, read on node B, p50 / p99, {label} ({messages} messages at {rate}/s, 5 events each)"),
            "—",
        );
        r.ours = pooled.replacen("(server CPU ", "(server CPU of both nodes ", 1);
        r.comparisons.push(format!(
            "PostgreSQL directly, across nodes, same run: {cell}"
        ));
        r.ratio = match ratio(pooled_p99, p) {
            none if none == "—" => none,
            x => format!("{x} direct (p99)"),
        };
        rows.push(r);
    }
}

pub(super) async fn figure(sizes: &Sizes, peers: &Peers, pg: Option<&str>, rows: &mut Vec<Row>) {
    for (case, &(streams, subs, messages, rate)) in sizes.fanout.iter().enumerate() {
        let label = if streams == 1 {
            format!(
                "{subs} subscriber{} of one session",
                if subs == 1 { "" } else { "s" }
            )
        } else {
            format!("{streams} sessions × {subs} subscriber")
        };
        let target = match (streams, subs) {
            (1, 1000..) => "p99 ≤ durable-streams' and ≤ 1.1× the ring's",
            (1, _) => "p50 and p99 ≤ durable-streams'",
            _ => "—",
        };
        let mut r = Row::new(
            format!("2. publish-to-browser latency p50 / p99, {label} ({messages} messages at {rate}/s, 5 events each, the server's default coalescing)"),
            target,
        );
        let mut ours = None;
        for kind in std::iter::once(Kind::Turnstream).chain(PEERS) {
            eprintln!("fan-out {label}: {kind}");
            let cell = match start_with(kind, peers, fanout::SERVER_FLAGS).await {
                Err(why) => why,
                Ok(sys) => {
                    let (c, p) =
                        fanout_cell(fanout::run(sys.clone(), streams, subs, messages, rate).await);
                    if kind == Kind::Turnstream {
                        ours = Some((c.clone(), p));
                    } else if kind == Kind::Ring {
                        r.ratio = ratio(ours.as_ref().map_or(f64::NAN, |o| o.1), p);
                    }
                    c
                }
            };
            if kind == Kind::Turnstream {
                r.ours = cell;
            } else {
                r.comparisons.push(format!("{kind}: {cell}"));
            }
        }
        rows.push(r);
        if let (Some(url), true) = (pg, case < sizes.pg_fanout_cases) {
            let case = (streams, subs, messages, rate);
            pg_fanout(url, case, &label, ours.as_ref(), rows).await;
        }
    }
}
