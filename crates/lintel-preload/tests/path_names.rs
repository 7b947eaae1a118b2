//! Paths and names at their edges, as pjdfstest found them served: each
//! test runs one script natively on a fresh directory and under
//! `lintel-run` on another, served, and compares what the two printed
//! (the directory's path renamed alike), then the trees they left.

mod common;
#[path = "common/served.rs"]
mod served;
use served::{python, tree};

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
