//! A handle's own descriptor of the host file, for the reads and writes
//! at an offset and the syncs it makes itself
//! ([`OpenFile::io_descriptor`](crate::proto::OpenFile::io_descriptor)).
//!
//! A file written at offsets before its handle takes a window (a
//! database's journal: a header, some pages, two syncs, then removed)
//! would pay a call for each write and each sync, and a sync's call costs
//! the caller a wake-up besides, having slept through the disk's time.
//! Asked at such a handle's first write, the service hands over the
//! open's own open file description once the file has no cache, and the
//! file's I/O is the host's from then on: no window is made of it while
//! it stays open anywhere, and every client's calls and descriptors
//! share the host's page cache, as native processes would. The handle's
//! `pread`, `pwrite`, `fdatasync` and `fsync` are then the kernel's own,
//! with Linux's answers (its flags are the open's: `O_APPEND` makes a
//! `pwrite` append). Reads and writes at the shared offset stay calls:
//! the offset is the service's. Once the service is known to be gone, the
//! handle stops using the descriptor and fails as its calls do (`EIO` to
//! a program): a service started again knows nothing of it. What it wrote
//! before is on the host file already.

use std::os::fd::OwnedFd;
use std::sync::OnceLock;

use crate::proto::{FsError, OpenFile, OpenFileClient};

/// The descriptor, once asked for (`None` inside: refused, not asked
/// again).
#[derive(Default)]
pub(super) struct Direct(OnceLock<Option<OwnedFd>>);

impl Direct {
    /// The descriptor, if the handle has it.
    pub(super) fn get(&self) -> Option<&OwnedFd> {
        self.0.get().and_then(Option::as_ref)
    }

    /// The descriptor, asked of the service the first time only.
    pub(super) fn get_or_ask(&self, file: &OpenFileClient) -> Option<&OwnedFd> {
        self.0.get_or_init(|| file.io_descriptor().ok()).as_ref()
    }
}

/// `f` again while it is interrupted.
fn uninterrupted<T>(mut f: impl FnMut() -> rustix::io::Result<T>) -> Result<T, FsError> {
    loop {
        match f() {
            Err(rustix::io::Errno::INTR) => {}
            r => return Ok(r?),
        }
    }
}

/// Read `buf.len()` bytes of the host file `fd` at `at`, fewer at its end.
/// The first `pread` is made for an empty `buf` too: Linux answers it
/// (`EBADF` for a descriptor not open for reading).
pub(super) fn read_at(fd: &OwnedFd, buf: &mut [u8], at: u64) -> Result<usize, FsError> {
    let mut done = uninterrupted(|| rustix::io::pread(fd, &mut *buf, at))?;
    let mut last = done;
    while last > 0 && done < buf.len() {
        last = uninterrupted(|| rustix::io::pread(fd, &mut buf[done..], at + done as u64)).unwrap_or(0);
        done += last;
    }
    Ok(done)
}

/// `pwrite(2)` through `fd`.
pub(super) fn write_at(fd: &OwnedFd, buf: &[u8], at: u64) -> Result<usize, FsError> {
    uninterrupted(|| rustix::io::pwrite(fd, buf, at))
}

/// `fdatasync(2)` (`data_only`) or `fsync(2)` through `fd`.
pub(super) fn sync(fd: &OwnedFd, data_only: bool) -> Result<(), FsError> {
    uninterrupted(|| {
        if data_only {
            rustix::fs::fdatasync(fd)
        } else {
            rustix::fs::fsync(fd)
        }
    })
}
