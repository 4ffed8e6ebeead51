//! [`crate::codec`] on browser values: the browser parses the JSON (`JSON.parse`), the codec
//! walks the result.

use js_sys::{Array, Reflect};
use wasm_bindgen::{JsCast, JsValue};

use crate::codec::Value;

impl Value for JsValue {
    fn get(&self, key: &str) -> Option<Self> {
        if !self.is_object() {
            return None;
        }
        Reflect::get(self, &JsValue::from_str(key))
            .ok()
            .filter(|v| !v.is_undefined() && !v.is_null())
    }

    fn string(&self) -> Option<String> {
        self.as_string()
    }

    fn number(&self) -> Option<f64> {
        self.as_f64()
    }

    fn boolean(&self) -> Option<bool> {
        self.as_bool()
    }

    fn items(&self) -> Option<Vec<Self>> {
        Array::is_array(self).then(|| self.unchecked_ref::<Array>().iter().collect())
    }

    fn json(&self) -> String {
        js_sys::JSON::stringify(self)
            .ok()
            .and_then(|s| s.as_string())
            .unwrap_or_else(|| "null".to_owned())
    }
}

/// Parses `text` and reads it with `read`; `None` when either fails.
pub(crate) fn read<T>(text: &str, read: fn(&JsValue) -> Option<T>) -> Option<T> {
    read(&parse(text)?)
}

/// `JSON.parse(text)`; `None` when it throws.
pub(crate) fn parse(text: &str) -> Option<JsValue> {
    js_sys::JSON::parse(text).ok()
}
