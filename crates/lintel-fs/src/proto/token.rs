//! The token and the share lock: the protocol over one descriptor of a
//! session's shared page, as plain functions over its words, so both sides
//! and every interleaving are tested on the host. The layout constants are
//! public: they are the protocol (and what a hostile client test forges).
//!
//! A descriptor stands for one open file used by one client process. The
//! token for a file guards its shared offset, its size and the client's
//! window; at most one descriptor per file holds it (`PASSIVE` or
//! `ACTIVE`), the others are `INVALID`. The client moves its own token
//! between `PASSIVE` and `ACTIVE` without a call; the service takes it
//! back (`INVALID`) when another client, or a call on the copy path, needs
//! the file.
//!
//! The share lock serializes the two sides on the descriptor's words, and
//! orders them: the client's hot functions touch the words inside it
//! with relaxed loads and stores, so an operation costs the lock's two
//! atomic read-modify-writes at each end and nothing more (each
//! sequentially consistent store is a locked instruction on x86, a full
//! barrier on every read through the window). An operation that cannot
//! wait for the service (a seek, a read inside the window) runs wholly
//! inside one taking of the lock, the token left `PASSIVE`
//! (`client_short`): two read-modify-writes in all. A positional read
//! need not take the lock at all (`client_passive_size`). The
//! client spins on it (it trusts the service); the service takes it with
//! test-and-set and sleeps with a timeout (it trusts no client). Both use
//! the same three-state futex mutex: 0 free, 1 held, 2 held with a
//! sleeper, whose unlock wakes. A client that keeps the lock, or keeps its
//! token `ACTIVE` after being asked for it back, past the timeout, or that
//! leaves values in the descriptor no honest client writes, is reported
//! as `Misbehaved`: the service evicts it.

use std::sync::atomic::Ordering::{Acquire, Relaxed, Release, SeqCst};
use std::sync::atomic::{AtomicU32, AtomicU64};
use std::time::{Duration, Instant};

use crate::proto::types::{Stat, Timespec};
use lintel_sys::Mapping;

/// Bytes per descriptor.
pub const DESC: usize = 512;
/// Descriptors in a session's shared page.
pub const SLOTS: usize = 64;
/// The shared page's length.
pub const PAGE_LEN: usize = DESC * SLOTS;

// Word offsets within a descriptor.
/// The share lock, a 32-bit futex word: 0 free, 1 held, 2 held with a
/// sleeper.
pub const LOCK: usize = 0;
/// The token's state, a 32-bit word: [`INVALID`], [`PASSIVE`], [`ACTIVE`]
/// or [`RECALLING`]; the service sleeps on it while it waits for an
/// `ACTIVE` token.
pub const STATE: usize = 4;
/// A 32-bit word the service sets to 1 (under the lock) to ask for an
/// `ACTIVE` token back; the client gives it back when its operation ends.
pub const RECALL: usize = 8;
/// The open file's shared offset while the token is here.
pub const OFFSET: usize = 16;
/// The file's size while the token is here.
pub const SIZE: usize = 24;
/// The file offset where the client's window starts.
pub const WIN_OFF: usize = 32;
/// The window's length in bytes; 0: no window.
pub const WIN_LEN: usize = 40;
/// Start of the range the client may have written through its window
/// since the grant (a grant stores `u64::MAX`: nothing written).
pub const DIRTY_LO: usize = 48;
/// End (exclusive) of that range; the range is empty unless it is above
/// [`DIRTY_LO`]'s value.
pub const DIRTY_HI: usize = 56;
/// The file's metadata as of the grant, for `stat` without a call:
/// [`STAT_WORDS`] words (see [`Stat`]).
pub const STAT: usize = 64;
/// The 64-bit words the metadata at [`STAT`] takes.
pub const STAT_WORDS: usize = 16;
/// The open file's status flags as of the grant ([`FLAG_APPEND`]), a
/// 32-bit word the service writes before it grants the token.
pub const FLAGS: usize = STAT + 8 * STAT_WORDS;
/// Writes through the window append (`O_APPEND`).
pub const FLAG_APPEND: u32 = 1;
/// The dirty map's chunk size, as a shift (a 32-bit word): chunk `i` is
/// bytes `[i << shift, (i + 1) << shift)`. A grant stores
/// [`MIN_DIRTY_SHIFT`]; the client raises it when it writes past what
/// the map covers (`client_mark`).
pub const DIRTY_SHIFT: usize = FLAGS + 4;
/// The dirty map: [`DIRTY_MAP_WORDS`] 64-bit words, one bit per chunk,
/// set for each chunk the client may have written through its window
/// since the grant. What is written back is the set chunks within
/// [`DIRTY_LO`]..[`DIRTY_HI`] (and the token's size): the range bounds
/// it, the map says which parts of the range.
pub const DIRTY_MAP: usize = 256;
/// The 64-bit words of the dirty map.
pub const DIRTY_MAP_WORDS: usize = 32;
/// The smallest chunk: a page.
pub const MIN_DIRTY_SHIFT: u32 = 12;
/// Chunks the map holds.
const DIRTY_CHUNKS: u64 = DIRTY_MAP_WORDS as u64 * 64;

/// Token state: not held by this descriptor; the client asks the service
/// for it (`Session::acquire`).
pub const INVALID: u32 = 0;
/// Token state: held, with no operation under way; the service may take
/// it back at once.
pub const PASSIVE: u32 = 1;
/// Token state: held, with a client operation under way; the service asks
/// for it back through [`RECALL`] and waits.
pub const ACTIVE: u32 = 2;
/// Taken back by the service, which is writing out what the client
/// reported and then makes it `INVALID` (`recalled`). A client whose
/// service dies meanwhile writes it out itself (`salvage`): the service
/// may have stopped halfway.
pub const RECALLING: u32 = 3;

/// The words of one descriptor, wherever they live.
pub(crate) trait Words {
    fn w32(&self, off: usize) -> &AtomicU32;
    fn w64(&self, off: usize) -> &AtomicU64;
}

/// Descriptor `.1` of a session's shared page `.0`, as both sides map it.
pub(crate) struct Desc<'a>(pub &'a Mapping, pub usize);

impl Words for Desc<'_> {
    fn w32(&self, off: usize) -> &AtomicU32 {
        self.0.u32(self.1 * DESC + off)
    }
    fn w64(&self, off: usize) -> &AtomicU64 {
        self.0.u64(self.1 * DESC + off)
    }
}

/// What the token carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Held {
    pub offset: u64,
    pub size: u64,
    /// Bytes the client may have written through its window since the
    /// grant: `lo..hi` (empty if `lo >= hi`).
    pub dirty: (u64, u64),
}

impl Held {
    /// The value this holds for the descriptor word at `off`.
    fn word(&self, off: usize) -> u64 {
        match off {
            DIRTY_LO => self.dirty.0,
            DIRTY_HI => self.dirty.1,
            SIZE => self.size,
            _ => self.offset,
        }
    }
}

/// The order in which [`client_end`] stores what changed (release stores,
/// so another process sees any prefix of it, never a later store without
/// an earlier one).
const END_ORDER: [usize; 4] = [DIRTY_LO, DIRTY_HI, SIZE, OFFSET];

/// The client broke the protocol (kept the lock or the token too long,
/// or wrote values no honest client writes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Misbehaved(pub &'static str);

/// Largest offset or size a descriptor may hold (Linux's `off_t` limit).
pub const MAX_OFFSET: u64 = i64::MAX as u64;

fn lock_spin(lock: &AtomicU32) {
    let mut spins = 0u32;
    loop {
        if lock.compare_exchange(0, 1, Acquire, Relaxed).is_ok() {
            return;
        }
        spins += 1;
        if spins < 100 {
            std::hint::spin_loop();
        } else {
            // The service holds it for a few loads and stores: it is
            // running, or was preempted; let it run.
            std::thread::yield_now();
        }
    }
}

fn unlock(lock: &AtomicU32) {
    if lock.swap(0, Release) == 2 {
        lintel_sys::futex_wake(lock, u32::MAX);
    }
}

/// The service's side of the lock: test-and-set, then sleep until
/// `deadline` at the latest.
fn lock_until(lock: &AtomicU32, deadline: Instant, gone: &dyn Fn() -> bool) -> Result<(), Untaken> {
    if lock.compare_exchange(0, 1, SeqCst, SeqCst).is_ok() {
        return Ok(());
    }
    loop {
        // Mark a sleeper; any value but 0 is "held" (a client may write
        // anything here).
        if lock.swap(2, SeqCst) == 0 {
            return Ok(());
        }
        if gone() {
            return Err(Untaken::Gone);
        }
        let now = Instant::now();
        if now >= deadline {
            return Err(Untaken::Misbehaved(Misbehaved(
                "held the share lock past the timeout",
            )));
        }
        lintel_sys::futex_wait(lock, 2, Some((deadline - now).min(GONE_POLL)));
    }
}

/// How often a wait for a client looks whether its process is gone: a
/// dead client wakes nobody, and what it wrote must not wait for the
/// timeout meant for live ones.
const GONE_POLL: Duration = Duration::from_millis(5);

/// Why the service could not take a token back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Untaken {
    /// The client broke the protocol.
    Misbehaved(Misbehaved),
    /// Its process is gone while it held the lock or the token `ACTIVE`:
    /// its last stores stand ([`peek`]).
    Gone,
}

// ---- the client's side ----

/// What the client finds when it starts an operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Begin {
    /// The token is now `ACTIVE`: use what it carries, then [`client_end`].
    Ready(Held, (u64, u64)),
    /// The token is not here: ask the service for it, then begin again.
    Acquire,
}

/// Start an operation: take the token from `PASSIVE` to `ACTIVE`.
pub(crate) fn client_begin(d: &impl Words) -> Begin {
    lock_spin(d.w32(LOCK));
    let r = if d.w32(STATE).load(Relaxed) == PASSIVE {
        d.w32(STATE).store(ACTIVE, Relaxed);
        let held = Held {
            offset: d.w64(OFFSET).load(Relaxed),
            size: d.w64(SIZE).load(Relaxed),
            dirty: (d.w64(DIRTY_LO).load(Relaxed), d.w64(DIRTY_HI).load(Relaxed)),
        };
        let window = (d.w64(WIN_OFF).load(Relaxed), d.w64(WIN_LEN).load(Relaxed));
        Begin::Ready(held, window)
    } else {
        Begin::Acquire
    };
    unlock(d.w32(LOCK));
    r
}

/// A short operation: if the token is here and `PASSIVE`, run `f` inside
/// the share lock on what the token carries and the window, and store
/// what it changed before the lock goes ([`END_ORDER`]). Two atomic
/// read-modify-writes in all, against four for [`client_begin`] and
/// [`client_end`], and the token never `ACTIVE`: the lock alone keeps the
/// service, and this process's other threads, off the words meanwhile.
/// `None`: the token is not here, or `f` declined (returned `None`),
/// and nothing was stored.
///
/// `f` must not wait for the service: no call, nothing but loads and
/// stores of memory that is mapped, or that the pager maps without the
/// lock. (A recall meanwhile sleeps on the lock, with its timeout.)
#[inline]
pub(crate) fn client_short<R>(
    d: &impl Words,
    f: impl FnOnce(&mut Held, (u64, u64)) -> Option<R>,
) -> Option<R> {
    lock_spin(d.w32(LOCK));
    let mut r = None;
    if d.w32(STATE).load(Relaxed) == PASSIVE {
        let before = Held {
            offset: d.w64(OFFSET).load(Relaxed),
            size: d.w64(SIZE).load(Relaxed),
            dirty: (d.w64(DIRTY_LO).load(Relaxed), d.w64(DIRTY_HI).load(Relaxed)),
        };
        let window = (d.w64(WIN_OFF).load(Relaxed), d.w64(WIN_LEN).load(Relaxed));
        let mut held = before;
        r = f(&mut held, window);
        if r.is_some() {
            for word in END_ORDER {
                if held.word(word) != before.word(word) {
                    d.w64(word).store(held.word(word), Release);
                }
            }
        }
    }
    unlock(d.w32(LOCK));
    r
}

/// The file's size if the token is here and `PASSIVE`: a positional
/// read may then copy from the cache without the lock, and stands if
/// [`client_still_passive`] holds after the copy (a seqlock read: the
/// service can only take a `PASSIVE` token, never change what it
/// carries, so if it is still `PASSIVE` nobody else wrote the file in
/// between). Other threads of the client are the client's to exclude.
#[inline]
pub(crate) fn client_passive_size(d: &impl Words) -> Option<u64> {
    if d.w32(STATE).load(Acquire) != PASSIVE {
        return None;
    }
    Some(d.w64(SIZE).load(Relaxed))
}

/// After a lock-free read begun with [`client_passive_size`]: whether
/// the token stayed `PASSIVE` here throughout.
#[inline]
pub(crate) fn client_still_passive(d: &impl Words) -> bool {
    std::sync::atomic::fence(Acquire);
    d.w32(STATE).load(Relaxed) == PASSIVE
}

/// End an operation begun with [`client_begin`]: store what changed, and
/// leave the token `PASSIVE`, or give it back if the service asked for it
/// meanwhile (waking the service, which waits on the state word).
///
/// The dirty range is stored before the size ([`END_ORDER`]; release
/// stores, free on x86): a client killed between the two leaves a range that covers what
/// it wrote and a size that may lag it, never a size past bytes it did
/// not report, which would put zeros nobody wrote in the host file.
pub(crate) fn client_end(d: &impl Words, held: Held) {
    lock_spin(d.w32(LOCK));
    for word in END_ORDER {
        d.w64(word).store(held.word(word), Release);
    }
    // The service writes RECALL under the lock only.
    let recalled = d.w32(RECALL).load(Relaxed) != 0;
    if recalled {
        d.w32(RECALL).store(0, Relaxed);
    }
    d.w32(STATE)
        .store(if recalled { INVALID } else { PASSIVE }, Relaxed);
    unlock(d.w32(LOCK));
    if recalled {
        lintel_sys::futex_wake(d.w32(STATE), u32::MAX);
    }
}

/// Mark bytes `[lo, hi)` in the dirty map: the client does it inside
/// an operation, before [`client_end`] stores the range that bounds the
/// write, so a range another process reads never covers a write whose
/// chunks are unmarked. While the token is `ACTIVE` only the client
/// writes the map: plain loads and stores. A write past what the map
/// covers makes the chunks larger ([`coarsen`]) until it fits.
#[inline]
pub(crate) fn client_mark(d: &impl Words, lo: u64, hi: u64) {
    if lo >= hi {
        return;
    }
    let mut shift = d.w32(DIRTY_SHIFT).load(Relaxed);
    if !(MIN_DIRTY_SHIFT..64).contains(&shift) {
        // Only a coarsening cut short leaves this, and only in a process
        // now dead; the service stored a valid one at the grant.
        shift = MIN_DIRTY_SHIFT;
    }
    if (hi - 1) >> shift >= DIRTY_CHUNKS {
        shift = coarsen(d, shift, hi - 1);
    }
    let (first, last) = (lo >> shift, (hi - 1) >> shift);
    for word in first / 64..=last / 64 {
        let from = if word == first / 64 { first % 64 } else { 0 };
        let to = if word == last / 64 { last % 64 } else { 63 };
        let bits = (u64::MAX >> (63 - (to - from))) << from;
        let w = d.w64(DIRTY_MAP + 8 * word as usize);
        w.store(w.load(Relaxed) | bits, Relaxed);
    }
}

/// Clear the dirty map: the client has written back, itself, all that it
/// marked (a sync made without a call), and [`client_end`] stores the
/// empty range. Inside an operation, as [`client_mark`]; after the
/// write-back, so that a client that dies between the two leaves the
/// service a range to write again, never bytes unwritten.
pub(crate) fn client_clean(d: &impl Words) {
    for i in 0..DIRTY_MAP_WORDS {
        d.w64(DIRTY_MAP + 8 * i).store(0, Relaxed);
    }
}

/// The dirty range of a token that holds nothing written.
pub(crate) const CLEAN: (u64, u64) = (u64::MAX, 0);

/// Grow the chunks from `1 << shift` bytes until byte `last` falls in
/// the map, folding the bits (a new chunk is dirty if any old one in it
/// was); the new shift. Rare: once per doubling of the file's written
/// extent past 8 MiB. The shift word holds 0 while the bits are
/// refolded, so a client killed halfway leaves a map the service reads as
/// "all of the range" ([`DirtyMap::runs`]).
#[cold]
fn coarsen(d: &impl Words, shift: u32, last: u64) -> u32 {
    let mut to = shift;
    while last >> to >= DIRTY_CHUNKS {
        to += 1;
    }
    let by = to - shift;
    d.w32(DIRTY_SHIFT).store(0, Relaxed);
    std::sync::atomic::fence(Release);
    let old: [u64; DIRTY_MAP_WORDS] = std::array::from_fn(|i| d.w64(DIRTY_MAP + 8 * i).load(Relaxed));
    let mut new = [0u64; DIRTY_MAP_WORDS];
    for chunk in 0..DIRTY_CHUNKS {
        if old[chunk as usize / 64] & (1 << (chunk % 64)) != 0 {
            let c = chunk >> by;
            new[c as usize / 64] |= 1 << (c % 64);
        }
    }
    for (i, w) in new.iter().enumerate() {
        d.w64(DIRTY_MAP + 8 * i).store(*w, Relaxed);
    }
    d.w32(DIRTY_SHIFT).store(to, Release);
    to
}

/// The dirty map as one side read it: which chunks of the range a client
/// reported may hold its writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DirtyMap {
    shift: u32,
    words: [u64; DIRTY_MAP_WORDS],
}

impl DirtyMap {
    /// A map that marks everything: a range is written back whole.
    #[cfg(test)]
    pub(crate) const ALL: DirtyMap = DirtyMap {
        shift: 0,
        words: [0; DIRTY_MAP_WORDS],
    };

    /// The byte runs of `[lo, hi)` in marked chunks, in order, adjacent
    /// ones joined. A shift no honest client leaves (one cut short by its
    /// death while coarsening, or a hostile client's value) marks all of
    /// `[lo, hi)`: writing back more of the cache than was written puts
    /// back bytes the host already has, or that the holder wrote.
    pub(crate) fn runs(&self, lo: u64, hi: u64) -> Vec<(u64, u64)> {
        let mut runs: Vec<(u64, u64)> = Vec::new();
        if lo >= hi {
            return runs;
        }
        if !(MIN_DIRTY_SHIFT..64).contains(&self.shift) {
            runs.push((lo, hi));
            return runs;
        }
        let shift = self.shift;
        let first = lo >> shift;
        let last = ((hi - 1) >> shift).min(DIRTY_CHUNKS - 1);
        let mut chunk = first;
        while chunk <= last {
            if self.words[chunk as usize / 64] & (1 << (chunk % 64)) != 0 {
                let from = (chunk << shift).max(lo);
                let to = ((u128::from(chunk) + 1) << shift).min(u128::from(hi)) as u64;
                match runs.last_mut() {
                    Some(r) if r.1 == from => r.1 = to,
                    _ => runs.push((from, to)),
                }
            }
            chunk += 1;
        }
        runs
    }
}

/// Read the dirty map (after [`take`], [`peek`] or [`salvage`]).
pub(crate) fn dirty_map(d: &impl Words) -> DirtyMap {
    DirtyMap {
        shift: d.w32(DIRTY_SHIFT).load(SeqCst),
        words: std::array::from_fn(|i| d.w64(DIRTY_MAP + 8 * i).load(SeqCst)),
    }
}

/// The service is dead: take this client's token back for its own
/// write-back (the client's keeper). `None` if the token was not here.
///
/// The lock is taken if it can be within a moment; a service killed while
/// it held the lock never lets it go, and then the words are read without
/// it (a thread of ours caught halfway through [`client_end`] has stored a
/// prefix of [`END_ORDER`], which is consistent).
pub(crate) fn salvage(d: &impl Words) -> Option<Held> {
    let lock = d.w32(LOCK);
    let until = Instant::now() + Duration::from_millis(50);
    let locked = loop {
        if lock.compare_exchange(0, 1, Acquire, Relaxed).is_ok() {
            break true;
        }
        if Instant::now() >= until {
            break false;
        }
        std::thread::yield_now();
    };
    let state = d.w32(STATE).load(Acquire);
    let held = matches!(state, PASSIVE | ACTIVE | RECALLING).then(|| {
        d.w32(STATE).store(INVALID, Relaxed);
        peek(d)
    });
    if locked {
        unlock(lock);
    }
    held
}

// ---- the service's side ----

/// Give the token to this descriptor (`PASSIVE`), with the file's offset
/// and size and no window.
pub(crate) fn grant(
    d: &impl Words,
    offset: u64,
    size: u64,
    stat: &[u64; STAT_WORDS],
    deadline: Instant,
) -> Result<(), Misbehaved> {
    lock_until(d.w32(LOCK), deadline, &|| false).map_err(|e| match e {
        Untaken::Misbehaved(m) => m,
        Untaken::Gone => Misbehaved("left during a grant"),
    })?;
    d.w64(WIN_OFF).store(0, SeqCst);
    d.w64(WIN_LEN).store(0, SeqCst);
    hand_over(d, offset, size, stat);
    Ok(())
}

/// Under the lock: the token `PASSIVE` here with `offset`, `size` and
/// `stat`, nothing dirty; then the lock goes.
fn hand_over(d: &impl Words, offset: u64, size: u64, stat: &[u64; STAT_WORDS]) {
    d.w64(OFFSET).store(offset, SeqCst);
    d.w64(SIZE).store(size, SeqCst);
    d.w64(DIRTY_LO).store(CLEAN.0, SeqCst);
    d.w64(DIRTY_HI).store(CLEAN.1, SeqCst);
    d.w32(DIRTY_SHIFT).store(MIN_DIRTY_SHIFT, SeqCst);
    for i in 0..DIRTY_MAP_WORDS {
        d.w64(DIRTY_MAP + 8 * i).store(0, SeqCst);
    }
    for (i, w) in stat.iter().enumerate() {
        d.w64(STAT + 8 * i).store(*w, SeqCst);
    }
    d.w32(RECALL).store(0, SeqCst);
    d.w32(STATE).store(PASSIVE, SeqCst);
    unlock(d.w32(LOCK));
}

/// Set the open file's status flags for the next grant: called before
/// [`grant`], while the descriptor holds no token, so the client reads
/// them only once the grant has made them visible.
pub(crate) fn set_flags(d: &impl Words, flags: u32) {
    d.w32(FLAGS).store(flags, SeqCst);
}

/// The status flags of the grant the client holds.
pub(crate) fn flags(d: &impl Words) -> u32 {
    d.w32(FLAGS).load(Relaxed)
}

/// Set the window (the client asked for it, holding its token `ACTIVE`).
pub(crate) fn set_window(d: &impl Words, off: u64, len: u64) {
    d.w64(WIN_OFF).store(off, SeqCst);
    d.w64(WIN_LEN).store(len, SeqCst);
}

/// What a descriptor holds, read without the lock: for a client whose
/// process is gone (its lock may be held for ever), taking the last
/// values it stored.
pub(crate) fn peek(d: &impl Words) -> Held {
    let size = d.w64(SIZE).load(SeqCst).min(MAX_OFFSET);
    Held {
        offset: d.w64(OFFSET).load(SeqCst).min(MAX_OFFSET),
        size,
        dirty: (d.w64(DIRTY_LO).load(SeqCst), d.w64(DIRTY_HI).load(SeqCst)),
    }
}

/// The metadata stored at the grant.
pub(crate) fn stat_words(d: &impl Words) -> [u64; STAT_WORDS] {
    std::array::from_fn(|i| d.w64(STAT + 8 * i).load(SeqCst))
}

/// `s` as the [`STAT_WORDS`] words a grant stores at [`STAT`].
pub(crate) fn stat_to_words(s: &Stat) -> [u64; STAT_WORDS] {
    [
        s.dev,
        s.ino,
        s.mode as u64,
        s.nlink,
        s.uid as u64,
        s.gid as u64,
        s.rdev,
        s.size,
        s.blksize,
        s.blocks,
        s.atime.sec as u64,
        s.atime.nsec as u64,
        s.mtime.sec as u64,
        s.mtime.nsec as u64,
        s.ctime.sec as u64,
        s.ctime.nsec as u64,
    ]
}

/// The metadata a descriptor carries, with the token's size.
pub(crate) fn stat_from_words(w: &[u64; STAT_WORDS], size: u64) -> Stat {
    let t = |i: usize| Timespec {
        sec: w[i] as i64,
        nsec: w[i + 1] as u32,
    };
    Stat {
        dev: w[0],
        ino: w[1],
        mode: w[2] as u32,
        nlink: w[3],
        uid: w[4] as u32,
        gid: w[5] as u32,
        rdev: w[6],
        size,
        blksize: w[8],
        blocks: w[9],
        atime: t(10),
        mtime: t(12),
        ctime: t(14),
    }
}

/// Take the token back: at once if `PASSIVE`; if `ACTIVE`, ask for it and
/// wait until the client ends its operation, at most until `deadline`.
/// Returns what the token carried, checked. `gone` says whether the
/// client's process has ended: a wait for it then stops at once
/// ([`Untaken::Gone`]).
pub(crate) fn take(d: &impl Words, deadline: Instant, gone: &dyn Fn() -> bool) -> Result<Held, Untaken> {
    let bad = |why| Err(Untaken::Misbehaved(Misbehaved(why)));
    lock_until(d.w32(LOCK), deadline, gone)?;
    loop {
        match d.w32(STATE).load(SeqCst) {
            PASSIVE | INVALID | RECALLING => break,
            ACTIVE => {
                d.w32(RECALL).store(1, SeqCst);
                unlock(d.w32(LOCK));
                if gone() {
                    return Err(Untaken::Gone);
                }
                let now = Instant::now();
                if now >= deadline {
                    return bad("kept its token active past the timeout");
                }
                lintel_sys::futex_wait(d.w32(STATE), ACTIVE, Some((deadline - now).min(GONE_POLL)));
                lock_until(d.w32(LOCK), deadline, gone)?;
            }
            _ => {
                unlock(d.w32(LOCK));
                return bad("wrote an unknown token state");
            }
        }
    }
    let held = Held {
        offset: d.w64(OFFSET).load(SeqCst),
        size: d.w64(SIZE).load(SeqCst),
        dirty: (d.w64(DIRTY_LO).load(SeqCst), d.w64(DIRTY_HI).load(SeqCst)),
    };
    d.w32(STATE).store(RECALLING, SeqCst);
    d.w32(RECALL).store(0, SeqCst);
    unlock(d.w32(LOCK));
    if held.offset > MAX_OFFSET || held.size > MAX_OFFSET {
        return bad("wrote an offset or size beyond any file");
    }
    Ok(held)
}

/// Give the token straight back to the descriptor [`take`] took it from,
/// once what it carried is written out (a sync): `PASSIVE` again with the
/// offset and size it carried, its window kept, nothing dirty, and the
/// file's metadata `stat`. The client never sees it gone: an operation it
/// begins meanwhile finds it `RECALLING`, asks for it, and the service
/// answers once this is done. A client that wrote the state meanwhile
/// broke the protocol.
pub(crate) fn regrant(
    d: &impl Words,
    held: Held,
    stat: &[u64; STAT_WORDS],
    deadline: Instant,
    gone: &dyn Fn() -> bool,
) -> Result<(), Untaken> {
    lock_until(d.w32(LOCK), deadline, gone)?;
    if d.w32(STATE).load(SeqCst) != RECALLING {
        unlock(d.w32(LOCK));
        return Err(Untaken::Misbehaved(Misbehaved(
            "wrote its token's state while the service held it",
        )));
    }
    hand_over(d, held.offset, held.size, stat);
    Ok(())
}

/// The service has written out what [`take`] returned: the token is
/// `INVALID` (unless the client wrote something else there since, which
/// the next grant or take judges).
pub(crate) fn recalled(d: &impl Words) {
    let _ = d.w32(STATE).compare_exchange(RECALLING, INVALID, SeqCst, SeqCst);
}

/// A descriptor of words in private memory, for tests.
#[cfg(test)]
pub(crate) struct Plain(pub Vec<AtomicU64>);

#[cfg(test)]
impl Plain {
    pub(crate) fn new() -> Plain {
        Plain((0..DESC / 8).map(|_| AtomicU64::new(0)).collect())
    }
}

#[cfg(test)]
impl Words for Plain {
    fn w32(&self, off: usize) -> &AtomicU32 {
        assert!(off.is_multiple_of(4) && off + 4 <= DESC);
        let w = &self.0[off / 8];
        // SAFETY: test-only view of half of an AtomicU64 as an AtomicU32:
        // same alignment (4 divides 8), inside the word, and only ever
        // accessed atomically.
        #[allow(unsafe_code)]
        unsafe {
            &*((w as *const AtomicU64 as *const AtomicU32).add((off % 8) / 4))
        }
    }
    fn w64(&self, off: usize) -> &AtomicU64 {
        &self.0[off / 8]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// Poll `f` for up to 10 s.
    fn eventually(mut f: impl FnMut() -> bool) -> bool {
        let end = Instant::now() + Duration::from_secs(10);
        while Instant::now() < end {
            if f() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        false
    }

    fn soon() -> Instant {
        Instant::now() + Duration::from_secs(10)
    }

    #[test]
    fn a_passive_token_goes_active_without_a_call_and_back() {
        let d = Plain::new();
        assert_eq!(client_begin(&d), Begin::Acquire, "no token yet");
        grant(&d, 7, 100, &[0; STAT_WORDS], soon()).unwrap();
        let Begin::Ready(held, window) = client_begin(&d) else {
            panic!("granted")
        };
        assert_eq!((held.offset, held.size, window), (7, 100, (0, 0)));
        assert_eq!(d.w32(STATE).load(SeqCst), ACTIVE);
        client_end(
            &d,
            Held {
                offset: 9,
                size: 120,
                dirty: (7, 9),
            },
        );
        assert_eq!(d.w32(STATE).load(SeqCst), PASSIVE);
        // The service takes a passive token at once, with what it carries.
        let held = take(&d, soon(), &|| false).unwrap();
        assert_eq!(
            held,
            Held {
                offset: 9,
                size: 120,
                dirty: (7, 9)
            }
        );
        assert_eq!(client_begin(&d), Begin::Acquire, "taken back");
    }

    /// A sync takes the token, writes out what it carried and gives it
    /// straight back: the client finds it as it left it, window and all,
    /// with nothing dirty, and a client that wrote the state while the
    /// service held it is caught.
    #[test]
    fn a_regrant_leaves_the_token_where_it_was_with_nothing_dirty() {
        let d = Plain::new();
        grant(&d, 0, 100, &[0; STAT_WORDS], soon()).unwrap();
        set_window(&d, 65536, 65536);
        let Begin::Ready(_, _) = client_begin(&d) else {
            panic!("granted")
        };
        client_mark(&d, 70_000, 70_100);
        let wrote = Held {
            offset: 70_100,
            size: 70_100,
            dirty: (70_000, 70_100),
        };
        client_end(&d, wrote);
        let held = take(&d, soon(), &|| false).unwrap();
        assert_eq!(held, wrote);
        assert!(dirty_map(&d).words.iter().any(|w| *w != 0), "marked");
        // An operation begun while the service writes out asks for it.
        assert_eq!(client_begin(&d), Begin::Acquire);
        regrant(&d, held, &[5; STAT_WORDS], soon(), &|| false).unwrap();
        let Begin::Ready(again, window) = client_begin(&d) else {
            panic!("given back")
        };
        assert_eq!(
            (again.offset, again.size, again.dirty, window),
            (70_100, 70_100, (u64::MAX, 0), (65536, 65536))
        );
        assert!(dirty_map(&d).words.iter().all(|w| *w == 0), "nothing dirty");
        assert_eq!(stat_words(&d), [5; STAT_WORDS]);
        client_end(&d, again);
        // The state written while the service held the token.
        let held = take(&d, soon(), &|| false).unwrap();
        d.w32(STATE).store(PASSIVE, SeqCst);
        assert!(matches!(
            regrant(&d, held, &[0; STAT_WORDS], soon(), &|| false),
            Err(Untaken::Misbehaved(_))
        ));
        assert_eq!(d.w32(LOCK).load(SeqCst), 0, "the lock is not left held");
    }

    #[test]
    fn a_lock_free_read_stands_only_while_the_token_rests_here() {
        let d = Plain::new();
        assert_eq!(client_passive_size(&d), None, "no token");
        grant(&d, 0, 100, &[0; STAT_WORDS], soon()).unwrap();
        assert_eq!(client_passive_size(&d), Some(100));
        assert!(client_still_passive(&d));
        // Taken back during the copy: the read does not stand.
        take(&d, soon(), &|| false).unwrap();
        assert!(!client_still_passive(&d));
        assert_eq!(client_passive_size(&d), None);
        // Active (another thread of the client works under it): not tried.
        grant(&d, 0, 100, &[0; STAT_WORDS], soon()).unwrap();
        let Begin::Ready(held, _) = client_begin(&d) else {
            panic!("granted")
        };
        assert_eq!(client_passive_size(&d), None);
        client_end(&d, held);
        assert_eq!(client_passive_size(&d), Some(100));
    }

    #[test]
    fn an_active_token_is_recalled_when_the_client_ends() {
        let d = Arc::new(Plain::new());
        grant(&*d, 0, 10, &[0; STAT_WORDS], soon()).unwrap();
        assert!(matches!(client_begin(&*d), Begin::Ready(..)));
        let service = {
            let d = d.clone();
            std::thread::spawn(move || take(&*d, soon(), &|| false))
        };
        // The service waits for the client: it asked for the token back.
        assert!(eventually(|| d.w32(RECALL).load(SeqCst) == 1));
        assert!(!service.is_finished());
        client_end(
            &*d,
            Held {
                offset: 5,
                size: 10,
                dirty: (1, 0),
            },
        );
        assert_eq!(service.join().unwrap().unwrap().offset, 5);
        assert_eq!(
            d.w32(STATE).load(SeqCst),
            RECALLING,
            "given back, not kept passive"
        );
        recalled(&*d);
        assert_eq!(d.w32(STATE).load(SeqCst), INVALID, "written out");
    }

    #[test]
    fn a_client_that_keeps_the_lock_or_the_token_or_writes_garbage_is_caught() {
        let d = Plain::new();
        let brief = || Instant::now() + Duration::from_millis(100);
        // The lock held and never let go (any non-zero value holds it).
        d.w32(LOCK).store(77, SeqCst);
        assert!(take(&d, brief(), &|| false).is_err());
        assert!(grant(&d, 0, 0, &[0; STAT_WORDS], brief()).is_err());
        d.w32(LOCK).store(0, SeqCst);
        // The token kept active.
        grant(&d, 0, 0, &[0; STAT_WORDS], soon()).unwrap();
        assert!(matches!(client_begin(&d), Begin::Ready(..)));
        let started = Instant::now();
        assert_eq!(
            take(&d, brief(), &|| false),
            Err(Untaken::Misbehaved(Misbehaved(
                "kept its token active past the timeout"
            )))
        );
        assert!(started.elapsed() < Duration::from_secs(30));
        // Garbage in the state and the size.
        d.w32(STATE).store(9, SeqCst);
        assert_eq!(
            take(&d, soon(), &|| false),
            Err(Untaken::Misbehaved(Misbehaved("wrote an unknown token state")))
        );
        d.w32(STATE).store(PASSIVE, SeqCst);
        d.w64(SIZE).store(u64::MAX, SeqCst);
        assert!(take(&d, soon(), &|| false).is_err());
        assert_eq!(
            d.w32(LOCK).load(SeqCst),
            0,
            "the service never leaves the lock held"
        );
    }

    #[test]
    fn a_client_gone_with_the_lock_or_an_active_token_is_not_waited_for() {
        let d = Plain::new();
        grant(&d, 0, 10, &[0; STAT_WORDS], soon()).unwrap();
        // Killed holding the lock: the wait ends when its death is known,
        // not at the timeout.
        d.w32(LOCK).store(1, SeqCst);
        let far = Instant::now() + Duration::from_secs(3600);
        assert_eq!(take(&d, far, &|| true), Err(Untaken::Gone));
        d.w32(LOCK).store(0, SeqCst);
        // Killed with its token active.
        assert!(matches!(client_begin(&d), Begin::Ready(..)));
        assert_eq!(take(&d, far, &|| true), Err(Untaken::Gone));
        assert_eq!(d.w32(LOCK).load(SeqCst), 0, "the lock is not left held");
    }

    #[test]
    fn a_client_salvages_its_token_until_the_service_has_written_it_out() {
        let d = Plain::new();
        assert_eq!(salvage(&d), None, "never granted");
        grant(&d, 0, 10, &[0; STAT_WORDS], soon()).unwrap();
        let Begin::Ready(..) = client_begin(&d) else {
            panic!("granted")
        };
        let wrote = Held {
            offset: 20,
            size: 20,
            dirty: (10, 20),
        };
        client_end(&d, wrote);
        assert_eq!(take(&d, soon(), &|| false), Ok(wrote));
        // The service died before it wrote the token out: still ours.
        assert_eq!(salvage(&d), Some(wrote));
        assert_eq!(salvage(&d), None, "once");
        grant(&d, 0, 10, &[0; STAT_WORDS], soon()).unwrap();
        take(&d, soon(), &|| false).unwrap();
        recalled(&d);
        assert_eq!(salvage(&d), None, "written out by the service");
    }

    #[test]
    fn an_operation_ended_halfway_reports_no_size_past_its_dirty_range() {
        // The stores of `client_end` in its order, cut after each: whatever
        // prefix a killed client leaves, the size it reports is covered by
        // the dirty range (or is the size it had).
        let before = Held {
            offset: 0,
            size: 100,
            dirty: (u64::MAX, 0),
        };
        let after = Held {
            offset: 300,
            size: 300,
            dirty: (100, 300),
        };
        for cut in 0..=END_ORDER.len() {
            let d = Plain::new();
            grant(&d, before.offset, before.size, &[0; STAT_WORDS], soon()).unwrap();
            let Begin::Ready(..) = client_begin(&d) else {
                panic!("granted")
            };
            for &w in &END_ORDER[..cut] {
                d.w64(w).store(after.word(w), SeqCst);
            }
            let h = peek(&d);
            let covered = h.size <= before.size || (h.dirty.0 <= before.size && h.dirty.1 >= h.size);
            assert!(covered, "cut after {cut} stores: {h:?}");
        }
        let d = Plain::new();
        grant(&d, 0, 0, &[0; STAT_WORDS], soon()).unwrap();
        client_begin(&d);
        client_end(&d, after);
        assert_eq!(peek(&d), after, "every word is stored");
    }

    #[test]
    fn the_lock_excludes_under_contention() {
        let d = Arc::new(Plain::new());
        // Two service threads (test-and-set, sleeping) and two client
        // threads (spinning) increment one word under the lock.
        let threads: Vec<_> = (0..4)
            .map(|i| {
                let d = d.clone();
                std::thread::spawn(move || {
                    for _ in 0..5000 {
                        if i < 2 {
                            lock_until(d.w32(LOCK), soon(), &|| false).unwrap();
                        } else {
                            lock_spin(d.w32(LOCK));
                        }
                        let v = d.w64(SIZE).load(SeqCst);
                        d.w64(SIZE).store(v + 1, SeqCst);
                        unlock(d.w32(LOCK));
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(d.w64(SIZE).load(SeqCst), 4 * 5000, "no increment lost");
    }

    fn granted() -> Plain {
        let d = Plain::new();
        grant(&d, 0, 0, &[0; STAT_WORDS], soon()).unwrap();
        d
    }

    #[test]
    fn the_dirty_map_gives_the_marked_pages_of_the_range_joined() {
        let d = granted();
        client_mark(&d, 10, 20);
        client_mark(&d, 4096, 4097); // the next page: joined to the first
        client_mark(&d, 40_000, 50_000);
        let map = dirty_map(&d);
        assert_eq!(map.runs(0, 100_000), vec![(0, 8192), (36_864, 53_248)]);
        // Clipped to the range asked for.
        assert_eq!(map.runs(100, 40_000), vec![(100, 8192), (36_864, 40_000)]);
        assert_eq!(map.runs(9000, 30_000), vec![]);
        assert_eq!(map.runs(5, 5), vec![]);
        // A new grant starts with nothing marked.
        grant(&d, 0, 0, &[0; STAT_WORDS], soon()).unwrap();
        assert_eq!(dirty_map(&d).runs(0, u64::MAX), vec![]);
    }

    #[test]
    fn a_map_left_halfway_through_coarsening_covers_the_whole_range() {
        let d = granted();
        client_mark(&d, 10, 20);
        // As a client killed between its two stores of the shift leaves it.
        d.w32(DIRTY_SHIFT).store(0, SeqCst);
        assert_eq!(dirty_map(&d).runs(7, 1 << 40), vec![(7, 1 << 40)]);
        // So does any value no client stores.
        d.w32(DIRTY_SHIFT).store(200, SeqCst);
        assert_eq!(dirty_map(&d).runs(7, 9), vec![(7, 9)]);
    }

    proptest::proptest! {
        /// Wherever and however much a client writes, every byte it wrote
        /// is in a run of the map, and the map marks little more: each
        /// write adds at most its own length and two chunks.
        #[test]
        fn every_byte_marked_is_in_a_run(writes in proptest::collection::vec(
            (0u64..1 << 44, 1u64..1 << 21), 1..40)
        ) {
            let d = granted();
            for &(at, len) in &writes {
                client_mark(&d, at, at + len);
            }
            let map = dirty_map(&d);
            let runs = map.runs(0, u64::MAX);
            for &(at, len) in &writes {
                for b in [at, at + len / 2, at + len - 1] {
                    proptest::prop_assert!(
                        runs.iter().any(|&(lo, hi)| lo <= b && b < hi),
                        "byte {} of a write at {}+{} is in no run", b, at, len
                    );
                }
            }
            let chunk = 1u64 << d.w32(DIRTY_SHIFT).load(SeqCst);
            let covered: u64 = runs.iter().map(|r| r.1 - r.0).sum();
            let bound: u64 = writes.iter().map(|&(_, len)| len + 2 * chunk).sum();
            proptest::prop_assert!(covered <= bound, "{} bytes marked for {:?}", covered, writes);
            for w in runs.windows(2) {
                proptest::prop_assert!(w[0].1 < w[1].0, "runs in order, apart: {:?}", runs);
            }
        }
    }
}
