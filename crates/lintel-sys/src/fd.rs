//! Descriptors: where the runtime keeps its own (the floor), passing them
//! to a child, taking an inherited one, eventfds and pidfds.

use std::io;
use std::os::fd::{BorrowedFd, OwnedFd};

/// The lowest number the runtime keeps its own descriptors at (0: where
/// the kernel puts them). See [`crate::set_descriptor_floor`].
static FLOOR: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);

/// Keep descriptors this crate makes at or above `floor` (negative: 0).
pub fn set_descriptor_floor(floor: i32) {
    FLOOR.store(floor.max(0), std::sync::atomic::Ordering::Relaxed);
}

/// The floor [`set_descriptor_floor`] set (0: none).
pub fn descriptor_floor() -> i32 {
    FLOOR.load(std::sync::atomic::Ordering::Relaxed)
}

/// Make descriptor number `at` refer to what `with` does (`dup3`),
/// closing what it referred to.
pub fn replace_fd(with: BorrowedFd<'_>, at: BorrowedFd<'_>) -> io::Result<()> {
    use std::os::fd::{AsRawFd, FromRawFd};
    // SAFETY: the number `at` stays open (now to `with`'s file) and keeps
    // its one owner, who closes it as before; the temporary OwnedFd is
    // forgotten, never closed here.
    let mut target = std::mem::ManuallyDrop::new(unsafe { OwnedFd::from_raw_fd(at.as_raw_fd()) });
    rustix::io::dup3(with, &mut target, rustix::io::DupFlags::CLOEXEC)?;
    Ok(())
}

/// `fd` moved to the lowest free number at or above the floor (kept where
/// it is if there is no floor, or no room above it).
pub fn above_floor(fd: OwnedFd) -> OwnedFd {
    let floor = descriptor_floor();
    if floor == 0 || std::os::fd::AsRawFd::as_raw_fd(&fd) >= floor {
        return fd;
    }
    rustix::io::fcntl_dupfd_cloexec(&fd, floor).unwrap_or(fd)
}

/// A non-blocking eventfd, for waking the watcher thread.
pub fn eventfd() -> io::Result<OwnedFd> {
    use rustix::event::EventfdFlags;
    Ok(above_floor(rustix::event::eventfd(
        0,
        EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK,
    )?))
}

/// Make an eventfd readable (add one to its counter).
pub fn eventfd_signal(fd: BorrowedFd<'_>) {
    let _ = rustix::io::write(fd, &1u64.to_ne_bytes());
}

/// Reset an eventfd's counter (it is no longer readable).
pub fn eventfd_clear(fd: BorrowedFd<'_>) {
    let mut b = [0u8; 8];
    let _ = rustix::io::read(fd, &mut b);
}

/// A pidfd for process `pid`: readable once the process has exited.
pub fn pidfd(pid: u32) -> io::Result<OwnedFd> {
    let pid = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "bad pid"))?;
    Ok(above_floor(rustix::process::pidfd_open(
        pid,
        rustix::process::PidfdFlags::empty(),
    )?))
}

/// Whether `fd` is readable now (a pidfd: its process has exited),
/// without waiting.
pub fn readable(fd: BorrowedFd<'_>) -> bool {
    use rustix::event::{PollFd, PollFlags, poll};
    let mut fds = [PollFd::new(&fd, PollFlags::IN)];
    let now = rustix::event::Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    matches!(poll(&mut fds, Some(&now)), Ok(n) if n > 0)
}

/// Inode number identifying an open file (socket ends have distinct ones).
pub fn inode(fd: BorrowedFd<'_>) -> io::Result<u64> {
    Ok(rustix::fs::fstat(fd)?.st_ino)
}

/// Clear close-on-exec so a child started with `exec` inherits `fd`.
/// Async-signal-safe (one raw syscall): callable between fork and exec.
pub fn clear_cloexec(fd: BorrowedFd<'_>) -> io::Result<()> {
    Ok(rustix::io::fcntl_setfd(fd, rustix::io::FdFlags::empty())?)
}

/// Make `fd` inherited by the child `cmd` starts (and only by it): close-on-
/// exec is cleared between fork and exec in the child, never in this process,
/// so children other threads start meanwhile do not get it.
pub fn inherit_fd(cmd: &mut std::process::Command, fd: BorrowedFd<'_>) {
    use std::os::fd::AsRawFd;
    use std::os::unix::process::CommandExt;
    let raw = fd.as_raw_fd();
    // SAFETY: the closure runs in the forked child before exec and only
    // makes one raw fcntl syscall, which is async-signal-safe; `raw` stays
    // open in the parent until `spawn` returns, so it is open in the child.
    unsafe {
        cmd.pre_exec(move || clear_cloexec(BorrowedFd::borrow_raw(raw)));
    }
}

/// Take ownership of a descriptor this process inherited, named by number.
/// Refuses numbers that are not open sockets.
pub fn take_inherited_socket(raw: i32) -> io::Result<OwnedFd> {
    if raw >= 3 {
        // SAFETY: fstat on a raw number only reads; an unopened number fails.
        let st = rustix::fs::fstat(unsafe { BorrowedFd::borrow_raw(raw) })?;
        if rustix::fs::FileType::from_raw_mode(st.st_mode) != rustix::fs::FileType::Socket {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "inherited descriptor is not a socket",
            ));
        }
    }
    take_inherited(raw)
}

/// Take ownership of a descriptor this process inherited, named by number
/// (as a parent passes one on a command line), and make it close-on-exec
/// again. Refuses numbers below 3 and numbers that are not open.
pub fn take_inherited(raw: i32) -> io::Result<OwnedFd> {
    use std::os::fd::FromRawFd;
    if raw < 3 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "not an inherited descriptor",
        ));
    }
    // SAFETY: `fcntl(F_GETFD)` on a raw number only reads; an unopened
    // number fails with EBADF.
    rustix::io::fcntl_getfd(unsafe { BorrowedFd::borrow_raw(raw) })?;
    // SAFETY: the number is open (checked) and was handed to this process
    // for its caller to own; the caller takes each number once, so no other
    // owner exists.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    rustix::io::fcntl_setfd(&fd, rustix::io::FdFlags::CLOEXEC)?;
    Ok(fd)
}
