//! The service's counters, bumped where the work happens and read out as
//! [`crate::proto::Counters`].

use std::sync::atomic::{AtomicU64, Ordering::SeqCst};

/// The service's counters ([`crate::proto::Counters`]), and the pipes
/// attached now.
#[derive(Default)]
pub(crate) struct Tally {
    pub faults: AtomicU64,
    pub windows: AtomicU64,
    pub grants: AtomicU64,
    pub recalls: AtomicU64,
    pub evictions: AtomicU64,
    pub file_calls: AtomicU64,
    pub spliced_bytes: AtomicU64,
    pub splices: AtomicU64,
    pub filled_ahead: AtomicU64,
    pub mapped_ahead: AtomicU64,
    pub direct: AtomicU64,
    pub written_back: AtomicU64,
    pub detached: AtomicU64,
    /// Pipes attached now (a gauge).
    pub pipes: AtomicU64,
}

impl Tally {
    /// One splice moved `bytes` into a client's pipe.
    pub fn spliced(&self, bytes: usize) {
        self.spliced_bytes.fetch_add(bytes as u64, SeqCst);
        self.splices.fetch_add(1, SeqCst);
    }
}
