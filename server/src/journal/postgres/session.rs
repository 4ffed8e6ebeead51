//! Whether a connection has a server session of its own, or is a pooler's in transaction mode,
//! whose every transaction may run on another server connection (shared with other clients):
//! there, neither `LISTEN` nor a prepared statement outlives the transaction that made it.

use tokio_postgres::{Client, SimpleQueryMessage};

/// A setting only this check uses.
const SETTING: &str = "turnstream.session_check";
/// Rounds of the check: a miss (see [`keeps_session`]) in each is unlikely.
const ROUNDS: usize = 4;

/// Whether `own` keeps its session. A setting is made on it, then looked for from `other` (a
/// connection to the same URL) inside a transaction that holds `other`'s server connection
/// meanwhile, then on `own` itself: seen from `other`, or gone from `own`, means the two share
/// server connections. A pooler hands out the most recently used server connection first, so
/// `other` mostly gets the one the setting went to; when it does not, `own` finds its setting
/// only if it got that one back. Leaves nothing behind but the setting.
pub(super) async fn keeps_session(
    own: &Client,
    other: &Client,
) -> Result<bool, tokio_postgres::Error> {
    for round in 0..ROUNDS {
        let token = format!("{:016x}{round}", rand::random::<u64>());
        if !keeps_setting(own, other, &token).await? {
            return Ok(false);
        }
    }
    Ok(true)
}

async fn keeps_setting(
    own: &Client,
    other: &Client,
    token: &str,
) -> Result<bool, tokio_postgres::Error> {
    own.batch_execute(&format!("SET {SETTING} = '{token}'"))
        .await?;
    let look = format!("SELECT current_setting('{SETTING}', true)");
    other.batch_execute("BEGIN").await?;
    let seen = setting(&other.simple_query(&look).await?);
    let kept = if seen.as_deref() == Some(token) {
        None
    } else {
        setting(&own.simple_query(&look).await?)
    };
    other.batch_execute("COMMIT").await?;
    Ok(kept.as_deref() == Some(token))
}

fn setting(messages: &[SimpleQueryMessage]) -> Option<String> {
    messages.iter().find_map(|m| match m {
        SimpleQueryMessage::Row(row) => row.get(0).map(str::to_string),
        _ => None,
    })
}
