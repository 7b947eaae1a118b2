//! The lease of this thread's last call: the common case, a thread calling
//! one server again, finds its lease with one thread-local load, no search.
//! Not owning (a plain pointer needs no destructor, so its thread-local is
//! read without a liveness check): it names a lease that `LEASES` holds.

use std::cell::Cell;
use std::ptr::NonNull;
use std::rc::Rc;

use super::lease::Lease;

thread_local! {
    /// Null, or [`Rc::as_ptr`] of a lease this thread's `LEASES` holds:
    /// set only from such a lease ([`set`]), and cleared ([`clear`])
    /// before any lease leaves `LEASES` and when `LEASES` is dropped.
    static LAST: Cell<*const Lease> = const { Cell::new(std::ptr::null()) };
}

/// The last call's lease (a new count of it), if any.
#[inline(always)]
pub(super) fn get() -> Option<Rc<Lease>> {
    let p = LAST.with(Cell::get);
    if p.is_null() {
        return None;
    }
    // SAFETY: `p` is null (handled) or comes from `Rc::as_ptr` of a
    // lease `LEASES` still holds (`LAST`'s invariant), so it points at
    // a live `Rc` allocation; `Rc` is neither `Send` nor `Sync`, so the
    // count we add is this thread's own.
    unsafe {
        Rc::increment_strong_count(p);
        Some(Rc::from_raw(p))
    }
}

/// The last call's lease as [`peek`] saw it, borrowed for one call of
/// the fast path, if there is one and `keep` says yes on a look at it.
///
/// # Safety
///
/// `p` is [`peek`]'s, read on this thread with nothing run since that
/// could let go of a lease; neither may `keep` (no call, no code of a
/// user's): the lease it looks at is borrowed from `LEASES`.
#[inline(always)]
pub(super) unsafe fn borrow_if(p: *const Lease, keep: impl FnOnce(&Lease) -> bool) -> Option<Borrowed> {
    let p = NonNull::new(p.cast_mut())?;
    // SAFETY: `p` is non-null, so it came from `Rc::as_ptr` of a lease
    // `LEASES` held (`LAST`'s invariant) and still holds (our caller's
    // promise).
    keep(unsafe { p.as_ref() }).then_some(Borrowed(p))
}

/// A lease borrowed from `LEASES` for one call of the fast path, with no
/// count of its own: a count is two stores to take and let go, and the
/// fast path runs nothing that could let go of a lease (no code of a
/// user's, no new lease) until it ends ([`super::fast::end`]). Code that
/// might takes a count first ([`Borrowed::counted`]).
pub(super) struct Borrowed(NonNull<Lease>);

impl Borrowed {
    #[inline(always)]
    pub(super) fn get(&self) -> &Lease {
        // SAFETY: the lease is held in `LEASES` (`borrow_if`'s caller's
        // promise), and stays so while a `Borrowed` is (its holder runs
        // nothing that could let go of a lease); `Rc` is not `Send`, so
        // only this thread touches it, and only shared access is made.
        unsafe { self.0.as_ref() }
    }

    /// A count of the lease, for code that might let go of leases.
    #[inline(always)]
    pub(super) fn counted(self) -> Rc<Lease> {
        let p = self.0.as_ptr().cast_const();
        // SAFETY: `p` is `Rc::as_ptr` of a lease `LEASES` holds (see
        // `get`); the count we add is this thread's own (`Rc` is not
        // `Send`) and is handed to the `Rc` made from it.
        unsafe {
            Rc::increment_strong_count(p);
            Rc::from_raw(p)
        }
    }
}

/// The last call's lease, not to be dereferenced but by [`borrow_if`].
#[inline(always)]
pub(super) fn peek() -> *const Lease {
    LAST.with(Cell::get)
}

/// `lease` (held in `LEASES`) is the last call's.
#[inline(always)]
pub(super) fn set(lease: &Rc<Lease>) {
    debug_assert!(lease.held.get());
    LAST.with(|l| l.set(Rc::as_ptr(lease)));
}

/// No lease is the last call's.
pub(super) fn clear() {
    LAST.with(|l| l.set(std::ptr::null()));
}
