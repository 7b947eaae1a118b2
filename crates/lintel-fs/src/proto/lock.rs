//! Byte-range locks on the host file, held per open file: Linux's
//! open-file-description locks (`F_OFD_SETLK`), so two clients' opens of
//! one file conflict as two processes' would, and a lock goes when its
//! open file does (the last door to it dropped, or its client died). The
//! service holds one host open file per client open, so a client's
//! POSIX lock (`F_SETLK`) becomes a lock of that open file: the same
//! conflicts between processes; within one process, two opens of one file
//! conflict where POSIX locks would not (sqlite keeps one open per file
//! and process for this very reason). A client's `flock` is the host's
//! `flock` of that open file ([`whole_file`]): as on Linux it holds
//! whatever the access mode and never meets a byte-range lock.
//!
//! A client holding a descriptor of that very open file description (a
//! mapped handle's host descriptor, `Session::attach`) takes the same
//! locks through it without a call: the kernel sees one owner either way.
#![allow(unsafe_code)]

use std::os::fd::{AsRawFd, BorrowedFd};

use crate::proto::{FsError, LockHolder, LockKind};

fn flock(kind: LockKind, start: u64, len: u64) -> Result<libc::flock, FsError> {
    let too_far = |v: u64| v > i64::MAX as u64;
    if too_far(start) || too_far(len) || start.checked_add(len).is_none_or(too_far) {
        return Err(FsError::Invalid("a lock beyond the largest offset".into()));
    }
    let l_type = match kind {
        LockKind::Read => libc::F_RDLCK,
        LockKind::Write => libc::F_WRLCK,
        LockKind::Unlock => libc::F_UNLCK,
    };
    Ok(libc::flock {
        l_type: l_type as i16,
        l_whence: libc::SEEK_SET as i16,
        l_start: start as i64,
        l_len: len as i64,
        // OFD locks want 0 here.
        l_pid: 0,
    })
}

/// Take, change or drop the lock (`Unlock`) on `[start, start + len)`
/// (`len` 0: to any end) without waiting: `EAGAIN` if another open file
/// holds a conflicting one.
pub(crate) fn set(fd: BorrowedFd<'_>, kind: LockKind, start: u64, len: u64) -> Result<(), FsError> {
    let fl = flock(kind, start, len)?;
    // SAFETY: F_OFD_SETLK reads one `struct flock`, which `fl` is, for the
    // duration of the call; `fd` is open.
    let r = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_OFD_SETLK, &fl) };
    if r < 0 {
        return Err(std::io::Error::last_os_error().into());
    }
    Ok(())
}

/// The first lock of another open file that would conflict with `kind`
/// on the range, if any.
pub(crate) fn test(
    fd: BorrowedFd<'_>,
    kind: LockKind,
    start: u64,
    len: u64,
) -> Result<Option<LockHolder>, FsError> {
    let mut fl = flock(kind, start, len)?;
    // SAFETY: F_OFD_GETLK reads and writes one `struct flock`, `fl`, for
    // the duration of the call; `fd` is open.
    let r = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_OFD_GETLK, &mut fl) };
    if r < 0 {
        return Err(std::io::Error::last_os_error().into());
    }
    Ok((fl.l_type != libc::F_UNLCK as i16).then_some(LockHolder {
        kind: if fl.l_type == libc::F_WRLCK as i16 {
            LockKind::Write
        } else {
            LockKind::Read
        },
        start: fl.l_start as u64,
        len: fl.l_len as u64,
        // The holder is another client's open: no pid a client could use.
        pid: -1,
    }))
}

/// `flock(2)` the open file `fd` without waiting (`Unlock` drops its
/// lock): `EAGAIN` if another open file holds a conflicting one.
pub(crate) fn whole_file(fd: BorrowedFd<'_>, kind: LockKind) -> Result<(), FsError> {
    let op = match kind {
        LockKind::Read => libc::LOCK_SH,
        LockKind::Write => libc::LOCK_EX,
        LockKind::Unlock => libc::LOCK_UN,
    };
    // SAFETY: flock takes a descriptor and flags, no memory; `fd` is open.
    let r = unsafe { libc::flock(fd.as_raw_fd(), op | libc::LOCK_NB) };
    if r < 0 {
        return Err(std::io::Error::last_os_error().into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn two_open_files_conflict_and_unlocking_frees() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, b"0123456789").unwrap();
        let a = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&p)
            .unwrap();
        let b = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&p)
            .unwrap();
        set(a.as_fd(), LockKind::Write, 2, 3).unwrap();
        let e = set(b.as_fd(), LockKind::Read, 4, 1).unwrap_err();
        assert_eq!(e.errno(), libc::EAGAIN);
        set(b.as_fd(), LockKind::Write, 5, 0).unwrap();
        let h = test(b.as_fd(), LockKind::Read, 0, 10).unwrap().unwrap();
        assert_eq!((h.kind, h.start, h.len), (LockKind::Write, 2, 3));
        set(a.as_fd(), LockKind::Unlock, 0, 0).unwrap();
        assert_eq!(test(b.as_fd(), LockKind::Write, 0, 5).unwrap(), None);
        set(b.as_fd(), LockKind::Read, 0, 5).unwrap();
        assert!(set(a.as_fd(), LockKind::Write, 0, 0).is_err());
        drop(b);
        set(a.as_fd(), LockKind::Write, 0, 0).unwrap();
        assert!(set(a.as_fd(), LockKind::Read, u64::MAX, 1).is_err());
    }
}
