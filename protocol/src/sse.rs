//! `text/event-stream` framing: the server's encoder and a spec-following incremental decoder
//! (for native clients, tests and benchmarks; browsers use their own `EventSource`).

/// Encodes one frame. `id: None` writes no `id:` line at all, so the browser's `lastEventId` stays
/// where it was (an empty `id:` would reset it).
pub fn encode(id: Option<&str>, event: &str, data: &str) -> String {
    // Exactly the length written, so the frame is one allocation of its own size: the server
    // keeps recent frames in memory, and a buffer grown by doubling would cost it up to twice.
    let lines = 1 + data.bytes().filter(|&b| b == b'\n').count();
    // Each line of `data` loses its `\n` separator and gains `data: ` and a `\n`; a blank line
    // ends the frame.
    let len = id.map_or(0, |id| "id: \n".len() + id.len())
        + "event: \n".len()
        + event.len()
        + (data.len() - (lines - 1))
        + lines * "data: \n".len()
        + 1;
    let mut out = String::with_capacity(len);
    if let Some(id) = id {
        out.push_str("id: ");
        out.push_str(id);
        out.push('\n');
    }
    out.push_str("event: ");
    out.push_str(event);
    out.push('\n');
    for line in data.split('\n') {
        out.push_str("data: ");
        out.push_str(line);
        out.push('\n');
    }
    out.push('\n');
    out
}

/// A comment frame: ignored by clients, keeps proxies from timing the stream out.
pub fn comment(text: &str) -> String {
    format!(": {text}\n\n")
}

/// One dispatched event.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Frame {
    /// The `id:` of this frame, if it had one.
    pub id: Option<String>,
    /// The `event:` name (`message` when absent).
    pub event: String,
    pub data: String,
}

/// Incremental decoder: feed it chunks as they arrive, take the frames that completed.
#[derive(Debug, Default)]
pub struct Decoder {
    buf: String,
    id: Option<String>,
    event: Option<String>,
    data: Option<String>,
    /// The stream's last event id, as a browser would track it.
    pub last_event_id: Option<String>,
    /// The last `retry:` value in milliseconds.
    pub retry_ms: Option<u64>,
    /// A field name read as a frame of that event (see [`Decoder::with_field_as_event`]).
    field_as_event: Option<&'static str>,
}

impl Decoder {
    pub fn new() -> Self {
        Self::default()
    }

    /// A decoder that also reads a line of the non-standard field `name` (`name: value`) as
    /// `event: name` with `value` as a data line. llama.cpp's server writes an error inside a
    /// stream as `error: {json}` where `data:` lines were, which a spec-following parser (and
    /// a browser) ignores without a trace.
    pub fn with_field_as_event(name: &'static str) -> Self {
        Decoder {
            field_as_event: Some(name),
            ..Self::default()
        }
    }

    /// Feeds a chunk; returns every frame it completed.
    pub fn feed(&mut self, chunk: &str) -> Vec<Frame> {
        self.buf.push_str(chunk);
        let mut frames = Vec::new();
        while let Some(pos) = self.buf.find(['\n', '\r']) {
            let mut line: String = self.buf.drain(..pos).collect();
            // Consume the terminator: \n, \r, or \r\n.
            let term = self.buf.remove(0);
            if term == '\r' && self.buf.starts_with('\n') {
                self.buf.remove(0);
            } else if term == '\r' && self.buf.is_empty() {
                // A lone \r at the end of a chunk may be half of \r\n: wait for the next chunk.
                self.buf.push('\r');
                self.buf.insert_str(0, &line);
                line.clear();
                break;
            }
            if let Some(frame) = self.line(&line) {
                frames.push(frame);
            }
        }
        frames
    }

    fn line(&mut self, line: &str) -> Option<Frame> {
        if line.is_empty() {
            let data = self.data.take();
            let event = self.event.take();
            let id = self.id.take();
            if let Some(id) = &id {
                self.last_event_id = Some(id.clone());
            }
            return data.map(|data| Frame {
                id,
                event: event.unwrap_or_else(|| "message".to_string()),
                data,
            });
        }
        if line.starts_with(':') {
            return None;
        }
        let (field, value) = match line.split_once(':') {
            Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
            None => (line, ""),
        };
        if Some(field) == self.field_as_event {
            self.event = Some(field.to_string());
            self.push_data(value);
            return None;
        }
        match field {
            "data" => self.push_data(value),
            "event" => self.event = Some(value.to_string()),
            "id" if !value.contains('\0') => self.id = Some(value.to_string()),
            "retry" if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) => {
                if let Ok(ms) = value.parse() {
                    self.retry_ms = Some(ms);
                }
            }
            _ => {}
        }
        None
    }

    fn push_data(&mut self, value: &str) {
        match &mut self.data {
            Some(d) => {
                d.push('\n');
                d.push_str(value);
            }
            None => self.data = Some(value.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encoding_allocates_exactly_its_length() {
        for (id, event, data) in [
            (Some("e-1"), "response_delta", r#"{"delta":"x"}"#),
            (None, "snapshot", ""),
            (Some(""), "a", "line1\nline2\n\nline4"),
            (None, "b", "\n"),
        ] {
            let out = encode(id, event, data);
            assert_eq!(out.capacity(), out.len(), "{out:?}");
        }
    }

    #[test]
    fn encodes_and_decodes() {
        let mut d = Decoder::new();
        let a = encode(Some("e-1"), "thinking", "{\"a\":1}");
        let b = encode(None, "snapshot", "line1\nline2");
        let wire = format!("{a}{}{b}", comment("hb"));
        // Feed byte by byte to exercise chunk boundaries.
        let mut frames = Vec::new();
        for ch in wire.chars() {
            frames.extend(d.feed(&ch.to_string()));
        }
        assert_eq!(
            frames,
            vec![
                Frame {
                    id: Some("e-1".into()),
                    event: "thinking".into(),
                    data: "{\"a\":1}".into()
                },
                Frame {
                    id: None,
                    event: "snapshot".into(),
                    data: "line1\nline2".into()
                },
            ]
        );
        assert_eq!(d.last_event_id.as_deref(), Some("e-1"));
    }

    #[test]
    fn a_field_can_be_read_as_an_event() {
        let wire = "data: {\"a\":1}\n\nerror: {\"code\":500}\n\ndata: [DONE]\n\n";
        let frame = |event: &str, data: &str| Frame {
            id: None,
            event: event.into(),
            data: data.into(),
        };
        // Spec-following: the `error` line is an unknown field, and its frame has no data.
        assert_eq!(
            Decoder::new().feed(wire),
            vec![frame("message", "{\"a\":1}"), frame("message", "[DONE]")]
        );
        let mut d = Decoder::with_field_as_event("error");
        let mut frames = Vec::new();
        for ch in wire.chars() {
            frames.extend(d.feed(&ch.to_string()));
        }
        assert_eq!(
            frames,
            vec![
                frame("message", "{\"a\":1}"),
                frame("error", "{\"code\":500}"),
                frame("message", "[DONE]"),
            ]
        );
    }

    #[test]
    fn crlf_and_retry() {
        let mut d = Decoder::new();
        let mut frames = d.feed("retry: 1000\r\n\r");
        frames.extend(d.feed("\nid: x-2\r\ndata: hi\r\n\r\n"));
        assert_eq!(d.retry_ms, Some(1000));
        assert_eq!(frames.len(), 1);
        assert_eq!(frames[0].data, "hi");
        assert_eq!(frames[0].event, "message");
    }
}
