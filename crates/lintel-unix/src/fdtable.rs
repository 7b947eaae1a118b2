//! Which descriptor numbers the emulation serves, and what each stands
//! for.
//!
//! Every `read` and `write` a program makes asks this table first, served
//! descriptor or not, so the question "is `fd` ours?" must cost next to
//! nothing: a bitmap answers it for the low numbers with one load and no
//! lock, and only a served descriptor (or a number above the bitmap) goes
//! on to the table itself, a vector indexed by number under a read lock
//! (no hashing). A bit is set after its entry is in and cleared with it
//! under the write lock, so a reader that finds a bit clear and a program
//! that races a `read` with the `open` that makes the number see the same
//! as they would in the kernel: the number was not open yet.
//!
//! Beside each low number sits a hint, read with no lock either: where
//! the served file's cache starts in memory, so a positional read can
//! start loading its bytes before the lookups that lead to them (a stale
//! hint only warms a line for nothing; see `lintel_fs::prefetch`).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::*};

use parking_lot::RwLock;

/// Descriptor numbers the bitmap covers; larger ones take the lock.
const BITS: usize = 4096;

/// Served descriptors by number.
pub struct FdTable<T> {
    slots: RwLock<Vec<Option<Arc<T>>>>,
    bits: [AtomicU64; BITS / 64],
    hints: [AtomicU64; BITS],
}

impl<T> Default for FdTable<T> {
    fn default() -> Self {
        FdTable {
            slots: RwLock::new(Vec::new()),
            bits: std::array::from_fn(|_| AtomicU64::new(0)),
            hints: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }
}

impl<T> FdTable<T> {
    /// Whether `fd` is served: for numbers below the bitmap's end, one
    /// load and no lock.
    #[inline]
    pub fn contains(&self, fd: i32) -> bool {
        match usize::try_from(fd) {
            Err(_) => false,
            Ok(i) if i < BITS => self.bits[i / 64].load(Acquire) & (1 << (i % 64)) != 0,
            Ok(i) => self.slots.read().get(i).is_some_and(Option::is_some),
        }
    }

    /// Run `f` on the entry for `fd` under the read lock (no count taken:
    /// the hot path). `None` if `fd` is not served.
    #[inline]
    pub fn with<R>(&self, fd: i32, f: impl FnOnce(&T) -> R) -> Option<R> {
        if !self.contains(fd) {
            return None;
        }
        let slots = self.slots.read();
        let entry = slots.get(usize::try_from(fd).ok()?)?.as_deref()?;
        Some(f(entry))
    }

    /// The entry for `fd`, if served.
    pub fn get(&self, fd: i32) -> Option<Arc<T>> {
        if !self.contains(fd) {
            return None;
        }
        self.slots.read().get(usize::try_from(fd).ok()?)?.clone()
    }

    /// The hint stored with `fd` (0: none).
    #[inline]
    pub fn hint(&self, fd: i32) -> u64 {
        usize::try_from(fd)
            .ok()
            .and_then(|i| self.hints.get(i))
            .map_or(0, |h| h.load(Relaxed))
    }

    /// Store `hint` with `fd` (a hint that turns stale as `fd` is
    /// closed and reused only warms a line for nothing).
    pub fn set_hint(&self, fd: i32, hint: u64) {
        if let Some(h) = usize::try_from(fd).ok().and_then(|i| self.hints.get(i)) {
            h.store(hint, Relaxed);
        }
    }

    /// Serve `fd` as `entry` with `hint`, replacing what it stood for.
    pub fn insert(&self, fd: i32, entry: Arc<T>, hint: u64) -> Option<Arc<T>> {
        let i = usize::try_from(fd).ok()?;
        let mut slots = self.slots.write();
        if slots.len() <= i {
            slots.resize_with(i + 1, || None);
        }
        let old = slots[i].replace(entry);
        if i < BITS {
            self.hints[i].store(hint, Relaxed);
            self.bits[i / 64].fetch_or(1 << (i % 64), Release);
        }
        old
    }

    /// Stop serving `fd`; its entry, if it was served.
    pub fn remove(&self, fd: i32) -> Option<Arc<T>> {
        let i = usize::try_from(fd).ok()?;
        let mut slots = self.slots.write();
        let old = slots.get_mut(i)?.take();
        if i < BITS {
            self.bits[i / 64].fetch_and(!(1 << (i % 64)), Release);
            self.hints[i].store(0, Relaxed);
        }
        old
    }

    /// Every served descriptor and its entry.
    pub fn entries(&self) -> Vec<(i32, Arc<T>)> {
        let slots = self.slots.read();
        let served = slots.iter().enumerate();
        served
            .filter_map(|(i, e)| Some((i32::try_from(i).ok()?, e.clone()?)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn low_and_high_numbers_are_served_and_let_go_alike() {
        let t = FdTable::default();
        for fd in [0, 3, 63, 64, 4095, 4096, 70_000] {
            assert!(!t.contains(fd));
            assert!(t.insert(fd, Arc::new(fd), 77).is_none());
            assert!(t.contains(fd), "{fd}");
            assert_eq!(t.with(fd, |v| *v), Some(fd));
            assert_eq!(t.get(fd).as_deref(), Some(&fd));
        }
        assert!(!t.contains(5) && !t.contains(-1) && t.with(65, |_| ()).is_none());
        assert_eq!(t.hint(64), 77);
        assert_eq!(t.hint(70_000), 0, "no hints above the bitmap");
        assert_eq!(t.insert(64, Arc::new(-64), 5).as_deref(), Some(&64), "replaced");
        assert_eq!(t.hint(64), 5);
        assert_eq!(t.remove(64).as_deref(), Some(&-64));
        assert_eq!(t.remove(64), None);
        assert!(!t.contains(64) && t.contains(63), "its neighbour stays");
        assert_eq!(t.hint(64), 0, "gone with its entry");
        assert_eq!(t.remove(70_000).as_deref(), Some(&70_000));
        assert!(!t.contains(70_000));
        let fds: Vec<i32> = t.entries().into_iter().map(|(fd, _)| fd).collect();
        assert_eq!(fds, [0, 3, 63, 4095, 4096]);
    }
}
