//! The domain: this process's runtime. It owns the connections, the table of
//! doors received from other domains, the tickets minted here, the server
//! thread pool, the watcher thread that reads every socket and sees peers
//! die, and the one thread that delivers `unreferenced` in order.

use std::collections::HashMap;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering::*};
use std::sync::mpsc;
use std::sync::{Arc, Weak};

use parking_lot::Mutex;

use crate::abi::wire::{self, Ctl};
use crate::conn::{Conn, Ticket};
use crate::door::{DoorCore, RemoteDoor};
use crate::pool::Pool;
use crate::settings::Settings;
use crate::sys::{self, Poller, Recv};

/// Epoll keys with this bit name tickets; with [`PIDFD_KEY`], the pidfd of
/// a connection's peer; others name connections.
const TICKET_KEY: u64 = 1 << 63;
const PIDFD_KEY: u64 = 1 << 62;
/// The key of the eventfd that says releases are queued.
const RELEASE_KEY: u64 = 1 << 61;

pub(crate) struct Domain {
    pub pid: u32,
    pub settings: Settings,
    pub pool: Pool,
    conns: Mutex<HashMap<u64, Arc<Conn>>>,
    by_pid: Mutex<HashMap<u32, Weak<Conn>>>,
    remotes: Mutex<HashMap<(u64, u32), Weak<RemoteDoor>>>,
    tickets: Mutex<Tickets>,
    poller: Poller,
    unref: Mutex<mpsc::Sender<Arc<DoorCore>>>,
    next_id: AtomicU64,
    /// Connections with releases queued, and the eventfd that wakes the
    /// watcher to send them: dropping many doors at once costs a few
    /// messages, not one each.
    releasing: Mutex<Vec<Weak<Conn>>>,
    release_wake: OwnedFd,
}

#[derive(Default)]
struct Tickets {
    by_key: HashMap<u64, (u64, Ticket)>,
    by_ino: HashMap<u64, u64>,
}

/// This process's domain: null until first use, then a leaked box that
/// lives as long as the process; a forked child replaces it with one of
/// its own ([`after_fork`]), leaking the parent's.
static DOMAIN: crate::leaked::Leaked<Domain> = crate::leaked::Leaked::new();
/// How many times this process forked and replaced its domain; state made
/// under an older generation (the loan pool) is the parent's.
pub(crate) static GENERATION: AtomicU64 = AtomicU64::new(0);

/// The sink of doors served here ([`crate::door::UnrefSink`]): the domain's
/// one unreferenced thread delivers them in order.
pub(crate) fn queue_unreferenced(core: Arc<DoorCore>) {
    get().queue_unref(core);
}

/// This process's domain, started on first use.
#[inline]
pub(crate) fn get() -> &'static Domain {
    match DOMAIN.get() {
        Some(d) => d,
        None => start(),
    }
}

#[cold]
fn start() -> &'static Domain {
    DOMAIN.get_or_make(Domain::new, Domain::start_threads)
}

/// In a forked child, before it uses lintel: the parent's domain is left
/// behind (its threads do not exist here, its connections' memory is
/// shared with the parent), its sockets are closed so its peers see only
/// the parent, and the next use starts a domain of this process's own.
/// Runs on the child's only thread; takes no lock a parent thread could
/// have held at the fork (those it cannot take are skipped).
pub(crate) fn after_fork() {
    GENERATION.fetch_add(1, SeqCst);
    crate::channel::forget_thread_leases();
    let Some(old) = DOMAIN.abandon() else { return };
    let Some(conns) = old.conns.try_lock() else { return };
    let null = rustix::fs::open(
        "/dev/null",
        rustix::fs::OFlags::RDWR | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )
    .ok();
    for conn in conns.values() {
        conn.dead.store(true, SeqCst);
        // Put /dev/null where the socket was: this process's reference to
        // the connection goes, and the number stays taken until the
        // connection's own descriptor is dropped.
        if let Some(null) = &null {
            let _ = sys::replace_fd(null.as_fd(), conn.sock.as_fd());
        }
    }
}

impl Domain {
    fn new() -> Domain {
        let (tx, _rx) = mpsc::channel();
        let settings = Settings::from_env();
        Domain {
            pid: std::process::id(),
            pool: Pool::new(settings.max_threads),
            settings,
            conns: Mutex::new(HashMap::new()),
            by_pid: Mutex::new(HashMap::new()),
            remotes: Mutex::new(HashMap::new()),
            tickets: Mutex::new(Tickets::default()),
            poller: Poller::new().expect("lintel: cannot create epoll instance"),
            unref: Mutex::new(tx),
            next_id: AtomicU64::new(1),
            releasing: Mutex::new(Vec::new()),
            release_wake: sys::eventfd().expect("lintel: cannot create an eventfd"),
        }
    }

    fn start_threads(&'static self) {
        self.poller
            .add(self.release_wake.as_fd(), RELEASE_KEY)
            .expect("lintel: cannot watch the release eventfd");
        let (tx, rx) = mpsc::channel::<Arc<DoorCore>>();
        *self.unref.lock() = tx;
        std::thread::Builder::new()
            .name("lintel-unref".into())
            .spawn(move || {
                for core in rx {
                    let c = core.clone();
                    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
                        c.handler.unreferenced(c.datum)
                    }));
                }
            })
            .expect("lintel: cannot start the unreferenced thread");
        std::thread::Builder::new()
            .name("lintel-watch".into())
            .spawn(move || self.watch())
            .expect("lintel: cannot start the watcher thread");
    }

    fn queue_unref(&self, core: Arc<DoorCore>) {
        let _ = self.unref.lock().send(core);
    }

    /// The watcher: read every socket as it becomes ready.
    fn watch(&'static self) {
        let mut keys = Vec::new();
        loop {
            self.poller.wait(&mut keys);
            for &key in &keys {
                if key == RELEASE_KEY {
                    self.send_releases();
                } else if key & TICKET_KEY != 0 {
                    self.ticket_ready(key);
                } else if key & PIDFD_KEY != 0 {
                    let conn = self.conns.lock().get(&(key & !PIDFD_KEY)).cloned();
                    if let Some(conn) = conn {
                        self.conn_died(&conn);
                    }
                } else {
                    let conn = self.conns.lock().get(&key).cloned();
                    if let Some(conn) = conn {
                        conn.pump();
                    }
                }
            }
        }
    }

    // ---- batched releases ----

    /// `conn` has just queued its first release: have the watcher send it
    /// (with whatever else is queued by then).
    pub fn releases_queued(&self, conn: &Arc<Conn>) {
        self.releasing.lock().push(Arc::downgrade(conn));
        sys::eventfd_signal(self.release_wake.as_fd());
    }

    fn send_releases(&self) {
        sys::eventfd_clear(self.release_wake.as_fd());
        let conns = std::mem::take(&mut *self.releasing.lock());
        for conn in conns.iter().filter_map(Weak::upgrade) {
            conn.flush_releases();
        }
    }

    // ---- connections ----

    /// Register a connected socket as a connection to another domain.
    /// `peer_pid` is given only when the kernel vouches for it.
    pub fn add_conn(&'static self, sock: OwnedFd, peer_pid: Option<u32>) -> std::io::Result<Arc<Conn>> {
        let id = self.next_id.fetch_add(1, Relaxed);
        let conn = Arc::new(Conn::new(self, id, sock, peer_pid.unwrap_or(0)));
        conn.send(
            &Ctl::Hello {
                pid: self.pid,
                version: crate::abi::VERSION,
            },
            &[],
        );
        self.conns.lock().insert(id, conn.clone());
        if let Err(e) = self.poller.add(conn.sock.as_fd(), id) {
            self.conns.lock().remove(&id);
            return Err(e);
        }
        if let Some(pid) = peer_pid {
            self.peer_known(&conn, pid);
        }
        Ok(conn)
    }

    /// The kernel vouched that `conn`'s peer is process `pid`: find the
    /// connection by pid from now on, and watch the process itself, so its
    /// death is seen even if it mailed its own end of the socket to us.
    fn peer_known(&self, conn: &Arc<Conn>, pid: u32) {
        conn.set_peer_pid(pid);
        self.by_pid.lock().insert(pid, Arc::downgrade(conn));
        match sys::pidfd(pid) {
            Ok(fd) => {
                if self.poller.add(fd.as_fd(), PIDFD_KEY | conn.id).is_ok() {
                    *conn.pidfd.lock() = Some(fd);
                }
            }
            // Already gone: the socket's hang-up reports it.
            Err(e) => tracing::debug!(pid, error = %e, "no pidfd for peer"),
        }
    }

    /// A live connection to the domain with this (verified) pid.
    pub fn conn_to(&self, pid: u32) -> Option<Arc<Conn>> {
        let c = self.by_pid.lock().get(&pid)?.upgrade()?;
        (!c.is_dead()).then_some(c)
    }

    pub fn conn_died(&self, conn: &Arc<Conn>) {
        if conn.dead.swap(true, SeqCst) {
            return;
        }
        self.poller.remove(conn.sock.as_fd());
        if let Some(fd) = conn.pidfd.lock().take() {
            self.poller.remove(fd.as_fd());
        }
        self.conns.lock().remove(&conn.id);
        {
            let mut by_pid = self.by_pid.lock();
            let pid = conn.peer_pid();
            if by_pid.get(&pid).is_some_and(|w| w.as_ptr() == Arc::as_ptr(conn)) {
                by_pid.remove(&pid);
            }
        }
        conn.tear_down();
    }

    /// Number of live connections (for tests and stats).
    pub fn conn_count(&self) -> usize {
        self.conns.lock().len()
    }

    pub fn conn_by_id(&self, id: u64) -> Option<Arc<Conn>> {
        self.conns.lock().get(&id).cloned()
    }

    // ---- doors received from other domains ----

    /// The identifier for grant `grant` on `conn`: the existing one if this
    /// domain already holds the door, so a door received twice has one entry.
    pub fn remote_door(&self, conn: &Arc<Conn>, grant: u32) -> Arc<RemoteDoor> {
        let mut remotes = self.remotes.lock();
        let key = (conn.id, grant);
        if let Some(rd) = remotes.get(&key).and_then(Weak::upgrade) {
            rd.received.fetch_add(1, SeqCst);
            return rd;
        }
        let rd = Arc::new(RemoteDoor {
            conn: conn.clone(),
            grant,
            received: std::sync::atomic::AtomicU32::new(1),
        });
        remotes.insert(key, Arc::downgrade(&rd));
        rd
    }

    pub fn forget_remote(&self, rd: &RemoteDoor) {
        let mut remotes = self.remotes.lock();
        let key = (rd.conn.id, rd.grant);
        if remotes.get(&key).is_some_and(|w| std::ptr::eq(w.as_ptr(), rd)) {
            remotes.remove(&key);
        }
    }

    pub fn remote_count(&self) -> usize {
        self.remotes.lock().len()
    }

    /// As [`Domain::remote_count`], only doors served by process `pid`.
    pub fn remote_count_from(&self, pid: u32) -> usize {
        let remotes = self.remotes.lock();
        let from = |w: &Weak<RemoteDoor>| w.upgrade().is_some_and(|rd| rd.conn.peer_pid() == pid);
        remotes.values().filter(|w| from(w)).count()
    }

    // ---- tickets: doors in transit to a third domain ----

    /// Make a ticket for a door we serve. The returned end travels; the kept
    /// end shows hang-up if the ticket is lost, which drops its reference.
    pub fn mint_ticket(&self, core: &Arc<DoorCore>) -> std::io::Result<OwnedFd> {
        let (keep, travel) = sys::seqpacket_pair()?;
        // A domain that adopts the ticket as a connection says hello on it:
        // with credentials attached by the kernel we learn who it is.
        sys::set_passcred(keep.as_fd())?;
        let ino = sys::inode(travel.as_fd())?;
        let key = TICKET_KEY | self.next_id.fetch_add(1, Relaxed);
        core.add_holder();
        let ticket = Ticket {
            core: core.clone(),
            fd: Some(keep),
        };
        let mut t = self.tickets.lock();
        if let Some(fd) = &ticket.fd {
            self.poller.add(fd.as_fd(), key)?;
        }
        t.by_ino.insert(ino, key);
        t.by_key.insert(key, (ino, ticket));
        Ok(travel)
    }

    /// Take the ticket whose travelling end is `fd` (checked by inode: only
    /// a holder of the real end can present it).
    pub fn take_ticket(&self, fd: BorrowedFd<'_>) -> Option<Ticket> {
        let ino = sys::inode(fd).ok()?;
        let mut t = self.tickets.lock();
        let key = t.by_ino.remove(&ino)?;
        let (_, mut ticket) = t.by_key.remove(&key)?;
        drop(t);
        if let Some(keep) = ticket.fd.take() {
            self.poller.remove(keep.as_fd());
        }
        Some(ticket)
    }

    /// The kept end of a ticket is readable: its travelling end was closed
    /// (the ticket is dropped) or a domain adopts it as a connection.
    fn ticket_ready(&'static self, key: u64) {
        let mut buf = vec![0u8; wire::MAX_CTL];
        let mut t = self.tickets.lock();
        let Some((_, ticket)) = t.by_key.get(&key) else {
            return;
        };
        let Some(sock) = ticket.fd.as_ref() else { return };
        let first = sys::recv_msg(sock.as_fd(), &mut buf);
        let hello = match &first {
            Ok(Recv::Empty) => return,
            Ok(Recv::Msg(n, _, Some(pid))) => {
                let hello = buf.get(..*n).and_then(wire::decode);
                let ours =
                    matches!(hello, Some(Ctl::Hello { version, .. }) if version == crate::abi::VERSION);
                ours.then_some(*pid)
            }
            _ => None,
        };
        let Some((ino, mut ticket)) = t.by_key.remove(&key) else {
            return;
        };
        t.by_ino.remove(&ino);
        drop(t);
        let Some(sock) = ticket.fd.take() else { return };
        self.poller.remove(sock.as_fd());
        let Some(pid) = hello else {
            return; // closed, garbage or another version: the ticket drops its reference here
        };
        match self.add_conn(sock, Some(pid)) {
            Ok(conn) => {
                *conn.adopted.lock() = Some(ticket);
                conn.pump();
            }
            Err(e) => tracing::warn!(error = %e, "cannot adopt ticket as a connection"),
        }
    }

    pub fn ticket_count(&self) -> usize {
        self.tickets.lock().by_key.len()
    }
}
