//! Shared mappings of files, unmapped on drop. Memory in one may be
//! written by another process at any time, so no reference to its bytes is
//! made but under a caller's `unsafe` promise: words are read and written
//! as atomics, bytes copied in and out ([`copy_raw`]).

use crate::copy::copy_raw;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64};

use rustix::fs::MemfdFlags;
use rustix::mm::{MapFlags, ProtFlags};

/// A shared read-write mapping of a whole memfd, unmapped on drop.
pub struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is plain shared memory; all access goes through
// atomics (see `umem`), so sharing the pointer between threads is sound.
unsafe impl Send for Mapping {}
// SAFETY: as above.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// Map `len` bytes of `fd` shared and writable. The caller has checked the
    /// file is sealed at exactly `len` bytes, so no access can fault.
    pub fn map(fd: BorrowedFd<'_>, len: usize) -> io::Result<Mapping> {
        Self::mmap(fd, len, ProtFlags::READ | ProtFlags::WRITE, MapFlags::SHARED)
    }

    /// Make the pages of `[off, off + len)` at once, for writing
    /// (`MADV_POPULATE_WRITE`): for our own bulk segment, about to be
    /// written, where faulting page by page costs several times more. Only
    /// what a call uses is made (a segment is rounded up to a power of two).
    /// Best effort: an older kernel just faults the pages as they come.
    pub fn populate_write(&self, off: usize, len: usize) {
        let start = off / 4096 * 4096;
        let end = (off + len).div_ceil(4096) * 4096;
        if end <= start || end > self.len {
            return;
        }
        // SAFETY: the range lies inside this live mapping (checked above);
        // populating changes no contents (shmem pages start zeroed and are
        // written only by us), only when the pages are made.
        let _ = unsafe {
            rustix::mm::madvise(
                self.ptr.as_ptr().add(start).cast(),
                end - start,
                rustix::mm::Advice::LinuxPopulateWrite,
            )
        };
    }

    /// Keep this mapping out of children this process forks
    /// (`MADV_DONTFORK`): a writable mapping of a snapshot about to be
    /// sealed against writing, which a child forked meanwhile would
    /// otherwise hold until it execs, and the seal would fail (`EBUSY`).
    pub fn dont_fork(&self) -> io::Result<()> {
        // SAFETY: the range is this live mapping, whole; the advice changes
        // only what a fork copies, not the contents or this process's access.
        unsafe {
            rustix::mm::madvise(
                self.ptr.as_ptr().cast(),
                self.len,
                rustix::mm::Advice::LinuxDontFork,
            )
        }?;
        Ok(())
    }

    /// Map `len` bytes of `fd` shared and read-only (a peer's bulk segment,
    /// checked by [`check_segment`](crate::check_segment) to be sealed at `len` bytes or more).
    pub fn map_read(fd: BorrowedFd<'_>, len: usize) -> io::Result<Mapping> {
        Self::mmap(fd, len, ProtFlags::READ, MapFlags::SHARED)
    }

    /// The mapping's bytes.
    ///
    /// # Safety
    ///
    /// Nobody may write them while the slice lives: the mapping is of a
    /// memfd sealed against writing (a sealed snapshot).
    pub unsafe fn bytes(&self) -> &[u8] {
        // SAFETY: `len` bytes from `ptr` are mapped while `self` lives; the
        // caller guarantees they do not change.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    /// The mapping's bytes, writable.
    ///
    /// # Safety
    ///
    /// The memfd must be this process's alone (no other mapping of it can
    /// be written or read through while the slice lives): a snapshot not yet
    /// sealed or sent.
    pub unsafe fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as for `bytes`, exclusive by the caller's contract.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }

    /// Base address; valid for `len()` bytes while `self` lives.
    #[inline]
    pub fn base(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// The mapping's length in bytes.
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the mapping has no bytes (never: the kernel maps none).
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: `ptr`/`len` came from a successful mmap and are unmapped
        // once; no reference into the mapping outlives `self` (accessors
        // borrow `self`).
        let _ = unsafe { rustix::mm::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

impl Mapping {
    /// Map `len` bytes of `fd` from offset 0, shared and unreserved;
    /// writable if `write`. Bytes past the file's end fault (SIGBUS) if
    /// touched: callers keep the file at least as long as what they touch.
    pub fn map_shared(fd: impl AsFd, len: usize, write: bool) -> io::Result<Mapping> {
        let prot = if write {
            ProtFlags::READ | ProtFlags::WRITE
        } else {
            ProtFlags::READ
        };
        Self::mmap(fd.as_fd(), len, prot, MapFlags::SHARED | MapFlags::NORESERVE)
    }

    /// Map `len` bytes of `fd` read-only and private: reads see the file's
    /// pages as they change, and a write (after an `mprotect`) would only
    /// make a private copy. A private mapping may carry a userfaultfd
    /// registration, which the kernel allows on shared mappings only of
    /// files opened for writing.
    pub fn map_private_read(fd: impl AsFd, len: usize) -> io::Result<Mapping> {
        Self::mmap(
            fd.as_fd(),
            len,
            ProtFlags::READ,
            MapFlags::PRIVATE | MapFlags::NORESERVE,
        )
    }

    /// Every constructor's one `mmap`: the callers say why every page they
    /// touch is backed (a sealed size, or a file kept long enough).
    fn mmap(fd: BorrowedFd<'_>, len: usize, prot: ProtFlags, flags: MapFlags) -> io::Result<Mapping> {
        // SAFETY: a fresh mapping at an address the kernel picks (null
        // hint) overlaps nothing of ours and aliases no Rust object.
        let ptr = unsafe { rustix::mm::mmap(std::ptr::null_mut(), len, prot, flags, fd, 0)? };
        let ptr = NonNull::new(ptr.cast::<u8>()).ok_or_else(|| io::Error::other("mmap returned null"))?;
        Ok(Mapping { ptr, len })
    }

    /// The mapping's address in this process.
    #[inline]
    pub fn addr(&self) -> u64 {
        self.ptr.as_ptr() as u64
    }

    #[inline]
    fn check(&self, off: usize, len: usize, align: usize) {
        assert!(
            off.is_multiple_of(align) && off.checked_add(len).is_some_and(|end| end <= self.len),
            "shared access {off}+{len} outside a {}-byte mapping (or unaligned)",
            self.len
        );
    }

    /// The 64-bit word at `off` (8-aligned, inside the mapping).
    #[inline]
    pub fn u64(&self, off: usize) -> &AtomicU64 {
        self.check(off, 8, 8);
        // SAFETY: in bounds and aligned (checked); the mapping lives as
        // long as `self`, and an atomic may alias memory others write.
        unsafe { &*(self.ptr.as_ptr().add(off) as *const AtomicU64) }
    }

    /// The 32-bit word at `off` (4-aligned, inside the mapping); usable
    /// as a futex word.
    #[inline]
    pub fn u32(&self, off: usize) -> &AtomicU32 {
        self.check(off, 4, 4);
        // SAFETY: as for `u64`.
        unsafe { &*(self.ptr.as_ptr().add(off) as *const AtomicU32) }
    }

    /// Copy `to.len()` bytes from offset `off` of the mapping.
    pub fn read(&self, off: usize, to: &mut [u8]) {
        self.check(off, to.len(), 1);
        // SAFETY: the source is inside the mapping (checked) and the
        // destination is private memory that cannot overlap it.
        unsafe { copy_raw(to.as_mut_ptr(), self.ptr.as_ptr().add(off), to.len()) }
    }

    /// Copy `from` into the mapping at offset `off`. The mapping must be
    /// writable.
    pub fn write(&self, off: usize, from: &[u8]) {
        self.check(off, from.len(), 1);
        // SAFETY: as for `read`, the other way.
        unsafe { copy_raw(self.ptr.as_ptr().add(off), from.as_ptr(), from.len()) }
    }

    /// [`write`](Self::write) around the caches, as
    /// [`copy_around`](crate::copy_around) copies.
    pub fn write_around(&self, off: usize, from: &[u8]) {
        self.check(off, from.len(), 1);
        // SAFETY: as for `write`.
        unsafe { crate::copy_around(self.ptr.as_ptr().add(off), from.as_ptr(), from.len()) }
    }

    /// Zero `len` bytes at `off`. The mapping must be writable.
    pub fn zero(&self, off: usize, len: usize) {
        self.check(off, len, 1);
        // SAFETY: inside the mapping (checked), which is writable.
        unsafe { std::ptr::write_bytes(self.ptr.as_ptr().add(off), 0, len) }
    }
}

/// A zero-filled memfd of `len` bytes (close-on-exec, not sealed), for
/// memory two processes share by agreement.
pub fn shared_memfd(name: &str, len: usize) -> io::Result<OwnedFd> {
    let fd = rustix::fs::memfd_create(name, MemfdFlags::CLOEXEC)?;
    rustix::fs::ftruncate(&fd, len as u64)?;
    Ok(fd)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering::SeqCst;

    #[test]
    fn two_mappings_of_one_file_see_each_other() {
        let fd = shared_memfd("t", 8192).unwrap();
        let a = Mapping::map_shared(&fd, 8192, true).unwrap();
        let b = Mapping::map_shared(&fd, 8192, false).unwrap();
        a.u64(8).store(42, SeqCst);
        assert_eq!(b.u64(8).load(SeqCst), 42);
        a.write(4000, b"across a page");
        let mut got = [0u8; 13];
        b.read(4000, &mut got);
        assert_eq!(&got, b"across a page");
        a.zero(4000, 6);
        b.read(4000, &mut got);
        assert_eq!(&got, b"\0\0\0\0\0\0 a page");
    }

    #[test]
    #[should_panic(expected = "outside")]
    fn access_outside_the_mapping_is_refused() {
        let fd = shared_memfd("t", 4096).unwrap();
        let a = Mapping::map_shared(&fd, 4096, true).unwrap();
        a.write(4090, b"too long");
    }

    #[test]
    #[should_panic(expected = "unaligned")]
    fn an_unaligned_word_is_refused() {
        let fd = shared_memfd("t", 64).unwrap();
        Mapping::map_shared(&fd, 64, true).unwrap().u64(4);
    }
}
