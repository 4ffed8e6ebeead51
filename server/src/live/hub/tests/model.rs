//! The replay tail against a model of the journal: whatever sequence of commits, retention,
//! evictions and resumes, a resume the tail answers gets exactly the journal's frames after
//! its position (then the live ones), and never a position retention removed.

use super::super::*;
use bytes::Bytes;
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Op {
    /// One commit: frames for these sessions (indexes into SESSIONS), in order.
    Commit(Vec<usize>),
    /// Retention: a session's events up to (its n-th newest frame) leave the journal.
    Retain(usize, usize),
    /// A resume: these sessions, from the n-th newest committed frame (0 = the head).
    Resume(Vec<usize>, usize),
    Budget(usize),
}

const SESSIONS: [&str; 3] = ["a", "b", "c"];

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => proptest::collection::vec(0..3usize, 1..6).prop_map(Op::Commit),
        1 => (0..3usize, 0..8usize).prop_map(|(s, n)| Op::Retain(s, n)),
        3 => (proptest::collection::vec(0..3usize, 1..3), 0..20usize)
            .prop_map(|(s, n)| Op::Resume(s, n)),
        1 => (0..40usize).prop_map(Op::Budget),
    ]
}

fn frame(seq: i64, session: &str) -> Arc<Frame> {
    Arc::new(Frame {
        seq,
        session_id: session.into(),
        bytes: Bytes::from_static(b"0123456789"),
        at: std::time::Instant::now(),
    })
}

proptest! {
    #[test]
    fn tail_answers_are_the_journal(ops in proptest::collection::vec(op(), 1..60)) {
        let hub = Hub::new();
        let unit = frame(0, "a").cost();
        // Model of the journal: every committed frame, and each session's floor.
        let mut journal: Vec<(i64, usize)> = Vec::new();
        let mut floors = [0i64; 3];
        let mut subs = Vec::new();
        let mut next = 1i64;
        for op in ops {
            match op {
                Op::Commit(sessions) => {
                    let frames: Vec<_> = sessions
                        .iter()
                        .map(|&s| {
                            journal.push((next, s));
                            next += 1;
                            frame(next - 1, SESSIONS[s])
                        })
                        .collect();
                    hub.publish(&frames);
                }
                Op::Retain(s, n) => {
                    let mine: Vec<i64> =
                        journal.iter().filter(|f| f.1 == s).map(|f| f.0).collect();
                    if let Some(&upto) = mine.iter().rev().nth(n) {
                        hub.forget_through(SESSIONS[s], upto);
                        floors[s] = floors[s].max(upto);
                    }
                }
                Op::Budget(frames) => hub.set_tail_budget(frames * unit),
                Op::Resume(sessions, n) => {
                    let after = journal.iter().rev().nth(n).map_or(0, |f| f.0 - 1);
                    let names: Vec<String> =
                        sessions.iter().map(|&s| SESSIONS[s].to_string()).collect();
                    let (sub, replay) = hub.subscribe_after(&names, Some(after), 1000);
                    if let Some(replay) = replay {
                        for &s in &sessions {
                            prop_assert!(
                                after >= floors[s],
                                "answered {after}, below {}'s floor {}", SESSIONS[s], floors[s]
                            );
                        }
                        let got: Vec<i64> = replay.frames.iter().map(|f| f.seq).collect();
                        let want: Vec<i64> = journal
                            .iter()
                            .filter(|f| f.0 > after && sessions.contains(&f.1))
                            .map(|f| f.0)
                            .collect();
                        prop_assert!(replay.complete);
                        prop_assert_eq!(got, want);
                        subs.push((sub, sessions.clone(), next - 1));
                    }
                }
            }
        }
        // Every answered subscription then received exactly the later frames of its sessions.
        for (mut sub, sessions, head) in subs {
            let mut live = Vec::new();
            while let Some(f) = sub.try_recv() {
                live.push(f.seq);
            }
            let want: Vec<i64> = journal
                .iter()
                .filter(|f| f.0 > head && sessions.contains(&f.1))
                .map(|f| f.0)
                .collect();
            prop_assert_eq!(live, want);
        }
        // With the budget at 0 the tail keeps nothing, and charges nothing: no charge of a
        // frame or a session's entry was left behind.
        hub.set_tail_budget(0);
        hub.publish(&[frame(next, SESSIONS[0])]);
        prop_assert_eq!(hub.metrics.tail_bytes.load(Ordering::Relaxed), 0);
    }
}
