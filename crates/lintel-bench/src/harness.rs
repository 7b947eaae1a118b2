//! The benchmark harness: what every suite uses.
//!
//! - [`Config`] is handed to each suite; [`Suite`] is the suite signature, registered by name in `main`.
//! - [`measure_batched`] / [`measure_single`] turn timings into [`Stats`] (median and p99, in ns).
//! - [`Report`] collects one [`CaseResult`] per case and writes the JSON lines and the table.
//! - [`spawn_self`] / [`ChildProc`] run a second process (this binary again, as a child role);
//!   [`SharedMem`] is a `memfd` mapping both processes share; [`ChildDomain`] is a child that
//!   serves doors.
//! - [`voluntary_switches`] checks that a blocking case really sleeps.
//! - [`probe_phase`] times how dear a plain store into the other CPU's lines is now.

mod child;
mod clock;
mod domain;
mod phase;
mod report;
mod shm;
mod stats;
mod switches;

pub use child::{
    CHILD_ARG, CHILD_CPU, ChildProc, PARENT_CPU, fd_arg, init_child, mark_child, pin_self, spawn_self,
    take_fd, wait_until_exited,
};
pub use clock::{clock_description, ticks, ticks_to_ns};
pub use domain::{ChildDomain, serve_all_forever, serve_forever};
pub use phase::probe as probe_phase;
pub use report::{CaseResult, P99_DEFINITION, Report, fmt_ns};
pub use shm::{SharedMem, spin_until};
pub use stats::{Stats, measure_batched, measure_batches, measure_single, median, percentile};
pub use switches::voluntary_switches;

/// Run-wide options handed to every suite.
#[derive(Clone, Copy, Debug, Default)]
pub struct Config {
    /// Run about 10× fewer iterations (the whole program stays well under 30 s).
    pub quick: bool,
    /// Parent pinned to [`PARENT_CPU`], children to [`CHILD_CPU`] (default: unpinned).
    pub pin: bool,
}

impl Config {
    /// The iteration count to use for a case that runs `full` iterations in full mode.
    pub fn iters(&self, full: u64) -> u64 {
        if self.quick { (full / 10).max(1) } else { full }
    }
}

/// A suite: measures its cases and pushes one [`CaseResult`] each into the report.
pub type Suite = fn(&Config, &mut Report) -> anyhow::Result<()>;

/// A child role: the body of a re-executed child process, given the arguments after the role name.
pub type ChildRole = fn(&[String]) -> anyhow::Result<()>;
