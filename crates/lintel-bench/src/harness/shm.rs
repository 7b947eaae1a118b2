//! Shared memory between the benchmark's processes: a `memfd` mapped `MAP_SHARED`.
//!
//! The parent creates it and passes [`SharedMem::fd`] to the child (see [`super::fd_arg`]); the
//! child maps it with [`SharedMem::open`]. Words in it are accessed only through atomics, since
//! the other process writes them concurrently.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64};

use anyhow::{Context as _, ensure};
use rustix::fs::{MemfdFlags, fstat, ftruncate, memfd_create};
use rustix::mm::{MapFlags, ProtFlags, mmap, munmap};

/// A shared, zero-filled mapping of a `memfd`, unmapped on drop.
pub struct SharedMem {
    fd: OwnedFd,
    ptr: NonNull<u8>,
    len: usize,
}

impl SharedMem {
    /// Creates a zero-filled `memfd` of `len` bytes (close-on-exec) and maps it.
    pub fn create(name: &str, len: usize) -> anyhow::Result<Self> {
        let fd = memfd_create(name, MemfdFlags::CLOEXEC).context("memfd_create")?;
        ftruncate(&fd, len as u64).context("ftruncate memfd")?;
        Self::map(fd, len)
    }

    /// Maps a `memfd` received from another process, whole.
    pub fn open(fd: OwnedFd) -> anyhow::Result<Self> {
        let len = usize::try_from(fstat(&fd).context("fstat memfd")?.st_size)?;
        Self::map(fd, len)
    }

    fn map(fd: OwnedFd, len: usize) -> anyhow::Result<Self> {
        ensure!(len > 0, "cannot map an empty memfd");
        // SAFETY: a fresh mapping at an address the kernel chooses aliases no Rust object; it
        // stays valid until `Drop` unmaps it, and is only read and written through atomics.
        let ptr = unsafe {
            mmap(
                std::ptr::null_mut(),
                len,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::SHARED,
                &fd,
                0,
            )
        }
        .context("mmap memfd")?;
        let ptr = NonNull::new(ptr.cast::<u8>()).context("mmap returned null")?;
        Ok(SharedMem { fd, ptr, len })
    }

    /// The `memfd`, to pass to a child.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Start of the mapping, for suites that copy payloads in and out (their own `unsafe`).
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// The 32-bit word at byte `offset` (4-aligned); usable as a futex word.
    pub fn u32_at(&self, offset: usize) -> &AtomicU32 {
        self.check(offset, size_of::<AtomicU32>());
        // SAFETY: `check` proved the word is inside the mapping and aligned; the mapping lives as
        // long as `&self`; any bit pattern is a valid `AtomicU32`, and all access is atomic.
        unsafe { &*self.ptr.as_ptr().add(offset).cast::<AtomicU32>() }
    }

    /// The 64-bit word at byte `offset` (8-aligned).
    pub fn u64_at(&self, offset: usize) -> &AtomicU64 {
        self.check(offset, size_of::<AtomicU64>());
        // SAFETY: as in `u32_at`, for an 8-byte aligned word.
        unsafe { &*self.ptr.as_ptr().add(offset).cast::<AtomicU64>() }
    }

    fn check(&self, offset: usize, size: usize) {
        assert!(
            offset.is_multiple_of(size) && offset.checked_add(size).is_some_and(|end| end <= self.len),
            "word at {offset} (size {size}) is unaligned or outside the {}-byte mapping",
            self.len
        );
    }
}

impl Drop for SharedMem {
    fn drop(&mut self) {
        // SAFETY: `ptr`/`len` are exactly the mapping made in `map`; references handed out by
        // `u32_at`/`u64_at` borrow `self`, so none outlives this.
        let _ = unsafe { munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering;

    #[test]
    fn reopened_memfd_shares_words() {
        let a = SharedMem::create("test", 4096).unwrap();
        let dup = a.fd().try_clone_to_owned().unwrap();
        let b = SharedMem::open(dup).unwrap();
        assert_eq!(b.len(), 4096);
        a.u64_at(128).store(42, Ordering::SeqCst);
        assert_eq!(b.u64_at(128).load(Ordering::SeqCst), 42);
        assert_eq!(b.u32_at(4092).load(Ordering::SeqCst), 0);
    }

    #[test]
    #[should_panic(expected = "unaligned")]
    fn unaligned_word_panics() {
        SharedMem::create("test", 64).unwrap().u64_at(4);
    }
}
