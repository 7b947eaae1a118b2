//! The program's memory, read and written as the kernel would: a bad
//! pointer gets `EFAULT`, never a fault in the emulation.
//!
//! Whether a range is accessible is asked of the kernel once
//! (`process_vm_readv`/`process_vm_writev` on this process, a byte a page)
//! and remembered until the program next changes its mappings
//! ([`MAP_GENERATION`]); the bytes are then copied directly. A `stat`
//! read its path and wrote its result with three of these system calls
//! and three `getpid`s (glibc no longer caches the pid): 8 of the 15 µs a
//! served `stat` took. The pid is kept in a page the kernel wipes in a
//! forked child (`MADV_WIPEONFORK`), so no fork, however made, reads or
//! writes its parent's memory through a stale one.
//!
//! What this gives up: a program thread that unmaps a buffer while
//! another thread's system call on it is being answered (a use after
//! free in the program) can fault the emulation, where the kernel would
//! answer `EFAULT`. The check and the copy are a few hundred nanoseconds
//! apart, and any change of mappings the program makes through a system
//! call moves the generation before it is made.
#![allow(unsafe_code)]

const PAGE: u64 = 4096;

fn errno() -> i32 {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EFAULT)
}

/// This process's pid: looked up once per process (see the module doc).
fn own_pid() -> libc::pid_t {
    use std::sync::OnceLock;
    use std::sync::atomic::{AtomicI32, Ordering::Relaxed};
    static PAGE_WORD: OnceLock<Option<&'static AtomicI32>> = OnceLock::new();
    let word = PAGE_WORD.get_or_init(|| {
        // SAFETY: a fresh private anonymous page, never unmapped: the
        // `&'static` to its first word stays valid. `MADV_WIPEONFORK`
        // makes it read zero in a forked child, a valid `AtomicI32`.
        unsafe {
            let p = libc::mmap(
                std::ptr::null_mut(),
                PAGE as usize,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            if p == libc::MAP_FAILED {
                return None;
            }
            if libc::madvise(p, PAGE as usize, libc::MADV_WIPEONFORK) != 0 {
                libc::munmap(p, PAGE as usize);
                return None;
            }
            Some(&*(p as *const AtomicI32))
        }
    });
    // SAFETY: getpid has no preconditions.
    let lookup = || unsafe { libc::getpid() };
    match word {
        Some(w) => match w.load(Relaxed) {
            0 => {
                let pid = lookup();
                w.store(pid, Relaxed);
                pid
            }
            pid => pid,
        },
        None => lookup(),
    }
}

/// Copy `to.len()` bytes from the program's address `addr`.
pub fn read_into(addr: u64, to: &mut [u8]) -> Result<(), i32> {
    if !readable(addr, to.len()) {
        return Err(libc::EFAULT);
    }
    // SAFETY: the kernel found every page of the range readable and the
    // program has not changed its mappings since; `to` is ours. The copy
    // is one the compiler cannot see into (another thread of the program
    // may write the bytes meanwhile, as with the kernel's own copy).
    unsafe { copy_in(to.as_mut_ptr(), addr as *const u8, to.len()) };
    Ok(())
}

/// Copy `to.len()` bytes from the program's address `addr` through the
/// kernel, remembering nothing: for a call made in a signal handler that
/// may have interrupted the emulation itself.
pub fn read_through_kernel(addr: u64, to: &mut [u8]) -> Result<(), i32> {
    vm_read(addr, to)
}

/// Copy `from` to the program's address `addr`.
pub fn write(addr: u64, from: &[u8]) -> Result<(), i32> {
    with_writable(addr, from.len(), |to| to.copy_from_slice(from))
}

/// Copy `len` bytes of the program's memory at `src` into `dst`.
///
/// # Safety
///
/// `src` readable and `dst` writable for `len` bytes, not overlapping.
unsafe fn copy_in(dst: *mut u8, src: *const u8, len: usize) {
    // SAFETY: the caller's contract.
    if unsafe { lintel_sys::copy_from_shared(dst, src, len) } {
        return;
    }
    for i in 0..len {
        // SAFETY: inside both ranges; a volatile read, for memory the
        // program may write meanwhile.
        unsafe { dst.add(i).write(std::ptr::read_volatile(src.add(i))) };
    }
}

/// Ask the kernel for `to.len()` bytes at the program's address `addr`.
fn vm_read(addr: u64, to: &mut [u8]) -> Result<(), i32> {
    if to.is_empty() {
        return Ok(());
    }
    let local = libc::iovec {
        iov_base: to.as_mut_ptr().cast(),
        iov_len: to.len(),
    };
    let remote = libc::iovec {
        iov_base: addr as *mut _,
        iov_len: to.len(),
    };
    // SAFETY: `local` describes our own buffer of that length; the kernel
    // checks `remote` and fails with EFAULT rather than faulting.
    let n = unsafe { libc::process_vm_readv(own_pid(), &local, 1, &remote, 1, 0) };
    match n {
        n if n == to.len() as isize => Ok(()),
        n if n >= 0 => Err(libc::EFAULT),
        _ => Err(errno()),
    }
}

/// Have the kernel write `from` at the program's address `addr`.
fn vm_write(addr: u64, from: &[u8]) -> Result<(), i32> {
    if from.is_empty() {
        return Ok(());
    }
    let local = libc::iovec {
        iov_base: from.as_ptr() as *mut _,
        iov_len: from.len(),
    };
    let remote = libc::iovec {
        iov_base: addr as *mut _,
        iov_len: from.len(),
    };
    // SAFETY: as in `read_into`, the other way; the kernel checks `remote`.
    let n = unsafe { libc::process_vm_writev(own_pid(), &local, 1, &remote, 1, 0) };
    match n {
        n if n == from.len() as isize => Ok(()),
        n if n >= 0 => Err(libc::EFAULT),
        _ => Err(errno()),
    }
}

/// The kernel's longest path, its NUL counted.
const PATH_MAX: usize = libc::PATH_MAX as usize;

/// The NUL-terminated string at `addr` (without its NUL): `EFAULT` if it
/// runs into unmapped memory, `ENAMETOOLONG` at 4096 bytes or more (the
/// kernel's `PATH_MAX` counts the NUL).
pub fn cstr(addr: u64) -> Result<Vec<u8>, i32> {
    let mut out = Vec::new();
    let mut at = addr;
    while out.len() <= 4096 {
        // Never cross a page in one read: the string may end just before
        // an unmapped one.
        let n = (PAGE - at % PAGE) as usize;
        if !readable(at, n) {
            return Err(libc::EFAULT);
        }
        for i in 0..n as u64 {
            // SAFETY: the page is readable (checked above, for the current
            // mappings); a volatile read of one byte, as the program may
            // write the string meanwhile.
            let b = unsafe { std::ptr::read_volatile((at + i) as *const u8) };
            if b == 0 {
                if out.len() >= PATH_MAX {
                    return Err(libc::ENAMETOOLONG);
                }
                return Ok(out);
            }
            out.push(b);
        }
        at += n as u64;
    }
    Err(libc::ENAMETOOLONG)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_pointers_are_efault_not_a_crash() {
        let s = b"hello\0";
        assert_eq!(cstr(s.as_ptr() as u64), Ok(b"hello".to_vec()));
        assert_eq!(cstr(8), Err(libc::EFAULT));
        let mut buf = [0u8; 4];
        assert_eq!(read_into(16, &mut buf), Err(libc::EFAULT));
        assert_eq!(write(16, b"x"), Err(libc::EFAULT));
        let mut dst = [0u8; 3];
        write(dst.as_mut_ptr() as u64, b"abc").unwrap();
        assert_eq!(&dst, b"abc");
    }
}

/// Bumped whenever the program unmaps or remaps memory or changes its
/// protection (seen in the trap path): buffers checked before may be gone.
pub static MAP_GENERATION: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// The program changed its mappings (or is about to): ranges checked
/// before are asked of the kernel again.
pub fn mappings_changed() {
    MAP_GENERATION.fetch_add(1, std::sync::atomic::Ordering::Release);
}

/// How many of a thread's recent buffers it remembers.
const RECENT: usize = 16;

/// The pages of a thread's recent buffers that the kernel accepted (start,
/// end, and 1 for reading, 2 for writing too), the map generation they
/// were checked in, and where the next one goes. Whole pages: protection
/// is a page's, so another buffer on the same pages (the next structure
/// on the stack) needs no check of its own.
type Checked = (u64, [(u64, u64, u8); RECENT], usize);

thread_local! {
    static CHECKED: std::cell::RefCell<Checked> = const { std::cell::RefCell::new((u64::MAX, [(0, 0, 0); RECENT], 0)) };
}

/// Whether the program's `[addr, addr + len)` is accessible as the kernel
/// would find it (`write`: writable too): checked once, page by page, by
/// reading each page's byte through the kernel (and writing it back), then
/// remembered until the program next changes its mappings. The fast path
/// copies into or out of such a buffer directly; anything else gets
/// `EFAULT`.
fn accessible(addr: u64, len: usize, write_too: bool) -> bool {
    if len == 0 {
        return true;
    }
    let Some(end) = addr.checked_add(len as u64) else {
        return false;
    };
    let need = if write_too { 2 } else { 1 };
    let generation = MAP_GENERATION.load(std::sync::atomic::Ordering::Acquire);
    let known = CHECKED.with(|c| {
        let c = c.borrow();
        c.0 == generation && c.1.iter().any(|&(s, e, k)| s <= addr && end <= e && k >= need)
    });
    if known {
        return true;
    }
    let mut page = addr & !(PAGE - 1);
    while page < end {
        let at = page.max(addr);
        let mut b = [0u8; 1];
        if vm_read(at, &mut b).is_err() || (write_too && vm_write(at, &b).is_err()) {
            return false;
        }
        page += PAGE;
    }
    let pages = (
        addr & !(PAGE - 1),
        end.checked_next_multiple_of(PAGE).unwrap_or(end),
    );
    CHECKED.with(|c| {
        let mut c = c.borrow_mut();
        if c.0 != generation {
            *c = (generation, [(0, 0, 0); RECENT], 0);
        }
        let i = c.2 % RECENT;
        c.1[i] = (pages.0, pages.1, need);
        c.2 += 1;
    });
    true
}

/// Whether `[addr, addr + len)` is writable memory of the program.
pub fn writable(addr: u64, len: usize) -> bool {
    accessible(addr, len, true)
}

/// Run `f` on the program's buffer `[addr, addr + len)` as a slice, if
/// the kernel finds all of it writable ([`writable`]): a read lands in it
/// with no copy on the way. `EFAULT` if it is not writable.
pub fn with_writable<R>(addr: u64, len: usize, f: impl FnOnce(&mut [u8]) -> R) -> Result<R, i32> {
    if len == 0 {
        return Ok(f(&mut []));
    }
    if !writable(addr, len) {
        return Err(libc::EFAULT);
    }
    // SAFETY: the kernel accepted a write to every page of the range, and
    // the program has not changed its mappings since (the map generation
    // says so), so the range is mapped writable memory of this process.
    // The program is inside a system call on it (a `read`), so it does
    // not use the bytes until the call returns.
    let slice = unsafe { std::slice::from_raw_parts_mut(addr as *mut u8, len) };
    Ok(f(slice))
}

/// Whether `[addr, addr + len)` is readable memory of the program.
pub fn readable(addr: u64, len: usize) -> bool {
    accessible(addr, len, false)
}

#[cfg(test)]
mod fast_tests {
    use super::*;

    #[test]
    fn buffers_are_checked_once_and_rechecked_after_the_maps_change() {
        let mut buf = vec![0u8; 3 * 4096];
        let a = buf.as_mut_ptr() as u64;
        assert!(writable(a, buf.len()));
        assert!(writable(a + 10, 100), "inside a range checked before");
        // What is remembered is whole pages, and no more: a page beside a
        // checked one is checked for itself.
        let (rw, none) = (libc::PROT_READ | libc::PROT_WRITE, libc::PROT_NONE);
        // SAFETY: a new private anonymous mapping of two pages, which
        // nothing else refers to; its second page is made inaccessible.
        let map = unsafe {
            let m = libc::mmap(
                std::ptr::null_mut(),
                2 * PAGE as usize,
                rw,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            assert_ne!(m, libc::MAP_FAILED);
            assert_eq!(
                libc::mprotect(m.cast::<u8>().add(PAGE as usize).cast(), PAGE as usize, none),
                0
            );
            m as u64
        };
        assert!(writable(map + 8, 16));
        assert!(writable(map + PAGE - 100, 100), "the page checked");
        assert!(!writable(map + PAGE - 8, 16), "into the page beside it");
        assert!(!readable(map + PAGE, 1));
        // SAFETY: the mapping made above, used by nothing else.
        unsafe { libc::munmap(map as *mut libc::c_void, 2 * PAGE as usize) };
        assert!(!writable(8, 16), "unmapped");
        assert!(!writable(u64::MAX - 4, 16), "wraps");
        let ro = b"constant" as *const u8 as u64;
        assert!(!writable(ro, 8), "read-only memory is not writable");
        assert!(readable(ro, 8));
        mappings_changed();
        assert!(writable(a, 10), "checked again after a map change");
    }
}
