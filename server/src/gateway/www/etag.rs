//! Strong entity tags for the files of `--www`, made from their bytes (so every node serving the
//! same files gives the same tag, whatever their modification times), and the header rules that
//! compare a request's tags with them.

use std::collections::HashMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use axum::http::{HeaderMap, HeaderValue};
use sha2::{Digest, Sha256};

/// A file changed less than this long ago may change again within one tick of its file system's
/// clock (2 s on FAT) and keep the same stamp: its tag is not remembered, but made each time.
const SETTLING: Duration = Duration::from_secs(2);

/// The tag of each file served so far, remembered while its stamp stays the same: a request
/// costs a `stat`, and a file is read again only once it changed.
#[derive(Clone, Default)]
pub(super) struct Tags {
    known: Arc<Mutex<HashMap<PathBuf, (Stamp, HeaderValue)>>>,
}

/// What changes when a file is rewritten (its size, its times) or replaced (its inode). On Unix
/// the inode's change time moves on every write, even one that sets the modification time back.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
struct Stamp {
    len: u64,
    modified: Option<SystemTime>,
    /// The inode's number and change time (seconds, nanoseconds); zero off Unix.
    inode: (u64, i64, i64),
}

impl Stamp {
    fn of(meta: &std::fs::Metadata) -> Stamp {
        #[cfg(unix)]
        let inode = {
            use std::os::unix::fs::MetadataExt;
            (meta.ino(), meta.ctime(), meta.ctime_nsec())
        };
        #[cfg(not(unix))]
        let inode = (0, 0, 0);
        Stamp {
            len: meta.len(),
            modified: meta.modified().ok(),
            inode,
        }
    }

    /// Whether, at `now`, the file has been left alone long enough for its stamp to show its
    /// next change.
    fn settled(&self, now: SystemTime) -> bool {
        let (_, secs, nanos) = self.inode;
        let changed = match (u64::try_from(secs), u32::try_from(nanos)) {
            (Ok(secs), Ok(nanos)) if secs > 0 => {
                SystemTime::UNIX_EPOCH.checked_add(Duration::new(secs, nanos))
            }
            _ => None,
        };
        let last = self.modified.max(changed);
        last.and_then(|t| now.duration_since(t).ok())
            .is_some_and(|age| age >= SETTLING)
    }
}

impl Tags {
    /// The tag of the regular file at `path`, or `None` when there is none to read (missing, a
    /// folder, unreadable: the file server answers those).
    pub(super) async fn of(&self, path: PathBuf) -> Option<HeaderValue> {
        let known = self.known.clone();
        tokio::task::spawn_blocking(move || tag_of(&known, &path, SystemTime::now()))
            .await
            .ok()
            .flatten()
    }
}

fn tag_of(
    known: &Mutex<HashMap<PathBuf, (Stamp, HeaderValue)>>,
    path: &Path,
    now: SystemTime,
) -> Option<HeaderValue> {
    let meta = std::fs::metadata(path).ok()?;
    if !meta.is_file() {
        return None;
    }
    let stamp = Stamp::of(&meta);
    if let Some((seen, tag)) = lock(known).get(path) {
        if *seen == stamp {
            return Some(tag.clone());
        }
    }
    let tag = hash_file(path).ok()?;
    // Remembered only when the file did not change while it was read. A file replaced between
    // this read and the file server's open is sent with the older tag once; the next request's
    // stamp differs, so its tag is made again: the pairing never outlives one answer.
    let after = std::fs::metadata(path).ok().map(|m| Stamp::of(&m));
    if after == Some(stamp) && stamp.settled(now) {
        lock(known).insert(path.to_path_buf(), (stamp, tag.clone()));
    }
    Some(tag)
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // The map holds finished entries only, so one left by a panicking thread is still whole.
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// `"<hex>"`: the first 128 bits of the file's SHA-256, read a chunk at a time.
fn hash_file(path: &Path) -> std::io::Result<HeaderValue> {
    let mut file = std::fs::File::open(path)?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    let digest = hasher.finalize();
    let mut tag = String::with_capacity(34);
    tag.push('"');
    for b in &digest[..16] {
        tag.push_str(&format!("{b:02x}"));
    }
    tag.push('"');
    HeaderValue::from_str(&tag).map_err(std::io::Error::other)
}

/// Whether `If-None-Match` (every line of it) names `tag`, by the weak comparison RFC 9110
/// §13.1.2 asks for (`W/` ignored), or is `*`.
pub(super) fn none_match_hits(headers: &HeaderMap, tag: &HeaderValue) -> bool {
    let ours = opaque(tag.as_bytes());
    headers
        .get_all(axum::http::header::IF_NONE_MATCH)
        .iter()
        .any(|line| {
            let line = line.as_bytes();
            if line.trim_ascii() == b"*" {
                return true;
            }
            entity_tags(line).any(|(_, theirs)| theirs == ours)
        })
}

/// Whether an `If-Range` is our `tag` itself, by the strong comparison §13.1.5 asks for. A date,
/// or a weak or other tag, does not match: the whole file is sent, which is always right.
pub(super) fn if_range_holds(value: &HeaderValue, tag: &HeaderValue) -> bool {
    let mut tags = entity_tags(value.as_bytes());
    matches!((tags.next(), tags.next()), (Some((false, theirs)), None) if theirs == opaque(tag.as_bytes()))
}

/// The quoted part of our own tag.
fn opaque(tag: &[u8]) -> &[u8] {
    tag.trim_ascii()
}

/// The `(weak, "opaque")` tags of a comma-separated list, quotes kept; a list that stops
/// parsing yields the tags before the break (a quoted tag may hold a comma, so no split).
fn entity_tags(mut s: &[u8]) -> impl Iterator<Item = (bool, &[u8])> {
    std::iter::from_fn(move || {
        s = s.trim_ascii_start();
        while let [b',', rest @ ..] = s {
            s = rest.trim_ascii_start();
        }
        let weak = s.starts_with(b"W/");
        if weak {
            s = &s[2..];
        }
        if s.first() != Some(&b'"') {
            return None;
        }
        let end = s[1..].iter().position(|&b| b == b'"')? + 2;
        let (tag, rest) = s.split_at(end);
        s = rest;
        Some((weak, tag))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(lines: &[&str]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for l in lines {
            h.append(
                axum::http::header::IF_NONE_MATCH,
                HeaderValue::from_str(l).unwrap_or(HeaderValue::from_static("")),
            );
        }
        h
    }

    #[test]
    fn if_none_match_compares_weakly_over_every_line() {
        let tag = HeaderValue::from_static("\"abc\"");
        assert!(none_match_hits(&headers(&["\"abc\""]), &tag));
        assert!(none_match_hits(&headers(&["W/\"abc\""]), &tag));
        assert!(none_match_hits(&headers(&["\"x\", W/\"abc\""]), &tag));
        assert!(none_match_hits(&headers(&["\"x\"", "\"abc\""]), &tag));
        assert!(none_match_hits(&headers(&[" * "]), &tag));
        // A comma inside a quoted tag does not split it.
        assert!(!none_match_hits(&headers(&["\"a,\"abc\""]), &tag));
        assert!(!none_match_hits(&headers(&["\"abcd\", \"ab\""]), &tag));
        assert!(!none_match_hits(&headers(&["abc"]), &tag));
        assert!(!none_match_hits(&headers(&[]), &tag));
    }

    #[test]
    fn if_range_compares_strongly() {
        let tag = HeaderValue::from_static("\"abc\"");
        assert!(if_range_holds(&HeaderValue::from_static("\"abc\""), &tag));
        assert!(!if_range_holds(
            &HeaderValue::from_static("W/\"abc\""),
            &tag
        ));
        assert!(!if_range_holds(&HeaderValue::from_static("\"abd\""), &tag));
        assert!(!if_range_holds(
            &HeaderValue::from_static("\"abc\", \"abc\""),
            &tag
        ));
        assert!(!if_range_holds(
            &HeaderValue::from_static("Wed, 21 Oct 2015 07:28:00 GMT"),
            &tag
        ));
    }

    #[test]
    fn a_tag_is_the_content_and_follows_it() -> std::io::Result<()> {
        let dir = tempfile::tempdir()?;
        let (a, b) = (dir.path().join("a.js"), dir.path().join("b.js"));
        std::fs::write(&a, "one")?;
        std::fs::write(&b, "one")?;
        let known = Mutex::new(HashMap::new());
        let now = SystemTime::now();
        let first = tag_of(&known, &a, now);
        assert!(first.is_some());
        assert_eq!(
            first,
            tag_of(&known, &b, now),
            "the same bytes, the same tag"
        );
        assert!(
            lock(&known).is_empty(),
            "a file this fresh is not remembered"
        );
        // Rewritten at once, within its clock's tick maybe, with the same length.
        std::fs::write(&a, "two")?;
        assert_ne!(tag_of(&known, &a, now), first);
        assert_eq!(tag_of(&known, dir.path(), now), None, "a folder has no tag");
        Ok(())
    }

    #[cfg(unix)]
    #[test]
    fn a_settled_file_is_hashed_once_and_again_when_replaced() -> std::io::Result<()> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("app.js");
        let past = SystemTime::now() - Duration::from_secs(3600);
        let write = |at: &Path, text: &str| -> std::io::Result<()> {
            std::fs::write(at, text)?;
            std::fs::File::options()
                .write(true)
                .open(at)?
                .set_modified(past)
        };
        write(&path, "one")?;
        let known = Mutex::new(HashMap::new());
        // Seen once it has settled (its inode's change time, which a test cannot set back, too).
        let later = SystemTime::now() + SETTLING + Duration::from_secs(1);
        let first = tag_of(&known, &path, later);
        assert!(
            lock(&known).contains_key(&path),
            "a settled file's tag is kept"
        );
        // With the kept tag swapped for a marker, the marker answers: the file was not read.
        let kept = HeaderValue::from_static("\"kept\"");
        if let Some(entry) = lock(&known).get_mut(&path) {
            entry.1 = kept.clone();
        }
        assert_eq!(tag_of(&known, &path, later), Some(kept));
        // An upgrade that renames a new file into place (same length, same time): a new inode.
        let next = dir.path().join("app.js.new");
        write(&next, "two")?;
        std::fs::rename(&next, &path)?;
        let second = tag_of(&known, &path, later);
        assert!(second.is_some());
        assert_ne!(second, first);
        // Rewritten in place, the same length, its time set back: the change time tells (once
        // the file system's clock has ticked past the stamp that was kept).
        let kept = lock(&known).get(&path).map(|(stamp, _)| *stamp);
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            write(&path, "one")?;
            if Some(Stamp::of(&std::fs::metadata(&path)?)) != kept {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the change time never moved"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(tag_of(&known, &path, later), first);
        Ok(())
    }
}
