//! Requests served by async handlers (`object::async_handler`): the
//! server thread polls the handler's future once, inside the door's
//! runtime; if it is done the thread replies as for any handler, else the
//! future becomes a task of that runtime, the thread lets go of the slot
//! and goes back to the pool, and the task writes and publishes the reply
//! when the future ends ([`finish`]).
//!
//! The call's alert is the task's from before the first poll: the slot's
//! `deferred` names it, and an alert for the slot reaches it as it reaches
//! a server thread (`SlotServer::alert_thread`). The call stays counted on
//! its door (`OwnedCall`) until the task has replied, so `unreferenced`
//! comes after it, as after a blocking handler's.

use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use crate::context::error::CallError;
use crate::object::async_handler::{AsyncDoor, AsyncRequest, CallAlert};
use crate::object::door::{OwnedCall, Reply};

use crate::context::shuttle::Shuttle;

use super::Work;
use super::reply::{Failure, publish_with_doors, write_reply};

/// How a request that passed its checks was served.
pub(super) enum Served {
    /// The handler ran: its reply is in the worker's buffers.
    Now,
    /// An async handler's task replies when it ends.
    Later,
}

/// Serve `req` (call `seq` on `w`'s slot) with `asynk`; a reply made on
/// the spot goes to `out`. `shuttle` is the server thread's.
#[allow(clippy::too_many_arguments)]
pub(super) fn dispatch(
    asynk: &AsyncDoor,
    w: &Work,
    seq: u32,
    call: OwnedCall,
    req: AsyncRequest,
    vanilla: bool,
    shuttle: &Shuttle,
    out: &mut Reply,
) -> Result<Served, Failure> {
    let ss = &w.area.slots[w.slot as usize];
    let alert = req.alert.clone();
    // Named before the first poll: an alert from now on reaches it (and one
    // that reached this thread's shuttle before is passed on just after).
    *ss.deferred.lock() = Some(alert.clone());
    if shuttle.is_alerted() {
        alert.alert();
    }
    let mut fut = asynk.serve(req);
    let polled = {
        let _rt = asynk.rt.enter();
        fut.as_mut().poll(&mut Context::from_waker(Waker::noop()))
    };
    let done = match polled {
        Poll::Ready(r) => r,
        Poll::Pending => {
            let w = w.clone();
            asynk.rt.spawn(async move {
                let r = fut.await;
                drop(call); // the call ends before its reply is seen
                finish(&w, seq, &alert, r, vanilla);
            });
            return Ok(Served::Later);
        }
    };
    ss.deferred.lock().take();
    drop(call);
    match done {
        Ok(reply) => {
            *out = reply;
            Ok(Served::Now)
        }
        Err(e) => Err(Failure::taken(e)),
    }
}

/// The task of call `seq` on `w`'s slot ended with `r`: write the reply and
/// publish it.
fn finish(w: &Work, seq: u32, alert: &Arc<CallAlert>, r: Result<Reply, CallError>, vanilla: bool) {
    let ss = &w.area.slots[w.slot as usize];
    {
        let mut deferred = ss.deferred.lock();
        if deferred.as_ref().is_some_and(|a| Arc::ptr_eq(a, alert)) {
            *deferred = None;
        }
    }
    let slot = w.area.slot(w.slot);
    let (mut reply, result) = match r {
        Ok(reply) => (reply, Ok(())),
        Err(e) => (Reply::new(), Err(Failure::taken(e))),
    };
    if write_reply(w, &slot, seq, &mut reply, result, vanilla) {
        publish_with_doors(w, &slot, seq, &mut reply);
    }
}
