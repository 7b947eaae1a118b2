//! The leases this thread holds, one per connection it calls over: found
//! by the last call's lease ([`super::last`]) or by a search, made on first
//! use, and given up when void (abandoned, or taken by a thread that waits
//! for a slot). The slots' own policy is `state::lease`.

use crate::abi::control::Ctl;
use crate::abi::{MAX_DOORS, ST_OK};
use crate::context::error::CallError;
use crate::context::shuttle::{self};
use crate::context::stats::Counters;
use crate::object::conn::Conn;
use crate::state::call_area::OutArea;
use crate::sys::umem::{ReplyHeader, SyncWord};
use crate::{context::deadline, object::transfer};
use std::cell::{Cell, RefCell};
use std::os::fd::AsFd;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::Ordering::*;

use super::last;
use super::lease::{At, Lease};

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

/// This thread's lease on `conn`, busy for one call: the last call's when
/// it was on `conn` and is still ours (the common case), else [`lease`],
/// which becomes the last call's.
#[inline(always)]
pub(super) fn begin(conn: &Arc<Conn>) -> Result<Rc<Lease>, CallError> {
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
pub(super) fn end_call(lease: Rc<Lease>) {
    if !ended_kept(&lease) {
        forget(&lease);
    }
}

/// The call on `l` ended: whether the lease is kept for the next one
/// (else it is void: abandoned, or handed back to a thread that waits).
#[inline(always)]
pub(super) fn ended_kept(l: &Lease) -> bool {
    l.shuttle.call_ended();
    !l.abandoned.get() && l.area.leases.end(&l.claim)
}

/// This thread's slot on `conn`, busy for one call, when the last call's
/// lease (`last`) was not it: the slot it leased
/// before if it still has it, else a new lease.
#[cold]
pub(super) fn lease(conn: &Arc<Conn>, last: Option<Rc<Lease>>) -> Result<Rc<Lease>, CallError> {
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
    let area = out_area(conn)?.clone();
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
        lately: Cell::new(0),
    });
    if let Some(seq) = lease.claim.drained {
        release_late_doors(&lease.at(), seq);
    }
    let held = LEASES.try_with(|l| l.0.borrow_mut().push(lease.clone())).is_ok();
    lease.held.set(held);
    Ok(lease)
}

/// This domain's call area on `conn`, made and sent to the peer (with the
/// notice socket's other end) on the first call.
#[inline]
pub(super) fn out_area(conn: &Conn) -> Result<&Arc<OutArea>, CallError> {
    match conn.out.get() {
        Some(a) => Ok(a),
        None => make_out_area(conn),
    }
}

/// Make and send this domain's call area on `conn` now, ahead of its
/// first call: the peer maps it, and starts a thread for it, while this
/// domain goes on ([`crate::boot::connect`]).
pub(crate) fn prepare_calls(conn: &Conn) {
    let _ = out_area(conn);
}

#[cold]
fn make_out_area(conn: &Conn) -> Result<&Arc<OutArea>, CallError> {
    let _made = conn.out_made.lock();
    if let Some(a) = conn.out.get() {
        return Ok(a);
    }
    if conn.is_dead() {
        return Err(CallError::PeerDied);
    }
    let (a, fd, notices) = OutArea::create().map_err(|e| CallError::Local(e.to_string()))?;
    if !conn.send(&Ctl::Area, &[fd.as_fd(), notices.as_fd()]) {
        return Err(CallError::PeerDied);
    }
    Ok(conn.out.get_or_init(|| Arc::new(a)))
}

/// The slot held the late reply to abandoned call `seq`: doors it carries
/// were granted to us, so take them and let them go (their releases reach
/// the server), rather than leave them held until the connection dies.
#[cold]
pub(super) fn release_late_doors(at: &At<'_>, seq: u32) {
    let landed = at.slot.sync(SyncWord::RepSeq).load(Acquire) == seq;
    let h = ReplyHeader::read(at.slot);
    let n = h.out_doors as usize;
    if landed && h.status == ST_OK && n > 0 {
        let mut doors = Vec::new();
        let _ = transfer::receive_doors(
            at.conn,
            at.slot,
            n.min(MAX_DOORS),
            false,
            at.index,
            seq,
            &mut doors,
        );
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
pub(super) fn forget(lease: &Rc<Lease>) {
    last::clear();
    let _ = LEASES.try_with(|l| l.0.borrow_mut().retain(|x| !Rc::ptr_eq(x, lease) || unheld(x)));
}

/// `lease` leaves `LEASES` (so it may no longer be `last`): false, for `retain`.
fn unheld(lease: &Rc<Lease>) -> bool {
    lease.held.set(false);
    false
}
