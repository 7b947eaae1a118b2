//! Doors of this side, served to the far side: [`DoorServer`] makes each
//! call it receives on its lintel door, as an awaited call under the time
//! the caller had left; [`LinkServer`] is what a link offers first (the
//! exported names, and a ping for the keepalive).
//!
//! A call the far side cancels (`Finish`), or that was in flight when the
//! link was lost, is dropped by the RPC system: dropping the awaited call
//! cancels it here, and the server thread running it is alerted.

use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use capnp::capability::Rc as CapRc;
use lintel::{Buffer, CallError, Door, FarHold, Reply, Sealed};

use crate::crossing::Crossing;
use crate::lintel_capnp::{door, link, outcome};
use crate::outcome::{write_failure, write_gone};

/// A lintel door served on links. A door of this domain is held for the
/// far side as another domain's hold would be, so that its server hears
/// `unreferenced` when the far side lets go.
pub(crate) struct DoorServer {
    pub door: Door,
    _hold: Option<FarHold>,
    crossing: Rc<Crossing>,
}

impl DoorServer {
    pub fn new(door: Door, crossing: Rc<Crossing>) -> DoorServer {
        DoorServer {
            _hold: door.hold_for_far_holder(),
            door,
            crossing,
        }
    }
}

impl door::Server for DoorServer {
    async fn call(
        self: CapRc<Self>,
        params: door::CallParams,
        mut results: door::CallResults,
    ) -> Result<(), capnp::Error> {
        if self.door.is_dead() {
            // Known dead before the call: it reaches no server, and says so.
            write_gone(results.get().init_outcome().init_failure());
            return Ok(());
        }
        let p = params.get()?;
        let data = p.get_data()?;
        let doors = read_doors(&self.crossing, p.get_doors()?)?;
        let buffers = read_buffers(p.get_buffers()?)?;
        let door = match p.get_timeout_ns() {
            0 => self.door.clone(),
            ns => self.door.with_timeout(Duration::from_nanos(ns)),
        };
        let r = if door.is_local_blocking() {
            call_blocking(door, data.to_vec(), doors, buffers).await
        } else {
            let r = door.call_with_async(data, &doors, buffers).await;
            drop(doors);
            r
        };
        write_outcome(&self.crossing, r, results.get().init_outcome());
        Ok(())
    }
}

/// A call on a door this domain serves with a blocking handler, which
/// would run on (and block) the proxy's thread: made on a thread of its
/// own instead (a thread per call: such exports are the exception, a
/// proxy's doors are mostly other domains'). Dropped (the far caller
/// cancelled or went away), it cancels the call, whose handler sees the
/// alert.
async fn call_blocking(
    door: Door,
    data: Vec<u8>,
    doors: Vec<Door>,
    buffers: Vec<Buffer>,
) -> Result<Reply, CallError> {
    let (started, shuttle) = tokio::sync::oneshot::channel();
    let (done, result) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("lintel-net-call".into())
        .spawn(move || {
            let _ = started.send(lintel::shuttle::current());
            let mut reply = Reply::new();
            let _ = done.send(door.call_with(&data, &doors, buffers, &mut reply).map(|()| reply));
        })
        .map_err(|e| CallError::Local(format!("a thread for the call: {e}")))?;
    let shuttle = shuttle.await.map_err(|_| CallError::Panicked)?;
    // The thread is fresh and ends with the call: a cancel after the call
    // ended reaches nothing.
    struct CancelOnDrop(Option<lintel::shuttle::ShuttleHandle>);
    impl Drop for CancelOnDrop {
        fn drop(&mut self) {
            if let Some(s) = self.0.take() {
                s.cancel();
            }
        }
    }
    let mut guard = CancelOnDrop(Some(shuttle));
    let r = result.await.unwrap_or(Err(CallError::Panicked));
    guard.0 = None;
    r
}

/// The capabilities in `list`, as doors.
pub(crate) fn read_doors(
    crossing: &Crossing,
    list: capnp::capability_list::Reader<'_, door::Client>,
) -> capnp::Result<Vec<Door>> {
    if list.len() as usize > lintel::abi::MAX_DOORS {
        return Err(capnp::Error::failed("more doors than a call may carry".into()));
    }
    list.iter().map(|c| Ok(crossing.to_door(c?))).collect()
}

/// Bulk data received as bytes, as sealed snapshots of this side.
pub(crate) fn read_buffers(list: capnp::data_list::Reader<'_>) -> capnp::Result<Vec<Buffer>> {
    list.iter()
        .map(|b| {
            Sealed::from_slice(b?)
                .map(Buffer::Sealed)
                .map_err(|e| capnp::Error::failed(format!("sealing a buffer: {e}")))
        })
        .collect()
}

/// Bulk data as the bytes that cross a link (a descriptor cannot).
pub(crate) fn buffer_bytes(buffers: &[Buffer]) -> Result<Vec<Vec<u8>>, CallError> {
    buffers
        .iter()
        .map(|b| match b {
            Buffer::Sealed(s) => Ok(s.as_slice().to_vec()),
            Buffer::Loan(l) => Ok(l.as_slice().to_vec()),
            Buffer::Loaned(l) => Ok(l.to_vec()),
            Buffer::Fd(_) => Err(CallError::Unpassable("a file descriptor cannot cross a link")),
        })
        .collect()
}

pub(crate) fn write_buffers<'a>(
    mut list: capnp::data_list::Builder<'_>,
    buffers: impl Iterator<Item = &'a [u8]>,
) {
    for (i, b) in buffers.enumerate() {
        list.set(i as u32, b);
    }
}

fn write_outcome(crossing: &Rc<Crossing>, r: Result<Reply, CallError>, out: outcome::Builder<'_>) {
    let reply = match r {
        Ok(reply) => reply,
        Err(e) => return write_failure(&e, out.init_failure()),
    };
    let bytes = match buffer_bytes(&reply.buffers) {
        Ok(b) => b,
        Err(e) => return write_failure(&e, out.init_failure()),
    };
    if let Err(e) = crossing.fits("result", &reply.data, &bytes) {
        return write_failure(&e, out.init_failure());
    }
    let mut r = out.init_reply();
    r.set_data(&reply.data);
    let mut list = r.reborrow().init_doors(reply.doors.len() as u32);
    for (i, d) in reply.doors.into_iter().enumerate() {
        list.set(i as u32, crossing.to_cap(d).client.hook);
    }
    write_buffers(r.init_buffers(bytes.len() as u32), bytes.iter().map(|b| &b[..]));
}

/// The doors a link exports, by name. Looked up when the far side asks, on
/// a thread that may block (a name service's lookup may wait).
pub trait Exports: Send + Sync + 'static {
    /// The door exported as `name`, if any.
    fn lookup(&self, name: &str) -> Option<Door>;
    /// Every name exported.
    fn names(&self) -> Vec<String>;
}

impl Exports for std::collections::BTreeMap<String, Door> {
    fn lookup(&self, name: &str) -> Option<Door> {
        self.get(name).cloned()
    }
    fn names(&self) -> Vec<String> {
        self.keys().cloned().collect()
    }
}

impl Exports for std::collections::HashMap<String, Door> {
    fn lookup(&self, name: &str) -> Option<Door> {
        self.get(name).cloned()
    }
    fn names(&self) -> Vec<String> {
        self.keys().cloned().collect()
    }
}

/// What one end of a link offers the other first.
pub(crate) struct LinkServer {
    pub exports: Arc<dyn Exports>,
    pub crossing: Rc<Crossing>,
}

impl link::Server for LinkServer {
    async fn lookup(
        self: CapRc<Self>,
        params: link::LookupParams,
        mut results: link::LookupResults,
    ) -> capnp::Result<()> {
        let name = params.get()?.get_name()?.to_str()?.to_owned();
        // A lookup may wait (a name service, a service restarting): off
        // the proxy's thread.
        let exports = self.exports.clone();
        let asked = name.clone();
        let found = tokio::task::spawn_blocking(move || exports.lookup(&asked))
            .await
            .map_err(|e| capnp::Error::failed(format!("looking up {name:?}: {e}")))?;
        let Some(door) = found else {
            return Err(capnp::Error::failed(format!("no door is exported as {name:?}")));
        };
        results.get().set_door(self.crossing.to_cap(door));
        Ok(())
    }

    async fn names(
        self: CapRc<Self>,
        _: link::NamesParams,
        mut results: link::NamesResults,
    ) -> capnp::Result<()> {
        let names = self.exports.names();
        let mut list = results.get().init_names(names.len() as u32);
        for (i, n) in names.iter().enumerate() {
            list.set(i as u32, n);
        }
        Ok(())
    }

    async fn ping(self: CapRc<Self>, _: link::PingParams, _: link::PingResults) -> capnp::Result<()> {
        Ok(())
    }
}
