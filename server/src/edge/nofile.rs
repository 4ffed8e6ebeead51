//! The open-file limit. Every connection is a descriptor; the soft limit many systems start
//! processes with (1,024) is far below what a server of thousands of SSE streams needs, while
//! the hard limit, which an unprivileged process may raise its soft limit to, is often much higher.

/// What [`raise_to_hard_limit`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NofileLimit {
    /// The soft limit the process started with.
    pub before: u64,
    /// The soft limit now in force.
    pub after: u64,
    /// The hard limit (the most the soft limit can be raised to without privileges).
    pub hard: u64,
}

/// Raises the soft open-file limit to the hard limit and says what it was and is now.
#[cfg(unix)]
pub fn raise_to_hard_limit() -> std::io::Result<NofileLimit> {
    use rlimit::Resource;
    let (before, hard) = Resource::NOFILE.get()?;
    // `increase_nofile_limit` also respects the kernel's and macOS's own ceilings.
    let after = rlimit::increase_nofile_limit(hard)?;
    Ok(NofileLimit {
        before,
        after,
        hard,
    })
}

/// Raises the soft open-file limit to the hard limit and says what it was and is now.
#[cfg(not(unix))]
pub fn raise_to_hard_limit() -> std::io::Result<NofileLimit> {
    Err(std::io::Error::new(
        std::io::ErrorKind::Unsupported,
        "open-file limits are a unix concept",
    ))
}

/// Raises the limit and logs the outcome (a failure is logged, not fatal: the server still
/// works, it only reaches the old limit sooner).
pub fn raise_and_log() {
    match raise_to_hard_limit() {
        Ok(l) if l.after > l.before => tracing::info!(
            before = l.before,
            now = l.after,
            hard = l.hard,
            "raised the open-file limit"
        ),
        Ok(l) => tracing::info!(
            now = l.after,
            hard = l.hard,
            "open-file limit already at its most"
        ),
        Err(e) => tracing::warn!(error = %e, "could not raise the open-file limit"),
    }
}
