//! Memfds sealed so that a peer cannot change their size (or, for a
//! snapshot, their contents) under a mapping of them.

use crate::fd::above_floor;
use std::io;
use std::os::fd::{BorrowedFd, OwnedFd};

use rustix::fs::{MemfdFlags, SealFlags};

/// A new memfd of `len` bytes, sealed so nobody can shrink or grow it (a peer
/// that could truncate it would make our accesses fault with SIGBUS).
pub fn sealed_memfd(name: &str, len: usize) -> io::Result<OwnedFd> {
    let fd = above_floor(rustix::fs::memfd_create(
        name,
        MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING,
    )?);
    rustix::fs::ftruncate(&fd, len as u64)?;
    rustix::fs::fcntl_add_seals(&fd, SealFlags::SHRINK | SealFlags::GROW | SealFlags::SEAL)?;
    Ok(fd)
}

/// Check that a memfd received from a peer is what we need before mapping it:
/// exactly `len` bytes, and sealed against shrinking, growing and reseal.
pub fn check_sealed_memfd(fd: BorrowedFd<'_>, len: usize) -> Result<(), &'static str> {
    let seals = rustix::fs::fcntl_get_seals(fd).map_err(|_| "call area is not a sealable memfd")?;
    let need = SealFlags::SHRINK | SealFlags::GROW | SealFlags::SEAL;
    if !seals.contains(need) {
        return Err("call area is not sealed against resizing");
    }
    if seals.intersects(SealFlags::WRITE | SealFlags::FUTURE_WRITE) {
        return Err("call area is sealed against writing");
    }
    let st = rustix::fs::fstat(fd).map_err(|_| "call area cannot be inspected")?;
    if st.st_size as u64 != len as u64 {
        return Err("call area has the wrong size");
    }
    Ok(())
}

/// A memfd for a sealed snapshot of `len` bytes: sealed against resizing
/// now, against writing once its writer is done ([`seal_snapshot`]).
pub fn snapshot_memfd(len: usize) -> io::Result<OwnedFd> {
    let fd = above_floor(rustix::fs::memfd_create(
        "lintel-sealed",
        MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING,
    )?);
    rustix::fs::ftruncate(&fd, len as u64)?;
    rustix::fs::fcntl_add_seals(&fd, SealFlags::SHRINK | SealFlags::GROW)?;
    Ok(fd)
}

/// Seal a snapshot against writing (its writable mapping must be gone).
///
/// `EBUSY` while a writable mapping of it lives anywhere: a child that
/// another thread forked in the moment between the writer's `mmap` and its
/// `MADV_DONTFORK` holds a copy until it `exec`s or exits (seen in CI, with
/// tests spawning peers on other threads). That is waited out, up to a
/// second; past that the error is the caller's. (The kernel itself waits
/// for pages pinned by I/O.)
pub fn seal_snapshot(fd: BorrowedFd<'_>) -> io::Result<()> {
    let seals = SealFlags::WRITE | SealFlags::SEAL;
    let end = std::time::Instant::now() + std::time::Duration::from_secs(1);
    let mut pause = std::time::Duration::from_micros(50);
    loop {
        match rustix::fs::fcntl_add_seals(fd, seals) {
            Err(rustix::io::Errno::BUSY) if std::time::Instant::now() < end => {
                std::thread::sleep(pause);
                pause = (pause * 2).min(std::time::Duration::from_millis(20));
            }
            r => return Ok(r?),
        }
    }
}

/// Check a sealed snapshot a peer sent: a memfd nobody can write, shrink
/// or grow, of at least `len` bytes.
pub fn check_snapshot(fd: BorrowedFd<'_>, len: usize) -> Result<(), &'static str> {
    let seals = rustix::fs::fcntl_get_seals(fd).map_err(|_| "sealed buffer is not a sealable memfd")?;
    if !seals.contains(SealFlags::WRITE | SealFlags::SHRINK | SealFlags::GROW) {
        return Err("sealed buffer is not sealed against writing and resizing");
    }
    let st = rustix::fs::fstat(fd).map_err(|_| "sealed buffer cannot be inspected")?;
    if (st.st_size as u64) < len as u64 {
        return Err("sealed buffer is shorter than its descriptor says");
    }
    Ok(())
}

/// Check a bulk segment a peer sent: a memfd sealed against shrinking (so
/// no read of a mapping of it can fault), a whole number of pages; its size.
pub fn check_segment(fd: BorrowedFd<'_>) -> Result<usize, &'static str> {
    let seals = rustix::fs::fcntl_get_seals(fd).map_err(|_| "bulk segment is not a sealable memfd")?;
    if !seals.contains(SealFlags::SHRINK) {
        return Err("bulk segment is not sealed against shrinking");
    }
    let st = rustix::fs::fstat(fd).map_err(|_| "bulk segment cannot be inspected")?;
    let size = usize::try_from(st.st_size).map_err(|_| "bulk segment has a bad size")?;
    if size == 0 || !size.is_multiple_of(4096) {
        return Err("bulk segment has a size no call needs");
    }
    Ok(size)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    /// A writable mapping that outlives the writer's (as a forked child's
    /// copy does until it `exec`s) delays the seal, not fails it; one
    /// that stays past the wait fails it with the kernel's `EBUSY`.
    #[test]
    fn a_seal_waits_out_a_writable_mapping_that_goes_away() {
        let fd = snapshot_memfd(4096).unwrap();
        let other = crate::Mapping::map(fd.as_fd(), 4096).unwrap();
        let gone = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(50));
            drop(other);
        });
        seal_snapshot(fd.as_fd()).expect("sealed once the mapping went");
        gone.join().unwrap();
        check_snapshot(fd.as_fd(), 4096).unwrap();

        let fd = snapshot_memfd(4096).unwrap();
        let _kept = crate::Mapping::map(fd.as_fd(), 4096).unwrap();
        let e = seal_snapshot(fd.as_fd()).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EBUSY));
    }
}
