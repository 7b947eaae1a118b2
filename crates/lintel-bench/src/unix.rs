//! Suite `unix`: the cost of trap emulation (Linux's syscall user dispatch,
//! `lintel_unix::trap`) beside a native system call, the first figure of
//! the emulation library for unmodified programs:
//!
//! - `native_call`: `getppid(2)` through libc, into the kernel;
//! - `trapped_call`: the same call from an armed thread, bounced back as
//!   SIGSYS and answered in the process (Mach 3.0's trap emulation);
//! - `trapped_passthrough`: trapped, then made for real from the exempt
//!   code range (what every call not served by lintel pays).

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use lintel_unix::trap::{self, Emulator};

use crate::harness::{CaseResult, Config, Report, measure_batched};

pub const SUITE: &str = "unix";

struct Ppid {
    answer: AtomicU64,
    emulate: bool,
}

impl Emulator for Ppid {
    fn emulate(&self, nr: i64, _args: [u64; 6]) -> Option<i64> {
        (self.emulate && nr == libc::SYS_getppid).then(|| self.answer.load(Relaxed) as i64)
    }
}

static EMULATED: Ppid = Ppid {
    answer: AtomicU64::new(0),
    emulate: true,
};
static PASSED: Ppid = Ppid {
    answer: AtomicU64::new(0),
    emulate: false,
};

fn getppid() -> i32 {
    // SAFETY: a plain system call through libc.
    unsafe { libc::getppid() }
}

pub fn run(cfg: &Config, report: &mut Report) -> anyhow::Result<()> {
    let iters = cfg.iters(200_000);
    let real = getppid();
    EMULATED.answer.store(real as u64 + 1, Relaxed);
    let native = measure_batched(iters, 100, || {
        std::hint::black_box(getppid());
    });
    // Armed only around the measured loop: the harness's own calls
    // (allocations) would pass through, and count, otherwise.
    let mut got = 0;
    trap::arm(&EMULATED)?;
    let trapped = measure_batched(iters, 100, || got = getppid());
    trap::disarm();
    anyhow::ensure!(
        got == real + 1,
        "the trapped call was not answered by the emulator"
    );
    trap::arm(&PASSED)?;
    let passed = measure_batched(iters, 100, || got = getppid());
    trap::disarm();
    anyhow::ensure!(got == real, "the passed-through call did not reach the kernel");
    report.push(CaseResult::new(SUITE, "native_call", &native));
    report.push(
        CaseResult::new(SUITE, "trapped_call", &trapped)
            .compare_to(SUITE, "native_call")
            .with_note("getppid from an armed thread: SIGSYS, answered in the process"),
    );
    report.push(
        CaseResult::new(SUITE, "trapped_passthrough", &passed)
            .compare_to(SUITE, "native_call")
            .with_note("getppid from an armed thread: SIGSYS, then made for real from the exempt range"),
    );
    Ok(())
}
