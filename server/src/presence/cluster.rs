//! How presence reaches the other servers sharing a database: the messages, and the
//! [`Cluster`] that carries them. On SQLite there are no others ([`Alone`]); on PostgreSQL they
//! go through the journal's broadcast (`NOTIFY` on a channel of their own, never a table), see
//! [`crate::journal::Broadcast`]. The roster logic is the same either way.
//!
//! Delivery is best effort and may be lost (a listening connection that dropped): each server
//! renews its members every third of `--presence-ttl-secs` with a [`Message::Hold`], a server
//! that (re)starts hearing asks the others for theirs ([`Message::Hello`]), and a member whose
//! renewals stop (its server was killed) leaves after the TTL.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::roster::Version;
use crate::journal::Journal;

/// Most bytes of one broadcast (PostgreSQL refuses a `NOTIFY` payload of 8000 bytes or more).
pub const MAX_PAYLOAD_BYTES: usize = 7000;

/// A member as servers tell each other of it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WireMember {
    /// Its client id (`member_id`).
    pub c: String,
    /// Its user (`sub`), if any.
    pub u: Option<String>,
    /// Its state, and that state's version.
    pub st: Map<String, Value>,
    pub v: Version,
    /// When it joined (unix ms).
    pub j: i64,
}

/// One thing a server tells the others.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "k", rename_all = "snake_case")]
pub enum Message {
    /// The sender holds this member (a join, or a renewal), with the state it knows.
    Hold { s: String, m: WireMember },
    /// This member's state changed (set on the sender, which need not hold it).
    State { s: String, m: WireMember },
    /// The sender no longer holds this member (its grace ended there).
    Release {
        s: String,
        c: String,
        u: Option<String>,
    },
    /// The sender (re)started hearing: every server answers with its holds.
    Hello,
    /// The sender stops: whatever it held is released at once.
    Bye,
}

/// A batch of messages from one server, as sent.
#[derive(Debug, Serialize, Deserialize)]
pub struct Envelope {
    /// The sending server.
    pub n: u64,
    pub m: Vec<Message>,
}

/// Encodes `messages` of server `node` as payloads of at most [`MAX_PAYLOAD_BYTES`] each, in
/// order (a single message too large to send is left out, with a warning: a state is at most
/// 1 KiB, so only an unusually long user id could make one).
pub fn payloads(node: u64, messages: Vec<Message>) -> Vec<String> {
    let mut out = Vec::new();
    let mut batch: Vec<String> = Vec::new();
    let mut size = 0;
    let overhead = 32;
    for m in messages {
        let Ok(json) = serde_json::to_string(&m) else {
            continue;
        };
        if json.len() + overhead > MAX_PAYLOAD_BYTES {
            tracing::warn!(
                bytes = json.len(),
                "presence: a message too large to send to the other servers was left out"
            );
            continue;
        }
        if size + json.len() + 1 + overhead > MAX_PAYLOAD_BYTES && !batch.is_empty() {
            out.push(envelope(node, &batch));
            batch.clear();
            size = 0;
        }
        size += json.len() + 1;
        batch.push(json);
    }
    if !batch.is_empty() {
        out.push(envelope(node, &batch));
    }
    out
}

fn envelope(node: u64, messages: &[String]) -> String {
    format!("{{\"n\":{node},\"m\":[{}]}}", messages.join(","))
}

/// The way to the other servers.
pub trait Cluster: Send + Sync {
    /// Whether other servers may be there at all (false: presence is this server's alone).
    fn shared(&self) -> bool;
    /// Sends one payload (from [`payloads`]) to every other server, in order, best effort.
    fn send(&self, payload: String);
}

/// No other server (SQLite).
pub struct Alone;

impl Cluster for Alone {
    fn shared(&self) -> bool {
        false
    }

    fn send(&self, _payload: String) {}
}

/// The other servers on the journal's database, through its broadcast.
pub struct OverJournal(pub Journal);

impl Cluster for OverJournal {
    fn shared(&self) -> bool {
        self.0.is_shared()
    }

    fn send(&self, payload: String) {
        self.0.broadcast(payload);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_stay_under_the_limit_and_keep_order() {
        let messages: Vec<Message> = (0..200)
            .map(|i| Message::Release {
                s: format!("session-{i}"),
                c: "x".repeat(60),
                u: None,
            })
            .collect();
        let out = payloads(7, messages.clone());
        assert!(out.len() > 1);
        let mut back = Vec::new();
        for p in &out {
            assert!(p.len() <= MAX_PAYLOAD_BYTES);
            let e: Envelope = serde_json::from_str(p).unwrap_or(Envelope {
                n: 0,
                m: Vec::new(),
            });
            assert_eq!(e.n, 7);
            back.extend(e.m);
        }
        assert_eq!(back, messages);
    }
}
