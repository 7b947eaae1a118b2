//! Every cross-domain call the fast path turns away: a first call on a
//! connection, a deadline or cancel to check, data or doors beyond the
//! fast path's, buffers. [`call_checked`] takes this thread's lease
//! ([`begin`]), then either [`fast_checked`] (the fast
//! path's slot layout, with every check made) or [`vanilla`] (data in the
//! slot's data region or its bulk segment, doors and buffers).

use crate::abi::{
    DATA_CAP, FLAG_ALERT, FLAG_BUFS, FLAG_DEADLINE, FLAG_VANILLA, INLINE, MAX_DOORS, OFF_CLIENT_CPU,
    OFF_DATA, OFF_DEADLINE, OFF_FLAGS, OFF_GRANT, OFF_IN_BUFS, OFF_IN_DOORS, OFF_IN_LEN, OFF_IN_SEG,
    OFF_OUT_INLINE, ST_OK, ST_TOO_LARGE, ST_UNTAKEN, payload_offset,
};
use crate::context::error::CallError;
use crate::context::shuttle::{self};
use crate::context::stats::{self, Path};
use crate::object::buffer::{self, Buffer};
use crate::object::conn::Conn;
use crate::object::door::{Door, RemoteDoor, Reply, check_sizes};
use crate::sys::umem::{ReplyHeader, RequestHeader, SyncWord};
use crate::{context::deadline, object::transfer};
use std::sync::Arc;
use std::sync::atomic::Ordering::*;

use super::held::{begin, end_call};
use super::lease::Lease;
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
        Err(e) => return refused(data, doors, e),
    };
    let fast = data.len() <= INLINE && doors.is_empty() && !lease.settings.force_vanilla.load(Relaxed);
    let r = if fast {
        fast_checked(&lease, rd, data, reply)
    } else {
        vanilla(&lease, rd, data, doors, Vec::new(), reply)
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
    let r = vanilla(&lease, rd, data, doors, buffers, reply);
    end_call(lease);
    r
}

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

/// Take a reply the fast path does not: an error status, a result in the
/// data region, doors. `h` is the reply's header as read once; `granted`
/// are the grants made for the call's doors, taken back if the server
/// refused the call before taking them.
#[cold]
pub(super) fn take_reply(
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
