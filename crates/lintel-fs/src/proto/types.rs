//! The values the interfaces carry: metadata ([`Stat`], [`FsStat`]),
//! directory entries, locks, attributes to set, seek origins, the
//! service's counters, and the largest I/O one call moves.

use lintel::stub::Wire;

/// Most bytes one `read` or `write` call moves; longer requests are short
/// reads and writes, as a Unix program must expect anyway.
pub const MAX_IO: u32 = 16 << 20;

/// A time stamp: seconds and nanoseconds since the epoch.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Wire)]
pub struct Timespec {
    /// Seconds since 1970-01-01 UTC.
    pub sec: i64,
    /// Nanoseconds within the second.
    pub nsec: u32,
}

/// A file's metadata, field for field what `stat(2)` reports.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Wire)]
pub struct Stat {
    /// Device of the host file system.
    pub dev: u64,
    /// Inode number.
    pub ino: u64,
    /// Type and permission bits (`S_IFMT`, `0o7777`).
    pub mode: u32,
    /// Hard links.
    pub nlink: u64,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Device, for device files.
    pub rdev: u64,
    /// Length in bytes.
    pub size: u64,
    /// Preferred I/O size.
    pub blksize: u64,
    /// 512-byte blocks allocated.
    pub blocks: u64,
    /// Last access.
    pub atime: Timespec,
    /// Last change of the contents.
    pub mtime: Timespec,
    /// Last change of the metadata.
    pub ctime: Timespec,
}

/// The exported file system's figures, field for field what `statfs(2)`
/// reports for the export's root.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Wire)]
pub struct FsStat {
    /// The file system's type (`f_type`).
    pub kind: u64,
    /// Block size (`f_bsize`).
    pub block_size: u64,
    /// Blocks in all, in `fragment_size` units (`f_blocks`).
    pub blocks: u64,
    /// Free blocks (`f_bfree`).
    pub blocks_free: u64,
    /// Free blocks an unprivileged user may use.
    pub blocks_available: u64,
    /// Inodes in all (`f_files`).
    pub files: u64,
    /// Free inodes (`f_ffree`).
    pub files_free: u64,
    /// Longest file name, in bytes (`f_namelen`).
    pub name_max: u64,
    /// Fragment size (`f_frsize`).
    pub fragment_size: u64,
    /// Mount flags (`f_flags`), with `ST_RDONLY` set for a read-only export.
    pub flags: u64,
}

/// A byte-range lock's kind (`F_RDLCK`, `F_WRLCK`, `F_UNLCK`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Wire)]
pub enum LockKind {
    /// Shared (`F_RDLCK`).
    Read,
    /// Exclusive (`F_WRLCK`).
    Write,
    /// No lock: drops what the range holds (`F_UNLCK`).
    Unlock,
}

/// A lock that stands in the way ([`OpenFile::test_lock`](crate::proto::OpenFile::test_lock)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Wire)]
pub struct LockHolder {
    /// Shared or exclusive.
    pub kind: LockKind,
    /// First byte of the locked range.
    pub start: u64,
    /// 0: to any end.
    pub len: u64,
    /// Always -1: the holder is another client's open file.
    pub pid: i32,
}

/// `S_IFMT` and the type values this crate tests for.
const S_IFMT: u32 = 0o170000;
const S_IFDIR: u32 = 0o040000;
const S_IFREG: u32 = 0o100000;
const S_IFLNK: u32 = 0o120000;

impl Stat {
    /// A directory?
    pub fn is_dir(&self) -> bool {
        self.mode & S_IFMT == S_IFDIR
    }
    /// A regular file?
    pub fn is_file(&self) -> bool {
        self.mode & S_IFMT == S_IFREG
    }
    /// A symbolic link (only from a `stat` that does not follow links)?
    pub fn is_symlink(&self) -> bool {
        self.mode & S_IFMT == S_IFLNK
    }
}

/// What kind of file a directory entry names (`d_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Wire)]
pub enum Kind {
    /// A regular file.
    File,
    /// A directory.
    Dir,
    /// A symbolic link.
    Symlink,
    /// A device, FIFO, socket, or a type the host did not report.
    Other,
}

/// One entry of a directory (never `.` or `..`).
#[derive(Debug, Clone, PartialEq, Eq, Wire)]
pub struct DirEntry {
    /// The name, as bytes.
    pub name: Vec<u8>,
    /// Inode number.
    pub ino: u64,
    /// What kind of file the entry names.
    pub kind: Kind,
}

impl Stat {
    /// The metadata the kernel gave for a host file.
    pub(crate) fn from_host(s: &rustix::fs::Stat) -> Stat {
        let time = |sec: i64, nsec: u64| Timespec {
            sec,
            nsec: nsec as u32,
        };
        Stat {
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
            atime: time(s.st_atime, s.st_atime_nsec),
            mtime: time(s.st_mtime, s.st_mtime_nsec),
            ctime: time(s.st_ctime, s.st_ctime_nsec),
        }
    }
}

/// What the service has done for mapped windows since it started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Wire)]
pub struct Counters {
    /// Page faults its pager resolved (each for a 64 KiB range).
    pub faults: u64,
    /// Windows it moved on a client's request.
    pub windows: u64,
    /// Tokens it granted.
    pub grants: u64,
    /// Tokens it took back from their holder.
    pub recalls: u64,
    /// Clients it evicted.
    pub evictions: u64,
    /// Calls on open files (the copy path: read, write, seek, stat, …).
    pub file_calls: u64,
    /// Bytes it moved into clients' pipes (spliced reads).
    pub spliced_bytes: u64,
    /// Splices that moved them (a read ahead is one for a pipeful).
    pub splices: u64,
    /// Of those, read aheads made after a reply, into a client's second
    /// pipe while it drained the first.
    pub filled_ahead: u64,
    /// 64 KiB chunks its pagers filled and mapped into clients ahead of
    /// their faults (see `Service::with_map_ahead`).
    pub mapped_ahead: u64,
    /// Descriptors of host files it handed to clients for their own reads,
    /// writes and syncs (`OpenFile::io_descriptor`).
    pub direct: u64,
    /// Bytes it wrote back from files' caches to the host when it took
    /// tokens back: what clients wrote through their windows.
    pub written_back: u64,
    /// Windows clients let go (`Session::detach`), each at its file's
    /// close.
    pub detached: u64,
}

/// How to set one of a file's times.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Wire)]
pub enum SetTime {
    /// Leave it as it is (`UTIME_OMIT`).
    Keep,
    /// The service's current time (`UTIME_NOW`).
    Now,
    /// This time.
    At(Timespec),
}

/// Attributes to change (`chmod`, `chown`, `utimensat`): `None` and
/// `SetTime::Keep` leave one as it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Wire)]
pub struct Attr {
    /// New permission bits (`0o7777`; other bits are ignored).
    pub mode: Option<u32>,
    /// New owner.
    pub uid: Option<u32>,
    /// New group.
    pub gid: Option<u32>,
    /// New last-access time.
    pub atime: SetTime,
    /// New last-modification time.
    pub mtime: SetTime,
}

impl Attr {
    /// Change nothing (set fields to change some).
    pub fn none() -> Attr {
        Attr {
            mode: None,
            uid: None,
            gid: None,
            atime: SetTime::Keep,
            mtime: SetTime::Keep,
        }
    }
}

/// Where a seek counts from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Wire)]
pub enum Whence {
    /// From the start of the file (`SEEK_SET`).
    Start,
    /// From the shared offset (`SEEK_CUR`).
    Current,
    /// From the end of the file (`SEEK_END`).
    End,
    /// `SEEK_DATA`: the first byte at or after the offset given (not a
    /// delta) that lies in data, as the host file system keeps the file;
    /// `ENXIO` at or past the end.
    Data,
    /// `SEEK_HOLE`: the first byte at or after the offset given that lies
    /// in a hole, the end of the file counting as one; `ENXIO` at or past
    /// the end.
    Hole,
}
