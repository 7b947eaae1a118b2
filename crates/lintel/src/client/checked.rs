//! Every cross-domain call the fast path turns away: a first call on a
//! connection, a deadline or cancel to check, data or doors beyond the
//! fast path's, buffers. [`call_checked`] takes this thread's lease
//! ([`begin`]), then either [`fast_checked`] (the fast
//! path's slot layout, with every check made) or [`vanilla`] (data in the
//! slot's data region or its bulk segment, doors and buffers).

use crate::abi::{
    DATA_CAP, FLAG_ALERT, FLAG_BUFS, FLAG_DEADLINE, FLAG_STREAM, FLAG_VANILLA, INLINE, MAX_BUFFERS,
    MAX_DOORS, OFF_CLIENT_CPU, OFF_DATA, OFF_DEADLINE, OFF_FLAGS, OFF_GRANT, OFF_IN_BUFS, OFF_IN_DOORS,
    OFF_IN_LEN, OFF_IN_SEG, OFF_OUT_INLINE, ST_OK, ST_TOO_LARGE, ST_UNTAKEN, STREAM_MIN, STREAM_PART,
    payload_offset,
};
use crate::context::error::CallError;
use crate::context::shuttle::{self};
use crate::context::stats::{self, Path};
use crate::object::buffer::{self, Buffer};
use crate::object::door::{Door, RemoteDoor, Reply, check_sizes};
use crate::object::in_place::InPlace;
use crate::sys::umem::{Bulk, ReplyHeader, RequestHeader, SyncWord};
use crate::{context::deadline, object::transfer};
use std::sync::atomic::Ordering::*;

use super::held::{begin, end_call};
use super::lease::{At, Lease};
use super::wait::{post, unanswered, wait_reply};

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
        Err(e) => return Err(refused(data, doors, e)),
    };
    let fast = data.len() <= INLINE && doors.is_empty() && !lease.settings.force_vanilla.load(Relaxed);
    let r = if fast {
        fast_checked(&lease, rd, data, reply)
    } else {
        vanilla(&lease, rd, data, doors, Vec::new(), reply, None)
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
        Err(e) => return Err(refused(data, doors, e)),
    };
    let r = vanilla(&lease, rd, data, doors, buffers, reply, None);
    end_call(lease);
    r
}

/// A call whose result the caller reads where it lies ([`InPlace`]): a
/// result larger than the data region is not copied out of the server's
/// segment; `f` reads it there while this thread still holds the slot, so
/// the server's next reply on it cannot come before `f` returns.
pub(crate) fn call_in_place<R>(
    rd: &RemoteDoor,
    data: &[u8],
    f: impl FnOnce(InPlace<'_>) -> R,
) -> Result<R, CallError> {
    let lease = match begin(&rd.conn) {
        Ok(lease) => lease,
        Err(e) => return Err(refused(data, &[], e)),
    };
    let (mut reply, mut view) = (Reply::new(), None);
    let r = vanilla(&lease, rd, data, &[], Vec::new(), &mut reply, Some(&mut view));
    let r = r.map(|()| match view {
        Some((view, len)) => f(InPlace::shared(view, len)),
        None => f(InPlace::private(&reply.data)),
    });
    end_call(lease);
    r
}

/// Where a caller that reads its result in place gets a large one: the
/// view of the server's segment and the result's length.
pub(super) type ViewOut<'v> = Option<&'v mut Option<(Bulk, usize)>>;

/// The fast path: ≤ 16 bytes in, no doors. Guards first; the unusual cases
/// (a deadline or cancel, a server that sleeps, a reply that is not small)
/// leave for the slow functions below.
#[inline]
fn fast_checked(lease: &Lease, rd: &RemoteDoor, data: &[u8], reply: &mut Reply) -> Result<(), CallError> {
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
    RequestHeader::write_inline(slot, rd.grant, flags, data, lease.cpu.get(), due);
    let waited = post(slot, conn, index, seq, alerted, shuttle)
        .and_then(|running| wait_reply(lease, conn, seq, running, due, 0));
    if let Err(e) = waited {
        return unanswered(lease, Path::Fast, data.len(), 0, e);
    }

    let h = ReplyHeader::read(slot);
    if due != 0 || h.status != ST_OK || h.out_len as usize > INLINE || (h.out_doors | h.out_bufs) != 0 {
        let r = take_reply(&lease.at(), seq, h, &[], reply, false, None);
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
    lease.counters.inline_ok(Path::Fast);
    Ok(())
}

/// The result of a call made under deadline `due` (0: none) whose reply
/// came: [`CallError::TimedOut`] if the deadline passed before the caller
/// saw it, whatever the server sent (see `deadline`); the reply's contents
/// are then dropped.
#[cold]
pub(super) fn settled(due: u64, r: Result<(), CallError>, reply: &mut Reply) -> Result<(), CallError> {
    let r = deadline::settle(due, r);
    if r.is_err() {
        reply.clear();
    }
    r
}

/// The vanilla path: data in the data region (also when it would fit
/// inline, if forced for the INKS "message" comparison), doors passed.
fn vanilla(
    lease: &Lease,
    rd: &RemoteDoor,
    data: &[u8],
    doors: &[Door],
    buffers: Vec<Buffer>,
    reply: &mut Reply,
    view: ViewOut<'_>,
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
    let at = lease.at();
    let in_call = shuttle::enter_call(shuttle, conn.id, at.index, seq, slot.sync(SyncWord::RepSeq));
    let alerted = shuttle.is_alerted();
    let stream = streams(data);
    let sent = match write_vanilla(&at, rd.grant, data, doors, buffers, seq, alerted, due, stream) {
        Ok(sent) => sent,
        Err(e) => return counted(Err(e), reply),
    };
    let waited = post(slot, conn, at.index, seq, alerted, shuttle).and_then(|running| {
        if stream {
            stream_args(&at, data);
        }
        let r = wait_reply(lease, conn, seq, running, due, stats::class(data.len()));
        drop(in_call);
        r
    });
    if let Err(e) = waited {
        return counted(Err(e.into()), reply);
    }
    let r = read_vanilla(&at, seq, due, data.len(), &sent, reply, view);
    counted(r, reply)
}

/// What a vanilla request passed that the caller takes back if the server
/// refuses the call before taking it: grants made for its doors, loans.
/// (The returns of the server's loans it carried are honoured whether or
/// not the call is taken; they are queued again only if it is not sent.)
#[derive(Default)]
pub(super) struct Sent {
    granted: Vec<u32>,
    lent: Vec<u64>,
    returned: Vec<(u64, u32)>,
}

impl Sent {
    /// The request was not sent: its returns go with a later one.
    fn requeue(&self, conn: &std::sync::Arc<crate::object::conn::Conn>) {
        if conn.requeue_returns(&self.returned) {
            conn.home.returns_queued(conn);
        }
    }
}

/// Write vanilla request `seq` on door `grant` into the slot: the header,
/// the arguments (data region or bulk segment), doors and buffers. Nothing
/// is posted yet.
#[allow(clippy::too_many_arguments)]
pub(super) fn write_vanilla(
    at: &At<'_>,
    grant: u32,
    data: &[u8],
    doors: &[Door],
    buffers: Vec<Buffer>,
    seq: u32,
    alerted: bool,
    due: u64,
    stream: bool,
) -> Result<Sent, CallError> {
    let (conn, slot, index) = (at.conn, at.slot, at.index);
    // Loans of the server's we let go of ride along (after the buffers).
    let returned = conn.take_returns(MAX_BUFFERS.saturating_sub(buffers.len()));
    slot.set(OFF_GRANT, grant);
    let bufs_flag = if buffers.is_empty() && returned.is_empty() {
        0
    } else {
        FLAG_BUFS
    };
    let due_flag = if due != 0 { FLAG_DEADLINE } else { 0 };
    let stream_flag = if stream { FLAG_STREAM } else { 0 };
    slot.set(
        OFF_FLAGS,
        FLAG_VANILLA | bufs_flag | due_flag | stream_flag | if alerted { FLAG_ALERT } else { 0 },
    );
    slot.set(OFF_IN_LEN, data.len() as u32);
    slot.set(OFF_CLIENT_CPU, at.cpu);
    slot.set64(OFF_DEADLINE, due);
    let sent = Sent {
        returned,
        ..Sent::default()
    };
    let undo = |sent: Sent, e: CallError| {
        sent.requeue(conn);
        Err(e)
    };
    match write_args(at, data, stream) {
        Ok(generation) => slot.set(OFF_IN_SEG, generation),
        Err(e) => return undo(sent, e),
    }
    let granted = match doors.is_empty() {
        true => Vec::new(),
        false => match transfer::send_doors(conn, doors, slot, true, index, seq) {
            Ok(g) => g,
            Err(e) => return undo(sent, e),
        },
    };
    slot.set(OFF_IN_DOORS, doors.len() as u32);
    let nbufs = buffers.len();
    let lent = match buffers.is_empty() {
        true => Vec::new(),
        false => match buffer::send(conn, buffers, slot, true, index, seq) {
            Ok(l) => l,
            Err(e) => {
                transfer::take_back(conn, &granted);
                return undo(sent, e);
            }
        },
    };
    buffer::write_returned(slot, nbufs, &sent.returned);
    slot.set(OFF_IN_BUFS, (nbufs + sent.returned.len()) as u32);
    Ok(Sent {
        granted,
        lent,
        ..sent
    })
}

/// Read the reply to vanilla request `seq` (made under deadline `due`,
/// with `in_len` bytes of arguments), which has landed.
pub(super) fn read_vanilla(
    at: &At<'_>,
    seq: u32,
    due: u64,
    in_len: usize,
    sent: &Sent,
    reply: &mut Reply,
    view: ViewOut<'_>,
) -> Result<(), CallError> {
    let h = ReplyHeader::read(at.slot);
    if h.status & ST_UNTAKEN != 0 && !sent.lent.is_empty() {
        buffer::take_back(at.conn, &sent.lent);
    }
    let r = take_reply(at, seq, h, &sent.granted, reply, true, view);
    let r = if due == 0 { r } else { settled(due, r, reply) };
    if in_len > DATA_CAP {
        at.area.bulk[at.index as usize].lock().out.trim();
    }
    r
}

/// Put the arguments where the server reads them: the slot's data region,
/// or (larger than it) the slot's bulk segment, sent to the server first
/// if it is new. Returns the generation to name in the header (0: none).
/// Arguments to `stream` are only made room for: [`stream_args`] writes
/// them once the request is posted.
fn write_args(at: &At<'_>, data: &[u8], stream: bool) -> Result<u32, CallError> {
    if data.len() <= DATA_CAP {
        at.slot.write(OFF_DATA, data);
        return Ok(0);
    }
    let mut bulk = at.area.bulk[at.index as usize].lock();
    if stream {
        at.slot.sync(SyncWord::InStreamed).store(0, Relaxed);
        return at.conn.prepare_bulk(&mut bulk.out, true, at.index, data.len());
    }
    at.conn.put_bulk(&mut bulk.out, true, at.index, data)
}

/// Whether a synchronous call streams `data`: large enough that the
/// server's copy of the first parts, made while this thread writes the
/// rest, saves more than the parts' progress costs (a 1 MiB echo: 63 µs
/// for the two copies one after the other, 40 µs overlapped).
fn streams(data: &[u8]) -> bool {
    data.len() >= STREAM_MIN
}

/// Write the arguments of the posted streamed request into the slot's bulk
/// segment part by part, publishing each part as it is written.
fn stream_args(at: &At<'_>, data: &[u8]) {
    let mut bulk = at.area.bulk[at.index as usize].lock();
    let written = at.slot.sync(SyncWord::InStreamed);
    for (i, part) in data.chunks(STREAM_PART).enumerate() {
        let off = i * STREAM_PART;
        bulk.out.write_part(off, part, data.len());
        written.store((off + part.len()) as u32, Release);
    }
}

/// Take a reply the fast path does not: an error status, a result in the
/// data region, doors. `h` is the reply's header as read once; `granted`
/// are the grants made for the call's doors, taken back if the server
/// refused the call before taking them.
#[cold]
pub(super) fn take_reply(
    at: &At<'_>,
    seq: u32,
    h: ReplyHeader,
    granted: &[u32],
    reply: &mut Reply,
    vanilla: bool,
    view: ViewOut<'_>,
) -> Result<(), CallError> {
    let (conn, slot, index) = (at.conn, at.slot, at.index);
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
        take_bulk_reply(at, h, reply, view)?;
    } else if out_len > 0 {
        slot.read_into(
            payload_offset(OFF_OUT_INLINE, out_len, vanilla),
            out_len,
            &mut reply.data,
        );
    }
    if out_doors > 0 {
        transfer::receive_doors(conn, slot, out_doors, false, index, seq, &mut reply.doors)?;
    }
    if h.out_bufs > 0 {
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
/// segment for our slot (or, for a caller that reads it in place, keep a
/// view of it in `view`), mapping the segment first if the reply names a
/// new one.
fn take_bulk_reply(
    at: &At<'_>,
    h: ReplyHeader,
    reply: &mut Reply,
    view: ViewOut<'_>,
) -> Result<(), CallError> {
    let (conn, index) = (at.conn, at.index);
    let mut bulk = at.area.bulk[index as usize].lock();
    let generation = ReplyHeader::segment(at.slot);
    if !bulk.inb.has(generation) {
        let fd = conn
            .take_segment(false, index, generation)
            .ok_or(CallError::BadMessage("bulk segment missing"))?;
        bulk.inb
            .accept(generation, fd, crate::context::settings::max_message())
            .map_err(CallError::BadMessage)?;
    }
    let len = h.out_len as usize;
    let r = match view {
        Some(out) => bulk.inb.view(len).map(|v| *out = Some((v, len))),
        None => bulk.inb.read_into(len, &mut reply.data),
    };
    bulk.inb.trim();
    r.map_err(CallError::BadMessage)
}

/// A call that could not take a slot: counted, and its error returned.
#[cold]
fn refused(data: &[u8], doors: &[Door], e: CallError) -> CallError {
    let path = if data.len() <= INLINE && doors.is_empty() {
        Path::Fast
    } else {
        Path::Vanilla
    };
    stats::call(path, data.len(), doors.len(), None);
    e
}
