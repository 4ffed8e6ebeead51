//! The static files of `--www`, kept inside their folder. `ServeDir` refuses `..` in a path but
//! follows symbolic links wherever they point, so a link in the folder (or a folder swapped for
//! one) would serve any file the process can read. Here every request is resolved to the file it
//! would serve, links included, and answered only when that file is inside the folder.

use std::path::{Component, Path, PathBuf};

use axum::body::Body;
use axum::http::{Request, StatusCode};
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
}

impl Www {
    pub fn new(dir: &Path) -> Www {
        Www {
            dir: dir.to_path_buf(),
            serve: ServeDir::new(dir).append_index_html_on_directories(true),
        }
    }

    /// Serves `req` from the folder, or `404 not_found` when the file it names lies outside it.
    pub async fn serve(self, req: Request<Body>) -> Response {
        match self.contains(req.uri().path()).await {
            Inside::Yes => match self.serve.oneshot(req).await {
                Ok(res) => res.map(Body::new),
                Err(e) => match e {},
            },
            Inside::No => {
                AppError::new(StatusCode::NOT_FOUND, "not_found", "no such file").into_response()
            }
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
