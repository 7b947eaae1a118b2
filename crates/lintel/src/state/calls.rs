//! The slots of a call area that awaited calls take, one per call in
//! flight ([`ASYNC_SLOTS`] of them, after the threads' leased ones): which
//! are free, which drain an abandoned call's late reply, each slot's
//! request sequence, and the tasks waiting for a slot.
//!
//! A thread keeps its slot across calls (LRPC's channel, `lease`); a task
//! does not: it takes a slot for one call and gives it back. Free slots are
//! taken last-in first-out, so a call reuses the slot whose server thread
//! has just replied and may still be bound to it, spinning. The slot given
//! back last waits in one word (`hot`), so a task that calls again and
//! again takes and gives back its slot with one exchange each, no lock;
//! the others are in the locked list.
//!
//! A call abandoned in flight (its future dropped) leaves its slot
//! draining: it is taken again only once the late reply has landed (or
//! the server died), so that reply never reaches a later call.
//!
//! This is a plain value: the tests below run it on the host.

use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering::*};
use std::task::Waker;

use parking_lot::{Mutex, MutexGuard};

use crate::abi::ASYNC_SLOTS;
use crate::state::handshake::seq_after;

/// The awaited calls' slots of one call area. Indices are `0..ASYNC_SLOTS`
/// here; the area's slot is [`crate::abi::SLOTS`] past them.
pub(crate) struct CallSlots {
    st: Mutex<State>,
    /// Each slot's last request sequence; the next call continues it, so
    /// the server tells a new request from the last one.
    seqs: Box<[AtomicU32]>,
    /// One past the highest slot ever taken: the ones beyond are untouched.
    used: AtomicU32,
    /// The slot given back last, or [`NONE`].
    hot: AtomicU32,
    /// Tasks waiting for a slot (mirrors `State::waiting.len()`): a slot
    /// given back while one waits goes to it, not to `hot`. With `hot`, a
    /// store-then-look pair (both sequentially consistent): a slot given
    /// back as a task starts to wait is seen by one of the two.
    waiting: AtomicUsize,
    next_ticket: AtomicU64,
}

struct State {
    free: Vec<u32>,
    /// Abandoned calls' slots and sequences, until their replies land.
    draining: Vec<(u32, u32)>,
    /// Tasks waiting for a slot, by the ticket of their call.
    waiting: Vec<(u64, Waker)>,
}

/// `hot` holds no slot.
const NONE: u32 = u32::MAX;

/// What [`CallSlots::take`] found.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Taken {
    /// A slot for the call, and the sequence of its request.
    Slot { index: u32, seq: u32 },
    /// None free: the task is woken when one may be.
    Wait,
}

impl CallSlots {
    pub fn new() -> CallSlots {
        CallSlots {
            st: Mutex::new(State {
                free: (0..ASYNC_SLOTS as u32).rev().collect(),
                draining: Vec::new(),
                waiting: Vec::new(),
            }),
            seqs: (0..ASYNC_SLOTS).map(|_| AtomicU32::new(0)).collect(),
            used: AtomicU32::new(0),
            hot: AtomicU32::new(NONE),
            waiting: AtomicUsize::new(0),
            next_ticket: AtomicU64::new(1),
        }
    }

    /// The sequence of the next request on `index`, a slot the caller
    /// holds (taken, or kept by its thread since it gave it back).
    #[inline]
    pub fn next_seq(&self, index: u32) -> u32 {
        let at = &self.seqs[index as usize % ASYNC_SLOTS];
        let seq = seq_after(at.load(Relaxed));
        at.store(seq, Relaxed);
        seq
    }

    /// A slot for a call: a free one, else a drained one whose late reply
    /// has landed (`settled(index, seq)`); else the call waits and `waker`
    /// is woken when a slot comes back. `ticket` names the call while it
    /// waits (0: not yet; one is given the first time it waits).
    #[inline]
    pub fn take(&self, ticket: &mut u64, waker: &Waker, settled: impl Fn(u32, u32) -> bool) -> Taken {
        match self.hot.swap(NONE, Acquire) {
            NONE => self.take_listed(ticket, waker, settled),
            index => Taken::Slot {
                index,
                seq: self.next_seq(index),
            },
        }
    }

    #[cold]
    fn take_listed(&self, ticket: &mut u64, waker: &Waker, settled: impl Fn(u32, u32) -> bool) -> Taken {
        let mut st = self.st.lock();
        let index = match st.free.pop() {
            Some(i) => Some(i),
            None => {
                let at = st.draining.iter().position(|&(i, seq)| settled(i, seq));
                at.map(|at| st.draining.swap_remove(at).0)
            }
        };
        let index = match index {
            Some(index) => index,
            None => match self.wait(&mut st, ticket, waker) {
                Ok(index) => index,
                Err(wait) => return wait,
            },
        };
        if !st.waiting.is_empty() {
            let ticket = *ticket;
            st.waiting.retain(|(t, _)| *t != ticket);
            self.waiting.store(st.waiting.len(), Relaxed);
        }
        drop(st);
        if index >= self.used.load(Relaxed) {
            self.used.fetch_max(index + 1, Relaxed);
        }
        Taken::Slot {
            index,
            seq: self.next_seq(index),
        }
    }

    /// No slot listed: call `ticket` waits, unless a slot was given back
    /// to `hot` meanwhile (`Ok`, its index).
    fn wait(&self, st: &mut State, ticket: &mut u64, waker: &Waker) -> Result<u32, Taken> {
        if *ticket == 0 {
            *ticket = self.next_ticket.fetch_add(1, Relaxed);
        }
        let ticket = *ticket;
        match st.waiting.iter_mut().find(|(t, _)| *t == ticket) {
            Some((_, w)) => w.clone_from(waker),
            None => st.waiting.push((ticket, waker.clone())),
        }
        self.waiting.store(st.waiting.len(), SeqCst);
        // A slot given back meanwhile went to `hot` unless its giver saw us
        // waiting (see `waiting`).
        match self.hot.swap(NONE, SeqCst) {
            NONE => Err(Taken::Wait),
            index => Ok(index),
        }
    }

    /// Call `ticket` stopped waiting for a slot (its future was dropped).
    pub fn stop_waiting(&self, ticket: u64) {
        let mut st = self.st.lock();
        st.waiting.retain(|(t, _)| *t != ticket);
        self.waiting.store(st.waiting.len(), Relaxed);
    }

    /// The call on `index` is over and its reply read: the slot is free.
    #[inline]
    pub fn give_back(&self, index: u32) {
        let older = self.hot.swap(index, SeqCst);
        if older != NONE || self.waiting.load(SeqCst) != 0 {
            self.list_hot(older);
        }
    }

    /// `older` (a slot displaced from `hot`, or [`NONE`]) goes to the list,
    /// and so does the slot in `hot` if a task waits: it is woken.
    #[cold]
    fn list_hot(&self, older: u32) {
        let mut st = self.st.lock();
        let mut listed = 0;
        let hot = match st.waiting.is_empty() {
            true => NONE,
            false => self.hot.swap(NONE, SeqCst),
        };
        for index in [older, hot] {
            if index != NONE {
                st.free.push(index);
                listed += 1;
            }
        }
        self.wake_waiting(st, listed);
    }

    /// Wake up to `n` of the tasks waiting for a slot (the latest first),
    /// outside the lock.
    fn wake_waiting(&self, mut st: MutexGuard<'_, State>, n: usize) {
        let from = st.waiting.len().saturating_sub(n);
        let woken: Vec<_> = st.waiting.drain(from..).collect();
        self.waiting.store(st.waiting.len(), Relaxed);
        drop(st);
        for (_, w) in woken {
            w.wake();
        }
    }

    /// The call on `index` was abandoned: the slot drains until the reply
    /// to its request (the slot's last sequence) lands.
    pub fn abandon(&self, index: u32) {
        let seq = self.seqs[index as usize].load(Relaxed);
        self.st.lock().draining.push((index, seq));
    }

    /// Late replies may have landed on up to `n` draining slots: wake as
    /// many tasks that wait for a slot, if any do, to look. (One task per
    /// batch of notices left the other drained slots unused while tasks
    /// waited, until some call gave its slot back.)
    pub fn maybe_drained(&self, n: usize) {
        let st = self.st.lock();
        if !st.draining.is_empty() {
            let n = n.min(st.draining.len());
            self.wake_waiting(st, n);
        }
    }

    /// The server died: wake every task waiting for a slot.
    pub fn wake_all(&self) {
        self.wake_waiting(self.st.lock(), usize::MAX);
    }

    /// One past the highest slot ever taken.
    pub fn used(&self) -> u32 {
        self.used.load(Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::counting_waker::counting_waker as waker;

    /// Every slot taken (by tickets `0..ASYNC_SLOTS`): their indices and
    /// sequences.
    fn take_all(s: &CallSlots, w: &Waker) -> Vec<(u32, u32)> {
        (0..ASYNC_SLOTS as u64)
            .map(|t| slot(take_as(s, t, w, |_, _| false)))
            .collect()
    }

    /// `take` for the call whose ticket is `t`.
    fn take_as(s: &CallSlots, t: u64, w: &Waker, settled: impl Fn(u32, u32) -> bool) -> Taken {
        let mut t = t;
        s.take(&mut t, w, settled)
    }

    fn slot(t: Taken) -> (u32, u32) {
        match t {
            Taken::Slot { index, seq } => (index, seq),
            Taken::Wait => panic!("no slot"),
        }
    }

    #[test]
    fn the_slot_given_back_last_is_taken_first_and_sequences_continue() {
        let s = CallSlots::new();
        let (_, w) = waker();
        let (a, sa) = slot(take_as(&s, 1, &w, |_, _| false));
        let (b, _) = slot(take_as(&s, 2, &w, |_, _| false));
        assert_eq!((a, b, sa), (0, 1, 1));
        s.give_back(a);
        assert_eq!(
            slot(take_as(&s, 3, &w, |_, _| false)),
            (a, 2),
            "the same slot, the next sequence"
        );
        assert_eq!(s.used(), 2);
    }

    #[test]
    fn a_drained_slot_is_taken_only_once_its_late_reply_landed() {
        let s = CallSlots::new();
        let (count, w) = waker();
        let taken = take_all(&s, &w);
        let (index, seq) = taken[7];
        s.abandon(index);
        assert_eq!(
            take_as(&s, 9_999, &w, |_, _| false),
            Taken::Wait,
            "its reply has not landed"
        );
        s.maybe_drained(1);
        assert_eq!(count.get(), 1, "the waiting task is told to look again");
        let landed = |i: u32, sq: u32| i == index && sq == seq;
        assert_eq!(slot(take_as(&s, 9_999, &w, landed)), (index, seq + 1));
    }

    #[test]
    fn late_replies_noticed_together_wake_as_many_waiting_tasks() {
        let s = CallSlots::new();
        let (_, w) = waker();
        let taken = take_all(&s, &w);
        for &(index, _) in &taken[..5] {
            s.abandon(index);
        }
        let waiters: Vec<_> = (0..8).map(|_| waker()).collect();
        for (t, (_, w)) in waiters.iter().enumerate() {
            assert_eq!(take_as(&s, 10_000 + t as u64, w, |_, _| false), Taken::Wait);
        }
        // One batch of notices names three of the five draining slots.
        s.maybe_drained(3);
        let woken: usize = waiters.iter().map(|(c, _)| c.get()).sum();
        assert_eq!(woken, 3, "one waiting task per slot that may have drained");
        // A lost notice (flooded socket): every draining slot may have.
        s.maybe_drained(usize::MAX);
        let woken: usize = waiters.iter().map(|(c, _)| c.get()).sum();
        assert_eq!(woken, 3 + 5, "as many as slots drain, no more");
    }

    #[test]
    fn a_slot_given_back_wakes_one_waiting_task_and_a_dropped_wait_is_forgotten() {
        let s = CallSlots::new();
        let (_, w) = waker();
        let taken = take_all(&s, &w);
        let (first, w1) = waker();
        let (second, w2) = waker();
        assert_eq!(take_as(&s, 10_000, &w1, |_, _| false), Taken::Wait);
        assert_eq!(
            take_as(&s, 10_000, &w1, |_, _| false),
            Taken::Wait,
            "a second poll waits once"
        );
        assert_eq!(take_as(&s, 10_001, &w2, |_, _| false), Taken::Wait);
        s.stop_waiting(10_001);
        s.give_back(taken[0].0);
        s.give_back(taken[1].0);
        assert_eq!(first.get(), 1);
        assert_eq!(second.get(), 0, "a dropped call is not woken");
    }
}
