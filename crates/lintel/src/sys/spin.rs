//! Bounded spinning before a futex sleep.

use std::time::{Duration, Instant};

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
