//! Counters and histograms exported at `/metrics` in the Prometheus text format.

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::StorageFault;

/// A fixed-bucket histogram (cumulative on export).
#[derive(Debug)]
pub struct Histogram {
    bounds: &'static [f64],
    counts: Vec<AtomicU64>,
    sum_micros: AtomicU64,
    count: AtomicU64,
}

impl Histogram {
    fn new(bounds: &'static [f64]) -> Self {
        Histogram {
            bounds,
            counts: bounds.iter().map(|_| AtomicU64::new(0)).collect(),
            sum_micros: AtomicU64::new(0),
            count: AtomicU64::new(0),
        }
    }

    pub fn observe(&self, value: f64) {
        if let Some(i) = self.bounds.iter().position(|b| value <= *b) {
            self.counts[i].fetch_add(1, Ordering::Relaxed);
        }
        self.sum_micros
            .fetch_add((value * 1e6) as u64, Ordering::Relaxed);
        self.count.fetch_add(1, Ordering::Relaxed);
    }

    fn render(&self, out: &mut String, name: &str, help: &str) {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
        let mut cumulative = 0;
        for (b, c) in self.bounds.iter().zip(&self.counts) {
            cumulative += c.load(Ordering::Relaxed);
            let _ = writeln!(out, "{name}_bucket{{le=\"{b}\"}} {cumulative}");
        }
        let count = self.count.load(Ordering::Relaxed);
        let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {count}");
        let sum = self.sum_micros.load(Ordering::Relaxed) as f64 / 1e6;
        let _ = writeln!(out, "{name}_sum {sum}\n{name}_count {count}");
    }
}

const LATENCY_BOUNDS: &[f64] = &[
    0.00025, 0.0005, 0.001, 0.002, 0.003, 0.004, 0.005, 0.0075, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0,
];
/// Finer buckets for the stages of a publish, each a fraction of a millisecond when all is well.
const STAGE_BOUNDS: &[f64] = &[
    0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05,
    0.1, 0.25, 1.0,
];
const BATCH_BOUNDS: &[f64] = &[1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0];

#[derive(Debug)]
pub struct Metrics {
    pub connections: AtomicU64,
    pub connections_total: AtomicU64,
    pub events_appended: AtomicU64,
    pub append_latency: Histogram,
    pub batch_size: Histogram,
    /// The stages of a publish, from a message's arrival to its stream taking its frames (see
    /// [`Metrics::render`] for each).
    pub message_request: Histogram,
    pub writer_wait: Histogram,
    pub batch_statements: Histogram,
    pub commit_time: Histogram,
    pub publish_time: Histogram,
    pub delivery: Histogram,
    pub replays: AtomicU64,
    pub tail_replays: AtomicU64,
    /// Bytes the hub's replay tail holds against its budget.
    pub tail_bytes: AtomicU64,
    pub replayed_events: AtomicU64,
    pub lag_fallbacks: AtomicU64,
    pub resyncs: [AtomicU64; 4],
    pub turns_started: AtomicU64,
    pub turns_ended: AtomicU64,
    /// Failed write attempts (group commits and readiness probes), by fault: full, unavailable.
    pub storage_faults: [AtomicU64; 2],
    /// 1 while the latest journal write reached the disk, 0 while writes fail.
    pub storage_healthy: AtomicU64,
    /// Attempts to journal a turn's end that failed and were retried.
    pub turn_end_retries: AtomicU64,
    /// PostgreSQL: 1 while this server learns of other servers' commits by polling alone (no
    /// working `LISTEN`), 0 otherwise.
    pub journal_polling: AtomicU64,
    /// Presence members this server sees, over all sessions (never journaled).
    pub presence_members: AtomicU64,
    /// Presence state updates accepted here.
    pub presence_updates: AtomicU64,
    /// `presence_diff` frames queued to streams.
    pub presence_frames: AtomicU64,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            connections: AtomicU64::new(0),
            connections_total: AtomicU64::new(0),
            events_appended: AtomicU64::new(0),
            append_latency: Histogram::new(LATENCY_BOUNDS),
            batch_size: Histogram::new(BATCH_BOUNDS),
            message_request: Histogram::new(STAGE_BOUNDS),
            writer_wait: Histogram::new(STAGE_BOUNDS),
            batch_statements: Histogram::new(STAGE_BOUNDS),
            commit_time: Histogram::new(STAGE_BOUNDS),
            publish_time: Histogram::new(STAGE_BOUNDS),
            delivery: Histogram::new(STAGE_BOUNDS),
            replays: AtomicU64::new(0),
            tail_replays: AtomicU64::new(0),
            tail_bytes: AtomicU64::new(0),
            replayed_events: AtomicU64::new(0),
            lag_fallbacks: AtomicU64::new(0),
            resyncs: Default::default(),
            turns_started: AtomicU64::new(0),
            turns_ended: AtomicU64::new(0),
            storage_faults: Default::default(),
            storage_healthy: AtomicU64::new(1),
            turn_end_retries: AtomicU64::new(0),
            journal_polling: AtomicU64::new(0),
            presence_members: AtomicU64::new(0),
            presence_updates: AtomicU64::new(0),
            presence_frames: AtomicU64::new(0),
        }
    }
}

const RESYNC_REASONS: [&str; 4] = ["invalid", "epoch", "expired", "future"];
const STORAGE_FAULTS: [StorageFault; 2] = [StorageFault::Full, StorageFault::Unavailable];

impl Metrics {
    pub fn resync(&self, reason: turnstream_protocol::ResyncReason) {
        let i = RESYNC_REASONS
            .iter()
            .position(|r| *r == reason.as_str())
            .unwrap_or(0);
        self.resyncs[i].fetch_add(1, Ordering::Relaxed);
    }

    pub fn storage_fault(&self, fault: StorageFault) {
        let i = STORAGE_FAULTS.iter().position(|f| *f == fault).unwrap_or(1);
        self.storage_faults[i].fetch_add(1, Ordering::Relaxed);
    }

    pub fn render(&self) -> String {
        let mut out = String::with_capacity(4096);
        let gauge = |out: &mut String, name: &str, help: &str, kind: &str, v: &AtomicU64| {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {}",
                v.load(Ordering::Relaxed)
            );
        };
        gauge(
            &mut out,
            "turnstream_connections",
            "Open SSE streams.",
            "gauge",
            &self.connections,
        );
        gauge(
            &mut out,
            "turnstream_connections_total",
            "SSE streams opened.",
            "counter",
            &self.connections_total,
        );
        gauge(
            &mut out,
            "turnstream_presence_members",
            "Presence members this server sees, over all sessions.",
            "gauge",
            &self.presence_members,
        );
        gauge(
            &mut out,
            "turnstream_presence_updates_total",
            "Presence state updates accepted by this server.",
            "counter",
            &self.presence_updates,
        );
        gauge(
            &mut out,
            "turnstream_presence_diffs_total",
            "Presence diff frames queued to streams.",
            "counter",
            &self.presence_frames,
        );
        gauge(
            &mut out,
            "turnstream_events_appended_total",
            "Events committed to the journal.",
            "counter",
            &self.events_appended,
        );
        self.append_latency.render(
            &mut out,
            "turnstream_append_latency_seconds",
            "Time from enqueue to durable commit of a write.",
        );
        self.batch_size.render(
            &mut out,
            "turnstream_commit_batch_size",
            "Writes committed together by one group commit.",
        );
        self.message_request.render(
            &mut out,
            "turnstream_message_request_seconds",
            "Time from a message POST's arrival to its write handed to the journal writer (the middleware, the body read, its checks).",
        );
        self.writer_wait.render(
            &mut out,
            "turnstream_writer_wait_seconds",
            "Time the oldest write of a group commit waited for the journal writer (its queue and the writer's wake-up).",
        );
        self.batch_statements.render(
            &mut out,
            "turnstream_commit_statements_seconds",
            "Time a group commit's statements took, before its COMMIT.",
        );
        self.commit_time.render(
            &mut out,
            "turnstream_commit_seconds",
            "Time a group commit's COMMIT took (its pages written and flushed to disk).",
        );
        self.publish_time.render(
            &mut out,
            "turnstream_publish_seconds",
            "Time handing a commit's events to the streams took (frames encoded, queued for each subscriber, streams woken).",
        );
        self.delivery.render(
            &mut out,
            "turnstream_delivery_seconds",
            "Time from a committed event's frame being made to a stream taking it to write (the hub's walk and the stream's wake-up).",
        );
        gauge(
            &mut out,
            "turnstream_replays_total",
            "Streams that replayed events (from the journal or the replay tail) before going live.",
            "counter",
            &self.replays,
        );
        gauge(
            &mut out,
            "turnstream_tail_replays_total",
            "Resumes answered from the in-memory replay tail without reading the journal.",
            "counter",
            &self.tail_replays,
        );
        gauge(
            &mut out,
            "turnstream_replay_tail_bytes",
            "Memory the replay tail holds (recent frames kept to answer reconnects), against --replay-cache-mb.",
            "gauge",
            &self.tail_bytes,
        );
        gauge(
            &mut out,
            "turnstream_replayed_events_total",
            "Events sent from the journal rather than live.",
            "counter",
            &self.replayed_events,
        );
        gauge(
            &mut out,
            "turnstream_lag_fallbacks_total",
            "Times a slow subscriber went back to the journal.",
            "counter",
            &self.lag_fallbacks,
        );
        let _ = writeln!(out, "# HELP turnstream_resyncs_total Streams told to reload history.\n# TYPE turnstream_resyncs_total counter");
        for (reason, v) in RESYNC_REASONS.iter().zip(&self.resyncs) {
            let _ = writeln!(
                out,
                "turnstream_resyncs_total{{reason=\"{reason}\"}} {}",
                v.load(Ordering::Relaxed)
            );
        }
        gauge(
            &mut out,
            "turnstream_turns_started_total",
            "Turns started.",
            "counter",
            &self.turns_started,
        );
        gauge(
            &mut out,
            "turnstream_turns_ended_total",
            "Turns that reached a terminal state.",
            "counter",
            &self.turns_ended,
        );
        let _ = writeln!(out, "# HELP turnstream_storage_faults_total Journal write attempts that failed, by fault (full: no space; unavailable: I/O error, lock held past the busy timeout).\n# TYPE turnstream_storage_faults_total counter");
        for (fault, v) in STORAGE_FAULTS.iter().zip(&self.storage_faults) {
            let _ = writeln!(
                out,
                "turnstream_storage_faults_total{{fault=\"{}\"}} {}",
                fault.as_str(),
                v.load(Ordering::Relaxed)
            );
        }
        gauge(
            &mut out,
            "turnstream_storage_healthy",
            "1 while the latest journal write reached the disk, 0 while writes fail.",
            "gauge",
            &self.storage_healthy,
        );
        gauge(
            &mut out,
            "turnstream_turn_end_retries_total",
            "Attempts to journal a turn's end that failed and were retried.",
            "counter",
            &self.turn_end_retries,
        );
        gauge(
            &mut out,
            "turnstream_journal_polling",
            "1 while this server learns of other servers' commits by polling the shared journal alone (PostgreSQL without a working LISTEN: cross-node delivery waits for the next poll, and every resume reads the journal), 0 otherwise.",
            "gauge",
            &self.journal_polling,
        );
        out
    }
}
