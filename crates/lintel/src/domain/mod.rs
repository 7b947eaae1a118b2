//! The domain: this process's runtime. It owns the connections, the call
//! areas its peers made for their calls here, the table of doors received
//! from other domains, the tickets minted here, the server thread pool, and
//! the watcher thread that reads every socket and sees peers die. It is
//! every connection's `Home`: what a connection cannot do alone (tear
//! itself down, queue a call for a thread, mint or redeem a ticket, connect
//! to a third party) it asks of the domain through that trait.

use std::collections::HashMap;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering::*};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::abi::control::{self, Ctl};
use crate::context::settings::Settings;
use crate::object::conn::{Conn, Home, Ticket};
use crate::object::door::{DoorCore, RemoteDoor};
use crate::server::{InArea, Work};
use crate::state::pace::Pace;
use crate::state::workers::Pool;
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
    pub pool: Pool<Work>,
    conns: Mutex<HashMap<u64, Arc<Conn>>>,
    /// The call area each peer made for its calls to us, by connection.
    inbound: Mutex<HashMap<u64, Arc<InArea>>>,
    by_pid: Mutex<HashMap<u32, Weak<Conn>>>,
    /// The call areas of peers that died, by their pid, while a call of
    /// theirs may still run here: every thread serving one holds the area,
    /// so the last call has ended when nothing does ([`Domain::settle_dead`]).
    dying: Mutex<Vec<(u32, Weak<InArea>)>>,
    remotes: Mutex<HashMap<(u64, u32), Weak<RemoteDoor>>>,
    tickets: Mutex<Tickets>,
    poller: Poller,
    next_id: AtomicU64,
    /// Connections with releases queued, and the eventfd that wakes the
    /// watcher to send them: dropping many doors at once costs a few
    /// messages, not one each.
    releasing: Mutex<Vec<Weak<Conn>>>,
    /// Connections with loan returns queued (see [`RETURN_DELAY`]).
    returning: Mutex<Returning>,
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
static DOMAIN: crate::state::leaked::Leaked<Domain> = crate::state::leaked::Leaked::new();

/// Tell the server of call `seq` on `slot` of connection `conn` that its
/// caller was alerted (see [`crate::shuttle::FORWARD`]).
fn forward_alert(conn: u64, slot: u32, seq: u32) {
    if let Some(c) = get().conn_by_id(conn) {
        c.send(&Ctl::Alert { slot, seq }, &[]);
    }
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

/// The watcher's releases not yet sent: which connections have them, and
/// when they go.
struct Releases {
    pace: Pace,
    held: Vec<Weak<Conn>>,
}

impl Releases {
    fn send(&mut self) {
        for conn in self.held.drain(..).filter_map(|c| c.upgrade()) {
            conn.flush_releases();
        }
    }
}

/// The longest a dropped door's release waits to share a message.
const RELEASE_PACE: Duration = Duration::from_millis(1);

/// The longest a dropped loan's return waits for a request to carry it
/// before the watcher sends it in a message. A caller that drops the
/// loans of each reply and calls again returns them with its next call,
/// so a loan echo costs no message and no wake-up of the watcher; one
/// that stops calling has its returns sent within this delay (a lender
/// short of room waits for them at most that long, plus the message).
const RETURN_DELAY: Duration = Duration::from_millis(1);

/// Connections with loan returns queued, and whether the watcher has its
/// timer set for them (if so, queueing more needs no wake-up).
#[derive(Default)]
struct Returning {
    armed: bool,
    conns: Vec<Weak<Conn>>,
}

impl Domain {
    fn new() -> Domain {
        crate::sys::fence::init();
        let settings = Settings::from_env();
        Domain {
            pid: std::process::id(),
            pool: Pool::new(settings.max_threads, crate::server::run_worker),
            settings,
            conns: Mutex::new(HashMap::new()),
            inbound: Mutex::new(HashMap::new()),
            by_pid: Mutex::new(HashMap::new()),
            dying: Mutex::new(Vec::new()),
            remotes: Mutex::new(HashMap::new()),
            tickets: Mutex::new(Tickets::default()),
            poller: Poller::new().expect("lintel: cannot create epoll instance"),
            next_id: AtomicU64::new(1),
            releasing: Mutex::new(Vec::new()),
            returning: Mutex::new(Returning::default()),
            release_wake: sys::eventfd().expect("lintel: cannot create an eventfd"),
        }
    }

    fn start_threads(&'static self) {
        let _ = crate::context::shuttle::FORWARD.set(forward_alert);
        self.poller
            .add(self.release_wake.as_fd(), RELEASE_KEY)
            .expect("lintel: cannot watch the release eventfd");
        std::thread::Builder::new()
            .name("lintel-watch".into())
            .spawn(move || self.watch())
            .expect("lintel: cannot start the watcher thread");
    }

    /// The watcher: read every socket as it becomes ready.
    fn watch(&'static self) {
        let mut keys = Vec::new();
        let mut releases = Releases {
            pace: Pace::new(RELEASE_PACE),
            held: Vec::new(),
        };
        let mut returns_due: Option<Instant> = None;
        loop {
            let now = Instant::now();
            let returns_sleep = returns_due.map(|due| due.saturating_duration_since(now));
            let sleep = match (releases.pace.sleep(now), returns_sleep) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            self.poller.wait(&mut keys, sleep);
            for &key in &keys {
                if key == RELEASE_KEY {
                    self.releases_woken(&mut releases);
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
            let now = Instant::now();
            if releases.pace.due(now) {
                releases.send();
            }
            returns_due = self.returns_tick(returns_due, now);
        }
    }

    /// The watcher's timer for loan returns: set when a connection first
    /// queues returns, and at its time sends what no request carried; then
    /// set again if more were queued meanwhile, or left unset (the next
    /// return wakes the watcher). Returns the new time.
    fn returns_tick(&self, due: Option<Instant>, now: Instant) -> Option<Instant> {
        match due {
            None if self.returning.lock().armed => Some(now + RETURN_DELAY),
            Some(due) if now >= due => {
                let conns = std::mem::take(&mut self.returning.lock().conns);
                for conn in conns.iter().filter_map(Weak::upgrade) {
                    conn.flush_returns();
                }
                let mut returning = self.returning.lock();
                returning.armed = !returning.conns.is_empty();
                returning.armed.then(|| now + RETURN_DELAY)
            }
            due => due,
        }
    }

    // ---- batched releases ----

    /// Releases were queued: send them as the pace allows (see
    /// [`crate::state::pace`]). (Loan returns have their own timer.)
    fn releases_woken(&self, releases: &mut Releases) {
        sys::eventfd_clear(self.release_wake.as_fd());
        let conns = std::mem::take(&mut *self.releasing.lock());
        if conns.is_empty() {
            return; // woken for loan returns (see `returns_tick`)
        }
        for weak in conns {
            if !releases.held.iter().any(|h| h.ptr_eq(&weak)) {
                releases.held.push(weak);
            }
        }
        if releases.pace.queued(Instant::now()) {
            releases.send();
        }
    }

    // ---- connections ----

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

    /// Number of live connections (for tests and stats).
    pub fn conn_count(&self) -> usize {
        self.conns.lock().len()
    }

    pub fn conn_by_id(&self, id: u64) -> Option<Arc<Conn>> {
        self.conns.lock().get(&id).cloned()
    }

    // ---- doors received from other domains ----

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

    /// The kept end of a ticket is readable: its travelling end was closed
    /// (the ticket is dropped) or a domain adopts it as a connection.
    fn ticket_ready(&'static self, key: u64) {
        let mut buf = vec![0u8; control::MAX_CTL];
        let mut t = self.tickets.lock();
        let Some((_, ticket)) = t.by_key.get(&key) else {
            return;
        };
        let Some(sock) = ticket.fd.as_ref() else { return };
        let first = sys::recv_msg(sock.as_fd(), &mut buf);
        let hello = match &first {
            Ok(Recv::Empty) => return,
            Ok(Recv::Msg(n, _, Some(pid))) => {
                let hello = buf.get(..*n).and_then(control::decode);
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

    // ---- deaths ----

    /// Wait until no call that process `pid`, dead by now, made here still
    /// runs (see [`crate::settle_dead`]); false if `deadline` came first.
    ///
    /// A death the watcher has not handled yet is handled here first: the
    /// peer's pidfd is readable once it has exited, before its parent can
    /// reap it.
    pub fn settle_dead(&'static self, pid: u32, deadline: Instant) -> bool {
        let conns: Vec<Arc<Conn>> = {
            let conns = self.conns.lock();
            conns.values().filter(|c| c.peer_pid() == pid).cloned().collect()
        };
        for conn in conns {
            // (The pidfd's lock is let go before `pump`, which may end in
            // `conn_died`, which takes it.)
            let by_pidfd = conn.pidfd.lock().as_ref().map(|fd| sys::readable(fd.as_fd()));
            let exited = match by_pidfd {
                Some(exited) => exited,
                // No pidfd (the peer was gone when it connected): its
                // socket's hang-up says it.
                None => !conn.pump(),
            };
            if exited {
                self.conn_died(&conn);
            }
        }
        let mut pause = Duration::from_micros(20);
        loop {
            let running = {
                let mut dying = self.dying.lock();
                dying.retain(|(_, a)| a.strong_count() > 0);
                dying.iter().any(|(p, _)| *p == pid)
            };
            if !running {
                return true;
            }
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            // Rare, and a dead caller's call is usually short: a sleep that
            // grows, not a wake-up every call would have to pay for.
            std::thread::sleep(pause.min(deadline - now));
            pause = (pause * 2).min(Duration::from_millis(5));
        }
    }
}

impl Home for Domain {
    fn pid(&self) -> u32 {
        self.pid
    }

    fn settings(&'static self) -> &'static Settings {
        &self.settings
    }

    /// Register a connected socket as a connection to another domain.
    /// `peer_pid` is given only when the kernel vouches for it.
    fn add_conn(&'static self, sock: OwnedFd, peer_pid: Option<u32>) -> std::io::Result<Arc<Conn>> {
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

    /// A live connection to the domain with this (verified) pid.
    fn conn_to(&self, pid: u32) -> Option<Arc<Conn>> {
        let c = self.by_pid.lock().get(&pid)?.upgrade()?;
        (!c.is_dead()).then_some(c)
    }

    /// The peer is gone: fail our calls into it (`Conn::tear_down`), alert
    /// its calls into us, and drop every reference it held. Once.
    fn conn_died(&self, conn: &Arc<Conn>) {
        // Under `dying`'s lock from before the connection is marked dead
        // until its running calls are recorded: `settle_dead` finds a dying
        // connection either still listed or recorded, never in between
        // (where it saw no call running while the dead caller's ran on).
        let mut dying = self.dying.lock();
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
        let inbound = self.inbound.lock().remove(&conn.id);
        if let Some(area) = inbound {
            area.caller_died();
            dying.retain(|(_, a)| a.strong_count() > 0);
            dying.push((conn.peer_pid(), Arc::downgrade(&area)));
        }
        drop(dying);
        conn.tear_down();
        crate::object::buffer::conn_gone(conn.id);
    }

    fn loans_returned(&self, conn: &Arc<Conn>, loans: &[(u64, u32)]) {
        crate::object::buffer::returned(conn.id, loans);
    }

    fn call_area(&'static self, conn: &Arc<Conn>, fd: OwnedFd, notices: OwnedFd) {
        let mut inbound = self.inbound.lock();
        if conn.is_dead() || inbound.contains_key(&conn.id) {
            return; // one area per connection
        }
        match InArea::map(fd.as_fd(), notices) {
            Ok(area) => {
                inbound.insert(conn.id, Arc::new(area));
                // Its first call is on its way.
                self.pool.expect_work();
            }
            Err(why) => tracing::warn!(conn = conn.id, why, "refused call area"),
        }
    }

    fn kick(&'static self, conn: &Arc<Conn>, slot: u32) {
        let area = self.inbound.lock().get(&conn.id).cloned();
        if let Some(area) = area
            && area.claim_for_queue(slot)
        {
            let conn = conn.clone();
            self.pool.submit(Work { conn, area, slot });
        }
    }

    fn alert(&self, conn: &Arc<Conn>, slot: u32, seq: u32) {
        let area = self.inbound.lock().get(&conn.id).cloned();
        if let Some(area) = area {
            area.alert(slot, seq);
        }
    }

    /// `conn` has just queued its first release: have the watcher send it
    /// (with whatever else is queued by then).
    fn releases_queued(&self, conn: &Arc<Conn>) {
        self.releasing.lock().push(Arc::downgrade(conn));
        sys::eventfd_signal(self.release_wake.as_fd());
    }

    /// `conn` queued loan returns: the watcher sends what is left of them
    /// after [`RETURN_DELAY`], woken only if its timer is not set already.
    fn returns_queued(&self, conn: &Arc<Conn>) {
        let wake = {
            let mut returning = self.returning.lock();
            returning.conns.push(Arc::downgrade(conn));
            !std::mem::replace(&mut returning.armed, true)
        };
        if wake {
            sys::eventfd_signal(self.release_wake.as_fd());
        }
    }

    /// The identifier for grant `grant` on `conn`: the existing one if this
    /// domain already holds the door, so a door received twice has one entry.
    fn remote_door(&self, conn: &Arc<Conn>, grant: u32) -> Arc<RemoteDoor> {
        use std::collections::hash_map::Entry;
        let mut remotes = self.remotes.lock();
        // One lookup: the entry found, or the place for a new one.
        let slot = remotes.entry((conn.id, grant));
        if let Entry::Occupied(e) = &slot
            && let Some(rd) = e.get().upgrade()
        {
            rd.received.fetch_add(1, SeqCst);
            return rd;
        }
        let rd = Arc::new(RemoteDoor {
            conn: conn.clone(),
            grant,
            received: std::sync::atomic::AtomicU32::new(1),
        });
        slot.insert_entry(Arc::downgrade(&rd));
        rd
    }

    fn forget_remote(&self, rd: &RemoteDoor) {
        use std::collections::hash_map::Entry;
        let mut remotes = self.remotes.lock();
        if let Entry::Occupied(e) = remotes.entry((rd.conn.id, rd.grant))
            && std::ptr::eq(e.get().as_ptr(), rd)
        {
            e.remove();
        }
    }

    /// Make a ticket for a door we serve. The returned end travels; the kept
    /// end shows hang-up if the ticket is lost, which drops its reference.
    fn mint_ticket(&self, core: &Arc<DoorCore>) -> std::io::Result<OwnedFd> {
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
    fn take_ticket(&self, fd: BorrowedFd<'_>) -> Option<Ticket> {
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
}
