//! fsx, the file-system exerciser of xfstests (`third_party/fsx`, which
//! nobody here wrote), built from source with `cc` and run natively and
//! under `lintel-run` on a served file: random reads, writes, truncates
//! and mapped reads and writes, each checked against fsx's own model of
//! the file's bytes and size.
//!
//! Each run is 260,000 fsx operations, of which about 107,000 are real
//! ones: fsx draws from its 17 kinds and counts a disabled kind's turn
//! as an operation (7 kinds are on: read and write, each also with
//! `RWF_DONTCACHE`, mapped read, mapped write and truncate; for seed 1,
//! 102,697 real operations in 250,000). The operation kinds switched off
//! and why are in `third_party/fsx/README.md`.
//!
//! Runs go on a tmpfs (`/dev/shm`) when there is one: every mapped
//! write ends with `msync(MS_SYNC)`, which on a disk-backed directory
//! makes the run wait on the disk (about 20 s natively for 100,000
//! operations on this project's machines, against 1 s on tmpfs).
//! `LINTEL_FSX_DIR` names another directory; `LINTEL_FSX_SEED` fixes
//! the "fresh" seed (each run prints the one it used).

mod common;
use common::check_library_is_current;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;
use std::time::{Instant, SystemTime};

const PREFIX: &str = "/lintel-served";
/// fsx's operation count (`-N`); see the module's doc for the real ones.
const OPS: u32 = 260_000;
/// fsx's flags for every run: quiet, and no fallocate (`-F`), punch hole
/// (`-H`), zero range (`-z`), collapse range (`-C`), insert range (`-I`)
/// or copy range (`-E`). Mapped reads and writes are on (fsx's default).
const FLAGS: &[&str] = &["-q", "-F", "-H", "-z", "-C", "-I", "-E"];
/// [`FLAGS`] with fallocate (`-F` gone: plain, extending and
/// `FALLOC_FL_KEEP_SIZE`) and punch hole (`-H` gone) on.
const FALLOCATE_FLAGS: &[&str] = &["-q", "-z", "-C", "-I", "-E"];
/// One chance in this many, at every operation, that fsx closes the
/// file and opens it again (`-c`).
const REOPEN: &str = "32";

/// The vendored source.
fn source_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../third_party/fsx")
}

/// fsx, patched and compiled once per test process into the target
/// directory by `third_party/fsx/build.sh` (xfstests' own flags, less
/// what Debian's build-essential lacks: see the README there).
fn fsx() -> &'static Path {
    static FSX: OnceLock<PathBuf> = OnceLock::new();
    FSX.get_or_init(|| {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("fsx");
        let script = source_dir().join("build.sh");
        check_ran(
            "third_party/fsx/build.sh (needs cc and patch: build-essential)",
            Command::new("sh").arg(&script).arg(&dir).output(),
        );
        dir.join("fsx")
    })
}

fn check_ran(what: &str, out: std::io::Result<Output>) {
    let out = out.unwrap_or_else(|e| panic!("{what} did not start: {e}"));
    assert!(
        out.status.success(),
        "{what} failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Where the files fsx works on go: see the module's doc.
fn scratch() -> tempfile::TempDir {
    let base = match std::env::var_os("LINTEL_FSX_DIR") {
        Some(d) => PathBuf::from(d),
        None if Path::new("/dev/shm").is_dir() => PathBuf::from("/dev/shm"),
        None => std::env::temp_dir(),
    };
    tempfile::Builder::new()
        .prefix("lintel-fsx.")
        .tempdir_in(&base)
        .or_else(|_| tempfile::tempdir())
        .unwrap()
}

/// The seed of a run's second half: `LINTEL_FSX_SEED`, or a fresh one.
fn fresh_seed() -> u32 {
    if let Some(s) = std::env::var("LINTEL_FSX_SEED").ok().and_then(|s| s.parse().ok()) {
        return s;
    }
    let t = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap();
    let mix = (t.as_nanos() as u64 ^ (std::process::id() as u64) << 32).wrapping_mul(0x9e3779b97f4a7c15);
    (mix >> 33) as u32 % 1_000_000 + 1
}

/// How fsx reaches its file.
#[derive(Clone, Copy, PartialEq)]
enum Via {
    Native,
    Served,
}

/// What fsx does: [`OPS`] random turns from a seed, or the operations
/// of an fsx operations file (`--replay-ops`, the format of the
/// `.fsxops` file it saves).
#[derive(Clone, Copy)]
enum Turns<'a> {
    Seed(u32),
    Replay(&'a str),
}

/// Run fsx once with `flags` on a new file, natively or through the file
/// service under `lintel-run`; panic with fsx's report (its failure, the
/// last operations it logged, and where its files were kept) unless it
/// ran every operation without a fault.
fn run_fsx(via: Via, flags: &[&str], turns: Turns, what: &str) {
    let data = scratch();
    let logs = tempfile::tempdir().unwrap();
    let mut args: Vec<String> = flags.iter().map(|f| f.to_string()).collect();
    let ok_line = match turns {
        Turns::Seed(seed) => {
            args.extend(["-N".into(), OPS.to_string(), "-S".into(), seed.to_string()]);
            format!("All {OPS} operations completed A-OK!")
        }
        Turns::Replay(ops) => {
            let path = logs.path().join("replay.fsxops");
            std::fs::write(&path, ops).unwrap();
            args.extend(["--replay-ops".into(), path.to_str().unwrap().into()]);
            " operations completed A-OK!".into()
        }
    };
    args.extend(["-P".into(), logs.path().to_str().unwrap().into()]);
    let file = data.path().join("fsx.file");
    let served_file = format!("{PREFIX}/fsx.file");
    let mut cmd = match via {
        Via::Native => {
            let mut c = Command::new(fsx());
            c.args(&args).arg(&file);
            c
        }
        Via::Served => {
            check_library_is_current();
            let mut c = Command::new(env!("CARGO_BIN_EXE_lintel-run"));
            c.arg("--root").arg(data.path()).args(["--prefix", PREFIX, "--"]);
            c.arg(fsx()).args(&args).arg(&served_file);
            c
        }
    };
    let how = match via {
        Via::Native => "native",
        Via::Served => "served",
    };
    let target = match via {
        Via::Native => file.display().to_string(),
        Via::Served => format!("{served_file} (served from {})", data.path().display()),
    };
    let line = format!("fsx {how}, {what}: {} {target}", args.join(" "));
    eprintln!("{line}");
    let start = Instant::now();
    let out = cmd.output().unwrap();
    let took = start.elapsed();
    let stdout = String::from_utf8_lossy(&out.stdout);
    if out.status.success() && stdout.contains(&ok_line) {
        eprintln!("  {:.2} s: {}", took.as_secs_f64(), stdout.trim_end());
        return;
    }
    // Keep fsx's files (its log, its model of the file and the
    // operations to replay) and the file itself, and quote the report:
    // what was wrong, then the last operations of its log.
    let logs = logs.keep();
    let data = data.keep();
    std::fs::write(logs.join("fsx.stdout"), &out.stdout).unwrap();
    std::fs::write(logs.join("fsx.stderr"), &out.stderr).unwrap();
    let lines: Vec<&str> = stdout.lines().collect();
    let dump = lines
        .iter()
        .position(|l| l.starts_with("LOG DUMP"))
        .unwrap_or(lines.len());
    let head: Vec<&str> = lines[..dump]
        .iter()
        .copied()
        .filter(|l| !l.starts_with("operation# (mod 256) for the bad data unknown"))
        .take(60)
        .collect();
    let tail = &lines[dump..][lines[dump..].len().saturating_sub(40)..];
    panic!(
        "{line}\nfailed after {:.2} s ({}); fsx said:\n{}\n[...]\n{}\nstderr:\n{}\n\
         fsx's files (log, good copy, operations to replay with --replay-ops) are kept in {}, \
         the file in {}",
        took.as_secs_f64(),
        out.status,
        head.join("\n"),
        tail.join("\n"),
        String::from_utf8_lossy(&out.stderr),
        logs.display(),
        data.display()
    );
}

/// Seed 1, then a fresh seed.
fn both_seeds(via: Via, flags: &[&str], what: &str) {
    run_fsx(via, flags, Turns::Seed(1), what);
    let seed = fresh_seed();
    eprintln!("fsx: fresh seed {seed} (rerun with LINTEL_FSX_SEED={seed})");
    run_fsx(via, flags, Turns::Seed(seed), what);
}

#[test]
fn fsx_native() {
    both_seeds(Via::Native, FLAGS, "read, write, mapped read and write, truncate");
}

#[test]
fn fsx_served() {
    both_seeds(Via::Served, FLAGS, "read, write, mapped read and write, truncate");
}

/// [`FLAGS`] with mapped reads and writes off (`-R`, `-W`). The file
/// service gives up a file's windows (the token and the in-process
/// cache) from its first shared mapping until every open of it is
/// closed, so in [`fsx_served`] every call after fsx's first mapped
/// operation (about its 17th) goes to the service; without mapped
/// operations the whole run goes through the windows.
fn windows_flags() -> Vec<&'static str> {
    let mut f = FLAGS.to_vec();
    f.extend(["-R", "-W"]);
    f
}

#[test]
fn fsx_native_windows() {
    both_seeds(
        Via::Native,
        &windows_flags(),
        "read, write, truncate; no mapped I/O",
    );
}

#[test]
fn fsx_served_windows() {
    both_seeds(
        Via::Served,
        &windows_flags(),
        "read, write, truncate; no mapped I/O",
    );
}

fn reopen_flags() -> Vec<&'static str> {
    let mut f = FLAGS.to_vec();
    f.extend(["-c", REOPEN]);
    f
}

#[test]
fn fsx_native_reopen() {
    both_seeds(
        Via::Native,
        &reopen_flags(),
        "the same, closed and reopened 1 op in 32",
    );
}

#[test]
fn fsx_served_reopen() {
    both_seeds(
        Via::Served,
        &reopen_flags(),
        "the same, closed and reopened 1 op in 32",
    );
}

#[test]
fn fsx_native_fallocate() {
    both_seeds(
        Via::Native,
        FALLOCATE_FLAGS,
        "the same with fallocate and punch hole",
    );
}

#[test]
fn fsx_served_fallocate() {
    both_seeds(
        Via::Served,
        FALLOCATE_FLAGS,
        "the same with fallocate and punch hole",
    );
}

/// The shortest loss `fsx_served_reopen` found, as fsx operations (each
/// line: operation, offset, length, the file's size before it): 96 KiB
/// written at 0, more than a window (so by the copy path, to the host
/// file only); 4 KiB written past the end at 128 KiB and one byte at 0
/// (both through windows: the dirty range the token carries becomes
/// 0..0x21000, across pages the cache never filled); then a read of
/// 32 KiB at 64 KiB (the copy path: the token is recalled, its dirty
/// range written back from the cache), which finds zeros.
const LOST_WRITE: &str = "write 0x0 0x18000 0x0
write 0x20000 0x1000 0x18000
write 0x0 0x1 0x21000
read 0x10000 0x8000 0x21000
";

#[test]
fn fsx_native_lost_write() {
    run_fsx(
        Via::Native,
        &["-q"],
        Turns::Replay(LOST_WRITE),
        "replay of LOST_WRITE",
    );
}

#[test]
fn fsx_served_lost_write() {
    run_fsx(
        Via::Served,
        &["-q"],
        Turns::Replay(LOST_WRITE),
        "replay of LOST_WRITE",
    );
}
