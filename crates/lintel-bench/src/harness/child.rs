//! Second processes: the benchmark re-executes its own binary as `lintel-bench __child ROLE ARGS..`,
//! and `main` dispatches ROLE (a `match` there) before parsing the normal command line.
//!
//! Parent side: [`spawn_self`] builds the command, [`ChildProc::spawn`] starts it passing fds by
//! inheritance (their numbers go in the arguments via [`fd_arg`]), [`ChildProc::finish`] reaps it.
//! Child side: `main` calls [`init_child`] (death signal, pinning), the role takes its fds back
//! with [`take_fd`].

use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use rustix::io::{FdFlags, fcntl_setfd};
use rustix::process::{Signal, WaitId, WaitIdOptions, getppid, set_parent_process_death_signal, waitid};
use rustix::thread::{CpuSet, sched_setaffinity};

use super::Config;

/// The hidden first argument that marks a child process.
pub const CHILD_ARG: &str = "__child";
/// With `--pin`: the CPU of the benchmark process.
pub const PARENT_CPU: usize = 0;
/// With `--pin`: the CPU of every child process.
pub const CHILD_CPU: usize = 1;

/// Environment: the parent's pid, so a child can tell it was orphaned before `init_child`.
const ENV_PARENT: &str = "LINTEL_BENCH_PARENT";
/// Environment: the CPU the child pins itself to, when pinning.
const ENV_CPU: &str = "LINTEL_BENCH_CPU";

/// A command running this binary as child `role` with `args` (pinned to [`CHILD_CPU`] with `--pin`).
pub fn spawn_self(cfg: &Config, role: &str, args: &[String]) -> anyhow::Result<Command> {
    let exe = std::env::current_exe().context("locating the lintel-bench binary")?;
    let mut cmd = Command::new(exe);
    cmd.arg(CHILD_ARG).arg(role).args(args);
    cmd.env(ENV_PARENT, std::process::id().to_string());
    if cfg.pin {
        cmd.env(ENV_CPU, CHILD_CPU.to_string());
    } else {
        cmd.env_remove(ENV_CPU);
    }
    Ok(cmd)
}

/// Marks `cmd` (which runs this binary as a child role, perhaps under a tool such as valgrind,
/// which keeps the pid) as this process's child, unpinned.
pub fn mark_child(cmd: &mut Command) {
    cmd.env(ENV_PARENT, std::process::id().to_string());
    cmd.env_remove(ENV_CPU);
}

/// The argument that names `fd` to a child (read back with [`take_fd`]).
pub fn fd_arg(fd: BorrowedFd<'_>) -> String {
    fd.as_raw_fd().to_string()
}

/// A running child; killed and reaped on drop unless [`ChildProc::finish`] reaped it.
pub struct ChildProc {
    child: Child,
    reaped: bool,
}

impl ChildProc {
    /// Spawns `cmd`, letting the child inherit `fds`. Close-on-exec is cleared on them for the
    /// spawn only, so start children from one thread at a time.
    pub fn spawn(mut cmd: Command, fds: &[BorrowedFd<'_>]) -> anyhow::Result<Self> {
        for fd in fds {
            fcntl_setfd(fd, FdFlags::empty()).context("clearing close-on-exec")?;
        }
        let spawned = cmd.spawn();
        for fd in fds {
            fcntl_setfd(fd, FdFlags::CLOEXEC).context("restoring close-on-exec")?;
        }
        let child = spawned.with_context(|| format!("spawning {cmd:?}"))?;
        Ok(ChildProc { child, reaped: false })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits up to `timeout` for the child to exit (after the suite told it to stop) and fails
    /// unless it exited successfully; a child still running then is killed.
    pub fn finish(mut self, timeout: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + timeout;
        let status = loop {
            if let Some(status) = self.child.try_wait().context("waiting for child")? {
                break status;
            }
            if Instant::now() >= deadline {
                bail!("child {} still running after {timeout:?}; killed", self.pid());
            }
            std::thread::sleep(Duration::from_millis(1));
        };
        self.reaped = true;
        if !status.success() {
            bail!("child {} failed: {status}", self.pid());
        }
        Ok(())
    }
}

impl Drop for ChildProc {
    fn drop(&mut self) {
        if !self.reaped {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// First thing a child does: die with its parent (SIGKILL on parent exit), make sure the parent
/// is still the one that spawned it, and pin itself if the parent asked to.
///
/// The death signal follows the parent *thread* that spawned the child: spawn from a thread that
/// lives as long as the child (the main thread, normally).
pub fn init_child() -> anyhow::Result<()> {
    set_parent_process_death_signal(Some(Signal::KILL)).context("PR_SET_PDEATHSIG")?;
    let expected = std::env::var(ENV_PARENT).context("child started without a parent pid")?;
    let parent = getppid().map_or(0, |p| p.as_raw_nonzero().get());
    if expected != parent.to_string() {
        bail!("parent {expected} is gone (parent is now {parent})");
    }
    if let Ok(cpu) = std::env::var(ENV_CPU) {
        pin_self(cpu.parse().context("bad LINTEL_BENCH_CPU")?)?;
    }
    Ok(())
}

/// Pins the calling thread (the whole process, if called before it starts threads) to `cpu`.
pub fn pin_self(cpu: usize) -> anyhow::Result<()> {
    let mut set = CpuSet::new();
    set.set(cpu);
    sched_setaffinity(None, &set).with_context(|| format!("pinning to cpu {cpu}"))
}

/// Child side of [`fd_arg`]: takes ownership of the inherited fd named by `arg` and makes it
/// close-on-exec again. Take each fd once.
pub fn take_fd(arg: &str) -> anyhow::Result<OwnedFd> {
    let raw: RawFd = arg.parse().with_context(|| format!("bad fd argument {arg:?}"))?;
    if raw < 0 {
        bail!("bad fd argument {arg:?}");
    }
    lintel_sys::take_inherited(raw).with_context(|| format!("fd {raw} was not inherited"))
}

/// Blocks until child `pid` has exited, without reaping it (`waitid` with `WNOWAIT`), or returns
/// at once if it is already reaped. For a watcher thread that must notice a child's death while
/// the main thread sleeps where no error would reach it (a futex, a spin loop).
pub fn wait_until_exited(pid: u32) {
    let Some(pid) = i32::try_from(pid).ok().and_then(rustix::process::Pid::from_raw) else {
        return;
    };
    let options = WaitIdOptions::EXITED | WaitIdOptions::NOWAIT;
    while let Err(rustix::io::Errno::INTR) = waitid(WaitId::Pid(pid), options) {}
}
