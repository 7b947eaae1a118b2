//! Calls awaited by tasks ([`Door::call_async`]): a slot per call in
//! flight, a spin while the server runs, then the task parks and the
//! runtime's thread runs other tasks until the server's notice comes.
//!
//! A call goes through these steps, each one `poll` of its future:
//!
//! 1. **Slot.** It takes one of the area's awaited-call slots
//!    (`state::calls`), or waits for one (all [`crate::abi::ASYNC_SLOTS`] in
//!    flight), woken when one comes back.
//! 2. **Post.** It writes the request (inline up to 16 bytes without doors,
//!    else as the vanilla path does) and posts it, as a thread's call does.
//! 3. **Spin.** While the server runs on another CPU it polls the reply
//!    word for up to the spin budget, so a prompt reply costs what a
//!    thread's call does.
//! 4. **Park.** It stores its waker (`state::parked`), marks the slot
//!    [`crate::abi::PARKED`] and looks once more; the server, seeing the
//!    mark after it publishes the reply, sends the slot's index on the
//!    area's notice socket. That socket is registered with the runtime's
//!    reactor under one waker per area, [`Pump`], which reads the notices
//!    and wakes the tasks they name, then arms itself again: no task or
//!    thread is set aside to wait on it.
//! 5. **Reply.** It reads the reply as a thread's call does and gives the
//!    slot back.
//!
//! A door served here does not go through a slot: an async handler's
//! future runs in the calling task (no thread switch), a blocking handler
//! runs on the spot as for a thread's call.
//!
//! What dropping the future does at each step is [`AsyncCall`]'s doc.
//!
//! A deadline in force when the future is made (a [`crate::deadline`]
//! scope, or the door's [`Door::with_timeout`]) bounds the call as it
//! bounds a thread's, waiting for a slot included: the task is woken by a
//! timer of the runtime when it passes.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering::*;
use std::sync::{Arc, Weak};
use std::task::{Context, Poll, Wake, Waker};

use crate::abi::control::Ctl;
use crate::abi::{INLINE, OFF_OUT_INLINE, SEQ_DEAD, SLOTS, ST_OK};
use crate::context::deadline;
use crate::context::error::CallError;
use crate::context::stats::{self, Path};
use crate::object::async_handler::{AsyncRequest, CallFuture};
use crate::object::buffer::Buffer;
use crate::object::conn::Conn;
use crate::object::door::{Door, Inner, RemoteDoor, Reply, check_sizes};
use crate::state::call_area::OutArea;
use crate::state::calls::Taken;
use crate::state::handshake::{self, Posted, Shared, Words};
use crate::sys;
use crate::sys::umem::{ReplyHeader, RequestHeader, Slot, SyncWord};

use super::call::admit;
use super::checked::{Sent, read_vanilla, settled, take_reply, write_vanilla};
use super::held::{out_area, release_late_doors};
use super::lease::At;
use super::wait::{HOT_SPINS, kick, spin_while_served};

/// The future of an awaited call ([`Door::call_async`]).
///
/// # Cancel safety
///
/// Dropping it (or a `tokio::time::timeout` around it expiring) cancels
/// the call. What that means depends on how far the call got:
///
/// - Before its first poll, or while it waits for a slot (all of the
///   connection's 1,024 in flight): nothing was sent; nothing happens.
/// - A door served in this domain by an async handler: the handler's
///   future runs inside this one and is dropped with it, at whatever await
///   it had reached.
/// - Posted to another domain: the server is alerted (the handler sees
///   `shuttle::alerted()`, or [`crate::AsyncRequest::alerted`] ends, and
///   the calls it makes are alerted in turn); the slot is left draining
///   until the late reply lands, and is taken by no other call until then,
///   so that reply never reaches a later call; doors in a reply that
///   landed before the drop are received and let go.
/// - In every case the call may or may not have had its effects on the
///   server, as with any cancelled or timed-out call: it is never retried.
#[must_use = "a call is made only when its future is awaited"]
pub struct AsyncCall<'a> {
    door: &'a Door,
    data: &'a [u8],
    doors: &'a [Door],
    buffers: Vec<Buffer>,
    /// The deadline in force when the future was made (0: none).
    due: u64,
    /// The runtime's timer for `due`, made when the call first waits.
    timer: Option<Pin<Box<tokio::time::Sleep>>>,
    /// The path the call took, counted in this thread's statistics when it
    /// ends (`None`: counted already, or not begun).
    path: Option<Path>,
    step: Step<'a>,
}

enum Step<'a> {
    Start,
    /// Waiting for a slot of `area`.
    Slot {
        rd: &'a RemoteDoor,
        area: &'a Arc<OutArea>,
        ticket: u64,
    },
    Posted(InFlight<'a>),
    /// A co-located door's async handler, run in this task.
    Local(CallFuture),
    Done,
}

/// A posted call (borrowing the connection and area from the door).
struct InFlight<'a> {
    conn: &'a Arc<Conn>,
    area: &'a Arc<OutArea>,
    slot: &'a Slot,
    /// Awaited-call index (the area's slot is [`SLOTS`] past it).
    index: u32,
    seq: u32,
    /// The inline layout (else vanilla, with what it sent).
    inline: bool,
    /// Where the calling thread runs (for the server's spin, and ours).
    cpu: u32,
    sent: Sent,
    parked: bool,
}

impl InFlight<'_> {
    fn at(&self) -> At<'_> {
        At {
            conn: self.conn,
            area: self.area,
            slot: self.slot,
            index: SLOTS as u32 + self.index,
            cpu: self.cpu,
        }
    }

    fn words(&self) -> Words<'_, std::sync::atomic::AtomicU32> {
        Words::of(self.slot)
    }

    /// The reply word says: answered (`Some(true)`), the server died
    /// (`Some(false)`), or not yet.
    fn landed(&self) -> Option<bool> {
        match self.slot.sync(SyncWord::RepSeq).load(Acquire) {
            r if r == self.seq => Some(true),
            SEQ_DEAD => Some(false),
            _ if self.conn.is_dead() => Some(false),
            _ => None,
        }
    }

    /// The call is over: no notice needed, the slot free for another.
    fn release(&self) {
        if self.parked {
            self.area.parked.unpark(self.index);
        }
        self.area.calls.give_back(self.index);
    }
}

impl Door {
    /// Call the door from a task: [`Door::call`] as a future, which parks
    /// the task, not the thread, while the server works. Needs a tokio
    /// runtime with I/O enabled. Up to [`crate::abi::ASYNC_SLOTS`] calls
    /// per connection are in flight at once; more wait for a slot (without
    /// blocking the thread). Dropping the future cancels the call
    /// (see [`AsyncCall`] for exactly what happens at each point).
    ///
    /// ```
    /// # let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    /// # rt.block_on(async {
    /// use lintel::{Door, Reply, Request};
    /// let echo = Door::create(0, |req: Request<'_>, reply: &mut Reply| {
    ///     reply.data.extend_from_slice(req.data);
    ///     Ok(())
    /// });
    /// let reply = echo.call_async(b"hi", &[]).await.unwrap();
    /// assert_eq!(reply.data, b"hi");
    /// # });
    /// ```
    pub fn call_async<'a>(&'a self, data: &'a [u8], doors: &'a [Door]) -> AsyncCall<'a> {
        self.call_with_async(data, doors, Vec::new())
    }

    /// [`Door::call_async`], also passing `buffers` ([`Door::call_with`]).
    pub fn call_with_async<'a>(
        &'a self,
        data: &'a [u8],
        doors: &'a [Door],
        buffers: Vec<Buffer>,
    ) -> AsyncCall<'a> {
        let (door, due) = match &self.0 {
            Inner::Timed(t) => {
                let at =
                    sys::monotonic_ns().saturating_add(t.timeout.as_nanos().min(u64::MAX as u128) as u64);
                (&t.door, deadline::earliest(deadline::current_or_task(), at))
            }
            _ => (self, deadline::current_or_task()),
        };
        AsyncCall {
            door,
            data,
            doors,
            buffers,
            due,
            timer: None,
            path: None,
            step: Step::Start,
        }
    }
}

impl Future for AsyncCall<'_> {
    type Output = Result<Reply, CallError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        loop {
            match &mut this.step {
                Step::Start => match this.start() {
                    Ok(Some(reply)) => return this.done(Ok(reply)),
                    Ok(None) => continue,
                    Err(e) => return this.done(Err(e)),
                },
                Step::Slot { rd, area, ticket } => {
                    let (rd, area) = (*rd, *area);
                    let settled = |i: u32, seq: u32| area.settled(SLOTS as u32 + i, seq);
                    match area.calls.take(ticket, cx.waker(), settled) {
                        Taken::Slot { index, seq } => match this.post(rd, area, index, seq) {
                            Ok(()) => continue,
                            Err(e) => return this.done(Err(e)),
                        },
                        Taken::Wait if rd.conn.is_dead() => return this.done(Err(CallError::PeerDied)),
                        Taken::Wait => return this.wait_deadline(cx),
                    }
                }
                Step::Posted(call) => {
                    if let Some(answered) = call.landed() {
                        return this.finish(answered);
                    }
                    // The waker first, then the mark (`state::parked`); a
                    // call polled again looks once more after storing its
                    // waker (a notice drained meanwhile woke the one before).
                    call.area.parked.park(call.index, cx.waker());
                    let first = !std::mem::replace(&mut call.parked, true);
                    let landed = match first {
                        true => handshake::park_for_reply::<Shared>(&call.words(), call.seq),
                        false => call.landed().is_some(),
                    };
                    if landed {
                        continue;
                    }
                    if !call.area.notices.armed() {
                        arm(call.area);
                        if call.landed().is_some() {
                            continue;
                        }
                    }
                    return this.wait_deadline(cx);
                }
                Step::Local(fut) => match fut.as_mut().poll(cx) {
                    Poll::Ready(r) => {
                        let r = deadline::settle(this.due, r);
                        return this.done(r);
                    }
                    Poll::Pending => return this.wait_deadline(cx),
                },
                Step::Done => return Poll::Ready(Err(CallError::Local("polled after it completed".into()))),
            }
        }
    }
}

impl<'a> AsyncCall<'a> {
    /// The first poll: a door served here is called now (its handler runs
    /// on this task); one served elsewhere waits for a slot.
    fn start(&mut self) -> Result<Option<Reply>, CallError> {
        let door: &'a Door = self.door;
        let rd: &'a RemoteDoor = match &door.0 {
            Inner::Remote(rd) => rd,
            Inner::Dead(_) => return Err(CallError::PeerDied),
            Inner::Local(core) if core.asynk.is_some() => {
                let buffers = std::mem::take(&mut self.buffers);
                admit(core, self.data, self.doors, &buffers)?;
                let req = AsyncRequest::new(
                    core.datum,
                    self.data.to_vec(),
                    self.doors.to_vec(),
                    buffers,
                    self.due,
                );
                let asynk = core.asynk.as_ref().expect("matched above");
                self.path = Some(Path::Colocated);
                self.step = Step::Local(asynk.serve(req));
                return Ok(None);
            }
            Inner::Local(_) | Inner::Timed(_) => {
                let mut reply = Reply::new();
                let buffers = std::mem::take(&mut self.buffers);
                let run = || self.door.call_with(self.data, self.doors, buffers, &mut reply);
                match self.due {
                    0 => run()?,
                    due => deadline::scoped(due, run)?,
                }
                return Ok(Some(reply));
            }
        };
        check_sizes("arguments", self.data.len(), self.doors.len())?;
        crate::object::buffer::check_passable(&self.buffers)?;
        if deadline::passed(self.due) {
            return Err(CallError::TimedOut);
        }
        let area: &'a Arc<OutArea> = out_area(&rd.conn)?;
        // The inline layout (the fast path's) for what a thread's call
        // would send that way; else the vanilla path's.
        let inline = self.data.len() <= INLINE
            && self.doors.is_empty()
            && self.buffers.is_empty()
            && !rd.conn.settings.force_vanilla.load(Relaxed);
        self.path = Some(if inline { Path::Fast } else { Path::Vanilla });
        self.step = Step::Slot { rd, area, ticket: 0 };
        Ok(None)
    }

    /// Write the request into awaited-call slot `index` and post it; spin
    /// for the reply while the server runs elsewhere.
    fn post(
        &mut self,
        rd: &'a RemoteDoor,
        area: &'a Arc<OutArea>,
        index: u32,
        seq: u32,
    ) -> Result<(), CallError> {
        let abs = SLOTS as u32 + index;
        let slot = area.async_slot(index);
        let inline = self.path == Some(Path::Fast);
        let mut call = InFlight {
            conn: &rd.conn,
            area,
            slot,
            index,
            seq,
            inline,
            cpu: this_cpu(),
            sent: Sent::default(),
            parked: false,
        };
        // A slot taken after an abandoned call may still be marked parked.
        handshake::unpark::<Shared>(&call.words());
        if inline {
            RequestHeader::write_inline(call.slot, rd.grant, 0, self.data, call.cpu, self.due);
        } else {
            let buffers = std::mem::take(&mut self.buffers);
            match write_vanilla(
                &call.at(),
                rd.grant,
                self.data,
                self.doors,
                buffers,
                seq,
                false,
                self.due,
                false,
            ) {
                Ok(sent) => call.sent = sent,
                Err(e) => {
                    call.release();
                    return Err(e);
                }
            }
        }
        match handshake::post::<Shared>(&call.words(), seq) {
            Posted::Running => spin(&call, false),
            Posted::Woken => spin(&call, true),
            Posted::Unbound => {
                if kick(call.conn, abs).is_err() {
                    // The slot stays ours: nothing more will land in it.
                    return Err(CallError::PeerDied);
                }
            }
        }
        self.step = Step::Posted(call);
        Ok(())
    }

    /// The reply landed (`answered`) or the server died: read it, give the
    /// slot back.
    fn finish(&mut self, answered: bool) -> Poll<Result<Reply, CallError>> {
        let Step::Posted(call) = std::mem::replace(&mut self.step, Step::Done) else {
            unreachable!("finish runs on a posted call")
        };
        if !answered {
            return self.done(Err(CallError::PeerDied));
        }
        let mut reply = Reply::new();
        let at = call.at();
        let r = if call.inline {
            read_inline(&at, call.seq, self.due, &mut reply)
        } else {
            read_vanilla(
                &at,
                call.seq,
                self.due,
                self.data.len(),
                &call.sent,
                &mut reply,
                None,
            )
        };
        call.release();
        self.done(r.map(|()| reply))
    }

    fn done(&mut self, r: Result<Reply, CallError>) -> Poll<Result<Reply, CallError>> {
        self.step = Step::Done;
        if let Some(path) = self.path.take() {
            let result = r.as_ref().ok().map(|reply| (reply.data.len(), reply.doors.len()));
            stats::call(path, self.data.len(), self.doors.len(), result);
        }
        Poll::Ready(r)
    }

    /// Pending, woken by the deadline's timer too if the call has one (or
    /// ended with [`CallError::TimedOut`] if it passed).
    fn wait_deadline(&mut self, cx: &mut Context<'_>) -> Poll<Result<Reply, CallError>> {
        if self.due == 0 {
            return Poll::Pending;
        }
        let left = self.due.saturating_sub(sys::monotonic_ns());
        let timer = self.timer.get_or_insert_with(|| {
            let at = tokio::time::Instant::now() + std::time::Duration::from_nanos(left);
            Box::pin(tokio::time::sleep_until(at))
        });
        if left == 0 || timer.as_mut().poll(cx).is_ready() {
            self.abandon();
            return self.done(Err(CallError::TimedOut));
        }
        Poll::Pending
    }

    /// Give up on the call in whatever step it is (see the module doc).
    fn abandon(&mut self) {
        match std::mem::replace(&mut self.step, Step::Done) {
            Step::Slot { area, ticket, .. } if ticket != 0 => area.calls.stop_waiting(ticket),
            Step::Posted(call) => abandon(call),
            Step::Slot { .. } | Step::Local(_) | Step::Start | Step::Done => {} // a co-located handler's future is dropped
        }
    }
}

impl Drop for AsyncCall<'_> {
    fn drop(&mut self) {
        self.abandon();
    }
}

/// Abandon posted `call`: if its reply has landed after all, let go of
/// any doors it carries and give the slot back; else alert the server and
/// leave the slot draining, marked parked so the late reply's notice tells
/// tasks waiting for a slot to look.
fn abandon(call: InFlight) {
    if call.parked {
        call.area.parked.unpark(call.index);
    }
    if !handshake::park_for_reply::<Shared>(&call.words(), call.seq) {
        let abs = SLOTS as u32 + call.index;
        call.conn.send(
            &Ctl::Alert {
                slot: abs,
                seq: call.seq,
            },
            &[],
        );
        call.area.calls.abandon(call.index);
        return;
    }
    release_late_doors(&call.at(), call.seq);
    call.area.calls.give_back(call.index);
}

/// Read an inline call's reply (the fast path's layout).
fn read_inline(at: &At<'_>, seq: u32, due: u64, reply: &mut Reply) -> Result<(), CallError> {
    let h = ReplyHeader::read(at.slot);
    if due != 0 || h.status != ST_OK || h.out_len as usize > INLINE || (h.out_doors | h.out_bufs) != 0 {
        let r = take_reply(at, seq, h, &[], reply, false, None);
        return settled(due, r, reply);
    }
    reply.clear();
    if h.out_len != 0 {
        let bytes = at.slot.read_inline(OFF_OUT_INLINE);
        reply.data.extend_from_slice(&bytes[..h.out_len as usize]);
    }
    Ok(())
}

thread_local! {
    /// Where this thread ran when last looked up, and calls since.
    static CPU: std::cell::Cell<(u32, u32)> = const { std::cell::Cell::new((u32::MAX, 0)) };
}

/// Where the calling thread runs, looked up on every 64th call: the server
/// spins for our next call only while we run elsewhere (and steps off our
/// CPU when it finds itself there), as for a thread's call, which
/// publishes where it ran the same way. (A lookup costs more than the rest
/// of a prompt call's bookkeeping.)
fn this_cpu() -> u32 {
    CPU.with(|c| {
        let (cpu, n) = c.get();
        let cpu = if n.is_multiple_of(64) {
            sys::current_cpu()
        } else {
            cpu
        };
        c.set((cpu, n.wrapping_add(1)));
        cpu
    })
}

/// Poll the reply word while the server runs on another CPU, up to the
/// spin budget (spinning on). `woke`: the post woke the server, which is
/// spun for while it wakes too. (A parked call's wake-up, through the
/// reactor, is slower than a thread's futex wake: a server that slept
/// through it would be found asleep by every call after, each parking in
/// turn, unless one spins it awake.)
fn spin(call: &InFlight, woke: bool) {
    let budget = call.conn.settings.spin_budget_ns();
    if budget == 0 {
        return;
    }
    let rep = call.slot.sync(SyncWord::RepSeq);
    let landed = || matches!(rep.load(Acquire), r if r == call.seq || r == SEQ_DEAD);
    // A prompt reply lands within a few hundred nanoseconds: poll for it
    // alone first, with nothing else on the way.
    for _ in 0..HOT_SPINS {
        if landed() {
            return;
        }
        std::hint::spin_loop();
    }
    spin_while_served(call.slot, call.cpu, budget, woke, landed);
}

/// The waker the area's notice socket is registered under: reads the
/// notices and wakes the tasks they name, then registers itself again.
struct Pump {
    area: Weak<OutArea>,
}

impl Wake for Pump {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref()
    }

    fn wake_by_ref(self: &Arc<Self>) {
        if let Some(area) = self.area.upgrade() {
            pump(&area, &Waker::from(self.clone()));
        }
    }
}

/// Register the area's notice socket with the current runtime, under its
/// [`Pump`] (reading what is queued already).
fn arm(area: &Arc<OutArea>) {
    let waker = Waker::from(Arc::new(Pump {
        area: Arc::downgrade(area),
    }));
    pump(area, &waker);
}

/// Read the notices queued, wake the tasks they name (all parked tasks if
/// a notice was lost), and register `waker` for the next ones.
fn pump(area: &OutArea, waker: &Waker) {
    let mut slots = Vec::new();
    // An error: the reactor is gone (its runtime shut down); the next task
    // to park registers the socket with its own. Every parked task looks.
    let flooded = area.notices.drain_and_arm(waker, &mut slots).unwrap_or(true);
    let mut woken = Vec::new();
    if flooded || area.notice_lost().swap(0, SeqCst) != 0 {
        area.parked.all(&mut woken);
        area.calls.maybe_drained(usize::MAX);
    } else if !slots.is_empty() {
        for s in &mut slots {
            *s = s.wrapping_sub(SLOTS as u32);
        }
        area.parked.noticed(&slots, &mut woken);
        if woken.len() < slots.len() {
            // Abandoned calls' late replies: a waiting task for each.
            area.calls.maybe_drained(slots.len() - woken.len());
        }
    }
    woken.into_iter().for_each(Waker::wake);
}
