//! Doors: capabilities to one entry point in the domain that created them.
//!
//! A [`Door`] value is a door identifier in the Spring sense: it names the
//! door only inside this process. Served here, it holds the door itself
//! ([`DoorCore`]); served elsewhere, it holds the connection to the server
//! and the server's grant index for it ([`RemoteDoor`]). Doors need no file
//! descriptor each, so a domain can hold as many as memory allows.
//!
//! # Reference counting
//!
//! The server counts, per door, the domains that hold it (one per connection
//! with a live grant, one per ticket in transit) and the remote calls in
//! progress ([`crate::state::refs`]). When the count falls to zero and the calls
//! let in before have ended, one `unreferenced` is queued (the domain's
//! single unreferenced thread delivers them in order). Calls by the server
//! domain itself do not count: it always holds its own door.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering::*};

use crate::abi::MAX_DOORS;
use crate::context::attached::Attached;
use crate::context::error::{CallError, Fault};
use crate::context::stats::{self, Path};
use crate::object::async_handler::AsyncDoor;
use crate::object::buffer::Buffer;
use crate::object::conn::Conn;
use crate::object::in_place::{self, InPlace};
use crate::state::refs::{self, Refs, Runner};
use crate::state::running::Running;

/// A call as the handler sees it: the door's datum, a private copy of the
/// argument bytes (or, on a door that trusts its callers, a view of them in
/// place: [`Request::args`]), and the doors passed in (now held by this
/// domain).
pub struct Request<'a> {
    /// The datum the door was created with: which object it names.
    pub datum: u64,
    /// The argument bytes: a private copy. Empty on a door made with
    /// [`Door::create_trusting`] when the arguments are read in place
    /// instead ([`Request::args`] has them on every door).
    pub data: &'a [u8],
    /// Doors passed with the call; dropping them releases them.
    pub doors: Attached<Door>,
    /// Buffers passed with the call ([`crate::buffer`]); the handler owns
    /// them and may keep them.
    pub buffers: Attached<Buffer>,
}

/// Results of a call: bytes and doors. Reuse one across calls to avoid
/// allocating on every call.
#[derive(Default, Debug)]
pub struct Reply {
    /// The result bytes.
    pub data: Vec<u8>,
    /// Doors returned with the result.
    pub doors: Vec<Door>,
    /// Buffers returned with the result ([`crate::buffer`]).
    pub buffers: Vec<Buffer>,
}

impl<'a> Request<'a> {
    /// The argument bytes as they lie: on a door made with
    /// [`Door::create_trusting`] and called by another domain with more
    /// than a slot's data region ([`crate::abi::DATA_CAP`], 5 KiB), a view
    /// of the caller's shared memory, read in place; otherwise
    /// [`data`](Self::data), the private copy. A handler that reads its
    /// arguments here serves both kinds of door alike.
    ///
    /// ```
    /// use lintel::{Door, Reply, Request};
    /// let sum = Door::create_trusting(0, |req: Request<'_>, reply: &mut Reply| {
    ///     let mut chunk = [0u8; 4096];
    ///     let (mut at, mut total) = (0, 0u64);
    ///     loop {
    ///         let n = req.args().read_at(at, &mut chunk);
    ///         if n == 0 { break; }
    ///         total += chunk[..n].iter().map(|&b| u64::from(b)).sum::<u64>();
    ///         at += n;
    ///     }
    ///     reply.data.extend_from_slice(&total.to_le_bytes());
    ///     Ok(())
    /// });
    /// assert_eq!(sum.call_bytes(&[2; 9000]).unwrap(), 18_000u64.to_le_bytes());
    /// ```
    pub fn args(&self) -> InPlace<'a> {
        in_place::args_for(self.data).unwrap_or(InPlace::private(self.data))
    }
}

impl Reply {
    /// An empty reply.
    pub fn new() -> Reply {
        Reply::default()
    }

    /// Room for a result of `len` bytes, to write in place; the result is
    /// those bytes (and [`data`](Self::data) is emptied). A handler serving
    /// another domain with a result larger than a slot's data region
    /// ([`crate::abi::DATA_CAP`], 5 KiB) gets room in the shared memory the
    /// reply travels in, so the result is not copied there afterwards: one
    /// copy fewer than building it in `data`. Elsewhere (a co-located call,
    /// an async handler, a small result) the room is `data` itself.
    ///
    /// The room may be `data` itself; to answer with `data` after all,
    /// clear it and fill it: a `data` that is not empty when the handler
    /// returns is the result.
    ///
    /// ```
    /// use lintel::{Door, Reply, Request};
    /// let echo = Door::create(0, |req: Request<'_>, reply: &mut Reply| {
    ///     reply.data_in_place(req.data.len()).copy_from_slice(req.data);
    ///     Ok(())
    /// });
    /// assert_eq!(echo.call_bytes(&[7; 9000]).unwrap(), [7; 9000]);
    /// ```
    pub fn data_in_place(&mut self, len: usize) -> &mut [u8] {
        in_place::data_in_place(self, len)
    }

    /// The result is a copy of `bytes`: [`data_in_place`](Self::data_in_place)
    /// filled with them, copied as bytes bound for another CPU copy fastest
    /// when they travel to another domain ([`copy_part_to_peer`]: around
    /// the caches from 32 to 512 KiB; a 64 KiB echo of the copy path took
    /// 12.2 µs this way against 14.5 µs with the room filled by
    /// `copy_from_slice`).
    ///
    /// ```
    /// use lintel::{Door, Reply, Request};
    /// let echo = Door::create(0, |req: Request<'_>, reply: &mut Reply| {
    ///     reply.copy_in_place(req.data);
    ///     Ok(())
    /// });
    /// assert_eq!(echo.call_bytes(&[7; 90_000]).unwrap(), [7; 90_000]);
    /// ```
    ///
    /// [`copy_part_to_peer`]: crate::copy_part_to_peer
    pub fn copy_in_place(&mut self, bytes: &[u8]) {
        in_place::copy_in_place(self, bytes)
    }

    /// (Always inlined: out of line it costs the co-located call about
    /// 15 instructions, and the compiler's choice moved with unrelated
    /// changes.)
    #[inline(always)]
    pub(crate) fn clear(&mut self) {
        self.data.clear();
        if !self.doors.is_empty() {
            self.doors.clear();
        }
        if !self.buffers.is_empty() {
            self.buffers.clear();
        }
    }
}

/// The code behind a door.
pub trait Handler: Send + Sync + 'static {
    /// Serve one call; runs on a server thread (or on the caller's thread
    /// when co-located).
    fn invoke(&self, req: Request<'_>, reply: &mut Reply) -> Result<(), Fault>;

    /// Serve a call that passed bytes only (no doors, no buffers): what the
    /// fast paths call, co-located and in a server's worker. The default
    /// makes the request and calls [`Handler::invoke`]; being generic, it is
    /// compiled with each handler, so the request is built where the handler
    /// runs instead of being built by the caller and moved in. A handler
    /// need not override it; one that does must serve the call as its
    /// `invoke` would.
    #[inline]
    fn invoke_bytes(&self, datum: u64, data: &[u8], reply: &mut Reply) -> Result<(), Fault> {
        let req = Request {
            datum,
            data,
            doors: Attached::new(),
            buffers: Attached::new(),
        };
        self.invoke(req, reply)
    }

    /// No other domain holds the door and no call on it is active.
    fn unreferenced(&self, _datum: u64) {}

    /// The object behind the door, so that a stub in the serving domain can
    /// call it directly ([`Door::with_local`]) instead of marshalling bytes.
    fn as_any(&self) -> Option<&(dyn std::any::Any + Send + Sync)> {
        None
    }
}

impl<F> Handler for F
where
    F: Fn(Request<'_>, &mut Reply) -> Result<(), Fault> + Send + Sync + 'static,
{
    fn invoke(&self, req: Request<'_>, reply: &mut Reply) -> Result<(), Fault> {
        self(req, reply)
    }
}

struct WithUnref<H, U>(H, U);

impl<H: Handler, U: Fn(u64) + Send + Sync + 'static> Handler for WithUnref<H, U> {
    fn invoke(&self, req: Request<'_>, reply: &mut Reply) -> Result<(), Fault> {
        self.0.invoke(req, reply)
    }

    fn invoke_bytes(&self, datum: u64, data: &[u8], reply: &mut Reply) -> Result<(), Fault> {
        self.0.invoke_bytes(datum, data, reply)
    }
    fn unreferenced(&self, datum: u64) {
        (self.1)(datum)
    }
    fn as_any(&self) -> Option<&(dyn std::any::Any + Send + Sync)> {
        self.0.as_any()
    }
}

/// Where a door's `unreferenced` goes once its count reaches zero: the
/// domain's unreferenced thread in the runtime, a recorder in tests.
pub(crate) type UnrefSink = fn(Arc<DoorCore>);

/// The words of the workers that may run fast calls on a door: the
/// domain's in the runtime (the current domain's, so a forked child's new
/// workers are the ones seen), a test's own on the host.
pub(crate) type Runners = fn() -> &'static Running;

/// A door served by this domain. Its reference count is a plain value: all
/// it needs from the runtime is the sink it was created with.
pub(crate) struct DoorCore {
    pub datum: u64,
    pub handler: Box<dyn Handler>,
    /// The async handler of a door made with [`Door::create_async`]
    /// (`handler` is then its blocking face).
    pub asynk: Option<Arc<AsyncDoor>>,
    /// Made with [`Door::create_trusting`]: large arguments from other
    /// domains are read in place, not copied.
    pub trusting: bool,
    on_unref: UnrefSink,
    runners: Runners,
    refs: Refs,
}

impl refs::Door for Arc<DoorCore> {
    fn runs(&self, addr: usize) -> bool {
        (self.runners)().runs(addr)
    }
    fn unreferenced(&self) {
        (self.on_unref)(self.clone())
    }
}

impl DoorCore {
    pub fn new(
        datum: u64,
        handler: Box<dyn Handler>,
        on_unref: UnrefSink,
        runners: Runners,
    ) -> Arc<DoorCore> {
        Arc::new(DoorCore {
            datum,
            handler,
            asynk: None,
            trusting: false,
            on_unref,
            runners,
            refs: Refs::new(),
        })
    }

    /// A door served by `asynk`, with `handler` its blocking face.
    pub fn new_async(datum: u64, handler: Box<dyn Handler>, asynk: Arc<AsyncDoor>) -> Arc<DoorCore> {
        Arc::new(DoorCore {
            datum,
            handler,
            asynk: Some(asynk),
            trusting: false,
            on_unref: deliver_unreferenced,
            runners: crate::state::running::workers,
            refs: Refs::new(),
        })
    }

    pub fn revoked(&self) -> bool {
        self.refs.revoked()
    }

    /// Run the handler for one call, on every path alike: a fault or a panic
    /// becomes the call's error (the domain lives on), and results too large
    /// for the remote path fail here too.
    #[inline]
    pub fn invoke(&self, req: Request<'_>, reply: &mut Reply) -> Result<(), CallError> {
        let outcome =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.handler.invoke(req, reply)));
        Ran::of(outcome).checked(reply)
    }

    /// As [`DoorCore::invoke`] for a call that passed bytes only, and with
    /// the result left unchecked (the fast paths check it against their own,
    /// smaller limit first): both fast paths, co-located and the server's.
    /// The handler makes the request itself ([`Handler::invoke_bytes`]):
    /// nothing is built here, moved or dropped. (Against the request made
    /// here and moved into [`Handler::invoke`], the server's null call takes
    /// 12 fewer instructions, and in alternating runs measured no slower:
    /// 1.25× the spin baseline against 1.29×, six each.)
    #[inline]
    pub fn run_bytes(&self, data: &[u8], reply: &mut Reply) -> Ran {
        Ran::of(std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            self.handler.invoke_bytes(self.datum, data, reply)
        })))
    }

    /// A fast call starts on the worker whose word is `runner`: true if the
    /// door is held and not revoked, so the call runs uncounted (the door's
    /// fall to zero holders will see the worker's word). False: the worker
    /// has left again and the call goes the slow, counted way.
    #[inline(always)]
    pub fn enter(self: &Arc<Self>, runner: &Runner) -> bool {
        if self.refs.enter(runner) {
            return true;
        }
        self.leave(runner);
        false
    }

    /// The fast call that [`DoorCore::enter`] let in has ended.
    #[inline(always)]
    pub fn leave(self: &Arc<Self>, runner: &Runner) {
        self.refs.leave(runner, self)
    }

    /// A remote call starts; fails if the door is revoked.
    #[inline]
    pub fn begin_call(self: &Arc<Self>) -> Result<ActiveCall<'_>, CallError> {
        match self.refs.begin_call(self) {
            Ok(()) => Ok(ActiveCall(self)),
            Err(refs::Revoked) => Err(CallError::Revoked),
        }
    }

    /// Holders counted now.
    pub fn holder_count(&self) -> u32 {
        self.refs.holder_count()
    }

    /// Another domain (or ticket) now holds the door.
    pub fn add_holder(&self) {
        self.refs.add_holder()
    }

    /// A holder let go (released, died, or its ticket was dropped).
    pub fn drop_holder(self: &Arc<Self>) {
        self.refs.drop_holder(self)
    }

    /// Holders of many doors let go at once (a peer's batch of releases,
    /// or its death): one heavy fence for all the doors that fall to zero.
    pub fn drop_holders(cores: impl IntoIterator<Item = Arc<DoorCore>>) {
        let fallen: Vec<_> = cores.into_iter().filter(|c| c.refs.drop_holder_later()).collect();
        // Their `unreferenced` jobs go to the thread together.
        crate::state::unref::batched(|| Refs::settle_all(&fallen, |c| &c.refs));
    }

    pub fn revoke(self: &Arc<Self>) {
        self.refs.revoke(self)
    }
}

/// How a handler's run ended, before its result is checked: a small value,
/// so the fast path branches on it without building a [`CallError`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ran {
    Done,
    Fault(u32),
    Panicked,
}

impl Ran {
    #[inline]
    fn of(outcome: std::thread::Result<Result<(), Fault>>) -> Ran {
        match outcome {
            Ok(Ok(())) => Ran::Done,
            Ok(Err(Fault(code))) => Ran::Fault(code),
            Err(_) => Ran::Panicked,
        }
    }

    /// The call's result: the handler's error, or a result too large for
    /// any path (refused the same whether co-located or not).
    pub fn checked(self, reply: &Reply) -> Result<(), CallError> {
        match self {
            Ran::Done => check_sizes("result", reply.data.len(), reply.doors.len()),
            Ran::Fault(code) => Err(Fault(code).into()),
            Ran::Panicked => Err(CallError::Panicked),
        }
    }
}

/// A remote call in progress on a door; ends on drop.
pub(crate) struct ActiveCall<'a>(&'a Arc<DoorCore>);

impl ActiveCall<'_> {
    /// The same call, held by a value that may outlive the borrow (an
    /// async handler's task).
    pub fn owned(self) -> OwnedCall {
        let core = self.0.clone();
        std::mem::forget(self);
        OwnedCall(core)
    }
}

/// [`ActiveCall`], owning its door.
pub(crate) struct OwnedCall(Arc<DoorCore>);

impl Drop for OwnedCall {
    fn drop(&mut self) {
        self.0.refs.end_call(&self.0);
    }
}

impl Drop for ActiveCall<'_> {
    fn drop(&mut self) {
        self.0.refs.end_call(self.0);
    }
}

/// A door served by another domain, as held here.
pub(crate) struct RemoteDoor {
    pub conn: Arc<Conn>,
    pub grant: u32,
    /// How many times the server sent us this grant; returned on release so
    /// a grant re-sent while our release is in flight is not lost.
    pub received: AtomicU32,
}

impl Drop for RemoteDoor {
    fn drop(&mut self) {
        let d = self.conn.home;
        d.forget_remote(self);
        if self.conn.release_grant(self.grant, self.received.load(SeqCst)) {
            d.releases_queued(&self.conn);
        }
    }
}

#[derive(Clone)]
pub(crate) enum Inner {
    Local(Arc<DoorCore>),
    Remote(Arc<RemoteDoor>),
    /// Served by the domain with this pid, which died before the door
    /// reached us: every call fails with [`CallError::PeerDied`], as it
    /// would have for the domain that passed it.
    Dead(u32),
    /// Another handle's door, whose calls each get a timeout
    /// ([`Door::with_timeout`]).
    Timed(Arc<Timed>),
}

/// A door handle with a timeout per call.
pub(crate) struct Timed {
    pub door: Door,
    pub timeout: std::time::Duration,
}

/// The sink of doors created by [`Door::create`]: their `unreferenced` runs
/// on the one thread that delivers them in order.
fn deliver_unreferenced(core: Arc<DoorCore>) {
    crate::state::unref::queue(Box::new(move || core.handler.unreferenced(core.datum)));
}

/// A capability to call one object in some domain.
///
/// Dropping the last handle of a door served here drops its handler; a
/// panic in the handler's own `Drop` then aborts the process (a door is let
/// go in a call that cannot unwind, which keeps dropping doors cheap).
///
/// ```
/// use lintel::{Door, Reply};
/// let echo = Door::create(7, |req: lintel::Request<'_>, reply: &mut Reply| {
///     assert_eq!(req.datum, 7);
///     reply.data.extend_from_slice(req.data);
///     Ok(())
/// });
/// assert_eq!(echo.call_bytes(b"hi").unwrap(), b"hi");
/// ```
#[derive(Clone)]
pub struct Door(pub(crate) Inner);

/// A hold on a door of this domain counted as another domain's
/// ([`Door::hold_for_far_holder`]); let go when dropped.
pub struct FarHold(Arc<DoorCore>);

impl Drop for FarHold {
    fn drop(&mut self) {
        self.0.drop_holder();
    }
}

impl std::fmt::Debug for FarHold {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "FarHold(datum={})", self.0.datum)
    }
}

/// A handle lets go of its door in one call that cannot unwind (`let_go`):
/// a list of doors then drops with a loop the compiler inlines, with no
/// landing pad, so a request without doors is dropped in a few
/// instructions (the handler's drop of a null call's request: 50 to 33;
/// a list of buffers still has its pad). A panic while a door is let go (in a
/// handler's own `Drop`, run when its door's last handle goes) aborts the
/// process instead of unwinding.
impl Drop for Door {
    #[inline]
    fn drop(&mut self) {
        let inner = std::mem::replace(&mut self.0, Inner::Dead(0));
        if !matches!(inner, Inner::Dead(_)) {
            let_go(inner);
        }
    }
}

/// `extern "C"` only so that it cannot unwind (a panic inside aborts): no
/// foreign code calls it, hence the lint's allowance.
#[allow(improper_ctypes_definitions)]
extern "C" fn let_go(door: Inner) {
    drop(door);
}

impl Door {
    /// A door on `core`, served here.
    pub(crate) fn local(core: Arc<DoorCore>) -> Door {
        Door(Inner::Local(core))
    }

    /// Create a door served by this domain; `datum` names the object.
    pub fn create(datum: u64, handler: impl Handler) -> Door {
        Door(Inner::Local(DoorCore::new(
            datum,
            Box::new(handler),
            deliver_unreferenced,
            crate::state::running::workers,
        )))
    }

    /// Create a door that trusts its callers' writes: the trusted
    /// placement. Arguments larger than a slot's data region
    /// ([`crate::abi::DATA_CAP`], 5 KiB) from another domain are not copied
    /// into private memory before the handler runs; the handler reads them
    /// in place in the caller's shared memory through [`Request::args`]
    /// (and `Request::data` is then empty). That saves the copy a door
    /// makes so that a caller cannot change the bytes while the handler
    /// reads them.
    ///
    /// What a caller that breaks the trust can do: write its arguments
    /// while the handler reads them, so the handler reads a mix of old and
    /// new bytes (and two reads of one byte may differ). Nothing more: the
    /// view's reads stay inside the arguments, cannot fault or hang, and
    /// every check of the request itself (sizes, grants, doors, buffers,
    /// segments) is made as on any door. Arguments large enough that the
    /// caller streams them (64 KiB and more) reach the handler while the
    /// caller still writes them, and each read waits for the bytes it
    /// asks: the handler's copy overlaps the caller's. A read waits at
    /// most until the call's deadline for its arguments (2 s, and 10 ns a
    /// byte); a caller that stops writing before then makes the reads
    /// short and its call fail. Use it where the callers are
    /// your own code, or where wrong bytes cost no more than wrong
    /// arguments would; a handler that validates then uses its arguments
    /// should copy them out first (`args().to_vec()`), as the default
    /// does. Async doors and calls from this domain get a private copy
    /// as usual. A handler that reads only `req.data` (as the servers
    /// `#[lintel::interface]` generates do) must not be made trusting:
    /// its large arguments would arrive empty.
    ///
    /// ```
    /// use lintel::{Door, Reply, Request};
    /// let echo = Door::create_trusting(0, |req: Request<'_>, reply: &mut Reply| {
    ///     let args = req.args();
    ///     args.copy_to(reply.data_in_place(args.len()));
    ///     Ok(())
    /// });
    /// assert_eq!(echo.call_bytes(&[5; 8000]).unwrap(), [5; 8000]);
    /// ```
    pub fn create_trusting(datum: u64, handler: impl Handler) -> Door {
        let mut core = DoorCore::new(
            datum,
            Box::new(handler),
            deliver_unreferenced,
            crate::state::running::workers,
        );
        Arc::get_mut(&mut core)
            .expect("a door just made has one handle")
            .trusting = true;
        Door(Inner::Local(core))
    }

    /// Like [`Door::create`], with a closure run on each `unreferenced`.
    pub fn create_with_unref(
        datum: u64,
        handler: impl Handler,
        unreferenced: impl Fn(u64) + Send + Sync + 'static,
    ) -> Door {
        Door::create(datum, WithUnref(handler, unreferenced))
    }

    /// A handle on the same door whose every call must end within `timeout`
    /// (or the deadline already in force, if earlier); other handles are
    /// unchanged. Typed clients get the same with `from_door(door.with_timeout(..))`.
    ///
    /// ```
    /// use std::time::Duration;
    /// let d = lintel::Door::create(0, |_: lintel::Request<'_>, _: &mut lintel::Reply| Ok(()));
    /// let bounded = d.with_timeout(Duration::from_millis(200));
    /// assert!(bounded.same(&d));
    /// assert!(bounded.call_bytes(b"").is_ok());
    /// ```
    pub fn with_timeout(&self, timeout: std::time::Duration) -> Door {
        Door(Inner::Timed(Arc::new(Timed {
            door: self.base().clone(),
            timeout,
        })))
    }

    /// The handle under any timeout wrapper.
    #[inline]
    pub(crate) fn base(&self) -> &Door {
        match &self.0 {
            Inner::Timed(t) => t.door.base(),
            _ => self,
        }
    }

    /// The co-located path for typed stubs: if this domain serves the door
    /// with a handler whose [`Handler::as_any`] is a `T`, run `f` on it
    /// (with the door's datum) directly on this thread, no marshalling.
    /// `None` if the door is served elsewhere or by another type; the call
    /// fails as any other would if the door is revoked or `f` panics.
    ///
    /// ```
    /// use lintel::{Door, Fault, Handler, Reply, Request};
    /// struct Clock;
    /// impl Handler for Clock {
    ///     fn invoke(&self, _: Request<'_>, r: &mut Reply) -> Result<(), Fault> {
    ///         r.data.push(1);
    ///         Ok(())
    ///     }
    ///     fn as_any(&self) -> Option<&(dyn std::any::Any + Send + Sync)> {
    ///         Some(self)
    ///     }
    /// }
    /// let d = Door::create(0, Clock);
    /// assert_eq!(d.with_local(|_: &Clock, datum| datum + 1), Some(Ok(1)));
    /// ```
    ///
    /// It is a call like any other: through a handle with a timeout
    /// ([`Door::with_timeout`]) `f` runs under that deadline (see
    /// [`crate::deadline::remaining`]); a deadline already passed, or a
    /// cancel pending ([`crate::shuttle::ShuttleHandle::cancel`]), fails it
    /// before `f` runs; and if the deadline passes while `f` runs, the
    /// result is [`CallError::TimedOut`], as across domains.
    #[inline]
    pub fn with_local<T: std::any::Any, R>(
        &self,
        f: impl FnOnce(&T, u64) -> R,
    ) -> Option<Result<R, CallError>> {
        let core = match &self.0 {
            Inner::Local(core) => core,
            Inner::Timed(t) if t.door.is_local() => {
                return crate::context::deadline::within(t.timeout, || t.door.with_local(f));
            }
            _ => return None,
        };
        let obj = core.handler.as_any()?.downcast_ref::<T>()?;
        let r = if core.revoked() {
            Err(CallError::Revoked)
        } else if crate::context::shuttle::call_checks_due() {
            crate::context::shuttle::check_call().and_then(|()| {
                let due = crate::context::deadline::current();
                let r = run_local(core, obj, f);
                crate::context::deadline::settle(due, r)
            })
        } else {
            run_local(core, obj, f)
        };
        // Counted as a co-located call with no bytes: nothing is marshalled.
        stats::call(Path::Colocated, 0, 0, r.as_ref().ok().map(|_| (0, 0)));
        Some(r)
    }

    /// The object serving this door and the door's datum, if this domain
    /// serves it with a handler whose `as_any` ([`Handler::as_any`],
    /// [`crate::AsyncHandler::as_any`]) is a `T`; not a call. How a
    /// forwarder knows a door that comes back to it as one of its own.
    ///
    /// ```
    /// use lintel::{Door, Fault, Handler, Reply, Request};
    /// struct Mine(u32);
    /// impl Handler for Mine {
    ///     fn invoke(&self, _: Request<'_>, _: &mut Reply) -> Result<(), Fault> {
    ///         Ok(())
    ///     }
    ///     fn as_any(&self) -> Option<&(dyn std::any::Any + Send + Sync)> {
    ///         Some(self)
    ///     }
    /// }
    /// let d = Door::create(9, Mine(4));
    /// assert_eq!(d.served_by::<Mine>().map(|(m, datum)| (m.0, datum)), Some((4, 9)));
    /// assert!(d.served_by::<u8>().is_none());
    /// ```
    pub fn served_by<T: std::any::Any>(&self) -> Option<(&T, u64)> {
        match &self.base().0 {
            Inner::Local(core) => Some((core.handler.as_any()?.downcast_ref::<T>()?, core.datum)),
            _ => None,
        }
    }

    /// Count a holder outside this domain for as long as the value lives:
    /// how a forwarder that hands this domain's door to holders it cannot
    /// see (a network proxy's far side) keeps its `unreferenced` true.
    /// When the last such hold and every other domain's hold are gone, the
    /// server hears `unreferenced`, as when a domain lets go. `None` for a
    /// door served elsewhere: a handle on it is already its domain's hold.
    ///
    /// ```
    /// use std::sync::atomic::{AtomicU32, Ordering};
    /// use std::sync::Arc;
    /// let heard = Arc::new(AtomicU32::new(0));
    /// let h = heard.clone();
    /// let d = lintel::Door::create_with_unref(
    ///     0,
    ///     |_: lintel::Request<'_>, _: &mut lintel::Reply| Ok(()),
    ///     move |_| { h.fetch_add(1, Ordering::SeqCst); },
    /// );
    /// let hold = d.hold_for_far_holder().unwrap();
    /// drop(hold); // the far holder let go: unreferenced is queued
    /// # let t = std::time::Instant::now();
    /// # while heard.load(Ordering::SeqCst) == 0 && t.elapsed().as_secs() < 10 { std::thread::yield_now(); }
    /// assert_eq!(heard.load(Ordering::SeqCst), 1);
    /// ```
    pub fn hold_for_far_holder(&self) -> Option<FarHold> {
        match &self.base().0 {
            Inner::Local(core) => {
                core.add_holder();
                Some(FarHold(core.clone()))
            }
            _ => None,
        }
    }

    /// Revoke the door: every later call fails with [`CallError::Revoked`]
    /// in every holder. Only the serving domain can revoke.
    pub fn revoke(&self) -> Result<(), CallError> {
        match &self.base().0 {
            Inner::Local(core) => {
                core.revoke();
                Ok(())
            }
            _ => Err(CallError::BadDoor),
        }
    }

    /// Whether this domain serves the door.
    pub fn is_local(&self) -> bool {
        matches!(self.base().0, Inner::Local(_))
    }

    /// Whether this domain serves the door with a blocking handler: a call
    /// runs it on the calling thread, awaited or not. A forwarder serving
    /// calls on a runtime's thread hands such calls to a thread that may
    /// block.
    pub fn is_local_blocking(&self) -> bool {
        matches!(&self.base().0, Inner::Local(core) if core.asynk.is_none())
    }

    /// Whether two identifiers name the same door.
    pub fn same(&self, other: &Door) -> bool {
        match (&self.base().0, &other.base().0) {
            (Inner::Local(a), Inner::Local(b)) => Arc::ptr_eq(a, b),
            (Inner::Remote(a), Inner::Remote(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }

    /// Whether the domain serving the door is known to be gone: every call
    /// on it fails with [`CallError::PeerDied`]. This process learns it
    /// when a call fails so, or when its runtime sees the server's process
    /// end (within milliseconds, without a call); a door served here is
    /// never dead. What to do next is the holder's: a door found by name
    /// can be looked up again, to find the server's new instance.
    ///
    /// ```
    /// let d = lintel::Door::create(0, |_: lintel::Request<'_>, _: &mut lintel::Reply| Ok(()));
    /// assert!(!d.is_dead());
    /// ```
    pub fn is_dead(&self) -> bool {
        match &self.base().0 {
            Inner::Local(_) => false,
            Inner::Remote(rd) => rd.conn.is_dead(),
            Inner::Dead(_) => true,
            Inner::Timed(_) => unreachable!("base() unwraps timeouts"),
        }
    }

    /// Pid of the process serving the door (this one if local).
    pub fn server_pid(&self) -> u32 {
        match &self.base().0 {
            Inner::Local(_) => std::process::id(),
            Inner::Remote(rd) => rd.conn.peer_pid(),
            Inner::Dead(pid) => *pid,
            Inner::Timed(_) => unreachable!("base() unwraps timeouts"),
        }
    }
}

impl std::fmt::Debug for Door {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0 {
            Inner::Local(c) => write!(f, "Door(local datum={})", c.datum),
            Inner::Remote(r) => write!(f, "Door(remote conn={} grant={})", r.conn.id, r.grant),
            Inner::Dead(pid) => write!(f, "Door(dead server pid={pid})"),
            Inner::Timed(t) => write!(f, "{:?} with timeout {:?}", t.door, t.timeout),
        }
    }
}

/// [`Door::with_local`]'s call: `f` on the handler's object, a panic in it
/// caught.
#[inline]
fn run_local<T, R>(core: &DoorCore, obj: &T, f: impl FnOnce(&T, u64) -> R) -> Result<R, CallError> {
    let datum = core.datum;
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(obj, datum))).map_err(|_| CallError::Panicked)
}

/// Checks shared by every path, so co-located and remote calls fail alike.
#[inline]
pub(crate) fn check_sizes(what: &'static str, len: usize, doors: usize) -> Result<(), CallError> {
    let max = crate::context::settings::max_message();
    if len > max {
        return Err(CallError::TooLarge { what, len, max });
    }
    if doors > MAX_DOORS {
        return Err(CallError::TooManyDoors {
            len: doors,
            max: MAX_DOORS,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    //! The reference count on the host: no process, no runtime, the
    //! unreferenced sink a recorder.
    use super::*;

    std::thread_local! {
        static UNREFS: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
    }

    fn record(_: Arc<DoorCore>) {
        UNREFS.with(|u| u.set(u.get() + 1));
    }

    fn unrefs() -> u32 {
        UNREFS.with(std::cell::Cell::get)
    }

    fn door() -> Arc<DoorCore> {
        UNREFS.with(|u| u.set(0));
        let h = |_: Request<'_>, _: &mut Reply| Ok(());
        DoorCore::new(7, Box::new(h), record, runners)
    }

    /// The workers of these tests: each test thread has its own door, so
    /// one registry serves them all.
    fn runners() -> &'static Running {
        static RUNNING: Running = Running::new();
        &RUNNING
    }

    /// Handles let go of their door out of line (`let_go`): the handler
    /// goes with the last handle, once, also from a list of doors mixed
    /// with dead ones.
    #[test]
    fn the_last_handle_of_a_door_drops_its_handler_once() {
        struct Counted(Arc<std::sync::atomic::AtomicU32>);
        impl Handler for Counted {
            fn invoke(&self, _: Request<'_>, _: &mut Reply) -> Result<(), Fault> {
                Ok(())
            }
        }
        impl Drop for Counted {
            fn drop(&mut self) {
                self.0.fetch_add(1, SeqCst);
            }
        }
        let dropped = Arc::new(std::sync::atomic::AtomicU32::new(0));
        let make = || {
            Door(Inner::Local(DoorCore::new(
                1,
                Box::new(Counted(dropped.clone())),
                record,
                runners,
            )))
        };
        let (a, b) = (make(), make());
        let list = vec![a.clone(), Door(Inner::Dead(7)), b.clone(), a.clone()];
        drop(a);
        drop(b);
        assert_eq!(dropped.load(SeqCst), 0, "the list still holds both doors");
        drop(list);
        assert_eq!(
            dropped.load(SeqCst),
            2,
            "each handler dropped once, with its last handle"
        );
    }

    #[test]
    fn unreferenced_once_per_fall_to_zero_holders() {
        let d = door();
        d.add_holder();
        d.add_holder();
        d.drop_holder();
        assert_eq!(unrefs(), 0, "one holder left");
        d.drop_holder();
        assert_eq!(unrefs(), 1);
        d.drop_holder();
        assert_eq!(unrefs(), 1, "a release with no holder counts nothing");
        d.add_holder();
        d.drop_holder();
        assert_eq!(unrefs(), 2, "held again, released again");
    }

    /// A batch of releases (a peer's message, or its death) decides each
    /// door that falls to zero once, and only those; a door with a fast
    /// call in progress is left to its worker.
    #[test]
    fn doors_let_go_at_once_are_unreferenced_once_each() {
        let (a, b, c) = (door(), door(), door());
        for d in [&a, &b, &c, &c] {
            d.add_holder();
        }
        let w = runners().register();
        assert!(b.enter(&w));
        DoorCore::drop_holders([a.clone(), b.clone(), c.clone()]);
        assert_eq!(unrefs(), 1, "a fell to zero; b is in a call; c is still held");
        b.leave(&w);
        assert_eq!(unrefs(), 2, "b once its call ended");
        DoorCore::drop_holders([c.clone(), c.clone()]);
        assert_eq!(unrefs(), 3, "c once, however many of its holders go");
    }

    #[test]
    fn an_active_call_holds_the_door_until_it_ends() {
        let d = door();
        d.add_holder();
        let call = d.begin_call().unwrap();
        d.drop_holder();
        assert_eq!(unrefs(), 0, "the call still runs");
        drop(call);
        assert_eq!(unrefs(), 1);
    }

    #[test]
    fn a_fast_call_holds_the_door_until_its_worker_leaves() {
        let d = door();
        let (a, b) = (runners().register(), runners().register());
        assert!(!d.enter(&a), "a door nobody holds takes no fast call");
        d.add_holder();
        assert!(d.enter(&a));
        assert!(d.enter(&b));
        d.drop_holder();
        assert_eq!(unrefs(), 0, "two calls still run");
        d.leave(&a);
        assert_eq!(unrefs(), 0, "one call still runs");
        d.leave(&b);
        assert_eq!(unrefs(), 1, "the last worker to leave queues it");
        d.leave(&b);
        assert_eq!(unrefs(), 1, "once");
    }

    #[test]
    fn a_door_held_again_during_a_fast_call_is_not_unreferenced() {
        let d = door();
        let a = runners().register();
        d.add_holder();
        assert!(d.enter(&a));
        d.drop_holder();
        d.add_holder();
        d.leave(&a);
        assert_eq!(unrefs(), 0, "held again before the call ended");
        d.drop_holder();
        assert_eq!(unrefs(), 1);
        d.revoke();
        assert!(!d.enter(&a), "a revoked door takes no fast call");
    }

    /// Workers on two threads enter and leave fast calls while a third
    /// thread makes the door held and unheld. Every fall to zero is decided
    /// exactly once, never while a call let in before it is in progress,
    /// and nothing is left pending.
    ///
    /// The holder waits for each fall's `unreferenced` before holding the
    /// door again: it may be decided on a worker's thread as that worker
    /// leaves, and a call let in by the next hold may rightly run beside
    /// it, which the overlap check could not tell from a violation. (Falls
    /// that overlap a new hold are the loom models' part: `state::model`.)
    ///
    /// Bounded by work done, not by time: a fixed number of rounds, and in
    /// every eighth the holder keeps the door held until a worker has
    /// entered a call on it, then lets go at once (while that call may
    /// still run). So calls meet releases however the machine shares its
    /// CPUs; waiting threads yield rather than spin away another's turn.
    #[test]
    fn unreferenced_never_overlaps_a_fast_call_under_threads() {
        use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64};
        static IN_CALL: AtomicU32 = AtomicU32::new(0);
        static OVERLAPS: AtomicU32 = AtomicU32::new(0);
        static FIRED: AtomicU32 = AtomicU32::new(0);
        static ENTERED: AtomicU32 = AtomicU32::new(0);
        static TRIED: AtomicU64 = AtomicU64::new(0);
        fn sink(_: Arc<DoorCore>) {
            if IN_CALL.load(SeqCst) != 0 {
                OVERLAPS.fetch_add(1, SeqCst);
            }
            FIRED.fetch_add(1, SeqCst);
        }
        crate::sys::fence::init();
        let h = |_: Request<'_>, _: &mut Reply| Ok(());
        let d = DoorCore::new(7, Box::new(h), sink, runners);
        let stop = Arc::new(AtomicBool::new(false));
        let workers: Vec<_> = (0..2)
            .map(|_| {
                let (d, stop) = (d.clone(), stop.clone());
                std::thread::spawn(move || {
                    let r = runners().register();
                    let mut turn = 0u32;
                    while !stop.load(Relaxed) {
                        TRIED.fetch_add(1, Relaxed);
                        if d.enter(&r) {
                            IN_CALL.fetch_add(1, SeqCst);
                            ENTERED.fetch_add(1, Relaxed);
                            std::hint::spin_loop();
                            IN_CALL.fetch_sub(1, SeqCst);
                            d.leave(&r);
                        }
                        turn += 1;
                        if turn.is_multiple_of(16) {
                            std::thread::yield_now();
                        }
                    }
                })
            })
            .collect();
        const ROUNDS: u32 = 4_000;
        // Attempts a held door may refuse before the test gives up on it
        // (a door that is held takes every fast call: it refuses none).
        const REFUSALS: u64 = 10_000_000;
        for round in 0..ROUNDS {
            d.add_holder();
            if round.is_multiple_of(8) {
                let (entered, tried) = (ENTERED.load(SeqCst), TRIED.load(SeqCst));
                while ENTERED.load(SeqCst) == entered {
                    assert!(
                        TRIED.load(Relaxed) - tried < REFUSALS,
                        "a held door refused {REFUSALS} fast calls"
                    );
                    std::thread::yield_now();
                }
            } else {
                for _ in 0..round % 8 {
                    std::hint::spin_loop();
                }
            }
            d.drop_holder();
            // This fall is decided here or by the worker whose call it
            // waited for, as that worker leaves.
            let mut polls = 0u64;
            while FIRED.load(SeqCst) == round {
                polls += 1;
                assert!(polls < REFUSALS, "round {round}: its fall was never decided");
                std::thread::yield_now();
            }
            assert_eq!(
                FIRED.load(SeqCst),
                round + 1,
                "round {round}: one unreferenced per fall"
            );
        }
        assert!(ENTERED.load(SeqCst) >= ROUNDS / 8, "calls met the releases");
        stop.store(true, SeqCst);
        workers.into_iter().for_each(|w| w.join().unwrap());
        assert_eq!(OVERLAPS.load(SeqCst), 0, "unreferenced ran during a call");
        assert!(!d.refs.pending(), "an unreferenced was left pending");
        assert_eq!(FIRED.load(SeqCst), ROUNDS, "one unreferenced per fall to zero");
    }

    #[test]
    fn revoke_fails_new_calls_and_unreferences_once_the_calls_end() {
        let d = door();
        d.add_holder();
        d.add_holder();
        let call = d.begin_call().unwrap();
        d.revoke();
        assert!(matches!(d.begin_call(), Err(CallError::Revoked)));
        assert_eq!(unrefs(), 0, "the active call holds it");
        drop(call);
        assert_eq!(unrefs(), 1);
        d.drop_holder();
        d.add_holder();
        d.drop_holder();
        d.revoke();
        assert_eq!(unrefs(), 1, "one unreferenced after a revoke, whatever follows");
        assert_eq!(d.holder_count(), 0);
    }
}
