//! pjdfstest, the POSIX file-system test suite (`third_party/pjdfstest`,
//! which nobody here wrote), run natively and served in the same run, and
//! compared assertion by assertion: whatever passes natively must pass
//! served, but for the entries of `third_party/pjdfstest/served-exclusions.txt`.
//!
//! The suite is shell scripts (`tests/*/*.t`), each a list of assertions
//! printed as TAP (`ok N`, `not ok N - tried '…', expected …, got …`),
//! each assertion one run of the `pjdfstest` program (a system call and
//! what it returned). Every script runs twice, each time in a fresh
//! directory of its own: natively, with its working directory a host
//! directory, and served, under `lintel-run --root DIR --prefix /lintel-served`
//! with its working directory `/lintel-served`: the shell, `pjdfstest` and
//! the tools the scripts run (`dd`, `openssl`, `awk`, …) are all under the
//! emulation, and every path the suite names is a served one. Scripts run
//! several at a time ([`JOBS`]): most of the suite's time is `sleep 1`
//! between a change and the check of its times.
//!
//! The exclusion list can only shrink: an excluded entry that passes
//! served fails the test (take it out), and so does a list longer than
//! [`MAX_EXCLUSIONS`]. The suite wants root (its `-u`/`-g` switch users,
//! `chown` gives files away, `mknod` makes devices); as another user the
//! native run fails those assertions too, and the comparison still holds.
//!
//! `pjdfstest` is built once per test process into the target directory
//! with the suite's own autoconf build (`autoreconf -ifs && ./configure &&
//! make pjdfstest`: Debian's autoconf, automake, make and cc; `.ci/run`
//! installs them). Directories go on a tmpfs (`/dev/shm`) when there is
//! one (`LINTEL_PJDFSTEST_DIR` names another); `LINTEL_PJDFSTEST_ONLY`
//! runs only the scripts whose path (`open/00.t`) contains it.

mod common;
use common::check_library_is_current;

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

const PREFIX: &str = "/lintel-served";

/// The most entries `served-exclusions.txt` may hold: lower it when the
/// list shrinks, never raise it without a reason in the commit.
const MAX_EXCLUSIONS: usize = 0;

/// Scripts run at once (`LINTEL_PJDFSTEST_JOBS` overrides): the suite
/// mostly sleeps, so more than the machine's cores.
const JOBS: usize = 8;

/// A script that has not finished after this long is killed; its missing
/// assertions count as failed.
const SCRIPT_TIMEOUT: Duration = Duration::from_secs(900);

fn source_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../third_party/pjdfstest")
}

/// The build directory: `pjdfstest` and a copy of `tests/` beside it
/// (the scripts find the program by walking up from their own folder).
fn built() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("pjdfstest");
        let src = source_dir();
        let sources = ["pjdfstest.c", "configure.ac", "Makefile.am"];
        let newest = sources
            .iter()
            .map(|f| std::fs::metadata(src.join(f)).and_then(|m| m.modified()).unwrap())
            .max()
            .unwrap();
        let program = dir.join("pjdfstest");
        let fresh = std::fs::metadata(&program)
            .and_then(|m| m.modified())
            .is_ok_and(|t| t > newest);
        if !fresh {
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap();
            for f in sources
                .iter()
                .chain(&["AUTHORS", "COPYING", "ChangeLog", "NEWS", "README"])
            {
                std::fs::copy(src.join(f), dir.join(f)).unwrap();
            }
            let out = Command::new("sh")
                .arg("-c")
                .arg("autoreconf -ifs && ./configure && make pjdfstest")
                .current_dir(&dir)
                .output()
                .unwrap_or_else(|e| panic!("sh did not start: {e}"));
            assert!(
                out.status.success(),
                "building pjdfstest (autoreconf -ifs && ./configure && make pjdfstest; needs \
                 Debian's autoconf, automake, make and cc) failed:\n{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let tests = dir.join("tests");
        let _ = std::fs::remove_dir_all(&tests);
        copy_tree(&src.join("tests"), &tests);
        dir
    })
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap().flatten() {
        let (f, t) = (e.path(), to.join(e.file_name()));
        if f.is_dir() {
            copy_tree(&f, &t);
        } else {
            std::fs::copy(&f, &t).unwrap();
        }
    }
}

/// Every script, as `dir/NN.t`, largest first (the long ones start first).
fn scripts(tests: &Path) -> Vec<String> {
    let mut all = Vec::new();
    for d in std::fs::read_dir(tests).unwrap().flatten() {
        if !d.path().is_dir() {
            continue;
        }
        for f in std::fs::read_dir(d.path()).unwrap().flatten() {
            let name = f.file_name().to_string_lossy().into_owned();
            if name.ends_with(".t") {
                let size = f.metadata().unwrap().len();
                all.push((size, format!("{}/{name}", d.file_name().to_string_lossy())));
            }
        }
    }
    let only = std::env::var("LINTEL_PJDFSTEST_ONLY").ok();
    all.retain(|(_, s)| only.as_deref().is_none_or(|o| s.contains(o)));
    all.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    all.into_iter().map(|(_, s)| s).collect()
}

/// Where the scripts' directories go: see the module's doc.
fn scratch() -> tempfile::TempDir {
    let base = match std::env::var_os("LINTEL_PJDFSTEST_DIR") {
        Some(d) => PathBuf::from(d),
        None if Path::new("/dev/shm").is_dir() => PathBuf::from("/dev/shm"),
        None => std::env::temp_dir(),
    };
    tempfile::Builder::new()
        .prefix("lintel-pjdfstest.")
        .tempdir_in(&base)
        .or_else(|_| tempfile::tempdir())
        .unwrap()
}

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
enum Via {
    Native,
    Served,
}

/// One script's run: each assertion's number, whether it passed, and its
/// TAP line; the plan's count; how long it took.
struct Run {
    planned: usize,
    results: BTreeMap<usize, (bool, String)>,
    took: Duration,
    note: String,
}

impl Run {
    fn passed(&self, n: usize) -> bool {
        self.results.get(&n).is_some_and(|r| r.0)
    }
    fn line(&self, n: usize) -> &str {
        self.results
            .get(&n)
            .map_or("(no line: the script stopped before it)", |r| r.1.as_str())
    }
}

/// TAP as pjdfstest prints it: a plan `1..N`, then `ok N` or `not ok N …`
/// (`# TODO` lines are the suite's expected failures: not passes).
fn parse(out: &str) -> (usize, BTreeMap<usize, (bool, String)>) {
    let mut planned = 0;
    let mut results = BTreeMap::new();
    for line in out.lines() {
        if let Some(n) = line.strip_prefix("1..").and_then(|n| n.trim().parse().ok()) {
            planned = n;
            continue;
        }
        let (ok, rest) = if let Some(r) = line.strip_prefix("ok ") {
            (true, r)
        } else if let Some(r) = line.strip_prefix("not ok ") {
            (false, r)
        } else {
            continue;
        };
        let Some(n) = rest
            .split(|c: char| !c.is_ascii_digit())
            .next()
            .and_then(|n| n.parse().ok())
        else {
            continue;
        };
        let todo = rest.contains("# TODO");
        results.insert(n, (ok && !todo, line.to_string()));
    }
    (planned, results)
}

fn run_script(script: &str, via: Via) -> Run {
    let dir = built();
    let path = dir.join("tests").join(script);
    let data = scratch();
    let mut cmd = match via {
        Via::Native => {
            let mut c = Command::new("sh");
            c.arg(&path).current_dir(data.path());
            c
        }
        Via::Served => {
            let mut c = Command::new(env!("CARGO_BIN_EXE_lintel-run"));
            c.arg("--root").arg(data.path()).args(["--prefix", PREFIX, "--"]);
            c.args(["sh", "-c", &format!("cd {PREFIX} && exec sh \"$0\"")])
                .arg(&path);
            c
        }
    };
    use std::os::unix::process::CommandExt;
    cmd.process_group(0)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let start = Instant::now();
    let mut child = cmd.spawn().unwrap();
    let pid = child.id() as i32;
    // Read the output on threads, so a full pipe never stalls the script.
    let mut stdout = child.stdout.take().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let out = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut stdout, &mut s);
        s
    });
    let err = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut stderr, &mut s);
        s
    });
    let mut note = String::new();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            if !status.success() {
                note = format!("exited with {status}");
            }
            break;
        }
        if start.elapsed() > SCRIPT_TIMEOUT {
            // The whole process group: the shell and what it runs.
            let _ = Command::new("kill")
                .args(["-KILL", "--", &format!("-{pid}")])
                .status();
            let _ = child.wait();
            note = format!("killed after {} s", SCRIPT_TIMEOUT.as_secs());
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let took = start.elapsed();
    let (out, err) = (out.join().unwrap(), err.join().unwrap());
    if !err.trim().is_empty() {
        let first: Vec<&str> = err.lines().take(3).collect();
        note = format!("{note} stderr: {}", first.join(" | "));
    }
    let (planned, results) = parse(&out);
    Run {
        planned,
        results,
        took,
        note,
    }
}

/// A TAP line cut to a readable length (pjdfstest's paths run to 1 KiB).
fn shorten(line: &str) -> String {
    const MAX: usize = 240;
    match line.char_indices().nth(MAX) {
        Some((at, _)) => format!("{}…", &line[..at]),
        None => line.to_string(),
    }
}

/// An exclusion: a script, or one assertion of it or a range (`a-b`).
struct Exclusion {
    line: usize,
    script: String,
    range: Option<(usize, usize)>,
    reason: String,
}

impl Exclusion {
    fn covers(&self, script: &str, n: usize) -> bool {
        self.script == script && self.range.is_none_or(|(a, b)| (a..=b).contains(&n))
    }
}

/// `served-exclusions.txt`: `SCRIPT[:N[-M]] REASON` a line, `#` comments.
fn exclusions() -> Vec<Exclusion> {
    let file = source_dir().join("served-exclusions.txt");
    let text = std::fs::read_to_string(&file).unwrap();
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (what, reason) = line.split_once(char::is_whitespace).unwrap_or((line, ""));
        assert!(
            !reason.trim().is_empty(),
            "{}:{}: an exclusion needs its reason",
            file.display(),
            i + 1
        );
        let (script, range) = match what.split_once(':') {
            None => (what, None),
            Some((s, r)) => {
                let (a, b) = r.split_once('-').unwrap_or((r, r));
                let num = |v: &str| {
                    v.parse::<usize>().unwrap_or_else(|_| {
                        panic!("{}:{}: bad assertion number {v:?}", file.display(), i + 1)
                    })
                };
                (s, Some((num(a), num(b))))
            }
        };
        out.push(Exclusion {
            line: i + 1,
            script: script.to_string(),
            range,
            reason: reason.trim().to_string(),
        });
    }
    out
}

#[test]
fn pjdfstest_passes_served_what_it_passes_natively() {
    check_library_is_current();
    let dir = built();
    let all = scripts(&dir.join("tests"));
    assert!(!all.is_empty(), "no pjdfstest scripts found");
    let excluded = exclusions();
    assert!(
        // (Not `<=`: with the bound at 0, clippy calls that absurd.)
        excluded.len().saturating_sub(MAX_EXCLUSIONS) == 0,
        "served-exclusions.txt has {} entries, more than MAX_EXCLUSIONS = {MAX_EXCLUSIONS}",
        excluded.len()
    );
    let jobs = std::env::var("LINTEL_PJDFSTEST_JOBS")
        .ok()
        .and_then(|j| j.parse().ok())
        .unwrap_or(JOBS);
    // Each script natively and served, as one queue: the two runs of a
    // script meet the same load.
    let queue: Vec<(String, Via)> = all
        .iter()
        .flat_map(|s| [(s.clone(), Via::Native), (s.clone(), Via::Served)])
        .collect();
    let queue = Arc::new(Mutex::new(queue.into_iter()));
    let runs = Arc::new(Mutex::new(BTreeMap::new()));
    let start = Instant::now();
    let workers: Vec<_> = (0..jobs)
        .map(|_| {
            let (queue, runs) = (queue.clone(), runs.clone());
            std::thread::spawn(move || {
                loop {
                    let Some((script, via)) = queue.lock().unwrap().next() else {
                        break;
                    };
                    let run = run_script(&script, via);
                    runs.lock().unwrap().insert((script, via), run);
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    let wall = start.elapsed();
    let runs = std::mem::take(&mut *runs.lock().unwrap());

    let mut counts = [0usize; 4]; // native passed, native total, served passed, served total
    let mut time = [Duration::ZERO; 2];
    let mut regressions = Vec::new();
    let mut still_failing = vec![false; excluded.len()];
    let mut excluded_count = 0;
    for script in &all {
        let native = &runs[&(script.clone(), Via::Native)];
        let served = &runs[&(script.clone(), Via::Served)];
        time[0] += native.took;
        time[1] += served.took;
        let total = native.planned.max(served.planned).max(native.results.len());
        counts[1] += total;
        counts[3] += total;
        for n in 1..=total {
            let (np, sp) = (native.passed(n), served.passed(n));
            counts[0] += np as usize;
            counts[2] += sp as usize;
            if !np || sp {
                continue;
            }
            match excluded.iter().position(|e| e.covers(script, n)) {
                Some(i) => {
                    still_failing[i] = true;
                    excluded_count += 1;
                }
                None => regressions.push(format!(
                    "{script}:{n}: served {}{}",
                    shorten(served.line(n)),
                    if served.note.is_empty() {
                        String::new()
                    } else {
                        format!(" [{}]", served.note.trim())
                    }
                )),
            }
        }
    }
    // Straight to stderr, past the test harness's capture: the counts
    // belong in every log, passing or not.
    let _ = writeln!(
        std::io::stderr(),
        "pjdfstest: {} scripts, {} assertions; passed natively {} / {}, served {} / {} \
         ({} failing served covered by {} exclusions); {:.0} s wall with {jobs} jobs \
         (scripts' own time: native {:.0} s, served {:.0} s)",
        all.len(),
        counts[1],
        counts[0],
        counts[1],
        counts[2],
        counts[3],
        excluded_count,
        excluded.len(),
        wall.as_secs_f64(),
        time[0].as_secs_f64(),
        time[1].as_secs_f64()
    );
    let only = std::env::var("LINTEL_PJDFSTEST_ONLY").is_ok();
    let stale: Vec<String> = excluded
        .iter()
        .zip(&still_failing)
        .filter(|(e, failing)| !**failing && (!only || all.contains(&e.script)))
        .map(|(e, _)| {
            let range = e.range.map_or(String::new(), |(a, b)| format!(":{a}-{b}"));
            format!("line {}: {}{range} ({})", e.line, e.script, e.reason)
        })
        .collect();
    let mut problems = String::new();
    if !regressions.is_empty() {
        problems += &format!(
            "{} assertions pass natively but fail served (not in served-exclusions.txt):\n  {}\n",
            regressions.len(),
            regressions.join("\n  ")
        );
    }
    if !stale.is_empty() {
        problems += &format!(
            "served-exclusions.txt entries that no longer fail served (remove them):\n  {}\n",
            stale.join("\n  ")
        );
    }
    assert!(problems.is_empty(), "{problems}");
}
