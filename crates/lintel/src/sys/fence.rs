//! Asymmetric fences, for a handshake between two threads of this process
//! where one side runs on every call and the other rarely.
//!
//! Each side of such a handshake stores its word and must then see the
//! other's, which takes a full fence between the store and the load: a
//! locked instruction, some twenty cycles on every call. Here the frequent
//! side ([`light`]) only keeps the compiler from reordering, and the rare
//! side ([`heavy`]) has the kernel run a full barrier on every thread of
//! the process (`membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED)`, an
//! interrupt to each CPU that runs one of them). The pair orders as two full
//! fences would: a light side that the heavy side's barrier interrupts after
//! its store has made that store visible; one it interrupts before the store
//! reads, after the barrier, what the heavy side stored before it.
//!
//! Without the system call (an old kernel, a sandbox that filters it, a
//! tool such as valgrind that does not know it), both sides fence fully.
//! Only threads of this process are covered: the slot handshake with the
//! peer domain keeps its full fences.

use std::sync::atomic::{AtomicBool, Ordering::*, compiler_fence, fence};

/// Set once this process is registered for expedited barriers; until then,
/// and if registration fails, [`light`] is a full fence.
static READY: AtomicBool = AtomicBool::new(false);

/// Register this process for expedited barriers (done when a domain starts,
/// before any light fence runs; again in a forked child's new domain).
pub(crate) fn init() {
    READY.store(crate::sys::membarrier_register(), SeqCst);
}

/// The frequent side: orders this thread's store before its later load,
/// together with the other side's [`heavy`].
#[inline(always)]
pub(crate) fn light() {
    if READY.load(Relaxed) {
        compiler_fence(SeqCst);
    } else {
        fence(SeqCst);
    }
}

/// The rare side: a full barrier on every thread of this process.
pub(crate) fn heavy() {
    fence(SeqCst);
    if READY.load(Relaxed) && !crate::sys::membarrier() {
        // Registered, then refused: only a forked child whose registration
        // did not carry over, before its domain registers again. Its one
        // thread elided no fence a barrier should cover; from here on the
        // light side fences fully.
        READY.store(false, SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicU32, Ordering::*};

    use super::*;

    /// The store-buffer litmus test: each thread stores its word, fences,
    /// then loads the other's. With the pair of fences, never do both miss.
    /// (With compiler fences alone this fails within a few thousand rounds
    /// on x86: each store waits in its CPU's store buffer while the load
    /// runs.) The two sides meet before each round, each then a varying few
    /// turns late, so their windows overlap often.
    ///
    /// Bounded by rounds, not by time: a side that waits for the other
    /// spins briefly, then sleeps until the other wakes it, so on a busy
    /// machine the pair takes turns on the CPUs it gets instead of spinning
    /// away the other's share (the rounds where both ran at once are the
    /// ones that test the fences; a quiet machine gives nearly all).
    #[test]
    fn light_and_heavy_never_both_miss() {
        use std::thread::Thread;
        init();
        const ROUNDS: u32 = 50_000;
        let words = Arc::new([AtomicU32::new(0), AtomicU32::new(0)]);
        let seen = Arc::new([AtomicU32::new(0), AtomicU32::new(0)]);
        let met = Arc::new([AtomicU32::new(0), AtomicU32::new(0)]);
        let parked = Arc::new([AtomicBool::new(false), AtomicBool::new(false)]);
        // Mark `round`, wake the other side if it sleeps, and wait until it
        // has marked `round` too: a few polls, then sleep. (A side about to
        // sleep says so, then looks again: with the marking side's look at
        // that word after its mark, one of the two sees the other, so no
        // wake-up is lost. The wake costs the marking side nothing when the
        // other polls, which keeps the two sides' windows aligned.)
        let meet = |met: &[AtomicU32; 2], parked: &[AtomicBool; 2], me: usize, round: u32, other: &Thread| {
            met[me].store(round, SeqCst);
            if parked[1 - me].load(SeqCst) {
                other.unpark();
            }
            let mut polls = 0u32;
            while met[1 - me].load(Acquire) < round {
                polls += 1;
                if polls < 2_000 {
                    std::hint::spin_loop();
                } else {
                    parked[me].store(true, SeqCst);
                    if met[1 - me].load(SeqCst) < round {
                        std::thread::park();
                    }
                    parked[me].store(false, SeqCst);
                }
            }
        };
        let side = move |me: usize,
                         words: &[AtomicU32; 2],
                         seen: &[AtomicU32; 2],
                         (met, parked): (&[AtomicU32; 2], &[AtomicBool; 2]),
                         other: &Thread| {
            for round in 1..=ROUNDS {
                meet(met, parked, me, 2 * round - 1, other);
                for _ in 0..(round.wrapping_mul(2_654_435_761) >> (28 + me)) {
                    std::hint::spin_loop();
                }
                words[me].store(round, Relaxed);
                if me == 1 {
                    heavy()
                } else {
                    light()
                }
                seen[me].store(words[1 - me].load(Relaxed), Relaxed);
                meet(met, parked, me, 2 * round, other);
                let (a, b) = (seen[0].load(Relaxed), seen[1].load(Relaxed));
                assert!(
                    a == round || b == round,
                    "round {round}: both sides missed the other"
                );
            }
        };
        let main = std::thread::current();
        let other = {
            let (w, s, m, p) = (words.clone(), seen.clone(), met.clone(), parked.clone());
            std::thread::spawn(move || side(1, &w, &s, (&m, &p), &main))
        };
        side(0, &words, &seen, (&met, &parked), other.thread());
        other.join().unwrap();
    }
}
