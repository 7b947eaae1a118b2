//! Which door each server thread runs a fast call on, so that a door's
//! `unreferenced` waits for its calls without a shared count.
//!
//! Counting calls on the door itself costs two locked instructions per
//! call on a word every thread serving that door writes. Instead each
//! worker publishes the door of its call in a word of its own ([`Runner`]),
//! with the light half of an asymmetric fence (`fence`), and the rare side,
//! a door losing its last holder, runs the heavy half and then looks at
//! every worker's word ([`Running::runs`]). Each side stores, fences, then
//! loads the other's word, so of a worker entering a call and a door
//! falling to zero holders at least one sees the other: the worker sees the
//! holders gone (and takes the slow path, which counts its call), or the
//! door sees the worker (and leaves `unreferenced` to it). A worker leaving
//! a call does the same against the door's "unreferenced pending" flag.
//! The protocol itself lives on the door (`DoorCore::enter` and friends);
//! this module is the registry of words.
//!
//! The same idea as hazard pointers: the frequent side announces what it
//! uses in a word only it writes, the rare side scans all of them.
//!
//! The price moves to the rare side: a door falling to zero holders runs
//! one `membarrier` (about 0.3 µs here with no other thread running, 0.8 µs
//! with one spinning on the other CPU) and a scan of the workers' words. A
//! domain that drops many doors at once pays that per door, beside the
//! release message it already processes.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering::*};

use parking_lot::Mutex;

use crate::leaked::Leaked;

/// The words of a domain's workers.
pub(crate) struct Running {
    runners: Mutex<Vec<Arc<Runner>>>,
}

/// One worker's word: the address of the door whose call it runs on the
/// fast path, or 0.
#[derive(Default)]
pub(crate) struct Runner {
    door: AtomicUsize,
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

    /// Whether some worker runs a fast call on the door at `addr`: the
    /// heavy fence, then every worker's word. The caller stored what the
    /// workers must see before calling this.
    pub fn runs(&self, addr: usize) -> bool {
        crate::fence::heavy();
        self.runners.lock().iter().any(|r| r.door.load(Relaxed) == addr)
    }
}

impl Runner {
    /// A fast call on the door at `addr` starts: publish it, then the light
    /// fence; the caller then loads what the rare side stored.
    #[inline(always)]
    pub fn enter(&self, addr: usize) {
        self.door.store(addr, Relaxed);
        crate::fence::light();
    }

    /// The call ended: as [`Runner::enter`], publishing no door.
    #[inline(always)]
    pub fn leave(&self) {
        self.door.store(0, Release);
        crate::fence::light();
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
