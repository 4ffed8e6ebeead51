//! A JSON value of any kind carried as its compact text (contract v1.2): tools' inputs and
//! outputs, answers.

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A JSON value of any kind (a tool's input, a client tool's output, an answer), carried as its
/// compact text: the browser SDK holds it without a JSON tree, and the server hands it on as it
/// came, key order included.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RawJson(String);

impl RawJson {
    /// `null`.
    pub fn null() -> RawJson {
        RawJson("null".to_string())
    }

    /// A value from its JSON text; `None` when the text is not one JSON value.
    pub fn parse(text: &str) -> Option<RawJson> {
        serde_json::from_str::<serde::de::IgnoredAny>(text).ok()?;
        Some(RawJson(compact(text)))
    }

    /// A value from text already known to be compact JSON (what `JSON.stringify` returns).
    pub fn trusted(text: String) -> RawJson {
        RawJson(text)
    }

    pub fn from_value(value: &serde_json::Value) -> RawJson {
        RawJson(value.to_string())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The value as a tree (`null` if the text does not parse, which `parse` rules out).
    pub fn to_value(&self) -> serde_json::Value {
        serde_json::from_str(&self.0).unwrap_or(serde_json::Value::Null)
    }

    /// Whether both hold the same value, whatever the order of their objects' keys.
    pub fn same_value(&self, other: &RawJson) -> bool {
        self.0 == other.0 || self.to_value() == other.to_value()
    }
}

/// JSON text without the whitespace between its tokens.
fn compact(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let (mut in_string, mut escaped) = (false, false);
    for c in text.chars() {
        if in_string {
            out.push(c);
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                in_string = false;
            }
        } else if !c.is_ascii_whitespace() {
            if c == '"' {
                in_string = true;
            }
            out.push(c);
        }
    }
    out
}

impl Serialize for RawJson {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match serde_json::value::RawValue::from_string(self.0.clone()) {
            Ok(raw) => raw.serialize(s),
            Err(e) => Err(serde::ser::Error::custom(e)),
        }
    }
}

impl<'de> Deserialize<'de> for RawJson {
    /// Writes the value back as compact text as it is read, keys in the order they came. (Not
    /// `RawValue`, which serde cannot read inside the tagged enums events are.)
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let mut out = String::new();
        d.deserialize_any(Writer(&mut out))?;
        Ok(RawJson(out))
    }
}

/// Writes the JSON text of the value it visits to its string.
struct Writer<'a>(&'a mut String);

/// One value, written into the string a [`Writer`] holds.
struct Nested<'a>(&'a mut String);

impl<'de> serde::de::DeserializeSeed<'de> for Nested<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(Writer(self.0))
    }
}

fn quoted(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "\"\"".to_string())
}

impl<'de> serde::de::Visitor<'de> for Writer<'_> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<(), E> {
        self.0.push_str(if v { "true" } else { "false" });
        Ok(())
    }
    fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<(), E> {
        self.0.push_str(&v.to_string());
        Ok(())
    }
    fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<(), E> {
        self.0.push_str(&v.to_string());
        Ok(())
    }
    fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<(), E> {
        // JSON has no NaN or infinity; serde_json writes them as null.
        self.0
            .push_str(&serde_json::to_string(&v).unwrap_or_else(|_| "null".to_string()));
        Ok(())
    }
    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<(), E> {
        self.0.push_str(&quoted(v));
        Ok(())
    }
    fn visit_unit<E: serde::de::Error>(self) -> Result<(), E> {
        self.0.push_str("null");
        Ok(())
    }
    fn visit_none<E: serde::de::Error>(self) -> Result<(), E> {
        self.visit_unit()
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        self.0.push('[');
        let mut first = true;
        loop {
            if !first {
                self.0.push(',');
            }
            if seq.next_element_seed(Nested(self.0))?.is_none() {
                if !first {
                    self.0.pop();
                }
                break;
            }
            first = false;
        }
        self.0.push(']');
        Ok(())
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        self.0.push('{');
        let mut first = true;
        while let Some(key) = map.next_key::<String>()? {
            if !first {
                self.0.push(',');
            }
            first = false;
            self.0.push_str(&quoted(&key));
            self.0.push(':');
            map.next_value_seed(Nested(self.0))?;
        }
        self.0.push('}');
        Ok(())
    }
}

#[cfg(feature = "openapi")]
impl utoipa::PartialSchema for RawJson {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        utoipa::openapi::schema::ObjectBuilder::new()
            .description(Some("Any JSON value."))
            .into()
    }
}

#[cfg(feature = "openapi")]
impl utoipa::ToSchema for RawJson {}
