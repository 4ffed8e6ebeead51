//! Attachments of a user message (contract v1.2): files the app stored itself, named by URL. The
//! server keeps the reference, never the file; a `data:` URL carries the file inline and counts
//! against the message's size cap.

use serde::{Deserialize, Serialize};

use crate::limits::{
    MAX_ATTACHMENTS_PER_MESSAGE, MAX_ATTACHMENT_NAME_BYTES, MAX_ATTACHMENT_URL_BYTES,
    MAX_CONTENT_BYTES, MAX_MEDIA_TYPE_BYTES,
};

/// A file a user message refers to.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attachment {
    /// `http:`, `https:` or `data:` (the file inline).
    #[serde(default)]
    pub url: String,
    /// The file's media type, e.g. `image/png` or `application/pdf`.
    #[serde(default)]
    pub media_type: String,
    /// The file's name as the user knows it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

impl Attachment {
    /// Whether the model can be shown the file as an image (`image/*`).
    pub fn is_image(&self) -> bool {
        self.media_type
            .get(..6)
            .is_some_and(|t| t.eq_ignore_ascii_case("image/"))
    }

    /// Whether the file travels inline, as a `data:` URL.
    pub fn is_inline(&self) -> bool {
        has_scheme(&self.url, "data:")
    }
}

/// Why a message's attachments were refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AttachmentError {
    /// More than [`MAX_ATTACHMENTS_PER_MESSAGE`].
    TooMany(usize),
    /// Attachment `index` breaks a rule; `why` says which.
    Invalid { index: usize, why: &'static str },
    /// The content and the `data:` URLs together exceed [`MAX_CONTENT_BYTES`].
    TooLarge(usize),
}

impl AttachmentError {
    /// The stable error code of the answer.
    pub fn code(&self) -> &'static str {
        match self {
            AttachmentError::TooMany(_) => "too_many_attachments",
            AttachmentError::Invalid { .. } => "invalid_attachment",
            AttachmentError::TooLarge(_) => "content_too_large",
        }
    }
}

impl std::fmt::Display for AttachmentError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AttachmentError::TooMany(n) => write!(
                f,
                "{n} attachments; a message carries at most {MAX_ATTACHMENTS_PER_MESSAGE}"
            ),
            AttachmentError::Invalid { index, why } => write!(f, "attachments[{index}]: {why}"),
            AttachmentError::TooLarge(n) => write!(
                f,
                "content and data: URLs are {n} bytes; the limit is {MAX_CONTENT_BYTES}"
            ),
        }
    }
}

/// Checks a message's attachments against the contract's rules, and its content plus the
/// `data:` URLs against [`MAX_CONTENT_BYTES`].
pub fn check_attachments(content: &str, attachments: &[Attachment]) -> Result<(), AttachmentError> {
    if attachments.len() > MAX_ATTACHMENTS_PER_MESSAGE {
        return Err(AttachmentError::TooMany(attachments.len()));
    }
    let mut size = content.len();
    for (index, a) in attachments.iter().enumerate() {
        check_one(a).map_err(|why| AttachmentError::Invalid { index, why })?;
        if a.is_inline() {
            size += a.url.len();
        }
    }
    if size > MAX_CONTENT_BYTES {
        return Err(AttachmentError::TooLarge(size));
    }
    Ok(())
}

fn check_one(a: &Attachment) -> Result<(), &'static str> {
    // (Bytes rather than `str` patterns throughout: the browser SDK runs these checks too, and
    // the pattern searchers cost it kilobytes.)
    let url = a.url.as_bytes();
    // Quotes, backslashes, spaces and control characters are never part of a URL (a browser's
    // `URL` percent-encodes them), and refusing them keeps the stored JSON free of escapes.
    if url
        .iter()
        .any(|&b| b <= b' ' || b == 0x7f || b == b'"' || b == b'\\')
    {
        return Err("url has spaces, quotes, backslashes or control characters");
    }
    let authority = if has_scheme(&a.url, "https://") {
        Some(&url[8..])
    } else if has_scheme(&a.url, "http://") {
        Some(&url[7..])
    } else {
        None
    };
    match authority {
        Some(rest) => {
            if url.len() > MAX_ATTACHMENT_URL_BYTES {
                return Err("url is longer than 4096 bytes");
            }
            if matches!(rest.first(), None | Some(b'/' | b'?' | b'#')) {
                return Err("url has no host");
            }
        }
        None if has_scheme(&a.url, "data:") => {
            if !url.contains(&b',') {
                return Err("a data: url is data:[<media type>][;base64],<data>");
            }
        }
        None => return Err("url must be http:, https: or data:"),
    }
    if a.media_type.is_empty() {
        return Err("media_type is required");
    }
    if a.media_type.len() > MAX_MEDIA_TYPE_BYTES || !is_media_type(a.media_type.as_bytes()) {
        return Err("media_type is type/subtype (e.g. image/png), at most 255 bytes");
    }
    if let Some(name) = &a.name {
        if name.len() > MAX_ATTACHMENT_NAME_BYTES {
            return Err("name is longer than 1024 bytes");
        }
        if name.chars().any(char::is_control) {
            return Err("name has control characters");
        }
    }
    Ok(())
}

// The messages above spell these out (no formatting for a `&'static str`).
const _: () = assert!(
    MAX_ATTACHMENT_URL_BYTES == 4096
        && MAX_MEDIA_TYPE_BYTES == 255
        && MAX_ATTACHMENT_NAME_BYTES == 1024
);

/// `type/subtype` of RFC 6838 token characters, optionally followed by `;` parameters.
fn is_media_type(s: &[u8]) -> bool {
    let essence = match s.iter().position(|&b| b == b';') {
        Some(end) => s[..end].trim_ascii(),
        None => s,
    };
    let token = |t: &[u8]| {
        !t.is_empty()
            && t.iter()
                .all(|b| b.is_ascii_alphanumeric() || b"!#$&-^_.+".contains(b))
    };
    s.iter().all(|b| (b' '..0x7f).contains(b))
        && essence
            .iter()
            .position(|&b| b == b'/')
            .is_some_and(|slash| token(&essence[..slash]) && token(&essence[slash + 1..]))
}

/// Whether `url` starts with `scheme`, ignoring ASCII case (schemes are case-insensitive).
fn has_scheme(url: &str, scheme: &str) -> bool {
    url.get(..scheme.len())
        .is_some_and(|s| s.eq_ignore_ascii_case(scheme))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(url: &str, media_type: &str) -> Attachment {
        Attachment {
            url: url.into(),
            media_type: media_type.into(),
            name: None,
        }
    }

    #[test]
    fn good_attachments_pass() {
        let list = [
            a("https://cdn.example.com/a.png?sig=x#f", "image/png"),
            a("HTTP://host:8080", "application/pdf"),
            a("data:image/png;base64,iVBORw0KGgo=", "image/png"),
            a("data:,hello", "text/plain; charset=utf-8"),
            Attachment {
                name: Some("résumé final.pdf".into()),
                ..a("https://h/r.pdf", "application/vnd.ms-excel")
            },
        ];
        assert_eq!(check_attachments("hi", &list), Ok(()));
        assert!(list[0].is_image() && !list[1].is_image());
        assert!(list[2].is_inline() && !list[0].is_inline());
        assert_eq!(check_attachments("hi", &[]), Ok(()));
    }

    #[test]
    fn bad_attachments_say_which_and_why() {
        let invalid = |url: &str, media_type: &str| match check_attachments(
            "x",
            &[a("https://ok/x", "image/png"), a(url, media_type)],
        ) {
            Err(AttachmentError::Invalid { index: 1, why }) => why,
            other => panic!("{url} {media_type}: {other:?}"),
        };
        assert!(invalid("ftp://h/x", "image/png").contains("http:, https: or data:"));
        assert!(invalid("javascript:alert(1)", "image/png").contains("http:"));
        assert!(invalid("/relative.png", "image/png").contains("http:"));
        assert!(invalid("https://", "image/png").contains("no host"));
        assert!(invalid("https:///path", "image/png").contains("no host"));
        assert!(invalid("https://h/a b", "image/png").contains("spaces"));
        assert!(invalid("https://h/\"", "image/png").contains("quotes"));
        assert!(invalid("data:image/png;base64", "image/png").contains("data:"));
        assert!(invalid("https://h/x", "").contains("required"));
        assert!(invalid("https://h/x", "png").contains("type/subtype"));
        assert!(invalid("https://h/x", "image/").contains("type/subtype"));
        let long = format!("https://h/{}", "x".repeat(MAX_ATTACHMENT_URL_BYTES));
        assert!(invalid(&long, "image/png").contains("4096"));
        let named = Attachment {
            name: Some("a\nb".into()),
            ..a("https://h/x", "image/png")
        };
        assert!(matches!(
            check_attachments("x", &[named]),
            Err(AttachmentError::Invalid { index: 0, .. })
        ));
    }

    #[test]
    fn the_count_and_inline_bytes_are_capped() {
        let many = vec![a("https://h/x", "image/png"); MAX_ATTACHMENTS_PER_MESSAGE + 1];
        let e = check_attachments("x", &many).expect_err("too many");
        assert_eq!(e.code(), "too_many_attachments");
        assert!(check_attachments("x", &many[1..]).is_ok());

        let content = "x".repeat(MAX_CONTENT_BYTES - 20);
        let fits = a(&format!("data:,{}", "y".repeat(14)), "text/plain");
        assert_eq!(fits.url.len(), 20);
        assert!(check_attachments(&content, std::slice::from_ref(&fits)).is_ok());
        let over = a(&format!("data:,{}", "y".repeat(15)), "text/plain");
        let e = check_attachments(&content, &[over]).expect_err("too large");
        assert_eq!(e, AttachmentError::TooLarge(MAX_CONTENT_BYTES + 1));
        assert_eq!(e.code(), "content_too_large");
        // A URL of the app's storage costs nothing against the cap.
        let remote = a(&format!("https://h/{}", "z".repeat(4000)), "image/png");
        assert!(check_attachments(&content, &[remote]).is_ok());
    }
}
