//! The caller's side of a cross-domain call: LRPC channels.
//!
//! Each client thread leases one slot of the connection's call area the
//! first time it calls over that connection and keeps it (thread-local)
//! while it keeps calling, so a server thread bound to the slot is ready for
//! it: direct hand-off with no queue in between. A thread that stops calling
//! loses its slot to any newcomer that needs one (see `lease`). A call writes its arguments into the slot, bumps
//! `req_seq`, and waits for `rep_seq` to match: spinning while the server
//! runs on another CPU, then sleeping on the futex.
//!
//! The fast path (≤ 16 bytes, no doors) touches only the slot's two header
//! lines; the vanilla path adds the data region and door descriptors.

use std::cell::{Cell, RefCell};
use std::os::fd::AsFd;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{Ordering::*, fence};

use crate::abi::wire::Ctl;
use crate::abi::*;
use crate::conn::Conn;
use crate::door::{Door, RemoteDoor, Reply, check_sizes};
use crate::error::CallError;
use crate::lease::{Claim, Leases};
use crate::shuttle::{self, Shuttle};
use crate::spin::Spinner;
use crate::stats::{self, Counters, Path};
use crate::sys::{self, Mapping};
use crate::umem::Slot;
use crate::{settings, transfer};

/// The call area this domain created for its calls over one connection.
pub(crate) struct OutArea {
    map: Arc<Mapping>,
    /// Which thread uses which slot (see `lease`).
    leases: Leases,
}

impl OutArea {
    /// Create the area and hand it to the peer.
    fn create(conn: &Conn) -> Result<Arc<OutArea>, CallError> {
        let local = |e: std::io::Error| CallError::Local(e.to_string());
        let fd = sys::sealed_memfd("lintel-calls", AREA_SIZE).map_err(local)?;
        let map = Arc::new(Mapping::map(fd.as_fd(), AREA_SIZE).map_err(local)?);
        if !conn.send(&Ctl::Area, &[fd.as_fd()]) {
            return Err(CallError::PeerDied);
        }
        Ok(Arc::new(OutArea {
            map,
            leases: Leases::new(SLOTS),
        }))
    }

    fn slot(&self, i: u32) -> Slot {
        Slot::new(self.map.clone(), AREA_HEADER + i as usize * SLOT_SIZE).expect("slot index in range")
    }

    /// Wake every caller waiting in this area: the server died.
    pub fn peer_died(&self) {
        for i in 0..SLOTS as u32 {
            let s = self.slot(i);
            s.word(OFF_REP_SEQ).store(SEQ_DEAD, SeqCst);
            sys::futex_wake(s.word(OFF_REP_SEQ), u32::MAX);
        }
        self.leases.wake_all();
    }
}

/// One thread's lease of one slot.
struct Lease {
    conn: Arc<Conn>,
    area: Arc<OutArea>,
    claim: Claim,
    slot: Slot,
    /// The CPU this thread ran on during its last call.
    cpu: Cell<u32>,
    counters: Counters,
    /// This thread's shuttle (a lease never leaves its thread).
    shuttle: Arc<Shuttle>,
}

impl Lease {
    #[inline]
    fn next_seq(&self) -> u32 {
        self.area.leases.next_seq(self.claim, SEQ_DEAD)
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.area.leases.release(self.claim);
    }
}

thread_local! {
    static LEASES: RefCell<Vec<Rc<Lease>>> = const { RefCell::new(Vec::new()) };
}

/// This thread's slot on `conn`, busy for one call: the slot it leased
/// before if it still has it, else a new lease.
#[inline]
fn lease(conn: &Arc<Conn>) -> Result<Rc<Lease>, CallError> {
    let found = LEASES.with(|l| l.borrow().iter().find(|x| Arc::ptr_eq(&x.conn, conn)).cloned());
    match found {
        Some(l) if l.area.leases.begin(l.claim) => Ok(l),
        Some(l) => {
            forget(&l); // taken by another thread while this one was idle
            new_lease(conn)
        }
        None => new_lease(conn),
    }
}

#[cold]
fn new_lease(conn: &Arc<Conn>) -> Result<Rc<Lease>, CallError> {
    // Forget leases on dead connections so their areas can go.
    LEASES.with(|l| l.borrow_mut().retain(|x| !x.conn.is_dead()));
    let area = {
        let mut out = conn.out.lock();
        match &*out {
            Some(a) => a.clone(),
            None => {
                let a = OutArea::create(conn)?;
                *out = Some(a.clone());
                a
            }
        }
    };
    let claim = area
        .leases
        .take_or_wait(|| conn.is_dead())
        .ok_or(CallError::PeerDied)?;
    let lease = Rc::new(Lease {
        conn: conn.clone(),
        slot: area.slot(claim.index),
        area,
        claim,
        cpu: Cell::new(u32::MAX),
        counters: Counters::new(),
        shuttle: shuttle::current_arc(),
    });
    LEASES.with(|l| l.borrow_mut().push(lease.clone()));
    Ok(lease)
}

/// Drop this thread's (void) lease; its slot is no longer its own.
#[cold]
fn forget(lease: &Rc<Lease>) {
    LEASES.with(|l| l.borrow_mut().retain(|x| !Rc::ptr_eq(x, lease)));
}

/// Call a door served by another domain, counting it by path.
#[inline]
pub(crate) fn call(rd: &RemoteDoor, data: &[u8], doors: &[Door], reply: &mut Reply) -> Result<(), CallError> {
    let vanilla = data.len() > INLINE || !doors.is_empty() || settings::force_vanilla();
    let path = if vanilla { Path::Vanilla } else { Path::Fast };
    // Guards: anything unusual leaves for the slow paths.
    let taken = check_sizes("arguments", data.len(), doors.len()).and_then(|()| {
        if rd.conn.is_dead() {
            return Err(CallError::PeerDied);
        }
        lease(&rd.conn)
    });
    let lease = match taken {
        Ok(lease) => lease,
        Err(e) => {
            stats::call(path, data.len(), doors.len(), None);
            return Err(e);
        }
    };
    let r = call_on_slot(&lease, rd, data, doors, reply, vanilla);
    let result = r.as_ref().ok().map(|_| (reply.data.len(), reply.doors.len()));
    lease.counters.call(path, data.len(), doors.len(), result);
    if !lease.area.leases.end(lease.claim) {
        forget(&lease); // handed back: another thread waits for a slot
    }
    r
}

/// The fast and vanilla paths: post in this thread's slot, wait, take the
/// reply. `vanilla` puts the data in the data region even when it would fit
/// inline (forced for the INKS "message" comparison).
#[inline]
fn call_on_slot(
    lease: &Lease,
    rd: &RemoteDoor,
    data: &[u8],
    doors: &[Door],
    reply: &mut Reply,
    vanilla: bool,
) -> Result<(), CallError> {
    let conn = &rd.conn;
    let slot = &lease.slot;
    let seq = lease.next_seq();
    let index = lease.claim.index;

    // Post the request.
    let in_call = shuttle::enter_call(&lease.shuttle, conn.id, index, seq);
    let alerted = lease.shuttle.is_alerted();
    let alert = if alerted { FLAG_ALERT } else { 0 };
    slot.set(OFF_GRANT, rd.grant);
    slot.set(OFF_FLAGS, alert | if vanilla { FLAG_VANILLA } else { 0 });
    slot.set(OFF_IN_LEN, data.len() as u32);
    slot.set(OFF_CLIENT_CPU, lease.cpu.get());
    slot.write(payload_offset(OFF_IN_INLINE, data.len(), vanilla), data);
    let granted = if doors.is_empty() {
        Vec::new()
    } else {
        transfer::send_doors(conn, doors, slot, true, index, seq)?
    };
    slot.set(OFF_IN_DOORS, doors.len() as u32);
    slot.word(OFF_REQ_SEQ).store(seq, Release);
    fence(SeqCst);
    let running = match slot.get(OFF_SERVER_STATE) {
        SPINNING | BUSY => true,
        SLEEPING => {
            sys::futex_wake(slot.word(OFF_REQ_SEQ), 1);
            false
        }
        _ => {
            kick(conn, index)?;
            false
        }
    };
    if !alerted && lease.shuttle.is_alerted() {
        alert_late(conn, index, seq);
    }

    // Wait for the reply.
    let waited = wait_reply(slot, seq, conn, &lease.cpu, running);
    drop(in_call);
    waited?;

    // Take the reply (a private copy; validated before use).
    let status = slot.get(OFF_STATUS);
    let out_len = slot.get(OFF_OUT_LEN);
    if status != ST_OK {
        if status & ST_UNTAKEN != 0 {
            transfer::take_back(conn, &granted);
        }
        return Err(CallError::from_status(status & !ST_UNTAKEN, out_len));
    }
    let out_len = out_len as usize;
    let out_doors = slot.get(OFF_OUT_DOORS) as usize;
    if out_len > DATA_CAP || out_doors > MAX_DOORS {
        return Err(CallError::BadMessage("reply header out of range"));
    }
    reply.clear();
    if out_len > 0 {
        reply.data.resize(out_len, 0);
        slot.read(payload_offset(OFF_OUT_INLINE, out_len, vanilla), &mut reply.data);
    }
    if out_doors > 0 {
        transfer::receive_doors(conn, slot, out_doors, false, index, seq, &mut reply.doors)?;
    }
    Ok(())
}

/// An alert that arrived while the request was being posted: forward it.
#[cold]
fn alert_late(conn: &Conn, index: u32, seq: u32) {
    conn.send(&Ctl::Alert { slot: index, seq }, &[]);
}

#[cold]
fn kick(conn: &Conn, index: u32) -> Result<(), CallError> {
    if conn.send(&Ctl::Kick { slot: index }, &[]) {
        Ok(())
    } else {
        Err(CallError::PeerDied)
    }
}

/// Wait until `rep_seq == seq`: spin while the server runs on another CPU,
/// then sleep on the futex. The watcher stores `SEQ_DEAD` if the server dies.
///
/// With the server running when the request was posted (`running`), its
/// reply usually lands within a few hundred nanoseconds: poll for it alone
/// first, with nothing else on the way (no clock, no CPU lookup).
#[inline]
fn wait_reply(slot: &Slot, seq: u32, conn: &Conn, cpu: &Cell<u32>, running: bool) -> Result<(), CallError> {
    let rep = slot.word(OFF_REP_SEQ);
    if running && crate::domain::get().settings.spin.load(Relaxed) {
        for _ in 0..HOT_SPINS {
            if rep.load(Acquire) == seq {
                if seq.is_multiple_of(64) {
                    cpu.set(sys::current_cpu());
                }
                return Ok(());
            }
            std::hint::spin_loop();
        }
    }
    wait_reply_slow(slot, seq, conn, cpu)
}

/// Polls of the reply word before the full wait; a few hundred ns.
const HOT_SPINS: u32 = 16;

#[cold]
fn wait_reply_slow(slot: &Slot, seq: u32, conn: &Conn, cpu: &Cell<u32>) -> Result<(), CallError> {
    let rep = slot.word(OFF_REP_SEQ);
    let mut spinner = Spinner::new(crate::domain::get().settings.spin_budget_ns());
    // Where we run: the server spins for our next call only while we run
    // elsewhere. Published with the next request, not now, so as not to
    // take the request's cache line back while the server reads it.
    let me = sys::current_cpu();
    cpu.set(me);
    loop {
        let r = rep.load(Acquire);
        if r == seq {
            return Ok(());
        }
        if r == SEQ_DEAD || conn.is_dead() {
            return Err(CallError::PeerDied);
        }
        let st = slot.get(OFF_SERVER_STATE);
        let server_elsewhere = (st == BUSY || st == SPINNING) && slot.get(OFF_SERVER_CPU) != me;
        if server_elsewhere && spinner.spin() {
            continue;
        }
        sleep_for_reply(slot, seq)?;
        spinner = Spinner::new(0);
    }
}

/// Register as sleeping, re-check, then sleep (no lost wake-up).
#[cold]
fn sleep_for_reply(slot: &Slot, seq: u32) -> Result<(), CallError> {
    let rep = slot.word(OFF_REP_SEQ);
    slot.set(OFF_CLIENT_STATE, SLEEPING);
    fence(SeqCst);
    let r = rep.load(Acquire);
    if r != seq && r != SEQ_DEAD {
        sys::futex_wait(rep, r, Some(std::time::Duration::from_millis(100)));
    }
    slot.set(OFF_CLIENT_STATE, RUNNING);
    Ok(())
}
