//! When the watcher sends queued releases.
//!
//! Dropped remote doors queue their releases and the watcher sends them in
//! messages of up to [`crate::abi::control::MAX_RELEASES`]. Sending at every wake
//! made the number of messages follow the schedule: a watcher woken on the
//! other core while a thread drops thousands of doors sent one message per
//! handful of doors, and how many depended on the two threads' relative
//! speed. A `Pace` ties it to time instead: the first release after a quiet
//! spell goes at once (dropping one door is not delayed), later ones wait
//! for the next flush, at most one every `interval`. A burst of drops then
//! costs about one message per interval (plus one per full batch), whatever
//! the speed of either thread, and no release waits longer than `interval`.
//!
//! Loan returns are not paced here: they ride the next request, or go
//! after a short delay of their own (`RETURN_DELAY` in `domain`).

use std::time::{Duration, Instant};

/// The watcher's release timer: a plain value, driven with explicit times.
#[derive(Debug)]
pub struct Pace {
    interval: Duration,
    /// When releases were last sent.
    last: Option<Instant>,
    /// When the releases queued since then are to be sent.
    due: Option<Instant>,
}

impl Pace {
    pub const fn new(interval: Duration) -> Pace {
        Pace {
            interval,
            last: None,
            due: None,
        }
    }

    /// Releases were queued at `now`: true if they are to be sent now (the
    /// caller sends them); false if they wait for [`Pace::due`].
    pub fn queued(&mut self, now: Instant) -> bool {
        match self.last {
            Some(last) if now < last + self.interval => {
                self.due.get_or_insert(last + self.interval);
                false
            }
            _ => {
                self.sent(now);
                true
            }
        }
    }

    /// True if releases held back are due at `now` (the caller sends them).
    pub fn due(&mut self, now: Instant) -> bool {
        if self.due.is_some_and(|due| now >= due) {
            self.sent(now);
            true
        } else {
            false
        }
    }

    /// How long the watcher may sleep before held-back releases are due;
    /// `None` if none are held back.
    pub fn sleep(&self, now: Instant) -> Option<Duration> {
        self.due.map(|due| due.saturating_duration_since(now))
    }

    fn sent(&mut self, now: Instant) {
        self.last = Some(now);
        self.due = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn a_release_after_a_quiet_spell_goes_at_once() {
        let mut p = Pace::new(MS);
        let t = Instant::now();
        assert!(p.queued(t), "the first release is not held back");
        assert_eq!(p.sleep(t), None, "nothing left to wait for");
        assert!(
            p.queued(t + 2 * MS),
            "nor one after a spell longer than the interval"
        );
    }

    #[test]
    fn releases_in_a_burst_go_once_an_interval() {
        let mut p = Pace::new(MS);
        let t = Instant::now();
        assert!(p.queued(t));
        let step = MS / 10;
        let mut flushes = 1;
        let mut now = t;
        // Ten intervals of releases queued every tenth of an interval, with
        // the watcher checking the timer after each.
        for _ in 0..100 {
            now += step;
            if p.queued(now) {
                flushes += 1;
            }
            if let Some(sleep) = p.sleep(now) {
                assert!(sleep <= MS, "no release waits more than an interval");
            }
            if p.due(now) {
                flushes += 1;
            }
        }
        assert!((10..=11).contains(&flushes), "{flushes} flushes in ten intervals");
    }

    #[test]
    fn held_back_releases_are_due_at_the_interval_and_not_before() {
        let mut p = Pace::new(MS);
        let t = Instant::now();
        assert!(p.queued(t));
        assert!(!p.queued(t + MS / 4), "held back");
        assert_eq!(p.sleep(t + MS / 4), Some(MS * 3 / 4));
        assert!(!p.due(t + MS / 2), "not due before the interval");
        assert!(p.due(t + MS), "due at the interval");
        assert!(!p.due(t + MS), "and sent once");
        assert_eq!(p.sleep(t + MS), None);
    }
}
