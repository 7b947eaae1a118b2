//! Bounded spinning before a futex sleep, for as long as the wait is
//! expected to take.
//!
//! A side that waits (a caller for its reply, a server for the next
//! request) spins up to a budget, then sleeps. The domain's budget
//! (`LINTEL_SPIN_NS`, 50 µs) is set for small calls; a wait that lately took
//! longer than that but not much longer spins for twice as long as it took
//! ([`adaptive_budget`]): a 1 MiB echo takes a few hundred µs, and sleeping
//! for each cost a wake-up on nearly every call. A wait longer than
//! [`SPIN_MAX_NS`] is slept for after the usual budget, as the CPU would be
//! spun away for nothing.

use std::time::{Duration, Instant};

/// Longest a wait spins when its recent waits say the answer is coming.
pub const SPIN_MAX_NS: u64 = 2_000_000;

/// Longest a caller spins through its server's step off its CPU
/// (`abi::CPU_MOVING`), its budget starting afresh after it: a move takes
/// 40–130 µs on this project's 2-vCPU machines (two affinity changes
/// through the kernel's migration thread), and a caller that slept
/// meanwhile would be woken onto the server's new CPU: a futex wake-up puts
/// the woken thread on its waker's CPU there, even with its own idle.
pub const MOVE_NS: u64 = 1_000_000;

/// How long to spin, given the domain's budget `base` and how long this
/// waiter's recent waits took (`lately`, ns): twice that, when it is more
/// than `base` and at most [`SPIN_MAX_NS`]; else `base`.
pub(crate) fn adaptive_budget(base: u64, lately: u32) -> u64 {
    let want = 2 * u64::from(lately);
    if base > 0 && want > base && want <= SPIN_MAX_NS {
        want
    } else {
        base
    }
}

/// The running average of wait times (ns) after a wait that took `took`:
/// a quarter of the way towards it.
pub(crate) fn average(lately: u32, took: u64) -> u32 {
    let took = took.min(u64::from(u32::MAX));
    ((3 * u64::from(lately) + took) / 4) as u32
}

/// Spins for at most a time budget; checks the clock every 64 turns.
pub(crate) struct Spinner {
    /// The budget in ns (0: never spin); a `Duration` is made only when
    /// the clock is first read.
    budget: u64,
    start: Option<Instant>,
    turns: u32,
}

impl Spinner {
    #[inline]
    pub fn new(budget_ns: u64) -> Spinner {
        Spinner {
            budget: budget_ns,
            start: None,
            turns: 0,
        }
    }

    /// Nanoseconds since the clock was first checked, or 0 if it never was
    /// (the wait ended within the first 64 turns, a microsecond or two).
    pub fn spun_ns(&self) -> u64 {
        self.start
            .map_or(0, |s| s.elapsed().as_nanos().min(u128::from(u64::MAX)) as u64)
    }

    /// One turn of spinning; false once the budget is spent.
    #[inline]
    pub fn spin(&mut self) -> bool {
        self.spin_unless(|| false)
    }

    /// As [`Spinner::spin`], and false also once `stop` holds; `stop` is
    /// asked at the pace of the clock checks, not every turn.
    #[inline]
    pub fn spin_unless(&mut self, stop: impl FnOnce() -> bool) -> bool {
        if self.budget == 0 {
            return false;
        }
        self.turns = self.turns.wrapping_add(1);
        if self.turns.is_multiple_of(64) {
            if stop() {
                return false;
            }
            let now = Instant::now();
            match self.start {
                None => self.start = Some(now),
                Some(s) if now.duration_since(s) > Duration::from_nanos(self.budget) => return false,
                Some(_) => {}
            }
        }
        std::hint::spin_loop();
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A waiter whose waits take longer than the budget spins for twice as
    /// long as they took, up to the bound; beyond it, for the budget.
    #[test]
    fn the_budget_follows_the_waits_up_to_its_bound() {
        let base = 50_000;
        assert_eq!(adaptive_budget(base, 0), base);
        assert_eq!(adaptive_budget(base, 10_000), base, "short waits keep the budget");
        assert_eq!(adaptive_budget(base, 300_000), 600_000);
        assert_eq!(adaptive_budget(base, (SPIN_MAX_NS / 2) as u32), SPIN_MAX_NS);
        assert_eq!(
            adaptive_budget(base, 5_000_000),
            base,
            "a wait this long is slept for"
        );
        assert_eq!(adaptive_budget(0, 300_000), 0, "spinning off stays off");
    }

    #[test]
    fn the_average_moves_a_quarter_of_the_way_and_saturates() {
        assert_eq!(average(0, 400), 100);
        assert_eq!(average(400, 400), 400);
        let mut a = 0;
        for _ in 0..40 {
            a = average(a, 500_000);
        }
        assert!((499_000..=500_000).contains(&a), "{a}");
        assert_eq!(average(u32::MAX, u64::MAX), u32::MAX);
    }
}
