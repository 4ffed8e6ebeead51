//! The app's credentials: `getToken()` (optional) is asked once for a token, which every request
//! sends as `Authorization: Bearer` and the stream as `access_token`, and asked again when the
//! server refuses it (`401`) or ends a stream with `token_expired`.

use std::cell::RefCell;

use js_sys::{Function, Promise};
use wasm_bindgen::{JsCast, JsValue};
use wasm_bindgen_futures::JsFuture;

pub(crate) struct Auth {
    get_token: Function,
    token: RefCell<Option<String>>,
}

impl Auth {
    pub(crate) fn new(get_token: Function) -> Auth {
        Auth {
            get_token,
            token: RefCell::new(None),
        }
    }

    /// The token in use, if one was got.
    pub(crate) fn cached(&self) -> Option<String> {
        self.token.borrow().clone()
    }

    /// Asks `getToken` for a fresh token; `None` when it threw, rejected or gave no string.
    pub(crate) async fn renew(&self) -> Option<String> {
        let got = self.get_token.call0(&JsValue::NULL).ok()?;
        let got = match got.dyn_into::<Promise>() {
            Ok(p) => JsFuture::from(p).await.ok()?,
            Err(v) => v,
        };
        let token = got.as_string().filter(|t| !t.is_empty())?;
        *self.token.borrow_mut() = Some(token.clone());
        Some(token)
    }
}
