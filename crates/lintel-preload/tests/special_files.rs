//! Locks, FIFOs and symlinks as Linux has them (issue 26, findings 3, 6
//! and 8): each test runs one script natively on a fresh directory and
//! under `lintel-run` on another, served, and compares what the two
//! printed (the directory's path renamed alike), then the trees they left.

mod common;
#[path = "common/served.rs"]
mod served;
use served::{python, same, tree};

use std::path::Path;
use std::process::Command;

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
# A record lock in another process does not meet the flock ... (the
# child drops its lock before it exits: served, a dead process's locks go
# when the service learns of its death, a moment after `waitpid`.)
child = r'''
import os, sys, fcntl, errno
fd = os.open(sys.argv[1], os.O_RDWR)
try: fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 10, 0); print("child lockf ex: ok")
except OSError as e: print("child lockf ex:", errno.errorcode[e.errno])
try: fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB); print("child flock sh: ok")
except OSError as e: print("child flock sh:", errno.errorcode[e.errno])
fcntl.lockf(fd, fcntl.LOCK_UN, 10, 0)
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

/// Finding 6: `mkfifo` makes a FIFO with the mode asked (less the
/// umask), `stat` shows it, and two processes pass bytes through it,
/// with non-blocking opens and blocking ones that wait for the other end.
/// `mknod` makes the other types it takes, and refuses the rest as Linux
/// does; a socket node does not open (`ENXIO`), a character device opens
/// as the device.
#[test]
fn fifos_and_nodes_are_made_and_opened_as_on_linux() {
    let script = r#"
import os, sys, stat, errno, select
root = sys.argv[1]
def show(label, f):
    try: r = f(); print(label, "ok" if r is None else r)
    except OSError as e: print(label, errno.errorcode[e.errno])
p = os.path.join(root, "fifo")
show("mkfifo", lambda: os.mkfifo(p, 0o640))
show("mkfifo again", lambda: os.mkfifo(p, 0o640))
show("stat", lambda: oct(os.stat(p).st_mode))
show("lstat", lambda: oct(os.lstat(p).st_mode))
show("writer, no reader", lambda: os.open(p, os.O_WRONLY | os.O_NONBLOCK))
r = os.open(p, os.O_RDONLY | os.O_NONBLOCK)
print("reader's fstat: a FIFO", stat.S_ISFIFO(os.fstat(r).st_mode))
pid = os.fork()
if pid == 0:
    w = os.open(p, os.O_WRONLY)
    os.write(w, b"through the fifo")
    os._exit(0)
os.waitpid(pid, 0)
select.select([r], [], [], 10)
print("read", os.read(r, 100))
os.close(r)
# Both ends opened blocking: each open waits for the other's.
pid = os.fork()
if pid == 0:
    w = os.open(p, os.O_WRONLY)
    os.write(w, b"after waiting")
    os.close(w)
    os._exit(0)
r = os.open(p, os.O_RDONLY)
print("read", os.read(r, 100))
os.close(r)
os.waitpid(pid, 0)
show("mknod fifo", lambda: os.mknod(os.path.join(root, "fifo2"), 0o600 | stat.S_IFIFO))
show("mknod regular", lambda: os.mknod(os.path.join(root, "reg"), 0o600 | stat.S_IFREG))
show("mknod type 0", lambda: os.mknod(os.path.join(root, "zero"), 0o600))
show("mknod socket", lambda: os.mknod(os.path.join(root, "sock"), 0o600 | stat.S_IFSOCK))
show("open socket", lambda: os.open(os.path.join(root, "sock"), os.O_RDONLY))
show("mknod char 1,3", lambda: os.mknod(os.path.join(root, "null"), 0o600 | stat.S_IFCHR, os.makedev(1, 3)))
show("mknod directory", lambda: os.mknod(os.path.join(root, "d"), 0o600 | stat.S_IFDIR))
show("mknod bad type", lambda: os.mknod(os.path.join(root, "bad"), 0o600 | 0o110000))
show("mknod existing", lambda: os.mknod(p, 0o600 | stat.S_IFIFO))
show("mknod in a missing dir", lambda: os.mknod(os.path.join(root, "no/f"), 0o600 | stat.S_IFIFO))
def null():
    fd = os.open(os.path.join(root, "null"), os.O_RDWR)
    return os.write(fd, b"x"), os.read(fd, 5), stat.S_ISCHR(os.fstat(fd).st_mode)
show("open the char device", null)
for n in ["fifo2", "reg", "zero", "sock", "null"]:
    show("lstat " + n, lambda: oct(os.lstat(os.path.join(root, n)).st_mode))
show("rdev", lambda: os.lstat(os.path.join(root, "null")).st_rdev == os.makedev(1, 3))
show("listdir", lambda: sorted(os.listdir(root)))
show("unlink fifo", lambda: os.unlink(p))
"#;
    let (n, s) = python(script);
    assert_eq!(tree(s.path()), tree(n.path()));
}

/// Finding 8: `open(O_PATH | O_NOFOLLOW)` of a symlink is a descriptor of
/// the link itself (`fstat` describes it), which glibc's
/// `fchmodat(AT_SYMLINK_NOFOLLOW)` relies on (then `EOPNOTSUPP` for a
/// link); an `O_PATH` descriptor reads and writes nothing (`EBADF`).
#[test]
fn o_path_opens_stand_for_the_file_or_the_link_itself() {
    let script = r#"
import os, sys, stat, errno, ctypes, mmap
root = sys.argv[1]
libc = ctypes.CDLL(None, use_errno=True)
def show(label, f):
    try: r = f(); print(label, "ok" if r is None else r)
    except OSError as e: print(label, errno.errorcode[e.errno])
def fchmodat_nofollow(path, mode):
    if libc.fchmodat(-100, path.encode(), mode, 0x100) != 0:
        e = ctypes.get_errno(); raise OSError(e, os.strerror(e))
f = os.path.join(root, "file")
with open(f, "w") as h: h.write("data")
link = os.path.join(root, "link")
os.symlink("file", link)
fd = os.open(link, os.O_PATH | os.O_NOFOLLOW)
show("fstat of the link's descriptor", lambda: oct(os.fstat(fd).st_mode))
show("its size", lambda: os.fstat(fd).st_size)
show("read", lambda: os.read(fd, 1))
show("write", lambda: os.write(fd, b"x"))
show("readlink of /proc/self/fd", lambda: os.readlink("/proc/self/fd/%d" % fd).replace(root, "ROOT"))
os.close(fd)
fd = os.open(link, os.O_PATH)
show("fstat, followed", lambda: oct(os.fstat(fd).st_mode))
show("read", lambda: os.read(fd, 1))
show("lseek", lambda: os.lseek(fd, 0, 0))
show("fchmod", lambda: os.fchmod(fd, 0o600))
show("mmap", lambda: mmap.mmap(fd, 4, prot=mmap.PROT_READ))
os.close(fd)
fd = os.open(f, os.O_RDONLY)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
def anonymous_over_a_served_descriptor():
    p = libc.mmap(None, 4096, 1, 0x22, fd, 0)  # PROT_READ, MAP_PRIVATE|MAP_ANONYMOUS
    return ctypes.string_at(p, 4)
show("an anonymous map ignores the descriptor", anonymous_over_a_served_descriptor)
os.close(fd)
show("O_RDONLY|O_NOFOLLOW of the link", lambda: os.open(link, os.O_RDONLY | os.O_NOFOLLOW))
show("fchmodat nofollow, link", lambda: fchmodat_nofollow(link, 0o700))
show("fchmodat nofollow, file", lambda: fchmodat_nofollow(f, 0o604))
show("mode", lambda: oct(os.lstat(f).st_mode))
show("lchown", lambda: os.chown(link, os.getuid(), os.getgid(), follow_symlinks=False))
show("utime nofollow", lambda: os.utime(link, (1, 2), follow_symlinks=False))
show("link's mtime", lambda: os.lstat(link).st_mtime)
d = os.open(root, os.O_PATH | os.O_DIRECTORY)
show("stat through an O_PATH directory", lambda: oct(os.stat("file", dir_fd=d).st_mode))
show("O_PATH|O_DIRECTORY of a file", lambda: os.open(f, os.O_PATH | os.O_DIRECTORY))
show("O_PATH of a missing file", lambda: os.open(os.path.join(root, "none"), os.O_PATH))
"#;
    let (n, s) = python(script);
    assert_eq!(tree(s.path()), tree(n.path()));
}

/// Finding 8 as it was met: `tar x` of an archive with symlinks into a
/// served directory (tar sets each link's mode with
/// `fchmodat(AT_SYMLINK_NOFOLLOW)`), then `tar c` of the result.
#[test]
fn tar_extracts_symlinks_into_a_served_directory() {
    let src = tempfile::tempdir().unwrap();
    let root = src.path();
    std::fs::create_dir_all(root.join("t/sub")).unwrap();
    std::fs::write(root.join("t/sub/file"), b"contents\n").unwrap();
    std::os::unix::fs::symlink("sub/file", root.join("t/rel")).unwrap();
    std::os::unix::fs::symlink("/nowhere/at/all", root.join("t/dangling")).unwrap();
    std::os::unix::fs::symlink("sub", root.join("t/dirlink")).unwrap();
    let archive = root.join("t.tar");
    let ok = Command::new("tar")
        .arg("-C")
        .arg(root)
        .arg("-cf")
        .arg(&archive)
        .arg("t")
        .status()
        .unwrap();
    assert!(ok.success());
    let archive = archive.to_str().unwrap();
    let (n, s) = same(&[
        "sh",
        "-c",
        &format!(
            "cd %R && tar -xpf {archive} && ls -l t | awk 'NR > 1 {{print $1, $(NF-2), $(NF-1), $NF}}' \
             && tar -cf - t | tar -tvf - | sed 's/ [0-9-]* [0-9:]* / /' | sort"
        ),
    ]);
    assert_eq!(tree(s.path()), tree(n.path()));
}

/// Unix-domain sockets bound to a served path: `bind` makes the socket
/// file (with the umask), a second `bind` of the name is `EADDRINUSE`,
/// another process connects by the name and the two pass bytes; a
/// connect to a name that is no socket, or to none, fails as on Linux.
#[test]
fn unix_sockets_bind_and_connect_at_served_paths() {
    let script = r#"
import os, sys, stat, errno, socket
root = sys.argv[1]
def show(label, f):
    try: r = f(); print(label, "ok" if r is None else r)
    except OSError as e: print(label, errno.errorcode[e.errno])
p = os.path.join(root, "sock")
os.mkdir(os.path.join(root, "d"))
old = os.umask(0o027)
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
show("bind", lambda: s.bind(p))
os.umask(old)
show("lstat", lambda: oct(os.lstat(p).st_mode))
show("bind again", lambda: socket.socket(socket.AF_UNIX).bind(p))
show("bind in a missing dir", lambda: socket.socket(socket.AF_UNIX).bind(os.path.join(root, "no/s")))
show("bind, relative", lambda: (os.chdir(os.path.join(root, "d")), socket.socket(socket.AF_UNIX).bind("rel"))[1])
show("its mode", lambda: oct(os.lstat(os.path.join(root, "d/rel")).st_mode & 0o170000))
s.listen(1)
pid = os.fork()
if pid == 0:
    c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    c.connect(p)
    c.sendall(b"over the socket")
    os._exit(0)
conn, _ = s.accept()
print("got", conn.recv(100))
os.waitpid(pid, 0)
show("connect to a file", lambda: (open(os.path.join(root, "f"), "w").close(), socket.socket(socket.AF_UNIX).connect(os.path.join(root, "f")))[1])
show("connect to nothing", lambda: socket.socket(socket.AF_UNIX).connect(os.path.join(root, "none")))
show("abstract", lambda: socket.socket(socket.AF_UNIX).bind("\0lintel-test-%d" % os.getpid()))
show("unlink", lambda: os.unlink(p))
show("listdir", lambda: sorted(os.listdir(root)))
"#;
    let (n, s) = python(script);
    assert_eq!(tree(s.path()), tree(n.path()));
}

/// `readv`, `writev`, `preadv` and `pwritev` of a file 10 bytes short of
/// the largest offset (tmpfs allows it) with buffers of 1 and 19 bytes:
/// Linux checks the whole length first and refuses them all (`EINVAL`),
/// writing nothing; served, each buffer was a call of its own, and the
/// first fit.
#[test]
fn vectored_calls_near_the_largest_offset_answer_as_linux() {
    let shm = Path::new("/dev/shm");
    if !shm.is_dir() {
        eprintln!("no /dev/shm (tmpfs): ext4 refuses such offsets at the seek");
        return;
    }
    let script = r#"
import os, sys
fd = os.open(os.path.join(sys.argv[1], "f"), os.O_RDWR | os.O_CREAT, 0o644)
at = (1 << 63) - 11
os.lseek(fd, at, os.SEEK_SET)
def show(what, f):
    try:
        print(what, f())
    except OSError as e:
        print(what, "errno", e.errno)
a, b = bytearray(1), bytearray(19)
show("readv", lambda: os.readv(fd, [a, b]))
show("writev", lambda: os.writev(fd, [a, b]))
show("preadv", lambda: os.preadv(fd, [a, b], at))
show("pwritev", lambda: os.pwritev(fd, [a, b], at))
show("offset", lambda: os.lseek(fd, 0, os.SEEK_CUR))
show("size", lambda: os.fstat(fd).st_size)
"#;
    let (n, s) = (
        tempfile::tempdir_in(shm).unwrap(),
        tempfile::tempdir_in(shm).unwrap(),
    );
    let py = n.path().join("script.py");
    std::fs::write(&py, script).unwrap();
    let (native, served) = served::both(
        n.path(),
        s.path(),
        &["/usr/bin/python3", py.to_str().unwrap(), "%R"],
    );
    assert!(native.contains("readv errno 22"), "{native}");
    assert_eq!(served, native, "served (left), native (right)");
}
