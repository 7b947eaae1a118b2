//! userfaultfd: the kernel's channel for a process's page faults, handled
//! by another thread or process. A client makes one per session and hands
//! the service a copy; the service's pager reads the client's faults on
//! its window mappings and resolves them.
//!
//! The five operations needed are bound here directly over the kernel's
//! ABI (structures and ioctl numbers from `linux-raw-sys`, as rustix
//! uses); the `userfaultfd` crate generates its bindings with bindgen at
//! build time and adds a `nix` dependency for the same five calls.
#![allow(unsafe_code)]

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use linux_raw_sys::general as k;
use linux_raw_sys::ioctl as io;

/// The features a session's userfaultfd needs: faults on shared memory
/// both where the page is missing from the memfd and where it is there
/// but not mapped in the client (minor faults).
const FEATURES: u64 = (k::UFFD_FEATURE_MISSING_SHMEM | k::UFFD_FEATURE_MINOR_SHMEM) as u64;

/// A userfaultfd of this process, ready for [`register`]. It reports
/// faults from user mode only (what unprivileged processes may ask for);
/// window bytes are only ever touched by `memcpy` in user mode.
pub(crate) fn create() -> std::io::Result<OwnedFd> {
    let flags = (libc::O_CLOEXEC | libc::O_NONBLOCK) as libc::c_long | k::UFFD_USER_MODE_ONLY as libc::c_long;
    // SAFETY: the userfaultfd system call takes flags and returns a new
    // descriptor or -1; nothing of ours is touched.
    let fd = unsafe { libc::syscall(libc::SYS_userfaultfd, flags) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a descriptor the kernel just gave us, owned by nobody else.
    let fd = lintel::above_descriptor_floor(unsafe { OwnedFd::from_raw_fd(fd as i32) });
    let mut api = k::uffdio_api {
        api: k::UFFD_API as u64,
        features: FEATURES,
        ioctls: 0,
    };
    ioctl(&fd, io::UFFDIO_API, &mut api)?;
    Ok(fd)
}

fn ioctl<T>(fd: &impl AsRawFd, request: u32, arg: &mut T) -> std::io::Result<()> {
    // SAFETY: `request` is one of the userfaultfd ioctls whose argument is
    // a `T` (each caller passes the matching structure); the kernel reads
    // and writes only that structure.
    let r = unsafe { libc::ioctl(fd.as_raw_fd(), request as _, arg as *mut T) };
    if r < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// Report faults in `addr..addr+len` (a shared memfd mapping of this
/// process) to `uffd`: both missing and minor faults.
pub(crate) fn register(uffd: &OwnedFd, addr: u64, len: u64) -> std::io::Result<()> {
    let mut reg = k::uffdio_register {
        range: k::uffdio_range { start: addr, len },
        mode: (k::UFFDIO_REGISTER_MODE_MISSING | k::UFFDIO_REGISTER_MODE_MINOR) as u64,
        ioctls: 0,
    };
    ioctl(uffd, io::UFFDIO_REGISTER, &mut reg)
}

/// Map the memfd's pages at `addr..addr+len` of the uffd's process, and
/// wake threads waiting on faults there. The pages must be in the memfd
/// (written through another mapping first: a page missing from the memfd
/// fails the call with `EFAULT`); pages already mapped there are skipped. `Err` if the range is not registered (the client lied or
/// unmapped it).
pub(crate) fn resolve(uffd: &OwnedFd, addr: u64, len: u64) -> std::io::Result<()> {
    let (mut at, end) = (addr, addr + len);
    while at < end {
        let mut c = k::uffdio_continue {
            range: k::uffdio_range {
                start: at,
                len: end - at,
            },
            mode: 0,
            mapped: 0,
        };
        match ioctl(uffd, io::UFFDIO_CONTINUE, &mut c) {
            Ok(()) => return Ok(()),
            // A page already mapped stops the ioctl there: skip it.
            Err(e) if e.raw_os_error() == Some(libc::EEXIST) => {
                let done = c.mapped.max(0) as u64;
                at += done + PAGE;
            }
            Err(e) if e.raw_os_error() == Some(libc::EAGAIN) => {
                at += c.mapped.max(0) as u64;
            }
            Err(e) => return Err(e),
        }
    }
    wake(uffd, addr, len)
}

/// Stop reporting faults in `addr..addr+len` (threads waiting on faults
/// there are woken and take them again, from the kernel).
pub(crate) fn unregister(uffd: &OwnedFd, addr: u64, len: u64) -> std::io::Result<()> {
    let mut r = k::uffdio_range { start: addr, len };
    ioctl(uffd, io::UFFDIO_UNREGISTER, &mut r)
}

/// Wake threads waiting on faults in `addr..addr+len`, whatever is mapped
/// there now: they take the fault again.
pub(crate) fn wake(uffd: &OwnedFd, addr: u64, len: u64) -> std::io::Result<()> {
    let mut r = k::uffdio_range { start: addr, len };
    ioctl(uffd, io::UFFDIO_WAKE, &mut r)
}

const PAGE: u64 = 4096;

/// The address of the next page fault reported, waiting at most `timeout`;
/// `Ok(None)` if none came. `Err` once the client's end is gone for good
/// (`read` fails other than with `EAGAIN`).
pub(crate) fn next_fault(uffd: &OwnedFd, timeout: std::time::Duration) -> std::io::Result<Option<u64>> {
    use rustix::event::{PollFd, PollFlags, poll};
    let mut fds = [PollFd::new(uffd, PollFlags::IN)];
    let ts = rustix::time::Timespec {
        tv_sec: timeout.as_secs() as i64,
        tv_nsec: timeout.subsec_nanos() as i64,
    };
    match poll(&mut fds, Some(&ts)) {
        Ok(0) | Err(rustix::io::Errno::INTR) => return Ok(None),
        Ok(_) => {}
        Err(e) => return Err(e.into()),
    }
    let mut msg = std::mem::MaybeUninit::<k::uffd_msg>::zeroed();
    let size = std::mem::size_of::<k::uffd_msg>();
    // SAFETY: reading at most one message into memory sized for it.
    let n = unsafe { libc::read(uffd.as_raw_fd(), msg.as_mut_ptr().cast(), size) };
    if n < 0 {
        let e = std::io::Error::last_os_error();
        return match e.raw_os_error() {
            Some(libc::EAGAIN) | Some(libc::EINTR) => Ok(None),
            _ => Err(e),
        };
    }
    if n as usize != size {
        return Ok(None);
    }
    // SAFETY: the kernel wrote a whole message (checked above); a zeroed
    // `uffd_msg` is a valid value of it anyway.
    let msg = unsafe { msg.assume_init() };
    if msg.event as u32 != k::UFFD_EVENT_PAGEFAULT {
        return Ok(None);
    }
    // SAFETY: a pagefault message's union holds the `pagefault` member.
    let addr = unsafe { msg.arg.pagefault.address };
    Ok(Some(addr))
}

#[cfg(test)]
mod tests {
    use super::*;
    use lintel_sys::Mapping;
    use std::time::Duration;

    /// A thread reads a registered mapping of a memfd; this test, as the
    /// pager, fills the pages through a second mapping and resolves the
    /// fault for the whole 64 KiB range: the reader sees the pager's bytes,
    /// on the faulting page and on the next page it reads, which does not
    /// fault again.
    #[test]
    fn a_pager_fills_through_its_own_mapping_and_resolves_ranges() {
        let fd = rustix::fs::memfd_create("t", rustix::fs::MemfdFlags::CLOEXEC).unwrap();
        let len = 64 * 1024;
        rustix::fs::ftruncate(&fd, len as u64).unwrap();
        let client = Mapping::map_shared(&fd, len, true).unwrap();
        let pager = Mapping::map_shared(&fd, len, true).unwrap();
        let u = create().unwrap();
        register(&u, client.addr(), len as u64).unwrap();
        // Page 3 is in the memfd already; page 9 is not.
        pager.write(3 * 4096, b"present");
        let client = std::sync::Arc::new(client);
        let reader = {
            let client = client.clone();
            std::thread::spawn(move || {
                let mut b = [0u8; 6];
                client.read(9 * 4096, &mut b);
                let mut a = [0u8; 7];
                client.read(3 * 4096, &mut a);
                (a, b)
            })
        };
        let mut faults = Vec::new();
        while !reader.is_finished() {
            let Some(addr) = next_fault(&u, Duration::from_millis(50)).unwrap() else {
                continue;
            };
            faults.push((addr - client.addr()) / 4096);
            // Fill every page of the range (CONTINUE maps only pages the
            // memfd has), then resolve all of it.
            for p in (0..16).filter(|&p| p != 3) {
                pager.zero(p * 4096, 4096);
            }
            pager.write(9 * 4096, b"filled");
            resolve(&u, client.addr(), len as u64).unwrap();
            assert!(faults.len() < 100, "faults keep coming: {faults:?}");
        }
        let (a, b) = reader.join().unwrap();
        assert_eq!(&a, b"present");
        assert_eq!(&b, b"filled");
        // (The two reads may be reordered: either page may fault first.)
        assert!(
            faults == [9] || faults == [3],
            "one fault for the range: {faults:?}"
        );
    }
}
