//! A connection: the private link between this domain and one other.
//!
//! One `SOCK_SEQPACKET` socket per pair of domains that talk anchors
//! everything the peer holds of ours: when the peer dies the kernel closes
//! its end, we see hang-up, and every grant it held is released and every
//! call waiting on it fails. Each side creates its own call area (a sealed
//! memfd) for the calls it makes, and sends it over the socket.
//!
//! The grant table is the server-private translation from the small door
//! numbers a peer uses to our doors. A peer can name only grants we made for
//! it on this connection; every index it sends is checked here.

use std::collections::HashMap;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering::*};
use std::time::Duration;

use parking_lot::{Condvar, Mutex};

use crate::abi;
use crate::channel::OutArea;
use crate::door::DoorCore;
use crate::server::InArea;
use crate::sys::{self, Recv};
use crate::wire::{self, Ctl, WireDoor};

/// Doors we serve that the peer holds, by grant index.
#[derive(Default)]
struct Grants {
    entries: Vec<Option<Grant>>,
    by_door: HashMap<usize, u32>,
    free: Vec<u32>,
}

struct Grant {
    core: Arc<DoorCore>,
    /// Times sent minus times released.
    count: u32,
}

impl Grants {
    fn grant(&mut self, core: &Arc<DoorCore>) -> u32 {
        let key = Arc::as_ptr(core) as usize;
        if let Some(&g) = self.by_door.get(&key) {
            if let Some(e) = &mut self.entries[g as usize] {
                e.count = e.count.saturating_add(1);
                return g;
            }
        }
        core.add_holder();
        let e = Some(Grant {
            core: core.clone(),
            count: 1,
        });
        let g = match self.free.pop() {
            Some(g) => {
                self.entries[g as usize] = e;
                g
            }
            None => {
                self.entries.push(e);
                (self.entries.len() - 1) as u32
            }
        };
        self.by_door.insert(key, g);
        g
    }

    #[inline]
    fn lookup(&self, g: u32) -> Option<&Arc<DoorCore>> {
        self.entries.get(g as usize)?.as_ref().map(|e| &e.core)
    }

    /// Returns the door if this release dropped the peer's last reference.
    fn release(&mut self, g: u32, count: u32) -> Option<Arc<DoorCore>> {
        let e = self.entries.get_mut(g as usize)?.as_mut()?;
        e.count = e.count.saturating_sub(count);
        if e.count > 0 {
            return None;
        }
        let e = self.entries[g as usize].take()?;
        self.by_door.remove(&(Arc::as_ptr(&e.core) as usize));
        self.free.push(g);
        Some(e.core)
    }

    fn drain(&mut self) -> Vec<Arc<DoorCore>> {
        self.by_door.clear();
        self.free.clear();
        self.entries.drain(..).flatten().map(|e| e.core).collect()
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
    peer_pid: AtomicU32,
    pub sock: OwnedFd,
    pub dead: AtomicBool,
    recv: Mutex<Vec<u8>>,
    pub out: Mutex<Option<Arc<OutArea>>>,
    pub inb: Mutex<Option<Arc<InArea>>>,
    grants: Mutex<Grants>,
    answers: Mutex<HashMap<u64, Answer>>,
    answer_cv: Condvar,
    tickets_in: Mutex<HashMap<(bool, u32, u32), Vec<OwnedFd>>>,
    boot: Mutex<Option<(Vec<WireDoor>, Vec<OwnedFd>)>>,
    pub adopted: Mutex<Option<Ticket>>,
    next_req: AtomicU64,
}

/// Most ticket batches parked for calls not yet read; more is a flood.
const MAX_PARKED: usize = 1024;

impl Conn {
    pub fn new(id: u64, sock: OwnedFd, peer_pid: u32) -> Conn {
        Conn {
            id,
            peer_pid: AtomicU32::new(peer_pid),
            sock,
            dead: AtomicBool::new(false),
            recv: Mutex::new(vec![0u8; wire::MAX_CTL]),
            out: Mutex::new(None),
            inb: Mutex::new(None),
            grants: Mutex::new(Grants::default()),
            answers: Mutex::new(HashMap::new()),
            answer_cv: Condvar::new(),
            tickets_in: Mutex::new(HashMap::new()),
            boot: Mutex::new(None),
            adopted: Mutex::new(None),
            next_req: AtomicU64::new(1),
        }
    }

    /// The peer's pid, 0 if not verified.
    pub fn peer_pid(&self) -> u32 {
        self.peer_pid.load(Relaxed)
    }

    #[inline]
    pub fn is_dead(&self) -> bool {
        self.dead.load(Acquire)
    }

    /// Send a control message; errors mean the peer is gone, which the
    /// watcher reports on its own.
    pub fn send(&self, msg: &Ctl, fds: &[std::os::fd::BorrowedFd<'_>]) -> bool {
        sys::send_msg(self.sock.as_fd(), &wire::encode(msg), fds).is_ok()
    }

    // ---- grants (server role) ----

    pub fn grant(&self, core: &Arc<DoorCore>) -> u32 {
        self.grants.lock().grant(core)
    }

    /// The door behind grant `g`, if the peer holds one there.
    #[inline]
    pub fn lookup(&self, g: u32) -> Option<Arc<DoorCore>> {
        self.grants.lock().lookup(g).cloned()
    }

    /// Tell the server we dropped its grant (client role).
    pub fn release_grant(&self, grant: u32, count: u32) {
        if !self.is_dead() {
            self.send(&Ctl::Release { grant, count }, &[]);
        }
    }

    // ---- control requests ----

    /// Send a request and wait for its answer; `None` if the peer died.
    pub fn request(
        &self,
        make: impl FnOnce(u64) -> Ctl,
        fds: &[std::os::fd::BorrowedFd<'_>],
    ) -> Option<Answer> {
        let req = self.next_req.fetch_add(1, Relaxed);
        if !self.send(&make(req), fds) {
            return None;
        }
        let mut answers = self.answers.lock();
        loop {
            if let Some(a) = answers.remove(&req) {
                return Some(a);
            }
            if self.is_dead() {
                return None;
            }
            self.answer_cv.wait_for(&mut answers, Duration::from_millis(50));
        }
    }

    fn answer(&self, req: u64, a: Answer) {
        self.answers.lock().insert(req, a);
        self.answer_cv.notify_all();
    }

    /// Ticket fds sent for a call's third-party doors. The sender sent them
    /// before publishing the call, so they are queued by now or never come.
    pub fn take_tickets(self: &Arc<Self>, request: bool, slot: u32, seq: u32) -> Option<Vec<OwnedFd>> {
        let key = (request, slot, seq);
        if let Some(v) = self.tickets_in.lock().remove(&key) {
            return Some(v);
        }
        self.pump();
        self.tickets_in.lock().remove(&key)
    }

    /// Wait for the peer's boot message.
    pub fn wait_boot(&self, timeout: Duration) -> Option<(Vec<WireDoor>, Vec<OwnedFd>)> {
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
                Ok(Recv::Msg(n, fds)) => {
                    if let Some(msg) = buf.get(..n).and_then(wire::decode) {
                        self.handle(msg, fds);
                    }
                }
                Ok(Recv::Empty) => return true,
                Ok(Recv::Closed) | Err(_) => {
                    drop(buf);
                    crate::domain::get().conn_died(self);
                    return false;
                }
            }
        }
    }

    /// Act on one control message. Never blocks; fds not wanted are closed.
    fn handle(self: &Arc<Self>, msg: Ctl, mut fds: Vec<OwnedFd>) {
        let domain = crate::domain::get();
        match msg {
            Ctl::Hello { .. } => {}
            Ctl::Area => {
                let mut inb = self.inb.lock();
                if inb.is_none() && fds.len() == 1 {
                    match InArea::map(fds[0].as_fd()) {
                        Ok(area) => *inb = Some(Arc::new(area)),
                        Err(why) => tracing::warn!(conn = self.id, why, "refused call area"),
                    }
                }
            }
            Ctl::Kick { slot } => {
                let inb = self.inb.lock().clone();
                if let Some(inb) = inb {
                    if (slot as usize) < abi::SLOTS {
                        domain.pool.kick(self.clone(), inb, slot);
                    }
                }
            }
            Ctl::Alert { slot } => {
                let inb = self.inb.lock().clone();
                if let Some(inb) = inb {
                    inb.alert(slot);
                }
            }
            Ctl::Release { grant, count } => {
                let gone = self.grants.lock().release(grant, count);
                if let Some(core) = gone {
                    core.drop_holder();
                }
            }
            Ctl::Mint { req, grant } => {
                let core = self.lookup(grant);
                let ticket = core.and_then(|c| domain.mint_ticket(&c).ok());
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
                    1 => domain.take_ticket(fds[0].as_fd()),
                    _ => None,
                };
                // Grant before the ticket drops its hold, so the door never
                // looks unreferenced in between.
                let grant = ticket.as_ref().map(|t| self.grant(&t.core));
                drop(ticket);
                self.send(&Ctl::Redeemed { req, grant }, &[]);
            }
            Ctl::Redeemed { req, grant } => self.answer(req, Answer::Redeemed(grant)),
            Ctl::Tickets { request, slot, seq } => {
                let mut parked = self.tickets_in.lock();
                if parked.len() < MAX_PARKED && fds.len() <= abi::MAX_DOORS {
                    parked.insert((request, slot, seq), fds);
                }
            }
            Ctl::Boot { doors } => {
                *self.boot.lock() = Some((doors, fds));
                let _g = self.answers.lock();
                self.answer_cv.notify_all();
            }
        }
    }

    /// The peer is gone: fail our calls into it, alert its calls into us,
    /// and drop every reference it held. Called once, by `Domain::conn_died`.
    pub fn tear_down(&self) {
        if let Some(out) = self.out.lock().as_ref() {
            out.peer_died();
        }
        if let Some(inb) = self.inb.lock().as_ref() {
            inb.caller_died();
        }
        {
            let _g = self.answers.lock();
            self.answer_cv.notify_all();
        }
        let held = self.grants.lock().drain();
        for core in held {
            core.drop_holder();
        }
        self.tickets_in.lock().clear();
        self.adopted.lock().take();
    }
}
