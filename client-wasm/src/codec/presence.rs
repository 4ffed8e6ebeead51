//! The presence frames of the stream (contract v1.3) and the body of a presence update.

use turnstream_protocol::RawJson;

use super::{Fields, Obj, Value};
use crate::presence::{Diff, Member, Roster};

fn member<V: Value>(v: &V) -> Option<Member> {
    let mut f = Fields::new(v);
    let m = Member {
        member_id: f.str("member_id"),
        user: f.opt_str("user"),
        state: f
            .opt_raw("state")
            .unwrap_or_else(|| RawJson::trusted("{}".into())),
        joined_at: f.opt_int("joined_at").unwrap_or_default(),
    };
    f.done(m)
}

/// `event: presence`: a session's roster.
pub fn presence<V: Value>(v: &V) -> Option<Roster> {
    let mut f = Fields::new(v);
    let members = f.list("members", member);
    let r = Roster {
        session_id: f.str("session_id"),
        count: f.opt_int("count").unwrap_or(members.len() as i64),
        members,
    };
    f.done(r)
}

/// `event: presence_diff`.
pub fn presence_diff<V: Value>(v: &V) -> Option<Diff> {
    let mut f = Fields::new(v);
    let d = Diff {
        session_id: f.str("session_id"),
        joins: f.list("joins", member),
        leaves: f.list("leaves", member),
    };
    f.done(d)
}

fn write_member(out: &mut String, m: &Member) {
    let mut o = Obj::new(out);
    o.str("member_id", &m.member_id)
        .opt_str("user", m.user.as_deref());
    o.key("state").push_str(m.state.as_str());
    o.int("joined_at", m.joined_at).end();
}

/// A roster as the server writes it (the leader hands it to a tab that joins late).
pub fn presence_json(r: &Roster) -> String {
    let mut out = String::new();
    Obj::new(&mut out)
        .str("session_id", &r.session_id)
        .list("members", &r.members, write_member)
        .int("count", r.count)
        .end();
    out
}

/// A roster as `state.presence` shows it: the member `me` (this browser) first, marked `self`.
pub fn members_json(r: &Roster, me: &str) -> String {
    let mut out = String::from("[");
    for mine in [true, false] {
        for m in r.members.iter().filter(|m| (m.member_id == me) == mine) {
            if out.len() > 1 {
                out.push(',');
            }
            let mut o = Obj::new(&mut out);
            o.str("memberId", &m.member_id)
                .opt_str("user", m.user.as_deref());
            o.key("state").push_str(m.state.as_str());
            o.int("joinedAt", m.joined_at).bool("self", mine).end();
        }
    }
    out.push(']');
    out
}

/// `POST /api/sessions/{session}/presence`: `state` is a JSON object's text.
pub fn presence_request_json(client: &str, state: &str) -> String {
    let mut out = String::new();
    let mut o = Obj::new(&mut out);
    o.str("client", client);
    o.key("state").push_str(state);
    o.end();
    out
}

#[cfg(all(test, not(target_arch = "wasm32")))]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_roster_reads_and_writes_back() {
        let v = json!({"session_id": "s", "count": 2, "members": [
            {"member_id": "c1", "user": "alice", "state": {"typing": true}, "joined_at": 5},
            {"member_id": "c2", "user": null, "state": {}, "joined_at": 6}]});
        let r = presence(&v).expect("reads");
        assert_eq!(r.members.len(), 2);
        assert_eq!(r.members[0].user.as_deref(), Some("alice"));
        assert_eq!(r.members[0].state.as_str(), r#"{"typing":true}"#);
        let back: serde_json::Value = serde_json::from_str(&presence_json(&r)).expect("json");
        assert_eq!(back, v);
        assert!(presence(&json!({"members": []})).is_none(), "no session_id");
        let shown: serde_json::Value = serde_json::from_str(&members_json(&r, "c2")).expect("json");
        assert_eq!(
            shown,
            json!([
            {"memberId": "c2", "user": null, "state": {}, "joinedAt": 6, "self": true},
            {"memberId": "c1", "user": "alice", "state": {"typing": true}, "joinedAt": 5, "self": false}]),
            "this browser first"
        );
        assert!(presence(&json!({"session_id": "s", "members": [{"user": "x"}]})).is_none());
    }

    #[test]
    fn a_diff_reads() {
        let v = json!({"session_id": "s", "joins": [{"member_id": "a", "state": {}, "joined_at": 1}],
            "leaves": [{"member_id": "b", "state": {}, "joined_at": 1}]});
        let d = presence_diff(&v).expect("reads");
        assert_eq!((d.joins.len(), d.leaves.len()), (1, 1));
        assert_eq!(d.leaves[0].member_id, "b");
        let body: serde_json::Value =
            serde_json::from_str(&presence_request_json("c\"1", r#"{"typing":true}"#))
                .expect("json");
        assert_eq!(body, json!({"client": "c\"1", "state": {"typing": true}}));
    }
}
