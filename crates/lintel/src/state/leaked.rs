//! A process-wide value made on first use and never freed, which a forked
//! child can replace: the parent's is left behind (leaked, as its threads
//! and locks are not the child's), and the next use makes a new one. No
//! lock: a parent thread that held one at the fork would hold it in the
//! child for ever.

use std::sync::atomic::{AtomicPtr, Ordering::*};

pub(crate) struct Leaked<T: 'static>(AtomicPtr<T>);

impl<T: 'static> Leaked<T> {
    pub const fn new() -> Leaked<T> {
        Leaked(AtomicPtr::new(std::ptr::null_mut()))
    }

    /// The value, if made.
    #[inline]
    pub fn get(&self) -> Option<&'static T> {
        let p = self.0.load(Acquire);
        // SAFETY: a non-null pointer here came from `Box::into_raw` in
        // `get_or_make` and is never freed.
        unsafe { p.as_ref() }
    }

    /// The value, made by `make` if there is none. Racing makers each
    /// make one; one is kept and `started` runs on it, the others are
    /// dropped unstarted.
    pub fn get_or_make(&self, make: impl FnOnce() -> T, started: impl FnOnce(&'static T)) -> &'static T {
        if let Some(v) = self.get() {
            return v;
        }
        let fresh = Box::into_raw(Box::new(make()));
        match self
            .0
            .compare_exchange(std::ptr::null_mut(), fresh, AcqRel, Acquire)
        {
            Ok(_) => {
                // SAFETY: just published, never freed.
                let v = unsafe { &*fresh };
                started(v);
                v
            }
            Err(winner) => {
                // SAFETY: `fresh` was never published: still ours alone.
                drop(unsafe { Box::from_raw(fresh) });
                // SAFETY: as in `get`.
                unsafe { &*winner }
            }
        }
    }

    /// Leave the value behind (never freed): the next use makes another.
    pub fn abandon(&self) -> Option<&'static T> {
        let p = self.0.swap(std::ptr::null_mut(), AcqRel);
        // SAFETY: as in `get`; it stays allocated.
        unsafe { p.as_ref() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn made_once_then_abandoned_and_made_again() {
        static L: Leaked<u32> = Leaked::new();
        assert!(L.get().is_none());
        let mut started = 0;
        assert_eq!(*L.get_or_make(|| 1, |_| started += 1), 1);
        assert_eq!(*L.get_or_make(|| 2, |_| started += 1), 1, "kept");
        assert_eq!(started, 1);
        let old = L.abandon().unwrap();
        assert_eq!(*old, 1, "the old one stays readable");
        assert_eq!(*L.get_or_make(|| 3, |_| {}), 3);
        assert!(L.abandon().is_some() && L.abandon().is_none());
    }
}
