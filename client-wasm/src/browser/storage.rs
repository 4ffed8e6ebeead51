//! Where a session's cache (its bubbles and its outbox) outlives the page: one IndexedDB record
//! per server and session, or nothing at all for `storage: "memory"`.
//!
//! Tabs of one session write the same record. A write reads the record, joins it with the tab's
//! view and writes the join, all in one readwrite transaction (IndexedDB runs those one at a
//! time), so no tab erases what another queued.

use rexie::{ObjectStore, Rexie, TransactionMode};
use wasm_bindgen::JsValue;

use crate::reducer::{CacheRecord, Conversation};

const DB_NAME: &str = "turnstream";
const DB_VERSION: u32 = 1;
const STORE: &str = "sessions";
/// Journal positions (a message with its reply) kept per session: ten pages of history.
const KEEP: usize = 1000;

pub(crate) enum Storage {
    Memory,
    IndexedDb { db: Rexie, key: String },
}

impl Storage {
    /// Opens IndexedDB; `None` where it is unavailable (some private modes), so the caller can
    /// fall back to memory and say so.
    pub(crate) async fn indexed_db(base_url: &str, session_id: &str) -> Option<Storage> {
        let db = Rexie::builder(DB_NAME)
            .version(DB_VERSION)
            .add_object_store(ObjectStore::new(STORE))
            .build()
            .await
            .ok()?;
        Some(Storage::IndexedDb {
            db,
            key: format!("{base_url}|{session_id}"),
        })
    }

    pub(crate) fn is_persistent(&self) -> bool {
        matches!(self, Storage::IndexedDb { .. })
    }

    pub(crate) async fn load(&self) -> Result<Option<CacheRecord>, String> {
        let Storage::IndexedDb { db, key } = self else {
            return Ok(None);
        };
        let tx = db
            .transaction(&[STORE], TransactionMode::ReadOnly)
            .map_err(|e| e.to_string())?;
        let store = tx.store(STORE).map_err(|e| e.to_string())?;
        let value = store
            .get(JsValue::from_str(key))
            .await
            .map_err(|e| e.to_string())?;
        Ok(value.and_then(|v| v.as_string()).and_then(|s| parse(&s)))
    }

    /// Writes the join of `conv` and what is stored.
    pub(crate) async fn save(&self, conv: &Conversation) -> Result<(), String> {
        let Storage::IndexedDb { db, key } = self else {
            return Ok(());
        };
        let tx = db
            .transaction(&[STORE], TransactionMode::ReadWrite)
            .map_err(|e| e.to_string())?;
        let store = tx.store(STORE).map_err(|e| e.to_string())?;
        let key = JsValue::from_str(key);
        // Nothing but IndexedDB requests is awaited until the put: a foreign await would let
        // the transaction commit under us.
        let stored = store.get(key.clone()).await.map_err(|e| e.to_string())?;
        let mut merged = conv.clone();
        if let Some(rec) = stored.and_then(|v| v.as_string()).and_then(|s| parse(&s)) {
            merged.apply_cache(&rec);
        }
        let json =
            serde_json::to_string(&merged.to_cache_bounded(KEEP)).map_err(|e| e.to_string())?;
        store
            .put(&JsValue::from_str(&json), Some(&key))
            .await
            .map_err(|e| e.to_string())?;
        tx.done().await.map_err(|e| e.to_string())?;
        Ok(())
    }
}

fn parse(json: &str) -> Option<CacheRecord> {
    // A record of another format version is dropped, not misread.
    serde_json::from_str(json).ok()
}
