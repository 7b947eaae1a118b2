//! Suite `unix`: the cost of trap emulation (Linux's syscall user dispatch,
//! `lintel_unix::trap`) beside a native system call, the first figure of
//! the emulation library for unmodified programs:
//!
//! - `native_call`: `getppid(2)` through libc, into the kernel;
//! - `trapped_call`: the same call from an armed thread, bounced back as
//!   SIGSYS and answered in the process (Mach 3.0's trap emulation);
//! - `trapped_passthrough`: trapped, then made for real from the exempt
//!   code range (what every call not served by lintel pays).
//!
//! And programs nobody here wrote, each run natively on a file of the
//! temporary directory and under `lintel-run` (the directory exported, the
//! file served under a prefix), timed whole (a process start included),
//! median of 15 runs, native and served alternating (3 with `--quick`): `start_true_*` and `start_cat_small_*` (what
//! starting a program costs: `/bin/true`, and `cat` of a 20-byte file;
//! lintel-run's own start included, as a user pays it), `cat_256m_*` and `sha256sum_256m_*` (a 256 MiB
//! file, 32 MiB with `--quick`), `wc_l_*` (a file of short lines),
//! `sqlite3_*` (10,000 rows in 10 transactions, a query and an integrity
//! check), and `pread1_*` and `pread1_64m_*` (`lintel-pread-probe`:
//! one-byte `pread`s at scattered offsets of the 256 MiB file and of a
//! 64 MiB one, first touch included; per call, median of the runs),
//! `pread1_64m_warm_*` (the same after a pass over every page of the
//! file: served, the reads then find it in the cache and mapped, which
//! is what a mapped read is), and `static_cat_256m`
//! (Debian's statically linked busybox `cat`, run in static mode, where
//! every call traps; measured when /bin/busybox is static). Every byte of a served
//! file read at random must first be paged into the service's cache
//! (about 1.2 GB/s here, `sendfile` into a memfd), so the fewer reads per
//! byte of file, the larger that first-touch share. `lintel-run`, its library and the probe
//! come from `cargo build --release -p lintel-preload`.
//!
//! And `meta_*`: metadata calls on small files, per call (see `meta`).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Instant;

use anyhow::Context as _;

use lintel_unix::trap::{self, Emulator};

use crate::harness::{CaseResult, Config, Report, measure_batched, measure_single};

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
    rustix::process::getppid().map_or(0, |p| p.as_raw_nonzero().get())
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
    programs(cfg, report)
}

const PREFIX: &str = "/lintel-bench-served";

/// A program of the workspace's release build, beside this one.
fn beside(name: &str) -> anyhow::Result<PathBuf> {
    let exe = std::env::current_exe()?;
    let p = exe.parent().context("no directory")?.join(name);
    anyhow::ensure!(
        p.exists(),
        "{} is missing: build it with `cargo build --release -p lintel-preload`",
        p.display()
    );
    Ok(p)
}

/// Run `cmd` (argv, with `{}` for the file's directory) natively and under
/// `lintel-run`, `runs` times each, interleaved; the medians in ns and the
/// stdout of every run of each (whose first words must agree).
type Runs = (Vec<f64>, Vec<f64>, Vec<String>, Vec<String>);

fn both(dir: &Path, cmd: &[&str], runs: usize) -> anyhow::Result<Runs> {
    let run = beside("lintel-run")?;
    let (mut native, mut served) = (Vec::new(), Vec::new());
    let (mut out_n, mut out_s) = (Vec::new(), Vec::new());
    for _ in 0..runs {
        for lintel in [false, true] {
            let root = if lintel {
                PREFIX.to_string()
            } else {
                dir.display().to_string()
            };
            let args: Vec<String> = cmd.iter().map(|a| a.replace("{}", &root)).collect();
            let mut c = if lintel {
                let mut c = Command::new(&run);
                c.args(["--root", &dir.display().to_string(), "--prefix", PREFIX, "--"])
                    .args(&args);
                c
            } else {
                let mut c = Command::new(&args[0]);
                c.args(&args[1..]);
                c
            };
            // A database starts afresh each run.
            let _ = std::fs::remove_file(dir.join("db.sqlite"));
            let t0 = Instant::now();
            let out = c
                .stderr(Stdio::inherit())
                .output()
                .with_context(|| format!("running {}", args[0]))?;
            let ns = t0.elapsed().as_nanos() as f64;
            anyhow::ensure!(
                out.status.success(),
                "`{}` failed ({})",
                args.join(" "),
                out.status
            );
            let text = String::from_utf8_lossy(&out.stdout).replace(&root, "ROOT");
            if lintel {
                served.push(ns);
                out_s.push(text);
            } else {
                native.push(ns);
                out_n.push(text);
            }
        }
    }
    Ok((native, served, out_n, out_s))
}

fn programs(cfg: &Config, report: &mut Report) -> anyhow::Result<()> {
    let dir = std::env::temp_dir().join(format!("lintel-bench-unix-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let cleanup = Cleanup(dir.clone());
    let size: usize = if cfg.quick { 32 << 20 } else { 256 << 20 };
    // Native and served alternate, run for run; this machine's phases move
    // a median of 7 by more than the 1.2 × margins judged here.
    let runs = if cfg.quick { 3 } else { 15 };
    {
        use std::io::Write;
        let mut f = std::io::BufWriter::new(std::fs::File::create(dir.join("big"))?);
        let chunk: Vec<u8> = (0..1 << 20)
            .map(|i: usize| ((i * 2_654_435_761) >> 11) as u8)
            .collect();
        for _ in 0..size >> 20 {
            f.write_all(&chunk)?;
        }
        let mut lines = std::io::BufWriter::new(std::fs::File::create(dir.join("lines"))?);
        for i in 0..(size / 16) {
            writeln!(lines, "l{}", i % 100_000)?;
        }
        std::fs::write(dir.join("small"), b"a small served file\n")?;
        let mut mid = std::io::BufWriter::new(std::fs::File::create(dir.join("mid"))?);
        for _ in 0..size >> 22 {
            mid.write_all(&chunk)?;
        }
    }
    let mut sql = String::from("create table t(k integer primary key, v text);\n");
    for tx in 0..10 {
        sql.push_str("begin;\n");
        for i in 0..1000 {
            let k = tx * 1000 + i;
            sql.push_str(&format!("insert into t values({k}, 'value {}');\n", k * 31 % 977));
        }
        sql.push_str("commit;\n");
    }
    sql.push_str("select count(*), sum(k) from t;\npragma integrity_check;\n");
    let sql_path = dir.join("work.sql");
    std::fs::write(&sql_path, sql)?;
    let read = format!(".read {}", sql_path.display());
    let probe = beside("lintel-pread-probe")?.display().to_string();
    let preads = if cfg.quick { "20000" } else { "1000000" };
    let mut cases: Vec<(&str, Vec<&str>)> = vec![
        ("start_true", vec!["/bin/true"]),
        ("start_cat_small", vec!["cat", "{}/small"]),
        ("cat_256m", vec!["sh", "-c", "cat {}/big | wc -c"]),
        ("sha256sum_256m", vec!["sha256sum", "{}/big"]),
        ("wc_l", vec!["wc", "-l", "{}/lines"]),
        ("sqlite3", vec!["sqlite3", "{}/db.sqlite", &read]),
        ("pread1", vec![&probe, "{}/big", preads]),
        ("pread1_64m", vec![&probe, "{}/mid", preads]),
        ("pread1_64m_warm", vec![&probe, "{}/mid", preads, "warm"]),
    ];
    // Static mode (`lintel_unix::image`): a statically linked cat, every
    // call trapped.
    if lintel_unix::image::is_static(Path::new("/bin/busybox")) {
        cases.push(("static_cat_256m", vec!["sh", "-c", "busybox cat {}/big | wc -c"]));
    } else {
        eprintln!("unix: no static /bin/busybox (Debian's busybox-static): static_cat_256m skipped");
    }
    for (name, cmd) in cases {
        let start = name.starts_with("start_");
        let (native, served, out_n, out_s) = both(&dir, &cmd, if start { runs * 5 } else { runs })?;
        let probe_case = name.starts_with("pread1");
        // (The probe's second word is its own timing.)
        let first = |t: &String| {
            if probe_case {
                t.split_whitespace().next().unwrap_or("").to_string()
            } else {
                t.clone()
            }
        };
        for (a, b) in out_n.iter().zip(&out_s) {
            anyhow::ensure!(
                first(a) == first(b),
                "{name}: output under lintel differs: {b:?} against {a:?}"
            );
        }
        let (n, s) = if probe_case {
            // Per call, from the probe's own report of each run.
            let per = |ts: &[String]| -> Vec<f64> {
                ts.iter()
                    .map(|t| {
                        t.split_whitespace()
                            .nth(1)
                            .and_then(|v| v.parse::<f64>().ok())
                            .unwrap_or(0.0)
                    })
                    .collect()
            };
            (measure_single(&per(&out_n)), measure_single(&per(&out_s)))
        } else {
            (measure_single(&native), measure_single(&served))
        };
        let native_case = format!("{name}_native");
        report.push(CaseResult::new(SUITE, &native_case, &n));
        let target = match name {
            "pread1" | "pread1_64m" => " (target: ≥ 3× faster)",
            "pread1_64m_warm" => " (target: ≥ 5× faster)",
            "static_cat_256m" => " (static mode: measured, no target)",
            _ => " (target ≤ 1.2×)",
        };
        let note = if start {
            format!(
                "{:+.2} ms against native (target: ≤ 5 ms more)",
                (s.median_ns - n.median_ns) / 1e6
            )
        } else {
            format!("{:.2}× native's time{target}", s.median_ns / n.median_ns)
        };
        report.push(
            CaseResult::new(SUITE, &format!("{name}_lintel"), &s)
                .compare_to(SUITE, &native_case)
                .with_note(note),
        );
    }
    drop(cleanup);
    meta(cfg, report)
}

/// The metadata script (`scripts/meta.py`), written where it runs.
const META_PY: &str = include_str!("../scripts/meta.py");

/// `meta_<op>_<writer>_<files>`: metadata calls on small files, per call
/// (`scripts/meta.py`): `create` (open, write a line, close; `py` as
/// Python's `open` does it, `c` as C stdio's `fopen` does), then `stat`,
/// `open_close` (`O_RDONLY`) and `unlink` of each, in a directory of
/// 1,000, 10,000 and (full mode) 100,000 files, natively and under
/// `lintel-run`, interleaved. In `/dev/shm` when there is one, so the
/// figures are the emulation's and not the disk file system's (ext4
/// slows creating files where many were just deleted).
fn meta(cfg: &Config, report: &mut Report) -> anyhow::Result<()> {
    let shm = Path::new("/dev/shm");
    let base = if shm.is_dir() {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
    };
    let dir = base.join(format!("lintel-bench-meta-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let cleanup = Cleanup(dir.clone());
    let script = dir.join("meta.py");
    std::fs::write(&script, META_PY)?;
    let run = beside("lintel-run")?;
    let runs = if cfg.quick { 1 } else { 3 };
    let mut sizes = vec![("1k", 1_000), ("10k", 10_000)];
    if !cfg.quick {
        sizes.push(("100k", 100_000));
    }
    const OPS: [&str; 4] = ["create", "stat", "open_close", "unlink"];
    let mut fresh = 0;
    for (label, files) in sizes {
        for writer in ["py", "c"] {
            // Per op, per side: each run's figure.
            let mut got: [[Vec<f64>; 2]; 4] = Default::default();
            for _ in 0..runs {
                for (side, lintel) in [false, true].into_iter().enumerate() {
                    fresh += 1;
                    let sub = format!("d{fresh}");
                    let script = script.display().to_string();
                    let out = if lintel {
                        Command::new(&run)
                            .args(["--root", &dir.display().to_string(), "--prefix", PREFIX, "--"])
                            .args(["python3", &script, &format!("{PREFIX}/{sub}")])
                            .args([&files.to_string(), writer])
                            .stderr(Stdio::inherit())
                            .output()
                    } else {
                        Command::new("python3")
                            .args([&script, &dir.join(&sub).display().to_string()])
                            .args([&files.to_string(), writer])
                            .stderr(Stdio::inherit())
                            .output()
                    }
                    .context("running the metadata script")?;
                    anyhow::ensure!(
                        out.status.success(),
                        "meta.py {files} {writer} failed ({})",
                        out.status
                    );
                    let text = String::from_utf8_lossy(&out.stdout);
                    let words: Vec<&str> = text.split_whitespace().collect();
                    for (k, op) in OPS.iter().enumerate() {
                        let v = words
                            .iter()
                            .position(|w| w == op)
                            .and_then(|i| words.get(i + 1))
                            .and_then(|v| v.parse::<f64>().ok())
                            .with_context(|| format!("meta.py printed no {op}: {text:?}"))?;
                        got[k][side].push(v * 1e3);
                    }
                }
            }
            for (k, op) in OPS.iter().enumerate() {
                let name = format!("meta_{op}_{writer}_{label}");
                let (n, s) = (measure_single(&got[k][0]), measure_single(&got[k][1]));
                let native_case = format!("{name}_native");
                report.push(CaseResult::new(SUITE, &native_case, &n));
                report.push(
                    CaseResult::new(SUITE, &format!("{name}_lintel"), &s)
                        .compare_to(SUITE, &native_case)
                        .with_note(format!(
                            "per call, {files} files written by {writer}; {:.2}× native (target ≤ 2×)",
                            s.median_ns / n.median_ns
                        )),
                );
            }
        }
    }
    drop(cleanup);
    Ok(())
}

struct Cleanup(PathBuf);

impl Drop for Cleanup {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
