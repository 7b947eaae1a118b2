//! Every request the fast handling in `mod.rs` does not take: data in the
//! data region or a bulk segment, doors and buffers, deadlines, failures;
//! and the checks every request passes before its handler runs.

use std::sync::Arc;
use std::sync::atomic::Ordering::*;

use crate::abi::{DATA_CAP, FLAG_STREAM, FLAG_VANILLA, INLINE, MAX_BUFFERS, OFF_IN_INLINE, payload_offset};
use crate::context::error::CallError;
use crate::context::stats::Path;
use crate::object::async_handler::AsyncRequest;
use crate::object::buffer;
use crate::object::conn::Conn;
use crate::object::door::{ActiveCall, DoorCore, Request, check_sizes};
use crate::object::in_place;
use crate::state::bulk::Inbox;
use crate::sys::spin::Spinner;
use crate::sys::umem::{Bulk, RequestHeader, Slot, SyncWord};
use crate::{context::deadline, object::transfer};

use super::deferred::{self, Served};
use super::reply::{Failure, publish_with_doors, write_reply};
use super::{Buffers, Work, cache_hit};

/// Everything the fast path does not do: doors, data in the data region,
/// deadlines, a door not served last, pinned doors to let go. The header is
/// read afresh (a caller that changes it meanwhile garbles only its own
/// call): handed over, the fast path's copy would be kept in memory.
///
/// True if the request went to an async handler's task, which replies.
#[cold]
pub(super) fn handle_slow(w: &Work, slot: &Slot, seq: u32, bufs: &mut Buffers) -> bool {
    let req = &RequestHeader::read(slot);
    let ss = &w.area.slots[w.slot as usize];
    if ss.has_pinned.load(Relaxed) {
        // The caller has read our last reply: its doors may go.
        ss.has_pinned.store(false, Relaxed);
        ss.pinned.lock().clear();
    }
    let vanilla = req.flags & FLAG_VANILLA != 0;
    // The call runs under its caller's deadline: the calls it makes carry
    // it on, and `deadline::remaining` tells the handler the time left.
    let restore = deadline::Restore(deadline::set(req.deadline));
    let result = run(w, slot, seq, bufs, req);
    drop(restore);
    if bufs
        .door
        .as_ref()
        .is_some_and(|(_, _, core)| core.asynk.is_some())
    {
        bufs.door = None; // the fast path never runs an async handler
    }
    match result {
        Ok(Served::Later) => true,
        r => {
            finish_slow(w, slot, seq, bufs, r.map(drop), vanilla);
            false
        }
    }
}

/// Write the reply (or the failure) of a call the fast path did not finish,
/// and publish it.
#[cold]
pub(super) fn finish_slow(
    w: &Work,
    slot: &Slot,
    seq: u32,
    bufs: &mut Buffers,
    result: Result<(), Failure>,
    vanilla: bool,
) {
    bufs.reply_header = None;
    if !write_reply(w, slot, seq, &mut bufs.reply, result, vanilla) {
        return;
    }
    trim(bufs);
    publish_with_doors(w, slot, seq, &mut bufs.reply);
}

/// After a bulk call: give back the worker's buffers if they are too
/// large to keep (the slot's segment is trimmed by `write_reply`).
fn trim(bufs: &mut Buffers) {
    if !crate::state::bulk::kept_buffer(bufs.args.capacity()) {
        bufs.args = Vec::with_capacity(DATA_CAP);
    }
    if !crate::state::bulk::kept_buffer(bufs.reply.data.capacity()) {
        bufs.reply.data = Vec::new();
    }
}

/// Copy the request out, check it, and run the handler. Sizes, the grant
/// and revocation are checked before the passed doors are touched: a
/// refused request leaves them to its caller.
fn run(w: &Work, slot: &Slot, seq: u32, bufs: &mut Buffers, req: &RequestHeader) -> Result<Served, Failure> {
    let (grant, in_len, in_doors) = (req.grant, req.in_len as usize, req.in_doors as usize);
    let vanilla = req.flags & FLAG_VANILLA != 0;
    let checked = match deadline::passed(req.deadline) {
        true => Err(CallError::TimedOut), // it waited too long for a thread
        false => check_request(&w.conn, &mut bufs.door, grant, in_len, in_doors),
    };
    let checked = checked.and_then(|c| match req.in_bufs as usize {
        n if n > MAX_BUFFERS => Err(CallError::BadMessage("too many buffers")),
        _ => Ok(c),
    });
    let (core, active) = match checked {
        Ok(c) => c,
        Err(error) => {
            if in_doors > 0 {
                transfer::discard_doors(&w.conn, slot, in_doors, true, w.slot, seq);
            }
            if req.in_bufs > 0 {
                refuse_buffers(w, slot, seq, req.in_bufs);
            }
            return Err(Failure { error, untaken: true });
        }
    };
    // The arguments, before the doors: a request whose bulk segment is
    // missing or malformed is refused with its doors untaken.
    let args = &mut bufs.args;
    args.clear();
    let mut skip = 0;
    let mut in_place = None;
    if in_len > DATA_CAP {
        let taken = if core.trusting && core.asynk.is_none() {
            view_bulk_args(w, slot, req).map(|view| in_place = Some(view))
        } else {
            // Start the arguments half a page away from the reply buffer
            // modulo 4 KiB: glibc's memcpy here runs ten times slower when
            // the destination lies just past the source modulo 4 KiB, and a
            // handler that copies its input to its output would hit that by
            // chance.
            args.reserve(in_len + 4096);
            let (a, r) = (args.as_ptr() as usize, bufs.reply.data.as_ptr() as usize);
            skip = r.wrapping_sub(a).wrapping_sub(2048) % 4096;
            args.resize(skip, 0);
            take_bulk_args(w, slot, req, args)
        };
        taken.map_err(|e| {
            if in_doors > 0 {
                transfer::discard_doors(&w.conn, slot, in_doors, true, w.slot, seq);
            }
            if req.in_bufs > 0 {
                refuse_buffers(w, slot, seq, req.in_bufs);
            }
            Failure {
                error: CallError::BadMessage(e),
                untaken: true,
            }
        })?;
    } else {
        slot.read_into(payload_offset(OFF_IN_INLINE, in_len, vanilla), in_len, args);
    }
    let mut doors = Vec::new();
    if in_doors > 0
        && let Err(e) = transfer::receive_doors(&w.conn, slot, in_doors, true, w.slot, seq, &mut doors)
    {
        // Taken, so the caller will not take its loans back: they are
        // received and dropped here (which returns them), as are its
        // returns of our loans and the descriptors it passed.
        if req.in_bufs > 0 {
            let mut dropped = Vec::new();
            let _ = buffer::receive(
                &w.conn,
                slot,
                req.in_bufs as usize,
                true,
                w.slot,
                seq,
                &mut dropped,
            );
        }
        return Err(Failure::taken(e));
    }
    let mut buffers = Vec::new();
    if req.in_bufs > 0 {
        let n = req.in_bufs as usize;
        buffer::receive(&w.conn, slot, n, true, w.slot, seq, &mut buffers).map_err(Failure::taken)?;
    }
    let path = if in_len <= INLINE && in_doors == 0 && !vanilla {
        Path::Fast
    } else {
        Path::Vanilla
    };
    bufs.counters.served(path);
    if let Some(asynk) = core.asynk.clone() {
        let req = AsyncRequest::new(core.datum, args[skip..].to_vec(), doors, buffers, req.deadline);
        let call = active.owned();
        return deferred::dispatch(&asynk, w, seq, call, req, vanilla, &bufs.shuttle, &mut bufs.reply);
    }
    let reply = &mut bufs.reply;
    reply.clear();
    let offered = in_place.is_some();
    let (data, stream) = match in_place {
        Some((view, stream)) => {
            let landing = stream.clone().map(|s| s as Arc<dyn in_place::Landing>);
            (in_place::offer_args(view, in_len, landing), stream)
        }
        None => (&args[skip..], None),
    };
    let req = Request {
        datum: core.datum,
        data,
        doors: doors.into(),
        buffers: buffers.into(),
    };
    let _serving = buffer::serving(w.conn.id);
    let ran = core.invoke(req, reply);
    if offered {
        in_place::withdraw_args();
    }
    // A caller that stopped writing its streamed arguments fails its call,
    // whatever its handler made of the bytes that came.
    if let Some(why) = stream.and_then(|s| s.stopped.get().copied()) {
        return Err(Failure::taken(CallError::BadMessage(why)));
    }
    ran.map_err(Failure::taken)?;
    drop(active);
    Ok(Served::Now)
}

/// The buffers of a request refused before they were taken: the caller
/// takes its loans back (it sees the refusal), the descriptors passed are
/// closed, and the returns of our loans it carried are honoured all the
/// same (it never sends them again).
fn refuse_buffers(w: &Work, slot: &Slot, seq: u32, n: u32) {
    drop(w.conn.take_buffer_fds(true, w.slot, seq));
    buffer::honour_returns(&w.conn, slot, n as usize);
}

/// Copy arguments larger than the data region out of the caller's bulk
/// segment for the slot. (`in_len` was checked against the limit already.)
fn take_bulk_args(
    w: &Work,
    slot: &Slot,
    req: &RequestHeader,
    args: &mut Vec<u8>,
) -> Result<(), &'static str> {
    let len = req.in_len as usize;
    if req.flags & FLAG_STREAM != 0 {
        let due = stream_due(len);
        return bulk_args(w, slot, |inb| {
            inb.read_streamed(len, args, |need| streamed(&w.conn, slot, need, due))
        });
    }
    bulk_args(w, slot, |inb| inb.read_into(len, args))
}

/// The arguments larger than the data region as they lie in the caller's
/// bulk segment, for a door that trusts its callers: a view, which keeps
/// the segment mapped however it is replaced or trimmed meanwhile; and,
/// for a streamed request, how its bytes land, which the handler's reads
/// wait for part by part (the caller is still writing them).
fn view_bulk_args(
    w: &Work,
    slot: &Slot,
    req: &RequestHeader,
) -> Result<(Bulk, Option<Arc<Streaming>>), &'static str> {
    let len = req.in_len as usize;
    let view = bulk_args(w, slot, |inb| inb.view(len))?;
    let streaming = (req.flags & FLAG_STREAM != 0).then(|| {
        Arc::new(Streaming {
            conn: w.conn.clone(),
            slot: slot.clone(),
            due: stream_due(len),
            stopped: std::sync::OnceLock::new(),
        })
    });
    Ok((view, streaming))
}

/// A streamed request's arguments as a trusting door's handler reads them
/// in place.
pub(super) struct Streaming {
    conn: Arc<Conn>,
    slot: Slot,
    due: std::time::Instant,
    /// Why the caller's bytes stopped landing, once they did.
    stopped: std::sync::OnceLock<&'static str>,
}

impl in_place::Landing for Streaming {
    fn landed(&self, need: usize) -> usize {
        let word = self.slot.sync(SyncWord::InStreamed);
        if self.stopped.get().is_none() {
            match streamed(&self.conn, &self.slot, need, self.due) {
                Ok(have) => return have,
                Err(why) => {
                    let _ = self.stopped.set(why);
                }
            }
        }
        word.load(Acquire) as usize
    }
}

/// A streamed request's reader's nap between looks, once it has spun for
/// the domain's budget (the caller writes a part in a few microseconds
/// unless it was preempted).
const STREAM_NAP: std::time::Duration = std::time::Duration::from_micros(50);
/// The time a caller has to write `len` bytes of streamed arguments:
/// [`STREAM_STALL`], and 10 ns a byte (an honest caller copies at
/// gigabytes a second, and a preempted one resumes within milliseconds
/// even on a busy machine). A caller that takes longer, though alive,
/// broke the protocol: its call is refused, and a server thread is never
/// held for it longer, however it dribbles its progress out.
fn stream_due(len: usize) -> std::time::Instant {
    std::time::Instant::now() + STREAM_STALL + std::time::Duration::from_nanos(10 * len as u64)
}

/// See [`stream_due`].
const STREAM_STALL: std::time::Duration = std::time::Duration::from_secs(2);

/// Wait until the caller at the other end of `conn` has written at least
/// `need` bytes of its streamed arguments in `slot`; how many it has.
/// Fails if the caller dies, or has not by `due`.
fn streamed(conn: &Conn, slot: &Slot, need: usize, due: std::time::Instant) -> Result<usize, &'static str> {
    let word = slot.sync(SyncWord::InStreamed);
    let mut spin = Spinner::new(conn.settings.spin_budget_ns());
    loop {
        let have = word.load(Acquire) as usize;
        if have >= need {
            return Ok(have);
        }
        if spin.spin() {
            continue;
        }
        if std::time::Instant::now() > due {
            return Err("the caller did not write its streamed arguments in time");
        }
        if conn.is_dead() {
            return Err("the caller died while writing its arguments");
        }
        std::thread::sleep(STREAM_NAP);
    }
}

/// `take` on the caller's bulk segment for the slot, mapping the segment
/// first if the request names a new one.
fn bulk_args<T>(
    w: &Work,
    slot: &Slot,
    take: impl FnOnce(&Inbox) -> Result<T, &'static str>,
) -> Result<T, &'static str> {
    let mut bulk = w.area.bulk[w.slot as usize].lock();
    let generation = RequestHeader::segment(slot);
    if !bulk.inb.has(generation) {
        let fd = w
            .conn
            .take_segment(true, w.slot, generation)
            .ok_or("bulk segment missing")?;
        bulk.inb
            .accept(generation, fd, crate::context::settings::max_message())?;
    }
    let r = take(&bulk.inb);
    bulk.inb.trim();
    r
}

/// The checks a request passes before anything it carries is touched: its
/// sizes, and a grant the caller holds on a door that is not revoked.
/// Returns the door, with the call counted as active on it.
fn check_request<'a>(
    conn: &Conn,
    cache: &'a mut Option<(u32, u64, Arc<DoorCore>)>,
    grant: u32,
    in_len: usize,
    in_doors: usize,
) -> Result<(&'a Arc<DoorCore>, ActiveCall<'a>), CallError> {
    check_sizes("arguments", in_len, in_doors)?;
    if !cache_hit(cache, conn, grant) {
        // The generation is read before the lookup: a grant removed in
        // between leaves the entry already stale, never falsely fresh.
        let generation = conn.grants_gen();
        let core = conn.lookup(grant).ok_or(CallError::BadDoor)?;
        *cache = Some((grant, generation, core));
    }
    let core: &'a Arc<DoorCore> = &cache.as_ref().expect("filled above").2;
    Ok((core, core.begin_call()?))
}
