//! Layer 5, the server's side of cross-domain calls.
//!
//! A peer's call area is mapped here after checking its seals and size. A
//! server thread binds to a slot when the client kicks it and stays bound
//! while calls keep coming (spinning briefly, then sleeping on the slot's
//! futex), so a client thread's next call is handed straight to it.
//!
//! Everything read from the slot is untrusted: header words are copied out
//! once, then checked (lengths, door count, grant) before any handler runs.
//!
//! This file is the worker's loop and the fast handling of an inline
//! request on the door served last (`handle`, inlined into the loop);
//! `slow` takes every other request, `deferred` hands a request to an
//! async handler's task (the worker then lets go of the slot), `reply`
//! writes and publishes the replies of both, and `area`
//! is a peer's call area as the server sees it. Who made the call a
//! handler runs is published in `context::caller`.

mod area;
mod deferred;
mod reply;
mod slow;
mod step_off;

use std::sync::Arc;
use std::sync::atomic::Ordering::*;
use std::time::Duration;

use crate::abi::{
    BUSY, CPU_MOVING, DATA_CAP, FLAG_ALERT, INLINE, OFF_IN_INLINE, OFF_OUT_BUFS, OFF_OUT_DOORS,
    OFF_OUT_INLINE, OFF_OUT_LEN, OFF_SERVER_CPU, OFF_SERVER_STATE, OFF_STATUS, SPINNING, ST_OK,
    payload_offset,
};
use crate::context::after_reply;
use crate::context::shuttle::{self, Shuttle};
use crate::context::stats::{Counters, Path};
use crate::object::conn::Conn;
use crate::object::door::{DoorCore, Ran, Reply};
use crate::object::in_place;
use crate::state::handshake::{self, Shared};
use crate::state::running::Runner;
use crate::state::workers::Pool;
use crate::sys::spin::{self, Spinner};
use crate::sys::umem::{Polled, ReplyHeader, RequestHeader, Slot, SyncWord};
use crate::sys::{self};
use step_off::StepOff;

use crate::context::caller::{Caller, serving_for};
use area::SlotServer;
use reply::Failure;
use slow::{finish_slow, handle_slow};

pub(crate) use area::InArea;

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
        step_off: StepOff::default(),
        counters: Counters::new(),
        shuttle: shuttle::current_arc(),
        runner: crate::state::running::workers().register(),
    };
    after_reply::mark_worker();
    loop {
        let w = pool.take();
        serve(&w, &mut bufs, pool);
        after_reply::run_queued();
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
    /// it: an inline success of this many bytes (`None`: unknown, after a
    /// bind or any other reply). The fast path then stores only what
    /// changes: every store before the reply is published delays it. Only
    /// this worker writes the header while bound; a caller that scribbles on
    /// it garbles no reply but its own.
    reply_header: Option<u32>,
    /// Whether this worker holds the domain's spinning role.
    spinner: bool,
    /// When to step off the caller's CPU.
    step_off: StepOff,
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
    in_place::offer(
        &bufs.reply,
        Box::new(reply::SegmentPlace {
            conn: w.conn.clone(),
            area: w.area.clone(),
            slot: w.slot,
        }),
    );
    ss.binding.bind();
    bufs.reply_header = None;
    ss.unbind.store(false, SeqCst);
    *ss.shuttle.lock() = Some(bufs.shuttle.clone());
    pool.bound(w);
    // A request handed to an async handler's task (`handle` is true) gets
    // its reply from the task: this thread lets go of the slot at once.
    'serve: loop {
        if let Some(seq) = wait_request(pool, &slot, ss, &w.conn, bufs)
            && !handle(w, ss, &slot, seq, bufs)
            && !pool.has_queued()
        {
            continue;
        }
        // Let go: publish UNBOUND, then look once more, so a client that
        // posted meanwhile either is served here or saw UNBOUND and kicked.
        loop {
            ss.binding.unbind();
            let pending = handshake::let_go::<Shared>(&handshake::Words::of(&slot), ss.last_seq());
            let Some(r) = pending.filter(|_| !w.conn.is_dead() && ss.binding.rebind()) else {
                break 'serve;
            };
            // Another worker may have bound, replied and let go meanwhile.
            bufs.reply_header = None;
            slot.set(OFF_SERVER_STATE, BUSY);
            if !handle_late(w, ss, &slot, r, bufs) {
                continue 'serve;
            }
        }
    }
    if std::mem::take(&mut bufs.spinner) {
        pool.give_up_spinning();
    }
    *ss.shuttle.lock() = None;
    in_place::withdraw(); // holds the connection
    pool.unbound(w);
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
    bufs: &mut Buffers,
) -> Option<u32> {
    let Buffers {
        spinner, step_off, ..
    } = bufs;
    // The last call's reply is out: what its handler left for now.
    after_reply::run_queued();
    let req = slot.sync(SyncWord::ReqSeq);
    let last = ss.last_seq();
    let fresh = |r: u32| handshake::fresh(r, last);
    let let_go = || conn.is_dead() || ss.unbind.load(Relaxed) || pool.has_queued();
    let base = conn.settings.spin_budget_ns();
    if !*spinner && base > 0 {
        *spinner = pool.try_spin();
    }
    // Timed only by the spinning worker, by its spinner's clock: from its
    // first check (a request within a microsecond or two counts as no
    // wait), through any sleep that follows.
    let lately = ss.lately.load(Relaxed);
    let note = |spun_ns: u64| {
        let now = spin::average(lately, spun_ns);
        if now != lately {
            ss.lately.store(now, Relaxed);
        }
    };
    let mut spun = None;
    if *spinner {
        let budget = spin::adaptive_budget(base, lately);
        // Spin only while the caller runs on another CPU: on ours, it needs
        // the CPU we would spin on.
        let mut me = sys::current_cpu();
        publish(slot, Polled::ServerCpu, me);
        publish(slot, Polled::ServerState, SPINNING);
        let mut spin = Spinner::new(budget);
        let caller_on = |cpu: u32| slot.get(Polled::ClientCpu) == cpu;
        loop {
            let r = req.load(Acquire);
            if fresh(r) {
                // (Posted with the caller on our CPU: it slept for our last
                // reply, or was preempted by us; nothing says we run apart.)
                if !caller_on(me) {
                    step_off.apart();
                }
                note(spin.spun_ns());
                return Some(r);
            }
            if let_go() {
                return None;
            }
            if spin.spin_unless(|| caller_on(me)) {
                continue;
            }
            // The scheduler put us on our caller's CPU (a wake-up pulls the
            // woken thread to its waker), where neither side can spin; it
            // would keep us there. Step off that CPU (see `step_off`), and
            // spin afresh where we went: a sleep now would have the
            // caller's next post wake us onto its CPU again.
            if caller_on(me) && step_off.together(sys::monotonic_ns()) {
                publish(slot, Polled::ServerCpu, CPU_MOVING);
                sys::move_off_cpu(me);
                me = sys::current_cpu();
                publish(slot, Polled::ServerCpu, me);
                spin = Spinner::new(budget);
                continue;
            }
            break;
        }
        *spinner = false;
        pool.give_up_spinning();
        spun = Some(spin);
    }
    // The last call's door is let go before a sleep: held while this
    // thread waits, it would keep a door its holders have all released
    // (and the object behind it: a file's locks) until the next call on
    // this slot. A call after a sleep pays a wake-up; the grant table's
    // lookup is nothing beside it.
    bufs.door = None;
    // Asked before each sleep too: a caller that died during the call just
    // served woke nobody (the pool would count this thread busy until the
    // sleep's safety-net timeout).
    let r = handshake::wait_for_request::<Shared>(
        &handshake::Words::of(slot),
        last,
        let_go,
        Duration::from_secs(1),
    )?;
    if let Some(spin) = spun {
        note(spin.spun_ns());
    }
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
/// unusual case to [`handle_slow`]: a request that is not inline (data past
/// the inline bytes, doors, buffers, a deadline, forced vanilla), pinned
/// doors to let go, a door not served last, a revoked door. Then the point of
/// no return: the handler runs and its reply is published. Inlined into the
/// worker's loop, so a null call pays no call frame.
///
/// True if the request went to an async handler's task (`deferred`).
#[inline(always)]
fn handle(w: &Work, ss: &SlotServer, slot: &Slot, seq: u32, bufs: &mut Buffers) -> bool {
    let req = RequestHeader::read(slot);
    ss.begin(seq, req.flags & FLAG_ALERT != 0, &bufs.shuttle);
    if w.conn.dead.load(SeqCst) {
        // The caller died before its call started: it never starts. (Read
        // after `begin` publishes the call: a death seen later alerts it.)
        return false;
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
        Some((grant, generation, _))
            if req.is_plain_data()
                && *grant == req.grant
                && *generation == w.conn.grants_gen()
                && !ss.has_pinned.load(Relaxed) =>
        {
            return handle_data(w, slot, seq, bufs, req.in_len as usize);
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
    if !answered_plainly(ran, reply, INLINE) {
        core.leave(&bufs.runner);
        answered_slowly(w, slot, seq, bufs, ran, Path::Fast);
        return false;
    }
    let len = reply.data.len() as u32;
    ReplyHeader::write_inline_data(slot, &reply.data);
    if bufs.reply_header != Some(len) {
        ReplyHeader::write_inline_header(slot, len);
        bufs.reply_header = Some(len);
    }
    publish_reply(w, slot, seq);
    // The handler is done: leaving after the reply keeps this off the
    // caller's wait (its only effect is to let `unreferenced` run), as does
    // counting the call.
    core.leave(&bufs.runner);
    bufs.counters.served(Path::Fast);
    false
}

/// [`handle`] of a request whose `len` bytes of arguments lie in the slot's
/// data region and which carries nothing else (no doors, buffers, deadline
/// or alert), on the door served last: the arguments are copied out, the
/// handler runs, and a reply of bytes that fit the data region is written
/// and published here, skipping the checks and bookkeeping only doors,
/// buffers, segments and failures need ([`handle_slow`]). Anything else the
/// handler answers goes the slow way from the point where it ran. A 1 KiB
/// echo's worker runs some 390 instructions fewer this way.
#[inline(never)]
fn handle_data(w: &Work, slot: &Slot, seq: u32, bufs: &mut Buffers, len: usize) -> bool {
    let Some((_, _, core)) = &bufs.door else {
        return handle_slow(w, slot, seq, bufs);
    };
    if !core.enter(&bufs.runner) {
        return handle_slow(w, slot, seq, bufs);
    }
    // ---- the handler runs; its reply is published below ----
    let args = &mut bufs.args;
    args.clear();
    slot.read_into(payload_offset(OFF_IN_INLINE, len, true), len, args);
    let reply = &mut bufs.reply;
    reply.data.clear(); // its doors and buffers are empty between calls (`finish_slow`)
    let ran = core.run_bytes(args, reply);
    if !answered_plainly(ran, reply, DATA_CAP) {
        core.leave(&bufs.runner);
        answered_slowly(w, slot, seq, bufs, ran, Path::Vanilla);
        return false;
    }
    // As `reply::write_reply` writes a success of data-region bytes.
    let n = reply.data.len();
    slot.write(payload_offset(OFF_OUT_INLINE, n, true), &reply.data);
    slot.set(OFF_OUT_LEN, n as u32);
    slot.set(OFF_OUT_DOORS, 0);
    slot.set(OFF_OUT_BUFS, 0);
    slot.set(OFF_STATUS, ST_OK);
    bufs.reply_header = None; // not the inline fast path's header
    publish_reply(w, slot, seq);
    core.leave(&bufs.runner);
    bufs.counters.served(Path::Vanilla);
    false
}

/// Whether a handler's answer is one a fast path writes itself: it ran to
/// the end with at most `max` bytes in `data`, and passes no doors or
/// buffers and no result written in place.
#[inline(always)]
fn answered_plainly(ran: Ran, reply: &Reply, max: usize) -> bool {
    ran == Ran::Done
        && reply.data.len() <= max
        && reply.doors.is_empty()
        && reply.buffers.is_empty()
        && !in_place::placed()
}

/// A call [`handle`] or [`handle_data`] let in was answered with what only
/// the slow path writes (a failure, doors, buffers, a larger result, a
/// result in place): counted on `path`, then written and published by
/// [`finish_slow`] (its arguments were in the data region unless `path` is
/// the fast one).
#[cold]
#[inline(never)]
fn answered_slowly(w: &Work, slot: &Slot, seq: u32, bufs: &mut Buffers, ran: Ran, path: Path) {
    bufs.counters.served(path);
    let result = ran.checked(&bufs.reply).map_err(Failure::taken);
    finish_slow(w, slot, seq, bufs, result, path != Path::Fast);
}

/// [`handle`] of a request found while letting go of the slot (rare: kept
/// out of line so the worker's loop holds one copy of the fast path).
#[inline(never)]
fn handle_late(w: &Work, ss: &SlotServer, slot: &Slot, seq: u32, bufs: &mut Buffers) -> bool {
    handle(w, ss, slot, seq, bufs)
}

/// Publish the reply written in `slot` and wake the caller if it sleeps,
/// or send its parked task a notice.
#[inline]
fn publish_reply(w: &Work, slot: &Slot, seq: u32) {
    if handshake::publish_reply::<Shared>(&handshake::Words::of(slot), seq) {
        w.area.notify(w.slot);
    }
}

/// Whether the worker's door of the last call is the one `grant` names
/// still: the same grant, and no grant removed from the table since.
#[inline]
fn cache_hit(cache: &Option<(u32, u64, Arc<DoorCore>)>, conn: &Conn, grant: u32) -> bool {
    matches!(cache, Some((g, generation, _)) if *g == grant && *generation == conn.grants_gen())
}
