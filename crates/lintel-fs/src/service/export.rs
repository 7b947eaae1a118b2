//! An exported directory: [`Service`], the handle its owner keeps, and
//! the door implementation of [`Export`] behind it, which resolves every
//! path beneath the root and makes each open an [`Opened`] with a door of
//! its own.

use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::time::Duration;

use lintel::Door;
use parking_lot::Mutex;
use rustix::fs::{AtFlags, Mode, OFlags, ResolveFlags};
use rustix::io::Errno;

use crate::proto::{
    Attr, Counters, DirEntry, Export, ExportServer, FsError, FsStat, OpenFileClient, OpenFileServer,
    SessionClient, Stat,
};
use crate::service::credentials::{As, Credentials};
use crate::service::host::{list_of, reopen, set_attr, stat_of};
use crate::service::node::Node;
use crate::service::nodes::{Claim, Nodes};
use crate::service::open::{Opened, Opens};
use crate::service::session::{self, Sessions};
use crate::service::splice::Pipes;
use crate::service::tally::Tally;
use crate::service::{path, readonly};

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
struct Inner {
    root: OwnedFd,
    /// The root as the kernel names it (`/proc/self/fd`).
    root_path: Arc<[u8]>,
    read_only: bool,
    timeout: Duration,
    /// Every open file, by its door's datum.
    opens: Arc<Opens>,
    /// Every file with an open, by (device, inode).
    nodes: Nodes,
    next_open: AtomicU64,
    counters: Arc<Tally>,
    /// Sessions alive (each has a pager thread and a shared page).
    sessions: Arc<std::sync::atomic::AtomicUsize>,
    max_sessions: usize,
    /// Chunks the pager maps ahead per chunk faulted (`Service::with_map_ahead`).
    map_ahead: u64,
    /// Open files shared by key ([`Export::share`]), oldest first.
    shared: Mutex<std::collections::VecDeque<([u8; 16], Arc<Opened>)>>,
    /// Its callers' credentials, which each call is made with.
    creds: Arc<Credentials>,
}

/// Most open files kept shared by key at once (the oldest go first).
const MAX_SHARED: usize = 4096;

/// Most sessions (client processes with mapped windows) a service keeps
/// at once by default; more get an error, and their clients take the copy
/// path.
pub const MAX_SESSIONS: usize = 1024;

/// Chunks the pager maps ahead of a client's faults, per chunk faulted
/// ([`Service::with_map_ahead`]).
pub const MAP_AHEAD: u64 = 8;

impl Service {
    /// Export the directory at `root`, read-only if `read_only`.
    pub fn new(root: impl AsRef<Path>, read_only: bool) -> std::io::Result<Service> {
        let root = rustix::fs::open(
            root.as_ref(),
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        crate::service::host::reserve_descriptor_table(&root);
        let root_path = crate::service::host::link_of(&root)?.into();
        Ok(Service {
            inner: Arc::new(Inner {
                root,
                root_path,
                read_only,
                timeout: LOCK_TIMEOUT,
                opens: Arc::default(),
                nodes: Nodes::default(),
                next_open: AtomicU64::new(1),
                counters: Arc::default(),
                sessions: Arc::default(),
                max_sessions: MAX_SESSIONS,
                map_ahead: MAP_AHEAD,
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

    /// Let the pager map up to `factor` 64 KiB chunks of a file into a
    /// client ahead of its page faults, per chunk it faulted on (default
    /// [`MAP_AHEAD`]; 0: only what it faults on). The chunks are filled
    /// from the host file and mapped while the pager has no fault to
    /// serve, from the one after the last fault on: a client that reads
    /// on finds its next bytes mapped, and one that reads at random finds
    /// more and more of them mapped, and stops waiting on faults
    /// sooner. The cache then holds at most `factor + 1` times what the
    /// client touched, and never more than the file.
    pub fn with_map_ahead(mut self, factor: u64) -> Service {
        if let Some(inner) = Arc::get_mut(&mut self.inner) {
            inner.map_ahead = factor;
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
        let nodes: Vec<Arc<Node>> = self.inner.nodes.live();
        for n in nodes {
            drop(n.settle(self.inner.timeout));
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
                s.opens.forget(id);
            }
        })
    }
}

impl Inner {
    /// Take the file `key`'s token back if it is open here, so the host's
    /// metadata is current; whether it was open.
    fn settle_key(&self, key: (u64, u64)) -> bool {
        self.open_node(key)
            .map(|n| drop(n.settle(self.timeout)))
            .is_some()
    }

    /// For a look at the metadata of the file `key` names, through `host`
    /// (a descriptor of it): what a holder of its token wrote is written
    /// out, and the holder keeps the token ([`Node::flush`]), so that a
    /// program's `stat` of a file it holds costs its next read or write no
    /// call. Whether the file is open here (then `host` says what the look
    /// should).
    fn flush_key(&self, key: (u64, u64), host: impl AsFd) -> bool {
        self.open_node(key)
            .map(|n| drop(n.flushed(self.timeout, host)))
            .is_some()
    }

    /// The node of the file `key` names, if it is open here.
    fn open_node(&self, key: (u64, u64)) -> Option<Arc<Node>> {
        self.nodes.get(key)
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
    fn parent<'p>(&self, path: &'p [u8]) -> Result<(Looked, &'p [u8]), FsError> {
        let (parent, name) = path::split(path)?;
        let dir = self.resolve(parent, OFlags::PATH | OFlags::DIRECTORY, Mode::empty())?;
        Ok((Looked(Some(dir)), name))
    }

    /// [`Inner::resolve`], for a descriptor the call only looks through.
    fn look(&self, path: &[u8], flags: OFlags) -> Result<Looked, FsError> {
        Ok(Looked(Some(self.resolve(path, flags, Mode::empty())?)))
    }

    /// Resolve `path` and open it with `flags`, unless it names a FIFO,
    /// socket or device: those come back as the `O_PATH` descriptor that
    /// looked, never opened here (a FIFO's open would wait in the service
    /// for its other end, and a device's belongs to whoever uses it).
    fn resolve_openable(&self, path: &[u8], flags: OFlags, mode: Mode) -> Result<Openable, FsError> {
        use rustix::fs::FileType;
        if flags.contains(OFlags::CREATE | OFlags::EXCL) {
            // A new file, regular: nothing else to meet.
            return self.resolve(path, flags, mode).map(|fd| Openable::File(fd, None));
        }
        // Missing: `O_CREAT` makes it, and made with `O_EXCL` it is known
        // new (a dangling symlink, or a name made meanwhile, is `EEXIST`
        // then, and opened as asked). Or not to be had: the open itself
        // says why.
        let missing = || {
            if flags.contains(OFlags::CREATE)
                && let Ok(fd) = self.resolve(path, flags | OFlags::EXCL, mode)
            {
                return Ok(Openable::Created(fd));
            }
            self.resolve(path, flags, mode).map(|fd| Openable::File(fd, None))
        };
        match self.open_plain(path, flags, mode) {
            Plain::Opened(open) => return open,
            Plain::Missing => return missing(),
            Plain::Other => {}
        }
        let look = OFlags::PATH | (flags & (OFlags::NOFOLLOW | OFlags::DIRECTORY));
        let Ok(probe) = self.resolve(path, look, Mode::empty()) else {
            return missing();
        };
        let seen = rustix::fs::fstat(&probe)?;
        match FileType::from_raw_mode(seen.st_mode) {
            // `O_CREAT` of what is there: the kernel's own answer for the
            // path (`EISDIR` for a directory).
            FileType::RegularFile | FileType::Directory if flags.contains(OFlags::CREATE) => {
                self.resolve(path, flags, mode).map(|fd| Openable::File(fd, None))
            }
            // The very file that was looked at, opened as asked (the
            // kernel checks access as for the path).
            FileType::RegularFile | FileType::Directory => self.open_looked_at(path, &probe, &seen, flags),
            // `O_NOFOLLOW` met a symlink: the open's `ELOOP`.
            FileType::Symlink => self.resolve(path, flags, mode).map(|fd| Openable::File(fd, None)),
            _ => Ok(Openable::Special(probe)),
        }
    }

    /// The usual open, of a regular file or a directory that is there,
    /// after a look by name that opens nothing (`fstatat`: one system call
    /// where the `O_PATH` probe takes three, about 0.5 µs less here);
    /// [`Plain::Other`]: anything else, for the probe to answer.
    ///
    /// The look is only a look: unlike the open, it may follow a symlink
    /// out of the root, and the path may name another file by the time of
    /// the open. So the open (beneath the root, as always) keeps only the
    /// very file looked at, and a symlink that leaves the root is refused
    /// by the open as before. A look that finds nothing finds nothing the
    /// probe would (the probe's lookup is the same walk, refusing more).
    fn open_plain(&self, path: &[u8], flags: OFlags, mode: Mode) -> Plain {
        use rustix::fs::FileType;
        let at = if flags.contains(OFlags::NOFOLLOW) {
            AtFlags::SYMLINK_NOFOLLOW
        } else {
            AtFlags::empty()
        };
        let Ok(checked) = path::check(path) else {
            return Plain::Other;
        };
        let Ok(seen) = rustix::fs::statat(&self.root, checked, at) else {
            return Plain::Missing;
        };
        match FileType::from_raw_mode(seen.st_mode) {
            FileType::Directory => {}
            FileType::RegularFile if !flags.contains(OFlags::DIRECTORY) => {}
            _ => return Plain::Other,
        }
        if flags.contains(OFlags::CREATE) {
            // `O_CREAT` of what is there: the kernel's own answer for the
            // path (`EISDIR` for a directory).
            return Plain::Opened(self.resolve(path, flags, mode).map(|fd| Openable::File(fd, None)));
        }
        match self.open_if_seen(path, &seen, flags) {
            Some(open) => Plain::Opened(Ok(open)),
            None => Plain::Other,
        }
    }

    /// Open `path` as `flags` ask if it still names the file `seen` (its
    /// metadata from a look), without waiting or taking a terminal should
    /// it have come to name a FIFO or a device meanwhile; `None` if it
    /// does not.
    fn open_if_seen(&self, path: &[u8], seen: &rustix::fs::Stat, flags: OFlags) -> Option<Openable> {
        let flags = flags - OFlags::CREATE - OFlags::EXCL;
        let quiet = flags | OFlags::NONBLOCK | OFlags::NOCTTY;
        let fd = self.resolve(path, quiet, Mode::empty()).ok()?;
        let got = rustix::fs::fstat(&fd).ok()?;
        if (got.st_dev, got.st_ino) != (seen.st_dev, seen.st_ino) {
            return None;
        }
        if !flags.contains(OFlags::NONBLOCK) {
            // `F_SETFL` sets the status flags it can change: those asked,
            // `O_NONBLOCK` now off.
            rustix::fs::fcntl_setfl(&fd, flags & (OFlags::APPEND | OFlags::DIRECT | OFlags::NOATIME)).ok()?;
        }
        Some(Openable::File(fd, Some(got)))
    }

    /// Open the regular file or directory `probe` found at `path` (its
    /// metadata `seen`), as asked by `flags`.
    ///
    /// By its path again, which costs one lookup: reopening the probe
    /// through its `/proc/self/fd` link costs half as much again, a walk
    /// through procfs and its checks (about 6.5 µs here against 4.4 µs).
    /// Between the two lookups the path may have come to name another
    /// file, even a FIFO or a device, so the second open does not wait
    /// (`O_NONBLOCK`, taken back after) nor take a terminal (`O_NOCTTY`),
    /// and what it opened is kept only if it is the probe's file; anything
    /// else (another file, an error) is closed and the probe reopened
    /// through its link, as the kernel then answers for that file.
    fn open_looked_at(
        &self,
        path: &[u8],
        probe: &OwnedFd,
        seen: &rustix::fs::Stat,
        flags: OFlags,
    ) -> Result<Openable, FsError> {
        if let Some(open) = self.open_if_seen(path, seen, flags) {
            return Ok(open);
        }
        let flags = flags - OFlags::CREATE - OFlags::EXCL;
        Ok(Openable::File(reopen(probe, flags - OFlags::NOFOLLOW)?, None))
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
        self.open_seen(Source::Path(path), flags, mode)
            .map(|(file, _)| file)
    }

    fn stat(&self, path: &[u8], follow: bool) -> Result<Stat, FsError> {
        let _as = self.creds.adopt(As::Effective)?;
        let nofollow = if follow { OFlags::empty() } else { OFlags::NOFOLLOW };
        let fd = self.look(path, OFlags::PATH | nofollow)?;
        let st = rustix::fs::fstat(&fd)?;
        // An open file's write-out may change what it says: asked again then.
        if self.flush_key((st.st_dev, st.st_ino), &fd) {
            return stat_of(&fd);
        }
        Ok(Stat::from_host(&st))
    }

    fn list(&self, path: &[u8]) -> Result<Vec<DirEntry>, FsError> {
        let _as = self.creds.adopt(As::Effective)?;
        let fd = self.look(path, OFlags::RDONLY | OFlags::DIRECTORY)?;
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

    fn settle_dead(&self, pid: u32) -> Result<bool, FsError> {
        Ok(lintel::settle_dead(pid, self.timeout))
    }

    fn statfs(&self) -> Result<FsStat, FsError> {
        let s = rustix::fs::fstatfs(&self.root)?;
        let v = rustix::fs::fstatvfs(&self.root)?;
        let read_only = if self.read_only { libc::ST_RDONLY } else { 0 };
        Ok(FsStat {
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
        let fd = self.look(path, OFlags::PATH | nofollow)?;
        let st = rustix::fs::fstat(&fd)?;
        let node = self.nodes.get((st.st_dev, st.st_ino));
        // A holder's write-back must not land after the times are set.
        let _token = node.as_ref().map(|n| n.settle(self.timeout));
        set_attr(&fd, attr)
    }

    fn share(&self, file: Door) -> Result<[u8; 16], FsError> {
        let id = file
            .with_local(|_: &OpenFileServer, datum| datum)
            .and_then(Result::ok)
            .ok_or_else(|| FsError::Invalid("not an open file of this export".into()))?;
        let open = self.opens.get(id).ok_or(FsError::Closed)?;
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

    fn counters(&self) -> Result<Counters, FsError> {
        let c = &self.counters;
        Ok(Counters {
            faults: c.faults.load(SeqCst),
            windows: c.windows.load(SeqCst),
            grants: c.grants.load(SeqCst),
            recalls: c.recalls.load(SeqCst),
            evictions: c.evictions.load(SeqCst),
            file_calls: c.file_calls.load(SeqCst),
            spliced_bytes: c.spliced_bytes.load(SeqCst),
            splices: c.splices.load(SeqCst),
            filled_ahead: c.filled_ahead.load(SeqCst),
            mapped_ahead: c.mapped_ahead.load(SeqCst),
            direct: c.direct.load(SeqCst),
            written_back: c.written_back.load(SeqCst),
            detached: c.detached.load(SeqCst),
        })
    }

    fn session(&self, uffd: OwnedFd, evicted: OwnedFd) -> Result<(SessionClient, OwnedFd), FsError> {
        let sessions = Sessions {
            opens: self.opens.clone(),
            tally: self.counters.clone(),
            alive: self.sessions.clone(),
            max: self.max_sessions,
            timeout: self.timeout,
            map_ahead: self.map_ahead,
        };
        let (door, page) = session::start(sessions, uffd, evicted)?;
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
        let fd = self.look(path, OFlags::PATH | nofollow)?;
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

    fn open_stat(&self, path: &[u8], flags: u32, mode: u32) -> Result<(OpenFileClient, Stat), FsError> {
        let (file, seen) = self.open_seen(Source::Path(path), flags, mode)?;
        with_stat(file, seen)
    }

    fn reopen_stat(&self, file: Door, flags: u32, mode: u32) -> Result<(OpenFileClient, Stat), FsError> {
        let id = file
            .with_local(|_: &OpenFileServer, datum| datum)
            .and_then(Result::ok)
            .ok_or_else(|| FsError::Invalid("not an open file of this export".into()))?;
        let open = self.opens.get(id).ok_or(FsError::Closed)?;
        let (file, seen) = self.open_seen(Source::Open(&open.fd), flags, mode)?;
        with_stat(file, seen)
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

/// A descriptor a call only looks through (a path's parent directory, a
/// file asked for its metadata): closed once the call's reply is out
/// (`lintel::after_reply`), about 0.4 µs the caller then does not wait
/// for. (A co-located call closes it at once.)
struct Looked(Option<OwnedFd>);

impl std::os::fd::AsFd for Looked {
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.0.as_ref().expect("present until dropped").as_fd()
    }
}

impl std::os::fd::AsRawFd for Looked {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        std::os::fd::AsRawFd::as_raw_fd(&std::os::fd::AsFd::as_fd(self))
    }
}

impl Drop for Looked {
    fn drop(&mut self) {
        if let Some(fd) = self.0.take() {
            lintel::after_reply(move || drop(fd));
        }
    }
}

/// An open file and its metadata: as the open read it, else asked of it
/// (served here: a direct call on the open file, no round trip).
fn with_stat(file: OpenFileClient, seen: Option<Stat>) -> Result<(OpenFileClient, Stat), FsError> {
    let st = match seen {
        Some(st) => st,
        None => crate::proto::OpenFile::stat(&file)?,
    };
    Ok((file, st))
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
        return Ok(readonly::reopen_read_only(&fd)?);
    }
    reopen(&fd, OFlags::RDONLY)
}

impl ExportImpl {
    /// [`Export::open`], and the file's metadata if the open read it on the
    /// way and it is still the answer (for [`Export::open_stat`]).
    fn open_seen(
        &self,
        source: Source<'_>,
        flags: u32,
        mode: u32,
    ) -> Result<(OpenFileClient, Option<Stat>), FsError> {
        let _as = self.creds.adopt(As::Effective)?;
        let flags = OFlags::from_bits(flags)
            .filter(|f| CLIENT_FLAGS.contains(*f))
            .ok_or_else(|| FsError::Invalid(format!("open flags {flags:#o}")))?;
        if flags.contains(OFlags::PATH) {
            return Ok((self.open_path(source, flags)?, None));
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
        let mut truncate = flags.contains(OFlags::TRUNC);
        let openable = match source {
            Source::Path(path) => self.resolve_openable(path, flags - OFlags::CLOEXEC - OFlags::TRUNC, mode),
            Source::Open(fd) => reopenable(fd, flags - OFlags::CLOEXEC - OFlags::TRUNC),
        };
        let (fd, seen) = match openable {
            Err(FsError::Os { errno }) if create_refused && errno == Errno::NOENT.raw_os_error() => {
                return Err(FsError::ReadOnly);
            }
            Ok(Openable::Special(fd)) => return Ok((self.path_only(fd)?, None)),
            other => match other? {
                Openable::File(fd, st) => (fd, st),
                Openable::Created(fd) => {
                    truncate = false;
                    (fd, None)
                }
                Openable::Special(_) => unreachable!("answered above"),
            },
        };
        let st = match seen {
            Some(st) => st,
            None => rustix::fs::fstat(&fd)?,
        };
        let node = self.nodes.claim((st.st_dev, st.st_ino));
        let regular = rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::RegularFile;
        let directory = rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::Directory;
        if truncate && directory {
            // As Linux answers `O_TRUNC` on a directory, whatever the access.
            return Err(Errno::ISDIR.into());
        }
        if truncate && regular {
            let _token = node.settle(self.timeout);
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
        // What was read on the way is the answer to a `stat` now, unless
        // the open truncated the file or a client holds its token (what
        // it wrote may not have reached the host yet).
        let current = (!truncate && node.holder_id.load(SeqCst) == 0).then(|| Stat::from_host(&st));
        let file = self.opened(
            fd,
            node,
            Access {
                append: flags.contains(OFlags::APPEND),
                readable: access != OFlags::WRONLY,
                writable: access != OFlags::RDONLY,
                regular,
            },
        );
        Ok((file, current))
    }

    /// An `O_PATH` open ([`Export::open`]): Linux ignores every other flag
    /// but `O_DIRECTORY` and `O_NOFOLLOW`.
    fn open_path(&self, source: Source<'_>, flags: OFlags) -> Result<OpenFileClient, FsError> {
        let look = OFlags::PATH | (flags & (OFlags::NOFOLLOW | OFlags::DIRECTORY));
        let fd = match source {
            Source::Path(path) => self.resolve(path, look, Mode::empty())?,
            Source::Open(fd) => reopen(fd, look)?,
        };
        self.path_only(fd)
    }

    /// An open file that stands for `fd`, an `O_PATH` descriptor: neither
    /// readable nor writable (the host answers `EBADF`), never mapped.
    fn path_only(&self, fd: OwnedFd) -> Result<OpenFileClient, FsError> {
        let st = rustix::fs::fstat(&fd)?;
        let node = self.nodes.claim((st.st_dev, st.st_ino));
        Ok(self.opened(fd, node, Access::default()))
    }

    /// A new open file of `fd`, a door to it, and its entry among the opens.
    fn opened(&self, fd: OwnedFd, node: Claim, access: Access) -> OpenFileClient {
        let id = self.next_open.fetch_add(1, SeqCst);
        let open = Arc::new(Opened {
            id,
            node,
            fd,
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
            root_path: self.root_path.clone(),
        });
        self.opens.insert(&open);
        OpenFileClient::from_door(self.door_of(open))
    }
}

/// What an open opens: a path beneath the root, or the file an open file
/// of the export stands for ([`Export::reopen_stat`]).
#[derive(Clone, Copy)]
enum Source<'a> {
    Path(&'a [u8]),
    Open(&'a OwnedFd),
}

/// [`Inner::resolve_openable`] for the file `fd` stands for, opened again
/// through its `/proc/self/fd` link as Linux opens that link (`O_EXCL` is
/// `EEXIST`, `O_NOFOLLOW` is `ELOOP`); a FIFO, socket or device comes back
/// as an `O_PATH` descriptor, not opened.
fn reopenable(fd: &OwnedFd, flags: OFlags) -> Result<Openable, FsError> {
    use rustix::fs::FileType;
    let st = rustix::fs::fstat(fd)?;
    match FileType::from_raw_mode(st.st_mode) {
        FileType::RegularFile | FileType::Directory | FileType::Symlink => {
            Ok(Openable::File(reopen(fd, flags)?, None))
        }
        _ => Ok(Openable::Special(reopen(fd, OFlags::PATH)?)),
    }
}

/// What [`Inner::resolve_openable`] found.
enum Openable {
    /// Opened as asked, with its metadata if that was read on the way.
    File(OwnedFd, Option<rustix::fs::Stat>),
    /// Made by this open (`O_CREAT` of a missing name): empty, so an
    /// `O_TRUNC` has nothing to cut.
    Created(OwnedFd),
    /// A FIFO, socket or device, not opened: its `O_PATH` descriptor.
    Special(OwnedFd),
}

/// What [`Inner::open_plain`] made of a path.
enum Plain {
    /// Opened, or refused by the kernel's own answer.
    Opened(Result<Openable, FsError>),
    /// Nothing there to look at.
    Missing,
    /// Something for the probe: a FIFO, socket, device or symlink, or a
    /// file that changed between the look and the open.
    Other,
}

/// What an open file may do: none of it for a path-only one.
#[derive(Default)]
struct Access {
    append: bool,
    readable: bool,
    writable: bool,
    regular: bool,
}

#[cfg(test)]
mod tests {
    use std::io::Read;

    use super::*;

    /// The path came to name another file between the look and the open
    /// (a race the client can make): what opens is the file looked at,
    /// never the one the path names now.
    #[test]
    fn an_open_keeps_to_the_file_its_lookup_saw() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("seen"), b"looked at").unwrap();
        std::fs::write(dir.path().join("now"), b"swapped in").unwrap();
        let service = Service::new(dir.path(), false).unwrap();
        let inner = &service.inner;
        let look = OFlags::PATH | OFlags::CLOEXEC;
        let probe = rustix::fs::openat(&inner.root, "seen", look, Mode::empty()).unwrap();
        let seen = rustix::fs::fstat(&probe).unwrap();
        let read = |path: &[u8]| {
            let Openable::File(fd, _) = inner.open_looked_at(path, &probe, &seen, OFlags::RDONLY).unwrap()
            else {
                panic!("a regular file opens")
            };
            let flags = rustix::fs::fcntl_getfl(&fd).unwrap();
            assert!(!flags.contains(OFlags::NONBLOCK), "O_NONBLOCK was not asked for");
            let mut text = String::new();
            std::fs::File::from(fd).read_to_string(&mut text).unwrap();
            text
        };
        assert_eq!(read(b"seen"), "looked at");
        assert_eq!(read(b"now"), "looked at");
        assert_eq!(read(b"missing"), "looked at");
    }
}
