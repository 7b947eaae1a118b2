//! The system calls the emulation answers: those that name a path under
//! the prefix or a descriptor it serves, answered through `lintel_fs` with
//! the result and errno Linux would give. Everything else goes to the
//! kernel unchanged (`None`).
//!
//! Served descriptors are real numbers: each holds an empty memfd of its
//! own, so the kernel never hands the number out twice, `close`-on-exec
//! and `F_GETFD`/`F_SETFD` work on it as they would on the file, and a
//! call that slips past the emulation touches nothing that matters.
//! `/proc/self/fd/N` and `/dev/fd/N` of a served `N` name the served file
//! (glibc's `fchmodat` and `realpath` go that way).
//!
//! Programs and scripts in the served tree are started by the emulation
//! (`exec`): a program so started sees the host file as its
//! `/proc/self/exe`.
//!
//! An `O_PATH` open of a served path is served: it stands for the file (a
//! symlink itself with `O_NOFOLLOW`), and answers `fstat` and attribute
//! changes. `mknod`/`mknodat` make FIFOs, sockets, devices and empty files
//! through the service (a device only where Linux would let the caller:
//! `CAP_MKNOD`, else `EPERM`). FIFOs, sockets and devices are never opened
//! by the service: an `open` of one gets the service's `O_PATH` descriptor
//! and opens it through `/proc/self/fd`, so the descriptor it returns is
//! the kernel's own (a FIFO's reader and writer meet in the kernel, and the
//! open waits as on Linux; a socket is `ENXIO`). `bind` of a Unix-domain
//! socket to a served path is made by the service (the program's socket
//! passed to it), and `connect` to one goes through the socket file's
//! `O_PATH` descriptor the same way.

use crate::fdtable::FdTable;
use std::sync::Arc;

mod exec;

use lintel_fs::{Attr, File, Fs, FsError, Kind, LockKind, OpenOptions, SetTime, Stat, Timespec, Whence};
use parking_lot::Mutex;

use crate::links;
use crate::paths::{self, Prefix};
use crate::trap::{self, Emulator};
use crate::user;

/// One open description the emulation serves (shared by `dup`s).
pub struct Served {
    file: File,
    /// Its path relative to the export's root (for `openat` relative to it).
    path: Vec<u8>,
    dir: bool,
    /// The `open` flags (`F_GETFL`), but for those `F_SETFL` changes.
    flags: i32,
    /// The status flags `F_SETFL` changes ([`SETFL_FLAGS`]), as this
    /// process last set or learned them (`O_APPEND` is the service's).
    status: std::sync::atomic::AtomicI32,
    /// A directory's entries as `linux_dirent64` records, and how far
    /// `getdents64` has read them.
    listing: Mutex<Option<(Vec<u8>, usize)>>,
    /// Whether its placeholder names it by key yet (for a child or an
    /// `exec`ed image, see [`Emulation::adopt_inherited`]).
    recorded: std::sync::atomic::AtomicBool,
    /// The host file's descriptor for shared mappings, once asked for
    /// (`None`: the service refused one).
    map_fd: std::sync::OnceLock<Option<std::os::fd::OwnedFd>>,
}

impl Served {
    fn new(file: File, path: Vec<u8>, dir: bool, flags: i32, recorded: bool) -> Arc<Served> {
        Arc::new(Served {
            file,
            path,
            dir,
            flags: flags & !SETFL_FLAGS,
            status: std::sync::atomic::AtomicI32::new(flags & SETFL_FLAGS),
            listing: Mutex::new(None),
            recorded: std::sync::atomic::AtomicBool::new(recorded),
            map_fd: std::sync::OnceLock::new(),
        })
    }

    /// The open flags with the status flags as last known here.
    fn all_flags(&self) -> i32 {
        self.flags | self.status.load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// The status flags `fcntl(F_SETFL)` changes on a served file: `O_APPEND`
/// (the service's, shared by every holder of the open file), and
/// `O_NONBLOCK` and `O_ASYNC`, which a regular file or directory ignores
/// (kept for `F_GETFL`). `O_DIRECT` and `O_NOATIME` are refused.
const SETFL_FLAGS: i32 = libc::O_APPEND | libc::O_NONBLOCK | libc::O_ASYNC;

/// What a placeholder memfd holds once its open file is shared: magic,
/// key, open flags, whether a directory, the path's length, the path.
const RECORD_MAGIC: &[u8; 8] = b"LNTLSRV1";
/// What a forked child's placeholder holds for a served file it opened
/// (it cannot reach the service): magic, open flags, mode, the path's
/// length, the path. The image it `exec`s opens it.
const DEFERRED_MAGIC: &[u8; 8] = b"LNTLDEF1";
/// What carries a served working directory across `exec`: magic, path.
const CWD_MAGIC: &[u8; 8] = b"LNTLCWD1";

/// The emulation's state in a process.
pub struct Emulation {
    fs: Fs,
    prefix: Prefix,
    fds: FdTable<Served>,
    /// The working directory while it is in the served tree (its path
    /// relative to the root); `None` while it is the kernel's.
    cwd: parking_lot::RwLock<Option<Vec<u8>>>,
    /// The descriptor of the record that carries the working directory
    /// to an `exec`ed image (closed again if the `exec` fails); -1: none.
    cwd_record: std::sync::atomic::AtomicI32,
}

type R = Option<i64>;

fn err(e: i32) -> i64 {
    -(e as i64)
}

fn fs_err(e: FsError) -> i64 {
    err(e.errno())
}

const MAX_IO: usize = 16 << 20;

/// Programs' reads and writes up to this size take the mapped window;
/// larger ones are one call each. A program run under `lintel-run` meets
/// a cold cache (the service starts with it), and one large call beats
/// filling and mapping its windows.
const MAPPED_MAX_CALL: usize = 8 << 10;

impl Emulation {
    pub fn new(fs: Fs, prefix: Prefix) -> Emulation {
        Emulation {
            fs,
            prefix,
            fds: FdTable::default(),
            cwd: parking_lot::RwLock::new(None),
            cwd_record: std::sync::atomic::AtomicI32::new(-1),
        }
    }

    /// Serve `fd` as `served` (what it stood for, if anything, is let go).
    fn serve(&self, fd: i32, served: Arc<Served>) {
        let hint = served.file.cache_hint();
        self.fds.insert(fd, served, hint);
    }

    /// Warm the bytes a positional read of `fd` at `at` will copy, before
    /// looking the descriptor up (see [`FdTable`]).
    #[inline]
    pub fn prefetch(&self, fd: i32, at: u64) {
        let hint = self.fds.hint(fd);
        if hint != 0 {
            lintel_fs::prefetch(hint.wrapping_add(at));
        }
    }

    fn served(&self, fd: u64) -> Option<Arc<Served>> {
        self.fds.get(fd as i32)
    }

    /// The served path `path` names (relative to `dirfd`), if it is one:
    /// `Ok(None)` if not ours, `Err(errno)` if it cannot be read or
    /// leaves the served tree through a served directory.
    fn path_at(&self, dirfd: i32, path: u64) -> Result<Option<Vec<u8>>, i32> {
        let p = user::cstr(path)?;
        if let Some(fd) = fd_link(&p)
            && let Some(s) = self.served(fd as u64)
        {
            return Ok(Some(s.path.clone()));
        }
        if p.first() == Some(&b'/') {
            return Ok(self.prefix.strip(&p));
        }
        if dirfd == libc::AT_FDCWD {
            // Relative to a served working directory: served, unless it
            // climbs out of the tree (then it names nothing here).
            return match self.served_cwd() {
                Some(c) => paths::join(&c, &p).map(Some).ok_or(libc::ENOENT),
                None => Ok(None),
            };
        }
        match self.served(dirfd as u64) {
            Some(d) if d.dir => paths::join(&d.path, &p).map(Some).ok_or(libc::ENOENT),
            Some(_) => Err(libc::ENOTDIR),
            None => Ok(None),
        }
    }

    /// The served prefix.
    pub fn prefix(&self) -> &Prefix {
        &self.prefix
    }

    /// Take the working directory `parent` had (a forked child's new
    /// emulation).
    pub fn inherit_cwd(&self, parent: &Emulation) {
        *self.cwd.write() = parent.served_cwd();
    }

    /// The served working directory, if it is one. (`try_read`: a forked
    /// child must not wait on a lock a thread of its parent held.)
    fn served_cwd(&self) -> Option<Vec<u8>> {
        self.cwd.try_read().and_then(|c| c.clone())
    }

    /// `chdir`: into the served tree (the service says whether it is a
    /// directory), or out of it (the kernel's working directory again;
    /// `..` from the served root leads to the prefix's parent).
    fn chdir(&self, path: u64) -> R {
        let target = match self.path_at(libc::AT_FDCWD, path) {
            Ok(Some(rel)) => rel,
            Ok(None) => return self.kernel_chdir(libc::SYS_chdir, path),
            Err(libc::ENOENT) => {
                let (Some(cwd), Ok(p)) = (self.served_cwd(), user::cstr(path)) else {
                    return Some(err(libc::ENOENT));
                };
                let Some(mut host) = paths::outside(&self.prefix, &cwd, &p) else {
                    return Some(err(libc::ENOENT));
                };
                host.push(0);
                return self.kernel_chdir(libc::SYS_chdir, host.as_ptr() as u64);
            }
            Err(e) => return Some(err(e)),
        };
        let os = std::ffi::OsStr::from_bytes;
        match self.fs.stat(os(&target)) {
            Ok(st) if st.is_dir() => {
                // Entering it takes the right to search it, as for Linux.
                if let Err(e) = self
                    .fs
                    .access(os(&target), libc::X_OK as u32, libc::AT_EACCESS as u32)
                {
                    return Some(fs_err(e));
                }
                *self.cwd.write() = Some(self.physical(target));
                Some(0)
            }
            Ok(_) => Some(err(libc::ENOTDIR)),
            Err(e) => Some(fs_err(e)),
        }
    }

    /// The served directory `rel` names with the symlinks in its path
    /// followed (as a working directory or a directory descriptor is the
    /// directory, not the path: `..` from it is its parent); `rel` as
    /// it is if that cannot be told.
    fn physical(&self, rel: Vec<u8>) -> Vec<u8> {
        match links::resolve(&self.prefix, &rel, true, &LinkLookup(&self.fs)) {
            Ok(links::Target::Served(p)) => p,
            _ => rel,
        }
    }

    /// `fchdir`: a served directory's descriptor, or the kernel's.
    fn fchdir(&self, fd: u64) -> R {
        match self.served(fd) {
            Some(s) if s.dir => {
                *self.cwd.write() = Some(s.path.clone());
                Some(0)
            }
            Some(_) => Some(err(libc::ENOTDIR)),
            None => self.kernel_chdir(libc::SYS_fchdir, fd),
        }
    }

    /// A working-directory change made by the kernel; on success the
    /// served one is left.
    fn kernel_chdir(&self, nr: i64, arg: u64) -> R {
        let r = trap::raw_syscall(nr, [arg, 0, 0, 0, 0, 0]);
        if r == 0 {
            *self.cwd.write() = None;
        }
        Some(r)
    }

    /// `getcwd` while the working directory is served: the prefix's path.
    fn getcwd(&self, buf: u64, size: u64) -> R {
        let mut path = self.prefix.absolute(&self.served_cwd()?);
        path.push(0);
        if (size as usize) < path.len() {
            return Some(err(libc::ERANGE));
        }
        Some(user::write(buf, &path).map_or_else(err, |()| path.len() as i64))
    }

    /// A new descriptor number for `served`: a private memfd holds it.
    fn install(&self, served: Arc<Served>, cloexec: bool) -> i64 {
        let fd = placeholder(cloexec);
        if fd >= 0 {
            self.serve(fd as i32, served);
        }
        fd
    }

    fn open(&self, dirfd: i32, path: u64, flags: u64, mode: u64) -> R {
        // Linux refuses `O_CREAT|O_DIRECTORY` before looking the path up
        // (`O_PATH` drops `O_CREAT` first).
        let f = flags as i32;
        let both = libc::O_CREAT | libc::O_DIRECTORY;
        let refused = f & libc::O_PATH == 0 && f & both == both;
        let rel = match self.path_at(dirfd, path) {
            Ok(Some(_)) | Err(_) if refused => return Some(err(libc::EINVAL)),
            Ok(Some(rel)) => rel,
            Ok(None) => return None,
            Err(e) => return Some(err(e)),
        };
        let flags = flags as i32;
        // An O_PATH open (glibc makes them for `fchmodat` and friends)
        // stands for the file, a symlink itself with O_NOFOLLOW: the
        // service's answers `stat` and attribute changes, and reading or
        // writing it is EBADF, as on Linux.
        let o_path = flags & libc::O_PATH != 0;
        let mut o = options_for(flags, mode as u32);
        if o_path {
            o.io_path(lintel_fs::IoPath::Copy);
        }
        let file = match self.fs.open_with(std::ffi::OsStr::from_bytes(&rel), &o) {
            Ok(f) => f,
            Err(e) => return Some(fs_err(e)),
        };
        let st = file.metadata();
        if !o_path && st.as_ref().is_ok_and(special) {
            return Some(open_special(&file, flags));
        }
        let dir = st.map(|s| s.is_dir()).unwrap_or(false);
        let rel = if dir { self.physical(rel) } else { rel };
        let served = Served::new(file, rel, dir, flags, false);
        Some(self.install(served, flags & libc::O_CLOEXEC != 0))
    }

    fn close(&self, fd: u64) -> R {
        let served = self.fds.remove(fd as i32)?;
        trap::raw_syscall(libc::SYS_close, [fd, 0, 0, 0, 0, 0]);
        drop(served); // the last dup closes the file
        Some(0)
    }

    fn dup_to(&self, old: u64, new: Option<u64>, flags: u64) -> R {
        let served = self.served(old);
        let Some(served) = served else {
            // Not ours; if the target is, it is closed by the call (when
            // the call succeeds: a bad `old` leaves it open).
            let n = new.filter(|&n| self.fds.contains(n as i32))?;
            // (`old` is not `n`, which is served: `dup3` is `dup2` here.)
            let r = trap::raw_syscall(libc::SYS_dup3, [old, n, flags, 0, 0, 0]);
            if r >= 0 {
                self.fds.remove(n as i32);
            }
            return Some(r);
        };
        let fd = match new {
            None => trap::raw_syscall(libc::SYS_dup, [old, 0, 0, 0, 0, 0]),
            Some(n) if n == old => return Some(n as i64),
            Some(n) => trap::raw_syscall(libc::SYS_dup3, [old, n, flags, 0, 0, 0]),
        };
        if fd >= 0 {
            self.serve(fd as i32, served);
        }
        Some(fd)
    }

    fn read(&self, fd: u64, buf: u64, count: u64, at: Option<u64>) -> R {
        let s = self.served(fd)?;
        if s.dir {
            return Some(err(libc::EISDIR));
        }
        // Straight into the program's buffer (checked through the kernel
        // first): the mapped window's memcpy or the pipe's read is the only
        // copy.
        let n = user::with_writable(buf, (count as usize).min(MAX_IO), |v| match at {
            None => s.file.read_shared(v),
            Some(at) => s.file.read_at(v, at),
        });
        Some(match n {
            Ok(Ok(n)) => n as i64,
            Ok(Err(e)) => fs_err(e),
            Err(e) => err(e),
        })
    }

    /// `readv`/`writev` and their positional kinds: each buffer in turn,
    /// stopping at a short one, as the kernel does for a regular file.
    fn vectored(&self, fd: u64, iov: u64, count: u64, at: Option<u64>, dir: Dir) -> R {
        let s = self.served(fd)?;
        // Even with no bytes to move, the open must allow the direction.
        let acc = s.flags & libc::O_ACCMODE;
        if matches!(
            (dir, acc),
            (Dir::Read, libc::O_WRONLY) | (Dir::Write, libc::O_RDONLY)
        ) {
            return Some(err(libc::EBADF));
        }
        if count > libc::UIO_MAXIOV as u64 {
            return Some(err(libc::EINVAL));
        }
        let mut raw = vec![0u8; count as usize * 16];
        if let Err(e) = user::read_into(iov, &mut raw) {
            return Some(err(e));
        }
        let mut done: u64 = 0;
        for v in raw.chunks_exact(16) {
            let base = u64::from_ne_bytes(v[..8].try_into().expect("8 bytes"));
            let len = u64::from_ne_bytes(v[8..].try_into().expect("8 bytes"));
            if len == 0 {
                continue;
            }
            let pos = at.map(|a| a + done);
            let n = match dir {
                Dir::Read => self.read(fd, base, len, pos)?,
                Dir::Write => self.write(fd, base, len, pos)?,
            };
            if n < 0 {
                return Some(if done > 0 { done as i64 } else { n });
            }
            done += n as u64;
            if (n as u64) < len {
                break;
            }
        }
        Some(done as i64)
    }

    /// `mmap` of a served file. A private mapping is made anonymous and
    /// filled with the file's bytes at the time of the call (POSIX leaves
    /// unspecified whether later changes to the file show through a
    /// private mapping; here they do not), then given the protection
    /// asked for: what the dynamic loader, `MAP_PRIVATE` readers and
    /// copy-on-write users need. A shared mapping maps the host file
    /// itself, through a descriptor the service hands out for it
    /// ([`lintel_fs::File::map_descriptor`]): the mapping and every other
    /// client's calls then share the host's page cache (the file's mapped
    /// windows are given up for it; on a read-only export, the file on a
    /// read-only mount of its own). Where the service refuses one,
    /// `ENODEV`, as for a file system without `mmap`.
    fn mmap(&self, a: [u64; 6]) -> R {
        // An anonymous mapping ignores the descriptor, as Linux does.
        if a[3] as i32 & libc::MAP_ANONYMOUS != 0 {
            return None;
        }
        let s = self.served(a[4])?;
        let (addr, len, prot, flags, off) = (a[0], a[1], a[2], a[3] as i32, a[5]);
        const PAGE: u64 = 4096;
        // A path-only descriptor maps nothing (Linux finds no file: EBADF).
        if s.flags & libc::O_PATH != 0 {
            return Some(err(libc::EBADF));
        }
        if s.dir {
            return Some(err(libc::ENODEV));
        }
        if matches!(flags & 0x0f, libc::MAP_SHARED | libc::MAP_SHARED_VALIDATE) {
            return Some(self.mmap_shared(&s, [addr, len, prot, a[3], 0, off]));
        }
        if flags & 0x0f != libc::MAP_PRIVATE {
            return Some(err(libc::EINVAL));
        }
        if len == 0 || !off.is_multiple_of(PAGE) || off.checked_add(len).is_none() {
            return Some(err(libc::EINVAL));
        }
        if s.flags & libc::O_ACCMODE == libc::O_WRONLY {
            return Some(err(libc::EACCES));
        }
        let kept = flags
            & (libc::MAP_FIXED
                | libc::MAP_FIXED_NOREPLACE
                | libc::MAP_NORESERVE
                | libc::MAP_POPULATE
                | libc::MAP_32BIT);
        let rw = (libc::PROT_READ | libc::PROT_WRITE) as u64;
        let anon = (libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | kept) as u64;
        let map = trap::raw_syscall(libc::SYS_mmap, [addr, len, rw, anon, u64::MAX, 0]);
        if map < 0 {
            return Some(map);
        }
        user::MAP_GENERATION.fetch_add(1, std::sync::atomic::Ordering::Release);
        let unmap = |e: i64| {
            trap::raw_syscall(libc::SYS_munmap, [map as u64, len, 0, 0, 0, 0]);
            Some(e)
        };
        let mut buf = vec![0u8; (len as usize).min(1 << 20)];
        let mut done = 0u64;
        while done < len {
            let want = ((len - done) as usize).min(buf.len());
            match s.file.read_at(&mut buf[..want], off + done) {
                Ok(0) => break,
                Ok(n) => {
                    if let Err(e) = user::write(map as u64 + done, &buf[..n]) {
                        return unmap(err(e));
                    }
                    done += n as u64;
                }
                Err(e) => return unmap(fs_err(e)),
            }
        }
        if prot != rw {
            let r = trap::raw_syscall(libc::SYS_mprotect, [map as u64, len, prot, 0, 0, 0]);
            if r < 0 {
                return unmap(r);
            }
        }
        Some(map)
    }

    /// A shared mapping of served file `s`: the kernel's own `mmap` of the
    /// host file's descriptor, which checks the rest as for any file
    /// (protection against the open's mode, alignment, `MAP_FIXED`).
    fn mmap_shared(&self, s: &Served, mut args: [u64; 6]) -> i64 {
        let fd = s.map_fd.get_or_init(|| s.file.map_descriptor().ok());
        let Some(fd) = fd else {
            return err(libc::ENODEV);
        };
        args[4] = std::os::fd::AsRawFd::as_raw_fd(fd) as u64;
        let map = trap::raw_syscall(libc::SYS_mmap, args);
        if map >= 0 {
            user::MAP_GENERATION.fetch_add(1, std::sync::atomic::Ordering::Release);
        }
        map
    }

    /// A forked child that has not `exec`ed cannot reach the service: its
    /// copy of the lintel runtime has no threads, and its connections'
    /// memory is the parent's. Opens of served paths are deferred to the
    /// image it `exec`s ([`Self::defer_open`], how shells redirect); any
    /// other use of a served file or path fails with `EIO`, so nothing is
    /// read from or written to the placeholder behind it.
    fn emulate_in_forked_child(&self, nr: i64, a: [u64; 6]) -> R {
        match nr {
            // Into a served directory unchecked (the child cannot ask the
            // service; what it opens there finds out), out of one by the
            // kernel.
            libc::SYS_chdir => match self.path_at(libc::AT_FDCWD, a[0]) {
                Ok(Some(rel)) => {
                    *self.cwd.try_write()? = Some(rel);
                    Some(0)
                }
                Ok(None) => self.kernel_chdir(libc::SYS_chdir, a[0]),
                Err(e) => Some(err(e)),
            },
            libc::SYS_getcwd => self.getcwd(a[0], a[1]),
            // Into a host directory: the served one is left.
            libc::SYS_fchdir if !placeholder_fd(a[0] as i32) => self.kernel_chdir(libc::SYS_fchdir, a[0]),
            libc::SYS_open => self.defer_open(a[0], a[1], a[2]),
            libc::SYS_openat
                if a[0] as i32 == libc::AT_FDCWD
                    || user::cstr(a[1]).is_ok_and(|p| p.first() == Some(&b'/')) =>
            {
                self.defer_open(a[1], a[2], a[3])
            }
            libc::SYS_creat => self.defer_open(
                a[0],
                (libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC) as u64,
                a[1],
            ),
            _ => self.child_touches_served(nr, a).then(|| err(libc::EIO)),
        }
    }

    /// Whether call `nr` of a forked child touches a served file or path:
    /// a placeholder descriptor, an absolute path under the prefix, or a
    /// path relative to a served directory.
    fn child_touches_served(&self, nr: i64, a: [u64; 6]) -> bool {
        let cwd = libc::AT_FDCWD as u64;
        let fd = |i: usize| placeholder_fd(a[i] as i32);
        let path = |dirfd: u64, p: u64| self.child_path(dirfd as i32, p);
        match nr {
            libc::SYS_read
            | libc::SYS_write
            | libc::SYS_pread64
            | libc::SYS_pwrite64
            | libc::SYS_readv
            | libc::SYS_writev
            | libc::SYS_preadv
            | libc::SYS_pwritev
            | libc::SYS_preadv2
            | libc::SYS_pwritev2
            | libc::SYS_lseek
            | libc::SYS_fstat
            | libc::SYS_getdents64
            | libc::SYS_ftruncate
            | libc::SYS_fsync
            | libc::SYS_fdatasync
            | libc::SYS_fallocate
            | libc::SYS_fchmod
            | libc::SYS_fchown
            | libc::SYS_fchdir
            | libc::SYS_flock
            | libc::SYS_fstatfs
            | libc::SYS_fgetxattr
            | libc::SYS_flistxattr
            | libc::SYS_fsetxattr
            | libc::SYS_fremovexattr => fd(0),
            // Close-on-exec and duplicates are the descriptor's own; the
            // status flags and locks are the served file's.
            libc::SYS_fcntl => {
                matches!(
                    a[1] as i32,
                    libc::F_GETFL
                        | libc::F_SETFL
                        | libc::F_GETLK
                        | libc::F_SETLK
                        | libc::F_SETLKW
                        | libc::F_OFD_GETLK
                        | libc::F_OFD_SETLK
                        | libc::F_OFD_SETLKW
                ) && fd(0)
            }
            libc::SYS_ioctl => a[1] != libc::FIOCLEX && a[1] != libc::FIONCLEX && fd(0),
            libc::SYS_mmap => a[3] & libc::MAP_ANONYMOUS as u64 == 0 && fd(4),
            libc::SYS_sendfile => fd(0) || fd(1),
            libc::SYS_copy_file_range | libc::SYS_splice => fd(0) || fd(2),
            libc::SYS_open
            | libc::SYS_creat
            | libc::SYS_chdir
            | libc::SYS_truncate
            | libc::SYS_statfs
            | libc::SYS_stat
            | libc::SYS_lstat
            | libc::SYS_access
            | libc::SYS_unlink
            | libc::SYS_rmdir
            | libc::SYS_mkdir
            | libc::SYS_mknod
            | libc::SYS_chmod
            | libc::SYS_chown
            | libc::SYS_lchown
            | libc::SYS_readlink
            | libc::SYS_getxattr
            | libc::SYS_lgetxattr
            | libc::SYS_listxattr
            | libc::SYS_llistxattr
            | libc::SYS_setxattr
            | libc::SYS_lsetxattr
            | libc::SYS_removexattr
            | libc::SYS_lremovexattr => path(cwd, a[0]),
            libc::SYS_rename | libc::SYS_link => path(cwd, a[0]) || path(cwd, a[1]),
            libc::SYS_symlink => path(cwd, a[1]),
            libc::SYS_symlinkat => path(a[1], a[2]),
            libc::SYS_openat
            | libc::SYS_newfstatat
            | libc::SYS_statx
            | libc::SYS_unlinkat
            | libc::SYS_mkdirat
            | libc::SYS_mknodat
            | libc::SYS_faccessat
            | libc::SYS_faccessat2
            | libc::SYS_readlinkat
            | libc::SYS_fchmodat
            | libc::SYS_fchownat
            | libc::SYS_utimensat => path(a[0], a[1]),
            libc::SYS_bind | libc::SYS_connect => self.child_socket_path(a[1], a[2]),
            libc::SYS_renameat | libc::SYS_renameat2 | libc::SYS_linkat => {
                path(a[0], a[1]) || path(a[2], a[3])
            }
            _ => false,
        }
    }

    /// Whether (`dirfd`, `path`) names something served, as a forked
    /// child sees it: an absolute path under the prefix, or any path
    /// relative to (or empty, on) a placeholder.
    /// Whether a socket address names a path [`Emulation::child_path`]
    /// finds served.
    fn child_socket_path(&self, addr: u64, len: u64) -> bool {
        // `sockaddr_un` (its path need not end in a NUL) and a NUL.
        let mut raw = [0u8; std::mem::size_of::<libc::sockaddr_un>() + 1];
        let len = (len as usize).min(raw.len() - 1);
        if len <= 2 || user::read_into(addr, &mut raw[..len]).is_err() {
            return false;
        }
        u16::from_ne_bytes([raw[0], raw[1]]) == libc::AF_UNIX as u16
            && raw[2] != 0
            && self.child_path(libc::AT_FDCWD, raw[2..].as_ptr() as u64)
    }

    fn child_path(&self, dirfd: i32, path: u64) -> bool {
        match user::cstr(path) {
            Ok(p) if p.first() == Some(&b'/') => self.prefix.strip(&p).is_some(),
            Ok(_) | Err(_) if dirfd == libc::AT_FDCWD => self.served_cwd().is_some(),
            Ok(_) | Err(_) => placeholder_fd(dirfd),
        }
    }

    /// A read into a buffer of the program's that the caller vouches for
    /// (the preload library's `read`/`pread` wrappers): straight from the
    /// window into it, no copy through the kernel. `None`: not served.
    pub fn read_to(&self, fd: i32, buf: &mut [u8], at: Option<u64>) -> R {
        // Under the table's read lock, not a clone of the entry: this is
        // the hot path (a concurrent close waits for it).
        self.fds.with(fd, |s| {
            if s.flags & libc::O_PATH != 0 {
                return err(libc::EBADF);
            }
            if s.dir {
                return err(libc::EISDIR);
            }
            let buf_len = buf.len().min(MAX_IO);
            let buf = &mut buf[..buf_len];
            let n = match at {
                None => s.file.read_shared(buf),
                Some(at) => s.file.read_at(buf, at),
            };
            n.map_or_else(fs_err, |n| n as i64)
        })
    }

    /// A write from a buffer the caller vouches for (see [`Self::read_to`]).
    pub fn write_from(&self, fd: i32, buf: &[u8], at: Option<u64>) -> R {
        self.fds.with(fd, |s| {
            if s.flags & libc::O_PATH != 0 {
                return err(libc::EBADF);
            }
            let buf = &buf[..buf.len().min(MAX_IO)];
            let n = match at {
                None => s.file.write_shared(buf),
                Some(at) => s.file.write_at(buf, at),
            };
            n.map_or_else(fs_err, |n| n as i64)
        })
    }

    /// Before a fork or an `exec`: each served file's placeholder gets its
    /// record, naming the open file by a key from the service, so the
    /// program `exec`ed (now or by the child) adopts it, offset and all.
    pub fn record_all(&self) {
        if trap::forked_child() {
            // Its parent recorded what it inherited; it cannot call.
            return;
        }
        let fds = self.fds.entries();
        for (fd, s) in fds {
            if s.recorded.load(std::sync::atomic::Ordering::Acquire) {
                continue;
            }
            let Ok(key) = self.fs.share(&s.file) else { continue };
            let mut rec = RECORD_MAGIC.to_vec();
            rec.extend_from_slice(&key);
            rec.extend_from_slice(&s.all_flags().to_le_bytes());
            rec.push(s.dir as u8);
            rec.extend_from_slice(&(s.path.len() as u32).to_le_bytes());
            rec.extend_from_slice(&s.path);
            let r = trap::raw_syscall(
                libc::SYS_pwrite64,
                [fd as u64, rec.as_ptr() as u64, rec.len() as u64, 0, 0, 0],
            );
            if r == rec.len() as i64 {
                s.recorded.store(true, std::sync::atomic::Ordering::Release);
            }
        }
    }

    /// Before an `exec`: a placeholder that carries a served working
    /// directory to the new image (no call needed: a forked child does it
    /// too). Closed again by [`Self::exec_failed`].
    fn record_cwd(&self) {
        let Some(cwd) = self.served_cwd() else { return };
        let fd = placeholder(false);
        if fd < 0 {
            return;
        }
        let mut rec = CWD_MAGIC.to_vec();
        rec.extend_from_slice(&cwd);
        trap::raw_syscall(
            libc::SYS_pwrite64,
            [fd as u64, rec.as_ptr() as u64, rec.len() as u64, 0, 0, 0],
        );
        let old = self
            .cwd_record
            .swap(fd as i32, std::sync::atomic::Ordering::AcqRel);
        if old >= 0 {
            trap::raw_syscall(libc::SYS_close, [old as u64, 0, 0, 0, 0, 0]);
        }
    }

    /// An `exec` failed (a shell tries each directory of `PATH`): the
    /// working directory's record goes.
    pub fn exec_failed(&self) {
        let fd = self.cwd_record.swap(-1, std::sync::atomic::Ordering::AcqRel);
        if fd >= 0 {
            trap::raw_syscall(libc::SYS_close, [fd as u64, 0, 0, 0, 0, 0]);
        }
    }

    /// In a forked child (no service to call): a placeholder that records
    /// the open, for the image the child `exec`s to make. Reading or
    /// writing it before then reaches nothing.
    fn defer_open(&self, path: u64, flags: u64, mode: u64) -> R {
        let p = user::cstr(path).ok()?;
        let rel = if p.first() == Some(&b'/') {
            self.prefix.strip(&p)?
        } else {
            // Relative: served only from a served working directory.
            paths::join(&self.served_cwd()?, &p)?
        };
        let flags = flags as i32;
        let fd = placeholder(flags & libc::O_CLOEXEC != 0);
        if fd < 0 {
            return Some(fd);
        }
        let mut rec = DEFERRED_MAGIC.to_vec();
        rec.extend_from_slice(&flags.to_le_bytes());
        rec.extend_from_slice(&(mode as u32).to_le_bytes());
        rec.extend_from_slice(&(rel.len() as u32).to_le_bytes());
        rec.extend_from_slice(&rel);
        trap::raw_syscall(
            libc::SYS_pwrite64,
            [fd as u64, rec.as_ptr() as u64, rec.len() as u64, 0, 0, 0],
        );
        Some(fd)
    }

    /// In a new image: take over the served files its descriptors held in
    /// the image before (placeholders with a record).
    pub fn adopt_inherited(&self) {
        let Ok(dir) = std::fs::read_dir("/proc/self/fd") else {
            return;
        };
        for entry in dir.flatten() {
            let Some(fd) = entry.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else {
                continue;
            };
            let is_placeholder = std::fs::read_link(entry.path())
                .is_ok_and(|l| l.as_os_str().as_bytes().starts_with(PLACEHOLDER_LINK));
            if !is_placeholder {
                continue;
            }
            let mut rec = vec![0u8; 4096 + 64];
            let n = trap::raw_syscall(
                libc::SYS_pread64,
                [fd as u64, rec.as_mut_ptr() as u64, rec.len() as u64, 0, 0, 0],
            );
            let rec = &rec[..n.max(0) as usize];
            if rec.len() > 8 && &rec[..8] == CWD_MAGIC {
                *self.cwd.write() = Some(rec[8..].to_vec());
                trap::raw_syscall(libc::SYS_close, [fd as u64, 0, 0, 0, 0, 0]);
                continue;
            }
            let adopted = if rec.len() >= 20 && &rec[..8] == DEFERRED_MAGIC {
                self.adopt_deferred(fd, rec)
            } else {
                self.adopt_record(fd, rec)
            };
            if let Err(e) = adopted {
                // Its contents are no file's: no read may see them.
                eprintln!("lintel-unix: descriptor {fd}: {e}");
                trap::raw_syscall(libc::SYS_close, [fd as u64, 0, 0, 0, 0, 0]);
            }
        }
    }

    /// Adopt the open file a placeholder's record names by key.
    fn adopt_record(&self, fd: i32, rec: &[u8]) -> Result<(), String> {
        if rec.len() < 33 || &rec[..8] != RECORD_MAGIC {
            return Err("an unreadable record of a served file".into());
        }
        let key: [u8; 16] = rec[8..24].try_into().expect("16 bytes");
        let flags = i32::from_le_bytes(rec[24..28].try_into().expect("4 bytes"));
        let dir = rec[28] != 0;
        let len = u32::from_le_bytes(rec[29..33].try_into().expect("4 bytes")) as usize;
        let Some(path) = rec.get(33..33 + len) else {
            return Err("an unreadable record of a served file".into());
        };
        // Only how it reads and writes: the file exists already.
        let o = options_for(flags & (libc::O_ACCMODE | libc::O_APPEND), 0);
        let file = self
            .fs
            .adopt(key, &o)
            .map_err(|e| format!("cannot take over {}: {e}", String::from_utf8_lossy(path)))?;
        let served = Served::new(file, path.to_vec(), dir, flags, true);
        self.serve(fd, served);
        Ok(())
    }

    /// Make the open a forked child recorded (see [`Self::defer_open`]).
    fn adopt_deferred(&self, fd: i32, rec: &[u8]) -> Result<(), String> {
        let flags = i32::from_le_bytes(rec[8..12].try_into().expect("4 bytes"));
        let mode = u32::from_le_bytes(rec[12..16].try_into().expect("4 bytes"));
        let len = u32::from_le_bytes(rec[16..20].try_into().expect("4 bytes")) as usize;
        let path = rec.get(20..20 + len).ok_or("an unreadable deferred open")?;
        let shown = || String::from_utf8_lossy(path);
        if flags & libc::O_ACCMODE == libc::O_ACCMODE {
            return Err(format!("{}: bad open flags", shown()));
        }
        let o = options_for(flags, mode);
        let file = self
            .fs
            .open_with(std::ffi::OsStr::from_bytes(path), &o)
            .map_err(|e| format!("{}: {}", shown(), std::io::Error::from_raw_os_error(e.errno())))?;
        let dir = file.metadata().map(|s| s.is_dir()).unwrap_or(false);
        let served = Served::new(file, path.to_vec(), dir, flags, false);
        self.serve(fd, served);
        Ok(())
    }

    /// Answer system call `nr` as the trap path would (for the preload
    /// library's wrappers).
    pub fn emulate_call(&self, nr: i64, args: [u64; 6]) -> R {
        self.emulate(nr, args)
    }

    /// Whether `fd` is a descriptor the emulation serves.
    pub fn serves(&self, fd: i32) -> bool {
        self.fds.contains(fd)
    }

    fn write(&self, fd: u64, buf: u64, count: u64, at: Option<u64>) -> R {
        let s = self.served(fd)?;
        let mut v = vec![0u8; (count as usize).min(MAX_IO)];
        if let Err(e) = user::read_into(buf, &mut v) {
            return Some(err(e));
        }
        let n = match at {
            None => s.file.write_shared(&v),
            Some(at) => s.file.write_at(&v, at),
        };
        Some(n.map_or_else(fs_err, |n| n as i64))
    }

    fn lseek(&self, fd: u64, off: u64, whence: u64) -> R {
        let s = self.served(fd)?;
        let (whence, off) = match whence as i32 {
            libc::SEEK_SET if (off as i64) >= 0 => (Whence::Start, off as i64),
            libc::SEEK_CUR => (Whence::Current, off as i64),
            libc::SEEK_END => (Whence::End, off as i64),
            libc::SEEK_DATA => (Whence::Data, off as i64),
            libc::SEEK_HOLE => (Whence::Hole, off as i64),
            _ => return Some(err(libc::EINVAL)),
        };
        // A directory back at its start (`rewinddir`) is listed anew.
        if s.dir && matches!(whence, Whence::Start) && off == 0 {
            *s.listing.lock() = None;
        }
        Some(s.file.seek_whence(whence, off).map_or_else(fs_err, |p| p as i64))
    }

    fn fstat(&self, fd: u64, buf: u64) -> R {
        let s = self.served(fd)?;
        Some(match s.file.metadata() {
            Ok(st) => user::write(buf, &stat_bytes(&st)).map_or_else(err, |()| 0),
            Err(e) => fs_err(e),
        })
    }

    fn stat_at(&self, dirfd: u64, path: u64, buf: u64, flags: u64, statx_mask: Option<u64>) -> R {
        let flags = flags as i32;
        let empty = user::cstr(path).map(|p| p.is_empty()).unwrap_or(false);
        let st = if empty && flags & libc::AT_EMPTY_PATH != 0 {
            let s = self.served(dirfd)?;
            s.file.metadata()
        } else {
            let rel = match self.path_at(dirfd as i32, path) {
                Ok(Some(rel)) => rel,
                Ok(None) => return None,
                Err(e) => return Some(err(e)),
            };
            let p = std::ffi::OsStr::from_bytes(&rel);
            if flags & libc::AT_SYMLINK_NOFOLLOW != 0 {
                self.fs.symlink_stat(p)
            } else {
                self.fs.stat(p)
            }
        };
        Some(match st {
            Ok(st) => {
                let bytes = match statx_mask {
                    None => stat_bytes(&st),
                    Some(_) => statx_bytes(&st),
                };
                user::write(buf, &bytes).map_or_else(err, |()| 0)
            }
            Err(e) => fs_err(e),
        })
    }

    fn getdents(&self, fd: u64, buf: u64, count: u64) -> R {
        let s = self.served(fd)?;
        if !s.dir {
            return Some(err(libc::ENOTDIR));
        }
        let mut listing = s.listing.lock();
        if listing.is_none() {
            match s.file.read_dir() {
                Ok(entries) => *listing = Some((dirents(&entries), 0)),
                Err(e) => return Some(fs_err(e)),
            }
        }
        let (records, pos) = listing.as_mut().expect("filled above");
        // Whole records that fit.
        let mut end = *pos;
        while end < records.len() {
            let reclen = u16::from_ne_bytes([records[end + 16], records[end + 17]]) as usize;
            if end + reclen - *pos > count as usize {
                break;
            }
            end += reclen;
        }
        if end == *pos && end < records.len() {
            return Some(err(libc::EINVAL));
        }
        let n = end - *pos;
        if let Err(e) = user::write(buf, &records[*pos..end]) {
            return Some(err(e));
        }
        *pos = end;
        Some(n as i64)
    }

    fn fcntl(&self, fd: u64, cmd: u64, arg: u64) -> R {
        let s = self.served(fd)?;
        Some(match cmd as i32 {
            libc::F_GETFL => {
                // Another holder of the open file may have changed
                // `O_APPEND`: the service knows.
                let append = match s.file.appends() {
                    Ok(on) => on,
                    Err(e) => return Some(fs_err(e)),
                };
                let known = s.all_flags() & !libc::O_APPEND;
                // The kernel opens every file with `O_LARGEFILE` on a 64-bit
                // machine, but an `O_PATH` one.
                let flags = match known & libc::O_PATH {
                    0 => known | O_LARGEFILE | if append { libc::O_APPEND } else { 0 },
                    _ => known & (libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW),
                };
                (flags & !(libc::O_CLOEXEC | libc::O_CREAT | libc::O_EXCL | libc::O_TRUNC)) as i64
            }
            libc::F_SETFL => {
                let arg = arg as i32;
                let unserved = libc::O_DIRECT | libc::O_NOATIME;
                if (arg ^ s.all_flags()) & unserved != 0 {
                    return Some(err(libc::EINVAL));
                }
                if let Err(e) = s.file.set_append(arg & libc::O_APPEND != 0) {
                    return Some(fs_err(e));
                }
                s.status
                    .store(arg & SETFL_FLAGS, std::sync::atomic::Ordering::Relaxed);
                0
            }
            libc::F_DUPFD | libc::F_DUPFD_CLOEXEC => {
                let fd2 = trap::raw_syscall(libc::SYS_fcntl, [fd, cmd, arg, 0, 0, 0]);
                if fd2 >= 0 {
                    self.serve(fd2 as i32, s);
                }
                fd2
            }
            // Close-on-exec lives on the descriptor itself.
            libc::F_GETFD | libc::F_SETFD => return None,
            // Byte-range locks: the service's, per open file.
            libc::F_GETLK
            | libc::F_SETLK
            | libc::F_SETLKW
            | libc::F_OFD_GETLK
            | libc::F_OFD_SETLK
            | libc::F_OFD_SETLKW => return Some(self.record_lock(&s, cmd as i32, arg)),
            _ => err(libc::EINVAL),
        })
    }

    /// `ioctl` on a served file: `FIONREAD` as Linux answers it on a
    /// regular file (its size less the offset, as an `int`), close-on-exec
    /// on the descriptor itself; anything else is not a terminal's
    /// (`ENOTTY`).
    fn ioctl(&self, fd: u64, req: u64, arg: u64) -> R {
        let s = self.served(fd)?;
        Some(match req {
            r if r == libc::FIONREAD && !s.dir => {
                let size = match s.file.metadata() {
                    Ok(st) => st.size,
                    Err(e) => return Some(fs_err(e)),
                };
                let at = match s.file.seek_shared(std::io::SeekFrom::Current(0)) {
                    Ok(at) => at,
                    Err(e) => return Some(fs_err(e)),
                };
                // The kernel stores the 64-bit difference as an int.
                let n = size.wrapping_sub(at) as i32;
                user::write(arg, &n.to_ne_bytes()).map_or_else(err, |()| 0)
            }
            r if r == libc::FIOCLEX || r == libc::FIONCLEX => return None,
            _ => err(libc::ENOTTY),
        })
    }

    /// `fcntl`'s record locks on a served file (`struct flock` at `arg`),
    /// as the service's open-file locks.
    fn record_lock(&self, s: &Served, cmd: i32, arg: u64) -> i64 {
        // struct flock: l_type i16, l_whence i16, l_start i64 at 8, l_len
        // i64 at 16, l_pid i32 at 24; 32 bytes.
        let mut fl = [0u8; 32];
        if let Err(e) = user::read_into(arg, &mut fl) {
            return err(e);
        }
        let word = |at: usize| i64::from_ne_bytes(fl[at..at + 8].try_into().expect("8 bytes"));
        let l_type = i16::from_ne_bytes([fl[0], fl[1]]) as i32;
        let whence = i16::from_ne_bytes([fl[2], fl[3]]) as i32;
        let (start, len) = (word(8), word(16));
        let base = match whence {
            libc::SEEK_SET => 0,
            libc::SEEK_CUR => match s.file.seek_shared(std::io::SeekFrom::Current(0)) {
                Ok(o) => o as i64,
                Err(e) => return fs_err(e),
            },
            libc::SEEK_END => match s.file.metadata() {
                Ok(st) => st.size as i64,
                Err(e) => return fs_err(e),
            },
            _ => return err(libc::EINVAL),
        };
        // A negative length covers the bytes before the start.
        let (from, len) = match base.checked_add(start) {
            Some(f) if len < 0 => (f.checked_add(len), len.unsigned_abs()),
            f => (f, len as u64),
        };
        let Some(from) = from.filter(|f| *f >= 0) else {
            return err(libc::EINVAL);
        };
        let kind = match l_type {
            libc::F_RDLCK => LockKind::Read,
            libc::F_WRLCK => LockKind::Write,
            libc::F_UNLCK => LockKind::Unlock,
            _ => return err(libc::EINVAL),
        };
        let acc = s.flags & libc::O_ACCMODE;
        let testing = matches!(cmd, libc::F_GETLK | libc::F_OFD_GETLK);
        if !testing
            && ((kind == LockKind::Read && acc == libc::O_WRONLY)
                || (kind == LockKind::Write && acc == libc::O_RDONLY))
        {
            return err(libc::EBADF);
        }
        if testing {
            if kind == LockKind::Unlock {
                return err(libc::EINVAL);
            }
            return match s.file.test_lock(kind, from as u64, len) {
                Ok(None) => user::write(arg, &(libc::F_UNLCK as i16).to_ne_bytes()).map_or_else(err, |()| 0),
                Ok(Some(h)) => {
                    let t = if h.kind == LockKind::Write {
                        libc::F_WRLCK
                    } else {
                        libc::F_RDLCK
                    };
                    fl[0..2].copy_from_slice(&(t as i16).to_ne_bytes());
                    fl[2..4].copy_from_slice(&(libc::SEEK_SET as i16).to_ne_bytes());
                    fl[8..16].copy_from_slice(&(h.start as i64).to_ne_bytes());
                    fl[16..24].copy_from_slice(&(h.len as i64).to_ne_bytes());
                    fl[24..28].copy_from_slice(&h.pid.to_ne_bytes());
                    user::write(arg, &fl).map_or_else(err, |()| 0)
                }
                Err(e) => fs_err(e),
            };
        }
        let wait = matches!(cmd, libc::F_SETLKW | libc::F_OFD_SETLKW);
        s.file
            .lock(kind, from as u64, len, wait)
            .map_or_else(fs_err, |()| 0)
    }

    /// `flock(2)` on a served file: the host's `flock` of the service's
    /// open file, so it holds whatever the access mode and apart from the
    /// byte-range locks of `fcntl`, as on Linux.
    fn flock(&self, fd: u64, op: u64) -> R {
        let s = self.served(fd)?;
        let op = op as i32;
        let kind = match op & !libc::LOCK_NB {
            libc::LOCK_SH => LockKind::Read,
            libc::LOCK_EX => LockKind::Write,
            libc::LOCK_UN => LockKind::Unlock,
            _ => return Some(err(libc::EINVAL)),
        };
        let r = s.file.flock(kind, op & libc::LOCK_NB == 0);
        Some(match r {
            Err(e) if e.errno() == libc::EAGAIN => err(libc::EWOULDBLOCK),
            r => r.map_or_else(fs_err, |()| 0),
        })
    }

    fn on_path(&self, dirfd: i32, path: u64, f: impl FnOnce(&std::ffi::OsStr) -> Result<(), FsError>) -> R {
        match self.path_at(dirfd, path) {
            Ok(Some(rel)) => Some(f(std::ffi::OsStr::from_bytes(&rel)).map_or_else(fs_err, |()| 0)),
            Ok(None) => None,
            Err(e) => Some(err(e)),
        }
    }

    /// `attr` on the path (`dirfd`, `path`), or on `dirfd` itself if
    /// `path` is null or empty with `AT_EMPTY_PATH`.
    fn set_attr(&self, dirfd: i32, path: u64, flags: i32, attr: Attr) -> R {
        let on_fd =
            path == 0 || (flags & libc::AT_EMPTY_PATH != 0 && user::cstr(path).is_ok_and(|p| p.is_empty()));
        if on_fd {
            let s = self.served(dirfd as u64)?;
            return Some(s.file.set_attr(attr).map_or_else(fs_err, |()| 0));
        }
        let follow = flags & libc::AT_SYMLINK_NOFOLLOW == 0;
        self.on_path(dirfd, path, |p| self.fs.set_attr(p, follow, attr))
    }

    fn utimensat(&self, dirfd: i32, path: u64, times: u64, flags: i32) -> R {
        let mut attr = Attr::none();
        if times == 0 {
            attr.atime = SetTime::Now;
            attr.mtime = SetTime::Now;
        } else {
            let mut raw = [0u8; 32];
            if let Err(e) = user::read_into(times, &mut raw) {
                return if self.served(dirfd as u64).is_some() || path != 0 {
                    Some(err(e))
                } else {
                    None
                };
            }
            let word = |i: usize| i64::from_ne_bytes(raw[i * 8..i * 8 + 8].try_into().expect("8 bytes"));
            let one = |sec: i64, nsec: i64| match nsec {
                n if n == libc::UTIME_NOW => SetTime::Now,
                n if n == libc::UTIME_OMIT => SetTime::Keep,
                n => SetTime::At(Timespec { sec, nsec: n as u32 }),
            };
            attr.atime = one(word(0), word(1));
            attr.mtime = one(word(2), word(3));
        }
        self.set_attr(dirfd, path, flags, attr)
    }

    /// `access`/`faccessat2`: checked by the service with the program's
    /// credentials (its real ids unless `AT_EACCESS`).
    fn access(&self, dirfd: i32, path: u64, mode: u64, flags: u64) -> R {
        let flags = flags as i32;
        if flags & !(libc::AT_EACCESS | libc::AT_SYMLINK_NOFOLLOW | libc::AT_EMPTY_PATH) != 0 {
            return self.path_at(dirfd, path).ok()?.map(|_| err(libc::EINVAL));
        }
        let empty = flags & libc::AT_EMPTY_PATH != 0 && user::cstr(path).is_ok_and(|p| p.is_empty());
        let rel = match empty {
            true => self.served(dirfd as u64)?.path.clone(),
            false => match self.path_at(dirfd, path) {
                Ok(Some(rel)) => rel,
                Ok(None) => return None,
                Err(e) => return Some(err(e)),
            },
        };
        if mode & !7 != 0 {
            return Some(err(libc::EINVAL));
        }
        let flags = (flags & (libc::AT_EACCESS | libc::AT_SYMLINK_NOFOLLOW)) as u32;
        let r = self
            .fs
            .access(std::ffi::OsStr::from_bytes(&rel), mode as u32, flags);
        Some(r.map_or_else(fs_err, |()| 0))
    }

    /// `statfs`/`fstatfs` of something served: the export's file system.
    fn statfs(&self, served: Result<bool, i32>, buf: u64) -> R {
        match served {
            Ok(false) => None,
            Err(e) => Some(err(e)),
            Ok(true) => Some(match self.fs.statfs() {
                Ok(f) => user::write(buf, &statfs_bytes(&f)).map_or_else(err, |()| 0),
                Err(e) => fs_err(e),
            }),
        }
    }

    /// `readlink`: a served symlink's target; `/proc/self/fd/N` of a
    /// served `N` reads as the path the program opened.
    fn readlink(&self, dirfd: i32, path: u64, buf: u64, size: u64) -> R {
        if (size as i64) <= 0 {
            return self.path_at(dirfd, path).ok()?.map(|_| err(libc::EINVAL));
        }
        let p = user::cstr(path).ok()?;
        let target = if let Some(s) = fd_link(&p).and_then(|fd| self.served(fd as u64)) {
            Ok(self.prefix.absolute(&s.path))
        } else {
            match self.path_at(dirfd, path) {
                Ok(Some(rel)) => self.fs.read_link(std::ffi::OsStr::from_bytes(&rel)),
                Ok(None) => return None,
                Err(e) => return Some(err(e)),
            }
        };
        Some(match target {
            Ok(t) => {
                let n = t.len().min(size as usize);
                user::write(buf, &t[..n]).map_or_else(err, |()| n as i64)
            }
            Err(e) => fs_err(e),
        })
    }

    /// `symlink`: made by the service when the new name is served (the
    /// target is stored as given).
    fn symlink(&self, target: u64, dirfd: i32, path: u64) -> R {
        let rel = match self.path_at(dirfd, path) {
            Ok(Some(rel)) => rel,
            Ok(None) => return None,
            Err(e) => return Some(err(e)),
        };
        let target = match user::cstr(target) {
            Ok(t) => t,
            Err(e) => return Some(err(e)),
        };
        let os = std::ffi::OsStr::from_bytes;
        Some(self.fs.symlink(os(&target), os(&rel)).map_or_else(fs_err, |()| 0))
    }

    /// `link`: both names served, or `EXDEV` (once the kernel would have
    /// found the file and the new name's directory: a bad descriptor is
    /// `EBADF`, a missing name `ENOENT`).
    fn link(&self, olddir: i32, old: u64, newdir: i32, new: u64, flags: u64) -> R {
        let follow = flags & libc::AT_SYMLINK_FOLLOW as u64 != 0;
        let first = |e: i32, then: R| {
            Some(if e != 0 {
                err(e)
            } else {
                then.filter(|&r| r < 0).unwrap_or(err(libc::EXDEV))
            })
        };
        let os = std::ffi::OsStr::from_bytes;
        let found = |a: &[u8]| match follow {
            false => self.fs.symlink_stat(os(a)),
            true => self.fs.stat(os(a)),
        };
        match (self.path_at(olddir, old), self.path_at(newdir, new)) {
            (Ok(None), Ok(None)) => None,
            // The file is looked up before the new name's directory.
            (Ok(Some(a)), Err(e)) => Some(found(&a).map_or_else(fs_err, |_| err(e))),
            (Ok(None), Err(e)) => {
                let h = user::cstr(old).map_or(libc::EFAULT, |p| host_lookup(olddir, &p, follow, false));
                Some(err(if h != 0 { h } else { e }))
            }
            (Err(e), _) => Some(err(e)),
            (Ok(None), Ok(Some(_))) => {
                let e = user::cstr(old).map_or(libc::EFAULT, |p| host_lookup(olddir, &p, follow, false));
                first(e, self.parent_error(newdir, new))
            }
            (Ok(Some(a)), Ok(None)) => match found(&a) {
                Err(e) => Some(fs_err(e)),
                Ok(_) => first(host_parent(newdir, new), None),
            },
            (Ok(Some(_)), Ok(Some(_))) if flags & !(libc::AT_SYMLINK_FOLLOW as u64) != 0 => {
                Some(err(libc::EINVAL))
            }
            (Ok(Some(a)), Ok(Some(b))) => {
                // `AT_SYMLINK_FOLLOW`: a link to what a symlink leads to.
                let a = match follow {
                    false => a,
                    true => match links::resolve(&self.prefix, &a, true, &LinkLookup(&self.fs)) {
                        Ok(links::Target::Served(p)) => p,
                        Ok(links::Target::Host(_)) => return Some(err(libc::EXDEV)),
                        Err(e) => return Some(err(e)),
                    },
                };
                // The export's root, a directory, has no name in a
                // directory the service could link from.
                // (`EPERM` once the new name's directory is found and the
                // name is free.)
                if a == b"." {
                    return Some(match self.parent_error(newdir, new) {
                        Some(r) if r < 0 => r,
                        _ if self.fs.symlink_stat(os(&b)).is_ok() => err(libc::EEXIST),
                        _ => err(libc::EPERM),
                    });
                }
                Some(self.fs.hard_link(os(&a), os(&b)).map_or_else(fs_err, |()| 0))
            }
        }
    }

    /// The served path a Unix-domain socket address names, if it names
    /// one (abstract and unnamed addresses and other families do not).
    fn socket_path(&self, addr: u64, len: u64) -> Result<Option<Vec<u8>>, i32> {
        let len = (len as usize).min(std::mem::size_of::<libc::sockaddr_un>());
        if len <= 2 {
            return Ok(None);
        }
        let mut raw = vec![0u8; len];
        user::read_into(addr, &mut raw)?;
        if u16::from_ne_bytes([raw[0], raw[1]]) != libc::AF_UNIX as u16 || raw[2] == 0 {
            return Ok(None);
        }
        let end = raw[2..].iter().position(|&b| b == 0).map_or(len, |i| i + 2);
        let mut path = raw[2..end].to_vec();
        path.push(0);
        self.path_at(libc::AT_FDCWD, path.as_ptr() as u64)
    }

    /// `bind` of a Unix-domain socket to a served path: the service binds
    /// the program's socket (a descriptor of it passed along), making the
    /// socket file beneath its root.
    fn bind(&self, fd: u64, addr: u64, len: u64) -> R {
        let rel = match self.socket_path(addr, len) {
            Ok(Some(rel)) => rel,
            Ok(None) => return None,
            Err(e) => return Some(err(e)),
        };
        if self.served(fd).is_some() {
            return Some(err(libc::ENOTSOCK));
        }
        let sock = match crate::raw::dup_owned(fd) {
            Ok(s) => s,
            Err(e) => return Some(e),
        };
        let os = std::ffi::OsStr::from_bytes;
        Some(self.fs.bind(os(&rel), sock).map_or_else(fs_err, |()| 0))
    }

    /// `connect` of a Unix-domain socket to a served path: the service
    /// hands over the socket file's `O_PATH` descriptor (as for an `open`
    /// of it) and the program connects through `/proc/self/fd`, so the
    /// kernel checks its access and the connection is the kernel's.
    fn connect(&self, fd: u64, addr: u64, len: u64) -> R {
        use std::os::fd::AsRawFd;
        let rel = match self.socket_path(addr, len) {
            Ok(Some(rel)) => rel,
            Ok(None) => return None,
            Err(e) => return Some(err(e)),
        };
        if self.served(fd).is_some() {
            return Some(err(libc::ENOTSOCK));
        }
        let mut o = OpenOptions::new();
        o.read(true)
            .custom_flags(libc::O_PATH as u32)
            .io_path(lintel_fs::IoPath::Copy);
        let file = match self.fs.open_with(std::ffi::OsStr::from_bytes(&rel), &o) {
            Ok(f) => f,
            Err(e) => return Some(fs_err(e)),
        };
        let path_fd = match file.metadata() {
            Ok(st) if st.mode & libc::S_IFMT == libc::S_IFSOCK => file.path_descriptor(),
            Ok(_) => return Some(err(libc::ECONNREFUSED)),
            Err(e) => return Some(fs_err(e)),
        };
        let path_fd = match path_fd {
            Ok(p) => p,
            Err(e) => return Some(fs_err(e)),
        };
        let mut sun: libc::sockaddr_un = crate::raw::zeroed();
        sun.sun_family = libc::AF_UNIX as u16;
        let path = format!("/proc/self/fd/{}", path_fd.as_raw_fd());
        for (d, s) in sun.sun_path.iter_mut().zip(path.bytes()) {
            *d = s as libc::c_char;
        }
        let len = std::mem::size_of::<libc::sa_family_t>() + path.len() + 1;
        Some(trap::raw_syscall(
            libc::SYS_connect,
            [fd, &sun as *const libc::sockaddr_un as u64, len as u64, 0, 0, 0],
        ))
    }

    /// Whether the last name of `path` (relative to `dirfd`) is `.`
    /// (`Some(Ok(false))`) or `..` (`Some(Ok(true))`), which no call that
    /// acts on a name in a directory takes: Linux resolves the directory
    /// it is in first, and that error (`Some(Err)`) comes before the
    /// call's own. `None`: another name, or not a served path.
    fn dot_last(&self, dirfd: i32, path: u64) -> Option<Result<bool, i32>> {
        let p = user::cstr(path).ok()?;
        let end = p.iter().rposition(|&b| b != b'/').map_or(0, |i| i + 1);
        let start = p[..end].iter().rposition(|&b| b == b'/').map_or(0, |i| i + 1);
        let dotdot = match &p[start..end] {
            b"." => false,
            b".." => true,
            _ => return None,
        };
        let mut dir = if start == 0 {
            b".".to_vec()
        } else {
            p[..start].to_vec()
        };
        dir.push(0);
        Some(match self.path_at(dirfd, dir.as_ptr() as u64) {
            Ok(Some(rel)) => match self.fs.stat(std::ffi::OsStr::from_bytes(&rel)) {
                Ok(st) if st.is_dir() => Ok(dotdot),
                Ok(_) => Err(libc::ENOTDIR),
                Err(e) => Err(e.errno()),
            },
            Ok(None) => return None,
            Err(e) => Err(e),
        })
    }

    /// `rmdir`: of `d/.`, `EINVAL`, and of `d/..`, `ENOTEMPTY`, as Linux
    /// answers (the service sees the path with `.` and `..` collapsed).
    fn rmdir(&self, dirfd: i32, path: u64) -> R {
        match self.dot_last(dirfd, path) {
            Some(Ok(false)) => Some(err(libc::EINVAL)),
            Some(Ok(true)) => Some(err(libc::ENOTEMPTY)),
            Some(Err(e)) => Some(err(e)),
            None => self.on_path(dirfd, path, |p| self.fs.remove_dir(p)),
        }
    }

    /// Whether the directory holding the last name of (`dirfd`, `path`)
    /// is one: 0, or the error finding it. `None`: not served.
    fn parent_error(&self, dirfd: i32, path: u64) -> R {
        let p = user::cstr(path).ok()?;
        let mut parent = match last_name(&p).0 {
            [] => b".".to_vec(),
            d => d.to_vec(),
        };
        parent.push(0);
        let rel = match self.path_at(dirfd, parent.as_ptr() as u64) {
            Ok(Some(rel)) => rel,
            Ok(None) => return None,
            Err(e) => return Some(err(e)),
        };
        Some(match self.fs.stat(std::ffi::OsStr::from_bytes(&rel)) {
            Ok(st) if st.is_dir() => 0,
            Ok(_) => err(libc::ENOTDIR),
            Err(e) => fs_err(e),
        })
    }

    fn rename(&self, olddir: i32, old: u64, newdir: i32, new: u64, flags: u64) -> R {
        // A last name `.` or `..` is `EBUSY`, once both directories are
        // found.
        let dot = |p: u64| user::cstr(p).is_ok_and(|p| matches!(last_name(&p).1, b"." | b".."));
        if dot(old) || dot(new) {
            let found =
                [(olddir, old), (newdir, new)]
                    .into_iter()
                    .find_map(|(d, p)| match self.parent_error(d, p) {
                        Some(r) => (r < 0).then_some(r),
                        None => Some(err(host_parent(d, p))).filter(|&r| r < 0),
                    });
            if let Some(r) = found {
                return Some(r);
            }
            if self.path_at(olddir, old).is_ok_and(|p| p.is_some())
                || self.path_at(newdir, new).is_ok_and(|p| p.is_some())
            {
                return Some(err(libc::EBUSY));
            }
        }
        let (a, b) = (self.path_at(olddir, old), self.path_at(newdir, new));
        match (a, b) {
            (Ok(None), Ok(None)) => None,
            // The old name's directory is looked up first.
            (Ok(Some(_)), Err(e)) => Some(
                self.parent_error(olddir, old)
                    .filter(|&r| r < 0)
                    .unwrap_or(err(e)),
            ),
            (Ok(None), Err(e)) => Some(err(match host_parent(olddir, old) {
                0 => e,
                h => h,
            })),
            (Err(e), _) => Some(err(e)),
            // `EXDEV` once both names' directories are found.
            (Ok(Some(_)), Ok(None)) => Some(match self.parent_error(olddir, old) {
                Some(r) if r < 0 => r,
                _ => err(match host_parent(newdir, new) {
                    0 => libc::EXDEV,
                    e => e,
                }),
            }),
            (Ok(None), Ok(Some(_))) => Some(match host_parent(olddir, old) {
                0 => self
                    .parent_error(newdir, new)
                    .filter(|&r| r < 0)
                    .unwrap_or(err(libc::EXDEV)),
                e => err(e),
            }),
            (Ok(Some(_)), Ok(Some(_))) if flags != 0 => Some(err(libc::EINVAL)),
            (Ok(Some(a)), Ok(Some(b))) => Some(
                self.fs
                    .rename(std::ffi::OsStr::from_bytes(&a), std::ffi::OsStr::from_bytes(&b))
                    .map_or_else(fs_err, |()| 0),
            ),
        }
    }
}

impl Emulation {
    /// Answer call `nr` if it names something served.
    fn dispatch(&self, nr: i64, a: [u64; 6]) -> R {
        let cwd = libc::AT_FDCWD;
        if refused_on_path_only(nr, a) && self.served(a[0]).is_some_and(|s| s.flags & libc::O_PATH != 0) {
            return Some(err(libc::EBADF));
        }
        match nr {
            libc::SYS_open => self.open(cwd, a[0], a[1], a[2]),
            libc::SYS_openat => self.open(a[0] as i32, a[1], a[2], a[3]),
            libc::SYS_creat => self.open(
                cwd,
                a[0],
                (libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC) as u64,
                a[1],
            ),
            libc::SYS_close => self.close(a[0]),
            libc::SYS_statfs => match self.path_at(cwd, a[0]) {
                // The path must name something, as for the kernel.
                Ok(Some(rel)) => match self.fs.stat(std::ffi::OsStr::from_bytes(&rel)) {
                    Ok(_) => self.statfs(Ok(true), a[1]),
                    Err(e) => Some(fs_err(e)),
                },
                other => self.statfs(other.map(|p| p.is_some()), a[1]),
            },
            libc::SYS_fstatfs => self.statfs(Ok(self.served(a[0]).is_some()), a[1]),
            libc::SYS_chdir => self.chdir(a[0]),
            libc::SYS_fchdir => self.fchdir(a[0]),
            libc::SYS_getcwd => self.getcwd(a[0], a[1]),
            libc::SYS_truncate => self.on_path(cwd, a[0], |p| {
                // A negative length is refused before the path is looked up.
                if (a[1] as i64) < 0 {
                    return Err(FsError::Os { errno: libc::EINVAL });
                }
                let mut o = OpenOptions::new();
                o.write(true);
                self.fs.open_with(p, &o)?.set_len(a[1])
            }),
            libc::SYS_read => self.read(a[0], a[1], a[2], None),
            libc::SYS_pread64 => self.read(a[0], a[1], a[2], Some(a[3])),
            libc::SYS_write => self.write(a[0], a[1], a[2], None),
            libc::SYS_pwrite64 => self.write(a[0], a[1], a[2], Some(a[3])),
            libc::SYS_readv => self.vectored(a[0], a[1], a[2], None, Dir::Read),
            libc::SYS_writev => self.vectored(a[0], a[1], a[2], None, Dir::Write),
            libc::SYS_preadv | libc::SYS_preadv2 => self.vectored(a[0], a[1], a[2], at(nr, a), Dir::Read),
            libc::SYS_pwritev | libc::SYS_pwritev2 => self.vectored(a[0], a[1], a[2], at(nr, a), Dir::Write),
            libc::SYS_lseek => self.lseek(a[0], a[1], a[2]),
            libc::SYS_fstat => self.fstat(a[0], a[1]),
            libc::SYS_stat => self.stat_at(cwd as u64, a[0], a[1], 0, None),
            libc::SYS_lstat => self.stat_at(cwd as u64, a[0], a[1], libc::AT_SYMLINK_NOFOLLOW as u64, None),
            libc::SYS_newfstatat => self.stat_at(a[0], a[1], a[2], a[3], None),
            libc::SYS_statx => self.stat_at(a[0], a[1], a[4], a[2], Some(a[3])),
            libc::SYS_getdents64 => self.getdents(a[0], a[1], a[2]),
            libc::SYS_fcntl => self.fcntl(a[0], a[1], a[2]),
            libc::SYS_dup => self.dup_to(a[0], None, 0),
            libc::SYS_dup2 => self.dup_to(a[0], Some(a[1]), 0),
            // `dup3` onto itself is `EINVAL` (`dup2`'s no-op is not its).
            libc::SYS_dup3 if a[0] == a[1] => self.served(a[0]).map(|_| err(libc::EINVAL)),
            libc::SYS_dup3 => self.dup_to(a[0], Some(a[1]), a[2]),
            libc::SYS_flock => self.flock(a[0], a[1]),
            libc::SYS_fsync => self
                .served(a[0])
                .map(|s| s.file.sync_all().map_or_else(fs_err, |()| 0)),
            libc::SYS_fdatasync => self
                .served(a[0])
                .map(|s| s.file.sync_data().map_or_else(fs_err, |()| 0)),
            libc::SYS_ftruncate => self
                .served(a[0])
                .map(|s| s.file.set_len(a[1]).map_or_else(fs_err, |()| 0)),
            libc::SYS_fadvise64 => self.served(a[0]).map(|_| 0),
            libc::SYS_ioctl => self.ioctl(a[0], a[1], a[2]),
            libc::SYS_fallocate => self.served(a[0]).map(|s| {
                s.file
                    .allocate(a[1] as u32, a[2], a[3])
                    .map_or_else(fs_err, |()| 0)
            }),
            libc::SYS_mmap => self.mmap(a),
            // In-kernel copies cannot reach a served file: programs fall
            // back to reading and writing.
            libc::SYS_copy_file_range => {
                (self.served(a[0]).is_some() || self.served(a[2]).is_some()).then(|| err(libc::EXDEV))
            }
            libc::SYS_sendfile => {
                (self.served(a[0]).is_some() || self.served(a[1]).is_some()).then(|| err(libc::EINVAL))
            }
            libc::SYS_splice => {
                (self.served(a[0]).is_some() || self.served(a[2]).is_some()).then(|| err(libc::EINVAL))
            }
            libc::SYS_unlink => self.on_path(cwd, a[0], |p| self.fs.remove_file(p)),
            libc::SYS_rmdir => self.rmdir(cwd, a[0]),
            libc::SYS_unlinkat if a[2] as i32 & libc::AT_REMOVEDIR != 0 => self.rmdir(a[0] as i32, a[1]),
            libc::SYS_unlinkat => {
                let dir = a[2] as i32 & libc::AT_REMOVEDIR != 0;
                self.on_path(a[0] as i32, a[1], |p| {
                    if dir {
                        self.fs.remove_dir(p)
                    } else {
                        self.fs.remove_file(p)
                    }
                })
            }
            libc::SYS_bind => self.bind(a[0], a[1], a[2]),
            libc::SYS_connect => self.connect(a[0], a[1], a[2]),
            libc::SYS_mknod => self.on_path(cwd, a[0], |p| self.fs.mknod(p, a[1] as u32, a[2])),
            libc::SYS_mknodat => self.on_path(a[0] as i32, a[1], |p| self.fs.mknod(p, a[2] as u32, a[3])),
            libc::SYS_mkdir => self.on_path(cwd, a[0], |p| self.fs.create_dir(p, a[1] as u32)),
            libc::SYS_mkdirat => self.on_path(a[0] as i32, a[1], |p| self.fs.create_dir(p, a[2] as u32)),
            libc::SYS_rename => self.rename(cwd, a[0], cwd, a[1], 0),
            libc::SYS_renameat => self.rename(a[0] as i32, a[1], a[2] as i32, a[3], 0),
            libc::SYS_renameat2 => self.rename(a[0] as i32, a[1], a[2] as i32, a[3], a[4]),
            libc::SYS_access => self.access(cwd, a[0], a[1], 0),
            libc::SYS_faccessat => self.access(a[0] as i32, a[1], a[2], 0),
            libc::SYS_faccessat2 => self.access(a[0] as i32, a[1], a[2], a[3]),
            libc::SYS_readlink => self.readlink(cwd, a[0], a[1], a[2]),
            libc::SYS_readlinkat => self.readlink(a[0] as i32, a[1], a[2], a[3]),
            libc::SYS_symlink => self.symlink(a[0], cwd, a[1]),
            libc::SYS_symlinkat => self.symlink(a[0], a[1] as i32, a[2]),
            libc::SYS_link => self.link(cwd, a[0], cwd, a[1], 0),
            libc::SYS_linkat => self.link(a[0] as i32, a[1], a[2] as i32, a[3], a[4]),
            libc::SYS_chmod => self.set_attr(
                cwd,
                a[0],
                0,
                Attr {
                    mode: Some(a[1] as u32),
                    ..Attr::none()
                },
            ),
            libc::SYS_fchmod => self.set_attr(
                a[0] as i32,
                0,
                0,
                Attr {
                    mode: Some(a[1] as u32),
                    ..Attr::none()
                },
            ),
            libc::SYS_fchmodat => self.set_attr(
                a[0] as i32,
                a[1],
                0,
                Attr {
                    mode: Some(a[2] as u32),
                    ..Attr::none()
                },
            ),
            libc::SYS_chown => self.set_attr(cwd, a[0], 0, owner(a[1], a[2])),
            libc::SYS_lchown => self.set_attr(cwd, a[0], libc::AT_SYMLINK_NOFOLLOW, owner(a[1], a[2])),
            libc::SYS_fchown => self.set_attr(a[0] as i32, 0, 0, owner(a[1], a[2])),
            libc::SYS_fchownat => self.set_attr(a[0] as i32, a[1], a[4] as i32, owner(a[2], a[3])),
            libc::SYS_utimensat => self.utimensat(a[0] as i32, a[1], a[2], a[3] as i32),
            // Buffers the fast path checked may be gone: check again.
            libc::SYS_munmap | libc::SYS_mremap | libc::SYS_mprotect | libc::SYS_madvise => {
                user::MAP_GENERATION.fetch_add(1, std::sync::atomic::Ordering::Release);
                None
            }
            // No extended attributes on served files: "none here".
            libc::SYS_getxattr | libc::SYS_lgetxattr => self
                .on_path(cwd, a[0], |p| self.fs.symlink_stat(p).map(drop))
                .map(|r| if r == 0 { err(libc::ENODATA) } else { r }),
            libc::SYS_listxattr | libc::SYS_llistxattr => {
                self.on_path(cwd, a[0], |p| self.fs.symlink_stat(p).map(drop))
            }
            libc::SYS_fgetxattr => self.served(a[0]).map(|_| err(libc::ENODATA)),
            libc::SYS_flistxattr => self.served(a[0]).map(|_| 0),
            // Setting one is not supported (`cp -a` then keeps to the mode
            // bits, as on a file system without them).
            libc::SYS_setxattr | libc::SYS_removexattr => self
                .on_path(cwd, a[0], |p| self.fs.stat(p).map(drop))
                .map(|r| if r == 0 { err(libc::EOPNOTSUPP) } else { r }),
            libc::SYS_lsetxattr | libc::SYS_lremovexattr => self
                .on_path(cwd, a[0], |p| self.fs.symlink_stat(p).map(drop))
                .map(|r| if r == 0 { err(libc::EOPNOTSUPP) } else { r }),
            libc::SYS_fsetxattr | libc::SYS_fremovexattr => self.served(a[0]).map(|_| err(libc::EOPNOTSUPP)),
            _ => None,
        }
    }

    /// Call `nr` again, the service having refused (`EXDEV`) a symlink in
    /// its path that leaves the export: followed as the program would see
    /// it ([`links`]), into the served tree or out to the kernel. `None`:
    /// not a call that names one path, or nothing to follow.
    fn follow_out(&self, nr: i64, a: [u64; 6]) -> Option<i64> {
        let arg = PathArg::of(nr, a)?;
        let dirfd = arg.dirfd.map_or(libc::AT_FDCWD, |i| a[i] as i32);
        let rel = self.path_at(dirfd, a[arg.path]).ok()??;
        let look = LinkLookup(&self.fs);
        let target = match links::resolve(&self.prefix, &rel, arg.follow_last, &look) {
            Ok(t) => t,
            Err(e) => return Some(err(e)),
        };
        let mut again = a;
        if let Some(i) = arg.dirfd {
            again[i] = libc::AT_FDCWD as u64;
        }
        let mut path = match &target {
            links::Target::Served(p) if *p == rel => return None,
            links::Target::Served(p) => self.prefix.absolute(p),
            links::Target::Host(p) => p.clone(),
        };
        path.push(0);
        again[arg.path] = path.as_ptr() as u64;
        match target {
            links::Target::Served(_) => self.dispatch(nr, again),
            links::Target::Host(_) if nr == libc::SYS_chdir => self.kernel_chdir(nr, again[0]),
            links::Target::Host(_) => Some(trap::raw_syscall(nr, again)),
        }
    }
}

/// The kernel's `O_LARGEFILE` on x86-64 (glibc's, and so `libc`'s, is 0).
const O_LARGEFILE: i32 = 0o100000;

/// Whether call `nr` on an `O_PATH` descriptor (its first argument) is
/// `EBADF`: anything that reads, writes or changes the file through it.
fn refused_on_path_only(nr: i64, a: [u64; 6]) -> bool {
    match nr {
        libc::SYS_read
        | libc::SYS_write
        | libc::SYS_pread64
        | libc::SYS_pwrite64
        | libc::SYS_readv
        | libc::SYS_writev
        | libc::SYS_preadv
        | libc::SYS_pwritev
        | libc::SYS_preadv2
        | libc::SYS_pwritev2
        | libc::SYS_lseek
        | libc::SYS_fallocate
        | libc::SYS_fchmod
        | libc::SYS_fchown
        | libc::SYS_getdents64
        | libc::SYS_ioctl
        | libc::SYS_flock
        | libc::SYS_fsync
        | libc::SYS_fdatasync
        | libc::SYS_fadvise64
        | libc::SYS_fgetxattr
        | libc::SYS_flistxattr
        | libc::SYS_fsetxattr
        | libc::SYS_fremovexattr => true,
        // A negative length is `EINVAL` first.
        libc::SYS_ftruncate => (a[1] as i64) >= 0,
        libc::SYS_fcntl => !matches!(
            a[1] as i32,
            libc::F_GETFL | libc::F_GETFD | libc::F_SETFD | libc::F_DUPFD | libc::F_DUPFD_CLOEXEC
        ),
        _ => false,
    }
}

/// A path (its trailing slashes aside) as the directory part, with its
/// slash, and the last name.
fn last_name(p: &[u8]) -> (&[u8], &[u8]) {
    let trimmed = p.len() - p.iter().rev().take_while(|&&b| b == b'/').count();
    let p = &p[..trimmed];
    let at = p.iter().rposition(|&b| b == b'/').map_or(0, |i| i + 1);
    (&p[..at], &p[at..])
}

/// What the kernel says of (`dirfd`, `path`), a name not served: 0 if
/// it is there (and a directory, if `dir`), or the errno.
fn host_lookup(dirfd: i32, path: &[u8], follow: bool, dir: bool) -> i32 {
    let mut p = path.to_vec();
    p.push(0);
    let flags = if follow { 0 } else { libc::AT_SYMLINK_NOFOLLOW };
    let mut st = [0u8; 144];
    let r = trap::raw_syscall(
        libc::SYS_newfstatat,
        [
            dirfd as u64,
            p.as_ptr() as u64,
            st.as_mut_ptr() as u64,
            flags as u64,
            0,
            0,
        ],
    );
    if r < 0 {
        return -r as i32;
    }
    // `st_mode`, at 24 in x86-64's `struct stat`.
    let mode = u32::from_ne_bytes(st[24..28].try_into().expect("4 bytes"));
    if dir && mode & libc::S_IFMT != libc::S_IFDIR {
        return libc::ENOTDIR;
    }
    0
}

/// What the kernel says of the directory holding the last name of
/// (`dirfd`, `path`), a name not served: 0 or the errno (before a call
/// naming a served name too is `EXDEV`).
fn host_parent(dirfd: i32, path: u64) -> i32 {
    let Ok(p) = user::cstr(path) else {
        return libc::EFAULT;
    };
    let parent = match last_name(&p).0 {
        [] => b".".as_slice(),
        d => d,
    };
    host_lookup(dirfd, parent, true, true)
}

/// The service's answers for [`links::resolve`].
struct LinkLookup<'a>(&'a Fs);

impl links::Lookup for LinkLookup<'_> {
    fn link(&self, rel: &[u8]) -> Result<Option<Vec<u8>>, i32> {
        let rel = std::ffi::OsStr::from_bytes(rel);
        match self.0.symlink_stat(rel) {
            Ok(st) if st.is_symlink() => self.0.read_link(rel).map(Some).map_err(|e| e.errno()),
            Ok(_) => Ok(None),
            Err(e) => Err(e.errno()),
        }
    }
}

/// Where a call that names one path has it: the argument of its
/// directory descriptor (for the `*at` calls) and of the path, and whether
/// a symlink as its last name is followed.
struct PathArg {
    dirfd: Option<usize>,
    path: usize,
    follow_last: bool,
}

impl PathArg {
    fn of(nr: i64, a: [u64; 6]) -> Option<PathArg> {
        let nofollow = |flags: u64| flags as i32 & libc::AT_SYMLINK_NOFOLLOW == 0;
        let open = |flags: u64| {
            let f = flags as i32;
            // (`O_PATH` drops `O_CREAT` and `O_EXCL`.)
            let excl =
                f & libc::O_PATH == 0 && f & (libc::O_CREAT | libc::O_EXCL) == libc::O_CREAT | libc::O_EXCL;
            f & libc::O_NOFOLLOW == 0 && !excl
        };
        let (dirfd, path, follow_last) = match nr {
            libc::SYS_open => (None, 0, open(a[1])),
            libc::SYS_creat
            | libc::SYS_stat
            | libc::SYS_access
            | libc::SYS_chdir
            | libc::SYS_truncate
            | libc::SYS_statfs
            | libc::SYS_chmod
            | libc::SYS_chown
            | libc::SYS_getxattr
            | libc::SYS_listxattr
            | libc::SYS_setxattr
            | libc::SYS_removexattr => (None, 0, true),
            libc::SYS_lstat
            | libc::SYS_lchown
            | libc::SYS_readlink
            | libc::SYS_unlink
            | libc::SYS_rmdir
            | libc::SYS_mkdir
            | libc::SYS_lgetxattr
            | libc::SYS_llistxattr
            | libc::SYS_lsetxattr
            | libc::SYS_lremovexattr => (None, 0, false),
            libc::SYS_openat => (Some(0), 1, open(a[2])),
            libc::SYS_faccessat | libc::SYS_fchmodat => (Some(0), 1, true),
            libc::SYS_newfstatat | libc::SYS_faccessat2 => (Some(0), 1, nofollow(a[3])),
            libc::SYS_statx => (Some(0), 1, nofollow(a[2])),
            libc::SYS_fchownat => (Some(0), 1, nofollow(a[4])),
            libc::SYS_utimensat if a[1] != 0 => (Some(0), 1, nofollow(a[3])),
            libc::SYS_readlinkat | libc::SYS_unlinkat | libc::SYS_mkdirat => (Some(0), 1, false),
            libc::SYS_symlink => (None, 1, false),
            libc::SYS_symlinkat => (Some(1), 2, false),
            _ => return None,
        };
        Some(PathArg {
            dirfd,
            path,
            follow_last,
        })
    }
}

use std::os::unix::ffi::OsStrExt;

impl Emulator for Emulation {
    fn before_fork_or_exec(&self) {
        // The trap path calls this for `exec` only (forks are recorded by
        // the preload library's wrapper, which calls `record_all`).
        self.record_all();
        self.record_cwd();
    }

    fn exec_failed(&self) {
        Emulation::exec_failed(self);
    }

    fn exec(&self, nr: i64, a: [u64; 6]) -> Option<i64> {
        self.exec_served(nr, a)
    }

    fn emulate(&self, nr: i64, a: [u64; 6]) -> Option<i64> {
        if let Some(r) = reserved(nr, a) {
            return Some(r);
        }
        if changes_credentials(nr) {
            // Made here, then noted: a served call of another thread that
            // came between would otherwise tell the service too early.
            let r = trap::raw_syscall(nr, a);
            Fs::credentials_changed();
            return Some(r);
        }
        if trap::forked_child() {
            // A child forked through the preload library's wrapper gets a
            // runtime of its own on its first use of a served file; any
            // other forked child serves what it can without one.
            if self.child_touches_served(nr, a)
                && let Some(e) = REVIVER.get().and_then(|revive| revive())
            {
                return e.emulate(nr, a);
            }
            return self.emulate_in_forked_child(nr, a);
        }
        let r = self.dispatch(nr, a);
        if r == Some(err(libc::EXDEV))
            && let Some(r) = self.follow_out(nr, a)
        {
            return Some(r);
        }
        r
    }
}

/// How a forked child gets a lintel runtime and an emulation of its own
/// (set by the preload library; `None` from it: not possible here).
static REVIVER: std::sync::OnceLock<fn() -> Option<&'static Emulation>> = std::sync::OnceLock::new();

/// Set how a forked child gets a runtime of its own: called (once per
/// child, on its only thread) on the child's first use of a served file,
/// it returns the child's new emulation, or `None` to leave the child
/// without one (its use of served files then fails with EIO, and its
/// opens are deferred to the image it `exec`s).
pub fn set_reviver(revive: fn() -> Option<&'static Emulation>) {
    let _ = REVIVER.set(revive);
}

/// Keep the program below the descriptor floor, where the lintel runtime
/// keeps its own descriptors ([`lintel::set_descriptor_floor`]): the
/// program sees the floor as its descriptor limit, so `dup2` onto a
/// number above it fails as above any limit, `close` finds nothing
/// there, and `close_range` stops below it. `None`: not such a call.
/// Whether call `nr` may change the program's credentials or umask,
/// which the service acts with.
fn changes_credentials(nr: i64) -> bool {
    matches!(
        nr,
        libc::SYS_setuid
            | libc::SYS_setgid
            | libc::SYS_setreuid
            | libc::SYS_setregid
            | libc::SYS_setresuid
            | libc::SYS_setresgid
            | libc::SYS_setfsuid
            | libc::SYS_setfsgid
            | libc::SYS_setgroups
            | libc::SYS_umask
    )
}

fn reserved(nr: i64, a: [u64; 6]) -> R {
    let floor = lintel::descriptor_floor() as u64;
    if floor == 0 {
        return None;
    }
    let nofile = |resource: u64| resource == libc::RLIMIT_NOFILE as u64;
    match nr {
        libc::SYS_dup2 | libc::SYS_dup3 if a[1] >= floor && a[1] <= i32::MAX as u64 => Some(err(libc::EBADF)),
        libc::SYS_fcntl if matches!(a[1] as i32, libc::F_DUPFD | libc::F_DUPFD_CLOEXEC) && a[2] >= floor => {
            Some(err(libc::EINVAL))
        }
        libc::SYS_close if a[0] >= floor && a[0] <= i32::MAX as u64 => Some(err(libc::EBADF)),
        libc::SYS_close_range if a[0] >= floor => Some(0),
        libc::SYS_close_range if a[1] >= floor => Some(trap::raw_syscall(
            libc::SYS_close_range,
            [a[0], floor - 1, a[2], 0, 0, 0],
        )),
        libc::SYS_getrlimit if nofile(a[0]) => Some(nofile_view(floor, a[1])),
        libc::SYS_setrlimit if nofile(a[0]) => Some(0),
        libc::SYS_prlimit64 if nofile(a[1]) && (a[0] == 0 || a[0] == std::process::id() as u64) => {
            Some(if a[3] != 0 { nofile_view(floor, a[3]) } else { 0 })
        }
        _ => None,
    }
}

/// The program's descriptor limits (the kernel's, capped at the floor)
/// written to its `struct rlimit` at `to`. Raising them is accepted and
/// changes nothing: the floor is the most the program may have.
fn nofile_view(floor: u64, to: u64) -> i64 {
    let mut lim = [0u64; 2];
    let r = trap::raw_syscall(
        libc::SYS_prlimit64,
        [0, libc::RLIMIT_NOFILE as u64, 0, lim.as_mut_ptr() as u64, 0, 0],
    );
    if r < 0 {
        return r;
    }
    let view = [lim[0].min(floor), lim[1].min(floor)];
    let bytes: Vec<u8> = view.iter().flat_map(|v| v.to_ne_bytes()).collect();
    user::write(to, &bytes).map_or_else(err, |()| 0)
}

/// Which way a vectored call moves data.
#[derive(Clone, Copy)]
enum Dir {
    Read,
    Write,
}

/// The offset of a `preadv`/`pwritev` (`preadv2` and `pwritev2` take -1
/// for the file's own offset).
fn at(nr: i64, a: [u64; 6]) -> Option<u64> {
    let v2 = nr == libc::SYS_preadv2 || nr == libc::SYS_pwritev2;
    (!(v2 && a[3] as i64 == -1)).then_some(a[3])
}

/// Whether descriptor `fd` is a served file's placeholder (asked of the
/// kernel, with no allocation: a forked child may hold no malloc lock).
fn placeholder_fd(fd: i32) -> bool {
    if fd < 0 {
        return false;
    }
    let mut path = *b"/proc/self/fd/\0\0\0\0\0\0\0\0\0\0\0\0";
    let mut digits = [0u8; 10];
    let (mut n, mut i) = (fd as u32, digits.len());
    loop {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    path[14..14 + digits.len() - i].copy_from_slice(&digits[i..]);
    let mut link = [0u8; 32];
    let n = trap::raw_syscall(
        libc::SYS_readlinkat,
        [
            libc::AT_FDCWD as u64,
            path.as_ptr() as u64,
            link.as_mut_ptr() as u64,
            link.len() as u64,
            0,
            0,
        ],
    );
    n > 0 && link[..n as usize].starts_with(PLACEHOLDER_LINK)
}

/// What `/proc/self/fd/N` reads for a placeholder.
const PLACEHOLDER_LINK: &[u8] = b"/memfd:lintel-served";

/// A placeholder descriptor: an empty memfd of its own, named so that an
/// image this one `exec`s recognizes it.
fn placeholder(cloexec: bool) -> i64 {
    let flags = if cloexec { libc::MFD_CLOEXEC } else { 0 };
    trap::raw_syscall(
        libc::SYS_memfd_create,
        [c"lintel-served".as_ptr() as u64, flags as u64, 0, 0, 0, 0],
    )
}

/// The client's open options for `open(2)` flags and a mode: the access
/// mode as it is, every other flag passed to the service raw, so that
/// `O_RDONLY|O_CREAT` creates and `O_RDONLY|O_TRUNC` truncates, as on
/// Linux (`OpenOptions`' own `create` and `truncate`, like the standard
/// library's, want writing).
fn options_for(flags: i32, mode: u32) -> OpenOptions {
    let acc = flags & libc::O_ACCMODE;
    let passed = flags & !(libc::O_ACCMODE | libc::O_CLOEXEC);
    let mut o = OpenOptions::new();
    o.read(acc != libc::O_WRONLY)
        .write(acc != libc::O_RDONLY)
        .mode(mode)
        .custom_flags(passed as u32)
        .mapped_max(MAPPED_MAX_CALL);
    o
}

/// Whether `st` is a FIFO, socket or device: the service opens none of
/// them ([`open_special`]).
fn special(st: &Stat) -> bool {
    !matches!(
        st.mode & libc::S_IFMT,
        libc::S_IFREG | libc::S_IFDIR | libc::S_IFLNK
    )
}

/// Open the FIFO, socket or device `file` stands for: the service hands
/// over its `O_PATH` descriptor and the program opens that through
/// `/proc/self/fd` with its own flags, so the kernel checks the access,
/// a FIFO's open waits here for the other end, and the descriptor is the
/// kernel's (not served), as on Linux. The service's open is let go.
fn open_special(file: &File, flags: i32) -> i64 {
    use std::os::fd::AsRawFd;
    let fd = match file.path_descriptor() {
        Ok(fd) => fd,
        Err(e) => return fs_err(e),
    };
    let path = format!("/proc/self/fd/{}\0", fd.as_raw_fd());
    // The name was looked up already: the magic link is not to be
    // refused as a symlink, and nothing is created.
    let flags = flags & !(libc::O_NOFOLLOW | libc::O_CREAT | libc::O_EXCL);
    trap::raw_syscall(
        libc::SYS_openat,
        [libc::AT_FDCWD as u64, path.as_ptr() as u64, flags as u64, 0, 0, 0],
    )
}

/// The descriptor number in `/proc/self/fd/N` or `/dev/fd/N`.
fn fd_link(path: &[u8]) -> Option<i32> {
    let n = path
        .strip_prefix(b"/proc/self/fd/")
        .or_else(|| path.strip_prefix(b"/dev/fd/"))?;
    std::str::from_utf8(n).ok()?.parse().ok()
}

/// An owner change; -1 keeps an id.
fn owner(uid: u64, gid: u64) -> Attr {
    let id = |v: u64| (v as u32 != u32::MAX).then_some(v as u32);
    Attr {
        uid: id(uid),
        gid: id(gid),
        ..Attr::none()
    }
}

/// `struct stat` as x86-64 Linux lays it out.
fn stat_bytes(s: &Stat) -> Vec<u8> {
    // SAFETY-free: a zeroed `libc::stat` is a valid value; fields set below.
    let mut st: libc::stat = unsafe_zeroed_stat();
    st.st_dev = s.dev;
    st.st_ino = s.ino;
    st.st_mode = s.mode;
    st.st_nlink = s.nlink;
    st.st_uid = s.uid;
    st.st_gid = s.gid;
    st.st_rdev = s.rdev;
    st.st_size = s.size as i64;
    st.st_blksize = s.blksize as i64;
    st.st_blocks = s.blocks as i64;
    st.st_atime = s.atime.sec;
    st.st_atime_nsec = s.atime.nsec as i64;
    st.st_mtime = s.mtime.sec;
    st.st_mtime_nsec = s.mtime.nsec as i64;
    st.st_ctime = s.ctime.sec;
    st.st_ctime_nsec = s.ctime.nsec as i64;
    crate::raw::bytes_of(&st).to_vec()
}

/// `struct statfs` from the service's figures.
fn statfs_bytes(f: &lintel_fs::FsStat) -> Vec<u8> {
    let mut s: libc::statfs = crate::raw::zeroed();
    s.f_type = f.kind as _;
    s.f_bsize = f.block_size as _;
    s.f_blocks = f.blocks;
    s.f_bfree = f.blocks_free;
    s.f_bavail = f.blocks_available;
    s.f_files = f.files;
    s.f_ffree = f.files_free;
    s.f_namelen = f.name_max as _;
    s.f_frsize = f.fragment_size as _;
    let mut bytes = crate::raw::bytes_of(&s).to_vec();
    // `f_flags` follows `f_frsize` in the kernel's struct (the libc crate
    // keeps it among its private spare words).
    let at = std::mem::offset_of!(libc::statfs, f_frsize) + 8;
    bytes[at..at + 8].copy_from_slice(&f.flags.to_ne_bytes());
    bytes
}

fn unsafe_zeroed_stat() -> libc::stat {
    crate::raw::zeroed()
}

/// `struct statx` with the basic fields.
fn statx_bytes(s: &Stat) -> Vec<u8> {
    let mut x: libc::statx = crate::raw::zeroed();
    x.stx_mask = libc::STATX_BASIC_STATS;
    x.stx_blksize = s.blksize as u32;
    x.stx_nlink = s.nlink as u32;
    x.stx_uid = s.uid;
    x.stx_gid = s.gid;
    x.stx_mode = s.mode as u16;
    x.stx_ino = s.ino;
    x.stx_size = s.size;
    x.stx_blocks = s.blocks;
    let t = |t: lintel_fs::Timespec| {
        let mut ts: libc::statx_timestamp = crate::raw::zeroed();
        ts.tv_sec = t.sec;
        ts.tv_nsec = t.nsec;
        ts
    };
    x.stx_atime = t(s.atime);
    x.stx_mtime = t(s.mtime);
    x.stx_ctime = t(s.ctime);
    x.stx_rdev_major = libc::major(s.rdev);
    x.stx_rdev_minor = libc::minor(s.rdev);
    x.stx_dev_major = libc::major(s.dev);
    x.stx_dev_minor = libc::minor(s.dev);
    crate::raw::bytes_of(&x).to_vec()
}

/// A directory's entries as `linux_dirent64` records, `.` and `..` first.
fn dirents(entries: &[lintel_fs::DirEntry]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut put = |ino: u64, kind: u8, name: &[u8]| {
        let reclen = (19 + name.len() + 1).next_multiple_of(8);
        let start = out.len();
        out.extend_from_slice(&ino.to_ne_bytes());
        out.extend_from_slice(&((start + reclen) as i64).to_ne_bytes());
        out.extend_from_slice(&(reclen as u16).to_ne_bytes());
        out.push(kind);
        out.extend_from_slice(name);
        out.resize(start + reclen, 0);
    };
    put(1, libc::DT_DIR, b".");
    put(1, libc::DT_DIR, b"..");
    for e in entries {
        let kind = match e.kind {
            Kind::File => libc::DT_REG,
            Kind::Dir => libc::DT_DIR,
            Kind::Symlink => libc::DT_LNK,
            Kind::Other => libc::DT_UNKNOWN,
        };
        put(e.ino, kind, &e.name);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_program_stays_below_the_descriptor_floor() {
        assert_eq!(
            reserved(libc::SYS_dup2, [0, 5000, 0, 0, 0, 0]),
            None,
            "no floor: untouched"
        );
        lintel::set_descriptor_floor(5000);
        let call = |nr, a: [u64; 3]| reserved(nr, [a[0], a[1], a[2], 0, 0, 0]);
        assert_eq!(call(libc::SYS_dup2, [0, 5000, 0]), Some(err(libc::EBADF)));
        assert_eq!(call(libc::SYS_dup3, [0, 7000, 0]), Some(err(libc::EBADF)));
        assert_eq!(call(libc::SYS_dup2, [0, 4999, 0]), None);
        assert_eq!(
            call(libc::SYS_fcntl, [0, libc::F_DUPFD_CLOEXEC as u64, 5000]),
            Some(err(libc::EINVAL))
        );
        assert_eq!(call(libc::SYS_fcntl, [0, libc::F_DUPFD as u64, 10]), None);
        assert_eq!(call(libc::SYS_close, [6000, 0, 0]), Some(err(libc::EBADF)));
        assert_eq!(
            call(libc::SYS_close, [u64::MAX, 0, 0]),
            None,
            "-1: the kernel's EBADF"
        );
        assert_eq!(call(libc::SYS_close_range, [5001, u32::MAX as u64, 0]), Some(0));
        let mut lim = [0u64; 2];
        let to = lim.as_mut_ptr() as u64;
        assert_eq!(
            call(libc::SYS_getrlimit, [libc::RLIMIT_NOFILE as u64, to, 0]),
            Some(0)
        );
        assert!(lim[0] <= 5000 && lim[1] <= 5000 && lim[0] > 0, "{lim:?}");
        assert_eq!(
            call(libc::SYS_getrlimit, [libc::RLIMIT_STACK as u64, to, 0]),
            None
        );
        lintel::set_descriptor_floor(0);
    }

    #[test]
    fn placeholders_are_told_from_other_descriptors() {
        let p = placeholder(true);
        assert!(p >= 0);
        assert!(placeholder_fd(p as i32));
        assert!(!placeholder_fd(0) || !placeholder_fd(2));
        assert!(!placeholder_fd(-1));
        trap::raw_syscall(libc::SYS_close, [p as u64, 0, 0, 0, 0, 0]);
        assert!(!placeholder_fd(p as i32), "closed");
    }
}
