//! The roster against a model: any order of joins, closes, other servers' holds, releases and
//! goodbyes, state updates and time gives the members the model says, listed up to the limit,
//! and the diffs it answered, applied in order on its first roster, give its roster again.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use proptest::prelude::*;
use serde_json::{Map, Value};

use super::cluster::{Message, WireMember};
use super::roster::{Changes, MemberView, Roster, Settings, Version};

const SESSION: &str = "s";
const CLIENTS: [&str; 4] = ["a", "b", "c", "d"];
const NODES: [u64; 2] = [101, 102];

#[derive(Debug, Clone)]
enum Op {
    Join(usize),
    Close(usize),
    Hold(usize, usize),
    Release(usize, usize),
    Bye(usize),
    State(usize, u8),
    Advance(u64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0..4usize).prop_map(Op::Join),
        (0..4usize).prop_map(Op::Close),
        (0..2usize, 0..4usize).prop_map(|(n, c)| Op::Hold(n, c)),
        (0..2usize, 0..4usize).prop_map(|(n, c)| Op::Release(n, c)),
        (0..2usize).prop_map(Op::Bye),
        (0..4usize, 0..3u8).prop_map(|(c, v)| Op::State(c, v)),
        (0..1500u64).prop_map(Op::Advance),
    ]
}

/// What should be present: per client, its streams here, when its grace ends, and until when
/// each other server holds it.
#[derive(Default)]
struct Model {
    streams: HashMap<usize, usize>,
    grace: HashMap<usize, Instant>,
    remote: HashMap<(usize, usize), Instant>,
}

impl Model {
    fn present(&self, c: usize, now: Instant) -> bool {
        self.streams.get(&c).copied().unwrap_or(0) > 0
            || self.grace.get(&c).is_some_and(|at| *at > now)
            || NODES
                .iter()
                .enumerate()
                .any(|(n, _)| self.remote.get(&(n, c)).is_some_and(|at| *at > now))
    }
}

fn state(v: u8) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("v".into(), Value::from(v));
    if v == 2 {
        m.insert("typing".into(), Value::Bool(true));
    }
    m
}

fn apply(view: &mut BTreeMap<String, MemberView>, count: &mut usize, changes: &Changes) {
    for d in &changes.diffs {
        assert_eq!(d.session_id, SESSION);
        for l in &d.leaves {
            view.remove(&l.member_id);
        }
        for j in &d.joins {
            view.insert(j.member_id.clone(), j.clone());
        }
        *count = d.count;
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]
    #[test]
    fn roster_matches_the_model(ops in proptest::collection::vec(op(), 1..80), max in 1usize..5) {
        let settings = Settings {
            grace: Duration::from_millis(1000),
            typing_ttl: Duration::from_millis(700),
            ttl: Duration::from_millis(1200),
            max_members: max,
        };
        let mut roster = Roster::new(settings.clone(), 1);
        let mut model = Model::default();
        let mut view = BTreeMap::new();
        let mut count = 0;
        let start = Instant::now();
        let mut now = start;
        let mut ms = 1_000u64;
        let mut remote_version = 0u64;
        for op in ops {
            let changes = match op {
                Op::Join(c) => {
                    *model.streams.entry(c).or_default() += 1;
                    model.grace.remove(&c);
                    roster.join(SESSION, CLIENTS[c], None, ms).map_err(|_| TestCaseError::fail("taken"))?
                }
                Op::Close(c) => {
                    let n = model.streams.entry(c).or_default();
                    if *n == 0 {
                        continue;
                    }
                    *n -= 1;
                    if *n == 0 {
                        model.grace.insert(c, now + settings.grace);
                    }
                    roster.close(SESSION, CLIENTS[c], now)
                }
                Op::Hold(n, c) => {
                    model.remote.insert((n, c), now + settings.ttl);
                    remote_version += 1;
                    let m = WireMember { c: CLIENTS[c].into(), u: None, st: Map::new(), v: Version(0, remote_version), j: ms as i64 };
                    roster.heard(NODES[n], Message::Hold { s: SESSION.into(), m }, now)
                }
                Op::Release(n, c) => {
                    model.remote.remove(&(n, c));
                    roster.heard(NODES[n], Message::Release { s: SESSION.into(), c: CLIENTS[c].into(), u: None }, now)
                }
                Op::Bye(n) => {
                    model.remote.retain(|(node, _), _| *node != n);
                    roster.heard(NODES[n], Message::Bye, now)
                }
                Op::State(c, v) => match roster.set_state(SESSION, CLIENTS[c], None, state(v), now, ms) {
                    Ok(changes) => changes,
                    Err(_) => continue,
                },
                Op::Advance(d) => {
                    now += Duration::from_millis(d);
                    ms += d;
                    roster.tick(now)
                }
            };
            apply(&mut view, &mut count, &changes);
            // Ticked after each step, as the server does.
            let ticked = roster.tick(now);
            apply(&mut view, &mut count, &ticked);
            let r = roster.view(SESSION);
            let expected: Vec<&str> = (0..CLIENTS.len()).filter(|c| model.present(*c, now)).map(|c| CLIENTS[c]).collect();
            prop_assert_eq!(r.count, expected.len());
            prop_assert_eq!(r.members.len(), expected.len().min(max));
            prop_assert!(r.members.iter().all(|m| expected.contains(&m.member_id.as_str())));
            // The diffs, applied in order, are the roster.
            let listed: BTreeMap<String, MemberView> = r.members.iter().map(|m| (m.member_id.clone(), m.clone())).collect();
            prop_assert_eq!(&view, &listed);
            prop_assert_eq!(count, r.count);
        }
    }
}

#[test]
fn a_reconnect_inside_the_grace_changes_nothing_and_one_after_it_leaves_then_joins() {
    let settings = Settings {
        grace: Duration::from_millis(500),
        ..Settings::default()
    };
    let mut roster = Roster::new(settings, 1);
    let t = Instant::now();
    let joined = roster.join(SESSION, "a", None, 1).map_err(|_| "taken");
    assert_eq!(joined.map(|c| c.diffs.len()).ok(), Some(1));
    assert!(roster.close(SESSION, "a", t).diffs.is_empty());
    assert!(roster.tick(t + Duration::from_millis(400)).diffs.is_empty());
    let back = roster.join(SESSION, "a", None, 2).map_err(|_| "taken");
    assert_eq!(
        back.map(|c| (c.diffs.len(), c.out.len())).ok(),
        Some((0, 0))
    );
    assert!(roster.close(SESSION, "a", t).diffs.is_empty());
    let gone = roster.tick(t + Duration::from_millis(600));
    assert_eq!(gone.diffs.len(), 1);
    assert_eq!(gone.diffs[0].leaves.len(), 1);
    assert!(matches!(gone.out.as_slice(), [Message::Release { .. }]));
}

#[test]
fn typing_is_cleared_after_its_ttl() {
    let settings = Settings {
        typing_ttl: Duration::from_millis(300),
        ..Settings::default()
    };
    let mut roster = Roster::new(settings, 1);
    let t = Instant::now();
    assert!(roster.join(SESSION, "a", None, 1).is_ok());
    assert!(roster.set_state(SESSION, "a", None, state(2), t, 5).is_ok());
    assert!(roster.tick(t + Duration::from_millis(200)).diffs.is_empty());
    let cleared = roster.tick(t + Duration::from_millis(300));
    assert_eq!(cleared.diffs.len(), 1);
    assert_eq!(
        cleared.diffs[0].joins[0].state.get("typing"),
        Some(&Value::Bool(false))
    );
    assert_eq!(
        cleared.diffs[0].joins[0].state.get("v"),
        Some(&Value::from(2))
    );
}

#[test]
fn another_users_client_is_refused() {
    let mut roster = Roster::new(Settings::default(), 1);
    let t = Instant::now();
    assert!(roster.join(SESSION, "a", Some("alice"), 1).is_ok());
    assert!(roster.join(SESSION, "a", Some("bob"), 1).is_err());
    assert!(roster
        .set_state(SESSION, "a", Some("bob"), Map::new(), t, 2)
        .is_err());
    assert!(roster
        .set_state(SESSION, "a", Some("alice"), Map::new(), t, 2)
        .is_ok());
}
