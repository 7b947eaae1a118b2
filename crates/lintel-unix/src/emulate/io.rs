//! A served file's contents: `read`, `write` and their vectored and
//! positional kinds (and the preload library's wrappers' direct ones),
//! `lseek`, `truncate` and `ftruncate`, `fsync`, `fallocate`, `fadvise64`,
//! `ioctl`'s `FIONREAD`, and the in-kernel copies, which cannot reach a
//! served file.

use lintel_fs::{FsError, OpenOptions, Whence};

use super::descriptors::Served;
use super::{Emulation, R, err, fs_err};
use crate::user;

impl Emulation {
    pub(super) fn read(&self, fd: u64, buf: u64, count: u64, at: Option<u64>) -> R {
        let s = self.served(fd)?;
        if s.dir {
            return Some(read_dir(&s, count, at));
        }
        // Straight into the program's buffer (checked through the kernel
        // first): the mapped window's memcpy or the pipe's read is the only
        // copy.
        let n = user::with_writable(buf, (count as usize).min(MAX_IO), |v| {
            self.read_served(fd as i32, &s, v, at)
        });
        Some(match n {
            Ok(Ok(n)) => n as i64,
            Ok(Err(e)) => fs_err(e),
            Err(e) => err(e),
        })
    }

    pub(super) fn write(&self, fd: u64, buf: u64, count: u64, at: Option<u64>) -> R {
        let s = self.served(fd)?;
        let mut v = vec![0u8; (count as usize).min(MAX_IO)];
        if let Err(e) = user::read_into(buf, &mut v) {
            return Some(err(e));
        }
        let n = match at {
            None => s.file.write_shared(&v),
            Some(at) => s.file.write_at(&v, at),
        };
        Some(n.map_or_else(fs_err, |n| n as i64))
    }

    /// `readv`/`writev` and their positional kinds: each buffer in turn,
    /// stopping at a short one, as the kernel does for a regular file.
    pub(super) fn vectored(&self, fd: u64, iov: u64, count: u64, at: Option<u64>, dir: Dir) -> R {
        let s = self.served(fd)?;
        // Even with no bytes to move, the open must allow the direction.
        let acc = s.flags & libc::O_ACCMODE;
        if matches!(
            (dir, acc),
            (Dir::Read, libc::O_WRONLY) | (Dir::Write, libc::O_RDONLY)
        ) {
            return Some(err(libc::EBADF));
        }
        if count > libc::UIO_MAXIOV as u64 {
            return Some(err(libc::EINVAL));
        }
        let mut raw = vec![0u8; count as usize * 16];
        if let Err(e) = user::read_into(iov, &mut raw) {
            return Some(err(e));
        }
        // Linux checks the buffers' whole length against the offset before
        // it moves anything; each read or write below checks only its own.
        let (total, buffers) = match whole_length(&raw) {
            Ok(w) => w,
            Err(e) => return Some(e),
        };
        if s.dir && matches!(dir, Dir::Read) {
            return Some(if total == 0 { 0 } else { read_dir(&s, total, at) });
        }
        if buffers > 1
            && let Err(e) = s.file.check_length(at, total as usize)
        {
            return Some(fs_err(e));
        }
        let mut done: u64 = 0;
        for v in raw.chunks_exact(16) {
            let base = u64::from_ne_bytes(v[..8].try_into().expect("8 bytes"));
            let len = u64::from_ne_bytes(v[8..].try_into().expect("8 bytes"));
            if len == 0 {
                continue;
            }
            let pos = at.map(|a| a + done);
            let n = match dir {
                Dir::Read => self.read(fd, base, len, pos)?,
                Dir::Write => self.write(fd, base, len, pos)?,
            };
            if n < 0 {
                return Some(if done > 0 { done as i64 } else { n });
            }
            done += n as u64;
            if (n as u64) < len {
                break;
            }
        }
        Some(done as i64)
    }

    /// A read into a buffer of the program's that the caller vouches for
    /// (the preload library's `read`/`pread` wrappers): straight from the
    /// window into it, no copy through the kernel. `None`: not served.
    pub fn read_to(&self, fd: i32, buf: &mut [u8], at: Option<u64>) -> R {
        // Under the table's read lock, not a clone of the entry: this is
        // the hot path (a concurrent close waits for it).
        self.fds.with(fd, |s| {
            if s.flags & libc::O_PATH != 0 {
                return err(libc::EBADF);
            }
            if s.dir {
                return read_dir(s, buf.len() as u64, at);
            }
            let buf_len = buf.len().min(MAX_IO);
            let n = self.read_served(fd, s, &mut buf[..buf_len], at);
            n.map_or_else(fs_err, |n| n as i64)
        })
    }

    /// Read served file `s` (descriptor `fd`) at its shared offset or at
    /// `at`, as both read paths do. Its window is attached at its first
    /// read (`lintel_fs::File`): from then on the window's cache is the
    /// descriptor's prefetch hint.
    fn read_served(&self, fd: i32, s: &Served, buf: &mut [u8], at: Option<u64>) -> Result<usize, FsError> {
        let n = match at {
            None => s.file.read_shared(buf),
            Some(at) => s.file.read_at(buf, at),
        };
        if self.fds.hint(fd) == 0 {
            let hint = s.file.cache_hint();
            if hint != 0 {
                self.fds.set_hint(fd, hint);
            }
        }
        n
    }

    /// A write from a buffer the caller vouches for (see [`Self::read_to`]).
    pub fn write_from(&self, fd: i32, buf: &[u8], at: Option<u64>) -> R {
        self.fds.with(fd, |s| {
            if s.flags & libc::O_PATH != 0 {
                return err(libc::EBADF);
            }
            let buf = &buf[..buf.len().min(MAX_IO)];
            let n = match at {
                None => s.file.write_shared(buf),
                Some(at) => s.file.write_at(buf, at),
            };
            n.map_or_else(fs_err, |n| n as i64)
        })
    }

    pub(super) fn lseek(&self, fd: u64, off: u64, whence: u64) -> R {
        let s = self.served(fd)?;
        let (whence, off) = match whence as i32 {
            libc::SEEK_SET if (off as i64) >= 0 => (Whence::Start, off as i64),
            libc::SEEK_CUR => (Whence::Current, off as i64),
            libc::SEEK_END => (Whence::End, off as i64),
            libc::SEEK_DATA => (Whence::Data, off as i64),
            libc::SEEK_HOLE => (Whence::Hole, off as i64),
            _ => return Some(err(libc::EINVAL)),
        };
        Some(s.file.seek_whence(whence, off).map_or_else(fs_err, |p| p as i64))
    }

    /// `truncate`: the service opens the file for writing and sets its
    /// length.
    pub(super) fn truncate(&self, path: u64, len: u64) -> R {
        self.on_path(libc::AT_FDCWD, path, |p| {
            // A negative length is refused before the path is looked up.
            if (len as i64) < 0 {
                return Err(FsError::Os { errno: libc::EINVAL });
            }
            let mut o = OpenOptions::new();
            o.write(true);
            self.fs.open_with(p, &o)?.set_len(len)
        })
    }

    pub(super) fn ftruncate(&self, fd: u64, len: u64) -> R {
        self.served(fd)
            .map(|s| s.file.set_len(len).map_or_else(fs_err, |()| 0))
    }

    /// `fsync`, or `fdatasync` (`data_only`).
    pub(super) fn fsync(&self, fd: u64, data_only: bool) -> R {
        self.served(fd).map(|s| {
            let r = if data_only {
                s.file.sync_data()
            } else {
                s.file.sync_all()
            };
            r.map_or_else(fs_err, |()| 0)
        })
    }

    pub(super) fn fallocate(&self, fd: u64, mode: u64, at: u64, len: u64) -> R {
        self.served(fd)
            .map(|s| s.file.allocate(mode as u32, at, len).map_or_else(fs_err, |()| 0))
    }

    /// `fadvise64`: taken, and nothing done.
    pub(super) fn fadvise(&self, fd: u64) -> R {
        self.served(fd).map(|_| 0)
    }

    /// `copy_file_range`, `sendfile`, `splice` between `a` and `b`:
    /// in-kernel copies cannot reach a served file, so `e` (programs fall
    /// back to reading and writing).
    pub(super) fn kernel_copy(&self, a: u64, b: u64, e: i32) -> R {
        (self.served(a).is_some() || self.served(b).is_some()).then(|| err(e))
    }

    /// `ioctl` on a served file: `FIONREAD` as Linux answers it on a
    /// regular file (its size less the offset, as an `int`), close-on-exec
    /// on the descriptor itself; anything else is not a terminal's
    /// (`ENOTTY`).
    pub(super) fn ioctl(&self, fd: u64, req: u64, arg: u64) -> R {
        let s = self.served(fd)?;
        Some(match req {
            r if r == libc::FIONREAD && !s.dir => {
                let size = match s.file.metadata() {
                    Ok(st) => st.size,
                    Err(e) => return Some(fs_err(e)),
                };
                let at = match s.file.seek_shared(std::io::SeekFrom::Current(0)) {
                    Ok(at) => at,
                    Err(e) => return Some(fs_err(e)),
                };
                // The kernel stores the 64-bit difference as an int.
                let n = size.wrapping_sub(at) as i32;
                user::write(arg, &n.to_ne_bytes()).map_or_else(err, |()| 0)
            }
            r if r == libc::FIOCLEX || r == libc::FIONCLEX => return None,
            _ => err(libc::ENOTTY),
        })
    }
}

const MAX_IO: usize = 16 << 20;

/// What a `read` of `len` bytes from served directory `s` (at its offset,
/// or at `at`) answers: `EINVAL` where they would pass the largest offset,
/// which Linux checks before it finds a directory (whose end offset may be
/// near it), else `EISDIR`.
fn read_dir(s: &Served, len: u64, at: Option<u64>) -> i64 {
    match s.file.check_length(at, len as usize) {
        Ok(()) => err(libc::EISDIR),
        Err(e) => fs_err(e),
    }
}

/// The whole length of a vectored call's buffers (`iov`, its iovecs as
/// read), cut to Linux's `MAX_RW_COUNT`, and how many are not empty; or
/// `EINVAL` for a length past `ssize_t`, as Linux refuses it first.
fn whole_length(iov: &[u8]) -> Result<(u64, usize), i64> {
    let (mut total, mut buffers) = (0u64, 0);
    for v in iov.chunks_exact(16) {
        let len = u64::from_ne_bytes(v[8..].try_into().expect("8 bytes"));
        if len > i64::MAX as u64 {
            return Err(err(libc::EINVAL));
        }
        total = total.saturating_add(len);
        buffers += usize::from(len > 0);
    }
    Ok((total.min(lintel_fs::MAX_RW_COUNT as u64), buffers))
}

/// Which way a vectored call moves data.
#[derive(Clone, Copy)]
pub(super) enum Dir {
    Read,
    Write,
}

/// The offset of a `preadv`/`pwritev` (`preadv2` and `pwritev2` take -1
/// for the file's own offset).
pub(super) fn vectored_at(nr: i64, a: [u64; 6]) -> Option<u64> {
    let v2 = nr == libc::SYS_preadv2 || nr == libc::SYS_pwritev2;
    (!(v2 && a[3] as i64 == -1)).then_some(a[3])
}
