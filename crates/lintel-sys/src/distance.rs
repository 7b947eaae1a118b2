//! How far the CPU that reads our copies is, sensed from what plain stores
//! into its cache lines cost: a copy of a few KiB for a peer then picks
//! plain stores (a near reader) or stores around the caches (a far one).
//!
//! A writer's plain store to a line that the reader's CPU holds from its
//! last read must first take the line from that CPU. What that costs
//! depends on where the two CPUs are, and on these shared virtual
//! machines it changes as the host moves them, every few seconds. A
//! writer filling 4 KiB that the other CPU then copies out, in turns
//! (median cycles at 2.6 GHz, one run, the two phases minutes apart):
//!
//! | phase | plain fill | its reader | around the caches | its reader |
//! |---|---|---|---|---|
//! | near (lines pass cheaply) | 208–234 | 260–390 | 208 | 1,014 |
//! | far | 1,144–2,210 | 988–1,014 | 208 | 910–988 |
//!
//! and 16 KiB: near 2,652–2,782 and 884–910 against 754 and 3,484–3,562;
//! far 13,156–13,182 and 3,250 against 754 and 3,510–3,614. So near, a
//! plain copy costs the pair less (4 KiB: 0.5 against 1.2 thousand
//! cycles); far, one around the caches does (1.2 against 2.2–3.2
//! thousand; at 16 KiB 4.3 against 16.4). From 32 KiB
//! ([`PEER_COPY_MIN`](crate::PEER_COPY_MIN)) stores around the caches win in
//! both phases (64 KiB near: 15 against 22.7 thousand), and under 4 KiB
//! the store buffer absorbs a plain copy in both (2 KiB: 156–182
//! cycles), while the reader of one around the caches waits on memory.
//!
//! The writer sees the phase in its own plain copies: near they take 3–11
//! cycles a line, far 18–68. So each thread times a plain copy now and
//! then ([`Sense`]): every 8th copy while near (the timing is the only
//! cost: two counter reads), every 32nd while far. The copy before a
//! timed one is plain too, untimed: after a copy around the caches the
//! reader's CPU holds the lines alone (it read them from memory), and
//! the first plain copy that takes them back costs 16–40 cycles a line
//! even in the nearest phase, where the next costs 0–4 (timed through an
//! echo of 16 KiB; so timed without that copy, the thread stayed with
//! stores around the caches where plain ones were twice as fast). A far
//! thread pays the dear plain copies, two in 32. A timed copy slowed by
//! something else (an interrupt, a preemption: hundreds of cycles a line)
//! decides nothing and the next copy is timed again.

use std::cell::Cell;

/// The smallest copy for a peer whose stores [`Sense`] picks; smaller ones
/// are plain (see the module doc).
pub const PEER_SENSED_MIN: usize = 4 << 10;

/// Above this many time-stamp ticks a 64-byte line, a plain copy's reader
/// is far (measured: 0–11 near, 18–68 far).
const FAR_TICKS_PER_LINE: u64 = 14;
/// Above this, the timed copy was held up by something other than the
/// reader's lines, and decides nothing.
const SPOILED_TICKS_PER_LINE: u64 = 400;
/// Copies between timed ones, near and far.
const NEAR_EVERY: u8 = 8;
const FAR_EVERY: u8 = 32;

/// Which stores a copy makes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stores {
    /// Plain stores.
    Plain,
    /// Plain stores, timed: report the time to [`Sense::timed`].
    Timed,
    /// Stores around the caches.
    Around,
}

/// One thread's sense of how far its copies' readers are: a plain value,
/// kept per thread.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sense {
    far: bool,
    /// Copies left before the next timed one.
    left: u8,
}

impl Sense {
    /// A thread's first sense: near, and its first copy timed.
    pub const NEW: Sense = Sense { far: false, left: 0 };

    /// The stores of the next copy.
    pub fn pick(&mut self) -> Stores {
        match self.left {
            0 => Stores::Timed,
            // The copy before a timed one is plain: see the module doc.
            1 => {
                self.left = 0;
                Stores::Plain
            }
            _ => {
                self.left -= 1;
                if self.far { Stores::Around } else { Stores::Plain }
            }
        }
    }

    /// A [`Stores::Timed`] copy of `len` bytes took `ticks`.
    pub fn timed(&mut self, ticks: u64, len: usize) {
        let lines = (len as u64).div_ceil(64).max(1);
        if ticks > SPOILED_TICKS_PER_LINE * lines {
            return; // `left` stays 0: the next copy is timed again
        }
        self.far = ticks > FAR_TICKS_PER_LINE * lines;
        self.left = if self.far { FAR_EVERY } else { NEAR_EVERY } - 1;
    }

    /// Whether the reader is sensed far.
    pub fn far(&self) -> bool {
        self.far
    }
}

thread_local! {
    static SENSE: Cell<Sense> = const { Cell::new(Sense::NEW) };
}

/// The stores of this thread's next sensed copy (see [`Sense::pick`]).
pub(crate) fn pick() -> Stores {
    SENSE.with(|s| {
        let mut v = s.get();
        let stores = v.pick();
        s.set(v);
        stores
    })
}

/// Set this thread's sense (tests of the copies that follow it).
#[cfg(test)]
pub(crate) fn set(sense: Sense) {
    SENSE.with(|s| s.set(sense));
}

/// This thread's timed copy of `len` bytes took `ticks`.
pub(crate) fn timed(ticks: u64, len: usize) {
    SENSE.with(|s| {
        let mut v = s.get();
        v.timed(ticks, len);
        s.set(v);
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_thread_times_its_first_copy() {
        let mut s = Sense::NEW;
        assert_eq!(s.pick(), Stores::Timed);
    }

    #[test]
    fn a_cheap_plain_copy_keeps_plain_stores_and_times_every_eighth() {
        let mut s = Sense::NEW;
        s.timed(208, 4096); // 3.25 ticks a line
        assert!(!s.far());
        let seen: Vec<_> = (0..16).map(|_| s.pick()).collect();
        assert_eq!(&seen[..7], &[Stores::Plain; 7]);
        assert_eq!(seen[7], Stores::Timed);
        assert!(
            seen[8..].iter().all(|&x| x == Stores::Timed),
            "untimed until reported"
        );
    }

    #[test]
    fn a_dear_plain_copy_stores_around_the_caches_until_timed_near_again() {
        let mut s = Sense::NEW;
        s.timed(1_430, 4096); // 22 ticks a line: far
        assert!(s.far());
        for _ in 0..30 {
            assert_eq!(s.pick(), Stores::Around);
        }
        assert_eq!(s.pick(), Stores::Plain, "the copy before a timed one is plain");
        assert_eq!(s.pick(), Stores::Timed);
        s.timed(2_700, 16 << 10); // 10.5 a line: near again
        assert!(!s.far());
        assert_eq!(s.pick(), Stores::Plain);
    }

    #[test]
    fn a_spoiled_timing_decides_nothing_and_is_taken_again() {
        let mut s = Sense::NEW;
        s.timed(1_430, 4096);
        for _ in 0..31 {
            s.pick();
        }
        assert_eq!(s.pick(), Stores::Timed);
        s.timed(64 * 1_000, 4096); // preempted mid-copy
        assert!(s.far(), "the last real sense stands");
        assert_eq!(s.pick(), Stores::Timed);
    }

    #[test]
    fn the_threshold_lies_between_the_phases_measured() {
        for (ticks, len) in [(234, 4096), (2_782, 16 << 10)] {
            let mut s = Sense::NEW;
            s.timed(ticks, len);
            assert!(!s.far(), "near: {ticks} for {len}");
        }
        for (ticks, len) in [(1_144, 4096), (13_156, 16 << 10)] {
            let mut s = Sense::NEW;
            s.timed(ticks, len);
            assert!(s.far(), "far: {ticks} for {len}");
        }
    }
}
