//! The table's vocabulary, shared by the figures and the driver ([`crate::report`]): one row
//! of it, and the sizes of every figure.

/// One table row.
pub struct Row {
    pub figure: String,
    pub ours: String,
    pub comparisons: Vec<String>,
    pub ratio: String,
    pub target: String,
}

impl Row {
    pub fn new(figure: impl Into<String>, target: impl Into<String>) -> Row {
        Row {
            figure: figure.into(),
            ours: String::new(),
            comparisons: Vec::new(),
            ratio: "—".into(),
            target: target.into(),
        }
    }
}

/// Sizes of every figure, full or `--quick`.
pub struct Sizes {
    pub append_sessions: u64,
    pub append_events: u64,
    pub latency_sessions: u64,
    pub latency_secs: u64,
    pub http_sessions: usize,
    pub http_messages: usize,
    /// (streams, subscribers per stream, messages, messages per second)
    pub fanout: Vec<(usize, usize, usize, f64)>,
    pub idle_conns: usize,
    pub idle_streams: usize,
    pub replay_missed: Vec<u64>,
    pub replay_reps: usize,
    /// Cold page loads of figure 5 (each followed by a warm one).
    pub refresh_reps: usize,
    pub compare_chunks: u64,
    pub compare_rate: f64,
    /// Tab counts of figure 7, one browser context each.
    pub tabs: Vec<usize>,
    /// PostgreSQL: producers × events each of the in-process append run.
    pub pg_append_sessions: u64,
    pub pg_append_events: u64,
    /// PostgreSQL: runs of one node and of three nodes, alternated, behind the three-node row
    /// (each run is short: one pair says more about the machine's moment than the nodes).
    pub pg_nodes_reps: usize,
    /// PostgreSQL: paced turns of the latency run, each one delta every this many µs.
    pub pg_latency_sessions: u64,
    pub pg_latency_pace_us: u64,
    pub pg_http_sessions: usize,
    pub pg_http_messages: usize,
    /// How many of the `fanout` cases (the first ones) also run on PostgreSQL, each on one node
    /// and across two nodes.
    pub pg_fanout_cases: usize,
    pub pg_replay_missed: Vec<u64>,
    /// Figure 8: idle streams opened on one node, and the sessions a message is sent to.
    pub scale_streams: usize,
    pub scale_sample: usize,
}

impl Sizes {
    pub fn new(quick: bool) -> Sizes {
        if quick {
            Sizes {
                append_sessions: 16,
                append_events: 500,
                latency_sessions: 20,
                latency_secs: 1,
                http_sessions: 8,
                http_messages: 1,
                fanout: vec![
                    (1, 1, 40, 50.0),
                    (1, 100, 20, 20.0),
                    (1, 1000, 10, 10.0),
                    (100, 1, 100, 100.0),
                ],
                idle_conns: 1000,
                idle_streams: 100,
                replay_missed: vec![1000, 10_000],
                replay_reps: 3,
                refresh_reps: 3,
                compare_chunks: 300,
                compare_rate: 300.0,
                tabs: vec![1, 6],
                pg_append_sessions: 8,
                pg_append_events: 100,
                pg_nodes_reps: 1,
                pg_latency_sessions: 4,
                pg_latency_pace_us: 4000,
                pg_http_sessions: 4,
                pg_http_messages: 1,
                pg_fanout_cases: 2,
                pg_replay_missed: vec![1000],
                scale_streams: 2_000,
                scale_sample: 100,
            }
        } else {
            Sizes {
                append_sessions: 64,
                append_events: 3000,
                latency_sessions: 20,
                latency_secs: 5,
                http_sessions: 32,
                http_messages: 4,
                fanout: vec![
                    (1, 1, 200, 50.0),
                    (1, 100, 100, 20.0),
                    (1, 1000, 50, 5.0),
                    (1000, 1, 1000, 100.0),
                ],
                idle_conns: 10_000,
                idle_streams: 1000,
                replay_missed: vec![1000, 10_000],
                replay_reps: 10,
                refresh_reps: 5,
                compare_chunks: 2000,
                compare_rate: 500.0,
                tabs: vec![1, 6, 12, 20],
                pg_append_sessions: 64,
                pg_append_events: 300,
                pg_nodes_reps: 3,
                pg_latency_sessions: 20,
                pg_latency_pace_us: 20_000,
                pg_http_sessions: 32,
                pg_http_messages: 1,
                pg_fanout_cases: 4,
                pg_replay_missed: vec![1000, 10_000],
                scale_streams: 100_000,
                scale_sample: 1_000,
            }
        }
    }
}
