//! The JSON the SDK reads and writes, by hand instead of through serde's derives (which, with
//! serde_json, were most of the package's size). In the browser, JSON is parsed by the browser
//! (`JSON.parse`) and [`Value`] walks the result; a small writer produces the cache record, the
//! tab messages and the request bodies. This module holds the reader and the writer every
//! format shares; [`wire`] reads and writes the protocol's types, [`local`] the SDK's own.
//!
//! The shapes are exactly those of the serde derives on the same types (the native tests check
//! both directions against serde_json), so the server's answers read the same, and a cache or a
//! tab message written by an SDK built with serde reads the same too.
//!
//! Readers return `None` for anything that does not have the expected shape: a missing required
//! field, a field of the wrong type, an unknown enum value. Unknown fields are ignored, a `null`
//! reads as a missing field, and a missing array as an empty one.

use turnstream_protocol::RawJson;

pub mod local;
pub mod presence;
pub mod wire;

pub use local::{
    cache_record, cache_record_json, relay, relay_json, tab_message, tab_message_json,
};
pub use wire::{
    attachment, cancel_response, error_body, event, history, input_given, input_request_json,
    message, post_request_json, post_response, regenerate_request_json, regenerate_response,
    resync, resync_reason_name, snapshot, snapshot_placed, switch_request_json, tool_call,
    tool_status_name, turn_info, turn_request, turn_state_name,
};

/// A parsed JSON value: a `JsValue` from `JSON.parse` in the browser, `serde_json::Value` in the
/// native tests.
pub trait Value: Sized {
    /// The member `key` of an object; `None` when absent, `null`, or `self` is not an object.
    fn get(&self, key: &str) -> Option<Self>;
    fn string(&self) -> Option<String>;
    fn number(&self) -> Option<f64>;
    fn boolean(&self) -> Option<bool>;
    /// The elements of an array.
    fn items(&self) -> Option<Vec<Self>>;
    /// The value as compact JSON text (`JSON.stringify`).
    fn json(&self) -> String;
}

// ----- reading: fields -----

/// Reads the fields of one object. Each reader returns the field's value, or a placeholder
/// when the field is missing or has the wrong shape, and then marks the read as failed;
/// [`Fields::done`] hands out the value built from them only when none failed.
///
/// No early return per field: with `?` after each one, every reader carried a branch and a
/// path dropping the fields read so far for each field (most of the codec's code), where now
/// a field is one call and a failed read drops the built value once.
struct Fields<'v, V> {
    v: &'v V,
    ok: bool,
}

impl<'v, V: Value> Fields<'v, V> {
    fn new(v: &'v V) -> Self {
        Fields { v, ok: true }
    }

    /// The value built from the fields read, `None` when any of them failed.
    fn done<T>(self, value: T) -> Option<T> {
        self.ok.then_some(value)
    }

    /// `x`; the read is marked failed when it is false. Not generic over the field's type, as
    /// a helper taking the field's `Option` would be (one copy per type).
    fn seen(&mut self, x: bool) -> bool {
        self.ok &= x;
        x
    }

    /// An optional member: `None` when missing (or `null`), failed when not readable by `item`.
    fn opt<T>(&mut self, key: &str, item: fn(&V) -> Option<T>) -> Option<T> {
        let x = item(&self.v.get(key)?);
        self.seen(x.is_some());
        x
    }

    /// A required member; `or` stands in for it when it is missing or not readable.
    fn req<T>(&mut self, key: &str, item: fn(&V) -> Option<T>, or: T) -> T {
        let x = self.v.get(key).and_then(|x| item(&x));
        match x {
            Some(x) => x,
            None => {
                self.seen(false);
                or
            }
        }
    }

    fn str(&mut self, key: &str) -> String {
        self.req(key, Value::string, String::new())
    }

    /// A string that defaults to empty when missing.
    fn str_or_empty(&mut self, key: &str) -> String {
        self.opt(key, Value::string).unwrap_or_default()
    }

    fn opt_str(&mut self, key: &str) -> Option<String> {
        self.opt(key, Value::string)
    }

    fn int(&mut self, key: &str) -> i64 {
        self.req(key, int_of, 0)
    }

    /// A whole number in `0..=max`.
    fn count(&mut self, key: &str, max: i64) -> i64 {
        let n = self.int(key);
        self.seen((0..=max).contains(&n));
        n
    }

    fn opt_int(&mut self, key: &str) -> Option<i64> {
        self.opt(key, int_of)
    }

    fn bool(&mut self, key: &str) -> bool {
        self.req(key, Value::boolean, false)
    }

    /// A boolean that defaults to false when missing.
    fn bool_or_false(&mut self, key: &str) -> bool {
        self.opt(key, Value::boolean).unwrap_or_default()
    }

    /// An array; missing reads as empty. On a failed element the elements before it are
    /// returned: the read has failed, and what it built is dropped.
    fn list<T>(&mut self, key: &str, item: fn(&V) -> Option<T>) -> Vec<T> {
        let mut out = Vec::new();
        if let Some(x) = self.v.get(key) {
            let all = each(&x, &mut |e: &V| item(e).map(|t| out.push(t)).is_some());
            self.seen(all);
        }
        out
    }

    /// An array that must be present.
    fn items<T>(&mut self, key: &str, item: fn(&V) -> Option<T>) -> Vec<T> {
        self.seen(self.v.get(key).is_some());
        self.list(key, item)
    }

    fn strings(&mut self, key: &str) -> Vec<String> {
        self.items(key, Value::string)
    }

    /// An enum, read by `parse` (failed for a name it does not know; `or` is a placeholder).
    fn variant<T>(&mut self, key: &str, parse: fn(&str) -> Option<T>, or: T) -> T {
        let x = self
            .v
            .get(key)
            .and_then(|x| x.string())
            .and_then(|s| parse(&s));
        match x {
            Some(x) => x,
            None => {
                self.seen(false);
                or
            }
        }
    }

    /// Any JSON value, as its text; missing reads as `null`.
    fn raw(&self, key: &str) -> RawJson {
        self.opt_raw(key).unwrap_or_else(RawJson::null)
    }

    /// Any JSON value, as its text; `None` when missing.
    fn opt_raw(&self, key: &str) -> Option<RawJson> {
        self.v.get(key).map(|x| RawJson::trusted(x.json()))
    }

    /// Any JSON value that must be present.
    fn req_raw(&mut self, key: &str) -> RawJson {
        let x = self.opt_raw(key);
        self.seen(x.is_some());
        x.unwrap_or_else(RawJson::null)
    }
}

/// A whole number that a JS number holds exactly (below 2^53 in magnitude: from there on, a
/// parsed number may have been rounded).
fn int_of<V: Value>(v: &V) -> Option<i64> {
    let n = v.number()?;
    (n == n.trunc() && n.abs() < 9_007_199_254_740_992.0).then_some(n as i64)
}

/// The elements of an array, each read by `item`. A plain loop: `collect` into an `Option`
/// brings a family of iterator adapters into the package for each element type.
fn items_of<V: Value, T>(v: &V, item: fn(&V) -> Option<T>) -> Option<Vec<T>> {
    let mut out = Vec::new();
    each(v, &mut |x: &V| item(x).map(|t| out.push(t)).is_some()).then_some(out)
}

/// Calls `f` on each element of the array `v` until it returns false; false when `v` is not an
/// array or `f` returned false. Not generic over the element type, unlike [`items_of`].
fn each<V: Value>(v: &V, f: &mut dyn Each<V>) -> bool {
    match v.items() {
        Some(items) => items.iter().all(|x| f.next(x)),
        None => false,
    }
}

/// What [`each`] calls: a closure (`|x: &V| ...`). A trait of its own rather than `dyn FnMut`,
/// whose vtable also holds `FnOnce::call_once`, a second copy of each closure, never called.
trait Each<V> {
    fn next(&mut self, x: &V) -> bool;
}

impl<V, F: FnMut(&V) -> bool> Each<V> for F {
    fn next(&mut self, x: &V) -> bool {
        self(x)
    }
}

fn strings_of<V: Value>(v: &V) -> Option<Vec<String>> {
    items_of(v, Value::string)
}

const U32_MAX: i64 = u32::MAX as i64;

// ----- writing -----

/// Builds one JSON object: `Obj::new(out)`, then `key`/`str`/... pairs, then `end`.
pub struct Obj<'a> {
    out: &'a mut String,
    first: bool,
}

impl<'a> Obj<'a> {
    pub fn new(out: &'a mut String) -> Self {
        out.push('{');
        Obj { out, first: true }
    }

    /// Writes `"key":` and hands out the buffer for the value.
    pub fn key(&mut self, key: &str) -> &mut String {
        if !self.first {
            self.out.push(',');
        }
        self.first = false;
        write_str(self.out, key);
        self.out.push(':');
        self.out
    }

    pub fn str(&mut self, key: &str, value: &str) -> &mut Self {
        write_str(self.key(key), value);
        self
    }

    pub fn opt_str(&mut self, key: &str, value: Option<&str>) -> &mut Self {
        match value {
            Some(s) => write_str(self.key(key), s),
            None => self.key(key).push_str("null"),
        }
        self
    }

    pub fn int(&mut self, key: &str, value: i64) -> &mut Self {
        write_int(self.key(key), value);
        self
    }

    pub fn opt_int(&mut self, key: &str, value: Option<i64>) -> &mut Self {
        match value {
            Some(n) => write_int(self.key(key), n),
            None => self.key(key).push_str("null"),
        }
        self
    }

    pub fn bool(&mut self, key: &str, value: bool) -> &mut Self {
        self.key(key).push_str(if value { "true" } else { "false" });
        self
    }

    pub fn list<T>(&mut self, key: &str, items: &[T], write: fn(&mut String, &T)) -> &mut Self {
        let out = self.key(key);
        out.push('[');
        for (i, item) in items.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            write(out, item);
        }
        out.push(']');
        self
    }

    pub fn end(&mut self) {
        self.out.push('}');
    }
}

/// A JSON string literal.
pub fn write_str(out: &mut String, s: &str) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let b = c as usize;
                out.push_str("\\u00");
                out.push(char::from(HEX[b >> 4]));
                out.push(char::from(HEX[b & 15]));
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// A decimal integer (without core::fmt).
pub fn write_int(out: &mut String, n: i64) {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    let mut m = n.unsigned_abs();
    loop {
        i -= 1;
        digits[i] = b'0' + (m % 10) as u8;
        m /= 10;
        if m == 0 {
            break;
        }
    }
    if n < 0 {
        out.push('-');
    }
    for &d in &digits[i..] {
        out.push(char::from(d));
    }
}

#[allow(clippy::ptr_arg)] // `Obj::list` hands each item of a `Vec<String>` as `&String`.
fn write_strings(out: &mut String, s: &String) {
    write_str(out, s);
}

#[cfg(all(test, not(target_arch = "wasm32")))]
mod tests;
