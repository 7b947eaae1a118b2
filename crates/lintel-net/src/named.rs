//! Links by name that outlive their connections, and doors by name across
//! them: what a system's manifest places ([`crate::Proxy::link`],
//! [`crate::Proxy::import`]).
//!
//! A named link is kept up: the connecting end connects again after a
//! loss (backoff from 50 ms to 1 s); the listening end takes the newest
//! connection accepted. Its *generation* counts the connections.
//!
//! An import by name is a door of this domain that stands for whatever the
//! far side exports under the name *now*: its first call looks the name
//! up; the capability found serves later calls while the connection lasts
//! and the far server lives. A call that fails with `PeerDied` (the far
//! domain died, or the link) fails as it must — it is never retried, it
//! may have had effects — and the next call looks the name up again, on
//! the connection then current: a far service restarted, or a link
//! restored, is found again without the caller doing anything. A call
//! that reached no server at all (the far side knew its door's server was
//! gone before the call came: `gone`) is made once more on the name looked
//! up again, as nothing ran. A call made while the link is down waits for
//! it, up to 5 s or the call's deadline, whichever is first, then fails
//! with `PeerDied`.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use capnp_rpc::rpc_twoparty_capnp::Side;
use lintel::{AsyncHandler, AsyncRequest, CallError, HandlerFuture};
use tokio::sync::{Notify, mpsc::UnboundedSender, oneshot};
use tokio::time::Instant;

use crate::crossing::Crossing;
use crate::error::NetError;
use crate::exported::Exports;
use crate::imported::{Outbound, call_on, hand_over};
use crate::link::{Link, LinkOptions, accept_links, establish};
use crate::lintel_capnp::door;
use crate::proxy::Cmd;

/// Where a named link's connections come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Endpoint {
    /// Accept connections at this address (port 0: any).
    Listen(SocketAddr),
    /// Connect to this address, and again whenever the connection is lost.
    Connect(SocketAddr),
}

/// How long a call waits for a named link that is down: longer than the
/// connecting end's longest backoff, so that a far proxy restarted is
/// found by the call after its restart.
const LINK_WAIT: Duration = Duration::from_secs(5);
const FIRST_BACKOFF: Duration = Duration::from_millis(50);
const MAX_BACKOFF: Duration = Duration::from_secs(1);

/// One named link, on the proxy's thread.
pub(crate) struct NamedLink {
    name: String,
    current: RefCell<Option<(u64, Rc<Link>)>>,
    generation: Cell<u64>,
    up: Notify,
    /// Capabilities found by name, with the generation they were found in.
    found: RefCell<HashMap<String, (u64, door::Client)>>,
    stopped: Cell<bool>,
}

impl NamedLink {
    pub fn new(name: &str) -> Rc<NamedLink> {
        Rc::new(NamedLink {
            name: name.to_owned(),
            current: RefCell::new(None),
            generation: Cell::new(0),
            up: Notify::new(),
            found: RefCell::new(HashMap::new()),
            stopped: Cell::new(false),
        })
    }

    /// Make `conn` the current connection until it ends.
    async fn serve(&self, conn: Link) {
        let conn = Rc::new(conn);
        let generation = self.generation.get() + 1;
        self.generation.set(generation);
        *self.current.borrow_mut() = Some((generation, conn.clone()));
        self.found.borrow_mut().clear();
        tracing::info!(link = %self.name, generation, "link up");
        self.up.notify_waiters();
        conn.ended.wait().await;
        let mut current = self.current.borrow_mut();
        // A newer connection (a listening end's) may have taken over.
        if current.as_ref().is_some_and(|(g, _)| *g == generation) {
            *current = None;
            tracing::info!(link = %self.name, generation, "link down");
        }
    }

    /// The live connection now, with its generation.
    fn live(&self) -> Option<(u64, Rc<Link>)> {
        self.current.borrow().clone().filter(|(_, l)| !l.ended.is_done())
    }

    pub fn is_up(&self) -> bool {
        self.live().is_some()
    }

    /// Stop: no more connections, and the current one is cut.
    pub fn stop(&self) {
        self.stopped.set(true);
        if let Some((_, l)) = self.current.borrow_mut().take() {
            l.cut();
        }
        self.up.notify_waiters();
    }

    /// The capability exported as `service` on the live connection,
    /// waiting for one until `give_up`; `Err(None)` if the caller let go.
    async fn resolve(
        &self,
        service: &str,
        give_up: Instant,
        reply: &mut oneshot::Sender<Result<lintel::Reply, CallError>>,
    ) -> Result<door::Client, Option<CallError>> {
        loop {
            let Some((generation, link)) = self.live() else {
                if self.stopped.get() {
                    return Err(Some(CallError::PeerDied));
                }
                tokio::select! {
                    () = self.up.notified() => continue,
                    () = reply.closed() => return Err(None),
                    () = tokio::time::sleep_until(give_up) => return Err(Some(CallError::PeerDied)),
                }
            };
            if let Some((g, cap)) = self.found.borrow().get(service)
                && *g == generation
            {
                return Ok(cap.clone());
            }
            let mut req = link.far.lookup_request();
            req.get().set_name(service);
            let found = tokio::select! {
                r = req.send().promise => r.and_then(|resp| resp.get()?.get_door()),
                () = reply.closed() => return Err(None),
                () = tokio::time::sleep_until(give_up) => return Err(Some(CallError::PeerDied)),
            };
            match found {
                Ok(cap) => {
                    self.found
                        .borrow_mut()
                        .insert(service.to_owned(), (generation, cap.clone()));
                    return Ok(cap);
                }
                // The connection went as we asked: wait for the next.
                Err(e) if e.kind == capnp::ErrorKind::Disconnected => link.cut(),
                Err(e) => {
                    tracing::warn!(link = %self.name, service, "lookup failed: {e}");
                    return Err(Some(CallError::BadDoor));
                }
            }
        }
    }

    /// `service`'s capability failed with the far side's death: look it up
    /// again next time.
    fn forget(&self, service: &str) {
        self.found.borrow_mut().remove(service);
    }
}

/// A call on an import by name, on the proxy's thread. A call that
/// reached no server (the far instance was gone before it came) is made
/// once more, on the name looked up again: nothing ran, nothing repeats.
pub(crate) async fn call_named(
    crossing: Rc<Crossing>,
    link: Rc<NamedLink>,
    service: String,
    mut call: Outbound,
) {
    let wait = call.timeout.map_or(LINK_WAIT, |t| t.min(LINK_WAIT));
    let give_up = Instant::now() + wait;
    for attempt in 0..2 {
        let cap = match link.resolve(&service, give_up, &mut call.reply).await {
            Ok(cap) => cap,
            Err(Some(e)) => {
                let _ = call.reply.send(Err(e));
                return;
            }
            Err(None) => return,
        };
        let Some(answer) = call_on(&crossing, &cap, &mut call).await else {
            return;
        };
        if answer.result.as_ref().is_err_and(|e| *e == CallError::PeerDied) {
            link.forget(&service);
            if answer.undelivered && attempt == 0 {
                continue;
            }
        }
        let _ = call.reply.send(answer.result);
        return;
    }
}

/// Keep named link `link` up by connecting to `addr`, again after each loss.
pub(crate) async fn keep_connected(
    crossing: Rc<Crossing>,
    link: Rc<NamedLink>,
    addr: SocketAddr,
    opts: LinkOptions,
    exports: Arc<dyn Exports>,
) {
    let mut backoff = FIRST_BACKOFF;
    while !link.stopped.get() {
        let made = async {
            let tcp = tokio::net::TcpStream::connect(addr)
                .await
                .map_err(NetError::io(format!("connect to {addr}")))?;
            establish(tcp, Side::Client, &opts, exports.clone(), crossing.clone()).await
        };
        match made.await {
            Ok(conn) => {
                backoff = FIRST_BACKOFF;
                link.serve(conn).await;
            }
            Err(e) => tracing::debug!(link = %link.name, "connecting: {e}"),
        }
        if link.stopped.get() {
            break;
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

/// Keep named link `link` served by the connections accepted on `listener`,
/// the newest one current.
pub(crate) async fn keep_accepting(
    crossing: Rc<Crossing>,
    link: Rc<NamedLink>,
    listener: tokio::net::TcpListener,
    opts: LinkOptions,
    exports: Arc<dyn Exports>,
) {
    let serving = link.clone();
    let on_link = move |conn: Link| {
        let link = serving.clone();
        async move { link.serve(conn).await }
    };
    accept_links(listener, opts, exports, crossing, std::future::pending(), on_link).await
}

/// The handler of an import by name.
pub(crate) struct NamedImport {
    pub link: String,
    pub service: String,
    pub cmds: UnboundedSender<Cmd>,
}

impl AsyncHandler for NamedImport {
    fn call(&self, req: AsyncRequest) -> HandlerFuture {
        let (link, service) = (self.link.clone(), self.service.clone());
        hand_over(req, &self.cmds, |call| Cmd::CallNamed { link, service, call })
    }
}
