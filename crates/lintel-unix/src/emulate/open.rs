//! `open`, `openat` and `creat` of a served path: the service opens the
//! file and a placeholder descriptor stands for it (`descriptors`).
//!
//! An `O_PATH` open of a served path is served: it stands for the file (a
//! symlink itself with `O_NOFOLLOW`), and answers `fstat` and attribute
//! changes. FIFOs, sockets and devices are never opened by the service:
//! an `open` of one gets the service's `O_PATH` descriptor and opens it
//! through `/proc/self/fd`, so the descriptor it returns is the kernel's
//! own (a FIFO's reader and writer meet in the kernel, and the open waits
//! as on Linux; a socket is `ENXIO`).

use std::os::unix::ffi::OsStrExt;

use lintel_fs::{File, OpenOptions, Stat};

use super::descriptors::Served;
use super::{Emulation, R, err, fs_err};
use crate::trap;

impl Emulation {
    pub(super) fn open(&self, dirfd: i32, path: u64, flags: u64, mode: u64) -> R {
        // Linux refuses `O_CREAT|O_DIRECTORY` before looking the path up
        // (`O_PATH` drops `O_CREAT` first).
        let f = flags as i32;
        let both = libc::O_CREAT | libc::O_DIRECTORY;
        let refused = f & libc::O_PATH == 0 && f & both == both;
        let (rel, link) = match self.target_at(dirfd, path) {
            Ok(Some(_)) | Err(_) if refused => return Some(err(libc::EINVAL)),
            Ok(Some(target)) => target,
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
        // `/proc/self/fd/N` of a served `N` is that file, wherever its
        // name went since.
        let opened = match &link {
            Some(s) => self.fs.reopen_with_stat(&s.file, &o),
            None => self.fs.open_with_stat(std::ffi::OsStr::from_bytes(&rel), &o),
        };
        let (file, st) = match opened {
            Ok(f) => f,
            Err(e) => return Some(fs_err(e)),
        };
        if !o_path && special(&st) {
            return Some(open_special(&file, flags));
        }
        let dir = st.is_dir();
        let rel = if dir { self.physical_of(&file, rel) } else { rel };
        let served = Served::new(file, rel, dir, flags, false);
        Some(self.install(served, flags & libc::O_CLOEXEC != 0))
    }

    /// The path of the served directory `file`, opened as `rel`, with the
    /// symlinks on the way followed ([`Emulation::physical`]), in the
    /// fewest calls: for a path of two names or more, where the service's
    /// kernel says the directory it opened is (one call, where looking
    /// each name up as a symlink takes a call per name, 3–3.5 µs each);
    /// else, and if the service cannot say, `physical`'s answer (none for
    /// the root, one for a single name).
    fn physical_of(&self, file: &File, rel: Vec<u8>) -> Vec<u8> {
        if crate::links::names(&rel).nth(1).is_some()
            && let Ok(p) = file.current_path()
            && !p.ends_with(b" (deleted)")
        {
            return p;
        }
        self.physical(rel)
    }

    /// `creat`: an `open` for writing that creates and truncates.
    pub(super) fn creat(&self, path: u64, mode: u64) -> R {
        self.open(libc::AT_FDCWD, path, CREAT_FLAGS, mode)
    }
}

/// The `open` flags `creat` stands for.
pub(super) const CREAT_FLAGS: u64 = (libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC) as u64;

/// Programs' reads and writes up to this size take the mapped window;
/// larger ones are one call each. A program run under `lintel-run` meets
/// a cold cache (the service starts with it), and one large call beats
/// filling and mapping its windows.
const MAPPED_MAX_CALL: usize = 8 << 10;

/// The client's open options for `open(2)` flags and a mode: the access
/// mode as it is, every other flag passed to the service raw, so that
/// `O_RDONLY|O_CREAT` creates and `O_RDONLY|O_TRUNC` truncates, as on
/// Linux (`OpenOptions`' own `create` and `truncate`, like the standard
/// library's, want writing).
pub(super) fn options_for(flags: i32, mode: u32) -> OpenOptions {
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
