//! The host calls the service makes on a file it holds a descriptor of:
//! reopen it, read its metadata and entries, change its attributes.

use std::os::fd::{AsFd, OwnedFd};

use rustix::fs::{AtFlags, Mode, OFlags};

use crate::proto::{Attr, DirEntry, FsError, Kind, SetTime, Stat};

/// Descriptors the service's table is grown to hold when it starts (or
/// its soft limit, if lower): about 8 bytes of kernel memory each.
pub(crate) const DESCRIPTOR_TABLE: u64 = 16 << 10;

/// Grow this process's descriptor table now to [`DESCRIPTOR_TABLE`]
/// slots, by duplicating `fd` to the top slot and closing the copy.
///
/// The kernel grows a table by doubling it when a new descriptor does not
/// fit, and never shrinks it; in a process with more than one thread each
/// growth waits for an RCU grace period. Left to happen on the way, that
/// wait fell inside an `openat2` of the service's worker while its caller
/// waited: 1 to 18 ms, a few times per run of 20,000 served `open`s
/// (found with `perf sched`: the worker woken by `rcu_preempt` from
/// `expand_files`), which made the benchmark's 1,000-file `open`+`close`
/// cost 10× native against 4× at 100,000 files. Grown here, the wait comes
/// once, at the start, and none after unless the service holds more
/// descriptors than this.
pub(crate) fn reserve_descriptor_table(fd: &OwnedFd) {
    let top = table_wanted().saturating_sub(1);
    if let Ok(top) = i32::try_from(top)
        && top > 64
    {
        // The copy lands at `top` or above it (nothing, if every slot from
        // there is taken or over the limit): the table covers it either way.
        drop(rustix::io::fcntl_dupfd_cloexec(fd, top));
    }
}

/// The slots [`reserve_descriptor_table`] grows the table to: the soft
/// limit, if lower than [`DESCRIPTOR_TABLE`].
fn table_wanted() -> u64 {
    let soft = rustix::process::getrlimit(rustix::process::Resource::Nofile).current;
    soft.unwrap_or(u64::MAX).min(DESCRIPTOR_TABLE)
}

/// What the kernel names `fd`'s file (its `/proc/self/fd` link): a path,
/// with ` (deleted)` once it has no name, or `anon_inode:[kind]`.
pub(crate) fn link_of(fd: impl AsFd) -> std::io::Result<Vec<u8>> {
    use std::os::fd::AsRawFd;
    let link = std::fs::read_link(format!("/proc/self/fd/{}", fd.as_fd().as_raw_fd()))?;
    Ok(link.into_os_string().into_encoded_bytes())
}

/// `fd`'s file opened anew (a new open file description of the same
/// inode, permissions checked again) with `access`.
pub(crate) fn reopen(fd: &OwnedFd, access: OFlags) -> Result<OwnedFd, FsError> {
    use std::os::fd::AsRawFd;
    let path = format!("/proc/self/fd/{}", fd.as_raw_fd());
    Ok(rustix::fs::open(
        path.as_str(),
        access | OFlags::CLOEXEC,
        Mode::empty(),
    )?)
}

/// Apply `attr` to the file `fd` names (an `O_PATH` descriptor will do:
/// mode and times go through its `/proc/self/fd` link, the owner through
/// `AT_EMPTY_PATH`).
pub(crate) fn set_attr(fd: impl AsFd, attr: Attr) -> Result<(), FsError> {
    use rustix::fs::{CWD, Timespec as Ts, Timestamps};
    use std::os::fd::AsRawFd;
    let fd = fd.as_fd();
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

/// `fstat` of `fd`, as the protocol carries it.
pub(crate) fn stat_of(fd: impl AsFd) -> Result<Stat, FsError> {
    Ok(Stat::from_host(&rustix::fs::fstat(fd)?))
}

pub(crate) fn list_of(fd: impl AsFd) -> Result<Vec<DirEntry>, FsError> {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The kernel's descriptor table size for this process (`FDSize`).
    fn table_size() -> u64 {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let line = status.lines().find(|l| l.starts_with("FDSize:")).unwrap();
        line["FDSize:".len()..].trim().parse().unwrap()
    }

    /// A service's table holds its working set from the start: growing it
    /// later stalls an `open` for an RCU grace period.
    #[test]
    fn a_services_descriptor_table_is_grown_at_its_start() {
        let want = table_wanted();
        let dir = tempfile::tempdir().unwrap();
        let _service = crate::service::Service::new(dir.path(), false).unwrap();
        assert!(
            table_size() >= want,
            "table of {} slots, {want} wanted",
            table_size()
        );
    }
}
