//! A lean `text/event-stream` splitter for the bench's clients.
//!
//! The protocol crate's `Decoder` is spec-complete (CR, CRLF, split characters) but drains its
//! buffer line by line, which costs O(n²) on the megabyte chunks of a big replay; here that cost
//! would be billed to the server under test. Every system measured here frames with `\n` only,
//! so this splitter scans for blank lines and parses only the fields the bench needs.

/// One dispatched event.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Frame {
    pub id: Option<String>,
    pub event: Option<String>,
    pub data: String,
    /// Stream bytes consumed up to and including this frame (resumable-stream resumes by
    /// character count, and its harness sends ASCII only).
    pub end_offset: u64,
}

#[derive(Debug, Default)]
pub struct Splitter {
    buf: Vec<u8>,
    /// Start of the bytes not yet returned as a frame. Frames are cut by moving this index, and
    /// the buffer is compacted only once it holds no complete frame, so a big chunk costs O(n).
    pos: usize,
    /// Where the next scan for a blank line starts (bytes before it were already scanned).
    scan: usize,
    /// Bytes dropped from the front of `buf` so far.
    dropped: u64,
}

impl Splitter {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn push(&mut self, chunk: &[u8]) {
        self.buf.extend_from_slice(chunk);
    }

    /// The next complete frame, if any. Comment-only blocks (heartbeats) yield frames with empty
    /// data, so callers can still track byte positions. When there is none, the consumed bytes
    /// are dropped and the scan position remembered.
    /// Stream bytes consumed by the frames returned so far.
    pub fn consumed(&self) -> u64 {
        self.dropped + self.pos as u64
    }

    pub fn next_frame(&mut self) -> Option<Frame> {
        let start = self
            .scan
            .saturating_sub(1)
            .max(self.pos)
            .min(self.buf.len());
        match memchr::memmem::find(&self.buf[start..], b"\n\n") {
            Some(rel) => {
                let end = start + rel + 2;
                let mut frame = parse_block(&self.buf[self.pos..end]);
                self.pos = end;
                self.scan = end;
                frame.end_offset = self.dropped + end as u64;
                Some(frame)
            }
            None => {
                self.buf.drain(..self.pos);
                self.dropped += self.pos as u64;
                self.pos = 0;
                self.scan = self.buf.len();
                None
            }
        }
    }
}

/// Parses one frame (the reader's cost per event, the same for every system measured: a line
/// scan, one string per field present, no copy of the block itself).
fn parse_block(block: &[u8]) -> Frame {
    let mut frame = Frame::default();
    let mut data: Option<String> = None;
    for line in block.split(|b| *b == b'\n') {
        if line.is_empty() || line[0] == b':' {
            continue;
        }
        let (field, value) = match memchr::memchr(b':', line) {
            Some(i) => {
                let v = &line[i + 1..];
                (&line[..i], v.strip_prefix(b" ").unwrap_or(v))
            }
            None => (line, &b""[..]),
        };
        let value = String::from_utf8_lossy(value);
        match field {
            b"id" => frame.id = Some(value.into_owned()),
            b"event" => frame.event = Some(value.into_owned()),
            b"data" => match &mut data {
                Some(d) => {
                    d.push('\n');
                    d.push_str(&value);
                }
                None => data = Some(value.into_owned()),
            },
            _ => {}
        }
    }
    frame.data = data.unwrap_or_default();
    frame
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_frames_across_chunks() {
        let wire = "retry: 1000\n\nid: e-1\nevent: x\ndata: {\"a\":\"@T123@\"}\n\n: hb\n\nid: e-2\ndata: a\ndata: b\n\n";
        let mut s = Splitter::new();
        let mut frames = Vec::new();
        for chunk in wire.as_bytes().chunks(5) {
            s.push(chunk);
            while let Some(f) = s.next_frame() {
                frames.push(f);
            }
        }
        let with_data: Vec<_> = frames.iter().filter(|f| !f.data.is_empty()).collect();
        assert_eq!(with_data.len(), 2);
        assert_eq!(with_data[0].id.as_deref(), Some("e-1"));
        assert_eq!(with_data[0].data, "{\"a\":\"@T123@\"}");
        assert_eq!(with_data[1].data, "a\nb");
        assert_eq!(frames.last().map(|f| f.end_offset), Some(wire.len() as u64));
    }
}
