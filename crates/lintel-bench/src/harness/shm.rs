//! Shared memory between the benchmark's processes: a `memfd` mapped `MAP_SHARED`.
//!
//! The parent creates it and passes [`SharedMem::fd`] to the child (see [`super::fd_arg`]); the
//! child maps it with [`SharedMem::open`]. Words in it are accessed only through atomics, since
//! the other process writes them concurrently (the mapping is `lintel_sys::Mapping`).

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicU32, AtomicU64};

use anyhow::{Context as _, ensure};
use lintel_sys::Mapping;

/// A shared, zero-filled mapping of a `memfd`, unmapped on drop.
pub struct SharedMem {
    fd: OwnedFd,
    map: Mapping,
}

impl SharedMem {
    /// Creates a zero-filled `memfd` of `len` bytes (close-on-exec) and maps it.
    pub fn create(name: &str, len: usize) -> anyhow::Result<Self> {
        Self::map(lintel_sys::shared_memfd(name, len).context("memfd")?, len)
    }

    /// Maps a `memfd` received from another process, whole.
    pub fn open(fd: OwnedFd) -> anyhow::Result<Self> {
        let len = usize::try_from(rustix::fs::fstat(&fd).context("fstat memfd")?.st_size)?;
        Self::map(fd, len)
    }

    fn map(fd: OwnedFd, len: usize) -> anyhow::Result<Self> {
        ensure!(len > 0, "cannot map an empty memfd");
        let map = Mapping::map_shared(&fd, len, true).context("mmap memfd")?;
        Ok(SharedMem { fd, map })
    }

    /// The `memfd`, to pass to a child.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// The 32-bit word at byte `offset` (4-aligned); usable as a futex word.
    pub fn u32_at(&self, offset: usize) -> &AtomicU32 {
        self.map.u32(offset)
    }

    /// The 64-bit word at byte `offset` (8-aligned).
    pub fn u64_at(&self, offset: usize) -> &AtomicU64 {
        self.map.u64(offset)
    }
}

/// Spin on `word` until it holds a value `want` accepts, and return it, yielding now and then:
/// on a machine with one free CPU the writer of the word must get to run.
pub fn spin_until(word: &AtomicU64, want: impl Fn(u64) -> bool) -> u64 {
    let mut turns = 0u32;
    loop {
        let v = word.load(std::sync::atomic::Ordering::Acquire);
        if want(v) {
            return v;
        }
        turns = turns.wrapping_add(1);
        if turns.is_multiple_of(1 << 16) {
            std::thread::yield_now();
        } else {
            std::hint::spin_loop();
        }
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
