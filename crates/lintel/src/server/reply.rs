//! Writing a reply into a slot and publishing it, for every request a
//! worker does not answer on the fast path: the worker's own (`slow`) and
//! an async handler's task's (`deferred`).

use std::sync::Arc;
use std::sync::atomic::Ordering::*;

use crate::abi::{
    DATA_CAP, OFF_OUT_BUFS, OFF_OUT_DOORS, OFF_OUT_INLINE, OFF_OUT_LEN, OFF_OUT_SEG, OFF_STATUS, ST_OK,
    ST_UNTAKEN, payload_offset,
};
use crate::context::error::CallError;
use crate::object::buffer;
use crate::object::conn::Conn;
use crate::object::door::Reply;
use crate::object::in_place::{self, Place};
use crate::object::transfer;
use crate::sys::umem::{Room, Slot};

use super::area::InArea;

use super::{Work, publish_reply};

/// Why a request failed, and whether the doors passed with it were left
/// untouched (the caller then takes back the grants it made for them).
pub(super) struct Failure {
    pub(super) error: CallError,
    pub(super) untaken: bool,
}

impl Failure {
    pub(super) fn taken(error: CallError) -> Failure {
        Failure {
            error,
            untaken: false,
        }
    }
}

/// Write `reply` (or the failure `result`) into the slot, unpublished;
/// false if the caller is gone (the reply is dropped).
pub(super) fn write_reply(
    w: &Work,
    slot: &Slot,
    seq: u32,
    reply: &mut Reply,
    mut result: Result<(), Failure>,
    vanilla: bool,
) -> bool {
    let placed = in_place::take_placed(reply);
    if w.conn.is_dead() {
        reply.clear();
        drop(buffer::take_returns()); // its lender is gone too
        return false; // the caller is gone: the reply is discarded
    }
    if result.is_ok() {
        // Written in place by the handler (`Reply::data_in_place`), or
        // copied in from `data`: the segment holds the former already.
        let n = placed.map_or(reply.data.len(), |(n, _)| n);
        if n > DATA_CAP {
            let generation = match placed {
                Some((_, generation)) => Ok(generation),
                None => put_bulk_reply(w, &reply.data),
            };
            match generation {
                Ok(generation) => slot.set(OFF_OUT_SEG, generation),
                Err(e) => result = Err(Failure::taken(e)),
            }
            // Given back if it is too large to keep (the caller has its
            // own mapping of it).
            w.area.bulk[w.slot as usize].lock().out.trim();
        } else {
            slot.write(payload_offset(OFF_OUT_INLINE, n, vanilla), &reply.data);
        }
        slot.set(OFF_OUT_LEN, n as u32);
        let nd = reply.doors.len() as u32;
        if nd > 0 {
            result = transfer::send_doors(&w.conn, &reply.doors, slot, false, w.slot, seq)
                .map(drop)
                .map_err(Failure::taken);
        }
        slot.set(OFF_OUT_DOORS, nd);
    }
    let mut nbufs = 0;
    if result.is_ok() && !reply.buffers.is_empty() {
        let out = std::mem::take(&mut reply.buffers);
        nbufs = out.len() as u32;
        result = buffer::send(&w.conn, out, slot, false, w.slot, seq)
            .map(drop)
            .map_err(Failure::taken);
    }
    // Loans of the caller's that the handler let go of ride back with the
    // reply (by message if the call failed).
    let returns = buffer::take_returns();
    if !returns.is_empty() {
        if result.is_ok() {
            nbufs += buffer::write_returns(&w.conn, slot, nbufs as usize, &returns) as u32;
        } else {
            buffer::send_returns(&w.conn, &returns);
        }
    }
    slot.set(OFF_OUT_BUFS, if result.is_ok() { nbufs } else { 0 });
    match result {
        Ok(()) => slot.set(OFF_STATUS, ST_OK),
        Err(f) => {
            let (st, detail) = f.error.to_status();
            slot.set(OFF_STATUS, st | if f.untaken { ST_UNTAKEN } else { 0 });
            slot.set(OFF_OUT_LEN, detail);
            // A refused size names the length beside the limit.
            let len = match f.error {
                CallError::TooLarge { len, .. } => len.min(u32::MAX as usize) as u32,
                _ => 0,
            };
            slot.set(OFF_OUT_DOORS, len);
        }
    }
    true
}

/// Publish the reply written in the slot, keeping the doors it passes
/// until the caller has read it (see `SlotServer::pinned`).
pub(super) fn publish_with_doors(w: &Work, slot: &Slot, seq: u32, reply: &mut Reply) {
    reply.buffers.clear(); // a failed call's: they go nowhere
    if !reply.doors.is_empty() {
        let ss = &w.area.slots[w.slot as usize];
        ss.pinned.lock().append(&mut reply.doors);
        ss.has_pinned.store(true, Relaxed);
    }
    publish_reply(w, slot, seq);
}

/// The room a handler serving slot `slot` of `area` may write its result
/// in (`Reply::data_in_place`): our bulk segment for the slot, sent to the
/// caller first if it is new. Offered while a worker is bound to the slot.
pub(super) struct SegmentPlace {
    pub(super) conn: Arc<Conn>,
    pub(super) area: Arc<InArea>,
    pub(super) slot: u32,
}

impl Place for SegmentPlace {
    fn room(&mut self, len: usize) -> Result<(Room, u32), CallError> {
        let mut bulk = self.area.bulk[self.slot as usize].lock();
        let generation = self.conn.prepare_bulk(&mut bulk.out, false, self.slot, len)?;
        Ok((bulk.out.room(len), generation))
    }
}

/// Put a result larger than the data region in our bulk segment for the
/// slot, sending the segment to the caller first if it is new. Returns the
/// generation to name in the reply.
fn put_bulk_reply(w: &Work, data: &[u8]) -> Result<u32, CallError> {
    let mut bulk = w.area.bulk[w.slot as usize].lock();
    w.conn.put_bulk(&mut bulk.out, false, w.slot, data)
}
