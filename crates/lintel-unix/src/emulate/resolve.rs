//! Which served path a call names: an absolute path under the prefix, a
//! path relative to a served working directory or directory descriptor,
//! or `/proc/self/fd/N` of a served `N`; and where a call that names one
//! path has it ([`PathArg`]).

use std::os::unix::ffi::OsStrExt;
use std::sync::Arc;

use lintel_fs::{Fs, FsError};

use super::descriptors::Served;
use super::{Emulation, R, err, fs_err};
use crate::links;
use crate::paths;
use crate::user;

/// A served path relative to the export's root, and the served
/// descriptor it was named through (`/proc/self/fd/N`), if it was.
pub(super) type Target = (Vec<u8>, Option<Arc<Served>>);

impl Emulation {
    /// The served path `path` names (relative to `dirfd`), if it is one:
    /// `Ok(None)` if not ours, `Err(errno)` if it cannot be read or
    /// leaves the served tree through a served directory.
    pub(super) fn path_at(&self, dirfd: i32, path: u64) -> Result<Option<Vec<u8>>, i32> {
        self.target_at(dirfd, path).map(|t| t.map(|(rel, _)| rel))
    }

    /// [`Emulation::path_at`], and the served descriptor the path names
    /// when it is `/proc/self/fd/N` or `/dev/fd/N` of one: that file,
    /// wherever its name has gone since (`open` opens it again).
    pub(super) fn target_at(&self, dirfd: i32, path: u64) -> Result<Option<Target>, i32> {
        let p = user::cstr(path)?;
        if let Some(fd) = fd_link(&p)
            && let Some(s) = self.served(fd as u64)
        {
            return Ok(Some((s.path.clone(), Some(s))));
        }
        let rel = if p.first() == Some(&b'/') {
            self.prefix.strip(&p)
        } else if dirfd == libc::AT_FDCWD {
            // Relative to a served working directory: served, unless it
            // climbs out of the tree (then it names nothing here).
            match self.served_cwd() {
                Some(c) => Some(paths::join(&c, &p).ok_or(libc::ENOENT)?),
                None => None,
            }
        } else {
            match self.served(dirfd as u64) {
                Some(d) if d.dir => Some(paths::join(&d.path, &p).ok_or(libc::ENOENT)?),
                Some(_) => return Err(libc::ENOTDIR),
                None => None,
            }
        };
        Ok(rel.map(|r| (r, None)))
    }

    pub(super) fn on_path(
        &self,
        dirfd: i32,
        path: u64,
        f: impl FnOnce(&std::ffi::OsStr) -> Result<(), FsError>,
    ) -> R {
        match self.path_at(dirfd, path) {
            Ok(Some(rel)) => Some(f(std::ffi::OsStr::from_bytes(&rel)).map_or_else(fs_err, |()| 0)),
            Ok(None) => None,
            Err(e) => Some(err(e)),
        }
    }
}

/// The descriptor number in `/proc/self/fd/N` or `/dev/fd/N`.
pub(super) fn fd_link(path: &[u8]) -> Option<i32> {
    let n = path
        .strip_prefix(b"/proc/self/fd/")
        .or_else(|| path.strip_prefix(b"/dev/fd/"))?;
    std::str::from_utf8(n).ok()?.parse().ok()
}

/// The service's answers for [`links::resolve`].
pub(super) struct LinkLookup<'a>(pub(super) &'a Fs);

impl links::Lookup for LinkLookup<'_> {
    fn link(&self, rel: &[u8]) -> Result<Option<Vec<u8>>, i32> {
        let rel = std::ffi::OsStr::from_bytes(rel);
        match self.0.symlink_stat(rel) {
            Ok(st) if st.is_symlink() => self.0.read_link(rel).map(Some).map_err(|e| e.errno()),
            Ok(_) => Ok(None),
            Err(e) => Err(e.errno()),
        }
    }
}

/// Where a call that names one path has it: the argument of its
/// directory descriptor (for the `*at` calls) and of the path, and whether
/// a symlink as its last name is followed. The one list of them, for
/// `follow` (the path followed out of the export) and `forked` (whether a
/// child's call touches a served path). `mknod` and `mknodat` are not in
/// it: a symlink that leaves the export in their path is not followed.
pub(super) struct PathArg {
    pub(super) dirfd: Option<usize>,
    pub(super) path: usize,
    pub(super) follow_last: bool,
}

impl PathArg {
    pub(super) fn of(nr: i64, a: [u64; 6]) -> Option<PathArg> {
        let nofollow = |flags: u64| flags as i32 & libc::AT_SYMLINK_NOFOLLOW == 0;
        let open = |flags: u64| {
            let f = flags as i32;
            // (`O_PATH` drops `O_CREAT` and `O_EXCL`.)
            let excl =
                f & libc::O_PATH == 0 && f & (libc::O_CREAT | libc::O_EXCL) == libc::O_CREAT | libc::O_EXCL;
            f & libc::O_NOFOLLOW == 0 && !excl
        };
        let (dirfd, path, follow_last) = match nr {
            libc::SYS_open => (None, 0, open(a[1])),
            libc::SYS_creat
            | libc::SYS_stat
            | libc::SYS_access
            | libc::SYS_chdir
            | libc::SYS_truncate
            | libc::SYS_statfs
            | libc::SYS_chmod
            | libc::SYS_chown
            | libc::SYS_getxattr
            | libc::SYS_listxattr
            | libc::SYS_setxattr
            | libc::SYS_removexattr => (None, 0, true),
            libc::SYS_lstat
            | libc::SYS_lchown
            | libc::SYS_readlink
            | libc::SYS_unlink
            | libc::SYS_rmdir
            | libc::SYS_mkdir
            | libc::SYS_mknod
            | libc::SYS_lgetxattr
            | libc::SYS_llistxattr
            | libc::SYS_lsetxattr
            | libc::SYS_lremovexattr => (None, 0, false),
            libc::SYS_openat => (Some(0), 1, open(a[2])),
            libc::SYS_faccessat | libc::SYS_fchmodat => (Some(0), 1, true),
            libc::SYS_newfstatat | libc::SYS_faccessat2 => (Some(0), 1, nofollow(a[3])),
            libc::SYS_statx => (Some(0), 1, nofollow(a[2])),
            libc::SYS_fchownat => (Some(0), 1, nofollow(a[4])),
            libc::SYS_utimensat if a[1] != 0 => (Some(0), 1, nofollow(a[3])),
            libc::SYS_readlinkat | libc::SYS_unlinkat | libc::SYS_mkdirat | libc::SYS_mknodat => {
                (Some(0), 1, false)
            }
            libc::SYS_symlink => (None, 1, false),
            libc::SYS_symlinkat => (Some(1), 2, false),
            _ => return None,
        };
        Some(PathArg {
            dirfd,
            path,
            follow_last,
        })
    }
}
