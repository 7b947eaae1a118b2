//! The fast path of a cross-domain call: at most 16 bytes each way, no
//! doors, no deadline or cancel, on the slot this thread called through
//! last. Its entry is [`call`]; everything its guards turn away goes to
//! `checked::call_checked`, which serves every case. Beside it,
//! [`data_call`] takes the same guards' calls of up to the data region's
//! 5 KiB each way (about 450 instructions fewer than the checked path for
//! a 1 KiB echo's caller, callgrind).
//!
//! The path is a chain of short steps, each out of line and entered by a
//! jump (a tail call), not one function: each step holds only the values it
//! needs, so none saves registers before the request is posted, and the
//! success path ends in a leaf. Read it top to bottom:
//!
//! ```text
//! Door::call ─► call ──guards fail──────────────────────────► to_checked ─► checked::call_checked
//!                │ > 16 bytes ─► data_call (≤ 5 KiB, same guards) ─┘
//!                │ guards pass: ≤ 16 bytes, no doors, no deadline, no
//!                │ cancel, the last lease is on this connection and claimed
//!                ▼
//!           post_packed     ══ POINT OF NO RETURN: the request is posted ══
//!                │ server running             │ server asleep or unbound,
//!                ▼                            ▼ or an alert came meanwhile
//!             finish                     posted_slow ─(kick, late alert)─► posted_odd
//!                │ hot poll saw the reply     │ woken                          │
//!                │            └─ missed ─► wait_full ◄────────────────────────┘
//!                ▼                            │ reply landed         │ no reply
//!           reply_landed ◄────────────────────┘                      ▼
//!                │ inline success  │ ≤ 16 bytes   │ anything else   no_reply ─► end
//!                ▼                 ▼              ▼
//!           succeeded ◄──── reply_bytes      reply_slow (taken the full way)
//!                │
//!                ▼
//!               end ──lease void──► forget_void
//! ```
//!
//! Before the point of no return a step may hand the call to the checked
//! path; after it the call has a reply or an error for its caller and the
//! lease is ended exactly once (`end`, or `reply_slow`'s `end_call`).
//! Errors come boxed, one register wide, so that every step ends in a jump.

use crate::abi::{DATA_CAP, FLAG_ALERT, FLAG_VANILLA, INLINE, OFF_OUT_INLINE, ST_OK, payload_offset};
use crate::context::deadline;
use crate::context::error::CallError;
use crate::context::shuttle::{self};
use crate::context::stats::{self, Path};
use crate::object::conn::Conn;
use crate::object::door::{RemoteDoor, Reply};
use crate::state::handshake::{self, Posted, Shared};
use crate::sys::umem::{Packed, ReplyHeader, RequestHeader, SyncWord};
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::Ordering::*;

use super::checked::{call_checked, take_reply};
use super::held::{end_call, ended_kept, forget};
use super::last::{self, Borrowed};
use super::lease::Lease;
use super::wait::{Unanswered, alert_late, hot_poll, kick, post, wait_reply, wait_reply_full};

/// What [`call`] needs of the calling thread's own state: its last lease and
/// its deadline, read in the caller's code ([`Door::call`](crate::Door::call) is inlined
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
    if data.len() > INLINE {
        return data_call(rd, data, reply, here);
    }
    // (A reply still holding doors or buffers has them dropped, which may
    // run code of a user's: not on the fast path.)
    let inline = reply.doors.is_empty() && reply.buffers.is_empty();
    let keep = |l: &Lease| inline && here.deadline == 0 && lease_ready(l, &rd.conn);
    // SAFETY: `here` was read just before this call (`Here`), and `keep`
    // only reads the lease and begins its claim.
    let lease = match unsafe { last::borrow_if(here.last, keep) } {
        Some(l) => l,
        None => return to_checked(rd, data, reply),
    };
    let Packed { lo, hi, len } = Packed::of(data);
    post_packed(lease, rd.grant, lo, hi, len, reply)
}

/// [`call`] once its guards passed: post the request, then finish. Apart
/// from the guards, so that each holds fewer values at once (every value
/// past the caller-saved registers costs a saved register, a store).
/// The bytes come packed ([`Packed`]), each word in a register of its own.
#[inline(never)]
fn post_packed(
    lease: Borrowed,
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
        return posted_slow(lease, seq, posted, late, reply);
    }
    finish(lease, seq, reply)
}

/// [`call`]'s guards on the last call's lease, the lease's own last: it
/// is on `conn`, nothing is to be checked before the call, and it is
/// still this thread's (then busy with the call).
#[inline(always)]
fn lease_ready(l: &Lease, conn: &Arc<Conn>) -> bool {
    Arc::ptr_eq(&l.conn, conn)
        && !l.settings.force_vanilla.load(Relaxed)
        && !l.shuttle.has_cancel()
        && l.area.leases.begin(&l.claim)
}

/// [`call`] once its request is posted to a running server: poll for the
/// reply alone a few times, then take it ([`reply_landed`]) or wait the full
/// way ([`wait_full`]). Out of line, entered by a jump: what it saves is
/// saved after the post, while the server runs.
#[inline(never)]
fn finish(lease: Borrowed, seq: u32, reply: &mut Reply) -> Result<(), Box<CallError>> {
    if hot_poll(lease.get(), seq) {
        return reply_landed(lease, seq, reply);
    }
    wait_full(lease, seq, reply)
}

/// [`call`]'s full wait (spin while the server runs elsewhere, then
/// sleep), then the reply.
#[inline(never)]
fn wait_full(lease: Borrowed, seq: u32, reply: &mut Reply) -> Result<(), Box<CallError>> {
    let l = lease.get();
    match wait_reply_full(l, &l.conn, seq, 0, 0) {
        Ok(()) => reply_landed(lease, seq, reply),
        Err(why) => no_reply(lease, why),
    }
}

/// [`call`]'s reply has landed: an inline success is taken here, anything
/// else by [`reply_slow`]; then the call ends. A leaf when the reply
/// carries no bytes and the lease is kept: what might call out (bytes into
/// a vector that may grow, letting go of a void lease) is reached by a
/// jump, so no register is saved on the way back to the caller's next post.
#[inline(never)]
fn reply_landed(lease: Borrowed, seq: u32, reply: &mut Reply) -> Result<(), Box<CallError>> {
    let l = lease.get();
    let h = ReplyHeader::read(&l.slot);
    if h.status != ST_OK || h.out_len as usize > INLINE || (h.out_doors | h.out_bufs) != 0 {
        return reply_slow(lease.counted(), seq, reply);
    }
    reply.data.clear(); // (its lists are empty: `call`'s guard)
    if h.out_len != 0 {
        return reply_bytes(lease, h.out_len as usize, reply);
    }
    succeeded(lease)
}

/// [`reply_landed`] of a reply carrying `len` (≤ [`INLINE`]) bytes.
#[inline(never)]
fn reply_bytes(lease: Borrowed, len: usize, reply: &mut Reply) -> Result<(), Box<CallError>> {
    let bytes = lease.get().slot.read_inline(OFF_OUT_INLINE);
    reply.data.extend_from_slice(&bytes[..len]);
    succeeded(lease)
}

/// [`call`] succeeded: counted, then ended.
#[inline(always)]
fn succeeded(lease: Borrowed) -> Result<(), Box<CallError>> {
    lease.get().counters.inline_ok(Path::Fast);
    end(lease);
    Ok(())
}

/// [`call`]'s request did not find its server running, or an alert came
/// while it was posted: a sleeping server is woken here, then the call
/// waits; a kick or a late alert is for [`posted_odd`]. Out of line:
/// the wake-up's system call would cost the fast path saved registers.
#[inline(never)]
fn posted_slow(
    lease: Borrowed,
    seq: u32,
    posted: Posted,
    late: bool,
    reply: &mut Reply,
) -> Result<(), Box<CallError>> {
    if posted == Posted::Woken {
        handshake::wake_server::<Shared>(&handshake::Words::of(&lease.get().slot));
        if !late {
            return wait_full(lease, seq, reply);
        }
    }
    posted_odd(lease, seq, posted, late, reply)
}

/// [`call`]'s request found no server bound to the slot (kick one), or
/// the thread was alerted while posting (`late`: forward the alert); a
/// sleeping server is woken already.
#[cold]
#[inline(never)]
fn posted_odd(
    lease: Borrowed,
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
        return no_reply(lease, why);
    }
    if late {
        alert_late(conn, index, seq);
    }
    if posted == Posted::Running {
        return finish(lease, seq, reply);
    }
    // (A server just woken or kicked is not yet running: no hot polls.)
    wait_full(lease, seq, reply)
}

/// [`call`]'s call is over: its in-call note ends (see `shuttle::note_call`),
/// then as [`end_call`], of the borrowed lease; a void lease is let go out
/// of line, so that a successful call's end stays a leaf.
#[inline(always)]
pub(super) fn end(lease: Borrowed) {
    shuttle::call_over(&lease.get().shuttle);
    if !ended_kept(lease.get()) {
        forget_void(lease);
    }
}

/// [`end`]'s lease is void: let go.
#[cold]
#[inline(never)]
fn forget_void(lease: Borrowed) {
    forget(&lease.counted());
}

// The fast path's arguments and results are at most `INLINE` bytes, all in
// the first size bucket: its slow exits count them as 0 bytes.
const _: () = assert!(stats::BUCKET_0_MAX >= INLINE);

/// [`call`] got no reply: counted, the lease let go, the error returned.
#[cold]
#[inline(never)]
fn no_reply(lease: Borrowed, why: Unanswered) -> Result<(), Box<CallError>> {
    let l = lease.get();
    l.counters.call(Path::Fast, 0, 0, None);
    end(lease);
    Err(Box::new(why.into()))
}

/// [`call`]'s reply is not an inline success: taken the full way, counted,
/// the lease let go. The header is read afresh (and checked as any reply's
/// is) rather than handed over, which would keep the fast path's copy in
/// memory. Taking the reply may drop doors, and so run code of a user's:
/// the lease is counted.
#[cold]
#[inline(never)]
fn reply_slow(lease: Rc<Lease>, seq: u32, reply: &mut Reply) -> Result<(), Box<CallError>> {
    let h = ReplyHeader::read(&lease.slot);
    let r = take_reply(&lease.at(), seq, h, &[], reply, false, None);
    let result = r.as_ref().ok().map(|_| (reply.data.len(), reply.doors.len()));
    lease.counters.call(Path::Fast, 0, 0, result);
    shuttle::call_over(&lease.shuttle);
    end_call(lease);
    r.map_err(Box::new)
}

/// [`call`] of more than [`INLINE`] bytes: at most [`DATA_CAP`] and
/// nothing else (no doors, deadline or cancel, no loan returns waiting to
/// ride along) take the data region's path here, the counterpart of the
/// server's `handle_data`; anything else goes to [`call_checked`].
///
/// It writes what the checked path's vanilla request would, less the words
/// the server reads only when the header's flags name them, and reads the
/// reply as that path does: the request the server sees and the result the
/// caller gets are the same. One function, not a chain of steps as for
/// [`call`]: at these sizes the copies, not saved registers, are the cost.
#[inline(never)]
fn data_call(rd: &RemoteDoor, data: &[u8], reply: &mut Reply, here: Here) -> Result<(), Box<CallError>> {
    let plain =
        data.len() <= DATA_CAP && reply.doors.is_empty() && reply.buffers.is_empty() && here.deadline == 0;
    let keep = |l: &Lease| plain && !rd.conn.returns_waiting() && lease_ready(l, &rd.conn);
    // SAFETY: `here` was read just before [`call`], which ran nothing
    // since; `keep` only reads the lease and begins its claim.
    let Some(lease) = (unsafe { last::borrow_if(here.last, keep) }) else {
        return to_checked(rd, data, reply);
    };
    // ---- the lease is busy with this call: no return before the reply ----
    let l = lease.get();
    let (conn, slot, shuttle) = (&*l.conn, &l.slot, &*l.shuttle);
    let (seq, index) = (l.next_seq(), l.claim.index);
    shuttle::note_call(shuttle, conn.id, index, seq, slot.sync(SyncWord::RepSeq));
    let alerted = shuttle.is_alerted();
    let flags = FLAG_VANILLA | if alerted { FLAG_ALERT } else { 0 };
    RequestHeader::write_data(slot, rd.grant, flags, data, l.cpu.get());
    let class = stats::class(data.len());
    let waited = post(slot, conn, index, seq, alerted, shuttle)
        .and_then(|running| wait_reply(l, conn, seq, running, 0, class));
    if let Err(why) = waited {
        return data_unanswered(lease, data.len(), why);
    }
    let h = ReplyHeader::read(slot);
    let len = h.out_len as usize;
    if h.status != ST_OK || len > DATA_CAP || (h.out_doors | h.out_bufs) != 0 {
        return data_reply_slow(lease.counted(), seq, data.len(), reply);
    }
    reply.data.clear(); // (its lists are empty: the guard)
    slot.read_into(payload_offset(OFF_OUT_INLINE, len, true), len, &mut reply.data);
    l.counters.call(Path::Vanilla, data.len(), 0, Some((len, 0)));
    end(lease);
    Ok(())
}

/// [`data_call`] got no reply: counted, the lease let go, the error
/// returned.
#[cold]
#[inline(never)]
fn data_unanswered(lease: Borrowed, len: usize, why: Unanswered) -> Result<(), Box<CallError>> {
    lease.get().counters.call(Path::Vanilla, len, 0, None);
    end(lease);
    Err(Box::new(why.into()))
}

/// [`data_call`]'s reply is not a success in the data region: taken the
/// full way (as [`reply_slow`] takes the fast path's), counted, the lease
/// let go. (Apart from `reply_slow` and `no_reply`, as is
/// [`data_unanswered`]: made one pair with the length as a parameter, they
/// cost the null call 12 instructions more, callgrind.)
#[cold]
#[inline(never)]
fn data_reply_slow(lease: Rc<Lease>, seq: u32, len: usize, reply: &mut Reply) -> Result<(), Box<CallError>> {
    let h = ReplyHeader::read(&lease.slot);
    let r = take_reply(&lease.at(), seq, h, &[], reply, true, None);
    let result = r.as_ref().ok().map(|_| (reply.data.len(), reply.doors.len()));
    lease.counters.call(Path::Vanilla, len, 0, result);
    shuttle::call_over(&lease.shuttle);
    end_call(lease);
    r.map_err(Box::new)
}

/// [`call_checked`] without doors: few enough arguments that [`call`]
/// jumps here instead of calling.
#[inline(never)]
fn to_checked(rd: &RemoteDoor, data: &[u8], reply: &mut Reply) -> Result<(), Box<CallError>> {
    call_checked(rd, data, &[], reply).map_err(Box::new)
}
