//! A descriptor of an exported file on a read-only mount of its own, for
//! clients of a read-only export that map the file shared.
//!
//! A host descriptor lets its holder do more than read: `fchmod`,
//! `fchown`, `futimens` and `fsetxattr` work on any descriptor of a file
//! one owns. So the service never hands out one that reaches the
//! export's own mount. It clones the file's mount alone (`open_tree`
//! with `OPEN_TREE_CLONE`: a detached bind mount of that one file), makes
//! the clone read-only, `nosuid` and `nodev` (`mount_setattr`), and opens
//! the file through it: every change through that descriptor fails with
//! `EROFS`, as on a read-only mount, and a shared mapping of it is the
//! host's page cache, one copy for every process.
//!
//! Cloning a mount needs `CAP_SYS_ADMIN` over the mount namespace. A
//! service without it does the same in a short-lived child that first
//! enters a user and mount namespace of its own (where it has that
//! capability over a copy of the mounts), finds the file there by the
//! path the kernel reports for it, and sends the descriptor back. The
//! result must name the same file (device and inode) as the open file;
//! a file renamed or removed in between is refused.
#![allow(unsafe_code)]

use std::ffi::CString;
use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};

use rustix::fs::{CWD, Mode, OFlags};
use rustix::mount::{OpenTreeFlags, open_tree};
use rustix::net::{
    AddressFamily, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags, SocketFlags, SocketType,
};

/// A read-only descriptor of `fd`'s file on a read-only clone of its
/// mount (see the module docs).
pub(crate) fn reopen_read_only(fd: &OwnedFd) -> io::Result<OwnedFd> {
    let flags =
        OpenTreeFlags::OPEN_TREE_CLONE | OpenTreeFlags::OPEN_TREE_CLOEXEC | OpenTreeFlags::AT_EMPTY_PATH;
    let view = match open_tree(fd, c"", flags) {
        Ok(tree) if !via_namespace_forced() => seal_and_open(tree.as_fd())?,
        Ok(_) | Err(rustix::io::Errno::PERM) => in_a_namespace_of_its_own(fd)?,
        Err(e) => return Err(e.into()),
    };
    let (a, b) = (rustix::fs::fstat(fd)?, rustix::fs::fstat(&view)?);
    if (a.st_dev, a.st_ino) != (b.st_dev, b.st_ino) {
        // The file moved or went while it was looked up again.
        return Err(io::Error::from_raw_os_error(libc::ENOENT));
    }
    Ok(view)
}

/// Test knob: take the unprivileged way even where the direct one works.
fn via_namespace_forced() -> bool {
    std::env::var_os("LINTEL_FS_RO_VIA_USERNS").is_some_and(|v| v == "1")
}

/// Make the detached mount `tree` read-only and open its file through it.
/// System calls only, nothing allocated: it also runs in a forked child.
fn seal_and_open(tree: BorrowedFd<'_>) -> rustix::io::Result<OwnedFd> {
    // struct mount_attr: attr_set, attr_clr, propagation, userns_fd.
    let attr: [u64; 4] = [
        libc::MOUNT_ATTR_RDONLY | libc::MOUNT_ATTR_NOSUID | libc::MOUNT_ATTR_NODEV,
        0,
        0,
        0,
    ];
    // SAFETY: mount_setattr reads `size_of_val(&attr)` bytes at `attr`,
    // which is a live stack array, and the empty path with AT_EMPTY_PATH
    // names `tree` itself.
    let r = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            tree.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_EMPTY_PATH,
            attr.as_ptr(),
            std::mem::size_of_val(&attr),
        )
    };
    if r != 0 {
        return Err(rustix::io::Errno::from_raw_os_error(
            io::Error::last_os_error().raw_os_error().unwrap_or(libc::EPERM),
        ));
    }
    let mut buf = [0u8; 32];
    rustix::fs::open(
        proc_fd(tree.as_raw_fd(), &mut buf),
        OFlags::RDONLY | OFlags::CLOEXEC,
        Mode::empty(),
    )
}

/// `/proc/self/fd/N`, written into `buf` (no allocation).
fn proc_fd(fd: i32, buf: &mut [u8; 32]) -> &std::ffi::CStr {
    const PREFIX: &[u8] = b"/proc/self/fd/";
    buf[..PREFIX.len()].copy_from_slice(PREFIX);
    let mut digits = [0u8; 10];
    let (mut n, mut len) = (fd.unsigned_abs(), 0);
    loop {
        digits[len] = b'0' + (n % 10) as u8;
        len += 1;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    for i in 0..len {
        buf[PREFIX.len() + i] = digits[len - 1 - i];
    }
    buf[PREFIX.len() + len] = 0;
    std::ffi::CStr::from_bytes_until_nul(buf).expect("terminated above")
}

/// The unprivileged way: a forked child enters a user and mount namespace
/// of its own, clones the file's mount there by path, and sends back the
/// descriptor it opens through the read-only clone.
fn in_a_namespace_of_its_own(fd: &OwnedFd) -> io::Result<OwnedFd> {
    let path = CString::new(crate::service::host::link_of(fd)?)?;
    let (ours, theirs) = rustix::net::socketpair(
        AddressFamily::UNIX,
        SocketType::SEQPACKET,
        SocketFlags::CLOEXEC,
        None,
    )?;
    // A raw fork: no atfork handlers run, and the child makes system calls
    // only (nothing allocated, no lock taken) before it exits.
    // SAFETY: see above; the child never returns from this function.
    let pid = unsafe { libc::syscall(libc::SYS_fork) };
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    if pid == 0 {
        let sent = (|| -> rustix::io::Result<()> {
            // SAFETY: namespaces only (no FILES): this process's
            // descriptors stay one table.
            unsafe {
                rustix::thread::unshare_unsafe(
                    rustix::thread::UnshareFlags::NEWUSER | rustix::thread::UnshareFlags::NEWNS,
                )?
            };
            let tree = open_tree(
                CWD,
                path.as_c_str(),
                OpenTreeFlags::OPEN_TREE_CLONE | OpenTreeFlags::OPEN_TREE_CLOEXEC,
            )?;
            let view = seal_and_open(tree.as_fd())?;
            send_fd(theirs.as_fd(), view.as_fd())
        })();
        // SAFETY: _exit ends the child at once, running nothing of the
        // parent's (no destructors, no atexit handlers).
        unsafe { libc::_exit(if sent.is_ok() { 0 } else { 1 }) }
    }
    drop(theirs);
    let got = recv_fd(ours.as_fd());
    let _ = rustix::process::waitpid(
        rustix::process::Pid::from_raw(pid as i32),
        rustix::process::WaitOptions::empty(),
    );
    // No read-only mount could be made (no CAP_SYS_ADMIN, and no user
    // namespace): the file cannot be mapped shared here.
    got.ok_or_else(|| io::Error::from_raw_os_error(libc::ENODEV))
}

fn send_fd(sock: BorrowedFd<'_>, fd: BorrowedFd<'_>) -> rustix::io::Result<()> {
    let mut space = [MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut cmsg = SendAncillaryBuffer::new(&mut space);
    let fds = [fd];
    cmsg.push(SendAncillaryMessage::ScmRights(&fds));
    rustix::net::sendmsg(sock, &[io::IoSlice::new(b"f")], &mut cmsg, SendFlags::empty())?;
    Ok(())
}

fn recv_fd(sock: BorrowedFd<'_>) -> Option<OwnedFd> {
    let mut space = [MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut cmsg = RecvAncillaryBuffer::new(&mut space);
    let mut byte = [0u8; 1];
    rustix::net::recvmsg(
        sock,
        &mut [io::IoSliceMut::new(&mut byte)],
        &mut cmsg,
        RecvFlags::CMSG_CLOEXEC,
    )
    .ok()?;
    let mut got = None;
    for m in cmsg.drain() {
        if let RecvAncillaryMessage::ScmRights(fds) = m {
            for fd in fds {
                got.get_or_insert(fd);
            }
        }
    }
    got
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_paths_are_written_without_allocating() {
        let mut buf = [0u8; 32];
        assert_eq!(proc_fd(0, &mut buf).to_bytes(), b"/proc/self/fd/0");
        assert_eq!(proc_fd(1234567, &mut buf).to_bytes(), b"/proc/self/fd/1234567");
        assert_eq!(
            proc_fd(i32::MAX, &mut buf).to_bytes(),
            b"/proc/self/fd/2147483647"
        );
    }
}
