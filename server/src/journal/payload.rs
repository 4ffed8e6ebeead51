//! The payload cap: no stored event is larger than [`MAX_EVENT_PAYLOAD_BYTES`]. Oversized string
//! fields keep a bounded preview and the event says which field was cut and how big it was.
//! A message's attachments are never cut (a URL cut short names nothing): their limits leave
//! room for them whole, and the message's text is cut instead.

use serde_json::Value;
use turnstream_protocol::limits::{MAX_EVENT_PAYLOAD_BYTES, TRUNCATED_PREVIEW_BYTES};
use turnstream_protocol::Truncation;

/// Room kept for the envelope (id, session, turn, timestamp) and the truncation list, so the
/// whole event a client receives fits the cap, not only its kind-specific part.
const ENVELOPE_ROOM: usize = 2 * 1024;

/// The field whose strings are never cut: a message's attachments.
const UNCUT: &str = "attachments";

/// Largest kind-specific part of an event, as JSON.
pub const BODY_LIMIT: usize = MAX_EVENT_PAYLOAD_BYTES - ENVELOPE_ROOM;

/// Cuts the largest string fields of `value` until its JSON fits the cap. Returns what was cut.
pub fn cap(value: &mut Value) -> Vec<Truncation> {
    cap_to(value, BODY_LIMIT, TRUNCATED_PREVIEW_BYTES)
}

fn cap_to(value: &mut Value, max: usize, preview: usize) -> Vec<Truncation> {
    let mut cuts = Vec::new();
    // Each round cuts the largest remaining string; a payload has few fields, so few rounds.
    while encoded_len(value) > max {
        let mut largest: Option<(String, usize)> = None;
        find_largest(value, String::new(), &mut largest, preview);
        let Some((path, size)) = largest else { break };
        if let Some(Value::String(s)) = pointer_mut(value, &path) {
            let cut = floor_char_boundary(s, preview);
            s.truncate(cut);
        }
        cuts.push(Truncation {
            field: path,
            original_size: size,
        });
    }
    cuts
}

fn encoded_len(value: &Value) -> usize {
    serde_json::to_vec(value)
        .map(|v| v.len())
        .unwrap_or(usize::MAX)
}

fn find_largest(value: &Value, path: String, best: &mut Option<(String, usize)>, preview: usize) {
    match value {
        Value::String(s)
            if s.len() > preview && best.as_ref().is_none_or(|(_, n)| s.len() > *n) =>
        {
            *best = Some((path, s.len()));
        }
        Value::Object(map) => {
            for (k, v) in map.iter().filter(|(k, _)| k.as_str() != UNCUT) {
                let p = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                };
                find_largest(v, p, best, preview);
            }
        }
        Value::Array(items) => {
            for (i, v) in items.iter().enumerate() {
                let p = if path.is_empty() {
                    i.to_string()
                } else {
                    format!("{path}.{i}")
                };
                find_largest(v, p, best, preview);
            }
        }
        _ => {}
    }
}

fn pointer_mut<'a>(value: &'a mut Value, dotted: &str) -> Option<&'a mut Value> {
    let mut cur = value;
    for part in dotted.split('.') {
        cur = match cur {
            Value::Object(map) => map.get_mut(part)?,
            Value::Array(items) => items.get_mut(part.parse::<usize>().ok()?)?,
            _ => return None,
        };
    }
    Some(cur)
}

/// The largest index `<= at` that is a char boundary of `s`.
pub fn floor_char_boundary(s: &str, at: usize) -> usize {
    if at >= s.len() {
        return s.len();
    }
    let mut i = at;
    while !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn small_payloads_are_untouched() {
        let mut v = json!({"kind": "tool", "output_preview": "x".repeat(1000)});
        let before = v.clone();
        assert!(cap(&mut v).is_empty());
        assert_eq!(v, before);
    }

    #[test]
    fn cuts_the_oversized_field_with_metadata() {
        let mut v = json!({"kind": "tool", "name": "n", "output_preview": "é".repeat(200_000)});
        let cuts = cap(&mut v);
        assert_eq!(cuts.len(), 1);
        assert_eq!(cuts[0].field, "output_preview");
        assert_eq!(cuts[0].original_size, 400_000);
        let s = v["output_preview"].as_str().unwrap_or_default();
        assert!(s.len() <= TRUNCATED_PREVIEW_BYTES && s.len() > TRUNCATED_PREVIEW_BYTES - 4);
        assert!(encoded_len(&v) <= MAX_EVENT_PAYLOAD_BYTES - ENVELOPE_ROOM);
    }

    #[test]
    fn cuts_nested_fields_largest_first() {
        let mut v =
            json!({"message": {"content": "a".repeat(300_000)}, "other": "b".repeat(10_000)});
        let cuts = cap(&mut v);
        assert_eq!(cuts.len(), 1);
        assert_eq!(cuts[0].field, "message.content");
        assert_eq!(v["other"].as_str().map(str::len), Some(10_000));
    }

    #[test]
    fn attachments_stay_whole_and_the_text_is_cut() {
        let url = format!("data:image/png;base64,{}", "A".repeat(40_000));
        let mut v = json!({"message": {
            "content": "\u{1}".repeat(40_000),
            "attachments": [{"url": url, "media_type": "image/png"}],
        }});
        let cuts = cap(&mut v);
        assert_eq!(cuts.len(), 1);
        assert_eq!(cuts[0].field, "message.content");
        assert_eq!(v["message"]["attachments"][0]["url"], url);
        assert!(encoded_len(&v) <= BODY_LIMIT);
    }

    proptest::proptest! {
        #[test]
        fn always_fits(sizes in proptest::collection::vec(0usize..400_000, 1..5)) {
            let mut map = serde_json::Map::new();
            for (i, n) in sizes.iter().enumerate() {
                map.insert(format!("f{i}"), Value::String("z".repeat(*n)));
            }
            let mut v = Value::Object(map);
            cap(&mut v);
            proptest::prop_assert!(encoded_len(&v) <= MAX_EVENT_PAYLOAD_BYTES - ENVELOPE_ROOM);
        }
    }
}
