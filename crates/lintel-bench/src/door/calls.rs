//! The call cases: the co-located null call, and every case on the shared child domain.
//!
//! Each timed operation is one `Door::call` from this (main) thread into one reused `Reply`,
//! followed by a check of the reply's length and of its first and last byte. Where the reply
//! carries bytes, the first argument byte changes on every call and must come back, so a stale
//! reply cannot pass. The notes give the voluntary context switches of the calling thread per
//! call (warm-up included): about 0 when the caller spins, about 1 when it sleeps every call
//! (with spinning allowed, lintel sleeps at once when the server thread is on the caller's CPU,
//! which happens when other load leaves the two processes one CPU).

use anyhow::{Context as _, bail, ensure};
use lintel::{CallError, Door, Reply, Request};

use super::peer::Peer;
use super::{OUT_1K, Offer, SPIN_OFF, SPIN_ON, SUITE, SWITCHES, pattern_bytes};
use crate::baseline;
use crate::harness::{CaseResult, Config, Report, Stats, measure_batched, median, voluntary_switches};

/// The case the cross-process shapes are compared to.
const NULL_FAST: &str = "null_cross_fast";
/// Below this many sleeps per call on either side, `null_cross_blocking` warns that it is not
/// measuring wake-ups. Across CPUs each side sleeps about once per call; on one CPU the woken
/// side often preempts its waker, whose next wait then finds the answer there (as in
/// `baseline/futex_pingpong`), so about 0.6 per side is normal there.
const MIN_SLEEPS_PER_CALL: f64 = 0.5;

/// One INKS Table 3 shape: `args` bytes in, `out` bytes back from `door`.
struct Shape {
    case: &'static str,
    door: Offer,
    args: usize,
    out: usize,
}

const SHAPES: [Shape; 4] = [
    Shape {
        case: "in64_cross",
        door: Offer::Sink,
        args: 64,
        out: 0,
    },
    Shape {
        case: "in1k_cross",
        door: Offer::Sink,
        args: 1024,
        out: 0,
    },
    Shape {
        case: "out1k_cross",
        door: Offer::Source,
        args: 1,
        out: OUT_1K,
    },
    Shape {
        case: "inout128_cross",
        door: Offer::Echo,
        args: 128,
        out: 128,
    },
];

/// `null_colocated`: 2M calls (batches of 1000) of a do-nothing door served by this domain.
pub fn null_colocated(cfg: &Config) -> anyhow::Result<CaseResult> {
    let door = Door::create(0, |_: Request<'_>, _: &mut Reply| Ok(()));
    ensure!(door.is_local(), "a door created here is not local");
    let mut reply = Reply::new();
    let timed = time_calls(cfg.iters(2_000_000), 1000, || {
        door.call(&[], &[], &mut reply).map_err(call_failed)?;
        expect_reply(&reply, &[])
    })
    .context("null_colocated")?;
    Ok(CaseResult::new(SUITE, "null_colocated", &timed.stats).with_note("target ≤ 20 ns"))
}

/// The cases on `peer`: fast ones 200k calls in batches of 100, the blocking one 50k in batches
/// of 10 (10× fewer with --quick), like the baselines they are compared to.
pub fn cross_cases(cfg: &Config, peer: &Peer, report: &mut Report) -> anyhow::Result<()> {
    let (fast_iters, blocking_iters) = (cfg.iters(200_000), cfg.iters(50_000));

    let paired = null_fast_paired(cfg, peer, fast_iters).context(NULL_FAST)?;
    let (fast, spin) = (&paired.fast, &paired.spin);
    let paired_note = format!(
        "{PAIRED_ROUNDS} rounds alternating with door/{NULL_FAST}, each round with a child of \
         its own; the samples of all rounds pooled"
    );
    report.push(CaseResult::new(baseline::SUITE, baseline::PAIRED, spin).with_note(paired_note));
    let result = CaseResult::new(SUITE, NULL_FAST, &fast.stats).compare_to(baseline::SUITE, baseline::PAIRED);
    let mut note = format!(
        "target ≤ 1.25×; {}; {}; {}; {}",
        paired.ratios_note(),
        alone_ratio(report, &result),
        uds_ratio(report, &result),
        fast.switches_note()
    );
    if !lintel::spinning() {
        note = format!("LINTEL_SPIN=off in the environment, so this case did not spin; {note}");
    }
    report.push(result.with_note(note));

    report.push(null_blocking(peer, blocking_iters)?.compare_to(baseline::SUITE, "futex_pingpong"));

    for shape in &SHAPES {
        let timed = shape_calls(peer, shape, fast_iters).context(shape.case)?;
        let result = CaseResult::new(SUITE, shape.case, &timed.stats).compare_to(SUITE, NULL_FAST);
        report.push(result.with_note(timed.switches_note()));
    }

    let timed = pass_door_calls(peer, fast_iters).context("pass_door_cross")?;
    let note = format!(
        "the same door, served here, passed on every call; the child keeps its first copy, so its \
         table keeps one entry and no release goes back per call (dropping it each time would add \
         an asynchronous release and an unreferenced per call: the reference protocol, not the \
         call); {}",
        timed.switches_note()
    );
    let result = CaseResult::new(SUITE, "pass_door_cross", &timed.stats).compare_to(SUITE, NULL_FAST);
    report.push(result.with_note(note));
    Ok(())
}

/// Rounds in which `null_cross_fast` alternates with a round of the spin baseline.
const PAIRED_ROUNDS: u64 = 10;

/// `null_cross_fast` and `baseline/spin_pingpong`, measured in alternating rounds so that both
/// see the same phases of a noisy machine (on these VMs the spin baseline alone moves by 2×
/// between minutes); each case's samples are pooled over the rounds. Between rounds the idle
/// side costs nothing: the spin child exits, and the door's server thread stops spinning after
/// its budget.
fn null_fast_paired(cfg: &Config, peer: &Peer, iters: u64) -> anyhow::Result<Paired> {
    let per_round = iters.div_ceil(PAIRED_ROUNDS);
    let (mut fast, mut spin) = (Vec::new(), Vec::new());
    for _ in 0..PAIRED_ROUNDS {
        spin.push(baseline::spin_round(cfg, per_round, 100).context("paired spin_pingpong")?);
        fast.push(null_calls(peer, per_round, 100)?);
    }
    let rounds: Vec<(f64, Option<f64>)> = fast
        .iter()
        .zip(&spin)
        .map(|(f, s)| (f.stats.median_ns / s.median_ns, f.switches_per_call()))
        .collect();
    let mut ratios: Vec<f64> = rounds.iter().map(|r| r.0).collect();
    ratios.sort_by(f64::total_cmp);
    Ok(Paired {
        fast: Timed::pooled(&fast),
        spin: Stats::pooled(&spin),
        ratios,
        rounds,
    })
}

/// What [`null_fast_paired`] measured.
struct Paired {
    fast: Timed,
    spin: Stats,
    /// Per round, `null_cross_fast` over the spin baseline of the same round; sorted.
    ratios: Vec<f64>,
    /// Per round in order: that ratio, and the caller's sleeps per call.
    rounds: Vec<(f64, Option<f64>)>,
}

impl Paired {
    /// The median and range of the per-round ratios: the statistic least moved by the
    /// machine's phases, since each ratio compares two measurements a few ms apart.
    fn ratios_note(&self) -> String {
        let (lo, hi) = (self.ratios[0], self.ratios[self.ratios.len() - 1]);
        let each: Vec<String> = self
            .rounds
            .iter()
            .map(|(r, sleeps)| match sleeps {
                Some(z) => format!("{r:.2}× ({z:.2})"),
                None => format!("{r:.2}×"),
            })
            .collect();
        format!(
            "per round, this / the round's spin baseline: median {:.2}×, range {lo:.2}–{hi:.2}× \
             (target: no round over 2×); rounds in order, with the caller's sleeps per call: {}",
            median(&self.ratios),
            each.join(", ")
        )
    }
}

/// The ratio to `baseline/spin_pingpong` measured alone, earlier in the run, if it was.
fn alone_ratio(report: &Report, fast: &CaseResult) -> String {
    match report.lookup(baseline::SUITE, "spin_pingpong") {
        Some(spin) if spin.median_ns > 0.0 => format!(
            "this / baseline/spin_pingpong (measured alone, earlier) = {:.2}×",
            fast.median_ns / spin.median_ns
        ),
        _ => "baseline/spin_pingpong not measured alone in this run".to_string(),
    }
}

/// 0 bytes in, 0 out, to the child's [`Offer::Null`].
fn null_calls(peer: &Peer, iters: u64, batch: u64) -> anyhow::Result<Timed> {
    let door = peer.door(Offer::Null);
    let mut reply = Reply::new();
    time_calls(iters, batch, || {
        door.call(&[], &[], &mut reply).map_err(call_failed)?;
        expect_reply(&reply, &[])
    })
}

/// `null_cross_blocking`: [`null_calls`] with spinning off in both domains, sleeps counted on
/// both sides (the child's on the server thread bound to this thread's slot).
fn null_blocking(peer: &Peer, iters: u64) -> anyhow::Result<CaseResult> {
    let case = "null_cross_blocking";
    let control = peer.door(Offer::Control);
    let spin_off = SpinOff::new(control).context(case)?;
    let child_before = child_switches(control).context(case)?;
    let timed = null_calls(peer, iters, 10).context(case)?;
    let child_after = child_switches(control).context(case)?;
    drop(spin_off);

    let child_per_call = child_after.saturating_sub(child_before) as f64 / timed.calls as f64;
    let mut note = format!(
        "spinning off in both domains; {}; child serving thread: {child_per_call:.2} voluntary \
         switches per call (about 1 each across CPUs, about 0.6 on one CPU)",
        timed.switches_note()
    );
    let parent_per_call = timed.switches_per_call().unwrap_or(f64::NAN);
    if !(parent_per_call >= MIN_SLEEPS_PER_CALL && child_per_call >= MIN_SLEEPS_PER_CALL) {
        note = format!("WARNING: not every call slept on both sides; {note}");
    }
    Ok(CaseResult::new(SUITE, case, &timed.stats).with_note(note))
}

/// One [`Shape`]; results that carry bytes echo a per-call stamp in their first byte.
fn shape_calls(peer: &Peer, shape: &Shape, iters: u64) -> anyhow::Result<Timed> {
    let door = peer.door(shape.door);
    let mut args = pattern_bytes(shape.args);
    let mut expected = match shape.door {
        Offer::Source => pattern_bytes(OUT_1K),
        Offer::Echo => args.clone(),
        _ => Vec::new(),
    };
    ensure!(
        expected.len() == shape.out,
        "{}: wrong expected result",
        shape.case
    );
    let stamped = !expected.is_empty();
    let (mut reply, mut stamp) = (Reply::new(), 0u8);
    time_calls(iters, 100, || {
        if stamped {
            stamp = stamp.wrapping_add(1);
            args[0] = stamp;
            expected[0] = stamp;
        }
        door.call(&args, &[], &mut reply).map_err(call_failed)?;
        expect_reply(&reply, &expected)
    })
}

/// 0 bytes and one door (served here, the same each call) to [`Offer::Keep`], which answers 1
/// when the door resolved to the entry it already holds.
fn pass_door_calls(peer: &Peer, iters: u64) -> anyhow::Result<Timed> {
    let door = peer.door(Offer::Keep);
    let pass = [Door::create(0, |_: Request<'_>, _: &mut Reply| Ok(()))];
    let mut reply = Reply::new();
    time_calls(iters, 100, || {
        door.call(&[], &pass, &mut reply).map_err(call_failed)?;
        expect_reply(&reply, &[1])
    })
}

/// The note for `null_cross_fast`: how much slower `baseline/uds_pingpong` was, if measured.
fn uds_ratio(report: &Report, fast: &CaseResult) -> String {
    match report.lookup(baseline::SUITE, "uds_pingpong") {
        Some(uds) if fast.median_ns > 0.0 => format!(
            "baseline/uds_pingpong / this = {:.1}× (target ≥ 30×)",
            uds.median_ns / fast.median_ns
        ),
        _ => "baseline/uds_pingpong not measured before this case: run suite baseline first for \
              the ≥ 30× check"
            .to_string(),
    }
}

/// Spinning off in this domain and the child's until dropped, which restores this domain's
/// setting from before in both (the child inherited it through `LINTEL_SPIN`).
struct SpinOff<'a> {
    control: &'a Door,
    before: bool,
}

impl<'a> SpinOff<'a> {
    fn new(control: &'a Door) -> anyhow::Result<SpinOff<'a>> {
        let guard = SpinOff {
            control,
            before: lintel::spinning(),
        };
        lintel::set_spin(false);
        control_call(control, SPIN_OFF, 0).context("turning spinning off in the child")?;
        Ok(guard)
    }
}

impl Drop for SpinOff<'_> {
    fn drop(&mut self) {
        lintel::set_spin(self.before);
        let _ = control_call(self.control, if self.before { SPIN_ON } else { SPIN_OFF }, 0);
    }
}

/// Voluntary context switches so far of the child thread that serves this thread's calls.
fn child_switches(control: &Door) -> anyhow::Result<u64> {
    let bytes = control_call(control, SWITCHES, 8)?;
    Ok(u64::from_le_bytes(bytes.try_into().expect("length checked")))
}

/// One [`Offer::Control`] command; its result must be `out` bytes long.
fn control_call(control: &Door, command: u8, out: usize) -> anyhow::Result<Vec<u8>> {
    let bytes = control.call_bytes(&[command]).context("control call")?;
    ensure!(
        bytes.len() == out,
        "control call returned {} bytes, not {out}",
        bytes.len()
    );
    Ok(bytes)
}

/// A case's timings with what the calling thread did meanwhile.
struct Timed {
    stats: Stats,
    /// Calls made, warm-up included.
    calls: u64,
    /// Voluntary context switches of the calling thread during those calls.
    switches: Option<u64>,
}

impl Timed {
    /// Rounds of one case as one: samples pooled, calls and switches added up.
    fn pooled(rounds: &[Timed]) -> Timed {
        let stats: Vec<Stats> = rounds.iter().map(|r| r.stats.clone()).collect();
        Timed {
            stats: Stats::pooled(&stats),
            calls: rounds.iter().map(|r| r.calls).sum(),
            switches: rounds.iter().map(|r| r.switches).sum(),
        }
    }

    fn switches_per_call(&self) -> Option<f64> {
        self.switches.map(|s| s as f64 / self.calls as f64)
    }

    fn switches_note(&self) -> String {
        match self.switches_per_call() {
            Some(n) => format!("caller: {n:.2} voluntary switches per call"),
            None => "caller's context switches unknown".to_string(),
        }
    }
}

/// Times `call` (one door call plus its check) with [`measure_batched`]; the first failure stops
/// the calls and fails the case.
fn time_calls(iters: u64, batch: u64, mut call: impl FnMut() -> Result<(), String>) -> anyhow::Result<Timed> {
    let (mut calls, mut failure) = (0u64, None);
    let before = voluntary_switches();
    let stats = measure_batched(iters, batch, || {
        if failure.is_none() {
            calls += 1;
            failure = call().err();
        }
    });
    let after = voluntary_switches();
    if let Some(failure) = failure {
        bail!("call {calls} failed: {failure}");
    }
    Ok(Timed {
        stats,
        calls,
        switches: before.zip(after).map(|(b, a)| a.saturating_sub(b)),
    })
}

fn call_failed(e: CallError) -> String {
    e.to_string()
}

/// Checks that `reply` has `expected`'s length and first and last byte, and no doors.
#[inline]
fn expect_reply(reply: &Reply, expected: &[u8]) -> Result<(), String> {
    let data = &reply.data;
    let ok =
        data.len() == expected.len() && data.first() == expected.first() && data.last() == expected.last();
    if !ok || !reply.doors.is_empty() {
        return Err(format!(
            "reply of {} bytes and {} doors, expected {} bytes and none (or wrong content)",
            data.len(),
            reply.doors.len(),
            expected.len()
        ));
    }
    Ok(())
}
