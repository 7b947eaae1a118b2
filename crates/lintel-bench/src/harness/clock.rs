//! A cheap clock for timing batches: `rdtsc` on x86_64 (calibrated once against
//! [`Instant`]), [`Instant`] elsewhere or when the TSC is not invariant.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// How long the TSC is calibrated against `Instant`, once per process.
const CALIBRATION: Duration = Duration::from_millis(20);

enum Source {
    /// Invariant TSC; nanoseconds per tick.
    #[cfg(target_arch = "x86_64")]
    Tsc(f64),
    /// `Instant`, as nanoseconds since this origin.
    Instant(Instant),
}

fn source() -> &'static Source {
    static SOURCE: OnceLock<Source> = OnceLock::new();
    SOURCE.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        if tsc_is_invariant() {
            return Source::Tsc(calibrate_tsc());
        }
        Source::Instant(Instant::now())
    })
}

#[cfg(target_arch = "x86_64")]
fn rdtsc() -> u64 {
    lintel_sys::tsc()
}

#[cfg(target_arch = "x86_64")]
fn tsc_is_invariant() -> bool {
    std::fs::read_to_string("/proc/cpuinfo")
        .map(|s| s.contains(" constant_tsc") && s.contains(" nonstop_tsc"))
        .unwrap_or(false)
}

#[cfg(target_arch = "x86_64")]
fn calibrate_tsc() -> f64 {
    let (i0, t0) = (Instant::now(), rdtsc());
    std::thread::sleep(CALIBRATION);
    let (i1, t1) = (Instant::now(), rdtsc());
    i1.duration_since(i0).as_nanos() as f64 / t1.wrapping_sub(t0).max(1) as f64
}

/// The current time in clock ticks; only differences are meaningful (see [`ticks_to_ns`]).
#[inline]
pub fn ticks() -> u64 {
    match source() {
        #[cfg(target_arch = "x86_64")]
        Source::Tsc(_) => rdtsc(),
        Source::Instant(origin) => origin.elapsed().as_nanos() as u64,
    }
}

/// Converts a difference of [`ticks`] to nanoseconds.
#[inline]
pub fn ticks_to_ns(delta: u64) -> f64 {
    match source() {
        #[cfg(target_arch = "x86_64")]
        Source::Tsc(ns_per_tick) => delta as f64 * ns_per_tick,
        Source::Instant(_) => delta as f64,
    }
}

/// Which clock is in use, e.g. "rdtsc 2.000 GHz"; calibrates on first use.
pub fn clock_description() -> String {
    match source() {
        #[cfg(target_arch = "x86_64")]
        Source::Tsc(ns_per_tick) => format!("rdtsc {:.3} GHz", 1.0 / ns_per_tick),
        Source::Instant(_) => "Instant".to_string(),
    }
}
