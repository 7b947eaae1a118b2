//! Calling a door: the path a call takes. A door served here runs its
//! handler on the caller's thread (co-located); one served by another
//! domain goes through that connection's channel (`client::fast`, `client::checked`). The door
//! itself (`door`) knows nothing of either: this is the one place that
//! picks.

use std::sync::Arc;

use crate::abi::INLINE;
use crate::context::error::CallError;
use crate::context::stats::{self, Path};
use crate::object::buffer::Buffer;
use crate::object::door::{Door, DoorCore, Inner, Ran, Reply, Request, check_sizes};
use crate::object::in_place::InPlace;

impl Door {
    /// Call the door: `data` and `doors` in, results into `reply`.
    ///
    /// Served here: a direct call on this thread. Served elsewhere: the fast
    /// path for up to 16 bytes without doors, the vanilla path up to 5 KiB.
    ///
    /// A call made under a deadline ([`crate::deadline`], or this handle's
    /// [`Door::with_timeout`]) fails with [`CallError::TimedOut`] once it
    /// passes.
    #[inline]
    pub fn call(&self, data: &[u8], doors: &[Door], reply: &mut Reply) -> Result<(), CallError> {
        // Calls passing doors, and those to doors served here, are dispatched
        // out of line, so this stays small enough to inline; a door-less
        // call to another domain goes straight to its channel's fast path,
        // with this thread's state read here (`fast::Here`).
        if !doors.is_empty() {
            return self.call_other(data, doors, reply);
        }
        match &self.0 {
            Inner::Remote(rd) => {
                let here = crate::client::fast::Here::now();
                crate::client::fast::call(rd, data, reply, here).map_err(unbox)
            }
            _ => self.call_here(data, reply),
        }
    }

    /// [`Door::call`] without doors of a door that is not another domain's:
    /// the co-located fast path if its guards pass, else
    /// [`Door::call_other`]. Its frame holds only what the guards need.
    #[inline(never)]
    fn call_here(&self, data: &[u8], reply: &mut Reply) -> Result<(), CallError> {
        match &self.0 {
            Inner::Local(core) if colocated_fast(core, data) => call_colocated(core, data, reply),
            _ => self.call_other(data, &[], reply),
        }
    }

    /// Everything [`Door::call_here`] does not do on its own: co-located
    /// calls that need checking, a dead server, a timed handle.
    #[cold]
    #[inline(never)]
    fn call_other(&self, data: &[u8], doors: &[Door], reply: &mut Reply) -> Result<(), CallError> {
        match &self.0 {
            Inner::Local(core) => call_colocated_slow(core, data, doors, Vec::new(), reply),
            Inner::Remote(rd) => crate::client::call_checked(rd, data, doors, reply),
            Inner::Dead(_) => Err(CallError::PeerDied),
            Inner::Timed(t) => call_timed(t, data, doors, reply),
        }
    }

    /// [`call`](Self::call), also passing `buffers` by reference: sealed
    /// snapshots and loans ([`crate::buffer`]), moved into the call (gone
    /// from the caller whether or not it succeeds). The server's handler
    /// finds them in [`Request::buffers`]; buffers it returns arrive in
    /// [`Reply::buffers`]. See [`crate::buffer`] for an example.
    pub fn call_with(
        &self,
        data: &[u8],
        doors: &[Door],
        buffers: Vec<Buffer>,
        reply: &mut Reply,
    ) -> Result<(), CallError> {
        match &self.0 {
            Inner::Local(core) => call_colocated_slow(core, data, doors, buffers, reply),
            Inner::Remote(rd) => crate::client::call_with(rd, data, doors, buffers, reply),
            Inner::Dead(_) => Err(CallError::PeerDied),
            Inner::Timed(t) => {
                crate::context::deadline::within(t.timeout, || t.door.call_with(data, doors, buffers, reply))
            }
        }
    }

    /// Call with bytes only, and read the result where it lies: `f` gets
    /// the result bytes as an [`InPlace`] and its value is the call's. A
    /// result larger than a slot's data region ([`crate::abi::DATA_CAP`],
    /// 5 KiB) from another domain is not copied out of the server's shared
    /// memory first: one copy fewer than [`Door::call`]. `f` runs on this
    /// thread before the call ends, and only if it succeeded.
    ///
    /// The bytes are the server's to write while `f` reads them: a server
    /// that does (a bug, or one not worth the trust) makes what `f` reads
    /// wrong, and nothing else (see [`InPlace`]). Copy out what must stay
    /// as it was validated.
    ///
    /// ```
    /// use lintel::{Door, Reply, Request};
    /// let zeros = Door::create(0, |req: Request<'_>, reply: &mut Reply| {
    ///     reply.data_in_place(req.data.len() * 1000).fill(0);
    ///     Ok(())
    /// });
    /// let nonzero = zeros.call_in_place(&[1; 9], |r| (0..r.len()).filter(|&i| r.get(i) != Some(0)).count());
    /// assert_eq!(nonzero.unwrap(), 0);
    /// ```
    pub fn call_in_place<R>(&self, data: &[u8], f: impl FnOnce(InPlace<'_>) -> R) -> Result<R, CallError> {
        match &self.0 {
            Inner::Remote(rd) => crate::client::call_in_place(rd, data, f),
            Inner::Timed(t) => crate::context::deadline::within(t.timeout, || t.door.call_in_place(data, f)),
            _ => {
                let mut reply = Reply::new();
                self.call(data, &[], &mut reply)?;
                Ok(f(InPlace::private(&reply.data)))
            }
        }
    }

    /// Call with bytes only; returns the result bytes.
    pub fn call_bytes(&self, data: &[u8]) -> Result<Vec<u8>, CallError> {
        let mut reply = Reply::new();
        self.call(data, &[], &mut reply)?;
        Ok(reply.data)
    }
}

/// A boxed error (the cross-domain fast path's, one register wide) as
/// callers get it.
#[cold]
#[inline(never)]
#[allow(clippy::boxed_local)] // boxed by the one that returns it, not here
fn unbox(e: Box<CallError>) -> CallError {
    *e
}

/// A call through a handle with a timeout: the handle's door, under it.
#[cold]
#[inline(never)]
fn call_timed(
    t: &crate::object::door::Timed,
    data: &[u8],
    doors: &[Door],
    reply: &mut Reply,
) -> Result<(), CallError> {
    crate::context::deadline::within(t.timeout, || t.door.call(data, doors, reply))
}

/// The co-located path: the handler runs on the caller's thread. Guards
/// first ([`colocated_fast`]), each sending the unusual case to
/// [`call_colocated_slow`]; then the handler runs on the bytes alone and
/// makes its request itself ([`crate::Handler::invoke_bytes`]), inside the
/// unwinding guard.
///
/// Out of line, apart from the guards: the machine retires about one
/// store a cycle, and a function that calls the handler saves only the
/// few registers it needs across it.
#[inline(never)]
fn call_colocated(core: &Arc<DoorCore>, data: &[u8], reply: &mut Reply) -> Result<(), CallError> {
    reply.clear();
    let inline = data.len() <= INLINE; // decided now: fewer values live across the handler
    let ran = core.run_bytes(data, reply);
    // An inline result needs no size check: no limit is below `INLINE`
    // (`set_max_message`). Counted in one store.
    if ran == Ran::Done && inline && reply.data.len() <= INLINE && reply.doors.is_empty() {
        stats::count_inline_ok(Path::Colocated);
        return Ok(());
    }
    colocated_result(ran, data.len(), reply)
}

/// The rest of [`call_colocated`]: a handler that failed, or a result that
/// is not inline (checked against the limit, then counted).
#[cold]
#[inline(never)]
fn colocated_result(ran: Ran, len: usize, reply: &mut Reply) -> Result<(), CallError> {
    let r = ran.checked(reply);
    if r.is_err() {
        reply.clear(); // as across domains, where a failed call brings nothing back
    }
    let result = r.as_ref().ok().map(|_| (reply.data.len(), reply.doors.len()));
    stats::call(Path::Colocated, len, 0, result);
    r
}

/// The co-located fast path's guards (no doors are passed): the door not
/// revoked, no more data than any call may carry, no deadline or cancel to
/// check.
#[inline(always)]
fn colocated_fast(core: &DoorCore, data: &[u8]) -> bool {
    !core.revoked()
        && (data.len() <= INLINE || data.len() <= crate::context::settings::max_message())
        && !crate::context::shuttle::call_checks_due()
}

/// The co-located path with everything checked: doors and buffers passed,
/// deadline and cancel.
#[inline(never)]
fn call_colocated_slow(
    core: &Arc<DoorCore>,
    data: &[u8],
    doors: &[Door],
    buffers: Vec<Buffer>,
    reply: &mut Reply,
) -> Result<(), CallError> {
    let due = crate::context::deadline::current();
    let r = admit(core, data, doors, &buffers).and_then(|()| {
        reply.clear();
        let req = Request {
            datum: core.datum,
            data,
            doors: doors.to_vec().into(),
            buffers: buffers.into(),
        };
        // A handler that returns after the deadline: `TimedOut`, as across
        // domains (see `deadline`).
        let r = core.invoke(req, reply);
        crate::context::deadline::settle(due, r)
            // As across domains, where a failed call brings nothing back.
            .inspect_err(|_| reply.clear())
    });
    let result = r.as_ref().ok().map(|_| (reply.data.len(), reply.doors.len()));
    stats::call(Path::Colocated, data.len(), doors.len(), result);
    r
}

/// The checks a co-located call passes before its handler runs, as a call
/// across domains does: sizes, buffers, revocation, deadline and cancel.
#[inline]
pub(super) fn admit(
    core: &DoorCore,
    data: &[u8],
    doors: &[Door],
    buffers: &[Buffer],
) -> Result<(), CallError> {
    check_sizes("arguments", data.len(), doors.len())?;
    crate::object::buffer::check_passable(buffers)?;
    if core.revoked() {
        return Err(CallError::Revoked);
    }
    crate::context::shuttle::check_call()
}
