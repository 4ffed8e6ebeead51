//! Measuring the replay tail's real memory against its budget: frames made as the journal makes
//! them are published until the tail has turned over several times, and the growth of the test
//! process's resident memory is compared with the budget. Each workload runs alone in its own
//! test binary, so that nothing else allocates meanwhile and freed memory of another workload is
//! not reused.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use turnstream_protocol::sse;
use turnstream_server::live::hub::{Frame, Hub};
use turnstream_server::metrics::Metrics;

/// Resident memory of this process, in bytes (Linux only).
fn rss() -> Option<usize> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let kb: usize = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .trim()
        .strip_suffix("kB")?
        .trim()
        .parse()
        .ok()?;
    Some(kb * 1024)
}

/// A frame as the journal makes it for a response delta of `delta_len` bytes.
fn delta_frame(seq: i64, session: &str, delta_len: usize) -> Arc<Frame> {
    let cursor = format!("0maktqt7cb-{seq}");
    let delta: String = "x".repeat(delta_len);
    let json = format!(
        r#"{{"id":"{cursor}","session_id":"{session}","ts":1796005754146,"turn_id":"turn_co12rr7t8j8zxiubq3k7","delta":"{delta}","kind":"response_delta"}}"#
    );
    Arc::new(Frame::new(
        seq,
        session,
        sse::encode(Some(&cursor), "response_delta", &json),
    ))
}

/// Publishes deltas of 1 to 64 bytes (what a coalescing window of a few tokens gives), frame `n`
/// in session `session_of(n)`, in batches as the writer commits them, until three budgets' worth
/// went through a tail of `budget` bytes. Returns resident growth over the budget, or `None`
/// where resident memory cannot be read.
pub fn resident_ratio(budget: usize, session_of: impl Fn(i64) -> String) -> Option<f64> {
    let before = rss()?;
    let metrics = Arc::new(Metrics::default());
    let hub = Hub::with_metrics(metrics.clone());
    hub.set_tail_budget(budget);
    let mut seq = 0i64;
    let mut published = 0usize;
    while published < 3 * budget {
        let batch: Vec<Arc<Frame>> = (0..64)
            .map(|_| {
                seq += 1;
                delta_frame(seq, &session_of(seq), 1 + (seq as usize * 31) % 64)
            })
            .collect();
        published += batch.iter().map(|f| f.bytes.len()).sum::<usize>();
        hub.publish(&batch);
    }
    let grown = rss()?.saturating_sub(before);
    let charged = metrics.tail_bytes.load(Ordering::Relaxed) as usize;
    assert!(
        charged <= budget,
        "charged {charged} over a budget of {budget}"
    );
    let ratio = grown as f64 / budget as f64;
    eprintln!(
        "budget {} MiB, charged {:.1} MiB, resident growth {:.1} MiB: {ratio:.2} times the budget",
        budget >> 20,
        charged as f64 / (1 << 20) as f64,
        grown as f64 / (1 << 20) as f64
    );
    drop(hub);
    Some(ratio)
}
