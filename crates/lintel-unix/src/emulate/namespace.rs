//! Names in served directories: `mkdir`, `mknod`, `unlink`, `rmdir`,
//! `rename`, `link`, `symlink`, `readlink`, with the errors Linux gives
//! when a name is `.` or `..`, or one of two names is not served (the
//! kernel's own lookups of the other decide which comes first).
//!
//! `mknod`/`mknodat` make FIFOs, sockets, devices and empty files through
//! the service (a device only where Linux would let the caller:
//! `CAP_MKNOD`, else `EPERM`).

use std::os::unix::ffi::OsStrExt;

use super::resolve::{LinkLookup, fd_link};
use super::{Emulation, R, err, fs_err};
use crate::links;
use crate::trap;
use crate::user;

impl Emulation {
    pub(super) fn mkdir(&self, dirfd: i32, path: u64, mode: u64) -> R {
        self.on_path(dirfd, path, |p| self.fs.create_dir(p, mode as u32))
    }

    pub(super) fn mknod(&self, dirfd: i32, path: u64, mode: u64, dev: u64) -> R {
        self.on_path(dirfd, path, |p| self.fs.mknod(p, mode as u32, dev))
    }

    pub(super) fn unlink(&self, dirfd: i32, path: u64) -> R {
        self.on_path(dirfd, path, |p| self.fs.remove_file(p))
    }

    /// `unlinkat`: a file, or with `AT_REMOVEDIR` a directory
    /// ([`Self::rmdir`]).
    pub(super) fn unlinkat(&self, dirfd: i32, path: u64, flags: u64) -> R {
        if flags as i32 & libc::AT_REMOVEDIR != 0 {
            return self.rmdir(dirfd, path);
        }
        self.unlink(dirfd, path)
    }

    /// `rmdir`: of `d/.`, `EINVAL`, and of `d/..`, `ENOTEMPTY`, as Linux
    /// answers (the service sees the path with `.` and `..` collapsed).
    pub(super) fn rmdir(&self, dirfd: i32, path: u64) -> R {
        match self.dot_last(dirfd, path) {
            Some(Ok(false)) => Some(err(libc::EINVAL)),
            Some(Ok(true)) => Some(err(libc::ENOTEMPTY)),
            Some(Err(e)) => Some(err(e)),
            None => self.on_path(dirfd, path, |p| self.fs.remove_dir(p)),
        }
    }

    /// Whether the last name of `path` (relative to `dirfd`) is `.`
    /// (`Some(Ok(false))`) or `..` (`Some(Ok(true))`), which no call that
    /// acts on a name in a directory takes: Linux resolves the directory
    /// it is in first, and that error (`Some(Err)`) comes before the
    /// call's own. `None`: another name, or not a served path.
    fn dot_last(&self, dirfd: i32, path: u64) -> Option<Result<bool, i32>> {
        let p = user::cstr(path).ok()?;
        let end = p.iter().rposition(|&b| b != b'/').map_or(0, |i| i + 1);
        let start = p[..end].iter().rposition(|&b| b == b'/').map_or(0, |i| i + 1);
        let dotdot = match &p[start..end] {
            b"." => false,
            b".." => true,
            _ => return None,
        };
        let mut dir = if start == 0 {
            b".".to_vec()
        } else {
            p[..start].to_vec()
        };
        dir.push(0);
        Some(match self.path_at(dirfd, dir.as_ptr() as u64) {
            Ok(Some(rel)) => match self.fs.stat(std::ffi::OsStr::from_bytes(&rel)) {
                Ok(st) if st.is_dir() => Ok(dotdot),
                Ok(_) => Err(libc::ENOTDIR),
                Err(e) => Err(e.errno()),
            },
            Ok(None) => return None,
            Err(e) => Err(e),
        })
    }

    /// Whether the directory holding the last name of (`dirfd`, `path`)
    /// is one: 0, or the error finding it. `None`: not served.
    fn parent_error(&self, dirfd: i32, path: u64) -> R {
        let p = user::cstr(path).ok()?;
        let mut parent = match last_name(&p).0 {
            [] => b".".to_vec(),
            d => d.to_vec(),
        };
        parent.push(0);
        let rel = match self.path_at(dirfd, parent.as_ptr() as u64) {
            Ok(Some(rel)) => rel,
            Ok(None) => return None,
            Err(e) => return Some(err(e)),
        };
        Some(match self.fs.stat(std::ffi::OsStr::from_bytes(&rel)) {
            Ok(st) if st.is_dir() => 0,
            Ok(_) => err(libc::ENOTDIR),
            Err(e) => fs_err(e),
        })
    }

    pub(super) fn rename(&self, olddir: i32, old: u64, newdir: i32, new: u64, flags: u64) -> R {
        // A last name `.` or `..` is `EBUSY`, once both directories are
        // found.
        let dot = |p: u64| user::cstr(p).is_ok_and(|p| matches!(last_name(&p).1, b"." | b".."));
        if dot(old) || dot(new) {
            let found =
                [(olddir, old), (newdir, new)]
                    .into_iter()
                    .find_map(|(d, p)| match self.parent_error(d, p) {
                        Some(r) => (r < 0).then_some(r),
                        None => Some(err(host_parent(d, p))).filter(|&r| r < 0),
                    });
            if let Some(r) = found {
                return Some(r);
            }
            if self.path_at(olddir, old).is_ok_and(|p| p.is_some())
                || self.path_at(newdir, new).is_ok_and(|p| p.is_some())
            {
                return Some(err(libc::EBUSY));
            }
        }
        let (a, b) = (self.path_at(olddir, old), self.path_at(newdir, new));
        match (a, b) {
            (Ok(None), Ok(None)) => None,
            // The old name's directory is looked up first.
            (Ok(Some(_)), Err(e)) => Some(
                self.parent_error(olddir, old)
                    .filter(|&r| r < 0)
                    .unwrap_or(err(e)),
            ),
            (Ok(None), Err(e)) => Some(err(match host_parent(olddir, old) {
                0 => e,
                h => h,
            })),
            (Err(e), _) => Some(err(e)),
            // `EXDEV` once both names' directories are found.
            (Ok(Some(_)), Ok(None)) => Some(match self.parent_error(olddir, old) {
                Some(r) if r < 0 => r,
                _ => err(match host_parent(newdir, new) {
                    0 => libc::EXDEV,
                    e => e,
                }),
            }),
            (Ok(None), Ok(Some(_))) => Some(match host_parent(olddir, old) {
                0 => self
                    .parent_error(newdir, new)
                    .filter(|&r| r < 0)
                    .unwrap_or(err(libc::EXDEV)),
                e => err(e),
            }),
            (Ok(Some(_)), Ok(Some(_))) if flags != 0 => Some(err(libc::EINVAL)),
            (Ok(Some(a)), Ok(Some(b))) => Some(
                self.fs
                    .rename(std::ffi::OsStr::from_bytes(&a), std::ffi::OsStr::from_bytes(&b))
                    .map_or_else(fs_err, |()| 0),
            ),
        }
    }

    /// `link`: both names served, or `EXDEV` (once the kernel would have
    /// found the file and the new name's directory: a bad descriptor is
    /// `EBADF`, a missing name `ENOENT`).
    pub(super) fn link(&self, olddir: i32, old: u64, newdir: i32, new: u64, flags: u64) -> R {
        let follow = flags & libc::AT_SYMLINK_FOLLOW as u64 != 0;
        let first = |e: i32, then: R| {
            Some(if e != 0 {
                err(e)
            } else {
                then.filter(|&r| r < 0).unwrap_or(err(libc::EXDEV))
            })
        };
        let os = std::ffi::OsStr::from_bytes;
        let found = |a: &[u8]| match follow {
            false => self.fs.symlink_stat(os(a)),
            true => self.fs.stat(os(a)),
        };
        match (self.path_at(olddir, old), self.path_at(newdir, new)) {
            (Ok(None), Ok(None)) => None,
            // The file is looked up before the new name's directory.
            (Ok(Some(a)), Err(e)) => Some(found(&a).map_or_else(fs_err, |_| err(e))),
            (Ok(None), Err(e)) => {
                let h = user::cstr(old).map_or(libc::EFAULT, |p| host_lookup(olddir, &p, follow, false));
                Some(err(if h != 0 { h } else { e }))
            }
            (Err(e), _) => Some(err(e)),
            (Ok(None), Ok(Some(_))) => {
                let e = user::cstr(old).map_or(libc::EFAULT, |p| host_lookup(olddir, &p, follow, false));
                first(e, self.parent_error(newdir, new))
            }
            (Ok(Some(a)), Ok(None)) => match found(&a) {
                Err(e) => Some(fs_err(e)),
                Ok(_) => first(host_parent(newdir, new), None),
            },
            (Ok(Some(_)), Ok(Some(_))) if flags & !(libc::AT_SYMLINK_FOLLOW as u64) != 0 => {
                Some(err(libc::EINVAL))
            }
            (Ok(Some(a)), Ok(Some(b))) => {
                // `AT_SYMLINK_FOLLOW`: a link to what a symlink leads to.
                let a = match follow {
                    false => a,
                    true => match links::resolve(&self.prefix, &a, true, &LinkLookup(&self.fs)) {
                        Ok(links::Target::Served(p)) => p,
                        Ok(links::Target::Host(_)) => return Some(err(libc::EXDEV)),
                        Err(e) => return Some(err(e)),
                    },
                };
                // The export's root, a directory, has no name in a
                // directory the service could link from.
                // (`EPERM` once the new name's directory is found and the
                // name is free.)
                if a == b"." {
                    return Some(match self.parent_error(newdir, new) {
                        Some(r) if r < 0 => r,
                        _ if self.fs.symlink_stat(os(&b)).is_ok() => err(libc::EEXIST),
                        _ => err(libc::EPERM),
                    });
                }
                Some(self.fs.hard_link(os(&a), os(&b)).map_or_else(fs_err, |()| 0))
            }
        }
    }

    /// `symlink`: made by the service when the new name is served (the
    /// target is stored as given).
    pub(super) fn symlink(&self, target: u64, dirfd: i32, path: u64) -> R {
        let rel = match self.path_at(dirfd, path) {
            Ok(Some(rel)) => rel,
            Ok(None) => return None,
            Err(e) => return Some(err(e)),
        };
        let target = match user::cstr(target) {
            Ok(t) => t,
            Err(e) => return Some(err(e)),
        };
        let os = std::ffi::OsStr::from_bytes;
        Some(self.fs.symlink(os(&target), os(&rel)).map_or_else(fs_err, |()| 0))
    }

    /// `readlink`: a served symlink's target; `/proc/self/fd/N` of a
    /// served `N` reads as the kernel names the file in the service: its
    /// path now (after a rename, the new one), with ` (deleted)` once it
    /// has no name left. A service that cannot say (the file has left the
    /// tree, an older service) leaves the path the program opened.
    pub(super) fn readlink(&self, dirfd: i32, path: u64, buf: u64, size: u64) -> R {
        if (size as i64) <= 0 {
            return self.path_at(dirfd, path).ok()?.map(|_| err(libc::EINVAL));
        }
        let p = user::cstr(path).ok()?;
        let target = if let Some(s) = fd_link(&p).and_then(|fd| self.served(fd as u64)) {
            let now = s.file.current_path().unwrap_or_else(|_| s.path.clone());
            Ok(self.prefix.absolute(&now))
        } else {
            match self.path_at(dirfd, path) {
                Ok(Some(rel)) => self.fs.read_link(std::ffi::OsStr::from_bytes(&rel)),
                Ok(None) => return None,
                Err(e) => return Some(err(e)),
            }
        };
        Some(match target {
            Ok(t) => {
                let n = t.len().min(size as usize);
                user::write(buf, &t[..n]).map_or_else(err, |()| n as i64)
            }
            Err(e) => fs_err(e),
        })
    }
}

/// A path (its trailing slashes aside) as the directory part, with its
/// slash, and the last name.
fn last_name(p: &[u8]) -> (&[u8], &[u8]) {
    let trimmed = p.len() - p.iter().rev().take_while(|&&b| b == b'/').count();
    let p = &p[..trimmed];
    let at = p.iter().rposition(|&b| b == b'/').map_or(0, |i| i + 1);
    (&p[..at], &p[at..])
}

/// What the kernel says of (`dirfd`, `path`), a name not served: 0 if
/// it is there (and a directory, if `dir`), or the errno.
fn host_lookup(dirfd: i32, path: &[u8], follow: bool, dir: bool) -> i32 {
    let mut p = path.to_vec();
    p.push(0);
    let flags = if follow { 0 } else { libc::AT_SYMLINK_NOFOLLOW };
    let mut st = [0u8; 144];
    let r = trap::raw_syscall(
        libc::SYS_newfstatat,
        [
            dirfd as u64,
            p.as_ptr() as u64,
            st.as_mut_ptr() as u64,
            flags as u64,
            0,
            0,
        ],
    );
    if r < 0 {
        return -r as i32;
    }
    // `st_mode`, at 24 in x86-64's `struct stat`.
    let mode = u32::from_ne_bytes(st[24..28].try_into().expect("4 bytes"));
    if dir && mode & libc::S_IFMT != libc::S_IFDIR {
        return libc::ENOTDIR;
    }
    0
}

/// What the kernel says of the directory holding the last name of
/// (`dirfd`, `path`), a name not served: 0 or the errno (before a call
/// naming a served name too is `EXDEV`).
fn host_parent(dirfd: i32, path: u64) -> i32 {
    let Ok(p) = user::cstr(path) else {
        return libc::EFAULT;
    };
    let parent = match last_name(&p).0 {
        [] => b".".as_slice(),
        d => d,
    };
    host_lookup(dirfd, parent, true, true)
}
