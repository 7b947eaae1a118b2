//! The working directory: while it is in the served tree the emulation
//! keeps it (its path relative to the root) and answers `getcwd` and
//! relative paths; out of it, it is the kernel's.

use std::os::unix::ffi::OsStrExt;

use super::resolve::LinkLookup;
use super::{Emulation, R, err, fs_err};
use crate::links;
use crate::paths;
use crate::trap;
use crate::user;

impl Emulation {
    /// Take the working directory `parent` had (a forked child's new
    /// emulation).
    pub fn inherit_cwd(&self, parent: &Emulation) {
        *self.cwd.write() = parent.served_cwd();
    }

    /// The served working directory, if it is one. (`try_read`: a forked
    /// child must not wait on a lock a thread of its parent held.)
    pub(super) fn served_cwd(&self) -> Option<Vec<u8>> {
        self.cwd.try_read().and_then(|c| c.clone())
    }

    /// `chdir`: into the served tree (the service says whether it is a
    /// directory), or out of it (the kernel's working directory again;
    /// `..` from the served root leads to the prefix's parent).
    pub(super) fn chdir(&self, path: u64) -> R {
        let target = match self.path_at(libc::AT_FDCWD, path) {
            Ok(Some(rel)) => rel,
            Ok(None) => return self.kernel_chdir(libc::SYS_chdir, path),
            Err(libc::ENOENT) => {
                let (Some(cwd), Ok(p)) = (self.served_cwd(), user::cstr(path)) else {
                    return Some(err(libc::ENOENT));
                };
                let Some(mut host) = paths::outside(&self.prefix, &cwd, &p) else {
                    return Some(err(libc::ENOENT));
                };
                host.push(0);
                return self.kernel_chdir(libc::SYS_chdir, host.as_ptr() as u64);
            }
            Err(e) => return Some(err(e)),
        };
        let os = std::ffi::OsStr::from_bytes;
        match self.fs.stat(os(&target)) {
            Ok(st) if st.is_dir() => {
                // Entering it takes the right to search it, as for Linux.
                if let Err(e) = self
                    .fs
                    .access(os(&target), libc::X_OK as u32, libc::AT_EACCESS as u32)
                {
                    return Some(fs_err(e));
                }
                *self.cwd.write() = Some(self.physical(target));
                Some(0)
            }
            Ok(_) => Some(err(libc::ENOTDIR)),
            Err(e) => Some(fs_err(e)),
        }
    }

    /// The served directory `rel` names with the symlinks in its path
    /// followed (as a working directory or a directory descriptor is the
    /// directory, not the path: `..` from it is its parent); `rel` as
    /// it is if that cannot be told.
    pub(super) fn physical(&self, rel: Vec<u8>) -> Vec<u8> {
        match links::resolve(&self.prefix, &rel, true, &LinkLookup(&self.fs)) {
            Ok(links::Target::Served(p)) => p,
            _ => rel,
        }
    }

    /// `fchdir`: a served directory's descriptor, or the kernel's.
    pub(super) fn fchdir(&self, fd: u64) -> R {
        match self.served(fd) {
            Some(s) if s.dir => {
                *self.cwd.write() = Some(s.path.clone());
                Some(0)
            }
            Some(_) => Some(err(libc::ENOTDIR)),
            None => self.kernel_chdir(libc::SYS_fchdir, fd),
        }
    }

    /// A working-directory change made by the kernel; on success the
    /// served one is left.
    pub(super) fn kernel_chdir(&self, nr: i64, arg: u64) -> R {
        let r = trap::raw_syscall(nr, [arg, 0, 0, 0, 0, 0]);
        if r == 0 {
            *self.cwd.write() = None;
        }
        Some(r)
    }

    /// `getcwd` while the working directory is served: the prefix's path.
    pub(super) fn getcwd(&self, buf: u64, size: u64) -> R {
        let mut path = self.prefix.absolute(&self.served_cwd()?);
        path.push(0);
        if (size as usize) < path.len() {
            return Some(err(libc::ERANGE));
        }
        Some(user::write(buf, &path).map_or_else(err, |()| path.len() as i64))
    }
}
