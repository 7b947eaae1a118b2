//! `getdents64` of a served directory: its entries, listed by the service
//! once (again after a `rewinddir`), handed out as `linux_dirent64`
//! records.

use lintel_fs::Kind;

use super::{Emulation, R, err, fs_err};
use crate::user;

impl Emulation {
    pub(super) fn getdents(&self, fd: u64, buf: u64, count: u64) -> R {
        let s = self.served(fd)?;
        if !s.dir {
            return Some(err(libc::ENOTDIR));
        }
        let mut listing = s.listing.lock();
        if listing.is_none() {
            match s.file.read_dir() {
                Ok(entries) => *listing = Some((dirents(&entries), 0)),
                Err(e) => return Some(fs_err(e)),
            }
        }
        let (records, pos) = listing.as_mut().expect("filled above");
        // Whole records that fit.
        let mut end = *pos;
        while end < records.len() {
            let reclen = u16::from_ne_bytes([records[end + 16], records[end + 17]]) as usize;
            if end + reclen - *pos > count as usize {
                break;
            }
            end += reclen;
        }
        if end == *pos && end < records.len() {
            return Some(err(libc::EINVAL));
        }
        let n = end - *pos;
        if let Err(e) = user::write(buf, &records[*pos..end]) {
            return Some(err(e));
        }
        *pos = end;
        Some(n as i64)
    }
}

/// A directory's entries as `linux_dirent64` records, `.` and `..` first.
fn dirents(entries: &[lintel_fs::DirEntry]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut put = |ino: u64, kind: u8, name: &[u8]| {
        let reclen = (19 + name.len() + 1).next_multiple_of(8);
        let start = out.len();
        out.extend_from_slice(&ino.to_ne_bytes());
        out.extend_from_slice(&((start + reclen) as i64).to_ne_bytes());
        out.extend_from_slice(&(reclen as u16).to_ne_bytes());
        out.push(kind);
        out.extend_from_slice(name);
        out.resize(start + reclen, 0);
    };
    put(1, libc::DT_DIR, b".");
    put(1, libc::DT_DIR, b"..");
    for e in entries {
        let kind = match e.kind {
            Kind::File => libc::DT_REG,
            Kind::Dir => libc::DT_DIR,
            Kind::Symlink => libc::DT_LNK,
            Kind::Other => libc::DT_UNKNOWN,
        };
        put(e.ino, kind, &e.name);
    }
    out
}
