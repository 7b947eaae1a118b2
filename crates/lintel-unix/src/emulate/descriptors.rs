//! The descriptors the emulation serves: what each stands for
//! ([`Served`], one per open description, shared by `dup`s), the table of
//! them ([`FdTable`](crate::fdtable::FdTable)), the placeholder memfd that holds each number, and
//! the calls on the descriptor itself: `close`, `dup`, `fcntl`.
//!
//! `/proc/self/fd/N` and `/dev/fd/N` of a served `N` name the served file
//! (glibc's `fchmodat` and `realpath` go that way; see `resolve`).

use std::sync::Arc;

use lintel_fs::File;

use super::{Emulation, R, err, fs_err};
use crate::trap;

/// One open description the emulation serves (shared by `dup`s).
pub struct Served {
    pub(super) file: File,
    /// Its path relative to the export's root (for `openat` relative to it).
    pub(super) path: Vec<u8>,
    pub(super) dir: bool,
    /// The `open` flags (`F_GETFL`), but for those `F_SETFL` changes.
    pub(super) flags: i32,
    /// The status flags `F_SETFL` changes ([`SETFL_FLAGS`]), as this
    /// process last set or learned them (`O_APPEND` is the service's).
    pub(super) status: std::sync::atomic::AtomicI32,
    /// Whether its placeholder names it by key yet (for a child or an
    /// `exec`ed image, see [`Emulation::adopt_inherited`]).
    pub(super) recorded: std::sync::atomic::AtomicBool,
    /// The host file's descriptor for shared mappings, once asked for
    /// (`None`: the service refused one).
    pub(super) map_fd: std::sync::OnceLock<Option<std::os::fd::OwnedFd>>,
}

impl Served {
    pub(super) fn new(file: File, path: Vec<u8>, dir: bool, flags: i32, recorded: bool) -> Arc<Served> {
        Arc::new(Served {
            file,
            path,
            dir,
            flags: flags & !SETFL_FLAGS,
            status: std::sync::atomic::AtomicI32::new(flags & SETFL_FLAGS),
            recorded: std::sync::atomic::AtomicBool::new(recorded),
            map_fd: std::sync::OnceLock::new(),
        })
    }

    /// The open flags with the status flags as last known here.
    pub(super) fn all_flags(&self) -> i32 {
        self.flags | self.status.load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// The status flags `fcntl(F_SETFL)` changes on a served file: `O_APPEND`
/// (the service's, shared by every holder of the open file), and
/// `O_NONBLOCK` and `O_ASYNC`, which a regular file or directory ignores
/// (kept for `F_GETFL`). `O_DIRECT` and `O_NOATIME` are refused.
const SETFL_FLAGS: i32 = libc::O_APPEND | libc::O_NONBLOCK | libc::O_ASYNC;

impl Emulation {
    /// Serve `fd` as `served` (what it stood for, if anything, is let go).
    pub(super) fn serve(&self, fd: i32, served: Arc<Served>) {
        let hint = served.file.cache_hint();
        self.fds.insert(fd, served, hint);
    }

    /// Warm the bytes a positional read of `fd` at `at` will copy, before
    /// looking the descriptor up (see [`FdTable`](crate::fdtable::FdTable)).
    #[inline]
    pub fn prefetch(&self, fd: i32, at: u64) {
        let hint = self.fds.hint(fd);
        if hint != 0 {
            lintel_fs::prefetch(hint.wrapping_add(at));
        }
    }

    pub(super) fn served(&self, fd: u64) -> Option<Arc<Served>> {
        self.fds.get(fd as i32)
    }

    /// Whether `fd` is a descriptor the emulation serves.
    pub fn serves(&self, fd: i32) -> bool {
        self.fds.contains(fd)
    }

    /// A new descriptor number for `served`: a private memfd holds it.
    pub(super) fn install(&self, served: Arc<Served>, cloexec: bool) -> i64 {
        let fd = placeholder(cloexec);
        if fd >= 0 {
            self.serve(fd as i32, served);
        }
        fd
    }

    pub(super) fn close(&self, fd: u64) -> R {
        let served = self.fds.remove(fd as i32)?;
        trap::raw_syscall(libc::SYS_close, [fd, 0, 0, 0, 0, 0]);
        drop(served); // the last dup closes the file
        Some(0)
    }

    pub(super) fn dup_to(&self, old: u64, new: Option<u64>, flags: u64) -> R {
        let served = self.served(old);
        let Some(served) = served else {
            // Not ours; if the target is, it is closed by the call (when
            // the call succeeds: a bad `old` leaves it open).
            let n = new.filter(|&n| self.fds.contains(n as i32))?;
            // (`old` is not `n`, which is served: `dup3` is `dup2` here.)
            let r = trap::raw_syscall(libc::SYS_dup3, [old, n, flags, 0, 0, 0]);
            if r >= 0 {
                self.fds.remove(n as i32);
            }
            return Some(r);
        };
        let fd = match new {
            None => trap::raw_syscall(libc::SYS_dup, [old, 0, 0, 0, 0, 0]),
            Some(n) if n == old => return Some(n as i64),
            Some(n) => trap::raw_syscall(libc::SYS_dup3, [old, n, flags, 0, 0, 0]),
        };
        if fd >= 0 {
            self.serve(fd as i32, served);
        }
        Some(fd)
    }

    /// `dup3`: onto itself it is `EINVAL` (`dup2`'s no-op is not its).
    pub(super) fn dup3(&self, old: u64, new: u64, flags: u64) -> R {
        if old == new {
            return self.served(old).map(|_| err(libc::EINVAL));
        }
        self.dup_to(old, Some(new), flags)
    }

    pub(super) fn fcntl(&self, fd: u64, cmd: u64, arg: u64) -> R {
        let s = self.served(fd)?;
        Some(match cmd as i32 {
            libc::F_GETFL => {
                // Another holder of the open file may have changed
                // `O_APPEND`: the service knows.
                let append = match s.file.appends() {
                    Ok(on) => on,
                    Err(e) => return Some(fs_err(e)),
                };
                let known = s.all_flags() & !libc::O_APPEND;
                // The kernel opens every file with `O_LARGEFILE` on a 64-bit
                // machine, but an `O_PATH` one.
                let flags = match known & libc::O_PATH {
                    0 => known | O_LARGEFILE | if append { libc::O_APPEND } else { 0 },
                    _ => known & (libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW),
                };
                (flags & !(libc::O_CLOEXEC | libc::O_CREAT | libc::O_EXCL | libc::O_TRUNC)) as i64
            }
            libc::F_SETFL => {
                let arg = arg as i32;
                let unserved = libc::O_DIRECT | libc::O_NOATIME;
                if (arg ^ s.all_flags()) & unserved != 0 {
                    return Some(err(libc::EINVAL));
                }
                if let Err(e) = s.file.set_append(arg & libc::O_APPEND != 0) {
                    return Some(fs_err(e));
                }
                s.status
                    .store(arg & SETFL_FLAGS, std::sync::atomic::Ordering::Relaxed);
                0
            }
            libc::F_DUPFD | libc::F_DUPFD_CLOEXEC => {
                let fd2 = trap::raw_syscall(libc::SYS_fcntl, [fd, cmd, arg, 0, 0, 0]);
                if fd2 >= 0 {
                    self.serve(fd2 as i32, s);
                }
                fd2
            }
            // Close-on-exec lives on the descriptor itself.
            libc::F_GETFD | libc::F_SETFD => return None,
            // Byte-range locks: the service's, per open file.
            libc::F_GETLK
            | libc::F_SETLK
            | libc::F_SETLKW
            | libc::F_OFD_GETLK
            | libc::F_OFD_SETLK
            | libc::F_OFD_SETLKW => return Some(self.record_lock(&s, cmd as i32, arg)),
            _ => err(libc::EINVAL),
        })
    }

    /// Whether call `nr` is `EBADF` for being made on a served `O_PATH`
    /// descriptor ([`refused_on_path_only`]).
    pub(super) fn path_only_refuses(&self, nr: i64, a: [u64; 6]) -> bool {
        refused_on_path_only(nr, a) && self.served(a[0]).is_some_and(|s| s.flags & libc::O_PATH != 0)
    }
}

/// The kernel's `O_LARGEFILE` on x86-64 (glibc's, and so `libc`'s, is 0).
const O_LARGEFILE: i32 = 0o100000;

/// Whether call `nr` on an `O_PATH` descriptor (its first argument) is
/// `EBADF`: anything that reads, writes or changes the file through it.
fn refused_on_path_only(nr: i64, a: [u64; 6]) -> bool {
    match nr {
        libc::SYS_read
        | libc::SYS_write
        | libc::SYS_pread64
        | libc::SYS_pwrite64
        | libc::SYS_readv
        | libc::SYS_writev
        | libc::SYS_preadv
        | libc::SYS_pwritev
        | libc::SYS_preadv2
        | libc::SYS_pwritev2
        | libc::SYS_lseek
        | libc::SYS_fallocate
        | libc::SYS_fchmod
        | libc::SYS_fchown
        | libc::SYS_getdents64
        | libc::SYS_ioctl
        | libc::SYS_flock
        | libc::SYS_fsync
        | libc::SYS_fdatasync
        | libc::SYS_fadvise64
        | libc::SYS_fgetxattr
        | libc::SYS_flistxattr
        | libc::SYS_fsetxattr
        | libc::SYS_fremovexattr => true,
        // A negative length is `EINVAL` first.
        libc::SYS_ftruncate => (a[1] as i64) >= 0,
        libc::SYS_fcntl => !matches!(
            a[1] as i32,
            libc::F_GETFL | libc::F_GETFD | libc::F_SETFD | libc::F_DUPFD | libc::F_DUPFD_CLOEXEC
        ),
        _ => false,
    }
}

/// Whether descriptor `fd` is a served file's placeholder (asked of the
/// kernel, with no allocation: a forked child may hold no malloc lock).
/// Only a regular file with no links (a memfd is one) is asked by name:
/// an `fstat` costs a fraction of a `/proc` lookup, and a new image asks
/// this of every descriptor it inherits.
pub(super) fn placeholder_fd(fd: i32) -> bool {
    if fd < 0 || !unlinked_file(fd) {
        return false;
    }
    let mut path = *b"/proc/self/fd/\0\0\0\0\0\0\0\0\0\0\0\0";
    let mut digits = [0u8; 10];
    let (mut n, mut i) = (fd as u32, digits.len());
    loop {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    path[14..14 + digits.len() - i].copy_from_slice(&digits[i..]);
    let mut link = [0u8; 32];
    let n = trap::raw_syscall(
        libc::SYS_readlinkat,
        [
            libc::AT_FDCWD as u64,
            path.as_ptr() as u64,
            link.as_mut_ptr() as u64,
            link.len() as u64,
            0,
            0,
        ],
    );
    n > 0 && link[..n as usize].starts_with(PLACEHOLDER_LINK)
}

/// Whether `fd` is open on a regular file with no links (`statx` into
/// bytes: `stx_nlink` is at 16, `stx_mode` at 28).
fn unlinked_file(fd: i32) -> bool {
    let mut stx = [0u8; 256];
    let r = trap::raw_syscall(
        libc::SYS_statx,
        [
            fd as u64,
            c"".as_ptr() as u64,
            libc::AT_EMPTY_PATH as u64,
            (libc::STATX_TYPE | libc::STATX_NLINK) as u64,
            stx.as_mut_ptr() as u64,
            0,
        ],
    );
    let nlink = u32::from_ne_bytes([stx[16], stx[17], stx[18], stx[19]]);
    let mode = u16::from_ne_bytes([stx[28], stx[29]]) as u32;
    r == 0 && mode & libc::S_IFMT == libc::S_IFREG && nlink == 0
}

/// What `/proc/self/fd/N` reads for a placeholder.
pub(super) const PLACEHOLDER_LINK: &[u8] = b"/memfd:lintel-served";

/// A placeholder descriptor for a served file: a `dup` of this process's
/// [`template`] at the lowest free number, as `open` gives. Nothing is
/// ever written to it: a placeholder that must carry a record for another
/// image gets a memfd of its own first ([`private_placeholder`]; see
/// `Emulation::record_all`). A `dup` and its `close` cost about 1 µs
/// here, a `memfd_create` and its `close` about 8 µs: a served `open`
/// paid that on every call.
pub(super) fn placeholder(cloexec: bool) -> i64 {
    let Some(t) = template() else {
        return private_placeholder(cloexec);
    };
    let cmd = if cloexec {
        libc::F_DUPFD_CLOEXEC
    } else {
        libc::F_DUPFD
    };
    match trap::raw_syscall(libc::SYS_fcntl, [t as u64, cmd as u64, 0, 0, 0, 0]) {
        fd if fd >= 0 => fd,
        _ => private_placeholder(cloexec),
    }
}

/// A placeholder of its own: an empty memfd, named so that an image this
/// one `exec`s recognizes it, to hold a record.
pub(super) fn private_placeholder(cloexec: bool) -> i64 {
    let flags = if cloexec { libc::MFD_CLOEXEC } else { 0 };
    trap::raw_syscall(
        libc::SYS_memfd_create,
        [c"lintel-served".as_ptr() as u64, flags as u64, 0, 0, 0, 0],
    )
}

static TEMPLATE: std::sync::OnceLock<Option<i32>> = std::sync::OnceLock::new();

/// The memfd every [`placeholder`] is a `dup` of: made at the first one,
/// kept at the runtime's descriptor floor or above (where the program's
/// calls do not reach), close-on-exec (each image makes its own). A
/// forked child keeps its parent's, which nobody writes.
fn template() -> Option<i32> {
    *TEMPLATE.get_or_init(|| {
        let fd = private_placeholder(true);
        if fd < 0 {
            return None;
        }
        let floor = lintel::descriptor_floor().max(0) as u64;
        let high = trap::raw_syscall(
            libc::SYS_fcntl,
            [fd as u64, libc::F_DUPFD_CLOEXEC as u64, floor, 0, 0, 0],
        );
        trap::raw_syscall(libc::SYS_close, [fd as u64, 0, 0, 0, 0, 0]);
        (high >= 0).then_some(high as i32)
    })
}

/// The template's number, if this process (or the parent it was forked
/// from) made one: not a served file's placeholder.
pub(super) fn template_fd() -> Option<i32> {
    TEMPLATE.get().copied().flatten()
}

/// Whether placeholder `fd` is a `dup` of the template, so holds no record
/// of its own (asked of the kernel with `kcmp`; where that is refused,
/// assumed so, which costs a memfd and is right either way).
pub(super) fn shares_template(fd: i32) -> bool {
    let Some(t) = template_fd() else { return false };
    let pid = std::process::id() as u64;
    const KCMP_FILE: u64 = 0;
    let r = trap::raw_syscall(libc::SYS_kcmp, [pid, pid, KCMP_FILE, t as u64, fd as u64, 0]);
    !(r == 1 || r == 2)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_share_a_template_and_private_ones_do_not() {
        let (a, b) = (placeholder(true), placeholder(false));
        let own = private_placeholder(true);
        assert!(a >= 0 && b >= 0 && own >= 0);
        assert!(shares_template(a as i32) && shares_template(b as i32));
        assert!(
            !shares_template(own as i32),
            "a private placeholder shares the template"
        );
        assert!(placeholder_fd(b as i32) && placeholder_fd(own as i32));
        assert!(!placeholder_fd(template_fd().unwrap()) || template_fd() != Some(b as i32));
        let cloexec =
            |fd: i64| trap::raw_syscall(libc::SYS_fcntl, [fd as u64, libc::F_GETFD as u64, 0, 0, 0, 0]);
        assert_eq!(cloexec(a) & libc::FD_CLOEXEC as i64, libc::FD_CLOEXEC as i64);
        assert_eq!(cloexec(b) & libc::FD_CLOEXEC as i64, 0);
        for fd in [a, b, own] {
            trap::raw_syscall(libc::SYS_close, [fd as u64, 0, 0, 0, 0, 0]);
        }
    }

    #[test]
    fn placeholders_are_told_from_other_descriptors() {
        let p = placeholder(true);
        assert!(p >= 0);
        assert!(placeholder_fd(p as i32));
        assert!(!placeholder_fd(0) || !placeholder_fd(2));
        assert!(!placeholder_fd(-1));
        // Replaced by another file in one step, not closed: a test on
        // another thread could take a closed number for a placeholder of
        // its own before the look below.
        let other = trap::raw_syscall(libc::SYS_memfd_create, [c"other".as_ptr() as u64, 0, 0, 0, 0, 0]);
        assert!(other >= 0);
        assert!(trap::raw_syscall(libc::SYS_dup2, [other as u64, p as u64, 0, 0, 0, 0]) == p);
        assert!(!placeholder_fd(p as i32), "replaced by another file");
        for fd in [p, other] {
            trap::raw_syscall(libc::SYS_close, [fd as u64, 0, 0, 0, 0, 0]);
        }
    }
}
