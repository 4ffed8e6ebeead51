//! Paging back: `loadOlder` reads the page of history before the oldest message read so far and
//! merges it (a message already shown is merged, never repeated).

use crate::reducer::Conversation;
use std::rc::Rc;

use super::Client;

impl Client {
    /// How many entries the page added; 0 once nothing older exists.
    pub(crate) async fn load_older(self: &Rc<Self>) -> Result<u32, String> {
        let Some(before) = self.conv.borrow().older_than().map(str::to_owned) else {
            return Ok(0);
        };
        let (page, _) = self
            .endpoint
            .history(self.history_limit, Some(&before))
            .await
            .map_err(|e| e.message())?;
        let mut added = 0;
        self.update(&mut |c: &mut Conversation| {
            let revision = c.revision();
            added = c.apply_older(&page);
            c.revision() != revision
        });
        Ok(u32::try_from(added).unwrap_or(u32::MAX))
    }
}
