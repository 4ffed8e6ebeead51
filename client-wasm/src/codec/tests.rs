//! What the codec's tests share: [`Value`] over serde_json's values, and checks of a reader
//! (and a writer) against serde's derives; and the writer's own tests. The formats' tests are
//! beside them (`wire/tests.rs`, `local/tests.rs`).

use proptest::prelude::*;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{json, Value as Json};

use super::*;

impl Value for Json {
    fn get(&self, key: &str) -> Option<Self> {
        self.as_object()?.get(key).filter(|v| !v.is_null()).cloned()
    }
    fn string(&self) -> Option<String> {
        self.as_str().map(str::to_owned)
    }
    fn number(&self) -> Option<f64> {
        self.as_f64()
    }
    fn boolean(&self) -> Option<bool> {
        self.as_bool()
    }
    fn items(&self) -> Option<Vec<Self>> {
        self.as_array().cloned()
    }
    fn json(&self) -> String {
        self.to_string()
    }
}

/// `read` reads what serde writes, and (when given) `write` writes what serde reads.
pub(super) fn same<T>(x: &T, read: fn(&Json) -> Option<T>, write: Option<fn(&T) -> String>)
where
    T: Serialize + DeserializeOwned + PartialEq + std::fmt::Debug,
{
    let v = serde_json::to_value(x).expect("serde writes it");
    assert_eq!(read(&v).as_ref(), Some(x), "reading {v}");
    if let Some(write) = write {
        let text = write(x);
        let parsed: Json = serde_json::from_str(&text).expect("valid JSON");
        assert_eq!(parsed, v, "writing {x:?}");
        let back: T = serde_json::from_str(&text).expect("serde reads it");
        assert_eq!(&back, x);
        assert_eq!(read(&parsed).as_ref(), Some(x));
    }
}

pub(super) fn tricky() -> Vec<String> {
    vec![
        String::new(),
        "plain".into(),
        "quote \" backslash \\ slash /".into(),
        "lines\nand\ttabs\r".into(),
        "\u{0}\u{1}\u{1f}\u{7f}".into(),
        "héllo wörld 💬 \u{2028}\u{2029}".into(),
    ]
}

#[test]
fn integers_and_strings_are_written_exactly() {
    for n in [0, 1, -1, 9, 10, 123_456_789, i64::MAX, i64::MIN] {
        let mut out = String::new();
        write_int(&mut out, n);
        assert_eq!(out, n.to_string());
    }
    for s in tricky() {
        let mut out = String::new();
        write_str(&mut out, &s);
        assert_eq!(serde_json::from_str::<String>(&out).ok(), Some(s));
    }
}

proptest! {
    #[test]
    fn any_string_survives(s in any::<String>()) {
        let mut out = String::new();
        write_str(&mut out, &s);
        prop_assert_eq!(serde_json::from_str::<String>(&out).ok(), Some(s));
    }
}

/// `v` with one member (at any depth; of an array, its first element's) replaced by `[[]]`, a
/// value of no type the codec reads but raw JSON; and `v` with one member removed. Each with
/// its path, and a JSON serde may read the same instead of the mutation: for a removed array,
/// an empty one (the codec reads most missing arrays as empty, where serde fails unless the
/// field has a default); for removed raw JSON (a tool's input, an answer), `null`, as the codec
/// reads it. Raw JSON is not walked into.
fn mutations(v: &Json) -> Vec<(String, Json, Json)> {
    let mut out = Vec::new();
    match v {
        Json::Object(members) => {
            for (key, child) in members {
                let mut bad = v.clone();
                bad[key.as_str()] = json!([[]]);
                out.push((format!("{key}: [[]]"), bad.clone(), bad));
                let mut gone = v.clone();
                gone.as_object_mut().map(|o| o.remove(key));
                let mut expected = gone.clone();
                let raw = key == "input" || key == "answer";
                if child.is_array() {
                    expected[key.as_str()] = json!([]);
                } else if raw {
                    expected[key.as_str()] = Json::Null;
                }
                out.push((format!("{key} removed"), gone, expected));
                if raw {
                    continue;
                }
                for (path, m, e) in mutations(child) {
                    let mut inner = v.clone();
                    inner[key.as_str()] = m;
                    let mut expected = v.clone();
                    expected[key.as_str()] = e;
                    out.push((format!("{key}.{path}"), inner, expected));
                }
            }
        }
        Json::Array(items) if !items.is_empty() => {
            for (path, m, e) in mutations(&items[0]) {
                let mut inner = v.clone();
                inner[0] = m;
                let mut expected = v.clone();
                expected[0] = e;
                out.push((format!("[0].{path}"), inner, expected));
            }
        }
        _ => {}
    }
    out
}

/// Every mutation of `x`'s JSON reads as serde reads it: nothing where serde fails, the same
/// value where it succeeds (a field of the wrong type, at any depth, fails the whole read; a
/// missing optional one reads as absent).
pub(super) fn fails_as_serde_fails<T>(x: &T, read: fn(&Json) -> Option<T>)
where
    T: Serialize + DeserializeOwned + PartialEq + std::fmt::Debug,
{
    let v = serde_json::to_value(x).expect("serde writes it");
    for (path, m, alt) in mutations(&v) {
        let got = read(&m);
        let serde = serde_json::from_value::<T>(m).ok();
        if got != serde {
            let alt = serde_json::from_value::<T>(alt).ok();
            assert_eq!(got, alt, "{path} in {v}");
        }
    }
}
