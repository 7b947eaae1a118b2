//! The dispatch table: which family answers each system call the
//! emulation serves (`None` from it: not served, the kernel's to make).
//! `a` is the call's arguments as trapped; `cwd` stands for `AT_FDCWD` in
//! the calls that take no directory descriptor.

use super::io::{Dir, vectored_at};
use super::memory::mappings_changed;
use super::{Emulation, R, err};

impl Emulation {
    /// Answer call `nr` if it names something served.
    pub(super) fn dispatch(&self, nr: i64, a: [u64; 6]) -> R {
        let cwd = libc::AT_FDCWD;
        let nofollow = libc::AT_SYMLINK_NOFOLLOW;
        // Reading, writing or changing a file through its `O_PATH`
        // descriptor: `EBADF` before anything else.
        if self.path_only_refuses(nr, a) {
            return Some(err(libc::EBADF));
        }
        match nr {
            // descriptors, open
            libc::SYS_open => self.open(cwd, a[0], a[1], a[2]),
            libc::SYS_openat => self.open(a[0] as i32, a[1], a[2], a[3]),
            libc::SYS_creat => self.creat(a[0], a[1]),
            libc::SYS_close => self.close(a[0]),
            libc::SYS_dup => self.dup_to(a[0], None, 0),
            libc::SYS_dup2 => self.dup_to(a[0], Some(a[1]), 0),
            libc::SYS_dup3 => self.dup3(a[0], a[1], a[2]),
            libc::SYS_fcntl => self.fcntl(a[0], a[1], a[2]),
            // io
            libc::SYS_read => self.read(a[0], a[1], a[2], None),
            libc::SYS_pread64 => self.read(a[0], a[1], a[2], Some(a[3])),
            libc::SYS_write => self.write(a[0], a[1], a[2], None),
            libc::SYS_pwrite64 => self.write(a[0], a[1], a[2], Some(a[3])),
            libc::SYS_readv => self.vectored(a[0], a[1], a[2], None, Dir::Read),
            libc::SYS_writev => self.vectored(a[0], a[1], a[2], None, Dir::Write),
            libc::SYS_preadv | libc::SYS_preadv2 => {
                self.vectored(a[0], a[1], a[2], vectored_at(nr, a), Dir::Read)
            }
            libc::SYS_pwritev | libc::SYS_pwritev2 => {
                self.vectored(a[0], a[1], a[2], vectored_at(nr, a), Dir::Write)
            }
            libc::SYS_lseek => self.lseek(a[0], a[1], a[2]),
            libc::SYS_truncate => self.truncate(a[0], a[1]),
            libc::SYS_ftruncate => self.ftruncate(a[0], a[1]),
            libc::SYS_fsync => self.fsync(a[0], false),
            libc::SYS_fdatasync => self.fsync(a[0], true),
            libc::SYS_fallocate => self.fallocate(a[0], a[1], a[2], a[3]),
            libc::SYS_fadvise64 => self.fadvise(a[0]),
            libc::SYS_ioctl => self.ioctl(a[0], a[1], a[2]),
            libc::SYS_copy_file_range => self.kernel_copy(a[0], a[2], libc::EXDEV),
            libc::SYS_sendfile => self.kernel_copy(a[0], a[1], libc::EINVAL),
            libc::SYS_splice => self.kernel_copy(a[0], a[2], libc::EINVAL),
            // listing, locks, memory
            libc::SYS_getdents64 => self.getdents(a[0], a[1], a[2]),
            libc::SYS_flock => self.flock(a[0], a[1]),
            libc::SYS_mmap => self.mmap(a),
            libc::SYS_munmap | libc::SYS_mremap | libc::SYS_mprotect | libc::SYS_madvise | libc::SYS_brk => {
                mappings_changed()
            }
            // metadata
            libc::SYS_fstat => self.fstat(a[0], a[1]),
            libc::SYS_stat => self.stat_at(cwd as u64, a[0], a[1], 0, None),
            libc::SYS_lstat => self.stat_at(cwd as u64, a[0], a[1], nofollow as u64, None),
            libc::SYS_newfstatat => self.stat_at(a[0], a[1], a[2], a[3], None),
            libc::SYS_statx => self.stat_at(a[0], a[1], a[4], a[2], Some(a[3])),
            libc::SYS_statfs => self.statfs_path(a[0], a[1]),
            libc::SYS_fstatfs => self.fstatfs(a[0], a[1]),
            libc::SYS_access => self.access(cwd, a[0], a[1], 0),
            libc::SYS_faccessat => self.access(a[0] as i32, a[1], a[2], 0),
            libc::SYS_faccessat2 => self.access(a[0] as i32, a[1], a[2], a[3]),
            libc::SYS_chmod => self.chmod(cwd, a[0], a[1]),
            libc::SYS_fchmod => self.chmod(a[0] as i32, 0, a[1]),
            libc::SYS_fchmodat => self.chmod(a[0] as i32, a[1], a[2]),
            libc::SYS_chown => self.chown(cwd, a[0], 0, a[1], a[2]),
            libc::SYS_lchown => self.chown(cwd, a[0], nofollow, a[1], a[2]),
            libc::SYS_fchown => self.chown(a[0] as i32, 0, 0, a[1], a[2]),
            libc::SYS_fchownat => self.chown(a[0] as i32, a[1], a[4] as i32, a[2], a[3]),
            libc::SYS_utimensat => self.utimensat(a[0] as i32, a[1], a[2], a[3] as i32),
            libc::SYS_getxattr | libc::SYS_lgetxattr => self.getxattr(a[0]),
            libc::SYS_listxattr | libc::SYS_llistxattr => self.listxattr(a[0]),
            libc::SYS_setxattr | libc::SYS_removexattr => self.setxattr(a[0], true),
            libc::SYS_lsetxattr | libc::SYS_lremovexattr => self.setxattr(a[0], false),
            libc::SYS_fgetxattr => self.fgetxattr(a[0]),
            libc::SYS_flistxattr => self.flistxattr(a[0]),
            libc::SYS_fsetxattr | libc::SYS_fremovexattr => self.fsetxattr(a[0]),
            // namespace
            libc::SYS_mkdir => self.mkdir(cwd, a[0], a[1]),
            libc::SYS_mkdirat => self.mkdir(a[0] as i32, a[1], a[2]),
            libc::SYS_mknod => self.mknod(cwd, a[0], a[1], a[2]),
            libc::SYS_mknodat => self.mknod(a[0] as i32, a[1], a[2], a[3]),
            libc::SYS_unlink => self.unlink(cwd, a[0]),
            libc::SYS_unlinkat => self.unlinkat(a[0] as i32, a[1], a[2]),
            libc::SYS_rmdir => self.rmdir(cwd, a[0]),
            libc::SYS_rename => self.rename(cwd, a[0], cwd, a[1], 0),
            libc::SYS_renameat => self.rename(a[0] as i32, a[1], a[2] as i32, a[3], 0),
            libc::SYS_renameat2 => self.rename(a[0] as i32, a[1], a[2] as i32, a[3], a[4]),
            libc::SYS_link => self.link(cwd, a[0], cwd, a[1], 0),
            libc::SYS_linkat => self.link(a[0] as i32, a[1], a[2] as i32, a[3], a[4]),
            libc::SYS_symlink => self.symlink(a[0], cwd, a[1]),
            libc::SYS_symlinkat => self.symlink(a[0], a[1] as i32, a[2]),
            libc::SYS_readlink => self.readlink(cwd, a[0], a[1], a[2]),
            libc::SYS_readlinkat => self.readlink(a[0] as i32, a[1], a[2], a[3]),
            // sockets
            libc::SYS_bind => self.bind(a[0], a[1], a[2]),
            libc::SYS_connect => self.connect(a[0], a[1], a[2]),
            // cwd
            libc::SYS_chdir => self.chdir(a[0]),
            libc::SYS_fchdir => self.fchdir(a[0]),
            libc::SYS_getcwd => self.getcwd(a[0], a[1]),
            // children
            libc::SYS_wait4 | libc::SYS_waitid => self.reap(nr, a),
            _ => None,
        }
    }
}
