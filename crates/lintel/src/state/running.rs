//! The registry of the words in which server threads publish the door of
//! their fast call ([`Runner`], whose protocol is the door's count's:
//! `refs`). A door falling to zero holders scans them all.
//!
//! The price of the scan is the rare side's: a door falling to zero holders
//! runs one `membarrier` (about 0.3 µs here with no other thread running,
//! 0.8 µs with one spinning on the other CPU) and reads every worker's
//! word. Doors let go at once (a peer's batch of releases, or its death)
//! share one barrier (`Refs::settle_all`): 0.04 µs a door in batches of
//! 1024, against 1.3–3 µs one by one with another thread running.

use parking_lot::Mutex;
use std::sync::Arc;

use crate::state::leaked::Leaked;
pub(crate) use crate::state::refs::Runner;

/// The words of a domain's workers.
pub(crate) struct Running {
    runners: Mutex<Vec<Arc<Runner>>>,
}

static WORKERS: Leaked<Running> = Leaked::new();

/// The words of this process's server threads; a forked child, whose
/// parent's threads are not there, starts a registry of its own
/// ([`after_fork`]).
pub(crate) fn workers() -> &'static Running {
    WORKERS.get_or_make(Running::new, |_| {})
}

/// In a forked child: leave the parent's registry behind.
pub(crate) fn after_fork() {
    WORKERS.abandon();
}

impl Running {
    pub const fn new() -> Running {
        Running {
            runners: Mutex::new(Vec::new()),
        }
    }

    /// A word for a new worker thread; dropped with the thread (its entry
    /// is pruned at the next registration).
    pub fn register(&self) -> Arc<Runner> {
        let runner = Arc::new(Runner::default());
        let mut all = self.runners.lock();
        all.retain(|r| Arc::strong_count(r) > 1);
        all.push(runner.clone());
        runner
    }

    /// Whether some worker runs a fast call on the door at `addr`. The
    /// caller ran the heavy fence after storing what the workers must see.
    pub fn runs(&self, addr: usize) -> bool {
        self.runners.lock().iter().any(|r| r.names(addr))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_registered_word_is_scanned_until_its_worker_goes() {
        let running = Running::new();
        let a = running.register();
        let b = running.register();
        assert!(!running.runs(0x1000));
        a.enter(0x1000);
        assert!(running.runs(0x1000));
        assert!(!running.runs(0x2000));
        b.enter(0x2000);
        a.leave();
        assert!(!running.runs(0x1000));
        assert!(running.runs(0x2000));
        drop(b);
        let _c = running.register();
        assert_eq!(
            running.runners.lock().len(),
            2,
            "the dropped worker's word is pruned"
        );
        assert!(!running.runs(0x2000));
    }
}
