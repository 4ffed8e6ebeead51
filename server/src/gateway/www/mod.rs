//! The static files of `--www`: kept inside their folder, and never used stale. `ServeDir`
//! refuses `..` in a path but follows symbolic links wherever they point, so a link in the folder
//! (or a folder swapped for one) would serve any file the process can read. Here every request is
//! resolved to the file it would serve, links included, and answered only when that file is
//! inside the folder. Every answer says `Cache-Control: no-cache`, and a file's carries an `ETag`
//! made from its bytes (see `etag`), so a browser asks again before each use and an upgraded
//! page or package is what the next load runs; an unchanged file costs a `304`.

mod etag;

use std::path::{Component, Path, PathBuf};

use axum::body::Body;
use axum::http::{header, HeaderValue, Method, Request, StatusCode};
use axum::response::{IntoResponse, Response};
use tower::ServiceExt;
use tower_http::services::ServeDir;

use super::AppError;

/// The folder and the service that reads from it.
#[derive(Clone)]
pub struct Www {
    /// The folder as given; `ServeDir` serves from it.
    dir: PathBuf,
    serve: ServeDir,
    /// The tags of the files served so far, shared by every clone.
    tags: etag::Tags,
}

impl Www {
    pub fn new(dir: &Path) -> Www {
        Www {
            dir: dir.to_path_buf(),
            serve: ServeDir::new(dir).append_index_html_on_directories(true),
            tags: etag::Tags::default(),
        }
    }

    /// Serves `req` from the folder, or `404 not_found` when the file it names lies outside it.
    /// Whatever the answer, `Cache-Control: no-cache`: without it a browser may reuse a file (or
    /// a 404) for as long as its heuristic allows, after the server was upgraded.
    pub async fn serve(self, req: Request<Body>) -> Response {
        let mut res = match self.contains(req.uri().path()).await {
            Inside::Yes => self.serve_inside(req).await,
            Inside::No => {
                AppError::new(StatusCode::NOT_FOUND, "not_found", "no such file").into_response()
            }
        };
        res.headers_mut()
            .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
        res
    }

    /// `ServeDir`'s answer, with the file's `ETag` and the conditions that need it answered
    /// first: `If-None-Match` (a `304` of our own) and `If-Range` (`ServeDir` knows neither).
    async fn serve_inside(self, mut req: Request<Body>) -> Response {
        let file = match *req.method() {
            Method::GET | Method::HEAD => self.file_of(req.uri().path()).await,
            _ => None,
        };
        let tag = match file {
            Some(file) => self.tags.of(file).await,
            None => None,
        };
        if let Some(tag) = &tag {
            let headers = req.headers_mut();
            if headers.contains_key(header::IF_NONE_MATCH) {
                if etag::none_match_hits(headers, tag) {
                    let mut res = StatusCode::NOT_MODIFIED.into_response();
                    res.headers_mut().insert(header::ETAG, tag.clone());
                    return res;
                }
                // RFC 9110 §13.2.2: with If-None-Match, If-Modified-Since is not evaluated.
                headers.remove(header::IF_MODIFIED_SINCE);
            }
            let range_of_another = headers
                .get(header::IF_RANGE)
                .is_some_and(|v| !etag::if_range_holds(v, tag));
            if range_of_another {
                // The part asked for is of another version: the whole file, as §13.1.5 says.
                headers.remove(header::RANGE);
            }
        }
        let mut res = match self.serve.oneshot(req).await {
            Ok(res) => res.map(Body::new),
            Err(e) => match e {},
        };
        let of_the_file = matches!(
            res.status(),
            StatusCode::OK | StatusCode::PARTIAL_CONTENT | StatusCode::NOT_MODIFIED
        );
        if let (Some(tag), true) = (tag, of_the_file) {
            res.headers_mut().insert(header::ETAG, tag);
        }
        res
    }

    /// The file `ServeDir` answers `uri_path` with: the path, or a folder's `index.html` when
    /// the path ends in `/` (without it, a folder is a redirect, which has no tag).
    async fn file_of(&self, uri_path: &str) -> Option<PathBuf> {
        let path = self.dir.join(relative_path(uri_path)?);
        let is_dir = tokio::fs::metadata(&path)
            .await
            .map(|m| m.is_dir())
            .unwrap_or(false);
        match (is_dir, uri_path.ends_with('/')) {
            (false, _) => Some(path),
            (true, true) => Some(path.join("index.html")),
            (true, false) => None,
        }
    }

    /// Whether the file `uri_path` names (after links) is inside the folder. A path that names
    /// nothing is left to `ServeDir`, which answers it as missing.
    async fn contains(&self, uri_path: &str) -> Inside {
        let Some(relative) = relative_path(uri_path) else {
            return Inside::Yes;
        };
        let Ok(root) = tokio::fs::canonicalize(&self.dir).await else {
            return Inside::No;
        };
        let target = match tokio::fs::canonicalize(self.dir.join(&relative)).await {
            Ok(target) => target,
            Err(_) => return Inside::Yes,
        };
        if !target.starts_with(&root) {
            return Inside::No;
        }
        // A folder is answered with its index.html, which may itself be a link.
        if tokio::fs::metadata(&target)
            .await
            .map(|m| m.is_dir())
            .unwrap_or(false)
        {
            if let Ok(index) = tokio::fs::canonicalize(target.join("index.html")).await {
                if !index.starts_with(&root) {
                    return Inside::No;
                }
            }
        }
        Inside::Yes
    }
}

enum Inside {
    Yes,
    No,
}

/// The folder-relative path `ServeDir` would read for `uri_path`, or `None` when it refuses the
/// path itself (a `..` or a drive prefix): the same decoding and the same component rules.
fn relative_path(uri_path: &str) -> Option<PathBuf> {
    let decoded = percent_encoding::percent_decode_str(uri_path.trim_start_matches('/'))
        .decode_utf8()
        .ok()?;
    let mut out = PathBuf::new();
    for component in Path::new(&*decoded).components() {
        match component {
            Component::Normal(c) => out.push(c),
            Component::CurDir => {}
            Component::Prefix(_) | Component::RootDir | Component::ParentDir => return None,
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_as_serve_dir_reads_them() {
        assert_eq!(relative_path("/a/b.js"), Some(PathBuf::from("a/b.js")));
        assert_eq!(relative_path("/a/./b"), Some(PathBuf::from("a/b")));
        assert_eq!(relative_path("/%61%2Fb"), Some(PathBuf::from("a/b")));
        assert_eq!(relative_path("/"), Some(PathBuf::new()));
        assert_eq!(relative_path("/a/../b"), None);
        assert_eq!(relative_path("/%2e%2e/etc/passwd"), None);
        assert_eq!(relative_path("/x%"), Some(PathBuf::from("x%")));
        assert_eq!(relative_path("/x%4"), Some(PathBuf::from("x%4")));
    }
}
