//! Unix-domain sockets at served paths: `bind` of one is made by the
//! service (the program's socket passed to it), and `connect` to one goes
//! through the socket file's `O_PATH` descriptor, so the connection is the
//! kernel's.

use lintel_fs::OpenOptions;

use std::os::unix::ffi::OsStrExt;

use super::{Emulation, R, err, fs_err};
use crate::trap;
use crate::user;

impl Emulation {
    /// The served path a Unix-domain socket address names, if it names
    /// one (abstract and unnamed addresses and other families do not), for
    /// socket `fd`: `ENOTSOCK` if `fd` is a served file, not a socket.
    fn socket_target(&self, fd: u64, addr: u64, len: u64) -> Result<Option<Vec<u8>>, i32> {
        let Some(rel) = self.socket_path(addr, len)? else {
            return Ok(None);
        };
        if self.served(fd).is_some() {
            return Err(libc::ENOTSOCK);
        }
        Ok(Some(rel))
    }

    /// The served path a Unix-domain socket address names, if any.
    fn socket_path(&self, addr: u64, len: u64) -> Result<Option<Vec<u8>>, i32> {
        let len = (len as usize).min(std::mem::size_of::<libc::sockaddr_un>());
        if len <= 2 {
            return Ok(None);
        }
        let mut raw = vec![0u8; len];
        user::read_into(addr, &mut raw)?;
        if u16::from_ne_bytes([raw[0], raw[1]]) != libc::AF_UNIX as u16 || raw[2] == 0 {
            return Ok(None);
        }
        let end = raw[2..].iter().position(|&b| b == 0).map_or(len, |i| i + 2);
        let mut path = raw[2..end].to_vec();
        path.push(0);
        self.path_at(libc::AT_FDCWD, path.as_ptr() as u64)
    }

    /// `bind` of a Unix-domain socket to a served path: the service binds
    /// the program's socket (a descriptor of it passed along), making the
    /// socket file beneath its root.
    pub(super) fn bind(&self, fd: u64, addr: u64, len: u64) -> R {
        let rel = match self.socket_target(fd, addr, len) {
            Ok(Some(rel)) => rel,
            Ok(None) => return None,
            Err(e) => return Some(err(e)),
        };
        let sock = match crate::trap::dup_owned(fd) {
            Ok(s) => s,
            Err(e) => return Some(e),
        };
        let os = std::ffi::OsStr::from_bytes;
        Some(self.fs.bind(os(&rel), sock).map_or_else(fs_err, |()| 0))
    }

    /// `connect` of a Unix-domain socket to a served path: the service
    /// hands over the socket file's `O_PATH` descriptor (as for an `open`
    /// of it) and the program connects through `/proc/self/fd`, so the
    /// kernel checks its access and the connection is the kernel's.
    pub(super) fn connect(&self, fd: u64, addr: u64, len: u64) -> R {
        use std::os::fd::AsRawFd;
        let rel = match self.socket_target(fd, addr, len) {
            Ok(Some(rel)) => rel,
            Ok(None) => return None,
            Err(e) => return Some(err(e)),
        };
        let mut o = OpenOptions::new();
        o.read(true)
            .custom_flags(libc::O_PATH as u32)
            .io_path(lintel_fs::IoPath::Copy);
        let file = match self.fs.open_with(std::ffi::OsStr::from_bytes(&rel), &o) {
            Ok(f) => f,
            Err(e) => return Some(fs_err(e)),
        };
        let path_fd = match file.metadata() {
            Ok(st) if st.mode & libc::S_IFMT == libc::S_IFSOCK => file.path_descriptor(),
            Ok(_) => return Some(err(libc::ECONNREFUSED)),
            Err(e) => return Some(fs_err(e)),
        };
        let path_fd = match path_fd {
            Ok(p) => p,
            Err(e) => return Some(fs_err(e)),
        };
        let mut sun: libc::sockaddr_un = lintel_sys::pod::zeroed();
        sun.sun_family = libc::AF_UNIX as u16;
        let path = format!("/proc/self/fd/{}", path_fd.as_raw_fd());
        for (d, s) in sun.sun_path.iter_mut().zip(path.bytes()) {
            *d = s as libc::c_char;
        }
        let len = std::mem::size_of::<libc::sa_family_t>() + path.len() + 1;
        Some(trap::raw_syscall(
            libc::SYS_connect,
            [fd, &sun as *const libc::sockaddr_un as u64, len as u64, 0, 0, 0],
        ))
    }
}
