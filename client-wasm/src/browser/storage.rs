//! Where a session's cache (its bubbles and its outbox) outlives the page: one IndexedDB record
//! per server and session, or nothing at all for `storage: "memory"`.
//!
//! Tabs of one session write the same record. A write reads the record, joins it with the tab's
//! view and writes the join, all in one readwrite transaction (IndexedDB runs those one at a
//! time), so no tab erases what another queued or showed. A page that goes away cannot wait for
//! a read: it writes its view to a record of its own beside it (the session's key and
//! [`LEAVING`]), which the next load and the next write join in (the write then deletes it), so
//! a tab that is behind another cannot overwrite what the other stored.
//!
//! That leaving write must not wait behind a transaction the page still has open (a timer's
//! write reading the record when the reload comes): a transaction queued behind another is
//! aborted, unstarted, when the page's connection closes. So the page aborts what it has open
//! (a write whose view the leaving record carries anyway) before it writes.
//!
//! The record is the JSON of [`CacheRecord`] (see [`crate::codec`]), stored as a string.

use crate::browser::{deferred, listener};
use js_sys::Reflect;
use std::cell::RefCell;
use wasm_bindgen::prelude::*;
use wasm_bindgen_futures::JsFuture;
use web_sys::{IdbDatabase, IdbFactory, IdbRequest, IdbTransaction, IdbTransactionMode};

use super::http::describe;
use super::json;
use crate::codec;
use crate::reducer::{CacheRecord, Conversation};

const DB_NAME: &str = "turnstream";
const DB_VERSION: u32 = 1;
const STORE: &str = "sessions";
/// Journal positions (a message with its reply) kept per session: ten pages of history.
const KEEP: usize = 1000;
/// Added to a session's key for the record a page writes as it goes away.
const LEAVING: &str = "|leaving";

pub(crate) enum Storage {
    Memory,
    IndexedDb {
        db: IdbDatabase,
        key: String,
        /// The transactions this page has open, aborted when it goes away (see the module's
        /// docs).
        open: RefCell<Vec<IdbTransaction>>,
    },
}

/// A transaction listed in `open` while it lives (until its future ends or is dropped).
struct Open<'a> {
    open: &'a RefCell<Vec<IdbTransaction>>,
    tx: IdbTransaction,
}

impl<'a> Open<'a> {
    fn new(open: &'a RefCell<Vec<IdbTransaction>>, tx: IdbTransaction) -> Self {
        open.borrow_mut().push(tx.clone());
        Open { open, tx }
    }
}

impl Drop for Open<'_> {
    fn drop(&mut self) {
        self.open.borrow_mut().retain(|t| t != &self.tx);
    }
}

/// Resolves once `req` succeeded (with its result) or failed.
async fn done(req: &IdbRequest) -> Result<JsValue, String> {
    let (settled, resolve, reject) = deferred();
    req.set_onsuccess(Some(&resolve));
    req.set_onerror(Some(&reject));
    let outcome = JsFuture::from(settled).await;
    req.set_onsuccess(None);
    req.set_onerror(None);
    match outcome {
        Ok(_) => req.result().map_err(|e| describe(&e)),
        Err(_) => Err(request_error(req)),
    }
}

fn request_error(target: &JsValue) -> String {
    Reflect::get(target, &JsValue::from_str("error"))
        .map(|e| describe(&e))
        .unwrap_or_else(|e| describe(&e))
}

/// Resolves once `tx` committed.
async fn committed(tx: &IdbTransaction) -> Result<(), String> {
    let (settled, resolve, reject) = deferred();
    tx.set_oncomplete(Some(&resolve));
    tx.set_onerror(Some(&reject));
    tx.set_onabort(Some(&reject));
    let outcome = JsFuture::from(settled).await;
    tx.set_oncomplete(None);
    tx.set_onerror(None);
    tx.set_onabort(None);
    outcome.map(|_| ()).map_err(|_| request_error(tx))
}

impl Storage {
    /// Opens IndexedDB; `None` where it is unavailable (some private modes), so the caller can
    /// fall back to memory and say so.
    pub(crate) async fn indexed_db(base_url: &str, session_id: &str) -> Option<Storage> {
        let factory: IdbFactory = Reflect::get(&js_sys::global(), &JsValue::from_str("indexedDB"))
            .ok()
            .filter(JsValue::is_object)?
            .unchecked_into();
        let open = factory.open_with_u32(DB_NAME, DB_VERSION).ok()?;
        let req = open.clone();
        let upgrade = listener(Box::new(move |_: web_sys::Event| {
            // Version 1 is the first: the store cannot exist yet (if it did, this throws and
            // changes nothing).
            if let Ok(db) = req.result() {
                let _ = db
                    .unchecked_into::<IdbDatabase>()
                    .create_object_store(STORE);
            }
        }));
        open.set_onupgradeneeded(Some(upgrade.as_ref().unchecked_ref()));
        let db = done(&open).await;
        open.set_onupgradeneeded(None);
        drop(upgrade);
        Some(Storage::IndexedDb {
            db: db.ok()?.unchecked_into(),
            key: crate::cat(&[base_url, "|", session_id]),
            open: RefCell::default(),
        })
    }

    pub(crate) fn is_persistent(&self) -> bool {
        matches!(self, Storage::IndexedDb { .. })
    }

    /// The session's records: what the tabs' writes joined, and what a page that went away
    /// wrote beside it (join them all).
    pub(crate) async fn load(&self) -> Result<Vec<CacheRecord>, String> {
        let Storage::IndexedDb { db, key, open } = self else {
            return Ok(Vec::new());
        };
        let tx = db.transaction_with_str(STORE).map_err(|e| describe(&e))?;
        let tx = Open::new(open, tx);
        let tx = &tx.tx;
        let store = tx.object_store(STORE).map_err(|e| describe(&e))?;
        let mut records = Vec::new();
        for k in [key.clone(), crate::cat(&[key, LEAVING])] {
            let req = store
                .get(&JsValue::from_str(&k))
                .map_err(|e| describe(&e))?;
            if let Some(rec) = done(&req).await?.as_string().and_then(|s| parse(&s)) {
                records.push(rec);
            }
        }
        Ok(records)
    }

    /// Writes the join of `conv` and what is stored (the record a leaving page wrote included,
    /// which is then deleted: it is in the join).
    pub(crate) async fn save(&self, conv: &Conversation) -> Result<(), String> {
        let Storage::IndexedDb { db, key, open } = self else {
            return Ok(());
        };
        let tx = db
            .transaction_with_str_and_mode(STORE, IdbTransactionMode::Readwrite)
            .map_err(|e| describe(&e))?;
        let tx = Open::new(open, tx);
        let tx = &tx.tx;
        let store = tx.object_store(STORE).map_err(|e| describe(&e))?;
        let leaving = JsValue::from_str(&crate::cat(&[key, LEAVING]));
        let key = JsValue::from_str(key);
        // Nothing but IndexedDB requests is awaited until the put: a foreign await would let
        // the transaction commit under us.
        let mut merged = conv.clone();
        let mut left = false;
        for k in [&key, &leaving] {
            let req = store.get(k).map_err(|e| describe(&e))?;
            if let Some(rec) = done(&req).await?.as_string().and_then(|s| parse(&s)) {
                merged.apply_cache(&rec);
                left |= k == &leaving;
            }
        }
        let json = codec::cache_record_json(&merged.to_cache_bounded(KEEP));
        let req = store
            .put_with_key(&JsValue::from_str(&json), &key)
            .map_err(|e| describe(&e))?;
        if left {
            store.delete(&leaving).map_err(|e| describe(&e))?;
        }
        done(&req).await?;
        committed(tx).await
    }
}

impl Storage {
    /// Writes `conv` at once, without reading what is stored: for `pagehide`, when nothing
    /// awaited would run any more. It goes to the leaving page's own record, never over the
    /// joined one, which may hold what other tabs showed and this one missed.
    pub(crate) fn put_now(&self, conv: &Conversation) -> Result<(), String> {
        let Storage::IndexedDb { db, key, open } = self else {
            return Ok(());
        };
        // What is still open would hold this write back until the connection closes with the
        // page, and the write with it. (A transaction already committing cannot be aborted,
        // and does not hold anything back for long.)
        for tx in open.borrow_mut().drain(..) {
            let _ = tx.abort();
        }
        let tx = db
            .transaction_with_str_and_mode(STORE, IdbTransactionMode::Readwrite)
            .map_err(|e| describe(&e))?;
        let store = tx.object_store(STORE).map_err(|e| describe(&e))?;
        let json = codec::cache_record_json(&conv.to_cache_bounded(KEEP));
        store
            .put_with_key(
                &JsValue::from_str(&json),
                &JsValue::from_str(&crate::cat(&[key, LEAVING])),
            )
            .map_err(|e| describe(&e))?;
        // Commit now rather than when the event loop idles: the page may not get there.
        // (`IDBTransaction.commit`, called by name: web-sys marks its binding deprecated.)
        if let Some(commit) = Reflect::get(&tx, &JsValue::from_str("commit"))
            .ok()
            .and_then(|f| f.dyn_into::<js_sys::Function>().ok())
        {
            commit.call0(&tx).map_err(|e| describe(&e))?;
        }
        Ok(())
    }
}

fn parse(text: &str) -> Option<CacheRecord> {
    // A record of another format version is dropped, not misread.
    json::read(text, codec::cache_record)
}
