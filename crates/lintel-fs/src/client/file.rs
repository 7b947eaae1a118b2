//! An open file of an export ([`File`]), how to open one
//! ([`OpenOptions`]) and which path its reads and writes take
//! ([`IoPath`]): each call takes the mapped path, a spliced read or one
//! call on the file's door (see the folder's doc), with the `std::io`
//! traits a Rust program expects.

use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicU32, AtomicU64};

use lintel::Door;
use parking_lot::Mutex;
use rustix::fs::OFlags;

use crate::client::credentials::tell;
use crate::client::direct::{self, Direct};
use crate::client::mapped::{Mapped, SessionSource, View};
use crate::client::spliced::{Pipes, SPLICE_MIN};
use crate::proto::lock;
use crate::proto::{
    Attr, DirEntry, FsError, LockHolder, LockKind, MAX_IO, OpenFile, OpenFileClient, Stat, Whence,
};

/// Reads and writes up to this many bytes take the mapped path (when the
/// file is mapped); larger ones move in one call on the copy path.
pub const MAPPED_MAX: usize = 1 << 20;

/// Reads and writes of a handle that go through calls before its window
/// is attached (with [`IoPath::Auto`]), unless [`ATTACH_AFTER_BYTES`]
/// came first. Attaching costs some 100–200 µs here (a call that hands
/// over the cache and, for a file opened for writing, the host file; the
/// mapping; its registration with the pager; the token; the first
/// window) and letting go again at the close about 30: more than a file
/// read or written a few times in all pays through calls, at 2–10 µs
/// each (a database's journal, some ten writes and a sync per commit,
/// then removed; a header a compiler reads). A handle used more attaches
/// at its next read or write; [`File::is_mapped`] attaches at once.
pub const ATTACH_AFTER: u32 = 16;

/// Bytes read or written through calls after which a handle attaches its
/// window at its next read or write (see [`ATTACH_AFTER`]): a large file
/// read or written in large pieces attaches at its second.
pub const ATTACH_AFTER_BYTES: u64 = 64 << 10;

/// A handle that has learned its file is a regular file this large (a
/// `stat` through it, as a program makes before it reads a file whole:
/// `cat`, `wc`, C stdio's first read) takes its window at its next read
/// or write, not after [`ATTACH_AFTER_BYTES`] through calls: the first
/// long read through a call sets up the connection's bulk segment (some
/// 100–150 µs here), and the calls before the window cost 5–15 µs each.
pub const ATTACH_LARGE: u64 = 1 << 20;

/// Reads at the shared offset of this many bytes or more, on a mapped
/// handle, drain its read-ahead pipes (`Mapped::read_streamed`); shorter
/// ones read the host file where the window hands out a descriptor of it.
/// Measured here through `dd` into a pipe, 256 MiB (alternating runs, ms):
/// 16 KiB reads 120 from the host file against 170 through the pipes
/// (native 105), 32 KiB 92 against 140 (native 90), 64 KiB 155 against 110
/// (native 160), 128 KiB 180 against 118 (native 158): a short read pays
/// the pipe's fixed costs (its `read`, a call per pipeful) and a long one
/// gains from the page lookups made on the service's CPU, ahead.
pub const STREAM_MIN: usize = 64 << 10;

/// Which path a file's reads and writes take.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum IoPath {
    /// Mapped for calls up to [`MAPPED_MAX`] bytes when the file can be
    /// mapped, once the handle has been used enough ([`ATTACH_AFTER`]);
    /// copy otherwise.
    #[default]
    Auto,
    /// Always one call on the file's door.
    Copy,
    /// Mapped whenever the file can be mapped, at any size.
    Mapped,
}

/// How to open a file: the choices of [`std::fs::OpenOptions`], and Linux
/// flags for the rest.
#[derive(Debug, Clone)]
pub struct OpenOptions {
    read: bool,
    write: bool,
    append: bool,
    truncate: bool,
    create: bool,
    create_new: bool,
    custom: u32,
    pub(super) mode: u32,
    pub(super) path: IoPath,
    pub(super) mapped_max: usize,
    pub(super) splice_min: usize,
    pub(super) stream_min: usize,
}

impl Default for OpenOptions {
    fn default() -> Self {
        Self::new()
    }
}

impl OpenOptions {
    /// Nothing chosen yet; files are created with mode `0o666` (before the
    /// service's umask).
    pub fn new() -> OpenOptions {
        OpenOptions {
            read: false,
            write: false,
            append: false,
            truncate: false,
            create: false,
            create_new: false,
            custom: 0,
            mode: 0o666,
            path: IoPath::Auto,
            mapped_max: MAPPED_MAX,
            splice_min: SPLICE_MIN,
            stream_min: STREAM_MIN,
        }
    }
    /// With [`IoPath::Auto`], calls above `bytes` take the copy path
    /// (default [`MAPPED_MAX`]). A file read once, front to back, in large
    /// calls is faster copied: mapping fills the service's cache first.
    pub fn mapped_max(&mut self, bytes: usize) -> &mut Self {
        self.mapped_max = bytes;
        self
    }
    /// Copy-path reads of `bytes` or more are spliced through a pipe
    /// ([`crate::spliced`]; default [`SPLICE_MIN`]); `usize::MAX`: none
    /// (every byte through the call, no pipe descriptor kept).
    pub fn splice_min(&mut self, bytes: usize) -> &mut Self {
        self.splice_min = bytes;
        self
    }
    /// Reads at the shared offset of `bytes` or more, on a mapped handle,
    /// drain its read-ahead pipes; shorter ones read the host file (default
    /// [`STREAM_MIN`]).
    pub fn stream_min(&mut self, bytes: usize) -> &mut Self {
        self.stream_min = bytes;
        self
    }
    /// Which path reads and writes take (default [`IoPath::Auto`]).
    pub fn io_path(&mut self, path: IoPath) -> &mut Self {
        self.path = path;
        self
    }
    /// Open for reading.
    pub fn read(&mut self, yes: bool) -> &mut Self {
        self.read = yes;
        self
    }
    /// Open for writing.
    pub fn write(&mut self, yes: bool) -> &mut Self {
        self.write = yes;
        self
    }
    /// Every write goes to the end (`O_APPEND`); implies writing.
    pub fn append(&mut self, yes: bool) -> &mut Self {
        self.append = yes;
        self
    }
    /// Cut the file to length 0 as it opens (`O_TRUNC`); needs writing.
    pub fn truncate(&mut self, yes: bool) -> &mut Self {
        self.truncate = yes;
        self
    }
    /// Create the file if it does not exist (`O_CREAT`); needs writing.
    pub fn create(&mut self, yes: bool) -> &mut Self {
        self.create = yes;
        self
    }
    /// Create, and fail with `EEXIST` if the file exists (`O_EXCL`).
    pub fn create_new(&mut self, yes: bool) -> &mut Self {
        self.create_new = yes;
        self
    }
    /// Permission bits for a created file.
    pub fn mode(&mut self, mode: u32) -> &mut Self {
        self.mode = mode;
        self
    }
    /// More Linux `open(2)` flags (`O_DIRECTORY`, `O_NOFOLLOW`, `O_SYNC`, …).
    pub fn custom_flags(&mut self, flags: u32) -> &mut Self {
        self.custom = flags;
        self
    }

    /// The `open(2)` flags these options stand for.
    pub fn flags(&self) -> Result<u32, FsError> {
        let writes = self.write || self.append;
        let mut f = match (self.read, writes) {
            (true, false) => OFlags::RDONLY,
            (false, true) => OFlags::WRONLY,
            (true, true) => OFlags::RDWR,
            (false, false) => return Err(FsError::Invalid("neither read nor write".into())),
        };
        let creates = self.create || self.create_new;
        if (self.truncate || creates) && !writes {
            return Err(FsError::Invalid("create or truncate without write".into()));
        }
        f.set(OFlags::APPEND, self.append);
        f.set(OFlags::TRUNC, self.truncate);
        f.set(OFlags::CREATE, creates);
        f.set(OFlags::EXCL, self.create_new);
        Ok(f.bits() | self.custom)
    }
}

/// An open file of an export. Its door may be handed to other domains
/// ([`File::door`], [`File::from_door`]): all holders share one offset.
pub struct File {
    pub(super) file: OpenFileClient,
    /// Where replies land before they are copied to the caller's buffer.
    scratch: Mutex<Vec<u8>>,
    /// The pipes of spliced reads, shared with this handle's clones.
    pub(super) pipe: Arc<Mutex<Pipes>>,
    /// The mapped window, shared with this handle's clones.
    pub(super) window: Arc<Window>,
    pub(super) path: IoPath,
    pub(super) mapped_max: usize,
    pub(super) splice_min: usize,
    pub(super) stream_min: usize,
    /// The [`credentials`](crate::client::credentials) generation the service was last told of
    /// through this handle.
    told: AtomicU64,
}

impl File {
    pub(super) fn from_client(file: OpenFileClient) -> File {
        File {
            file,
            told: AtomicU64::new(0),
            scratch: Mutex::new(Vec::new()),
            pipe: Arc::default(),
            window: Arc::new(Window::none()),
            path: IoPath::Auto,
            mapped_max: MAPPED_MAX,
            splice_min: SPLICE_MIN,
            stream_min: STREAM_MIN,
        }
    }

    /// A read-only view of the file's pages, paged in by the service as
    /// they are touched (no token, no window): `Err` if the file is not
    /// mapped.
    pub fn view(&self) -> Result<View, FsError> {
        let m = self
            .mapped()
            .cloned()
            .ok_or_else(|| FsError::Invalid("the file is not mapped".into()))?;
        Ok(View::new(m))
    }

    /// Where the file's cache starts in this process's memory, 0 if the
    /// file is not mapped: `prefetch(hint + at)` warms the line a
    /// positional read at `at` will copy, before the lookups that lead
    /// to it (a stale hint costs nothing: see [`crate::prefetch`]).
    ///
    /// ```no_run
    /// # fn f(file: &lintel_fs::File) {
    /// let hint = file.cache_hint();
    /// if hint != 0 {
    ///     lintel_fs::prefetch(hint + 4096);
    /// }
    /// # }
    /// ```
    pub fn cache_hint(&self) -> u64 {
        self.window.attached().map_or(0, |m| m.cache_addr())
    }

    /// Whether this handle reads and writes through a mapped window (its
    /// window attached now if it was not yet).
    pub fn is_mapped(&self) -> bool {
        self.mapped().is_some()
    }

    /// The mapped window, attached at its first use.
    fn mapped(&self) -> Option<&Arc<Mapped>> {
        self.window.get(&self.file)
    }

    /// The mapping, if this read or write of `len` bytes should take it:
    /// attached now if this is the handle's [`ATTACH_AFTER`]th.
    fn mapped_for(&self, len: usize) -> Option<&Mapped> {
        if self.path != IoPath::Mapped && (self.window.direct.get().is_some() || !self.window.due()) {
            return None;
        }
        let m = self.mapped()?;
        (len <= self.mapped_max || self.path == IoPath::Mapped).then_some(m)
    }

    /// The handle's own descriptor of the host file, if it has one; `Err`
    /// once the service is known to be gone, as its calls then fail (a
    /// service started again knows nothing of the descriptor).
    fn own_fd(&self) -> Result<Option<&std::os::fd::OwnedFd>, FsError> {
        let Some(fd) = self.window.direct.get() else {
            return Ok(None);
        };
        if self.file.door().is_dead() {
            return Err(FsError::Stub(lintel::stub::StubError::Call(
                lintel::CallError::PeerDied,
            )));
        }
        Ok(Some(fd))
    }

    /// [`File::own_fd`], asked for now if this is the handle's first write
    /// at an offset, with [`IoPath::Auto`], and its window is not attached
    /// (a refusal is not asked again).
    fn own_fd_to_write(&self) -> Result<Option<&std::os::fd::OwnedFd>, FsError> {
        if self.path == IoPath::Auto && self.window.attached().is_none() {
            self.window.direct.get_or_ask(&self.file);
        }
        self.own_fd()
    }

    /// The open file behind `door` (one passed from another domain); it
    /// takes the copy path.
    pub fn from_door(door: Door) -> File {
        File::from_client(OpenFileClient::from_door(door))
    }

    /// The open file, for a call that changes it: the service told first
    /// of a change of credentials it has not heard of through this handle.
    fn changing(&self) -> &OpenFileClient {
        tell(&self.told, || self.file.credentials_changed());
        &self.file
    }

    /// This open file's door: whoever holds it shares the offset.
    pub fn door(&self) -> &Door {
        self.file.door()
    }

    /// A second handle on the same open file (as `dup(2)` makes).
    pub fn try_clone(&self) -> File {
        let mut f = File::from_client(self.file.clone());
        f.window = self.window.clone();
        f.pipe = self.pipe.clone();
        f.path = self.path;
        f.mapped_max = self.mapped_max;
        f.splice_min = self.splice_min;
        f.stream_min = self.stream_min;
        f
    }

    /// Read at the shared offset into `buf`; 0 at the end of the file.
    pub fn read_shared(&self, buf: &mut [u8]) -> Result<usize, FsError> {
        if let Some(m) = self.mapped_for(buf.len())
            && let Some(n) = m.read(None, buf)?
        {
            return Ok(n);
        }
        // A long read drains the read-ahead pipes (attached at their first
        // use: not for the first reads of a handle that has not taken its
        // window yet) if it is at least `stream_min`, else reads the host
        // file itself where the window hands out a descriptor of it
        // ([`STREAM_MIN`] says why).
        if buf.len() >= self.splice_min && !self.window.pending() {
            let attached = self.window.attached();
            let short = buf.len() < self.stream_min;
            let host = |buf: &mut [u8]| match attached {
                Some(m) => m.read_host(None, buf),
                None => Ok(None),
            };
            if short && let Some(n) = host(buf)? {
                return Ok(n);
            }
            let mut pipe = self.pipe.lock();
            if let Some(m) = attached
                && let Some(n) = m.read_streamed(&mut pipe, &self.file, buf)?
            {
                return Ok(n);
            }
            if !short && let Some(n) = host(buf)? {
                return Ok(n);
            }
            if let Some(n) = pipe.now.read(&self.file, None, buf)? {
                return Ok(n);
            }
        }
        let mut scratch = self.scratch.lock();
        self.file.read(io_len(buf.len()), &mut scratch)?;
        Ok(self.window.moved(copy_out(&scratch, buf)))
    }

    /// Write at the shared offset (at the end, if opened to append).
    pub fn write_shared(&self, buf: &[u8]) -> Result<usize, FsError> {
        if let Some(m) = self.mapped_for(buf.len())
            && let Some(n) = m.write(None, buf)?
        {
            return Ok(n);
        }
        let n = self.file.write(&buf[..io_len(buf.len()) as usize])?;
        Ok(self.window.moved(n as usize))
    }

    /// A descriptor of the host file to map shared (`mmap(MAP_SHARED)`,
    /// e.g. with `rustix::mm::mmap`): see
    /// [`OpenFile::map_descriptor`].
    /// From then on this file's clients, this one included, read and write
    /// through calls, which share the host's page cache with the mapping.
    pub fn map_descriptor(&self) -> Result<std::os::fd::OwnedFd, FsError> {
        self.file.map_descriptor()
    }

    /// Move the shared offset; returns it.
    pub fn seek_shared(&self, pos: std::io::SeekFrom) -> Result<u64, FsError> {
        let (whence, delta) = match pos {
            std::io::SeekFrom::Start(at) => {
                let at = i64::try_from(at).map_err(|_| FsError::Invalid(format!("seek to {at}")))?;
                (Whence::Start, at)
            }
            std::io::SeekFrom::Current(d) => (Whence::Current, d),
            std::io::SeekFrom::End(d) => (Whence::End, d),
        };
        self.seek_whence(whence, delta)
    }

    /// Move the shared offset as `lseek(2)` does with any `whence`,
    /// `SEEK_DATA` and `SEEK_HOLE` included; returns it.
    ///
    /// ```no_run
    /// # fn f(file: &lintel_fs::File) -> Result<(), lintel_fs::FsError> {
    /// use lintel_fs::proto::Whence;
    /// // Where the data at or after byte 0 ends: the first hole.
    /// let hole = file.seek_whence(Whence::Hole, 0)?;
    /// # let _ = hole; Ok(()) }
    /// ```
    pub fn seek_whence(&self, whence: Whence, delta: i64) -> Result<u64, FsError> {
        if let Some(m) = self.window.attached()
            && let Some(to) = m.seek(whence, delta)?
        {
            return Ok(to);
        }
        self.file.seek(whence, delta)
    }

    /// Read at `at`, leaving the offset alone.
    pub fn read_at(&self, buf: &mut [u8], at: u64) -> Result<usize, FsError> {
        if let Some(fd) = self.own_fd()? {
            return direct::read_at(fd, buf, at);
        }
        if let Some(m) = self.mapped_for(buf.len())
            && let Some(n) = m.read(Some(at), buf)?
        {
            return Ok(n);
        }
        if buf.len() >= self.splice_min && !self.window.pending() {
            if let Some(m) = self.window.attached()
                && let Some(n) = m.read_host(Some(at), buf)?
            {
                return Ok(n);
            }
            if let Some(n) = self.pipe.lock().now.read(&self.file, Some(at), buf)? {
                return Ok(n);
            }
        }
        let mut scratch = self.scratch.lock();
        self.file.read_at(at, io_len(buf.len()), &mut scratch)?;
        Ok(self.window.moved(copy_out(&scratch, buf)))
    }

    /// Write at `at`, leaving the offset alone. A handle's first such
    /// write before it takes a window asks for its own descriptor of the
    /// host file (see the `direct` module), and this write and the next
    /// ones at offsets, and its syncs, go through it when it is given.
    pub fn write_at(&self, buf: &[u8], at: u64) -> Result<usize, FsError> {
        if let Some(fd) = self.own_fd_to_write()? {
            return direct::write_at(fd, buf, at);
        }
        if let Some(m) = self.mapped_for(buf.len())
            && let Some(n) = m.write(Some(at), buf)?
        {
            return Ok(n);
        }
        let n = self.file.write_at(at, &buf[..io_len(buf.len()) as usize])?;
        Ok(self.window.moved(n as usize))
    }

    /// The file's metadata; without a call from the shared page while
    /// this process holds the file's token, or from the handle's own
    /// descriptor of the host file (see the `direct` module).
    pub fn metadata(&self) -> Result<Stat, FsError> {
        if let Some(fd) = self.own_fd()? {
            return Ok(Stat::from_host(&rustix::fs::fstat(fd)?));
        }
        if let Some(m) = self.window.attached()
            && let Some(st) = m.stat()?
        {
            return Ok(st);
        }
        let st = self.file.stat()?;
        self.window.sized(&st);
        Ok(st)
    }

    /// Take, change or drop (`Unlock`) an advisory lock on `[start, start
    /// + len)` (`len` 0: to any end), held by this open file and every
    /// holder of its door; with `wait`, until it can be had (see
    /// [`crate::proto::OpenFile::lock`]).
    ///
    /// A mapped handle holding the open's own open file description takes
    /// the lock through it without a call, and calls only to wait for one
    /// another open file holds.
    pub fn lock(&self, kind: LockKind, start: u64, len: u64, wait: bool) -> Result<(), FsError> {
        if let Some(owner) = self.lock_owner()? {
            match lock::set(owner, kind, start, len) {
                Err(e) if wait && e.errno() == libc::EAGAIN => {}
                r => return r,
            }
        }
        self.file.lock(kind, start, len, wait)
    }

    /// The first lock of another open file that would conflict with `kind`
    /// on the range.
    pub fn test_lock(&self, kind: LockKind, start: u64, len: u64) -> Result<Option<LockHolder>, FsError> {
        if let Some(owner) = self.lock_owner()? {
            return lock::test(owner, kind, start, len);
        }
        self.file.test_lock(kind, start, len)
    }

    /// Take, change or drop a `flock(2)` lock on the whole file, held by
    /// this open file (see [`crate::proto::OpenFile::flock`]); without a
    /// call as [`File::lock`].
    pub fn flock(&self, kind: LockKind, wait: bool) -> Result<(), FsError> {
        if let Some(owner) = self.lock_owner()? {
            match lock::whole_file(owner, kind) {
                Err(e) if wait && e.errno() == libc::EAGAIN => {}
                r => return r,
            }
        }
        self.file.flock(kind, wait)
    }

    /// The open's own open file description, if the handle has its own
    /// descriptor of the host file (the `direct` module), or its window is
    /// attached and holds one ([`Mapped::lock_owner`]).
    fn lock_owner(&self) -> Result<Option<std::os::fd::BorrowedFd<'_>>, FsError> {
        if let Some(fd) = self.own_fd()? {
            return Ok(Some(std::os::fd::AsFd::as_fd(fd)));
        }
        match self.window.attached() {
            Some(m) => m.lock_owner(),
            None => Ok(None),
        }
    }

    /// The host's `O_PATH` descriptor of the FIFO, socket or device this
    /// open stands for (see [`crate::proto::OpenFile::path_descriptor`]).
    pub fn path_descriptor(&self) -> Result<std::os::fd::OwnedFd, FsError> {
        self.file.path_descriptor()
    }

    /// Where the file is now, relative to the export's root, as the
    /// kernel names it (see [`crate::proto::OpenFile::current_path`]).
    pub fn current_path(&self) -> Result<Vec<u8>, FsError> {
        self.file.current_path()
    }

    /// Truncate or extend the file to `len` bytes.
    pub fn set_len(&self, len: u64) -> Result<(), FsError> {
        self.changing().truncate(len)
    }

    /// `fallocate(2)` on `[offset, offset + len)` with `mode` (Linux's
    /// `FALLOC_FL_*` bits): see
    /// [`OpenFile::allocate`].
    ///
    /// ```no_run
    /// # fn f(file: &lintel_fs::File) -> Result<(), lintel_fs::FsError> {
    /// // Reserve the first megabyte (the file grows to it if shorter), ...
    /// file.allocate(0, 0, 1 << 20)?;
    /// // ... then free its second half again, keeping the size.
    /// let punch = (libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE) as u32;
    /// file.allocate(punch, 1 << 19, 1 << 19)?;
    /// # Ok(()) }
    /// ```
    pub fn allocate(&self, mode: u32, offset: u64, len: u64) -> Result<(), FsError> {
        self.changing().allocate(mode, offset, len)
    }

    /// Whether writes append (`O_APPEND`), as the service says: another
    /// holder of the door may have changed it.
    pub fn appends(&self) -> Result<bool, FsError> {
        self.file.append(None)
    }

    /// Make writes append, or stop them appending, for every holder of
    /// the door (`fcntl(F_SETFL)` with or without `O_APPEND`): the
    /// service takes every token back and grants the next with the new
    /// flag, so a window appends as the copy path does.
    ///
    /// ```no_run
    /// # fn f(file: &lintel_fs::File) -> Result<(), lintel_fs::FsError> {
    /// file.set_len(3)?;
    /// file.set_append(true)?;
    /// file.write_shared(b"XY")?; // at 3, whatever the offset said
    /// assert!(file.appends()?);
    /// # Ok(()) }
    /// ```
    pub fn set_append(&self, on: bool) -> Result<(), FsError> {
        self.file.append(Some(on)).map(drop)
    }

    /// Data and metadata on the host's storage (`fsync`).
    pub fn sync_all(&self) -> Result<(), FsError> {
        self.sync(false)
    }

    /// Data on the host's storage (`fdatasync`).
    pub fn sync_data(&self) -> Result<(), FsError> {
        self.sync(true)
    }

    /// A sync: made here, with no call, through the handle's own
    /// descriptor of the host file (the `direct` module) or while it holds
    /// the file's token (`Mapped::sync`); else by the service.
    fn sync(&self, data_only: bool) -> Result<(), FsError> {
        if let Some(fd) = self.own_fd()? {
            return direct::sync(fd, data_only);
        }
        if let Some(m) = self.window.attached()
            && m.sync(data_only)?
        {
            return Ok(());
        }
        self.file.sync(data_only)
    }

    /// The entries of an open directory.
    pub fn read_dir(&self) -> Result<Vec<DirEntry>, FsError> {
        self.file.list()
    }

    /// `getdents64(2)`: the next whole `linux_dirent64` records of an open
    /// directory, at most `len` bytes, with the host file system's `d_off`
    /// cookies ([`seek`](Self::seek_whence) to one goes back there). The
    /// position is the open directory's, shared with every holder of it
    /// (a forked child's too). Empty at the end.
    pub fn read_dirents(&self, len: usize) -> Result<Vec<u8>, FsError> {
        let mut records = Vec::new();
        self.file.entries(io_len(len), &mut records)?;
        Ok(records)
    }

    /// Change the file's mode, owner or times (after the token is back:
    /// bytes written through a window land first).
    pub fn set_attr(&self, attr: Attr) -> Result<(), FsError> {
        self.changing().set_attr(attr)
    }

    /// Close this handle, reporting what dropping it would not: a write
    /// the service could not complete for it.
    pub fn close(self) -> Result<(), FsError> {
        let File { file, window, .. } = self;
        // The token goes back first (with what we wrote through the window).
        drop(window);
        file.close()
    }
}

/// An open file's mapped window, attached at the first read, write or
/// view that would take it rather than at the open: an open that only
/// looks (`fstat`, then `close`) makes no window, token or cache mapping
/// (a served `open` and `close` took 75 µs with its window, 23 without).
/// Until then `seek` and `metadata` ask the service, which is where the
/// offset and size are while no window holds the token.
pub(super) struct Window {
    /// Where the session to attach through comes from; `None`: the file
    /// takes the copy path.
    session: Option<SessionSource>,
    attached: std::sync::OnceLock<Option<Arc<Mapped>>>,
    /// Reads and writes asked of the handle and its clones so far, up to
    /// [`ATTACH_AFTER`].
    asked: AtomicU32,
    /// Bytes they moved through calls.
    moved: AtomicU64,
    /// The handle's own descriptor of the host file, if it asked for one.
    direct: Direct,
}

impl Window {
    /// No window: the copy path.
    pub(super) fn none() -> Window {
        Window::of(None)
    }

    /// A window to attach, when first needed, through the session
    /// `session` gives then.
    pub(super) fn through(session: SessionSource) -> Window {
        Window::of(Some(session))
    }

    fn of(session: Option<SessionSource>) -> Window {
        Window {
            session,
            attached: std::sync::OnceLock::new(),
            asked: AtomicU32::new(0),
            moved: AtomicU64::new(0),
            direct: Direct::default(),
        }
    }

    /// Whether the handle will attach its window but has not yet tried.
    fn pending(&self) -> bool {
        self.session.is_some() && self.attached.get().is_none()
    }

    /// Whether a read or write should take the window: once it was
    /// attached (or found unmappable), or from the [`ATTACH_AFTER`]th read
    /// or write on, or after [`ATTACH_AFTER_BYTES`], which attaches it.
    /// Counts this one.
    fn due(&self) -> bool {
        self.session.is_some()
            && (self.attached.get().is_some()
                || self.moved.load(Relaxed) >= ATTACH_AFTER_BYTES
                || self.asked.load(Relaxed) >= ATTACH_AFTER - 1
                || self.asked.fetch_add(1, Relaxed) >= ATTACH_AFTER - 1)
    }

    /// The file is `st`, as a call said before the window was attached: a
    /// regular file of [`ATTACH_LARGE`] bytes or more takes its window at
    /// its next read or write.
    fn sized(&self, st: &Stat) {
        if self.pending() && st.mode & libc::S_IFMT == libc::S_IFREG && st.size >= ATTACH_LARGE {
            self.moved.fetch_max(ATTACH_AFTER_BYTES, Relaxed);
        }
    }

    /// A read or write before the window moved `n` bytes through a call.
    fn moved(&self, n: usize) -> usize {
        if self.pending() {
            self.moved.fetch_add(n as u64, Relaxed);
        }
        n
    }

    /// The window, attached now if it was not; `None` if the file cannot
    /// be mapped (a directory, say) or there is no session.
    fn get(&self, file: &OpenFileClient) -> Option<&Arc<Mapped>> {
        let source = self.session.as_ref()?;
        self.attached
            .get_or_init(|| Mapped::attach(&source.get()?, file).ok().map(Arc::new))
            .as_ref()
    }

    /// The window if it is attached already.
    fn attached(&self) -> Option<&Arc<Mapped>> {
        self.attached.get().and_then(Option::as_ref)
    }
}

impl std::fmt::Debug for File {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("File").field("door", self.door()).finish()
    }
}

fn io_len(len: usize) -> u32 {
    len.min(MAX_IO as usize) as u32
}

fn copy_out(from: &[u8], to: &mut [u8]) -> usize {
    let n = from.len().min(to.len());
    lintel::copy_bytes(&mut to[..n], &from[..n]);
    n
}

impl File {
    /// Read at the shared offset into each buffer in turn, as `readv(2)`:
    /// the next buffer only once the last is full.
    pub fn read_vectored_shared(&self, bufs: &mut [std::io::IoSliceMut<'_>]) -> Result<usize, FsError> {
        if bufs.iter().all(|b| b.is_empty()) {
            // Nothing to read, but the open's mode is checked as Linux
            // does (`EBADF`); `readv` stops there, before a directory's
            // `EISDIR`, which `read` gives.
            return match self.read_shared(&mut []) {
                Err(e) if e.errno() == rustix::io::Errno::ISDIR.raw_os_error() => Ok(0),
                r => r,
            };
        }
        let lens: Vec<usize> = bufs.iter().map(|b| b.len()).collect();
        self.check_vectored(&lens)?;
        in_turn(&lens, |i| self.read_shared(&mut bufs[i]))
    }

    /// Write each buffer in turn at the shared offset, as `writev(2)`.
    pub fn write_vectored_shared(&self, bufs: &[std::io::IoSlice<'_>]) -> Result<usize, FsError> {
        if bufs.iter().all(|b| b.is_empty()) {
            return self.write_shared(&[]);
        }
        let lens: Vec<usize> = bufs.iter().map(|b| b.len()).collect();
        self.check_vectored(&lens)?;
        in_turn(&lens, |i| self.write_shared(&bufs[i]))
    }

    /// Linux checks a vectored call's offset against its buffers' whole
    /// length before it moves anything; each read or write here checks
    /// only its own buffer, so a call of more than one is checked first.
    fn check_vectored(&self, lens: &[usize]) -> Result<(), FsError> {
        if lens.iter().filter(|&&l| l > 0).count() < 2 {
            return Ok(());
        }
        self.check_length(None, lens.iter().sum::<usize>().min(MAX_RW_COUNT))
    }

    /// Linux's first check of a read or write of `len` bytes at `at` (the
    /// shared offset, asked of the service, if `None`): `EINVAL` where they
    /// would pass the largest offset ([`past_largest_offset`]), which a
    /// directory's end on ext4, or a file on tmpfs, may be near.
    pub fn check_length(&self, at: Option<u64>, len: usize) -> Result<(), FsError> {
        let at = match at {
            Some(at) => at,
            None => self.seek_shared(std::io::SeekFrom::Current(0))?,
        };
        match past_largest_offset(at, len) {
            true => Err(rustix::io::Errno::INVAL.into()),
            false => Ok(()),
        }
    }
}

/// Most bytes one `read`, `readv` or `write` moves on Linux (`MAX_RW_COUNT`):
/// a longer one is cut to this, after its offset was checked.
pub const MAX_RW_COUNT: usize = (i32::MAX as usize) & !4095;

/// Whether `len` bytes from offset `at` would go past the largest offset,
/// which Linux refuses (`EINVAL`) before it reads or writes anything. For
/// `readv` and `writev`, `len` is all the buffers' length, cut to
/// [`MAX_RW_COUNT`]; for `read` and `write`, the length asked.
pub fn past_largest_offset(at: u64, len: usize) -> bool {
    at.checked_add(len as u64).is_none_or(|end| end > i64::MAX as u64)
}

/// Run `op` on each non-empty buffer (of lengths `lens`) in turn, as
/// `readv` and `writev` do: on to the next only when the last was done
/// whole; an error after some bytes ends the call with those bytes.
fn in_turn(lens: &[usize], mut op: impl FnMut(usize) -> Result<usize, FsError>) -> Result<usize, FsError> {
    let mut total = 0;
    for (i, &len) in lens.iter().enumerate().filter(|(_, len)| **len > 0) {
        let n = match op(i) {
            Ok(n) => n,
            Err(_) if total > 0 => return Ok(total),
            Err(e) => return Err(e),
        };
        total += n;
        if n < len {
            break;
        }
    }
    Ok(total)
}

// The owned file reads, writes and seeks as a shared reference to it does
// (the offset is the open file's, shared by every holder), as std's
// `File` does.
impl std::io::Read for File {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        (&*self).read(buf)
    }

    fn read_vectored(&mut self, bufs: &mut [std::io::IoSliceMut<'_>]) -> std::io::Result<usize> {
        (&*self).read_vectored(bufs)
    }
}

impl std::io::Write for File {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        (&*self).write(buf)
    }

    fn write_vectored(&mut self, bufs: &[std::io::IoSlice<'_>]) -> std::io::Result<usize> {
        (&*self).write_vectored(bufs)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl std::io::Seek for File {
    fn seek(&mut self, pos: std::io::SeekFrom) -> std::io::Result<u64> {
        (&*self).seek(pos)
    }
}

impl std::io::Read for &File {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        Ok(self.read_shared(buf)?)
    }

    fn read_vectored(&mut self, bufs: &mut [std::io::IoSliceMut<'_>]) -> std::io::Result<usize> {
        Ok(self.read_vectored_shared(bufs)?)
    }
}

impl std::io::Write for &File {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        Ok(self.write_shared(buf)?)
    }

    fn write_vectored(&mut self, bufs: &[std::io::IoSlice<'_>]) -> std::io::Result<usize> {
        Ok(self.write_vectored_shared(bufs)?)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl std::io::Seek for &File {
    fn seek(&mut self, pos: std::io::SeekFrom) -> std::io::Result<u64> {
        Ok(self.seek_shared(pos)?)
    }
}

impl std::os::unix::fs::FileExt for File {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<usize> {
        Ok(File::read_at(self, buf, offset)?)
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> std::io::Result<usize> {
        Ok(File::write_at(self, buf, offset)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_become_the_flags_linux_expects() {
        let o = |f: &dyn Fn(&mut OpenOptions) -> &mut OpenOptions| f(&mut OpenOptions::new()).flags();
        assert_eq!(o(&|o| o.read(true)), Ok(0));
        assert_eq!(o(&|o| o.write(true)), Ok(0o1));
        assert_eq!(o(&|o| o.read(true).write(true)), Ok(0o2));
        assert_eq!(
            o(&|o| o.write(true).create(true).truncate(true)),
            Ok(0o1 | 0o100 | 0o1000)
        );
        assert_eq!(o(&|o| o.append(true)), Ok(0o1 | 0o2000));
        assert_eq!(o(&|o| o.write(true).create_new(true)), Ok(0o1 | 0o100 | 0o200));
        assert!(matches!(o(&|o| o), Err(FsError::Invalid(_))));
        assert!(matches!(
            o(&|o| o.read(true).truncate(true)),
            Err(FsError::Invalid(_))
        ));
    }
}
