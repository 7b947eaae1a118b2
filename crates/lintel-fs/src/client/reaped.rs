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

use std::sync::atomic::{AtomicU64, Ordering::*};

/// The last pids reaped, by their number in the order noted: each entry
/// the number (plus one, so that 0 is none) in its high half, the pid in
/// its low half, so a reader can tell an entry not yet stored, or already
/// overwritten, from the one it wants.
static RING: [AtomicU64; RING_LEN] = [const { AtomicU64::new(0) }; RING_LEN];
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
    RING[n as usize % RING_LEN].store(tag(n) << 32 | u64::from(pid), Release);
}

/// The high half of entry `n`.
fn tag(n: u64) -> u64 {
    (n + 1) & 0xffff_ffff
}

/// Ask a service (`settle`) of the children noted since `asked` (the
/// count it was last asked up to). Of more than [`RING_LEN`] since, the
/// last are asked of. An entry whose noting is still under way (another
/// thread's reap, or a signal handler's, not yet returned) is asked of
/// next time, with those after it again.
pub(crate) fn ask(asked: &AtomicU64, mut settle: impl FnMut(u32)) {
    let now = NOTED.load(Acquire);
    let from = asked.load(Relaxed);
    if from == now {
        return;
    }
    let mut pending = None;
    for n in from.max(now.saturating_sub(RING_LEN as u64))..now {
        let e = RING[n as usize % RING_LEN].load(Acquire);
        // How far the entry's number is past the one wanted (modulo 2^32).
        let ahead = ((e >> 32) as u32).wrapping_sub(tag(n) as u32) as i32;
        if ahead == 0 {
            settle(e as u32);
        } else if ahead < 0 || e == 0 {
            // Older than wanted: not stored yet.
            pending = pending.or(Some(n));
        }
        // (Newer: overwritten by a later reap, beyond what is kept.)
    }
    asked.store(pending.unwrap_or(now), Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The ring is the process's: one test at a time.
    static ONE: std::sync::Mutex<()> = std::sync::Mutex::new(());

    #[test]
    fn each_service_is_asked_of_each_child_once_and_of_the_last_when_many() {
        let _one = ONE.lock().unwrap_or_else(|e| e.into_inner());
        let (a, b) = (AtomicU64::new(now()), AtomicU64::new(now()));
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

    /// A reap whose number is taken but whose pid is not stored yet is
    /// asked of once it is, not skipped.
    #[test]
    fn a_noting_under_way_is_asked_of_later() {
        let _one = ONE.lock().unwrap_or_else(|e| e.into_inner());
        let asked = AtomicU64::new(now());
        // As `note` does, stopped between its two steps.
        let n = NOTED.fetch_add(1, AcqRel);
        note(41);
        let mut seen = Vec::new();
        ask(&asked, |p| seen.push(p));
        assert_eq!(seen, [41], "the stored one now");
        RING[n as usize % RING_LEN].store(tag(n) << 32 | 40, Release);
        let mut seen = Vec::new();
        ask(&asked, |p| seen.push(p));
        assert_eq!(seen, [40, 41], "the late one, and those after it again");
        let mut seen = Vec::new();
        ask(&asked, |p| seen.push(p));
        assert!(seen.is_empty());
    }
}
