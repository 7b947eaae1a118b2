//! Suite `echo`: one payload echoed between two processes at 8 B, 1 KiB, 64 KiB and 1 MiB,
//! by lintel's paths and by iceoryx2, each with its fastest request/response, against the
//! copies an echo needs. Every case runs in each of ten interleaved rounds, pooled, so the
//! machine's moods fall on all of them alike.
//!
//! - `copy_<size>`: a raw door call whose handler returns its argument bytes, written with
//!   `Reply::copy_in_place` (the default, hostile-safe path: the caller gets a private copy, the
//!   handler a private `&[u8]`; the result is written where it travels). It
//!   carries `floor_ns`, the copies this path needs plus a null call (see `COPY_PATH_COPIES`),
//!   and `vs_floor`. The copies are timed as the path makes them, between two CPUs
//!   (`raw_copies_<size>`); `floor_hot_ns` and `vs_floor_hot` count them as one process's
//!   `memcpy` of cached bytes instead, which no echo between two CPUs can reach.
//! - `loan_<size>`: the caller fills a loan (`lintel::Loan::from_slice`) and passes it; the server copies it
//!   into a loan of its own (`Loaned::copy_to`: one copy out of untrusted memory, which is the
//!   snapshot) and answers with that; the caller reads the answer's ends in place. One copy per
//!   direction, as iceoryx2.
//! - `trusted_<size>`: the trusted placement. The door is made with `Door::create_trusting`, so
//!   its handler reads the arguments where the caller wrote them (`Request::args`) and copies
//!   them straight into its reply's room (`Reply::data_in_place`); the caller reads the result
//!   where it lies (`Door::call_in_place`) and checks its ends, as the loan case does. One copy
//!   per direction, as iceoryx2; for 8 B and 1 KiB (inside a slot's data region) it is the
//!   copy path.
//! - `memcpy_<size>`: one `copy_from_slice` in one process (the hot floor's unit).
//! - `raw_copies_<size>`: the copy path's four copies with nothing else: two threads on two
//!   CPUs share memory; the caller copies the payload into a request region and publishes it
//!   by a spun-on word, the other thread snapshots it and copies the snapshot into a reply
//!   region, the caller snapshots the reply. The two copies into shared regions are timed
//!   with plain stores and with stores around the caches (`lintel_sys::copy_around`), and the
//!   cheaper kept: the path picks between the two by size and by what plain stores cost
//!   lately, so neither fixed kind is its floor in every phase of these machines. The time of
//!   that echo less the time of the same echo with no payload (the words' round trip) is what
//!   the copies cost where they are made (each reads bytes the other CPU just wrote): the
//!   floor's copies.
//! - `null`: a door call with no data, to the same child (the floor's fixed part).
//! - `baseline/iceoryx2_echo_<size>`: iceoryx2's request/response (see `iceoryx2`).
//!
//! Each lintel case also gives `slept`: the share of its calls whose caller slept for the reply
//! rather than spinning until it came (`lintel::stats`, summed over the size classes).
//!
//! `LINTEL_BENCH_ECHO_SIZES=64k,1m` runs those sizes instead (any from 1 byte to 1 MiB: `16k`).

pub mod iceoryx2;

use anyhow::{bail, ensure};
use lintel::{Buffer, CallError, Door, Fault, Loan, Reply, Request};

use crate::bulk::{measure_echo, measure_memcpy};
use crate::harness::{
    CaseResult, ChildDomain, Config, Report, Stats, measure_batched, serve_all_forever, spin_until,
};
use lintel_sys::Mapping;

pub const SUITE: &str = "echo";
/// The child role serving the echo doors.
pub const ROLE: &str = "echo";

const SIZES: [(&str, usize); 4] = [("8", 8), ("1k", 1 << 10), ("64k", 64 << 10), ("1m", 1 << 20)];
const ROUNDS: u64 = 10;

/// Copies of the payload the copy path must make for an echo: the caller's into shared memory,
/// the server's snapshot out of it (the caller may still write it), the handler's own (its
/// reply, copied into shared memory with `Reply::copy_in_place`), and the caller's
/// snapshot of the result.
const COPY_PATH_COPIES: f64 = 4.0;

/// Operations per case over all rounds, and per timed batch.
fn iters(cfg: &Config, size: usize) -> (u64, u64) {
    let (n, batch) = match size {
        s if s <= 1 << 10 => (100_000, 20),
        s if s <= 64 << 10 => (20_000, 1),
        _ => (2_000, 1),
    };
    (cfg.iters(n).max(ROUNDS), batch)
}

/// The doors the child offers: copy echo, loan echo, null.
fn doors() -> Vec<Door> {
    let copy = Door::create(0, |req: Request<'_>, reply: &mut Reply| {
        reply.copy_in_place(req.data);
        Ok(())
    });
    let loan = Door::create(1, |req: Request<'_>, reply: &mut Reply| {
        let Some(Buffer::Loaned(asked)) = req.buffers.first() else {
            return Err(Fault(1));
        };
        let mut answer = Loan::new(asked.len()).map_err(|_| Fault(2))?;
        asked.copy_to(answer.as_mut_slice());
        reply.buffers.push(Buffer::Loan(answer));
        Ok(())
    });
    let null = Door::create(2, |_: Request<'_>, _: &mut Reply| -> Result<(), Fault> { Ok(()) });
    let trusted = Door::create_trusting(3, |req: Request<'_>, reply: &mut Reply| {
        let args = req.args();
        args.copy_to(reply.data_in_place(args.len()));
        Ok(())
    });
    vec![copy, loan, null, trusted]
}

/// The child side: serve the echo doors until killed.
pub fn child(_args: &[String]) -> anyhow::Result<()> {
    serve_all_forever(doors())
}

/// One case's rounds, and of the calls they made to other domains, how
/// many there were and how many slept for their reply (`lintel::stats`).
#[derive(Default)]
struct Rounds {
    stats: Vec<Stats>,
    calls: u64,
    slept: u64,
}

impl Rounds {
    fn add(&mut self, s: anyhow::Result<Stats>) -> anyhow::Result<()> {
        self.stats.push(s?);
        Ok(())
    }

    /// Add the round `measure` times, counting its calls' sleeps.
    fn add_counted(&mut self, measure: impl FnOnce() -> anyhow::Result<Stats>) -> anyhow::Result<()> {
        let before = lintel::stats::snapshot();
        let s = measure();
        let d = lintel::stats::snapshot().since(&before);
        self.calls += d.sized.iter().sum::<u64>();
        self.slept += d.slept.iter().sum::<u64>();
        self.add(s)
    }

    fn pooled(&self) -> Stats {
        Stats::pooled(&self.stats)
    }

    /// The share of calls whose caller slept for the reply.
    fn slept_share(&self) -> f64 {
        self.slept as f64 / self.calls.max(1) as f64
    }
}

/// A size as `LINTEL_BENCH_ECHO_SIZES` names it: bytes, or KiB or MiB
/// with `k` or `m` after them (`8`, `16k`, `1m`), up to 1 MiB.
fn size_named(name: &str) -> anyhow::Result<(String, usize)> {
    let (digits, unit) = match name.strip_suffix('k') {
        Some(d) => (d, 1 << 10),
        None => match name.strip_suffix('m') {
            Some(d) => (d, 1 << 20),
            None => (name, 1),
        },
    };
    let size = digits.parse::<usize>().ok().and_then(|n| n.checked_mul(unit));
    match size {
        Some(size) if (1..=1 << 20).contains(&size) => Ok((name.to_string(), size)),
        _ => bail!("LINTEL_BENCH_ECHO_SIZES: {name:?} is not a size from 1 byte to 1m (as 8, 16k, 1m)"),
    }
}

pub fn run(cfg: &Config, report: &mut Report) -> anyhow::Result<()> {
    let child = ChildDomain::spawn(cfg, ROLE)?;
    let [copy, loan, null, trusted] = child.doors() else {
        bail!("the echo child offered {} doors, expected 4", child.doors().len());
    };
    ensure!(!copy.is_local(), "the child's echo door is local");
    let ice = iceoryx2::Echo::start(cfg)?;
    let mut null_rounds = Rounds::default();
    let sizes = match std::env::var("LINTEL_BENCH_ECHO_SIZES") {
        Ok(only) => only
            .split(',')
            .map(size_named)
            .collect::<anyhow::Result<Vec<_>>>()?,
        Err(_) => SIZES.map(|(name, size)| (name.to_string(), size)).to_vec(),
    };
    for (name, size) in sizes {
        let name = name.as_str();
        let data: Vec<u8> = (0..size).map(|i| (i * 131 + 7) as u8).collect();
        let (n, batch) = iters(cfg, size);
        let per_round = (n / ROUNDS).max(batch);
        let [mut c, mut l, mut t, mut m, mut i, mut r, mut ra, mut r0]: [Rounds; 8] = Default::default();
        for _ in 0..ROUNDS {
            c.add_counted(|| measure_echo(copy, &data, per_round, batch))?;
            i.add(ice.measure(&data, per_round, batch))?;
            l.add_counted(|| measure_loan(loan, &data, per_round, batch))?;
            t.add_counted(|| measure_trusted(trusted, &data, per_round, batch))?;
            m.add(Ok(measure_memcpy(&data, per_round, batch)))?;
            r.add(Ok(measure_raw_echo(&data, per_round, batch, Mapping::write)))?;
            ra.add(Ok(measure_raw_echo(
                &data,
                per_round,
                batch,
                Mapping::write_around,
            )))?;
            r0.add(Ok(measure_raw_echo(&[], per_round.min(1000), 20, Mapping::write)))?;
            null_rounds.add(measure_null(null, per_round.min(1000), 20))?;
        }
        let slept = [c.slept_share(), l.slept_share(), t.slept_share()];
        let (c, l, t, m, i) = (c.pooled(), l.pooled(), t.pooled(), m.pooled(), i.pooled());
        // The floor's copies at the cheaper of the two kinds of stores.
        let (r, ra, r0) = (r.pooled(), ra.pooled(), r0.pooled());
        let (r, stores) = if ra.median_ns < r.median_ns {
            (ra, "around the caches")
        } else {
            (r, "plain")
        };
        let null_ns = null_rounds.pooled().median_ns;
        let copies_ns = (r.median_ns - r0.median_ns).max(0.0);
        let floor = null_ns + copies_ns;
        let floor_hot = null_ns + COPY_PATH_COPIES * m.median_ns;
        let ice_case = format!("iceoryx2_echo_{name}");
        report.push(
            CaseResult::new(SUITE, &format!("copy_{name}"), &c)
                .compare_to("baseline", &ice_case)
                .with_field("bytes", size as f64)
                .with_field("vs_iceoryx2", c.median_ns / i.median_ns)
                .with_field("floor_ns", floor)
                .with_field("vs_floor", c.median_ns / floor)
                .with_field("floor_hot_ns", floor_hot)
                .with_field("vs_floor_hot", c.median_ns / floor_hot)
                .with_field("slept", slept[0])
                .with_note(format!(
                    "{size} bytes each way, copied; {:.2}× iceoryx2 (target ≤ 1.5 at 64k and 1m); \
                     {:.2}× its floor of {} copies between two CPUs and a null call, {floor:.0} ns \
                     (target ≤ 1.5; {:.2}× the same copies of cached bytes in one process, \
                     {floor_hot:.0} ns); the caller slept on {:.1}% of calls",
                    c.median_ns / i.median_ns,
                    c.median_ns / floor,
                    COPY_PATH_COPIES,
                    c.median_ns / floor_hot,
                    100.0 * slept[0]
                )),
        );
        report.push(
            CaseResult::new(SUITE, &format!("loan_{name}"), &l)
                .compare_to("baseline", &ice_case)
                .with_field("bytes", size as f64)
                .with_field("vs_iceoryx2", l.median_ns / i.median_ns)
                .with_field("slept", slept[1])
                .with_note(format!(
                    "{size} bytes each way in loans, one copy each way; {:.2}× iceoryx2 (target ≤ 1 at 64k and 1m); \
                     the caller slept on {:.1}% of calls",
                    l.median_ns / i.median_ns,
                    100.0 * slept[1]
                )),
        );
        report.push(
            CaseResult::new(SUITE, &format!("trusted_{name}"), &t)
                .compare_to("baseline", &ice_case)
                .with_field("bytes", size as f64)
                .with_field("vs_iceoryx2", t.median_ns / i.median_ns)
                .with_field("slept", slept[2])
                .with_note(format!(
                    "{size} bytes each way, trusted placement (arguments and result read in place), \
                     one copy each way; {:.2}× iceoryx2 (target ≤ 1 at 64k and 1m); \
                     the caller slept on {:.1}% of calls",
                    t.median_ns / i.median_ns,
                    100.0 * slept[2]
                )),
        );
        report.push(
            CaseResult::new(SUITE, &format!("memcpy_{name}"), &m)
                .with_field("bytes", size as f64)
                .with_note("one copy_from_slice in one process, buffers 2 KiB apart modulo 4 KiB"),
        );
        report.push(
            CaseResult::new(SUITE, &format!("raw_copies_{name}"), &r)
                .with_field("bytes", size as f64)
                .with_field("round_trip_ns", r0.median_ns)
                .with_field("copies_ns", copies_ns)
                .with_note(format!(
                    "the copy path's four copies between two threads on two CPUs, signalled by \
                     spun-on words, stores into shared memory {stores} (the cheaper here); less \
                     the same echo with no payload ({:.0} ns): the floor's copies, {copies_ns:.0} ns",
                    r0.median_ns
                )),
        );
        report.push(
            CaseResult::new("baseline", &ice_case, &i)
                .with_field("bytes", size as f64)
                .with_note(
                    "iceoryx2 0.10 request/response over [u8], both sides busy-polling: \
                     the client copies into a loaned request, the server into a loaned response",
                ),
        );
    }
    report.push(
        CaseResult::new(SUITE, "null", &null_rounds.pooled())
            .with_note("a door call with no data to the same child, for the floors"),
    );
    ice.stop()
}

/// The copy path's four copies and nothing else (`raw_copies_<size>`): this thread copies
/// `data` into a request region of memory shared with a second thread and publishes it by
/// bumping a word; the second, spinning on that word, snapshots the request into its own
/// memory and copies the snapshot into a reply region, then bumps a word of its own; this
/// thread, spinning on it, snapshots the reply. The copies into the two regions are `write`'s
/// (plain stores, or around the caches: the path picks between the two by size and by what
/// plain stores cost lately; the floor takes the cheaper). Timed per echo; with empty `data`,
/// the round trip of the two words alone.
fn measure_raw_echo(data: &[u8], iters: u64, batch: u64, write: fn(&Mapping, usize, &[u8])) -> Stats {
    use std::sync::atomic::Ordering::Release;
    const REQ_SEQ: usize = 0;
    const REP_SEQ: usize = 128;
    const STOP: u64 = u64::MAX;
    let len = data.len();
    let region = len.next_multiple_of(4096).max(4096);
    let (req, rep) = (4096, 4096 + region);
    let fd =
        lintel_sys::shared_memfd("lintel-bench-raw-echo", rep + region).expect("a memfd for the raw echo");
    let m = Mapping::map_shared(&fd, rep + region, true).expect("the raw echo's mapping");
    let wait = |word: usize, want: &dyn Fn(u64) -> bool| spin_until(m.u64(word), want);
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut snapshot = vec![0u8; len];
            let mut seen = 0;
            loop {
                seen = wait(REQ_SEQ, &|v| v != seen);
                if seen == STOP {
                    return;
                }
                m.read(req, &mut snapshot);
                write(&m, rep, &snapshot);
                m.u64(REP_SEQ).store(seen, Release);
            }
        });
        let mut own = vec![0u8; len];
        let mut seq = 0u64;
        let stats = measure_batched(iters, batch, || {
            seq += 1;
            write(&m, req, std::hint::black_box(data));
            m.u64(REQ_SEQ).store(seq, Release);
            wait(REP_SEQ, &|v| v == seq);
            m.read(rep, &mut own);
            std::hint::black_box(&mut own);
        });
        m.u64(REQ_SEQ).store(STOP, Release);
        assert!(own == data, "the raw echo came back changed");
        stats
    })
}

fn measure_loan(door: &Door, data: &[u8], iters: u64, batch: u64) -> anyhow::Result<Stats> {
    let mut reply = Reply::new();
    let round = || -> Result<bool, CallError> {
        let loan = Loan::from_slice(data)?;
        door.call_with(&[], &[], vec![Buffer::Loan(loan)], &mut reply)?;
        let ok = match reply.buffers.first() {
            Some(Buffer::Loaned(l)) => {
                l.len() == data.len()
                    && l.get(0) == data.first().copied()
                    && l.get(data.len() - 1) == data.last().copied()
            }
            _ => false,
        };
        reply.buffers.clear();
        Ok(ok)
    };
    checked_rounds("loan echo", data.len(), iters, batch, round)
}

/// Time `round` (one call, true if its answer was right), stopping at the first wrong answer
/// or error, which fails the case.
fn checked_rounds(
    what: &str,
    bytes: usize,
    iters: u64,
    batch: u64,
    mut round: impl FnMut() -> Result<bool, CallError>,
) -> anyhow::Result<Stats> {
    let mut failure = None;
    let stats = measure_batched(iters, batch, || {
        if failure.is_some() {
            return;
        }
        match round() {
            Ok(true) => {}
            Ok(false) => failure = Some("the answer came back changed".to_string()),
            Err(e) => failure = Some(e.to_string()),
        }
    });
    match failure {
        Some(f) => bail!("{what} of {bytes} bytes: {f}"),
        None => Ok(stats),
    }
}

fn measure_trusted(door: &Door, data: &[u8], iters: u64, batch: u64) -> anyhow::Result<Stats> {
    let (first, last) = (data.first().copied(), data.last().copied());
    checked_rounds("trusted echo", data.len(), iters, batch, || {
        door.call_in_place(data, |r| {
            r.len() == data.len() && r.get(0) == first && r.get(data.len() - 1) == last
        })
    })
}

fn measure_null(door: &Door, iters: u64, batch: u64) -> anyhow::Result<Stats> {
    let mut reply = Reply::new();
    checked_rounds("null call", 0, iters, batch, || {
        door.call(&[], &[], &mut reply).map(|()| true)
    })
}
