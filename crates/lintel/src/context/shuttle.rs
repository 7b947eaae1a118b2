//! Shuttles and alerts.
//!
//! A shuttle is the identity of one chain of calls as it crosses domains:
//! here, each thread's shuttle, plus the outgoing call it is blocked in. An
//! alert is a one-bit "circumstances changed" flag. Alerting a thread that
//! waits in a call sends the alert over that connection, where it lands on
//! the server thread running the call, and from there down the chain.
//! Server code polls [`alerted`] or sleeps with [`sleep_alertable`].

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering::*};
use std::time::{Duration, Instant};

use crate::context::task_alert::CallAlert;
use crate::sys;

pub(crate) struct Shuttle {
    /// 0, [`ALERTED`], or [`CANCEL_ALERT`]: alerted by a cancel only, an
    /// alert that the call the cancel ends takes away with it.
    alerted: AtomicU32,
    /// The outgoing call the thread is in: [`in_call`] of its slot and
    /// sequence, 0 between calls. One store on entry, one on the way out.
    out_call: AtomicU64,
    /// The connection of the last call entered (left as it was between
    /// calls; written only when it changes).
    out_conn: AtomicU64,
    /// [`ShuttleHandle::cancel`] was called: the call in progress (or the
    /// next one) returns [`crate::context::error::CallError::Cancelled`].
    cancelled: AtomicU32,
    /// The address of the futex word the thread sleeps on in the call it
    /// is in (or was last in), so a cancel can wake it. Written only when it
    /// changes, before `out_call`.
    waiting_on: AtomicUsize,
    /// The call of an async handler this thread blocks on (a co-located
    /// blocking call of such a door): alerts reach it too.
    task: parking_lot::Mutex<Option<Arc<CallAlert>>>,
}

impl Shuttle {
    #[inline]
    pub(crate) fn is_alerted(&self) -> bool {
        self.alerted.load(Relaxed) != 0
    }

    /// Clear the alert: the shuttle's thread starts serving another call.
    /// (Ordered by the release that follows it in `SlotServer::begin`.)
    #[inline]
    pub(crate) fn clear_alert(&self) {
        // (Looked at first: the fast path stores nothing it need not.)
        if self.alerted.load(Relaxed) != 0 {
            self.alerted.store(0, Relaxed);
        }
    }

    /// Set the alert without forwarding it (the call it is for has made no
    /// call of its own yet).
    #[inline]
    pub(crate) fn set_alert(&self) {
        self.alerted.store(ALERTED, SeqCst);
    }

    /// Whether a cancellation is pending.
    #[inline]
    pub(crate) fn has_cancel(&self) -> bool {
        self.cancelled.load(Relaxed) != 0
    }

    /// A call ended (it returned before it saw the cancel): a cancel meant
    /// for it is spent, not carried to the next call, and its alert goes
    /// with it.
    #[inline]
    pub(crate) fn call_ended(&self) {
        if self.cancelled.load(Relaxed) == CANCEL_THIS
            && self
                .cancelled
                .compare_exchange(CANCEL_THIS, 0, AcqRel, Relaxed)
                .is_ok()
        {
            self.cancel_spent();
        }
    }

    /// Take a pending cancellation (it cancels one call: the one taking it,
    /// which takes the cancel's alert too).
    #[inline]
    pub(crate) fn take_cancel(&self) -> bool {
        let taken = self.cancelled.load(Relaxed) != 0 && self.cancelled.swap(0, AcqRel) != 0;
        if taken {
            self.cancel_spent();
        }
        taken
    }

    /// The call a cancel was for has ended: the alert the cancel set is
    /// cleared, unless an [`alert`](Self::alert) came too (that one stays).
    #[cold]
    fn cancel_spent(&self) {
        let _ = self.alerted.compare_exchange(CANCEL_ALERT, 0, AcqRel, Relaxed);
    }

    /// Cancel the call in progress (or the next one), alerting its server.
    fn cancel(&self) {
        let in_call = self.out_call.load(SeqCst) != 0;
        // The alert first (over no other: one that `alert` set outlives the
        // call), so that the call which takes the cancel finds it to clear.
        let _ = self.alerted.compare_exchange(0, CANCEL_ALERT, SeqCst, SeqCst);
        self.cancelled
            .store(if in_call { CANCEL_THIS } else { CANCEL_NEXT }, SeqCst);
        self.raised();
        if self.out_call.load(SeqCst) != 0 {
            sys::futex_wake_addr(self.waiting_on.load(SeqCst), u32::MAX);
        }
    }

    /// Set the alert, wake an alertable sleep, and forward it to the call
    /// this thread is blocked in, if any.
    pub fn alert(&self) {
        self.alerted.store(ALERTED, SeqCst);
        self.raised();
    }

    /// The alert is set: wake an alertable sleep, and forward it to the
    /// call this thread is blocked in, if any.
    fn raised(&self) {
        sys::futex_wake(&self.alerted, u32::MAX);
        if let Some(task) = self.task.lock().clone() {
            task.alert();
        }
        if let Some((slot, seq)) = call_of(self.out_call.load(SeqCst))
            && let Some(forward) = FORWARD.get()
        {
            forward(self.out_conn.load(SeqCst), slot, seq);
        }
    }
}

/// Sends an alert on to the call a thread is in: connection id, slot,
/// sequence. Set by the domain when it starts (before it, nobody is in a
/// call); the shuttle itself knows no connections.
pub(crate) static FORWARD: std::sync::OnceLock<fn(u64, u32, u32)> = std::sync::OnceLock::new();

/// `alerted`: alerted by [`Shuttle::alert`] (or by a server's request).
const ALERTED: u32 = 1;
/// `alerted`: alerted by a cancel only; cleared when the call it cancels
/// (or the call that spends it) ends.
const CANCEL_ALERT: u32 = 2;

/// `cancelled`: the call in progress when the cancel came.
const CANCEL_THIS: u32 = 1;
/// `cancelled`: no call was in progress; the next one is cancelled.
const CANCEL_NEXT: u32 = 2;

thread_local! {
    static CURRENT: Mine = Mine::new();
}

/// This thread's shuttle, made on first use; while it lives, [`raw`] has
/// its address, so a co-located call looks for a cancel with one plain
/// thread-local load instead of this key's lazy-initialised access.
struct Mine(Arc<Shuttle>);

impl Mine {
    fn new() -> Mine {
        let s = fresh();
        raw::set(&s);
        Mine(s)
    }
}

impl Drop for Mine {
    fn drop(&mut self) {
        raw::clear();
    }
}

/// The address of this thread's shuttle, or null before it is made and
/// after it is gone.
#[allow(unsafe_code)]
mod raw {
    use std::cell::Cell;
    use std::sync::Arc;

    use super::Shuttle;

    thread_local! {
        /// Null, or [`Arc::as_ptr`] of the shuttle this thread's `CURRENT`
        /// holds: set when that is made, cleared in its drop, before the
        /// `Arc` it holds goes.
        static PTR: Cell<*const Shuttle> = const { Cell::new(std::ptr::null()) };
    }

    pub(super) fn set(s: &Arc<Shuttle>) {
        PTR.with(|p| p.set(Arc::as_ptr(s)));
    }

    pub(super) fn clear() {
        PTR.with(|p| p.set(std::ptr::null()));
    }

    /// Whether this thread's shuttle has a cancel pending (false if it
    /// has none: no handle to it was ever given out).
    #[inline(always)]
    pub(super) fn has_cancel() -> bool {
        let p = PTR.with(Cell::get);
        // SAFETY: `p` is null (not read) or points at the shuttle `CURRENT`
        // holds on this thread (`PTR`'s invariant), which lives until
        // `CURRENT`'s drop has cleared `p`; only shared access is made.
        !p.is_null() && unsafe { (*p).has_cancel() }
    }
}

fn fresh() -> Arc<Shuttle> {
    Arc::new(Shuttle {
        alerted: AtomicU32::new(0),
        out_call: AtomicU64::new(0),
        out_conn: AtomicU64::new(0),
        cancelled: AtomicU32::new(0),
        waiting_on: AtomicUsize::new(0),
        task: parking_lot::Mutex::new(None),
    })
}

/// Forward this thread's alerts to `task` (an async handler's call it
/// blocks on) until the guard drops.
pub(crate) fn forward_to(task: Arc<CallAlert>) -> impl Drop {
    struct Forwarding(Arc<Shuttle>);
    impl Drop for Forwarding {
        fn drop(&mut self) {
            self.0.task.lock().take();
        }
    }
    let me = current_arc();
    *me.task.lock() = Some(task.clone());
    if me.is_alerted() {
        task.alert();
    }
    Forwarding(me)
}

/// The thread's shuttle; a fresh one, which nobody can alert, for a call
/// made from a thread-local's destructor or an exit handler after the
/// thread's own is gone.
pub(crate) fn current_arc() -> Arc<Shuttle> {
    CURRENT.try_with(|s| s.0.clone()).unwrap_or_else(|_| fresh())
}

/// A handle to a thread's shuttle, usable from any thread to alert it.
///
/// ```
/// let me = lintel::shuttle::current();
/// me.alert();
/// assert!(lintel::shuttle::alerted());
/// lintel::shuttle::clear_alert();
/// assert!(!lintel::shuttle::alerted());
/// ```
#[derive(Clone)]
pub struct ShuttleHandle(Arc<Shuttle>);

impl ShuttleHandle {
    /// Set the alert; if the thread is in a call, the server thread running
    /// it (and any call it makes in turn) is alerted too.
    pub fn alert(&self) {
        self.0.alert()
    }

    /// Cancel the call the thread is in: it returns
    /// [`crate::context::error::CallError::Cancelled`] at once, and the server thread running
    /// it (with every call it made) is alerted, as when a deadline passes.
    /// If the thread is in no call, its next call is cancelled. A call whose
    /// reply came before it could see the cancel returns the reply, and the
    /// cancel is spent with it.
    ///
    /// The cancel also sets the thread's own alert (so that it reaches the
    /// server of a call being posted as it comes, and wakes an alertable
    /// sleep meanwhile); that alert belongs to the call the cancel ends and
    /// is consumed with it: once that call has returned (cancelled, or with
    /// the reply that beat the cancel), [`alerted`] is false again and the
    /// thread's next alertable wait runs its course. An alert that
    /// [`ShuttleHandle::alert`] set, before or after the cancel, is not
    /// consumed: it stays until [`clear_alert`].
    ///
    /// ```
    /// use lintel::{CallError, Door, Reply, Request};
    /// let d = Door::create(0, |_: Request<'_>, _: &mut Reply| Ok(()));
    /// lintel::shuttle::current().cancel();
    /// assert!(lintel::shuttle::alerted(), "pending with the cancel");
    /// assert_eq!(d.call_bytes(b"").unwrap_err(), CallError::Cancelled);
    /// assert!(!lintel::shuttle::alerted(), "consumed by the call it ended");
    /// assert!(d.call_bytes(b"").is_ok(), "a cancel ends one call");
    /// ```
    pub fn cancel(&self) {
        self.0.cancel()
    }
}

/// The calling thread's shuttle.
pub fn current() -> ShuttleHandle {
    ShuttleHandle(current_arc())
}

/// Whether this thread's shuttle has been alerted.
#[inline]
pub fn alerted() -> bool {
    CURRENT
        .try_with(|s| s.0.alerted.load(Relaxed) != 0)
        .unwrap_or(false)
}

/// Clear this thread's alert.
pub fn clear_alert() {
    let _ = CURRENT.try_with(|s| s.0.alerted.store(0, SeqCst));
}

/// The sleep was cut short by an alert.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("alerted")]
pub struct Alerted;

/// Sleep up to `d`, returning early with [`Alerted`] if an alert arrives.
pub fn sleep_alertable(d: Duration) -> Result<(), Alerted> {
    let s = current_arc();
    let end = Instant::now() + d;
    loop {
        if s.alerted.load(SeqCst) != 0 {
            return Err(Alerted);
        }
        let now = Instant::now();
        if now >= end {
            return Ok(());
        }
        sys::futex_wait(&s.alerted, 0, Some(end - now));
    }
}

/// Marks the shuttle's thread as blocked in call `seq` on `slot` of
/// connection `conn`, sleeping (when it sleeps) on the futex word `sleep`.
/// The call paths hold their thread's shuttle (in the slot lease or the
/// worker), so no thread-local lookup is made per call.
///
/// The caller issues a full fence after this (when it publishes its request)
/// and then checks [`Shuttle::is_alerted`] and [`Shuttle::has_cancel`] again:
/// with the alerter's store of `alerted` (the canceller's of `cancelled`)
/// before its load of `out_call`, one of the two sees the
/// other, so an alert or cancel is never lost between the request's flags
/// and the wait.
pub(crate) struct InCall<'a>(&'a Shuttle);

/// The thread enters call `seq` on `slot` of connection `conn`, sleeping on
/// `sleep` when it sleeps; it leaves when the guard drops.
#[inline]
pub(crate) fn enter_call<'a>(
    s: &'a Shuttle,
    conn: u64,
    slot: u32,
    seq: u32,
    sleep: &AtomicU32,
) -> InCall<'a> {
    note_call(s, conn, slot, seq, sleep);
    InCall(s)
}

/// [`enter_call`] without a guard: the caller calls [`call_over`] on each
/// of its ways out (the fast path's, in `client::fast`).
#[inline(always)]
pub(crate) fn note_call(s: &Shuttle, conn: u64, slot: u32, seq: u32, sleep: &AtomicU32) {
    // A thread calls one server again and again: these rarely change, and
    // a store that need not be made is not made.
    let addr = sleep as *const AtomicU32 as usize;
    if s.waiting_on.load(Relaxed) != addr || s.out_conn.load(Relaxed) != conn {
        s.waiting_on.store(addr, Relaxed);
        s.out_conn.store(conn, Relaxed);
    }
    // (Release: whoever sees the call sees its connection and futex word.)
    s.out_call.store(in_call(slot, seq), Release);
}

/// The call [`note_call`] noted is over.
#[inline(always)]
pub(crate) fn call_over(s: &Shuttle) {
    s.out_call.store(0, Relaxed);
}

/// The `out_call` word of call `seq` on `slot` (below 2^31): never 0.
#[inline(always)]
fn in_call(slot: u32, seq: u32) -> u64 {
    (u64::from(seq) << 32) | (u64::from(slot) << 1) | 1
}

/// The slot and sequence of an `out_call` word; `None` between calls.
fn call_of(word: u64) -> Option<(u32, u32)> {
    (word != 0).then_some(((word as u32) >> 1, (word >> 32) as u32))
}

impl Drop for InCall<'_> {
    #[inline]
    fn drop(&mut self) {
        call_over(self.0);
    }
}

/// Whether a call started now has anything to check first: a deadline in
/// force or a cancel pending (one look each; [`check_call`] decides).
#[inline(always)]
pub(crate) fn call_checks_due() -> bool {
    crate::context::deadline::current() != 0 || raw::has_cancel()
}

/// Whether this thread may start a call now: not if it was cancelled (the
/// cancel is used up) or its deadline has passed.
#[inline]
pub(crate) fn check_call() -> Result<(), crate::context::error::CallError> {
    if crate::context::deadline::passed(crate::context::deadline::current()) {
        return Err(crate::context::error::CallError::TimedOut);
    }
    if CURRENT.try_with(|s| s.0.take_cancel()).unwrap_or(false) {
        return Err(crate::context::error::CallError::Cancelled);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The word a thread in a call publishes names the call's slot and
    /// sequence, whatever they are, and reads as "no call" once it is over.
    #[test]
    fn the_call_a_thread_is_in_reads_back_as_noted() {
        let s = fresh();
        let word = AtomicU32::new(0);
        assert_eq!(call_of(s.out_call.load(SeqCst)), None);
        for (slot, seq) in [(0, 1), (63, u32::MAX), (5, 0x8000_0001)] {
            note_call(&s, 7, slot, seq, &word);
            assert_eq!(call_of(s.out_call.load(SeqCst)), Some((slot, seq)));
            assert_eq!(s.out_conn.load(SeqCst), 7);
            assert_eq!(s.waiting_on.load(SeqCst), &word as *const AtomicU32 as usize);
            call_over(&s);
            assert_eq!(call_of(s.out_call.load(SeqCst)), None);
        }
    }

    /// The co-located path's quick look (`raw`) sees a cancel another
    /// thread sends, and sees nothing once `check_call` has used it up or
    /// before the thread's shuttle exists.
    #[test]
    fn a_cancel_from_another_thread_is_seen_by_the_quick_look() {
        std::thread::spawn(|| {
            assert!(!call_checks_due(), "no shuttle yet: nothing to see");
            let me = current();
            assert!(!call_checks_due());
            std::thread::spawn(move || me.cancel()).join().unwrap();
            assert!(call_checks_due(), "the cancel is seen");
            assert_eq!(check_call(), Err(crate::context::error::CallError::Cancelled));
            assert!(!call_checks_due(), "and used up by the call it cancelled");
            clear_alert();
        })
        .join()
        .unwrap();
    }
}
