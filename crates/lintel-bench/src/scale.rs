//! Suite `scale`: how a call's cost and a domain's memory grow with callers and doors.
//!
//! - `callers_<n>`, n = 1, 4, 16, 64, 256 (quick: 1, 4, 16): n client processes, each its own
//!   domain handed the server's door by this one (so each connects to the server directly, as
//!   a third party), call it with no data at once, every one in batches of 20. The
//!   median is over every caller's batch means: a call's latency while n callers share the
//!   server and the machine's cores. Fields: `calls_per_s` (all callers together, over the
//!   round's wall time), `server_pss_kib` and `server_threads` (the server after the round),
//!   `server_kib_per_caller` (its growth over `callers_1`'s, per caller added: a connection and
//!   the server thread that serves it), `caller_pss_kib` (the median caller). Compared to `callers_1`. On a machine with fewer
//!   cores than callers the curve is the scheduler's as much as lintel's: callers spin only as
//!   long as their recent calls took (then sleep on a futex), so they hand the cores over.
//! - `doors_<n>`, n = 1, 1,000, 100,000, 1,000,000 (quick: up to 100,000): this process holds
//!   n doors served by the child (made there, 64 per call) and calls the newest with no data.
//!   Fields: `holder_pss_kib` and `server_pss_kib` (each side's proportional set size grown
//!   since before the first door), `holder_bytes_per_door` and `server_bytes_per_door` (that
//!   growth over n), `make_ns_per_door` (the time to make and pass them). Compared to
//!   `doors_1`: a call does not get slower with the doors its domain holds. The holder is this
//!   process, whose heap earlier suites of the run may have left room in: its growth reads low
//!   (zero, even) until the doors outgrow that room; the server is a fresh process each time.
//! - `loan_arena`: the memory the first loan costs a domain (its arena mapped, one 4 KiB loan
//!   written), as `pss_kib`, beside the arena's size (`lintel::buffer::ARENA_SIZE`).
//!
//! PSS (`/proc/PID/smaps_rollup`) counts shared pages in proportion to the processes that map
//! them, so a connection's shared call area shows half in each of its two ends.

use std::time::Instant;

use anyhow::{Context as _, bail, ensure};
use lintel::{Door, Reply, Request};

use crate::harness::{
    CaseResult, ChildDomain, Config, Report, measure_batched, measure_batches, serve_forever,
};

pub const SUITE: &str = "scale";
/// The server's child role.
pub const ROLE: &str = "scale-server";
/// A caller's child role.
pub const CALLER_ROLE: &str = "scale-caller";

/// Calls per timed batch of a caller.
const BATCH: u64 = 20;
/// The server's methods, first byte of a call.
const NULL: u8 = 0;
/// `MAKE k`: returns k new doors (k ≤ 64), each answering with nothing.
const MAKE: u8 = 1;

/// The server: answers `NULL`, makes doors on `MAKE`.
pub fn child(_args: &[String]) -> anyhow::Result<()> {
    let door = Door::create(0, |req: Request<'_>, reply: &mut Reply| {
        match req.data.split_first() {
            None | Some((&NULL, _)) => {}
            Some((&MAKE, k)) => {
                let k = k.first().copied().unwrap_or(0).min(64);
                for i in 0..k {
                    reply
                        .doors
                        .push(Door::create(u64::from(i), |_: Request<'_>, _: &mut Reply| Ok(())));
                }
            }
            Some(_) => return Err(lintel::Fault(1)),
        }
        Ok(())
    });
    serve_forever(door)
}

/// A caller: given the server's door, offers a door that makes `calls` null calls on it
/// (u64 argument) and answers the batch means in ns (f64 each).
pub fn caller_child(_args: &[String]) -> anyhow::Result<()> {
    let _parent = lintel::boot::join_with(|given: &[Door]| {
        let server = given.first().cloned();
        vec![Door::create(0, move |req: Request<'_>, reply: &mut Reply| {
            let server = server.as_ref().ok_or(lintel::Fault(2))?;
            let calls = req
                .data
                .get(..8)
                .and_then(|b| b.try_into().ok())
                .map(u64::from_le_bytes)
                .ok_or(lintel::Fault(3))?;
            let mut failed = false;
            let stats = measure_batched(calls, BATCH, || {
                failed |= server.call_bytes(&[NULL]).is_err();
            });
            if failed {
                return Err(lintel::Fault(4));
            }
            for s in &stats.samples {
                reply.data.extend_from_slice(&s.to_le_bytes());
            }
            Ok(())
        })]
    })
    .context("joining the benchmark domain")?;
    loop {
        std::thread::park();
    }
}

pub fn run(cfg: &Config, report: &mut Report) -> anyhow::Result<()> {
    callers(cfg, report)?;
    doors(cfg, report)?;
    loan_arena(report)
}

fn callers(cfg: &Config, report: &mut Report) -> anyhow::Result<()> {
    let counts: &[usize] = if cfg.quick {
        &[1, 4, 16]
    } else {
        &[1, 4, 16, 64, 256]
    };
    let server = ChildDomain::spawn(cfg, ROLE)?;
    let calls = cfg.iters(20_000);
    let mut alone_kib = None;
    for &n in counts {
        let callers = (0..n)
            .map(|_| ChildDomain::spawn_offering(cfg, CALLER_ROLE, &[], &[server.door()]))
            .collect::<anyhow::Result<Vec<_>>>()
            .with_context(|| format!("starting {n} callers"))?;
        // Each caller makes its calls at once with the others (enough of them that their runs
        // overlap though they start a little apart); a thread here waits for each.
        let per_caller = (calls / n as u64).max(cfg.iters(2_000));
        let start = Instant::now();
        let answers: Vec<anyhow::Result<Vec<f64>>> = std::thread::scope(|s| {
            let handles: Vec<_> = callers
                .iter()
                .map(|c| {
                    s.spawn(move || -> anyhow::Result<Vec<f64>> {
                        let r = c.door().call_bytes(&per_caller.to_le_bytes())?;
                        Ok(r.chunks_exact(8)
                            .map(|b| f64::from_le_bytes(b.try_into().expect("8 bytes")))
                            .collect())
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap_or_else(|_| bail!("a caller's thread panicked")))
                .collect()
        });
        let wall = start.elapsed();
        let samples: Vec<f64> = answers
            .into_iter()
            .collect::<anyhow::Result<Vec<_>>>()?
            .into_iter()
            .flatten()
            .collect();
        ensure!(!samples.is_empty(), "callers_{n}: no samples");
        let stats = measure_batches(samples, BATCH);
        let mut caller_pss: Vec<u64> = callers
            .iter()
            .map(|c| pss_kib(c.pid()))
            .collect::<anyhow::Result<_>>()?;
        caller_pss.sort_unstable();
        let total = per_caller * n as u64;
        let server_kib = pss_kib(server.pid())?;
        let alone: u64 = *alone_kib.get_or_insert(server_kib);
        let mut case = CaseResult::new(SUITE, &format!("callers_{n}"), &stats);
        if n > 1 {
            // What each caller past the first costs the server: its connection (call area,
            // slots) and the server thread that serves it.
            let each = (server_kib as f64 - alone as f64) / (n - 1) as f64;
            case = case.with_field("server_kib_per_caller", each);
        }
        report.push(
            case.compare_to(SUITE, "callers_1")
                .with_field("calls_per_s", total as f64 / wall.as_secs_f64())
                .with_field("server_pss_kib", server_kib as f64)
                .with_field("server_threads", threads(server.pid())? as f64)
                .with_field("caller_pss_kib", caller_pss[caller_pss.len() / 2] as f64)
                .with_note(format!(
                    "{n} caller processes, {per_caller} null calls each at once, on {} cores",
                    std::thread::available_parallelism().map_or(0, |c| c.get())
                )),
        );
    }
    Ok(())
}

fn doors(cfg: &Config, report: &mut Report) -> anyhow::Result<()> {
    let counts: &[usize] = if cfg.quick {
        &[1, 1_000, 100_000]
    } else {
        &[1, 1_000, 100_000, 1_000_000]
    };
    let iters = cfg.iters(100_000);
    for &n in counts {
        // A server of its own for each count, so that each starts from nothing.
        let server = ChildDomain::spawn(cfg, ROLE)?;
        let ctl = server.door();
        ctl.call_bytes(&[NULL])?;
        let (holder0, server0) = (pss_kib(std::process::id())?, pss_kib(server.pid())?);
        let start = Instant::now();
        let mut held: Vec<Door> = Vec::with_capacity(n);
        while held.len() < n {
            let k = (n - held.len()).min(64) as u8;
            let mut reply = Reply::new();
            ctl.call(&[MAKE, k], &[], &mut reply)?;
            ensure!(
                reply.doors.len() == k as usize,
                "asked {k} doors, got {}",
                reply.doors.len()
            );
            held.append(&mut reply.doors);
        }
        let make = start.elapsed();
        let newest = held.last().cloned().context("no door")?;
        let stats = measure_batched(iters, 100, || {
            let _ = newest.call_bytes(&[]);
        });
        ensure!(
            newest.call_bytes(&[]).is_ok(),
            "doors_{n}: the newest door failed"
        );
        let holder = pss_kib(std::process::id())?.saturating_sub(holder0);
        let served = pss_kib(server.pid())?.saturating_sub(server0);
        report.push(
            CaseResult::new(SUITE, &format!("doors_{n}"), &stats)
                .compare_to(SUITE, "doors_1")
                .with_field("holder_pss_kib", holder as f64)
                .with_field("server_pss_kib", served as f64)
                .with_field("holder_bytes_per_door", holder as f64 * 1024.0 / n as f64)
                .with_field("server_bytes_per_door", served as f64 * 1024.0 / n as f64)
                .with_field("make_ns_per_door", make.as_nanos() as f64 / n as f64)
                .with_note(format!(
                    "{n} doors of the child held here; a null call on the newest"
                )),
        );
        drop((held, newest));
    }
    Ok(())
}

fn loan_arena(report: &mut Report) -> anyhow::Result<()> {
    let before = pss_kib(std::process::id())?;
    let start = Instant::now();
    let mut loan = lintel::Loan::new(4096)?;
    loan.as_mut_slice().fill(1);
    let took = start.elapsed().as_nanos() as f64;
    let grown = pss_kib(std::process::id())?.saturating_sub(before);
    report.push(
        CaseResult::new(SUITE, "loan_arena", &crate::harness::measure_single(&[took]))
            .with_field("pss_kib", grown as f64)
            .with_field("arena_bytes", lintel::buffer::ARENA_SIZE as f64)
            .with_note(
                "the first loan of a domain: its arena mapped and one 4 KiB loan written; \
                 the time is that first Loan::new (one sample), the memory its growth in PSS \
                 (zero if an earlier suite of this run made the arena)",
            ),
    );
    Ok(())
}

/// Proportional set size of process `pid`, in KiB.
fn pss_kib(pid: u32) -> anyhow::Result<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup"))
        .with_context(|| format!("reading the smaps of {pid}"))?;
    first_number(&text, "Pss:").with_context(|| format!("no Pss in the smaps of {pid}"))
}

/// Threads of process `pid`.
fn threads(pid: u32) -> anyhow::Result<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("reading the status of {pid}"))?;
    first_number(&text, "Threads:").with_context(|| format!("no thread count for {pid}"))
}

/// The first number on the line of `text` that starts with `key`.
fn first_number(text: &str, key: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_are_read_from_proc_text() {
        let text = "Rss:   1200 kB\nPss:    800 kB\nPss_Anon:  100 kB\n";
        assert_eq!(first_number(text, "Pss:"), Some(800));
        assert_eq!(first_number("Threads:\t7\n", "Threads:"), Some(7));
        assert_eq!(first_number(text, "Swap:"), None);
        assert!(pss_kib(std::process::id()).unwrap() > 0);
        assert!(threads(std::process::id()).unwrap() >= 1);
    }
}
