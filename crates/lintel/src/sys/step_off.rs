//! When a spinning side of a call steps off its peer's CPU.
//!
//! A futex wake-up pulls the woken thread onto its waker's CPU (on this
//! project's 2-vCPU machines nearly always, even with the woken thread's
//! own CPU idle); there neither side may spin, so every call sleeps until
//! the scheduler moves one of them, and each sleep's wake-up puts the two
//! together again. The side that finds its peer on its CPU twice running
//! moves itself off: a server at the end of a spin for the next request, a
//! caller about to sleep for its reply (which a server preempted by its
//! own wake-up never sees). The move costs two affinity changes (a
//! migration through the kernel's stopper thread: 12–460 µs each there,
//! measured under an `sqlite3` run), so it is made only where it pays: a
//! caller that computes between bursts of calls wakes the worker, and is
//! joined by it, again at each burst, and moving off each time is lost.
//! Each move that follows soon after the last one waits twice as long as
//! the one before (from 1 ms to 64 ms); a move long after the last one
//! starts again at 1 ms. A caller that calls without pause stays apart once
//! moved from, and pays for one move.

/// The state of one thread (a server's worker, a caller): plain values,
/// kept across its calls.
#[derive(Debug, Default)]
pub(crate) struct StepOff {
    /// Waits cut short in a row because the peer ran on our CPU.
    shared: u32,
    /// When the last move was made (monotonic ns), if ever.
    last: Option<u64>,
    /// How long after `last` the next move may be made.
    wait_ns: u64,
}

const MIN_WAIT_NS: u64 = 1_000_000;
const MAX_WAIT_NS: u64 = 64_000_000;
/// A move this many waits after the last one starts the backoff again.
const FORGET_AFTER: u64 = 16;

impl StepOff {
    /// The peer answered while we spun: the two run apart.
    pub(crate) fn apart(&mut self) {
        self.shared = 0;
    }

    /// The spin ended with the peer on our CPU, at `now_ns`: whether to
    /// move off it now.
    pub(crate) fn together(&mut self, now_ns: u64) -> bool {
        self.shared = self.shared.saturating_add(1);
        if self.shared < 2 {
            return false;
        }
        if let Some(last) = self.last {
            let since = now_ns.saturating_sub(last);
            if since < self.wait_ns {
                return false;
            }
            self.wait_ns = if since >= self.wait_ns.saturating_mul(FORGET_AFTER) {
                MIN_WAIT_NS
            } else {
                (self.wait_ns * 2).min(MAX_WAIT_NS)
            };
        } else {
            self.wait_ns = MIN_WAIT_NS;
        }
        self.shared = 0;
        self.last = Some(now_ns);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn a_worker_moves_once_it_is_found_together_twice_running() {
        let mut s = StepOff::default();
        assert!(!s.together(0));
        s.apart();
        assert!(!s.together(MS), "once, then apart: no move");
        assert!(s.together(MS + 1), "twice running: a move");
        assert!(!s.together(MS + 2));
    }

    #[test]
    fn moves_that_do_not_stick_wait_twice_as_long_each_time() {
        let mut s = StepOff::default();
        let mut t = 0;
        let mut moves = vec![];
        // Together every 100 µs for half a second: a caller that the worker
        // keeps rejoining.
        while t < 500 * MS {
            if s.together(t) {
                moves.push(t / MS);
            }
            t += MS / 10;
        }
        assert_eq!(moves, [0, 1, 3, 7, 15, 31, 63, 127, 191, 255, 319, 383, 447]);
    }

    #[test]
    fn a_move_long_after_the_last_starts_the_wait_again() {
        let mut s = StepOff::default();
        let mut move_at = |t: u64| s.together(t) || s.together(t);
        assert!(move_at(0));
        assert!(move_at(MS));
        assert!(move_at(3 * MS), "after 2 ms");
        assert!(!move_at(5 * MS), "4 ms now");
        assert!(move_at(100 * MS), "long after: the shortest wait again");
        assert!(move_at(101 * MS));
    }
}
