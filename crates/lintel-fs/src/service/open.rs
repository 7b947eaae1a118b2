//! One open file description of the export: the host's descriptor, the
//! offset its door's holders share, its access and status flags, and its
//! door's implementation ([`OpenFile`], the copy path). Opens of one file
//! share its [`Node`]; every call here takes the file's token back first
//! ([`Opened::settle`]), so the host file is current.

use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::time::Duration;

use parking_lot::{Mutex, MutexGuard};
use rustix::fs::{Mode, OFlags};
use rustix::io::Errno;

use crate::proto::lock;
use crate::proto::{Attr, DirEntry, FsError, LockHolder, LockKind, MAX_IO, OpenFile, Stat, Whence};
use crate::service::credentials::{As, Credentials};
use crate::service::host::{list_of, reopen, set_attr, stat_of};
use crate::service::node::TokenState;
use crate::service::nodes::Claim;
use crate::service::readonly;
use crate::service::splice::{self, Pipes};
use crate::service::tally::Tally;
use crate::service::weak_map::WeakMap;

/// Every open file of an export, by its doors' datum. Entries are weak:
/// one whose open is gone is harmless until swept (`WeakMap`).
#[derive(Default)]
pub(crate) struct Opens(Mutex<WeakMap<u64, Opened>>);

impl Opens {
    /// The open file whose doors' datum is `id`, if it is still open.
    pub(crate) fn get(&self, id: u64) -> Option<Arc<Opened>> {
        self.0.lock().get(&id)
    }

    pub(crate) fn insert(&self, open: &Arc<Opened>) {
        self.0.lock().insert(open.id, open);
    }

    /// A door of open file `id` is gone: forget it unless another door
    /// keeps it open.
    pub(crate) fn forget(&self, id: u64) {
        self.0.lock().forget(&id);
    }
}

/// One open file description: the host's, plus the offset its door's
/// holders share.
pub(crate) struct Opened {
    /// The datum of its doors.
    pub(crate) id: u64,
    /// Its file's node. Declared before every descriptor of the file, so
    /// dropped first: a node stays found only while its file cannot have
    /// gone (see `nodes`).
    pub(crate) node: Claim,
    pub(crate) fd: OwnedFd,
    /// Its `O_APPEND` status flag, which `fcntl(F_SETFL)` may change (the
    /// host description's flag follows it).
    pub(super) append: AtomicBool,
    pub(crate) readable: bool,
    pub(crate) writable: bool,
    pub(crate) regular: bool,
    pub(super) timeout: Duration,
    pub(super) tally: Arc<Tally>,
    pub(crate) offset: Mutex<u64>,
    /// The service took the file back (its client was evicted).
    pub(crate) revoked: AtomicBool,
    /// For an `O_APPEND` open, a second description of the file without
    /// it: writing back a window's bytes must land at their offsets, and
    /// Linux appends every `pwrite` on an `O_APPEND` description.
    pub(super) positional: std::sync::OnceLock<OwnedFd>,
    /// Pipes attached by its clients for spliced reads (write ends), by
    /// number.
    pub(super) pipes: Mutex<Pipes>,
    pub(super) export_read_only: bool,
    /// The export's callers' credentials: a change to the file is made
    /// as its caller, its writes landing too (a write by a user without
    /// `CAP_FSETID` clears set-user-ID bits, as Linux does).
    pub(crate) creds: Arc<Credentials>,
    /// The export's root as the kernel names it (for [`OpenFile::current_path`]).
    pub(crate) root_path: Arc<[u8]>,
}

impl Opened {
    /// Whether writes append (`O_APPEND`).
    pub(crate) fn appends(&self) -> bool {
        self.append.load(SeqCst)
    }

    /// A descriptor of this file that writes at the offsets it is given.
    pub(crate) fn positional_fd(&self) -> Result<&OwnedFd, FsError> {
        if !self.appends() {
            return Ok(&self.fd);
        }
        if let Some(fd) = self.positional.get() {
            return Ok(fd);
        }
        let fd = reopen(&self.fd, OFlags::WRONLY)?;
        Ok(self.positional.get_or_init(|| fd))
    }

    /// The token lock of the file, the token back from any holder; or
    /// `Closed` if this open was revoked.
    fn settle(&self) -> Result<MutexGuard<'_, TokenState>, FsError> {
        self.file_call()?;
        Ok(self.node.settle(self.timeout))
    }

    /// The token lock of the file, what a holder wrote on the host and the
    /// token left with it ([`Node::flush`](crate::service::node::Node::flush));
    /// or `Closed` if this open was revoked.
    fn flushed(&self) -> Result<MutexGuard<'_, TokenState>, FsError> {
        self.file_call()?;
        Ok(self.node.flushed(self.timeout, &self.fd))
    }

    /// A call on this open file begins: counted, unless it was revoked.
    fn file_call(&self) -> Result<(), FsError> {
        if self.revoked.load(SeqCst) {
            return Err(FsError::Closed);
        }
        self.tally.file_calls.fetch_add(1, SeqCst);
        Ok(())
    }

    /// Move up to `len` bytes at `at` into attached pipe `pipe` by
    /// reference ([`Pipes::splice`]); how many.
    pub(crate) fn splice_into(&self, pipe: u32, at: u64, len: u32) -> Result<usize, FsError> {
        let done = self.pipes.lock().splice(&self.fd, pipe, at, len)?;
        self.tally.spliced(done);
        Ok(done)
    }

    /// Read ahead into pipe `pipe` for `holder`, the token's holder, who
    /// holds it active ([`Session::read_ahead`]): up to `len` bytes at
    /// `at`. If all `len` came and `next` names another pipe (one the
    /// client emptied), that pipe is filled with the `len` bytes after
    /// them once the reply is out (`lintel::after_reply`), while the
    /// client drains this one; its next call finds them there.
    ///
    /// [`Session::read_ahead`]: crate::proto::Session::read_ahead
    pub(crate) fn read_ahead(
        self: &Arc<Self>,
        pipe: u32,
        at: u64,
        len: u32,
        next: u32,
        holder: u64,
    ) -> Result<usize, FsError> {
        let mut pipes = self.pipes.lock();
        let (got, spliced) = pipes.read_ahead(&self.fd, pipe, at, len)?;
        let full = got == len.min(MAX_IO) as usize && got > 0;
        let scheduled = next != 0 && next != pipe && full && pipes.schedule(next, at + got as u64, len);
        drop(pipes);
        if spliced {
            self.tally.spliced(got);
        }
        if scheduled {
            let me = self.clone();
            lintel::after_reply(move || me.fill_ahead(next, holder));
        }
        Ok(got)
    }

    /// Make pipe `next`'s scheduled fill if the token is still `holder`'s.
    /// Under the token's lock, so no recall lands while the bytes are
    /// spliced; but only if the lock is free at once: a recall that holds
    /// it waits for the holder, who may be waiting for this thread's next
    /// reply. A fill not made leaves the pipe empty, and the client's next
    /// call splices.
    fn fill_ahead(&self, next: u32, holder: u64) {
        let token = self.node.token.try_lock();
        if token.is_none() || self.node.holder_id.load(SeqCst) != holder {
            self.pipes.lock().unschedule(next);
            return;
        }
        if let Some(got) = self.pipes.lock().fill(&self.fd, next) {
            self.tally.spliced(got);
            self.tally.filled_ahead.fetch_add(1, SeqCst);
        }
    }

    fn read_into(&self, at: u64, len: u32, data: &mut Vec<u8>) -> Result<usize, FsError> {
        // Exactly `len` bytes asked of the host (not the vector's whole
        // spare capacity: a shared-offset read would move the offset that
        // far), and not zeroed first.
        let len = len.min(MAX_IO) as usize;
        data.clear();
        loop {
            match lintel_sys::pread_append(self.fd.as_fd(), data, len, at) {
                Err(Errno::INTR) => continue,
                r => return Ok(r?),
            }
        }
    }

    /// Write all of `data` at `at` (or at the end, if appending); the
    /// bytes written, which are fewer only if an error stopped it.
    fn write_all(&self, mut at: u64, data: &[u8]) -> Result<u64, FsError> {
        // Linux checks the open's mode before the length: even an empty
        // write to a file opened read-only is `EBADF`.
        if !self.writable {
            return Err(Errno::BADF.into());
        }
        let data = &data[..data.len().min(MAX_IO as usize)];
        let mut done = 0;
        while done < data.len() {
            let r = if self.appends() {
                rustix::io::write(&self.fd, &data[done..])
            } else {
                rustix::io::pwrite(&self.fd, &data[done..], at)
            };
            match r {
                Ok(0) => break,
                Ok(n) => {
                    done += n;
                    at += n as u64;
                }
                Err(Errno::INTR) => continue,
                Err(e) if done == 0 => return Err(e.into()),
                Err(_) => break,
            }
        }
        Ok(done as u64)
    }
}

impl OpenFile for Opened {
    fn read(&self, len: u32, data: &mut Vec<u8>) -> Result<(), FsError> {
        let _token = self.settle()?;
        let mut offset = self.offset.lock();
        let n = self.read_into(*offset, len, data)?;
        *offset += n as u64;
        Ok(())
    }

    fn write(&self, data: &[u8]) -> Result<u64, FsError> {
        let _as = self.creds.adopt(As::Effective)?;
        let _token = self.settle()?;
        let mut offset = self.offset.lock();
        let at = *offset;
        let n = self.write_all(at, data)?;
        *offset = if self.appends() && n > 0 {
            // Where the append ended (an empty write moves nothing): the
            // end, as no other write of the file runs under the token lock.
            // Not the descriptor's position, which the pager's look for
            // the host file's data (`SEEK_DATA` through this descriptor,
            // without the token lock) may have moved meanwhile.
            rustix::fs::seek(&self.fd, rustix::fs::SeekFrom::End(0))?
        } else {
            at + n
        };
        self.node.write_through(*offset - n, &data[..n as usize]);
        Ok(n)
    }

    fn read_at(&self, at: u64, len: u32, data: &mut Vec<u8>) -> Result<(), FsError> {
        let _token = self.settle()?;
        self.read_into(at, len, data).map(drop)
    }

    fn attach_pipe(&self, pipe: OwnedFd) -> Result<u32, FsError> {
        if self.revoked.load(SeqCst) {
            return Err(FsError::Closed);
        }
        splice::check_write_end(&pipe)?;
        self.pipes.lock().attach(pipe, &self.tally)
    }

    fn read_spliced_at(&self, pipe: u32, at: u64, len: u32) -> Result<u32, FsError> {
        let _token = self.settle()?;
        if !self.readable {
            return Err(Errno::BADF.into());
        }
        self.splice_into(pipe, at, len).map(|n| n as u32)
    }

    fn io_descriptor(&self) -> Result<OwnedFd, FsError> {
        if self.export_read_only {
            return Err(Errno::ROFS.into());
        }
        if !self.regular || !(self.readable || self.writable) {
            return Err(Errno::BADF.into());
        }
        // Under the token lock (no grant slips in) and the cache's (no
        // cache is made meanwhile: see `Node::cache_fd`).
        let _token = self.settle()?;
        if !self.node.host_io() {
            return Err(Errno::BUSY.into());
        }
        self.tally.direct.fetch_add(1, SeqCst);
        Ok(self.fd.try_clone()?)
    }

    fn map_descriptor(&self) -> Result<OwnedFd, FsError> {
        use std::os::fd::AsRawFd;
        if !self.regular {
            return Err(FsError::Invalid("only a regular file can be mapped".into()));
        }
        if self.export_read_only {
            // Nobody changes the file through the service, so its windows
            // stay: the descriptor is the file on a read-only mount of its
            // own, which refuses every change (see `readonly`).
            if !self.readable {
                return Err(Errno::ACCESS.into());
            }
            return readonly::reopen_read_only(&self.fd).map_err(|e| {
                tracing::debug!("no read-only descriptor for a shared mapping: {e}");
                FsError::from(e)
            });
        }
        let access = match (self.readable, self.writable) {
            (true, true) => OFlags::RDWR,
            (true, false) => OFlags::RDONLY,
            _ => return Err(Errno::ACCESS.into()),
        };
        // Under the token lock, with the token back and its bytes written:
        // no grant slips in after this.
        let _token = self.settle()?;
        self.node.host_mapped.store(true, SeqCst);
        let path = format!("/proc/self/fd/{}", self.fd.as_raw_fd());
        Ok(rustix::fs::open(
            path.as_str(),
            access | OFlags::CLOEXEC,
            Mode::empty(),
        )?)
    }

    fn read_spliced(&self, pipe: u32, len: u32) -> Result<u32, FsError> {
        let _token = self.settle()?;
        if !self.readable {
            return Err(Errno::BADF.into());
        }
        let mut offset = self.offset.lock();
        let n = self.splice_into(pipe, *offset, len)?;
        *offset += n as u64;
        Ok(n as u32)
    }

    fn write_at(&self, at: u64, data: &[u8]) -> Result<u64, FsError> {
        let _as = self.creds.adopt(As::Effective)?;
        let _token = self.settle()?;
        if self.appends() {
            // Linux appends whatever the offset says.
            let n = self.write_all(at, data)?;
            let end = rustix::fs::seek(&self.fd, rustix::fs::SeekFrom::End(0))?;
            self.node.write_through(end - n, &data[..n as usize]);
            return Ok(n);
        }
        let n = self.write_all(at, data)?;
        self.node.write_through(at, &data[..n as usize]);
        Ok(n)
    }

    fn seek(&self, whence: Whence, delta: i64) -> Result<u64, FsError> {
        let _token = self.settle()?;
        let mut offset = self.offset.lock();
        if !self.regular {
            // A directory's offsets are its file system's to define (ext4
            // puts its end at the largest offset): the kernel seeks, from
            // the shared offset. Set only where the host's differs: a
            // directory removed since refuses offsets past a regular
            // file's limit, its end among them, while `SEEK_CUR` by 0
            // still answers where it is.
            use rustix::fs::SeekFrom;
            if rustix::fs::seek(&self.fd, SeekFrom::Current(0))? != *offset {
                rustix::fs::seek(&self.fd, SeekFrom::Start(*offset))?;
            }
            let to = rustix::fs::seek(
                &self.fd,
                match whence {
                    Whence::Start if delta < 0 => return Err(Errno::INVAL.into()),
                    Whence::Start => SeekFrom::Start(delta as u64),
                    Whence::Current => SeekFrom::Current(delta),
                    Whence::End => SeekFrom::End(delta),
                    Whence::Data => SeekFrom::Data(delta as u64),
                    Whence::Hole => SeekFrom::Hole(delta as u64),
                },
            )?;
            *offset = to;
            return Ok(to);
        }
        let base = match whence {
            Whence::Start => 0,
            Whence::Current => *offset,
            Whence::End => stat_of(&self.fd)?.size,
            Whence::Data | Whence::Hole => {
                // The host file is current (the token is back): its file
                // system knows where its data and holes are. A negative
                // offset is past any end, as the kernel reads it.
                use rustix::fs::SeekFrom;
                let from = match whence {
                    Whence::Data => SeekFrom::Data(delta as u64),
                    _ => SeekFrom::Hole(delta as u64),
                };
                let to = rustix::fs::seek(&self.fd, from)?;
                *offset = to;
                return Ok(to);
            }
        };
        let to = base
            .checked_add_signed(delta)
            .filter(|&to| to <= i64::MAX as u64)
            .ok_or_else(|| FsError::Invalid(format!("seek to {base} + {delta}")))?;
        *offset = to;
        Ok(to)
    }

    fn stat(&self) -> Result<Stat, FsError> {
        let _token = self.settle()?;
        stat_of(&self.fd)
    }

    fn truncate(&self, len: u64) -> Result<(), FsError> {
        // `truncate(2)` of a FIFO, socket or device (an open that stands
        // for one, see `path_descriptor`): Linux's answer.
        if !self.regular {
            return Err(Errno::INVAL.into());
        }
        let _as = self.creds.adopt(As::Effective)?;
        let _token = self.settle()?;
        rustix::fs::ftruncate(&self.fd, len)?;
        self.node.truncate_cache(len);
        Ok(())
    }

    fn allocate(&self, mode: u32, offset: u64, len: u64) -> Result<(), FsError> {
        let _as = self.creds.adopt(As::Effective)?;
        use rustix::fs::FallocateFlags as F;
        let _token = self.settle()?;
        let before = stat_of(&self.fd)?.size;
        // The host checks the arguments, the mode and the open's access
        // in Linux's order, and answers with Linux's errno.
        rustix::fs::fallocate(&self.fd, F::from_bits_retain(mode), offset, len)?;
        let after = stat_of(&self.fd)?.size;
        let mode = F::from_bits_retain(mode);
        if mode.intersects(F::COLLAPSE_RANGE | F::INSERT_RANGE) {
            // The bytes moved: no cached page is where it was.
            self.node.truncate_cache(0);
        } else if mode.intersects(F::PUNCH_HOLE | F::ZERO_RANGE) {
            // The range reads as zeros on the host now; so it must in
            // every window.
            self.node
                .zero_cache(offset, offset.saturating_add(len).min(after.max(before)));
        }
        if after > before {
            // Bytes past the old end read as zeros.
            self.node.zero_cache(before, after);
        }
        Ok(())
    }

    fn append(&self, set: Option<bool>) -> Result<bool, FsError> {
        // The token comes back first: a holder appending through its
        // window does so under the flag it was granted with.
        let _token = self.settle()?;
        if let Some(on) = set
            && on != self.appends()
        {
            let flags = rustix::fs::fcntl_getfl(&self.fd)?;
            rustix::fs::fcntl_setfl(
                &self.fd,
                flags.difference(OFlags::APPEND) | if on { OFlags::APPEND } else { OFlags::empty() },
            )?;
            self.append.store(on, SeqCst);
        }
        Ok(self.appends())
    }

    fn sync(&self, data_only: bool) -> Result<(), FsError> {
        let _as = self.creds.adopt(As::Effective)?;
        // What a holder wrote goes to the host, and it keeps its token:
        // a sync does not cost its next read or write a call.
        let _token = self.flushed()?;
        if data_only {
            rustix::fs::fdatasync(&self.fd)?;
        } else {
            rustix::fs::fsync(&self.fd)?;
        }
        Ok(())
    }

    fn close(&self) -> Result<(), FsError> {
        let _as = self.creds.adopt(As::Effective)?;
        // Whatever a mapped client wrote comes back with its token; the
        // copy path wrote through already.
        let _token = self.settle()?;
        Ok(())
    }

    fn list(&self) -> Result<Vec<DirEntry>, FsError> {
        if self.revoked.load(SeqCst) {
            return Err(FsError::Closed);
        }
        list_of(&self.fd)
    }

    fn entries(&self, len: u32, records: &mut Vec<u8>) -> Result<(), FsError> {
        if self.revoked.load(SeqCst) {
            return Err(FsError::Closed);
        }
        if self.regular {
            return Err(Errno::NOTDIR.into());
        }
        // The host directory's own position and cookies: the kernel reads
        // from the shared offset, and says where the next read starts.
        let mut offset = self.offset.lock();
        use rustix::fs::SeekFrom;
        rustix::fs::seek(&self.fd, SeekFrom::Start(*offset))?;
        records.resize(len.min(MAX_IO) as usize, 0);
        let n = lintel_sys::getdents(self.fd.as_fd(), records)?;
        records.truncate(n);
        *offset = rustix::fs::seek(&self.fd, SeekFrom::Current(0))?;
        Ok(())
    }

    fn set_attr(&self, attr: Attr) -> Result<(), FsError> {
        let _as = self.creds.adopt(As::Effective)?;
        let _token = self.settle()?;
        set_attr(&self.fd, attr)
    }

    fn lock(&self, kind: LockKind, start: u64, len: u64, wait: bool) -> Result<(), FsError> {
        // Waiting is polling, not a blocked `F_OFD_SETLKW`: a server thread
        // must stay free to notice that its caller died or gave up (an
        // alert), and a lock another client holds for ever must not hold
        // the pool's threads for ever.
        let mut pause = Duration::from_micros(100);
        loop {
            match lock::set(self.fd.as_fd(), kind, start, len) {
                Err(e) if wait && e.errno() == libc::EAGAIN => {
                    if lintel::shuttle::sleep_alertable(pause).is_err() {
                        return Err(FsError::Os { errno: libc::EINTR });
                    }
                    pause = (pause * 2).min(Duration::from_millis(20));
                }
                r => return r,
            }
        }
    }

    fn credentials_changed(&self) -> Result<(), FsError> {
        self.creds.forget();
        Ok(())
    }

    fn test_lock(&self, kind: LockKind, start: u64, len: u64) -> Result<Option<LockHolder>, FsError> {
        lock::test(self.fd.as_fd(), kind, start, len)
    }

    fn current_path(&self) -> Result<Vec<u8>, FsError> {
        let link = crate::service::host::link_of(&self.fd)
            .map_err(|e| FsError::from(Errno::from_io_error(&e).unwrap_or(Errno::IO)))?;
        crate::service::path::beneath(&self.root_path, &link).ok_or_else(|| Errno::XDEV.into())
    }

    fn path_descriptor(&self) -> Result<OwnedFd, FsError> {
        use rustix::fs::FileType;
        let special = !matches!(
            FileType::from_raw_mode(rustix::fs::fstat(&self.fd)?.st_mode),
            FileType::RegularFile | FileType::Directory | FileType::Symlink
        );
        let path_only = rustix::fs::fcntl_getfl(&self.fd)?.contains(OFlags::PATH);
        if !special || !path_only {
            return Err(FsError::Invalid("not a FIFO, socket or device".into()));
        }
        Ok(rustix::io::fcntl_dupfd_cloexec(&self.fd, 0)?)
    }

    fn flock(&self, kind: LockKind, wait: bool) -> Result<(), FsError> {
        // The host's own `flock` on this open's description: what Linux
        // does for the caller (no access-mode check, no conflict with
        // byte-range locks). Waiting polls, as in `lock`.
        let mut pause = Duration::from_micros(100);
        loop {
            match lock::whole_file(self.fd.as_fd(), kind) {
                Err(e) if wait && e.errno() == libc::EAGAIN => {
                    if lintel::shuttle::sleep_alertable(pause).is_err() {
                        return Err(FsError::Os { errno: libc::EINTR });
                    }
                    pause = (pause * 2).min(Duration::from_millis(20));
                }
                r => return r,
            }
        }
    }
}
