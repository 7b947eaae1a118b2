//! What a served file says of itself and how it is changed: `stat` and
//! kin (`struct stat`, `struct statx`), `statfs`, `access`, the mode,
//! owner and times (`chmod`, `chown`, `utimensat`), and extended
//! attributes (there are none).

use std::os::unix::ffi::OsStrExt;

use lintel_fs::{Attr, SetTime, Stat, Timespec};

use super::{Emulation, R, err, fs_err};
use crate::user;

impl Emulation {
    pub(super) fn fstat(&self, fd: u64, buf: u64) -> R {
        let s = self.served(fd)?;
        Some(match s.file.metadata() {
            Ok(st) => user::write(buf, &stat_bytes(&st)).map_or_else(err, |()| 0),
            Err(e) => fs_err(e),
        })
    }

    pub(super) fn stat_at(&self, dirfd: u64, path: u64, buf: u64, flags: u64, statx_mask: Option<u64>) -> R {
        let flags = flags as i32;
        let empty = user::cstr(path).map(|p| p.is_empty()).unwrap_or(false);
        let st = if empty && flags & libc::AT_EMPTY_PATH != 0 {
            let s = self.served(dirfd)?;
            s.file.metadata()
        } else {
            let rel = match self.path_at(dirfd as i32, path) {
                Ok(Some(rel)) => rel,
                Ok(None) => return None,
                Err(e) => return Some(err(e)),
            };
            let p = std::ffi::OsStr::from_bytes(&rel);
            if flags & libc::AT_SYMLINK_NOFOLLOW != 0 {
                self.fs.symlink_stat(p)
            } else {
                self.fs.stat(p)
            }
        };
        Some(match st {
            Ok(st) => {
                let bytes = match statx_mask {
                    None => stat_bytes(&st),
                    Some(_) => statx_bytes(&st),
                };
                user::write(buf, &bytes).map_or_else(err, |()| 0)
            }
            Err(e) => fs_err(e),
        })
    }

    /// `statfs`/`fstatfs` of something served: the export's file system.
    fn statfs(&self, served: Result<bool, i32>, buf: u64) -> R {
        match served {
            Ok(false) => None,
            Err(e) => Some(err(e)),
            Ok(true) => Some(match self.fs.statfs() {
                Ok(f) => user::write(buf, &statfs_bytes(&f)).map_or_else(err, |()| 0),
                Err(e) => fs_err(e),
            }),
        }
    }

    /// `statfs` of a path: the export's file system if the path is
    /// served and names something, as for the kernel.
    pub(super) fn statfs_path(&self, path: u64, buf: u64) -> R {
        match self.path_at(libc::AT_FDCWD, path) {
            Ok(Some(rel)) => match self.fs.stat(std::ffi::OsStr::from_bytes(&rel)) {
                Ok(_) => self.statfs(Ok(true), buf),
                Err(e) => Some(fs_err(e)),
            },
            other => self.statfs(other.map(|p| p.is_some()), buf),
        }
    }

    pub(super) fn fstatfs(&self, fd: u64, buf: u64) -> R {
        self.statfs(Ok(self.served(fd).is_some()), buf)
    }

    /// `access`/`faccessat2`: checked by the service with the program's
    /// credentials (its real ids unless `AT_EACCESS`).
    pub(super) fn access(&self, dirfd: i32, path: u64, mode: u64, flags: u64) -> R {
        let flags = flags as i32;
        if flags & !(libc::AT_EACCESS | libc::AT_SYMLINK_NOFOLLOW | libc::AT_EMPTY_PATH) != 0 {
            return self.path_at(dirfd, path).ok()?.map(|_| err(libc::EINVAL));
        }
        let empty = flags & libc::AT_EMPTY_PATH != 0 && user::cstr(path).is_ok_and(|p| p.is_empty());
        let rel = match empty {
            true => self.served(dirfd as u64)?.path.clone(),
            false => match self.path_at(dirfd, path) {
                Ok(Some(rel)) => rel,
                Ok(None) => return None,
                Err(e) => return Some(err(e)),
            },
        };
        if mode & !7 != 0 {
            return Some(err(libc::EINVAL));
        }
        let flags = (flags & (libc::AT_EACCESS | libc::AT_SYMLINK_NOFOLLOW)) as u32;
        let r = self
            .fs
            .access(std::ffi::OsStr::from_bytes(&rel), mode as u32, flags);
        Some(r.map_or_else(fs_err, |()| 0))
    }

    /// `attr` on the path (`dirfd`, `path`), or on `dirfd` itself if
    /// `path` is null or empty with `AT_EMPTY_PATH`.
    fn set_attr(&self, dirfd: i32, path: u64, flags: i32, attr: Attr) -> R {
        let on_fd =
            path == 0 || (flags & libc::AT_EMPTY_PATH != 0 && user::cstr(path).is_ok_and(|p| p.is_empty()));
        if on_fd {
            let s = self.served(dirfd as u64)?;
            return Some(s.file.set_attr(attr).map_or_else(fs_err, |()| 0));
        }
        let follow = flags & libc::AT_SYMLINK_NOFOLLOW == 0;
        self.on_path(dirfd, path, |p| self.fs.set_attr(p, follow, attr))
    }

    /// `chmod`, `fchmod` (`path` null) and `fchmodat`.
    pub(super) fn chmod(&self, dirfd: i32, path: u64, mode: u64) -> R {
        let attr = Attr {
            mode: Some(mode as u32),
            ..Attr::none()
        };
        self.set_attr(dirfd, path, 0, attr)
    }

    /// `chown` and kin (`fchown`: `path` null); an id of -1 is kept.
    pub(super) fn chown(&self, dirfd: i32, path: u64, flags: i32, uid: u64, gid: u64) -> R {
        self.set_attr(dirfd, path, flags, owner(uid, gid))
    }

    pub(super) fn utimensat(&self, dirfd: i32, path: u64, times: u64, flags: i32) -> R {
        let mut attr = Attr::none();
        if times == 0 {
            attr.atime = SetTime::Now;
            attr.mtime = SetTime::Now;
        } else {
            let mut raw = [0u8; 32];
            if let Err(e) = user::read_into(times, &mut raw) {
                return if self.served(dirfd as u64).is_some() || path != 0 {
                    Some(err(e))
                } else {
                    None
                };
            }
            let word = |i: usize| i64::from_ne_bytes(raw[i * 8..i * 8 + 8].try_into().expect("8 bytes"));
            let one = |sec: i64, nsec: i64| match nsec {
                n if n == libc::UTIME_NOW => SetTime::Now,
                n if n == libc::UTIME_OMIT => SetTime::Keep,
                n => SetTime::At(Timespec { sec, nsec: n as u32 }),
            };
            attr.atime = one(word(0), word(1));
            attr.mtime = one(word(2), word(3));
        }
        self.set_attr(dirfd, path, flags, attr)
    }

    /// `getxattr`/`lgetxattr`: no extended attributes on served files,
    /// "none here" once the path is found.
    pub(super) fn getxattr(&self, path: u64) -> R {
        self.on_path(libc::AT_FDCWD, path, |p| self.fs.symlink_stat(p).map(drop))
            .map(|r| if r == 0 { err(libc::ENODATA) } else { r })
    }

    /// `listxattr`/`llistxattr`: an empty list.
    pub(super) fn listxattr(&self, path: u64) -> R {
        self.on_path(libc::AT_FDCWD, path, |p| self.fs.symlink_stat(p).map(drop))
    }

    pub(super) fn fgetxattr(&self, fd: u64) -> R {
        self.served(fd).map(|_| err(libc::ENODATA))
    }

    pub(super) fn flistxattr(&self, fd: u64) -> R {
        self.served(fd).map(|_| 0)
    }

    /// `setxattr`/`removexattr` (`follow`) and their `l` kinds: not
    /// supported (`cp -a` then keeps to the mode bits, as on a file system
    /// without them).
    pub(super) fn setxattr(&self, path: u64, follow: bool) -> R {
        self.on_path(libc::AT_FDCWD, path, |p| match follow {
            true => self.fs.stat(p).map(drop),
            false => self.fs.symlink_stat(p).map(drop),
        })
        .map(|r| if r == 0 { err(libc::EOPNOTSUPP) } else { r })
    }

    /// `fsetxattr`/`fremovexattr`: not supported.
    pub(super) fn fsetxattr(&self, fd: u64) -> R {
        self.served(fd).map(|_| err(libc::EOPNOTSUPP))
    }
}

/// An owner change; -1 keeps an id.
fn owner(uid: u64, gid: u64) -> Attr {
    let id = |v: u64| (v as u32 != u32::MAX).then_some(v as u32);
    Attr {
        uid: id(uid),
        gid: id(gid),
        ..Attr::none()
    }
}

/// `struct stat` as x86-64 Linux lays it out.
fn stat_bytes(s: &Stat) -> Vec<u8> {
    let mut st: libc::stat = lintel_sys::pod::zeroed();
    st.st_dev = s.dev;
    st.st_ino = s.ino;
    st.st_mode = s.mode;
    st.st_nlink = s.nlink;
    st.st_uid = s.uid;
    st.st_gid = s.gid;
    st.st_rdev = s.rdev;
    st.st_size = s.size as i64;
    st.st_blksize = s.blksize as i64;
    st.st_blocks = s.blocks as i64;
    st.st_atime = s.atime.sec;
    st.st_atime_nsec = s.atime.nsec as i64;
    st.st_mtime = s.mtime.sec;
    st.st_mtime_nsec = s.mtime.nsec as i64;
    st.st_ctime = s.ctime.sec;
    st.st_ctime_nsec = s.ctime.nsec as i64;
    lintel_sys::pod::bytes_of(&st).to_vec()
}

/// `struct statx` with the basic fields.
fn statx_bytes(s: &Stat) -> Vec<u8> {
    let mut x: libc::statx = lintel_sys::pod::zeroed();
    x.stx_mask = libc::STATX_BASIC_STATS;
    x.stx_blksize = s.blksize as u32;
    x.stx_nlink = s.nlink as u32;
    x.stx_uid = s.uid;
    x.stx_gid = s.gid;
    x.stx_mode = s.mode as u16;
    x.stx_ino = s.ino;
    x.stx_size = s.size;
    x.stx_blocks = s.blocks;
    let t = |t: lintel_fs::Timespec| {
        let mut ts: libc::statx_timestamp = lintel_sys::pod::zeroed();
        ts.tv_sec = t.sec;
        ts.tv_nsec = t.nsec;
        ts
    };
    x.stx_atime = t(s.atime);
    x.stx_mtime = t(s.mtime);
    x.stx_ctime = t(s.ctime);
    x.stx_rdev_major = libc::major(s.rdev);
    x.stx_rdev_minor = libc::minor(s.rdev);
    x.stx_dev_major = libc::major(s.dev);
    x.stx_dev_minor = libc::minor(s.dev);
    lintel_sys::pod::bytes_of(&x).to_vec()
}

/// `struct statfs` from the service's figures.
fn statfs_bytes(f: &lintel_fs::FsStat) -> Vec<u8> {
    let mut s: libc::statfs = lintel_sys::pod::zeroed();
    s.f_type = f.kind as _;
    s.f_bsize = f.block_size as _;
    s.f_blocks = f.blocks;
    s.f_bfree = f.blocks_free;
    s.f_bavail = f.blocks_available;
    s.f_files = f.files;
    s.f_ffree = f.files_free;
    s.f_namelen = f.name_max as _;
    s.f_frsize = f.fragment_size as _;
    let mut bytes = lintel_sys::pod::bytes_of(&s).to_vec();
    // `f_flags` follows `f_frsize` in the kernel's struct (the libc crate
    // keeps it among its private spare words).
    let at = std::mem::offset_of!(libc::statfs, f_frsize) + 8;
    bytes[at..at + 8].copy_from_slice(&f.flags.to_ne_bytes());
    bytes
}
