//! `getdents64` of a served directory: the host file system's records and
//! cookies, read by the service at the open directory's shared position,
//! so a forked child reads on where its parent stopped, and `seekdir` to
//! a `d_off` (an `lseek` the service makes on the host) goes back there.

use super::{Emulation, R, err, fs_err};
use crate::user;

impl Emulation {
    pub(super) fn getdents(&self, fd: u64, buf: u64, count: u64) -> R {
        let s = self.served(fd)?;
        if !s.dir {
            return Some(err(libc::ENOTDIR));
        }
        let records = match s.file.read_dirents(count as usize) {
            Ok(r) => r,
            Err(e) => return Some(fs_err(e)),
        };
        if let Err(e) = user::write(buf, &records) {
            return Some(err(e));
        }
        Some(records.len() as i64)
    }
}
