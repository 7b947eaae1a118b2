//! The system calls the emulation answers: those that name a path under
//! the prefix or a descriptor it serves, answered through `lintel_fs` with
//! the result and errno Linux would give. Everything else goes to the
//! kernel unchanged (`None`).
//!
//! A trapped call meets, in turn ([`Emulation`]'s `Emulator::emulate`,
//! below): `floor` (the runtime's descriptors, out of the program's
//! reach), `credentials` (a change the service must hear of), `forked` (a
//! forked child with no runtime of its own), `table` (which family
//! answers it), then `follow` (a symlink that leaves the export, followed
//! as the program sees it). The families, one module each:
//!
//! - `descriptors`: the served descriptors (`Served`), the placeholders
//!   that hold their numbers, `close`, `dup`, `fcntl`;
//! - `open`: `open`, `openat`, `creat`, and FIFOs, sockets and devices,
//!   which the kernel opens;
//! - `io`: `read`, `write` and their vectored and positional kinds,
//!   `lseek`, `truncate`, `fsync`, `fallocate`, `ioctl`, the in-kernel
//!   copies;
//! - `listing`: `getdents64`;
//! - `locks`: `fcntl`'s record locks and `flock`;
//! - `memory`: `mmap` and what changes mappings;
//! - `metadata`: `stat` and kin, `statfs`, `access`, `chmod`, `chown`,
//!   `utimensat`, extended attributes;
//! - `namespace`: names in directories: `mkdir`, `mknod`, `unlink`,
//!   `rmdir`, `rename`, `link`, `symlink`, `readlink`;
//! - `sockets`: `bind` and `connect` of Unix-domain sockets;
//! - `cwd`: the working directory (`chdir`, `fchdir`, `getcwd`);
//! - `resolve`: which served path a call names, and where its path is;
//! - `follow`: a symlink that leaves the export;
//! - `inherit`: what crosses a fork and an `exec` (the placeholders'
//!   records, the working directory);
//! - `forked`: a forked child that cannot reach the service;
//! - `exec`: `execve` of a served program;
//! - `reaped`: children reaped (`wait4`, `waitid`), whose calls to the
//!   service end before the program's next call that names a path;
//! - `credentials`, `floor`: calls the emulation watches, not serves.
//!
//! Served descriptors are real numbers: each holds an empty memfd of its
//! own, so the kernel never hands the number out twice, `close`-on-exec
//! and `F_GETFD`/`F_SETFD` work on it as they would on the file, and a
//! call that slips past the emulation touches nothing that matters.

mod credentials;
mod cwd;
mod descriptors;
mod exec;
mod floor;
mod follow;
mod forked;
mod inherit;
mod io;
mod listing;
mod locks;
mod memory;
mod metadata;
mod namespace;
mod open;
mod reaped;
mod resolve;
mod sockets;
mod table;

pub use descriptors::Served;
pub use forked::set_reviver;

use lintel_fs::{Fs, FsError};

use crate::fdtable::FdTable;
use crate::paths::Prefix;
use crate::trap::{self, Emulator};

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

/// A call's answer: `Some(result)` (a value, or `-errno`), or `None` for
/// the kernel to make it.
type R = Option<i64>;

fn err(e: i32) -> i64 {
    -(e as i64)
}

fn fs_err(e: FsError) -> i64 {
    err(e.errno())
}

impl Emulation {
    /// The emulation of a program whose paths under `prefix` are served by `fs`.
    pub fn new(fs: Fs, prefix: Prefix) -> Emulation {
        Emulation {
            fs,
            prefix,
            fds: FdTable::default(),
            cwd: parking_lot::RwLock::new(None),
            cwd_record: std::sync::atomic::AtomicI32::new(-1),
        }
    }

    /// The served prefix.
    pub fn prefix(&self) -> &Prefix {
        &self.prefix
    }

    /// Answer system call `nr` as the trap path would (for the preload
    /// library's wrappers).
    pub fn emulate_call(&self, nr: i64, args: [u64; 6]) -> R {
        self.emulate(nr, args)
    }
}

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
        if let Some(r) = floor::reserved(nr, a) {
            return Some(r);
        }
        if let Some(r) = credentials::change(nr, a) {
            return Some(r);
        }
        if trap::forked_child() {
            return self.forked_child_call(nr, a);
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
