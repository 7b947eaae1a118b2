//! An export's namespace, reached through its door ([`Fs`]): opening
//! files, and the calls that name a path.

use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use lintel::Door;
use parking_lot::Mutex;
use rustix::fs::OFlags;

use crate::client::file::{File, IoPath, OpenOptions, Window};
use crate::client::mapped::{MappedSession, SessionSource};
use crate::client::{credentials, reaped};
use crate::proto::{
    Attr, Counters, DirEntry, Export, ExportClient, FsError, FsStat, MAX_IO, OpenFile, OpenFileClient, Stat,
};

/// An exported directory, reached through its door.
///
/// ```no_run
/// # fn demo(door: lintel::Door) -> Result<(), lintel_fs::FsError> {
/// use std::io::{Read, Write};
/// let fs = lintel_fs::Fs::from_door(door);
/// fs.create_dir("notes", 0o755)?;
/// let mut f = fs.create("notes/today")?;
/// f.write_all(b"hello").map_err(|e| lintel_fs::FsError::Invalid(e.to_string()))?;
/// assert_eq!(fs.read("notes/today")?, b"hello");
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Fs {
    export: ExportClient,
    /// The [`credentials`] generation the service was last told of.
    told: Arc<AtomicU64>,
    /// How many of the children this process reaped the service was asked
    /// to settle ([`reaped`]).
    reaped: Arc<AtomicU64>,
    /// This process's mapped-window session with the export, made when
    /// the first window attaches.
    session: Arc<Mutex<Option<Arc<MappedSession>>>>,
}

impl From<Door> for Fs {
    fn from(door: Door) -> Fs {
        Fs::from_door(door)
    }
}

impl Fs {
    /// The export behind `door` (a door the file service made with
    /// [`crate::Service::into_door`], here or in another domain).
    pub fn from_door(door: Door) -> Fs {
        Fs {
            export: ExportClient::from_door(door),
            told: Arc::default(),
            reaped: Arc::new(AtomicU64::new(reaped::now())),
            session: Arc::new(Mutex::new(None)),
        }
    }

    /// This process changed its credentials (`set*id`, `setgroups`) or
    /// its umask: each service it uses reads them again (from the kernel)
    /// before its next call that names a path or changes a file. Only sets
    /// a flag, so a signal handler may call it.
    ///
    /// ```no_run
    /// # fn f(fs: &lintel_fs::Fs) -> Result<(), lintel_fs::FsError> {
    /// rustix::process::umask(rustix::fs::Mode::from_raw_mode(0o077));
    /// lintel_fs::Fs::credentials_changed();
    /// fs.create("secret")?; // made 0600, as the new umask says
    /// # Ok(()) }
    /// ```
    pub fn credentials_changed() {
        credentials::changed();
    }

    /// This process reaped its child `pid` (`waitpid`): before this
    /// process's next call to each service that names a path, the service
    /// finishes the calls that child left running (see
    /// [`Fs::settle_dead`]), so what the child was writing when it was
    /// killed is there, or not, for good. Only stores a word, so a
    /// `SIGCHLD` handler may call it. The emulation calls it for every
    /// child a served program reaps. (A read through a file opened before
    /// is not ordered so; an `open` or `stat` after is.)
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let service = lintel_fs::Service::new(dir.path(), false).unwrap();
    /// # let fs = lintel_fs::Fs::from_door(service.door());
    /// let mut child = std::process::Command::new("true").spawn().unwrap();
    /// child.wait().unwrap();
    /// lintel_fs::Fs::child_reaped(child.id());
    /// assert!(fs.stat("what the child wrote").is_err()); // the service asked first
    /// ```
    pub fn child_reaped(pid: u32) {
        reaped::note(pid);
    }

    /// The export, told first of a change of credentials it has not heard
    /// of, and asked to settle the children reaped since it was last asked.
    fn export(&self) -> &ExportClient {
        credentials::tell(&self.told, || self.export.credentials_changed());
        reaped::ask(&self.reaped, |pid| {
            let _ = self.export.settle_dead(pid);
        });
        &self.export
    }

    /// The export's door, to pass to another domain.
    pub fn door(&self) -> &Door {
        self.export.door()
    }

    /// Open `path` for reading.
    pub fn open(&self, path: impl AsRef<Path>) -> Result<File, FsError> {
        self.open_with(path, OpenOptions::new().read(true))
    }

    /// Create `path` (or truncate it) for writing.
    pub fn create(&self, path: impl AsRef<Path>) -> Result<File, FsError> {
        self.open_with(path, OpenOptions::new().write(true).create(true).truncate(true))
    }

    /// Open `path` as `options` say.
    pub fn open_with(&self, path: impl AsRef<Path>, options: &OpenOptions) -> Result<File, FsError> {
        let flags = options.flags()?;
        let file = self.export().open(bytes(&path), flags, options.mode)?;
        Ok(self.finish_open(file, options, flags))
    }

    /// [`Fs::open_with`], and the open file's metadata (as
    /// [`File::metadata`] would give it just after) from the same call.
    pub fn open_with_stat(
        &self,
        path: impl AsRef<Path>,
        options: &OpenOptions,
    ) -> Result<(File, Stat), FsError> {
        let flags = options.flags()?;
        let (file, st) = self.export().open_stat(bytes(&path), flags, options.mode)?;
        Ok((self.finish_open(file, options, flags), st))
    }

    /// Open again the file `file` stands for, as `options` say, as Linux
    /// opens `/proc/self/fd/N` of it (the same file, even renamed or
    /// unlinked), and its metadata: see [`Fs::open_with_stat`].
    pub fn reopen_with_stat(&self, file: &File, options: &OpenOptions) -> Result<(File, Stat), FsError> {
        let flags = options.flags()?;
        let (reopened, st) = self
            .export()
            .reopen_stat(file.door().clone(), flags, options.mode)?;
        Ok((self.finish_open(reopened, options, flags), st))
    }

    /// `flags`: the open's, whichever way they were given.
    fn finish_open(&self, file: OpenFileClient, options: &OpenOptions, flags: u32) -> File {
        let readable = flags & OFlags::ACCMODE.bits() != OFlags::WRONLY.bits();
        let mut f = File::from_client(file);
        f.path = options.path;
        f.mapped_max = options.mapped_max;
        f.splice_min = options.splice_min;
        f.stream_min = options.stream_min;
        if options.path != IoPath::Copy && readable {
            // Attached at its first use (`Window`), the session made then;
            // directories and other files that cannot map stay on the copy
            // path then.
            f.window = Arc::new(Window::through(SessionSource {
                cell: self.session.clone(),
                export: self.export.clone(),
            }));
        }
        f
    }

    /// A key naming the open file `file`, for a program this process
    /// `exec`s to [`Fs::adopt`] it (offset shared).
    pub fn share(&self, file: &File) -> Result<[u8; 16], FsError> {
        self.export().share(file.door().clone())
    }

    /// The open file a key from [`Fs::share`] names, with its shared
    /// offset, mapped as `options` say.
    pub fn adopt(&self, key: [u8; 16], options: &OpenOptions) -> Result<File, FsError> {
        let file = self.export().adopt(key)?;
        let flags = options.flags().unwrap_or(OFlags::RDONLY.bits());
        Ok(self.finish_open(
            file,
            options,
            flags & !OFlags::ACCMODE.bits() | OFlags::RDWR.bits(),
        ))
    }

    /// A read-only host descriptor of the file `path` names, to `exec`
    /// ([`Export::exec_descriptor`]):
    /// `EACCES` where `execve` would refuse it.
    pub fn exec_descriptor(&self, path: impl AsRef<Path>) -> Result<std::os::fd::OwnedFd, FsError> {
        self.export.exec_descriptor(bytes(&path))
    }

    /// Make `path` a FIFO, socket, device or empty file, as `mknod(2)`
    /// does (see [`crate::proto::Export::mknod`]).
    pub fn mknod(&self, path: impl AsRef<Path>, mode: u32, dev: u64) -> Result<(), FsError> {
        self.export().mknod(bytes(&path), mode, dev)
    }

    /// Bind the Unix-domain socket `socket` to `path` (see
    /// [`crate::proto::Export::bind`]).
    pub fn bind(&self, path: impl AsRef<Path>, socket: std::os::fd::OwnedFd) -> Result<(), FsError> {
        self.export().bind(bytes(&path), socket)
    }

    /// Metadata of `path`, following symlinks.
    pub fn stat(&self, path: impl AsRef<Path>) -> Result<Stat, FsError> {
        self.export().stat(bytes(&path), true)
    }

    /// Metadata of `path` itself, even if it is a symlink.
    pub fn symlink_stat(&self, path: impl AsRef<Path>) -> Result<Stat, FsError> {
        self.export().stat(bytes(&path), false)
    }

    /// Whether this process may read, write or run `path` (`mode`: the
    /// bits of `R_OK`, `W_OK` and `X_OK`, or 0 for `F_OK`), as
    /// `faccessat2(2)` with `flags` (`AT_EACCESS`, `AT_SYMLINK_NOFOLLOW`)
    /// answers: checked by the service with this process's credentials.
    pub fn access(&self, path: impl AsRef<Path>, mode: u32, flags: u32) -> Result<(), FsError> {
        self.export().access(bytes(&path), mode, flags)
    }

    /// The entries of the directory `path` (without `.` and `..`).
    pub fn read_dir(&self, path: impl AsRef<Path>) -> Result<Vec<DirEntry>, FsError> {
        self.export().list(bytes(&path))
    }

    /// Make the directory `path` with permission bits `mode` (less this
    /// process's umask).
    pub fn create_dir(&self, path: impl AsRef<Path>, mode: u32) -> Result<(), FsError> {
        self.export().mkdir(bytes(&path), mode)
    }

    /// Remove the empty directory `path`.
    pub fn remove_dir(&self, path: impl AsRef<Path>) -> Result<(), FsError> {
        self.export().rmdir(bytes(&path))
    }

    /// Remove the name `path` (not a directory).
    pub fn remove_file(&self, path: impl AsRef<Path>) -> Result<(), FsError> {
        self.export().unlink(bytes(&path))
    }

    /// Move `from` to `to`, replacing whatever `to` names, as `rename(2)`
    /// does.
    pub fn rename(&self, from: impl AsRef<Path>, to: impl AsRef<Path>) -> Result<(), FsError> {
        self.export().rename(bytes(&from), bytes(&to))
    }

    /// Wait until no call that process `pid`, dead by now, made to the
    /// service still runs; whether none does (false: the service's
    /// timeout passed first). The service runs a call it has begun to its
    /// end even if its caller is killed meanwhile, so a process that reaps
    /// a killed client and then looks at the files asks this first, as
    /// Linux's killed process's system calls are over once it is reaped.
    /// The emulation asks it for every child a served program reaps.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let service = lintel_fs::Service::new(dir.path(), false).unwrap();
    /// let fs = lintel_fs::Fs::from_door(service.door());
    /// let mut child = std::process::Command::new("true").spawn().unwrap();
    /// child.wait().unwrap();
    /// assert!(fs.settle_dead(child.id()).unwrap());
    /// ```
    pub fn settle_dead(&self, pid: u32) -> Result<bool, FsError> {
        self.export.settle_dead(pid)
    }

    /// The exported file system's figures (`statfs(2)` of the root).
    pub fn statfs(&self) -> Result<FsStat, FsError> {
        self.export.statfs()
    }

    /// The target of the symlink `path`.
    pub fn read_link(&self, path: impl AsRef<Path>) -> Result<Vec<u8>, FsError> {
        self.export().read_link(bytes(&path))
    }

    /// Make `path` a symlink to `target`.
    pub fn symlink(&self, target: impl AsRef<Path>, path: impl AsRef<Path>) -> Result<(), FsError> {
        self.export().symlink(bytes(&target), bytes(&path))
    }

    /// Make `to` a hard link to the file `from`.
    pub fn hard_link(&self, from: impl AsRef<Path>, to: impl AsRef<Path>) -> Result<(), FsError> {
        self.export().link(bytes(&from), bytes(&to))
    }

    /// What the service has done for mapped windows (faults paged in,
    /// windows moved, tokens granted and recalled, clients evicted).
    pub fn counters(&self) -> Result<Counters, FsError> {
        self.export.counters()
    }

    /// Change `path`'s mode, owner or times (of a symlink itself when
    /// `follow` is false).
    pub fn set_attr(&self, path: impl AsRef<Path>, follow: bool, attr: Attr) -> Result<(), FsError> {
        self.export().set_attr(bytes(&path), follow, attr)
    }

    /// Whether the export refuses every change.
    pub fn is_read_only(&self) -> Result<bool, FsError> {
        self.export.read_only()
    }

    /// The whole of the file at `path`.
    pub fn read(&self, path: impl AsRef<Path>) -> Result<Vec<u8>, FsError> {
        let f = self.open(path)?;
        let mut all = Vec::new();
        let mut chunk = Vec::new();
        loop {
            f.file.read(MAX_IO, &mut chunk)?;
            if chunk.is_empty() {
                return Ok(all);
            }
            all.extend_from_slice(&chunk);
        }
    }

    /// Make `path` hold exactly `data`.
    pub fn write(&self, path: impl AsRef<Path>, data: &[u8]) -> Result<(), FsError> {
        let f = self.create(path)?;
        let mut at = 0;
        while at < data.len() {
            let n = f.file.write(&data[at..])? as usize;
            if n == 0 {
                return Err(rustix::io::Errno::NOSPC.into());
            }
            at += n;
        }
        f.close()
    }
}

fn bytes(path: &impl AsRef<Path>) -> &[u8] {
    path.as_ref().as_os_str().as_bytes()
}
