//! A served door's count of holders and calls, and when its
//! `unreferenced` is due.
//!
//! One atomic word counts the domains that hold the door (high half) and
//! the remote calls in progress on the slow path (low half). A call on the
//! fast path is not counted there: two locked instructions per call on a
//! word every worker of the door writes cost more than the call's own
//! handshake. Instead each worker publishes the door of its call in a word
//! only it writes ([`Runner`]), with the light half of an asymmetric fence,
//! then checks that the door is held. The rare side, a count falling to
//! zero, runs the heavy half and scans every worker's word ([`Door::runs`],
//! the domain's registry in `running`). Each side stores, fences, then loads
//! the other's word, so at least one sees the other: the worker sees the
//! holders gone (and goes the slow, counted way), or the count sees the
//! worker (and leaves the decision to it; the worker's leaving is the same
//! handshake against the "pending" flag). The idea is that of hazard
//! pointers: the frequent side announces what it uses in its own word, the
//! rare side looks at all of them.
//!
//! What `unreferenced` promises: every call let in while the door was held
//! ends before the fall to zero that follows it is decided. Deciding takes
//! the pending flag, checks the count is still zero, then scans. Checking
//! in that order matters: a door held again and dropped again between a
//! scan and the flag would otherwise let one decision cover a call it
//! never saw. Falls to zero that overlap may be decided once.
//!
//! The code uses its atomics, lock and fences through `super::sync`: the
//! runtime's (`crate::state::sync`), and loom's in `crate::state::model`, which compiles
//! this very file and checks it under every interleaving. So this file
//! names nothing else of the crate's, and its host tests sit with the door
//! (`door`).

use std::sync::atomic::Ordering::*;

use super::sync::{AtomicBool, AtomicU64, AtomicUsize, Mutex, fence, heavy, light};

const HOLDER: u64 = 1 << 32;

/// What a count needs of its door: the workers' words, and the queue its
/// `unreferenced` goes to.
pub(crate) trait Door {
    /// Whether some worker's word names `addr` ([`Runner::names`]). The
    /// heavy fence before it is the count's.
    fn runs(&self, addr: usize) -> bool;
    /// A fall to zero is decided: queue `unreferenced`.
    fn unreferenced(&self);
}

impl<T: Door> Door for &T {
    fn runs(&self, addr: usize) -> bool {
        (**self).runs(addr)
    }
    fn unreferenced(&self) {
        (**self).unreferenced()
    }
}

/// The count of one door, and its `unreferenced` bookkeeping.
pub(crate) struct Refs {
    /// Holders (high 32 bits) + active slow-path calls (low 32 bits).
    refs: AtomicU64,
    /// The count reached zero and no decision has taken that fall yet.
    pending: AtomicBool,
    revoked: AtomicBool,
    /// Holders counted in `refs`, and whether the revoke's one
    /// `unreferenced` has been decided; changed only under this lock.
    holders: Mutex<Holders>,
}

#[derive(Default)]
struct Holders {
    counted: u32,
    final_unref_sent: bool,
}

/// One worker's word: the address of the count whose door it runs a fast
/// call on, or 0.
#[derive(Default)]
pub(crate) struct Runner {
    door: AtomicUsize,
}

impl Runner {
    /// A fast call on the door counted at `addr` starts: publish it, then
    /// the light fence (the caller then loads what the rare side stored).
    #[inline(always)]
    pub fn enter(&self, addr: usize) {
        self.door.store(addr, Relaxed);
        light();
    }

    /// The call ended: as [`Runner::enter`], publishing no door.
    #[inline(always)]
    pub fn leave(&self) {
        self.door.store(0, Release);
        light();
    }

    /// Whether this worker runs a fast call on the door counted at `addr`.
    /// (Acquire: a scan that sees the worker gone sees its call's effects.)
    #[inline]
    pub fn names(&self, addr: usize) -> bool {
        self.door.load(Acquire) == addr
    }
}

/// The slow path's failure to count a call: the door is revoked.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Revoked;

impl Refs {
    pub fn new() -> Refs {
        Refs {
            refs: AtomicU64::new(0),
            pending: AtomicBool::new(false),
            revoked: AtomicBool::new(false),
            holders: Mutex::new(Holders::default()),
        }
    }

    /// Whether a fall to zero waits for its decision.
    #[cfg(test)]
    pub fn pending(&self) -> bool {
        self.pending.load(SeqCst)
    }

    /// The identity workers publish for this door.
    fn addr(&self) -> usize {
        self as *const Refs as usize
    }

    pub fn revoked(&self) -> bool {
        self.revoked.load(Acquire)
    }

    /// A fast call starts on the worker whose word is `runner`: true if the
    /// door is held and not revoked, so the call runs uncounted. Either
    /// way the worker then calls [`Refs::leave`], at the call's end or at
    /// once.
    #[inline(always)]
    pub fn enter(&self, runner: &Runner) -> bool {
        runner.enter(self.addr());
        self.refs.load(Acquire) >= HOLDER && !self.revoked.load(Relaxed)
    }

    /// The worker's fast call (or its attempt) is over.
    #[inline(always)]
    pub fn leave(&self, runner: &Runner, door: &impl Door) {
        runner.leave();
        if self.pending.load(Relaxed) {
            self.settle(door);
        }
    }

    /// A slow-path call starts, counted.
    pub fn begin_call(&self, door: &impl Door) -> Result<(), Revoked> {
        if self.revoked() {
            return Err(Revoked);
        }
        self.refs.fetch_add(1, SeqCst);
        if self.revoked.load(SeqCst) {
            self.sub(1, door);
            return Err(Revoked);
        }
        Ok(())
    }

    /// The slow-path call that [`Refs::begin_call`] counted has ended.
    pub fn end_call(&self, door: &impl Door) {
        self.sub(1, door)
    }

    /// Holders counted now.
    pub fn holder_count(&self) -> u32 {
        self.holders.lock().counted
    }

    /// Another domain (or ticket) now holds the door.
    pub fn add_holder(&self) {
        let mut h = self.holders.lock();
        if self.revoked() {
            return;
        }
        h.counted += 1;
        self.refs.fetch_add(HOLDER, SeqCst);
    }

    /// A holder let go (released, died, or its ticket was dropped).
    pub fn drop_holder(&self, door: &impl Door) {
        if self.drop_holder_later() {
            self.settle(door)
        }
    }

    /// As [`Refs::drop_holder`], for one door of many that let go at once:
    /// true if it fell to zero, and then the caller passes it to
    /// [`Refs::settle_all`] with the others, which run one heavy fence
    /// between them rather than one each.
    pub fn drop_holder_later(&self) -> bool {
        let mut h = self.holders.lock();
        if self.revoked() || h.counted == 0 {
            return false;
        }
        h.counted -= 1;
        drop(h);
        self.fell(HOLDER)
    }

    /// No new call may start; the holders are dropped at once.
    pub fn revoke(&self, door: &impl Door) {
        let mut h = self.holders.lock();
        if self.revoked.swap(true, SeqCst) {
            return;
        }
        let n = std::mem::take(&mut h.counted) as u64;
        drop(h);
        if n > 0 {
            self.sub(n * HOLDER, door)
        }
    }

    fn sub(&self, n: u64, door: &impl Door) {
        if self.fell(n) {
            self.settle(door)
        }
    }

    /// Take `n` from the count; true if that made it zero (and its
    /// decision pending).
    fn fell(&self, n: u64) -> bool {
        if self.refs.fetch_sub(n, SeqCst) != n {
            return false;
        }
        fence(SeqCst); // (see `take_decision`)
        self.pending.store(true, SeqCst);
        true
    }

    /// Settle the doors whose falls [`Refs::drop_holder_later`] reported:
    /// as [`Refs::settle`] does for one, with one heavy fence before all
    /// the scans, and one more before the second scans of the doors handed
    /// to their workers. A door whose worker left between the two scans is
    /// settled on its own, as it would have been.
    pub fn settle_all<D: Door>(fallen: &[D], refs: impl Fn(&D) -> &Refs) {
        let deciding: Vec<&D> = fallen.iter().filter(|d| refs(d).take_decision()).collect();
        if deciding.is_empty() {
            return;
        }
        heavy();
        let mut handed = Vec::new();
        for d in deciding {
            let r = refs(d);
            if !d.runs(r.addr()) {
                if r.first_since_revoke() {
                    d.unreferenced();
                }
            } else {
                r.pending.store(true, SeqCst);
                handed.push(d);
            }
        }
        if handed.is_empty() {
            return;
        }
        heavy();
        for d in handed {
            let r = refs(d);
            if !d.runs(r.addr()) {
                r.settle(d);
            }
        }
    }

    /// `unreferenced` is pending: decide it, unless the door is held again
    /// (its next fall decides) or a worker still runs a fast call on it
    /// (that worker decides when it leaves).
    #[cold]
    fn settle(&self, door: &impl Door) {
        let decided = self.decide(door);
        if decided && self.first_since_revoke() {
            door.unreferenced();
        }
    }

    fn decide(&self, door: &impl Door) -> bool {
        loop {
            if !self.take_decision() {
                return false;
            }
            heavy();
            if !door.runs(self.addr()) {
                return true;
            }
            // A worker is in a call on the door: hand the decision over,
            // then look again, since it may have left before the flag was
            // back (and so not have seen it).
            self.pending.store(true, SeqCst);
            heavy();
            if door.runs(self.addr()) {
                return false;
            }
        }
    }

    /// Take the decision of a pending fall, if no one else has and the
    /// count is still zero (else whoever holds it, or the count's next
    /// fall, decides). The heavy fence and the scan come next.
    fn take_decision(&self) -> bool {
        if self
            .pending
            .compare_exchange(true, false, SeqCst, Relaxed)
            .is_err()
        {
            return false;
        }
        // Ordered against the fence between a fall's count and its flag:
        // if the count read below is not that fall's, the flag taken above
        // came before that fall's, which then decides.
        fence(SeqCst);
        // Still zero. (A read-modify-write, not a load: a worker whose
        // fence comes after the heavy one that follows then reads zero or
        // a later count, never the count before this fall.)
        if self.refs.compare_exchange(0, 0, SeqCst, Relaxed).is_err() {
            return false;
        }
        true
    }

    /// A decided fall to zero is delivered, unless the door is revoked and
    /// its one `unreferenced` was delivered already.
    fn first_since_revoke(&self) -> bool {
        if !self.revoked.load(SeqCst) {
            return true;
        }
        let mut h = self.holders.lock();
        !std::mem::replace(&mut h.final_unref_sent, true)
    }
}
