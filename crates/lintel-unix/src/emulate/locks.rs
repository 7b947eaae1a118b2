//! Locks on a served file: `fcntl`'s byte-range locks and `flock`, both
//! the service's, per open file.

use lintel_fs::LockKind;

use super::descriptors::Served;
use super::{Emulation, R, err, fs_err};
use crate::user;

impl Emulation {
    /// `fcntl`'s record locks on a served file (`struct flock` at `arg`),
    /// as the service's open-file locks.
    pub(super) fn record_lock(&self, s: &Served, cmd: i32, arg: u64) -> i64 {
        // struct flock: l_type i16, l_whence i16, l_start i64 at 8, l_len
        // i64 at 16, l_pid i32 at 24; 32 bytes.
        let mut fl = [0u8; 32];
        if let Err(e) = user::read_into(arg, &mut fl) {
            return err(e);
        }
        let word = |at: usize| i64::from_ne_bytes(fl[at..at + 8].try_into().expect("8 bytes"));
        let l_type = i16::from_ne_bytes([fl[0], fl[1]]) as i32;
        let whence = i16::from_ne_bytes([fl[2], fl[3]]) as i32;
        let (start, len) = (word(8), word(16));
        let base = match whence {
            libc::SEEK_SET => 0,
            libc::SEEK_CUR => match s.file.seek_shared(std::io::SeekFrom::Current(0)) {
                Ok(o) => o as i64,
                Err(e) => return fs_err(e),
            },
            libc::SEEK_END => match s.file.metadata() {
                Ok(st) => st.size as i64,
                Err(e) => return fs_err(e),
            },
            _ => return err(libc::EINVAL),
        };
        // A negative length covers the bytes before the start.
        let (from, len) = match base.checked_add(start) {
            Some(f) if len < 0 => (f.checked_add(len), len.unsigned_abs()),
            f => (f, len as u64),
        };
        let Some(from) = from.filter(|f| *f >= 0) else {
            return err(libc::EINVAL);
        };
        let kind = match l_type {
            libc::F_RDLCK => LockKind::Read,
            libc::F_WRLCK => LockKind::Write,
            libc::F_UNLCK => LockKind::Unlock,
            _ => return err(libc::EINVAL),
        };
        let acc = s.flags & libc::O_ACCMODE;
        let testing = matches!(cmd, libc::F_GETLK | libc::F_OFD_GETLK);
        if !testing
            && ((kind == LockKind::Read && acc == libc::O_WRONLY)
                || (kind == LockKind::Write && acc == libc::O_RDONLY))
        {
            return err(libc::EBADF);
        }
        if testing {
            if kind == LockKind::Unlock {
                return err(libc::EINVAL);
            }
            return match s.file.test_lock(kind, from as u64, len) {
                Ok(None) => user::write(arg, &(libc::F_UNLCK as i16).to_ne_bytes()).map_or_else(err, |()| 0),
                Ok(Some(h)) => {
                    let t = if h.kind == LockKind::Write {
                        libc::F_WRLCK
                    } else {
                        libc::F_RDLCK
                    };
                    fl[0..2].copy_from_slice(&(t as i16).to_ne_bytes());
                    fl[2..4].copy_from_slice(&(libc::SEEK_SET as i16).to_ne_bytes());
                    fl[8..16].copy_from_slice(&(h.start as i64).to_ne_bytes());
                    fl[16..24].copy_from_slice(&(h.len as i64).to_ne_bytes());
                    fl[24..28].copy_from_slice(&h.pid.to_ne_bytes());
                    user::write(arg, &fl).map_or_else(err, |()| 0)
                }
                Err(e) => fs_err(e),
            };
        }
        let wait = matches!(cmd, libc::F_SETLKW | libc::F_OFD_SETLKW);
        s.file
            .lock(kind, from as u64, len, wait)
            .map_or_else(fs_err, |()| 0)
    }

    /// `flock(2)` on a served file: the host's `flock` of the service's
    /// open file, so it holds whatever the access mode and apart from the
    /// byte-range locks of `fcntl`, as on Linux.
    pub(super) fn flock(&self, fd: u64, op: u64) -> R {
        let s = self.served(fd)?;
        let op = op as i32;
        let kind = match op & !libc::LOCK_NB {
            libc::LOCK_SH => LockKind::Read,
            libc::LOCK_EX => LockKind::Write,
            libc::LOCK_UN => LockKind::Unlock,
            _ => return Some(err(libc::EINVAL)),
        };
        let r = s.file.flock(kind, op & libc::LOCK_NB == 0);
        Some(match r {
            Err(e) if e.errno() == libc::EAGAIN => err(libc::EWOULDBLOCK),
            r => r.map_or_else(fs_err, |()| 0),
        })
    }
}
