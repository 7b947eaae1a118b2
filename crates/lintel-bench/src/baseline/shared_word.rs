//! `spin_pingpong` and `futex_pingpong`: one exchange over a shared `memfd` page, waiting either
//! by spinning on a sequence word or by sleeping on it in `FUTEX_WAIT` (shared, not private:
//! the two processes map the page separately).
//!
//! Each direction is a [`Mailbox`]: the sender stores the 8-byte message, bumps the 32-bit
//! sequence word and, in futex mode, `FUTEX_WAKE`s it. A futex-mode receiver never looks at the
//! word before sleeping: every exchange makes a `FUTEX_WAIT` call, which returns EAGAIN only if
//! the reply beat it there. EAGAINs and voluntary context switches of both sides go in the note,
//! so a baseline that skips its sleeps shows. The note also says how often the two processes
//! were seen on the same CPU (sampled with `sched_getcpu`), which changes both costs.
//!
//! A watcher thread in the parent wakes it if the child dies, so a crash cannot hang the run.

use std::hint::spin_loop;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};
use std::sync::atomic::{AtomicU32, AtomicU64};
use std::time::Duration;

use anyhow::{Context as _, bail, ensure};
use rustix::io::Errno;
use rustix::thread::futex::{self, Flags};
use rustix::thread::sched_getcpu;

use super::{ROLE, STOP, SUITE};
use crate::harness::{
    CaseResult, ChildProc, Config, SharedMem, Stats, fd_arg, measure_batched, spawn_self, take_fd,
    voluntary_switches, wait_until_exited,
};

/// How the receiver of a mailbox waits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Spin,
    Futex,
}

impl Mode {
    fn arg(self) -> &'static str {
        match self {
            Mode::Spin => "spin",
            Mode::Futex => "futex",
        }
    }
}

// Layout of the shared page; each part on its own pair of cache lines.
const PAGE: usize = 4096;
/// Parent → child mailbox.
const REQ: usize = 0;
/// Child → parent mailbox.
const RESP: usize = 128;
/// u32: set by the parent's watcher once the child has exited.
const DEAD: usize = 256;
/// u32: the CPU the child runs on, refreshed every [`CPU_SAMPLE`] exchanges.
const CHILD_ON_CPU: usize = 384;
/// The child's [`Counts`], written as it exits: three u64.
const CHILD_COUNTS: usize = 512;
/// Exchanges between two CPU samples.
const CPU_SAMPLE: u32 = 256;
/// Sequence number of the handshake exchange; counting starts after it.
const HANDSHAKE: u32 = 1;
/// Above this fraction of `FUTEX_WAIT`s returning EAGAIN (the peer's message was there before
/// the wait: no sleep), the note warns that the futex case is not all real wake-ups. Across
/// CPUs a few tenths of a percent are normal here (a preempted vCPU lets the reply overtake
/// it). On one CPU, the woken side usually preempts its waker, whose own wait then finds the
/// reply already there: a round trip is one real wake-up and two switches, and the note says
/// so through its "same cpu" count.
const MAX_SKIPPED_SLEEPS: f64 = 0.05;

/// One direction: a 32-bit sequence word (the futex word) and the 8-byte message.
struct Mailbox<'a> {
    seq: &'a AtomicU32,
    msg: &'a AtomicU64,
}

impl<'a> Mailbox<'a> {
    fn at(shm: &'a SharedMem, offset: usize) -> Self {
        Mailbox {
            seq: shm.u32_at(offset),
            msg: shm.u64_at(offset + 8),
        }
    }

    fn send(&self, mode: Mode, seq: u32, msg: u64) {
        self.msg.store(msg, Relaxed);
        self.seq.store(seq, Release);
        if mode == Mode::Futex {
            let _ = futex::wake(self.seq, Flags::empty(), 1);
        }
    }
}

/// What one side's waits did, from the handshake to the stop message.
#[derive(Clone, Copy, Debug, Default)]
struct Counts {
    /// `FUTEX_WAIT` calls that slept and were woken.
    slept: u64,
    /// `FUTEX_WAIT` calls that returned at once: the peer's message was already there.
    eagain: u64,
    /// Voluntary context switches of the waiting thread.
    switches: u64,
}

/// The receiving side of a mailbox, counting how its waits went.
struct Receiver<'a> {
    mode: Mode,
    /// Set (and the mailbox bumped) when the peer is gone.
    dead: &'a AtomicU32,
    counts: Counts,
    switches_at_start: u64,
}

impl<'a> Receiver<'a> {
    fn new(mode: Mode, dead: &'a AtomicU32) -> Self {
        let mut r = Receiver {
            mode,
            dead,
            counts: Counts::default(),
            switches_at_start: 0,
        };
        r.restart_counts();
        r
    }

    fn restart_counts(&mut self) {
        self.counts = Counts::default();
        self.switches_at_start = voluntary_switches().unwrap_or(0);
    }

    fn finish_counts(&mut self) -> Counts {
        let now = voluntary_switches().unwrap_or(0);
        self.counts.switches = now.saturating_sub(self.switches_at_start);
        self.counts
    }

    /// Waits until `mb`'s sequence word moves past `last`: `(seq, message)`, or `None` if the peer
    /// is dead.
    fn recv(&mut self, mb: &Mailbox, last: u32) -> Option<(u32, u64)> {
        loop {
            if self.mode == Mode::Futex {
                match futex::wait(mb.seq, Flags::empty(), last, None) {
                    Ok(()) => self.counts.slept += 1,
                    Err(Errno::AGAIN) => self.counts.eagain += 1,
                    Err(Errno::INTR) => {}
                    Err(e) => panic!("FUTEX_WAIT failed: {e}"),
                }
            }
            // Read the word before `dead`: the watcher sets `dead` before bumping the word.
            let seq = mb.seq.load(Acquire);
            if self.dead.load(Relaxed) != 0 {
                return None;
            }
            if seq != last {
                return Some((seq, mb.msg.load(Relaxed)));
            }
            if self.mode == Mode::Spin {
                spin_loop();
            }
        }
    }
}

/// Parent side: spawns the child, times round trips, stops and reaps the child.
pub fn measure(cfg: &Config, mode: Mode, iters: u64, batch: u64) -> anyhow::Result<CaseResult> {
    let (stats, note) = exchange(cfg, mode, iters, batch)?;
    let case = format!("{}_pingpong", mode.arg());
    Ok(CaseResult::new(SUITE, &case, &stats).with_note(note))
}

/// One round of `spin_pingpong` with a child of its own, for pairing with another case
/// round by round (see `door::calls`).
pub fn spin_round(cfg: &Config, iters: u64, batch: u64) -> anyhow::Result<Stats> {
    Ok(exchange(cfg, Mode::Spin, iters, batch)?.0)
}

/// [`measure`]'s work: the timings and the note on how the waits went.
fn exchange(cfg: &Config, mode: Mode, iters: u64, batch: u64) -> anyhow::Result<(Stats, String)> {
    let shm = SharedMem::create("lintel-bench-baseline", PAGE)?;
    let (req, resp) = (Mailbox::at(&shm, REQ), Mailbox::at(&shm, RESP));
    let (dead, child_cpu) = (shm.u32_at(DEAD), shm.u32_at(CHILD_ON_CPU));
    let args = [mode.arg().to_string(), fd_arg(shm.fd())];
    let child = ChildProc::spawn(spawn_self(cfg, ROLE, &args)?, &[shm.fd()])?;
    let pid = child.pid();

    std::thread::scope(|scope| {
        scope.spawn(|| {
            wait_until_exited(pid);
            dead.store(1, Relaxed);
            resp.seq.fetch_add(1, Release);
            let _ = futex::wake(resp.seq, Flags::empty(), u32::MAX);
        });
        // `child` moves in here, so an early return kills it before the scope joins the watcher.
        let child = child;
        let mut rx = Receiver::new(mode, dead);
        let mut seq = HANDSHAKE;
        req.send(mode, seq, 0);
        rx.recv(&resp, seq - 1)
            .context("child died before the handshake")?;
        rx.restart_counts();

        let (mut failure, mut cpu_samples, mut same_cpu) = (None, 0u64, 0u64);
        let stats = measure_batched(iters, batch, || {
            if failure.is_some() {
                return;
            }
            seq = seq.wrapping_add(1);
            let msg = u64::from(seq);
            req.send(mode, seq, msg);
            match rx.recv(&resp, seq.wrapping_sub(1)) {
                Some((_, echo)) if echo == msg => {}
                Some((_, echo)) => failure = Some(format!("sent {msg}, echoed {echo}")),
                None => failure = Some("child died".to_string()),
            }
            if seq.is_multiple_of(CPU_SAMPLE) {
                cpu_samples += 1;
                same_cpu += u64::from(sched_getcpu() as u32 == child_cpu.load(Relaxed));
            }
        });
        if let Some(failure) = failure {
            bail!("{} pingpong: {failure}", mode.arg());
        }
        let parent = rx.finish_counts();
        req.send(mode, seq.wrapping_add(1), STOP);
        child.finish(Duration::from_secs(5))?;

        let child_counts = Counts {
            slept: shm.u64_at(CHILD_COUNTS).load(Acquire),
            eagain: shm.u64_at(CHILD_COUNTS + 8).load(Acquire),
            switches: shm.u64_at(CHILD_COUNTS + 16).load(Acquire),
        };
        let exchanges = u64::from(seq.wrapping_sub(HANDSHAKE));
        let mut note = format!("same cpu in {same_cpu}/{cpu_samples} samples");
        if mode == Mode::Futex {
            ensure!(
                parent.slept + parent.eagain >= exchanges,
                "parent skipped FUTEX_WAIT"
            );
            note = format!(
                "{exchanges} exchanges incl. warm-up; parent: {} woken, {} EAGAIN, {} voluntary \
                 switches; child: {} woken, {} EAGAIN, {} voluntary switches; {note}",
                parent.slept,
                parent.eagain,
                parent.switches,
                child_counts.slept,
                child_counts.eagain,
                child_counts.switches,
            );
            let skipped = (parent.eagain + child_counts.eagain) as f64 / (2 * exchanges) as f64;
            if skipped > MAX_SKIPPED_SLEEPS {
                note = format!("WARNING: {:.1}% of waits did not sleep; {note}", skipped * 100.0);
            }
        }
        Ok((stats, note))
    })
}

/// Child side: echoes each request until the stop message, then leaves its counts in the page.
pub fn child(mode: Mode, args: &[String]) -> anyhow::Result<()> {
    let [fd] = args else {
        bail!("{} child wants one fd argument", mode.arg())
    };
    let shm = SharedMem::open(take_fd(fd)?)?;
    let (req, resp) = (Mailbox::at(&shm, REQ), Mailbox::at(&shm, RESP));
    let child_cpu = shm.u32_at(CHILD_ON_CPU);
    child_cpu.store(sched_getcpu() as u32, Relaxed);
    let mut rx = Receiver::new(mode, shm.u32_at(DEAD));
    let mut last = 0;
    loop {
        let (seq, msg) = rx.recv(&req, last).context("dead flag set")?;
        last = seq;
        if msg == STOP {
            break;
        }
        if seq.is_multiple_of(CPU_SAMPLE) {
            child_cpu.store(sched_getcpu() as u32, Relaxed);
        }
        resp.send(mode, seq, msg);
        if seq == HANDSHAKE {
            rx.restart_counts();
        }
    }
    let counts = rx.finish_counts();
    shm.u64_at(CHILD_COUNTS).store(counts.slept, Release);
    shm.u64_at(CHILD_COUNTS + 8).store(counts.eagain, Release);
    shm.u64_at(CHILD_COUNTS + 16).store(counts.switches, Release);
    Ok(())
}
