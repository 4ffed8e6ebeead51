//! Figure 1's rows: durable append throughput and latency on SQLite, then on PostgreSQL
//! (directly, through the pooler, and on three nodes of one database), each beside its ceiling.

use std::fmt::Write as _;

use anyhow::Result;

use super::cells::{failed, p99, ratio};
use crate::append;
use crate::pg::{self, RawMode};
use crate::stats::{ms, thousands};
use crate::table::{Row, Sizes};

pub(super) async fn figure(sizes: &Sizes, pg: Option<&str>, rows: &mut Vec<Row>) -> Result<()> {
    eprintln!(
        "journal path: {} producers × {} events",
        sizes.append_sessions, sizes.append_events
    );
    let tp = append::in_process(None, sizes.append_sessions, sizes.append_events, 0).await?;
    let batch = tp.mean_batch.round().max(1.0) as usize;
    // The ceiling runs on this thread, off the async workers (it blocks for seconds).
    let dir = tp.dir.path().to_path_buf();
    let (raw_rows, raw_secs, raw_cpu) = {
        let dir = dir.clone();
        tokio::task::spawn_blocking(move || append::raw_sqlite(&dir, batch, false)).await??
    };
    let (sp_rows, sp_secs, sp_cpu) =
        tokio::task::spawn_blocking(move || append::raw_sqlite(&dir, batch, true)).await??;
    let raw_rate = raw_rows as f64 / raw_secs;
    let mut r = Row::new(
        format!(
            "1. durable append, events/s (200 B payloads, `synchronous=FULL`; server's runner + journal writer in process, {} concurrent turns)",
            sizes.append_sessions
        ),
        "≥ 60% of raw SQLite",
    );
    r.ours = format!(
        "{}/s ({} events in {:.2} s, mean group commit {:.0} writes; writer thread {:.1} µs CPU/event, busy {:.0}%)",
        thousands(tp.rate()),
        thousands(tp.events as f64),
        tp.secs,
        tp.mean_batch,
        1e6 * tp.writer_cpu / tp.events.max(1) as f64,
        100.0 * tp.writer_cpu / tp.secs
    );
    r.comparisons.push(format!(
        "raw SQLite, same rows and schema, {batch} rows/commit: {}/s ({:.1} µs CPU/row)",
        thousands(raw_rate),
        1e6 * raw_cpu / raw_rows.max(1) as f64
    ));
    r.comparisons.push(format!(
        "same, plus a SAVEPOINT/RELEASE per row as the writer does per job: {}/s ({:.1} µs CPU/row)",
        thousands(sp_rows as f64 / sp_secs),
        1e6 * sp_cpu / sp_rows.max(1) as f64
    ));
    r.ratio = format!("{:.0}% of raw", 100.0 * tp.rate() / raw_rate);
    rows.push(r);

    eprintln!(
        "over HTTP: {} sessions × {} messages",
        sizes.http_sessions, sizes.http_messages
    );
    let mut r = Row::new(
        format!(
            "1. durable append end to end over HTTP+SSE, events/s (`/echo` of 200 B words, `--coalesce-ms 0`, {} sessions, one SSE reader each)",
            sizes.http_sessions
        ),
        "≥ 100,000/s",
    );
    let mut http_rate = f64::NAN;
    match append::over_http(None, sizes.http_sessions, sizes.http_messages).await {
        Ok(h) => {
            http_rate = h.rate();
            r.ours = format!(
                "{}/s ({} events in {:.2} s; {} delivered over SSE)",
                thousands(h.rate()),
                thousands(h.events as f64),
                h.secs,
                thousands(h.delivered as f64)
            );
            r.comparisons.push(format!(
                "journal path in process: {}/s",
                thousands(tp.rate())
            ));
            r.ratio = ratio(h.rate(), tp.rate());
        }
        Err(e) => r.ours = format!("failed: {e:#}"),
    }
    rows.push(r);

    let per_session = 1000 * sizes.latency_secs;
    let pace_us = 1_000_000 * sizes.latency_sessions / 20_000;
    eprintln!("latency at 20k/s offered");
    let mut lat = append::in_process(None, sizes.latency_sessions, per_session, pace_us).await?;
    let mut r = Row::new(
        format!(
            "1. enqueue-to-durable latency p50 / p99 at {} events/s offered ({} paced turns)",
            thousands(lat.offered_rate),
            sizes.latency_sessions
        ),
        "p99 ≤ 5 ms",
    );
    let hist = |v: Option<f64>| {
        v.map(|s| ms((s * 1e6) as u64))
            .unwrap_or_else(|| "?".into())
    };
    r.ours = format!(
        "{} (agent emit → committed and published, {} samples; achieved {}/s)",
        lat.emit_to_durable.p50_p99(),
        thousands(lat.emit_to_durable.len() as f64),
        thousands(lat.rate())
    );
    r.comparisons.push(format!(
        "server histogram `turnstream_append_latency_seconds` (enqueue → commit, bucket-interpolated): {} / {} ms",
        hist(lat.hist_p50_p99.0),
        hist(lat.hist_p50_p99.1)
    ));
    rows.push(r);
    if let Some(url) = pg {
        pg_append(sizes, url, None, tp.rate(), http_rate, rows).await;
        if let Some(pooler) = pg::pooler_url() {
            pg_append(sizes, url, Some(&pooler), tp.rate(), http_rate, rows).await;
        }
    }
    Ok(())
}

/// How the PostgreSQL rows reach the database: "PostgreSQL", or through the pooler.
fn pg_label(pooler: Option<&str>) -> &'static str {
    match pooler {
        None => "PostgreSQL",
        Some(_) => "PostgreSQL through PgBouncer (transaction mode)",
    }
}

/// A fresh database's URL for the servers: direct, or through `pooler`.
async fn pg_database(admin: &str, pooler: Option<&str>, label: &str) -> Result<String> {
    let url = pg::fresh_database(admin, label).await?;
    match pooler {
        None => Ok(url),
        Some(p) => pg::through(p, &url),
    }
}

/// Figure 1 on PostgreSQL (directly, or through `pooler`), next to the SQLite figures of the
/// same run.
async fn pg_append(
    sizes: &Sizes,
    admin: &str,
    pooler: Option<&str>,
    sqlite_rate: f64,
    sqlite_http_rate: f64,
    rows: &mut Vec<Row>,
) {
    let db = pg_label(pooler);
    let mut r = Row::new(
        format!(
            "1. {db}: durable append, events/s (200 B payloads; server's runner + journal writer in process, {} concurrent turns × {} events)",
            sizes.pg_append_sessions, sizes.pg_append_events
        ),
        if pooler.is_none() {
            "≥ 60,000/s on one node"
        } else {
            "—"
        },
    );
    eprintln!(
        "{db} journal path: {} producers × {} events",
        sizes.pg_append_sessions, sizes.pg_append_events
    );
    let run = async {
        let url = pg_database(admin, pooler, "append").await?;
        let tp = append::in_process(
            Some(&url),
            sizes.pg_append_sessions,
            sizes.pg_append_events,
            0,
        )
        .await?;
        anyhow::Ok((url, tp))
    };
    let mut one_node = None;
    match run.await {
        Err(e) => r.ours = failed(e),
        Ok((url, tp)) => {
            one_node = Some(tp.rate());
            let batch = tp.mean_batch.round().max(1.0) as usize;
            r.ours = format!(
                "{}/s ({} events in {:.2} s, mean group commit {:.0} writes; writer thread {:.1} µs CPU/event, busy {:.0}%)",
                thousands(tp.rate()),
                thousands(tp.events as f64),
                tp.secs,
                tp.mean_batch,
                1e6 * tp.writer_cpu / tp.events.max(1) as f64,
                100.0 * tp.writer_cpu / tp.secs
            );
            r.comparisons
                .push(format!("SQLite, same run: {}/s", thousands(sqlite_rate)));
            r.ratio = format!("{:.2}× SQLite", tp.rate() / sqlite_rate);
            // The ceilings are the database's own: measured once, directly.
            let modes = if pooler.is_some() {
                Vec::new()
            } else {
                vec![
                    (
                        RawMode::RowByRow,
                        "one INSERT round trip per row, as the writer does",
                    ),
                    (
                        RawMode::Savepoints,
                        "plus SAVEPOINT/RELEASE round trips per row, as the writer does per job",
                    ),
                    (RawMode::MultiRow, "one multi-row INSERT per commit instead"),
                ]
            };
            for (mode, what) in modes {
                eprintln!("raw PostgreSQL: {mode:?}, {batch} rows/commit");
                let raw = async {
                    // The journal's own schema, created by the journal, then left empty.
                    let into = pg::fresh_database(admin, "raw").await?;
                    let metrics =
                        std::sync::Arc::new(turnstream_server::metrics::Metrics::default());
                    let hub = turnstream_server::live::hub::Hub::with_metrics(metrics.clone());
                    let j = turnstream_server::journal::Journal::open_database(
                        &turnstream_server::journal::Database::Postgres(into.clone()),
                        metrics,
                        turnstream_server::journal::JournalOptions::default(),
                        turnstream_server::live::LiveFeed::new(hub),
                    )
                    .await
                    .map_err(|e| anyhow::anyhow!("cannot create the schema: {e}"))?;
                    tokio::task::spawn_blocking(move || j.close()).await?;
                    pg::raw_insert(&url, &into, batch, mode).await
                };
                r.comparisons.push(match raw.await {
                    Ok(raw) => format!(
                        "raw PostgreSQL, same rows and schema, counter row locked, {batch} rows/commit, {what}: {}/s",
                        thousands(raw.rate())
                    ),
                    Err(e) => format!("raw PostgreSQL ({what}): {}", failed(e)),
                });
            }
        }
    }
    rows.push(r);
    // Run after every one-node row, so their database has none of its writes behind it.
    let nodes_row = rows.len();

    eprintln!(
        "{db} over HTTP: {} sessions × {} messages",
        sizes.pg_http_sessions, sizes.pg_http_messages
    );
    let mut r = Row::new(
        format!(
            "1. {db}: durable append end to end over HTTP+SSE, events/s (`/echo` of 200 B words, {} sessions × {} message, one SSE reader each)",
            sizes.pg_http_sessions, sizes.pg_http_messages
        ),
        "—",
    );
    let run = async {
        let url = pg_database(admin, pooler, "http").await?;
        append::over_http(Some(&url), sizes.pg_http_sessions, sizes.pg_http_messages).await
    };
    match run.await {
        Ok(h) => {
            r.ours = format!(
                "{}/s ({} events in {:.2} s; {} delivered over SSE)",
                thousands(h.rate()),
                thousands(h.events as f64),
                h.secs,
                thousands(h.delivered as f64)
            );
            r.comparisons.push(format!(
                "SQLite, same run ({} sessions × {} messages): {}/s",
                sizes.http_sessions,
                sizes.http_messages,
                thousands(sqlite_http_rate)
            ));
            r.ratio = format!("{:.2}× SQLite", h.rate() / sqlite_http_rate);
        }
        Err(e) => r.ours = failed(e),
    }
    rows.push(r);

    let per_session = 1_000_000 * sizes.latency_secs / sizes.pg_latency_pace_us;
    let offered = sizes.pg_latency_sessions as f64 * 1e6 / sizes.pg_latency_pace_us as f64;
    eprintln!("{db} latency at {offered}/s offered");
    let mut r = Row::new(
        format!(
            "1. {db}: enqueue-to-durable latency p50 / p99 at {} events/s offered ({} paced turns)",
            thousands(offered),
            sizes.pg_latency_sessions
        ),
        "—",
    );
    let run = async {
        let url = pg_database(admin, pooler, "latency").await?;
        append::in_process(
            Some(&url),
            sizes.pg_latency_sessions,
            per_session,
            sizes.pg_latency_pace_us,
        )
        .await
    };
    let hist = |v: Option<f64>| {
        v.map(|s| ms((s * 1e6) as u64))
            .unwrap_or_else(|| "?".into())
    };
    match run.await {
        Ok(mut lat) => {
            r.ours = format!(
                "{} (agent emit → committed and read back by the tail into the hub, {} samples; achieved {}/s)",
                lat.emit_to_durable.p50_p99(),
                thousands(lat.emit_to_durable.len() as f64),
                thousands(lat.rate())
            );
            let pg_p99 = p99(&mut lat.emit_to_durable);
            let mut sqlite = match append::in_process(
                None,
                sizes.pg_latency_sessions,
                per_session,
                sizes.pg_latency_pace_us,
            )
            .await
            {
                Ok(mut s) => {
                    r.ratio = format!("{:.2}× SQLite (p99)", pg_p99 / p99(&mut s.emit_to_durable));
                    format!(
                        "SQLite, same run, same offered rate: {}",
                        s.emit_to_durable.p50_p99()
                    )
                }
                Err(e) => format!("SQLite, same offered rate: {}", failed(e)),
            };
            let _ = write!(
                sqlite,
                "; server histogram on PostgreSQL (enqueue → commit, bucket-interpolated): {} / {} ms",
                hist(lat.hist_p50_p99.0),
                hist(lat.hist_p50_p99.1)
            );
            r.comparisons.push(sqlite);
        }
        Err(e) => r.ours = failed(e),
    }
    rows.push(r);
    if pooler.is_none() {
        let row = pg_append_nodes(sizes, admin, 3, one_node).await;
        rows.insert(nodes_row, row);
    }
}

/// Figure 1's append on `nodes` servers sharing one PostgreSQL database, against the same
/// workload on one server through the same code (`in_process_nodes` with one node), the two
/// alternated `sizes.pg_nodes_reps` times on fresh databases: the row gives the medians and
/// the median of each pair's ratio; the single-node row of the same run (`one_node`) is shown
/// beside them.
async fn pg_append_nodes(sizes: &Sizes, admin: &str, nodes: usize, one_node: Option<f64>) -> Row {
    let reps = sizes.pg_nodes_reps.max(1);
    let mut r = Row::new(
        format!(
            "1. PostgreSQL, {nodes} nodes: durable append, events/s (200 B payloads; {nodes} servers' runners + journal writers in process, one database, {} concurrent turns × {} events, each turn on one node; {reps} runs alternated with one node's)",
            sizes.pg_append_sessions, sizes.pg_append_events
        ),
        "≥ one node",
    );
    eprintln!(
        "PostgreSQL journal path on {nodes} nodes and on one, alternated {reps} times: {} producers × {} events",
        sizes.pg_append_sessions, sizes.pg_append_events
    );
    let run = |n: usize| async move {
        let url = pg::fresh_database(admin, if n == 1 { "node" } else { "nodes" }).await?;
        append::in_process_nodes(&url, n, sizes.pg_append_sessions, sizes.pg_append_events).await
    };
    // Each pair: one node's rate, then the run on `nodes`.
    let runs = async {
        let mut pairs = Vec::with_capacity(reps);
        for _ in 0..reps {
            let one = run(1).await?.rate();
            pairs.push((one, run(nodes).await?));
        }
        anyhow::Ok(pairs)
    };
    let pairs = match runs.await {
        Ok(pairs) => pairs,
        Err(e) => {
            r.ours = failed(e);
            return r;
        }
    };
    let single: Vec<f64> = pairs.iter().map(|(one, _)| *one).collect();
    let rates: Vec<f64> = pairs.iter().map(|(_, t)| t.rate()).collect();
    let ratios: Vec<f64> = rates.iter().zip(&single).map(|(m, s)| m / s).collect();
    let list = |v: &[f64]| {
        v.iter()
            .map(|x| thousands(*x))
            .collect::<Vec<_>>()
            .join("; ")
    };
    // The run whose rate is the median stands for the others' details.
    let mid = median_index(&rates);
    let (_, t) = &pairs[mid];
    r.ours = format!(
        "{}/s median (runs {}/s; the median run: {} events in {:.2} s, mean group commit {:.0} writes; commits per node {})",
        thousands(rates[mid]),
        list(&rates),
        thousands(t.events as f64),
        t.secs,
        t.mean_batch,
        t.commits
            .iter()
            .map(u64::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    );
    let mut one = format!(
        "one node, same workload and code, alternated: {}/s median (runs {}/s)",
        thousands(single[median_index(&single)]),
        list(&single)
    );
    if let Some(row) = one_node {
        let _ = write!(
            one,
            "; PostgreSQL one node's row, same run: {}/s",
            thousands(row)
        );
    }
    r.comparisons.push(one);
    r.ratio = format!(
        "{:.2}× one node (median of {} pairs: {})",
        ratios[median_index(&ratios)],
        ratios.len(),
        ratios
            .iter()
            .map(|x| format!("{x:.2}"))
            .collect::<Vec<_>>()
            .join("; ")
    );
    r
}

/// The index of `v`'s median (the lower one of an even count); `v` is not empty.
fn median_index(v: &[f64]) -> usize {
    let mut idx: Vec<usize> = (0..v.len()).collect();
    idx.sort_by(|a, b| v[*a].total_cmp(&v[*b]));
    idx[(idx.len() - 1) / 2]
}

#[cfg(test)]
mod tests {
    use super::median_index;

    #[test]
    fn median_index_is_nearest_rank() {
        // As `Samples::pct(50.0)`: the middle of an odd count, the lower middle of an even one.
        assert_eq!(median_index(&[3.0, 1.0, 2.0]), 2);
        assert_eq!(median_index(&[4.0, 1.0, 3.0, 2.0]), 3);
        assert_eq!(median_index(&[7.0]), 0);
    }
}
