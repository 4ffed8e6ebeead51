//! The files of `--www` against the real binary: every answer `Cache-Control: no-cache`, every
//! file a strong `ETag` of its bytes answered `304` by `If-None-Match`, a changed file a new tag
//! and its new bytes; ServeDir's content types, HEAD and ranges kept.

mod support;

use std::path::Path;
use std::time::{Duration, SystemTime};

use reqwest::header::{
    HeaderMap, CACHE_CONTROL, CONTENT_TYPE, ETAG, IF_MODIFIED_SINCE, IF_NONE_MATCH, IF_RANGE,
    LAST_MODIFIED, RANGE,
};
use support::*;

/// The demo page's layout: a page, its script and style, and a package's JS and wasm.
const FILES: [(&str, &str, &[u8]); 5] = [
    (
        "index.html",
        "text/html",
        b"<!doctype html><title>t</title>",
    ),
    ("app.js", "text/javascript", b"globalThis.version = 1;\n"),
    ("style.css", "text/css", b"body { margin: 0 }\n"),
    (
        "pkg/turnstream.js",
        "text/javascript",
        b"export default 1;\n",
    ),
    (
        "pkg/turnstream_bg.wasm",
        "application/wasm",
        b"\0asm\x01\0\0\0",
    ),
];

/// A folder of [`FILES`], each last changed an hour ago (as a deployment that has been up a
/// while: what a browser's heuristic freshness is computed from).
fn deployed() -> TestResult<tempfile::TempDir> {
    let www = tempfile::tempdir()?;
    std::fs::create_dir(www.path().join("pkg"))?;
    for (path, _, body) in FILES {
        write_old(&www.path().join(path), body)?;
    }
    Ok(www)
}

fn write_old(path: &Path, body: &[u8]) -> TestResult {
    std::fs::write(path, body)?;
    let hour_ago = SystemTime::now() - Duration::from_secs(3600);
    std::fs::File::options()
        .write(true)
        .open(path)?
        .set_modified(hour_ago)?;
    Ok(())
}

fn start(www: &Path) -> TestResult<TestServer> {
    let dir = www.to_string_lossy().to_string();
    TestServer::start(&["--www", &dir])
}

fn header(h: &HeaderMap, name: reqwest::header::HeaderName) -> &str {
    h.get(name).and_then(|v| v.to_str().ok()).unwrap_or("")
}

/// A GET of `path` with `headers`: status, headers and body.
async fn get(
    s: &TestServer,
    path: &str,
    headers: &[(reqwest::header::HeaderName, &str)],
) -> TestResult<(u16, HeaderMap, Vec<u8>)> {
    let mut req = s.http.get(format!("{}{path}", s.url));
    for (name, value) in headers {
        req = req.header(name.clone(), *value);
    }
    let res = req.send().await?;
    let status = res.status().as_u16();
    let h = res.headers().clone();
    Ok((status, h, res.bytes().await?.to_vec()))
}

#[tokio::test]
async fn every_file_is_revalidated_by_its_etag() -> TestResult {
    let www = deployed()?;
    let s = start(www.path())?;
    for (path, content_type, body) in FILES {
        let url = format!("/{path}");
        let (status, h, got) = get(&s, &url, &[]).await?;
        assert_eq!(status, 200, "{path}");
        assert_eq!(got, body, "{path}");
        assert_eq!(header(&h, CACHE_CONTROL), "no-cache", "{path}");
        assert!(
            header(&h, CONTENT_TYPE).starts_with(content_type),
            "{path}: {h:?}"
        );
        assert!(!header(&h, LAST_MODIFIED).is_empty(), "{path}: {h:?}");
        let tag = header(&h, ETAG).to_string();
        assert!(
            tag.len() > 2 && tag.starts_with('"') && tag.ends_with('"'),
            "{path}: a strong tag, not {tag:?}"
        );
        // The tag a browser sends back, as it is or weakened, or in a list: 304, no body.
        for sent in [tag.clone(), format!("W/{tag}"), format!("\"other\", {tag}")] {
            let (status, h, got) = get(&s, &url, &[(IF_NONE_MATCH, &sent)]).await?;
            assert_eq!(status, 304, "{path} with If-None-Match {sent}");
            assert!(got.is_empty());
            assert_eq!(header(&h, ETAG), tag, "{path}");
            assert_eq!(header(&h, CACHE_CONTROL), "no-cache", "{path}");
        }
        // Another tag: the file, even with an If-Modified-Since that alone would be a 304
        // (RFC 9110: If-None-Match decides).
        let since = header(&h, LAST_MODIFIED).to_string();
        let (status, _, got) = get(
            &s,
            &url,
            &[(IF_NONE_MATCH, "\"other\""), (IF_MODIFIED_SINCE, &since)],
        )
        .await?;
        assert_eq!((status, got.as_slice()), (200, body), "{path}");
    }
    // `/` is index.html, tag and all.
    let (status, root, _) = get(&s, "/", &[]).await?;
    let (_, index, _) = get(&s, "/index.html", &[]).await?;
    assert_eq!(status, 200);
    assert_eq!(header(&root, CACHE_CONTROL), "no-cache");
    assert_eq!(header(&root, ETAG), header(&index, ETAG));
    Ok(())
}

#[tokio::test]
async fn an_upgraded_file_gets_a_new_tag_and_its_new_bytes() -> TestResult {
    let www = deployed()?;
    let s = start(www.path())?;
    let (_, h, _) = get(&s, "/app.js", &[]).await?;
    let old = header(&h, ETAG).to_string();
    // Rewritten in place, the same length, the same time: only its bytes tell.
    let app = www.path().join("app.js");
    write_old(&app, b"globalThis.version = 2;\n")?;
    let (status, h, got) = get(&s, "/app.js", &[(IF_NONE_MATCH, &old)]).await?;
    assert_eq!(status, 200);
    assert_eq!(got, b"globalThis.version = 2;\n");
    assert_ne!(header(&h, ETAG), old);
    // As a deployment does it: a new file renamed into place.
    let next = www.path().join("app.js.next");
    write_old(&next, b"globalThis.version = 3;\n")?;
    std::fs::rename(&next, &app)?;
    let (status, h, got) = get(&s, "/app.js", &[(IF_NONE_MATCH, &old)]).await?;
    assert_eq!(status, 200);
    assert_eq!(got, b"globalThis.version = 3;\n");
    let new = header(&h, ETAG).to_string();
    assert_ne!(new, old);
    assert_eq!(get(&s, "/app.js", &[(IF_NONE_MATCH, &new)]).await?.0, 304);
    // Written afresh (a new time, a new length): a new tag at once.
    std::fs::write(&app, "globalThis.version = 40;\n")?;
    let (status, h, got) = get(&s, "/app.js", &[(IF_NONE_MATCH, &new)]).await?;
    assert_eq!(status, 200);
    assert_eq!(got, b"globalThis.version = 40;\n");
    assert_ne!(header(&h, ETAG), new);
    // The same bytes on another server (another copy, other times): the same tag.
    let other = deployed()?;
    write_old(&other.path().join("app.js"), b"globalThis.version = 3;\n")?;
    let t = start(other.path())?;
    let (_, h, _) = get(&t, "/app.js", &[]).await?;
    assert_eq!(header(&h, ETAG), new);
    Ok(())
}

#[tokio::test]
async fn head_ranges_and_missing_files_keep_the_file_servers_answers() -> TestResult {
    let www = deployed()?;
    let s = start(www.path())?;
    let (_, h, _) = get(&s, "/app.js", &[]).await?;
    let tag = header(&h, ETAG).to_string();
    let res = s.http.head(format!("{}/app.js", s.url)).send().await?;
    assert_eq!(res.status(), 200);
    assert_eq!(header(res.headers(), ETAG), tag);
    assert_eq!(header(res.headers(), CACHE_CONTROL), "no-cache");
    assert_eq!(header(res.headers(), reqwest::header::CONTENT_LENGTH), "24");
    assert!(res.bytes().await?.is_empty());
    let res = s
        .http
        .head(format!("{}/app.js", s.url))
        .header(IF_NONE_MATCH, &tag)
        .send()
        .await?;
    assert_eq!(res.status(), 304);
    // A range, of this version or unconditioned: the part. Of another version: the whole file.
    for if_range in [None, Some(tag.as_str())] {
        let mut headers = vec![(RANGE, "bytes=0-9")];
        headers.extend(if_range.map(|t| (IF_RANGE, t)));
        let (status, h, got) = get(&s, "/app.js", &headers).await?;
        assert_eq!((status, got.as_slice()), (206, &b"globalThis"[..]));
        assert_eq!(header(&h, ETAG), tag);
    }
    let (status, h, got) = get(
        &s,
        "/app.js",
        &[(RANGE, "bytes=0-9"), (IF_RANGE, "\"another\"")],
    )
    .await?;
    assert_eq!((status, got.as_slice()), (200, FILES[1].2));
    assert_eq!(header(&h, ETAG), tag);
    // No such file: the file server's 404, never kept by a cache either.
    let (status, h, _) = get(&s, "/missing.js", &[(IF_NONE_MATCH, "*")]).await?;
    assert_eq!(status, 404);
    assert_eq!(header(&h, CACHE_CONTROL), "no-cache");
    assert!(h.get(ETAG).is_none());
    // A link out of the folder: the guard's JSON 404, no-cache too.
    #[cfg(unix)]
    {
        let outside = tempfile::tempdir()?;
        std::fs::write(outside.path().join("secret.js"), "SECRET")?;
        std::os::unix::fs::symlink(outside.path().join("secret.js"), www.path().join("leak.js"))?;
        let (status, h, got) = get(&s, "/leak.js", &[]).await?;
        assert_eq!(status, 404);
        assert_eq!(header(&h, CACHE_CONTROL), "no-cache");
        let body: serde_json::Value = serde_json::from_slice(&got)?;
        assert_eq!(body["error"]["code"], "not_found");
    }
    Ok(())
}
