//! Locks, FIFOs and symlinks as Linux has them (issue 26, findings 3, 6
//! and 8): each test runs one script natively on a fresh directory and
//! under `lintel-run` on another, served, and compares what the two
//! printed (the directory's path renamed alike), then the trees they left.

mod common;
use common::check_library_is_current;

use std::path::Path;
use std::process::Command;

const PREFIX: &str = "/lintel-served";

/// Run `cmd` (`%R` standing for the directory) natively on `native` and
/// served on `served`: status and output, the directory renamed `ROOT`.
fn both(native: &Path, served: &Path, cmd: &[&str]) -> (String, String) {
    check_library_is_current();
    let show = |out: std::process::Output, root: &str| {
        format!(
            "status {:?}\n{}{}",
            out.status.code(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
        .replace(root, "ROOT")
    };
    let n_root = native.to_str().unwrap();
    let n_args: Vec<String> = cmd.iter().map(|a| a.replace("%R", n_root)).collect();
    let n = Command::new(&n_args[0]).args(&n_args[1..]).output().unwrap();
    let s_args: Vec<String> = cmd.iter().map(|a| a.replace("%R", PREFIX)).collect();
    let s = Command::new(env!("CARGO_BIN_EXE_lintel-run"))
        .arg("--root")
        .arg(served)
        .args(["--prefix", PREFIX, "--"])
        .args(&s_args)
        .output()
        .unwrap();
    (show(n, n_root), show(s, PREFIX))
}

/// [`both`] on two fresh directories; the outputs must match.
fn same(cmd: &[&str]) -> (tempfile::TempDir, tempfile::TempDir) {
    let (n, s) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (native, served) = both(n.path(), s.path(), cmd);
    assert_eq!(served, native, "`{}`: served (left), native (right)", cmd.join(" "));
    eprintln!("{native}");
    (n, s)
}

/// A Python script (its argument: the directory), run both ways.
fn python(script: &str) -> (tempfile::TempDir, tempfile::TempDir) {
    assert!(
        Path::new("/usr/bin/python3").exists(),
        "/usr/bin/python3 is missing: .ci/run installs Debian's python3"
    );
    let dir = tempfile::tempdir().unwrap();
    let py = dir.path().join("script.py");
    std::fs::write(&py, script).unwrap();
    same(&["/usr/bin/python3", py.to_str().unwrap(), "%R"])
}

/// Every entry of a tree: path, type, mode, size, symlink target.
fn tree(root: &Path) -> Vec<String> {
    use std::os::unix::fs::MetadataExt;
    let mut out = Vec::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            let m = std::fs::symlink_metadata(&p).unwrap();
            let link = std::fs::read_link(&p).map(|t| t.display().to_string()).unwrap_or_default();
            let size = if m.is_file() { m.len() } else { 0 };
            out.push(format!(
                "{} {:o} {size} {link}",
                p.strip_prefix(root).unwrap().display(),
                m.mode()
            ));
            if m.is_dir() {
                dirs.push(p);
            }
        }
    }
    out.sort();
    out
}

/// Finding 3: a `flock` holds whatever the descriptor's access mode
/// (`LOCK_EX` on a read-only one, `LOCK_SH` on a write-only one), and
/// `flock` locks and `fcntl` record locks do not conflict with each other.
#[test]
fn flock_ignores_the_access_mode_and_fcntl_locks() {
    let script = r#"
import os, sys, fcntl, errno, subprocess
root = sys.argv[1]
p = os.path.join(root, "locked")
with open(p, "w") as f: f.write("x" * 100)
def show(label, f):
    try: r = f(); print(label, "ok" if r is None else r)
    except OSError as e: print(label, errno.errorcode[e.errno])
ro = os.open(p, os.O_RDONLY)
wo = os.open(p, os.O_WRONLY)
NB = fcntl.LOCK_NB
show("flock ex, read-only", lambda: fcntl.flock(ro, fcntl.LOCK_EX | NB))
show("flock sh, write-only, held ex elsewhere", lambda: fcntl.flock(wo, fcntl.LOCK_SH | NB))
show("flock un, read-only", lambda: fcntl.flock(ro, fcntl.LOCK_UN))
show("flock sh, write-only", lambda: fcntl.flock(wo, fcntl.LOCK_SH | NB))
show("flock sh, read-only", lambda: fcntl.flock(ro, fcntl.LOCK_SH | NB))
show("flock ex, write-only, shared elsewhere", lambda: fcntl.flock(wo, fcntl.LOCK_EX | NB))
show("flock un, read-only", lambda: fcntl.flock(ro, fcntl.LOCK_UN))
show("flock ex, write-only (upgrade)", lambda: fcntl.flock(wo, fcntl.LOCK_EX | NB))
# A record lock in another process does not meet the flock ...
child = r'''
import os, sys, fcntl, errno
fd = os.open(sys.argv[1], os.O_RDWR)
try: fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 10, 0); print("child lockf ex: ok")
except OSError as e: print("child lockf ex:", errno.errorcode[e.errno])
try: fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB); print("child flock sh: ok")
except OSError as e: print("child flock sh:", errno.errorcode[e.errno])
'''
print(subprocess.run([sys.executable, "-c", child, p], capture_output=True, text=True).stdout, end="")
# ... nor the flock a record lock held here.
show("flock un, write-only", lambda: fcntl.flock(wo, fcntl.LOCK_UN))
rw = os.open(p, os.O_RDWR)
show("lockf ex", lambda: fcntl.lockf(rw, fcntl.LOCK_EX | NB, 10, 0))
child2 = r'''
import os, sys, fcntl, errno
fd = os.open(sys.argv[1], os.O_RDONLY)
try: fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB); print("child flock ex: ok")
except OSError as e: print("child flock ex:", errno.errorcode[e.errno])
w = os.open(sys.argv[1], os.O_WRONLY)
try: fcntl.lockf(w, fcntl.LOCK_EX | fcntl.LOCK_NB, 10, 0); print("child lockf ex:", "ok")
except OSError as e: print("child lockf ex:", errno.errorcode[e.errno])
'''
print(subprocess.run([sys.executable, "-c", child2, p], capture_output=True, text=True).stdout, end="")
show("bad op", lambda: fcntl.flock(ro, 0))
"#;
    python(script);
}
