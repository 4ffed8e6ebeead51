//! Runs the chosen figures on every system that supports them and renders the one table:
//! figure | ours | comparison(s) | ratio | target.

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Instant;

use anyhow::Result;

use crate::lineup::{start, start_with, Peers};
use crate::pg::{self, RawMode};
use crate::stats::{dur_ms, ms, thousands, Samples};
use crate::systems::{Kind, System};
use crate::table::{Row, Sizes};
use crate::{append, compare, fanout, h2client, idle, refresh, replay, scale, tabs, Figure, Opts};

const PEERS: [Kind; 3] = [Kind::Ring, Kind::DurableStreams, Kind::Resumable];

pub async fn run_figures(opts: &Opts, figures: &[Figure], fds: u64) -> Result<()> {
    let sizes = Sizes::new(opts.quick);
    let started = Instant::now();
    let machine_before = machine();
    let peers = Peers::setup(opts);
    eprintln!("open-file limit: {fds}");
    // The PostgreSQL rows (figures 1, 2 and 4), or the one line that says why there are none.
    let pg_line;
    let pg = match pg::admin_url() {
        Ok(url) => match pg::describe(&url).await {
            Ok(d) => {
                pg_line = match pg::pooler_url() {
                    Some(p) => format!(
                        "PostgreSQL rows: {d}; the rows through PgBouncer reach it at {}",
                        pg::host_port(&p)
                    ),
                    None => format!("PostgreSQL rows: {d}"),
                };
                Some(url)
            }
            Err(e) => {
                pg_line = format!("PostgreSQL rows skipped: cannot reach {}: {e:#}", pg::ENV);
                None
            }
        },
        Err(why) => {
            pg_line = why;
            None
        }
    };
    eprintln!("{pg_line}");
    let pg = pg.as_deref();
    let mut rows: Vec<Row> = Vec::new();
    for f in figures {
        eprintln!("== figure {f:?}");
        match f {
            Figure::Append => figure_append(&sizes, pg, &mut rows).await?,
            Figure::Fanout => figure_fanout(&sizes, &peers, pg, &mut rows).await,
            Figure::Idle => figure_idle(&sizes, &peers, fds, &mut rows).await,
            Figure::Replay => figure_replay(&sizes, &peers, pg, &mut rows).await,
            Figure::Refresh => refresh::figure(&sizes, &mut rows).await,
            Figure::Compare => compare::figure(&sizes, &peers, &mut rows).await,
            Figure::Tabs => tabs::figure(&sizes, &mut rows).await,
            Figure::Scale => {
                scale::figure(sizes.scale_streams, sizes.scale_sample, fds, &mut rows).await
            }
        }
    }
    let table = render(&rows);
    let mut doc = String::new();
    let _ = writeln!(
        doc,
        "<!-- turnstream-bench {}{}; {:.0} s -->",
        if opts.quick { "--quick" } else { "full run" },
        if opts.no_peers { ", --no-peers" } else { "" },
        started.elapsed().as_secs_f64()
    );
    let _ = writeln!(doc, "Machine: {machine_before}\n");
    let pg_figures = figures
        .iter()
        .any(|f| matches!(f, Figure::Append | Figure::Fanout | Figure::Replay));
    if pg_figures {
        let _ = writeln!(doc, "{pg_line}\n");
        println!("{pg_line}\n");
    }
    doc.push_str(&table);
    println!("{table}");
    if let Some(url) = pg {
        pg::drop_created(url).await;
    }
    let out = match &opts.out {
        Some(p) => p.clone(),
        None => crate::procs::bench_dir()?.join("results.md"),
    };
    std::fs::write(&out, doc)?;
    eprintln!("written to {}", out.display());
    Ok(())
}

/// nproc, CPU model, memory, kernel and load: enough to tell two results' machines apart.
pub fn machine() -> String {
    let cpus = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(0);
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let mem_gib = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("MemTotal:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse::<f64>().ok())
        })
        .map(|kib| kib / 1024.0 / 1024.0)
        .unwrap_or(0.0);
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_default();
    let load = std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default();
    format!(
        "{cpus} CPUs ({model}), {mem_gib:.0} GiB RAM, Linux {kernel}, load average at start {load}"
    )
}

fn render(rows: &[Row]) -> String {
    let mut s =
        String::from("| figure | ours | comparison(s) | ratio | target |\n|---|---|---|---|---|\n");
    for r in rows {
        let comps = if r.comparisons.is_empty() {
            "—".to_string()
        } else {
            r.comparisons.join("; ")
        };
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} |",
            r.figure, r.ours, comps, r.ratio, r.target
        );
    }
    s
}

fn ratio(ours: f64, theirs: f64) -> String {
    if theirs > 0.0 && ours.is_finite() {
        format!("{:.2}×", ours / theirs)
    } else {
        "—".into()
    }
}

async fn figure_append(sizes: &Sizes, pg: Option<&str>, rows: &mut Vec<Row>) -> Result<()> {
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

/// A cell for a PostgreSQL measurement that could not be made.
fn failed(e: anyhow::Error) -> String {
    format!("failed: {e:#}")
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

fn p99(s: &mut Samples) -> f64 {
    s.pct(99.0).map(|v| v as f64).unwrap_or(f64::NAN)
}

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

async fn figure_fanout(sizes: &Sizes, peers: &Peers, pg: Option<&str>, rows: &mut Vec<Row>) {
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

async fn figure_idle(sizes: &Sizes, peers: &Peers, fds: u64, rows: &mut Vec<Row>) {
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
    figure_idle_h2(sizes, conns, ours, rows).await;
}

/// Figure 3 over HTTP/2 with TLS (`--tls-cert`), side by side with plain HTTP/1.1 (`plain`:
/// bytes per connection and accepts per second): one TLS connection per stream, as separate
/// browsers have, and many streams per connection, as one browser's tabs have.
async fn figure_idle_h2(sizes: &Sizes, conns: usize, plain: (f64, f64), rows: &mut Vec<Row>) {
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

async fn figure_replay(sizes: &Sizes, peers: &Peers, pg: Option<&str>, rows: &mut Vec<Row>) {
    let mut out: Vec<Row> = sizes
        .replay_missed
        .iter()
        .map(|n| {
            Row::new(
                format!(
                    "4. reconnect replay of {} missed events (200 B each), request to last byte, p50 (max) of {} runs",
                    thousands(*n as f64),
                    sizes.replay_reps
                ),
                if *n >= 10_000 {
                    "≤ durable-streams'"
                } else {
                    "—"
                },
            )
        })
        .collect();
    let mut ours: Vec<f64> = vec![f64::NAN; out.len()];
    for kind in std::iter::once(Kind::Turnstream).chain(PEERS) {
        eprintln!("replay: {kind}");
        // turnstream's events come from a model stream (the bench's fake upstream).
        let upstream = if kind == Kind::Turnstream {
            crate::upstream::start().await.ok()
        } else {
            None
        };
        let started = match (&upstream, kind) {
            (Some((url, _, _)), Kind::Turnstream) => {
                System::turnstream(&["--agent", "openai", "--openai-base-url", url])
                    .await
                    .map(Arc::new)
                    .map_err(|e| format!("failed to start: {e:#}"))
            }
            (None, Kind::Turnstream) => Err("failed: no fake upstream".to_string()),
            _ => start(kind, peers).await,
        };
        let cells: Vec<String> = match started {
            Err(why) => vec![why; out.len()],
            Ok(sys) => {
                // The ring keeps the last 2000 events: a longer replay is not something it does.
                let missed: Vec<u64> = sizes
                    .replay_missed
                    .iter()
                    .copied()
                    .filter(|n| kind != Kind::Ring || *n < 2000)
                    .collect();
                match replay::run(sys.clone(), &missed, sizes.replay_reps).await {
                    Ok(results) => sizes
                        .replay_missed
                        .iter()
                        .enumerate()
                        .map(|(i, n)| match results.iter().find(|r| r.missed == *n) {
                            None => {
                                "not supported: the ring keeps only the last 2,000 events".into()
                            }
                            Some(r) => {
                                let mut s = r.samples.clone();
                                let p50 = s.pct(50.0).unwrap_or(0);
                                if kind == Kind::Turnstream {
                                    ours[i] = p50 as f64;
                                } else if kind == Kind::Ring {
                                    out[i].ratio = ratio(ours[i], p50 as f64);
                                }
                                format!(
                                    "{} ms ({} ms; {} events in {} SSE frames, {:.0} KB)",
                                    ms(p50),
                                    ms(s.pct(100.0).unwrap_or(0)),
                                    thousands(r.received as f64),
                                    thousands(r.frames as f64),
                                    r.bytes as f64 / 1000.0
                                )
                            }
                        })
                        .collect(),
                    Err(e) => vec![format!("failed: {e:#}"); out.len()],
                }
            }
        };
        if let Some((_, _, task)) = upstream {
            task.abort();
        }
        for (row, cell) in out.iter_mut().zip(cells) {
            if kind == Kind::Turnstream {
                row.ours = cell;
            } else {
                row.comparisons.push(format!("{kind}: {cell}"));
            }
        }
    }
    let sqlite: Vec<(u64, String, f64)> = sizes
        .replay_missed
        .iter()
        .zip(&out)
        .zip(&ours)
        .map(|((n, row), p50)| (*n, row.ours.clone(), *p50))
        .collect();
    rows.extend(out);
    if let Some(url) = pg {
        pg_replay(sizes, url, &sqlite, rows).await;
    }
}

/// Figure 4 on PostgreSQL. `sqlite`: (missed, cell, p50 µs) of the same run.
async fn pg_replay(sizes: &Sizes, admin: &str, sqlite: &[(u64, String, f64)], rows: &mut Vec<Row>) {
    // With the server's replay tail (recent frames in memory, the default), and without it, so
    // that every page is read from the journal.
    let run = |cache_off: bool| async move {
        eprintln!(
            "replay: PostgreSQL{}",
            if cache_off {
                ", --replay-cache-mb 0"
            } else {
                ""
            }
        );
        let (upstream, _, task) = crate::upstream::start().await?;
        let r = async {
            let url = pg::fresh_database(admin, "replay").await?;
            let mut flags = vec!["--agent", "openai", "--openai-base-url", &upstream];
            if cache_off {
                flags.extend(["--replay-cache-mb", "0"]);
            }
            let sys = System::turnstream_on(Some(&url), &flags).await?;
            replay::run(Arc::new(sys), &sizes.pg_replay_missed, sizes.replay_reps).await
        }
        .await;
        task.abort();
        r
    };
    let results = run(false).await;
    let uncached = run(true).await;
    for n in &sizes.pg_replay_missed {
        let mut row = Row::new(
            format!(
                "4. PostgreSQL: reconnect replay of {} missed events (200 B each), request to last byte, p50 (max) of {} runs",
                thousands(*n as f64),
                sizes.replay_reps
            ),
            "—",
        );
        let p50 = match &results {
            Err(e) => {
                row.ours = format!("failed: {e:#}");
                f64::NAN
            }
            Ok(results) => match results.iter().find(|r| r.missed == *n) {
                None => {
                    row.ours = "no result".into();
                    f64::NAN
                }
                Some(r) => {
                    let mut s = r.samples.clone();
                    let p50 = s.pct(50.0).unwrap_or(0);
                    row.ours = format!(
                        "{} ms ({} ms; {} events)",
                        ms(p50),
                        ms(s.pct(100.0).unwrap_or(0)),
                        thousands(r.received as f64)
                    );
                    p50 as f64
                }
            },
        };
        if let Some((_, cell, sqlite_p50)) = sqlite.iter().find(|s| s.0 == *n) {
            row.comparisons.push(format!("SQLite, same run: {cell}"));
            row.ratio = ratio(p50, *sqlite_p50);
        }
        row.comparisons.push(match &uncached {
            Err(e) => format!("PostgreSQL, `--replay-cache-mb 0`: failed: {e:#}"),
            Ok(results) => match results.iter().find(|r| r.missed == *n) {
                None => "PostgreSQL, `--replay-cache-mb 0`: no result".into(),
                Some(r) => {
                    let mut s = r.samples.clone();
                    format!(
                        "PostgreSQL, `--replay-cache-mb 0` (every page read from the journal): {} ms ({} ms)",
                        ms(s.pct(50.0).unwrap_or(0)),
                        ms(s.pct(100.0).unwrap_or(0)),
                    )
                }
            },
        });
        rows.push(row);
    }
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
