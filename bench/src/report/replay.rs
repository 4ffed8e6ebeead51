//! Figure 4's rows: reconnect replay of missed events on every system, then on PostgreSQL
//! with the server's replay cache and without it.

use std::sync::Arc;

use super::cells::ratio;
use super::PEERS;
use crate::lineup::{start, Peers};
use crate::pg;
use crate::replay;
use crate::stats::{ms, thousands};
use crate::systems::{Kind, System};
use crate::table::{Row, Sizes};

pub(super) async fn figure(sizes: &Sizes, peers: &Peers, pg: Option<&str>, rows: &mut Vec<Row>) {
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
