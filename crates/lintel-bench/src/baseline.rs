//! Suite `baseline`: what the hardware and the kernel cost, between two processes, each case an
//! 8-byte message sent by the parent, echoed by a re-executed child, the parent timing round trips.
//!
//! - `spin_pingpong`: both sides spin on a shared word, no syscall at all;
//! - `futex_pingpong`: both sides sleep in `FUTEX_WAIT` on every exchange (a real wake-up);
//! - `pipe_pingpong`: two pipes; `uds_pingpong`: a `SOCK_STREAM` socketpair.
//!
//! The child role is [`ROLE`]; its first argument names the case.

mod shared_word;
mod stream;

use anyhow::bail;

use crate::harness::{Config, Report};
use shared_word::Mode;
pub use shared_word::spin_round;

pub const SUITE: &str = "baseline";
/// The child role of this suite, registered in `main`.
pub const ROLE: &str = "baseline";
/// The message that tells a child to exit.
const STOP: u64 = u64::MAX;
/// The case the others are compared to.
const REFERENCE: &str = "spin_pingpong";
/// `spin_pingpong` measured in rounds alternating with `door/null_cross_fast` (pushed by the
/// door suite, which owns the pairing).
pub const PAIRED: &str = "spin_pingpong_paired";

/// Runs the four cases: spin ~200k round trips, the blocking ones ~50k (10× fewer with --quick).
pub fn run(cfg: &Config, report: &mut Report) -> anyhow::Result<()> {
    let (spin_iters, blocking_iters) = (cfg.iters(200_000), cfg.iters(50_000));
    report.push(shared_word::measure(cfg, Mode::Spin, spin_iters, 100)?);
    let cases = [
        shared_word::measure(cfg, Mode::Futex, blocking_iters, 10)?,
        stream::measure_pipe(cfg, blocking_iters, 10)?,
        stream::measure_uds(cfg, blocking_iters, 10)?,
    ];
    for case in cases {
        report.push(case.compare_to(SUITE, REFERENCE));
    }
    Ok(())
}

/// The child side: `__child baseline CASE FD..`.
pub fn child(args: &[String]) -> anyhow::Result<()> {
    match args {
        [case, fds @ ..] => match case.as_str() {
            "spin" => shared_word::child(Mode::Spin, fds),
            "futex" => shared_word::child(Mode::Futex, fds),
            "stream" => stream::child(fds),
            other => bail!("unknown baseline child case {other:?}"),
        },
        [] => bail!("baseline child needs a case"),
    }
}
