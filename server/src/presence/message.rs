//! What servers tell each other of presence (see [`super::cluster`] for how it travels): a
//! member held, its state changed, released, and a server's hello and goodbye.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The order of a member's states across servers: the newest wins everywhere. Unix ms, then a
/// tiebreak of the server that set it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Version(pub u64, pub u64);

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
