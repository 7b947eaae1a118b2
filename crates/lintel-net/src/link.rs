//! One link: a TCP connection (TLS over it unless the options say plain),
//! one Cap'n Proto RPC system on it, each end offering the other its
//! [`LinkServer`], and a keepalive.
//!
//! The keepalive pings the far end every quarter of [`LinkOptions::keepalive`]
//! and gives it three quarters to answer: a link that stalls without
//! closing (a host gone, a cable cut, a relay that stops forwarding) is
//! noticed within one keepalive period. The link is then shut down at the
//! socket, which the RPC system sees as a lost connection: every call in
//! flight and every later call on its imports fails with `PeerDied`, and
//! every call the far side had made here is dropped, which alerts the
//! server threads running them.

use std::net::SocketAddr;
use std::os::fd::AsFd;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use capnp_rpc::rpc_twoparty_capnp::Side;
use capnp_rpc::{RpcSystem, twoparty};
use futures::io::{BufReader, BufWriter};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio_util::compat::{TokioAsyncReadCompatExt, TokioAsyncWriteCompatExt};

use crate::crossing::Crossing;
use crate::error::NetError;
use crate::exported::{Exports, LinkServer};
use crate::lintel_capnp::link;
use crate::tls::Tls;

/// How a link is secured.
#[derive(Clone, Debug)]
pub enum Security {
    /// Mutually authenticated TLS.
    Tls(Tls),
    /// Plain TCP: anyone who reaches the port can call what the link
    /// exports. Only for loopback and tests, and only when asked for.
    Plain,
}

/// A link's settings.
#[derive(Clone, Debug)]
pub struct LinkOptions {
    /// TLS, or plain TCP when said so.
    pub security: Security,
    /// The longest the far end may stay silent before the link is taken
    /// for dead (default 1 s).
    pub keepalive: Duration,
    /// The largest message either end may send on the link (default
    /// 256 MiB): bytes of a call's arguments or of a reply, buffers
    /// included. A larger one is refused with `CallError::TooLarge`
    /// before it leaves (the proxy refuses above the smallest limit of
    /// its links); one from a far end that allows more closes the link,
    /// so both ends should agree.
    pub max_message: usize,
    /// How long a TLS handshake may take (default 5 s).
    pub handshake: Duration,
}

impl LinkOptions {
    /// A link secured by `tls`, with the default keepalive and limits.
    pub fn tls(tls: Tls) -> LinkOptions {
        LinkOptions::with(Security::Tls(tls))
    }

    /// A plain TCP link (loopback and tests).
    pub fn plain() -> LinkOptions {
        LinkOptions::with(Security::Plain)
    }

    fn with(security: Security) -> LinkOptions {
        LinkOptions {
            security,
            keepalive: Duration::from_secs(1),
            max_message: 256 << 20,
            handshake: Duration::from_secs(5),
        }
    }

    /// The same options with keepalive `keepalive`.
    pub fn keepalive(mut self, keepalive: Duration) -> LinkOptions {
        self.keepalive = keepalive;
        self
    }
}

/// A link, as the proxy's thread holds it.
pub(crate) struct Link {
    /// The far end's offer.
    pub far: link::Client,
    /// The far end's address.
    pub peer: SocketAddr,
    /// A second handle on the socket, to shut it down.
    socket: Rc<std::net::TcpStream>,
    /// Set when the connection has ended, with waiters told.
    pub ended: Rc<Ended>,
}

/// Whether a link's connection has ended, and who waits to hear it.
#[derive(Default)]
pub(crate) struct Ended {
    done: std::cell::Cell<bool>,
    notify: tokio::sync::Notify,
}

impl Ended {
    pub fn is_done(&self) -> bool {
        self.done.get()
    }

    /// Wait until the connection has ended.
    pub async fn wait(&self) {
        while !self.done.get() {
            self.notify.notified().await;
        }
    }

    fn set(&self) {
        self.done.set(true);
        self.notify.notify_waiters();
    }
}

impl Link {
    /// Shut the link down: the RPC system sees the connection lost.
    pub fn cut(&self) {
        let _ = self.socket.shutdown(std::net::Shutdown::Both);
    }
}

type Reader = Box<dyn AsyncRead + Unpin>;
type Writer = Box<dyn AsyncWrite + Unpin>;

/// Secure `tcp` as `opts` say: the listening end (`Side::Server`) accepts
/// a TLS handshake, the connecting end starts one.
async fn secure(tcp: TcpStream, side: Side, opts: &LinkOptions) -> Result<(Reader, Writer), NetError> {
    match &opts.security {
        Security::Plain => {
            let (r, w) = tcp.into_split();
            Ok((Box::new(r), Box::new(w)))
        }
        Security::Tls(tls) => {
            let handshake = async {
                match side {
                    Side::Server => {
                        let s = tls
                            .acceptor()?
                            .accept(tcp)
                            .await
                            .map_err(|e| NetError::Tls(e.to_string()))?;
                        let (r, w) = tokio::io::split(s);
                        Ok::<(Reader, Writer), NetError>((Box::new(r), Box::new(w)))
                    }
                    _ => {
                        let (connector, name) = tls.connector()?;
                        let s = connector
                            .connect(name, tcp)
                            .await
                            .map_err(|e| NetError::Tls(e.to_string()))?;
                        let (r, w) = tokio::io::split(s);
                        Ok::<(Reader, Writer), NetError>((Box::new(r), Box::new(w)))
                    }
                }
            };
            tokio::time::timeout(opts.handshake, handshake)
                .await
                .map_err(|_| NetError::Tls("the handshake took too long".into()))?
        }
    }
}

/// Make a link of `tcp`, on the proxy's thread: its RPC system and its
/// keepalive run as local tasks until the connection ends.
pub(crate) async fn establish(
    tcp: TcpStream,
    side: Side,
    opts: &LinkOptions,
    exports: Arc<dyn Exports>,
    crossing: Rc<Crossing>,
) -> Result<Link, NetError> {
    let peer = tcp.peer_addr().map_err(NetError::io("peer address"))?;
    tcp.set_nodelay(true).map_err(NetError::io("TCP_NODELAY"))?;
    let socket = tcp
        .as_fd()
        .try_clone_to_owned()
        .map(std::net::TcpStream::from)
        .map_err(NetError::io("dup of the link's socket"))?;
    let socket = Rc::new(socket);
    let (r, w) = secure(tcp, side, opts).await?;
    let mut limits = capnp::message::ReaderOptions::new();
    limits.traversal_limit_in_words(Some(opts.max_message / 8 + 1024));
    crossing.limit_messages(opts.max_message);
    let network = twoparty::VatNetwork::new(
        BufReader::new(r.compat()),
        BufWriter::new(w.compat_write()),
        side,
        limits,
    );
    let offer: link::Client = capnp_rpc::new_client(LinkServer { exports, crossing });
    let mut rpc = RpcSystem::new(Box::new(network), Some(offer.client));
    let far: link::Client = rpc.bootstrap(match side {
        Side::Server => Side::Client,
        _ => Side::Server,
    });
    let closer = socket.clone();
    let ended = Rc::new(Ended::default());
    let end = ended.clone();
    tokio::task::spawn_local(async move {
        match rpc.await {
            Ok(()) => tracing::info!(%peer, "link closed"),
            Err(e) => tracing::warn!(%peer, "link closed: {e}"),
        }
        // However it ended, nothing more goes through this socket.
        let _ = closer.shutdown(std::net::Shutdown::Both);
        end.set();
    });
    tokio::task::spawn_local(keepalive(far.clone(), opts.keepalive, socket.clone(), peer));
    Ok(Link {
        far,
        peer,
        socket,
        ended,
    })
}

/// Ping the far end until the link ends; cut it when an answer is late.
async fn keepalive(far: link::Client, period: Duration, socket: Rc<std::net::TcpStream>, peer: SocketAddr) {
    loop {
        tokio::time::sleep(period / 4).await;
        let ping = far.ping_request().send().promise;
        match tokio::time::timeout(period * 3 / 4, ping).await {
            Ok(Ok(_)) => {}
            // It answered, if only to say it has no such method (a peer
            // that offers no `Link`): alive.
            Ok(Err(e)) if e.kind != capnp::ErrorKind::Disconnected => {}
            Ok(Err(e)) => {
                tracing::info!(%peer, "keepalive stops: {e}");
                break;
            }
            Err(_) => {
                tracing::warn!(%peer, "link cut: no answer to the keepalive within {period:?}");
                break;
            }
        }
    }
    let _ = socket.shutdown(std::net::Shutdown::Both);
}

/// Accept connections on `listener` until `done` ends, each made a link
/// (its handshake a task of its own, so one slow peer holds up no other)
/// and handed to `on_link`.
pub(crate) async fn accept_links<F, Fut>(
    listener: tokio::net::TcpListener,
    opts: LinkOptions,
    exports: Arc<dyn Exports>,
    crossing: Rc<Crossing>,
    done: impl std::future::Future<Output = ()>,
    on_link: F,
) where
    F: Fn(Link) -> Fut + Clone + 'static,
    Fut: std::future::Future<Output = ()> + 'static,
{
    let mut done = std::pin::pin!(done);
    loop {
        let tcp = tokio::select! {
            r = listener.accept() => r,
            () = &mut done => return,
        };
        let (tcp, from) = match tcp {
            Ok(t) => t,
            Err(e) => {
                tracing::warn!("accept: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let (opts, exports, crossing, on_link) =
            (opts.clone(), exports.clone(), crossing.clone(), on_link.clone());
        tokio::task::spawn_local(async move {
            match establish(tcp, Side::Server, &opts, exports, crossing).await {
                Ok(link) => on_link(link).await,
                Err(e) => tracing::warn!(%from, "link refused: {e}"),
            }
        });
    }
}
