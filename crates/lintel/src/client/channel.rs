//! The caller's side of a cross-domain call: LRPC channels.
//!
//! Each client thread leases one slot of the connection's call area the
//! first time it calls over that connection and keeps it (thread-local)
//! while it keeps calling, so a server thread bound to the slot is ready for
//! it: direct hand-off with no queue in between. A thread that stops calling
//! loses its slot to any newcomer that needs one (see `lease`).
//!
//! A call writes its arguments into the slot, bumps `req_seq`, and waits for
//! `rep_seq` to match: spinning while the server runs on another CPU, then
//! sleeping on the futex. [`call`] is the fast path (≤ 16 bytes each way,
//! no doors, nothing unusual, this thread's last lease): guards, then a
//! chain of short steps entered by jumps (`quick_*`), on a lease borrowed
//! for the call ([`last::Quick`]). It touches only the slot's two header
//! lines and leaves anything else to [`call_checked`], where [`call_fast`]
//! serves small calls with a deadline or a first call, and
//! [`call_vanilla`] carries data in the data region and doors.
//!
//! A call whose deadline passes (or that is cancelled) is abandoned: the
//! server is alerted, the caller returns at once, and the slot drains until
//! the late reply has landed before anyone uses it again (`lease`).

use std::cell::{Cell, RefCell};
use std::os::fd::AsFd;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering::*};
use std::time::Duration;

use crate::abi::wire::Ctl;
use crate::abi::{
    BUSY, DATA_CAP, FLAG_ALERT, FLAG_BUFS, FLAG_DEADLINE, FLAG_VANILLA, INLINE, MAX_DOORS, OFF_CLIENT_CPU,
    OFF_DATA, OFF_DEADLINE, OFF_FLAGS, OFF_GRANT, OFF_IN_BUFS, OFF_IN_DOORS, OFF_IN_LEN, OFF_IN_SEG,
    OFF_OUT_INLINE, SEQ_DEAD, SPINNING, ST_OK, ST_TOO_LARGE, ST_UNTAKEN, payload_offset,
};
use crate::context::error::CallError;
use crate::context::settings::Settings;
use crate::context::shuttle::{self, Shuttle};
use crate::context::stats::{self, Counters, Path};
use crate::object::buffer::{self, Buffer};
use crate::object::conn::Conn;
use crate::object::door::{Door, RemoteDoor, Reply, check_sizes};
use crate::state::call_area::OutArea;
use crate::state::handshake::{self, Posted, Shared};
use crate::state::lease::Claim;
use crate::sys;
use crate::sys::spin::Spinner;
use crate::sys::umem::{Packed, Polled, ReplyHeader, RequestHeader, Slot, SyncWord};
use crate::{context::deadline, object::transfer};

use last::Quick;

/// One thread's lease of one slot.
struct Lease {
    conn: Arc<Conn>,
    area: Arc<OutArea>,
    claim: Claim,
    slot: Slot,
    /// The CPU this thread ran on during its last call.
    cpu: Cell<u32>,
    /// The call on the slot was abandoned: the lease is void.
    abandoned: Cell<bool>,
    counters: Counters,
    /// This thread's shuttle (a lease never leaves its thread).
    shuttle: Arc<Shuttle>,
    /// The domain's settings (spinning, forced path), read on every call.
    settings: &'static Settings,
    /// Held in this thread's `LEASES` (so it may be `last`).
    held: Cell<bool>,
}

impl Lease {
    #[inline]
    fn next_seq(&self) -> u32 {
        self.area.leases.next_seq(&self.claim, SEQ_DEAD)
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.area.leases.release(&self.claim);
    }
}

thread_local! {
    /// Every lease this thread holds.
    static LEASES: Held = const { Held(RefCell::new(Vec::new())) };
}

/// This thread's leases; whichever leaves forgets [`last`] first.
struct Held(RefCell<Vec<Rc<Lease>>>);

impl Drop for Held {
    fn drop(&mut self) {
        last::clear();
    }
}

/// The lease of this thread's last call: the common case, a thread calling
/// one server again, finds its lease with one thread-local load, no search.
/// Not owning (a plain pointer needs no destructor, so its thread-local is
/// read without a liveness check): it names a lease that `LEASES` holds.
mod last {
    use std::cell::Cell;
    use std::ptr::NonNull;
    use std::rc::Rc;

    use super::Lease;

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
    pub(super) unsafe fn borrow_if(p: *const Lease, keep: impl FnOnce(&Lease) -> bool) -> Option<Quick> {
        let p = NonNull::new(p.cast_mut())?;
        // SAFETY: `p` is non-null, so it came from `Rc::as_ptr` of a lease
        // `LEASES` held (`LAST`'s invariant) and still holds (our caller's
        // promise).
        keep(unsafe { p.as_ref() }).then_some(Quick(p))
    }

    /// A lease borrowed from `LEASES` for one call of the fast path, with no
    /// count of its own: a count is two stores to take and let go, and the
    /// fast path runs nothing that could let go of a lease (no code of a
    /// user's, no new lease) until it ends ([`super::end_quick`]). Code that
    /// might takes a count first ([`Quick::counted`]).
    pub(super) struct Quick(NonNull<Lease>);

    impl Quick {
        #[inline(always)]
        pub(super) fn get(&self) -> &Lease {
            // SAFETY: the lease is held in `LEASES` (`borrow_if`'s caller's
            // promise), and stays so while a `Quick` is (its holder runs
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
}

/// What [`call`] needs of the calling thread's own state: its last lease and
/// its deadline, read in the caller's code ([`Door::call`] is inlined
/// there) and passed in registers. The compiler takes a thread-local
/// access for a call that clobbers registers; made here, in a function
/// that holds its values in saved registers anyway, it costs [`call`]
/// none.
#[derive(Clone, Copy)]
pub(crate) struct Here {
    last: *const Lease,
    deadline: u64,
}

impl Here {
    /// The calling thread's. [`call`] must be called next, with nothing run
    /// in between.
    #[inline(always)]
    pub(crate) fn now() -> Here {
        Here {
            last: last::peek(),
            deadline: deadline::current(),
        }
    }
}

/// Call a door served by another domain, passing no doors: the fast path,
/// when its guards pass (≤ 16 bytes, no deadline or cancel, and this thread's
/// last lease is on this connection and still its own); else
/// [`call_checked`].
///
/// Shaped by its stores: the machine's stores leave in order, so every
/// store before the request is posted (a saved register, a spill, a note
/// for later) delays the post by about a cycle. So the function holds few
/// values across its calls, its unusual exits are out of line, and what it
/// notes after the reply is what it must.
///
/// Its error comes boxed: a result one register wide, so that the function
/// ends in jumps rather than calls and needs no frame before the post.
#[inline(never)]
pub(crate) fn call(
    rd: &RemoteDoor,
    data: &[u8],
    reply: &mut Reply,
    here: Here,
) -> Result<(), Box<CallError>> {
    // (A reply still holding doors or buffers has them dropped, which may
    // run code of a user's: not on the fast path.)
    let small = data.len() <= INLINE && reply.doors.is_empty() && reply.buffers.is_empty();
    let keep = |l: &Lease| small && here.deadline == 0 && quick(l, &rd.conn);
    // SAFETY: `here` was read just before this call (`Here`), and `keep`
    // only reads the lease and begins its claim.
    let lease = match unsafe { last::borrow_if(here.last, keep) } {
        Some(l) => l,
        None => return call_checked_bytes(rd, data, reply),
    };
    let Packed { lo, hi, len } = Packed::of(data);
    quick_post(lease, rd.grant, lo, hi, len, reply)
}

/// [`call`] once its guards passed: post the request, then finish. Apart
/// from the guards, so that each holds fewer values at once (every value
/// past the caller-saved registers costs a saved register, a store).
/// The bytes come packed ([`Packed`]), each word in a register of its own.
#[inline(never)]
fn quick_post(
    lease: Quick,
    grant: u32,
    lo: u64,
    hi: u64,
    len: u32,
    reply: &mut Reply,
) -> Result<(), Box<CallError>> {
    let data = Packed { lo, hi, len };
    // ---- the lease is busy with this call: no return before the reply ----
    let l = lease.get();
    let (conn, slot, shuttle) = (&*l.conn, &l.slot, &*l.shuttle);
    let seq = l.next_seq();
    shuttle::note_call(shuttle, conn.id, l.claim.index, seq, slot.sync(SyncWord::RepSeq));
    let alerted = shuttle.is_alerted();
    let flags = if alerted { FLAG_ALERT } else { 0 };
    RequestHeader::write_packed(slot, grant, flags, data, l.cpu.get(), 0);
    let posted = handshake::post_unwoken::<Shared>(&handshake::Words::of(slot), seq);
    // (An alert that came after the look above, seen after the post's
    // fence; one that comes later finds the call noted and is forwarded.)
    let late = !alerted && shuttle.is_alerted();
    if posted != Posted::Running || late {
        return quick_posted_slow(lease, seq, posted, late, reply);
    }
    quick_finish(lease, seq, reply)
}

/// [`call`]'s guards on the last call's lease, the lease's own last: it
/// is on `conn`, nothing is to be checked before the call, and it is
/// still this thread's (then busy with the call).
#[inline(always)]
fn quick(l: &Lease, conn: &Arc<Conn>) -> bool {
    Arc::ptr_eq(&l.conn, conn)
        && !l.settings.force_vanilla.load(Relaxed)
        && !l.shuttle.has_cancel()
        && l.area.leases.begin(&l.claim)
}

/// [`call`] once its request is posted to a running server: poll for the
/// reply alone a few times, then take it ([`quick_reply`]) or wait the full
/// way ([`quick_wait`]). Out of line, entered by a jump: what it saves is
/// saved after the post, while the server runs.
#[inline(never)]
fn quick_finish(lease: Quick, seq: u32, reply: &mut Reply) -> Result<(), Box<CallError>> {
    if hot_poll(lease.get(), seq) {
        return quick_reply(lease, seq, reply);
    }
    quick_wait(lease, seq, reply)
}

/// [`call`]'s full wait (spin while the server runs elsewhere, then
/// sleep), then the reply.
#[inline(never)]
fn quick_wait(lease: Quick, seq: u32, reply: &mut Reply) -> Result<(), Box<CallError>> {
    let l = lease.get();
    match wait_reply_full(l, &l.conn, seq, 0) {
        Ok(()) => quick_reply(lease, seq, reply),
        Err(why) => quick_unanswered(lease, why),
    }
}

/// [`call`]'s reply has landed: a small success is taken here, anything
/// else by [`quick_reply_slow`]; then the call ends. A leaf when the reply
/// carries no bytes and the lease is kept: what might call out (bytes into
/// a vector that may grow, letting go of a void lease) is reached by a
/// jump, so no register is saved on the way back to the caller's next post.
#[inline(never)]
fn quick_reply(lease: Quick, seq: u32, reply: &mut Reply) -> Result<(), Box<CallError>> {
    let l = lease.get();
    let h = ReplyHeader::read(&l.slot);
    if h.status != ST_OK || h.out_len as usize > INLINE || (h.out_doors | h.out_bufs) != 0 {
        return quick_reply_slow(lease.counted(), seq, reply);
    }
    reply.data.clear(); // (its lists are empty: `call`'s guard)
    if h.out_len != 0 {
        return quick_reply_bytes(lease, h.out_len as usize, reply);
    }
    quick_ok(lease)
}

/// [`quick_reply`] of a reply carrying `len` (≤ [`INLINE`]) bytes.
#[inline(never)]
fn quick_reply_bytes(lease: Quick, len: usize, reply: &mut Reply) -> Result<(), Box<CallError>> {
    let bytes = lease.get().slot.read_inline(OFF_OUT_INLINE);
    reply.data.extend_from_slice(&bytes[..len]);
    quick_ok(lease)
}

/// [`call`] succeeded: counted, then ended.
#[inline(always)]
fn quick_ok(lease: Quick) -> Result<(), Box<CallError>> {
    lease.get().counters.small_ok(Path::Fast);
    end_quick(lease);
    Ok(())
}

/// [`call`]'s request did not find its server running, or an alert came
/// while it was posted: a sleeping server is woken here, then the call
/// waits; a kick or a late alert is for [`quick_posted_odd`]. Out of line:
/// the wake-up's system call would cost the fast path saved registers.
#[inline(never)]
fn quick_posted_slow(
    lease: Quick,
    seq: u32,
    posted: Posted,
    late: bool,
    reply: &mut Reply,
) -> Result<(), Box<CallError>> {
    if posted == Posted::Woken {
        handshake::wake_server::<Shared>(&handshake::Words::of(&lease.get().slot));
        if !late {
            return quick_wait(lease, seq, reply);
        }
    }
    quick_posted_odd(lease, seq, posted, late, reply)
}

/// [`call`]'s request found no server bound to the slot (kick one), or
/// the thread was alerted while posting (`late`: forward the alert); a
/// sleeping server is woken already.
#[cold]
#[inline(never)]
fn quick_posted_odd(
    lease: Quick,
    seq: u32,
    posted: Posted,
    late: bool,
    reply: &mut Reply,
) -> Result<(), Box<CallError>> {
    let l = lease.get();
    let (conn, index) = (&*l.conn, l.claim.index);
    if posted == Posted::Unbound
        && let Err(why) = kick(conn, index)
    {
        return quick_unanswered(lease, why);
    }
    if late {
        alert_late(conn, index, seq);
    }
    if posted == Posted::Running {
        return quick_finish(lease, seq, reply);
    }
    // (A server just woken or kicked is not yet running: no hot polls.)
    quick_wait(lease, seq, reply)
}

/// [`call`]'s call is over: its in-call note ends (see `shuttle::note_call`),
/// then as [`end_call`], of the borrowed lease; a void lease is let go out
/// of line, so that a successful call's end stays a leaf.
#[inline(always)]
fn end_quick(lease: Quick) {
    shuttle::call_over(&lease.get().shuttle);
    if !ended_kept(lease.get()) {
        forget_quick(lease);
    }
}

/// [`end_quick`]'s lease is void: let go.
#[cold]
#[inline(never)]
fn forget_quick(lease: Quick) {
    forget(&lease.counted());
}

// The fast path's arguments and results are at most `INLINE` bytes, all in
// the first size bucket: its slow exits count them as 0 bytes.
const _: () = assert!(stats::BUCKET_0_MAX >= INLINE);

/// [`call`] got no reply: counted, the lease let go, the error returned.
#[cold]
#[inline(never)]
fn quick_unanswered(lease: Quick, why: Unanswered) -> Result<(), Box<CallError>> {
    let l = lease.get();
    l.counters.call(Path::Fast, 0, 0, None);
    end_quick(lease);
    Err(Box::new(why.into()))
}

/// [`call`]'s reply is not a small success: taken the full way, counted,
/// the lease let go. The header is read afresh (and checked as any reply's
/// is) rather than handed over, which would keep the fast path's copy in
/// memory. Taking the reply may drop doors, and so run code of a user's:
/// the lease is counted.
#[cold]
#[inline(never)]
fn quick_reply_slow(lease: Rc<Lease>, seq: u32, reply: &mut Reply) -> Result<(), Box<CallError>> {
    let h = ReplyHeader::read(&lease.slot);
    let r = take_reply(&lease, &lease.conn, seq, h, &[], reply, false);
    let result = r.as_ref().ok().map(|_| (reply.data.len(), reply.doors.len()));
    lease.counters.call(Path::Fast, 0, 0, result);
    shuttle::call_over(&lease.shuttle);
    end_call(lease);
    r.map_err(Box::new)
}

/// [`call_checked`] without doors: few enough arguments that [`call`]
/// jumps here instead of calling.
#[inline(never)]
fn call_checked_bytes(rd: &RemoteDoor, data: &[u8], reply: &mut Reply) -> Result<(), Box<CallError>> {
    call_checked(rd, data, &[], reply).map_err(Box::new)
}

/// Call a door served by another domain, every case: a first call, a
/// deadline or a cancel to check, data or doors beyond the fast path's.
#[inline(never)]
pub(crate) fn call_checked(
    rd: &RemoteDoor,
    data: &[u8],
    doors: &[Door],
    reply: &mut Reply,
) -> Result<(), CallError> {
    let lease = match begin(&rd.conn) {
        Ok(lease) => lease,
        Err(e) => return refused(data, doors, e),
    };
    let fast = data.len() <= INLINE && doors.is_empty() && !lease.settings.force_vanilla.load(Relaxed);
    let r = if fast {
        call_fast(&lease, rd, data, reply)
    } else {
        call_vanilla(&lease, rd, data, doors, Vec::new(), reply)
    };
    end_call(lease);
    // (Matched so that success is written straight into the caller's
    // result, not copied out of a temporary.)
    match r {
        Ok(()) => Ok(()),
        Err(e) => Err(e),
    }
}

/// A call that also passes buffers (always the vanilla path).
pub(crate) fn call_with(
    rd: &RemoteDoor,
    data: &[u8],
    doors: &[Door],
    buffers: Vec<Buffer>,
    reply: &mut Reply,
) -> Result<(), CallError> {
    let lease = match begin(&rd.conn) {
        Ok(lease) => lease,
        Err(e) => return refused(data, doors, e),
    };
    let r = call_vanilla(&lease, rd, data, doors, buffers, reply);
    end_call(lease);
    r
}

/// This thread's lease on `conn`, busy for one call: the last call's when
/// it was on `conn` and is still ours (the common case), else [`lease`],
/// which becomes the last call's.
#[inline(always)]
fn begin(conn: &Arc<Conn>) -> Result<Rc<Lease>, CallError> {
    match last::get() {
        Some(l) if Arc::ptr_eq(&l.conn, conn) && l.area.leases.begin(&l.claim) => Ok(l),
        last => lease(conn, last).inspect(|l| {
            if l.held.get() {
                last::set(l);
            }
        }),
    }
}

/// The call on `lease` is over: keep the lease for the next one, unless it
/// was abandoned or handed back to a thread that waits for a slot.
#[inline(always)]
fn end_call(lease: Rc<Lease>) {
    if !ended_kept(&lease) {
        forget(&lease);
    }
}

/// The call on `l` ended: whether the lease is kept for the next one
/// (else it is void: abandoned, or handed back to a thread that waits).
#[inline(always)]
fn ended_kept(l: &Lease) -> bool {
    l.shuttle.call_ended();
    !l.abandoned.get() && l.area.leases.end(&l.claim)
}

/// The fast path: ≤ 16 bytes in, no doors. Guards first; the unusual cases
/// (a deadline or cancel, a server that sleeps, a reply that is not small)
/// leave for the slow functions below.
#[inline]
fn call_fast(lease: &Lease, rd: &RemoteDoor, data: &[u8], reply: &mut Reply) -> Result<(), CallError> {
    let (conn, slot, shuttle) = (&*rd.conn, &lease.slot, &*lease.shuttle);
    let due = deadline::current();
    if (due != 0 || shuttle.has_cancel())
        && let Err(e) = shuttle::check_call()
    {
        lease.counters.call(Path::Fast, data.len(), 0, None);
        return Err(e);
    }
    // ---- no return before the reply from here on ----
    let seq = lease.next_seq();
    let index = lease.claim.index;
    let _in_call = shuttle::enter_call(shuttle, conn.id, index, seq, slot.sync(SyncWord::RepSeq));
    let alerted = shuttle.is_alerted();
    let flags = if alerted { FLAG_ALERT } else { 0 };
    RequestHeader::write_small(slot, rd.grant, flags, data, lease.cpu.get(), due);
    let waited = post(slot, conn, index, seq, alerted, shuttle)
        .and_then(|running| wait_reply(lease, conn, seq, running, due));
    if let Err(e) = waited {
        return unanswered(lease, Path::Fast, data.len(), 0, e);
    }

    let h = ReplyHeader::read(slot);
    if due != 0 || h.status != ST_OK || h.out_len as usize > INLINE || (h.out_doors | h.out_bufs) != 0 {
        let r = take_reply(lease, &rd.conn, seq, h, &[], reply, false);
        let r = settled(due, r, reply);
        let result = r.as_ref().ok().map(|_| (reply.data.len(), reply.doors.len()));
        lease.counters.call(Path::Fast, data.len(), 0, result);
        return r;
    }
    reply.clear();
    if h.out_len != 0 {
        let bytes = slot.read_inline(OFF_OUT_INLINE);
        reply.data.extend_from_slice(&bytes[..h.out_len as usize]);
    }
    lease.counters.small_ok(Path::Fast);
    Ok(())
}

/// The result of a call made under deadline `due` (0: none) whose reply
/// came: [`CallError::TimedOut`] if the deadline passed before the caller
/// saw it, whatever the server sent (see `deadline`); the reply's contents
/// are then dropped.
#[cold]
fn settled(due: u64, r: Result<(), CallError>, reply: &mut Reply) -> Result<(), CallError> {
    let r = deadline::settle(due, r);
    if r.is_err() {
        reply.clear();
    }
    r
}

/// The vanilla path: data in the data region (also when it would fit
/// inline, if forced for the INKS "message" comparison), doors passed.
fn call_vanilla(
    lease: &Lease,
    rd: &RemoteDoor,
    data: &[u8],
    doors: &[Door],
    buffers: Vec<Buffer>,
    reply: &mut Reply,
) -> Result<(), CallError> {
    let (conn, slot, shuttle) = (&rd.conn, &lease.slot, &*lease.shuttle);
    let counted = |r: Result<(), CallError>, reply: &Reply| {
        let result = r.as_ref().ok().map(|_| (reply.data.len(), reply.doors.len()));
        lease
            .counters
            .call(Path::Vanilla, data.len(), doors.len(), result);
        r
    };
    if let Err(e) = check_sizes("arguments", data.len(), doors.len()).and_then(|()| shuttle::check_call()) {
        return counted(Err(e), reply);
    }
    let due = deadline::current();
    let seq = lease.next_seq();
    let index = lease.claim.index;
    let in_call = shuttle::enter_call(shuttle, conn.id, index, seq, slot.sync(SyncWord::RepSeq));
    let alerted = shuttle.is_alerted();
    slot.set(OFF_GRANT, rd.grant);
    let bufs_flag = if buffers.is_empty() { 0 } else { FLAG_BUFS };
    let due_flag = if due != 0 { FLAG_DEADLINE } else { 0 };
    slot.set(
        OFF_FLAGS,
        FLAG_VANILLA | bufs_flag | due_flag | if alerted { FLAG_ALERT } else { 0 },
    );
    slot.set(OFF_IN_LEN, data.len() as u32);
    slot.set(OFF_CLIENT_CPU, lease.cpu.get());
    slot.set64(OFF_DEADLINE, due);
    match write_args(lease, conn, index, data) {
        Ok(generation) => slot.set(OFF_IN_SEG, generation),
        Err(e) => return counted(Err(e), reply),
    }
    let granted = match doors.is_empty() {
        true => Vec::new(),
        false => match transfer::send_doors(conn, doors, slot, true, index, seq) {
            Ok(g) => g,
            Err(e) => return counted(Err(e), reply),
        },
    };
    slot.set(OFF_IN_DOORS, doors.len() as u32);
    let nbufs = buffers.len() as u32;
    let lent = match buffers.is_empty() {
        true => Vec::new(),
        false => match buffer::send(conn, buffers, slot, true, index, seq) {
            Ok(l) => l,
            Err(e) => {
                transfer::take_back(conn, &granted);
                return counted(Err(e), reply);
            }
        },
    };
    slot.set(OFF_IN_BUFS, nbufs);
    let waited = post(slot, conn, index, seq, alerted, shuttle).and_then(|running| {
        let r = wait_reply(lease, conn, seq, running, due);
        drop(in_call);
        r
    });
    if let Err(e) = waited {
        return counted(Err(e.into()), reply);
    }
    let h = ReplyHeader::read(slot);
    if h.status & ST_UNTAKEN != 0 && !lent.is_empty() {
        buffer::take_back(conn, &lent);
    }
    let r = take_reply(lease, conn, seq, h, &granted, reply, true);
    let r = if due == 0 { r } else { settled(due, r, reply) };
    if data.len() > DATA_CAP {
        lease.area.bulk[index as usize].lock().out.trim();
    }
    counted(r, reply)
}

/// Put the arguments where the server reads them: the slot's data region,
/// or (larger than it) the slot's bulk segment, sent to the server first
/// if it is new. Returns the generation to name in the header (0: none).
fn write_args(lease: &Lease, conn: &Conn, index: u32, data: &[u8]) -> Result<u32, CallError> {
    if data.len() <= DATA_CAP {
        lease.slot.write(OFF_DATA, data);
        return Ok(0);
    }
    let mut bulk = lease.area.bulk[index as usize].lock();
    conn.put_bulk(&mut bulk.out, true, index, data)
}

/// Publish the request posted in `slot` and make sure a server thread will
/// see it; whether one was running (so the reply may come at once).
#[inline]
fn post(
    slot: &Slot,
    conn: &Conn,
    index: u32,
    seq: u32,
    alerted: bool,
    shuttle: &Shuttle,
) -> Result<bool, Unanswered> {
    let running = match handshake::post::<Shared>(&handshake::Words::of(slot), seq) {
        Posted::Running => true,
        Posted::Woken => false,
        Posted::Unbound => {
            kick(conn, index)?;
            false
        }
    };
    if !alerted && shuttle.is_alerted() {
        alert_late(conn, index, seq);
    }
    Ok(running)
}

/// Take a reply the fast path does not: an error status, a result in the
/// data region, doors. `h` is the reply's header as read once; `granted`
/// are the grants made for the call's doors, taken back if the server
/// refused the call before taking them.
#[cold]
fn take_reply(
    lease: &Lease,
    conn: &Arc<Conn>,
    seq: u32,
    h: ReplyHeader,
    granted: &[u32],
    reply: &mut Reply,
    vanilla: bool,
) -> Result<(), CallError> {
    let slot = &lease.slot;
    reply.clear();
    if h.status != ST_OK {
        let untaken = h.status & ST_UNTAKEN != 0;
        if untaken {
            transfer::take_back(conn, granted);
        }
        return Err(match h.status & !ST_UNTAKEN {
            // The server's limit refused our arguments (untaken) or its
            // result: `out_len` names the limit, `out_doors` the length.
            ST_TOO_LARGE => CallError::TooLarge {
                what: if untaken { "arguments" } else { "result" },
                len: h.out_doors as usize,
                max: h.out_len as usize,
            },
            st => CallError::from_status(st, h.out_len),
        });
    }
    let (out_len, out_doors) = (h.out_len as usize, h.out_doors as usize);
    if out_doors > MAX_DOORS {
        return Err(CallError::BadMessage("reply header out of range"));
    }
    check_sizes("result", out_len, 0)?; // before anything is allocated for it
    if out_len > DATA_CAP {
        take_bulk_reply(lease, conn, h, reply)?;
    } else if out_len > 0 {
        reply.data.resize(out_len, 0);
        slot.read(payload_offset(OFF_OUT_INLINE, out_len, vanilla), &mut reply.data);
    }
    if out_doors > 0 {
        let index = lease.claim.index;
        transfer::receive_doors(conn, slot, out_doors, false, index, seq, &mut reply.doors)?;
    }
    if h.out_bufs > 0 {
        let index = lease.claim.index;
        buffer::receive(
            conn,
            slot,
            h.out_bufs as usize,
            false,
            index,
            seq,
            &mut reply.buffers,
        )?;
    }
    Ok(())
}

/// Copy a result larger than the data region out of the server's bulk
/// segment for our slot, mapping the segment first if the reply names a
/// new one.
fn take_bulk_reply(
    lease: &Lease,
    conn: &Arc<Conn>,
    h: ReplyHeader,
    reply: &mut Reply,
) -> Result<(), CallError> {
    let index = lease.claim.index;
    let mut bulk = lease.area.bulk[index as usize].lock();
    let generation = ReplyHeader::segment(&lease.slot);
    if !bulk.inb.has(generation) {
        let fd = conn
            .take_segment(false, index, generation)
            .ok_or(CallError::BadMessage("bulk segment missing"))?;
        bulk.inb
            .accept(generation, fd, crate::context::settings::max_message())
            .map_err(CallError::BadMessage)?;
    }
    let r = bulk.inb.read_into(h.out_len as usize, &mut reply.data);
    bulk.inb.trim();
    r.map_err(CallError::BadMessage)
}

/// A call that could not take a slot: counted, and its error returned.
#[cold]
fn refused(data: &[u8], doors: &[Door], e: CallError) -> Result<(), CallError> {
    let path = if data.len() <= INLINE && doors.is_empty() {
        Path::Fast
    } else {
        Path::Vanilla
    };
    stats::call(path, data.len(), doors.len(), None);
    Err(e)
}

/// An alert that arrived while the request was being posted: forward it.
#[cold]
fn alert_late(conn: &Conn, index: u32, seq: u32) {
    conn.send(&Ctl::Alert { slot: index, seq }, &[]);
}

#[cold]
fn kick(conn: &Conn, index: u32) -> Result<(), Unanswered> {
    if conn.send(&Ctl::Kick { slot: index }, &[]) {
        Ok(())
    } else {
        Err(Unanswered::PeerDied)
    }
}

/// Why a posted call ends without its reply: a small value, so the wait
/// returns it in a register rather than a [`CallError`] through memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Unanswered {
    PeerDied,
    Cancelled,
    TimedOut,
}

impl From<Unanswered> for CallError {
    fn from(why: Unanswered) -> CallError {
        match why {
            Unanswered::PeerDied => CallError::PeerDied,
            Unanswered::Cancelled => CallError::Cancelled,
            Unanswered::TimedOut => CallError::TimedOut,
        }
    }
}

/// A fast call that got no reply: counted, and its error returned.
#[cold]
fn unanswered(lease: &Lease, path: Path, len: usize, doors: usize, why: Unanswered) -> Result<(), CallError> {
    lease.counters.call(path, len, doors, None);
    Err(why.into())
}

/// Wait until `rep_seq == seq`. With the server running when the request
/// was posted (`running`), its reply usually lands within a few hundred
/// nanoseconds: poll for it alone first, with nothing else on the way.
#[inline(always)]
fn wait_reply(lease: &Lease, conn: &Conn, seq: u32, running: bool, due: u64) -> Result<(), Unanswered> {
    if running && hot_poll(lease, seq) {
        return Ok(());
    }
    wait_reply_slow(lease, conn, seq, due)
}

/// Poll the reply word alone a few times (when spinning is on): true if
/// reply `seq` landed.
#[inline(always)]
fn hot_poll(lease: &Lease, seq: u32) -> bool {
    if lease.settings.spin.load(Relaxed) {
        let rep = lease.slot.sync(SyncWord::RepSeq);
        for _ in 0..HOT_SPINS {
            if rep.load(Acquire) == seq {
                if seq.is_multiple_of(64) {
                    note_cpu(lease);
                }
                return true;
            }
            std::hint::spin_loop();
        }
    }
    false
}

/// Where this thread runs, looked up now and then (out of line: a call in
/// the poll loop would cost the fast path saved registers).
#[cold]
#[inline(never)]
fn note_cpu(lease: &Lease) {
    lease.cpu.set(sys::current_cpu());
}

/// Polls of the reply word before the full wait; a few hundred ns.
const HOT_SPINS: u32 = 16;
/// Longest single futex sleep: a lost wake-up costs at most this.
const MAX_SLEEP: Duration = Duration::from_millis(100);

/// The full wait: spin while the server runs on another CPU (when spinning
/// is on), then sleep on the futex, until the reply comes, the server dies,
/// the deadline passes or the call is cancelled (then the call is abandoned).
#[inline(never)]
fn wait_reply_slow(lease: &Lease, conn: &Conn, seq: u32, due: u64) -> Result<(), Unanswered> {
    wait_reply_full(lease, conn, seq, due)
}

/// [`wait_reply_slow`]'s body, also inlined where the fast path waits.
#[inline(always)]
fn wait_reply_full(lease: &Lease, conn: &Conn, seq: u32, due: u64) -> Result<(), Unanswered> {
    let budget = lease.settings.spin_budget_ns();
    if budget > 0 {
        if let Some(r) = spin_for_reply(lease, conn, seq, budget) {
            return r;
        }
    } else if lease.cpu.get() != u32::MAX {
        lease.cpu.set(u32::MAX);
    }
    sleep_for_reply(lease, conn, seq, due)
}

/// Spin for the reply while the server runs on another CPU, up to `budget`
/// ns; `None`: sleep for it.
#[cold]
#[inline(never)]
fn spin_for_reply(lease: &Lease, conn: &Conn, seq: u32, budget: u64) -> Option<Result<(), Unanswered>> {
    let slot = &lease.slot;
    let rep = slot.sync(SyncWord::RepSeq);
    let mut spinner = Spinner::new(budget);
    // Where we run: the server spins for our next call only while we run
    // elsewhere. Published with the next request, not now, so as not to
    // take the request's cache line back while the server reads it.
    let me = sys::current_cpu();
    lease.cpu.set(me);
    loop {
        if let Some(r) = outcome(lease, conn, seq, rep) {
            return Some(r);
        }
        let st = slot.get(Polled::ServerState);
        let server_elsewhere = (st == BUSY || st == SPINNING) && slot.get(Polled::ServerCpu) != me;
        if !(server_elsewhere && spinner.spin()) {
            return None;
        }
    }
}

/// Sleep until the reply comes (`handshake`, model-checked). A cancel wakes
/// the reply's word (named in `enter_call`, before the request's fence:
/// the canceller sees it or the check below sees the cancel).
#[inline]
fn sleep_for_reply(lease: &Lease, conn: &Conn, seq: u32, due: u64) -> Result<(), Unanswered> {
    let words = handshake::Words::of(&lease.slot);
    loop {
        let left = match due {
            0 => MAX_SLEEP,
            _ => match due.checked_sub(sys::monotonic_ns()) {
                Some(ns) if ns > 0 => Duration::from_nanos(ns).min(MAX_SLEEP),
                _ => return Err(abandon(lease, conn, seq, Unanswered::TimedOut)),
            },
        };
        if !lease.shuttle.has_cancel() {
            handshake::sleep_for_reply::<Shared>(&words, seq, left);
        }
        if let Some(r) = outcome(lease, conn, seq, words.rep) {
            return r;
        }
    }
}

/// How the wait for call `seq` ends, if it ends now: cancelled (a cancel
/// wins over a reply that lands at the same time), answered (`rep` shows
/// the reply) or the server died.
#[inline]
fn outcome(lease: &Lease, conn: &Conn, seq: u32, rep: &AtomicU32) -> Option<Result<(), Unanswered>> {
    if lease.shuttle.take_cancel() {
        return Some(Err(abandon(lease, conn, seq, Unanswered::Cancelled)));
    }
    let r = rep.load(Acquire);
    if r == seq {
        return Some(Ok(()));
    }
    if r == SEQ_DEAD || conn.is_dead() {
        return Some(Err(Unanswered::PeerDied));
    }
    None
}

/// Give up on call `seq`: alert its server (the call it runs, or the one
/// queued for a thread, and everything those call), and leave the slot to
/// drain until the late reply lands. The lease is void from here on.
#[cold]
fn abandon(lease: &Lease, conn: &Conn, seq: u32, why: Unanswered) -> Unanswered {
    conn.send(
        &Ctl::Alert {
            slot: lease.claim.index,
            seq,
        },
        &[],
    );
    lease.area.leases.abandon(&lease.claim);
    lease.abandoned.set(true);
    why
}

/// This thread's slot on `conn`, busy for one call, when the last call's
/// lease (`last`) was not it: the slot it leased
/// before if it still has it, else a new lease.
#[cold]
fn lease(conn: &Arc<Conn>, last: Option<Rc<Lease>>) -> Result<Rc<Lease>, CallError> {
    if let Some(l) = last
        && Arc::ptr_eq(&l.conn, conn)
    {
        forget(&l); // taken by another thread while this one was idle
        return new_lease(conn);
    }
    // `try_with` throughout: a call may come from a thread-local's
    // destructor or an exit handler, after `LEASES` is gone; it then takes
    // a lease for itself alone.
    let found = LEASES
        .try_with(|l| l.0.borrow().iter().find(|x| Arc::ptr_eq(&x.conn, conn)).cloned())
        .ok()
        .flatten();
    match found {
        Some(l) if l.area.leases.begin(&l.claim) => Ok(l),
        Some(l) => {
            forget(&l); // taken by another thread while this one was idle
            new_lease(conn)
        }
        None => new_lease(conn),
    }
}

#[cold]
fn new_lease(conn: &Arc<Conn>) -> Result<Rc<Lease>, CallError> {
    if conn.is_dead() {
        return Err(CallError::PeerDied);
    }
    // Forget leases on dead connections so their areas can go.
    last::clear();
    let _ = LEASES.try_with(|l| l.0.borrow_mut().retain(|x| !x.conn.is_dead() || unheld(x)));
    let area = {
        let mut out = conn.out.lock();
        match &*out {
            Some(a) => a.clone(),
            None => {
                let (a, fd) = OutArea::create().map_err(|e| CallError::Local(e.to_string()))?;
                if !conn.send(&Ctl::Area, &[fd.as_fd()]) {
                    return Err(CallError::PeerDied);
                }
                let a = Arc::new(a);
                *out = Some(a.clone());
                a
            }
        }
    };
    let due = deadline::current();
    let claim = area.leases.take_or_wait(
        |i, seq| area.settled(i, seq),
        || {
            if conn.is_dead() {
                Some(CallError::PeerDied)
            } else if deadline::passed(due) {
                Some(CallError::TimedOut)
            } else {
                None
            }
        },
    )?;
    let lease = Rc::new(Lease {
        conn: conn.clone(),
        slot: area.slot(claim.index),
        area,
        claim,
        cpu: Cell::new(u32::MAX),
        abandoned: Cell::new(false),
        counters: Counters::new(),
        shuttle: shuttle::current_arc(),
        settings: conn.settings,
        held: Cell::new(false),
    });
    if let Some(seq) = lease.claim.drained {
        release_late_doors(&lease, seq);
    }
    let held = LEASES.try_with(|l| l.0.borrow_mut().push(lease.clone())).is_ok();
    lease.held.set(held);
    Ok(lease)
}

/// The slot held the late reply to abandoned call `seq`: doors it carries
/// were granted to us, so take them and let them go (their releases reach
/// the server), rather than leave them held until the connection dies.
#[cold]
fn release_late_doors(lease: &Lease, seq: u32) {
    let slot = &lease.slot;
    let landed = slot.sync(SyncWord::RepSeq).load(Acquire) == seq;
    let h = ReplyHeader::read(slot);
    let n = h.out_doors as usize;
    if landed && h.status == ST_OK && n > 0 {
        let mut doors = Vec::new();
        let index = lease.claim.index;
        let _ = transfer::receive_doors(&lease.conn, slot, n.min(MAX_DOORS), false, index, seq, &mut doors);
    }
}

/// In a forked child: the leases this thread held are the parent's (their
/// slots live in memory the parent shares); forget them without giving
/// anything back.
pub(crate) fn forget_thread_leases() {
    last::clear();
    let _ = LEASES.try_with(|l| std::mem::forget(std::mem::take(&mut *l.0.borrow_mut())));
}

/// Drop this thread's (void) lease; its slot is no longer its own.
#[cold]
fn forget(lease: &Rc<Lease>) {
    last::clear();
    let _ = LEASES.try_with(|l| l.0.borrow_mut().retain(|x| !Rc::ptr_eq(x, lease) || unheld(x)));
}

/// `lease` leaves `LEASES` (so it may no longer be `last`): false, for `retain`.
fn unheld(lease: &Rc<Lease>) -> bool {
    lease.held.set(false);
    false
}
