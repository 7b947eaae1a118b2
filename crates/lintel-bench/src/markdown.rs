//! `docs/measurements.md` from a run's JSON lines (`lintel-bench --markdown PATH`).
//!
//! The document is generated, never edited by hand, so what it says is what one run measured:
//! a header stamped with the commit (and whether the tree differed from it), the date, the
//! machine and the command line; a table of headline cases; then one section per suite, its
//! fixed text saying how the suite measures ([`suite_text`]), a table of every case with its
//! median, p99, iterations, the case it is compared to and the ratio, any numbers the line
//! carries, and the lines' notes (where the suites state their targets).
//!
//! The input is the JSON contract itself ([`parse_lines`]: `suite`, `case`, `median_ns`,
//! `p99_ns`, `iters`, and the optional `batch`, `ref`, `ratio`, `note` and numeric extras), so
//! the same code renders any run's file. [`replace_headline`] writes the headline table into the
//! README between two marker lines, so the README's numbers are generated too.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Component, Path, PathBuf};
use std::process::Command;

use anyhow::{Context as _, bail};
use serde_json::Value;

use crate::harness::{P99_DEFINITION, fmt_ns};

/// One JSON line of a run, as read back.
#[derive(Clone, Debug, PartialEq)]
pub struct Line {
    pub suite: String,
    pub case: String,
    pub median_ns: f64,
    pub p99_ns: f64,
    pub iters: u64,
    /// Operations per sample (absent in lines written before it existed).
    pub batch: Option<u64>,
    /// The case this one is compared to, `suite/case`.
    pub reference: Option<String>,
    /// Median over the reference's median, as the run computed it.
    pub ratio: Option<f64>,
    pub note: Option<String>,
    /// Every other numeric field, by name.
    pub fields: BTreeMap<String, f64>,
}

impl Line {
    /// `suite/case`.
    pub fn name(&self) -> String {
        format!("{}/{}", self.suite, self.case)
    }
}

/// Reads JSON lines (blank lines skipped); an error names the line that breaks the contract.
pub fn parse_lines(text: &str) -> anyhow::Result<Vec<Line>> {
    let mut lines = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        if raw.trim().is_empty() {
            continue;
        }
        let line = parse_line(raw).with_context(|| format!("JSON line {}", i + 1))?;
        lines.push(line);
    }
    Ok(lines)
}

fn parse_line(raw: &str) -> anyhow::Result<Line> {
    let value: Value = serde_json::from_str(raw)?;
    let Some(obj) = value.as_object() else {
        bail!("not a JSON object");
    };
    let text = |k: &str| obj.get(k).and_then(Value::as_str).map(str::to_string);
    let number = |k: &str| obj.get(k).and_then(Value::as_f64);
    let (Some(suite), Some(case)) = (text("suite"), text("case")) else {
        bail!("no suite or case");
    };
    let (Some(median_ns), Some(p99_ns), Some(iters)) = (
        number("median_ns"),
        number("p99_ns"),
        obj.get("iters").and_then(Value::as_u64),
    ) else {
        bail!("{suite}/{case}: no median_ns, p99_ns or iters");
    };
    const KNOWN: [&str; 9] = [
        "suite",
        "case",
        "median_ns",
        "p99_ns",
        "iters",
        "batch",
        "ref",
        "ratio",
        "note",
    ];
    let fields = obj
        .iter()
        .filter(|(k, _)| !KNOWN.contains(&k.as_str()))
        .filter_map(|(k, v)| Some((k.clone(), v.as_f64()?)))
        .collect();
    Ok(Line {
        suite,
        case,
        median_ns,
        p99_ns,
        iters,
        batch: obj.get("batch").and_then(Value::as_u64),
        reference: text("ref"),
        ratio: number("ratio"),
        note: text("note"),
        fields,
    })
}

/// What the document's header says about the run.
#[derive(Clone, Debug, PartialEq)]
pub struct Stamp {
    /// `git rev-parse --short HEAD`, or "unknown" outside a repository.
    pub commit: String,
    /// The tracked files differed from the commit (the generated outputs aside).
    pub dirty: bool,
    /// `YYYY-MM-DD HH:MM UTC`.
    pub date: String,
    /// The CPU's model name, from `/proc/cpuinfo`.
    pub cpu: String,
    pub cores: usize,
    /// The kernel's release, from `/proc/sys/kernel/osrelease`.
    pub kernel: String,
    /// Quick or full mode, pinned or not.
    pub mode: String,
    /// The command line that ran the benchmark.
    pub command: String,
}

impl Stamp {
    /// The stamp of this run on this machine. `outputs` are the files the run will write (the
    /// document, the README, the plots): changes to them do not make the tree dirty.
    pub fn here(mode: &str, command: &str, outputs: &[&Path]) -> Stamp {
        let git = |args: &[&str]| {
            Command::new("git")
                .args(args)
                .output()
                .ok()
                .filter(|o| o.status.success())
                .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        };
        let commit = git(&["rev-parse", "--short", "HEAD"]).unwrap_or_else(|| "unknown".into());
        let excludes: Vec<String> = outputs
            .iter()
            .map(|p| format!(":(exclude){}", p.display()))
            .collect();
        let mut status = vec!["status", "--porcelain", "--untracked-files=no", "--", "."];
        status.extend(excludes.iter().map(String::as_str));
        let dirty = git(&status).is_some_and(|s| !s.is_empty());
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu = cpuinfo
            .lines()
            .find_map(|l| {
                l.strip_prefix("model name")?
                    .split_once(':')
                    .map(|(_, v)| v.trim().to_string())
            })
            .unwrap_or_else(|| "unknown CPU".into());
        let cores = cpuinfo.lines().filter(|l| l.starts_with("processor")).count();
        let cores = if cores > 0 {
            cores
        } else {
            std::thread::available_parallelism().map_or(0, usize::from)
        };
        let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .map(|s| s.trim().to_string())
            .unwrap_or_else(|_| "unknown".into());
        let secs = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        Stamp {
            commit,
            dirty,
            date: utc_date(secs),
            cpu,
            cores,
            kernel,
            mode: mode.to_string(),
            command: command.to_string(),
        }
    }

    /// "commit abc1234 (with uncommitted changes)", as the header says it.
    fn commit_text(&self) -> String {
        if self.dirty {
            format!("`{}` (with uncommitted changes)", self.commit)
        } else {
            format!("`{}`", self.commit)
        }
    }
}

/// `secs` since the Unix epoch as `YYYY-MM-DD HH:MM UTC` (the civil calendar, proleptic).
pub fn utc_date(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let (hour, minute) = ((secs % 86_400) / 3600, (secs % 3600) / 60);
    // Days to civil date (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02} {hour:02}:{minute:02} UTC")
}

/// How a headline row compares its case.
#[derive(Clone, Copy)]
enum Versus {
    /// Nothing: the median alone.
    Alone,
    /// This median over the other's: "1.10× other".
    Times(&'static str),
    /// The other's median over this one: "4.0× faster than other".
    Faster(&'static str),
}

/// The headline cases: (what it measures, case, comparison, target, shown in the README).
const HEADLINE: [(&str, &str, Versus, &str, bool); 23] = [
    (
        "null call, co-located",
        "door/null_colocated",
        Versus::Alone,
        "≤ 20 ns",
        true,
    ),
    (
        "null call across processes",
        "door/null_cross_fast",
        Versus::Times("baseline/spin_pingpong_paired"),
        "≤ 1.25×",
        true,
    ),
    (
        "null call across processes",
        "door/null_cross_fast",
        Versus::Faster("baseline/uds_pingpong"),
        "≥ 30× faster",
        false,
    ),
    (
        "null call, both sides sleeping",
        "door/null_cross_blocking",
        Versus::Times("baseline/futex_pingpong"),
        "≤ 1.5×",
        true,
    ),
    (
        "1 MiB echo, copied",
        "bulk/echo_1m",
        Versus::Faster("baseline/uds_echo_1m"),
        "≥ 20× faster",
        false,
    ),
    (
        "1 MiB echo, copied, against iceoryx2",
        "echo/copy_1m",
        Versus::Times("baseline/iceoryx2_echo_1m"),
        "≤ 1.5×",
        true,
    ),
    (
        "1 MiB echo in loans, against iceoryx2",
        "echo/loan_1m",
        Versus::Times("baseline/iceoryx2_echo_1m"),
        "≤ 1×",
        true,
    ),
    (
        "1 MiB echo, trusted placement, against iceoryx2",
        "echo/trusted_1m",
        Versus::Times("baseline/iceoryx2_echo_1m"),
        "≤ 1×",
        true,
    ),
    (
        "1 MiB loan, passed",
        "bulk/handoff_1m",
        Versus::Times("door/null_cross_fast"),
        "≤ 30×",
        false,
    ),
    (
        "file read, 4 KiB, copy path",
        "fs/seq_read_4k_copy",
        Versus::Times("fs/seq_read_4k_native"),
        "≤ 2×",
        true,
    ),
    (
        "file read, 4 KiB, mapped window",
        "fs/seq_read_4k_mapped",
        Versus::Times("fs/seq_read_4k_native"),
        "≤ 1×",
        true,
    ),
    (
        "`cat` of 256 MiB under `lintel-run`",
        "unix/cat_256m_lintel",
        Versus::Times("unix/cat_256m_native"),
        "≤ 1.2×",
        false,
    ),
    (
        "`sqlite3` workload under `lintel-run`",
        "unix/sqlite3_lintel",
        Versus::Times("unix/sqlite3_native"),
        "≤ 1.2×",
        true,
    ),
    (
        "a killed domain serving again",
        "recovery/death_to_first_call",
        Versus::Times("recovery/fork_exec"),
        "p99 ≤ 50 ms",
        true,
    ),
    (
        "null call awaited by a task, answered while spinning",
        "async/null_cross_spin",
        Versus::Times("async/thread_null_paired"),
        "≤ 1.3×",
        true,
    ),
    (
        "null call awaited by a task, against a thread's",
        "async/null_cross_spin",
        Versus::Times("door/null_cross_fast"),
        "≤ 1.3×",
        false,
    ),
    (
        "null call awaited by a task, parked",
        "async/null_cross_parked",
        Versus::Times("baseline/tokio_eventfd_pingpong"),
        "≤ 1.2×",
        false,
    ),
    (
        "8-byte echo awaited by a task",
        "async/echo8_cross",
        Versus::Faster("baseline/tarpc_uds"),
        "≥ 30× faster",
        false,
    ),
    (
        "1,000 awaited calls in flight from one thread",
        "async/throughput_1000",
        Versus::Faster("async/blocking_1ms"),
        "≥ 5× faster",
        true,
    ),
    (
        "null call through two proxies (loopback TCP)",
        "net/null",
        Versus::Times("baseline/capnp_rpc_null"),
        "≤ 1.2×",
        true,
    ),
    (
        "64 KiB echo through two proxies",
        "net/echo_64k",
        Versus::Times("baseline/capnp_rpc_echo_64k"),
        "≤ 1.2×",
        false,
    ),
    (
        "1 MiB echo through two proxies",
        "net/echo_1m",
        Versus::Times("baseline/capnp_rpc_echo_1m"),
        "≤ 1.2×",
        false,
    ),
    (
        "1 KiB echo through two proxies",
        "net/echo_1k",
        Versus::Faster("baseline/tonic_grpc_echo_1k"),
        "≥ 1× faster",
        false,
    ),
];

fn find<'a>(lines: &'a [Line], name: &str) -> Option<&'a Line> {
    lines.iter().find(|l| l.name() == name)
}

/// Which headline rows a table shows.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Rows {
    /// Every one (the measurements document).
    All,
    /// The README's short selection.
    Readme,
}

/// The headline table: one row per headline case the run measured.
pub fn headline_table(lines: &[Line], rows: Rows) -> String {
    let mut out = String::from("| measures | case | median | against | target |\n|---|---|---|---|---|\n");
    for (what, name, versus, target, in_readme) in HEADLINE {
        if rows == Rows::Readme && !in_readme {
            continue;
        }
        let Some(line) = find(lines, name) else { continue };
        let against = match versus {
            Versus::Alone => String::new(),
            Versus::Times(other) => match find(lines, other) {
                Some(o) if o.median_ns > 0.0 => {
                    format!("{:.2}× `{other}`", line.median_ns / o.median_ns)
                }
                _ => format!("`{other}` not measured"),
            },
            Versus::Faster(other) => match find(lines, other) {
                Some(o) if line.median_ns > 0.0 && o.median_ns >= line.median_ns => {
                    format!("{:.1}× faster than `{other}`", o.median_ns / line.median_ns)
                }
                Some(o) if o.median_ns > 0.0 => {
                    format!("{:.1}× slower than `{other}`", line.median_ns / o.median_ns)
                }
                _ => format!("`{other}` not measured"),
            },
        };
        writeln!(
            out,
            "| {what} | `{name}` | {} | {against} | {target} |",
            fmt_ns(line.median_ns)
        )
        .expect("String write");
    }
    out
}

/// The line under a headline table saying where its numbers come from.
pub fn headline_source(stamp: &Stamp) -> String {
    format!(
        "Medians of one run ({}) at commit {} on {} ({} cores, Linux {}), {}.",
        stamp.mode,
        stamp.commit_text(),
        stamp.cpu,
        stamp.cores,
        stamp.kernel,
        stamp.date
    )
}

/// The line that opens the headline block in a README.
pub const HEADLINE_BEGIN: &str = "<!-- measurements: generated by lintel-bench --readme; do not edit -->";
/// The line that closes it.
pub const HEADLINE_END: &str = "<!-- measurements: end -->";

/// `readme` with the text between [`HEADLINE_BEGIN`] and [`HEADLINE_END`] replaced by the
/// headline table and its source line; an error if the markers are missing or out of order.
pub fn replace_headline(readme: &str, lines: &[Line], stamp: &Stamp) -> anyhow::Result<String> {
    let (Some(begin), Some(end)) = (readme.find(HEADLINE_BEGIN), readme.find(HEADLINE_END)) else {
        bail!("the README has no headline markers ({HEADLINE_BEGIN} … {HEADLINE_END})");
    };
    if end < begin {
        bail!("the README's headline end marker comes before its begin marker");
    }
    let body_start = begin + HEADLINE_BEGIN.len();
    Ok(format!(
        "{}\n{}\n{}\n{}",
        &readme[..body_start],
        headline_table(lines, Rows::Readme),
        headline_source(stamp),
        &readme[end..]
    ))
}

/// What each suite measures and how, in the order the document takes the suites.
pub fn suite_text(suite: &str) -> &'static str {
    match suite {
        "baseline" => {
            "Two processes each, an 8-byte message echoed, written in the harness itself: \
             `spin_pingpong` (both sides spin on a shared word, no system call at all: the \
             hardware's round trip between two CPUs), `futex_pingpong` (each side sleeps in \
             `FUTEX_WAIT` on every exchange: the cost of a real wake-up), `pipe_pingpong` and \
             `uds_pingpong` (a socketpair). `spin_pingpong_paired` is the spin baseline measured \
             in rounds alternating with `door/null_cross_fast` (see `door`). The bulk suite adds \
             `memcpy_<size>` (one copy in one process) and `uds_echo_<size>` (the same echo as \
             `bulk/echo_<size>` over a stream socketpair)."
        }
        "door" => {
            "Raw door calls, served in this process (`_colocated`) or by a child domain \
             (`_cross`); every call checks its result inside the timed loop. \
             `null_cross_fast` is measured in ten rounds alternating with rounds of the spin \
             baseline, each round with a child of its own, and compared to that paired baseline: \
             a ratio of two cases measured seconds apart on a shared machine says as much about \
             the machine's phase as about lintel; its note gives every round's ratio. \
             `null_cross_blocking` runs with spinning off in both domains, so each call sleeps \
             on both sides. `callee_death_ms` kills the callee while the caller waits and times \
             the caller's `PeerDied` (values in ns). `null_instructions` is not a time: \
             instructions per null call on each side, counted by callgrind with spinning off \
             (its note), the figure that does not move with the machine."
        }
        "placement" => {
            "INKS Table 3 through the generated stubs: the shapes null, 64 bytes in, 1 KiB in, \
             1 KiB out and 128 bytes each way, co-located (a procedure call through the stub), \
             isolated (another process, the fast or vanilla path by size) and `message` (the \
             vanilla path forced). Ratios are to the co-located call, the paper's \"trap\"; the \
             paper's own ratios are in the notes."
        }
        "lrpc" => {
            "LRPC Figures 7 and 8 through the stubs, the server in another process: latency \
             against the number of `u32` arguments (by value and by reference), and against the \
             size of one referent passed in, out and both ways; the notes fit nanoseconds per \
             byte beside the paper's."
        }
        "bulk" => {
            "Data of every size through a door call: `echo` (a raw call whose handler returns \
             its argument: above 5 KiB the bytes go through the slot's bulk segments, copied in \
             and out on each side), `handoff` (a shared loan passed one way; the server reads \
             its first and last byte), `sealed` (a sealed snapshot made, sealed and passed one \
             way), each also co-located, against one `memcpy` and the same echo over a Unix \
             socket. `copy_limit_ratio` is the echo over two `memcpy`s plus a null call."
        }
        "echo" => {
            "One payload echoed between two processes at 8 B, 1 KiB, 64 KiB and 1 MiB, each \
             system with its fastest request/response, in ten interleaved rounds pooled: \
             `copy` (a raw door call returning its argument, copied into the reply's room with `Reply::copy_in_place`: the default, hostile-safe path), \
             `loan` (the caller fills a loan with `Loan::from_slice`, the server copies it into a loan of its own and \
             answers with that: one copy each way), `trusted` (the trusted placement: a door made \
             with `Door::create_trusting` copies its arguments, read in place, straight into its \
             reply's room, and the caller reads the result in place with `Door::call_in_place`: \
             one copy each way), against iceoryx2 0.10's request/response \
             over byte slices (both sides busy-polling; one copy each way, read in place) and \
             one `memcpy`. `floor_ns` is the copy path's floor: the four copies an echo needs \
             when neither side trusts the other (the caller's in, the server's snapshot, the \
             handler's reply, the caller's snapshot of it) plus a null call, the copies timed \
             where the path makes them, between two CPUs (`raw_copies`: two threads sharing \
             memory, signalled by spun-on words, less the words' own round trip; the copies into \
             shared memory made with plain stores and around the caches, the cheaper kept); \
             `floor_hot_ns` counts them as one process's `memcpy` of cached bytes instead, \
             which no echo between two CPUs can reach."
        }
        "fs" => {
            "The file service in a child domain on a file in the host's page cache, through its \
             three paths (`copy`: a call per operation; `mapped`: the window and token; the \
             pager for `fault_64k`), each beside `native`, the same operation through Linux's \
             own system calls on the same file in the same run. Cases follow Dean and Armand's \
             Tables 5-4, 5-5 and 5-9: sequential 4 KiB reads and writes, `lseek` plus one-byte \
             reads and writes, `lseek` alone, moving the window, and the first touch of a \
             64 KiB range of a view."
        }
        "unix" => {
            "Unmodified programs, each run whole natively and under `lintel-run` on an identical \
             served tree with the files in the host's page cache, outputs compared: a trapped \
             system call against a native one, start-up (`true`, a small `cat`), `cat`, \
             `sha256sum` and `wc -l` of large files, an `sqlite3` workload, one-byte `pread`s at \
             scattered offsets (per call), and busybox `cat` in static mode (every call \
             trapped). `meta_*` are metadata calls on small files, per call: create (as \
             Python's `open` and as C stdio's `fopen` write a file), `stat`, `open` and \
             `close`, and `unlink`, in directories of 1,000 to 100,000 files in `/dev/shm`."
        }
        "recovery" => {
            "A domain killed and restarted by its supervisor (policy: no backoff): \
             `death_to_first_call` is from `kill(SIGKILL)` to the first call its new instance \
             served, through `lintel_system::Named`, with the client's stages as fields (`dead`: \
             its runtime saw the death; `found`: the lookup returned the new instance; `served`: \
             the first call returned, each after the one before). `fork_exec` is the same binary \
             started and waited for, doing nothing: the floor of any restart."
        }
        "async" => {
            "Door calls awaited by tasks on a single-threaded tokio runtime, served by a child \
             domain: `null_cross_spin` (spinning on: answered within the spin window) against \
             `thread_null_paired`, a thread's null calls to the same door in rounds alternating \
             with it; `null_cross_parked` (spinning off in both \
             domains: every call parks its task and is woken through the reactor) against \
             `baseline/tokio_eventfd_pingpong`, two tokio runtimes in two processes echoing an \
             eventfd count; `throughput_1000`, 1,000 tasks each calling in a loop a handler that \
             waits 1 ms, in ns per call over all of them, against `blocking_1ms`, one thread \
             making the same calls one at a time."
        }
        "net" => {
            "Doors of a far host called through two lintel proxies over loopback TCP (plain), \
             against the same echo with capnp-rpc alone (same schema, no lintel) and with tonic's \
             gRPC, all measured in the same rounds, interleaved: `null` to `echo_1m` through a \
             door served in the far proxy's own domain by an async handler (the two ends differ \
             from capnp-rpc's by the proxies alone); `null_domain` and `echo_64k_domain` through \
             a door served in a domain of the far host apart from its proxy; `throughput_64`, 64 \
             threads calling at once; `doors_100k`, 100,000 doors of the far host held here, with \
             each side's memory per door."
        }
        "phase" => {
            "The phase of the two CPUs as each suite began (`at_<suite>`): the time of a plain \
             4 KiB fill of memory the other CPU just read, two threads pinned to two CPUs taking \
             turns. The host moves these virtual CPUs between places where such lines pass \
             cheaply (near: about 3 ticks a line) and places where they do not (far: 18 and \
             more) every few seconds, and every case between two processes moves with it (a \
             4 KiB copy-path read of the `fs` suite took 1.2 µs near and 2.2–3.4 µs far within \
             one hour). lintel's copies pick their stores by the same measure \
             (`lintel_sys::distance`); compare a case with its baseline from the same suite, \
             which ran in the same phase or beside it."
        }
        "scale" => {
            "How cost grows. `callers_<n>`: n caller processes, each handed the server's door (so \
             each connects to the server directly), call it with no data all at once; the median \
             is over every caller's batch means, with the calls per second of all of them and \
             the memory (PSS) of the server and of a caller. `doors_<n>`: this process holds n \
             doors served by a child and calls the newest; each side's memory growth per door. \
             `loan_arena`: what a domain's first loan maps. With more callers than cores the \
             curve is the scheduler's too: a caller spins only as long as its recent calls took, \
             then sleeps."
        }
        _ => "",
    }
}

/// A number as the tables show it: integers whole, others to three significant places.
fn fmt_field(v: f64) -> String {
    if v.fract() == 0.0 || v.abs() >= 100.0 {
        format!("{v:.0}")
    } else if v.abs() >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

/// `reference` as a table shows it: without its suite when it is `suite`.
fn short_ref<'a>(reference: &'a str, suite: &str) -> &'a str {
    reference
        .strip_prefix(suite)
        .and_then(|r| r.strip_prefix('/'))
        .unwrap_or(reference)
}

/// A median or p99 cell: a dash for the cases that carry no time (both zero).
fn time_cell(line: &Line, ns: f64) -> String {
    if line.median_ns == 0.0 && line.p99_ns == 0.0 {
        "–".to_string()
    } else {
        fmt_ns(ns)
    }
}

/// The table of one suite's lines, then their notes.
pub fn suite_table(suite: &str, lines: &[&Line]) -> String {
    let mut out = String::from(
        "| case | median | p99 | iters × batch | against | ratio | also |\n|---|---|---|---|---|---|---|\n",
    );
    for l in lines {
        let batch = l.batch.map_or(String::new(), |b| format!(" × {b}"));
        let against = l
            .reference
            .as_deref()
            .map_or(String::new(), |r| format!("`{}`", short_ref(r, suite)));
        // A ratio far below one reads better turned over.
        let ratio = l.ratio.map_or(String::new(), |r| match r {
            r if r > 0.0 && r < 0.1 => format!("{:.1}× faster", 1.0 / r),
            r => format!("{r:.2}×"),
        });
        let also: Vec<String> = l
            .fields
            .iter()
            .map(|(k, v)| format!("{k} {}", fmt_field(*v)))
            .collect();
        writeln!(
            out,
            "| `{}` | {} | {} | {}{batch} | {against} | {ratio} | {} |",
            l.case,
            time_cell(l, l.median_ns),
            time_cell(l, l.p99_ns),
            l.iters,
            also.join(", ")
        )
        .expect("String write");
    }
    let notes: Vec<&&Line> = lines.iter().filter(|l| l.note.is_some()).collect();
    if !notes.is_empty() {
        out.push_str("\nNotes:\n\n");
        for l in notes {
            let note = l.note.as_deref().unwrap_or_default().replace('\n', " ");
            writeln!(out, "- `{}`: {note}", l.case).expect("String write");
        }
    }
    out
}

/// The whole document. `plots` are links to the charts, relative to the document.
pub fn render(lines: &[Line], stamp: &Stamp, plots: &[String]) -> String {
    let mut out = String::new();
    out.push_str("# Measurements\n\n");
    out.push_str(
        "<!-- Generated by `lintel-bench --markdown`: do not edit; run the command below again. -->\n\n",
    );
    writeln!(
        out,
        "Generated by `lintel-bench` from one run's JSON lines; regenerate it rather than edit it.\n\n\
         - commit: {}\n- date: {}\n- machine: {}, {} cores, Linux {}\n- mode: {}\n- command: `{}`\n",
        stamp.commit_text(),
        stamp.date,
        stamp.cpu,
        stamp.cores,
        stamp.kernel,
        stamp.mode,
        stamp.command
    )
    .expect("String write");
    out.push_str(
        "Times are medians and 99th percentiles of samples; ratios are between cases of this \
         same run, never across runs, since these machines are shared and noisy: compare \
         binaries in alternating runs, not runs apart. ",
    );
    writeln!(out, "{P99_DEFINITION}. Targets are stated in the notes.\n").expect("String write");
    out.push_str("## Headline\n\n");
    out.push_str(&headline_table(lines, Rows::All));
    out.push('\n');
    let mut suites: Vec<&str> = Vec::new();
    for l in lines {
        if !suites.contains(&l.suite.as_str()) {
            suites.push(&l.suite);
        }
    }
    for suite in suites {
        writeln!(out, "## `{suite}`\n").expect("String write");
        let text = suite_text(suite);
        if !text.is_empty() {
            writeln!(out, "{text}\n").expect("String write");
        }
        let of_suite: Vec<&Line> = lines.iter().filter(|l| l.suite == suite).collect();
        out.push_str(&suite_table(suite, &of_suite));
        // A suite's charts are the plots named after it (`bulk-latency.svg`).
        let stem = |p: &String| Path::new(p).file_stem().map(|s| s.to_string_lossy().into_owned());
        let charts: Vec<(&String, String)> = plots
            .iter()
            .filter_map(|p| Some((p, stem(p)?)))
            .filter(|(_, s)| s.starts_with(&format!("{suite}-")))
            .collect();
        if !charts.is_empty() {
            out.push('\n');
            for (p, s) in charts {
                writeln!(out, "![{}]({p})", s.replace('-', " ")).expect("String write");
            }
        }
        out.push('\n');
    }
    out
}

/// `p`'s components without `.`.
fn components(p: &Path) -> Vec<Component<'_>> {
    p.components()
        .filter(|c| !matches!(c, Component::CurDir))
        .collect()
}

/// `target` as a link relative to `from_dir`, both taken as they are (relative to the current
/// directory, or absolute); `target` unchanged if one is absolute and the other not.
pub fn relative_link(from_dir: &Path, target: &Path) -> String {
    if from_dir.is_absolute() != target.is_absolute() {
        return target.display().to_string();
    }
    let (from, to) = (components(from_dir), components(target));
    let common = from.iter().zip(&to).take_while(|(a, b)| a == b).count();
    let mut link = PathBuf::new();
    for _ in common..from.len() {
        link.push("..");
    }
    for c in &to[common..] {
        link.push(c);
    }
    link.display().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    const LINES: &str = r#"{"suite":"baseline","case":"spin_pingpong","median_ns":353.9,"p99_ns":1350.2,"iters":20000,"batch":100,"note":"same cpu in 0/85 samples"}
{"suite":"door","case":"null_colocated","median_ns":18.8,"p99_ns":30.2,"iters":200000,"batch":1000,"note":"target ≤ 20 ns"}
{"suite":"baseline","case":"spin_pingpong_paired","median_ns":400.0,"p99_ns":1127.8,"iters":20000,"batch":100}
{"suite":"door","case":"null_cross_fast","median_ns":500.0,"p99_ns":704.1,"iters":20000,"batch":100,"ref":"baseline/spin_pingpong_paired","ratio":1.25,"note":"target ≤ 1.25×"}
{"suite":"baseline","case":"uds_pingpong","median_ns":12500.0,"p99_ns":17124.2,"iters":5000,"batch":10,"ref":"baseline/spin_pingpong","ratio":35.218}
{"suite":"door","case":"null_instructions","median_ns":0.0,"p99_ns":0.0,"iters":3000,"batch":1,"note":"client 263, server 184"}

{"suite":"bulk","case":"echo_4k_colocated","median_ns":123.8,"p99_ns":320.0,"iters":2000,"batch":1,"ref":"bulk/echo_4k","ratio":0.031,"bytes":4096.0,"gb_per_s":33.083078021158116}
{"suite":"fs","case":"seq_read_4k_native","median_ns":800.0,"p99_ns":980.4,"iters":832}
"#;

    fn stamp() -> Stamp {
        Stamp {
            commit: "abc1234".into(),
            dirty: true,
            date: "2026-11-26 20:30 UTC".into(),
            cpu: "Some CPU".into(),
            cores: 2,
            kernel: "6.18.0".into(),
            mode: "quick mode, unpinned".into(),
            command: "lintel-bench --quick --markdown docs/measurements.md".into(),
        }
    }

    #[test]
    fn parses_the_contract_and_the_extras() {
        let lines = parse_lines(LINES).unwrap();
        assert_eq!(lines.len(), 8, "the blank line is skipped");
        let echo = &lines[6];
        assert_eq!(echo.name(), "bulk/echo_4k_colocated");
        assert_eq!(echo.median_ns, 123.8);
        assert_eq!(echo.iters, 2000);
        assert_eq!(echo.batch, Some(1));
        assert_eq!(echo.reference.as_deref(), Some("bulk/echo_4k"));
        assert_eq!(echo.ratio, Some(0.031));
        assert_eq!(echo.note, None);
        assert_eq!(echo.fields.len(), 2);
        assert_eq!(echo.fields["bytes"], 4096.0);
        assert_eq!(lines[7].batch, None);
        assert_eq!(lines[1].note.as_deref(), Some("target ≤ 20 ns"));
    }

    #[test]
    fn refuses_lines_without_the_contract() {
        let err = parse_lines("{\"suite\":\"a\",\"case\":\"b\",\"median_ns\":1}\n").unwrap_err();
        assert!(format!("{err:#}").contains("line 1"), "{err:#}");
        assert!(format!("{err:#}").contains("a/b"), "{err:#}");
        assert!(parse_lines("[1, 2]").is_err());
        assert!(parse_lines("not json").is_err());
    }

    #[test]
    fn suite_table_has_a_row_per_case_and_the_notes() {
        let lines = parse_lines(LINES).unwrap();
        let door: Vec<&Line> = lines.iter().filter(|l| l.suite == "door").collect();
        let table = suite_table("door", &door);
        let rows: Vec<&str> = table.lines().filter(|l| l.starts_with("| `")).collect();
        assert_eq!(rows.len(), 3, "{table}");
        assert_eq!(
            rows[0],
            "| `null_colocated` | 18.8 ns | 30.2 ns | 200000 × 1000 |  |  |  |"
        );
        assert_eq!(
            rows[1],
            "| `null_cross_fast` | 500.0 ns | 704.1 ns | 20000 × 100 | `baseline/spin_pingpong_paired` | 1.25× |  |"
        );
        assert_eq!(rows[2], "| `null_instructions` | – | – | 3000 × 1 |  |  |  |");
        assert!(table.contains("- `null_colocated`: target ≤ 20 ns\n"), "{table}");
        assert!(
            table.contains("- `null_instructions`: client 263, server 184\n"),
            "{table}"
        );

        let bulk: Vec<&Line> = lines.iter().filter(|l| l.suite == "bulk").collect();
        let table = suite_table("bulk", &bulk);
        assert!(
            table.contains("| `echo_4k_colocated` | 123.8 ns | 320.0 ns | 2000 × 1 | `echo_4k` | 32.3× faster | bytes 4096, gb_per_s 33.1 |"),
            "{table}"
        );
        assert!(!table.contains("Notes:"), "{table}");
    }

    #[test]
    fn headline_compares_within_the_run_and_skips_what_is_missing() {
        let more = r#"{"suite":"door","case":"null_cross_blocking","median_ns":7000.0,"p99_ns":9000.0,"iters":5000}
{"suite":"bulk","case":"echo_1m","median_ns":200000.0,"p99_ns":300000.0,"iters":200}
{"suite":"baseline","case":"uds_echo_1m","median_ns":100000.0,"p99_ns":300000.0,"iters":200}"#;
        let lines = parse_lines(&format!("{LINES}{more}\n")).unwrap();
        let table = headline_table(&lines, Rows::All);
        let short = headline_table(&lines, Rows::Readme);
        assert!(
            short.contains("`door/null_colocated`") && !short.contains("uds_pingpong"),
            "{short}"
        );
        assert!(
            table.contains("| null call, co-located | `door/null_colocated` | 18.8 ns |  | ≤ 20 ns |"),
            "{table}"
        );
        assert!(
            table.contains("| 1.25× `baseline/spin_pingpong_paired` | ≤ 1.25× |"),
            "{table}"
        );
        assert!(
            table.contains("| 25.0× faster than `baseline/uds_pingpong` |"),
            "{table}"
        );
        assert!(
            table.contains("`baseline/futex_pingpong` not measured"),
            "{table}"
        );
        assert!(
            table.contains("| 2.0× slower than `baseline/uds_echo_1m` |"),
            "{table}"
        );
        assert!(
            !table.contains("handoff_1m"),
            "an unmeasured headline case has no row: {table}"
        );
        assert_eq!(table.lines().count(), 2 + 5, "{table}");
        assert!(table.contains("| null call, both sides sleeping | `door/null_cross_blocking` | 7.00 µs |"));
    }

    #[test]
    fn document_is_stamped_and_has_a_section_per_suite() {
        let lines = parse_lines(LINES).unwrap();
        let plots = ["plots/bulk-latency.svg", "plots/scale-doors-memory.svg"].map(String::from);
        let doc = render(&lines, &stamp(), &plots);
        assert!(doc.starts_with("# Measurements\n"));
        assert!(
            doc.contains("- commit: `abc1234` (with uncommitted changes)\n"),
            "{doc}"
        );
        assert!(doc.contains("- date: 2026-11-26 20:30 UTC\n"));
        assert!(doc.contains("- machine: Some CPU, 2 cores, Linux 6.18.0\n"));
        assert!(doc.contains("- command: `lintel-bench --quick --markdown docs/measurements.md`\n"));
        let sections: Vec<&str> = doc.lines().filter(|l| l.starts_with("## ")).collect();
        assert_eq!(
            sections,
            [
                "## Headline",
                "## `baseline`",
                "## `door`",
                "## `bulk`",
                "## `fs`"
            ]
        );
        assert!(doc.contains(suite_text("door")));
        // A chart is shown under the suite it is named after; no scale lines, no scale chart.
        let bulk = &doc[doc.find("## `bulk`").unwrap()..doc.find("## `fs`").unwrap()];
        assert!(bulk.contains("![bulk latency](plots/bulk-latency.svg)"));
        assert!(!doc.contains("scale-doors-memory"), "{doc}");
        // The baseline lines pushed by other suites are in the baseline table.
        let baseline = &doc[doc.find("## `baseline`").unwrap()..doc.find("## `door`").unwrap()];
        assert!(baseline.contains("| `spin_pingpong_paired` |"));
        assert!(baseline.contains("| `uds_pingpong` | 12.50 µs |"));
    }

    #[test]
    fn readme_block_is_replaced_between_the_markers() {
        let lines = parse_lines(LINES).unwrap();
        let readme = format!("# x\n\nbefore\n{HEADLINE_BEGIN}\nold table\n{HEADLINE_END}\nafter\n");
        let new = replace_headline(&readme, &lines, &stamp()).unwrap();
        assert!(!new.contains("old table"));
        assert!(new.starts_with("# x\n\nbefore\n"));
        assert!(new.ends_with(&format!("{HEADLINE_END}\nafter\n")));
        assert!(new.contains("| null call, co-located | `door/null_colocated` | 18.8 ns |"));
        assert!(new.contains("at commit `abc1234` (with uncommitted changes) on Some CPU (2 cores"));
        // Idempotent: a second run replaces its own output.
        assert_eq!(replace_headline(&new, &lines, &stamp()).unwrap(), new);
        assert!(replace_headline("no markers", &lines, &stamp()).is_err());
    }

    #[test]
    fn dates_and_links() {
        assert_eq!(utc_date(0), "1970-01-01 00:00 UTC");
        assert_eq!(utc_date(951_782_400 + 3600 + 120), "2000-02-29 01:02 UTC");
        assert_eq!(utc_date(1_796_300_000), "2026-12-03 12:13 UTC");
        assert_eq!(
            relative_link(Path::new("docs"), Path::new("docs/plots/bulk-latency.svg")),
            "plots/bulk-latency.svg"
        );
        assert_eq!(
            relative_link(Path::new("./docs"), Path::new("target/plots/a.svg")),
            "../target/plots/a.svg"
        );
        assert_eq!(
            relative_link(Path::new(""), Path::new("plots/a.svg")),
            "plots/a.svg"
        );
    }

    #[test]
    fn numbers_print_short() {
        assert_eq!(fmt_field(4096.0), "4096");
        assert_eq!(fmt_field(33.083), "33.1");
        assert_eq!(fmt_field(4.302), "4.30");
        assert_eq!(fmt_field(5417.26), "5417");
    }
}
