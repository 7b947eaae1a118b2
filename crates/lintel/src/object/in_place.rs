//! A reply's room in place: where a handler writes a large result
//! ([`Reply::data_in_place`]) so the server does not copy it afterwards.
//!
//! A worker bound to a slot offers its reply object the slot's bulk
//! segment for results ([`offer`]); a handler that asks for room for more
//! than a slot's data region gets a view of that segment, and the worker
//! writes the reply header naming it ([`take_placed`]) instead of copying
//! `Reply::data` in. The offer is kept per thread and keyed by the reply
//! object's address, not stored in [`Reply`] (whose fields users build
//! with struct literals): a co-located call made by the handler uses
//! another `Reply`, which finds no offer and gets `data` as its room, as
//! do async handlers and co-located calls.

use std::cell::{Cell, RefCell};

use crate::abi::DATA_CAP;
use crate::context::error::CallError;
use crate::object::door::Reply;
use crate::sys::umem::Room;

/// Where a bound worker's handler may write its result in place.
pub(crate) trait Place: Send {
    /// Room for `len` result bytes, and the segment's generation.
    fn room(&mut self, len: usize) -> Result<(Room, u32), CallError>;
}

struct Offer {
    /// The address of the reply object offered the place.
    reply: usize,
    place: Box<dyn Place>,
    /// The room the running handler asked for last.
    placed: Option<(Room, u32)>,
}

thread_local! {
    static OFFER: RefCell<Option<Offer>> = const { RefCell::new(None) };
    /// Whether `OFFER` holds a room: read by the worker's fast path after
    /// every handler, so kept apart (a plain flag).
    static PLACED: Cell<bool> = const { Cell::new(false) };
}

fn key(reply: &Reply) -> usize {
    reply as *const Reply as usize
}

/// Offer `reply` (a worker's, while bound) room in `place`.
pub(crate) fn offer(reply: &Reply, place: Box<dyn Place>) {
    PLACED.set(false);
    OFFER.set(Some(Offer {
        reply: key(reply),
        place,
        placed: None,
    }));
}

/// The worker lets go of its slot: the offer (which holds the connection)
/// goes.
pub(crate) fn withdraw() {
    PLACED.set(false);
    OFFER.set(None);
}

/// Whether the handler just run on this thread wrote its result in place.
#[inline(always)]
pub(crate) fn placed() -> bool {
    PLACED.get()
}

/// The room the handler just run wrote its result in (its length and
/// segment generation), if that is `reply`'s result (its `data` is
/// empty); taken, so the next call starts without.
pub(crate) fn take_placed(reply: &Reply) -> Option<(usize, u32)> {
    if !PLACED.replace(false) {
        return None;
    }
    let (room, generation) = OFFER.with_borrow_mut(|o| o.as_mut().and_then(|o| o.placed.take()))?;
    reply.data.is_empty().then(|| (room.len(), generation))
}

/// See [`Reply::data_in_place`].
pub(crate) fn data_in_place(reply: &mut Reply, len: usize) -> &mut [u8] {
    reply.data.clear();
    let k = key(reply);
    let room = OFFER.with_borrow_mut(|offer| {
        let offer = offer.as_mut().filter(|o| o.reply == k)?;
        offer.placed = None;
        PLACED.set(false);
        if len <= DATA_CAP {
            return None;
        }
        let (mut room, generation) = offer.place.room(len).ok()?;
        let bytes = room.bytes();
        let (ptr, n) = (bytes.as_mut_ptr(), bytes.len());
        offer.placed = Some((room, generation));
        PLACED.set(true);
        Some((ptr, n))
    });
    match room {
        // SAFETY: the room's bytes, which the room kept in this thread's
        // offer keeps mapped until the next `data_in_place` on this reply,
        // `take_placed` or `withdraw`; none of those can run while the
        // returned slice, which borrows `reply` mutably, lives (the worker
        // takes the room only after the handler returned). Nothing else
        // here writes the segment meanwhile (see `Room`).
        Some((ptr, n)) => unsafe { std::slice::from_raw_parts_mut(ptr, n) },
        None => {
            reply.data.resize(len, 0);
            &mut reply.data
        }
    }
}
