//! `recovery`: how long a service is gone when its domain is killed, from
//! `kill(SIGKILL)` to the first call its restarted instance serves, seen by
//! a client holding it with `lintel_system::Named`.
//!
//! A system of one domain serving `echo` runs under a supervisor in a child
//! process (this binary, re-executed), with a restart policy of no backoff,
//! so the time is the mechanism's: the supervisor noticing the death
//! (its pidfd becomes readable), `fork` and `exec` of the domain,
//! its runtime and services starting, the join and the bind, and the
//! client's lookup and first call. Each round's stages, as the client sees
//! them: `dead` (its runtime saw the server die), `found` (the lookup
//! returned the new instance's door) and `served` (the first call
//! returned). The baseline, `fork_exec`, is the same binary started and
//! waited for, doing nothing.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use lintel::{CallError, Door, Reply, Request};
use lintel_system::{Named, Names, Registry};

use crate::harness::{CaseResult, Config, Report, measure_single, spawn_self};

pub const SUITE: &str = "recovery";
/// The child that runs the system's supervisor.
pub const ROLE: &str = "recovery-system";
/// Kills in full mode (`--quick`: [`QUICK_ROUNDS`]).
const ROUNDS: usize = 100;
const QUICK_ROUNDS: usize = 10;
/// Longest any stage may take before the round fails.
const TIMEOUT: Duration = Duration::from_secs(10);
/// The aim for the p99 on a 2-core machine.
const TARGET_P99_MS: f64 = 50.0;

/// The services this binary hosts as a system: `echo`.
pub fn registry() -> Registry {
    let mut reg = Registry::new();
    reg.service("echo", |_| {
        Ok(Door::create(0, |req: Request<'_>, reply: &mut Reply| {
            reply.data.extend_from_slice(req.data);
            Ok(())
        }))
    });
    reg
}

/// The child role: supervise the system of manifest `args[0]` until
/// signalled.
pub fn child(args: &[String]) -> anyhow::Result<()> {
    let manifest = args.first().context("recovery-system: no manifest")?;
    // It ends when the suite sends SIGTERM.
    let _ = lintel_system::run(&registry(), ["lintel-bench", "boot", manifest.as_str()]);
    Ok(())
}

pub fn run(cfg: &Config, report: &mut Report) -> anyhow::Result<()> {
    let dir = std::env::temp_dir().join(format!("lintel-bench-recovery-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let result = measure(cfg, &dir, report);
    let _ = std::fs::remove_dir_all(&dir);
    result
}

fn measure(cfg: &Config, dir: &Path, report: &mut Report) -> anyhow::Result<()> {
    let manifest = dir.join("recovery.toml");
    std::fs::write(
        &manifest,
        "socket = \"sys.sock\"\n[domain.echo]\nservices = [\"echo\"]\nbackoff = \"0s\"\n\
         max_backoff = \"0s\"\nmax_restarts = 1000000\nperiod = \"1s\"\n",
    )?;
    let mut cmd = spawn_self(cfg, ROLE, &[manifest.display().to_string()])?;
    cmd.stderr(std::process::Stdio::null());
    let mut system = cmd.spawn().context("starting the system")?;
    let outcome = rounds(cfg, &dir.join("sys.sock"));
    let _ = rustix::process::kill_process(
        rustix::process::Pid::from_raw(system.id() as i32).context("the system's pid")?,
        rustix::process::Signal::TERM,
    );
    let _ = system.wait();
    let stages = outcome?;

    let rounds = stages.len();
    let fork_exec = fork_exec(if cfg.quick { QUICK_ROUNDS } else { ROUNDS })?;
    let base = measure_single(&fork_exec);
    report.push(
        CaseResult::new(SUITE, "fork_exec", &base)
            .with_note("this binary started and waited for, doing nothing (--version)"),
    );
    let total: Vec<f64> = stages.iter().map(|s| s[2]).collect();
    let stats = measure_single(&total);
    let median_of = |i: usize| {
        let mut v: Vec<f64> = stages
            .iter()
            .map(|s| if i == 0 { s[0] } else { s[i] - s[i - 1] })
            .collect();
        v.sort_by(f64::total_cmp);
        crate::harness::median(&v)
    };
    let (dead, found, served) = (median_of(0), median_of(1), median_of(2));
    let p99_ms = stats.p99_ns / 1e6;
    let mut note = format!(
        "from kill(SIGKILL) of the serving domain to the first call its new instance served, \
         through Named, no backoff; {rounds} kills; medians by stage: client saw the death \
         {:.2} ms, lookup found the new instance {:.2} ms later, first call {:.2} ms later; \
         p99 {p99_ms:.1} ms (aim < {TARGET_P99_MS} ms)",
        dead / 1e6,
        found / 1e6,
        served / 1e6
    );
    if p99_ms >= TARGET_P99_MS {
        note = format!("WARNING: over the aim; {note}");
    }
    report.push(
        CaseResult::new(SUITE, "death_to_first_call", &stats)
            .compare_to(SUITE, "fork_exec")
            .with_field("dead_ns", dead)
            .with_field("found_ns", found)
            .with_field("served_ns", served)
            .with_note(note),
    );
    Ok(())
}

/// Kill the serving domain `n` times; per round the times (ns after the
/// kill) at which the client saw the death, found the new instance and
/// had its first call served.
fn rounds(cfg: &Config, socket: &Path) -> anyhow::Result<Vec<[f64; 3]>> {
    let names = connect(socket)?;
    let echo = Named::<Door>::new(&names, "echo", TIMEOUT).context("looking up echo")?;
    echo.get()?.call_bytes(b"x").context("the first call")?;
    let n = if cfg.quick { QUICK_ROUNDS } else { ROUNDS };
    let mut out = Vec::with_capacity(n);
    for round in 0..n {
        let door = echo.get()?;
        let pid = rustix::process::Pid::from_raw(door.server_pid() as i32).context("a server pid")?;
        let killed = Instant::now();
        rustix::process::kill_process(pid, rustix::process::Signal::KILL).context("kill")?;
        while !door.is_dead() {
            if killed.elapsed() > TIMEOUT {
                bail!("round {round}: the death was not seen within {TIMEOUT:?}");
            }
            std::thread::yield_now();
        }
        let dead = killed.elapsed();
        let (found, served) = loop {
            let fresh = echo
                .get()
                .with_context(|| format!("round {round}: looking up echo again"))?;
            let found = killed.elapsed();
            match fresh.call_bytes(b"x") {
                Ok(_) => break (found, killed.elapsed()),
                Err(CallError::PeerDied) if killed.elapsed() < TIMEOUT => {}
                Err(e) => bail!("round {round}: the first call failed: {e}"),
            }
        };
        out.push([dead, found, served].map(|d| d.as_nanos() as f64));
    }
    Ok(out)
}

/// The system's name service, once its supervisor answers.
fn connect(socket: &Path) -> anyhow::Result<Names> {
    let start = Instant::now();
    loop {
        match lintel::boot::connect(socket, &[]) {
            Ok(mut doors) if !doors.is_empty() => {
                let names = Names::new(doors.remove(0));
                // A domain killed before the system is ready fails the boot.
                names
                    .await_ready(TIMEOUT)
                    .context("waiting for the system to be ready")?;
                return Ok(names);
            }
            _ if start.elapsed() < TIMEOUT => std::thread::sleep(Duration::from_millis(10)),
            Ok(_) => bail!("the supervisor offered no name service"),
            Err(e) => bail!("cannot reach the system at {}: {e}", socket.display()),
        }
    }
}

/// Nanoseconds to start this binary and wait for it, `n` times.
fn fork_exec(n: usize) -> anyhow::Result<Vec<f64>> {
    let exe = std::env::current_exe()?;
    (0..n)
        .map(|_| {
            let t = Instant::now();
            let st = std::process::Command::new(&exe)
                .arg("--version")
                .stdout(std::process::Stdio::null())
                .status()?;
            if !st.success() {
                bail!("{} --version failed: {st}", exe.display());
            }
            Ok(t.elapsed().as_nanos() as f64)
        })
        .collect()
}
