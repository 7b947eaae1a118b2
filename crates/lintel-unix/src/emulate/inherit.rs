//! What crosses a fork and an `exec`: before either, each served file's
//! placeholder gets a record naming its open file by a key from the
//! service, and a served working directory a placeholder of its own; the
//! new image adopts them. A forked child, which cannot reach the service,
//! records its opens for the image it `exec`s to make.
//!
//! Close-on-exec needs nothing here: it is the placeholder's own flag,
//! which the kernel honours. The program's environment carries the
//! prefix and the service's address (the launcher's `LINTEL_UNIX_*`
//! variables) to the new image; starting a served program is `exec`'s.

use std::os::unix::ffi::OsStrExt;

use super::descriptors::{Served, placeholder_fd, private_placeholder, shares_template, template_fd};
use super::open::options_for;
use super::{Emulation, R};
use crate::paths;
use crate::trap;
use crate::user;

impl Emulation {
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
            // A placeholder that is still a `dup` of the template needs a
            // record of its own, whatever its open file's other numbers have.
            let shared = shares_template(fd);
            if !shared && s.recorded.load(std::sync::atomic::Ordering::Acquire) {
                continue;
            }
            let Ok(key) = self.fs.share(&s.file) else { continue };
            let mut rec = RECORD_MAGIC.to_vec();
            rec.extend_from_slice(&key);
            rec.extend_from_slice(&s.all_flags().to_le_bytes());
            rec.push(s.dir as u8);
            rec.extend_from_slice(&(s.path.len() as u32).to_le_bytes());
            rec.extend_from_slice(&s.path);
            if record(fd, shared, &rec) {
                s.recorded.store(true, std::sync::atomic::Ordering::Release);
            }
        }
    }

    /// Before an `exec`: a placeholder that carries a served working
    /// directory to the new image (no call needed: a forked child does it
    /// too). Closed again by [`Self::exec_failed`].
    pub(super) fn record_cwd(&self) {
        let Some(cwd) = self.served_cwd() else { return };
        let fd = private_placeholder(false);
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
    pub(super) fn defer_open(&self, path: u64, flags: u64, mode: u64) -> R {
        let p = user::cstr(path).ok()?;
        let rel = if p.first() == Some(&b'/') {
            self.prefix.strip(&p)?
        } else {
            // Relative: served only from a served working directory.
            paths::join(&self.served_cwd()?, &p)?
        };
        let flags = flags as i32;
        let fd = private_placeholder(flags & libc::O_CLOEXEC != 0);
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
        // The runtime's own descriptors are at the floor and above; the
        // program's, placeholders among them, below it.
        let floor = match lintel::descriptor_floor() {
            f if f > 0 => f,
            _ => i32::MAX,
        };
        for entry in dir.flatten() {
            let Some(fd) = entry.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else {
                continue;
            };
            // (Below no floor, a forked child's copy of its parent's
            // template is skipped by its number.)
            if fd >= floor || template_fd() == Some(fd) {
                continue;
            }
            if !placeholder_fd(fd) {
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
}

/// Write record `rec` into placeholder `fd`; one that `shared` the
/// template gets a memfd of its own holding the record at its number
/// first (close-on-exec as it was). Whether the record is in place.
fn record(fd: i32, shared: bool, rec: &[u8]) -> bool {
    let write = |to: i64| {
        trap::raw_syscall(
            libc::SYS_pwrite64,
            [to as u64, rec.as_ptr() as u64, rec.len() as u64, 0, 0, 0],
        ) == rec.len() as i64
    };
    if !shared {
        return write(fd as i64);
    }
    let flags = trap::raw_syscall(libc::SYS_fcntl, [fd as u64, libc::F_GETFD as u64, 0, 0, 0, 0]);
    if flags < 0 {
        return false;
    }
    let cloexec = flags & libc::FD_CLOEXEC as i64 != 0;
    let own = private_placeholder(cloexec);
    if own < 0 {
        return false;
    }
    let dup3_flags = if cloexec { libc::O_CLOEXEC as u64 } else { 0 };
    let done =
        write(own) && trap::raw_syscall(libc::SYS_dup3, [own as u64, fd as u64, dup3_flags, 0, 0, 0]) >= 0;
    trap::raw_syscall(libc::SYS_close, [own as u64, 0, 0, 0, 0, 0]);
    done
}

/// What a placeholder memfd holds once its open file is shared: magic,
/// key, open flags, whether a directory, the path's length, the path.
const RECORD_MAGIC: &[u8; 8] = b"LNTLSRV1";

/// What a forked child's placeholder holds for a served file it opened
/// (it cannot reach the service): magic, open flags, mode, the path's
/// length, the path. The image it `exec`s opens it.
const DEFERRED_MAGIC: &[u8; 8] = b"LNTLDEF1";

/// What carries a served working directory across `exec`: magic, path.
const CWD_MAGIC: &[u8; 8] = b"LNTLCWD1";
