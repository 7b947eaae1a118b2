//! A door of the far side, served here: its handler hands each call to the
//! proxy's thread, which makes it on the link ([`forward`]).
//!
//! The call carries the time left before the caller's deadline. When the
//! caller is alerted (it cancelled, its deadline passed, or it died), the
//! handler lets go of the reply's channel; the forwarding task sees that,
//! drops its RPC promise, and the RPC system sends `Finish`, which cancels
//! the far side's call and alerts its server thread.

use std::rc::Rc;
use std::time::Duration;

use lintel::{AsyncHandler, AsyncRequest, CallError, Door, Fault, HandlerFuture, Reply};
use tokio::sync::mpsc::UnboundedSender;
use tokio::sync::oneshot;

use crate::crossing::Crossing;
use crate::exported::{buffer_bytes, read_buffers, read_doors, write_buffers};
use crate::lintel_capnp::{door, outcome};
use crate::outcome::{from_rpc, read_failure, undelivered};
use crate::proxy::Cmd;

/// A call for the far side, on its way to the proxy's thread.
pub(crate) struct Outbound {
    pub key: u64,
    pub data: Vec<u8>,
    pub doors: Vec<Door>,
    pub buffers: Vec<Vec<u8>>,
    pub timeout: Option<Duration>,
    pub reply: oneshot::Sender<Result<Reply, CallError>>,
}

/// The handler of an imported door. It lives as long as the door does
/// anywhere (handles here, holds of other domains); when it goes, the
/// proxy lets go of the capability. (`unreferenced` would not do: a door
/// only ever held in the proxy's own domain never hears it.)
pub(crate) struct Import {
    pub proxy: u64,
    key: u64,
    cmds: UnboundedSender<Cmd>,
}

impl Import {
    pub fn new(proxy: u64, key: u64, cmds: UnboundedSender<Cmd>) -> Import {
        Import { proxy, key, cmds }
    }
}

impl Drop for Import {
    fn drop(&mut self) {
        let _ = self.cmds.send(Cmd::Release(self.key));
    }
}

impl AsyncHandler for Import {
    fn call(&self, req: AsyncRequest) -> HandlerFuture {
        hand_over(req, &self.cmds, Cmd::Call)
    }

    fn as_any(&self) -> Option<&(dyn std::any::Any + Send + Sync)> {
        Some(self)
    }
}

/// Hand `req` to the proxy's thread as the command `make` builds of it,
/// and await its reply, or the caller's alert, which lets go of the
/// reply's channel (and so cancels the far call).
pub(crate) fn hand_over(
    req: AsyncRequest,
    cmds: &UnboundedSender<Cmd>,
    make: impl FnOnce(Outbound) -> Cmd,
) -> HandlerFuture {
    let alerted = req.alerted();
    let timeout = req.remaining();
    let (tx, rx) = oneshot::channel();
    let sent = buffer_bytes(&req.buffers).and_then(|buffers| {
        let call = Outbound {
            key: req.datum,
            data: req.data,
            doors: req.doors,
            buffers,
            timeout,
            reply: tx,
        };
        cmds.send(make(call)).map_err(|_| CallError::PeerDied)
    });
    Box::pin(async move {
        sent.map_err(|e| Fault::relay(&e))?;
        tokio::select! {
            r = rx => match r {
                Ok(r) => r.map_err(|e| Fault::relay(&e)),
                // The proxy's thread ended with the call.
                Err(_) => Err(Fault::relay(&CallError::PeerDied)),
            },
            () = alerted => Err(Fault::relay(&CallError::Cancelled)),
        }
    })
}

/// Make `call` on the link, on the proxy's thread, and answer it; give up
/// (cancelling it on the far side) if its caller lets go first.
pub(crate) async fn forward(crossing: Rc<Crossing>, cap: Option<door::Client>, mut call: Outbound) {
    let Some(cap) = cap else {
        // Released: only a caller that raced its own last drop gets here.
        let _ = call.reply.send(Err(CallError::Revoked));
        return;
    };
    if let Some(answer) = call_on(&crossing, &cap, &mut call).await {
        let _ = call.reply.send(answer.result);
    }
}

/// A call's answer from the far side.
pub(crate) struct Answer {
    pub result: Result<Reply, CallError>,
    /// It reached no server: the far door's server was gone before it.
    pub undelivered: bool,
}

/// Make `call` on `cap` (it keeps its bytes, doors and buffers, for a
/// call that reached no server to be made again); `None` if its caller
/// let go first, which cancels it on the far side.
pub(crate) async fn call_on(
    crossing: &Rc<Crossing>,
    cap: &door::Client,
    call: &mut Outbound,
) -> Option<Answer> {
    let bytes = match crossing.fits("arguments", &call.data, &call.buffers) {
        Ok(bytes) => bytes,
        Err(e) => {
            return Some(Answer {
                result: Err(e),
                undelivered: false,
            });
        }
    };
    // Sized for what it carries: one segment, allocated once.
    let words = (bytes + 8 * call.buffers.len()) / 8 + 16;
    let size = capnp::MessageSize {
        word_count: words as u64,
        cap_count: call.doors.len() as u32,
    };
    let mut req: capnp::capability::Request<door::call_params::Owned, door::call_results::Owned> =
        cap.client.new_call(door_type_id(), 0, Some(size));
    {
        let mut p = req.get();
        p.set_data(&call.data);
        let mut list = p.reborrow().init_doors(call.doors.len() as u32);
        for (i, d) in call.doors.iter().enumerate() {
            list.set(i as u32, crossing.to_cap(d.clone()).client.hook);
        }
        write_buffers(
            p.reborrow().init_buffers(call.buffers.len() as u32),
            call.buffers.iter().map(|b| &b[..]),
        );
        p.set_timeout_ns(call.timeout.map_or(0, |t| (t.as_nanos() as u64).max(1)));
    }
    let answer = req.send().promise;
    let result = tokio::select! {
        r = answer => r,
        () = call.reply.closed() => return None,
    };
    Some(match result {
        Err(e) => Answer {
            result: Err(from_rpc(&e)),
            undelivered: false,
        },
        Ok(resp) => read_outcome(crossing, &resp),
    })
}

/// The `Door` interface's id, which a call names.
fn door_type_id() -> u64 {
    <door::Client as capnp::traits::HasTypeId>::TYPE_ID
}

type Response = capnp::capability::Response<crate::lintel_capnp::door::call_results::Owned>;

fn read_outcome(crossing: &Rc<Crossing>, resp: &Response) -> Answer {
    let undelivered = resp
        .get()
        .and_then(|r| r.get_outcome())
        .is_ok_and(|o| matches!(o.which(), Ok(outcome::Failure(Ok(f))) if undelivered(f)));
    Answer {
        result: read_result(crossing, resp),
        undelivered,
    }
}

fn read_result(crossing: &Rc<Crossing>, resp: &Response) -> Result<Reply, CallError> {
    let bad = |_: capnp::Error| CallError::BadMessage("the far side sent a malformed reply");
    let outcome = resp.get().map_err(bad)?.get_outcome().map_err(bad)?;
    match outcome
        .which()
        .map_err(|_| CallError::BadMessage("the far side sent an unknown outcome"))?
    {
        outcome::Reply(r) => {
            let r = r.map_err(bad)?;
            Ok(Reply {
                data: r.get_data().map_err(bad)?.to_vec(),
                doors: read_doors(crossing, r.get_doors().map_err(bad)?).map_err(bad)?,
                buffers: read_buffers(r.get_buffers().map_err(bad)?).map_err(bad)?,
            })
        }
        outcome::Failure(f) => Err(read_failure(f.map_err(bad)?)),
    }
}
