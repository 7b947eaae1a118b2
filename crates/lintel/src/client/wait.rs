//! Posting a request and waiting for its reply, for both paths: spin
//! while the server runs on another CPU, then sleep on the slot's futex; a
//! call whose deadline passes or that is cancelled is abandoned: the server
//! is alerted and the slot drains until the late reply has landed.

use crate::abi::control::Ctl;
use crate::abi::{BUSY, CPU_MOVING, OFF_CLIENT_CPU, SEQ_DEAD, SLEEPING, SPINNING};
use crate::context::error::CallError;
use crate::context::shuttle::Shuttle;
use crate::context::stats::Path;
use crate::object::conn::Conn;
use crate::state::handshake::{self, Posted, Shared};
use crate::sys;
use crate::sys::spin::{self, Spinner};
use crate::sys::umem::{Polled, Slot, SyncWord};
use std::ops::ControlFlow;
use std::sync::atomic::{AtomicU32, Ordering::*};
use std::time::Duration;

use super::lease::Lease;

/// Publish the request posted in `slot` and make sure a server thread will
/// see it; whether one was running (so the reply may come at once).
#[inline]
pub(super) fn post(
    slot: &Slot,
    conn: &Conn,
    index: u32,
    seq: u32,
    alerted: bool,
    shuttle: &Shuttle,
) -> Result<bool, Unanswered> {
    let running = match handshake::post::<Shared>(&handshake::Words::of(slot), seq) {
        Posted::Running => true,
        Posted::Woken => false,
        Posted::Unbound => {
            kick(conn, index)?;
            false
        }
    };
    if !alerted && shuttle.is_alerted() {
        alert_late(conn, index, seq);
    }
    Ok(running)
}

/// An alert that arrived while the request was being posted: forward it.
#[cold]
pub(super) fn alert_late(conn: &Conn, index: u32, seq: u32) {
    conn.send(&Ctl::Alert { slot: index, seq }, &[]);
}

#[cold]
pub(super) fn kick(conn: &Conn, index: u32) -> Result<(), Unanswered> {
    if conn.send(&Ctl::Kick { slot: index }, &[]) {
        Ok(())
    } else {
        Err(Unanswered::PeerDied)
    }
}

/// Why a posted call ends without its reply: a small value, so the wait
/// returns it in a register rather than a [`CallError`] through memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Unanswered {
    PeerDied,
    Cancelled,
    TimedOut,
}

impl From<Unanswered> for CallError {
    fn from(why: Unanswered) -> CallError {
        match why {
            Unanswered::PeerDied => CallError::PeerDied,
            Unanswered::Cancelled => CallError::Cancelled,
            Unanswered::TimedOut => CallError::TimedOut,
        }
    }
}

/// A fast call that got no reply: counted, and its error returned.
#[cold]
pub(super) fn unanswered(
    lease: &Lease,
    path: Path,
    len: usize,
    doors: usize,
    why: Unanswered,
) -> Result<(), CallError> {
    lease.counters.call(path, len, doors, None);
    Err(why.into())
}

/// Wait until `rep_seq == seq`. With the server running when the request
/// was posted (`running`), its reply usually lands within a few hundred
/// nanoseconds: poll for it alone first, with nothing else on the way.
#[inline(always)]
pub(super) fn wait_reply(
    lease: &Lease,
    conn: &Conn,
    seq: u32,
    running: bool,
    due: u64,
    class: usize,
) -> Result<(), Unanswered> {
    if running && hot_poll(lease, seq) {
        return Ok(());
    }
    wait_reply_slow(lease, conn, seq, due, class)
}

/// Poll the reply word alone a few times (when spinning is on): true if
/// reply `seq` landed.
#[inline(always)]
pub(super) fn hot_poll(lease: &Lease, seq: u32) -> bool {
    if lease.settings.spin.load(Relaxed) {
        let rep = lease.slot.sync(SyncWord::RepSeq);
        for _ in 0..HOT_SPINS {
            if rep.load(Acquire) == seq {
                if seq.is_multiple_of(64) {
                    note_cpu(lease);
                }
                return true;
            }
            std::hint::spin_loop();
        }
    }
    false
}

/// Where this thread runs, looked up now and then (out of line: a call in
/// the poll loop would cost the fast path saved registers).
#[cold]
#[inline(never)]
fn note_cpu(lease: &Lease) {
    lease.cpu.set(sys::current_cpu());
}

/// Polls of the reply word before the full wait; a few hundred ns.
pub(super) const HOT_SPINS: u32 = 16;
/// Longest single futex sleep: a lost wake-up costs at most this.
const MAX_SLEEP: Duration = Duration::from_millis(100);

/// The full wait: spin while the server runs on another CPU (when spinning
/// is on), then sleep on the futex, until the reply comes, the server dies,
/// the deadline passes or the call is cancelled (then the call is abandoned).
/// `class`: the size class of the call's arguments (`stats::class`), where
/// a sleep is counted.
#[inline(never)]
fn wait_reply_slow(lease: &Lease, conn: &Conn, seq: u32, due: u64, class: usize) -> Result<(), Unanswered> {
    wait_reply_full(lease, conn, seq, due, class)
}

/// [`wait_reply_slow`]'s body, also inlined where the fast path waits.
#[inline(always)]
pub(super) fn wait_reply_full(
    lease: &Lease,
    conn: &Conn,
    seq: u32,
    due: u64,
    class: usize,
) -> Result<(), Unanswered> {
    let budget = lease.settings.spin_budget_ns();
    let spun = if budget > 0 {
        match spin_for_reply(lease, conn, seq, budget) {
            ControlFlow::Break(r) => return r,
            ControlFlow::Continue(spun) => Some(spun),
        }
    } else {
        if lease.cpu.get() != u32::MAX {
            lease.cpu.set(u32::MAX);
        }
        None
    };
    sleep_for_reply(lease, conn, seq, due, class, spun)
}

/// Spin for the reply while the server runs on another CPU, up to the
/// budget for this thread's calls ([`spin::adaptive_budget`]): `Break`
/// with how the wait ended, or `Continue` with how long it spun (ns) to
/// sleep for it.
#[cold]
#[inline(never)]
fn spin_for_reply(
    lease: &Lease,
    conn: &Conn,
    seq: u32,
    base: u64,
) -> ControlFlow<Result<(), Unanswered>, u64> {
    let budget = spin::adaptive_budget(base, lease.lately.get());
    let rep = lease.slot.sync(SyncWord::RepSeq);
    // Where we run: the server spins for our next call only while we run
    // elsewhere, and steps off our CPU when it finds itself there.
    // Published with the next request; and now if we ran elsewhere when
    // this one was posted (a pause of the program's own, or a wake-up,
    // moved us), lest the server, at the end of this call, spin on our
    // CPU, where we could not post the next one.
    let me = sys::current_cpu();
    if lease.cpu.replace(me) != me {
        lease.slot.set(OFF_CLIENT_CPU, me);
    }
    let mut out = None;
    let spun = spin_while_served(&lease.slot, me, budget, false, || {
        out = outcome(lease, conn, seq, rep);
        out.is_some()
    });
    match out {
        Some(r) => {
            lease.lately.set(spin::average(lease.lately.get(), spun));
            ControlFlow::Break(r)
        }
        None => ControlFlow::Continue(spun),
    }
}

/// Spin, up to `budget` ns, while the server of `slot` runs on a CPU other
/// than ours (`me`), or, if our post `woke` it, while it is still waking,
/// until `done` says the wait is over. Returns how long it spun, from its
/// first clock check ([`Spinner::spun_ns`]: 0 for a wait of a microsecond
/// or two, which reads no clock).
pub(super) fn spin_while_served(
    slot: &Slot,
    me: u32,
    budget: u64,
    woke: bool,
    done: impl FnMut() -> bool,
) -> u64 {
    spin_while_served_moves(slot, me, budget, spin::MOVE_NS, woke, done)
}

/// [`spin_while_served`], spinning at most `move_ns` through a server's
/// step off our CPU.
fn spin_while_served_moves(
    slot: &Slot,
    me: u32,
    budget: u64,
    move_ns: u64,
    woke: bool,
    mut done: impl FnMut() -> bool,
) -> u64 {
    let mut spinner = Spinner::new(budget);
    let mut moving = None;
    loop {
        if done() {
            return spinner.spun_ns();
        }
        let st = slot.get(Polled::ServerState);
        let running = st == BUSY || st == SPINNING || (woke && st == SLEEPING);
        let at = slot.get(Polled::ServerCpu);
        let turn = if at == CPU_MOVING {
            // Stepping off our CPU: spin through the move, then afresh
            // for the answer it gives from where it went.
            spinner = Spinner::new(budget);
            moving.get_or_insert_with(|| Spinner::new(move_ns)).spin()
        } else {
            at != me && spinner.spin()
        };
        if !(running && turn) {
            return spinner.spun_ns();
        }
    }
}

/// Sleep until the reply comes (`handshake`, model-checked). A cancel wakes
/// the reply's word (named in `enter_call`, before the request's fence:
/// the canceller sees it or the check below sees the cancel). Counted in
/// the call's size class; when it `spun` first (ns), the whole wait is
/// timed into [`Lease::lately`].
#[inline]
fn sleep_for_reply(
    lease: &Lease,
    conn: &Conn,
    seq: u32,
    due: u64,
    class: usize,
    spun: Option<u64>,
) -> Result<(), Unanswered> {
    lease.counters.slept(class);
    let Some(spun) = spun else {
        return sleep_until_reply(lease, conn, seq, due);
    };
    let since = sys::monotonic_ns();
    let r = sleep_until_reply(lease, conn, seq, due);
    let took = spun + sys::monotonic_ns().saturating_sub(since);
    lease.lately.set(spin::average(lease.lately.get(), took));
    r
}

/// (Inlined into its two callers: the fast path's sleep saves a call.)
#[inline]
fn sleep_until_reply(lease: &Lease, conn: &Conn, seq: u32, due: u64) -> Result<(), Unanswered> {
    let words = handshake::Words::of(&lease.slot);
    loop {
        let left = match due {
            0 => MAX_SLEEP,
            _ => match due.checked_sub(sys::monotonic_ns()) {
                Some(ns) if ns > 0 => Duration::from_nanos(ns).min(MAX_SLEEP),
                _ => return Err(abandon(lease, conn, seq, Unanswered::TimedOut)),
            },
        };
        if !lease.shuttle.has_cancel() {
            handshake::sleep_for_reply::<Shared>(&words, seq, left);
        }
        if let Some(r) = outcome(lease, conn, seq, words.rep) {
            return r;
        }
    }
}

/// How the wait for call `seq` ends, if it ends now: cancelled (a cancel
/// wins over a reply that lands at the same time), answered (`rep` shows
/// the reply) or the server died.
#[inline]
fn outcome(lease: &Lease, conn: &Conn, seq: u32, rep: &AtomicU32) -> Option<Result<(), Unanswered>> {
    if lease.shuttle.take_cancel() {
        return Some(Err(abandon(lease, conn, seq, Unanswered::Cancelled)));
    }
    let r = rep.load(Acquire);
    if r == seq {
        return Some(Ok(()));
    }
    if r == SEQ_DEAD || conn.is_dead() {
        return Some(Err(Unanswered::PeerDied));
    }
    None
}

/// Give up on call `seq`: alert its server (the call it runs, or the one
/// queued for a thread, and everything those call), and leave the slot to
/// drain until the late reply lands. The lease is void from here on.
#[cold]
fn abandon(lease: &Lease, conn: &Conn, seq: u32, why: Unanswered) -> Unanswered {
    conn.send(
        &Ctl::Alert {
            slot: lease.claim.index,
            seq,
        },
        &[],
    );
    lease.area.leases.abandon(&lease.claim);
    lease.abandoned.set(true);
    why
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::abi::{OFF_SERVER_CPU, OFF_SERVER_STATE, SLOT_SIZE};
    use std::os::fd::AsFd;
    use std::sync::Arc;

    fn slot(state: u32, server_cpu: u32) -> Slot {
        let fd = sys::shared_memfd("wait-test", SLOT_SIZE).unwrap();
        let map = sys::Mapping::map(fd.as_fd(), SLOT_SIZE).unwrap();
        let slot = Slot::new(Arc::new(map), 0).unwrap();
        slot.set(OFF_SERVER_STATE, state);
        slot.set(OFF_SERVER_CPU, server_cpu);
        slot
    }

    /// How many times a caller on CPU 3 with a budget of 1 ns looks for its
    /// answer before it gives up spinning, the answer coming at the 1000th
    /// look. A budget of 1 ns gives up at the second clock check (the
    /// 128th turn); a server's move is spun through for as long as a
    /// minute here, so that no preemption of the test cuts it short.
    fn looks(state: u32, server_cpu: u32) -> u32 {
        let mut n = 0;
        spin_while_served_moves(&slot(state, server_cpu), 3, 1, 60_000_000_000, false, || {
            n += 1;
            n == 1000
        });
        n
    }

    #[test]
    fn a_caller_spins_through_its_server_s_move_off_its_cpu_past_its_budget() {
        assert_eq!(looks(SPINNING, CPU_MOVING), 1000, "spun through the move");
        assert_eq!(looks(BUSY, 1), 128, "elsewhere: its budget");
        assert_eq!(looks(SPINNING, 3), 1, "on our CPU: no spin");
        assert_eq!(looks(SLEEPING, CPU_MOVING), 1, "asleep: no spin");
    }
}
