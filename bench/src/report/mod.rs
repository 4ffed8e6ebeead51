//! Runs the chosen figures on every system that supports them and renders the one table:
//! figure | ours | comparison(s) | ratio | target. Figures 1 to 4 make their rows in the files
//! here named after them; the others in their own modules.

mod append;
mod cells;
mod fanout;
mod idle;
mod replay;

use std::fmt::Write as _;
use std::time::Instant;

use anyhow::Result;

use crate::lineup::Peers;
use crate::pg;
use crate::systems::Kind;
use crate::table::{Row, Sizes};
use crate::{compare, refresh, scale, tabs, Figure, Opts};

/// The peers figures 2 to 4 run beside ours; the ring, first, is what their ratios compare with.
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
            Figure::Append => append::figure(&sizes, pg, &mut rows).await?,
            Figure::Fanout => fanout::figure(&sizes, &peers, pg, &mut rows).await,
            Figure::Idle => idle::figure(&sizes, &peers, fds, &mut rows).await,
            Figure::Replay => replay::figure(&sizes, &peers, pg, &mut rows).await,
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
