//! `lintel-syscall-probe ROOT [OUT] < SCRIPT`: make the system calls a script
//! names, one by one, with raw libc calls (the flags exactly as written),
//! and print one normalized line per call. The differential test
//! (`tests/syscalls_differential.rs`) runs it natively on one tree and
//! under `lintel-run` on an identical served tree, and compares the lines.
//!
//! A script is cases, each `case NAME`, its steps, `end`. A case runs in
//! `ROOT/NAME` (made first, then the working directory; the umask is
//! `022`), and ends with every slot closed, the working directory and
//! umask restored, and a listing of the case's tree. One step a line:
//! an operation and its arguments, separated by spaces. Descriptors are
//! named by slot (`0`..[`SLOTS`]); a directory argument is `-` for
//! `AT_FDCWD` or a slot. In a path, `@` stands for the case's directory
//! (`@/a`: absolute, through the root given), `~` alone for the empty
//! path. Numbers are decimal or `0x` hexadecimal.
//!
//! What is printed leaves out what may differ between two trees that
//! behave alike: descriptor numbers (`fd`), inode numbers, devices and
//! times; a stat is kind, mode & 07777, size and links; bytes read are a
//! length and a hash; a directory listing is sorted; the root is `ROOT`
//! in link targets and the working directory, OUT (a directory outside
//! the tree symlinks lead to) `OUT`. After each step, a digest
//! of the case's tree. `SEEK_DATA`/`SEEK_HOLE` on a regular file print
//! whether the answer keeps Linux's promises (an offset in `[at, size]`,
//! only zeros skipped; where a file keeps its holes is its file system's
//! choice) and leave the offset at `at`.
//!
//! `script PATH MODE` writes a small shell script there; `exec PATH`
//! forks, and the child `exec`s PATH (its output among ours).
//!
//! `fork N` forks; the child makes the next `N` steps on its copies of
//! the descriptors and exits, the parent waits for it. `forkexec N` does
//! the same through an `exec` of this program (`--child`), which takes
//! the slots' descriptors as they are after the `exec`.
#![allow(unsafe_code)]

use std::ffi::CString;
use std::io::{BufRead, Write};

/// What `script` writes: a shell script that tells what it sees of the
/// tree from where it runs.
const SCRIPT: &[u8] =
    b"#!/bin/sh\necho \"  script $# $1\"\nls -a 2>&1 | tr '\\n' ' '\necho\ncat a 2>/dev/null | wc -c\n";

/// Descriptor slots a script names.
const SLOTS: usize = 8;

/// Where `dup2`/`dup3` put a descriptor for an empty slot: numbers far
/// above what either run opens on its own.
const DUP_BASE: i32 = 200;

struct Probe {
    root: String,
    /// A directory outside the tree, renamed `OUT` where printed.
    out_dir: String,
    base: String,
    slots: [i32; SLOTS],
    out: std::io::BufWriter<std::io::Stdout>,
    /// `child` for a forked child's lines.
    tag: &'static str,
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

fn errno_name(e: i32) -> String {
    let name = match e {
        libc::EPERM => "EPERM",
        libc::ENOENT => "ENOENT",
        libc::EIO => "EIO",
        libc::EBADF => "EBADF",
        libc::EAGAIN => "EAGAIN",
        libc::EACCES => "EACCES",
        libc::EFAULT => "EFAULT",
        libc::EBUSY => "EBUSY",
        libc::EEXIST => "EEXIST",
        libc::EXDEV => "EXDEV",
        libc::ENOTDIR => "ENOTDIR",
        libc::EISDIR => "EISDIR",
        libc::EINVAL => "EINVAL",
        libc::EMFILE => "EMFILE",
        libc::ETXTBSY => "ETXTBSY",
        libc::EFBIG => "EFBIG",
        libc::ENOSPC => "ENOSPC",
        libc::ESPIPE => "ESPIPE",
        libc::EMLINK => "EMLINK",
        libc::ERANGE => "ERANGE",
        libc::ENAMETOOLONG => "ENAMETOOLONG",
        libc::ENOSYS => "ENOSYS",
        libc::ENOTEMPTY => "ENOTEMPTY",
        libc::ELOOP => "ELOOP",
        libc::ENODATA => "ENODATA",
        libc::EOPNOTSUPP => "EOPNOTSUPP",
        libc::ENXIO => "ENXIO",
        libc::ENODEV => "ENODEV",
        libc::ENOEXEC => "ENOEXEC",
        libc::ENOTTY => "ENOTTY",
        libc::EOVERFLOW => "EOVERFLOW",
        _ => return format!("E{e}"),
    };
    name.to_string()
}

/// FNV-1a.
fn hash(b: &[u8]) -> u64 {
    b.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &x| {
        (h ^ x as u64).wrapping_mul(0x100_0000_01b3)
    })
}

/// `len` bytes from `seed` (what a write writes).
fn bytes(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            // Some zeros, so SEEK_DATA has something to skip.
            if x.is_multiple_of(5) { 0 } else { x as u8 }
        })
        .collect()
}

fn num(s: &str) -> i64 {
    let (neg, s) = match s.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, s),
    };
    let v = match s.strip_prefix("0x") {
        Some(h) => i64::from_str_radix(h, 16),
        None => s.parse(),
    }
    .unwrap_or_else(|_| panic!("lintel-syscall-probe: not a number: {s}"));
    if neg { -v } else { v }
}

fn kind(mode: u32) -> &'static str {
    match mode & libc::S_IFMT {
        libc::S_IFREG => "file",
        libc::S_IFDIR => "dir",
        libc::S_IFLNK => "link",
        libc::S_IFIFO => "fifo",
        libc::S_IFSOCK => "sock",
        libc::S_IFCHR => "chr",
        libc::S_IFBLK => "blk",
        _ => "?",
    }
}

fn show_stat(st: &libc::stat) -> String {
    format!(
        "{} {:o} size {} nlink {}",
        kind(st.st_mode),
        st.st_mode & 0o7777,
        st.st_size,
        st.st_nlink
    )
}

impl Probe {
    fn say(&mut self, line: &str) {
        let _ = writeln!(self.out, "{}{line}", self.tag);
    }

    fn path(&self, p: &str) -> CString {
        let p = if p == "~" {
            String::new()
        } else {
            p.replace('@', &self.base)
        };
        CString::new(p).expect("no NUL in a path")
    }

    fn slot(&self, s: &str) -> usize {
        num(s) as usize % SLOTS
    }

    fn fd(&self, s: &str) -> i32 {
        self.slots[self.slot(s)]
    }

    fn dir(&self, s: &str) -> i32 {
        if s == "-" { libc::AT_FDCWD } else { self.fd(s) }
    }

    fn renamed(&self, s: &[u8]) -> String {
        let s = String::from_utf8_lossy(s).replace(&self.root, "ROOT");
        if self.out_dir.is_empty() {
            s
        } else {
            s.replace(&self.out_dir, "OUT")
        }
    }

    /// Put `fd` into slot `s`, closing what it held.
    fn keep(&mut self, s: usize, fd: i32) {
        let old = std::mem::replace(&mut self.slots[s], fd);
        if old >= 0 && old != fd && !self.slots.contains(&old) {
            // SAFETY: closing a descriptor this program opened and no
            // slot names any more.
            unsafe { libc::close(old) };
        }
    }

    fn result(&self, r: i64) -> String {
        if r < 0 {
            errno_name(errno())
        } else {
            format!("{r}")
        }
    }

    /// A call that returns a descriptor: kept in slot `s`.
    fn opened(&mut self, s: usize, fd: i32) -> String {
        if fd < 0 {
            return errno_name(errno());
        }
        self.keep(s, fd);
        "fd".into()
    }

    /// Make one step; its line.
    fn step(&mut self, w: &[&str]) -> String {
        let a = |i: usize| {
            *w.get(i)
                .unwrap_or_else(|| panic!("lintel-syscall-probe: {w:?}: too few arguments"))
        };
        let n = |i: usize| num(a(i));
        match w[0] {
            "rename" | "rmdir" | "unlink" if self.in_use(&w[1..]) => {
                // The emulation keeps a served directory descriptor and
                // working directory as its path: moved or removed, it
                // would name what is at the path now.
                "not made: it would move or remove a directory in use".into()
            }
            "symlink" if a(1).starts_with('@') && self.inside(a(2), a(3)) == Some(false) => {
                // The host's kernel follows a symlink outside the tree,
                // and the prefix is not on the host.
                "not made: a symlink outside the tree into it".into()
            }
            "symlink" if self.climbs_out(self.path(a(1)).as_bytes(), a(2), a(3)) => {
                "not made: a symlink climbing out of the tree past its root".into()
            }
            "rename" | "link"
                if (w[0] == "rename" || n(5) & 0x400 == 0)
                    && self
                        .link_target(a(1), a(2))
                        .is_some_and(|t| self.climbs_out(&t, a(3), a(4))) =>
            {
                // The same symlink, moved or linked to where it would.
                "not made: a symlink climbing out of the tree past its root".into()
            }
            "open" => {
                let (s, dir, p) = (self.slot(a(1)), self.dir(a(2)), self.path(a(3)));
                // SAFETY: a NUL-terminated path; flags and mode as given.
                let fd = unsafe { libc::openat(dir, p.as_ptr(), n(4) as i32, n(5) as libc::c_uint) };
                self.opened(s, fd)
            }
            "close" => {
                let s = self.slot(a(1));
                let fd = self.slots[s];
                // SAFETY: closing a descriptor (or -1: EBADF).
                let r = unsafe { libc::close(fd) };
                // Every slot that named it names nothing now.
                if r == 0 || errno() == libc::EBADF {
                    for x in self.slots.iter_mut().filter(|x| **x == fd) {
                        *x = -1;
                    }
                }
                self.result(r as i64)
            }
            "read" | "pread" => {
                let mut buf = vec![0u8; n(2) as usize];
                let fd = self.fd(a(1));
                let r = match w[0] {
                    // SAFETY: into a buffer of its length.
                    "read" => unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) },
                    // SAFETY: as above.
                    _ => unsafe { libc::pread(fd, buf.as_mut_ptr().cast(), buf.len(), n(3)) },
                };
                self.data(r, &buf)
            }
            "readv" => {
                let lens: Vec<usize> = a(2).split(',').map(|l| num(l) as usize).collect();
                let mut bufs: Vec<Vec<u8>> = lens.iter().map(|&l| vec![0u8; l]).collect();
                let iov: Vec<libc::iovec> = bufs
                    .iter_mut()
                    .map(|b| libc::iovec {
                        iov_base: b.as_mut_ptr().cast(),
                        iov_len: b.len(),
                    })
                    .collect();
                // SAFETY: each iovec names a live buffer of its length.
                let r = unsafe { libc::readv(self.fd(a(1)), iov.as_ptr(), iov.len() as i32) };
                self.data(r, &bufs.concat())
            }
            "write" | "pwrite" => {
                let fd = self.fd(a(1));
                let data = bytes(n(2) as usize, n(if w[0] == "write" { 3 } else { 4 }) as u64);
                let r = match w[0] {
                    // SAFETY: from a buffer of its length.
                    "write" => unsafe { libc::write(fd, data.as_ptr().cast(), data.len()) },
                    // SAFETY: as above.
                    _ => unsafe { libc::pwrite(fd, data.as_ptr().cast(), data.len(), n(3)) },
                };
                self.result(r as i64)
            }
            "writev" => {
                let lens: Vec<usize> = a(2).split(',').map(|l| num(l) as usize).collect();
                let bufs: Vec<Vec<u8>> = lens
                    .iter()
                    .enumerate()
                    .map(|(i, &l)| bytes(l, n(3) as u64 + i as u64))
                    .collect();
                let iov: Vec<libc::iovec> = bufs
                    .iter()
                    .map(|b| libc::iovec {
                        iov_base: b.as_ptr() as *mut libc::c_void,
                        iov_len: b.len(),
                    })
                    .collect();
                // SAFETY: each iovec names a live buffer of its length.
                let r = unsafe { libc::writev(self.fd(a(1)), iov.as_ptr(), iov.len() as i32) };
                self.result(r as i64)
            }
            "lseek" if self.is_dir(a(1)) && (n(2), n(3)) != (0, 0) => {
                // Where else a directory's offset goes (ext4's hash
                // cookies, its end) is its file system's business.
                "not made: a directory's offsets other than 0 are its file system's".into()
            }
            "lseek" => {
                let (fd, off, whence) = (self.fd(a(1)), n(2), n(3) as i32);
                if whence == libc::SEEK_DATA || whence == libc::SEEK_HOLE {
                    return self.seek_data_hole(fd, off, whence);
                }
                // SAFETY: no memory involved.
                let r = unsafe { libc::lseek(fd, off, whence) };
                self.result(r)
            }
            "ftruncate" => {
                // SAFETY: no memory involved.
                let r = unsafe { libc::ftruncate(self.fd(a(1)), n(2)) };
                self.result(r as i64)
            }
            "truncate" => {
                let p = self.path(a(1));
                // SAFETY: a NUL-terminated path.
                let r = unsafe { libc::truncate(p.as_ptr(), n(2)) };
                self.result(r as i64)
            }
            "fallocate" => {
                // SAFETY: no memory involved.
                let r = unsafe { libc::fallocate(self.fd(a(1)), n(2) as i32, n(3), n(4)) };
                self.result(r as i64)
            }
            "fstat" => {
                // SAFETY: an all-zero `stat` is a valid value.
                let mut st: libc::stat = unsafe { std::mem::zeroed() };
                // SAFETY: into a `stat` of ours.
                let r = unsafe { libc::fstat(self.fd(a(1)), &mut st) };
                self.stat_line(r, &st)
            }
            "stat" => {
                let (dir, p, flags) = (self.dir(a(1)), self.path(a(2)), n(3) as i32);
                // SAFETY: an all-zero `stat` is a valid value.
                let mut st: libc::stat = unsafe { std::mem::zeroed() };
                // SAFETY: a NUL-terminated path, into a `stat` of ours.
                let r = unsafe { libc::fstatat(dir, p.as_ptr(), &mut st, flags) };
                self.stat_line(r, &st)
            }
            "lstat" => {
                let p = self.path(a(1));
                // SAFETY: an all-zero `stat` is a valid value.
                let mut st: libc::stat = unsafe { std::mem::zeroed() };
                // SAFETY: a NUL-terminated path, into a `stat` of ours.
                let r = unsafe { libc::lstat(p.as_ptr(), &mut st) };
                self.stat_line(r, &st)
            }
            "statx" => {
                let (dir, p, flags) = (self.dir(a(1)), self.path(a(2)), n(3) as i32);
                // SAFETY: an all-zero `statx` is a valid value.
                let mut st: libc::statx = unsafe { std::mem::zeroed() };
                let mask = libc::STATX_BASIC_STATS;
                // SAFETY: a NUL-terminated path, into a `statx` of ours.
                let r = unsafe { libc::statx(dir, p.as_ptr(), flags, mask, &mut st) };
                if r < 0 {
                    return errno_name(errno());
                }
                format!(
                    "{} {:o} size {} nlink {}",
                    kind(st.stx_mode as u32),
                    st.stx_mode & 0o7777,
                    st.stx_size,
                    st.stx_nlink
                )
            }
            "fcntl" => self.fcntl(a(1), a(2), w.get(3).copied()),
            "dup" => {
                let s = self.slot(a(2));
                // SAFETY: no memory involved.
                let fd = unsafe { libc::dup(self.fd(a(1))) };
                self.opened(s, fd)
            }
            "dup2" | "dup3" => {
                let (old, s) = (self.fd(a(1)), self.slot(a(2)));
                let new = match self.slots[s] {
                    -1 => DUP_BASE + s as i32,
                    fd => fd,
                };
                let fd = match w[0] {
                    // SAFETY: no memory involved.
                    "dup2" => unsafe { libc::dup2(old, new) },
                    // SAFETY: no memory involved.
                    _ => unsafe { libc::dup3(old, new, n(3) as i32) },
                };
                if fd < 0 {
                    return errno_name(errno());
                }
                // `new` was closed by the call, if open: no slot names
                // what it was any more.
                for x in self.slots.iter_mut().filter(|x| **x == new) {
                    *x = -1;
                }
                self.slots[s] = fd;
                "fd".into()
            }
            "mkdir" => {
                let (dir, p) = (self.dir(a(1)), self.path(a(2)));
                // SAFETY: a NUL-terminated path.
                let r = unsafe { libc::mkdirat(dir, p.as_ptr(), n(3) as libc::mode_t) };
                self.result(r as i64)
            }
            // A regular file or a socket node: a FIFO would make a later
            // open of its name wait for a writer.
            "mknod" => {
                let (dir, p) = (self.dir(a(1)), self.path(a(2)));
                let kind = if a(4) == "sock" {
                    libc::S_IFSOCK
                } else {
                    libc::S_IFREG
                };
                let mode = kind | (n(3) as libc::mode_t & 0o7777);
                // SAFETY: a NUL-terminated path.
                let r = unsafe { libc::mknodat(dir, p.as_ptr(), mode, 0) };
                self.result(r as i64)
            }
            "rmdir" => {
                let p = self.path(a(1));
                // SAFETY: a NUL-terminated path.
                let r = unsafe { libc::rmdir(p.as_ptr()) };
                self.result(r as i64)
            }
            "unlink" => {
                let (dir, p) = (self.dir(a(1)), self.path(a(2)));
                // SAFETY: a NUL-terminated path.
                let r = unsafe { libc::unlinkat(dir, p.as_ptr(), n(3) as i32) };
                self.result(r as i64)
            }
            "rename" | "link"
                if self.through_absolute_link(a(1), a(2), w[0] == "link" && n(5) & 0x400 != 0)
                    || self.through_absolute_link(a(3), a(4), false) =>
            {
                // The emulation follows a symlink the service refuses
                // (an absolute target) for calls naming one path only:
                // these answer `EXDEV`.
                "not made: a name through a symlink with an absolute target".into()
            }
            "rename" | "link"
                if self.crosses(a(1), a(2), a(3), a(4))
                    || (w[0] == "link"
                        && n(5) & 0x400 != 0
                        && self.follows_across(a(1), a(2), a(3), a(4))) =>
            {
                // The host moves or links across it (one file system);
                // the service is a file system of its own (`EXDEV`).
                "not made: the names are on both sides of the tree's boundary".into()
            }
            "rename" => {
                let (d1, p1, d2, p2) = (self.dir(a(1)), self.path(a(2)), self.dir(a(3)), self.path(a(4)));
                // SAFETY: NUL-terminated paths.
                let r = unsafe { libc::renameat(d1, p1.as_ptr(), d2, p2.as_ptr()) };
                self.result(r as i64)
            }
            "link" => {
                let (d1, p1, d2, p2) = (self.dir(a(1)), self.path(a(2)), self.dir(a(3)), self.path(a(4)));
                // SAFETY: NUL-terminated paths.
                let r = unsafe { libc::linkat(d1, p1.as_ptr(), d2, p2.as_ptr(), n(5) as i32) };
                self.result(r as i64)
            }
            "symlink" => {
                let (t, dir, p) = (self.path(a(1)), self.dir(a(2)), self.path(a(3)));
                // SAFETY: NUL-terminated paths.
                let r = unsafe { libc::symlinkat(t.as_ptr(), dir, p.as_ptr()) };
                self.result(r as i64)
            }
            "readlink" => {
                let (dir, p) = (self.dir(a(1)), self.path(a(2)));
                let mut buf = vec![0u8; 4096];
                // SAFETY: a NUL-terminated path, into a buffer of its length.
                let r = unsafe { libc::readlinkat(dir, p.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
                if r < 0 {
                    return errno_name(errno());
                }
                format!("{r} {}", self.renamed(&buf[..r as usize]))
            }
            "getdents" => self.getdents(self.fd(a(1))),
            "chmod" => {
                let p = self.path(a(1));
                // SAFETY: a NUL-terminated path.
                let r = unsafe { libc::chmod(p.as_ptr(), n(2) as libc::mode_t) };
                self.result(r as i64)
            }
            "fchmod" => {
                // SAFETY: no memory involved.
                let r = unsafe { libc::fchmod(self.fd(a(1)), n(2) as libc::mode_t) };
                self.result(r as i64)
            }
            "fchmodat" => {
                let (dir, p) = (self.dir(a(1)), self.path(a(2)));
                // SAFETY: a NUL-terminated path (the kernel's call: glibc's
                // emulates AT_SYMLINK_NOFOLLOW through O_PATH).
                let r = unsafe { libc::syscall(libc::SYS_fchmodat, dir, p.as_ptr(), n(3) as libc::mode_t) };
                self.result(r)
            }
            "access" => {
                let (dir, p) = (self.dir(a(1)), self.path(a(2)));
                // SAFETY: a NUL-terminated path.
                let r =
                    unsafe { libc::syscall(libc::SYS_faccessat2, dir, p.as_ptr(), n(3) as i32, n(4) as i32) };
                self.result(r)
            }
            "umask" => {
                // SAFETY: no memory involved.
                let old = unsafe { libc::umask(n(1) as libc::mode_t) };
                format!("{old:o}")
            }
            "chdir" => {
                let p = self.path(a(1));
                // SAFETY: a NUL-terminated path.
                let r = unsafe { libc::chdir(p.as_ptr()) };
                self.result(r as i64)
            }
            "fchdir" => {
                // SAFETY: no memory involved.
                let r = unsafe { libc::fchdir(self.fd(a(1))) };
                self.result(r as i64)
            }
            "getcwd" => {
                let mut buf = vec![0u8; 4096];
                // SAFETY: into a buffer of its length.
                let r = unsafe { libc::getcwd(buf.as_mut_ptr().cast(), buf.len()) };
                if r.is_null() {
                    return errno_name(errno());
                }
                let n = buf.iter().position(|&b| b == 0).unwrap_or(0);
                self.renamed(&buf[..n])
            }
            "script" => {
                // A shell script (a fixed one) at the path, with the mode.
                let p = self.path(a(1));
                let flags = libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC | libc::O_CLOEXEC;
                // SAFETY: a NUL-terminated path.
                let fd = unsafe { libc::open(p.as_ptr(), flags, n(2) as libc::c_uint) };
                if fd < 0 {
                    return errno_name(errno());
                }
                // SAFETY: from a buffer of its length; then ours to close.
                let r = unsafe {
                    let r = libc::write(fd, SCRIPT.as_ptr().cast(), SCRIPT.len());
                    libc::close(fd);
                    r
                };
                self.result(r as i64)
            }
            "exec" if self.open_for_writing(a(1)) => {
                // Linux refuses to run a file open for writing
                // (`ETXTBSY`); a served exec does not see the writers.
                "not made: the file is open for writing".into()
            }
            "exec" => self.exec(a(1)),
            "tree" => self.tree_digest(true),
            other => panic!("lintel-syscall-probe: unknown step {other}"),
        }
    }

    /// Whether the directory holding `path`'s last name (from `dir`) is
    /// in the tree: `None` if it cannot be found.
    fn inside(&self, dir: &str, path: &str) -> Option<bool> {
        Some(self.below_root(&self.parent_path(dir, path)?).is_some())
    }

    /// What of `path` (as `/proc` names it) lies below the tree's root, if
    /// it is in the tree.
    fn below_root<'p>(&self, path: &'p [u8]) -> Option<&'p [u8]> {
        let rest = path.strip_prefix(self.root.as_bytes())?;
        (rest.is_empty() || rest[0] == b'/').then_some(rest)
    }

    /// Whether a symlink to `target` at `path` (from `dir`) would climb
    /// out of the tree past its root: natively into the host directory
    /// holding the tree, served into the prefix's parent, which are not
    /// the same place (the probe keeps to the tree and `%`).
    fn climbs_out(&self, target: &[u8], dir: &str, path: &str) -> bool {
        if target.first() == Some(&b'/') {
            return false;
        }
        let Some(parent) = self.parent_path(dir, path) else {
            return false;
        };
        let Some(below) = self.below_root(&parent) else {
            return false;
        };
        let mut depth = below.split(|&b| b == b'/').filter(|c| !c.is_empty()).count();
        for c in target.split(|&b| b == b'/') {
            match c {
                b"" | b"." => {}
                b".." if depth == 0 => return true,
                b".." => depth -= 1,
                _ => depth += 1,
            }
        }
        false
    }

    /// The target of the symlink `path` names (from `dir`, its last name
    /// not followed), if it is one.
    fn link_target(&self, dir: &str, path: &str) -> Option<Vec<u8>> {
        let p = self.path(path);
        let mut buf = [0u8; 4096];
        // SAFETY: a NUL-terminated path and a buffer of its length.
        let n = unsafe { libc::readlinkat(self.dir(dir), p.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
        (n >= 0).then(|| buf[..n as usize].to_vec())
    }

    /// The path of the directory holding `path`'s last name (from `dir`),
    /// as `/proc` names it: `None` if it cannot be found.
    fn parent_path(&self, dir: &str, path: &str) -> Option<Vec<u8>> {
        let p = self.path(path);
        let p = p.as_bytes();
        let trimmed = p.len() - p.iter().rev().take_while(|&&b| b == b'/').count();
        let parent = match p[..trimmed].iter().rposition(|&b| b == b'/') {
            Some(0) => b"/".to_vec(),
            Some(i) => p[..i].to_vec(),
            None => b".".to_vec(),
        };
        let parent = CString::new(parent).expect("no NUL");
        // SAFETY: a NUL-terminated path.
        let fd = unsafe {
            libc::openat(
                self.dir(dir),
                parent.as_ptr(),
                libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
            )
        };
        if fd < 0 {
            return None;
        }
        let link = std::fs::read_link(format!("/proc/self/fd/{fd}"));
        // SAFETY: ours.
        unsafe { libc::close(fd) };
        Some(link.ok()?.into_os_string().into_encoded_bytes())
    }

    /// The path of what (`dir`, `path`) names, if a directory (not
    /// following a last symlink).
    fn dir_path(&self, dir: &str, path: &str) -> Option<Vec<u8>> {
        // `.` and `..` last are refused anyway.
        let name = path.trim_end_matches('/').rsplit('/').next().unwrap_or("");
        if name == "." || name == ".." {
            return None;
        }
        let p = self.path(path);
        let flags = libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC;
        // SAFETY: a NUL-terminated path.
        let fd = unsafe { libc::openat(self.dir(dir), p.as_ptr(), flags) };
        if fd < 0 {
            return None;
        }
        let link = std::fs::read_link(format!("/proc/self/fd/{fd}"));
        // SAFETY: ours.
        unsafe { libc::close(fd) };
        Some(link.ok()?.into_os_string().into_encoded_bytes())
    }

    /// Whether a `rename`, `rmdir` or `unlink` (its arguments) would move
    /// or remove a directory a slot or the working directory is in.
    fn in_use(&self, args: &[&str]) -> bool {
        let named: Vec<Vec<u8>> = match args {
            [p, ..] if !p.starts_with(|c: char| c == '-' || c.is_ascii_digit()) => {
                self.dir_path("-", p).into_iter().collect()
            }
            [d1, p1, d2, p2, ..] if args.len() == 4 => [self.dir_path(d1, p1), self.dir_path(d2, p2)]
                .into_iter()
                .flatten()
                .collect(),
            [d, p, ..] => self.dir_path(d, p).into_iter().collect(),
            _ => Vec::new(),
        };
        let mut used: Vec<Vec<u8>> = self
            .slots
            .iter()
            .filter(|&&fd| fd >= 0)
            .filter_map(|fd| std::fs::read_link(format!("/proc/self/fd/{fd}")).ok())
            .map(|l| l.into_os_string().into_encoded_bytes())
            .collect();
        used.extend(
            std::env::current_dir()
                .ok()
                .map(|c| c.into_os_string().into_encoded_bytes()),
        );
        named.iter().any(|n| {
            used.iter()
                .any(|u| u.starts_with(n) && matches!(u.get(n.len()), None | Some(b'/')))
        })
    }

    /// Whether a directory on the way to (`dir`, `path`)'s last name is
    /// a symlink with an absolute target (or the last name, if `last`).
    fn through_absolute_link(&self, dir: &str, path: &str, last: bool) -> bool {
        let p = self.path(path);
        let p = p.as_bytes();
        let trimmed = p.len() - p.iter().rev().take_while(|&&b| b == b'/').count();
        let p = &p[..trimmed];
        let last = last.then_some(p.len());
        (1..p.len()).filter(|&i| p[i] == b'/').chain(last).any(|i| {
            let prefix = CString::new(&p[..i]).expect("no NUL");
            let mut buf = [0u8; 8];
            // SAFETY: a NUL-terminated path, into a buffer of its length.
            let n = unsafe {
                libc::readlinkat(self.dir(dir), prefix.as_ptr(), buf.as_mut_ptr().cast(), buf.len())
            };
            n > 0 && buf[0] == b'/'
        })
    }

    /// Whether a `linkat(AT_SYMLINK_FOLLOW)` of these names crosses the
    /// tree's boundary: the old name, followed to the end, is on the
    /// other side of it from the new name's directory.
    fn follows_across(&self, d1: &str, p1: &str, d2: &str, p2: &str) -> bool {
        let p = self.path(p1);
        // SAFETY: a NUL-terminated path.
        let fd = unsafe { libc::openat(self.dir(d1), p.as_ptr(), libc::O_PATH | libc::O_CLOEXEC) };
        if fd < 0 {
            return false;
        }
        let link = std::fs::read_link(format!("/proc/self/fd/{fd}"));
        // SAFETY: ours.
        unsafe { libc::close(fd) };
        let Ok(link) = link else { return false };
        let (link, root) = (link.as_os_str().as_encoded_bytes(), self.root.as_bytes());
        let old_inside = link.starts_with(root) && matches!(link.get(root.len()), None | Some(b'/'));
        matches!(self.inside(d2, p2), Some(new_inside) if new_inside != old_inside)
    }

    /// Whether a `rename` or `link` of these names crosses the tree's
    /// boundary.
    fn crosses(&self, d1: &str, p1: &str, d2: &str, p2: &str) -> bool {
        matches!((self.inside(d1, p1), self.inside(d2, p2)), (Some(a), Some(b)) if a != b)
    }

    fn data(&self, r: isize, buf: &[u8]) -> String {
        if r < 0 {
            // A directory read at or near ext4's end offset is `EINVAL`
            // where offset + count overflows (checked before `EISDIR`): the
            // served answer must be the same, as the service's directory
            // is at the same offset.
            return errno_name(errno());
        }
        format!("{r} #{:016x}", hash(&buf[..r as usize]))
    }

    fn stat_line(&self, r: i32, st: &libc::stat) -> String {
        if r < 0 { errno_name(errno()) } else { show_stat(st) }
    }

    fn fcntl(&mut self, slot: &str, cmd: &str, arg: Option<&str>) -> String {
        let fd = self.fd(slot);
        let arg = arg.map(num).unwrap_or(0);
        let cmd = match cmd {
            "getfl" => libc::F_GETFL,
            "setfl" => libc::F_SETFL,
            "getfd" => libc::F_GETFD,
            "setfd" => libc::F_SETFD,
            "dupfd" | "dupfd_cloexec" => {
                let c = if cmd == "dupfd" {
                    libc::F_DUPFD
                } else {
                    libc::F_DUPFD_CLOEXEC
                };
                // `arg`: the slot for the new descriptor.
                // SAFETY: no memory involved.
                let new = unsafe { libc::fcntl(fd, c, DUP_BASE + 20) };
                return self.opened(arg as usize % SLOTS, new);
            }
            other => panic!("lintel-syscall-probe: unknown fcntl {other}"),
        };
        // SAFETY: commands that take an integer.
        let r = unsafe { libc::fcntl(fd, cmd, arg as libc::c_int) };
        if r < 0 {
            return errno_name(errno());
        }
        format!("{r:#x}")
    }

    /// `SEEK_DATA`/`SEEK_HOLE` from `at`: the kernel's (or the service's)
    /// answer checked against Linux's promises, then the offset at `at`.
    fn seek_data_hole(&mut self, fd: i32, at: i64, whence: i32) -> String {
        // SAFETY: an all-zero `stat` is a valid value.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: into a `stat` of ours.
        let regular = unsafe { libc::fstat(fd, &mut st) } == 0 && st.st_mode & libc::S_IFMT == libc::S_IFREG;
        // SAFETY: no memory involved.
        let r = unsafe { libc::lseek(fd, at, whence) };
        if !regular || at < 0 || at >= st.st_size {
            return self.result(r);
        }
        let size = st.st_size;
        let e = errno();
        // The bytes, through a reading open of the same file (this one
        // may be write-only).
        let path = CString::new(format!("/proc/self/fd/{fd}")).expect("no NUL");
        // SAFETY: a NUL-terminated path.
        let rd = unsafe { libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
        if rd < 0 {
            return format!("reopening to check: {}", errno_name(errno()));
        }
        let mut buf = vec![0u8; size as usize];
        // SAFETY: into a buffer of its length.
        let k = unsafe { libc::pread(rd, buf.as_mut_ptr().cast(), buf.len(), 0) };
        // SAFETY: ours.
        unsafe { libc::close(rd) };
        if k != size as isize {
            return format!("reading to check: {k}");
        }
        let zeros = |lo: i64, hi: i64| buf[lo as usize..hi as usize].iter().all(|&b| b == 0);
        let verdict = match (whence, r) {
            (libc::SEEK_DATA, -1) if e == libc::ENXIO && zeros(at, size) => "ok".to_string(),
            (_, -1) => errno_name(e),
            (_, r) if r < at || r > size => format!("{r} outside [{at}, {size}]"),
            (libc::SEEK_DATA, r) if !zeros(at, r) => format!("{r} skips data"),
            (libc::SEEK_HOLE, r) if r < size && !zeros(r, r + 1) => format!("{r} is data"),
            _ => "ok".to_string(),
        };
        // SAFETY: no memory involved.
        unsafe { libc::lseek(fd, at, libc::SEEK_SET) };
        format!("{verdict} (within Linux's promises)")
    }

    fn getdents(&self, fd: i32) -> String {
        let mut names = Vec::new();
        let mut buf = vec![0u8; 4096];
        loop {
            // SAFETY: into a buffer of its length.
            let r = unsafe { libc::syscall(libc::SYS_getdents64, fd, buf.as_mut_ptr(), buf.len()) };
            if r < 0 {
                return errno_name(errno());
            }
            if r == 0 {
                break;
            }
            let mut at = 0usize;
            while at < r as usize {
                let reclen = u16::from_ne_bytes([buf[at + 16], buf[at + 17]]) as usize;
                let t = buf[at + 18];
                let name = &buf[at + 19..at + reclen];
                let name = &name[..name.iter().position(|&b| b == 0).unwrap_or(name.len())];
                names.push(format!("{}:{t}", String::from_utf8_lossy(name)));
                at += reclen;
            }
        }
        names.sort();
        names.join(" ")
    }

    /// The case's tree, sorted: names, kinds, modes, sizes, links,
    /// contents (hashed) and link targets. Whole (`full`) or as a digest.
    fn tree_digest(&self, full: bool) -> String {
        let mut lines = Vec::new();
        let mut todo = vec![String::new()];
        while let Some(rel) = todo.pop() {
            let dir = format!("{}/{rel}", self.base);
            let Ok(rd) = std::fs::read_dir(&dir) else {
                lines.push(format!("{rel}: unreadable"));
                continue;
            };
            for e in rd.flatten() {
                let name = format!("{rel}{}", e.file_name().to_string_lossy());
                let p = e.path();
                let Ok(m) = std::fs::symlink_metadata(&p) else {
                    lines.push(format!("{name}: gone"));
                    continue;
                };
                use std::os::unix::fs::MetadataExt;
                let what = match m.mode() & libc::S_IFMT {
                    libc::S_IFREG => {
                        let body = std::fs::read(&p).map(|b| format!("#{:016x}", hash(&b)));
                        body.unwrap_or_else(|e| format!("{e}"))
                    }
                    libc::S_IFLNK => {
                        let t =
                            std::fs::read_link(&p).map(|t| self.renamed(t.as_os_str().as_encoded_bytes()));
                        t.unwrap_or_else(|e| format!("{e}"))
                    }
                    libc::S_IFDIR => {
                        todo.push(format!("{name}/"));
                        String::new()
                    }
                    _ => String::new(),
                };
                lines.push(format!(
                    "{name} {} {:o} {} {} {what}",
                    kind(m.mode()),
                    m.mode() & 0o7777,
                    // A directory's size is its file system's business.
                    if m.is_dir() { 0 } else { m.size() },
                    m.nlink()
                ));
            }
        }
        lines.sort();
        let all = lines.join("\n");
        if full {
            all
        } else {
            format!("tree #{:016x}", hash(all.as_bytes()))
        }
    }

    /// Run `steps`; a forked child's lines are printed as it makes them.
    fn run(&mut self, steps: &[String]) {
        let mut i = 0;
        while i < steps.len() {
            let w: Vec<&str> = steps[i].split_whitespace().collect();
            i += 1;
            if w.is_empty() {
                continue;
            }
            if w[0] == "fork" || w[0] == "forkexec" {
                let k = (num(w[1]) as usize).min(steps.len() - i);
                let line = self.fork(&steps[i..i + k], w[0] == "forkexec");
                i += k;
                self.say(&format!("{}: {line}", steps[i - k - 1]));
                continue;
            }
            let line = self.step(&w);
            let digest = self.tree_digest(false);
            self.say(&format!("{}: {line} | {digest}", steps[i - 1]));
        }
    }

    fn fork(&mut self, steps: &[String], exec: bool) -> String {
        let _ = self.out.flush();
        let exe = std::env::current_exe().expect("this program's path");
        let exe = CString::new(exe.as_os_str().as_encoded_bytes()).expect("no NUL");
        let slots: Vec<String> = self.slots.iter().map(|s| s.to_string()).collect();
        let args = [
            "lintel-syscall-probe".to_string(),
            "--child".into(),
            self.root.clone(),
            self.out_dir.clone(),
            self.base.clone(),
            slots.join(","),
            steps.join(";"),
        ];
        let args: Vec<CString> = args
            .into_iter()
            .map(|a| CString::new(a).expect("no NUL"))
            .collect();
        let mut argv: Vec<*const libc::c_char> = args.iter().map(|a| a.as_ptr()).collect();
        argv.push(std::ptr::null());
        // SAFETY: fork; the child runs single-threaded code of ours and
        // exits without returning.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            return errno_name(errno());
        }
        if pid == 0 {
            if exec {
                // SAFETY: a NUL-terminated path and argument vector.
                unsafe { libc::execv(exe.as_ptr(), argv.as_ptr()) };
                self.say(&format!("execv: {}", errno_name(errno())));
            } else {
                self.tag = "  child ";
                self.run(steps);
            }
            let _ = self.out.flush();
            // SAFETY: leaving the child without running the parent's
            // destructors.
            unsafe { libc::_exit(0) };
        }
        let mut status = 0;
        // SAFETY: into an int of ours.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        format!("child status {status:#x}")
    }

    /// Whether slot `s` holds a directory.
    fn is_dir(&self, s: &str) -> bool {
        // SAFETY: an all-zero `stat` is a valid value.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: into a `stat` of ours.
        unsafe { libc::fstat(self.fd(s), &mut st) == 0 && st.st_mode & libc::S_IFMT == libc::S_IFDIR }
    }

    /// Whether a slot holds the file `path` names open for writing.
    fn open_for_writing(&self, path: &str) -> bool {
        let p = self.path(path);
        // SAFETY: an all-zero `stat` is a valid value.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: a NUL-terminated path, into a `stat` of ours.
        if unsafe { libc::stat(p.as_ptr(), &mut st) } != 0 {
            return false;
        }
        self.slots.iter().filter(|&&fd| fd >= 0).any(|&fd| {
            // SAFETY: as above.
            let mut o: libc::stat = unsafe { std::mem::zeroed() };
            // SAFETY: into a `stat` of ours; then no memory involved.
            let (same, fl) = unsafe {
                (
                    libc::fstat(fd, &mut o) == 0 && o.st_ino == st.st_ino && o.st_dev == st.st_dev,
                    libc::fcntl(fd, libc::F_GETFL),
                )
            };
            same && fl >= 0 && fl & libc::O_ACCMODE != libc::O_RDONLY && fl & libc::O_PATH == 0
        })
    }

    /// Fork; the child `exec`s `path` (its output goes where ours does);
    /// the parent waits.
    fn exec(&mut self, path: &str) -> String {
        let _ = self.out.flush();
        let p = self.path(path);
        let arg = CString::new("x").expect("no NUL");
        let argv = [p.as_ptr(), arg.as_ptr(), std::ptr::null()];
        // SAFETY: fork; the child only `exec`s or reports and exits.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            return errno_name(errno());
        }
        if pid == 0 {
            // SAFETY: a NUL-terminated path and argument vector; the
            // environment as it is.
            unsafe { libc::execv(p.as_ptr(), argv.as_ptr()) };
            let e = errno_name(errno());
            let _ = writeln!(self.out, "{}  exec: {e}", self.tag);
            let _ = self.out.flush();
            // SAFETY: leaving the child without the parent's destructors.
            unsafe { libc::_exit(127) };
        }
        let mut status = 0;
        // SAFETY: into an int of ours.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        format!("status {status:#x}")
    }

    /// Close every slot's descriptor.
    fn close_all(&mut self) {
        for s in 0..SLOTS {
            let fd = std::mem::replace(&mut self.slots[s], -1);
            if fd >= 0 && !self.slots.contains(&fd) {
                // SAFETY: ours.
                unsafe { libc::close(fd) };
            }
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let out = std::io::BufWriter::new(std::io::stdout());
    if args.get(1).map(String::as_str) == Some("--child") {
        // An `exec`ed child: --child ROOT OUT BASE SLOTS STEPS.
        let mut slots = [-1; SLOTS];
        for (s, fd) in slots.iter_mut().zip(args[5].split(',')) {
            *s = fd.parse().unwrap_or(-1);
        }
        let mut p = Probe {
            root: args[2].clone(),
            out_dir: args[3].clone(),
            base: args[4].clone(),
            slots,
            out,
            tag: "  child ",
        };
        let steps: Vec<String> = args[6].split(';').map(str::to_string).collect();
        p.run(&steps);
        let _ = p.out.flush();
        return;
    }
    let Some(root) = args.get(1) else {
        eprintln!("usage: lintel-syscall-probe ROOT [OUT] < SCRIPT");
        std::process::exit(2);
    };
    let root_c = CString::new(root.as_str()).expect("no NUL");
    let mut p = Probe {
        root: root.clone(),
        out_dir: args.get(2).cloned().unwrap_or_default(),
        base: root.clone(),
        slots: [-1; SLOTS],
        out,
        tag: "",
    };
    let mut steps = Vec::new();
    for line in std::io::stdin().lock().lines() {
        let line = line.expect("a script on stdin");
        let line = line.trim();
        if let Some(name) = line.strip_prefix("case ") {
            p.base = format!("{root}/{name}");
            steps.clear();
            continue;
        }
        if line != "end" {
            steps.push(line.to_string());
            continue;
        }
        let base = CString::new(p.base.as_str()).expect("no NUL");
        // SAFETY: NUL-terminated paths.
        let made = unsafe { libc::mkdir(base.as_ptr(), 0o755) == 0 && libc::chdir(base.as_ptr()) == 0 };
        let name = p.base[root.len() + 1..].to_string();
        p.say(&format!("case {name}"));
        if !made {
            p.say(&format!("cannot enter: {}", errno_name(errno())));
        } else {
            // SAFETY: no memory involved.
            unsafe { libc::umask(0o022) };
            p.run(&steps);
            p.close_all();
            // SAFETY: no memory involved; a NUL-terminated path.
            unsafe {
                libc::umask(0o022);
                libc::chdir(root_c.as_ptr());
            }
            let tree = p.tree_digest(true);
            p.say(&tree);
        }
        p.say("end");
        let _ = p.out.flush();
    }
}
