//! Shared memory the file service and its clients both write: the
//! sessions' descriptor pages and the page caches behind mapped windows.
//!
//! Every access is through this module. Words that both sides write (the
//! share lock, the token state, offsets, sizes) are atomics; file bytes
//! are copied with `memcpy` between a mapping and a private buffer. A peer
//! may change the bytes while they are copied: the copy then holds some
//! mixture of old and new bytes, which is what a Unix `read` racing a
//! `write` may return too. No reference to shared bytes is ever made, so
//! nothing here assumes they hold still. (The copies are
//! [`lintel::copy_raw`]: a page-aligned window and a heap buffer often sit
//! where glibc's `memcpy` is slowest.)
#![allow(unsafe_code)]

use std::os::fd::AsFd;
use std::sync::atomic::{AtomicU32, AtomicU64};
use std::time::Duration;

use rustix::mm::{MapFlags, ProtFlags};

/// Start loading the cache line at `addr` into the cache: a hint, which
/// never faults and reads nothing anyone sees, whatever the address.
#[inline]
pub fn prefetch(addr: u64) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        // SAFETY: SSE is part of x86-64's baseline, and a prefetch has no
        // effect but on the cache: no fault, whatever the address.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(addr as *const i8) };
    }
}

/// A shared mapping of (part of) a file, unmapped on drop.
pub(crate) struct Shared {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the mapping is plain shared memory; every access goes through
// atomics or `memcpy` of raw bytes, both of which are sound from any
// thread (see the module docs).
unsafe impl Send for Shared {}
// SAFETY: as above.
unsafe impl Sync for Shared {}

impl Shared {
    /// Map `len` bytes of `fd` from offset 0, shared; writable if `write`.
    /// Bytes past the file's end fault (SIGBUS) if touched: callers keep
    /// the file at least as long as what they touch.
    pub(crate) fn map(fd: impl AsFd, len: usize, write: bool) -> std::io::Result<Shared> {
        let prot = if write {
            ProtFlags::READ | ProtFlags::WRITE
        } else {
            ProtFlags::READ
        };
        // SAFETY: a fresh mapping at an address the kernel picks; it
        // overlaps nothing of ours.
        let ptr = unsafe {
            rustix::mm::mmap(
                std::ptr::null_mut(),
                len,
                prot,
                MapFlags::SHARED | MapFlags::NORESERVE,
                fd,
                0,
            )?
        };
        Ok(Shared { ptr: ptr.cast(), len })
    }

    /// Map `len` bytes of `fd` read-only and private: reads see the file's
    /// pages as they change, and a write (after an `mprotect`) would only
    /// make a private copy. How a client that may only read maps a cache:
    /// a private mapping may carry a userfaultfd registration, which the
    /// kernel allows on shared mappings only of files opened for writing.
    pub(crate) fn map_private_read(fd: impl AsFd, len: usize) -> std::io::Result<Shared> {
        // SAFETY: as in `map`.
        let ptr = unsafe {
            rustix::mm::mmap(
                std::ptr::null_mut(),
                len,
                ProtFlags::READ,
                MapFlags::PRIVATE | MapFlags::NORESERVE,
                fd,
                0,
            )?
        };
        Ok(Shared { ptr: ptr.cast(), len })
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The mapping's address in this process.
    pub(crate) fn addr(&self) -> u64 {
        self.ptr as u64
    }

    fn check(&self, off: usize, len: usize, align: usize) {
        assert!(
            off.is_multiple_of(align) && off.checked_add(len).is_some_and(|end| end <= self.len),
            "shared access {off}+{len} outside a {}-byte mapping",
            self.len
        );
    }

    /// The 64-bit word at `off` (8-aligned, inside the mapping).
    pub(crate) fn u64(&self, off: usize) -> &AtomicU64 {
        self.check(off, 8, 8);
        // SAFETY: in bounds and aligned (checked); the mapping lives as
        // long as `self`, and an AtomicU64 may alias memory others write.
        unsafe { &*(self.ptr.add(off) as *const AtomicU64) }
    }

    /// The 32-bit word at `off` (4-aligned, inside the mapping).
    pub(crate) fn u32(&self, off: usize) -> &AtomicU32 {
        self.check(off, 4, 4);
        // SAFETY: as for `u64`.
        unsafe { &*(self.ptr.add(off) as *const AtomicU32) }
    }

    /// Copy `to.len()` bytes from offset `off` of the mapping.
    pub(crate) fn read(&self, off: usize, to: &mut [u8]) {
        self.check(off, to.len(), 1);
        // SAFETY: the source is inside the mapping (checked) and the
        // destination is private memory that cannot overlap it.
        unsafe { lintel::copy_raw(to.as_mut_ptr(), self.ptr.add(off), to.len()) }
    }

    /// Copy `from` into the mapping at offset `off`. The mapping must be
    /// writable.
    pub(crate) fn write(&self, off: usize, from: &[u8]) {
        self.check(off, from.len(), 1);
        // SAFETY: as for `read`, the other way.
        unsafe { lintel::copy_raw(self.ptr.add(off), from.as_ptr(), from.len()) }
    }

    /// Zero `len` bytes at `off`.
    pub(crate) fn zero(&self, off: usize, len: usize) {
        self.check(off, len, 1);
        // SAFETY: inside the mapping (checked), which is writable.
        unsafe { std::ptr::write_bytes(self.ptr.add(off), 0, len) }
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        // SAFETY: our own mapping; nothing refers to it once we are gone
        // (the atomics borrowed from it do not outlive `self`).
        let _ = unsafe { rustix::mm::munmap(self.ptr.cast(), self.len) };
    }
}

/// Wait while `word` holds `expected`, at most `timeout`. Shared (not
/// process-private): the waker may be another process.
pub(crate) fn wait(word: &AtomicU32, expected: u32, timeout: Duration) {
    let ts = rustix::time::Timespec {
        tv_sec: timeout.as_secs() as i64,
        tv_nsec: timeout.subsec_nanos() as i64,
    };
    let _ = rustix::thread::futex::wait(word, rustix::thread::futex::Flags::empty(), expected, Some(&ts));
}

/// Wake every waiter on `word`, in any process.
pub(crate) fn wake(word: &AtomicU32) {
    let _ = rustix::thread::futex::wake(word, rustix::thread::futex::Flags::empty(), u32::MAX);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering::SeqCst;

    #[test]
    fn two_mappings_of_one_file_see_each_other() {
        let fd = rustix::fs::memfd_create("t", rustix::fs::MemfdFlags::CLOEXEC).unwrap();
        rustix::fs::ftruncate(&fd, 8192).unwrap();
        let a = Shared::map(&fd, 8192, true).unwrap();
        let b = Shared::map(&fd, 8192, false).unwrap();
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
        let fd = rustix::fs::memfd_create("t", rustix::fs::MemfdFlags::CLOEXEC).unwrap();
        rustix::fs::ftruncate(&fd, 4096).unwrap();
        let a = Shared::map(&fd, 4096, true).unwrap();
        a.write(4090, b"too long");
    }
}
