//! The tasks whose awaited calls are parked on one call area's slots, by
//! slot: a notice names a slot, and the task parked there is woken.
//!
//! A task stores its waker here *before* it marks its slot parked in
//! shared memory (`handshake::park_for_reply`): the server sends a notice
//! only after it sees the mark, so a notice always finds the waker. A
//! notice for a slot with nobody parked (a stale one, or an abandoned
//! call's late reply) wakes nobody.
//!
//! This is a plain value: the tests below run it on the host.

use std::task::Waker;

use parking_lot::Mutex;

use crate::abi::ASYNC_SLOTS;

/// Wakers of the parked calls of one area, by awaited-call slot.
pub(crate) struct Parked {
    /// Empty until the first call parks.
    wakers: Mutex<Vec<Option<Waker>>>,
}

impl Parked {
    pub fn new() -> Parked {
        Parked {
            wakers: Mutex::new(Vec::new()),
        }
    }

    /// The call on `index` parks (or is polled again while parked): wake
    /// `waker` when a notice names it.
    pub fn park(&self, index: u32, waker: &Waker) {
        let mut w = self.wakers.lock();
        if w.is_empty() {
            w.resize(ASYNC_SLOTS, None);
        }
        match &mut w[index as usize % ASYNC_SLOTS] {
            Some(old) => old.clone_from(waker),
            empty => *empty = Some(waker.clone()),
        }
    }

    /// The call on `index` is no longer parked.
    pub fn unpark(&self, index: u32) {
        if let Some(w) = self.wakers.lock().get_mut(index as usize) {
            *w = None;
        }
    }

    /// Notices named these slots (awaited-call indices; others ignored):
    /// the wakers to wake, moved to `woken` (woken after the lock is let
    /// go). A woken task that finds no reply parks again.
    pub fn noticed(&self, slots: &[u32], woken: &mut Vec<Waker>) {
        let mut w = self.wakers.lock();
        for &i in slots {
            if let Some(waker) = w.get_mut(i as usize).and_then(Option::take) {
                woken.push(waker);
            }
        }
    }

    /// Every parked call's waker (a notice was lost, or the server died).
    pub fn all(&self, woken: &mut Vec<Waker>) {
        let mut w = self.wakers.lock();
        woken.extend(w.iter_mut().filter_map(Option::take));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::counting_waker::counting_waker;

    #[test]
    fn a_notice_wakes_the_task_parked_on_its_slot_once() {
        let p = Parked::new();
        let (c, w) = counting_waker();
        p.park(3, &w);
        p.park(3, &w);
        let mut woken = Vec::new();
        p.noticed(&[3, 3, 7, u32::MAX], &mut woken);
        assert_eq!(woken.len(), 1, "one waker, however many notices name it");
        woken.into_iter().for_each(Waker::wake);
        assert_eq!(c.get(), 1);
        let mut woken = Vec::new();
        p.noticed(&[3], &mut woken);
        assert!(woken.is_empty(), "woken once: it parks again to be woken again");
    }

    #[test]
    fn an_unparked_call_is_not_woken_and_all_wakes_every_parked_one() {
        let p = Parked::new();
        let (_, w) = counting_waker();
        for i in [1, 2, 3] {
            p.park(i, &w);
        }
        p.unpark(2);
        let mut woken = Vec::new();
        p.all(&mut woken);
        assert_eq!(woken.len(), 2);
    }
}
