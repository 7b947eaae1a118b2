//! Paths and names at their edges, as pjdfstest found them served: each
//! test runs one script natively on a fresh directory and under
//! `lintel-run` on another, served, and compares what the two printed
//! (the directory's path renamed alike), then the trees they left.

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
    assert_eq!(
        served,
        native,
        "`{}`: served (left), native (right)",
        cmd.join(" ")
    );
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
            let link = std::fs::read_link(&p)
                .map(|t| t.display().to_string())
                .unwrap_or_default();
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

/// A path of `PATH_MAX` bytes or more is `ENAMETOOLONG` (the kernel's
/// limit counts the NUL), one byte shorter is taken (pjdfstest's
/// `*/03.t`).
#[test]
fn a_path_of_path_max_bytes_is_too_long() {
    let script = r#"
import os, sys, errno
root = sys.argv[1]
os.chdir(root)
def show(label, f):
    try: r = f(); print(label, "ok" if r is None else r)
    except OSError as e: print(label, errno.errorcode[e.errno])
parts, path = [], ""
while len(path) < 4200:
    parts.append("d%03d" % len(parts) + "x" * 120)
    path = "/".join(parts)
top = path[:4095].rsplit("/", 1)[0]
os.makedirs(top)
name = top + "/" + "n" * (4095 - len(top) - 1)
assert len(name) == 4095
show("mkdir, 4095 bytes", lambda: os.mkdir(name))
show("rmdir, 4095 bytes", lambda: os.rmdir(name))
show("mkdir, 4096 bytes", lambda: os.mkdir(name + "x"))
show("open, 4096 bytes", lambda: os.open(name + "x", os.O_RDONLY | os.O_CREAT, 0o644))
show("stat, 4096 bytes", lambda: os.stat(name + "x"))
"#;
    let (n, s) = python(script);
    assert_eq!(tree(s.path()), tree(n.path()));
}

/// A last name `.` or `..`: `rmdir` is `EINVAL` or `ENOTEMPTY` and
/// `rename` `EBUSY`, after the directory they are in resolves (whose
/// error comes first); nothing is removed (pjdfstest's `rmdir/12.t`,
/// `rename/19.t`).
#[test]
fn dot_and_dot_dot_are_not_names_to_remove_or_rename() {
    let script = r#"
import os, sys, errno
root = sys.argv[1]
os.chdir(root)
def show(label, f):
    try: r = f(); print(label, "ok" if r is None else r)
    except OSError as e: print(label, errno.errorcode[e.errno])
os.makedirs("a/b")
open("a/f", "w").close()
show("rmdir a/b/.", lambda: os.rmdir("a/b/."))
show("rmdir a/b/..", lambda: os.rmdir("a/b/.."))
show("rmdir a/b/./", lambda: os.rmdir("a/b/./"))
show("rmdir .", lambda: os.rmdir("."))
show("rmdir missing/.", lambda: os.rmdir("missing/."))
show("rmdir a/f/.", lambda: os.rmdir("a/f/."))
show("rmdir, absolute", lambda: os.rmdir(os.path.join(root, "a/b/..")))
d = os.open("a", os.O_RDONLY | os.O_DIRECTORY)
show("unlinkat(AT_REMOVEDIR) b/.", lambda: os.rmdir("b/.", dir_fd=d))
show("rename a/b/. c", lambda: os.rename("a/b/.", "c"))
show("rename a/b/.. c", lambda: os.rename("a/b/..", "c"))
show("rename c a/b/..", lambda: os.rename("a/f", "a/b/.."))
show("rename missing/. c", lambda: os.rename("missing/.", "c"))
show("rename a/f missing/.", lambda: os.rename("a/f", "missing/."))
show("listdir a", lambda: sorted(os.listdir("a")))
show("rmdir a/b", lambda: os.rmdir("a/b"))
"#;
    let (n, s) = python(script);
    assert_eq!(tree(s.path()), tree(n.path()));
}

/// `fstat` of an open file after its last name is unlinked: no links
/// (the service takes back a token whose holder answers `fstat` from its
/// shared page; pjdfstest's `unlink/14.t`).
#[test]
fn fstat_after_unlink_counts_no_links() {
    let script = r#"
import os, sys
root = sys.argv[1]
p = os.path.join(root, "f")
with open(p, "w") as h: h.write("x" * 5000)
fd = os.open(p, os.O_RDONLY)
print("before", os.fstat(fd).st_nlink, os.read(fd, 3))
os.unlink(p)
print("after", os.fstat(fd).st_nlink, os.read(fd, 3), os.fstat(fd).st_size)
"#;
    python(script);
}
