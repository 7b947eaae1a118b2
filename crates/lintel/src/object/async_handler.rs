//! Doors served by async handlers ([`Door::create_async`]): a handler is
//! an `async fn` that runs as a task on the user's tokio runtime, and no
//! server thread waits while it awaits.
//!
//! A request for such a door is handed over by value ([`AsyncRequest`]:
//! its bytes, doors and buffers owned), so the task may outlive the server
//! thread's turn. The serving side (`server::deferred`) polls the handler's
//! future once on the server thread, inside the runtime: a handler that
//! does not await is answered as a blocking one is, on the spot; one that
//! awaits becomes a task of the runtime, which writes the reply into the
//! slot and publishes it when the future ends, and the server thread goes
//! back to its pool at once.
//!
//! Alerts reach the handler through [`AsyncRequest::alerted`] (a future)
//! and [`AsyncRequest::is_alerted`]; the call's deadline bounds the calls
//! its task makes (`deadline::in_task`) and is told by
//! [`crate::deadline::remaining`]. A panic in the future fails the call with
//! [`CallError::Panicked`], as a blocking handler's panic does.
//!
//! A co-located call awaited by a task ([`Door::call_async`]) runs the
//! future in the caller's own task. A blocking co-located call
//! ([`Door::call`]) from a thread outside any runtime blocks on it through
//! the door's runtime; from a thread of a runtime it fails with
//! [`CallError::WouldBlock`] instead of blocking that runtime.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use crate::context::caller::Caller;
use crate::context::deadline;
use crate::context::error::{CallError, Fault, WOULD_BLOCK};
pub use crate::context::task_alert::Alerted;
pub(crate) use crate::context::task_alert::CallAlert;
use crate::object::buffer::Buffer;
use crate::object::door::{Door, DoorCore, Handler, Reply, Request, check_sizes};

/// A handler's future, boxed.
pub type HandlerFuture = Pin<Box<dyn Future<Output = Result<Reply, Fault>> + Send + 'static>>;

/// What serves a door created with [`Door::create_async`]: an `async` closure
/// `|req: AsyncRequest| async move { … }` will do.
pub trait AsyncHandler: Send + Sync + 'static {
    /// Serve one call; the reply is the future's output.
    fn call(&self, req: AsyncRequest) -> HandlerFuture;

    /// Nobody else holds the door any more (as [`Handler::unreferenced`]).
    fn unreferenced(&self, _datum: u64) {}

    /// The object behind the door, for [`Door::served_by`] (as
    /// [`Handler::as_any`]).
    fn as_any(&self) -> Option<&(dyn std::any::Any + Send + Sync)> {
        None
    }
}

impl<F, Fut> AsyncHandler for F
where
    F: Fn(AsyncRequest) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Reply, Fault>> + Send + 'static,
{
    fn call(&self, req: AsyncRequest) -> HandlerFuture {
        Box::pin(self(req))
    }
}

/// One call to an async handler, owned by its task.
pub struct AsyncRequest {
    /// The door's datum.
    pub datum: u64,
    /// The argument bytes.
    pub data: Vec<u8>,
    /// Doors passed with the call.
    pub doors: Vec<Door>,
    /// Buffers passed with the call.
    pub buffers: Vec<Buffer>,
    /// The process that made the call (`None`: this one).
    pub caller: Option<Caller>,
    pub(crate) alert: Arc<CallAlert>,
    pub(crate) deadline: u64,
}

impl AsyncRequest {
    /// A request whose caller is this thread's (`context::caller`: the
    /// process a server thread serves, `None` for this one), made under
    /// deadline `deadline`, not alerted yet: whoever hands it over passes
    /// on alerts that came before (`deferred`, `shuttle::forward_to`).
    pub(crate) fn new(
        datum: u64,
        data: Vec<u8>,
        doors: Vec<Door>,
        buffers: Vec<Buffer>,
        deadline: u64,
    ) -> Self {
        AsyncRequest {
            datum,
            data,
            doors,
            buffers,
            caller: crate::context::caller::caller(),
            alert: CallAlert::new(false),
            deadline,
        }
    }

    /// Whether the caller was alerted (it cancelled the call, its deadline
    /// passed, or it died).
    pub fn is_alerted(&self) -> bool {
        self.alert.is_set()
    }

    /// A future that ends when the caller is alerted, to race against the
    /// handler's work (`tokio::select!`).
    pub fn alerted(&self) -> Alerted {
        Alerted(self.alert.clone())
    }

    /// Time left before the call's deadline, `None` if it has none.
    pub fn remaining(&self) -> Option<Duration> {
        deadline::left(self.deadline)
    }
}

/// A door's async handler and the runtime its tasks run on.
pub(crate) struct AsyncDoor {
    handler: Box<dyn AsyncHandler>,
    pub rt: tokio::runtime::Handle,
}

/// The future of one call: the handler's, under the call's deadline, with
/// a panic turned into [`CallError::Panicked`] and the result's size checked.
pub(crate) type CallFuture = Pin<Box<dyn Future<Output = Result<Reply, CallError>> + Send + 'static>>;

impl AsyncDoor {
    /// The future serving `req`.
    pub fn serve(&self, req: AsyncRequest) -> CallFuture {
        let at = req.deadline;
        let fut = self.handler.call(req);
        Box::pin(deadline::in_task(at, Caught(fut)))
    }

    pub fn unreferenced(&self, datum: u64) {
        self.handler.unreferenced(datum)
    }
}

/// A handler's future whose panic ends the call, not the task.
struct Caught(HandlerFuture);

impl Future for Caught {
    type Output = Result<Reply, CallError>;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let polled = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.0.as_mut().poll(cx)));
        match polled {
            Ok(Poll::Pending) => Poll::Pending,
            Ok(Poll::Ready(Ok(reply))) => {
                Poll::Ready(check_sizes("result", reply.data.len(), reply.doors.len()).map(|()| reply))
            }
            Ok(Poll::Ready(Err(fault))) => Poll::Ready(Err(fault.into())),
            Err(_) => Poll::Ready(Err(CallError::Panicked)),
        }
    }
}

/// Run `fut` on this thread until it ends, or until the deadline `at`
/// passes (`None`; 0: none). Its wakes unpark this thread; it runs in the
/// runtime's context, whose own threads drive its timers and IO.
fn block_until<F: Future>(fut: F, at: u64) -> Option<F::Output> {
    struct Unpark(std::thread::Thread);
    impl std::task::Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark()
        }
    }
    let waker = std::task::Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut fut = std::pin::pin!(fut);
    loop {
        if let Poll::Ready(v) = fut.as_mut().poll(&mut cx) {
            return Some(v);
        }
        match deadline::left(at) {
            None => std::thread::park(),
            Some(d) if d.is_zero() => return None,
            Some(d) => std::thread::park_timeout(d),
        }
    }
}

/// The blocking face of an async door: a co-located [`Door::call`].
struct Blocking(Arc<AsyncDoor>);

impl Handler for Blocking {
    fn invoke(&self, req: Request<'_>, reply: &mut Reply) -> Result<(), Fault> {
        if tokio::runtime::Handle::try_current().is_ok() {
            return Err(Fault(WOULD_BLOCK));
        }
        let req = AsyncRequest::new(
            req.datum,
            req.data.to_vec(),
            req.doors.into_vec(),
            req.buffers.into_vec(),
            deadline::current(),
        );
        // The calling thread's alerts (one already set too) reach the
        // handler while it runs.
        let _forward = crate::context::shuttle::forward_to(req.alert.clone());
        // A panic goes on up to the caller's `invoke`, which reports it.
        let at = req.deadline;
        let alert = req.alert.clone();
        let fut = deadline::in_task(at, self.0.handler.call(req));
        let _runtime = self.0.rt.enter();
        match block_until(fut, at) {
            Some(r) => *reply = r?,
            None => {
                // The deadline passed: the handler is alerted and its
                // future dropped, as when an awaited call's is.
                alert.alert();
                return Err(Fault(crate::context::error::relayed_timed_out()));
            }
        }
        Ok(())
    }

    fn unreferenced(&self, datum: u64) {
        self.0.unreferenced(datum)
    }

    fn as_any(&self) -> Option<&(dyn std::any::Any + Send + Sync)> {
        self.0.handler.as_any()
    }
}

impl Door {
    /// Create a door served by this domain with an async handler, whose
    /// calls run as tasks on the current tokio runtime (panics outside one,
    /// as `tokio::spawn` does; see [`Door::create_async_on`]).
    ///
    /// ```
    /// # let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    /// # rt.block_on(async {
    /// use lintel::{AsyncRequest, Door, Reply};
    /// let echo = Door::create_async(0, |req: AsyncRequest| async move {
    ///     tokio::task::yield_now().await; // no server thread waits here
    ///     Ok(Reply { data: req.data, ..Reply::default() })
    /// });
    /// assert_eq!(echo.call_async(b"hi", &[]).await.unwrap().data, b"hi");
    /// # });
    /// ```
    pub fn create_async(datum: u64, handler: impl AsyncHandler) -> Door {
        Door::create_async_on(tokio::runtime::Handle::current(), datum, handler)
    }

    /// [`Door::create_async`] on the runtime `rt`. Its calls run as tasks
    /// of `rt`: a multi-threaded runtime runs them on its own threads; a
    /// current-thread runtime only while some thread drives it (in its
    /// `block_on`), as for any task spawned on it.
    pub fn create_async_on(rt: tokio::runtime::Handle, datum: u64, handler: impl AsyncHandler) -> Door {
        let door = Arc::new(AsyncDoor {
            handler: Box::new(handler),
            rt,
        });
        Door::local(DoorCore::new_async(datum, Box::new(Blocking(door.clone())), door))
    }
}
