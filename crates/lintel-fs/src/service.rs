//! The file service: one host directory, exported through doors.
//!
//! Every path a client sends is resolved by the kernel beneath the export's
//! root (`openat2` with `RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS`), so `..`,
//! absolute paths and symlinks that leave the root fail with
//! [`FsError::Escapes`], and so do races that rename a directory out from
//! under a lookup: the kernel checks the whole walk, not a string. Calls
//! that act on a name in a directory (`mkdir`, `unlink`, `rename`, …)
//! resolve the parent beneath the root and then act on one name in it.
//!
//! Each open is a host file description of the service's and a door of its
//! own ([`OpenFileServer`]), whose datum names it; the door's holders share
//! its offset. The service keeps the offset itself and reads and writes
//! with `pread` and `pwrite` under the open's lock, so concurrent `read`s
//! through one door each get their own bytes, as they would on one Unix
//! file description. Opens of one file share a [`Node`]: its token and
//! its page cache for mapped windows ([`crate::session`]); every call here
//! first takes the token back from any client that holds it, so the host
//! file is current for the copy path.

use std::collections::HashMap;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use lintel::Door;
use parking_lot::Mutex;
use rustix::fs::{AtFlags, Mode, OFlags, ResolveFlags};
use rustix::io::Errno;

use crate::FsError;
use crate::credentials::{As, Credentials};
use crate::node::Node;
use crate::path;
use crate::proto::{
    Attr, DirEntry, Export, ExportServer, Kind, LockHolder, LockKind, MAX_IO, OpenFile, OpenFileClient,
    OpenFileServer, SessionClient, SetTime, Stat, Timespec, Whence,
};

/// The open flags a client may pass; the service adds `O_CLOEXEC`.
const CLIENT_FLAGS: OFlags = OFlags::ACCMODE
    .union(OFlags::CREATE)
    .union(OFlags::EXCL)
    .union(OFlags::TRUNC)
    .union(OFlags::APPEND)
    .union(OFlags::DIRECTORY)
    .union(OFlags::NOFOLLOW)
    .union(OFlags::SYNC)
    .union(OFlags::DSYNC)
    .union(OFlags::NOATIME)
    .union(OFlags::CLOEXEC)
    .union(OFlags::NONBLOCK)
    .union(OFlags::NOCTTY)
    .union(OFlags::LARGEFILE)
    .union(OFlags::PATH);

/// How often a lookup that raced a rename (`EAGAIN` from `openat2`) is
/// tried again before the error is returned.
const RACE_RETRIES: usize = 16;

/// How long the service waits for a client to let go of its share lock or
/// give back an active token before it evicts the client.
pub const LOCK_TIMEOUT: Duration = Duration::from_secs(2);

/// An exported directory.
pub struct Service {
    inner: Arc<Inner>,
}

/// The export's state, shared by its doors.
pub(crate) struct Inner {
    root: OwnedFd,
    read_only: bool,
    pub(crate) timeout: Duration,
    /// Every open file, by its door's datum.
    opens: Mutex<HashMap<u64, Weak<Opened>>>,
    /// Every file with an open, by (device, inode).
    nodes: Mutex<HashMap<(u64, u64), Weak<Node>>>,
    next_open: AtomicU64,
    pub(crate) counters: Arc<Tally>,
    /// Sessions alive (each has a pager thread and a shared page).
    pub(crate) sessions: Arc<std::sync::atomic::AtomicUsize>,
    pub(crate) max_sessions: usize,
    /// Open files shared by key ([`Export::share`]), oldest first.
    shared: Mutex<std::collections::VecDeque<([u8; 16], Arc<Opened>)>>,
    /// Its callers' credentials, which each call is made with.
    pub(crate) creds: Arc<Credentials>,
}

/// Most open files kept shared by key at once (the oldest go first).
const MAX_SHARED: usize = 4096;

/// Most sessions (client processes with mapped windows) a service keeps
/// at once by default; more get an error, and their clients take the copy
/// path.
pub const MAX_SESSIONS: usize = 1024;

/// The service's counters ([`crate::proto::Counters`]), bumped where the
/// work happens.
#[derive(Default)]
pub(crate) struct Tally {
    pub faults: AtomicU64,
    pub windows: AtomicU64,
    pub grants: AtomicU64,
    pub recalls: AtomicU64,
    pub evictions: AtomicU64,
    pub file_calls: AtomicU64,
    pub spliced_bytes: AtomicU64,
    pub splices: AtomicU64,
    /// Pipes attached now (a gauge).
    pub pipes: AtomicU64,
}

impl Service {
    /// Export the directory at `root`, read-only if `read_only`.
    pub fn new(root: impl AsRef<Path>, read_only: bool) -> std::io::Result<Service> {
        let root = rustix::fs::open(
            root.as_ref(),
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        Ok(Service {
            inner: Arc::new(Inner {
                root,
                read_only,
                timeout: LOCK_TIMEOUT,
                opens: Mutex::new(HashMap::new()),
                nodes: Mutex::new(HashMap::new()),
                next_open: AtomicU64::new(1),
                counters: Arc::default(),
                sessions: Arc::default(),
                max_sessions: MAX_SESSIONS,
                shared: Mutex::new(std::collections::VecDeque::new()),
                creds: Arc::new(Credentials::new()?),
            }),
        })
    }

    /// Evict a client that holds its share lock, or keeps its token active
    /// after being asked for it, longer than `timeout` (default
    /// [`LOCK_TIMEOUT`]).
    pub fn with_lock_timeout(mut self, timeout: Duration) -> Service {
        if let Some(inner) = Arc::get_mut(&mut self.inner) {
            inner.timeout = timeout;
        }
        self
    }

    /// Keep at most `n` sessions at once (default [`MAX_SESSIONS`]).
    pub fn with_max_sessions(mut self, n: usize) -> Service {
        if let Some(inner) = Arc::get_mut(&mut self.inner) {
            inner.max_sessions = n;
        }
        self
    }

    /// The door to this export; hand it to clients ([`crate::Fs::from_door`]).
    pub fn into_door(self) -> Door {
        ExportServer::door(ExportImpl(self.inner))
    }

    /// A door of the export that leaves the service here, for
    /// [`Service::write_out`].
    pub fn door(&self) -> Door {
        ExportServer::door(ExportImpl(self.inner.clone()))
    }

    /// Take every token back and write out what its holder wrote through
    /// its windows, so that the host files hold every finished write. A
    /// process that serves its own programs does this before it exits:
    /// window writes of a program that has just ended are written back
    /// when the service notices the end, and a service that exits first
    /// would take them along.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// let service = lintel_fs::Service::new(dir.path(), false).unwrap();
    /// let fs = lintel_fs::Fs::from_door(service.door());
    /// // ... programs write through `fs`, then end ...
    /// service.write_out();
    /// ```
    pub fn write_out(&self) {
        let nodes: Vec<Arc<Node>> = self
            .inner
            .nodes
            .lock()
            .values()
            .filter_map(Weak::upgrade)
            .collect();
        for n in nodes {
            drop(n.settle(Instant::now() + self.inner.timeout));
        }
    }
}

/// The export's door implementation.
struct ExportImpl(Arc<Inner>);

impl std::ops::Deref for ExportImpl {
    type Target = Inner;
    fn deref(&self) -> &Inner {
        &self.0
    }
}

impl ExportImpl {
    /// A door to `open` (its datum names it): the first, or another one
    /// for a process that adopts it by key.
    fn door_of(&self, open: Arc<Opened>) -> Door {
        let id = open.id;
        let service = Arc::downgrade(&self.0);
        Door::create_with_unref(id, OpenFileServer::from_arc(open), move |id| {
            if let Some(s) = service.upgrade() {
                // Another door may name it still; the map holds only weak
                // references, so a stale entry is harmless.
                s.opens.lock().retain(|k, o| *k != id || o.strong_count() > 0);
            }
        })
    }
}

impl Inner {
    pub(crate) fn open_by_id(&self, id: u64) -> Option<Arc<Opened>> {
        self.opens.lock().get(&id)?.upgrade()
    }

    fn node(&self, key: (u64, u64)) -> Arc<Node> {
        let mut nodes = self.nodes.lock();
        if let Some(n) = nodes.get(&key).and_then(Weak::upgrade) {
            return n;
        }
        nodes.retain(|_, n| n.strong_count() > 0);
        let n = Arc::new(Node::new());
        nodes.insert(key, Arc::downgrade(&n));
        n
    }

    /// The file `key`'s node if it is open, its token taken back (so the
    /// host's metadata is current).
    fn settle_key(&self, key: (u64, u64)) {
        let node = self.nodes.lock().get(&key).and_then(Weak::upgrade);
        if let Some(n) = node {
            drop(n.settle(Instant::now() + self.timeout));
        }
    }

    /// Resolve `path` beneath the root and open it.
    fn resolve(&self, path: &[u8], flags: OFlags, mode: Mode) -> Result<OwnedFd, FsError> {
        let path = path::check(path)?;
        let resolve = ResolveFlags::BENEATH | ResolveFlags::NO_MAGICLINKS;
        let mut tries = 0;
        loop {
            match rustix::fs::openat2(&self.root, path, flags | OFlags::CLOEXEC, mode, resolve) {
                Ok(fd) => return Ok(fd),
                Err(Errno::XDEV) => return Err(path::escapes(path)),
                Err(Errno::AGAIN) if tries < RACE_RETRIES => tries += 1,
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// The parent directory of `path`, resolved beneath the root, and the
    /// last name in it.
    fn parent<'p>(&self, path: &'p [u8]) -> Result<(OwnedFd, &'p [u8]), FsError> {
        let (parent, name) = path::split(path)?;
        let dir = self.resolve(parent, OFlags::PATH | OFlags::DIRECTORY, Mode::empty())?;
        Ok((dir, name))
    }

    /// Resolve `path` and open it with `flags`, unless it names a FIFO,
    /// socket or device: those come back as the `O_PATH` descriptor that
    /// looked, never opened here (a FIFO's open would wait in the service
    /// for its other end, and a device's belongs to whoever uses it).
    fn resolve_openable(&self, path: &[u8], flags: OFlags, mode: Mode) -> Result<Openable, FsError> {
        use rustix::fs::FileType;
        if flags.contains(OFlags::CREATE | OFlags::EXCL) {
            // A new file, regular: nothing else to meet.
            return self.resolve(path, flags, mode).map(Openable::File);
        }
        let look = OFlags::PATH | (flags & (OFlags::NOFOLLOW | OFlags::DIRECTORY));
        let Ok(probe) = self.resolve(path, look, Mode::empty()) else {
            // Missing (`O_CREAT` makes it), or not to be had: the open
            // itself says why.
            return self.resolve(path, flags, mode).map(Openable::File);
        };
        match FileType::from_raw_mode(rustix::fs::fstat(&probe)?.st_mode) {
            // `O_CREAT` of what is there: the kernel's own answer for the
            // path (`EISDIR` for a directory).
            FileType::RegularFile | FileType::Directory if flags.contains(OFlags::CREATE) => {
                self.resolve(path, flags, mode).map(Openable::File)
            }
            // The very file that was looked at, opened as asked (the
            // kernel checks access as for the path).
            FileType::RegularFile | FileType::Directory => Ok(Openable::File(reopen(
                &probe,
                flags - OFlags::NOFOLLOW - OFlags::CREATE - OFlags::EXCL,
            )?)),
            // `O_NOFOLLOW` met a symlink: the open's `ELOOP`.
            FileType::Symlink => self.resolve(path, flags, mode).map(Openable::File),
            _ => Ok(Openable::Special(probe)),
        }
    }

    fn writable(&self) -> Result<(), FsError> {
        if self.read_only {
            Err(FsError::ReadOnly)
        } else {
            Ok(())
        }
    }
}

impl Export for ExportImpl {
    fn open(&self, path: &[u8], flags: u32, mode: u32) -> Result<OpenFileClient, FsError> {
        let _as = self.creds.adopt(As::Effective)?;
        let flags = OFlags::from_bits(flags)
            .filter(|f| CLIENT_FLAGS.contains(*f))
            .ok_or_else(|| FsError::Invalid(format!("open flags {flags:#o}")))?;
        if flags.contains(OFlags::PATH) {
            return self.open_path(path, flags);
        }
        let access = flags & OFlags::ACCMODE;
        if access == OFlags::ACCMODE {
            return Err(FsError::Invalid("access mode O_ACCMODE".into()));
        }
        let writes = access != OFlags::RDONLY || flags.contains(OFlags::TRUNC);
        if self.read_only && writes {
            return Err(FsError::ReadOnly);
        }
        // A read-only export creates nothing: an existing file opens, a
        // missing one is EROFS, as Linux answers on a read-only mount.
        let (flags, create_refused) = if self.read_only && flags.contains(OFlags::CREATE) {
            (flags - OFlags::CREATE - OFlags::EXCL, true)
        } else {
            (flags, false)
        };
        // openat2 refuses a mode unless it creates.
        let mode = if flags.contains(OFlags::CREATE) {
            Mode::from_bits_truncate(mode & 0o7777)
        } else {
            Mode::empty()
        };
        // O_TRUNC is applied after the file's token is back: a holder's
        // write-back must land before the truncation, not after it.
        let truncate = flags.contains(OFlags::TRUNC);
        let fd = match self.resolve_openable(path, flags - OFlags::CLOEXEC - OFlags::TRUNC, mode) {
            Err(FsError::Os { errno }) if create_refused && errno == Errno::NOENT.raw_os_error() => {
                return Err(FsError::ReadOnly);
            }
            Ok(Openable::Special(fd)) => return self.path_only(fd),
            other => match other? {
                Openable::File(fd) => fd,
                Openable::Special(_) => unreachable!("answered above"),
            },
        };
        let st = rustix::fs::fstat(&fd)?;
        let node = self.node((st.st_dev, st.st_ino));
        let regular = rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::RegularFile;
        let directory = rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::Directory;
        if truncate && directory {
            // As Linux answers `O_TRUNC` on a directory, whatever the access.
            return Err(Errno::ISDIR.into());
        }
        if truncate && regular {
            let _token = node.settle(Instant::now() + self.timeout);
            if access == OFlags::RDONLY {
                // Linux truncates on `O_RDONLY|O_TRUNC` too (checking write
                // permission); a read-only descriptor cannot, so the file is
                // reopened for writing, as the same inode.
                rustix::fs::ftruncate(reopen(&fd, OFlags::WRONLY)?, 0)?;
            } else {
                rustix::fs::ftruncate(&fd, 0)?;
            }
            node.truncate_cache(0);
        }
        Ok(self.opened(
            fd,
            node,
            Access {
                append: flags.contains(OFlags::APPEND),
                readable: access != OFlags::WRONLY,
                writable: access != OFlags::RDONLY,
                regular,
            },
        ))
    }

    fn stat(&self, path: &[u8], follow: bool) -> Result<Stat, FsError> {
        let _as = self.creds.adopt(As::Effective)?;
        let nofollow = if follow { OFlags::empty() } else { OFlags::NOFOLLOW };
        let fd = self.resolve(path, OFlags::PATH | nofollow, Mode::empty())?;
        let st = rustix::fs::fstat(&fd)?;
        self.settle_key((st.st_dev, st.st_ino));
        stat_of(&fd)
    }

    fn list(&self, path: &[u8]) -> Result<Vec<DirEntry>, FsError> {
        let _as = self.creds.adopt(As::Effective)?;
        let fd = self.resolve(path, OFlags::RDONLY | OFlags::DIRECTORY, Mode::empty())?;
        list_of(&fd)
    }

    fn mkdir(&self, path: &[u8], mode: u32) -> Result<(), FsError> {
        let _as = self.creds.adopt(As::Effective)?;
        let (dir, name) = match self.parent(path) {
            Ok(p) => p,
            // A path ending in `.` or `..` (the root's own, say) names a
            // directory: `EEXIST` if it is there, as Linux answers (and
            // `mkdir -p` relies on), else why it is not.
            Err(FsError::Invalid(_)) => {
                self.resolve(path, OFlags::PATH | OFlags::DIRECTORY, Mode::empty())?;
                return Err(Errno::EXIST.into());
            }
            Err(e) => return Err(e),
        };
        self.writable()?;
        rustix::fs::mkdirat(&dir, name, Mode::from_bits_truncate(mode & 0o7777))?;
        Ok(())
    }

    fn rmdir(&self, path: &[u8]) -> Result<(), FsError> {
        let _as = self.creds.adopt(As::Effective)?;
        self.writable()?;
        let (dir, name) = self.parent(path)?;
        rustix::fs::unlinkat(&dir, name, AtFlags::REMOVEDIR)?;
        Ok(())
    }

    fn unlink(&self, path: &[u8]) -> Result<(), FsError> {
        let _as = self.creds.adopt(As::Effective)?;
        self.writable()?;
        let (dir, name) = self.parent(path)?;
        let key = rustix::fs::statat(&dir, name, AtFlags::SYMLINK_NOFOLLOW)
            .ok()
            .map(|st| (st.st_dev, st.st_ino));
        rustix::fs::unlinkat(&dir, name, AtFlags::empty())?;
        if let Some(key) = key {
            // A client that holds the file's token answers `fstat` from
            // its shared page: its link count changed.
            self.settle_key(key);
        }
        Ok(())
    }

    fn rename(&self, from: &[u8], to: &[u8]) -> Result<(), FsError> {
        let _as = self.creds.adopt(As::Effective)?;
        self.writable()?;
        let (from_dir, from_name) = self.parent(from)?;
        let (to_dir, to_name) = self.parent(to)?;
        rustix::fs::renameat(&from_dir, from_name, &to_dir, to_name)?;
        Ok(())
    }

    fn read_only(&self) -> Result<bool, FsError> {
        Ok(self.read_only)
    }

    fn statfs(&self) -> Result<crate::proto::FsStat, FsError> {
        let s = rustix::fs::fstatfs(&self.root)?;
        let v = rustix::fs::fstatvfs(&self.root)?;
        let read_only = if self.read_only { libc::ST_RDONLY } else { 0 };
        Ok(crate::proto::FsStat {
            kind: s.f_type as u64,
            block_size: s.f_bsize as u64,
            blocks: s.f_blocks,
            blocks_free: s.f_bfree,
            blocks_available: s.f_bavail,
            files: s.f_files,
            files_free: s.f_ffree,
            name_max: s.f_namelen as u64,
            fragment_size: s.f_frsize as u64,
            flags: v.f_flag.bits() | read_only,
        })
    }

    fn read_link(&self, path: &[u8]) -> Result<Vec<u8>, FsError> {
        let _as = self.creds.adopt(As::Effective)?;
        let (dir, name) = self.parent(path)?;
        Ok(rustix::fs::readlinkat(&dir, name, Vec::new())?.into_bytes())
    }

    fn symlink(&self, target: &[u8], path: &[u8]) -> Result<(), FsError> {
        let _as = self.creds.adopt(As::Effective)?;
        self.writable()?;
        if target.is_empty() || target.contains(&0) {
            return Err(FsError::Invalid(
                "a symlink's target must be non-empty, without NUL".into(),
            ));
        }
        let (dir, name) = self.parent(path)?;
        rustix::fs::symlinkat(target, &dir, name)?;
        Ok(())
    }

    fn link(&self, from: &[u8], to: &[u8]) -> Result<(), FsError> {
        let _as = self.creds.adopt(As::Effective)?;
        self.writable()?;
        let (from_dir, from_name) = self.parent(from)?;
        // Linux looks the source up whole before the target's directory,
        // and its errors come first.
        rustix::fs::statat(&from_dir, from_name, AtFlags::SYMLINK_NOFOLLOW)?;
        let (to_dir, to_name) = self.parent(to)?;
        rustix::fs::linkat(&from_dir, from_name, &to_dir, to_name, AtFlags::empty())?;
        Ok(())
    }

    fn set_attr(&self, path: &[u8], follow: bool, attr: Attr) -> Result<(), FsError> {
        let _as = self.creds.adopt(As::Effective)?;
        self.writable()?;
        let nofollow = if follow { OFlags::empty() } else { OFlags::NOFOLLOW };
        let fd = self.resolve(path, OFlags::PATH | nofollow, Mode::empty())?;
        let st = rustix::fs::fstat(&fd)?;
        let node = self
            .nodes
            .lock()
            .get(&(st.st_dev, st.st_ino))
            .and_then(Weak::upgrade);
        // A holder's write-back must not land after the times are set.
        let _token = node.as_ref().map(|n| n.settle(Instant::now() + self.timeout));
        set_attr(&fd, attr)
    }

    fn share(&self, file: Door) -> Result<[u8; 16], FsError> {
        let id = file
            .with_local(|_: &OpenFileServer, datum| datum)
            .and_then(Result::ok)
            .ok_or_else(|| FsError::Invalid("not an open file of this export".into()))?;
        let open = self.open_by_id(id).ok_or(FsError::Closed)?;
        let mut key = [0u8; 16];
        rustix::rand::getrandom(&mut key, rustix::rand::GetRandomFlags::empty())?;
        let mut shared = self.shared.lock();
        if shared.len() >= MAX_SHARED {
            shared.pop_front();
        }
        shared.push_back((key, open));
        Ok(key)
    }

    fn adopt(&self, key: [u8; 16]) -> Result<OpenFileClient, FsError> {
        let open = self
            .shared
            .lock()
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, o)| o.clone())
            .ok_or(FsError::Closed)?;
        Ok(OpenFileClient::from_door(self.door_of(open)))
    }

    fn counters(&self) -> Result<crate::proto::Counters, FsError> {
        let c = &self.counters;
        Ok(crate::proto::Counters {
            faults: c.faults.load(SeqCst),
            windows: c.windows.load(SeqCst),
            grants: c.grants.load(SeqCst),
            recalls: c.recalls.load(SeqCst),
            evictions: c.evictions.load(SeqCst),
            file_calls: c.file_calls.load(SeqCst),
            spliced_bytes: c.spliced_bytes.load(SeqCst),
            splices: c.splices.load(SeqCst),
        })
    }

    fn session(&self, uffd: OwnedFd, evicted: OwnedFd) -> Result<(SessionClient, OwnedFd), FsError> {
        let (door, page) = crate::session::start(self.0.clone(), uffd, evicted)?;
        Ok((SessionClient::from_door(door), page))
    }

    fn access(&self, path: &[u8], mode: u32, flags: u32) -> Result<(), FsError> {
        let known = (libc::AT_EACCESS | libc::AT_SYMLINK_NOFOLLOW) as u32;
        let access = rustix::fs::Access::from_bits(mode)
            .ok_or_else(|| FsError::Invalid(format!("access mode {mode:#o}")))?;
        if flags & !known != 0 {
            return Err(FsError::Invalid(format!("access flags {flags:#x}")));
        }
        let who = if flags & libc::AT_EACCESS as u32 != 0 {
            As::Effective
        } else {
            As::Real
        };
        let _as = self.creds.adopt(who)?;
        let nofollow = if flags & libc::AT_SYMLINK_NOFOLLOW as u32 != 0 {
            OFlags::NOFOLLOW
        } else {
            OFlags::empty()
        };
        let fd = self.resolve(path, OFlags::PATH | nofollow, Mode::empty())?;
        // Checked by the kernel, on the file resolved beneath the root (its
        // descriptor's link in /proc names that very file).
        let fd_path = format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&fd));
        rustix::fs::accessat(rustix::fs::CWD, fd_path.as_str(), access, AtFlags::EACCESS)?;
        // Then, as Linux: asking to write a file (not a device, FIFO or
        // socket) of a read-only file system.
        let special = || {
            rustix::fs::fstat(&fd).is_ok_and(|st| {
                use rustix::fs::FileType;
                !matches!(
                    FileType::from_raw_mode(st.st_mode),
                    FileType::RegularFile | FileType::Directory | FileType::Symlink
                )
            })
        };
        if self.read_only && access.contains(rustix::fs::Access::WRITE_OK) && !special() {
            return Err(FsError::ReadOnly);
        }
        Ok(())
    }

    fn credentials_changed(&self) -> Result<(), FsError> {
        self.creds.forget();
        Ok(())
    }

    fn exec_descriptor(&self, path: &[u8]) -> Result<OwnedFd, FsError> {
        let _as = self.creds.adopt(As::Effective)?;
        exec_descriptor(self, path)
    }

    fn mknod(&self, path: &[u8], mode: u32, dev: u64) -> Result<(), FsError> {
        use rustix::fs::FileType;
        let _as = self.creds.adopt(As::Effective)?;
        self.writable()?;
        let (dir, name) = self.parent(path)?;
        // The types mknod(2) takes (0: a regular file); a directory is
        // EPERM and anything else EINVAL, as Linux answers.
        let kind = match mode & libc::S_IFMT {
            0 | libc::S_IFREG => FileType::RegularFile,
            libc::S_IFIFO => FileType::Fifo,
            libc::S_IFSOCK => FileType::Socket,
            libc::S_IFCHR => FileType::CharacterDevice,
            libc::S_IFBLK => FileType::BlockDevice,
            libc::S_IFDIR => return Err(Errno::PERM.into()),
            _ => return Err(Errno::INVAL.into()),
        };
        rustix::fs::mknodat(&dir, name, kind, Mode::from_bits_truncate(mode & 0o7777), dev)?;
        Ok(())
    }

    fn bind(&self, path: &[u8], socket: OwnedFd) -> Result<(), FsError> {
        use std::os::fd::AsRawFd;
        let _as = self.creds.adopt(As::Effective)?;
        self.writable()?;
        let (dir, name) = self.parent(path)?;
        // Unix sockets bind to a path, not a name in a directory: the
        // directory resolved beneath the root, through its descriptor's
        // link (a path longer than `sun_path` holds is ENAMETOOLONG).
        let mut at = format!("/proc/self/fd/{}/", dir.as_raw_fd()).into_bytes();
        at.extend_from_slice(name);
        let addr = rustix::net::SocketAddrUnix::new(std::ffi::OsStr::from_bytes(&at))?;
        rustix::net::bind(&socket, &addr)?;
        Ok(())
    }
}

/// [`Export::exec_descriptor`]: every check is the kernel's, made in the
/// service thread (with whatever credentials it runs the call with), in
/// the order `execve` makes them: the path's lookup, permission to
/// execute (`X_OK` with the effective ids; `noexec` mounts), a regular
/// file (`EACCES` otherwise, as `execve` answers a directory or a FIFO),
/// then permission to read, which the caller needs to read a `#!` line.
fn exec_descriptor(export: &Inner, path: &[u8]) -> Result<OwnedFd, FsError> {
    use std::os::fd::AsRawFd;
    let fd = export.resolve(path, OFlags::PATH, Mode::empty())?;
    // faccessat2(fd, "", X_OK, AT_EMPTY_PATH | AT_EACCESS), through the
    // descriptor's link (rustix refuses AT_EMPTY_PATH here).
    let link = format!("/proc/self/fd/{}", fd.as_raw_fd());
    rustix::fs::accessat(
        rustix::fs::CWD,
        link.as_str(),
        rustix::fs::Access::EXEC_OK,
        AtFlags::EACCESS,
    )?;
    let st = rustix::fs::fstat(&fd)?;
    if rustix::fs::FileType::from_raw_mode(st.st_mode) != rustix::fs::FileType::RegularFile {
        return Err(Errno::ACCESS.into());
    }
    // What a client wrote through its window is in the host file first.
    export.settle_key((st.st_dev, st.st_ino));
    if export.read_only {
        return Ok(crate::readonly::reopen_read_only(&fd)?);
    }
    reopen(&fd, OFlags::RDONLY)
}

impl ExportImpl {
    /// An `O_PATH` open ([`Export::open`]): Linux ignores every other flag
    /// but `O_DIRECTORY` and `O_NOFOLLOW`.
    fn open_path(&self, path: &[u8], flags: OFlags) -> Result<OpenFileClient, FsError> {
        let look = OFlags::PATH | (flags & (OFlags::NOFOLLOW | OFlags::DIRECTORY));
        let fd = self.resolve(path, look, Mode::empty())?;
        self.path_only(fd)
    }

    /// An open file that stands for `fd`, an `O_PATH` descriptor: neither
    /// readable nor writable (the host answers `EBADF`), never mapped.
    fn path_only(&self, fd: OwnedFd) -> Result<OpenFileClient, FsError> {
        let st = rustix::fs::fstat(&fd)?;
        let node = self.node((st.st_dev, st.st_ino));
        Ok(self.opened(fd, node, Access::default()))
    }

    /// A new open file of `fd`, a door to it, and its entry among the opens.
    fn opened(&self, fd: OwnedFd, node: Arc<Node>, access: Access) -> OpenFileClient {
        let id = self.next_open.fetch_add(1, SeqCst);
        let open = Arc::new(Opened {
            id,
            fd,
            node,
            append: AtomicBool::new(access.append),
            readable: access.readable,
            writable: access.writable,
            regular: access.regular,
            timeout: self.timeout,
            tally: self.counters.clone(),
            offset: Mutex::new(0),
            revoked: AtomicBool::new(false),
            positional: std::sync::OnceLock::new(),
            pipes: Mutex::new(Pipes::default()),
            export_read_only: self.read_only,
            creds: self.creds.clone(),
        });
        self.opens.lock().insert(id, Arc::downgrade(&open));
        OpenFileClient::from_door(self.door_of(open))
    }
}

/// What [`Inner::resolve_openable`] found.
enum Openable {
    /// Opened as asked.
    File(OwnedFd),
    /// A FIFO, socket or device, not opened: its `O_PATH` descriptor.
    Special(OwnedFd),
}

/// What an open file may do: none of it for a path-only one.
#[derive(Default)]
struct Access {
    append: bool,
    readable: bool,
    writable: bool,
    regular: bool,
}

/// One open file description: the host's, plus the offset its door's
/// holders share.
pub(crate) struct Opened {
    /// The datum of its doors.
    pub(crate) id: u64,
    pub(crate) fd: OwnedFd,
    pub(crate) node: Arc<Node>,
    /// Its `O_APPEND` status flag, which `fcntl(F_SETFL)` may change (the
    /// host description's flag follows it).
    append: AtomicBool,
    pub(crate) readable: bool,
    pub(crate) writable: bool,
    pub(crate) regular: bool,
    timeout: Duration,
    tally: Arc<Tally>,
    pub(crate) offset: Mutex<u64>,
    /// The service took the file back (its client was evicted).
    pub(crate) revoked: AtomicBool,
    /// For an `O_APPEND` open, a second description of the file without
    /// it: writing back a window's bytes must land at their offsets, and
    /// Linux appends every `pwrite` on an `O_APPEND` description.
    positional: std::sync::OnceLock<OwnedFd>,
    /// Pipes attached by its clients for spliced reads (write ends), by
    /// number; `None` once found broken.
    pipes: Mutex<Pipes>,
    export_read_only: bool,
    /// The export's callers' credentials: a change to the file is made
    /// as its caller, its writes landing too (a write by a user without
    /// `CAP_FSETID` clears set-user-ID bits, as Linux does).
    pub(crate) creds: Arc<Credentials>,
}

/// The pipes attached to an open file, by number. A number is never given
/// out twice: a late call naming a pipe its client gave up on (a deadline
/// passed) finds nothing, never the client's next pipe.
#[derive(Default)]
struct Pipes {
    next: u32,
    by_number: HashMap<u32, AttachedPipe>,
}

/// A client's pipe (its write end), counted against the export's bound
/// while it is attached.
struct AttachedPipe {
    fd: OwnedFd,
    tally: Arc<Tally>,
}

impl Drop for AttachedPipe {
    fn drop(&mut self) {
        self.tally.pipes.fetch_sub(1, SeqCst);
    }
}

/// Most pipes an export keeps attached at once, over all its open files:
/// a pipe left full by its client holds up to a megabyte of the host's
/// page cache, so the bound bounds that too. Clients past it read through
/// the call.
pub const MAX_EXPORT_PIPES: u64 = 256;

/// Most pipes one open file keeps attached (one per client process that
/// reads it in large pieces); a client past it takes the copy path.
pub const MAX_PIPES: usize = 64;

/// `fd`'s file opened anew (a new open file description of the same
/// inode, permissions checked again) with `access`.
fn reopen(fd: &OwnedFd, access: OFlags) -> Result<OwnedFd, FsError> {
    use std::os::fd::AsRawFd;
    let path = format!("/proc/self/fd/{}", fd.as_raw_fd());
    Ok(rustix::fs::open(
        path.as_str(),
        access | OFlags::CLOEXEC,
        Mode::empty(),
    )?)
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
    fn settle(&self) -> Result<parking_lot::MutexGuard<'_, crate::node::TokenState>, FsError> {
        if self.revoked.load(SeqCst) {
            return Err(FsError::Closed);
        }
        self.tally.file_calls.fetch_add(1, SeqCst);
        Ok(self.node.settle(Instant::now() + self.timeout))
    }

    /// Move up to `len` bytes at `at` into attached pipe `pipe` by
    /// reference (`splice`); how many. Never blocks on the pipe: one the
    /// client left bytes in, or a broken one, is an `Invalid` error (the
    /// client then drops it), as is a file the kernel cannot splice.
    pub(crate) fn splice_into(&self, pipe: u32, at: u64, len: u32) -> Result<usize, FsError> {
        use rustix::pipe::{SpliceFlags, splice};
        let unusable = |why: &str| FsError::Invalid(format!("pipe {pipe}: {why}"));
        let mut pipes = self.pipes.lock();
        let Some(to) = pipes.by_number.get(&pipe).map(|p| &p.fd) else {
            return Err(unusable("not attached"));
        };
        let len = len.min(MAX_IO) as usize;
        let (mut off, mut done) = (at, 0);
        while done < len {
            match splice(
                &self.fd,
                Some(&mut off),
                to,
                None,
                len - done,
                SpliceFlags::NONBLOCK,
            ) {
                Ok(0) => break,
                Ok(n) => done += n,
                Err(Errno::INTR) => {}
                Err(_) if done > 0 => break,
                Err(Errno::AGAIN) => return Err(unusable("full")),
                Err(Errno::PIPE) => {
                    pipes.by_number.remove(&pipe);
                    return Err(unusable("its reader is gone"));
                }
                Err(Errno::INVAL) => return Err(unusable("the file cannot be spliced")),
                Err(e) => return Err(e.into()),
            }
        }
        self.tally.spliced_bytes.fetch_add(done as u64, SeqCst);
        self.tally.splices.fetch_add(1, SeqCst);
        Ok(done)
    }

    fn read_into(&self, at: u64, len: u32, data: &mut Vec<u8>) -> Result<usize, FsError> {
        // Exactly `len` bytes asked of the host: a read into the vector's
        // spare capacity would read as much as it happens to have, and a
        // shared-offset read would move the offset that far.
        let len = len.min(MAX_IO) as usize;
        data.clear();
        data.resize(len, 0);
        let n = loop {
            match rustix::io::pread(&self.fd, &mut data[..], at) {
                Err(Errno::INTR) => continue,
                r => break r?,
            }
        };
        data.truncate(n);
        Ok(n)
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
            // Where the append ended (an empty write moves nothing).
            rustix::fs::seek(&self.fd, rustix::fs::SeekFrom::Current(0))?
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
        use rustix::event::{PollFd, PollFlags, poll};
        if self.revoked.load(SeqCst) {
            return Err(FsError::Closed);
        }
        let st = rustix::fs::fstat(&pipe)?;
        let mode = rustix::fs::fcntl_getfl(&pipe)? & OFlags::ACCMODE;
        if rustix::fs::FileType::from_raw_mode(st.st_mode) != rustix::fs::FileType::Fifo
            || mode != OFlags::WRONLY
        {
            return Err(FsError::Invalid("not the write end of a pipe".into()));
        }
        let mut pipes = self.pipes.lock();
        // A pipe whose reader is gone says so (POLLERR): it makes room.
        pipes.by_number.retain(|_, p| {
            let mut fds = [PollFd::new(&p.fd, PollFlags::OUT)];
            let gone = poll(&mut fds, Some(&rustix::time::Timespec::default())).is_ok()
                && fds[0].revents().contains(PollFlags::ERR);
            !gone
        });
        if pipes.by_number.len() >= MAX_PIPES {
            return Err(FsError::Invalid(format!("{MAX_PIPES} pipes attached already")));
        }
        let Some(number) = pipes.next.checked_add(1) else {
            return Err(FsError::Invalid("no pipe numbers left".into()));
        };
        if self.tally.pipes.fetch_add(1, SeqCst) >= MAX_EXPORT_PIPES {
            self.tally.pipes.fetch_sub(1, SeqCst);
            return Err(FsError::Invalid(format!(
                "the export has {MAX_EXPORT_PIPES} pipes attached already"
            )));
        }
        pipes.next = number;
        pipes.by_number.insert(
            number,
            AttachedPipe {
                fd: pipe,
                tally: self.tally.clone(),
            },
        );
        Ok(number)
    }

    fn read_spliced_at(&self, pipe: u32, at: u64, len: u32) -> Result<u32, FsError> {
        let _token = self.settle()?;
        if !self.readable {
            return Err(Errno::BADF.into());
        }
        self.splice_into(pipe, at, len).map(|n| n as u32)
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
            return crate::readonly::reopen_read_only(&self.fd).map_err(|e| {
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
            // puts its end at the largest offset): the kernel seeks.
            use rustix::fs::SeekFrom;
            rustix::fs::seek(&self.fd, SeekFrom::Start(*offset))?;
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
        let _token = self.settle()?;
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
            match crate::lock::set(self.fd.as_fd(), kind, start, len) {
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
        crate::lock::test(self.fd.as_fd(), kind, start, len)
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
            match crate::lock::whole_file(self.fd.as_fd(), kind) {
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

/// Apply `attr` to the file `fd` names (an `O_PATH` descriptor will do:
/// mode and times go through its `/proc/self/fd` link, the owner through
/// `AT_EMPTY_PATH`).
fn set_attr(fd: &OwnedFd, attr: Attr) -> Result<(), FsError> {
    use rustix::fs::{CWD, Timespec as Ts, Timestamps};
    use std::os::fd::AsRawFd;
    let magic = format!("/proc/self/fd/{}", fd.as_raw_fd());
    if let Some(mode) = attr.mode {
        rustix::fs::chmodat(
            CWD,
            magic.as_str(),
            Mode::from_bits_truncate(mode & 0o7777),
            AtFlags::empty(),
        )?;
    }
    if attr.uid.is_some() || attr.gid.is_some() {
        let uid = attr.uid.map(rustix::fs::Uid::from_raw);
        let gid = attr.gid.map(rustix::fs::Gid::from_raw);
        rustix::fs::chownat(fd, "", uid, gid, AtFlags::EMPTY_PATH)?;
    }
    if attr.atime != SetTime::Keep || attr.mtime != SetTime::Keep {
        // UTIME_NOW and UTIME_OMIT, as utimensat(2) takes them.
        let t = |s: SetTime| match s {
            SetTime::Keep => Ts {
                tv_sec: 0,
                tv_nsec: (1 << 30) - 2,
            },
            SetTime::Now => Ts {
                tv_sec: 0,
                tv_nsec: (1 << 30) - 1,
            },
            SetTime::At(t) => Ts {
                tv_sec: t.sec,
                tv_nsec: t.nsec as _,
            },
        };
        let times = Timestamps {
            last_access: t(attr.atime),
            last_modification: t(attr.mtime),
        };
        rustix::fs::utimensat(CWD, magic.as_str(), &times, AtFlags::empty())?;
    }
    Ok(())
}

pub(crate) fn stat_of(fd: impl AsFd) -> Result<Stat, FsError> {
    let s = rustix::fs::fstat(fd)?;
    let time = |sec: i64, nsec: u64| Timespec {
        sec,
        nsec: nsec as u32,
    };
    Ok(Stat {
        dev: s.st_dev,
        ino: s.st_ino,
        mode: s.st_mode,
        nlink: s.st_nlink,
        uid: s.st_uid,
        gid: s.st_gid,
        rdev: s.st_rdev,
        size: s.st_size as u64,
        blksize: s.st_blksize as u64,
        blocks: s.st_blocks as u64,
        atime: time(s.st_atime as i64, s.st_atime_nsec as u64),
        mtime: time(s.st_mtime as i64, s.st_mtime_nsec as u64),
        ctime: time(s.st_ctime as i64, s.st_ctime_nsec as u64),
    })
}

fn list_of(fd: impl AsFd) -> Result<Vec<DirEntry>, FsError> {
    use rustix::fs::FileType;
    let mut out = Vec::new();
    for entry in rustix::fs::Dir::read_from(fd)? {
        let entry = entry?;
        let name = entry.file_name().to_bytes();
        if name == b"." || name == b".." {
            continue;
        }
        let kind = match entry.file_type() {
            FileType::RegularFile => Kind::File,
            FileType::Directory => Kind::Dir,
            FileType::Symlink => Kind::Symlink,
            _ => Kind::Other,
        };
        out.push(DirEntry {
            name: name.to_vec(),
            ino: entry.ino(),
            kind,
        });
    }
    Ok(out)
}
