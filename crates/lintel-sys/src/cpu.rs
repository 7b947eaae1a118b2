//! The clock, the CPU, and process-wide memory barriers.

/// `CLOCK_MONOTONIC` now, in ns: the clock deadlines are written in, the
/// same in every process on the machine.
/// (glibc's `clock_gettime`, a vDSO read; rustix's own vDSO lookup faults
/// under valgrind.)
#[inline]
pub fn monotonic_ns() -> u64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `t` is a valid, writable timespec for the call's duration.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut t) };
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

/// Register this process for expedited memory barriers (`fence`); false
/// if the kernel (or a sandbox, or valgrind) refuses.
pub fn membarrier_register() -> bool {
    use rustix::thread::{MembarrierCommand, membarrier};
    membarrier(MembarrierCommand::RegisterPrivateExpedited).is_ok()
}

/// A full memory barrier on every running thread of this process; false if
/// the kernel refuses (the process is not registered).
pub fn membarrier() -> bool {
    use rustix::thread::{MembarrierCommand, membarrier};
    membarrier(MembarrierCommand::PrivateExpedited).is_ok()
}

/// Move the calling thread off `cpu`: allowed everywhere else for a moment
/// (the kernel migrates it at once), then its own affinity back (it stays
/// where it went until the scheduler moves it). Nothing happens if it may
/// run on `cpu` only.
pub fn move_off_cpu(cpu: u32) {
    use rustix::thread::{sched_getaffinity, sched_setaffinity};
    let Ok(mine) = sched_getaffinity(None) else { return };
    let mut away = mine;
    away.unset(cpu as usize);
    if away.count() == 0 {
        return;
    }
    if sched_setaffinity(None, &away).is_ok() {
        let _ = sched_setaffinity(None, &mine);
    }
}

/// The CPU this thread runs on now. glibc's `sched_getcpu` reads it from
/// the thread's restartable-sequences area (rseq, a load) or the vDSO, and
/// works under valgrind, where rustix's own vDSO lookup faults.
#[inline]
pub fn current_cpu() -> u32 {
    // SAFETY: `sched_getcpu` takes no arguments and only reads the calling
    // thread's state; it returns -1 (here u32::MAX, "unknown") on failure.
    unsafe { libc::sched_getcpu() as u32 }
}

/// Start loading the cache line at `addr` into the cache: a hint, which
/// never faults and reads nothing anyone sees, whatever the address.
#[inline]
pub fn prefetch(addr: u64) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        // SAFETY: SSE is part of x86-64's baseline, and a prefetch has no
        // effect but on the cache: no fault, whatever the address.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(addr as *const i8) };
    }
}

/// The time-stamp counter (x86-64), for timing stages of a call in cycles.
#[cfg(target_arch = "x86_64")]
#[inline]
pub fn tsc() -> u64 {
    // SAFETY: `rdtsc` has no preconditions on x86-64; it only reads the
    // time-stamp counter.
    unsafe { core::arch::x86_64::_rdtsc() }
}
