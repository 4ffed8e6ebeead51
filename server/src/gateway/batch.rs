//! Frames joined into writes: a stream sends what it has queued in writes of up to
//! [`BATCH_BYTES`], so a burst or a catch-up costs a syscall per 64 KB rather than one per event.

use std::sync::Arc;

use bytes::{Bytes, BytesMut};

use crate::live::hub::{Frame, TailReplay};

/// Largest write a stream makes from several frames.
pub(super) const BATCH_BYTES: usize = 64 * 1024;

/// Frames joined into one write of up to [`BATCH_BYTES`], as they come.
#[derive(Default)]
pub(super) struct Batch {
    one: Option<Bytes>,
    many: Option<BytesMut>,
}

impl Batch {
    /// Adds a frame; returns a full batch to send, if this one filled it.
    pub(super) fn push(&mut self, frame: &Frame) -> Option<Bytes> {
        match (&mut self.many, self.one.take()) {
            (Some(buf), _) => buf.extend_from_slice(&frame.bytes),
            (None, None) => self.one = Some(frame.bytes.clone()),
            (None, Some(first)) => {
                let mut buf = BytesMut::with_capacity((first.len() + frame.bytes.len()) * 4);
                buf.extend_from_slice(&first);
                buf.extend_from_slice(&frame.bytes);
                self.many = Some(buf);
            }
        }
        if self.many.as_ref().is_some_and(|b| b.len() >= BATCH_BYTES) {
            return self.take();
        }
        None
    }

    /// What is batched, if anything; leaves the batch empty.
    pub(super) fn take(&mut self) -> Option<Bytes> {
        match self.many.take() {
            Some(buf) => Some(buf.freeze()),
            None => self.one.take(),
        }
    }
}

/// A resume's frames from the hub's replay tail, joined into one write at a time as the socket
/// takes them: the first write goes out once 64 KB are copied, not the whole catch-up, and
/// each is allocated at its final size (a [`Batch`] grows by doubling, copying again).
pub(super) struct TailWrites {
    frames: std::vec::IntoIter<Arc<Frame>>,
    /// Whether the frames reach the head as it was when taken (else the journal has more).
    pub(super) complete: bool,
}

impl TailWrites {
    pub(super) fn new(tail: TailReplay) -> TailWrites {
        TailWrites {
            frames: tail.frames.into_iter(),
            complete: tail.complete,
        }
    }

    /// The next write: the frames up to the one that reaches [`BATCH_BYTES`] (a frame alone as
    /// it is); `None` once every frame is written.
    pub(super) fn next_write(&mut self) -> Option<Bytes> {
        let mut len = 0;
        let mut n = 0;
        for frame in self.frames.as_slice() {
            len += frame.bytes.len();
            n += 1;
            if len >= BATCH_BYTES {
                break;
            }
        }
        let write = match n {
            0 => return None,
            1 => self.frames.next()?.bytes.clone(),
            _ => {
                let mut buf = BytesMut::with_capacity(len);
                for frame in self.frames.by_ref().take(n) {
                    buf.extend_from_slice(&frame.bytes);
                }
                buf.freeze()
            }
        };
        if self.frames.as_slice().is_empty() {
            // Gives the list's allocation back as soon as the last write is made.
            self.frames = Vec::new().into_iter();
        }
        Some(write)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(seq: i64, len: usize) -> Frame {
        Frame {
            seq,
            session_id: "s".into(),
            bytes: Bytes::from(vec![b'a' + (seq % 26) as u8; len]),
            at: std::time::Instant::now(),
        }
    }

    fn joined(writes: &[Bytes]) -> Vec<u8> {
        writes.iter().flat_map(|s| s.iter().copied()).collect()
    }

    #[test]
    fn batches_join_frames_in_order_and_split_when_full() {
        let mut b = Batch::default();
        assert!(b.take().is_none());
        assert!(b.push(&frame(1, 10)).is_none());
        assert_eq!(
            b.take().map(|x| x.len()),
            Some(10),
            "one frame goes out as is"
        );
        assert!(b.push(&frame(2, 3)).is_none());
        assert!(b.push(&frame(3, 3)).is_none());
        assert_eq!(b.take().as_deref(), Some(&b"cccddd"[..]));
        let mut sent = Vec::new();
        for seq in 0..100 {
            if let Some(full) = b.push(&frame(seq, 4096)) {
                sent.push(full);
            }
        }
        sent.extend(b.take());
        assert!(sent.iter().all(|s| s.len() <= BATCH_BYTES));
        let expected: Vec<u8> = (0..100)
            .flat_map(|seq| frame(seq, 4096).bytes.to_vec())
            .collect();
        assert_eq!(joined(&sent), expected);
    }

    #[test]
    fn tail_writes_are_the_batches_a_stream_would_make_each_at_its_size() {
        // Frames of uneven sizes, some larger than a write.
        let sizes = [300, 70_000, 5, 4096, 200, 65_536, 1, 1];
        let frames: Vec<Arc<Frame>> = (0..2000)
            .map(|i| Arc::new(frame(i, sizes[i as usize % sizes.len()])))
            .collect();
        let mut batch = Batch::default();
        let mut expected: Vec<Bytes> = frames.iter().filter_map(|f| batch.push(f)).collect();
        expected.extend(batch.take());
        let mut tail = TailWrites::new(TailReplay {
            frames: frames.clone(),
            complete: true,
        });
        let mut writes = Vec::new();
        while let Some(w) = tail.next_write() {
            writes.push(w);
        }
        assert_eq!(writes, expected, "the same writes, in the same order");
        assert!(tail.next_write().is_none());
        assert_eq!(
            frames.iter().map(Arc::strong_count).max(),
            Some(1),
            "every frame released once written"
        );
        let lone = Arc::new(frame(1, 10));
        let mut one = TailWrites::new(TailReplay {
            frames: vec![lone.clone()],
            complete: false,
        });
        let w = one.next_write().expect("a write");
        assert_eq!(
            w.as_ptr(),
            lone.bytes.as_ptr(),
            "a frame alone goes out as is"
        );
        assert!(!one.complete);
    }
}
