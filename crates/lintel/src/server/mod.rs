//! The server's side of cross-domain calls.
//!
//! A peer's call area is mapped here after checking its seals and size. A
//! server thread binds to a slot when the client kicks it and stays bound
//! while calls keep coming (spinning briefly, then sleeping on the slot's
//! futex), so a client thread's next call is handed straight to it.
//!
//! Everything read from the slot is untrusted: header words are copied out
//! once, then checked (lengths, door count, grant) before any handler runs.

use std::os::fd::BorrowedFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering::*};
use std::time::Duration;

use parking_lot::Mutex;

use crate::abi::{
    AREA_SIZE, BUSY, DATA_CAP, FLAG_ALERT, FLAG_VANILLA, INLINE, MAX_BUFFERS, OFF_IN_INLINE, OFF_OUT_BUFS,
    OFF_OUT_DOORS, OFF_OUT_INLINE, OFF_OUT_LEN, OFF_OUT_SEG, OFF_SERVER_CPU, OFF_SERVER_STATE, OFF_STATUS,
    SLOTS, SPINNING, ST_OK, ST_UNTAKEN, payload_offset,
};
use crate::context::error::CallError;
use crate::context::shuttle::{self, Shuttle};
use crate::context::stats::{Counters, Path};
use crate::object::buffer;
use crate::object::conn::Conn;
use crate::object::door::{ActiveCall, Door, DoorCore, Ran, Reply, Request, check_sizes};
use crate::state::bulk::SlotBulk;
use crate::state::handshake::{self, AlertBox, Binding, Shared};
use crate::state::running::Runner;
use crate::state::workers::Pool;
use crate::sys::spin::Spinner;
use crate::sys::umem::{Polled, ReplyHeader, RequestHeader, Slot, SyncWord};
use crate::sys::{self, Mapping};
use crate::{context::deadline, object::transfer};

/// Server-private state of one slot of a peer's call area.
struct SlotServer {
    /// Who serves the slot (model-checked in `handshake`).
    binding: Binding<AtomicU32>,
    unbind: AtomicBool,
    /// The request being (or last) served, and the last one whose caller
    /// was alerted (model-checked in `handshake`).
    alerts: AlertBox<AtomicU32>,
    shuttle: Mutex<Option<Arc<Shuttle>>>,
    /// Doors of the last reply, kept until the caller has read it (its next
    /// request on the slot shows that). A door the caller passed in and gets
    /// back travels as the caller's own grant: were our copy dropped now, our
    /// release could reach the caller before the reply and retire the grant
    /// the reply names.
    pinned: Mutex<Vec<Door>>,
    has_pinned: AtomicBool,
}

impl SlotServer {
    fn new() -> SlotServer {
        SlotServer {
            binding: Binding(AtomicU32::new(handshake::IDLE)),
            unbind: AtomicBool::new(false),
            alerts: AlertBox {
                last_seq: AtomicU32::new(0),
                alerted_seq: AtomicU32::new(0),
            },
            shuttle: Mutex::new(None),
            pinned: Mutex::new(Vec::new()),
            has_pinned: AtomicBool::new(false),
        }
    }

    /// Request `seq` starts on the worker whose shuttle is `shuttle`: its
    /// alert starts as the caller's was, when it posted (`flagged`) or since
    /// (see [`InArea::alert`]).
    #[inline]
    fn begin(&self, seq: u32, flagged: bool, shuttle: &Shuttle) {
        shuttle.clear_alert();
        if self.alerts.begin::<Shared>(seq, flagged) {
            shuttle.set_alert();
        }
    }

    /// Alert the thread serving the slot, if one is.
    fn alert_thread(&self) {
        if let Some(sh) = self.shuttle.lock().clone() {
            sh.alert();
        }
    }

    /// The request being (or last) served.
    fn last_seq(&self) -> u32 {
        self.alerts.last_seq.load(Relaxed)
    }
}

/// A peer's call area, mapped here.
pub(crate) struct InArea {
    map: Arc<Mapping>,
    slots: Vec<SlotServer>,
    /// Each slot's bulk segments: the caller's for arguments, ours for
    /// results (used by the thread serving the slot).
    bulk: Vec<Mutex<SlotBulk>>,
}

impl InArea {
    pub fn map(fd: BorrowedFd<'_>) -> Result<InArea, &'static str> {
        sys::check_sealed_memfd(fd, AREA_SIZE)?;
        let map = Mapping::map(fd, AREA_SIZE).map_err(|_| "cannot map call area")?;
        Ok(InArea {
            map: Arc::new(map),
            slots: (0..SLOTS).map(|_| SlotServer::new()).collect(),
            bulk: (0..SLOTS).map(|_| Mutex::new(SlotBulk::default())).collect(),
        })
    }

    fn slot(&self, i: u32) -> Slot {
        Slot::of_area(&self.map, i)
    }

    /// Queue `slot` for a thread unless one has it already.
    pub fn claim_for_queue(&self, slot: u32) -> bool {
        self.slots[slot as usize].binding.claim_for_queue()
    }

    pub fn unbind_requested(&self, slot: u32) -> bool {
        self.slots[slot as usize].unbind.load(Relaxed)
    }

    pub fn request_unbind(&self, slot: u32) {
        self.slots[slot as usize].unbind.store(true, SeqCst);
        sys::futex_wake(self.slot(slot).sync(SyncWord::ReqSeq), u32::MAX);
    }

    /// The caller on `slot` was alerted during request `seq`: note it for
    /// the request, and alert the thread serving it if one has started.
    ///
    /// With [`SlotServer::begin`] the alert is never lost (`handshake`,
    /// model-checked). An alert for a request that has just finished can
    /// reach the next one (an early wake-up, never a hang).
    pub fn alert(&self, slot: u32, seq: u32) {
        let Some(ss) = self.slots.get(slot as usize) else {
            return;
        };
        if ss.alerts.alert::<Shared>(seq) {
            ss.alert_thread();
        }
    }

    /// The calling domain died: alert every call it had here and release
    /// the threads bound to its slots. Their replies go nowhere.
    ///
    /// A call that has not started by now never starts: [`handle`] reads
    /// the connection's death after [`SlotServer::begin`] publishes the
    /// call, and this reads `last_seq` after the death is published. The
    /// worker's fence there is the light one of an asymmetric pair, so this
    /// side's is the heavy one, once for every slot: each slot's running
    /// call (the one `last_seq` names) is then alerted without a fence of
    /// its own.
    pub fn caller_died(&self) {
        crate::sys::fence::heavy();
        for (i, ss) in self.slots.iter().enumerate() {
            ss.alerts.alerted_seq.store(ss.last_seq(), Relaxed);
            ss.alert_thread();
            ss.unbind.store(true, SeqCst);
            // The slot's thread lets go now, not after a sleep: were it
            // running a call, the wake-up alone would find nobody asleep.
            handshake::caller_gone::<Shared>(&handshake::Words::of(&self.slot(i as u32)));
            ss.pinned.lock().clear();
        }
    }
}

/// A slot with a request and no thread bound to it.
#[derive(Clone)]
pub(crate) struct Work {
    pub conn: Arc<Conn>,
    pub area: Arc<InArea>,
    pub slot: u32,
}

impl crate::state::workers::Work for Work {
    fn same(&self, other: &Work) -> bool {
        Arc::ptr_eq(&self.area, &other.area) && self.slot == other.slot
    }

    fn unbind_requested(&self) -> bool {
        self.area.unbind_requested(self.slot)
    }

    fn request_unbind(&self) {
        self.area.request_unbind(self.slot)
    }
}

/// A server thread: serve whichever slot the pool hands us. (Never inlined:
/// the benchmark counts the instructions of the worker threads by this name.)
#[inline(never)]
pub(crate) fn run_worker(pool: &'static Pool<Work>) {
    let mut bufs = Buffers {
        args: Vec::with_capacity(DATA_CAP),
        reply: Reply::new(),
        door: None,
        reply_header: None,
        spinner: false,
        shared_cpu: 0,
        counters: Counters::new(),
        shuttle: shuttle::current_arc(),
        runner: crate::state::running::workers().register(),
    };
    loop {
        let w = pool.take();
        serve(&w, &mut bufs, pool);
        bufs.door = None;
        pool.went_idle();
    }
}

/// A worker's private state, kept across calls.
struct Buffers {
    args: Vec<u8>,
    reply: Reply,
    /// The door of the last call: the next call on the same grant skips the
    /// grant table's lock while the table's generation is unchanged.
    door: Option<(u32, u64, Arc<DoorCore>)>,
    /// What the bound slot's reply header holds, as this worker last wrote
    /// it: a small success of this many bytes (`None`: unknown, after a
    /// bind or any other reply). The fast path then stores only what
    /// changes: every store before the reply is published delays it. Only
    /// this worker writes the header while bound; a caller that scribbles on
    /// it garbles no reply but its own.
    reply_header: Option<u32>,
    /// Whether this worker holds the domain's spinning role.
    spinner: bool,
    /// Spins cut short in a row because the caller ran on our CPU.
    shared_cpu: u32,
    counters: Counters,
    /// This worker thread's shuttle.
    shuttle: Arc<Shuttle>,
    /// Where this worker publishes the door of its fast call.
    runner: Arc<Runner>,
}

/// Stay bound to one slot, serving its calls, until asked to let go or the
/// caller dies.
fn serve(w: &Work, bufs: &mut Buffers, pool: &'static Pool<Work>) {
    let _caller = serving_for(Caller {
        connection: w.conn.id,
        pid: w.conn.peer_pid(),
    });
    let ss = &w.area.slots[w.slot as usize];
    let slot = w.area.slot(w.slot);
    ss.binding.bind();
    bufs.reply_header = None;
    ss.unbind.store(false, SeqCst);
    *ss.shuttle.lock() = Some(bufs.shuttle.clone());
    pool.bound(w);
    loop {
        if let Some(seq) = wait_request(pool, &slot, ss, &w.conn, &mut bufs.spinner, &mut bufs.shared_cpu) {
            handle(w, ss, &slot, seq, bufs);
            if !pool.has_queued() {
                continue;
            }
        }
        // Let go: publish UNBOUND, then look once more, so a client that
        // posted meanwhile either is served here or saw UNBOUND and kicked.
        ss.binding.unbind();
        let pending = handshake::let_go::<Shared>(&handshake::Words::of(&slot), ss.last_seq());
        if let Some(r) = pending
            && !w.conn.is_dead()
            && ss.binding.rebind()
        {
            // Another worker may have bound, replied and let go meanwhile.
            bufs.reply_header = None;
            slot.set(OFF_SERVER_STATE, BUSY);
            handle_late(w, ss, &slot, r, bufs);
            continue;
        }
        break;
    }
    if std::mem::take(&mut bufs.spinner) {
        pool.give_up_spinning();
    }
    *ss.shuttle.lock() = None;
    pool.unbound(w);
}

/// Another process whose call a server thread is serving: the peer of the
/// connection the call came in on, as the kernel named it when the
/// connection was made (`SO_PEERCRED`), never as the peer claims.
///
/// A server that acts on a caller's behalf (a file service checking
/// permissions with the caller's credentials, say) asks [`caller`] which
/// process that is. A thread binds to one caller's slot at a time, so this
/// costs a call nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Caller {
    connection: u64,
    pid: u32,
}

impl Caller {
    /// The calling process, if the kernel vouched for it when the
    /// connection was made (a connection made any other way names none).
    pub fn pid(&self) -> Option<u32> {
        (self.pid != 0).then_some(self.pid)
    }

    /// The connection the call came in on: one per peer process and
    /// domain, never reused while this domain lives (what a server keys
    /// per-caller state by; a pid may be reused after its process dies).
    pub fn connection(&self) -> u64 {
        self.connection
    }
}

thread_local! {
    static CALLER: std::cell::Cell<Option<Caller>> = const { std::cell::Cell::new(None) };
}

/// The process whose call this thread is serving, or `None` when it serves
/// none from another process: a co-located call runs on its caller's own
/// thread, so it is this process's (a co-located call made from a handler
/// of a remote call is still on that remote caller's behalf: identity
/// follows the thread, as the call does).
///
/// ```
/// let door = lintel::Door::create(0, |_req: lintel::Request<'_>, reply: &mut lintel::Reply| {
///     // Called from this process: no other caller.
///     assert!(lintel::caller().is_none());
///     reply.data.push(1);
///     Ok(())
/// });
/// assert_eq!(door.call_bytes(b"").unwrap(), [1]);
/// ```
pub fn caller() -> Option<Caller> {
    CALLER.get()
}

/// This thread serves `who`'s calls until the guard drops.
fn serving_for(who: Caller) -> impl Drop {
    struct Serving;
    impl Drop for Serving {
        fn drop(&mut self) {
            CALLER.set(None);
        }
    }
    CALLER.set(Some(who));
    Serving
}

/// Wait for the next request on a bound slot. `None`: let go (unbind asked,
/// calls queued elsewhere, or the caller died).
///
/// One worker per domain spins (`spinner`), keeping the role across calls;
/// the others sleep at once: on a small machine several spinning threads
/// take the CPUs their callers need. The slot's server state is written only
/// when it changes, so a steady stream of calls costs no extra cache traffic.
fn wait_request(
    pool: &Pool<Work>,
    slot: &Slot,
    ss: &SlotServer,
    conn: &Conn,
    spinner: &mut bool,
    shared_cpu: &mut u32,
) -> Option<u32> {
    let req = slot.sync(SyncWord::ReqSeq);
    let last = ss.last_seq();
    let fresh = |r: u32| handshake::fresh(r, last);
    let let_go = || conn.is_dead() || ss.unbind.load(Relaxed) || pool.has_queued();
    let budget = conn.settings.spin_budget_ns();
    if !*spinner && budget > 0 {
        *spinner = pool.try_spin();
    }
    if *spinner {
        // Spin only while the caller runs on another CPU: on ours, it needs
        // the CPU we would spin on.
        let me = sys::current_cpu();
        publish(slot, Polled::ServerCpu, me);
        publish(slot, Polled::ServerState, SPINNING);
        let mut spin = Spinner::new(budget);
        let caller_here = || slot.get(Polled::ClientCpu) == me;
        loop {
            let r = req.load(Acquire);
            if fresh(r) {
                *shared_cpu = 0;
                return Some(r);
            }
            if let_go() {
                return None;
            }
            if !spin.spin_unless(caller_here) {
                break;
            }
        }
        if caller_here() {
            // The scheduler put us on our caller's CPU (a wake-up pulls the
            // woken thread to its waker), where neither side can spin; it
            // would keep us there. Step off that CPU once it happens twice
            // running, so the next calls find us spinning elsewhere.
            *shared_cpu += 1;
            if *shared_cpu >= 2 {
                *shared_cpu = 0;
                sys::move_off_cpu(me);
            }
        }
        *spinner = false;
        pool.give_up_spinning();
    }
    // Asked before each sleep too: a caller that died during the call just
    // served woke nobody (the pool would count this thread busy until the
    // sleep's safety-net timeout).
    let r = handshake::wait_for_request::<Shared>(
        &handshake::Words::of(slot),
        last,
        let_go,
        Duration::from_secs(1),
    )?;
    // Callers spin only while we run elsewhere; the CPU changes rarely, so
    // it is looked up on every 16th wake-up.
    if r.is_multiple_of(16) {
        slot.set(OFF_SERVER_CPU, sys::current_cpu());
    }
    Some(r)
}

/// Store `v` in a server-written header word unless it holds it already.
#[inline]
fn publish(slot: &Slot, w: Polled, v: u32) {
    if slot.get(w) != v {
        slot.set(w as usize, v);
    }
}

/// Serve one request and publish its reply. Guards first, each sending the
/// unusual case to [`handle_slow`]: a request that is not small (data past
/// the inline bytes, doors, buffers, a deadline, forced vanilla), pinned
/// doors to let go, a door not served last, a revoked door. Then the point of
/// no return: the handler runs and its reply is published. Inlined into the
/// worker's loop, so a null call pays no call frame.
#[inline(always)]
fn handle(w: &Work, ss: &SlotServer, slot: &Slot, seq: u32, bufs: &mut Buffers) {
    let req = RequestHeader::read(slot);
    ss.begin(seq, req.flags & FLAG_ALERT != 0, &bufs.shuttle);
    if w.conn.dead.load(SeqCst) {
        // The caller died before its call started: it never starts. (Read
        // after `begin` publishes the call: a death seen later alerts it.)
        return;
    }
    let core = match &bufs.door {
        Some((grant, generation, core))
            if req.is_inline()
                && *grant == req.grant
                && *generation == w.conn.grants_gen()
                && !ss.has_pinned.load(Relaxed) =>
        {
            core
        }
        _ => return handle_slow(w, slot, seq, bufs),
    };
    if !core.enter(&bufs.runner) {
        return handle_slow(w, slot, seq, bufs);
    }
    // ---- the handler runs; its reply is published below ----
    let reply = &mut bufs.reply;
    reply.data.clear(); // its doors and buffers are empty between calls (`finish_slow`)
    debug_assert!(reply.doors.is_empty() && reply.buffers.is_empty());
    let ran = core.run_bytes(&slot.read_inline(OFF_IN_INLINE)[..req.in_len as usize], reply);
    if ran != Ran::Done || reply.data.len() > INLINE || !reply.doors.is_empty() || !reply.buffers.is_empty() {
        core.leave(&bufs.runner);
        bufs.counters.served(Path::Fast);
        let result = ran.checked(reply).map_err(Failure::taken);
        return finish_slow(w, slot, seq, bufs, result, false);
    }
    let len = reply.data.len() as u32;
    ReplyHeader::write_inline_data(slot, &reply.data);
    if bufs.reply_header != Some(len) {
        ReplyHeader::write_inline_header(slot, len);
        bufs.reply_header = Some(len);
    }
    publish_reply(slot, seq);
    // The handler is done: leaving after the reply keeps this off the
    // caller's wait (its only effect is to let `unreferenced` run), as does
    // counting the call.
    core.leave(&bufs.runner);
    bufs.counters.served(Path::Fast);
}

/// [`handle`] of a request found while letting go of the slot (rare: kept
/// out of line so the worker's loop holds one copy of the fast path).
#[inline(never)]
fn handle_late(w: &Work, ss: &SlotServer, slot: &Slot, seq: u32, bufs: &mut Buffers) {
    handle(w, ss, slot, seq, bufs)
}

/// Publish the reply written in `slot` and wake the caller if it sleeps.
#[inline]
fn publish_reply(slot: &Slot, seq: u32) {
    handshake::publish_reply::<Shared>(&handshake::Words::of(slot), seq);
}

/// Everything the fast path does not do: doors, data in the data region,
/// deadlines, a door not served last, pinned doors to let go. The header is
/// read afresh (a caller that changes it meanwhile garbles only its own
/// call): handed over, the fast path's copy would be kept in memory.
#[cold]
fn handle_slow(w: &Work, slot: &Slot, seq: u32, bufs: &mut Buffers) {
    let req = &RequestHeader::read(slot);
    let ss = &w.area.slots[w.slot as usize];
    if ss.has_pinned.load(Relaxed) {
        // The caller has read our last reply: its doors may go.
        ss.has_pinned.store(false, Relaxed);
        ss.pinned.lock().clear();
    }
    let vanilla = req.flags & FLAG_VANILLA != 0;
    // The call runs under its caller's deadline: the calls it makes carry
    // it on, and `deadline::remaining` tells the handler the time left.
    let restore = deadline::Restore(deadline::set(req.deadline));
    let result = run(w, slot, seq, bufs, req);
    drop(restore);
    finish_slow(w, slot, seq, bufs, result, vanilla);
}

/// Write the reply (or the failure) of a call the fast path did not finish,
/// and publish it.
#[cold]
fn finish_slow(
    w: &Work,
    slot: &Slot,
    seq: u32,
    bufs: &mut Buffers,
    mut result: Result<(), Failure>,
    vanilla: bool,
) {
    bufs.reply_header = None;
    if w.conn.is_dead() {
        bufs.reply.clear();
        drop(buffer::take_returns()); // its lender is gone too
        return; // the caller is gone: the reply is discarded
    }
    let reply = &bufs.reply;
    if result.is_ok() {
        let n = reply.data.len();
        if n > DATA_CAP {
            match put_bulk_reply(w, &reply.data) {
                Ok(generation) => slot.set(OFF_OUT_SEG, generation),
                Err(e) => result = Err(Failure::taken(e)),
            }
        } else {
            slot.write(payload_offset(OFF_OUT_INLINE, n, vanilla), &reply.data);
        }
        slot.set(OFF_OUT_LEN, n as u32);
        let nd = reply.doors.len() as u32;
        if nd > 0 {
            result = transfer::send_doors(&w.conn, &reply.doors, slot, false, w.slot, seq)
                .map(drop)
                .map_err(Failure::taken);
        }
        slot.set(OFF_OUT_DOORS, nd);
    }
    let mut nbufs = 0;
    if result.is_ok() && !bufs.reply.buffers.is_empty() {
        let out = std::mem::take(&mut bufs.reply.buffers);
        nbufs = out.len() as u32;
        result = buffer::send(&w.conn, out, slot, false, w.slot, seq)
            .map(drop)
            .map_err(Failure::taken);
    }
    // Loans of the caller's that the handler let go of ride back with the
    // reply (by message if the call failed).
    let returns = buffer::take_returns();
    if !returns.is_empty() {
        if result.is_ok() {
            nbufs += buffer::write_returns(&w.conn, slot, nbufs as usize, &returns) as u32;
        } else {
            buffer::send_returns(&w.conn, &returns);
        }
    }
    slot.set(OFF_OUT_BUFS, if result.is_ok() { nbufs } else { 0 });
    match result {
        Ok(()) => slot.set(OFF_STATUS, ST_OK),
        Err(f) => {
            let (st, detail) = f.error.to_status();
            slot.set(OFF_STATUS, st | if f.untaken { ST_UNTAKEN } else { 0 });
            slot.set(OFF_OUT_LEN, detail);
            // A refused size names the length beside the limit.
            let len = match f.error {
                CallError::TooLarge { len, .. } => len.min(u32::MAX as usize) as u32,
                _ => 0,
            };
            slot.set(OFF_OUT_DOORS, len);
        }
    }
    trim(w, bufs);
    bufs.reply.buffers.clear(); // a failed call's: they go nowhere
    if !bufs.reply.doors.is_empty() {
        let ss = &w.area.slots[w.slot as usize];
        ss.pinned.lock().append(&mut bufs.reply.doors);
        ss.has_pinned.store(true, Relaxed);
    }
    publish_reply(slot, seq);
}

/// After a bulk call: give back our segment for the slot if it is too large
/// to keep, and the worker's buffers likewise.
fn trim(w: &Work, bufs: &mut Buffers) {
    if bufs.reply.data.len() > DATA_CAP {
        w.area.bulk[w.slot as usize].lock().out.trim();
    }
    if !crate::state::bulk::kept_buffer(bufs.args.capacity()) {
        bufs.args = Vec::with_capacity(DATA_CAP);
    }
    if !crate::state::bulk::kept_buffer(bufs.reply.data.capacity()) {
        bufs.reply.data = Vec::new();
    }
}

/// Why a request failed, and whether the doors passed with it were left
/// untouched (the caller then takes back the grants it made for them).
struct Failure {
    error: CallError,
    untaken: bool,
}

impl Failure {
    fn taken(error: CallError) -> Failure {
        Failure {
            error,
            untaken: false,
        }
    }
}

/// Copy the request out, check it, and run the handler. Sizes, the grant
/// and revocation are checked before the passed doors are touched: a
/// refused request leaves them to its caller.
fn run(w: &Work, slot: &Slot, seq: u32, bufs: &mut Buffers, req: &RequestHeader) -> Result<(), Failure> {
    let (grant, in_len, in_doors) = (req.grant, req.in_len as usize, req.in_doors as usize);
    let vanilla = req.flags & FLAG_VANILLA != 0;
    let checked = match deadline::passed(req.deadline) {
        true => Err(CallError::TimedOut), // it waited too long for a thread
        false => check_request(&w.conn, &mut bufs.door, grant, in_len, in_doors),
    };
    let checked = checked.and_then(|c| match req.in_bufs as usize {
        n if n > MAX_BUFFERS => Err(CallError::BadMessage("too many buffers")),
        _ => Ok(c),
    });
    let (core, _active) = match checked {
        Ok(c) => c,
        Err(error) => {
            if in_doors > 0 {
                transfer::discard_doors(&w.conn, slot, in_doors, true, w.slot, seq);
            }
            if req.in_bufs > 0 {
                drop(w.conn.take_buffer_fds(true, w.slot, seq)); // the caller takes its loans back
            }
            return Err(Failure { error, untaken: true });
        }
    };
    // The arguments, before the doors: a request whose bulk segment is
    // missing or malformed is refused with its doors untaken.
    let args = &mut bufs.args;
    args.clear();
    let mut skip = 0;
    if in_len > DATA_CAP {
        // Start the arguments half a page away from the reply buffer modulo
        // 4 KiB: glibc's memcpy here runs ten times slower when the
        // destination lies just past the source modulo 4 KiB, and a handler
        // that copies its input to its output would hit that by chance.
        args.reserve(in_len + 4096);
        let (a, r) = (args.as_ptr() as usize, bufs.reply.data.as_ptr() as usize);
        skip = r.wrapping_sub(a).wrapping_sub(2048) % 4096;
        args.resize(skip, 0);
        take_bulk_args(w, slot, req, args).map_err(|e| {
            if in_doors > 0 {
                transfer::discard_doors(&w.conn, slot, in_doors, true, w.slot, seq);
            }
            Failure {
                error: CallError::BadMessage(e),
                untaken: true,
            }
        })?;
    } else {
        args.resize(in_len, 0);
        slot.read(payload_offset(OFF_IN_INLINE, in_len, vanilla), args);
    }
    let mut doors = Vec::new();
    if in_doors > 0 {
        transfer::receive_doors(&w.conn, slot, in_doors, true, w.slot, seq, &mut doors)
            .map_err(Failure::taken)?;
    }
    let mut buffers = Vec::new();
    if req.in_bufs > 0 {
        let n = req.in_bufs as usize;
        buffer::receive(&w.conn, slot, n, true, w.slot, seq, &mut buffers).map_err(Failure::taken)?;
    }
    let path = if in_len <= INLINE && in_doors == 0 && !vanilla {
        Path::Fast
    } else {
        Path::Vanilla
    };
    bufs.counters.served(path);
    let reply = &mut bufs.reply;
    reply.clear();
    let req = Request {
        datum: core.datum,
        data: &args[skip..],
        doors: doors.into(),
        buffers: buffers.into(),
    };
    let _serving = buffer::serving(w.conn.id);
    core.invoke(req, reply).map_err(Failure::taken)
}

/// Copy arguments larger than the data region out of the caller's bulk
/// segment for the slot, mapping the segment first if the request names a
/// new one. (`in_len` was checked against the limit already.)
fn take_bulk_args(
    w: &Work,
    slot: &Slot,
    req: &RequestHeader,
    args: &mut Vec<u8>,
) -> Result<(), &'static str> {
    let mut bulk = w.area.bulk[w.slot as usize].lock();
    let generation = RequestHeader::segment(slot);
    if !bulk.inb.has(generation) {
        let fd = w
            .conn
            .take_segment(true, w.slot, generation)
            .ok_or("bulk segment missing")?;
        bulk.inb
            .accept(generation, fd, crate::context::settings::max_message())?;
    }
    let r = bulk.inb.read_into(req.in_len as usize, args);
    bulk.inb.trim();
    r
}

/// Put a result larger than the data region in our bulk segment for the
/// slot, sending the segment to the caller first if it is new. Returns the
/// generation to name in the reply.
fn put_bulk_reply(w: &Work, data: &[u8]) -> Result<u32, CallError> {
    let mut bulk = w.area.bulk[w.slot as usize].lock();
    w.conn.put_bulk(&mut bulk.out, false, w.slot, data)
}

/// The checks a request passes before anything it carries is touched: its
/// sizes, and a grant the caller holds on a door that is not revoked.
/// Returns the door, with the call counted as active on it.
fn check_request<'a>(
    conn: &Conn,
    cache: &'a mut Option<(u32, u64, Arc<DoorCore>)>,
    grant: u32,
    in_len: usize,
    in_doors: usize,
) -> Result<(&'a Arc<DoorCore>, ActiveCall<'a>), CallError> {
    check_sizes("arguments", in_len, in_doors)?;
    if !cache_hit(cache, conn, grant) {
        // The generation is read before the lookup: a grant removed in
        // between leaves the entry already stale, never falsely fresh.
        let generation = conn.grants_gen();
        let core = conn.lookup(grant).ok_or(CallError::BadDoor)?;
        *cache = Some((grant, generation, core));
    }
    let core: &'a Arc<DoorCore> = &cache.as_ref().expect("filled above").2;
    Ok((core, core.begin_call()?))
}

/// Whether the worker's door of the last call is the one `grant` names
/// still: the same grant, and no grant removed from the table since.
#[inline]
fn cache_hit(cache: &Option<(u32, u64, Arc<DoorCore>)>, conn: &Conn, grant: u32) -> bool {
    matches!(cache, Some((g, generation, _)) if *g == grant && *generation == conn.grants_gen())
}
