//! Futexes on shared words: the word may live in memory another process
//! maps, so none is private. Spurious returns are normal; callers re-check.

use std::sync::atomic::AtomicU32;
use std::time::Duration;

use rustix::thread::futex;

/// Sleep on `word` while it holds `expected`, at most `timeout`. Shared
/// (non-private) futex: the word may live in memory mapped by another process.
/// Spurious returns are normal; callers re-check their condition.
#[inline]
pub fn futex_wait(word: &AtomicU32, expected: u32, timeout: Option<Duration>) {
    let ts = timeout.map(|d| rustix::time::Timespec {
        tv_sec: d.as_secs() as i64,
        tv_nsec: d.subsec_nanos() as i64,
    });
    let _ = futex::wait(word, futex::Flags::empty(), expected, ts.as_ref());
}

/// Wake up to `n` sleepers on `word`.
#[inline]
pub fn futex_wake(word: &AtomicU32, n: u32) {
    let _ = futex::wake(word, futex::Flags::empty(), n);
}

/// Wake up to `n` sleepers on the futex word at address `addr`, which may
/// no longer be mapped (the kernel then fails the call) or may hold another
/// word by now (its sleepers see a spurious wake-up, which every futex user
/// here tolerates).
pub fn futex_wake_addr(addr: usize, n: u32) {
    // SAFETY: a raw FUTEX_WAKE on an address: the kernel validates it and
    // never writes through it; no Rust reference is made from it.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            addr as *const u32,
            libc::FUTEX_WAKE,
            n as libc::c_int,
        );
    }
}
