//! `null_instructions`: instructions per null call on each side, counted by callgrind, so the
//! fast path's cost can be compared run to run without the machine's noise.
//!
//! Two processes run under `valgrind --tool=callgrind` with spinning off (`LINTEL_SPIN=off`, so
//! every wait takes the same sleeping path and the counts repeat): a client (child role
//! [`CLIENT_ROLE`]) that calls the null door of a server (child role [`SERVER_ROLE`]) it starts
//! with `lintel::boot::spawn`. Collection is on only inside
//!
//! - the client's [`client_calls`] (the loop of `Door::call`s), and
//! - the server's worker threads (`lintel::server::run_worker`) in one pair of runs, and the
//!   handler alone ([`null_handler`]) in another; the server's figure is the first less the
//!   second. (Nesting the two toggles in one run would turn collection off inside the handler,
//!   but a handler reached by a tail call leaves it off for good: counted apart, the figure
//!   does not depend on how the compiler calls it.)
//!
//! Each count per call is the difference between a run of [`N_LONG`] and one of [`N_SHORT`]
//! calls, divided by the difference in calls: start-up, binding and exit cancel out. The
//! syscalls' own instructions (in the kernel) are not counted by valgrind.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context as _, bail, ensure};
use lintel::{Door, Fault, Reply, Request};

use super::SUITE;
use crate::harness::{CHILD_ARG, CaseResult, Config, Stats, mark_child};

/// Child role: the calling side, run under callgrind.
pub const CLIENT_ROLE: &str = "door-instructions-client";
/// Child role: the serving side, run under callgrind by the client.
pub const SERVER_ROLE: &str = "door-instructions-server";

/// Set (to anything) to keep the callgrind outputs, with counts per instruction.
const KEEP: &str = "LINTEL_BENCH_KEEP";

const N_SHORT: u64 = 1_000;
const N_LONG: u64 = 3_000;

/// The case: both sides' instructions per call, in the JSON fields `client` and `server`.
pub fn null_instructions(_cfg: &Config) -> anyhow::Result<CaseResult> {
    let dir = std::env::temp_dir().join(format!("lintel-bench-callgrind-{}", std::process::id()));
    std::fs::create_dir_all(&dir).context("creating the callgrind output directory")?;
    let runs = (|| -> anyhow::Result<[(u64, u64); 4]> {
        Ok([
            run_pair(&dir, N_SHORT, WORKER)?,
            run_pair(&dir, N_LONG, WORKER)?,
            run_pair(&dir, N_SHORT, HANDLER)?,
            run_pair(&dir, N_LONG, HANDLER)?,
        ])
    })();
    if std::env::var_os(KEEP).is_some() {
        eprintln!("callgrind outputs kept in {}", dir.display());
    } else {
        let _ = std::fs::remove_dir_all(&dir);
    }
    let [short, long, h_short, h_long] = runs?;
    let calls = (N_LONG - N_SHORT) as f64;
    let per_call = |a: u64, b: u64| (b.saturating_sub(a)) as f64 / calls;
    let handler = per_call(h_short.1, h_long.1);
    let client = per_call(short.0, long.0);
    let worker = per_call(short.1, long.1);
    // A toggle that names no function collects nothing: refuse a figure made of that.
    ensure!(
        client > 0.0 && handler > 0.0 && worker > handler,
        "callgrind collected too little (client {client}, worker {worker}, handler {handler}): \
         a counted function was renamed or inlined"
    );
    let server = worker - handler;
    let stats = Stats {
        median_ns: 0.0,
        p99_ns: 0.0,
        min_ns: 0.0,
        iters: N_LONG,
        batch: 1,
        samples: Vec::new(),
    };
    Ok(CaseResult::new(SUITE, "null_instructions", &stats)
        .with_field("client", client.round())
        .with_field("server", server.round())
        .with_note(format!(
            "instructions per null call counted by callgrind with spinning off, not time (median_ns \
             is 0): client {client:.0} (Door::call and the calling loop), server {server:.0} (the \
             worker thread less the handler's {handler:.0}); difference of runs of {N_LONG} and \
             {N_SHORT} calls; target ≤ 120 per side"
        )))
}

/// What the server's callgrind collects: its worker threads, or the handler alone.
const WORKER: &str = "*lintel::server::run_worker*";
const HANDLER: &str = "*null_handler*";

/// Runs client and server under callgrind for `n` calls, the server collecting inside
/// `server_toggle`; their collected instruction totals.
fn run_pair(dir: &Path, n: u64, server_toggle: &str) -> anyhow::Result<(u64, u64)> {
    let tag = if server_toggle == WORKER {
        "worker"
    } else {
        "handler"
    };
    let client_out = dir.join(format!("client-{tag}-{n}.out"));
    let server_out = dir.join(format!("server-{tag}-{n}.out"));
    let exe = std::env::current_exe().context("locating the lintel-bench binary")?;
    let mut cmd = callgrind(&client_out, &["*client_calls*"]);
    mark_child(&mut cmd);
    let status = cmd
        .arg(&exe)
        .args([CHILD_ARG, CLIENT_ROLE, &n.to_string()])
        .arg(&server_out)
        .arg(server_toggle)
        .env("LINTEL_SPIN", "off")
        .status()
        .context("running valgrind (install it: apt-get install valgrind)")?;
    ensure!(status.success(), "the callgrind client run failed: {status}");
    Ok((totals(&client_out)?, totals(&server_out)?))
}

/// `valgrind --tool=callgrind` collecting only inside the functions `toggles` name.
fn callgrind(out: &Path, toggles: &[&str]) -> Command {
    let mut cmd = Command::new("valgrind");
    // Counts per instruction (`--dump-instr`), so the outputs kept with
    // `LINTEL_BENCH_KEEP` can be read against the disassembly.
    cmd.args([
        "--tool=callgrind",
        "--collect-atstart=no",
        "--quiet",
        "--dump-instr=yes",
    ]);
    cmd.arg(format!("--callgrind-out-file={}", out.display()));
    // valgrind's own messages (e.g. that it does not know pidfd_open, which
    // lintel then does without) go beside the counts, not to the terminal.
    cmd.arg(format!("--log-file={}.log", out.display()));
    for t in toggles {
        cmd.arg(format!("--toggle-collect={t}"));
    }
    cmd
}

/// The `totals:` (or `summary:`) line of a callgrind output file: instructions collected.
fn totals(path: &Path) -> anyhow::Result<u64> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let line = text
        .lines()
        .rev()
        .find(|l| l.starts_with("totals:") || l.starts_with("summary:"))
        .with_context(|| format!("no totals in {}", path.display()))?;
    let n = line.split_whitespace().nth(1).unwrap_or_default();
    n.parse().with_context(|| format!("bad totals line {line:?}"))
}

/// The client role: `N SERVER_OUT SERVER_TOGGLE`. Starts the server under callgrind, warms
/// up, makes `N` calls in [`client_calls`], then asks the server to exit (so callgrind writes
/// its counts).
pub fn client(args: &[String]) -> anyhow::Result<()> {
    let [n, server_out, toggle] = args else {
        bail!("usage: {CLIENT_ROLE} N SERVER_OUT SERVER_TOGGLE");
    };
    let n: u64 = n.parse().context("N")?;
    let exe = std::env::current_exe().context("locating the lintel-bench binary")?;
    let mut cmd = callgrind(&PathBuf::from(server_out), &[toggle.as_str()]);
    cmd.arg(exe).args([CHILD_ARG, SERVER_ROLE]);
    mark_child(&mut cmd);
    let spawned = lintel::boot::spawn(&mut cmd, &[]).context("starting the callgrind server")?;
    let [null, exit] = &spawned.doors[..] else {
        bail!("the server offered {} doors, expected 2", spawned.doors.len());
    };
    let mut reply = Reply::new();
    for _ in 0..10 {
        null.call(&[], &[], &mut reply).context("warm-up call")?;
    }
    client_calls(null, n, &mut reply)?;
    let _ = exit.call(&[], &[], &mut reply); // the server exits; the call may see it die
    let mut child = spawned.child;
    let status = child.wait().context("waiting for the server")?;
    ensure!(status.success(), "the callgrind server failed: {status}");
    Ok(())
}

/// The measured loop (callgrind collects inside it only).
#[inline(never)]
fn client_calls(door: &Door, n: u64, reply: &mut Reply) -> anyhow::Result<()> {
    for _ in 0..n {
        door.call(&[], &[], reply)
            .map_err(|e| anyhow::anyhow!("null call failed: {e}"))?;
    }
    Ok(())
}

/// The server role: offers the null door and a door that ends the process.
pub fn server(args: &[String]) -> anyhow::Result<()> {
    ensure!(args.is_empty(), "{SERVER_ROLE} takes no arguments");
    let null = Door::create(0, null_handler);
    let exit = Door::create(1, |_: Request<'_>, _: &mut Reply| -> Result<(), Fault> {
        // Exit from another thread, outside the worker whose instructions are counted.
        std::thread::spawn(|| std::process::exit(0));
        Ok(())
    });
    lintel::boot::join(&[null, exit]).context("joining the client")?;
    loop {
        std::thread::park();
    }
}

/// The null handler, out of line so callgrind can leave it out of the server's count.
#[inline(never)]
fn null_handler(req: Request<'_>, _: &mut Reply) -> Result<(), Fault> {
    if req.data.is_empty() {
        Ok(())
    } else {
        Err(Fault(1))
    }
}
