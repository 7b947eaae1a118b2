//! The phase of this machine's two CPUs, probed before each suite: what a plain store costs
//! into cache lines the other CPU has just read. The host moves these virtual CPUs between
//! places where such lines pass cheaply (near) and places where they do not (far) every few
//! seconds, and every cross-process case moves with it (a 4 KiB copy-path read took 1.2 µs
//! near and 2.2–3.4 µs far in the same hour), so the document says which phase each suite
//! began in.

use std::sync::atomic::Ordering;

use super::{Stats, measure_single, spin_until, ticks, ticks_to_ns};

const LEN: usize = 4096;
const ROUNDS: usize = 2000;

/// The probe: two threads pinned to the first two CPUs this process may use take turns, one
/// filling 4 KiB with plain stores (timed), the other copying them out. Returns the fills'
/// times (ns) and their median in time-stamp ticks per 64-byte line; `None` with fewer than
/// two CPUs.
pub fn probe() -> Option<(Stats, f64)> {
    use rustix::thread::{CpuSet, sched_getaffinity, sched_setaffinity};
    let allowed = sched_getaffinity(None).ok()?;
    let cpus: Vec<usize> = (0..CpuSet::MAX_CPU)
        .filter(|&c| allowed.is_set(c))
        .take(2)
        .collect();
    let [a, b] = cpus[..] else { return None };
    let pin = |cpu: usize| {
        let mut set = CpuSet::new();
        set.set(cpu);
        sched_setaffinity(None, &set).is_ok()
    };
    let fd = lintel_sys::shared_memfd("lintel-bench-phase", 2 * LEN).ok()?;
    let m = lintel_sys::Mapping::map_shared(&fd, 2 * LEN, true).ok()?;
    let turn = m.u64(LEN);
    let wait = |want: u64| spin_until(turn, |v| v == want);
    let mut fills = Vec::with_capacity(ROUNDS);
    let mut ticks_per_line = Vec::with_capacity(ROUNDS);
    let pinned = std::thread::scope(|s| {
        let reader = s.spawn(|| {
            let pinned = pin(b);
            let mut own = vec![0u8; LEN];
            for _ in 0..ROUNDS {
                wait(1);
                m.read(0, &mut own);
                std::hint::black_box(&mut own);
                turn.store(0, Ordering::Release);
            }
            pinned
        });
        let pinned = pin(a);
        let src = vec![0x5au8; LEN];
        for _ in 0..ROUNDS {
            wait(0);
            let t = ticks();
            m.write(0, std::hint::black_box(&src));
            let d = ticks().wrapping_sub(t);
            fills.push(ticks_to_ns(d));
            ticks_per_line.push(d as f64 / (LEN / 64) as f64);
            turn.store(1, Ordering::Release);
        }
        pinned & reader.join().unwrap_or(false)
    });
    let _ = sched_setaffinity(None, &allowed);
    if !pinned {
        return None;
    }
    ticks_per_line.sort_by(f64::total_cmp);
    Some((measure_single(&fills), super::median(&ticks_per_line)))
}
