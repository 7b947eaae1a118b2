//! When a spinning server thread steps off its caller's CPU.
//!
//! A futex wake-up pulls the woken thread onto its waker's CPU (on this
//! project's 2-vCPU machines nearly always, even with the woken thread's
//! own CPU idle): after a pause of its caller, the caller's first call
//! wakes the worker onto the caller's CPU, where neither may spin, and
//! every call sleeps until one of them moves. The worker moves itself off
//! once it finds its caller on its CPU twice running at the end of a spin,
//! says so in its slot meanwhile (`abi::CPU_MOVING`, which the caller spins
//! through rather than sleep and be woken onto the worker's new CPU), and
//! spins on from where it went. (The caller never moves: a program's own
//! thread, moved, takes its caches' contents with it, which cost a served
//! `sqlite3` 10 %.) The move costs two affinity changes (a migration
//! through the kernel's stopper thread: 12–460 µs each there, measured
//! under an `sqlite3` run), so it is made only where it pays: a caller that
//! computes between short bursts of calls wakes the worker, and is joined
//! by it, again at each burst, and moving off each time is lost. Each move
//! that follows soon after the last one waits twice as long as the one
//! before (from 1 ms to 64 ms), unless the last one paid: the two then ran
//! apart for [`PAID_CALLS`] calls or more (bursts after each pause, each
//! long enough to be worth a move). A move long after the last one starts
//! again at 1 ms. A caller that calls without pause stays apart once moved
//! from, and pays for one move.

/// The state of one worker: plain values, kept across its calls.
#[derive(Debug, Default)]
pub(crate) struct StepOff {
    /// Spins cut short in a row because the caller ran on our CPU.
    shared: u32,
    /// When the last move was made (monotonic ns), if ever.
    last: Option<u64>,
    /// How long after `last` the next move may be made.
    wait_ns: u64,
    /// Calls answered apart since the last move, until the two were
    /// first found together again.
    apart: u32,
    /// Whether the last move paid, once judged (when the two were first
    /// found together after it).
    paid: Option<bool>,
}

const MIN_WAIT_NS: u64 = 1_000_000;
const MAX_WAIT_NS: u64 = 64_000_000;
/// A move this many waits after the last one starts the backoff again.
const FORGET_AFTER: u64 = 16;
/// Calls answered apart after a move that make it worth its cost: a move
/// costs 40–130 µs here, a call made side by side some 6 µs more than one
/// made apart.
const PAID_CALLS: u32 = 32;

impl StepOff {
    /// A request came while the worker spun: the two run apart.
    pub(crate) fn apart(&mut self) {
        self.shared = 0;
        if self.paid.is_none() {
            self.apart = self.apart.saturating_add(1);
        }
    }

    /// The spin ended with the caller on our CPU, at `now_ns`: whether to
    /// move off it now.
    pub(crate) fn together(&mut self, now_ns: u64) -> bool {
        self.shared = self.shared.saturating_add(1);
        let paid = *self.paid.get_or_insert(self.apart >= PAID_CALLS);
        if self.shared < 2 {
            return false;
        }
        if let Some(last) = self.last {
            let wait = if paid { MIN_WAIT_NS } else { self.wait_ns };
            let since = now_ns.saturating_sub(last);
            if since < wait {
                return false;
            }
            self.wait_ns = if paid || since >= wait.saturating_mul(FORGET_AFTER) {
                MIN_WAIT_NS
            } else {
                (wait * 2).min(MAX_WAIT_NS)
            };
        } else {
            self.wait_ns = MIN_WAIT_NS;
        }
        self.shared = 0;
        self.apart = 0;
        self.paid = None;
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

    #[test]
    fn moves_that_pay_keep_the_shortest_wait() {
        let mut s = StepOff::default();
        let mut moves = vec![];
        // A burst of 200 calls every 2.6 ms, the first of each found
        // together twice: each move is followed by calls made apart.
        for burst in 0..8u64 {
            let t = burst * 2_600_000;
            if s.together(t) || s.together(t + 1) {
                moves.push(burst);
            }
            for _ in 0..200 {
                s.apart();
            }
        }
        assert_eq!(moves, [0, 1, 2, 3, 4, 5, 6, 7]);
        // Bursts of a few calls: moves do not pay, and back off.
        let mut s = StepOff::default();
        moves.clear();
        for burst in 0..8u64 {
            let t = burst * 2_600_000;
            if s.together(t) || s.together(t + 1) {
                moves.push(burst);
            }
            for _ in 0..PAID_CALLS - 1 {
                s.apart();
            }
        }
        assert_eq!(moves, [0, 1, 2, 4]);
    }
}
