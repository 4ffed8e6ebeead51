//! Write health: whether the journal's writes reach the disk. The writer thread records every
//! write that fails; readiness and cancel read it. While writes fail, the writer probes the
//! storage by itself, and only a probe that succeeds ends the fault (see `writer`), so health
//! comes back with the storage, without a restart and without waiting for traffic, and does not
//! come and go while the storage stays full.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use crate::error::{Error, StorageFault};
use crate::lock;
use crate::metrics::Metrics;

/// The latest write attempts failed: since when, and how.
#[derive(Debug, Clone)]
pub struct Failing {
    pub fault: StorageFault,
    /// The storage's own words for the latest failure.
    pub message: String,
    /// When the first of the consecutive failures happened.
    pub since: Instant,
}

impl Failing {
    /// The failure as the error a refused request answers with.
    pub fn to_error(&self) -> Error {
        Error::storage(
            self.fault,
            format!(
                "journal writes have failed for {} ms: {}",
                self.since.elapsed().as_millis(),
                self.message
            ),
        )
    }
}

#[derive(Debug)]
pub struct WriteHealth {
    /// Fast path for the writer, which asks after every batch whether anything needs clearing.
    failing_flag: AtomicBool,
    failing: Mutex<Option<Failing>>,
    metrics: Arc<Metrics>,
}

impl WriteHealth {
    pub(crate) fn new(metrics: Arc<Metrics>) -> Self {
        metrics.storage_healthy.store(1, Ordering::Relaxed);
        WriteHealth {
            failing_flag: AtomicBool::new(false),
            failing: Mutex::new(None),
            metrics,
        }
    }

    /// The current failure, if the latest write attempt failed.
    pub fn failing(&self) -> Option<Failing> {
        if !self.is_failing() {
            return None;
        }
        lock(&self.failing).clone()
    }

    pub fn is_failing(&self) -> bool {
        self.failing_flag.load(Ordering::Acquire)
    }

    /// The writer's probe reached the disk: the storage takes writes again.
    pub(crate) fn record_ok(&self) {
        if !self.is_failing() {
            return;
        }
        let mut failing = lock(&self.failing);
        if let Some(f) = failing.take() {
            tracing::warn!(
                fault = f.fault.as_str(),
                after_ms = f.since.elapsed().as_millis() as u64,
                "journal writes succeed again"
            );
        }
        self.failing_flag.store(false, Ordering::Release);
        self.metrics.storage_healthy.store(1, Ordering::Relaxed);
    }

    /// A write attempt failed for a reason of the storage's.
    pub(crate) fn record_fault(&self, fault: StorageFault, message: &str) {
        self.metrics.storage_fault(fault);
        let mut failing = lock(&self.failing);
        match &mut *failing {
            Some(f) => {
                f.fault = fault;
                f.message = message.to_string();
            }
            None => {
                tracing::error!(
                    fault = fault.as_str(),
                    error = message,
                    "journal writes fail; refusing new work until they succeed again"
                );
                *failing = Some(Failing {
                    fault,
                    message: message.to_string(),
                    since: Instant::now(),
                });
            }
        }
        self.failing_flag.store(true, Ordering::Release);
        self.metrics.storage_healthy.store(0, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_success_clears_a_fault_and_the_gauge_follows() {
        let metrics = Arc::new(Metrics::default());
        let health = WriteHealth::new(metrics.clone());
        assert!(health.failing().is_none());
        health.record_fault(StorageFault::Unavailable, "database is locked");
        health.record_fault(StorageFault::Full, "database or disk is full");
        let f = health.failing().expect("failing after a fault");
        assert_eq!(f.fault, StorageFault::Full);
        assert_eq!(f.to_error().storage_fault(), Some(StorageFault::Full));
        assert_eq!(metrics.storage_healthy.load(Ordering::Relaxed), 0);
        assert_eq!(metrics.storage_faults[0].load(Ordering::Relaxed), 1);
        assert_eq!(metrics.storage_faults[1].load(Ordering::Relaxed), 1);
        health.record_ok();
        assert!(health.failing().is_none());
        assert_eq!(metrics.storage_healthy.load(Ordering::Relaxed), 1);
    }
}
