//! [`plan`] over any tabs and sessions: every wanted session on exactly one stream, no more
//! streams than needed, nothing moved and nothing reopened without a reason, and a tab leaving
//! reopens only the streams that lose a session, from where they had got to.

use super::*;
use proptest::prelude::*;

fn at(n: u32) -> String {
    format!("e1-{n}")
}

/// The sequence number of a position written by [`at`].
fn seq(pos: &str) -> u32 {
    pos.strip_prefix("e1-")
        .and_then(|n| n.parse().ok())
        .unwrap_or(u32::MAX)
}

/// One session a tab shows, owned ([`Wanted`] borrows).
#[derive(Debug, Clone, PartialEq)]
struct Want {
    session: String,
    pos: String,
    covered: Option<String>,
    current: bool,
}

fn want(session: &str, pos: u32, covered: Option<&str>, current: bool) -> Want {
    Want {
        session: session.into(),
        pos: at(pos),
        covered: covered.map(str::to_owned),
        current,
    }
}

/// Every tab's wants, in the order the hub lists them.
fn wanted(tabs: &[Vec<Want>]) -> Vec<Wanted<'_>> {
    tabs.iter()
        .flatten()
        .map(|w| Wanted {
            session: &w.session,
            pos: &w.pos,
            covered: w.covered.as_deref(),
            current: w.current,
        })
        .collect()
}

fn held(sid: &str, sessions: &[&str], last: u32) -> Held<usize> {
    Held {
        state: StreamState {
            sid: sid.into(),
            sessions: sessions.iter().map(|s| s.to_string()).collect(),
            from: at(0),
            last: None,
            open: true,
        },
        last: at(last),
        stream: None,
        attempt: 0,
    }
}

/// Plans `streams` for `wants`, each held stream's handle its index before (new ones have
/// none): which stream a planned one continues. Returns the streams as they were, and the plan.
fn replan(
    streams: &mut Vec<Held<usize>>,
    wants: &[Wanted<'_>],
    names: &mut u32,
) -> (Vec<Held<usize>>, Plan) {
    for (k, s) in streams.iter_mut().enumerate() {
        s.stream = Some(k);
    }
    let before = streams.clone();
    let plan = plan(streams, wants, || {
        *names += 1;
        format!("t.{names}")
    });
    (before, plan)
}

/// Every wanted session, once, in the order first wanted.
fn distinct(wants: &[Wanted<'_>]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for w in wants {
        if !out.iter().any(|s| s == w.session) {
            out.push(w.session.to_owned());
        }
    }
    out
}

/// What holds of every plan, from any streams the leader can hold (`before`).
fn check(
    before: &[Held<usize>],
    wants: &[Wanted<'_>],
    after: &[Held<usize>],
    plan: &Plan,
) -> Result<(), TestCaseError> {
    let sessions = distinct(wants);
    // Every set of tabs and sessions covered, no session twice, nothing nobody wants.
    for s in &sessions {
        let on = after
            .iter()
            .filter(|g| g.state.sessions.contains(s))
            .count();
        prop_assert_eq!(on, 1, "{} is on exactly one stream", s);
    }
    for g in after {
        let carried = &g.state.sessions;
        prop_assert!(!carried.is_empty(), "no empty stream");
        prop_assert!(carried.len() <= MAX_SESSIONS);
        for (i, s) in carried.iter().enumerate() {
            prop_assert!(sessions.contains(s), "{} is wanted", s);
            prop_assert!(!carried[..i].contains(s), "{} once on its stream", s);
        }
    }
    // No more streams than needed, ceil(sessions / 32), unless more were held: streams are not
    // merged as sessions leave (a stream emptied takes a new session, though).
    let least = sessions.len().div_ceil(MAX_SESSIONS);
    prop_assert!(after.len() <= least.max(before.len()));
    if before.is_empty() || after.iter().any(|g| g.stream.is_none()) {
        prop_assert_eq!(
            after.len(),
            least,
            "new streams only when the others are full"
        );
    }
    // Held streams keep their order, new ones come after them.
    let was: Vec<Option<usize>> = after.iter().map(|g| g.stream).collect();
    let held: Vec<usize> = was.iter().flatten().copied().collect();
    prop_assert!(held.windows(2).all(|k| k[0] < k[1]), "in order: {:?}", was);
    prop_assert!(
        was[held.len()..].iter().all(Option::is_none),
        "new last: {:?}",
        was
    );
    for (k, b) in before.iter().enumerate() {
        let kept: Vec<&String> = b
            .state
            .sessions
            .iter()
            .filter(|s| sessions.contains(s))
            .collect();
        match after.iter().find(|g| g.stream == Some(k)) {
            // A session never moves: the held stream keeps every wanted session it carried.
            Some(g) => prop_assert!(kept.iter().all(|s| g.state.sessions.contains(s))),
            None => prop_assert!(kept.is_empty(), "a stream closes only when nobody wants it"),
        }
    }
    let closed = before.len() > held.len();
    prop_assert_eq!(plan.changed, closed || !plan.opening.is_empty());
    let names: Vec<&str> = before.iter().map(|b| b.state.sid.as_str()).collect();
    for (i, g) in after.iter().enumerate() {
        let b = g.stream.map(|k| &before[k]);
        let sid = b.map_or("", |b| b.state.sid.as_str());
        let mine: Vec<&Wanted<'_>> = wants
            .iter()
            .filter(|w| g.state.sessions.iter().any(|s| s == w.session))
            .collect();
        let uncovered = mine.iter().any(|w| w.current && w.covered != Some(sid));
        // Restarted exactly when its sessions changed or a current tab does not follow it.
        let changed = b.is_none_or(|b| b.state.sessions != g.state.sessions);
        let opening = plan.opening.contains(&i);
        prop_assert_eq!(opening, changed || uncovered, "reopens: {:?}", g);
        let Some(b) = b.filter(|_| !opening) else {
            // Under a new name, from the lowest position needed: a current view it does not
            // cover, the first tab wanting a session new to it, and a held stream's own last.
            prop_assert!(!names.contains(&g.state.sid.as_str()), "a new name");
            prop_assert!(!g.state.open);
            prop_assert_eq!(&g.state.from, &g.last);
            let mut needed: Vec<u32> = mine
                .iter()
                .filter(|w| w.current && w.covered != Some(sid))
                .map(|w| seq(w.pos))
                .collect();
            for s in &g.state.sessions {
                if b.is_none_or(|b| !b.state.sessions.contains(s)) {
                    let first = wants.iter().find(|w| w.session == s.as_str());
                    needed.extend(first.map(|w| seq(w.pos)));
                }
            }
            needed.extend(b.map(|b| seq(&b.last)));
            prop_assert_eq!(
                Some(seq(&g.last)),
                needed.into_iter().min(),
                "from: {:?}",
                g
            );
            continue;
        };
        prop_assert_eq!(g, b, "goes on as it was");
    }
    Ok(())
}

/// A tab's sessions: (session, position, what its view follows, current).
fn tabs() -> impl Strategy<Value = Vec<Vec<(u8, u32, u8, bool)>>> {
    let want = (0u8..100, 0u32..40, any::<u8>(), any::<bool>());
    prop::collection::vec(prop::collection::vec(want, 0..40), 0..5)
}

/// The tabs' wants against `held`: a view follows the stream carrying its session, another
/// stream (a word about an older leader's streams), or none.
fn against(held: &[Held<usize>], tabs: &[Vec<(u8, u32, u8, bool)>]) -> Vec<Vec<Want>> {
    tabs.iter()
        .map(|t| {
            t.iter()
                .map(|&(session, pos, follows, current)| {
                    let session = format!("s{session}");
                    let carrying = held.iter().find(|h| h.state.sessions.contains(&session));
                    let covered = match follows % 4 {
                        0 => None,
                        1 => held.get(usize::from(follows) % held.len().max(1)),
                        _ => carrying,
                    };
                    Want {
                        session,
                        pos: at(pos),
                        covered: covered.map(|h| h.state.sid.clone()),
                        current,
                    }
                })
                .collect()
        })
        .collect()
}

/// The streams go on (by `ahead` events each) and open.
fn go_on(streams: &mut [Held<usize>], ahead: u32) {
    for s in streams {
        s.last = at(seq(&s.last) + ahead);
        s.state.open = true;
    }
}

/// Every view follows the stream carrying its session, on the leader's latest word.
fn settle(streams: &[Held<usize>], tabs: &mut [Vec<Want>]) {
    for w in tabs.iter_mut().flatten() {
        let s = streams
            .iter()
            .find(|s| s.state.sessions.contains(&w.session));
        w.covered = s.map(|s| s.state.sid.clone());
        w.current = true;
    }
}

proptest! {
    /// Rounds of tabs coming, going and falling behind, each planned from the streams the last
    /// round left (which have since gone on).
    #[test]
    fn every_plan_covers_every_session_once_and_reopens_only_for_a_reason(
        rounds in prop::collection::vec((tabs(), 0u32..5), 1..5),
    ) {
        let mut streams: Vec<Held<usize>> = Vec::new();
        let mut names = 0;
        for (tabs, ahead) in rounds {
            let tabs = against(&streams, &tabs);
            let wants = wanted(&tabs);
            let (before, plan) = replan(&mut streams, &wants, &mut names);
            check(&before, &wants, &streams, &plan)?;
            go_on(&mut streams, ahead);
        }
    }

    /// Once every view follows its stream, planning again changes nothing; then a tab leaves:
    /// every session still wanted stays on its stream, a stream that lost no session goes on
    /// untouched, and one that lost a session reopens from where it had got to (no replay).
    #[test]
    fn a_tab_leaving_reopens_only_the_streams_it_leaves(
        before in tabs(),
        tabs in tabs(),
        leaving in any::<usize>(),
        ahead in 0u32..5,
    ) {
        let mut names = 0;
        let mut streams: Vec<Held<usize>> = Vec::new();
        replan(&mut streams, &wanted(&against(&[], &before)), &mut names);
        go_on(&mut streams, ahead);
        let mut tabs = against(&streams, &tabs);
        replan(&mut streams, &wanted(&tabs), &mut names);
        go_on(&mut streams, ahead);
        settle(&streams, &mut tabs);
        let (held, again) = replan(&mut streams, &wanted(&tabs), &mut names);
        prop_assert_eq!(&again, &Plan { changed: false, opening: vec![] }, "settled");
        prop_assert_eq!(&held, &streams);
        if tabs.is_empty() {
            return Ok(());
        }
        tabs.remove(leaving % tabs.len());
        let wants = wanted(&tabs);
        let (held, plan) = replan(&mut streams, &wants, &mut names);
        check(&held, &wants, &streams, &plan)?;
        for (i, g) in streams.iter().enumerate() {
            let Some(k) = g.stream else {
                return Err(TestCaseError::fail(format!("a new stream: {g:?}")));
            };
            let b = &held[k];
            if g.state.sessions == b.state.sessions {
                prop_assert!(!plan.opening.contains(&i), "lost nothing: goes on");
            } else {
                prop_assert!(plan.opening.contains(&i));
                prop_assert_eq!(&g.last, &b.last, "lost a session: reopens from its last");
            }
        }
    }
}

/// Plans `streams` for one tab's `wants`, naming streams `n1`, `n2`, ...
fn plan_for(streams: &mut Vec<Held<usize>>, tabs: &[Vec<Want>]) -> Plan {
    let mut n = 0;
    plan(streams, &wanted(tabs), || {
        n += 1;
        format!("n{n}")
    })
}

#[test]
fn nothing_wanted_closes_every_stream() {
    let mut streams = vec![held("a", &["s1"], 3), held("b", &["s2"], 4)];
    let plan = plan_for(&mut streams, &[]);
    assert_eq!(streams, vec![]);
    assert!(plan.changed);
    let mut none = Vec::new();
    let plan = plan_for(&mut none, &[vec![]]);
    assert_eq!((none, plan.changed), (vec![], false));
}

#[test]
fn thirty_three_sessions_take_two_streams_each_from_its_lowest_position() {
    let tab: Vec<Want> = (0..33)
        .map(|n| want(&format!("s{n}"), 40 - n, None, true))
        .collect();
    let mut streams = Vec::new();
    let plan = plan_for(&mut streams, &[tab]);
    assert_eq!(plan.opening, vec![0, 1]);
    assert_eq!(streams[0].state.sessions.len(), 32);
    assert_eq!(streams[0].state.from, at(9), "s31 wants it from 9");
    assert_eq!(streams[1].state.sessions, vec!["s32".to_owned()]);
    assert_eq!(streams[1].state.from, at(8));
    assert_eq!(
        (&*streams[0].state.sid, &*streams[1].state.sid),
        ("n1", "n2")
    );
}

#[test]
fn a_new_session_joins_the_first_stream_with_room() {
    let full: Vec<String> = (0..32).map(|n| format!("f{n}")).collect();
    let full: Vec<&str> = full.iter().map(String::as_str).collect();
    let mut streams = vec![held("a", &full, 5), held("b", &["x"], 7)];
    let mut tab: Vec<Want> = full.iter().map(|s| want(s, 5, Some("a"), true)).collect();
    tab.push(want("x", 7, Some("b"), true));
    tab.push(want("y", 6, None, true));
    let plan = plan_for(&mut streams, &[tab]);
    assert_eq!(streams.len(), 2, "no new stream while one has room");
    assert_eq!(plan.opening, vec![1], "the full stream goes on");
    assert_eq!(
        streams[1].state.sessions,
        vec!["x".to_owned(), "y".to_owned()]
    );
    assert_eq!(streams[1].state.from, at(6));
}

#[test]
fn a_view_behind_reopens_its_stream_from_there_and_never_past_its_last() {
    let streams = vec![held("a", &["s1", "s2"], 9)];
    let behind = [vec![
        want("s1", 4, None, true),
        want("s2", 9, Some("a"), true),
    ]];
    let mut s = streams.clone();
    assert_eq!(plan_for(&mut s, &behind).opening, vec![0]);
    assert_eq!(
        (s[0].state.from.as_str(), s[0].last.as_str()),
        ("e1-4", "e1-4")
    );
    let ahead = [vec![
        want("s1", 12, None, true),
        want("s2", 9, Some("a"), true),
    ]];
    let mut s = streams.clone();
    plan_for(&mut s, &ahead);
    assert_eq!(s[0].state.from, at(9));
}

#[test]
fn a_word_about_older_streams_reopens_nothing() {
    let mut streams = vec![held("a", &["s1"], 9)];
    let stale = [vec![want("s1", 2, Some("old"), false)]];
    let plan = plan_for(&mut streams, &stale);
    assert_eq!(
        plan,
        Plan {
            changed: false,
            opening: vec![]
        }
    );
    assert_eq!(streams, vec![held("a", &["s1"], 9)]);
}

#[test]
fn two_tabs_on_one_new_session_open_it_from_the_lower() {
    let tabs = [
        vec![want("s1", 8, None, true)],
        vec![want("s1", 3, None, true)],
    ];
    let mut streams = Vec::new();
    plan_for(&mut streams, &tabs);
    assert_eq!(streams.len(), 1);
    assert_eq!(streams[0].state.sessions, vec!["s1".to_owned()]);
    assert_eq!(streams[0].state.from, at(3));
}

#[test]
fn sessions_leaving_do_not_merge_streams() {
    let a: Vec<String> = (0..32).map(|n| format!("a{n}")).collect();
    let a: Vec<&str> = a.iter().map(String::as_str).collect();
    let mut streams = vec![held("a", &a, 5), held("b", &["b0"], 6)];
    let tab = [vec![
        want("a0", 5, Some("a"), true),
        want("b0", 6, Some("b"), true),
    ]];
    let plan = plan_for(&mut streams, &tab);
    // Two streams for two sessions: merging them would reopen the one that lost nothing.
    assert_eq!(streams.len(), 2);
    assert_eq!(plan.opening, vec![0]);
    assert_eq!(
        streams[0].state.from,
        at(5),
        "lost 31 sessions: reopens from its last"
    );
    assert_eq!(streams[1], held("b", &["b0"], 6));
}

#[test]
fn an_emptied_stream_takes_a_new_session() {
    let mut streams = vec![held("a", &["gone"], 5), held("b", &["b0"], 6)];
    let tab = [vec![
        want("b0", 6, Some("b"), true),
        want("new", 2, None, true),
    ]];
    let plan = plan_for(&mut streams, &tab);
    assert_eq!(plan.opening, vec![0]);
    assert_eq!(streams[0].state.sessions, vec!["new".to_owned()]);
    assert_eq!(streams[0].state.from, at(2));
    assert_eq!(streams[1], held("b", &["b0"], 6));
}

#[test]
fn positions_that_do_not_compare_keep_the_first_asked() {
    // Across journals (an epoch changed) no position is lower: the first tab's is taken, and
    // the stream's resync sorts out the rest.
    assert_eq!(lowest(Some("e2-1".into()), "e1-5"), Some("e2-1".into()));
    assert_eq!(lowest(Some("e1-7".into()), "e1-5"), Some("e1-5".into()));
    assert_eq!(lowest(None, "e1-5"), Some("e1-5".into()));
}
