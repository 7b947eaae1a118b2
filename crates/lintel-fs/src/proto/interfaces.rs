//! The file service's three interfaces.
//!
//! [`Export`] is the door to an exported directory: it opens files
//! (returning one [`OpenFile`] door per open) and changes the namespace.
//! [`OpenFile`] is the door to one open file description: the offset is
//! the service's, so every holder of the door shares it, as Unix processes
//! share an offset after `fork`. [`Session`] is a client process's door
//! for mapped windows, next to the page it shares with the service
//! ([`crate::proto::token`]). Paths are bytes (Linux names need not be
//! UTF-8), relative to the export's root.

use std::os::fd::OwnedFd;

use lintel::Door;

use crate::proto::FsError;
use crate::proto::types::{Attr, Counters, DirEntry, FsStat, LockHolder, LockKind, Stat, Whence};

/// Smallest and largest window a client may ask for
/// ([`Session::window`]'s `len`, a power of two).
pub(crate) const MIN_WINDOW: u64 = 4096;
pub(crate) const MAX_WINDOW: u64 = 64 << 20;

/// An exported directory.
#[lintel::interface]
pub trait Export {
    /// Open `path` with Linux `open(2)` flags (`O_RDONLY`, `O_WRONLY`,
    /// `O_RDWR`, `O_CREAT`, `O_EXCL`, `O_TRUNC`, `O_APPEND`,
    /// `O_DIRECTORY`, `O_NOFOLLOW`, `O_SYNC`, `O_DSYNC`, `O_NOATIME`;
    /// `O_CLOEXEC`, `O_NONBLOCK`, `O_NOCTTY` and `O_LARGEFILE` are
    /// accepted and mean nothing here). `mode` is used when creating.
    /// With `O_PATH` (which, as on Linux, ignores every flag but
    /// `O_DIRECTORY` and `O_NOFOLLOW`) the open only stands for the file
    /// (a symlink itself, with `O_NOFOLLOW`): it answers `stat` and
    /// `set_attr`; reading, writing or locking it is `EBADF`. A FIFO, socket
    /// or device is never opened: the open stands for it as an `O_PATH`
    /// one does, and [`OpenFile::path_descriptor`] hands it to the client.
    fn open(&self, path: &[u8], flags: u32, mode: u32) -> Result<OpenFileClient, FsError>;
    /// Metadata of `path`; of a symlink itself when `follow` is false.
    fn stat(&self, path: &[u8], follow: bool) -> Result<Stat, FsError>;
    /// The entries of the directory `path`.
    fn list(&self, path: &[u8]) -> Result<Vec<DirEntry>, FsError>;
    /// Make the directory `path` with permission bits `mode` (less the
    /// caller's umask).
    fn mkdir(&self, path: &[u8], mode: u32) -> Result<(), FsError>;
    /// Remove the empty directory `path`.
    fn rmdir(&self, path: &[u8]) -> Result<(), FsError>;
    /// Remove the name `path` (not a directory).
    fn unlink(&self, path: &[u8]) -> Result<(), FsError>;
    /// Move `from` to `to`, replacing whatever `to` names, as `rename(2)`
    /// does.
    fn rename(&self, from: &[u8], to: &[u8]) -> Result<(), FsError>;
    /// Whether the export refuses every change.
    fn read_only(&self) -> Result<bool, FsError>;
    /// A key that names the open file `file` (a door of this export) for
    /// [`Export::adopt`]: how a process hands an open file, offset and
    /// all, to a program it `exec`s, which has no doors yet. Whoever
    /// holds the key can adopt the file (128 random bits; the service
    /// keeps the most recent 4096).
    fn share(&self, file: Door) -> Result<[u8; 16], FsError>;
    /// The open file a key from [`Export::share`] names.
    fn adopt(&self, key: [u8; 16]) -> Result<OpenFileClient, FsError>;
    /// Change `path`'s mode, owner or times (of a symlink itself when
    /// `follow` is false: owner and times only).
    fn set_attr(&self, path: &[u8], follow: bool, attr: Attr) -> Result<(), FsError>;
    /// The target of the symlink `path` (`EINVAL` if it is not one).
    fn read_link(&self, path: &[u8]) -> Result<Vec<u8>, FsError>;
    /// Make `path` a symlink to `target` (any bytes: following it later
    /// stays beneath the root, as every lookup does).
    fn symlink(&self, target: &[u8], path: &[u8]) -> Result<(), FsError>;
    /// Make `to` a new name of the file `from` (a hard link).
    fn link(&self, from: &[u8], to: &[u8]) -> Result<(), FsError>;
    /// The exported file system's figures (`statfs(2)` of the root).
    fn statfs(&self) -> Result<FsStat, FsError>;
    /// What the service has done for mapped windows.
    fn counters(&self) -> Result<Counters, FsError>;
    /// Start a session for mapped windows: the caller's userfaultfd (the
    /// service pages the caller's windows through it) and an eventfd the
    /// service signals if it evicts the session. Returns the session's
    /// door and its shared page (a memfd of [`crate::proto::token::PAGE_LEN`]
    /// bytes, sealed against resizing).
    fn session(&self, uffd: OwnedFd, evicted: OwnedFd) -> Result<(SessionClient, OwnedFd), FsError>;
    /// `faccessat2(2)` of `path`: whether the caller may read, write or
    /// run it (`mode`: `R_OK`, `W_OK`, `X_OK`, or `F_OK` (0)), with its real
    /// ids unless `flags` has `AT_EACCESS`; of a symlink itself with
    /// `AT_SYMLINK_NOFOLLOW`.
    fn access(&self, path: &[u8], mode: u32, flags: u32) -> Result<(), FsError>;
    /// The caller changed its credentials or umask: the service reads
    /// them again (from the kernel) before its next call.
    fn credentials_changed(&self) -> Result<(), FsError>;
    /// A read-only descriptor of the host file `path` names (symlinks
    /// followed), for the caller to `exec` (`execveat(fd, "", …,
    /// AT_EMPTY_PATH)`): the kernel cannot open the prefix's paths. Given
    /// once the kernel's own check for `exec` passes in the service
    /// (`faccessat2(…, X_OK, AT_EACCESS)`, then a regular file, else
    /// `EACCES`, as Linux answers), with the file's token taken back, so
    /// what a client wrote through its window is in the host file. On a
    /// read-only export, the file on a read-only mount of its own (as
    /// [`OpenFile::map_descriptor`] gives). Needs read permission too (the
    /// caller reads a script's `#!` line through it).
    fn exec_descriptor(&self, path: &[u8]) -> Result<OwnedFd, FsError>;
    /// Make `path` a FIFO, socket, device or empty regular file, as
    /// `mknod(2)` does with `mode` (type and permission bits) and `dev`
    /// (a device's number): a device needs what Linux needs of whoever
    /// the service acts for (`CAP_MKNOD`), and is never opened by the
    /// service ([`Export::open`]).
    fn mknod(&self, path: &[u8], mode: u32, dev: u64) -> Result<(), FsError>;
    /// Bind `socket`, a Unix-domain socket of the caller's, to `path`, as
    /// `bind(2)` does: the socket file is made beneath the root with the
    /// caller's credentials and umask (`EADDRINUSE` if the name is taken).
    /// The caller's socket is bound (the descriptor shares its socket).
    fn bind(&self, path: &[u8], socket: OwnedFd) -> Result<(), FsError>;
    /// [`Export::open`], and the open file's metadata as
    /// [`OpenFile::stat`] answers it just after, in one call: a program
    /// that opens a file and asks what it is (the emulation of `open`
    /// does, to tell directories and devices) pays one round trip.
    fn open_stat(&self, path: &[u8], flags: u32, mode: u32) -> Result<(OpenFileClient, Stat), FsError>;
    /// Wait until no call that process `pid`, dead by now, made to the
    /// service still runs (at most the service's timeout); whether none
    /// does. The service runs a call it has begun to its end even if the
    /// caller dies meanwhile: a process that reaps a killed client and
    /// then looks at the files asks this first, as a killed process's
    /// system calls are over once Linux has reaped it (`lintel::settle_dead`).
    fn settle_dead(&self, pid: u32) -> Result<bool, FsError>;
    /// Open again the file that `file` (an open-file door of this export)
    /// stands for, with `flags`, as Linux opens `/proc/self/fd/N` of it:
    /// the same file even once it was renamed or unlinked, its access
    /// checked as the caller's, `O_TRUNC` and `O_EXCL` as on that path.
    /// A FIFO, socket or device is not opened, as with [`Export::open`].
    /// Its metadata comes back as with [`Export::open_stat`].
    fn reopen_stat(&self, file: Door, flags: u32, mode: u32) -> Result<(OpenFileClient, Stat), FsError>;
}

/// What [`Session::attach`] hands back: the descriptor's number, the
/// cache, the host file (if any), whether that is the open's own open
/// file description, the bytes to map, and whether the mapping may be
/// written.
pub type Attached = (u32, OwnedFd, Option<OwnedFd>, bool, u64, bool);

/// A client process's mapped windows on one export: descriptors in the
/// shared page, one per open file it maps, each with its token.
#[lintel::interface]
pub trait Session {
    /// Give `file` (an open-file door of this export, regular and
    /// readable) a descriptor. Returns the descriptor's number, the file's
    /// cache (a memfd, read-only unless the file was opened for writing),
    /// a descriptor of the host file (writing at the offsets given: the
    /// client writes back what it wrote through its window should the
    /// service die, its keeper; and reads through it while it holds the
    /// token with nothing dirty; it opened the file so, so this gives it
    /// nothing more; none for a read-only file of a read-only export),
    /// whether that descriptor is the open's own open file description
    /// (its byte-range locks are the open's: the client takes them
    /// without a call), the bytes to map of the cache, and whether the
    /// mapping may be written. One call for both descriptors: each reply
    /// that carries descriptors waits for the connection's socket.
    fn attach(&self, file: Door) -> Result<Attached, FsError>;
    /// The client mapped the cache at `base` and registered the mapping
    /// with its userfaultfd.
    fn mapped(&self, slot: u32, base: u64) -> Result<(), FsError>;
    /// Grant the descriptor the file's token (taking it from whoever has it).
    fn acquire(&self, slot: u32) -> Result<(), FsError>;
    /// Move the window to the `len`-byte aligned range holding `at`, with
    /// its pages mapped in the client: the caller holds the token active.
    /// Returns the window (offset, length).
    fn window(&self, slot: u32, at: u64, len: u64) -> Result<(u64, u64), FsError>;
    /// Splice up to `len` bytes of the file at `at` into pipe `pipe`
    /// attached to the descriptor's open file, as
    /// [`OpenFile::read_spliced_at`] does, but without taking the token
    /// back: the caller holds it active, with nothing written, so the host
    /// file is current, and it reads ahead in the pipe while the token
    /// stays with it. Returns how many. If all `len` came and `next` (not
    /// 0) names another pipe of the client's, empty, the service fills it
    /// with the `len` bytes that follow after replying, while the client
    /// drains `pipe`: a call for `next` from where `pipe`'s bytes end finds
    /// them there (a call for it from anywhere else is refused).
    fn read_ahead(&self, slot: u32, pipe: u32, at: u64, len: u32, next: u32) -> Result<u32, FsError>;
    /// Make the cache cover the file's first `end` bytes, so that a view
    /// of them faults into the pager rather than past the memfd's end.
    /// Returns the bytes covered.
    fn extent(&self, slot: u32, end: u64) -> Result<u64, FsError>;
    /// The client is done with the descriptor: the token comes back (what
    /// it wrote is written to the file) and the number is free again.
    fn detach(&self, slot: u32) -> Result<(), FsError>;
}

/// One open file description.
#[lintel::interface]
pub trait OpenFile {
    /// Up to `len` bytes (at most [`MAX_IO`](crate::proto::MAX_IO)) at the shared offset, which
    /// advances past them. Fewer bytes, or none, at the end of the file.
    fn read(&self, len: u32, data: &mut Vec<u8>) -> Result<(), FsError>;
    /// Write at the shared offset (at the end, if opened `O_APPEND`),
    /// advancing it; returns the bytes written.
    fn write(&self, data: &[u8]) -> Result<u64, FsError>;
    /// Up to `len` bytes at `at`; the offset does not move.
    fn read_at(&self, at: u64, len: u32, data: &mut Vec<u8>) -> Result<(), FsError>;
    /// Write at `at` (Linux appends instead if opened `O_APPEND`); the
    /// offset does not move.
    fn write_at(&self, at: u64, data: &[u8]) -> Result<u64, FsError>;
    /// Attach the write end of a pipe of the caller's for
    /// [`read_spliced_at`](OpenFile::read_spliced_at) and
    /// [`read_spliced`](OpenFile::read_spliced); returns its number. At
    /// most [`MAX_PIPES`](crate::MAX_PIPES) per open file (one
    /// per process reading it; a pipe that lost its reader makes room), and
    /// a number is never given out twice.
    fn attach_pipe(&self, pipe: OwnedFd) -> Result<u32, FsError>;
    /// As [`read_at`](OpenFile::read_at), but the bytes go into attached pipe
    /// `pipe`, moved by the kernel as page references (`splice`), not
    /// through the call; returns how many. The caller reads them out
    /// before it calls again with that pipe. An `Invalid` error says the
    /// pipe (or the file) cannot be used this way: read through the call.
    fn read_spliced_at(&self, pipe: u32, at: u64, len: u32) -> Result<u32, FsError>;
    /// [`read_spliced_at`](OpenFile::read_spliced_at) at the shared
    /// offset, which advances past the bytes (arguments small enough for
    /// lintel's fast path).
    fn read_spliced(&self, pipe: u32, len: u32) -> Result<u32, FsError>;
    /// A descriptor of the host file, opened as this open file was (for
    /// reading, or reading and writing; never appending), for a shared
    /// mapping (`mmap(MAP_SHARED)`): the mapping then shares the host's
    /// page cache with every copy-path call. Tokens are taken back first
    /// and none is granted again while the file stays open anywhere
    /// (mapped windows show the service's cache, which such a mapping
    /// does not see): its clients read and write through calls. On a
    /// read-only export the descriptor is the file on a read-only mount
    /// of its own (a descriptor of the export's mount would let its holder
    /// change the file's mode or times), and windows stay, since nobody
    /// writes through the service; `ENODEV` where no such mount can be
    /// made. Refused (`EACCES`) for a write-only open.
    fn map_descriptor(&self) -> Result<OwnedFd, FsError>;
    /// A descriptor of the host file for reads and writes at given
    /// offsets and syncs that the client makes itself (`pread`, `pwrite`,
    /// `fdatasync`, `fsync`): the open's own open file description, so
    /// its flags hold as on Linux (`O_APPEND` makes `pwrite` append, an
    /// open for reading only refuses writes). Given only while the file
    /// has no cache (no window or view of it was made while it is open);
    /// from then on, as after [`map_descriptor`](OpenFile::map_descriptor),
    /// no window is made of it while it stays open anywhere, and its
    /// clients read and write through calls or such descriptors, which
    /// all share the host's page cache. It gives the holder nothing it
    /// could not do through calls on this open file, but it stays the
    /// holder's: revoking the open (an evicted client's) does not take it
    /// back. Refused with `EBUSY`
    /// where the file has a cache, `EROFS` on a read-only export (whose
    /// files their owner could change through a descriptor), and `EBADF`
    /// for anything but a regular file opened to read or write.
    fn io_descriptor(&self) -> Result<OwnedFd, FsError>;
    /// Move the shared offset; returns it.
    fn seek(&self, whence: Whence, offset: i64) -> Result<u64, FsError>;
    /// The open file's metadata (`fstat`), taken once any token is back,
    /// so the size and times include what clients wrote through windows.
    fn stat(&self) -> Result<Stat, FsError>;
    /// Set the file's length to `len` (`ftruncate`); `EINVAL` for a FIFO,
    /// socket or device.
    fn truncate(&self, len: u64) -> Result<(), FsError>;
    /// `fallocate(2)` of `[offset, offset + len)` with its `mode` bits
    /// (`FALLOC_FL_KEEP_SIZE`, `FALLOC_FL_PUNCH_HOLE`,
    /// `FALLOC_FL_ZERO_RANGE`, …), answered by the host file system:
    /// mode 0 allocates and may extend the file, a punched or zeroed
    /// range reads as zeros afterwards; a mode the host refuses is its
    /// errno (`EOPNOTSUPP`), an open not for writing `EBADF`.
    fn allocate(&self, mode: u32, offset: u64, len: u64) -> Result<(), FsError>;
    /// Whether writes through this open file append (its `O_APPEND`
    /// status flag); with `Some`, set it first, for every holder of the
    /// door, as `fcntl(F_SETFL)` sets it on a Unix file description.
    fn append(&self, set: Option<bool>) -> Result<bool, FsError>;
    /// `fsync` (or `fdatasync` when `data_only`): the data is on the host
    /// file system's storage when this returns.
    fn sync(&self, data_only: bool) -> Result<(), FsError>;
    /// The caller is done with the file: anything it left to write back
    /// is written, and a write error not yet reported is reported. Other
    /// holders of the door are unaffected.
    fn close(&self) -> Result<(), FsError>;
    /// The entries of an open directory.
    fn list(&self) -> Result<Vec<DirEntry>, FsError>;
    /// `getdents64(2)` of an open directory: up to `len` bytes (at most
    /// [`MAX_IO`](crate::proto::MAX_IO)) of whole `linux_dirent64` records from the
    /// shared offset, which advances past them (every holder of the open
    /// directory, a forked child's too, reads on from there; `seek` to a
    /// record's `d_off` goes back to it). None at the end; `EINVAL` if the
    /// next record does not fit.
    fn entries(&self, len: u32, records: &mut Vec<u8>) -> Result<(), FsError>;
    /// Change the open file's mode, owner or times.
    fn set_attr(&self, attr: Attr) -> Result<(), FsError>;
    /// Take, change or drop (`Unlock`) an advisory lock on `[start, start
    /// + len)` (`len` 0: to any end), held by this open file as Linux's
    /// open-file-description locks are. With `wait`, waits until no other
    /// open file's lock conflicts, or the call's deadline passes or it is
    /// cancelled (as `F_SETLKW`); without, `EAGAIN` at once.
    fn lock(&self, kind: LockKind, start: u64, len: u64, wait: bool) -> Result<(), FsError>;
    /// The first lock of another open file that would conflict with
    /// `kind` on the range (as `F_GETLK`).
    fn test_lock(&self, kind: LockKind, start: u64, len: u64) -> Result<Option<LockHolder>, FsError>;
    /// The caller changed its credentials or umask
    /// ([`Export::credentials_changed`], for a holder of an open file only).
    fn credentials_changed(&self) -> Result<(), FsError>;
    /// Take, change or drop (`Unlock`) a `flock(2)` lock on the whole
    /// file (`Read`: shared, `Write`: exclusive), held by this open file
    /// as Linux holds `flock` locks: whatever its access mode, and apart
    /// from the byte-range locks of [`OpenFile::lock`] (neither kind
    /// conflicts with the other). With `wait`, as [`OpenFile::lock`]
    /// waits; without, `EAGAIN` at once.
    fn flock(&self, kind: LockKind, wait: bool) -> Result<(), FsError>;
    /// The host's `O_PATH` descriptor of the FIFO, socket or device this
    /// open stands for ([`Export::open`] opens none of them): the client
    /// opens it through `/proc/self/fd`, so the kernel checks the client's
    /// access and a FIFO's open waits in the client for the other end, as
    /// on Linux. `EINVAL` for any other open.
    fn path_descriptor(&self) -> Result<OwnedFd, FsError>;
    /// Where the file is now, relative to the export's root, as the
    /// kernel names it (`/proc/self/fd`): after a rename, the new path;
    /// with no name left, the last one and ` (deleted)`. `EXDEV` if it is
    /// no longer beneath the root.
    fn current_path(&self) -> Result<Vec<u8>, FsError>;
}
