//! Bytes in place: results a handler writes where they travel, and bytes
//! read where they lie instead of copied out first.
//!
//! **A reply's room** ([`Reply::data_in_place`]). A worker bound to a slot
//! offers its reply object the slot's bulk segment for results
//! ([`offer`]); a handler that asks for room for more than a slot's data
//! region gets a view of that segment, and the worker writes the reply
//! header naming it ([`take_placed`]) instead of copying `Reply::data` in.
//! The offer is kept per thread and keyed by the reply object's address,
//! not stored in [`Reply`] (whose fields users build with struct literals):
//! a co-located call made by the handler uses another `Reply`, which finds
//! no offer and gets `data` as its room, as do async handlers and
//! co-located calls.
//!
//! **Bytes read in place** ([`InPlace`]). A door made with
//! [`Door::create_trusting`](crate::Door::create_trusting) gets arguments
//! larger than a slot's data region as a view of the caller's bulk segment
//! ([`Request::args`](crate::Request::args)) instead of a private copy, and
//! [`Door::call_in_place`](crate::Door::call_in_place) shows its caller a
//! large result in the server's segment. The view is offered per thread
//! as the room is, keyed by an empty `Request::data` that starts in the
//! segment ([`offer_args`]). Its bytes are read by copying pieces out (an
//! assembly copy the compiler cannot see into), never through a `&[u8]`:
//! a peer that writes them meanwhile changes what is read, and nothing
//! else. Arguments the caller streams (it posts the request, then writes
//! them part by part) are offered at once, not once all are written: each
//! read waits for the bytes it asks ([`Landing`]), so the handler copies
//! the first parts while the caller writes the rest. A caller that stops
//! writing short of them makes the reads short and its call fail.

use std::cell::{Cell, RefCell};
use std::sync::Arc;

use crate::abi::DATA_CAP;
use crate::context::error::CallError;
use crate::object::door::Reply;
use crate::sys::umem::{Bulk, Room};

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

/// [`Reply::copy_in_place`]: `src` copied into the room, as
/// [`copy_part_to_peer`](crate::copy_part_to_peer) copies a transfer of
/// that length when the room is the shared segment the caller reads it
/// from. (Not as [`copy_to_peer`](crate::copy_to_peer), up to 1 MiB: a
/// 1 MiB echo answered so took 120–164 µs against 85–90 µs, measured
/// alternately; the loan echo, which `Loan::from_slice` fills, is the
/// other way round.)
pub(crate) fn copy_in_place(reply: &mut Reply, src: &[u8]) {
    let room = data_in_place(reply, src.len());
    if PLACED.get() {
        // SAFETY: the room is `src.len()` bytes of this slot's result
        // segment, which nothing else here writes (see `data_in_place`),
        // and `src` is the caller's own slice, not in it: the segment is
        // read by the peer, never by this domain's handlers.
        unsafe { crate::sys::copy_part_to_peer(room.as_mut_ptr(), src.as_ptr(), src.len(), src.len()) };
    } else {
        room.copy_from_slice(src);
    }
}

/// Arguments still being written by their caller (a streamed request).
pub(crate) trait Landing: Send + Sync {
    /// How many of the arguments' bytes have landed, once `need` have:
    /// fewer only if the caller stopped writing (it died, or did not write
    /// them by the call's deadline for its arguments), which the call's
    /// server then learns. Bounded: it never waits past that deadline.
    fn landed(&self, need: usize) -> usize;
}

/// Argument or result bytes as they lie: a private copy, or a view of a
/// peer's shared memory read in place (see the module doc: on a door that
/// trusts its callers, [`Request::args`](crate::Request::args); for a
/// caller, [`Door::call_in_place`](crate::Door::call_in_place)).
///
/// A view's bytes are the peer's to write at any time. A trusted peer does
/// not write them while the call runs; one that does (a bug, or a peer that
/// was not worth the trust) can make what is read here wrong, byte by byte,
/// and nothing else: every read copies bytes out with an access the
/// compiler makes no assumption about, inside bounds fixed before the view
/// was made, so no change can make this side fault, read outside the
/// bytes, or hang. Hence no `&[u8]` of a view: validate what you copied
/// out, not the view.
///
/// ```
/// use lintel::{Door, Reply, Request};
/// let echo = Door::create_trusting(0, |req: Request<'_>, reply: &mut Reply| {
///     let args = req.args();
///     args.copy_to(reply.data_in_place(args.len()));
///     Ok(())
/// });
/// let len = echo.call_in_place(&[3; 10_000], |result| result.len()).unwrap();
/// assert_eq!(len, 10_000);
/// ```
pub struct InPlace<'a>(Bytes<'a>);

enum Bytes<'a> {
    Private(&'a [u8]),
    /// `len` bytes from the start of `view`; as far as they have landed,
    /// if they are still being written.
    Shared {
        view: Bulk,
        len: usize,
        landing: Option<Arc<dyn Landing>>,
        _life: std::marker::PhantomData<&'a ()>,
    },
}

impl std::fmt::Debug for InPlace<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InPlace")
            .field("len", &self.len())
            .field("shared", &self.is_shared())
            .finish()
    }
}

impl<'a> InPlace<'a> {
    /// Bytes that are ours alone.
    pub(crate) fn private(data: &'a [u8]) -> InPlace<'a> {
        InPlace(Bytes::Private(data))
    }

    /// The first `len` bytes of `view` (which holds at least that many).
    pub(crate) fn shared(view: Bulk, len: usize) -> InPlace<'a> {
        Self::landing(view, len, None)
    }

    /// As [`InPlace::shared`], for bytes that land as `landing` says.
    fn landing(view: Bulk, len: usize, landing: Option<Arc<dyn Landing>>) -> InPlace<'a> {
        debug_assert!(len <= view.len());
        InPlace(Bytes::Shared {
            view,
            len,
            landing,
            _life: std::marker::PhantomData,
        })
    }

    /// Its length in bytes.
    pub fn len(&self) -> usize {
        match &self.0 {
            Bytes::Private(d) => d.len(),
            Bytes::Shared { len, .. } => *len,
        }
    }

    /// Whether it holds no bytes.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether the bytes are read in a peer's memory (else they are a
    /// private copy, [`as_private`](Self::as_private)).
    pub fn is_shared(&self) -> bool {
        matches!(self.0, Bytes::Shared { .. })
    }

    /// The bytes as a slice, if they are a private copy: what a handler
    /// reads when the call came from this domain or its arguments fit a
    /// slot's data region.
    pub fn as_private(&self) -> Option<&'a [u8]> {
        match self.0 {
            Bytes::Private(d) => Some(d),
            Bytes::Shared { .. } => None,
        }
    }

    /// Byte `i`, read once (`None` past the end, or if its caller stopped
    /// writing before it).
    pub fn get(&self, i: usize) -> Option<u8> {
        match &self.0 {
            Bytes::Private(d) => d.get(i).copied(),
            Bytes::Shared {
                view, len, landing, ..
            } => (i < *len && landing.as_ref().is_none_or(|l| l.landed(i + 1) > i)).then(|| view.byte(i)),
        }
    }

    /// Copy bytes from offset `off` into `dst`, as many as fit and there
    /// are; how many were copied (0 from `off` at or past the end; fewer
    /// if the caller of a streamed request stopped writing them). Bytes
    /// still being written are copied part by part as they land.
    pub fn read_at(&self, off: usize, dst: &mut [u8]) -> usize {
        let n = dst.len().min(self.len().saturating_sub(off));
        match &self.0 {
            Bytes::Private(d) => dst[..n].copy_from_slice(&d[off.min(d.len())..][..n]),
            Bytes::Shared { view, landing, .. } => {
                // One copy of what is there; part by part, as they land,
                // of bytes still being written.
                let mut done = 0;
                while done < n {
                    // At least one byte more (a caller's word may say
                    // anything: kept within what is asked).
                    let have = landing
                        .as_ref()
                        .map_or(off + n, |l| l.landed(off + done + 1))
                        .min(off + n);
                    if have <= off + done {
                        return done;
                    }
                    view.read_at(off + done, &mut dst[done..have - off]);
                    done = have - off;
                }
            }
        }
        n
    }

    /// Copy the bytes into the start of `dst`, as many as fit; how many
    /// were copied. One copy from where they lie to where they go: a
    /// handler's [`Reply::data_in_place`] room, a loan of one's own.
    pub fn copy_to(&self, dst: &mut [u8]) -> usize {
        self.read_at(0, dst)
    }

    /// Append a copy of the bytes to `dst` (as far as they landed, for a
    /// streamed request whose caller stopped writing).
    pub fn read_into(&self, dst: &mut Vec<u8>) {
        match &self.0 {
            Bytes::Private(d) => dst.extend_from_slice(d),
            // A snapshot: taken once all have landed.
            Bytes::Shared {
                view, len, landing, ..
            } => view.read_into(landing.as_ref().map_or(*len, |l| l.landed(*len)).min(*len), dst),
        }
    }

    /// A copy of the bytes.
    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(self.len());
        self.read_into(&mut v);
        v
    }
}

/// The arguments in place of the call a thread's handler is serving.
struct Offered {
    /// Where the request's empty `data` starts.
    key: usize,
    view: Bulk,
    len: usize,
    landing: Option<Arc<dyn Landing>>,
}

thread_local! {
    static ARGS: RefCell<Option<Offered>> = const { RefCell::new(None) };
}

/// The handler about to run on this thread reads its `len` bytes of
/// arguments in place in `view` (as they land, if `landing`); returns the
/// empty `Request::data` that names them.
pub(crate) fn offer_args(view: Bulk, len: usize, landing: Option<Arc<dyn Landing>>) -> &'static [u8] {
    let key = view.empty_at_start();
    ARGS.set(Some(Offered {
        key: key.as_ptr() as usize,
        view,
        len,
        landing,
    }));
    key
}

/// The handler has returned: its arguments' view goes.
pub(crate) fn withdraw_args() {
    ARGS.set(None);
}

/// The arguments in place named by the empty `data` of a request, if this
/// thread's handler was offered them.
pub(crate) fn args_for<'a>(data: &'a [u8]) -> Option<InPlace<'a>> {
    if !data.is_empty() {
        return None;
    }
    let key = data.as_ptr() as usize;
    ARGS.with_borrow(|a| match a {
        Some(o) if o.key == key => Some(InPlace::landing(o.view.share(), o.len, o.landing.clone())),
        _ => None,
    })
}
