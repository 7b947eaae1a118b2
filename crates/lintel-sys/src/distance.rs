//! How far the CPU that reads our copies is, sensed from what plain stores
//! into its cache lines cost: a copy for a peer of a few KiB, or of more
//! than 1 MiB, then picks plain stores (a near reader) or stores around the
//! caches (a far one).
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
//! Past the copies always made around the caches (1 MiB whole, 512 KiB a
//! segment's) the phase decides again: 1 MiB near, plain 191–197 and 57
//! thousand against 95–97 and 99–103; far, 1,086–1,137 and 105–119
//! thousand against the same 97 and 103 (2 MiB: near 251–254 and 113
//! against 191–201 and 187–200; far 2,115–2,151 and 210–218). Plain
//! stores are kept near there, where a segment's reader copies each part
//! as it lands and plain parts measured faster (see
//! [`PEER_STREAM_MAX`](crate::PEER_STREAM_MAX)). Those copies are a class
//! of their own ([`Class::Large`]), timed apart: their plain copies cost
//! more a line even near (8–16 ticks against 0–16 for the small).
//!
//! The writer sees the phase in its own plain copies: near they take 0–16
//! ticks a line, far 18–88 ([`SMALL_FAR_ABOVE`] and [`LARGE_FAR_ABOVE`]
//! lie between). So each thread times a plain copy now and then
//! ([`Sense`]): every 8th copy while near (the timing is the only
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

/// Above this many time-stamp ticks a 64-byte line, a plain copy of the
/// small class ([`Class::Small`]) finds its reader far.
pub const SMALL_FAR_ABOVE: u8 = 14;
/// The same for the large class ([`Class::Large`]).
pub const LARGE_FAR_ABOVE: u8 = 30;
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

/// The copies a sense is for, each timed apart: a plain copy larger than
/// the CPUs' own caches costs more a line even near.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Class {
    /// From [`PEER_SENSED_MIN`] to [`PEER_COPY_MIN`](crate::PEER_COPY_MIN).
    Small,
    /// Past the copies always made around the caches
    /// ([`PEER_COPY_MAX`](crate::PEER_COPY_MAX) for a whole copy,
    /// [`PEER_STREAM_MAX`](crate::PEER_STREAM_MAX) for a segment's).
    Large,
}

impl Class {
    /// The class of copies that make a transfer of `whole` bytes.
    pub fn of(whole: usize) -> Class {
        if whole < crate::PEER_COPY_MIN {
            Class::Small
        } else {
            Class::Large
        }
    }
}

/// One thread's sense of how far the readers of one class of its copies
/// are: a plain value, kept per thread.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sense {
    far: bool,
    /// Copies left before the next timed one.
    left: u8,
    /// Above this many time-stamp ticks a 64-byte line, a plain copy's
    /// reader is far.
    far_above: u8,
}

impl Sense {
    /// A thread's first sense of its copies of `class`: near, and its first
    /// copy timed; far above [`SMALL_FAR_ABOVE`] or [`LARGE_FAR_ABOVE`]
    /// ticks a line (see the module doc).
    pub const fn new(class: Class) -> Sense {
        let far_above = match class {
            Class::Small => SMALL_FAR_ABOVE,
            Class::Large => LARGE_FAR_ABOVE,
        };
        Sense {
            far: false,
            left: 0,
            far_above,
        }
    }

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
        self.far = ticks > u64::from(self.far_above) * lines;
        self.left = if self.far { FAR_EVERY } else { NEAR_EVERY } - 1;
    }

    /// Whether the reader is sensed far.
    pub fn far(&self) -> bool {
        self.far
    }
}

thread_local! {
    static SENSES: Cell<[Sense; 2]> = const { Cell::new([Sense::new(Class::Small), Sense::new(Class::Large)]) };
}

/// The stores of this thread's next sensed copy of `class` (see
/// [`Sense::pick`]).
pub(crate) fn pick(class: Class) -> Stores {
    SENSES.with(|s| {
        let mut v = s.get();
        let stores = v[class as usize].pick();
        s.set(v);
        stores
    })
}

/// Set this thread's sense of `class` (tests of the copies that follow).
#[cfg(test)]
pub(crate) fn set(class: Class, sense: Sense) {
    SENSES.with(|s| {
        let mut v = s.get();
        v[class as usize] = sense;
        s.set(v);
    });
}

/// This thread's timed copy of `class`, of `len` bytes, took `ticks`.
pub(crate) fn timed(class: Class, ticks: u64, len: usize) {
    SENSES.with(|s| {
        let mut v = s.get();
        v[class as usize].timed(ticks, len);
        s.set(v);
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_thread_times_its_first_copy() {
        let mut s = Sense::new(Class::Small);
        assert_eq!(s.pick(), Stores::Timed);
    }

    #[test]
    fn a_cheap_plain_copy_keeps_plain_stores_and_times_every_eighth() {
        let mut s = Sense::new(Class::Small);
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
        let mut s = Sense::new(Class::Small);
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
        let mut s = Sense::new(Class::Small);
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
    fn the_thresholds_lie_between_the_phases_measured() {
        let sensed = |class, ticks, len| {
            let mut s = Sense::new(class);
            s.timed(ticks, len);
            s.far()
        };
        for (ticks, len) in [(234, 4096), (2_782, 16 << 10)] {
            assert!(!sensed(Class::Small, ticks, len), "near: {ticks} for {len}");
        }
        for (ticks, len) in [(1_144, 4096), (13_156, 16 << 10)] {
            assert!(sensed(Class::Small, ticks, len), "far: {ticks} for {len}");
        }
        // 1 MiB: 11.7 and 16 ticks a line near, 66 far; 2 MiB 7.6 near.
        for (ticks, len) in [(196_508, 1 << 20), (262_144, 1 << 20), (254_332, 2 << 20)] {
            assert!(!sensed(Class::Large, ticks, len), "near: {ticks} for {len}");
        }
        for (ticks, len) in [(1_085_578, 1 << 20), (2_114_996, 2 << 20)] {
            assert!(sensed(Class::Large, ticks, len), "far: {ticks} for {len}");
        }
    }
}
