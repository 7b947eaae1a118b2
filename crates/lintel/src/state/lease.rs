//! Ownership leases: which calling thread uses which slot of a call area.
//!
//! A client thread leases a slot the first time it calls over a connection
//! and keeps it across calls, so the server thread bound to the slot is
//! ready for it (LRPC's direct hand-off). Keeping is not owning, though: a
//! thread that has stopped calling must never lock a newcomer out. So a
//! thread that needs a slot takes a free one, else steals one whose owner
//! is between calls, or one whose abandoned call's late reply has landed.
//! Each slot's state, and the handshake between its owner and a thief, is
//! `claim`'s.
//!
//! With every slot busy, a newcomer says so (`wanted`) and polls; owners
//! that see `wanted` hand their slot back at the end of their call
//! ([`Leases::end`]), so a waiter gets a slot as soon as any call returns.
//! The poll interval bounds the wait when a wake-up is missed: no fence on
//! the call path orders the owner's store against the waiter's flag.
//!
//! Each slot's request sequence lives here too, not in the lease, so the
//! next owner continues it: the server tells a new request from the last one
//! by its sequence.
//!
//! This is a plain value: the tests below run it on the host with threads,
//! no process or runtime.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::*};
use std::time::Duration;

use parking_lot::{Condvar, Mutex};

use crate::abi::SLOTS;
pub(crate) use crate::state::claim::Claim;
use crate::state::claim::{Found, Ownership};
use crate::state::handshake::seq_after;

/// A slot index as an index of the arrays: always in range, so the
/// compiler leaves out the bounds check (an index is below [`SLOTS`] anyway).
#[inline(always)]
fn at(index: u32) -> usize {
    index as usize % SLOTS
}

/// How often a thread waiting for a slot looks again.
pub(crate) const POLL: Duration = Duration::from_millis(1);

/// The lease states of one call area's slots. The arrays have room for
/// [`SLOTS`] (a power of two), however many slots are in use, so the call
/// path indexes them with no bounds check (`at`).
pub(crate) struct Leases {
    slots: Box<[Ownership; SLOTS]>,
    seqs: Box<[AtomicU32; SLOTS]>,
    free: Mutex<Vec<u32>>,
    freed: Condvar,
    wanted: AtomicU32,
    next_token: AtomicU64,
}

impl Leases {
    /// Leases of `slots` slots (at most [`SLOTS`]).
    pub fn new(slots: usize) -> Leases {
        assert!(slots <= SLOTS, "{slots} slots, at most {SLOTS}");
        Leases {
            slots: Box::new(std::array::from_fn(|_| Ownership::new())),
            seqs: Box::new(std::array::from_fn(|_| AtomicU32::new(0))),
            free: Mutex::new((0..slots as u32).rev().collect()),
            freed: Condvar::new(),
            wanted: AtomicU32::new(0),
            next_token: AtomicU64::new(1),
        }
    }

    fn token(&self) -> u64 {
        self.next_token.fetch_add(1, Relaxed)
    }

    /// A slot for a new lease, already in its first call: a free one, a
    /// drained one whose late reply has landed (`settled(index, seq)`), or
    /// one whose owner is between calls. `None` if none is.
    pub fn take(&self, settled: impl Fn(u32, u32) -> bool) -> Option<Claim> {
        let token = self.token();
        let free = self.free.lock().pop(); // (its lock is not held below)
        if let Some(index) = free {
            let c = Claim::new(index, token, None);
            self.slots[at(index)].lease_free(&c);
            return Some(c);
        }
        for (i, slot) in self.slots.iter().enumerate() {
            let found = slot.peek();
            let drained = match found {
                Found::Leased(_) => None,
                Found::Draining(_) => Some(self.seqs[i].load(Relaxed)),
                Found::Other => continue,
            };
            if drained.is_some_and(|seq| !settled(i as u32, seq)) {
                continue;
            }
            let c = Claim::new(i as u32, token, drained);
            if slot.take(found, &c) {
                return Some(c);
            }
        }
        None
    }

    /// As [`Leases::take`], waiting while no slot can be taken; stops with
    /// the error `stop` returns (the peer died, the deadline passed).
    pub fn take_or_wait<E>(
        &self,
        settled: impl Fn(u32, u32) -> bool,
        stop: impl Fn() -> Option<E>,
    ) -> Result<Claim, E> {
        let mut waiting = false;
        let claim = loop {
            if let Some(e) = stop() {
                break Err(e);
            }
            if let Some(c) = self.take(&settled) {
                break Ok(c);
            }
            if !waiting {
                waiting = true;
                self.wanted.fetch_add(1, SeqCst);
                continue; // look once more now that owners will see us
            }
            let mut free = self.free.lock();
            if free.is_empty() {
                self.freed.wait_for(&mut free, POLL);
            }
        };
        if waiting {
            self.wanted.fetch_sub(1, SeqCst);
        }
        claim
    }

    /// The owner abandons its call (sequence as last issued): the slot
    /// drains until its late reply lands. The lease is void.
    pub fn abandon(&self, c: &Claim) {
        self.slots[at(c.index)].abandon(c)
    }

    /// The owner starts a call: false if the slot was taken meanwhile (the
    /// lease is void; lease another). No locked instruction (`claim`).
    #[inline]
    pub fn begin(&self, c: &Claim) -> bool {
        self.slots[at(c.index)].begin(c)
    }

    /// The owner's call is over. Returns false if the slot was handed back
    /// because a thread waits for one (the lease is void).
    #[inline]
    pub fn end(&self, c: &Claim) -> bool {
        if self.wanted.load(Relaxed) != 0 {
            self.free_slot(c);
            return false;
        }
        self.slots[at(c.index)].end(c);
        true
    }

    #[cold]
    fn free_slot(&self, c: &Claim) {
        self.put_on_free_list(c); // in a call: no thief took it
        self.slots[at(c.index)].end(c);
    }

    /// The lease is dropped (its thread exits or forgets the connection):
    /// free the slot unless someone took it already.
    pub fn release(&self, c: &Claim) {
        self.slots[at(c.index)].end(c);
        self.put_on_free_list(c);
    }

    /// Free the slot if `c` still leases it (not taken, not draining).
    fn put_on_free_list(&self, c: &Claim) {
        if self.slots[at(c.index)].free(c) {
            self.free.lock().push(c.index);
            self.freed.notify_one();
        }
    }

    /// The next request sequence on the slot ([`seq_after`]). Only the
    /// owner, in a call, calls this.
    #[inline]
    pub fn next_seq(&self, c: &Claim) -> u32 {
        let s = &self.seqs[at(c.index)];
        let n = seq_after(s.load(Relaxed));
        s.store(n, Relaxed);
        n
    }

    /// Wake every waiter: the peer died.
    pub fn wake_all(&self) {
        let _g = self.free.lock();
        self.freed.notify_all();
    }

    /// Threads waiting for a slot now.
    #[cfg(test)]
    fn waiting(&self) -> u32 {
        self.wanted.load(SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::AtomicBool;

    #[test]
    fn idle_leases_are_taken_by_newcomers_and_their_owners_notice() {
        let l = Leases::new(2);
        let a = l.take(|_, _| true).unwrap();
        let b = l.take(|_, _| true).unwrap();
        assert!(l.take(|_, _| true).is_none(), "both busy");
        assert!(l.end(&a) && l.end(&b));
        // Both owners idle: a newcomer takes one of their slots.
        let c = l.take(|_, _| true).unwrap();
        let (stolen, kept) = if c.index == a.index { (a, b) } else { (b, a) };
        assert!(!l.begin(&stolen), "the old owner's lease is void");
        assert!(l.begin(&kept), "the other owner keeps its slot");
    }

    #[test]
    fn a_void_lease_never_frees_the_new_owners_slot() {
        let l = Leases::new(1);
        let a = l.take(|_, _| true).unwrap();
        assert!(l.end(&a));
        let b = l.take(|_, _| true).unwrap();
        l.release(&a); // the old owner's thread exits
        assert!(l.take(|_, _| true).is_none(), "b still holds it");
        assert!(l.end(&b));
        l.release(&b);
        assert!(l.free.lock().len() == 1);
    }

    #[test]
    fn sequences_continue_across_owners_and_skip_the_reserved_values() {
        let l = Leases::new(1);
        let a = l.take(|_, _| true).unwrap();
        assert_eq!(l.next_seq(&a), 1);
        assert_eq!(l.next_seq(&a), 2);
        l.end(&a);
        let b = l.take(|_, _| true).unwrap();
        assert_eq!(l.next_seq(&b), 3, "the new owner continues");
        l.seqs[0].store(u32::MAX - 1, Relaxed);
        assert_eq!(l.next_seq(&b), 1, "skips the dead marker and 0");
    }

    #[test]
    fn an_abandoned_slot_is_taken_again_only_once_its_late_reply_landed() {
        let l = Leases::new(1);
        let a = l.take(|_, _| true).unwrap();
        let seq = l.next_seq(&a);
        l.abandon(&a);
        assert!(!l.begin(&a), "the abandoning owner's lease is void");
        assert!(l.take(|_, _| false).is_none(), "the late reply has not landed");
        let b = l.take(|i, s| i == 0 && s == seq).unwrap();
        assert_eq!(b.drained, Some(seq), "the new owner learns what drained");
        assert_eq!(l.next_seq(&b), seq + 1);
        l.release(&a);
        assert!(l.take(|_, _| true).is_none(), "b holds it");
    }

    #[test]
    fn a_waiter_is_served_when_a_busy_owner_ends_its_call() {
        let l = Arc::new(Leases::new(1));
        let a = l.take(|_, _| true).unwrap();
        let l2 = l.clone();
        let t = std::thread::spawn(move || l2.take_or_wait(|_, _| true, || None::<()>));
        while l.waiting() == 0 {
            std::thread::yield_now();
        }
        assert!(!l.end(&a), "handed back: someone waits");
        let got = t.join().unwrap().expect("the waiter got the slot");
        assert_eq!(got.index, a.index);
        assert!(!l.begin(&a));
    }

    #[test]
    fn a_waiter_gives_up_when_told() {
        let l = Arc::new(Leases::new(1));
        let _a = l.take(|_, _| true).unwrap();
        let dead = Arc::new(AtomicBool::new(false));
        let (l2, d2) = (l.clone(), dead.clone());
        let t = std::thread::spawn(move || l2.take_or_wait(|_, _| true, || d2.load(SeqCst).then_some(())));
        while l.waiting() == 0 {
            std::thread::yield_now();
        }
        dead.store(true, SeqCst);
        l.wake_all();
        assert!(t.join().unwrap().is_err());
        assert_eq!(l.waiting(), 0);
    }

    #[test]
    fn many_threads_that_keep_idle_leases_never_block_a_newcomer() {
        // 4 slots, 32 threads that each call once and then keep their lease
        // while staying alive: every one gets a slot.
        let l = Arc::new(Leases::new(4));
        let gate = Arc::new(std::sync::Barrier::new(33));
        let ts: Vec<_> = (0..32)
            .map(|_| {
                let (l, gate) = (l.clone(), gate.clone());
                std::thread::spawn(move || {
                    let c = l.take_or_wait(|_, _| true, || None::<()>).unwrap();
                    let owned = l.end(&c);
                    gate.wait(); // alive, lease kept
                    (c, owned)
                })
            })
            .collect();
        gate.wait();
        let claims: Vec<_> = ts.into_iter().map(|t| t.join().unwrap()).collect();
        assert_eq!(claims.len(), 32);
    }

    /// `threads` threads make `calls` calls each on `slots` slots, on their
    /// lease while it holds, else on a new one: waiting for it (`wait`) or
    /// stealing with `take` in a loop. Two callers on one slot fail the
    /// assertion (as they do within a few rounds when thieves ignore the
    /// owners' marks); at the end every slot is free again.
    fn callers_share_no_slot(slots: usize, threads: usize, calls: u32, wait: bool) {
        crate::sys::fence::init(); // the asymmetric fences, as in the runtime
        let l = Arc::new(Leases::new(slots));
        let busy: Arc<Vec<AtomicU32>> = Arc::new((0..slots).map(|_| AtomicU32::new(0)).collect());
        let ts: Vec<_> = (0..threads)
            .map(|_| {
                let (l, busy) = (l.clone(), busy.clone());
                std::thread::spawn(move || {
                    let mut lease: Option<Claim> = None;
                    let (mut made, mut turn) = (0, 0u32);
                    while made < calls {
                        turn += 1;
                        if turn.is_multiple_of(64) {
                            std::thread::yield_now(); // another may wait for this CPU
                        }
                        let c = match lease.take() {
                            Some(c) if l.begin(&c) => c,
                            Some(c) => {
                                l.release(&c);
                                continue;
                            }
                            None if wait => l.take_or_wait(|_, _| true, || None::<()>).unwrap(),
                            None => match l.take(|_, _| true) {
                                Some(c) => c,
                                None => {
                                    // Every slot is busy: its owner may
                                    // wait for this CPU to end its call.
                                    std::thread::yield_now();
                                    continue;
                                }
                            },
                        };
                        let b = &busy[c.index as usize];
                        assert_eq!(b.fetch_add(1, SeqCst), 0, "two callers on one slot");
                        // A call that lasts: now and then this thread leaves
                        // its CPU mid-call, so thieves come while it is in one.
                        if made % 16 == 0 {
                            std::thread::yield_now();
                        }
                        std::hint::spin_loop();
                        assert_eq!(b.fetch_sub(1, SeqCst), 1, "two callers on one slot");
                        made += 1;
                        if l.end(&c) {
                            lease = Some(c);
                        }
                    }
                    if let Some(c) = lease {
                        l.release(&c);
                    }
                })
            })
            .collect();
        for t in ts {
            t.join().unwrap();
        }
        assert_eq!(l.free.lock().len(), slots, "every slot back on the free list");
    }

    #[test]
    fn concurrent_owners_and_stealers_never_share_a_busy_slot() {
        callers_share_no_slot(3, 8, 2000, true);
    }

    /// Two threads on one slot that steal it back without waiting: an
    /// owner's call start and a thief's decision meet as often as the
    /// machine allows. (The window a missing fence would open is a few
    /// cycles wide, too narrow for this to catch reliably: the pair of
    /// fences itself is tested in `fence`.)
    #[test]
    fn a_call_starting_as_its_slot_is_stolen_is_never_shared() {
        callers_share_no_slot(1, 2, 20_000, false);
    }
}
