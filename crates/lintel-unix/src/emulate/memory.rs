//! `mmap` of a served file, and the calls that change mappings (after
//! which the preload library's fast path checks its buffers again).

use super::descriptors::Served;
use super::{Emulation, R, err, fs_err};
use crate::trap;
use crate::user;

impl Emulation {
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
    pub(super) fn mmap(&self, a: [u64; 6]) -> R {
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
        user::mappings_changed();
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
            user::mappings_changed();
        }
        map
    }
}

/// `munmap`, `mremap`, `mprotect`, `madvise`, `brk`: the kernel's, but buffers
/// the fast path checked may be gone, so it checks again.
pub(super) fn mappings_changed() -> R {
    user::mappings_changed();
    None
}
