//! Children this process reaped, each service asked to finish the calls
//! they left running before this process's next call that names a path
//! ([`crate::Fs::child_reaped`]).
//!
//! A service runs a call it has begun to its end even if its caller is
//! killed meanwhile; Linux finishes a killed process's system calls before
//! its parent can reap it. So a parent that kills a child, reaps it and
//! opens what the child was writing must not see the child's last call
//! land after. Reaping is often done in a `SIGCHLD` handler that may have
//! interrupted `malloc`: noting a pid only stores two words; the asking
//! is done at the next call, as for changes of credentials.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::*};

/// The last pids reaped, by their number in the order noted.
static RING: [AtomicU32; RING_LEN] = [const { AtomicU32::new(0) }; RING_LEN];
const RING_LEN: usize = 64;
/// How many were noted.
static NOTED: AtomicU64 = AtomicU64::new(0);

/// How many were noted so far: a new `Fs` asks of none before it.
pub(crate) fn now() -> u64 {
    NOTED.load(Acquire)
}

/// `pid` was reaped. Async-signal-safe.
pub(crate) fn note(pid: u32) {
    let n = NOTED.fetch_add(1, AcqRel);
    RING[n as usize % RING_LEN].store(pid, Release);
}

/// Ask a service (`settle`) of the children noted since `asked` (the
/// count it was last asked up to). Of more than [`RING_LEN`] since, the
/// last are asked of.
pub(crate) fn ask(asked: &AtomicU64, mut settle: impl FnMut(u32)) {
    let now = NOTED.load(Acquire);
    let from = asked.load(Relaxed);
    if from == now {
        return;
    }
    asked.store(now, Relaxed);
    for n in from.max(now.saturating_sub(RING_LEN as u64))..now {
        // 0: its noting is under way (in a signal handler of this very
        // thread, or another thread's): that reap has not returned yet.
        let pid = RING[n as usize % RING_LEN].load(Acquire);
        if pid != 0 {
            settle(pid);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_service_is_asked_of_each_child_once_and_of_the_last_when_many() {
        let (a, b) = (
            AtomicU64::new(NOTED.load(SeqCst)),
            AtomicU64::new(NOTED.load(SeqCst)),
        );
        note(7);
        note(8);
        let mut seen = Vec::new();
        ask(&a, |p| seen.push(p));
        ask(&a, |p| seen.push(p));
        assert_eq!(seen, [7, 8]);
        for p in 100..100 + RING_LEN as u32 + 10 {
            note(p);
        }
        let mut seen = Vec::new();
        ask(&b, |p| seen.push(p));
        let want: Vec<u32> = (110..100 + RING_LEN as u32 + 10).collect();
        assert_eq!(seen, want, "the last {RING_LEN}");
    }
}
