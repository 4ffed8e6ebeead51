//! Locking a mutex that a panic elsewhere may have poisoned.

/// Locks a mutex, taking the data even if a panic poisoned it: every lock in this crate guards
/// state that single inserts and removes keep consistent, so a panic elsewhere leaves it usable.
pub(crate) fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
