//! The proxy: a thread of its own running every link of this process on a
//! current-thread runtime (Cap'n Proto RPC is single-threaded), driven by
//! commands from the handles ([`Proxy`], [`Remote`], [`Listener`]) and from
//! the imported doors' handlers.
//!
//! Calls from many threads and tasks meet on this one thread, in order:
//! what it does per call is a table lookup and the RPC system's encoding;
//! the lintel calls on either side are awaited, never blocking it.

use std::cell::RefCell;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use capnp_rpc::rpc_twoparty_capnp::Side;
use lintel::{CallError, Door};
use tokio::sync::{mpsc, oneshot};

use crate::crossing::Crossing;
use crate::error::NetError;
use crate::exported::Exports;
use crate::imported::{Outbound, forward};
use crate::link::{Link, LinkOptions, accept_links, establish};
use crate::named::{Endpoint, NamedImport, NamedLink, call_named, keep_accepting, keep_connected};

/// What the proxy's thread is asked to do.
pub(crate) enum Cmd {
    Call(Outbound),
    Release(u64),
    Connect {
        addr: SocketAddr,
        opts: LinkOptions,
        exports: Arc<dyn Exports>,
        reply: oneshot::Sender<Result<(u64, SocketAddr), NetError>>,
    },
    Listen {
        addr: SocketAddr,
        opts: LinkOptions,
        exports: Arc<dyn Exports>,
        reply: oneshot::Sender<Result<SocketAddr, NetError>>,
        accepted: mpsc::UnboundedSender<(u64, SocketAddr)>,
    },
    Lookup {
        link: u64,
        name: String,
        reply: oneshot::Sender<Result<Door, NetError>>,
    },
    Names {
        link: u64,
        reply: oneshot::Sender<Result<Vec<String>, NetError>>,
    },
    Cut(u64),
    ImportsHeld(oneshot::Sender<usize>),
    Link {
        name: String,
        endpoint: Endpoint,
        opts: LinkOptions,
        exports: Arc<dyn Exports>,
        reply: oneshot::Sender<Result<Option<SocketAddr>, NetError>>,
    },
    CallNamed {
        link: String,
        service: String,
        call: Outbound,
    },
    LinkUp {
        name: String,
        reply: oneshot::Sender<Option<bool>>,
    },
    Stop,
}

static PROXIES: AtomicU64 = AtomicU64::new(1);

/// A process's proxy: links to other machines' proxies, each exporting
/// chosen doors and importing the far side's.
///
/// ```no_run
/// use std::collections::BTreeMap;
/// use lintel_net::{LinkOptions, Proxy};
/// let proxy = Proxy::start().unwrap();
/// // On one host: export a door as "echo".
/// let echo = lintel::Door::create(0, |r: lintel::Request<'_>, out: &mut lintel::Reply| {
///     out.data.extend_from_slice(r.data);
///     Ok(())
/// });
/// let exports = BTreeMap::from([("echo".to_string(), echo)]);
/// let mut listener = proxy.listen("127.0.0.1:0".parse().unwrap(), LinkOptions::plain(), exports).unwrap();
/// // On another: connect, and call it as any door.
/// let far = Proxy::start().unwrap();
/// let link = far.connect(listener.addr(), LinkOptions::plain(), BTreeMap::new()).unwrap();
/// let door = link.lookup("echo").unwrap();
/// assert_eq!(door.call_bytes(b"hi").unwrap(), b"hi");
/// ```
pub struct Proxy {
    cmds: mpsc::UnboundedSender<Cmd>,
    rt: tokio::runtime::Handle,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Proxy {
    /// Start the proxy's thread.
    pub fn start() -> Result<Proxy, NetError> {
        let (cmds, rx) = mpsc::unbounded_channel();
        let id = PROXIES.fetch_add(1, Ordering::Relaxed);
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(NetError::io("the proxy's runtime"))?;
        let own = cmds.clone();
        let handle = rt.handle().clone();
        let thread = std::thread::Builder::new()
            .name("lintel-net".into())
            .spawn(move || {
                let local = tokio::task::LocalSet::new();
                let crossing = Crossing::new(id, own, rt.handle().clone());
                local.block_on(&rt, run(rx, crossing));
            })
            .map_err(NetError::io("the proxy's thread"))?;
        Ok(Proxy {
            cmds,
            rt: handle,
            thread: Some(thread),
        })
    }

    fn ask<T>(&self, cmd: impl FnOnce(oneshot::Sender<T>) -> Cmd) -> Result<T, NetError> {
        ask(&self.cmds, cmd)
    }

    /// Connect to the proxy listening at `addr`; the link exports `exports`.
    pub fn connect(
        &self,
        addr: SocketAddr,
        opts: LinkOptions,
        exports: impl Exports,
    ) -> Result<Remote, NetError> {
        let exports: Arc<dyn Exports> = Arc::new(exports);
        let (link, peer) = self.ask(|reply| Cmd::Connect {
            addr,
            opts,
            exports,
            reply,
        })??;
        Ok(Remote {
            link,
            peer,
            cmds: self.cmds.clone(),
        })
    }

    /// Listen at `addr` (port 0: any); each link accepted exports `exports`.
    pub fn listen(
        &self,
        addr: SocketAddr,
        opts: LinkOptions,
        exports: impl Exports,
    ) -> Result<Listener, NetError> {
        let exports: Arc<dyn Exports> = Arc::new(exports);
        let (accepted, rx) = mpsc::unbounded_channel();
        let addr = self.ask(|reply| Cmd::Listen {
            addr,
            opts,
            exports,
            reply,
            accepted,
        })??;
        Ok(Listener {
            addr,
            rx,
            cmds: self.cmds.clone(),
        })
    }

    /// Run link `name`, kept up for as long as the proxy runs: connecting
    /// (again after each loss), or accepting (the newest connection
    /// current); see [`Proxy::import`]. Returns where a listening link
    /// listens.
    pub fn link(
        &self,
        name: &str,
        endpoint: Endpoint,
        opts: LinkOptions,
        exports: impl Exports,
    ) -> Result<Option<SocketAddr>, NetError> {
        let exports: Arc<dyn Exports> = Arc::new(exports);
        self.ask(|reply| Cmd::Link {
            name: name.to_owned(),
            endpoint,
            opts,
            exports,
            reply,
        })?
    }

    /// A door for what link `link`'s far side exports as `service`, by
    /// name: it follows the far side across restarts and reconnections
    /// (see the `named` module's rules: a failed call is never retried,
    /// the next call finds the new instance). Start the link first
    /// ([`Proxy::link`]): a call on an import of a link that does not run
    /// fails with `BadDoor`.
    pub fn import(&self, link: &str, service: &str) -> Door {
        let handler = NamedImport {
            link: link.to_owned(),
            service: service.to_owned(),
            cmds: self.cmds.clone(),
        };
        Door::create_async_on(self.rt.clone(), 0, handler)
    }

    /// Whether link `name` is up now; `None` if there is no such link.
    pub fn link_up(&self, name: &str) -> Result<Option<bool>, NetError> {
        self.ask(|reply| Cmd::LinkUp {
            name: name.to_owned(),
            reply,
        })
    }

    /// How many doors of far sides this proxy holds for holders here.
    pub fn imports_held(&self) -> Result<usize, NetError> {
        self.ask(Cmd::ImportsHeld)
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.cmds.send(Cmd::Stop);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn ask<T>(
    cmds: &mpsc::UnboundedSender<Cmd>,
    cmd: impl FnOnce(oneshot::Sender<T>) -> Cmd,
) -> Result<T, NetError> {
    let (tx, rx) = oneshot::channel();
    cmds.send(cmd(tx)).map_err(|_| NetError::Stopped)?;
    rx.blocking_recv().map_err(|_| NetError::Stopped)
}

/// One link, seen from this side: the far side's exports, by name.
#[derive(Clone)]
pub struct Remote {
    link: u64,
    peer: SocketAddr,
    cmds: mpsc::UnboundedSender<Cmd>,
}

impl Remote {
    /// The door the far side exports as `name`, as a door served here by
    /// the proxy: call it, pass it on, drop it as any other.
    pub fn lookup(&self, name: &str) -> Result<Door, NetError> {
        ask(&self.cmds, |reply| Cmd::Lookup {
            link: self.link,
            name: name.to_owned(),
            reply,
        })?
    }

    /// The names the far side exports.
    pub fn names(&self) -> Result<Vec<String>, NetError> {
        ask(&self.cmds, |reply| Cmd::Names {
            link: self.link,
            reply,
        })?
    }

    /// The far side's address.
    pub fn peer(&self) -> SocketAddr {
        self.peer
    }

    /// Close the link: calls on its imports fail with `PeerDied`.
    pub fn close(&self) {
        let _ = self.cmds.send(Cmd::Cut(self.link));
    }
}

/// Links accepted by a listening proxy.
pub struct Listener {
    addr: SocketAddr,
    rx: mpsc::UnboundedReceiver<(u64, SocketAddr)>,
    cmds: mpsc::UnboundedSender<Cmd>,
}

impl Listener {
    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The next link accepted (blocks; not from an async task).
    pub fn accept(&mut self) -> Result<Remote, NetError> {
        let (link, peer) = self.rx.blocking_recv().ok_or(NetError::Stopped)?;
        Ok(Remote {
            link,
            peer,
            cmds: self.cmds.clone(),
        })
    }
}

/// The proxy's thread: commands in, tasks out.
async fn run(mut rx: mpsc::UnboundedReceiver<Cmd>, crossing: Rc<Crossing>) {
    let links: Rc<RefCell<HashMap<u64, Link>>> = Rc::default();
    let mut named: HashMap<String, Rc<NamedLink>> = HashMap::new();
    let mut next_link = 1u64;
    while let Some(cmd) = rx.recv().await {
        match cmd {
            Cmd::Call(call) => {
                // Looked up now, in order with releases.
                let cap = crossing.import(call.key);
                tokio::task::spawn_local(forward(crossing.clone(), cap, call));
            }
            Cmd::Release(key) => crossing.release(key),
            Cmd::Connect {
                addr,
                opts,
                exports,
                reply,
            } => {
                let id = next_link;
                next_link += 1;
                let (links, crossing) = (links.clone(), crossing.clone());
                tokio::task::spawn_local(async move {
                    let made = async {
                        let tcp = tokio::net::TcpStream::connect(addr)
                            .await
                            .map_err(NetError::io(format!("connect to {addr}")))?;
                        establish(tcp, Side::Client, &opts, exports, crossing).await
                    };
                    let r = made.await.map(|link| {
                        let peer = link.peer;
                        links.borrow_mut().insert(id, link);
                        (id, peer)
                    });
                    let _ = reply.send(r);
                });
            }
            Cmd::Listen {
                addr,
                opts,
                exports,
                reply,
                accepted,
            } => {
                let listener = match tokio::net::TcpListener::bind(addr).await {
                    Ok(l) => l,
                    Err(e) => {
                        let _ = reply.send(Err(NetError::io(format!("listen at {addr}"))(e)));
                        continue;
                    }
                };
                let _ = reply.send(listener.local_addr().map_err(NetError::io("listening address")));
                let first = next_link;
                // Links accepted take numbers from far above those made.
                next_link += 1 << 32;
                let (links, next) = (links.clone(), Rc::new(std::cell::Cell::new(first << 32)));
                let done = accepted.clone();
                tokio::task::spawn_local(accept_links(
                    listener,
                    opts,
                    exports,
                    crossing.clone(),
                    async move { done.closed().await },
                    move |link: Link| {
                        let id = next.get();
                        next.set(id + 1);
                        let peer = link.peer;
                        links.borrow_mut().insert(id, link);
                        let _ = accepted.send((id, peer));
                        std::future::ready(())
                    },
                ));
            }
            Cmd::Lookup { link, name, reply } => {
                let far = links.borrow().get(&link).map(|l| l.far.clone());
                let crossing = crossing.clone();
                tokio::task::spawn_local(async move {
                    let r = async {
                        let far = far.ok_or_else(|| NetError::LinkDown("no such link".into()))?;
                        let mut req = far.lookup_request();
                        req.get().set_name(&name);
                        let resp = req.send().promise.await.map_err(|e| lookup_error(&name, &e))?;
                        let cap = resp
                            .get()
                            .and_then(|r| r.get_door())
                            .map_err(|e| lookup_error(&name, &e))?;
                        Ok(crossing.to_door(cap))
                    };
                    let _ = reply.send(r.await);
                });
            }
            Cmd::Names { link, reply } => {
                let far = links.borrow().get(&link).map(|l| l.far.clone());
                tokio::task::spawn_local(async move {
                    let r = async {
                        let far = far.ok_or_else(|| NetError::LinkDown("no such link".into()))?;
                        let resp = far
                            .names_request()
                            .send()
                            .promise
                            .await
                            .map_err(|e| NetError::LinkDown(e.to_string()))?;
                        let list = resp
                            .get()
                            .and_then(|r| r.get_names())
                            .map_err(|e| NetError::LinkDown(e.to_string()))?;
                        Ok(list
                            .iter()
                            .filter_map(|n| n.ok().and_then(|n| n.to_string().ok()))
                            .collect())
                    };
                    let _ = reply.send(r.await);
                });
            }
            Cmd::Cut(link) => {
                if let Some(l) = links.borrow_mut().remove(&link) {
                    l.cut();
                }
            }
            Cmd::ImportsHeld(reply) => {
                let _ = reply.send(crossing.imports_held());
            }
            Cmd::Link {
                name,
                endpoint,
                opts,
                exports,
                reply,
            } => {
                if named.contains_key(&name) {
                    let _ = reply.send(Err(NetError::LinkDown(format!("link {name} runs already"))));
                    continue;
                }
                let link = NamedLink::new(&name);
                let r = match endpoint {
                    Endpoint::Connect(addr) => {
                        tokio::task::spawn_local(keep_connected(
                            crossing.clone(),
                            link.clone(),
                            addr,
                            opts,
                            exports,
                        ));
                        Ok(None)
                    }
                    Endpoint::Listen(addr) => match tokio::net::TcpListener::bind(addr).await {
                        Ok(listener) => {
                            let at = listener.local_addr().map_err(NetError::io("listening address"));
                            tokio::task::spawn_local(keep_accepting(
                                crossing.clone(),
                                link.clone(),
                                listener,
                                opts,
                                exports,
                            ));
                            at.map(Some)
                        }
                        Err(e) => Err(NetError::io(format!("listen at {addr}"))(e)),
                    },
                };
                if r.is_ok() {
                    named.insert(name, link);
                }
                let _ = reply.send(r);
            }
            Cmd::CallNamed { link, service, call } => match named.get(&link) {
                Some(l) => {
                    tokio::task::spawn_local(call_named(crossing.clone(), l.clone(), service, call));
                }
                None => {
                    let _ = call.reply.send(Err(CallError::BadDoor));
                }
            },
            Cmd::LinkUp { name, reply } => {
                let _ = reply.send(named.get(&name).map(|l| l.is_up()));
            }
            Cmd::Stop => break,
        }
    }
    for l in named.values() {
        l.stop();
    }
    for l in links.borrow().values() {
        l.cut();
    }
}

fn lookup_error(name: &str, e: &capnp::Error) -> NetError {
    match e.kind {
        capnp::ErrorKind::Disconnected => NetError::LinkDown(e.to_string()),
        _ => NetError::NotExported(name.to_owned()),
    }
}
