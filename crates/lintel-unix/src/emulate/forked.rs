//! A forked child that has not `exec`ed: a child forked through the
//! preload library's wrapper gets a runtime of its own on its first use of
//! a served file ([`set_reviver`]); any other serves what it can without
//! one (its opens deferred to the image it `exec`s, see `inherit`).

use super::descriptors::placeholder_fd;
use super::open::CREAT_FLAGS;
use super::resolve::PathArg;
use super::{Emulation, R, err};
use crate::trap::Emulator;
use crate::user;

impl Emulation {
    /// Call `nr` of a forked child: served by a runtime of its own if it
    /// touches a served file and one can be had, else as far as it can be
    /// without one.
    pub(super) fn forked_child_call(&self, nr: i64, a: [u64; 6]) -> R {
        if self.child_touches_served(nr, a)
            && let Some(e) = REVIVER.get().and_then(|revive| revive())
        {
            return e.emulate(nr, a);
        }
        self.emulate_in_forked_child(nr, a)
    }

    /// A forked child that has not `exec`ed cannot reach the service: its
    /// copy of the lintel runtime has no threads, and its connections'
    /// memory is the parent's. Opens of served paths are deferred to the
    /// image it `exec`s ([`Self::defer_open`], how shells redirect); any
    /// other use of a served file or path fails with `EIO`, so nothing is
    /// read from or written to the placeholder behind it.
    fn emulate_in_forked_child(&self, nr: i64, a: [u64; 6]) -> R {
        match nr {
            // Into a served directory unchecked (the child cannot ask the
            // service; what it opens there finds out), out of one by the
            // kernel.
            libc::SYS_chdir => match self.path_at(libc::AT_FDCWD, a[0]) {
                Ok(Some(rel)) => {
                    *self.cwd.try_write()? = Some(rel);
                    Some(0)
                }
                Ok(None) => self.kernel_chdir(libc::SYS_chdir, a[0]),
                Err(e) => Some(err(e)),
            },
            libc::SYS_getcwd => self.getcwd(a[0], a[1]),
            // Into a host directory: the served one is left.
            libc::SYS_fchdir if !placeholder_fd(a[0] as i32) => self.kernel_chdir(libc::SYS_fchdir, a[0]),
            libc::SYS_open => self.defer_open(a[0], a[1], a[2]),
            libc::SYS_openat
                if a[0] as i32 == libc::AT_FDCWD
                    || user::cstr(a[1]).is_ok_and(|p| p.first() == Some(&b'/')) =>
            {
                self.defer_open(a[1], a[2], a[3])
            }
            libc::SYS_creat => self.defer_open(a[0], CREAT_FLAGS, a[1]),
            _ => self.child_touches_served(nr, a).then(|| err(libc::EIO)),
        }
    }

    /// Whether call `nr` of a forked child touches a served file or path:
    /// a placeholder descriptor, an absolute path under the prefix, or a
    /// path relative to a served directory.
    fn child_touches_served(&self, nr: i64, a: [u64; 6]) -> bool {
        let cwd = libc::AT_FDCWD as u64;
        let fd = |i: usize| placeholder_fd(a[i] as i32);
        let path = |dirfd: u64, p: u64| self.child_path(dirfd as i32, p);
        // A call that names one path has it where `PathArg` says.
        if let Some(arg) = PathArg::of(nr, a) {
            return path(arg.dirfd.map_or(cwd, |i| a[i]), a[arg.path]);
        }
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
            | libc::SYS_fstat
            | libc::SYS_getdents64
            | libc::SYS_ftruncate
            | libc::SYS_fsync
            | libc::SYS_fdatasync
            | libc::SYS_fallocate
            | libc::SYS_fchmod
            | libc::SYS_fchown
            | libc::SYS_fchdir
            | libc::SYS_flock
            | libc::SYS_fstatfs
            | libc::SYS_fgetxattr
            | libc::SYS_flistxattr
            | libc::SYS_fsetxattr
            | libc::SYS_fremovexattr => fd(0),
            // Close-on-exec and duplicates are the descriptor's own; the
            // status flags and locks are the served file's.
            libc::SYS_fcntl => {
                matches!(
                    a[1] as i32,
                    libc::F_GETFL
                        | libc::F_SETFL
                        | libc::F_GETLK
                        | libc::F_SETLK
                        | libc::F_SETLKW
                        | libc::F_OFD_GETLK
                        | libc::F_OFD_SETLK
                        | libc::F_OFD_SETLKW
                ) && fd(0)
            }
            libc::SYS_ioctl => a[1] != libc::FIOCLEX && a[1] != libc::FIONCLEX && fd(0),
            libc::SYS_mmap => a[3] & libc::MAP_ANONYMOUS as u64 == 0 && fd(4),
            libc::SYS_sendfile => fd(0) || fd(1),
            libc::SYS_copy_file_range | libc::SYS_splice => fd(0) || fd(2),
            // `utimensat` of its descriptor (a null path: not in `PathArg`).
            libc::SYS_utimensat => path(a[0], a[1]),
            libc::SYS_rename | libc::SYS_link => path(cwd, a[0]) || path(cwd, a[1]),
            libc::SYS_bind | libc::SYS_connect => self.child_socket_path(a[1], a[2]),
            libc::SYS_renameat | libc::SYS_renameat2 | libc::SYS_linkat => {
                path(a[0], a[1]) || path(a[2], a[3])
            }
            _ => false,
        }
    }

    /// Whether a socket address names a path [`Emulation::child_path`]
    /// finds served.
    fn child_socket_path(&self, addr: u64, len: u64) -> bool {
        // `sockaddr_un` (its path need not end in a NUL) and a NUL.
        let mut raw = [0u8; std::mem::size_of::<libc::sockaddr_un>() + 1];
        let len = (len as usize).min(raw.len() - 1);
        if len <= 2 || user::read_into(addr, &mut raw[..len]).is_err() {
            return false;
        }
        u16::from_ne_bytes([raw[0], raw[1]]) == libc::AF_UNIX as u16
            && raw[2] != 0
            && self.child_path(libc::AT_FDCWD, raw[2..].as_ptr() as u64)
    }

    /// Whether (`dirfd`, `path`) names something served, as a forked
    /// child sees it: an absolute path under the prefix, or any path
    /// relative to (or empty, on) a placeholder.
    pub(super) fn child_path(&self, dirfd: i32, path: u64) -> bool {
        match user::cstr(path) {
            Ok(p) if p.first() == Some(&b'/') => self.prefix.strip(&p).is_some(),
            Ok(_) | Err(_) if dirfd == libc::AT_FDCWD => self.served_cwd().is_some(),
            Ok(_) | Err(_) => placeholder_fd(dirfd),
        }
    }
}

/// How a forked child gets a lintel runtime and an emulation of its own
/// (set by the preload library; `None` from it: not possible here).
pub(super) static REVIVER: std::sync::OnceLock<fn() -> Option<&'static Emulation>> =
    std::sync::OnceLock::new();

/// Set how a forked child gets a runtime of its own: called (once per
/// child, on its only thread) on the child's first use of a served file,
/// it returns the child's new emulation, or `None` to leave the child
/// without one (its use of served files then fails with EIO, and its
/// opens are deferred to the image it `exec`s).
pub fn set_reviver(revive: fn() -> Option<&'static Emulation>) {
    let _ = REVIVER.set(revive);
}
