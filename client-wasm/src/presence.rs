//! Presence (contract v1.3): who is in each session a tab shows, from the stream's `presence`
//! rosters and `presence_diff` frames. Plain Rust; `browser/hub/presence.rs` feeds it.
//!
//! Presence is never journaled: its frames carry no `id:`, so they never move a stream's resume
//! position, and nothing here enters the cache, the history or the reducer's journal. A roster
//! replaces what a tab knew of its session; diffs apply on top of it, in order (a join replaces
//! or adds its member by `member_id`, a leave removes it). A stream that (re)connects marks its
//! sessions stale: their diffs are dropped until the fresh roster the server sends first on every
//! connection, so a view is exact after every reconnect (Phoenix's client buffers them likewise).

use turnstream_protocol::RawJson;

/// One member: a browser (all its tabs) or an agent, as the server lists it.
#[derive(Debug, Clone, PartialEq)]
pub struct Member {
    /// The `client` id its streams joined with.
    pub member_id: String,
    /// The token's `sub` under auth, else `None`.
    pub user: Option<String>,
    /// A JSON object (`typing: true` by convention while its user types).
    pub state: RawJson,
    pub joined_at: i64,
}

/// A session's roster (`event: presence`).
#[derive(Debug, Clone, PartialEq)]
pub struct Roster {
    pub session_id: String,
    pub members: Vec<Member>,
    /// Members present, the unlisted ones past the server's limit included.
    pub count: i64,
}

/// A change to a roster (`event: presence_diff`).
#[derive(Debug, Clone, PartialEq)]
pub struct Diff {
    pub session_id: String,
    pub joins: Vec<Member>,
    pub leaves: Vec<Member>,
}

/// The rosters a tab knows, one per session, each with whether its diffs apply (`fresh`).
#[derive(Debug, Default)]
pub struct Rosters {
    list: Vec<(Roster, bool)>,
}

impl Rosters {
    /// The roster of `session`, if one arrived.
    pub fn get(&self, session: &str) -> Option<&Roster> {
        self.list
            .iter()
            .find(|(r, _)| r.session_id == session)
            .map(|(r, _)| r)
    }

    /// A stream carrying `sessions` (re)connected: their diffs wait for its fresh roster. The
    /// last roster stays shown until then.
    pub fn stale(&mut self, sessions: &[String]) {
        for (r, fresh) in &mut self.list {
            *fresh &= !sessions.contains(&r.session_id);
        }
    }

    /// Replaces the session's roster. Returns the one it replaced.
    pub fn roster(&mut self, roster: Roster) -> Option<Roster> {
        let at = self
            .list
            .iter()
            .position(|(r, _)| r.session_id == roster.session_id);
        match at {
            Some(i) => Some(std::mem::replace(&mut self.list[i], (roster, true)).0),
            None => {
                self.list.push((roster, true));
                None
            }
        }
    }

    /// Applies a diff; false (nothing changed) when no fresh roster of its session is known.
    pub fn diff(&mut self, d: &Diff) -> bool {
        let Some((r, true)) = self
            .list
            .iter_mut()
            .find(|(r, _)| r.session_id == d.session_id)
        else {
            return false;
        };
        for m in &d.leaves {
            let before = r.members.len();
            r.members.retain(|x| x.member_id != m.member_id);
            r.count -= (before - r.members.len()) as i64;
        }
        for m in &d.joins {
            match r.members.iter_mut().find(|x| x.member_id == m.member_id) {
                Some(x) => *x = m.clone(),
                None => {
                    r.members.push(m.clone());
                    r.count += 1;
                }
            }
        }
        r.count = r.count.max(r.members.len() as i64);
        true
    }

    /// Forgets the sessions no view shows any more.
    pub fn keep(&mut self, shown: &dyn Fn(&str) -> bool) {
        self.list.retain(|(r, _)| shown(&r.session_id));
    }
}

#[cfg(all(test, not(target_arch = "wasm32")))]
mod tests {
    use super::*;

    fn m(id: &str, state: &str) -> Member {
        Member {
            member_id: id.into(),
            user: None,
            state: RawJson::trusted(state.into()),
            joined_at: 1,
        }
    }

    fn roster(members: Vec<Member>) -> Roster {
        Roster {
            session_id: "s".into(),
            count: members.len() as i64,
            members,
        }
    }

    fn diff(joins: Vec<Member>, leaves: Vec<Member>) -> Diff {
        Diff {
            session_id: "s".into(),
            joins,
            leaves,
        }
    }

    fn ids(r: &Rosters) -> Vec<String> {
        r.get("s")
            .map(|r| r.members.iter().map(|m| m.member_id.clone()).collect())
            .unwrap_or_default()
    }

    #[test]
    fn diffs_apply_on_top_of_the_roster() {
        let mut r = Rosters::default();
        assert!(!r.diff(&diff(vec![m("a", "{}")], vec![])), "no roster yet");
        assert!(r.get("s").is_none());
        r.roster(roster(vec![m("a", "{}"), m("b", "{}")]));
        assert!(r.diff(&diff(vec![m("c", "{}")], vec![])));
        assert_eq!(ids(&r), ["a", "b", "c"]);
        // A state change is a join of the whole member: it replaces, it does not add.
        assert!(r.diff(&diff(vec![m("b", r#"{"typing":true}"#)], vec![])));
        assert_eq!(ids(&r), ["a", "b", "c"]);
        assert_eq!(
            r.get("s").map(|x| x.members[1].state.as_str()),
            Some(r#"{"typing":true}"#)
        );
        assert!(r.diff(&diff(vec![], vec![m("a", "{}")])));
        assert_eq!(ids(&r), ["b", "c"]);
        assert_eq!(r.get("s").map(|x| x.count), Some(2));
        // A leave and a join of one member in one diff (back after its grace): present.
        assert!(r.diff(&diff(vec![m("b", "{}")], vec![m("b", "{}")])));
        assert_eq!(ids(&r), ["c", "b"]);
    }

    #[test]
    fn a_reconnected_stream_drops_diffs_until_its_fresh_roster() {
        let mut r = Rosters::default();
        r.roster(roster(vec![m("a", "{}"), m("b", "{}")]));
        r.stale(&["s".into()]);
        // Until the new roster: the old one stays shown, diffs are dropped.
        assert!(!r.diff(&diff(vec![m("x", "{}")], vec![m("a", "{}")])));
        assert_eq!(ids(&r), ["a", "b"]);
        let old = r.roster(roster(vec![m("b", "{}"), m("c", "{}")]));
        assert_eq!(old.map(|o| o.members.len()), Some(2));
        assert_eq!(ids(&r), ["b", "c"], "a new roster replaces");
        assert!(r.diff(&diff(vec![], vec![m("c", "{}")])));
        assert_eq!(ids(&r), ["b"]);
        r.keep(&|s| s != "s");
        assert!(r.get("s").is_none());
    }

    #[test]
    fn the_count_keeps_the_unlisted_members() {
        let mut r = Rosters::default();
        let mut full = roster(vec![m("a", "{}")]);
        full.count = 1001;
        r.roster(full);
        r.diff(&diff(vec![m("b", "{}")], vec![m("a", "{}")]));
        assert_eq!(r.get("s").map(|x| x.count), Some(1001));
    }
}
