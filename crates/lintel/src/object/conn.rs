//! A connection: the private link between this domain and one other.
//!
//! One `SOCK_SEQPACKET` socket per pair of domains that talk anchors
//! everything the peer holds of ours: when the peer dies the kernel closes
//! its end, we see hang-up, and every grant it held is released and every
//! call waiting on it fails. Each side creates its own call area (a sealed
//! memfd) for the calls it makes, and sends it over the socket.
//!
//! Its grant table (see `grants`) translates the small door numbers the
//! peer uses into our doors.
//!
//! A connection reaches the rest of the runtime only through its [`Home`]:
//! what it needs of the domain it belongs to (the domain implements it, a
//! test a stand-in), so it knows neither the domain nor the serving side.

use std::collections::HashMap;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering::*};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use crate::abi;
use crate::abi::control::{self, Ctl};
use crate::abi::descriptor::DoorDescriptor;
use crate::context::error::CallError;
use crate::context::settings::Settings;
use crate::object::door::{DoorCore, RemoteDoor};
use crate::state::bulk::Outbox;
use crate::state::call_area::OutArea;
use crate::state::grants::{Granting, Grants};
use crate::sys::{self, Mapping, Recv};

/// What a connection needs of the domain it belongs to.
pub(crate) trait Home: Send + Sync + 'static {
    /// The pid of this domain's process.
    fn pid(&self) -> u32;
    /// The domain's settings.
    fn settings(&'static self) -> &'static Settings;
    /// The peer is gone (or refused): tear `conn` down, once.
    fn conn_died(&self, conn: &Arc<Conn>);
    /// The peer sent the call area for its calls to us, and the socket
    /// for notices to its parked calls.
    fn call_area(&'static self, conn: &Arc<Conn>, fd: OwnedFd, notices: OwnedFd);
    /// The peer posted a call on `slot` and found no thread bound to it.
    fn kick(&'static self, conn: &Arc<Conn>, slot: u32);
    /// The caller of call `seq` on `slot` was alerted.
    fn alert(&self, conn: &Arc<Conn>, slot: u32, seq: u32);
    /// The peer gave back loans of our pool: `(offset, length)` as it says.
    fn loans_returned(&self, conn: &Arc<Conn>, loans: &[(u64, u32)]);
    /// `conn` queued its first release: send them soon.
    fn releases_queued(&self, conn: &Arc<Conn>);
    /// `conn` has loan returns queued and is not on the watcher's list:
    /// send what no request has carried by `RETURN_DELAY` from now.
    fn returns_queued(&self, conn: &Arc<Conn>);
    /// The door behind the peer's grant `grant` (one per grant).
    fn remote_door(&self, conn: &Arc<Conn>, grant: u32) -> Arc<RemoteDoor>;
    /// `rd` is dropped.
    fn forget_remote(&self, rd: &RemoteDoor);
    /// A ticket for a door served here (see `Domain::mint_ticket`).
    fn mint_ticket(&self, core: &Arc<DoorCore>) -> std::io::Result<OwnedFd>;
    /// The ticket minted here whose travelling end is `fd`.
    fn take_ticket(&self, fd: BorrowedFd<'_>) -> Option<Ticket>;
    /// A live connection to the domain with (verified) pid `pid`.
    fn conn_to(&self, pid: u32) -> Option<Arc<Conn>>;
    /// A connection over `sock`, a socket to the domain with pid `pid`.
    fn add_conn(&'static self, sock: OwnedFd, pid: Option<u32>) -> std::io::Result<Arc<Conn>>;
}

impl Parked {
    /// Park a batch; false (and the fds closed) if it is refused.
    fn park(&mut self, request: bool, slot: u32, seq: u32, fds: Vec<OwnedFd>) -> bool {
        if slot as usize >= abi::AREA_SLOTS || fds.len() > abi::MAX_DOORS {
            return false;
        }
        // A newer batch for the same slot replaces a stale one.
        if let Some((_, old)) = self.batches.remove(&(request, slot)) {
            self.fds -= old.len();
        }
        if self.fds + fds.len() > MAX_PARKED_FDS {
            return false;
        }
        self.fds += fds.len();
        self.batches.insert((request, slot), (seq, fds));
        true
    }

    fn take(&mut self, request: bool, slot: u32, seq: u32) -> Option<Vec<OwnedFd>> {
        let (s, _) = self.batches.get(&(request, slot))?;
        if *s != seq {
            return None;
        }
        let (_, fds) = self.batches.remove(&(request, slot))?;
        self.fds -= fds.len();
        Some(fds)
    }
}

/// A reply to a control request.
pub(crate) enum Answer {
    Minted(Option<OwnedFd>),
    Redeemed(Option<u32>),
}

/// A door ticket minted here, waiting to be redeemed.
pub(crate) struct Ticket {
    pub core: Arc<DoorCore>,
    pub fd: Option<OwnedFd>,
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.core.drop_holder();
    }
}

pub(crate) struct Conn {
    pub id: u64,
    /// The domain this connection belongs to, as far as it needs to know
    /// it (handed over when the connection is made, not looked up).
    pub home: &'static dyn Home,
    /// Its home's settings (spinning, the forced path), kept here: the call
    /// paths read them on every call, with no dynamic call to the home.
    pub settings: &'static Settings,
    peer_pid: AtomicU32,
    pub sock: OwnedFd,
    pub dead: AtomicBool,
    recv: Mutex<Vec<u8>>,
    /// Our call area for calls to the peer, made on the first call.
    pub out: std::sync::OnceLock<Arc<OutArea>>,
    /// Held while the area is made and sent (and while the peer's death
    /// reaches it), so it is sent once and never missed by the death.
    pub out_made: Mutex<()>,
    grants: Mutex<Grants<Arc<DoorCore>>>,
    grants_gen: AtomicU64,
    /// Control requests in flight: `None` until answered. Answers to
    /// requests not in here are dropped (with any fd they carry).
    answers: Mutex<HashMap<u64, Option<Answer>>>,
    answer_cv: Condvar,
    tickets_in: Mutex<Parked>,
    /// Bulk segments sent ahead of the call or reply that first uses them:
    /// the newest per slot and direction, at most [`MAX_SEGMENTS_IN`].
    segments_in: Mutex<HashMap<(bool, u32), (u32, OwnedFd)>>,
    /// Sealed snapshots' memfds sent ahead of the call or reply that
    /// passes them (bounded like tickets).
    buffers_in: Mutex<Parked>,
    /// Our loan arena has been sent to the peer.
    pool_sent: Mutex<bool>,
    /// The peer's loan arena, mapped read-only.
    peer_arena: Mutex<Option<Arc<Mapping>>>,
    boot: Mutex<Option<(Vec<DoorDescriptor>, Vec<OwnedFd>)>>,
    boot_seen: AtomicBool,
    pub adopted: Mutex<Option<Ticket>>,
    /// Readable once the peer process has exited: death is seen even if the
    /// peer mailed its own end of the socket to us (which keeps it open).
    pub pidfd: Mutex<Option<OwnedFd>>,
    next_req: AtomicU64,
    /// The protocol version the peer said it speaks, if not ours (then the
    /// connection is refused).
    other_version: Mutex<Option<u32>>,
    hello_seen: AtomicBool,
    /// Releases of the peer's grants waiting to be sent (client role).
    releases: Mutex<Vec<(u32, u32)>>,
    releases_sent: AtomicU64,
    /// Loans of the peer's arena we dropped, waiting to be returned.
    returns: Mutex<Vec<(u64, u32)>>,
    /// Whether the watcher has this connection on its list of returns to
    /// send (see `Home::returns_queued`).
    returns_listed: AtomicBool,
}

/// Ticket fds that arrived ahead of the call or reply that uses them, one
/// batch per slot and direction (a slot carries one call at a time), and
/// never more than [`MAX_PARKED_FDS`] in all: a peer cannot make us hold
/// descriptors without bound.
#[derive(Default)]
struct Parked {
    batches: HashMap<(bool, u32), (u32, Vec<OwnedFd>)>,
    fds: usize,
}

/// Most ticket fds parked per connection; beyond, new batches are refused
/// and the calls they belong to fail with "door tickets missing".
const MAX_PARKED_FDS: usize = 4 * abi::MAX_DOORS;

/// Most bulk segments waiting for their first call per connection (two
/// per thread slot, and as many again for awaited calls): a peer cannot
/// make us hold more descriptors than this, and a call whose segment was
/// refused fails with "bulk segment missing".
const MAX_SEGMENTS_IN: usize = 4 * abi::SLOTS;
/// How long a control request (mint or redeem a ticket) waits for the
/// peer's answer before the transfer fails.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

impl Conn {
    pub fn new(home: &'static dyn Home, id: u64, sock: OwnedFd, peer_pid: u32) -> Conn {
        Conn {
            id,
            home,
            settings: home.settings(),
            peer_pid: AtomicU32::new(peer_pid),
            sock,
            dead: AtomicBool::new(false),
            recv: Mutex::new(vec![0u8; control::MAX_CTL]),
            out: std::sync::OnceLock::new(),
            out_made: Mutex::new(()),
            grants: Mutex::new(Grants::default()),
            grants_gen: AtomicU64::new(0),
            answers: Mutex::new(HashMap::new()),
            answer_cv: Condvar::new(),
            tickets_in: Mutex::new(Parked::default()),
            segments_in: Mutex::new(HashMap::new()),
            buffers_in: Mutex::new(Parked::default()),
            pool_sent: Mutex::new(false),
            peer_arena: Mutex::new(None),
            boot: Mutex::new(None),
            boot_seen: AtomicBool::new(false),
            adopted: Mutex::new(None),
            pidfd: Mutex::new(None),
            next_req: AtomicU64::new(1),
            other_version: Mutex::new(None),
            hello_seen: AtomicBool::new(false),
            releases: Mutex::new(Vec::new()),
            releases_sent: AtomicU64::new(0),
            returns: Mutex::new(Vec::new()),
            returns_listed: AtomicBool::new(false),
        }
    }

    /// The peer's pid, 0 if not verified.
    pub fn peer_pid(&self) -> u32 {
        self.peer_pid.load(Relaxed)
    }

    /// Record the peer's pid once the kernel has vouched for it.
    pub fn set_peer_pid(&self, pid: u32) {
        self.peer_pid.store(pid, Relaxed);
    }

    #[inline]
    pub fn is_dead(&self) -> bool {
        self.dead.load(Acquire)
    }

    /// Send a control message; errors mean the peer is gone, which the
    /// watcher reports on its own.
    pub fn send(&self, msg: &Ctl, fds: &[std::os::fd::BorrowedFd<'_>]) -> bool {
        sys::send_msg(self.sock.as_fd(), &control::encode(msg), fds).is_ok()
    }

    // ---- grants (server role) ----

    /// Grant `core` to the peer once more (it now holds the door); `None`
    /// once the peer is gone.
    pub fn grant(&self, core: &Arc<DoorCore>) -> Option<u32> {
        let mut grants = self.grants.lock();
        let g = grants.grant(core)?;
        if let Granting::New(_) = g {
            core.add_holder();
        }
        Some(g.index())
    }

    /// Take back `count` sends of grant `g`: the peer released the door, or
    /// the call that granted it failed before the peer took it.
    pub fn take_back(&self, g: u32, count: u32) {
        self.take_back_all([(g, count)]);
    }

    /// [`Conn::take_back`] of many grants, the doors let go at once.
    pub fn take_back_all(&self, grants: impl IntoIterator<Item = (u32, u32)>) {
        let gone: Vec<_> = {
            let mut table = self.grants.lock();
            let gone: Vec<_> = grants
                .into_iter()
                .filter_map(|(g, count)| table.release(g, count))
                .collect();
            if !gone.is_empty() {
                self.grants_gen.fetch_add(1, Release);
            }
            gone
        };
        DoorCore::drop_holders(gone);
    }

    /// The door behind grant `g`, if the peer holds one there.
    #[inline]
    pub fn lookup(&self, g: u32) -> Option<Arc<DoorCore>> {
        self.grants.lock().lookup(g).cloned()
    }

    /// Changes whenever a grant is removed: a server thread may keep using a
    /// door it looked up while this stays the same.
    #[inline]
    pub fn grants_gen(&self) -> u64 {
        self.grants_gen.load(Acquire)
    }

    /// We dropped the server's grant (client role): queue the release; the
    /// watcher sends queued releases in batches. True if the queue was
    /// empty (the caller then wakes the watcher).
    pub fn release_grant(&self, grant: u32, count: u32) -> bool {
        if self.is_dead() {
            return false;
        }
        let mut q = self.releases.lock();
        q.push((grant, count));
        q.len() == 1
    }

    /// We dropped a loan of the peer's arena: queue its return. It rides
    /// back with our next vanilla request on this connection
    /// ([`take_returns`](Self::take_returns)), or in a message the watcher
    /// sends within `RETURN_DELAY`. True if the watcher must be told of
    /// this connection (the caller calls `Home::returns_queued`).
    pub fn return_loan(&self, off: u64, len: u32) -> bool {
        if self.is_dead() {
            return false;
        }
        self.returns.lock().push((off, len));
        !self.returns_listed.swap(true, SeqCst)
    }

    /// Whether loan returns may be queued to ride with a request: the
    /// connection is on the watcher's list (see [`take_returns`](Self::take_returns)).
    #[inline]
    pub fn returns_waiting(&self) -> bool {
        self.returns_listed.load(Acquire)
    }

    /// Up to `max` queued loan returns, to write into a request.
    ///
    /// None without the lock while the connection is off the watcher's
    /// list: a return is queued before the connection is listed, and the
    /// list is left only by a flush that takes the whole queue. (A return
    /// queued by another thread just now may miss this request; the
    /// watcher sends it.)
    pub fn take_returns(&self, max: usize) -> Vec<(u64, u32)> {
        if !self.returns_waiting() {
            return Vec::new();
        }
        let mut q = self.returns.lock();
        let n = q.len().min(max);
        q.drain(..n).collect()
    }

    /// Queue again returns a request carried that the peer refused
    /// untaken. True as for [`return_loan`](Self::return_loan).
    pub fn requeue_returns(&self, returns: &[(u64, u32)]) -> bool {
        if self.is_dead() || returns.is_empty() {
            return false;
        }
        self.returns.lock().extend_from_slice(returns);
        !self.returns_listed.swap(true, SeqCst)
    }

    /// Send the queued loan returns, [`control::MAX_RELEASES`] to a message
    /// (the watcher, once their delay is up). The connection leaves the
    /// watcher's list first, so a return queued meanwhile lists it again.
    pub fn flush_returns(&self) {
        self.returns_listed.store(false, SeqCst);
        let returns = std::mem::take(&mut *self.returns.lock());
        for batch in returns.chunks(control::MAX_RELEASES) {
            let loans = batch.to_vec();
            if !self.send(&Ctl::Returned { loans }, &[]) {
                return;
            }
        }
    }

    /// Send the queued releases, [`control::MAX_RELEASES`] to a message.
    pub fn flush_releases(&self) {
        let queued = std::mem::take(&mut *self.releases.lock());
        for batch in queued.chunks(control::MAX_RELEASES) {
            let grants = batch.to_vec();
            if !self.send(&Ctl::Releases { grants }, &[]) {
                return;
            }
            self.releases_sent.fetch_add(1, Relaxed);
        }
    }

    /// Release messages sent so far.
    pub fn releases_sent(&self) -> u64 {
        self.releases_sent.load(Relaxed)
    }

    // ---- control requests ----

    /// Send a request and wait (bounded by [`REQUEST_TIMEOUT`] and by the
    /// calling thread's deadline) for its answer.
    pub fn request(
        &self,
        make: impl FnOnce(u64) -> Ctl,
        fds: &[std::os::fd::BorrowedFd<'_>],
    ) -> Result<Answer, CallError> {
        let req = self.next_req.fetch_add(1, Relaxed);
        self.answers.lock().insert(req, None);
        let sent = self.send(&make(req), fds);
        let deadline = Instant::now() + REQUEST_TIMEOUT;
        let mut answers = self.answers.lock();
        let outcome = loop {
            if let Some(Some(_)) = answers.get(&req) {
                break Ok(());
            }
            if !sent || self.is_dead() {
                break Err(CallError::PeerDied);
            }
            if Instant::now() >= deadline {
                break Err(CallError::BadMessage(
                    "the door's server did not answer a transfer in time",
                ));
            }
            // The call that passes the door may have a deadline of its own.
            let due = crate::context::deadline::current();
            if crate::context::deadline::passed(due) {
                break Err(CallError::TimedOut);
            }
            let mut wait = Duration::from_millis(50);
            if due != 0 {
                wait = wait.min(Duration::from_nanos(
                    due.saturating_sub(crate::sys::monotonic_ns()),
                ));
            }
            self.answer_cv.wait_for(&mut answers, wait);
        };
        let answer = answers.remove(&req).flatten();
        outcome?;
        answer.ok_or(CallError::PeerDied)
    }

    /// Store the answer to a request in flight; anything else is dropped.
    fn answer(&self, req: u64, a: Answer) {
        if let Some(waiting @ None) = self.answers.lock().get_mut(&req) {
            *waiting = Some(a);
            self.answer_cv.notify_all();
        }
    }

    /// Ticket fds sent for a call's third-party doors. The sender sent them
    /// before publishing the call, so they are queued by now or never come.
    pub fn take_tickets(self: &Arc<Self>, request: bool, slot: u32, seq: u32) -> Option<Vec<OwnedFd>> {
        if let Some(v) = self.tickets_in.lock().take(request, slot, seq) {
            return Some(v);
        }
        self.pump();
        self.tickets_in.lock().take(request, slot, seq)
    }

    /// The bulk segment of generation `generation` sent for `slot` (a
    /// request's if `request`): like tickets, sent before the header that
    /// names it, so queued by now or never coming.
    pub fn take_segment(self: &Arc<Self>, request: bool, slot: u32, generation: u32) -> Option<OwnedFd> {
        let take = || {
            let mut parked = self.segments_in.lock();
            match parked.get(&(request, slot)) {
                Some((g, _)) if *g == generation => parked.remove(&(request, slot)).map(|(_, fd)| fd),
                _ => None,
            }
        };
        if let Some(fd) = take() {
            return Some(fd);
        }
        self.pump();
        take()
    }

    /// Put `data` in our bulk segment `out` for `slot` (a request's if
    /// `request`, else a reply's), sending the segment first if it is new;
    /// the generation to name in the header.
    pub fn put_bulk(
        &self,
        out: &mut Outbox,
        request: bool,
        slot: u32,
        data: &[u8],
    ) -> Result<u32, CallError> {
        let generation = self.prepare_bulk(out, request, slot, data.len())?;
        out.write(data);
        Ok(generation)
    }

    /// Make room for `len` bytes in our bulk segment `out` for `slot`,
    /// sending the segment first if it is new; the generation to name in
    /// the header.
    pub fn prepare_bulk(
        &self,
        out: &mut Outbox,
        request: bool,
        slot: u32,
        len: usize,
    ) -> Result<u32, CallError> {
        let (generation, fresh) = out.prepare(len).map_err(|e| CallError::Local(e.to_string()))?;
        if let Some(fd) = fresh {
            let msg = Ctl::Segment {
                request,
                slot,
                generation,
            };
            if !self.send(&msg, &[fd]) {
                return Err(CallError::PeerDied);
            }
        }
        Ok(generation)
    }

    /// Sealed snapshots' memfds sent for a call (`request`) or reply on
    /// `slot`; like tickets, queued by now or never coming.
    pub fn take_buffer_fds(self: &Arc<Self>, request: bool, slot: u32, seq: u32) -> Option<Vec<OwnedFd>> {
        if let Some(v) = self.buffers_in.lock().take(request, slot, seq) {
            return Some(v);
        }
        self.pump();
        self.buffers_in.lock().take(request, slot, seq)
    }

    /// Make sure the peer has our loan arena (`fd` makes it on first use):
    /// sent once, before the first loan. False if the peer is gone.
    pub fn lend_arena<'a>(&self, fd: impl FnOnce() -> Result<BorrowedFd<'a>, CallError>) -> bool {
        let mut sent = self.pool_sent.lock();
        if !*sent {
            let Ok(fd) = fd() else { return false };
            if !self.send(&Ctl::Arena, &[fd]) {
                return false;
            }
            *sent = true;
        }
        true
    }

    /// The peer's loan arena, if it sent one (read the socket once if not).
    pub fn peer_arena(self: &Arc<Self>) -> Option<Arc<Mapping>> {
        if let Some(p) = self.peer_arena.lock().clone() {
            return Some(p);
        }
        self.pump();
        self.peer_arena.lock().clone()
    }

    /// The protocol version the peer speaks, if the connection was refused
    /// for it.
    pub fn other_version(&self) -> Option<u32> {
        *self.other_version.lock()
    }

    /// Wait for the peer's boot message.
    pub fn wait_boot(&self, timeout: Duration) -> Option<(Vec<DoorDescriptor>, Vec<OwnedFd>)> {
        let deadline = std::time::Instant::now() + timeout;
        let mut answers = self.answers.lock();
        loop {
            if let Some(b) = self.boot.lock().take() {
                return Some(b);
            }
            if self.is_dead() || std::time::Instant::now() > deadline {
                return None;
            }
            self.answer_cv.wait_for(&mut answers, Duration::from_millis(20));
        }
    }

    // ---- receiving ----

    /// Read and handle every queued message. Returns false once the peer is gone.
    pub fn pump(self: &Arc<Self>) -> bool {
        let mut buf = self.recv.lock();
        loop {
            match sys::recv_msg(self.sock.as_fd(), &mut buf) {
                Ok(Recv::Msg(n, fds, _)) => {
                    if let Some(msg) = buf.get(..n).and_then(control::decode) {
                        self.handle(msg, fds);
                    }
                    if self.is_dead() {
                        return false; // refused: nothing more is read
                    }
                }
                Ok(Recv::Empty) => return true,
                Ok(Recv::Closed) | Err(_) => {
                    drop(buf);
                    self.home.conn_died(self);
                    return false;
                }
            }
        }
    }

    /// Act on one control message. Never blocks; fds not wanted are closed.
    fn handle(self: &Arc<Self>, msg: Ctl, mut fds: Vec<OwnedFd>) {
        let home = self.home;
        match msg {
            Ctl::Hello { version, .. } => {
                // Only the first hello counts; a later one is noise.
                if !self.hello_seen.swap(true, Relaxed) && version != abi::VERSION {
                    tracing::warn!(
                        conn = self.id,
                        version,
                        "refused a peer of another protocol version"
                    );
                    *self.other_version.lock() = Some(version);
                    home.conn_died(self);
                }
            }
            Ctl::Area => {
                if fds.len() == 2 {
                    let notices = fds.pop().expect("two fds");
                    home.call_area(self, fds.pop().expect("two fds"), notices);
                }
            }
            Ctl::Kick { slot } => {
                if (slot as usize) < abi::AREA_SLOTS {
                    home.kick(self, slot);
                }
            }
            Ctl::Alert { slot, seq } => home.alert(self, slot, seq),
            Ctl::Release { grant, count } => self.take_back(grant, count),
            Ctl::Releases { grants } => self.take_back_all(grants),
            Ctl::Mint { req, grant } => {
                let core = self.lookup(grant);
                let ticket = core.and_then(|c| home.mint_ticket(&c).ok());
                match ticket {
                    Some(t1) => self.send(&Ctl::Minted { req, ok: true }, &[t1.as_fd()]),
                    None => self.send(&Ctl::Minted { req, ok: false }, &[]),
                };
            }
            Ctl::Minted { req, ok } => {
                let fd = if ok && fds.len() == 1 { fds.pop() } else { None };
                self.answer(req, Answer::Minted(fd));
            }
            Ctl::Redeem { req } => {
                let ticket = match fds.len() {
                    0 => self.adopted.lock().take(),
                    1 => home.take_ticket(fds[0].as_fd()),
                    _ => None,
                };
                // Grant before the ticket drops its hold, so the door never
                // looks unreferenced in between.
                let grant = ticket.as_ref().and_then(|t| self.grant(&t.core));
                drop(ticket);
                self.send(&Ctl::Redeemed { req, grant }, &[]);
            }
            Ctl::Redeemed { req, grant } => self.answer(req, Answer::Redeemed(grant)),
            Ctl::Tickets { request, slot, seq } => {
                if !self.tickets_in.lock().park(request, slot, seq, fds) {
                    tracing::warn!(conn = self.id, slot, "refused a ticket batch: too many parked");
                }
            }
            Ctl::Segment {
                request,
                slot,
                generation,
            } => {
                if (slot as usize) < abi::AREA_SLOTS && fds.len() == 1 {
                    let fd = fds.pop().expect("one fd");
                    let mut segments = self.segments_in.lock();
                    if segments.len() < MAX_SEGMENTS_IN || segments.contains_key(&(request, slot)) {
                        segments.insert((request, slot), (generation, fd));
                    }
                }
            }
            Ctl::Buffers { request, slot, seq } => {
                if !self.buffers_in.lock().park(request, slot, seq, fds) {
                    tracing::warn!(conn = self.id, slot, "refused sealed buffers: too many parked");
                }
            }
            Ctl::Arena => {
                let mut pool = self.peer_arena.lock();
                if pool.is_none() && fds.len() == 1 {
                    // Sealed against shrinking, so no read of it faults; of
                    // a larger file, only what a pool of ours could be is mapped.
                    match sys::check_segment(fds[0].as_fd()) {
                        Ok(size) => match Mapping::map_read(fds[0].as_fd(), size.min(abi::LOAN_ARENA_SIZE)) {
                            Ok(m) => *pool = Some(Arc::new(m)),
                            Err(_) => tracing::warn!(conn = self.id, "cannot map the peer's loan arena"),
                        },
                        Err(why) => tracing::warn!(conn = self.id, why, "refused the peer's loan arena"),
                    }
                }
            }
            Ctl::Returned { loans } => home.loans_returned(self, &loans),
            Ctl::Boot { doors } => {
                // Once per connection: a peer cannot park fds here later.
                if !self.boot_seen.swap(true, SeqCst) && fds.len() <= abi::MAX_DOORS {
                    *self.boot.lock() = Some((doors, fds));
                    let _g = self.answers.lock();
                    self.answer_cv.notify_all();
                }
            }
        }
    }

    /// The peer is gone: fail our calls into it and drop every reference
    /// it held. Called once, by its home's `conn_died` (which alerts the
    /// peer's calls into us).
    pub fn tear_down(&self) {
        {
            let _made = self.out_made.lock();
            if let Some(out) = self.out.get() {
                out.peer_died();
            }
        }
        {
            let _g = self.answers.lock();
            self.answer_cv.notify_all();
        }
        let held = {
            let mut grants = self.grants.lock();
            self.grants_gen.fetch_add(1, Release);
            grants.close()
        };
        DoorCore::drop_holders(held);
        *self.tickets_in.lock() = Parked::default();
        self.segments_in.lock().clear();
        *self.buffers_in.lock() = Parked::default();
        self.boot.lock().take();
        self.answers.lock().clear();
        self.adopted.lock().take();
        self.releases.lock().clear(); // nobody to tell
        self.returns.lock().clear();
    }
}

/// A home with no domain behind it, for testing a connection on the host:
/// nothing is served here and nothing else is connected; queued releases
/// wait for the test to flush them (the watcher's work).
#[cfg(test)]
pub(crate) mod alone {
    use super::*;

    struct Alone(Settings);

    impl Home for Alone {
        fn pid(&self) -> u32 {
            std::process::id()
        }
        fn settings(&'static self) -> &'static Settings {
            &self.0
        }
        fn conn_died(&self, conn: &Arc<Conn>) {
            if !conn.dead.swap(true, SeqCst) {
                conn.tear_down();
            }
        }
        fn call_area(&'static self, _: &Arc<Conn>, _: OwnedFd, _: OwnedFd) {}
        fn kick(&'static self, _: &Arc<Conn>, _: u32) {}
        fn alert(&self, _: &Arc<Conn>, _: u32, _: u32) {}
        fn loans_returned(&self, _: &Arc<Conn>, _: &[(u64, u32)]) {}
        fn releases_queued(&self, _: &Arc<Conn>) {}
        fn returns_queued(&self, _: &Arc<Conn>) {}
        fn remote_door(&self, conn: &Arc<Conn>, grant: u32) -> Arc<RemoteDoor> {
            Arc::new(RemoteDoor {
                conn: conn.clone(),
                grant,
                received: AtomicU32::new(1),
            })
        }
        fn forget_remote(&self, _: &RemoteDoor) {}
        fn mint_ticket(&self, _: &Arc<DoorCore>) -> std::io::Result<OwnedFd> {
            Err(std::io::ErrorKind::Unsupported.into())
        }
        fn take_ticket(&self, _: BorrowedFd<'_>) -> Option<Ticket> {
            None
        }
        fn conn_to(&self, _: u32) -> Option<Arc<Conn>> {
            None
        }
        fn add_conn(&'static self, _: OwnedFd, _: Option<u32>) -> std::io::Result<Arc<Conn>> {
            Err(std::io::ErrorKind::Unsupported.into())
        }
    }

    /// A connection over `sock`, at home nowhere.
    pub(crate) fn conn(sock: OwnedFd) -> Arc<Conn> {
        let home: &'static Alone = Box::leak(Box::new(Alone(Settings::from_env())));
        Arc::new(Conn::new(home, 1, sock, 0))
    }
}

#[cfg(test)]
mod tests {
    //! Parked ticket batches, and whole connections over a socket pair, on
    //! the host: no process and no domain.
    use super::*;
    use crate::context::error::Fault;
    use crate::object::door::{Reply, Request};

    /// Every control message waiting on `sock`.
    fn received(sock: &OwnedFd) -> Vec<Ctl> {
        let mut buf = vec![0u8; control::MAX_CTL];
        let mut msgs = Vec::new();
        while let Ok(Recv::Msg(n, _, _)) = sys::recv_msg(sock.as_fd(), &mut buf) {
            msgs.extend(control::decode(&buf[..n]));
        }
        msgs
    }

    /// A connection at home nowhere, and its peer's end of the socket.
    fn connected() -> (Arc<Conn>, OwnedFd) {
        let (mine, theirs) = sys::seqpacket_pair().unwrap();
        (alone::conn(mine), theirs)
    }

    static UNREFERENCED: AtomicU32 = AtomicU32::new(0);

    fn served() -> Arc<DoorCore> {
        let handler = |_: Request<'_>, _: &mut Reply| -> Result<(), Fault> { Ok(()) };
        static RUNNING: crate::state::running::Running = crate::state::running::Running::new();
        DoorCore::new(
            7,
            Box::new(handler),
            |_| {
                UNREFERENCED.fetch_add(1, SeqCst);
            },
            || &RUNNING,
        )
    }

    #[test]
    fn a_peer_of_another_version_is_refused() {
        let (conn, theirs) = connected();
        let hello = control::encode(&Ctl::Hello {
            pid: 1,
            version: abi::VERSION + 1,
        });
        sys::send_msg(theirs.as_fd(), &hello, &[]).unwrap();
        assert!(!conn.pump(), "nothing more is read from a refused peer");
        assert!(conn.is_dead());
        assert_eq!(conn.other_version(), Some(abi::VERSION + 1));
    }

    #[test]
    fn a_peer_of_this_version_is_kept_and_a_second_hello_is_noise() {
        let (conn, theirs) = connected();
        for version in [abi::VERSION, abi::VERSION + 1] {
            let hello = control::encode(&Ctl::Hello { pid: 1, version });
            sys::send_msg(theirs.as_fd(), &hello, &[]).unwrap();
        }
        assert!(conn.pump());
        assert!(!conn.is_dead());
        assert_eq!(conn.other_version(), None);
    }

    #[test]
    fn a_hung_up_peer_drops_every_grant_it_held() {
        let (conn, theirs) = connected();
        let door = served();
        let g = conn.grant(&door).unwrap();
        assert_eq!(conn.grant(&door), Some(g), "the same door, the same grant");
        assert_eq!(door.holder_count(), 1, "one holder however often granted");
        let before = UNREFERENCED.load(SeqCst);
        drop(theirs);
        assert!(!conn.pump());
        assert!(conn.is_dead());
        assert_eq!(door.holder_count(), 0);
        assert!(
            UNREFERENCED.load(SeqCst) > before,
            "unreferenced once the peer is gone"
        );
        assert_eq!(conn.grant(&door), None, "nothing is granted to a dead peer");
        assert!(conn.lookup(g).is_none());
    }

    #[test]
    fn a_release_takes_back_only_what_was_sent() {
        let (conn, theirs) = connected();
        let door = served();
        let g = conn.grant(&door).unwrap();
        conn.grant(&door).unwrap();
        let release = |count| control::encode(&Ctl::Release { grant: g, count });
        sys::send_msg(theirs.as_fd(), &release(1), &[]).unwrap();
        assert!(conn.pump());
        assert!(conn.lookup(g).is_some(), "one of two sends is still held");
        sys::send_msg(theirs.as_fd(), &release(1), &[]).unwrap();
        assert!(conn.pump());
        assert!(conn.lookup(g).is_none());
        assert_eq!(door.holder_count(), 0);
    }

    #[test]
    fn dropped_remote_doors_are_released_in_batches() {
        let (conn, theirs) = connected();
        let n = 3 * control::MAX_RELEASES as u32 + 1;
        let doors: Vec<_> = (0..n).map(|g| conn.home.remote_door(&conn, g)).collect();
        drop(doors);
        assert!(
            received(&theirs).is_empty(),
            "queued, not sent by the dropping thread"
        );
        conn.flush_releases();
        let released: Vec<u32> = received(&theirs)
            .into_iter()
            .flat_map(|m| match m {
                Ctl::Releases { grants } => grants.into_iter().map(|(g, _)| g).collect::<Vec<_>>(),
                other => panic!("unexpected {other:?}"),
            })
            .collect();
        assert_eq!(released.len(), n as usize, "every door released once");
        assert!(
            conn.releases_sent() <= 5,
            "{} messages for {n} releases",
            conn.releases_sent()
        );
    }

    fn fds(n: usize) -> Vec<OwnedFd> {
        (0..n).map(|_| sys::eventfd().unwrap()).collect()
    }

    #[test]
    fn a_batch_is_taken_only_by_its_own_call() {
        let mut p = Parked::default();
        assert!(p.park(true, 3, 7, fds(2)));
        assert!(p.take(true, 3, 8).is_none(), "another call's sequence");
        assert!(p.take(false, 3, 7).is_none(), "a reply's batch is another");
        assert_eq!(p.take(true, 3, 7).map(|v| v.len()), Some(2));
        assert!(p.take(true, 3, 7).is_none(), "taken once");
        assert_eq!(p.fds, 0);
    }

    #[test]
    fn a_newer_batch_replaces_a_stale_one_and_the_total_is_bounded() {
        let mut p = Parked::default();
        assert!(p.park(true, 1, 1, fds(3)));
        assert!(p.park(true, 1, 2, fds(1)), "the stale batch goes");
        assert_eq!(p.fds, 1);
        assert!(!p.park(true, abi::AREA_SLOTS as u32, 1, fds(1)), "no such slot");
        assert!(
            !p.park(true, 2, 1, fds(abi::MAX_DOORS + 1)),
            "more than a call may carry"
        );
        for slot in 2..6 {
            p.park(false, slot, 1, fds(abi::MAX_DOORS));
        }
        assert!(p.fds <= MAX_PARKED_FDS, "never more than the bound: {}", p.fds);
    }
}
