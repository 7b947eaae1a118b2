//! One slot's lease: its state word, its owner's mark, and the handshake
//! between an owner starting a call and a thread that wants the slot
//! (`lease` keeps the slots together, with the free list and the waiters).
//!
//! The word is `owner << 2 | phase`:
//!
//! - `FREE`: on the free list.
//! - `LEASED`: leased by `owner`. Whether the owner is in a call is in its
//!   claim's own mark, which only the owner writes, so a thread that needs
//!   a slot may take a leased one whose owner is between calls.
//! - `STEALING`: a thief is deciding whether the owner is in a call.
//! - `DRAINING`: its call was abandoned (deadline passed, or cancelled)
//!   and the server may still write the late reply into it. It is taken
//!   again only once the caller's `settled` check says the reply has landed
//!   (or the server died), so nothing the late server writes reaches the
//!   next call.
//!
//! The owner starts a call with no locked instruction ([`Ownership::begin`]):
//! it sets its mark, runs the light half of an asymmetric fence (`fence`),
//! and checks that the word still names it. A thief marks the word
//! `STEALING`, runs the heavy half, and reads the owner's mark. Each side
//! stores, fences and loads the other's word, so at least one sees the
//! other: the owner sees the theft and leases another slot, or the thief
//! sees the call and puts the word back. Every change of owner takes the
//! slot's lock, so one thief decides at a time. An owner that starts a call
//! while a thief decides gives the slot up even if the thief then backs
//! off; that costs it a new lease at most, and happens only while every
//! slot is leased.
//!
//! This file names nothing of the crate's but `super::sync`, so `model`
//! compiles it over loom's memory too; its host tests are `lease`'s.

use std::sync::Arc;
use std::sync::atomic::Ordering::*;

use super::sync::{AtomicU32, AtomicU64, Mutex, heavy, light};

const FREE: u64 = 0;
const LEASED: u64 = 1;
const STEALING: u64 = 2;
const DRAINING: u64 = 3;
const PHASE: u64 = 3;

/// Whether a claim's owner is in a call on it: written by the owner only,
/// read by a thief after the heavy fence.
type Mark = Arc<AtomicU32>;

/// A slot held by one lease: its index, the owner's token and mark.
#[derive(Debug, Clone)]
pub(crate) struct Claim {
    pub index: u32,
    token: u64,
    mark: Mark,
    /// Taken from `DRAINING`: the sequence of the abandoned call, whose
    /// late reply now sits in the slot (and may hold doors to release).
    pub drained: Option<u32>,
}

impl Claim {
    /// A claim of slot `index` by the owner `token` (never reused, so a
    /// stale claim cannot mistake the slot for its own), which starts in
    /// its first call.
    pub fn new(index: u32, token: u64, drained: Option<u32>) -> Claim {
        Claim {
            index,
            token: token << 2,
            mark: Arc::new(AtomicU32::new(1)),
            drained,
        }
    }

    fn word(&self) -> u64 {
        self.token | LEASED
    }
}

/// What a thief may find in a slot's word.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Found {
    /// Leased: its owner may be between calls.
    Leased(u64),
    /// Draining: its late reply may have landed.
    Draining(u64),
    /// Free, or another thief decides.
    Other,
}

/// One slot's state word and the mark of its owner's claim.
pub(crate) struct Ownership {
    word: AtomicU64,
    /// The owner's mark, under the lock every change of owner takes.
    mark: Mutex<Option<Mark>>,
}

impl Ownership {
    pub fn new() -> Ownership {
        Ownership {
            word: AtomicU64::new(FREE),
            mark: Mutex::new(None),
        }
    }

    /// The slot, just taken off the free list, goes to `c`.
    pub fn lease_free(&self, c: &Claim) {
        let mut mark = self.mark.lock();
        *mark = Some(c.mark.clone());
        self.word.store(c.word(), Release);
    }

    /// What a thief finds here now.
    pub fn peek(&self) -> Found {
        let cur = self.word.load(Relaxed);
        match cur & PHASE {
            LEASED => Found::Leased(cur),
            DRAINING => Found::Draining(cur),
            _ => Found::Other,
        }
    }

    /// A thief takes the slot for `c`, as it found it (`peek`): a drained
    /// one whose late reply has landed (the caller checked), or a leased
    /// one whose owner is between calls. False if that changed.
    pub fn take(&self, found: Found, c: &Claim) -> bool {
        let mut mark = self.mark.lock();
        let now = match found {
            Found::Leased(cur) if self.owner_between_calls(cur, &mark) => (cur & !PHASE) | STEALING,
            Found::Draining(cur) => cur,
            _ => return false,
        };
        // (Fails only if the owner abandoned its lease meanwhile.)
        if self
            .word
            .compare_exchange(now, c.word(), Acquire, Relaxed)
            .is_err()
        {
            return false;
        }
        *mark = Some(c.mark.clone());
        true
    }

    /// With the slot's lock held: mark the leased word `cur` stolen and see
    /// whether its owner is between calls. True leaves it `STEALING` for
    /// the thief to take; false puts it back.
    fn owner_between_calls(&self, cur: u64, mark: &Option<Mark>) -> bool {
        let stealing = (cur & !PHASE) | STEALING;
        if self
            .word
            .compare_exchange(cur, stealing, Relaxed, Relaxed)
            .is_err()
        {
            return false;
        }
        heavy();
        if mark.as_ref().is_none_or(|m| m.load(Acquire) == 0) {
            return true;
        }
        // In a call: it keeps the slot (unless it abandoned it meanwhile).
        let _ = self.word.compare_exchange(stealing, cur, Relaxed, Relaxed);
        false
    }

    /// The owner starts a call: false if the slot was taken meanwhile (the
    /// claim is void; lease another). No locked instruction: see the
    /// module's doc for the pair of fences that stands in for one.
    #[inline]
    pub fn begin(&self, c: &Claim) -> bool {
        c.mark.store(1, Relaxed);
        light();
        if self.word.load(Acquire) == c.word() {
            return true;
        }
        c.mark.store(0, Release);
        false
    }

    /// The owner's call is over (or its claim is dropped).
    #[inline]
    pub fn end(&self, c: &Claim) {
        c.mark.store(0, Release);
    }

    /// The owner abandons its call: the slot drains until its late reply
    /// lands. The claim is void.
    pub fn abandon(&self, c: &Claim) {
        // (A swap where a store would do: loom orders a store only partly
        // against other threads' read-modify-writes, and this path is rare.)
        self.word.swap(c.token | DRAINING, AcqRel);
        c.mark.store(0, Release);
    }

    /// Free the slot if `c` still leases it (not taken, not draining), under
    /// the lock a thief holds while it decides. True: the caller puts it on
    /// the free list.
    pub fn free(&self, c: &Claim) -> bool {
        let mut mark = self.mark.lock();
        if self
            .word
            .compare_exchange(c.word(), FREE, AcqRel, Relaxed)
            .is_err()
        {
            return false;
        }
        *mark = None;
        true
    }
}
