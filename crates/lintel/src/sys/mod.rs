//! The thin shell over Linux: futexes on shared words, sealed memfds and their
//! mappings, sockets that carry file descriptors, and epoll.
//!
//! Everything above this module is safe Rust. The two `unsafe` operations that
//! remain (mapping and unmapping) live in [`Mapping`].

pub mod fence;
pub mod spin;
pub mod umem;

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::atomic::AtomicU32;
use std::time::Duration;

use rustix::event::epoll;
use rustix::fs::{MemfdFlags, SealFlags};
use rustix::mm::{MapFlags, ProtFlags};
use rustix::net::{
    AddressFamily, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags, SocketFlags, SocketType,
};
use rustix::thread::futex;

/// Most descriptors one socket message may carry; more is a protocol error.
pub const MAX_FDS_PER_MSG: usize = 64;

/// The lowest number the runtime keeps its own descriptors at (0: where
/// the kernel puts them). See [`crate::set_descriptor_floor`].
static FLOOR: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);

pub fn set_descriptor_floor(floor: i32) {
    FLOOR.store(floor.max(0), std::sync::atomic::Ordering::Relaxed);
}

pub fn descriptor_floor() -> i32 {
    FLOOR.load(std::sync::atomic::Ordering::Relaxed)
}

/// Make descriptor number `at` refer to what `with` does (`dup3`),
/// closing what it referred to.
pub fn replace_fd(with: BorrowedFd<'_>, at: BorrowedFd<'_>) -> io::Result<()> {
    use std::os::fd::{AsRawFd, FromRawFd};
    // SAFETY: the number `at` stays open (now to `with`'s file) and keeps
    // its one owner, who closes it as before; the temporary OwnedFd is
    // forgotten, never closed here.
    let mut target = std::mem::ManuallyDrop::new(unsafe { OwnedFd::from_raw_fd(at.as_raw_fd()) });
    rustix::io::dup3(with, &mut target, rustix::io::DupFlags::CLOEXEC)?;
    Ok(())
}

/// `fd` moved to the lowest free number at or above the floor (kept where
/// it is if there is no floor, or no room above it).
pub fn above_floor(fd: OwnedFd) -> OwnedFd {
    let floor = descriptor_floor();
    if floor == 0 || std::os::fd::AsRawFd::as_raw_fd(&fd) >= floor {
        return fd;
    }
    rustix::io::fcntl_dupfd_cloexec(&fd, floor).unwrap_or(fd)
}

/// Sleep on `word` while it holds `expected`, at most `timeout`. Shared
/// (non-private) futex: the word may live in memory mapped by another process.
/// Spurious returns are normal; callers re-check their condition.
pub fn futex_wait(word: &AtomicU32, expected: u32, timeout: Option<Duration>) {
    let ts = timeout.map(|d| rustix::time::Timespec {
        tv_sec: d.as_secs() as i64,
        tv_nsec: d.subsec_nanos() as i64,
    });
    let _ = futex::wait(word, futex::Flags::empty(), expected, ts.as_ref());
}

/// `CLOCK_MONOTONIC` now, in ns: the clock deadlines are written in, the
/// same in every process on the machine.
/// (glibc's `clock_gettime`, a vDSO read; rustix's own vDSO lookup faults
/// under valgrind.)
#[inline]
pub fn monotonic_ns() -> u64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `t` is a valid, writable timespec for the call's duration.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut t) };
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

/// Register this process for expedited memory barriers (`fence`); false
/// if the kernel (or a sandbox, or valgrind) refuses.
pub fn membarrier_register() -> bool {
    use rustix::thread::{MembarrierCommand, membarrier};
    membarrier(MembarrierCommand::RegisterPrivateExpedited).is_ok()
}

/// A full memory barrier on every running thread of this process; false if
/// the kernel refuses (the process is not registered).
pub fn membarrier() -> bool {
    use rustix::thread::{MembarrierCommand, membarrier};
    membarrier(MembarrierCommand::PrivateExpedited).is_ok()
}

/// Wake up to `n` sleepers on `word`.
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

/// Move the calling thread off `cpu`: allowed everywhere else for a moment
/// (the kernel migrates it at once), then its own affinity back (it stays
/// where it went until the scheduler moves it). Nothing happens if it may
/// run on `cpu` only.
pub fn move_off_cpu(cpu: u32) {
    use rustix::thread::{sched_getaffinity, sched_setaffinity};
    let Ok(mine) = sched_getaffinity(None) else { return };
    let mut away = mine;
    away.unset(cpu as usize);
    if away.count() == 0 {
        return;
    }
    if sched_setaffinity(None, &away).is_ok() {
        let _ = sched_setaffinity(None, &mine);
    }
}

/// The CPU this thread runs on now. glibc's `sched_getcpu` reads it from
/// the thread's restartable-sequences area (rseq, a load) or the vDSO, and
/// works under valgrind, where rustix's own vDSO lookup faults.
#[inline]
pub fn current_cpu() -> u32 {
    // SAFETY: `sched_getcpu` takes no arguments and only reads the calling
    // thread's state; it returns -1 (here u32::MAX, "unknown") on failure.
    unsafe { libc::sched_getcpu() as u32 }
}

/// A non-blocking eventfd, for waking the watcher thread.
pub fn eventfd() -> io::Result<OwnedFd> {
    use rustix::event::EventfdFlags;
    Ok(above_floor(rustix::event::eventfd(
        0,
        EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK,
    )?))
}

/// Make an eventfd readable (add one to its counter).
pub fn eventfd_signal(fd: BorrowedFd<'_>) {
    let _ = rustix::io::write(fd, &1u64.to_ne_bytes());
}

/// Reset an eventfd's counter (it is no longer readable).
pub fn eventfd_clear(fd: BorrowedFd<'_>) {
    let mut b = [0u8; 8];
    let _ = rustix::io::read(fd, &mut b);
}

/// A connected pair of `SOCK_SEQPACKET` sockets: message boundaries kept,
/// each send atomic, hang-up seen by the other end when the last copy closes.
pub fn seqpacket_pair() -> io::Result<(OwnedFd, OwnedFd)> {
    let (a, b) = rustix::net::socketpair(
        AddressFamily::UNIX,
        SocketType::SEQPACKET,
        SocketFlags::CLOEXEC,
        None,
    )?;
    Ok((above_floor(a), above_floor(b)))
}

fn seqpacket_socket() -> io::Result<OwnedFd> {
    Ok(above_floor(rustix::net::socket_with(
        AddressFamily::UNIX,
        SocketType::SEQPACKET,
        SocketFlags::CLOEXEC,
        None,
    )?))
}

/// A `SOCK_SEQPACKET` socket listening at `path` (which must not exist).
pub fn seqpacket_listen(path: &std::path::Path) -> io::Result<OwnedFd> {
    let sock = seqpacket_socket()?;
    rustix::net::bind(&sock, &rustix::net::SocketAddrUnix::new(path)?)?;
    rustix::net::listen(&sock, 16)?;
    Ok(sock)
}

/// Accept one connection: the socket, the peer's pid as the kernel records
/// it, and whether the peer runs as our user.
pub fn seqpacket_accept(listener: BorrowedFd<'_>) -> io::Result<(OwnedFd, u32, u32)> {
    let sock = above_floor(rustix::net::accept_with(listener, SocketFlags::CLOEXEC)?);
    let cred = rustix::net::sockopt::socket_peercred(&sock)?;
    Ok((sock, cred.pid.as_raw_nonzero().get() as u32, cred.uid.as_raw()))
}

/// A `SOCK_SEQPACKET` socket connected to the listener at `path`.
pub fn seqpacket_connect(path: &std::path::Path) -> io::Result<OwnedFd> {
    let sock = seqpacket_socket()?;
    rustix::net::connect(&sock, &rustix::net::SocketAddrUnix::new(path)?)?;
    Ok(sock)
}

/// Send one message with `fds` attached.
pub fn send_msg(sock: BorrowedFd<'_>, bytes: &[u8], fds: &[BorrowedFd<'_>]) -> io::Result<()> {
    let mut space = [std::mem::MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS_PER_MSG))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    if !fds.is_empty() && !control.push(SendAncillaryMessage::ScmRights(fds)) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "too many descriptors",
        ));
    }
    let iov = [io::IoSlice::new(bytes)];
    loop {
        match rustix::net::sendmsg(sock, &iov, &mut control, SendFlags::NOSIGNAL) {
            Ok(_) => return Ok(()),
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
}

/// What one non-blocking receive found.
pub enum Recv {
    /// A message of this many bytes (into the caller's buffer), with its fds
    /// and, on a socket with [`set_passcred`], the sender's pid as the kernel
    /// vouches for it.
    Msg(usize, Vec<OwnedFd>, Option<u32>),
    /// The peer closed its end.
    Closed,
    /// Nothing queued now.
    Empty,
}

/// Receive one message without blocking. Descriptors that arrive are always
/// taken into `OwnedFd`s, so a caller that rejects the message closes them.
pub fn recv_msg(sock: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<Recv> {
    let mut space = [std::mem::MaybeUninit::<u8>::uninit();
        rustix::cmsg_space!(ScmRights(MAX_FDS_PER_MSG), ScmCredentials(1))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let mut iov = [io::IoSliceMut::new(buf)];
    let r = loop {
        match rustix::net::recvmsg(
            sock,
            &mut iov,
            &mut control,
            RecvFlags::DONTWAIT | RecvFlags::CMSG_CLOEXEC,
        ) {
            Err(rustix::io::Errno::INTR) => continue,
            Err(rustix::io::Errno::AGAIN) => return Ok(Recv::Empty),
            Err(rustix::io::Errno::CONNRESET) => return Ok(Recv::Closed),
            Err(e) => return Err(e.into()),
            Ok(r) => break r,
        }
    };
    let mut fds = Vec::new();
    let mut pid = None;
    for msg in control.drain() {
        match msg {
            RecvAncillaryMessage::ScmRights(iter) => fds.extend(iter.map(above_floor)),
            RecvAncillaryMessage::ScmCredentials(c) => pid = Some(c.pid.as_raw_nonzero().get() as u32),
            _ => {}
        }
    }
    if r.bytes == 0 && fds.is_empty() {
        return Ok(Recv::Closed);
    }
    if r.flags.contains(rustix::net::ReturnFlags::TRUNC) || r.flags.contains(rustix::net::ReturnFlags::CTRUNC)
    {
        // Oversized: the fds (if any) are dropped here, the message refused.
        return Ok(Recv::Msg(usize::MAX, Vec::new(), None));
    }
    Ok(Recv::Msg(r.bytes, fds, pid))
}

/// Ask the kernel to attach the sender's credentials to every message this
/// socket receives from now on. Set it before the peer sends: the kernel
/// decides at send time.
pub fn set_passcred(sock: BorrowedFd<'_>) -> io::Result<()> {
    Ok(rustix::net::sockopt::set_socket_passcred(sock, true)?)
}

/// A pidfd for process `pid`: readable once the process has exited.
pub fn pidfd(pid: u32) -> io::Result<OwnedFd> {
    let pid = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "bad pid"))?;
    Ok(above_floor(rustix::process::pidfd_open(
        pid,
        rustix::process::PidfdFlags::empty(),
    )?))
}

/// The pid of the process that created the peer end of `sock`, as the kernel
/// recorded it (not as the peer claims).
pub fn peer_pid(sock: BorrowedFd<'_>) -> io::Result<u32> {
    let cred = rustix::net::sockopt::socket_peercred(sock)?;
    Ok(cred.pid.as_raw_nonzero().get() as u32)
}

/// Inode number identifying an open file (socket ends have distinct ones).
pub fn inode(fd: BorrowedFd<'_>) -> io::Result<u64> {
    Ok(rustix::fs::fstat(fd)?.st_ino)
}

/// Clear close-on-exec so a child started with `exec` inherits `fd`.
/// Async-signal-safe (one raw syscall): callable between fork and exec.
pub fn clear_cloexec(fd: BorrowedFd<'_>) -> io::Result<()> {
    Ok(rustix::io::fcntl_setfd(fd, rustix::io::FdFlags::empty())?)
}

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
pub fn seal_snapshot(fd: BorrowedFd<'_>) -> io::Result<()> {
    Ok(rustix::fs::fcntl_add_seals(
        fd,
        SealFlags::WRITE | SealFlags::SEAL,
    )?)
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
        // SAFETY: a fresh mapping (null hint) cannot alias any Rust object;
        // the length matches the sealed file size so every page is backed.
        let ptr = unsafe {
            rustix::mm::mmap(
                std::ptr::null_mut(),
                len,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::SHARED,
                fd,
                0,
            )?
        };
        let ptr = NonNull::new(ptr.cast::<u8>()).ok_or_else(|| io::Error::other("mmap returned null"))?;
        Ok(Mapping { ptr, len })
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

    /// Map `len` bytes of `fd` shared and read-only (a peer's bulk segment,
    /// checked by [`check_segment`] to be sealed at `len` bytes or more).
    pub fn map_read(fd: BorrowedFd<'_>, len: usize) -> io::Result<Mapping> {
        // SAFETY: as for `map`; the file cannot shrink below `len` (sealed),
        // so every page is backed.
        let ptr = unsafe {
            rustix::mm::mmap(
                std::ptr::null_mut(),
                len,
                ProtFlags::READ,
                MapFlags::SHARED,
                fd,
                0,
            )?
        };
        let ptr = NonNull::new(ptr.cast::<u8>()).ok_or_else(|| io::Error::other("mmap returned null"))?;
        Ok(Mapping { ptr, len })
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
    pub fn base(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    pub fn len(&self) -> usize {
        self.len
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

/// An epoll instance watching connection sockets for input and hang-up.
pub struct Poller {
    fd: OwnedFd,
}

impl Poller {
    pub fn new() -> io::Result<Poller> {
        Ok(Poller {
            fd: above_floor(epoll::create(epoll::CreateFlags::CLOEXEC)?),
        })
    }

    pub fn add(&self, fd: BorrowedFd<'_>, key: u64) -> io::Result<()> {
        Ok(epoll::add(
            &self.fd,
            fd,
            epoll::EventData::new_u64(key),
            epoll::EventFlags::IN | epoll::EventFlags::RDHUP,
        )?)
    }

    pub fn remove(&self, fd: BorrowedFd<'_>) {
        let _ = epoll::delete(&self.fd, fd);
    }

    /// Wait for events, at most `timeout` if given; returns the keys of
    /// ready sources.
    pub fn wait(&self, keys: &mut Vec<u64>, timeout: Option<std::time::Duration>) {
        let mut events: Vec<epoll::Event> = Vec::with_capacity(64);
        let timeout = timeout.and_then(|t| rustix::time::Timespec::try_from(t).ok());
        let _ = epoll::wait(
            &self.fd,
            rustix::buffer::spare_capacity(&mut events),
            timeout.as_ref(),
        );
        keys.clear();
        keys.extend(events.iter().map(|e| e.data.u64()));
    }
}

impl AsFd for Poller {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// Make `fd` inherited by the child `cmd` starts (and only by it): close-on-
/// exec is cleared between fork and exec in the child, never in this process,
/// so children other threads start meanwhile do not get it.
pub fn inherit_fd(cmd: &mut std::process::Command, fd: BorrowedFd<'_>) {
    use std::os::fd::AsRawFd;
    use std::os::unix::process::CommandExt;
    let raw = fd.as_raw_fd();
    // SAFETY: the closure runs in the forked child before exec and only
    // makes one raw fcntl syscall, which is async-signal-safe; `raw` stays
    // open in the parent until `spawn` returns, so it is open in the child.
    unsafe {
        cmd.pre_exec(move || clear_cloexec(BorrowedFd::borrow_raw(raw)));
    }
}

/// Take ownership of a descriptor this process inherited, named by number.
/// Refuses numbers that are not open sockets.
pub fn take_inherited_socket(raw: i32) -> io::Result<OwnedFd> {
    use std::os::fd::FromRawFd;
    if raw < 3 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "not an inherited descriptor",
        ));
    }
    // SAFETY: fstat on a raw number only reads; an unopened number fails.
    let st = rustix::fs::fstat(unsafe { BorrowedFd::borrow_raw(raw) })?;
    if rustix::fs::FileType::from_raw_mode(st.st_mode) != rustix::fs::FileType::Socket {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "inherited descriptor is not a socket",
        ));
    }
    // SAFETY: the number is open (fstat succeeded) and was handed to this
    // process for lintel alone (spawn's contract); the caller takes it once
    // (boot::join guards that), so no other owner exists.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    rustix::io::fcntl_setfd(&fd, rustix::io::FdFlags::CLOEXEC)?;
    Ok(fd)
}
