//! The hub's unit tests; the replay tail against a model of the journal is in `model`.

use super::*;
use bytes::Bytes;

fn frame(seq: i64, session: &str) -> Arc<Frame> {
    Arc::new(Frame {
        seq,
        session_id: session.into(),
        bytes: Bytes::new(),
        at: std::time::Instant::now(),
    })
}

#[tokio::test]
async fn delivers_only_subscribed_sessions_in_order() {
    let hub = Hub::new();
    let mut a = hub.subscribe(&["a".into(), "c".into()]);
    hub.publish(&[frame(1, "a"), frame(2, "b"), frame(3, "c")]);
    assert_eq!(a.recv().await.map(|f| f.seq), Some(1));
    assert_eq!(a.recv().await.map(|f| f.seq), Some(3));
    assert!(!a.take_lagged());
}

#[tokio::test]
async fn overflow_flags_lag_instead_of_skipping_silently() {
    let hub = Hub::new();
    let sub = hub.subscribe(&["a".into()]);
    let frames: Vec<_> = (0..SUBSCRIBER_QUEUE as i64 + 5)
        .map(|i| frame(i, "a"))
        .collect();
    hub.publish(&frames);
    assert!(sub.take_lagged());
    assert!(!sub.take_lagged());
}

#[tokio::test]
async fn close_ends_feeds_after_what_was_queued() {
    let hub = Hub::new();
    let mut a = hub.subscribe(&["a".into()]);
    hub.publish(&[frame(1, "a"), frame(2, "a")]);
    hub.close();
    assert!(a.is_closed());
    assert_eq!(a.recv().await.map(|f| f.seq), Some(1));
    assert_eq!(a.recv().await.map(|f| f.seq), Some(2));
    assert!(a.recv().await.is_none());
    let mut late = hub.subscribe(&["a".into()]);
    hub.publish(&[frame(3, "a")]);
    assert!(late.recv().await.is_none());
    assert_eq!(hub.subscriber_slots(), 0);
}

fn seqs(r: &Option<TailReplay>) -> Option<(Vec<i64>, bool)> {
    r.as_ref()
        .map(|r| (r.frames.iter().map(|f| f.seq).collect(), r.complete))
}

fn tail(hub: &Arc<Hub>, sessions: &[&str], after: i64, limit: usize) -> Option<(Vec<i64>, bool)> {
    let sessions: Vec<String> = sessions.iter().map(|s| s.to_string()).collect();
    seqs(&hub.subscribe_after(&sessions, Some(after), limit).1)
}

#[tokio::test]
async fn the_tail_answers_only_positions_it_covers() {
    let hub = Hub::new();
    assert_eq!(tail(&hub, &["a"], 0, 100), None, "nothing published yet");
    hub.publish(&[frame(5, "a"), frame(6, "b"), frame(7, "a")]);
    hub.publish(&[frame(9, "b"), frame(10, "a")]);
    // Session a's tail holds everything of a after 4 (its first frame is 5).
    assert_eq!(tail(&hub, &["a"], 4, 100), Some((vec![5, 7, 10], true)));
    assert_eq!(
        tail(&hub, &["a"], 3, 100),
        None,
        "3 may hide an older event"
    );
    assert_eq!(tail(&hub, &["a"], 6, 100), Some((vec![7, 10], true)));
    assert_eq!(tail(&hub, &["a"], 10, 100), Some((vec![], true)));
    assert_eq!(
        tail(&hub, &["a", "b"], 5, 100),
        Some((vec![6, 7, 9, 10], true))
    );
    assert_eq!(
        tail(&hub, &["a", "b"], 4, 100),
        None,
        "b covers only after 5"
    );
    assert_eq!(tail(&hub, &["a", "c"], 8, 100), None, "c has no tail");
    // A limit cuts the oldest part off and says so.
    assert_eq!(tail(&hub, &["a"], 4, 2), Some((vec![5, 7], false)));
    assert_eq!(tail(&hub, &["a", "b"], 5, 3), Some((vec![6, 7, 9], false)));
}

#[tokio::test]
async fn nothing_falls_between_the_tail_and_the_live_feed() {
    let hub = Hub::new();
    hub.publish(&[frame(1, "a"), frame(2, "a")]);
    let (mut sub, replay) = hub.subscribe_after(&["a".into()], Some(1), 100);
    hub.publish(&[frame(3, "a")]);
    assert_eq!(seqs(&replay), Some((vec![2], true)));
    assert_eq!(sub.recv().await.map(|f| f.seq), Some(3));
    assert!(sub.try_recv().is_none());
}

#[tokio::test]
async fn the_budget_evicts_oldest_first_and_moves_coverage() {
    let hub = Hub::new();
    let one = frame(1, "a").cost();
    let (fa, fb) = (feed_cost("a"), feed_cost("b"));
    hub.set_tail_budget(3 * one + fa + fb);
    hub.publish(&[frame(1, "a"), frame(2, "b"), frame(3, "a"), frame(4, "a")]);
    assert_eq!(
        hub.metrics.tail_bytes.load(Ordering::Relaxed),
        (3 * one + fa + fb) as u64,
        "the tail holds three frames of two sessions, and its gauge says so"
    );
    assert_eq!(tail(&hub, &["a"], 0, 100), None, "1 was evicted");
    assert_eq!(tail(&hub, &["a"], 1, 100), Some((vec![3, 4], true)));
    assert_eq!(tail(&hub, &["b"], 1, 100), Some((vec![2], true)));
    hub.publish(&[frame(5, "a")]);
    assert_eq!(
        tail(&hub, &["b"], 1, 100),
        None,
        "b's only frame was evicted"
    );
    assert_eq!(
        hub.metrics.tail_bytes.load(Ordering::Relaxed),
        (3 * one + fa) as u64,
        "b's entry is no longer charged"
    );
    assert_eq!(tail(&hub, &["a"], 2, 100), Some((vec![3, 4, 5], true)));
    hub.set_tail_budget(0);
    hub.publish(&[frame(6, "a")]);
    assert_eq!(hub.metrics.tail_bytes.load(Ordering::Relaxed), 0);
    assert_eq!(tail(&hub, &["a"], 5, 100), None, "budget 0 keeps nothing");
}

#[tokio::test]
async fn retention_cuts_the_tail_back_before_it_deletes() {
    let hub = Hub::new();
    hub.publish(&[frame(1, "a"), frame(2, "a"), frame(3, "a")]);
    hub.forget_through("a", 2);
    assert_eq!(
        tail(&hub, &["a"], 1, 100),
        None,
        "before the floor: the journal says expired"
    );
    assert_eq!(tail(&hub, &["a"], 2, 100), Some((vec![3], true)));
    hub.forget_through("a", 3);
    assert_eq!(tail(&hub, &["a"], 3, 100), Some((vec![], true)));
    hub.publish(&[frame(4, "a")]);
    assert_eq!(tail(&hub, &["a"], 3, 100), Some((vec![4], true)));
}

#[tokio::test]
async fn a_suspended_tail_answers_nothing_and_keeps_nothing() {
    let hub = Hub::new();
    hub.publish(&[frame(1, "a"), frame(2, "a")]);
    hub.suspend_tail(true);
    assert_eq!(
        tail(&hub, &["a"], 1, 100),
        None,
        "what it held is not answered"
    );
    let sub = hub.subscribe(&["a".into()]);
    hub.publish(&[frame(3, "a")]);
    assert_eq!(hub.metrics.tail_bytes.load(Ordering::Relaxed), 0);
    drop(sub);
    // Back on, after the positions it may have missed are cut (as the journal's tail does).
    hub.forget_all_through(3);
    hub.suspend_tail(false);
    assert_eq!(tail(&hub, &["a"], 2, 100), None, "3 was not kept");
    hub.publish(&[frame(4, "a")]);
    assert_eq!(tail(&hub, &["a"], 3, 100), Some((vec![4], true)));
}

#[test]
fn no_frame_is_lost_across_an_attach_under_concurrent_publishing() {
    let hub = Hub::new();
    hub.publish(&[frame(1, "a")]);
    let publisher = {
        let hub = hub.clone();
        std::thread::spawn(move || {
            for seq in 2..=1000 {
                hub.publish(&[frame(seq, "a")]);
            }
        })
    };
    let mut subs = Vec::new();
    for _ in 0..50 {
        let (sub, replay) = hub.subscribe_after(&["a".into()], Some(0), usize::MAX);
        let replay = replay.map(|r| r.frames).unwrap_or_default();
        subs.push((sub, replay));
        std::thread::yield_now();
    }
    assert!(publisher.join().is_ok());
    for (mut sub, replay) in subs {
        let mut seen: Vec<i64> = replay.iter().map(|f| f.seq).collect();
        assert!(!sub.take_lagged(), "999 frames fit");
        while let Some(f) = sub.try_recv() {
            seen.push(f.seq);
        }
        assert_eq!(seen, (1..=1000).collect::<Vec<_>>(), "in the copy or live");
    }
}

#[tokio::test]
async fn a_lagging_subscriber_is_told_with_what_it_takes() {
    let hub = Hub::new();
    let mut sub = hub.subscribe(&["a".into()]);
    let frames: Vec<_> = (1..=SUBSCRIBER_QUEUE as i64 + 1)
        .map(|i| frame(i, "a"))
        .collect();
    hub.publish(&frames);
    let taken = std::future::poll_fn(|cx| sub.poll_take(cx)).await;
    let Some(taken) = taken else {
        panic!("the feed ended");
    };
    assert!(taken.lagged, "the last frame was dropped");
    assert_eq!(taken.count(), SUBSCRIBER_QUEUE);
    hub.publish(&[frame(SUBSCRIBER_QUEUE as i64 + 2, "a")]);
    assert!(!sub.take_lagged(), "told once");
    assert_eq!(
        sub.recv().await.map(|f| f.seq),
        Some(SUBSCRIBER_QUEUE as i64 + 2)
    );
}

#[tokio::test]
async fn an_idle_subscription_holds_no_buffer() {
    let hub = Hub::new();
    let mut sub = hub.subscribe(&["a".into()]);
    assert_eq!(sub.inbox.held(), (0, 0));
    hub.publish(&(1..=50).map(|i| frame(i, "a")).collect::<Vec<_>>());
    assert_eq!(sub.inbox.held().0, 50);
    while sub.try_recv().is_some() {}
    assert_eq!(sub.inbox.held(), (0, 0), "drained: no capacity kept");
}

#[tokio::test]
async fn drop_detaches() {
    let hub = Hub::new();
    let sub = hub.subscribe(&["a".into(), "b".into()]);
    assert_eq!(hub.subscriber_slots(), 2);
    drop(sub);
    assert_eq!(hub.subscriber_slots(), 0);
}

/// What the journal's writer does after each commit, against 1,000 streams waiting on a
/// runtime's threads: publish a commit's frames (a run of two of the session, then one of
/// another) from its own thread, and see every stream take both before the next commit. A
/// stream not woken would wait for a commit that never comes, and the round times out.
#[test]
fn every_waiting_stream_is_woken_once_the_commit_is_published() {
    use std::sync::atomic::AtomicUsize;
    const STREAMS: usize = 1000;
    const ROUNDS: i64 = 200;
    let rt = crate::live::inbox::stress::runtime();
    let hub = Hub::new();
    let taken = Arc::new(AtomicUsize::new(0));
    let tasks: Vec<_> = (0..STREAMS)
        .map(|_| {
            let mut sub = hub.subscribe(&["a".into()]);
            let taken = taken.clone();
            rt.spawn(async move {
                let mut last = 0;
                while let Some(t) = std::future::poll_fn(|cx| sub.poll_take(cx)).await {
                    assert!(!t.lagged);
                    for f in t {
                        // Session a has 1, 2, 4, 5, 7, 8...
                        let next = if last % 3 == 2 { last + 2 } else { last + 1 };
                        assert_eq!(f.seq, next, "in order, none lost");
                        last = f.seq;
                        taken.fetch_add(1, Ordering::SeqCst);
                    }
                }
                last
            })
        })
        .collect();
    for round in 1..=ROUNDS {
        let seq = 3 * round;
        hub.publish(&[frame(seq - 2, "a"), frame(seq - 1, "a"), frame(seq, "b")]);
        crate::live::inbox::stress::wait_for_round(&taken, STREAMS * 2 * round as usize, round);
    }
    hub.close();
    for last in crate::live::inbox::stress::lasts(&rt, tasks) {
        assert_eq!(last, 3 * ROUNDS - 1);
    }
}

mod model;
