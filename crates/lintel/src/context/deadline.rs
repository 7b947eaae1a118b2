//! Deadlines: how long a chain of calls may take.
//!
//! A thread runs calls under a deadline by wrapping them in [`within`] or
//! [`until`]; a [`crate::object::door::Door::with_timeout`] handle adds one per call. The
//! earliest deadline in force goes with each call to the server, whose
//! thread runs the call under it (so the calls it makes in turn carry it
//! on, and [`remaining`] tells it the time left). When the deadline passes
//! the caller gets [`crate::context::error::CallError::TimedOut`] at once, the server
//! thread is alerted (and through it every call further down), and the
//! late reply is discarded: the slot it lands in is not reused until it
//! has landed.
//!
//! Deadlines are points on `CLOCK_MONOTONIC`, which every process on the
//! machine shares, so they cross domains unchanged.
//!
//! A co-located call runs the handler on the caller's own thread: a call
//! whose deadline has passed fails before it starts, and the handler sees
//! the deadline through [`remaining`], but nothing can stop a handler that
//! does not look. Typed clients ([`crate::interface`]) called co-located
//! do the same: through a handle with a timeout the implementation runs
//! under it ([`crate::object::door::Door::with_local`]).
//!
//! # A result that comes after the deadline is `TimedOut`
//!
//! A call whose deadline has passed by the time its caller sees the result
//! returns [`CallError::TimedOut`], whatever the callee produced, in both
//! placements: a co-located handler that returns late, and a reply from
//! another domain that lands as the deadline passes (read before the
//! caller's wait noticed the time), are both discarded (doors and buffers
//! in them dropped, as a failed call brings nothing back).
//!
//! Why `TimedOut` and not the late result: the caller asked for a bound,
//! and across domains it cannot be given the late result without waiting
//! past that bound for it, so the co-located path does as that one must,
//! and a call gives the same outcome wherever its server runs. It also
//! settles what a chain returns: when A calls B under a deadline and B's
//! own call to C times out at that same deadline, B's handler may turn
//! that into an error of its own (a fault) and return it just after the
//! deadline. A gets `TimedOut`, the deadline it set, never an error that a
//! callee produced because the deadline passed further down. Whatever the
//! server did before the deadline passed stays done, as with any call that
//! times out.
//!
//! ```
//! use std::time::Duration;
//! use lintel::{CallError, Door, Reply, Request};
//! let d = Door::create(0, |_: Request<'_>, r: &mut Reply| {
//!     let left = lintel::deadline::remaining().expect("the caller's deadline");
//!     r.data.push((left <= Duration::from_secs(5)) as u8);
//!     Ok(())
//! });
//! let r = lintel::deadline::within(Duration::from_secs(5), || d.call_bytes(b""));
//! assert_eq!(r.unwrap(), [1]);
//! let late = lintel::deadline::within(Duration::ZERO, || d.call_bytes(b""));
//! assert_eq!(late.unwrap_err(), CallError::TimedOut);
//! ```

use std::cell::Cell;
use std::time::{Duration, Instant};

use crate::context::error::CallError;
use crate::sys;

thread_local! {
    /// This thread's deadline (`CLOCK_MONOTONIC` ns, 0 for none): set by a
    /// scope here, or by the call a server thread runs. Only its own thread
    /// reads or writes it.
    static DEADLINE: Cell<u64> = const { Cell::new(0) };
}

tokio::task_local! {
    /// The deadline of the call an async handler's task serves (its
    /// threads change between polls, so a thread's deadline cannot carry it).
    static TASK_DEADLINE: u64;
}

/// This thread's deadline, 0 for none.
#[inline]
pub(crate) fn current() -> u64 {
    DEADLINE.with(Cell::get)
}

/// The deadline a call made here now runs under: this thread's, or the
/// task's if this runs in an async handler's task (the earlier of the two).
pub(crate) fn current_or_task() -> u64 {
    earliest(current(), TASK_DEADLINE.try_with(|d| *d).unwrap_or(0))
}

/// Run `f` (an async handler's future) with calls made from its task
/// bounded by `at` (0: none).
pub(crate) fn in_task<F: std::future::Future>(at: u64, f: F) -> impl std::future::Future<Output = F::Output> {
    TASK_DEADLINE.scope(at, f)
}

/// Set this thread's deadline; returns the previous one.
#[inline]
pub(crate) fn set(at: u64) -> u64 {
    DEADLINE.with(|d| d.replace(at))
}

/// Run `f` with calls bounded to `timeout` from now (or the deadline
/// already in force, if that is earlier).
pub fn within<R>(timeout: Duration, f: impl FnOnce() -> R) -> R {
    let at = sys::monotonic_ns().saturating_add(timeout.as_nanos().min(u64::MAX as u128) as u64);
    scoped(at, f)
}

/// Run `f` with calls bounded to end by `at` (or the deadline already in
/// force, if that is earlier).
pub fn until<R>(at: Instant, f: impl FnOnce() -> R) -> R {
    let now = Instant::now();
    let mono = sys::monotonic_ns();
    let at = match at.checked_duration_since(now) {
        Some(left) => mono.saturating_add(left.as_nanos().min(u64::MAX as u128) as u64),
        None => mono
            .saturating_sub(now.duration_since(at).as_nanos() as u64)
            .max(1),
    };
    scoped(at, f)
}

/// Time left before this thread's deadline (the one its scope set, or the
/// one of the call it serves, on a server thread or in an async handler's task);
/// `None` if it has none. Zero once it passed.
pub fn remaining() -> Option<Duration> {
    left(current_or_task())
}

/// Time left before deadline `at` (0: none, `None`); zero once it passed.
pub(crate) fn left(at: u64) -> Option<Duration> {
    (at != 0).then(|| Duration::from_nanos(at.saturating_sub(sys::monotonic_ns())))
}

/// Run `f` with this thread's deadline at `at` or earlier; restored after,
/// even if `f` panics.
pub(crate) fn scoped<R>(at: u64, f: impl FnOnce() -> R) -> R {
    let _restore = Restore(set(earliest(current(), at.max(1))));
    f()
}

/// Puts a thread's previous deadline back when dropped.
pub(crate) struct Restore(pub u64);

impl Drop for Restore {
    fn drop(&mut self) {
        set(self.0);
    }
}

/// The earlier of two deadlines (0 is none).
#[inline]
pub(crate) fn earliest(a: u64, b: u64) -> u64 {
    match (a, b) {
        (0, x) | (x, 0) => x,
        (a, b) => a.min(b),
    }
}

/// What the caller of a call made under deadline `at` (0: none) gets for
/// its result `r`: [`CallError::TimedOut`] if the deadline has passed by
/// now, whatever the callee produced (its reply, or an error it made
/// because the deadline passed further down); else `r`.
#[inline]
pub(crate) fn settle<T>(at: u64, r: Result<T, CallError>) -> Result<T, CallError> {
    match passed(at) {
        true => Err(CallError::TimedOut),
        false => r,
    }
}

/// Whether deadline `at` (0: none) has passed.
#[inline]
pub(crate) fn passed(at: u64) -> bool {
    at != 0 && sys::monotonic_ns() >= at
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_earliest_deadline_wins_and_none_is_no_bound() {
        assert_eq!(earliest(0, 0), 0);
        assert_eq!(earliest(0, 5), 5);
        assert_eq!(earliest(7, 0), 7);
        assert_eq!(earliest(7, 5), 5);
    }

    #[test]
    fn scopes_nest_and_restore() {
        assert_eq!(remaining(), None);
        within(Duration::from_secs(60), || {
            let outer = remaining().unwrap();
            within(Duration::from_secs(3600), || {
                assert!(remaining().unwrap() <= outer, "an inner scope cannot extend");
            });
            within(Duration::from_secs(1), || {
                assert!(remaining().unwrap() <= Duration::from_secs(1));
            });
            assert!(remaining().unwrap() > Duration::from_secs(1));
        });
        assert_eq!(remaining(), None);
    }

    #[test]
    fn a_past_instant_is_a_passed_deadline() {
        let past = Instant::now() - Duration::from_millis(5);
        until(past, || assert_eq!(remaining(), Some(Duration::ZERO)));
        until(Instant::now() + Duration::from_secs(9), || {
            assert!(remaining().unwrap() > Duration::from_secs(8));
        });
    }
}
