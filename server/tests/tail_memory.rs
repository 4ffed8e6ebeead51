//! The replay tail's real memory against its budget: frames made as the journal makes them are
//! published until the tail has turned over several times, and the growth of this process's
//! resident memory is compared with the budget. Alone in its own test binary, so no other test
//! allocates meanwhile.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use turnstream_protocol::sse;
use turnstream_server::hub::{Frame, Hub};
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

#[test]
fn the_tail_stays_within_its_budget() {
    let Some(before) = rss() else {
        eprintln!("no /proc/self/status: not measured");
        return;
    };
    const BUDGET: usize = 16 * 1024 * 1024;
    let metrics = Arc::new(Metrics::default());
    let hub = Hub::with_metrics(metrics.clone());
    hub.set_tail_budget(BUDGET);
    // Deltas of 1 to 64 bytes (what a coalescing window of a few tokens gives) over 1,000
    // sessions, in batches as the writer commits them, until 3 budgets' worth went through.
    let mut seq = 0i64;
    let mut published = 0usize;
    let sessions: Vec<String> = (0..1000).map(|i| format!("session-{i}")).collect();
    while published < 3 * BUDGET {
        let batch: Vec<Arc<Frame>> = (0..64)
            .map(|_| {
                seq += 1;
                let s = &sessions[(seq as usize * 7919) % sessions.len()];
                delta_frame(seq, s, 1 + (seq as usize * 31) % 64)
            })
            .collect();
        published += batch.iter().map(|f| f.bytes.len()).sum::<usize>();
        hub.publish(&batch);
    }
    let after = rss().unwrap_or(before);
    let charged = metrics.tail_bytes.load(Ordering::Relaxed) as usize;
    let grown = after.saturating_sub(before);
    let ratio = grown as f64 / BUDGET as f64;
    eprintln!(
        "budget {} MiB, charged {:.1} MiB, resident growth {:.1} MiB: {ratio:.2} times the budget",
        BUDGET >> 20,
        charged as f64 / (1 << 20) as f64,
        grown as f64 / (1 << 20) as f64
    );
    assert!(charged <= BUDGET);
    assert!(ratio <= 1.0, "the tail takes {ratio:.2} times its budget");
    drop(hub);
}
